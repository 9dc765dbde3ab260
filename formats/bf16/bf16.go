// Package bf16 owns the bfloat16 codec: the top 16 bits of an IEEE binary32, as stored in
// safetensors "BF16" tensors (little-endian, two bytes per element).
//
// Float32 → BF16 rounds to nearest, ties to even (the rule of PyTorch's float→bfloat16 cast,
// lithos-metal.md §1.2). Overflow rounds to ±Inf as IEEE rounding does. NaN inputs give a quiet
// NaN with the input's sign and top payload bits; PyTorch's own NaN bits differ between its
// scalar (0x7FC0) and vectorised (0xFFFF) CPU paths, so only NaN-ness is part of the contract.
//
// The package imports only the standard library.
package bf16

import (
	"encoding/binary"
	"fmt"
	"math"
)

// ToFloat32 widens a BF16 bit pattern to float32. The conversion is exact.
func ToFloat32(h uint16) float32 {
	return math.Float32frombits(uint32(h) << 16)
}

// FromFloat32 rounds f to the nearest BF16 value, ties to even.
func FromFloat32(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7FFFFFFF > 0x7F800000 { // NaN: keep sign and top payload, force the quiet bit
		return uint16(b>>16) | 0x0040
	}
	// Add half an ulp of the result minus one, plus the result's low bit: a tie rounds up only
	// when the kept part is odd. Carries propagate into the exponent (and to Inf) correctly.
	lsb := (b >> 16) & 1
	return uint16((b + 0x7FFF + lsb) >> 16)
}

// Decode converts little-endian BF16 bytes to float32: dst[i] = ToFloat32(src[2i:2i+2]).
// It returns an error when len(src) != 2*len(dst).
func Decode(dst []float32, src []byte) error {
	if len(src) != 2*len(dst) {
		return fmt.Errorf("bf16: decode %d values from %d bytes: need %d bytes", len(dst), len(src), 2*len(dst))
	}
	for i := range dst {
		dst[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(src[2*i:])) << 16)
	}
	return nil
}

// Encode rounds float32 values to BF16 (FromFloat32) and writes them little-endian to dst.
// It returns an error when len(dst) != 2*len(src).
func Encode(dst []byte, src []float32) error {
	if len(dst) != 2*len(src) {
		return fmt.Errorf("bf16: encode %d values into %d bytes: need %d bytes", len(src), len(dst), 2*len(src))
	}
	for i, f := range src {
		binary.LittleEndian.PutUint16(dst[2*i:], FromFloat32(f))
	}
	return nil
}
