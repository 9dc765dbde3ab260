//go:build linux && amd64

package cuda

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"time"
	"unsafe"
)

// MinComputeCapability is the oldest GPU architecture Open accepts, as major·10 + minor: 8.0
// (Ampere), the first with native BF16 arithmetic, which the kernels use for activations and
// the KV cache (ARCHITECTURE.md §3.4).
const MinComputeCapability = 80

// DefaultTimeout bounds every wait on the device unless the caller passes its own: a wait
// that passes it returns an error instead of blocking (a hung kernel is reported, not waited
// on forever).
const DefaultTimeout = 2 * time.Minute

// Device attributes queried (cuda.h, CUdevice_attribute).
const (
	attrMaxThreadsPerBlock  = 1
	attrClockRate           = 13 // kHz
	attrMultiprocessorCount = 16
	attrMemoryClockRate     = 36 // kHz
	attrMemoryBusWidth      = 37 // bits
	attrL2CacheSize         = 38 // bytes
	attrUnifiedAddressing   = 41
	attrComputeMajor        = 75
	attrComputeMinor        = 76
	attrMaxSharedOptin      = 97 // bytes per block, opt-in
	attrClusterLaunch       = 120
)

// Info is what Open learnt about the device.
type Info struct {
	Ordinal       int    // CUDA device ordinal
	Name          string // cuDeviceGetName, e.g. "NVIDIA H200"
	Major, Minor  int    // compute capability (9, 0 on the H200)
	TotalMemory   int64  // bytes of device memory (cuDeviceTotalMem)
	SMs           int    // multiprocessors
	L2Bytes       int    // L2 cache, bytes
	SharedOptin   int    // shared memory a block may opt into, bytes
	MaxThreads    int    // threads per block
	DriverVersion int    // cuDriverGetVersion: 1000·major + 10·minor (13000 = CUDA 13.0)
	ClusterLaunch bool   // CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH: thread-block clusters (sm_90+)
}

// LaunchesClusters reports whether kernels can be launched in thread-block clusters here:
// compute 9.0 or newer with CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH, a driver with cuLaunchKernelEx,
// and not the emulator unless it runs the tensor-core build (whose fiber runtime runs
// clusters; the plain Metal source has no cluster code).
func (d *Device) LaunchesClusters() bool {
	return d.Info.Major >= 9 && d.Info.ClusterLaunch && drv.cuLaunchKernelEx.addr != 0 && (emu == nil || emu.tensorCore())
}

// LaunchesOverlapped reports whether lithos's kernels are launched with programmatic dependent
// launch (Kernels.Overlap): compute 9.0 or newer (griddepcontrol, prelude GRID_WAIT), a driver
// of CUDA 12.3 or newer (OverlapDriverVersion) with cuLaunchKernelEx, and LITHOS_CUDA_OVERLAP
// not 0 (A/B runs; docs/performance.md §3.3k).
func (d *Device) LaunchesOverlapped() bool {
	return d.Info.Major >= 9 && d.Info.DriverVersion >= OverlapDriverVersion && drv.cuLaunchKernelEx.addr != 0 && overlapOn()
}

// OverlapDriverVersion is the oldest driver (cuDriverGetVersion) whose stream capture records
// programmatic dependent launches as graph edges (CUDA 12.3 added the edge data); older
// drivers run the kernels without overlap.
const OverlapDriverVersion = 12030

// overlapOn: LITHOS_CUDA_OVERLAP=0 turns programmatic dependent launch off.
func overlapOn() bool { return os.Getenv("LITHOS_CUDA_OVERLAP") != "0" }

// Arch returns the NVRTC architecture of the device, "sm_" + major + minor (sm_90 on the H200).
func (i Info) Arch() string { return "sm_" + strconv.Itoa(i.Major) + strconv.Itoa(i.Minor) }

// DriverString returns the driver API version as "13.0".
func (i Info) DriverString() string {
	return fmt.Sprintf("%d.%d", i.DriverVersion/1000, i.DriverVersion%1000/10)
}

