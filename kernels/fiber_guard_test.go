package kernels

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"

	"lithos/runtime/backend"
	"lithos/runtime/model"
)

// The kernels' guards on dynamic values (validate.go), run on the fiber runtime: a value out of
// range sets the Error and Done words and leaves every buffer as it was (canaries: buffers
// filled with a pattern the kernel would overwrite, and cache rows past the logical capacity).

// canary returns n bytes of a pattern no kernel writes (0xA5…: float32 −2.9e-16, u32 0xA5A5A5A5).
func canary(n int) []byte { return bytes.Repeat([]byte{0xA5}, n) }

// TestFiberAttnGuard: attention rows whose keys pass the Parts·Part keys the partitions cover.
func TestFiberAttnGuard(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 42))
	s := model.AttnShape{Heads: 2, KVHeads: 1, HeadDim: 32}
	const rows, part, parts, extra = 3, 16, 2, 8 // the partitions cover 32 keys; 8 more cache rows
	const doneW, posW = 10, 1
	kvRow := s.KVHeads * s.HeadDim
	cover := part * parts
	kc := randVec(r, (cover+extra)*kvRow, 1)
	vc := randVec(r, (cover+extra)*kvRow, 1)
	q := randVec(r, rows*s.Heads*s.HeadDim, 1)
	scale := float32(1 / math.Sqrt(float64(s.HeadDim)))
	base := AttnParams{DoneWord: doneW, Rows: rows, RowsWord: NoWord, PosWord: posW, Heads: 2, KVHeads: 1, HeadDim: 32,
		LdQ: 64, LdO: 64, LdKV: uint32(kvRow), Part: part, Parts: parts, Scale: scale}
	nScr := rows * s.Heads * parts
	type run struct {
		ctl                  []uint32
		pm, pl, po, out      []byte
		kc, vc               []byte
		pmB, plB, poB, outB  int
		kcB, vcB, ctlB, recB int
	}
	launch := func(t *testing.T, p AttnParams, pos uint32, partial, merge bool) run {
		t.Helper()
		ctl := make([]uint32, 64)
		ctl[posW] = pos
		var j job
		var x run
		x.ctlB = j.buf(u32Bytes(ctl))
		x.recB = j.buf(Record(p))
		x.kcB, x.vcB = j.f32(kc), j.f32(vc)
		x.pmB, x.plB, x.poB = j.buf(canary(4*nScr)), j.buf(canary(4*nScr)), j.buf(canary(4*nScr*s.HeadDim))
		x.outB = j.buf(canary(4 * rows * s.Heads * s.HeadDim))
		if partial {
			j.launch(t, "lithos_attn_partial", p.GridPartial(), x.ctlB, x.recB, j.f32(q), x.kcB, x.vcB, x.pmB, x.plB, x.poB)
		}
		if merge {
			j.launch(t, "lithos_attn_merge", p.GridMerge(), x.ctlB, x.recB, x.pmB, x.plB, x.poB, x.outB, x.outB)
		}
		res := j.mustRun(t)
		x.ctl = bytesU32(res[x.ctlB])
		x.pm, x.pl, x.po, x.out, x.kc, x.vc = res[x.pmB], res[x.plB], res[x.poB], res[x.outB], res[x.kcB], res[x.vcB]
		return x
	}
	untouched := func(t *testing.T, x run, what string) {
		t.Helper()
		for _, b := range []struct {
			name string
			got  []byte
			want []byte
		}{{"pm", x.pm, canary(len(x.pm))}, {"pl", x.pl, canary(len(x.pl))}, {"po", x.po, canary(len(x.po))},
			{"out", x.out, canary(len(x.out))}, {"kc", x.kc, f32Bytes(kc)}, {"vc", x.vc, f32Bytes(vc)}} {
			if !bytes.Equal(b.got, b.want) {
				t.Errorf("%s: buffer %s was written", what, b.name)
			}
		}
	}
	ctlWant := func(pos, done, code uint32) []uint32 {
		w := make([]uint32, 64)
		w[posW], w[doneW], w[doneW+1] = pos, done, code
		return w
	}

	// In range: the last row's last key is key cover − 1, the last of the last partition.
	t.Run("boundary", func(t *testing.T) {
		p0 := uint32(cover - rows)
		x := launch(t, base, p0, true, true)
		if !equalU32(x.ctl, ctlWant(p0, 0, 0)) {
			t.Fatalf("step state %v, want untouched", x.ctl)
		}
		want := make([]float32, rows*s.Heads*s.HeadDim)
		if err := model.Attend(s, want, q, rows, int(p0), kc[:cover*kvRow], vc[:cover*kvRow], scale, model.DefaultKeyPartition); err != nil {
			t.Fatal(err)
		}
		closeTo(t, "attention at the boundary", bytesF32(x.out), want, 1e-5, 2e-6)
	})
	for _, c := range []struct {
		name            string
		p               AttnParams
		pos             uint32
		partial, merge  bool
		done, code, err uint32
	}{
		{"one key past the partitions", base, uint32(cover - rows + 1), true, true, 1, GuardAttnPartial, 0},
		{"position past the partitions", base, uint32(cover + 5), true, true, 1, GuardAttnPartial, 0},
		{"position near 2³² (no wrap)", base, 0xFFFFFFFE, true, true, 1, GuardAttnPartial, 0},
		{"merge alone", base, uint32(cover - rows + 1), false, true, 1, GuardAttnMerge, 0},
		{"part 0 (no division by zero)", mut(base, func(p *AttnParams) { p.Part = 0 }), 0, true, true, 1, GuardAttnPartial, 0},
		{"merge with part 0", mut(base, func(p *AttnParams) { p.Part = 0 }), 0, false, true, 1, GuardAttnMerge, 0},
		{"part 129", mut(base, func(p *AttnParams) { p.Part, p.Parts = 129, 1 }), 0, true, true, 1, GuardAttnPartial, 0},
		{"no done word: nowhere to report", mut(base, func(p *AttnParams) { p.DoneWord = NoWord }), uint32(cover), true, true, 0, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			x := launch(t, c.p, c.pos, c.partial, c.merge)
			if want := ctlWant(c.pos, c.done, c.code); !equalU32(x.ctl, want) {
				t.Fatalf("step state\n got %v\nwant %v", x.ctl, want)
			}
			untouched(t, x, c.name)
		})
	}
}

