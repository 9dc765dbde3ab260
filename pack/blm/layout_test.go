package blm

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"
	"testing/iotest"

	"lithos/formats"
)

// naivePack is an independent, element-by-element statement of the layout, written from the
// issue's and docs/blm.md's wording rather than from the packer: every code and every block
// scale is put where the formulas say, in a zeroed buffer.
//
//	stripe s of row r = columns [s·W, (s+1)·W); its unit = [codes | scale slots | zeros], U bytes
//	rows fold: in block b, row r sits in step t = (r mod 16) / F at lane l = ((r mod 16) mod F)·L + s
//	word j of (t, l) lives at b·BlockBytes + ((t·U/16 + j)·32 + l)·16
func naivePack(g Geometry, src Rows) []byte {
	out := make([]byte, g.TotalBytes)
	L, F, W, U := int64(g.Lanes), int64(g.Fold), int64(g.Stripe), int64(g.UnitBytes)
	unitByte := func(row, s, i int64) int64 { // address of byte i of the unit of (row, s)
		b, r := row/16, row%16
		t, l := r/F, (r%F)*L+s
		j := i / 16
		return b*g.BlockBytes + ((t*U/16+j)*32+l)*16 + i%16
	}
	bits := map[formats.Format]int64{formats.BF16: 16, formats.F16: 16, formats.FP8: 8, formats.Int8: 8, formats.Int4: 4, formats.NVFP4: 4}[g.Format]
	rowCodes := g.K * bits / 8
	elem := int64(0)
	if g.GroupSize > 0 {
		elem = g.ScaleRowBytes() / (g.K / int64(g.GroupSize))
	}
	for row := int64(0); row < g.N; row++ {
		for c := int64(0); c < g.K; c++ {
			s := c / W
			bit := (c - s*W) * bits
			switch bits {
			case 4:
				code := src.Codes[row*rowCodes+c/2] >> (4 * (c % 2)) & 0xF
				out[unitByte(row, s, bit/8)] |= code << (bit % 8)
			default:
				for i := int64(0); i < bits/8; i++ {
					out[unitByte(row, s, bit/8+i)] = src.Codes[row*rowCodes+c*bits/8+i]
				}
			}
		}
		if g.GroupSize == 0 {
			continue
		}
		groups := g.K / int64(g.GroupSize)
		for s := int64(0); s < L; s++ {
			// The groups stripe s touches, in order: slot 0 holds the first.
			slot := int64(0)
			last := int64(-1)
			for c := s * W; c < (s+1)*W && c < g.K; c++ {
				q := c / int64(g.GroupSize)
				if q == last {
					continue
				}
				last = q
				at := int64(g.PayloadBytes) + slot*int64(g.ScaleSlotBytes)
				for i := int64(0); i < elem; i++ {
					out[unitByte(row, s, at+i)] = src.Scales[(row*groups+q)*elem+i]
					if src.Biases != nil {
						out[unitByte(row, s, at+elem+i)] = src.Biases[(row*groups+q)*elem+i]
					}
				}
				slot++
			}
		}
	}
	return out
}

// shapeCases yields every test format with many K (ragged, narrow, not multiples of 512), N
// (not multiples of 16) and every lane count, the policy's included.
func shapeCases(t *testing.T, fn func(t *testing.T, g Geometry)) {
	r := rand.New(rand.NewPCG(7, 7))
	for _, ts := range testSpecs {
		for _, k := range kValues(ts.kq) {
			lanes := []int{0, laneChoices[r.IntN(len(laneChoices))]}
			if k <= 128 {
				lanes = append([]int{0}, laneChoices[:]...)
			}
			for _, l := range lanes {
				n := []int64{1, 5, 16, 17, 31, 40}[r.IntN(6)]
				s := ts.spec
				s.N, s.K, s.Lanes = n, k, l
				g := mustGeometry(t, s)
				t.Run(fmt.Sprintf("%s/N=%d/K=%d/lanes=%d", ts.name, n, k, g.Lanes), func(t *testing.T) { fn(t, g) })
			}
		}
	}
}

