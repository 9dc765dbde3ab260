//go:build linux && amd64

package cuda

import (
	"fmt"
	"math"
	"strings"

	"lithos/kernels"
	"lithos/manifests"
	"lithos/pack/blm"
	"lithos/runtime/backend"
	"lithos/runtime/model"
)

// MaxStepRows is the most rows one step program feeds: the BLM kernels take 1–8 activation
// rows (kernels.BLMRowVariants), so prefill runs in chunks of at most 8 rows on the GPU.
const MaxStepRows = 8

// AttnPartition is the keys per attention partial (kernels.AttnParams.Part ≤ 128).
const AttnPartition = 64

// stepWords are the word indexes of the StepState fields in its binary layout, found by
// marshalling a state whose fields hold distinct values (so a change of layout in
// runtime/backend is followed, not silently misread).
type stepWords struct {
	Step, Position, Rows, Pending, SeedLo, Anchor, Accepted, Committed, PrefillLeft,
	Done, Error, RingHead, RingTail, StopAt uint32
	Words int // words in the binary form
}

func newStepWords(tmax int) (stepWords, error) {
	s := backend.NewStepState(tmax, 0)
	vals := map[string]uint32{}
	set := func(name string, p *uint32, v uint32) { *p, vals[name] = v, v }
	set("Step", &s.Step, 0xA0000001)
	set("Position", &s.Position, 0xA0000002)
	set("Rows", &s.Rows, 0xA0000003)
	set("SeedLo", &s.SeedLo, 0xA0000005)
	set("Accepted", &s.Accepted, 0xA0000007)
	set("Committed", &s.Committed, 0xA0000008)
	set("PrefillLeft", &s.PrefillLeft, 0xA0000009)
	set("Done", &s.Done, 0xA000000A)
	set("Error", &s.Error, 0xA000000B)
	set("RingHead", &s.RingHead, 0xA000000C)
	set("RingTail", &s.RingTail, 0xA000000D)
	set("StopAt", &s.StopAt, 0xA000000E)
	s.Pending[0], vals["Pending"] = int32(-0x5FFFFFFC), 0xA0000004
	s.Anchor, vals["Anchor"] = int32(-0x5FFFFFFA), 0xA0000006
	b, err := s.MarshalBinary()
	if err != nil {
		return stepWords{}, err
	}
	idx := map[uint32]uint32{}
	for i := 0; i+4 <= len(b); i += 4 {
		idx[le32(b[i:])] = uint32(i / 4)
	}
	var w stepWords
	w.Words = len(b) / 4
	for name, dst := range map[string]*uint32{"Step": &w.Step, "Position": &w.Position, "Rows": &w.Rows, "Pending": &w.Pending,
		"SeedLo": &w.SeedLo, "Anchor": &w.Anchor, "Accepted": &w.Accepted, "Committed": &w.Committed, "PrefillLeft": &w.PrefillLeft,
		"Done": &w.Done, "Error": &w.Error, "RingHead": &w.RingHead, "RingTail": &w.RingTail, "StopAt": &w.StopAt} {
		i, ok := idx[vals[name]]
		if !ok {
			return stepWords{}, fmt.Errorf("cuda: step state field %s not found in its binary layout", name)
		}
		*dst = i
	}
	return w, nil
}

// launch is one kernel launch of a program: its record is at rec in the program's arena.
type launch struct {
	name string
	grid [3]uint32
	rec  int64
	bufs []uint64
	what string // "layer 3 (full_attention): o_proj", for errors
}

// program is one recorded step: its launches, their records (uploaded once) and, after the
// first replay, its CUDA graph.
type program struct {
	name     string
	launches []launch
	recs     Records
	graph    *Graph
}

// builder appends launches to a program.
type builder struct {
	p    *program
	what string
	err  error
}

func (b *builder) add(name string, rec any, grid [3]uint32, bufs ...uint64) {
	if b.err != nil {
		return
	}
	for i, x := range bufs {
		if x == 0 {
			b.err = fmt.Errorf("cuda: program %s: %s: %s buffer %d is null", b.p.name, b.what, name, i)
			return
		}
	}
	b.p.launches = append(b.p.launches, launch{name: name, grid: grid, rec: b.p.recs.Add(rec), bufs: bufs, what: b.what})
}