// roundWords returns a RoundParams with the step-state words of runtime/backend.StepState (TMax
// tmax) and the auxiliary words after it, and the words the ctl buffer needs.
func roundWords(t *testing.T, tmax int, block uint32) (RoundParams, int) {
	t.Helper()
	sw, ss := stepWords(t, tmax)
	ss.DraftLen, ss.DraftContext = 0xC0DE0001, 0xC0DE0002
	b, err := ss.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	w := bytesU32(b)
	var dl, dc uint32
	for i, v := range w {
		switch v {
		case 0xC0DE0001:
			dl = uint32(i)
		case 0xC0DE0002:
			dc = uint32(i)
		}
	}
	n := uint32(len(w))
	return RoundParams{DoneWord: NoWord, Mode: RoundAccept, Capacity: 64, Block: block, RingCap: 8, WStep: sw.WStep,
		WPosition: sw.WPosition, WRows: sw.WRows, WPending: sw.WPending, WAnchor: sw.WAnchor, WAccepted: sw.WAccepted,
		WCommitted: sw.WCommitted, WDone: sw.WDone, WError: sw.WError, WRingHead: sw.WRingHead, WRingTail: sw.WRingTail,
		WStopAt: sw.WStopAt, WDraftLen: dl, WDraftContext: dc, WCommitRows: n, WBlockLast: n + 1, WIsRound: n + 2,
		WCount: NoWord}, len(w) + 4
}

