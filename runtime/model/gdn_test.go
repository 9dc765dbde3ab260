package model

import (
	"math"
	"math/rand/v2"
	"testing"
)

// gdnInputs draws normalised q (scaled by 1/√d_k), k, random v, β ∈ (0, 1) and log decays g;
// strong > 0 adds heads with very fast decay (g down to −strong).
func gdnInputs(rng *rand.Rand, s GDNShape, rows int, strong float64) (q, k, v, beta, g []float32) {
	q = normals(rng, rows*s.KHeads*s.KDim, 1)
	k = normals(rng, rows*s.KHeads*s.KDim, 1)
	L2Normalize(q, s.KDim, L2Eps, float32(1/math.Sqrt(float64(s.KDim))))
	L2Normalize(k, s.KDim, L2Eps, 1)
	v = normals(rng, rows*s.VHeads*s.VDim, 1)
	beta = uniforms(rng, rows*s.VHeads, 0.05, 0.95)
	g = uniforms(rng, rows*s.VHeads, -1.2, -0.01)
	if strong > 0 {
		for r := 0; r < rows; r++ {
			g[r*s.VHeads] = float32(-strong * rng.Float64())
		}
	}
	return
}

// gdnRef64 is the delta rule in float64 in its matrix form
// S_t = e^{g_t}(I − β_t k_t k_tᵀ) S_{t−1} + β_t k_t v_tᵀ, o_t = S_tᵀ q_t.
func gdnRef64(s GDNShape, q, k, v, beta, g []float32, rows int, state []float32) (out, final []float64) {
	dk, dv := s.KDim, s.VDim
	out = make([]float64, rows*s.VHeads*dv)
	final = to64(state)
	for h := 0; h < s.VHeads; h++ {
		kh := h * s.KHeads / s.VHeads
		S := final[h*dk*dv : (h+1)*dk*dv]
		for t := 0; t < rows; t++ {
			kt := to64(k[(t*s.KHeads+kh)*dk : (t*s.KHeads+kh+1)*dk])
			qt := to64(q[(t*s.KHeads+kh)*dk : (t*s.KHeads+kh+1)*dk])
			vt := to64(v[(t*s.VHeads+h)*dv : (t*s.VHeads+h+1)*dv])
			b := float64(beta[t*s.VHeads+h])
			e := math.Exp(float64(g[t*s.VHeads+h]))
			// (I − β k kᵀ) S  =  S − β k (kᵀ S)
			ktS := make([]float64, dv)
			for i := 0; i < dk; i++ {
				for j := 0; j < dv; j++ {
					ktS[j] += kt[i] * S[i*dv+j]
				}
			}
			for i := 0; i < dk; i++ {
				for j := 0; j < dv; j++ {
					S[i*dv+j] = e*(S[i*dv+j]-b*kt[i]*ktS[j]) + b*kt[i]*vt[j]
				}
			}
			for j := 0; j < dv; j++ {
				var o float64
				for i := 0; i < dk; i++ {
					o += S[i*dv+j] * qt[i]
				}
				out[(t*s.VHeads+h)*dv+j] = o
			}
		}
	}
	return out, final
}

func TestGDNRecurrentAndChunkedMatchReference(t *testing.T) {
	shapes := []GDNShape{
		{KHeads: 2, VHeads: 6, KDim: 16, VDim: 8},
		{KHeads: 1, VHeads: 4, KDim: 32, VDim: 32},
		{KHeads: 3, VHeads: 3, KDim: 8, VDim: 24},
	}
	for si, s := range shapes {
		for _, rows := range []int{1, 2, 5, 63, 64, 65, 130, 200} {
			rng := rand.New(rand.NewPCG(uint64(si), uint64(rows)))
			q, k, v, beta, g := gdnInputs(rng, s, rows, 0)
			state := normals(rng, s.StateLen(), 0.3)
			wantOut, wantState := gdnRef64(s, q, k, v, beta, g, rows, state)
			type run struct {
				name string
				f    func(out, newState []float32) error
			}
			runs := []run{
				{"recurrent", func(out, ns []float32) error { return GDNRecurrent(s, out, q, k, v, beta, g, rows, state, ns) }},
				{"chunked 64", func(out, ns []float32) error {
					return GDNChunked(s, out, q, k, v, beta, g, rows, state, ns, DefaultChunk)
				}},
				{"chunked 16", func(out, ns []float32) error { return GDNChunked(s, out, q, k, v, beta, g, rows, state, ns, 16) }},
			}
			for _, r := range runs {
				out := make([]float32, rows*s.VHeads*s.VDim)
				ns := make([]float32, s.StateLen())
				if err := r.f(out, ns); err != nil {
					t.Fatal(err)
				}
				eo, at := relErr(out, wantOut)
				es, _ := relErr(ns, wantState)
				if eo > 5e-6 || es > 5e-6 {
					t.Fatalf("%+v, %d rows, %s: relative error output %.3g (at %d), state %.3g", s, rows, r.name, eo, at, es)
				}
			}
		}
	}
}

