package model

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
)

// testConfig is a small hybrid model exercising every geometry choice: GQA 2:1, d_k ≠ d_v,
// 3 value heads per key head, partial RoPE (8 of 32 dims), two attention layers.
func testConfig() Config {
	return Config{
		Vocab: 97, Hidden: 64, Intermediate: 96,
		Layers: []LayerKind{GDN, GDN, Attention, GDN, Attention},
		Heads:  4, KVHeads: 2, HeadDim: 32, RotaryDim: 8, RopeTheta: 1e4,
		KHeads: 2, VHeads: 6, KDim: 16, VDim: 8, ConvKernel: 4, RMSEps: 1e-6,
	}
}

func randomTokens(rng *rand.Rand, n, vocab int) []int32 {
	t := make([]int32, n)
	for i := range t {
		t[i] = int32(rng.IntN(vocab))
	}
	return t
}

func newState(t testing.TB, m *Model, capacity int) *State {
	t.Helper()
	st, err := m.NewState(capacity)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestForwardMatchesReference64: the float32 graph (chunked GDN for the long prompt) against
// the independent float64 reference, every position of a 150-token prompt (three GDN chunks).
func TestForwardMatchesReference64(t *testing.T) {
	raw := randomRaw(testConfig(), 1)
	m := raw.model(t)
	tokens := randomTokens(rand.New(rand.NewPCG(2, 2)), 150, raw.cfg.Vocab)
	want := raw.logits64(tokens, nil)
	for _, chunkMin := range []int{1, 1 << 30} { // chunked rule, then the recurrent rule
		m.GDNChunkMin = chunkMin
		st := newState(t, m, 200)
		got, err := m.Forward(context.Background(), st, tokens, true)
		if err != nil {
			t.Fatal(err)
		}
		e, at := relErr(got, flatten(want))
		t.Logf("GDNChunkMin %d: max relative logit error %.3g (at %d)", chunkMin, e, at)
		if e > 1e-5 {
			t.Fatalf("GDNChunkMin %d: max relative logit error %.3g at row %d, want ≤ 1e-5", chunkMin, e, at/raw.cfg.Vocab)
		}
	}
}

// TestPrefillDecodeAgree: one prefill call, prefills in several chunk sizes, and token-by-token
// decode give the same logits for every position.
func TestPrefillDecodeAgree(t *testing.T) {
	raw := randomRaw(testConfig(), 3)
	m := raw.model(t)
	ctx := context.Background()
	tokens := randomTokens(rand.New(rand.NewPCG(4, 4)), 140, raw.cfg.Vocab)
	vocab := raw.cfg.Vocab

	st := newState(t, m, 160)
	whole, err := m.Forward(ctx, st, tokens, true)
	if err != nil {
		t.Fatal(err)
	}
	// Token by token (recurrent GDN, one attention row at a time).
	st = newState(t, m, 160)
	for i, tok := range tokens {
		got, err := m.Forward(ctx, st, []int32{tok}, false)
		if err != nil {
			t.Fatal(err)
		}
		if e, _ := relErr32(got, whole[i*vocab:(i+1)*vocab]); e > 1e-5 {
			t.Fatalf("decode row %d: relative error %.3g against the one-call prefill", i, e)
		}
	}
	if st.Pos() != len(tokens) {
		t.Fatalf("position %d after %d tokens", st.Pos(), len(tokens))
	}
	// Chunked prefill in pieces, then compare every row.
	for _, chunk := range []int{1, 7, 64, 65, 100} {
		st := newState(t, m, 160)
		for i := 0; i < len(tokens); i += chunk {
			end := min(i+chunk, len(tokens))
			got, err := m.Forward(ctx, st, tokens[i:end], true)
			if err != nil {
				t.Fatal(err)
			}
			if e, at := relErr32(got, whole[i*vocab:end*vocab]); e > 1e-5 {
				t.Fatalf("chunk %d, rows %d…%d: relative error %.3g at row %d", chunk, i, end, e, i+at/vocab)
			}
		}
	}
	// Prefill helper: last row only.
	st = newState(t, m, 160)
	last, err := m.Prefill(ctx, st, tokens, 33)
	if err != nil {
		t.Fatal(err)
	}
	if e, _ := relErr32(last, whole[(len(tokens)-1)*vocab:]); e > 1e-5 {
		t.Fatalf("Prefill: relative error %.3g", e)
	}
}

// TestStepCommitSlots: Step reads the committed slot and writes the other, so an abandoned
// Step changes nothing, a repeated Step gives the same result, and replaying the first j
// rows of a Step then committing them equals having run only those rows.
func TestStepCommitSlots(t *testing.T) {
	raw := randomRaw(testConfig(), 5)
	m := raw.model(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(6, 6))
	prompt := randomTokens(rng, 20, raw.cfg.Vocab)
	draft := randomTokens(rng, 8, raw.cfg.Vocab)
	next := randomTokens(rng, 3, raw.cfg.Vocab)
	for _, chunkMin := range []int{1, 16} {
		m.GDNChunkMin = chunkMin
		// Reference: prompt, the first 3 draft rows, next.
		ref := newState(t, m, 64)
		if _, err := m.Forward(ctx, ref, prompt, false); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Forward(ctx, ref, draft[:3], false); err != nil {
			t.Fatal(err)
		}
		want, err := m.Forward(ctx, ref, next, true)
		if err != nil {
			t.Fatal(err)
		}

		st := newState(t, m, 64)
		if _, err := m.Forward(ctx, st, prompt, false); err != nil {
			t.Fatal(err)
		}
		slot := st.Slot()
		before := append([]float32(nil), st.Recurrent(0, slot)...)
		// Verify 8 rows; then a different verify (the first is abandoned).
		v1, err := m.Step(ctx, st, draft, true)
		if err != nil {
			t.Fatal(err)
		}
		if st.Pos() != len(prompt) || st.Slot() != slot {
			t.Fatalf("Step moved the committed state: pos %d slot %d", st.Pos(), st.Slot())
		}
		if e, _ := relErr32(st.Recurrent(0, slot), before); e != 0 {
			t.Fatalf("Step wrote the slot it read (relative change %.3g)", e)
		}
		v2, err := m.Step(ctx, st, draft, true)
		if err != nil {
			t.Fatal(err)
		}
		if e, _ := relErr32(v2, v1); e != 0 {
			t.Fatalf("repeated Step differs by %.3g", e)
		}
		if err := st.Commit(3); err == nil {
			t.Fatal("Commit(3) after a Step of 8 rows: no error")
		}
		// Accept 3: replay them, commit, continue.
		if _, err := m.Step(ctx, st, draft[:3], false); err != nil {
			t.Fatal(err)
		}
		if err := st.Commit(3); err != nil {
			t.Fatal(err)
		}
		if st.Slot() == slot || st.Pos() != len(prompt)+3 {
			t.Fatalf("after Commit(3): slot %d (was %d), pos %d", st.Slot(), slot, st.Pos())
		}
		got, err := m.Forward(ctx, st, next, true)
		if err != nil {
			t.Fatal(err)
		}
		if e, _ := relErr32(got, want); e != 0 {
			t.Fatalf("GDNChunkMin %d: after verify+replay+commit, logits differ from a straight run by %.3g", chunkMin, e)
		}
		if err := st.Commit(len(next)); err == nil {
			t.Fatal("second Commit of the same Step: no error")
		}
	}
}

func TestStepErrors(t *testing.T) {
	raw := randomRaw(testConfig(), 7)
	m := raw.model(t)
	other := randomRaw(testConfig(), 8).model(t)
	ctx := context.Background()
	st := newState(t, m, 10)
	cases := []struct {
		name   string
		run    func() error
		expect string
	}{
		{"empty", func() error { _, err := m.Forward(ctx, st, nil, false); return err }, "no tokens"},
		{"negative id", func() error { _, err := m.Forward(ctx, st, []int32{1, -1}, false); return err }, "token -1 (row 1)"},
		{"id past vocab", func() error { _, err := m.Forward(ctx, st, []int32{97}, false); return err }, "outside the vocabulary"},
		{"too long", func() error { _, err := m.Forward(ctx, st, make([]int32, 11), false); return err }, "exceed the context of 10"},
		{"prefill too long", func() error { _, err := m.Prefill(ctx, st, make([]int32, 11), 4); return err }, "exceed the context"},
		{"foreign state", func() error { _, err := other.Forward(ctx, st, []int32{1}, false); return err }, "not made by this model"},
		{"commit without step", func() error { return st.Commit(1) }, "none pending"},
		{"zero capacity", func() error { _, err := m.NewState(0); return err }, "capacity 0"},
	}
	for _, c := range cases {
		err := c.run()
		if err == nil || !strings.Contains(err.Error(), c.expect) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.expect)
		}
	}
	if st.Pos() != 0 {
		t.Fatalf("failed calls moved the position to %d", st.Pos())
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := m.Forward(cancelled, st, []int32{1}, false); err == nil {
		t.Fatal("cancelled context: no error")
	}
	if st.Pos() != 0 {
		t.Fatal("a cancelled Forward committed")
	}
}