// String returns a one-line description: name, compute capability, memory, SMs, L2, driver.
func (i Info) String() string {
	return fmt.Sprintf("%s (compute %d.%d, %.1f GB, %d SMs, %d MB L2, CUDA driver %s)", i.Name, i.Major, i.Minor,
		float64(i.TotalMemory)/1e9, i.SMs, i.L2Bytes>>20, i.DriverString())
}

// Device is one GPU's primary context. Its methods may be called from any goroutine: each
// group of driver calls runs on a locked OS thread with the context made current (CUDA
// contexts are per thread, hub-and-go.md §B10).
type Device struct {
	Info    Info
	Timeout time.Duration // bound of every wait; DefaultTimeout at Open

	dev uintptr // CUdevice
	ctx uintptr // CUcontext (primary)

	stageMu sync.Mutex
	stage   *HostBuffer // pinned staging for Read/Write
	stream  *Stream     // the stream of Read/Write
	closed  bool
}

// Open initialises the driver and opens GPU ordinal (0 is the first; CUDA_VISIBLE_DEVICES
// applies). Errors, each saying what is needed: libcuda.so.1 missing (ErrNoDriver), a driver
// older than MinDriverVersion, no GPU (or ordinal past the count), a GPU older than
// MinComputeCapability.
func Open(ordinal int) (*Device, error) {
	if err := loadDriver(); err != nil {
		return nil, err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := call(drv.cuInit, 0); err != nil {
		var e *Error
		if errors.As(err, &e) && e.Code == cudaErrorNoDevice {
			return nil, fmt.Errorf("cuda: no NVIDIA GPU is visible (CUDA_VISIBLE_DEVICES=%q): %w", envOr("CUDA_VISIBLE_DEVICES", ""), err)
		}
		if errors.As(err, &e) && e.Code == cudaErrorInsufficientDrv {
			return nil, fmt.Errorf("cuda: the NVIDIA kernel driver does not match libcuda.so.1: %w", err)
		}
		return nil, fmt.Errorf("cuda: initialise the driver: %w", err)
	}
	var ver int32
	if err := call(drv.cuDriverGetVersion, uintptr(unsafe.Pointer(&ver))); err != nil {
		return nil, fmt.Errorf("cuda: %w", err)
	}
	if ver < MinDriverVersion {
		return nil, fmt.Errorf("cuda: the NVIDIA driver supports CUDA %d.%d; lithos needs CUDA %d.%d or newer (update the driver)",
			ver/1000, ver%1000/10, MinDriverVersion/1000, MinDriverVersion%1000/10)
	}
	var count int32
	if err := call(drv.cuDeviceGetCount, uintptr(unsafe.Pointer(&count))); err != nil {
		return nil, fmt.Errorf("cuda: %w", err)
	}
	if count == 0 {
		return nil, errors.New("cuda: the NVIDIA driver is installed but sees no GPU")
	}
	if ordinal < 0 || ordinal >= int(count) {
		return nil, fmt.Errorf("cuda: GPU %d does not exist (%d visible)", ordinal, count)
	}
	d := &Device{Timeout: DefaultTimeout}
	d.Info.Ordinal, d.Info.DriverVersion = ordinal, int(ver)
	var dev int32
	if err := call(drv.cuDeviceGet, uintptr(unsafe.Pointer(&dev)), uintptr(ordinal)); err != nil {
		return nil, fmt.Errorf("cuda: GPU %d: %w", ordinal, err)
	}
	d.dev = uintptr(dev)
	name := make([]byte, 256)
	if err := call(drv.cuDeviceGetName, uintptr(unsafe.Pointer(&name[0])), uintptr(len(name)), d.dev); err != nil {
		return nil, fmt.Errorf("cuda: GPU %d: %w", ordinal, err)
	}
	d.Info.Name = goString(&name[0])
	attr := func(a int) (int, error) {
		var v int32
		err := call(drv.cuDeviceGetAttribute, uintptr(unsafe.Pointer(&v)), uintptr(a), d.dev)
		return int(v), err
	}
	for _, q := range []struct {
		a   int
		dst *int
	}{{attrComputeMajor, &d.Info.Major}, {attrComputeMinor, &d.Info.Minor}, {attrMultiprocessorCount, &d.Info.SMs},
		{attrL2CacheSize, &d.Info.L2Bytes}, {attrMaxSharedOptin, &d.Info.SharedOptin}, {attrMaxThreadsPerBlock, &d.Info.MaxThreads}} {
		v, err := attr(q.a)
		if err != nil {
			return nil, fmt.Errorf("cuda: GPU %d: attribute %d: %w", ordinal, q.a, err)
		}
		*q.dst = v
	}
	// An older driver may not know the attribute: no clusters then.
	if v, err := attr(attrClusterLaunch); err == nil && v != 0 {
		d.Info.ClusterLaunch = true
	}
	var total uint64
	if err := call(drv.cuDeviceTotalMem, uintptr(unsafe.Pointer(&total)), d.dev); err != nil {
		return nil, fmt.Errorf("cuda: GPU %d: %w", ordinal, err)
	}
	d.Info.TotalMemory = int64(total)
	if cc := d.Info.Major*10 + d.Info.Minor; cc < MinComputeCapability {
		return nil, fmt.Errorf("cuda: %s has compute capability %d.%d; lithos's kernels need %d.%d or newer (BF16 arithmetic)",
			d.Info.Name, d.Info.Major, d.Info.Minor, MinComputeCapability/10, MinComputeCapability%10)
	}
	if ua, err := attr(attrUnifiedAddressing); err != nil || ua == 0 {
		return nil, fmt.Errorf("cuda: %s lacks unified addressing, which the token ring in pinned host memory needs", d.Info.Name)
	}
	if err := call(drv.cuDevicePrimaryCtxRetain, uintptr(unsafe.Pointer(&d.ctx)), d.dev); err != nil {
		return nil, fmt.Errorf("cuda: %s: create the context: %w", d.Info.Name, err)
	}
	if err := call(drv.cuCtxSetCurrent, d.ctx); err != nil {
		call(drv.cuDevicePrimaryCtxRelease, d.dev)
		return nil, fmt.Errorf("cuda: %s: %w", d.Info.Name, err)
	}
	return d, nil
}

// enter locks the calling goroutine to its OS thread and makes the device's context current
// there; the returned function unlocks. Nested enters are allowed (LockOSThread counts).
func (d *Device) enter() (func(), error) {
	runtime.LockOSThread()
	if d.closed {
		runtime.UnlockOSThread()
		return nil, errors.New("cuda: device closed")
	}
	if err := call(drv.cuCtxSetCurrent, d.ctx); err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	return runtime.UnlockOSThread, nil
}

// do runs f with the context current on a locked thread.
func (d *Device) do(f func() error) error {
	leave, err := d.enter()
	if err != nil {
		return err
	}
	defer leave()
	return f()
}

// MemInfo returns the device's free and total memory in bytes (cuMemGetInfo).
func (d *Device) MemInfo() (free, total int64, err error) {
	err = d.do(func() error {
		var f, t uint64
		if err := call(drv.cuMemGetInfo, uintptr(unsafe.Pointer(&f)), uintptr(unsafe.Pointer(&t))); err != nil {
			return err
		}
		free, total = int64(f), int64(t)
		return nil
	})
	return free, total, err
}

// Close releases the staging buffer and the primary context. Buffers, modules, streams and
// graphs made on the device must be released first.
func (d *Device) Close() error {
	if d == nil || d.closed {
		return nil
	}
	var errs []error
	if d.stream != nil {
		errs = append(errs, d.stream.Close())
	}
	if d.stage != nil {
		errs = append(errs, d.stage.Free())
	}
	runtime.LockOSThread()
	errs = append(errs, call(drv.cuDevicePrimaryCtxRelease, d.dev))
	runtime.UnlockOSThread()
	d.closed = true
	return errors.Join(errs...)
}
