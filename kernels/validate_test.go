package kernels

import (
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"lithos/formats"
	"lithos/pack/blm"
	"lithos/runtime/backend"
)

// validator is every parameter record type (Validate, validate.go).
type validator interface{ Validate() error }

// TestEveryRecordHasValidate: each kernel's record type has Validate, and its zero value (Rows
// 0, sizes 0, or a control record without its words) fails it.
func TestEveryRecordHasValidate(t *testing.T) {
	for _, k := range Kernels() {
		v, ok := k.Params.(validator)
		if !ok {
			t.Errorf("%s: record %T has no Validate method", k.Name, k.Params)
			continue
		}
		if err := v.Validate(); err == nil {
			t.Errorf("%s: the zero %T passes Validate", k.Name, k.Params)
		}
	}
}

// shape27 is a model of the 27B's size (hidden 5120, intermediate 17408, vocabulary 248320; 24
// query and 4 KV heads of 256, rotary 64; GDN 16 key and 48 value heads of 128, conv kernel 4)
// and the drafter's (32/8 heads of 128, block 7, Markov rank 256): the sizes at which the
// 32-bit offsets and grid limits matter.
const (
	s27V, s27H, s27I           = 248320, 5120, 17408
	s27Heads, s27KV, s27HD     = 24, 4, 256
	s27Rot                     = 64
	s27KH, s27VH, s27KD, s27VD = 16, 48, 128, 128
	s27Conv                    = 4
	s27Cap                     = 262144
	s27Part                    = 64
	s27B, s27DHeads, s27DKV    = 7, 32, 8
	s27DHD, s27Rank            = 128, 256
)

// backendRecords returns the records runtime/backend/gpu's program builder (program.go:
// layers, buildProgram, buildRound, emitDraft, emitAppend) makes for the 27B-sized model at
// n rows with the step-state words of a TMax = 1 + block state.
func backendRecords(t *testing.T, n int) []validator {
	t.Helper()
	sw, ss := stepWords(t, 1+s27B)
	nwords := uint32(ss.Size() / 4)
	done, rowsWord, nw := sw.WDone, sw.WRows, uint32(NoWord)
	cd := uint32(2*s27KH*s27KD + s27VH*s27VD)
	vd, qd, kvd := uint32(s27VH*s27VD), uint32(s27Heads*s27HD), uint32(s27KV*s27HD)
	nz, nq := vd+cd, 2*qd+2*kvd
	parts := uint32((s27Cap + s27Part - 1) / s27Part)
	N := uint32(n)
	mm := func(f formats.Format, rows, k int, epi uint32) validator {
		g, err := blm.NewGeometry(blm.Spec{Format: f, N: int64(rows), K: int64(k)})
		if err != nil {
			t.Fatal(err)
		}
		p, err := NewBLMParams(g, n, epi)
		if err != nil {
			t.Fatal(err)
		}
		p.DoneWord, p.RowsWord = done, rowsWord
		return p
	}
	am := NewArgmaxParams(n, s27V)
	am.DoneWord, am.RowsWord = done, rowsWord
	sp, err := NewSampleParams(n, s27V, 0.7, 20, 0.95, sw.WPending+1+s27B, 0)
	if err != nil {
		t.Fatal(err)
	}
	sp.DoneWord, sp.RowsWord, sp.PosWord, sp.PosAdd = done, rowsWord, sw.WPosition, 1
	step := sw
	step.Capacity, step.RingCap, step.EOSCount = s27Cap, 4096, 2
	recs := []validator{
		GatherParams{DoneWord: done, Rows: N, RowsWord: rowsWord, Width: s27H, Vocab: s27V, IdsOff: sw.WPending, DType: 1, LdY: s27H},
		RMSNormParams{DoneWord: done, Rows: N, RowsWord: rowsWord, Groups: 1, N: s27H, LdX: s27H, LdZ: s27H, LdY: s27H, Eps: 1e-6},
		mm(formats.FP8, int(nz), s27H, EpiStore), mm(formats.FP8, 2*s27VH, s27H, EpiStore), mm(formats.FP8, s27H, int(vd), EpiAdd),
		ConvParams{DoneWord: done, Rows: N, RowsWord: rowsWord, Channels: cd, KernelSize: s27Conv, SlotWord: sw.WStep, WriteOut: 1, LdX: nz, LdY: cd},
		// The same with the q/k L2 norm in its launch (runtime/backend/gpu's GDN layers).
		ConvParams{DoneWord: done, Rows: N, RowsWord: rowsWord, Channels: cd, KernelSize: s27Conv, SlotWord: sw.WStep, WriteOut: 1, LdX: nz, LdY: cd,
			NormGroups: 2 * s27KH, NormD: s27KD, NormPostGroups: s27KH, NormEps: 1e-6, NormPost: 0.0884},
		L2NormParams{DoneWord: done, Rows: N, RowsWord: rowsWord, Groups: 2 * s27KH, D: s27KD, Ld: cd, Eps: 1e-6, Post: 1, PostGroups: s27KH},
		GDNParams{DoneWord: done, Rows: N, RowsWord: rowsWord, KHeads: s27KH, VHeads: s27VH, KDim: s27KD, VDim: s27VD, SlotWord: sw.WStep,
			WriteOut: 1, LdQK: cd, LdV: cd, LdGate: s27VH, LdOut: vd, Gates: 1, LdAB: 2 * s27VH},
		// The commit replay: no done word, rows from the commit-rows word, the other slot.
		GDNParams{DoneWord: nw, Rows: N, RowsWord: nwords, KHeads: s27KH, VHeads: s27VH, KDim: s27KD, VDim: s27VD, SlotWord: sw.WStep,
			SlotXor: 1, LdQK: cd, LdV: cd, LdGate: s27VH, LdOut: vd},
		// The commit replay of the 48 GDN layers in one launch each (runtime/backend/gpu's round).
		GDNParams{DoneWord: nw, Rows: N, RowsWord: nwords, KHeads: s27KH, VHeads: s27VH, KDim: s27KD, VDim: s27VD, SlotWord: sw.WStep,
			SlotXor: 1, LdQK: cd, LdV: cd, LdGate: s27VH, LdOut: vd, Layers: 48, LayerQKV: N * cd, LayerGate: N * s27VH,
			LayerState: 2 * s27VH * s27KD * s27VD},
		ConvParams{DoneWord: nw, Rows: N, RowsWord: nwords, Channels: cd, KernelSize: s27Conv, SlotWord: sw.WStep, SlotXor: 1, LdX: nz, LdY: cd,
			Layers: 48, LayerX: N * nz, LayerState: 2 * (s27Conv - 1) * cd},
		RMSNormParams{DoneWord: done, Rows: N, RowsWord: rowsWord, Groups: s27VH, N: s27VD, LdX: vd, LdZ: nz, LdY: vd, Mode: RMSGated, Eps: 1e-6},
		mm(formats.FP8, int(nq), s27H, EpiStore), mm(formats.FP8, s27H, int(qd), EpiAdd),
		AttnPrepParams{DoneWord: done, Rows: N, RowsWord: rowsWord, PosWord: sw.WPosition, Heads: s27Heads, KVHeads: s27KV, HeadDim: s27HD,
			RotDim: s27Rot, LdX: nq, QOff: 0, QStride: 2 * s27HD, KOff: 2 * qd, VOff: 2*qd + kvd, LdQ: qd, LdC: kvd, Capacity: s27Cap, Eps: 1e-6},
		AttnParams{DoneWord: done, Rows: N, RowsWord: rowsWord, PosWord: sw.WPosition, Heads: s27Heads, KVHeads: s27KV, HeadDim: s27HD,
			LdQ: qd, LdO: qd, LdKV: kvd, Part: s27Part, Parts: parts, Scale: 1.0 / 16, Gate: 1, LdG: nq, GateStride: 2 * s27HD},
		mm(formats.NVFP4, 2*s27I, s27H, EpiSwiGLU), mm(formats.NVFP4, s27H, s27I, EpiAdd), mm(formats.NVFP4, s27V, s27H, EpiStore),
		am, sp, step,
		CopyParams{DoneWord: done, Rows: N, RowsWord: rowsWord, N: s27H, LdX: s27H, LdY: 3 * s27H},
		// The drafter (emitDraft, emitAppend): its context cache holds Capacity + B rows.
		RopeScaledParams{DoneWord: done, Rows: s27B, RowsWord: nw, PosWord: sw.WPosition, Heads: s27DHeads, HeadDim: s27DHD, RotDim: s27DHD,
			Ld: s27DHeads * s27DHD, Scale: 1},
		KVAppendParams{DoneWord: done, Rows: s27B, RowsWord: nw, PosWord: sw.WPosition, Width: s27DKV * s27DHD, LdK: s27DKV * s27DHD,
			LdV: (s27DHeads + 2*s27DKV) * s27DHD, LdC: s27DKV * s27DHD, Capacity: s27Cap + s27B},
		AttnParams{DoneWord: done, Rows: s27B, RowsWord: nw, PosWord: nwords + 1, Heads: s27DHeads, KVHeads: s27DKV, HeadDim: s27DHD,
			LdQ: s27DHeads * s27DHD, LdO: s27DHeads * s27DHD, LdKV: s27DKV * s27DHD, Part: s27Part, Parts: (s27Cap + s27B + s27Part - 1) / s27Part,
			Scale: float32(1 / math.Sqrt(s27DHD)), Block: 1},
		GatherParams{DoneWord: done, Rows: 1, RowsWord: nw, Width: s27Rank, Vocab: s27V, IdsOff: sw.WPending + 3, DType: 1, LdY: s27Rank},
		EwiseParams{DoneWord: done, Rows: s27B, RowsWord: nw, N: s27I, LdA: 2 * s27I, LdB: 2 * s27I, LdY: s27I, Mode: EwSwiGLU},
	}
	for mode := uint32(RoundBegin); mode <= RoundEnd; mode++ {
		r := RoundParams{DoneWord: nw, Mode: mode, Capacity: s27Cap, Block: s27B, RingCap: 4096, EOSCount: 2, WStep: sw.WStep,
			WPosition: sw.WPosition, WRows: sw.WRows, WPending: sw.WPending, WAnchor: sw.WAnchor, WAccepted: sw.WAccepted,
			WCommitted: sw.WCommitted, WDone: sw.WDone, WError: sw.WError, WRingHead: sw.WRingHead, WRingTail: sw.WRingTail,
			WStopAt: sw.WStopAt, WDraftLen: sw.WStopAt + 1, WDraftContext: sw.WStopAt + 2, WCommitRows: nwords, WBlockLast: nwords + 1,
			WIsRound: nwords + 2, WCount: nw, HasConf: 1, ConfStop: 0.5, ConfBias: -1}
		if mode == RoundEnd {
			r.WCount = r.WCommitRows
		}
		recs = append(recs, r)
	}
	return recs
}

