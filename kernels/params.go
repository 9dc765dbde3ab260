package kernels

import (
	"fmt"

	"lithos/pack/blm"
)

// Parameter records, one per op. Every record starts with DoneWord: the step-state word of the
// done flag (the kernel returns at once when it is non-zero), or NoWord. A pair X / XWord is a
// dynamic value: the kernel reads ctl[XWord] when XWord ≠ NoWord, else uses X; for row counts
// the dynamic value is capped at the fixed one (the grid is sized for the fixed one). Shapes are
// row-major; an "ld" field is the distance in elements between consecutive rows. Each record's
// Grid returns the threadgroups (CUDA blocks) in x, y, z; threads per threadgroup are the
// kernel's Threads.

// Threads per threadgroup of the kernels whose Grid depends on it (one thread per element or
// column, the templates index tg.x·THREADS + tid): the registry (kernels.go) builds those
// kernels with these constants, so Grid and Kernel.Threads cannot diverge (review item 15).
const (
	ewiseThreads    = 256
	gdnThreads      = 128
	gdnRowsPerLane  = GDNMaxKDim / gdnLanesPerColumn // GDN_KS in ops/gdn.kern: state rows per lane
	convThreads     = 256
	kvAppendThreads = 256
	gatherThreads   = 256
)

// ceilDiv is ⌈n/d⌉ for d > 0.
func ceilDiv(n, d uint32) uint32 { return (n + d - 1) / d }

// RMSNorm modes (RMSNormParams.Mode).
const (
	RMSPlain   = 0 // y = (x·r)·w                      (DSpark norms, plain weights)
	RMSOnePlus = 1 // y = (x·r)·(1 + w)                (Qwen3.5 zero-centred norms, w the raw weight)
	RMSGated   = 2 // y = (w·(x·r))·silu(z)            (the GDN gated norm, runtime/model.GatedRMSNorm)
)

// RMSNormParams: for token row r < rows and group g < Groups, the N values at x[r·LdX + g·N …]
// are normalised with r = 1/√(mean(x²) + Eps) into y[r·LdY + g·N …] (z likewise at LdZ for
// RMSGated). w holds N floats (shared by the groups). y may be x. Kernel lithos_rmsnorm,
// buffers x, w, z (any buffer when unused), y.
type RMSNormParams struct {
	DoneWord      uint32
	Rows          uint32
	RowsWord      uint32
	Groups        uint32
	N             uint32
	LdX, LdZ, LdY uint32
	Mode          uint32
	Eps           float32
}

// Grid is one threadgroup per (group, row).
func (p RMSNormParams) Grid() [3]uint32 { return [3]uint32{p.Groups, p.Rows, 1} }

// Elementwise modes (EwiseParams.Mode).
const (
	EwSwiGLU = 0 // y = silu(a)·b        (runtime/model.SwiGLU: a = gate, b = up)
	EwAdd    = 1 // y = a + b            (residual add)
)

// EwiseParams: y[r·LdY + i] = f(a[r·LdA + i], b[r·LdB + i]) for r < rows, i < N. y may alias a
// or b. Kernel lithos_ewise, buffers a, b, y.
type EwiseParams struct {
	DoneWord      uint32
	Rows          uint32
	RowsWord      uint32
	N             uint32
	LdA, LdB, LdY uint32
	Mode          uint32
}

// Grid is ⌈N/ewiseThreads⌉ × rows (one thread per element).
func (p EwiseParams) Grid() [3]uint32 { return [3]uint32{ceilDiv(p.N, ewiseThreads), p.Rows, 1} }

// BLM epilogues (BLMParams.Epilogue).
const (
	EpiStore  = 0 // y[t, n] = s_n·Σ
	EpiAdd    = 1 // y[t, n] += s_n·Σ (residual add, or the DSpark Markov bias onto base logits)
	EpiSwiGLU = 2 // interleaved gate/up (blm.GateUp): y[t, 8b + i] = silu(gate)·up, N/2 outputs
)

// BLMThreads is the threadgroup size of the BLM kernels: BLMThreads/32 simdgroups. A
// threadgroup covers BLMGroupBlocks(parts, warpBlocks) consecutive blocks of 16 rows: each
// simdgroup works on warpBlocks of them over one of parts contiguous parts of K (ops/blm.kern).
// On the tensor-core path the threadgroup splits the activations into their bf16 pieces once,
// chunk by chunk, for all its simdgroups, so that cost is shared by BLMGroupBlocks blocks.
const BLMThreads = 128

