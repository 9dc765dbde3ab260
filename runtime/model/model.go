package model

import (
	"context"
	"errors"
	"fmt"
	"math"

	"lithos/formats/bf16"
)

// Embedding is the token embedding table [Vocab, Dim] seen through a row gather.
type Embedding struct {
	Vocab, Dim int
	// Row writes the embedding of token id (0 ≤ id < Vocab) to dst[:Dim].
	Row func(dst []float32, id int) error
}

// DenseEmbedding gathers rows of a float32 [vocab, dim] table (not copied).
func DenseEmbedding(table []float32, vocab, dim int) (Embedding, error) {
	if vocab <= 0 || dim <= 0 || len(table) != vocab*dim {
		return Embedding{}, fmt.Errorf("embedding: %d values for [%d, %d]", len(table), vocab, dim)
	}
	return Embedding{Vocab: vocab, Dim: dim, Row: func(dst []float32, id int) error {
		if id < 0 || id >= vocab || len(dst) < dim {
			return fmt.Errorf("embedding: token %d outside [0, %d) or dst of %d floats", id, vocab, len(dst))
		}
		copy(dst, table[id*dim:(id+1)*dim])
		return nil
	}}, nil
}

// BF16Embedding gathers rows of a BF16 [vocab, dim] table (little-endian bytes as stored in
// safetensors, not copied), decoding each row exactly to float32.
func BF16Embedding(table []byte, vocab, dim int) (Embedding, error) {
	if vocab <= 0 || dim <= 0 || len(table) != 2*vocab*dim {
		return Embedding{}, fmt.Errorf("embedding: %d bytes for BF16 [%d, %d]", len(table), vocab, dim)
	}
	return Embedding{Vocab: vocab, Dim: dim, Row: func(dst []float32, id int) error {
		if id < 0 || id >= vocab || len(dst) < dim {
			return fmt.Errorf("embedding: token %d outside [0, %d) or dst of %d floats", id, vocab, len(dst))
		}
		return bf16.Decode(dst[:dim], table[2*id*dim:2*(id+1)*dim])
	}}, nil
}

// Layer holds one decoder layer's weights. Norm vectors are the scales RMSNorm multiplies
// by: 1 + w for the zero-centred norms (InputNorm, PostNorm, QNorm, KNorm), the plain w for
// GatedNorm.
type Layer struct {
	Kind                LayerKind
	InputNorm, PostNorm []float32 // [Hidden]

	// Gated DeltaNet (Kind == GDN).
	QKV       Matrix    // in_proj_qkv [ConvDim, Hidden], rows q | k | v, head-major
	Z         Matrix    // in_proj_z [VHeads·VDim, Hidden]
	B, A      Matrix    // in_proj_b, in_proj_a [VHeads, Hidden]
	Conv      []float32 // conv1d weight [ConvDim, ConvKernel]
	NegA      []float32 // −exp(A_log) [VHeads]
	DtBias    []float32 // [VHeads]
	GatedNorm []float32 // linear_attn.norm weight [VDim]
	Out       Matrix    // out_proj [Hidden, VHeads·VDim]

	// Gated attention (Kind == Attention).
	Q            Matrix    // q_proj [2·Heads·HeadDim, Hidden], rows [query | gate] per head
	K, V         Matrix    // k_proj, v_proj [KVHeads·HeadDim, Hidden]
	QNorm, KNorm []float32 // [HeadDim]
	O            Matrix    // o_proj [Hidden, Heads·HeadDim]

	// SwiGLU MLP.
	Gate, Up Matrix // [Intermediate, Hidden]
	Down     Matrix // [Hidden, Intermediate]
}

// Weights is every weight of the target model.
type Weights struct {
	Embed     Embedding
	Layers    []Layer
	FinalNorm []float32 // 1 + w, [Hidden]
	LMHead    Matrix    // [Vocab, Hidden]
}