// TestValidateBackendRecords: the records the CUDA program builder makes at the 27B's size pass,
// for 1 and 8 rows.
func TestValidateBackendRecords(t *testing.T) {
	for _, n := range []int{1, 8} {
		for i, r := range backendRecords(t, n) {
			if err := r.Validate(); err != nil {
				t.Errorf("%d rows: record %d (%T): %v", n, i, r, err)
			}
		}
	}
}

// mut returns a copy of base changed by f.
func mut[T any](base T, f func(*T)) T {
	f(&base)
	return base
}

// TestValidateRules: each rule has a record that breaks only it; the error names the record
// type and the field ("RMSNormParams.N") and the base records pass.
func TestValidateRules(t *testing.T) {
	sw, _ := stepWords(t, 8)
	sw.Capacity, sw.RingCap, sw.Block = 64, 4, 7
	rms := RMSNormParams{DoneWord: 40, Rows: 4, RowsWord: NoWord, Groups: 2, N: 64, LdX: 128, LdZ: 128, LdY: 128, Mode: RMSGated, Eps: 1e-6}
	ew := EwiseParams{DoneWord: NoWord, Rows: 3, RowsWord: NoWord, N: 100, LdA: 100, LdB: 200, LdY: 100, Mode: EwAdd}
	rope := RopeScaledParams{DoneWord: NoWord, Rows: 2, RowsWord: NoWord, PosWord: 1, Heads: 4, HeadDim: 64, RotDim: 32, Ld: 256, Scale: 1}
	g, err := blm.NewGeometry(blm.Spec{Format: formats.NVFP4, N: 4096, K: 1024})
	if err != nil {
		t.Fatal(err)
	}
	bl, err := NewBLMParams(g, 4, EpiSwiGLU)
	if err != nil {
		t.Fatal(err)
	}
	am := NewArgmaxParams(2, 10000)
	gdn := GDNParams{DoneWord: NoWord, Rows: 2, RowsWord: NoWord, KHeads: 2, VHeads: 4, KDim: 16, VDim: 32, WriteOut: 1,
		LdQK: 192, LdV: 192, LdGate: 4, LdOut: 128}
	conv := ConvParams{DoneWord: NoWord, Rows: 2, RowsWord: NoWord, Channels: 300, KernelSize: 4, WriteOut: 1, LdX: 300, LdY: 300}
	convN := ConvParams{DoneWord: NoWord, Rows: 2, RowsWord: NoWord, Channels: 384, KernelSize: 4, WriteOut: 1, LdX: 384, LdY: 384,
		NormGroups: 4, NormD: 64, NormPostGroups: 2, NormEps: 1e-6, NormPost: 0.125}
	at := AttnParams{DoneWord: NoWord, Rows: 3, RowsWord: NoWord, Pos: 70, PosWord: NoWord, Heads: 4, KVHeads: 2, HeadDim: 48,
		LdQ: 192, LdO: 192, LdKV: 96, Part: 32, Parts: 3, Scale: 0.1}
	kv := KVAppendParams{DoneWord: NoWord, Rows: 3, RowsWord: NoWord, Pos: 70, PosWord: NoWord, Width: 96, LdK: 96, LdV: 96, LdC: 96, Capacity: 80}
	prep := AttnPrepParams{DoneWord: NoWord, Rows: 3, RowsWord: NoWord, Pos: 70, PosWord: NoWord, Heads: 4, KVHeads: 2, HeadDim: 48, RotDim: 16,
		LdX: 576, QStride: 96, KOff: 384, VOff: 480, LdQ: 192, LdC: 96, Capacity: 80, Eps: 1e-6}
	ga := GatherParams{DoneWord: NoWord, Rows: 2, RowsWord: NoWord, Width: 70, Vocab: 50, DType: 1, LdY: 70}
	l2 := L2NormParams{DoneWord: NoWord, Rows: 2, RowsWord: NoWord, Groups: 3, D: 40, Ld: 120, Eps: 1e-6, Post: 1}
	smp, err := NewSampleParams(2, 1000, 0.8, 0, 1, 20, 0)
	if err != nil {
		t.Fatal(err)
	}
	rnd := RoundParams{DoneWord: NoWord, Mode: RoundAccept, Capacity: 64, Block: 3, RingCap: 4, WStep: 0, WPosition: 1, WRows: 2, WPending: 3,
		WAnchor: 10, WAccepted: 11, WCommitted: 12, WDone: 13, WError: 14, WRingHead: 15, WRingTail: 16, WStopAt: 17, WDraftLen: 18,
		WDraftContext: 19, WCommitRows: 20, WBlockLast: 21, WIsRound: 22, WCount: NoWord}
	cp := CopyParams{DoneWord: NoWord, Rows: 2, RowsWord: NoWord, N: 10, LdX: 10, LdY: 30}

	cases := []struct {
		name string
		rec  validator
		want string // "" for a record that passes
	}{
		{"rmsnorm ok", rms, ""},
		{"rmsnorm rows 0", mut(rms, func(p *RMSNormParams) { p.Rows = 0 }), "RMSNormParams.Rows: is 0"},
		{"rmsnorm n 0", mut(rms, func(p *RMSNormParams) { p.N = 0 }), "RMSNormParams.N: is 0"},
		{"rmsnorm groups 0", mut(rms, func(p *RMSNormParams) { p.Groups = 0 }), "RMSNormParams.Groups: is 0"},
		{"rmsnorm mode", mut(rms, func(p *RMSNormParams) { p.Mode = 3 }), "RMSNormParams.Mode: is 3"},
		{"rmsnorm y rows overlap", mut(rms, func(p *RMSNormParams) { p.LdY = 64 }), "RMSNormParams.LdY: is 64 < Groups·N = 128"},
		{"rmsnorm x offsets wrap", mut(rms, func(p *RMSNormParams) { p.LdX = 1 << 31 }), "RMSNormParams.LdX: (Rows−1)·LdX + Groups·N = 6442451072"},
		{"rmsnorm z offsets wrap when gated", mut(rms, func(p *RMSNormParams) { p.LdZ = 1 << 31 }), "RMSNormParams.LdZ"},
		{"rmsnorm z unused when plain", mut(rms, func(p *RMSNormParams) { p.LdZ, p.Mode = 1<<31, RMSPlain }), ""},
		{"rmsnorm done word leaves no error word", mut(rms, func(p *RMSNormParams) { p.DoneWord = NoWord - 1 }), "RMSNormParams.DoneWord"},
		{"rmsnorm rows past grid y", mut(rms, func(p *RMSNormParams) { p.Rows, p.LdX, p.LdY, p.LdZ = 70000, 128, 128, 128 }), "RMSNormParams.Rows: gives a grid y dimension of 70000"},

		{"ewise ok", ew, ""},
		{"ewise n 0", mut(ew, func(p *EwiseParams) { p.N = 0 }), "EwiseParams.N: is 0"},
		{"ewise mode", mut(ew, func(p *EwiseParams) { p.Mode = 7 }), "EwiseParams.Mode"},
		{"ewise b wraps", mut(ew, func(p *EwiseParams) { p.LdB = 1<<31 + 1 }), "EwiseParams.LdB"},
		{"ewise y overlap", mut(ew, func(p *EwiseParams) { p.LdY = 50 }), "EwiseParams.LdY: is 50 < N = 100"},
		{"ewise broadcast input (LdA 0) is fine", mut(ew, func(p *EwiseParams) { p.LdA = 0 }), ""},

		{"rope ok", rope, ""},
		{"rope heads 0", mut(rope, func(p *RopeScaledParams) { p.Heads = 0 }), "RopeScaledParams.Heads: is 0"},
		{"rope odd rot", mut(rope, func(p *RopeScaledParams) { p.RotDim = 31 }), "RopeScaledParams.RotDim: is 31"},
		{"rope rot past head", mut(rope, func(p *RopeScaledParams) { p.RotDim = 66 }), "RopeScaledParams.RotDim: is 66 with HeadDim 64"},
		{"rope rot 0", mut(rope, func(p *RopeScaledParams) { p.RotDim = 0 }), "RopeScaledParams.RotDim"},
		{"rope rows overlap (in place)", mut(rope, func(p *RopeScaledParams) { p.Ld = 128 }), "RopeScaledParams.Ld: is 128 < Heads·HeadDim = 256"},
		{"rope scaled ok", RopeScaledParams{DoneWord: NoWord, Rows: 2, RowsWord: NoWord, Heads: 4, HeadDim: 64, RotDim: 64, Ld: 256, Scale: 1}, ""},
		{"rope scaled rot past head", RopeScaledParams{DoneWord: NoWord, Rows: 2, RowsWord: NoWord, Heads: 4, HeadDim: 64, RotDim: 128, Ld: 256, Scale: 1}, "RopeScaledParams.RotDim"},

		{"blm ok", bl, ""},
		{"blm rows 17", mut(bl, func(p *BLMParams) { p.Rows = 17 }), "BLMParams.Rows: is 17, want 1 to 16"},
		{"blm rows 0", mut(bl, func(p *BLMParams) { p.Rows = 0 }), "BLMParams.Rows: is 0"},
		{"blm lanes", mut(bl, func(p *BLMParams) { p.Lanes = 3 }), "BLMParams.Lanes: is 3"},
		{"blm stripe short", mut(bl, func(p *BLMParams) { p.Stripe = 1 }), "BLMParams.Stripe"},
		{"blm payload past unit", mut(bl, func(p *BLMParams) { p.Payload = 16*p.UnitWords + 1 }), "BLMParams.Payload"},
		{"blm blocks", mut(bl, func(p *BLMParams) { p.Blocks++ }), "BLMParams.Blocks: is 257, want ⌈N/16⌉ = 256"},
		{"blm swiglu n", mut(bl, func(p *BLMParams) { p.N, p.Blocks = 4088, 256 }), "BLMParams.N: is 4088 with the SwiGLU epilogue"},
		{"blm epilogue", mut(bl, func(p *BLMParams) { p.Epilogue = 3 }), "BLMParams.Epilogue"},
		{"blm parts 3", mut(bl, func(p *BLMParams) { p.Parts = 3 }), "BLMParams.Parts: is 3"},
		{"blm clusters 0 (one)", mut(bl, func(p *BLMParams) { p.Clusters = 0 }), ""},
		{"blm clusters 9", mut(bl, func(p *BLMParams) { p.Clusters = 9 }), "BLMParams.Clusters: is 9, want 0 to 8"},
		{"blm cluster split ok", bl.WithClusters(), ""},
		{"blm parts 8", mut(bl, func(p *BLMParams) { p.Parts = 8 }), "BLMParams.Parts: is 8"},
		{"blm parts 0", mut(bl, func(p *BLMParams) { p.Parts = 0 }), "BLMParams.Parts: is 0"},
		{"blm warp blocks 3", mut(bl, func(p *BLMParams) { p.WarpBlocks = 3 }), "BLMParams.WarpBlocks: is 3"},
		{"blm y overlap", mut(bl, func(p *BLMParams) { p.LdY = 1000 }), "BLMParams.LdY: is 1000 < the outputs per row = 2048"},
		{"blm x wraps", mut(bl, func(p *BLMParams) { p.LdX = 1 << 31 }), "BLMParams.LdX"},
		{"blm matrix ≥ 4 GiB", mut(bl, func(p *BLMParams) { p.Blocks, p.N, p.Epilogue, p.LdY = 1<<20, 1<<24, EpiStore, 1<<24 }), "BLMParams.Blocks: the matrix bytes"},

		{"argmax ok", am, ""},
		{"argmax n 0", mut(am, func(p *ArgmaxParams) { p.N = 0; p.Parts = 0 }), "ArgmaxParams.N: is 0"},
		{"argmax chunk 0", mut(am, func(p *ArgmaxParams) { p.Chunk = 0 }), "ArgmaxParams.Chunk: is 0"},
		{"argmax parts miss values", mut(am, func(p *ArgmaxParams) { p.Parts = 2 }), "ArgmaxParams.Parts: is 2, want ⌈N/Chunk⌉ = 3"},
		{"argmax parts past n", mut(am, func(p *ArgmaxParams) { p.Parts = 4 }), "ArgmaxParams.Parts: is 4"},
		{"argmax out wraps", mut(am, func(p *ArgmaxParams) { p.OutOff = NoWord }), "ArgmaxParams.OutOff"},
		{"argmax x wraps", mut(am, func(p *ArgmaxParams) { p.Ld = 1 << 31; p.Rows = 3 }), "ArgmaxParams.Ld"},

		{"gdn ok", gdn, ""},
		{"gdn kdim 0", mut(gdn, func(p *GDNParams) { p.KDim = 0 }), "GDNParams.KDim: is 0"},
		{"gdn kheads 0", mut(gdn, func(p *GDNParams) { p.KHeads = 0 }), "GDNParams.KHeads: is 0"},
		{"gdn vheads not multiple", mut(gdn, func(p *GDNParams) { p.VHeads = 3 }), "GDNParams.VHeads: is 3 with 2 key heads"},
		{"gdn kheads above vheads", mut(gdn, func(p *GDNParams) { p.KHeads = 8 }), "GDNParams.VHeads: is 4 with 8 key heads"},
		{"gdn state wraps", mut(gdn, func(p *GDNParams) { p.KDim, p.VDim, p.LdOut, p.LdV = 1<<15, 1<<15, 4<<15, 4<<15 }), "GDNParams.VDim: the state"},
		{"gdn out overlap", mut(gdn, func(p *GDNParams) { p.LdOut = 64 }), "GDNParams.LdOut: is 64 < VHeads·VDim = 128"},
		{"gdn out unused without WriteOut", mut(gdn, func(p *GDNParams) { p.LdOut, p.WriteOut = 0, 0 }), ""},
		{"gdn gates ok", mut(gdn, func(p *GDNParams) { p.Gates, p.LdAB = 1, 8 }), ""},
		{"gdn gates 2", mut(gdn, func(p *GDNParams) { p.Gates, p.LdAB = 2, 8 }), "GDNParams.Gates: is 2"},
		{"gdn gates ab past 32-bit offsets", mut(gdn, func(p *GDNParams) { p.Gates, p.LdAB, p.Rows = 1, 1<<31, 3 }), "GDNParams.LdAB"},
		{"gdn gates written rows overlap", mut(gdn, func(p *GDNParams) { p.Gates, p.LdAB, p.LdGate = 1, 8, 2 }), "GDNParams.LdGate: is 2"},
		{"gdn gates read rows may overlap", mut(gdn, func(p *GDNParams) { p.LdGate = 0 }), ""},
		{"gdn layers (the replay)", mut(gdn, func(p *GDNParams) { p.WriteOut, p.Layers, p.LayerQKV, p.LayerGate, p.LayerState = 0, 48, 384, 8, 8192 }), ""},
		{"gdn layers writing out", mut(gdn, func(p *GDNParams) { p.Layers, p.LayerQKV, p.LayerGate, p.LayerState = 2, 384, 8, 8192 }), "GDNParams.Layers: is 2 with WriteOut 1 and Gates 0"},
		{"gdn layers computing gates", mut(gdn, func(p *GDNParams) { p.WriteOut, p.Gates, p.LdAB, p.Layers, p.LayerState = 0, 1, 8, 2, 8192 }), "GDNParams.Layers: is 2 with WriteOut 0 and Gates 1"},
		{"gdn layers' states overlap", mut(gdn, func(p *GDNParams) { p.WriteOut, p.Layers, p.LayerState = 0, 2, 4095 }), "GDNParams.LayerState: is 4095 < the state's 2·VHeads·KDim·VDim = 4096"},
		{"gdn layers' inputs overlap", mut(gdn, func(p *GDNParams) { p.WriteOut, p.Layers, p.LayerQKV, p.LayerGate, p.LayerState = 0, 2, 0, 8, 8192 }), "GDNParams.LayerQKV: is 0 < the rows of q, k and v"},
		{"gdn layers' gates overlap", mut(gdn, func(p *GDNParams) { p.WriteOut, p.Layers, p.LayerQKV, p.LayerGate, p.LayerState = 0, 2, 384, 0, 8192 }), "GDNParams.LayerGate: is 0 < the rows of beta and g"},
		{"gdn layers' states wrap", mut(gdn, func(p *GDNParams) { p.WriteOut, p.Layers, p.LayerState = 0, 3, 1<<31 }), "GDNParams.LayerState: (Layers−1)·LayerState"},
		{"gdn layers' q, k, v wrap", mut(gdn, func(p *GDNParams) { p.WriteOut, p.Layers, p.LayerQKV, p.LayerState = 0, 3, 1<<31, 4096 }), "GDNParams.LayerQKV: (Layers−1)·LayerQKV"},
		{"gdn layers' gates wrap", mut(gdn, func(p *GDNParams) { p.WriteOut, p.Layers, p.LayerGate, p.LayerState = 0, 3, 1<<31, 4096 }), "GDNParams.LayerGate: (Layers−1)·LayerGate"},
		{"gdn layers past grid z", mut(gdn, func(p *GDNParams) { p.WriteOut, p.Layers, p.LayerState = 0, 65536, 4096 }), "GDNParams.Layers: gives a grid z dimension of 65536"},
		{"gdn stride with one layer", mut(gdn, func(p *GDNParams) { p.Layers, p.LayerState = 1, 4096 }), "GDNParams.Layers: is 1 with LayerQKV 0, LayerGate 0, LayerState 4096"},

		{"conv ok", conv, ""},
		{"conv kernel size 0", mut(conv, func(p *ConvParams) { p.KernelSize = 0 }), "ConvParams.KernelSize: is 0"},
		{"conv kernel size 1 (no history)", mut(conv, func(p *ConvParams) { p.KernelSize = 1 }), ""},
		{"conv channels 0", mut(conv, func(p *ConvParams) { p.Channels = 0 }), "ConvParams.Channels: is 0"},
		{"conv state wraps", mut(conv, func(p *ConvParams) { p.KernelSize = 1 << 23 }), "ConvParams.KernelSize: the state"},
		{"conv kernel too large", mut(conv, func(p *ConvParams) { p.KernelSize = ConvMaxKernel + 1 }), "ConvParams.KernelSize: is 9, want ≤ 8"},
		{"conv y overlap", mut(conv, func(p *ConvParams) { p.LdY = 299 }), "ConvParams.LdY: is 299"},
		{"conv norm", mut(convN, func(p *ConvParams) {}), ""},
		{"conv norm without output", mut(convN, func(p *ConvParams) { p.WriteOut = 0 }), "ConvParams.NormGroups: is 4 without WriteOut"},
		{"conv norm width 96", mut(convN, func(p *ConvParams) { p.NormD = 96 }), "ConvParams.NormD: is 96"},
		{"conv norm width 256 (not l2norm's order)", mut(convN, func(p *ConvParams) { p.NormD, p.NormGroups, p.Channels, p.LdX, p.LdY = 256, 1, 256, 256, 256 }), "ConvParams.NormD: is 256"},
		{"conv norm partial threadgroup", mut(convN, func(p *ConvParams) { p.NormGroups = 3 }), "ConvParams.NormGroups: is 3 groups of 64"},
		{"conv norm past the channels", mut(convN, func(p *ConvParams) { p.NormGroups = 8 }), "ConvParams.NormGroups: is 8 groups of 64"},
		{"conv norm post groups", mut(convN, func(p *ConvParams) { p.NormPostGroups = 5 }), "ConvParams.NormPostGroups: is 5"},
		{"conv norm eps 0", mut(convN, func(p *ConvParams) { p.NormEps = 0 }), "ConvParams.NormEps: is 0"},
		{"conv norm post NaN", mut(convN, func(p *ConvParams) { p.NormPost = float32(math.NaN()) }), "ConvParams.NormPost: is NaN"},
		{"conv norm fields without the norm", mut(conv, func(p *ConvParams) { p.NormD = 64 }), "ConvParams.NormGroups: is 0 with NormD 64"},
		{"conv ab", mut(convN, func(p *ConvParams) {
			p.ABOut, p.ABIn, p.ABLdX, p.ABLdY, p.ABNorm, p.ABEps = 96, 5120, 5120, 96, 1, 1e-6
		}), ""},
		{"conv ab odd inputs", mut(conv, func(p *ConvParams) { p.ABOut, p.ABIn, p.ABLdX, p.ABLdY = 96, 63, 64, 96 }), "ConvParams.ABIn: is 63 with ABLdX 64"},
		{"conv ab in 0", mut(conv, func(p *ConvParams) { p.ABOut, p.ABLdY = 96, 96 }), "ConvParams.ABIn: is 0"},
		{"conv ab weights wrap", mut(conv, func(p *ConvParams) { p.ABOut, p.ABIn, p.ABLdX, p.ABLdY = 1<<16, 1<<17, 1<<17, 1<<16 }), "ConvParams.ABIn: the weights ABOut·ABIn"},
		{"conv ab rows overlap", mut(conv, func(p *ConvParams) { p.ABOut, p.ABIn, p.ABLdX, p.ABLdY = 96, 64, 64, 95 }), "ConvParams.ABLdY: is 95"},
		{"conv ab norm 2", mut(conv, func(p *ConvParams) { p.ABOut, p.ABIn, p.ABLdX, p.ABLdY, p.ABNorm, p.ABEps = 96, 64, 64, 96, 2, 1e-6 }), "ConvParams.ABNorm: is 2"},
		{"conv ab norm eps 0", mut(conv, func(p *ConvParams) { p.ABOut, p.ABIn, p.ABLdX, p.ABLdY, p.ABNorm = 96, 64, 64, 96, 1 }), "ConvParams.ABEps: is 0"},
		{"conv ab fields without the product", mut(conv, func(p *ConvParams) { p.ABIn = 64 }), "ConvParams.ABOut: is 0 with ABIn 64"},
		{"conv layers (the replay)", mut(conv, func(p *ConvParams) { p.WriteOut, p.Layers, p.LayerX, p.LayerState = 0, 48, 600, 1800 }), ""},
		{"conv layers without state", mut(conv, func(p *ConvParams) { p.WriteOut, p.KernelSize, p.Layers, p.LayerX = 0, 1, 2, 600 }), ""},
		{"conv layers writing out", mut(conv, func(p *ConvParams) { p.Layers, p.LayerX, p.LayerState = 2, 600, 1800 }), "ConvParams.Layers: is 2 with WriteOut 1, NormGroups 0 and ABOut 0"},
		{"conv layers with the norm", mut(convN, func(p *ConvParams) { p.Layers, p.LayerX, p.LayerState = 2, 768, 2304 }), "ConvParams.Layers: is 2 with WriteOut 1, NormGroups 4 and ABOut 0"},
		{"conv layers' states overlap", mut(conv, func(p *ConvParams) { p.WriteOut, p.Layers, p.LayerX, p.LayerState = 0, 2, 600, 1799 }), "ConvParams.LayerState: is 1799 < the state's 2·(KernelSize−1)·Channels = 1800"},
		{"conv layers' inputs overlap", mut(conv, func(p *ConvParams) { p.WriteOut, p.Layers, p.LayerX, p.LayerState = 0, 2, 0, 1800 }), "ConvParams.LayerX: is 0 < the rows of x"},
		{"conv layers' states wrap", mut(conv, func(p *ConvParams) { p.WriteOut, p.Layers, p.LayerState = 0, 3, 1<<31 }), "ConvParams.LayerState: (Layers−1)·LayerState"},
		{"conv layers' x wraps", mut(conv, func(p *ConvParams) { p.WriteOut, p.Layers, p.LayerX, p.LayerState = 0, 3, 1<<31, 1800 }), "ConvParams.LayerX: (Layers−1)·LayerX"},
		{"conv stride with one layer", mut(conv, func(p *ConvParams) { p.LayerX = 600 }), "ConvParams.Layers: is 0 with LayerX 600, LayerState 0"},

		{"attn ok", at, ""},
		{"attn block ok", mut(at, func(p *AttnParams) { p.Block = 1 }), ""},
		{"attn block 2", mut(at, func(p *AttnParams) { p.Block = 2 }), "AttnParams.Block: is 2"},
		{"attn block at the partitions' end", mut(at, func(p *AttnParams) { p.Block, p.Pos = 1, 96 }), "AttnParams.Parts: Parts·Part = 96 keys ≤ Pos = 96"},
		{"attn block of rows past Pos", mut(at, func(p *AttnParams) { p.Block, p.Pos = 1, 95 }), ""},
		{"attn part 129", mut(at, func(p *AttnParams) { p.Part = 129 }), "AttnParams.Part: is 129 keys, want 1 to 128"},
		{"attn part 0", mut(at, func(p *AttnParams) { p.Part = 0 }), "AttnParams.Part: is 0 keys"},
		{"attn parts do not cover a fixed position", mut(at, func(p *AttnParams) { p.Parts = 2 }), "AttnParams.Parts: Parts·Part = 64 keys < Pos + Rows = 73"},
		{"attn dynamic position: the kernels' guard", mut(at, func(p *AttnParams) { p.Parts, p.PosWord = 2, 1 }), ""},
		{"attn heads not multiple", mut(at, func(p *AttnParams) { p.Heads = 5; p.LdQ, p.LdO = 240, 240 }), "AttnParams.Heads: is 5 with 2 KV heads"},
		{"attn kvheads above heads", mut(at, func(p *AttnParams) { p.KVHeads = 8 }), "AttnParams.Heads: is 4 with 8 KV heads"},
		{"attn headdim 0", mut(at, func(p *AttnParams) { p.HeadDim = 0 }), "AttnParams.HeadDim: is 0"},
		{"attn parts past grid z", mut(at, func(p *AttnParams) { p.Parts = 70000 }), "AttnParams.Parts: gives a grid z dimension of 70000"},
		{"attn cache wraps", mut(at, func(p *AttnParams) { p.Part, p.Parts, p.LdKV = 128, 60000, 1024 }), "AttnParams.LdKV"},
		{"attn out overlap", mut(at, func(p *AttnParams) { p.LdO = 100 }), "AttnParams.LdO: is 100"},

		{"kv ok", kv, ""},
		{"kv width 0", mut(kv, func(p *KVAppendParams) { p.Width = 0 }), "KVAppendParams.Width: is 0"},
		{"kv cache rows overlap", mut(kv, func(p *KVAppendParams) { p.LdC = 48 }), "KVAppendParams.LdC: is 48 < Width = 96"},
		{"kv capacity 0", mut(kv, func(p *KVAppendParams) { p.Capacity = 0 }), "KVAppendParams.Capacity: is 0"},
		{"kv fixed position past the caches", mut(kv, func(p *KVAppendParams) { p.Pos = 78 }), "KVAppendParams.Capacity: is 80 < Pos + Rows = 81"},
		{"kv dynamic position: the kernel's guard", mut(kv, func(p *KVAppendParams) { p.Pos, p.PosWord = 78, 1 }), ""},
		{"kv caches wrap", mut(kv, func(p *KVAppendParams) { p.Capacity = 1 << 26 }), "KVAppendParams.LdC: (Capacity−1)·LdC + Width"},
		{"prep valid", prep, ""},
		{"prep head too wide", mut(prep, func(p *AttnPrepParams) { p.HeadDim, p.RotDim = 520, 16 }), "AttnPrepParams.HeadDim: is 520, want 1 to 512"},
		{"prep odd rotary", mut(prep, func(p *AttnPrepParams) { p.RotDim = 15 }), "AttnPrepParams.RotDim: is 15 with HeadDim 48"},
		{"prep heads wrap the grid", mut(prep, func(p *AttnPrepParams) { p.Heads, p.KVHeads = 1<<31, 1<<31 }), "AttnPrepParams.KVHeads: Heads + KVHeads = 4294967296 threadgroups"},
		{"prep no kv heads", mut(prep, func(p *AttnPrepParams) { p.KVHeads = 0 }), "AttnPrepParams.KVHeads: is 0"},
		{"prep query heads wrap", mut(prep, func(p *AttnPrepParams) { p.QStride = 1 << 31 }), "AttnPrepParams.QStride: (Rows−1)·LdX + QOff + (Heads−1)·QStride + HeadDim"},
		{"prep value heads wrap", mut(prep, func(p *AttnPrepParams) { p.VOff = 1<<32 - 10 }), "AttnPrepParams.VOff: (Rows−1)·LdX + VOff + KVHeads·HeadDim"},
		{"prep q rows overlap", mut(prep, func(p *AttnPrepParams) { p.LdQ = 100 }), "AttnPrepParams.LdQ: is 100 < Heads·HeadDim = 192"},
		{"prep cache rows overlap", mut(prep, func(p *AttnPrepParams) { p.LdC = 48 }), "AttnPrepParams.LdC: is 48 < KVHeads·HeadDim = 96"},
		{"prep fixed position past the caches", mut(prep, func(p *AttnPrepParams) { p.Pos = 78 }), "AttnPrepParams.Capacity: is 80 < Pos + Rows = 81"},
		{"prep dynamic position: the kernel's guard", mut(prep, func(p *AttnPrepParams) { p.Pos, p.PosWord = 78, 1 }), ""},
		{"attn gate 2", mut(at, func(p *AttnParams) { p.Gate = 2 }), "AttnParams.Gate: is 2, want ≤ 1"},
		{"attn gate wraps", mut(at, func(p *AttnParams) { p.Gate, p.LdG, p.GateStride = 1, 1<<31, 96 }), "AttnParams.LdG: (Rows−1)·LdG + (Heads−1)·GateStride + HeadDim"},

		{"gather ok", ga, ""},
		{"gather dtype", mut(ga, func(p *GatherParams) { p.DType = 2 }), "GatherParams.DType: is 2"},
		{"gather vocab 0", mut(ga, func(p *GatherParams) { p.Vocab = 0 }), "GatherParams.Vocab: is 0"},
		// The 27B's embedding as f32: 248320·5120·4 bytes ≥ 4 GiB (the 4u·e of ops/gather.kern wraps).
		{"gather f32 table ≥ 4 GiB", mut(ga, func(p *GatherParams) { p.Vocab, p.Width, p.LdY, p.DType = s27V, s27H, s27H, 0 }), "GatherParams.Vocab: the table bytes Vocab·Width·element size = 5085593600"},
		{"gather bf16 table of the 27B", mut(ga, func(p *GatherParams) { p.Vocab, p.Width, p.LdY = s27V, s27H, s27H }), ""},
		{"gather ids wrap", mut(ga, func(p *GatherParams) { p.IdsOff = NoWord }), "GatherParams.IdsOff"},
		{"gather y overlap", mut(ga, func(p *GatherParams) { p.LdY = 10 }), "GatherParams.LdY: is 10"},

		{"l2 ok", l2, ""},
		{"l2 d 0", mut(l2, func(p *L2NormParams) { p.D = 0 }), "L2NormParams.D: is 0"},
		{"l2 rows overlap", mut(l2, func(p *L2NormParams) { p.Ld = 100 }), "L2NormParams.Ld: is 100 < Groups·D = 120"},
		{"l2 post groups", mut(l2, func(p *L2NormParams) { p.PostGroups = 4 }), "L2NormParams.PostGroups: is 4, more than Groups = 3"},
		{"l2 post unused", mut(l2, func(p *L2NormParams) { p.Post = 0.5 }), "L2NormParams.PostGroups: is 0 with Post = 0.5"},

		{"step ok", sw, ""},
		{"step done word", mut(sw, func(p *StepParams) { p.DoneWord = p.WDone }), "StepParams.DoneWord: is"},
		{"step ring cap 0", mut(sw, func(p *StepParams) { p.RingCap = 0 }), "StepParams.RingCap: is 0"},
		{"step capacity 0", mut(sw, func(p *StepParams) { p.Capacity = 0 }), "StepParams.Capacity: is 0"},
		{"step mode", mut(sw, func(p *StepParams) { p.Mode = 3 }), "StepParams.Mode: is 3"},
		{"step word NoWord", mut(sw, func(p *StepParams) { p.WError = NoWord }), "StepParams.WError: is NoWord"},
		{"step words shared", mut(sw, func(p *StepParams) { p.WError = p.WDone }), "StepParams.WError: is word"},
		{"step word inside Pending", mut(sw, func(p *StepParams) { p.WAnchor = p.WPending + 3 }), "StepParams.WAnchor: is word"},
		{"step block past Pending words", mut(sw, func(p *StepParams) { p.Block = 20 }), "inside the Pending words"},
		{"step capacity + block wraps", mut(sw, func(p *StepParams) { p.Capacity = NoWord - 3 }), "StepParams.Block: Capacity + Block + 1"},

		{"sample ok", smp, ""},
		{"sample n 2^24", mut(smp, func(p *SampleParams) { p.N, p.Ld = 1<<24, 1<<24 }), "SampleParams.N"},
		{"sample seed word", mut(smp, func(p *SampleParams) { p.SeedWord = NoWord }), "SampleParams.SeedWord"},
		{"sample temperature 0", mut(smp, func(p *SampleParams) { p.Temp = 0 }), "SampleParams.Temp"},
		{"sample float64 temperature NaN", mut(smp, func(p *SampleParams) { p.TempLo, p.TempHi = 1, 0x7FF80000 }), "SampleParams.Temp"},
		{"sample top-p 0", mut(smp, func(p *SampleParams) { p.TopP = 0 }), "SampleParams.TopP"},
		{"sample out wraps", mut(smp, func(p *SampleParams) { p.OutOff = NoWord }), "SampleParams.OutOff"},

		{"round ok", rnd, ""},
		{"round block 0", mut(rnd, func(p *RoundParams) { p.Block = 0 }), "RoundParams.Block: is 0"},
		{"round ring cap 0", mut(rnd, func(p *RoundParams) { p.RingCap = 0 }), "RoundParams.RingCap: is 0"},
		{"round mode", mut(rnd, func(p *RoundParams) { p.Mode = 5 }), "RoundParams.Mode: is 5"},
		{"round done word", mut(rnd, func(p *RoundParams) { p.DoneWord = 13 }), "RoundParams.DoneWord"},
		{"round aux word NoWord", mut(rnd, func(p *RoundParams) { p.WIsRound = NoWord }), "RoundParams.WIsRound: is NoWord"},
		{"round words shared", mut(rnd, func(p *RoundParams) { p.WBlockLast = p.WCommitRows }), "RoundParams.WBlockLast: is word 20, the same as WCommitRows"},
		{"round end needs its count word", mut(rnd, func(p *RoundParams) { p.Mode = RoundEnd }), "RoundParams.WCount: is NoWord"},
		{"round end counts the commit rows", mut(rnd, func(p *RoundParams) { p.Mode, p.WCount = RoundEnd, p.WCommitRows }), ""},
		{"round conf stop NaN", mut(rnd, func(p *RoundParams) { p.ConfStop = float32(math.NaN()) }), "RoundParams.ConfStop"},

		{"copy ok", cp, ""},
		{"copy n 0", mut(cp, func(p *CopyParams) { p.N = 0 }), "CopyParams.N: is 0"},
		{"copy y overlap", mut(cp, func(p *CopyParams) { p.LdY = 5 }), "CopyParams.LdY: is 5"},
	}
	for _, c := range cases {
		err := c.rec.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && err == nil:
			t.Errorf("%s: no error, want one containing %q", c.name, c.want)
		case c.want != "" && !strings.Contains(err.Error(), c.want):
			t.Errorf("%s: error %q, want one containing %q", c.name, err, c.want)
		}
	}
}