// BLMRing is the depth of the BLM kernels' weight ring on the tensor-core path (CUDA): each
// simdgroup keeps BLMRing − 1 quad-steps of weights in flight in threadgroup memory through
// cp.async, instead of one in registers (docs/performance.md §3.3b). The source defines
// BLM_RING from it; 0 selects the register prefetch.
const BLMRing = 2

// The ring's slot index is (u − q0) & (BLMRing − 1): a power of two (compile-time check).
var _ [0]struct{} = [BLMRing & (BLMRing - 1)]struct{}{}

// BLMRingBytes is the dynamic threadgroup memory of a BLM kernel's ring: per simdgroup and slot,
// four 16-byte unit words and one 16-byte word of block-scale pairs per lane.
const BLMRingBytes = BLMThreads / 32 * BLMRing * 5 * 32 * 16

// BLMMaxWarpBlocks is the most 16-row blocks one simdgroup of a BLM kernel works on (the
// kernels keep that many accumulator sets and prefetched unit words in registers).
const BLMMaxWarpBlocks = 2

// BLMWaveGroups is the threadgroup count NewBLMParams wants at least before it gives a
// threadgroup more blocks: one per multiprocessor of the H200 (132). With the activations'
// staging overlapped with the MMAs (docs/performance.md §3.3d), two blocks per simdgroup beat
// one at 8 rows on the 320–384-block matrices (down, out_proj, in_proj_z: +7–10 %, at −4–10 %
// for one row), so those now take K in 4 parts × 2 blocks (160–192 threadgroups); it was
// 2 · 132 before.
const BLMWaveGroups = 132

// BLMGroupBlocks returns the blocks of 16 rows one BLM threadgroup (with BLMParams.Clusters >
// 1: one cluster, each threadgroup over its own K parts) covers: (BLMThreads/32/parts)
// simdgroups per part, each with warpBlocks blocks.
func BLMGroupBlocks(parts, warpBlocks uint32) uint32 { return BLMThreads / 32 / parts * warpBlocks }

// BLMSplit returns the work split NewBLMParams uses for a matrix of blocks blocks. A
// threadgroup stages and splits the activations of all of K once for its blocks, so the split
// gives a threadgroup as many blocks as still leaves BLMWaveGroups threadgroups: K whole and 8
// blocks (two per simdgroup) for the wide matrices (the MLP's gate_up, the LM head), else K in 4
// parts with 2 blocks (the 320–1024-block GDN in_proj, attention qkv, down, out_proj, o_proj),
// else K in 4 parts and 1 block (the smallest, e.g. in_proj_ab). Measured on the H200 at the
// 27B's shapes, docs/performance.md §3.3d. The split depends on the shape only, never on the row
// count, so a decode step and a verify pass sum in the same order (bit-identical rows).
func BLMSplit(blocks int64) (parts, warpBlocks uint32) {
	for _, s := range [][2]uint32{{1, 2}, {4, 2}} {
		per := int64(BLMGroupBlocks(s[0], s[1]))
		if (blocks+per-1)/per >= BLMWaveGroups {
			return s[0], s[1]
		}
	}
	return 4, 1
}

// BLMClusterSplit returns the work split of a matrix of blocks blocks on a device with
// thread-block clusters (CUDA sm_90; BLMParams.WithClusters): K split across the Clusters
// threadgroups of a cluster as well as into Parts inside each, so that a threadgroup can keep
// several blocks (8 with 1×2, 4 with 2×2; they share its activation staging) and the grid
// still fills the multiprocessors.
// By blocks: ≥ 4000 (the LM head) 1×2, 2 per cluster; ≥ 1100 (the MLP gate_up) 1×2, 4; ≥ 800
// (GDN in_proj_qkvz, attention qkv) 2×2, 2; ≥ 500 1×2, 4; ≥ 64 (down, out_proj, o_proj,
// in_proj_z) 1×2, 8; else (in_proj_ab: 6 blocks) 4×1, 8. Chosen from every split × cluster size
// 1, 2, 4, 8 at 1 and 8 rows on the H200 (docs/performance.md §3.3e: the split best at 8 rows
// that is also within 5 % of the best at 1 row — except in_proj_z alone, 384 blocks, which the
// ≥ 64 rule gives 1×2, 8: 0.378 of the floor at one row against 0.446 for 4×2, 2; the
// 27B's runtime multiplies it fused with in_proj_qkv, 1024 blocks). Like BLMSplit it depends on
// the shape only.
func BLMClusterSplit(blocks int64) (parts, warpBlocks, clusters uint32) {
	switch {
	case blocks >= 4000:
		return 1, 2, 2
	case blocks >= 1100:
		return 1, 2, 4
	case blocks >= 800:
		return 2, 2, 2
	case blocks >= 500:
		return 1, 2, 4
	case blocks >= 64:
		return 1, 2, 8
	}
	return 4, 1, 8
}

