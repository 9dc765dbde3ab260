package draft

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
)

// Architectures are the draft-head classes (config.json "architectures"[0]) this graph runs:
// DSpark heads with `sample_from_anchor` semantics (qwen35-and-quant.md §D.4). A plain DFlash
// head (slot 0 = the anchor's own prediction) is a different block convention and is refused.
var Architectures = []string{"DSparkDraftModel"}

// MaxBlockSize bounds block_size (the tokens drafted per round). It is lithos's own
// plausibility bound, not an upstream constant: it caps the per-State scratch (BlockSize·Vocab
// logits) and the target's verify step of BlockSize+1 rows. Published heads use 7 (DSpark,
// qwen35-and-quant.md §D.4), 8 (speculators' default, §D.4) and 16 (DFlash, §D.1).
const MaxBlockSize = 64

// MaxLayers bounds num_hidden_layers of a draft head (lithos's plausibility bound, not an
// upstream constant: draft heads are shallow, the published 27B head has 5 layers,
// qwen35-and-quant.md §D.4). It keeps a hostile config from sizing per-layer allocations
// before any tensor is read.
const MaxLayers = 256

// Config is the geometry and the constants of a DSpark draft head (qwen35-and-quant.md §D.1,
// §D.4; .notes/spec-design.md). Sizes are element counts.
type Config struct {
	Vocab        int // vocab_size: the target's vocabulary (the head uses the target's embedding and LM head)
	Hidden       int // hidden_size: the draft's width, equal to the target's (it embeds with the target's table)
	Intermediate int // intermediate_size (SwiGLU width)
	Layers       int // num_hidden_layers

	Heads, KVHeads, HeadDim int         // attention geometry; Heads % KVHeads == 0; RoPE over the full HeadDim
	RopeTheta               float64     // rope_theta: θ of inv_freq_i = θ^(−2i/HeadDim)
	Rope                    RopeScaling // rope_scaling / rope_parameters: default, linear or YaRN (NewRope)
	RMSEps                  float32     // rms_norm_eps of every (plain-weight) RMSNorm

	BlockSize    int   // block_size B: tokens drafted per round
	MaskToken    int32 // dflash_config.mask_token_id: the id embedded in block slots 1 … B−1
	TapLayers    []int // dflash_config.target_layer_ids, config order: the target decoder layers whose outputs are the context features (−1: the embedding output); see the package doc for the tap convention
	TargetHidden int   // target_hidden_size: width of one tapped target hidden state
	// NumTargetLayers is num_target_layers, the depth of the target the head was trained with;
	// 0 when the config does not say. A loader refuses a target of another depth.
	NumTargetLayers int

	MarkovRank           int  // markov_rank r; 0 = no Markov head (logits are the base logits)
	Confidence           bool // enable_confidence_head
	ConfidenceWithMarkov bool // confidence_head_with_markov: the head reads [h ; W1[x_{k−1}]]
}

// FeatureDim returns the width of one context-feature row: len(TapLayers)·TargetHidden.
func (c *Config) FeatureDim() int { return len(c.TapLayers) * c.TargetHidden }

// ConfidenceDim returns the input width of the confidence head: Hidden (+ MarkovRank with
// ConfidenceWithMarkov).
func (c *Config) ConfidenceDim() int {
	if c.ConfidenceWithMarkov {
		return c.Hidden + c.MarkovRank
	}
	return c.Hidden
}

