//go:build linux && amd64

package cuda

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"time"
	"unsafe"

	"lithos/kernels"

	"golang.org/x/sys/unix"
)

// The CPU emulator of the device: with LITHOS_CUDA_EMULATE=1 the tests of this package run
// against a stand-in for libcuda.so.1 and NVRTC instead of a GPU. It runs the same programs —
// the session code, its launch lists, graph capture and replay, the step-state and ring
// protocol — with the kernels of lithos/kernels executed by the fiber runtime of kernels/fiber
// (every thread of a threadgroup a fiber, barriers and simdgroup shuffles resolved
// cooperatively). The kernels it runs are the generated MSL (kernels.Source(kernels.Metal)),
// the same templates as the CUDA source with the Metal prelude, compiled as C++ by clang++
// against kernels/shim; what differs between the two targets is only what the preludes and the
// templates' own per-target lines say. Device memory is one shared mapping (a memfd) placed at
// the same address in this process and in the fiber process, so device pointers are host
// pointers in both: copies are memmoves here, kernels read and write the same bytes there, and
// mapped pinned memory (the token ring) is simply shared. Everything is synchronous: a launch
// returns when the fiber process has run the whole grid.
//
// It exists because the GPU is lent for minutes: the programs are debugged here, and the GPU
// run measures and confirms. Kernels outside lithos/kernels (the device-check and test
// modules) are not emulated (their loads fail), nor are timings (events report 0).

const (
	emuArenaAddr = 0x3000_0000_0000 // far from Go's heap hints (i<<40 | 0xc0<<32) and the loader's areas
	emuArenaSize = 64 << 30         // virtual; a memfd is sparse
	emuAlign     = 256
	emuImage     = "lithos-emulated-module"
)

// emulatorEnabled reports whether the tests run on the emulator.
func emulatorEnabled() bool { return os.Getenv("LITHOS_CUDA_EMULATE") == "1" }

type emuOp struct {
	kind        int // 0 launch, 1 copy, 2 fill32, 3 fill8
	kernel      int
	grid        [3]uint32
	threads     uint32
	args        []uint64
	dst, src, n uintptr
	value       uint32
}

type emuStream struct {
	capturing bool
	ops       []emuOp
}

type cpuEmulator struct {
	mu       sync.Mutex
	fd       int
	file     *os.File
	next     uintptr                // bump pointer (offset in the arena)
	sizes    map[uintptr]uintptr    // live allocations: address → size
	free     map[uintptr][]uintptr  // freed blocks by size
	used     uintptr                // bytes allocated and not freed
	streams  map[uintptr]*emuStream // by handle
	graphs   map[uintptr][]emuOp    // graphs and graph execs, by handle
	handles  uintptr
	kernels  []kernels.Kernel
	modules  map[uintptr]bool // handle → the lithos module
	cmd      *exec.Cmd
	in       *bufio.Writer
	inPipe   io.WriteCloser
	out      io.Reader
	launches int
	failed   error
	profile  map[string]*emuProfile // LITHOS_CUDA_EMULATE_PROFILE=1: time per kernel
}

type emuProfile struct {
	n int
	d time.Duration
}

// startEmulator maps the arena, builds (or reuses) the fiber server for the generated
// kernels, starts it and installs the emulator as the driver.
func startEmulator() (*cpuEmulator, error) {
	exe, err := buildEmulatorServer()
	if err != nil {
		return nil, err
	}
	fd, err := unix.MemfdCreate("lithos-cuda-emulator", 0)
	if err != nil {
		return nil, fmt.Errorf("memfd: %w", err)
	}
	if err := unix.Ftruncate(fd, emuArenaSize); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("memfd size: %w", err)
	}
	p, err := unix.MmapPtr(fd, 0, unsafe.Add(unsafe.Pointer(nil), emuArenaAddr), emuArenaSize,
		unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_FIXED_NOREPLACE)
	if err != nil || uintptr(p) != emuArenaAddr {
		unix.Close(fd)
		return nil, fmt.Errorf("map the arena at %#x: %v (got %p)", emuArenaAddr, err, p)
	}
	e := &cpuEmulator{fd: fd, file: os.NewFile(uintptr(fd), "lithos-cuda-emulator"), next: emuAlign, sizes: map[uintptr]uintptr{},
		free: map[uintptr][]uintptr{}, streams: map[uintptr]*emuStream{}, graphs: map[uintptr][]emuOp{},
		kernels: kernels.Kernels(), modules: map[uintptr]bool{}}
	if os.Getenv("LITHOS_CUDA_EMULATE_PROFILE") == "1" {
		e.profile = map[string]*emuProfile{}
	}
	e.cmd = exec.Command(exe, fmt.Sprintf("%x", emuArenaAddr), fmt.Sprint(emuArenaSize))
	e.cmd.ExtraFiles = []*os.File{e.file}
	e.cmd.Stderr = os.Stderr
	if e.inPipe, err = e.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if e.out, err = e.cmd.StdoutPipe(); err != nil {
		return nil, err
	}
	if err := e.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the fiber server: %w", err)
	}
	e.in = bufio.NewWriter(e.inPipe)
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
func (e *cpuEmulator) stop() {
	e.inPipe.Close()
	e.cmd.Wait()
	if e.profile != nil {
		names := make([]string, 0, len(e.profile))
		for n := range e.profile {
			names = append(names, n)
		}
		sort.Slice(names, func(i, j int) bool { return e.profile[names[i]].d > e.profile[names[j]].d })
		for _, n := range names {
			fmt.Fprintf(os.Stderr, "emulator: %-28s %7d launches %10v\n", n, e.profile[n].n, e.profile[n].d.Round(time.Millisecond))
		}
	}
}

