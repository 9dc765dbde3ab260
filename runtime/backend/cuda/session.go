//go:build linux && amd64

package cuda

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"lithos/kernels"
	"lithos/runtime/backend"
	"lithos/runtime/bundle"
	"lithos/runtime/model"
)

// Session is one sequence on the GPU (backend.Session): the step state words (ctl) and every
// activation, KV cache and two-slot GDN/conv state in device memory, the token ring in mapped
// pinned host memory that the device writes directly. Each step is a recorded program replayed
// as a CUDA graph: decode (lithos_step StepBegin → the model over the anchor row → LM head →
// argmax → StepAccept, which pushes the token, commits the position and sets done on EOS,
// StopAt, a full ring or a full context) and prefill chunks of at most MaxStepRows rows
// (StepPrefill; the last chunk runs the head and pushes the first token). Inside a call the host
// only queues: Prefill queues every chunk (each with its host-written Rows/Pending/PrefillLeft
// words copied on the same stream) and Decode(k) queues k replays; the one wait is at the end,
// bounded by the device's Timeout. Between calls the host's StepState is synchronised with
// the device's words and the ring's new slots are mirrored into Ring().
//
// Sampling is greedy only (temperature 0: the argmax kernel); speculative rounds are not run
// on the GPU yet.
type Session struct {
	t     *Target
	d     *Device
	s     *Stream
	opt   backend.SessionOptions
	ss    *backend.StepState
	ring  *backend.Ring
	words stepWords
	plans []layerPlan
	// useGraphs replays captured CUDA graphs (the default); false launches the kernels one by
	// one (tests compare the two).
	useGraphs bool

	ctl       *Buffer     // step-state words
	ctlHost   *HostBuffer // pinned staging of the step state and the per-chunk words
	ringHost  *HostBuffer // the token ring, mapped: [RingCapacity] u64
	eos       *Buffer
	targets   *Buffer // i32 [MaxStepRows]
	invFreq   *Buffer
	finalNorm uint64
	head      *Matrix
	embDType  uint32

	x, hn, zqkv, ab, conv, beta, g, o, qkv, qn, kn, att, pm, pl, po, act, logits, pv, pi *Buffer
	gdnState, convState, kc, vc                                                          []*Buffer
	parts                                                                                int

	decode  *program
	prefill map[[2]int]*program // by (rows, last)
	stats   backend.RoundStats
	closed  bool
}

// NewSession allocates a sequence on the GPU (backend.Target). Errors: options out of range
// (SessionOptions.Normalize), sampling other than greedy, a drafter, state that does not fit
// the free device memory (checked before allocating).
func (t *Target) NewSession(opt backend.SessionOptions) (backend.Session, error) {
	return t.newSession(opt, true)
}

