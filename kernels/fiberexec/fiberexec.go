//go:build linux && amd64

package fiberexec

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
	"sort"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"lithos/kernels"
)

// The mapping: ArenaSize bytes of virtual memory (a memfd is sparse) at ArenaAddr, far from
// Go's heap hints (i<<40 | 0xc0<<32) and the loader's areas. Allocations are Align-byte
// aligned.
const (
	ArenaAddr = 0x3000_0000_0000
	ArenaSize = 64 << 30
	Align     = 256
)

// ErrNoCompiler is returned by Start when no clang++ is installed.
var ErrNoCompiler = errors.New("clang++ not found (the fiber runtime compiles the MSL as C++ with clang; apt-get install clang)")

// Options configure Start.
type Options struct {
	// KernelsDir is the kernels/ directory of the module (it holds fiber/fiber.h and
	// shim/metal_stdlib); tests pass a path relative to their package directory.
	KernelsDir string
	// Profile keeps the time spent per kernel; Stop prints it to stderr.
	Profile bool
	// TensorCore builds the source with LITHOS_BLM_MMA (prelude/metal.h): the BLM kernels take
	// the CUDA tensor-core path (its MMAs emulated by simdgroup shuffles), which also reads the
	// fragment-major layout (kernels.BLMFragmentMajor) — the CUDA driver's emulator with it
	// runs what the GPU runs.
	TensorCore bool
	// Metal builds the source with LITHOS_SHIM_METAL: ALIGNED16 (prelude/metal.h) is false, as
	// in the MSL the Metal device compiles, so every kernel takes the element-wise loads Metal
	// takes instead of the 16-byte loads the fiber runtime could take at aligned addresses (the
	// CUDA driver's emulator leaves it off: CUDA tests the address). The emulated Metal device
	// sets it.
	Metal bool
}

// Exec is the shared mapping, its allocator and the running fiber server. Safe for
// concurrent use (one launch at a time).
type Exec struct {
	mu      sync.Mutex
	fd      int
	file    *os.File
	next    uintptr               // bump pointer (offset in the arena)
	sizes   map[uintptr]uintptr   // live allocations: address → size
	free    map[uintptr][]uintptr // freed blocks by size
	used    uintptr               // bytes allocated and not freed
	kernels []kernels.Kernel
	cmd     *exec.Cmd
	in      *bufio.Writer
	inPipe  io.WriteCloser
	out     io.Reader
	// Launches counts the launches run so far.
	launches int
	failed   error
	profile  map[string]*profile
}

type profile struct {
	n int
	d time.Duration
}

// Start builds (or reuses, cached by the hash of its inputs under the user cache directory)
// the fiber server for the generated kernels, maps the arena and starts the server. Errors:
// ErrNoCompiler, a compile error (with clang's output), the arena not mappable at ArenaAddr
// (a second Exec in one process).
func Start(opt Options) (*Exec, error) {
	exe, err := build(opt)
	if err != nil {
		return nil, err
	}
	fd, err := unix.MemfdCreate("lithos-fiberexec", 0)
	if err != nil {
		return nil, fmt.Errorf("fiberexec: memfd: %w", err)
	}
	if err := unix.Ftruncate(fd, ArenaSize); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("fiberexec: memfd size: %w", err)
	}
	p, err := unix.MmapPtr(fd, 0, unsafe.Add(unsafe.Pointer(nil), ArenaAddr), ArenaSize,
		unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_FIXED_NOREPLACE)
	if err != nil || uintptr(p) != ArenaAddr {
		unix.Close(fd)
		return nil, fmt.Errorf("fiberexec: map the arena at %#x: %v (got %p)", ArenaAddr, err, p)
	}
	e := &Exec{fd: fd, file: os.NewFile(uintptr(fd), "lithos-fiberexec"), next: Align, sizes: map[uintptr]uintptr{},
		free: map[uintptr][]uintptr{}, kernels: kernels.Kernels()}
	if opt.Profile {
		e.profile = map[string]*profile{}
	}
	e.cmd = exec.Command(exe, fmt.Sprintf("%x", ArenaAddr), fmt.Sprint(ArenaSize))
	e.cmd.ExtraFiles = []*os.File{e.file}
	e.cmd.Stderr = os.Stderr
	if e.inPipe, err = e.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if e.out, err = e.cmd.StdoutPipe(); err != nil {
		return nil, err
	}
	if err := e.cmd.Start(); err != nil {
		return nil, fmt.Errorf("fiberexec: start the fiber server: %w", err)
	}
	e.in = bufio.NewWriter(e.inPipe)
	return e, nil
}

