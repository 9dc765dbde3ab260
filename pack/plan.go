package pack

import (
	"encoding/binary"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"

	"lithos/convert"
	"lithos/formats"
	"lithos/formats/nvfp4"
	"lithos/formats/safetensors"
	"lithos/manifests"
	"lithos/pack/blm"
)

// entry is one tensor of the weights file: its manifest record (offset, length and sha256 are
// filled in by layout and write) and where its bytes come from.
type entry struct {
	rec   manifests.BundleTensor
	ck    *checkpoint
	geom  blm.Geometry // BLM
	stack blm.Stack    // BLM
	segs  []segSource  // BLM: one per stack segment
	plain tensorRef    // plain
}

// segSource is where one stack segment's stored tensors live.
type segSource struct {
	codes, scales, biases *tensorRef
}

// readBytes is the checkpoint bytes an entry reads.
func (e *entry) readBytes() int64 { return e.rec.StoredBytes }

// linear is one checkpoint matrix before stacking.
type linear struct {
	module  string // checkpoint module path ("model.language_model.layers.0.mlp.gate_proj")
	short   string // without the text prefix ("layers.0.mlp.gate_proj")
	group   string
	spec    blm.Spec
	geom    blm.Geometry // of the matrix alone
	src     segSource
	scale   float32
	tensors []string // every checkpoint tensor consumed
	stored  int64
}

// stackRule fuses sibling matrices of one layer that the runtime multiplies by the same input:
// lithos-metal.md §2.4 (GDN z+qkv and a+b, attention q+k+v, MLP gate/up interleaved in chunks of
// R/2 rows for a fused SwiGLU epilogue).
type stackRule struct {
	parent  string   // "linear_attn", "self_attn", "mlp"
	members []string // in packed order
	name    string   // runtime name of the stack within parent
	mode    blm.StackMode
}

var stackRules = []stackRule{
	{"linear_attn", []string{"in_proj_z", "in_proj_qkv"}, "in_proj_zqkv", blm.Concat},
	{"linear_attn", []string{"in_proj_a", "in_proj_b"}, "in_proj_ab", blm.Concat},
	{"self_attn", []string{"q_proj", "k_proj", "v_proj"}, "qkv", blm.Concat},
	{"mlp", []string{"gate_proj", "up_proj"}, "gate_up", blm.Interleave},
}

var layerModule = regexp.MustCompile(`^(layers\.\d+\.)([a-z_]+)\.([A-Za-z_0-9]+)$`)

// sideSuffixes are the tensors of a linear module (formats.Group keys).
var sideSuffixes = []string{"weight", "weight_scale", "weight_scale_2", "scales", "biases", "qweight", "qzeros", "g_idx", "input_scale", "k_scale", "v_scale"}

// ignoredScalars are side tensors the runtime never reads, wherever they sit.
var ignoredScalars = map[string]string{
	"input_scale": "activation scale (input_scale): activations stay BF16/FP32",
	"k_scale":     "KV-cache scale (k_scale): the KV cache stays BF16",
	"v_scale":     "KV-cache scale (v_scale): the KV cache stays BF16",
}

// planOptions tune planModel.
type planOptions struct {
	// validateOnly checks the inventory and formats but lets float linears of any width through
	// (a draft about to be re-quantized may hold F32 linears the packer cannot place).
	validateOnly bool
}

