package draft

import (
	"context"
	"errors"
	"fmt"
	"math"

	"lithos/runtime/model"
)

// Layer holds one draft decoder layer's weights (a Qwen3 layer). Every norm vector is the
// plain weight w that RMSNorm multiplies by (y = w · x / rms(x)), not 1 + w.
type Layer struct {
	InputNorm, PostNorm []float32    // [Hidden]
	Q                   model.Matrix // q_proj [Heads·HeadDim, Hidden]
	K, V                model.Matrix // k_proj, v_proj [KVHeads·HeadDim, Hidden]
	O                   model.Matrix // o_proj [Hidden, Heads·HeadDim]
	QNorm, KNorm        []float32    // q_norm, k_norm [HeadDim], per head
	Gate, Up            model.Matrix // mlp.gate_proj, mlp.up_proj [Intermediate, Hidden]
	Down                model.Matrix // mlp.down_proj [Hidden, Intermediate]
}

// Weights is every weight of a draft head (checkpoint names in parentheses). The head owns no
// token embedding and no LM head: it uses the target's (New).
type Weights struct {
	FC         model.Matrix // fc [Hidden, FeatureDim]
	HiddenNorm []float32    // hidden_norm [Hidden]
	Layers     []Layer      // layers.{i}
	Norm       []float32    // norm [Hidden] (the final norm)
	// Markov head (MarkovRank > 0): W1 row-gathered, W2 multiplied.
	MarkovW1 model.Embedding // markov_head.markov_w1 [Vocab, MarkovRank]
	MarkovW2 model.Matrix    // markov_head.markov_w2 [Vocab, MarkovRank]
	// Confidence head (Confidence): c = σ(ConfProj·in + ConfBias).
	ConfProj model.Matrix // confidence_head.proj.weight [1, ConfidenceDim]
	ConfBias float32      // confidence_head.proj.bias
}

// Drafter is a DSpark draft head bound to its target's embedding and LM head. It is read-only
// while drafting and may serve several States concurrently.
type Drafter struct {
	Cfg Config
	W   Weights

	// KeyPartition is the keys per online-softmax partial in model.Attend. Default
	// model.DefaultKeyPartition.
	KeyPartition int
	// Trace, when set, sees intermediate activations of each Draft (tests and debugging):
	// ("hidden", B, hn) the final-normed block rows [B, Hidden]; ("base", B, logits) the base
	// logits [B, Vocab]. data is only valid during the call.
	Trace func(kind string, rows int, data []float32)

	embed  model.Embedding
	lmHead model.Matrix
	rope   Rope
	attn   model.AttnShape
}

