//go:build amd64 && !purego

package cpu

import "golang.org/x/sys/cpu"

// haveSIMD reports whether this CPU runs the AVX2 + FMA kernels of simd_amd64.s.
var haveSIMD = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// The tiles path's kernels (simd.go): the AVX2 dot products and decoders.
var tileDot4x2, tileDot4x1 = dot4x2AVX2, dot4x1AVX2

// The AVX2 decoders write every kind of tile.
var (
	tileDecodeNVFP4 = nvfp4DecodeAVX2
	tileDecodeFP8   = fp8DecodeAVX2
	tileDecodeBF16  = bf16DecodeAVX2
)

// haveFused8: the fused 8-row kernels exist.
const haveFused8 = true

// simdName names the kernel set for tests ("avx2"; "avx512" for the wide one).
const simdName = "avx2"

// Implemented in simd_amd64.s; see simd.go for what each computes.

//go:noescape
func nvfp4DecodeAVX2(dst *float32, base *byte, ents *int32, n int, scales *float32)

//go:noescape
func fp8DecodeAVX2(dst *float32, base *byte, ents *int32, n int)

//go:noescape
func bf16DecodeAVX2(dst *float32, base *byte, ents *int32, n int)

//go:noescape
func dot4x2AVX2(w *float32, k int, x0, x1 *float32, out *[8]float32)

//go:noescape
func dot4x1AVX2(w *float32, k int, x *float32, out *[4]float32)

//go:noescape
func nvfp4Dot8AVX2(scales *float32, base *byte, ents *int32, n int, x *float32, k int, out *[8]float32)

//go:noescape
func fp8Dot8AVX2(scales *float32, base *byte, ents *int32, n int, x *float32, k int, out *[8]float32)

//go:noescape
func bf16Dot8AVX2(scales *float32, base *byte, ents *int32, n int, x *float32, k int, out *[8]float32)

// haveAVX512 reports whether this CPU runs the AVX-512 kernels of simd512_amd64.s.
var haveAVX512 = haveSIMD && cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512BW

//go:noescape
func dot4x1AVX512(w *float32, k int, x *float32, out *[4]float32)

//go:noescape
func dot4x2AVX512(w *float32, k int, x0, x1 *float32, out *[8]float32)

//go:noescape
func nvfp4Dot2x8AVX512(scales *float32, bases *[2]*byte, ents *int32, n int, x *float32, k int, out *[16]float32)

//go:noescape
func fp8Dot2x8AVX512(scales *float32, bases *[2]*byte, ents *int32, n int, x *float32, k int, out *[16]float32)