// Validate checks the relations the graph relies on. Errors name the config field.
func (c *Config) Validate() error {
	for _, p := range []struct {
		name string
		v    int
	}{
		{"vocab_size", c.Vocab}, {"hidden_size", c.Hidden}, {"intermediate_size", c.Intermediate},
		{"num_hidden_layers", c.Layers}, {"num_attention_heads", c.Heads}, {"num_key_value_heads", c.KVHeads},
		{"head_dim", c.HeadDim}, {"block_size", c.BlockSize}, {"target_hidden_size", c.TargetHidden},
	} {
		if p.v <= 0 {
			return fmt.Errorf("draft config: %s must be positive, got %d", p.name, p.v)
		}
		if p.v > 1<<24 {
			return fmt.Errorf("draft config: %s = %d is not a plausible size", p.name, p.v)
		}
	}
	if c.Layers > MaxLayers {
		return fmt.Errorf("draft config: num_hidden_layers %d exceeds %d", c.Layers, MaxLayers)
	}
	if c.Heads%c.KVHeads != 0 {
		return fmt.Errorf("draft config: num_attention_heads %d is not a multiple of num_key_value_heads %d", c.Heads, c.KVHeads)
	}
	if c.HeadDim%2 != 0 {
		return fmt.Errorf("draft config: head_dim %d must be even (RoPE rotates pairs)", c.HeadDim)
	}
	if c.BlockSize > MaxBlockSize {
		return fmt.Errorf("draft config: block_size %d exceeds %d", c.BlockSize, MaxBlockSize)
	}
	if !(c.RopeTheta > 0) || math.IsInf(c.RopeTheta, 0) {
		return fmt.Errorf("draft config: rope_theta must be positive and finite, got %v", c.RopeTheta)
	}
	if err := c.Rope.validate(c.RopeTheta); err != nil {
		return err
	}
	if !(c.RMSEps > 0) || c.RMSEps > 1 {
		return fmt.Errorf("draft config: rms_norm_eps must be in (0, 1], got %v", c.RMSEps)
	}
	if c.MaskToken < 0 || int(c.MaskToken) >= c.Vocab {
		return fmt.Errorf("draft config: dflash_config.mask_token_id %d is outside the vocabulary [0, %d)", c.MaskToken, c.Vocab)
	}
	if len(c.TapLayers) == 0 || len(c.TapLayers) > 1024 {
		return fmt.Errorf("draft config: dflash_config.target_layer_ids must list 1 … 1024 target layers, got %d", len(c.TapLayers))
	}
	if c.NumTargetLayers < 0 || c.NumTargetLayers > 1<<20 {
		return fmt.Errorf("draft config: num_target_layers %d is not a plausible depth", c.NumTargetLayers)
	}
	for _, id := range c.TapLayers {
		if id < -1 || id >= 1<<20 {
			return fmt.Errorf("draft config: dflash_config.target_layer_ids: %d is not a layer id", id)
		}
		if c.NumTargetLayers > 0 && id >= c.NumTargetLayers {
			return fmt.Errorf("draft config: dflash_config.target_layer_ids: %d is not a layer of a num_target_layers %d target (−1 … %d)", id, c.NumTargetLayers, c.NumTargetLayers-1)
		}
	}
	if int64(c.FeatureDim()) > 1<<26 {
		return fmt.Errorf("draft config: %d taps × target_hidden_size %d is not a plausible feature width", len(c.TapLayers), c.TargetHidden)
	}
	if c.MarkovRank < 0 || c.MarkovRank > 1<<16 {
		return fmt.Errorf("draft config: markov_rank %d is not a plausible rank", c.MarkovRank)
	}
	if c.ConfidenceWithMarkov && c.Confidence && c.MarkovRank == 0 {
		return fmt.Errorf("draft config: confidence_head_with_markov needs a Markov head (markov_rank > 0)")
	}
	return nil
}

