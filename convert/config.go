package convert

import (
	"fmt"
	"slices"
	"strings"
)

// Layer types of a hybrid stack, as Qwen3.5 configs spell them in
// "layer_types" (qwen35-and-quant.md §A.1).
const (
	LinearAttention = "linear_attention" // Gated DeltaNet mixer
	FullAttention   = "full_attention"   // gated softmax attention with a KV cache
)

// Config is the part of a checkpoint's config.json the audit and the
// header synthesizer need. Field names follow the Hugging Face keys; sizes
// are element counts.
type Config struct {
	Architectures []string // "architectures", e.g. ["Qwen3_5ForConditionalGeneration"]
	ModelType     string   // top-level "model_type"
	// DType is the checkpoint's default storage dtype as config.json says it
	// ("dtype", else "torch_dtype"; "bfloat16" when absent).
	DType string
	// Text holds the language model: config["text_config"] when present
	// (multimodal Qwen3.5 checkpoints), else the top level.
	Text TextConfig
	// Vision is config["vision_config"], nil when absent.
	Vision *VisionConfig
	// Draft is set for DSpark/DFlash draft heads (see IsDraft), nil otherwise.
	Draft *DraftConfig
	// Quantization is config["quantization_config"] normalized, nil when absent.
	Quantization *QuantConfig
	// Lithos is config["lithos_quantization"] (lithos-metal's NVFP4 export of
	// draft heads, lithos-metal.md §5.3), nil when absent.
	Lithos *LithosQuant
}

// TextConfig is the decoder stack. Shapes derived from it are in
// qwen35-and-quant.md §A.2.
type TextConfig struct {
	ModelType             string
	HiddenSize            int
	IntermediateSize      int
	NumHiddenLayers       int
	NumAttentionHeads     int
	NumKeyValueHeads      int
	HeadDim               int // default HiddenSize / NumAttentionHeads
	VocabSize             int
	MaxPositionEmbeddings int
	// LayerTypes has one entry per layer, LinearAttention or FullAttention:
	// "layer_types" when present, else built from "full_attention_interval"
	// (layer i is full attention iff (i+1) % interval == 0, default interval
	// 4) for Qwen3.5/Qwen3-Next model types, else all FullAttention.
	LayerTypes []string
	// Gated DeltaNet geometry ("linear_*" keys); defaults are those of
	// transformers' Qwen3_5TextConfig (§A.1): 16 key heads, 32 value heads,
	// 128-dim heads, kernel 4.
	LinearNumKeyHeads   int
	LinearNumValueHeads int
	LinearKeyHeadDim    int
	LinearValueHeadDim  int
	LinearConvKernelDim int
	// AttnOutputGate doubles q_proj's rows (query | gate per head); Qwen3.5
	// default true ("attn_output_gate"; lithos-metal.md §3.3), false for
	// models without the key that are not Qwen3.5 (draft heads).
	AttnOutputGate bool
	// TieWordEmbeddings: lm_head is the embedding matrix (no lm_head tensor).
	TieWordEmbeddings bool
	// MTPNumHiddenLayers is "mtp_num_hidden_layers" (0 when absent).
	MTPNumHiddenLayers int
}

// VisionConfig is the vision tower ("vision_config"); defaults are those of
// transformers' Qwen3VLVisionConfig, which Qwen3_5VisionConfig inherits
// (qwen35-and-quant.md §A.1).
type VisionConfig struct {
	Depth                  int
	HiddenSize             int
	IntermediateSize       int
	NumHeads               int
	InChannels             int
	PatchSize              int
	SpatialMergeSize       int
	TemporalPatchSize      int
	OutHiddenSize          int
	NumPositionEmbeddings  int
	DeepstackVisualIndexes []int
}

// DraftConfig holds the DSpark/DFlash fields of a draft head. They may sit at
// the top level or under "dspark_config" / "dflash_config"
// (lithos-metal.md §5.2; qwen35-and-quant.md §D.1, §D.4).
type DraftConfig struct {
	Kind                     string // "dspark" (Markov head present) or "dflash"
	BlockSize                int    // tokens drafted per round; default 7 (lithos-metal.md §5.2)
	TargetLayerIDs           []int  // target decoder layers whose outputs feed fc (−1 = embedding); from target_layer_ids, or aux_hidden_state_layer_ids − 1
	NumTargetLayers          int
	MaskTokenID              int
	MarkovRank               int // 0 when the head has no Markov head
	MarkovHeadType           string
	EnableConfidenceHead     bool
	ConfidenceHeadWithMarkov bool
	TargetHiddenSize         int // default Text.HiddenSize
}

// IsHybrid reports whether the stack has Gated DeltaNet layers.
func (c *Config) IsHybrid() bool { return slices.Contains(c.Text.LayerTypes, LinearAttention) }