// TestGuardCodesMatchKernels: the GUARD_* codes of ops/common.kern are the Guard* constants,
// distinct, and clear of runtime/backend's session codes.
func TestGuardCodesMatchKernels(t *testing.T) {
	want := map[string]int{"GUARD_STEP_ROWS": GuardStepRows, "GUARD_STEP_POSITION": GuardStepPosition,
		"GUARD_ROUND_DRAFTS": GuardRoundDrafts, "GUARD_ROUND_POSITION": GuardRoundPosition,
		"GUARD_ATTN_PARTIAL": GuardAttnPartial, "GUARD_ATTN_MERGE": GuardAttnMerge, "GUARD_KV_APPEND": GuardKVAppend,
		"GUARD_BLM_CLUSTER": GuardBLMCluster, "GUARD_BLM_LAYOUT": GuardBLMLayout,
		"GUARD_BLMX_TILES": GuardBLMXTiles}
	got := map[string]int{}
	for _, m := range regexp.MustCompile(`(?m)^#define (GUARD_[A-Z_]+) (\d+)u$`).FindAllStringSubmatch(mustRead("ops/common.kern"), -1) {
		v, _ := strconv.Atoi(m[2])
		got[m[1]] = v
	}
	if len(got) != len(want) {
		t.Fatalf("ops/common.kern defines %v, want the %d codes %v", got, len(want), want)
	}
	seen := map[int]string{backend.ErrRingOverflow: "ErrRingOverflow", backend.ErrContextFull: "ErrContextFull", backend.ErrNone: "ErrNone"}
	for n, v := range want {
		if got[n] != v {
			t.Errorf("%s = %d in ops/common.kern, %d in validate.go", n, got[n], v)
		}
		if o, ok := seen[v]; ok {
			t.Errorf("%s = %d, the same as %s", n, v, o)
		}
		seen[v] = n
	}
}

