package cpu

import (
	"fmt"
	"slices"
	"strings"

	"lithos/manifests"
	"lithos/runtime/bundle"
	"lithos/runtime/draft"
	"lithos/runtime/model"
)

// LoadDraft builds the bundle's DSpark draft head for the CPU, bound to target (the model
// LoadTarget built from the same bundle: the head embeds with the target's embedding table and
// projects with its LM head). It returns nil, nil when the bundle has no draft.
//
// Like LoadTarget, nothing is unpacked: every draft matrix is a Packed view of its rows in the
// mapped weights, found by its checkpoint name among the draft's BLM tensors ("draft."+name,
// stacks "draft.layers.{i}.self_attn.qkv" and "draft.layers.{i}.mlp.gate_up" addressed by
// segment; docs/bundle.md §3), in whatever format it was packed (BF16 as stored with
// `--draft-format bf16`, or the NVFP4 re-export, the default); the Markov W1 table is gathered
// row by row from its plain tensor; norms (plain weights, transform none), the confidence bias
// are decoded to float32.
//
// It refuses, naming the field or tensor: a draft architecture other than draft.Architectures,
// a config draft.ParseConfig rejects, a draft that does not fit the target (vocab_size,
// hidden_size, target_hidden_size ≠ the target's; a target_layer_ids entry that is not a target
// layer; num_target_layers ≠ the target's depth), a tensor the config contradicts (an own
// embedding, LM head or d2t/t2d; Markov or confidence tensors the config disables), a missing
// tensor, a norm stored with a transform, a matrix format without a CPU kernel, and any shape
// draft.New rejects.
func LoadDraft(b *bundle.Bundle, target *model.Model) (*draft.Drafter, error) {
	m := b.Manifest
	if m.Draft == nil {
		return nil, nil
	}
	if target == nil {
		return nil, fmt.Errorf("bundle %s: the draft head needs its target model", b.Dir)
	}
	if arch := m.Draft.Architecture; !slices.Contains(draft.Architectures, arch) {
		return nil, fmt.Errorf("bundle %s: the draft is a %q model; this runtime drafts with %s", b.Dir, arch, strings.Join(draft.Architectures, ", "))
	}
	cfg, err := draft.ParseConfig(m.Draft.Config)
	if err != nil {
		return nil, fmt.Errorf("bundle %s: draft.config: %w", b.Dir, err)
	}
	if err := DraftFits(&cfg, &target.Cfg); err != nil {
		return nil, fmt.Errorf("bundle %s: %w", b.Dir, err)
	}
	if err := draftTensorsFit(m, &cfg); err != nil {
		return nil, fmt.Errorf("bundle %s: %w", b.Dir, err)
	}
	l := &targetLoader{b: b, segs: map[string]segRef{}, packed: map[string]*Packed{}}
	for i := range m.Tensors {
		t := &m.Tensors[i]
		if t.Model != manifests.ModelDraft || t.Encoding != manifests.EncodingBLM {
			continue
		}
		for si, s := range t.Stack.Segments {
			l.segs[s.Name] = segRef{t: t, seg: si}
		}
	}
	w, err := draftWeights(l, &cfg)
	if err != nil {
		return nil, fmt.Errorf("bundle %s: draft: %w", b.Dir, err)
	}
	d, err := draft.New(cfg, w, target.W.Embed, target.W.LMHead)
	if err != nil {
		return nil, fmt.Errorf("bundle %s: %w", b.Dir, err)
	}
	return d, nil
}

// DraftFits checks that a draft head can run with a target: it embeds with the target's table
// and projects with its LM head (vocab_size and hidden_size must be the target's), its fc reads
// the target's hidden states (target_hidden_size must be the target's hidden size), its taps
// must be target layers (−1, the embedding output, … layers − 1), and num_target_layers, when
// the config gives it, must be the target's depth. A tap on the last layer is accepted: it reads
// that layer's raw output, before the final norm (runtime/draft's tap convention). Errors name
// the field.
func DraftFits(d *draft.Config, t *model.Config) error {
	if d.Vocab != t.Vocab {
		return fmt.Errorf("draft vocab_size %d ≠ target vocab_size %d: drafted tokens are the target's (it shares the embedding and LM head)", d.Vocab, t.Vocab)
	}
	if d.Hidden != t.Hidden {
		return fmt.Errorf("draft hidden_size %d ≠ target hidden_size %d: the draft embeds with the target's table and projects with its LM head", d.Hidden, t.Hidden)
	}
	if d.TargetHidden != t.Hidden {
		return fmt.Errorf("draft target_hidden_size %d ≠ target hidden_size %d: its fc reads the target's hidden states", d.TargetHidden, t.Hidden)
	}
	for _, id := range d.TapLayers {
		if id < -1 || id >= len(t.Layers) {
			return fmt.Errorf("draft target_layer_ids: %d is not a target layer (−1 … %d)", id, len(t.Layers)-1)
		}
	}
	if d.NumTargetLayers > 0 && d.NumTargetLayers != len(t.Layers) {
		return fmt.Errorf("draft num_target_layers %d ≠ the target's %d layers: the head was trained on the taps of another target", d.NumTargetLayers, len(t.Layers))
	}
	return nil
}

