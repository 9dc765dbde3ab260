package kernels

import (
	"errors"
	"fmt"
	"math"
)

// Bounds of the kernels (review item 12). Two layers:
//
//   - Validate, on every parameter record type: the static fields that would make a kernel read
//     or write out of bounds, divide by zero or loop wrongly (zero sizes, a partition of more
//     than 128 keys, partitions that do not cover a fixed position, a kernel size of 0, a
//     record of a control kernel without its step-state words, an element or byte index that
//     wraps the kernels' 32-bit index arithmetic, a grid past CUDA's limits). A program builder
//     calls it on every record before recording; the error names the record type, the field
//     and the rule.
//   - Guards in the kernels, for the dynamic values read from the step state at run time
//     (positions, row counts, draft lengths): out of range, the kernel touches no buffer, writes
//     the Guard* code below to the step state's Error word and 1 to its Done word, and returns;
//     every later launch whose record has the Done word returns at once, and the host reads the
//     code. The control kernels (lithos_step, lithos_round) write their WError / WDone words;
//     the other kernels write ctl[DoneWord + 1] and ctl[DoneWord] (runtime/backend.StepState
//     keeps Error right after Done; kernels/validate_test.go checks that layout). A record
//     with DoneWord = NoWord has nowhere to report: its guard only returns. Two guards are about
//     the launch rather than the step state: a BLM kernel launched in clusters of another size
//     than its record's Clusters (GuardBLMCluster), given a weight layout it cannot read
//     (GuardBLMLayout), or an MMA-layout kernel given a record of other tiles than its own
//     (GuardBLMXTiles).
//
// The index rule: the kernels compute element offsets in u32 (r·ld + column), so for every
// buffer the largest offset, (rows − 1)·ld + width − 1, must be < 2³²; byte offsets likewise
// where a kernel indexes bytes (the gather table). Grid limits: CUDA C Programming Guide,
// "Features and Technical Specifications" (grid x ≤ 2³¹ − 1, y and z ≤ 65535).

// Error codes the kernels' guards write to the step state's Error word, one per kernel and
// rule. They start at 16, clear of runtime/backend's session codes (ErrRingOverflow 1,
// ErrContextFull 2, which lithos_step and lithos_round also write). The kernels use the same
// values (GUARD_* in ops/common.kern; TestGuardCodesMatchKernels).
const (
	// GuardStepRows: lithos_step StepAccept found the Rows word 0 or above 1 + Block (the scan
	// would read drafts past Pending and targets past the verified rows).
	GuardStepRows = 16
	// GuardStepPosition: lithos_step StepAccept or StepPrefill found Position + Rows above
	// Capacity (the commit would move Position past the context).
	GuardStepPosition = 17
	// GuardRoundDrafts: lithos_round RoundAccept found the DraftLen word above Block (the scan
	// and the stats would run past the block).
	GuardRoundDrafts = 18
	// GuardRoundPosition: lithos_round RoundAccept found Position + 1 + DraftLen (a single
	// row: Position + 1) above Capacity.
	GuardRoundPosition = 19
	// GuardAttnPartial: lithos_attn_partial found the last row's position, Pos + rows − 1, at
	// or past Parts·Part (keys the partitions do not hold), or Part outside [1, 128].
	GuardAttnPartial = 20
	// GuardAttnMerge: lithos_attn_merge found the same (it would merge fewer partitions than
	// the row's keys fill).
	GuardAttnMerge = 21
	// GuardKVAppend: lithos_kv_append or lithos_attn_prep found the rows' positions, Pos …
	// Pos + rows − 1, past the caches' Capacity rows.
	GuardKVAppend = 22
	// GuardBLMCluster: a BLM kernel was launched in clusters of another size than its
	// record's Clusters (rec.ClusterDims()), so its threadgroups could not add their K parts:
	// it writes nothing.
	GuardBLMCluster = 23
	// GuardBLMLayout: a BLM kernel was given a record whose Layout it cannot read (the
	// fragment-major copy on the scalar path, without the weight ring, or for NVFP4 stripes
	// that start inside a group): it writes nothing.
	GuardBLMLayout = 24
	// GuardBLMXTiles: an MMA-layout kernel was given a record whose Tiles is not the tiles
	// per threadgroup it was built for (lithos_blmx_* 1, lithos_blmx_*_t2 2: BLMXKernelTiles):
	// it writes nothing.
	GuardBLMXTiles = 25
)

// maxGridYZ and maxGridX are CUDA's grid limits (stricter than Metal's).
const (
	maxGridX  = 1<<31 - 1
	maxGridYZ = 65535
)

// span32 is the number of values a u32 index reaches: 2³².
const span32 = uint64(1) << 32

// vcheck collects the broken rules of one record.
type vcheck struct {
	rec  string
	errs []error
}

func (c *vcheck) failf(field, format string, a ...any) {
	c.errs = append(c.errs, fmt.Errorf("kernels: %s.%s: %s", c.rec, field, fmt.Sprintf(format, a...)))
}

func (c *vcheck) err() error { return errors.Join(c.errs...) }

// positive: a size the kernel divides by, loops to or sizes the grid with.
func (c *vcheck) positive(field string, v uint32) {
	if v == 0 {
		c.failf(field, "is 0, want ≥ 1")
	}
}

// atMost: an enumeration or a bounded count.
func (c *vcheck) atMost(field string, v, max uint32, what string) {
	if v > max {
		c.failf(field, "is %d, want ≤ %d (%s)", v, max, what)
	}
}

// done: DoneWord is NoWord or leaves room for the Error word after it (the guards write
// ctl[DoneWord + 1]).
func (c *vcheck) done(w uint32) {
	if w != NoWord && w >= NoWord-1 {
		c.failf("DoneWord", "is %#x: want NoWord or a word index below %#x (the guards write the Error word DoneWord + 1)", w, uint32(NoWord-1))
	}
}

// noDone: the control kernels read their done word themselves (W* fields).
func (c *vcheck) noDone(w uint32) {
	if w != NoWord {
		c.failf("DoneWord", "is %d, want NoWord (the control kernel reads WDone itself)", w)
	}
}

// word: a step-state word the kernel reads or writes unconditionally.
func (c *vcheck) word(field string, w uint32) {
	if w == NoWord {
		c.failf(field, "is NoWord: the kernel reads and writes this step-state word, want its index")
	}
}

