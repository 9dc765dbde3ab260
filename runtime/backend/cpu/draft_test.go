package cpu

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"lithos/convert"
	"lithos/formats/safetensors"
	"lithos/manifests"
	"lithos/pack"
	"lithos/pack/packtest"
	"lithos/runtime/bundle"
	"lithos/runtime/draft"
	"lithos/runtime/draft/drafttest"
	"lithos/runtime/model"
)

// The DSpark drafter on the packed path: a synthetic BF16 Qwen3.5 target that fits the tiny
// DSpark head of testdata/dspark (hidden 128, vocabulary 1000, 8 layers: its num_target_layers,
// with the taps [1, 3, 5] among them), whose embedding and LM head are the goldens' tables, packed by
// lithos/pack with the head twice: as stored (--draft-format bf16) and re-quantized to NVFP4
// (the default). Each drafter loaded by LoadDraft must match the PyTorch goldens of its variant
// (tools/dspark_goldens.py; tolerances drafttest.Tol*): the BF16 head the "bf16" records, the
// NVFP4 re-export the "nvfp4" records, which PyTorch computed on the dequantized NVFP4 weights
// (the dequantize-then-float reference).

// draftTargetConfig is the synthetic target: 8 layers [GDN GDN GDN ATT GDN GDN GDN ATT] (the
// head's num_target_layers).
const draftTargetConfig = `{
 "architectures": ["Qwen3_5ForCausalLM"], "model_type": "qwen3_5_text", "dtype": "bfloat16",
 "vocab_size": 1000, "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 8,
 "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention",
                 "linear_attention", "linear_attention", "linear_attention", "full_attention"],
 "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 64,
 "linear_num_key_heads": 1, "linear_num_value_heads": 2, "linear_key_head_dim": 32, "linear_value_head_dim": 32,
 "linear_conv_kernel_dim": 4, "rms_norm_eps": 1e-6, "hidden_act": "silu", "tie_word_embeddings": false,
 "max_position_embeddings": 4096,
 "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0, "partial_rotary_factor": 0.25}
}`

