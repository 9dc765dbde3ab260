package metal

import (
	"errors"
	"strings"
	"sync"
	"testing"
)

// TestOwnerLifecycle: every call runs on one OS thread inside the pool, one at a time; close
// runs its final function on that thread, stops the goroutine and makes later calls fail with
// ErrClosed; a second close is a no-op.
func TestOwnerLifecycle(t *testing.T) {
	depth, pools := 0, 0
	o := startOwner(func(f func()) {
		depth++
		pools++
		f()
		depth--
	})
	first, haveTID := threadID()
	err := o.do(func() error { first, haveTID = threadID(); return nil })
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	count := 0 // unsynchronised on purpose: the owner serialises the calls (run with -race)
	var mu sync.Mutex
	var errs []error
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				err := o.do(func() error {
					if depth != 1 {
						return errors.New("call outside the pool")
					}
					if id, ok := threadID(); ok && haveTID && id != first {
						return errors.New("call on another OS thread")
					}
					count++
					return nil
				})
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d calls failed, first: %v", len(errs), errs[0])
	}
	if count != 400 {
		t.Fatalf("count %d, want 400", count)
	}
	finalOnThread := false
	if err := o.close(func() error {
		id, ok := threadID()
		finalOnThread = !ok || id == first
		return errors.New("final's error")
	}); err == nil || err.Error() != "final's error" {
		t.Fatalf("close returned %v, want final's error", err)
	}
	if !finalOnThread {
		t.Fatal("close's final function ran on another thread")
	}
	select {
	case <-o.exited:
	default:
		t.Fatal("close returned before the goroutine exited")
	}
	if err := o.do(func() error { return nil }); !errors.Is(err, ErrClosed) {
		t.Fatalf("do after close: %v, want ErrClosed", err)
	}
	if err := o.close(func() error { t.Fatal("second close ran final"); return nil }); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if pools != 1+400+1 {
		t.Fatalf("%d pools, want one per call (402)", pools)
	}
	if !haveTID {
		t.Log("no OS thread id on this platform: thread identity not checked")
	}
}

// TestOwnerBroken: a panic on the device thread becomes an error, breaks the owner (later
// calls return that error), and close still runs its final function.
func TestOwnerBroken(t *testing.T) {
	o := startOwner(nil)
	err := o.do(func() error { var m map[string]int; m["x"] = 1; return nil })
	if err == nil || !strings.Contains(err.Error(), "internal error on the device thread") {
		t.Fatalf("panic gave %v", err)
	}
	if err2 := o.do(func() error { t.Fatal("ran on a broken owner"); return nil }); err2 != err {
		t.Fatalf("after the panic: %v, want %v", err2, err)
	}
	stuck := errors.New("stuck")
	o2 := startOwner(nil)
	if err := o2.do(func() error { o2.fail(stuck); return stuck }); err != stuck {
		t.Fatal(err)
	}
	if err := o2.do(func() error { return nil }); err != stuck {
		t.Fatalf("broken owner: %v, want %v", err, stuck)
	}
	ran := false
	if err := o2.close(func() error { ran = true; return nil }); err != nil || !ran {
		t.Fatalf("close of a broken owner: %v, final ran %v", err, ran)
	}
	o.close(func() error { return nil })
}
