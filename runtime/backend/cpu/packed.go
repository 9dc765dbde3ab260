package cpu

import (
	"encoding/binary"
	"fmt"
	"lithos/runtime/vec"
	"math"
	"sync"

	"lithos/formats"
	"lithos/formats/bf16"
	"lithos/formats/e2m1"
	"lithos/formats/f16"
	"lithos/formats/fp8"
	"lithos/pack/blm"
	"lithos/runtime/model"
)

// Packed is one BLM-packed matrix as the CPU backend computes with it: views of the bundle's
// mapped bytes (the packed matrix and its row-scale table), never copied or unpacked. Its
// kernels read the block-lane-major layout directly (docs/blm.md §2, §5): for each output
// row they decode the row's Lanes units (payload codes and the block scales stored beside
// them) into float32 weights, then take their dot product with every activation row, so a
// weight is decoded once per product whatever the number of activation rows.
//
// Two kernel sets: on amd64 with AVX2 and FMA, and on arm64 (NEON decoders and dot products),
// NVFP4, FP8 and BF16 matrices whose stripes hold whole 16-column groups
// (8 columns for BF16) run the SIMD kernels of simd.go (AVX-512 where the CPU has it); every
// other matrix, and every matrix elsewhere (or with -tags purego), runs the scalar Go kernels
// below.
//
// Numerics (docs/blm.md §6): each decoded weight is code·block scale (exact for NVFP4 and
// FP8, rounded once to float32 for INT8; INT4 is float32(scale·q) + bias as the formats
// decoder computes it), the dot product accumulates in float32 (the scalar kernels with four
// partial sums; the SIMD kernels' order is in simd.go), and the row's tensor scale (the
// row-scale table) multiplies the sum once. This orders the sums differently from
// blm.Geometry.GEMV, so the two agree to float32 rounding, not bit for bit.
type Packed struct {
	g       blm.Geometry
	data    []byte // TotalBytes
	scales  []byte // 4·Blocks·Rows bytes: little-endian float32 per packed row
	stripes []stripe
	kern    kernel
	pool    sync.Pool // *[]float32 of rowTile·K weights
	// nibbleTable: an NVFP4 matrix whose groups' code bytes lie in one word (every stripe
	// starts on a group): single-row products use a per-column table of code·x (tabPool).
	nibbleTable bool
	tabPool     sync.Pool // *[]float32 of 16·K
	// simd: the SIMD path's plan (simd.go), nil where the scalar kernels serve the matrix.
	simd  *simdPlan
	xpool sync.Pool // *[]float32 of 8·K: activation rows padded to 8 for the SIMD path
	dense []float32 // [N, K]: the decoded rows of a small narrow matrix on the SIMD path
}

// rowTile is the weight rows the multi-row kernel decodes at a time (8 rows of K = 5120 are
// 160 KB: they stay in the core's L2 while the activation rows stream past).
const rowTile = 8

// stripe is what every row shares about one column stripe: its columns and its groups.
type stripe struct {
	col0, cols int
	pay        int // P: payload bytes of every unit; the scale slots follow
	// groups: for slot q, the stripe-relative columns [c0, c1) of the group it holds.
	groups [][2]int
	// For 4-bit formats whose groups' code bytes each lie in one 16-byte word (always so when
	// stripes start on a group boundary): per slot, the offset from the unit's first byte of
	// the group's code bytes and of its scale slot. nil otherwise.
	codeOff, scaleOff []int
}

// unitReader addresses the bytes of one unit: byte i of the unit is at
// off + (i/16)·StepStride + i%16 in data.
type unitReader struct {
	data []byte
	off  int
}

// word returns the 16-byte word j of the unit.
func (u unitReader) word(j int) []byte {
	o := u.off + j*blm.StepStride
	return u.data[o : o+blm.WordBytes : o+blm.WordBytes]
}

// byteAt returns byte i of the unit.
func (u unitReader) byteAt(i int) byte {
	return u.data[u.off+(i/blm.WordBytes)*blm.StepStride+i%blm.WordBytes]
}