// Model is a Qwen3.5 hybrid target: configuration, weights and the knobs of the CPU
// schedule. A Model is read-only during Step and may serve several States concurrently.
type Model struct {
	Cfg Config
	W   Weights

	// GDNChunkMin is the row count from which Step uses the chunked gated delta rule
	// (GDNChunked, chunks of DefaultChunk rows); fewer rows use GDNRecurrent. The two agree
	// to float32 rounding. Default 16.
	GDNChunkMin int
	// KeyPartition is the keys per online-softmax partial in Attend. Default 64.
	KeyPartition int
	// Trace, when set, sees intermediate activations of each Step (debugging and golden
	// comparisons): ("hidden", 0) the embeddings, ("mixer", l) layer l's mixer output before
	// the residual add, ("hidden", l+1) layer l's output, ("norm", -1) the final-normed rows
	// the LM head reads. data is [rows, Hidden] and only valid during the call.
	Trace func(kind string, layer, rows int, data []float32)

	rope Rope
	gdn  GDNShape
	attn AttnShape
}

// New checks w against cfg (every matrix and vector shape, layer kinds) and returns the model.
func New(cfg Config, w Weights) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(w.Layers) != len(cfg.Layers) {
		return nil, fmt.Errorf("model: %d layers of weights, config has %d", len(w.Layers), len(cfg.Layers))
	}
	h := cfg.Hidden
	if w.Embed.Vocab != cfg.Vocab || w.Embed.Dim != h || w.Embed.Row == nil {
		return nil, fmt.Errorf("model: embedding [%d, %d], want [%d, %d]", w.Embed.Vocab, w.Embed.Dim, cfg.Vocab, h)
	}
	type mat struct {
		name string
		m    Matrix
		n, k int
	}
	type vec struct {
		name string
		v    []float32
		n    int
	}
	mats := []mat{{"lm_head", w.LMHead, cfg.Vocab, h}}
	vecs := []vec{{"norm", w.FinalNorm, h}}
	for i, l := range w.Layers {
		p := fmt.Sprintf("layers.%d.", i)
		if l.Kind != cfg.Layers[i] {
			return nil, fmt.Errorf("model: %s is %v, config says %v", p[:len(p)-1], l.Kind, cfg.Layers[i])
		}
		vecs = append(vecs, vec{p + "input_layernorm", l.InputNorm, h}, vec{p + "post_attention_layernorm", l.PostNorm, h})
		mats = append(mats, mat{p + "mlp.gate_proj", l.Gate, cfg.Intermediate, h}, mat{p + "mlp.up_proj", l.Up, cfg.Intermediate, h},
			mat{p + "mlp.down_proj", l.Down, h, cfg.Intermediate})
		switch l.Kind {
		case GDN:
			vd := cfg.VHeads * cfg.VDim
			mats = append(mats, mat{p + "linear_attn.in_proj_qkv", l.QKV, cfg.ConvDim(), h}, mat{p + "linear_attn.in_proj_z", l.Z, vd, h},
				mat{p + "linear_attn.in_proj_b", l.B, cfg.VHeads, h}, mat{p + "linear_attn.in_proj_a", l.A, cfg.VHeads, h},
				mat{p + "linear_attn.out_proj", l.Out, h, vd})
			vecs = append(vecs, vec{p + "linear_attn.conv1d", l.Conv, cfg.ConvDim() * cfg.ConvKernel},
				vec{p + "linear_attn.A_log", l.NegA, cfg.VHeads}, vec{p + "linear_attn.dt_bias", l.DtBias, cfg.VHeads},
				vec{p + "linear_attn.norm", l.GatedNorm, cfg.VDim})
		case Attention:
			qd, kvd := cfg.Heads*cfg.HeadDim, cfg.KVHeads*cfg.HeadDim
			mats = append(mats, mat{p + "self_attn.q_proj", l.Q, 2 * qd, h}, mat{p + "self_attn.k_proj", l.K, kvd, h},
				mat{p + "self_attn.v_proj", l.V, kvd, h}, mat{p + "self_attn.o_proj", l.O, h, qd})
			vecs = append(vecs, vec{p + "self_attn.q_norm", l.QNorm, cfg.HeadDim}, vec{p + "self_attn.k_norm", l.KNorm, cfg.HeadDim})
		}
	}
	for _, m := range mats {
		if m.m.Mul == nil || m.m.N != m.n || m.m.K != m.k {
			return nil, fmt.Errorf("model: %s is [%d, %d], want [%d, %d]", m.name, m.m.N, m.m.K, m.n, m.k)
		}
	}
	for _, v := range vecs {
		if len(v.v) != v.n {
			return nil, fmt.Errorf("model: %s has %d values, want %d", v.name, len(v.v), v.n)
		}
	}
	return &Model{
		Cfg: cfg, W: w, GDNChunkMin: 16, KeyPartition: DefaultKeyPartition,
		rope: NewRope(cfg.RopeTheta, cfg.RotaryDim),
		gdn:  GDNShape{KHeads: cfg.KHeads, VHeads: cfg.VHeads, KDim: cfg.KDim, VDim: cfg.VDim},
		attn: AttnShape{Heads: cfg.Heads, KVHeads: cfg.KVHeads, HeadDim: cfg.HeadDim},
	}, nil
}

