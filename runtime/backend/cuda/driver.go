//go:build linux && amd64

package cuda

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// DriverLibrary is the shared object of the CUDA driver API, the one the NVIDIA driver
// installs (libcuda.so.1; the unversioned libcuda.so is a development link).
const DriverLibrary = "libcuda.so.1"

// MinDriverVersion is the oldest driver API version Open accepts, as cuDriverGetVersion
// reports it (1000·major + 10·minor): CUDA 12.0, the first with every call this package binds
// under its current name (cuGraphInstantiateWithFlags, cuStreamBeginCapture_v2, the _v2 memory
// calls) and cubins of NVRTC 12.
const MinDriverVersion = 12000

// ErrNoDriver is wrapped by the error Open returns when libcuda.so.1 cannot be loaded: no
// NVIDIA driver installed (or not on the loader's path).
var ErrNoDriver = errors.New("libcuda.so.1 not found: no NVIDIA driver is installed or on the loader path (LD_LIBRARY_PATH)")

// CUresult values this package acts on (cuda.h, enum cudaError_enum).
const (
	cudaSuccess              = 0
	cudaErrorOutOfMemory     = 2
	cudaErrorNoDevice        = 100
	cudaErrorNotReady        = 600
	cudaErrorInsufficientDrv = 35
)

// Error is a failed driver call: the call's name and its CUresult with the driver's name and
// description of it (cuGetErrorName, cuGetErrorString).
type Error struct {
	Call string // the driver entry point, e.g. "cuMemAlloc_v2"
	Code int    // the CUresult
	Name string // e.g. "CUDA_ERROR_OUT_OF_MEMORY"
	Desc string // e.g. "out of memory"
}

// Error returns "call: NAME (code): description".
func (e *Error) Error() string {
	return fmt.Sprintf("%s: %s (%d): %s", e.Call, e.Name, e.Code, e.Desc)
}

// IsOutOfMemory reports whether err is a driver call that failed with CUDA_ERROR_OUT_OF_MEMORY.
func IsOutOfMemory(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == cudaErrorOutOfMemory
}

// fn is one resolved entry point of a shared library.
type fn struct {
	name string
	addr uintptr
}

// drv holds the driver entry points; resolved once by loadDriver.
var drv struct {
	cuInit, cuDriverGetVersion, cuDeviceGetCount, cuDeviceGet, cuDeviceGetName,
	cuDeviceGetAttribute, cuDeviceTotalMem, cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRelease,
	cuCtxSetCurrent, cuMemGetInfo, cuMemAlloc, cuMemFree, cuMemcpyHtoDAsync, cuMemcpyDtoHAsync,
	cuMemcpyDtoDAsync, cuMemsetD32Async, cuMemsetD8Async, cuMemHostAlloc, cuMemFreeHost,
	cuMemHostGetDevicePointer, cuModuleLoadData, cuModuleUnload, cuModuleGetFunction,
	cuFuncSetAttribute, cuFuncGetAttribute, cuLaunchKernel, cuLaunchKernelEx, cuOccupancyMaxActiveClusters, cuStreamCreate, cuStreamDestroy,
	cuEventCreate, cuEventDestroy, cuEventRecord, cuEventQuery, cuEventElapsedTime,
	cuStreamBeginCapture, cuStreamEndCapture, cuGraphInstantiate, cuGraphLaunch,
	cuGraphExecDestroy, cuGraphDestroy, cuGraphGetNodes, cuGetErrorName, cuGetErrorString, cuModuleGetGlobal fn
}

var (
	driverOnce sync.Once
	driverErr  error
	driverLib  = DriverLibrary // replaced by a test to check the not-found error
)

// loadDriver opens the driver library and resolves every entry point, once per process.
func loadDriver() error {
	driverOnce.Do(func() { driverErr = loadDriverFrom(driverLib) })
	return driverErr
}

