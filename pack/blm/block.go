package blm

import (
	"bytes"
	"fmt"
)

// Rows holds consecutive rows of one matrix as the checkpoint stores them: row-major,
// little-endian, the bytes of the safetensors tensors unchanged. The caller allocates the
// slices; their lengths fix the row count.
//
//	format     Codes                      Scales                        Biases
//	bf16, f16  [rows, 2K] (BF16/F16)      nil                           nil
//	fp8_e4m3   [rows, K] (E4M3)           nil                           nil
//	int8       [rows, K] (I8)             [rows, 2K/G] (F16)            nil
//	int4       [rows, K/2] (nibbles)      [rows, K/G] ScaleType         [rows, K/G] ScaleType
//	nvfp4      [rows, K/2] (nibbles)      [rows, K/16] (E4M3)           nil
//
// Nibbles: two codes per byte, the even column in the low nibble (ModelOpt `weight` U8; MLX's
// U32 words read as little-endian bytes are the same stream).
type Rows struct {
	Codes  []byte
	Scales []byte
	Biases []byte
}

// plan is a checked geometry with the per-stripe facts the packer needs.
type plan struct {
	g       Geometry
	fi      formatInfo
	crb     int // stored code bytes per row
	srb     int // stored scale (and bias) bytes per row, per array
	uw      int // words per unit
	stripes []stripePlan
	// commonFull is the number of leading unit words that every stripe fills from codes.
	commonFull int
	scratch    []byte // one unit
}

type stripePlan struct {
	pay0      int  // first code byte of the stripe in a stored row (the row's end for padding stripes)
	payValid  int  // code bytes of the stripe inside the row, 0 … P
	fullWords int  // leading unit words made only of valid code bytes
	group0    int  // group in slot 0
	groups    int  // real groups
	shared0   bool // slot 0's group starts in an earlier stripe (its scale is a copy)
}

func newPlan(g Geometry) (*plan, error) {
	if err := g.Check(); err != nil {
		return nil, err
	}
	p := &plan{g: g, fi: g.info(), crb: int(g.CodeRowBytes()), srb: int(g.ScaleRowBytes()), uw: g.UnitBytes / WordBytes}
	p.scratch = make([]byte, g.UnitBytes)
	for s := 0; s < g.Lanes; s++ {
		u := g.unit(0, s)
		sp := stripePlan{pay0: min(s*g.PayloadBytes, p.crb)}
		sp.payValid = min(g.PayloadBytes, p.crb-sp.pay0)
		sp.fullWords = sp.payValid / WordBytes
		if g.GroupSize > 0 {
			sp.group0, sp.groups = int(u.Group0), u.Groups
			sp.shared0 = sp.groups > 0 && int64(sp.group0)*int64(g.GroupSize) < u.Col0
		}
		p.stripes = append(p.stripes, sp)
	}
	p.commonFull = p.uw
	for _, sp := range p.stripes {
		p.commonFull = min(p.commonFull, sp.fullWords)
	}
	return p, nil
}

// rowCount checks that r's slices hold the same whole number of rows and returns it.
func (p *plan) rowCount(r Rows) (int, error) {
	if p.crb == 0 || len(r.Codes)%p.crb != 0 {
		return 0, fmt.Errorf("blm: codes: %d bytes is not a whole number of %d-byte rows", len(r.Codes), p.crb)
	}
	n := len(r.Codes) / p.crb
	if len(r.Scales) != n*p.srb {
		return 0, fmt.Errorf("blm: scales: %d rows need %d bytes, got %d", n, n*p.srb, len(r.Scales))
	}
	wantB := 0
	if p.fi.biases {
		wantB = n * p.srb
	}
	if len(r.Biases) != wantB {
		return 0, fmt.Errorf("blm: biases: %d rows need %d bytes, got %d", n, wantB, len(r.Biases))
	}
	return n, nil
}

// blockRows returns the number of matrix rows in block b.
func (g Geometry) blockRows(b int64) int {
	return int(min(int64(g.Rows), g.N-b*int64(g.Rows)))
}

// slice returns rows [r0, r0+n) of r.
func (p *plan) slice(r Rows, r0, n int) Rows {
	out := Rows{Codes: r.Codes[r0*p.crb : (r0+n)*p.crb]}
	if p.srb > 0 {
		out.Scales = r.Scales[r0*p.srb : (r0+n)*p.srb]
		if p.fi.biases {
			out.Biases = r.Biases[r0*p.srb : (r0+n)*p.srb]
		}
	}
	return out
}

