package cpu

import (
	"context"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"lithos/runtime/backend"
	"lithos/runtime/draft"
	"lithos/runtime/draft/drafttest"
	"lithos/runtime/model"
	"lithos/runtime/model/modeltest"
	"lithos/runtime/sample"
)

// bitsEqual requires a and b to be the same float32 values bit for bit.
func bitsEqual(t *testing.T, what string, a, b []float32) {
	t.Helper()
	if len(a) != len(b) {
		t.Fatalf("%s: %d and %d values", what, len(a), len(b))
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			t.Fatalf("%s: value %d is %v, want %v", what, i, a[i], b[i])
		}
	}
}

// sameSession requires the committed states of a and b to be bit-identical — step count,
// position, GDN slot, the committed slot's conv and recurrent states, the KV rows of the
// committed positions, the DSpark context rows — and the logits of one more token fed to each
// to be bit-identical too (the step is left uncommitted; the sessions are not used after).
func sameSession(t *testing.T, what string, a, b *Session) {
	t.Helper()
	sa, sb := a.State(), b.State()
	if sa.Step != sb.Step || sa.Position != sb.Position || sa.DraftContext != sb.DraftContext {
		t.Fatalf("%s: step %d position %d draft %d; want %d, %d, %d", what, sa.Step, sa.Position, sa.DraftContext, sb.Step, sb.Position, sb.DraftContext)
	}
	x, y := a.st, b.st
	if x.Pos() != y.Pos() || x.Slot() != y.Slot() || x.Slot() != int(sa.Step&1) {
		t.Fatalf("%s: model state at %d slot %d, want %d slot %d (step parity %d)", what, x.Pos(), x.Slot(), y.Pos(), y.Slot(), sa.Step&1)
	}
	for gi := 0; gi < x.GDNLayers(); gi++ {
		bitsEqual(t, what+": conv state", x.Conv(gi, x.Slot()), y.Conv(gi, y.Slot()))
		bitsEqual(t, what+": recurrent state", x.Recurrent(gi, x.Slot()), y.Recurrent(gi, y.Slot()))
	}
	for ai := 0; ai < x.AttentionLayers(); ai++ {
		ka, va, err := x.KV(ai, x.Pos())
		if err != nil {
			t.Fatal(err)
		}
		kb, vb, _ := y.KV(ai, y.Pos())
		bitsEqual(t, what+": K rows", ka, kb)
		bitsEqual(t, what+": V rows", va, vb)
	}
	if pa, ok := a.prop.(*dsparkProposer); ok {
		pb := b.prop.(*dsparkProposer)
		if pa.st.Len() != pb.st.Len() || pa.st.Len() != int(sa.Position) {
			t.Fatalf("%s: drafter contexts of %d and %d rows at position %d", what, pa.st.Len(), pb.st.Len(), sa.Position)
		}
		for l := range pa.d.Cfg.Layers {
			ka, va, _ := pa.st.Context(l)
			kb, vb, _ := pb.st.Context(l)
			bitsEqual(t, what+": drafter context K", ka, kb)
			bitsEqual(t, what+": drafter context V", va, vb)
		}
	}
	ctx := context.Background()
	la, err := a.m.Step(ctx, a.st, []int32{3}, false)
	if err != nil {
		t.Fatal(err)
	}
	lb, err := b.m.Step(ctx, b.st, []int32{3}, false)
	if err != nil {
		t.Fatal(err)
	}
	bitsEqual(t, what+": logits of the next token", la, lb)
}

// continueWith prefills p on s and decodes until n more tokens were sampled (StopAt), returning
// them.
func continueWith(t *testing.T, s *Session, p []int32, n int) []int32 {
	t.Helper()
	ss := s.State()
	ss.StopAt = ss.RingHead + uint32(n)
	ctx := context.Background()
	if err := s.Prefill(ctx, p); err != nil {
		t.Fatal(err)
	}
	got := s.Ring().Drain(ss, nil)
	for ss.Done == 0 {
		if err := s.Decode(ctx, 1); err != nil {
			t.Fatal(err)
		}
		got = s.Ring().Drain(ss, got)
	}
	if ss.Error != backend.ErrNone {
		t.Fatalf("generation stopped with error %d", ss.Error)
	}
	return got
}

