package serve

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"lithos/runtime/backend"
	"lithos/runtime/sample"
)

// Snapshotter is the hook prefix checkpoints need from a backend session to save the state at
// a position inside a prompt (docs/serving.md §4): a copy of the committed state — the GDN
// conv and recurrent state of the committed slot, the KV rows [0, Position), Position and
// the slot parity — and the way back. A Session that implements it gets checkpoints at the
// conversation boundaries of each prompt; one that does not gets only parked sessions (the
// live state at the end of each generation). No backend implements it yet: it needs a copy
// of runtime/model.State (see the report of issue 9).
type Snapshotter interface {
	// Snapshot copies the session's committed state. The session is idle (between calls).
	Snapshot() (Snapshot, error)
	// Restore makes the session's state a copy of s (s stays valid): Position = s.Position(),
	// the committed slot holds s's GDN state, KV rows [0, s.Position()) are s's; Done and
	// Error are cleared, the ring is empty. Errors: s too long for the session's capacity, s
	// from another model.
	Restore(s Snapshot) error
}

// Snapshot is a saved committed state of a session (Snapshotter).
type Snapshot interface {
	// Position is the number of tokens the state has consumed.
	Position() int
	// Bytes is the memory the copy holds (bytes).
	Bytes() int64
}

// job is one generation request between a handler and the worker.
type job struct {
	ctx        context.Context
	prompt     []int32
	boundaries []int // prompt positions worth a checkpoint (ascending), for Snapshotter sessions
	params     sample.Params
	maxTokens  int // clamped to the context
	out        *output
	msgs       chan jobMsg // worker → handler; closed by the worker when the job is over
	elem       *list.Element
	enqueued   time.Time
}

// jobMsg is what the worker tells the handler: that generation started (with the prompt
// tokens that came from a checkpoint), events, or the final result.
type jobMsg struct {
	started bool
	cached  int
	evs     []genEvent
	final   *genResult
}

// genResult is the outcome of a job.
type genResult struct {
	promptTokens     int
	cachedTokens     int // prompt tokens restored from a checkpoint instead of prefilled
	completionTokens int // every generated token, EOS included
	finish           string
	stopSeq          string
	toolCalls        int
	toolErr          error // the tool-call parser refused the output
	err              error // the backend failed
	prefillTokPerS   float64
	decodeTokPerS    float64
	rounds           int
}

// sampleKey is the part of the sampling parameters a backend bakes into a session
// (SessionOptions.Sampling; the seed is in the step state and changes freely).
type sampleKey struct {
	temperature float64
	topK        int
	topP        float64
}

func keyOf(p sample.Params) sampleKey {
	return sampleKey{p.Temperature, p.TopK, p.TopP}
}

// entry is a prefix checkpoint: either a parked live session whose committed history is
// tokens, or a Snapshot of a state at len(tokens).
type entry struct {
	tokens []int32
	sess   backend.Session // parked session (nil for a snapshot)
	key    sampleKey       // sess's sampling constants
	snap   Snapshot
	bytes  int64
	used   uint64 // LRU clock
}

// engine owns the model: one worker runs the queued jobs one after another on sessions of
// the target, keeping at most maxEntries prefix checkpoints.
type engine struct {
	target       backend.Target
	draft        backend.Drafter
	draftSamp    string  // SessionOptions.DraftSampling
	confStop     float64 // SessionOptions.ConfidenceStop
	eos          []int32
	context      int
	prefillChunk int
	maxEntries   int
	sessionBytes int64 // memory of one session's state (bytes), for the metrics
	log          *slog.Logger
	q            *queue
	m            *metrics

	entries   []*entry // touched only by the worker (and by tests after Close)
	clock     uint64
	running   atomic.Bool
	snapshots atomic.Bool // the backend's sessions implement Snapshotter

	stop context.CancelFunc
	wg   sync.WaitGroup
}

func (e *engine) start() {
	ctx, cancel := context.WithCancel(context.Background())
	e.stop = cancel
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		for {
			j := e.q.pop(ctx)
			if j == nil {
				return
			}
			e.running.Store(true)
			e.run(j)
			e.running.Store(false)
			e.q.done()
		}
	}()
}

// close stops the worker (after the job it is running) and releases the checkpoints.
func (e *engine) close() {
	e.stop()
	e.wg.Wait()
	for _, en := range e.entries {
		if en.sess != nil {
			en.sess.Close()
		}
	}
	e.entries = nil
	e.m.setCheckpoints(0, 0)
}

