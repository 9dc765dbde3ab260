package metal

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"lithos/runtime/backend/gpu"
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

// TestAwaitInOrder: the command buffers of one Wait, awaited in commit order under one
// bound. A failed buffer does not end the wait: the later ones are still polled until they
// finish (never released while running); the drain window is shared (a buffer finishing
// after timeout + drain is stuck even if an earlier one used part of the window); a stuck
// buffer stops the loop and hands it and the rest to stuck; a poll error stops it too.
func TestAwaitInOrder(t *testing.T) {
	const timeout, drain = 10 * time.Millisecond, 30 * time.Millisecond
	const never = -1
	errClosed := errors.New("closed")
	type buf struct {
		doneAt time.Duration // never: stays running
		final  cbState
	}
	for _, c := range []struct {
		name      string
		bufs      []buf
		pollErrAt int // index whose poll fails; -1: none
		done      []int
		stuckAt   int // -1: stuck not called
		errs      []string
		late      []bool // per done buffer
		waitedMax time.Duration
	}{
		{"failure then the rest", []buf{{1 * time.Millisecond, cbFailed}, {5 * time.Millisecond, cbCompleted}, {8 * time.Millisecond, cbCompleted}},
			-1, []int{0, 1, 2}, -1, []string{"buffer 0 failed"}, []bool{false, false, false}, 8*time.Millisecond + 2*pollInterval},
		{"late, one drain window", []buf{{20 * time.Millisecond, cbCompleted}, {39 * time.Millisecond, cbCompleted}},
			-1, []int{0, 1}, -1, []string{"buffer 0 late"}, []bool{true, true}, 39*time.Millisecond + 2*pollInterval},
		{"drain shared, second stuck", []buf{{20 * time.Millisecond, cbCompleted}, {45 * time.Millisecond, cbCompleted}},
			-1, []int{0}, 1, []string{"buffer 0 late", "stuck at 1"}, []bool{true}, timeout + drain + 2*pollInterval},
		{"stuck in the middle", []buf{{2 * time.Millisecond, cbCompleted}, {never, 0}, {3 * time.Millisecond, cbCompleted}},
			-1, []int{0}, 1, []string{"stuck at 1"}, []bool{false}, timeout + drain + 2*pollInterval},
		{"failure then stuck", []buf{{1 * time.Millisecond, cbFailed}, {never, 0}},
			-1, []int{0}, 1, []string{"buffer 0 failed", "stuck at 1"}, []bool{false}, timeout + drain + 2*pollInterval},
		{"poll error", []buf{{1 * time.Millisecond, cbFailed}, {2 * time.Millisecond, cbCompleted}, {3 * time.Millisecond, cbCompleted}},
			1, []int{0}, -1, []string{"buffer 0 failed", "closed"}, []bool{false}, 2 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			clk := &fakeClock{t: time.Unix(1000, 0)}
			start := clk.t
			running := func(i int) bool {
				b := c.bufs[i]
				return b.doneAt == never || clk.t.Sub(start) < b.doneAt
			}
			var done []int
			var late []bool
			stuckAt := -1
			var last time.Duration
			err := awaitInOrder(len(c.bufs), newWaiter(timeout, drain, clk),
				func(i int) (cbState, error) {
					if i == c.pollErrAt {
						return cbRunning, errClosed
					}
					if running(i) {
						return cbRunning, nil
					}
					return c.bufs[i].final, nil
				},
				func(i int, r waitResult) error {
					if running(i) {
						t.Fatalf("buffer %d released at %v while running", i, clk.t.Sub(start))
					}
					done, late, last = append(done, i), append(late, r.late), r.waited
					switch {
					case r.state == cbFailed:
						return fmt.Errorf("buffer %d failed", i)
					case r.late:
						return fmt.Errorf("buffer %d late", i)
					}
					return nil
				},
				func(i int, r waitResult) error {
					if stuckAt >= 0 {
						t.Fatalf("stuck called twice (%d, %d)", stuckAt, i)
					}
					stuckAt, last = i, r.waited
					if r.waited < timeout+drain {
						t.Fatalf("buffer %d declared stuck after %v, before timeout + drain", i, r.waited)
					}
					return fmt.Errorf("stuck at %d", i)
				})
			if !slices.Equal(done, c.done) || !slices.Equal(late, c.late) || stuckAt != c.stuckAt {
				t.Fatalf("done %v late %v stuck %d, want %v %v %d", done, late, stuckAt, c.done, c.late, c.stuckAt)
			}
			if err == nil {
				t.Fatalf("no error, want %q", c.errs)
			}
			for _, e := range c.errs {
				if !strings.Contains(err.Error(), e) {
					t.Fatalf("error %q, want it to contain %q", err, e)
				}
			}
			if c.pollErrAt >= 0 && !errors.Is(err, errClosed) {
				t.Fatalf("error %v does not wrap the poll's", err)
			}
			if waited := clk.t.Sub(start); waited > c.waitedMax || last > c.waitedMax {
				t.Fatalf("waited %v (last result %v), want at most %v", waited, last, c.waitedMax)
			}
		})
	}
}

// TestErrStuckIsBusy: an error wrapping ErrStuck (a command buffer still running) is a
// gpu.ErrDeviceBusy, so the runtime keeps its memory; ErrTimeout (done, late) is not.
func TestErrStuckIsBusy(t *testing.T) {
	err := fmt.Errorf("metal: wait: still running: %w", ErrStuck)
	if !errors.Is(err, ErrStuck) || !errors.Is(err, gpu.ErrDeviceBusy) {
		t.Fatalf("%v: Is(ErrStuck) %v, Is(gpu.ErrDeviceBusy) %v", err, errors.Is(err, ErrStuck), errors.Is(err, gpu.ErrDeviceBusy))
	}
	if late := fmt.Errorf("metal: wait: completed late: %w", ErrTimeout); errors.Is(late, gpu.ErrDeviceBusy) || errors.Is(late, ErrStuck) {
		t.Fatalf("%v counts as busy", late)
	}
	if ErrStuck.Error() != "metal: command buffer still running after its timeout" {
		t.Fatalf("message %q", ErrStuck)
	}
}
