package gpu

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"lithos/manifests"
	"lithos/pack/blm"
	"lithos/runtime/backend"
	"lithos/runtime/backend/cpu"
	"lithos/runtime/bundle"
	"lithos/runtime/draft"
)

// segMatrix is one checkpoint matrix of the draft: the packed tensor that holds it (a stack)
// and the output columns of its rows there.
type segMatrix struct {
	m   *Matrix
	off int // first output column of the segment in m's product
	n   int // its rows
}

// draftLayer is what the programs read of one draft decoder layer (Qwen3, plain-weight norms).
type draftLayer struct {
	inNorm, postNorm, qNorm, kNorm uint64
	q, k, v, o                     segMatrix
	gate, up, down                 segMatrix
	gateUp                         *Matrix // gate_proj and up_proj interleaved by 8 rows (the SwiGLU epilogue), or nil
}

// DSpark is a bundle's DSpark draft head on the GPU (backend.Drafter), bound to its Target: the
// head's matrices are read in place from the uploaded weights (rewritten there into the layouts
// the device reads, as the target's: LoadDraft, repacker.one), its norms decoded to float32 in a device buffer of its own, the Markov W1 table gathered from the
// weights, the target's embedding and LM head shared. It drafts only inside a GPU session's
// round (the device program of docs/speculative.md §1): pass it in SessionOptions.Drafter of a
// session of the same Target. It has no host Proposer.
type DSpark struct {
	t   *Target
	Cfg draft.Config

	vecs   *Buffer // float32 norms and the RoPE inverse frequencies
	fc     segMatrix
	hnorm  uint64 // hidden_norm
	norm   uint64 // the final norm
	layers []draftLayer
	// Markov head: W1 [Vocab, r] gathered (dtype 0 f32, 1 bf16), W2 [Vocab, r] multiplied.
	w1      uint64
	w1DType uint32
	w2      segMatrix
	// Confidence head [1, Hidden (+ r)] and its bias.
	conf     segMatrix
	confBias float32
	invFreq  uint64  // HeadDim/2 floats (draft.NewRope)
	scale    float32 // the RoPE amplitude (YaRN), 1 otherwise
}

// TapLayers returns the head's target_layer_ids.
func (d *DSpark) TapLayers() []int { return d.Cfg.TapLayers }

// BlockSize returns the head's block_size.
func (d *DSpark) BlockSize() int { return d.Cfg.BlockSize }

// StateBytes is the device memory of a session's drafter context caches at capacity positions
// (bytes): per draft layer K and V rows of KVHeads·HeadDim float32 for capacity + BlockSize
// positions (the block's own rows past the context). runtime/serve counts it in a parked
// session's cost, as cpu.DSpark.StateBytes.
func (d *DSpark) StateBytes(capacity int) int64 {
	c := &d.Cfg
	return int64(c.Layers) * 2 * int64(capacity+c.BlockSize) * int64(c.KVHeads*c.HeadDim) * 4
}

// NewProposer returns an error: the head drafts on the device, inside a GPU session's round.
func (d *DSpark) NewProposer(int) (backend.Proposer, error) {
	return nil, fmt.Errorf("%s: the DSpark head drafts inside a %s session's device round (pass it in SessionOptions.Drafter); it has no host proposer", d.t.pfx, d.t.Device.Name())
}

// Matrices returns the packed matrices the head reads (each once; the target's LM head, which
// it shares, not included): benchmarks count the bytes a round streams.
func (d *DSpark) Matrices() []*Matrix {
	var l []*Matrix
	seen := map[*Matrix]bool{}
	add := func(m *Matrix) {
		if m != nil && !seen[m] {
			seen[m] = true
			l = append(l, m)
		}
	}
	add(d.fc.m)
	add(d.w2.m)
	add(d.conf.m)
	for _, L := range d.layers {
		for _, s := range []segMatrix{L.q, L.k, L.v, L.o, L.gate, L.up, L.down} {
			add(s.m)
		}
		add(L.gateUp)
	}
	return l
}

// close frees the head's buffer.
func (d *DSpark) close() error {
	if d.vecs == nil {
		return nil
	}
	err := d.vecs.Free()
	d.vecs = nil
	return err
}