// New checks w against cfg (every matrix and vector shape) and binds the target's token
// embedding embed [Vocab, Hidden] and LM head lmHead [Vocab, Hidden]. Errors name the
// checkpoint tensor and both shapes.
func New(cfg Config, w Weights, embed model.Embedding, lmHead model.Matrix) (*Drafter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	h := cfg.Hidden
	if embed.Row == nil || embed.Vocab != cfg.Vocab || embed.Dim != h {
		return nil, fmt.Errorf("draft: target embedding [%d, %d], the draft needs [vocab_size %d, hidden_size %d]", embed.Vocab, embed.Dim, cfg.Vocab, h)
	}
	if lmHead.Mul == nil || lmHead.N != cfg.Vocab || lmHead.K != h {
		return nil, fmt.Errorf("draft: target lm_head [%d, %d], the draft needs [vocab_size %d, hidden_size %d]", lmHead.N, lmHead.K, cfg.Vocab, h)
	}
	if len(w.Layers) != cfg.Layers {
		return nil, fmt.Errorf("draft: %d layers of weights, num_hidden_layers is %d", len(w.Layers), cfg.Layers)
	}
	type mat struct {
		name string
		m    model.Matrix
		n, k int
	}
	type vec struct {
		name string
		v    []float32
		n    int
	}
	mats := []mat{{"fc", w.FC, h, cfg.FeatureDim()}}
	vecs := []vec{{"hidden_norm", w.HiddenNorm, h}, {"norm", w.Norm, h}}
	qd, kvd := cfg.Heads*cfg.HeadDim, cfg.KVHeads*cfg.HeadDim
	for i, l := range w.Layers {
		p := fmt.Sprintf("layers.%d.", i)
		mats = append(mats, mat{p + "self_attn.q_proj", l.Q, qd, h}, mat{p + "self_attn.k_proj", l.K, kvd, h},
			mat{p + "self_attn.v_proj", l.V, kvd, h}, mat{p + "self_attn.o_proj", l.O, h, qd},
			mat{p + "mlp.gate_proj", l.Gate, cfg.Intermediate, h}, mat{p + "mlp.up_proj", l.Up, cfg.Intermediate, h},
			mat{p + "mlp.down_proj", l.Down, h, cfg.Intermediate})
		vecs = append(vecs, vec{p + "input_layernorm", l.InputNorm, h}, vec{p + "post_attention_layernorm", l.PostNorm, h},
			vec{p + "self_attn.q_norm", l.QNorm, cfg.HeadDim}, vec{p + "self_attn.k_norm", l.KNorm, cfg.HeadDim})
	}
	if cfg.MarkovRank > 0 {
		if w.MarkovW1.Row == nil || w.MarkovW1.Vocab != cfg.Vocab || w.MarkovW1.Dim != cfg.MarkovRank {
			return nil, fmt.Errorf("draft: markov_head.markov_w1 is [%d, %d], want [%d, %d]", w.MarkovW1.Vocab, w.MarkovW1.Dim, cfg.Vocab, cfg.MarkovRank)
		}
		mats = append(mats, mat{"markov_head.markov_w2", w.MarkovW2, cfg.Vocab, cfg.MarkovRank})
	}
	if cfg.Confidence {
		mats = append(mats, mat{"confidence_head.proj", w.ConfProj, 1, cfg.ConfidenceDim()})
		if math.IsNaN(float64(w.ConfBias)) || math.IsInf(float64(w.ConfBias), 0) {
			return nil, fmt.Errorf("draft: confidence_head.proj.bias %v is not finite", w.ConfBias)
		}
	}
	for _, m := range mats {
		if m.m.Mul == nil || m.m.N != m.n || m.m.K != m.k {
			return nil, fmt.Errorf("draft: %s is [%d, %d], want [%d, %d]", m.name, m.m.N, m.m.K, m.n, m.k)
		}
	}
	for _, v := range vecs {
		if len(v.v) != v.n {
			return nil, fmt.Errorf("draft: %s has %d values, want %d", v.name, len(v.v), v.n)
		}
	}
	return &Drafter{
		Cfg: cfg, W: w, KeyPartition: model.DefaultKeyPartition,
		embed: embed, lmHead: lmHead,
		rope: NewRope(&cfg),
		attn: model.AttnShape{Heads: cfg.Heads, KVHeads: cfg.KVHeads, HeadDim: cfg.HeadDim},
	}, nil
}

// appendChunk is the most context rows Append projects at a time (bounds its scratch memory).
const appendChunk = 64

// State is one sequence's drafter state: per draft layer, the context K/V cache (float32
// [Capacity + BlockSize, KVHeads·HeadDim]; rows 0 … Len()−1 are the committed target tokens'
// context K (after k_norm and RoPE at their positions) and V; the BlockSize rows after them
// are scratch for the block's own K/V during Draft, never kept) and the scratch of Draft and
// Append. A State is used by one goroutine at a time.
type State struct {
	d        *Drafter
	capacity int
	n        int
	k, v     [][]float32

	// Draft scratch, [B, …] rows.
	h, x, q, kk, vv, att, mix, gate, up, hn, base, row, w1, cin []float32
	// The block's queries and outputs regrouped by KV head for one Attend call ([KVHeads, B,
	// Heads/KVHeads, HeadDim]).
	qKV, attKV []float32
	// Append scratch, [appendChunk, …] rows.
	ctx, ck, cv []float32
	cos, sin    []float32
}

