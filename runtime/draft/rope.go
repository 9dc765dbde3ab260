package draft

import (
	"encoding/json"
	"fmt"
	"math"

	"lithos/runtime/model"
)

// RoPE types (rope_scaling.rope_type / rope_parameters.rope_type) the drafter implements.
const (
	RopeDefault = "default" // inv_freq_i = θ^(−2i/d)
	RopeLinear  = "linear"  // inv_freq_i = θ^(−2i/d) / factor
	RopeYaRN    = "yarn"    // YaRN (arXiv 2309.00071) as transformers computes it; see NewRope
)

// RopeScaling is the frequency scaling of the draft's RoPE, from the config's rope_scaling
// (transformers 4) or rope_parameters (transformers 5) object. The zero value is default RoPE.
// Field meanings and defaults are those of transformers' RopeParameters
// (modeling_rope_utils.py / configuration_utils RotaryEmbeddingConfigMixin, 5.x).
type RopeScaling struct {
	Type   string  // RopeDefault ("" reads as default), RopeLinear or RopeYaRN
	Factor float64 // linear, yarn: factor ≥ 1 (the context extension)

	// YaRN only.
	OriginalMaxPos  int     // original_max_position_embeddings (default: max_position_embeddings)
	BetaFast        float64 // beta_fast: rotations bounding pure extrapolation (default 32)
	BetaSlow        float64 // beta_slow: rotations bounding pure interpolation (default 1)
	AttentionFactor float64 // attention_factor: cos/sin amplitude; 0 = derived from Factor (Amplitude)
	Mscale          float64 // mscale; with MscaleAllDim (both non-zero) the amplitude is a ratio
	MscaleAllDim    float64 // mscale_all_dim
	NoTruncate      bool    // truncate false: the correction range keeps fractional bounds (default: floor/ceil)
}

// kind returns Type with "" read as RopeDefault.
func (r *RopeScaling) kind() string {
	if r.Type == "" {
		return RopeDefault
	}
	return r.Type
}

// Amplitude returns the factor transformers multiplies cos and sin by (its attention_scaling):
// 1 except for YaRN, where it is attention_factor when given, else
// mscale(Factor, Mscale)/mscale(Factor, MscaleAllDim) when both are non-zero, else
// mscale(Factor, 1), with mscale(s, m) = 1 for s ≤ 1 and 0.1·m·ln s + 1 otherwise
// (_compute_yarn_parameters; 1 + 0.1·ln 32 ≈ 1.3466 for the 27B head, lithos-metal.md §5.2).
func (r *RopeScaling) Amplitude() float64 {
	if r.kind() != RopeYaRN {
		return 1
	}
	if r.AttentionFactor != 0 {
		return r.AttentionFactor
	}
	ms := func(s, m float64) float64 {
		if s <= 1 {
			return 1
		}
		return 0.1*m*math.Log(s) + 1
	}
	if r.Mscale != 0 && r.MscaleAllDim != 0 {
		return ms(r.Factor, r.Mscale) / ms(r.Factor, r.MscaleAllDim)
	}
	return ms(r.Factor, 1)
}

// validate checks the fields NewRope relies on; theta is the config's rope_theta.
func (r *RopeScaling) validate(theta float64) error {
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	switch r.kind() {
	case RopeDefault:
		return nil
	case RopeLinear, RopeYaRN:
	default:
		return fmt.Errorf("draft config: rope_type %q: the drafter implements %q, %q and %q RoPE", r.Type, RopeDefault, RopeLinear, RopeYaRN)
	}
	if !finite(r.Factor) || r.Factor < 1 || r.Factor > 1e6 {
		return fmt.Errorf("draft config: %s RoPE factor must be a finite number in [1, 1e6], got %v", r.Type, r.Factor)
	}
	if r.kind() == RopeLinear {
		return nil
	}
	switch {
	case !(theta > 1):
		return fmt.Errorf("draft config: yarn RoPE needs rope_theta > 1, got %v", theta)
	case r.OriginalMaxPos <= 0 || int64(r.OriginalMaxPos) > 1<<31:
		return fmt.Errorf("draft config: yarn original_max_position_embeddings must be positive, got %d", r.OriginalMaxPos)
	case !finite(r.BetaFast) || !finite(r.BetaSlow) || r.BetaFast <= 0 || r.BetaSlow <= 0:
		return fmt.Errorf("draft config: yarn beta_fast %v and beta_slow %v must be positive and finite", r.BetaFast, r.BetaSlow)
	case r.BetaFast < r.BetaSlow:
		return fmt.Errorf("draft config: yarn beta_fast %v must be at least beta_slow %v", r.BetaFast, r.BetaSlow)
	case !finite(r.AttentionFactor) || r.AttentionFactor < 0 || r.AttentionFactor > 1e3:
		return fmt.Errorf("draft config: yarn attention_factor must be positive and finite, got %v", r.AttentionFactor)
	case !finite(r.Mscale) || !finite(r.MscaleAllDim) || r.Mscale < 0 || r.MscaleAllDim < 0 || r.Mscale > 1e3 || r.MscaleAllDim > 1e3:
		return fmt.Errorf("draft config: yarn mscale %v and mscale_all_dim %v must be non-negative and finite", r.Mscale, r.MscaleAllDim)
	}
	return nil
}

