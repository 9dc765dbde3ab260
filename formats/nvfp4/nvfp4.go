// Package nvfp4 owns NVFP4 weights: E2M1 codes in blocks of 16 along the input (last) dimension,
// one E4M3 block scale per block, and a float32 tensor scale (qwen35-and-quant.md §B.3–B.4,
// lithos-metal.md §1.7, ARCHITECTURE.md §3.1).
//
// Two checkpoint layouts hold the same bytes:
//
//	ModelOpt: weight U8 [N, K/2]          two codes per byte, element 2i in the low nibble
//	          weight_scale F8_E4M3 [N, K/16]  linear row-major (never swizzled on disk)
//	          weight_scale_2 F32 [] or [1]     tensor scale, a multiplier: amax/(6·448)
//	          input_scale F32                  activation scale: ignored
//	MLX:      weight U32 [N, K/8]          little-endian words, element 0 in bits 0–3: the same
//	                                       byte stream as ModelOpt's U8 view
//	          scales U8 [N, K/16]          E4M3 block scales; no tensor scale (1)
//
// Dequantization: w = e2m1(code) · (e4m3(block_scale) · tensor_scale), the scale product first
// (ModelOpt NVFP4QTensor.dequantize order), each product rounded to float32.
//
// The quantizer (quantize.go) is ModelOpt's NVFP4QTensor rule, bit-exact; CheckConvention
// (check.go) refuses a tensor scale read with the wrong convention.
//
// Imports: lithos/formats/fp8 (E4M3), lithos/formats/e2m1 (codes), standard library.
package nvfp4

import (
	"fmt"
	"math"

	"lithos/formats/e2m1"
	"lithos/formats/fp8"
)

// BlockSize is the number of consecutive elements of a row sharing one E4M3 block scale.
const BlockSize = 16

// checkShapes validates the lengths of one call: rows·k elements, rows·k/2 code bytes,
// rows·k/16 scale bytes.
func checkShapes(elems, codes, scales, k int) (rows int, err error) {
	if k <= 0 || k%BlockSize != 0 {
		return 0, fmt.Errorf("nvfp4: row length K=%d: must be a positive multiple of %d", k, BlockSize)
	}
	if elems%k != 0 {
		return 0, fmt.Errorf("nvfp4: %d elements is not a whole number of rows of K=%d", elems, k)
	}
	rows = elems / k
	if codes != rows*k/2 {
		return 0, fmt.Errorf("nvfp4: %d rows of K=%d need %d code bytes, got %d", rows, k, rows*k/2, codes)
	}
	if scales != rows*k/BlockSize {
		return 0, fmt.Errorf("nvfp4: %d rows of K=%d need %d block-scale bytes, got %d", rows, k, rows*k/BlockSize, scales)
	}
	return rows, nil
}

// DecodeRows dequantizes whole rows of a ModelOpt NVFP4 tensor to float32.
//
// dst is [rows, k] row-major; codes holds rows·k/2 bytes (the `weight` U8 bytes of those rows);
// scales holds rows·k/16 E4M3 bytes (`weight_scale`); tensorScale is `weight_scale_2`.
// dst[r,j] = e2m1(code) · (e4m3(scale[r, j/16]) · tensorScale). A NaN block-scale code yields
// NaN weights; CheckConvention refuses such tensors before decoding. It returns an error when
// k is not a positive multiple of 16 or the slice lengths disagree.
func DecodeRows(dst []float32, codes, scales []byte, k int, tensorScale float32) error {
	if _, err := checkShapes(len(dst), len(codes), len(scales), k); err != nil {
		return err
	}
	for b, sc := range scales {
		bs := fp8.E4M3ToFloat32(sc) * tensorScale
		out := dst[b*BlockSize : (b+1)*BlockSize]
		in := codes[b*BlockSize/2 : (b+1)*BlockSize/2]
		for i, c := range in {
			out[2*i] = e2m1.ToFloat32(c&0xF) * bs
			out[2*i+1] = e2m1.ToFloat32(c>>4) * bs
		}
	}
	return nil
}

// DecodeMLXRows dequantizes whole rows of an MLX "nvfp4" tensor: words holds the rows' `weight`
// U32 data as stored (little-endian), whose byte view is ModelOpt's code layout, and scales the
// `scales` U8 (E4M3) bytes. MLX stores no tensor scale, so it is 1. Errors as DecodeRows.
func DecodeMLXRows(dst []float32, words, scales []byte, k int) error {
	return DecodeRows(dst, words, scales, k, 1)
}

// finite reports whether x is neither NaN nor ±Inf.
func finite(x float32) bool {
	return !math.IsNaN(float64(x)) && !math.IsInf(float64(x), 0)
}
