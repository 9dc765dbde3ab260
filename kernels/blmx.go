package kernels

import (
	"fmt"
	"runtime"
	"sync"

	"lithos/formats"
	"lithos/pack/blm"
)

// The MMA-layout matrix kernels (ops/blmx.kern, lithos_blmx_nvfp4 and lithos_blmx_fp8): the CUDA
// tensor-core path over a copy of the weights made at load (BLMXCopy), in which every lane's
// 16-byte load holds exactly its MMA fragments; f16 MMAs over weights decoded exactly, the
// activations scaled per token and split into two f16 pieces (22 bits); one threadgroup of
// BLMXThreads/32 (16) simdgroups per multiprocessor streaming its items BLMX_D ahead in
// registers, no barrier until the end (docs/performance.md §3.3j). Metal keeps the BLM kernels:
// these entry points are in the Metal source only for the fiber runtime's tensor-core test
// build (Kernel.MMAOnly).

// BLMLayoutMMA is the BLMXParams weight layout (Matrix.Layout on the GPU): BLMXCopy's.
const BLMLayoutMMA = 2

// BLMXThreads is the threadgroup size of the MMA-layout kernels: 16 simdgroups (docs/performance.md
// §3.3r measured 768 and 1,024: slower).
const BLMXThreads = 512

// BLMXShared is the dynamic threadgroup memory of an MMA-layout launch in bytes (224 KiB: the
// activations of a K part, the simdgroups' partial-sum slots and, with Push, the receive area
// of the blocks the threadgroup finishes; the H100/H200 allow 227 KiB
// per threadgroup, BLMXStatic of which the kernel's static arrays take). With it a
// multiprocessor holds one threadgroup.
const BLMXShared = 224 << 10

// BLMXStatic is the static threadgroup memory of ops/blmx.kern in bytes, for the kernels of
// BLMXMaxTiles tiles (the one-tile kernels take half of the arrays): per tile the simdgroups'
// token maxima and Σx² partials ((BLMXThreads/32)·8 words each), the part's 8 Σx² (Norm) and,
// with Push, every rank's 8 (BLMMaxClusters·8 words); and the receive barrier (8 bytes; the
// ranks' Σx² and it only where the kernels are built with clusters, BLM_CLUSTER). A device
// needs BLMXShared + BLMXStatic bytes per threadgroup for the MMA-layout kernels (2,632 at
// 512 threads; the H100/H200 allow 232,448 in all).
const BLMXStatic = BLMXMaxTiles*(2*(BLMXThreads/32)*8*4+8*4+BLMMaxClusters*8*4) + 8

// BLMXMaxTiles is the most tiles of 8 activation rows one threadgroup of an MMA-layout kernel
// multiplies (BLMXParams.Tiles): 2, the lithos_blmx_*_t2 kernels of 9–16 rows.
const BLMXMaxTiles = 2

// blmxChunk returns, for a format with an MMA-layout kernel, the MMA k-steps (16 columns) per
// chunk (one 16-byte load per lane) and the chunk's bytes (NVFP4: 512 of codes and 64 of
// block scales).
func blmxChunk(f formats.Format) (ksteps, bytes int64, ok bool) {
	switch f {
	case formats.NVFP4:
		return 4, 576, true
	case formats.FP8:
		return 2, 512, true
	}
	return 0, 0, false
}

// BLMXGroup is the host's padding unit of the MMA layout: chunks per block and per K part are
// multiples of it, so that a simdgroup's step (blmxStep items, which divides it) never spans
// two blocks. Changing it changes the copy's padding and the splits.
const BLMXGroup = 4

// blmxStep is the items (chunks of one block) a simdgroup of the MMA-layout kernels computes
// per step and loads one step ahead, in registers (BLMX_D in ops/blmx.kern, which Source defines
// from it); it divides BLMXGroup. The split's slots (blmxShape) follow it. It and BLMXThreads
// are the constants a variant of the kernels changes (docs/performance.md §3.3r: 1,024 threads
// at steps of 2 items, 768 at 4, both slower on the H200).
const blmxStep = 4

// blmxStep divides BLMXGroup: the build stops otherwise (as kernels/params.go's checks).
var _ [0]struct{} = [BLMXGroup % blmxStep]struct{}{}

