//go:build linux && amd64

package metal

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"lithos/kernels/fiberexec"
	"lithos/runtime/backend/gpu"
	"lithos/runtime/bundle"
)

// The emulated Metal device: a gpu.Device for the linux tests that runs the Metal device's own
// plain-Go memory and recording code — the address table with the windowed weights (space,
// AddrTable), the launches resolved to (buffer id, offset) (resolveLaunch), Queue.Record's Plan
// (Recorder: records copied to the 256-byte-aligned arena, barriers, resident set, chunks of
// MaxCommands) — with the buffers in the fiber runtime's shared arena (kernels/fiberexec)
// instead of MTLBuffers, and a Replay that executes the Plan: chunk by chunk, command by
// command in plan order (sequential execution satisfies every barrier), each argument
// taken from the plan's (buffer id, offset) — the records from the plan's own arena copy — and
// translated to arena memory. The synthetic addresses the runtime passes to Launch are never
// given to a kernel: they are not mapped in the fiber server, so a kernel reading one faults.
// Direct launches run the same way, the record copied to a scratch buffer (Metal's setBytes).
// Copies and fills are memmoves (the queue is synchronous). The kernels are the generated MSL
// in the fiber runtime, as in the CUDA driver emulator.
//
// What it does not run: the Objective-C calls (newBufferWithBytesNoCopy, the ICB encoding
// itself, useResource residency, command buffers and their waits), concurrency between the
// commands of an ICB (missing barriers are invisible here: see record_test.go's hazard tests),
// and anything about timing.

// emuFiber is the fiber runtime of the test binary, started on first use (one per process:
// its arena is at a fixed address).
var (
	emuOnce sync.Once
	emuX    *fiberexec.Exec
	emuErr  error
)

// emuExec returns the fiber runtime, or skips the test when clang++ is missing.
func emuExec(t testing.TB) *fiberexec.Exec {
	t.Helper()
	emuOnce.Do(func() {
		// Metal: ALIGNED16 false, as the Metal device's MSL has it (its element-wise loads).
		emuX, emuErr = fiberexec.Start(fiberexec.Options{KernelsDir: filepath.Join("..", "..", "..", "kernels"),
			Profile: os.Getenv("LITHOS_METAL_EMULATE_PROFILE") == "1", Metal: true})
	})
	if errors.Is(emuErr, fiberexec.ErrNoCompiler) {
		t.Skip("SKIP: the emulated Metal device needs clang++:", emuErr)
	}
	if emuErr != nil {
		t.Fatalf("start the fiber runtime: %v", emuErr)
	}
	return emuX
}

func TestMain(m *testing.M) {
	code := m.Run()
	if emuX != nil {
		emuX.Stop()
	}
	if emuBundleTemp != "" {
		os.RemoveAll(emuBundleTemp)
	}
	os.Exit(code)
}

// emuPoison fills every new buffer (Alloc's contents are undefined; a NaN shows a read of
// bytes nobody wrote).
const emuPoison = 0x7FC0DEAD

// emuDevice is the emulated Metal device.
type emuDevice struct {
	mu sync.Mutex
	x  *fiberexec.Exec
	space
	// Barriers and MaxCommands are the Recorder's settings for programs recorded from now on.
	Barriers    BarrierMode
	MaxCommands int

	scratch  *Buffer // the record of a direct launch (setBytes)
	launches int     // direct launches (named in errors)
	// Counters of what ran: direct launches, replays, ICB chunks and commands of replays.
	direct, replays, chunks, commands int
	plans                             []*Plan // every plan recorded, in order
}

var (
	_ gpu.Device    = (*emuDevice)(nil)
	_ gpu.Owner     = (*emuDevice)(nil)
	_ gpu.HostOwner = (*emuDevice)(nil)
	_ backing       = (*emuDevice)(nil)
)

// newEmuDevice makes an emulated device; its buffers are freed at cleanup.
func newEmuDevice(t testing.TB) *emuDevice {
	d := &emuDevice{x: emuExec(t)}
	d.space = newSpace(d, 1<<32)
	var err error
	if d.scratch, err = d.newBuf(4096); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		d.release(d.scratch)
		for id, mb := range d.mbufs {
			d.release(mb)
			delete(d.mbufs, id)
		}
	})
	return d
}

// newBuf allocates n bytes of arena memory, poisoned (backing).
func (d *emuDevice) newBuf(n int) (*Buffer, error) {
	p, ok := d.x.Alloc(uintptr(n))
	if !ok {
		return nil, fmt.Errorf("metal emulator: allocate %d bytes: the arena is full", n)
	}
	b := &Buffer{id: p, Len: n, Host: fiberexec.Bytes(p, uintptr(n))}
	for i := 0; i+4 <= n; i += 4 {
		binary.LittleEndian.PutUint32(b.Host[i:], emuPoison)
	}
	return b, nil
}

// wrapNoCopy copies b into arena memory: the fiber server sees only the arena (backing).
func (d *emuDevice) wrapNoCopy(b []byte) (*Buffer, error) {
	mb, err := d.newBuf(len(b))
	if err != nil {
		return nil, err
	}
	copy(mb.Host, b)
	return mb, nil
}

