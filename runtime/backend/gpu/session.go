package gpu

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"lithos/kernels"
	"lithos/runtime/backend"
	"lithos/runtime/model"
)

// Session is one sequence on the GPU (backend.Session): the step state words (ctl) and every
// activation, KV cache and two-slot GDN/conv state in device memory, the token ring in mapped
// host memory that the device writes directly. Each step is a recorded program replayed
// (Queue.Record: a CUDA graph, a Metal indirect command buffer): decode (lithos_step StepBegin → the model over the anchor row → LM head →
// argmax → StepAccept, which pushes the token, commits the position and sets done on EOS,
// StopAt, a full ring or a full context) and prefill chunks of at most MaxStepRows rows
// (StepPrefill; the last chunk runs the head and pushes the first token). Inside a call the host
// only queues: Prefill queues every chunk (each with its host-written Rows/Pending/PrefillLeft
// words copied on the same queue) and Decode(k) queues k replays; the one wait is at the end,
// bounded by the device's default bound. Between calls the host's StepState is synchronised with
// the device's words and the ring's new slots are mirrored into Ring().
//
// Tokens are the argmax at temperature 0 and lithos_sample's counter-based draw otherwise
// (runtime/sample's rule, at the position the token will occupy). With a drafter (a DSpark head
// of the same Target, LoadDraft) a decode step is the speculative round, one recorded program
// (buildRound: draft, verify, accept, commit replay, append) replayed as one recording per round;
// its counters and device times are kept in a stats buffer next to the step state.
type Session struct {
	t     *Target
	d     Device
	s     Queue
	pfx   string // error prefix ("cuda")
	opt   backend.SessionOptions
	ss    *backend.StepState
	ring  *backend.Ring
	words stepWords
	plans []layerPlan
	// useGraphs replays recorded programs (Queue.Record: the default); false launches the
	// kernels one by one (tests compare the two).
	useGraphs bool
	// clusters: the queue launches thread-block clusters (ClusterQueue), so the BLM products
	// take kernels.BLMClusterSplit's work split.
	clusters bool

	ctl       *Buffer     // step-state words
	ctlHost   *HostBuffer // host staging of the step state and the per-chunk words
	ringHost  *HostBuffer // the token ring, mapped: [RingCapacity] u64
	stageHost *HostBuffer // snapshot copies' staging (snapshot.go), allocated on first use
	eos       *Buffer
	targets   *Buffer // i32 [MaxStepRows]
	invFreq   *Buffer
	finalNorm uint64
	head      *Matrix
	embDType  uint32

	x, hn, zqkv, ab, conv, beta, g, o, qkv, qn, att, pm, pl, po, act, logits, pv, pi *Buffer
	gdnState, convState, kc, vc                                                      []*Buffer
	parts                                                                            int
	// layered holds the allocations behind the per-layer views of allocLayers (gdnState,
	// convState, and the drafter's kept records), which Close frees.
	layered []*Buffer

	decode  *program
	prefill map[[2]int]*program // by (rows, last)
	stats   backend.RoundStats
	closed  bool

	// Auxiliary control words after the StepState in ctl (device-only): the rows a round's
	// commit replay and append take, the last block position (the drafter's non-causal
	// attention), whether the step is a round.
	auxCommitRows, auxBlockLast, auxIsRound uint32
	spec                                    *specState // nil without a drafter
}

// specState is a speculative session's device state (docs/speculative.md): the taps of the
// verified rows, the per-GDN-layer records the commit replay reads (kept by the verify: the
// in_proj_zqkv rows, conv output, β and g), the drafter's context K/V per draft layer
// ([Capacity + B, KVHeads·HeadDim]; the block's own rows past the context are scratch), the
// drafter's scratch, and the round's stats words.
type specState struct {
	d        *DSpark
	block    int
	taps     []int
	confStop float32

	tapBuf                  *Buffer
	kZqkv, kConv, kBeta, kG []*Buffer
	ctxK, ctxV              []*Buffer

	h, xn, qkv, q, k, att, act, gu, hn, base, cin, conf, cx, cqkv, ck, maskIDs, pm, pl, po *Buffer
	parts                                                                                  int

	stats     *Buffer
	statsHost *HostBuffer
	round     *program
}