// State is one sequence's state: the KV cache of every attention layer (float32
// [Capacity, KVHeads·HeadDim]) and, for every GDN layer, the conv state ([ConvKernel−1,
// ConvDim]) and the recurrent state (float32 [VHeads, KDim, VDim]), each in two slots.
// Step reads slot Slot() and writes slot 1−Slot(); Commit adopts the written slot. A State
// is used by one goroutine at a time.
type State struct {
	cfg      *Config
	capacity int
	pos      int
	slot     int
	pending  int // rows of the last Step, not committed yet (−1: none)
	conv     [][2][]float32
	rec      [][2][]float32
	k, v     [][]float32
	kvBF16   bool  // every key and value rounded to BF16 as it is written (SetKVBF16)
	layerIdx []int // per layer: its index among the GDN or the attention layers
	arena    arena

	// Taps of the last step (StepWith's StepOptions.Taps): [tapRows, tapWidth].
	taps     []float32
	tapRows  int
	tapWidth int
	// What CommitPrefix replays, recorded by the last step when StepOptions.Keep was set
	// (keepRows rows; 0: nothing kept), per GDN layer.
	keep         []gdnKeep
	keepRows     int
	keepChunkMin int       // the model's GDNChunkMin when the rows were kept
	replayOut    []float32 // scratch for the replayed rows' discarded outputs
}

// gdnKeep is one GDN layer's per-row record of a Keep step: the raw (pre-conv) in_proj_qkv
// rows, which give the conv state after any prefix of the rows, and the gated delta rule's
// inputs, which replay the recurrent state.
type gdnKeep struct {
	raw     []float32 // [rows, ConvDim]
	q, k    []float32 // [rows, KHeads·KDim], L2-normalised (q scaled by 1/√d_k)
	v       []float32 // [rows, VHeads·VDim]
	beta, g []float32 // [rows, VHeads]
}

// NewState allocates the state of a sequence of at most capacity positions (the context:
// prompt and generated tokens). Memory: capacity·KVHeads·HeadDim·8 bytes per attention layer
// plus 2·(VHeads·KDim·VDim + (ConvKernel−1)·ConvDim)·4 bytes per GDN layer.
func (m *Model) NewState(capacity int) (*State, error) {
	c := &m.Cfg
	if capacity <= 0 {
		return nil, fmt.Errorf("state: capacity %d must be positive", capacity)
	}
	kvRow := c.KVHeads * c.HeadDim
	// capacity·na·kvRow·8 bytes > 2^40, in int64 and divided stepwise so that no product
	// overflows (and so that it builds where int is 32 bits).
	if na := c.Count(Attention); na > 0 && int64(capacity) > int64(1<<40)/8/int64(na)/int64(max(kvRow, 1)) {
		return nil, fmt.Errorf("state: capacity %d needs more than 1 TB of KV cache", capacity)
	}
	st := &State{cfg: c, capacity: capacity, pending: -1, layerIdx: make([]int, len(c.Layers))}
	for i, kind := range c.Layers {
		switch kind {
		case GDN:
			st.layerIdx[i] = len(st.rec)
			var rec, conv [2][]float32
			for s := range 2 {
				rec[s] = make([]float32, m.gdn.StateLen())
				conv[s] = make([]float32, (c.ConvKernel-1)*c.ConvDim())
			}
			st.rec = append(st.rec, rec)
			st.conv = append(st.conv, conv)
		case Attention:
			st.layerIdx[i] = len(st.k)
			st.k = append(st.k, make([]float32, capacity*kvRow))
			st.v = append(st.v, make([]float32, capacity*kvRow))
		}
	}
	return st, nil
}

// SetKVBF16 makes the rows written from now on hold every key and value rounded to the nearest
// BF16, ties to even (formats/bf16.FromFloat32), in the float32 cache: the values a BF16 KV
// cache holds (backend.KVBF16; the GPU backends store the BF16 bits). Set it on a new or reset
// state: rows written before keep their float32 values.
func (s *State) SetKVBF16(on bool) { s.kvBF16 = on }