// NewState allocates the state of a sequence of at most capacity committed tokens. Memory:
// 2·(capacity + BlockSize)·KVHeads·HeadDim·4 bytes per draft layer, plus about
// BlockSize·(Vocab + 4·Hidden + 2·Intermediate)·4 bytes of scratch.
func (d *Drafter) NewState(capacity int) (*State, error) {
	c := &d.Cfg
	if capacity <= 0 {
		return nil, fmt.Errorf("draft state: capacity %d must be positive", capacity)
	}
	kvRow := c.KVHeads * c.HeadDim
	if c.Layers <= 0 || kvRow <= 0 {
		return nil, errors.New("draft state: the drafter has no layers (not made by New)")
	}
	// capacity·Layers·kvRow·8 > 2^40, divided stepwise so that no product can overflow.
	if int64(capacity) > int64(1<<40)/8/int64(c.Layers)/int64(kvRow) {
		return nil, fmt.Errorf("draft state: capacity %d needs more than 1 TB of context cache", capacity)
	}
	B, h := c.BlockSize, c.Hidden
	rows := capacity + B
	st := &State{d: d, capacity: capacity}
	for range c.Layers {
		st.k = append(st.k, make([]float32, rows*kvRow))
		st.v = append(st.v, make([]float32, rows*kvRow))
	}
	qd := c.Heads * c.HeadDim
	st.h, st.x, st.hn, st.mix = make([]float32, B*h), make([]float32, B*h), make([]float32, B*h), make([]float32, B*h)
	st.q, st.att = make([]float32, B*qd), make([]float32, B*qd)
	st.qKV, st.attKV = make([]float32, B*qd), make([]float32, B*qd)
	st.kk, st.vv = make([]float32, B*kvRow), make([]float32, B*kvRow)
	st.gate, st.up = make([]float32, B*c.Intermediate), make([]float32, B*c.Intermediate)
	st.base, st.row = make([]float32, B*c.Vocab), make([]float32, c.Vocab)
	st.w1, st.cin = make([]float32, max(c.MarkovRank, 1)), make([]float32, c.ConfidenceDim())
	ac := min(appendChunk, capacity)
	st.ctx, st.ck, st.cv = make([]float32, ac*h), make([]float32, ac*kvRow), make([]float32, ac*kvRow)
	st.cos, st.sin = make([]float32, c.HeadDim/2), make([]float32, c.HeadDim/2)
	return st, nil
}

// Len returns the context rows held: the committed target tokens appended so far (positions
// 0 … Len()−1). The next block starts at position Len().
func (s *State) Len() int { return s.n }

// Capacity returns the most context rows the state holds.
func (s *State) Capacity() int { return s.capacity }

// Reset empties the context (Len 0); cache rows are overwritten as positions are reused.
func (s *State) Reset() { s.n = 0 }

// Truncate drops the context rows at positions ≥ n (0 ≤ n ≤ Len()), e.g. to restart a
// sequence from a shared prefix.
func (s *State) Truncate(n int) error {
	if n < 0 || n > s.n {
		return fmt.Errorf("draft state: truncate to %d rows, it holds %d", n, s.n)
	}
	s.n = n
	return nil
}

// Context returns views of draft layer l's context cache rows 0 … Len()−1: K and V, each
// [Len(), KVHeads·HeadDim], heads consecutive within a row. For tests and debugging; do not
// modify.
func (s *State) Context(l int) (k, v []float32, err error) {
	if l < 0 || l >= len(s.k) {
		return nil, nil, fmt.Errorf("draft state: layer %d of %d", l, len(s.k))
	}
	kvRow := s.d.Cfg.KVHeads * s.d.Cfg.HeadDim
	return s.k[l][:s.n*kvRow], s.v[l][:s.n*kvRow], nil
}