// matrixIO checks the epilogue and the activation and output strides of a matrix product of N
// rows × K columns over rows tokens (BLMParams, BLMXParams): EpiStore, EpiAdd or EpiSwiGLU (N a
// multiple of 16: whole blocks of 8 gate + 8 up rows, N/2 outputs), x and y within their
// 32-bit spans and y's rows apart.
func (c *vcheck) matrixIO(n, k, rows, ldx, ldy, epilogue uint32) {
	out := uint64(n)
	switch epilogue {
	case EpiStore, EpiAdd:
	case EpiSwiGLU:
		if n%16 != 0 {
			c.failf("N", "is %d with the SwiGLU epilogue: want whole blocks of 8 gate + 8 up rows (a multiple of 16)", n)
		}
		out /= 2
	default:
		c.failf("Epilogue", "is %d, want EpiStore, EpiAdd or EpiSwiGLU", epilogue)
	}
	c.span("LdX", uint64(rows), uint64(ldx), uint64(k), "(Rows−1)·LdX + K")
	c.span("LdY", uint64(rows), uint64(ldy), out, "(Rows−1)·LdY + outputs")
	c.apart("LdY", rows, uint64(ldy), out, "the outputs per row")
}

// spanOf is the elements a [rows, ld] buffer whose rows hold width values spans, (rows −
// 1)·ld + width (0 without rows or width).
func spanOf(rows, ld, width uint64) uint64 {
	if rows == 0 || width == 0 {
		return 0
	}
	return (rows-1)*ld + width
}

// span: the largest element index of a [rows, ld] buffer whose rows hold width values,
// (rows − 1)·ld + width − 1, fits the kernel's u32 index arithmetic.
func (c *vcheck) span(field string, rows, ld, width uint64, rule string) {
	if rows == 0 || width == 0 {
		return
	}
	if e := (rows-1)*ld + width; e > span32 {
		c.failf(field, "%s = %d elements: the kernel's 32-bit offsets wrap (want ≤ 2³²)", rule, e)
	}
}

// apart: the rows of a buffer written by different threadgroups do not overlap (ld ≥ width
// when there is more than one row).
func (c *vcheck) apart(field string, rows uint32, ld, width uint64, rule string) {
	if rows > 1 && ld < width {
		c.failf(field, "is %d < %s = %d with %d rows: threadgroups of different rows would write the same values", ld, rule, width, rows)
	}
}

// total: a product of sizes (a buffer's elements or bytes) fits u32 offsets.
func (c *vcheck) total(field string, v uint64, rule string) {
	if v > span32 {
		c.failf(field, "%s = %d: the kernel's 32-bit offsets wrap (want ≤ 2³²)", rule, v)
	}
}

// grid: a launch grid within CUDA's limits; names are the fields that size x, y, z.
func (c *vcheck) grid(g [3]uint32, names [3]string) {
	for i, v := range g {
		lim := uint32(maxGridYZ)
		if i == 0 {
			lim = maxGridX
		}
		if v > lim {
			c.failf(names[i], "gives a grid %c dimension of %d threadgroups: CUDA allows at most %d", "xyz"[i], v, lim)
		}
	}
}

// Validate checks the record against the rules of lithos_rmsnorm: Rows, Groups, N ≥ 1; Mode
// RMSPlain, RMSOnePlus or RMSGated; x, y (z when gated) within 32-bit offsets; y's rows apart
// (LdY ≥ Groups·N); Rows ≤ 65535 (grid y).
func (p RMSNormParams) Validate() error {
	c := vcheck{rec: "RMSNormParams"}
	c.done(p.DoneWord)
	c.positive("Rows", p.Rows)
	c.positive("Groups", p.Groups)
	c.positive("N", p.N)
	c.atMost("Mode", p.Mode, RMSGated, "RMSPlain, RMSOnePlus or RMSGated")
	w := uint64(p.Groups) * uint64(p.N)
	c.span("LdX", uint64(p.Rows), uint64(p.LdX), w, "(Rows−1)·LdX + Groups·N")
	c.span("LdY", uint64(p.Rows), uint64(p.LdY), w, "(Rows−1)·LdY + Groups·N")
	if p.Mode == RMSGated {
		c.span("LdZ", uint64(p.Rows), uint64(p.LdZ), w, "(Rows−1)·LdZ + Groups·N")
	}
	c.apart("LdY", p.Rows, uint64(p.LdY), w, "Groups·N")
	c.grid(p.Grid(), [3]string{"Groups", "Rows", ""})
	return c.err()
}

// Validate checks the record against the rules of lithos_ewise: Rows, N ≥ 1; Mode EwSwiGLU or
// EwAdd; a, b, y within 32-bit offsets; y's rows apart (LdY ≥ N); Rows ≤ 65535 (grid y).
func (p EwiseParams) Validate() error {
	c := vcheck{rec: "EwiseParams"}
	c.done(p.DoneWord)
	c.positive("Rows", p.Rows)
	c.positive("N", p.N)
	c.atMost("Mode", p.Mode, EwAdd, "EwSwiGLU or EwAdd")
	n := uint64(p.N)
	c.span("LdA", uint64(p.Rows), uint64(p.LdA), n, "(Rows−1)·LdA + N")
	c.span("LdB", uint64(p.Rows), uint64(p.LdB), n, "(Rows−1)·LdB + N")
	c.span("LdY", uint64(p.Rows), uint64(p.LdY), n, "(Rows−1)·LdY + N")
	c.apart("LdY", p.Rows, uint64(p.LdY), n, "N")
	c.grid(p.Grid(), [3]string{"N", "Rows", ""})
	return c.err()
}

// rotary: RotDim even, 2 ≤ RotDim ≤ HeadDim (pairs (i, i + RotDim/2) inside a head; inv_freq
// has RotDim/2 values): lithos_rope_scaled, lithos_attn_prep.
func (c *vcheck) rotary(rotDim, headDim uint32) {
	if rotDim < 2 || rotDim%2 != 0 || rotDim > headDim {
		c.failf("RotDim", "is %d with HeadDim %d: want an even number in [2, HeadDim]", rotDim, headDim)
	}
}

// Validate checks the record against the rules of lithos_rope_scaled: Rows, Heads ≥ 1; RotDim
// even, 2 ≤ RotDim ≤ HeadDim (vcheck.rotary); x within 32-bit offsets and its rows apart (in
// place: Ld ≥ Heads·HeadDim).
func (p RopeScaledParams) Validate() error {
	c := vcheck{rec: "RopeScaledParams"}
	c.done(p.DoneWord)
	c.positive("Rows", p.Rows)
	c.positive("Heads", p.Heads)
	c.rotary(p.RotDim, p.HeadDim)
	w := uint64(p.Heads) * uint64(p.HeadDim)
	c.span("Ld", uint64(p.Rows), uint64(p.Ld), w, "(Rows−1)·Ld + Heads·HeadDim")
	c.apart("Ld", p.Rows, uint64(p.Ld), w, "Heads·HeadDim")
	c.grid(p.Grid(), [3]string{"", "Rows", ""})
	return c.err()
}