// f32at returns the address of float i of a buffer.
func f32at(b *Buffer, i int) uint64 { return b.At(int64(4 * i)) }

// layerPlan is what a layer's program reads: its matrices, vectors and column offsets.
type layerPlan struct {
	kind model.LayerKind
	idx  int // index among the layers of its kind (GDN state / KV cache)

	inNorm, postNorm uint64
	gateUp, down     *Matrix

	// GDN
	zqkv, ab, out            *Matrix
	zOff, qkvOff, aOff, bOff int // output columns of the segments
	conv, negA, dtBias, gn   uint64

	// attention
	qkv, o           *Matrix
	qOff, kOff, vOff int
	qNorm, kNorm     uint64
}

// segment returns the output-column offset and rows of the segment of m whose checkpoint
// name ends with suffix, requiring a concatenated stack.
func segment(m *Matrix, suffix string) (int, int, error) {
	if m.Stack.Mode != blm.Concat {
		return 0, 0, fmt.Errorf("tensor %s: stack mode %v, the CUDA programs read concatenated segments", m.Name, m.Stack.Mode)
	}
	off := 0
	for _, s := range m.Stack.Segments {
		if strings.HasSuffix(s.Name, suffix) {
			return off, int(s.Rows), nil
		}
		off += int(s.Rows)
	}
	return 0, 0, fmt.Errorf("tensor %s: no segment %s", m.Name, suffix)
}

// plan collects, for every layer, the tensors the programs read, checking stacks, shapes and
// transforms (errors name the tensor and the rule).
func (t *Target) plan() ([]layerPlan, error) {
	c := &t.Cfg
	vec := func(name string, n int, transform string) (uint64, error) {
		bt, ok := t.Bundle.Tensor(name)
		if !ok {
			return 0, fmt.Errorf("no tensor %s", name)
		}
		if bt.Transform != transform {
			return 0, fmt.Errorf("tensor %s: transform %q, the Qwen3.5 graph needs %q", name, bt.Transform, transform)
		}
		p, l, ok := t.Vector(name)
		if !ok || l != n {
			return 0, fmt.Errorf("tensor %s: %d values, want %d", name, l, n)
		}
		return p, nil
	}
	mat := func(name string, n, k int) (*Matrix, error) {
		m, ok := t.mats[name]
		if !ok {
			return nil, fmt.Errorf("no packed matrix %s", name)
		}
		if (n >= 0 && int(m.Geometry.N) != n) || int(m.Geometry.K) != k {
			return nil, fmt.Errorf("tensor %s: [%d, %d], want [%d, %d]", name, m.Geometry.N, m.Geometry.K, n, k)
		}
		return m, nil
	}
	h := c.Hidden
	vd, cd := c.VHeads*c.VDim, c.ConvDim()
	qd, kvd := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	var plans []layerPlan
	var ng, na int
	for li, kind := range c.Layers {
		p := layerPlan{kind: kind}
		rp := fmt.Sprintf("layers.%d.", li)
		var err error
		fail := func(err error) ([]layerPlan, error) { return nil, fmt.Errorf("layer %d (%v): %w", li, kind, err) }
		if p.inNorm, err = vec(rp+"input_layernorm", h, manifests.TransformOnePlus); err != nil {
			return fail(err)
		}
		if p.postNorm, err = vec(rp+"post_attention_layernorm", h, manifests.TransformOnePlus); err != nil {
			return fail(err)
		}
		if p.gateUp, err = mat(rp+"mlp.gate_up", 2*c.Intermediate, h); err != nil {
			return fail(err)
		}
		st := p.gateUp.Stack
		if st.Mode != blm.Interleave || st.Chunk != 8 || len(st.Segments) != 2 || !strings.HasSuffix(st.Segments[0].Name, "gate_proj.weight") {
			return fail(fmt.Errorf("tensor %s: the SwiGLU epilogue needs gate_proj and up_proj interleaved by 8 rows", p.gateUp.Name))
		}
		if p.down, err = mat(rp+"mlp.down_proj", h, c.Intermediate); err != nil {
			return fail(err)
		}
		switch kind {
		case model.GDN:
			p.idx = ng
			ng++
			a := rp + "linear_attn."
			if p.zqkv, err = mat(a+"in_proj_zqkv", vd+cd, h); err != nil {
				return fail(err)
			}
			if p.ab, err = mat(a+"in_proj_ab", 2*c.VHeads, h); err != nil {
				return fail(err)
			}
			if p.out, err = mat(a+"out_proj", h, vd); err != nil {
				return fail(err)
			}
			var n int
			for _, s := range []struct {
				off    *int
				suffix string
				rows   int
				m      *Matrix
			}{{&p.zOff, "in_proj_z.weight", vd, p.zqkv}, {&p.qkvOff, "in_proj_qkv.weight", cd, p.zqkv},
				{&p.aOff, "in_proj_a.weight", c.VHeads, p.ab}, {&p.bOff, "in_proj_b.weight", c.VHeads, p.ab}} {
				if *s.off, n, err = segment(s.m, s.suffix); err != nil {
					return fail(err)
				}
				if n != s.rows {
					return fail(fmt.Errorf("tensor %s: segment %s has %d rows, want %d", s.m.Name, s.suffix, n, s.rows))
				}
			}
			if p.conv, err = vec(a+"conv1d", cd*c.ConvKernel, manifests.TransformNone); err != nil {
				return fail(err)
			}
			if p.negA, err = vec(a+"A_log", c.VHeads, manifests.TransformNegExp); err != nil {
				return fail(err)
			}
			if p.dtBias, err = vec(a+"dt_bias", c.VHeads, manifests.TransformNone); err != nil {
				return fail(err)
			}
			if p.gn, err = vec(a+"norm", c.VDim, manifests.TransformNone); err != nil {
				return fail(err)
			}
		case model.Attention:
			p.idx = na
			na++
			a := rp + "self_attn."
			if p.qkv, err = mat(a+"qkv", 2*qd+2*kvd, h); err != nil {
				return fail(err)
			}
			if p.o, err = mat(a+"o_proj", h, qd); err != nil {
				return fail(err)
			}
			var n int
			for _, s := range []struct {
				off    *int
				suffix string
				rows   int
			}{{&p.qOff, "q_proj.weight", 2 * qd}, {&p.kOff, "k_proj.weight", kvd}, {&p.vOff, "v_proj.weight", kvd}} {
				if *s.off, n, err = segment(p.qkv, s.suffix); err != nil {
					return fail(err)
				}
				if n != s.rows {
					return fail(fmt.Errorf("tensor %s: segment %s has %d rows, want %d", p.qkv.Name, s.suffix, n, s.rows))
				}
			}
			if p.qNorm, err = vec(a+"q_norm", c.HeadDim, manifests.TransformOnePlus); err != nil {
				return fail(err)
			}
			if p.kNorm, err = vec(a+"k_norm", c.HeadDim, manifests.TransformOnePlus); err != nil {
				return fail(err)
			}
		}
		plans = append(plans, p)
	}
	return plans, nil
}