// Append adds n committed target tokens at positions Len() … Len()+n−1 to the context:
// feats is [n, FeatureDim] row-major, row i the concatenation over TapLayers (config order)
// of the target's output of decoder layer id for the token at position Len()+i (HF
// hidden_states[id+1]; runtime/model Trace ("hidden", id+1)). For each row,
// c = hidden_norm(fc(row)) [Hidden], and each draft layer stores K = RoPE(k_norm(k_proj(c)))
// at the row's position and V = v_proj(c) (qwen35-and-quant.md §D.1; no input_layernorm on
// c). Rows are independent, so appending in pieces gives the rows of appending at once (to
// float32 rounding: the matrix kernels may group rows differently). n = 0 is a no-op.
// Errors, before any work: a nil ctx, a state of another drafter, n < 0, len(feats) ≠
// n·FeatureDim, more rows than the capacity; ctx is checked between chunks (a cancelled Append
// keeps the rows completed before it, Len() says how many).
func (d *Drafter) Append(ctx context.Context, st *State, feats []float32, n int) error {
	c := &d.Cfg
	if ctx == nil {
		return errors.New("draft append: nil context")
	}
	if st == nil || st.d != d {
		return errors.New("draft append: the state was not made by this drafter")
	}
	fd := c.FeatureDim()
	if n < 0 || len(feats) != n*fd {
		return fmt.Errorf("draft append: %d feature values for %d rows of %d (%d taps × %d)", len(feats), n, fd, len(c.TapLayers), c.TargetHidden)
	}
	if st.n+n > st.capacity {
		return fmt.Errorf("draft append: %d rows at position %d exceed the context of %d", n, st.n, st.capacity)
	}
	h := c.Hidden
	hd := c.HeadDim
	kvRow := c.KVHeads * hd
	for off := 0; off < n; {
		if err := ctx.Err(); err != nil {
			return err
		}
		m := min(len(st.ctx)/h, n-off)
		cx := st.ctx[:m*h]
		if err := d.W.FC.Mul(cx, feats[off*fd:(off+m)*fd], m); err != nil {
			return fmt.Errorf("draft append: fc: %w", err)
		}
		model.RMSNorm(cx, cx, d.W.HiddenNorm, m, c.RMSEps)
		p0 := st.n
		for li := range d.W.Layers {
			l := &d.W.Layers[li]
			kk, vv := st.ck[:m*kvRow], st.cv[:m*kvRow]
			if err := l.K.Mul(kk, cx, m); err != nil {
				return fmt.Errorf("draft append: layer %d k_proj: %w", li, err)
			}
			if err := l.V.Mul(vv, cx, m); err != nil {
				return fmt.Errorf("draft append: layer %d v_proj: %w", li, err)
			}
			model.RMSNorm(kk, kk, l.KNorm, m*c.KVHeads, c.RMSEps)
			for r := 0; r < m; r++ {
				d.rope.Tables(st.cos, st.sin, p0+r)
				d.rope.Apply(kk[r*kvRow:(r+1)*kvRow], hd, st.cos, st.sin)
			}
			copy(st.k[li][p0*kvRow:(p0+m)*kvRow], kk)
			copy(st.v[li][p0*kvRow:(p0+m)*kvRow], vv)
		}
		st.n += m
		off += m
	}
	return nil
}

// Proposal is one round's drafted block.
type Proposal struct {
	// Tokens are the drafted tokens d_0 … d_{B−1} (d_k is the proposal for position P+k+1); fewer
	// than B when MinConfidence stopped the chain.
	Tokens []int32
	// Confidence[k] = c_k ∈ (0, 1), the confidence head's estimate that d_k is accepted (nil
	// without a confidence head). Same length as Tokens.
	Confidence []float32
	// Logits, when KeepLogits is set: the Markov-adjusted logits [len(Tokens), Vocab] of each
	// slot as computed, before choose saw (and possibly modified) them.
	Logits     []float32
	KeepLogits bool
	// MinConfidence > 0 stops the chain early (optional, off by default): after slot k ≥ 1 whose
	// confidence c_k is below it, slot k is dropped and drafting ends (at least one token is
	// always proposed). Ignored without a confidence head.
	MinConfidence float32
}

// Greedy is the choose function of greedy drafting: the argmax of the row, lowest index on
// ties (torch.argmax).
func Greedy(_ int, logits []float32) int32 { return int32(model.Argmax(logits)) }

