//go:build darwin && arm64

package metal

import (
	"errors"
	"fmt"
	"time"
	"unsafe"

	"github.com/ebitengine/purego/objc"

	"lithos/runtime/backend/gpu"
)

// Metal constants used here, as Apple's headers define them (checked against metal-cpp's
// Metal/MTLIndirectCommandBuffer.hpp and MTLComputeCommandEncoder.hpp, Apple's C++ bindings
// generated from the Objective-C headers, 2026-12):
const (
	// MTLIndirectCommandTypeConcurrentDispatch = 1 << 5 (MTLIndirectCommandType).
	icbConcurrentDispatch = 1 << 5
	// MTLResourceUsageRead = 1 << 0, MTLResourceUsageWrite = 1 << 1 (MTLResourceUsage).
	usageRead  = 1
	usageWrite = 2
)

// maxInflight bounds the command buffers a queue has committed and not yet waited for: past
// it, Replay.Launch waits for the oldest (bounded, polling like Wait: the device thread stays
// free for other queues meanwhile).
const maxInflight = 16

// Queue implements gpu.Queue over one MTLCommandQueue. Direct launches (a compute encoder,
// each dispatch after the one before: a serial encoder) and blits (CopyHtoD, CopyDtoH, Fill32)
// go into the command buffer being filled; Wait and Replay.Launch commit it, so copies and
// replays run in the order they were queued (one command queue executes its command
// buffers in commit order). Host copies are blits between shared-storage buffers rather than
// memcpys, because the queue is rarely idle when the runtime queues them (step-state words
// between replays). Nothing here has run on a Mac.
type Queue struct {
	d        *Device
	q        objc.ID   // the MTLCommandQueue; 0 once closed
	cb, enc  objc.ID   // retained: the command buffer being filled and its open encoder
	blit     bool      // enc is a blit encoder
	inflight []objc.ID // committed and retained (and in d.cbs), not yet waited for
	rec      *Recorder // non-nil while Record's enqueue runs
	launches int       // direct launches so far (named in errors)
}

var _ gpu.Queue = (*Queue)(nil)

// encoder returns the open encoder of the kind asked for, ending one of the other kind and
// starting a command buffer when none is being filled (device thread). Objects kept across
// calls are retained: each call drains its autorelease pool. When Metal gives no encoder, the
// command buffer is not kept for the next call: released when this call made it (it holds
// nothing), else committed, so the work queued in it before still runs, in order, and Wait
// waits for it (the caller, queued, then bounds the in-flight list).
func (q *Queue) encoder(blit bool) (objc.ID, error) {
	if q.q == 0 {
		return 0, errors.New("metal: the queue is closed")
	}
	fresh := false
	if q.cb == 0 {
		cb := q.q.Send(sel("commandBuffer"))
		if cb == 0 {
			return 0, errors.New("metal: commandBuffer returned nil")
		}
		q.cb, fresh = cb.Send(sel("retain")), true
	}
	if q.enc != 0 && q.blit != blit {
		q.endEncoder()
	}
	if q.enc == 0 {
		name := "computeCommandEncoder"
		if blit {
			name = "blitCommandEncoder"
		}
		enc := q.cb.Send(sel(name))
		if enc == 0 {
			if fresh {
				q.cb.Send(sel("release"))
				q.cb = 0
			} else {
				q.commit()
			}
			return 0, fmt.Errorf("metal: %s returned nil", name)
		}
		q.enc, q.blit = enc.Send(sel("retain")), blit
	}
	return q.enc, nil
}

func (q *Queue) endEncoder() {
	if q.enc != 0 {
		q.enc.Send(sel("endEncoding"))
		q.enc.Send(sel("release"))
		q.enc = 0
	}
}

// commit commits the command buffer being filled, if any, to the in-flight list (device
// thread). It waits for nothing: Wait and bound do, off the device thread.
func (q *Queue) commit() {
	q.endEncoder()
	if q.cb != 0 {
		q.cb.Send(sel("commit"))
		q.track(q.cb)
		q.cb = 0
	}
}

// track adds a committed, retained command buffer to the in-flight list and to the device's
// ledger (d.cbs: Device.Close waits for it, whatever becomes of this queue's waits).
func (q *Queue) track(cb objc.ID) {
	q.inflight = append(q.inflight, cb)
	q.d.cbs.add(cb)
}

