package draft_test

import (
	"math"
	"testing"

	"lithos/runtime/draft"
	"lithos/runtime/model"
)

// yarnReference is the YaRN inverse frequency of dim i in float64 as lithos-metal.md §5.2 states
// the equations (bounds rot·ln(orig/(2π·β))/(2·ln θ), floored/ceiled when truncating, clamped to
// [0, rot−1]; linear ramp over the index; freq = (1/(factor·θ^(2j/rot)))·ramp + (1/θ^(2j/rot))·(1−ramp)).
func yarnReference(c *draft.Config, i int) float64 {
	d, y := float64(c.HeadDim), &c.Rope
	bound := func(beta float64) float64 {
		return d * math.Log(float64(y.OriginalMaxPos)/(2*math.Pi*beta)) / (2 * math.Log(c.RopeTheta))
	}
	lo, hi := bound(y.BetaFast), bound(y.BetaSlow)
	if !y.NoTruncate {
		lo, hi = math.Floor(lo), math.Ceil(hi)
	}
	lo, hi = math.Max(lo, 0), math.Min(hi, d-1)
	if lo == hi {
		hi += 0.001
	}
	ramp := math.Min(math.Max((float64(i)-lo)/(hi-lo), 0), 1)
	p := math.Pow(c.RopeTheta, 2*float64(i)/d)
	return ramp/(y.Factor*p) + (1-ramp)/p
}

func yarnConfig(theta float64, headDim int, r draft.RopeScaling) draft.Config {
	return draft.Config{HeadDim: headDim, RopeTheta: theta, Rope: r}
}

// TestRopeYaRN27B: the published 27B head's RoPE (θ 1e7, head_dim 128, factor 32 over 8192,
// β 32/1): correction range [14, 29] (b(32) = 14.72 floored, b(1) = 28.48 ceiled), so dims 0 … 14
// keep θ^(−2i/128) exactly, dims 29 … 63 are exactly those / 32, dims 15 … 28 lie strictly
// between; amplitude 1 + 0.1·ln 32; every dim within 1e-6 of the float64 equations.
func TestRopeYaRN27B(t *testing.T) {
	c := yarnConfig(1e7, 128, draft.RopeScaling{Type: "yarn", Factor: 32, OriginalMaxPos: 8192, BetaFast: 32, BetaSlow: 1})
	r := draft.NewRope(&c)
	def := model.NewRope(1e7, 128).InvFreq
	if len(r.InvFreq) != 64 || r.Dim != 128 {
		t.Fatalf("%d frequencies over %d dims", len(r.InvFreq), r.Dim)
	}
	for i, f := range r.InvFreq {
		switch {
		case i <= 14 && f != def[i]:
			t.Errorf("dim %d: %v, want the unscaled %v (extrapolation)", i, f, def[i])
		case i >= 29 && f != def[i]/32:
			t.Errorf("dim %d: %v, want %v / 32 (interpolation)", i, f, def[i])
		case i > 14 && i < 29 && !(f < def[i] && f > def[i]/32):
			t.Errorf("dim %d: %v, want strictly between %v and %v (ramp)", i, f, def[i]/32, def[i])
		}
		if want := yarnReference(&c, i); math.Abs(float64(f)-want) > 1e-6*want {
			t.Errorf("dim %d: %v, the equations give %v", i, f, want)
		}
	}
	if want := float32(1 + 0.1*math.Log(32)); r.Scale != want {
		t.Errorf("amplitude %v, want 1 + 0.1·ln 32 = %v", r.Scale, want)
	}
	// The tables carry the amplitude: cos² + sin² = Scale².
	cos, sin := make([]float32, 64), make([]float32, 64)
	r.Tables(cos, sin, 100000)
	for i := range cos {
		if n := math.Hypot(float64(cos[i]), float64(sin[i])); math.Abs(n-float64(r.Scale)) > 1e-6 {
			t.Fatalf("dim %d at position 100000: |(cos, sin)| = %v, want %v", i, n, r.Scale)
		}
	}
}