// NewPacked wraps a packed matrix: g must pass blm.Geometry.Check, data must be its
// TotalBytes bytes and rowScales the 4·Blocks·Rows bytes of its row-scale table (one
// little-endian float32 per packed row, docs/bundle.md §1). Both are used in place. Formats:
// bf16, f16, fp8_e4m3, int8, int4_affine, nvfp4.
func NewPacked(g blm.Geometry, data, rowScales []byte) (*Packed, error) {
	if err := g.Check(); err != nil {
		return nil, err
	}
	if int64(len(data)) != g.TotalBytes {
		return nil, fmt.Errorf("cpu: packed %s [%d, %d]: %d bytes, the layout has %d", g.Format, g.N, g.K, len(data), g.TotalBytes)
	}
	if want := 4 * g.Blocks * int64(g.Rows); int64(len(rowScales)) != want {
		return nil, fmt.Errorf("cpu: packed %s [%d, %d]: row-scale table of %d bytes, want %d", g.Format, g.N, g.K, len(rowScales), want)
	}
	if g.K > math.MaxInt32 || g.N > math.MaxInt32 {
		return nil, fmt.Errorf("cpu: packed %s [%d, %d]: too large for the CPU kernels", g.Format, g.N, g.K)
	}
	p := &Packed{g: g, data: data, scales: rowScales}
	var ok bool
	if p.kern, ok = kernelFor(g); !ok {
		return nil, fmt.Errorf("cpu: packed matrix format %s (scale type %q) has no CPU kernel", g.Format, g.ScaleType)
	}
	k := int(g.K)
	for s := 0; s < g.Lanes; s++ {
		st := stripe{col0: s * g.Stripe, pay: g.PayloadBytes}
		if st.col0 < k {
			st.cols = min(g.Stripe, k-st.col0)
		}
		if g.GroupSize > 0 && st.cols > 0 {
			gs := g.GroupSize
			for q := st.col0 / gs; q*gs < st.col0+st.cols; q++ {
				c0 := max(st.col0, q*gs) - st.col0
				c1 := min(st.col0+st.cols, (q+1)*gs) - st.col0
				st.groups = append(st.groups, [2]int{c0, c1})
			}
			if len(st.groups) > g.ScaleSlots {
				return nil, fmt.Errorf("cpu: packed %s: stripe %d touches %d groups, the layout has %d slots", g.Format, s, len(st.groups), g.ScaleSlots)
			}
			unitOff := func(i int) int { return (i/blm.WordBytes)*blm.StepStride + i%blm.WordBytes }
			if g.Format == formats.NVFP4 {
				for q, gr := range st.groups {
					b0, n := gr[0]/2, (gr[1]-gr[0])/2
					if b0%blm.WordBytes+n > blm.WordBytes {
						st.codeOff, st.scaleOff = nil, nil
						break
					}
					st.codeOff = append(st.codeOff, unitOff(b0))
					st.scaleOff = append(st.scaleOff, unitOff(st.pay+q))
				}
			}
		}
		p.stripes = append(p.stripes, st)
	}
	p.pool.New = func() any { w := make([]float32, rowTile*k); return &w }
	if g.Format == formats.NVFP4 && g.GroupSize == 16 {
		p.nibbleTable = true
		for _, st := range p.stripes {
			if st.cols > 0 && (st.codeOff == nil || st.col0%16 != 0) {
				p.nibbleTable = false
			}
		}
		p.tabPool.New = func() any { w := make([]float32, 16*k); return &w }
	}
	p.simd = newSIMDPlan(p)
	p.xpool.New = func() any { w := make([]float32, 8*k); return &w }
	if p.simd != nil && k < denseMaxK && g.N*g.K <= denseMaxWeights {
		p.dense = make([]float32, g.N*g.K)
		for r := 0; r < int(g.N); r++ {
			p.decodeRowSIMD(p.dense[r*k:(r+1)*k], r)
		}
	}
	return p, nil
}

// Geometry returns the matrix's layout.
func (p *Packed) Geometry() blm.Geometry { return p.g }

