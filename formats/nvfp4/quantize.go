package nvfp4

import (
	"fmt"
	"math"

	"lithos/formats/e2m1"
	"lithos/formats/fp8"
)

// The quantizer is ModelOpt's NVFP4QTensor rule (modelopt/torch/quantization/qtensor/
// nvfp4_tensor.py, qwen35-and-quant.md §B.4, ARCHITECTURE.md §3.1), every step in float32 and in
// this order:
//
//	s2  = amax(|W|) / 2688                        tensor scale (weight_scale_2); see Division
//	d6  = 6 · s2                                  the product first
//	s_b = block_amax / d6                         per 16-column block; s_b = 1.0 where s_b == 0
//	c_b = e4m3(s_b)                               PyTorch float8_e4m3fn cast, round-half-even
//	den = float(c_b) · s2                         the product first
//	x   = W / den                                 per element
//	code = e2m1(x)                                thresholds with ties to even, saturating at 6
//
// Consequences reproduced bit for bit: a block whose s_b rounds to E4M3 zero (block_amax below
// about amax·2^-10/448, e.g. a row of tiny values next to large ones) gets block scale 0 and
// den = 0, so its codes come from ±Inf and NaN quotients (7 for x ≥ +0, 15 for x < 0); it still
// dequantizes to zeros. An all-zero tensor is the one deviation: ModelOpt divides 0 by 0 there
// and writes NaN scales; TensorScale uses amax = 1 instead, giving zero codes and block scales 1.0.

// TensorScaleDivisor is 6·448: the largest E2M1 magnitude times the largest E4M3 magnitude.
const TensorScaleDivisor = 6 * 448

// Division selects how the tensor scale s2 = amax/2688 is rounded to float32.
type Division int

const (
	// DivideExact is the correctly rounded quotient fl(amax/2688): PyTorch on CPU, and the form
	// ARCHITECTURE.md §3.1 states.
	DivideExact Division = iota
	// DivideByReciprocal is fl(amax · fl(1/2688)): what ModelOpt's `amax.float() / (6.0*448.0)`
	// computes on a CUDA tensor, because PyTorch's CUDA kernel multiplies by the float32
	// reciprocal of a CPU-scalar divisor (aten/src/ATen/native/cuda/BinaryDivTrueKernel.cu).
	// About one BF16 amax in six gives a tensor scale one ulp away from DivideExact's.
	DivideByReciprocal
)

// String names the rule.
func (d Division) String() string {
	switch d {
	case DivideExact:
		return "exact"
	case DivideByReciprocal:
		return "reciprocal"
	}
	return fmt.Sprintf("Division(%d)", int(d))
}

// TensorScale returns weight_scale_2 for weights with absolute maximum amax (≥ 0, finite) under
// division rule d. amax = 0 (an all-zero tensor) is treated as amax = 1, so the scale stays a
// positive multiplier.
func TensorScale(amax float32, d Division) float32 {
	if amax == 0 {
		amax = 1
	}
	if d == DivideByReciprocal {
		const inv = float32(1) / TensorScaleDivisor // constant-folded to fl32(1/2688)
		return amax * inv
	}
	return amax / TensorScaleDivisor
}

// AbsMax returns max |w[i]|. It returns an error naming the first NaN or ±Inf element.
func AbsMax(w []float32) (float32, error) {
	// Non-negative float32 bit patterns order as their values, so the maximum is taken on bits.
	var m uint32
	for i, x := range w {
		a := math.Float32bits(x) & 0x7FFFFFFF
		if a >= 0x7F800000 {
			return 0, fmt.Errorf("nvfp4: element %d is %g", i, x)
		}
		m = max(m, a)
	}
	return math.Float32frombits(m), nil
}

// QuantizeRows quantizes whole rows of w ([rows, k] row-major float32, usually exact BF16
// values) with the tensor scale tensorScale (from TensorScale of the whole tensor's amax, or of
// a fused group's shared amax), writing codes (rows·k/2 bytes, ModelOpt `weight` layout) and
// scales (rows·k/16 E4M3 bytes, `weight_scale`). Rows are independent, so a tensor can be
// quantized in row chunks with memory bounded by the caller's slices.
//
// It returns an error when k is not a positive multiple of 16, the lengths disagree,
// tensorScale is not finite and positive, an element is NaN or ±Inf, or a block's scale rounds
// above 448 (tensorScale too small for the data: the amax it came from was not the data's).
func QuantizeRows(codes, scales []byte, w []float32, k int, tensorScale float32) error {
	if _, err := checkShapes(len(w), len(codes), len(scales), k); err != nil {
		return err
	}
	if !(tensorScale > 0) || !finite(tensorScale) {
		return fmt.Errorf("nvfp4: tensor scale %g: want a finite positive value", tensorScale)
	}
	s2 := tensorScale
	d6 := 6 * s2
	for b := range scales {
		blk := w[b*BlockSize : (b+1)*BlockSize : (b+1)*BlockSize]
		var mbits uint32
		for i, x := range blk {
			a := math.Float32bits(x) & 0x7FFFFFFF
			if a >= 0x7F800000 {
				return fmt.Errorf("nvfp4: element %d is %g", b*BlockSize+i, x)
			}
			mbits = max(mbits, a)
		}
		sb := math.Float32frombits(mbits) / d6
		if sb == 0 {
			sb = 1
		}
		sc := fp8.E4M3FromFloat32(sb)
		if sc&0x7F == 0x7F {
			return fmt.Errorf("nvfp4: block %d (row %d, columns %d–%d): block amax %g over tensor scale %g gives block scale %g > %d",
				b, b*BlockSize/k, b*BlockSize%k, b*BlockSize%k+BlockSize-1, math.Float32frombits(mbits), s2, sb, fp8.E4M3Max)
		}
		scales[b] = sc
		den := fp8.E4M3ToFloat32(sc) * s2
		out := codes[b*BlockSize/2 : (b+1)*BlockSize/2 : (b+1)*BlockSize/2]
		for i := range out {
			out[i] = e2m1.FromFloat32(blk[2*i+1]/den)<<4 | e2m1.FromFloat32(blk[2*i]/den)
		}
	}
	return nil
}

// Tensor is a whole quantized NVFP4 matrix in ModelOpt layout.
type Tensor struct {
	N, K        int     // logical shape [N, K]
	Codes       []byte  // weight, [N, K/2]
	Scales      []byte  // weight_scale, E4M3 [N, K/16]
	TensorScale float32 // weight_scale_2
}

// Quantize quantizes the [n, k] row-major matrix w with ModelOpt's rule: the tensor scale from
// max|w| under division rule d, then QuantizeRows. It allocates the outputs (9/32 of the input's
// float32 bytes). Errors as AbsMax and QuantizeRows, and for a shape that does not match len(w).
func Quantize(w []float32, n, k int, d Division) (*Tensor, error) {
	if n <= 0 || k <= 0 || len(w) != n*k {
		return nil, fmt.Errorf("nvfp4: quantize shape [%d, %d] does not match %d elements", n, k, len(w))
	}
	if k%BlockSize != 0 {
		return nil, fmt.Errorf("nvfp4: row length K=%d: must be a positive multiple of %d", k, BlockSize)
	}
	amax, err := AbsMax(w)
	if err != nil {
		return nil, err
	}
	t := &Tensor{N: n, K: k, Codes: make([]byte, n*k/2), Scales: make([]byte, n*k/BlockSize),
		TensorScale: TensorScale(amax, d)}
	if err := QuantizeRows(t.Codes, t.Scales, w, k, t.TensorScale); err != nil {
		return nil, err
	}
	return t, nil
}
