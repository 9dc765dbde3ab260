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