// packBlock writes one block (dst: BlockBytes) from its n stored rows.
func (p *plan) packBlock(dst []byte, src Rows, n int) {
	g := p.g
	if n < g.Rows {
		clear(dst)
	}
	slot, elem := p.fi.slot, p.fi.elem
	for r := 0; r < n; r++ {
		codes := src.Codes[r*p.crb : (r+1)*p.crb]
		base := ((r/g.Fold)*p.uw*SIMDLanes + (r%g.Fold)*g.Lanes) * WordBytes
		// Words every stripe fills from codes, in destination order: 16·Lanes contiguous bytes
		// per word index.
		// (When commonFull > 0 every stripe is inside the row, so stripe s starts at s·P.)
		for j := 0; j < p.commonFull; j++ {
			d := dst[base+j*StepStride:][:len(p.stripes)*WordBytes]
			for s, o := 0, j*WordBytes; s < len(d); s, o = s+WordBytes, o+g.PayloadBytes {
				*(*[WordBytes]byte)(d[s:]) = *(*[WordBytes]byte)(codes[o:])
			}
		}
		for s := range p.stripes {
			sp := &p.stripes[s]
			off := base + s*WordBytes
			c := codes[sp.pay0:]
			for j := p.commonFull; j < sp.fullWords; j++ {
				*(*[WordBytes]byte)(dst[off+j*StepStride:]) = *(*[WordBytes]byte)(c[j*WordBytes:])
			}
			if sp.fullWords == p.uw {
				continue
			}
			var one [WordBytes]byte // the common case: a single tail word, built on the stack
			t := one[:]
			if p.uw-sp.fullWords > 1 {
				t = p.scratch[:g.UnitBytes-sp.fullWords*WordBytes]
				clear(t)
			}
			copy(t, c[sp.fullWords*WordBytes:sp.payValid])
			so := g.PayloadBytes - sp.fullWords*WordBytes
			if gi := r*p.srb + sp.group0*elem; sp.groups == 0 {
				// a padding stripe: no scales
			} else if !p.fi.biases {
				// A stripe's groups are consecutive, and so are their scales in the stored row.
				copy(t[so:], src.Scales[gi:gi+sp.groups*elem])
			} else {
				for k := 0; k < sp.groups; k++ {
					copy(t[so+k*slot:], src.Scales[gi+k*elem:gi+(k+1)*elem])
					copy(t[so+k*slot+elem:], src.Biases[gi+k*elem:gi+(k+1)*elem])
				}
			}
			for j := sp.fullWords; j < p.uw; j++ {
				tj := (j - sp.fullWords) * WordBytes
				*(*[WordBytes]byte)(dst[off+j*StepStride:]) = *(*[WordBytes]byte)(t[tj:])
			}
		}
	}
}

// unpackBlock reads one block (src: BlockBytes) into its n stored rows, checking that padding
// is zero and shared scales agree.
func (p *plan) unpackBlock(dst Rows, src []byte, b int64, n int) error {
	g := p.g
	slot, elem := p.fi.slot, p.fi.elem
	var zero [WordBytes]byte
	for r := 0; r < g.Rows; r++ {
		base := ((r/g.Fold)*p.uw*SIMDLanes + (r%g.Fold)*g.Lanes) * WordBytes
		row := b*int64(g.Rows) + int64(r)
		if r >= n {
			for s := range p.stripes {
				for j := 0; j < p.uw; j++ {
					w := src[base+s*WordBytes+j*StepStride:][:WordBytes]
					if !bytes.Equal(w, zero[:]) {
						return fmt.Errorf("blm: block %d: padding row %d (stripe %d, word %d) is not zero", b, row, s, j)
					}
				}
			}
			continue
		}
		codes := dst.Codes[r*p.crb : (r+1)*p.crb]
		for s := range p.stripes {
			sp := &p.stripes[s]
			off := base + s*WordBytes
			c := codes[sp.pay0:]
			for j := 0; j < sp.fullWords; j++ {
				*(*[WordBytes]byte)(c[j*WordBytes:]) = *(*[WordBytes]byte)(src[off+j*StepStride:])
			}
			if sp.fullWords == p.uw {
				continue
			}
			t := p.scratch[:g.UnitBytes-sp.fullWords*WordBytes]
			for j := sp.fullWords; j < p.uw; j++ {
				tj := (j - sp.fullWords) * WordBytes
				*(*[WordBytes]byte)(t[tj:]) = *(*[WordBytes]byte)(src[off+j*StepStride:])
			}
			nv := sp.payValid - sp.fullWords*WordBytes
			copy(c[sp.fullWords*WordBytes:sp.payValid], t[:nv])
			so := g.PayloadBytes - sp.fullWords*WordBytes
			if i := nonZero(t[nv:so]); i >= 0 {
				return fmt.Errorf("blm: block %d row %d stripe %d: padding column byte %d of the payload is 0x%02x, want 0",
					b, row, s, sp.payValid+i, t[nv+i])
			}
			for k := 0; k < sp.groups; k++ {
				gi := r*p.srb + (sp.group0+k)*elem
				sv := t[so+k*slot : so+k*slot+elem]
				var bv []byte
				if p.fi.biases {
					bv = t[so+k*slot+elem : so+(k+1)*slot]
				}
				if k == 0 && sp.shared0 {
					if !bytes.Equal(sv, dst.Scales[gi:gi+elem]) || (bv != nil && !bytes.Equal(bv, dst.Biases[gi:gi+elem])) {
						return fmt.Errorf("blm: block %d row %d stripe %d: the copy of group %d's scale differs from the one in an earlier stripe",
							b, row, s, sp.group0)
					}
					continue
				}
				copy(dst.Scales[gi:gi+elem], sv)
				if bv != nil {
					copy(dst.Biases[gi:gi+elem], bv)
				}
			}
			if i := nonZero(t[so+sp.groups*slot:]); i >= 0 {
				return fmt.Errorf("blm: block %d row %d stripe %d: unit byte %d (after the scales) is 0x%02x, want 0",
					b, row, s, g.PayloadBytes+sp.groups*slot+i, t[so+sp.groups*slot+i])
			}
		}
	}
	return nil
}

