package cpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"

	"lithos/formats/f16"
	"lithos/manifests"
	"lithos/pack/blm"
	"lithos/runtime/bundle"
	"lithos/runtime/model"
)

// Architectures are the target architectures (config.json "architectures"[0]) the runtime
// runs: the Qwen3.5 hybrid text model, multimodal or text-only export.
var Architectures = []string{"Qwen3_5ForConditionalGeneration", "Qwen3_5ForCausalLM"}

// LoadTarget builds the target model of an opened bundle for the CPU: runtime/model's graph
// with every matrix a Packed view of its rows in the mapped weights (stacked matrices are
// addressed by segment: the gate rows of an interleaved gate/up matrix, the q rows of a q/k/v
// stack, …, docs/bundle.md §3), the embedding gathered row by row from the mapped table, and
// the small vectors (norms with their transform, conv weights, A_log, dt_bias) decoded to
// float32. Nothing is unpacked: the packed bytes are read by the kernels at every step.
//
// It refuses, naming the tensor or field: a bundle whose target architecture is not one of
// Architectures, a config runtime/model cannot parse, a missing tensor, a plain tensor whose
// transform is not the one the graph needs (e.g. an input norm stored without one_plus), a
// matrix whose format has no CPU kernel, and any shape runtime/model.New rejects.
func LoadTarget(b *bundle.Bundle) (*model.Model, error) {
	m := b.Manifest
	arch := m.Target.Architecture
	ok := false
	for _, a := range Architectures {
		ok = ok || a == arch
	}
	if !ok {
		return nil, fmt.Errorf("bundle %s: the target is a %q model; this runtime runs %s", b.Dir, arch, strings.Join(Architectures, ", "))
	}
	cfg, err := model.ParseConfig(m.Target.Config)
	if err != nil {
		return nil, fmt.Errorf("bundle %s: target.config: %w", b.Dir, err)
	}
	l := &targetLoader{b: b, segs: map[string]segRef{}, packed: map[string]*Packed{}}
	for i := range m.Tensors {
		t := &m.Tensors[i]
		if t.Model != manifests.ModelTarget || t.Encoding != manifests.EncodingBLM {
			continue
		}
		for si, s := range t.Stack.Segments {
			l.segs[s.Name] = segRef{t: t, seg: si}
		}
	}
	emb, ok := b.Tensor("embed_tokens")
	if !ok {
		return nil, fmt.Errorf("bundle %s: no tensor embed_tokens", b.Dir)
	}
	l.prefix = strings.TrimSuffix(emb.Source, "embed_tokens.weight")
	w, err := l.weights(&cfg, emb)
	if err != nil {
		return nil, fmt.Errorf("bundle %s: %w", b.Dir, err)
	}
	mod, err := model.New(cfg, w)
	if err != nil {
		return nil, fmt.Errorf("bundle %s: %w", b.Dir, err)
	}
	return mod, nil
}

type segRef struct {
	t   *manifests.BundleTensor
	seg int
}

type targetLoader struct {
	b      *bundle.Bundle
	prefix string // the checkpoint's text-model prefix ("model.language_model." or "model.")
	segs   map[string]segRef
	packed map[string]*Packed // by runtime tensor name
}

// packedOf returns the Packed of a BLM tensor, wrapping it once.
func (l *targetLoader) packedOf(t *manifests.BundleTensor) (*Packed, error) {
	if p, ok := l.packed[t.Name]; ok {
		return p, nil
	}
	mx, err := l.b.Matrix(t)
	if err != nil {
		return nil, err
	}
	p, err := NewPacked(mx.Geometry, mx.Packed, mx.RowScales)
	if err != nil {
		return nil, fmt.Errorf("tensor %s: %w", t.Name, err)
	}
	l.packed[t.Name] = p
	return p, nil
}

