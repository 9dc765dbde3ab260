package sample

import (
	"math"
	"slices"
	"testing"
)

var testLogits = []float32{1.5, -0.5, 0.25, 2.0, -3.0, 0.75, 1.0, -1.25}

// softmax64 is the reference distribution: softmax(logits/T) in float64, restricted to keep
// (nil: all) and renormalized.
func softmax64(logits []float32, temp float64, keep []int) []float64 {
	p := make([]float64, len(logits))
	var sum float64
	for i, l := range logits {
		if keep != nil && !slices.Contains(keep, i) {
			continue
		}
		p[i] = math.Exp(float64(l) / temp)
		sum += p[i]
	}
	for i := range p {
		p[i] /= sum
	}
	return p
}

// chiSquare returns Σ (observed − expected)² / expected over the tokens with expected > 0, and
// fails the test when a token with zero expected count was drawn.
func chiSquare(t *testing.T, counts []int, p []float64, n int) float64 {
	t.Helper()
	var x2 float64
	for i, c := range counts {
		e := p[i] * float64(n)
		if e == 0 {
			if c != 0 {
				t.Fatalf("token %d drawn %d times, its probability is 0", i, c)
			}
			continue
		}
		x2 += (float64(c) - e) * (float64(c) - e) / e
	}
	return x2
}

// chi2Crit999 are the 0.999 quantiles of χ² with 1…7 degrees of freedom.
var chi2Crit999 = []float64{0, 10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32}

func draw(t *testing.T, p Params, n int) []int {
	t.Helper()
	s, err := New(p)
	if err != nil {
		t.Fatal(err)
	}
	counts := make([]int, len(testLogits))
	for pos := 0; pos < n; pos++ {
		counts[s.Sample(testLogits, pos)]++
	}
	return counts
}

// TestDistributionMatchesSoftmax draws 40,000 tokens (positions 0…39,999, fixed seeds, so the
// test is deterministic) and requires the χ² statistic against softmax(logits/T), restricted
// by top-k / top-p as transformers' warpers restrict it, to stay below the 0.999 quantile. The
// same counts against the unrestricted or untempered distribution must fail the bound (the
// test can tell the rules apart).
func TestDistributionMatchesSoftmax(t *testing.T) {
	const n = 40000
	// Tokens by decreasing logit: 3 (2.0), 0 (1.5), 6 (1.0), 5 (0.75), 2, 1, 7, 4.
	cases := []struct {
		name  string
		p     Params
		keep  []int
		wrong []float64 // a distribution the counts must reject
	}{
		{"T=0.7", Params{Temperature: 0.7, TopP: 1, Seed: 1}, nil, softmax64(testLogits, 1, nil)},
		{"T=1.3", Params{Temperature: 1.3, TopP: 1, Seed: 2}, nil, softmax64(testLogits, 1, nil)},
		{"top-k 3", Params{Temperature: 1, TopK: 3, TopP: 1, Seed: 3}, []int{3, 0, 6}, softmax64(testLogits, 1, nil)},
		// At T = 1 the probabilities are 0.39, 0.24, 0.14, … (tokens 3, 0, 6): p = 0.6 keeps 3, 0 (0.63).
		{"top-p 0.6", Params{Temperature: 1, TopP: 0.6, Seed: 4}, []int{3, 0}, softmax64(testLogits, 1, []int{3, 0, 6})},
		// Top-k 4 then top-p 0.8 of the renormalized top-4: 3, 0, 6 (0.87 of the top-4 mass).
		{"top-k 4, top-p 0.8", Params{Temperature: 1, TopK: 4, TopP: 0.8, Seed: 5}, []int{3, 0, 6}, softmax64(testLogits, 1, []int{3, 0, 6, 5})},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			counts := draw(t, c.p, n)
			want := softmax64(testLogits, c.p.Temperature, c.keep)
			df := len(testLogits) - 1
			if c.keep != nil {
				df = len(c.keep) - 1
			}
			x2 := chiSquare(t, counts, want, n)
			t.Logf("counts %v, χ² %.2f (df %d, 0.999 quantile %.2f)", counts, x2, df, chi2Crit999[df])
			if x2 > chi2Crit999[df] {
				t.Errorf("χ² %.2f exceeds %.2f: the draws do not follow the distribution", x2, chi2Crit999[df])
			}
			var wrong float64
			for i, cnt := range counts {
				e := c.wrong[i] * n
				if e > 0 {
					wrong += (float64(cnt) - e) * (float64(cnt) - e) / e
				} else if cnt > 0 {
					wrong = math.Inf(1)
				}
			}
			if wrong < 10*chi2Crit999[len(testLogits)-1] {
				t.Errorf("the counts are also consistent with the wrong distribution (χ² %.2f): the test has no power", wrong)
			}
		})
	}
}