// RowScale returns the tensor scale of packed row r (0 ≤ r < Blocks·Rows).
func (p *Packed) RowScale(r int) float32 {
	return math.Float32frombits(binary.LittleEndian.Uint32(p.scales[4*r:]))
}

// DecodeRow writes packed row r (0 ≤ r < N) dequantized without its tensor scale to
// w[:K]: what the kernels multiply by the activations.
func (p *Packed) DecodeRow(w []float32, r int) {
	g := &p.g
	w = w[:g.K]
	blockOff := (r / g.Rows) * int(g.BlockBytes)
	rr := r % g.Rows
	step, laneBase := rr/g.Fold, (rr%g.Fold)*g.Lanes
	uw := g.UnitBytes / blm.WordBytes
	for s := range p.stripes {
		st := &p.stripes[s]
		if st.cols == 0 {
			continue
		}
		off := blockOff + ((step*uw)*blm.SIMDLanes+laneBase+s)*blm.WordBytes
		p.kern.decode(w[st.col0:st.col0+st.cols], unitReader{p.data, off}, st)
	}
}

// DotRow returns Σ_k W[r, k]·x[k] for packed row r (0 ≤ r < N) without its tensor scale,
// decoding the row's units on the fly (the single-row kernel: nothing is written but the sum).
// The stripes' partial sums are added in stripe order.
func (p *Packed) DotRow(r int, x []float32) float32 {
	g := &p.g
	x = x[:g.K]
	blockOff := (r / g.Rows) * int(g.BlockBytes)
	rr := r % g.Rows
	step, laneBase := rr/g.Fold, (rr%g.Fold)*g.Lanes
	uw := g.UnitBytes / blm.WordBytes
	var acc float32
	for s := range p.stripes {
		st := &p.stripes[s]
		if st.cols == 0 {
			continue
		}
		off := blockOff + ((step*uw)*blm.SIMDLanes+laneBase+s)*blm.WordBytes
		acc += p.kern.dot1(unitReader{p.data, off}, st, x[st.col0:st.col0+st.cols])
	}
	return acc
}

// nibbleTableMinRows is the output rows from which building the code·x table pays (it costs
// 16·K products, a row 8·K table reads).
const nibbleTableMinRows = 64

// fillNibbleTable writes tab[16·c + code] = e2m1(code)·x[c] (each product rounded to float32,
// as the reference GEMV rounds it).
func fillNibbleTable(tab, x []float32) {
	for c, v := range x {
		t := (*[16]float32)(tab[16*c : 16*c+16])
		for code := range 16 {
			t[code] = e2m1Values[code] * v
		}
	}
}

// dotRowNVFP4Table is DotRow for an NVFP4 matrix whose stripes start on group boundaries,
// with the products code·x looked up in tab (fillNibbleTable of the activation row): per
// group of 16 columns, 8 bytes give 16 table reads and additions, then one scale multiply.
func (p *Packed) dotRowNVFP4Table(r int, tab []float32) float32 {
	g := &p.g
	blockOff := (r / g.Rows) * int(g.BlockBytes)
	rr := r % g.Rows
	step, laneBase := rr/g.Fold, (rr%g.Fold)*g.Lanes
	uw := g.UnitBytes / blm.WordBytes
	data := p.data
	var acc float32
	for s := range p.stripes {
		st := &p.stripes[s]
		if st.cols == 0 {
			continue
		}
		off := blockOff + ((step*uw)*blm.SIMDLanes+laneBase+s)*blm.WordBytes
		for q, gr := range st.groups {
			sc := e4m3LUT[data[off+st.scaleOff[q]]]
			o := off + st.codeOff[q]
			b := (*[8]byte)(data[o : o+8])
			c0 := 16 * (st.col0 + gr[0])
			t := (*[256]float32)(tab[c0 : c0+256])
			s0 := t[b[0]&15] + t[16+b[0]>>4]
			s1 := t[32+b[1]&15] + t[48+b[1]>>4]
			s2 := t[64+b[2]&15] + t[80+b[2]>>4]
			s3 := t[96+b[3]&15] + t[112+b[3]>>4]
			s0 += t[128+b[4]&15] + t[144+b[4]>>4]
			s1 += t[160+b[5]&15] + t[176+b[5]>>4]
			s2 += t[192+b[6]&15] + t[208+b[6]>>4]
			s3 += t[224+b[7]&15] + t[240+b[7]>>4]
			acc += sc * ((s0 + s1) + (s2 + s3))
		}
	}
	return acc
}

