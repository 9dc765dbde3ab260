package model

import (
	"encoding/json"
	"fmt"
	"math"
)

// LayerKind is the token mixer of one decoder layer.
type LayerKind uint8

// Layer kinds.
const (
	GDN       LayerKind = iota // Gated DeltaNet (linear attention) with conv and recurrent state
	Attention                  // gated full softmax attention with a KV cache
)

// Their names in config.json "layer_types".
const (
	LinearAttentionName = "linear_attention"
	FullAttentionName   = "full_attention"
)

func (k LayerKind) String() string {
	switch k {
	case GDN:
		return LinearAttentionName
	case Attention:
		return FullAttentionName
	}
	return fmt.Sprintf("LayerKind(%d)", uint8(k))
}

// Config is the geometry and the constants of a Qwen3.5 hybrid text model
// (qwen35-and-quant.md §A.1). Sizes are element counts.
type Config struct {
	Vocab        int
	Hidden       int
	Intermediate int         // SwiGLU width
	Layers       []LayerKind // one per decoder layer

	// Gated full attention.
	Heads     int     // query heads
	KVHeads   int     // key/value heads; Heads % KVHeads == 0
	HeadDim   int     // per head
	RotaryDim int     // leading dims of each head rotated by RoPE: int(HeadDim · partial_rotary_factor), even
	RopeTheta float64 // θ of inv_freq_i = θ^(−2i/RotaryDim)

	// Gated DeltaNet.
	KHeads     int // query/key heads (linear_num_key_heads)
	VHeads     int // value heads (linear_num_value_heads); VHeads % KHeads == 0
	KDim       int // linear_key_head_dim
	VDim       int // linear_value_head_dim
	ConvKernel int // linear_conv_kernel_dim

	// RMSEps is rms_norm_eps, used by every RMSNorm (the GDN gated norm included);
	// the GDN L2 norm uses its own 1e-6 (L2Eps).
	RMSEps float32

	// TieEmbeddings: the LM head is the embedding matrix.
	TieEmbeddings bool
}

// L2Eps is the epsilon the GDN q/k L2 normalisation adds to Σx² (transformers' l2norm,
// FLA-compatible; qwen35-and-quant.md §A.5 step 6).
const L2Eps = 1e-6

// ConvDim returns the GDN conv channels: 2·KHeads·KDim + VHeads·VDim (q | k | v).
func (c *Config) ConvDim() int { return 2*c.KHeads*c.KDim + c.VHeads*c.VDim }

// Count returns how many layers are of kind k.
func (c *Config) Count(k LayerKind) int {
	n := 0
	for _, l := range c.Layers {
		if l == k {
			n++
		}
	}
	return n
}

// Validate checks the relations the graph relies on. Errors name the field.
func (c *Config) Validate() error {
	pos := []struct {
		name string
		v    int
	}{
		{"vocab_size", c.Vocab}, {"hidden_size", c.Hidden}, {"intermediate_size", c.Intermediate},
		{"num_hidden_layers", len(c.Layers)},
	}
	if c.Count(Attention) > 0 {
		pos = append(pos, []struct {
			name string
			v    int
		}{{"num_attention_heads", c.Heads}, {"num_key_value_heads", c.KVHeads}, {"head_dim", c.HeadDim}}...)
	}
	if c.Count(GDN) > 0 {
		pos = append(pos, []struct {
			name string
			v    int
		}{{"linear_num_key_heads", c.KHeads}, {"linear_num_value_heads", c.VHeads},
			{"linear_key_head_dim", c.KDim}, {"linear_value_head_dim", c.VDim}, {"linear_conv_kernel_dim", c.ConvKernel}}...)
	}
	for _, p := range pos {
		if p.v <= 0 {
			return fmt.Errorf("model config: %s must be positive, got %d", p.name, p.v)
		}
		if p.v > 1<<24 {
			return fmt.Errorf("model config: %s = %d is not a plausible size", p.name, p.v)
		}
	}
	if c.Count(Attention) > 0 {
		if c.Heads%c.KVHeads != 0 {
			return fmt.Errorf("model config: num_attention_heads %d is not a multiple of num_key_value_heads %d", c.Heads, c.KVHeads)
		}
		if c.RotaryDim < 0 || c.RotaryDim > c.HeadDim || c.RotaryDim%2 != 0 {
			return fmt.Errorf("model config: rotary dims %d must be even and within head_dim %d", c.RotaryDim, c.HeadDim)
		}
		if !(c.RopeTheta > 0) || math.IsInf(c.RopeTheta, 0) {
			return fmt.Errorf("model config: rope_theta must be positive and finite, got %v", c.RopeTheta)
		}
	}
	if c.Count(GDN) > 0 && c.VHeads%c.KHeads != 0 {
		return fmt.Errorf("model config: linear_num_value_heads %d is not a multiple of linear_num_key_heads %d", c.VHeads, c.KHeads)
	}
	if !(c.RMSEps > 0) || math.IsInf(float64(c.RMSEps), 0) {
		return fmt.Errorf("model config: rms_norm_eps must be positive and finite, got %v", c.RMSEps)
	}
	return nil
}

