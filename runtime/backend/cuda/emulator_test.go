//go:build linux && amd64

package cuda

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"lithos/kernels"
	"lithos/kernels/fiberexec"
)

// The CPU emulator of the device: with LITHOS_CUDA_EMULATE=1 the tests of this package run
// against a stand-in for libcuda.so.1 and NVRTC instead of a GPU. It runs the same programs —
// the session code, its launch lists, graph capture and replay, the step-state and ring
// protocol — with the kernels of lithos/kernels executed by the fiber runtime of kernels/fiber
// (every thread of a threadgroup a fiber, barriers and simdgroup shuffles resolved
// cooperatively). The kernels it runs are the generated MSL (kernels.Source(kernels.Metal)),
// the same templates as the CUDA source with the Metal prelude, compiled as C++ by clang++
// against kernels/shim (kernels/fiberexec, shared with the emulated Metal device of
// runtime/backend/metal); what differs between the two targets is only what the preludes and the
// templates' own per-target lines say. Device memory is one shared mapping (a memfd) placed at
// the same address in this process and in the fiber process, so device pointers are host
// pointers in both: copies are memmoves here, kernels read and write the same bytes there, and
// mapped pinned memory (the token ring) is simply shared. Everything is synchronous: a launch
// returns when the fiber process has run the whole grid.
//
// It exists because the GPU is lent for minutes: the programs are debugged here, and the GPU
// run measures and confirms. Kernels outside lithos/kernels (the device-check and test
// modules) are not emulated (their loads fail), nor are timings (events report 0).

const emuImage = "lithos-emulated-module"

// emulatorEnabled reports whether the tests run on the emulator.
func emulatorEnabled() bool { return os.Getenv("LITHOS_CUDA_EMULATE") == "1" }

// emulateTensorCore: with LITHOS_CUDA_EMULATE_MMA=1 the emulator's kernels are built with
// LITHOS_BLM_MMA (kernels/fiberexec Options.TensorCore): the BLM products take the GPU's
// tensor-core path, MMAs emulated, and the target's matrices are read fragment-major as on
// the GPU (runtimeDevice.FragmentLayout).
func emulateTensorCore() bool { return os.Getenv("LITHOS_CUDA_EMULATE_MMA") == "1" }

func (e *cpuEmulator) tensorCore() bool { return emulateTensorCore() }

type emuOp struct {
	kind        int // 0 launch, 1 copy, 2 fill32, 3 fill8
	kernel      int
	grid        [3]uint32
	threads     uint32
	cluster     uint32 // thread-block cluster size along x (cuLaunchKernelEx); 0: none
	args        []uint64
	dst, src, n uintptr
	value       uint32
}

type emuStream struct {
	capturing bool
	ops       []emuOp
}

type cpuEmulator struct {
	mu      sync.Mutex
	x       *fiberexec.Exec        // the arena and the fiber server
	streams map[uintptr]*emuStream // by handle
	graphs  map[uintptr][]emuOp    // graphs and graph execs, by handle
	handles uintptr
	kernels []kernels.Kernel
	modules map[uintptr]bool // handle → the lithos module
	failed  bool             // a launch failed: the fiber server is gone
	// overlapped counts the launches with programmatic stream serialization (Kernels.Overlap).
	overlapped int
}

// startEmulator maps the arena, builds (or reuses) the fiber server for the generated
// kernels, starts it (kernels/fiberexec) and installs the emulator as the driver.
func startEmulator() (*cpuEmulator, error) {
	x, err := fiberexec.Start(fiberexec.Options{KernelsDir: filepath.Join("..", "..", "..", "kernels"),
		Profile: os.Getenv("LITHOS_CUDA_EMULATE_PROFILE") == "1", TensorCore: emulateTensorCore()})
	if err != nil {
		return nil, err
	}
	e := &cpuEmulator{x: x, streams: map[uintptr]*emuStream{}, graphs: map[uintptr][]emuOp{},
		kernels: kernels.Kernels(), modules: map[uintptr]bool{}}
	// The driver table: every entry point named by its field, served by the emulator.
	driverOnce.Do(func() {})
	v := reflect.TypeOf(drv)
	for i := 0; i < v.NumField(); i++ {
		f := v.Field(i)
		*(*fn)(unsafe.Add(unsafe.Pointer(&drv), f.Offset)) = fn{name: f.Name, addr: 1}
	}
	driverErr = nil
	emu = e
	return e, nil
}

