package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// This file holds the tests' independent float64 reference of the whole model: the
// straightforward full-sequence form (no cache, no chunks, no slots, no partitions), written
// from qwen35-and-quant.md Part A rather than from the package's code, and the raw weights
// both it and the package model are built from.

// rawLayer is one layer's weights as stored in a checkpoint (norm weights w, not 1+w;
// A_log, not −exp(A_log)), float32, row-major [out, in].
type rawLayer struct {
	kind              LayerKind
	inNorm, postNorm  []float32
	qkv, z, b, a, out []float32
	conv              []float32 // [ConvDim, ConvKernel]
	aLog, dtBias      []float32
	gNorm             []float32
	q, k, v, o        []float32
	qNorm, kNorm      []float32
	gate, up, down    []float32
}

type rawModel struct {
	cfg    Config
	embed  []float32
	layers []rawLayer
	norm   []float32
	lmHead []float32
}

func normals(rng *rand.Rand, n int, std float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64() * std)
	}
	return v
}

func uniforms(rng *rand.Rand, n int, lo, hi float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(lo + (hi-lo)*rng.Float64())
	}
	return v
}

// randomRaw draws a model like tools/qwen35_goldens.py does: N(0, 1/√K) matrices, (1+w)
// norm weights w ∈ [−0.4, 0.4], gated-norm weights 1 ± 0.4, A_log = log U(0.05, 1),
// dt_bias ∈ [−1.5, 0.5], conv N(0, 0.5), embeddings N(0, 1).
func randomRaw(cfg Config, seed uint64) *rawModel {
	rng := rand.New(rand.NewPCG(seed, 77))
	h := cfg.Hidden
	lin := func(n, k int, gain float64) []float32 { return normals(rng, n*k, gain/math.Sqrt(float64(k))) }
	r := &rawModel{cfg: cfg, embed: normals(rng, cfg.Vocab*h, 1), norm: uniforms(rng, h, -0.4, 0.4), lmHead: lin(cfg.Vocab, h, 2)}
	for _, kind := range cfg.Layers {
		l := rawLayer{kind: kind, inNorm: uniforms(rng, h, -0.4, 0.4), postNorm: uniforms(rng, h, -0.4, 0.4),
			gate: lin(cfg.Intermediate, h, 1), up: lin(cfg.Intermediate, h, 1), down: lin(h, cfg.Intermediate, 1)}
		switch kind {
		case GDN:
			vd := cfg.VHeads * cfg.VDim
			l.qkv, l.z = lin(cfg.ConvDim(), h, 1), lin(vd, h, 1)
			l.b, l.a, l.out = lin(cfg.VHeads, h, 1), lin(cfg.VHeads, h, 1), lin(h, vd, 1)
			l.conv = normals(rng, cfg.ConvDim()*cfg.ConvKernel, 0.5)
			l.aLog = make([]float32, cfg.VHeads)
			for i := range l.aLog {
				l.aLog[i] = float32(math.Log(0.05 + 0.95*rng.Float64()))
			}
			l.dtBias = uniforms(rng, cfg.VHeads, -1.5, 0.5)
			l.gNorm = uniforms(rng, cfg.VDim, 0.6, 1.4)
		case Attention:
			qd, kvd := cfg.Heads*cfg.HeadDim, cfg.KVHeads*cfg.HeadDim
			l.q, l.k, l.v, l.o = lin(2*qd, h, 1), lin(kvd, h, 1), lin(kvd, h, 1), lin(h, qd, 1)
			l.qNorm, l.kNorm = uniforms(rng, cfg.HeadDim, -0.4, 0.4), uniforms(rng, cfg.HeadDim, -0.4, 0.4)
		}
		r.layers = append(r.layers, l)
	}
	return r
}

