//go:build linux && amd64

package cuda

import (
	"fmt"
	"math"
	"runtime"
	"unsafe"
)

// Module is a loaded CUDA module (cuModuleLoadData).
type Module struct {
	d    *Device
	h    uintptr
	Name string
}

// Function attributes (cuda.h CUfunction_attribute).
const (
	funcMaxThreads       = 0
	funcLocalBytes       = 3
	funcNumRegs          = 4
	funcMaxDynamicShared = 8
)

// Function is a kernel of a module.
type Function struct {
	d    *Device
	h    uintptr
	Name string
	// Registers per thread, local (stack/spill) bytes per thread and the most threads a
	// block may have, as the driver reports them for the loaded code.
	Registers, LocalBytes, MaxThreads int
}

// Dim3 is a grid or block size.
type Dim3 struct{ X, Y, Z uint32 }

// D1 returns a one-dimensional Dim3.
func D1(x int) Dim3 { return Dim3{uint32(x), 1, 1} }

// Load compiles src for the device (Compile with the device's architecture, cached on disk)
// and loads it. name names the program in errors.
func (d *Device) Load(name, src string, options ...string) (*Module, error) {
	c, err := Compile(name, src, d.Info.Arch(), options...)
	if err != nil {
		return nil, err
	}
	return d.LoadImage(name, c.Image)
}

// LoadImage loads a CUBIN, or NUL-terminated PTX, image.
func (d *Device) LoadImage(name string, image []byte) (*Module, error) {
	if len(image) == 0 {
		return nil, fmt.Errorf("cuda: module %s: empty image", name)
	}
	m := &Module{d: d, Name: name}
	err := d.do(func() error {
		return call(drv.cuModuleLoadData, uintptr(unsafe.Pointer(&m.h)), uintptr(unsafe.Pointer(&image[0])))
	})
	runtime.KeepAlive(image)
	if err != nil {
		return nil, fmt.Errorf("cuda: load module %s on %s: %w", name, d.Info.Name, err)
	}
	return m, nil
}

// Function returns the kernel called name (its extern "C" name).
func (m *Module) Function(name string) (*Function, error) {
	f := &Function{d: m.d, Name: name}
	cn := cString(name)
	err := m.d.do(func() error {
		if err := call(drv.cuModuleGetFunction, uintptr(unsafe.Pointer(&f.h)), m.h, uintptr(unsafe.Pointer(&cn[0]))); err != nil {
			return err
		}
		for _, a := range []struct {
			attr int
			dst  *int
		}{{funcNumRegs, &f.Registers}, {funcLocalBytes, &f.LocalBytes}, {funcMaxThreads, &f.MaxThreads}} {
			var v int32
			if err := call(drv.cuFuncGetAttribute, uintptr(unsafe.Pointer(&v)), uintptr(a.attr), f.h); err != nil {
				return err
			}
			*a.dst = int(v)
		}
		return nil
	})
	runtime.KeepAlive(cn)
	if err != nil {
		return nil, fmt.Errorf("cuda: module %s: kernel %s: %w", m.Name, name, err)
	}
	return f, nil
}

// SetMaxDynamicShared lets launches of f use up to bytes of dynamic shared memory (above the
// default 48 KB, up to Info.SharedOptin).
func (f *Function) SetMaxDynamicShared(bytes int) error {
	err := f.d.do(func() error { return call(drv.cuFuncSetAttribute, f.h, funcMaxDynamicShared, uintptr(bytes)) })
	if err != nil {
		return fmt.Errorf("cuda: kernel %s: dynamic shared memory %d bytes: %w", f.Name, bytes, err)
	}
	return nil
}

// Unload unloads the module.
func (m *Module) Unload() error {
	if m == nil || m.h == 0 {
		return nil
	}
	err := m.d.do(func() error { return call(drv.cuModuleUnload, m.h) })
	m.h = 0
	return err
}

// Launch queues f on s over grid × block threads with shared bytes of dynamic shared memory.
// args are the kernel's parameters in order, each one of: *Buffer (its device address),
// *HostBuffer (its device address; mapped buffers only), uint64 (a raw device address or a
// 64-bit integer), int64, uint32, int32, float32, float64, or []byte (a struct passed by
// value: its bytes, at most 8-byte aligned). The driver copies the values at the call (and
// at capture), so args may change afterwards. Errors name the kernel.
//
// A kernel launched here (not one of lithos/kernels, which Kernels.Launch launches) does not
// wait in its entry, so the lithos kernel after it is not overlapped with it (Stream.follows).
func (f *Function) Launch(s *Stream, grid, block Dim3, shared int, args ...any) error {
	s.follows = false
	return f.launch(s, grid, block, Dim3{}, shared, false, args)
}