// LoadDraft binds the bundle's DSpark draft head (manifest "draft") to this target on the GPU,
// or returns nil, nil when the bundle has none. Like cpu.LoadDraft it refuses, naming the field
// or tensor: a draft architecture other than draft.Architectures, a config draft.ParseConfig
// rejects, a head that does not fit the target (cpu.DraftFits), a missing tensor, a norm stored
// with a transform, and shapes draft.New would reject; on the GPU also a matrix in a format the
// kernels do not read and a Markov W1 table that is not BF16 or F32. The head's matrices are
// rewritten in the device's copy of weights.bin into the layouts LoadTarget chose for the
// target's (repacker.one: the MMA layout, else fragment-major, else as packed), from the
// bundle's bytes, so a second LoadDraft writes the same bytes again.
func (t *Target) LoadDraft(ctx context.Context, b *bundle.Bundle) (backend.Drafter, error) {
	m := b.Manifest
	if m.Draft == nil {
		return nil, nil
	}
	if arch := m.Draft.Architecture; !slices.Contains(draft.Architectures, arch) {
		return nil, fmt.Errorf("bundle %s: the draft is a %q model; this runtime drafts with %s", b.Dir, arch, strings.Join(draft.Architectures, ", "))
	}
	cfg, err := draft.ParseConfig(m.Draft.Config)
	if err != nil {
		return nil, fmt.Errorf("bundle %s: draft.config: %w", b.Dir, err)
	}
	if err := cpu.DraftFits(&cfg, &t.Cfg); err != nil {
		return nil, fmt.Errorf("bundle %s: %w", b.Dir, err)
	}
	if cfg.BlockSize+1 > MaxStepRows {
		return nil, backend.Unsupported(fmt.Errorf("bundle %s: draft block_size %d: the %s round verifies at most %d rows (block_size ≤ %d)", b.Dir, cfg.BlockSize, t.Device.Name(), MaxStepRows, MaxStepRows-1))
	}
	if b != t.Bundle {
		return nil, fmt.Errorf("bundle %s: the draft head must come from the bundle the target was loaded from (%s)", b.Dir, t.Bundle.Dir)
	}
	d, err := t.loadDSpark(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("bundle %s: draft: %w", b.Dir, err)
	}
	t.drafts = append(t.drafts, d)
	return d, nil
}

