package draft_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"lithos/runtime/draft"
	"lithos/runtime/draft/drafttest"
	"lithos/runtime/model"
)

// checkCase appends case n's features at once to a fresh state and compares everything.
func checkCase(t *testing.T, g *drafttest.Goldens, d *draft.Drafter, variant string, n int) {
	t.Helper()
	st, err := d.NewState(64)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Append(context.Background(), st, g.Features(t, n, d.Cfg.FeatureDim()), n); err != nil {
		t.Fatal(err)
	}
	drafttest.Compare(t, g, d, st, variant, n)
}

func newDense(t *testing.T, g *drafttest.Goldens, variant string) *draft.Drafter {
	t.Helper()
	cfg := drafttest.Config(t)
	emb, head := g.Target(t, cfg.Vocab, cfg.Hidden)
	d, err := draft.New(cfg, drafttest.Weights(t, cfg, variant), emb, head)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestGoldens compares the dense drafter with the PyTorch oracle for both weight variants and
// every recorded context length: context K/V of every layer, final-normed rows, base logits,
// the greedy Markov chain (identical tokens) with its adjusted logits and confidences, and a
// forced chain.
func TestGoldens(t *testing.T) {
	g := drafttest.Read(t)
	for _, v := range drafttest.Variants {
		d := newDense(t, g, v)
		for _, n := range drafttest.Cases {
			t.Run(fmt.Sprintf("%s/%d", v, n), func(t *testing.T) { checkCase(t, g, d, v, n) })
		}
	}
}

// TestGoldensYaRN compares the tiny head under YaRN RoPE (drafttest.YarnConfig: rope_scaling yarn,
// factor 4 over original_max_position_embeddings 1024) with the oracle, whose rotary table is
// transformers' Qwen3RotaryEmbedding with that rope_scaling: the inverse frequencies (≤ 1 ulp) and
// the cos/sin amplitude, then the drafter at 23 context rows and at 1100 (the block at positions
// 1100 … 1106, past the original length) — context K/V, hidden rows, logits within TolLogits,
// identical greedy tokens. The same weights under default RoPE must miss the YaRN goldens by far
// (the comparison can fail).
func TestGoldensYaRN(t *testing.T) {
	g := drafttest.Read(t)
	cfg := drafttest.YarnConfig(t)
	if cfg.Rope.Type != draft.RopeYaRN || cfg.Rope.Factor != 4 || cfg.Rope.OriginalMaxPos != 1024 {
		t.Fatalf("%s: RoPE %+v, want yarn factor 4 over 1024", drafttest.YarnConfigPath(t), cfg.Rope)
	}
	r := draft.NewRope(&cfg)
	want := g.Floats(t, "yarn.inv_freq")
	if len(want) != len(r.InvFreq) {
		t.Fatalf("yarn.inv_freq has %d values, want %d", len(want), len(r.InvFreq))
	}
	same := 0
	for i, w := range want {
		got := r.InvFreq[i]
		if got == w {
			same++
		} else if math.Abs(float64(got-w)) > float64(math.Nextafter32(w, float32(math.Inf(1)))-w) {
			t.Errorf("inv_freq[%d] = %v, transformers %v (more than 1 ulp)", i, got, w)
		}
	}
	t.Logf("inv_freq: %d of %d bit-identical to transformers', the others within 1 ulp", same, len(want))
	if s := g.Floats(t, "yarn.attention_scaling")[0]; r.Scale != s {
		t.Errorf("amplitude %v, transformers' attention_scaling %v", r.Scale, s)
	}

	emb, head := g.Target(t, cfg.Vocab, cfg.Hidden)
	w := drafttest.Weights(t, cfg, drafttest.Yarn)
	d, err := draft.New(cfg, w, emb, head)
	if err != nil {
		t.Fatal(err)
	}
	plainCfg := cfg
	plainCfg.Rope = draft.RopeScaling{Type: draft.RopeDefault}
	plain, err := draft.New(plainCfg, w, emb, head)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, n := range drafttest.YarnCases {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			feats := g.Features(t, n, cfg.FeatureDim())
			st, err := d.NewState(n)
			if err != nil {
				t.Fatal(err)
			}
			if err := d.Append(ctx, st, feats, n); err != nil {
				t.Fatal(err)
			}
			drafttest.Compare(t, g, d, st, drafttest.Yarn, n)

			ps, _ := plain.NewState(n)
			if err := plain.Append(ctx, ps, feats, n); err != nil {
				t.Fatal(err)
			}
			p := draft.Proposal{KeepLogits: true}
			if err := plain.Draft(ctx, ps, g.Ints(t, fmt.Sprintf("anchor.%d", n))[0], nil, &p); err != nil {
				t.Fatal(err)
			}
			e, _ := drafttest.RelErr(p.Logits, g.Floats(t, fmt.Sprintf("yarn.greedy_logits.%d", n)))
			t.Logf("default RoPE vs the YaRN goldens: relative error %.3g", e)
			if !(e > 10*drafttest.TolLogits) {
				t.Errorf("default RoPE matches the YaRN goldens to %.3g: the YaRN records do not test the scaling", e)
			}
		})
	}
}

