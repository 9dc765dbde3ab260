//go:build darwin && arm64

package metal

import (
	"context"
	"fmt"
	"time"

	"github.com/ebitengine/purego/objc"

	"lithos/runtime/backend/gpu"
	"lithos/runtime/bundle"
)

// Device implements the runtime's device interface (runtime/backend/gpu, .notes/gpu-device.md)
// over Metal. Addresses are synthetic (AddrTable): every buffer is a shared-storage MTLBuffer
// (unified memory) registered under an address the kernels' arguments are resolved from;
// the bundle's weights are one address range backed by no-copy windows of the mapping.
// None of this has run on a Mac (docs/metal.md §6).
var (
	_ gpu.Device    = (*Device)(nil)
	_ gpu.Owner     = (*Device)(nil)
	_ gpu.HostOwner = (*Device)(nil)
)

// MapWeights tells the device that the next Alloc of len(b.Weights()) bytes is the bundle's
// weights file, addressed inside its tensors (the manifest's byte ranges); UploadStaged of the
// mapping then wraps page-aligned windows of it (< 4 GiB, PlanWindows) with
// newBufferWithBytesNoCopy instead of copying (a copy when the mapping is not page-aligned,
// as where the bundle was read into memory). Backend.Load calls it before gpu.Load.
func (d *Device) MapWeights(b *bundle.Bundle) {
	w := newPendingWeights(b)
	d.do(func() error { d.weights = w; return nil })
}

// Profile returns the device's chip profile (Profile.Chip matches it to manifests.Chips).
func (d *Device) Profile() Profile {
	return Profile{Name: d.ChipName, Family: d.Family, GPUCores: d.GPUCores, WorkingSet: d.WorkingSet, MaxBuffer: d.MaxBuffer, UnifiedMemory: d.UnifiedMemory}
}

// Name returns "Metal" (gpu.Device; the gpu package's errors then start "metal: "). The
// chip's name is ChipName.
func (d *Device) Name() string { return "Metal" }

// Fit refuses need bytes that do not fit the GPU's working set: recommendedMaxWorkingSetSize
// less currentAllocatedSize (Apple's guidance for the memory a process's GPU work should use
// without paging; no-copy windows of the weights count once wrapped).
func (d *Device) Fit(what string, need int64) error {
	var used uint64
	if err := d.do(func() error { used = objc.Send[uint64](d.dev, sel("currentAllocatedSize")); return nil }); err != nil {
		return err
	}
	free := int64(d.WorkingSet) - int64(used)
	if need > free {
		return fmt.Errorf("metal: %s needs %.2f GB; the GPU working set of %s is %.2f GB with %.2f GB in use", what, float64(need)/1e9, d.ChipName, float64(d.WorkingSet)/1e9, float64(used)/1e9)
	}
	return nil
}

// Alloc allocates a shared-storage buffer of size > 0 bytes under a new address; the Alloc of
// the weights' size after MapWeights reserves the windowed range instead (backed by
// UploadStaged).
func (d *Device) Alloc(size int64) (*gpu.Buffer, error) { return d.alloc(size, true) }

func (d *Device) alloc(size int64, weights bool) (*gpu.Buffer, error) {
	if size <= 0 {
		return nil, fmt.Errorf("metal: allocate %d bytes: size must be positive", size)
	}
	var b *gpu.Buffer
	err := d.do(func() (err error) {
		b, err = d.allocBuf(size, weights, d)
		return err
	})
	return b, err
}

// FreeBuffer releases the MTLBuffers behind b (gpu.Owner); its addresses stop resolving.
func (d *Device) FreeBuffer(b *gpu.Buffer) error {
	return d.do(func() error { return d.freeBuf(b.Ptr) })
}

// Upload allocates a buffer of max(len(src), 1) bytes holding a copy of src: a memcpy into the
// new buffer's shared storage, which no GPU work uses yet.
func (d *Device) Upload(src []byte) (*gpu.Buffer, error) {
	b, err := d.alloc(max(int64(len(src)), 1), false)
	if err != nil {
		return nil, err
	}
	if err := d.do(func() error { return d.fillNew(b.Ptr, src) }); err != nil {
		b.Free()
		return nil, err
	}
	return b, nil
}

// UploadStaged backs the weights range with no-copy windows of src when dst is the range
// MapWeights announced and src its page-aligned mapping (nothing is copied); otherwise it
// copies src into dst's shared storage (dst must be idle), checking ctx between windows or
// 64 MiB chunks. desc is not shown (no progress bar: wrapping takes no time).
func (d *Device) UploadStaged(ctx context.Context, dst *gpu.Buffer, src []byte, desc string) (gpu.UploadStats, error) {
	start := time.Now()
	st := gpu.UploadStats{Bytes: int64(len(src))}
	if done, err := checkUpload(dst, src, desc); done || err != nil {
		return st, err
	}
	err := d.do(func() error { return d.stageWeights(ctx, dst, src, desc) })
	st.Wall = time.Since(start)
	return st, err
}

// HostAlloc allocates size > 0 bytes of shared storage: Bytes is the buffer's contents; a
// mapped buffer also gets an address kernels are given (the token ring). Copies to and from
// it are blits (Queue.CopyHtoD/CopyDtoH), ordered with the queue's other work.
func (d *Device) HostAlloc(size int64, mapped bool) (*gpu.HostBuffer, error) {
	var h *gpu.HostBuffer
	err := d.do(func() (err error) {
		h, err = d.allocHost(size, mapped, d)
		return err
	})
	return h, err
}

// FreeHost releases a host buffer (gpu.HostOwner).
func (d *Device) FreeHost(h *gpu.HostBuffer) error {
	return d.do(func() error { return d.freeHostBuf(h) })
}

// NewQueue makes a queue over a new MTLCommandQueue.
func (d *Device) NewQueue() (gpu.Queue, error) {
	q := &Queue{d: d}
	err := d.do(func() error {
		q.q = d.dev.Send(sel("newCommandQueue"))
		if q.q == 0 {
			return fmt.Errorf("metal: newCommandQueue returned nil")
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return q, nil
}