// loadDSpark binds the head's matrices (rewritten into the layouts the target's are: repacker)
// and uploads its vectors.
func (t *Target) loadDSpark(ctx context.Context, cfg draft.Config) (*DSpark, error) {
	b := t.Bundle
	d := &DSpark{t: t, Cfg: cfg}
	rp := &repacker{t: t}
	defer rp.close()
	// relayout rewrites a matrix at weights.bin offset off as the target's are (repacker.one:
	// nothing on a device that reads neither layout).
	relayout := func(mx *Matrix, off int64) error {
		return rp.one(ctx, mx, off, b.Weights()[off:off+mx.Geometry.TotalBytes])
	}
	// Draft matrices by checkpoint name (segments of the draft's BLM tensors).
	type ref struct {
		bt  *manifests.BundleTensor
		seg int
	}
	segs := map[string]ref{}
	for i := range b.Manifest.Tensors {
		bt := &b.Manifest.Tensors[i]
		if bt.Model != manifests.ModelDraft || bt.Encoding != manifests.EncodingBLM {
			continue
		}
		for si, s := range bt.Stack.Segments {
			segs[s.Name] = ref{bt, si}
		}
	}
	mats := map[string]*Matrix{}
	mat := func(module string, n, k int) (segMatrix, error) {
		name := module + ".weight"
		r, ok := segs[name]
		if !ok {
			return segMatrix{}, fmt.Errorf("tensor %s: no packed matrix holds it", name)
		}
		mx := mats[r.bt.Name]
		if mx == nil {
			bm, err := b.Matrix(r.bt)
			if err != nil {
				return segMatrix{}, err
			}
			if !slices.Contains(KernelFormats, bm.Geometry.Format) {
				return segMatrix{}, backend.Unsupported(fmt.Errorf("tensor %s is %s; the %s kernels read %v", r.bt.Name, bm.Geometry.Format, t.Device.Name(), KernelFormats))
			}
			if bm.Geometry.TotalBytes >= 1<<32 {
				return segMatrix{}, backend.Unsupported(fmt.Errorf("tensor %s: %d packed bytes; the %s kernels address < 4 GiB per matrix", r.bt.Name, bm.Geometry.TotalBytes, t.Device.Name()))
			}
			mx = &Matrix{Name: r.bt.Name, Geometry: bm.Geometry, Stack: bm.Stack,
				Ptr: t.Weights.At(r.bt.Offset), Scales: t.Weights.At(r.bt.Offset + bm.Geometry.TotalBytes)}
			if err := relayout(mx, r.bt.Offset); err != nil {
				return segMatrix{}, err
			}
			mats[r.bt.Name] = mx
		}
		if int(mx.Geometry.K) != k {
			return segMatrix{}, fmt.Errorf("tensor %s (in %s): %d columns, want %d", name, mx.Name, mx.Geometry.K, k)
		}
		sm := segMatrix{m: mx}
		switch mx.Stack.Mode {
		case blm.Concat:
			for i, s := range mx.Stack.Segments {
				if i == r.seg {
					sm.n = int(s.Rows)
					break
				}
				sm.off += int(s.Rows)
			}
		default:
			if len(mx.Stack.Segments) != 1 {
				return segMatrix{}, backend.Unsupported(fmt.Errorf("tensor %s (in %s): stack mode %v; the %s programs read concatenated segments or the interleaved MLP", name, mx.Name, mx.Stack.Mode, t.Device.Name()))
			}
			sm.n = int(mx.Stack.Segments[0].Rows)
		}
		if sm.n != n {
			return segMatrix{}, fmt.Errorf("tensor %s: %d rows, want %d", name, sm.n, n)
		}
		return sm, nil
	}
	var host []float32
	vecOff := map[string]int{}
	vec := func(name string, n int) error {
		full := "draft." + name
		bt, ok := b.Tensor(full)
		if !ok {
			return fmt.Errorf("no tensor %s", full)
		}
		if bt.Encoding != manifests.EncodingPlain {
			return fmt.Errorf("tensor %s: encoding %s, want plain", full, bt.Encoding)
		}
		if bt.Transform != manifests.TransformNone {
			return fmt.Errorf("tensor %s: transform %q: draft norms are plain weights (transform %q)", full, bt.Transform, manifests.TransformNone)
		}
		v, err := b.Floats(bt)
		if err != nil {
			return err
		}
		if len(v) != n {
			return fmt.Errorf("tensor %s: %d values (shape %v), want %d", full, len(v), bt.Shape, n)
		}
		vecOff[name] = len(host)
		host = append(host, v...)
		for len(host)%4 != 0 {
			host = append(host, 0)
		}
		return nil
	}
	h, hd := cfg.Hidden, cfg.HeadDim
	qd, kvd := cfg.Heads*hd, cfg.KVHeads*hd
	var err error
	if d.fc, err = mat("fc", h, cfg.FeatureDim()); err != nil {
		return nil, err
	}
	for _, v := range []struct {
		name string
		n    int
	}{{"hidden_norm", h}, {"norm", h}} {
		if err := vec(v.name, v.n); err != nil {
			return nil, err
		}
	}
	for i := 0; i < cfg.Layers; i++ {
		p := fmt.Sprintf("layers.%d.", i)
		var L draftLayer
		for _, v := range []struct {
			name string
			n    int
		}{{p + "input_layernorm", h}, {p + "post_attention_layernorm", h}, {p + "self_attn.q_norm", hd}, {p + "self_attn.k_norm", hd}} {
			if err := vec(v.name, v.n); err != nil {
				return nil, err
			}
		}
		for _, m := range []struct {
			dst    *segMatrix
			module string
			n, k   int
		}{{&L.q, p + "self_attn.q_proj", qd, h}, {&L.k, p + "self_attn.k_proj", kvd, h}, {&L.v, p + "self_attn.v_proj", kvd, h},
			{&L.o, p + "self_attn.o_proj", h, qd}, {&L.down, p + "mlp.down_proj", h, cfg.Intermediate}} {
			if *m.dst, err = mat(m.module, m.n, m.k); err != nil {
				return nil, err
			}
		}
		// The MLP: gate_proj and up_proj interleaved by 8 rows (one product with the SwiGLU
		// epilogue), or two matrices of their own.
		gr, ok := segs[p+"mlp.gate_proj.weight"]
		var gbm bundle.Matrix
		if ok {
			if gbm, err = b.Matrix(gr.bt); err != nil {
				return nil, err
			}
		}
		if ok && gbm.Stack.Mode == blm.Interleave {
			st := gbm.Stack
			if st.Chunk != 8 || len(st.Segments) != 2 || !strings.HasSuffix(st.Segments[0].Name, "gate_proj.weight") ||
				!strings.HasSuffix(st.Segments[1].Name, "up_proj.weight") {
				return nil, backend.Unsupported(fmt.Errorf("tensor %s: the SwiGLU epilogue needs gate_proj and up_proj interleaved by 8 rows", gr.bt.Name))
			}
			g := gbm.Geometry
			if !slices.Contains(KernelFormats, g.Format) || int(g.N) != 2*cfg.Intermediate || int(g.K) != h || g.TotalBytes >= 1<<32 {
				return nil, backend.Unsupported(fmt.Errorf("tensor %s: %s [%d, %d]; want one of %v, [%d, %d], < 4 GiB", gr.bt.Name, g.Format, g.N, g.K, KernelFormats, 2*cfg.Intermediate, h))
			}
			L.gateUp = &Matrix{Name: gr.bt.Name, Geometry: g, Stack: gbm.Stack,
				Ptr: t.Weights.At(gr.bt.Offset), Scales: t.Weights.At(gr.bt.Offset + g.TotalBytes)}
			if err := relayout(L.gateUp, gr.bt.Offset); err != nil {
				return nil, err
			}
		} else {
			if L.gate, err = mat(p+"mlp.gate_proj", cfg.Intermediate, h); err != nil {
				return nil, err
			}
			if L.up, err = mat(p+"mlp.up_proj", cfg.Intermediate, h); err != nil {
				return nil, err
			}
		}
		d.layers = append(d.layers, L)
	}
	if cfg.MarkovRank > 0 {
		name := "draft.markov_head.markov_w1"
		bt, ok := b.Tensor(name)
		if !ok {
			return nil, fmt.Errorf("no tensor %s (markov_rank %d implies a Markov head)", name, cfg.MarkovRank)
		}
		if bt.Encoding != manifests.EncodingPlain || len(bt.Shape) != 2 || bt.Shape[0] != int64(cfg.Vocab) || bt.Shape[1] != int64(cfg.MarkovRank) {
			return nil, fmt.Errorf("tensor %s: %s %v, want a plain [%d, %d] table", name, bt.Encoding, bt.Shape, cfg.Vocab, cfg.MarkovRank)
		}
		switch bt.Format {
		case "BF16":
			d.w1DType = 1
		case "F32":
			d.w1DType = 0
		default:
			return nil, backend.Unsupported(fmt.Errorf("tensor %s is %s; the %s gather reads BF16 or F32", name, bt.Format, t.Device.Name()))
		}
		d.w1 = t.Weights.At(bt.Offset)
		if d.w2, err = mat("markov_head.markov_w2", cfg.Vocab, cfg.MarkovRank); err != nil {
			return nil, err
		}
	}
	if cfg.Confidence {
		if d.conf, err = mat("confidence_head.proj", 1, cfg.ConfidenceDim()); err != nil {
			return nil, err
		}
		bias, err := cpuDraftBias(b)
		if err != nil {
			return nil, err
		}
		d.confBias = bias
	}
	rope := draft.NewRope(&cfg)
	vecOff["rope"] = len(host)
	host = append(host, rope.InvFreq...)
	d.scale = rope.Scale
	if d.vecs, err = t.Device.Upload(Float32Bytes(host)); err != nil {
		return nil, err
	}
	at := func(name string) uint64 { return d.vecs.At(int64(4 * vecOff[name])) }
	d.hnorm, d.norm, d.invFreq = at("hidden_norm"), at("norm"), at("rope")
	for i := range d.layers {
		p := fmt.Sprintf("layers.%d.", i)
		L := &d.layers[i]
		L.inNorm, L.postNorm = at(p+"input_layernorm"), at(p+"post_attention_layernorm")
		L.qNorm, L.kNorm = at(p+"self_attn.q_norm"), at(p+"self_attn.k_norm")
	}
	return d, nil
}

// cpuDraftBias reads the confidence head's bias (draft.confidence_head.proj.bias, one value).
func cpuDraftBias(b *bundle.Bundle) (float32, error) {
	name := "draft.confidence_head.proj.bias"
	bt, ok := b.Tensor(name)
	if !ok {
		return 0, fmt.Errorf("no tensor %s", name)
	}
	v, err := b.Floats(bt)
	if err != nil {
		return 0, err
	}
	if len(v) != 1 {
		return 0, fmt.Errorf("tensor %s: %d values, want 1", name, len(v))
	}
	return v[0], nil
}
