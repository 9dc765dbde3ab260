package convert

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"lithos/manifests"
)

func specConfig(t testing.TB, name string) []byte {
	t.Helper()
	raw, err := manifests.ModelSpec(name)
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		Config json.RawMessage `json:"config"`
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatal(err)
	}
	return s.Config
}

func TestParseConfig27B(t *testing.T) {
	c, err := ParseConfig(specConfig(t, spec27B))
	if err != nil {
		t.Fatal(err)
	}
	tc := c.Text
	if c.Architecture() != "Qwen3_5ForConditionalGeneration" || tc.HiddenSize != 5120 || tc.IntermediateSize != 17408 ||
		tc.NumHiddenLayers != 64 || tc.NumAttentionHeads != 24 || tc.NumKeyValueHeads != 4 || tc.HeadDim != 256 ||
		tc.VocabSize != 248320 || tc.LinearNumKeyHeads != 16 || tc.LinearNumValueHeads != 48 || !tc.AttnOutputGate ||
		tc.MTPNumHiddenLayers != 1 || tc.TieWordEmbeddings {
		t.Fatalf("text config %+v", tc)
	}
	// full_attention_interval 4: layers 3, 7, …, 63 are full attention
	// (qwen35-and-quant.md §A.1).
	var full []int
	for i, k := range tc.LayerTypes {
		if k == FullAttention {
			full = append(full, i)
		}
	}
	if len(full) != 16 || full[0] != 3 || full[15] != 63 || tc.CountLayers(LinearAttention) != 48 {
		t.Errorf("full-attention layers %v", full)
	}
	if c.Vision == nil || c.Vision.Depth != 27 || c.Vision.OutHiddenSize != 5120 || c.IsDraft() || !c.IsHybrid() {
		t.Errorf("vision %+v draft %v", c.Vision, c.IsDraft())
	}
	if c.TextPrefix() != "model.language_model." {
		t.Errorf("prefix %q", c.TextPrefix())
	}
}