// TestPackMatchesNaive compares the block packer with the element-by-element statement of the
// layout, and the address helpers with it.
func TestPackMatchesNaive(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	shapeCases(t, func(t *testing.T, g Geometry) {
		src := randomRows(r, g, int(g.N))
		got := make([]byte, g.TotalBytes)
		if err := g.PackRows(got, src); err != nil {
			t.Fatal(err)
		}
		want := naivePack(g, src)
		if i := firstMismatch(got, want); i >= 0 {
			t.Fatalf("packed byte %d = 0x%02x, naive layout 0x%02x", i, got[i], want[i])
		}
		// Element and Scale point at the code and the scale of random elements.
		for range 50 {
			row, col := r.Int64N(g.N), r.Int64N(g.K)
			off, shift, err := g.Element(row, col)
			if err != nil {
				t.Fatal(err)
			}
			switch g.Format {
			case formats.NVFP4, formats.Int4:
				wantCode := src.Codes[row*g.CodeRowBytes()+col/2] >> (4 * (col % 2)) & 0xF
				if got := got[off] >> shift & 0xF; got != wantCode {
					t.Fatalf("Element(%d, %d) holds code %x, want %x", row, col, got, wantCode)
				}
			default:
				eb := g.CodeRowBytes() / g.K
				if !bytes.Equal(got[off:off+eb], src.Codes[row*g.CodeRowBytes()+col*eb:][:eb]) {
					t.Fatalf("Element(%d, %d) does not hold the code", row, col)
				}
			}
			if g.GroupSize == 0 {
				if _, err := g.Scale(row, col); err == nil {
					t.Fatalf("Scale on %s: no error", g.Format)
				}
				continue
			}
			so, err := g.Scale(row, col)
			if err != nil {
				t.Fatal(err)
			}
			e := g.ScaleRowBytes() / (g.K / int64(g.GroupSize))
			q := col / int64(g.GroupSize)
			if !bytes.Equal(got[so:so+e], src.Scales[row*g.ScaleRowBytes()+q*e:][:e]) {
				t.Fatalf("Scale(%d, %d) does not hold group %d's scale", row, col, q)
			}
		}
	})
}

func firstMismatch(a, b []byte) int {
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

// TestRoundTrip is the property: for random matrices of every format and many shapes
// (K not a multiple of 512, N not a multiple of 16, every lane count), unpack(pack(x)) == x bit
// for bit, in memory, block by block and streamed through readers that return short reads.
func TestRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	ctx := context.Background()
	shapeCases(t, func(t *testing.T, g Geometry) {
		src := randomRows(r, g, int(g.N))
		packed := make([]byte, g.TotalBytes)
		if err := g.PackRows(packed, src); err != nil {
			t.Fatal(err)
		}
		back := g.NewRows(int(g.N))
		if err := g.UnpackRows(back, packed); err != nil {
			t.Fatal(err)
		}
		equalRows(t, back, src)

		// Block by block.
		for b := int64(0); b < g.Blocks; b++ {
			n := g.blockRows(b)
			r0 := int(b) * 16
			blk := make([]byte, g.BlockBytes)
			part := sliceRows(g, src, r0, n)
			if err := g.PackBlock(blk, b, part); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(blk, packed[b*g.BlockBytes:(b+1)*g.BlockBytes]) {
				t.Fatalf("PackBlock(%d) differs from PackRows", b)
			}
			out := g.NewRows(n)
			if err := g.UnpackBlock(out, b, blk); err != nil {
				t.Fatal(err)
			}
			equalRows(t, out, part)
		}

		// Streamed, with one-byte and half reads.
		var buf bytes.Buffer
		written, err := Pack(ctx, &buf, g, sourceOf(src, iotest.HalfReader))
		if err != nil {
			t.Fatal(err)
		}
		if written != g.TotalBytes || !bytes.Equal(buf.Bytes(), packed) {
			t.Fatalf("Pack wrote %d bytes, differing from PackRows (%d)", written, g.TotalBytes)
		}
		sink, got := newSink(g)
		if err := Unpack(ctx, sink, g, iotest.OneByteReader(bytes.NewReader(packed))); err != nil {
			t.Fatal(err)
		}
		equalRows(t, got(), src)
	})
}

func sliceRows(g Geometry, r Rows, r0, n int) Rows {
	cb, sb, bb := int(g.CodeRowBytes()), int(g.ScaleRowBytes()), int(g.BiasRowBytes())
	out := Rows{Codes: r.Codes[r0*cb : (r0+n)*cb]}
	if sb > 0 {
		out.Scales = r.Scales[r0*sb : (r0+n)*sb]
	}
	if bb > 0 {
		out.Biases = r.Biases[r0*bb : (r0+n)*bb]
	}
	return out
}

