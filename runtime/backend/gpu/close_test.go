package gpu

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// fakeQueue is a Queue whose Wait returns err; it counts Closes.
type fakeQueue struct {
	err    error
	closes int
}

func (q *fakeQueue) Launch(string, [3]uint32, uint64, uint64, ...uint64) error { return nil }
func (q *fakeQueue) CopyHtoD(*Buffer, int64, *HostBuffer, int64, int64) error  { return nil }
func (q *fakeQueue) CopyDtoH(*HostBuffer, int64, *Buffer, int64, int64) error  { return nil }
func (q *fakeQueue) Fill32(*Buffer, int64, int64, uint32) error                { return nil }
func (q *fakeQueue) Record(func() error) (Replay, error)                       { return nil, errors.New("not here") }
func (q *fakeQueue) Wait(time.Duration) error                                  { return q.err }
func (q *fakeQueue) Close() error                                              { q.closes++; return nil }

// fakeDevice is a Device of which only Close is used; it counts Closes.
type fakeDevice struct {
	Device
	closes int
}

func (d *fakeDevice) Close() error { d.closes++; return nil }

// TestCloseBusy: when a session's closing wait says the device may still be running its work
// (an error wrapping ErrDeviceBusy, as metal.ErrStuck does), Session.Close frees none of its
// buffers, host buffers or queue and says so, and the Target's Close then keeps the weights,
// vectors, row-major copies and draft vectors (the owned device is still closed); any other wait error (the work
// has ended, e.g. a kernel fault) frees everything as usual.
func TestCloseBusy(t *testing.T) {
	for _, c := range []struct {
		name     string
		waitErr  error
		busy     bool
		buffers  int // frees by the owner after both Closes
		hosts    int
		qCloses  int
		devClose int
	}{
		{"busy", fmt.Errorf("metal: wait: still running: %w", ErrDeviceBusy), true, 0, 0, 0, 1},
		{"kernel fault", errors.New("metal: wait: command buffer error: fault"), false, 7, 2, 1, 1},
		{"done", nil, false, 7, 2, 1, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := &fakeOwner{}
			buf := func() *Buffer { return &Buffer{Ptr: 0x1000, Size: 64, Owner: o} }
			host := func() *HostBuffer { return &HostBuffer{Bytes: make([]byte, 8), Owner: o} }
			dev := &fakeDevice{}
			q := &fakeQueue{err: c.waitErr}
			tg := &Target{Device: dev, pfx: "fake", owned: true, Weights: buf(), vecs: buf(), drafts: []*DSpark{{vecs: buf()}}, rowMajor: []*Buffer{buf(), buf()}}
			s := &Session{t: tg, d: dev, s: q, pfx: "fake", ctl: buf(), logits: buf(), ctlHost: host(), ringHost: host(), prefill: map[[2]int]*program{}}
			serr := s.Close()
			if c.busy != errors.Is(serr, ErrDeviceBusy) || c.busy && !strings.Contains(serr.Error(), "memory is kept") {
				t.Fatalf("session close: %v", serr)
			}
			if !c.busy && serr != nil {
				t.Fatalf("session close: %v", serr)
			}
			if c.busy && (o.buffers != 0 || o.hosts != 0 || q.closes != 0) {
				t.Fatalf("busy session close freed %d buffers, %d host buffers, closed the queue %d times", o.buffers, o.hosts, q.closes)
			}
			terr := tg.Close()
			if c.busy != errors.Is(terr, ErrDeviceBusy) || !c.busy && terr != nil {
				t.Fatalf("target close: %v", terr)
			}
			if o.buffers != c.buffers || o.hosts != c.hosts || q.closes != c.qCloses || dev.closes != c.devClose {
				t.Fatalf("frees %d buffers %d hosts, queue closes %d, device closes %d; want %d %d %d %d",
					o.buffers, o.hosts, q.closes, dev.closes, c.buffers, c.hosts, c.qCloses, c.devClose)
			}
			if s.Close() != nil || tg.Close() != nil || o.buffers != c.buffers || dev.closes != c.devClose {
				t.Fatal("a second Close failed")
			}
		})
	}
}
