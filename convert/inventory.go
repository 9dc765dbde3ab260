package convert

import (
	"fmt"
	"slices"
	"strings"
)

// Kind says what a logical tensor is, which decides whether a quantization
// rule may apply to it and how the audit reads it.
type Kind string

// Kinds of logical tensors.
const (
	KindLinear    Kind = "linear"    // nn.Linear weight [out, in]: the only kind quantization applies to
	KindEmbedding Kind = "embedding" // gathered by row: [rows, dim]
	KindNorm      Kind = "norm"      // norm weight or bias
	KindConv      Kind = "conv"      // convolution weight
	KindParam     Kind = "param"     // other parameters (A_log, dt_bias)
	KindBias      Kind = "bias"      // linear or conv bias (optional: checkpoints may omit them)
	KindHead      Kind = "head"      // small output heads kept in source precision (DSpark confidence head)
)

// LogicalTensor is one parameter of the model as the modeling code declares
// it, before any quantization: name as stored in the checkpoint, logical
// shape ([out, in] for linears, row-major), kind.
type LogicalTensor struct {
	Name  string
	Shape []int64
	Kind  Kind
}

// Module returns the module path of a weight or bias ("…mlp.down_proj" for
// "…mlp.down_proj.weight"); other tensors are their own module.
func (t LogicalTensor) Module() string {
	for _, s := range []string{".weight", ".bias"} {
		if m, ok := strings.CutSuffix(t.Name, s); ok {
			return m
		}
	}
	return t.Name
}

// Inventory returns every parameter a checkpoint with this config holds, in
// module order, with logical shapes. Sources: qwen35-and-quant.md §A.2
// (Qwen3.5 text, MTP and vision names and shapes; the vision tower follows
// transformers' Qwen3VLVisionModel, whose linears and patch embedding all
// have biases), §D.1/§D.4 and lithos-metal.md §5.2 (DSpark/DFlash heads).
// Multimodal configs (a vision_config, or an architecture named
// *ForConditionalGeneration) store the text model under
// "model.language_model."; text-only ones under "model.".
func Inventory(c *Config) ([]LogicalTensor, error) {
	if c.IsDraft() {
		return draftInventory(c)
	}
	return targetInventory(c)
}

type inv struct{ out []LogicalTensor }

func (v *inv) add(name string, kind Kind, shape ...int64) {
	v.out = append(v.out, LogicalTensor{Name: name, Shape: shape, Kind: kind})
}

func (v *inv) linear(module string, out, in int64, bias bool) {
	v.add(module+".weight", KindLinear, out, in)
	if bias {
		v.add(module+".bias", KindBias, out)
	}
}

// attention adds a softmax attention block's projections and q/k norms.
func (v *inv) attention(p string, hidden, heads, kvHeads, headDim int64, gate bool) {
	q := heads * headDim
	if gate {
		q *= 2 // per head [query | gate] (§A.6)
	}
	v.linear(p+"self_attn.q_proj", q, hidden, false)
	v.linear(p+"self_attn.k_proj", kvHeads*headDim, hidden, false)
	v.linear(p+"self_attn.v_proj", kvHeads*headDim, hidden, false)
	v.linear(p+"self_attn.o_proj", hidden, heads*headDim, false)
	v.add(p+"self_attn.q_norm.weight", KindNorm, headDim)
	v.add(p+"self_attn.k_norm.weight", KindNorm, headDim)
}

func (v *inv) mlp(p string, hidden, inter int64) {
	v.linear(p+"mlp.gate_proj", inter, hidden, false)
	v.linear(p+"mlp.up_proj", inter, hidden, false)
	v.linear(p+"mlp.down_proj", hidden, inter, false)
}

// TextPrefix returns where the text model's tensors live: "model.language_model."
// for multimodal checkpoints, "model." for text-only ones.
func (c *Config) TextPrefix() string {
	if c.Vision != nil || strings.HasSuffix(c.Architecture(), "ForConditionalGeneration") {
		return "model.language_model."
	}
	return "model."
}

