package gpu

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"
)

// copyQueue is a Queue that copies between device buffers of its own memory (by Buffer.Ptr)
// and host buffers. Lazy, it runs the copies queued on it only at Wait, in order: a host copy
// that reads a staging half before the device copy into it was awaited, or fills a half a
// queued device copy has still to read, gets or leaves the wrong bytes. Eager, it runs each
// copy when it is queued: a device copy queued into the half the host is about to read
// overwrites it. failCopy > 0 makes that copy (1-based) fail to queue; failWait > 0 makes that
// Wait fail with waitErr (after running the pending copies).
type copyQueue struct {
	fakeQueue
	eager              bool
	mem                map[uint64][]byte
	pending            []func()
	copies, waits      int
	failCopy, failWait int
	waitErr            error
}

func (q *copyQueue) run(f func()) error {
	q.copies++
	if q.copies == q.failCopy {
		return errors.New("queue: copy refused")
	}
	if q.eager {
		f()
	} else {
		q.pending = append(q.pending, f)
	}
	return nil
}

func (q *copyQueue) CopyHtoD(dst *Buffer, dstOff int64, src *HostBuffer, srcOff, n int64) error {
	return q.run(func() { copy(q.mem[dst.Ptr][dstOff:dstOff+n], src.Bytes[srcOff:srcOff+n]) })
}

func (q *copyQueue) CopyDtoH(dst *HostBuffer, dstOff int64, src *Buffer, srcOff, n int64) error {
	return q.run(func() { copy(dst.Bytes[dstOff:dstOff+n], q.mem[src.Ptr][srcOff:srcOff+n]) })
}

func (q *copyQueue) Wait(time.Duration) error {
	for _, f := range q.pending {
		f()
	}
	q.pending = q.pending[:0]
	q.waits++
	if q.waits == q.failWait {
		return q.waitErr
	}
	return nil
}

// hostDevice is a Device that only allocates host buffers.
type hostDevice struct{ Device }

func (hostDevice) HostAlloc(size int64, mapped bool) (*HostBuffer, error) {
	return &HostBuffer{Bytes: make([]byte, size)}, nil
}