// ParseConfig reads a DSpark head's config.json (as stored in the bundle manifest's
// draft.config). Keys, as the public heads and tools/dspark_ref.py use them: hidden_size,
// intermediate_size, num_hidden_layers, num_attention_heads, num_key_value_heads (default
// num_attention_heads), head_dim (default hidden_size / num_attention_heads), vocab_size,
// rms_norm_eps (default 1e-6), rope_theta and rope_scaling / rope_parameters (default, linear or
// yarn RoPE with transformers' keys and defaults, RopeScaling; the published 27B head is yarn;
// where transformers 4 and 5 would read them differently it refuses), hidden_act (silu),
// block_size (default 7), mask_token_id and target_layer_ids (or aux_hidden_state_layer_ids,
// vLLM capture indices: target layer = aux id − 1, tapLayers) at the top level or under
// dflash_config / dspark_config (the nested object wins, as in lithos/convert),
// num_target_layers (optional), target_hidden_size (default hidden_size), markov_rank (default 0),
// markov_head_type (only "vanilla"), enable_confidence_head, confidence_head_with_markov.
//
// It refuses, naming the key: malformed JSON or values, an architecture other than
// Architectures, a RoPE type other than default, linear and yarn (naming rope_scaling.rope_type or
// rope_parameters.rope_type) or a partial rotary factor, attention biases, causal or sliding-window
// draft layers (DFlash2), sample_from_anchor false, a Markov head type other than vanilla, and
// whatever Validate refuses.
func ParseConfig(data []byte) (Config, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return Config{}, fmt.Errorf("draft config: %w", err)
	}
	if top == nil {
		return Config{}, fmt.Errorf("draft config: want a JSON object")
	}
	objs := []obj{{name: "", m: top}} // searched last to first: nested objects win
	for _, k := range []string{"dflash_config", "dspark_config"} {
		raw, ok := present(top, k)
		if !ok {
			continue
		}
		var sub map[string]json.RawMessage
		if err := json.Unmarshal(raw, &sub); err != nil || sub == nil {
			return Config{}, fmt.Errorf("draft config: %s: want an object", k)
		}
		objs = append(objs, obj{name: k + ".", m: sub})
	}
	topObj := objs[:1]

	var archs []string
	if raw, ok := present(top, "architectures"); ok {
		if err := json.Unmarshal(raw, &archs); err != nil {
			return Config{}, fmt.Errorf("draft config: architectures: want a list of strings, got %s", clip(raw))
		}
	}
	if len(archs) == 0 || !slices.Contains(Architectures, archs[0]) {
		return Config{}, fmt.Errorf("draft config: architectures %q: this runtime drafts with %s heads (sample_from_anchor)", archs, strings.Join(Architectures, ", "))
	}

	var c Config
	var err error
	ints := []struct {
		key  string
		dst  *int
		def  int
		from []obj
	}{
		{"vocab_size", &c.Vocab, 0, topObj}, {"hidden_size", &c.Hidden, 0, topObj},
		{"intermediate_size", &c.Intermediate, 0, topObj}, {"num_hidden_layers", &c.Layers, 0, topObj},
		{"num_attention_heads", &c.Heads, 0, topObj}, {"block_size", &c.BlockSize, 7, objs},
		{"markov_rank", &c.MarkovRank, 0, objs}, {"num_target_layers", &c.NumTargetLayers, 0, objs},
	}
	for _, f := range ints {
		if *f.dst, _, err = integer(f.from, f.key, f.def); err != nil {
			return Config{}, err
		}
	}
	if c.KVHeads, _, err = integer(topObj, "num_key_value_heads", c.Heads); err != nil {
		return Config{}, err
	}
	hd := 0
	if c.Heads > 0 {
		hd = c.Hidden / c.Heads
	}
	if c.HeadDim, _, err = integer(topObj, "head_dim", hd); err != nil {
		return Config{}, err
	}
	if c.TargetHidden, _, err = integer(objs, "target_hidden_size", c.Hidden); err != nil {
		return Config{}, err
	}
	mask, ok, err := integer(objs, "mask_token_id", 0)
	if err != nil {
		return Config{}, err
	}
	if !ok {
		return Config{}, fmt.Errorf("draft config: dflash_config.mask_token_id: missing")
	}
	if mask > math.MaxInt32 {
		return Config{}, fmt.Errorf("draft config: mask_token_id %d is too large", mask)
	}
	c.MaskToken = int32(mask)
	if c.TapLayers, err = tapLayers(objs); err != nil {
		return Config{}, err
	}
	eps, _, err := number(topObj, "rms_norm_eps", 1e-6)
	if err != nil {
		return Config{}, err
	}
	c.RMSEps = float32(eps)
	if c.RopeTheta, c.Rope, err = ropeConfig(top); err != nil {
		return Config{}, err
	}
	if act, err := str(topObj, "hidden_act", "silu"); err != nil {
		return Config{}, err
	} else if act != "silu" {
		return Config{}, fmt.Errorf("draft config: hidden_act %q: the draft MLP is SwiGLU (silu)", act)
	}
	if kind, err := str(objs, "markov_head_type", "vanilla"); err != nil {
		return Config{}, err
	} else if c.MarkovRank > 0 && kind != "vanilla" {
		return Config{}, fmt.Errorf("draft config: markov_head_type %q: only \"vanilla\" (W1 embedding + W2 linear) is implemented", kind)
	}
	if c.Confidence, err = boolean(objs, "enable_confidence_head", false); err != nil {
		return Config{}, err
	}
	if c.ConfidenceWithMarkov, err = boolean(objs, "confidence_head_with_markov", false); err != nil {
		return Config{}, err
	}
	if !c.Confidence {
		c.ConfidenceWithMarkov = false
	}
	for _, k := range []string{"attention_bias", "is_causal", "causal"} {
		if v, err := boolean(objs, k, false); err != nil {
			return Config{}, err
		} else if v {
			return Config{}, fmt.Errorf("draft config: %s true: the draft layers are bias-free and non-causal (qwen35-and-quant.md §D.1)", k)
		}
	}
	if v, err := boolean(objs, "sample_from_anchor", true); err != nil {
		return Config{}, err
	} else if !v {
		return Config{}, fmt.Errorf("draft config: sample_from_anchor false: this runtime drafts with DSpark's sample_from_anchor blocks (slot k predicts position P+k+1)")
	}
	if raw, ok := present(top, "layer_types"); ok {
		var lt []string
		if err := json.Unmarshal(raw, &lt); err != nil {
			return Config{}, fmt.Errorf("draft config: layer_types: want a list of strings, got %s", clip(raw))
		}
		for i, t := range lt {
			if t != "full_attention" {
				return Config{}, fmt.Errorf("draft config: layer_types[%d] %q: only full (non-causal) attention draft layers are implemented", i, t)
			}
		}
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// tapLayers reads target_layer_ids, or aux_hidden_state_layer_ids converted to target layer
// ids. speculators and vLLM count aux ids in vLLM's capture index (aux id j is the output of
// decoder layer j−1, 0 the embedding output): vLLM adds 1 to target_layer_ids but passes aux
// ids unchanged, and speculators' adapters convert target_layer_ids = [j−1 for j in aux].
// Both present: they must name the same layers.
func tapLayers(objs []obj) ([]int, error) {
	taps, err := intList(objs, "target_layer_ids")
	if err != nil {
		return nil, err
	}
	aux, err := intList(objs, "aux_hidden_state_layer_ids")
	if err != nil {
		return nil, err
	}
	if aux == nil {
		if taps == nil {
			return nil, fmt.Errorf("draft config: dflash_config.target_layer_ids: missing")
		}
		return taps, nil
	}
	_, auxName, _ := lookup(objs, "aux_hidden_state_layer_ids")
	ids := make([]int, len(aux))
	for i, j := range aux {
		if j < 0 {
			return nil, fmt.Errorf("draft config: %s[%d] %d: aux ids count vLLM's captured hidden states (0 = the embedding output), want ≥ 0", auxName, i, j)
		}
		ids[i] = j - 1
	}
	if taps != nil && !slices.Equal(taps, ids) {
		_, tapName, _ := lookup(objs, "target_layer_ids")
		return nil, fmt.Errorf("draft config: %s %v and %s %v (target layers %v) disagree", tapName, taps, auxName, aux, ids)
	}
	return ids, nil
}

// obj is one JSON object of the config with the prefix its keys are named with in errors.
type obj struct {
	name string
	m    map[string]json.RawMessage
}

func present(m map[string]json.RawMessage, key string) (json.RawMessage, bool) {
	raw, ok := m[key]
	if !ok || string(raw) == "null" {
		return nil, false
	}
	return raw, true
}

// lookup returns the value of key from the last object of objs that has it.
func lookup(objs []obj, key string) (json.RawMessage, string, bool) {
	for i := len(objs) - 1; i >= 0; i-- {
		if raw, ok := present(objs[i].m, key); ok {
			return raw, objs[i].name + key, true
		}
	}
	return nil, key, false
}

func clip(raw json.RawMessage) string {
	if len(raw) > 64 {
		return string(raw[:64]) + "…"
	}
	return string(raw)
}

func number(objs []obj, key string, def float64) (float64, bool, error) {
	raw, name, ok := lookup(objs, key)
	if !ok {
		return def, false, nil
	}
	var v float64
	if err := json.Unmarshal(raw, &v); err != nil {
		return 0, false, fmt.Errorf("draft config: %s: want a number, got %s", name, clip(raw))
	}
	return v, true, nil
}

func integer(objs []obj, key string, def int) (int, bool, error) {
	_, name, _ := lookup(objs, key)
	v, ok, err := number(objs, key, float64(def))
	if err != nil {
		return 0, false, err
	}
	if v != math.Trunc(v) || v < 0 || v > 1<<31 {
		return 0, false, fmt.Errorf("draft config: %s: want a non-negative integer, got %v", name, v)
	}
	return int(v), ok, nil
}

func intList(objs []obj, key string) ([]int, error) {
	raw, name, ok := lookup(objs, key)
	if !ok {
		return nil, nil
	}
	var fs []float64
	if err := json.Unmarshal(raw, &fs); err != nil {
		return nil, fmt.Errorf("draft config: %s: want a list of integers, got %s", name, clip(raw))
	}
	out := make([]int, len(fs))
	for i, v := range fs {
		if v != math.Trunc(v) || v < -1 || v > 1<<20 {
			return nil, fmt.Errorf("draft config: %s[%d]: want a layer id (≥ −1), got %v", name, i, v)
		}
		out[i] = int(v)
	}
	return out, nil
}

func boolean(objs []obj, key string, def bool) (bool, error) {
	raw, name, ok := lookup(objs, key)
	if !ok {
		return def, nil
	}
	var v bool
	if err := json.Unmarshal(raw, &v); err != nil {
		return false, fmt.Errorf("draft config: %s: want true or false, got %s", name, clip(raw))
	}
	return v, nil
}

func str(objs []obj, key, def string) (string, error) {
	raw, name, ok := lookup(objs, key)
	if !ok {
		return def, nil
	}
	var v string
	if err := json.Unmarshal(raw, &v); err != nil {
		return "", fmt.Errorf("draft config: %s: want a string, got %s", name, clip(raw))
	}
	return v, nil
}
