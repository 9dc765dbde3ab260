package cpu

import (
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"lithos/formats"
	"lithos/pack/blm"
)

// withSIMD runs f with the SIMD path switched on or off for the matrices it builds.
func withSIMD(on bool, f func()) {
	old := simdEnabled
	simdEnabled = on
	defer func() { simdEnabled = old }()
	f()
}

// simdLevels runs f once per SIMD kernel set this CPU has (AVX2, and AVX-512 where present;
// NEON on arm64), named for subtests.
func simdLevels(t *testing.T, f func(t *testing.T)) {
	t.Run(simdName, func(t *testing.T) {
		old := wideEnabled
		wideEnabled = false
		defer func() { wideEnabled = old }()
		f(t)
	})
	if haveAVX512 {
		t.Run("avx512", f)
	}
}

// simdSpecs are shapes the SIMD path serves (the tiny pair's and the 27B's geometries among
// them: NVFP4 at every lane count K allows, FP8 and BF16 narrow and wide) and a few it must
// refuse (K not a multiple of its pieces; stripes of 36 BF16 columns).
var simdSpecs = []struct {
	spec  blm.Spec
	serve bool
}{
	{blm.Spec{Format: formats.NVFP4, N: 3072, K: 512}, true},           // L = 4
	{blm.Spec{Format: formats.NVFP4, N: 512, K: 1536}, true},           // L = 8
	{blm.Spec{Format: formats.NVFP4, N: 37, K: 5120}, true},            // L = 32
	{blm.Spec{Format: formats.NVFP4, N: 20, K: 256, Lanes: 32}, false}, // 8-column stripes: half groups
	{blm.Spec{Format: formats.NVFP4, N: 20, K: 256, Lanes: 16}, true},
	{blm.Spec{Format: formats.NVFP4, N: 20, K: 256, Lanes: 2}, true},
	{blm.Spec{Format: formats.NVFP4, N: 9, K: 48}, false}, // L = 2: 24-column stripes
	{blm.Spec{Format: formats.FP8, N: 1536, K: 512}, true},
	{blm.Spec{Format: formats.FP8, N: 33, K: 5120}, true},
	{blm.Spec{Format: formats.FP8, N: 33, K: 384, Lanes: 32}, false}, // 12-column stripes
	{blm.Spec{Format: formats.FP8, N: 16, K: 40}, false},
	{blm.Spec{Format: formats.BF16, N: 16, K: 512}, true},
	{blm.Spec{Format: formats.BF16, N: 4096, K: 64}, true}, // decoded once (Packed.dense)
	{blm.Spec{Format: formats.NVFP4, N: 67, K: 128}, true}, // decoded once
	{blm.Spec{Format: formats.FP8, N: 40, K: 64}, true},    // decoded once
	{blm.Spec{Format: formats.BF16, N: 70, K: 2048}, true},
	{blm.Spec{Format: formats.BF16, N: 1, K: 576}, false}, // L = 16: 36-column stripes
	{blm.Spec{Format: formats.Int8, N: 16, K: 512}, false},
}