// draftTensorsFit refuses draft tensors that contradict the draft config, naming the tensor:
// an own token embedding, LM head or vocabulary map (embed_tokens, lm_head, d2t, t2d: the head
// drafts over the target's full vocabulary with the target's tables), Markov head tensors with
// markov_rank 0, confidence head tensors without enable_confidence_head. Names are checked as
// runtime names ("draft."+module) and as the checkpoint names of stacked segments.
func draftTensorsFit(m *manifests.Bundle, c *draft.Config) error {
	check := func(tensor, module string) error {
		root, _, _ := strings.Cut(module, ".")
		switch {
		case root == "embed_tokens" || root == "lm_head" || root == "d2t" || root == "t2d":
			return fmt.Errorf("tensor %s: the draft head uses the target's embedding and LM head over the full vocabulary; a head with its own %s is not supported", tensor, root)
		case root == "markov_head" && c.MarkovRank == 0:
			return fmt.Errorf("tensor %s: the draft config has no Markov head (markov_rank 0)", tensor)
		case root == "confidence_head" && !c.Confidence:
			return fmt.Errorf("tensor %s: the draft config has no confidence head (enable_confidence_head false)", tensor)
		}
		return nil
	}
	for i := range m.Tensors {
		t := &m.Tensors[i]
		if t.Model != manifests.ModelDraft {
			continue
		}
		if err := check(t.Name, strings.TrimPrefix(t.Name, "draft.")); err != nil {
			return err
		}
		if t.Stack == nil {
			continue
		}
		for _, s := range t.Stack.Segments {
			if err := check(t.Name+" (segment "+s.Name+")", strings.TrimSuffix(s.Name, ".weight")); err != nil {
				return err
			}
		}
	}
	return nil
}

// draftWeights reads every draft weight through l (whose segments are the draft's).
func draftWeights(l *targetLoader, c *draft.Config) (draft.Weights, error) {
	var w draft.Weights
	var err error
	h := c.Hidden
	mat := func(dst *model.Matrix, module string) {
		if err == nil {
			*dst, err = l.matrix(module)
		}
	}
	vec := func(dst *[]float32, name string, n int) {
		if err == nil {
			*dst, err = draftVector(l.b, name, n)
		}
	}
	mat(&w.FC, "fc")
	vec(&w.HiddenNorm, "hidden_norm", h)
	vec(&w.Norm, "norm", h)
	for i := 0; i < c.Layers && err == nil; i++ { // stop at the first missing tensor
		p := fmt.Sprintf("layers.%d.", i)
		var L draft.Layer
		vec(&L.InputNorm, p+"input_layernorm", h)
		vec(&L.PostNorm, p+"post_attention_layernorm", h)
		vec(&L.QNorm, p+"self_attn.q_norm", c.HeadDim)
		vec(&L.KNorm, p+"self_attn.k_norm", c.HeadDim)
		mat(&L.Q, p+"self_attn.q_proj")
		mat(&L.K, p+"self_attn.k_proj")
		mat(&L.V, p+"self_attn.v_proj")
		mat(&L.O, p+"self_attn.o_proj")
		mat(&L.Gate, p+"mlp.gate_proj")
		mat(&L.Up, p+"mlp.up_proj")
		mat(&L.Down, p+"mlp.down_proj")
		w.Layers = append(w.Layers, L)
	}
	if err != nil {
		return w, err
	}
	if c.MarkovRank > 0 {
		name := "draft.markov_head.markov_w1"
		t, ok := l.b.Tensor(name)
		if !ok {
			return w, fmt.Errorf("no tensor %s (markov_rank %d implies a Markov head)", name, c.MarkovRank)
		}
		if w.MarkovW1, err = l.embedding(t, c.Vocab, c.MarkovRank); err != nil {
			return w, err
		}
		if w.MarkovW2, err = l.matrix("markov_head.markov_w2"); err != nil {
			return w, err
		}
	}
	if c.Confidence {
		if w.ConfProj, err = l.matrix("confidence_head.proj"); err != nil {
			return w, err
		}
		var bias []float32
		if bias, err = draftVector(l.b, "confidence_head.proj.bias", 1); err != nil {
			return w, err
		}
		w.ConfBias = bias[0]
	}
	return w, nil
}

// draftVector decodes the plain draft tensor "draft."+name of n values; draft norms are plain
// weights, so the tensor must carry no transform (lithos-metal.md §4.2).
func draftVector(b *bundle.Bundle, name string, n int) ([]float32, error) {
	name = "draft." + name
	t, ok := b.Tensor(name)
	if !ok {
		return nil, fmt.Errorf("no tensor %s", name)
	}
	if t.Encoding != manifests.EncodingPlain {
		return nil, fmt.Errorf("tensor %s: encoding %s, want plain", name, t.Encoding)
	}
	if t.Transform != manifests.TransformNone {
		return nil, fmt.Errorf("tensor %s: transform %q: draft norms are plain weights (transform %q)", name, t.Transform, manifests.TransformNone)
	}
	v, err := b.Floats(t)
	if err != nil {
		return nil, err
	}
	if len(v) != n {
		return nil, fmt.Errorf("tensor %s: %d values (shape %v), want %d", name, len(v), t.Shape, n)
	}
	return v, nil
}
