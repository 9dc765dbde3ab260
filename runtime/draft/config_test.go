package draft_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

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
		RopeTheta: 1e7, RMSEps: 1e-6, BlockSize: 7, MaskToken: 999, TapLayers: []int{1, 3, 5}, TargetHidden: 128,
		MarkovRank: 64, Confidence: true, ConfidenceWithMarkov: true}
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
// too) or under dspark_config; rope_theta may come from rope_parameters; defaults apply.
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
	c["aux_hidden_state_layer_ids"] = []int{-1, 2}
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
		{"yarn", func(c map[string]any) { c["rope_scaling"] = map[string]any{"type": "yarn", "factor": 32.0} }, `rope_scaling: rope type "yarn"`},
		{"partial", func(c map[string]any) {
			c["rope_parameters"] = map[string]any{"rope_type": "default", "partial_rotary_factor": 0.5}
		}, "rope_parameters.partial_rotary_factor 0.5"},
		{"act", func(c map[string]any) { c["hidden_act"] = "gelu" }, `hidden_act "gelu"`},
		{"markov", func(c map[string]any) { c["markov_head_type"] = "rnn" }, `markov_head_type "rnn"`},
		{"bias", func(c map[string]any) { c["attention_bias"] = true }, "attention_bias true"},
		{"causal", func(c map[string]any) { c["is_causal"] = true }, "is_causal true"},
		{"sliding", func(c map[string]any) { c["layer_types"] = []string{"full_attention", "sliding_attention"} }, `layer_types[1] "sliding_attention"`},
		{"anchor", func(c map[string]any) { c["sample_from_anchor"] = false }, "sample_from_anchor false"},
		{"conf without markov", func(c map[string]any) { c["markov_rank"] = 0 }, "confidence_head_with_markov needs a Markov head"},
		{"bool", func(c map[string]any) { c["enable_confidence_head"] = "yes" }, "enable_confidence_head: want true or false"},
		{"eps", func(c map[string]any) { c["rms_norm_eps"] = 0 }, "rms_norm_eps must be in (0, 1]"},
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

// FuzzParseConfig: any bytes give a config that passes Validate or an error, never a panic.
func FuzzParseConfig(f *testing.F) {
	raw, err := os.ReadFile(filepath.Join(drafttest.TinyDir(f), "config.json"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(raw)
	f.Add([]byte(`{"architectures":["DSparkDraftModel"],"vocab_size":8,"hidden_size":4,"intermediate_size":4,"num_hidden_layers":1,"num_attention_heads":2,"rope_parameters":{"rope_theta":10},"dspark_config":{"mask_token_id":1,"target_layer_ids":[0]}}`))
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
	})
}