// TestSIMDDecodeExact checks the SIMD decoders against DecodeRow (the scalar decoders) bit
// for bit, every row, with codes covering every byte value (NVFP4: every nibble pair, and
// every block-scale byte: negative, ±0, subnormal and NaN scales, whose NaN both propagate;
// FP8: every finite code incl. subnormals and ±0), and which shapes the path serves.
func TestSIMDDecodeExact(t *testing.T) {
	if !haveSIMD {
		t.Skip("no SIMD kernels on this CPU or build")
	}
	r := rand.New(rand.NewPCG(11, 12))
	for _, c := range simdSpecs {
		m := newTestMatrix(t, r, c.spec)
		if c.spec.Format == formats.NVFP4 {
			// Every E4M3 byte as a block scale, cycling over the groups.
			for i := range m.stored.Scales {
				m.stored.Scales[i] = byte(i * 7)
			}
			if err := m.g.PackRows(m.packed, m.stored); err != nil {
				t.Fatal(err)
			}
		}
		if c.spec.Format == formats.FP8 {
			// Every code but the NaNs 0x7F/0xFF, cycling over the rows' bytes.
			for i := range m.stored.Codes {
				b := byte(i * 7)
				if b&0x7F == 0x7F {
					b ^= 1
				}
				m.stored.Codes[i] = b
			}
			if err := m.g.PackRows(m.packed, m.stored); err != nil {
				t.Fatal(err)
			}
		}
		p, err := NewPacked(m.g, m.packed, m.table)
		if err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("%s/%dx%d/L%d", c.spec.Format, c.spec.N, c.spec.K, m.g.Lanes)
		if (p.simd != nil) != c.serve {
			t.Fatalf("%s: SIMD plan %v, want served %v", name, p.simd != nil, c.serve)
		}
		if p.simd == nil {
			continue
		}
		k := int(m.g.K)
		if wantDense := k < denseMaxK && int(m.g.N)*k <= denseMaxWeights; (p.dense != nil) != wantDense {
			t.Fatalf("%s: decoded once %v, want %v", name, p.dense != nil, wantDense)
		}
		want, got := make([]float32, k), make([]float32, k+8)
		for row := 0; row < int(m.g.N); row++ {
			p.DecodeRow(want, row)
			got[k] = 12345 // the decoder writes K floats, not more
			p.decodeRowSIMD(got, row)
			for c := range want {
				if math.Float32bits(got[c]) != math.Float32bits(want[c]) {
					t.Fatalf("%s row %d column %d: SIMD %g (%#x), scalar %g (%#x)", name, row, c, got[c], math.Float32bits(got[c]), want[c], math.Float32bits(want[c]))
				}
			}
			if got[k] != 12345 {
				t.Fatalf("%s row %d: decoder wrote past K", name, row)
			}
			if p.dense != nil && !slices.EqualFunc(p.dense[row*k:(row+1)*k], got[:k], func(a, b float32) bool { return math.Float32bits(a) == math.Float32bits(b) }) {
				t.Fatalf("%s row %d: the once-decoded row differs from the decoder's", name, row)
			}
		}
	}
}

// TestSIMDFP8NaN checks that the E4M3 NaN codes decode to NaN (the FP8 decoder of this build:
// AVX2 or NEON).
func TestSIMDFP8NaN(t *testing.T) {
	if !haveSIMD {
		t.Skip("no SIMD kernels on this CPU or build")
	}
	base := make([]byte, 16)
	for i := range base {
		base[i] = []byte{0x7F, 0xFF, 0x7E, 0x80}[i%4]
	}
	dst := make([]float32, 16)
	ents := []int32{0, 0}
	tileDecodeFP8(&dst[0], &base[0], &ents[0], 1)
	for i, v := range dst {
		switch i % 4 {
		case 0, 1:
			if !math.IsNaN(float64(v)) {
				t.Errorf("code %#x: %g, want NaN", base[i], v)
			}
		case 2:
			if v != 448 {
				t.Errorf("code 0x7E: %g, want 448", v)
			}
		case 3:
			if v != 0 || !math.Signbit(float64(v)) {
				t.Errorf("code 0x80: %g, want -0", v)
			}
		}
	}
}

// TestSIMDRowsInvariant checks, with the AVX2 and with the AVX-512 kernels, that a row of a
// multi-row product equals the single-row product of its activation row bit for bit (m = 1 …
// 9: the tiles, the fused 8-row kernels and their padding; row subsets that split tiles and
// pairs differently), and that the SIMD product agrees with the scalar kernels within float32
// summation rounding.
func TestSIMDRowsInvariant(t *testing.T) {
	if !haveSIMD {
		t.Skip("no SIMD kernels on this CPU or build")
	}
	simdLevels(t, checkRowsInvariant)
}

