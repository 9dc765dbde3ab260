//go:build (!amd64 && !arm64) || purego

package cpu

// haveSIMD is false: this build has no SIMD kernels (the scalar Go kernels serve every matrix).
var haveSIMD = false

// The tiles path's kernels: none (haveSIMD is false, so simd.go never calls them).
var tileDot4x2, tileDot4x1 = dot4x2AVX2, dot4x1AVX2

var (
	tileDecodeNVFP4 = nvfp4DecodeAVX2
	tileDecodeFP8   = fp8DecodeAVX2
	tileDecodeBF16  = bf16DecodeAVX2
)

const (
	haveFused8 = false
	simdName   = "none"
)

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

var haveAVX512 = false

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