// TestAppendInPieces appends the 40 context rows as a round would (17, draft, 23, draft) and in
// single rows, and checks against appending at once and against the goldens of both lengths.
func TestAppendInPieces(t *testing.T) {
	g := drafttest.Read(t)
	d := newDense(t, g, "bf16")
	ctx := context.Background()
	fd := d.Cfg.FeatureDim()
	feats := g.Features(t, 40, fd)

	st, err := d.NewState(40)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Append(ctx, st, feats[:17*fd], 17); err != nil {
		t.Fatal(err)
	}
	drafttest.Compare(t, g, d, st, "bf16", 17)
	if err := d.Append(ctx, st, feats[17*fd:], 23); err != nil {
		t.Fatal(err)
	}
	drafttest.Compare(t, g, d, st, "bf16", 40)

	once, _ := d.NewState(40)
	ones, _ := d.NewState(40)
	if err := d.Append(ctx, once, feats, 40); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 40; i++ {
		if err := d.Append(ctx, ones, feats[i*fd:(i+1)*fd], 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Append(ctx, ones, nil, 0); err != nil || ones.Len() != 40 {
		t.Fatalf("empty append: %v, Len %d", err, ones.Len())
	}
	for l := 0; l < d.Cfg.Layers; l++ {
		k0, v0, _ := once.Context(l)
		for _, s := range []*draft.State{st, ones} {
			k, v, _ := s.Context(l)
			ek, _ := drafttest.RelErr(k, k0)
			ev, _ := drafttest.RelErr(v, v0)
			if ek > 1e-6 || ev > 1e-6 {
				t.Errorf("layer %d: pieces vs at once: K %.3g, V %.3g relative", l, ek, ev)
			}
		}
	}
	var a, b draft.Proposal
	if err := d.Draft(ctx, once, 7, nil, &a); err != nil {
		t.Fatal(err)
	}
	if err := d.Draft(ctx, ones, 7, nil, &b); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a.Tokens, b.Tokens) {
		t.Errorf("draft after single-row appends %v, after one append %v", b.Tokens, a.Tokens)
	}
	// Truncate back to 17 rows: the 17-row goldens again.
	if err := once.Truncate(17); err != nil {
		t.Fatal(err)
	}
	drafttest.Compare(t, g, d, once, "bf16", 17)
	if err := once.Truncate(18); err == nil {
		t.Error("Truncate past Len accepted")
	}
}

// TestMinConfidence stops the chain at the first slot (k ≥ 1) below the threshold.
func TestMinConfidence(t *testing.T) {
	g := drafttest.Read(t)
	d := newDense(t, g, "bf16")
	ctx := context.Background()
	st, _ := d.NewState(8)
	if err := d.Append(ctx, st, g.Features(t, 6, d.Cfg.FeatureDim()), 6); err != nil {
		t.Fatal(err)
	}
	anchor := g.Ints(t, "anchor.6")[0]
	conf := g.Floats(t, "bf16.greedy_conf.6")
	want := g.Ints(t, "bf16.greedy.6")
	// A threshold just above slot 3's confidence, below slots 1 and 2.
	thr := conf[3] + 1e-4
	stop := 1
	for stop < len(conf) && conf[stop] >= thr {
		stop++
	}
	if stop == 1 || stop == len(conf) {
		t.Fatalf("recorded confidences %v do not exercise the early stop at %v", conf, thr)
	}
	p := draft.Proposal{MinConfidence: thr}
	if err := d.Draft(ctx, st, anchor, nil, &p); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p.Tokens, want[:stop]) || len(p.Confidence) != stop {
		t.Errorf("early stop at %v: tokens %v, confidence %v; want %v", thr, p.Tokens, p.Confidence, want[:stop])
	}
	p = draft.Proposal{MinConfidence: 2} // above every confidence: one token all the same
	if err := d.Draft(ctx, st, anchor, nil, &p); err != nil || len(p.Tokens) != 1 || p.Tokens[0] != want[0] {
		t.Errorf("MinConfidence 2: %v, %v", p.Tokens, err)
	}
}