// send passes m to the handler; false when the client is gone.
func (j *job) send(m jobMsg) bool {
	select {
	case j.msgs <- m:
		return true
	case <-j.ctx.Done():
		return false
	}
}

// run generates one job. Whatever happens, the handler gets a final message (unless it is
// gone) and msgs is closed.
func (e *engine) run(j *job) {
	defer close(j.msgs)
	res := &genResult{promptTokens: len(j.prompt)}
	if j.ctx.Err() != nil {
		e.m.cancelled.Add(1)
		return
	}
	e.m.queueWait(time.Since(j.enqueued))
	sess, hist, err := e.acquire(j)
	if err != nil {
		res.err = err
		j.send(jobMsg{final: res})
		return
	}
	res.cachedTokens = len(hist)
	all := append(slices.Clip(hist), j.prompt[len(hist):]...) // history as fed, then generated ids
	keep := e.generate(j, sess, hist, res, &all)
	if pos := int(sess.State().Position); keep && pos <= len(all) {
		e.park(sess, all[:pos], keyOf(j.params))
	} else {
		sess.Close()
	}
	e.m.record(res)
	if res.finish == finishCancelled {
		return
	}
	j.send(jobMsg{final: res})
}

// generate runs the prefill of the prompt after hist and the decode loop; all collects the
// fed and generated ids. It reports whether the session's state is still sound (it is after
// a cancellation: committed steps stay committed).
func (e *engine) generate(j *job, sess backend.Session, hist []int32, res *genResult, all *[]int32) (keep bool) {
	ss := sess.State()
	ring := sess.Ring()
	// A parked or restored session continues: clear the stop flags of its last generation
	// (the host may write the step state between calls; docs/serving.md §4 asks for this to
	// become part of the contract).
	_ = ring.Drain(ss, nil)
	ss.Done, ss.Error, ss.StopAt = 0, 0, 0
	ss.SeedLo, ss.SeedHi = uint32(j.params.Seed), uint32(j.params.Seed>>32)
	if !j.send(jobMsg{started: true, cached: len(hist)}) {
		res.finish = finishCancelled
		return true
	}
	// fail classifies a backend error: a cancelled request keeps the session (committed
	// steps stay committed), anything else drops it.
	fail := func(err error) bool {
		if j.ctx.Err() != nil {
			res.finish = finishCancelled
			res.completionTokens = j.out.tokens
			return true
		}
		res.err = err
		return false
	}
	t0 := time.Now()
	pos := len(hist)
	if sn, ok := sess.(Snapshotter); ok {
		for _, b := range j.boundaries {
			if b <= pos || b >= len(j.prompt) || e.has(j.prompt[:b]) {
				continue
			}
			if err := sess.Prefill(j.ctx, j.prompt[pos:b]); err != nil {
				return fail(err)
			}
			// The last prefill step sampled a token: not part of this generation.
			_ = ring.Drain(ss, nil)
			ss.Done, ss.Error = 0, 0
			pos = b
			if snap, err := sn.Snapshot(); err != nil {
				e.log.Warn("checkpoint not saved", "position", b, "err", err)
			} else {
				e.add(&entry{tokens: slices.Clone(j.prompt[:b]), snap: snap, bytes: snap.Bytes()})
			}
		}
	}
	ss.StopAt = ss.RingHead + uint32(j.maxTokens)
	if err := sess.Prefill(j.ctx, j.prompt[pos:]); err != nil {
		return fail(err)
	}
	prefilled := len(j.prompt) - len(hist)
	res.prefillTokPerS = float64(prefilled) / time.Since(t0).Seconds()
	e.m.prefill(prefilled, time.Since(t0))

	var decodeTime time.Duration
	decodeTokens := 0
	var buf []int32
	for {
		buf = ring.Drain(ss, buf[:0])
		*all = append(*all, buf...)
		if evs := j.out.add(buf); len(evs) > 0 {
			if !j.send(jobMsg{evs: slices.Clone(evs)}) {
				res.finish = finishCancelled
				break
			}
		}
		if j.out.reason != "" {
			break
		}
		if ss.Done != 0 {
			switch {
			case ss.Error == backend.ErrContextFull:
				j.out.reason = finishContext
			case ss.Error != backend.ErrNone:
				res.err = fmt.Errorf("generation stopped with device error %d", ss.Error)
				return false
			default:
				j.out.reason = finishLength // StopAt; an EOS was seen by out.add
			}
			break
		}
		if j.ctx.Err() != nil {
			res.finish = finishCancelled
			break
		}
		head := ss.RingHead
		t := time.Now()
		err := sess.Decode(j.ctx, 1)
		decodeTime += time.Since(t)
		if n := int(ss.RingHead - head); n > 0 {
			res.rounds++
			decodeTokens += n
		}
		if err != nil {
			if !fail(err) {
				return false
			}
			break
		}
	}
	if res.rounds > 0 {
		res.decodeTokPerS = float64(decodeTokens) / decodeTime.Seconds()
	}
	e.m.decode(decodeTokens, res.rounds, decodeTime)
	if res.finish == finishCancelled {
		res.completionTokens = j.out.tokens
		return true
	}
	evs := j.out.finish(finishLength)
	res.finish, res.stopSeq = j.out.reason, j.out.stopSeq
	res.completionTokens, res.toolCalls, res.toolErr = j.out.tokens, j.out.calls, j.out.err
	if len(evs) > 0 && !j.send(jobMsg{evs: slices.Clone(evs)}) {
		res.finish = finishCancelled
	}
	return true
}

