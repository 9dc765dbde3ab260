package cpu

import (
	"context"
	"slices"
	"strings"
	"testing"

	"lithos/runtime/backend"
	"lithos/runtime/bundle"
	"lithos/runtime/sample"
)

func openSession(t *testing.T, opt backend.SessionOptions) (backend.Target, backend.Session) {
	t.Helper()
	b, err := bundle.Open(goldenBundle(t, "b"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	tg, err := Backend{}.Load(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	if opt.Sampling.TopP == 0 {
		opt.Sampling.TopP = 1
	}
	s, err := tg.NewSession(opt)
	if err != nil {
		t.Fatal(err)
	}
	return tg, s
}

// TestSessionGreedy drives the contract the way a host does — prefill, decode steps, ring
// drains — and requires transformers' greedy tokens, the step state's bookkeeping (position,
// step count, GDN slot parity = Step & 1) and done at StopAt.
func TestSessionGreedy(t *testing.T) {
	g := readGoldens(t, "b")
	prompt, want := g.ints(t, "prompt.11"), g.ints(t, "greedy.11")
	_, s := openSession(t, backend.SessionOptions{Capacity: 64, PrefillChunk: 4})
	ss := s.State()
	ss.StopAt = 20
	ctx := context.Background()
	if err := s.Prefill(ctx, prompt); err != nil {
		t.Fatal(err)
	}
	if ss.Step != 3 || ss.Position != 11 || ss.RingHead != 1 || ss.PrefillLeft != 0 {
		t.Fatalf("after prefill: %+v", ss)
	}
	var got []int32
	got = s.Ring().Drain(ss, got)
	for ss.Done == 0 {
		if err := s.Decode(ctx, 3); err != nil {
			t.Fatal(err)
		}
		got = s.Ring().Drain(ss, got)
	}
	if !slices.Equal(got, want[:20]) {
		t.Fatalf("tokens %v, transformers %v", got, want[:20])
	}
	if ss.RingHead != 20 || ss.Position != 11+19 || ss.Error != backend.ErrNone || ss.Step != 3+19 {
		t.Fatalf("at StopAt: %+v", ss)
	}
	if slot := s.(*Session).st.Slot(); slot != int(ss.Step&1) {
		t.Errorf("GDN slot %d, step parity %d", slot, ss.Step&1)
	}
	// Done sessions do no more work.
	if err := s.Decode(ctx, 5); err != nil || ss.RingHead != 20 {
		t.Fatalf("decode after done: %v, head %d", err, ss.RingHead)
	}
	if err := s.Prefill(ctx, prompt); err == nil {
		t.Error("prefill on a done session accepted")
	}
}

// TestSessionStops: EOS ends a step with done; a full context sets ErrContextFull; an
// undrained ring overflows.
func TestSessionStops(t *testing.T) {
	g := readGoldens(t, "b")
	prompt, want := g.ints(t, "prompt.11"), g.ints(t, "greedy.11")
	ctx := context.Background()

	_, s := openSession(t, backend.SessionOptions{Capacity: 64, EOS: []int32{want[2]}})
	s.Prefill(ctx, prompt)
	s.Decode(ctx, 10)
	if got := s.Ring().Drain(s.State(), nil); !slices.Equal(got, want[:3]) || s.State().Done != 1 {
		t.Errorf("EOS %d: tokens %v, done %d", want[2], got, s.State().Done)
	}

	_, s = openSession(t, backend.SessionOptions{Capacity: 13})
	s.Prefill(ctx, prompt)
	s.Decode(ctx, 10)
	if got := s.Ring().Drain(s.State(), nil); !slices.Equal(got, want[:3]) || s.State().Error != backend.ErrContextFull {
		t.Errorf("context 13: tokens %v, error %d", got, s.State().Error)
	}

	_, s = openSession(t, backend.SessionOptions{Capacity: 64, RingCapacity: 4})
	s.Prefill(ctx, prompt)
	s.Decode(ctx, 10)
	if ss := s.State(); ss.Error != backend.ErrRingOverflow || ss.RingHead != 4 {
		t.Errorf("undrained ring of 4: error %d, head %d", ss.Error, ss.RingHead)
	}
}

// TestSessionSeedWords: the programs read the seed from the step state.
func TestSessionSeedWords(t *testing.T) {
	g := readGoldens(t, "b")
	prompt := g.ints(t, "prompt.11")
	ctx := context.Background()
	run := func(seed uint64, overwrite bool) []int32 {
		_, s := openSession(t, backend.SessionOptions{Capacity: 64, Sampling: sample.Params{Temperature: 1, TopP: 1, Seed: 1}})
		if overwrite {
			s.State().SeedLo, s.State().SeedHi = uint32(seed), uint32(seed>>32)
		}
		s.Prefill(ctx, prompt)
		s.Decode(ctx, 15)
		return s.Ring().Drain(s.State(), nil)
	}
	a, b := run(1, false), run(99, true)
	_, s := openSession(t, backend.SessionOptions{Capacity: 64, Sampling: sample.Params{Temperature: 1, TopP: 1, Seed: 99}})
	s.Prefill(ctx, prompt)
	s.Decode(ctx, 15)
	c := s.Ring().Drain(s.State(), nil)
	if slices.Equal(a, b) || !slices.Equal(b, c) {
		t.Errorf("seed 1 %v, seed words set to 99 %v, seed 99 %v", a, b, c)
	}
}

func TestSessionRefuses(t *testing.T) {
	ctx := context.Background()
	_, s := openSession(t, backend.SessionOptions{Capacity: 8})
	for _, c := range []struct {
		prompt []int32
		want   string
	}{{nil, "empty"}, {[]int32{1, 608}, "vocabulary"}, {[]int32{-1}, "vocabulary"}, {make([]int32, 9), "context of 8"}} {
		if err := s.Prefill(ctx, c.prompt); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("prefill %v: %v, want %q", c.prompt, err, c.want)
		}
	}
	if err := s.Decode(ctx, 1); err == nil {
		t.Error("decode before prefill accepted")
	}
	if s.State().Position != 0 || s.State().Step != 0 {
		t.Errorf("refused calls changed the state: %+v", s.State())
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.Prefill(cctx, []int32{1, 2}); err == nil || s.State().Position != 0 {
		t.Errorf("cancelled prefill: %v, position %d", err, s.State().Position)
	}
}

// TestSessionLastLogits: LastLogits is the row the anchor was sampled from — after the prefill
// (chunks of 4) transformers' last-row logits, after each decode step the step's logits
// (transformers' greedy_logits where recorded), the anchor its argmax; it refuses before any
// token is sampled and on a closed session.
func TestSessionLastLogits(t *testing.T) {
	g := readGoldens(t, "b")
	prompt, greedy := g.ints(t, "prompt.11"), g.ints(t, "greedy.11")
	want, steps := g.floats(t, "logits.11"), g.f32["greedy_logits.11"]
	tg, s := openSession(t, backend.SessionOptions{Capacity: 32, PrefillChunk: 4})
	vocab := tg.Config().Vocab
	lr := s.(*Session)
	if _, err := lr.LastLogits(nil); err == nil || !strings.Contains(err.Error(), "no token sampled") {
		t.Errorf("before the prefill: %v", err)
	}
	ctx := context.Background()
	if err := s.Prefill(ctx, prompt); err != nil {
		t.Fatal(err)
	}
	got, err := lr.LastLogits(nil)
	if err != nil {
		t.Fatal(err)
	}
	if e, _ := relErr(got, want[len(want)-vocab:]); e > goldenTolerance {
		t.Errorf("after the prefill: relative error %.3g against transformers' last row", e)
	}
	for i := 1; i < 4; i++ {
		if err := s.Decode(ctx, 1); err != nil {
			t.Fatal(err)
		}
		if got, err = lr.LastLogits(got); err != nil {
			t.Fatal(err)
		}
		if a := int32(sample.Argmax(got)); a != s.State().Anchor || a != greedy[i] {
			t.Errorf("step %d: argmax %d, anchor %d, transformers %d", i, a, s.State().Anchor, greedy[i])
		}
		if steps != nil {
			if e, _ := relErr(got, steps[i*vocab:(i+1)*vocab]); e > goldenTolerance {
				t.Errorf("step %d: relative error %.3g against transformers", i, e)
			}
		}
	}
	s.Close()
	if _, err := lr.LastLogits(nil); err == nil {
		t.Error("closed session: no error")
	}
}