// KVBF16 reports whether the state rounds its keys and values to BF16 (SetKVBF16).
func (s *State) KVBF16() bool { return s.kvBF16 }

// Pos returns the committed length of the sequence (the position of the next token).
func (s *State) Pos() int { return s.pos }

// Slot returns the slot (0 or 1) holding the committed GDN conv and recurrent state.
func (s *State) Slot() int { return s.slot }

// Capacity returns the most positions the state holds.
func (s *State) Capacity() int { return s.capacity }

// Reset empties the sequence: position 0, zero GDN states in both slots (KV rows are
// overwritten as positions are reused).
func (s *State) Reset() {
	s.pos, s.slot, s.pending = 0, 0, -1
	s.tapRows, s.keepRows = 0, 0
	for i := range s.rec {
		for j := range 2 {
			clear(s.rec[i][j])
			clear(s.conv[i][j])
		}
	}
}

// Recurrent returns the recurrent state of the gdn-th GDN layer in slot ([VHeads, KDim,
// VDim], a view).
func (s *State) Recurrent(gdn, slot int) []float32 { return s.rec[gdn][slot] }

// Conv returns the conv state of the gdn-th GDN layer in slot ([ConvKernel−1, ConvDim], the
// last raw inputs, oldest first; a view).
func (s *State) Conv(gdn, slot int) []float32 { return s.conv[gdn][slot] }

// GDNLayers returns the number of GDN layers (the range of Recurrent's and Conv's gdn).
func (s *State) GDNLayers() int { return len(s.rec) }

// Commit adopts the state written by the last Step of n rows: the slot flips and the
// position advances by n. To keep only the first j < n rows of a step (speculative
// verification), run it with StepOptions.Keep and call CommitPrefix(j) instead (or Step
// those j rows again, which reads the same committed slot, and Commit(j)).
func (s *State) Commit(n int) error {
	if s.pending < 0 || n != s.pending {
		return fmt.Errorf("state: commit of %d rows, but the last step ran %d rows (-1: none pending)", n, s.pending)
	}
	s.slot ^= 1
	s.pos += n
	s.pending = -1
	s.keepRows = 0
	return nil
}

// Taps returns the tapped rows of the last step run with StepOptions.Taps: [rows,
// len(Taps)·Hidden], row r holding, in the order of Taps, the output of each tapped decoder
// layer for that row (the residual stream after the layer's MLP; id −1: the embeddings). It
// is nil when the last step tapped nothing, and valid (a view) until the next step; Commit
// and CommitPrefix leave it in place, so the rows of a committed prefix can be read after the
// commit.
func (s *State) Taps() []float32 {
	if s.tapRows == 0 {
		return nil
	}
	return s.taps[:s.tapRows*s.tapWidth]
}

