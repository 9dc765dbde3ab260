package convert

import (
	"strings"
	"testing"
)

func TestParseHFQuantConfigMixed(t *testing.T) {
	q, err := ParseHFQuantConfig([]byte(`{
  "producer": {"name": "modelopt", "version": "0.39.0"},
  "quantization": {
    "quant_algo": "MIXED_PRECISION",
    "kv_cache_quant_algo": "FP8",
    "quantized_layers": {
      "model.language_model.layers.0.linear_attn.in_proj_qkv": {"quant_algo": "FP8"},
      "model.language_model.layers.0.mlp.down_proj": {"quant_algo": "nvfp4", "group_size": 16},
      "language_model.model.layers.1.mlp.up_proj": {"quant_algo": "W4A16_NVFP4", "group_size": 16},
      "lm_head": {"quant_algo": "NVFP4", "group_size": 16}
    },
    "exclude_modules": ["mtp.layers.0*"]
  }
}`))
	if err != nil {
		t.Fatal(err)
	}
	if q.Producer != "modelopt 0.39.0" || q.KVCacheAlgo != "FP8" || q.Method != "modelopt" || len(q.Layers) != 4 {
		t.Fatalf("%+v", q)
	}
	for module, want := range map[string]string{
		"model.language_model.layers.0.linear_attn.in_proj_qkv": "FP8",
		"model.language_model.layers.0.mlp.down_proj":           "NVFP4",
		// The same module under another wrapper prefix (sglang's Qwen3.6 NVFP4 support).
		"model.language_model.layers.1.mlp.up_proj": "W4A16_NVFP4",
		"lm_head": "NVFP4",
		// Unlisted modules of a MIXED_PRECISION config are unquantized.
		"mtp.fc": "",
		"model.language_model.layers.0.mlp.gate_proj": "",
	} {
		if got := q.ModuleAlgo(module); got != want {
			t.Errorf("ModuleAlgo(%s) = %q, want %q", module, got, want)
		}
	}
	if FormatFamily("W4A16_NVFP4") != "NVFP4" || FormatFamily("FP8_PER_CHANNEL_PER_TOKEN") != "FP8" || FormatFamily("") != "" {
		t.Error("FormatFamily")
	}
	if s := q.Summary(); !strings.Contains(s, "MIXED_PRECISION") || !strings.Contains(s, "2 NVFP4") || !strings.Contains(s, "KV FP8") {
		t.Errorf("summary %q", s)
	}
}