// Validate checks the record against the rules of the BLM kernels: Rows 1–16 (the largest
// variant; the kernel named for the record must hold Rows: BLMKernel); N, K, UnitWords ≥ 1;
// Lanes 2, 4, 8, 16 or 32 (blm.Geometry); Stripe·Lanes ≥ K; Payload ≤ 16·UnitWords; Blocks =
// ⌈N/16⌉; the matrix, 16·Blocks·Lanes·16·UnitWords bytes, < 4 GiB; Epilogue EpiStore, EpiAdd
// or EpiSwiGLU (N a multiple of 16 for SwiGLU); Parts a power of two dividing BLMThreads/32;
// WarpBlocks in [1, BLMMaxWarpBlocks]; Clusters ≤ BLMMaxClusters; x ([Rows, LdX], K values) and y ([Rows, LdY], N or N/2
// values) within 32-bit offsets, y's rows apart. Records from NewBLMParams pass.
func (p BLMParams) Validate() error {
	c := vcheck{rec: "BLMParams"}
	c.done(p.DoneWord)
	if p.Rows < 1 || p.Rows > uint32(BLMRowVariants[len(BLMRowVariants)-1]) {
		c.failf("Rows", "is %d, want 1 to %d (the BLM kernels' row variants)", p.Rows, BLMRowVariants[len(BLMRowVariants)-1])
	}
	c.positive("N", p.N)
	c.positive("K", p.K)
	c.positive("UnitWords", p.UnitWords)
	switch p.Lanes {
	case 2, 4, 8, 16, 32:
	default:
		c.failf("Lanes", "is %d, want 2, 4, 8, 16 or 32 (blm.Geometry)", p.Lanes)
	}
	if uint64(p.Stripe)*uint64(p.Lanes) < uint64(p.K) {
		c.failf("Stripe", "is %d with %d lanes: Stripe·Lanes < K = %d (columns past the stripes)", p.Stripe, p.Lanes, p.K)
	}
	if uint64(p.Payload) > 16*uint64(p.UnitWords) {
		c.failf("Payload", "is %d bytes, more than the unit's 16·UnitWords = %d", p.Payload, 16*uint64(p.UnitWords))
	}
	if want := (uint64(p.N) + 15) / 16; uint64(p.Blocks) != want {
		c.failf("Blocks", "is %d, want ⌈N/16⌉ = %d", p.Blocks, want)
	}
	c.total("Blocks", 16*uint64(p.Blocks)*uint64(p.Lanes)*16*uint64(p.UnitWords), "the matrix bytes 16·Blocks·Lanes·16·UnitWords")
	if g := uint32(BLMThreads / 32); p.Parts == 0 || p.Parts&(p.Parts-1) != 0 || p.Parts > g {
		c.failf("Parts", "is %d, want a power of two ≤ %d (BLMThreads/32 simdgroups split K)", p.Parts, g)
	}
	if p.WarpBlocks < 1 || p.WarpBlocks > BLMMaxWarpBlocks {
		c.failf("WarpBlocks", "is %d, want 1 to %d (BLMMaxWarpBlocks)", p.WarpBlocks, BLMMaxWarpBlocks)
	}
	c.matrixIO(p.N, p.K, p.Rows, p.LdX, p.LdY, p.Epilogue)
	if p.Clusters > BLMMaxClusters {
		c.failf("Clusters", "is %d, want 0 to %d (BLMMaxClusters: threadgroups per cluster splitting K; 0 is 1)", p.Clusters, BLMMaxClusters)
	}
	if p.Parts != 0 && p.Parts <= BLMThreads/32 && p.WarpBlocks != 0 && p.Clusters <= BLMMaxClusters {
		c.grid(p.Grid(), [3]string{"Blocks", "", ""})
	}
	switch p.Layout {
	case BLMLayoutBLM:
	case BLMLayoutFragment:
		if BLMRing == 0 {
			c.failf("Layout", "is BLMLayoutFragment, which the kernels read only through the weight ring (BLMRing is 0)")
		}
		if p.Group != 0 && (p.Group != 16 || p.Stripe%16 != 0) {
			c.failf("Layout", "is BLMLayoutFragment with group %d and stripe %d: NVFP4 stripes must be whole 16-column groups", p.Group, p.Stripe)
		}
	default:
		c.failf("Layout", "is %d, want BLMLayoutBLM (0) or BLMLayoutFragment (1)", p.Layout)
	}
	return c.err()
}

// Validate checks the record against the rules of lithos_argmax_partial and
// lithos_argmax_final: Rows, N, Chunk ≥ 1; Parts = ⌈N/Chunk⌉ (the partials cover every value,
// and no partial starts past N); x within 32-bit offsets; the partials (Rows·Parts) and
// out[OutOff + r] within 32-bit offsets; Parts ≤ 2³¹ − 1 and Rows ≤ 65535 (grids).
func (p ArgmaxParams) Validate() error {
	c := vcheck{rec: "ArgmaxParams"}
	c.done(p.DoneWord)
	c.positive("Rows", p.Rows)
	c.positive("N", p.N)
	c.positive("Chunk", p.Chunk)
	if p.Chunk != 0 {
		if want := (uint64(p.N) + uint64(p.Chunk) - 1) / uint64(p.Chunk); uint64(p.Parts) != want {
			c.failf("Parts", "is %d, want ⌈N/Chunk⌉ = %d (partials must cover the N values, none past them)", p.Parts, want)
		}
	}
	c.total("Chunk", uint64(p.N)+uint64(p.Chunk), "N + Chunk (the last partial's end)")
	c.span("Ld", uint64(p.Rows), uint64(p.Ld), uint64(p.N), "(Rows−1)·Ld + N")
	c.total("Parts", uint64(p.Rows)*uint64(p.Parts), "the partials Rows·Parts")
	c.total("OutOff", uint64(p.OutOff)+uint64(p.Rows), "OutOff + Rows")
	c.grid(p.GridPartial(), [3]string{"Parts", "Rows", ""})
	return c.err()
}