// CommitPrefix adopts the first j rows (1 ≤ j ≤ rows) of the last step, which must have run
// with StepOptions.Keep: for every GDN layer the conv state after row j−1 (the last
// ConvKernel−1 raw inputs of the committed conv state followed by rows 0…j−1) and the
// recurrent state after row j−1 (the gated delta rule replayed over the kept q, k, v, β, g of
// those rows, from the slot the step read, with the algorithm Step would use for j rows) are
// written into the slot the step wrote; the slot flips and the position advances by j. KV
// rows past j are left to be overwritten by later steps (ARCHITECTURE.md §3.4; the
// reference's gdn_commit, lithos-metal.md §4.5). j = rows is Commit(rows). Errors: no step
// pending, the pending step did not keep its rows, j out of range; the state is unchanged.
func (s *State) CommitPrefix(j int) error {
	if s.pending < 0 {
		return fmt.Errorf("state: commit of a %d-row prefix, but no step is pending", j)
	}
	if s.keepRows != s.pending {
		return fmt.Errorf("state: commit of a %d-row prefix, but the pending step of %d rows did not keep its rows (StepOptions.Keep)", j, s.pending)
	}
	if j < 1 || j > s.pending {
		return fmt.Errorf("state: commit of a %d-row prefix of a %d-row step: want 1 ≤ j ≤ %d", j, s.pending, s.pending)
	}
	if j == s.pending {
		return s.Commit(j)
	}
	c := s.cfg
	shape := GDNShape{KHeads: c.KHeads, VHeads: c.VHeads, KDim: c.KDim, VDim: c.VDim}
	cd, kd, vd := c.ConvDim(), c.KHeads*c.KDim, c.VHeads*c.VDim
	hist := c.ConvKernel - 1
	read, write := s.slot, 1-s.slot
	s.replayOut = grow(s.replayOut, j*vd)
	for gi := range s.rec {
		kp := &s.keep[gi]
		src, dst := s.conv[gi][read], s.conv[gi][write]
		for i := 0; i < hist; i++ {
			if tau := j - hist + i; tau >= 0 {
				copy(dst[i*cd:(i+1)*cd], kp.raw[tau*cd:(tau+1)*cd])
			} else {
				copy(dst[i*cd:(i+1)*cd], src[(hist+tau)*cd:(hist+tau+1)*cd])
			}
		}
		q, k, v := kp.q[:j*kd], kp.k[:j*kd], kp.v[:j*vd]
		beta, g := kp.beta[:j*c.VHeads], kp.g[:j*c.VHeads]
		var err error
		if j >= s.keepChunkMin {
			err = GDNChunked(shape, s.replayOut, q, k, v, beta, g, j, s.rec[gi][read], s.rec[gi][write], DefaultChunk)
		} else {
			err = GDNRecurrent(shape, s.replayOut, q, k, v, beta, g, j, s.rec[gi][read], s.rec[gi][write])
		}
		if err != nil { // shapes are the state's own: not reached
			return fmt.Errorf("state: replay of GDN layer %d: %w", gi, err)
		}
	}
	s.slot ^= 1
	s.pos += j
	s.pending = -1
	s.keepRows = 0
	return nil
}

// grow returns buf resliced to n floats, reallocated when its capacity is short.
func grow(buf []float32, n int) []float32 {
	if cap(buf) < n {
		return make([]float32, n)
	}
	return buf[:n]
}

// Forward runs tokens at positions Pos()… (Step) and commits them. It returns the logits of
// the last row ([Vocab]) or, with allRows, of every row ([len(tokens), Vocab]).
func (m *Model) Forward(ctx context.Context, st *State, tokens []int32, allRows bool) ([]float32, error) {
	logits, err := m.Step(ctx, st, tokens, allRows)
	if err != nil {
		return nil, err
	}
	return logits, st.Commit(len(tokens))
}

// Prefill runs a prompt through Forward in pieces of at most chunk rows (bounding the
// activation memory to chunk rows) and returns the logits of its last token ([Vocab]).
func (m *Model) Prefill(ctx context.Context, st *State, tokens []int32, chunk int) ([]float32, error) {
	if len(tokens) == 0 {
		return nil, errors.New("prefill: empty prompt")
	}
	if chunk <= 0 {
		return nil, fmt.Errorf("prefill: chunk %d must be positive", chunk)
	}
	if st.pos+len(tokens) > st.capacity {
		return nil, fmt.Errorf("prefill: %d tokens at position %d exceed the context of %d", len(tokens), st.pos, st.capacity)
	}
	var logits []float32
	for i := 0; i < len(tokens); i += chunk {
		var err error
		if logits, err = m.Forward(ctx, st, tokens[i:min(i+chunk, len(tokens))], false); err != nil {
			return nil, fmt.Errorf("prefill rows %d…: %w", i, err)
		}
	}
	return logits, nil
}

// StepOptions select what a step (StepWith) computes and records besides the new state.
type StepOptions struct {
	// AllRows returns the logits of every row ([rows, Vocab]) instead of the last row's.
	AllRows bool
	// Taps lists decoder layer ids (−1 ≤ id < len(Layers); −1 is the embeddings) whose output
	// rows the step records for State.Taps: the context features of a DSpark drafter
	// (target_layer_ids; HF hidden_states[id+1], qwen35-and-quant.md §D.1).
	Taps []int
	// Keep records, per GDN layer and row, what State.CommitPrefix needs to adopt a prefix
	// of the rows: the raw conv inputs and the gated delta rule's inputs
	// ((ConvDim·2 + 2·VHeads)·4 bytes per row and layer).
	Keep bool
}

