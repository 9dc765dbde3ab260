package formats

import (
	"fmt"
	"sort"
	"strings"
)

// Tensor is what detection needs of one checkpoint tensor: its safetensors dtype string
// ("BF16", "U8", "F8_E4M3", …) and shape.
type Tensor struct {
	DType string
	Shape []int64
}

// Group is one module's tensors, keyed by the suffix after the module path: "weight",
// "weight_scale", "weight_scale_2", "input_scale", "scales", "biases", "qweight", "qzeros",
// "g_idx", "bias", … (lithos-metal.md §1.8 groups <base>.weight with its side tensors).
type Group struct {
	Name    string // module path, e.g. "model.language_model.layers.0.mlp.down_proj"
	Tensors map[string]Tensor
}

// Layout is a detected weight format with its logical geometry.
type Layout struct {
	Format     Format
	N, K       int64  // logical [N, K] = [out, in]; a 1-D weight is [1, K]
	GroupSize  int    // elements per scale group along K: 16 NVFP4, G for INT8/INT4; 0 otherwise
	ScaleDType string // INT8/INT4 scale (and MLX bias) dtype; "" otherwise
	ZeroOffset int    // GPTQ: added to stored zeros (1 for v1 checkpoints, 0 for gptq_v2)
	// Ignored lists side tensors present but not used by the weight format: input_scale
	// (activations stay BF16/FP32), k_scale/v_scale (KV cache stays BF16) and bias (a separate
	// Linear parameter the caller handles).
	Ignored []string
}

// ignorable side tensors: present in checkpoints, not part of the weight's numerics.
var ignorable = map[string]bool{"input_scale": true, "k_scale": true, "v_scale": true, "bias": true}

// Detect identifies the format of g's weight from its tensors' dtypes and shapes and the
// quantization config s (resolved for g.Name with s.Module). The table is docs/formats.md §
// "Detection":
//
//	weight BF16/F16/F32 alone                                     → bf16 / f16 / f32
//	weight U8 + weight_scale F8_E4M3 + weight_scale_2 F32 scalar   → nvfp4 (ModelOpt)
//	weight U32 + scales U8 [N, K/16], no biases                    → nvfp4_mlx
//	weight U32 + scales + biases (BF16/F16/F32)                    → int4_affine (MLX, 4-bit)
//	weight F8_E4M3 + weight_scale F32 scalar                       → fp8_e4m3
//	weight I8 + weight_scale F16 [N, K/G]                          → int8
//	qweight I32 [K, N/8] + qzeros + scales F16 [K/G, N]            → int4_awq
//	qweight I32 [K/8, N] + qzeros + scales F16 [K/G, N] (+ g_idx)  → int4_gptq
//
// It returns an error naming the module, tensor and rule for anything else: missing or
// unexpected side tensors, shapes that disagree, and the combinations lithos does not support
// (compressed-tensors NVFP4, FP8 per-channel or block scales, MLX bits ≠ 4 or mxfp4, AWQ
// without zero points or not "gemm", GPTQ act-order, AWQ-smoothed NVFP4 with pre_quant_scale),
// or a config that contradicts the tensors.
func Detect(g Group, s Scheme) (Layout, error) {
	l, err := detect(g, s.Module(g.Name))
	if err != nil {
		return Layout{}, fmt.Errorf("detect format of %s: %w", g.Name, err)
	}
	return l, nil
}

