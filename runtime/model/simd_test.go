package model

import (
	"math"
	"math/rand/v2"
	"testing"
)

// withScalar runs f with the SIMD paths switched off.
func withScalar(f func()) {
	old := simdOn
	simdOn = false
	defer func() { simdOn = old }()
	f()
}

// ulps returns the distance of two float32 values in units in the last place (0 for equal
// values, NaN and NaN, +0 and −0; a large number across signs).
func ulps(a, b float32) int64 {
	if a == b || (a != a && b != b) {
		return 0
	}
	ia, ib := int64(math.Float32bits(a)), int64(math.Float32bits(b))
	if (ia < 0x80000000) != (ib < 0x80000000) {
		return 1 << 40
	}
	if ia > ib {
		return ia - ib
	}
	return ib - ia
}

// TestVexpMatchesScalar checks the 4-lane e^x, SiLU and sigmoid against the scalar functions
// they replace (float64 math.Exp, rounded once to float32) on special values, the ends of the
// float32 and float64 exponential ranges, and 200,000 random inputs from 1e-6 to 1e4 in
// magnitude: every result within 1 ulp, special values equal, and at most 1 in 10,000
// results differing at all (a float64 value within a few ulps of a float32 rounding boundary;
// measured: none).
func TestVexpMatchesScalar(t *testing.T) {
	if !haveSIMD {
		t.Skip("no AVX2/FMA on this CPU or build")
	}
	inf := float32(math.Inf(1))
	specials := []float32{0, float32(math.Copysign(0, -1)), 1, -1, inf, -inf, float32(math.NaN()),
		1e-45, -1e-45, 1e-38, math.MaxFloat32, -math.MaxFloat32, 88.72, 88.73, 89, -87.3, -103.97, -104,
		-708, -708.5, -745, -746, 708, 709, 709.5, 710, 745, 20, -20, 0.5, -0.5, 1e-7, 16.6, -16.6}
	rng := rand.New(rand.NewPCG(3, 5))
	x := append([]float32(nil), specials...)
	for range 200000 {
		v := float32(math.Pow(10, rng.Float64()*10-6))
		if rng.IntN(2) == 0 {
			v = -v
		}
		x = append(x, v)
	}
	scalar := []func(float32) float32{exp32, SiLU, Sigmoid}
	names := []string{"exp", "SiLU", "sigmoid"}
	for mode := range 3 {
		got := make([]float32, len(x))
		vexp(got, x, mode)
		// In place, and with a length that leaves a tail: the same values.
		inPlace := append([]float32(nil), x[:len(x)-3]...)
		vexp(inPlace, inPlace, mode)
		differ := 0
		for i, v := range x {
			want := scalar[mode](v)
			if i < len(inPlace) && math.Float32bits(inPlace[i]) != math.Float32bits(got[i]) {
				t.Fatalf("%s(%g): in place %g, out of place %g", names[mode], v, inPlace[i], got[i])
			}
			if math.Float32bits(got[i]) == math.Float32bits(want) || (got[i] != got[i] && want != want) {
				continue
			}
			if i < len(specials) {
				t.Errorf("%s(%g) = %g (%#x), scalar %g (%#x)", names[mode], v, got[i], math.Float32bits(got[i]), want, math.Float32bits(want))
				continue
			}
			if d := ulps(got[i], want); d > 1 {
				t.Fatalf("%s(%g) = %g, scalar %g: %d ulps apart", names[mode], v, got[i], want, d)
			}
			differ++
		}
		if differ > len(x)/10000 {
			t.Errorf("%s: %d of %d results differ from the scalar function by 1 ulp", names[mode], differ, len(x))
		}
		t.Logf("%s: %d of %d results 1 ulp from the scalar function, the rest equal", names[mode], differ, len(x))
	}
}

