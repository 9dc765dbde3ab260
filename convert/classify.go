package convert

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"lithos/formats/safetensors"
)

// Group names a set of tensors the audit sums together. The target groups
// are the rows of the audit article's table (shared/reference/
// 000_1fcfc96d7abf8b5f.txt, "What one token costs the bus"); the draft groups
// split a DSpark head by how often a draft block reads them.
type Group string

// Target groups.
const (
	GroupMLPCodes       Group = "mlp_codes"        // MLP gate/up/down payload (NVFP4 codes, or the weights in other formats)
	GroupMLPBlockScales Group = "mlp_block_scales" // MLP per-block scales (NVFP4 E4M3 per 16 weights, affine scales/biases)
	GroupGDNProj        Group = "gdn_proj"         // Gated DeltaNet in_proj_qkv, in_proj_z, out_proj
	GroupAttnProj       Group = "attn_proj"        // full-attention q/k/v/o_proj
	GroupSmall          Group = "small"            // A/B projections, conv, A_log, dt_bias, norms, per-tensor scalars
	GroupVocabHead      Group = "vocab_head"       // lm_head codes and block scales
	GroupEmbedding      Group = "embedding"        // embed_tokens: one row gathered per token
	GroupMTPVision      Group = "mtp_vision"       // mtp.* and the vision tower: never read in text decoding
	GroupUnknown        Group = "unknown"          // unclassified: reported, never dropped
)

// Draft-head groups.
const (
	GroupDraftAttn      Group = "draft_attn"       // draft layers' q/k/v/o_proj: once per block
	GroupDraftMLP       Group = "draft_mlp"        // draft layers' MLPs: once per block
	GroupDraftFC        Group = "draft_fc"         // fc over the target taps: once per block
	GroupMarkovW2       Group = "markov_w2"        // W2 [vocab, rank]: once per Markov step
	GroupMarkovW1       Group = "markov_w1"        // W1 [vocab, rank]: one row gathered per step
	GroupDraftSmall     Group = "draft_small"      // norms, confidence head, per-tensor scalars: once per block
	GroupDraftEmbedding Group = "draft_embedding"  // a head's own embedding, if any: gathered
	GroupDraftVocabHead Group = "draft_vocab_head" // a head's own lm_head, if any: once per block
)

// groupOrder is the order of report rows.
var groupOrder = []Group{
	GroupMLPCodes, GroupMLPBlockScales, GroupGDNProj, GroupAttnProj, GroupSmall, GroupVocabHead,
	GroupEmbedding, GroupMTPVision,
	GroupDraftAttn, GroupDraftMLP, GroupDraftFC, GroupMarkovW2, GroupMarkovW1, GroupDraftSmall,
	GroupDraftEmbedding, GroupDraftVocabHead, GroupUnknown,
}

// PerPass reports whether a target group is read on every decode pass.
func (g Group) PerPass() bool {
	switch g {
	case GroupMLPCodes, GroupMLPBlockScales, GroupGDNProj, GroupAttnProj, GroupSmall, GroupVocabHead:
		return true
	}
	return false
}

// Role is what a tensor is within its module.
type Role string

// Roles.
const (
	RolePayload     Role = "payload"      // the weight itself (codes for NVFP4)
	RoleBlockScales Role = "block_scales" // per-block scales (or affine biases) of a quantized weight
	RoleScalar      Role = "scalar"       // per-tensor scale: weight_scale_2, input_scale, FP8 weight_scale, k/v_scale
	RoleOther       Role = "other"        // biases, norms, parameters
)

// Tensor formats detected from dtypes (lithos-metal.md §1.8).
const (
	FormatNVFP4     = "NVFP4"       // U8 codes + F8_E4M3 weight_scale per 16 + F32 weight_scale_2 (ModelOpt)
	FormatNVFP4MLX  = "NVFP4 (MLX)" // U32 codes + U8 scales, no biases
	FormatFP8       = "FP8"         // F8_E4M3 weight + F32 weight_scale
	FormatAffine    = "affine INT"  // MLX affine: U32 weight + scales + biases
	FormatGPTQ      = "INT4 (AWQ/GPTQ)"
	formatUnscaled8 = "F8_E4M3 (no scale)"
)

// Classified is one tensor with its group, module, role and format.
type Classified struct {
	TensorInfo
	Group  Group
	Module string
	Role   Role
	Format string // module format: FormatNVFP4, FormatFP8, or the dtype for plain tensors
}