func checkRowsInvariant(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	for _, c := range simdSpecs {
		if !c.serve {
			continue
		}
		spec := c.spec
		spec.N = min(spec.N, 70)
		m := newTestMatrix(t, r, spec)
		p, err := NewPacked(m.g, m.packed, m.table)
		if err != nil {
			t.Fatal(err)
		}
		var ps *Packed
		withSIMD(false, func() { ps, err = NewPacked(m.g, m.packed, m.table) })
		if err != nil || ps.simd != nil {
			t.Fatalf("scalar twin: %v", err)
		}
		n, k := int(m.g.N), int(m.g.K)
		all, _ := p.All()
		scalar, _ := ps.All()
		x := randomX(r, 9*k)
		one := make([]float32, n)
		for _, rows := range []int{1, 2, 3, 4, 5, 6, 7, 8, 9} {
			got := make([]float32, rows*n)
			if err := all.Mul(got, x, rows); err != nil {
				t.Fatal(err)
			}
			ref := make([]float32, rows*n)
			if err := scalar.Mul(ref, x, rows); err != nil {
				t.Fatal(err)
			}
			for tt := 0; tt < rows; tt++ {
				if err := all.Mul(one, x[tt*k:], 1); err != nil {
					t.Fatal(err)
				}
				for o := 0; o < n; o++ {
					if math.Float32bits(got[tt*n+o]) != math.Float32bits(one[o]) {
						t.Fatalf("%v: %d rows, row %d, output %d: %g, single-row product %g", spec, rows, tt, o, got[tt*n+o], one[o])
					}
					var mag float64
					w := make([]float32, k)
					p.DecodeRow(w, o)
					for cc := 0; cc < k; cc++ {
						mag += math.Abs(float64(w[cc]) * float64(x[tt*k+cc]))
					}
					mag *= float64(p.RowScale(o))
					bound := 2*float64(k/8+8)*math.Ldexp(1, -24)*mag + 1e-30
					if d := math.Abs(float64(got[tt*n+o]) - float64(ref[tt*n+o])); !(d <= bound) {
						t.Fatalf("%v: %d rows, row %d, output %d: SIMD %g, scalar %g (|diff| %.3g > %.3g)", spec, rows, tt, o, got[tt*n+o], ref[tt*n+o], d, bound)
					}
				}
			}
		}
		// A row subset (tiles start at other rows) gives the same values.
		sub := []int32{int32(n - 1), 0, int32(n / 2), 1, int32(n - 1)}
		view, err := p.Rows(sub)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]float32, 3*len(sub))
		full := make([]float32, 3*n)
		if err := view.Mul(got, x, 3); err != nil {
			t.Fatal(err)
		}
		if err := all.Mul(full, x, 3); err != nil {
			t.Fatal(err)
		}
		for tt := 0; tt < 3; tt++ {
			for i, pr := range sub {
				if got[tt*len(sub)+i] != full[tt*n+int(pr)] {
					t.Fatalf("%v: view row %d (packed %d), token %d: %g, full %g", spec, i, pr, tt, got[tt*len(sub)+i], full[tt*n+int(pr)])
				}
			}
		}
	}
}

