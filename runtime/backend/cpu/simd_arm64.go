//go:build arm64 && !purego

package cpu

// The arm64 SIMD path (simd.go's tiles, simd_arm64.s): NEON dot products of decoded weight
// tiles, the tiles written by NEON decoders (NVFP4: table lookups of the codes' float32 bytes,
// the block scale multiplied by an FMA onto −0; FP8: the E4M3 bits placed and rebiased by a
// multiply, as the AVX2 decoder; BF16: a zip with zeros) — exact weights, the values DecodeRow
// writes (FP8's NaN codes aside: all ones, as the AVX2 decoder). The FP8 decoder multiplies
// subnormal float32 values (E4M3 subnormals before the rebias), so it assumes FPCR.FZ = 0, the
// default that Go never changes (as the AVX2 one assumes MXCSR.DAZ = 0); a C library loaded
// through cgo that set flush-to-zero would make E4M3 subnormals decode to ±0. The dot kernels
// keep the amd64 kernels' numerics: per (weight row, activation row) pair eight accumulator
// lanes, column c in lane c mod 8, fused multiply-adds in column order (two 4-lane NEON
// registers: lanes 0–3 and 4–7), then the lanes reduced as ((l0+l1)+(l2+l3)) +
// ((l4+l5)+(l6+l7)) — in Go here, from the lanes the kernel stores — so a product is
// bit-identical to the AVX2 tiles' (and a row's result does not depend on the other rows of
// the call). The fused 8-row kernels and the AVX-512 set are amd64 only: on arm64 every row
// count takes the tiles (haveFused8). On hosts with AVX-512 the amd64 backend runs NVFP4 and
// FP8 in 16 lanes, so there the two differ by float32 rounding; NaN payloads also differ
// between the architectures (the default NaN's sign).
//
// Checked under qemu-aarch64 (go test with GOARCH=arm64; .ci/run): the decoders bit for bit
// against DecodeRow, the dot kernels against the lane order written out in Go, products against
// the scalar kernels and for row invariance, the transformers goldens. Its speed on Apple
// silicon is not measured (no arm64 machine here).

// haveSIMD is true: NEON and FMA are part of ARMv8-A.
var haveSIMD = true

// The tiles path's kernels (simd.go).
var tileDot4x2, tileDot4x1 = dot4x2NEON, dot4x1NEON

// The NEON decoders write the tiles.
var (
	tileDecodeNVFP4 = nvfp4DecodeNEON
	tileDecodeFP8   = fp8DecodeNEON
	tileDecodeBF16  = bf16DecodeNEON
)

const (
	// haveFused8: no fused 8-row kernels here; the tiles take every row count.
	haveFused8 = false
	// simdName names the kernel set for tests.
	simdName = "neon"
)

// Implemented in simd_arm64.s: the 8 lanes of every (weight row, activation row) pair,
// lanes[8·i + l] for weight row i of the tile (rows k floats apart at w), activation row x
// (dot4x2: x0 then x1, lanes[32 + 8·i + l] for x1); k is a positive multiple of 8.

//go:noescape
func dot4x1NEONLanes(w *float32, k int, x *float32, lanes *[32]float32)

//go:noescape
func dot4x2NEONLanes(w *float32, k int, x0, x1 *float32, lanes *[64]float32)

// nvfp4DecodeNEON is nvfp4DecodeAVX2's contract (simd_arm64.s): the NVFP4 groups of a row
// into dst, bit for bit the values DecodeRow writes.
//
//go:noescape
func nvfp4DecodeNEON(dst *float32, base *byte, ents *int32, n int, scales *float32)

// fp8DecodeNEON and bf16DecodeNEON are fp8DecodeAVX2's and bf16DecodeAVX2's contracts.
//
//go:noescape
func fp8DecodeNEON(dst *float32, base *byte, ents *int32, n int)

//go:noescape
func bf16DecodeNEON(dst *float32, base *byte, ents *int32, n int)

// reduce8 adds eight accumulator lanes as the AVX2 kernels' REDUCE4 does.
func reduce8(l []float32) float32 {
	return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]))
}

// dot4x1NEON is dot4x1AVX2's contract: out[i] = W[i]·x for the tile's 4 weight rows.
func dot4x1NEON(w *float32, k int, x *float32, out *[4]float32) {
	var lanes [32]float32
	dot4x1NEONLanes(w, k, x, &lanes)
	for i := range out {
		out[i] = reduce8(lanes[8*i : 8*i+8])
	}
}

// dot4x2NEON is dot4x2AVX2's contract: out[i] = W[i]·x0, out[4+i] = W[i]·x1.
func dot4x2NEON(w *float32, k int, x0, x1 *float32, out *[8]float32) {
	var lanes [64]float32
	dot4x2NEONLanes(w, k, x0, x1, &lanes)
	for i := range out {
		out[i] = reduce8(lanes[8*i : 8*i+8])
	}
}