// Stop ends the fiber server (and prints the profile when one was kept). The arena stays
// mapped (its address is not reused).
func (e *Exec) Stop() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.inPipe.Close()
	e.cmd.Wait()
	if e.profile != nil {
		names := make([]string, 0, len(e.profile))
		for n := range e.profile {
			names = append(names, n)
		}
		sort.Slice(names, func(i, j int) bool { return e.profile[names[i]].d > e.profile[names[j]].d })
		for _, n := range names {
			fmt.Fprintf(os.Stderr, "fiberexec: %-28s %7d launches %10v\n", n, e.profile[n].n, e.profile[n].d.Round(time.Millisecond))
		}
	}
}

// Alloc reserves size bytes of the arena (rounded up to Align; contents undefined) and returns
// their address; false when the arena is full.
func (e *Exec) Alloc(size uintptr) (uintptr, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	size = (size + Align - 1) / Align * Align
	if l := e.free[size]; len(l) > 0 {
		p := l[len(l)-1]
		e.free[size] = l[:len(l)-1]
		e.sizes[p] = size
		e.used += size
		return p, true
	}
	if size > ArenaSize || e.next > ArenaSize-size {
		return 0, false
	}
	p := ArenaAddr + e.next
	e.next += size
	e.sizes[p] = size
	e.used += size
	return p, true
}

// Free releases the allocation at p; false when p is not the address of a live allocation.
func (e *Exec) Free(p uintptr) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	size, ok := e.sizes[p]
	if !ok {
		return false
	}
	delete(e.sizes, p)
	e.used -= size
	e.free[size] = append(e.free[size], p)
	return true
}

// Used returns the bytes allocated and not freed.
func (e *Exec) Used() uintptr {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.used
}

// Bytes returns the n bytes at p (arena memory, or memory the caller keeps alive).
func Bytes(p, n uintptr) []byte {
	return unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(nil), p)), n)
}

// InArena reports whether the n bytes at p lie in the arena.
func InArena(p, n uintptr) bool {
	return p >= ArenaAddr && p+n <= ArenaAddr+ArenaSize && p+n >= p
}

// Launches returns the number of launches run so far.
func (e *Exec) Launches() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.launches
}

// Launch runs kernel (its index in kernels.Kernels()) over grid threadgroups of threads
// threads, in thread-block clusters of cluster threadgroups along x (0 or 1: none; at most 8,
// dividing grid[0]), with args (ctl, the parameter record, the kernel's buffers: addresses in
// the arena) and returns when the grid is done. Errors: a bad kernel index or argument count, the server
// gone (a kernel fault or a fiber-runtime error ends it after a message on stderr naming the
// kernel, threadgroup and threads); after one, every later launch fails.
func (e *Exec) Launch(kernel int, grid [3]uint32, threads, cluster uint32, args []uint64) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.failed != nil {
		return e.failed
	}
	if kernel < 0 || kernel >= len(e.kernels) || len(args) > 32 {
		return fmt.Errorf("fiberexec: launch of kernel %d with %d arguments", kernel, len(args))
	}
	cluster = max(cluster, 1)
	if cluster > 8 || grid[0]%cluster != 0 {
		return fmt.Errorf("fiberexec: launch of %s in clusters of %d over a grid of %d threadgroups along x", e.kernels[kernel].Name, cluster, grid[0])
	}
	name := e.kernels[kernel].Name
	e.launches++
	if e.profile != nil {
		t0 := time.Now()
		defer func() {
			p := e.profile[name]
			if p == nil {
				p = &profile{}
				e.profile[name] = p
			}
			p.n++
			p.d += time.Since(t0)
		}()
	}
	var b [4]byte
	put := func(v uint32) { binary.LittleEndian.PutUint32(b[:], v); e.in.Write(b[:]) }
	put(uint32(kernel))
	put(grid[0])
	put(grid[1])
	put(grid[2])
	put(threads)
	put(cluster)
	put(uint32(len(args)))
	var w [8]byte
	for _, a := range args {
		binary.LittleEndian.PutUint64(w[:], a)
		e.in.Write(w[:])
	}
	if err := e.in.Flush(); err != nil {
		e.failed = fmt.Errorf("fiberexec: the fiber server is gone (%s): %w", name, err)
		return e.failed
	}
	if _, err := io.ReadFull(e.out, b[:]); err != nil {
		e.failed = fmt.Errorf("fiberexec: the fiber server ended during %s: %w", name, err)
		fmt.Fprintln(os.Stderr, e.failed)
		return e.failed
	}
	return nil
}

