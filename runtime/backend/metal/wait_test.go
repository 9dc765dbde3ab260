package metal

import (
	"testing"
	"time"
)

// fakeClock advances only when slept on.
type fakeClock struct{ t time.Time }

func (c *fakeClock) Now() time.Time        { return c.t }
func (c *fakeClock) Sleep(d time.Duration) { c.t = c.t.Add(d) }

// TestAwait: a command buffer that finishes in time, late (during the drain wait), never, or
// fails; the wait never ends while the buffer runs before timeout + drain.
func TestAwait(t *testing.T) {
	const timeout, drain = 10 * time.Millisecond, 30 * time.Millisecond
	for _, c := range []struct {
		name    string
		doneAt  time.Duration // when the buffer leaves cbRunning; < 0: never
		final   cbState
		state   cbState
		late    bool
		atLeast time.Duration // the wait lasted at least this long
	}{
		{"in time", 2 * time.Millisecond, cbCompleted, cbCompleted, false, 2 * time.Millisecond},
		{"failed", 1 * time.Millisecond, cbFailed, cbFailed, false, 1 * time.Millisecond},
		{"late", 25 * time.Millisecond, cbCompleted, cbCompleted, true, 25 * time.Millisecond},
		{"late failure", 39 * time.Millisecond, cbFailed, cbFailed, true, 39 * time.Millisecond},
		{"stuck", -1, cbRunning, cbRunning, true, timeout + drain},
	} {
		t.Run(c.name, func(t *testing.T) {
			clk := &fakeClock{t: time.Unix(1000, 0)}
			start := clk.t
			polls := 0
			r := await(func() cbState {
				polls++
				if c.doneAt >= 0 && clk.t.Sub(start) >= c.doneAt {
					return c.final
				}
				return cbRunning
			}, timeout, drain, clk)
			if r.state != c.state || r.late != c.late {
				t.Fatalf("state %d late %v, want %d %v", r.state, r.late, c.state, c.late)
			}
			if r.waited < c.atLeast || r.waited > c.atLeast+2*pollInterval {
				t.Fatalf("waited %v, want %v (+ one poll)", r.waited, c.atLeast)
			}
			t.Logf("%d polls, waited %v", polls, r.waited)
		})
	}
}