// model builds the package's Model over dense copies of r's weights.
func (r *rawModel) model(t testing.TB) *Model {
	t.Helper()
	c := r.cfg
	h := c.Hidden
	mat := func(w []float32, n, k int) Matrix {
		m, err := Dense(w, n, k)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	emb, err := DenseEmbedding(r.embed, c.Vocab, h)
	if err != nil {
		t.Fatal(err)
	}
	w := Weights{Embed: emb, FinalNorm: OnePlus(r.norm), LMHead: mat(r.lmHead, c.Vocab, h)}
	for _, l := range r.layers {
		L := Layer{Kind: l.kind, InputNorm: OnePlus(l.inNorm), PostNorm: OnePlus(l.postNorm),
			Gate: mat(l.gate, c.Intermediate, h), Up: mat(l.up, c.Intermediate, h), Down: mat(l.down, h, c.Intermediate)}
		switch l.kind {
		case GDN:
			vd := c.VHeads * c.VDim
			L.QKV, L.Z, L.B, L.A, L.Out = mat(l.qkv, c.ConvDim(), h), mat(l.z, vd, h), mat(l.b, c.VHeads, h), mat(l.a, c.VHeads, h), mat(l.out, h, vd)
			L.Conv, L.NegA, L.DtBias, L.GatedNorm = l.conv, NegExp(l.aLog), l.dtBias, l.gNorm
		case Attention:
			qd, kvd := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
			L.Q, L.K, L.V, L.O = mat(l.q, 2*qd, h), mat(l.k, kvd, h), mat(l.v, kvd, h), mat(l.o, h, qd)
			L.QNorm, L.KNorm = OnePlus(l.qNorm), OnePlus(l.kNorm)
		}
		w.Layers = append(w.Layers, L)
	}
	m, err := New(c, w)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// rawFromTensors assembles a rawModel from dequantized checkpoint tensors by name
// (LoadOptions.OnTensor), prefix "model.language_model." or "model.".
func rawFromTensors(cfg Config, ts map[string][]float32, prefix string) (*rawModel, error) {
	get := func(name string) ([]float32, error) {
		v, ok := ts[name]
		if !ok {
			return nil, fmt.Errorf("tensor %s not captured", name)
		}
		return v, nil
	}
	var err error
	r := &rawModel{cfg: cfg}
	for _, f := range []struct {
		dst  *[]float32
		name string
	}{{&r.embed, prefix + "embed_tokens.weight"}, {&r.norm, prefix + "norm.weight"}, {&r.lmHead, "lm_head.weight"}} {
		if *f.dst, err = get(f.name); err != nil {
			return nil, err
		}
	}
	for i, kind := range cfg.Layers {
		p := fmt.Sprintf("%slayers.%d.", prefix, i)
		l := rawLayer{kind: kind}
		fields := []struct {
			dst  *[]float32
			name string
		}{{&l.inNorm, "input_layernorm.weight"}, {&l.postNorm, "post_attention_layernorm.weight"},
			{&l.gate, "mlp.gate_proj.weight"}, {&l.up, "mlp.up_proj.weight"}, {&l.down, "mlp.down_proj.weight"}}
		if kind == GDN {
			fields = append(fields, []struct {
				dst  *[]float32
				name string
			}{{&l.qkv, "linear_attn.in_proj_qkv.weight"}, {&l.z, "linear_attn.in_proj_z.weight"}, {&l.b, "linear_attn.in_proj_b.weight"},
				{&l.a, "linear_attn.in_proj_a.weight"}, {&l.out, "linear_attn.out_proj.weight"}, {&l.conv, "linear_attn.conv1d.weight"},
				{&l.aLog, "linear_attn.A_log"}, {&l.dtBias, "linear_attn.dt_bias"}, {&l.gNorm, "linear_attn.norm.weight"}}...)
		} else {
			fields = append(fields, []struct {
				dst  *[]float32
				name string
			}{{&l.q, "self_attn.q_proj.weight"}, {&l.k, "self_attn.k_proj.weight"}, {&l.v, "self_attn.v_proj.weight"},
				{&l.o, "self_attn.o_proj.weight"}, {&l.qNorm, "self_attn.q_norm.weight"}, {&l.kNorm, "self_attn.k_norm.weight"}}...)
		}
		for _, f := range fields {
			if *f.dst, err = get(p + f.name); err != nil {
				return nil, err
			}
		}
		r.layers = append(r.layers, l)
	}
	return r, nil
}

// ---- float64 reference ----

func matvec64(w []float32, n, k int, x []float64) []float64 {
	y := make([]float64, n)
	for i := 0; i < n; i++ {
		var s float64
		for j := 0; j < k; j++ {
			s += float64(w[i*k+j]) * x[j]
		}
		y[i] = s
	}
	return y
}

func rms64(x []float64, w []float32, onePlus bool, eps float64) []float64 {
	var ss float64
	for _, v := range x {
		ss += v * v
	}
	r := 1 / math.Sqrt(ss/float64(len(x))+eps)
	y := make([]float64, len(x))
	for i, v := range x {
		s := float64(w[i])
		if onePlus {
			s += 1
		}
		y[i] = v * r * s
	}
	return y
}

func silu64(x float64) float64    { return x / (1 + math.Exp(-x)) }
func sigmoid64(x float64) float64 { return 1 / (1 + math.Exp(-x)) }
func softplus64(x float64) float64 {
	if x > 20 {
		return x
	}
	return math.Log(1 + math.Exp(x))
}

// ropeAngle64 is transformers' RoPE angle: float32 inverse frequency θ^(−2i/dim) and a float32
// product with the position (the model defines it in float32).
func ropeAngle64(theta float64, dim, i, pos int) float64 {
	inv := float32(1 / float32(math.Pow(theta, float64(float32(2*i)/float32(dim)))))
	return float64(float32(pos) * inv)
}

// rope64 rotates the first dim values of x (one head) as the complex numbers
// (x_i + i·x_{i+dim/2})·e^{i·a_i}.
func rope64(x []float64, dim int, theta float64, pos int) {
	half := dim / 2
	for i := 0; i < half; i++ {
		a := ropeAngle64(theta, dim, i, pos)
		z := complex(x[i], x[i+half]) * complex(math.Cos(a), math.Sin(a))
		x[i], x[i+half] = real(z), imag(z)
	}
}

// logits64 runs the float64 reference over the whole sequence and returns the logits of
// every position; trace (optional) receives per-layer outputs like Model.Trace.
func (r *rawModel) logits64(tokens []int32, trace func(kind string, layer int, x [][]float64)) [][]float64 {
	c := r.cfg
	h := c.Hidden
	eps := float64(c.RMSEps)
	T := len(tokens)
	x := make([][]float64, T)
	for t, id := range tokens {
		x[t] = make([]float64, h)
		for i := range x[t] {
			x[t][i] = float64(r.embed[int(id)*h+i])
		}
	}
	if trace != nil {
		trace("hidden", 0, x)
	}
	for li, l := range r.layers {
		hn := make([][]float64, T)
		for t := range x {
			hn[t] = rms64(x[t], l.inNorm, true, eps)
		}
		var mix [][]float64
		if l.kind == GDN {
			mix = r.gdn64(l, hn)
		} else {
			mix = r.attn64(l, hn)
		}
		if trace != nil {
			trace("mixer", li, mix)
		}
		for t := range x {
			for i := range x[t] {
				x[t][i] += mix[t][i]
			}
			hn2 := rms64(x[t], l.postNorm, true, eps)
			g := matvec64(l.gate, c.Intermediate, h, hn2)
			u := matvec64(l.up, c.Intermediate, h, hn2)
			for i := range g {
				g[i] = silu64(g[i]) * u[i]
			}
			d := matvec64(l.down, h, c.Intermediate, g)
			for i := range x[t] {
				x[t][i] += d[i]
			}
		}
		if trace != nil {
			trace("hidden", li+1, x)
		}
	}
	out := make([][]float64, T)
	for t := range x {
		out[t] = matvec64(r.lmHead, c.Vocab, h, rms64(x[t], r.norm, true, eps))
	}
	return out
}

func (r *rawModel) gdn64(l rawLayer, hn [][]float64) [][]float64 {
	c := r.cfg
	h, T := c.Hidden, len(hn)
	cd, K := c.ConvDim(), c.ConvKernel
	kd, vd := c.KHeads*c.KDim, c.VHeads*c.VDim
	pre := make([][]float64, T)
	for t := range hn {
		pre[t] = matvec64(l.qkv, cd, h, hn[t])
	}
	mix := make([][]float64, T)
	// state per value head, S[h][i][j], i over d_k, j over d_v
	S := make([][]float64, c.VHeads)
	for i := range S {
		S[i] = make([]float64, c.KDim*c.VDim)
	}
	for t := 0; t < T; t++ {
		conv := make([]float64, cd)
		for ch := 0; ch < cd; ch++ {
			var acc float64
			for j := 0; j < K; j++ {
				if tau := t - (K - 1) + j; tau >= 0 {
					acc += float64(l.conv[ch*K+j]) * pre[tau][ch]
				}
			}
			conv[ch] = silu64(acc)
		}
		z := matvec64(l.z, vd, h, hn[t])
		b := matvec64(l.b, c.VHeads, h, hn[t])
		a := matvec64(l.a, c.VHeads, h, hn[t])
		y := make([]float64, vd)
		for hv := 0; hv < c.VHeads; hv++ {
			kh := hv * c.KHeads / c.VHeads
			q := append([]float64(nil), conv[kh*c.KDim:(kh+1)*c.KDim]...)
			k := append([]float64(nil), conv[kd+kh*c.KDim:kd+(kh+1)*c.KDim]...)
			v := conv[2*kd+hv*c.VDim : 2*kd+(hv+1)*c.VDim]
			for _, vec := range [][]float64{q, k} {
				var ss float64
				for _, e := range vec {
					ss += e * e
				}
				n := 1 / math.Sqrt(ss+L2Eps)
				for i := range vec {
					vec[i] *= n
				}
			}
			for i := range q {
				q[i] /= math.Sqrt(float64(c.KDim))
			}
			beta := sigmoid64(b[hv])
			decay := math.Exp(-math.Exp(float64(l.aLog[hv])) * softplus64(a[hv]+float64(l.dtBias[hv])))
			// S ← decay·(I − β k kᵀ) S + β k vᵀ;  o = Sᵀ q
			s := S[hv]
			kS := make([]float64, c.VDim) // kᵀS
			for i := 0; i < c.KDim; i++ {
				for j := 0; j < c.VDim; j++ {
					kS[j] += k[i] * s[i*c.VDim+j]
				}
			}
			for i := 0; i < c.KDim; i++ {
				for j := 0; j < c.VDim; j++ {
					s[i*c.VDim+j] = decay*(s[i*c.VDim+j]-beta*k[i]*kS[j]) + beta*k[i]*v[j]
				}
			}
			o := make([]float64, c.VDim)
			for i := 0; i < c.KDim; i++ {
				for j := 0; j < c.VDim; j++ {
					o[j] += s[i*c.VDim+j] * q[i]
				}
			}
			// gated RMSNorm, plain weight
			var ss float64
			for _, e := range o {
				ss += e * e
			}
			rr := 1 / math.Sqrt(ss/float64(c.VDim)+float64(c.RMSEps))
			for j := range o {
				y[hv*c.VDim+j] = o[j] * rr * float64(l.gNorm[j]) * silu64(z[hv*c.VDim+j])
			}
		}
		mix[t] = matvec64(l.out, h, vd, y)
	}
	return mix
}

func (r *rawModel) attn64(l rawLayer, hn [][]float64) [][]float64 {
	c := r.cfg
	h, T, hd := c.Hidden, len(hn), c.HeadDim
	qd, kvd := c.Heads*hd, c.KVHeads*hd
	eps := float64(c.RMSEps)
	qs := make([][]float64, T)
	gates := make([][]float64, T)
	ks := make([][]float64, T)
	vs := make([][]float64, T)
	for t := range hn {
		qg := matvec64(l.q, 2*qd, h, hn[t])
		k := matvec64(l.k, kvd, h, hn[t])
		vs[t] = matvec64(l.v, kvd, h, hn[t])
		qs[t], gates[t], ks[t] = make([]float64, qd), make([]float64, qd), make([]float64, kvd)
		for j := 0; j < c.Heads; j++ {
			qh := rms64(qg[j*2*hd:j*2*hd+hd], l.qNorm, true, eps)
			rope64(qh, c.RotaryDim, c.RopeTheta, t)
			copy(qs[t][j*hd:], qh)
			copy(gates[t][j*hd:], qg[j*2*hd+hd:(j+1)*2*hd])
		}
		for j := 0; j < c.KVHeads; j++ {
			kh := rms64(k[j*hd:(j+1)*hd], l.kNorm, true, eps)
			rope64(kh, c.RotaryDim, c.RopeTheta, t)
			copy(ks[t][j*hd:], kh)
		}
	}
	mix := make([][]float64, T)
	scale := 1 / math.Sqrt(float64(hd))
	for t := 0; t < T; t++ {
		att := make([]float64, qd)
		for j := 0; j < c.Heads; j++ {
			g := j * c.KVHeads / c.Heads
			sc := make([]float64, t+1)
			mx := math.Inf(-1)
			for s := 0; s <= t; s++ {
				var d float64
				for i := 0; i < hd; i++ {
					d += qs[t][j*hd+i] * ks[s][g*hd+i]
				}
				sc[s] = d * scale
				mx = math.Max(mx, sc[s])
			}
			var sum float64
			for s := range sc {
				sc[s] = math.Exp(sc[s] - mx)
				sum += sc[s]
			}
			for s := range sc {
				for i := 0; i < hd; i++ {
					att[j*hd+i] += sc[s] / sum * vs[s][g*hd+i]
				}
			}
			for i := 0; i < hd; i++ {
				att[j*hd+i] *= sigmoid64(gates[t][j*hd+i])
			}
		}
		mix[t] = matvec64(l.o, h, qd, att)
	}
	return mix
}

// ---- comparison helpers ----

// relErr returns max|x − y| / max|y| (the golden tests' relative error) and the index of the
// largest difference.
func relErr(x []float32, y []float64) (float64, int) {
	var num, den float64
	at := 0
	for i := range y {
		if d := math.Abs(float64(x[i]) - y[i]); d > num || math.IsNaN(d) {
			num, at = d, i
		}
		den = math.Max(den, math.Abs(y[i]))
	}
	if den == 0 {
		den = 1
	}
	return num / den, at
}

func relErr32(x, y []float32) (float64, int) {
	y64 := make([]float64, len(y))
	for i, v := range y {
		y64[i] = float64(v)
	}
	return relErr(x, y64)
}

func flatten(rows [][]float64) []float64 {
	var out []float64
	for _, r := range rows {
		out = append(out, r...)
	}
	return out
}