// release frees a buffer's arena memory (backing).
func (d *emuDevice) release(b *Buffer) {
	if b.id != 0 {
		d.x.Free(b.id)
	}
	b.id, b.Host = 0, nil
}

// MapWeights announces b's weights, as the Metal device's MapWeights does.
func (d *emuDevice) MapWeights(b *bundle.Bundle) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.weights = newPendingWeights(b)
}

func (d *emuDevice) Name() string { return "Metal" }

func (d *emuDevice) Fit(what string, need int64) error {
	if free := int64(fiberexec.ArenaSize - d.x.Used()); need > free {
		return fmt.Errorf("metal emulator: %s needs %.2f GB, %.2f GB free", what, float64(need)/1e9, float64(free)/1e9)
	}
	return nil
}

func (d *emuDevice) Alloc(size int64) (*gpu.Buffer, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.allocBuf(size, true, d)
}

func (d *emuDevice) FreeBuffer(b *gpu.Buffer) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.freeBuf(b.Ptr)
}

func (d *emuDevice) Upload(src []byte) (*gpu.Buffer, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	b, err := d.allocBuf(max(int64(len(src)), 1), false, d)
	if err != nil {
		return nil, err
	}
	if err := d.fillNew(b.Ptr, src); err != nil {
		d.freeBuf(b.Ptr)
		return nil, err
	}
	return b, nil
}

func (d *emuDevice) UploadStaged(ctx context.Context, dst *gpu.Buffer, src []byte, desc string) (gpu.UploadStats, error) {
	start := time.Now()
	st := gpu.UploadStats{Bytes: int64(len(src))}
	if done, err := checkUpload(dst, src, desc); done || err != nil {
		return st, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	err := d.stageWeights(ctx, dst, src, desc)
	st.Wall = time.Since(start)
	return st, err
}

func (d *emuDevice) HostAlloc(size int64, mapped bool) (*gpu.HostBuffer, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.allocHost(size, mapped, d)
}

func (d *emuDevice) FreeHost(h *gpu.HostBuffer) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.freeHostBuf(h)
}

func (d *emuDevice) NewQueue() (gpu.Queue, error) { return &emuQueue{d: d}, nil }

func (d *emuDevice) ReadBandwidthGBs() (float64, error) {
	return 0, errors.New("metal emulator: no bandwidth to measure")
}

// Close does nothing: the fiber runtime is the test binary's; the buffers are freed at the
// test's cleanup.
func (d *emuDevice) Close() error { return nil }

// bytesAt returns the n bytes at a device address (a test reads results; lock held or not
// needed: no work runs concurrently).
func (d *emuDevice) bytesAt(addr uint64, n int) ([]byte, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	id, off, err := d.addrs.Span(addr, uint64(n))
	if err != nil {
		return nil, err
	}
	mb, err := d.mtlBuffer(id)
	if err != nil {
		return nil, err
	}
	return mb.Host[off : off+uint64(n)], nil
}