// TestDistributionValues checks Distribution's kept ids and probabilities directly.
func TestDistributionValues(t *testing.T) {
	s, _ := New(Params{Temperature: 0.5, TopK: 3, TopP: 1})
	probs := s.Distribution(testLogits)
	if !slices.Equal(s.Candidates(), []int32{0, 3, 6}) {
		t.Fatalf("top-3 candidates %v, want [0 3 6]", s.Candidates())
	}
	want := softmax64(testLogits, 0.5, []int{3, 0, 6})
	for i, id := range s.Candidates() {
		if math.Abs(probs[i]-want[id]) > 1e-12 {
			t.Errorf("token %d: probability %g, want %g", id, probs[i], want[id])
		}
	}
	// Ties in top-k go to the lower id.
	tie := []float32{1, 3, 3, 0, 3}
	s, _ = New(Params{Temperature: 1, TopK: 2, TopP: 1})
	s.Distribution(tie)
	if !slices.Equal(s.Candidates(), []int32{1, 2}) {
		t.Errorf("top-2 of %v: %v, want [1 2]", tie, s.Candidates())
	}
	// NaN and −Inf logits are never drawn.
	bad := []float32{float32(math.NaN()), 0, float32(math.Inf(-1)), 0}
	s, _ = New(Params{Temperature: 1, TopP: 1, Seed: 9})
	for pos := range 200 {
		if tok := s.Sample(bad, pos); tok != 1 && tok != 3 {
			t.Fatalf("drew token %d from %v", tok, bad)
		}
	}
	if tok := s.Sample([]float32{float32(math.Inf(-1)), float32(math.NaN())}, 0); tok != 0 {
		t.Errorf("all non-finite: token %d, want 0", tok)
	}
}

// TestFixedSeed checks that a seed fixes the output and that the draw depends on the position,
// not on the call history.
func TestFixedSeed(t *testing.T) {
	run := func(seed uint64, positions []int) []int {
		s, _ := New(Params{Temperature: 1, TopP: 0.95, Seed: seed})
		var out []int
		for _, p := range positions {
			out = append(out, s.Sample(testLogits, p))
		}
		return out
	}
	pos := make([]int, 64)
	for i := range pos {
		pos[i] = i
	}
	a, b := run(7, pos), run(7, pos)
	if !slices.Equal(a, b) {
		t.Fatalf("seed 7 twice: %v and %v", a, b)
	}
	if c := run(8, pos); slices.Equal(a, c) {
		t.Errorf("seeds 7 and 8 gave the same 64 tokens %v", a)
	}
	// Positions visited in another order give the same token per position.
	rev := slices.Clone(pos)
	slices.Reverse(rev)
	r := run(7, rev)
	slices.Reverse(r)
	if !slices.Equal(a, r) {
		t.Errorf("the token at a position depends on the call order: %v vs %v", a, r)
	}
}

func TestGreedy(t *testing.T) {
	s, _ := New(Params{Temperature: 0, TopP: 1, Seed: 3})
	for pos := range 10 {
		if tok := s.Sample(testLogits, pos); tok != 3 {
			t.Fatalf("greedy picked %d, want 3", tok)
		}
	}
	if got := Argmax([]float32{1, 5, 5, 2}); got != 1 {
		t.Errorf("Argmax tie: %d, want 1", got)
	}
}

func TestValidate(t *testing.T) {
	for _, p := range []Params{
		{Temperature: -1, TopP: 1}, {Temperature: math.NaN(), TopP: 1}, {Temperature: math.Inf(1), TopP: 1},
		{Temperature: 1, TopP: 0}, {Temperature: 1, TopP: 1.5}, {Temperature: 1, TopP: math.NaN()}, {Temperature: 1, TopK: -2, TopP: 1},
	} {
		if _, err := New(p); err == nil {
			t.Errorf("%+v accepted", p)
		}
	}
}

