package convert

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// QuantConfig is a checkpoint's declared quantization, normalized from either
// shape ModelOpt writes (qwen35-and-quant.md §B.1, §B.2):
//
//	hf_quant_config.json  {"producer": {...}, "quantization": {"quant_algo", "kv_cache_quant_algo",
//	                       "group_size", "exclude_modules", "quantized_layers"}}
//	config.json           "quantization_config": {"quant_method": "modelopt", "quant_algo", "ignore",
//	                       "kv_cache_scheme", "config_groups", "quantized_layers", "group_size"}
//
// The audit detects each tensor's format from its dtypes; the declared
// quantization is cross-checked against that and disagreements are reported.
type QuantConfig struct {
	Source      string // file the config came from, for messages
	Method      string // "modelopt", or the quant_method of other tools (then Algo may be "")
	Producer    string // "modelopt 0.39.0"
	Algo        string // upper case: "NVFP4", "FP8", "W4A16_NVFP4", "MIXED_PRECISION", ...
	GroupSize   int
	KVCacheAlgo string
	// Exclude lists unquantized modules of a single-format config, exact
	// names or '*' wildcards ("model.visual*", "lm_head").
	Exclude []string
	// Layers maps module names to their format for MIXED_PRECISION;
	// modules not listed are unquantized.
	Layers map[string]LayerQuant
}

// LayerQuant is one entry of "quantized_layers".
type LayerQuant struct {
	Algo      string // "NVFP4", "FP8", ...
	GroupSize int
}

// ParseHFQuantConfig parses hf_quant_config.json. Errors name the field.
func ParseHFQuantConfig(data []byte) (*QuantConfig, error) {
	top, err := parseObject(data, "hf_quant_config")
	if err != nil {
		return nil, err
	}
	q, ok, err := top.sub("quantization")
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("quantization: missing (hf_quant_config.json holds {\"producer\", \"quantization\"})")
	}
	qc, err := parseQuantObject(q, "hf_quant_config.json")
	if err != nil {
		return nil, err
	}
	qc.Method = "modelopt"
	if p, ok, err := top.sub("producer"); err != nil {
		return nil, err
	} else if ok {
		name, err := p.str("name")
		if err != nil {
			return nil, err
		}
		ver, err := p.str("version")
		if err != nil {
			return nil, err
		}
		qc.Producer = strings.TrimSpace(name + " " + ver)
	}
	return qc, nil
}

// parseQuantObject reads the fields common to both shapes.
func parseQuantObject(o object, source string) (*QuantConfig, error) {
	q := &QuantConfig{Source: source}
	var err error
	if q.Method, err = o.str("quant_method"); err != nil {
		return nil, err
	}
	if q.Algo, err = o.str("quant_algo"); err != nil {
		return nil, err
	}
	q.Algo = strings.ToUpper(q.Algo)
	if q.GroupSize, err = o.positive("group_size", 0); err != nil {
		return nil, err
	}
	if q.KVCacheAlgo, err = o.str("kv_cache_quant_algo"); err != nil {
		// config.json's kv_cache_scheme may be an object; only the legacy
		// string field is read here.
		return nil, err
	}
	for _, k := range []string{"exclude_modules", "ignore"} {
		xs, err := o.strings(k)
		if err != nil {
			return nil, err
		}
		q.Exclude = append(q.Exclude, xs...)
	}
	if p, ok, err := o.sub("producer"); err != nil {
		return nil, err
	} else if ok {
		name, err := p.str("name")
		if err != nil {
			return nil, err
		}
		ver, err := p.str("version")
		if err != nil {
			return nil, err
		}
		q.Producer = strings.TrimSpace(name + " " + ver)
	}
	if layers, ok, err := o.sub("quantized_layers"); err != nil {
		return nil, err
	} else if ok {
		q.Layers = make(map[string]LayerQuant, len(layers.fields))
		for name := range layers.fields {
			l, ok, err := layers.sub(name)
			if err != nil {
				return nil, err
			}
			if !ok {
				continue
			}
			algo, err := l.str("quant_algo")
			if err != nil {
				return nil, err
			}
			if algo == "" {
				return nil, fmt.Errorf("%s: quant_algo missing", l.path[:len(l.path)-1])
			}
			g, err := l.positive("group_size", 0)
			if err != nil {
				return nil, err
			}
			q.Layers[name] = LayerQuant{Algo: strings.ToUpper(algo), GroupSize: g}
		}
	}
	if q.Layers == nil && q.Algo == "MIXED_PRECISION" {
		// Newer config.json exports may carry only config_groups, one per
		// distinct per-layer config with its targets (§B.2).
		if err := q.layersFromGroups(o); err != nil {
			return nil, err
		}
	}
	if q.Algo == "MIXED_PRECISION" && len(q.Layers) == 0 {
		return nil, fmt.Errorf("%squantized_layers: MIXED_PRECISION needs a per-layer map", o.path)
	}
	if q.Method == "" && q.Algo != "" {
		q.Method = "modelopt"
	}
	return q, nil
}

