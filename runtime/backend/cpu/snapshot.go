package cpu

import (
	"context"
	"errors"
	"fmt"

	"lithos/runtime/backend"
	"lithos/runtime/draft"
	"lithos/runtime/model"
)

// The optional session capabilities of the contract (backend.Snapshotter, NoSamplePrefiller,
// Resetter) and the DSpark proposer's backend.ContextSnapshotter.
var (
	_ backend.Snapshotter        = (*Session)(nil)
	_ backend.NoSamplePrefiller  = (*Session)(nil)
	_ backend.Resetter           = (*Session)(nil)
	_ backend.ContextSnapshotter = (*dsparkProposer)(nil)
)

// Snapshot is a CPU session's saved committed state (backend.Snapshot): the model state's copy
// (model.StateSnapshot: the committed slot's GDN conv and recurrent states, KV rows [0,
// Position), position, slot), the step count, and with a drafter the proposer's copy of its
// context rows [0, Position). Memory: model.SnapshotBytes plus, for the DSpark head,
// draft.Drafter.ContextBytes of the position.
type Snapshot struct {
	m     *model.Model
	st    *model.StateSnapshot
	step  uint32
	draft backend.Snapshot // nil: taken from a session without a drafter
}

// Position returns the tokens the saved state has consumed.
func (sn *Snapshot) Position() int { return sn.st.Pos() }

// Bytes returns the memory of the copy (bytes): the model state's and the drafter context's.
func (sn *Snapshot) Bytes() int64 {
	n := sn.st.Bytes()
	if sn.draft != nil {
		n += sn.draft.Bytes()
	}
	return n
}

// Snapshot copies the session's committed state (backend.Snapshotter). Errors: a closed
// session, step state and model state at different positions, a proposer that cannot copy its
// context (not a backend.ContextSnapshotter, e.g. a test's proposer).
func (s *Session) Snapshot() (backend.Snapshot, error) {
	if s.st == nil {
		return nil, errors.New("session snapshot: closed")
	}
	ss := s.ss
	if err := s.checkPositions(); err != nil {
		return nil, fmt.Errorf("session snapshot: %w", err)
	}
	st, err := s.st.Snapshot(int(ss.Position))
	if err != nil {
		return nil, fmt.Errorf("session snapshot: %w", err)
	}
	sn := &Snapshot{m: s.m, st: st, step: ss.Step}
	if s.prop != nil {
		cs, ok := s.prop.(backend.ContextSnapshotter)
		if !ok {
			return nil, fmt.Errorf("session snapshot: the drafter's proposer (%T) cannot copy its context", s.prop)
		}
		if sn.draft, err = cs.SnapshotContext(int(ss.Position)); err != nil {
			return nil, fmt.Errorf("session snapshot: drafter context: %w", err)
		}
	}
	return sn, nil
}

// Restore makes the session's state a copy of snap (backend.Snapshotter): the model state,
// the step count (so Step & 1 is the restored GDN slot), Position and DraftContext, the
// drafter's context rows; Done, Error, StopAt, Rows, Committed, Accepted, DraftLen and
// PrefillLeft cleared, no anchor, the ring empty (RingTail = RingHead, the sequence numbers
// go on), the seed words and RoundStats kept. A snapshot taken with a drafter restores into a
// session without one (the context rows are not needed). Errors, the session unchanged: a
// closed session, a snapshot of another backend or of another loaded model, a KV cache of
// another type (SessionOptions.KVCache), more positions than the capacity, a session with a
// drafter and a snapshot without context rows, a context the proposer refuses.
func (s *Session) Restore(snap backend.Snapshot) error {
	if s.st == nil {
		return errors.New("session restore: closed")
	}
	sn, ok := snap.(*Snapshot)
	if !ok || sn == nil || sn.st == nil {
		return fmt.Errorf("session restore: %T is not a CPU session snapshot", snap)
	}
	if sn.m != s.m {
		return errors.New("session restore: the snapshot was taken from a session of another loaded model")
	}
	pos := sn.st.Pos()
	if pos > s.opt.Capacity {
		return fmt.Errorf("session restore: the snapshot holds %d positions, the session's context is %d", pos, s.opt.Capacity)
	}
	if sn.st.KVBF16() != s.st.KVBF16() {
		return fmt.Errorf("session restore: the snapshot's KV cache is %s, the session's %s", model.KVName(sn.st.KVBF16()), model.KVName(s.st.KVBF16()))
	}
	// The proposer first: after it, nothing below can fail (same model, room checked).
	if s.prop != nil {
		if sn.draft == nil {
			return errors.New("session restore: the snapshot holds no drafter context (taken from a session without a drafter)")
		}
		cs, ok := s.prop.(backend.ContextSnapshotter)
		if !ok {
			return fmt.Errorf("session restore: the drafter's proposer (%T) cannot restore its context", s.prop)
		}
		if err := cs.RestoreContext(sn.draft); err != nil {
			return fmt.Errorf("session restore: drafter context: %w", err)
		}
	}
	if err := s.st.Restore(sn.st); err != nil {
		return fmt.Errorf("session restore: %w", err)
	}
	ss := s.ss
	ss.Step, ss.Position = sn.step, uint32(pos)
	ss.Rows, ss.Committed, ss.Accepted, ss.DraftLen, ss.PrefillLeft = 0, 0, 0, 0, 0
	ss.Anchor = -1
	ss.Done, ss.Error, ss.StopAt = 0, backend.ErrNone, 0
	ss.RingTail = ss.RingHead
	ss.DraftContext = 0
	if s.prop != nil {
		ss.DraftContext = uint32(pos)
	}
	return nil
}