func TestNewRejectsBadWeights(t *testing.T) {
	raw := randomRaw(testConfig(), 9)
	m := raw.model(t)
	w := m.W
	w.Layers = append([]Layer(nil), w.Layers...)
	w.Layers[2].QNorm = w.Layers[2].QNorm[:5]
	if _, err := New(m.Cfg, w); err == nil || !strings.Contains(err.Error(), "layers.2.self_attn.q_norm") {
		t.Fatalf("short q_norm: %v", err)
	}
	w = m.W
	w.Layers = append([]Layer(nil), w.Layers...)
	w.Layers[0].Kind = Attention
	if _, err := New(m.Cfg, w); err == nil || !strings.Contains(err.Error(), "layers.0 is full_attention") {
		t.Fatalf("wrong kind: %v", err)
	}
	w = m.W
	w.LMHead.N = 3
	if _, err := New(m.Cfg, w); err == nil || !strings.Contains(err.Error(), "lm_head") {
		t.Fatalf("bad lm_head: %v", err)
	}
}

// TestTrace: the trace hook sees the embeddings, every mixer and layer output and the final
// norm, with the reference's values.
func TestTrace(t *testing.T) {
	raw := randomRaw(testConfig(), 10)
	m := raw.model(t)
	tokens := randomTokens(rand.New(rand.NewPCG(11, 11)), 11, raw.cfg.Vocab)
	got := map[string][]float32{}
	m.Trace = func(kind string, layer, rows int, data []float32) {
		got[kind+"."+itoa(layer)] = append([]float32(nil), data...)
	}
	if _, err := m.Forward(context.Background(), newState(t, m, 16), tokens, true); err != nil {
		t.Fatal(err)
	}
	n := 0
	raw.logits64(tokens, func(kind string, layer int, x [][]float64) {
		n++
		key := kind + "." + itoa(layer)
		e, _ := relErr(got[key], flatten(x))
		if e > 1e-5 {
			t.Errorf("%s: relative error %.3g", key, e)
		}
	})
	if want := 2*len(raw.cfg.Layers) + 1; n != want || len(got) != want+1 {
		t.Fatalf("reference traced %d, model %d tensors; want %d and %d", n, len(got), want, want+1)
	}
}

func itoa(i int) string {
	if i < 0 {
		return "-" + itoa(-i)
	}
	if i < 10 {
		return string(rune('0' + i))
	}
	return itoa(i/10) + string(rune('0'+i%10))
}
