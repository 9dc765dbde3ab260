// Package int4 owns affine 4-bit weights: w = scale·q + bias with q in 0..15 and one
// (scale, bias) pair per group of G consecutive elements of a row (qwen35-and-quant.md Part C,
// lithos-metal.md §1.6). Three checkpoint packings are read into one logical form, Rows:
//
//	MLX   (mlx.go):  weight U32 [N, K/8] LSB-first (element 0 in bits 0–3 of a little-endian word),
//	                 scales, biases [N, K/G] in BF16/F16/F32; G ∈ {32, 64, 128}; w = scale·q + bias
//	AWQ   (awq.go):  AutoAWQ GEMM: qweight I32 [K, N/8] packed along the output dimension in the
//	                 interleaved order [0,2,4,6,1,3,5,7], qzeros I32 [K/G, N/8] likewise,
//	                 scales F16 [K/G, N]; w = (q − z)·s, i.e. bias = −s·z
//	GPTQ  (gptq.go): AutoGPTQ v1: qweight I32 [K/8, N] packed along the input dimension LSB-first,
//	                 qzeros I32 [K/G, N/8] storing z − 1 (v2 checkpoints store z), scales F16
//	                 [K/G, N], g_idx I32 [K]; w = s·(q − z), i.e. bias = −s·z
//
// Logical orientation is always [N, K] = [out, in], groups along K. The AWQ/GPTQ biases −s·z
// are exact in float32 (an 11-bit F16 significand times a 5-bit integer), and so is their
// dequantization, which is the real value s·(q−z); the reference implementations' own FP16
// arithmetic rounds that product further.
//
// The quantizer (mlx.go) reproduces mlx.core.quantize's affine mode as its Metal kernel computes
// it (mlx/backend/metal/kernels/quantized.h affine_quantize; lithos-metal.md §1.6).
//
// Imports: lithos/formats/bf16, lithos/formats/f16, standard library.
package int4

import (
	"encoding/binary"
	"fmt"
	"math"

	"lithos/formats/bf16"
	"lithos/formats/f16"
)

// MaxCode is the largest 4-bit code.
const MaxCode = 15

// ScaleType is the storage dtype of MLX scales and biases, named as safetensors names it.
type ScaleType string

// Scale and bias storage dtypes.
const (
	BF16 ScaleType = "BF16"
	F16  ScaleType = "F16"
	F32  ScaleType = "F32"
)

// Size returns the bytes per element of t, or 0 for an unknown type.
func (t ScaleType) Size() int {
	switch t {
	case BF16, F16:
		return 2
	case F32:
		return 4
	}
	return 0
}

func (t ScaleType) check() error {
	if t.Size() == 0 {
		return fmt.Errorf("int4: scale dtype %q: want BF16, F16 or F32", string(t))
	}
	return nil
}

// load decodes element i of a little-endian array of t.
func (t ScaleType) load(b []byte, i int) float32 {
	switch t {
	case BF16:
		return bf16.ToFloat32(binary.LittleEndian.Uint16(b[2*i:]))
	case F16:
		return f16.ToFloat32(binary.LittleEndian.Uint16(b[2*i:]))
	default:
		return math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
}

// round rounds v to t (round-half-even) and returns the stored bits' value.
func (t ScaleType) round(v float32) float32 {
	switch t {
	case BF16:
		return bf16.ToFloat32(bf16.FromFloat32(v))
	case F16:
		return f16.ToFloat32(f16.FromFloat32(v))
	default:
		return v
	}
}

// store writes v rounded to t as element i of b.
func (t ScaleType) store(b []byte, i int, v float32) {
	switch t {
	case BF16:
		binary.LittleEndian.PutUint16(b[2*i:], bf16.FromFloat32(v))
	case F16:
		binary.LittleEndian.PutUint16(b[2*i:], f16.FromFloat32(v))
	default:
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
}

// Rows holds consecutive rows of an affine INT4 matrix in logical form. The caller allocates
// the slices; their lengths fix the row count.
type Rows struct {
	K, GroupSize int
	Codes        []uint8   // [rows, K], one code 0..15 per byte
	Scales       []float32 // [rows, K/GroupSize]
	Biases       []float32 // [rows, K/GroupSize]
}

// Len returns the number of rows, len(Codes)/K (0 when K is not positive).
func (r *Rows) Len() int {
	if r.K <= 0 {
		return 0
	}
	return len(r.Codes) / r.K
}

// check validates the geometry and slice lengths.
func (r *Rows) check() error {
	if r.GroupSize <= 0 || r.K <= 0 || r.K%r.GroupSize != 0 {
		return fmt.Errorf("int4: row length K=%d and group size %d: K must be a positive multiple of the group size", r.K, r.GroupSize)
	}
	if len(r.Codes)%r.K != 0 {
		return fmt.Errorf("int4: %d codes is not a whole number of rows of K=%d", len(r.Codes), r.K)
	}
	groups := len(r.Codes) / r.GroupSize
	if len(r.Scales) != groups || len(r.Biases) != groups {
		return fmt.Errorf("int4: %d rows of K=%d in groups of %d need %d scales and biases, got %d and %d",
			r.Len(), r.K, r.GroupSize, groups, len(r.Scales), len(r.Biases))
	}
	return nil
}

// Decode dequantizes the rows into dst ([rows, K] row-major):
// dst[i] = float32(scale·q) + bias, the product rounded to float32 before the sum (no fused
// multiply-add, so every platform gives the same bits). It returns an error when the geometry
// or lengths disagree, or a code exceeds 15.
func (r *Rows) Decode(dst []float32) error {
	if err := r.check(); err != nil {
		return err
	}
	if len(dst) != len(r.Codes) {
		return fmt.Errorf("int4: decode %d codes into %d values", len(r.Codes), len(dst))
	}
	for g := range r.Scales {
		s, b := r.Scales[g], r.Biases[g]
		for i := g * r.GroupSize; i < (g+1)*r.GroupSize; i++ {
			q := r.Codes[i]
			if q > MaxCode {
				return fmt.Errorf("int4: code %d at element %d exceeds %d", q, i, MaxCode)
			}
			dst[i] = float32(s*float32(q)) + b
		}
	}
	return nil
}

// UnpackCodes expands MLX/LSB-first packed nibbles: codes[2i] = packed[i] & 0xF and
// codes[2i+1] = packed[i] >> 4, which is MLX's U32 order read as little-endian bytes.
// It returns an error when len(codes) != 2·len(packed).
func UnpackCodes(codes []uint8, packed []byte) error {
	if len(codes) != 2*len(packed) {
		return fmt.Errorf("int4: unpack %d bytes into %d codes: need %d", len(packed), len(codes), 2*len(packed))
	}
	for i, b := range packed {
		codes[2*i] = b & 0xF
		codes[2*i+1] = b >> 4
	}
	return nil
}

// PackCodes is the inverse of UnpackCodes. It returns an error when the lengths disagree or a
// code exceeds 15.
func PackCodes(packed []byte, codes []uint8) error {
	if len(codes) != 2*len(packed) {
		return fmt.Errorf("int4: pack %d codes into %d bytes: need %d", len(codes), len(packed), len(codes)/2)
	}
	for i := range packed {
		lo, hi := codes[2*i], codes[2*i+1]
		if lo > MaxCode || hi > MaxCode {
			return fmt.Errorf("int4: code at element %d or %d exceeds %d", 2*i, 2*i+1, MaxCode)
		}
		packed[i] = hi<<4 | lo
	}
	return nil
}
