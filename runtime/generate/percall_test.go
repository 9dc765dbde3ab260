package generate

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"lithos/pack"
	"lithos/runtime/backend"
	"lithos/runtime/backend/cuda"
	"lithos/runtime/generate/gentest"
)

// hookTarget is a target whose sessions' Decode calls go through decode (with the session
// wrapped).
type hookTarget struct {
	backend.Target
	decode func(s backend.Session, ctx context.Context, steps int) error
}

func (h hookTarget) NewSession(o backend.SessionOptions) (backend.Session, error) {
	s, err := h.Target.NewSession(o)
	if err != nil {
		return nil, err
	}
	return &hookSession{Session: s, decode: h.decode}, nil
}

type hookSession struct {
	backend.Session
	decode func(s backend.Session, ctx context.Context, steps int) error
}

func (s *hookSession) Decode(ctx context.Context, steps int) error {
	return s.decode(s.Session, ctx, steps)
}

// countingTarget's sessions record the steps each Decode call asked for in *calls.
func countingTarget(t backend.Target, calls *[]int) hookTarget {
	return hookTarget{Target: t, decode: func(s backend.Session, ctx context.Context, steps int) error {
		*calls = append(*calls, steps)
		return s.Decode(ctx, steps)
	}}
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
	r.Target = countingTarget(r.Target, &calls)
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
	// The call that ran the EOS step was the last one: no call after it.
	if res.FinishReason != FinishEOS || !slices.Equal(res.Tokens, want[:at]) || res.Rounds != at ||
		!(sum(calls[:len(calls)-1]) < res.Rounds && res.Rounds <= sum(calls)) {
		t.Fatalf("EOS at %d: %s, %v, %d rounds, calls %v", at, res.FinishReason, res.Tokens, res.Rounds, calls)
	}

	for _, k := range []int{-1, MaxRoundsPerCall + 1} {
		calls = calls[:0]
		if _, err := r.Generate(context.Background(), Request{PromptIDs: []int32{1}, MaxTokens: 4, Sampling: greedy, RoundsPerCall: k}); err == nil || !strings.Contains(err.Error(), "rounds per call") || len(calls) != 0 {
			t.Errorf("rounds per call %d: %v (calls %v), want a refusal before any work", k, err, calls)
		}
	}
	if got := (&Runner{Backend: cuda.Backend{}}).RoundsPerCall(0); got != DefaultRoundsPerCall {
		t.Errorf("default on cuda: %d, want %d", got, DefaultRoundsPerCall)
	}
}

// TestCallSteps: the steps of one call for the tokens left before StopAt at the rate so far,
// within the ring's free slots.
func TestCallSteps(t *testing.T) {
	for _, c := range []struct {
		head, tail, stopAt                        uint32
		ring                                      int // capacity; 0: no ring
		perCall, tokens, rounds, stepTokens, want int
	}{
		{0, 0, 0, 0, 4, 0, 0, 8, 4},           // no StopAt
		{10, 10, 42, 0, 4, 0, 0, 8, 4},        // 32 left, 8 a step at most: 4
		{10, 10, 20, 0, 4, 0, 0, 8, 2},        // 10 left: ⌈10/8⌉
		{10, 10, 20, 0, 16, 9, 9, 8, 10},      // one token a round so far: the 10 left
		{10, 10, 20, 0, 16, 40, 10, 8, 3},     // 4 a round: ⌈10/4⌉
		{10, 10, 20, 0, 16, 5, 10, 8, 10},     // under 1 a round counts as 1
		{10, 10, 10, 0, 4, 0, 0, 1, 4},        // at StopAt (the device sets done): unchanged
		{5, 5, 9, 0, 0, 0, 0, 1, 1},           // perCall below 1 counts as 1
		{0, 0, 0, 4096, 64, 0, 0, 65, 63},     // 64 rounds of a block of 64 would overflow 4096 slots
		{100, 40, 0, 128, 8, 0, 0, 8, 8},      // 68 free slots: 8 rounds of 8
		{100, 40, 0, 100, 8, 0, 0, 8, 5},      // 40 free: 5
		{100, 10, 0, 100, 8, 0, 0, 8, 1},      // 10 free: one round (a full ring is the device's to report)
		{100, 100, 1000, 4096, 8, 0, 0, 1, 8}, // an empty ring holds them
	} {
		ss := backend.StepState{RingHead: c.head, RingTail: c.tail, StopAt: c.stopAt}
		var ring *backend.Ring
		if c.ring > 0 {
			ring = backend.NewRing(c.ring)
		}
		if got := CallSteps(&ss, ring, c.perCall, c.tokens, c.rounds, c.stepTokens); got != c.want {
			t.Errorf("%+v: %d steps, want %d", c, got, c.want)
		}
	}
}

// TestCancelInsideCall: the tokens of the steps a cancelled call completed are in the result.
func TestCancelInsideCall(t *testing.T) {
	r := openFixture(t, gentest.Options{})
	want := golden(t)["greedy.11"]
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The first call runs its first two steps, then the context is cancelled and the call
	// fails with its error, as a cancellation inside a call of several steps does on the CPU.
	r.Target = hookTarget{Target: r.Target, decode: func(s backend.Session, ctx context.Context, steps int) error {
		if err := s.Decode(ctx, min(steps, 2)); err != nil {
			return err
		}
		cancel()
		return ctx.Err()
	}}
	res, err := r.Generate(ctx, Request{PromptIDs: golden(t)["prompt.11"], MaxTokens: 32, Sampling: greedy, RoundsPerCall: 8})
	if !errors.Is(err, context.Canceled) || res == nil || res.FinishReason != FinishCancelled {
		t.Fatalf("Generate = %+v, %v; want the result so far and context.Canceled", res, err)
	}
	if res.Rounds != 2 || !slices.Equal(res.Tokens, want[:3]) {
		t.Fatalf("%d rounds, tokens %v; want 2 rounds and the prefill's token and theirs, %v", res.Rounds, res.Tokens, want[:3])
	}
}
