package servetest_test

import (
	"context"
	"errors"
	"testing"

	"lithos/runtime/backend"
	"lithos/runtime/generate/gentest"
	"lithos/runtime/model"
	"lithos/runtime/sample"
	"lithos/runtime/serve/servetest"
	"lithos/runtime/tokenizer"
)

// newTarget is a Target on the gentest tokenizer (vocabulary 608) answering "<answer to TEXT>".
func newTarget(t *testing.T) (*servetest.Target, *tokenizer.Tokenizer) {
	t.Helper()
	tok, err := tokenizer.Parse(gentest.TokenizerJSON())
	if err != nil {
		t.Fatal(err)
	}
	return &servetest.Target{Cfg: model.Config{Vocab: 608}, Tok: tok, EOS: gentest.IMEnd,
		Script: func(h string) string { return "<answer to " + h + ">" }}, tok
}

// open opens a session of capacity tokens, prefill chunks of chunk rows (0: the default) and
// <|im_end|> as its EOS.
func open(t *testing.T, ft *servetest.Target, capacity, chunk int) backend.Session {
	t.Helper()
	s, err := ft.NewSession(backend.SessionOptions{Capacity: capacity, PrefillChunk: chunk,
		Sampling: sample.Params{TopP: 1}, EOS: []int32{gentest.IMEnd}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func ids(t *testing.T, tok *tokenizer.Tokenizer, s string) []int32 {
	t.Helper()
	enc, err := tok.Encode(s)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]int32, len(enc))
	for i, id := range enc {
		out[i] = int32(id)
	}
	return out
}

// run prefills prompt and decodes to the end, returning the text drained from the ring.
func run(t *testing.T, tok *tokenizer.Tokenizer, s backend.Session, prompt string) string {
	t.Helper()
	if err := s.Prefill(context.Background(), ids(t, tok, prompt)); err != nil {
		t.Fatal(err)
	}
	if err := s.Decode(context.Background(), 1000); err != nil {
		t.Fatal(err)
	}
	var got []int
	for _, id := range s.Ring().Drain(s.State(), nil) {
		got = append(got, int(id))
	}
	text, err := tok.Decode(got, false)
	if err != nil {
		t.Fatal(err)
	}
	return text
}

// TestScript: the answer is the script's text and EOS, the prefill runs in PrefillChunk steps,
// the counters count, and the session keeps to the contract's errors.
func TestScript(t *testing.T) {
	ft, tok := newTarget(t)
	s := open(t, ft, 64, 2)
	if _, ok := s.(backend.Snapshotter); ok {
		t.Error("a session without Snapshots is a Snapshotter")
	}
	if got := run(t, tok, s, "hello"); got != "<answer to hello><|im_end|>" {
		t.Fatalf("answer %q", got)
	}
	// Committed: the prompt and every answer token but the EOS; steps: a prompt chunk of 2
	// rows each, then one a committed answer token.
	st, p, n := s.State(), len(ids(t, tok, "hello")), len(ids(t, tok, "<answer to hello>"))
	if st.Done != 1 || int(st.Position) != p+n || int(st.Step) != (p+1)/2+n {
		t.Fatalf("done %d at position %d after %d steps; prompt %d tokens, answer %d", st.Done, st.Position, st.Step, p, n)
	}
	if err := s.Prefill(context.Background(), ids(t, tok, "more")); err == nil {
		t.Error("prefill on a done session accepted")
	}
	s.Close()
	s.Close()
	if c, want := ft.Counts(), (servetest.Counts{Prefilled: len(ids(t, tok, "hello")), Sessions: 1, Closed: 1}); c != want || ft.LastHistory() != "hello" {
		t.Fatalf("counts %+v, last history %q; want %+v, \"hello\"", c, ft.LastHistory(), want)
	}

	short := open(t, ft, 8, 0)
	if err := short.Prefill(context.Background(), ids(t, tok, "a prompt longer than eight tokens")); err == nil {
		t.Error("a prompt over the capacity accepted")
	}
	run(t, tok, short, "hi")
	if st := short.State(); st.Error != backend.ErrContextFull || st.Position != 8 {
		t.Errorf("at capacity: error %d, position %d", st.Error, st.Position)
	}
}

// TestHooks: Snapshots and Resets give the optional interfaces; Gate holds each step.
func TestHooks(t *testing.T) {
	ft, tok := newTarget(t)
	ft.Snapshots = true
	s := open(t, ft, 256, 0)
	sn := s.(backend.Snapshotter)
	if err := s.Prefill(context.Background(), ids(t, tok, "sys")); err != nil {
		t.Fatal(err)
	}
	snap, err := sn.Snapshot()
	if err != nil || snap.Position() != len(ids(t, tok, "sys")) {
		t.Fatalf("snapshot %v at %d", err, snap.Position())
	}
	s.Decode(context.Background(), 1000)
	if err := sn.Restore(snap); err != nil {
		t.Fatal(err)
	}
	if got := run(t, tok, s, "+user"); got != "<answer to sys+user><|im_end|>" {
		t.Errorf("after a restore: %q", got)
	}

	ft, tok = newTarget(t)
	ft.Resets = true
	s = open(t, ft, 256, 0)
	run(t, tok, s, "one")
	if err := s.(backend.Resetter).Reset(); err != nil {
		t.Fatal(err)
	}
	if got := run(t, tok, s, "two"); got != "<answer to two><|im_end|>" || ft.Counts().Resets != 1 {
		t.Errorf("after a reset: %q, %d resets", got, ft.Counts().Resets)
	}

	ft, tok = newTarget(t)
	ft.Gate, ft.GateRun = make(chan struct{}), make(chan struct{})
	s = open(t, ft, 256, 0)
	if err := s.Prefill(context.Background(), ids(t, tok, "x")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Decode(ctx, 1000) }()
	<-ft.GateRun
	ft.Gate <- struct{}{}
	<-ft.GateRun
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) || s.State().RingHead != 2 {
		t.Errorf("gated decode: %v after %d tokens, want cancelled after 2", err, s.State().RingHead)
	}
}
