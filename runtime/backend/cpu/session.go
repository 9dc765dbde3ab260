package cpu

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

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
// slots per GDN layer) with the step state and ring of the contract, and, with
// opt.Drafter, a Proposer of it. Errors: options out of range
// (backend.SessionOptions.Normalize), a state too large, a drafter whose tap layers are not
// layers of this target (−1 … layers−1) or that cannot allocate its state.
func (t *Target) NewSession(opt backend.SessionOptions) (backend.Session, error) {
	if err := opt.Normalize(t.M.Cfg.Vocab); err != nil {
		return nil, err
	}
	st, err := t.M.NewState(opt.Capacity)
	if err != nil {
		return nil, err
	}
	st.SetKVBF16(opt.KVCache == backend.KVBF16)
	smp, err := sample.New(opt.Sampling)
	if err != nil {
		return nil, err
	}
	s := &Session{m: t.M, st: st, opt: opt, sampler: smp, ring: backend.NewRing(opt.RingCapacity)}
	tmax := max(opt.PrefillChunk, backend.DecodeRows)
	if d := opt.Drafter; d != nil {
		s.taps = slices.Clone(d.TapLayers())
		if len(s.taps) == 0 {
			return nil, errors.New("session: the drafter taps no target layer")
		}
		for i, id := range s.taps {
			if id < -1 || id >= len(t.M.Cfg.Layers) {
				return nil, fmt.Errorf("session: the drafter's tap %d is layer %d; the target has layers 0…%d (−1: embeddings)", i, id, len(t.M.Cfg.Layers)-1)
			}
		}
		s.block = d.BlockSize()
		if s.prop, err = d.NewProposer(opt.Capacity); err != nil {
			return nil, fmt.Errorf("session: drafter state: %w", err)
		}
		tmax = max(tmax, s.block+1)
		s.stats.Committed = make([]int, s.block+1)
		s.stats.Drafted = make([]int, s.block)
		s.stats.Accepted = make([]int, s.block)
		s.stats.ConfidenceSum = make([]float64, s.block)
	}
	s.ss = backend.NewStepState(tmax, opt.Sampling.Seed)
	return s, nil
}

// Session runs the programs of one sequence on the CPU (backend.Session). The prefill, decode
// and round programs are Go code reading the step state exactly as a recorded device program
// would: rows and tokens from Pending/Rows, the position from Position, the GDN slot from the
// model state's parity (which flips with every committed step, as Step&1 does), the seed from
// the seed words; they write the ring, Anchor, Accepted, Committed, DraftLen, DraftContext,
// Done and Error.
type Session struct {
	m       *model.Model
	st      *model.State
	opt     backend.SessionOptions
	sampler *sample.Sampler
	ss      *backend.StepState
	ring    *backend.Ring

	// With a drafter:
	prop  backend.Proposer
	taps  []int // the target layers tapped for the drafter's features
	block int   // B
	stats backend.RoundStats
	// Round scratch.
	proposal backend.Proposal
	roundPos int         // the anchor's position in the current round
	q        [][]float64 // sampled drafts: the drafter's distribution of each draft [B][Vocab]
	p, resid []float64   // the target's distribution of a row; the residual
	toks     []int32     // the accept scan's tokens
	// last is the logits row the last sampled token of a plain step came from (LastLogits).
	last []float32
}

// State returns the step state.
func (s *Session) State() *backend.StepState { return s.ss }

// Ring returns the token ring.
func (s *Session) Ring() *backend.Ring { return s.ring }

// Stats returns the decode telemetry (a copy).
func (s *Session) Stats() backend.RoundStats {
	return s.stats.Clone()
}

// Close drops the session's state.
func (s *Session) Close() error { s.st, s.prop, s.last = nil, nil, nil; return nil }