// Build compiles the generated MSL with kernels/fiber and a command loop into an executable,
// cached by the hash of its inputs under the user cache directory (lithos/fiberexec), and
// returns its path. kernelsDir is the module's kernels/ directory. Errors: ErrNoCompiler,
// clang's output.
func Build(kernelsDir string) (string, error) { return build(Options{KernelsDir: kernelsDir}) }

// build is Build with opt's TensorCore and Metal switches (Profile does not change the build).
func build(opt Options) (string, error) {
	kernelsDir, tensorCore := opt.KernelsDir, opt.TensorCore
	src := kernels.Source(kernels.Metal)
	if tensorCore {
		src = "#define LITHOS_BLM_MMA 1\n" + src
	}
	if opt.Metal {
		src = "#define LITHOS_SHIM_METAL 1\n" + src
	}
	var drvSrc strings.Builder
	drvSrc.WriteString(fastContext)
	drvSrc.WriteString("#include \"lithos.metal\"\n#include \"fiber.h\"\n")
	for i, k := range kernels.Kernels() {
		if k.MMAOnly && !tensorCore {
			// Not in this build's source (BLM_MMA 0): a launch of it ends the server.
			fmt.Fprintf(&drvSrc, "static void call_%d(void**, lithos_fiber::Ids) { std::fprintf(stderr, \"emulator: kernel %s is only in the tensor-core build\\n\"); std::_Exit(7); }\n", i, k.Name)
			continue
		}
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
	drvSrc.WriteString(serverMain)
	root, err := filepath.Abs(kernelsDir)
	if err != nil {
		return "", err
	}
	fiberH, err := os.ReadFile(filepath.Join(root, "fiber", "fiber.h"))
	if err != nil {
		return "", fmt.Errorf("fiberexec: %w", err)
	}
	shim, err := os.ReadFile(filepath.Join(root, "shim", "metal_stdlib"))
	if err != nil {
		return "", fmt.Errorf("fiberexec: %w", err)
	}
	h := sha256.New()
	fmt.Fprintf(h, "server v3: -O2 -fno-omit-frame-pointer -fconvergent-functions\n")
	for _, s := range []string{src, drvSrc.String(), string(fiberH), string(shim)} {
		fmt.Fprintf(h, "%d\n%s", len(s), s)
	}
	key := hex.EncodeToString(h.Sum(nil))[:24]
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "lithos", "fiberexec")
	exe := filepath.Join(dir, "server-"+key)
	if st, err := os.Stat(exe); err == nil && st.Mode()&0o111 != 0 {
		return exe, nil
	}
	cxx := ""
	for _, name := range []string{"clang++", "clang++-19", "clang++-16", "clang++-14"} {
		if p, err := exec.LookPath(name); err == nil {
			cxx = p
			break
		}
	}
	if cxx == "" {
		return "", ErrNoCompiler
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
	tmp := filepath.Join(work, "server")
	// Frame pointers and convergent functions: the fiber runtime matches barriers by call path
	// (kernels/fiber/fiber.h; the flags of kernels/fiber_harness_test.go).
	cmd := exec.Command(cxx, "-std=c++17", "-O2", "-g0", "-DLITHOS_SHIM_RUN", "-Wno-unused-function",
		"-fno-omit-frame-pointer", "-Xclang", "-fconvergent-functions", "-I", filepath.Join(root, "shim"), "-I", filepath.Join(root, "fiber"), "-I", work, cpp, "-o", tmp)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("fiberexec: %s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
	}
	if err := os.Rename(tmp, exe); err != nil {
		return "", err
	}
	return exe, nil
}

const fastContext = `
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

// serverMain is the fiber server's command loop: it maps the arena (fd 3) at the address
// given, then runs launches read from stdin — u32 kernel index, grid x, y, z, threads, cluster
// size, argument count, then the arguments as u64 — answering each with a u32 0 on stdout when
// the grid is done.
// A kernel fault or a fiber-runtime error ends the process with a message on stderr.
const serverMain = `
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
        uint32_t h[7];
        if (std::fread(h, 4, 7, stdin) != 7) return 0;
        if (h[0] >= nkernels || h[6] > 32) { std::fprintf(stderr, "emulator: bad launch header\n"); return 6; }
        uint64_t raw[32];
        if (std::fread(raw, 8, h[6], stdin) != h[6]) return 0;
        void* args[32];
        for (uint32_t i = 0; i < h[6]; i++) args[i] = (void*)raw[i];
        lithos_fiber::dispatch(table[h[0]].name, table[h[0]].fn, args, uint3{h[1], h[2], h[3]}, h[4], h[5]);
        uint32_t ok = 0;
        std::fwrite(&ok, 4, 1, stdout);
        std::fflush(stdout);
    }
}
`