// buildEmulatorServer compiles the generated MSL with kernels/fiber and a command loop into an
// executable, cached by the hash of its inputs under the user cache directory.
func buildEmulatorServer() (string, error) {
	src := kernels.Source(kernels.Metal)
	var drvSrc strings.Builder
	drvSrc.WriteString(emuFastContext)
	drvSrc.WriteString("#include \"lithos.metal\"\n#include \"fiber.h\"\n")
	for i, k := range kernels.Kernels() {
		fmt.Fprintf(&drvSrc, "static void call_%d(void** a, lithos_fiber::Ids ids) { %s((u32*)a[0], *(const %s*)a[1]", i, k.Name, k.ParamsType())
		for j, b := range k.Buffers {
			c := "const "
			if b.Write {
				c = ""
			}
			fmt.Fprintf(&drvSrc, ", (%s%s*)a[%d]", c, b.Elem, j+2)
		}
		drvSrc.WriteString(", ids.tg, ids.ngroups, ids.tid, ids.tid & 31u, ids.tid >> 5); }\n")
	}
	drvSrc.WriteString("static const lithos_fiber::KernelEntry table[] = {\n")
	for i, k := range kernels.Kernels() {
		fmt.Fprintf(&drvSrc, "    {\"%s\", call_%d},\n", k.Name, i)
	}
	fmt.Fprintf(&drvSrc, "    {nullptr, nullptr}};\nstatic const unsigned nkernels = %d;\n", len(kernels.Kernels()))
	drvSrc.WriteString(emuServerMain)
	root, err := filepath.Abs(filepath.Join("..", "..", "..", "kernels"))
	if err != nil {
		return "", err
	}
	fiberH, err := os.ReadFile(filepath.Join(root, "fiber", "fiber.h"))
	if err != nil {
		return "", err
	}
	shim, err := os.ReadFile(filepath.Join(root, "shim", "metal_stdlib"))
	if err != nil {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintf(h, "server v2: -O2 -fno-omit-frame-pointer -fconvergent-functions\n")
	for _, s := range []string{src, drvSrc.String(), string(fiberH), string(shim)} {
		fmt.Fprintf(h, "%d\n%s", len(s), s)
	}
	key := hex.EncodeToString(h.Sum(nil))[:24]
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "lithos", "cuda-emulator")
	exe := filepath.Join(dir, "server-"+key)
	if st, err := os.Stat(exe); err == nil && st.Mode()&0o111 != 0 {
		return exe, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	work, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	if err := os.WriteFile(filepath.Join(work, "lithos.metal"), []byte(src), 0o644); err != nil {
		return "", err
	}
	cpp := filepath.Join(work, "server.cpp")
	if err := os.WriteFile(cpp, []byte(drvSrc.String()), 0o644); err != nil {
		return "", err
	}
	cxx := ""
	for _, name := range []string{"clang++", "clang++-19", "clang++-16", "clang++-14"} {
		if p, err := exec.LookPath(name); err == nil {
			cxx = p
			break
		}
	}
	if cxx == "" {
		return "", errors.New("clang++ not found (the emulator compiles the MSL as C++ with clang)")
	}
	tmp := filepath.Join(work, "server")
	// Frame pointers and convergent functions: the fiber runtime matches barriers by call path
	// (kernels/fiber/fiber.h; the flags of kernels/fiber_harness_test.go).
	cmd := exec.Command(cxx, "-std=c++17", "-O2", "-g0", "-DLITHOS_SHIM_RUN", "-Wno-unused-function",
		"-fno-omit-frame-pointer", "-Xclang", "-fconvergent-functions", "-I", filepath.Join(root, "shim"), "-I", filepath.Join(root, "fiber"), "-I", work, cpp, "-o", tmp)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
	}
	if err := os.Rename(tmp, exe); err != nil {
		return "", err
	}
	return exe, nil
}

