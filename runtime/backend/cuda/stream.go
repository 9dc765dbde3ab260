//go:build linux && amd64

package cuda

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"time"
	"unsafe"

	"lithos/runtime/backend/gpu"
)

// Flags (cuda.h).
const (
	streamNonBlocking   = 0x1 // CU_STREAM_NON_BLOCKING: no implicit sync with the NULL stream
	eventDisableTiming  = 0x2 // CU_EVENT_DISABLE_TIMING
	captureModeThreadLc = 1   // CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
)

// ErrTimeout is wrapped by a wait that passed its bound. It is also a gpu.ErrDeviceBusy
// (errors.Is): after a timeout the queued work may still be running and using its buffers, so
// the shared GPU runtime keeps them (Session.Close, Target.Close, the snapshot staging buffer)
// instead of freeing or reusing memory the device may still write.
var ErrTimeout error = errTimeout{}

type errTimeout struct{}

func (errTimeout) Error() string {
	return "the device did not finish in time (a kernel hung, or the bound is too short for the work)"
}

// Is reports ErrTimeout as a gpu.ErrDeviceBusy.
func (errTimeout) Is(target error) bool { return target == gpu.ErrDeviceBusy }

// Stream is a CUDA stream (non-blocking: it does not wait for the legacy NULL stream). Work
// queued on it runs in order; Wait bounds the wait for it.
type Stream struct {
	d    *Device
	h    uintptr // CUstream
	done uintptr // CUevent recorded by Wait (timing disabled)
	// follows: the last work queued on the stream (or captured from it) is a lithos kernel
	// (Kernels.Launch), so the next one may overlap it (Kernels.Overlap); copies, fills, events,
	// other kernels (Function.Launch), graph launches and the start and end of a capture clear it.
	follows bool
}