// Rows returns the Matrix of packed rows rows[0], rows[1], …: output row n of its product is
// packed row rows[n]. Every entry must be in [0, N). A stack segment's rows (docs/bundle.md §3)
// are such a list: contiguous for a concatenated segment, chunks of 8 for the gate or up half
// of an interleaved MLP.
func (p *Packed) Rows(rows []int32) (model.Matrix, error) {
	for i, r := range rows {
		if r < 0 || int64(r) >= p.g.N {
			return model.Matrix{}, fmt.Errorf("cpu: packed %s [%d, %d]: output row %d maps to packed row %d", p.g.Format, p.g.N, p.g.K, i, r)
		}
	}
	if len(rows) == 0 {
		return model.Matrix{}, fmt.Errorf("cpu: packed %s [%d, %d]: no rows", p.g.Format, p.g.N, p.g.K)
	}
	n, k := len(rows), int(p.g.K)
	mul := func(dst, x []float32, m int) error {
		if m < 0 || len(x) < m*k || len(dst) < m*n {
			return fmt.Errorf("packed %s [%d, %d]: %d rows need x of %d and dst of %d floats, got %d and %d",
				p.g.Format, n, k, m, m*k, m*n, len(x), len(dst))
		}
		if m == 0 {
			return nil
		}
		if p.simd != nil {
			p.mulSIMD(dst, x, m, rows)
			return nil
		}
		var tab *[]float32
		if m == 1 && p.nibbleTable && n >= nibbleTableMinRows {
			tab = p.tabPool.Get().(*[]float32)
			defer p.tabPool.Put(tab)
			fillNibbleTable(*tab, x[:k])
		}
		vec.ParallelFor(n, vec.MinRowsPerTask(k*(m+2)), func(lo, hi int) {
			if m == 1 && tab != nil {
				for o := lo; o < hi; o++ {
					r := int(rows[o])
					dst[o] = p.dotRowNVFP4Table(r, *tab) * p.RowScale(r)
				}
				return
			}
			if m == 1 {
				for o := lo; o < hi; o++ {
					r := int(rows[o])
					dst[o] = p.DotRow(r, x) * p.RowScale(r)
				}
				return
			}
			// Several rows: decode a tile of weight rows once, then stream the activation
			// rows past it, four weight rows per pass (each activation row is read once per
			// tile, each weight row once per call).
			wp := p.pool.Get().(*[]float32)
			w := *wp
			var sc [rowTile]float32
			for o0 := lo; o0 < hi; o0 += rowTile {
				nt := min(rowTile, hi-o0)
				for i := 0; i < nt; i++ {
					r := int(rows[o0+i])
					p.DecodeRow(w[i*k:(i+1)*k], r)
					sc[i] = p.RowScale(r)
				}
				t := 0
				for ; t+2 <= m && nt == rowTile; t += 2 {
					x0, x1 := x[t*k:t*k+k], x[(t+1)*k:(t+1)*k+k]
					d0, d1 := dst[t*n+o0:t*n+o0+rowTile], dst[(t+1)*n+o0:(t+1)*n+o0+rowTile]
					for i := 0; i < rowTile; i += 4 {
						r := dot2x4(x0, x1, w[i*k:(i+1)*k], w[(i+1)*k:(i+2)*k], w[(i+2)*k:(i+3)*k], w[(i+3)*k:(i+4)*k])
						for j := range 4 {
							d0[i+j] = r[j] * sc[i+j]
							d1[i+j] = r[4+j] * sc[i+j]
						}
					}
				}
				for ; t < m; t++ {
					xt := x[t*k : t*k+k]
					d := dst[t*n+o0 : t*n+o0+nt]
					i := 0
					for ; i+4 <= nt; i += 4 {
						a, b, c, e := vec.Dot4(xt, w[i*k:(i+1)*k], w[(i+1)*k:(i+2)*k], w[(i+2)*k:(i+3)*k], w[(i+3)*k:(i+4)*k])
						d[i], d[i+1], d[i+2], d[i+3] = a*sc[i], b*sc[i+1], c*sc[i+2], e*sc[i+3]
					}
					for ; i < nt; i++ {
						d[i] = vec.Dot(w[i*k:(i+1)*k], xt) * sc[i]
					}
				}
			}
			p.pool.Put(wp)
		})
		return nil
	}
	return model.Matrix{N: n, K: k, Mul: mul}, nil
}