// layersFromGroups derives per-layer formats from compressed-tensors style
// config_groups: weights {num_bits 4, type float, group_size 16} is NVFP4,
// {num_bits 8, type float} is FP8.
func (q *QuantConfig) layersFromGroups(o object) error {
	groups, ok, err := o.sub("config_groups")
	if err != nil || !ok {
		return err
	}
	q.Layers = map[string]LayerQuant{}
	for _, gname := range slices.Sorted(mapKeys(groups.fields)) {
		g, ok, err := groups.sub(gname)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		w, ok, err := g.sub("weights")
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		bits, _, err := w.int("num_bits")
		if err != nil {
			return err
		}
		typ, err := w.str("type")
		if err != nil {
			return err
		}
		gs, err := w.positive("group_size", 0)
		if err != nil {
			return err
		}
		var algo string
		switch {
		case bits == 4 && typ == "float":
			algo = "NVFP4"
		case bits == 8 && typ == "float":
			algo = "FP8"
		default:
			algo = fmt.Sprintf("W%d_%s", bits, strings.ToUpper(typ))
		}
		targets, err := g.strings("targets")
		if err != nil {
			return err
		}
		for _, t := range targets {
			q.Layers[t] = LayerQuant{Algo: algo, GroupSize: gs}
		}
	}
	return nil
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// modulePrefixes are the wrapper prefixes under which the same module is
// named by different exports (sglang PR for Qwen3.6 ModelOpt mixed NVFP4:
// "model.language_model.*" vs "language_model.model.*").
var modulePrefixes = []string{"model.language_model.", "language_model.model.", "model.", "language_model.", ""}

// moduleVariants returns module under every wrapper prefix.
func moduleVariants(module string) []string {
	bare := module
	for _, p := range modulePrefixes {
		if p != "" && strings.HasPrefix(module, p) {
			bare = strings.TrimPrefix(module, p)
			break
		}
	}
	out := make([]string, 0, len(modulePrefixes))
	for _, p := range modulePrefixes {
		out = append(out, p+bare)
	}
	return out
}

// ModuleAlgo returns the declared format of a module ("model.language_model.
// layers.0.mlp.down_proj"), upper case, or "" when the config says it is not
// quantized. MIXED_PRECISION: the module's entry in Layers (under any wrapper
// prefix). Otherwise Algo unless an Exclude entry matches (exact, prefix
// followed by '.', or '*' wildcard — vLLM's order in modelopt.py).
func (q *QuantConfig) ModuleAlgo(module string) string {
	if q == nil {
		return ""
	}
	if q.Algo == "MIXED_PRECISION" || len(q.Layers) > 0 {
		for _, v := range moduleVariants(module) {
			if l, ok := q.Layers[v]; ok {
				return l.Algo
			}
		}
		return ""
	}
	if q.Excluded(module) {
		return ""
	}
	return q.Algo
}

// Excluded reports whether an Exclude entry names module.
func (q *QuantConfig) Excluded(module string) bool {
	for _, v := range moduleVariants(module) {
		for _, ex := range q.Exclude {
			if ex == v || strings.HasPrefix(v, ex+".") || (strings.ContainsAny(ex, "*?") && globMatch(ex, v)) {
				return true
			}
		}
	}
	return false
}

// FormatFamily maps a ModelOpt quant_algo to the storage family the audit
// detects from dtypes: "NVFP4", "FP8", "INT4" or "" (unquantized / unknown).
func FormatFamily(algo string) string {
	a := strings.ToUpper(algo)
	switch {
	case a == "":
		return ""
	case strings.Contains(a, "NVFP4"):
		return "NVFP4"
	case strings.HasPrefix(a, "FP8"), a == "MXFP8":
		return "FP8"
	case strings.Contains(a, "AWQ"), strings.HasPrefix(a, "W4A16"), strings.HasPrefix(a, "W4A8"):
		return "INT4"
	}
	return a
}

// Summary is a one-line description for reports.
func (q *QuantConfig) Summary() string {
	if q == nil {
		return "none declared"
	}
	var parts []string
	if q.Method != "" {
		parts = append(parts, q.Method)
	}
	if q.Algo != "" {
		parts = append(parts, q.Algo)
	}
	if len(q.Layers) > 0 {
		counts := map[string]int{}
		for _, l := range q.Layers {
			counts[l.Algo]++
		}
		keys := slices.Sorted(mapKeys(counts))
		sort.Strings(keys)
		var c []string
		for _, k := range keys {
			c = append(c, fmt.Sprintf("%d %s", counts[k], k))
		}
		parts = append(parts, "("+strings.Join(c, ", ")+" layers)")
	}
	if q.KVCacheAlgo != "" {
		parts = append(parts, "KV "+q.KVCacheAlgo)
	}
	return strings.Join(parts, " ") + " [" + q.Source + "]"
}
