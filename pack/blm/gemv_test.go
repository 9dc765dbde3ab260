package blm

import (
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"testing"

	"lithos/formats"
	"lithos/formats/bf16"
	"lithos/formats/f16"
	"lithos/formats/fp8"
	"lithos/formats/int4"
	"lithos/formats/nvfp4"
	"lithos/formats/q8"
)

// dequantize decodes stored rows with the formats package's decoders (the numerics oracle,
// docs/formats.md), tensor scales included for NVFP4 and FP8 (ts[n] per row). It also returns,
// per element, the magnitude that float32 summation error is relative to: |w| for most formats,
// |scale·q| + |bias| for INT4, whose GEMV sums scale·Σq·x and bias·Σx separately.
func dequantize(t *testing.T, g Geometry, src Rows, ts []float32) (w, mag []float64) {
	t.Helper()
	n, k := int(g.N), int(g.K)
	w32 := make([]float32, n*k)
	cb, sb := int(g.CodeRowBytes()), int(g.ScaleRowBytes())
	var err error
	for r := 0; r < n && err == nil; r++ {
		row := w32[r*k : (r+1)*k]
		codes := src.Codes[r*cb : (r+1)*cb]
		switch g.Format {
		case formats.BF16:
			err = bf16.Decode(row, codes)
		case formats.F16:
			err = f16.Decode(row, codes)
		case formats.FP8:
			err = fp8.DecodeWeights(row, codes, ts[r])
		case formats.Int8:
			err = q8.DecodeRows(row, codes, src.Scales[r*sb:(r+1)*sb], k, g.GroupSize)
		case formats.NVFP4:
			err = nvfp4.DecodeRows(row, codes, src.Scales[r*sb:(r+1)*sb], k, ts[r])
		}
	}
	mag = make([]float64, n*k)
	if g.Format == formats.Int4 {
		m := int4.MLX{Weight: src.Codes, Scales: src.Scales, Biases: src.Biases, N: n, K: k, GroupSize: g.GroupSize, ScaleType: int4.ScaleType(g.ScaleType)}
		groups := k / g.GroupSize
		rows := int4.Rows{K: k, GroupSize: g.GroupSize, Codes: make([]uint8, n*k), Scales: make([]float32, n*groups), Biases: make([]float32, n*groups)}
		if err = m.Rows(&rows, 0); err == nil {
			err = rows.Decode(w32)
		}
		for i := range mag {
			q := i/k*groups + i%k/g.GroupSize
			mag[i] = math.Abs(float64(rows.Scales[q])*float64(rows.Codes[i])) + math.Abs(float64(rows.Biases[q]))
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	w = make([]float64, n*k)
	for i, v := range w32 {
		w[i] = float64(v)
		if g.Format != formats.Int4 {
			mag[i] = math.Abs(w[i])
		}
	}
	return w, mag
}

// TestGEMVMatchesDequantize checks the reference GEMV over packed bytes against
// dequantize-then-matmul with the formats decoders, in float64, for every format, many shapes,
// lane counts, stacked row scales and 1–3 tokens. The bound is the standard float32 summation
// bound γ_h·Σ|terms| with h the longest chain of roundings any term goes through in either
// computation: W products and sums in a stripe, one per scale slot, log2(Lanes) in the lane
// tree, and the scale, row-scale and dequantization products. A misplaced scale, code or
// column is off by far more.
func TestGEMVMatchesDequantize(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, ts := range testSpecs {
		for _, k := range []int64{ts.kq, 2 * ts.kq, 256, 272, 1024, 1040, 3584, 5120} {
			k = (k + ts.kq - 1) / ts.kq * ts.kq
			for _, lanes := range []int{0, laneChoices[r.IntN(len(laneChoices))]} {
				s := ts.spec
				s.K, s.Lanes = k, lanes
				s.N = []int64{1, 17, 33}[r.IntN(3)]
				g := mustGeometry(t, s)
				t.Run(fmt.Sprintf("%s/N=%d/K=%d/lanes=%d", ts.name, g.N, k, g.Lanes), func(t *testing.T) {
					checkGEMV(t, r, g)
				})
			}
		}
	}
}

func checkGEMV(t *testing.T, r *rand.Rand, g Geometry) {
	n, k := int(g.N), int(g.K)
	tokens := 1 + r.IntN(3)
	src := finiteRows(r, g, n)
	// Per-row tensor scales as a stack of two segments would give them.
	half := int64(n / 2)
	st := Stack{Mode: Concat, Segments: []Segment{{"a", half, 0.75}, {"b", int64(n) - half, 1.5 / 1024}}}
	rs, err := st.RowScales()
	if err != nil {
		t.Fatal(err)
	}
	// NVFP4 and FP8 decoders apply the tensor scale themselves; for the others the reference
	// multiplies by the row scale after the sum.
	inDecoder := g.Format == formats.NVFP4 || g.Format == formats.FP8
	w, mag := dequantize(t, g, src, rs)
	packed := make([]byte, g.TotalBytes)
	if err := g.PackRows(packed, src); err != nil {
		t.Fatal(err)
	}
	x := make([]float32, tokens*k)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	y := make([]float32, tokens*n)
	if err := g.GEMV(y, packed, rs, x, tokens); err != nil {
		t.Fatal(err)
	}
	slots := g.ScaleSlots
	h := g.Stripe + slots + bits.Len(uint(g.Lanes)) + 4
	gamma := float64(h) * 0x1p-24 / (1 - float64(h)*0x1p-24)
	for tk := 0; tk < tokens; tk++ {
		for row := 0; row < n; row++ {
			var want, abs float64
			for c := 0; c < k; c++ {
				xv := float64(x[tk*k+c])
				want += w[row*k+c] * xv
				abs += mag[row*k+c] * math.Abs(xv)
			}
			rowScale := float64(rs[row])
			if !inDecoder {
				want *= rowScale
				abs *= rowScale
			}
			got := float64(y[tk*n+row])
			if d := math.Abs(got - want); d > gamma*abs+1e-37 || math.IsNaN(got) {
				t.Fatalf("token %d row %d: gemv %g, dequantize-then-matmul %g: |diff| %g > bound %g", tk, row, got, want, d, gamma*abs)
			}
		}
	}
}

func TestGEMVErrors(t *testing.T) {
	g := mustGeometry(t, Spec{Format: formats.FP8, N: 3, K: 32})
	packed := make([]byte, g.TotalBytes)
	x, y := make([]float32, 64), make([]float32, 6)
	for _, c := range []struct {
		name string
		err  error
	}{
		{"packed length", g.GEMV(y, packed[1:], nil, x, 2)},
		{"x length", g.GEMV(y, packed, nil, x[1:], 2)},
		{"y length", g.GEMV(y[1:], packed, nil, x, 2)},
		{"row scales", g.GEMV(y, packed, []float32{1}, x, 2)},
		{"negative tokens", g.GEMV(y, packed, nil, x, -1)},
		{"bad geometry", Geometry{Format: formats.FP8}.GEMV(y, packed, nil, x, 2)},
	} {
		if c.err == nil {
			t.Errorf("%s: no error", c.name)
		}
	}
	if err := g.GEMV(nil, packed, nil, nil, 0); err != nil {
		t.Errorf("zero tokens: %v", err)
	}
}