func (t *Target) newSession(opt backend.SessionOptions, graphs bool) (*Session, error) {
	c := &t.Cfg
	if err := opt.Normalize(c.Vocab); err != nil {
		return nil, err
	}
	if opt.Sampling.Temperature != 0 {
		return nil, fmt.Errorf("cuda: session: temperature %v: the CUDA backend samples greedily only (temperature 0) until its sampling kernel exists", opt.Sampling.Temperature)
	}
	if opt.Drafter != nil {
		return nil, errors.New("cuda: session: speculative decoding does not run on the CUDA backend yet (use --no-draft)")
	}
	if opt.Capacity > 1<<24 {
		return nil, fmt.Errorf("cuda: session: context %d is past the kernels' 32-bit offsets", opt.Capacity)
	}
	tmax := max(opt.PrefillChunk, backend.DecodeRows)
	words, err := newStepWords(tmax)
	if err != nil {
		return nil, err
	}
	plans, err := t.plan()
	if err != nil {
		return nil, fmt.Errorf("bundle %s: %w", t.Bundle.Dir, err)
	}
	s := &Session{t: t, d: t.Device, opt: opt, words: words, plans: plans, useGraphs: graphs,
		ss: backend.NewStepState(tmax, opt.Sampling.Seed), ring: backend.NewRing(opt.RingCapacity), prefill: map[[2]int]*program{}}
	s.ss.Anchor = -1
	// Sizes (floats) of the scratch, for MaxStepRows rows.
	R := MaxStepRows
	h := c.Hidden
	vd, cd := c.VHeads*c.VDim, c.ConvDim()
	hd := c.HeadDim
	qd, kvd := c.Heads*hd, c.KVHeads*hd
	s.parts = (opt.Capacity + AttnPartition - 1) / AttnPartition
	ar := kernels.NewArgmaxParams(1, c.Vocab)
	ng, na := c.Count(model.GDN), c.Count(model.Attention)
	sizes := []struct {
		dst **Buffer
		n   int
	}{
		{&s.x, R * h}, {&s.hn, R * h}, {&s.zqkv, R * (vd + cd)}, {&s.ab, R * 2 * c.VHeads}, {&s.conv, R * cd},
		{&s.beta, R * c.VHeads}, {&s.g, R * c.VHeads}, {&s.o, R * vd}, {&s.qkv, R * (2*qd + 2*kvd)}, {&s.qn, R * qd},
		{&s.kn, R * kvd}, {&s.att, R * qd}, {&s.pm, R * c.Heads * s.parts}, {&s.pl, R * c.Heads * s.parts},
		{&s.po, R * c.Heads * s.parts * hd}, {&s.act, R * c.Intermediate}, {&s.logits, c.Vocab},
		{&s.pv, int(ar.Parts)}, {&s.pi, int(ar.Parts)}, {&s.targets, MaxStepRows},
	}
	var need int64
	for _, z := range sizes {
		need += 4 * int64(max(z.n, 4))
	}
	gdnBytes := 4 * int64(2*c.VHeads*c.KDim*c.VDim)
	convBytes := 4 * int64(2*(c.ConvKernel-1)*cd)
	kvBytes := 4 * int64(opt.Capacity) * int64(kvd)
	need += int64(ng)*(gdnBytes+convBytes) + int64(na)*2*kvBytes
	if err := s.d.Fit(fmt.Sprintf("a session of %d positions (KV cache, GDN state, activations)", opt.Capacity), need); err != nil {
		return nil, err
	}
	fail := func(err error) (*Session, error) {
		s.Close()
		return nil, err
	}
	if s.s, err = s.d.NewStream(); err != nil {
		return fail(err)
	}
	for _, z := range sizes {
		if *z.dst, err = s.d.Alloc(4 * int64(max(z.n, 4))); err != nil {
			return fail(err)
		}
	}
	zero := func(size int64) (*Buffer, error) {
		b, err := s.d.Alloc(size)
		if err != nil {
			return nil, err
		}
		if err := s.s.Fill32(b, 0, size/4, 0); err != nil {
			b.Free()
			return nil, err
		}
		return b, nil
	}
	for range ng {
		b, err := zero(gdnBytes)
		if err != nil {
			return fail(err)
		}
		s.gdnState = append(s.gdnState, b)
		if b, err = zero(convBytes); err != nil {
			return fail(err)
		}
		s.convState = append(s.convState, b)
	}
	for range na {
		for _, dst := range []*[]*Buffer{&s.kc, &s.vc} {
			b, err := zero(max(kvBytes, 4))
			if err != nil {
				return fail(err)
			}
			*dst = append(*dst, b)
		}
	}
	if s.ctl, err = s.d.Alloc(int64(4 * words.Words)); err != nil {
		return fail(err)
	}
	if s.ctlHost, err = s.d.HostAlloc(int64(4*words.Words)*(1+8192), false, false); err != nil {
		return fail(err)
	}
	if s.ringHost, err = s.d.HostAlloc(8*int64(opt.RingCapacity), true, false); err != nil {
		return fail(err)
	}
	clear(s.ringHost.Bytes)
	eos := make([]byte, 4*max(len(opt.EOS), 1))
	for i, id := range opt.EOS {
		binary.LittleEndian.PutUint32(eos[4*i:], uint32(id))
	}
	if s.eos, err = s.d.Upload(eos); err != nil {
		return fail(err)
	}
	if s.invFreq, err = s.d.Upload(Float32Bytes(model.NewRope(c.RopeTheta, max(c.RotaryDim, 2)).InvFreq)); err != nil {
		return fail(err)
	}
	var ok bool
	if s.finalNorm, _, ok = t.Vector("norm"); !ok {
		return fail(fmt.Errorf("bundle %s: no final norm vector", t.Bundle.Dir))
	}
	if s.head, ok = t.mats["lm_head"]; !ok || int(s.head.Geometry.N) != c.Vocab || int(s.head.Geometry.K) != h {
		return fail(fmt.Errorf("bundle %s: no packed lm_head [%d, %d] (tied embeddings do not run on CUDA yet)", t.Bundle.Dir, c.Vocab, h))
	}
	emb, ok := t.Bundle.Tensor("embed_tokens")
	if !ok || len(emb.Shape) != 2 || emb.Shape[0] != int64(c.Vocab) || emb.Shape[1] != int64(h) {
		return fail(fmt.Errorf("bundle %s: no embed_tokens [%d, %d]", t.Bundle.Dir, c.Vocab, h))
	}
	switch emb.Format {
	case "BF16":
		s.embDType = 1
	case "F32":
		s.embDType = 0
	default:
		return fail(fmt.Errorf("bundle %s: tensor embed_tokens is %s; the CUDA gather reads BF16 or F32", t.Bundle.Dir, emb.Format))
	}
	if s.decode, err = s.buildProgram(progDecode, 1, true); err != nil {
		return fail(err)
	}
	if err := s.s.Wait(0); err != nil {
		return fail(err)
	}
	return s, nil
}