// IsDraft reports whether the checkpoint is a DSpark/DFlash draft head.
func (c *Config) IsDraft() bool { return c.Draft != nil }

// Architecture returns the first entry of "architectures", or "".
func (c *Config) Architecture() string {
	if len(c.Architectures) == 0 {
		return ""
	}
	return c.Architectures[0]
}

// CountLayers returns how many layers have the given type.
func (t *TextConfig) CountLayers(kind string) int {
	n := 0
	for _, k := range t.LayerTypes {
		if k == kind {
			n++
		}
	}
	return n
}

// ParseConfig parses a config.json. Errors name the field path and the rule
// ("text_config.num_hidden_layers: must be a positive integer, got 0");
// the caller adds the file name.
func ParseConfig(data []byte) (*Config, error) {
	top, err := parseObject(data, "config")
	if err != nil {
		return nil, err
	}
	c := &Config{}
	if c.Architectures, err = top.firstOrString("architectures"); err != nil {
		return nil, err
	}
	if c.ModelType, err = top.str("model_type"); err != nil {
		return nil, err
	}
	text := top
	if sub, ok, err := top.sub("text_config"); err != nil {
		return nil, err
	} else if ok {
		text = sub
	}
	if c.DType, err = dtypeField(text, top); err != nil {
		return nil, err
	}
	if c.Draft, err = parseDraft(top, c.Architectures); err != nil {
		return nil, err
	}
	if c.Text, err = parseText(text, top, c.Draft != nil); err != nil {
		return nil, err
	}
	if c.Draft != nil && c.Draft.TargetHiddenSize == 0 {
		c.Draft.TargetHiddenSize = c.Text.HiddenSize
	}
	if sub, ok, err := top.sub("vision_config"); err != nil {
		return nil, err
	} else if ok {
		if c.Vision, err = parseVision(sub); err != nil {
			return nil, err
		}
	}
	if sub, ok, err := top.sub("quantization_config"); err != nil {
		return nil, err
	} else if ok {
		if c.Quantization, err = parseQuantObject(sub, "config.json quantization_config"); err != nil {
			return nil, err
		}
	}
	if sub, ok, err := top.sub("lithos_quantization"); err != nil {
		return nil, err
	} else if ok {
		if c.Lithos, err = parseLithosQuant(sub); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func dtypeField(objs ...object) (string, error) {
	for _, o := range objs {
		for _, k := range []string{"dtype", "torch_dtype"} {
			s, err := o.str(k)
			if err != nil {
				return "", err
			}
			if s != "" {
				return s, nil
			}
		}
	}
	return "bfloat16", nil
}

// hybridModelTypes are the model types whose layer types default to the
// full_attention_interval rule when "layer_types" is absent.
var hybridModelTypes = []string{"qwen3_5_text", "qwen3_5", "qwen3_5_moe_text", "qwen3_5_moe", "qwen3_next"}

func parseText(o, top object, draft bool) (TextConfig, error) {
	var t TextConfig
	var err error
	if t.ModelType, err = o.str("model_type"); err != nil {
		return t, err
	}
	if t.ModelType == "" {
		if t.ModelType, err = top.str("model_type"); err != nil {
			return t, err
		}
	}
	req := func(key string, dst *int) error {
		v, err := o.positive(key, 0)
		if err != nil {
			return err
		}
		if v == 0 {
			return fmt.Errorf("%s: missing (a positive integer is required)", o.name(key))
		}
		*dst = v
		return nil
	}
	for _, f := range []struct {
		key string
		dst *int
	}{
		{"hidden_size", &t.HiddenSize},
		{"intermediate_size", &t.IntermediateSize},
		{"num_hidden_layers", &t.NumHiddenLayers},
		{"num_attention_heads", &t.NumAttentionHeads},
		{"vocab_size", &t.VocabSize},
	} {
		if err := req(f.key, f.dst); err != nil {
			return t, err
		}
	}
	if t.NumHiddenLayers > 1<<16 {
		return t, fmt.Errorf("%s: %d layers is not a plausible model", o.name("num_hidden_layers"), t.NumHiddenLayers)
	}
	if t.NumKeyValueHeads, err = o.positive("num_key_value_heads", t.NumAttentionHeads); err != nil {
		return t, err
	}
	if t.HeadDim, err = o.positive("head_dim", t.HiddenSize/t.NumAttentionHeads); err != nil {
		return t, err
	}
	if t.HeadDim == 0 {
		return t, fmt.Errorf("%s: missing, and hidden_size/num_attention_heads is 0", o.name("head_dim"))
	}
	if t.MaxPositionEmbeddings, err = o.positive("max_position_embeddings", 0); err != nil {
		return t, err
	}
	for _, f := range []struct {
		key string
		dst *int
		def int
	}{
		{"linear_num_key_heads", &t.LinearNumKeyHeads, 16},
		{"linear_num_value_heads", &t.LinearNumValueHeads, 32},
		{"linear_key_head_dim", &t.LinearKeyHeadDim, 128},
		{"linear_value_head_dim", &t.LinearValueHeadDim, 128},
		{"linear_conv_kernel_dim", &t.LinearConvKernelDim, 4},
	} {
		if *f.dst, err = o.positive(f.key, f.def); err != nil {
			return t, err
		}
	}
	if t.MTPNumHiddenLayers, _, err = o.int("mtp_num_hidden_layers"); err != nil {
		return t, err
	}
	if t.MTPNumHiddenLayers < 0 || t.MTPNumHiddenLayers > 64 {
		return t, fmt.Errorf("%s: must be between 0 and 64, got %d", o.name("mtp_num_hidden_layers"), t.MTPNumHiddenLayers)
	}
	hybridType := slices.Contains(hybridModelTypes, t.ModelType)
	if t.AttnOutputGate, err = o.boolean("attn_output_gate", hybridType); err != nil {
		return t, err
	}
	tie, err := top.boolean("tie_word_embeddings", false)
	if err != nil {
		return t, err
	}
	if t.TieWordEmbeddings, err = o.boolean("tie_word_embeddings", tie); err != nil {
		return t, err
	}
	if t.LayerTypes, err = layerTypes(o, t.NumHiddenLayers, hybridType && !draft); err != nil {
		return t, err
	}
	return t, nil
}

func layerTypes(o object, n int, hybrid bool) ([]string, error) {
	types, err := o.strings("layer_types")
	if err != nil {
		return nil, err
	}
	if types != nil {
		if len(types) != n {
			return nil, fmt.Errorf("%s: has %d entries, num_hidden_layers is %d", o.name("layer_types"), len(types), n)
		}
		for i, k := range types {
			switch k {
			case LinearAttention, FullAttention:
			case "attention", "sliding_attention":
				// DFlash2 and some exports name softmax layers this way; the
				// byte budget is the same as a full-attention layer's.
				types[i] = FullAttention
			default:
				return nil, fmt.Errorf("%s[%d]: unknown layer type %q (want %q or %q)", o.name("layer_types"), i, k, LinearAttention, FullAttention)
			}
		}
		return types, nil
	}
	interval, ok, err := o.int("full_attention_interval")
	if err != nil {
		return nil, err
	}
	if ok && interval <= 0 {
		return nil, fmt.Errorf("%s: must be a positive integer, got %d", o.name("full_attention_interval"), interval)
	}
	if !ok {
		interval = 4 // transformers Qwen3_5TextConfig default (§A.1)
	}
	types = make([]string, n)
	for i := range types {
		if hybrid || ok {
			if (i+1)%interval == 0 {
				types[i] = FullAttention
			} else {
				types[i] = LinearAttention
			}
		} else {
			types[i] = FullAttention
		}
	}
	return types, nil
}

func parseVision(o object) (*VisionConfig, error) {
	v := &VisionConfig{}
	for _, f := range []struct {
		key string
		dst *int
		def int
	}{
		{"depth", &v.Depth, 27},
		{"hidden_size", &v.HiddenSize, 1152},
		{"intermediate_size", &v.IntermediateSize, 4304},
		{"num_heads", &v.NumHeads, 16},
		{"in_channels", &v.InChannels, 3},
		{"patch_size", &v.PatchSize, 16},
		{"spatial_merge_size", &v.SpatialMergeSize, 2},
		{"temporal_patch_size", &v.TemporalPatchSize, 2},
		{"out_hidden_size", &v.OutHiddenSize, 3584},
		{"num_position_embeddings", &v.NumPositionEmbeddings, 2304},
	} {
		var err error
		if *f.dst, err = o.positive(f.key, f.def); err != nil {
			return nil, err
		}
	}
	if v.Depth > 1024 {
		return nil, fmt.Errorf("%s: %d blocks is not a plausible vision tower", o.name("depth"), v.Depth)
	}
	var err error
	if v.DeepstackVisualIndexes, err = o.ints("deepstack_visual_indexes"); err != nil {
		return nil, err
	}
	for i, d := range v.DeepstackVisualIndexes {
		if d < 0 || d >= v.Depth {
			return nil, fmt.Errorf("%s[%d]: block %d is outside 0..%d", o.name("deepstack_visual_indexes"), i, d, v.Depth-1)
		}
	}
	return v, nil
}

// draftArchitectures name draft-head classes (qwen35-and-quant.md §D.1, §D.4).
var draftArchitectures = []string{"DSparkDraftModel", "DFlashDraftModel"}

func parseDraft(top object, archs []string) (*DraftConfig, error) {
	// DSpark fields may sit at the top level or under dspark_config /
	// dflash_config; the nested object wins.
	objs := []object{top}
	for _, k := range []string{"dflash_config", "dspark_config"} {
		sub, ok, err := top.sub(k)
		if err != nil {
			return nil, err
		}
		if ok {
			objs = append([]object{sub}, objs...)
		}
	}
	isDraft := false
	for _, a := range archs {
		if slices.Contains(draftArchitectures, a) {
			isDraft = true
		}
	}
	spec, err := top.str("speculators_model_type")
	if err != nil {
		return nil, err
	}
	if spec == "dspark" || spec == "dflash" || len(objs) > 1 {
		isDraft = true
	}
	if !isDraft {
		return nil, nil
	}
	d := &DraftConfig{Kind: "dflash", BlockSize: 7}
	for _, o := range slices.Backward(objs) { // top level first, nested objects override
		if v, ok, err := o.int("block_size"); err != nil {
			return nil, err
		} else if ok {
			if v <= 0 || v > 1024 {
				return nil, fmt.Errorf("%s: must be between 1 and 1024, got %d", o.name("block_size"), v)
			}
			d.BlockSize = v
		}
		ids, err := o.ints("target_layer_ids")
		if err != nil {
			return nil, err
		}
		// speculators' aux_hidden_state_layer_ids count vLLM's captured states (aux id j =
		// the output of decoder layer j−1, 0 = the embedding): target layer = j − 1.
		aux, err := o.ints("aux_hidden_state_layer_ids")
		if err != nil {
			return nil, err
		}
		if aux != nil {
			mapped := make([]int, len(aux))
			for i, j := range aux {
				if j < 0 {
					return nil, fmt.Errorf("%s[%d]: %d: aux ids count vLLM's captured hidden states (0 = the embedding output), want ≥ 0", o.name("aux_hidden_state_layer_ids"), i, j)
				}
				mapped[i] = j - 1
			}
			if ids != nil && !slices.Equal(ids, mapped) {
				return nil, fmt.Errorf("%s %v and %s %v (target layers %v) disagree", o.name("target_layer_ids"), ids, o.name("aux_hidden_state_layer_ids"), aux, mapped)
			}
			ids = mapped
		}
		if ids != nil {
			d.TargetLayerIDs = ids
		}
		for _, f := range []struct {
			key string
			dst *int
		}{
			{"num_target_layers", &d.NumTargetLayers},
			{"mask_token_id", &d.MaskTokenID},
			{"markov_rank", &d.MarkovRank},
			{"target_hidden_size", &d.TargetHiddenSize},
		} {
			if v, ok, err := o.int(f.key); err != nil {
				return nil, err
			} else if ok {
				if v < 0 {
					return nil, fmt.Errorf("%s: must not be negative, got %d", o.name(f.key), v)
				}
				*f.dst = v
			}
		}
		if s, err := o.str("markov_head_type"); err != nil {
			return nil, err
		} else if s != "" {
			d.MarkovHeadType = s
		}
		if o.has("enable_confidence_head") {
			if d.EnableConfidenceHead, err = o.boolean("enable_confidence_head", false); err != nil {
				return nil, err
			}
		}
		if o.has("confidence_head_with_markov") {
			if d.ConfidenceHeadWithMarkov, err = o.boolean("confidence_head_with_markov", false); err != nil {
				return nil, err
			}
		}
	}
	if d.MarkovRank > 0 {
		d.Kind = "dspark"
		if d.MarkovHeadType == "" {
			d.MarkovHeadType = "vanilla"
		}
	}
	return d, nil
}

// LithosQuant is lithos-metal's "lithos_quantization" block of a re-exported
// draft head (lithos-metal.md §5.3): every matrix whose input dimension is a
// multiple of 256 is NVFP4, weight-only, except names containing an entry of
// Keep.
type LithosQuant struct {
	Format     string   // "nvfp4"
	WeightOnly bool     // no input_scale tensors
	BlockSize  int      // 16
	Keep       []string // name substrings kept in source precision ("markov_w1")
}

func parseLithosQuant(o object) (*LithosQuant, error) {
	q := &LithosQuant{}
	var err error
	if q.Format, err = o.str("format"); err != nil {
		return nil, err
	}
	q.Format = strings.ToLower(q.Format)
	if q.Format != "nvfp4" {
		return nil, fmt.Errorf("%s: unsupported format %q (lithos exports are \"nvfp4\")", o.name("format"), q.Format)
	}
	if q.WeightOnly, err = o.boolean("weight_only", true); err != nil {
		return nil, err
	}
	if q.BlockSize, err = o.positive("block_size", 16); err != nil {
		return nil, err
	}
	if q.BlockSize != 16 {
		return nil, fmt.Errorf("%s: NVFP4 blocks are 16 columns, got %d", o.name("block_size"), q.BlockSize)
	}
	if q.Keep, err = o.strings("keep"); err != nil {
		return nil, err
	}
	return q, nil
}