// TestSIMDOpsMatchScalar runs the ops with a SIMD path (SwiGLU, SigmoidGate, GatedRMSNorm,
// CausalConv1D, GDNRecurrent, Attend) at the target's and the drafter's widths with and
// without it: the elementwise ops within 1 ulp, the convolution bit for bit (its kernel-4 loop
// does the scalar sums), the gated delta rule and attention within float32 rounding of the
// scalar loops (relative 2e-6 of the largest value).
func TestSIMDOpsMatchScalar(t *testing.T) {
	if !haveSIMD {
		t.Skip("no AVX2/FMA on this CPU or build")
	}
	rng := rand.New(rand.NewPCG(8, 13))
	both := func(f func() []float32) (simd, scalar []float32) {
		simd = f()
		withScalar(func() { scalar = f() })
		return simd, scalar
	}
	within1ulp := func(name string, a, b []float32) {
		t.Helper()
		for i := range a {
			if d := ulps(a[i], b[i]); d > 1 {
				t.Fatalf("%s[%d]: SIMD %g, scalar %g", name, i, a[i], b[i])
			}
		}
	}
	near := func(name string, a, b []float32, tol float64) {
		t.Helper()
		var mx float64
		for _, v := range b {
			mx = max(mx, math.Abs(float64(v)))
		}
		for i := range a {
			if d := math.Abs(float64(a[i]) - float64(b[i])); !(d <= tol*mx) {
				t.Fatalf("%s[%d]: SIMD %g, scalar %g (max |value| %g)", name, i, a[i], b[i], mx)
			}
		}
	}
	const n = 3*512 + 7
	gate, up := normals(rng, n, 3), normals(rng, n, 1)
	a, b := both(func() []float32 { d := make([]float32, n); SwiGLU(d, gate, up); return d })
	within1ulp("SwiGLU", a, b)
	a, b = both(func() []float32 { d := append([]float32(nil), up...); SigmoidGate(d, gate); return d })
	within1ulp("SigmoidGate", a, b)
	w := uniforms(rng, 64, 0.5, 1.5)
	a, b = both(func() []float32 {
		d := make([]float32, 24*64)
		GatedRMSNorm(d, gate[:24*64], up[:24*64], w, 24, 1e-6)
		return d
	})
	within1ulp("GatedRMSNorm", a, b)

	// Conv: the kernel-4 loop against the generic sums, written out here.
	const c, rows, kern = 96, 8, 4
	x := normals(rng, rows*c, 1)
	cw, state := normals(rng, c*kern, 0.5), normals(rng, (kern-1)*c, 1)
	for _, simd := range []bool{true, false} {
		out, ns := make([]float32, rows*c), make([]float32, (kern-1)*c)
		f := func() {
			if err := CausalConv1D(out, x, rows, state, ns, cw, kern); err != nil {
				t.Fatal(err)
			}
		}
		if simd {
			f()
		} else {
			withScalar(f)
		}
		for tt := 0; tt < rows; tt++ {
			for ch := 0; ch < c; ch++ {
				var acc float32
				for j := 0; j < kern; j++ {
					tau := tt - (kern - 1) + j
					var in float32
					if tau >= 0 {
						in = x[tau*c+ch]
					} else {
						in = state[(kern-1+tau)*c+ch]
					}
					acc += cw[ch*kern+j] * in
				}
				want := SiLU(acc)
				if d := ulps(out[tt*c+ch], want); d > 1 || (!simd && d != 0) {
					t.Fatalf("conv (SIMD %v) row %d channel %d: %g, sums %g", simd, tt, ch, out[tt*c+ch], want)
				}
			}
		}
	}

	// Gated delta rule at the tiny pair's shape (d_v = 64), 1 and 8 rows.
	s := GDNShape{KHeads: 4, VHeads: 8, KDim: 64, VDim: 64}
	for _, r := range []int{1, 8} {
		q, k, v, beta, g := gdnInputs(rng, s, r, 0)
		st := normals(rng, s.StateLen(), 0.3)
		a, b = both(func() []float32 {
			out, ns := make([]float32, r*s.VHeads*s.VDim), make([]float32, s.StateLen())
			if err := GDNRecurrent(s, out, q, k, v, beta, g, r, st, ns); err != nil {
				t.Fatal(err)
			}
			return append(out, ns...)
		})
		near("GDNRecurrent", a, b, 2e-6)
	}

	// Attention at head_dim 128 (target and drafter) and 64, over 200 keys in 4 partitions.
	for _, hd := range []int{64, 128} {
		as := AttnShape{Heads: 4, KVHeads: 2, HeadDim: hd}
		const p0, r, capacity = 195, 8, 210
		kvRow := as.KVHeads * hd
		kc, vc := normals(rng, capacity*kvRow, 2), normals(rng, capacity*kvRow, 1)
		q := normals(rng, r*as.Heads*hd, 2)
		a, b = both(func() []float32 {
			out := make([]float32, r*as.Heads*hd)
			if err := Attend(as, out, q, r, p0, kc, vc, float32(1/math.Sqrt(float64(hd))), DefaultKeyPartition); err != nil {
				t.Fatal(err)
			}
			return out
		})
		near("Attend", a, b, 2e-6)
	}
}