// TestErrorWordFollowsDone: the guards of the kernels with a done word write the Error word at
// DoneWord + 1, which holds for runtime/backend.StepState's binary layout.
func TestErrorWordFollowsDone(t *testing.T) {
	p, _ := stepWords(t, 8)
	if p.WError != p.WDone+1 {
		t.Fatalf("StepState: Error is word %d, Done word %d: the guards write ctl[DoneWord + 1]", p.WError, p.WDone)
	}
}

// TestBLMClusterSplit pins the cluster work split measured on the H200 for the 27B's matrices
// (docs/performance.md §3.3e) and checks that each record it makes validates, with a grid of
// whole clusters.
func TestBLMClusterSplit(t *testing.T) {
	for _, c := range []struct {
		name   string
		n, k   int64
		f      formats.Format
		split  [3]uint32
		groups uint32
	}{
		{"lm_head", 248320, 5120, formats.NVFP4, [3]uint32{1, 2, 2}, 1940},
		{"gate_up", 34816, 5120, formats.NVFP4, [3]uint32{1, 2, 4}, 272},
		{"in_proj_qkvz", 16384, 5120, formats.FP8, [3]uint32{2, 2, 2}, 256},
		{"attention qkv", 14336, 5120, formats.FP8, [3]uint32{2, 2, 2}, 224},
		{"in_proj_qkv", 10240, 5120, formats.FP8, [3]uint32{1, 2, 4}, 80},
		{"down", 5120, 17408, formats.NVFP4, [3]uint32{1, 2, 8}, 40},
		{"out_proj", 5120, 6144, formats.FP8, [3]uint32{1, 2, 8}, 40},
		{"in_proj_ab", 96, 5120, formats.BF16, [3]uint32{4, 1, 8}, 6},
		{"markov_w2 (K < BLMClusterMinK: no cluster)", 248320, 256, formats.NVFP4, [3]uint32{1, 2, 1}, 1940},
	} {
		g, err := blm.NewGeometry(blm.Spec{Format: c.f, N: c.n, K: c.k})
		if err != nil {
			t.Fatal(err)
		}
		for _, rows := range []int{1, 8} {
			p, err := NewBLMParams(g, rows, EpiStore)
			if err != nil {
				t.Fatal(err)
			}
			if p.Clusters != 1 {
				t.Fatalf("%s: NewBLMParams gives Clusters %d, want 1 (Metal takes it as it is)", c.name, p.Clusters)
			}
			p = p.WithClusters()
			if got := [3]uint32{p.Parts, p.WarpBlocks, p.Clusters}; got != c.split {
				t.Errorf("%s (%d blocks), %d rows: split %v, want %v", c.name, g.Blocks, rows, got, c.split)
			}
			if err := p.Validate(); err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			if gr, cd := p.Grid(), p.ClusterDims(); gr != [3]uint32{c.groups * c.split[2], 1, 1} || cd != [3]uint32{c.split[2], 1, 1} {
				t.Errorf("%s: grid %v in clusters %v, want %d clusters of %d", c.name, gr, cd, c.groups, c.split[2])
			}
		}
	}
}