// BLMXChunks returns the chunks per block of g's MMA layout: ⌈K / (16·k-steps per chunk)⌉ (64
// columns for NVFP4, 32 for FP8) rounded up to a multiple of BLMXGroup (zero chunks); 0 for a
// format without an MMA-layout kernel.
func BLMXChunks(g blm.Geometry) int64 {
	ks, _, ok := blmxChunk(g.Format)
	if !ok {
		return 0
	}
	c := (g.K + 16*ks - 1) / (16 * ks)
	return (c + BLMXGroup - 1) / BLMXGroup * BLMXGroup
}

// BLMXCopyBytes is the size of g's MMA layout: Blocks · BLMXChunks · chunk bytes — the stored
// codes and block scales of K rounded up to a chunk (no unit padding).
func BLMXCopyBytes(g blm.Geometry) int64 {
	_, cb, _ := blmxChunk(g.Format)
	return g.Blocks * BLMXChunks(g) * cb
}

// BLMXCopy returns the MMA layout of packed, the BLM bytes of g (g.TotalBytes), for
// lithos_blmx_*: block b's chunk c at (b·chunks + c)·CB; in it lane l = 4g + q (g = l/4, q =
// l%4) has the 16 bytes at l·16, which are, for each k-step s of the chunk (16 columns from
// 16s), the codes of rows g and g + 8 at columns 4q, 4q+1, 4q+2, 4q+3 of the k-step — in the
// places of the MMA's columns 2q, 2q+1, 2q+8, 2q+9 (its A fragment): the kernels stage a token's
// columns 4q … 4q+3 as the B fragment's, so each k-step's 16 columns are relabelled alike on
// both sides and the products are the same, while a lane's four activations are contiguous (one
// 16-byte load in the staging; docs/performance.md §3.3w):
//
//   - NVFP4 (4 k-steps, one 32-bit word each): byte i of word j holds code P_i with its three
//     magnitude bits at bits 1–3 and its sign at bit 7, and code Q_i with the magnitude at
//     bits 4–6 and the sign at bit 0, where P = (g+8, 4q), (g, 4q), (g+8, 4q+1), (g, 4q+1) (FP8's
//     order: row g's in bytes 1 and 3, so that masks alone give its f16 pair) and Q the same at
//     columns 4q+2, 4q+3; then, at 512 + 8g', the E4M3 block scales of rows g' and
//     g'+8 of the chunk's four 16-column groups, (g', g'+8) per group;
//   - FP8 (2 k-steps, two words each): word 2j the bytes (g+8, 4q), (g, 4q), (g+8, 4q+1),
//     (g, 4q+1); word 2j+1 the same at columns 4q+2, 4q+3.
//
// Rows ≥ N, columns ≥ K and groups past K are zero. The copy holds the same codes and scales;
// it is BLMXCopyBytes long, never more than g.TotalBytes for the geometries it accepts.
// Errors: a geometry that fails Check, a format without an MMA-layout kernel, NVFP4 with a group
// other than 16, packed of another size or with padding that is not zero (blm.UnpackBlock's
// errors, naming the block), a copy larger than packed. Blocks are copied by up to GOMAXPROCS
// (at most 16) goroutines.
func BLMXCopy(g blm.Geometry, packed []byte) ([]byte, error) {
	if err := g.Check(); err != nil {
		return nil, fmt.Errorf("kernels: MMA-layout copy: %w", err)
	}
	ks, cb, ok := blmxChunk(g.Format)
	if !ok {
		return nil, fmt.Errorf("kernels: MMA-layout copy of a %s matrix: no MMA-layout kernel for the format (nvfp4, fp8_e4m3)", g.Format)
	}
	if g.Format == formats.NVFP4 && g.GroupSize != 16 {
		return nil, fmt.Errorf("kernels: MMA-layout copy of an NVFP4 matrix with group %d: want 16", g.GroupSize)
	}
	if int64(len(packed)) != g.TotalBytes {
		return nil, fmt.Errorf("kernels: MMA-layout copy: %d packed bytes, want %d", len(packed), g.TotalBytes)
	}
	size := BLMXCopyBytes(g)
	if size > g.TotalBytes {
		return nil, fmt.Errorf("kernels: MMA-layout copy of %d bytes is larger than the %d packed bytes", size, g.TotalBytes)
	}
	nch := BLMXChunks(g)
	out := make([]byte, size)
	workers := max(min(int64(runtime.GOMAXPROCS(0)), 16, g.Blocks/16), 1)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for wi := int64(0); wi < workers; wi++ {
		wg.Add(1)
		go func(wi, lo, hi int64) {
			defer wg.Done()
			rows := g.NewRows(g.Rows)
			for b := lo; b < hi; b++ {
				n := min(int64(g.Rows), g.N-b*int64(g.Rows))
				r := blm.Rows{Codes: rows.Codes[:n*g.CodeRowBytes()]}
				if rows.Scales != nil {
					r.Scales = rows.Scales[:n*g.ScaleRowBytes()]
				}
				if err := g.UnpackBlock(r, b, packed[b*g.BlockBytes:(b+1)*g.BlockBytes]); err != nil {
					errs[wi] = fmt.Errorf("kernels: MMA-layout copy: %w", err)
					return
				}
				blmxBlock(g, r, n, out[b*nch*cb:(b+1)*nch*cb], nch, ks, cb)
			}
		}(wi, wi*g.Blocks/workers, (wi+1)*g.Blocks/workers)
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// blmxBlock writes one block's chunks (dst, nch·cb bytes) from its n stored rows r (ks k-steps
// per chunk).
func blmxBlock(g blm.Geometry, r blm.Rows, n int64, dst []byte, nch, ks, cb int64) {
	k, crb := g.K, g.CodeRowBytes()
	nvfp4 := g.Format == formats.NVFP4
	// code is the stored code of (row, col) of the block, 0 outside the matrix.
	code := func(row, col int64) byte {
		if row >= n || col >= k {
			return 0
		}
		if nvfp4 {
			return (r.Codes[row*crb+col/2] >> (4 * (col & 1))) & 15
		}
		return r.Codes[row*crb+col]
	}
	groups := g.ScaleRowBytes()
	scale := func(row, grp int64) byte {
		if row >= n || grp >= groups {
			return 0
		}
		return r.Scales[row*groups+grp]
	}
	for c := int64(0); c < nch; c++ {
		ch := dst[c*cb : (c+1)*cb]
		for lane := int64(0); lane < 32; lane++ {
			gg, q := lane>>2, lane&3
			lw := ch[lane*16 : lane*16+16]
			for j := int64(0); j < ks; j++ {
				cb0 := 16*(ks*c+j) + 4*q
				if nvfp4 {
					var w [4]byte
					for i := int64(0); i < 4; i++ {
						row := gg + 8*(1-i&1)
						p, qq := code(row, cb0+(i>>1)), code(row, cb0+2+(i>>1))
						w[i] = (p&7)<<1 | (p&8)<<4 | (qq&7)<<4 | qq>>3
					}
					copy(lw[4*j:], w[:])
					continue
				}
				for h := int64(0); h < 2; h++ {
					col := cb0 + 2*h
					o := lw[8*j+4*h:]
					o[0], o[1], o[2], o[3] = code(gg+8, col), code(gg, col), code(gg+8, col+1), code(gg, col+1)
				}
			}
		}
		if nvfp4 {
			for gg := int64(0); gg < 8; gg++ {
				for j := int64(0); j < 4; j++ {
					ch[512+8*gg+2*j] = scale(gg, 4*c+j)
					ch[512+8*gg+2*j+1] = scale(gg+8, 4*c+j)
				}
			}
		}
	}
}

// BLMXDevice is what the MMA-layout work split needs of a GPU: its multiprocessors (one
// threadgroup each: BLMXShared), the largest thread-block cluster it launches (1: none), and
// per cluster size c, Active[c], how many clusters of c such threadgroups run at once (CUDA
// cuOccupancyMaxActiveClusters; 0: unknown, taken as SMs/c; negative: none, the size is not
// used).
type BLMXDevice struct {
	SMs        int
	MaxCluster int
	Active     [BLMMaxClusters + 1]int
	// NoPush makes NewBLMXParams's splits Push 0 (A/B runs: LITHOS_CUDA_PUSH=0 on CUDA).
	NoPush bool
	// ClusterFirst is the cluster size NewBLMXParams tries first, for both formats (2, 4 or
	// 8; A/B runs: LITHOS_CUDA_CLUSTER_FIRST on CUDA); 0 takes each format's (blmxOrder).
	ClusterFirst int
	// OneTile makes NewBLMXParams's products of 9–16 rows one tile per threadgroup (two
	// threadgroups per K part, each loading and decoding the weights), as before the two-tile
	// kernels (A/B runs: LITHOS_CUDA_TILES=1 on CUDA).
	OneTile bool
}

// blmxOrder is the order in which NewBLMXParams tries cluster sizes for format fc on d: FP8
// clusters of 4, then 2, 8; NVFP4 2, then 4, 8; then 1 (no cluster). Measured on the H200 at
// the 27B's shapes with the pushed partial sums (docs/performance.md §8.10): the 8-row verify
// pass 10.96 → 10.76 ms with the FP8 products in clusters of 4 (lithos-run bench, same run);
// alone (BenchmarkBLMXShapes, two runs) attention qkv and out_proj/o_proj were 0.9–2.1 µs
// faster in clusters of 4 (30 × 4 = 120 multiprocessors, a quarter of K per rank to stage)
// than of 2 (66 × 2 = 132, half of K), in_proj_qkvz within the runs' noise (−1.3, +2.0 µs),
// NVFP4 gate_up 1.6–1.7 µs slower (its 100 MB keep 132 multiprocessors busy); down needs 4.
// d.ClusterFirst, when set, comes first for both; a device without clusters tries 1 only.
func blmxOrder(fc uint32, d BLMXDevice) []int {
	if max(d.MaxCluster, 1) == 1 {
		return []int{1}
	}
	first := 2
	if fc == blmxFP8 {
		first = 4
	}
	if d.ClusterFirst > 1 {
		first = d.ClusterFirst
	}
	order := []int{first}
	for _, c := range []int{2, 4, 8} {
		if c != first {
			order = append(order, c)
		}
	}
	return append(order, 1)
}

// Groups returns how many clusters of c threadgroups d runs at once: Active[c], or SMs/c when
// that is unknown (0); false when none fits (Active[c] < 0).
func (d BLMXDevice) Groups(c int) (int, bool) {
	if c < 0 || c >= len(d.Active) {
		return 0, false
	}
	switch n := d.Active[c]; {
	case n < 0:
		return 0, false
	case n == 0:
		return d.SMs / max(c, 1), true
	default:
		return n, true
	}
}

// BLMXParams: the product of lithos_blmx_nvfp4 / lithos_blmx_fp8 (ops/blmx.kern) over w in the
// MMA layout (BLMXCopy): y[t, n] = scales[n]·Σ_k W[n, k]·x[t·LdX + k] for t < rows, n < N, with
// the epilogues of BLMParams (EpiStore, EpiAdd, EpiSwiGLU). Format is FMT_NVFP4 (1) or FMT_FP8
// (2), the kernel's; Blocks = ⌈N/16⌉, Chunks = BLMXChunks. The work split (NewBLMXParams):
// Groups clusters of Cl threadgroups (K in Cl parts of PartChunks chunks, the last one
// shorter), cluster g over blocks [g·Blocks/Groups, (g+1)·Blocks/Groups); Slots partial-sum
// slots per simdgroup in threadgroup memory. Rows ≤ 16 in tiles of 8, Tiles of them per
// threadgroup (grid y: ⌈Rows/(8·Tiles)⌉ threadgroups per K part and cluster). The staging
// loads each lane's four activations of a k-step with one 16-byte load where x (and, with
// Norm, the norm's weights) is 16-byte aligned and LdX a multiple of 4; otherwise (K not a
// multiple of 4 with LdX = K, an offset x) with four scalar loads — the same products, a slower
// staging (docs/performance.md §3.3w).
type BLMXParams struct {
	DoneWord   uint32
	Rows       uint32
	RowsWord   uint32
	N          uint32
	K          uint32
	Format     uint32
	Blocks     uint32
	Chunks     uint32
	PartChunks uint32
	Cl         uint32
	Groups     uint32
	Slots      uint32
	LdX, LdY   uint32
	Epilogue   uint32
	// Norm 1 makes the product one of RMSNorm(x) (RMSNormParams' RMSPlain over each row's K
	// values, weights the launch's nw buffer [K], the checkpoint's 1 + w): y[t, n] =
	// scales[n]·r_t·Σ_k W[n, k]·(nw[k]·x[t, k]) with r_t = 1/√(Σ_k x[t, k]²/K + Eps), the
	// threadgroups' Σx² of their K parts added in rank order; 0 (nw unread) the plain product.
	Norm uint32
	Eps  float32
	// Push 1 (with Cl > 1; TrySplit sets it where the receive area fits BLMXShared): each rank
	// adds its simdgroups' partial sums of every block of the cluster and pushes the sum into
	// the threadgroup memory of the rank that finishes the block (distributed shared memory,
	// st.async counted on that rank's mbarrier), which waits for its own bytes only and adds
	// the ranks' sums in rank order from its own memory — no cluster barrier after the
	// products and no remote loads (docs/performance.md §3.3o). 0: the finishing ranks read
	// every rank's slots after a cluster barrier, and a second keeps the slots alive until they
	// have. The sums of an output differ between the two in rounding only; each is fixed by the
	// shape and the split.
	Push uint32
	// Tiles is the tiles of 8 rows one threadgroup multiplies (1 or BLMXMaxTiles), the
	// kernel's own (BLMXKernelTiles; a record of other tiles makes the kernel report
	// GuardBLMXTiles). With 2 each weight is loaded and decoded once for 16 rows instead of
	// once per tile, and the threadgroup memory holds both tiles' activations, slots and
	// receive areas (so the split may differ from one tile's: NewBLMXParams).
	Tiles uint32
}

// Grid is Groups·Cl threadgroups along x (cluster g is threadgroups g·Cl … g·Cl + Cl − 1) and
// ⌈Rows/(8·Tiles)⌉ along y, each Tiles tiles of 8 tokens.
func (p BLMXParams) Grid() [3]uint32 {
	r := 8 * max(p.Tiles, 1)
	return [3]uint32{p.Groups * max(p.Cl, 1), (p.Rows + r - 1) / r, 1}
}

// ClusterDims is the thread-block cluster of the launch: (Cl, 1, 1).
func (p BLMXParams) ClusterDims() [3]uint32 { return [3]uint32{max(p.Cl, 1), 1, 1} }

// blmxFormat is the FMT_* code of a format with an MMA-layout kernel (ops/blm.kern's).
func blmxFormat(f formats.Format) (uint32, bool) {
	switch f {
	case formats.NVFP4:
		return blmxNVFP4, true
	case formats.FP8:
		return blmxFP8, true
	}
	return 0, false
}

// BLMXParams.Format's values: the kernels' FMT_NVFP4 and FMT_FP8 (ops/common.kern).
const (
	blmxNVFP4 = 1
	blmxFP8   = 2
)

// blmxGeom is what the split and the checks derive from a record's shape.
type blmxGeom struct {
	ks, cb      int64 // k-steps and bytes per chunk
	slots       int64 // slots per simdgroup the split needs
	shared      int64 // threadgroup memory: activations + slots
	recv        int64 // Push's receive area: Cl entries of 512 bytes per block a rank finishes
	itemsPerSG  int64 // the most items one simdgroup streams
	blocksPerCl int64 // the most blocks of one cluster
}

// blmxShape computes blmxGeom for a split of threadgroups of tiles tiles; ok is false for a
// format without a kernel.
func blmxShape(format, blocks, chunks, part, cl, groups, tiles uint32) (blmxGeom, bool) {
	var f formats.Format
	switch format {
	case 1:
		f = formats.NVFP4
	case 2:
		f = formats.FP8
	default:
		return blmxGeom{}, false
	}
	ks, cb, _ := blmxChunk(f)
	var g blmxGeom
	g.ks, g.cb = ks, cb
	if groups == 0 || part == 0 {
		return g, true
	}
	g.blocksPerCl = (int64(blocks) + int64(groups) - 1) / int64(groups)
	const nsg = BLMXThreads / 32
	// A simdgroup takes whole steps of blmxStep items: ⌈steps/nsg⌉ of them at most.
	g.itemsPerSG = (g.blocksPerCl*int64(part)/blmxStep + nsg - 1) / nsg * blmxStep
	// Its L items of a part of pc chunks, starting at a step of a block, touch at most
	// (L + pc − blmxStep)/pc + 1 blocks, each its own slot; the last part may be shorter.
	g.slots = 1
	last := int64(chunks) - int64(max(cl, 1)-1)*int64(part)
	for _, pc := range []int64{int64(part), last} {
		if pc < 1 {
			continue
		}
		l := (g.blocksPerCl*pc/blmxStep + nsg - 1) / nsg * blmxStep
		g.slots = max(g.slots, min((l+pc-blmxStep)/pc+1, g.blocksPerCl))
	}
	t := int64(max(tiles, 1))
	g.shared = t * (int64(part)*ks*512 + (BLMXThreads/32)*g.slots*512)
	// A rank finishes at most ⌈blocksPerCl/Cl⌉ blocks, each with an entry from every rank
	// per tile.
	c := int64(max(cl, 1))
	g.recv = (g.blocksPerCl + c - 1) / c * c * 512 * t
	return g, true
}

// NewBLMXParams returns the record of matrix g (a format with an MMA-layout kernel: nvfp4 with
// 16-column groups, fp8_e4m3) for rows activation rows (1–16; set RowsWord for a dynamic count),
// contiguous x and y (LdX = K, LdY = N, or N/2 for EpiSwiGLU), no done word, and the work split
// for device d: the first cluster size of blmxOrder (FP8 4, 2, 8; NVFP4 2, 4, 8) whose K parts
// fit BLMXShared and that d runs at once, else — on a device without clusters, or when none
// fits — 1, as many clusters as d runs; Push where its receive area fits (TrySplit), unless
// d.NoPush. Measured on the H200 at the 27B's shapes (BenchmarkBLMXShapes; blmxOrder). Rows
// 9–16 take two tiles per threadgroup (Tiles 2: the weights loaded and decoded once for both)
// where such a split fits, unless d.OneTile; else, and for 1–8 rows, one. The split depends on
// the shape, the device and the tiles only: every row count 1–8 sums in the same order (a
// decode step and a verify pass agree bit for bit); 9–16 rows in two tiles may sum in another
// (more clusters where two tiles' activations need smaller K parts, or no pushing where the
// receive area no longer fits), so the runtime gives two tiles to prefill chunks only
// (runtime/backend/gpu: a round's 9–16 verify rows keep one). Errors: the
// format, rows, a matrix ≥ 4 GiB, no split that fits, the SwiGLU epilogue over N not a
// multiple of 16.
func NewBLMXParams(g blm.Geometry, rows int, epilogue uint32, d BLMXDevice) (BLMXParams, error) {
	if err := g.Check(); err != nil {
		return BLMXParams{}, err
	}
	fc, ok := blmxFormat(g.Format)
	if !ok || (g.Format == formats.NVFP4 && g.GroupSize != 16) {
		return BLMXParams{}, fmt.Errorf("kernels: no MMA-layout kernel for format %s (group %d): want nvfp4 with 16-column groups or fp8_e4m3", g.Format, g.GroupSize)
	}
	if rows < 1 || rows > 16 {
		return BLMXParams{}, fmt.Errorf("kernels: MMA-layout product of %d rows: want 1 to 16", rows)
	}
	if BLMXCopyBytes(g) >= 1<<32 {
		return BLMXParams{}, fmt.Errorf("kernels: MMA-layout matrix [%d, %d] of %d bytes: the kernels address < 4 GiB", g.N, g.K, BLMXCopyBytes(g))
	}
	if d.SMs < 1 {
		return BLMXParams{}, fmt.Errorf("kernels: MMA-layout split for a device of %d multiprocessors", d.SMs)
	}
	p := BLMXParams{DoneWord: NoWord, Rows: uint32(rows), RowsWord: NoWord, N: uint32(g.N), K: uint32(g.K), Format: fc,
		Blocks: uint32(g.Blocks), Chunks: uint32(BLMXChunks(g)), LdX: uint32(g.K), LdY: uint32(g.N), Epilogue: epilogue}
	if epilogue == EpiSwiGLU {
		if g.N%16 != 0 {
			return BLMXParams{}, fmt.Errorf("kernels: SwiGLU epilogue over %d rows: want whole blocks of 8 gate + 8 up rows", g.N)
		}
		p.LdY = uint32(g.N / 2)
	}
	// split tries the cluster sizes in order for tiles tiles, with push the first split that
	// pushes (Push 1: no cluster barrier after the products), else the first that fits.
	split := func(tiles uint32, push bool) bool {
		p.Tiles = tiles
		for _, c := range blmxOrder(fc, d) {
			if c > max(d.MaxCluster, 1) {
				continue
			}
			groups, ok := d.Groups(c)
			if ok && p.TrySplit(c, groups) && (!push || p.Push == 1) {
				return true
			}
		}
		return false
	}
	// Two tiles' activations take twice the threadgroup memory: the first cluster size that
	// fits may leave no room to push (gate_up's clusters of 2), so a split that pushes comes
	// first there; one tile keeps blmxOrder's measured first fit.
	found := rows > 8 && !d.OneTile && (split(BLMXMaxTiles, d.MaxCluster > 1 && !d.NoPush) || split(BLMXMaxTiles, false))
	if !found {
		found = split(1, false)
	}
	if !found {
		return BLMXParams{}, fmt.Errorf("kernels: MMA-layout matrix [%d, %d]: no work split fits %d bytes of threadgroup memory with clusters of at most %d", g.N, g.K, BLMXShared, max(d.MaxCluster, 1))
	}
	if d.NoPush {
		p.Push = 0
	}
	return p, nil
}

// TrySplit sets p's split to clusters of c threadgroups and groups clusters (at most Blocks),
// and Push: 1 when c > 1 and the receive area fits BLMXShared too, else 0 (a device's NoPush is
// NewBLMXParams's to apply: a split redone after it pushes again); false, p unchanged, when
// the split leaves a K part without chunks or its threadgroup memory (for p.Tiles tiles) does
// not fit BLMXShared. For NewBLMXParams, and tests and benchmarks that try other splits.
func (p *BLMXParams) TrySplit(c, groups int) bool {
	if c < 1 || c > BLMMaxClusters || int64(c) > int64(p.Chunks) {
		return false
	}
	groups = min(groups, int(p.Blocks))
	if groups < 1 {
		return false
	}
	part := ((p.Chunks+uint32(c)-1)/uint32(c) + BLMXGroup - 1) / BLMXGroup * BLMXGroup
	if uint32(c-1)*part >= p.Chunks {
		return false // a rank without chunks
	}
	sh, _ := blmxShape(p.Format, p.Blocks, p.Chunks, part, uint32(c), uint32(groups), p.Tiles)
	if sh.shared > BLMXShared {
		return false
	}
	p.Cl, p.Groups, p.PartChunks, p.Slots = uint32(c), uint32(groups), part, uint32(sh.slots)
	p.Push = 0
	if c > 1 && sh.shared+sh.recv <= BLMXShared {
		p.Push = 1
	}
	return true
}

// Validate checks the record against the rules of lithos_blmx_*: Rows 1–16; Tiles 1 or 2; N, K ≥ 1; Format
// FMT_NVFP4 or FMT_FP8; Blocks = ⌈N/16⌉ and Chunks = ⌈K/(16·k-steps per chunk)⌉ rounded up to a
// multiple of BLMXGroup, PartChunks a multiple of it; Cl 1–8 with
// every rank's part non-empty (PartChunks·Cl ≥ Chunks > PartChunks·(Cl − 1)); Groups 1 …
// Blocks; Slots at least what the split needs; the threadgroup memory within BLMXShared; the
// matrix, x and y within 32-bit offsets; the epilogue; Norm 0 or 1, Eps in (0, 1) with Norm
// and 0 without; Push 0 or 1, 1 only with Cl > 1 and its receive area within BLMXShared; the
// grid within CUDA's limits.
func (p BLMXParams) Validate() error {
	c := vcheck{rec: "BLMXParams"}
	c.done(p.DoneWord)
	if p.Rows < 1 || p.Rows > 16 {
		c.failf("Rows", "is %d, want 1 to 16 (two tiles of 8)", p.Rows)
	}
	if p.Tiles < 1 || p.Tiles > BLMXMaxTiles {
		c.failf("Tiles", "is %d, want 1 or %d (tiles of 8 rows per threadgroup)", p.Tiles, BLMXMaxTiles)
	}
	c.positive("N", p.N)
	c.positive("K", p.K)
	sh, ok := blmxShape(p.Format, p.Blocks, p.Chunks, p.PartChunks, p.Cl, p.Groups, p.Tiles)
	if !ok {
		c.failf("Format", "is %d, want 1 (FMT_NVFP4) or 2 (FMT_FP8)", p.Format)
		return c.err()
	}
	if want := (uint64(p.N) + 15) / 16; uint64(p.Blocks) != want {
		c.failf("Blocks", "is %d, want ⌈N/16⌉ = %d", p.Blocks, want)
	}
	if w := uint64(16 * sh.ks); uint64(p.Chunks) != ((uint64(p.K)+w-1)/w+BLMXGroup-1)/BLMXGroup*BLMXGroup {
		c.failf("Chunks", "is %d, want ⌈K/%d⌉ rounded up to a multiple of %d = %d", p.Chunks, w, BLMXGroup, ((uint64(p.K)+w-1)/w+BLMXGroup-1)/BLMXGroup*BLMXGroup)
	}
	if p.PartChunks%BLMXGroup != 0 {
		c.failf("PartChunks", "is %d, want a multiple of BLMXGroup = %d (a step never spans two blocks)", p.PartChunks, BLMXGroup)
	}
	c.total("Chunks", uint64(p.Blocks)*uint64(p.Chunks)*uint64(sh.cb), "the matrix bytes Blocks·Chunks·chunk bytes")
	if p.Cl < 1 || p.Cl > BLMMaxClusters {
		c.failf("Cl", "is %d, want 1 to %d (threadgroups of a cluster)", p.Cl, BLMMaxClusters)
	}
	c.positive("PartChunks", p.PartChunks)
	if p.Cl >= 1 && p.PartChunks > 0 && (uint64(p.PartChunks)*uint64(p.Cl) < uint64(p.Chunks) || uint64(p.PartChunks)*uint64(p.Cl-1) >= uint64(p.Chunks)) {
		c.failf("PartChunks", "is %d with %d parts: want every part of the %d chunks non-empty and the parts covering them", p.PartChunks, p.Cl, p.Chunks)
	}
	if p.Groups < 1 || p.Groups > p.Blocks {
		c.failf("Groups", "is %d, want 1 to Blocks = %d", p.Groups, p.Blocks)
	}
	c.total("Groups", uint64(p.Groups)*uint64(p.Blocks), "Groups·Blocks (the kernel's block ranges)")
	if uint64(p.Slots) < uint64(sh.slots) {
		c.failf("Slots", "is %d, want at least %d (the blocks one simdgroup's items touch)", p.Slots, sh.slots)
	}
	sm := int64(max(p.Tiles, 1)) * (int64(p.PartChunks)*sh.ks*512 + (BLMXThreads/32)*int64(p.Slots)*512)
	if sm > BLMXShared {
		c.failf("Slots", "with PartChunks %d gives %d bytes of threadgroup memory, more than BLMXShared = %d", p.PartChunks, sm, BLMXShared)
	}
	switch {
	case p.Push > 1:
		c.failf("Push", "is %d, want 0 or 1", p.Push)
	case p.Push == 1 && p.Cl < 2:
		c.failf("Push", "is 1 with Cl %d, want 0 without a cluster", p.Cl)
	case p.Push == 1 && sm+sh.recv > BLMXShared:
		c.failf("Push", "needs %d bytes of threadgroup memory with its receive area of %d, more than BLMXShared = %d", sm+sh.recv, sh.recv, BLMXShared)
	}
	c.total("PartChunks", uint64(sh.blocksPerCl)*uint64(p.PartChunks)*(BLMXThreads/32), "the items of a cluster·simdgroups")
	c.matrixIO(p.N, p.K, p.Rows, p.LdX, p.LdY, p.Epilogue)
	switch {
	case p.Norm > 1:
		c.failf("Norm", "is %d, want 0 (the plain product) or 1 (of RMSNorm(x))", p.Norm)
	case p.Norm == 1 && !(p.Eps > 0 && p.Eps < 1):
		c.failf("Eps", "is %g, want 0 < Eps < 1 (the RMSNorm's epsilon)", p.Eps)
	case p.Norm == 0 && p.Eps != 0:
		c.failf("Eps", "is %g without Norm, want 0", p.Eps)
	}
	if p.Cl <= BLMMaxClusters {
		c.grid(p.Grid(), [3]string{"Groups", "Rows", ""})
	}
	return c.err()
}

// BLMXKernel returns the entry point of the one-tile MMA-layout kernel for a format (nvfp4,
// fp8_e4m3): one for every row count 1–16 (BLMXParams.Tiles 1).
func BLMXKernel(f formats.Format) (string, error) { return BLMXKernelTiles(f, 1) }

// BLMXKernelTiles returns the entry point of the MMA-layout kernel for a format (nvfp4,
// fp8_e4m3) and tiles per threadgroup (BLMXParams.Tiles: 1, lithos_blmx_nvfp4; 2,
// lithos_blmx_nvfp4_t2).
func BLMXKernelTiles(f formats.Format, tiles uint32) (string, error) {
	var name string
	switch f {
	case formats.NVFP4:
		name = "lithos_blmx_nvfp4"
	case formats.FP8:
		name = "lithos_blmx_fp8"
	default:
		return "", fmt.Errorf("kernels: no MMA-layout kernel for format %s (have nvfp4, fp8_e4m3)", f)
	}
	switch tiles {
	case 1:
		return name, nil
	case BLMXMaxTiles:
		return fmt.Sprintf("%s_t%d", name, tiles), nil
	}
	return "", fmt.Errorf("kernels: no MMA-layout kernel of %d tiles per threadgroup (have 1 and %d)", tiles, BLMXMaxTiles)
}