// nonZero returns the index of the first non-zero byte of b, or −1.
func nonZero(b []byte) int {
	for i, v := range b {
		if v != 0 {
			return i
		}
	}
	return -1
}

// PackBlock writes block b of the packed matrix into dst (BlockBytes long) from the block's
// stored rows: rows b·Rows … b·Rows+n−1 with n = min(Rows, N − b·Rows); the rows past N are
// zero. It returns an error for a geometry that fails Check, b outside [0, Blocks), or src or
// dst of the wrong size.
func (g Geometry) PackBlock(dst []byte, b int64, src Rows) error {
	p, err := newPlan(g)
	if err != nil {
		return err
	}
	n, err := p.checkBlock(len(dst), b, src)
	if err != nil {
		return err
	}
	p.packBlock(dst, src, n)
	return nil
}

// UnpackBlock reads block b of a packed matrix (src, BlockBytes long) into the block's stored
// rows (dst, sized as PackBlock's src). It returns an error naming the block, row and stripe
// when padding is not zero or two copies of a shared block scale differ, and as PackBlock.
func (g Geometry) UnpackBlock(dst Rows, b int64, src []byte) error {
	p, err := newPlan(g)
	if err != nil {
		return err
	}
	n, err := p.checkBlock(len(src), b, dst)
	if err != nil {
		return err
	}
	return p.unpackBlock(dst, src, b, n)
}

func (p *plan) checkBlock(packed int, b int64, r Rows) (int, error) {
	g := p.g
	if b < 0 || b >= g.Blocks {
		return 0, fmt.Errorf("blm: block %d outside [0, %d)", b, g.Blocks)
	}
	if int64(packed) != g.BlockBytes {
		return 0, fmt.Errorf("blm: block %d: packed buffer is %d bytes, want %d", b, packed, g.BlockBytes)
	}
	n, err := p.rowCount(r)
	if err != nil {
		return 0, fmt.Errorf("blm: block %d: %w", b, err)
	}
	if want := g.blockRows(b); n != want {
		return 0, fmt.Errorf("blm: block %d holds %d rows, got %d", b, want, n)
	}
	return n, nil
}

// PackRows packs a whole matrix held in memory: src holds all N stored rows, dst is
// TotalBytes long. For matrices that do not fit in memory use Pack. Errors as PackBlock.
func (g Geometry) PackRows(dst []byte, src Rows) error {
	p, err := newPlan(g)
	if err != nil {
		return err
	}
	if err := p.checkWhole(int64(len(dst)), src); err != nil {
		return err
	}
	for b := int64(0); b < g.Blocks; b++ {
		n := g.blockRows(b)
		p.packBlock(dst[b*g.BlockBytes:(b+1)*g.BlockBytes], p.slice(src, int(b)*g.Rows, n), n)
	}
	return nil
}

// UnpackRows unpacks a whole packed matrix (src, TotalBytes long) into dst (all N stored
// rows). Errors as UnpackBlock.
func (g Geometry) UnpackRows(dst Rows, src []byte) error {
	p, err := newPlan(g)
	if err != nil {
		return err
	}
	if err := p.checkWhole(int64(len(src)), dst); err != nil {
		return err
	}
	for b := int64(0); b < g.Blocks; b++ {
		n := g.blockRows(b)
		if err := p.unpackBlock(p.slice(dst, int(b)*g.Rows, n), src[b*g.BlockBytes:(b+1)*g.BlockBytes], b, n); err != nil {
			return err
		}
	}
	return nil
}

func (p *plan) checkWhole(packed int64, r Rows) error {
	g := p.g
	if packed != g.TotalBytes {
		return fmt.Errorf("blm: packed matrix is %d bytes, want %d", packed, g.TotalBytes)
	}
	n, err := p.rowCount(r)
	if err != nil {
		return err
	}
	if int64(n) != g.N {
		return fmt.Errorf("blm: %d stored rows, want N = %d", n, g.N)
	}
	return nil
}

// NewRows allocates stored rows for n rows of g's format.
func (g Geometry) NewRows(n int) Rows {
	r := Rows{Codes: make([]byte, int64(n)*g.CodeRowBytes())}
	if s := g.ScaleRowBytes(); s > 0 {
		r.Scales = make([]byte, int64(n)*s)
	}
	if b := g.BiasRowBytes(); b > 0 {
		r.Biases = make([]byte, int64(n)*b)
	}
	return r
}
