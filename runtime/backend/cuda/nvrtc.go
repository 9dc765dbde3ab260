//go:build linux && amd64

package cuda

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"unsafe"

	"lithos/internal/atomicfile"

	"github.com/ebitengine/purego"
)

// NVRTC result codes (nvrtc.h).
const (
	nvrtcSuccess            = 0
	nvrtcErrorInvalidOption = 5
	nvrtcErrorCompilation   = 6
)

// nvrtcNames are the sonames tried, newest first; LITHOS_NVRTC names one explicitly.
var nvrtcNames = []string{"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"}

var nvrtc struct {
	once  sync.Once
	err   error
	path  string
	major int32
	minor int32

	nvrtcVersion, nvrtcCreateProgram, nvrtcDestroyProgram, nvrtcCompileProgram,
	nvrtcGetProgramLogSize, nvrtcGetProgramLog, nvrtcGetCUBINSize, nvrtcGetCUBIN,
	nvrtcGetPTXSize, nvrtcGetPTX, nvrtcGetErrorString fn
}

// loadNVRTC opens NVRTC once: $LITHOS_NVRTC, else the sonames of nvrtcNames on the loader
// path, else the same names under $CUDA_HOME/lib64 and /usr/local/cuda/lib64.
func loadNVRTC() error {
	nvrtc.once.Do(func() { nvrtc.err = openNVRTC() })
	return nvrtc.err
}

func openNVRTC() error {
	var cands []string
	if p := os.Getenv("LITHOS_NVRTC"); p != "" {
		cands = []string{p}
	} else {
		cands = append(cands, nvrtcNames...)
		for _, dir := range []string{os.Getenv("CUDA_HOME"), os.Getenv("CUDA_PATH"), "/usr/local/cuda"} {
			if dir == "" {
				continue
			}
			for _, n := range nvrtcNames {
				cands = append(cands, filepath.Join(dir, "lib64", n))
			}
		}
	}
	var h uintptr
	var errs []string
	for _, c := range cands {
		var err error
		if h, err = purego.Dlopen(c, purego.RTLD_NOW|purego.RTLD_GLOBAL); err == nil {
			nvrtc.path = c
			break
		}
		errs = append(errs, err.Error())
	}
	if h == 0 {
		return fmt.Errorf("cuda: NVRTC (libnvrtc.so.13 or .12) not found; install the CUDA runtime compiler or set LITHOS_NVRTC to its path (%s)", strings.Join(errs, "; "))
	}
	for _, e := range []struct {
		dst  *fn
		name string
	}{
		{&nvrtc.nvrtcVersion, "nvrtcVersion"}, {&nvrtc.nvrtcCreateProgram, "nvrtcCreateProgram"},
		{&nvrtc.nvrtcDestroyProgram, "nvrtcDestroyProgram"}, {&nvrtc.nvrtcCompileProgram, "nvrtcCompileProgram"},
		{&nvrtc.nvrtcGetProgramLogSize, "nvrtcGetProgramLogSize"}, {&nvrtc.nvrtcGetProgramLog, "nvrtcGetProgramLog"},
		{&nvrtc.nvrtcGetCUBINSize, "nvrtcGetCUBINSize"}, {&nvrtc.nvrtcGetCUBIN, "nvrtcGetCUBIN"},
		{&nvrtc.nvrtcGetPTXSize, "nvrtcGetPTXSize"}, {&nvrtc.nvrtcGetPTX, "nvrtcGetPTX"},
		{&nvrtc.nvrtcGetErrorString, "nvrtcGetErrorString"},
	} {
		a, err := purego.Dlsym(h, e.name)
		if err != nil || a == 0 {
			return fmt.Errorf("cuda: %s lacks %s (NVRTC 12.1 or newer is needed)", nvrtc.path, e.name)
		}
		*e.dst = fn{name: e.name, addr: a}
	}
	if err := nvrtcCall(nvrtc.nvrtcVersion, uintptr(unsafe.Pointer(&nvrtc.major)), uintptr(unsafe.Pointer(&nvrtc.minor))); err != nil {
		return err
	}
	// 12.1: PTX ISA 8.1, whose st.async the MMA-layout kernels' pushes use (prelude/cuda.h).
	if nvrtc.major < 12 || (nvrtc.major == 12 && nvrtc.minor < 1) {
		return fmt.Errorf("cuda: %s is NVRTC %d.%d; lithos needs 12.1 or newer (the kernels use PTX ISA 8.1)", nvrtc.path, nvrtc.major, nvrtc.minor)
	}
	return nil
}

