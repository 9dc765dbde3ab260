package sdkcheck

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"lithos/runtime/backend"
	"lithos/runtime/bundle"
	"lithos/runtime/generate/gentest"
	"lithos/runtime/model"
	"lithos/runtime/tokenizer"
)

// scriptedTarget is a backend.Target whose "model" answers a script: after a prefill, the
// session's output is the tokens of script(the whole history as text) followed by
// <|im_end|>, pushed one per decode step through the step state and ring as a device does.
// It lets the SDK checks see exact outputs (tool calls) from the real server code.
// (runtime/serve's tests have a fuller one; see .notes/sdkcheck.md.)
type scriptedTarget struct {
	cfg    model.Config
	tok    *tokenizer.Tokenizer
	script func(history string) string
}

func (t *scriptedTarget) Config() model.Config { return t.cfg }
func (t *scriptedTarget) Close() error         { return nil }
func (t *scriptedTarget) LoadDraft(context.Context, *bundle.Bundle) (backend.Drafter, error) {
	return nil, nil
}

func (t *scriptedTarget) NewSession(opt backend.SessionOptions) (backend.Session, error) {
	if err := opt.Normalize(t.cfg.Vocab); err != nil {
		return nil, err
	}
	return &scriptedSession{t: t, opt: opt, ss: backend.NewStepState(max(opt.PrefillChunk, backend.DecodeRows), opt.Sampling.Seed),
		ring: backend.NewRing(opt.RingCapacity)}, nil
}

type scriptedSession struct {
	t    *scriptedTarget
	opt  backend.SessionOptions
	ss   *backend.StepState
	ring *backend.Ring
	hist []int32
	out  []int32
	next int
}

func (s *scriptedSession) State() *backend.StepState { return s.ss }
func (s *scriptedSession) Ring() *backend.Ring       { return s.ring }
func (s *scriptedSession) Stats() backend.RoundStats { return backend.RoundStats{} }
func (s *scriptedSession) Close() error              { return nil }

func (s *scriptedSession) Prefill(ctx context.Context, prompt []int32) error {
	ss := s.ss
	switch {
	case ss.Done != 0:
		return errors.New("scripted: prefill on a done session")
	case len(prompt) == 0:
		return errors.New("scripted: empty prompt")
	case int(ss.Position)+len(prompt) > s.opt.Capacity:
		return fmt.Errorf("scripted: %d tokens at %d exceed %d", len(prompt), ss.Position, s.opt.Capacity)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.hist = append(s.hist, prompt...)
	ss.Position += uint32(len(prompt))
	ss.Step++
	ids := make([]int, len(s.hist))
	for i, id := range s.hist {
		ids[i] = int(id)
	}
	text, err := s.t.tok.Decode(ids, false)
	if err != nil {
		return err
	}
	enc, err := s.t.tok.Encode(s.t.script(text))
	if err != nil {
		return err
	}
	s.out = s.out[:0]
	for _, id := range enc {
		s.out = append(s.out, int32(id))
	}
	s.out = append(s.out, gentest.IMEnd)
	s.next = 0
	s.push()
	return nil
}

// push samples the next scripted token into the ring, as a device step does.
func (s *scriptedSession) push() {
	tok := int32(gentest.IMEnd)
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

func (s *scriptedSession) Decode(ctx context.Context, steps int) error {
	ss := s.ss
	for i := 0; i < steps && ss.Done == 0; i++ {
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

// weatherScript is the script check.mjs expects (SDKCHECK_MODE=scripted): a tool result in the
// last user turn gets the final answer, a prompt offering tools gets the Qwen3.5 XML tool call,
// anything else a greeting.
func weatherScript(history string) string {
	last := history
	if i := strings.LastIndex(history, "<|im_start|>user\n"); i >= 0 {
		last = history[i:]
	}
	switch {
	case strings.Contains(last, "<tool_response>"):
		return "It is sunny in Paris."
	case strings.Contains(history, "<tools>"):
		return "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>"
	}
	return "Hello from lithos."
}