// planModel checks a checkpoint against its config's inventory and lays out its bundle tensors
// in inventory order (stacks at their first member's place). It returns the tensors the bundle
// leaves out with their reasons. Every error names the tensor and the rule.
func planModel(ck *checkpoint, opt planOptions) ([]*entry, []manifests.SkippedTensor, error) {
	cfg := ck.cfg
	inv, err := convert.Inventory(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: config.json: %w", ck.model, err)
	}
	infos := make([]convert.TensorInfo, 0, len(ck.names))
	for _, n := range ck.names {
		r := ck.tensors[n]
		infos = append(infos, convert.TensorInfo{Name: n, DType: r.t.DType, Shape: r.t.Shape, Bytes: r.t.Size})
	}
	groups := map[string]convert.Group{}
	for _, c := range convert.Classify(cfg, infos).Tensors {
		groups[c.Name] = c.Group
	}
	prefix := ""
	if !cfg.IsDraft() {
		prefix = cfg.TextPrefix()
	}
	short := func(name string) string { return strings.TrimPrefix(name, prefix) }
	runtimeName := func(s string) string {
		if ck.model == manifests.ModelDraft {
			return "draft." + s
		}
		return s
	}

	consumed := map[string]bool{}
	var skipped []manifests.SkippedTensor
	skip := func(name, reason string) {
		r := ck.tensors[name]
		consumed[name] = true
		skipped = append(skipped, manifests.SkippedTensor{Model: ck.model, Name: name, DType: string(r.t.DType),
			Shape: append([]int64{}, r.t.Shape...), Bytes: r.t.Size, Reason: reason})
	}
	// Tensors never read in text decoding.
	for _, n := range ck.names {
		if groups[n] != convert.GroupMTPVision {
			continue
		}
		if strings.HasPrefix(n, "mtp.") {
			skip(n, "MTP head: not read (speculation uses a DSpark draft head)")
		} else {
			skip(n, "vision tower: not read in text decoding")
		}
	}

	type item struct {
		lin   *linear
		plain *entry
	}
	var items []item
	zeroCentred := !cfg.IsDraft() && (strings.HasPrefix(cfg.Text.ModelType, "qwen3_5") || cfg.Text.ModelType == "qwen3_next")
	var embed *tensorRef
	for _, e := range inv {
		if groups[e.Name] == convert.GroupMTPVision || strings.HasPrefix(e.Name, "mtp.") || strings.Contains(e.Name, "visual.") {
			continue
		}
		switch e.Kind {
		case convert.KindLinear, convert.KindHead:
			lin, err := planLinear(ck, e, groups, opt)
			if err != nil {
				return nil, nil, err
			}
			for _, t := range lin.tensors {
				consumed[t] = true
			}
			lin.short = short(lin.module)
			items = append(items, item{lin: lin})
		default:
			r, ok := ck.tensors[e.Name]
			if !ok {
				if e.Kind == convert.KindBias {
					continue // exports may drop biases
				}
				return nil, nil, fmt.Errorf("%s: tensor %s: config.json implies it (shape %v), but the checkpoint does not have it", ck.model, e.Name, e.Shape)
			}
			if !slices.Equal(r.t.Shape, e.Shape) {
				return nil, nil, fmt.Errorf("%s: tensor %s: shape %v, but config.json implies %v", ck.model, e.Name, r.t.Shape, e.Shape)
			}
			switch r.t.DType {
			case safetensors.BF16, safetensors.F16, safetensors.F32:
			default:
				return nil, nil, fmt.Errorf("%s: tensor %s: dtype %s: the bundle stores %s tensors as plain BF16/F16/F32 arrays; a quantized %s cannot be placed", ck.model, e.Name, r.t.DType, e.Kind, e.Kind)
			}
			consumed[e.Name] = true
			name := strings.TrimSuffix(short(e.Name), ".weight")
			transform := manifests.TransformNone
			switch {
			case zeroCentred && e.Kind == convert.KindNorm && !strings.HasSuffix(name, "linear_attn.norm"):
				transform = manifests.TransformOnePlus
			case !cfg.IsDraft() && strings.HasSuffix(name, "linear_attn.A_log"):
				transform = manifests.TransformNegExp
			}
			if e.Kind == convert.KindEmbedding && strings.HasSuffix(name, "embed_tokens") {
				ref := r
				embed = &ref
			}
			items = append(items, item{plain: &entry{ck: ck, plain: r, rec: manifests.BundleTensor{
				Name: runtimeName(name), Model: ck.model, Role: roleOf(e.Kind), Group: groupName(groups[e.Name]),
				Encoding: manifests.EncodingPlain, Format: string(r.t.DType), Shape: append([]int64{}, r.t.Shape...),
				Length: r.t.Size, StoredBytes: r.t.Size, Source: e.Name, Transform: transform,
			}}})
		}
	}
	// Whatever is left is either a scale the runtime ignores or not part of the model.
	for _, n := range ck.names {
		if consumed[n] {
			continue
		}
		_, suffix := splitSide(n)
		if reason, ok := ignoredScalars[suffix]; ok {
			skip(n, reason)
			continue
		}
		return nil, nil, fmt.Errorf("%s: tensor %s: not part of the model config.json describes (%s, %d layers); the bundle would not know where it goes",
			ck.model, n, cfg.Architecture(), cfg.Text.NumHiddenLayers)
	}
	if opt.validateOnly {
		return nil, skipped, nil
	}

	// Stack sibling matrices, emitting each stack at its first member's place.
	var lins []*linear
	for _, it := range items {
		if it.lin != nil {
			lins = append(lins, it.lin)
		}
	}
	stacks := map[*linear][]*linear{} // first member → members in packed order
	member := map[*linear]bool{}
	for _, rule := range stackRules {
		byLayer := map[string]map[string]*linear{}
		for _, l := range lins {
			m := layerModule.FindStringSubmatch(l.short)
			if m == nil || m[2] != rule.parent || !slices.Contains(rule.members, m[3]) {
				continue
			}
			if byLayer[m[1]] == nil {
				byLayer[m[1]] = map[string]*linear{}
			}
			byLayer[m[1]][m[3]] = l
		}
		for _, ms := range byLayer {
			var set []*linear
			for _, name := range rule.members {
				if l := ms[name]; l != nil {
					set = append(set, l)
				}
			}
			if len(set) != len(rule.members) || !stackable(set, rule.mode) {
				continue
			}
			first := set[0]
			for _, l := range lins { // the first in inventory order
				if slices.Contains(set, l) {
					first = l
					break
				}
			}
			stacks[first] = set
			for _, l := range set {
				member[l] = true
			}
		}
	}
	ruleOf := func(l *linear) stackRule {
		m := layerModule.FindStringSubmatch(l.short)
		for _, r := range stackRules {
			if m != nil && m[2] == r.parent && slices.Contains(r.members, m[3]) {
				return r
			}
		}
		return stackRule{}
	}
	var out []*entry
	for _, it := range items {
		if it.plain != nil {
			out = append(out, it.plain)
			continue
		}
		l := it.lin
		if set, ok := stacks[l]; ok {
			rule := ruleOf(l)
			m := layerModule.FindStringSubmatch(l.short)
			e, err := matrixEntry(ck, runtimeName(m[1]+rule.parent+"."+rule.name), rule.mode, set)
			if err != nil {
				return nil, nil, err
			}
			out = append(out, e)
			continue
		}
		if member[l] {
			continue
		}
		e, err := matrixEntry(ck, runtimeName(l.short), blm.Concat, []*linear{l})
		if err != nil {
			return nil, nil, err
		}
		out = append(out, e)
	}
	// A tied vocabulary head is the embedding matrix: pack it a second time as a BLM matrix.
	if !cfg.IsDraft() && cfg.Text.TieWordEmbeddings {
		if embed == nil {
			return nil, nil, fmt.Errorf("%s: tie_word_embeddings but no embed_tokens tensor", ck.model)
		}
		l, err := embeddingAsLinear(ck, *embed)
		if err != nil {
			return nil, nil, err
		}
		e, err := matrixEntry(ck, "lm_head", blm.Concat, []*linear{l})
		if err != nil {
			return nil, nil, err
		}
		out = append(out, e)
	}
	return out, skipped, nil
}

