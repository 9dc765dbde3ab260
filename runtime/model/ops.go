package model

import "math"

// Elementwise and per-row ops of ARCHITECTURE.md §3.4. Slices are row-major; a "row" is one
// token's vector. Statistics (Σx²) and transcendental functions are computed in float64 and
// rounded once to float32; products and sums of activations are float32.

// RMSNorm writes dst = x · r · scale for each of rows rows of width len(scale), with
// r = 1/√(mean(x²) + eps) per row (qwen35-and-quant.md §A.3). For Qwen3.5's zero-centred
// norms scale is 1 + w, precomputed in float32 (OnePlus), as transformers computes
// (x · r) · (1 + w.float()); for the GDN gated norm and other plain norms scale is w.
// dst may be x.
func RMSNorm(dst, x, scale []float32, rows int, eps float32) {
	n := len(scale)
	for r := 0; r < rows; r++ {
		xr := x[r*n : r*n+n]
		dr := dst[r*n : r*n+n]
		inv := invRMS(xr, eps)
		for i, v := range xr {
			dr[i] = (v * inv) * scale[i]
		}
	}
}

// invRMS returns float32(1/√(mean(x²) + eps)).
func invRMS(x []float32, eps float32) float32 {
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	return float32(1 / math.Sqrt(ss/float64(len(x))+float64(eps)))
}

// OnePlus returns 1 + w elementwise in float32: the scale of a zero-centred (1+w) RMSNorm.
func OnePlus(w []float32) []float32 {
	s := make([]float32, len(w))
	for i, v := range w {
		s[i] = 1 + v
	}
	return s
}

// GatedRMSNorm is the GDN output norm (transformers' Qwen3_5RMSNormGated, "norm before
// gate"): for each group of len(w) values of x (one value head of one row; groups of z
// alike), dst = ((x · r) · w) · silu(z), r = 1/√(mean(x²) + eps), w the plain weight.
// x, z and dst hold groups·len(w) values; dst may be x.
func GatedRMSNorm(dst, x, z, w []float32, groups int, eps float32) {
	d := len(w)
	var sz []float32 // SiLU(z) of a group on the SIMD path
	if useSIMD() {
		var buf [vexpChunk]float32
		sz = buf[:]
		if d > len(sz) {
			sz = make([]float32, d)
		}
		sz = sz[:d]
	}
	for g := 0; g < groups; g++ {
		xr := x[g*d : g*d+d]
		zr := z[g*d : g*d+d]
		dr := dst[g*d : g*d+d]
		inv := invRMS(xr, eps)
		if sz != nil {
			vexp(sz, zr, vexpSiLU)
			for i, v := range xr {
				dr[i] = (w[i] * (v * inv)) * sz[i]
			}
			continue
		}
		for i, v := range xr {
			dr[i] = (w[i] * (v * inv)) * SiLU(zr[i])
		}
	}
}

// L2Normalize scales each group of d values of x in place by 1/√(Σx² + eps) (eps added to
// the sum, transformers' l2norm) and then by post (1/√d_k for GDN queries, 1 for keys).
func L2Normalize(x []float32, d int, eps float32, post float32) {
	for g := 0; g+d <= len(x); g += d {
		v := x[g : g+d]
		var ss float64
		for _, e := range v {
			ss += float64(e) * float64(e)
		}
		inv := float32(1 / math.Sqrt(ss+float64(eps)))
		for i := range v {
			v[i] = (v[i] * inv) * post
		}
	}
}

// SiLU returns x·σ(x) = x / (1 + e^−x), rounded once to float32.
func SiLU(x float32) float32 {
	return float32(float64(x) / (1 + math.Exp(-float64(x))))
}

// Sigmoid returns 1 / (1 + e^−x), rounded once to float32.
func Sigmoid(x float32) float32 {
	return float32(1 / (1 + math.Exp(-float64(x))))
}

// Softplus returns log(1 + eˣ), or x when x > 20 (PyTorch's F.softplus with beta 1,
// threshold 20), rounded once to float32.
func Softplus(x float32) float32 {
	if x > 20 {
		return x
	}
	return float32(math.Log1p(math.Exp(float64(x))))
}

// SwiGLU writes dst[i] = silu(gate[i]) · up[i] (transformers' Qwen3_5MLP: act(gate(x)) * up(x)).
// dst may alias gate or up.
func SwiGLU(dst, gate, up []float32) {
	up = up[:len(dst)]
	gate = gate[:len(dst)]
	if useSIMD() {
		var buf [vexpChunk]float32
		for i := 0; i < len(dst); i += vexpChunk {
			e := min(i+vexpChunk, len(dst))
			s := buf[:e-i]
			vexp(s, gate[i:e], vexpSiLU)
			for j, v := range s {
				dst[i+j] = v * up[i+j]
			}
		}
		return
	}
	for i := range dst {
		dst[i] = SiLU(gate[i]) * up[i]
	}
}

// SigmoidGate does x[i] *= σ(gate[i]) (the attention output gate).
func SigmoidGate(x, gate []float32) {
	gate = gate[:len(x)]
	if useSIMD() {
		var buf [vexpChunk]float32
		for i := 0; i < len(x); i += vexpChunk {
			e := min(i+vexpChunk, len(x))
			s := buf[:e-i]
			vexp(s, gate[i:e], vexpSigmoid)
			for j, v := range s {
				x[i+j] *= v
			}
		}
		return
	}
	for i := range x {
		x[i] *= Sigmoid(gate[i])
	}
}

// Add does dst[i] += x[i] (a residual add, float32).
func Add(dst, x []float32) {
	x = x[:len(dst)]
	for i := range dst {
		dst[i] += x[i]
	}
}

// Argmax returns the index of the largest value of x, the lowest index on ties (as
// torch.argmax); NaN values are skipped (0 when nothing is larger than −Inf).
func Argmax(x []float32) int {
	best, arg := float32(math.Inf(-1)), 0
	for i, v := range x {
		if v > best {
			best, arg = v, i
		}
	}
	return arg
}

// GDNGates writes β = σ(b) and g = negA · softplus(a + dtBias) for rows rows of H value heads
// (qwen35-and-quant.md §A.5 step 5), where negA = −exp(A_log) precomputed in float32 (NegExp).
// a and b are [rows, H]; beta and g likewise.
func GDNGates(beta, g, a, b, negA, dtBias []float32, rows int) {
	h := len(negA)
	for r := 0; r < rows; r++ {
		for i := 0; i < h; i++ {
			beta[r*h+i] = Sigmoid(b[r*h+i])
			g[r*h+i] = negA[i] * Softplus(a[r*h+i]+dtBias[i])
		}
	}
}

// NegExp returns −exp(x) elementwise in float32 (−exp(A_log), the GDN decay rate).
func NegExp(x []float32) []float32 {
	s := make([]float32, len(x))
	for i, v := range x {
		s[i] = -float32(math.Exp(float64(v)))
	}
	return s
}