// WithClusters returns p with the work split of BLMClusterSplit: for a device that launches
// thread-block clusters (the record's ClusterDims); Metal takes NewBLMParams' split as it is.
// A matrix narrower than BLMClusterMinK keeps NewBLMParams' split: its K parts would be a few
// quad-steps each (the DSpark Markov W2, K = 256: 57.6 µs per 1-row product in clusters, 30.2
// without, docs/performance.md §3.3e).
func (p BLMParams) WithClusters() BLMParams {
	if p.K < BLMClusterMinK {
		return p
	}
	p.Parts, p.WarpBlocks, p.Clusters = BLMClusterSplit(int64(p.Blocks))
	return p
}

// BLMClusterMinK is the narrowest K (columns) WithClusters splits across a cluster. A variable
// only so that tests can run small models (the golden models' K = 256) in clusters; change it
// only in tests, before any record is made.
var BLMClusterMinK uint32 = 1024

// BLMParams: the BLM matrix × rows product (docs/blm.md §6; runtime/backend/cpu.Packed):
// y[t, n] = scales[n]·Σ_k W[n, k]·x[t·LdX + k] for t < rows, n < N, over the packed bytes w of
// docs/blm.md §2/§5 (geometry fields as blm.Geometry: Lanes, UnitWords = U/16, Stripe = W,
// Payload = P, Group = G or 0). scales is the row-scale table (one float per packed row).
// Kernel BLMKernel(format, rows), buffers w (u8), scales, x, y. A threadgroup (a cluster of
// Clusters threadgroups) covers BLMGroupBlocks(Parts, WarpBlocks) blocks; K is split into
// Parts·Clusters contiguous parts (Parts, 1, 2 or 4, per threadgroup) whose float32 partial
// sums are added in order. Lanes load 16 bytes each, four or all 32 lanes of one unit word run
// at a time (64 or 512 contiguous bytes); FP32 accumulation.
type BLMParams struct {
	DoneWord   uint32
	Rows       uint32
	RowsWord   uint32
	N          uint32
	K          uint32
	Lanes      uint32
	UnitWords  uint32
	Stripe     uint32
	Payload    uint32
	Group      uint32
	Blocks     uint32
	LdX, LdY   uint32
	Epilogue   uint32
	Parts      uint32 // K split into this many parts per threadgroup: 1, 2 or 4
	WarpBlocks uint32 // blocks per simdgroup: 1 or 2 (≤ BLMMaxWarpBlocks)
	// Clusters: threadgroups of a thread-block cluster (CUDA sm_90) that split K between them
	// for the same blocks, Parts parts each, and add their partial sums in rank order through
	// distributed shared memory; launched with cluster dimensions ClusterDims(). 0 or 1 = no
	// cluster (at most BLMMaxClusters); kernels without clusters (Metal, CUDA before sm_90)
	// compute a record with more as if it had 1, on the grid's first threadgroups only.
	Clusters uint32
	// Layout is how w holds the matrix: BLMLayoutBLM (docs/blm.md) or BLMLayoutFragment (the
	// copy BLMFragmentMajor makes, which only the tensor-core path with the weight ring reads;
	// NVFP4 with stripes of whole 16-column groups only). A kernel that cannot read the record's
	// layout writes nothing and reports GuardBLMLayout.
	Layout uint32
}

// BLMParams.Layout values.
const (
	BLMLayoutBLM      = 0 // the BLM layout of docs/blm.md §5 (the bundle's)
	BLMLayoutFragment = 1 // fragment-major: BLMFragmentMajor
)

// BLMMaxClusters is the largest BLMParams.Clusters: the portable cluster size of CUDA.
const BLMMaxClusters = 8

// Grid is ⌈Blocks / BLMGroupBlocks(Parts, WarpBlocks)⌉ · Clusters threadgroups (Clusters 0
// counts as 1); cluster c is threadgroups c·Clusters … c·Clusters + Clusters − 1.
func (p BLMParams) Grid() [3]uint32 {
	per := BLMGroupBlocks(p.Parts, p.WarpBlocks)
	return [3]uint32{(p.Blocks + per - 1) / per * max(p.Clusters, 1), 1, 1}
}