func detect(g Group, s Scheme) (Layout, error) {
	t := g.Tensors
	var l Layout
	for name := range t {
		if ignorable[name] {
			l.Ignored = append(l.Ignored, name)
		}
	}
	sort.Strings(l.Ignored)
	if _, ok := t["pre_quant_scale"]; ok {
		return l, fmt.Errorf("tensor pre_quant_scale: AWQ-smoothed exports (NVFP4_AWQ, W4A16_AWQ) scale activations per channel; not supported")
	}
	if _, ok := t["weight_packed"]; ok {
		return l, fmt.Errorf("tensor weight_packed: compressed-tensors NVFP4 (weight_global_scale stored as a divisor) is not supported; use a ModelOpt export")
	}
	if _, ok := t["weight_scale_inv"]; ok {
		return l, fmt.Errorf("tensor weight_scale_inv: block-scaled FP8 (quant_method \"fp8\", weight_block_size) is not supported")
	}
	if s.Method == "bitsandbytes" || s.Method == "compressed-tensors" || s.Method == "fp8" || s.Method == "hqq" || s.Method == "eetq" {
		if hasQuantTensors(t) {
			return l, fmt.Errorf("quantization_config quant_method %q is not supported", s.Method)
		}
	}
	if s.Method == "none" && hasQuantTensors(t) {
		return l, fmt.Errorf("the quantization config leaves this module unquantized, but its tensors %s are quantized", names(t))
	}
	if _, ok := t["qweight"]; ok {
		return detectPacked(t, s, l)
	}
	w, ok := t["weight"]
	if !ok {
		return l, fmt.Errorf("no weight or qweight tensor among %s", names(t))
	}
	switch w.DType {
	case "BF16", "F16", "F32":
		if err := only(t, "weight"); err != nil {
			return l, fmt.Errorf("%s weight: %w", w.DType, err)
		}
		// Float weights are accepted whatever the config says: quantizers only convert Linear
		// layers, so norms, convolutions and unlisted modules stay in floats under any scheme.
		n, k, err := matrix(w.Shape)
		if err != nil {
			return l, fmt.Errorf("weight: %w", err)
		}
		l.N, l.K = n, k
		l.Format = map[string]Format{"BF16": BF16, "F16": F16, "F32": F32}[w.DType]
		return l, nil
	case "U8":
		return detectNVFP4(t, s, l)
	case "U32":
		return detectMLX(t, s, l)
	case "F8_E4M3":
		return detectFP8(t, s, l)
	case "I8":
		return detectInt8(t, s, l)
	}
	return l, fmt.Errorf("weight dtype %s: no supported format stores weights as %s", w.DType, w.DType)
}

func hasQuantTensors(t map[string]Tensor) bool {
	if _, ok := t["qweight"]; ok {
		return true
	}
	w, ok := t["weight"]
	return ok && w.DType != "BF16" && w.DType != "F16" && w.DType != "F32"
}