// Label is the tensor's format as a table shows it ("NVFP4 codes").
func (c Classified) Label() string {
	switch c.Role {
	case RolePayload:
		switch c.Format {
		case FormatNVFP4, FormatNVFP4MLX:
			return "NVFP4 codes"
		case FormatFP8:
			return "FP8 E4M3"
		case FormatAffine:
			return "affine INT codes"
		}
		return c.Format
	case RoleBlockScales:
		if c.Format == FormatNVFP4 || c.Format == FormatNVFP4MLX {
			return "FP8 E4M3 block scales"
		}
		return string(c.DType) + " scales"
	case RoleScalar:
		return string(c.DType) + " scalars"
	}
	return string(c.DType)
}

// sideSuffixes are tensor-name suffixes that belong to a module, longest
// first (§B.3; MLX and AWQ/GPTQ names from lithos-metal.md §1.8).
var sideSuffixes = []string{
	".weight_scale_2", ".weight_scale", ".input_scale", ".k_scale", ".v_scale",
	".weight", ".bias", ".scales", ".biases", ".qweight", ".qzeros", ".g_idx",
}

// splitModule splits a tensor name into module and suffix ("" for
// parameters such as A_log).
func splitModule(name string) (module, suffix string) {
	for _, s := range sideSuffixes {
		if m, ok := strings.CutSuffix(name, s); ok && m != "" {
			return m, s
		}
	}
	return name, ""
}

// detectFormat returns a module's storage format from its tensors' dtypes
// (lithos-metal.md §1.8, checkpoint.py): U8 weight + F8_E4M3 weight_scale →
// NVFP4; F8_E4M3 weight + weight_scale → FP8; U32 weight + U8 scales without
// biases → NVFP4 (MLX); U32 weight + scales + biases → affine; I32 qweight →
// AWQ/GPTQ; otherwise the weight's dtype.
func detectFormat(m map[string]TensorInfo) string {
	w, hasW := m[".weight"]
	ws, hasWS := m[".weight_scale"]
	switch {
	case hasW && hasWS && w.DType == safetensors.U8 && ws.DType == safetensors.F8E4M3:
		return FormatNVFP4
	case hasW && hasWS && w.DType == safetensors.F8E4M3:
		return FormatFP8
	case hasW && w.DType == safetensors.F8E4M3:
		return formatUnscaled8
	case hasW && w.DType == safetensors.U32:
		s, hasS := m[".scales"]
		_, hasB := m[".biases"]
		if hasS && s.DType == safetensors.U8 && !hasB {
			return FormatNVFP4MLX
		}
		if hasS {
			return FormatAffine
		}
	}
	if q, ok := m[".qweight"]; ok && q.DType == safetensors.I32 {
		return FormatGPTQ
	}
	if hasW {
		return string(w.DType)
	}
	for _, s := range []string{"", ".bias"} {
		if t, ok := m[s]; ok {
			return string(t.DType)
		}
	}
	return "mixed"
}

// roleOf returns a tensor's role given its suffix and module format.
func roleOf(t TensorInfo, suffix, format string) Role {
	switch suffix {
	case ".weight", ".qweight":
		return RolePayload
	case ".weight_scale_2", ".input_scale", ".k_scale", ".v_scale":
		return RoleScalar
	case ".weight_scale":
		if t.Bytes <= 4 {
			return RoleScalar
		}
		return RoleBlockScales
	case ".scales", ".biases", ".qzeros", ".g_idx":
		if format == FormatAffine || format == FormatNVFP4MLX || format == FormatGPTQ {
			return RoleBlockScales
		}
	}
	return RoleOther
}

var layerRe = regexp.MustCompile(`^layers\.(\d+)\.(.+)$`)

// Classification is a checkpoint's tensors sorted into groups.
type Classification struct {
	Tensors  []Classified
	Warnings []string
}