// All returns the Matrix of every packed row in order ([N, K]).
func (p *Packed) All() (model.Matrix, error) {
	rows := make([]int32, p.g.N)
	for i := range rows {
		rows[i] = int32(i)
	}
	return p.Rows(rows)
}

// Kernels: per format, decode writes a stripe's weights (code · block scale) to w[:cols], and
// dot1 returns the stripe's partial Σ w·x for one activation row (x = the stripe's columns),
// decoding on the fly without writing weights. Both read the unit's payload (P bytes) and its
// scale slots (after the payload) through u.

// span returns the unit's payload bytes [b0, b0+n) as one slice: a view of the mapping when
// they lie in one 16-byte word, else copied word piece by word piece into buf.
func (u unitReader) span(b0, n int, buf []byte) []byte {
	if b0%blm.WordBytes+n <= blm.WordBytes {
		o := u.off + (b0/blm.WordBytes)*blm.StepStride + b0%blm.WordBytes
		return u.data[o : o+n : o+n]
	}
	buf = buf[:n]
	for i := 0; i < n; {
		b := b0 + i
		o := u.off + (b/blm.WordBytes)*blm.StepStride + b%blm.WordBytes
		i += copy(buf[i:], u.data[o:o+blm.WordBytes-b%blm.WordBytes])
	}
	return buf
}

var (
	e4m3LUT  [256]float32
	int8LUT  [256]float32
	nvfp4LUT [256][2]float32 // a byte's two E2M1 values: low nibble (even column), high nibble
	int4LUT  [256][2]float32 // a byte's two unsigned 4-bit codes
)

var e2m1Values [16]float32

func init() {
	for i := range 16 {
		e2m1Values[i] = e2m1.ToFloat32(uint8(i))
	}
	for i := range 256 {
		e4m3LUT[i] = fp8.E4M3ToFloat32(uint8(i))
		int8LUT[i] = float32(int8(uint8(i)))
		nvfp4LUT[i] = [2]float32{e2m1.ToFloat32(uint8(i) & 0xF), e2m1.ToFloat32(uint8(i) >> 4)}
		int4LUT[i] = [2]float32{float32(i & 0xF), float32(i >> 4)}
	}
}

type kernel struct {
	decode func(w []float32, u unitReader, st *stripe)
	dot1   func(u unitReader, st *stripe, x []float32) float32
}

func kernelFor(g blm.Geometry) (kernel, bool) {
	switch g.Format {
	case formats.BF16:
		return kernel{decodeBF16, dotBF16}, true
	case formats.F16:
		return kernel{decodeF16, dotF16}, true
	case formats.FP8:
		return kernel{decodeFP8, dotFP8}, true
	case formats.NVFP4:
		return kernel{decodeNVFP4, dotNVFP4}, true
	case formats.Int8:
		return kernel{decodeInt8, dotInt8}, true
	case formats.Int4:
		var e int
		var scalar func([]byte) float32
		switch g.ScaleType {
		case "BF16":
			e, scalar = 2, func(b []byte) float32 { return bf16.ToFloat32(binary.LittleEndian.Uint16(b)) }
		case "F16":
			e, scalar = 2, func(b []byte) float32 { return f16.ToFloat32(binary.LittleEndian.Uint16(b)) }
		case "F32":
			e, scalar = 4, func(b []byte) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(b)) }
		default:
			return kernel{}, false
		}
		return kernel{decodeInt4(e, scalar), dotInt4(e, scalar)}, true
	}
	return kernel{}, false
}

