// Package f16 owns the IEEE 754 binary16 ("half", safetensors "F16") codec used for the
// scales of INT8 groups, AWQ/GPTQ and some MLX checkpoints.
//
// Layout: sign bit 15, exponent bits 14–10 (bias 15), mantissa bits 9–0; exponent 0 is
// subnormal (m·2^-24), exponent 31 is Inf/NaN. Float32 → F16 rounds to nearest, ties to even,
// overflowing to ±Inf and underflowing through the subnormals to ±0, as IEEE 754 (and
// PyTorch's float→float16 cast) does. NaN stays NaN (sign and top payload kept, quiet bit set).
//
// The package imports only the standard library.
package f16

import (
	"encoding/binary"
	"fmt"
	"math"
)

// ToFloat32 widens an F16 bit pattern to float32. The conversion is exact.
func ToFloat32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1F
	man := uint32(h & 0x3FF)
	switch {
	case exp == 0x1F: // Inf or NaN: keep the payload in the top mantissa bits
		return math.Float32frombits(sign | 0x7F800000 | man<<13)
	case exp != 0: // normal: rebias 15 → 127
		return math.Float32frombits(sign | (exp+112)<<23 | man<<13)
	case man == 0:
		return math.Float32frombits(sign)
	default: // subnormal: man·2^-24, exact in float32
		v := float32(man) * (1.0 / (1 << 24))
		return math.Float32frombits(sign | math.Float32bits(v))
	}
}

// FromFloat32 rounds f to the nearest F16 value, ties to even.
func FromFloat32(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	a := b & 0x7FFFFFFF
	if a > 0x7F800000 { // NaN
		return sign | 0x7E00 | uint16(a>>13)&0x3FF
	}
	if a >= 0x47800000 { // ≥ 65536 (and Inf): beyond any rounding to 65504
		return sign | 0x7C00
	}
	exp := int(a>>23) - 127 // unbiased exponent of f
	man := a&0x7FFFFF | 0x800000
	if a < 0x00800000 { // float32 subnormal: far below F16's smallest subnormal
		return sign
	}
	// The F16 quantum at this magnitude is 2^(max(exp,-14)-10); the float32 quantum is 2^(exp-23).
	q := exp
	if q < -14 {
		q = -14
	}
	shift := uint(q - 10 - (exp - 23)) // ≥ 13
	if shift > 31 {
		return sign // below half the smallest subnormal
	}
	// Round man >> shift to nearest even.
	units := man >> shift
	rem := man & (1<<shift - 1)
	half := uint32(1) << (shift - 1)
	if rem > half || (rem == half && units&1 == 1) {
		units++
	}
	// units counts F16 quanta of 2^(q-10). A normal F16 with biased exponent E = q+15 has code
	// E<<10 | (units-1024) = (q+14)<<10 + units; for q = -14 that is units itself (subnormal, or
	// the smallest normal when units reaches 1024). A carry out of the mantissa moves into the
	// exponent field, reaching 0x7C00 (Inf) at the top.
	code := uint32(q+14)<<10 + units
	if code >= 0x7C00 {
		return sign | 0x7C00
	}
	return sign | uint16(code)
}

// Decode converts little-endian F16 bytes to float32. It returns an error when
// len(src) != 2*len(dst).
func Decode(dst []float32, src []byte) error {
	if len(src) != 2*len(dst) {
		return fmt.Errorf("f16: decode %d values from %d bytes: need %d bytes", len(dst), len(src), 2*len(dst))
	}
	for i := range dst {
		dst[i] = ToFloat32(binary.LittleEndian.Uint16(src[2*i:]))
	}
	return nil
}

// Encode rounds float32 values to F16 (FromFloat32) and writes them little-endian to dst.
// It returns an error when len(dst) != 2*len(src).
func Encode(dst []byte, src []float32) error {
	if len(dst) != 2*len(src) {
		return fmt.Errorf("f16: encode %d values into %d bytes: need %d bytes", len(src), len(dst), 2*len(src))
	}
	for i, f := range src {
		binary.LittleEndian.PutUint16(dst[2*i:], FromFloat32(f))
	}
	return nil
}
