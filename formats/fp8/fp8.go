// Package fp8 owns the 8-bit float codecs, E4M3 ("float8_e4m3fn", safetensors "F8_E4M3") and
// E5M2 ("float8_e5m2", "F8_E5M2"), and the ModelOpt FP8 per-tensor weight format built on E4M3
// (weight.go).
//
// E4M3: sign bit 7, exponent bits 6–3 (bias 7), mantissa bits 2–0; exponent 0 is subnormal
// (m·2^-9); no infinities; 0x7F and 0xFF are NaN; largest finite 448 (0x7E).
// E5M2: sign bit 7, exponent bits 6–2 (bias 15), mantissa bits 1–0; exponent 0 is subnormal
// (m·2^-16); exponent 31 is Inf (m=0) or NaN; largest finite 57344 (0x7B).
// Sources: lithos-metal.md §1.2; qwen35-and-quant.md §B.3; the PyTorch dtypes named above.
//
// Float32 → FP8 rounds to nearest, ties to even. Two overflow policies exist:
//   - E4M3FromFloat32 / E5M2FromFloat32 reproduce PyTorch's `tensor.to(float8_*)` cast:
//     a magnitude that rounds above the largest finite value becomes NaN (E4M3, which has no
//     Inf) or Inf (E5M2); NaN becomes 0x7F with the input's sign bit.
//   - E4M3FromFloat32Sat / E5M2FromFloat32Sat saturate instead: such magnitudes (and ±Inf)
//     become ±448 / ±57344, as `clamp(x, -max, max).to(float8_*)` does. NaN stays NaN.
//
// The package imports only the standard library.
package fp8

import "math"

// E4M3Max is the largest finite E4M3 magnitude.
const E4M3Max = 448

// E5M2Max is the largest finite E5M2 magnitude.
const E5M2Max = 57344

// minifloat describes an 8-bit sign/exponent/mantissa format.
type minifloat struct {
	mbits   uint  // mantissa bits
	bias    int   // exponent bias
	maxCode uint8 // largest finite magnitude code
	nanCode uint8 // magnitude code written for NaN
	ovCode  uint8 // magnitude code written on overflow by the non-saturating cast
}

var (
	e4m3 = minifloat{mbits: 3, bias: 7, maxCode: 0x7E, nanCode: 0x7F, ovCode: 0x7F}
	e5m2 = minifloat{mbits: 2, bias: 15, maxCode: 0x7B, nanCode: 0x7F, ovCode: 0x7C}
)

// encode rounds f to the nearest code, ties to even, with the given overflow policy.
func (m minifloat) encode(f float32, saturate bool) uint8 {
	b := math.Float32bits(f)
	sign := uint8(b>>24) & 0x80
	a := b & 0x7FFFFFFF
	if a > 0x7F800000 {
		return sign | m.nanCode
	}
	var code uint32
	switch {
	case a == 0x7F800000:
		code = math.MaxUint32 // Inf overflows
	case a < 0x00800000:
		code = 0 // zero and float32 subnormals: far below half the smallest FP8 subnormal
	default:
		exp := int(a>>23) - 127 // f = man·2^(exp-23)
		man := a&0x7FFFFF | 0x800000
		minExp := 1 - m.bias // exponent of the smallest normal
		q := max(exp, minExp)
		// FP8 quantum at this magnitude: 2^(q-mbits). Count quanta with round-half-even.
		shift := uint(q - int(m.mbits) - (exp - 23))
		var units uint32
		if shift <= 31 {
			units = man >> shift
			rem := man & (1<<shift - 1)
			half := uint32(1) << (shift - 1)
			if rem > half || (rem == half && units&1 == 1) {
				units++
			}
		}
		// A normal code with biased exponent E = q+bias is E<<mbits | (units - 2^mbits), which
		// equals (q-minExp)<<mbits + units; for q = minExp that is units itself (subnormals and,
		// when units reaches 2^mbits, the smallest normal). Mantissa carries move into the exponent.
		code = uint32(q-minExp)<<m.mbits + units
	}
	if code > uint32(m.maxCode) {
		if saturate {
			return sign | m.maxCode
		}
		return sign | m.ovCode
	}
	return sign | uint8(code)
}

var e4m3Table, e5m2Table [256]float32

func init() {
	for c := range 256 {
		e4m3Table[c] = e4m3Decode(uint8(c))
		e5m2Table[c] = e5m2Decode(uint8(c))
	}
}

// nanWithSign returns a quiet float32 NaN carrying the given sign bit (0 or 0x80).
func nanWithSign(sign uint8) float32 {
	return math.Float32frombits(uint32(sign)<<24 | 0x7FC00000)
}

func e4m3Decode(c uint8) float32 {
	sign := c & 0x80
	e := int(c>>3) & 0xF
	m := int(c & 7)
	var v float64
	switch {
	case e == 0xF && m == 7:
		return nanWithSign(sign)
	case e == 0:
		v = math.Ldexp(float64(m), -9)
	default:
		v = math.Ldexp(float64(8+m), e-10)
	}
	if sign != 0 {
		v = -v
	}
	return float32(v)
}

func e5m2Decode(c uint8) float32 {
	sign := c & 0x80
	e := int(c>>2) & 0x1F
	m := int(c & 3)
	var v float64
	switch {
	case e == 0x1F && m != 0:
		return nanWithSign(sign)
	case e == 0x1F:
		v = math.Inf(1)
	case e == 0:
		v = math.Ldexp(float64(m), -16)
	default:
		v = math.Ldexp(float64(4+m), e-17)
	}
	if sign != 0 {
		v = -v
	}
	return float32(v)
}

// E4M3ToFloat32 decodes an E4M3 code exactly. 0x7F/0xFF decode to a quiet NaN with the code's sign.
func E4M3ToFloat32(c uint8) float32 { return e4m3Table[c] }

// E4M3FromFloat32 is PyTorch's float32 → float8_e4m3fn cast: round to nearest even; a
// magnitude rounding above 448 (including ±Inf) and NaN give NaN (0x7F | sign).
func E4M3FromFloat32(f float32) uint8 { return e4m3.encode(f, false) }

// E4M3FromFloat32Sat rounds to nearest even and saturates: magnitudes rounding above 448 and
// ±Inf give ±448 (0x7E | sign); NaN gives 0x7F | sign.
func E4M3FromFloat32Sat(f float32) uint8 { return e4m3.encode(f, true) }

// E5M2ToFloat32 decodes an E5M2 code exactly (0x7C/0xFC are ±Inf, 0x7D–0x7F/0xFD–0xFF NaN).
func E5M2ToFloat32(c uint8) float32 { return e5m2Table[c] }

// E5M2FromFloat32 is PyTorch's float32 → float8_e5m2 cast: round to nearest even; a magnitude
// rounding above 57344 gives ±Inf (0x7C | sign); NaN gives 0x7F | sign.
func E5M2FromFloat32(f float32) uint8 { return e5m2.encode(f, false) }

// E5M2FromFloat32Sat rounds to nearest even and saturates: magnitudes rounding above 57344 and
// ±Inf give ±57344 (0x7B | sign); NaN gives 0x7F | sign.
func E5M2FromFloat32Sat(f float32) uint8 { return e5m2.encode(f, true) }
