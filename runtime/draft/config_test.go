package draft_test

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"lithos/manifests"
	"lithos/runtime/draft"
	"lithos/runtime/draft/drafttest"
)

func tinyConfig(t testing.TB) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(drafttest.TinyDir(t), "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var c map[string]any
	if err := json.Unmarshal(raw, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

func parse(t *testing.T, c map[string]any) (draft.Config, error) {
	t.Helper()
	raw, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return draft.ParseConfig(raw)
}

func TestParseConfigTiny(t *testing.T) {
	c, err := parse(t, tinyConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	want := draft.Config{Vocab: 1000, Hidden: 128, Intermediate: 384, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 32,
		RopeTheta: 1e7, Rope: draft.RopeScaling{Type: "default"}, RMSEps: 1e-6, BlockSize: 7, MaskToken: 999, TapLayers: []int{1, 3, 5}, TargetHidden: 128,
		NumTargetLayers: 8, MarkovRank: 64, Confidence: true, ConfidenceWithMarkov: true}
	if c.FeatureDim() != 384 || c.ConfidenceDim() != 192 {
		t.Errorf("feature dim %d, confidence dim %d", c.FeatureDim(), c.ConfidenceDim())
	}
	if !slices.Equal(c.TapLayers, want.TapLayers) {
		t.Errorf("taps %v", c.TapLayers)
	}
	c.TapLayers, want.TapLayers = nil, nil
	if !reflect.DeepEqual(c, want) {
		t.Errorf("config\n %+v\nwant\n %+v", c, want)
	}
}

// TestParseConfigForms: the keys may sit at the top level (speculators' aux_hidden_state_layer_ids
// too, in vLLM's capture index: aux j is target layer j−1, 0 the embedding) or under
// dspark_config; rope_theta may come from rope_parameters; defaults apply.
func TestParseConfigForms(t *testing.T) {
	c := tinyConfig(t)
	delete(c, "dflash_config")
	delete(c, "rope_theta")
	delete(c, "head_dim")
	delete(c, "num_key_value_heads")
	delete(c, "target_hidden_size")
	delete(c, "block_size")
	delete(c, "confidence_head_with_markov")
	c["mask_token_id"] = 5
	c["aux_hidden_state_layer_ids"] = []int{0, 3}
	c["dspark_config"] = map[string]any{"mask_token_id": 7}
	c["rope_parameters"] = map[string]any{"rope_type": "default", "rope_theta": 1e6}
	got, err := parse(t, c)
	if err != nil {
		t.Fatal(err)
	}
	if got.MaskToken != 7 || !slices.Equal(got.TapLayers, []int{-1, 2}) || got.RopeTheta != 1e6 || got.HeadDim != 32 ||
		got.KVHeads != 4 || got.TargetHidden != 128 || got.BlockSize != 7 || got.ConfidenceWithMarkov || got.ConfidenceDim() != 128 {
		t.Errorf("%+v", got)
	}
	// Both keys, naming the same layers: accepted.
	c["target_layer_ids"] = []int{-1, 2}
	if got, err := parse(t, c); err != nil || !slices.Equal(got.TapLayers, []int{-1, 2}) {
		t.Errorf("target_layer_ids [-1 2] with aux [0 3]: %v, %v", got.TapLayers, err)
	}
	// num_target_layers under dspark_config.
	c["dspark_config"] = map[string]any{"mask_token_id": 7, "num_target_layers": 3}
	if got, err := parse(t, c); err != nil || got.NumTargetLayers != 3 {
		t.Errorf("dspark_config.num_target_layers 3: %d, %v", got.NumTargetLayers, err)
	}
}

func TestParseConfigRefuses(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(c map[string]any)
		want string
	}{
		{"dflash", func(c map[string]any) { c["architectures"] = []string{"DFlashDraftModel"} }, `architectures ["DFlashDraftModel"]`},
		{"no mask", func(c map[string]any) { delete(c["dflash_config"].(map[string]any), "mask_token_id") }, "dflash_config.mask_token_id: missing"},
		{"no taps", func(c map[string]any) { delete(c["dflash_config"].(map[string]any), "target_layer_ids") }, "target_layer_ids: missing"},
		{"bad tap", func(c map[string]any) { c["dflash_config"].(map[string]any)["target_layer_ids"] = []any{1, 2.5} }, "dflash_config.target_layer_ids[1]"},
		{"tap list", func(c map[string]any) { c["dflash_config"].(map[string]any)["target_layer_ids"] = "1,2" }, "dflash_config.target_layer_ids: want a list"},
		{"mask range", func(c map[string]any) { c["dflash_config"].(map[string]any)["mask_token_id"] = 1000 }, "mask_token_id 1000 is outside the vocabulary [0, 1000)"},
		{"heads", func(c map[string]any) { c["num_key_value_heads"] = 3 }, "num_attention_heads 4 is not a multiple of num_key_value_heads 3"},
		{"hidden", func(c map[string]any) { c["hidden_size"] = -1 }, "hidden_size: want a non-negative integer"},
		{"zero", func(c map[string]any) { c["intermediate_size"] = 0 }, "intermediate_size must be positive"},
		{"block", func(c map[string]any) { c["block_size"] = 65 }, "block_size 65 exceeds 64"},
		{"theta", func(c map[string]any) { delete(c, "rope_theta") }, "rope_theta: missing"},
		{"llama3", func(c map[string]any) { c["rope_scaling"] = map[string]any{"type": "llama3", "factor": 8.0} }, `rope_scaling.rope_type "llama3"`},
		{"dynamic", func(c map[string]any) {
			c["rope_parameters"] = map[string]any{"rope_type": "dynamic", "factor": 2.0}
		}, `rope_parameters.rope_type "dynamic"`},
		{"partial", func(c map[string]any) {
			c["rope_parameters"] = map[string]any{"rope_type": "default", "partial_rotary_factor": 0.5}
		}, "rope_parameters.partial_rotary_factor 0.5"},
		{"partial top", func(c map[string]any) { c["partial_rotary_factor"] = 0.25 }, "partial_rotary_factor 0.25"},
		{"rope object", func(c map[string]any) { c["rope_scaling"] = "yarn" }, "rope_scaling: want an object"},
		{"per layer type", func(c map[string]any) {
			c["rope_parameters"] = map[string]any{"full_attention": map[string]any{"rope_type": "yarn", "factor": 4.0}}
		}, "rope_parameters.full_attention: per-layer-type RoPE parameters"},
		{"yarn factor", func(c map[string]any) { c["rope_scaling"] = yarn(nil, "factor") }, "rope_scaling.factor: missing (yarn RoPE)"},
		{"yarn factor < 1", func(c map[string]any) { c["rope_scaling"] = yarn(map[string]any{"factor": 0.5}) }, "rope_scaling.factor 0.5"},
		{"linear factor", func(c map[string]any) { c["rope_scaling"] = map[string]any{"rope_type": "linear"} }, "rope_scaling.factor: missing (linear RoPE)"},
		{"yarn beta", func(c map[string]any) { c["rope_scaling"] = yarn(map[string]any{"beta_fast": -1}) }, "rope_scaling.beta_fast -1"},
		{"yarn beta order", func(c map[string]any) { c["rope_scaling"] = yarn(map[string]any{"beta_fast": 1, "beta_slow": 4}) }, "rope_scaling.beta_fast 1 is below beta_slow 4"},
		{"yarn attention", func(c map[string]any) { c["rope_scaling"] = yarn(map[string]any{"attention_factor": 0}) }, "rope_scaling.attention_factor 0"},
		{"yarn truncate", func(c map[string]any) { c["rope_scaling"] = yarn(map[string]any{"truncate": "no"}) }, "rope_scaling.truncate: want true or false"},
		{"yarn orig", func(c map[string]any) {
			c["rope_scaling"] = yarn(map[string]any{"original_max_position_embeddings": 10.5})
		}, "rope_scaling.original_max_position_embeddings: want a non-negative integer"},
		{"yarn orig zero", func(c map[string]any) {
			c["rope_scaling"] = yarn(map[string]any{"original_max_position_embeddings": 0})
		}, "rope_scaling.original_max_position_embeddings 0 must be positive"},
		{"yarn no length", func(c map[string]any) {
			c["rope_scaling"] = yarn(nil, "original_max_position_embeddings")
			delete(c, "max_position_embeddings")
		}, "rope_scaling.original_max_position_embeddings: missing, and no max_position_embeddings"},
		{"yarn orig twice", func(c map[string]any) {
			c["rope_scaling"] = yarn(nil)
			c["original_max_position_embeddings"] = 2048
		}, "rope_scaling.original_max_position_embeddings 1024 and original_max_position_embeddings 2048 disagree"},
		{"theta twice", func(c map[string]any) { c["rope_parameters"] = map[string]any{"rope_theta": 1e6} }, "rope_parameters.rope_theta 1e+06 and rope_theta 1e+07 disagree"},
		{"two scalings", func(c map[string]any) {
			c["rope_scaling"] = yarn(nil)
			c["rope_parameters"] = map[string]any{"rope_type": "linear", "factor": 4.0}
		}, "rope_scaling (yarn RoPE) and rope_parameters (linear RoPE) describe different scalings"},
		{"yarn theta", func(c map[string]any) {
			c["rope_theta"] = 1.0
			c["rope_scaling"] = yarn(nil)
		}, "yarn RoPE needs rope_theta > 1"},
		{"act", func(c map[string]any) { c["hidden_act"] = "gelu" }, `hidden_act "gelu"`},
		{"markov", func(c map[string]any) { c["markov_head_type"] = "rnn" }, `markov_head_type "rnn"`},
		{"bias", func(c map[string]any) { c["attention_bias"] = true }, "attention_bias true"},
		{"causal", func(c map[string]any) { c["is_causal"] = true }, "is_causal true"},
		{"sliding", func(c map[string]any) { c["layer_types"] = []string{"full_attention", "sliding_attention"} }, `layer_types[1] "sliding_attention"`},
		{"anchor", func(c map[string]any) { c["sample_from_anchor"] = false }, "sample_from_anchor false"},
		{"conf without markov", func(c map[string]any) { c["markov_rank"] = 0 }, "confidence_head_with_markov needs a Markov head"},
		{"bool", func(c map[string]any) { c["enable_confidence_head"] = "yes" }, "enable_confidence_head: want true or false"},
		{"eps", func(c map[string]any) { c["rms_norm_eps"] = 0 }, "rms_norm_eps must be in (0, 1]"},
		{"layers", func(c map[string]any) { c["num_hidden_layers"] = 257 }, "num_hidden_layers 257 exceeds 256"},
		{"tap past the target depth", func(c map[string]any) { c["num_target_layers"] = 5 }, "target_layer_ids: 5 is not a layer of a num_target_layers 5 target (−1 … 4)"},
		{"aux negative", func(c map[string]any) {
			delete(c["dflash_config"].(map[string]any), "target_layer_ids")
			c["aux_hidden_state_layer_ids"] = []int{-1, 2}
		}, "aux_hidden_state_layer_ids[0] -1: aux ids count vLLM's captured hidden states"},
		{"aux disagrees", func(c map[string]any) { c["aux_hidden_state_layer_ids"] = []int{1, 3, 5} }, "dflash_config.target_layer_ids [1 3 5] and aux_hidden_state_layer_ids [1 3 5] (target layers [0 2 4]) disagree"},
		{"yarn factor vs lengths", func(c map[string]any) {
			c["max_position_embeddings"] = 131072
			c["rope_scaling"] = yarn(map[string]any{"factor": 32.0, "original_max_position_embeddings": 8192})
		}, "rope_scaling.factor 32 ≠ max_position_embeddings 131072 / rope_scaling.original_max_position_embeddings 8192 = 16"},
		{"yarn factor vs top-level length", func(c map[string]any) {
			c["rope_scaling"] = yarn(nil, "original_max_position_embeddings")
			c["original_max_position_embeddings"] = 2048
		}, "rope_scaling.factor 4 ≠ max_position_embeddings 4096 / original_max_position_embeddings 2048 = 2"},
	} {
		cfg := tinyConfig(t)
		c.edit(cfg)
		_, err := parse(t, cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
	for _, raw := range []string{"", "null", "[]", `{"architectures": "DSparkDraftModel"}`, `{"dflash_config": 3, "architectures": ["DSparkDraftModel"]}`} {
		if _, err := draft.ParseConfig([]byte(raw)); err == nil {
			t.Errorf("%q accepted", raw)
		}
	}
}

// yarn returns a YaRN rope_scaling object (factor 4 over 1024 positions) with set's values and
// without the keys in drop.
func yarn(set map[string]any, drop ...string) map[string]any {
	o := map[string]any{"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024}
	for k, v := range set {
		o[k] = v
	}
	for _, k := range drop {
		delete(o, k)
	}
	return o
}

// TestParseConfigRope: the RoPE forms transformers 4 and 5 write, with their defaults.
func TestParseConfigRope(t *testing.T) {
	want := draft.RopeScaling{Type: "yarn", Factor: 4, OriginalMaxPos: 1024, BetaFast: 32, BetaSlow: 1}
	for _, c := range []struct {
		name string
		edit func(c map[string]any)
		want draft.RopeScaling
	}{
		{"rope_scaling", func(c map[string]any) { c["rope_scaling"] = yarn(nil) }, want},
		{"legacy type key", func(c map[string]any) { c["rope_scaling"] = yarn(map[string]any{"type": "yarn"}, "rope_type") }, want},
		{"rope_parameters", func(c map[string]any) {
			delete(c, "rope_theta")
			c["rope_parameters"] = yarn(map[string]any{"rope_theta": 1e7})
		}, want},
		{"both, equal", func(c map[string]any) {
			c["rope_scaling"] = yarn(nil)
			c["rope_parameters"] = yarn(map[string]any{"rope_theta": 1e7, "beta_fast": 32})
		}, want},
		{"empty rope_scaling", func(c map[string]any) {
			c["rope_scaling"] = map[string]any{}
			c["rope_parameters"] = yarn(nil)
		}, want},
		{"length from max_position_embeddings", func(c map[string]any) {
			c["rope_scaling"] = yarn(nil, "original_max_position_embeddings")
			c["max_position_embeddings"] = 1024
		}, want},
		{"length at the top level", func(c map[string]any) {
			c["rope_scaling"] = yarn(nil, "original_max_position_embeddings")
			c["original_max_position_embeddings"] = 1024
		}, want},
		{"zero betas are the defaults", func(c map[string]any) { c["rope_scaling"] = yarn(map[string]any{"beta_fast": 0, "beta_slow": nil}) }, want},
		{"every yarn key", func(c map[string]any) {
			c["rope_scaling"] = yarn(map[string]any{"beta_fast": 16, "beta_slow": 2, "attention_factor": 1.25, "mscale": 0.707, "mscale_all_dim": 1.0, "truncate": false})
		}, draft.RopeScaling{Type: "yarn", Factor: 4, OriginalMaxPos: 1024, BetaFast: 16, BetaSlow: 2, AttentionFactor: 1.25, Mscale: 0.707, MscaleAllDim: 1, NoTruncate: true}},
		{"linear", func(c map[string]any) { c["rope_scaling"] = map[string]any{"rope_type": "linear", "factor": 2} }, draft.RopeScaling{Type: "linear", Factor: 2}},
		{"default object", func(c map[string]any) { c["rope_parameters"] = map[string]any{"rope_type": "default"} }, draft.RopeScaling{Type: "default"}},
	} {
		cfg := tinyConfig(t)
		c.edit(cfg)
		got, err := parse(t, cfg)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if got.Rope != c.want || got.RopeTheta != 1e7 {
			t.Errorf("%s: θ %v, %+v; want %+v", c.name, got.RopeTheta, got.Rope, c.want)
		}
	}
}

// TestParseConfig27B: the config of the published 27B head as the repository's header-only
// models of it carry it (manifests/models/dspark-qwen3.8-27b-{bf16,nvfp4}.json, from
// qwen35-and-quant.md §D.4 and lithos-metal.md §5.3) parses to the geometry lithos-metal.md §5.3
// records: 5 layers, hidden 5120, intermediate 17408, 32 q / 8 kv heads × 128, vocab 248320,
// taps [5, 19, 33, 47, 61], mask 248070, block 7, Markov rank 256, fc [5120, 25600], confidence
// proj [1, 5376], and YaRN θ 1e7, factor 32 over 8192 positions, β 32/1.
func TestParseConfig27B(t *testing.T) {
	want := draft.Config{Vocab: 248320, Hidden: 5120, Intermediate: 17408, Layers: 5, Heads: 32, KVHeads: 8, HeadDim: 128,
		RopeTheta: 1e7, Rope: draft.RopeScaling{Type: "yarn", Factor: 32, OriginalMaxPos: 8192, BetaFast: 32, BetaSlow: 1},
		RMSEps: 1e-6, BlockSize: 7, MaskToken: 248070, TargetHidden: 5120, NumTargetLayers: 64, MarkovRank: 256, Confidence: true, ConfidenceWithMarkov: true}
	for _, name := range []string{"dspark-qwen3.8-27b-bf16", "dspark-qwen3.8-27b-nvfp4"} {
		spec, err := manifests.ModelSpec(name)
		if err != nil {
			t.Fatal(err)
		}
		var s struct {
			Repo   string          `json:"repo"`
			Config json.RawMessage `json:"config"`
		}
		if err := json.Unmarshal(spec, &s); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		c, err := draft.ParseConfig(s.Config)
		if err != nil {
			t.Fatalf("%s (%s): %v", name, s.Repo, err)
		}
		if !slices.Equal(c.TapLayers, []int{5, 19, 33, 47, 61}) {
			t.Errorf("%s: taps %v", name, c.TapLayers)
		}
		if c.FeatureDim() != 25600 || c.ConfidenceDim() != 5376 {
			t.Errorf("%s: fc input %d (want 25600), confidence input %d (want 5376)", name, c.FeatureDim(), c.ConfidenceDim())
		}
		c.TapLayers = nil
		if !reflect.DeepEqual(c, want) {
			t.Errorf("%s:\n %+v\nwant\n %+v", name, c, want)
		}
		// The same head written the transformers 5 way (rope_parameters) reads the same.
		var m map[string]any
		if err := json.Unmarshal(s.Config, &m); err != nil {
			t.Fatal(err)
		}
		rp := m["rope_scaling"].(map[string]any)
		rp["rope_theta"] = m["rope_theta"]
		delete(m, "rope_scaling")
		delete(m, "rope_theta")
		m["rope_parameters"] = rp
		c5, err := parse(t, m)
		if err != nil {
			t.Fatalf("%s in the rope_parameters form: %v", name, err)
		}
		if c5.RopeTheta != want.RopeTheta || c5.Rope != want.Rope {
			t.Errorf("%s in the rope_parameters form: θ %v, %+v", name, c5.RopeTheta, c5.Rope)
		}
	}
}

// FuzzParseConfig: any bytes give a config that passes Validate or an error, never a panic.
func FuzzParseConfig(f *testing.F) {
	raw, err := os.ReadFile(filepath.Join(drafttest.TinyDir(f), "config.json"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(raw)
	f.Add([]byte(`{"architectures":["DSparkDraftModel"],"vocab_size":8,"hidden_size":4,"intermediate_size":4,"num_hidden_layers":1,"num_attention_heads":2,"rope_parameters":{"rope_theta":10},"dspark_config":{"mask_token_id":1,"target_layer_ids":[0]}}`))
	f.Add([]byte(`{"architectures":["DSparkDraftModel"],"vocab_size":8,"hidden_size":4,"intermediate_size":4,"num_hidden_layers":1,"num_attention_heads":2,"max_position_embeddings":64,"rope_parameters":{"rope_theta":10,"rope_type":"yarn","factor":4,"truncate":false,"mscale":1,"mscale_all_dim":0.5},"dspark_config":{"mask_token_id":1,"target_layer_ids":[0]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := draft.ParseConfig(data)
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("ParseConfig accepted a config Validate refuses: %v", err)
		}
		if c.FeatureDim() <= 0 || c.ConfidenceDim() <= 0 {
			t.Fatalf("dims %d, %d", c.FeatureDim(), c.ConfidenceDim())
		}
		if c.HeadDim <= 4096 { // the frequencies of an accepted config are finite and positive
			r := draft.NewRope(&c)
			for i, f := range r.InvFreq {
				if !(f >= 0) || math.IsInf(float64(f), 0) {
					t.Fatalf("inv_freq[%d] = %v for %+v", i, f, c.Rope)
				}
			}
			if !(r.Scale > 0) || math.IsInf(float64(r.Scale), 0) {
				t.Fatalf("scale %v for %+v", r.Scale, c.Rope)
			}
		}
	})
}