// TestFiberStepGuards: lithos_step with a Rows word outside [1, 1 + Block] (accept) or a commit
// past Capacity (accept, prefill), and lithos_round with too many drafts or a commit past
// Capacity: Error = the guard's code, Done = 1, nothing committed (Committed, Accepted,
// CommitRows 0), every other word, the ring and the stats as they were.
func TestFiberStepGuards(t *testing.T) {
	const tmax, ringCap = 8, 8
	type word struct{ w, v uint32 }
	type tc struct {
		name   string
		round  bool
		mode   uint32
		set    func(p *StepParams) []word // initial words (besides the base state)
		setR   func(p *RoundParams) []word
		expect func(p *StepParams) []word // words that change
		expR   func(p *RoundParams) []word
	}
	cases := []tc{
		{name: "accept rows 0", mode: StepAccept,
			set: func(p *StepParams) []word { return []word{{p.WRows, 0}} },
			expect: func(p *StepParams) []word {
				return []word{{p.WError, GuardStepRows}, {p.WDone, 1}, {p.WCommitted, 0}, {p.WAccepted, 0}}
			}},
		{name: "accept rows past 1 + Block", mode: StepAccept,
			set: func(p *StepParams) []word { return []word{{p.WRows, 2 + p.Block}} },
			expect: func(p *StepParams) []word {
				return []word{{p.WError, GuardStepRows}, {p.WDone, 1}, {p.WCommitted, 0}, {p.WAccepted, 0}}
			}},
		{name: "accept past capacity", mode: StepAccept,
			set: func(p *StepParams) []word { return []word{{p.WRows, 2}, {p.WPosition, p.Capacity - 1}} },
			expect: func(p *StepParams) []word {
				return []word{{p.WError, GuardStepPosition}, {p.WDone, 1}, {p.WCommitted, 0}, {p.WAccepted, 0}}
			}},
		{name: "prefill past capacity", mode: StepPrefill,
			set: func(p *StepParams) []word { return []word{{p.WRows, 3}, {p.WPosition, p.Capacity - 2}} },
			expect: func(p *StepParams) []word {
				return []word{{p.WError, GuardStepPosition}, {p.WDone, 1}, {p.WCommitted, 0}, {p.WAccepted, 0}}
			}},
		{name: "prefill position near 2³² (no wrap)", mode: StepPrefill,
			set: func(p *StepParams) []word { return []word{{p.WRows, 3}, {p.WPosition, 0xFFFFFFFE}} },
			expect: func(p *StepParams) []word {
				return []word{{p.WError, GuardStepPosition}, {p.WDone, 1}, {p.WCommitted, 0}, {p.WAccepted, 0}}
			}},
		{name: "prefill up to capacity is fine", mode: StepPrefill,
			set: func(p *StepParams) []word {
				return []word{{p.WRows, 3}, {p.WPosition, p.Capacity - 3}, {p.WPrefillLeft, 1}}
			},
			expect: func(p *StepParams) []word {
				return []word{{p.WPosition, p.Capacity}, {p.WCommitted, 3}, {p.WAccepted, 0}, {p.WStep, 4}}
			}},
		{name: "begin at position 2³² − 1: context full, not a wrap", mode: StepBegin,
			set:    func(p *StepParams) []word { return []word{{p.WPosition, 0xFFFFFFFF}} },
			expect: func(p *StepParams) []word { return []word{{p.WError, backend.ErrContextFull}, {p.WDone, 1}} }},
		{name: "round drafts past Block", round: true,
			setR: func(p *RoundParams) []word { return []word{{p.WIsRound, 1}, {p.WDraftLen, p.Block + 1}} },
			expR: func(p *RoundParams) []word {
				return []word{{p.WError, GuardRoundDrafts}, {p.WDone, 1}, {p.WCommitted, 0}, {p.WAccepted, 0}, {p.WCommitRows, 0}}
			}},
		{name: "round past capacity", round: true,
			setR: func(p *RoundParams) []word {
				return []word{{p.WIsRound, 1}, {p.WDraftLen, p.Block}, {p.WPosition, p.Capacity - p.Block}}
			},
			expR: func(p *RoundParams) []word {
				return []word{{p.WError, GuardRoundPosition}, {p.WDone, 1}, {p.WCommitted, 0}, {p.WAccepted, 0}, {p.WCommitRows, 0}}
			}},
		{name: "single row at capacity", round: true,
			setR: func(p *RoundParams) []word { return []word{{p.WIsRound, 0}, {p.WPosition, p.Capacity}} },
			expR: func(p *RoundParams) []word {
				return []word{{p.WError, GuardRoundPosition}, {p.WDone, 1}, {p.WCommitted, 0}, {p.WAccepted, 0}, {p.WCommitRows, 0}}
			}},
		{name: "single row up to capacity is fine", round: true,
			setR: func(p *RoundParams) []word {
				return []word{{p.WIsRound, 0}, {p.WPosition, p.Capacity - 1}, {p.WRingHead, 0}, {p.WRingTail, 0}}
			},
			expR: func(p *RoundParams) []word {
				return []word{{p.WPosition, p.Capacity}, {p.WCommitted, 1}, {p.WAccepted, 0}, {p.WCommitRows, 1}, {p.WStep, 4},
					{p.WRingHead, 1}, {p.WAnchor, 5}}
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sp, _ := stepWords(t, tmax)
			sp.Mode, sp.Capacity, sp.Block, sp.RingCap = c.mode, 64, tmax-1, ringCap
			rp, n := roundWords(t, tmax, 3)
			if n < int(sp.WStopAt)+1 {
				t.Fatal("round words")
			}
			ctl := make([]uint32, n)
			for i := range ctl {
				ctl[i] = 0x1000 + uint32(i) // every word distinct: a stray write shows
			}
			// A base state every case starts from: not done, no error, Committed/Accepted
			// non-zero (a guard zeroes them), Step 3, ring empty, no stop.
			base := []word{{sp.WDone, 0}, {sp.WError, 0}, {sp.WCommitted, 9}, {sp.WAccepted, 9}, {sp.WStep, 3},
				{sp.WPosition, 10}, {sp.WRingHead, 2}, {sp.WRingTail, 2}, {sp.WStopAt, 0}, {sp.WPrefillLeft, 0}, {sp.WRows, 1},
				{rp.WCommitRows, 9}, {rp.WDraftLen, 0}, {rp.WIsRound, 0}}
			var set, exp []word
			if c.round {
				set, exp = c.setR(&rp), c.expR(&rp)
			} else {
				set, exp = c.set(&sp), c.expect(&sp)
			}
			for _, w := range append(base, set...) {
				ctl[w.w] = w.v
			}
			want := append([]uint32(nil), ctl...)
			for _, w := range exp {
				want[w.w] = w.v
			}
			var j job
			cb := j.buf(u32Bytes(ctl))
			ring := canary(8 * ringCap)
			rb := j.buf(ring)
			targets, eos := j.buf(i32Bytes([]int32{5, 6, 7, 8})), j.buf(i32Bytes([]int32{99}))
			var stats []byte
			sb := -1
			if c.round {
				if err := rp.Validate(); err != nil {
					t.Fatal(err)
				}
				stats = canary(4 * RoundStatsWords(int(rp.Block)))
				// The fine single row counts itself in stats[1]; the guards touch nothing.
				sb = j.buf(stats)
				j.launch(t, "lithos_round", rp.Grid(), cb, j.buf(Record(rp)), targets, eos, rb, j.buf(canary(4*int(rp.Block))), sb)
			} else {
				if err := sp.Validate(); err != nil {
					t.Fatal(err)
				}
				j.launch(t, "lithos_step", sp.Grid(), cb, j.buf(Record(sp)), targets, eos, rb)
			}
			res := j.mustRun(t)
			if got := bytesU32(res[cb]); !equalU32(got, want) {
				for i := range got {
					if got[i] != want[i] {
						t.Errorf("word %d = %#x, want %#x", i, got[i], want[i])
					}
				}
				t.FailNow()
			}
			pushed := false
			for _, w := range exp {
				pushed = pushed || (w.w == sp.WRingHead && w.v != 2) || (c.round && w.w == rp.WRingHead)
			}
			if !pushed && !bytes.Equal(res[rb], ring) {
				t.Error("the ring was written")
			}
			if c.round {
				wantStats := append([]byte(nil), stats...)
				if pushed { // the single row that commits counts itself: stats[1] += 1
					w := bytesU32(wantStats)
					w[1]++
					wantStats = u32Bytes(w)
				}
				if !bytes.Equal(res[sb], wantStats) {
					t.Error("the stats were written")
				}
			}
		})
	}
}