// ClusterDims is the thread-block cluster shape of the launch: (Clusters, 1, 1) (Clusters 0
// counts as 1).
func (p BLMParams) ClusterDims() [3]uint32 { return [3]uint32{max(p.Clusters, 1), 1, 1} }

// NewBLMParams returns the record of matrix g for rows activation rows (fixed; set RowsWord for
// a dynamic count), contiguous x and y (LdX = K, LdY = N, or N/2 for EpiSwiGLU), no done word,
// the work split of BLMSplit. The matrix must be < 4 GiB (offsets are 32-bit) in a format with a kernel
// (nvfp4, fp8_e4m3, bf16).
func NewBLMParams(g blm.Geometry, rows int, epilogue uint32) (BLMParams, error) {
	if err := g.Check(); err != nil {
		return BLMParams{}, err
	}
	if _, ok := blmFormatCode(g.Format); !ok {
		return BLMParams{}, fmt.Errorf("kernels: no BLM kernel for format %s", g.Format)
	}
	if g.TotalBytes >= 1<<32 {
		return BLMParams{}, fmt.Errorf("kernels: BLM matrix [%d, %d] of %d bytes: the kernels address < 4 GiB", g.N, g.K, g.TotalBytes)
	}
	if maxRows := BLMRowVariants[len(BLMRowVariants)-1]; rows < 1 || rows > maxRows {
		return BLMParams{}, fmt.Errorf("kernels: BLM product of %d rows: want 1 to %d", rows, maxRows)
	}
	p := BLMParams{DoneWord: NoWord, Rows: uint32(rows), RowsWord: NoWord, N: uint32(g.N), K: uint32(g.K),
		Lanes: uint32(g.Lanes), UnitWords: uint32(g.UnitBytes / blm.WordBytes), Stripe: uint32(g.Stripe),
		Payload: uint32(g.PayloadBytes), Group: uint32(g.GroupSize), Blocks: uint32(g.Blocks),
		LdX: uint32(g.K), LdY: uint32(g.N), Epilogue: epilogue}
	p.Parts, p.WarpBlocks = BLMSplit(g.Blocks)
	p.Clusters = 1
	if epilogue == EpiSwiGLU {
		if g.N%16 != 0 {
			return BLMParams{}, fmt.Errorf("kernels: SwiGLU epilogue over %d rows: want whole blocks of 8 gate + 8 up rows", g.N)
		}
		p.LdY = uint32(g.N / 2)
	}
	return p, nil
}

// ArgmaxParams: for row r < rows of x ([rows, Ld], N values each), out[OutOff + r] = the index
// of the largest value, the lowest index on ties, NaN skipped, 0 when no value is > −Inf
// (runtime/model.Argmax). Two kernels: lithos_argmax_partial (buffers x, part_v, part_i) writes
// the best of each Chunk values to part_v/part_i[r·Parts + c]; lithos_argmax_final (buffers
// part_v, part_i, out) merges a row's Parts partials in order. Parts = ⌈N/Chunk⌉.
type ArgmaxParams struct {
	DoneWord uint32
	Rows     uint32
	RowsWord uint32
	N        uint32
	Ld       uint32
	Chunk    uint32
	Parts    uint32
	OutOff   uint32
}

// NewArgmaxParams returns the record for rows rows of n values (contiguous), chunks of 4096.
func NewArgmaxParams(rows, n int) ArgmaxParams {
	const chunk = 4096
	return ArgmaxParams{DoneWord: NoWord, Rows: uint32(rows), RowsWord: NoWord, N: uint32(n), Ld: uint32(n),
		Chunk: chunk, Parts: uint32((n + chunk - 1) / chunk)}
}

// GridPartial is Parts × rows threadgroups (lithos_argmax_partial).
func (p ArgmaxParams) GridPartial() [3]uint32 { return [3]uint32{p.Parts, p.Rows, 1} }

// GridFinal is one threadgroup per row (lithos_argmax_final).
func (p ArgmaxParams) GridFinal() [3]uint32 { return [3]uint32{1, p.Rows, 1} }

// GDNMaxKDim is the largest key head dimension lithos_gdn takes: gdnLanesPerColumn lanes of
// gdnRowsPerLane (ops/gdn.kern GDN_KS) state rows per column. Hosts refuse larger models before
// any work.
const GDNMaxKDim = 128