// splitSide splits a tensor name into module and side-tensor suffix ("weight", "input_scale",
// …); suffix is "" for parameters such as A_log.
func splitSide(name string) (module, suffix string) {
	for _, s := range sideSuffixes {
		if m, ok := strings.CutSuffix(name, "."+s); ok && m != "" {
			return m, s
		}
	}
	return name, ""
}

func roleOf(k convert.Kind) string {
	switch k {
	case convert.KindLinear, convert.KindHead:
		return manifests.RoleMatrix
	case convert.KindEmbedding:
		return manifests.RoleEmbedding
	case convert.KindNorm:
		return manifests.RoleNorm
	case convert.KindConv:
		return manifests.RoleConv
	case convert.KindBias:
		return manifests.RoleBias
	}
	return manifests.RoleParam
}

// groupName is the byte-budget group of a bundle tensor: the audit's group (docs/audit.md),
// with a matrix's codes and block scales counted together as "mlp".
func groupName(g convert.Group) string {
	switch g {
	case convert.GroupMLPCodes, convert.GroupMLPBlockScales:
		return "mlp"
	case "":
		return string(convert.GroupUnknown)
	}
	return string(g)
}

// planLinear detects one linear module's format and checks its logical shape.
func planLinear(ck *checkpoint, e convert.LogicalTensor, groups map[string]convert.Group, opt planOptions) (*linear, error) {
	module := e.Module()
	g := formats.Group{Name: module, Tensors: map[string]formats.Tensor{}}
	var present []string
	for _, s := range sideSuffixes {
		if r, ok := ck.tensors[module+"."+s]; ok {
			g.Tensors[s] = formats.Tensor{DType: string(r.t.DType), Shape: r.t.Shape}
			present = append(present, module+"."+s)
		}
	}
	if len(present) == 0 {
		return nil, fmt.Errorf("%s: tensor %s: config.json implies it (shape %v), but the checkpoint does not have it", ck.model, e.Name, e.Shape)
	}
	lay, err := formats.Detect(g, ck.scheme.Module(module))
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", ck.model, module, err)
	}
	if len(e.Shape) != 2 || lay.N != e.Shape[0] || lay.K != e.Shape[1] {
		return nil, fmt.Errorf("%s: tensor %s: logical shape [%d, %d] (%s), but config.json implies %v", ck.model, e.Name, lay.N, lay.K, lay.Format, e.Shape)
	}
	lin := &linear{module: module, group: groupName(groups[module+".weight"]), scale: 1}
	ref := func(s string) *tensorRef {
		r, ok := ck.tensors[module+"."+s]
		if !ok {
			return nil
		}
		lin.tensors = append(lin.tensors, r.t.Name)
		lin.stored += r.t.Size
		return &r
	}
	spec := blm.Spec{Format: lay.Format, N: lay.N, K: lay.K}
	switch lay.Format {
	case formats.BF16, formats.F16:
		lin.src.codes = ref("weight")
	case formats.F32:
		if !opt.validateOnly {
			return nil, fmt.Errorf("%s: %s: an F32 matrix: the BLM packer places bf16, f16, fp8_e4m3, int8, int4_affine and nvfp4 matrices; convert it to BF16 first", ck.model, module)
		}
		lin.src.codes = ref("weight")
	case formats.FP8:
		lin.src.codes = ref("weight")
		s, err := readScalar(ck, module+".weight_scale")
		if err != nil {
			return nil, err
		}
		lin.scale = s
		ref("weight_scale")
	case formats.Int8:
		spec.GroupSize, spec.ScaleType = lay.GroupSize, lay.ScaleDType
		lin.src.codes, lin.src.scales = ref("weight"), ref("weight_scale")
	case formats.Int4:
		spec.GroupSize, spec.ScaleType = lay.GroupSize, lay.ScaleDType
		lin.src.codes, lin.src.scales, lin.src.biases = ref("weight"), ref("scales"), ref("biases")
	case formats.NVFP4:
		lin.src.codes, lin.src.scales = ref("weight"), ref("weight_scale")
		s, err := readScalar(ck, module+".weight_scale_2")
		if err != nil {
			return nil, err
		}
		lin.scale = s
		ref("weight_scale_2")
		// Refuse a tensor scale stored with the divisor convention before
		// anything is written (docs/formats.md, the 448 check): the block
		// scales are 1/16 of the codes' bytes, read once here.
		if lin.src.scales != nil && !opt.validateOnly {
			sc := lin.src.scales
			b, err := sc.file.ReadTensor(sc.t)
			if err != nil {
				return nil, fmt.Errorf("%s: read %s: %w", ck.model, sc.t.Name, err)
			}
			if _, err := nvfp4.CheckConvention(b, s); err != nil {
				return nil, fmt.Errorf("%s: %s: %w", ck.model, module, err)
			}
		}
	case formats.NVFP4MLX:
		lin.src.codes, lin.src.scales = ref("weight"), ref("scales")
	default:
		return nil, fmt.Errorf("%s: %s: format %s: the BLM packer does not place it (AWQ/GPTQ must be repacked to int4_affine first, which lithos-pack does not do yet)", ck.model, module, lay.Format)
	}
	if lay.Format == formats.F32 {
		return lin, nil // validateOnly
	}
	lin.spec = spec
	if lin.geom, err = blm.NewGeometry(spec); err != nil {
		return nil, fmt.Errorf("%s: %s: %w", ck.model, module, err)
	}
	return lin, nil
}

