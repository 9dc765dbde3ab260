package formats

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path"
	"sort"
	"strings"
)

// Scheme is a checkpoint's quantization config, reduced to what format detection needs.
// The zero Scheme means "no quantization config".
type Scheme struct {
	// Method is the producer: "modelopt", "mlx", "awq", "gptq", or any other quant_method
	// verbatim ("compressed-tensors", "fp8", "bitsandbytes", …); "" when there is no config.
	// "none" marks a module the config leaves unquantized (Module's result only).
	Method string
	// Algo is ModelOpt's quant_algo, upper-case ("NVFP4", "W4A16_NVFP4", "FP8", "MIXED_PRECISION", …).
	Algo string
	// Mode is MLX's quantization mode ("affine" when the config names none, "nvfp4", "mxfp4", …).
	Mode string
	// Bits and GroupSize as the config states them (0 when absent; GPTQ's −1 group is kept).
	Bits, GroupSize int
	// Version is AutoAWQ's "version" (e.g. "gemm") or GPTQ's "checkpoint_format" (e.g. "gptq",
	// "gptq_v2"), lower-case; "" when absent.
	Version string
	// DescAct is GPTQ's desc_act (act-order).
	DescAct bool
	// NoZeroPoint is set when an AWQ config says zero_point: false.
	NoZeroPoint bool
	// Exclude lists module patterns left unquantized (ModelOpt exclude_modules / ignore).
	Exclude []string
	// Layers holds per-module overrides: ModelOpt MIXED_PRECISION quantized_layers (modules not
	// listed are unquantized) and MLX per-module entries (false = unquantized).
	Layers map[string]Scheme
}

// ParseConfig extracts the Scheme from a model's config.json: the "quantization_config" object
// (ModelOpt's quant_method "modelopt", AutoAWQ "awq", AutoGPTQ "gptq", others by name) or MLX's
// "quantization" object (mlx-lm also copies it, without quant_method, into
// "quantization_config"). A config without either gives the zero Scheme. It returns an error for
// invalid JSON or a quantization object of the wrong shape.
func ParseConfig(configJSON []byte) (Scheme, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(configJSON, &top); err != nil {
		return Scheme{}, fmt.Errorf("config.json: %w", err)
	}
	if raw, ok := top["quantization_config"]; ok && !isNull(raw) {
		s, err := parseQuantizationConfig(raw)
		if err != nil {
			return Scheme{}, fmt.Errorf("config.json quantization_config: %w", err)
		}
		return s, nil
	}
	if raw, ok := top["quantization"]; ok && !isNull(raw) {
		s, err := parseMLX(raw)
		if err != nil {
			return Scheme{}, fmt.Errorf("config.json quantization: %w", err)
		}
		return s, nil
	}
	return Scheme{}, nil
}

// ParseHFQuantConfig extracts the Scheme from ModelOpt's hf_quant_config.json:
// {"producer": {"name": "modelopt", …}, "quantization": {"quant_algo", "group_size",
// "exclude_modules", "quantized_layers", …}} (qwen35-and-quant.md §B.1).
func ParseHFQuantConfig(b []byte) (Scheme, error) {
	var doc struct {
		Producer struct {
			Name string `json:"name"`
		} `json:"producer"`
		Quantization json.RawMessage `json:"quantization"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return Scheme{}, fmt.Errorf("hf_quant_config.json: %w", err)
	}
	if doc.Producer.Name != "" && doc.Producer.Name != "modelopt" {
		return Scheme{}, fmt.Errorf("hf_quant_config.json: producer %q: only modelopt exports are understood", doc.Producer.Name)
	}
	if len(doc.Quantization) == 0 || isNull(doc.Quantization) {
		return Scheme{}, fmt.Errorf("hf_quant_config.json: missing \"quantization\" object")
	}
	s, err := parseModelOpt(doc.Quantization)
	if err != nil {
		return Scheme{}, fmt.Errorf("hf_quant_config.json quantization: %w", err)
	}
	return s, nil
}

func isNull(raw json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(raw), []byte("null")) }

func parseQuantizationConfig(raw json.RawMessage) (Scheme, error) {
	var head struct {
		QuantMethod *string `json:"quant_method"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return Scheme{}, err
	}
	if head.QuantMethod == nil {
		return parseMLX(raw) // mlx-lm's copy of "quantization"
	}
	switch m := strings.ToLower(*head.QuantMethod); m {
	case "modelopt":
		return parseModelOpt(raw)
	case "awq":
		var c struct {
			Bits      int    `json:"bits"`
			GroupSize int    `json:"group_size"`
			ZeroPoint *bool  `json:"zero_point"`
			Version   string `json:"version"`
		}
		if err := json.Unmarshal(raw, &c); err != nil {
			return Scheme{}, err
		}
		return Scheme{Method: m, Bits: c.Bits, GroupSize: c.GroupSize, Version: strings.ToLower(c.Version),
			NoZeroPoint: c.ZeroPoint != nil && !*c.ZeroPoint}, nil
	case "gptq":
		var c struct {
			Bits             int    `json:"bits"`
			GroupSize        int    `json:"group_size"`
			DescAct          bool   `json:"desc_act"`
			CheckpointFormat string `json:"checkpoint_format"`
		}
		if err := json.Unmarshal(raw, &c); err != nil {
			return Scheme{}, err
		}
		return Scheme{Method: m, Bits: c.Bits, GroupSize: c.GroupSize, DescAct: c.DescAct,
			Version: strings.ToLower(c.CheckpointFormat)}, nil
	default:
		var c struct {
			Format string `json:"format"`
		}
		_ = json.Unmarshal(raw, &c) // best effort: only used in messages
		return Scheme{Method: m, Version: strings.ToLower(c.Format)}, nil
	}
}

