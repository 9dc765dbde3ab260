package cpu

import (
	"math"

	"lithos/formats"
	"lithos/pack/blm"
	"lithos/runtime/vec"
)

// The SIMD path of the packed product (amd64 with AVX2 and FMA: simd_amd64.s; with AVX-512
// F/VL/BW as well: simd512_amd64.s; arm64: the tiles only, NEON decoders and dot products,
// simd_arm64.s). Two shapes of work:
//
//   - fused (5–8 activation rows with AVX-512, 7–8 with AVX2 and K ≤ 512: verify and draft
//     steps): decode a piece of one weight row (two with AVX-512) into registers and multiply
//     it into all 8 activation rows at once, so the decode overlaps the multiply-adds;
//   - tiles (every other row count: decode steps, prefill chunks): decode simdTile weight rows
//     into float32 (exact weights: code · block scale, the values DecodeRow writes), then take
//     the tile's dot products with every activation row, two rows per pass.
//
// Decoding is a fixed cost per weight and the multiply-adds run 16 per cycle per core, so an
// 8-row verify step costs 1.6–1.9× a 1-row decode step on the tiny pair instead of the
// scalar kernels' 4–5× (docs/speculative.md §6).
//
// Numerics: a matrix runs one kernel set (AVX2 and NEON: 8-lane accumulators, the same order,
// so their products are bit-identical; AVX-512: 16-lane ones, for NVFP4 and FP8), and every kernel of a set accumulates a (weight row, activation row)
// pair in one register over the columns in order, c ≡ i (mod lanes) in lane i, by FMA, then
// reduces it the same way (AVX-512: l_i + l_{i+8} first; then ((l0+l1)+(l2+l3)) +
// ((l4+l5)+(l6+l7))), times the row's tensor scale. The order depends only on K, never on the
// number of activation rows or on which tile holds the row, so row r of a multi-row product
// equals the single-row product of that activation row bit for bit (a verify step's row 0
// gives a decode step's logits). It differs from the scalar kernels' order (four partial sums;
// the NVFP4 single-row table sums per group before scaling) by float32 rounding.

// simdEnabled switches the SIMD path off, and wideEnabled its AVX-512 kernels, for tests
// that compare them with the scalar and the AVX2 kernels (NewPacked reads both).
var simdEnabled, wideEnabled = true, true

// fuse8MaxK is the widest K of the fused 8-row path, AVX2 and AVX-512. The AVX2 kernel reads
// the 8 activation rows once per weight row, so they must stay in L1 (8 rows of 512 floats are
// 16 KB, half of it); the AVX-512 kernel reads them once per two weight rows and beats the
// tiles at every K measured (512: 0.20 against 0.26 ns per weight; 5120: 0.18 against 0.33).
var fuse8MaxK = [2]int{512, math.MaxInt}

// fuse8MinRows is the fewest activation rows the fused path takes, AVX2 and AVX-512: it costs
// what 8 rows cost, which the tiles beat below 7 rows (AVX2) or 5 (AVX-512).
var fuse8MinRows = [2]int{7, 5}

// A narrow matrix (K < denseMaxK) of at most denseMaxWeights weights is decoded once, at
// NewPacked, into float32 (Packed.dense: the drafter's Markov W2, [Vocab, 64], 1 MB for the
// tiny pair): its products are one activation row at a time (the Markov chain's slots) and
// its rows too short to amortize a decode call per row, which made it a quarter of a draft.
// The tiles then read the decoded rows instead of decoding them: the same values, so the same
// results.
const (
	denseMaxK       = 256
	denseMaxWeights = 1 << 20
)

// simdTile is the weight rows the SIMD path decodes at a time (4 rows of K = 1536 are 24 KB,
// within a core's L1 data cache).
const simdTile = 4

// simdKind says which SIMD decoder serves a matrix.
type simdKind uint8

const (
	simdNVFP4 simdKind = iota
	simdFP8
	simdBF16
)

// simdPlan is what a matrix's rows share for the SIMD decoders: one entry per piece of a row
// (an NVFP4 group of 16 columns, 16 FP8 codes, 8 BF16 values), with the piece's byte offset
// from the row's first unit (rowBase), for NVFP4 its scale's offset, and its first column.
type simdPlan struct {
	kind simdKind
	ents []int32 // NVFP4: {code offset, scale offset, column}; FP8 and BF16: {offset, column}
	n    int     // entries
	// wide: the AVX-512 kernels (16-lane accumulators) serve this matrix (NVFP4 and FP8
	// where the CPU has AVX-512 F/VL/BW), else the AVX2 ones; one matrix never mixes them.
	wide bool
}