// BF16 and F16: 8 values per word.

func decodeBF16(w []float32, u unitReader, _ *stripe) {
	n := 2 * len(w)
	for j := 0; j*blm.WordBytes < n; j++ {
		b := u.word(j)[:min(blm.WordBytes, n-j*blm.WordBytes)]
		d := w[j*8:]
		d = d[:len(b)/2]
		for i := range d {
			d[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[2*i:])) << 16)
		}
	}
}

func dotBF16(u unitReader, _ *stripe, x []float32) float32 {
	n := 2 * len(x)
	var s0, s1, s2, s3 float32
	j := 0
	for ; (j+1)*blm.WordBytes <= n; j++ {
		b := u.word(j)
		xx := x[j*8 : j*8+8 : j*8+8]
		s0 += math.Float32frombits(uint32(b[0])<<16|uint32(b[1])<<24) * xx[0]
		s1 += math.Float32frombits(uint32(b[2])<<16|uint32(b[3])<<24) * xx[1]
		s2 += math.Float32frombits(uint32(b[4])<<16|uint32(b[5])<<24) * xx[2]
		s3 += math.Float32frombits(uint32(b[6])<<16|uint32(b[7])<<24) * xx[3]
		s0 += math.Float32frombits(uint32(b[8])<<16|uint32(b[9])<<24) * xx[4]
		s1 += math.Float32frombits(uint32(b[10])<<16|uint32(b[11])<<24) * xx[5]
		s2 += math.Float32frombits(uint32(b[12])<<16|uint32(b[13])<<24) * xx[6]
		s3 += math.Float32frombits(uint32(b[14])<<16|uint32(b[15])<<24) * xx[7]
	}
	if j*blm.WordBytes < n {
		b := u.word(j)
		for i := 0; j*8+i < len(x); i++ {
			s0 += math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[2*i:]))<<16) * x[j*8+i]
		}
	}
	return (s0 + s1) + (s2 + s3)
}

func decodeF16(w []float32, u unitReader, _ *stripe) {
	n := 2 * len(w)
	for j := 0; j*blm.WordBytes < n; j++ {
		b := u.word(j)[:min(blm.WordBytes, n-j*blm.WordBytes)]
		d := w[j*8:]
		d = d[:len(b)/2]
		for i := range d {
			d[i] = f16.ToFloat32(binary.LittleEndian.Uint16(b[2*i:]))
		}
	}
}

func dotF16(u unitReader, _ *stripe, x []float32) float32 {
	n := 2 * len(x)
	var s0, s1 float32
	for j := 0; j*blm.WordBytes < n; j++ {
		b := u.word(j)[:min(blm.WordBytes, n-j*blm.WordBytes)]
		xx := x[j*8:]
		xx = xx[:len(b)/2]
		for i := 0; i+1 < len(xx); i += 2 {
			s0 += f16.ToFloat32(binary.LittleEndian.Uint16(b[2*i:])) * xx[i]
			s1 += f16.ToFloat32(binary.LittleEndian.Uint16(b[2*i+2:])) * xx[i+1]
		}
		if len(xx)%2 == 1 {
			i := len(xx) - 1
			s0 += f16.ToFloat32(binary.LittleEndian.Uint16(b[2*i:])) * xx[i]
		}
	}
	return s0 + s1
}

// FP8: 16 values per word, per-tensor scale only (the row scale).

func decodeFP8(w []float32, u unitReader, _ *stripe) {
	n := len(w)
	for j := 0; j*blm.WordBytes < n; j++ {
		b := u.word(j)[:min(blm.WordBytes, n-j*blm.WordBytes)]
		d := w[j*blm.WordBytes:]
		d = d[:len(b)]
		for i, c := range b {
			d[i] = e4m3LUT[c]
		}
	}
}