// Classify assigns every tensor of a checkpoint to a group. Rules (target;
// names with their "model.language_model." or "model." prefix removed):
//
//	mtp.*, *visual.*, *vision_tower.*          → mtp_vision (never read in text decoding)
//	embed_tokens.*                             → embedding (a gather: one row per token)
//	lm_head.*                                  → vocab_head (codes and block scales)
//	layers.N.mlp.{gate,up,down}_proj.*         → mlp_codes (payload), mlp_block_scales
//	layers.N.linear_attn.{in_proj_qkv,in_proj_z,out_proj}.* → gdn_proj
//	layers.N.self_attn.{q,k,v,o}_proj.*        → attn_proj
//	layers.N.linear_attn.{in_proj_a,in_proj_b,conv1d,A_log,dt_bias,norm}.*,
//	layers.N.self_attn.{q,k}_norm.*, layers.N.*layernorm.*, norm.*,
//	and every per-tensor scalar (weight_scale_2, input_scale, F32 weight_scale,
//	k_scale, v_scale) of a per-pass module      → small
//	anything else                               → unknown (reported by name)
//
// A draft head (Config.IsDraft) is split into draft_attn, draft_mlp,
// draft_fc, markov_w2, markov_w1, draft_small (norms, confidence head,
// scalars), draft_embedding, draft_vocab_head. Warnings note layer indexes
// past num_hidden_layers and mixers that disagree with layer_types.
func Classify(cfg *Config, tensors []TensorInfo) *Classification {
	modules := map[string]map[string]TensorInfo{}
	for _, t := range tensors {
		m, s := splitModule(t.Name)
		if modules[m] == nil {
			modules[m] = map[string]TensorInfo{}
		}
		modules[m][s] = t
	}
	formats := make(map[string]string, len(modules))
	for m, ts := range modules {
		formats[m] = detectFormat(ts)
	}
	out := &Classification{Tensors: make([]Classified, 0, len(tensors))}
	warned := map[string]bool{}
	warn := func(key, msg string) {
		if !warned[key] {
			warned[key] = true
			out.Warnings = append(out.Warnings, msg)
		}
	}
	for _, t := range tensors {
		m, s := splitModule(t.Name)
		c := Classified{TensorInfo: t, Module: m, Format: formats[m]}
		c.Role = roleOf(t, s, c.Format)
		if cfg.IsDraft() {
			c.Group = draftGroup(cfg, m, c.Role, warn)
		} else {
			c.Group = targetGroup(cfg, t.Name, m, c.Role, warn)
		}
		out.Tensors = append(out.Tensors, c)
	}
	return out
}

// stripTextPrefix removes the wrapper prefix of text-model tensors.
func stripTextPrefix(name string) string {
	for _, p := range modulePrefixes {
		if p != "" && strings.HasPrefix(name, p) {
			return strings.TrimPrefix(name, p)
		}
	}
	return name
}

func targetGroup(cfg *Config, name, module string, role Role, warn func(string, string)) Group {
	if strings.HasPrefix(name, "mtp.") || strings.Contains(name, "visual.") || strings.Contains(name, "vision_tower.") ||
		strings.HasPrefix(name, "vision_model.") {
		return GroupMTPVision
	}
	base := stripTextPrefix(module)
	switch base {
	case "embed_tokens":
		return GroupEmbedding
	case "lm_head":
		if role == RoleScalar {
			return GroupSmall
		}
		return GroupVocabHead
	case "norm":
		return GroupSmall
	}
	mm := layerRe.FindStringSubmatch(base)
	if mm == nil {
		return GroupUnknown
	}
	i, err := strconv.Atoi(mm[1])
	if err != nil || i >= len(cfg.Text.LayerTypes) {
		warn("layer-range", fmt.Sprintf("%s: layer index past num_hidden_layers (%d); counted as unknown", name, cfg.Text.NumHiddenLayers))
		return GroupUnknown
	}
	rest := mm[2]
	kind := cfg.Text.LayerTypes[i]
	sub, _, _ := strings.Cut(rest, ".")
	switch sub {
	case "input_layernorm", "post_attention_layernorm":
		return GroupSmall
	case "mlp":
		switch rest {
		case "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj":
			switch role {
			case RolePayload:
				return GroupMLPCodes
			case RoleBlockScales:
				return GroupMLPBlockScales
			}
			return GroupSmall
		}
		warn("moe", fmt.Sprintf("%s: MoE and other MLP variants are not budgeted yet; their tensors are counted as unknown", name))
		return GroupUnknown
	case "linear_attn":
		if kind != LinearAttention {
			warn("kind-"+mm[1], fmt.Sprintf("%s: a Gated DeltaNet tensor in layer %d, which layer_types makes %s", name, i, kind))
		}
		switch rest {
		case "linear_attn.in_proj_qkv", "linear_attn.in_proj_z", "linear_attn.out_proj":
			if role == RoleScalar {
				return GroupSmall
			}
			return GroupGDNProj
		case "linear_attn.in_proj_a", "linear_attn.in_proj_b", "linear_attn.conv1d", "linear_attn.A_log",
			"linear_attn.dt_bias", "linear_attn.norm":
			return GroupSmall
		}
	case "self_attn":
		if kind != FullAttention {
			warn("kind-"+mm[1], fmt.Sprintf("%s: an attention tensor in layer %d, which layer_types makes %s", name, i, kind))
		}
		switch rest {
		case "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj":
			if role == RoleScalar {
				return GroupSmall
			}
			return GroupAttnProj
		case "self_attn.q_norm", "self_attn.k_norm":
			return GroupSmall
		}
	}
	return GroupUnknown
}

