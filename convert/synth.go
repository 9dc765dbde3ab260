package convert

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"lithos/formats/safetensors"
	"lithos/manifests"
)

// SynthSpec describes a checkpoint to synthesize as headers only: its
// config.json, its declared quantization, and the inventory rules that the
// architecture alone does not fix (dtypes of small parameters, tensors the
// export leaves out, shard size and names). The embedded specs
// (manifests.ModelSpec) are written in this form; docs/audit.md explains
// each field with the 27B target as the example.
type SynthSpec struct {
	// Repo is the Hub repo id the spec describes (informational).
	Repo string `json:"repo"`
	// Notes say where each choice comes from.
	Notes []string `json:"notes,omitempty"`
	// Config is written as config.json (plus "quantization_config" when
	// Quantization.Files names config.json).
	Config json.RawMessage `json:"config"`
	// Quantization, when set, makes the linears it matches NVFP4 or FP8 and
	// is written as hf_quant_config.json and/or config.json
	// "quantization_config". A config with "lithos_quantization" needs none.
	Quantization *SynthQuant `json:"quantization,omitempty"`
	// DTypes sets the storage dtype of unquantized tensors whose name
	// matches ('*' matches any run of characters); first match wins; the
	// default is config.json's "dtype".
	DTypes []DTypeRule `json:"dtypes,omitempty"`
	// Omit drops tensors the modeling code declares but the checkpoint does
	// not hold (glob patterns). Every pattern must match at least one tensor.
	Omit []string `json:"omit,omitempty"`
	// Shards controls file layout.
	Shards SynthShards `json:"shards"`
	// Metadata is every shard's "__metadata__" ({"format": "pt"} is what
	// transformers writes).
	Metadata map[string]string `json:"metadata,omitempty"`
}

// DTypeRule is one entry of SynthSpec.DTypes.
type DTypeRule struct {
	Match string `json:"match"`
	DType string `json:"dtype"`
}

// SynthShards is the shard plan: tensors fill shards in inventory order, a
// new shard starting when the next tensor would push the current one past
// MaxBytes of tensor data (0: one file). Pattern names the files: with two
// %d verbs it gets (index, count), with one the index, with none it is the
// name of the single file. Within a shard tensors are laid out as the Python
// safetensors writer does (safetensors.PythonOrder).
type SynthShards struct {
	MaxBytes int64  `json:"max_bytes"`
	Pattern  string `json:"pattern"`
}

// SynthQuant is the quantization of a synthesized checkpoint, in ModelOpt's
// vocabulary (qwen35-and-quant.md §B.1–§B.3).
type SynthQuant struct {
	Producer         map[string]string `json:"producer,omitempty"`
	QuantAlgo        string            `json:"quant_algo"`
	KVCacheQuantAlgo string            `json:"kv_cache_quant_algo,omitempty"`
	GroupSize        int               `json:"group_size,omitempty"`
	// Rules assign a format to linear modules (glob on the module path);
	// the first matching rule wins, unmatched linears stay unquantized.
	Rules          []SynthQuantRule `json:"rules"`
	ExcludeModules []string         `json:"exclude_modules,omitempty"`
	// Files lists where the quantization is written: "hf_quant_config.json",
	// "config.json" (as "quantization_config"), or both.
	Files []string `json:"files"`
}

// SynthQuantRule is one entry of SynthQuant.Rules.
type SynthQuantRule struct {
	Modules   string `json:"modules"`
	QuantAlgo string `json:"quant_algo"`
	GroupSize int    `json:"group_size,omitempty"`
}

// ParseSynthSpec parses a spec. A plain config.json (an object without a
// "config" key) is accepted too and synthesized unquantized (or per its
// lithos_quantization) in one file.
func ParseSynthSpec(data []byte) (*SynthSpec, error) {
	top, err := parseObject(data, "spec")
	if err != nil {
		return nil, err
	}
	if !top.has("config") {
		return &SynthSpec{Config: bytes.TrimSpace(data), Shards: SynthShards{Pattern: safetensors.SingleName},
			Metadata: map[string]string{"format": "pt"}}, nil
	}
	var s SynthSpec
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("spec: %w", err)
	}
	if s.Shards.Pattern == "" {
		s.Shards.Pattern = "model-%05d-of-%05d.safetensors"
	}
	if s.Shards.MaxBytes < 0 {
		return nil, fmt.Errorf("spec: shards.max_bytes must not be negative")
	}
	return &s, nil
}

