package int4

import (
	"encoding/binary"
	"fmt"

	"lithos/formats/f16"
)

// awqSlot[j] is the nibble slot (bits 4·slot…4·slot+3) of column j%8 inside an AutoAWQ word:
// AWQ packs columns in the order [0,2,4,6,1,3,5,7] (slot i holds column order[i]), so column j
// sits in slot reverse[j] = [0,4,1,5,2,6,3,7][j] (AutoAWQ awq/utils/packing_utils.py,
// qwen35-and-quant.md §C.2).
var awqSlot = [8]uint{0, 4, 1, 5, 2, 6, 3, 7}

// AWQ is an AutoAWQ "gemm" 4-bit tensor as stored, for a Linear with N outputs and K inputs:
// QWeight I32 [K, N/8], QZeros I32 [K/G, N/8], Scales F16 [K/G, N] (little-endian bytes).
// Dequantization is W[k, n] = (q − z)·s, with groups of G input rows.
type AWQ struct {
	QWeight, QZeros, Scales []byte
	N, K, GroupSize         int
}

// Check validates the geometry and byte lengths.
func (a AWQ) Check() error {
	if a.N <= 0 || a.K <= 0 || a.N%8 != 0 || a.GroupSize <= 0 || a.K%a.GroupSize != 0 {
		return fmt.Errorf("int4: AWQ shape [N=%d, K=%d] with group size %d: N must be a positive multiple of 8 and K of the group size",
			a.N, a.K, a.GroupSize)
	}
	groups := a.K / a.GroupSize
	switch {
	case len(a.QWeight) != a.K*a.N/2:
		return fmt.Errorf("int4: AWQ qweight [%d, %d] I32 needs %d bytes, got %d", a.K, a.N/8, a.K*a.N/2, len(a.QWeight))
	case len(a.QZeros) != groups*a.N/2:
		return fmt.Errorf("int4: AWQ qzeros [%d, %d] I32 needs %d bytes, got %d", groups, a.N/8, groups*a.N/2, len(a.QZeros))
	case len(a.Scales) != groups*a.N*2:
		return fmt.Errorf("int4: AWQ scales [%d, %d] F16 needs %d bytes, got %d", groups, a.N, groups*a.N*2, len(a.Scales))
	}
	return nil
}

// nibble returns the 4-bit value in slot of the little-endian 32-bit word at word index w of b.
func nibble(b []byte, w int, slot uint) uint8 {
	return uint8(binary.LittleEndian.Uint32(b[4*w:])>>(4*slot)) & 0xF
}

// Rows fills dst with output rows r0 … r0+dst.Len()-1 in logical [N, K] form: codes q,
// scales s and biases −s·z (exact in float32). dst.K and dst.GroupSize must equal a's.
// It returns an error when a or dst is inconsistent or the rows fall outside [0, N).
func (a AWQ) Rows(dst *Rows, r0 int) error {
	if err := a.Check(); err != nil {
		return err
	}
	rows, err := rowsIn(dst, r0, a.N, a.K, a.GroupSize)
	if err != nil {
		return err
	}
	wpr := a.N / 8 // words per packed row
	for k := 0; k < a.K; k++ {
		for r := range rows {
			n := r0 + r
			dst.Codes[r*a.K+k] = nibble(a.QWeight, k*wpr+n/8, awqSlot[n%8])
		}
	}
	gpr := a.K / a.GroupSize
	for g := range gpr {
		for r := range rows {
			n := r0 + r
			z := nibble(a.QZeros, g*wpr+n/8, awqSlot[n%8])
			s := f16.ToFloat32(binary.LittleEndian.Uint16(a.Scales[2*(g*a.N+n):]))
			dst.Scales[r*gpr+g] = s
			dst.Biases[r*gpr+g] = -(s * float32(z))
		}
	}
	return nil
}