// Program kinds.
const (
	progDecode  = iota // StepBegin, one row (the anchor), LM head, StepAccept
	progPrefill        // n host-written rows, StepPrefill; LM head on the last row when last
)

// buildProgram records the launches of one step over n rows: the embedding gather of the
// Pending tokens, every layer, and (decode, or the last prefill chunk) the final norm, the LM
// head of the last row, the argmax into the targets and the step-state control kernel.
// Every kernel's done word is the Done word, so a replay after done does nothing.
func (s *Session) buildProgram(kind, n int, last bool) (*program, error) {
	t, c, w := s.t, &s.t.Cfg, s.words
	p := &program{name: fmt.Sprintf("decode(%d rows)", n)}
	if kind == progPrefill {
		p.name = fmt.Sprintf("prefill(%d rows, last %v)", n, last)
	}
	b := &builder{p: p}
	done := w.Done
	nw := uint32(kernels.NoWord)
	h := c.Hidden
	kd, vd, cd := c.KHeads*c.KDim, c.VHeads*c.VDim, c.ConvDim()
	hd := c.HeadDim
	qd, kvd := c.Heads*hd, c.KVHeads*hd
	stepRec := kernels.StepParams{DoneWord: nw, Capacity: uint32(s.opt.Capacity), Block: 0, RingCap: uint32(s.ring.Capacity()),
		EOSCount: uint32(len(s.opt.EOS)), WStep: w.Step, WPosition: w.Position, WRows: w.Rows, WPending: w.Pending,
		WAnchor: w.Anchor, WAccepted: w.Accepted, WCommitted: w.Committed, WPrefillLeft: w.PrefillLeft,
		WDone: w.Done, WError: w.Error, WRingHead: w.RingHead, WRingTail: w.RingTail, WStopAt: w.StopAt}
	if kind == progDecode {
		b.what = "step begin"
		stepRec.Mode = kernels.StepBegin
		b.add("lithos_step", stepRec, stepRec.Grid(), s.targets.Ptr, s.eos.Ptr, s.ringHost.DevPtr)
	}
	rms := func(x, wv, z, y uint64, rows, groups, nn, ldx, ldz, ldy int, mode uint32) {
		r := kernels.RMSNormParams{DoneWord: done, Rows: uint32(rows), RowsWord: nw, Groups: uint32(groups), N: uint32(nn),
			LdX: uint32(ldx), LdZ: uint32(ldz), LdY: uint32(ldy), Mode: mode, Eps: c.RMSEps}
		b.add("lithos_rmsnorm", r, r.Grid(), x, wv, z, y)
	}
	matmul := func(m *Matrix, epi uint32, x, y uint64) {
		if b.err != nil {
			return
		}
		name, err := m.Kernel(n)
		if err != nil {
			b.err = err
			return
		}
		r, err := kernels.NewBLMParams(m.Geometry, n, epi)
		if err != nil {
			b.err = fmt.Errorf("%s: %w", m.Name, err)
			return
		}
		r.DoneWord = done
		b.add(name, r, r.Grid(), m.Ptr, m.Scales, x, y)
	}
	// Embedding gather of Pending[0…n).
	b.what = "embedding"
	emb, _ := t.TensorAt("embed_tokens")
	gr := kernels.GatherParams{DoneWord: done, Rows: uint32(n), RowsWord: nw, Width: uint32(h), Vocab: uint32(c.Vocab),
		IdsOff: w.Pending, DType: s.embDType, LdY: uint32(h)}
	b.add("lithos_gather", gr, gr.Grid(), s.ctl.Ptr, emb, s.x.Ptr)
	for li, l := range s.plans {
		b.what = fmt.Sprintf("layer %d (%v) input norm", li, l.kind)
		rms(s.x.Ptr, l.inNorm, s.x.Ptr, s.hn.Ptr, n, 1, h, h, h, h, kernels.RMSPlain)
		switch l.kind {
		case model.GDN:
			nz := int(l.zqkv.Geometry.N)
			b.what = fmt.Sprintf("layer %d (%v) in_proj_zqkv", li, l.kind)
			matmul(l.zqkv, kernels.EpiStore, s.hn.Ptr, s.zqkv.Ptr)
			b.what = fmt.Sprintf("layer %d (%v) in_proj_ab", li, l.kind)
			matmul(l.ab, kernels.EpiStore, s.hn.Ptr, s.ab.Ptr)
			b.what = fmt.Sprintf("layer %d (%v) conv1d", li, l.kind)
			cv := kernels.ConvParams{DoneWord: done, Rows: uint32(n), RowsWord: nw, Channels: uint32(cd), KernelSize: uint32(c.ConvKernel),
				Slot: 0, SlotWord: w.Step, SlotXor: 0, WriteOut: 1, LdX: uint32(nz), LdY: uint32(cd)}
			b.add("lithos_conv", cv, cv.Grid(), f32at(s.zqkv, l.qkvOff), l.conv, s.convState[l.idx].Ptr, s.conv.Ptr)
			b.what = fmt.Sprintf("layer %d (%v) q/k L2 norm", li, l.kind)
			for i, post := range []float32{float32(1 / math.Sqrt(float64(c.KDim))), 1} {
				l2 := kernels.L2NormParams{DoneWord: done, Rows: uint32(n), RowsWord: nw, Groups: uint32(c.KHeads), D: uint32(c.KDim),
					Ld: uint32(cd), Eps: model.L2Eps, Post: post}
				b.add("lithos_l2norm", l2, l2.Grid(), f32at(s.conv, i*kd))
			}
			b.what = fmt.Sprintf("layer %d (%v) gates", li, l.kind)
			gg := kernels.GDNGatesParams{DoneWord: done, Rows: uint32(n), RowsWord: nw, Heads: uint32(c.VHeads),
				LdA: uint32(2 * c.VHeads), LdB: uint32(2 * c.VHeads), LdOut: uint32(c.VHeads)}
			b.add("lithos_gdn_gates", gg, gg.Grid(), f32at(s.ab, l.aOff), f32at(s.ab, l.bOff), l.negA, l.dtBias, s.beta.Ptr, s.g.Ptr)
			b.what = fmt.Sprintf("layer %d (%v) delta rule", li, l.kind)
			gd := kernels.GDNParams{DoneWord: done, Rows: uint32(n), RowsWord: nw, KHeads: uint32(c.KHeads), VHeads: uint32(c.VHeads),
				KDim: uint32(c.KDim), VDim: uint32(c.VDim), Slot: 0, SlotWord: w.Step, SlotXor: 0, WriteOut: 1,
				LdQK: uint32(cd), LdV: uint32(cd), LdGate: uint32(c.VHeads), LdOut: uint32(vd)}
			b.add("lithos_gdn", gd, gd.Grid(), s.conv.Ptr, f32at(s.conv, kd), f32at(s.conv, 2*kd), s.beta.Ptr, s.g.Ptr, s.gdnState[l.idx].Ptr, s.o.Ptr)
			b.what = fmt.Sprintf("layer %d (%v) gated norm", li, l.kind)
			rms(s.o.Ptr, l.gn, f32at(s.zqkv, l.zOff), s.o.Ptr, n, c.VHeads, c.VDim, vd, nz, vd, kernels.RMSGated)
			b.what = fmt.Sprintf("layer %d (%v) out_proj", li, l.kind)
			matmul(l.out, kernels.EpiAdd, s.o.Ptr, s.x.Ptr)
		case model.Attention:
			nq := int(l.qkv.Geometry.N)
			b.what = fmt.Sprintf("layer %d (%v) qkv", li, l.kind)
			matmul(l.qkv, kernels.EpiStore, s.hn.Ptr, s.qkv.Ptr)
			b.what = fmt.Sprintf("layer %d (%v) q norm", li, l.kind)
			for r := 0; r < n; r++ { // q heads are interleaved with the gate heads: stride 2·head_dim
				rms(f32at(s.qkv, r*nq+l.qOff), l.qNorm, f32at(s.qkv, r*nq+l.qOff), f32at(s.qn, r*qd), c.Heads, 1, hd, 2*hd, 2*hd, hd, kernels.RMSPlain)
			}
			b.what = fmt.Sprintf("layer %d (%v) k norm", li, l.kind)
			rms(f32at(s.qkv, l.kOff), l.kNorm, f32at(s.qkv, l.kOff), s.kn.Ptr, n, c.KVHeads, hd, nq, nq, kvd, kernels.RMSPlain)
			b.what = fmt.Sprintf("layer %d (%v) rope", li, l.kind)
			for _, q := range []struct {
				buf   *Buffer
				heads int
			}{{s.qn, c.Heads}, {s.kn, c.KVHeads}} {
				rp := kernels.RopeParams{DoneWord: done, Rows: uint32(n), RowsWord: nw, Pos: 0, PosWord: w.Position,
					Heads: uint32(q.heads), HeadDim: uint32(hd), RotDim: uint32(c.RotaryDim), Ld: uint32(q.heads * hd)}
				b.add("lithos_rope", rp, rp.Grid(), q.buf.Ptr, s.invFreq.Ptr)
			}
			b.what = fmt.Sprintf("layer %d (%v) kv append", li, l.kind)
			kv := kernels.KVAppendParams{DoneWord: done, Rows: uint32(n), RowsWord: nw, Pos: 0, PosWord: w.Position, Width: uint32(kvd),
				LdK: uint32(kvd), LdV: uint32(nq), LdC: uint32(kvd)}
			b.add("lithos_kv_append", kv, kv.Grid(), s.kn.Ptr, f32at(s.qkv, l.vOff), s.kc[l.idx].Ptr, s.vc[l.idx].Ptr)
			b.what = fmt.Sprintf("layer %d (%v) attention", li, l.kind)
			at := kernels.AttnParams{DoneWord: done, Rows: uint32(n), RowsWord: nw, Pos: 0, PosWord: w.Position,
				Heads: uint32(c.Heads), KVHeads: uint32(c.KVHeads), HeadDim: uint32(hd), LdQ: uint32(qd), LdO: uint32(qd), LdKV: uint32(kvd),
				Part: AttnPartition, Parts: uint32(s.parts), Scale: float32(1 / math.Sqrt(float64(hd)))}
			b.add("lithos_attn_partial", at, at.GridPartial(), s.qn.Ptr, s.kc[l.idx].Ptr, s.vc[l.idx].Ptr, s.pm.Ptr, s.pl.Ptr, s.po.Ptr)
			b.add("lithos_attn_merge", at, at.GridMerge(), s.pm.Ptr, s.pl.Ptr, s.po.Ptr, s.att.Ptr)
			b.what = fmt.Sprintf("layer %d (%v) output gate", li, l.kind)
			for r := 0; r < n; r++ {
				ew := kernels.EwiseParams{DoneWord: done, Rows: uint32(c.Heads), RowsWord: nw, N: uint32(hd),
					LdA: uint32(hd), LdB: uint32(2 * hd), LdY: uint32(hd), Mode: kernels.EwSigGate}
				b.add("lithos_ewise", ew, ew.Grid(), f32at(s.att, r*qd), f32at(s.qkv, r*nq+l.qOff+hd), f32at(s.att, r*qd))
			}
			b.what = fmt.Sprintf("layer %d (%v) o_proj", li, l.kind)
			matmul(l.o, kernels.EpiAdd, s.att.Ptr, s.x.Ptr)
		}
		b.what = fmt.Sprintf("layer %d (%v) post norm", li, l.kind)
		rms(s.x.Ptr, l.postNorm, s.x.Ptr, s.hn.Ptr, n, 1, h, h, h, h, kernels.RMSPlain)
		b.what = fmt.Sprintf("layer %d (%v) mlp gate_up", li, l.kind)
		matmul(l.gateUp, kernels.EpiSwiGLU, s.hn.Ptr, s.act.Ptr)
		b.what = fmt.Sprintf("layer %d (%v) mlp down_proj", li, l.kind)
		matmul(l.down, kernels.EpiAdd, s.act.Ptr, s.x.Ptr)
	}
	if kind == progDecode || last {
		b.what = "final norm"
		rms(f32at(s.x, (n-1)*h), s.finalNorm, f32at(s.x, (n-1)*h), s.hn.Ptr, 1, 1, h, h, h, h, kernels.RMSPlain)
		b.what = "lm_head"
		rows := n
		n = 1 // the head runs on the last row only
		matmul(s.head, kernels.EpiStore, s.hn.Ptr, s.logits.Ptr)
		n = rows
		b.what = "argmax"
		ar := kernels.NewArgmaxParams(1, c.Vocab)
		ar.DoneWord = done
		b.add("lithos_argmax_partial", ar, ar.GridPartial(), s.logits.Ptr, s.pv.Ptr, s.pi.Ptr)
		b.add("lithos_argmax_final", ar, ar.GridFinal(), s.pv.Ptr, s.pi.Ptr, s.targets.Ptr)
	}
	b.what = "step"
	if kind == progDecode {
		stepRec.Mode = kernels.StepAccept
	} else {
		stepRec.Mode = kernels.StepPrefill
	}
	b.add("lithos_step", stepRec, stepRec.Grid(), s.targets.Ptr, s.eos.Ptr, s.ringHost.DevPtr)
	if b.err != nil {
		return nil, b.err
	}
	if err := p.recs.Upload(s.d); err != nil {
		return nil, err
	}
	return p, nil
}

// enqueue queues the program's launches on the session stream (directly, or into a capture).
func (s *Session) enqueue(p *program) error {
	for _, l := range p.launches {
		if err := s.t.Kernels.Launch(s.s, l.name, l.grid, s.ctl.Ptr, p.recs.At(l.rec), l.bufs...); err != nil {
			return fmt.Errorf("%s: %s: %w", p.name, l.what, err)
		}
	}
	return nil
}

// run queues one replay of the program: its CUDA graph, captured on first use (or the launches
// one by one when the session is not using graphs).
func (s *Session) run(p *program) error {
	if !s.useGraphs {
		return s.enqueue(p)
	}
	if p.graph == nil {
		g, err := s.s.Capture(func() error { return s.enqueue(p) })
		if err != nil {
			return fmt.Errorf("cuda: capture %s: %w", p.name, err)
		}
		p.graph = g
	}
	return p.graph.Launch(s.s)
}

func (p *program) close() {
	p.graph.Close()
	p.recs.Free()
}