// draftTarget writes the synthetic target checkpoint with the goldens' embedding and LM head.
func draftTarget(t *testing.T, g *drafttest.Goldens) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "target")
	spec := &convert.SynthSpec{Repo: "lithos-test/dspark-target", Config: json.RawMessage(draftTargetConfig),
		Shards: convert.SynthShards{Pattern: "model.safetensors"}, Metadata: map[string]string{"format": "pt"}}
	if _, err := packtest.WriteCheckpoint(context.Background(), spec, dir, 11); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "model.safetensors")
	f, err := safetensors.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	for name, golden := range map[string]string{"model.embed_tokens.weight": "embed", "lm_head.weight": "lm_head"} {
		tt, ok := f.Header.Lookup(name)
		if !ok || tt.DType != safetensors.BF16 || !slices.Equal(tt.Shape, []int64{1000, 128}) {
			t.Fatalf("synthetic target: %s is %+v", name, tt)
		}
		vals := g.Floats(t, golden)
		raw := make([]byte, 2*len(vals))
		for i, v := range vals {
			bits := math.Float32bits(v)
			if bits&0xFFFF != 0 {
				t.Fatalf("goldens %s[%d] = %v is not a BF16 value", golden, i, v)
			}
			binary.LittleEndian.PutUint16(raw[2*i:], uint16(bits>>16))
		}
		if _, err := out.WriteAt(raw, tt.Offset); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// packDraftBundle packs target with the tiny DSpark head in format and opens it.
func packDraftBundle(t *testing.T, target, format string) *bundle.Bundle {
	t.Helper()
	out := filepath.Join(t.TempDir(), "d-"+format+".lithos")
	if _, err := pack.Build(context.Background(), pack.Options{Target: target, Draft: drafttest.TinyDir(t), DraftFormat: format,
		Out: out, Workers: 2, ToolVersion: "test", Log: slog.New(slog.NewTextHandler(io.Discard, nil))}); err != nil {
		t.Fatalf("pack with a %s draft: %v", format, err)
	}
	b, err := bundle.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func TestLoadDraft(t *testing.T) {
	g := drafttest.Read(t)
	target := draftTarget(t, g)
	for _, c := range []struct {
		format, variant, qkv string
	}{{pack.DraftBF16, "bf16", "bf16"}, {pack.DraftNVFP4, "nvfp4", "nvfp4"}} {
		t.Run(c.format, func(t *testing.T) {
			b := packDraftBundle(t, target, c.format)
			if qkv, ok := b.Tensor("draft.layers.0.self_attn.qkv"); !ok || qkv.Format != c.qkv {
				t.Fatalf("draft qkv packed as %+v, want format %s", qkv, c.qkv)
			}
			tm, err := LoadTarget(b)
			if err != nil {
				t.Fatal(err)
			}
			d, err := LoadDraft(b, tm)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			for _, n := range drafttest.Cases {
				st, err := d.NewState(48)
				if err != nil {
					t.Fatal(err)
				}
				if err := d.Append(ctx, st, g.Features(t, n, d.Cfg.FeatureDim()), n); err != nil {
					t.Fatal(err)
				}
				drafttest.Compare(t, g, d, st, c.variant, n)
			}
			// The round's way: append 17, draft, append 23 more, draft.
			st, _ := d.NewState(48)
			feats := g.Features(t, 40, d.Cfg.FeatureDim())
			for _, piece := range [][2]int{{0, 17}, {17, 40}} {
				fd := d.Cfg.FeatureDim()
				if err := d.Append(ctx, st, feats[piece[0]*fd:piece[1]*fd], piece[1]-piece[0]); err != nil {
					t.Fatal(err)
				}
				drafttest.Compare(t, g, d, st, c.variant, piece[1])
			}
			// Against the dense drafter over the same float32 weights (Go's dequantization).
			dense, err := draft.New(d.Cfg, drafttest.Weights(t, d.Cfg, c.variant), tm.W.Embed, tm.W.LMHead)
			if err != nil {
				t.Fatal(err)
			}
			var pp, pd draft.Proposal
			pp.KeepLogits, pd.KeepLogits = true, true
			sd, _ := dense.NewState(48)
			if err := dense.Append(ctx, sd, feats, 40); err != nil {
				t.Fatal(err)
			}
			if err := d.Draft(ctx, st, 3, nil, &pp); err != nil {
				t.Fatal(err)
			}
			if err := dense.Draft(ctx, sd, 3, nil, &pd); err != nil {
				t.Fatal(err)
			}
			if e, at := drafttest.RelErr(pp.Logits, pd.Logits); e > 1e-5 || !slices.Equal(pp.Tokens, pd.Tokens) {
				t.Errorf("packed vs dense: logits %.3g relative at %d, tokens %v vs %v", e, at, pp.Tokens, pd.Tokens)
			}
		})
	}
}

// TestLoadDraftRefuses: a draft that does not fit the target is refused with the field named;
// a bundle without a draft gives nil, nil.
func TestLoadDraftRefuses(t *testing.T) {
	g := drafttest.Read(t)
	b := packDraftBundle(t, draftTarget(t, g), pack.DraftBF16)
	tm, err := LoadTarget(b)
	if err != nil {
		t.Fatal(err)
	}
	orig := *b.Manifest.Draft
	defer func() { *b.Manifest.Draft = orig }()
	edit := func(f func(c map[string]any)) {
		var c map[string]any
		if err := json.Unmarshal(orig.Config, &c); err != nil {
			t.Fatal(err)
		}
		f(c)
		raw, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		*b.Manifest.Draft = orig
		b.Manifest.Draft.Config = raw
	}
	for _, c := range []struct {
		name string
		edit func(c map[string]any)
		want string
	}{
		{"vocabulary", func(c map[string]any) { c["vocab_size"] = 1024 }, "draft vocab_size 1024 ≠ target vocab_size 1000"},
		{"hidden size", func(c map[string]any) { c["hidden_size"] = 256 }, "draft hidden_size 256 ≠ target hidden_size 128"},
		{"target hidden size", func(c map[string]any) { c["target_hidden_size"] = 64 }, "draft target_hidden_size 64 ≠ target hidden_size 128"},
		{"taps", func(c map[string]any) {
			delete(c, "num_target_layers")
			c["dflash_config"].(map[string]any)["target_layer_ids"] = []int{1, 3, 8}
		}, "draft target_layer_ids: 8 is not a target layer (−1 … 7)"},
		{"target depth", func(c map[string]any) { c["num_target_layers"] = 6 }, "draft num_target_layers 6 ≠ the target's 8 layers"},
		{"no markov head", func(c map[string]any) {
			c["markov_rank"] = 0
			c["confidence_head_with_markov"] = false
		}, "tensor draft.markov_head.markov_w1: the draft config has no Markov head (markov_rank 0)"},
		{"no confidence head", func(c map[string]any) { c["enable_confidence_head"] = false }, "tensor draft.confidence_head.proj"},
		{"mask token", func(c map[string]any) { c["dflash_config"].(map[string]any)["mask_token_id"] = 1000 }, "mask_token_id 1000 is outside the vocabulary"},
		{"markov head type", func(c map[string]any) { c["markov_head_type"] = "gated" }, `markov_head_type "gated"`},
		{"rope scaling", func(c map[string]any) { c["rope_scaling"] = map[string]any{"rope_type": "llama3", "factor": 8} }, `rope_scaling.rope_type "llama3"`},
		{"ranks", func(c map[string]any) { c["markov_rank"] = 32 }, "tensor draft.markov_head.markov_w1: shape [1000 64], want [1000, 32]"},
	} {
		edit(c.edit)
		d, err := LoadDraft(b, tm)
		if err == nil || d != nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", c.name, err, c.want)
		}
	}
	*b.Manifest.Draft = orig
	b.Manifest.Draft.Architecture = "DFlashDraftModel"
	if _, err := LoadDraft(b, tm); err == nil || !strings.Contains(err.Error(), `"DFlashDraftModel"`) {
		t.Errorf("DFlash architecture: %v", err)
	}
	*b.Manifest.Draft = orig
	// A target with another vocabulary (the same bundle's draft, a different model).
	small := tm.Cfg
	small.Vocab = 999
	other := &model.Model{Cfg: small, W: tm.W}
	if _, err := LoadDraft(b, other); err == nil || !strings.Contains(err.Error(), "draft vocab_size 1000 ≠ target vocab_size 999") {
		t.Errorf("other target: %v", err)
	}
	fewer := tm.Cfg
	fewer.Layers = fewer.Layers[:5]
	if _, err := LoadDraft(b, &model.Model{Cfg: fewer, W: tm.W}); err == nil || !strings.Contains(err.Error(), "target_layer_ids: 5 is not a target layer (−1 … 4)") {
		t.Errorf("shallower target: %v", err)
	}
	// Taps that all exist in a 7-layer target, but the head says it was trained on 8 layers.
	fewer.Layers = tm.Cfg.Layers[:7]
	if _, err := LoadDraft(b, &model.Model{Cfg: fewer, W: tm.W}); err == nil || !strings.Contains(err.Error(), "draft num_target_layers 8 ≠ the target's 7 layers") {
		t.Errorf("7-layer target: %v", err)
	}
	// A draft's own vocabulary tables contradict a head that uses the target's.
	for _, name := range []string{"draft.embed_tokens", "draft.lm_head", "draft.d2t"} {
		tensors := b.Manifest.Tensors
		norm, _ := b.Tensor("draft.norm")
		extra := *norm
		extra.Name = name
		b.Manifest.Tensors = append(slices.Clip(tensors), extra)
		_, err := LoadDraft(b, tm)
		b.Manifest.Tensors = tensors
		if err == nil || !strings.Contains(err.Error(), "tensor "+name+": the draft head uses the target's embedding and LM head") {
			t.Errorf("%s in the bundle: %v", name, err)
		}
	}
	if d, err := LoadDraft(b, tm); err != nil || d == nil {
		t.Fatalf("restored manifest: %v", err)
	}
	saved := b.Manifest.Draft
	b.Manifest.Draft = nil
	d, err := LoadDraft(b, tm)
	b.Manifest.Draft = saved
	if d != nil || err != nil {
		t.Errorf("no draft: %v, %v; want nil, nil", d, err)
	}
	// A norm stored with the target's (1+w) transform is refused, naming the tensor.
	nt, _ := b.Tensor("draft.norm")
	tr := nt.Transform
	nt.Transform = manifests.TransformOnePlus
	_, err = LoadDraft(b, tm)
	nt.Transform = tr
	if err == nil || !strings.Contains(err.Error(), "tensor draft.norm: transform \"one_plus\"") {
		t.Errorf("one_plus draft norm: %v", err)
	}
}

// TestDraftWeightsStopEarly: reading the weights of a config that claims many layers stops at
// the first missing tensor, before a layer is built (a hostile num_hidden_layers would otherwise
// size the loop).
func TestDraftWeightsStopEarly(t *testing.T) {
	l := &targetLoader{segs: map[string]segRef{}, packed: map[string]*Packed{}}
	cfg := draft.Config{Layers: draft.MaxLayers, Hidden: 8, HeadDim: 4}
	w, err := draftWeights(l, &cfg)
	if err == nil || !strings.Contains(err.Error(), "tensor fc.weight") {
		t.Fatalf("error %v, want the missing fc named", err)
	}
	if len(w.Layers) != 0 {
		t.Errorf("%d layers built after fc was found missing", len(w.Layers))
	}
}