// TestDraftRefuses: bad anchors, chosen tokens, feature lengths, capacity, foreign states,
// cancelled and nil contexts are errors (never panics), and leave the state as it was.
func TestDraftRefuses(t *testing.T) {
	g := drafttest.Read(t)
	d := newDense(t, g, "bf16")
	other := newDense(t, g, "bf16")
	ctx := context.Background()
	fd := d.Cfg.FeatureDim()
	feats := g.Features(t, 6, fd)
	st, _ := d.NewState(6)
	if err := d.Append(ctx, st, feats[:3*fd], 3); err != nil {
		t.Fatal(err)
	}
	var p draft.Proposal
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	var nilCtx context.Context
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"anchor", d.Draft(ctx, st, 1000, nil, &p), "anchor token 1000"},
		{"negative anchor", d.Draft(ctx, st, -1, nil, &p), "anchor token -1"},
		{"chosen", d.Draft(ctx, st, 5, func(int, []float32) int32 { return 1000 }, &p), "chosen token 1000"},
		{"nil proposal", d.Draft(ctx, st, 5, nil, nil), "nil proposal"},
		{"foreign state", other.Draft(ctx, st, 5, nil, &p), "not made by this drafter"},
		{"feature length", d.Append(ctx, st, feats[:fd+1], 1), "385 feature values for 1 rows of 384"},
		{"capacity", d.Append(ctx, st, feats[:4*fd], 4), "exceed the context of 6"},
		{"foreign append", other.Append(ctx, st, feats[:fd], 1), "not made by this drafter"},
		{"cancelled append", d.Append(cancelled, st, feats[:fd], 1), context.Canceled.Error()},
		{"cancelled draft", d.Draft(cancelled, st, 5, nil, &p), context.Canceled.Error()},
		{"nil context append", d.Append(nilCtx, st, feats[:fd], 1), "draft append: nil context"},
		{"nil context draft", d.Draft(nilCtx, st, 5, nil, &p), "draft: nil context"},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, c.err, c.want)
		}
	}
	if st.Len() != 3 {
		t.Errorf("Len %d after refused calls, want 3", st.Len())
	}
	if _, err := d.NewState(0); err == nil {
		t.Error("NewState(0) accepted")
	}
	if _, _, err := st.Context(2); err == nil {
		t.Error("Context(2) of a 2-layer drafter accepted")
	}
	if !errors.Is(d.Append(cancelled, st, feats[:fd], 1), context.Canceled) {
		t.Error("cancelled Append does not wrap context.Canceled")
	}
}

// TestNewRefuses names the tensor whose shape does not fit the config, and the target tables.
func TestNewRefuses(t *testing.T) {
	g := drafttest.Read(t)
	cfg := drafttest.Config(t)
	emb, head := g.Target(t, cfg.Vocab, cfg.Hidden)
	w := drafttest.Weights(t, cfg, "bf16")
	small, _ := model.Dense(make([]float32, 4), 2, 2)
	smallEmb, _ := model.DenseEmbedding(make([]float32, 999*128), 999, 128)
	cases := []struct {
		name string
		edit func(w *draft.Weights, e *model.Embedding, h *model.Matrix)
		want string
	}{
		{"fc", func(w *draft.Weights, _ *model.Embedding, _ *model.Matrix) { w.FC = small }, "fc is [2, 2], want [128, 384]"},
		{"q_proj", func(w *draft.Weights, _ *model.Embedding, _ *model.Matrix) { w.Layers[1].Q = small }, "layers.1.self_attn.q_proj"},
		{"k_norm", func(w *draft.Weights, _ *model.Embedding, _ *model.Matrix) { w.Layers[0].KNorm = w.Layers[0].KNorm[:5] }, "layers.0.self_attn.k_norm has 5 values"},
		{"layers", func(w *draft.Weights, _ *model.Embedding, _ *model.Matrix) { w.Layers = w.Layers[:1] }, "1 layers of weights"},
		{"markov_w2", func(w *draft.Weights, _ *model.Embedding, _ *model.Matrix) { w.MarkovW2 = small }, "markov_head.markov_w2"},
		{"markov_w1", func(w *draft.Weights, _ *model.Embedding, _ *model.Matrix) { w.MarkovW1 = smallEmb }, "markov_head.markov_w1"},
		{"confidence", func(w *draft.Weights, _ *model.Embedding, _ *model.Matrix) { w.ConfProj = small }, "confidence_head.proj"},
		{"bias", func(w *draft.Weights, _ *model.Embedding, _ *model.Matrix) { w.ConfBias = float32(math.NaN()) }, "confidence_head.proj.bias"},
		{"embedding", func(_ *draft.Weights, e *model.Embedding, _ *model.Matrix) { *e = smallEmb }, "target embedding [999, 128]"},
		{"lm_head", func(_ *draft.Weights, _ *model.Embedding, h *model.Matrix) { *h = small }, "target lm_head [2, 2]"},
	}
	for _, c := range cases {
		w2 := w
		w2.Layers = slices.Clone(w.Layers)
		e2, h2 := emb, head
		c.edit(&w2, &e2, &h2)
		_, err := draft.New(cfg, w2, e2, h2)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
}