// matrix returns the Matrix of the checkpoint weight module+".weight", wherever it was
// packed: its own tensor or one segment of a stack.
func (l *targetLoader) matrix(module string) (model.Matrix, error) {
	name := module + ".weight"
	ref, ok := l.segs[name]
	if !ok {
		return model.Matrix{}, fmt.Errorf("tensor %s: no packed matrix holds it", name)
	}
	p, err := l.packedOf(ref.t)
	if err != nil {
		return model.Matrix{}, err
	}
	st := blm.Stack{Mode: blm.StackMode(ref.t.Stack.Mode), Chunk: ref.t.Stack.Chunk}
	for _, s := range ref.t.Stack.Segments {
		st.Segments = append(st.Segments, blm.Segment{Name: s.Name, Rows: s.Rows, TensorScale: s.TensorScale})
	}
	rows, err := SegmentRows(st, ref.seg)
	if err != nil {
		return model.Matrix{}, fmt.Errorf("tensor %s: %w", ref.t.Name, err)
	}
	mx, err := p.Rows(rows)
	if err != nil {
		return model.Matrix{}, fmt.Errorf("tensor %s (segment %s): %w", ref.t.Name, name, err)
	}
	return mx, nil
}

// SegmentRows returns the packed rows of segment seg of a stack, in the segment's row order:
// a contiguous range for Concat, chunks of Chunk rows every len(Segments)·Chunk rows for
// Interleave (blm.Stack.Source inverted).
func SegmentRows(st blm.Stack, seg int) ([]int32, error) {
	if err := st.Check(); err != nil {
		return nil, err
	}
	if seg < 0 || seg >= len(st.Segments) {
		return nil, fmt.Errorf("segment %d of %d", seg, len(st.Segments))
	}
	if st.Rows() > math.MaxInt32 {
		return nil, fmt.Errorf("%d rows is too many for the CPU kernels", st.Rows())
	}
	n := st.Segments[seg].Rows
	rows := make([]int32, n)
	switch st.Mode {
	case blm.Concat:
		var off int64
		for _, s := range st.Segments[:seg] {
			off += s.Rows
		}
		for i := range rows {
			rows[i] = int32(off + int64(i))
		}
	case blm.Interleave:
		c, ns := int64(st.Chunk), int64(len(st.Segments))
		for i := range rows {
			turn := (int64(i)/c)*ns + int64(seg)
			rows[i] = int32(turn*c + int64(i)%c)
		}
	}
	return rows, nil
}

// vector decodes plain tensor name (a runtime name) of n values, requiring transform.
func (l *targetLoader) vector(name string, n int, transform string) ([]float32, error) {
	t, ok := l.b.Tensor(name)
	if !ok {
		return nil, fmt.Errorf("no tensor %s", name)
	}
	if t.Encoding != manifests.EncodingPlain {
		return nil, fmt.Errorf("tensor %s: encoding %s, want plain", name, t.Encoding)
	}
	if t.Transform != transform {
		return nil, fmt.Errorf("tensor %s: transform %q, the Qwen3.5 graph needs %q", name, t.Transform, transform)
	}
	v, err := l.b.Floats(t)
	if err != nil {
		return nil, err
	}
	if len(v) != n {
		return nil, fmt.Errorf("tensor %s: %d values (shape %v), want %d", name, len(v), t.Shape, n)
	}
	return v, nil
}