// TestSnapshotCopies: copyOut and copyIn move every byte through a staging buffer of two
// halves, for lengths below, at and across chunk boundaries and at offsets, on a queue that
// runs copies only when awaited and on one that runs them at once (so both orders of the
// overlap are checked), with halves large enough for the parallel host copy (8 MiB stage, 4
// goroutines); one wait per chunk each way, nothing left queued. Failures: a copy that cannot be
// queued and a failing wait are returned; a wait that says the device may still be running
// (ErrDeviceBusy) drops the staging buffer, which the next copy replaces.
func TestSnapshotCopies(t *testing.T) {
	defer func(n int) { snapshotStage = n }(snapshotStage)
	defer func() { hostCopy = parallelCopy }()
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	rng := rand.New(rand.NewPCG(1, 2))
	for _, eager := range []bool{false, true} {
		for _, stage := range []int{64, 1 << 20, 8 << 20} {
			snapshotStage = stage
			half := stage / 2
			for _, n := range []int{0, 1, half - 1, half, half + 1, 2 * half, 5*half + 7, 3 << 20} {
				name := fmt.Sprintf("eager %v, stage %d, %d bytes", eager, stage, n)
				const off = 48
				dev := make([]byte, n+off+16)
				for i := range dev {
					dev[i] = byte(rng.Uint32())
				}
				q := &copyQueue{eager: eager, mem: map[uint64][]byte{0x1000: dev}}
				s := &Session{d: hostDevice{}, s: q}
				buf := &Buffer{Ptr: 0x1000, Size: int64(len(dev))}
				chunks := (n + half - 1) / half
				// The overlap: when the host copies chunk i out, chunk i+1's device copy is
				// already queued; when it fills chunk i in, chunk i−1's is not yet awaited.
				var seen []int
				hostCopy = func(dst, src []byte) { seen = append(seen, q.copies, q.waits); parallelCopy(dst, src) }
				out := make([]byte, n)
				if err := s.copyOut(out, buf, off); err != nil {
					t.Fatal(err)
				}
				for i := 0; i < chunks; i++ {
					if want := min(i+2, chunks); seen[2*i] != want {
						t.Fatalf("%s: copyOut's host copy of chunk %d ran with %d device copies queued, want %d", name, i, seen[2*i], want)
					}
				}
				if !bytes.Equal(out, dev[off:off+n]) || len(q.pending) != 0 || q.waits != chunks {
					t.Fatalf("%s: copyOut differs from the device bytes, or %d copies left queued, %d waits for %d chunks", name, len(q.pending), q.waits, chunks)
				}
				in := make([]byte, n)
				for i := range in {
					in[i] = byte(rng.Uint32())
				}
				want := bytes.Clone(dev)
				copy(want[off:], in)
				q.waits, q.copies, seen = 0, 0, seen[:0]
				if err := s.copyIn(buf, off, in); err != nil {
					t.Fatal(err)
				}
				for i := 1; i < chunks; i++ {
					if seen[2*i] != i || seen[2*i+1] != i-1 {
						t.Fatalf("%s: copyIn filled chunk %d with %d copies queued and %d awaited, want %d and %d", name, i, seen[2*i], seen[2*i+1], i, i-1)
					}
				}
				if !bytes.Equal(dev, want) || len(q.pending) != 0 || q.waits != chunks {
					t.Fatalf("%s: copyIn left other bytes on the device, or %d copies left queued, %d waits for %d chunks", name, len(q.pending), q.waits, chunks)
				}
			}
		}
	}
	hostCopy = parallelCopy
	snapshotStage = 64
	buf := &Buffer{Ptr: 0x1000, Size: 256}
	fail := errors.New("copy engine fault")
	for k := 1; k <= 3; k++ {
		q := &copyQueue{mem: map[uint64][]byte{0x1000: make([]byte, 256)}, failCopy: k}
		s := &Session{d: hostDevice{}, s: q}
		if err := s.copyOut(make([]byte, 200), buf, 0); err == nil || len(q.pending) != 0 {
			t.Errorf("copyOut with copy %d refused: err %v, %d copies left queued", k, err, len(q.pending))
		}
		q = &copyQueue{mem: map[uint64][]byte{0x1000: make([]byte, 256)}, failCopy: k}
		s = &Session{d: hostDevice{}, s: q}
		if err := s.copyIn(buf, 0, make([]byte, 200)); err == nil || len(q.pending) != 0 {
			t.Errorf("copyIn with copy %d refused: err %v, %d copies left queued", k, err, len(q.pending))
		}
		q = &copyQueue{mem: map[uint64][]byte{0x1000: make([]byte, 256)}, failWait: k, waitErr: fail}
		s = &Session{d: hostDevice{}, s: q}
		if err := s.copyOut(make([]byte, 200), buf, 0); !errors.Is(err, fail) {
			t.Errorf("copyOut with wait %d failing: %v", k, err)
		}
		q = &copyQueue{mem: map[uint64][]byte{0x1000: make([]byte, 256)}, failWait: k, waitErr: fail}
		s = &Session{d: hostDevice{}, s: q}
		if err := s.copyIn(buf, 0, make([]byte, 200)); !errors.Is(err, fail) {
			t.Errorf("copyIn with wait %d failing: %v", k, err)
		}
	}
	busy := fmt.Errorf("wait: %w", ErrDeviceBusy)
	q := &copyQueue{mem: map[uint64][]byte{0x1000: make([]byte, 256)}, failWait: 2, waitErr: busy}
	s := &Session{d: hostDevice{}, s: q}
	if err := s.copyOut(make([]byte, 200), buf, 0); !errors.Is(err, ErrDeviceBusy) || s.stageHost != nil {
		t.Fatalf("copyOut, device busy: err %v, staging buffer kept %v", err, s.stageHost != nil)
	}
	q.failWait = 0
	out := make([]byte, 200)
	if err := s.copyOut(out, buf, 0); err != nil || s.stageHost == nil || !bytes.Equal(out, q.mem[0x1000][:200]) {
		t.Fatalf("copyOut after a busy wait: err %v, new staging buffer %v", err, s.stageHost != nil)
	}
	snapshotStage = 1
	s = &Session{d: hostDevice{}, s: &copyQueue{mem: map[uint64][]byte{0x1000: make([]byte, 256)}}}
	if err := s.copyOut(make([]byte, 8), buf, 0); err == nil {
		t.Error("copyOut through a 1-byte staging buffer: no error")
	}
	s = &Session{d: hostDevice{}, s: &copyQueue{mem: map[uint64][]byte{0x1000: make([]byte, 256)}}}
	if err := s.copyIn(buf, 0, make([]byte, 8)); err == nil {
		t.Error("copyIn through a 1-byte staging buffer: no error")
	}
}