func TestParseQuantSingleFormatExcludes(t *testing.T) {
	q, err := ParseHFQuantConfig([]byte(`{"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "NVFP4",
		"group_size": 16, "exclude_modules": ["lm_head", "model.visual*", "*linear_attn.in_proj_a*", "mtp.layers.0*"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	for module, want := range map[string]string{
		"model.language_model.layers.0.mlp.down_proj": "NVFP4",
		"lm_head":                        "",
		"model.visual.blocks.0.attn.qkv": "",
		"model.language_model.layers.0.linear_attn.in_proj_a":   "",
		"model.language_model.layers.0.linear_attn.in_proj_qkv": "NVFP4",
		"mtp.layers.0.mlp.down_proj":                            "",
		// mtp.fc is not excluded: the real Qwen3.5 NVFP4 export's bug
		// (vLLM PR #38832), which the audit's dtype check reports.
		"mtp.fc": "NVFP4",
	} {
		if got := q.ModuleAlgo(module); got != want {
			t.Errorf("ModuleAlgo(%s) = %q, want %q", module, got, want)
		}
	}
	if q.GroupSize != 16 {
		t.Errorf("group size %d", q.GroupSize)
	}
}

func TestParseConfigQuantizationConfig(t *testing.T) {
	// config.json's variant (§B.2): quant_method, ignore, and only
	// config_groups for a MIXED_PRECISION export.
	c, err := ParseConfig([]byte(`{"hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
	  "vocab_size": 32, "quantization_config": {"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION",
	  "ignore": ["lm_head"], "config_groups": {
	    "group_0": {"weights": {"num_bits": 4, "type": "float", "group_size": 16}, "targets": ["model.layers.0.mlp.up_proj"]},
	    "group_1": {"weights": {"num_bits": 8, "type": "float"}, "targets": ["model.layers.0.self_attn.q_proj"]}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	q := c.Quantization
	if q == nil || q.Source != "config.json quantization_config" || q.ModuleAlgo("model.layers.0.mlp.up_proj") != "NVFP4" ||
		q.ModuleAlgo("model.layers.0.self_attn.q_proj") != "FP8" || q.ModuleAlgo("lm_head") != "" {
		t.Fatalf("%+v", q)
	}
}

func TestParseQuantErrors(t *testing.T) {
	for _, tc := range []struct{ json, want string }{
		{`{"producer": {}}`, "quantization: missing"},
		{`{"quantization": {"quant_algo": "MIXED_PRECISION"}}`, "quantized_layers"},
		{`{"quantization": {"quant_algo": "MIXED_PRECISION", "quantized_layers": {"x": {"group_size": 16}}}}`, "quantized_layers.x: quant_algo missing"},
		{`{"quantization": {"quant_algo": "NVFP4", "group_size": -16}}`, "group_size"},
		{`{"quantization": {"exclude_modules": "lm_head"}}`, "exclude_modules"},
		{`{"quantization": []}`, "quantization: must be an object"},
	} {
		_, err := ParseHFQuantConfig([]byte(tc.json))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one naming %q", tc.json, err, tc.want)
		}
	}
}

func TestGlobMatch(t *testing.T) {
	for _, tc := range []struct {
		pat, name string
		want      bool
	}{
		{"model.visual*", "model.visual.blocks.0.attn.qkv", true},
		{"*linear_attn.in_proj_a*", "model.language_model.layers.3.linear_attn.in_proj_a", true},
		{"*linear_attn.in_proj_a*", "model.language_model.layers.3.linear_attn.in_proj_qkv", false},
		{"model.language_model.layers.*.self_attn.*_proj", "model.language_model.layers.7.self_attn.o_proj", true},
		{"model.language_model.layers.*.self_attn.*_proj", "mtp.layers.0.self_attn.o_proj", false},
		{"lm_head", "lm_head", true},
		{"lm_head", "lm_head2", false},
		{"a?c", "abc", true},
		{"", "", true},
		{"*", "", true},
		{"**a**b", "xxaxxbxx", false},
	} {
		if got := globMatch(tc.pat, tc.name); got != tc.want {
			t.Errorf("globMatch(%q, %q) = %v", tc.pat, tc.name, got)
		}
	}
}

func FuzzParseHFQuantConfig(f *testing.F) {
	f.Add([]byte(`{"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "NVFP4", "exclude_modules": ["lm_head", "*visual*"]}}`))
	f.Add([]byte(`{"quantization": {"quant_algo": "MIXED_PRECISION", "quantized_layers": {"lm_head": {"quant_algo": "NVFP4"}}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		q, err := ParseHFQuantConfig(data)
		if err != nil {
			return
		}
		_ = q.ModuleAlgo("model.language_model.layers.0.mlp.down_proj")
		_ = q.Summary()
	})
}

func FuzzGlobMatch(f *testing.F) {
	f.Add("model.visual*", "model.visual.blocks.0")
	f.Add("*a*b*c*", "aabbcc")
	f.Fuzz(func(t *testing.T, pat, name string) {
		if globMatch(pat, name) && !strings.ContainsAny(pat, "*?") && pat != name {
			t.Fatalf("%q matched %q without wildcards", pat, name)
		}
		if globMatch(name, name) != !strings.ContainsAny(name, "*?") && !strings.ContainsAny(name, "*?") {
			t.Fatalf("%q does not match itself", name)
		}
	})
}