// gdnLanesPerColumn: the lanes that share a state column in ops/gdn.kern (GDN_LANES: a power of
// two, 4 … 32; with 2 the staging's entries do not divide among the threads). On the H200
// (docs/performance.md §3.3p, §8.14) 4 and 8 give the same verify pass (9.51–9.52 against
// 9.50 ms), 4 a plain decode step 0.6 % faster (114.0–114.2 against 113.4–113.5 tok/s, two
// interleaved runs each) and 16 a slower verify pass; the GPU suite and the first-use
// self-check ran with 4.
const gdnLanesPerColumn = 4

// GDNParams: the gated delta rule, recurrent form (runtime/model.GDNRecurrent), on a two-slot
// state buffer [2, VHeads, KDim, VDim] float32. The read slot is (dyn(Slot, SlotWord) & 1) ^
// SlotXor, the write slot the other: a verify or prefill pass reads slot Step&1 (SlotWord = the
// Step word, SlotXor 0); the commit pass after lithos_step advanced Step replays the committed
// rows (RowsWord = the Committed word) from the same read slot with SlotXor 1, WriteOut 0. q, k:
// [rows, LdQK] with KHeads·KDim values (L2-normalised, q scaled by 1/√d_k); v: [rows, LdV];
// beta, g: [rows, LdGate] (g = log decay); out: [rows, LdOut]. 0 rows: nothing happens (the CPU
// function copies the state). KDim ≤ GDNMaxKDim: the kernel keeps a column's rows in the
// registers of gdnLanesPerColumn lanes (ops/gdn.kern). Gates 1 computes β and g itself
// (runtime/model.GDNGates: β = σ(gb), g = neg_a·softplus(ga + dt_bias), ga and gb [rows, LdAB],
// one value per value head) and writes them to beta and g for the commit replay (which then
// reads them: Gates 0); with Gates 0 ga, gb, neg_a and dt_bias are not read. Kernel lithos_gdn,
// buffers q, k, v, beta, g, state, out, ga, gb, neg_a, dt_bias.
//
// Layers > 1 runs the same rule over Layers layers in one launch (grid z): layer l reads q, k
// and v LayerQKV floats, beta and g LayerGate floats, and reads and writes its state
// LayerState floats (≥ the state's 2·VHeads·KDim·VDim) past layer 0's — the commit replay of
// every GDN layer of a round at once, where one launch per layer paid its fixed cost 48 times
// (docs/performance.md §3.3v). Only with WriteOut 0 and Gates 0 (the replay's form); with one
// layer (Layers 0 or 1) the three strides are 0.
type GDNParams struct {
	DoneWord                                uint32
	Rows                                    uint32
	RowsWord                                uint32
	KHeads, VHeads                          uint32
	KDim, VDim                              uint32
	Slot, SlotWord, SlotXor                 uint32
	WriteOut                                uint32
	LdQK, LdV, LdGate, LdOut                uint32
	Gates, LdAB                             uint32
	Layers, LayerQKV, LayerGate, LayerState uint32
}

// Grid is one threadgroup per (value head, gdnThreads/gdnLanesPerColumn = 32 state columns,
// layer), each column over gdnLanesPerColumn lanes (ops/gdn.kern GDN_CW).
func (p GDNParams) Grid() [3]uint32 {
	return [3]uint32{p.VHeads, ceilDiv(p.VDim, gdnThreads/gdnLanesPerColumn), max(p.Layers, 1)}
}

