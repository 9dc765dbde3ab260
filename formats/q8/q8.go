// Package q8 owns the INT8 group format ("int8" in lithos; llama.cpp's Q8_0 shape), used for
// pack-time requantization of BF16 drafters (lithos-metal.md §1.5):
//
//	weight       I8  [N, K]          signed codes, row-major
//	weight_scale F16 [N, K/G]        one scale per G consecutive elements of a row (G = 32)
//
// Dequantization: w = code · scale (one float32 product).
//
// Quantizer, per group: d = amax/127 in float32; the stored scale is F16(d) (round-half-even);
// code = roundHalfEven(w / scale) with the quotient in float32, clipped to [−127, 127]. Codes are
// computed against the stored F16 scale, so dequantization error is at most scale/2 except where
// F16 rounding shrank the scale and the clip absorbs the excess (at most 127·2^-11·scale for
// normal F16 scales; more for groups with amax below 127·2^-14 ≈ 0.0078, whose scales are F16
// subnormals). A scale that rounds to F16 zero (amax < 127·2^-25) gives zero codes.
//
// llama.cpp's own Q8_0 rounds half away from zero and multiplies by 1/d; this package rounds half
// to even against the stored scale, as the lithos format contract (docs/formats.md) states.
//
// Imports: lithos/formats/f16, standard library.
package q8

import (
	"encoding/binary"
	"fmt"
	"math"

	"lithos/formats/f16"
)

// GroupSize is the default number of consecutive row elements per scale.
const GroupSize = 32

// MaxCode is the largest code magnitude the quantizer writes.
const MaxCode = 127

func checkShapes(elems, codes, scales, k, group int) error {
	if group <= 0 || k <= 0 || k%group != 0 {
		return fmt.Errorf("q8: row length K=%d and group size %d: K must be a positive multiple of the group size", k, group)
	}
	if elems%k != 0 {
		return fmt.Errorf("q8: %d elements is not a whole number of rows of K=%d", elems, k)
	}
	if codes != elems {
		return fmt.Errorf("q8: %d elements need %d code bytes, got %d", elems, elems, codes)
	}
	if scales != 2*(elems/group) {
		return fmt.Errorf("q8: %d elements in groups of %d need %d F16 scale bytes, got %d", elems, group, 2*(elems/group), scales)
	}
	return nil
}

// DecodeRows dequantizes whole rows: dst is [rows, k] row-major float32, codes the rows' I8
// bytes, scales their F16 little-endian scales ([rows, k/group]). dst[i] = code·scale.
// It returns an error when k is not a positive multiple of group or the lengths disagree.
func DecodeRows(dst []float32, codes, scales []byte, k, group int) error {
	if err := checkShapes(len(dst), len(codes), len(scales), k, group); err != nil {
		return err
	}
	for g := 0; g < len(dst)/group; g++ {
		s := f16.ToFloat32(binary.LittleEndian.Uint16(scales[2*g:]))
		for i := g * group; i < (g+1)*group; i++ {
			dst[i] = float32(int8(codes[i])) * s
		}
	}
	return nil
}

// QuantizeRows quantizes whole rows of w ([rows, k] row-major) into codes (I8 bytes) and scales
// (F16 little-endian, [rows, k/group]) by the rule in the package comment. It returns an error
// when the lengths disagree, an element is NaN or ±Inf, or a group's scale overflows F16
// (amax > 65504·127).
func QuantizeRows(codes, scales []byte, w []float32, k, group int) error {
	if err := checkShapes(len(w), len(codes), len(scales), k, group); err != nil {
		return err
	}
	for g := 0; g < len(w)/group; g++ {
		blk := w[g*group : (g+1)*group]
		var amax float32
		for i, x := range blk {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				return fmt.Errorf("q8: element %d is %g", g*group+i, x)
			}
			amax = max(amax, float32(math.Abs(float64(x))))
		}
		h := f16.FromFloat32(amax / MaxCode)
		s := f16.ToFloat32(h)
		if math.IsInf(float64(s), 0) {
			return fmt.Errorf("q8: group %d (row %d): amax %g gives a scale beyond F16", g, g*group/k, amax)
		}
		binary.LittleEndian.PutUint16(scales[2*g:], h)
		out := codes[g*group : (g+1)*group]
		if s == 0 {
			clear(out)
			continue
		}
		for i, x := range blk {
			q := math.RoundToEven(float64(x / s))
			q = max(-MaxCode, min(MaxCode, q))
			out[i] = byte(int8(q))
		}
	}
	return nil
}