// NVRTCError is a failed NVRTC call, with the compiler log for compilation errors.
type NVRTCError struct {
	Call string
	Code int
	Desc string // nvrtcGetErrorString
	Log  string // the program log (compilation errors), may be empty
}

// Error returns "call: description (code)" and the compiler log on the following lines.
func (e *NVRTCError) Error() string {
	s := fmt.Sprintf("%s: %s (%d)", e.Call, e.Desc, e.Code)
	if e.Log != "" {
		s += ":\n" + e.Log
	}
	return s
}

// nvrtcCall invokes an NVRTC entry point (uintptrescapes, as call).
//
//go:uintptrescapes
func nvrtcCall(f fn, args ...uintptr) error {
	r, _, _ := purego.SyscallN(f.addr, args...)
	if r == nvrtcSuccess {
		return nil
	}
	e := &NVRTCError{Call: f.name, Code: int(int32(r)), Desc: "unknown NVRTC error"}
	if nvrtc.nvrtcGetErrorString.addr != 0 {
		p, _, _ := purego.SyscallN(nvrtc.nvrtcGetErrorString.addr, r)
		if p != 0 {
			e.Desc = goString(*(**byte)(unsafe.Pointer(&p)))
		}
	}
	return e
}

// NVRTCVersion returns the loaded NVRTC's version (after a Compile or LoadNVRTC).
func NVRTCVersion() (major, minor int, err error) {
	if err := loadNVRTC(); err != nil {
		return 0, 0, err
	}
	return int(nvrtc.major), int(nvrtc.minor), nil
}

// Compiled is a compiled CUDA program: a CUBIN for the device's architecture (or PTX where
// NVRTC does not know that architecture and the driver compiles the PTX at load).
type Compiled struct {
	Image  []byte // CUBIN bytes, or NUL-terminated PTX text
	PTX    bool   // Image is PTX
	Log    string // the compiler's log (warnings)
	Cached bool   // read from the disk cache, not compiled
	Key    string // the content hash naming the cache entry
}

// compileCount counts NVRTC compilations in this process (the cache test reads it).
var compileCount struct {
	sync.Mutex
	n int
}

