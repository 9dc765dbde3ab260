package fp8

import (
	"fmt"
	"math"
)

// ModelOpt FP8 per-tensor weights (qwen35-and-quant.md §B.3, lithos-metal.md §1.4):
//
//	weight       F8_E4M3 [N, K]   E4M3 codes, row-major
//	weight_scale F32     [] / [1] per-tensor multiplier, amax/448
//	input_scale  F32              activation scale: ignored (weights-only, activations stay BF16/FP32)
//
// Dequantization: w = e4m3(code) · weight_scale, one float32 product per element.

// DecodeWeights dequantizes FP8 per-tensor weights: dst[i] = E4M3ToFloat32(codes[i]) · scale,
// rounded once to float32. The element order is the caller's (row-major [N, K] in checkpoints);
// any number of whole or partial rows may be decoded per call. It returns an error when the
// lengths differ or scale is not finite and positive.
func DecodeWeights(dst []float32, codes []byte, scale float32) error {
	if len(dst) != len(codes) {
		return fmt.Errorf("fp8: decode %d codes into %d values", len(codes), len(dst))
	}
	if !(scale > 0) || math.IsInf(float64(scale), 0) {
		return fmt.Errorf("fp8: weight_scale %g: want a finite positive multiplier", scale)
	}
	for i, c := range codes {
		dst[i] = e4m3Table[c] * scale
	}
	return nil
}

// WeightScale returns the per-tensor scale for weights with absolute maximum amax:
// float32(amax / 448), the value ModelOpt exports as weight_scale (qwen35-and-quant.md §B.3).
// An all-zero tensor (amax = 0) gets scale 1 so that the scale stays a positive multiplier.
func WeightScale(amax float32) float32 {
	if amax == 0 {
		return 1
	}
	return amax / E4M3Max
}

// QuantizeWeights writes codes[i] = E4M3FromFloat32Sat(w[i] / scale) with the quotient rounded
// to float32. It returns an error when the lengths differ, scale is not finite and positive, or
// an input is NaN or ±Inf. With scale = WeightScale(max|w|) no quotient exceeds 448·(1+2^-23), so
// saturation only absorbs that last-bit excess.
//
// ModelOpt computes the quotient in the weight's dtype (BF16 for BF16 checkpoints) before the
// E4M3 cast; its codes can therefore differ from these at E4M3 rounding ties. This quantizer is
// deterministic but not claimed bit-exact with ModelOpt (docs/formats.md).
func QuantizeWeights(codes []byte, w []float32, scale float32) error {
	if len(codes) != len(w) {
		return fmt.Errorf("fp8: quantize %d values into %d codes", len(w), len(codes))
	}
	if !(scale > 0) || math.IsInf(float64(scale), 0) {
		return fmt.Errorf("fp8: scale %g: want a finite positive multiplier", scale)
	}
	for i, x := range w {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return fmt.Errorf("fp8: quantize: element %d is %g", i, x)
		}
		codes[i] = e4m3.encode(x/scale, true)
	}
	return nil
}
