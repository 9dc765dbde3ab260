//go:build darwin && arm64

package metal

import (
	"errors"
	"fmt"
	"sync"
	"time"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/ebitengine/purego/objc"

	"lithos/kernels"
)

// LanguageVersion is the MSL version the library is compiled with: MTLLanguageVersion3_1
// ((3 << 16) | 1, macOS 14). Set explicitly: a CGO_ENABLED=0 binary records an old SDK version
// and Metal would otherwise pick MSL 2.4 (golang/go#77917, #77944).
const LanguageVersion = 3<<16 | 1

// SIMDWidth is the simdgroup width every kernel assumes (shuffles over 32 lanes, lane = tid &
// 31; docs/metal.md §2). Open refuses a pipeline whose threadExecutionWidth differs.
const SIMDWidth = 32

// Device is one Metal device and the OS thread that owns it (owner). Every method is safe for
// concurrent use; calls run one at a time on the device thread.
type Device struct {
	*owner
	dev   objc.ID
	queue objc.ID
	lib   objc.ID
	pipes map[string]objc.ID
	bufs  map[*Buffer]struct{} // live buffers, released by Close
	cbs   ledger[objc.ID]      // every retained, committed command buffer not yet released (Close waits for them)

	// DrainWait bounds the second wait after a dispatch's timeout (DefaultDrainWait; set before
	// the first Dispatch). Close waits as long again, in all, for the command buffers still
	// held (stuck, or never waited for).
	DrainWait time.Duration

	ChipName         string // MTLDevice.name: "Apple M5 Max" (Name is the gpu.Device method)
	Family           int    // highest MTLGPUFamilyApple<N> supported (N), 0 if none of 7…10
	MaxBuffer        uint64 // maxBufferLength, bytes
	WorkingSet       uint64 // recommendedMaxWorkingSetSize, bytes
	UnifiedMemory    bool
	CompiledLanguage uint64 // the language version read back from the compile options
	GPUCores         int    // IORegistry gpu-core-count of the AGXAccelerator; 0 when unknown

	// Timeout bounds Queue.Wait when it is given none (DefaultTimeout).
	Timeout time.Duration
	// Barriers is the barrier rule of programs recorded from now on (BarrierSerial until a
	// Mac has shown BarrierHazards gives the same tokens: docs/metal.md §6).
	Barriers BarrierMode

	// space is the memory of the gpu.Device interface (space.go, shared with the emulated
	// device of the linux tests): the synthetic addresses, the MTLBuffer behind each id, the
	// host buffers, the bundle's weights set by MapWeights.
	space
}

var (
	loadOnce  sync.Once
	loadErr   error
	poolPush  func() uintptr
	poolPop   func(uintptr)
	createDev func() objc.ID

	selMu    sync.Mutex
	selCache = map[string]objc.SEL{}

	// keepMu/kept hold, for the life of the process, the no-copy host memory of devices closed
	// while a command buffer was still running on it (Close's error says so).
	keepMu sync.Mutex
	kept   [][]byte
)

// sel returns the selector of name, registered once (safe for concurrent use).
func sel(name string) objc.SEL {
	selMu.Lock()
	defer selMu.Unlock()
	s, ok := selCache[name]
	if !ok {
		s = objc.RegisterName(name)
		selCache[name] = s
	}
	return s
}