// Step runs len(tokens) rows at positions Pos() … Pos()+len(tokens)−1: GDN layers read
// their conv and recurrent state from slot Slot() and write the state after the last row to
// the other slot; attention layers write their K/V rows at those positions (overwriting
// what a rejected earlier Step left there) and attend to every position up to each row's.
// Nothing is committed (see Commit), so a Step can be repeated or abandoned. It returns the
// logits as Forward does. Errors, before any work: no tokens, a token id outside the
// vocabulary, positions past the capacity, a state of another model; ctx is checked between
// layers (a cancelled Step leaves the committed state intact).
func (m *Model) Step(ctx context.Context, st *State, tokens []int32, allRows bool) ([]float32, error) {
	return m.StepWith(ctx, st, tokens, StepOptions{AllRows: allRows})
}

// StepWith is Step with options: the logits of every row (AllRows), the output rows of the
// decoder layers in Taps (State.Taps), and the per-row record that lets State.CommitPrefix
// adopt a prefix of the rows (Keep). Errors are Step's, and a tap id outside [−1, layers).
func (m *Model) StepWith(ctx context.Context, st *State, tokens []int32, o StepOptions) ([]float32, error) {
	c := &m.Cfg
	n := len(tokens)
	if st == nil || st.cfg != c {
		return nil, errors.New("step: the state was not made by this model")
	}
	if n == 0 {
		return nil, errors.New("step: no tokens")
	}
	if st.pos+n > st.capacity {
		return nil, fmt.Errorf("step: %d rows at position %d exceed the context of %d", n, st.pos, st.capacity)
	}
	for i, t := range tokens {
		if t < 0 || int(t) >= c.Vocab {
			return nil, fmt.Errorf("step: token %d (row %d) is outside the vocabulary [0, %d)", t, i, c.Vocab)
		}
	}
	for i, id := range o.Taps {
		if id < -1 || id >= len(c.Layers) {
			return nil, fmt.Errorf("step: tap %d is layer %d, outside [-1, %d)", i, id, len(c.Layers))
		}
	}
	st.pending, st.tapRows, st.keepRows = -1, 0, 0
	a := &st.arena
	a.reset()
	h := c.Hidden
	tw := len(o.Taps) * h
	if tw > 0 {
		st.taps = grow(st.taps, n*tw)
	}
	tap := func(layer int, x []float32) {
		for ti, id := range o.Taps {
			if id != layer {
				continue
			}
			for r := 0; r < n; r++ {
				copy(st.taps[r*tw+ti*h:r*tw+(ti+1)*h], x[r*h:(r+1)*h])
			}
		}
	}
	if o.Keep && len(st.keep) != len(st.rec) {
		st.keep = make([]gdnKeep, len(st.rec))
	}
	x := a.take(n * h)
	for r, t := range tokens {
		if err := m.W.Embed.Row(x[r*h:(r+1)*h], int(t)); err != nil {
			return nil, fmt.Errorf("step: row %d: %w", r, err)
		}
	}
	m.trace("hidden", 0, n, x)
	tap(-1, x)
	hn := a.take(n * h)
	mix := a.take(n * h)
	read, write := st.slot, 1-st.slot
	for li := range m.W.Layers {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		l := &m.W.Layers[li]
		mark := a.mark()
		RMSNorm(hn, x, l.InputNorm, n, c.RMSEps)
		var err error
		switch l.Kind {
		case GDN:
			err = m.gdnMixer(l, st, st.layerIdx[li], read, write, mix, hn, n, o.Keep)
		case Attention:
			err = m.attnMixer(l, st, st.layerIdx[li], mix, hn, n)
		}
		if err != nil {
			return nil, fmt.Errorf("step: layer %d (%v): %w", li, l.Kind, err)
		}
		m.trace("mixer", li, n, mix)
		Add(x, mix)
		RMSNorm(hn, x, l.PostNorm, n, c.RMSEps)
		if err := m.mlp(l, st, mix, hn, n); err != nil {
			return nil, fmt.Errorf("step: layer %d MLP: %w", li, err)
		}
		Add(x, mix)
		m.trace("hidden", li+1, n, x)
		tap(li, x)
		a.release(mark)
	}
	first := n - 1
	if o.AllRows {
		first = 0
	}
	rows := n - first
	RMSNorm(hn[:rows*h], x[first*h:], m.W.FinalNorm, rows, c.RMSEps)
	m.trace("norm", -1, rows, hn[:rows*h])
	logits := make([]float32, rows*c.Vocab)
	if err := m.W.LMHead.Mul(logits, hn, rows); err != nil {
		return nil, fmt.Errorf("step: lm_head: %w", err)
	}
	st.pending = n
	if tw > 0 {
		st.tapRows, st.tapWidth = n, tw
	}
	if o.Keep {
		st.keepRows, st.keepChunkMin = n, m.GDNChunkMin
	}
	return logits, nil
}