func equalRows(t *testing.T, got, want Rows) {
	t.Helper()
	for _, c := range []struct {
		name string
		g, w []byte
	}{{"codes", got.Codes, want.Codes}, {"scales", got.Scales, want.Scales}, {"biases", got.Biases, want.Biases}} {
		if i := firstMismatch(c.g, c.w); i >= 0 {
			t.Fatalf("%s differ at byte %d (%d vs %d bytes)", c.name, i, len(c.g), len(c.w))
		}
	}
}

func sourceOf(r Rows, wrap func(io.Reader) io.Reader) Source {
	s := Source{Codes: wrap(bytes.NewReader(r.Codes))}
	if r.Scales != nil {
		s.Scales = wrap(bytes.NewReader(r.Scales))
	}
	if r.Biases != nil {
		s.Biases = wrap(bytes.NewReader(r.Biases))
	}
	return s
}

func newSink(g Geometry) (Sink, func() Rows) {
	var c, s, b bytes.Buffer
	sink := Sink{Codes: &c}
	if g.ScaleRowBytes() > 0 {
		sink.Scales = &s
	}
	if g.BiasRowBytes() > 0 {
		sink.Biases = &b
	}
	return sink, func() Rows {
		r := Rows{Codes: c.Bytes()}
		if sink.Scales != nil {
			r.Scales = s.Bytes()
		}
		if sink.Biases != nil {
			r.Biases = b.Bytes()
		}
		return r
	}
}

// TestUnpackStrict: every byte the layout reserves as padding, and every duplicate copy of a
// shared scale, is checked; every other byte is data. Flipping one bit of each byte of a packed
// matrix either fails Unpack (padding and copies) or changes exactly the stored byte it holds.
func TestUnpackStrict(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, c := range []Spec{
		{Format: formats.NVFP4, N: 3, K: 48},                                              // the worked example: ragged groups, padding rows
		{Format: formats.NVFP4, N: 17, K: 272, Lanes: 32},                                 // padding lanes and columns
		{Format: formats.Int4, N: 5, K: 320, GroupSize: 64, ScaleType: "BF16", Lanes: 32}, // every pair shared by 6–7 lanes
		{Format: formats.Int8, N: 2, K: 64, Lanes: 32},                                    // one group over 16 lanes
		{Format: formats.BF16, N: 1, K: 7},
	} {
		g := mustGeometry(t, c)
		src := randomRows(r, g, int(g.N))
		packed := make([]byte, g.TotalBytes)
		if err := g.PackRows(packed, src); err != nil {
			t.Fatal(err)
		}
		// Flip one bit of every packed byte: a data byte changes exactly one stored byte; a
		// padding byte or a copy of a shared scale is refused. The owner copy of a shared scale
		// is refused too (the later copies no longer match it), so the accepted flips are the
		// stored bytes minus those of shared groups.
		accepted := int64(0)
		for b := int64(0); b < g.Blocks; b++ {
			n := g.blockRows(b)
			blk := packed[b*g.BlockBytes : (b+1)*g.BlockBytes]
			want := sliceRows(g, src, int(b)*16, n)
			back := g.NewRows(n)
			for i := range blk {
				blk[i] ^= 0x10
				err := g.UnpackBlock(back, b, blk)
				blk[i] ^= 0x10
				if err != nil {
					continue
				}
				if diff := diffCount(back, want); diff != 1 {
					t.Fatalf("%+v: flipping byte %d of block %d: unpack accepted it and %d stored bytes changed, want 1", c, i, b, diff)
				}
				accepted++
			}
		}
		var shared int64 // stored bytes of groups whose columns span two or more stripes
		if g.GroupSize > 0 {
			for q := int64(0); q < g.K/int64(g.GroupSize); q++ {
				if q*int64(g.GroupSize)/int64(g.Stripe) != ((q+1)*int64(g.GroupSize)-1)/int64(g.Stripe) {
					shared += int64(g.ScaleSlotBytes)
				}
			}
		}
		if want := g.StoredBytes - g.N*shared; accepted != want {
			t.Errorf("%+v: %d packed bytes carry unshared data, want %d", c, accepted, want)
		}
	}
}