// embeddingAsLinear treats a BF16/F16 embedding table as the tied vocabulary head's matrix.
func embeddingAsLinear(ck *checkpoint, r tensorRef) (*linear, error) {
	var f formats.Format
	switch r.t.DType {
	case safetensors.BF16:
		f = formats.BF16
	case safetensors.F16:
		f = formats.F16
	default:
		return nil, fmt.Errorf("%s: %s: tied vocabulary head of dtype %s: the BLM packer places BF16/F16 tables only", ck.model, r.t.Name, r.t.DType)
	}
	spec := blm.Spec{Format: f, N: r.t.Shape[0], K: r.t.Shape[1]}
	g, err := blm.NewGeometry(spec)
	if err != nil {
		return nil, fmt.Errorf("%s: %s as lm_head: %w", ck.model, r.t.Name, err)
	}
	ref := r
	module := strings.TrimSuffix(r.t.Name, ".weight")
	return &linear{module: module, short: "lm_head", group: string(convert.GroupVocabHead), spec: spec, geom: g,
		src: segSource{codes: &ref}, scale: 1, tensors: []string{r.t.Name}, stored: r.t.Size}, nil
}

// stackable reports whether matrices can share one packed matrix: same format, K, group size and
// scale dtype (so one geometry fits all), and for interleaving equal rows, a multiple of R/2.
func stackable(set []*linear, mode blm.StackMode) bool {
	a := set[0].geom
	for _, l := range set[1:] {
		b := l.geom
		if b.Format != a.Format || b.K != a.K || b.GroupSize != a.GroupSize || b.ScaleType != a.ScaleType || b.Lanes != a.Lanes {
			return false
		}
		if mode == blm.Interleave && b.N != a.N {
			return false
		}
	}
	return mode != blm.Interleave || a.N%(blm.BlockRows/2) == 0
}