// queued runs f on the device thread, then, when the in-flight list has grown past
// maxInflight (a commit in f: Replay.Launch, encoder's no-encoder path), bounds it; the error
// is f's, joined with bound's.
func (q *Queue) queued(f func() error) error {
	over := false
	err := q.d.do(func() error {
		err := f()
		over = len(q.inflight) > maxInflight
		return err
	})
	if !over {
		return err
	}
	if berr := q.bound(); berr != nil {
		return errors.Join(err, berr)
	}
	return err
}

// bound waits for the oldest committed command buffers while more than maxInflight are in
// flight: each is taken off the list in one short call on the device thread, then awaited
// like Wait's (every poll one short call), so other queues and Alloc, Fit, … keep running.
// Not on the device thread.
func (q *Queue) bound() error {
	for {
		var cb objc.ID
		if err := q.d.do(func() error {
			if len(q.inflight) > maxInflight {
				cb = q.inflight[0]
				q.inflight = q.inflight[1:]
			}
			return nil
		}); err != nil || cb == 0 {
			return err
		}
		what := fmt.Sprintf("queue (the oldest of more than %d command buffers in flight)", maxInflight)
		if err := q.awaitList([]objc.ID{cb}, q.d.Timeout, what); err != nil {
			return err
		}
	}
}

// awaitList waits for the committed, retained command buffers of list in commit order, at
// most timeout + DrainWait in all (awaitHeld: the rest are still awaited after one fails;
// each poll of a status is one short call on the device thread). Each that ends is taken off
// the device's ledger and released (finish); when the first still running after the bounds
// is found the device is broken (stall: ErrStuck). That one, every later one, and all of them
// when the device breaks or closes during the wait, stay in the ledger for Close. Not on the
// device thread.
func (q *Queue) awaitList(list []objc.ID, timeout time.Duration, what string) error {
	name := func(i int) string {
		if len(list) == 1 {
			return what
		}
		return fmt.Sprintf("%s (command buffer %d of %d)", what, i+1, len(list))
	}
	return awaitHeld(q.d.do, &q.d.cbs, list, newWaiter(timeout, q.d.DrainWait, realClock{}), cbStatus,
		func(i int, r waitResult) error { return q.d.finish(list[i], r, timeout, name(i)) },
		func(i int, r waitResult) error { return q.d.stall(r, timeout, name(i)) })
}

// finish ends the wait for a committed, retained command buffer that is no longer running
// (device thread): it is released; the error names what when it failed, or completed late
// (ErrTimeout: the GPU is done with it, the device stays usable).
func (d *Device) finish(cb objc.ID, r waitResult, timeout time.Duration, what string) error {
	var err error
	switch {
	case r.state == cbFailed:
		err = fmt.Errorf("metal: %s: command buffer error: %s", what, describe(cb.Send(sel("error"))))
	case r.late:
		err = fmt.Errorf("metal: %s: completed after %v, past its %v timeout: %w", what, r.waited, timeout, ErrTimeout)
	}
	cb.Send(sel("release"))
	return err
}

// stall marks the device broken (device thread) after a command buffer, kept in the ledger
// (d.cbs) for Close to poll again, is still running after its wait's bounds: the GPU may still
// use any of the device's memory, so nothing of it may be freed. The error wraps ErrStuck (a
// gpu.ErrDeviceBusy).
func (d *Device) stall(r waitResult, timeout time.Duration, what string) error {
	err := fmt.Errorf("metal: %s: still running %v after its %v timeout: %w; the GPU may still be using the device's memory: the device is unusable, keep its buffers and no-copy memory", what, r.waited, timeout, ErrStuck)
	d.fail(err)
	return err
}

