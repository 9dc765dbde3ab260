package kernels

import (
	"fmt"
	"math"
)

// The kernels of sampling and of the speculative round on a device (issue 10; docs/speculative.md;
// the host side is runtime/backend/gpu): ops/sample.kern, ops/round.kern, ops/copy.kern and
// ops/rope_scaled.kern.

// SampleThreads is the threadgroup size of lithos_sample (one threadgroup per row).
const SampleThreads = 1024

// SampleParams: for row r < rows of x ([rows, Ld], N logits each), out[OutOff + r] = the token
// runtime/sample draws at temperature > 0 (sample.Sampler.Sample, or sample.Draw of
// sample.Probs with sample.UniformStream when Stream ≠ 0) for the position dyn(Pos, PosWord) +
// PosAdd + r, with the seed of the step-state words SeedWord (low) and SeedWord + 1 (high).
// Temperature and TopP are given as float64 bit patterns (TempLo/Hi, TopPLo/Hi: the CPU's
// float64 values, used where the target has float64) and as float32 (Temp, TopP: targets
// without float64, Metal). TopK 0 keeps every token; TopP 1 keeps every token. out may be ctl
// (a draft written into Pending). N must be below 2²⁴. Kernel lithos_sample, buffers x, out
// (i32).
type SampleParams struct {
	DoneWord       uint32
	Rows, RowsWord uint32
	N, Ld          uint32
	TempLo, TempHi uint32
	TopPLo, TopPHi uint32
	Temp, TopP     float32
	TopK           uint32
	SeedWord       uint32
	Stream         uint32
	Pos, PosWord   uint32
	PosAdd         uint32
	OutOff         uint32
}

// NewSampleParams returns the record for rows rows of n logits (contiguous) at temperature
// temp > 0 with topK (0: all) and topP in (0, 1], the seed in step-state words seedWord and
// seedWord + 1, the ordinary draw (Stream 0), positions pos + r (no done word, fixed rows).
// Errors: a parameter out of range, n ≥ 2²⁴.
func NewSampleParams(rows, n int, temp float64, topK int, topP float64, seedWord uint32, pos uint32) (SampleParams, error) {
	if !(temp > 0) || math.IsInf(temp, 0) {
		return SampleParams{}, fmt.Errorf("kernels: sample: temperature %v: want a finite number > 0 (greedy is the argmax kernel)", temp)
	}
	if topK < 0 || !(topP > 0 && topP <= 1) {
		return SampleParams{}, fmt.Errorf("kernels: sample: top-k %d, top-p %v: want top-k ≥ 0 and top-p in (0, 1]", topK, topP)
	}
	if n < 1 || n >= 1<<24 || rows < 1 {
		return SampleParams{}, fmt.Errorf("kernels: sample: %d rows of %d logits: want rows ≥ 1 and 1 ≤ n < 2²⁴", rows, n)
	}
	tb, pb := math.Float64bits(temp), math.Float64bits(topP)
	return SampleParams{DoneWord: NoWord, Rows: uint32(rows), RowsWord: NoWord, N: uint32(n), Ld: uint32(n),
		TempLo: uint32(tb), TempHi: uint32(tb >> 32), TopPLo: uint32(pb), TopPHi: uint32(pb >> 32),
		Temp: float32(temp), TopP: float32(topP), TopK: uint32(topK), SeedWord: seedWord, Pos: pos, PosWord: NoWord}, nil
}

// Grid is one threadgroup per row.
func (p SampleParams) Grid() [3]uint32 { return [3]uint32{1, p.Rows, 1} }

// Round modes (RoundParams.Mode).
const (
	RoundBegin  = 0 // a round or (no room) a single row: Rows, DraftLen, Pending[0] = Anchor, BlockLast, IsRound
	RoundRows   = 1 // after drafting: confidences, L (the confidence stop), Rows = 1 + L
	RoundAccept = 2 // accept scan (targets vs Pending drafts), ring pushes, commit, stats
	RoundMark   = 3 // the verify pass and the commit replay are done (time)
	RoundEnd    = 4 // DraftContext += ctl[WCount] (the drafter's appended rows)
)