// LaunchCluster is Launch with thread-block clusters of cluster blocks (sm_90; each grid
// dimension a multiple of cluster's), through cuLaunchKernelEx. Errors: a driver without
// cuLaunchKernelEx, the driver's refusal (a cluster too large for the kernel's resources).
func (f *Function) LaunchCluster(s *Stream, grid, block, cluster Dim3, shared int, args ...any) error {
	if err := clusterCheck(f.Name, grid, cluster); err != nil {
		return err
	}
	s.follows = false
	return f.launch(s, grid, block, cluster, shared, false, args)
}

// clusterCheck refuses a cluster launch of kernel name that the driver cannot make (no
// cuLaunchKernelEx) or whose grid is not whole clusters.
func clusterCheck(name string, grid, cluster Dim3) error {
	if drv.cuLaunchKernelEx.addr == 0 {
		return fmt.Errorf("cuda: launch %s with clusters %v: the driver has no cuLaunchKernelEx (CUDA 12 or newer)", name, cluster)
	}
	if cluster.X == 0 || cluster.Y == 0 || cluster.Z == 0 || grid.X%cluster.X != 0 || grid.Y%cluster.Y != 0 || grid.Z%cluster.Z != 0 {
		return fmt.Errorf("cuda: launch %s: grid %v is not whole clusters of %v", name, grid, cluster)
	}
	return nil
}

// launchConfig is cuda.h's CUlaunchConfig (64-bit layout: 56 bytes) and launchAttr its
// CUlaunchAttribute (72 bytes: the id, padding, a 64-byte value union).
type launchConfig struct {
	gridX, gridY, gridZ    uint32
	blockX, blockY, blockZ uint32
	shared                 uint32
	_                      uint32
	stream                 uintptr
	attrs                  uintptr
	numAttrs               uint32
	_                      uint32
}

// MaxActiveClusters returns how many clusters of cluster threadgroups of block threads and
// shared bytes of dynamic shared memory run on the device at once (cuOccupancyMaxActiveClusters;
// 0: none fits), ok false when the driver cannot say (no such entry point). Errors: the
// driver's.
func (f *Function) MaxActiveClusters(block, cluster Dim3, shared int) (n int, ok bool, err error) {
	if drv.cuOccupancyMaxActiveClusters.addr == 0 {
		return 0, false, nil
	}
	at := &launchAttr{id: attrClusterDimension}
	at.val[0], at.val[1], at.val[2] = cluster.X, cluster.Y, cluster.Z
	cfg := &launchConfig{gridX: cluster.X, gridY: cluster.Y, gridZ: cluster.Z, blockX: block.X, blockY: block.Y, blockZ: block.Z,
		shared: uint32(shared), attrs: uintptr(unsafe.Pointer(at)), numAttrs: 1}
	var v int32
	var pin runtime.Pinner
	pin.Pin(at)
	pin.Pin(cfg)
	defer pin.Unpin()
	err = f.d.do(func() error {
		return call(drv.cuOccupancyMaxActiveClusters, uintptr(unsafe.Pointer(&v)), f.h, uintptr(unsafe.Pointer(cfg)))
	})
	if err != nil {
		return 0, false, fmt.Errorf("cuda: %s: clusters of %v: %w", f.Name, cluster, err)
	}
	return int(v), true, nil
}

type launchAttr struct {
	id  uint32
	_   uint32
	val [16]uint32
}

// attrClusterDimension is CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION (value: x, y, z);
// attrProgrammatic is CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION (value: 1, the
// launch may start before the kernel before it on the stream completes: cuda.h's CUlaunchAttributeID).
const (
	attrClusterDimension = 4
	attrProgrammatic     = 6
)

