package nvfp4

import (
	"fmt"

	"lithos/formats/e2m1"
	"lithos/formats/fp8"
)

// MaxPlausibleAbs bounds |w| for a dequantized NVFP4 weight read with the right tensor-scale
// convention. ModelOpt's weight_scale_2 is a multiplier, amax/2688, so block scales top out near
// 448 and 6·max(block scale)·weight_scale_2 ≈ amax, the weight's own absolute maximum (0.98 on
// the real checkpoint's layer-0 down_proj, lithos-metal.md §1.7). A scale stored as a divisor
// (compressed-tensors' weight_global_scale = 2688/amax, qwen35-and-quant.md §B.6) read as a
// multiplier gives 6·448·2688/amax ≈ 7.2e6/amax instead: ~1e5 and more for real weights. For any
// weight with amax ≤ 1000 the bound accepts the right reading and refuses the divisor reading
// (7.2e6/amax > 1000 whenever amax < 7200).
const MaxPlausibleAbs = 1000

// Stats summarises a block-scale tensor for the convention check.
type Stats struct {
	MaxBlockScale float32 // largest decoded E4M3 block scale (448 for the tensor holding its amax)
	AbsMax        float32 // 6 · MaxBlockScale · tensorScale: the largest |w| the tensor can decode to
}

// CheckConvention checks an NVFP4 tensor's block scales (E4M3 bytes, `weight_scale`) and tensor
// scale (`weight_scale_2`, a multiplier) before decoding. It returns the Stats and an error when
// the tensor scale is not finite and positive, a block-scale code is NaN (0x7F/0xFF) or negative,
// or the dequantized absolute maximum exceeds MaxPlausibleAbs, which is what a tensor scale stored
// with the divisor convention looks like. The error text names the rule; callers add the tensor.
//
// Block scales below 448 are not an error: members of a fused group (q/k/v, gate/up) share one
// amax, so only one member reaches 448, and W4A8_NVFP4_FP8 exports scale by amax/448, which puts
// block scales near 448/6; the dequantization formula is the same for both.
func CheckConvention(scales []byte, tensorScale float32) (Stats, error) {
	var st Stats
	if !(tensorScale > 0) || !finite(tensorScale) {
		return st, fmt.Errorf("nvfp4: tensor scale %g: want a finite positive multiplier", tensorScale)
	}
	var maxCode uint8
	for i, c := range scales {
		switch {
		case c&0x7F == 0x7F:
			return st, fmt.Errorf("nvfp4: block scale %d is NaN (code %#02x)", i, c)
		case c > 0x80:
			return st, fmt.Errorf("nvfp4: block scale %d is negative (code %#02x, %g); ModelOpt and MLX write non-negative block scales",
				i, c, fp8.E4M3ToFloat32(c))
		case c != 0x80 && c > maxCode:
			maxCode = c
		}
	}
	st.MaxBlockScale = fp8.E4M3ToFloat32(maxCode)
	st.AbsMax = e2m1.Max * st.MaxBlockScale * tensorScale
	if st.AbsMax > MaxPlausibleAbs {
		return st, fmt.Errorf("nvfp4: tensor scale %g reads as a divisor, not ModelOpt's multiplier (amax/2688): "+
			"block scales top out at %g and dequantized weights would reach |w| = %g (> %d); "+
			"a divisor-convention checkpoint (compressed-tensors weight_global_scale) is not supported",
			tensorScale, st.MaxBlockScale, st.AbsMax, MaxPlausibleAbs)
	}
	return st, nil
}
