package blm

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"

	"lithos/formats"
)

var fuzzLanes = [...]int{0, 2, 4, 8, 16, 32}

// fuzzGeometry maps fuzzer bytes to a small valid geometry.
func fuzzGeometry(sel, n, kq, lanes uint8) (Geometry, error) {
	ts := testSpecs[int(sel)%len(testSpecs)]
	s := ts.spec
	s.N = int64(n % 40)
	s.K = (int64(kq)%24 + 1) * ts.kq
	s.Lanes = fuzzLanes[int(lanes)%len(fuzzLanes)]
	return NewGeometry(s)
}

// FuzzUnpack feeds untrusted bytes to UnpackRows, the streaming Unpack and GEMV: they never
// panic, the in-memory and streaming unpackers agree, and whatever they accept packs back to
// the same bytes (the strictness that makes a packed matrix canonical).
func FuzzUnpack(f *testing.F) {
	r := rand.New(rand.NewPCG(1, 1))
	for sel := range len(testSpecs) {
		for _, c := range [][3]uint8{{3, 2, 0}, {17, 15, 5}, {1, 0, 1}, {16, 6, 3}} {
			g, err := fuzzGeometry(uint8(sel), c[0], c[1], c[2])
			if err != nil {
				f.Fatal(err)
			}
			packed := make([]byte, g.TotalBytes)
			if err := g.PackRows(packed, randomRows(r, g, int(g.N))); err != nil {
				f.Fatal(err)
			}
			f.Add(uint8(sel), c[0], c[1], c[2], packed)
		}
	}
	f.Add(uint8(0), uint8(0), uint8(0), uint8(0), []byte{})
	f.Fuzz(func(t *testing.T, sel, n, kq, lanes uint8, data []byte) {
		g, err := fuzzGeometry(sel, n, kq, lanes)
		if err != nil {
			t.Fatal(err)
		}
		back := g.NewRows(int(g.N))
		err = g.UnpackRows(back, data)
		sink, streamed := newSink(g)
		serr := Unpack(context.Background(), sink, g, bytes.NewReader(data))
		if int64(len(data)) != g.TotalBytes {
			if err == nil {
				t.Fatalf("UnpackRows accepted %d bytes for a %d-byte matrix", len(data), g.TotalBytes)
			}
			if int64(len(data)) < g.TotalBytes && serr == nil {
				t.Fatalf("Unpack accepted a truncated matrix (%d of %d bytes)", len(data), g.TotalBytes)
			}
			return
		}
		if (err == nil) != (serr == nil) {
			t.Fatalf("UnpackRows: %v; Unpack: %v", err, serr)
		}
		y := make([]float32, g.N)
		x := make([]float32, g.K)
		for i := range x {
			x[i] = 1
		}
		if gerr := g.GEMV(y, data, nil, x, 1); gerr != nil {
			t.Fatalf("GEMV on a well-sized matrix: %v", gerr)
		}
		if err != nil {
			return
		}
		equalRows(t, streamed(), back)
		again := make([]byte, g.TotalBytes)
		if err := g.PackRows(again, back); err != nil {
			t.Fatal(err)
		}
		if i := firstMismatch(again, data); i >= 0 {
			t.Fatalf("accepted bytes do not pack back: byte %d", i)
		}
	})
}

// FuzzGeometry checks that NewGeometry and the address helpers never panic on any spec, and
// that what NewGeometry accepts is consistent.
func FuzzGeometry(f *testing.F) {
	f.Add(uint8(8), int64(248320), int64(256), 0, 0, "", int64(5), int64(100))
	f.Add(uint8(5), int64(17), int64(3584), 64, 32, "BF16", int64(16), int64(3583))
	f.Add(uint8(3), int64(MaxN), int64(MaxK), 1, 2, "F16", int64(MaxN-1), int64(MaxK-1))
	f.Add(uint8(0), int64(-1), int64(-5), -7, 3, "x", int64(-1), int64(-1))
	formatsList := []formats.Format{formats.BF16, formats.F16, formats.FP8, formats.Int8, formats.Int4, formats.NVFP4,
		formats.NVFP4MLX, formats.F32, formats.Int4AWQ, ""}
	f.Fuzz(func(t *testing.T, sel uint8, n, k int64, group, lanes int, scaleType string, row, col int64) {
		s := Spec{Format: formatsList[int(sel)%len(formatsList)], N: n, K: k, GroupSize: group, ScaleType: scaleType, Lanes: lanes}
		g, err := NewGeometry(s)
		if err != nil {
			if _, cerr := ChooseLanes(s); cerr == nil && s.Lanes == 0 && s.N >= 0 && s.N <= MaxN {
				t.Fatalf("NewGeometry refused %+v (%v) but ChooseLanes accepted it", s, err)
			}
			return
		}
		if err := g.Check(); err != nil {
			t.Fatal(err)
		}
		if g.TotalBytes < g.StoredBytes || g.TotalBytes != g.Blocks*g.BlockBytes {
			t.Fatalf("inconsistent sizes %+v", g)
		}
		if u, err := g.Unit(row, int(col%int64(max(1, g.Lanes)))); err == nil {
			if u.Offset < 0 || u.Offset+int64(g.UnitBytes/WordBytes-1)*StepStride+WordBytes > g.TotalBytes {
				t.Fatalf("unit %+v outside the %d packed bytes", u, g.TotalBytes)
			}
		}
		if off, _, err := g.Element(row, col); err == nil && (off < 0 || off >= g.TotalBytes) {
			t.Fatalf("Element(%d, %d) = %d outside [0, %d)", row, col, off, g.TotalBytes)
		}
		if off, err := g.Scale(row, col); err == nil && (off < 0 || off >= g.TotalBytes) {
			t.Fatalf("Scale(%d, %d) = %d outside [0, %d)", row, col, off, g.TotalBytes)
		}
	})
}