// load opens Metal.framework and libobjc once per process; later calls return the first
// result.
func load() error {
	loadOnce.Do(func() {
		mtl, err := purego.Dlopen("/System/Library/Frameworks/Metal.framework/Metal", purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err != nil {
			loadErr = fmt.Errorf("metal: load Metal.framework: %w", err)
			return
		}
		// MTLCreateSystemDefaultDevice needs CoreGraphics loaded; a failure shows as no device.
		purego.Dlopen("/System/Library/Frameworks/CoreGraphics.framework/CoreGraphics", purego.RTLD_NOW|purego.RTLD_GLOBAL)
		libObjC, err := purego.Dlopen("/usr/lib/libobjc.A.dylib", purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err != nil {
			loadErr = fmt.Errorf("metal: load libobjc: %w", err)
			return
		}
		purego.RegisterLibFunc(&poolPush, libObjC, "objc_autoreleasePoolPush")
		purego.RegisterLibFunc(&poolPop, libObjC, "objc_autoreleasePoolPop")
		purego.RegisterLibFunc(&createDev, mtl, "MTLCreateSystemDefaultDevice")
	})
	return loadErr
}

// autoreleased runs f inside an autorelease pool drained before it returns.
func autoreleased(f func()) {
	pool := poolPush()
	defer poolPop(pool)
	f()
}

// Open creates the system default device, its command queue and thread, and compiles the
// kernel library. Errors: Metal not loadable, no Metal device, a compile error (with Metal's
// message), a pipeline whose limits do not fit a kernel (named). On an error everything made so
// far is released and the thread stopped.
func Open() (*Device, error) {
	if err := load(); err != nil {
		return nil, err
	}
	d := &Device{owner: startOwner(autoreleased), pipes: map[string]objc.ID{}, bufs: map[*Buffer]struct{}{}, DrainWait: DefaultDrainWait,
		Timeout: DefaultTimeout}
	d.space = newSpace(d, 0)
	err := d.do(func() error {
		d.dev = createDev()
		if d.dev == 0 {
			return errors.New("metal: no Metal device (MTLCreateSystemDefaultDevice returned nil)")
		}
		d.ChipName = goString(objc.Send[*byte](d.dev.Send(sel("name")), sel("UTF8String")))
		for n := 10; n >= 7; n-- { // MTLGPUFamilyApple7 = 1007 …
			if objc.Send[bool](d.dev, sel("supportsFamily:"), 1000+n) {
				d.Family = n
				break
			}
		}
		d.MaxBuffer = objc.Send[uint64](d.dev, sel("maxBufferLength"))
		d.maxBuffer = d.MaxBuffer
		d.WorkingSet = objc.Send[uint64](d.dev, sel("recommendedMaxWorkingSetSize"))
		d.UnifiedMemory = objc.Send[bool](d.dev, sel("hasUnifiedMemory"))
		d.GPUCores, _ = gpuCoreCount() // 0: unknown (the profile then names no binned chip)
		d.queue = d.dev.Send(sel("newCommandQueue"))
		if d.queue == 0 {
			return errors.New("metal: newCommandQueue returned nil")
		}
		return d.compile(kernels.Source(kernels.Metal))
	})
	if err != nil {
		return nil, errors.Join(err, d.Close())
	}
	return d, nil
}

// compile builds the library from source with the language version set and fast math off, and
// a pipeline (supporting indirect command buffers) per kernel, each checked for the kernel's
// threadgroup size and a 32-wide SIMD execution width. Runs on the device thread; what it made
// before an error is released by Close.
func (d *Device) compile(src string) error {
	opts := objc.ID(objc.GetClass("MTLCompileOptions")).Send(sel("new"))
	defer opts.Send(sel("release"))
	opts.Send(sel("setLanguageVersion:"), uint64(LanguageVersion))
	opts.Send(sel("setFastMathEnabled:"), false)
	d.CompiledLanguage = objc.Send[uint64](opts, sel("languageVersion"))
	if d.CompiledLanguage != LanguageVersion {
		return fmt.Errorf("metal: compile options kept language version %#x, want %#x", d.CompiledLanguage, LanguageVersion)
	}
	var nserr objc.ID
	d.lib = d.dev.Send(sel("newLibraryWithSource:options:error:"), nsString(src), opts, unsafe.Pointer(&nserr))
	if d.lib == 0 {
		return fmt.Errorf("metal: compile the kernel library: %s", describe(nserr))
	}
	for _, k := range kernels.Kernels() {
		if k.MMAOnly {
			continue // the CUDA tensor-core path's kernels: not in the Metal source (kernels.Kernel.MMAOnly)
		}
		fn := d.lib.Send(sel("newFunctionWithName:"), nsString(k.Name))
		if fn == 0 {
			return fmt.Errorf("metal: kernel %s is missing from the library", k.Name)
		}
		desc := objc.ID(objc.GetClass("MTLComputePipelineDescriptor")).Send(sel("new"))
		desc.Send(sel("setComputeFunction:"), fn)
		desc.Send(sel("setSupportIndirectCommandBuffers:"), true)
		var perr objc.ID
		pipe := d.dev.Send(sel("newComputePipelineStateWithDescriptor:options:reflection:error:"), desc, uint64(0), uintptr(0), unsafe.Pointer(&perr))
		desc.Send(sel("release"))
		fn.Send(sel("release"))
		if pipe == 0 {
			return fmt.Errorf("metal: pipeline for kernel %s: %s", k.Name, describe(perr))
		}
		d.pipes[k.Name] = pipe // released by Close, also on the error paths below
		if max := objc.Send[uint64](pipe, sel("maxTotalThreadsPerThreadgroup")); max < uint64(k.Threads) {
			return fmt.Errorf("metal: kernel %s needs %d threads per threadgroup, its pipeline allows %d", k.Name, k.Threads, max)
		}
		if w := objc.Send[uint64](pipe, sel("threadExecutionWidth")); w != SIMDWidth {
			return fmt.Errorf("metal: kernel %s: pipeline threadExecutionWidth is %d, the kernels assume %d-lane simdgroups", k.Name, w, SIMDWidth)
		}
	}
	return nil
}

// WrapNoCopy wraps page-aligned host memory (a window of the mapped weights file, PlanWindows)
// as a shared buffer without copying. b must stay mapped until the buffer is released (Release,
// Close) — and, if a dispatch returned ErrStuck, for as long as Close says.
func (d *Device) WrapNoCopy(b []byte) (*Buffer, error) {
	if len(b) == 0 || len(b)%PageBytes != 0 || uintptr(unsafe.Pointer(&b[0]))%PageBytes != 0 {
		return nil, fmt.Errorf("metal: no-copy buffer of %d bytes: want a non-empty page-aligned range", len(b))
	}
	if len(b) > MaxWindowBytes {
		return nil, fmt.Errorf("metal: no-copy buffer of %d bytes: windows are < 4 GiB", len(b))
	}
	var buf *Buffer
	err := d.do(func() (err error) {
		buf, err = d.wrapNoCopy(b)
		return err
	})
	return buf, err
}

// wrapNoCopy is WrapNoCopy on the device thread (b already checked).
func (d *Device) wrapNoCopy(b []byte) (*Buffer, error) {
	id := d.dev.Send(sel("newBufferWithBytesNoCopy:length:options:deallocator:"), unsafe.Pointer(&b[0]), uint64(len(b)), uint64(0), uintptr(0))
	if id == 0 {
		return nil, fmt.Errorf("metal: newBufferWithBytesNoCopy of %d bytes failed", len(b))
	}
	buf := &Buffer{id: uintptr(id), dev: d, Len: len(b), Host: b, noCopy: true}
	d.bufs[buf] = struct{}{}
	return buf, nil
}

// NewBuffer allocates a shared buffer of n > 0 bytes (zeroed by Metal) with a host view.
func (d *Device) NewBuffer(n int) (*Buffer, error) {
	if n <= 0 {
		return nil, fmt.Errorf("metal: buffer of %d bytes: want > 0", n)
	}
	var buf *Buffer
	err := d.do(func() (err error) {
		buf, err = d.newBuf(n)
		return err
	})
	return buf, err
}

// newBuf is NewBuffer on the device thread (n > 0): shared storage (options 0 =
// MTLResourceStorageModeShared | MTLResourceCPUCacheModeDefaultCache), so the host view and
// the GPU see the same memory (unified memory).
func (d *Device) newBuf(n int) (*Buffer, error) {
	id := d.dev.Send(sel("newBufferWithLength:options:"), uint64(n), uint64(0))
	if id == 0 {
		return nil, fmt.Errorf("metal: allocate a buffer of %d bytes", n)
	}
	p := objc.Send[*byte](id, sel("contents"))
	buf := &Buffer{id: uintptr(id), dev: d, Len: n, Host: unsafe.Slice(p, n)}
	d.bufs[buf] = struct{}{}
	return buf, nil
}

// Release releases the buffer (a second Release does nothing). Command buffers keep what they
// use alive, but the caller must not unmap no-copy memory while a dispatch may use it.
func (b *Buffer) Release() error {
	if b == nil || b.dev == nil {
		return errors.New("metal: release of a nil buffer")
	}
	return b.dev.do(func() error {
		b.dev.release(b)
		return nil
	})
}

// release drops b; device thread only.
func (d *Device) release(b *Buffer) {
	if b.id != 0 {
		objc.ID(b.id).Send(sel("release"))
	}
	b.id, b.Host = 0, nil
	delete(d.bufs, b)
}

type mtlSize struct{ W, H, D uint64 }

// Dispatch runs one kernel over grid threadgroups (of the kernel's Threads) and waits for it, at
// most timeout. args are ctl, the parameter record, then the kernel's buffers
// (kernels.Kernel.Buffers), each a buffer of this device at a byte offset (checkDispatch: no
// nil buffer, 0 ≤ Off < Len, offsets aligned as ArgAlign says). Errors name the kernel: unknown,
// a bad argument, a command-buffer error, ErrTimeout (completed within DrainWait after the
// timeout: the device stays usable), ErrStuck (still running after the timeout and DrainWait:
// the device is broken, see ErrStuck).
func (d *Device) Dispatch(name string, grid [3]uint32, timeout time.Duration, args ...Arg) error {
	k, ok := kernels.Lookup(name)
	if !ok {
		return fmt.Errorf("metal: no kernel %s", name)
	}
	return d.do(func() error {
		pipe := d.pipes[name]
		if pipe == 0 {
			return fmt.Errorf("metal: no pipeline for kernel %s", name)
		}
		if err := checkDispatch(d, k, grid, timeout, args); err != nil {
			return err
		}
		cb := d.queue.Send(sel("commandBuffer"))
		if cb == 0 {
			return fmt.Errorf("metal: kernel %s: commandBuffer returned nil", name)
		}
		enc := cb.Send(sel("computeCommandEncoder"))
		enc.Send(sel("setComputePipelineState:"), pipe)
		for i, a := range args {
			enc.Send(sel("setBuffer:offset:atIndex:"), objc.ID(a.Buf.id), uint64(a.Off), uint64(i))
		}
		g := mtlSize{uint64(grid[0]), uint64(grid[1]), uint64(grid[2])}
		tpg := mtlSize{uint64(k.Threads), 1, 1}
		// MTLSize is 24 bytes: AAPCS64 passes it by reference (hub-and-go.md §B9). To be
		// confirmed on a Mac (docs/metal.md §6).
		enc.Send(sel("dispatchThreadgroups:threadsPerThreadgroup:"), unsafe.Pointer(&g), unsafe.Pointer(&tpg))
		enc.Send(sel("endEncoding"))
		cb.Send(sel("commit"))
		r := await(func() cbState { return cbStatus(cb) }, timeout, d.DrainWait, realClock{})
		switch {
		case r.state == cbFailed:
			return fmt.Errorf("metal: kernel %s: command buffer error: %s", name, describe(cb.Send(sel("error"))))
		case r.state == cbRunning:
			d.cbs.add(cb.Send(sel("retain")))
			return d.stall(r, timeout, "kernel "+name)
		case r.late:
			return fmt.Errorf("metal: kernel %s: completed after %v, past its %v timeout: %w", name, r.waited, timeout, ErrTimeout)
		}
		return nil
	})
}

// cbStatus polls a command buffer (MTLCommandBufferStatusCompleted 4, Error 5).
func cbStatus(cb objc.ID) cbState {
	switch objc.Send[uint64](cb, sel("status")) {
	case 4:
		return cbCompleted
	case 5:
		return cbFailed
	}
	return cbRunning
}

// Close releases the pipelines, library, queue, buffers and device and stops the device's
// thread (unlocking it). After Close every method returns ErrClosed; a second Close returns
// nil. Close first waits up to DrainWait in all for every command buffer the device still
// holds (ledger.drain: stuck ones on a broken device, any queue's not yet waited for, those
// of a wait the device broke or closed during, those left by a closed queue): if they have
// all ended, it releases them and ends as usual; if one is still running, it releases
// nothing (a command buffer is not documented to retain every resource it uses: the ICBs, the
// buffers declared with useResource:usage:), keeps the no-copy host memory referenced for the
// life of the process and returns an error wrapping ErrStuck: the caller must not unmap those
// windows.
func (d *Device) Close() error {
	return d.close(func() error {
		if d.cbs.drain(newWaiter(d.DrainWait, 0, realClock{}), cbStatus, func(cb objc.ID) { cb.Send(sel("release")) }) {
			keepMu.Lock()
			for b := range d.bufs {
				if b.noCopy {
					kept = append(kept, b.Host)
				}
			}
			keepMu.Unlock()
			return fmt.Errorf("metal: close: a command buffer is still running: %w; the device's Metal objects are kept, and its no-copy memory must stay mapped for the life of the process", ErrStuck)
		}
		for b := range d.bufs {
			d.release(b)
		}
		for name, p := range d.pipes {
			p.Send(sel("release"))
			delete(d.pipes, name)
		}
		for _, id := range []*objc.ID{&d.lib, &d.queue, &d.dev} {
			if *id != 0 {
				id.Send(sel("release"))
				*id = 0
			}
		}
		return nil
	})
}

func nsString(s string) objc.ID {
	b := append([]byte(s), 0)
	return objc.ID(objc.GetClass("NSString")).Send(sel("stringWithUTF8String:"), unsafe.Pointer(&b[0]))
}

func describe(nserr objc.ID) string {
	if nserr == 0 {
		return "no error object"
	}
	return goString(objc.Send[*byte](nserr.Send(sel("localizedDescription")), sel("UTF8String")))
}

func goString(p *byte) string {
	if p == nil {
		return ""
	}
	n := 0
	for *(*byte)(unsafe.Add(unsafe.Pointer(p), n)) != 0 {
		n++
	}
	return string(unsafe.Slice(p, n))
}