// CacheDir is where compiled modules are kept: os.UserCacheDir()/lithos/cuda, or
// $LITHOS_CUDA_CACHE. Empty when neither is available (no caching).
func CacheDir() string {
	if d := os.Getenv("LITHOS_CUDA_CACHE"); d != "" {
		return d
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(d, "lithos", "cuda")
}

// Compile compiles CUDA C++ source (name is the program's name in messages) for arch
// ("sm_90") with NVRTC, with options added to the defaults (--gpu-architecture=arch,
// -std=c++17, --use_fast_math is NOT set: the kernels' numerics are the CPU backend's). The
// result is cached on disk under CacheDir by the SHA-256 of (NVRTC version, arch, options,
// name, source); a cache entry is used when present and nonempty. Errors: NVRTC missing, a
// compilation error (the error carries the compiler log, which names the line).
func Compile(name, src, arch string, options ...string) (*Compiled, error) {
	if emu != nil {
		return emu.compile(name, src, arch, options)
	}
	if err := loadNVRTC(); err != nil {
		return nil, err
	}
	opts := append([]string{"--gpu-architecture=" + arch, "-std=c++17"}, options...)
	h := sha256.New()
	fmt.Fprintf(h, "lithos-cuda-module v1\nnvrtc %d.%d\n", nvrtc.major, nvrtc.minor)
	for _, o := range opts {
		fmt.Fprintf(h, "opt %q\n", o)
	}
	fmt.Fprintf(h, "name %q\n%d\n", name, len(src))
	h.Write([]byte(src))
	key := hex.EncodeToString(h.Sum(nil))
	dir := CacheDir()
	if dir != "" {
		for _, ext := range []string{".cubin", ".ptx"} {
			if b, err := os.ReadFile(filepath.Join(dir, key+ext)); err == nil && len(b) > 0 {
				return &Compiled{Image: b, PTX: ext == ".ptx", Cached: true, Key: key}, nil
			}
		}
	}
	c, err := nvrtcCompile(name, src, opts)
	if err != nil && strings.HasPrefix(arch, "sm_") {
		// An NVRTC older than the GPU does not know its sm_XX: say what is needed.
		var ne *NVRTCError
		if errors.As(err, &ne) && ne.Code == nvrtcErrorInvalidOption {
			return nil, fmt.Errorf("cuda: compile %s: NVRTC %d.%d does not support %s (install a newer CUDA toolkit's NVRTC): %w", name, nvrtc.major, nvrtc.minor, arch, err)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("cuda: compile %s for %s: %w", name, arch, err)
	}
	c.Key = key
	if dir != "" {
		ext := ".cubin"
		if c.PTX {
			ext = ".ptx"
		}
		// Best effort: a cache that cannot be written only costs a compile next time.
		if err := os.MkdirAll(dir, 0o755); err == nil {
			_ = atomicfile.Write(filepath.Join(dir, key+ext), c.Image, 0o644)
		}
	}
	return c, nil
}

// nvrtcCompile runs one NVRTC compilation; the image is the CUBIN when the architecture is a
// real one (sm_XX), the PTX otherwise (compute_XX).
func nvrtcCompile(name, src string, opts []string) (*Compiled, error) {
	compileCount.Lock()
	compileCount.n++
	compileCount.Unlock()
	csrc, cname := cString(src), cString(name)
	var prog uintptr
	if err := nvrtcCall(nvrtc.nvrtcCreateProgram, uintptr(unsafe.Pointer(&prog)), uintptr(unsafe.Pointer(&csrc[0])),
		uintptr(unsafe.Pointer(&cname[0])), 0, 0, 0); err != nil {
		return nil, err
	}
	defer func() { nvrtcCall(nvrtc.nvrtcDestroyProgram, uintptr(unsafe.Pointer(&prog))) }()
	// The option array holds pointers to Go memory: pin each string for the call.
	var pin runtime.Pinner
	defer pin.Unpin()
	cs := make([][]byte, len(opts))
	ptrs := make([]*byte, len(opts))
	for i, o := range opts {
		cs[i] = cString(o)
		ptrs[i] = &cs[i][0]
		pin.Pin(ptrs[i])
	}
	cerr := nvrtcCall(nvrtc.nvrtcCompileProgram, prog, uintptr(len(opts)), uintptr(unsafe.Pointer(&ptrs[0])))
	runtime.KeepAlive(csrc)
	runtime.KeepAlive(cname)
	var logSize uintptr
	var log string
	if nvrtcCall(nvrtc.nvrtcGetProgramLogSize, prog, uintptr(unsafe.Pointer(&logSize))) == nil && logSize > 1 {
		b := make([]byte, logSize)
		if nvrtcCall(nvrtc.nvrtcGetProgramLog, prog, uintptr(unsafe.Pointer(&b[0]))) == nil {
			log = strings.TrimRight(string(b[:logSize-1]), "\x00\n ")
		}
	}
	if cerr != nil {
		var ne *NVRTCError
		if errors.As(cerr, &ne) {
			ne.Log = log
		}
		return nil, cerr
	}
	c := &Compiled{Log: log}
	var size uintptr
	if err := nvrtcCall(nvrtc.nvrtcGetCUBINSize, prog, uintptr(unsafe.Pointer(&size))); err == nil && size > 0 {
		c.Image = make([]byte, size)
		if err := nvrtcCall(nvrtc.nvrtcGetCUBIN, prog, uintptr(unsafe.Pointer(&c.Image[0]))); err != nil {
			return nil, err
		}
		return c, nil
	}
	if err := nvrtcCall(nvrtc.nvrtcGetPTXSize, prog, uintptr(unsafe.Pointer(&size))); err != nil {
		return nil, err
	}
	if size == 0 {
		return nil, errors.New("nvrtc produced neither CUBIN nor PTX")
	}
	c.Image, c.PTX = make([]byte, size), true
	if err := nvrtcCall(nvrtc.nvrtcGetPTX, prog, uintptr(unsafe.Pointer(&c.Image[0]))); err != nil {
		return nil, err
	}
	return c, nil
}
