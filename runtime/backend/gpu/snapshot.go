package gpu

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"

	"lithos/runtime/backend"
	"lithos/runtime/model"
)

// The optional session capabilities of the contract (runtime/backend: Snapshotter,
// NoSamplePrefiller, Resetter), which let a server keep prefix checkpoints of GPU sessions
// (docs/serving.md §4): the same semantics as the CPU backend's (runtime/backend/cpu).
var (
	_ backend.Snapshotter       = (*Session)(nil)
	_ backend.NoSamplePrefiller = (*Session)(nil)
	_ backend.Resetter          = (*Session)(nil)
)

// snapshotStage is the pinned staging buffer a session copies snapshots through (bytes), used
// as two halves: while the device copies one chunk into (or out of) one half, the host copies
// the other half's chunk (copyOut, copyIn) — on CUDA, whose copies run as they are queued;
// Metal commits queued work at Wait, so there the halves take turns. A variable so that tests
// can make chunks small.
var snapshotStage = 32 << 20

// hostCopyPiece is the smallest piece of a host copy given to its own goroutine (bytes):
// copying a chunk into freshly allocated memory is bound by page faults and one core's memcpy
// (2.2 GB/s out, 5.2 GB/s in on the H200 machine with one goroutine, docs/serving.md §4).
const hostCopyPiece = 1 << 20

// hostCopy is the host side of a staging copy (parallelCopy; tests wrap it to see when it runs).
var hostCopy = parallelCopy

// parallelCopy copies src into dst (equal lengths) in pieces of at least hostCopyPiece bytes
// over up to GOMAXPROCS (at most 8) goroutines.
func parallelCopy(dst, src []byte) {
	w := min(runtime.GOMAXPROCS(0), 8, len(src)/hostCopyPiece)
	if w <= 1 {
		copy(dst, src)
		return
	}
	per := (len(src) + w - 1) / w
	var wg sync.WaitGroup
	for lo := 0; lo < len(src); lo += per {
		hi := min(lo+per, len(src))
		wg.Add(1)
		go func() {
			defer wg.Done()
			copy(dst[lo:hi], src[lo:hi])
		}()
	}
	wg.Wait()
}

// Snapshot is a GPU session's saved committed state (backend.Snapshot), in host memory: per
// GDN layer the committed slot (Step & 1) of its recurrent state ([VHeads, KDim, VDim] f32) and
// of its conv state ([ConvKernel − 1, ConvDim] f32), per attention layer the K and V cache rows
// [0, Position) ([Position, KVHeads·HeadDim] in the cache's type: f32, or BF16 with
// backend.KVBF16), the step count and Position, and with a drafter its context K/V rows [0,
// DraftContext) per draft layer. Memory: Bytes().
type Snapshot struct {
	t        *Target
	d        *DSpark // the drafter whose context rows ctxK/ctxV hold; nil: none
	pos      int
	step     uint32
	draftCtx int
	kvBF16   bool // the K and V rows are BF16 (the session's SessionOptions.KVCache)

	gdn, conv, k, v, ctxK, ctxV [][]byte
}

// Position returns the tokens the saved state has consumed.
func (sn *Snapshot) Position() int { return sn.pos }

// Bytes returns the host memory the copy holds (bytes).
func (sn *Snapshot) Bytes() int64 {
	var n int64
	for _, l := range [][][]byte{sn.gdn, sn.conv, sn.k, sn.v, sn.ctxK, sn.ctxV} {
		for _, b := range l {
			n += int64(len(b))
		}
	}
	return n
}

// stage returns the session's staging buffer, allocating it on first use.
func (s *Session) stage() (*HostBuffer, error) {
	if s.stageHost == nil {
		h, err := s.d.HostAlloc(int64(snapshotStage), false)
		if err != nil {
			return nil, fmt.Errorf("snapshot staging buffer: %w", err)
		}
		s.stageHost = h
	}
	return s.stageHost, nil
}

