package model

import (
	"strings"
	"testing"
)

// transformersConfig has the shape of Qwen3_5Config.to_dict() for a multimodal checkpoint
// (keys as transformers 5 writes them; values of the goldens' model b).
const transformersConfig = `{
 "architectures": ["Qwen3_5ForConditionalGeneration"],
 "image_token_id": 604, "model_type": "qwen3_5", "tie_word_embeddings": false,
 "text_config": {
  "attention_bias": false, "attention_dropout": 0.0, "bos_token_id": null, "dtype": "float32",
  "eos_token_id": null, "full_attention_interval": 2, "head_dim": 64, "hidden_act": "silu",
  "hidden_size": 256, "initializer_range": 0.02, "intermediate_size": 256,
  "layer_types": ["linear_attention", "full_attention", "linear_attention", "full_attention"],
  "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_num_key_heads": 1,
  "linear_num_value_heads": 4, "linear_value_head_dim": 64, "max_position_embeddings": 4096,
  "model_type": "qwen3_5_text", "num_attention_heads": 4, "num_hidden_layers": 4,
  "num_key_value_heads": 1, "pad_token_id": null, "partial_rotary_factor": 0.25,
  "rms_norm_eps": 1e-05,
  "rope_parameters": {"mrope_interleaved": true, "mrope_section": [4, 2, 2], "partial_rotary_factor": 0.25,
   "rope_theta": 1000000.0, "rope_type": "default"},
  "tie_word_embeddings": false, "use_cache": true, "vocab_size": 608
 },
 "transformers_version": "5.17.0",
 "vision_config": {"depth": 1, "hidden_size": 64, "model_type": "qwen3_5_vision", "out_hidden_size": 256}
}`

func TestParseConfigTransformers(t *testing.T) {
	c, err := ParseConfig([]byte(transformersConfig))
	if err != nil {
		t.Fatal(err)
	}
	want := Config{Vocab: 608, Hidden: 256, Intermediate: 256,
		Layers: []LayerKind{GDN, Attention, GDN, Attention}, Heads: 4, KVHeads: 1, HeadDim: 64,
		RotaryDim: 16, RopeTheta: 1e6, KHeads: 1, VHeads: 4, KDim: 128, VDim: 64, ConvKernel: 4, RMSEps: 1e-5}
	if c.Vocab != want.Vocab || c.Hidden != want.Hidden || c.Intermediate != want.Intermediate ||
		len(c.Layers) != 4 || c.Layers[1] != Attention || c.Layers[2] != GDN || c.Heads != want.Heads ||
		c.KVHeads != want.KVHeads || c.HeadDim != want.HeadDim || c.RotaryDim != want.RotaryDim ||
		c.RopeTheta != want.RopeTheta || c.KHeads != want.KHeads || c.VHeads != want.VHeads ||
		c.KDim != want.KDim || c.VDim != want.VDim || c.ConvKernel != want.ConvKernel || c.RMSEps != want.RMSEps ||
		c.TieEmbeddings {
		t.Fatalf("parsed %+v, want %+v", c, want)
	}
	if c.ConvDim() != 2*128+4*64 {
		t.Fatalf("conv dim %d", c.ConvDim())
	}
	// A legacy rope_scaling of the default type next to rope_parameters is accepted.
	legacy := strings.Replace(transformersConfig, `"rms_norm_eps": 1e-05,`, `"rms_norm_eps": 1e-05, "rope_scaling": {"rope_type": "default", "rope_theta": 1000000.0},`, 1)
	if _, err := ParseConfig([]byte(legacy)); err != nil {
		t.Fatalf("rope_scaling of type default: %v", err)
	}
}

func TestParseConfigErrors(t *testing.T) {
	for _, c := range []struct {
		from, to, expect string
	}{
		{`"vocab_size": 608`, `"vocab_size": 0`, "text_config.vocab_size: missing"},
		{`"vocab_size": 608`, `"vocab_size": 1.5`, "non-negative integer"},
		{`"hidden_act": "silu"`, `"hidden_act": "gelu"`, "hidden_act"},
		{`"rope_type": "default"`, `"rope_type": "yarn"`, `rope_type "yarn"`},
		{`"num_hidden_layers": 4`, `"num_hidden_layers": 5`, "layer_types has 4 entries"},
		{`"layer_types": ["linear_attention"`, `"layer_types": ["sliding_attention"`, `"sliding_attention" is not supported`},
		{`"num_key_value_heads": 1`, `"num_key_value_heads": 3`, "not a multiple of num_key_value_heads 3"},
		{`"linear_num_key_heads": 1`, `"linear_num_key_heads": 3`, "linear_num_value_heads 4 is not a multiple"},
		{`"rms_norm_eps": 1e-05`, `"rms_norm_eps": -1`, "rms_norm_eps must be positive"},
		{`"partial_rotary_factor": 0.25,
   "rope_theta"`, `"partial_rotary_factor": 3,
   "rope_theta"`, "partial_rotary_factor must be in (0, 1]"},
		{`"use_cache": true`, `"attn_output_gate": false`, "attn_output_gate false"},
		{`"hidden_size": 256`, `"hidden_size": "256"`, "want a number"},
	} {
		js := strings.Replace(transformersConfig, c.from, c.to, 1)
		if js == transformersConfig {
			t.Fatalf("case %q: replacement did not apply", c.expect)
		}
		_, err := ParseConfig([]byte(js))
		if err == nil || !strings.Contains(err.Error(), c.expect) {
			t.Errorf("%s → %s: error %v, want one containing %q", c.from, c.to, err, c.expect)
		}
	}
	if _, err := ParseConfig([]byte(`[1, 2]`)); err == nil {
		t.Error("a JSON array: no error")
	}
}

// FuzzParseConfig: arbitrary bytes never panic, and an accepted config validates and has
// sane derived sizes.
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(transformersConfig))
	f.Add([]byte(`{"vocab_size": 10, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2}`))
	f.Add([]byte(`{"text_config": null, "vocab_size": 1, "hidden_size": 1, "intermediate_size": 1, "num_hidden_layers": 1, "num_attention_heads": 1, "full_attention_interval": 1, "head_dim": 2}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig(data)
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("accepted config fails Validate: %v", err)
		}
		if len(c.Layers) == 0 || c.RotaryDim > c.HeadDim || c.ConvDim() < 0 {
			t.Fatalf("accepted config %+v", c)
		}
	})
}
