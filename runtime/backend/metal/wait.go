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