// stop ends the fiber server (and prints the profile when one was kept).
func (e *cpuEmulator) stop() { e.x.Stop() }

// at returns a pointer to a T at address p (arena memory, or Go memory the caller keeps alive).
func at[T any](p uintptr) *T { return (*T)(unsafe.Add(unsafe.Pointer(nil), p)) }

func (e *cpuEmulator) bytes(p, n uintptr) []byte { return fiberexec.Bytes(p, n) }

func (e *cpuEmulator) inArena(p, n uintptr) bool { return fiberexec.InArena(p, n) }

func (e *cpuEmulator) handle() uintptr { e.handles++; return e.handles }

// enqueue runs op now, or records it when the stream is capturing.
func (e *cpuEmulator) enqueue(stream uintptr, op emuOp) uintptr {
	if s := e.streams[stream]; s != nil && s.capturing {
		s.ops = append(s.ops, op)
		return cudaSuccess
	}
	return e.exec(op)
}

func (e *cpuEmulator) exec(op emuOp) uintptr {
	if e.failed {
		return 719 // CUDA_ERROR_LAUNCH_FAILED: the fiber server is gone
	}
	switch op.kind {
	case 0:
		if err := e.x.Launch(op.kernel, op.grid, op.threads, op.cluster, op.args); err != nil {
			e.failed = true
			return 719
		}
	case 1:
		copy(e.bytes(op.dst, op.n), e.bytes(op.src, op.n))
	case 2:
		for i := uintptr(0); i < op.n; i++ {
			*at[uint32](op.dst + 4*i) = op.value
		}
	case 3:
		for i := uintptr(0); i < op.n; i++ {
			*at[uint8](op.dst + i) = uint8(op.value)
		}
	}
	return cudaSuccess
}