func dotFP8(u unitReader, _ *stripe, x []float32) float32 {
	n := len(x)
	var s0, s1, s2, s3 float32
	j := 0
	for ; (j+1)*blm.WordBytes <= n; j++ {
		b := u.word(j)
		xx := x[j*16 : j*16+16 : j*16+16]
		s0 += e4m3LUT[b[0]] * xx[0]
		s1 += e4m3LUT[b[1]] * xx[1]
		s2 += e4m3LUT[b[2]] * xx[2]
		s3 += e4m3LUT[b[3]] * xx[3]
		s0 += e4m3LUT[b[4]] * xx[4]
		s1 += e4m3LUT[b[5]] * xx[5]
		s2 += e4m3LUT[b[6]] * xx[6]
		s3 += e4m3LUT[b[7]] * xx[7]
		s0 += e4m3LUT[b[8]] * xx[8]
		s1 += e4m3LUT[b[9]] * xx[9]
		s2 += e4m3LUT[b[10]] * xx[10]
		s3 += e4m3LUT[b[11]] * xx[11]
		s0 += e4m3LUT[b[12]] * xx[12]
		s1 += e4m3LUT[b[13]] * xx[13]
		s2 += e4m3LUT[b[14]] * xx[14]
		s3 += e4m3LUT[b[15]] * xx[15]
	}
	if j*blm.WordBytes < n {
		b := u.word(j)
		for i := 0; j*16+i < n; i++ {
			s0 += e4m3LUT[b[i]] * x[j*16+i]
		}
	}
	return (s0 + s1) + (s2 + s3)
}

// NVFP4: two E2M1 codes per byte, one E4M3 block scale per 16 columns in the unit's slots.

// nvfp4Group returns slot q's decoded E4M3 block scale and the code bytes of its group gr
// (columns [gr[0], gr[1]) of the stripe), read in place when they lie in one word (codeOff)
// or gathered into buf.
func nvfp4Group(u unitReader, st *stripe, q int, gr [2]int, buf []byte) (float32, []byte) {
	if st.codeOff != nil {
		o := u.off + st.codeOff[q]
		return e4m3LUT[u.data[u.off+st.scaleOff[q]]], u.data[o : o+(gr[1]-gr[0])/2]
	}
	return e4m3LUT[u.byteAt(st.pay+q)], u.span(gr[0]/2, (gr[1]-gr[0])/2, buf)
}

func decodeNVFP4(w []float32, u unitReader, st *stripe) {
	var buf [64]byte
	for q, gr := range st.groups {
		sc, b := nvfp4Group(u, st, q, gr, buf[:])
		d := w[gr[0]:gr[1]]
		d = d[:2*len(b)]
		for i, c := range b {
			v := &nvfp4LUT[c]
			d[2*i], d[2*i+1] = v[0]*sc, v[1]*sc
		}
	}
}

func dotNVFP4(u unitReader, st *stripe, x []float32) float32 {
	var buf [64]byte
	var acc float32
	for q, gr := range st.groups {
		sc, b := nvfp4Group(u, st, q, gr, buf[:])
		xx := x[gr[0]:gr[1]]
		xx = xx[:2*len(b)]
		var s0, s1, s2, s3 float32
		if len(b) == 8 { // a whole group: unrolled, four partial sums
			bb, xv := (*[8]byte)(b), (*[16]float32)(xx)
			v0, v1, v2, v3 := &nvfp4LUT[bb[0]], &nvfp4LUT[bb[1]], &nvfp4LUT[bb[2]], &nvfp4LUT[bb[3]]
			s0 += v0[0] * xv[0]
			s1 += v0[1] * xv[1]
			s2 += v1[0] * xv[2]
			s3 += v1[1] * xv[3]
			s0 += v2[0] * xv[4]
			s1 += v2[1] * xv[5]
			s2 += v3[0] * xv[6]
			s3 += v3[1] * xv[7]
			v0, v1, v2, v3 = &nvfp4LUT[bb[4]], &nvfp4LUT[bb[5]], &nvfp4LUT[bb[6]], &nvfp4LUT[bb[7]]
			s0 += v0[0] * xv[8]
			s1 += v0[1] * xv[9]
			s2 += v1[0] * xv[10]
			s3 += v1[1] * xv[11]
			s0 += v2[0] * xv[12]
			s1 += v2[1] * xv[13]
			s2 += v3[0] * xv[14]
			s3 += v3[1] * xv[15]
		} else {
			for i, c := range b {
				v := &nvfp4LUT[c]
				s0 += v[0] * xx[2*i]
				s1 += v[1] * xx[2*i+1]
			}
		}
		acc += sc * ((s0 + s1) + (s2 + s3))
	}
	return acc
}

