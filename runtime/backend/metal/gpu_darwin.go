//go:build darwin && arm64

package metal

import (
	"context"
	"fmt"
	"time"
	"unsafe"

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

// pendingWeights is the bundle's mapped weights file, given by MapWeights before gpu.Load:
// the Alloc of its size reserves the windowed range, UploadStaged of the mapping wraps the
// windows without a copy.
type pendingWeights struct {
	src     []byte
	tensors []Range
	base    uint64   // the reserved range (0: not yet allocated)
	wins    []Window // its windows and their buffer ids
	ids     []BufID
	done    bool // the windows are backed
}

// MapWeights tells the device that the next Alloc of len(b.Weights()) bytes is the bundle's
// weights file, addressed inside its tensors (the manifest's byte ranges); UploadStaged of the
// mapping then wraps page-aligned windows of it (< 4 GiB, PlanWindows) with
// newBufferWithBytesNoCopy instead of copying (a copy when the mapping is not page-aligned,
// as where the bundle was read into memory). Backend.Load calls it before gpu.Load.
func (d *Device) MapWeights(b *bundle.Bundle) {
	w := &pendingWeights{src: b.Weights()}
	for _, t := range b.Manifest.Tensors {
		w.tensors = append(w.tensors, Range{t.Offset, t.Length})
	}
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
	err := d.do(func() error {
		if w := d.weights; weights && w != nil && w.base == 0 && size == int64(len(w.src)) {
			base, wins, ids, err := d.addrs.AddWindowed("weights.bin", size, w.tensors, 0)
			if err != nil {
				return err
			}
			w.base, w.wins, w.ids = base, wins, ids
			b = &gpu.Buffer{Ptr: base, Size: size, Owner: d}
			return nil
		}
		if uint64(size) > d.MaxBuffer {
			return fmt.Errorf("metal: allocate %d bytes: more than the device's maxBufferLength %d", size, d.MaxBuffer)
		}
		mb, err := d.newBuf(int(size))
		if err != nil {
			return err
		}
		addr, id, err := d.addrs.Add(fmt.Sprintf("buffer of %d bytes", size), size)
		if err != nil {
			d.release(mb)
			return err
		}
		d.mbufs[id] = mb
		b = &gpu.Buffer{Ptr: addr, Size: size, Owner: d}
		return nil
	})
	return b, err
}

// FreeBuffer releases the MTLBuffers behind b (gpu.Owner); its addresses stop resolving.
func (d *Device) FreeBuffer(b *gpu.Buffer) error {
	return d.do(func() error {
		ids, err := d.addrs.Remove(b.Ptr)
		if err != nil {
			return err
		}
		for _, id := range ids {
			if mb := d.mbufs[id]; mb != nil {
				d.release(mb)
				delete(d.mbufs, id)
			}
		}
		if d.weights != nil && d.weights.base == b.Ptr {
			d.weights = nil
		}
		return nil
	})
}

// Upload allocates a buffer of max(len(src), 1) bytes holding a copy of src: a memcpy into the
// new buffer's shared storage, which no GPU work uses yet.
func (d *Device) Upload(src []byte) (*gpu.Buffer, error) {
	b, err := d.alloc(max(int64(len(src)), 1), false)
	if err != nil {
		return nil, err
	}
	err = d.do(func() error {
		id, off, err := d.addrs.Span(b.Ptr, 1)
		if err != nil {
			return err
		}
		copy(d.mbufs[id].Host[off:], src)
		return nil
	})
	if err != nil {
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
	if int64(len(src)) > dst.Size {
		return st, fmt.Errorf("metal: %s: %d bytes into a buffer of %d", desc, len(src), dst.Size)
	}
	if len(src) == 0 {
		return st, nil
	}
	err := d.do(func() error {
		if w := d.weights; w != nil && w.base == dst.Ptr && !w.done {
			noCopy := unsafe.Pointer(&src[0]) == unsafe.Pointer(&w.src[0]) && uintptr(unsafe.Pointer(&src[0]))%PageBytes == 0
			for i, win := range w.wins {
				if err := ctx.Err(); err != nil {
					return err
				}
				var mb *Buffer
				var err error
				if noCopy {
					// The mapping covers whole pages: the last window may end past len(src),
					// inside the final page of the mapping (PlanWindows rounds to pages).
					mb, err = d.wrapNoCopy(unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(&src[0]), win.Off)), win.Len))
				} else if mb, err = d.newBuf(int(win.Len)); err == nil {
					copy(mb.Host, src[win.Off:min(win.Off+win.Len, int64(len(src)))])
				}
				if err != nil {
					return fmt.Errorf("metal: weights window %d (bytes %d to %d): %w", i, win.Off, win.Off+win.Len, err)
				}
				d.mbufs[w.ids[i]] = mb
			}
			w.done = true
			return nil
		}
		id, off, err := d.addrs.Span(dst.Ptr, uint64(len(src)))
		if err != nil {
			return fmt.Errorf("metal: %s: %w", desc, err)
		}
		host := d.mbufs[id].Host[off:]
		for o := 0; o < len(src); o += 64 << 20 {
			if err := ctx.Err(); err != nil {
				return err
			}
			copy(host[o:], src[o:min(o+64<<20, len(src))])
		}
		return nil
	})
	st.Wall = time.Since(start)
	return st, err
}