// TestProbsDrawIsSample: Draw over Probs with the position's uniform is Sample, token for
// token, for every transform (the speculative round samples the target's rows this way).
func TestProbsDrawIsSample(t *testing.T) {
	for _, p := range []Params{
		{Temperature: 1, TopP: 1, Seed: 1}, {Temperature: 0.6, TopK: 3, TopP: 1, Seed: 2},
		{Temperature: 1.4, TopP: 0.7, Seed: 3}, {Temperature: 1, TopK: 5, TopP: 0.8, Seed: 4},
	} {
		s, _ := New(p)
		var buf []float64
		for pos := range 3000 {
			buf = s.Probs(buf, testLogits)
			if len(buf) != len(testLogits) {
				t.Fatalf("%+v: %d probabilities", p, len(buf))
			}
			if got, want := Draw(buf, Uniform(p.Seed, pos)), s.Sample(testLogits, pos); got != want {
				t.Fatalf("%+v, position %d: Draw(Probs) = %d, Sample = %d", p, pos, got, want)
			}
		}
	}
	if s, _ := New(Params{TopP: 1}); s.Probs(nil, testLogits) != nil {
		t.Error("greedy Probs is not nil")
	}
}

// TestUniformStreams: stream 0 is Uniform; other streams differ from it and from each other.
func TestUniformStreams(t *testing.T) {
	same := [4]int{}
	for pos := range 1000 {
		u0 := UniformStream(5, 0, pos)
		if u0 != Uniform(5, pos) {
			t.Fatal("stream 0 is not Uniform")
		}
		for st := uint32(1); st <= 3; st++ {
			if UniformStream(5, st, pos) == u0 {
				same[st]++
			}
		}
		if UniformStream(5, StreamAccept, pos) == UniformStream(5, StreamDraft, pos) {
			same[0]++
		}
	}
	if same != [4]int{} {
		t.Errorf("equal draws across streams: %v", same)
	}
}

// TestSpeculativeMatchesP: drafts drawn from a deliberately bad q (the reversed distribution;
// one with mass on two tokens only), accepted with min(1, p/q) and otherwise replaced from
// norm(max(0, p − q)), give tokens distributed as p (χ² below the 0.999 quantile over 60,000
// deterministic draws), not as q; the acceptance rate is Σ min(p, q).
func TestSpeculativeMatchesP(t *testing.T) {
	const n = 60000
	p := softmax64(testLogits, 1, nil)
	rev := make([]float32, len(testLogits))
	for i, l := range testLogits {
		rev[i] = -l
	}
	cases := map[string][]float64{
		"reversed": softmax64(rev, 1, nil),
		"two tokens": func() []float64 {
			q := make([]float64, len(p))
			q[4], q[1] = 0.7, 0.3 // p's two least likely tokens
			return q
		}(),
		"q = p": p,
	}
	for name, q := range cases {
		t.Run(name, func(t *testing.T) {
			counts := make([]int, len(p))
			accepted := 0
			var resid []float64
			for i := range n {
				d := Draw(q, UniformStream(11, StreamDraft, i))
				if q[d] == 0 {
					t.Fatalf("drew draft %d with q = 0", d)
				}
				tok, ok := Speculative(p, q, d, UniformStream(11, StreamAccept, i), UniformStream(11, StreamResidual, i), resid)
				counts[tok]++
				if ok {
					accepted++
					if tok != d {
						t.Fatalf("accepted draft %d returned token %d", d, tok)
					}
				}
			}
			x2 := chiSquare(t, counts, p, n)
			t.Logf("counts %v, χ² %.2f vs p (0.999 quantile %.2f), acceptance %.4f", counts, x2, chi2Crit999[7], float64(accepted)/n)
			if x2 > chi2Crit999[7] {
				t.Errorf("χ² %.2f: the tokens do not follow p", x2)
			}
			var overlap float64
			for i := range p {
				overlap += math.Min(p[i], q[i])
			}
			if rate, sd := float64(accepted)/n, math.Sqrt(overlap*(1-overlap)/n); math.Abs(rate-overlap) > 5*sd+1e-12 {
				t.Errorf("acceptance %.4f, want Σ min(p, q) = %.4f", rate, overlap)
			}
			if name != "q = p" {
				var wrong float64
				for i, c := range counts {
					e := q[i] * n
					if e == 0 {
						if c > 0 {
							wrong = math.Inf(1)
						}
						continue
					}
					wrong += (float64(c) - e) * (float64(c) - e) / e
				}
				if wrong < 10*chi2Crit999[7] {
					t.Errorf("the tokens are also consistent with q (χ² %.2f)", wrong)
				}
			}
		})
	}
	// A draft the target gives no probability (removed by top-k) or outside the vocabulary is
	// never accepted, nor returned.
	pk := softmax64(testLogits, 1, []int{3, 0, 6})
	for _, d := range []int{4, -1, len(p)} {
		for _, u := range []float64{0, 0.5} {
			if tok, ok := Speculative(pk, cases["reversed"], d, u, 0.5, nil); ok || pk[tok] == 0 {
				t.Errorf("draft %d: token %d, accepted %v", d, tok, ok)
			}
		}
	}
}
