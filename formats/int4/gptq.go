package int4

import (
	"encoding/binary"
	"fmt"

	"lithos/formats/f16"
)

// GPTQ is an AutoGPTQ 4-bit tensor as stored, for a Linear with N outputs and K inputs
// (auto_gptq/nn_modules/qlinear/qlinear_cuda_old.py; qwen35-and-quant.md §C.3):
// QWeight I32 [K/8, N] (input rows 8r…8r+7 in bits 0…31 of word [r, n], LSB first),
// QZeros I32 [K/G, N/8] (output columns LSB first), Scales F16 [K/G, N], GIdx I32 [K]
// (group of each input row; nil when absent). GroupSize is the config's group_size, with
// −1 meaning K. ZeroOffset is added to the stored zero: 1 for the v1 ("gptq") checkpoint
// format, whose packer stores z − 1, and 0 for "gptq_v2".
// Dequantization is W[k, n] = s·(q − (stored z + ZeroOffset)).
type GPTQ struct {
	QWeight, QZeros, Scales, GIdx []byte
	N, K, GroupSize               int
	ZeroOffset                    int
}

func (q GPTQ) group() int {
	if q.GroupSize == -1 {
		return q.K
	}
	return q.GroupSize
}

// Check validates the geometry and byte lengths, and that g_idx (when present) is the trivial
// k/G map: act-order checkpoints (desc_act) permute the groups along K, which an affine
// [N, K] layout with contiguous groups cannot express, so they are refused.
func (q GPTQ) Check() error {
	g := q.group()
	if q.N <= 0 || q.K <= 0 || q.N%8 != 0 || q.K%8 != 0 || g <= 0 || q.K%g != 0 {
		return fmt.Errorf("int4: GPTQ shape [N=%d, K=%d] with group size %d: N and K must be positive multiples of 8 and K of the group size",
			q.N, q.K, q.GroupSize)
	}
	if q.ZeroOffset != 0 && q.ZeroOffset != 1 {
		return fmt.Errorf("int4: GPTQ zero offset %d: want 1 (gptq v1) or 0 (gptq_v2)", q.ZeroOffset)
	}
	groups := q.K / g
	switch {
	case len(q.QWeight) != q.K*q.N/2:
		return fmt.Errorf("int4: GPTQ qweight [%d, %d] I32 needs %d bytes, got %d", q.K/8, q.N, q.K*q.N/2, len(q.QWeight))
	case len(q.QZeros) != groups*q.N/2:
		return fmt.Errorf("int4: GPTQ qzeros [%d, %d] I32 needs %d bytes, got %d", groups, q.N/8, groups*q.N/2, len(q.QZeros))
	case len(q.Scales) != groups*q.N*2:
		return fmt.Errorf("int4: GPTQ scales [%d, %d] F16 needs %d bytes, got %d", groups, q.N, groups*q.N*2, len(q.Scales))
	case q.GIdx != nil && len(q.GIdx) != 4*q.K:
		return fmt.Errorf("int4: GPTQ g_idx [%d] I32 needs %d bytes, got %d", q.K, 4*q.K, len(q.GIdx))
	}
	for k := 0; q.GIdx != nil && k < q.K; k++ {
		if gi := int32(binary.LittleEndian.Uint32(q.GIdx[4*k:])); int(gi) != k/g {
			return fmt.Errorf("int4: GPTQ g_idx[%d] = %d, want %d: act-order (desc_act) checkpoints are not supported", k, gi, k/g)
		}
	}
	return nil
}

// Rows fills dst with output rows r0 … r0+dst.Len()-1 in logical [N, K] form: codes q, scales s
// and biases −s·(z + ZeroOffset) (exact in float32). dst.K must equal q.K and dst.GroupSize
// the effective group size (K when GroupSize is −1). It returns an error when q or dst is
// inconsistent or the rows fall outside [0, N).
func (q GPTQ) Rows(dst *Rows, r0 int) error {
	if err := q.Check(); err != nil {
		return err
	}
	g := q.group()
	rows, err := rowsIn(dst, r0, q.N, q.K, g)
	if err != nil {
		return err
	}
	for kw := 0; kw < q.K/8; kw++ {
		for r := range rows {
			w := binary.LittleEndian.Uint32(q.QWeight[4*(kw*q.N+r0+r):])
			for j := range 8 {
				dst.Codes[r*q.K+8*kw+j] = uint8(w>>(4*j)) & 0xF
			}
		}
	}
	gpr := q.K / g
	for gi := range gpr {
		for r := range rows {
			n := r0 + r
			z := nibble(q.QZeros, gi*(q.N/8)+n/8, uint(n%8)) + uint8(q.ZeroOffset)
			s := f16.ToFloat32(binary.LittleEndian.Uint16(q.Scales[2*(gi*q.N+n):]))
			dst.Scales[r*gpr+gi] = s
			dst.Biases[r*gpr+gi] = -(s * float32(z))
		}
	}
	return nil
}