// TestRopeYaRNOptions: truncate false keeps the fractional correction range (tiny geometry: θ 1e7,
// head_dim 32, factor 4 over 1024 → [1.616, 5.056] instead of [1, 6]); attention_factor and
// mscale/mscale_all_dim set the amplitude as _compute_yarn_parameters does; factor 1 gives
// amplitude 1 (mscale(s ≤ 1) = 1).
func TestRopeYaRNOptions(t *testing.T) {
	base := draft.RopeScaling{Type: "yarn", Factor: 4, OriginalMaxPos: 1024, BetaFast: 32, BetaSlow: 1}
	trunc := yarnConfig(1e7, 32, base)
	frac := base
	frac.NoTruncate = true
	noTrunc := yarnConfig(1e7, 32, frac)
	rt, rf := draft.NewRope(&trunc), draft.NewRope(&noTrunc)
	for i := range rt.InvFreq {
		for _, c := range []struct {
			cfg *draft.Config
			got float32
		}{{&trunc, rt.InvFreq[i]}, {&noTrunc, rf.InvFreq[i]}} {
			if want := yarnReference(c.cfg, i); math.Abs(float64(c.got)-want) > 1e-6*want {
				t.Errorf("truncate %v, dim %d: %v, the equations give %v", !c.cfg.Rope.NoTruncate, i, c.got, want)
			}
		}
	}
	// Dim 2: ramp (2−1)/5 = 0.2 truncated, (2−1.616)/3.44 ≈ 0.112 not: the latter is closer to
	// extrapolation (larger).
	if !(rf.InvFreq[2] > rt.InvFreq[2]) {
		t.Errorf("dim 2: truncate false %v should exceed truncate true %v", rf.InvFreq[2], rt.InvFreq[2])
	}
	for _, c := range []struct {
		name string
		edit func(r *draft.RopeScaling)
		want float64
	}{
		{"default", func(*draft.RopeScaling) {}, 1 + 0.1*math.Log(4)},
		{"attention_factor", func(r *draft.RopeScaling) { r.AttentionFactor = 0.75; r.Mscale = 2 }, 0.75},
		{"mscale ratio", func(r *draft.RopeScaling) { r.Mscale, r.MscaleAllDim = 0.707, 1 }, (0.1*0.707*math.Log(4) + 1) / (0.1*math.Log(4) + 1)},
		{"mscale alone", func(r *draft.RopeScaling) { r.Mscale = 0.707 }, 1 + 0.1*math.Log(4)},
		{"factor 1", func(r *draft.RopeScaling) { r.Factor = 1 }, 1},
	} {
		r := base
		c.edit(&r)
		if got := r.Amplitude(); math.Abs(got-c.want) > 1e-15 {
			t.Errorf("%s: amplitude %v, want %v", c.name, got, c.want)
		}
		cfg := yarnConfig(1e7, 32, r)
		if s := draft.NewRope(&cfg).Scale; s != float32(c.want) {
			t.Errorf("%s: Rope.Scale %v, want %v", c.name, s, float32(c.want))
		}
	}
}

// TestRopeLinearDefault: linear divides the default frequencies by the factor; default (and the
// zero RopeScaling) is runtime/model's RoPE; neither scales the tables.
func TestRopeLinearDefault(t *testing.T) {
	def := model.NewRope(1e6, 64)
	lin := yarnConfig(1e6, 64, draft.RopeScaling{Type: "linear", Factor: 3})
	rl := draft.NewRope(&lin)
	for i, f := range rl.InvFreq {
		if f != def.InvFreq[i]/3 {
			t.Errorf("linear dim %d: %v, want %v / 3", i, f, def.InvFreq[i])
		}
	}
	for _, typ := range []string{"", "default"} {
		c := yarnConfig(1e6, 64, draft.RopeScaling{Type: typ, Factor: 5})
		r := draft.NewRope(&c)
		if r.Scale != 1 {
			t.Errorf("type %q: scale %v", typ, r.Scale)
		}
		for i, f := range r.InvFreq {
			if f != def.InvFreq[i] {
				t.Fatalf("type %q dim %d: %v, want %v", typ, i, f, def.InvFreq[i])
			}
		}
	}
	if rl.Scale != 1 {
		t.Errorf("linear scale %v", rl.Scale)
	}
}