func diffCount(a, b Rows) int {
	n := 0
	for _, p := range [][2][]byte{{a.Codes, b.Codes}, {a.Scales, b.Scales}, {a.Biases, b.Biases}} {
		for i := range p[0] {
			if p[0][i] != p[1][i] {
				n++
			}
		}
	}
	return n
}

func TestBlockErrors(t *testing.T) {
	g := mustGeometry(t, Spec{Format: formats.NVFP4, N: 20, K: 64})
	blk := make([]byte, g.BlockBytes)
	for _, c := range []struct {
		name string
		err  error
	}{
		{"block out of range", g.PackBlock(blk, 2, g.NewRows(4))},
		{"negative block", g.PackBlock(blk, -1, g.NewRows(16))},
		{"short dst", g.PackBlock(blk[1:], 0, g.NewRows(16))},
		{"wrong row count", g.PackBlock(blk, 1, g.NewRows(16))},
		{"ragged codes", g.PackBlock(blk, 0, Rows{Codes: make([]byte, 33), Scales: make([]byte, 4)})},
		{"scales missing", g.PackBlock(blk, 0, Rows{Codes: make([]byte, 16*32)})},
		{"unexpected biases", g.PackBlock(blk, 0, Rows{Codes: make([]byte, 16*32), Scales: make([]byte, 64), Biases: make([]byte, 64)})},
		{"unpack short", g.UnpackBlock(g.NewRows(16), 0, blk[:10])},
		{"whole: short dst", g.PackRows(make([]byte, 5), g.NewRows(20))},
		{"whole: rows", g.PackRows(make([]byte, g.TotalBytes), g.NewRows(19))},
		{"bad geometry", Geometry{Format: formats.NVFP4, N: 1, K: 64}.PackBlock(blk, 0, g.NewRows(1))},
	} {
		if c.err == nil {
			t.Errorf("%s: no error", c.name)
		}
	}
	// A padding row of the last block that is not zero is refused, naming block and row.
	packed := make([]byte, g.TotalBytes)
	if err := g.PackRows(packed, g.NewRows(20)); err != nil {
		t.Fatal(err)
	}
	u, err := g.Unit(21, 1)
	if err != nil {
		t.Fatal(err)
	}
	packed[g.ByteOffset(u, 3)] = 1
	err = g.UnpackRows(g.NewRows(20), packed)
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("block 1: padding row 21")) {
		t.Errorf("non-zero padding row: %v", err)
	}
}

func TestStreamErrors(t *testing.T) {
	ctx := context.Background()
	g := mustGeometry(t, Spec{Format: formats.Int8, N: 40, K: 64})
	src := randomRows(rand.New(rand.NewPCG(1, 1)), g, 40)
	short := Source{Codes: bytes.NewReader(src.Codes[:100]), Scales: bytes.NewReader(src.Scales)}
	if _, err := Pack(ctx, io.Discard, g, short); err == nil || !bytes.Contains([]byte(err.Error()), []byte("read codes of matrix rows 0…39")) {
		t.Errorf("short codes: %v", err)
	}
	if _, err := Pack(ctx, io.Discard, g, Source{Codes: bytes.NewReader(src.Codes)}); err == nil {
		t.Error("missing scales stream: no error")
	}
	if _, err := Pack(ctx, io.Discard, g, Source{Codes: bytes.NewReader(src.Codes), Scales: bytes.NewReader(src.Scales), Biases: bytes.NewReader(nil)}); err == nil {
		t.Error("unexpected biases stream: no error")
	}
	if _, err := Pack(ctx, failWriter{}, g, sourceOf(src, func(r io.Reader) io.Reader { return r })); err == nil {
		t.Error("failing writer: no error")
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := Pack(cancelled, io.Discard, g, sourceOf(src, func(r io.Reader) io.Reader { return r })); err != context.Canceled {
		t.Errorf("cancelled context: %v", err)
	}
	sink, _ := newSink(g)
	if err := Unpack(ctx, sink, g, bytes.NewReader(make([]byte, g.TotalBytes-1))); err == nil {
		t.Error("truncated packed matrix: no error")
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, io.ErrClosedPipe }