// floats returns n float32 at a device address (a copy).
func (d *emuDevice) floats(t testing.TB, addr uint64, n int) []float32 {
	t.Helper()
	b, err := d.bytesAt(addr, 4*n)
	if err != nil {
		t.Fatal(err)
	}
	f := make([]float32, n)
	for i := range f {
		f[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return f
}

// exec runs one command (lock held): every argument is its Loc — buffer id and offset —
// translated to arena memory; the record argument (RecordsBuf) is in recs.
func (d *emuDevice) exec(c *Command, recs *Buffer) error {
	args := make([]uint64, len(c.Args))
	for i, a := range c.Args {
		mb, err := d.argBuffer(a, recs)
		if err != nil {
			return fmt.Errorf("metal emulator: %s, argument %d: %w", c.Kernel, i, err)
		}
		if int(a.Off) >= mb.Len {
			return fmt.Errorf("metal emulator: %s, argument %d: offset %d in a buffer of %d bytes", c.Kernel, i, a.Off, mb.Len)
		}
		args[i] = uint64(mb.id) + uint64(a.Off)
	}
	return d.x.Launch(c.Pipe, c.Groups, c.Threads, 1, args)
}

// emuQueue is a synchronous queue: launches, copies and replays run when queued.
type emuQueue struct {
	d   *emuDevice
	rec *Recorder // non-nil while Record's enqueue runs
}

func (q *emuQueue) Launch(kernel string, grid [3]uint32, ctl, prm uint64, bufs ...uint64) error {
	d := q.d
	d.mu.Lock()
	defer d.mu.Unlock()
	c := LaunchCall{Kernel: kernel, Grid: grid, Ctl: ctl, Prm: prm, Bufs: bufs}
	if q.rec != nil {
		return q.rec.Launch(c)
	}
	n := d.launches
	d.launches++
	r, err := d.resolve(n, c)
	if err != nil {
		return err
	}
	if len(r.record) > d.scratch.Len {
		return fmt.Errorf("metal emulator: launch %d (%s): a %d-byte record", n, kernel, len(r.record))
	}
	copy(d.scratch.Host, r.record) // setBytes:length:atIndex:
	r.cmd.Args[1] = Loc{Buf: RecordsBuf}
	d.direct++
	return d.exec(&r.cmd, d.scratch)
}

func (q *emuQueue) CopyHtoD(dst *gpu.Buffer, dstOff int64, src *gpu.HostBuffer, srcOff, n int64) error {
	if err := checkHtoD(dst, dstOff, src, srcOff, n); err != nil {
		return err
	}
	q.d.mu.Lock()
	defer q.d.mu.Unlock()
	if q.rec != nil {
		return q.rec.Fail(errRecordCopy("CopyHtoD"))
	}
	if n == 0 {
		return nil
	}
	sb, so, db, do, err := q.d.copyHtoD(dst, dstOff, src, srcOff, n)
	if err != nil {
		return err
	}
	copy(db.Host[do:do+uint64(n)], sb.Host[so:so+uint64(n)])
	return nil
}

func (q *emuQueue) CopyDtoH(dst *gpu.HostBuffer, dstOff int64, src *gpu.Buffer, srcOff, n int64) error {
	if err := checkDtoH(dst, dstOff, src, srcOff, n); err != nil {
		return err
	}
	q.d.mu.Lock()
	defer q.d.mu.Unlock()
	if q.rec != nil {
		return q.rec.Fail(errRecordCopy("CopyDtoH"))
	}
	if n == 0 {
		return nil
	}
	sb, so, db, do, err := q.d.copyDtoH(dst, dstOff, src, srcOff, n)
	if err != nil {
		return err
	}
	copy(db.Host[do:do+uint64(n)], sb.Host[so:so+uint64(n)])
	return nil
}

func (q *emuQueue) Fill32(dst *gpu.Buffer, off, words int64, value uint32) error {
	if err := checkFill(dst, off, words); err != nil {
		return err
	}
	q.d.mu.Lock()
	defer q.d.mu.Unlock()
	if q.rec != nil {
		return q.rec.Fail(errRecordCopy("Fill32"))
	}
	if words == 0 {
		return nil
	}
	db, o, err := q.d.fillLoc(dst, off, words)
	if err != nil {
		return err
	}
	for i := range uint64(words) {
		binary.LittleEndian.PutUint32(db.Host[o+4*i:], value)
	}
	return nil
}

// Record records enqueue's launches into a Plan with the Recorder the Metal device uses, and
// checks every argument's buffer as encodePlan does; the Replay executes the plan.
func (q *emuQueue) Record(enqueue func() error) (gpu.Replay, error) {
	d := q.d
	d.mu.Lock()
	if q.rec != nil {
		d.mu.Unlock()
		return nil, errors.New("metal: record: already recording")
	}
	q.rec = d.recorder(d.Barriers, d.MaxCommands)
	d.mu.Unlock()
	eerr := enqueue()
	d.mu.Lock()
	defer d.mu.Unlock()
	rec := q.rec
	q.rec = nil
	if eerr != nil {
		return nil, eerr
	}
	p, err := rec.Finish()
	if err != nil {
		return nil, err
	}
	rp := &emuReplay{d: d, plan: p}
	if rp.recs, err = d.newBuf(max(len(p.Records), 16)); err != nil {
		return nil, err
	}
	copy(rp.recs.Host, p.Records)
	for i, c := range p.Commands {
		for j, a := range c.Args {
			if _, err := d.argBuffer(a, rp.recs); err != nil {
				d.release(rp.recs)
				return nil, fmt.Errorf("metal: record: command %d (%s), argument %d: %w", i, c.Kernel, j, err)
			}
		}
	}
	d.plans = append(d.plans, p)
	return rp, nil
}

func (q *emuQueue) Wait(time.Duration) error { return nil }
func (q *emuQueue) Close() error             { return nil }

// emuReplay is a recorded plan and its records arena (a copy of Plan.Records in arena memory,
// made at Record: a later change to Plan.Records is not seen, as in an encoded ICB).
type emuReplay struct {
	d    *emuDevice
	plan *Plan
	recs *Buffer
}

// Launch executes the plan: its ICB chunks in order, each chunk's commands in order.
func (r *emuReplay) Launch(gq gpu.Queue) error {
	q, ok := gq.(*emuQueue)
	if !ok || q.d != r.d {
		return errors.New("metal: replay on a queue of another device")
	}
	d := r.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if r.recs == nil {
		return errors.New("metal: replay of a closed program")
	}
	d.replays++
	for _, ch := range r.plan.Chunks() {
		d.chunks++
		for i := ch[0]; i < ch[1]; i++ {
			d.commands++
			if err := d.exec(&r.plan.Commands[i], r.recs); err != nil {
				return fmt.Errorf("metal emulator: replay, command %d: %w", i, err)
			}
		}
	}
	return nil
}

func (r *emuReplay) Close() error {
	r.d.mu.Lock()
	defer r.d.mu.Unlock()
	if r.recs != nil {
		r.d.release(r.recs)
		r.recs = nil
	}
	return nil
}