func newSession(t *testing.T, tg *Target, opt backend.SessionOptions) *Session {
	t.Helper()
	if opt.Sampling.TopP == 0 {
		opt.Sampling.TopP = 1
	}
	s, err := tg.NewSession(opt)
	if err != nil {
		t.Fatal(err)
	}
	return s.(*Session)
}

// dsparkTarget is a random target (dsparkTargetConfig, seed 1) with the tiny DSpark head's BF16
// weights bound to it.
func dsparkTarget(t *testing.T) (*Target, DSpark) {
	t.Helper()
	m, err := modeltest.Random(dsparkTargetConfig(), 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	cfg := drafttest.Config(t)
	d, err := draft.New(cfg, drafttest.Weights(t, cfg, "bf16"), m.W.Embed, m.W.LMHead)
	if err != nil {
		t.Fatal(err)
	}
	return &Target{M: m}, DSpark{D: d}
}

// TestSnapshotRoundTrip: a session prefilled with a prompt's first part A without sampling
// (PrefillNoSample), copied (Snapshot) and restored into a new session and into a used one (at
// another position, step parity and ring head, done) continues with the rest B and the decode
// exactly as the uninterrupted session: the same tokens, and bit-identical committed states
// (GDN slot, conv and recurrent states, KV rows, drafter context rows) and next-token logits —
// on the packed golden target b (greedy and sampled) and on a random target with the tiny
// DSpark head (greedy, and sampled drafts at temperature 0.8), whose restored greedy output is
// also the plain decode's. PrefillNoSample(A) + Prefill(B) is Prefill(A ++ B) when A ends on a
// chunk boundary, bit for bit; the source session is unaffected by the copy.
func TestSnapshotRoundTrip(t *testing.T) {
	g := readGoldens(t, "b")
	prompt := g.ints(t, "prompt.11")
	_, mb := openGoldenTarget(t, "b")
	golden := &Target{M: mb}
	dtg, dsp := dsparkTarget(t)
	rng := rand.New(rand.NewPCG(61, 61))
	long := randomIDs(rng, 41, 1000)
	hot := sample.Params{Temperature: 0.8, TopP: 1, Seed: 5}
	for _, c := range []struct {
		name string
		tg   *Target
		opt  backend.SessionOptions
		a, b []int32
		n    int
	}{
		{"golden b, greedy", golden, backend.SessionOptions{Capacity: 64, PrefillChunk: 4}, prompt[:8], prompt[8:], 14},
		{"golden b, T 0.8", golden, backend.SessionOptions{Capacity: 64, PrefillChunk: 4, Sampling: hot}, prompt[:8], prompt[8:], 14},
		{"dspark, greedy", dtg, backend.SessionOptions{Capacity: 96, PrefillChunk: 16, Drafter: dsp}, long[:32], long[32:], 30},
		{"dspark, T 0.8, sampled drafts", dtg, backend.SessionOptions{Capacity: 96, PrefillChunk: 16, Drafter: dsp, Sampling: hot, DraftSampling: backend.DraftSample}, long[:32], long[32:], 30},
	} {
		ctx := context.Background()
		ref := newSession(t, c.tg, c.opt)
		if err := ref.PrefillNoSample(ctx, c.a); err != nil {
			t.Fatal(err)
		}
		if ss := ref.State(); ss.RingHead != 0 || ss.Anchor != -1 || ss.Done != 0 || ss.PrefillLeft == 0 || int(ss.Position) != len(c.a) {
			t.Fatalf("%s: after PrefillNoSample: %+v", c.name, ss)
		}
		if err := ref.Decode(ctx, 1); err == nil || !strings.Contains(err.Error(), "run Prefill first") {
			t.Fatalf("%s: decode after PrefillNoSample: %v", c.name, err)
		}
		want := continueWith(t, ref, c.b, c.n)
		whole := newSession(t, c.tg, c.opt)
		if got := continueWith(t, whole, append(slices.Clone(c.a), c.b...), c.n); !slices.Equal(got, want) {
			t.Fatalf("%s: Prefill(A ++ B) gave %v, PrefillNoSample(A) + Prefill(B) %v", c.name, got, want)
		}
		sameSession(t, c.name+": one prefill against a split one", whole, ref)

		src := newSession(t, c.tg, c.opt)
		if err := src.PrefillNoSample(ctx, c.a); err != nil {
			t.Fatal(err)
		}
		snap, err := src.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		wantBytes := model.SnapshotBytes(&c.tg.M.Cfg, len(c.a))
		if c.opt.Drafter != nil {
			wantBytes += dsp.D.ContextBytes(len(c.a))
		}
		if snap.Position() != len(c.a) || snap.Bytes() != wantBytes {
			t.Fatalf("%s: snapshot at %d of %d bytes; want %d and %d", c.name, snap.Position(), snap.Bytes(), len(c.a), wantBytes)
		}
		fresh := newSession(t, c.tg, c.opt)
		if err := fresh.Restore(snap); err != nil {
			t.Fatal(err)
		}
		if got := continueWith(t, fresh, c.b, c.n); !slices.Equal(got, want) {
			t.Fatalf("%s: restored into a new session: %v, uninterrupted %v", c.name, got, want)
		}
		sameSession(t, c.name+": restored into a new session", fresh, ref)

		used := newSession(t, c.tg, c.opt)
		continueWith(t, used, c.b, 7) // done, another position, ring head 7
		if used.State().Step&1 == uint32(snap.(*Snapshot).step&1) {
			continueWith(t, clearDone(used), c.a[:1], 1)
		}
		if err := used.Restore(snap); err != nil {
			t.Fatal(err)
		}
		if ss := used.State(); ss.Done != 0 || ss.StopAt != 0 || ss.RingTail != ss.RingHead || ss.Anchor != -1 || int(ss.Position) != len(c.a) {
			t.Fatalf("%s: after Restore: %+v", c.name, ss)
		}
		if got := continueWith(t, used, c.b, c.n); !slices.Equal(got, want) {
			t.Fatalf("%s: restored into a used session: %v, uninterrupted %v", c.name, got, want)
		}
		sameSession(t, c.name+": restored into a used session", used, ref)

		if got := continueWith(t, src, c.b, c.n); !slices.Equal(got, want) {
			t.Fatalf("%s: the copied session went on with %v, uninterrupted %v", c.name, got, want)
		}
		if c.opt.Drafter != nil && c.opt.Sampling.Greedy() {
			plain := c.opt
			plain.Drafter = nil
			p := newSession(t, c.tg, plain)
			if err := p.Restore(snap); err != nil { // the drafter's rows are not needed
				t.Fatal(err)
			}
			if got := continueWith(t, p, c.b, c.n); !slices.Equal(got, want) {
				t.Fatalf("%s: restored without the drafter: %v, with it %v", c.name, got, want)
			}
			if st := fresh.Stats(); st.Rounds == 0 {
				t.Fatalf("%s: no speculative round ran", c.name)
			}
		}
		t.Logf("%s: %d tokens identical, snapshot of %d positions holds %d bytes", c.name, len(want), snap.Position(), snap.Bytes())
	}
}

// clearDone drains s and clears its stop flags (the host's side of the contract).
func clearDone(s *Session) *Session {
	ss := s.State()
	s.Ring().Drain(ss, nil)
	ss.Done, ss.Error, ss.StopAt = 0, 0, 0
	return s
}

// TestContinueAfterStop: the contract's continuation — a session stopped at StopAt, drained,
// Done and StopAt cleared, then fed its last sampled token with Prefill — goes on with
// transformers' greedy tokens (golden b: the sequence is the prompt and the tokens so far).
func TestContinueAfterStop(t *testing.T) {
	g := readGoldens(t, "b")
	prompt, want := g.ints(t, "prompt.11"), g.ints(t, "greedy.11")
	_, m := openGoldenTarget(t, "b")
	s := newSession(t, &Target{M: m}, backend.SessionOptions{Capacity: 64, PrefillChunk: 4})
	got := continueWith(t, s, prompt, 5)
	for _, n := range []int{6, 9} {
		last := got[len(got)-1]
		got = append(got, continueWith(t, clearDone(s), []int32{last}, n)...)
	}
	if !slices.Equal(got, want[:20]) {
		t.Fatalf("continued: %v, transformers %v", got, want[:20])
	}
	if int(s.State().Position) != len(prompt)+19 {
		t.Fatalf("position %d, want %d", s.State().Position, len(prompt)+19)
	}
}

// TestSnapshotRefuses: what Snapshot and Restore refuse, leaving the session as it was.
func TestSnapshotRefuses(t *testing.T) {
	ctx := context.Background()
	dtg, dsp := dsparkTarget(t)
	other, _ := dsparkTarget(t) // the same weights, another loaded model
	ids := randomIDs(rand.New(rand.NewPCG(62, 62)), 20, 1000)
	src := newSession(t, dtg, backend.SessionOptions{Capacity: 64})
	if err := src.PrefillNoSample(ctx, ids); err != nil {
		t.Fatal(err)
	}
	plainSnap, err := src.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	withDraft := newSession(t, dtg, backend.SessionOptions{Capacity: 64, Drafter: dsp})
	if err := withDraft.PrefillNoSample(ctx, ids); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		s    *Session
		snap backend.Snapshot
		want string
	}{
		{"another model", newSession(t, other, backend.SessionOptions{Capacity: 64}), plainSnap, "another loaded model"},
		{"too long", newSession(t, dtg, backend.SessionOptions{Capacity: 16}), plainSnap, "context is 16"},
		{"no drafter context", newSession(t, dtg, backend.SessionOptions{Capacity: 64, Drafter: dsp}), plainSnap, "no drafter context"},
		{"not a CPU snapshot", newSession(t, dtg, backend.SessionOptions{Capacity: 64}), fakeSnapshot{}, "not a CPU session snapshot"},
		{"nil", newSession(t, dtg, backend.SessionOptions{Capacity: 64}), nil, "not a CPU session snapshot"},
		{"another drafter", withDraft, func() backend.Snapshot {
			cfg := drafttest.Config(t)
			d2, err := draft.New(cfg, drafttest.Weights(t, cfg, "nvfp4"), dtg.M.W.Embed, dtg.M.W.LMHead)
			if err != nil {
				t.Fatal(err)
			}
			s2 := newSession(t, dtg, backend.SessionOptions{Capacity: 64, Drafter: DSpark{D: d2}})
			if err := s2.PrefillNoSample(ctx, ids[:7]); err != nil {
				t.Fatal(err)
			}
			return mustSnapshot(t, s2)
		}(), "another drafter"},
		{"another KV cache type", withDraft, func() backend.Snapshot {
			s2 := newSession(t, dtg, backend.SessionOptions{Capacity: 64, Drafter: dsp, KVCache: backend.KVBF16})
			if err := s2.PrefillNoSample(ctx, randomIDs(rand.New(rand.NewPCG(63, 63)), 7, 1000)); err != nil {
				t.Fatal(err)
			}
			return mustSnapshot(t, s2)
		}(), "KV cache is bf16, the session's f32"},
	} {
		before := *c.s.State()
		var ctxBefore backend.Snapshot
		if c.s.prop != nil && c.s.st.Pos() > 0 {
			ctxBefore = mustSnapshot(t, c.s).(*Snapshot).draft // the drafter's context rows
		}
		err := c.s.Restore(c.snap)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
		if after := c.s.State(); after.Position != before.Position || after.Step != before.Step || c.s.st.Pos() != int(before.Position) {
			t.Errorf("%s: a refused restore changed the session: %+v", c.name, after)
		}
		if ctxBefore != nil && !reflect.DeepEqual(mustSnapshot(t, c.s).(*Snapshot).draft, ctxBefore) {
			t.Errorf("%s: a refused restore changed the drafter's context", c.name)
		}
	}
	// A proposer that cannot copy its context.
	td := &testDrafter{taps: []int{0}, block: 3, hidden: 128, vocab: 1000, row: func(*testProposer, int, int32, int, []float32) {}}
	s := newSession(t, dtg, backend.SessionOptions{Capacity: 64, Drafter: td})
	if _, err := s.Snapshot(); err == nil || !strings.Contains(err.Error(), "cannot copy its context") {
		t.Errorf("snapshot with a test proposer: %v", err)
	}
	if err := s.Restore(mustSnapshot(t, withDraft)); err == nil || !strings.Contains(err.Error(), "cannot restore its context") {
		t.Errorf("restore into a test proposer: %v", err)
	}
	// Closed sessions.
	src.Close()
	if _, err := src.Snapshot(); err == nil {
		t.Error("snapshot of a closed session")
	}
	if err := src.Restore(plainSnap); err == nil {
		t.Error("restore into a closed session")
	}
	if err := src.Reset(); err == nil {
		t.Error("reset of a closed session")
	}
	if err := src.PrefillNoSample(ctx, ids); err == nil {
		t.Error("prefill of a closed session")
	}
}