// TestFiberKVAppendGuard: rows whose positions pass the caches' Capacity rows write nothing (the
// cache rows past Capacity are canaries) and set Error = GuardKVAppend, Done = 1; the rows up to
// Capacity are appended.
func TestFiberKVAppendGuard(t *testing.T) {
	const capacity, extra, width, rows = 12, 4, 40, 3
	const doneW, posW = 10, 1
	r := rand.New(rand.NewPCG(43, 44))
	k, v := randVec(r, rows*width, 1), randVec(r, rows*width, 1)
	p := KVAppendParams{DoneWord: doneW, Rows: rows, RowsWord: NoWord, PosWord: posW, Width: width, LdK: width, LdV: width, LdC: width,
		Capacity: capacity}
	for _, c := range []struct {
		name       string
		done       uint32
		pos        uint32
		code, flag uint32
	}{
		{"up to capacity", doneW, capacity - rows, 0, 0},
		{"one row past capacity", doneW, capacity - rows + 1, GuardKVAppend, 1},
		{"position near 2³² (no wrap)", doneW, 0xFFFFFFFF, GuardKVAppend, 1},
		{"no done word: nowhere to report", NoWord, capacity, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			q := p
			q.DoneWord = c.done
			ctl := make([]uint32, 64)
			ctl[posW] = c.pos
			cache := canary(4 * (capacity + extra) * width)
			var j job
			cb := j.buf(u32Bytes(ctl))
			kb, vb := j.buf(cache), j.buf(cache)
			j.launch(t, "lithos_kv_append", q.Grid(), cb, j.buf(Record(q)), j.f32(k), j.f32(v), kb, vb)
			res := j.mustRun(t)
			want := make([]uint32, 64)
			want[posW] = c.pos
			if c.done != NoWord {
				want[doneW], want[doneW+1] = c.flag, c.code
			}
			if got := bytesU32(res[cb]); !equalU32(got, want) {
				t.Fatalf("step state\n got %v\nwant %v", got, want)
			}
			for _, b := range []struct {
				name string
				got  []byte
				rows []float32
			}{{"kc", res[kb], k}, {"vc", res[vb], v}} {
				wantCache := append([]byte(nil), cache...)
				if c.code == 0 && c.done != NoWord {
					copy(wantCache[4*int(c.pos)*width:], f32Bytes(b.rows))
				}
				if !bytes.Equal(b.got, wantCache) {
					t.Errorf("%s: the cache is not as expected (appended rows only when in range, canaries past Capacity)", b.name)
				}
			}
		})
	}
}
