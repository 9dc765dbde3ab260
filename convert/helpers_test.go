package convert

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"lithos/formats/safetensors"
)

// synth writes the embedded (or inline) spec into dir/<sub> and returns
// that directory.
func synth(t *testing.T, spec *SynthSpec, dir string) string {
	t.Helper()
	if _, err := SynthHeaders(context.Background(), spec, dir); err != nil {
		t.Fatalf("SynthHeaders: %v", err)
	}
	return dir
}

// synthNamed synthesizes an embedded spec into a fresh temporary directory.
func synthNamed(t *testing.T, name string) string {
	t.Helper()
	spec, err := LoadSynthSpec(name)
	if err != nil {
		t.Fatal(err)
	}
	return synth(t, spec, filepath.Join(t.TempDir(), name))
}

// Names of the embedded specs.
const (
	spec27B       = "qwen3.8-27b-nvfp4"
	specHeadNVFP4 = "dspark-qwen3.8-27b-nvfp4"
	specHeadBF16  = "dspark-qwen3.8-27b-bf16"
	repo27B       = "nvidia/Qwen3.8-27B-NVFP4"
	repoHeadNVFP4 = "LithosAI/Qwen3.8-27B-DSpark-NVFP4"
)

func group(t *testing.T, gs []GroupReport, id Group) GroupReport {
	t.Helper()
	for _, g := range gs {
		if g.ID == id {
			return g
		}
	}
	t.Fatalf("no group %s in %+v", id, gs)
	return GroupReport{}
}

// tinySpec is a small hybrid checkpoint with every part the 27B has (GDN and
// attention layers, MTP, vision tower, FP8/NVFP4 mixed precision), small
// enough to write densely and serve quickly.
func tinySpec() *SynthSpec {
	spec, err := ParseSynthSpec([]byte(`{
  "repo": "test/tiny-hybrid",
  "config": {
    "architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5", "tie_word_embeddings": false,
    "text_config": {"model_type": "qwen3_5_text", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4,
      "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "linear_num_key_heads": 2,
      "linear_num_value_heads": 4, "linear_key_head_dim": 16, "linear_value_head_dim": 16, "linear_conv_kernel_dim": 4,
      "full_attention_interval": 4, "vocab_size": 256, "max_position_embeddings": 4096, "mtp_num_hidden_layers": 1,
      "dtype": "bfloat16"},
    "vision_config": {"depth": 2, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "patch_size": 4,
      "out_hidden_size": 64, "num_position_embeddings": 16}
  },
  "quantization": {
    "producer": {"name": "modelopt", "version": "test"}, "quant_algo": "MIXED_PRECISION",
    "rules": [
      {"modules": "model.language_model.layers.*.linear_attn.in_proj_qkv", "quant_algo": "FP8"},
      {"modules": "model.language_model.layers.*.linear_attn.in_proj_z", "quant_algo": "FP8"},
      {"modules": "model.language_model.layers.*.linear_attn.out_proj", "quant_algo": "FP8"},
      {"modules": "model.language_model.layers.*.self_attn.*_proj", "quant_algo": "FP8"},
      {"modules": "model.language_model.layers.*.mlp.*_proj", "quant_algo": "NVFP4", "group_size": 16},
      {"modules": "lm_head", "quant_algo": "NVFP4", "group_size": 16}
    ],
    "files": ["hf_quant_config.json", "config.json"]
  },
  "dtypes": [{"match": "*.linear_attn.A_log", "dtype": "F32"}],
  "shards": {"max_bytes": 150000, "pattern": "model-%05d-of-%05d.safetensors"},
  "metadata": {"format": "pt"}
}`))
	if err != nil {
		panic(err)
	}
	return spec
}

// writeCheckpoint writes config.json and the given shards (header + hole),
// plus an index mapping every tensor to its shard when index is true.
func writeCheckpoint(t *testing.T, dir string, config []byte, shards map[string][]safetensors.TensorSpec, index bool) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), config, 0o644); err != nil {
		t.Fatal(err)
	}
	wm := map[string]string{}
	for name, specs := range shards {
		prefix, ts, err := safetensors.EncodeHeader(specs, map[string]string{"format": "pt"})
		if err != nil {
			t.Fatal(err)
		}
		size := int64(len(prefix))
		for _, x := range ts {
			size = max(size, x.Offset+x.Size)
			wm[x.Name] = name
		}
		if err := writeSparse(filepath.Join(dir, name), prefix, size); err != nil {
			t.Fatal(err)
		}
	}
	if index {
		b, _ := json.Marshal(map[string]any{"weight_map": wm})
		if err := os.WriteFile(filepath.Join(dir, safetensors.IndexName), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
