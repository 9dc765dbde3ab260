package metal

import (
	"context"
	"fmt"
	"unsafe"

	"lithos/runtime/backend/gpu"
	"lithos/runtime/bundle"
)

// backing makes the memory behind a buffer id: MTLBuffers on a Mac (Device, metal_darwin.go),
// arena memory of the fiber runtime in the emulated device of the linux tests
// (emulator_linux_test.go). Every Buffer it returns has a host view (Host: shared storage) and
// a non-zero id while it lives.
type backing interface {
	// newBuf allocates n > 0 bytes.
	newBuf(n int) (*Buffer, error)
	// wrapNoCopy makes a buffer of b, page-aligned memory (a window of the mapped weights),
	// without a copy where the device can (Metal: newBufferWithBytesNoCopy).
	wrapNoCopy(b []byte) (*Buffer, error)
	// release frees a buffer of newBuf or wrapNoCopy.
	release(b *Buffer)
}

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

// newPendingWeights describes b's mapped weights and the manifest's tensor ranges.
func newPendingWeights(b *bundle.Bundle) *pendingWeights {
	w := &pendingWeights{src: b.Weights()}
	for _, t := range b.Manifest.Tensors {
		w.tensors = append(w.tensors, Range{t.Offset, t.Length})
	}
	return w
}

// space is a device's memory as the runtime's device interface (runtime/backend/gpu) sees it:
// synthetic addresses (AddrTable) for buffers, host buffers and the windowed weights, the
// Buffer behind every id, the lookups that copies, direct launches and recordings make. The
// Metal device (gpu_darwin.go, queue_darwin.go) and the emulated one of the linux tests run
// this same code; only the backing differs. Not safe for concurrent use: the darwin device
// calls it on its thread, the emulated one under its lock.
type space struct {
	be        backing
	maxBuffer uint64 // the largest buffer, bytes (maxBufferLength)
	addrs     AddrTable
	mbufs     map[BufID]*Buffer          // the buffer behind each id
	hosts     map[*gpu.HostBuffer]uint64 // host buffers and their addresses
	weights   *pendingWeights            // the bundle's weights, set by MapWeights
}

func newSpace(be backing, maxBuffer uint64) space {
	return space{be: be, maxBuffer: maxBuffer, mbufs: map[BufID]*Buffer{}, hosts: map[*gpu.HostBuffer]uint64{}}
}

// allocBuf is gpu.Device.Alloc (weights: the Alloc of the announced weights' size reserves
// the windowed range, backed by stageWeights; false for Upload).
func (s *space) allocBuf(size int64, weights bool, owner gpu.Owner) (*gpu.Buffer, error) {
	if size <= 0 {
		return nil, fmt.Errorf("metal: allocate %d bytes: size must be positive", size)
	}
	if w := s.weights; weights && w != nil && w.base == 0 && size == int64(len(w.src)) {
		base, wins, ids, err := s.addrs.AddWindowed("weights.bin", size, w.tensors, 0)
		if err != nil {
			return nil, err
		}
		w.base, w.wins, w.ids = base, wins, ids
		return &gpu.Buffer{Ptr: base, Size: size, Owner: owner}, nil
	}
	if uint64(size) > s.maxBuffer {
		return nil, fmt.Errorf("metal: allocate %d bytes: more than the device's maxBufferLength %d", size, s.maxBuffer)
	}
	mb, err := s.be.newBuf(int(size))
	if err != nil {
		return nil, err
	}
	addr, id, err := s.addrs.Add(fmt.Sprintf("buffer of %d bytes", size), size)
	if err != nil {
		s.be.release(mb)
		return nil, err
	}
	s.mbufs[id] = mb
	return &gpu.Buffer{Ptr: addr, Size: size, Owner: owner}, nil
}

// freeBuf releases the buffers behind the region at ptr (gpu.Owner); its addresses stop
// resolving.
func (s *space) freeBuf(ptr uint64) error {
	ids, err := s.addrs.Remove(ptr)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if mb := s.mbufs[id]; mb != nil {
			s.be.release(mb)
			delete(s.mbufs, id)
		}
	}
	if s.weights != nil && s.weights.base == ptr {
		s.weights = nil
	}
	return nil
}

// fillNew copies src into the new buffer at ptr (Upload: no work uses it yet).
func (s *space) fillNew(ptr uint64, src []byte) error {
	id, off, err := s.addrs.Span(ptr, 1)
	if err != nil {
		return err
	}
	copy(s.mbufs[id].Host[off:], src)
	return nil
}

