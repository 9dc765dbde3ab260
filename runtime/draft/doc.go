// Package draft is the DSpark draft head on the CPU: the drafter graph of speculative decoding
// (issue 7; ARCHITECTURE.md §3.5) in float32 over runtime/model's ops and matrices, so that
// dense float32 weights and the CPU backend's packed (BLM) matrices plug in alike.
//
// The math is qwen35-and-quant.md §D.1 (the DFlash backbone: a small Qwen3 stack with plain-weight
// RMSNorms, fc + hidden_norm over the target's tapped hidden states, context K/V injected into
// every draft layer, non-causal attention over [context ; block], the target's embedding and LM
// head) and §D.4 (DSpark: a low-rank Markov bias W2·W1[x_{k−1}] on each slot's logits, chained
// through the drafted tokens, and a confidence head), with the conventions fixed in
// .notes/spec-design.md: block = [anchor, MASK × (B−1)] at positions P … P+B−1 where P is the
// committed length and the anchor the last sampled, not yet committed token; slot k predicts the
// token at position P+k+1 (DSpark sample_from_anchor). RoPE is default, linear or YaRN, with the
// inverse frequencies and cos/sin amplitude transformers computes (NewRope; the published 27B head,
// RadixArk/Qwen3.8-27B-DSpark, is YaRN factor 32 over 8192 positions, lithos-metal.md §5.2–5.3).
// The oracle is tools/dspark_ref.py (PyTorch, transformers' Qwen3 modules and rotary embedding);
// tools/dspark_goldens.py records its outputs in testdata/goldens/dspark-tiny.
//
// Tap convention: a tap id (Config.TapLayers, the config's target_layer_ids) names the target
// decoder layer whose raw output is read, −1 the embedding output: HF hidden_states[id+1] and
// runtime/model Trace ("hidden", id+1). speculators' aux_hidden_state_layer_ids count vLLM's
// captured states instead (aux = id + 1) and are converted on parsing. A tap on the target's last
// layer (id = layers−1) is that layer's raw output, before the target's final norm — not HF's
// hidden_states[-1], which transformers returns after the norm. Heads trained on HF outputs
// with such a tap would see other features; the tinypair head (tools/tinypair, taps 1, 3, 5, 7 of
// 8 layers) was trained on the raw outputs and relies on this convention.
//
// A Drafter (weights, read-only, shared) serves States (one sequence each: the context K/V of
// every draft layer). Append adds committed tokens' context features; Draft runs one block and
// the Markov chain, with a choose callback that picks each drafted token (argmax for greedy
// drafting, a sampler otherwise).
//
// Numerics: float32 with float32 accumulation, norm statistics and transcendental functions in
// float64 rounded once (runtime/model's ops), float32 context cache. Agreement with the PyTorch
// FP32 oracle on the same weights is float32 rounding (≈1e-6 relative).
//
// Imports: lithos/runtime/model, the standard library.
package draft