// stageHalves returns the staging buffer and the size of its halves (bytes), the chunk of a
// copy. Errors: stage's, a buffer under 2 bytes (snapshotStage set so by a test).
func (s *Session) stageHalves() (*HostBuffer, int, error) {
	st, err := s.stage()
	if err != nil {
		return nil, 0, err
	}
	half := len(st.Bytes) / 2
	if half == 0 {
		return nil, 0, fmt.Errorf("snapshot staging buffer of %d bytes: want at least 2", len(st.Bytes))
	}
	return st, half, nil
}

// waitCopy waits for a staging copy. When the wait says the device may still be running
// (ErrDeviceBusy), the copy may still target the staging buffer: it is dropped without being
// freed (leaked, as Close keeps buffers then) and the Target told, as LastLogits does.
func (s *Session) waitCopy() error {
	err := s.s.Wait(0)
	if errors.Is(err, ErrDeviceBusy) {
		s.stageHost = nil
		if s.t != nil {
			s.t.markBusy(err)
		}
	}
	return err
}

// copyOut copies len(dst) bytes of src from byte off into dst through the staging buffer, in
// chunks of half of it: chunk i+1 is queued into one half before the host copies chunk i out of
// the other, so the device copy and the host copy overlap. Every queued copy is awaited before
// it returns, on errors too (except a wait error, which ends it).
func (s *Session) copyOut(dst []byte, src *Buffer, off int64) error {
	st, half, err := s.stageHalves()
	if err != nil {
		return err
	}
	queue := func(i int) error {
		lo := i * half
		n := min(half, len(dst)-lo)
		return s.s.CopyDtoH(st, int64((i&1)*half), src, off+int64(lo), int64(n))
	}
	chunks := (len(dst) + half - 1) / half
	if chunks == 0 {
		return nil
	}
	if err := queue(0); err != nil {
		return err
	}
	if err := s.waitCopy(); err != nil {
		return err
	}
	for i := 0; i < chunks; i++ {
		next := i+1 < chunks
		var qerr error
		if next {
			qerr = queue(i + 1)
		}
		lo := i * half
		n := min(half, len(dst)-lo)
		hostCopy(dst[lo:lo+n], st.Bytes[(i&1)*half:(i&1)*half+n])
		if next {
			if err := s.waitCopy(); err != nil {
				return err
			}
		}
		if qerr != nil {
			return qerr
		}
	}
	return nil
}

// copyIn copies src into dst from byte off through the staging buffer, in chunks of half of
// it: the host fills one half while the device copies the previous chunk out of the other.
// Every queued copy is awaited before it returns.
func (s *Session) copyIn(dst *Buffer, off int64, src []byte) error {
	st, half, err := s.stageHalves()
	if err != nil {
		return err
	}
	queued := false
	for lo, i := 0, 0; lo < len(src); lo, i = lo+half, i+1 {
		n := min(half, len(src)-lo)
		h := st.Bytes[(i&1)*half : (i&1)*half+n]
		// The copy queued last reads the other half; the one before it, which read this half,
		// was awaited in the previous iteration.
		hostCopy(h, src[lo:lo+n])
		if queued {
			if err := s.waitCopy(); err != nil {
				return err
			}
			queued = false
		}
		if err := s.s.CopyHtoD(dst, off+int64(lo), st, int64((i&1)*half), int64(n)); err != nil {
			return err
		}
		queued = true
	}
	if queued {
		return s.waitCopy()
	}
	return nil
}