// parseModelOpt reads either shape ModelOpt writes: hf_quant_config's "quantization" object or
// config.json's quantization_config (qwen35-and-quant.md §B.1–B.2).
func parseModelOpt(raw json.RawMessage) (Scheme, error) {
	var c struct {
		QuantAlgo       string                     `json:"quant_algo"`
		GroupSize       int                        `json:"group_size"`
		ExcludeModules  []string                   `json:"exclude_modules"`
		Ignore          []string                   `json:"ignore"`
		QuantizedLayers map[string]json.RawMessage `json:"quantized_layers"`
		ConfigGroups    map[string]struct {
			Weights *struct {
				NumBits   int `json:"num_bits"`
				GroupSize int `json:"group_size"`
			} `json:"weights"`
		} `json:"config_groups"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return Scheme{}, err
	}
	s := Scheme{Method: "modelopt", Algo: strings.ToUpper(c.QuantAlgo), GroupSize: c.GroupSize}
	s.Exclude = append(append([]string(nil), c.ExcludeModules...), c.Ignore...)
	if s.GroupSize == 0 && s.Algo != "MIXED_PRECISION" {
		// config.json variant: the group size sits in config_groups.*.weights (one group for a
		// single-format export). Take it when all groups agree.
		for _, g := range sortedKeys(c.ConfigGroups) {
			if w := c.ConfigGroups[g].Weights; w != nil && w.GroupSize > 0 {
				if s.GroupSize != 0 && s.GroupSize != w.GroupSize {
					return Scheme{}, fmt.Errorf("config_groups disagree on weights.group_size (%d vs %d)", s.GroupSize, w.GroupSize)
				}
				s.GroupSize = w.GroupSize
			}
		}
	}
	if len(c.QuantizedLayers) > 0 {
		s.Layers = make(map[string]Scheme, len(c.QuantizedLayers))
		for name, lraw := range c.QuantizedLayers {
			var l struct {
				QuantAlgo string `json:"quant_algo"`
				GroupSize int    `json:"group_size"`
			}
			if err := json.Unmarshal(lraw, &l); err != nil {
				return Scheme{}, fmt.Errorf("quantized_layers[%q]: %w", name, err)
			}
			s.Layers[name] = Scheme{Method: "modelopt", Algo: strings.ToUpper(l.QuantAlgo), GroupSize: l.GroupSize}
		}
	}
	return s, nil
}

// parseMLX reads mlx-lm's {"group_size", "bits", "mode", "<module>": false | {…}} object.
func parseMLX(raw json.RawMessage) (Scheme, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return Scheme{}, err
	}
	s := Scheme{Method: "mlx", Mode: "affine"}
	for _, k := range sortedKeys(m) {
		v := m[k]
		var err error
		switch k {
		case "group_size":
			err = json.Unmarshal(v, &s.GroupSize)
		case "bits":
			err = json.Unmarshal(v, &s.Bits)
		case "mode":
			err = json.Unmarshal(v, &s.Mode)
			s.Mode = strings.ToLower(s.Mode)
		case "quant_method":
			// tolerated on mlx-lm copies; the shape decides
		default:
			if s.Layers == nil {
				s.Layers = map[string]Scheme{}
			}
			var b bool
			if json.Unmarshal(v, &b) == nil {
				if !b {
					s.Layers[k] = Scheme{Method: "none"}
				}
				continue
			}
			var l struct {
				GroupSize int    `json:"group_size"`
				Bits      int    `json:"bits"`
				Mode      string `json:"mode"`
			}
			if e := json.Unmarshal(v, &l); e != nil {
				// Other top-level keys (non-module settings) are ignored.
				continue
			}
			ls := Scheme{Method: "mlx", Mode: strings.ToLower(l.Mode), Bits: l.Bits, GroupSize: l.GroupSize}
			if ls.Mode == "" {
				ls.Mode = s.Mode
			}
			s.Layers[k] = ls
		}
		if err != nil {
			return Scheme{}, fmt.Errorf("%q: %w", k, err)
		}
	}
	// Per-module entries inherit unset fields from the global settings.
	for k, l := range s.Layers {
		if l.Method == "mlx" {
			if l.Bits == 0 {
				l.Bits = s.Bits
			}
			if l.GroupSize == 0 {
				l.GroupSize = s.GroupSize
			}
			s.Layers[k] = l
		}
	}
	return s, nil
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// Module returns the scheme that applies to the module at path name (e.g.
// "model.language_model.layers.0.mlp.down_proj"): its per-module override if Layers has one;
// Scheme{Method: "none"} when the module matches an Exclude pattern (exact name, a parent module,
// or a path.Match wildcard such as "model.visual*") or when a ModelOpt MIXED_PRECISION config
// does not list it; otherwise s itself without Layers and Exclude.
func (s Scheme) Module(name string) Scheme {
	if l, ok := s.Layers[name]; ok {
		return l
	}
	for _, p := range s.Exclude {
		if p == name || strings.HasPrefix(name, p+".") {
			return Scheme{Method: "none"}
		}
		if ok, err := path.Match(p, name); err == nil && ok {
			return Scheme{Method: "none"}
		}
	}
	if s.Method == "modelopt" && s.Algo == "MIXED_PRECISION" {
		return Scheme{Method: "none"}
	}
	r := s
	r.Layers, r.Exclude = nil, nil
	return r
}
