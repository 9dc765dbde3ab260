package gpu

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"
	"time"
)

// lazyQueue is a Queue that runs the copies queued on it only at Wait, in order, between
// device buffers of its own memory (by Buffer.Ptr) and host buffers: a host copy that reads a
// staging half before the device copy into it has been awaited, or writes a half that a queued
// device copy still has to read, gets or leaves the wrong bytes.
type lazyQueue struct {
	fakeQueue
	mem     map[uint64][]byte
	pending []func()
	waits   int
}

func (q *lazyQueue) CopyHtoD(dst *Buffer, dstOff int64, src *HostBuffer, srcOff, n int64) error {
	q.pending = append(q.pending, func() { copy(q.mem[dst.Ptr][dstOff:dstOff+n], src.Bytes[srcOff:srcOff+n]) })
	return nil
}

func (q *lazyQueue) CopyDtoH(dst *HostBuffer, dstOff int64, src *Buffer, srcOff, n int64) error {
	q.pending = append(q.pending, func() { copy(dst.Bytes[dstOff:dstOff+n], q.mem[src.Ptr][srcOff:srcOff+n]) })
	return nil
}

func (q *lazyQueue) Wait(time.Duration) error {
	for _, f := range q.pending {
		f()
	}
	q.pending = q.pending[:0]
	q.waits++
	return q.err
}

// hostDevice is a Device that only allocates host buffers.
type hostDevice struct{ Device }

func (hostDevice) HostAlloc(size int64, mapped bool) (*HostBuffer, error) {
	return &HostBuffer{Bytes: make([]byte, size)}, nil
}

// TestSnapshotCopies: copyOut and copyIn move every byte through a staging buffer of two
// halves, for lengths below, at and across chunk boundaries and at offsets, with copies that
// run only when awaited (lazyQueue) and host pieces copied in parallel; nothing is left queued
// at the end, and a failing wait is returned.
func TestSnapshotCopies(t *testing.T) {
	defer func(n int) { snapshotStage = n }(snapshotStage)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, stage := range []int{64, 1 << 20, 3 << 20} {
		snapshotStage = stage
		half := stage / 2
		for _, n := range []int{0, 1, half - 1, half, half + 1, 2 * half, 5*half + 7, 3 << 20} {
			const off = 48
			dev := make([]byte, n+off+16)
			for i := range dev {
				dev[i] = byte(rng.Uint32())
			}
			q := &lazyQueue{mem: map[uint64][]byte{0x1000: dev}}
			s := &Session{d: hostDevice{}, s: q}
			buf := &Buffer{Ptr: 0x1000, Size: int64(len(dev))}
			out := make([]byte, n)
			if err := s.copyOut(out, buf, off); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out, dev[off:off+n]) || len(q.pending) != 0 {
				t.Fatalf("stage %d, %d bytes: copyOut differs from the device bytes (%d copies left queued)", stage, n, len(q.pending))
			}
			in := make([]byte, n)
			for i := range in {
				in[i] = byte(rng.Uint32())
			}
			want := bytes.Clone(dev)
			copy(want[off:], in)
			if err := s.copyIn(buf, off, in); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(dev, want) || len(q.pending) != 0 {
				t.Fatalf("stage %d, %d bytes: copyIn left other bytes on the device (%d copies left queued)", stage, n, len(q.pending))
			}
		}
	}
	snapshotStage = 64
	fail := errors.New("copy engine fault")
	q := &lazyQueue{fakeQueue: fakeQueue{err: fail}, mem: map[uint64][]byte{0x1000: make([]byte, 256)}}
	s := &Session{d: hostDevice{}, s: q}
	buf := &Buffer{Ptr: 0x1000, Size: 256}
	if err := s.copyOut(make([]byte, 200), buf, 0); !errors.Is(err, fail) {
		t.Errorf("copyOut with a failing wait: %v", err)
	}
	if err := s.copyIn(buf, 0, make([]byte, 200)); !errors.Is(err, fail) {
		t.Errorf("copyIn with a failing wait: %v", err)
	}
}
