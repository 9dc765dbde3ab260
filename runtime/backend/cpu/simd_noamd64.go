//go:build !amd64 || purego

package cpu

// The amd64 kernels simd.go names, for builds without them (every other architecture, and
// -tags purego): never called, since haveSIMD is false there or, on arm64, the tiles use the
// NEON kernels (simd_arm64.go), the fused 8-row path is off (haveFused8) and haveAVX512 false.

var haveAVX512 = false

func nvfp4DecodeAVX2(*float32, *byte, *int32, int, *float32) { panic("cpu: no SIMD kernels") }
func fp8DecodeAVX2(*float32, *byte, *int32, int)             { panic("cpu: no SIMD kernels") }
func bf16DecodeAVX2(*float32, *byte, *int32, int)            { panic("cpu: no SIMD kernels") }
func dot4x2AVX2(*float32, int, *float32, *float32, *[8]float32) {
	panic("cpu: no SIMD kernels")
}
func dot4x1AVX2(*float32, int, *float32, *[4]float32) { panic("cpu: no SIMD kernels") }

func nvfp4Dot8AVX2(*float32, *byte, *int32, int, *float32, int, *[8]float32) {
	panic("cpu: no SIMD kernels")
}
func fp8Dot8AVX2(*float32, *byte, *int32, int, *float32, int, *[8]float32) {
	panic("cpu: no SIMD kernels")
}
func bf16Dot8AVX2(*float32, *byte, *int32, int, *float32, int, *[8]float32) {
	panic("cpu: no SIMD kernels")
}

func dot4x1AVX512(*float32, int, *float32, *[4]float32) { panic("cpu: no SIMD kernels") }
func dot4x2AVX512(*float32, int, *float32, *float32, *[8]float32) {
	panic("cpu: no SIMD kernels")
}
func nvfp4Dot2x8AVX512(*float32, *[2]*byte, *int32, int, *float32, int, *[16]float32) {
	panic("cpu: no SIMD kernels")
}
func fp8Dot2x8AVX512(*float32, *[2]*byte, *int32, int, *float32, int, *[16]float32) {
	panic("cpu: no SIMD kernels")
}
