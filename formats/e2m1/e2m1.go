// Package e2m1 owns the 4-bit E2M1 float codes of NVFP4 ("float4_e2m1fn"): bit 3 is the sign,
// bits 2–0 index the magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6 (code 8 is −0). Two codes share a
// byte in NVFP4 tensors, the even element in the low nibble (package nvfp4).
//
// FromFloat32 is ModelOpt's NVFP4QTensor._cast_fp4 rule (qwen35-and-quant.md §B.4,
// ARCHITECTURE.md §3.1): the magnitude index is the number of thresholds
// {0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5} strictly below |x|, plus one when |x| is exactly 0.75,
// 1.75 or 3.5. That is round-to-nearest with ties to the even code (as values: 0.25→0,
// 0.75→1, 1.25→1, 1.75→2, 2.5→2, 3.5→4, 5→4), saturating at 6 (|x| > 5 → 6, including +Inf
// and NaN). The sign bit is set when x < 0, so −0.0 gives code 0 and tiny negatives give code
// 8; NaN gives code 7 (a NaN sorts after every threshold in PyTorch's searchsorted and is not < 0).
//
// The package imports only the standard library.
package e2m1

import "math"

// Max is the largest E2M1 magnitude.
const Max = 6

// magnitudes are the values of codes 0–7.
var magnitudes = [8]float32{0, 0.5, 1, 1.5, 2, 3, 4, 6}

// values are the values of all 16 codes.
var values = [16]float32{0, 0.5, 1, 1.5, 2, 3, 4, 6, float32(math.Copysign(0, -1)), -0.5, -1, -1.5, -2, -3, -4, -6}

// ToFloat32 returns the value of the low 4 bits of c. Code 8 is −0.0.
func ToFloat32(c uint8) float32 { return values[c&0xF] }

// Magnitude returns the magnitude |value| of code c (its low 3 bits).
func Magnitude(c uint8) float32 { return magnitudes[c&7] }

// Bit patterns of the thresholds: the magnitude index counts the thresholds |x| exceeds,
// strictly for 0.25, 1.25, 2.5 and 5, inclusively for 0.75, 1.75 and 3.5 (the ties ModelOpt
// rounds up), i.e. bits(|x|) > bits(t) or bits(|x|) > bits(t)−1.
const (
	t025 = 0x3E800000     // 0.25
	t075 = 0x3F400000 - 1 // 0.75, inclusive
	t125 = 0x3FA00000     // 1.25
	t175 = 0x3FE00000 - 1 // 1.75, inclusive
	t250 = 0x40200000     // 2.5
	t350 = 0x40600000 - 1 // 3.5, inclusive
	t500 = 0x40A00000     // 5
)

// FromFloat32 returns the code ModelOpt's rule assigns to x (see the package comment).
//
// It works on the bit pattern without data-dependent branches (it sits in the NVFP4 quantizer's
// inner loop): non-negative float32 patterns order as their values, NaN patterns are clamped to
// +Inf's (index 7), and (t − a) >> 31 is 1 exactly when a > t for a, t < 2^31.
func FromFloat32(x float32) uint8 {
	a := min(math.Float32bits(x)&0x7FFFFFFF, 0x7F800000)
	m := (t025-a)>>31 + (t075-a)>>31 + (t125-a)>>31 + (t175-a)>>31 + (t250-a)>>31 + (t350-a)>>31 + (t500-a)>>31
	if x < 0 { // false for −0.0 and NaN
		m |= 8
	}
	return uint8(m)
}