// call serves the driver entry points the package binds (driver.go), by field name.
func (e *cpuEmulator) call(name string, a []uintptr) uintptr {
	e.mu.Lock()
	defer e.mu.Unlock()
	const (
		errInvalidValue = 1
		errOutOfMemory  = 2
		errInvalidImage = 200
		errNotFound     = 500
		errNotSupported = 801
	)
	switch name {
	case "cuInit", "cuCtxSetCurrent", "cuDevicePrimaryCtxRelease", "cuModuleUnload", "cuFuncSetAttribute",
		"cuEventDestroy", "cuEventRecord", "cuEventQuery", "cuGraphExecDestroy", "cuGraphDestroy":
		return cudaSuccess
	case "cuDriverGetVersion":
		*at[int32](a[0]) = 13000
	case "cuDeviceGetCount":
		*at[int32](a[0]) = 1
	case "cuDeviceGet":
		*at[int32](a[0]) = 0
	case "cuDeviceGetName":
		n := copy(e.bytes(a[0], a[1]-1), "lithos CPU emulator (fiber runtime)")
		*at[byte](a[0] + uintptr(n)) = 0
	case "cuDeviceGetAttribute":
		// Eight multiprocessors, so that the MMA-layout split has clusters to spread over;
		// cluster launches in the tensor-core build, whose fiber runtime runs clusters.
		v := map[uintptr]int32{attrMaxThreadsPerBlock: 1024, attrMultiprocessorCount: 8, attrL2CacheSize: 1 << 20,
			attrUnifiedAddressing: 1, attrComputeMajor: 9, attrComputeMinor: 0, attrMaxSharedOptin: 227 << 10}[a[1]]
		if a[1] == attrClusterLaunch && e.tensorCore() {
			v = 1
		}
		*at[int32](a[0]) = v
	case "cuDeviceTotalMem":
		*at[uint64](a[0]) = fiberexec.ArenaSize
	case "cuDevicePrimaryCtxRetain":
		*at[uintptr](a[0]) = 1
	case "cuMemGetInfo":
		*at[uint64](a[0]) = uint64(fiberexec.ArenaSize - e.x.Used())
		*at[uint64](a[1]) = fiberexec.ArenaSize
	case "cuMemAlloc", "cuMemHostAlloc":
		p, ok := e.x.Alloc(a[1])
		if !ok {
			return errOutOfMemory
		}
		*at[uintptr](a[0]) = p
	case "cuMemFree", "cuMemFreeHost":
		if !e.x.Free(a[0]) {
			return errInvalidValue
		}
	case "cuMemHostGetDevicePointer":
		*at[uintptr](a[0]) = a[1]
	case "cuMemcpyHtoDAsync", "cuMemcpyDtoHAsync", "cuMemcpyDtoDAsync":
		if !e.inArena(a[0], a[2]) || !e.inArena(a[1], a[2]) {
			return errInvalidValue
		}
		return e.enqueue(a[3], emuOp{kind: 1, dst: a[0], src: a[1], n: a[2]})
	case "cuMemsetD32Async":
		if !e.inArena(a[0], 4*a[2]) {
			return errInvalidValue
		}
		return e.enqueue(a[3], emuOp{kind: 2, dst: a[0], value: uint32(a[1]), n: a[2]})
	case "cuMemsetD8Async":
		if !e.inArena(a[0], a[2]) {
			return errInvalidValue
		}
		return e.enqueue(a[3], emuOp{kind: 3, dst: a[0], value: uint32(a[1]), n: a[2]})
	case "cuModuleLoadData":
		if string(e.bytes(a[1], uintptr(len(emuImage)))) != emuImage {
			return errInvalidImage
		}
		h := e.handle()
		e.modules[h] = true
		*at[uintptr](a[0]) = h
	case "cuModuleGetFunction":
		var nb []byte
		for i := uintptr(0); i < 256; i++ {
			c := *at[byte](a[2] + i)
			if c == 0 {
				break
			}
			nb = append(nb, c)
		}
		for i, k := range e.kernels {
			if k.Name == string(nb) {
				*at[uintptr](a[0]) = uintptr(i + 1)
				return cudaSuccess
			}
		}
		return errNotFound
	case "cuFuncGetAttribute":
		*at[int32](a[0]) = map[uintptr]int32{funcMaxThreads: 1024, funcNumRegs: 32, funcLocalBytes: 0}[a[1]]
	case "cuLaunchKernel":
		ki := int(a[0]) - 1
		if ki < 0 || ki >= len(e.kernels) || a[10] != 0 {
			return errInvalidValue
		}
		k := e.kernels[ki]
		// Dynamic shared memory: exactly the kernel's (the CUDA path's BLM weight ring; the
		// emulated MSL keeps its threadgroup memory static).
		if int(a[4]) != k.Threads || a[5] != 1 || a[6] != 1 || int(a[7]) != k.Shared {
			return errInvalidValue
		}
		n := 2 + len(k.Buffers)
		op := emuOp{kind: 0, kernel: ki, grid: [3]uint32{uint32(a[1]), uint32(a[2]), uint32(a[3])}, threads: uint32(a[4])}
		for i := 0; i < n; i++ {
			v := *at[uint64](*at[uintptr](a[9] + 8*uintptr(i)))
			if !e.inArena(uintptr(v), 4) {
				return errInvalidValue // every lithos kernel argument is a device address
			}
			op.args = append(op.args, v)
		}
		return e.enqueue(a[8], op)
	case "cuLaunchKernelEx":
		// CUlaunchConfig (module.go launchConfig) with one or two attributes, each at most
		// once: the cluster dimension (clusters along x only, in the tensor-core build), the
		// programmatic stream serialization (value 1). Launches run one after the other here, so
		// an overlapped one simply runs after the kernel before it.
		cfg := at[launchConfig](a[0])
		ki := int(a[1]) - 1
		if ki < 0 || ki >= len(e.kernels) || a[3] != 0 || cfg.numAttrs < 1 || cfg.numAttrs > 2 {
			return errInvalidValue
		}
		var cluster uint32
		var overlap bool
		for i := uintptr(0); i < uintptr(cfg.numAttrs); i++ {
			attr := at[launchAttr](cfg.attrs + i*unsafe.Sizeof(launchAttr{}))
			switch {
			case attr.id == attrClusterDimension && cluster == 0 && e.tensorCore():
				if attr.val[1] != 1 || attr.val[2] != 1 || attr.val[0] == 0 || cfg.gridX%attr.val[0] != 0 {
					return errInvalidValue
				}
				cluster = attr.val[0]
			case attr.id == attrProgrammatic && !overlap && attr.val[0] == 1:
				overlap = true
			default:
				return errInvalidValue
			}
		}
		k := e.kernels[ki]
		if int(cfg.blockX) != k.Threads || cfg.blockY != 1 || cfg.blockZ != 1 || int(cfg.shared) != k.Shared {
			return errInvalidValue
		}
		if overlap {
			e.overlapped++
		}
		op := emuOp{kind: 0, kernel: ki, grid: [3]uint32{cfg.gridX, cfg.gridY, cfg.gridZ}, threads: cfg.blockX, cluster: cluster}
		for i := 0; i < 2+len(k.Buffers); i++ {
			v := *at[uint64](*at[uintptr](a[2] + 8*uintptr(i)))
			if !e.inArena(uintptr(v), 4) {
				return errInvalidValue
			}
			op.args = append(op.args, v)
		}
		return e.enqueue(cfg.stream, op)
	case "cuStreamCreate":
		h := e.handle()
		e.streams[h] = &emuStream{}
		*at[uintptr](a[0]) = h
	case "cuStreamDestroy":
		delete(e.streams, a[0])
	case "cuEventCreate":
		*at[uintptr](a[0]) = e.handle()
	case "cuEventElapsedTime":
		*at[float32](a[0]) = 0
	case "cuStreamBeginCapture":
		s := e.streams[a[0]]
		if s == nil || s.capturing {
			return errInvalidValue
		}
		s.capturing, s.ops = true, nil
	case "cuStreamEndCapture":
		s := e.streams[a[0]]
		if s == nil || !s.capturing {
			return errInvalidValue
		}
		h := e.handle()
		e.graphs[h] = s.ops
		s.capturing, s.ops = false, nil
		*at[uintptr](a[1]) = h
	case "cuGraphGetNodes":
		*at[uintptr](a[2]) = uintptr(len(e.graphs[a[0]]))
	case "cuGraphInstantiate":
		h := e.handle()
		e.graphs[h] = e.graphs[a[1]]
		*at[uintptr](a[0]) = h
	case "cuGraphLaunch":
		ops, ok := e.graphs[a[0]]
		if !ok {
			return errInvalidValue
		}
		for _, op := range ops {
			if r := e.enqueue(a[1], op); r != cudaSuccess {
				return r
			}
		}
	default:
		return errNotSupported
	}
	return cudaSuccess
}

