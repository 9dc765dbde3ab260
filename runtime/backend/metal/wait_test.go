package metal

import (
	"errors"
	"fmt"
	"maps"
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

// fakeCBs are command buffers whose status follows a fake clock: cb i ends at end[i] after
// start with state final[i] (never: it keeps running); release counts each release.
type fakeCBs struct {
	clk      *fakeClock
	start    time.Time
	end      map[int]time.Duration
	final    map[int]cbState
	released map[int]int
}

func newFakeCBs(clk *fakeClock) *fakeCBs {
	return &fakeCBs{clk: clk, start: clk.t, end: map[int]time.Duration{}, final: map[int]cbState{}, released: map[int]int{}}
}

func (f *fakeCBs) set(cb int, end time.Duration, final cbState) { f.end[cb], f.final[cb] = end, final }

func (f *fakeCBs) status(cb int) cbState {
	if e := f.end[cb]; e < 0 || f.clk.t.Sub(f.start) < e {
		return cbRunning
	}
	return f.final[cb]
}

func (f *fakeCBs) release(cb int) {
	if f.status(cb) == cbRunning {
		panic(fmt.Sprintf("command buffer %d released while running", cb))
	}
	f.released[cb]++
}

// TestLedgerOrphan: a closed queue's command buffers stay held; each later orphan call
// releases (once) the earlier orphans that have ended and keeps the running ones.
func TestLedgerOrphan(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	f := newFakeCBs(clk)
	f.set(1, time.Millisecond, cbCompleted)
	f.set(2, -1, 0)
	f.set(3, time.Millisecond, cbFailed)
	f.set(4, -1, 0)
	var l ledger[int]
	for cb := 1; cb <= 5; cb++ {
		l.add(cb)
	}
	l.orphan([]int{1, 2, 3}, f.status, f.release) // 1 and 3 have not ended yet
	if len(f.released) != 0 || !slices.Equal(l.orphans, []int{1, 2, 3}) {
		t.Fatalf("released %v orphans %v, want none and [1 2 3]", f.released, l.orphans)
	}
	clk.Sleep(2 * time.Millisecond)
	l.orphan([]int{4}, f.status, f.release)
	if !maps.Equal(f.released, map[int]int{1: 1, 3: 1}) || !slices.Equal(l.orphans, []int{2, 4}) || !slices.Equal(l.held, []int{2, 4, 5}) {
		t.Fatalf("released %v orphans %v held %v, want {1 3} [2 4] [2 4 5]", f.released, l.orphans, l.held)
	}
	if l.take(1) || !l.take(5) || l.take(5) {
		t.Fatal("take: a released buffer was still held, or a held one taken twice")
	}
}

// TestAwaitHeldKeepsTheRest (review finding 8): after a stall breaks the device, every other
// wait fails at its first poll — another queue's whole list and the buffer bound() took off
// its in-flight list are neither finished nor released, and they stay in the ledger. Close's
// drain then waits for all of them: all released exactly once when they end within DrainWait,
// none released (kept for the life of the process) when one still runs.
func TestAwaitHeldKeepsTheRest(t *testing.T) {
	const timeout, drain = 10 * time.Millisecond, 30 * time.Millisecond
	const stalled, b0, b1, bounded = 1, 2, 3, 4
	errStalled := fmt.Errorf("stalled: %w", ErrStuck)
	for _, c := range []struct {
		name       string
		stalledEnd time.Duration // when the stalled buffer ends; -1: never
		kept       bool
	}{
		{"ends during Close", timeout + drain + 20*time.Millisecond, false},
		{"still running at Close", -1, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			clk := &fakeClock{t: time.Unix(1000, 0)}
			f := newFakeCBs(clk)
			f.set(stalled, c.stalledEnd, cbCompleted)
			f.set(b0, time.Millisecond, cbCompleted)
			f.set(b1, 2*time.Millisecond, cbFailed)
			f.set(bounded, time.Millisecond, cbCompleted)
			o := startOwner(nil)
			var l ledger[int]
			if err := o.do(func() error { // the commits
				for _, cb := range []int{stalled, b0, b1, bounded} {
					l.add(cb)
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			finished := 0
			finish := func(i int, r waitResult) error { finished++; return nil }
			stall := func(i int, r waitResult) error { o.fail(errStalled); return errStalled }
			wait := func(list ...int) error {
				return awaitHeld(o.do, &l, list, newWaiter(timeout, drain, clk), f.status, finish, stall)
			}
			if err := wait(stalled); err != errStalled {
				t.Fatalf("stalled wait: %v, want %v", err, errStalled)
			}
			if err := wait(b0, b1); err != errStalled {
				t.Fatalf("the other queue's wait: %v, want the broken error", err)
			}
			if err := wait(bounded); err != errStalled {
				t.Fatalf("bound's wait: %v, want the broken error", err)
			}
			if finished != 0 || len(f.released) != 0 || !slices.Equal(l.held, []int{stalled, b0, b1, bounded}) {
				t.Fatalf("after the stall: %d finished, released %v, held %v; want none, none, all four", finished, f.released, l.held)
			}
			errKept := errors.New("kept")
			err := o.close(func() error {
				if l.drain(newWaiter(drain, 0, clk), f.status, f.release) {
					return errKept
				}
				return nil
			})
			if c.kept {
				if err != errKept || len(f.released) != 0 || len(l.held) != 4 {
					t.Fatalf("close: %v, released %v, held %v; want kept, none released, all held", err, f.released, l.held)
				}
				return
			}
			want := map[int]int{stalled: 1, b0: 1, b1: 1, bounded: 1}
			if err != nil || !maps.Equal(f.released, want) || len(l.held) != 0 {
				t.Fatalf("close: %v, released %v, held %v; want nil, each once, none", err, f.released, l.held)
			}
		})
	}
}

// TestAwaitHeld: a wait that ends normally takes each buffer off the ledger and finishes it
// (the failed one too, and the one after it); a wait during which the device closes stops
// at the next call and leaves the rest to Close's drain, which released them.
func TestAwaitHeld(t *testing.T) {
	const timeout, drain = 10 * time.Millisecond, 30 * time.Millisecond
	clk := &fakeClock{t: time.Unix(1000, 0)}
	f := newFakeCBs(clk)
	f.set(1, time.Millisecond, cbFailed)
	f.set(2, 3*time.Millisecond, cbCompleted)
	f.set(3, 4*time.Millisecond, cbCompleted)
	f.set(4, 5*time.Millisecond, cbCompleted)
	o := startOwner(nil)
	var l ledger[int]
	o.do(func() error { l.add(1); l.add(2); l.add(3); l.add(4); return nil })
	finish := func(list []int) func(i int, r waitResult) error {
		return func(i int, r waitResult) error {
			f.release(list[i])
			if r.state == cbFailed {
				return fmt.Errorf("buffer %d failed", list[i])
			}
			return nil
		}
	}
	stall := func(i int, r waitResult) error { t.Fatalf("stall at %d", i); return nil }
	list := []int{1, 2}
	err := awaitHeld(o.do, &l, list, newWaiter(timeout, drain, clk), f.status, finish(list), stall)
	if err == nil || err.Error() != "buffer 1 failed" {
		t.Fatalf("wait: %v, want buffer 1's failure", err)
	}
	if !maps.Equal(f.released, map[int]int{1: 1, 2: 1}) || !slices.Equal(l.held, []int{3, 4}) {
		t.Fatalf("released %v held %v, want {1 2} [3 4]", f.released, l.held)
	}
	calls := 0
	closeAt := func(fn func() error) error { // Close runs before the wait's third call
		if calls++; calls == 3 {
			if err := o.close(func() error {
				if l.drain(newWaiter(drain, 0, clk), f.status, f.release) {
					return errors.New("kept")
				}
				return nil
			}); err != nil {
				t.Fatalf("close: %v", err)
			}
		}
		return o.do(fn)
	}
	list = []int{3, 4}
	err = awaitHeld(closeAt, &l, list, newWaiter(timeout, drain, clk), f.status, finish(list), stall)
	if !errors.Is(err, ErrClosed) {
		t.Fatalf("wait across Close: %v, want ErrClosed", err)
	}
	if !maps.Equal(f.released, map[int]int{1: 1, 2: 1, 3: 1, 4: 1}) || len(l.held) != 0 {
		t.Fatalf("released %v held %v, want each once, none held", f.released, l.held)
	}
}
