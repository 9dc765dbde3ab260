package blm

import "fmt"

// Unit is where the lane-row unit of (row, stripe) lives in a packed matrix and what it holds.
// Its U bytes are UnitBytes/16 words; word j is at Offset + j·StepStride, so one load
// instruction of the SIMD group (word j of all 32 lanes of a step) reads 512 contiguous bytes.
// Unit byte i is at Offset + (i/16)·StepStride + i%16. Bytes [0, PayloadBytes) are the codes of
// columns [Col0, Col0+Stripe) in stored order; scale slot k is bytes [PayloadBytes +
// k·ScaleSlotBytes, …+ScaleSlotBytes) and holds group Group0+k for k < Groups, zeros after.
type Unit struct {
	Row    int64 // matrix row (rows ≥ N are the zero rows of the last block)
	Stripe int   // column stripe, 0 … Lanes−1
	Block  int64 // Row / Rows
	Step   int   // step within the block: (Row mod Rows) / Fold
	Lane   int   // SIMD lane: ((Row mod Rows) mod Fold)·Lanes + Stripe
	Col0   int64 // first column of the stripe: Stripe·W
	Cols   int   // columns of the stripe inside [0, K): W, fewer in the last stripes, 0 for padding lanes
	Group0 int64 // group held by scale slot 0: Col0 / GroupSize (0 without block scales)
	Groups int   // slots holding real groups; slots Groups … ScaleSlots−1 are zero
	Offset int64 // byte offset of word 0 within the packed matrix
}

// Unit returns the location of the unit of (row, stripe), for 0 ≤ row < Blocks·Rows and
// 0 ≤ stripe < Lanes. It returns an error for a geometry that fails Check or an index out of
// range.
func (g Geometry) Unit(row int64, stripe int) (Unit, error) {
	if err := g.Check(); err != nil {
		return Unit{}, err
	}
	if row < 0 || row >= g.Blocks*int64(g.Rows) {
		return Unit{}, fmt.Errorf("blm: row %d outside the %d rows of %d blocks", row, g.Blocks*int64(g.Rows), g.Blocks)
	}
	if stripe < 0 || stripe >= g.Lanes {
		return Unit{}, fmt.Errorf("blm: stripe %d outside [0, %d)", stripe, g.Lanes)
	}
	return g.unit(row, stripe), nil
}

// LaneUnit is Unit seen from a kernel: the unit that lane (0 … 31) of the SIMD group loads in
// step (0 … Steps−1) of block (0 … Blocks−1). Its Row may be ≥ N (a zero row of the last
// block). It returns an error for a geometry that fails Check or an index out of range.
func (g Geometry) LaneUnit(block int64, step, lane int) (Unit, error) {
	if err := g.Check(); err != nil {
		return Unit{}, err
	}
	if block < 0 || block >= g.Blocks || step < 0 || step >= g.Steps || lane < 0 || lane >= SIMDLanes {
		return Unit{}, fmt.Errorf("blm: block %d step %d lane %d outside [0, %d) × [0, %d) × [0, %d)",
			block, step, lane, g.Blocks, g.Steps, SIMDLanes)
	}
	row := block*int64(g.Rows) + int64(step*g.Fold+lane/g.Lanes)
	return g.unit(row, lane%g.Lanes), nil
}

// unit computes Unit for a checked geometry and in-range indices.
func (g Geometry) unit(row int64, stripe int) Unit {
	r := int(row % int64(g.Rows))
	u := Unit{
		Row:    row,
		Stripe: stripe,
		Block:  row / int64(g.Rows),
		Step:   r / g.Fold,
		Lane:   (r%g.Fold)*g.Lanes + stripe,
		Col0:   int64(stripe) * int64(g.Stripe),
	}
	if u.Col0 < g.K {
		u.Cols = int(min(int64(g.Stripe), g.K-u.Col0))
	}
	if g.GroupSize > 0 {
		u.Group0 = u.Col0 / int64(g.GroupSize)
		u.Groups = touched(u.Col0, int64(g.Stripe), g.K, int64(g.GroupSize))
	}
	u.Offset = u.Block*g.BlockBytes + (int64(u.Step)*int64(g.UnitBytes/WordBytes)*SIMDLanes+int64(u.Lane))*WordBytes
	return u
}

// ByteOffset returns where byte i (0 ≤ i < UnitBytes) of unit u lives in the packed matrix.
func (g Geometry) ByteOffset(u Unit, i int) int64 {
	return u.Offset + int64(i/WordBytes)*StepStride + int64(i%WordBytes)
}

// Element returns where the code of (row, col) lives: the byte offset of its first byte in the
// packed matrix, and for 4-bit formats the bit shift of its nibble (0 for an even column, 4
// for an odd one); 2-byte elements are little-endian. Padding rows (N ≤ row < Blocks·Rows) and
// padding columns (K ≤ col < Lanes·W) have locations too; they hold zeros. Errors as Unit.
func (g Geometry) Element(row, col int64) (off int64, shift uint, err error) {
	if col < 0 || col >= int64(g.Lanes)*int64(g.Stripe) {
		return 0, 0, fmt.Errorf("blm: column %d outside the %d columns of %d stripes", col, int64(g.Lanes)*int64(g.Stripe), g.Lanes)
	}
	u, err := g.Unit(row, int(col/int64(g.Stripe)))
	if err != nil {
		return 0, 0, err
	}
	bits := int64(g.info().bits)
	bit := (col - u.Col0) * bits
	if bits == 4 {
		shift = uint(bit % 8)
	}
	return g.ByteOffset(u, int(bit/8)), shift, nil
}

// Scale returns where the block scale of (row, col)'s group lives in the unit that holds the
// code of (row, col): the byte offset of its scale slot (for INT4 the scale, followed by the
// bias). A group shared by several stripes has a copy in each; this is the copy next to the
// code. Only columns inside [0, K) have a group. It returns an error for a format without
// block scales, and as Unit.
func (g Geometry) Scale(row, col int64) (int64, error) {
	if g.GroupSize == 0 {
		return 0, fmt.Errorf("blm: format %s has no block scales", g.Format)
	}
	if col < 0 || col >= g.K {
		return 0, fmt.Errorf("blm: column %d outside [0, %d)", col, g.K)
	}
	u, err := g.Unit(row, int(col/int64(g.Stripe)))
	if err != nil {
		return 0, err
	}
	slot := col/int64(g.GroupSize) - u.Group0
	return g.ByteOffset(u, g.PayloadBytes+int(slot)*g.ScaleSlotBytes), nil
}