// ParseConfig reads a Qwen3.5 hybrid config.json: the multimodal form (model_type
// "qwen3_5", the text model under "text_config") or the text-only form (qwen35-and-quant.md
// §A.1). Defaults are transformers' Qwen3_5TextConfig's: num_key_value_heads = heads,
// head_dim = hidden/heads, linear_* 16/32/128/128/4, rms_norm_eps 1e-6, layer_types from
// full_attention_interval (default 4: layer i is full attention iff (i+1) % 4 == 0). RoPE:
// "rope_parameters" (rope_type "default", rope_theta, partial_rotary_factor), else legacy
// top-level "rope_theta" / "partial_rotary_factor"; defaults 1e7 (the 27B's θ) and 0.25.
// mrope_section is not needed: for text-only positions the interleaved M-RoPE reduces to
// ordinary RoPE (§A.6 step 4). Errors name the field and the rule; unsupported variants (no
// attention output gate, a RoPE type other than default, an activation other than silu,
// sliding-window layers) are refused.
func ParseConfig(data []byte) (Config, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return Config{}, fmt.Errorf("model config: %w", err)
	}
	text, where := top, ""
	if raw, ok := top["text_config"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &text); err != nil {
			return Config{}, fmt.Errorf("model config: text_config: %w", err)
		}
		where = "text_config."
	}
	present := func(key string) (json.RawMessage, bool) {
		raw, ok := text[key]
		if !ok || string(raw) == "null" {
			return nil, false
		}
		return raw, true
	}
	num := func(key string, def float64) (float64, error) {
		raw, ok := present(key)
		if !ok {
			return def, nil
		}
		var v float64
		if err := json.Unmarshal(raw, &v); err != nil {
			return 0, fmt.Errorf("model config: %s%s: want a number, got %s", where, key, raw)
		}
		return v, nil
	}
	integer := func(key string, def int) (int, error) {
		v, err := num(key, float64(def))
		if err != nil {
			return 0, err
		}
		if v != math.Trunc(v) || v < 0 || v > 1<<31 {
			return 0, fmt.Errorf("model config: %s%s: want a non-negative integer, got %v", where, key, v)
		}
		return int(v), nil
	}
	boolean := func(key string, def bool) (bool, error) {
		raw, ok := present(key)
		if !ok {
			return def, nil
		}
		var v bool
		if err := json.Unmarshal(raw, &v); err != nil {
			return false, fmt.Errorf("model config: %s%s: want true or false, got %s", where, key, raw)
		}
		return v, nil
	}
	var c Config
	var nLayers int
	for _, f := range []struct {
		key string
		dst *int
	}{
		{"vocab_size", &c.Vocab}, {"hidden_size", &c.Hidden}, {"intermediate_size", &c.Intermediate},
		{"num_hidden_layers", &nLayers}, {"num_attention_heads", &c.Heads},
	} {
		v, err := integer(f.key, 0)
		if err != nil {
			return Config{}, err
		}
		if v == 0 {
			return Config{}, fmt.Errorf("model config: %s%s: missing (a positive integer is required)", where, f.key)
		}
		*f.dst = v
	}
	if nLayers > 1<<16 {
		return Config{}, fmt.Errorf("model config: %snum_hidden_layers: %d is not a plausible model", where, nLayers)
	}
	var err error
	for _, f := range []struct {
		key string
		dst *int
		def int
	}{
		{"num_key_value_heads", &c.KVHeads, c.Heads}, {"head_dim", &c.HeadDim, c.Hidden / c.Heads},
		{"linear_num_key_heads", &c.KHeads, 16}, {"linear_num_value_heads", &c.VHeads, 32},
		{"linear_key_head_dim", &c.KDim, 128}, {"linear_value_head_dim", &c.VDim, 128},
		{"linear_conv_kernel_dim", &c.ConvKernel, 4},
	} {
		if *f.dst, err = integer(f.key, f.def); err != nil {
			return Config{}, err
		}
	}
	// Layer kinds.
	if raw, ok := present("layer_types"); ok {
		var types []string
		if err := json.Unmarshal(raw, &types); err != nil {
			return Config{}, fmt.Errorf("model config: %slayer_types: want a list of strings: %w", where, err)
		}
		if len(types) != nLayers {
			return Config{}, fmt.Errorf("model config: %slayer_types has %d entries, num_hidden_layers is %d", where, len(types), nLayers)
		}
		for i, lt := range types {
			switch lt {
			case LinearAttentionName:
				c.Layers = append(c.Layers, GDN)
			case FullAttentionName:
				c.Layers = append(c.Layers, Attention)
			default:
				return Config{}, fmt.Errorf("model config: %slayer_types[%d] = %q is not supported (want %q or %q)", where, i, lt, LinearAttentionName, FullAttentionName)
			}
		}
	} else {
		interval, err := integer("full_attention_interval", 4)
		if err != nil {
			return Config{}, err
		}
		if interval <= 0 {
			return Config{}, fmt.Errorf("model config: %sfull_attention_interval must be positive", where)
		}
		for i := 0; i < nLayers; i++ {
			if (i+1)%interval == 0 {
				c.Layers = append(c.Layers, Attention)
			} else {
				c.Layers = append(c.Layers, GDN)
			}
		}
	}
	gate, err := boolean("attn_output_gate", true)
	if err != nil {
		return Config{}, err
	}
	if c.Count(Attention) > 0 && !gate {
		return Config{}, fmt.Errorf("model config: %sattn_output_gate false is not supported (Qwen3.5 attention is gated)", where)
	}
	tie, err := boolean("tie_word_embeddings", false)
	if err != nil {
		return Config{}, err
	}
	if raw, ok := top["tie_word_embeddings"]; ok && where != "" && string(raw) != "null" {
		if _, inText := present("tie_word_embeddings"); !inText {
			if err := json.Unmarshal(raw, &tie); err != nil {
				return Config{}, fmt.Errorf("model config: tie_word_embeddings: want true or false, got %s", raw)
			}
		}
	}
	c.TieEmbeddings = tie
	eps, err := num("rms_norm_eps", 1e-6)
	if err != nil {
		return Config{}, err
	}
	c.RMSEps = float32(eps)
	if act, ok := present("hidden_act"); ok {
		var s string
		if err := json.Unmarshal(act, &s); err != nil || s != "silu" {
			return Config{}, fmt.Errorf("model config: %shidden_act = %s is not supported (want \"silu\")", where, act)
		}
	}
	theta, err := num("rope_theta", 1e7)
	if err != nil {
		return Config{}, err
	}
	partial, err := num("partial_rotary_factor", 0.25)
	if err != nil {
		return Config{}, err
	}
	// rope_scaling is the legacy name of rope_parameters (transformers 4); both may appear.
	for _, key := range []string{"rope_scaling", "rope_parameters"} {
		raw, ok := present(key)
		if !ok {
			continue
		}
		var rp struct {
			RopeType string   `json:"rope_type"`
			Type     string   `json:"type"`
			Theta    *float64 `json:"rope_theta"`
			Partial  *float64 `json:"partial_rotary_factor"`
		}
		if err := json.Unmarshal(raw, &rp); err != nil {
			return Config{}, fmt.Errorf("model config: %s%s: %w", where, key, err)
		}
		typ := rp.RopeType
		if typ == "" {
			typ = rp.Type
		}
		if typ != "" && typ != "default" {
			return Config{}, fmt.Errorf("model config: %s%s.rope_type %q is not supported (want \"default\")", where, key, typ)
		}
		if rp.Theta != nil {
			theta = *rp.Theta
		}
		if rp.Partial != nil {
			partial = *rp.Partial
		}
	}
	if !(partial > 0 && partial <= 1) {
		return Config{}, fmt.Errorf("model config: %spartial_rotary_factor must be in (0, 1], got %v", where, partial)
	}
	c.RopeTheta = theta
	c.RotaryDim = int(float64(c.HeadDim) * partial) // transformers: int(head_dim * partial_rotary_factor)
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}
