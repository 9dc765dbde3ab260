package blm

import (
	"encoding/binary"
	"fmt"
	"math"

	"lithos/formats"
	"lithos/formats/bf16"
	"lithos/formats/e2m1"
	"lithos/formats/f16"
	"lithos/formats/fp8"
)

// GEMV is the reference matrix × rows product over packed bytes, in plain Go with float32
// arithmetic: y[t, n] = rowScales[n] · Σ_k W[n, k]·x[t, k] for t < tokens, n < N, where W is the
// dequantized matrix of g (without tensor scales). It is the contract CPU and GPU kernels
// honour (docs/blm.md §6): they may order the sums differently, so they agree with it to
// float32 rounding, not bit for bit.
//
// Per unit (row n, stripe s), per token, the lane computes in float32, each product rounded:
//
//	grouped formats, for each group q the stripe touches, over its columns c in the stripe:
//	    dot_q = Σ code(c)·x[c]            (in column order)
//	    lane += scale_q·dot_q             (INT4 also + bias_q·Σ x[c])
//	BF16, F16, FP8:  lane = Σ code(c)·x[c]
//
// code() is the element's value (BF16/F16/E4M3/E2M1 decoded, INT8 and INT4 codes as
// integers) and scale_q the decoded block scale (E4M3, F16, or the INT4 ScaleType). The row's
// Lanes partials are summed as a tree (pairs of lanes s and s+Lanes/2, then s+Lanes/4, …,
// like simd_sum) and multiplied by rowScales[n] (1 when rowScales is nil).
//
// packed is TotalBytes long, x is [tokens, K] and y [tokens, N], row-major. It returns an
// error for a geometry that fails Check or lengths that disagree. NaN or Inf values propagate.
func (g Geometry) GEMV(y []float32, packed []byte, rowScales []float32, x []float32, tokens int) error {
	p, err := newPlan(g)
	if err != nil {
		return err
	}
	if int64(len(packed)) != g.TotalBytes {
		return fmt.Errorf("blm: gemv: packed matrix is %d bytes, want %d", len(packed), g.TotalBytes)
	}
	if tokens < 0 || int64(len(x)) != int64(tokens)*g.K || int64(len(y)) != int64(tokens)*g.N {
		return fmt.Errorf("blm: gemv: %d tokens need x of %d and y of %d floats, got %d and %d",
			tokens, int64(tokens)*g.K, int64(tokens)*g.N, len(x), len(y))
	}
	if rowScales != nil && int64(len(rowScales)) != g.N {
		return fmt.Errorf("blm: gemv: %d row scales for N = %d", len(rowScales), g.N)
	}
	unit := make([]byte, g.UnitBytes)
	part := make([]float32, g.Lanes*tokens)
	k := int(g.K)
	for row := int64(0); row < g.N; row++ {
		for s := 0; s < g.Lanes; s++ {
			u := g.unit(row, s)
			for j := 0; j < p.uw; j++ {
				o := u.Offset + int64(j)*StepStride
				copy(unit[j*WordBytes:], packed[o:o+WordBytes])
			}
			for t := 0; t < tokens; t++ {
				part[t*g.Lanes+s] = p.lane(unit, u, x[t*k:(t+1)*k])
			}
		}
		for t := 0; t < tokens; t++ {
			q := part[t*g.Lanes : (t+1)*g.Lanes]
			for off := g.Lanes / 2; off >= 1; off /= 2 {
				for i := 0; i < off; i++ {
					q[i] += q[i+off]
				}
			}
			v := q[0]
			if rowScales != nil {
				v = float32(v * rowScales[row])
			}
			y[int64(t)*g.N+row] = v
		}
	}
	return nil
}

// lane computes one lane's partial sum for one token (x: the token's K activations).
func (p *plan) lane(unit []byte, u Unit, x []float32) float32 {
	g := p.g
	if g.GroupSize == 0 {
		var acc float32
		for i := 0; i < u.Cols; i++ {
			acc += float32(p.value(unit, i) * x[u.Col0+int64(i)])
		}
		return acc
	}
	var acc float32
	gs := int64(g.GroupSize)
	for q := 0; q < u.Groups; q++ {
		gi := u.Group0 + int64(q)
		c0 := max(u.Col0, gi*gs)
		c1 := min(u.Col0+int64(u.Cols), (gi+1)*gs)
		var dot, sx float32
		for c := c0; c < c1; c++ {
			dot += float32(p.value(unit, int(c-u.Col0)) * x[c])
			sx += x[c]
		}
		slot := unit[g.PayloadBytes+q*g.ScaleSlotBytes:]
		scale, bias := p.scale(slot)
		acc += float32(scale * dot)
		if p.fi.biases {
			acc += float32(bias * sx)
		}
	}
	return acc
}

// value decodes element i of a unit's payload.
func (p *plan) value(unit []byte, i int) float32 {
	switch p.g.Format {
	case formats.BF16:
		return bf16.ToFloat32(binary.LittleEndian.Uint16(unit[2*i:]))
	case formats.F16:
		return f16.ToFloat32(binary.LittleEndian.Uint16(unit[2*i:]))
	case formats.FP8:
		return fp8.E4M3ToFloat32(unit[i])
	case formats.Int8:
		return float32(int8(unit[i]))
	case formats.NVFP4:
		return e2m1.ToFloat32(unit[i/2] >> (4 * (i % 2)))
	case formats.Int4:
		return float32(unit[i/2] >> (4 * (i % 2)) & 0xF)
	}
	return float32(math.NaN())
}

// scale decodes a scale slot: the block scale, and for INT4 the bias.
func (p *plan) scale(slot []byte) (scale, bias float32) {
	switch p.g.Format {
	case formats.NVFP4:
		return fp8.E4M3ToFloat32(slot[0]), 0
	case formats.Int8:
		return f16.ToFloat32(binary.LittleEndian.Uint16(slot)), 0
	case formats.Int4:
		e := p.fi.elem
		return decodeScale(p.fi.scaleType, slot), decodeScale(p.fi.scaleType, slot[e:])
	}
	return float32(math.NaN()), 0
}

func decodeScale(t string, b []byte) float32 {
	switch t {
	case "BF16":
		return bf16.ToFloat32(binary.LittleEndian.Uint16(b))
	case "F16":
		return f16.ToFloat32(binary.LittleEndian.Uint16(b))
	case "F32":
		return math.Float32frombits(binary.LittleEndian.Uint32(b))
	}
	return float32(math.NaN())
}
