package gpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"reflect"
	"strings"

	"lithos/kernels"
	"lithos/manifests"
	"lithos/pack/blm"
	"lithos/runtime/backend"
	"lithos/runtime/model"
)

// MaxStepRows is the most rows one step program feeds: the BLM kernels take 1–16 activation
// rows (kernels.BLMRowVariants), so prefill runs in chunks of at most 16 rows on the GPU.
const MaxStepRows = 16

// AttnPartition is the keys per attention partial (kernels.AttnParams.Part ≤ 128).
const AttnPartition = 64

// stepWords are the word indexes of the StepState fields in its binary layout, found by
// marshalling a state whose fields hold distinct values (so a change of layout in
// runtime/backend is followed, not silently misread).
type stepWords struct {
	Step, Position, Rows, Pending, SeedLo, Anchor, Accepted, Committed, PrefillLeft,
	Done, Error, RingHead, RingTail, StopAt, DraftLen, DraftContext uint32
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
	set("DraftLen", &s.DraftLen, 0xA000000F)
	set("DraftContext", &s.DraftContext, 0xA0000010)
	s.Pending[0], vals["Pending"] = int32(-0x5FFFFFFC), 0xA0000004
	s.Anchor, vals["Anchor"] = int32(-0x5FFFFFFA), 0xA0000006
	b, err := s.MarshalBinary()
	if err != nil {
		return stepWords{}, err
	}
	idx := map[uint32]uint32{}
	for i := 0; i+4 <= len(b); i += 4 {
		idx[binary.LittleEndian.Uint32(b[i:])] = uint32(i / 4)
	}
	var w stepWords
	w.Words = len(b) / 4
	for name, dst := range map[string]*uint32{"Step": &w.Step, "Position": &w.Position, "Rows": &w.Rows, "Pending": &w.Pending,
		"SeedLo": &w.SeedLo, "Anchor": &w.Anchor, "Accepted": &w.Accepted, "Committed": &w.Committed, "PrefillLeft": &w.PrefillLeft,
		"Done": &w.Done, "Error": &w.Error, "RingHead": &w.RingHead, "RingTail": &w.RingTail, "StopAt": &w.StopAt,
		"DraftLen": &w.DraftLen, "DraftContext": &w.DraftContext} {
		i, ok := idx[vals[name]]
		if !ok {
			return stepWords{}, fmt.Errorf("gpu: step state field %s not found in its binary layout", name)
		}
		*dst = i
	}
	return w, nil
}

// launch is one kernel launch of a program: its record is at rec in the program's arena.
type launch struct {
	name    string
	grid    [3]uint32
	cluster [3]uint32 // thread-block cluster dimensions (ClusterQueue); zero: a plain launch
	rec     int64
	bufs    []uint64
	what    string // "layer 3 (full_attention): o_proj", for errors
}

// program is one recorded step: its launches, their records (uploaded once) and, after the
// first replay, its recording (Queue.Record: a CUDA graph, a Metal indirect command buffer).
type program struct {
	name     string
	launches []launch
	recs     Records
	graph    Replay
}

// builder appends launches to a program.
type builder struct {
	p    *program
	pfx  string // error prefix ("cuda")
	what string
	err  error
}

// add appends a launch of kernel name with its parameter record rec (a kernels *Params value;
// when it has a Validate method, the record is checked first), grid and buffer addresses.
// The first error (a null buffer, a record Validate rejects) is kept in b.err, naming the
// program and the op (b.what); later adds do nothing.
func (b *builder) add(name string, rec any, grid [3]uint32, bufs ...uint64) {
	if b.err != nil {
		return
	}
	for i, x := range bufs {
		if x == 0 {
			b.err = fmt.Errorf("%s: program %s: %s: %s buffer %d is null", b.pfx, b.p.name, b.what, name, i)
			return
		}
	}
	if err := validate(rec); err != nil {
		b.err = fmt.Errorf("%s: program %s: %s: %s: %w", b.pfx, b.p.name, b.what, name, err)
		return
	}
	l := launch{name: name, grid: grid, rec: b.p.recs.Add(rec), bufs: bufs, what: b.what}
	if c, ok := rec.(interface{ ClusterDims() [3]uint32 }); ok {
		if d := c.ClusterDims(); d[0]*d[1]*d[2] > 1 {
			l.cluster = d
		}
	}
	b.p.launches = append(b.p.launches, l)
}