// Snapshot copies the session's committed state into host memory (backend.Snapshotter): the
// session idle between calls (every call ends synchronised), so the host's step state names
// Position, the step count and DraftContext. Errors: a closed session, a device error during a
// copy (the session is unchanged either way).
func (s *Session) Snapshot() (backend.Snapshot, error) {
	if s.closed {
		return nil, errors.New("session snapshot: closed")
	}
	ss := s.ss
	c := &s.t.Cfg
	sn := &Snapshot{t: s.t, pos: int(ss.Position), step: ss.Step, kvBF16: s.kvBF16()}
	slot := int64(ss.Step & 1)
	half := func(b *Buffer) ([]byte, int64) { n := b.Size / 2; return make([]byte, n), slot * n }
	for _, l := range []struct {
		src []*Buffer
		dst *[][]byte
	}{{s.gdnState, &sn.gdn}, {s.convState, &sn.conv}} {
		for _, b := range l.src {
			buf, off := half(b)
			if err := s.copyOut(buf, b, off); err != nil {
				return nil, fmt.Errorf("%s: session snapshot: %w", s.pfx, err)
			}
			*l.dst = append(*l.dst, buf)
		}
	}
	rows := func(src []*Buffer, n, width, elem int, dst *[][]byte) error {
		for _, b := range src {
			buf := make([]byte, int64(elem)*int64(n)*int64(width))
			if err := s.copyOut(buf, b, 0); err != nil {
				return err
			}
			*dst = append(*dst, buf)
		}
		return nil
	}
	kvd := c.KVHeads * c.HeadDim
	if err := rows(s.kc, sn.pos, kvd, s.kvElem(), &sn.k); err != nil {
		return nil, fmt.Errorf("%s: session snapshot: %w", s.pfx, err)
	}
	if err := rows(s.vc, sn.pos, kvd, s.kvElem(), &sn.v); err != nil {
		return nil, fmt.Errorf("%s: session snapshot: %w", s.pfx, err)
	}
	if sp := s.spec; sp != nil {
		dc := &sp.d.Cfg
		sn.d, sn.draftCtx = sp.d, int(ss.DraftContext)
		dkv := dc.KVHeads * dc.HeadDim
		if err := rows(sp.ctxK, sn.draftCtx, dkv, 4, &sn.ctxK); err != nil {
			return nil, fmt.Errorf("%s: session snapshot: drafter context: %w", s.pfx, err)
		}
		if err := rows(sp.ctxV, sn.draftCtx, dkv, 4, &sn.ctxV); err != nil {
			return nil, fmt.Errorf("%s: session snapshot: drafter context: %w", s.pfx, err)
		}
	}
	return sn, nil
}