// HostAlloc allocates size > 0 bytes of shared storage: Bytes is the buffer's contents; a
// mapped buffer also gets an address kernels are given (the token ring). Copies to and from
// it are blits (Queue.CopyHtoD/CopyDtoH), ordered with the queue's other work.
func (d *Device) HostAlloc(size int64, mapped bool) (*gpu.HostBuffer, error) {
	if size <= 0 || uint64(size) > d.MaxBuffer {
		return nil, fmt.Errorf("metal: host buffer of %d bytes: want 1 to %d", size, d.MaxBuffer)
	}
	var h *gpu.HostBuffer
	err := d.do(func() error {
		mb, err := d.newBuf(int(size))
		if err != nil {
			return err
		}
		addr, id, err := d.addrs.Add(fmt.Sprintf("host buffer of %d bytes", size), size)
		if err != nil {
			d.release(mb)
			return err
		}
		d.mbufs[id] = mb
		h = &gpu.HostBuffer{Bytes: mb.Host, Owner: d}
		if mapped {
			h.DevPtr = addr
		}
		d.hosts[h] = addr
		return nil
	})
	return h, err
}

// FreeHost releases a host buffer (gpu.HostOwner).
func (d *Device) FreeHost(h *gpu.HostBuffer) error {
	return d.do(func() error {
		addr, ok := d.hosts[h]
		if !ok {
			return fmt.Errorf("metal: free of a host buffer this device did not make")
		}
		delete(d.hosts, h)
		ids, err := d.addrs.Remove(addr)
		if err != nil {
			return err
		}
		for _, id := range ids {
			if mb := d.mbufs[id]; mb != nil {
				d.release(mb)
				delete(d.mbufs, id)
			}
		}
		return nil
	})
}

// hostLoc resolves n bytes at off of a host buffer (device thread).
func (d *Device) hostLoc(h *gpu.HostBuffer, off, n int64) (*Buffer, uint64, error) {
	addr, ok := d.hosts[h]
	if !ok {
		return nil, 0, fmt.Errorf("a host buffer this device did not make (or freed)")
	}
	id, o, err := d.addrs.Span(addr+uint64(off), uint64(n))
	if err != nil {
		return nil, 0, err
	}
	return d.mbufs[id], o, nil
}

// mtlBuffer returns the MTLBuffer of id (device thread). Errors: a weights window not yet
// backed (UploadStaged not called), a freed buffer.
func (d *Device) mtlBuffer(id BufID) (*Buffer, error) {
	mb := d.mbufs[id]
	if mb == nil || mb.id == 0 {
		return nil, fmt.Errorf("metal: buffer %d has no memory (a weights window before UploadStaged, or freed)", id)
	}
	return mb, nil
}

// readLoc returns a copy of n bytes at l (device thread): the Recorder's Read.
func (d *Device) readLoc(l Loc, n int) ([]byte, error) {
	mb, err := d.mtlBuffer(l.Buf)
	if err != nil {
		return nil, err
	}
	if int(l.Off)+n > len(mb.Host) {
		return nil, fmt.Errorf("%d bytes at offset %d of a %d-byte buffer", n, l.Off, len(mb.Host))
	}
	return append([]byte(nil), mb.Host[l.Off:int(l.Off)+n]...), nil
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
