package metal

import (
	"fmt"
	"runtime"
	"sync"
)

// owner runs functions on one goroutine locked to its OS thread (Metal objects are used from
// the thread that owns them; issue 11). One function runs at a time: the mutex is held for the
// whole of do, so a second caller waits, and Close waits for a call in progress. Plain Go, so
// its life cycle is tested on every platform (owner_test.go).
type owner struct {
	mu     sync.Mutex
	calls  chan func()
	exited chan struct{} // closed when the goroutine has unlocked its thread and returned
	closed bool
	broken error // set by the thread (fail) when the device must not be used again

	// pool runs f inside an autorelease pool that it drains before returning (darwin), or
	// runs f directly (tests).
	pool func(f func())
}

// startOwner starts the owning goroutine.
func startOwner(pool func(func())) *owner {
	if pool == nil {
		pool = func(f func()) { f() }
	}
	o := &owner{calls: make(chan func()), exited: make(chan struct{}), pool: pool}
	go o.loop()
	return o
}

func (o *owner) loop() {
	runtime.LockOSThread()
	defer close(o.exited)
	defer runtime.UnlockOSThread()
	for f := range o.calls {
		f()
	}
}

// run calls f inside the pool and turns a panic into an error (and a broken device: the state
// of the Metal objects it was using is unknown).
func (o *owner) run(f func() error) (err error) {
	o.pool(func() {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("metal: internal error on the device thread: %v", r)
				if o.broken == nil {
					o.broken = err
				}
			}
		}()
		err = f()
	})
	return err
}

// do runs f on the owning thread and returns its error. Errors: ErrClosed after close, the
// broken error once the device is broken.
func (o *owner) do(f func() error) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return ErrClosed
	}
	if o.broken != nil {
		return o.broken
	}
	done := make(chan error, 1)
	o.calls <- func() { done <- o.run(f) }
	return <-done
}

// fail marks the device broken with err; called on the owning thread (inside do), so the field
// is written while do's caller holds mu.
func (o *owner) fail(err error) { o.broken = err }

// close runs final on the owning thread (broken or not), then stops the goroutine and waits
// until it has unlocked its thread and returned. A second close returns nil at once.
func (o *owner) close(final func() error) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return nil
	}
	o.closed = true
	done := make(chan error, 1)
	o.calls <- func() { done <- o.run(final) }
	err := <-done
	close(o.calls)
	<-o.exited
	return err
}
