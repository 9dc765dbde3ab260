package gentest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"

	"lithos/formats/bf16"
	"lithos/formats/safetensors"
)

// DraftSpec is the geometry of a random DSpark draft head made for a target (the layout of
// the public heads, qwen35-and-quant.md §D.4, and of testdata/dspark/tiny-bf16).
type DraftSpec struct {
	// Vocab and Hidden are the target's vocabulary and hidden size (the head embeds with the
	// target's table and projects with its LM head); TargetLayers its layer count.
	Vocab, Hidden, TargetLayers int
	// TapLayers are dflash_config.target_layer_ids.
	TapLayers []int
	// Layers, Heads, KVHeads, HeadDim, Intermediate: the head's own Qwen3 layers.
	Layers, Heads, KVHeads, HeadDim, Intermediate int
	// MarkovRank is markov_rank (0: no Markov head); Confidence adds a confidence head that
	// reads [h ; W1[x]] (confidence_head_with_markov).
	MarkovRank int
	Confidence bool
	// MaskToken is dflash_config.mask_token_id.
	MaskToken int
}

// DraftFor returns a small head for a target of vocab tokens, hidden width and layers: 2
// layers of 4 query / 2 key-value heads of 64, intermediate 2·hidden, Markov rank 64, a
// confidence head, taps on the first, a middle and the last target layer, mask token vocab−1.
func DraftFor(vocab, hidden, layers int) DraftSpec {
	return DraftSpec{Vocab: vocab, Hidden: hidden, TargetLayers: layers, TapLayers: []int{0, layers / 2, layers - 1},
		Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 64, Intermediate: 2 * hidden, MarkovRank: 64, Confidence: true,
		MaskToken: vocab - 1}
}

// WriteDraft writes a DSpark head of spec with BF16 weights drawn from seed into the new
// directory dir: config.json (architectures DSparkDraftModel, block_size 7) and
// model.safetensors. Matrices are N(0, 1/√K), norm weights 1 ± 0.2 (plain RMSNorm weights),
// Markov tables N(0, 0.5/√r), the confidence head N(0, 1/√K) with bias 0.5.
func WriteDraft(dir string, spec DraftSpec, seed uint64) error {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	h, hd := spec.Hidden, spec.HeadDim
	cfg := map[string]any{
		"architectures": []string{"DSparkDraftModel"}, "model_type": "qwen3",
		"hidden_size": h, "intermediate_size": spec.Intermediate, "num_hidden_layers": spec.Layers,
		"num_attention_heads": spec.Heads, "num_key_value_heads": spec.KVHeads, "head_dim": hd,
		"vocab_size": spec.Vocab, "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "rope_theta": 1e7,
		"hidden_act": "silu", "tie_word_embeddings": false, "dtype": "bfloat16",
		"num_target_layers": spec.TargetLayers, "block_size": 7,
		"dflash_config": map[string]any{"mask_token_id": spec.MaskToken, "target_layer_ids": spec.TapLayers},
		"markov_rank":   spec.MarkovRank, "markov_head_type": "vanilla",
		"enable_confidence_head": spec.Confidence, "confidence_head_with_markov": spec.Confidence && spec.MarkovRank > 0,
		"target_hidden_size": h,
	}
	data, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), data, 0o644); err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(seed, 0xd5a4))
	type tensor struct {
		name  string
		shape []int64
		fill  func() float64
	}
	normal := func(std float64) func() float64 { return func() float64 { return rng.NormFloat64() * std } }
	lin := func(name string, n, k int) tensor {
		return tensor{name, []int64{int64(n), int64(k)}, normal(1 / math.Sqrt(float64(k)))}
	}
	norm := func(name string, n int) tensor {
		return tensor{name, []int64{int64(n)}, func() float64 { return 1 + 0.4*(rng.Float64()-0.5) }}
	}
	ts := []tensor{lin("fc.weight", h, len(spec.TapLayers)*h), norm("hidden_norm.weight", h), norm("norm.weight", h)}
	for i := 0; i < spec.Layers; i++ {
		p := fmt.Sprintf("layers.%d.", i)
		ts = append(ts, norm(p+"input_layernorm.weight", h), norm(p+"post_attention_layernorm.weight", h),
			lin(p+"self_attn.q_proj.weight", spec.Heads*hd, h), lin(p+"self_attn.k_proj.weight", spec.KVHeads*hd, h),
			lin(p+"self_attn.v_proj.weight", spec.KVHeads*hd, h), lin(p+"self_attn.o_proj.weight", h, spec.Heads*hd),
			norm(p+"self_attn.q_norm.weight", hd), norm(p+"self_attn.k_norm.weight", hd),
			lin(p+"mlp.gate_proj.weight", spec.Intermediate, h), lin(p+"mlp.up_proj.weight", spec.Intermediate, h),
			lin(p+"mlp.down_proj.weight", h, spec.Intermediate))
	}
	if r := spec.MarkovRank; r > 0 {
		ts = append(ts, tensor{"markov_head.markov_w1.weight", []int64{int64(spec.Vocab), int64(r)}, normal(1)},
			tensor{"markov_head.markov_w2.weight", []int64{int64(spec.Vocab), int64(r)}, normal(0.5 / math.Sqrt(float64(r)))})
	}
	if spec.Confidence {
		in := h
		if spec.MarkovRank > 0 {
			in += spec.MarkovRank
		}
		ts = append(ts, lin("confidence_head.proj.weight", 1, in), tensor{"confidence_head.proj.bias", []int64{1}, func() float64 { return 0.5 }})
	}
	specs := make([]safetensors.TensorSpec, len(ts))
	for i, t := range ts {
		specs[i] = safetensors.TensorSpec{Name: t.name, DType: safetensors.BF16, Shape: t.shape}
	}
	f, err := os.Create(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		return err
	}
	defer f.Close()
	bw := bufio.NewWriter(f)
	w, err := safetensors.NewWriter(bw, specs, map[string]string{"format": "pt"})
	if err != nil {
		return err
	}
	for _, t := range ts {
		n := 1
		for _, d := range t.shape {
			n *= int(d)
		}
		vals := make([]float32, n)
		for i := range vals {
			vals[i] = float32(t.fill())
		}
		raw := make([]byte, 2*n)
		if err := bf16.Encode(raw, vals); err != nil {
			return err
		}
		if err := w.WriteTensor(t.name, raw); err != nil {
			return err
		}
	}
	if err := w.Close(); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	return f.Close()
}