// State returns the host view of the step state (synchronised at the end of every call).
func (s *Session) State() *backend.StepState { return s.ss }

// Ring returns the token ring's host mirror.
func (s *Session) Ring() *backend.Ring { return s.ring }

// Stats returns the decode telemetry (PlainSteps, VerifyTime: the wall time of Decode calls).
func (s *Session) Stats() backend.RoundStats { return s.stats }

// pushState copies the host's step state to the device words, on the session stream.
func (s *Session) pushState() error {
	b, err := s.ss.MarshalBinary()
	if err != nil {
		return err
	}
	copy(s.ctlHost.Bytes, b)
	return s.s.CopyHtoD(s.ctl, 0, s.ctlHost, 0, int64(len(b)))
}

// pullState waits for the stream, reads the device words into the host's step state and
// mirrors the ring slots the device wrote.
func (s *Session) pullState() error {
	n := int64(4 * s.words.Words)
	if err := s.s.CopyDtoH(s.ctlHost, 0, s.ctl, 0, n); err != nil {
		return err
	}
	if err := s.s.Wait(0); err != nil {
		return err
	}
	head0 := s.ss.RingHead
	if err := s.ss.UnmarshalBinary(s.ctlHost.Bytes[:n]); err != nil {
		return err
	}
	cap := uint32(s.ring.Capacity())
	tmp := backend.StepState{RingTail: s.ss.RingTail}
	for h := head0; h != s.ss.RingHead; h++ {
		v := binary.LittleEndian.Uint64(s.ringHost.Bytes[8*(h%cap):])
		if uint32(v>>32) != h+1 {
			return fmt.Errorf("cuda: ring slot %d holds sequence %d, want %d", h%cap, v>>32, h+1)
		}
		tmp.RingHead = h
		tmp.RingTail = min(s.ss.RingTail, h) // the device checked the room already
		if !s.ring.Push(&tmp, int32(uint32(v))) {
			return fmt.Errorf("cuda: ring mirror overflow at %d", h)
		}
	}
	return nil
}

// ErrDone is returned by Prefill on a session whose step state says done.
var ErrDone = errors.New("session: done (a stop condition was met)")

