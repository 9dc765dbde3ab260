package gpu

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unsafe"

	"lithos/kernels"
)

// ErrDeviceBusy is wrapped by a device's error when work it was given may still be running
// after a bounded wait gave up on it (Metal: metal.ErrStuck, a command buffer still running
// after Queue.Wait's bound and the drain wait that follows; CUDA: cuda.ErrTimeout, a stream
// wait past its bound): the device may still read and write every buffer and host
// buffer that work uses, including host memory it wraps without a copy (the weights' mapping),
// so none of them may be freed or unmapped. Session.Close and Target.Close then keep
// (leak) their memory instead of freeing it and return an error wrapping ErrDeviceBusy, so
// the caller keeps the bundle mapped too. Target.Close still calls the owned Device.Close: a
// device whose Wait can return ErrDeviceBusy must make its Close safe in that state (Metal
// waits once more and keeps what is still in use for the life of the process).
var ErrDeviceBusy = errors.New("gpu: the device may still be running work that uses its memory")

// Device is what the runtime needs of one GPU: memory, queues and the kernel module of
// lithos/kernels (every kernel of kernels.Kernels(), compiled for the device and loaded). The
// CUDA backend implements it over the driver API (a stream per Queue, CUDA graphs for Record),
// the Metal backend over a command queue (an indirect command buffer for Record). Methods may
// be called from any goroutine, one call at a time per Queue.
type Device interface {
	// Name is the backend's name as messages spell it: "CUDA", "Metal". Errors of this package
	// start with its lower case ("cuda: …").
	Name() string
	// Fit returns an error when need bytes (plus the device's own reserve) do not fit its free
	// memory, saying what (the caller's description) needs how much and what is free (GB =
	// 1e9 bytes). Called before allocating, so a model too large is refused before work starts.
	Fit(what string, need int64) error
	// Alloc allocates size > 0 bytes of device memory, contents undefined; the Buffer's Owner
	// frees it. Errors: size ≤ 0, out of memory (saying free and total).
	Alloc(size int64) (*Buffer, error)
	// Upload allocates a buffer of max(len(src), 1) bytes holding a copy of src, and returns
	// when the copy is done (a bounded wait).
	Upload(src []byte) (*Buffer, error)
	// UploadStaged copies src (a bundle's mapped weights.bin: read once, front to back; the
	// device may advise the OS so) into dst from byte 0, checking ctx between chunks, every
	// wait bounded; desc labels a progress bar on a terminal ("" for none). Errors: src longer
	// than dst, a copy failing or timing out, ctx done.
	UploadStaged(ctx context.Context, dst *Buffer, src []byte, desc string) (UploadStats, error)
	// HostAlloc allocates size > 0 bytes of host memory that a Queue copies from and to
	// (CUDA: pinned). mapped also makes it addressable by kernels at HostBuffer.DevPtr (the
	// token ring: the device writes it and the host reads it without a copy).
	HostAlloc(size int64, mapped bool) (*HostBuffer, error)
	// NewQueue makes a queue: work queued on it runs in order.
	NewQueue() (Queue, error)
	// ReadBandwidthGBs measures the device's streaming read bandwidth in GB/s (GB = 1e9
	// bytes): the floor lithos-run bench compares passes with (generate.BandwidthMeter).
	ReadBandwidthGBs() (float64, error)
	// Close releases the device and its kernel module; every Buffer, HostBuffer, Queue and
	// Replay made on it must be released first.
	Close() error
}

// Queue is an ordered queue of device work (CUDA: a stream; Metal: a command queue and the
// command buffer being filled). Enqueue methods return once the work is queued; only Wait
// waits. Offsets and sizes are bytes.
type Queue interface {
	// Launch queues kernel (a kernels.Kernel name) over grid threadgroups of the kernel's
	// Threads, with lithos/kernels' calling convention: ctl (the step-state words), prm (the
	// parameter record, kernels.Record, in device memory), then one device address per buffer
	// of the kernel, in Kernel.Buffers order. Errors name the kernel and the rule broken
	// (unknown kernel, wrong buffer count, an empty grid, a null address).
	Launch(kernel string, grid [3]uint32, ctl, prm uint64, bufs ...uint64) error
	// CopyHtoD queues a copy of n bytes from src at srcOff to dst at dstOff; src must stay
	// untouched until the copy has run (Wait). Errors: a range outside a buffer.
	CopyHtoD(dst *Buffer, dstOff int64, src *HostBuffer, srcOff, n int64) error
	// CopyDtoH queues a copy of n bytes from src at srcOff to dst at dstOff (read dst after Wait).
	CopyDtoH(dst *HostBuffer, dstOff int64, src *Buffer, srcOff, n int64) error
	// Fill32 queues setting words 4-byte words of dst, from byte off (a multiple of 4), to value.
	Fill32(dst *Buffer, off, words int64, value uint32) error
	// Record runs enqueue, which queues launches on this queue, and records them into a Replay
	// instead of running them (CUDA: stream capture into a graph; Metal: an indirect command
	// buffer). enqueue must queue only Launches on this queue and must not Wait.
	Record(enqueue func() error) (Replay, error)
	// Wait blocks until everything queued so far has finished, at most timeout (≤ 0: the
	// device's default bound); past it the error wraps the device's timeout error instead of
	// hanging, and ErrDeviceBusy when the work may still be running. A kernel fault is
	// returned as the device reports it.
	Wait(timeout time.Duration) error
	// Close releases the queue (work already queued still completes).
	Close() error
}