// PrefillNoSample is Prefill without the sample of the last step (backend.NoSamplePrefiller):
// the chunks and the state after them are Prefill's, nothing goes to the ring, Anchor is −1.
func (s *Session) PrefillNoSample(ctx context.Context, prompt []int32) error {
	return s.prefill(ctx, prompt, false)
}

// Reset empties the session in its own buffers (backend.Resetter): model.State.Reset (position
// 0, zero GDN states), the step state as NewSession made it (the same pointer, seed words from
// the options), the ring cleared, RoundStats zero, the DSpark proposer's context emptied (another
// proposer is replaced by a new one of the drafter). Errors: a closed session, a drafter that
// cannot allocate a proposer.
func (s *Session) Reset() error {
	if s.st == nil {
		return errors.New("session reset: closed")
	}
	if s.prop != nil {
		if r, ok := s.prop.(interface{ Reset() }); ok {
			r.Reset()
		} else {
			p, err := s.opt.Drafter.NewProposer(s.opt.Capacity)
			if err != nil {
				return fmt.Errorf("session reset: drafter state: %w", err)
			}
			s.prop = p
		}
	}
	s.st.Reset()
	pending := s.ss.Pending
	clear(pending)
	*s.ss = *backend.NewStepState(0, s.opt.Sampling.Seed)
	s.ss.Pending = pending
	s.ring.Reset()
	st := &s.stats
	for _, c := range [][]int{st.Committed, st.Drafted, st.Accepted} {
		clear(c)
	}
	clear(st.ConfidenceSum)
	*st = backend.RoundStats{Committed: st.Committed, Drafted: st.Drafted, Accepted: st.Accepted, ConfidenceSum: st.ConfidenceSum}
	s.syncSeed()
	return nil
}

// draftSnapshot is the DSpark proposer's context copy (backend.Snapshot).
type draftSnapshot struct {
	*draft.StateSnapshot
}

// Position returns the context rows held.
func (d draftSnapshot) Position() int { return d.Len() }

// SnapshotContext copies the context rows [0, rows) (backend.ContextSnapshotter).
func (p *dsparkProposer) SnapshotContext(rows int) (backend.Snapshot, error) {
	sn, err := p.st.Snapshot(rows)
	if err != nil {
		return nil, err
	}
	return draftSnapshot{sn}, nil
}

// RestoreContext makes the context a copy of s (backend.ContextSnapshotter).
func (p *dsparkProposer) RestoreContext(s backend.Snapshot) error {
	d, ok := s.(draftSnapshot)
	if !ok {
		return fmt.Errorf("dspark: %T is not a DSpark context snapshot", s)
	}
	return p.st.Restore(d.StateSnapshot)
}

// Reset empties the context.
func (p *dsparkProposer) Reset() { p.st.Reset() }

// StateBytes is the memory of the context cache a proposer of capacity positions holds
// (bytes): ContextBytes(capacity + BlockSize), the block's scratch rows included; Draft's and
// Append's activation scratch (about BlockSize·(Vocab + 4·Hidden + 2·Intermediate)·4 bytes) is
// not counted. For the 27B DSpark head at 32768 positions: 1,342,464,000 bytes.
func (a DSpark) StateBytes(capacity int) int64 {
	return a.D.ContextBytes(capacity + a.D.Cfg.BlockSize)
}