// Prefill implements backend.Session: the prompt in chunks of min(PrefillChunk, MaxStepRows)
// rows, all queued before the one wait.
func (s *Session) Prefill(ctx context.Context, prompt []int32) error {
	ss := s.ss
	if s.closed {
		return errors.New("session: closed")
	}
	if ss.Done != 0 {
		return ErrDone
	}
	if len(prompt) == 0 {
		return errors.New("prefill: empty prompt")
	}
	vocab := s.t.Cfg.Vocab
	for i, t := range prompt {
		if t < 0 || int(t) >= vocab {
			return fmt.Errorf("prefill: token %d (prompt position %d) is outside the vocabulary [0, %d)", t, i, vocab)
		}
	}
	if int(ss.Position)+len(prompt) > s.opt.Capacity {
		return fmt.Errorf("prefill: %d prompt tokens at position %d exceed the context of %d", len(prompt), ss.Position, s.opt.Capacity)
	}
	chunk := min(s.opt.PrefillChunk, MaxStepRows)
	steps := (len(prompt) + chunk - 1) / chunk
	if err := s.pushState(); err != nil {
		return err
	}
	wb := int64(4 * s.words.Words)
	slots := int64(len(s.ctlHost.Bytes))/wb - 1
	for i := 0; i < steps; i++ {
		if err := ctx.Err(); err != nil {
			s.pullState()
			return err
		}
		rows := prompt[i*chunk : min((i+1)*chunk, len(prompt))]
		left := steps - 1 - i
		p, err := s.prefillProgram(len(rows), left == 0)
		if err != nil {
			return err
		}
		if i > 0 && int64(i)%slots == 0 { // reusing staging slots: let the earlier copies finish
			if err := s.s.Wait(0); err != nil {
				return err
			}
		}
		// Host-written words of this chunk: Rows, Pending[0…n) (contiguous) and PrefillLeft.
		off := wb * (1 + int64(i)%slots)
		st := s.ctlHost.Bytes[off : off+wb]
		binary.LittleEndian.PutUint32(st[4*s.words.Rows:], uint32(len(rows)))
		for j, t := range rows {
			binary.LittleEndian.PutUint32(st[4*(int(s.words.Pending)+j):], uint32(t))
		}
		binary.LittleEndian.PutUint32(st[4*s.words.PrefillLeft:], uint32(left))
		if s.words.Pending != s.words.Rows+1 {
			return errors.New("cuda: step state layout: Pending does not follow Rows")
		}
		if err := s.s.CopyHtoD(s.ctl, 4*int64(s.words.Rows), s.ctlHost, off+4*int64(s.words.Rows), 4*int64(1+len(rows))); err != nil {
			return err
		}
		if err := s.s.CopyHtoD(s.ctl, 4*int64(s.words.PrefillLeft), s.ctlHost, off+4*int64(s.words.PrefillLeft), 4); err != nil {
			return err
		}
		if err := s.run(p); err != nil {
			return err
		}
	}
	return s.pullState()
}

func (s *Session) prefillProgram(n int, last bool) (*program, error) {
	k := [2]int{n, 0}
	if last {
		k[1] = 1
	}
	if p, ok := s.prefill[k]; ok {
		return p, nil
	}
	p, err := s.buildProgram(progPrefill, n, last)
	if err != nil {
		return nil, err
	}
	s.prefill[k] = p
	return p, nil
}

// Decode implements backend.Session: steps replays of the decode graph queued back to back,
// then one bounded wait.
func (s *Session) Decode(ctx context.Context, steps int) error {
	if s.closed {
		return errors.New("session: closed")
	}
	if s.ss.Done != 0 || steps <= 0 {
		return nil
	}
	if s.ss.Anchor < 0 {
		return errors.New("decode: no token to feed (run Prefill first)")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	start := time.Now()
	if err := s.pushState(); err != nil {
		return err
	}
	for range steps {
		if err := s.run(s.decode); err != nil {
			return err
		}
	}
	step0 := s.ss.Step
	if err := s.pullState(); err != nil {
		return err
	}
	s.stats.PlainSteps += int(s.ss.Step - step0)
	s.stats.VerifyTime += time.Since(start)
	return nil
}

// Close releases the session's device state.
func (s *Session) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	if s.s != nil {
		s.s.Wait(0)
	}
	if s.decode != nil {
		s.decode.close()
	}
	for _, p := range s.prefill {
		p.close()
	}
	for _, b := range []*Buffer{s.ctl, s.eos, s.targets, s.invFreq, s.x, s.hn, s.zqkv, s.ab, s.conv, s.beta, s.g, s.o, s.qkv, s.qn,
		s.kn, s.att, s.pm, s.pl, s.po, s.act, s.logits, s.pv, s.pi} {
		b.Free()
	}
	for _, l := range [][]*Buffer{s.gdnState, s.convState, s.kc, s.vc} {
		for _, b := range l {
			b.Free()
		}
	}
	s.ctlHost.Free()
	s.ringHost.Free()
	return s.s.Close()
}

// LoadDraft returns nil, nil: the DSpark draft head does not run on the CUDA backend yet, so
// sessions decode one row per step (greedy output is the same with and without a drafter,
// ARCHITECTURE.md §3.5). A bundle's draft head is left unused.
func (t *Target) LoadDraft(context.Context, *bundle.Bundle) (backend.Drafter, error) {
	return nil, nil
}
