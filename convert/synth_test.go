package convert

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"lithos/formats/safetensors"
	"lithos/manifests"
)

func TestSynthBF16HeadMatchesPublishedFile(t *testing.T) {
	spec, err := LoadSynthSpec(specHeadBF16)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	res, err := SynthHeaders(context.Background(), spec, dir)
	if err != nil {
		t.Fatal(err)
	}
	// lithos-metal.md §5.3: RadixArk/Qwen3.8-27B-DSpark's model.safetensors is
	// 3,714,723,322 bytes. Header written as safetensors.torch.save_file does
	// (formats/safetensors.PythonOrder, metadata {"format": "pt"}).
	if res.Files[0].Name != "model.safetensors" || res.Files[0].Bytes != 3_714_723_322 || res.Files[0].Tensors != 62 {
		t.Fatalf("BF16 head %+v, the real file is 3,714,723,322 bytes with 62 tensors", res.Files[0])
	}
	if _, err := os.Stat(filepath.Join(dir, safetensors.IndexName)); !os.IsNotExist(err) {
		t.Error("a single-file checkpoint got an index")
	}
}

func TestSynth27BFiles(t *testing.T) {
	spec, err := LoadSynthSpec(spec27B)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "out")
	res, err := SynthHeaders(context.Background(), spec, dir)
	if err != nil {
		t.Fatal(err)
	}
	// 48 GDN layers × 29 tensors + 16 attention layers × 28 + embed, norm,
	// lm_head × 4 + 15 MTP + 250 vision (docs/audit.md).
	if res.Tensors != 2111 || res.TensorBytes != 21_921_073_288 {
		t.Errorf("%d tensors, %d bytes", res.Tensors, res.TensorBytes)
	}
	var shards []string
	for _, f := range res.Files {
		if strings.HasSuffix(f.Name, ".safetensors") {
			shards = append(shards, f.Name)
		}
	}
	if len(shards) != 3 || shards[0] != "model-00001-of-00003.safetensors" {
		t.Fatalf("shards %v (the article read three headers)", shards)
	}
	var apparent, allocated int64
	for _, s := range shards {
		f, err := safetensors.Open(filepath.Join(dir, s))
		if err != nil {
			t.Fatalf("%s does not read back: %v", s, err)
		}
		st, _ := os.Stat(filepath.Join(dir, s))
		apparent += st.Size()
		if sys, ok := st.Sys().(*syscall.Stat_t); ok {
			allocated += sys.Blocks * 512
		}
		f.Close()
	}
	// 21.92 GB apparent, (next to) nothing on disk.
	if apparent < 21_921_073_288 || allocated > 4<<20 {
		t.Errorf("apparent %d bytes, allocated %d", apparent, allocated)
	}
	ix, err := os.ReadFile(filepath.Join(dir, safetensors.IndexName))
	if err != nil {
		t.Fatal(err)
	}
	var index struct {
		Metadata  map[string]int64  `json:"metadata"`
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(ix, &index); err != nil {
		t.Fatal(err)
	}
	if len(index.WeightMap) != 2111 || index.Metadata["total_size"] != res.TensorBytes {
		t.Errorf("index: %d entries, total_size %d", len(index.WeightMap), index.Metadata["total_size"])
	}
	// Both quantization files say the same thing.
	hq, err := os.ReadFile(filepath.Join(dir, "hf_quant_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	q1, err := ParseHFQuantConfig(hq)
	if err != nil {
		t.Fatal(err)
	}
	cj, _ := os.ReadFile(filepath.Join(dir, "config.json"))
	cfg, err := ParseConfig(cj)
	if err != nil {
		t.Fatal(err)
	}
	q2 := cfg.Quantization
	// 48·3 GDN + 16·4 attention FP8; 64·3 MLP + lm_head NVFP4.
	if len(q1.Layers) != 401 || len(q2.Layers) != 401 {
		t.Fatalf("quantized layers %d / %d", len(q1.Layers), len(q2.Layers))
	}
	for m, l := range q1.Layers {
		if q2.Layers[m] != l {
			t.Errorf("%s: %v vs %v", m, l, q2.Layers[m])
		}
	}
	// Writing again into the same directory refuses to overwrite.
	if _, err := SynthHeaders(context.Background(), spec, dir); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Errorf("second write: %v", err)
	}
}

func TestSynthStoredTensorsFormats(t *testing.T) {
	spec, err := LoadSynthSpec(spec27B)
	if err != nil {
		t.Fatal(err)
	}
	specs, _, _, err := spec.StoredTensors()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]safetensors.TensorSpec{}
	for _, s := range specs {
		got[s.Name] = s
	}
	p := "model.language_model.layers.0."
	for name, want := range map[string]string{
		p + "mlp.down_proj.weight":                              "U8 [5120 8704]",
		p + "mlp.down_proj.weight_scale":                        "F8_E4M3 [5120 1088]",
		p + "mlp.down_proj.weight_scale_2":                      "F32 []",
		p + "mlp.down_proj.input_scale":                         "F32 []",
		p + "linear_attn.in_proj_qkv.weight":                    "F8_E4M3 [10240 5120]",
		p + "linear_attn.in_proj_qkv.weight_scale":              "F32 []",
		p + "linear_attn.in_proj_a.weight":                      "BF16 [48 5120]",
		p + "linear_attn.conv1d.weight":                         "BF16 [10240 1 4]",
		p + "linear_attn.A_log":                                 "F32 [48]",
		p + "linear_attn.norm.weight":                           "F32 [128]",
		"model.language_model.layers.3.self_attn.q_proj.weight": "F8_E4M3 [12288 5120]",
		"lm_head.weight":                                        "U8 [248320 2560]",
		"mtp.fc.weight":                                         "BF16 [5120 10240]",
		"model.visual.patch_embed.proj.weight":                  "BF16 [1152 3 2 16 16]",
		"model.visual.blocks.0.attn.qkv.bias":                   "BF16 [3456]",
	} {
		s, ok := got[name]
		if !ok {
			t.Errorf("%s missing", name)
			continue
		}
		if str := fmt.Sprintf("%s %v", s.DType, s.Shape); str != want {
			t.Errorf("%s: %s, want %s", name, str, want)
		}
	}
	if _, ok := got["model.visual.blocks.0.attn.proj.bias"]; ok {
		t.Error("omitted vision bias present")
	}
}