// matrixEntry builds the BLM entry of one matrix or a stack of them.
func matrixEntry(ck *checkpoint, name string, mode blm.StackMode, set []*linear) (*entry, error) {
	st := blm.Stack{Mode: mode}
	if mode == blm.Interleave {
		st.Chunk = blm.BlockRows / 2
	}
	e := &entry{ck: ck}
	var stored int64
	rec := manifests.Stack{Mode: string(mode), Chunk: st.Chunk}
	for _, l := range set {
		seg := blm.Segment{Name: l.module + ".weight", Rows: l.geom.N, TensorScale: l.scale}
		st.Segments = append(st.Segments, seg)
		e.segs = append(e.segs, l.src)
		stored += l.stored
		rec.Segments = append(rec.Segments, manifests.StackSegment{Name: seg.Name, Rows: seg.Rows, TensorScale: seg.TensorScale, Tensors: slices.Clone(l.tensors)})
	}
	spec := set[0].spec
	spec.N = st.Rows()
	spec.Lanes = set[0].geom.Lanes
	g, err := blm.NewGeometry(spec)
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", ck.model, name, err)
	}
	if err := st.Check(); err != nil {
		return nil, fmt.Errorf("%s: %s: %w", ck.model, name, err)
	}
	scales, _ := st.RowScales()
	uniform := true
	for _, s := range scales {
		uniform = uniform && math.Float32bits(s) == math.Float32bits(scales[0])
	}
	e.geom, e.stack = g, st
	count := g.Blocks * int64(g.Rows)
	layout := layoutOf(g)
	e.rec = manifests.BundleTensor{
		Name: name, Model: ck.model, Role: manifests.RoleMatrix, Group: set[0].group,
		Encoding: manifests.EncodingBLM, Format: string(g.Format), Shape: []int64{g.N, g.K},
		Length: g.TotalBytes + 4*count, StoredBytes: stored,
		Layout: &layout, Stack: &rec,
		RowScales: &manifests.RowScales{Bytes: 4 * count, Count: count, Uniform: uniform},
	}
	return e, nil
}