// FragmentLayouter is a Device whose BLM kernels read the fragment-major copy of the weights
// (kernels.BLMFragmentMajor: the tensor-core path, CUDA). Optional: when FragmentLayout is
// true, LoadTarget rewrites each target matrix that has such a copy in place after the upload
// (and LoadDraft each of the draft head's) and its records and kernels name that layout (Matrix.Layout); the BLM layout otherwise.
// docs/performance.md §3.3i has the measurements (7–8 % faster 8-row products, 10–21 % 1-row).
type FragmentLayouter interface {
	FragmentLayout() bool
}

// MMALayouter is a Device that runs the MMA-layout matrix kernels (kernels.BLMXCopy,
// lithos_blmx_*: CUDA on a GPU that gives a block 224 KiB of shared memory, with thread-block
// clusters on sm_90). Optional: when MMALayout reports true,
// LoadTarget rewrites each target NVFP4 and FP8 matrix whose copy fits its packed bytes into
// that layout after the upload (and LoadDraft each of the draft head's) (Matrix.Layout BLMLayoutMMA) and the programs multiply it with
// kernels.BLMXParams records split for dev (its multiprocessors and clusters); the other
// matrices keep the BLM or fragment-major layout. docs/performance.md §3.3j.
type MMALayouter interface {
	MMALayout() (dev kernels.BLMXDevice, ok bool)
}

// ClusterQueue is a Queue that also launches thread-block clusters (CUDA sm_90): the BLM
// matrix kernels then split K across the threadgroups of a cluster (kernels.BLMParams
// WithClusters, ClusterDims). Optional: a Session uses it when its queue implements it and
// MaxCluster is at least kernels.BLMMaxClusters.
type ClusterQueue interface {
	Queue
	// MaxCluster is the largest cluster (threadgroups) the device launches; 0 when it has none.
	MaxCluster() int
	// LaunchCluster is Launch with cluster dimensions cluster (in threadgroups; each of grid's
	// dimensions a multiple of cluster's); it may be recorded like Launch.
	LaunchCluster(kernel string, grid, cluster [3]uint32, ctl, prm uint64, bufs ...uint64) error
}

// Replay is recorded work (Queue.Record), queued again by Launch with every launch's
// addresses and records as they were recorded (values that change per step are read by the
// kernels from the step-state words).
type Replay interface {
	// Launch queues one replay on q (the queue that recorded it).
	Launch(q Queue) error
	// Close releases it; a second Close does nothing.
	Close() error
}

// Buffer is a device allocation (or a view of one): Ptr is the 64-bit device address of its
// byte 0, the value kernels are given (CUDA: the CUdeviceptr; Metal: an address in the
// device's own address space that it resolves to a buffer and offset); Size is its bytes.
type Buffer struct {
	Ptr  uint64
	Size int64
	// Owner frees the allocation (the Device that made it); nil for a view (Slice).
	Owner Owner
}

// Owner frees the device allocations it made (Buffer.Free calls it once).
type Owner interface {
	FreeBuffer(b *Buffer) error
}

// At returns the device address off bytes into the buffer (a kernel argument); it does not
// check the range (Slice does).
func (b *Buffer) At(off int64) uint64 { return b.Ptr + uint64(off) }

// Slice returns a view of n bytes at off: a Buffer sharing the allocation (freeing a view is
// an error). Errors: the range is outside the buffer.
func (b *Buffer) Slice(off, n int64) (*Buffer, error) {
	if off < 0 || n < 0 || off+n > b.Size {
		return nil, fmt.Errorf("gpu: bytes [%d, %d) are outside a buffer of %d bytes", off, off+n, b.Size)
	}
	return &Buffer{Ptr: b.Ptr + uint64(off), Size: n}, nil
}

// Free releases the allocation through its Owner; a second Free (or Free of nil) does nothing.
// Errors: a view (no Owner), the device's error.
func (b *Buffer) Free() error {
	if b == nil || b.Ptr == 0 {
		return nil
	}
	if b.Owner == nil {
		return errors.New("gpu: free of a buffer view")
	}
	err := b.Owner.FreeBuffer(b)
	b.Ptr = 0
	return err
}

// HostBuffer is host memory a Queue copies from and to (CUDA: pinned, cuMemHostAlloc).
type HostBuffer struct {
	Bytes []byte // the memory, len = its size; valid until Free
	// DevPtr is the device address of the memory when it was allocated mapped, 0 otherwise.
	DevPtr uint64
	// Owner frees it (the Device that made it).
	Owner HostOwner
}

// HostOwner frees the host buffers it made (HostBuffer.Free calls it once).
type HostOwner interface {
	FreeHost(h *HostBuffer) error
}

// Free releases the memory; Bytes must not be used afterwards. A second Free does nothing.
func (h *HostBuffer) Free() error {
	if h == nil || h.Bytes == nil {
		return nil
	}
	if h.Owner == nil {
		return errors.New("gpu: free of a host buffer without an owner")
	}
	err := h.Owner.FreeHost(h)
	h.Bytes, h.DevPtr = nil, 0
	return err
}

// UploadStats describe one staged upload (Device.UploadStaged).
type UploadStats struct {
	Bytes int64
	Setup time.Duration // preparing the staging buffers
	Wall  time.Duration // host wall time, first chunk read to last copy done
}

// GBps is Bytes over Wall in GB/s (GB = 1e9 bytes).
func (u UploadStats) GBps() float64 { return float64(u.Bytes) / u.Wall.Seconds() / 1e9 }

// Float32Bytes views p as little-endian float32 bytes (no copy; every target of lithos is
// little-endian), for Upload and copies.
func Float32Bytes(p []float32) []byte {
	if len(p) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&p[0])), 4*len(p))
}