// validate calls rec's Validate method when it has one (on the value, or on a pointer to a
// copy of it), else returns nil.
func validate(rec any) error {
	type validator interface{ Validate() error }
	if v, ok := rec.(validator); ok {
		return v.Validate()
	}
	if rv := reflect.ValueOf(rec); rv.IsValid() && rv.Kind() != reflect.Pointer {
		p := reflect.New(rv.Type())
		p.Elem().Set(rv)
		if v, ok := p.Interface().(validator); ok {
			return v.Validate()
		}
	}
	return nil
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

// segment returns the output-column offset of the segment of m whose checkpoint name ends
// with suffix, requiring a concatenated stack and rows rows in the segment.
func segment(m *Matrix, suffix string, rows int, device string) (int, error) {
	if m.Stack.Mode != blm.Concat {
		return 0, backend.Unsupported(fmt.Errorf("tensor %s: stack mode %v, the %s programs read concatenated segments", m.Name, m.Stack.Mode, device))
	}
	off := 0
	for _, s := range m.Stack.Segments {
		if strings.HasSuffix(s.Name, suffix) {
			if int(s.Rows) != rows {
				return 0, fmt.Errorf("tensor %s: segment %s has %d rows, want %d", m.Name, suffix, s.Rows, rows)
			}
			return off, nil
		}
		off += int(s.Rows)
	}
	return 0, fmt.Errorf("tensor %s: no segment %s", m.Name, suffix)
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
			return fail(backend.Unsupported(fmt.Errorf("tensor %s: the SwiGLU epilogue needs gate_proj and up_proj interleaved by 8 rows", p.gateUp.Name)))
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
			for _, s := range []struct {
				off    *int
				suffix string
				rows   int
				m      *Matrix
			}{{&p.zOff, "in_proj_z.weight", vd, p.zqkv}, {&p.qkvOff, "in_proj_qkv.weight", cd, p.zqkv},
				{&p.aOff, "in_proj_a.weight", c.VHeads, p.ab}, {&p.bOff, "in_proj_b.weight", c.VHeads, p.ab}} {
				if *s.off, err = segment(s.m, s.suffix, s.rows, t.Device.Name()); err != nil {
					return fail(err)
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
			for _, s := range []struct {
				off    *int
				suffix string
				rows   int
			}{{&p.qOff, "q_proj.weight", 2 * qd}, {&p.kOff, "k_proj.weight", kvd}, {&p.vOff, "v_proj.weight", kvd}} {
				if *s.off, err = segment(p.qkv, s.suffix, s.rows, t.Device.Name()); err != nil {
					return fail(err)
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
	progDecode  = iota // StepBegin, one row (the anchor), LM head, token choice, StepAccept
	progPrefill        // n host-written rows, StepPrefill; LM head on the last row when last
	progRound          // the speculative round (docs/speculative.md §1), see buildRound
)

// emitter appends the launches of one program's ops to a builder; done is the DoneWord of the
// records it makes (the Done word, or NoWord for the launches that must run after a stop).
type emitter struct {
	s    *Session
	b    *builder
	done uint32
	// prefill: the launches of a prefill chunk, whose MMA-layout products of 9–16 rows may take
	// two tiles per threadgroup (kernels.BLMXParams.Tiles). Elsewhere — a round's verify and
	// draft rows, up to block + 1 ≤ 16 — they keep one, the split of a decode step's one row,
	// so that verify and decode sum in the same order (bit-identical rows).
	prefill bool
}

func (e *emitter) what(f string, a ...any) { e.b.what = fmt.Sprintf(f, a...) }

func (e *emitter) rms(x, wv, z, y uint64, rows int, rowsWord uint32, groups, n, ldx, ldz, ldy int, mode uint32) {
	r := kernels.RMSNormParams{DoneWord: e.done, Rows: uint32(rows), RowsWord: rowsWord, Groups: uint32(groups), N: uint32(n),
		LdX: uint32(ldx), LdZ: uint32(ldz), LdY: uint32(ldy), Mode: mode, Eps: e.s.t.Cfg.RMSEps}
	e.b.add("lithos_rmsnorm", r, r.Grid(), x, wv, z, y)
}

// rmsEps is rms with another epsilon (the draft head's rms_norm_eps).
func (e *emitter) rmsEps(eps float32, x, wv, y uint64, rows int, rowsWord uint32, groups, n, ldx, ldy int) {
	r := kernels.RMSNormParams{DoneWord: e.done, Rows: uint32(rows), RowsWord: rowsWord, Groups: uint32(groups), N: uint32(n),
		LdX: uint32(ldx), LdZ: uint32(ldx), LdY: uint32(ldy), Mode: kernels.RMSPlain, Eps: eps}
	e.b.add("lithos_rmsnorm", r, r.Grid(), x, wv, x, y)
}

// normMM is the target's product of m with RMSNorm(x) (RMSPlain, weights wv: the checkpoint's
// 1 + w) over rows contiguous rows of Hidden values: with m in the MMA layout one launch, the
// norm folded into the product (kernels.BLMXParams.Norm), else the RMSNorm into the session's
// hn then the product.
func (e *emitter) normMM(m *Matrix, rows int, rowsWord uint32, epi uint32, x, wv, y uint64) {
	if m.Layout != kernels.BLMLayoutMMA {
		h := e.s.t.Cfg.Hidden
		e.rms(x, wv, x, e.s.hn.Ptr, rows, rowsWord, 1, h, h, h, h, kernels.RMSPlain)
		e.mm(m, rows, rowsWord, epi, e.s.hn.Ptr, y, 0, 0)
		return
	}
	e.mmx(m, rows, rowsWord, epi, x, y, 0, 0, wv, e.s.t.Cfg.RMSEps)
}

// mm is the BLM product of m with rows activation rows (the count from rowsWord when it is not
// NoWord); ldx, ldy of 0 keep NewBLMParams' contiguous defaults.
func (e *emitter) mm(m *Matrix, rows int, rowsWord uint32, epi uint32, x, y uint64, ldx, ldy int) {
	e.mmx(m, rows, rowsWord, epi, x, y, ldx, ldy, 0, 0)
}

// mmx is mm with, for a matrix in the MMA layout, the RMSNorm (weights nw, epsilon eps) of x's
// rows folded into the product (nw 0: none).
func (e *emitter) mmx(m *Matrix, rows int, rowsWord uint32, epi uint32, x, y uint64, ldx, ldy int, nw uint64, eps float32) {
	if e.b.err != nil {
		return
	}
	if m.Layout == kernels.BLMLayoutMMA {
		d := e.s.t.MMA
		d.OneTile = d.OneTile || !e.prefill
		r, err := kernels.NewBLMXParams(m.Geometry, rows, epi, d)
		if err != nil {
			e.b.err = fmt.Errorf("%s: %w", m.Name, err)
			return
		}
		// The kernel of the record's tiles (two per threadgroup for a prefill chunk's 9–16 rows
		// where they fit).
		name, err := kernels.BLMXKernelTiles(m.Geometry.Format, r.Tiles)
		if err != nil {
			e.b.err = fmt.Errorf("%s: %w", m.Name, err)
			return
		}
		r.DoneWord, r.RowsWord = e.done, rowsWord
		if ldx > 0 {
			r.LdX = uint32(ldx)
		}
		if ldy > 0 {
			r.LdY = uint32(ldy)
		}
		if nw == 0 {
			nw = m.Scales // unread without Norm
		} else {
			r.Norm, r.Eps = 1, eps
		}
		e.b.add(name, r, r.Grid(), m.Ptr, m.Scales, x, y, nw)
		return
	}
	name, err := m.Kernel(rows)
	if err != nil {
		e.b.err = err
		return
	}
	r, err := kernels.NewBLMParams(m.Geometry, rows, epi)
	if err != nil {
		e.b.err = fmt.Errorf("%s: %w", m.Name, err)
		return
	}
	if e.s.clusters {
		r = r.WithClusters()
	}
	r.DoneWord, r.RowsWord, r.Layout = e.done, rowsWord, m.Layout
	if ldx > 0 {
		r.LdX = uint32(ldx)
	}
	if ldy > 0 {
		r.LdY = uint32(ldy)
	}
	e.b.add(name, r, r.Grid(), m.Ptr, m.Scales, x, y)
}

func (e *emitter) copyRows(x, y uint64, rows int, rowsWord uint32, n, ldx, ldy int) {
	r := kernels.CopyParams{DoneWord: e.done, Rows: uint32(rows), RowsWord: rowsWord, N: uint32(n), LdX: uint32(ldx), LdY: uint32(ldy)}
	e.b.add("lithos_copy", r, r.Grid(), x, y)
}

func (e *emitter) gather(ids uint64, idsOff uint32, table uint64, dtype uint32, rows int, rowsWord uint32, width, vocab, ldy int, y uint64) {
	r := kernels.GatherParams{DoneWord: e.done, Rows: uint32(rows), RowsWord: rowsWord, Width: uint32(width), Vocab: uint32(vocab),
		IdsOff: idsOff, DType: dtype, LdY: uint32(ldy)}
	e.b.add("lithos_gather", r, r.Grid(), ids, table, y)
}

// choose writes the token of each of rows logit rows ([rows, vocab] at x) to out[outOff + r]:
// the argmax at temperature 0, else the session's sampler at the positions
// ctl[posWord] + posAdd + r.
func (e *emitter) choose(x uint64, rows int, rowsWord uint32, out uint64, outOff uint32, posWord, posAdd uint32) {
	s := e.s
	vocab := s.t.Cfg.Vocab
	if sp := s.opt.Sampling; !sp.Greedy() {
		r, err := kernels.NewSampleParams(rows, vocab, sp.Temperature, sp.TopK, sp.TopP, s.words.SeedLo, 0)
		if err != nil {
			if e.b.err == nil {
				e.b.err = err
			}
			return
		}
		r.DoneWord, r.RowsWord, r.PosWord, r.PosAdd, r.OutOff = e.done, rowsWord, posWord, posAdd, outOff
		e.b.add("lithos_sample", r, r.Grid(), x, out)
		return
	}
	ar := kernels.NewArgmaxParams(rows, vocab)
	ar.DoneWord, ar.RowsWord, ar.OutOff = e.done, rowsWord, outOff
	e.b.add("lithos_argmax_partial", ar, ar.GridPartial(), x, s.pv.Ptr, s.pi.Ptr)
	e.b.add("lithos_argmax_final", ar, ar.GridFinal(), s.pv.Ptr, s.pi.Ptr, out)
}

// layers records the embedding gather of Pending[0…n) and every target layer over n rows (the
// count from rowsWord when it is not NoWord), positions from the Position word, GDN slots from
// the Step word. With the session's taps, the tapped layers' outputs are copied into the tap
// buffer ([rows, taps·Hidden]); with keep, each GDN layer writes its projections, conv output
// and gates into its own keep buffers (what the commit replay reads) instead of the shared
// scratch.
func (e *emitter) layers(n int, rowsWord uint32, keep bool) {
	s, t, c, w := e.s, e.s.t, &e.s.t.Cfg, e.s.words
	h := c.Hidden
	kd, vd, cd := c.KHeads*c.KDim, c.VHeads*c.VDim, c.ConvDim()
	hd := c.HeadDim
	qd, kvd := c.Heads*hd, c.KVHeads*hd
	sp := s.spec
	tap := func(layer int) {
		if sp == nil {
			return
		}
		for i, id := range sp.taps {
			if id == layer {
				e.what("tap of layer %d", layer)
				e.copyRows(s.x.Ptr, f32at(sp.tapBuf, i*h), n, rowsWord, h, h, len(sp.taps)*h)
			}
		}
	}
	e.what("embedding")
	emb, _ := t.TensorAt("embed_tokens")
	e.gather(s.ctl.Ptr, w.Pending, emb, s.embDType, n, rowsWord, h, c.Vocab, h, s.x.Ptr)
	tap(-1)
	for li, l := range s.plans {
		switch l.kind {
		case model.GDN:
			nz := int(l.zqkv.Geometry.N)
			zqkv, conv, beta, g := s.zqkv, s.conv, s.beta, s.g
			if keep {
				zqkv, conv, beta, g = sp.kZqkv[l.idx], sp.kConv[l.idx], sp.kBeta[l.idx], sp.kG[l.idx]
			}
			cv := kernels.ConvParams{DoneWord: e.done, Rows: uint32(n), RowsWord: rowsWord, Channels: uint32(cd), KernelSize: uint32(c.ConvKernel),
				Slot: 0, SlotWord: w.Step, SlotXor: 0, WriteOut: 1, LdX: uint32(nz), LdY: uint32(cd)}
			// in_proj_ab in the conv's launch where its row-major copy was uploaded
			// (Matrix.RowMajor; kernels.ConvParams.ABOut) — reading the residual rows and
			// RMSNorming them itself when in_proj_zqkv folds the input norm (the MMA layout: the
			// input norm's launch goes too), else the normed rows — or its own product launch.
			abConv, abX := l.ab.RowMajor != 0, s.hn.Ptr
			withAB := cv
			withAB.ABOut, withAB.ABIn, withAB.ABLdX, withAB.ABLdY = uint32(l.ab.Geometry.N), uint32(h), uint32(h), uint32(l.ab.Geometry.N)
			if l.zqkv.Layout == kernels.BLMLayoutMMA {
				withAB.ABNorm, withAB.ABEps = 1, c.RMSEps
			}
			abConv = abConv && withAB.Validate() == nil
			if abConv && withAB.ABNorm != 0 {
				e.what("layer %d (%v) input norm and in_proj_zqkv", li, l.kind)
				e.mmx(l.zqkv, n, rowsWord, kernels.EpiStore, s.x.Ptr, zqkv.Ptr, 0, 0, l.inNorm, c.RMSEps)
				abX = s.x.Ptr
			} else {
				e.what("layer %d (%v) input norm", li, l.kind)
				e.rms(s.x.Ptr, l.inNorm, s.x.Ptr, s.hn.Ptr, n, rowsWord, 1, h, h, h, h, kernels.RMSPlain)
				e.what("layer %d (%v) in_proj_zqkv", li, l.kind)
				e.mm(l.zqkv, n, rowsWord, kernels.EpiStore, s.hn.Ptr, zqkv.Ptr, 0, 0)
			}
			if abConv {
				cv = withAB
			} else {
				e.what("layer %d (%v) in_proj_ab", li, l.kind)
				e.mm(l.ab, n, rowsWord, kernels.EpiStore, s.hn.Ptr, s.ab.Ptr, 0, 0)
			}
			e.what("layer %d (%v) conv1d", li, l.kind)
			// The L2 norm of the queries (scaled by 1/√d_k) and the keys after them: in the
			// conv's launch where its rules allow (kernels.ConvParams.NormGroups: the 27B's
			// 128-wide heads), else one lithos_l2norm launch after it; the same values either way.
			l2 := kernels.L2NormParams{DoneWord: e.done, Rows: uint32(n), RowsWord: rowsWord, Groups: uint32(2 * c.KHeads), D: uint32(c.KDim),
				Ld: uint32(cd), Eps: model.L2Eps, Post: float32(1 / math.Sqrt(float64(c.KDim))), PostGroups: uint32(c.KHeads)}
			fused := cv
			fused.NormGroups, fused.NormD, fused.NormPostGroups, fused.NormEps, fused.NormPost = l2.Groups, l2.D, l2.PostGroups, l2.Eps, l2.Post
			if fused.Validate() == nil {
				cv = fused
				e.what("layer %d (%v) conv1d and q/k L2 norm", li, l.kind)
			}
			if cv.ABOut != 0 {
				if cv.NormGroups != 0 {
					e.what("layer %d (%v) conv1d, q/k L2 norm and in_proj_ab", li, l.kind)
				} else {
					e.what("layer %d (%v) conv1d and in_proj_ab", li, l.kind)
				}
				e.b.add("lithos_conv", cv, cv.Grid(), f32at(zqkv, l.qkvOff), l.conv, s.convState[l.idx].Ptr, conv.Ptr,
					abX, l.ab.RowMajor, l.inNorm, l.ab.Scales, s.ab.Ptr)
			} else {
				e.b.add("lithos_conv", cv, cv.Grid(), f32at(zqkv, l.qkvOff), l.conv, s.convState[l.idx].Ptr, conv.Ptr,
					conv.Ptr, l.conv, l.conv, l.conv, conv.Ptr) // no in_proj_ab: any buffers
			}
			if cv.NormGroups == 0 {
				e.what("layer %d (%v) q/k L2 norm", li, l.kind)
				e.b.add("lithos_l2norm", l2, l2.Grid(), conv.Ptr)
			}
			e.what("layer %d (%v) gates and delta rule", li, l.kind)
			// The gates (β, g) computed in the delta rule's launch and kept in beta, g for the
			// commit replay (GDNParams.Gates).
			gd := kernels.GDNParams{DoneWord: e.done, Rows: uint32(n), RowsWord: rowsWord, KHeads: uint32(c.KHeads), VHeads: uint32(c.VHeads),
				KDim: uint32(c.KDim), VDim: uint32(c.VDim), Slot: 0, SlotWord: w.Step, SlotXor: 0, WriteOut: 1,
				LdQK: uint32(cd), LdV: uint32(cd), LdGate: uint32(c.VHeads), LdOut: uint32(vd), Gates: 1, LdAB: uint32(2 * c.VHeads)}
			e.b.add("lithos_gdn", gd, gd.Grid(), conv.Ptr, f32at(conv, kd), f32at(conv, 2*kd), beta.Ptr, g.Ptr, s.gdnState[l.idx].Ptr, s.o.Ptr,
				f32at(s.ab, l.aOff), f32at(s.ab, l.bOff), l.negA, l.dtBias)
			e.what("layer %d (%v) gated norm", li, l.kind)
			e.rms(s.o.Ptr, l.gn, f32at(zqkv, l.zOff), s.o.Ptr, n, rowsWord, c.VHeads, c.VDim, vd, nz, vd, kernels.RMSGated)
			e.what("layer %d (%v) out_proj", li, l.kind)
			e.mm(l.out, n, rowsWord, kernels.EpiAdd, s.o.Ptr, s.x.Ptr, 0, 0)
		case model.Attention:
			nq := int(l.qkv.Geometry.N)
			e.what("layer %d (%v) input norm and qkv", li, l.kind)
			e.normMM(l.qkv, n, rowsWord, kernels.EpiStore, s.x.Ptr, l.inNorm, s.qkv.Ptr)
			e.what("layer %d (%v) q/k norm, rope and kv append", li, l.kind)
			// One launch: the query heads (interleaved with the gate heads, stride 2·head_dim)
			// normed and rotated into qn, the key heads normed and rotated straight into the key
			// cache, the value heads copied into the value cache.
			prep := kernels.AttnPrepParams{DoneWord: e.done, Rows: uint32(n), RowsWord: rowsWord, Pos: 0, PosWord: w.Position,
				Heads: uint32(c.Heads), KVHeads: uint32(c.KVHeads), HeadDim: uint32(hd), RotDim: uint32(c.RotaryDim),
				LdX: uint32(nq), QOff: uint32(l.qOff), QStride: uint32(2 * hd), KOff: uint32(l.kOff), VOff: uint32(l.vOff),
				LdQ: uint32(qd), LdC: uint32(kvd), Capacity: uint32(s.opt.Capacity), Eps: c.RMSEps}
			prepK, partialK := kernels.AttnKernels(s.kvBF16())
			e.b.add(prepK, prep, prep.Grid(), s.qkv.Ptr, l.qNorm, l.kNorm, s.invFreq.Ptr, s.qn.Ptr, s.kc[l.idx].Ptr, s.vc[l.idx].Ptr)
			e.what("layer %d (%v) attention and output gate", li, l.kind)
			// The merge multiplies by σ of the gate heads (after each query head in qkv).
			at := kernels.AttnParams{DoneWord: e.done, Rows: uint32(n), RowsWord: rowsWord, Pos: 0, PosWord: w.Position,
				Heads: uint32(c.Heads), KVHeads: uint32(c.KVHeads), HeadDim: uint32(hd), LdQ: uint32(qd), LdO: uint32(qd), LdKV: uint32(kvd),
				Part: AttnPartition, Parts: uint32(s.parts), Scale: float32(1 / math.Sqrt(float64(hd))),
				Gate: 1, LdG: uint32(nq), GateStride: uint32(2 * hd)}
			e.b.add(partialK, at, at.GridPartial(), s.qn.Ptr, s.kc[l.idx].Ptr, s.vc[l.idx].Ptr, s.pm.Ptr, s.pl.Ptr, s.po.Ptr)
			e.b.add("lithos_attn_merge", at, at.GridMerge(), s.pm.Ptr, s.pl.Ptr, s.po.Ptr, f32at(s.qkv, l.qOff+hd), s.att.Ptr)
			e.what("layer %d (%v) o_proj", li, l.kind)
			e.mm(l.o, n, rowsWord, kernels.EpiAdd, s.att.Ptr, s.x.Ptr, 0, 0)
		}
		e.what("layer %d (%v) post norm and mlp gate_up", li, l.kind)
		e.normMM(l.gateUp, n, rowsWord, kernels.EpiSwiGLU, s.x.Ptr, l.postNorm, s.act.Ptr)
		e.what("layer %d (%v) mlp down_proj", li, l.kind)
		e.mm(l.down, n, rowsWord, kernels.EpiAdd, s.act.Ptr, s.x.Ptr, 0, 0)
		tap(li)
	}
}

func (s *Session) stepRecord(mode uint32) kernels.StepParams {
	w := s.words
	return kernels.StepParams{DoneWord: kernels.NoWord, Mode: mode, Capacity: uint32(s.opt.Capacity), Block: 0, RingCap: uint32(s.ring.Capacity()),
		EOSCount: uint32(len(s.opt.EOS)), WStep: w.Step, WPosition: w.Position, WRows: w.Rows, WPending: w.Pending,
		WAnchor: w.Anchor, WAccepted: w.Accepted, WCommitted: w.Committed, WPrefillLeft: w.PrefillLeft,
		WDone: w.Done, WError: w.Error, WRingHead: w.RingHead, WRingTail: w.RingTail, WStopAt: w.StopAt}
}

// buildProgram records the launches of one plain step over n rows: the embedding gather of the
// Pending tokens, every layer, and (decode, or the last prefill chunk) the final norm, the LM
// head of the last row, the token choice (argmax, or the sampler at the position the token will
// occupy) into the targets and the step-state control kernel. Every kernel's done word is the
// Done word, so a replay after done does nothing. With a drafter the layers record their taps
// and a prefill chunk ends with the drafter's append of its rows.
func (s *Session) buildProgram(kind, n int, last bool) (*program, error) {
	c := &s.t.Cfg
	p := &program{name: fmt.Sprintf("decode(%d rows)", n)}
	if kind == progPrefill {
		p.name = fmt.Sprintf("prefill(%d rows, last %v)", n, last)
	}
	p.recs.Align = recordAlign(s.d)
	b := &builder{p: p, pfx: s.pfx}
	e := &emitter{s: s, b: b, done: s.words.Done, prefill: kind == progPrefill}
	nw := uint32(kernels.NoWord)
	h := c.Hidden
	if kind == progDecode {
		b.what = "step begin"
		r := s.stepRecord(kernels.StepBegin)
		b.add("lithos_step", r, r.Grid(), s.targets.Ptr, s.eos.Ptr, s.ringHost.DevPtr)
	}
	e.layers(n, nw, false)
	if kind == progDecode || last {
		e.what("final norm and lm_head")
		e.normMM(s.head, 1, nw, kernels.EpiStore, f32at(s.x, (n-1)*h), s.finalNorm, s.logits.Ptr)
		e.what("token")
		// Decode: the token of position Position + 1; prefill: Position + n (read before the commit).
		add := uint32(1)
		if kind == progPrefill {
			add = uint32(n)
		}
		e.choose(s.logits.Ptr, 1, nw, s.targets.Ptr, 0, s.words.Position, add)
	}
	b.what = "step"
	mode := uint32(kernels.StepPrefill)
	if kind == progDecode {
		mode = kernels.StepAccept
	}
	r := s.stepRecord(mode)
	b.add("lithos_step", r, r.Grid(), s.targets.Ptr, s.eos.Ptr, s.ringHost.DevPtr)
	if kind == progPrefill && s.spec != nil {
		e.done = nw
		s.emitAppend(e, n, s.words.Committed)
		s.emitRound(e, kernels.RoundEnd, s.words.Committed, false)
	}
	if b.err != nil {
		return nil, b.err
	}
	if err := p.recs.Upload(s.d); err != nil {
		return nil, err
	}
	return p, nil
}

// emitRound adds one lithos_round launch of mode (count: RoundEnd's word).
func (s *Session) emitRound(e *emitter, mode uint32, count uint32, timed bool) {
	sp, w := s.spec, s.words
	r := kernels.RoundParams{DoneWord: kernels.NoWord, Mode: mode, Capacity: uint32(s.opt.Capacity), Block: uint32(sp.block),
		RingCap: uint32(s.ring.Capacity()), EOSCount: uint32(len(s.opt.EOS)), WStep: w.Step, WPosition: w.Position, WRows: w.Rows,
		WPending: w.Pending, WAnchor: w.Anchor, WAccepted: w.Accepted, WCommitted: w.Committed, WDone: w.Done, WError: w.Error,
		WRingHead: w.RingHead, WRingTail: w.RingTail, WStopAt: w.StopAt, WDraftLen: w.DraftLen, WDraftContext: w.DraftContext,
		WCommitRows: s.auxCommitRows, WBlockLast: s.auxBlockLast, WIsRound: s.auxIsRound, WCount: count,
		ConfStop: sp.confStop, ConfBias: sp.d.confBias}
	if sp.d.Cfg.Confidence {
		r.HasConf = 1
	}
	if timed {
		r.Timed = 1
	}
	e.what("round control (mode %d)", mode)
	e.b.add("lithos_round", r, r.Grid(), s.targets.Ptr, s.eos.Ptr, s.ringHost.DevPtr, sp.conf.Ptr, sp.stats.Ptr)
}

// emitAppend records the drafter's append of the context features of up to n rows (the count
// from countWord) at positions DraftContext + r: ctx = hidden_norm(fc(taps)); per draft layer
// K = RoPE(k_norm(k_proj(ctx))), V = v_proj(ctx) into its context cache.
func (s *Session) emitAppend(e *emitter, n int, countWord uint32) {
	sp, d := s.spec, s.spec.d
	c := &d.Cfg
	h, hd := c.Hidden, c.HeadDim
	kvd := c.KVHeads * hd
	e.what("draft append: fc")
	e.mm(d.fc.m, n, countWord, kernels.EpiStore, sp.tapBuf.Ptr, sp.cx.Ptr, 0, 0)
	e.what("draft append: hidden_norm")
	e.rmsEps(c.RMSEps, sp.cx.Ptr, d.hnorm, sp.cx.Ptr, n, countWord, 1, h, h, h)
	for li, L := range d.layers {
		e.what("draft append: layer %d k/v", li)
		cols, ld := sp.project(e, []segMatrix{L.k, L.v}, n, countWord, sp.cx.Ptr, sp.cqkv)
		kcol, vcol := cols[0], cols[1]
		e.what("draft append: layer %d k_norm", li)
		e.rmsEps(c.RMSEps, f32at(sp.cqkv, kcol), L.kNorm, sp.ck.Ptr, n, countWord, c.KVHeads, hd, ld, kvd)
		e.what("draft append: layer %d rope", li)
		rp := kernels.RopeScaledParams{DoneWord: e.done, Rows: uint32(n), RowsWord: countWord, PosWord: s.words.DraftContext,
			Heads: uint32(c.KVHeads), HeadDim: uint32(hd), RotDim: uint32(hd), Ld: uint32(kvd), Scale: d.scale}
		e.b.add("lithos_rope_scaled", rp, rp.Grid(), sp.ck.Ptr, d.invFreq)
		e.what("draft append: layer %d context K/V", li)
		kv := kernels.KVAppendParams{DoneWord: e.done, Rows: uint32(n), RowsWord: countWord, PosWord: s.words.DraftContext, Width: uint32(kvd),
			LdK: uint32(kvd), LdV: uint32(ld), LdC: uint32(kvd), Capacity: uint32(s.opt.Capacity + sp.block)}
		e.b.add("lithos_kv_append", kv, kv.Grid(), sp.ck.Ptr, f32at(sp.cqkv, vcol), sp.ctxK[li].Ptr, sp.ctxV[li].Ptr)
	}
}

// project records the products of the segments (matrices of one stack, or of their own) over
// rows rows of x into out ([rows, ld] with each segment's columns), and returns each segment's
// first column and ld. A stack is multiplied once, whole (its other segments' columns are
// computed too).
func (sp *specState) project(e *emitter, segs []segMatrix, rows int, rowsWord uint32, x uint64, out *Buffer) ([]int, int) {
	col := map[*Matrix]int{}
	var order []*Matrix
	ld := 0
	for _, sg := range segs {
		if _, ok := col[sg.m]; ok {
			continue
		}
		col[sg.m] = ld
		order = append(order, sg.m)
		ld += int(sg.m.Geometry.N)
	}
	for _, m := range order {
		e.mm(m, rows, rowsWord, kernels.EpiStore, x, f32at(out, col[m]), 0, ld)
	}
	cols := make([]int, len(segs))
	for i, sg := range segs {
		cols[i] = col[sg.m] + sg.off
	}
	return cols, ld
}

// emitDraft records the drafter's block at positions P … P+B−1 (P = the Position word) and
// the Markov chain, leaving the drafts in Pending[1…B] and the confidence head's dot products
// in the conf buffer (runtime/draft.Drafter.Draft; .notes/spec-design.md).
func (s *Session) emitDraft(e *emitter) {
	sp, d, t := s.spec, s.spec.d, s.t
	c := &d.Cfg
	w := s.words
	B, h, hd := c.BlockSize, c.Hidden, c.HeadDim
	qd, kvd := c.Heads*hd, c.KVHeads*hd
	nw := uint32(kernels.NoWord)
	emb, _ := t.TensorAt("embed_tokens")
	e.what("draft: block embedding")
	e.gather(s.ctl.Ptr, w.Anchor, emb, s.embDType, 1, nw, h, t.Cfg.Vocab, h, sp.h.Ptr)
	if B > 1 {
		e.gather(sp.maskIDs.Ptr, 0, emb, s.embDType, B-1, nw, h, t.Cfg.Vocab, h, f32at(sp.h, h))
	}
	for li, L := range d.layers {
		e.what("draft: layer %d input norm", li)
		e.rmsEps(c.RMSEps, sp.h.Ptr, L.inNorm, sp.xn.Ptr, B, nw, 1, h, h, h)
		e.what("draft: layer %d q/k/v", li)
		cols, ld := sp.project(e, []segMatrix{L.q, L.k, L.v}, B, nw, sp.xn.Ptr, sp.qkv)
		qcol, kcol, vcol := cols[0], cols[1], cols[2]
		e.what("draft: layer %d q_norm, k_norm", li)
		e.rmsEps(c.RMSEps, f32at(sp.qkv, qcol), L.qNorm, sp.q.Ptr, B, nw, c.Heads, hd, ld, qd)
		e.rmsEps(c.RMSEps, f32at(sp.qkv, kcol), L.kNorm, sp.k.Ptr, B, nw, c.KVHeads, hd, ld, kvd)
		e.what("draft: layer %d rope", li)
		for _, q := range []struct {
			buf   *Buffer
			heads int
		}{{sp.q, c.Heads}, {sp.k, c.KVHeads}} {
			rp := kernels.RopeScaledParams{DoneWord: e.done, Rows: uint32(B), RowsWord: nw, PosWord: w.Position,
				Heads: uint32(q.heads), HeadDim: uint32(hd), RotDim: uint32(hd), Ld: uint32(q.heads * hd), Scale: d.scale}
			e.b.add("lithos_rope_scaled", rp, rp.Grid(), q.buf.Ptr, d.invFreq)
		}
		e.what("draft: layer %d block K/V", li)
		kv := kernels.KVAppendParams{DoneWord: e.done, Rows: uint32(B), RowsWord: nw, PosWord: w.Position, Width: uint32(kvd),
			LdK: uint32(kvd), LdV: uint32(ld), LdC: uint32(kvd), Capacity: uint32(s.opt.Capacity + B)}
		e.b.add("lithos_kv_append", kv, kv.Grid(), sp.k.Ptr, f32at(sp.qkv, vcol), sp.ctxK[li].Ptr, sp.ctxV[li].Ptr)
		e.what("draft: layer %d attention (non-causal)", li)
		// Every block row attends to the context and the whole block: keys 0 … BlockLast.
		at := kernels.AttnParams{DoneWord: e.done, Rows: uint32(B), RowsWord: nw, PosWord: s.auxBlockLast,
			Heads: uint32(c.Heads), KVHeads: uint32(c.KVHeads), HeadDim: uint32(hd), LdQ: uint32(qd), LdO: uint32(qd), LdKV: uint32(kvd),
			Part: AttnPartition, Parts: uint32(sp.parts), Scale: float32(1 / math.Sqrt(float64(hd))), Block: 1}
		e.b.add("lithos_attn_partial", at, at.GridPartial(), sp.q.Ptr, sp.ctxK[li].Ptr, sp.ctxV[li].Ptr, sp.pm.Ptr, sp.pl.Ptr, sp.po.Ptr)
		e.b.add("lithos_attn_merge", at, at.GridMerge(), sp.pm.Ptr, sp.pl.Ptr, sp.po.Ptr, sp.att.Ptr, sp.att.Ptr)
		e.what("draft: layer %d o_proj", li)
		e.mm(L.o.m, B, nw, kernels.EpiAdd, sp.att.Ptr, sp.h.Ptr, 0, 0)
		e.what("draft: layer %d post norm", li)
		e.rmsEps(c.RMSEps, sp.h.Ptr, L.postNorm, sp.xn.Ptr, B, nw, 1, h, h, h)
		e.what("draft: layer %d mlp", li)
		if L.gateUp != nil {
			e.mm(L.gateUp, B, nw, kernels.EpiSwiGLU, sp.xn.Ptr, sp.act.Ptr, 0, 0)
		} else {
			cols, ld := sp.project(e, []segMatrix{L.gate, L.up}, B, nw, sp.xn.Ptr, sp.gu)
			gcol, ucol := cols[0], cols[1]
			ew := kernels.EwiseParams{DoneWord: e.done, Rows: uint32(B), RowsWord: nw, N: uint32(c.Intermediate),
				LdA: uint32(ld), LdB: uint32(ld), LdY: uint32(c.Intermediate), Mode: kernels.EwSwiGLU}
			e.b.add("lithos_ewise", ew, ew.Grid(), f32at(sp.gu, gcol), f32at(sp.gu, ucol), sp.act.Ptr)
		}
		e.mm(L.down.m, B, nw, kernels.EpiAdd, sp.act.Ptr, sp.h.Ptr, 0, 0)
	}
	e.what("draft: final norm")
	e.rmsEps(c.RMSEps, sp.h.Ptr, d.norm, sp.hn.Ptr, B, nw, 1, h, h, h)
	e.what("draft: lm_head")
	e.mm(s.head, B, nw, kernels.EpiStore, sp.hn.Ptr, sp.base.Ptr, 0, 0)
	V := t.Cfg.Vocab
	r := c.MarkovRank
	for k := 0; k < B; k++ {
		prev := w.Anchor
		if k > 0 {
			prev = w.Pending + uint32(k) // draft k−1 is Pending[k]
		}
		if r > 0 {
			e.what("draft: markov step %d", k)
			e.gather(s.ctl.Ptr, prev, d.w1, d.w1DType, 1, nw, r, V, r, f32at(sp.cin, h))
			e.mm(d.w2.m, 1, nw, kernels.EpiAdd, f32at(sp.cin, h), f32at(sp.base, k*V), 0, 0)
		}
		e.what("draft: choose %d", k)
		ar := kernels.NewArgmaxParams(1, V)
		ar.DoneWord, ar.OutOff = e.done, w.Pending+1+uint32(k)
		e.b.add("lithos_argmax_partial", ar, ar.GridPartial(), f32at(sp.base, k*V), s.pv.Ptr, s.pi.Ptr)
		e.b.add("lithos_argmax_final", ar, ar.GridFinal(), s.pv.Ptr, s.pi.Ptr, s.ctl.Ptr)
		if c.Confidence {
			e.what("draft: confidence %d", k)
			e.copyRows(f32at(sp.hn, k*h), sp.cin.Ptr, 1, nw, h, h, h)
			e.mm(d.conf.m, 1, nw, kernels.EpiStore, sp.cin.Ptr, f32at(sp.conf, k), 0, 0)
		}
	}
}

// buildRound records the speculative round (docs/speculative.md §1), replayed as one recording:
// RoundBegin → the drafter's block and Markov chain (drafts into Pending[1…B]) → RoundRows (L,
// Rows) → the target over the Rows rows (taps, keep) → final norm and LM head of every row →
// the target's tokens (argmax or the sampler at positions P + 1 + k) → RoundAccept (scan, ring,
// commit, stats) → the GDN commit replay of CommitRows rows → RoundMark → the drafter's append
// of the committed rows' taps → RoundEnd (DraftContext). Near the end of the context the same
// program runs a single row (RoundBegin says so; the drafts are then unused).
func (s *Session) buildRound() (*program, error) {
	sp, w := s.spec, s.words
	n := sp.block + 1
	p := &program{name: fmt.Sprintf("round(%d rows)", n)}
	p.recs.Align = recordAlign(s.d)
	b := &builder{p: p, pfx: s.pfx}
	e := &emitter{s: s, b: b, done: w.Done}
	nw := uint32(kernels.NoWord)
	s.emitRound(e, kernels.RoundBegin, nw, false)
	s.emitDraft(e)
	s.emitRound(e, kernels.RoundRows, nw, false)
	e.layers(n, w.Rows, true)
	e.what("final norm and lm_head")
	e.normMM(s.head, n, w.Rows, kernels.EpiStore, s.x.Ptr, s.finalNorm, s.logits.Ptr)
	e.what("tokens")
	e.choose(s.logits.Ptr, n, w.Rows, s.targets.Ptr, 0, w.Position, 1)
	s.emitRound(e, kernels.RoundAccept, nw, false)
	// After the accept: these run on CommitRows, also in the round that set done.
	e.done = nw
	s.emitCommitReplay(e)
	s.emitRound(e, kernels.RoundMark, nw, false)
	s.emitAppend(e, n, s.auxCommitRows)
	s.emitRound(e, kernels.RoundEnd, s.auxCommitRows, true)
	if b.err != nil {
		return nil, b.err
	}
	if err := p.recs.Upload(s.d); err != nil {
		return nil, err
	}
	return p, nil
}

// emitCommitReplay adds the round's GDN commit replay (docs/speculative.md §2): every GDN
// layer's conv state and recurrent state advanced by the CommitRows committed rows from the
// records the verify kept. All layers in one conv launch and one delta-rule launch
// (kernels.ConvParams.Layers, kernels.GDNParams.Layers: each layer's buffers a fixed stride
// apart, allocLayers), where one pair of launches per layer paid a launch's fixed cost 2 × 48
// times a round on the 27B (docs/performance.md §3.3v); a launch pair per layer only when the
// layers' in_proj_zqkv keep the conv's columns at different offsets (not the packer's
// bundles) or the layered records fail their checks (their 32-bit offsets).
func (s *Session) emitCommitReplay(e *emitter) {
	sp, c, w := s.spec, &s.t.Cfg, s.words
	n := sp.block + 1
	nw := uint32(kernels.NoWord)
	b := e.b
	var gdn []*layerPlan
	for i := range s.plans {
		if s.plans[i].kind == model.GDN {
			gdn = append(gdn, &s.plans[i])
		}
	}
	if len(gdn) == 0 {
		return
	}
	cd, kd := c.ConvDim(), c.KHeads*c.KDim
	// records returns the launches' records for layers layers from l on (1: l alone).
	records := func(l *layerPlan, layers int) (kernels.ConvParams, kernels.GDNParams) {
		nz := int(l.zqkv.Geometry.N)
		cv := kernels.ConvParams{DoneWord: nw, Rows: uint32(n), RowsWord: s.auxCommitRows, Channels: uint32(cd), KernelSize: uint32(c.ConvKernel),
			Slot: 0, SlotWord: w.Step, SlotXor: 1, WriteOut: 0, LdX: uint32(nz), LdY: uint32(cd)}
		gd := kernels.GDNParams{DoneWord: nw, Rows: uint32(n), RowsWord: s.auxCommitRows, KHeads: uint32(c.KHeads), VHeads: uint32(c.VHeads),
			KDim: uint32(c.KDim), VDim: uint32(c.VDim), Slot: 0, SlotWord: w.Step, SlotXor: 1, WriteOut: 0,
			LdQK: uint32(cd), LdV: uint32(cd), LdGate: uint32(c.VHeads), LdOut: uint32(c.VHeads * c.VDim)}
		if layers > 1 {
			cv.Layers, cv.LayerX, cv.LayerState = uint32(layers), layerFloats(sp.kZqkv), layerFloats(s.convState)
			gd.Layers, gd.LayerQKV, gd.LayerGate, gd.LayerState = uint32(layers), layerFloats(sp.kConv), layerFloats(sp.kBeta), layerFloats(s.gdnState)
		}
		return cv, gd
	}
	// emit adds the launches of records cv, gd from layer l's buffers on.
	emit := func(l *layerPlan, cv kernels.ConvParams, gd kernels.GDNParams) {
		// No in_proj_ab (ABOut 0): its buffers may be any; no outputs (WriteOut 0): the
		// taps are not read.
		b.add("lithos_conv", cv, cv.Grid(), f32at(sp.kZqkv[l.idx], l.qkvOff), l.conv, s.convState[l.idx].Ptr, s.conv.Ptr,
			s.conv.Ptr, l.conv, l.conv, l.conv, s.conv.Ptr)
		kc := sp.kConv[l.idx]
		b.add("lithos_gdn", gd, gd.Grid(), kc.Ptr, f32at(kc, kd), f32at(kc, 2*kd), sp.kBeta[l.idx].Ptr, sp.kG[l.idx].Ptr, s.gdnState[l.idx].Ptr, s.o.Ptr,
			kc.Ptr, kc.Ptr, kc.Ptr, kc.Ptr) // Gates 0: ga, gb, neg_a, dt_bias unread
	}
	// One launch pair for all layers where their in_proj_zqkv keep the conv's columns at one
	// offset, β and g one stride apart (allocLayers gives both the same size) and the records
	// pass their checks (each stride at least a layer's extent — layerFloats is 0 for a stride a
	// record cannot hold — and 32-bit offsets); else a pair per layer.
	one := layerFloats(sp.kG) == layerFloats(sp.kBeta)
	for _, l := range gdn {
		one = one && l.qkvOff == gdn[0].qkvOff
	}
	if cv, gd := records(gdn[0], len(gdn)); one && cv.Validate() == nil && gd.Validate() == nil {
		e.what("GDN commit replay, %d layers", len(gdn))
		emit(gdn[0], cv, gd)
		return
	}
	for _, l := range gdn {
		e.what("layer %d commit replay", l.idx)
		cv, gd := records(l, 1)
		emit(l, cv, gd)
	}
}

// enqueue queues the program's launches on the session queue (directly, or into a recording).
func (s *Session) enqueue(p *program) error {
	for _, l := range p.launches {
		var err error
		if l.cluster != ([3]uint32{}) {
			cq, ok := s.s.(ClusterQueue)
			if !ok {
				return fmt.Errorf("%s: %s: %s needs thread-block clusters, which this queue does not launch", p.name, l.what, l.name)
			}
			err = cq.LaunchCluster(l.name, l.grid, l.cluster, s.ctl.Ptr, p.recs.At(l.rec), l.bufs...)
		} else {
			err = s.s.Launch(l.name, l.grid, s.ctl.Ptr, p.recs.At(l.rec), l.bufs...)
		}
		if err != nil {
			return fmt.Errorf("%s: %s: %w", p.name, l.what, err)
		}
	}
	return nil
}

// run queues one replay of the program: its recording (Queue.Record: a CUDA graph), made on
// first use (or the launches one by one when the session is not replaying).
func (s *Session) run(p *program) error {
	if !s.useGraphs {
		return s.enqueue(p)
	}
	if p.graph == nil {
		g, err := s.s.Record(func() error { return s.enqueue(p) })
		if err != nil {
			return fmt.Errorf("%s: capture %s: %w", s.pfx, p.name, err)
		}
		p.graph = g
	}
	return p.graph.Launch(s.s)
}

func (p *program) close() {
	if p.graph != nil {
		p.graph.Close()
	}
	p.recs.Free()
}

// Records is an arena of parameter records in device memory: a program adds the records of
// its launches (Add gives each one's offset), uploads them once (Upload), and its launches —
// recorded for replay — read them there. Records are Align-byte aligned (0: 16).
type Records struct {
	host  []byte
	Buf   *Buffer
	Align int64 // bytes, a power of two; 0 means 16 (set before the first Add)
}

// RecordAligner is a Device whose kernels need parameter records aligned to more than 16
// bytes (Metal: constant-space offsets, docs/metal.md §6); the programs align their records
// to RecordAlign() bytes. Optional: a Device without it gets 16.
type RecordAligner interface {
	RecordAlign() int64
}

// recordAlign is d's record alignment (RecordAligner), at least 16.
func recordAlign(d Device) int64 {
	if a, ok := d.(RecordAligner); ok && a.RecordAlign() > 16 {
		return a.RecordAlign()
	}
	return 16
}

// Add appends the record of params (kernels.Record) and returns its byte offset.
func (r *Records) Add(params any) int64 {
	align := r.Align
	if align <= 0 {
		align = 16
	}
	for int64(len(r.host))%align != 0 {
		r.host = append(r.host, 0)
	}
	b := kernels.Record(params)
	off := int64(len(r.host))
	r.host = append(r.host, b...)
	for int64(len(r.host))%16 != 0 {
		r.host = append(r.host, 0)
	}
	return off
}

// Len returns the arena's bytes so far.
func (r *Records) Len() int64 { return int64(len(r.host)) }

// Uploader makes a device buffer holding a copy of bytes (Device.Upload; cuda.Device has it too).
type Uploader interface {
	Upload(src []byte) (*Buffer, error)
}

// Upload copies the records to a new device buffer (replacing an earlier one). Errors: the
// device's, prefixed "parameter records".
func (r *Records) Upload(d Uploader) error {
	if r.Buf != nil {
		r.Buf.Free()
	}
	b, err := d.Upload(r.host)
	if err != nil {
		return fmt.Errorf("parameter records: %w", err)
	}
	r.Buf = b
	return nil
}

// At returns the device address of the record at off (after Upload).
func (r *Records) At(off int64) uint64 { return r.Buf.At(off) }

// Free releases the device buffer.
func (r *Records) Free() error {
	if r.Buf == nil {
		return nil
	}
	err := r.Buf.Free()
	r.Buf = nil
	return err
}