func (l *targetLoader) weights(c *model.Config, emb *manifests.BundleTensor) (model.Weights, error) {
	var w model.Weights
	var err error
	h := c.Hidden
	if w.Embed, err = l.embedding(emb, c.Vocab, h); err != nil {
		return w, err
	}
	if w.FinalNorm, err = l.vector("norm", h, manifests.TransformOnePlus); err != nil {
		return w, err
	}
	if _, ok := l.segs["lm_head.weight"]; ok {
		w.LMHead, err = l.matrix("lm_head")
	} else if t, ok := l.b.Tensor("lm_head"); ok && t.Encoding == manifests.EncodingBLM && len(t.Stack.Segments) == 1 {
		w.LMHead, err = l.matrix(strings.TrimSuffix(t.Stack.Segments[0].Name, ".weight"))
	} else {
		err = fmt.Errorf("no packed lm_head")
	}
	if err != nil {
		return w, err
	}
	for i, kind := range c.Layers {
		rp := fmt.Sprintf("layers.%d.", i) // runtime names
		cp := l.prefix + rp                // checkpoint modules
		L := model.Layer{Kind: kind}
		if L.InputNorm, err = l.vector(rp+"input_layernorm", h, manifests.TransformOnePlus); err != nil {
			return w, err
		}
		if L.PostNorm, err = l.vector(rp+"post_attention_layernorm", h, manifests.TransformOnePlus); err != nil {
			return w, err
		}
		mats := []struct {
			dst    *model.Matrix
			module string
		}{{&L.Gate, "mlp.gate_proj"}, {&L.Up, "mlp.up_proj"}, {&L.Down, "mlp.down_proj"}}
		switch kind {
		case model.GDN:
			a := "linear_attn."
			mats = append(mats, []struct {
				dst    *model.Matrix
				module string
			}{{&L.QKV, a + "in_proj_qkv"}, {&L.Z, a + "in_proj_z"}, {&L.B, a + "in_proj_b"}, {&L.A, a + "in_proj_a"}, {&L.Out, a + "out_proj"}}...)
			if L.Conv, err = l.vector(rp+a+"conv1d", c.ConvDim()*c.ConvKernel, manifests.TransformNone); err != nil {
				return w, err
			}
			if L.NegA, err = l.vector(rp+a+"A_log", c.VHeads, manifests.TransformNegExp); err != nil {
				return w, err
			}
			if L.DtBias, err = l.vector(rp+a+"dt_bias", c.VHeads, manifests.TransformNone); err != nil {
				return w, err
			}
			if L.GatedNorm, err = l.vector(rp+a+"norm", c.VDim, manifests.TransformNone); err != nil {
				return w, err
			}
		case model.Attention:
			a := "self_attn."
			mats = append(mats, []struct {
				dst    *model.Matrix
				module string
			}{{&L.Q, a + "q_proj"}, {&L.K, a + "k_proj"}, {&L.V, a + "v_proj"}, {&L.O, a + "o_proj"}}...)
			if L.QNorm, err = l.vector(rp+a+"q_norm", c.HeadDim, manifests.TransformOnePlus); err != nil {
				return w, err
			}
			if L.KNorm, err = l.vector(rp+a+"k_norm", c.HeadDim, manifests.TransformOnePlus); err != nil {
				return w, err
			}
		}
		for _, mm := range mats {
			if *mm.dst, err = l.matrix(cp + mm.module); err != nil {
				return w, err
			}
		}
		w.Layers = append(w.Layers, L)
	}
	return w, nil
}

// embedding gathers rows of the plain embedding table in place: BF16 through
// model.BF16Embedding, F16 and F32 decoded row by row here.
func (l *targetLoader) embedding(t *manifests.BundleTensor, vocab, dim int) (model.Embedding, error) {
	if t.Encoding != manifests.EncodingPlain || t.Transform != manifests.TransformNone {
		return model.Embedding{}, fmt.Errorf("tensor %s: encoding %s, transform %q: want a plain table without transform", t.Name, t.Encoding, t.Transform)
	}
	if len(t.Shape) != 2 || t.Shape[0] != int64(vocab) || t.Shape[1] != int64(dim) {
		return model.Embedding{}, fmt.Errorf("tensor %s: shape %v, want [%d, %d]", t.Name, t.Shape, vocab, dim)
	}
	raw, err := l.b.Bytes(t)
	if err != nil {
		return model.Embedding{}, err
	}
	var size int
	var decode func(dst []float32, row []byte)
	switch t.Format {
	case "BF16":
		e, err := model.BF16Embedding(raw, vocab, dim)
		if err != nil {
			return e, fmt.Errorf("tensor %s: %w", t.Name, err)
		}
		return e, nil
	case "F16":
		size = 2
		decode = func(dst []float32, row []byte) {
			for i := range dst {
				dst[i] = f16.ToFloat32(binary.LittleEndian.Uint16(row[2*i:]))
			}
		}
	case "F32":
		size = 4
		decode = func(dst []float32, row []byte) {
			for i := range dst {
				dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(row[4*i:]))
			}
		}
	default:
		return model.Embedding{}, fmt.Errorf("tensor %s: dtype %s, want BF16, F16 or F32", t.Name, t.Format)
	}
	if len(raw) != size*vocab*dim {
		return model.Embedding{}, fmt.Errorf("tensor %s: %d bytes for %s [%d, %d]", t.Name, len(raw), t.Format, vocab, dim)
	}
	return model.Embedding{Vocab: vocab, Dim: dim, Row: func(dst []float32, id int) error {
		if id < 0 || id >= vocab || len(dst) < dim {
			return fmt.Errorf("embedding: token %d outside [0, %d) or dst of %d floats", id, vocab, len(dst))
		}
		decode(dst[:dim], raw[size*id*dim:size*(id+1)*dim])
		return nil
	}}, nil
}