// Rope is the draft's rotary position embedding: model.Rope's NeoX rotation over the full
// head_dim (Apply) with the inverse frequencies of the config's RoPE type, and cos/sin
// multiplied by Scale (RopeScaling.Amplitude; 1 except for YaRN), as transformers'
// rotary embedding does (cos = cos(emb)·attention_scaling, sin likewise).
type Rope struct {
	model.Rope
	Scale float32
}

// NewRope returns the RoPE of a validated config, inverse frequencies computed in float32 the
// way transformers' ROPE_INIT_FUNCTIONS do (modeling_rope_utils.py, 5.x; read, not copied):
//
//   - default: inv_i = 1 / θ^(2i/d), i < d/2 (runtime/model.NewRope);
//   - linear:  inv_i = default_i / factor;
//   - yarn (_compute_yarn_parameters): p_i = θ^(2i/d); extrapolation e_i = 1/p_i, interpolation
//     n_i = 1/(factor·p_i); correction bounds b(β) = d·ln(orig/(2π·β)) / (2·ln θ), low = b(β_fast)
//     floored and high = b(β_slow) ceiled (unless truncate is false), then low = max(low, 0),
//     high = min(high, d−1) (high += 0.001 when equal); ramp_i = clamp((i − low)/(high − low), 0, 1);
//     x_i = 1 − ramp_i; inv_i = n_i·(1 − x_i) + e_i·x_i; Scale = Amplitude().
//
// d = HeadDim (the draft rotates the full head), θ = RopeTheta, orig = OriginalMaxPos.
func NewRope(c *Config) Rope {
	d := c.HeadDim
	r := Rope{Rope: model.NewRope(c.RopeTheta, d), Scale: float32(c.Rope.Amplitude())}
	switch c.Rope.kind() {
	case RopeLinear:
		f := float32(c.Rope.Factor)
		for i := range r.InvFreq {
			r.InvFreq[i] /= f
		}
	case RopeYaRN:
		y := &c.Rope
		bound := func(beta float64) float64 {
			return float64(d) * math.Log(float64(y.OriginalMaxPos)/(beta*2*math.Pi)) / (2 * math.Log(c.RopeTheta))
		}
		low, high := bound(y.BetaFast), bound(y.BetaSlow)
		if !y.NoTruncate {
			low, high = math.Floor(low), math.Ceil(high)
		}
		low, high = max(low, 0), min(high, float64(d-1))
		if low == high {
			high += 0.001
		}
		lo32, span := float32(low), float32(high-low)
		f := float32(y.Factor)
		for i := range r.InvFreq {
			e := float32(2*i) / float32(d)
			p := float32(math.Pow(c.RopeTheta, float64(e)))
			extra, inter := 1/p, 1/(f*p)
			ramp := min(max((float32(i)-lo32)/span, 0), 1)
			x := 1 - ramp
			// Explicit conversions: two rounded products and a rounded sum, never a fused one.
			r.InvFreq[i] = float32(inter*(1-x)) + float32(extra*x)
		}
	}
	return r
}

// Tables writes the cos and sin tables of position pos (HeadDim/2 values each), times Scale.
func (r Rope) Tables(cos, sin []float32, pos int) {
	r.Rope.Tables(cos, sin, pos)
	if r.Scale == 1 {
		return
	}
	for i := range cos {
		cos[i] *= r.Scale
		sin[i] *= r.Scale
	}
}

