package pack

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"lithos/convert"
	"lithos/convert/quantize"
	"lithos/formats/safetensors"
	"lithos/manifests"
)

// tinyTargetSpec is a text-only BF16 Qwen3.5 (Qwen3_5ForCausalLM: tensors under "model.") with
// the fixture's widths: 2 GDN layers then 1 attention layer, hidden 64, vocabulary 512.
func tinyTargetSpec(t *testing.T, edit func(cfg map[string]any), dtypes []convert.DTypeRule, omit []string) *convert.SynthSpec {
	t.Helper()
	cfg := map[string]any{
		"architectures": []string{"Qwen3_5ForCausalLM"}, "model_type": "qwen3_5_text", "dtype": "bfloat16",
		"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 3,
		"layer_types":         []string{"linear_attention", "linear_attention", "full_attention"},
		"num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32, "vocab_size": 512,
		"linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 16, "linear_value_head_dim": 16,
		"linear_conv_kernel_dim": 4, "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "attn_output_gate": true,
		"tie_word_embeddings": false, "hidden_act": "silu",
	}
	if edit != nil {
		edit(cfg)
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &convert.SynthSpec{Repo: "lithos-test/tiny-text", Config: b, DTypes: dtypes, Omit: omit,
		Shards: convert.SynthShards{Pattern: "model.safetensors"}, Metadata: map[string]string{"format": "pt"}}
}

// TestBuildRefusesBeforeWriting: every refusal happens before the output (or a temporary
// directory beside it) exists, and names the model, tensor and rule.
func TestBuildRefusesBeforeWriting(t *testing.T) {
	edited := func(edit func(m map[string]any)) string {
		d := copyDir(t, fixtureDir)
		editJSON(t, filepath.Join(d, "config.json"), edit)
		return d
	}
	textCfg := func(f func(tc map[string]any)) func(m map[string]any) {
		return func(m map[string]any) { f(m["text_config"].(map[string]any)) }
	}
	draft := func(edit func(cfg map[string]any)) string { return writeSpec(t, tinyDraftSpec(t, edit), 7) }
	nvfp4Draft := func() string {
		out := filepath.Join(t.TempDir(), "q")
		if _, err := quantize.Run(context.Background(), draft(nil), out, quantize.Options{ToolVersion: "test"}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	exists := filepath.Join(t.TempDir(), "taken.lithos")
	if err := os.Mkdir(exists, 0o755); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		opt  Options
		want []string
	}{
		{"shape disagrees with config", Options{Target: edited(textCfg(func(tc map[string]any) { tc["intermediate_size"] = 96 }))},
			[]string{"target: tensor model.language_model.layers.0.mlp.gate_proj.weight", "[128, 64]", "config.json implies [96 64]"}},
		{"tensor the config does not have", Options{Target: edited(textCfg(func(tc map[string]any) {
			tc["num_hidden_layers"] = 3
			tc["layer_types"] = tc["layer_types"].([]any)[:3]
		}))}, []string{"target: tensor model.language_model.layers.3.", "not part of the model config.json describes"}},
		{"tensor the checkpoint lacks", Options{Target: writeSpec(t, tinyTargetSpec(t, nil, nil, []string{"model.layers.1.linear_attn.dt_bias"}), 1)},
			[]string{"target: tensor model.layers.1.linear_attn.dt_bias", "does not have it"}},
		{"F32 matrix", Options{Target: writeSpec(t, tinyTargetSpec(t, nil, []convert.DTypeRule{{Match: "*.mlp.down_proj.weight", DType: "F32"}}, nil), 1)},
			[]string{"model.layers.0.mlp.down_proj", "F32 matrix", "convert it to BF16"}},
		{"quantized norm", Options{Target: writeSpec(t, tinyTargetSpec(t, nil, []convert.DTypeRule{{Match: "*.input_layernorm.weight", DType: "F8_E4M3"}}, nil), 1)},
			[]string{"tensor model.layers.0.input_layernorm.weight", "dtype F8_E4M3"}},
		{"draft vocabulary", Options{Target: fixtureDir, Draft: draft(func(c map[string]any) { c["vocab_size"] = 256 })},
			[]string{"does not fit target", "vocab_size 256 ≠ target vocab_size 512"}},
		{"draft hidden size", Options{Target: fixtureDir, Draft: draft(func(c map[string]any) { c["hidden_size"] = 32; c["head_dim"] = 16 })},
			[]string{"does not fit target", "hidden_size 32 ≠ target hidden_size 64"}},
		{"draft target hidden size", Options{Target: fixtureDir, Draft: draft(func(c map[string]any) { c["target_hidden_size"] = 128 })},
			[]string{"target_hidden_size 128 ≠ target hidden_size 64"}},
		{"draft target depth", Options{Target: fixtureDir, Draft: draft(func(c map[string]any) { c["num_target_layers"] = 6 })},
			[]string{"num_target_layers 6 ≠ target num_hidden_layers 4"}},
		{"draft taps", Options{Target: fixtureDir, Draft: draft(func(c map[string]any) { c["target_layer_ids"] = []int{1, 4} })},
			[]string{"target_layer_ids: 4 is not a target layer"}},
		{"draft that is a target", Options{Target: fixtureDir, Draft: fixtureDir}, []string{"does not describe a DSpark/DFlash draft head"}},
		{"bf16 from an nvfp4 draft", Options{Target: fixtureDir, Draft: nvfp4Draft(), DraftFormat: DraftBF16},
			[]string{"already quantized", "nvfp4", "BF16 cannot be restored"}},
		{"output exists", Options{Target: fixtureDir, Out: exists}, []string{"already exists"}},
		{"draft format", Options{Target: fixtureDir, DraftFormat: "fp8"}, []string{`draft format "fp8"`}},
		{"draft auto without a repo", Options{Target: fixtureDir, Draft: DraftAuto}, []string{"draft auto", "no repo id"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			parent := t.TempDir()
			if c.opt.Out == "" {
				c.opt.Out = filepath.Join(parent, "model.lithos")
			} else {
				parent = filepath.Dir(c.opt.Out)
			}
			before := dirNames(t, parent)
			_, err := Build(context.Background(), c.opt)
			wantErr(t, err, c.want...)
			if after := dirNames(t, parent); !slices.Equal(before, after) {
				t.Fatalf("the refused pack left %v in %s (had %v)", after, parent, before)
			}
		})
	}
}

// TestBuildInterrupted: while the weights are written only a hidden temporary directory without
// a manifest exists; cancelling removes it and never creates the bundle.
func TestBuildInterrupted(t *testing.T) {
	parent := t.TempDir()
	out := filepath.Join(parent, "model.lithos")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var once sync.Once
	var during []string
	var manifestSeen bool
	_, err := Build(ctx, Options{Target: fixtureDir, Out: out, Workers: 1, Progress: func(total, delta int64) {
		if delta == 0 {
			return
		}
		once.Do(func() {
			during = dirNames(t, parent)
			for _, n := range during {
				if _, err := os.Stat(filepath.Join(parent, n, manifests.BundleManifestName)); err == nil {
					manifestSeen = true
				}
			}
			cancel()
		})
	}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Build: %v, want context.Canceled", err)
	}
	if len(during) != 1 || !strings.HasPrefix(during[0], ".model.lithos.tmp-") || manifestSeen {
		t.Fatalf("while writing %s held %v (manifest: %v), want one hidden .model.lithos.tmp-* without a manifest", parent, during, manifestSeen)
	}
	if left := dirNames(t, parent); len(left) != 0 {
		t.Fatalf("after the cancelled pack %s holds %v", parent, left)
	}
}

// TestPackDraftRequantized packs the fixture with a BF16 DSpark head, re-quantized to NVFP4 on
// the way, and verifies it deeply (which re-quantizes the source again and compares).
func TestPackDraftRequantized(t *testing.T) {
	ddir := writeSpec(t, tinyDraftSpec(t, nil), 3)
	dir, m := build(t, Options{Target: fixtureDir, Draft: ddir})
	if m.Draft == nil || len(m.Draft.Requantized) == 0 || m.Draft.Architecture != "DSparkDraftModel" {
		t.Fatalf("draft record %+v", m.Draft)
	}
	var conv quantize.Conversion
	if err := json.Unmarshal(m.Draft.Requantized, &conv); err != nil || conv.Method.QuantAlgo != "W4A16_NVFP4" {
		t.Fatalf("requantized record: %v %+v", err, conv.Method)
	}
	if f := m.Draft.Source.Files; len(f) != 2 || f[1].Path != "model.safetensors" || f[1].SHA256 != fileSHA(t, filepath.Join(ddir, "model.safetensors")) {
		t.Errorf("draft source files %+v: want the BF16 source's", f)
	}
	want := map[string]string{ // name → format
		"draft.fc": "nvfp4", "draft.hidden_norm": "BF16", "draft.layers.0.input_layernorm": "BF16",
		"draft.layers.0.self_attn.qkv": "nvfp4", "draft.layers.0.self_attn.o_proj": "nvfp4",
		"draft.layers.0.self_attn.q_norm": "BF16", "draft.layers.0.self_attn.k_norm": "BF16",
		"draft.layers.0.post_attention_layernorm": "BF16", "draft.layers.0.mlp.gate_up": "nvfp4",
		"draft.layers.0.mlp.down_proj": "nvfp4", "draft.norm": "BF16", "draft.markov_head.markov_w1": "BF16",
		"draft.markov_head.markov_w2": "nvfp4", "draft.confidence_head.proj": "bf16", "draft.confidence_head.proj.bias": "BF16",
	}
	got := map[string]string{}
	for _, tt := range m.Tensors {
		if tt.Model == manifests.ModelDraft {
			got[tt.Name] = tt.Format
			if tt.Transform != "" && tt.Transform != manifests.TransformNone {
				t.Errorf("%s: transform %s: draft norms are plain w (lithos-metal.md §4.2)", tt.Name, tt.Transform)
			}
		}
	}
	if len(got) != len(want) {
		t.Errorf("draft tensors %v, want %v", got, want)
	}
	for n, f := range want {
		if got[n] != f {
			t.Errorf("%s: format %q, want %q", n, got[n], f)
		}
	}
	if got, want := dirNames(t, dir), []string{"generation_config.json", "manifest.json", "tokenizer.json", "tokenizer_config.json", "weights.bin"}; !slices.Equal(got, want) {
		t.Errorf("bundle holds %v, want %v", got, want)
	}
	w2, _ := m.Tensor("draft.markov_head.markov_w2")
	if w2.Layout.K != 32 || w2.Role != manifests.RoleMatrix || w2.Group != "markov_w2" {
		t.Errorf("markov_w2: %+v", w2)
	}
	rep, err := Verify(context.Background(), dir, VerifyOptions{Deep: true, TempDir: t.TempDir()})
	if err != nil {
		t.Fatalf("Verify --deep: %v", err)
	}
	if rep.Deep.Compared != len(m.Tensors) || len(rep.Deep.Sources) != 2 || !strings.Contains(rep.Deep.Sources[1].Note, "re-quantized again") {
		t.Fatalf("deep %+v", rep.Deep)
	}
}

// TestPackDraftBF16 keeps the draft as stored, and packs a tied vocabulary head from the
// embedding.
func TestPackDraftBF16(t *testing.T) {
	target := writeSpec(t, tinyTargetSpec(t, func(c map[string]any) { c["tie_word_embeddings"] = true }, nil, nil), 5)
	ddir := writeSpec(t, tinyDraftSpec(t, func(c map[string]any) { c["target_layer_ids"], c["num_target_layers"] = []int{0, 2}, 3 }), 4)
	dir, m := build(t, Options{Target: target, Draft: ddir, DraftFormat: DraftBF16})
	if len(m.Draft.Requantized) != 0 {
		t.Fatal("a bf16 draft was re-quantized")
	}
	qkv, _ := m.Tensor("draft.layers.0.self_attn.qkv")
	if qkv.Format != "bf16" || qkv.Shape[0] != 64+32+32 {
		t.Fatalf("draft qkv %s %v", qkv.Format, qkv.Shape)
	}
	head, ok := m.Tensor("lm_head")
	emb, _ := m.Tensor("embed_tokens")
	if !ok || head.Stack.Segments[0].Name != "model.embed_tokens.weight" || emb.Source != "model.embed_tokens.weight" || head.Group != "vocab_head" {
		t.Fatalf("tied lm_head %+v", head)
	}
	// Text-only checkpoints keep "model." out of the runtime names and zero-centred norms.
	if n, ok := m.Tensor("layers.0.input_layernorm"); !ok || n.Transform != manifests.TransformOnePlus {
		t.Fatalf("layers.0.input_layernorm: %+v", n)
	}
	if _, err := Verify(context.Background(), dir, VerifyOptions{Deep: true}); err != nil {
		t.Fatalf("Verify --deep: %v", err)
	}
}

// TestRefuseDivisorTensorScale: an NVFP4 tensor scale stored as a divisor
// (the inverse of ModelOpt's multiplier) is refused before anything is
// written, naming the module (docs/formats.md, the 448 check).
func TestRefuseDivisorTensorScale(t *testing.T) {
	d := copyDir(t, fixtureDir)
	m, err := safetensors.OpenModel(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	var name string
	for _, n := range m.Names() {
		if strings.HasSuffix(n, "mlp.gate_proj.weight_scale_2") {
			name = n
			break
		}
	}
	f, tn, ok := m.Lookup(name)
	if !ok {
		t.Fatal("fixture has no NVFP4 gate_proj")
	}
	b := sourceTensor(t, m, name)
	path := f.Path
	m.Close()
	inv := 1 / f32At(b, 0)
	fh, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	var w [4]byte
	binary.LittleEndian.PutUint32(w[:], math.Float32bits(inv))
	if _, err := fh.WriteAt(w[:], tn.Offset); err != nil {
		t.Fatal(err)
	}
	fh.Close()
	out := filepath.Join(t.TempDir(), "x.lithos")
	_, err = Build(context.Background(), Options{Target: d, Out: out, ToolVersion: "test"})
	wantErr(t, err, strings.TrimSuffix(name, ".weight_scale_2"))
	if _, serr := os.Stat(out); serr == nil {
		t.Error("a bundle was written")
	}
	t.Logf("refused with: %v", err)
}
