// Package servetest is a scripted backend.Target for tests of servers and clients: its
// sessions follow the backend.Session contract of lithos/runtime/backend (prefill in
// PrefillChunk steps, the step state and token ring, StopAt, EOS, capacity, cancellation
// between steps; optionally backend.Snapshotter or backend.Resetter) but its "model" answers a
// script. After each Prefill the output is the tokens of Script(the whole history as text)
// followed by EOS, pushed into the ring one per step as a device does. A server test thus sees
// exact outputs (tool calls, thinking, stop sequences) from the real server code, and Counts
// tells what the server asked of the backend.
//
// Used by the tests of lithos/runtime/serve and tools/sdkcheck (with the gentest tokenizer of
// lithos/runtime/generate/gentest, whose end-of-turn token is gentest.IMEnd).
//
// Imports: lithos/runtime/{backend, bundle, model, tokenizer}.
package servetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"lithos/runtime/backend"
	"lithos/runtime/bundle"
	"lithos/runtime/model"
	"lithos/runtime/tokenizer"
)

// Target is the scripted backend.Target. Set the fields before the first NewSession and do not
// change them afterwards; the counters (Counts) are safe to read at any time.
type Target struct {
	// Cfg is what Config returns; NewSession checks the options against Cfg.Vocab.
	Cfg model.Config
	// Tok decodes the history for Script and encodes the answer.
	Tok *tokenizer.Tokenizer
	// Script maps the text of the whole history (special tokens included) to the answer.
	// A nil Script makes Prefill fail.
	Script func(history string) string
	// EOS is the token that ends every answer: it follows the script's tokens, and every step
	// after them pushes it again (gentest.IMEnd with the gentest tokenizer). The session stops
	// on it only when it is among the session's SessionOptions.EOS.
	EOS int32
	// Snapshots makes sessions implement backend.Snapshotter; Resets makes them implement
	// backend.Resetter (ignored with Snapshots).
	Snapshots, Resets bool
	// FailRestore makes Restore fail after it has scrambled the session's history, as a GPU
	// session's Restore that fails mid-copy leaves its state undefined.
	FailRestore bool
	// Gate, when set, makes every decode step take one value from it first (a test releases
	// steps one by one); GateRun, when set too, gets a value before each step waits on Gate
	// (a test learns that a step is running). A cancelled ctx ends either wait.
	Gate, GateRun chan struct{}
	// OnPrefill, when set, is called after each Prefill with the text of the whole history,
	// from the goroutine that called Prefill.
	OnPrefill func(history string)
	// OnSession, when set, is called by NewSession with the options it accepted (normalized),
	// from the goroutine that called it.
	OnSession func(opt backend.SessionOptions)

	mu     sync.Mutex
	counts Counts
	last   string
}

// Counts is what the engine asked of a Target, over all its sessions.
type Counts struct {
	Prefilled int // prompt tokens prefilled
	Sessions  int // sessions opened
	Closed    int // sessions closed (each once)
	Snapshots int // Snapshot calls
	Restores  int // Restore calls that succeeded
	Resets    int // Reset calls that succeeded
}

// Counts returns a copy of the counters.
func (t *Target) Counts() Counts {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.counts
}

// LastHistory returns the text of the whole history at the last Prefill ("" before any).
func (t *Target) LastHistory() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.last
}

// Config returns Cfg.
func (t *Target) Config() model.Config { return t.Cfg }

// Close does nothing.
func (t *Target) Close() error { return nil }

// LoadDraft returns nil, nil: the scripted target has no draft head.
func (t *Target) LoadDraft(context.Context, *bundle.Bundle) (backend.Drafter, error) {
	return nil, nil
}

// NewSession opens a scripted session. Errors: options that SessionOptions.Normalize refuses.
func (t *Target) NewSession(opt backend.SessionOptions) (backend.Session, error) {
	if err := opt.Normalize(t.Cfg.Vocab); err != nil {
		return nil, err
	}
	t.add(func(c *Counts) { c.Sessions++ })
	if t.OnSession != nil {
		t.OnSession(opt)
	}
	s := &session{t: t, opt: opt, ss: backend.NewStepState(max(opt.PrefillChunk, backend.DecodeRows), opt.Sampling.Seed),
		ring: backend.NewRing(opt.RingCapacity)}
	if t.Snapshots {
		return &snapSession{s}, nil
	}
	if t.Resets {
		return &resetSession{s}, nil
	}
	return s, nil
}

// add changes the counters under the lock.
func (t *Target) add(f func(*Counts)) {
	t.mu.Lock()
	f(&t.counts)
	t.mu.Unlock()
}

type session struct {
	t      *Target
	opt    backend.SessionOptions
	ss     *backend.StepState
	ring   *backend.Ring
	hist   []int32 // committed tokens
	out    []int32 // the answer of the last prefill: the script's tokens and EOS
	next   int     // index in out of the next token to push
	closed bool
}

func (s *session) State() *backend.StepState { return s.ss }
func (s *session) Ring() *backend.Ring       { return s.ring }
func (s *session) Stats() backend.RoundStats { return backend.RoundStats{} }

func (s *session) Close() error {
	if !s.closed {
		s.closed = true
		s.t.add(func(c *Counts) { c.Closed++ })
	}
	return nil
}