// stageWeights is gpu.Device.UploadStaged: when dst is the range MapWeights announced and
// src its page-aligned mapping, each window is wrapped (backing.wrapNoCopy), else copied into
// a new buffer; any other dst gets src copied into its host view (dst must be idle), ctx
// checked between windows or 64 MiB chunks.
func (s *space) stageWeights(ctx context.Context, dst *gpu.Buffer, src []byte, desc string) error {
	if w := s.weights; w != nil && w.base == dst.Ptr && !w.done {
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
				mb, err = s.be.wrapNoCopy(unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(&src[0]), win.Off)), win.Len))
			} else if mb, err = s.be.newBuf(int(win.Len)); err == nil {
				copy(mb.Host, src[win.Off:min(win.Off+win.Len, int64(len(src)))])
			}
			if err != nil {
				return fmt.Errorf("metal: weights window %d (bytes %d to %d): %w", i, win.Off, win.Off+win.Len, err)
			}
			s.mbufs[w.ids[i]] = mb
		}
		w.done = true
		return nil
	}
	id, off, err := s.addrs.Span(dst.Ptr, uint64(len(src)))
	if err != nil {
		return fmt.Errorf("metal: %s: %w", desc, err)
	}
	host := s.mbufs[id].Host[off:]
	for o := 0; o < len(src); o += 64 << 20 {
		if err := ctx.Err(); err != nil {
			return err
		}
		copy(host[o:], src[o:min(o+64<<20, len(src))])
	}
	return nil
}

// allocHost is gpu.Device.HostAlloc: a shared buffer whose host view is Bytes; mapped also
// gives kernels its address (the token ring).
func (s *space) allocHost(size int64, mapped bool, owner gpu.HostOwner) (*gpu.HostBuffer, error) {
	if size <= 0 || uint64(size) > s.maxBuffer {
		return nil, fmt.Errorf("metal: host buffer of %d bytes: want 1 to %d", size, s.maxBuffer)
	}
	mb, err := s.be.newBuf(int(size))
	if err != nil {
		return nil, err
	}
	addr, id, err := s.addrs.Add(fmt.Sprintf("host buffer of %d bytes", size), size)
	if err != nil {
		s.be.release(mb)
		return nil, err
	}
	s.mbufs[id] = mb
	h := &gpu.HostBuffer{Bytes: mb.Host, Owner: owner}
	if mapped {
		h.DevPtr = addr
	}
	s.hosts[h] = addr
	return h, nil
}

// freeHostBuf releases a host buffer (gpu.HostOwner).
func (s *space) freeHostBuf(h *gpu.HostBuffer) error {
	addr, ok := s.hosts[h]
	if !ok {
		return fmt.Errorf("metal: free of a host buffer this device did not make")
	}
	delete(s.hosts, h)
	return s.freeBuf(addr)
}

// hostLoc resolves n bytes at off of a host buffer.
func (s *space) hostLoc(h *gpu.HostBuffer, off, n int64) (*Buffer, uint64, error) {
	addr, ok := s.hosts[h]
	if !ok {
		return nil, 0, fmt.Errorf("a host buffer this device did not make (or freed)")
	}
	id, o, err := s.addrs.Span(addr+uint64(off), uint64(n))
	if err != nil {
		return nil, 0, err
	}
	return s.mbufs[id], o, nil
}

// mtlBuffer returns the buffer of id. Errors: a weights window not yet backed (UploadStaged
// not called), a freed buffer.
func (s *space) mtlBuffer(id BufID) (*Buffer, error) {
	mb := s.mbufs[id]
	if mb == nil || mb.id == 0 {
		return nil, fmt.Errorf("metal: buffer %d has no memory (a weights window before UploadStaged, or freed)", id)
	}
	return mb, nil
}

// argBuffer returns the buffer a resolved argument binds: recs (a plan's records arena) for
// RecordsBuf, else the buffer of its id.
func (s *space) argBuffer(a Loc, recs *Buffer) (*Buffer, error) {
	if a.Buf == RecordsBuf {
		if recs == nil {
			return nil, fmt.Errorf("metal: an argument in a records arena outside a plan")
		}
		return recs, nil
	}
	return s.mtlBuffer(a.Buf)
}

// readLoc returns a copy of n bytes at l: the Recorder's Read.
func (s *space) readLoc(l Loc, n int) ([]byte, error) {
	mb, err := s.mtlBuffer(l.Buf)
	if err != nil {
		return nil, err
	}
	if int(l.Off)+n > len(mb.Host) {
		return nil, fmt.Errorf("%d bytes at offset %d of a %d-byte buffer", n, l.Off, len(mb.Host))
	}
	return append([]byte(nil), mb.Host[l.Off:int(l.Off)+n]...), nil
}

// resolve checks and resolves the n-th direct launch (resolveLaunch: errors name the launch,
// kernel and argument); the record is read now.
func (s *space) resolve(n int, c LaunchCall) (resolved, error) {
	return resolveLaunch(&s.addrs, s.readLoc, n, c)
}

// recorder starts a recording (Queue.Record) over this space: barriers by mode, ICBs of at
// most maxCommands commands (≤ 0: MaxCommands).
func (s *space) recorder(mode BarrierMode, maxCommands int) *Recorder {
	return &Recorder{Table: &s.addrs, Read: s.readLoc, Mode: mode, MaxCommands: maxCommands}
}