// Validate checks the record against the rules of lithos_gdn: Rows, KHeads, VHeads, KDim,
// VDim ≥ 1; KDim ≤ GDNMaxKDim = 128 (gdnLanesPerColumn lanes of GDN_KS state rows per
// column); VHeads a multiple of KHeads (value head h reads key head h/(VHeads/KHeads)); the
// two-slot state, 2·VHeads·KDim·VDim values, and q, k ([Rows, LdQK], KHeads·KDim values), v
// (VHeads·VDim), beta and g (VHeads), out (VHeads·VDim, when WriteOut) within 32-bit offsets;
// out's rows apart; Gates 0 or 1, with Gates ga and gb ([Rows, LdAB], VHeads) within 32-bit
// offsets and beta's and g's rows apart (they are written); Layers > 1 only with WriteOut 0 and
// Gates 0, each stride at least its layer's extent (LayerState ≥ the state, LayerQKV ≥ the rows
// of q, k and v, LayerGate ≥ those of beta and g: no layer reads another's) and every layer's
// q, k, v, beta, g and state within 32-bit offsets, Layers ≤ 65535 (grid z); with one layer
// every stride 0.
func (p GDNParams) Validate() error {
	c := vcheck{rec: "GDNParams"}
	c.done(p.DoneWord)
	c.positive("Rows", p.Rows)
	c.positive("KHeads", p.KHeads)
	c.positive("VHeads", p.VHeads)
	c.positive("KDim", p.KDim)
	if p.KDim > GDNMaxKDim {
		c.failf("KDim", "is %d, want ≤ %d (%d lanes of %d state rows per column, ops/gdn.kern GDN_KS)", p.KDim, GDNMaxKDim, gdnLanesPerColumn, gdnRowsPerLane)
	}
	c.positive("VDim", p.VDim)
	if p.KHeads != 0 && p.VHeads%p.KHeads != 0 || p.KHeads > p.VHeads {
		c.failf("VHeads", "is %d with %d key heads: want a multiple of KHeads", p.VHeads, p.KHeads)
	}
	rows := uint64(p.Rows)
	c.total("VDim", 2*uint64(p.VHeads)*uint64(p.KDim)*uint64(p.VDim), "the state 2·VHeads·KDim·VDim")
	c.span("LdQK", rows, uint64(p.LdQK), uint64(p.KHeads)*uint64(p.KDim), "(Rows−1)·LdQK + KHeads·KDim")
	vw := uint64(p.VHeads) * uint64(p.VDim)
	c.span("LdV", rows, uint64(p.LdV), vw, "(Rows−1)·LdV + VHeads·VDim")
	c.span("LdGate", rows, uint64(p.LdGate), uint64(p.VHeads), "(Rows−1)·LdGate + VHeads")
	switch {
	case p.Gates > 1:
		c.failf("Gates", "is %d, want 0 (β and g read) or 1 (computed from ga, gb and written)", p.Gates)
	case p.Gates == 1:
		c.span("LdAB", rows, uint64(p.LdAB), uint64(p.VHeads), "(Rows−1)·LdAB + VHeads")
		c.apart("LdGate", p.Rows, uint64(p.LdGate), uint64(p.VHeads), "VHeads")
	}
	if p.WriteOut != 0 {
		c.span("LdOut", rows, uint64(p.LdOut), vw, "(Rows−1)·LdOut + VHeads·VDim")
		c.apart("LdOut", p.Rows, uint64(p.LdOut), vw, "VHeads·VDim")
	}
	if p.Layers > 1 {
		if p.WriteOut != 0 || p.Gates != 0 {
			c.failf("Layers", "is %d with WriteOut %d and Gates %d: several layers run only as the commit replay (both 0)", p.Layers, p.WriteOut, p.Gates)
		}
		st, l := 2*uint64(p.VHeads)*uint64(p.KDim)*uint64(p.VDim), uint64(p.Layers-1)
		if uint64(p.LayerState) < st {
			c.failf("LayerState", "is %d < the state's 2·VHeads·KDim·VDim = %d: the layers' states would overlap", p.LayerState, st)
		}
		c.total("LayerState", l*uint64(p.LayerState)+st, "(Layers−1)·LayerState + the state")
		qkv := max(spanOf(rows, uint64(p.LdQK), uint64(p.KHeads)*uint64(p.KDim)), spanOf(rows, uint64(p.LdV), vw))
		gate := spanOf(rows, uint64(p.LdGate), uint64(p.VHeads))
		// Each layer its own rows: a smaller stride (0 among them) would give layers each
		// other's inputs.
		if uint64(p.LayerQKV) < qkv {
			c.failf("LayerQKV", "is %d < the rows of q, k and v = %d: the layers' inputs would overlap", p.LayerQKV, qkv)
		}
		if uint64(p.LayerGate) < gate {
			c.failf("LayerGate", "is %d < the rows of beta and g = %d: the layers' gates would overlap", p.LayerGate, gate)
		}
		c.total("LayerQKV", l*uint64(p.LayerQKV)+qkv, "(Layers−1)·LayerQKV + the rows of q, k and v")
		c.total("LayerGate", l*uint64(p.LayerGate)+gate, "(Layers−1)·LayerGate + the rows of beta and g")
	} else if p.LayerQKV != 0 || p.LayerGate != 0 || p.LayerState != 0 {
		c.failf("Layers", "is %d with LayerQKV %d, LayerGate %d, LayerState %d: want every stride 0 with one layer", p.Layers, p.LayerQKV, p.LayerGate, p.LayerState)
	}
	c.grid(p.Grid(), [3]string{"VHeads", "VDim", "Layers"})
	return c.err()
}