func (s *session) Prefill(ctx context.Context, prompt []int32) error {
	ss := s.ss
	switch {
	case s.closed:
		return errors.New("servetest: prefill on a closed session")
	case ss.Done != 0:
		return errors.New("servetest: prefill on a done session")
	case len(prompt) == 0:
		return errors.New("servetest: empty prompt")
	case int(ss.Position)+len(prompt) > s.opt.Capacity:
		return fmt.Errorf("servetest: %d tokens at %d exceed %d", len(prompt), ss.Position, s.opt.Capacity)
	case s.t.Script == nil:
		return errors.New("servetest: the Target has no Script")
	}
	for i := 0; i < len(prompt); i += s.opt.PrefillChunk {
		if err := ctx.Err(); err != nil {
			return err
		}
		chunk := prompt[i:min(i+s.opt.PrefillChunk, len(prompt))]
		s.hist = append(s.hist, chunk...)
		ss.Position += uint32(len(chunk))
		ss.Step++
		s.t.add(func(c *Counts) { c.Prefilled += len(chunk) })
	}
	ids := make([]int, len(s.hist))
	for i, id := range s.hist {
		ids[i] = int(id)
	}
	text, err := s.t.Tok.Decode(ids, false)
	if err != nil {
		return fmt.Errorf("servetest: decode the history: %w", err)
	}
	enc, err := s.t.Tok.Encode(s.t.Script(text))
	if err != nil {
		return fmt.Errorf("servetest: encode the answer: %w", err)
	}
	s.out = s.out[:0]
	for _, id := range enc {
		s.out = append(s.out, int32(id))
	}
	s.out = append(s.out, s.t.EOS)
	s.next = 0
	s.t.mu.Lock()
	s.t.last = text
	s.t.mu.Unlock()
	if s.t.OnPrefill != nil {
		s.t.OnPrefill(text)
	}
	s.push()
	return nil
}

// push samples the next scripted token into the ring, as the device step does.
func (s *session) push() {
	tok := s.t.EOS
	if s.next < len(s.out) {
		tok = s.out[s.next]
	}
	s.next++
	if !s.ring.Push(s.ss, tok) {
		return
	}
	s.ss.Anchor = tok
	if slices.Contains(s.opt.EOS, tok) || (s.ss.StopAt != 0 && s.ss.RingHead >= s.ss.StopAt) {
		s.ss.Done = 1
	}
}

func (s *session) Decode(ctx context.Context, steps int) error {
	ss := s.ss
	for i := 0; i < steps && ss.Done == 0; i++ {
		if s.t.Gate != nil {
			if s.t.GateRun != nil {
				select {
				case s.t.GateRun <- struct{}{}:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			select {
			case <-s.t.Gate:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if int(ss.Position)+1 > s.opt.Capacity {
			ss.Error, ss.Done = backend.ErrContextFull, 1
			return nil
		}
		s.hist = append(s.hist, ss.Anchor)
		ss.Position++
		ss.Step++
		s.push()
	}
	return nil
}

// snapSession adds backend.Snapshotter.
type snapSession struct{ *session }

// snapshot is a copy of the committed tokens; Bytes counts 4 per token.
type snapshot struct{ hist []int32 }

func (f *snapshot) Position() int { return len(f.hist) }
func (f *snapshot) Bytes() int64  { return int64(4 * len(f.hist)) }

func (s *snapSession) Snapshot() (backend.Snapshot, error) {
	if s.closed {
		return nil, errors.New("servetest: snapshot of a closed session")
	}
	s.t.add(func(c *Counts) { c.Snapshots++ })
	return &snapshot{slices.Clone(s.hist)}, nil
}

func (s *snapSession) Restore(sn backend.Snapshot) error {
	f, ok := sn.(*snapshot)
	switch {
	case s.closed:
		return errors.New("servetest: restore into a closed session")
	case !ok:
		return fmt.Errorf("servetest: restore of a %T, not a servetest snapshot", sn)
	case len(f.hist) > s.opt.Capacity:
		return fmt.Errorf("servetest: snapshot of %d tokens exceeds the capacity %d", len(f.hist), s.opt.Capacity)
	case s.t.FailRestore:
		s.hist = append(slices.Clone(f.hist[:len(f.hist)/2]), 1, 2, 3)
		return errors.New("servetest: restore failed after it began (state undefined)")
	}
	s.t.add(func(c *Counts) { c.Restores++ })
	s.hist = slices.Clone(f.hist)
	s.ss.Position = uint32(len(f.hist))
	s.ss.Done, s.ss.Error = 0, 0
	_ = s.ring.Drain(s.ss, nil)
	return nil
}

// resetSession adds backend.Resetter.
type resetSession struct{ *session }

func (s *resetSession) Reset() error {
	if s.closed {
		return errors.New("servetest: reset of a closed session")
	}
	s.t.add(func(c *Counts) { c.Resets++ })
	s.hist, s.out, s.next = nil, nil, 0
	pending := s.ss.Pending
	*s.ss = *backend.NewStepState(0, s.opt.Sampling.Seed)
	s.ss.Pending = pending
	s.ring.Reset()
	return nil
}