// Draft runs one block at positions P … P+B−1 (P = st.Len(), B = BlockSize):
//
//  1. h = the target's embedding rows of [anchor, MASK × (B−1)];
//  2. per draft layer (Qwen3, plain-weight RMSNorm): x = input_layernorm(h); q = q_norm(q_proj(x)),
//     k = k_norm(k_proj(x)), v = v_proj(x) per head; RoPE (NeoX, full head_dim) at the block
//     positions; attention NON-causal: every block row attends to the context rows 0 … P−1 and all
//     B block rows, softmax(q·k/√HeadDim), GQA; h += o_proj(·); h += down(silu(gate(x))·up(x))
//     with x = post_attention_layernorm(h);
//  3. hn = norm(h) [B, Hidden]; base = lm_head(hn) [B, Vocab] (row k predicts position P+k+1);
//  4. the Markov chain (qwen35-and-quant.md §D.4; .notes/spec-design.md): for k = 0 … B−1,
//     logits_k = base_k + W2·W1[x_{k−1}] (x_{−1} = anchor), c_k = σ(proj([hn_k ; W1[x_{k−1}]]) + b)
//     (or σ(proj(hn_k) + b) without confidence_head_with_markov), x_k = choose(k, logits_k).
//
// choose gets a scratch copy of logits_k ([Vocab]) that it may modify (temperature, top-k …) and
// returns the drafted token; nil means Greedy. The block's K/V are not kept: Len() is unchanged.
// out's slices are reused when large enough. Errors: a nil ctx, a state of another drafter, an
// anchor outside the vocabulary, a chosen token outside it; ctx is checked between layers.
func (d *Drafter) Draft(ctx context.Context, st *State, anchor int32, choose func(k int, logits []float32) int32, out *Proposal) error {
	c := &d.Cfg
	if ctx == nil {
		return errors.New("draft: nil context")
	}
	if st == nil || st.d != d {
		return errors.New("draft: the state was not made by this drafter")
	}
	if out == nil {
		return errors.New("draft: nil proposal")
	}
	if anchor < 0 || int(anchor) >= c.Vocab {
		return fmt.Errorf("draft: anchor token %d is outside the vocabulary [0, %d)", anchor, c.Vocab)
	}
	if choose == nil {
		choose = Greedy
	}
	B, h, hd := c.BlockSize, c.Hidden, c.HeadDim
	qd, kvRow := c.Heads*hd, c.KVHeads*hd
	P := st.n
	for r := 0; r < B; r++ {
		id := int(c.MaskToken)
		if r == 0 {
			id = int(anchor)
		}
		if err := d.embed.Row(st.h[r*h:(r+1)*h], id); err != nil {
			return fmt.Errorf("draft: block row %d: %w", r, err)
		}
	}
	scale := float32(1 / math.Sqrt(float64(hd)))
	part := d.KeyPartition
	if part <= 0 {
		part = model.DefaultKeyPartition
	}
	for li := range d.W.Layers {
		if err := ctx.Err(); err != nil {
			return err
		}
		l := &d.W.Layers[li]
		model.RMSNorm(st.x, st.h, l.InputNorm, B, c.RMSEps)
		for _, p := range []struct {
			m   model.Matrix
			dst []float32
		}{{l.Q, st.q}, {l.K, st.kk}, {l.V, st.vv}} {
			if err := p.m.Mul(p.dst, st.x, B); err != nil {
				return fmt.Errorf("draft: layer %d: %w", li, err)
			}
		}
		model.RMSNorm(st.q, st.q, l.QNorm, B*c.Heads, c.RMSEps)
		model.RMSNorm(st.kk, st.kk, l.KNorm, B*c.KVHeads, c.RMSEps)
		kc, vc := st.k[li], st.v[li]
		for r := 0; r < B; r++ {
			d.rope.Tables(st.cos, st.sin, P+r)
			d.rope.Apply(st.q[r*qd:(r+1)*qd], hd, st.cos, st.sin)
			d.rope.Apply(st.kk[r*kvRow:(r+1)*kvRow], hd, st.cos, st.sin)
		}
		copy(kc[P*kvRow:(P+B)*kvRow], st.kk)
		copy(vc[P*kvRow:(P+B)*kvRow], st.vv)
		// Non-causal: each block row is a single-row causal attention at the block's last
		// position, which covers the context and every block row. All B rows attend to the
		// same keys, so they run as one row of B·Heads query heads, ordered by the KV head
		// they read (each head computed exactly as a row of its own would be).
		if err := d.attendBlock(st, kc, vc, P+B-1, scale, part); err != nil {
			return fmt.Errorf("draft: layer %d attention: %w", li, err)
		}
		if err := l.O.Mul(st.mix, st.att, B); err != nil {
			return fmt.Errorf("draft: layer %d o_proj: %w", li, err)
		}
		model.Add(st.h, st.mix)
		model.RMSNorm(st.x, st.h, l.PostNorm, B, c.RMSEps)
		if err := l.Gate.Mul(st.gate, st.x, B); err != nil {
			return fmt.Errorf("draft: layer %d gate_proj: %w", li, err)
		}
		if err := l.Up.Mul(st.up, st.x, B); err != nil {
			return fmt.Errorf("draft: layer %d up_proj: %w", li, err)
		}
		model.SwiGLU(st.gate, st.gate, st.up)
		if err := l.Down.Mul(st.mix, st.gate, B); err != nil {
			return fmt.Errorf("draft: layer %d down_proj: %w", li, err)
		}
		model.Add(st.h, st.mix)
	}
	model.RMSNorm(st.hn, st.h, d.W.Norm, B, c.RMSEps)
	d.trace("hidden", B, st.hn)
	if err := d.lmHead.Mul(st.base, st.hn, B); err != nil {
		return fmt.Errorf("draft: lm_head: %w", err)
	}
	d.trace("base", B, st.base)
	return d.chain(st, anchor, choose, out)
}