// layoutOf and geometryOf convert between blm.Geometry and its manifest mirror.
func layoutOf(g blm.Geometry) manifests.BLMLayout {
	return manifests.BLMLayout{
		Format: string(g.Format), N: g.N, K: g.K, Rows: g.Rows, Lanes: g.Lanes, Fold: g.Fold, Steps: g.Steps,
		Stripe: g.Stripe, GroupSize: g.GroupSize, ScaleType: g.ScaleType, ScaleSlotBytes: g.ScaleSlotBytes,
		ScaleSlots: g.ScaleSlots, PayloadBytes: g.PayloadBytes, ScaleBytes: g.ScaleBytes, UnitBytes: g.UnitBytes,
		BlockBytes: g.BlockBytes, Blocks: g.Blocks, TotalBytes: g.TotalBytes, StoredBytes: g.StoredBytes,
		PaddingBytes: g.PaddingBytes,
	}
}

func geometryOf(l manifests.BLMLayout) blm.Geometry {
	return blm.Geometry{
		Format: formats.Format(l.Format), N: l.N, K: l.K, Rows: l.Rows, Lanes: l.Lanes, Fold: l.Fold, Steps: l.Steps,
		Stripe: l.Stripe, GroupSize: l.GroupSize, ScaleType: l.ScaleType, ScaleSlotBytes: l.ScaleSlotBytes,
		ScaleSlots: l.ScaleSlots, PayloadBytes: l.PayloadBytes, ScaleBytes: l.ScaleBytes, UnitBytes: l.UnitBytes,
		BlockBytes: l.BlockBytes, Blocks: l.Blocks, TotalBytes: l.TotalBytes, StoredBytes: l.StoredBytes,
		PaddingBytes: l.PaddingBytes,
	}
}

// stackOf converts a manifest stack to a blm.Stack.
func stackOf(s manifests.Stack) blm.Stack {
	st := blm.Stack{Mode: blm.StackMode(s.Mode), Chunk: s.Chunk}
	for _, g := range s.Segments {
		st.Segments = append(st.Segments, blm.Segment{Name: g.Name, Rows: g.Rows, TensorScale: g.TensorScale})
	}
	return st
}