// Validate checks the record against the rules of lithos_conv: Rows, Channels, KernelSize ≥ 1
// (KernelSize 0 makes the history K − 1 wrap); KernelSize ≤ ConvMaxKernel; the state
// (2·(KernelSize−1)·Channels values), w (Channels·KernelSize), x ([Rows, LdX], Channels values)
// and y (when WriteOut) within 32-bit offsets; y's rows apart; with NormGroups the norm's rules
// (ConvParams), without it every Norm field 0; with ABOut the product's: ABIn ≥ 1, ABIn and
// ABLdX even, its weights, ax and ay within 32-bit offsets, ay's rows apart, ABNorm 0 or 1 (with
// 1, ABEps in (0, 1)); without it every AB field 0; Layers > 1 only with WriteOut 0,
// NormGroups 0 and ABOut 0, LayerState ≥ the state and LayerX ≥ the rows of x (no layer reads
// another's) and every layer's x and state within 32-bit offsets, Layers ≤ 65535 (grid z);
// with one layer both strides 0.
func (p ConvParams) Validate() error {
	c := vcheck{rec: "ConvParams"}
	c.done(p.DoneWord)
	c.positive("Rows", p.Rows)
	c.positive("Channels", p.Channels)
	c.positive("KernelSize", p.KernelSize)
	if p.KernelSize > ConvMaxKernel {
		c.failf("KernelSize", "is %d, want ≤ %d (ops/conv.kern CONV_KMAX: the taps and a chunk's inputs in registers)", p.KernelSize, ConvMaxKernel)
	}
	ch := uint64(p.Channels)
	if p.KernelSize > 0 {
		c.total("KernelSize", 2*uint64(p.KernelSize-1)*ch, "the state 2·(KernelSize−1)·Channels")
	}
	c.total("KernelSize", uint64(p.KernelSize)*ch, "the weights Channels·KernelSize")
	c.span("LdX", uint64(p.Rows), uint64(p.LdX), ch, "(Rows−1)·LdX + Channels")
	if p.WriteOut != 0 {
		c.span("LdY", uint64(p.Rows), uint64(p.LdY), ch, "(Rows−1)·LdY + Channels")
		c.apart("LdY", p.Rows, uint64(p.LdY), ch, "Channels")
	}
	if p.NormGroups != 0 {
		switch {
		case p.WriteOut == 0:
			c.failf("NormGroups", "is %d without WriteOut: the norm applies to the written outputs", p.NormGroups)
		case p.NormD != 32 && p.NormD != 64 && p.NormD != 128:
			c.failf("NormD", "is %d, want 32, 64 or 128 (whole warps, at most lithos_l2norm's 128 threads: one value per thread, its order)", p.NormD)
		case uint64(p.NormGroups)*uint64(p.NormD)%convThreads != 0 || uint64(p.NormGroups)*uint64(p.NormD) > ch:
			c.failf("NormGroups", "is %d groups of %d: want NormGroups·NormD a multiple of %d and at most Channels = %d", p.NormGroups, p.NormD, convThreads, p.Channels)
		}
		if p.NormPostGroups > p.NormGroups {
			c.failf("NormPostGroups", "is %d, want at most NormGroups = %d", p.NormPostGroups, p.NormGroups)
		}
		if !(p.NormEps > 0 && p.NormEps < 1) {
			c.failf("NormEps", "is %v, want a number in (0, 1)", p.NormEps)
		}
		if !(p.NormPost > 0 && p.NormPost < 1e30) {
			c.failf("NormPost", "is %v, want a positive finite number", p.NormPost)
		}
	} else if p.NormD != 0 || p.NormPostGroups != 0 || p.NormEps != 0 || p.NormPost != 0 {
		c.failf("NormGroups", "is 0 with NormD %d, NormPostGroups %d, NormEps %v, NormPost %v: want all 0 without the norm", p.NormD, p.NormPostGroups, p.NormEps, p.NormPost)
	}
	if p.ABOut != 0 {
		c.positive("ABIn", p.ABIn)
		if p.ABIn%2 != 0 || p.ABLdX%2 != 0 {
			c.failf("ABIn", "is %d with ABLdX %d: want both even (the BF16 weights read two at a time, the rows at even strides)", p.ABIn, p.ABLdX)
		}
		c.total("ABIn", uint64(p.ABOut)*uint64(p.ABIn), "the weights ABOut·ABIn")
		c.span("ABLdX", uint64(p.Rows), uint64(p.ABLdX), uint64(p.ABIn), "(Rows−1)·ABLdX + ABIn")
		c.span("ABLdY", uint64(p.Rows), uint64(p.ABLdY), uint64(p.ABOut), "(Rows−1)·ABLdY + ABOut")
		c.apart("ABLdY", p.Rows, uint64(p.ABLdY), uint64(p.ABOut), "ABOut")
		c.atMost("ABNorm", p.ABNorm, 1, "0 or 1")
		if p.ABNorm != 0 && !(p.ABEps > 0 && p.ABEps < 1) {
			c.failf("ABEps", "is %v, want a number in (0, 1)", p.ABEps)
		}
	} else if p.ABIn != 0 || p.ABLdX != 0 || p.ABLdY != 0 || p.ABNorm != 0 || p.ABEps != 0 {
		c.failf("ABOut", "is 0 with ABIn %d, ABLdX %d, ABLdY %d, ABNorm %d, ABEps %v: want all 0 without the product", p.ABIn, p.ABLdX, p.ABLdY, p.ABNorm, p.ABEps)
	}
	if p.Layers > 1 {
		if p.WriteOut != 0 || p.NormGroups != 0 || p.ABOut != 0 {
			c.failf("Layers", "is %d with WriteOut %d, NormGroups %d and ABOut %d: several layers run only as the commit replay (all 0)", p.Layers, p.WriteOut, p.NormGroups, p.ABOut)
		}
		var st uint64
		if p.KernelSize > 0 {
			st = 2 * uint64(p.KernelSize-1) * ch
		}
		l := uint64(p.Layers - 1)
		if uint64(p.LayerState) < st {
			c.failf("LayerState", "is %d < the state's 2·(KernelSize−1)·Channels = %d: the layers' states would overlap", p.LayerState, st)
		}
		c.total("LayerState", l*uint64(p.LayerState)+st, "(Layers−1)·LayerState + the state")
		xs := spanOf(uint64(p.Rows), uint64(p.LdX), ch)
		if uint64(p.LayerX) < xs {
			c.failf("LayerX", "is %d < the rows of x = %d: the layers' inputs would overlap", p.LayerX, xs)
		}
		c.total("LayerX", l*uint64(p.LayerX)+xs, "(Layers−1)·LayerX + the rows of x")
	} else if p.LayerX != 0 || p.LayerState != 0 {
		c.failf("Layers", "is %d with LayerX %d, LayerState %d: want both strides 0 with one layer", p.Layers, p.LayerX, p.LayerState)
	}
	c.grid(p.Grid(), [3]string{"Channels", "", "Layers"})
	return c.err()
}

// AttnMaxPart is the most keys one attention partition holds (ATTN_MAXPART, ops/attn_partial.kern).
const AttnMaxPart = 128