// newSIMDPlan returns the plan of p, or nil when the SIMD path does not serve it: no SIMD
// kernels in this build or CPU (haveSIMD), a format without a SIMD decoder, K not a multiple of the piece width, a stripe whose
// columns are not whole pieces, an NVFP4 group that is not 16 whole columns in one word.
func newSIMDPlan(p *Packed) *simdPlan {
	g := &p.g
	if !haveSIMD || !simdEnabled || g.BlockBytes > math.MaxInt32 {
		return nil
	}
	k := int(g.K)
	pl := &simdPlan{}
	unitOff := func(i int) int { return (i/blm.WordBytes)*blm.StepStride + i%blm.WordBytes }
	switch {
	case g.Format == formats.NVFP4 && g.GroupSize == 16 && k%16 == 0:
		pl.kind = simdNVFP4
		for s, st := range p.stripes {
			if st.cols == 0 {
				continue
			}
			if st.codeOff == nil || st.col0%16 != 0 {
				return nil
			}
			for q, gr := range st.groups {
				if gr[1]-gr[0] != 16 {
					return nil
				}
				pl.ents = append(pl.ents, int32(s*blm.WordBytes+st.codeOff[q]), int32(s*blm.WordBytes+st.scaleOff[q]), int32(st.col0+gr[0]))
			}
		}
		pl.n = len(pl.ents) / 3
	case g.Format == formats.FP8 && k%16 == 0, g.Format == formats.BF16 && k%8 == 0:
		pl.kind = simdFP8
		cols := 16 // columns per piece
		if g.Format == formats.BF16 {
			pl.kind, cols = simdBF16, 8
		}
		for s, st := range p.stripes {
			if st.cols%cols != 0 {
				return nil
			}
			for j := 0; j < st.cols/cols; j++ {
				// Piece j's bytes start at unit byte j·16 (FP8: 16 codes; BF16: 8 values).
				pl.ents = append(pl.ents, int32(s*blm.WordBytes+unitOff(j*blm.WordBytes)), int32(st.col0+j*cols))
			}
		}
		pl.n = len(pl.ents) / 2
	default:
		return nil
	}
	// NVFP4 and FP8 pieces are 16 columns and K a multiple of 16: the AVX-512 kernels' chunks.
	pl.wide = haveAVX512 && wideEnabled && pl.kind != simdBF16
	return pl
}

// rowBase returns the byte offset of packed row r's first unit (stripe 0) in p.data.
func (p *Packed) rowBase(r int) int {
	g := &p.g
	rr := r % g.Rows
	step, laneBase := rr/g.Fold, (rr%g.Fold)*g.Lanes
	return (r/g.Rows)*int(g.BlockBytes) + ((step*(g.UnitBytes/blm.WordBytes))*blm.SIMDLanes+laneBase)*blm.WordBytes
}

// decodeRowSIMD is DecodeRow on the SIMD path: w[:K] = packed row r without its tensor scale
// (the same values: the AVX2 decoders on amd64, the NEON ones on arm64).
func (p *Packed) decodeRowSIMD(w []float32, r int) {
	pl := p.simd
	w = w[:p.g.K]
	base := &p.data[p.rowBase(r)]
	switch pl.kind {
	case simdNVFP4:
		tileDecodeNVFP4(&w[0], base, &pl.ents[0], pl.n, &e4m3LUT[0])
	case simdFP8:
		tileDecodeFP8(&w[0], base, &pl.ents[0], pl.n)
	case simdBF16:
		tileDecodeBF16(&w[0], base, &pl.ents[0], pl.n)
	}
}

// dot8 is the fused decode and 8-row product of packed row r (nvfp4Dot8AVX2, fp8Dot8AVX2,
// bf16Dot8AVX2): out[t] = W[r]·x[t·K …] without the tensor scale, for x of 8 rows.
func (p *Packed) dot8(r int, x []float32, out *[8]float32) {
	pl := p.simd
	k := int(p.g.K)
	x = x[:8*k]
	base := &p.data[p.rowBase(r)]
	switch pl.kind {
	case simdNVFP4:
		nvfp4Dot8AVX2(&e4m3LUT[0], base, &pl.ents[0], pl.n, &x[0], k, out)
	case simdFP8:
		fp8Dot8AVX2(nil, base, &pl.ents[0], pl.n, &x[0], k, out)
	case simdBF16:
		bf16Dot8AVX2(nil, base, &pl.ents[0], pl.n, &x[0], k, out)
	}
}

// dot2x8 is the AVX-512 fused decode and 8-row product of packed rows r0 and r1
// (nvfp4Dot2x8AVX512, fp8Dot2x8AVX512): out[8·j + t] = W[r_j]·x[t·K …] without the tensor
// scale, for x of 8 rows.
func (p *Packed) dot2x8(r0, r1 int, x []float32, out *[16]float32) {
	pl := p.simd
	k := int(p.g.K)
	x = x[:8*k]
	bases := [2]*byte{&p.data[p.rowBase(r0)], &p.data[p.rowBase(r1)]}
	switch pl.kind {
	case simdNVFP4:
		nvfp4Dot2x8AVX512(&e4m3LUT[0], &bases, &pl.ents[0], pl.n, &x[0], k, out)
	case simdFP8:
		fp8Dot2x8AVX512(nil, &bases, &pl.ents[0], pl.n, &x[0], k, out)
	}
}

