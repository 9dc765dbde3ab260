// Package model owns the math of the Qwen3.5 hybrid target on the CPU: the ops of
// ARCHITECTURE.md §3.4 in pure Go with float32 arithmetic (FP32 accumulation), and the
// target graph that chains them — embedding gather → N layers of Gated DeltaNet or gated
// full attention, each followed by a SwiGLU MLP → final norm → LM head — with its
// per-sequence state: KV cache, GDN recurrent state and conv state, the last two in two
// slots so that a verify pass can read one slot and write the other.
//
// The exact math is qwen35-and-quant.md Part A (transformers' modeling_qwen3_5) and
// lithos-metal.md §4:
//
//   - (1+w) RMSNorm for the input, post-attention, final and q/k norms; plain-w gated RMSNorm
//     (norm, then ·w, then ·silu(z)) for the GDN output, per value head;
//   - GDN: projections qkv, z, b, a; causal depthwise conv (kernel K, K−1 rows of state) +
//     SiLU over the qkv channels; q, k L2-normalised with eps 1e-6 added to Σx²; q scaled by
//     1/√d_k; β = σ(b); g = −exp(A_log)·softplus(a + dt_bias); value head h reads key head
//     h / (H_v/H_k); the gated delta rule S ← e^g S, δ = β(v − Sᵀk), S ← S + k δᵀ, o = Sᵀq,
//     step by step (Recurrent) or in chunks of 64 rows with the UT transform (Chunked);
//   - attention: q_proj rows are [query | gate] per head; (1+w) q/k norms per head; NeoX
//     RoPE on the first rotary dims (pairs i, i+rot/2), θ^(−2i/rot); GQA (query head j reads
//     KV head j / (H/H_kv)); softmax(q·k / √d) over the KV cache, computed with an online
//     softmax over key partitions; output ⊙ σ(gate) → o_proj;
//   - MLP: down(silu(gate(x)) ⊙ up(x)); residual adds in float32.
//
// For speculative decoding (docs/speculative.md) a step can also record the output rows of
// chosen decoder layers (StepWith's Taps: a drafter's context features) and the per-row inputs
// of the GDN conv and delta rule (Keep), from which State.CommitPrefix adopts any prefix of a
// verify step's rows by replaying only the GDN state; KV rows past the prefix are overwritten
// later. Package modeltest builds small random models for the tests of the packages above.
//
// Weights are reached through Matrix, a "matrix × rows" function value: Dense wraps a
// float32 row-major matrix; the packed (BLM) CPU kernels plug in the same way, so the dense
// and packed paths share this graph. LoadCheckpoint builds a dense Model from a ModelOpt /
// BF16 safetensors checkpoint (dequantized exactly with lithos/formats); the runtime proper
// will load bundles instead.
//
// Numerics: every op computes in float32 with float32 accumulation (norm statistics and
// transcendental functions in float64, rounded once), so results match transformers' FP32
// model on the same dequantized weights to float32 rounding (≈1e-6 relative), not bit for
// bit. The KV cache is float32 here (ARCHITECTURE.md §3.4 names BF16 for the GPU backends;
// BF16 keys would cost ~1e-3 relative and break the 1e-4 agreement with transformers).
//
// Imports: lithos/formats and its codecs (bf16, f16, fp8, nvfp4), lithos/formats/safetensors,
// the standard library.
package model
