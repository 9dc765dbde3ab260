package cpu

import (
	"context"
	"math"
	"slices"
	"testing"

	"lithos/runtime/backend"
	"lithos/runtime/model"
	"lithos/runtime/model/modeltest"
	"lithos/runtime/sample"
)

// Sampling tests on tiny random targets (runtime/model/modeltest, dense weights) small enough
// that the target's distribution over whole continuations can be enumerated.

func tinyTarget(t *testing.T, vocab int, seed uint64) *Target {
	t.Helper()
	m, err := modeltest.Random(modeltest.Tiny(vocab), seed, 2)
	if err != nil {
		t.Fatal(err)
	}
	return &Target{M: m}
}

// selfDrafter drafts with the target itself: logits row k is the target's logits after the
// committed tokens, the anchor and drafts 0…k−1, times scale (scale 1 at temperature 1: q = p;
// below 1: a flatter q than p). prompt seeds the proposer's token history; the proposer keeps
// a target state of the committed tokens (p.st) and steps the block rows from it.
func selfDrafter(m *model.Model, prompt []int32, scale float32) *testDrafter {
	d := &testDrafter{taps: []int{1}, block: 7, hidden: m.Cfg.Hidden, vocab: m.Cfg.Vocab}
	ctx := context.Background()
	d.row = func(p *testProposer, _ int, _ int32, _ int, logits []float32) {
		if p.hist == nil {
			p.hist = slices.Clone(prompt)
		}
		if p.st == nil {
			p.st, _ = m.NewState(64)
		}
		if n := p.st.Pos(); n < len(p.hist) {
			if _, err := m.Forward(ctx, p.st, p.hist[n:], false); err != nil {
				panic(err)
			}
		}
		l, err := m.Step(ctx, p.st, p.block, false)
		if err != nil {
			panic(err)
		}
		for i, v := range l {
			logits[i] = v * scale
		}
	}
	return d
}

// randomDrafter drafts from logits that are a fixed pseudo-random function of the position,
// the previous token and the id (a Markov chain of its own, unrelated to the target).
func randomDrafter(m *model.Model, spread float64) *testDrafter {
	return &testDrafter{taps: []int{0, 3}, block: 7, hidden: m.Cfg.Hidden, vocab: m.Cfg.Vocab,
		row: func(_ *testProposer, pos int, prev int32, k int, logits []float32) {
			for i := range logits {
				u := sample.UniformStream(uint64(pos+k)<<20|uint64(prev)<<8|uint64(i), 7, 0)
				logits[i] = float32(spread * (2*u - 1))
			}
		}}
}

// TestPointMassEqualsPlainSampling: with the point-mass rule (the default) a speculative run
// commits, token for token, what plain sampling with the same seed commits — every token is
// the target's sampled token at its position — at temperature 1 and with top-k/top-p, for a
// drafter that is often right and one that is not; the rounds do accept drafts.
func TestPointMassEqualsPlainSampling(t *testing.T) {
	tg := tinyTarget(t, 16, 31)
	prompt := []int32{3, 1, 4, 1, 5}
	for _, p := range []sample.Params{{Temperature: 1, TopP: 1}, {Temperature: 0.7, TopK: 6, TopP: 0.9}} {
		accepted := 0
		for seed := uint64(0); seed < 40; seed++ {
			p.Seed = seed
			plain, _, _ := generate(t, tg, backend.SessionOptions{Capacity: 64, Sampling: p}, prompt, 24)
			for name, d := range map[string]*testDrafter{"self": selfDrafter(tg.M, prompt, 1), "random": randomDrafter(tg.M, 3)} {
				got, s, _ := generate(t, tg, backend.SessionOptions{Capacity: 64, Sampling: p, Drafter: d}, prompt, 24)
				if !slices.Equal(got, plain) {
					t.Fatalf("%+v, %s drafter: speculative %v, plain %v", p, name, got, plain)
				}
				if name == "self" {
					accepted += s.Stats().Accepted[0]
				}
			}
		}
		t.Logf("%+v: %d rounds accepted their first draft (self drafter)", p, accepted)
		if accepted < 20 {
			t.Errorf("%+v: only %d rounds accepted a draft: the test does not exercise acceptance", p, accepted)
		}
	}
}