// Validate checks the record against the rules of lithos_attn_partial and lithos_attn_merge:
// Rows, Heads, KVHeads, HeadDim, Parts ≥ 1; Heads a multiple of KVHeads; Part in [1, 128]; the
// partitions cover Parts·Part < 2³² keys, and with a fixed position (PosWord = NoWord) every
// row's keys: Pos + Rows ≤ Parts·Part, with Block Pos < Parts·Part (a dynamic position is the
// kernels' guard, GuardAttnPartial / GuardAttnMerge); Block 0 or 1; q, out ([Rows, LdQ / LdO], Heads·HeadDim values), the
// caches (Parts·Part rows of LdKV, KVHeads·HeadDim values) and the scratch
// (Rows·Heads·Parts·HeadDim) within 32-bit offsets; out's rows apart; Parts ≤ 65535 (the
// partials' grid z) and Rows ≤ 65535 (the merge's grid y);
// Gate 0 or 1, with Gate the gate ([Rows, LdG], head h at h·GateStride) within 32-bit offsets.
func (p AttnParams) Validate() error {
	c := vcheck{rec: "AttnParams"}
	c.done(p.DoneWord)
	c.positive("Rows", p.Rows)
	c.positive("Heads", p.Heads)
	c.positive("KVHeads", p.KVHeads)
	c.positive("HeadDim", p.HeadDim)
	c.positive("Parts", p.Parts)
	if p.KVHeads != 0 && p.Heads%p.KVHeads != 0 || p.KVHeads > p.Heads {
		c.failf("Heads", "is %d with %d KV heads: want a multiple of KVHeads", p.Heads, p.KVHeads)
	}
	if p.Part < 1 || p.Part > AttnMaxPart {
		c.failf("Part", "is %d keys, want 1 to %d (the partial's threadgroup score array)", p.Part, AttnMaxPart)
	}
	cover := uint64(p.Parts) * uint64(p.Part)
	if cover >= span32 {
		c.failf("Parts", "Parts·Part = %d keys: want < 2³² (the kernels compute it in 32 bits)", cover)
	}
	if p.Block > 1 {
		c.failf("Block", "is %d, want 0 (causal rows) or 1 (a non-causal block: every row sees keys 0 … Pos)", p.Block)
	}
	if p.PosWord == NoWord && p.Block == 0 && uint64(p.Pos)+uint64(p.Rows) > cover {
		c.failf("Parts", "Parts·Part = %d keys < Pos + Rows = %d: the merge would leave out the last keys", cover, uint64(p.Pos)+uint64(p.Rows))
	}
	if p.PosWord == NoWord && p.Block == 1 && uint64(p.Pos) >= cover {
		c.failf("Parts", "Parts·Part = %d keys ≤ Pos = %d: the merge would leave out the last keys", cover, p.Pos)
	}
	rows := uint64(p.Rows)
	qw := uint64(p.Heads) * uint64(p.HeadDim)
	c.span("LdQ", rows, uint64(p.LdQ), qw, "(Rows−1)·LdQ + Heads·HeadDim")
	c.span("LdO", rows, uint64(p.LdO), qw, "(Rows−1)·LdO + Heads·HeadDim")
	c.apart("LdO", p.Rows, uint64(p.LdO), qw, "Heads·HeadDim")
	c.span("LdKV", cover, uint64(p.LdKV), uint64(p.KVHeads)*uint64(p.HeadDim), "(Parts·Part−1)·LdKV + KVHeads·HeadDim")
	c.total("Parts", rows*uint64(p.Heads)*uint64(p.Parts)*uint64(p.HeadDim), "the scratch po, Rows·Heads·Parts·HeadDim")
	c.atMost("Gate", p.Gate, 1, "0 (no output gate) or 1 (σ gate)")
	if p.Gate == 1 && p.Heads > 0 {
		c.span("LdG", rows, uint64(p.LdG), uint64(p.Heads-1)*uint64(p.GateStride)+uint64(p.HeadDim), "(Rows−1)·LdG + (Heads−1)·GateStride + HeadDim")
	}
	c.grid(p.GridPartial(), [3]string{"KVHeads", "", "Parts"})
	c.grid(p.GridMerge(), [3]string{"Heads", "Rows", ""})
	return c.err()
}

// caches: the rules of KV caches [capacity, ldc] that rows rows are appended to, width values
// each (lithos_kv_append, lithos_attn_prep): the caches' rows apart and within 32-bit
// offsets; with a fixed position (posWord NoWord), pos + rows ≤ capacity (a dynamic one is
// the kernels' guard, GuardKVAppend).
func (c *vcheck) caches(rows, pos, posWord, capacity, ldc uint32, width uint64, what string) {
	c.apart("LdC", rows, uint64(ldc), width, what)
	c.span("LdC", uint64(capacity), uint64(ldc), width, "(Capacity−1)·LdC + "+what)
	if posWord == NoWord && uint64(pos)+uint64(rows) > uint64(capacity) {
		c.failf("Capacity", "is %d < Pos + Rows = %d: rows past the caches", capacity, uint64(pos)+uint64(rows))
	}
}

// Validate checks the record against the rules of lithos_kv_append: Rows, Width, Capacity ≥
// 1; k, v ([Rows, LdK / LdV], Width values) and the caches ([Capacity, LdC]) within 32-bit
// offsets; the caches' rows apart (LdC ≥ Width); with a fixed position, Pos + Rows ≤ Capacity
// (a dynamic position is the kernel's guard, GuardKVAppend).
func (p KVAppendParams) Validate() error {
	c := vcheck{rec: "KVAppendParams"}
	c.done(p.DoneWord)
	c.positive("Rows", p.Rows)
	c.positive("Width", p.Width)
	c.positive("Capacity", p.Capacity)
	rows, w := uint64(p.Rows), uint64(p.Width)
	c.span("LdK", rows, uint64(p.LdK), w, "(Rows−1)·LdK + Width")
	c.span("LdV", rows, uint64(p.LdV), w, "(Rows−1)·LdV + Width")
	c.caches(p.Rows, p.Pos, p.PosWord, p.Capacity, p.LdC, w, "Width")
	c.grid(p.Grid(), [3]string{"Width", "Rows", ""})
	return c.err()
}