// LastLogits copies the logits row the anchor (the last sampled token) was sampled from into
// dst, grown as needed, and returns it: float32 [Vocab], as the LM head computed them (before
// temperature or top-k/top-p). runtime/generate's first-use self-check compares a GPU
// session's with it. Errors: a closed session, a session with a drafter (a round samples from
// several rows), no anchor (nothing sampled yet, or after Restore, Reset, PrefillNoSample).
func (s *Session) LastLogits(dst []float32) ([]float32, error) {
	switch {
	case s.st == nil:
		return nil, errors.New("session: closed")
	case s.prop != nil:
		return nil, errors.New("session: LastLogits of a session with a drafter (a round samples from several rows)")
	case s.ss.Anchor < 0 || s.last == nil:
		return nil, errors.New("session: LastLogits: no token sampled yet")
	}
	return append(dst[:0], s.last...), nil
}

// ErrDone is returned by Prefill on a session whose step state says done (backend.ErrDone).
var ErrDone = backend.ErrDone

// Prefill implements backend.Session. With a drafter every chunk records the taps of its
// rows, which are appended to the drafter's context after the chunk is committed.
func (s *Session) Prefill(ctx context.Context, prompt []int32) error {
	return s.prefill(ctx, prompt, true)
}

// prefill runs the prefill program over prompt; without emit every chunk, the last one
// included, gets PrefillLeft ≥ 1 (PrefillNoSample).
func (s *Session) prefill(ctx context.Context, prompt []int32, emit bool) error {
	ss := s.ss
	if s.st == nil {
		return errors.New("session: closed")
	}
	if ss.Done != 0 {
		return ErrDone
	}
	if err := backend.CheckPrompt(prompt, s.m.Cfg.Vocab, ss.Position, s.opt.Capacity); err != nil {
		return err
	}
	chunk := s.opt.PrefillChunk
	steps := (len(prompt) + chunk - 1) / chunk
	left := steps - 1
	if !emit {
		left, ss.Anchor = steps, -1
	}
	for i := 0; i < steps; i++ {
		rows := prompt[i*chunk : min((i+1)*chunk, len(prompt))]
		ss.Rows = uint32(len(rows))
		copy(ss.Pending, rows)
		ss.PrefillLeft = uint32(left - i)
		if err := s.step(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Decode implements backend.Session: with a drafter and B+1 free positions a step is a round
// (round), else a single row (step).
func (s *Session) Decode(ctx context.Context, steps int) error {
	if s.st == nil {
		return errors.New("session: closed")
	}
	ss := s.ss
	for i := 0; i < steps && ss.Done == 0; i++ {
		if ss.Anchor < 0 {
			return errors.New("decode: no token to feed (run Prefill first)")
		}
		ss.PrefillLeft = 0
		if s.prop != nil && int(ss.Position)+s.block+1 <= s.opt.Capacity {
			if err := s.round(ctx); err != nil {
				return err
			}
			continue
		}
		ss.Rows = 1
		ss.DraftLen = 0
		ss.Pending[0] = ss.Anchor
		before := ss.Step
		if err := s.step(ctx); err != nil {
			return err
		}
		if ss.Step != before {
			s.stats.PlainSteps++
		}
	}
	return nil
}

// step is one step of the prefill or single-row decode program: Rows tokens of Pending at
// Position; commit; with a drafter, append the rows' taps to its context; when no prefill
// step is left, sample the next token and push it to the ring.
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
	if err := s.checkPositions(); err != nil {
		return err
	}
	logits, err := s.m.StepWith(ctx, s.st, ss.Pending[:n], model.StepOptions{Taps: s.taps})
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
	if s.prop != nil {
		if err := s.prop.Append(ctx, s.st.Taps(), n); err != nil {
			return fmt.Errorf("drafter: append %d rows at position %d: %w", n, ss.DraftContext, err)
		}
		ss.DraftContext += uint32(n)
	}
	if ss.PrefillLeft > 0 {
		return nil
	}
	s.syncSeed()
	tok := int32(s.sampler.Sample(logits, int(ss.Position)))
	if !s.ring.Push(ss, tok) {
		return nil
	}
	s.last = logits[len(logits)-s.m.Cfg.Vocab:] // the row the pushed token was sampled from
	ss.Anchor = tok
	if s.stops(tok) {
		ss.Done = 1
	}
	return nil
}

// checkPositions requires the step state, the model state and the drafter to agree on the
// committed length.
func (s *Session) checkPositions() error {
	ss := s.ss
	if int(ss.Position) != s.st.Pos() {
		return fmt.Errorf("session: step state at position %d, model state at %d", ss.Position, s.st.Pos())
	}
	if s.prop != nil && (s.prop.Len() != int(ss.Position) || ss.DraftContext != ss.Position) {
		return fmt.Errorf("session: the drafter holds %d context rows (step state: %d) at position %d", s.prop.Len(), ss.DraftContext, ss.Position)
	}
	return nil
}

// stops reports whether tok ends the generation: an EOS id, or the ring head at StopAt.
func (s *Session) stops(tok int32) bool {
	ss := s.ss
	return slices.Contains(s.opt.EOS, tok) || (ss.StopAt != 0 && ss.RingHead >= ss.StopAt)
}

// round is one step of the speculative program (docs/speculative.md §1): draft B tokens
// after the anchor; verify Pending = [anchor, d_0 … d_{L−1}] as 1+L rows at Position … (the
// target's logits of every row, its taps, and the record CommitPrefix replays); the accept
// scan chooses the target's token y_k of each row k (the ordinary sampler at the position
// P+k+1 it will occupy) and accepts d_k while it equals y_k (point-mass rule; greedy is the
// T = 0 case) or, with sampled drafts, while min(1, p/q) accepts it (the first rejected
// row's token is drawn from the residual); y_a after the accepted prefix is the bonus. The
// a+1 tokens go to the ring, stopping after an EOS or at StopAt; the c tokens pushed are the
// rows committed (GDN replayed for c rows, slot flipped), their taps go to the drafter, and
// the last one is the next anchor.
func (s *Session) round(ctx context.Context) error {
	ss := s.ss
	if err := s.checkPositions(); err != nil {
		return err
	}
	s.syncSeed()
	vocab := s.m.Cfg.Vocab
	P := int(ss.Position)
	s.roundPos = P
	sampled := s.opt.DraftSampling == backend.DraftSample && !s.sampler.Params().Greedy()
	if sampled && len(s.q) != s.block {
		s.q = make([][]float64, s.block)
		s.resid = make([]float64, vocab)
	}
	t0 := time.Now()
	s.proposal.Tokens, s.proposal.Confidence = s.proposal.Tokens[:0], s.proposal.Confidence[:0]
	if err := s.prop.Draft(ctx, ss.Anchor, s.choose, &s.proposal); err != nil {
		return fmt.Errorf("drafter: draft at position %d: %w", P, err)
	}
	drafts, conf := s.proposal.Tokens, s.proposal.Confidence
	if len(drafts) != s.block {
		return fmt.Errorf("drafter: %d drafts, want the block size %d", len(drafts), s.block)
	}
	if conf != nil && len(conf) != s.block {
		return fmt.Errorf("drafter: %d confidences for %d drafts", len(conf), s.block)
	}
	for k, d := range drafts {
		if d < 0 || int(d) >= vocab {
			return fmt.Errorf("drafter: draft %d is token %d, outside the vocabulary [0, %d)", k, d, vocab)
		}
	}
	L := s.block
	if thr := s.opt.ConfidenceStop; thr > 0 && conf != nil {
		L = 0
		for L < s.block && float64(conf[L]) >= thr {
			L++
		}
	}
	rows := 1 + L
	ss.Rows, ss.DraftLen = uint32(rows), uint32(L)
	ss.Pending[0] = ss.Anchor
	copy(ss.Pending[1:rows], drafts[:L])
	t1 := time.Now()

	logits, err := s.m.StepWith(ctx, s.st, ss.Pending[:rows], model.StepOptions{AllRows: true, Taps: s.taps, Keep: true})
	if err != nil {
		return err
	}
	// Accept scan.
	seed := s.ss.Seed()
	s.toks = s.toks[:0]
	a := 0
	for k := 0; k <= L; k++ {
		row := logits[k*vocab : (k+1)*vocab]
		pos := P + k + 1
		if k < L && sampled {
			p := s.sampler.Probs(s.p, row)
			if p == nil { // no finite logit: the ordinary sampler's answer
				s.toks = append(s.toks, int32(sample.Argmax(row)))
				break
			}
			s.p = p
			tok, ok := sample.Speculative(p, s.q[k], int(drafts[k]), sample.UniformStream(seed, sample.StreamAccept, pos),
				sample.UniformStream(seed, sample.StreamResidual, pos), s.resid)
			s.toks = append(s.toks, int32(tok))
			if !ok {
				break
			}
			a++
			continue
		}
		y := int32(s.sampler.Sample(row, pos))
		s.toks = append(s.toks, y)
		if k == L || y != drafts[k] {
			break
		}
		a++
	}
	// Ring pushes, stopping after an EOS or at StopAt.
	c := 0
	for _, tok := range s.toks {
		if !s.ring.Push(ss, tok) {
			break
		}
		c++
		if s.stops(tok) {
			ss.Done = 1
			break
		}
	}
	ss.Accepted = uint32(a)
	if c == 0 { // the ring overflowed at once: nothing is committed
		ss.Committed = 0
		return nil
	}
	if err := s.st.CommitPrefix(c); err != nil {
		return err
	}
	ss.Position += uint32(c)
	ss.Committed = uint32(c)
	ss.Step++
	ss.Anchor = s.toks[c-1]
	t2 := time.Now()
	if err := s.prop.Append(ctx, s.st.Taps()[:c*len(s.taps)*s.m.Cfg.Hidden], c); err != nil {
		return fmt.Errorf("drafter: append %d rows at position %d: %w", c, ss.DraftContext, err)
	}
	ss.DraftContext += uint32(c)
	t3 := time.Now()

	st := &s.stats
	st.Rounds++
	st.RoundTokens += c
	st.Committed[c-1]++
	for k := 0; k < L; k++ {
		st.Drafted[k]++
	}
	for k := 0; k < a; k++ {
		st.Accepted[k]++
	}
	if conf != nil {
		st.ConfidenceRounds++
		for k, v := range conf {
			st.ConfidenceSum[k] += float64(v)
		}
	}
	st.DraftTime += t1.Sub(t0) + t3.Sub(t2)
	st.VerifyTime += t2.Sub(t1)
	return nil
}

// choose picks draft k from the drafter's logits row: the argmax, or with sampled drafts a
// draw from the row's distribution under the session's temperature/top-k/top-p with the
// StreamDraft uniform of the position the draft would occupy (its distribution is kept for
// the acceptance test).
func (s *Session) choose(k int, logits []float32) int32 {
	if s.opt.DraftSampling != backend.DraftSample || s.sampler.Params().Greedy() || k >= len(s.q) {
		return int32(sample.Argmax(logits))
	}
	q := s.sampler.Probs(s.q[k], logits)
	if q == nil { // no finite logit: a point mass on the argmax
		q = s.q[k][:0]
		for range logits {
			q = append(q, 0)
		}
		q[sample.Argmax(logits)] = 1
	}
	s.q[k] = q
	return int32(sample.Draw(q, sample.UniformStream(s.ss.Seed(), sample.StreamDraft, s.roundPos+k+1)))
}

// syncSeed makes the sampler use the seed of the step state's seed words.
func (s *Session) syncSeed() {
	if seed := s.ss.Seed(); seed != s.sampler.Params().Seed {
		p := s.sampler.Params()
		p.Seed = seed
		s.sampler, _ = sample.New(p)
	}
}