// seqDist enumerates the target's distribution over the next n tokens after prompt at
// temperature temp (scaled: the logits after the first token times scaleAfter, which models a
// rule that accepts every draft of a drafter with those logits).
func seqDist(t *testing.T, m *model.Model, prompt []int32, n int, temp float64, scaleAfter float32) map[string]float64 {
	smp, _ := sample.New(sample.Params{Temperature: temp, TopP: 1})
	out := map[string]float64{}
	var walk func(seq []int32, prob float64, depth int)
	walk = func(seq []int32, prob float64, depth int) {
		if depth == n {
			out[key(seq[len(prompt):])] += prob
			return
		}
		st, _ := m.NewState(len(seq))
		l, err := m.Forward(context.Background(), st, seq, false)
		if err != nil {
			t.Fatal(err)
		}
		if depth > 0 {
			for i := range l {
				l[i] *= scaleAfter
			}
		}
		ps := slices.Clone(smp.Probs(nil, l))
		for tok, q := range ps {
			if q > 0 {
				walk(append(slices.Clone(seq), int32(tok)), prob*q, depth+1)
			}
		}
	}
	walk(prompt, 1, 0)
	return out
}

func key(toks []int32) string {
	b := make([]byte, len(toks))
	for i, v := range toks {
		b[i] = byte(v)
	}
	return string(b)
}

// chi2 is Pearson's statistic of counts (n draws) against probabilities want, cells with an
// expected count below 5 pooled into one; it returns the statistic and the degrees of freedom.
func chi2(counts map[string]int, want map[string]float64, n int) (float64, int) {
	var x2, poolE, poolO float64
	cells := 0
	for k, p := range want {
		e, o := p*float64(n), float64(counts[k])
		if e < 5 {
			poolE, poolO = poolE+e, poolO+o
			continue
		}
		x2 += (o - e) * (o - e) / e
		cells++
	}
	for k, c := range counts { // drawn sequences the distribution does not have
		if _, ok := want[k]; !ok {
			poolO += float64(c)
		}
	}
	if poolE > 0 {
		x2 += (poolO - poolE) * (poolO - poolE) / poolE
		cells++
	} else if poolO > 0 {
		return math.Inf(1), cells
	}
	return x2, cells - 1
}

// chi2Two is the two-sample statistic of counts a and b (equal totals) over their cells with
// at least 10 draws together (the rest pooled); it returns the statistic and the degrees of
// freedom.
func chi2Two(a, b map[string]int) (float64, int) {
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	var x2 float64
	var pa, pb int
	cells := 0
	for k := range keys {
		if a[k]+b[k] < 10 {
			pa, pb = pa+a[k], pb+b[k]
			continue
		}
		d := float64(a[k] - b[k])
		x2 += d * d / float64(a[k]+b[k])
		cells++
	}
	if pa+pb > 0 {
		d := float64(pa - pb)
		x2 += d * d / float64(pa+pb)
		cells++
	}
	return x2, cells - 1
}

// chi2Crit returns the 0.999 quantile of χ² with df degrees of freedom (Wilson–Hilferty:
// df·(1 − 2/(9df) + z·√(2/(9df)))³, z = 3.0902; within 1% of the exact quantile for df ≥ 3).
func chi2Crit(df int) float64 {
	f := float64(df)
	c := 1 - 2/(9*f) + 3.0902*math.Sqrt(2/(9*f))
	return f * c * c * c
}