func TestParseConfigLayerTypesAndTopLevel(t *testing.T) {
	// A text-only export: keys at the top level, explicit layer_types.
	c, err := ParseConfig([]byte(`{"architectures": ["Qwen3_5ForCausalLM"], "model_type": "qwen3_5_text", "hidden_size": 8,
		"intermediate_size": 16, "num_hidden_layers": 3, "num_attention_heads": 2, "vocab_size": 32,
		"layer_types": ["linear_attention", "full_attention", "linear_attention"], "tie_word_embeddings": true}`))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Text.LayerTypes, []string{LinearAttention, FullAttention, LinearAttention}) || c.Text.HeadDim != 4 ||
		c.Text.NumKeyValueHeads != 2 || !c.Text.TieWordEmbeddings || c.TextPrefix() != "model." {
		t.Errorf("%+v", c.Text)
	}
	// A non-hybrid model type without layer_types is all full attention.
	c, err = ParseConfig([]byte(`{"model_type": "qwen3", "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 2,
		"num_attention_heads": 2, "vocab_size": 32}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.IsHybrid() || c.Text.AttnOutputGate {
		t.Errorf("plain model parsed as hybrid: %+v", c.Text)
	}
}

func TestParseDraftConfig(t *testing.T) {
	c, err := ParseConfig(specConfig(t, specHeadNVFP4))
	if err != nil {
		t.Fatal(err)
	}
	d := c.Draft
	if d == nil || d.Kind != "dspark" || d.BlockSize != 7 || d.MarkovRank != 256 || d.MaskTokenID != 248070 ||
		!slices.Equal(d.TargetLayerIDs, []int{5, 19, 33, 47, 61}) || d.TargetHiddenSize != 5120 || !d.ConfidenceHeadWithMarkov {
		t.Fatalf("draft %+v", d)
	}
	if c.Lithos == nil || !c.Lithos.WeightOnly || !slices.Equal(c.Lithos.Keep, []string{"markov_w1"}) {
		t.Errorf("lithos_quantization %+v", c.Lithos)
	}
	if c.IsHybrid() || c.Text.AttnOutputGate || c.Text.CountLayers(FullAttention) != 5 {
		t.Errorf("draft layers %+v", c.Text)
	}
	// DSpark fields nested under dspark_config win over the top level.
	c, err = ParseConfig([]byte(`{"architectures": ["DFlashDraftModel"], "hidden_size": 8, "intermediate_size": 16,
		"num_hidden_layers": 1, "num_attention_heads": 2, "vocab_size": 32, "block_size": 16,
		"dspark_config": {"block_size": 7, "target_layer_ids": [1, 2], "markov_rank": 4}}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Draft.BlockSize != 7 || c.Draft.Kind != "dspark" || c.Draft.MarkovHeadType != "vanilla" || len(c.Draft.TargetLayerIDs) != 2 {
		t.Errorf("nested draft %+v", c.Draft)
	}
	// speculators' aux_hidden_state_layer_ids count vLLM's captured states: aux j is target
	// layer j−1 (0 the embedding output); with target_layer_ids too they must agree.
	for _, extra := range []string{``, `, "target_layer_ids": [-1, 1, 4]`} {
		c, err = ParseConfig([]byte(`{"architectures": ["DSparkDraftModel"], "hidden_size": 8, "intermediate_size": 16,
		"num_hidden_layers": 1, "num_attention_heads": 2, "vocab_size": 32, "markov_rank": 4,
		"aux_hidden_state_layer_ids": [0, 2, 5]` + extra + `}`))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(c.Draft.TargetLayerIDs, []int{-1, 1, 4}) {
			t.Errorf("aux ids [0 2 5]%s: target layers %v, want [-1 1 4]", extra, c.Draft.TargetLayerIDs)
		}
	}
}

func TestParseConfigErrors(t *testing.T) {
	base := `"intermediate_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2, "vocab_size": 32`
	for _, tc := range []struct {
		json string
		want []string
	}{
		{`[1, 2]`, []string{"not a JSON object"}},
		{`null`, []string{"not a JSON object"}},
		{`{"text_config": {` + base + `}}`, []string{"text_config.hidden_size", "missing"}},
		{`{"hidden_size": 0, ` + base + `}`, []string{"hidden_size", "positive integer, got 0"}},
		{`{"hidden_size": 8.5, ` + base + `}`, []string{"hidden_size", "integer"}},
		{`{"hidden_size": "8", ` + base + `}`, []string{"hidden_size", "number"}},
		{`{"text_config": 3}`, []string{"text_config", "object"}},
		{`{"hidden_size": 8, ` + base + `, "layer_types": ["full_attention"]}`, []string{"layer_types", "1 entries", "num_hidden_layers is 2"}},
		{`{"hidden_size": 8, ` + base + `, "layer_types": ["full_attention", "mamba"]}`, []string{"layer_types[1]", `"mamba"`}},
		{`{"hidden_size": 8, ` + base + `, "full_attention_interval": 0}`, []string{"full_attention_interval", "positive"}},
		{`{"hidden_size": 8, ` + base + `, "vision_config": {"depth": -1}}`, []string{"vision_config.depth"}},
		{`{"hidden_size": 8, ` + base + `, "architectures": ["DSparkDraftModel"], "block_size": 0}`, []string{"block_size"}},
		{`{"hidden_size": 8, ` + base + `, "lithos_quantization": {"format": "int4"}}`, []string{"lithos_quantization.format", "int4"}},
		{`{"hidden_size": 8, ` + base + `} {}`, []string{"trailing"}},
		{`{"hidden_size": 8, ` + base + `, "architectures": ["DSparkDraftModel"], "aux_hidden_state_layer_ids": [-1, 2]}`,
			[]string{"aux_hidden_state_layer_ids[0]", "want ≥ 0"}},
		{`{"hidden_size": 8, ` + base + `, "architectures": ["DSparkDraftModel"], "aux_hidden_state_layer_ids": [1, 2], "target_layer_ids": [1, 2]}`,
			[]string{"target_layer_ids [1 2] and aux_hidden_state_layer_ids [1 2] (target layers [0 1]) disagree"}},
	} {
		_, err := ParseConfig([]byte(tc.json))
		if err == nil {
			t.Errorf("%s: accepted", tc.json)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q lacks %q", tc.json, err, w)
			}
		}
	}
}

func FuzzParseConfig(f *testing.F) {
	f.Add(specConfig(f, spec27B))
	f.Add(specConfig(f, specHeadNVFP4))
	f.Add([]byte(`{"hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2, "vocab_size": 32}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig(data)
		if err != nil {
			return
		}
		if len(c.Text.LayerTypes) != c.Text.NumHiddenLayers || c.Text.HiddenSize <= 0 || c.Text.HeadDim <= 0 {
			t.Fatalf("accepted an inconsistent config: %+v", c.Text)
		}
		// The derived inventory must not panic, whatever was accepted.
		if c.Text.NumHiddenLayers < 64 && (c.Vision == nil || c.Vision.Depth < 64) {
			_, _ = Inventory(c)
		}
	})
}
