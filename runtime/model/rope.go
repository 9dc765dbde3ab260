package model

import "math"

// Rope is partial NeoX-style rotary position embedding over the first Dim dims of a head
// (qwen35-and-quant.md §A.6 step 3): inv_freq_i = 1/θ^(2i/Dim) for i < Dim/2, angle
// a_i = pos·inv_freq_i, and pairs (i, i+Dim/2) rotate:
//
//	y_i = x_i·cos a_i − x_{i+Dim/2}·sin a_i,   y_{i+Dim/2} = x_{i+Dim/2}·cos a_i + x_i·sin a_i
//
// (x·cos + rotate_half(x)·sin with rotate_half(x) = [−x₂, x₁]); dims ≥ Dim pass through.
// InvFreq and the angles are float32 as transformers computes them
// (Qwen3_5TextRotaryEmbedding: float32 arange/dim, θ**, reciprocal; inv_freq·pos as a float32
// product), cos and sin rounded once from float64.
type Rope struct {
	Dim     int
	InvFreq []float32
}

// NewRope returns the RoPE of dim rotated dims with base theta.
func NewRope(theta float64, dim int) Rope {
	r := Rope{Dim: dim, InvFreq: make([]float32, dim/2)}
	for i := range r.InvFreq {
		e := float32(2*i) / float32(dim)
		p := float32(math.Pow(theta, float64(e)))
		r.InvFreq[i] = 1 / p
	}
	return r
}

// Tables writes cos and sin of the angles at position pos (Dim/2 values each).
func (r Rope) Tables(cos, sin []float32, pos int) {
	for i, f := range r.InvFreq {
		a := float32(pos) * f
		cos[i] = float32(math.Cos(float64(a)))
		sin[i] = float32(math.Sin(float64(a)))
	}
}

// Apply rotates the first Dim values of each head of x (heads consecutive groups of
// headDim values) with the tables of one position.
func (r Rope) Apply(x []float32, headDim int, cos, sin []float32) {
	half := r.Dim / 2
	for h := 0; h+headDim <= len(x); h += headDim {
		v := x[h : h+r.Dim]
		for i := 0; i < half; i++ {
			x1, x2 := v[i], v[i+half]
			v[i] = x1*cos[i] - x2*sin[i]
			v[i+half] = x2*cos[i] + x1*sin[i]
		}
	}
}