// buffers lists the state's device buffers (nil ones included) for freeing.
func (sp *specState) buffers() []*Buffer {
	l := []*Buffer{sp.tapBuf, sp.h, sp.xn, sp.qkv, sp.q, sp.k, sp.att, sp.act, sp.gu, sp.hn, sp.base, sp.cin, sp.conf, sp.cx,
		sp.cqkv, sp.ck, sp.maskIDs, sp.pm, sp.pl, sp.po, sp.stats}
	for _, g := range [][]*Buffer{sp.ctxK, sp.ctxV} {
		l = append(l, g...)
	}
	return l // not kZqkv, kConv, kBeta, kG: views into Session.layered
}

// layerStride is the bytes between the layers' regions of n bytes in one allocation
// (allocLayers): n rounded up to 256, the alignment of an allocation of its own (256 for n ≤ 0).
func layerStride(n int64) int64 { return (max(n, 1) + 255) &^ 255 }

// allocLayers allocates count regions of n bytes as one buffer, layerStride(n) bytes apart,
// and returns views of them (nil when count is 0), zero-filled when zero is set; the allocation
// goes to s.layered, which Close frees. One allocation lets a launch reach every layer's region
// at a fixed stride (layerFloats): the round's commit replay of all GDN layers at once
// (kernels.GDNParams.Layers, kernels.ConvParams.Layers).
func (s *Session) allocLayers(count int, n int64, zero bool) ([]*Buffer, error) {
	if count == 0 {
		return nil, nil
	}
	st := layerStride(n)
	b, err := s.d.Alloc(int64(count) * st)
	if err != nil {
		return nil, fmt.Errorf("%d layers' regions of %d bytes: %w", count, n, err)
	}
	s.layered = append(s.layered, b)
	if zero {
		if err := s.s.Fill32(b, 0, b.Size/4, 0); err != nil {
			return nil, fmt.Errorf("zero %d layers' regions of %d bytes: %w", count, n, err)
		}
	}
	views := make([]*Buffer, count)
	for i := range views {
		if views[i], err = b.Slice(int64(i)*st, n); err != nil {
			return nil, fmt.Errorf("layer %d's region: %w", i, err)
		}
	}
	return views, nil
}

// layerFloats is the stride in floats between the regions of allocLayers' views v: 0 for
// fewer than two (a launch over one layer has no stride), and 0 for a stride that a record's
// 32-bit field cannot hold (or not a whole number of floats) instead of a truncated stride,
// which the layered records' checks refuse (kernels.GDNParams.Validate: a stride below a
// layer's extent), so that emitCommitReplay falls back to a launch pair per layer.
func layerFloats(v []*Buffer) uint32 {
	if len(v) < 2 || v[1].Ptr < v[0].Ptr {
		return 0
	}
	d := v[1].Ptr - v[0].Ptr
	if d%4 != 0 || d/4 > math.MaxUint32 {
		return 0
	}
	return uint32(d / 4)
}

// confStop32 returns the float32 c with float32 confidences x ≥ c exactly when float64(x) ≥
// thr (the CPU session compares in float64); 0 for 0.
func confStop32(thr float64) float32 {
	if thr <= 0 {
		return 0
	}
	f := float32(thr)
	if float64(f) < thr {
		f = math.Nextafter32(f, float32(math.Inf(1)))
	}
	return f
}

// NewSession allocates a sequence on the GPU (backend.Target). Errors: options out of range
// (SessionOptions.Normalize), a drafter that is not a DSpark head LoadDraft bound to this
// target, drafts sampled with the min(1, p/q) rule (DraftSample: not on the GPU yet; the
// point-mass rule, DraftArgmax, is), state that does not fit the free device memory (checked
// before allocating).
func (t *Target) NewSession(opt backend.SessionOptions) (backend.Session, error) {
	return t.NewDeviceSession(opt, true)
}

// kvBF16 reports whether the session's KV caches are BF16 (SessionOptions.KVCache).
func (s *Session) kvBF16() bool { return s.opt.KVCache == backend.KVBF16 }

// kvElem is the bytes of one element of the session's KV caches: 2 (BF16) or 4 (float32).
func (s *Session) kvElem() int {
	if s.kvBF16() {
		return 2
	}
	return 4
}