// Restore makes the session's state a copy of snap (backend.Snapshotter): the GDN and conv
// states into the slot the snapshot's step count names, the KV rows [0, Position), the
// drafter's context rows, and the step state as the CPU backend's Restore leaves it (Step and
// Position the snapshot's, DraftContext its context rows with a drafter and 0 without; Rows,
// Committed, Accepted, DraftLen, PrefillLeft, Done, Error and StopAt cleared; no anchor; the
// ring empty, RingTail = RingHead; the seed words and RoundStats kept). A snapshot taken with
// a drafter restores into a session without one. Errors, the session unchanged: a closed
// session, a snapshot of another backend or another loaded target, a KV cache of another type
// (SessionOptions.KVCache), more positions than the capacity, a session with a drafter and a
// snapshot without that drafter's context. A device error during the copies leaves the
// session's state undefined: the error says so, and the session must be Reset or closed.
func (s *Session) Restore(snap backend.Snapshot) error {
	if s.closed {
		return errors.New("session restore: closed")
	}
	sn, ok := snap.(*Snapshot)
	if !ok || sn == nil {
		return fmt.Errorf("session restore: %T is not a GPU session snapshot", snap)
	}
	if sn.t != s.t {
		return errors.New("session restore: the snapshot was taken from a session of another loaded target")
	}
	if sn.kvBF16 != s.kvBF16() {
		return fmt.Errorf("session restore: the snapshot's KV cache is %s, the session's %s", model.KVName(sn.kvBF16), model.KVName(s.kvBF16()))
	}
	if sn.pos > s.opt.Capacity {
		return fmt.Errorf("session restore: the snapshot holds %d positions, the session's context is %d", sn.pos, s.opt.Capacity)
	}
	sp := s.spec
	if sp != nil {
		if sn.d == nil {
			return errors.New("session restore: the snapshot holds no drafter context (taken from a session without a drafter)")
		}
		if sn.d != sp.d {
			return errors.New("session restore: the snapshot's drafter context is of another draft head")
		}
		if sn.draftCtx > s.opt.Capacity {
			return fmt.Errorf("session restore: the snapshot holds %d drafter context rows, the session's context is %d", sn.draftCtx, s.opt.Capacity)
		}
	}
	if len(sn.gdn) != len(s.gdnState) || len(sn.conv) != len(s.convState) || len(sn.k) != len(s.kc) || len(sn.v) != len(s.vc) {
		return errors.New("session restore: the snapshot's layers are not this target's")
	}
	// The staging buffer first: failing to allocate it changes nothing.
	if _, err := s.stage(); err != nil {
		return fmt.Errorf("%s: session restore: %w", s.pfx, err)
	}
	undefined := func(err error) error {
		return fmt.Errorf("%s: session restore: %w (the session's state is now undefined: Reset or close it)", s.pfx, err)
	}
	// The GDN and conv states go into the slot the snapshot's step count names (half of each
	// two-slot buffer); the rows start at 0.
	type part struct {
		dst     []*Buffer
		src     [][]byte
		slotted bool
	}
	parts := []part{{s.gdnState, sn.gdn, true}, {s.convState, sn.conv, true}, {s.kc, sn.k, false}, {s.vc, sn.v, false}}
	if sp != nil {
		parts = append(parts, part{sp.ctxK, sn.ctxK, false}, part{sp.ctxV, sn.ctxV, false})
	}
	for _, l := range parts {
		for i, b := range l.dst {
			off := int64(0)
			if l.slotted {
				off = int64(sn.step&1) * (b.Size / 2)
			}
			if err := s.copyIn(b, off, l.src[i]); err != nil {
				return undefined(err)
			}
		}
	}
	ss := s.ss
	ss.Step, ss.Position = sn.step, uint32(sn.pos)
	ss.Rows, ss.Committed, ss.Accepted, ss.DraftLen, ss.PrefillLeft = 0, 0, 0, 0, 0
	ss.Anchor = -1
	ss.Done, ss.Error, ss.StopAt = 0, backend.ErrNone, 0
	ss.RingTail = ss.RingHead
	ss.DraftContext = 0
	if sp != nil {
		ss.DraftContext = uint32(sn.draftCtx)
	}
	return nil
}

// PrefillNoSample is Prefill without the sample of the last chunk (backend.NoSamplePrefiller):
// every chunk, the last included, runs the prefill program without the LM head with
// PrefillLeft ≥ 1, so the rows are committed and nothing goes to the ring; Anchor is −1 after.
func (s *Session) PrefillNoSample(ctx context.Context, prompt []int32) error {
	return s.prefillRows(ctx, prompt, false)
}

// Reset empties the sequence in the session's own buffers (backend.Resetter): zero GDN and conv
// states (both slots), the step state as NewSession made it (seed words from the options, no
// anchor), the ring and its device mirror cleared, RoundStats and the round's device counters
// zero, the drafter's context empty (DraftContext 0; its rows are overwritten as the sequence
// grows). Errors: a closed session, a device error (the session must then be closed).
func (s *Session) Reset() error {
	if s.closed {
		return errors.New("session reset: closed")
	}
	for _, l := range [][]*Buffer{s.gdnState, s.convState} {
		for _, b := range l {
			if err := s.s.Fill32(b, 0, b.Size/4, 0); err != nil {
				return fmt.Errorf("%s: session reset: %w", s.pfx, err)
			}
		}
	}
	if sp := s.spec; sp != nil {
		if err := s.s.Fill32(sp.stats, 0, sp.stats.Size/4, 0); err != nil {
			return fmt.Errorf("%s: session reset: %w", s.pfx, err)
		}
	}
	if err := s.s.Wait(0); err != nil {
		return fmt.Errorf("%s: session reset: %w", s.pfx, err)
	}
	pending := s.ss.Pending
	clear(pending)
	*s.ss = *backend.NewStepState(0, s.opt.Sampling.Seed)
	s.ss.Pending = pending
	s.ss.Anchor = -1
	s.ring.Reset()
	clear(s.ringHost.Bytes)
	s.stats = backend.RoundStats{}
	return nil
}