// TestSpeculativeSamplingChiSquare: at temperature 1 over a vocabulary of 5 and the next 3
// tokens (125 continuations, enumerated exactly from the target), 2500 seeded runs (fixed
// seeds: the test is deterministic) of speculative decoding — the point-mass rule with a
// drafter close to the target (q = the target's logits × 0.6), and sampled drafts with
// min(1, p/q) with that drafter and with a random one (a deliberately bad q) — give counts that a χ² test at the 0.999
// quantile cannot tell from the target's distribution, nor from plain sampling's counts; the
// same counts do reject the distribution a rule that accepted every draft would give.
func TestSpeculativeSamplingChiSquare(t *testing.T) {
	const runs, n = 2500, 3
	tg := tinyTarget(t, 5, 41)
	prompt := []int32{2, 0, 4}
	want := seqDist(t, tg.M, prompt, n, 1, 1)
	acceptAll := seqDist(t, tg.M, prompt, n, 1, 0.6) // every draft of the close drafter accepted
	count := func(opt backend.SessionOptions) (map[string]int, backend.RoundStats) {
		c := map[string]int{}
		var stats backend.RoundStats
		opt.Sampling = sample.Params{Temperature: 1, TopP: 1}
		sess, err := tg.NewSession(opt)
		if err != nil {
			t.Fatal(err)
		}
		s := sess.(*Session)
		for seed := uint64(0); seed < runs; seed++ {
			s.reset(t, seed)
			got, _, _ := run(t, s, prompt, n)
			if len(got) != n {
				t.Fatalf("seed %d: %d tokens", seed, len(got))
			}
			c[key(got)]++
			st := s.Stats()
			stats.Rounds += st.Rounds
			if stats.Accepted == nil {
				stats.Accepted = make([]int, len(st.Accepted))
			}
			for k, a := range st.Accepted {
				stats.Accepted[k] += a
			}
		}
		return c, stats
	}
	plain, _ := count(backend.SessionOptions{Capacity: 16})
	x2, df := chi2(plain, want, runs)
	t.Logf("plain sampling: χ² %.1f, df %d (0.999 quantile %.1f)", x2, df, chi2Crit(df))
	if x2 > chi2Crit(df) {
		t.Fatalf("plain sampling fails the test: χ² %.1f > %.1f", x2, chi2Crit(df))
	}
	// Blocks of 3 drafts: a 3-token output uses at most the first two drafts of a round.
	block3 := func(d *testDrafter) *testDrafter { d.block = 3; return d }
	for _, c := range []struct {
		name     string
		drafter  *testDrafter
		sampling string
	}{
		{"point mass, close q", block3(selfDrafter(tg.M, prompt, 0.6)), backend.DraftArgmax},
		{"min(1,p/q), close q", block3(selfDrafter(tg.M, prompt, 0.6)), backend.DraftSample},
		{"min(1,p/q), random q", block3(randomDrafter(tg.M, 4)), backend.DraftSample},
	} {
		t.Run(c.name, func(t *testing.T) {
			counts, st := count(backend.SessionOptions{Capacity: 16, Drafter: c.drafter, DraftSampling: c.sampling})
			x2, df := chi2(counts, want, runs)
			x2p, dfp := chi2Two(counts, plain)
			x2w, dfw := chi2(counts, acceptAll, runs)
			t.Logf("%d rounds, first drafts accepted %d, second %d; χ² %.1f (df %d, 0.999 quantile %.1f) against the target, %.1f (df %d, %.1f) against plain sampling, %.1f (df %d) against accepting every draft",
				st.Rounds, st.Accepted[0], st.Accepted[1], x2, df, chi2Crit(df), x2p, dfp, chi2Crit(dfp), x2w, dfw)
			if x2 > chi2Crit(df) {
				t.Errorf("χ² %.1f > %.1f: the speculative output does not follow the target's distribution", x2, chi2Crit(df))
			}
			if x2p > chi2Crit(dfp) {
				t.Errorf("two-sample χ² %.1f > %.1f: speculative and plain sampling differ", x2p, chi2Crit(dfp))
			}
			if c.name == "min(1,p/q), close q" && x2w < 3*chi2Crit(dfw) {
				t.Errorf("the counts are consistent with accepting every draft (χ² %.1f): the test has no power", x2w)
			}
			if st.Accepted[0] < runs/20 {
				t.Errorf("only %d first drafts accepted: the rule is barely exercised", st.Accepted[0])
			}
		})
	}
}
