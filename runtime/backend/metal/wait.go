package metal

import (
	"errors"
	"time"
)

// cbState is what polling a command buffer's status says (MTLCommandBufferStatus, reduced).
type cbState int

const (
	cbRunning   cbState = iota // not yet completed (NotEnqueued, Enqueued, Committed, Scheduled)
	cbCompleted                // MTLCommandBufferStatusCompleted (4)
	cbFailed                   // MTLCommandBufferStatusError (5)
)

// DefaultDrainWait is Device.DrainWait's initial value.
const DefaultDrainWait = 10 * time.Second

// DefaultTimeout is Device.Timeout's initial value: the bound of a Queue.Wait given none (the
// CUDA backend's bound, runtime/backend/cuda DefaultTimeout).
const DefaultTimeout = 2 * time.Minute

// pollInterval is the pause between two status polls.
const pollInterval = 50 * time.Microsecond

// clock is time for await; tests substitute a fake one.
type clock interface {
	Now() time.Time
	Sleep(time.Duration)
}

type realClock struct{}

func (realClock) Now() time.Time        { return time.Now() }
func (realClock) Sleep(d time.Duration) { time.Sleep(d) }

// waitResult is how a wait on a committed command buffer ended.
type waitResult struct {
	state  cbState       // cbRunning: still running after timeout + drain (stuck)
	late   bool          // the final state came after the timeout, during the drain wait
	waited time.Duration // from the start of the wait to the last poll
}

// await polls a committed command buffer until it completes or fails, at most timeout; then,
// if it is still running, for at most drain more: a command buffer may read and write its
// buffers (caller memory, for no-copy windows) until it completes, so the caller must not
// return control over that memory while it runs. The result says which: in time, late (done
// during the drain wait: report a timeout, the device stays usable) or stuck (state
// cbRunning: the device must be marked broken and its memory kept). It is one waiter's wait.
func await(poll func() cbState, timeout, drain time.Duration, c clock) waitResult {
	r, _ := newWaiter(timeout, drain, c).wait(func() (cbState, error) { return poll(), nil })
	return r
}

// waiter bounds a wait for one or more committed command buffers, awaited one after another
// in commit order: one deadline, timeout after the start, and once that has passed with a
// buffer still running, one drain window of drain shared by the rest (n buffers wait at most
// timeout + drain in all, not n times that).
type waiter struct {
	c        clock
	start    time.Time
	deadline time.Time
	drain    time.Duration
	late     bool // the deadline has passed: deadline is the end of the drain window
}

func newWaiter(timeout, drain time.Duration, c clock) *waiter {
	start := c.Now()
	return &waiter{c: c, start: start, deadline: start.Add(timeout), drain: drain}
}

// wait polls one command buffer until it leaves cbRunning or the waiter's bounds pass (state
// cbRunning: stuck). An error from poll (the device could not be asked: closed, or broken by
// another wait) ends the wait with that error and state cbRunning (nothing is known).
func (w *waiter) wait(poll func() (cbState, error)) (waitResult, error) {
	for {
		st, err := poll()
		now := w.c.Now()
		r := waitResult{state: st, late: w.late, waited: now.Sub(w.start)}
		if err != nil {
			r.state = cbRunning
			return r, err
		}
		if st != cbRunning {
			return r, nil
		}
		if now.After(w.deadline) {
			if w.late {
				return r, nil
			}
			w.late = true
			w.deadline = now.Add(w.drain)
		}
		w.c.Sleep(pollInterval)
	}
}

