package quantize

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"lithos/convert"
	"lithos/formats/nvfp4"
	"lithos/formats/safetensors"
)

// maxRowElems bounds K so that one row's float32 buffers stay small (a row is
// the unit QuantizeRows works on): 2^24 elements = 64 MiB of float32.
const maxRowElems = 1 << 24

// item is the work for one source tensor.
type item struct {
	name     string // source tensor name
	module   string // quantized: name without ".weight"
	kind     convert.Kind
	quantize bool
	file     *safetensors.File
	src      safetensors.Tensor
	n, k     int64    // matrix view of the source: quantized [N, K]; kept [elements/last, last]
	outs     []string // output tensor names: weight, weight_scale, weight_scale_2 | the name
	reason   string   // why a kept tensor is kept
}

// plan is the checked conversion: every source tensor's item (sorted by
// name) and the output tensors in file order.
type plan struct {
	items []item
	specs []safetensors.TensorSpec
	// exclude lists the kept modules a ModelOpt consumer would otherwise
	// treat as quantizable (Linear and Embedding modules), sorted.
	exclude []string
}

var layerRE = regexp.MustCompile(`^layers\.(\d+)\.`)

// makePlan checks the checkpoint's tensors against the config and decides
// what happens to each. Errors name the tensor and the config key broken.
func makePlan(cfg *convert.Config, m *safetensors.Model) (*plan, error) {
	inv, err := convert.Inventory(cfg)
	if err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	want := make(map[string]convert.LogicalTensor, len(inv))
	for _, t := range inv {
		want[t.Name] = t
	}
	names := m.Names()
	have := make(map[string]bool, len(names))
	for _, n := range names {
		have[n] = true
	}
	if err := checkLayers(cfg, names); err != nil {
		return nil, err
	}
	var missing, extra []string
	for _, t := range inv {
		if !have[t.Name] {
			missing = append(missing, t.Name)
		}
	}
	for _, n := range names {
		if _, ok := want[n]; !ok {
			extra = append(extra, n)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("config.json and the tensors disagree: %d tensor(s) the config implies are missing: %s%s",
			len(missing), listSome(missing, 6), missingHint(cfg, missing))
	}
	if len(extra) > 0 {
		return nil, fmt.Errorf("config.json and the tensors disagree: %d tensor(s) are not part of the head the config describes: %s%s",
			len(extra), listSome(extra, 6), extraHint(cfg, extra))
	}
	p := &plan{}
	for _, t := range inv {
		f, st, _ := m.Lookup(t.Name)
		if !slices.Equal(st.Shape, t.Shape) {
			return nil, fmt.Errorf("config.json and the tensors disagree: tensor %s has shape %s; the config wants %s",
				t.Name, shapeString(st.Shape), shapeRule(cfg, t))
		}
		it := item{name: t.Name, kind: t.Kind, file: f, src: st}
		if t.Kind == convert.KindLinear {
			if err := checkLinear(t.Name, st); err != nil {
				return nil, err
			}
			it.quantize = true
			it.module = t.Module()
			it.n, it.k = st.Shape[0], st.Shape[1]
			it.outs = []string{it.module + ".weight", it.module + ".weight_scale", it.module + ".weight_scale_2"}
			p.specs = append(p.specs,
				safetensors.TensorSpec{Name: it.outs[0], DType: safetensors.U8, Shape: []int64{it.n, it.k / 2}},
				safetensors.TensorSpec{Name: it.outs[1], DType: safetensors.F8E4M3, Shape: []int64{it.n, it.k / nvfp4.BlockSize}},
				safetensors.TensorSpec{Name: it.outs[2], DType: safetensors.F32, Shape: []int64{}})
		} else {
			it.outs = []string{t.Name}
			it.reason = keepReason(t.Kind)
			it.n, it.k = matrixView(st.Shape)
			if err := checkKept(t.Name, st); err != nil {
				return nil, err
			}
			p.specs = append(p.specs, safetensors.TensorSpec{Name: t.Name, DType: st.DType, Shape: slices.Clone(st.Shape)})
			if t.Kind == convert.KindEmbedding || t.Kind == convert.KindHead {
				p.exclude = append(p.exclude, t.Module())
			}
		}
		p.items = append(p.items, it)
	}
	slices.SortFunc(p.items, func(a, b item) int { return strings.Compare(a.name, b.name) })
	slices.Sort(p.exclude)
	p.exclude = slices.Compact(p.exclude)
	p.specs = safetensors.PythonOrder(p.specs)
	return p, nil
}

// floatDTypes are the source dtypes the quantizer decodes exactly to float32.
var floatDTypes = []safetensors.DType{safetensors.BF16, safetensors.F16, safetensors.F32}

func checkLinear(name string, st safetensors.Tensor) error {
	if !slices.Contains(floatDTypes, st.DType) {
		return fmt.Errorf("tensor %s has dtype %s: quantize reads BF16, F16 or F32 linears (is the head already quantized?)", name, st.DType)
	}
	n, k := st.Shape[0], st.Shape[1]
	if n <= 0 || k <= 0 {
		return fmt.Errorf("tensor %s has shape %s: an empty matrix cannot be quantized", name, shapeString(st.Shape))
	}
	if k%nvfp4.BlockSize != 0 {
		return fmt.Errorf("tensor %s has shape %s: its input dimension K=%d is not a multiple of the NVFP4 group size %d", name, shapeString(st.Shape), k, nvfp4.BlockSize)
	}
	if k > maxRowElems {
		return fmt.Errorf("tensor %s has shape %s: rows of K=%d elements exceed the %d quantize handles", name, shapeString(st.Shape), k, maxRowElems)
	}
	return nil
}

func checkKept(name string, st safetensors.Tensor) error {
	if slices.Contains(floatDTypes, st.DType) && len(st.Shape) > 0 && st.Shape[len(st.Shape)-1] > maxRowElems {
		return fmt.Errorf("tensor %s has shape %s: rows of %d elements exceed the %d quantize handles", name, shapeString(st.Shape), st.Shape[len(st.Shape)-1], maxRowElems)
	}
	return nil
}

// matrixView returns [product of leading dims, last dim] (a scalar is [1, 1]).
func matrixView(shape []int64) (n, k int64) {
	if len(shape) == 0 {
		return 1, 1
	}
	n = 1
	for _, d := range shape[:len(shape)-1] {
		n *= d
	}
	return n, shape[len(shape)-1]
}

func keepReason(k convert.Kind) string {
	switch k {
	case convert.KindEmbedding:
		return "gathered table (one row per draft step): kept in source precision"
	case convert.KindNorm:
		return "norm: kept in source precision"
	case convert.KindHead:
		return "confidence head: kept in source precision"
	case convert.KindBias:
		return "bias: kept in source precision"
	}
	return "not a linear: kept in source precision"
}

// checkLayers compares the layers.{i}.* indices present with
// num_hidden_layers, for a message that names the key.
func checkLayers(cfg *convert.Config, names []string) error {
	idx := map[int]bool{}
	hi := -1
	for _, n := range names {
		if m := layerRE.FindStringSubmatch(n); m != nil {
			i, err := strconv.Atoi(m[1])
			if err != nil || i > 1<<20 {
				return fmt.Errorf("tensor %s: layer index %s is not plausible", n, m[1])
			}
			idx[i] = true
			hi = max(hi, i)
		}
	}
	L := cfg.Text.NumHiddenLayers
	if hi+1 > L {
		return fmt.Errorf("config.json and the tensors disagree: num_hidden_layers is %d but the checkpoint has layers.%d.* (%d layer indices present)", L, hi, len(idx))
	}
	if hi+1 < L {
		return fmt.Errorf("config.json and the tensors disagree: num_hidden_layers is %d but the checkpoint's last layer is layers.%d.* (layers.%d.* and above are missing)", L, hi, hi+1)
	}
	return nil
}

func missingHint(cfg *convert.Config, missing []string) string {
	for _, n := range missing {
		switch {
		case strings.HasPrefix(n, "markov_head."):
			return fmt.Sprintf(" (the config's markov_rank %d implies a Markov head)", cfg.Draft.MarkovRank)
		case strings.HasPrefix(n, "confidence_head."):
			return " (the config sets enable_confidence_head)"
		}
	}
	return ""
}

func extraHint(cfg *convert.Config, extra []string) string {
	for _, n := range extra {
		switch {
		case strings.HasPrefix(n, "markov_head.") && cfg.Draft.MarkovRank == 0:
			return " (the config has no markov_rank, so no Markov head)"
		case strings.HasPrefix(n, "confidence_head.") && !cfg.Draft.EnableConfidenceHead:
			return " (the config does not set enable_confidence_head)"
		case n == "embed_tokens.weight" || n == "lm_head.weight":
			return " (the head uses the target's embedding and lm_head; heads with their own are not supported)"
		}
	}
	return " (DSpark tensor names: qwen35-and-quant.md §D.4)"
}

// shapeRule spells out the config keys behind a tensor's expected shape.
func shapeRule(cfg *convert.Config, t convert.LogicalTensor) string {
	tc, d := &cfg.Text, cfg.Draft
	H := fmt.Sprintf("hidden_size=%d", tc.HiddenSize)
	q := fmt.Sprintf("num_attention_heads=%d × head_dim=%d", tc.NumAttentionHeads, tc.HeadDim)
	if tc.AttnOutputGate {
		q += " × 2 (output gate)"
	}
	kv := fmt.Sprintf("num_key_value_heads=%d × head_dim=%d", tc.NumKeyValueHeads, tc.HeadDim)
	I := fmt.Sprintf("intermediate_size=%d", tc.IntermediateSize)
	vr := fmt.Sprintf("vocab_size=%d, markov_rank=%d", tc.VocabSize, d.MarkovRank)
	var rule string
	n := t.Name
	switch {
	case n == "fc.weight":
		rule = fmt.Sprintf("%s, len(target_layer_ids)=%d × target_hidden_size=%d", H, len(d.TargetLayerIDs), d.TargetHiddenSize)
	case strings.HasSuffix(n, "q_norm.weight"), strings.HasSuffix(n, "k_norm.weight"):
		rule = fmt.Sprintf("head_dim=%d", tc.HeadDim)
	case strings.HasSuffix(n, "norm.weight"):
		rule = H
	case strings.HasSuffix(n, "q_proj.weight"):
		rule = q + ", " + H
	case strings.HasSuffix(n, "k_proj.weight"), strings.HasSuffix(n, "v_proj.weight"):
		rule = kv + ", " + H
	case strings.HasSuffix(n, "o_proj.weight"):
		rule = H + ", " + q
	case strings.HasSuffix(n, "gate_proj.weight"), strings.HasSuffix(n, "up_proj.weight"):
		rule = I + ", " + H
	case strings.HasSuffix(n, "down_proj.weight"):
		rule = H + ", " + I
	case strings.HasPrefix(n, "markov_head."):
		rule = vr
	case n == "confidence_head.proj.weight":
		rule = "1, " + H
		if d.ConfidenceHeadWithMarkov {
			rule += fmt.Sprintf(" + markov_rank=%d (confidence_head_with_markov)", d.MarkovRank)
		}
	}
	s := shapeString(t.Shape)
	if rule != "" {
		s += " = [" + rule + "]"
	}
	return s
}

func listSome(xs []string, n int) string {
	if len(xs) <= n {
		return strings.Join(xs, ", ")
	}
	return strings.Join(xs[:n], ", ") + fmt.Sprintf(", … (%d more)", len(xs)-n)
}