// ropeConfig reads rope_theta and the RoPE scaling: the rope_scaling object (transformers 4)
// and/or rope_parameters (transformers 5), each with rope_type (or the older "type"; default
// "default"), rope_theta, partial_rotary_factor (must be 1: draft heads rotate the full
// head_dim), factor, original_max_position_embeddings, beta_fast, beta_slow, attention_factor,
// mscale, mscale_all_dim, truncate. Where transformers versions could read a config differently
// it refuses instead of choosing: rope_theta given in several places with different values,
// rope_scaling and rope_parameters describing different scalings, original_max_position_embeddings
// at the top level and in the object with different values. A yarn object without
// original_max_position_embeddings takes the top-level one, else max_position_embeddings
// (transformers 5 standardize_rope_params). An explicit factor is used as given (transformers 5;
// 4.x replaced it by max_position_embeddings / original_max_position_embeddings), so a yarn
// config whose explicit original_max_position_embeddings and max_position_embeddings imply
// another factor is refused, naming the three fields.
func ropeConfig(top map[string]json.RawMessage) (float64, RopeScaling, error) {
	topObj := []obj{{m: top}}
	theta, haveTheta, err := number(topObj, "rope_theta", 0)
	if err != nil {
		return 0, RopeScaling{}, err
	}
	thetaFrom := "rope_theta"
	if f, found, err := number(topObj, "partial_rotary_factor", 1); err != nil {
		return 0, RopeScaling{}, err
	} else if found && f != 1 {
		return 0, RopeScaling{}, fmt.Errorf("draft config: partial_rotary_factor %v: draft heads rotate the full head_dim", f)
	}
	var scaling RopeScaling
	scalingFrom := ""
	for _, key := range []string{"rope_scaling", "rope_parameters"} {
		raw, found := present(top, key)
		if !found {
			continue
		}
		var sub map[string]json.RawMessage
		if err := json.Unmarshal(raw, &sub); err != nil || sub == nil {
			return 0, RopeScaling{}, fmt.Errorf("draft config: %s: want an object, got %s", key, clip(raw))
		}
		if len(sub) == 0 {
			continue // transformers 5: `rope_scaling or rope_parameters`, an empty object is none
		}
		for k, v := range sub {
			if len(v) > 0 && v[0] == '{' {
				return 0, RopeScaling{}, fmt.Errorf("draft config: %s.%s: per-layer-type RoPE parameters are not supported (the draft layers are all full attention)", key, k)
			}
		}
		so := []obj{{name: key + ".", m: sub}}
		if t, found, err := number(so, "rope_theta", 0); err != nil {
			return 0, RopeScaling{}, err
		} else if found {
			if haveTheta && t != theta {
				return 0, RopeScaling{}, fmt.Errorf("draft config: %s.rope_theta %v and %s %v disagree", key, t, thetaFrom, theta)
			}
			theta, haveTheta, thetaFrom = t, true, key+".rope_theta"
		}
		s, err := ropeScaling(top, so, key)
		if err != nil {
			return 0, RopeScaling{}, err
		}
		if scalingFrom != "" && s != scaling {
			return 0, RopeScaling{}, fmt.Errorf("draft config: %s (%s RoPE) and %s (%s RoPE) describe different scalings; keep one", scalingFrom, scaling.Type, key, s.Type)
		}
		scaling, scalingFrom = s, key
	}
	if !haveTheta {
		return 0, RopeScaling{}, fmt.Errorf("draft config: rope_theta: missing")
	}
	if scalingFrom == "" {
		scaling.Type = RopeDefault
	}
	return theta, scaling, nil
}