// NewStream creates a stream.
func (d *Device) NewStream() (*Stream, error) {
	s := &Stream{d: d}
	err := d.do(func() error {
		if err := call(drv.cuStreamCreate, uintptr(unsafe.Pointer(&s.h)), streamNonBlocking); err != nil {
			return err
		}
		if err := call(drv.cuEventCreate, uintptr(unsafe.Pointer(&s.done)), eventDisableTiming); err != nil {
			call(drv.cuStreamDestroy, s.h)
			return err
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("cuda: create a stream: %w", err)
	}
	return s, nil
}

// Close destroys the stream (work queued on it still completes).
func (s *Stream) Close() error {
	if s == nil || s.h == 0 {
		return nil
	}
	err := s.d.do(func() error {
		return errors.Join(call(drv.cuEventDestroy, s.done), call(drv.cuStreamDestroy, s.h))
	})
	s.h, s.done = 0, 0
	return err
}

// Wait blocks until everything queued on the stream so far has finished, at most timeout
// (≤ 0: the device's Timeout): it records an event and polls it (cuEventQuery), yielding the
// thread between polls, so a hung kernel gives an error wrapping ErrTimeout instead of a hang.
// A kernel fault (illegal address, …) is returned as the driver reports it.
func (s *Stream) Wait(timeout time.Duration) error {
	if timeout <= 0 {
		timeout = s.d.Timeout
	}
	s.follows = false
	if err := s.d.do(func() error { return call(drv.cuEventRecord, s.done, s.h) }); err != nil {
		return fmt.Errorf("cuda: wait: %w", err)
	}
	return s.d.waitEvent(s.done, timeout, "stream")
}

// waitEvent polls ev until it completes, fails or timeout passes.
func (d *Device) waitEvent(ev uintptr, timeout time.Duration, what string) error {
	start := time.Now()
	for i := 0; ; i++ {
		r := syscallN(drv.cuEventQuery, ev)
		switch r {
		case cudaSuccess:
			return nil
		case cudaErrorNotReady:
		default:
			return fmt.Errorf("cuda: wait for the %s: %w", what, resultError(drv.cuEventQuery.name, int(int32(r))))
		}
		el := time.Since(start)
		if el > timeout {
			return fmt.Errorf("cuda: wait for the %s: %w (%v)", what, ErrTimeout, timeout)
		}
		// Spin briefly (a decode step is milliseconds), then sleep in growing steps up to 1 ms.
		switch {
		case i < 64:
			runtime.Gosched()
		case el < 10*time.Millisecond:
			time.Sleep(20 * time.Microsecond)
		default:
			time.Sleep(time.Millisecond)
		}
	}
}

// Query reports whether everything queued on the stream so far has finished, without waiting.
func (s *Stream) Query() (bool, error) {
	s.follows = false
	var done bool
	err := s.d.do(func() error {
		if err := call(drv.cuEventRecord, s.done, s.h); err != nil {
			return err
		}
		r := syscallN(drv.cuEventQuery, s.done)
		switch r {
		case cudaSuccess:
			done = true
		case cudaErrorNotReady:
		default:
			return resultError(drv.cuEventQuery.name, int(int32(r)))
		}
		return nil
	})
	return done, err
}

// CopyHtoD queues a copy of n bytes from pinned src at srcOff to dst at dstOff.
func (s *Stream) CopyHtoD(dst *Buffer, dstOff int64, src *HostBuffer, srcOff, n int64) error {
	if dstOff < 0 || n < 0 || dstOff+n > dst.Size || srcOff < 0 || srcOff+n > int64(len(src.Bytes)) {
		return fmt.Errorf("cuda: copy %d bytes host[%d:] → device[%d:] outside the buffers (%d, %d bytes)", n, srcOff, dstOff, len(src.Bytes), dst.Size)
	}
	s.follows = false
	return s.d.do(func() error {
		return call(drv.cuMemcpyHtoDAsync, uintptr(dst.At(dstOff)), uintptr(hostPtr(src))+uintptr(srcOff), uintptr(n), s.h)
	})
}

// CopyDtoH queues a copy of n bytes from src at srcOff to pinned dst at dstOff.
func (s *Stream) CopyDtoH(dst *HostBuffer, dstOff int64, src *Buffer, srcOff, n int64) error {
	if srcOff < 0 || n < 0 || srcOff+n > src.Size || dstOff < 0 || dstOff+n > int64(len(dst.Bytes)) {
		return fmt.Errorf("cuda: copy %d bytes device[%d:] → host[%d:] outside the buffers (%d, %d bytes)", n, srcOff, dstOff, src.Size, len(dst.Bytes))
	}
	s.follows = false
	return s.d.do(func() error {
		return call(drv.cuMemcpyDtoHAsync, uintptr(hostPtr(dst))+uintptr(dstOff), uintptr(src.At(srcOff)), uintptr(n), s.h)
	})
}

// CopyDtoD queues a device-to-device copy of n bytes.
func (s *Stream) CopyDtoD(dst *Buffer, dstOff int64, src *Buffer, srcOff, n int64) error {
	if srcOff < 0 || n < 0 || srcOff+n > src.Size || dstOff < 0 || dstOff+n > dst.Size {
		return fmt.Errorf("cuda: copy %d bytes device[%d:] → device[%d:] outside the buffers (%d, %d bytes)", n, srcOff, dstOff, src.Size, dst.Size)
	}
	s.follows = false
	return s.d.do(func() error {
		return call(drv.cuMemcpyDtoDAsync, uintptr(dst.At(dstOff)), uintptr(src.At(srcOff)), uintptr(n), s.h)
	})
}

// Fill32 queues setting words 4-byte words of dst from byte offset off (a multiple of 4) to
// value: how tests poison outputs (e.g. with a NaN pattern) before a kernel runs.
func (s *Stream) Fill32(dst *Buffer, off, words int64, value uint32) error {
	if off < 0 || off%4 != 0 || words < 0 || off+4*words > dst.Size {
		return fmt.Errorf("cuda: fill %d words at byte %d of a %d-byte buffer", words, off, dst.Size)
	}
	s.follows = false
	return s.d.do(func() error {
		return call(drv.cuMemsetD32Async, uintptr(dst.At(off)), uintptr(value), uintptr(words), s.h)
	})
}

// Event is a CUDA event with timing, for measuring device time between two points of a stream.
type Event struct {
	d *Device
	h uintptr
}

// NewEvent creates a timing event.
func (d *Device) NewEvent() (*Event, error) {
	e := &Event{d: d}
	if err := d.do(func() error { return call(drv.cuEventCreate, uintptr(unsafe.Pointer(&e.h)), 0) }); err != nil {
		return nil, fmt.Errorf("cuda: create an event: %w", err)
	}
	return e, nil
}

// Record queues the event on s.
func (e *Event) Record(s *Stream) error {
	s.follows = false
	return e.d.do(func() error { return call(drv.cuEventRecord, e.h, s.h) })
}

// Wait waits for the event's last record to complete, at most timeout (≤ 0: the device's).
func (e *Event) Wait(timeout time.Duration) error {
	if timeout <= 0 {
		timeout = e.d.Timeout
	}
	return e.d.waitEvent(e.h, timeout, "event")
}

// Since returns the device time from start's record to e's record, both completed (wait first).
func (e *Event) Since(start *Event) (time.Duration, error) {
	var ms float32
	err := e.d.do(func() error {
		return call(drv.cuEventElapsedTime, uintptr(unsafe.Pointer(&ms)), start.h, e.h)
	})
	if err != nil {
		return 0, fmt.Errorf("cuda: elapsed time: %w", err)
	}
	return time.Duration(math.Round(float64(ms) * 1e6)), nil
}

// Close destroys the event.
func (e *Event) Close() error {
	if e == nil || e.h == 0 {
		return nil
	}
	err := e.d.do(func() error { return call(drv.cuEventDestroy, e.h) })
	e.h = 0
	return err
}

// Graph is an instantiated CUDA graph: the work one capture recorded, replayed by Launch with
// one driver call.
type Graph struct {
	d     *Device
	graph uintptr // CUgraph
	exec  uintptr // CUgraphExec
	Nodes int     // operations captured
}

// Capture records the work record queues on s (kernel launches, copies, fills) into a graph
// instead of running it, and instantiates it. record runs on one locked OS thread (thread-local
// capture mode); it must queue work only on s and make no synchronous driver calls (Wait,
// Read, Write, Alloc fail or are refused during capture).
func (s *Stream) Capture(record func() error) (*Graph, error) {
	leave, err := s.d.enter()
	if err != nil {
		return nil, err
	}
	defer leave()
	if err := call(drv.cuStreamBeginCapture, s.h, captureModeThreadLc); err != nil {
		return nil, fmt.Errorf("cuda: begin capture: %w", err)
	}
	s.follows = false
	rerr := record()
	s.follows = false
	g := &Graph{d: s.d}
	eerr := call(drv.cuStreamEndCapture, s.h, uintptr(unsafe.Pointer(&g.graph)))
	if rerr != nil || eerr != nil {
		if g.graph != 0 {
			call(drv.cuGraphDestroy, g.graph)
		}
		if rerr != nil {
			return nil, fmt.Errorf("cuda: capture: %w", rerr)
		}
		return nil, fmt.Errorf("cuda: end capture: %w", eerr)
	}
	var n uintptr
	if err := call(drv.cuGraphGetNodes, g.graph, 0, uintptr(unsafe.Pointer(&n))); err == nil {
		g.Nodes = int(n)
	}
	if err := call(drv.cuGraphInstantiate, uintptr(unsafe.Pointer(&g.exec)), g.graph, 0); err != nil {
		call(drv.cuGraphDestroy, g.graph)
		return nil, fmt.Errorf("cuda: instantiate the graph: %w", err)
	}
	return g, nil
}

// Launch queues one replay of the graph on s.
func (g *Graph) Launch(s *Stream) error {
	s.follows = false
	return g.d.do(func() error { return call(drv.cuGraphLaunch, g.exec, s.h) })
}

// Close destroys the graph.
func (g *Graph) Close() error {
	if g == nil || g.exec == 0 {
		return nil
	}
	err := g.d.do(func() error {
		return errors.Join(call(drv.cuGraphExecDestroy, g.exec), call(drv.cuGraphDestroy, g.graph))
	})
	g.exec, g.graph = 0, 0
	return err
}