// attendBlock writes st.att ([B, Heads·HeadDim]): every block row's attention over the cache
// positions 0 … last, through one model.Attend call whose query heads are the B rows' heads
// regrouped as [KVHeads, B, Heads/KVHeads] (head j' reads KV head j' / (B·Heads/KVHeads)).
func (d *Drafter) attendBlock(st *State, kc, vc []float32, last int, scale float32, part int) error {
	c := &d.Cfg
	B, hd, kv := c.BlockSize, c.HeadDim, c.KVHeads
	g := c.Heads / kv
	qd := c.Heads * hd
	for r := 0; r < B; r++ {
		for j := 0; j < c.Heads; j++ {
			dst := ((j/g)*B*g + r*g + j%g) * hd
			copy(st.qKV[dst:dst+hd], st.q[r*qd+j*hd:r*qd+(j+1)*hd])
		}
	}
	shape := model.AttnShape{Heads: B * c.Heads, KVHeads: kv, HeadDim: hd}
	if err := model.Attend(shape, st.attKV, st.qKV, 1, last, kc, vc, scale, part); err != nil {
		return err
	}
	for r := 0; r < B; r++ {
		for j := 0; j < c.Heads; j++ {
			src := ((j/g)*B*g + r*g + j%g) * hd
			copy(st.att[r*qd+j*hd:r*qd+(j+1)*hd], st.attKV[src:src+hd])
		}
	}
	return nil
}

// chain runs the Markov chain over the base logits and final-normed rows in st.
func (d *Drafter) chain(st *State, anchor int32, choose func(k int, logits []float32) int32, out *Proposal) error {
	c := &d.Cfg
	B, h, V := c.BlockSize, c.Hidden, c.Vocab
	out.Tokens = out.Tokens[:0]
	out.Confidence = out.Confidence[:0]
	if !c.Confidence {
		out.Confidence = nil
	}
	out.Logits = out.Logits[:0]
	prev := anchor
	for k := 0; k < B; k++ {
		logits := st.base[k*V : (k+1)*V]
		if c.MarkovRank > 0 {
			w1 := st.w1[:c.MarkovRank]
			if err := d.W.MarkovW1.Row(w1, int(prev)); err != nil {
				return fmt.Errorf("draft: markov_w1 row %d: %w", prev, err)
			}
			if err := d.W.MarkovW2.Mul(st.row, w1, 1); err != nil {
				return fmt.Errorf("draft: markov_w2: %w", err)
			}
			model.Add(st.row, logits)
		} else {
			copy(st.row, logits)
		}
		if c.Confidence {
			copy(st.cin, st.hn[k*h:(k+1)*h])
			if c.ConfidenceWithMarkov {
				copy(st.cin[h:], st.w1[:c.MarkovRank])
			}
			var z [1]float32
			if err := d.W.ConfProj.Mul(z[:], st.cin, 1); err != nil {
				return fmt.Errorf("draft: confidence_head.proj: %w", err)
			}
			ck := model.Sigmoid(z[0] + d.W.ConfBias)
			if k > 0 && ck < out.MinConfidence {
				return nil
			}
			out.Confidence = append(out.Confidence, ck)
		}
		if out.KeepLogits {
			out.Logits = append(out.Logits, st.row...)
		}
		x := choose(k, st.row)
		if x < 0 || int(x) >= V {
			return fmt.Errorf("draft: slot %d: chosen token %d is outside the vocabulary [0, %d)", k, x, V)
		}
		out.Tokens = append(out.Tokens, x)
		prev = x
	}
	return nil
}

func (d *Drafter) trace(kind string, rows int, data []float32) {
	if d.Trace != nil {
		d.Trace(kind, rows, data)
	}
}
