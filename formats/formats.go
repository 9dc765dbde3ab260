// Package formats owns the names of lithos's weight formats and their detection from a
// checkpoint's tensor dtypes and quantization config (docs/formats.md, lithos-metal.md §1.8,
// qwen35-and-quant.md Parts B and C). The numeric codecs live in its subpackages:
//
//	bf16, f16    16-bit floats                 fp8    E4M3/E5M2 and FP8 per-tensor weights
//	e2m1         NVFP4's 4-bit codes           nvfp4  NVFP4 (ModelOpt and MLX layouts)
//	q8           INT8 groups (Q8_0 shape)      int4   affine INT4 (MLX, AWQ, GPTQ)
//	safetensors  the checkpoint container
//
// This package imports only the standard library: dtypes are the safetensors dtype strings
// ("BF16", "F8_E4M3", …), so it does not depend on the container codec.
package formats

// Format names how one matrix is stored in a checkpoint. The string is stable: it appears in
// error messages, logs and bundle manifests.
type Format string

// Weight formats. Shapes are logical [N, K] = [out, in], row-major.
const (
	BF16     Format = "bf16"        // weight BF16
	F16      Format = "f16"         // weight F16
	F32      Format = "f32"         // weight F32
	FP8      Format = "fp8_e4m3"    // ModelOpt FP8: weight F8_E4M3, weight_scale F32 scalar
	Int8     Format = "int8"        // weight I8, weight_scale F16 [N, K/G] (Q8_0 shape, G = 32)
	Int4     Format = "int4_affine" // MLX affine: weight U32 [N, K/8], scales + biases [N, K/G]
	Int4AWQ  Format = "int4_awq"    // AutoAWQ gemm: qweight I32 [K, N/8], qzeros, scales F16
	Int4GPTQ Format = "int4_gptq"   // AutoGPTQ: qweight I32 [K/8, N], qzeros, scales F16, g_idx
	NVFP4    Format = "nvfp4"       // ModelOpt: weight U8 [N, K/2], weight_scale E4M3 [N, K/16], weight_scale_2 F32
	NVFP4MLX Format = "nvfp4_mlx"   // MLX: weight U32 [N, K/8], scales U8 (E4M3) [N, K/16], no tensor scale
)

// Family returns the logical format f converts to without loss: AWQ and GPTQ become affine INT4
// (codes, scales, biases −s·z), MLX NVFP4 becomes NVFP4 with tensor scale 1. Other formats are
// their own family.
func (f Format) Family() Format {
	switch f {
	case Int4AWQ, Int4GPTQ:
		return Int4
	case NVFP4MLX:
		return NVFP4
	}
	return f
}

// Quantized reports whether f carries codes and scales (everything but the plain floats).
func (f Format) Quantized() bool {
	switch f {
	case BF16, F16, F32:
		return false
	}
	return true
}