// Validate checks the record against the rules of lithos_attn_prep: Rows, Heads, KVHeads,
// Capacity ≥ 1; Heads + KVHeads threadgroups within grid x; HeadDim in [1, AttnPrepMaxHeadDim]; RotDim even, 2 ≤ RotDim ≤ HeadDim
// (vcheck.rotary); x's heads ([Rows, LdX]: the query heads at QOff + h·QStride, the key and value
// heads after KOff, VOff), q ([Rows, LdQ]) and the caches ([Capacity, LdC], KVHeads·HeadDim
// values) within 32-bit offsets; q's and the caches' rows apart; with a fixed position, Pos +
// Rows ≤ Capacity (a dynamic one is the kernel's guard, GuardKVAppend); grid limits.
func (p AttnPrepParams) Validate() error {
	c := vcheck{rec: "AttnPrepParams"}
	c.done(p.DoneWord)
	c.positive("Rows", p.Rows)
	c.positive("Heads", p.Heads)
	c.positive("KVHeads", p.KVHeads)
	c.positive("Capacity", p.Capacity)
	if uint64(p.Heads)+uint64(p.KVHeads) > maxGridX {
		c.failf("KVHeads", "Heads + KVHeads = %d threadgroups: CUDA allows at most %d (and the kernel adds them in 32 bits)", uint64(p.Heads)+uint64(p.KVHeads), maxGridX)
	}
	if p.HeadDim < 1 || p.HeadDim > AttnPrepMaxHeadDim {
		c.failf("HeadDim", "is %d, want 1 to %d (the values a threadgroup holds: ops/attn_prep.kern PREP_REG·THREADS)", p.HeadDim, AttnPrepMaxHeadDim)
	}
	c.rotary(p.RotDim, p.HeadDim)
	rows, hd := uint64(p.Rows), uint64(p.HeadDim)
	kvw := uint64(p.KVHeads) * hd
	if p.Heads > 0 {
		c.span("QStride", rows, uint64(p.LdX), uint64(p.QOff)+uint64(p.Heads-1)*uint64(p.QStride)+hd, "(Rows−1)·LdX + QOff + (Heads−1)·QStride + HeadDim")
	}
	c.span("KOff", rows, uint64(p.LdX), uint64(p.KOff)+kvw, "(Rows−1)·LdX + KOff + KVHeads·HeadDim")
	c.span("VOff", rows, uint64(p.LdX), uint64(p.VOff)+kvw, "(Rows−1)·LdX + VOff + KVHeads·HeadDim")
	qw := uint64(p.Heads) * hd
	c.span("LdQ", rows, uint64(p.LdQ), qw, "(Rows−1)·LdQ + Heads·HeadDim")
	c.apart("LdQ", p.Rows, uint64(p.LdQ), qw, "Heads·HeadDim")
	c.caches(p.Rows, p.Pos, p.PosWord, p.Capacity, p.LdC, kvw, "KVHeads·HeadDim")
	c.grid(p.Grid(), [3]string{"Heads", "Rows", ""})
	return c.err()
}

// Validate checks the record against the rules of lithos_gather: Rows, Width, Vocab ≥ 1;
// DType 0 (f32) or 1 (bf16); the table's bytes, Vocab·Width·4 (f32) or ·2 (bf16), ≤ 2³² (the
// kernel's byte offsets are 32-bit: an f32 table of 4 GiB or more wraps); ids[IdsOff + r] and
// y ([Rows, LdY], Width values) within 32-bit offsets; y's rows apart.
func (p GatherParams) Validate() error {
	c := vcheck{rec: "GatherParams"}
	c.done(p.DoneWord)
	c.positive("Rows", p.Rows)
	c.positive("Width", p.Width)
	c.positive("Vocab", p.Vocab)
	esize := uint64(4)
	switch p.DType {
	case 0:
	case 1:
		esize = 2
	default:
		c.failf("DType", "is %d, want 0 (f32) or 1 (bf16)", p.DType)
	}
	c.total("Vocab", uint64(p.Vocab)*uint64(p.Width)*esize, "the table bytes Vocab·Width·element size")
	c.total("IdsOff", uint64(p.IdsOff)+uint64(p.Rows), "IdsOff + Rows")
	c.span("LdY", uint64(p.Rows), uint64(p.LdY), uint64(p.Width), "(Rows−1)·LdY + Width")
	c.apart("LdY", p.Rows, uint64(p.LdY), uint64(p.Width), "Width")
	c.grid(p.Grid(), [3]string{"Width", "Rows", ""})
	return c.err()
}

// Validate checks the record against the rules of lithos_l2norm: Rows, Groups, D ≥ 1;
// PostGroups ≤ Groups, and not 0 with a Post other than 1; x within 32-bit offsets and its rows
// apart (in place: Ld ≥ Groups·D).
func (p L2NormParams) Validate() error {
	c := vcheck{rec: "L2NormParams"}
	c.done(p.DoneWord)
	c.positive("Rows", p.Rows)
	c.positive("Groups", p.Groups)
	c.positive("D", p.D)
	if p.PostGroups > p.Groups {
		c.failf("PostGroups", "is %d, more than Groups = %d", p.PostGroups, p.Groups)
	}
	if p.PostGroups == 0 && p.Post != 1 {
		c.failf("PostGroups", "is 0 with Post = %g: no group would be scaled by it", p.Post)
	}
	w := uint64(p.Groups) * uint64(p.D)
	c.span("Ld", uint64(p.Rows), uint64(p.Ld), w, "(Rows−1)·Ld + Groups·D")
	c.apart("Ld", p.Rows, uint64(p.Ld), w, "Groups·D")
	c.grid(p.Grid(), [3]string{"Groups", "Rows", ""})
	return c.err()
}

// ctlWords checks the step-state word fields of a control kernel: each not NoWord, no two the
// same, none inside the Pending range [WPending, WPending + 1 + block) the accept scan reads,
// and that range below NoWord.
func ctlWords(c *vcheck, pending, block uint32, names []string, words []uint32) {
	c.word("WPending", pending)
	if uint64(pending)+1+uint64(block) > NoWord {
		c.failf("WPending", "is %d with Block %d: the Pending words WPending … WPending+Block pass NoWord", pending, block)
	}
	seen := map[uint32]string{}
	for i, w := range words {
		n := names[i]
		c.word(n, w)
		if w == NoWord {
			continue
		}
		if o, ok := seen[w]; ok {
			c.failf(n, "is word %d, the same as %s: each step-state field needs its own word", w, o)
		}
		seen[w] = n
		if w >= pending && uint64(w) < uint64(pending)+1+uint64(block) {
			c.failf(n, "is word %d, inside the Pending words %d … %d", w, pending, uint64(pending)+uint64(block))
		}
	}
}