// mulSIMD is the product dst[t·n + o] = W[rows[o]]·x[t] · rowScale for m ≥ 1 activation rows
// on the SIMD path (shapes checked by the caller).
func (p *Packed) mulSIMD(dst, x []float32, m int, rows []int32) {
	n, k := len(rows), int(p.g.K)
	wide := p.simd.wide
	// The scalar kernels' grain (MinRowsPerTask) assumes ~1 multiply-add per nanosecond; these
	// run several times faster per row, so tasks get proportionally more rows.
	grain := vec.MinRowsPerTask(k * (m + 4) / 8)
	if haveFused8 && m >= fuse8MinRows[b2i(wide)] && m <= 8 && k <= fuse8MaxK[b2i(wide)] {
		// Verify (8) and draft (7) rows: decode each weight row into registers and multiply it
		// into all rows at once, so the decode overlaps the multiply-adds (faster than the
		// tiles below while the 8 activation rows stay in the core's caches; slower for fewer
		// rows, which still pay for 8). Fewer rows are padded with zero rows.
		xs := x[:m*k]
		var xp *[]float32
		if m < 8 {
			xp = p.xpool.Get().(*[]float32)
			xs = (*xp)[:8*k]
			copy(xs, x[:m*k])
			clear(xs[m*k:])
		}
		if wide {
			parallelChunks(n, grain, 2, func(lo, hi int) {
				var o16 [16]float32
				for o := lo; o < hi; o += 2 {
					r0, r1 := int(rows[o]), int(rows[min(o+1, hi-1)])
					p.dot2x8(r0, r1, xs, &o16)
					sc0, sc1 := p.RowScale(r0), p.RowScale(r1)
					for t := 0; t < m; t++ {
						dst[t*n+o] = o16[t] * sc0
					}
					if o+1 < hi {
						for t := 0; t < m; t++ {
							dst[t*n+o+1] = o16[8+t] * sc1
						}
					}
				}
			})
		} else {
			parallelChunks(n, grain, 1, func(lo, hi int) {
				var o8 [8]float32
				for o := lo; o < hi; o++ {
					r := int(rows[o])
					p.dot8(r, xs, &o8)
					sc := p.RowScale(r)
					for t := 0; t < m; t++ {
						dst[t*n+o] = o8[t] * sc
					}
				}
			})
		}
		if xp != nil {
			p.xpool.Put(xp)
		}
		return
	}
	dot2, dot1 := tileDot4x2, tileDot4x1
	if wide {
		dot2, dot1 = dot4x2AVX512, dot4x1AVX512
	}
	parallelChunks(n, grain, simdTile, func(lo, hi int) {
		wp := p.pool.Get().(*[]float32)
		w := (*wp)[:simdTile*k]
		var sc [simdTile]float32
		var o2 [8]float32
		var o1 [4]float32
		for o0 := lo; o0 < hi; o0 += simdTile {
			nt := min(simdTile, hi-o0)
			w := w
			inPlace := false // the tile is simdTile consecutive rows of p.dense, read where they are
			if r0 := int(rows[o0]); p.dense != nil && nt == simdTile &&
				int(rows[o0+1]) == r0+1 && int(rows[o0+2]) == r0+2 && int(rows[o0+3]) == r0+3 {
				w, inPlace = p.dense[r0*k:(r0+simdTile)*k], true
			}
			for i := 0; i < nt; i++ {
				r := int(rows[o0+i])
				switch {
				case inPlace:
				case p.dense != nil:
					copy(w[i*k:(i+1)*k], p.dense[r*k:(r+1)*k])
				default:
					p.decodeRowSIMD(w[i*k:(i+1)*k], r)
				}
				sc[i] = p.RowScale(r)
			}
			if nt < simdTile {
				clear(w[nt*k:])
			}
			t := 0
			for ; t+2 <= m; t += 2 {
				dot2(&w[0], k, &x[t*k], &x[(t+1)*k], &o2)
				d0, d1 := dst[t*n+o0:t*n+o0+nt], dst[(t+1)*n+o0:(t+1)*n+o0+nt]
				for i := range d0 {
					d0[i] = o2[i] * sc[i]
					d1[i] = o2[4+i] * sc[i]
				}
			}
			if t < m {
				dot1(&w[0], k, &x[t*k], &o1)
				d := dst[t*n+o0 : t*n+o0+nt]
				for i := range d {
					d[i] = o1[i] * sc[i]
				}
			}
		}
		p.pool.Put(wp)
	})
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