// Launch queues kernel over grid threadgroups (gpu.Queue.Launch): while recording, it adds
// the launch to the recording; otherwise it resolves every address (resolveLaunch: errors
// name the launch, kernel and argument) and encodes a dispatch, the parameter record copied
// with setBytes:length:atIndex: (read now, from the record's shared storage).
func (q *Queue) Launch(kernel string, grid [3]uint32, ctl, prm uint64, bufs ...uint64) error {
	return q.queued(func() error {
		c := LaunchCall{Kernel: kernel, Grid: grid, Ctl: ctl, Prm: prm, Bufs: bufs}
		if q.rec != nil {
			return q.rec.Launch(c)
		}
		n := q.launches
		q.launches++
		r, err := q.d.resolve(n, c)
		if err != nil {
			return err
		}
		pipe := q.d.pipes[kernel]
		if pipe == 0 {
			return fmt.Errorf("metal: launch %d: no pipeline for kernel %s", n, kernel)
		}
		enc, err := q.encoder(false)
		if err != nil {
			return err
		}
		enc.Send(sel("setComputePipelineState:"), pipe)
		for i, a := range r.cmd.Args {
			if i == 1 {
				enc.Send(sel("setBytes:length:atIndex:"), unsafe.Pointer(&r.record[0]), uint64(len(r.record)), uint64(1))
				continue
			}
			mb, err := q.d.mtlBuffer(a.Buf)
			if err != nil {
				return fmt.Errorf("metal: launch %d (%s), argument %d: %w", n, kernel, i, err)
			}
			enc.Send(sel("setBuffer:offset:atIndex:"), objc.ID(mb.id), uint64(a.Off), uint64(i))
		}
		g := mtlSize{uint64(grid[0]), uint64(grid[1]), uint64(grid[2])}
		tpg := mtlSize{uint64(r.cmd.Threads), 1, 1}
		enc.Send(sel("dispatchThreadgroups:threadsPerThreadgroup:"), unsafe.Pointer(&g), unsafe.Pointer(&tpg))
		return nil
	})
}

// CopyHtoD queues a blit of n bytes from the host buffer src at srcOff to dst at dstOff.
func (q *Queue) CopyHtoD(dst *gpu.Buffer, dstOff int64, src *gpu.HostBuffer, srcOff, n int64) error {
	if err := checkHtoD(dst, dstOff, src, srcOff, n); err != nil {
		return err
	}
	return q.queued(func() error {
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
		return q.blitCopy(sb, so, db, do, uint64(n), "CopyHtoD")
	})
}

// CopyDtoH queues a blit of n bytes from src at srcOff to the host buffer dst at dstOff.
func (q *Queue) CopyDtoH(dst *gpu.HostBuffer, dstOff int64, src *gpu.Buffer, srcOff, n int64) error {
	if err := checkDtoH(dst, dstOff, src, srcOff, n); err != nil {
		return err
	}
	return q.queued(func() error {
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
		return q.blitCopy(sb, so, db, do, uint64(n), "CopyDtoH")
	})
}

func (q *Queue) blitCopy(sb *Buffer, so uint64, db *Buffer, do, n uint64, op string) error {
	if err := blitCheck(op, so, do, n); err != nil {
		return err
	}
	enc, err := q.encoder(true)
	if err != nil {
		return err
	}
	enc.Send(sel("copyFromBuffer:sourceOffset:toBuffer:destinationOffset:size:"), objc.ID(sb.id), so, objc.ID(db.id), do, n)
	return nil
}

// Fill32 queues setting words 4-byte words of dst from byte off to value: fillBuffer:range:
// value: when the value's four bytes are equal (0, 0xFFFFFFFF), else blits of a pattern
// buffer (at most 64 MiB, released once encoded: the command buffer retains it).
func (q *Queue) Fill32(dst *gpu.Buffer, off, words int64, value uint32) error {
	if err := checkFill(dst, off, words); err != nil {
		return err
	}
	return q.queued(func() error {
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
		if b := byte(value); value == uint32(b)*0x01010101 {
			enc, err := q.encoder(true)
			if err != nil {
				return err
			}
			// NSRange {location, length} is a 16-byte composite: AAPCS64 passes it in two
			// general registers, as two NSUInteger arguments would be.
			enc.Send(sel("fillBuffer:range:value:"), objc.ID(db.id), o, uint64(4*words), b)
			return nil
		}
		chunk := min(words, 16<<20)
		pb, err := q.d.newBuf(int(4 * chunk))
		if err != nil {
			return err
		}
		defer q.d.release(pb)
		for i := int64(0); i < chunk; i++ {
			*(*uint32)(unsafe.Pointer(&pb.Host[4*i])) = value
		}
		for done := int64(0); done < words; done += chunk {
			n := min(chunk, words-done)
			if err := q.blitCopy(pb, 0, db, o+uint64(4*done), uint64(4*n), "Fill32"); err != nil {
				return err
			}
		}
		return nil
	})
}