// emuFastContext replaces the ucontext calls of kernels/fiber/fiber.h (getcontext, makecontext,
// swapcontext, setcontext: each a signal-mask system call) by a user-space x86-64 switch of the
// callee-saved registers and the stack pointer, which makes the emulator several times faster.
// Only what fiber.h uses is provided: a context made by makecontext with one unsigned argument,
// entered by swapcontext, left by swapcontext or setcontext (its entry function never returns).
const emuFastContext = `
#include <ucontext.h>
#include <cstdint>
extern "C" void lithos_emu_switch(void** save_sp, void* new_sp);
extern "C" void lithos_emu_start();
asm(R"(
.text
.globl lithos_emu_switch
lithos_emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
.globl lithos_emu_start
lithos_emu_start:
    movq %r13, %rdi
    call *%r12
    ud2
)");
static inline void*& lithos_emu_sp(ucontext_t* c) { return *reinterpret_cast<void**>(&c->uc_mcontext.gregs[0]); }
static inline int lithos_emu_getcontext(ucontext_t*) { return 0; }
#define getcontext lithos_emu_getcontext
#define swapcontext(a, b) (lithos_emu_switch(&lithos_emu_sp(a), lithos_emu_sp(b)), 0)
#define setcontext(b) (lithos_emu_switch(&lithos_emu_dead_sp, lithos_emu_sp(b)), 0)
static void* lithos_emu_dead_sp;
static inline void lithos_emu_make(ucontext_t* c, void (*f)(), unsigned arg) {
    uintptr_t top = (reinterpret_cast<uintptr_t>(c->uc_stack.ss_sp) + c->uc_stack.ss_size) & ~uintptr_t(15);
    void** sp = reinterpret_cast<void**>(top - 72);
    sp[0] = nullptr;                                  // r15
    sp[1] = nullptr;                                  // r14
    sp[2] = reinterpret_cast<void*>(uintptr_t(arg));  // r13: the argument
    sp[3] = reinterpret_cast<void*>(f);               // r12: the function
    sp[4] = nullptr;                                  // rbx
    sp[5] = nullptr;                                  // rbp
    sp[6] = reinterpret_cast<void*>(&lithos_emu_start);
    lithos_emu_sp(c) = sp;
}
#define makecontext(c, f, n, arg) lithos_emu_make((c), (f), (unsigned)(arg))
`

// emuServerMain is the fiber server's command loop: it maps the arena (fd 3) at the address
// given, then runs launches read from stdin — u32 kernel index, grid x, y, z, threads, argument
// count, then the arguments as u64 — answering each with a u32 0 on stdout when the grid is done.
// A kernel fault or a fiber-runtime error ends the process with a message on stderr.
const emuServerMain = `
#include <sys/mman.h>
int main(int argc, char** argv) {
    if (argc != 3) return 2;
    void* want = (void*)std::strtoull(argv[1], nullptr, 16);
    size_t size = std::strtoull(argv[2], nullptr, 10);
    void* p = mmap(want, size, PROT_READ | PROT_WRITE, MAP_SHARED | 0x100000 /* MAP_FIXED_NOREPLACE */, 3, 0);
    if (p != want) { std::fprintf(stderr, "emulator: cannot map the arena at %p\n", want); return 5; }
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = lithos_fiber::on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    static char altstack[64 * 1024];
    stack_t ss{altstack, 0, sizeof altstack};
    sigaltstack(&ss, nullptr);
    sigaction(SIGSEGV, &sa, nullptr);
    sigaction(SIGBUS, &sa, nullptr);
    for (;;) {
        uint32_t h[6];
        if (std::fread(h, 4, 6, stdin) != 6) return 0;
        if (h[0] >= nkernels || h[5] > 32) { std::fprintf(stderr, "emulator: bad launch header\n"); return 6; }
        uint64_t raw[32];
        if (std::fread(raw, 8, h[5], stdin) != h[5]) return 0;
        void* args[32];
        for (uint32_t i = 0; i < h[5]; i++) args[i] = (void*)raw[i];
        lithos_fiber::dispatch(table[h[0]].name, table[h[0]].fn, args, uint3{h[1], h[2], h[3]}, h[4]);
        uint32_t ok = 0;
        std::fwrite(&ok, 4, 1, stdout);
        std::fflush(stdout);
    }
}
`

