package generate

import (
	"context"
	"slices"
	"strings"
	"testing"

	"lithos/pack"
	"lithos/runtime/backend"
	"lithos/runtime/backend/cuda"
	"lithos/runtime/generate/gentest"
)

// countingTarget is a target whose sessions record the steps each Decode call asked for.
type countingTarget struct {
	backend.Target
	calls *[]int
}

func (c countingTarget) NewSession(o backend.SessionOptions) (backend.Session, error) {
	s, err := c.Target.NewSession(o)
	if err != nil {
		return nil, err
	}
	return &countingSession{Session: s, calls: c.calls}, nil
}

type countingSession struct {
	backend.Session
	calls *[]int
}

func (s *countingSession) Decode(ctx context.Context, steps int) error {
	*s.calls = append(*s.calls, steps)
	return s.Session.Decode(ctx, steps)
}

func sum(v []int) int {
	n := 0
	for _, x := range v {
		n += x
	}
	return n
}

// TestRoundsPerCall: Generate queues RoundsPerCall decode steps per Session.Decode call (1 by
// default on the CPU backend, DefaultRoundsPerCall on a GPU one), fewer near MaxTokens (the
// first call as if every round committed B + 1 tokens, then the steps the tokens left need at
// the rate so far: the fixture's random head commits one token per round, so no step is
// queued past MaxTokens here), and counts the rounds the session ran,
// not the calls; the tokens
// are transformers' greedy continuation whatever the steps per call, with and without the
// draft head. An EOS wastes at most RoundsPerCall − 1 queued steps; values outside
// [0, MaxRoundsPerCall] are refused before any work.
func TestRoundsPerCall(t *testing.T) {
	r, err := OpenWith(context.Background(), draftFixture(t, "b", pack.DraftBF16, 1), Options{Log: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	i32, _, err := gentest.Goldens("b")
	if err != nil {
		t.Fatal(err)
	}
	want := i32["greedy.11"]
	var calls []int
	r.Target = countingTarget{Target: r.Target, calls: &calls}
	for _, c := range []struct {
		k       int
		noDraft bool
		first   int // steps of the first call: 31 tokens left after the prefill's, up to 8 per round
	}{{0, false, 1}, {1, false, 1}, {3, false, 3}, {64, false, 4}, {5, true, 5}, {64, true, 31}} {
		calls = calls[:0]
		res, err := r.Generate(context.Background(), Request{PromptIDs: i32["prompt.11"], MaxTokens: 32, Sampling: greedy, RoundsPerCall: c.k, NoDraft: c.noDraft})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(res.Tokens, want) || res.FinishReason != FinishLength {
			t.Fatalf("k %d no-draft %v: %v (%s), want %v", c.k, c.noDraft, res.Tokens, res.FinishReason, want)
		}
		rounds := res.Rounds
		if s := res.Speculative; s != nil {
			if s.Rounds+s.PlainSteps != rounds {
				t.Fatalf("k %d: result rounds %d, session %d rounds + %d single steps", c.k, rounds, s.Rounds, s.PlainSteps)
			}
		} else if rounds != 31 {
			t.Fatalf("k %d no-draft: %d rounds, want 31 single steps", c.k, rounds)
		}
		if len(calls) == 0 || calls[0] != c.first || slices.Max(calls) > max(c.k, 1) || sum(calls) != rounds {
			t.Fatalf("k %d no-draft %v: calls %v for %d rounds, want the first of %d steps, none over %d, none wasted", c.k, c.noDraft, calls, rounds, c.first, max(c.k, 1))
		}
		t.Logf("k %d no-draft %v: %d rounds in %d calls %v", c.k, c.noDraft, rounds, len(calls), calls)
	}

	// An EOS inside a call: the queued steps after it are the only waste.
	at := -1
	for i := 2; i < len(want); i++ {
		if !slices.Contains(want[:i], want[i]) {
			at = i
			break
		}
	}
	r.EOS = []int32{want[at]}
	calls = calls[:0]
	res, err := r.Generate(context.Background(), Request{PromptIDs: i32["prompt.11"], MaxTokens: 32, Sampling: greedy, RoundsPerCall: 8, NoDraft: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.FinishReason != FinishEOS || !slices.Equal(res.Tokens, want[:at]) || res.Rounds != at || sum(calls)-res.Rounds > 7 {
		t.Fatalf("EOS at %d: %s, %v, %d rounds, calls %v", at, res.FinishReason, res.Tokens, res.Rounds, calls)
	}

	for _, k := range []int{-1, MaxRoundsPerCall + 1} {
		calls = calls[:0]
		if _, err := r.Generate(context.Background(), Request{PromptIDs: []int32{1}, MaxTokens: 4, Sampling: greedy, RoundsPerCall: k}); err == nil || !strings.Contains(err.Error(), "rounds per call") || len(calls) != 0 {
			t.Errorf("rounds per call %d: %v (calls %v), want a refusal before any work", k, err, calls)
		}
	}
	if got := (&Runner{Backend: cuda.Backend{}}).roundsPerCall(&Request{}); got != DefaultRoundsPerCall {
		t.Errorf("default on cuda: %d, want %d", got, DefaultRoundsPerCall)
	}
}