// acquire returns a session for j and the prefix of j.prompt its state already holds: the
// parked session or snapshot with the longest history that is a proper prefix of the prompt
// (a parked session only with the same sampling constants), else a new session.
func (e *engine) acquire(j *job) (backend.Session, []int32, error) {
	var best *entry
	bi := -1
	for i, en := range e.entries {
		n := len(en.tokens)
		if n >= len(j.prompt) || (best != nil && n <= len(best.tokens)) {
			continue
		}
		if en.sess != nil && en.key != keyOf(j.params) {
			continue
		}
		if slices.Equal(en.tokens, j.prompt[:n]) {
			best, bi = en, i
		}
	}
	if best != nil && best.sess != nil {
		e.entries = slices.Delete(e.entries, bi, bi+1)
		e.updateGauges()
		e.m.checkpointHits.Add(1)
		return best.sess, best.tokens, nil
	}
	sess, err := e.target.NewSession(backend.SessionOptions{
		Capacity: e.context, PrefillChunk: e.prefillChunk, Sampling: j.params, EOS: e.eos, Drafter: e.draft,
		DraftSampling: e.draftSamp, ConfidenceStop: e.confStop,
	})
	if err != nil {
		return nil, nil, err
	}
	if sn, ok := sess.(Snapshotter); ok && best != nil {
		if err := sn.Restore(best.snap); err != nil {
			e.log.Warn("checkpoint not restored", "position", len(best.tokens), "err", err)
		} else {
			e.clock++
			best.used = e.clock
			e.m.checkpointHits.Add(1)
			return sess, best.tokens, nil
		}
	}
	e.m.checkpointMisses.Add(1)
	return sess, nil, nil
}

// park keeps a session whose committed history is tokens as a checkpoint.
func (e *engine) park(sess backend.Session, tokens []int32, key sampleKey) {
	if e.maxEntries <= 0 || len(tokens) == 0 {
		sess.Close()
		return
	}
	e.add(&entry{tokens: slices.Clone(tokens), sess: sess, key: key, bytes: e.sessionBytes})
}

// add inserts a checkpoint, evicting the least recently used ones beyond maxEntries.
func (e *engine) add(en *entry) {
	if e.maxEntries <= 0 {
		if en.sess != nil {
			en.sess.Close()
		}
		return
	}
	e.clock++
	en.used = e.clock
	e.entries = append(e.entries, en)
	for len(e.entries) > e.maxEntries {
		lru := 0
		for i, x := range e.entries {
			if x.used < e.entries[lru].used {
				lru = i
			}
		}
		if x := e.entries[lru]; x.sess != nil {
			x.sess.Close()
		}
		e.entries = slices.Delete(e.entries, lru, lru+1)
		e.m.checkpointEvictions.Add(1)
	}
	e.updateGauges()
}

// has reports whether a checkpoint holds exactly tokens.
func (e *engine) has(tokens []int32) bool {
	for _, en := range e.entries {
		if slices.Equal(en.tokens, tokens) {
			return true
		}
	}
	return false
}

func (e *engine) updateGauges() {
	var b int64
	for _, en := range e.entries {
		b += en.bytes
	}
	e.m.setCheckpoints(len(e.entries), b)
}

// errQueueFull is returned by submit when the queue holds its maximum of waiting jobs.
var errQueueFull = errors.New("the request queue is full")
