package safetensors

import (
	"fmt"
	"math/bits"
)

// DType is a safetensors element type, spelled as in the header ("BF16").
type DType string

// The dtypes of the current format: the Dtype enum of the reference crate
// (huggingface/safetensors safetensors/src/tensor.rs, 2026-05), with its bit
// sizes (Dtype::bitsize).
const (
	Bool       DType = "BOOL"        // 8 bits, 0 or 1
	F4         DType = "F4"          // 4 bits, OCP MX FP4 (E2M1); two elements per byte
	F6E2M3     DType = "F6_E2M3"     // 6 bits, OCP MX FP6
	F6E3M2     DType = "F6_E3M2"     // 6 bits, OCP MX FP6
	U8         DType = "U8"          // 8 bits
	I8         DType = "I8"          // 8 bits
	F8E5M2     DType = "F8_E5M2"     // 8 bits, FP8 E5M2 (arXiv 2209.05433)
	F8E4M3     DType = "F8_E4M3"     // 8 bits, FP8 E4M3 "fn" (torch.float8_e4m3fn)
	F8E8M0     DType = "F8_E8M0"     // 8 bits, OCP MX scale (torch.float8_e8m0fnu)
	F8E4M3FNUZ DType = "F8_E4M3FNUZ" // 8 bits, FP8 E4M3 FNUZ (AMD)
	F8E5M2FNUZ DType = "F8_E5M2FNUZ" // 8 bits, FP8 E5M2 FNUZ (AMD)
	I16        DType = "I16"         // 16 bits
	U16        DType = "U16"         // 16 bits
	F16        DType = "F16"         // 16 bits, IEEE half
	BF16       DType = "BF16"        // 16 bits, bfloat16
	I32        DType = "I32"         // 32 bits
	U32        DType = "U32"         // 32 bits
	F32        DType = "F32"         // 32 bits
	C64        DType = "C64"         // 64 bits, complex of two F32
	F64        DType = "F64"         // 64 bits
	I64        DType = "I64"         // 64 bits
	U64        DType = "U64"         // 64 bits
)

// dtypeInfo is one row of the dtype table: bits per element and the rank of
// the dtype in the crate's Dtype enum. The enum is declared "in increasing
// alignment order" and the crate's writer sorts tensors by descending rank,
// then by name (tensor.rs prepare); PythonOrder reproduces that.
type dtypeInfo struct {
	bits int
	rank int
}

// dtypes lists every dtype in the crate's enum order (the rank is the index).
var dtypes = []DType{
	Bool, F4, F6E2M3, F6E3M2, U8, I8, F8E5M2, F8E4M3, F8E8M0, F8E4M3FNUZ, F8E5M2FNUZ,
	I16, U16, F16, BF16, I32, U32, F32, C64, F64, I64, U64,
}

var dtypeTable = func() map[DType]dtypeInfo {
	bitsOf := map[DType]int{
		Bool: 8, F4: 4, F6E2M3: 6, F6E3M2: 6, U8: 8, I8: 8, F8E5M2: 8, F8E4M3: 8, F8E8M0: 8,
		F8E4M3FNUZ: 8, F8E5M2FNUZ: 8, I16: 16, U16: 16, F16: 16, BF16: 16, I32: 32, U32: 32,
		F32: 32, C64: 64, F64: 64, I64: 64, U64: 64,
	}
	m := make(map[DType]dtypeInfo, len(dtypes))
	for i, d := range dtypes {
		m[d] = dtypeInfo{bits: bitsOf[d], rank: i}
	}
	return m
}()

// DTypes returns every dtype this package knows, in the reference crate's
// enum order (increasing alignment).
func DTypes() []DType { return append([]DType(nil), dtypes...) }

// ParseDType returns the dtype spelled s (case-sensitive, as in headers).
// It returns an error for a spelling that is not in the current format.
func ParseDType(s string) (DType, error) {
	d := DType(s)
	if _, ok := dtypeTable[d]; !ok {
		return "", fmt.Errorf("safetensors: unknown dtype %q", s)
	}
	return d, nil
}

// Valid reports whether d is a dtype of the current format.
func (d DType) Valid() bool {
	_, ok := dtypeTable[d]
	return ok
}

// Bits returns the size of one element in bits (4 for F4, 6 for F6_*, 16 for
// BF16); 0 for an unknown dtype.
func (d DType) Bits() int { return dtypeTable[d].bits }

// String returns the header spelling of d.
func (d DType) String() string { return string(d) }

// ByteSize returns the number of bytes of a tensor of dtype d and the given
// shape ([] is a scalar: one element): product(shape) × Bits / 8. It returns
// an error for an unknown dtype, a negative dimension, a product or bit count
// that overflows (checked in shape order, as the crate's validate does), or a
// bit count that is not a whole number of bytes (sub-byte dtypes).
func ByteSize(d DType, shape []int64) (int64, error) {
	info, ok := dtypeTable[d]
	if !ok {
		return 0, fmt.Errorf("unknown dtype %q", string(d))
	}
	u := make([]uint64, len(shape))
	for i, s := range shape {
		if s < 0 {
			return 0, fmt.Errorf("negative dimension %d at index %d", s, i)
		}
		u[i] = uint64(s)
	}
	_, nbytes, rule, msg := elementBytes(u, info.bits)
	if rule != "" {
		return 0, fmt.Errorf("%s: %s", rule, msg)
	}
	return nbytes, nil
}

// elementBytes computes the element count and byte size of a tensor with the
// given dimensions and element width. On failure it returns the rule broken
// and a message; every product is checked for overflow of int64.
func elementBytes(shape []uint64, nbits int) (elems, nbytes int64, rule Rule, msg string) {
	n := uint64(1)
	for i, d := range shape {
		hi, lo := bits.Mul64(n, d)
		if hi != 0 || lo > maxInt64 {
			return 0, 0, RuleOverflow, fmt.Sprintf("element count overflows int64 at dimension %d", i)
		}
		n = lo
	}
	hi, tb := bits.Mul64(n, uint64(nbits))
	if hi != 0 {
		return 0, 0, RuleOverflow, fmt.Sprintf("%d elements × %d bits overflows", n, nbits)
	}
	if tb%8 != 0 {
		return 0, 0, RuleWholeBytes, fmt.Sprintf("%d elements × %d bits = %d bits is not a whole number of bytes", n, nbits, tb)
	}
	if tb/8 > maxInt64 {
		return 0, 0, RuleOverflow, fmt.Sprintf("%d elements × %d bits overflows int64 bytes", n, nbits)
	}
	return int64(n), int64(tb / 8), "", ""
}

const maxInt64 = 1<<63 - 1