// Record runs enqueue with the queue recording (gpu.Queue.Record): its launches are resolved
// and their records copied (Recorder), nothing runs; the plan is encoded into indirect command
// buffers (encodePlan) with the device's Barriers rule. Errors: a launch's (naming it), a copy
// or fill inside enqueue, enqueue's own, an ICB Metal would not create.
func (q *Queue) Record(enqueue func() error) (gpu.Replay, error) {
	if err := q.d.do(func() error {
		if q.rec != nil {
			return errors.New("metal: record: already recording")
		}
		q.rec = q.d.recorder(q.d.Barriers, 0)
		return nil
	}); err != nil {
		return nil, err
	}
	eerr := enqueue()
	var rp *Replay
	err := q.d.do(func() error {
		rec := q.rec
		q.rec = nil
		if eerr != nil {
			return eerr
		}
		p, err := rec.Finish()
		if err != nil {
			return err
		}
		rp, err = q.d.encodePlan(p)
		return err
	})
	if err != nil {
		return nil, err
	}
	return rp, nil
}

// Wait commits the command buffer being filled and waits for every command buffer the queue
// committed, in order, at most timeout (≤ 0: Device.Timeout) plus one DrainWait in all; each
// poll of a status is one short call on the device thread, so other queues keep queuing
// meanwhile. A failed command buffer does not end the wait: the ones after it may still be
// running, so they are still awaited before Wait returns. Errors: the first command buffer's
// error or ErrTimeout (done within DrainWait after the bound), joined with ErrStuck (a
// gpu.ErrDeviceBusy: one still running after both; the GPU may still be using the device's
// memory, the device is broken) or the device's error when it closed or broke meanwhile.
func (q *Queue) Wait(timeout time.Duration) error {
	if timeout <= 0 {
		timeout = q.d.Timeout
	}
	var list []objc.ID
	if err := q.d.do(func() error {
		q.commit()
		list, q.inflight = q.inflight, nil
		return nil
	}); err != nil {
		return err
	}
	return q.awaitList(list, timeout, "wait")
}

// Close commits what is being filled (queued work still completes) and releases the command
// queue. Its command buffers in flight are handed to the device (ledger.orphan): released
// once they have ended (checked at each Queue.Close), awaited by Device.Close. A second Close
// does nothing.
func (q *Queue) Close() error {
	return q.d.do(func() error {
		if q.q == 0 {
			return nil
		}
		q.commit()
		q.d.cbs.orphan(q.inflight, cbStatus, func(cb objc.ID) { cb.Send(sel("release")) })
		q.inflight = nil
		q.q.Send(sel("release"))
		q.q = 0
		return nil
	})
}

// Replay is a recorded program (gpu.Replay): its plan encoded into indirect command buffers
// (one per Plan.Chunks range), the records arena and the resources declared resident on every
// replay.
type Replay struct {
	d     *Device
	plan  *Plan
	recs  *Buffer
	icbs  []objc.ID
	uses  []objc.ID
	usage []uint64
}

var _ gpu.Replay = (*Replay)(nil)