func TestSynthSpecErrors(t *testing.T) {
	mk := func(edit func(*SynthSpec)) error {
		s := tinySpec()
		edit(s)
		_, err := SynthHeaders(context.Background(), s, t.TempDir())
		return err
	}
	for _, tc := range []struct {
		name string
		edit func(*SynthSpec)
		want string
	}{
		{"stale omit", func(s *SynthSpec) { s.Omit = []string{"model.visual.no_such.*"} }, `omit[0] "model.visual.no_such.*" matches no tensor`},
		{"bad dtype", func(s *SynthSpec) { s.DTypes = []DTypeRule{{Match: "*", DType: "F12"}} }, "F12"},
		{"odd group", func(s *SynthSpec) { s.Quantization.Rules[4].GroupSize = 48 }, "multiple of the group size 48"},
		{"unknown algo", func(s *SynthSpec) { s.Quantization.Rules[0].QuantAlgo = "INT3" }, `quant_algo "INT3" cannot be synthesized`},
		{"bad pattern", func(s *SynthSpec) { s.Shards.Pattern = "../x-%d.safetensors" }, "plain *.safetensors file name"},
		{"single name, many shards", func(s *SynthSpec) { s.Shards.Pattern = "model.safetensors" }, "needs 3 shards"},
	} {
		if err := mk(tc.edit); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
		}
	}
	if _, err := ParseSynthSpec([]byte(`{"config": {}, "shardz": {}}`)); err == nil || !strings.Contains(err.Error(), "shardz") {
		t.Errorf("unknown spec field: %v", err)
	}
	if _, err := LoadSynthSpec("no-such-spec"); err == nil || !strings.Contains(err.Error(), "known specs") {
		t.Errorf("unknown spec name: %v", err)
	}
}

func TestSynthPlainConfig(t *testing.T) {
	// A bare config.json is a spec: one BF16 file, no quantization.
	spec, err := ParseSynthSpec([]byte(`{"model_type": "qwen3", "hidden_size": 16, "intermediate_size": 32,
		"num_hidden_layers": 2, "num_attention_heads": 2, "vocab_size": 64}`))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	res, err := SynthHeaders(context.Background(), spec, dir)
	if err != nil {
		t.Fatal(err)
	}
	// embed + 2 × (2 norms + 4 attention + 2 q/k norms + 3 MLP) + norm + lm_head.
	if res.Tensors != 1+2*11+2 || res.Files[0].Name != "model.safetensors" {
		t.Errorf("%+v", res)
	}
	r, err := Audit(context.Background(), LocalSource{Dir: dir}, AuditOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r.State.GDNStateBytes != 0 || r.State.KVBytesPerToken != 2*2*8*2*2 || len(r.Unknown) != 0 {
		t.Errorf("state %+v unknown %v", r.State, r.Unknown)
	}
}

func TestEmbeddedSpecsParse(t *testing.T) {
	for _, name := range manifests.ModelSpecNames() {
		s, err := LoadSynthSpec(name)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if _, _, _, err := s.StoredTensors(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	for _, p := range manifests.Registry() {
		for _, n := range append([]string{p.TargetSpec, p.DraftSpec}, p.AlternativeSpecs...) {
			if n == "" {
				continue
			}
			s, err := LoadSynthSpec(n)
			if err != nil {
				t.Errorf("registry spec %s: %v", n, err)
				continue
			}
			cfg, err := ParseConfig(s.Config)
			if err != nil {
				t.Fatal(err)
			}
			if n == p.TargetSpec && !p.Matches(cfg.Architecture(), cfg.Text.HiddenSize, cfg.Text.NumHiddenLayers) {
				t.Errorf("%s does not match its pairing %+v", n, p)
			}
			if n != p.TargetSpec && !cfg.IsDraft() {
				t.Errorf("%s is not a draft head", n)
			}
		}
	}
}
