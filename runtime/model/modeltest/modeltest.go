// Package modeltest builds small random Qwen3.5 hybrid targets (lithos/runtime/model) with
// dense float32 weights, for the tests of the packages above runtime/model: sampling and
// speculative-decoding tests that need a target whose every distribution can be enumerated.
// The weights are drawn like tools/qwen35_goldens.py draws them (and runtime/model's own
// tests): N(0, gain/√K) matrices, (1+w) norm weights w ∈ [−0.4, 0.4], gated-norm weights
// 1 ± 0.4, A_log = log U(0.05, 1), dt_bias ∈ [−1.5, 0.5], conv N(0, 0.5), embeddings N(0, 1).
//
// Imports: lithos/runtime/model, the standard library.
package modeltest

import (
	"fmt"
	"math"
	"math/rand/v2"

	"lithos/runtime/model"
)

// Tiny returns a small hybrid configuration with every geometry choice of the real model
// (GQA 2:1, 3 value heads per key head, d_k ≠ d_v, partial RoPE, GDN and attention layers):
// vocab tokens, hidden 32, layers GDN, attention, GDN, attention.
func Tiny(vocab int) model.Config {
	return model.Config{
		Vocab: vocab, Hidden: 32, Intermediate: 48,
		Layers: []model.LayerKind{model.GDN, model.Attention, model.GDN, model.Attention},
		Heads:  4, KVHeads: 2, HeadDim: 16, RotaryDim: 8, RopeTheta: 1e4,
		KHeads: 2, VHeads: 6, KDim: 8, VDim: 8, ConvKernel: 4, RMSEps: 1e-6,
	}
}

// Random returns a model of cfg with random dense weights drawn from seed; lmGain scales the
// LM head (the logits' spread: 2 gives peaked distributions, 0.5 flat ones). Errors: cfg
// invalid (model.New's).
func Random(cfg model.Config, seed uint64, lmGain float64) (*model.Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(seed, 77))
	normals := func(n int, std float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64() * std)
		}
		return v
	}
	onePlus := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(1 + (rng.Float64()*0.8 - 0.4))
		}
		return v
	}
	var err error
	mat := func(n, k int, gain float64) model.Matrix {
		m, e := model.Dense(normals(n*k, gain/math.Sqrt(float64(k))), n, k)
		if e != nil && err == nil {
			err = e
		}
		return m
	}
	h := cfg.Hidden
	emb, err := model.DenseEmbedding(normals(cfg.Vocab*h, 1), cfg.Vocab, h)
	if err != nil {
		return nil, err
	}
	w := model.Weights{Embed: emb, FinalNorm: onePlus(h), LMHead: mat(cfg.Vocab, h, lmGain)}
	for _, kind := range cfg.Layers {
		L := model.Layer{Kind: kind, InputNorm: onePlus(h), PostNorm: onePlus(h),
			Gate: mat(cfg.Intermediate, h, 1), Up: mat(cfg.Intermediate, h, 1), Down: mat(h, cfg.Intermediate, 1)}
		switch kind {
		case model.GDN:
			vd := cfg.VHeads * cfg.VDim
			L.QKV, L.Z, L.B, L.A, L.Out = mat(cfg.ConvDim(), h, 1), mat(vd, h, 1), mat(cfg.VHeads, h, 1), mat(cfg.VHeads, h, 1), mat(h, vd, 1)
			L.Conv = normals(cfg.ConvDim()*cfg.ConvKernel, 0.5)
			L.NegA = make([]float32, cfg.VHeads)
			for i := range L.NegA {
				L.NegA[i] = float32(-(0.05 + 0.95*rng.Float64())) // −exp(log U(0.05, 1))
			}
			L.DtBias = make([]float32, cfg.VHeads)
			for i := range L.DtBias {
				L.DtBias[i] = float32(-1.5 + 2*rng.Float64())
			}
			L.GatedNorm = onePlus(cfg.VDim)
		case model.Attention:
			qd, kvd := cfg.Heads*cfg.HeadDim, cfg.KVHeads*cfg.HeadDim
			L.Q, L.K, L.V, L.O = mat(2*qd, h, 1), mat(kvd, h, 1), mat(kvd, h, 1), mat(h, qd, 1)
			L.QNorm, L.KNorm = onePlus(cfg.HeadDim), onePlus(cfg.HeadDim)
		}
		w.Layers = append(w.Layers, L)
	}
	if err != nil {
		return nil, fmt.Errorf("modeltest: %w", err)
	}
	return model.New(cfg, w)
}