// INT8: one F16 scale per group.

func int8Scale(u unitReader, st *stripe, q int) float32 {
	i := st.pay + 2*q
	return f16.ToFloat32(uint16(u.byteAt(i)) | uint16(u.byteAt(i+1))<<8)
}

func decodeInt8(w []float32, u unitReader, st *stripe) {
	buf := make([]byte, 0, 256)
	for q, gr := range st.groups {
		sc := int8Scale(u, st, q)
		b := u.span(gr[0], gr[1]-gr[0], buf[:cap(buf)])
		d := w[gr[0]:gr[1]]
		d = d[:len(b)]
		for i, c := range b {
			d[i] = int8LUT[c] * sc
		}
	}
}

func dotInt8(u unitReader, st *stripe, x []float32) float32 {
	buf := make([]byte, 0, 256)
	var acc float32
	for q, gr := range st.groups {
		sc := int8Scale(u, st, q)
		b := u.span(gr[0], gr[1]-gr[0], buf[:cap(buf)])
		xx := x[gr[0]:gr[1]]
		xx = xx[:len(b)]
		var s0, s1 float32
		i := 0
		for ; i+1 < len(b); i += 2 {
			s0 += int8LUT[b[i]] * xx[i]
			s1 += int8LUT[b[i+1]] * xx[i+1]
		}
		if i < len(b) {
			s0 += int8LUT[b[i]] * xx[i]
		}
		acc += sc * (s0 + s1)
	}
	return acc
}

// INT4 (affine): a (scale, bias) pair of e-byte elements per group; w = float32(scale·q) + bias.

func int4Pair(u unitReader, st *stripe, q, e int, scalar func([]byte) float32) (float32, float32) {
	var pb [8]byte
	for i := range 2 * e {
		pb[i] = u.byteAt(st.pay + q*2*e + i)
	}
	return scalar(pb[:e]), scalar(pb[e : 2*e])
}

func decodeInt4(e int, scalar func([]byte) float32) func([]float32, unitReader, *stripe) {
	return func(w []float32, u unitReader, st *stripe) {
		var buf [64]byte
		for q, gr := range st.groups {
			sc, bias := int4Pair(u, st, q, e, scalar)
			b := u.span(gr[0]/2, (gr[1]-gr[0])/2, buf[:])
			d := w[gr[0]:gr[1]]
			d = d[:2*len(b)]
			for i, c := range b {
				v := &int4LUT[c]
				d[2*i], d[2*i+1] = float32(sc*v[0])+bias, float32(sc*v[1])+bias
			}
		}
	}
}

func dotInt4(e int, scalar func([]byte) float32) func(unitReader, *stripe, []float32) float32 {
	return func(u unitReader, st *stripe, x []float32) float32 {
		var buf [64]byte
		var acc float32
		for q, gr := range st.groups {
			sc, bias := int4Pair(u, st, q, e, scalar)
			b := u.span(gr[0]/2, (gr[1]-gr[0])/2, buf[:])
			xx := x[gr[0]:gr[1]]
			xx = xx[:2*len(b)]
			var d0, d1, sx float32
			for i, c := range b {
				v := &int4LUT[c]
				d0 += v[0] * xx[2*i]
				d1 += v[1] * xx[2*i+1]
				sx += xx[2*i] + xx[2*i+1]
			}
			acc += float32(sc*(d0+d1)) + float32(bias*sx)
		}
		return acc
	}
}
