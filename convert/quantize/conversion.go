package quantize

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"strings"

	"lithos/formats/nvfp4"
	"lithos/hub"
)

// Output file names.
const (
	ModelFile       = "model.safetensors"
	ConfigFile      = "config.json"
	HFQuantFile     = "hf_quant_config.json"
	ConversionFile  = "conversion.json"
	QuantAlgo       = "W4A16_NVFP4" // ModelOpt's weight-only NVFP4 (qwen35-and-quant.md §B.1, §B.3)
	ConversionTool  = "lithos-pack quantize"
	conversionFmtV1 = 1
)

// Conversion is conversion.json: what was converted, from what, how, and how
// far each quantized tensor moved. Lists are sorted by path or tensor name;
// the file has no timestamps, so the same input gives the same bytes.
type Conversion struct {
	FormatVersion int         `json:"format_version"` // 1
	Tool          string      `json:"tool"`           // "lithos-pack quantize"
	ToolVersion   string      `json:"tool_version"`
	Source        Source      `json:"source"`
	Method        Method      `json:"quantization"`
	Inputs        []FileHash  `json:"inputs"`  // config.json, the index if any, every shard
	Outputs       []FileHash  `json:"outputs"` // every output file except conversion.json itself
	Quantized     []TensorErr `json:"quantized"`
	Kept          []Kept      `json:"kept"`
	// SourceTensorBytes is the data bytes of all source tensors; OutputTensorBytes
	// those of model.safetensors' tensors.
	SourceTensorBytes int64 `json:"source_tensor_bytes"`
	OutputTensorBytes int64 `json:"output_tensor_bytes"`
}

// Source identifies the input checkpoint. Repo and Revision are null for a
// plain directory; for an HF cache snapshot (…/models--org--name/snapshots/
// <commit>) they are taken from the path unless Options override them.
type Source struct {
	Repo     *string `json:"repo"`
	Revision *string `json:"revision"`
}

// Method records the quantization rule.
type Method struct {
	Format    string `json:"format"`     // "nvfp4"
	QuantAlgo string `json:"quant_algo"` // "W4A16_NVFP4"
	GroupSize int    `json:"group_size"` // 16
	Rule      string `json:"rule"`
	// TensorScale names the rounding of weight_scale_2 = amax/2688:
	// "exact" (fl(amax/2688), nvfp4.DivideExact) or "reciprocal"
	// (fl(amax·fl(1/2688)), ModelOpt on CUDA).
	TensorScale string `json:"tensor_scale_division"`
	ErrorStats  string `json:"error_stats"`
}