func loadDriverFrom(path string) error {
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		if path == DriverLibrary {
			return fmt.Errorf("cuda: %w (dlopen: %v)", ErrNoDriver, err)
		}
		return fmt.Errorf("cuda: %s not found: %w (dlopen: %v)", path, ErrNoDriver, err)
	}
	// Entry points: the _v2 names where the driver has them (the unsuffixed ones are the
	// legacy 32-bit ABIs, hub-and-go.md §B10); alternatives are tried in order.
	table := []struct {
		dst   *fn
		names []string
	}{
		{&drv.cuInit, []string{"cuInit"}},
		{&drv.cuDriverGetVersion, []string{"cuDriverGetVersion"}},
		{&drv.cuDeviceGetCount, []string{"cuDeviceGetCount"}},
		{&drv.cuDeviceGet, []string{"cuDeviceGet"}},
		{&drv.cuDeviceGetName, []string{"cuDeviceGetName"}},
		{&drv.cuDeviceGetAttribute, []string{"cuDeviceGetAttribute"}},
		{&drv.cuDeviceTotalMem, []string{"cuDeviceTotalMem_v2"}},
		{&drv.cuDevicePrimaryCtxRetain, []string{"cuDevicePrimaryCtxRetain"}},
		{&drv.cuDevicePrimaryCtxRelease, []string{"cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"}},
		{&drv.cuCtxSetCurrent, []string{"cuCtxSetCurrent"}},
		{&drv.cuMemGetInfo, []string{"cuMemGetInfo_v2"}},
		{&drv.cuMemAlloc, []string{"cuMemAlloc_v2"}},
		{&drv.cuMemFree, []string{"cuMemFree_v2"}},
		{&drv.cuMemcpyHtoDAsync, []string{"cuMemcpyHtoDAsync_v2"}},
		{&drv.cuMemcpyDtoHAsync, []string{"cuMemcpyDtoHAsync_v2"}},
		{&drv.cuMemcpyDtoDAsync, []string{"cuMemcpyDtoDAsync_v2"}},
		{&drv.cuMemsetD32Async, []string{"cuMemsetD32Async"}},
		{&drv.cuMemsetD8Async, []string{"cuMemsetD8Async"}},
		{&drv.cuMemHostAlloc, []string{"cuMemHostAlloc"}},
		{&drv.cuMemFreeHost, []string{"cuMemFreeHost"}},
		{&drv.cuMemHostGetDevicePointer, []string{"cuMemHostGetDevicePointer_v2"}},
		{&drv.cuModuleLoadData, []string{"cuModuleLoadData"}},
		{&drv.cuModuleUnload, []string{"cuModuleUnload"}},
		{&drv.cuModuleGetFunction, []string{"cuModuleGetFunction"}},
		{&drv.cuFuncSetAttribute, []string{"cuFuncSetAttribute"}},
		{&drv.cuFuncGetAttribute, []string{"cuFuncGetAttribute"}},
		{&drv.cuLaunchKernel, []string{"cuLaunchKernel"}},
		{&drv.cuStreamCreate, []string{"cuStreamCreate"}},
		{&drv.cuStreamDestroy, []string{"cuStreamDestroy_v2"}},
		{&drv.cuEventCreate, []string{"cuEventCreate"}},
		{&drv.cuEventDestroy, []string{"cuEventDestroy_v2"}},
		{&drv.cuEventRecord, []string{"cuEventRecord"}},
		{&drv.cuEventQuery, []string{"cuEventQuery"}},
		{&drv.cuEventElapsedTime, []string{"cuEventElapsedTime_v2", "cuEventElapsedTime"}},
		{&drv.cuStreamBeginCapture, []string{"cuStreamBeginCapture_v2"}},
		{&drv.cuStreamEndCapture, []string{"cuStreamEndCapture"}},
		{&drv.cuGraphInstantiate, []string{"cuGraphInstantiateWithFlags"}},
		{&drv.cuGraphLaunch, []string{"cuGraphLaunch"}},
		{&drv.cuGraphExecDestroy, []string{"cuGraphExecDestroy"}},
		{&drv.cuGraphDestroy, []string{"cuGraphDestroy"}},
		{&drv.cuGraphGetNodes, []string{"cuGraphGetNodes"}},
		{&drv.cuGetErrorName, []string{"cuGetErrorName"}},
		{&drv.cuGetErrorString, []string{"cuGetErrorString"}},
	}
	var missing []string
	for _, e := range table {
		for _, n := range e.names {
			if a, err := purego.Dlsym(h, n); err == nil && a != 0 {
				*e.dst = fn{name: n, addr: a}
				break
			}
		}
		if e.dst.addr == 0 {
			missing = append(missing, e.names[0])
		}
	}
	// cuLaunchKernelEx (thread-block clusters) is resolved apart: every driver MinDriverVersion
	// admits has it, but a missing symbol only turns clusters off (queue.MaxCluster 0: the BLM
	// kernels keep their cluster-free work split) instead of refusing the driver.
	if a, err := purego.Dlsym(h, "cuLaunchKernelEx"); err == nil && a != 0 {
		drv.cuLaunchKernelEx = fn{name: "cuLaunchKernelEx", addr: a}
	}
	// Likewise cuOccupancyMaxActiveClusters: without it the MMA-layout split assumes every
	// multiprocessor holds a threadgroup of a cluster (Function.MaxActiveClusters).
	if a, err := purego.Dlsym(h, "cuOccupancyMaxActiveClusters"); err == nil && a != 0 {
		drv.cuOccupancyMaxActiveClusters = fn{name: "cuOccupancyMaxActiveClusters", addr: a}
	}
	// cuModuleGetGlobal only serves the timeline diagnostic (timeline.go), so it is optional too.
	if a, err := purego.Dlsym(h, "cuModuleGetGlobal_v2"); err == nil && a != 0 {
		drv.cuModuleGetGlobal = fn{name: "cuModuleGetGlobal_v2", addr: a}
	}
	if len(missing) > 0 {
		return fmt.Errorf("cuda: %s lacks %s: the NVIDIA driver is too old (lithos needs CUDA %d.%d or newer)",
			path, strings.Join(missing, ", "), MinDriverVersion/1000, MinDriverVersion%1000/10)
	}
	return nil
}