func targetInventory(c *Config) ([]LogicalTensor, error) {
	t := &c.Text
	if t.NumAttentionHeads%t.NumKeyValueHeads != 0 {
		return nil, fmt.Errorf("num_attention_heads %d is not a multiple of num_key_value_heads %d", t.NumAttentionHeads, t.NumKeyValueHeads)
	}
	H, I, V := int64(t.HiddenSize), int64(t.IntermediateSize), int64(t.VocabSize)
	kd := int64(t.LinearNumKeyHeads * t.LinearKeyHeadDim)
	vd := int64(t.LinearNumValueHeads * t.LinearValueHeadDim)
	if c.IsHybrid() && t.LinearNumValueHeads%t.LinearNumKeyHeads != 0 {
		return nil, fmt.Errorf("linear_num_value_heads %d is not a multiple of linear_num_key_heads %d", t.LinearNumValueHeads, t.LinearNumKeyHeads)
	}
	v := &inv{}
	p := c.TextPrefix()
	v.add(p+"embed_tokens.weight", KindEmbedding, V, H)
	for i, kind := range t.LayerTypes {
		lp := fmt.Sprintf("%slayers.%d.", p, i)
		v.add(lp+"input_layernorm.weight", KindNorm, H)
		if kind == LinearAttention {
			// Gated DeltaNet mixer (§A.2): conv_dim = 2·key_dim + value_dim.
			v.linear(lp+"linear_attn.in_proj_qkv", 2*kd+vd, H, false)
			v.linear(lp+"linear_attn.in_proj_z", vd, H, false)
			v.linear(lp+"linear_attn.in_proj_b", int64(t.LinearNumValueHeads), H, false)
			v.linear(lp+"linear_attn.in_proj_a", int64(t.LinearNumValueHeads), H, false)
			v.add(lp+"linear_attn.conv1d.weight", KindConv, 2*kd+vd, 1, int64(t.LinearConvKernelDim))
			v.add(lp+"linear_attn.dt_bias", KindParam, int64(t.LinearNumValueHeads))
			v.add(lp+"linear_attn.A_log", KindParam, int64(t.LinearNumValueHeads))
			v.add(lp+"linear_attn.norm.weight", KindNorm, int64(t.LinearValueHeadDim))
			v.linear(lp+"linear_attn.out_proj", H, vd, false)
		} else {
			v.attention(lp, H, int64(t.NumAttentionHeads), int64(t.NumKeyValueHeads), int64(t.HeadDim), t.AttnOutputGate)
		}
		v.add(lp+"post_attention_layernorm.weight", KindNorm, H)
		v.mlp(lp, H, I)
	}
	v.add(p+"norm.weight", KindNorm, H)
	if !t.TieWordEmbeddings {
		v.linear("lm_head", V, H, false)
	}
	// Multi-token prediction block (§A.2, §A.7): fc over [embedding | hidden],
	// three norms, then full-attention decoder layers.
	if t.MTPNumHiddenLayers > 0 {
		v.linear("mtp.fc", H, 2*H, false)
		v.add("mtp.pre_fc_norm_embedding.weight", KindNorm, H)
		v.add("mtp.pre_fc_norm_hidden.weight", KindNorm, H)
		for j := 0; j < t.MTPNumHiddenLayers; j++ {
			lp := fmt.Sprintf("mtp.layers.%d.", j)
			v.add(lp+"input_layernorm.weight", KindNorm, H)
			v.attention(lp, H, int64(t.NumAttentionHeads), int64(t.NumKeyValueHeads), int64(t.HeadDim), t.AttnOutputGate)
			v.add(lp+"post_attention_layernorm.weight", KindNorm, H)
			v.mlp(lp, H, I)
		}
		v.add("mtp.norm.weight", KindNorm, H)
	}
	if c.Vision != nil {
		visionInventory(v, c.Vision)
	}
	return v.out, nil
}