// NewDeviceSession is NewSession returning the *Session; replay false launches every step's
// kernels one by one instead of replaying recorded programs (tests compare the two).
func (t *Target) NewDeviceSession(opt backend.SessionOptions, replay bool) (*Session, error) {
	graphs := replay
	c := &t.Cfg
	if err := opt.Normalize(c.Vocab); err != nil {
		return nil, err
	}
	var dr *DSpark
	if opt.Drafter != nil {
		var ok bool
		if dr, ok = opt.Drafter.(*DSpark); !ok || dr.t != t {
			return nil, backend.Unsupported(fmt.Errorf("%s: session: the drafter %T is not a DSpark head loaded by this %s target (Target.LoadDraft); the GPU drafts only with its own", t.pfx, opt.Drafter, t.Device.Name()))
		}
		if dr.vecs == nil {
			return nil, fmt.Errorf("%s: session: the draft head was released (its target is closed)", t.pfx)
		}
		if opt.DraftSampling == backend.DraftSample && !opt.Sampling.Greedy() {
			return nil, backend.Unsupported(fmt.Errorf("%s: session: sampled drafts (--draft-sampling sample, the min(1, p/q) rule) do not run on the %s backend yet; the point-mass rule (--draft-sampling argmax, the default) does, with the same output distribution", t.pfx, t.Device.Name()))
		}
	}
	// The attention partials' grid has one z per AttnPartition keys (≤ 65535, CUDA's grid
	// limit) and the kernels' offsets are 32-bit.
	if maxCap := min(1<<24, 65535*AttnPartition); opt.Capacity > maxCap {
		return nil, backend.Unsupported(fmt.Errorf("%s: session: context %d is more than the %s kernels take (%d positions: 65535 attention partitions of %d keys, 32-bit offsets)", t.pfx, opt.Capacity, t.Device.Name(), maxCap, AttnPartition))
	}
	// A BF16 cache's rows of an odd width would leave the buffers and the snapshots' copies
	// 2 bytes off the 4-byte multiples the devices' fills and copies take (no Qwen3.5 config
	// has one: head dims are even).
	if opt.KVCache == backend.KVBF16 && c.KVHeads*c.HeadDim%2 != 0 {
		return nil, backend.Unsupported(fmt.Errorf("%s: session: a BF16 KV cache of rows of %d values (KV heads × head dim): want an even count", t.pfx, c.KVHeads*c.HeadDim))
	}
	// The step state's Pending words hold a prefill chunk's tokens or a round's anchor and
	// drafts (block B + 1 rows, up to MaxStepRows), as the CPU backend's.
	tmax := max(opt.PrefillChunk, backend.DecodeRows)
	if dr != nil {
		tmax = max(tmax, dr.Cfg.BlockSize+1)
	}
	words, err := newStepWords(tmax)
	if err != nil {
		return nil, err
	}
	plans, err := t.plan()
	if err != nil {
		return nil, fmt.Errorf("bundle %s: %w", t.Bundle.Dir, err)
	}
	s := &Session{t: t, d: t.Device, pfx: t.pfx, opt: opt, words: words, plans: plans, useGraphs: graphs,
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
		{&s.att, R * qd}, {&s.pm, R * c.Heads * s.parts}, {&s.pl, R * c.Heads * s.parts},
		{&s.po, R * c.Heads * s.parts * hd}, {&s.act, R * c.Intermediate}, {&s.logits, R * c.Vocab},
		{&s.pv, R * int(ar.Parts)}, {&s.pi, R * int(ar.Parts)}, {&s.targets, MaxStepRows},
	}
	var need int64
	for _, z := range sizes {
		need += 4 * int64(max(z.n, 4))
	}
	gdnBytes := 4 * int64(2*c.VHeads*c.KDim*c.VDim)
	convBytes := 4 * int64(2*(c.ConvKernel-1)*cd)
	kvBytes := int64(s.kvElem()) * int64(opt.Capacity) * int64(kvd)
	need += int64(ng)*(layerStride(gdnBytes)+layerStride(convBytes)) + int64(na)*2*kvBytes
	// Per GDN layer with a drafter, the verify's records the commit replay reads (floats): the
	// in_proj_zqkv rows, the conv output, β and g.
	keep := []int{R * (vd + cd), R * cd, R * c.VHeads, R * c.VHeads}
	// With a drafter: its state and scratch (floats); the records per GDN layer are keep's
	// (allocLayers).
	var specSizes []struct {
		dst **Buffer
		n   int
	}
	if dr != nil {
		dc := &dr.Cfg
		B := dc.BlockSize
		dkv := dc.KVHeads * dc.HeadDim
		dq := dc.Heads * dc.HeadDim
		sp := &specState{d: dr, block: B, taps: slices.Clone(dc.TapLayers), confStop: confStop32(opt.ConfidenceStop)}
		sp.parts = (opt.Capacity + B + AttnPartition - 1) / AttnPartition
		ldQKV, ldKV, ldGU := 0, 0, 0
		for _, L := range dr.layers {
			ldQKV = max(ldQKV, distinctRows(L.q, L.k, L.v))
			ldKV = max(ldKV, distinctRows(L.k, L.v))
			if L.gateUp == nil {
				ldGU = max(ldGU, distinctRows(L.gate, L.up))
			}
		}
		specSizes = []struct {
			dst **Buffer
			n   int
		}{
			{&sp.tapBuf, R * len(sp.taps) * h}, {&sp.h, B * h}, {&sp.xn, B * h}, {&sp.qkv, B * ldQKV}, {&sp.q, B * dq}, {&sp.k, B * dkv},
			{&sp.att, B * dq}, {&sp.act, B * dc.Intermediate}, {&sp.gu, B * ldGU}, {&sp.hn, B * h}, {&sp.base, B * c.Vocab},
			{&sp.cin, dc.ConfidenceDim() + dc.MarkovRank}, {&sp.conf, B}, {&sp.cx, R * h}, {&sp.cqkv, R * ldKV}, {&sp.ck, R * dkv},
			{&sp.pm, B * dc.Heads * sp.parts}, {&sp.pl, B * dc.Heads * sp.parts}, {&sp.po, B * dc.Heads * sp.parts * dc.HeadDim},
		}
		for range dc.Layers {
			specSizes = append(specSizes, struct {
				dst **Buffer
				n   int
			}{new(*Buffer), (opt.Capacity + B) * dkv}, struct {
				dst **Buffer
				n   int
			}{new(*Buffer), (opt.Capacity + B) * dkv})
		}
		for _, z := range specSizes {
			need += 4 * int64(max(z.n, 4))
		}
		for _, n := range keep {
			need += int64(ng) * layerStride(4*int64(n))
		}
		s.spec = sp
	}
	if err := s.d.Fit(fmt.Sprintf("a session of %d positions (KV cache, GDN state, activations)", opt.Capacity), need); err != nil {
		return nil, err
	}
	fail := func(err error) (*Session, error) {
		s.Close()
		return nil, err
	}
	if s.s, err = s.d.NewQueue(); err != nil {
		return fail(err)
	}
	if cq, ok := s.s.(ClusterQueue); ok && cq.MaxCluster() >= kernels.BLMMaxClusters {
		s.clusters = true
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
	// The GDN layers' states, each kind in one allocation (allocLayers), so that the round's
	// commit replay runs every layer in one launch.
	if s.gdnState, err = s.allocLayers(ng, gdnBytes, true); err != nil {
		return fail(fmt.Errorf("%s: session: GDN recurrent states: %w", s.pfx, err))
	}
	if s.convState, err = s.allocLayers(ng, convBytes, true); err != nil {
		return fail(fmt.Errorf("%s: session: GDN conv states: %w", s.pfx, err))
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
	if sp := s.spec; sp != nil {
		for _, z := range specSizes {
			if *z.dst, err = s.d.Alloc(4 * int64(max(z.n, 4))); err != nil {
				return fail(err)
			}
		}
		// The per-layer buffers, in the order they were listed.
		i := len(specSizes) - 2*sp.d.Cfg.Layers
		for range sp.d.Cfg.Layers {
			sp.ctxK = append(sp.ctxK, *specSizes[i].dst)
			sp.ctxV = append(sp.ctxV, *specSizes[i+1].dst)
			i += 2
		}
		for k, dst := range []*[]*Buffer{&sp.kZqkv, &sp.kConv, &sp.kBeta, &sp.kG} {
			if *dst, err = s.allocLayers(ng, 4*int64(keep[k]), false); err != nil {
				return fail(fmt.Errorf("%s: session: the verify's kept records for the commit replay: %w", s.pfx, err))
			}
		}
		mask := make([]byte, 4*max(sp.block-1, 1))
		for k := 0; k < sp.block-1; k++ {
			binary.LittleEndian.PutUint32(mask[4*k:], uint32(sp.d.Cfg.MaskToken))
		}
		if sp.maskIDs, err = s.d.Upload(mask); err != nil {
			return fail(err)
		}
		nst := kernels.RoundStatsWords(sp.block)
		if sp.stats, err = zero(4 * int64(nst)); err != nil {
			return fail(err)
		}
		if sp.statsHost, err = s.d.HostAlloc(4*int64(nst), false); err != nil {
			return fail(err)
		}
		for _, b := range []*Buffer{sp.conf, sp.cin} {
			if err := s.s.Fill32(b, 0, b.Size/4, 0); err != nil {
				return fail(err)
			}
		}
	}
	// The step state, then the auxiliary words (zero).
	s.auxCommitRows, s.auxBlockLast, s.auxIsRound = uint32(words.Words), uint32(words.Words+1), uint32(words.Words+2)
	if s.ctl, err = zero(int64(4 * (words.Words + 4))); err != nil {
		return fail(err)
	}
	if s.ctlHost, err = s.d.HostAlloc(int64(4*words.Words)*(1+8192), false); err != nil {
		return fail(err)
	}
	if s.ringHost, err = s.d.HostAlloc(8*int64(opt.RingCapacity), true); err != nil {
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
		return fail(backend.Unsupported(fmt.Errorf("bundle %s: no packed lm_head [%d, %d] (tied embeddings do not run on %s yet)", t.Bundle.Dir, c.Vocab, h, t.Device.Name())))
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
		return fail(backend.Unsupported(fmt.Errorf("bundle %s: tensor embed_tokens is %s; the %s gather reads BF16 or F32", t.Bundle.Dir, emb.Format, t.Device.Name())))
	}
	if s.spec != nil {
		if s.spec.round, err = s.buildRound(); err != nil {
			return fail(err)
		}
	} else if s.decode, err = s.buildProgram(progDecode, 1, true); err != nil {
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

// Stats returns the decode telemetry: with a drafter the round's counters and device times as
// lithos_round kept them (DraftTime: the drafter's block, chain and append; VerifyTime: the
// verify pass, accept scan and commit replay; the device's clock: %globaltimer on CUDA);
// without one PlainSteps and VerifyTime, the wall time of the Decode calls.
func (s *Session) Stats() backend.RoundStats {
	return s.stats.Clone()
}

// readStats decodes the round's stats words (kernels.RoundStatsWords) into s.stats.
func (s *Session) readStats(b []byte) {
	B := s.spec.block
	w := func(i int) uint32 { return binary.LittleEndian.Uint32(b[4*i:]) }
	st := &s.stats
	st.Rounds, st.PlainSteps, st.RoundTokens, st.ConfidenceRounds = int(w(0)), int(w(1)), int(w(2)), int(w(3))
	st.Committed, st.Drafted, st.Accepted, st.ConfidenceSum = make([]int, B+1), make([]int, B), make([]int, B), make([]float64, B)
	for n := 0; n <= B; n++ {
		st.Committed[n] = int(w(4 + n))
	}
	for k := 0; k < B; k++ {
		st.Drafted[k] = int(w(4 + B + 1 + k))
		st.Accepted[k] = int(w(4 + 2*B + 1 + k))
		st.ConfidenceSum[k] = float64(math.Float32frombits(w(4 + 3*B + 1 + k)))
	}
	tw := kernels.RoundTimeWord(B)
	u64 := func(i int) uint64 { return uint64(w(i)) | uint64(w(i+1))<<32 }
	st.DraftTime, st.VerifyTime = time.Duration(u64(tw+6)), time.Duration(u64(tw+8))
}

// Queue returns the session's queue (benchmarks time device work on it).
func (s *Session) Queue() Queue { return s.s }

// QueueStep queues one decode step without waiting: the speculative round with a drafter,
// else the plain decode step (replayed, or launched one by one). Prefill and Decode do this
// between PushState and PullState; benchmarks call the three directly.
func (s *Session) QueueStep() error {
	if s.spec != nil {
		return s.run(s.spec.round)
	}
	return s.run(s.decode)
}

// Logits returns the buffer the LM head wrote in the last step: float32 [rows, vocab], a plain
// step's (decode, the last prefill chunk) one row at 0, a round's 1+B verified rows (tests
// compare it with a reference).
func (s *Session) Logits() *Buffer { return s.logits }

// LastLogits copies the logits row the anchor (the last sampled token) was sampled from —
// row 0 of Logits() after a plain step (decode, the last prefill chunk) — from the device into
// dst, grown as needed, and returns it: float32 [Vocab], as the LM head wrote them.
// runtime/generate's first-use self-check compares it with the CPU backend's. Errors: a
// closed session, a session with a drafter (a round samples from several rows), no anchor
// (nothing sampled yet), a copy or wait that fails (the device's error).
func (s *Session) LastLogits(dst []float32) ([]float32, error) {
	switch {
	case s.closed:
		return nil, errors.New("session: closed")
	case s.spec != nil:
		return nil, fmt.Errorf("%s: session: LastLogits of a session with a drafter (a round samples from several rows)", s.pfx)
	case s.ss.Anchor < 0:
		return nil, fmt.Errorf("%s: session: LastLogits: no token sampled yet", s.pfx)
	}
	vocab := s.t.Cfg.Vocab
	n := int64(4 * vocab)
	h, err := s.d.HostAlloc(n, false)
	if err != nil {
		return nil, fmt.Errorf("%s: LastLogits: %w", s.pfx, err)
	}
	if err := s.s.CopyDtoH(h, 0, s.logits, 0, n); err != nil {
		h.Free()
		return nil, fmt.Errorf("%s: LastLogits: %w", s.pfx, err)
	}
	if err := s.s.Wait(0); err != nil {
		if errors.Is(err, ErrDeviceBusy) {
			// The copy into h may still run: keep h (leaked), as Close keeps the buffers.
			if s.t != nil {
				s.t.markBusy(err)
			}
		} else {
			h.Free()
		}
		return nil, fmt.Errorf("%s: LastLogits: %w", s.pfx, err)
	}
	defer h.Free()
	dst = slices.Grow(dst[:0], vocab)[:vocab]
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(h.Bytes[4*i:]))
	}
	return dst, nil
}

// DraftOutputs returns, for a session with a drafter, the block size B and the buffers the
// last round's drafter wrote: the Markov-adjusted logits [B, vocab] and the confidence head's
// dot products [B] (float32; tests compare them with a reference). ok is false without a
// drafter.
func (s *Session) DraftOutputs() (block int, logits, conf *Buffer, ok bool) {
	if s.spec == nil {
		return 0, nil, nil, false
	}
	return s.spec.block, s.spec.base, s.spec.conf, true
}

// PushState queues the copy of the host's step state to the device words, on the session queue.
func (s *Session) PushState() error {
	b, err := s.ss.MarshalBinary()
	if err != nil {
		return err
	}
	copy(s.ctlHost.Bytes, b)
	return s.s.CopyHtoD(s.ctl, 0, s.ctlHost, 0, int64(len(b)))
}

// PullState waits for the queue, reads the device words into the host's step state and
// mirrors the ring slots the device wrote.
func (s *Session) PullState() error {
	n := int64(4 * s.words.Words)
	if err := s.s.CopyDtoH(s.ctlHost, 0, s.ctl, 0, n); err != nil {
		return err
	}
	if sp := s.spec; sp != nil {
		if err := s.s.CopyDtoH(sp.statsHost, 0, sp.stats, 0, sp.stats.Size); err != nil {
			return err
		}
	}
	if err := s.s.Wait(0); err != nil {
		return err
	}
	if sp := s.spec; sp != nil {
		s.readStats(sp.statsHost.Bytes)
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
			return fmt.Errorf("%s: ring slot %d holds sequence %d, want %d", s.pfx, h%cap, v>>32, h+1)
		}
		tmp.RingHead = h
		tmp.RingTail = min(s.ss.RingTail, h) // the device checked the room already
		if !s.ring.Push(&tmp, int32(uint32(v))) {
			return fmt.Errorf("%s: ring mirror overflow at %d", s.pfx, h)
		}
	}
	return nil
}

// ErrDone is returned by Prefill on a session whose step state says done (backend.ErrDone).
var ErrDone = backend.ErrDone

// Prefill implements backend.Session: the prompt in chunks of min(PrefillChunk, MaxStepRows)
// rows, all queued before the one wait.
func (s *Session) Prefill(ctx context.Context, prompt []int32) error {
	return s.prefillRows(ctx, prompt, true)
}

// prefillRows is Prefill; without sample the last chunk, like the others, runs the program
// without the LM head and with PrefillLeft 1 (commit the rows, sample nothing).
func (s *Session) prefillRows(ctx context.Context, prompt []int32, sample bool) error {
	ss := s.ss
	if s.closed {
		return errors.New("session: closed")
	}
	if ss.Done != 0 {
		return ErrDone
	}
	if err := backend.CheckPrompt(prompt, s.t.Cfg.Vocab, ss.Position, s.opt.Capacity); err != nil {
		return err
	}
	chunk := min(s.opt.PrefillChunk, MaxStepRows)
	steps := (len(prompt) + chunk - 1) / chunk
	if !sample {
		ss.Anchor = -1 // what the chunks commit follows the sequence; nothing is left to feed
	}
	if err := s.PushState(); err != nil {
		return err
	}
	wb := int64(4 * s.words.Words)
	slots := int64(len(s.ctlHost.Bytes))/wb - 1
	for i := 0; i < steps; i++ {
		if err := ctx.Err(); err != nil {
			s.PullState()
			return err
		}
		rows := prompt[i*chunk : min((i+1)*chunk, len(prompt))]
		left := steps - 1 - i
		if !sample {
			left = max(left, 1)
		}
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
			return fmt.Errorf("%s: step state layout: Pending does not follow Rows", s.pfx)
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
	return s.PullState()
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
	if err := s.PushState(); err != nil {
		return err
	}
	if s.spec != nil {
		for range steps {
			if err := s.run(s.spec.round); err != nil {
				return err
			}
		}
		return s.PullState()
	}
	for range steps {
		if err := s.run(s.decode); err != nil {
			return err
		}
	}
	step0 := s.ss.Step
	if err := s.PullState(); err != nil {
		return err
	}
	s.stats.PlainSteps += int(s.ss.Step - step0)
	s.stats.VerifyTime += time.Since(start)
	return nil
}

// Close waits for the session's queued work (the device's bound), then releases its device
// state. When the wait ends with ErrDeviceBusy (the work may still be running), nothing is
// freed — buffers, host buffers (the ring, written by the device), programs and the queue are
// kept (leaked) rather than freed under the device — the Target is told (its Close keeps the
// weights too), and the error wraps ErrDeviceBusy. Other wait errors do not stop the release
// (the work has ended).
func (s *Session) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	if s.s != nil {
		if err := s.s.Wait(0); errors.Is(err, ErrDeviceBusy) {
			if s.t != nil {
				s.t.markBusy(err)
			}
			return fmt.Errorf("%s: close session: its device memory is kept, the device may still be using it: %w", s.pfx, err)
		}
	}
	if s.decode != nil {
		s.decode.close()
	}
	for _, p := range s.prefill {
		p.close()
	}
	if sp := s.spec; sp != nil {
		if sp.round != nil {
			sp.round.close()
		}
		for _, b := range sp.buffers() {
			b.Free()
		}
		sp.statsHost.Free()
	}
	for _, b := range []*Buffer{s.ctl, s.eos, s.targets, s.invFreq, s.x, s.hn, s.zqkv, s.ab, s.conv, s.beta, s.g, s.o, s.qkv, s.qn,
		s.att, s.pm, s.pl, s.po, s.act, s.logits, s.pv, s.pi} {
		b.Free()
	}
	for _, l := range [][]*Buffer{s.kc, s.vc, s.layered} { // gdnState, convState: views into layered
		for _, b := range l {
			b.Free()
		}
	}
	s.ctlHost.Free()
	s.ringHost.Free()
	s.stageHost.Free()
	if s.s == nil {
		return nil
	}
	return s.s.Close()
}

// distinctRows is the output width of multiplying the distinct matrices holding segs.
func distinctRows(segs ...segMatrix) int {
	seen := map[*Matrix]bool{}
	n := 0
	for _, s := range segs {
		if s.m != nil && !seen[s.m] {
			seen[s.m] = true
			n += int(s.m.Geometry.N)
		}
	}
	return n
}