// ConvParams: causal depthwise conv1d + SiLU (runtime/model.CausalConv1D) with the conv state
// in two slots [2, KernelSize−1, Channels] (slots as GDNParams). x: [rows, LdX] (Channels values),
// w: [Channels, KernelSize], y: [rows, LdY] (written when WriteOut ≠ 0). Kernel lithos_conv,
// buffers x, w, state, y, then the in_proj_ab product's ax, aw, anw, ars, ay (below).
//
// NormGroups > 0 (with WriteOut) also L2-normalizes each row's first NormGroups groups of
// NormD outputs in the same launch, as lithos_l2norm would after it (L2NormParams over y with
// Groups = NormGroups, D = NormD, Eps = NormEps, Post = NormPost, PostGroups =
// NormPostGroups: the GDN queries and keys), bit for bit: each group's Σy² is summed in the
// same order (a warp sum per 32 channels, then the group's warps in order; lithos_l2norm's 128
// threads hold one value each up to 128 channels). NormD is 32, 64 or 128, NormGroups·NormD a
// multiple of convThreads (the threadgroups that normalize are full) and at most Channels; the
// backends fall back to lithos_l2norm otherwise.
//
// ABOut > 0 also computes, in threadgroups after the conv's, the GDN layer's in_proj_ab
// product: ay[r, o] = (Σ_k x̂[r, k]·aw[o, k])·ars[o] for o < ABOut, r < rows, f32 sums, with
// aw the BF16 weights row-major [ABOut, ABIn] (a copy of the packed matrix's stored rows:
// gpu.Target), ars [ABOut] their tensor scales (the packed matrix's row-scale table, float32),
// ax [rows, ABLdX] (ABIn values; ABIn and ABLdX even), ay [rows, ABLdY] (ABOut values). x̂ is
// ax, or with ABNorm 1 RMSNorm(ax) with weights anw [ABIn] and epsilon ABEps
// (runtime/model.RMSNorm; its scale 1/√(Σx²/ABIn + ABEps) applied to the sum: Σ (x·w_n)·w
// times it). The product does not depend on the conv: the launch runs both at once (one launch
// fewer per GDN layer, and with ABNorm two: the input norm then folded into in_proj_zqkv;
// docs/performance.md §8.11). Buffers ax, aw, anw, ars, ay (any buffers when ABOut is 0).
//
// Layers > 1 runs the conv over Layers layers in one launch (grid z): layer l reads x
// LayerX floats and reads and writes its state LayerState floats (≥ the state's
// 2·(KernelSize−1)·Channels) past layer 0's — the commit replay of every GDN layer of a round
// at once (GDNParams.Layers). Only with WriteOut 0, NormGroups 0 and ABOut 0 (the replay's
// form, which writes the state alone and so reads no weights: w may be any buffer); with one
// layer (Layers 0 or 1) both strides are 0.
type ConvParams struct {
	DoneWord                uint32
	Rows                    uint32
	RowsWord                uint32
	Channels, KernelSize    uint32
	Slot, SlotWord, SlotXor uint32
	WriteOut                uint32
	LdX, LdY                uint32
	NormGroups, NormD       uint32
	NormPostGroups          uint32
	NormEps, NormPost       float32
	ABOut, ABIn             uint32
	ABLdX, ABLdY            uint32
	ABNorm                  uint32
	ABEps                   float32
	Layers                  uint32
	LayerX, LayerState      uint32
}

// ConvMaxKernel is the largest KernelSize lithos_conv takes (CONV_KMAX: a thread keeps the
// taps and each chunk's window of inputs in registers; the Qwen3.5 configs have 4). Hosts refuse
// larger models before any work.
const ConvMaxKernel = 8

// convABOut is the in_proj_ab outputs per threadgroup of lithos_conv (CONV_AB_OUT).
const convABOut = 4

// Grid is one thread per channel, ⌈Channels/convThreads⌉ threadgroups, then
// ⌈ABOut/4⌉ threadgroups of the in_proj_ab product (4 outputs each); Layers of them (z).
func (p ConvParams) Grid() [3]uint32 {
	return [3]uint32{ceilDiv(p.Channels, convThreads) + ceilDiv(p.ABOut, convABOut), 1, max(p.Layers, 1)}
}

// AttnParams: GQA attention over the KV cache (runtime/model.Attend), causal unless Block: row
// r < rows at position Pos + r (PosWord: the Position word) attends keys 0 … Pos + r of the
// caches kc, vc ([capacity, LdKV], head kvh at kvh·HeadDim), query head h reading KV head
// h/(Heads/KVHeads), scores scaled by Scale. The keys are split in partitions of Part (≤ 128)
// keys; Parts is the partitions the scratch holds (⌈(the largest Pos + rows)/Part⌉; with Block
// ⌈(the largest Pos + 1)/Part⌉). lithos_attn_partial (buffers
// q [rows, LdQ], kc, vc, pm, pl [rows·Heads·Parts], po [rows·Heads·Parts·HeadDim]) then
// lithos_attn_merge (buffers pm, pl, po, gate, out [rows, LdO]), the same record (caches of
// BF16: lithos_attn_partial_bf16, AttnKernels). Block 1 makes the
// rows a non-causal block: every row attends keys 0 … Pos (the DSpark drafter's block, whose
// rows all see the context and the whole block: runtime/draft); each row's output is then
// bit for bit a 1-row launch's at the same Pos.
type AttnParams struct {
	DoneWord                uint32
	Rows                    uint32
	RowsWord                uint32
	Pos, PosWord            uint32
	Heads, KVHeads, HeadDim uint32
	LdQ, LdO, LdKV          uint32
	Part, Parts             uint32
	Scale                   float32
	Block                   uint32
	// Gate 1: lithos_attn_merge multiplies its outputs by σ(gate[r·LdG + h·GateStride + i])
	// (runtime/model.SigmoidGate); Gate 0 reads no gate (the buffer may be any, out included).
	Gate, LdG, GateStride uint32
}

