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
	"lithos/runtime/generate"
	"lithos/runtime/sample"
)

// job is one generation request between a handler and the worker.
type job struct {
	ctx        context.Context
	prompt     []int32
	boundaries []int // prompt positions worth a checkpoint (ascending), for backend.Snapshotter sessions
	params     sample.Params
	maxTokens  int // clamped to the context
	out        *output
	elem       *list.Element
	enqueued   time.Time

	// The worker → handler messages: an unbounded buffer, so that the worker never waits on
	// a handler (a client that reads its stream slowly, or not at all, must not hold the
	// model for the others; max_tokens bounds what accumulates). ready has one slot and is
	// signalled after every append and at the end.
	mu      sync.Mutex
	pending []jobMsg
	over    bool // the worker is done with the job: nothing more comes
	ready   chan struct{}
}

// newJob returns a job with its message buffer.
func newJob(ctx context.Context) *job { return &job{ctx: ctx, ready: make(chan struct{}, 1)} }

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
// tokens, or a backend.Snapshot of a state at len(tokens).
type entry struct {
	tokens []int32
	sess   backend.Session // parked session (nil for a snapshot)
	key    sampleKey       // sess's sampling constants
	snap   backend.Snapshot
	bytes  int64
	used   uint64 // LRU clock
}

// engine owns the model: one worker runs the queued jobs one after another on sessions of
// the target, keeping at most maxEntries prefix checkpoints of at most maxBytes together.
type engine struct {
	target       backend.Target
	draft        backend.Drafter
	draftSamp    string  // SessionOptions.DraftSampling
	confStop     float64 // SessionOptions.ConfidenceStop
	kvCache      string  // SessionOptions.KVCache
	eos          []int32
	context      int
	prefillChunk int
	perCall      int // decode steps queued per Session.Decode call (Options.RoundsPerCall)
	maxEntries   int
	maxBytes     int64 // budget of the checkpoints' memory (bytes; 0: no budget)
	sessionBytes int64 // memory of one session's state and drafter context (bytes): a parked session's cost
	log          *slog.Logger
	q            *queue
	m            *metrics

	entries   []*entry // touched only by the worker (and by tests after Close)
	clock     uint64
	running   atomic.Bool
	snapshots atomic.Bool // the backend's sessions implement backend.Snapshotter

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

// send passes m to the handler without waiting for it; false when the client is gone.
func (j *job) send(m jobMsg) bool {
	if j.ctx.Err() != nil {
		return false
	}
	j.mu.Lock()
	j.pending = append(j.pending, m)
	j.mu.Unlock()
	j.signal()
	return true
}

// end tells the handler that nothing more comes.
func (j *job) end() {
	j.mu.Lock()
	j.over = true
	j.mu.Unlock()
	j.signal()
}

func (j *job) signal() {
	select {
	case j.ready <- struct{}{}:
	default:
	}
}

// take moves the buffered messages into buf (reused) and reports whether the worker is done
// with the job (then buf holds the last of them).
func (j *job) take(buf []jobMsg) ([]jobMsg, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	buf = append(buf[:0], j.pending...)
	clear(j.pending)
	j.pending = j.pending[:0]
	return buf, j.over
}

// run generates one job. Whatever happens, the handler gets a final message (unless it is
// gone) and the end of the job.
func (e *engine) run(j *job) {
	defer j.end()
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
	// (the contract lets the host do so between calls, backend.Session).
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
	if sn, ok := sess.(backend.Snapshotter); ok {
		quiet, _ := sess.(backend.NoSamplePrefiller)
		for _, b := range j.boundaries {
			if b <= pos || b >= len(j.prompt) || e.has(j.prompt[:b]) {
				continue
			}
			if quiet != nil {
				if err := quiet.PrefillNoSample(j.ctx, j.prompt[pos:b]); err != nil {
					return fail(err)
				}
			} else {
				if err := sess.Prefill(j.ctx, j.prompt[pos:b]); err != nil {
					return fail(err)
				}
				// The last prefill step sampled a token: not part of this generation.
				_ = ring.Drain(ss, nil)
				ss.Done, ss.Error = 0, 0
			}
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
	stepTokens := 1 // the most tokens one decode step pushes
	if e.draft != nil {
		stepTokens = e.draft.BlockSize() + 1
	}
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
		head, step := ss.RingHead, ss.Step
		t := time.Now()
		err := sess.Decode(j.ctx, generate.CallSteps(ss, ring, e.perCall, decodeTokens, res.rounds, stepTokens))
		decodeTime += time.Since(t)
		// A step that pushed tokens committed them (Step counts the committed steps).
		res.rounds += int(ss.Step - step)
		decodeTokens += int(ss.RingHead - head)
		if err != nil {
			// The steps before the failed or cancelled one committed their tokens: the
			// history keeps them (a parked session's state is its history).
			buf = ring.Drain(ss, buf[:0])
			*all = append(*all, buf...)
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
	sess, err := e.newSession(j.params)
	if err != nil {
		return nil, nil, err
	}
	if sn, ok := sess.(backend.Snapshotter); ok && best != nil {
		if err := sn.Restore(best.snap); err != nil {
			// A GPU session's Restore can fail after it began copying (its state is then
			// undefined): start over in a new session rather than trust it.
			e.log.Warn("checkpoint not restored", "position", len(best.tokens), "err", err)
			sess.Close()
			if sess, err = e.target.NewSession(e.sessionOptions(j.params)); err != nil {
				return nil, nil, err
			}
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

// newSession returns an empty session for sampling parameters p: a recycled one (recycle) or a
// new one of the target.
func (e *engine) newSession(p sample.Params) (backend.Session, error) {
	if sess := e.recycle(keyOf(p)); sess != nil {
		return sess, nil
	}
	return e.target.NewSession(e.sessionOptions(p))
}

// sessionOptions are the options of the engine's sessions for sampling parameters p.
func (e *engine) sessionOptions(p sample.Params) backend.SessionOptions {
	return backend.SessionOptions{
		Capacity: e.context, PrefillChunk: e.prefillChunk, Sampling: p, EOS: e.eos, Drafter: e.draft,
		DraftSampling: e.draftSamp, ConfidenceStop: e.confStop, KVCache: e.kvCache,
	}
}

// recycle reuses the buffers of the checkpoint that parking a new session would evict: when
// the checkpoints are full (one more parked session would pass the count or the byte budget)
// and the least recently used one is a parked session with sampling constants key whose
// backend can reset it (backend.Resetter), it is removed (an eviction), reset and returned —
// instead of allocating a session's state (4.6 GB for the 27B at 32k positions) while the old
// one waits for the garbage collector. Otherwise nil.
func (e *engine) recycle(key sampleKey) backend.Session {
	if len(e.entries) == 0 || !e.full(e.sessionBytes) {
		return nil
	}
	i := e.lru()
	en := e.entries[i]
	r, ok := en.sess.(backend.Resetter)
	if en.sess == nil || en.key != key || !ok {
		return nil
	}
	e.entries = slices.Delete(e.entries, i, i+1)
	e.m.checkpointEvictions.Add(1)
	e.updateGauges()
	if err := r.Reset(); err != nil {
		e.log.Warn("parked session not reset", "err", err)
		en.sess.Close()
		return nil
	}
	e.m.sessionsReused.Add(1)
	return en.sess
}

// full reports whether one more checkpoint of bytes would pass the count or the byte budget.
func (e *engine) full(bytes int64) bool {
	if len(e.entries)+1 > e.maxEntries {
		return true
	}
	return e.maxBytes > 0 && e.heldBytes()+bytes > e.maxBytes
}

// lru returns the index of the least recently used checkpoint (entries not empty).
func (e *engine) lru() int {
	lru := 0
	for i, x := range e.entries {
		if x.used < e.entries[lru].used {
			lru = i
		}
	}
	return lru
}

// heldBytes is the checkpoints' memory (bytes).
func (e *engine) heldBytes() int64 {
	var b int64
	for _, en := range e.entries {
		b += en.bytes
	}
	return b
}

// park keeps a session whose committed history is tokens as a checkpoint.
func (e *engine) park(sess backend.Session, tokens []int32, key sampleKey) {
	if e.maxEntries <= 0 || len(tokens) == 0 {
		sess.Close()
		return
	}
	e.add(&entry{tokens: slices.Clone(tokens), sess: sess, key: key, bytes: e.sessionBytes})
}

// add inserts a checkpoint, evicting the least recently used ones beyond maxEntries or
// maxBytes. A checkpoint larger than maxBytes on its own is not kept (and evicts nothing).
func (e *engine) add(en *entry) {
	if e.maxEntries <= 0 || (e.maxBytes > 0 && en.bytes > e.maxBytes) {
		if e.maxEntries > 0 {
			e.m.checkpointsRefused.Add(1)
			e.log.Debug("checkpoint larger than the budget not kept", "bytes", en.bytes, "budget", e.maxBytes)
		}
		if en.sess != nil {
			en.sess.Close()
		}
		return
	}
	e.clock++
	en.used = e.clock
	e.entries = append(e.entries, en)
	for len(e.entries) > e.maxEntries || (e.maxBytes > 0 && e.heldBytes() > e.maxBytes) {
		lru := e.lru()
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

func (e *engine) updateGauges() { e.m.setCheckpoints(len(e.entries), e.heldBytes()) }

// errQueueFull is returned by submit when the queue holds its maximum of waiting jobs.
var errQueueFull = errors.New("the request queue is full")
