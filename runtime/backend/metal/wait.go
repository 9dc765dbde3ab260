package metal

import "time"

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
// cbRunning: the device must be marked broken and its memory kept).
func await(poll func() cbState, timeout, drain time.Duration, c clock) waitResult {
	start := c.Now()
	deadline := start.Add(timeout)
	late := false
	for {
		st := poll()
		now := c.Now()
		if st != cbRunning {
			return waitResult{state: st, late: late, waited: now.Sub(start)}
		}
		if !late && now.After(deadline) {
			late = true
			deadline = now.Add(drain)
		} else if late && now.After(deadline) {
			return waitResult{state: cbRunning, late: true, waited: now.Sub(start)}
		}
		c.Sleep(pollInterval)
	}
}