// TestGDNChunkedEqualsRecurrent compares the two float32 forms directly, with fast-decaying
// heads (cumulative log decay far below float32's exp range inside a chunk).
func TestGDNChunkedEqualsRecurrent(t *testing.T) {
	s := GDNShape{KHeads: 2, VHeads: 4, KDim: 16, VDim: 16}
	rng := rand.New(rand.NewPCG(21, 21))
	const rows = 150
	q, k, v, beta, g := gdnInputs(rng, s, rows, 40)
	state := normals(rng, s.StateLen(), 0.5)
	o1, o2 := make([]float32, rows*s.VHeads*s.VDim), make([]float32, rows*s.VHeads*s.VDim)
	s1, s2 := make([]float32, s.StateLen()), make([]float32, s.StateLen())
	if err := GDNRecurrent(s, o1, q, k, v, beta, g, rows, state, s1); err != nil {
		t.Fatal(err)
	}
	if err := GDNChunked(s, o2, q, k, v, beta, g, rows, state, s2, DefaultChunk); err != nil {
		t.Fatal(err)
	}
	for i, x := range o2 {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			t.Fatalf("chunked output %d is %v", i, x)
		}
	}
	eo, at := relErr32(o2, o1)
	es, _ := relErr32(s2, s1)
	t.Logf("chunked vs recurrent: output %.3g, state %.3g", eo, es)
	if eo > 2e-6 || es > 2e-6 {
		t.Fatalf("chunked vs recurrent: output %.3g (at %d), state %.3g", eo, at, es)
	}
	wantOut, wantState := gdnRef64(s, q, k, v, beta, g, rows, state)
	for _, r := range []struct {
		name       string
		out, state []float32
	}{{"recurrent", o1, s1}, {"chunked", o2, s2}} {
		eo, _ := relErr(r.out, wantOut)
		es, _ := relErr(r.state, wantState)
		if eo > 2e-6 || es > 2e-6 {
			t.Fatalf("fast decays, %s vs float64: output %.3g, state %.3g", r.name, eo, es)
		}
	}
	// In place (newState = state) gives the same as separate slots.
	inPlace := append([]float32(nil), state...)
	o3 := make([]float32, len(o1))
	if err := GDNRecurrent(s, o3, q, k, v, beta, g, rows, inPlace, inPlace); err != nil {
		t.Fatal(err)
	}
	if e, _ := relErr32(inPlace, s1); e != 0 {
		t.Fatalf("in-place recurrent state differs by %.3g", e)
	}
	// Zero rows copy the state.
	z := make([]float32, s.StateLen())
	if err := GDNChunked(s, nil, nil, nil, nil, nil, nil, 0, state, z, 64); err != nil {
		t.Fatal(err)
	}
	if e, _ := relErr32(z, state); e != 0 {
		t.Fatal("zero rows must copy the state")
	}
}

func TestGDNErrors(t *testing.T) {
	s := GDNShape{KHeads: 2, VHeads: 4, KDim: 8, VDim: 8}
	q := make([]float32, 2*16)
	v := make([]float32, 2*32)
	bg := make([]float32, 8)
	st := make([]float32, s.StateLen())
	if err := GDNRecurrent(s, v, q, q, v, bg, bg, 2, st, st[:10]); err == nil {
		t.Fatal("short new state: no error")
	}
	if err := GDNChunked(s, v, q, q, v, bg, bg, 2, st, st, 0); err == nil {
		t.Fatal("chunk 0: no error")
	}
	if err := GDNRecurrent(GDNShape{KHeads: 3, VHeads: 4, KDim: 8, VDim: 8}, v, q, q, v, bg, bg, 1, st, st); err == nil {
		t.Fatal("value heads not a multiple of key heads: no error")
	}
}