// readScalar reads an F32 scalar ([] or [1]) tensor scale, which must be finite and positive.
func readScalar(ck *checkpoint, name string) (float32, error) {
	r, ok := ck.tensors[name]
	if !ok {
		return 0, fmt.Errorf("%s: tensor %s: missing", ck.model, name)
	}
	if r.t.DType != safetensors.F32 || r.t.Size != 4 {
		return 0, fmt.Errorf("%s: tensor %s: %s %v, want an F32 scalar", ck.model, name, r.t.DType, r.t.Shape)
	}
	var b [4]byte
	if _, err := r.file.Section(r.t).ReadAt(b[:], 0); err != nil {
		return 0, fmt.Errorf("%s: read %s: %w", ck.model, name, err)
	}
	v := math.Float32frombits(binary.LittleEndian.Uint32(b[:]))
	if !(v > 0) || math.IsInf(float64(v), 0) {
		return 0, fmt.Errorf("%s: tensor %s: tensor scale %v: must be finite and positive", ck.model, name, v)
	}
	return v, nil
}

// checkDraft refuses a draft head that cannot run with the target: its hidden size and the
// target hidden size its fc expects must be the target's, its vocabulary the target's (it uses
// the target's embedding and vocabulary head), its num_target_layers (when given) the target's
// depth, and its taps must be target layers.
func checkDraft(target, draft *convert.Config) error {
	t, d := target.Text, draft.Text
	if d.HiddenSize != t.HiddenSize {
		return fmt.Errorf("draft hidden_size %d ≠ target hidden_size %d: the draft reads the target's embedding and vocabulary head", d.HiddenSize, t.HiddenSize)
	}
	if draft.Draft.TargetHiddenSize != t.HiddenSize {
		return fmt.Errorf("draft target_hidden_size %d ≠ target hidden_size %d: its fc takes the target's hidden states", draft.Draft.TargetHiddenSize, t.HiddenSize)
	}
	if d.VocabSize != t.VocabSize {
		return fmt.Errorf("draft vocab_size %d ≠ target vocab_size %d: drafted tokens are verified by the target", d.VocabSize, t.VocabSize)
	}
	if n := draft.Draft.NumTargetLayers; n != 0 && n != t.NumHiddenLayers {
		return fmt.Errorf("draft num_target_layers %d ≠ target num_hidden_layers %d: the head was trained on another target", n, t.NumHiddenLayers)
	}
	for _, id := range draft.Draft.TargetLayerIDs {
		if id < -1 || id >= t.NumHiddenLayers {
			return fmt.Errorf("draft target_layer_ids: %d is not a target layer (-1 … %d)", id, t.NumHiddenLayers-1)
		}
	}
	return nil
}

// inventoryLinears detects the format of every linear (convert.KindLinear) the config implies.
func inventoryLinears(ck *checkpoint) ([]linearInfo, error) {
	inv, err := convert.Inventory(ck.cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: config.json: %w", ck.model, err)
	}
	var out []linearInfo
	for _, e := range inv {
		if e.Kind != convert.KindLinear || strings.HasPrefix(e.Name, "mtp.") || strings.Contains(e.Name, "visual.") {
			continue
		}
		module := e.Module()
		g := formats.Group{Name: module, Tensors: map[string]formats.Tensor{}}
		for _, s := range sideSuffixes {
			if r, ok := ck.tensors[module+"."+s]; ok {
				g.Tensors[s] = formats.Tensor{DType: string(r.t.DType), Shape: r.t.Shape}
			}
		}
		if len(g.Tensors) == 0 {
			return nil, fmt.Errorf("%s: tensor %s: config.json implies it (shape %v), but the checkpoint does not have it", ck.model, e.Name, e.Shape)
		}
		lay, err := formats.Detect(g, ck.scheme.Module(module))
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", ck.model, module, err)
		}
		out = append(out, linearInfo{module: module, format: lay.Format})
	}
	return out, nil
}
