package formats

import (
	"strings"
	"testing"
)

func TestParseHFQuantConfig(t *testing.T) {
	// Shape from qwen35-and-quant.md §B.1 (single-format NVFP4 export).
	b := []byte(`{"producer": {"name": "modelopt", "version": "0.41.0"},
	  "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": null, "group_size": 16,
	                   "exclude_modules": ["lm_head", "model.visual*", "mtp*", "*linear_attn.in_proj_a*"]}}`)
	s, err := ParseHFQuantConfig(b)
	if err != nil {
		t.Fatal(err)
	}
	if s.Method != "modelopt" || s.Algo != "NVFP4" || s.GroupSize != 16 || len(s.Exclude) != 4 {
		t.Fatalf("parsed %+v", s)
	}
	for name, want := range map[string]string{
		"lm_head":                                   "none",
		"model.visual.blocks.0.attn.qkv":            "none",
		"mtp.layers.0.mlp.down_proj":                "none",
		"model.layers.0.linear_attn.in_proj_a":      "none",
		"model.language_model.layers.0.mlp.up_proj": "modelopt",
	} {
		if got := s.Module(name).Method; got != want {
			t.Errorf("Module(%q).Method = %q, want %q", name, got, want)
		}
	}
	if _, err := ParseHFQuantConfig([]byte(`{"producer":{"name":"other"},"quantization":{}}`)); err == nil {
		t.Error("accepted a non-modelopt producer")
	}
	if _, err := ParseHFQuantConfig([]byte(`{"producer":{"name":"modelopt"}}`)); err == nil {
		t.Error("accepted a config without quantization")
	}
}

func TestParseConfigModelOptMixed(t *testing.T) {
	b := []byte(`{"architectures": ["X"], "quantization_config": {"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION",
	  "quantized_layers": {"model.layers.0.mlp.down_proj": {"quant_algo": "NVFP4", "group_size": 16},
	                       "model.layers.0.self_attn.o_proj": {"quant_algo": "FP8"}}}}`)
	s, err := ParseConfig(b)
	if err != nil {
		t.Fatal(err)
	}
	if m := s.Module("model.layers.0.mlp.down_proj"); m.Algo != "NVFP4" || m.GroupSize != 16 {
		t.Errorf("down_proj: %+v", m)
	}
	if m := s.Module("model.layers.0.self_attn.o_proj"); m.Algo != "FP8" {
		t.Errorf("o_proj: %+v", m)
	}
	if m := s.Module("model.layers.1.mlp.down_proj"); m.Method != "none" {
		t.Errorf("unlisted module under MIXED_PRECISION: %+v, want none", m)
	}
}

func TestParseConfigModelOptConfigGroups(t *testing.T) {
	// The config.json variant of §B.2: group size inside config_groups, exclusions in "ignore".
	b := []byte(`{"quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4", "ignore": ["lm_head"],
	  "config_groups": {"group_0": {"weights": {"dynamic": false, "num_bits": 4, "type": "float", "group_size": 16},
	                                "input_activations": {"num_bits": 4, "group_size": 16}, "targets": ["Linear"]}}}}`)
	s, err := ParseConfig(b)
	if err != nil {
		t.Fatal(err)
	}
	if s.GroupSize != 16 || s.Algo != "NVFP4" || s.Module("lm_head").Method != "none" {
		t.Errorf("parsed %+v", s)
	}
}

func TestParseConfigMLX(t *testing.T) {
	b := []byte(`{"quantization": {"group_size": 64, "bits": 4, "mode": "affine",
	  "model.layers.0.mlp.gate": false, "lm_head": {"group_size": 32, "bits": 8}},
	  "quantization_config": {"group_size": 64, "bits": 4}}`)
	s, err := ParseConfig(b)
	if err != nil {
		t.Fatal(err)
	}
	// quantization_config (mlx-lm's copy, no quant_method) is read as MLX too.
	if s.Method != "mlx" || s.GroupSize != 64 || s.Bits != 4 || s.Mode != "affine" {
		t.Fatalf("parsed %+v", s)
	}
	b2 := []byte(`{"quantization": {"group_size": 64, "bits": 4, "model.layers.0.mlp.gate": false, "lm_head": {"group_size": 32, "bits": 8}}}`)
	s, err = ParseConfig(b2)
	if err != nil {
		t.Fatal(err)
	}
	if m := s.Module("model.layers.0.mlp.gate"); m.Method != "none" {
		t.Errorf("gate: %+v, want none", m)
	}
	if m := s.Module("lm_head"); m.Bits != 8 || m.GroupSize != 32 || m.Mode != "affine" {
		t.Errorf("lm_head: %+v", m)
	}
	if m := s.Module("model.layers.1.mlp.up_proj"); m.Bits != 4 || m.GroupSize != 64 || m.Layers != nil {
		t.Errorf("default module: %+v", m)
	}
}

func TestParseConfigAWQGPTQ(t *testing.T) {
	s, err := ParseConfig([]byte(`{"quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": true, "version": "GEMM"}}`))
	if err != nil || s.Method != "awq" || s.Version != "gemm" || s.NoZeroPoint || s.GroupSize != 128 {
		t.Errorf("awq: %+v, %v", s, err)
	}
	s, err = ParseConfig([]byte(`{"quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": -1, "desc_act": true, "checkpoint_format": "gptq_v2"}}`))
	if err != nil || s.Method != "gptq" || s.Version != "gptq_v2" || !s.DescAct || s.GroupSize != -1 {
		t.Errorf("gptq: %+v, %v", s, err)
	}
	s, err = ParseConfig([]byte(`{"quantization_config": {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized"}}`))
	if err != nil || s.Method != "compressed-tensors" || s.Version != "nvfp4-pack-quantized" {
		t.Errorf("compressed-tensors: %+v, %v", s, err)
	}
	s, err = ParseConfig([]byte(`{"hidden_size": 5120, "quantization_config": null}`))
	if err != nil || s.Method != "" {
		t.Errorf("no quantization: %+v, %v", s, err)
	}
	if _, err := ParseConfig([]byte(`{"quantization_config": [1, 2]}`)); err == nil || !strings.Contains(err.Error(), "quantization_config") {
		t.Errorf("array quantization_config: %v", err)
	}
	if _, err := ParseConfig([]byte(`{`)); err == nil {
		t.Error("accepted truncated JSON")
	}
}