func (m *Model) trace(kind string, layer, rows int, data []float32) {
	if m.Trace != nil {
		m.Trace(kind, layer, rows, data)
	}
}

// gdnMixer is the Gated DeltaNet block (qwen35-and-quant.md §A.5): out = out_proj(
// GatedRMSNorm(delta rule(conv(qkv)), z)).
func (m *Model) gdnMixer(l *Layer, st *State, gi, read, write int, out, x []float32, n int, keep bool) error {
	c := &m.Cfg
	a := &st.arena
	cd := c.ConvDim()
	kd := c.KHeads * c.KDim
	vd := c.VHeads * c.VDim
	qkv := a.take(n * cd)
	z := a.take(n * vd)
	bb := a.take(n * c.VHeads)
	aa := a.take(n * c.VHeads)
	for _, p := range []struct {
		m   Matrix
		dst []float32
	}{{l.QKV, qkv}, {l.Z, z}, {l.B, bb}, {l.A, aa}} {
		if err := p.m.Mul(p.dst, x, n); err != nil {
			return err
		}
	}
	conv := a.take(n * cd)
	if err := CausalConv1D(conv, qkv, n, st.conv[gi][read], st.conv[gi][write], l.Conv, c.ConvKernel); err != nil {
		return err
	}
	q, k, v := a.take(n*kd), a.take(n*kd), a.take(n*vd)
	for r := 0; r < n; r++ {
		row := conv[r*cd : (r+1)*cd]
		copy(q[r*kd:(r+1)*kd], row[:kd])
		copy(k[r*kd:(r+1)*kd], row[kd:2*kd])
		copy(v[r*vd:(r+1)*vd], row[2*kd:])
	}
	L2Normalize(q, c.KDim, L2Eps, float32(1/math.Sqrt(float64(c.KDim))))
	L2Normalize(k, c.KDim, L2Eps, 1)
	beta, g := a.take(n*c.VHeads), a.take(n*c.VHeads)
	GDNGates(beta, g, aa, bb, l.NegA, l.DtBias, n)
	if keep {
		kp := &st.keep[gi]
		for _, p := range []struct {
			dst *[]float32
			src []float32
		}{{&kp.raw, qkv}, {&kp.q, q}, {&kp.k, k}, {&kp.v, v}, {&kp.beta, beta}, {&kp.g, g}} {
			*p.dst = append((*p.dst)[:0], p.src...)
		}
	}
	o := a.take(n * vd)
	var err error
	if n >= m.GDNChunkMin {
		err = GDNChunked(m.gdn, o, q, k, v, beta, g, n, st.rec[gi][read], st.rec[gi][write], DefaultChunk)
	} else {
		err = GDNRecurrent(m.gdn, o, q, k, v, beta, g, n, st.rec[gi][read], st.rec[gi][write])
	}
	if err != nil {
		return err
	}
	GatedRMSNorm(o, o, z, l.GatedNorm, n*c.VHeads, c.RMSEps)
	return l.Out.Mul(out, o, n)
}