// call invokes a driver entry point with integer/pointer arguments and turns a CUresult other
// than CUDA_SUCCESS into an *Error. Like purego.SyscallN it is uintptrescapes: a Go pointer
// converted to uintptr in the argument list is moved to the heap and kept alive for the call
// (without this, a stack that grows inside call would leave the driver writing to the old
// stack: seen as NVRTC programs handed over as NULL on the H200).
//
//go:uintptrescapes
func call(f fn, args ...uintptr) error {
	r := syscallN(f, args...)
	if r == cudaSuccess {
		return nil
	}
	return resultError(f.name, int(int32(r)))
}

// emulator serves the driver and NVRTC calls instead of libcuda.so.1 and libnvrtc in the
// tests that run the programs on a CPU (emulator_test.go: device memory in a shared mapping,
// kernels run by the fiber runtime of lithos/kernels). It is nil in every other build.
type emulator interface {
	// call runs the driver entry point name and returns its CUresult.
	call(name string, args []uintptr) uintptr
	// compile stands in for Compile.
	compile(name, src, arch string, options []string) (*Compiled, error)
	// tensorCore reports whether its BLM kernels take the tensor-core path (and so read the
	// fragment-major layout), as on the GPU.
	tensorCore() bool
}

// emu is the emulator a test installed, or nil.
var emu emulator

// syscallN calls a driver entry point (or the emulator's stand-in) and returns its CUresult.
//
//go:uintptrescapes
func syscallN(f fn, args ...uintptr) uintptr {
	if emu != nil {
		return emu.call(f.name, args)
	}
	r, _, _ := purego.SyscallN(f.addr, args...)
	return r
}

// resultError builds the *Error of a failed call.
func resultError(name string, code int) *Error {
	e := &Error{Call: name, Code: code, Name: fmt.Sprintf("CUresult %d", code), Desc: "unknown error"}
	if emu != nil {
		return e
	}
	var p *byte
	if drv.cuGetErrorName.addr != 0 {
		if r, _, _ := purego.SyscallN(drv.cuGetErrorName.addr, uintptr(code), uintptr(unsafe.Pointer(&p))); r == 0 && p != nil {
			e.Name = goString(p)
		}
	}
	p = nil
	if drv.cuGetErrorString.addr != 0 {
		if r, _, _ := purego.SyscallN(drv.cuGetErrorString.addr, uintptr(code), uintptr(unsafe.Pointer(&p))); r == 0 && p != nil {
			e.Desc = goString(p)
		}
	}
	return e
}

// goString copies a NUL-terminated C string (at most 4096 bytes are read).
func goString(p *byte) string {
	if p == nil {
		return ""
	}
	var b []byte
	for i := 0; i < 4096; i++ {
		c := *(*byte)(unsafe.Add(unsafe.Pointer(p), i))
		if c == 0 {
			break
		}
		b = append(b, c)
	}
	return string(b)
}

// cString returns s as a NUL-terminated byte slice; pass &b[0] and keep b alive.
func cString(s string) []byte { return append([]byte(s), 0) }

// envOr returns the environment variable k, or def when it is unset or empty.
func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