func draftGroup(cfg *Config, module string, role Role, warn func(string, string)) Group {
	base := strings.TrimPrefix(module, "model.")
	if role == RoleScalar {
		return GroupDraftSmall
	}
	switch base {
	case "fc":
		return GroupDraftFC
	case "hidden_norm", "norm":
		return GroupDraftSmall
	case "markov_head.markov_w1":
		return GroupMarkovW1
	case "markov_head.markov_w2":
		return GroupMarkovW2
	case "embed_tokens":
		return GroupDraftEmbedding
	case "lm_head":
		return GroupDraftVocabHead
	}
	if strings.HasPrefix(base, "confidence_head.") {
		return GroupDraftSmall
	}
	mm := layerRe.FindStringSubmatch(base)
	if mm == nil {
		return GroupUnknown
	}
	if i, err := strconv.Atoi(mm[1]); err != nil || i >= cfg.Text.NumHiddenLayers {
		warn("layer-range", fmt.Sprintf("%s: layer index past num_hidden_layers (%d); counted as unknown", module, cfg.Text.NumHiddenLayers))
		return GroupUnknown
	}
	switch rest := mm[2]; rest {
	case "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj":
		return GroupDraftAttn
	case "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj":
		return GroupDraftMLP
	case "input_layernorm", "post_attention_layernorm", "self_attn.q_norm", "self_attn.k_norm":
		return GroupDraftSmall
	}
	return GroupUnknown
}

// checkInventory compares a checkpoint with the inventory its config
// implies: expected tensors that are absent (biases excepted: exports may
// drop them) and payload shapes that disagree with the config.
func checkInventory(cfg *Config, tensors []TensorInfo) []string {
	expected, err := Inventory(cfg)
	if err != nil {
		return []string{fmt.Sprintf("config.json: cannot derive the expected inventory: %v", err)}
	}
	have := make(map[string]TensorInfo, len(tensors))
	for _, t := range tensors {
		have[t.Name] = t
	}
	var missing, shapes []string
	for _, e := range expected {
		t, ok := have[e.Name]
		if !ok {
			if e.Kind != KindBias {
				missing = append(missing, e.Name)
			}
			continue
		}
		if got := logicalShape(t, have); got != nil && !slices.Equal(got, e.Shape) {
			shapes = append(shapes, fmt.Sprintf("%s %v (config implies %v)", e.Name, got, e.Shape))
		}
	}
	var out []string
	if len(missing) > 0 {
		out = append(out, fmt.Sprintf("%d tensor(s) the config implies are absent: %s", len(missing), listSome(missing, 5)))
	}
	if len(shapes) > 0 {
		out = append(out, fmt.Sprintf("%d tensor(s) have other shapes than the config implies: %s", len(shapes), listSome(shapes, 5)))
	}
	return out
}

// logicalShape undoes the packing of quantized payloads: NVFP4 U8 [out, in/2]
// → [out, in]; MLX U32 [out, in/8] → [out, in] (4-bit; other bit widths are
// not checked: nil).
func logicalShape(t TensorInfo, have map[string]TensorInfo) []int64 {
	s := slices.Clone(t.Shape)
	m, suffix := splitModule(t.Name)
	if suffix != ".weight" || len(s) != 2 {
		return s
	}
	switch t.DType {
	case safetensors.U8:
		if ws, ok := have[m+".weight_scale"]; ok && ws.DType == safetensors.F8E4M3 {
			s[1] *= 2
		}
	case safetensors.U32:
		if _, ok := have[m+".scales"]; ok {
			return nil
		}
	}
	return s
}

func listSome(xs []string, n int) string {
	if len(xs) <= n {
		return strings.Join(xs, ", ")
	}
	return strings.Join(xs[:n], ", ") + fmt.Sprintf(", … (%d more)", len(xs)-n)
}