// encodePlan creates the records arena and the indirect command buffers of p and encodes
// every command (device thread). Selectors and values checked against metal-cpp
// (MTLIndirectCommandBuffer.hpp, MTLIndirectCommandEncoder.hpp): descriptor commandTypes
// ConcurrentDispatch, inheritBuffers NO, inheritPipelineState NO, maxKernelBufferBindCount;
// newIndirectCommandBufferWithDescriptor:maxCommandCount:options:; per command
// indirectComputeCommandAtIndex:, setComputePipelineState:, setKernelBuffer:offset:atIndex:,
// setBarrier, concurrentDispatchThreadgroups:threadsPerThreadgroup: (two MTLSize, 24 bytes
// each: passed by reference under AAPCS64, as Dispatch does).
func (d *Device) encodePlan(p *Plan) (*Replay, error) {
	rp := &Replay{d: d, plan: p}
	var err error
	if rp.recs, err = d.newBuf(max(len(p.Records), 16)); err != nil {
		return nil, err
	}
	copy(rp.recs.Host, p.Records)
	fail := func(err error) (*Replay, error) {
		rp.release()
		return nil, err
	}
	for _, u := range p.Resident {
		mb, err := d.argBuffer(Loc{Buf: u.Buf}, rp.recs)
		if err != nil {
			return fail(err)
		}
		use := uint64(usageRead)
		if u.Write {
			use |= usageWrite
		}
		rp.uses, rp.usage = append(rp.uses, objc.ID(mb.id)), append(rp.usage, use)
	}
	for _, ch := range p.Chunks() {
		desc := objc.ID(objc.GetClass("MTLIndirectCommandBufferDescriptor")).Send(sel("new"))
		desc.Send(sel("setCommandTypes:"), uint64(icbConcurrentDispatch))
		desc.Send(sel("setInheritBuffers:"), false)
		desc.Send(sel("setInheritPipelineState:"), false)
		desc.Send(sel("setMaxKernelBufferBindCount:"), uint64(p.MaxBind))
		icb := d.dev.Send(sel("newIndirectCommandBufferWithDescriptor:maxCommandCount:options:"), desc, uint64(ch[1]-ch[0]), uint64(0))
		desc.Send(sel("release"))
		if icb == 0 {
			return fail(fmt.Errorf("metal: record: newIndirectCommandBufferWithDescriptor for %d commands returned nil", ch[1]-ch[0]))
		}
		rp.icbs = append(rp.icbs, icb)
		for i := ch[0]; i < ch[1]; i++ {
			c := p.Commands[i]
			pipe := d.pipes[c.Kernel]
			if pipe == 0 {
				return fail(fmt.Errorf("metal: record: command %d: no pipeline for kernel %s", i, c.Kernel))
			}
			cmd := icb.Send(sel("indirectComputeCommandAtIndex:"), uint64(i-ch[0]))
			cmd.Send(sel("setComputePipelineState:"), pipe)
			for j, a := range c.Args {
				mb, err := d.argBuffer(a, rp.recs)
				if err != nil {
					return fail(fmt.Errorf("metal: record: command %d (%s), argument %d: %w", i, c.Kernel, j, err))
				}
				cmd.Send(sel("setKernelBuffer:offset:atIndex:"), objc.ID(mb.id), uint64(a.Off), uint64(j))
			}
			if c.Barrier {
				cmd.Send(sel("setBarrier"))
			}
			g := mtlSize{uint64(c.Groups[0]), uint64(c.Groups[1]), uint64(c.Groups[2])}
			tpg := mtlSize{uint64(c.Threads), 1, 1}
			cmd.Send(sel("concurrentDispatchThreadgroups:threadsPerThreadgroup:"), unsafe.Pointer(&g), unsafe.Pointer(&tpg))
		}
	}
	return rp, nil
}

// release drops the replay's objects (device thread).
func (r *Replay) release() {
	for _, icb := range r.icbs {
		icb.Send(sel("release"))
	}
	r.icbs, r.uses, r.usage = nil, nil, nil
	if r.recs != nil {
		r.d.release(r.recs)
		r.recs = nil
	}
}

// Launch queues one replay on gq, the queue that recorded it (gpu.Replay.Launch): the queue's
// pending work is committed first, then a command buffer with, per ICB, a compute encoder
// that declares every resource of the plan resident (useResource:usage:, read or read-write;
// an MTLResidencySet, macOS 15+, is not used) and executes the ICB's commands
// (executeCommandsInBuffer:withRange:), committed at once (one round per command buffer, as
// the reference engine does, lithos-metal.md §6.3). With more than maxInflight command
// buffers in flight it then waits for the oldest (bound); its error is that wait's.
func (r *Replay) Launch(gq gpu.Queue) error {
	q, ok := gq.(*Queue)
	if !ok || q.d != r.d {
		return errors.New("metal: replay on a queue of another device")
	}
	return q.queued(func() error {
		if r.icbs == nil {
			return errors.New("metal: replay of a closed program")
		}
		q.commit()
		if q.q == 0 {
			return errors.New("metal: the queue is closed")
		}
		cb := q.q.Send(sel("commandBuffer"))
		if cb == 0 {
			return errors.New("metal: commandBuffer returned nil")
		}
		for i, ch := range r.plan.Chunks() {
			enc := cb.Send(sel("computeCommandEncoder"))
			if enc == 0 {
				return errors.New("metal: computeCommandEncoder returned nil")
			}
			for j, u := range r.uses {
				enc.Send(sel("useResource:usage:"), u, r.usage[j])
			}
			// NSRange {location, length}: two general registers under AAPCS64.
			enc.Send(sel("executeCommandsInBuffer:withRange:"), r.icbs[i], uint64(0), uint64(ch[1]-ch[0]))
			enc.Send(sel("endEncoding"))
		}
		cb.Send(sel("commit"))
		q.track(cb.Send(sel("retain")))
		return nil
	})
}

// Close releases the indirect command buffers and the records arena; a second Close does
// nothing. No replay of it may be in flight: a command buffer is not documented to retain the
// ICBs it executes nor the resources declared only with useResource:usage:, so close it after
// a Wait on its queue (after an ErrStuck the device is broken and Close releases nothing).
func (r *Replay) Close() error {
	return r.d.do(func() error {
		r.release()
		return nil
	})
}