// awaitInOrder waits, under w, for n committed command buffers in commit order (index 0
// first). done(i, r) ends the wait for buffer i once it has left cbRunning (it releases the
// buffer; its error: the buffer failed, or completed late). An error does not stop the loop:
// the buffers committed after a failed one may still be running, using memory the caller will
// free once the wait returns, so each is still awaited within the same bounds. The loop stops
// early only when buffer i is still running after the bounds — stuck(i, r) is then called
// once: buffer i and every later one, unreleased, must be kept (the device is broken) — or
// when poll fails (the device closed or broken meanwhile: buffers i… are left unreleased).
// The result is the first error of done, joined with the error that stopped the loop.
func awaitInOrder(n int, w *waiter, poll func(i int) (cbState, error), done, stuck func(i int, r waitResult) error) error {
	var first error
	join := func(err error) error {
		if first == nil {
			return err
		}
		return errors.Join(first, err)
	}
	for i := range n {
		r, err := w.wait(func() (cbState, error) { return poll(i) })
		if err != nil {
			return join(err)
		}
		if r.state == cbRunning {
			return join(stuck(i, r))
		}
		if err := done(i, r); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// ledger is a device's list of the command buffers it holds a reference on (retained at
// commit): every queue's in flight, those a Wait or bound is awaiting, those a closed queue
// left running (orphans) and those still running after their wait (stuck). A command buffer
// is added when committed — the device is usable then — and leaves only when released: by its
// wait once it has ended (awaitHeld), by Queue.Close's prune once it has ended (orphan) or by
// Device.Close (drain). So nothing needs recording once the device is broken or closed: a
// wait that stops early (a stall elsewhere, Close meanwhile) leaves its command buffers here,
// and Close waits for every one of them before it releases any memory. Device thread only.
type ledger[T comparable] struct {
	held    []T // commit order
	orphans []T // held, of closed queues: no wait will release them
}

func (l *ledger[T]) add(cb T) { l.held = append(l.held, cb) }

// take removes cb; false when it was not held (its reference is not the caller's to drop).
func (l *ledger[T]) take(cb T) bool {
	for i, h := range l.held {
		if h == cb {
			l.held = append(l.held[:i], l.held[i+1:]...)
			return true
		}
	}
	return false
}

// orphan records cbs, held command buffers of a queue being closed, as orphans, after
// releasing (take, then release) every earlier orphan that status no longer reports running:
// orphans stay at most as many as are still running at a Queue.Close.
func (l *ledger[T]) orphan(cbs []T, status func(T) cbState, release func(T)) {
	kept := l.orphans[:0]
	for _, cb := range l.orphans {
		if status(cb) == cbRunning {
			kept = append(kept, cb)
		} else if l.take(cb) {
			release(cb)
		}
	}
	l.orphans = append(kept, cbs...)
}

// drain waits under w for every held command buffer in commit order (Device.Close: w bounds
// the whole wait). When all have ended it releases each once and empties the ledger (false);
// when one is still running past w's bounds it releases nothing and keeps them all (true):
// the GPU may still use any of the device's memory.
func (l *ledger[T]) drain(w *waiter, status func(T) cbState, release func(T)) (running bool) {
	for _, cb := range l.held {
		if r, _ := w.wait(func() (cbState, error) { return status(cb), nil }); r.state == cbRunning {
			return true
		}
	}
	for _, cb := range l.held {
		release(cb)
	}
	l.held, l.orphans = nil, nil
	return false
}

// awaitHeld waits under w for list, held command buffers of l committed in this order
// (awaitInOrder), each step one short call through do (on the device thread, so other queues
// keep queuing): a status poll; then, once a buffer has ended, take it off l and finish(i, r)
// (release it; its error: failed or late); for the first still running past the bounds,
// stall(i, r) (break the device). A stalled buffer and the ones after it stay in l, and so do
// the rest when do fails (the device broken by another wait, or closed): Close waits for
// them, or has already.
func awaitHeld[T comparable](do func(func() error) error, l *ledger[T], list []T, w *waiter,
	status func(T) cbState, finish, stall func(i int, r waitResult) error) error {
	return awaitInOrder(len(list), w,
		func(i int) (st cbState, err error) {
			err = do(func() error { st = status(list[i]); return nil })
			return st, err
		},
		func(i int, r waitResult) error {
			return do(func() error {
				if !l.take(list[i]) {
					return nil
				}
				return finish(i, r)
			})
		},
		func(i int, r waitResult) error { return do(func() error { return stall(i, r) }) })
}
