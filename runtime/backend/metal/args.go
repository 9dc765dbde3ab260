package metal

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"lithos/kernels"
	"lithos/runtime/backend/gpu"
)

// Buffer is a Metal buffer (MTLBuffer, shared storage) with its host view. Buffers come from
// Device.NewBuffer and Device.WrapNoCopy and belong to that device; Release or the device's
// Close releases them, after which Host must not be used.
type Buffer struct {
	id   uintptr // the MTLBuffer object; 0 once released
	dev  *Device // the device that made it
	Len  int     // bytes
	Host []byte  // the host view: Metal's memory (NewBuffer) or the caller's (WrapNoCopy)

	noCopy bool // Host is caller memory wrapped by newBufferWithBytesNoCopy
}

// Arg binds a buffer to one argument of a kernel: the kernel sees the buffer from byte Off
// on (Metal's setBuffer:offset:atIndex:). Off is in bytes, 0 ≤ Off < Buf.Len, and a multiple of
// ArgAlign for the argument.
type Arg struct {
	Buf *Buffer
	Off int // bytes from the start of Buf
}

// RecordAlign is the byte alignment Dispatch requires of the parameter record's offset
// (argument 1, a `constant` buffer). Apple's setBuffer:offset:atIndex: / setBufferOffset
// documentation leaves the minimum alignment of constant-space offsets to the GPU family
// (Metal feature set tables); 256 bytes is the macOS figure of the older setBuffer
// documentation and the largest any family asks, so records placed at multiples of 256 bytes
// are valid on every Mac.
const RecordAlign = 256

// vectorLoads lists, per op template, the buffers the kernel reads with 16-byte vector loads
// (uint4): their offsets must be multiples of 16 (Apple: device-space offsets are aligned to
// the data type the function reads, at most 16 bytes). blm: kernels/ops/blm.kern reads the
// packed weight units of w as uint4 at multiples of 16 bytes from the buffer's start.
// TestVectorLoadsListed fails when a kernel's generated MSL has a uint4 load and its op is not
// listed here.
var vectorLoads = map[string]map[string]int{
	"blm": {"w": 16},
}

// elemBytes is the size of a kernel buffer's element type (kernels.Buffer.Elem).
var elemBytes = map[string]int{"u8": 1, "u16": 2, "f32": 4, "u32": 4, "i32": 4, "u64": 8}

// ArgAlign returns the byte alignment of argument i's offset for kernel k: ctl (argument 0) 4,
// the parameter record (argument 1) RecordAlign, a buffer argument its element size, or 16 for
// buffers read with vector loads. Errors: i out of range, or an element type it does not know.
func ArgAlign(k kernels.Kernel, i int) (int, error) {
	switch {
	case i == 0:
		return 4, nil
	case i == 1:
		return RecordAlign, nil
	case i < 0 || i >= 2+len(k.Buffers):
		return 0, fmt.Errorf("metal: kernel %s has no argument %d (it takes %d)", k.Name, i, 2+len(k.Buffers))
	}
	b := k.Buffers[i-2]
	a, ok := elemBytes[b.Elem]
	if !ok {
		return 0, fmt.Errorf("metal: kernel %s, buffer %s: unknown element type %q", k.Name, b.Name, b.Elem)
	}
	if v := vectorLoads[k.Op][b.Name]; v > a {
		a = v
	}
	return a, nil
}

// argName names argument i of k in errors: "ctl", "params" or the buffer's name.
func argName(k kernels.Kernel, i int) string {
	switch {
	case i == 0:
		return "ctl"
	case i == 1:
		return "params"
	case i-2 < len(k.Buffers):
		return k.Buffers[i-2].Name
	}
	return fmt.Sprintf("#%d", i)
}

// checkDispatch validates one dispatch of kernel k on device d before anything is encoded:
// a positive timeout; every grid dimension ≥ 1; one argument per kernel argument; every
// argument a live buffer of d with 0 ≤ Off < Len, Off a multiple of ArgAlign; ctl at least one
// word and the parameter record at least kernels.Record's size from Off. Errors name the kernel
// and the argument; it never panics (a nil Buf is an error).
func checkDispatch(d *Device, k kernels.Kernel, grid [3]uint32, timeout time.Duration, args []Arg) error {
	if timeout <= 0 {
		return fmt.Errorf("metal: kernel %s: timeout %v: want > 0", k.Name, timeout)
	}
	if grid[0] == 0 || grid[1] == 0 || grid[2] == 0 {
		return fmt.Errorf("metal: kernel %s: grid %v has an empty dimension", k.Name, grid)
	}
	if len(args) != 2+len(k.Buffers) {
		return fmt.Errorf("metal: kernel %s takes %d arguments (ctl, params, %s), got %d", k.Name, 2+len(k.Buffers), bufferNames(k), len(args))
	}
	for i, a := range args {
		name := argName(k, i)
		if a.Buf == nil {
			return fmt.Errorf("metal: kernel %s, argument %d (%s): nil buffer", k.Name, i, name)
		}
		if a.Buf.id == 0 {
			return fmt.Errorf("metal: kernel %s, argument %d (%s): the buffer was released", k.Name, i, name)
		}
		if a.Buf.dev != d {
			return fmt.Errorf("metal: kernel %s, argument %d (%s): the buffer belongs to another device", k.Name, i, name)
		}
		if a.Off < 0 || a.Off >= a.Buf.Len {
			return fmt.Errorf("metal: kernel %s, argument %d (%s): offset %d bytes outside the %d-byte buffer", k.Name, i, name, a.Off, a.Buf.Len)
		}
		al, err := ArgAlign(k, i)
		if err != nil {
			return err
		}
		if a.Off%al != 0 {
			return fmt.Errorf("metal: kernel %s, argument %d (%s): offset %d bytes is not a multiple of %d", k.Name, i, name, a.Off, al)
		}
		need := al
		if i == 1 {
			need = len(kernels.Record(k.Params))
		} else if i >= 2 {
			need = elemBytes[k.Buffers[i-2].Elem]
		}
		if a.Buf.Len-a.Off < need {
			return fmt.Errorf("metal: kernel %s, argument %d (%s): %d bytes from offset %d, want at least %d", k.Name, i, name, a.Buf.Len-a.Off, a.Off, need)
		}
	}
	return nil
}

func bufferNames(k kernels.Kernel) string {
	var s []string
	for _, b := range k.Buffers {
		s = append(s, b.Name)
	}
	return strings.Join(s, ", ")
}

// ErrClosed is returned by a Device's methods after Close.
var ErrClosed = errors.New("metal: the device is closed")

// ErrTimeout wraps the error of a dispatch that did not complete within its timeout but did
// within the drain wait that follows it: the GPU is done with its buffers, the device is
// usable.
var ErrTimeout = errors.New("metal: command buffer timed out")

// ErrStuck wraps the error of a dispatch still running after its timeout and the drain wait:
// the GPU may still read and write its buffers, including caller memory wrapped by WrapNoCopy.
// The device is then broken: every later call returns this error, and the caller must keep
// every no-copy window mapped until Close returns nil (or for the life of the process).
// errors.Is(err, gpu.ErrDeviceBusy) is true for it, so the device-neutral runtime keeps its
// memory too (gpu.Session.Close, gpu.Target.Close).
var ErrStuck error = errStuck{}

type errStuck struct{}

func (errStuck) Error() string { return "metal: command buffer still running after its timeout" }

// Is reports ErrStuck as a gpu.ErrDeviceBusy.
func (errStuck) Is(target error) bool { return target == gpu.ErrDeviceBusy }
