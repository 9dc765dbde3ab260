//go:build darwin && arm64

package metal

import (
	"errors"
	"fmt"
	"runtime"
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

// Device is one Metal device and the OS thread that owns it.
type Device struct {
	calls chan func()
	dev   objc.ID
	queue objc.ID
	lib   objc.ID
	pipes map[string]objc.ID

	Name             string
	Family           int    // highest MTLGPUFamilyApple<N> supported (N), 0 if none of 7…10
	MaxBuffer        uint64 // maxBufferLength, bytes
	WorkingSet       uint64 // recommendedMaxWorkingSetSize, bytes
	UnifiedMemory    bool
	CompiledLanguage uint64 // the language version read back from the compile options
}

var (
	libObjC   uintptr
	poolPush  func() uintptr
	poolPop   func(uintptr)
	createDev func() objc.ID
	selCache  = map[string]objc.SEL{}
)

func sel(name string) objc.SEL {
	s, ok := selCache[name]
	if !ok {
		s = objc.RegisterName(name)
		selCache[name] = s
	}
	return s
}

func load() error {
	if createDev != nil {
		return nil
	}
	mtl, err := purego.Dlopen("/System/Library/Frameworks/Metal.framework/Metal", purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return fmt.Errorf("metal: load Metal.framework: %w", err)
	}
	purego.Dlopen("/System/Library/Frameworks/CoreGraphics.framework/CoreGraphics", purego.RTLD_NOW|purego.RTLD_GLOBAL) // MTLCreateSystemDefaultDevice needs it loaded
	if libObjC, err = purego.Dlopen("/usr/lib/libobjc.A.dylib", purego.RTLD_NOW|purego.RTLD_GLOBAL); err != nil {
		return fmt.Errorf("metal: load libobjc: %w", err)
	}
	purego.RegisterLibFunc(&poolPush, libObjC, "objc_autoreleasePoolPush")
	purego.RegisterLibFunc(&poolPop, libObjC, "objc_autoreleasePoolPop")
	purego.RegisterLibFunc(&createDev, mtl, "MTLCreateSystemDefaultDevice")
	return nil
}

// do runs f on the device's OS thread inside an autorelease pool drained before do returns.
func (d *Device) do(f func() error) error {
	done := make(chan error, 1)
	d.calls <- func() {
		pool := poolPush()
		defer poolPop(pool)
		done <- f()
	}
	return <-done
}

// Open creates the system default device, its command queue and thread, and compiles the
// kernel library. Errors: no Metal device, a compile error (with Metal's message).
func Open() (*Device, error) {
	d := &Device{calls: make(chan func()), pipes: map[string]objc.ID{}}
	ready := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		if err := load(); err != nil {
			ready <- err
			return
		}
		ready <- nil
		for f := range d.calls {
			f()
		}
	}()
	if err := <-ready; err != nil {
		return nil, err
	}
	err := d.do(func() error {
		d.dev = createDev()
		if d.dev == 0 {
			return errors.New("metal: no Metal device (MTLCreateSystemDefaultDevice returned nil)")
		}
		d.Name = goString(objc.Send[*byte](d.dev.Send(sel("name")), sel("UTF8String")))
		for n := 10; n >= 7; n-- { // MTLGPUFamilyApple7 = 1007 …
			if objc.Send[bool](d.dev, sel("supportsFamily:"), 1000+n) {
				d.Family = n
				break
			}
		}
		d.MaxBuffer = objc.Send[uint64](d.dev, sel("maxBufferLength"))
		d.WorkingSet = objc.Send[uint64](d.dev, sel("recommendedMaxWorkingSetSize"))
		d.UnifiedMemory = objc.Send[bool](d.dev, sel("hasUnifiedMemory"))
		d.queue = d.dev.Send(sel("newCommandQueue"))
		return d.compile(kernels.Source(kernels.Metal))
	})
	if err != nil {
		return nil, err
	}
	return d, nil
}

// compile builds the library from source with the language version set and fast math off, and
// a pipeline (supporting indirect command buffers) per kernel. Runs on the device thread.
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
		if max := objc.Send[uint64](pipe, sel("maxTotalThreadsPerThreadgroup")); max < uint64(k.Threads) {
			return fmt.Errorf("metal: kernel %s needs %d threads per threadgroup, its pipeline allows %d", k.Name, k.Threads, max)
		}
		d.pipes[k.Name] = pipe
	}
	return nil
}

