//go:build !amd64 || purego

package model

// haveSIMD is false: this build has no SIMD kernels (the scalar Go loops run every op).
var haveSIMD = false

func vexpAVX2(dst, x *float32, n int, mode int) { panic("model: no SIMD kernels") }
func gdnStepAVX2(S, src, q, k, v, out *float32, dk, dv int, decay, beta float32) {
	panic("model: no SIMD kernels")
}
func dotsAVX2(s, q, k *float32, stride, n, hd int)  { panic("model: no SIMD kernels") }
func axpysAVX2(o, p, v *float32, stride, n, hd int) { panic("model: no SIMD kernels") }