// at returns a pointer to a T at address p (arena memory, or Go memory the caller keeps alive).
func at[T any](p uintptr) *T { return (*T)(unsafe.Add(unsafe.Pointer(nil), p)) }

func (e *cpuEmulator) bytes(p, n uintptr) []byte {
	return unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(nil), p)), n)
}

func (e *cpuEmulator) inArena(p, n uintptr) bool {
	return p >= emuArenaAddr && p+n <= emuArenaAddr+emuArenaSize && p+n >= p
}

func (e *cpuEmulator) alloc(size uintptr) (uintptr, bool) {
	size = (size + emuAlign - 1) / emuAlign * emuAlign
	if l := e.free[size]; len(l) > 0 {
		p := l[len(l)-1]
		e.free[size] = l[:len(l)-1]
		e.sizes[p] = size
		e.used += size
		return p, true
	}
	if e.next+size > emuArenaSize {
		return 0, false
	}
	p := emuArenaAddr + e.next
	e.next += size
	e.sizes[p] = size
	e.used += size
	return p, true
}

func (e *cpuEmulator) release(p uintptr) bool {
	size, ok := e.sizes[p]
	if !ok {
		return false
	}
	delete(e.sizes, p)
	e.used -= size
	e.free[size] = append(e.free[size], p)
	return true
}

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
	if e.failed != nil {
		return 719 // CUDA_ERROR_LAUNCH_FAILED: the fiber server is gone
	}
	switch op.kind {
	case 0:
		e.launches++
		if e.profile != nil {
			t0 := time.Now()
			defer func() {
				p := e.profile[e.kernels[op.kernel].Name]
				if p == nil {
					p = &emuProfile{}
					e.profile[e.kernels[op.kernel].Name] = p
				}
				p.n++
				p.d += time.Since(t0)
			}()
		}
		var b [4]byte
		put := func(v uint32) { binary.LittleEndian.PutUint32(b[:], v); e.in.Write(b[:]) }
		put(uint32(op.kernel))
		put(op.grid[0])
		put(op.grid[1])
		put(op.grid[2])
		put(op.threads)
		put(uint32(len(op.args)))
		var w [8]byte
		for _, a := range op.args {
			binary.LittleEndian.PutUint64(w[:], a)
			e.in.Write(w[:])
		}
		if err := e.in.Flush(); err != nil {
			e.failed = err
			return 719
		}
		if _, err := io.ReadFull(e.out, b[:]); err != nil {
			e.failed = fmt.Errorf("the fiber server ended during %s: %w", e.kernels[op.kernel].Name, err)
			fmt.Fprintln(os.Stderr, "emulator:", e.failed)
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
		v := map[uintptr]int32{attrMaxThreadsPerBlock: 1024, attrMultiprocessorCount: 1, attrL2CacheSize: 1 << 20,
			attrUnifiedAddressing: 1, attrComputeMajor: 9, attrComputeMinor: 0, attrMaxSharedOptin: 227 << 10}[a[1]]
		*at[int32](a[0]) = v
	case "cuDeviceTotalMem":
		*at[uint64](a[0]) = emuArenaSize
	case "cuDevicePrimaryCtxRetain":
		*at[uintptr](a[0]) = 1
	case "cuMemGetInfo":
		*at[uint64](a[0]) = uint64(emuArenaSize - e.used)
		*at[uint64](a[1]) = emuArenaSize
	case "cuMemAlloc", "cuMemHostAlloc":
		p, ok := e.alloc(a[1])
		if !ok {
			return errOutOfMemory
		}
		*at[uintptr](a[0]) = p
	case "cuMemFree", "cuMemFreeHost":
		if !e.release(a[0]) {
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
		if ki < 0 || ki >= len(e.kernels) || a[7] != 0 || a[10] != 0 {
			return errInvalidValue
		}
		k := e.kernels[ki]
		if int(a[4]) != k.Threads || a[5] != 1 || a[6] != 1 {
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
// fiber server already runs; other programs are not emulated.
func (e *cpuEmulator) compile(name, src, arch string) (*Compiled, error) {
	if src != kernels.Source(kernels.CUDA) {
		return nil, fmt.Errorf("cuda emulator: program %s is not the lithos kernel module; only lithos/kernels is emulated", name)
	}
	return &Compiled{Image: append([]byte(emuImage), 0), Key: "emulated"}, nil
}
