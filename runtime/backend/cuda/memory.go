//go:build linux && amd64

package cuda

import (
	"fmt"
	"unsafe"

	"lithos/runtime/backend/gpu"
)

// Buffer is a device allocation (cuMemAlloc): Ptr is its CUdeviceptr, Size its bytes, Owner
// the Device that frees it (gpu.Buffer: the runtime's buffers are these).
type Buffer = gpu.Buffer

// Alloc allocates size bytes of device memory (contents undefined). Errors: size ≤ 0, out of
// memory (the message gives the free and total memory; IsOutOfMemory reports it).
func (d *Device) Alloc(size int64) (*Buffer, error) {
	if size <= 0 {
		return nil, fmt.Errorf("cuda: allocate %d bytes: size must be positive", size)
	}
	b := &Buffer{Owner: d, Size: size}
	err := d.do(func() error { return call(drv.cuMemAlloc, uintptr(unsafe.Pointer(&b.Ptr)), uintptr(size)) })
	if err != nil {
		if IsOutOfMemory(err) {
			if free, total, e := d.MemInfo(); e == nil {
				return nil, fmt.Errorf("cuda: allocate %d bytes on %s: %.2f GB free of %.2f GB: %w", size, d.Info.Name, float64(free)/1e9, float64(total)/1e9, err)
			}
		}
		return nil, fmt.Errorf("cuda: allocate %d bytes: %w", size, err)
	}
	return b, nil
}

// FreeBuffer releases an allocation Alloc made (gpu.Owner; call b.Free, which calls this once).
func (d *Device) FreeBuffer(b *Buffer) error {
	return d.do(func() error { return call(drv.cuMemFree, uintptr(b.Ptr)) })
}

// Host allocation flags (cuda.h CU_MEMHOSTALLOC_*).
const (
	hostPortable      = 0x01
	hostDeviceMap     = 0x02
	hostWriteCombined = 0x04
)

// HostBuffer is pinned (page-locked) host memory (cuMemHostAlloc): the DMA engines copy from
// and to it without staging, and, when mapped, kernels read and write it directly through its
// device address DevPtr (unified addressing). Owner is the Device that frees it.
type HostBuffer = gpu.HostBuffer

// HostAlloc allocates size bytes of pinned host memory. mapped makes it addressable by
// kernels (DevPtr); writeCombined makes host writes and device reads faster and host reads
// very slow (for upload staging only).
func (d *Device) HostAlloc(size int64, mapped, writeCombined bool) (*HostBuffer, error) {
	if size <= 0 {
		return nil, fmt.Errorf("cuda: pin %d bytes of host memory: size must be positive", size)
	}
	flags := uintptr(hostPortable)
	if mapped {
		flags |= hostDeviceMap
	}
	if writeCombined {
		flags |= hostWriteCombined
	}
	h := &HostBuffer{Owner: d}
	var p unsafe.Pointer
	err := d.do(func() error {
		if err := call(drv.cuMemHostAlloc, uintptr(unsafe.Pointer(&p)), uintptr(size), flags); err != nil {
			return err
		}
		if mapped {
			if err := call(drv.cuMemHostGetDevicePointer, uintptr(unsafe.Pointer(&h.DevPtr)), uintptr(p), 0); err != nil {
				call(drv.cuMemFreeHost, uintptr(p))
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("cuda: pin %d bytes of host memory: %w", size, err)
	}
	h.Bytes = unsafe.Slice((*byte)(p), int(size))
	return h, nil
}

// FreeHost releases pinned memory HostAlloc made (gpu.HostOwner; call h.Free, which calls this
// once).
func (d *Device) FreeHost(h *HostBuffer) error {
	return d.do(func() error { return call(drv.cuMemFreeHost, uintptr(hostPtr(h))) })
}

// hostPtr is the address of a host buffer's memory.
func hostPtr(h *HostBuffer) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(h.Bytes)) }

// stageBytes is the size of the device's pinned staging buffer for Read and Write.
const stageBytes = 8 << 20

// staging returns the device's staging buffer and stream, making them once; stageMu held.
func (d *Device) staging() (*HostBuffer, *Stream, error) {
	if d.stage == nil {
		h, err := d.HostAlloc(stageBytes, false, false)
		if err != nil {
			return nil, nil, err
		}
		d.stage = h
	}
	if d.stream == nil {
		s, err := d.NewStream()
		if err != nil {
			return nil, nil, err
		}
		d.stream = s
	}
	return d.stage, d.stream, nil
}

// Write copies src to device memory at dst.At(off), through the pinned staging buffer in
// chunks, each wait bounded by d.Timeout. Errors: the range is outside dst, a copy fails or
// times out.
func (d *Device) Write(dst *Buffer, off int64, src []byte) error {
	if off < 0 || off+int64(len(src)) > dst.Size {
		return fmt.Errorf("cuda: write bytes [%d, %d) of a %d-byte buffer", off, off+int64(len(src)), dst.Size)
	}
	d.stageMu.Lock()
	defer d.stageMu.Unlock()
	stage, s, err := d.staging()
	if err != nil {
		return err
	}
	for done := 0; done < len(src); {
		n := copy(stage.Bytes, src[done:])
		if err := s.CopyHtoD(dst, off+int64(done), stage, 0, int64(n)); err != nil {
			return err
		}
		if err := s.Wait(d.Timeout); err != nil {
			return fmt.Errorf("cuda: write %d bytes: %w", len(src), err)
		}
		done += n
	}
	return nil
}

// Read copies device memory at src.At(off) into dst, through the pinned staging buffer.
func (d *Device) Read(dst []byte, src *Buffer, off int64) error {
	if off < 0 || off+int64(len(dst)) > src.Size {
		return fmt.Errorf("cuda: read bytes [%d, %d) of a %d-byte buffer", off, off+int64(len(dst)), src.Size)
	}
	d.stageMu.Lock()
	defer d.stageMu.Unlock()
	stage, s, err := d.staging()
	if err != nil {
		return err
	}
	for done := 0; done < len(dst); {
		n := min(len(dst)-done, len(stage.Bytes))
		if err := s.CopyDtoH(stage, 0, src, off+int64(done), int64(n)); err != nil {
			return err
		}
		if err := s.Wait(d.Timeout); err != nil {
			return fmt.Errorf("cuda: read %d bytes: %w", len(dst), err)
		}
		copy(dst[done:done+n], stage.Bytes)
		done += n
	}
	return nil
}

// Upload allocates a device buffer holding a copy of src (Write).
func (d *Device) Upload(src []byte) (*Buffer, error) {
	b, err := d.Alloc(int64(max(len(src), 1)))
	if err != nil {
		return nil, err
	}
	if err := d.Write(b, 0, src); err != nil {
		b.Free()
		return nil, err
	}
	return b, nil
}

// Float32Bytes views p as little-endian float32 bytes (no copy), for Write (gpu.Float32Bytes).
func Float32Bytes(p []float32) []byte { return gpu.Float32Bytes(p) }

// Int32Bytes views p as little-endian int32 bytes (no copy).
func Int32Bytes(p []int32) []byte {
	if len(p) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&p[0])), 4*len(p))
}