// RoundParams: the control kernel lithos_round (one thread; ops/round.kern describes each mode),
// buffers targets (i32 [1 + Block]: the target's token per verified row), eos (i32 [EOSCount]),
// ring (u64 [RingCap]), conf (f32 [Block]: the confidence head's dot products, made σ(z + bias)
// by RoundRows), stats (u32: RoundStatsWords(Block) words). DoneWord must be NoWord. The W*
// fields are step-state word indices; WCommitRows, WBlockLast and WIsRound are words past the
// StepState (the session's auxiliary words), WCount the word RoundEnd adds to DraftContext.
// ConfStop is the confidence stop as a float32 c such that c_k ≥ c ⟺ float64(c_k) ≥ the
// session's float64 threshold (0: off).
type RoundParams struct {
	DoneWord                          uint32
	Mode                              uint32
	Capacity, Block                   uint32
	RingCap, EOSCount                 uint32
	WStep, WPosition, WRows, WPending uint32
	WAnchor, WAccepted, WCommitted    uint32
	WDone, WError                     uint32
	WRingHead, WRingTail, WStopAt     uint32
	WDraftLen, WDraftContext          uint32
	WCommitRows, WBlockLast, WIsRound uint32
	WCount                            uint32
	HasConf                           uint32
	ConfStop, ConfBias                float32
	Timed                             uint32
}

// Grid is one threadgroup.
func (p RoundParams) Grid() [3]uint32 { return [3]uint32{1, 1, 1} }

// RoundStatsWords returns the u32 words of lithos_round's stats buffer for a block of b drafts:
// 4 counters, the committed histogram [b+1], drafted [b], accepted [b], confidence sums [b]
// (f32), then five u64 (clock at begin, rows, mark; draft and verify nanoseconds) from the next
// even word. RoundTimeWord returns that first even word.
func RoundStatsWords(b int) int { return RoundTimeWord(b) + 10 }

// RoundTimeWord is the word of the first u64 of the stats buffer (see RoundStatsWords).
func RoundTimeWord(b int) int { return (4 + 4*b + 1 + 1) &^ 1 }

// CopyParams: y[r·LdY + i] = x[r·LdX + i] for r < rows, i < N. Kernel lithos_copy, buffers x, y.
type CopyParams struct {
	DoneWord       uint32
	Rows, RowsWord uint32
	N              uint32
	LdX, LdY       uint32
}

// Grid is ⌈N/256⌉ × rows.
func (p CopyParams) Grid() [3]uint32 { return [3]uint32{(p.N + 255) / 256, p.Rows, 1} }

// RopeScaledParams: NeoX RoPE in place with cos and sin multiplied by Scale (runtime/draft.Rope;
// Scale 1 is runtime/model.Rope): row r < rows is at position Pos + r (PosWord: the step
// state's Position); each of Heads heads of HeadDim values at x[r·Ld + h·HeadDim …] rotates its
// pairs (i, i + RotDim/2), i < RotDim/2, by the angle float32(pos)·inv_freq[i]. Kernel
// lithos_rope_scaled, buffers x, inv_freq (RotDim/2 floats).
type RopeScaledParams struct {
	DoneWord uint32
	Rows     uint32
	RowsWord uint32
	Pos      uint32
	PosWord  uint32
	Heads    uint32
	HeadDim  uint32
	RotDim   uint32
	Ld       uint32
	Scale    float32
}

// Grid is ⌈Heads·RotDim/2 / 128⌉ threadgroups (ropeScaledThreads threads, a (head, pair) item
// each) × rows: the drafter's query heads are 2,048 items per row, which one threadgroup per row
// took one after another (7 µs a launch on the H200, docs/performance.md §3.3t).
func (p RopeScaledParams) Grid() [3]uint32 {
	items := p.Heads * (p.RotDim / 2)
	return [3]uint32{max((items+ropeScaledThreads-1)/ropeScaledThreads, 1), p.Rows, 1}
}

// ropeScaledThreads is lithos_rope_scaled's threadgroup size.
const ropeScaledThreads = 128

// specKernels are the entry points of the speculative ops, appended to the registry.
func specKernels() []Kernel {
	f32 := func(n string, w bool) Buffer { return Buffer{Name: n, Elem: "f32", Write: w} }
	buf := func(n, elem string, w bool) Buffer { return Buffer{Name: n, Elem: elem, Write: w} }
	return []Kernel{
		{Name: "lithos_sample", Op: "sample", Threads: SampleThreads, Params: SampleParams{},
			Buffers: []Buffer{f32("x", false), buf("out", "i32", true)}},
		{Name: "lithos_round", Op: "round", Threads: 32, Params: RoundParams{}, CtlRW: true,
			Buffers: []Buffer{buf("targets", "i32", false), buf("eos", "i32", false), buf("ring", "u64", true), f32("conf", true), buf("stats", "u32", true)}},
		{Name: "lithos_copy", Op: "copy", Threads: 256, Params: CopyParams{},
			Buffers: []Buffer{f32("x", false), f32("y", true)}},
		{Name: "lithos_rope_scaled", Op: "rope_scaled", Threads: ropeScaledThreads, Params: RopeScaledParams{},
			Buffers: []Buffer{f32("x", true), {Name: "inv_freq", Elem: "f32", NoAlias: true}}},
	}
}