// only checks that t holds no tensors besides the allowed ones and the ignorable ones.
func only(t map[string]Tensor, allowed ...string) error {
	var extra []string
	for name := range t {
		if !ignorable[name] && !contains(allowed, name) {
			extra = append(extra, name)
		}
	}
	if len(extra) > 0 {
		sort.Strings(extra)
		return fmt.Errorf("unexpected tensors %s (this format has %s)", strings.Join(extra, ", "), strings.Join(allowed, ", "))
	}
	return nil
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func names(t map[string]Tensor) string {
	ns := sortedKeys(t)
	return "[" + strings.Join(ns, ", ") + "]"
}

// matrix returns the logical [N, K] of a weight shape: K the last dimension, N the product of
// the others (1 for a 1-D tensor).
func matrix(shape []int64) (n, k int64, err error) {
	if len(shape) == 0 {
		return 0, 0, fmt.Errorf("shape []: a weight needs at least one dimension")
	}
	n = 1
	for _, d := range shape[:len(shape)-1] {
		if d <= 0 {
			return 0, 0, fmt.Errorf("shape %v: dimensions must be positive", shape)
		}
		n *= d
	}
	k = shape[len(shape)-1]
	if k <= 0 {
		return 0, 0, fmt.Errorf("shape %v: dimensions must be positive", shape)
	}
	return n, k, nil
}

// need returns tensor name of dtype one of dtypes.
func need(t map[string]Tensor, name string, dtypes ...string) (Tensor, error) {
	x, ok := t[name]
	if !ok {
		return x, fmt.Errorf("missing tensor %s", name)
	}
	if !contains(dtypes, x.DType) {
		return x, fmt.Errorf("tensor %s has dtype %s, want %s", name, x.DType, strings.Join(dtypes, " or "))
	}
	return x, nil
}

func isScalar(shape []int64) bool {
	return len(shape) == 0 || (len(shape) == 1 && shape[0] == 1)
}

func shapeIs(shape []int64, want ...int64) bool {
	if len(shape) != len(want) {
		return false
	}
	for i := range want {
		if shape[i] != want[i] {
			return false
		}
	}
	return true
}

func detectNVFP4(t map[string]Tensor, s Scheme, l Layout) (Layout, error) {
	w := t["weight"]
	if err := only(t, "weight", "weight_scale", "weight_scale_2"); err != nil {
		return l, fmt.Errorf("U8 weight (NVFP4): %w", err)
	}
	if len(w.Shape) != 2 || w.Shape[0] <= 0 || w.Shape[1] <= 0 {
		return l, fmt.Errorf("U8 weight (NVFP4) shape %v: want [N, K/2]", w.Shape)
	}
	bs, err := need(t, "weight_scale", "F8_E4M3")
	if err != nil {
		return l, fmt.Errorf("U8 weight (NVFP4): %w (swizzled or TensorRT-LLM scale layouts are not supported)", err)
	}
	ts, err := need(t, "weight_scale_2", "F32")
	if err != nil {
		return l, fmt.Errorf("U8 weight (NVFP4): %w", err)
	}
	if !isScalar(ts.Shape) {
		return l, fmt.Errorf("weight_scale_2 shape %v: want a scalar ([] or [1])", ts.Shape)
	}
	n, k := w.Shape[0], 2*w.Shape[1]
	if k%16 != 0 || !shapeIs(bs.Shape, n, k/16) {
		return l, fmt.Errorf("weight_scale shape %v: want [%d, %d] (one E4M3 scale per 16 of K=%d)", bs.Shape, n, k/16, k)
	}
	switch s.Method {
	case "", "modelopt":
		switch s.Algo {
		case "", "NVFP4", "W4A16_NVFP4", "W4A8_NVFP4_FP8":
		default:
			return l, fmt.Errorf("tensors are NVFP4 but the config's quant_algo is %q", s.Algo)
		}
		if s.GroupSize != 0 && s.GroupSize != 16 {
			return l, fmt.Errorf("config group_size %d: NVFP4 uses 16", s.GroupSize)
		}
	default:
		return l, fmt.Errorf("tensors are ModelOpt NVFP4 but the config's method is %q", s.Method)
	}
	l.Format, l.N, l.K, l.GroupSize = NVFP4, n, k, 16
	return l, nil
}

func detectMLX(t map[string]Tensor, s Scheme, l Layout) (Layout, error) {
	w := t["weight"]
	if len(w.Shape) != 2 || w.Shape[0] <= 0 || w.Shape[1] <= 0 {
		return l, fmt.Errorf("U32 weight (MLX) shape %v: want [N, K·bits/32]", w.Shape)
	}
	sc, ok := t["scales"]
	if !ok {
		return l, fmt.Errorf("U32 weight (MLX): missing tensor scales")
	}
	if s.Method != "" && s.Method != "mlx" {
		return l, fmt.Errorf("tensors are MLX-quantized but the config's method is %q", s.Method)
	}
	n := w.Shape[0]
	if !(len(sc.Shape) == 2 && sc.Shape[0] == n && sc.Shape[1] > 0) {
		return l, fmt.Errorf("scales shape %v: want [%d, groups]", sc.Shape, n)
	}
	if _, hasBias := t["biases"]; !hasBias {
		// MLX floating-point modes: nvfp4 (E4M3 scales, group 16) is supported.
		if err := only(t, "weight", "scales"); err != nil {
			return l, fmt.Errorf("U32 weight (MLX nvfp4): %w", err)
		}
		if sc.DType != "U8" {
			return l, fmt.Errorf("U32 weight with %s scales and no biases: want U8 (E4M3) scales for MLX nvfp4", sc.DType)
		}
		k := 8 * w.Shape[1]
		if s.Mode != "" && s.Mode != "nvfp4" && s.Mode != "affine" {
			return l, fmt.Errorf("MLX mode %q is not supported (nvfp4 and 4-bit affine are)", s.Mode)
		}
		if sc.Shape[1]*32 == k {
			return l, fmt.Errorf("scales shape %v: one scale per 32 of K=%d looks like MLX mxfp4 (E8M0 scales), which is not supported", sc.Shape, k)
		}
		if sc.Shape[1]*16 != k {
			return l, fmt.Errorf("scales shape %v: want [%d, %d] (one E4M3 scale per 16 of K=%d)", sc.Shape, n, k/16, k)
		}
		l.Format, l.N, l.K, l.GroupSize = NVFP4MLX, n, k, 16
		return l, nil
	}
	if err := only(t, "weight", "scales", "biases"); err != nil {
		return l, fmt.Errorf("U32 weight (MLX affine): %w", err)
	}
	b := t["biases"]
	if !contains([]string{"BF16", "F16", "F32"}, sc.DType) || b.DType != sc.DType {
		return l, fmt.Errorf("scales %s and biases %s: want both BF16, F16 or F32", sc.DType, b.DType)
	}
	if !shapeIs(b.Shape, sc.Shape...) {
		return l, fmt.Errorf("biases shape %v differs from scales shape %v", b.Shape, sc.Shape)
	}
	if s.Mode != "" && s.Mode != "affine" {
		return l, fmt.Errorf("MLX mode %q with biases: only affine has biases", s.Mode)
	}
	bits := s.Bits
	if bits == 0 {
		bits = 4 // mlx-lm default; the shapes alone cannot tell bits from group size
	}
	if bits != 4 {
		return l, fmt.Errorf("MLX affine bits=%d: only 4-bit is supported", bits)
	}
	k := 8 * w.Shape[1]
	if k%sc.Shape[1] != 0 {
		return l, fmt.Errorf("scales shape %v: %d groups do not divide K=%d", sc.Shape, sc.Shape[1], k)
	}
	g := k / sc.Shape[1]
	if g != 32 && g != 64 && g != 128 {
		return l, fmt.Errorf("MLX group size %d (K=%d, %d groups): want 32, 64 or 128", g, k, sc.Shape[1])
	}
	if s.GroupSize != 0 && int64(s.GroupSize) != g {
		return l, fmt.Errorf("config group_size %d but the tensors have groups of %d", s.GroupSize, g)
	}
	l.Format, l.N, l.K, l.GroupSize, l.ScaleDType = Int4, n, k, int(g), sc.DType
	return l, nil
}

func detectFP8(t map[string]Tensor, s Scheme, l Layout) (Layout, error) {
	if err := only(t, "weight", "weight_scale"); err != nil {
		return l, fmt.Errorf("F8_E4M3 weight: %w", err)
	}
	w := t["weight"]
	sc, err := need(t, "weight_scale", "F32")
	if err != nil {
		return l, fmt.Errorf("F8_E4M3 weight: %w", err)
	}
	n, k, err := matrix(w.Shape)
	if err != nil {
		return l, fmt.Errorf("weight: %w", err)
	}
	if !isScalar(sc.Shape) {
		return l, fmt.Errorf("weight_scale shape %v: only a per-tensor scale ([] or [1]) is supported (per-channel and block FP8 are not)", sc.Shape)
	}
	switch s.Method {
	case "", "modelopt":
		if s.Algo != "" && s.Algo != "FP8" {
			return l, fmt.Errorf("tensors are FP8 per-tensor but the config's quant_algo is %q", s.Algo)
		}
	default:
		return l, fmt.Errorf("tensors are FP8 but the config's method is %q", s.Method)
	}
	l.Format, l.N, l.K = FP8, n, k
	return l, nil
}

func detectInt8(t map[string]Tensor, s Scheme, l Layout) (Layout, error) {
	if err := only(t, "weight", "weight_scale"); err != nil {
		return l, fmt.Errorf("I8 weight: %w", err)
	}
	w := t["weight"]
	sc, err := need(t, "weight_scale", "F16")
	if err != nil {
		return l, fmt.Errorf("I8 weight: %w", err)
	}
	if len(w.Shape) != 2 || w.Shape[0] <= 0 || w.Shape[1] <= 0 {
		return l, fmt.Errorf("I8 weight shape %v: want [N, K]", w.Shape)
	}
	n, k := w.Shape[0], w.Shape[1]
	if len(sc.Shape) != 2 || sc.Shape[0] != n || sc.Shape[1] <= 0 || k%sc.Shape[1] != 0 {
		return l, fmt.Errorf("weight_scale shape %v: want [%d, K/G] with G dividing K=%d", sc.Shape, n, k)
	}
	if s.Method != "" {
		return l, fmt.Errorf("I8 weights with F16 group scales are lithos's own format; the config's method %q does not describe them", s.Method)
	}
	l.Format, l.N, l.K, l.GroupSize, l.ScaleDType = Int8, n, k, int(k/sc.Shape[1]), "F16"
	return l, nil
}

// detectPacked handles AutoAWQ and AutoGPTQ tensors (qweight/qzeros/scales[/g_idx]).
func detectPacked(t map[string]Tensor, s Scheme, l Layout) (Layout, error) {
	qw, err := need(t, "qweight", "I32")
	if err != nil {
		return l, err
	}
	qz, err := need(t, "qzeros", "I32")
	if err != nil {
		return l, err
	}
	sc, err := need(t, "scales", "F16")
	if err != nil {
		return l, err
	}
	if len(qw.Shape) != 2 || len(qz.Shape) != 2 || len(sc.Shape) != 2 {
		return l, fmt.Errorf("qweight %v, qzeros %v, scales %v: want 2-D tensors", qw.Shape, qz.Shape, sc.Shape)
	}
	for _, d := range [][]int64{qw.Shape, qz.Shape, sc.Shape} {
		if d[0] <= 0 || d[1] <= 0 {
			return l, fmt.Errorf("qweight %v, qzeros %v, scales %v: every dimension must be positive", qw.Shape, qz.Shape, sc.Shape)
		}
	}
	if s.Bits != 0 && s.Bits != 4 {
		return l, fmt.Errorf("%s bits=%d: only 4-bit is supported", s.Method, s.Bits)
	}
	n := sc.Shape[1]
	groups := sc.Shape[0]
	var awq bool
	switch {
	case qw.Shape[1]*8 == n:
		awq = true
	case qw.Shape[1] == n:
		awq = false
	default:
		return l, fmt.Errorf("qweight shape %v and scales shape %v: neither AWQ [K, N/8] nor GPTQ [K/8, N] packing", qw.Shape, sc.Shape)
	}
	if !shapeIs(qz.Shape, groups, n/8) || n%8 != 0 {
		return l, fmt.Errorf("qzeros shape %v: want [%d, %d]", qz.Shape, groups, n/8)
	}
	if awq {
		if err := only(t, "qweight", "qzeros", "scales"); err != nil {
			return l, fmt.Errorf("AWQ: %w", err)
		}
		switch s.Method {
		case "", "awq":
		default:
			return l, fmt.Errorf("tensors have AutoAWQ packing but the config's method is %q", s.Method)
		}
		if s.Version != "" && s.Version != "gemm" {
			return l, fmt.Errorf("AWQ version %q: only \"gemm\" packing is supported", s.Version)
		}
		if s.NoZeroPoint {
			return l, fmt.Errorf("AWQ zero_point=false is not supported")
		}
		k := qw.Shape[0]
		if k%groups != 0 {
			return l, fmt.Errorf("scales shape %v: %d groups do not divide K=%d", sc.Shape, groups, k)
		}
		g := k / groups
		if s.GroupSize > 0 && int64(s.GroupSize) != g {
			return l, fmt.Errorf("config group_size %d but the tensors have groups of %d", s.GroupSize, g)
		}
		l.Format, l.N, l.K, l.GroupSize, l.ScaleDType = Int4AWQ, n, k, int(g), "F16"
		return l, nil
	}
	if err := only(t, "qweight", "qzeros", "scales", "g_idx"); err != nil {
		return l, fmt.Errorf("GPTQ: %w", err)
	}
	switch s.Method {
	case "", "gptq":
	default:
		return l, fmt.Errorf("tensors have AutoGPTQ packing but the config's method is %q", s.Method)
	}
	if s.DescAct {
		return l, fmt.Errorf("GPTQ desc_act=true (act-order) is not supported: its groups are not contiguous along K")
	}
	k := 8 * qw.Shape[0]
	if gi, ok := t["g_idx"]; ok {
		if gi.DType != "I32" || !shapeIs(gi.Shape, k) {
			return l, fmt.Errorf("g_idx %s %v: want I32 [%d]", gi.DType, gi.Shape, k)
		}
	}
	if k%groups != 0 {
		return l, fmt.Errorf("scales shape %v: %d groups do not divide K=%d", sc.Shape, groups, k)
	}
	g := k / groups
	if s.GroupSize > 0 && int64(s.GroupSize) != g {
		return l, fmt.Errorf("config group_size %d but the tensors have groups of %d", s.GroupSize, g)
	}
	if s.GroupSize == -1 && groups != 1 {
		return l, fmt.Errorf("config group_size -1 (one group per row) but scales has %d groups", groups)
	}
	l.Format, l.N, l.K, l.GroupSize, l.ScaleDType = Int4GPTQ, n, k, int(g), "F16"
	l.ZeroOffset = 1
	switch s.Version {
	case "", "gptq":
	case "gptq_v2":
		l.ZeroOffset = 0
	default:
		return l, fmt.Errorf("GPTQ checkpoint_format %q: want \"gptq\" or \"gptq_v2\"", s.Version)
	}
	return l, nil
}
