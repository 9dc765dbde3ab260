package model

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"lithos/formats"
	"lithos/formats/bf16"
	"lithos/formats/f16"
	"lithos/formats/fp8"
	"lithos/formats/nvfp4"
	"lithos/formats/safetensors"
)

// MaxDenseBytes bounds the float32 weights LoadCheckpoint materialises (8 GiB): the dense
// path is the reference for small models; large ones run from packed bundles.
const MaxDenseBytes = 8 << 30

// LoadOptions tunes LoadCheckpoint.
type LoadOptions struct {
	// OnTensor, when set, sees every weight LoadCheckpoint decodes, by checkpoint name
	// (module + ".weight", or the parameter's own name for A_log, dt_bias and norms), as
	// the exact float32 dequantization in the checkpoint's row-major order, before the
	// loader derives 1+w or −exp(A_log) from it. values is only valid during the call.
	OnTensor func(name string, values []float32)
}

// LoadCheckpoint builds a dense float32 Model from a Qwen3.5 hybrid checkpoint directory:
// config.json (multimodal or text-only, ParseConfig), the quantization config
// (hf_quant_config.json when present, else config.json's quantization_config) and the
// safetensors weights (single file or sharded). Tensor names may be multimodal
// ("model.language_model.*", "lm_head.weight") or text-only ("model.*"); tensors under
// "model.visual." and "mtp." and other prefixes are ignored. Each weight's format comes from
// formats.Detect and is dequantized exactly (BF16/F16/F32, FP8 per tensor, NVFP4 after
// nvfp4.CheckConvention); the embedding stays BF16 (exact) when stored so. Errors name the
// file or tensor: a missing tensor, a shape or format that disagrees with the config, an
// unexpected tensor under the language-model prefix, a model whose float32 weights would
// exceed MaxDenseBytes.
func LoadCheckpoint(ctx context.Context, dir string, opts *LoadOptions) (*Model, error) {
	if opts == nil {
		opts = &LoadOptions{}
	}
	cfgPath := filepath.Join(dir, "config.json")
	cfgData, err := os.ReadFile(cfgPath)
	if err != nil {
		return nil, fmt.Errorf("load checkpoint: %w", err)
	}
	cfg, err := ParseConfig(cfgData)
	if err != nil {
		return nil, fmt.Errorf("load checkpoint: %s: %w", cfgPath, err)
	}
	if b := denseBytes(&cfg); b > MaxDenseBytes {
		return nil, fmt.Errorf("load checkpoint: %s: %d bytes of float32 weights exceed the dense loader's %d (use a packed bundle)", dir, b, int64(MaxDenseBytes))
	}
	var scheme formats.Scheme
	hqPath := filepath.Join(dir, "hf_quant_config.json")
	if hq, err := os.ReadFile(hqPath); err == nil {
		if scheme, err = formats.ParseHFQuantConfig(hq); err != nil {
			return nil, fmt.Errorf("load checkpoint: %s: %w", hqPath, err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("load checkpoint: %w", err)
	} else if scheme, err = formats.ParseConfig(cfgData); err != nil {
		return nil, fmt.Errorf("load checkpoint: %s: %w", cfgPath, err)
	}
	sm, err := safetensors.OpenModel(ctx, dir)
	if err != nil {
		return nil, fmt.Errorf("load checkpoint: %w", err)
	}
	defer sm.Close()

	l := &ckptLoader{m: sm, scheme: scheme, used: map[string]bool{}, modules: map[string][]string{}, opts: opts}
	for _, name := range sm.Names() {
		if i := strings.LastIndexByte(name, '.'); i > 0 {
			l.modules[name[:i]] = append(l.modules[name[:i]], name[i+1:])
		}
	}
	switch {
	case l.has("model.language_model.embed_tokens.weight"):
		l.prefix = "model.language_model."
	case l.has("model.embed_tokens.weight"):
		l.prefix = "model."
	default:
		return nil, fmt.Errorf("load checkpoint: %s: no model.language_model.embed_tokens.weight or model.embed_tokens.weight", dir)
	}
	w, err := l.weights(ctx, &cfg)
	if err != nil {
		return nil, fmt.Errorf("load checkpoint: %s: %w", dir, err)
	}
	var extra []string
	for _, name := range sm.Names() {
		if (strings.HasPrefix(name, l.prefix) && !strings.HasPrefix(name, "model.visual.")) || strings.HasPrefix(name, "lm_head.") {
			if !l.used[name] {
				extra = append(extra, name)
			}
		}
	}
	if len(extra) > 0 {
		sort.Strings(extra)
		return nil, fmt.Errorf("load checkpoint: %s: %d tensors are not part of the %d-layer text model, e.g. %s", dir, len(extra), len(cfg.Layers), strings.Join(extra[:min(3, len(extra))], ", "))
	}
	return New(cfg, w)
}

// denseBytes returns the float32 bytes of every weight of cfg.
func denseBytes(c *Config) int64 {
	h := int64(c.Hidden)
	n := 2*int64(c.Vocab)*h + h
	for _, k := range c.Layers {
		n += 2*h + 3*h*int64(c.Intermediate)
		switch k {
		case GDN:
			vd := int64(c.VHeads * c.VDim)
			n += h*int64(c.ConvDim()) + 2*h*vd + 2*h*int64(c.VHeads) + int64(c.ConvDim()*c.ConvKernel) + int64(2*c.VHeads+c.VDim)
		case Attention:
			n += h*int64(3*c.Heads*c.HeadDim+2*c.KVHeads*c.HeadDim) + int64(2*c.HeadDim)
		}
	}
	return 4 * n
}

type ckptLoader struct {
	m       *safetensors.Model
	scheme  formats.Scheme
	prefix  string
	used    map[string]bool
	modules map[string][]string // module path → tensor suffixes
	opts    *LoadOptions
}

func (l *ckptLoader) has(name string) bool {
	_, _, ok := l.m.Lookup(name)
	return ok
}

func (l *ckptLoader) read(name string) (safetensors.Tensor, []byte, error) {
	f, t, ok := l.m.Lookup(name)
	if !ok {
		return safetensors.Tensor{}, nil, fmt.Errorf("tensor %s: missing", name)
	}
	raw, err := f.ReadTensor(t)
	if err != nil {
		return t, nil, fmt.Errorf("tensor %s: %w", name, err)
	}
	l.used[name] = true
	return t, raw, nil
}

// floats decodes a BF16, F16 or F32 tensor.
func floats(t safetensors.Tensor, raw []byte) ([]float32, error) {
	n := int(t.NumElements())
	dst := make([]float32, n)
	var err error
	switch t.DType {
	case safetensors.BF16:
		err = bf16.Decode(dst, raw)
	case safetensors.F16:
		err = f16.Decode(dst, raw)
	case safetensors.F32:
		if len(raw) != 4*n {
			return nil, fmt.Errorf("tensor %s: %d bytes for %d F32 values", t.Name, len(raw), n)
		}
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
	default:
		return nil, fmt.Errorf("tensor %s: dtype %s, want BF16, F16 or F32", t.Name, t.DType)
	}
	if err != nil {
		return nil, fmt.Errorf("tensor %s: %w", t.Name, err)
	}
	return dst, nil
}

// vector reads a plain-float parameter of n elements (any shape whose product is n).
func (l *ckptLoader) vector(name string, n int) ([]float32, error) {
	t, raw, err := l.read(name)
	if err != nil {
		return nil, err
	}
	if t.NumElements() != int64(n) {
		return nil, fmt.Errorf("tensor %s: shape %v, want %d elements", name, t.Shape, n)
	}
	v, err := floats(t, raw)
	if err != nil {
		return nil, err
	}
	if l.opts.OnTensor != nil {
		l.opts.OnTensor(name, v)
	}
	return v, nil
}

func (l *ckptLoader) scalar(name string) (float32, error) {
	t, raw, err := l.read(name)
	if err != nil {
		return 0, err
	}
	if t.DType != safetensors.F32 || t.NumElements() != 1 {
		return 0, fmt.Errorf("tensor %s: %s %v, want one F32 value", name, t.DType, t.Shape)
	}
	return math.Float32frombits(binary.LittleEndian.Uint32(raw)), nil
}

// dense reads the weight of module as a float32 [n, k] matrix, dequantizing it.
func (l *ckptLoader) dense(module string, n, k int) ([]float32, error) {
	g := formats.Group{Name: module, Tensors: map[string]formats.Tensor{}}
	for _, suf := range l.modules[module] {
		_, t, _ := l.m.Lookup(module + "." + suf)
		g.Tensors[suf] = formats.Tensor{DType: string(t.DType), Shape: t.Shape}
	}
	if _, ok := g.Tensors["weight"]; !ok {
		return nil, fmt.Errorf("tensor %s.weight: missing", module)
	}
	lay, err := formats.Detect(g, l.scheme)
	if err != nil {
		return nil, err
	}
	if lay.N != int64(n) || lay.K != int64(k) {
		return nil, fmt.Errorf("tensor %s.weight: %s [%d, %d], want [%d, %d]", module, lay.Format, lay.N, lay.K, n, k)
	}
	wt, raw, err := l.read(module + ".weight")
	if err != nil {
		return nil, err
	}
	var dst []float32
	switch lay.Format {
	case formats.BF16, formats.F16, formats.F32:
		if dst, err = floats(wt, raw); err != nil {
			return nil, err
		}
	case formats.FP8:
		scale, err := l.scalar(module + ".weight_scale")
		if err != nil {
			return nil, err
		}
		dst = make([]float32, n*k)
		if err := fp8.DecodeWeights(dst, raw, scale); err != nil {
			return nil, fmt.Errorf("tensor %s.weight: %w", module, err)
		}
	case formats.NVFP4:
		ts, err := l.scalar(module + ".weight_scale_2")
		if err != nil {
			return nil, err
		}
		_, scales, err := l.read(module + ".weight_scale")
		if err != nil {
			return nil, err
		}
		if _, err := nvfp4.CheckConvention(scales, ts); err != nil {
			return nil, fmt.Errorf("tensor %s: %w", module, err)
		}
		dst = make([]float32, n*k)
		if err := nvfp4.DecodeRows(dst, raw, scales, k, ts); err != nil {
			return nil, fmt.Errorf("tensor %s.weight: %w", module, err)
		}
	default:
		return nil, fmt.Errorf("tensor %s.weight: format %s is not supported by the dense loader", module, lay.Format)
	}
	for _, suf := range lay.Ignored {
		l.used[module+"."+suf] = true
	}
	if l.opts.OnTensor != nil {
		l.opts.OnTensor(module+".weight", dst)
	}
	return dst, nil
}

func (l *ckptLoader) matrix(module string, n, k int) (Matrix, error) {
	w, err := l.dense(module, n, k)
	if err != nil {
		return Matrix{}, err
	}
	return Dense(w, n, k)
}

func (l *ckptLoader) weights(ctx context.Context, c *Config) (Weights, error) {
	var w Weights
	var err error
	p := l.prefix
	h := c.Hidden
	embName := p + "embed_tokens.weight"
	et, raw, err := l.read(embName)
	if err != nil {
		return w, err
	}
	if et.NumElements() != int64(c.Vocab)*int64(h) || len(et.Shape) != 2 {
		return w, fmt.Errorf("tensor %s: shape %v, want [%d, %d]", embName, et.Shape, c.Vocab, h)
	}
	var embDense []float32
	if et.DType == safetensors.BF16 && l.opts.OnTensor == nil && !c.TieEmbeddings {
		if w.Embed, err = BF16Embedding(raw, c.Vocab, h); err != nil {
			return w, err
		}
	} else {
		if embDense, err = floats(et, raw); err != nil {
			return w, err
		}
		if l.opts.OnTensor != nil {
			l.opts.OnTensor(embName, embDense)
		}
		if w.Embed, err = DenseEmbedding(embDense, c.Vocab, h); err != nil {
			return w, err
		}
	}
	norm, err := l.vector(p+"norm.weight", h)
	if err != nil {
		return w, err
	}
	w.FinalNorm = OnePlus(norm)
	switch {
	case l.has("lm_head.weight"):
		if w.LMHead, err = l.matrix("lm_head", c.Vocab, h); err != nil {
			return w, err
		}
	case c.TieEmbeddings:
		if w.LMHead, err = Dense(embDense, c.Vocab, h); err != nil {
			return w, err
		}
	default:
		return w, errors.New("tensor lm_head.weight: missing (and tie_word_embeddings is false)")
	}
	onePlus := func(name string, n int) ([]float32, error) {
		v, err := l.vector(name, n)
		if err != nil {
			return nil, err
		}
		return OnePlus(v), nil
	}
	for i, kind := range c.Layers {
		if err := ctx.Err(); err != nil {
			return w, err
		}
		lp := fmt.Sprintf("%slayers.%d.", p, i)
		L := Layer{Kind: kind}
		if L.InputNorm, err = onePlus(lp+"input_layernorm.weight", h); err != nil {
			return w, err
		}
		if L.PostNorm, err = onePlus(lp+"post_attention_layernorm.weight", h); err != nil {
			return w, err
		}
		mats := []struct {
			dst    *Matrix
			module string
			n, k   int
		}{
			{&L.Gate, "mlp.gate_proj", c.Intermediate, h},
			{&L.Up, "mlp.up_proj", c.Intermediate, h},
			{&L.Down, "mlp.down_proj", h, c.Intermediate},
		}
		switch kind {
		case GDN:
			vd := c.VHeads * c.VDim
			a := "linear_attn."
			mats = append(mats, []struct {
				dst    *Matrix
				module string
				n, k   int
			}{
				{&L.QKV, a + "in_proj_qkv", c.ConvDim(), h}, {&L.Z, a + "in_proj_z", vd, h},
				{&L.B, a + "in_proj_b", c.VHeads, h}, {&L.A, a + "in_proj_a", c.VHeads, h},
				{&L.Out, a + "out_proj", h, vd},
			}...)
			if L.Conv, err = l.dense(lp+a+"conv1d", c.ConvDim(), c.ConvKernel); err != nil {
				return w, err
			}
			alog, err := l.vector(lp+a+"A_log", c.VHeads)
			if err != nil {
				return w, err
			}
			L.NegA = NegExp(alog)
			if L.DtBias, err = l.vector(lp+a+"dt_bias", c.VHeads); err != nil {
				return w, err
			}
			if L.GatedNorm, err = l.vector(lp+a+"norm.weight", c.VDim); err != nil {
				return w, err
			}
		case Attention:
			qd, kvd := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
			a := "self_attn."
			mats = append(mats, []struct {
				dst    *Matrix
				module string
				n, k   int
			}{
				{&L.Q, a + "q_proj", 2 * qd, h}, {&L.K, a + "k_proj", kvd, h},
				{&L.V, a + "v_proj", kvd, h}, {&L.O, a + "o_proj", h, qd},
			}...)
			if L.QNorm, err = onePlus(lp+a+"q_norm.weight", c.HeadDim); err != nil {
				return w, err
			}
			if L.KNorm, err = onePlus(lp+a+"k_norm.weight", c.HeadDim); err != nil {
				return w, err
			}
		}
		for _, m := range mats {
			if *m.dst, err = l.matrix(lp+m.module, m.n, m.k); err != nil {
				return w, err
			}
		}
		w.Layers = append(w.Layers, L)
	}
	return w, nil
}