// Buffer is a Metal buffer with its host view.
type Buffer struct {
	id   objc.ID
	Len  int
	Host []byte
}

// WrapNoCopy wraps page-aligned host memory (a window of the mapped weights file, PlanWindows)
// as a shared buffer without copying. b must stay mapped while the buffer is used.
func (d *Device) WrapNoCopy(b []byte) (*Buffer, error) {
	if len(b) == 0 || len(b)%PageBytes != 0 || uintptr(unsafe.Pointer(&b[0]))%PageBytes != 0 {
		return nil, fmt.Errorf("metal: no-copy buffer of %d bytes: want a non-empty page-aligned range", len(b))
	}
	if len(b) > MaxWindowBytes {
		return nil, fmt.Errorf("metal: no-copy buffer of %d bytes: windows are < 4 GiB", len(b))
	}
	var buf *Buffer
	err := d.do(func() error {
		id := d.dev.Send(sel("newBufferWithBytesNoCopy:length:options:deallocator:"), unsafe.Pointer(&b[0]), uint64(len(b)), uint64(0), uintptr(0))
		if id == 0 {
			return fmt.Errorf("metal: newBufferWithBytesNoCopy of %d bytes failed", len(b))
		}
		buf = &Buffer{id: id, Len: len(b), Host: b}
		return nil
	})
	return buf, err
}

// NewBuffer allocates a shared buffer of n bytes (zeroed by Metal) with a host view.
func (d *Device) NewBuffer(n int) (*Buffer, error) {
	var buf *Buffer
	err := d.do(func() error {
		id := d.dev.Send(sel("newBufferWithLength:options:"), uint64(n), uint64(0))
		if id == 0 {
			return fmt.Errorf("metal: allocate a buffer of %d bytes", n)
		}
		p := objc.Send[*byte](id, sel("contents"))
		buf = &Buffer{id: id, Len: n, Host: unsafe.Slice(p, n)}
		return nil
	})
	return buf, err
}

type mtlSize struct{ W, H, D uint64 }

// Arg is a buffer bound at an offset.
type Arg struct {
	Buf *Buffer
	Off int
}

// Dispatch runs one kernel over grid threadgroups (of the kernel's Threads) and waits for it, at
// most timeout. args are ctl, the parameter record, then the kernel's buffers (kernels.Kernel).
// Errors name the kernel: unknown, a command-buffer error, a timeout.
func (d *Device) Dispatch(name string, grid [3]uint32, timeout time.Duration, args ...Arg) error {
	k, ok := kernels.Lookup(name)
	if !ok || d.pipes[name] == 0 {
		return fmt.Errorf("metal: no kernel %s", name)
	}
	if len(args) != 2+len(k.Buffers) {
		return fmt.Errorf("metal: kernel %s takes %d buffers, got %d", name, 2+len(k.Buffers), len(args))
	}
	return d.do(func() error {
		cb := d.queue.Send(sel("commandBuffer"))
		enc := cb.Send(sel("computeCommandEncoder"))
		enc.Send(sel("setComputePipelineState:"), d.pipes[name])
		for i, a := range args {
			enc.Send(sel("setBuffer:offset:atIndex:"), a.Buf.id, uint64(a.Off), uint64(i))
		}
		g := mtlSize{uint64(grid[0]), uint64(grid[1]), uint64(grid[2])}
		tpg := mtlSize{uint64(k.Threads), 1, 1}
		// MTLSize is 24 bytes: AAPCS64 passes it by reference (hub-and-go.md §B9). To be
		// confirmed on a Mac (docs/metal.md §6).
		enc.Send(sel("dispatchThreadgroups:threadsPerThreadgroup:"), unsafe.Pointer(&g), unsafe.Pointer(&tpg))
		enc.Send(sel("endEncoding"))
		cb.Send(sel("commit"))
		deadline := time.Now().Add(timeout)
		for {
			st := objc.Send[uint64](cb, sel("status")) // MTLCommandBufferStatusCompleted 4, Error 5
			if st == 4 {
				return nil
			}
			if st == 5 {
				return fmt.Errorf("metal: kernel %s: command buffer error: %s", name, describe(cb.Send(sel("error"))))
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("metal: kernel %s: not complete after %v", name, timeout)
			}
			time.Sleep(50 * time.Microsecond)
		}
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
