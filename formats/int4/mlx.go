package int4

import (
	"fmt"
	"math"
)

// MLX is an MLX affine 4-bit tensor as stored: Weight is the `weight` U32 [N, K/8] data
// (little-endian, N·K/2 bytes), Scales and Biases the `scales` and `biases` [N, K/G] data in
// ScaleType. mlx-lm writes G = 64 by default; 32 and 128 exist.
type MLX struct {
	Weight, Scales, Biases []byte
	N, K, GroupSize        int
	ScaleType              ScaleType
}

// Check validates the geometry and byte lengths.
func (m MLX) Check() error {
	if err := m.ScaleType.check(); err != nil {
		return err
	}
	if m.N <= 0 || m.K <= 0 || m.K%8 != 0 || m.GroupSize <= 0 || m.K%m.GroupSize != 0 {
		return fmt.Errorf("int4: MLX shape [%d, %d] with group size %d: K must be a positive multiple of 8 and of the group size",
			m.N, m.K, m.GroupSize)
	}
	if len(m.Weight) != m.N*m.K/2 {
		return fmt.Errorf("int4: MLX weight: [%d, %d] needs %d bytes, got %d", m.N, m.K, m.N*m.K/2, len(m.Weight))
	}
	sb := m.N * (m.K / m.GroupSize) * m.ScaleType.Size()
	if len(m.Scales) != sb || len(m.Biases) != sb {
		return fmt.Errorf("int4: MLX scales/biases: [%d, %d] %s need %d bytes each, got %d and %d",
			m.N, m.K/m.GroupSize, m.ScaleType, sb, len(m.Scales), len(m.Biases))
	}
	return nil
}

// Rows fills dst with rows r0 … r0+dst.Len()-1 in logical form (codes unpacked, scales and
// biases widened exactly to float32). dst.K and dst.GroupSize must equal m's. It returns an
// error when m or dst is inconsistent or the rows fall outside [0, N).
func (m MLX) Rows(dst *Rows, r0 int) error {
	if err := m.Check(); err != nil {
		return err
	}
	n, err := rowsIn(dst, r0, m.N, m.K, m.GroupSize)
	if err != nil {
		return err
	}
	if err := UnpackCodes(dst.Codes, m.Weight[r0*m.K/2:(r0+n)*m.K/2]); err != nil {
		return err
	}
	gpr := m.K / m.GroupSize
	for i := range dst.Scales {
		dst.Scales[i] = m.ScaleType.load(m.Scales, r0*gpr+i)
		dst.Biases[i] = m.ScaleType.load(m.Biases, r0*gpr+i)
	}
	return nil
}

// rowsIn validates dst against a source of n rows of length k in groups of g and returns
// dst's row count.
func rowsIn(dst *Rows, r0, n, k, g int) (int, error) {
	if dst.K != k || dst.GroupSize != g {
		return 0, fmt.Errorf("int4: destination rows have K=%d, group %d; source has K=%d, group %d", dst.K, dst.GroupSize, k, g)
	}
	if err := dst.check(); err != nil {
		return 0, err
	}
	rows := dst.Len()
	if r0 < 0 || r0+rows > n {
		return 0, fmt.Errorf("int4: rows %d…%d outside [0, %d)", r0, r0+rows-1, n)
	}
	return rows, nil
}

// mlxEps is the Metal kernel's lower bound on the group scale (constexpr float eps = 1e-7).
const mlxEps = float32(1e-7)

// roundAway rounds half away from zero, as Metal's round() does.
func roundAway(x float32) float32 { return float32(math.Round(float64(x))) }

// Quantize writes whole rows of x ([rows, k] row-major float32) in MLX affine 4-bit layout:
// packed gets rows·k/2 bytes (the U32 words' little-endian bytes), scales and biases
// rows·k/group elements of st. Per group of `group` elements, in float32 as MLX's Metal kernel
// (mlx/backend/metal/kernels/quantized.h affine_quantize; lithos-metal.md §1.6):
//
//	w_max = max(0, max w); w_min = min w
//	s     = max((w_max − w_min)/15, 1e-7)
//	edge  = w_min, s > 0 if |w_min| > |w_max|; else edge = w_max and s = −s
//	q0    = roundAway(edge/s); if q0 ≠ 0 { s = edge/q0; bias = edge } else { bias = 0 }
//	code  = clip(roundAway((w − bias)/s), 0, 15)      with the unrounded float32 s and bias
//	store s and bias rounded to st (round-half-even)
//
// Stored scales are negative when w_max has the larger magnitude. The clip can cost up to one
// step |s| at the far end of a group (q0 rounds away from zero, shrinking |s| by up to 8/7.5).
// It returns an error when group is not 32, 64 or 128, k is not a multiple of it, the lengths
// disagree, st is unknown, or an element is NaN or ±Inf.
func Quantize(packed, scales, biases []byte, x []float32, k, group int, st ScaleType) error {
	if err := st.check(); err != nil {
		return err
	}
	if group != 32 && group != 64 && group != 128 {
		return fmt.Errorf("int4: MLX group size %d: want 32, 64 or 128", group)
	}
	if k <= 0 || k%group != 0 || len(x)%k != 0 {
		return fmt.Errorf("int4: %d elements in rows of K=%d: K must be a positive multiple of group size %d and divide the input", len(x), k, group)
	}
	groups := len(x) / group
	if len(packed) != len(x)/2 || len(scales) != groups*st.Size() || len(biases) != groups*st.Size() {
		return fmt.Errorf("int4: %d elements need %d packed bytes and %d bytes of scales and biases; got %d, %d, %d",
			len(x), len(x)/2, groups*st.Size(), len(packed), len(scales), len(biases))
	}
	var codes [128]uint8
	for g := range groups {
		blk := x[g*group : (g+1)*group]
		wMin, wMax := float32(math.MaxFloat32), float32(0)
		for i, v := range blk {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return fmt.Errorf("int4: element %d is %g", g*group+i, v)
			}
			wMin = min(wMin, v)
			wMax = max(wMax, v)
		}
		s := max((wMax-wMin)/MaxCode, mlxEps)
		edge := wMax
		if abs32(wMin) > abs32(wMax) {
			edge = wMin
		} else {
			s = -s
		}
		var bias float32
		if q0 := roundAway(edge / s); q0 != 0 {
			s = edge / q0
			bias = edge
		}
		for i, v := range blk {
			q := roundAway((v - bias) / s)
			codes[i] = uint8(max(0, min(MaxCode, q)))
		}
		if err := PackCodes(packed[g*group/2:(g+1)*group/2], codes[:group]); err != nil {
			return err
		}
		st.store(scales, g, s)
		st.store(biases, g, bias)
	}
	return nil
}

func abs32(x float32) float32 { return float32(math.Abs(float64(x))) }