// visionInventory adds the Qwen3-VL-style vision tower (transformers
// Qwen3VLVisionModel: Conv3d patch embedding with bias, learned position
// embedding, LayerNorm blocks with biased qkv/proj/MLP linears, a merger that
// concatenates spatial_merge_size² patches).
func visionInventory(v *inv, vc *VisionConfig) {
	const p = "model.visual."
	h, in := int64(vc.HiddenSize), int64(vc.IntermediateSize)
	merged := h * int64(vc.SpatialMergeSize*vc.SpatialMergeSize)
	v.add(p+"patch_embed.proj.weight", KindConv, h, int64(vc.InChannels), int64(vc.TemporalPatchSize), int64(vc.PatchSize), int64(vc.PatchSize))
	v.add(p+"patch_embed.proj.bias", KindBias, h)
	v.add(p+"pos_embed.weight", KindEmbedding, int64(vc.NumPositionEmbeddings), h)
	for b := 0; b < vc.Depth; b++ {
		bp := fmt.Sprintf("%sblocks.%d.", p, b)
		v.add(bp+"norm1.weight", KindNorm, h)
		v.add(bp+"norm1.bias", KindNorm, h)
		v.add(bp+"norm2.weight", KindNorm, h)
		v.add(bp+"norm2.bias", KindNorm, h)
		v.linear(bp+"attn.qkv", 3*h, h, true)
		v.linear(bp+"attn.proj", h, h, true)
		v.linear(bp+"mlp.linear_fc1", in, h, true)
		v.linear(bp+"mlp.linear_fc2", h, in, true)
	}
	merger := func(mp string, normDim int64) {
		v.add(mp+"norm.weight", KindNorm, normDim)
		v.add(mp+"norm.bias", KindNorm, normDim)
		v.linear(mp+"linear_fc1", merged, merged, true)
		v.linear(mp+"linear_fc2", int64(vc.OutHiddenSize), merged, true)
	}
	merger(p+"merger.", h)
	for k := range vc.DeepstackVisualIndexes {
		merger(fmt.Sprintf("%sdeepstack_merger_list.%d.", p, k), merged) // post-shuffle norm
	}
}

// draftInventory lists a DSpark/DFlash head (no "model." prefix): fc over the
// concatenated target taps, hidden_norm, Qwen3-style layers without output
// gate, final norm, and for DSpark the Markov W1/W2 and confidence head
// (lithos-metal.md §5.2; qwen35-and-quant.md §D.4). The head owns no
// embedding and no lm_head: it uses the target's.
func draftInventory(c *Config) ([]LogicalTensor, error) {
	t, d := &c.Text, c.Draft
	if len(d.TargetLayerIDs) == 0 {
		return nil, fmt.Errorf("target_layer_ids: missing (a draft head's fc input is one target hidden state per tapped layer)")
	}
	if t.NumAttentionHeads%t.NumKeyValueHeads != 0 {
		return nil, fmt.Errorf("num_attention_heads %d is not a multiple of num_key_value_heads %d", t.NumAttentionHeads, t.NumKeyValueHeads)
	}
	H, V := int64(t.HiddenSize), int64(t.VocabSize)
	v := &inv{}
	v.linear("fc", H, int64(len(d.TargetLayerIDs)*d.TargetHiddenSize), false)
	v.add("hidden_norm.weight", KindNorm, H)
	for i := 0; i < t.NumHiddenLayers; i++ {
		lp := fmt.Sprintf("layers.%d.", i)
		v.add(lp+"input_layernorm.weight", KindNorm, H)
		v.add(lp+"post_attention_layernorm.weight", KindNorm, H)
		v.attention(lp, H, int64(t.NumAttentionHeads), int64(t.NumKeyValueHeads), int64(t.HeadDim), t.AttnOutputGate)
		v.mlp(lp, H, int64(t.IntermediateSize))
	}
	v.add("norm.weight", KindNorm, H)
	if d.MarkovRank > 0 {
		if d.MarkovHeadType != "vanilla" {
			return nil, fmt.Errorf("markov_head_type: %q heads are not supported (only \"vanilla\": W1 embedding + W2 linear)", d.MarkovHeadType)
		}
		r := int64(d.MarkovRank)
		v.add("markov_head.markov_w1.weight", KindEmbedding, V, r)
		v.linear("markov_head.markov_w2", V, r, false)
	}
	if d.EnableConfidenceHead {
		in := H
		if d.ConfidenceHeadWithMarkov {
			in += int64(d.MarkovRank)
		}
		v.add("confidence_head.proj.weight", KindHead, 1, in)
		v.add("confidence_head.proj.bias", KindBias, 1)
	}
	return v.out, nil
}

// linearModules returns the modules of the linear weights of an inventory.
func linearModules(ts []LogicalTensor) []string {
	var out []string
	for _, t := range ts {
		if t.Kind == KindLinear {
			out = append(out, t.Module())
		}
	}
	return slices.Compact(out)
}