// AttnKernels returns the entry points of the attention layer's q/k preparation (AttnPrepParams)
// and partials (AttnParams) for its KV caches: float32 (lithos_attn_prep, lithos_attn_partial),
// or with bf16 BF16 caches (…_bf16: u16 elements, each key and value rounded to nearest even as
// it is written, widened exactly as it is read; half the bytes per cached position). The merge,
// lithos_attn_merge, reads only the partials and serves both.
func AttnKernels(bf16 bool) (prep, partial string) {
	if bf16 {
		return "lithos_attn_prep_bf16", "lithos_attn_partial_bf16"
	}
	return "lithos_attn_prep", "lithos_attn_partial"
}

// attnQueries is the queries one lithos_attn_partial threadgroup takes (ATTN_QS): the
// (row, head) pairs of one KV head, which share its keys and values. 16 of the 27B's 6·8 of a
// verify pass: each partition's keys and values are read 3 times, not 48 (docs/performance.md
// §3.3aa).
const attnQueries = 16

// AttnSlices is the threadgroups per KV head and partition of lithos_attn_partial:
// ⌈(Heads/KVHeads)·Rows / 16⌉, 16 queries (row, head) each.
func (p AttnParams) AttnSlices() uint32 {
	if p.KVHeads == 0 {
		return 0
	}
	return ceilDiv(p.Heads/p.KVHeads*p.Rows, attnQueries)
}

// GridPartial is (KVHeads·AttnSlices, 1, Parts); slices past the dynamic rows' queries and
// partitions past their rows' last key return at once.
func (p AttnParams) GridPartial() [3]uint32 {
	return [3]uint32{p.KVHeads * p.AttnSlices(), 1, p.Parts}
}

// GridMerge is (Heads, rows, 1).
func (p AttnParams) GridMerge() [3]uint32 { return [3]uint32{p.Heads, p.Rows, 1} }

// KVAppendParams: kc[(Pos + r)·LdC + i] = k[r·LdK + i], vc likewise, i < Width. The caches
// hold Capacity rows: positions past them are the kernel's guard (GuardKVAppend, validate.go).
// Kernel lithos_kv_append, buffers k, v, kc, vc.
type KVAppendParams struct {
	DoneWord      uint32
	Rows          uint32
	RowsWord      uint32
	Pos, PosWord  uint32
	Width         uint32
	LdK, LdV, LdC uint32
	Capacity      uint32 // rows of kc and vc
}

// Grid is ⌈Width/kvAppendThreads⌉ × rows (one thread per element).
func (p KVAppendParams) Grid() [3]uint32 {
	return [3]uint32{ceilDiv(p.Width, kvAppendThreads), p.Rows, 1}
}

// AttnPrepParams: an attention layer's q/k preparation in one launch (what lithos_rmsnorm
// twice, a RoPE launch twice and lithos_kv_append did): row r < rows of x ([rows, LdX], the qkv
// product's output) at position Pos + r (PosWord: the Position word). Query head h < Heads, the
// HeadDim values at x[r·LdX + QOff + h·QStride …] (QStride 2·HeadDim where the gate heads
// interleave, runtime/model), is RMSNormed (weights qw [HeadDim], used as stored: RMSPlain, Eps)
// and rotated by partial NeoX RoPE (runtime/model.Rope: pairs (i, i + RotDim/2), angle
// float32(pos)·inv_freq[i], as RopeScaledParams with Scale 1) into q[r·LdQ + h·HeadDim …]; key head kh < KVHeads at
// x[r·LdX + KOff + kh·HeadDim …] likewise (weights kw) into kc[(Pos + r)·LdC + kh·HeadDim …],
// and value head kh at x[r·LdX + VOff + kh·HeadDim …] is copied into vc at the same place. The
// caches hold Capacity rows: positions past them are the kernel's guard (GuardKVAppend).
// Kernel lithos_attn_prep, buffers x, qw, kw, inv_freq (RotDim/2 floats), q, kc, vc (float32;
// lithos_attn_prep_bf16 writes BF16 caches, AttnKernels).
type AttnPrepParams struct {
	DoneWord                        uint32
	Rows                            uint32
	RowsWord                        uint32
	Pos, PosWord                    uint32
	Heads, KVHeads, HeadDim, RotDim uint32
	LdX, QOff, QStride, KOff, VOff  uint32
	LdQ, LdC                        uint32
	Capacity                        uint32 // rows of kc and vc
	Eps                             float32
}

