package model

// The SIMD paths of the per-row ops (amd64 with AVX2 and FMA; simd_amd64.s): the exponential
// family (SiLU, sigmoid, e^x) four float64 lanes at a time, the gated delta rule's row update,
// and attention's scores and weighted sums over the key cache. Each is used for every row
// count alike, so a row's result does not depend on how many rows share the step.
//
// Numerics against the scalar loops: SiLU, sigmoid and e^x are computed as the scalar
// functions define them (float64 arithmetic rounded once to float32) with an e^x of at most
// a few float64 ulps of error instead of math.Exp's, so a float32 result differs only where
// the float64 value lies within those ulps of a float32 rounding boundary; the gated delta
// rule and attention use fused multiply-adds (one rounding per multiply-add instead of two)
// and attention's dot products 16 partial sums instead of 4. All within float32 rounding of
// the scalar results.

// simdOn switches the SIMD paths off for tests that compare them with the scalar loops.
var simdOn = true

func useSIMD() bool { return haveSIMD && simdOn }

// vexpAVX2 modes.
const (
	vexpExp     = 0 // float32(e^x)
	vexpSiLU    = 1 // float32(x / (1 + e^−x))
	vexpSigmoid = 2 // float32(1 / (1 + e^−x))
)

// vexp writes dst[i] = f(x[i]) for i < len(x), f chosen by mode; dst may be x. The last
// len(x) mod 4 values go through the same 4-lane code via a scratch copy.
func vexp(dst, x []float32, mode int) {
	n := len(x)
	if n == 0 {
		return
	}
	dst = dst[:n]
	n4 := n &^ 3
	if n4 > 0 {
		vexpAVX2(&dst[0], &x[0], n4, mode)
	}
	if n4 < n {
		var buf [4]float32
		copy(buf[:], x[n4:])
		vexpAVX2(&buf[0], &buf[0], 4, mode)
		copy(dst[n4:], buf[:n-n4])
	}
}

// vexpChunk is the scratch length of the ops that combine a vexp result with other operands.
const vexpChunk = 256