// compile stands in for NVRTC: the lithos kernel module is the generated source, which the
// fiber server already runs as built; other programs are not emulated, and compile options
// (LITHOS_CUDA_DEFINES, LITHOS_CUDA_TIMELINE) are refused rather than ignored, so that a run
// with them does not pass as a test of what they select.
func (e *cpuEmulator) compile(name, src, arch string, options []string) (*Compiled, error) {
	if src != kernels.Source(kernels.CUDA) {
		return nil, fmt.Errorf("cuda emulator: program %s is not the lithos kernel module; only lithos/kernels is emulated", name)
	}
	if len(options) > 0 {
		return nil, fmt.Errorf("cuda emulator: program %s: compile options %q are not applied by the emulator (its kernels are built without them)", name, options)
	}
	return &Compiled{Image: append([]byte(emuImage), 0), Key: "emulated"}, nil
}

// TestEmulatorRefusesOptions: the emulator's stand-in for NVRTC takes the lithos module
// without options and refuses it with any (a define, the timeline), naming them, instead of
// running the default kernels as if they had been applied.
func TestEmulatorRefusesOptions(t *testing.T) {
	e := &cpuEmulator{}
	src := kernels.Source(kernels.CUDA)
	if c, err := e.compile("lithos_kernels.cu", src, "sm_90", nil); err != nil || c == nil {
		t.Fatalf("no options: %v", err)
	}
	for _, opts := range [][]string{{"-DBLMX_RX=0u"}, {"-DBLMX_SX=8", "-DLITHOS_TIMELINE=1"}} {
		_, err := e.compile("lithos_kernels.cu", src, "sm_90", opts)
		if err == nil || !strings.Contains(err.Error(), opts[len(opts)-1]) {
			t.Errorf("options %q: %v, want an error naming them", opts, err)
		}
	}
}
