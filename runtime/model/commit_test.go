package model

import (
	"context"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// TestCommitPrefixEqualsPlainDecode: after a verify step of 8 rows (StepWith Keep) and
// CommitPrefix(j), for every j in 1…8, the committed GDN conv and recurrent states of every
// layer, the position and the next step's logits equal those of a plain decode of the same j
// tokens one at a time, for the recurrent (GDNChunkMin 16) and the chunked (GDNChunkMin 1)
// GDN paths; the taps of the committed rows equal the plain decode's taps.
func TestCommitPrefixEqualsPlainDecode(t *testing.T) {
	raw := randomRaw(testConfig(), 21)
	m := raw.model(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(22, 22))
	prompt := randomTokens(rng, 13, raw.cfg.Vocab)
	verify := randomTokens(rng, 8, raw.cfg.Vocab)
	next := randomTokens(rng, 2, raw.cfg.Vocab)
	taps := []int{-1, 1, 2, 4}
	width := len(taps) * raw.cfg.Hidden
	for _, chunkMin := range []int{16, 1} {
		m.GDNChunkMin = chunkMin
		worst := 0.0
		defer func() { t.Logf("GDNChunkMin %d: largest relative recurrent-state difference %.3g", chunkMin, worst) }()
		for j := 1; j <= 8; j++ {
			// Plain: prompt, then verify[:j] one token at a time, recording the taps.
			ref := newState(t, m, 32)
			if _, err := m.Forward(ctx, ref, prompt, false); err != nil {
				t.Fatal(err)
			}
			var refTaps []float32
			for _, tok := range verify[:j] {
				if _, err := m.StepWith(ctx, ref, []int32{tok}, StepOptions{Taps: taps}); err != nil {
					t.Fatal(err)
				}
				refTaps = append(refTaps, ref.Taps()...)
				if err := ref.Commit(1); err != nil {
					t.Fatal(err)
				}
			}
			want, err := m.Forward(ctx, ref, next, true)
			if err != nil {
				t.Fatal(err)
			}

			st := newState(t, m, 32)
			if _, err := m.Forward(ctx, st, prompt, false); err != nil {
				t.Fatal(err)
			}
			logits, err := m.StepWith(ctx, st, verify, StepOptions{AllRows: true, Taps: taps, Keep: true})
			if err != nil {
				t.Fatal(err)
			}
			if len(logits) != 8*raw.cfg.Vocab || len(st.Taps()) != 8*width {
				t.Fatalf("verify: %d logits, %d taps; want %d and %d", len(logits), len(st.Taps()), 8*raw.cfg.Vocab, 8*width)
			}
			if err := st.CommitPrefix(j); err != nil {
				t.Fatal(err)
			}
			if st.Pos() != len(prompt)+j || ref.Pos() != len(prompt)+j+len(next) {
				t.Fatalf("j %d: position %d, plain %d", j, st.Pos(), ref.Pos()-len(next))
			}
			if e, at := relErr32(st.Taps()[:j*width], refTaps); e > 1e-6 {
				t.Fatalf("GDNChunkMin %d, j %d: taps of the committed rows differ by %.3g at %d", chunkMin, j, e, at)
			}
			// Compare the committed states (ref has moved past them by the next rows: compare
			// before; so re-run the plain path up to j for the state comparison).
			ref2 := newState(t, m, 32)
			m.Forward(ctx, ref2, prompt, false)
			for _, tok := range verify[:j] {
				m.Forward(ctx, ref2, []int32{tok}, false)
			}
			for gi := 0; gi < st.GDNLayers(); gi++ {
				if e, _ := relErr32(st.Conv(gi, st.Slot()), ref2.Conv(gi, ref2.Slot())); e > 1e-6 {
					t.Fatalf("GDNChunkMin %d, j %d, GDN layer %d: conv state differs by %.3g", chunkMin, j, gi, e)
				}
				e, _ := relErr32(st.Recurrent(gi, st.Slot()), ref2.Recurrent(gi, ref2.Slot()))
				worst = max(worst, e)
				if e > 1e-5 {
					t.Fatalf("GDNChunkMin %d, j %d, GDN layer %d: recurrent state differs by %.3g", chunkMin, j, gi, e)
				}
			}
			got, err := m.Forward(ctx, st, next, true)
			if err != nil {
				t.Fatal(err)
			}
			if e, _ := relErr32(got, want); e > 1e-5 {
				t.Fatalf("GDNChunkMin %d, j %d: next logits differ from the plain decode's by %.3g", chunkMin, j, e)
			}
		}
	}
}

// TestStepWithTaps: the taps are the trace's layer outputs ("hidden", id+1; id −1 the
// embeddings), in the order asked, for every row; a step without taps has none.
func TestStepWithTaps(t *testing.T) {
	raw := randomRaw(testConfig(), 23)
	m := raw.model(t)
	ctx := context.Background()
	tokens := randomTokens(rand.New(rand.NewPCG(24, 24)), 5, raw.cfg.Vocab)
	trace := map[int][]float32{}
	m.Trace = func(kind string, layer, rows int, data []float32) {
		if kind == "hidden" {
			trace[layer-1] = slices.Clone(data)
		}
	}
	st := newState(t, m, 8)
	taps := []int{3, -1, 0, 3}
	if _, err := m.StepWith(ctx, st, tokens, StepOptions{Taps: taps}); err != nil {
		t.Fatal(err)
	}
	h := raw.cfg.Hidden
	got := st.Taps()
	if len(got) != len(tokens)*len(taps)*h {
		t.Fatalf("%d tap values, want %d", len(got), len(tokens)*len(taps)*h)
	}
	for r := range tokens {
		for ti, id := range taps {
			o := (r*len(taps) + ti) * h
			if !slices.Equal(got[o:o+h], trace[id][r*h:(r+1)*h]) {
				t.Fatalf("row %d, tap %d (layer %d): not the layer's output", r, ti, id)
			}
		}
	}
	if err := st.Commit(len(tokens)); err != nil {
		t.Fatal(err)
	}
	if len(st.Taps()) != len(got) {
		t.Fatal("Commit dropped the taps")
	}
	if _, err := m.Step(ctx, st, tokens[:1], false); err != nil {
		t.Fatal(err)
	}
	if st.Taps() != nil {
		t.Fatal("a step without taps left taps")
	}
	for _, bad := range []int{-2, len(raw.cfg.Layers)} {
		if _, err := m.StepWith(ctx, st, tokens[:1], StepOptions{Taps: []int{0, bad}}); err == nil || !strings.Contains(err.Error(), "tap 1") {
			t.Errorf("tap layer %d: %v", bad, err)
		}
	}
}

// TestCommitPrefixErrors: j = 0, j > rows, no step pending, a step without Keep, a second
// commit; each refused with the state unchanged.
func TestCommitPrefixErrors(t *testing.T) {
	raw := randomRaw(testConfig(), 25)
	m := raw.model(t)
	ctx := context.Background()
	tokens := randomTokens(rand.New(rand.NewPCG(26, 26)), 8, raw.cfg.Vocab)
	st := newState(t, m, 16)
	if err := st.CommitPrefix(1); err == nil || !strings.Contains(err.Error(), "no step is pending") {
		t.Errorf("nothing pending: %v", err)
	}
	if _, err := m.Step(ctx, st, tokens, true); err != nil {
		t.Fatal(err)
	}
	if err := st.CommitPrefix(3); err == nil || !strings.Contains(err.Error(), "did not keep") {
		t.Errorf("step without Keep: %v", err)
	}
	if _, err := m.StepWith(ctx, st, tokens, StepOptions{Keep: true}); err != nil {
		t.Fatal(err)
	}
	slot := st.Slot()
	for _, j := range []int{0, -1, 9} {
		if err := st.CommitPrefix(j); err == nil || !strings.Contains(err.Error(), "want 1 ≤ j ≤ 8") {
			t.Errorf("CommitPrefix(%d): %v", j, err)
		}
	}
	if st.Pos() != 0 || st.Slot() != slot {
		t.Fatalf("refused commits moved the state: pos %d, slot %d", st.Pos(), st.Slot())
	}
	if err := st.CommitPrefix(8); err != nil {
		t.Fatal(err)
	}
	if st.Pos() != 8 || st.Slot() == slot {
		t.Fatalf("CommitPrefix(8): pos %d, slot %d", st.Pos(), st.Slot())
	}
	if err := st.CommitPrefix(1); err == nil {
		t.Error("second commit of the same step accepted")
	}
	// A Keep step followed by a step without Keep: the record is gone.
	m.StepWith(ctx, st, tokens[:4], StepOptions{Keep: true})
	m.Step(ctx, st, tokens[:4], false)
	if err := st.CommitPrefix(2); err == nil {
		t.Error("CommitPrefix after a step without Keep accepted")
	}
}