// FileHash is one file's size and SHA-256 (lower-case hex). Path is relative
// to the checkpoint directory, with '/' separators.
type FileHash struct {
	Path   string `json:"path"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// TensorErr is one quantized linear and the error of dequant(quant(w)) against
// w, where dequant is nvfp4.DecodeRows (float32, ModelOpt's order) and the
// sums run in float64 over all N·K elements (in a fixed order: errAcc):
//
//	rel_rms_error = sqrt(Σ(d−w)² / Σw²)          (0 when Σw² = 0)
//	max_abs_error = max |d−w|
//	snr_db        = 10·log10(Σw² / Σ(d−w)²)      (null when the error is exactly 0)
type TensorErr struct {
	Name         string   `json:"name"` // source tensor, "<module>.weight"
	Shape        []int64  `json:"shape"`
	SourceDType  string   `json:"source_dtype"`
	Amax         float32  `json:"amax"`
	WeightScale2 float32  `json:"weight_scale_2"`
	RelRMSError  float64  `json:"rel_rms_error"`
	MaxAbsError  float64  `json:"max_abs_error"`
	SNRdB        *float64 `json:"snr_db"`
	// FlushedBlocks counts 16-element blocks with a nonzero weight whose block
	// scale rounded to E4M3 zero, so they dequantize to zeros.
	FlushedBlocks int64 `json:"flushed_blocks"`
}

// Kept is a tensor copied unchanged.
type Kept struct {
	Name   string  `json:"name"`
	DType  string  `json:"dtype"`
	Shape  []int64 `json:"shape"`
	Reason string  `json:"reason"`
}

// errAcc accumulates TensorErr's sums in float64 in a fixed order that does
// not depend on chunking, scheduling or platform: element i of the tensor
// (row-major) goes into lane i mod 4 of four partial sums, in element order;
// fill combines the lanes as (l0 + l1) + (l2 + l3). Four independent add
// chains run about four times faster than one. Chunks hold whole rows and K is
// a multiple of 16, so a chunk's element j is in lane j mod 4.
type errAcc struct {
	se, sw [4]float64
	// maxSq is the largest squared error; max |e| = sqrt(maxSq) exactly
	// (in binary floating point with round-to-nearest, sqrt(fl(e·e)) = |e|
	// absent underflow, and these squares are far above it).
	maxSq float64
}

func (a *errAcc) add(w, d []float32) {
	e0, e1, e2, e3 := a.se[0], a.se[1], a.se[2], a.se[3]
	w0, w1, w2, w3 := a.sw[0], a.sw[1], a.sw[2], a.sw[3]
	m := a.maxSq
	n := len(w) &^ 3
	d = d[:n]
	for i := 0; i < n; i += 4 {
		x0, x1, x2, x3 := float64(w[i]), float64(w[i+1]), float64(w[i+2]), float64(w[i+3])
		d0, d1, d2, d3 := float64(d[i])-x0, float64(d[i+1])-x1, float64(d[i+2])-x2, float64(d[i+3])-x3
		// Explicit conversions keep the compiler from fusing a product into
		// the following add (an FMA), so every platform sums the same bits.
		q0, q1, q2, q3 := float64(d0*d0), float64(d1*d1), float64(d2*d2), float64(d3*d3)
		e0 += q0
		e1 += q1
		e2 += q2
		e3 += q3
		w0 += float64(x0 * x0)
		w1 += float64(x1 * x1)
		w2 += float64(x2 * x2)
		w3 += float64(x3 * x3)
		// Each compared with the running maximum: rarely true, so the
		// branches predict well (comparing the four with each other does not).
		if q0 > m {
			m = q0
		}
		if q1 > m {
			m = q1
		}
		if q2 > m {
			m = q2
		}
		if q3 > m {
			m = q3
		}
	}
	a.se = [4]float64{e0, e1, e2, e3}
	a.sw = [4]float64{w0, w1, w2, w3}
	a.maxSq = m
}

func (a *errAcc) fill(t *TensorErr) {
	sumE2 := (a.se[0] + a.se[1]) + (a.se[2] + a.se[3])
	sumW2 := (a.sw[0] + a.sw[1]) + (a.sw[2] + a.sw[3])
	t.MaxAbsError = math.Sqrt(a.maxSq)
	if sumW2 > 0 {
		t.RelRMSError = math.Sqrt(sumE2 / sumW2)
	}
	if sumE2 > 0 {
		snr := 10 * math.Log10(sumW2/sumE2)
		t.SNRdB = &snr
	}
}

func methodFor(d nvfp4.Division) Method {
	return Method{
		Format:    "nvfp4",
		QuantAlgo: QuantAlgo,
		GroupSize: nvfp4.BlockSize,
		Rule: "ModelOpt NVFP4QTensor, float32: s2 = amax(|W|)/2688; s_b = block_amax/(6*s2), 0 -> 1.0, " +
			"float8_e4m3fn cast (round half to even); x = W/(float(s_b)*s2); E2M1 ties to even, saturating at 6; " +
			"even element in the low nibble (ARCHITECTURE.md 3.1; all-zero tensor: amax taken as 1)",
		TensorScale: d.String(),
		ErrorStats:  "dequant = e2m1(code) * (e4m3(scale) * weight_scale_2) in float32; sums over all elements in float64",
	}
}

// SourceFromPath derives the repo id and commit from an HF cache snapshot
// path (<cache>/models--<org>--<name>/snapshots/<40-hex commit>[/…]). ok is
// false for any other path.
func SourceFromPath(dir string) (repo, revision string, ok bool) {
	parts := strings.Split(filepath.ToSlash(filepath.Clean(dir)), "/")
	for i := len(parts) - 3; i >= 0; i-- {
		if parts[i+1] != "snapshots" || !hub.IsCommit(parts[i+2]) {
			continue
		}
		name, found := strings.CutPrefix(parts[i], "models--")
		if !found {
			return "", "", false
		}
		org, model, found := strings.Cut(name, "--")
		if !found || org == "" || model == "" {
			return "", "", false
		}
		repo = org + "/" + strings.ReplaceAll(model, "--", "/")
		if hub.ValidateRepoID(repo) != nil {
			return "", "", false
		}
		return repo, parts[i+2], true
	}
	return "", "", false
}

// hfQuantConfig renders hf_quant_config.json (qwen35-and-quant.md §B.1):
// weight-only NVFP4 for every linear, the kept Linear/Embedding modules in
// exclude_modules. producer.name is "modelopt" because consumers key the
// format on it (vLLM's get_quant_config refuses other producers for
// quantization "modelopt"); the version names lithos-pack.
func hfQuantConfig(producerVersion string, exclude []string) ([]byte, error) {
	doc := struct {
		Producer     producer `json:"producer"`
		Quantization struct {
			QuantAlgo        string   `json:"quant_algo"`
			KVCacheQuantAlgo *string  `json:"kv_cache_quant_algo"`
			GroupSize        int      `json:"group_size"`
			ExcludeModules   []string `json:"exclude_modules"`
		} `json:"quantization"`
	}{Producer: producer{Name: "modelopt", Version: producerVersion}}
	doc.Quantization.QuantAlgo = QuantAlgo
	doc.Quantization.GroupSize = nvfp4.BlockSize
	doc.Quantization.ExcludeModules = nonNil(exclude)
	return marshalIndent(doc, "")
}

type producer struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// quantizationConfig is config.json's "quantization_config" for W4A16_NVFP4
// as ModelOpt's convert_hf_quant_config_format writes it (§B.2): one config
// group with weights only (no input_activations), targets ["Linear"],
// ignore = exclude_modules, no kv_cache_scheme (the KV cache is not
// quantized), quant_method "modelopt".
type quantizationConfig struct {
	ConfigGroups map[string]configGroup `json:"config_groups"`
	Ignore       []string               `json:"ignore"`
	QuantAlgo    string                 `json:"quant_algo"`
	Producer     producer               `json:"producer"`
	QuantMethod  string                 `json:"quant_method"`
}

type configGroup struct {
	Weights struct {
		Dynamic   bool   `json:"dynamic"`
		NumBits   int    `json:"num_bits"`
		Type      string `json:"type"`
		GroupSize int    `json:"group_size"`
	} `json:"weights"`
	Targets []string `json:"targets"`
}

// rewriteConfig returns the source config.json with "quantization_config"
// appended as its last key; every other byte of the source object is kept.
// It refuses a config that already declares a quantization.
func rewriteConfig(src []byte, producerVersion string, exclude []string) ([]byte, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(src, &top); err != nil || top == nil {
		return nil, fmt.Errorf("config.json: not a JSON object")
	}
	for _, k := range []string{"quantization_config", "quantization", "lithos_quantization"} {
		if _, ok := top[k]; ok {
			return nil, fmt.Errorf("config.json: already has %q: the head is quantized already", k)
		}
	}
	var g configGroup
	g.Weights.NumBits, g.Weights.Type, g.Weights.GroupSize = 4, "float", nvfp4.BlockSize
	g.Targets = []string{"Linear"}
	qc := quantizationConfig{
		ConfigGroups: map[string]configGroup{"group_0": g},
		Ignore:       nonNil(exclude),
		QuantAlgo:    QuantAlgo,
		Producer:     producer{Name: "modelopt", Version: producerVersion},
		QuantMethod:  "modelopt",
	}
	body, err := marshalIndent(qc, "  ")
	if err != nil {
		return nil, err
	}
	trimmed := bytes.TrimRight(src, " \t\r\n")
	if len(trimmed) == 0 || trimmed[len(trimmed)-1] != '}' {
		return nil, fmt.Errorf("config.json: does not end with '}'")
	}
	head := bytes.TrimRight(trimmed[:len(trimmed)-1], " \t\r\n")
	var out bytes.Buffer
	out.Write(head)
	if len(top) > 0 {
		out.WriteByte(',')
	}
	out.WriteString("\n  \"quantization_config\": ")
	out.Write(body)
	out.WriteString("\n}\n")
	return out.Bytes(), nil
}

func marshalIndent(v any, prefix string) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent(prefix, "  ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}

func nonNil(xs []string) []string {
	if xs == nil {
		return []string{}
	}
	return xs
}