// BenchmarkSIMDvsScalar times the tiny pair's matrix shapes (cache-resident) on the SIMD path
// and on the scalar kernels in the same run, for 1 and 8 activation rows: ns per product
// of each and their ratio.
func BenchmarkSIMDvsScalar(b *testing.B) {
	for _, spec := range []blm.Spec{
		{Format: formats.NVFP4, N: 3072, K: 512},
		{Format: formats.NVFP4, N: 512, K: 1536},
		{Format: formats.FP8, N: 1536, K: 512},
		{Format: formats.BF16, N: 2048, K: 512},
	} {
		for _, rows := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s-%dx%d-rows%d", spec.Format, spec.N, spec.K, rows), func(b *testing.B) {
				r := rand.New(rand.NewPCG(9, 9))
				m := newTestMatrix(b, r, spec)
				var fast, slow *Packed
				var err error
				fast, err = NewPacked(m.g, m.packed, m.table)
				if err != nil {
					b.Fatal(err)
				}
				withSIMD(false, func() { slow, err = NewPacked(m.g, m.packed, m.table) })
				if err != nil {
					b.Fatal(err)
				}
				fm, _ := fast.All()
				sm, _ := slow.All()
				x := randomX(r, rows*fm.K)
				y := make([]float32, rows*fm.N)
				var tf, ts time.Duration
				b.ResetTimer()
				for range b.N {
					t := time.Now()
					if err := fm.Mul(y, x, rows); err != nil {
						b.Fatal(err)
					}
					tf += time.Since(t)
					t = time.Now()
					if err := sm.Mul(y, x, rows); err != nil {
						b.Fatal(err)
					}
					ts += time.Since(t)
				}
				b.ReportMetric(float64(tf.Nanoseconds())/float64(b.N), "ns-simd")
				b.ReportMetric(float64(ts.Nanoseconds())/float64(b.N), "ns-scalar")
				b.ReportMetric(float64(ts)/float64(tf), "speedup")
			})
		}
	}
}

// laneDot is the 8-lane SIMD dot kernels' numerics contract (simd.go), written out in Go:
// eight accumulator lanes, column c into lane c mod 8 by a fused multiply-add in column order
// (fma32: the exact w·x + acc rounded once to float32), reduced as ((l0+l1)+(l2+l3)) +
// ((l4+l5)+(l6+l7)).
func laneDot(w, x []float32) float32 {
	var l [8]float32
	for c := range w {
		l[c%8] = fma32(w[c], x[c], l[c%8])
	}
	return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]))
}

// fma32 is a float32 fused multiply-add: a·b + c computed exactly (big.Float, 200 bits: a
// float32 product and sum need far fewer) and rounded once to float32, nearest even.
func fma32(a, b, c float32) float32 {
	x := new(big.Float).SetPrec(200).SetFloat64(float64(a))
	x.Mul(x, new(big.Float).SetPrec(200).SetFloat64(float64(b)))
	x.Add(x, new(big.Float).SetPrec(200).SetFloat64(float64(c)))
	f, _ := x.Float32()
	return f
}

// TestSIMDLaneOrder checks the tiles' 8-lane dot kernels of this build (AVX2 on amd64, NEON on
// arm64) bit for bit against laneDot, so that both give the same products (an arm64 CPU
// backend agrees exactly with an amd64 one running the AVX2 set: without AVX-512, or BF16).
func TestSIMDLaneOrder(t *testing.T) {
	if !haveSIMD {
		t.Skip("no SIMD kernels on this CPU or build")
	}
	r := rand.New(rand.NewPCG(21, 22))
	for _, k := range []int{8, 64, 512, 5120} {
		w := make([]float32, 4*k)
		x0, x1 := make([]float32, k), make([]float32, k)
		for _, v := range [][]float32{w, x0, x1} {
			for i := range v {
				v[i] = float32(r.NormFloat64())
			}
		}
		var o1 [4]float32
		var o2 [8]float32
		tileDot4x1(&w[0], k, &x0[0], &o1)
		tileDot4x2(&w[0], k, &x0[0], &x1[0], &o2)
		for i := range 4 {
			row := w[i*k : (i+1)*k]
			w0, w1 := laneDot(row, x0), laneDot(row, x1)
			if math.Float32bits(o1[i]) != math.Float32bits(w0) || math.Float32bits(o2[i]) != math.Float32bits(w0) || math.Float32bits(o2[4+i]) != math.Float32bits(w1) {
				t.Fatalf("%s, K %d, row %d: dot4x1 %g, dot4x2 %g %g; the lane order gives %g %g", simdName, k, i, o1[i], o2[i], o2[4+i], w0, w1)
			}
		}
	}
}