// LoadSynthSpec reads a spec from a file, or an embedded spec by name
// (manifests.ModelSpecNames) when arg is not an existing path.
func LoadSynthSpec(arg string) (*SynthSpec, error) {
	data, err := os.ReadFile(arg)
	if errors.Is(err, os.ErrNotExist) && !strings.ContainsAny(arg, `/\`) && !strings.HasSuffix(arg, ".json") {
		data, err = manifests.ModelSpec(arg)
	}
	if err != nil {
		return nil, fmt.Errorf("spec %s: %w", arg, err)
	}
	s, err := ParseSynthSpec(data)
	if err != nil {
		return nil, fmt.Errorf("spec %s: %w", arg, err)
	}
	return s, nil
}

// SynthFile is one file SynthHeaders wrote.
type SynthFile struct {
	Name        string // relative to the output directory
	Bytes       int64  // apparent size
	HeaderBytes int64  // safetensors prefix (8 + N); 0 for JSON files
	Tensors     int
}

// SynthResult lists what SynthHeaders wrote.
type SynthResult struct {
	Files       []SynthFile
	Tensors     int
	TensorBytes int64 // sum of tensor data sizes
	Bytes       int64 // apparent size of all files
}

// StoredTensors returns the tensors a checkpoint made from the spec holds:
// the architecture's inventory (Inventory), minus omitted tensors, with
// quantized linears expanded to their ModelOpt tensors (§B.3): NVFP4 →
// weight U8 [out, in/2], weight_scale F8_E4M3 [out, in/16], weight_scale_2
// F32 [], and input_scale F32 [] unless weight-only; FP8 → weight F8_E4M3
// [out, in], weight_scale F32 [] (per-tensor; [out] for
// FP8_PER_CHANNEL_PER_TOKEN), input_scale F32 [] (per-tensor only). Also
// returns the config the spec describes and the quantized layers map.
func (s *SynthSpec) StoredTensors() ([]safetensors.TensorSpec, *Config, map[string]LayerQuant, error) {
	cfg, err := ParseConfig(s.Config)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("spec config: %w", err)
	}
	logical, err := Inventory(cfg)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("spec config: %w", err)
	}
	used := make([]bool, len(s.Omit))
	keep := logical[:0:0]
	for _, t := range logical {
		omitted := false
		for i, pat := range s.Omit {
			if globMatch(pat, t.Name) {
				used[i], omitted = true, true
			}
		}
		if !omitted {
			keep = append(keep, t)
		}
	}
	for i, u := range used {
		if !u {
			return nil, nil, nil, fmt.Errorf("spec omit[%d] %q matches no tensor of the inventory", i, s.Omit[i])
		}
	}
	defDType, err := torchDType(cfg.DType)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("spec config: dtype: %w", err)
	}
	layers := map[string]LayerQuant{}
	var out []safetensors.TensorSpec
	add := func(name string, d safetensors.DType, shape ...int64) {
		out = append(out, safetensors.TensorSpec{Name: name, DType: d, Shape: shape})
	}
	for _, t := range keep {
		lq, err := s.layerQuant(cfg, t)
		if err != nil {
			return nil, nil, nil, err
		}
		if lq.Algo == "" {
			d := defDType
			for _, r := range s.DTypes {
				if globMatch(r.Match, t.Name) {
					if d, err = safetensors.ParseDType(r.DType); err != nil {
						return nil, nil, nil, fmt.Errorf("spec dtypes %q: %w", r.Match, err)
					}
					break
				}
			}
			add(t.Name, d, t.Shape...)
			continue
		}
		layers[t.Module()] = lq
		m := t.Module()
		n, k := t.Shape[0], t.Shape[1]
		switch lq.Algo {
		case "NVFP4", "W4A16_NVFP4":
			g := int64(lq.GroupSize)
			if g == 0 {
				g = 16
			}
			if k%g != 0 || k%2 != 0 {
				return nil, nil, nil, fmt.Errorf("%s: NVFP4 needs the input dimension %d to be a multiple of the group size %d", t.Name, k, g)
			}
			add(m+".weight", safetensors.U8, n, k/2)
			add(m+".weight_scale", safetensors.F8E4M3, n, k/g)
			add(m+".weight_scale_2", safetensors.F32)
			if lq.Algo == "NVFP4" { // W4A4: a static activation scale; W4A16 has none
				add(m+".input_scale", safetensors.F32)
			}
		case "FP8":
			add(m+".weight", safetensors.F8E4M3, n, k)
			add(m+".weight_scale", safetensors.F32)
			add(m+".input_scale", safetensors.F32)
		case "FP8_PER_CHANNEL_PER_TOKEN":
			add(m+".weight", safetensors.F8E4M3, n, k)
			add(m+".weight_scale", safetensors.F32, n)
		default:
			return nil, nil, nil, fmt.Errorf("%s: quant_algo %q cannot be synthesized (NVFP4, W4A16_NVFP4, FP8, FP8_PER_CHANNEL_PER_TOKEN)", m, lq.Algo)
		}
		if s.Quantization != nil && strings.ToUpper(s.Quantization.KVCacheQuantAlgo) == "FP8" {
			// FP8 KV cache scales (§B.3): <…k_proj>.k_scale, <…v_proj>.v_scale.
			switch {
			case strings.HasSuffix(m, "self_attn.k_proj"):
				add(m+".k_scale", safetensors.F32)
			case strings.HasSuffix(m, "self_attn.v_proj"):
				add(m+".v_scale", safetensors.F32)
			}
		}
	}
	return out, cfg, layers, nil
}

// layerQuant decides a linear's format from the spec's rules or the
// config's lithos_quantization (every matrix whose input dimension is a
// multiple of 256, except names containing a Keep entry: lithos-metal.md §5.3).
func (s *SynthSpec) layerQuant(cfg *Config, t LogicalTensor) (LayerQuant, error) {
	if t.Kind != KindLinear {
		return LayerQuant{}, nil
	}
	if s.Quantization != nil {
		for _, r := range s.Quantization.Rules {
			if globMatch(r.Modules, t.Module()) {
				return LayerQuant{Algo: strings.ToUpper(r.QuantAlgo), GroupSize: r.GroupSize}, nil
			}
		}
		return LayerQuant{}, nil
	}
	if l := cfg.Lithos; l != nil {
		for _, k := range l.Keep {
			if strings.Contains(t.Name, k) {
				return LayerQuant{}, nil
			}
		}
		if t.Shape[1]%256 == 0 {
			algo := "NVFP4"
			if l.WeightOnly {
				algo = "W4A16_NVFP4"
			}
			return LayerQuant{Algo: algo, GroupSize: l.BlockSize}, nil
		}
	}
	return LayerQuant{}, nil
}

// torchDType maps config.json's dtype names to safetensors dtypes.
func torchDType(s string) (safetensors.DType, error) {
	switch strings.TrimPrefix(s, "torch.") {
	case "bfloat16", "":
		return safetensors.BF16, nil
	case "float16", "half":
		return safetensors.F16, nil
	case "float32", "float":
		return safetensors.F32, nil
	}
	return "", fmt.Errorf("unsupported dtype %q", s)
}

// plan assigns tensors to shards (see SynthShards).
func (s *SynthSpec) plan(specs []safetensors.TensorSpec) ([][]safetensors.TensorSpec, []string, error) {
	var shards [][]safetensors.TensorSpec
	var cur []safetensors.TensorSpec
	var curBytes int64
	for _, t := range specs {
		b, err := safetensors.ByteSize(t.DType, t.Shape)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", t.Name, err)
		}
		if s.Shards.MaxBytes > 0 && len(cur) > 0 && curBytes+b > s.Shards.MaxBytes {
			shards = append(shards, cur)
			cur, curBytes = nil, 0
		}
		cur = append(cur, t)
		curBytes += b
	}
	if len(cur) > 0 {
		shards = append(shards, cur)
	}
	verbs := strings.Count(s.Shards.Pattern, "%")
	names := make([]string, len(shards))
	for i := range shards {
		switch verbs {
		case 0:
			if len(shards) > 1 {
				return nil, nil, fmt.Errorf("spec shards.pattern %q has no %%d but the checkpoint needs %d shards", s.Shards.Pattern, len(shards))
			}
			names[i] = s.Shards.Pattern
		case 1:
			names[i] = fmt.Sprintf(s.Shards.Pattern, i+1)
		case 2:
			names[i] = fmt.Sprintf(s.Shards.Pattern, i+1, len(shards))
		default:
			return nil, nil, fmt.Errorf("spec shards.pattern %q: want at most two %%d verbs", s.Shards.Pattern)
		}
		if filepath.Base(names[i]) != names[i] || !strings.HasSuffix(names[i], ".safetensors") {
			return nil, nil, fmt.Errorf("spec shards.pattern gives %q: want a plain *.safetensors file name", names[i])
		}
	}
	return shards, names, nil
}

// SynthHeaders writes the checkpoint the spec describes into outDir as
// header-only safetensors: each shard holds its real header and then a hole
// up to its real size (written with Truncate, so it takes no disk blocks on
// file systems with sparse files), so that every header reader — local, or
// remote through range requests — sees the true layout. It also writes
// config.json, the quantization files the spec names, and
// model.safetensors.index.json when there is more than one shard
// ({"metadata": {"total_size"}, "weight_map"}). outDir is created; existing
// files are not overwritten (error). Tensor data reads return zeros.
func SynthHeaders(ctx context.Context, spec *SynthSpec, outDir string) (*SynthResult, error) {
	specs, cfg, layers, err := spec.StoredTensors()
	if err != nil {
		return nil, err
	}
	shards, names, err := spec.plan(specs)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return nil, err
	}
	res := &SynthResult{}
	weightMap := map[string]string{}
	for i, sh := range shards {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		prefix, ts, err := safetensors.EncodeHeader(safetensors.PythonOrder(sh), spec.Metadata)
		if err != nil {
			return nil, fmt.Errorf("shard %s: %w", names[i], err)
		}
		size := int64(len(prefix))
		for _, t := range ts {
			size = max(size, t.Offset+t.Size)
			res.TensorBytes += t.Size
			weightMap[t.Name] = names[i]
		}
		if err := writeSparse(filepath.Join(outDir, names[i]), prefix, size); err != nil {
			return nil, err
		}
		res.Files = append(res.Files, SynthFile{Name: names[i], Bytes: size, HeaderBytes: int64(len(prefix)), Tensors: len(ts)})
		res.Tensors += len(ts)
		res.Bytes += size
	}
	cfgJSON, err := spec.configJSON(cfg, layers)
	if err != nil {
		return nil, err
	}
	jsons := []struct {
		name string
		v    []byte
	}{{"config.json", cfgJSON}}
	if q := spec.Quantization; q != nil && slices.Contains(q.Files, "hf_quant_config.json") {
		b, err := marshal(map[string]any{"producer": q.Producer, "quantization": spec.quantBody(layers, false)})
		if err != nil {
			return nil, err
		}
		jsons = append(jsons, struct {
			name string
			v    []byte
		}{"hf_quant_config.json", b})
	}
	if len(shards) > 1 {
		b, err := marshal(map[string]any{"metadata": map[string]any{"total_size": res.TensorBytes}, "weight_map": weightMap})
		if err != nil {
			return nil, err
		}
		jsons = append(jsons, struct {
			name string
			v    []byte
		}{safetensors.IndexName, b})
	}
	for _, j := range jsons {
		if err := writeNew(filepath.Join(outDir, j.name), j.v); err != nil {
			return nil, err
		}
		res.Files = append(res.Files, SynthFile{Name: j.name, Bytes: int64(len(j.v))})
		res.Bytes += int64(len(j.v))
	}
	return res, nil
}

// quantBody is the "quantization" object of hf_quant_config.json (§B.1) or,
// with forConfig, config.json's "quantization_config" (§B.2).
func (s *SynthSpec) quantBody(layers map[string]LayerQuant, forConfig bool) map[string]any {
	q := s.Quantization
	body := map[string]any{"quant_algo": q.QuantAlgo}
	if q.KVCacheQuantAlgo != "" {
		body["kv_cache_quant_algo"] = q.KVCacheQuantAlgo
	} else {
		body["kv_cache_quant_algo"] = nil
	}
	if strings.ToUpper(q.QuantAlgo) == "MIXED_PRECISION" {
		ql := map[string]any{}
		for m, l := range layers {
			e := map[string]any{"quant_algo": l.Algo}
			if l.GroupSize > 0 {
				e["group_size"] = l.GroupSize
			}
			ql[m] = e
		}
		body["quantized_layers"] = ql
	} else if q.GroupSize > 0 {
		body["group_size"] = q.GroupSize
	}
	excl := q.ExcludeModules
	if excl == nil {
		excl = []string{}
	}
	if forConfig {
		body["quant_method"] = "modelopt"
		body["ignore"] = excl
		if q.Producer != nil {
			body["producer"] = q.Producer
		}
	} else {
		body["exclude_modules"] = excl
	}
	return body
}

// configJSON returns config.json: the spec's config with
// "quantization_config" added when the spec says so.
func (s *SynthSpec) configJSON(cfg *Config, layers map[string]LayerQuant) ([]byte, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(s.Config, &obj); err != nil {
		return nil, fmt.Errorf("spec config: %w", err)
	}
	if q := s.Quantization; q != nil && slices.Contains(q.Files, "config.json") {
		b, err := json.Marshal(s.quantBody(layers, true))
		if err != nil {
			return nil, err
		}
		obj["quantization_config"] = b
	}
	return marshal(obj)
}

func marshal(v any) ([]byte, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

func writeNew(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}

// writeSparse writes prefix and extends the file to size with a hole.
func writeSparse(path string, prefix []byte, size int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := f.Write(prefix); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return fmt.Errorf("write %s: extend to %d bytes: %w", path, size, err)
	}
	return f.Close()
}