// attnPrepThreads is lithos_attn_prep's threadgroup and attnPrepReg the values each thread
// holds (its PREP_REG); a head holds at most AttnPrepMaxHeadDim of them (ops/attn_prep.kern).
const (
	attnPrepThreads    = 128
	attnPrepReg        = 4
	AttnPrepMaxHeadDim = attnPrepReg * attnPrepThreads
)

// Grid is one threadgroup per (head, row): (Heads + KVHeads) × rows.
func (p AttnPrepParams) Grid() [3]uint32 { return [3]uint32{p.Heads + p.KVHeads, p.Rows, 1} }

// GatherParams: y[r·LdY + i] = table[ids[IdsOff + r], i] for i < Width, the table [Vocab,
// Width] of DType 0 (f32) or 1 (bf16), little-endian; ids outside [0, Vocab) give zeros. ids may
// be ctl (IdsOff = the first Pending word: the step's tokens). Kernel lithos_gather, buffers
// ids (i32), table (u8), y.
type GatherParams struct {
	DoneWord     uint32
	Rows         uint32
	RowsWord     uint32
	Width, Vocab uint32
	IdsOff       uint32
	DType        uint32
	LdY          uint32
}

// Grid is ⌈Width/gatherThreads⌉ × rows (one thread per element).
func (p GatherParams) Grid() [3]uint32 { return [3]uint32{ceilDiv(p.Width, gatherThreads), p.Rows, 1} }

// L2NormParams: each group of D values at x[r·Ld + g·D …] becomes (x/√(Σx² + Eps))·Post for
// g < PostGroups, (x/√(Σx² + Eps))·1 for the others, in place (runtime/model.L2Normalize; the
// GDN layers normalize their queries with Post = 1/√d_k and the keys that follow them with 1 in
// one launch). Kernel lithos_l2norm, buffer x.
type L2NormParams struct {
	DoneWord   uint32
	Rows       uint32
	RowsWord   uint32
	Groups, D  uint32
	Ld         uint32
	Eps, Post  float32
	PostGroups uint32
}

// Grid is one threadgroup per (group, row).
func (p L2NormParams) Grid() [3]uint32 { return [3]uint32{p.Groups, p.Rows, 1} }

// Step modes (StepParams.Mode).
const (
	StepBegin   = 0 // decode round: Rows = min(1 + Block, Capacity − Position), Pending[0] = Anchor; error 2 when full
	StepAccept  = 1 // greedy accept scan of the verified rows, ring pushes, commit (Position, Step, Anchor)
	StepPrefill = 2 // a prefill chunk: commit Rows positions; when PrefillLeft = 0 push targets[0]
)

// StepParams: the control kernel lithos_step (one thread), buffers targets (i32: the target's
// token per verified row, e.g. lithos_argmax_final's out), eos (i32 [EOSCount]), ring (u64
// [RingCap]). DoneWord must be NoWord (the kernel reads the done word W* itself: an accept step
// that finds Done set zeroes Committed, so a commit pass after it replays nothing). The W*
// fields are the word indices of the StepState fields (runtime/backend.StepState's binary
// layout). StepAccept, as the CPU session's greedy round (runtime/backend/cpu): with
// L = Rows − 1 drafts in Pending[1…L], the scan takes targets[k] while it equals draft k (a
// accepted) plus the token after them, pushes them in order (stopping after an EOS, at StopAt,
// or on a full ring: error 1), then Accepted = a, Committed = c (tokens pushed) and, when c > 0,
// Position += c, Step += 1, Anchor = the last token pushed.
type StepParams struct {
	DoneWord                uint32
	Mode                    uint32
	Capacity, Block         uint32
	RingCap, EOSCount       uint32
	WStep, WPosition, WRows uint32
	WPending, WAnchor       uint32
	WAccepted, WCommitted   uint32
	WPrefillLeft            uint32
	WDone, WError           uint32
	WRingHead, WRingTail    uint32
	WStopAt                 uint32
}

// Grid is one threadgroup.
func (p StepParams) Grid() [3]uint32 { return [3]uint32{1, 1, 1} }
