package cpu

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"lithos/runtime/backend"
	"lithos/runtime/bundle"
	"lithos/runtime/model"
	"lithos/runtime/sample"
)

// Backend is the CPU backend (backend.Backend): targets are runtime/model graphs over the
// bundle's packed bytes (LoadTarget), sessions run the prefill and decode programs step by
// step on the calling goroutine (the matrix kernels fan out over GOMAXPROCS goroutines).
type Backend struct{}

// Name returns "cpu".
func (Backend) Name() string { return "cpu" }

// Load builds the target (LoadTarget). ctx is not consulted: the CPU maps, it does not copy.
func (Backend) Load(_ context.Context, b *bundle.Bundle) (backend.Target, error) {
	m, err := LoadTarget(b)
	if err != nil {
		return nil, err
	}
	return &Target{M: m}, nil
}

// Target is a loaded model on the CPU (backend.Target).
type Target struct {
	M *model.Model
}

// Config returns the model's configuration.
func (t *Target) Config() model.Config { return t.M.Cfg }

// Close does nothing: the weights are the bundle's mapping.
func (t *Target) Close() error { return nil }

// NewSession allocates the KV cache and GDN states of a sequence (runtime/model.State: two
// slots per GDN layer) with the step state and ring of the contract. Errors: options out of
// range (backend.SessionOptions.Normalize), a state too large.
func (t *Target) NewSession(opt backend.SessionOptions) (backend.Session, error) {
	if err := opt.Normalize(t.M.Cfg.Vocab); err != nil {
		return nil, err
	}
	st, err := t.M.NewState(opt.Capacity)
	if err != nil {
		return nil, err
	}
	smp, err := sample.New(opt.Sampling)
	if err != nil {
		return nil, err
	}
	return &Session{
		m: t.M, st: st, opt: opt, sampler: smp,
		ss:   backend.NewStepState(max(opt.PrefillChunk, backend.DecodeRows), opt.Sampling.Seed),
		ring: backend.NewRing(opt.RingCapacity),
	}, nil
}

// Session runs the programs of one sequence on the CPU (backend.Session). The prefill and
// decode programs are Go code reading the step state exactly as a recorded device program
// would: rows and tokens from Pending/Rows, the position from Position, the GDN slot from the
// model state's parity (which flips with every committed step, as Step&1 does), the seed from
// the seed words.
type Session struct {
	m       *model.Model
	st      *model.State
	opt     backend.SessionOptions
	sampler *sample.Sampler
	ss      *backend.StepState
	ring    *backend.Ring
}

// State returns the step state.
func (s *Session) State() *backend.StepState { return s.ss }

// Ring returns the token ring.
func (s *Session) Ring() *backend.Ring { return s.ring }

// Close drops the session's state.
func (s *Session) Close() error { s.st = nil; return nil }

// ErrDone is returned by Prefill on a session whose step state says done.
var ErrDone = errors.New("session: done (a stop condition was met)")

// Prefill implements backend.Session.
func (s *Session) Prefill(ctx context.Context, prompt []int32) error {
	ss := s.ss
	if s.st == nil {
		return errors.New("session: closed")
	}
	if ss.Done != 0 {
		return ErrDone
	}
	if len(prompt) == 0 {
		return errors.New("prefill: empty prompt")
	}
	vocab := s.m.Cfg.Vocab
	for i, t := range prompt {
		if t < 0 || int(t) >= vocab {
			return fmt.Errorf("prefill: token %d (prompt position %d) is outside the vocabulary [0, %d)", t, i, vocab)
		}
	}
	if int(ss.Position)+len(prompt) > s.opt.Capacity {
		return fmt.Errorf("prefill: %d prompt tokens at position %d exceed the context of %d", len(prompt), ss.Position, s.opt.Capacity)
	}
	chunk := s.opt.PrefillChunk
	steps := (len(prompt) + chunk - 1) / chunk
	for i := 0; i < steps; i++ {
		rows := prompt[i*chunk : min((i+1)*chunk, len(prompt))]
		ss.Rows = uint32(len(rows))
		copy(ss.Pending, rows)
		ss.PrefillLeft = uint32(steps - 1 - i)
		if err := s.step(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Decode implements backend.Session.
func (s *Session) Decode(ctx context.Context, steps int) error {
	if s.st == nil {
		return errors.New("session: closed")
	}
	ss := s.ss
	for i := 0; i < steps && ss.Done == 0; i++ {
		if ss.Anchor < 0 {
			return errors.New("decode: no token to feed (run Prefill first)")
		}
		ss.Rows = 1
		ss.Pending[0] = ss.Anchor
		ss.PrefillLeft = 0
		if err := s.step(ctx); err != nil {
			return err
		}
	}
	return nil
}

// step is one step of the program: Rows tokens of Pending at Position; commit; when no
// prefill step is left, sample the next token and push it to the ring.
func (s *Session) step(ctx context.Context) error {
	ss := s.ss
	if ss.Done != 0 {
		return nil
	}
	n := int(ss.Rows)
	if int(ss.Position)+n > s.opt.Capacity {
		ss.Error, ss.Done = backend.ErrContextFull, 1
		return nil
	}
	if int(ss.Position) != s.st.Pos() {
		return fmt.Errorf("session: step state at position %d, model state at %d", ss.Position, s.st.Pos())
	}
	logits, err := s.m.Step(ctx, s.st, ss.Pending[:n], false)
	if err != nil {
		return err
	}
	if err := s.st.Commit(n); err != nil {
		return err
	}
	ss.Position += uint32(n)
	ss.Committed = uint32(n)
	ss.Accepted = 0
	ss.Step++
	if ss.PrefillLeft > 0 {
		return nil
	}
	tok := int32(s.sample(logits, int(ss.Position)))
	if !s.ring.Push(ss, tok) {
		return nil
	}
	ss.Anchor = tok
	if slices.Contains(s.opt.EOS, tok) || (ss.StopAt != 0 && ss.RingHead >= ss.StopAt) {
		ss.Done = 1
	}
	return nil
}

// sample picks the token for position pos with the seed of the step state's seed words.
func (s *Session) sample(logits []float32, pos int) int {
	if seed := s.ss.Seed(); seed != s.sampler.Params().Seed {
		p := s.sampler.Params()
		p.Seed = seed
		s.sampler, _ = sample.New(p)
	}
	return s.sampler.Sample(logits, pos)
}