// ropeScaling reads one RoPE object so (named key in errors).
func ropeScaling(top map[string]json.RawMessage, so []obj, key string) (RopeScaling, error) {
	kind, err := str(so, "rope_type", "")
	if err != nil {
		return RopeScaling{}, err
	}
	if kind == "" {
		if kind, err = str(so, "type", RopeDefault); err != nil {
			return RopeScaling{}, err
		}
	}
	if f, found, err := number(so, "partial_rotary_factor", 1); err != nil {
		return RopeScaling{}, err
	} else if found && f != 1 {
		return RopeScaling{}, fmt.Errorf("draft config: %s.partial_rotary_factor %v: draft heads rotate the full head_dim", key, f)
	}
	s := RopeScaling{Type: kind}
	switch kind {
	case RopeDefault:
		return s, nil
	case RopeLinear, RopeYaRN:
	default:
		return RopeScaling{}, fmt.Errorf("draft config: %s.rope_type %q: the drafter implements %q, %q and %q RoPE", key, kind, RopeDefault, RopeLinear, RopeYaRN)
	}
	f, found, err := number(so, "factor", 0)
	if err != nil {
		return RopeScaling{}, err
	}
	if !found {
		return RopeScaling{}, fmt.Errorf("draft config: %s.factor: missing (%s RoPE)", key, kind)
	}
	if !(f >= 1) || f > 1e6 {
		return RopeScaling{}, fmt.Errorf("draft config: %s.factor %v: want a number in [1, 1e6]", key, f)
	}
	s.Factor = f
	if kind == RopeLinear {
		return s, nil
	}
	// beta_fast/beta_slow: transformers reads `get(...) or 32` / `or 1`, so 0 means the default too.
	for _, p := range []struct {
		name string
		dst  *float64
		def  float64
	}{{"beta_fast", &s.BetaFast, 32}, {"beta_slow", &s.BetaSlow, 1}, {"mscale", &s.Mscale, 0}, {"mscale_all_dim", &s.MscaleAllDim, 0}} {
		v, _, err := number(so, p.name, p.def)
		if err != nil {
			return RopeScaling{}, err
		}
		if v == 0 {
			v = p.def
		}
		if math.IsInf(v, 0) || v < 0 || v > 1e6 {
			return RopeScaling{}, fmt.Errorf("draft config: %s.%s %v: want a non-negative number", key, p.name, v)
		}
		*p.dst = v
	}
	if s.BetaFast < s.BetaSlow {
		return RopeScaling{}, fmt.Errorf("draft config: %s.beta_fast %v is below beta_slow %v (the ramp would run backwards)", key, s.BetaFast, s.BetaSlow)
	}
	if a, found, err := number(so, "attention_factor", 0); err != nil {
		return RopeScaling{}, err
	} else if found {
		if !(a > 0) || a > 1e3 {
			return RopeScaling{}, fmt.Errorf("draft config: %s.attention_factor %v: want a positive number", key, a)
		}
		s.AttentionFactor = a
	}
	truncate, err := boolean(so, "truncate", true)
	if err != nil {
		return RopeScaling{}, err
	}
	s.NoTruncate = !truncate
	topObj := []obj{{m: top}}
	orig, inObj, err := integer(so, "original_max_position_embeddings", 0)
	if err != nil {
		return RopeScaling{}, err
	}
	topOrig, atTop, err := integer(topObj, "original_max_position_embeddings", 0)
	if err != nil {
		return RopeScaling{}, err
	}
	switch {
	case inObj && atTop && orig != topOrig:
		return RopeScaling{}, fmt.Errorf("draft config: %s.original_max_position_embeddings %d and original_max_position_embeddings %d disagree", key, orig, topOrig)
	case !inObj && atTop:
		orig = topOrig
	case !inObj:
		maxPos, found, err := integer(topObj, "max_position_embeddings", 0)
		if err != nil {
			return RopeScaling{}, err
		}
		if !found {
			return RopeScaling{}, fmt.Errorf("draft config: %s.original_max_position_embeddings: missing, and no max_position_embeddings to take it from (yarn RoPE)", key)
		}
		orig = maxPos
	}
	if orig <= 0 {
		return RopeScaling{}, fmt.Errorf("draft config: %s.original_max_position_embeddings %d must be positive", key, orig)
	}
	// transformers 4.x _compute_yarn_parameters replaces factor by max_position_embeddings /
	// original_max_position_embeddings when the object gives the latter; 5.x uses factor as given
	// (and only warns). Refuse an explicit original length whose ratio is not the factor.
	if inObj || atTop {
		origName := "original_max_position_embeddings"
		if inObj {
			origName = key + "." + origName
		}
		maxPos, found, err := integer(topObj, "max_position_embeddings", 0)
		if err != nil {
			return RopeScaling{}, err
		}
		if implied := float64(maxPos) / float64(orig); found && math.Abs(implied-s.Factor) > 1e-6*s.Factor {
			return RopeScaling{}, fmt.Errorf("draft config: %s.factor %v ≠ max_position_embeddings %d / %s %d = %v: transformers 4 takes the ratio, 5 the factor; make them agree",
				key, s.Factor, maxPos, origName, orig, implied)
		}
	}
	s.OriginalMaxPos = orig
	return s, nil
}