// attnMixer is the gated attention block (qwen35-and-quant.md §A.6): o_proj(attention(
// RoPE(q_norm(q)), RoPE(k_norm(k)), v) ⊙ σ(gate)); the rows' K/V go to the cache first.
func (m *Model) attnMixer(l *Layer, st *State, ai int, out, x []float32, n int) error {
	c := &m.Cfg
	a := &st.arena
	hd := c.HeadDim
	qd, kvd := c.Heads*hd, c.KVHeads*hd
	qg := a.take(n * 2 * qd)
	kk, vv := a.take(n*kvd), a.take(n*kvd)
	for _, p := range []struct {
		m   Matrix
		dst []float32
	}{{l.Q, qg}, {l.K, kk}, {l.V, vv}} {
		if err := p.m.Mul(p.dst, x, n); err != nil {
			return err
		}
	}
	q, gate := a.take(n*qd), a.take(n*qd)
	for r := 0; r < n; r++ {
		for j := 0; j < c.Heads; j++ {
			src := qg[(r*c.Heads+j)*2*hd : (r*c.Heads+j+1)*2*hd]
			copy(q[(r*c.Heads+j)*hd:(r*c.Heads+j+1)*hd], src[:hd])
			copy(gate[(r*c.Heads+j)*hd:(r*c.Heads+j+1)*hd], src[hd:])
		}
	}
	RMSNorm(q, q, l.QNorm, n*c.Heads, c.RMSEps)
	RMSNorm(kk, kk, l.KNorm, n*c.KVHeads, c.RMSEps)
	half := m.rope.Dim / 2
	cos, sin := a.take(half), a.take(half)
	p0 := st.pos
	kc, vc := st.k[ai], st.v[ai]
	for r := 0; r < n; r++ {
		m.rope.Tables(cos, sin, p0+r)
		m.rope.Apply(q[r*qd:(r+1)*qd], hd, cos, sin)
		m.rope.Apply(kk[r*kvd:(r+1)*kvd], hd, cos, sin)
		copy(kc[(p0+r)*kvd:(p0+r+1)*kvd], kk[r*kvd:(r+1)*kvd])
		copy(vc[(p0+r)*kvd:(p0+r+1)*kvd], vv[r*kvd:(r+1)*kvd])
	}
	if st.kvBF16 {
		if h := KVRoundingProbe; h != nil {
			h(kc[p0*kvd : (p0+n)*kvd])
			h(vc[p0*kvd : (p0+n)*kvd])
		}
		roundBF16(kc[p0*kvd : (p0+n)*kvd])
		roundBF16(vc[p0*kvd : (p0+n)*kvd])
	}
	att := a.take(n * qd)
	scale := float32(1 / math.Sqrt(float64(hd)))
	if err := Attend(m.attn, att, q, n, p0, kc, vc, scale, m.KeyPartition); err != nil {
		return err
	}
	SigmoidGate(att, gate)
	return l.O.Mul(out, att, n)
}

// mlp is the SwiGLU block: out = down(silu(gate(x)) ⊙ up(x)).
func (m *Model) mlp(l *Layer, st *State, out, x []float32, n int) error {
	a := &st.arena
	mark := a.mark()
	defer a.release(mark)
	g, u := a.take(n*m.Cfg.Intermediate), a.take(n*m.Cfg.Intermediate)
	if err := l.Gate.Mul(g, x, n); err != nil {
		return err
	}
	if err := l.Up.Mul(u, x, n); err != nil {
		return err
	}
	SwiGLU(g, g, u)
	return l.Down.Mul(out, g, n)
}

// arena hands out zeroed float32 scratch slices from a few large blocks reused across
// Steps, so a steady decode loop does not allocate.
type arena struct {
	blocks   [][]float32
	cur, off int
}

type arenaMark struct{ cur, off int }

func (a *arena) reset()              { a.cur, a.off = 0, 0 }
func (a *arena) mark() arenaMark     { return arenaMark{a.cur, a.off} }
func (a *arena) release(m arenaMark) { a.cur, a.off = m.cur, m.off }

// take returns n zeroed floats that stay valid until a reset or a release of an earlier mark.
func (a *arena) take(n int) []float32 {
	for a.cur < len(a.blocks) {
		b := a.blocks[a.cur]
		if a.off+n <= len(b) {
			s := b[a.off : a.off+n : a.off+n]
			a.off += n
			clear(s)
			return s
		}
		if a.cur+1 == len(a.blocks) {
			break
		}
		a.cur++
		a.off = 0
	}
	b := make([]float32, max(n, 1<<18))
	a.blocks = append(a.blocks, b)
	a.cur, a.off = len(a.blocks)-1, n
	return b[:n:n]
}

// KVRoundingProbe, when set, sees every key and value row a BF16-cache state (SetKVBF16)
// writes, just before its rounding, and may change them: a measurement seam, nil in normal use
// (runtime/generate's TestBF16CacheSensitivity moves them by ±ε to see how far the rounding's
// flips move the logits). Set it only while no session runs.
var KVRoundingProbe func(rows []float32)

// roundBF16 rounds every value of x to the nearest BF16, ties to even (formats/bf16).
func roundBF16(x []float32) {
	for i, v := range x {
		x[i] = bf16.ToFloat32(bf16.FromFloat32(v))
	}
}