// launch marshals args (see Launch) and queues f: cuLaunchKernel, or cuLaunchKernelEx with
// the cluster dimension attribute when cluster is not zero and the programmatic stream
// serialization attribute when overlap is set (the kernel's threadgroups may start while the
// kernel before it runs; the kernel waits for it in its entry, prelude GRID_WAIT).
func (f *Function) launch(s *Stream, grid, block, cluster Dim3, shared int, overlap bool, args []any) error {
	// Each argument gets 8-byte-aligned slots in one arena; kernelParams is an array of
	// pointers into it (Go memory handed to the driver for the call: pinned).
	words := 1
	for _, a := range args {
		if b, ok := a.([]byte); ok {
			words += (len(b) + 7) / 8
		} else {
			words++
		}
	}
	vals := make([]uint64, words)
	ptrs := make([]unsafe.Pointer, len(args)+1)
	var pin runtime.Pinner
	defer pin.Unpin()
	pin.Pin(&vals[0])
	w := 0
	for i, a := range args {
		ptrs[i] = unsafe.Pointer(&vals[w])
		switch v := a.(type) {
		case *Buffer:
			if v == nil || v.Ptr == 0 {
				return fmt.Errorf("cuda: launch %s: argument %d is a freed or nil buffer", f.Name, i)
			}
			vals[w] = v.Ptr
		case *HostBuffer:
			if v == nil || v.DevPtr == 0 {
				return fmt.Errorf("cuda: launch %s: argument %d is host memory not mapped to the device", f.Name, i)
			}
			vals[w] = v.DevPtr
		case uint64:
			vals[w] = v
		case int64:
			vals[w] = uint64(v)
		case uint32:
			vals[w] = uint64(v)
		case int32:
			vals[w] = uint64(uint32(v))
		case float32:
			vals[w] = uint64(math.Float32bits(v))
		case float64:
			vals[w] = math.Float64bits(v)
		case []byte:
			if len(v) == 0 {
				return fmt.Errorf("cuda: launch %s: argument %d is an empty struct", f.Name, i)
			}
			n := (len(v) + 7) / 8
			copy(unsafe.Slice((*byte)(unsafe.Pointer(&vals[w])), 8*n), v)
			w += n - 1
		default:
			return fmt.Errorf("cuda: launch %s: argument %d has type %T (want *Buffer, *HostBuffer, uint64, int64, uint32, int32, float32, float64 or []byte)", f.Name, i, a)
		}
		w++
	}
	var params uintptr
	if len(args) > 0 {
		params = uintptr(unsafe.Pointer(&ptrs[0]))
	}
	var err error
	if cluster == (Dim3{}) && !overlap {
		err = f.d.do(func() error {
			return call(drv.cuLaunchKernel, f.h, uintptr(grid.X), uintptr(grid.Y), uintptr(grid.Z),
				uintptr(block.X), uintptr(block.Y), uintptr(block.Z), uintptr(shared), s.h, params, 0)
		})
	} else {
		if drv.cuLaunchKernelEx.addr == 0 {
			return fmt.Errorf("cuda: launch %s: the driver has no cuLaunchKernelEx (CUDA 12 or newer)", f.Name)
		}
		at := &[2]launchAttr{}
		n := 0
		if cluster != (Dim3{}) {
			at[n].id = attrClusterDimension
			at[n].val[0], at[n].val[1], at[n].val[2] = cluster.X, cluster.Y, cluster.Z
			n++
		}
		if overlap {
			at[n].id = attrProgrammatic
			at[n].val[0] = 1
			n++
		}
		pin.Pin(at)
		cfg := &launchConfig{gridX: grid.X, gridY: grid.Y, gridZ: grid.Z, blockX: block.X, blockY: block.Y, blockZ: block.Z,
			shared: uint32(shared), stream: s.h, attrs: uintptr(unsafe.Pointer(&at[0])), numAttrs: uint32(n)}
		pin.Pin(cfg)
		err = f.d.do(func() error {
			return call(drv.cuLaunchKernelEx, uintptr(unsafe.Pointer(cfg)), f.h, params, 0)
		})
		runtime.KeepAlive(at)
		runtime.KeepAlive(cfg)
	}
	runtime.KeepAlive(ptrs)
	runtime.KeepAlive(vals)
	if err != nil {
		if cluster != (Dim3{}) {
			return fmt.Errorf("cuda: launch %s (grid %v, block %v, clusters %v, %d B shared): %w", f.Name, grid, block, cluster, shared, err)
		}
		return fmt.Errorf("cuda: launch %s (grid %v, block %v, %d B shared): %w", f.Name, grid, block, shared, err)
	}
	return nil
}