type fakeSnapshot struct{}

func (fakeSnapshot) Position() int { return 1 }
func (fakeSnapshot) Bytes() int64  { return 0 }

func mustSnapshot(t *testing.T, s *Session) backend.Snapshot {
	t.Helper()
	sn, err := s.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	return sn
}

// TestSessionReset: a used session — decoded to done, with ring slots written, telemetry and a
// drafter context — reset and run again gives a fresh session's tokens, from ring head 0 (no
// stale slot read back) and zero telemetry; the DSpark proposer is emptied in place, a test
// proposer replaced.
func TestSessionReset(t *testing.T) {
	g := readGoldens(t, "b")
	prompt, want := g.ints(t, "prompt.11"), g.ints(t, "greedy.11")
	_, m := openGoldenTarget(t, "b")
	s := newSession(t, &Target{M: m}, backend.SessionOptions{Capacity: 64, PrefillChunk: 4, RingCapacity: 8, Sampling: sample.Params{TopP: 1, Seed: 9}})
	for run := 0; run < 2; run++ {
		if got := continueWith(t, s, prompt, 7); !slices.Equal(got, want[:7]) {
			t.Fatalf("run %d: %v, transformers %v", run, got, want[:7])
		}
		s.State().SeedLo = 77
		if err := s.Reset(); err != nil {
			t.Fatal(err)
		}
		ss := s.State()
		if ss.Position != 0 || ss.Step != 0 || ss.RingHead != 0 || ss.RingTail != 0 || ss.Anchor != -1 || ss.Done != 0 || ss.Seed() != 9 || len(ss.Pending) != 8 || s.st.Pos() != 0 {
			t.Fatalf("after reset: %+v", ss)
		}
		if got := s.Ring().Drain(ss, nil); len(got) != 0 {
			t.Fatalf("a reset ring gave back %v", got)
		}
	}

	dtg, dsp := dsparkTarget(t)
	ids := randomIDs(rand.New(rand.NewPCG(63, 63)), 12, 1000)
	opt := backend.SessionOptions{Capacity: 96, Drafter: dsp}
	fresh := continueWith(t, newSession(t, dtg, opt), ids, 20)
	ds := newSession(t, dtg, opt)
	continueWith(t, ds, ids[:5], 9)
	prop := ds.prop
	if err := ds.Reset(); err != nil {
		t.Fatal(err)
	}
	if st := ds.Stats(); ds.prop != prop || ds.prop.Len() != 0 || st.Rounds != 0 || st.Committed[0] != 0 || ds.State().DraftContext != 0 {
		t.Fatalf("after reset: proposer %v (same %v) of %d rows, stats %+v", ds.prop, ds.prop == prop, ds.prop.Len(), st)
	}
	if got := continueWith(t, ds, ids, 20); !slices.Equal(got, fresh) {
		t.Fatalf("after reset: %v, a fresh session %v", got, fresh)
	}

	td := &testDrafter{taps: []int{0}, block: 3, hidden: 128, vocab: 1000, row: func(*testProposer, int, int32, int, []float32) {}}
	ts := newSession(t, dtg, backend.SessionOptions{Capacity: 64, Drafter: td})
	continueWith(t, ts, ids, 4)
	if err := ts.Reset(); err != nil || len(td.props) != 2 || ts.prop != td.props[1] {
		t.Fatalf("reset with a test proposer: %v, %d proposers", err, len(td.props))
	}
}