// copyHtoD resolves Queue.CopyHtoD's n > 0 bytes: source buffer and offset, destination
// buffer and offset (ranges checked by checkHtoD first).
func (s *space) copyHtoD(dst *gpu.Buffer, dstOff int64, src *gpu.HostBuffer, srcOff, n int64) (*Buffer, uint64, *Buffer, uint64, error) {
	sb, so, err := s.hostLoc(src, srcOff, n)
	if err != nil {
		return nil, 0, nil, 0, fmt.Errorf("metal: copy to the device: %w", err)
	}
	id, do, err := s.addrs.Span(dst.Ptr+uint64(dstOff), uint64(n))
	if err != nil {
		return nil, 0, nil, 0, fmt.Errorf("metal: copy to the device: %w", err)
	}
	db, err := s.mtlBuffer(id)
	if err != nil {
		return nil, 0, nil, 0, err
	}
	return sb, so, db, do, blitCheck("CopyHtoD", so, do, uint64(n))
}

// copyDtoH resolves Queue.CopyDtoH's n > 0 bytes: source buffer and offset, destination
// buffer and offset (ranges checked by checkDtoH first).
func (s *space) copyDtoH(dst *gpu.HostBuffer, dstOff int64, src *gpu.Buffer, srcOff, n int64) (*Buffer, uint64, *Buffer, uint64, error) {
	db, do, err := s.hostLoc(dst, dstOff, n)
	if err != nil {
		return nil, 0, nil, 0, fmt.Errorf("metal: copy to the host: %w", err)
	}
	id, so, err := s.addrs.Span(src.Ptr+uint64(srcOff), uint64(n))
	if err != nil {
		return nil, 0, nil, 0, fmt.Errorf("metal: copy to the host: %w", err)
	}
	sb, err := s.mtlBuffer(id)
	if err != nil {
		return nil, 0, nil, 0, err
	}
	return sb, so, db, do, blitCheck("CopyDtoH", so, do, uint64(n))
}

// fillLoc resolves Queue.Fill32's words > 0 words at off (checked by checkFill first).
func (s *space) fillLoc(dst *gpu.Buffer, off, words int64) (*Buffer, uint64, error) {
	id, o, err := s.addrs.Span(dst.Ptr+uint64(off), uint64(4*words))
	if err != nil {
		return nil, 0, fmt.Errorf("metal: fill: %w", err)
	}
	db, err := s.mtlBuffer(id)
	return db, o, err
}

// checkUpload checks an UploadStaged call (both Metal devices): src must fit dst, naming desc;
// done reports an empty src (nothing to do).
func checkUpload(dst *gpu.Buffer, src []byte, desc string) (done bool, err error) {
	if int64(len(src)) > dst.Size {
		return false, fmt.Errorf("metal: %s: %d bytes into a buffer of %d", desc, len(src), dst.Size)
	}
	return len(src) == 0, nil
}

// checkHtoD checks CopyHtoD's ranges against the buffers' sizes.
func checkHtoD(dst *gpu.Buffer, dstOff int64, src *gpu.HostBuffer, srcOff, n int64) error {
	if dstOff < 0 || n < 0 || srcOff < 0 || dstOff > dst.Size-n || srcOff > int64(len(src.Bytes))-n {
		return fmt.Errorf("metal: copy %d bytes host[%d:] → device[%d:] outside the buffers (%d, %d bytes)", n, srcOff, dstOff, len(src.Bytes), dst.Size)
	}
	return nil
}

// checkDtoH checks CopyDtoH's ranges against the buffers' sizes.
func checkDtoH(dst *gpu.HostBuffer, dstOff int64, src *gpu.Buffer, srcOff, n int64) error {
	if srcOff < 0 || n < 0 || dstOff < 0 || srcOff > src.Size-n || dstOff > int64(len(dst.Bytes))-n {
		return fmt.Errorf("metal: copy %d bytes device[%d:] → host[%d:] outside the buffers (%d, %d bytes)", n, srcOff, dstOff, src.Size, len(dst.Bytes))
	}
	return nil
}

// checkFill checks Fill32's range: off a multiple of 4, the words inside the buffer.
func checkFill(dst *gpu.Buffer, off, words int64) error {
	if off < 0 || off%4 != 0 || words < 0 || off > dst.Size-4*words {
		return fmt.Errorf("metal: fill %d words at byte %d of a %d-byte buffer", words, off, dst.Size)
	}
	return nil
}

// errRecordCopy is the error of a copy or fill queued while recording.
func errRecordCopy(op string) error {
	return fmt.Errorf("metal: record: %s inside a recorded program: an indirect command buffer holds only kernel launches (gpu.Queue.Record)", op)
}

// blitCheck refuses what blits on macOS may not do: offsets and sizes not multiples of 4
// bytes (MTLBlitCommandEncoder copyFromBuffer/fillBuffer, macOS).
func blitCheck(op string, offs ...uint64) error {
	for _, o := range offs {
		if o%4 != 0 {
			return fmt.Errorf("metal: %s: offsets and sizes must be multiples of 4 bytes (blits on macOS), got %d", op, o)
		}
	}
	return nil
}