// Validate checks the record against the rules of lithos_step: DoneWord NoWord; Mode StepBegin,
// StepAccept or StepPrefill; Capacity, RingCap ≥ 1 (the ring slot is head % RingCap);
// Capacity + Block + 1 < 2³² (the kernel's position arithmetic); every W* a word index (not
// NoWord), no two the same, none inside the Pending words [WPending, WPending + 1 + Block). In
// StepAccept the Rows word must be in [1, 1 + Block] at run time (GuardStepRows): set Block to
// the drafts a step may verify (0 for plain decode).
func (p StepParams) Validate() error {
	c := vcheck{rec: "StepParams"}
	c.noDone(p.DoneWord)
	c.atMost("Mode", p.Mode, StepPrefill, "StepBegin, StepAccept or StepPrefill")
	c.positive("Capacity", p.Capacity)
	c.positive("RingCap", p.RingCap)
	if uint64(p.Capacity)+uint64(p.Block)+1 >= span32 {
		c.failf("Block", "Capacity + Block + 1 = %d: want < 2³² (the kernel's position arithmetic)", uint64(p.Capacity)+uint64(p.Block)+1)
	}
	ctlWords(&c, p.WPending, p.Block,
		[]string{"WStep", "WPosition", "WRows", "WAnchor", "WAccepted", "WCommitted", "WPrefillLeft", "WDone", "WError", "WRingHead", "WRingTail", "WStopAt"},
		[]uint32{p.WStep, p.WPosition, p.WRows, p.WAnchor, p.WAccepted, p.WCommitted, p.WPrefillLeft, p.WDone, p.WError, p.WRingHead, p.WRingTail, p.WStopAt})
	return c.err()
}

// Validate checks the record against the rules of lithos_round: DoneWord NoWord; Mode
// RoundBegin … RoundEnd; Capacity, Block, RingCap ≥ 1 (Block 0 makes BlockLast wrap);
// Capacity + Block + 1 < 2³²; every W* a word index, no two the same (WCount excepted: RoundEnd
// may count any word, it must then not be NoWord), none inside the Pending words; HasConf 0 or
// 1, ConfStop and ConfBias finite.
func (p RoundParams) Validate() error {
	c := vcheck{rec: "RoundParams"}
	c.noDone(p.DoneWord)
	c.atMost("Mode", p.Mode, RoundEnd, "RoundBegin, RoundRows, RoundAccept, RoundMark or RoundEnd")
	c.positive("Capacity", p.Capacity)
	c.positive("Block", p.Block)
	c.positive("RingCap", p.RingCap)
	if uint64(p.Capacity)+uint64(p.Block)+1 >= span32 {
		c.failf("Block", "Capacity + Block + 1 = %d: want < 2³² (the kernel's position arithmetic)", uint64(p.Capacity)+uint64(p.Block)+1)
	}
	ctlWords(&c, p.WPending, p.Block,
		[]string{"WStep", "WPosition", "WRows", "WAnchor", "WAccepted", "WCommitted", "WDone", "WError", "WRingHead", "WRingTail",
			"WStopAt", "WDraftLen", "WDraftContext", "WCommitRows", "WBlockLast", "WIsRound"},
		[]uint32{p.WStep, p.WPosition, p.WRows, p.WAnchor, p.WAccepted, p.WCommitted, p.WDone, p.WError, p.WRingHead, p.WRingTail,
			p.WStopAt, p.WDraftLen, p.WDraftContext, p.WCommitRows, p.WBlockLast, p.WIsRound})
	if p.Mode == RoundEnd {
		c.word("WCount", p.WCount)
	}
	c.atMost("HasConf", p.HasConf, 1, "0 or 1")
	for _, f := range []struct {
		name string
		v    float32
	}{{"ConfStop", p.ConfStop}, {"ConfBias", p.ConfBias}} {
		if math.IsNaN(float64(f.v)) || math.IsInf(float64(f.v), 0) {
			c.failf(f.name, "is %v, want a finite number", f.v)
		}
	}
	return c.err()
}

// Validate checks the record against the rules of lithos_sample: Rows ≥ 1; 1 ≤ N < 2²⁴; x
// ([Rows, Ld], N values) and out[OutOff + r] within 32-bit offsets; SeedWord and SeedWord + 1
// word indices (not NoWord); the temperature (TempLo/Hi as float64, Temp as float32) finite
// and > 0, top-p (TopPLo/Hi, TopP) in (0, 1] (the kernel divides by T and stops its scan at
// top-p). Records from NewSampleParams pass.
func (p SampleParams) Validate() error {
	c := vcheck{rec: "SampleParams"}
	c.done(p.DoneWord)
	c.positive("Rows", p.Rows)
	if p.N < 1 || p.N >= 1<<24 {
		c.failf("N", "is %d, want 1 ≤ N < 2²⁴ (token ids as float32 keys)", p.N)
	}
	c.span("Ld", uint64(p.Rows), uint64(p.Ld), uint64(p.N), "(Rows−1)·Ld + N")
	c.total("OutOff", uint64(p.OutOff)+uint64(p.Rows), "OutOff + Rows")
	if p.SeedWord >= NoWord-1 {
		c.failf("SeedWord", "is %#x: want the index of the seed's low word, its high word after it (not NoWord)", p.SeedWord)
	}
	t64 := math.Float64frombits(uint64(p.TempHi)<<32 | uint64(p.TempLo))
	if !(t64 > 0) || math.IsInf(t64, 0) || !(p.Temp > 0) || math.IsInf(float64(p.Temp), 0) {
		c.failf("Temp", "is %v (float64 bits %v): want a finite temperature > 0 in both (greedy is the argmax kernel)", p.Temp, t64)
	}
	tp64 := math.Float64frombits(uint64(p.TopPHi)<<32 | uint64(p.TopPLo))
	if !(tp64 > 0 && tp64 <= 1) || !(p.TopP > 0 && p.TopP <= 1) {
		c.failf("TopP", "is %v (float64 bits %v): want (0, 1] in both", p.TopP, tp64)
	}
	c.grid(p.Grid(), [3]string{"", "Rows", ""})
	return c.err()
}

// Validate checks the record against the rules of lithos_copy: Rows, N ≥ 1; x, y ([Rows,
// LdX / LdY], N values) within 32-bit offsets; y's rows apart.
func (p CopyParams) Validate() error {
	c := vcheck{rec: "CopyParams"}
	c.done(p.DoneWord)
	c.positive("Rows", p.Rows)
	c.positive("N", p.N)
	n := uint64(p.N)
	c.span("LdX", uint64(p.Rows), uint64(p.LdX), n, "(Rows−1)·LdX + N")
	c.span("LdY", uint64(p.Rows), uint64(p.LdY), n, "(Rows−1)·LdY + N")
	c.apart("LdY", p.Rows, uint64(p.LdY), n, "N")
	c.grid(p.Grid(), [3]string{"N", "Rows", ""})
	return c.err()
}
