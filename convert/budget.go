package convert

// CeilingFormula states how `lithos-pack audit` turns bytes into tok/s
// ceilings; it is meant for the command's --help.
const CeilingFormula = `Ceilings are memory-bandwidth floors: a pass that must move P bytes takes at
least P / B seconds, whatever the kernels do (GB = 1e9 bytes).

  plain decode:   tok/s = B / P(N)
  P(N) = W + e + 2·S + 2·C + (N + 1)·K        bytes moved by one decode pass at context N
    B  memory bandwidth, bytes/s (chip profile, or --bandwidth in GB/s)
    W  weights read on every pass: MLP, Gated DeltaNet and attention projections,
       small tensors (A/B projections, conv, norms, scalars) and the vocabulary head;
       the embedding is a gather, the MTP head and vision tower are never read
    e  one embedding row
    S  Gated DeltaNet recurrent state, FP32 [GDN layers, v_heads, dk, dv], read and written
    C  causal-conv state, BF16 [GDN layers, kernel-1, conv_dim], read and written
    K  KV cache per token, BF16 K and V of the full-attention layers
       (N cached tokens read, the new one written)
  "short context" is N = 0.

  with a DSpark draft and --accept L (mean tokens committed per round, 1..γ+1):
  tok/s = L · B / (P'(N) + D(N))
  P'(N) = W + T·e + 2·S + 2·C + (N + T)·K     the verify pass over T = γ + 1 rows
  D(N)  = H − W1 + (γ − 1)·W2 + γ·w1 + V + γ·e + N·Kd   bytes of one draft block
    H  the head's tensors; W1, W2 its Markov matrices: W2 is read once per Markov
       step (γ steps), W1 is gathered, one w1-byte row per step
    V  the vocabulary head the draft shares with the target; γ the block size
    Kd the head's context K/V per token (BF16, its layers × kv heads × head dim × 2)

Floors leave out activations, packing padding and the GDN state replay after
acceptance; measured engines reach about 75% of them on an M5 Max.`

// PassModel holds the byte terms of one target decode pass (CeilingFormula).
type PassModel struct {
	WeightBytes       int64 // W
	EmbeddingRowBytes int64 // e
	GDNStateBytes     int64 // S
	ConvStateBytes    int64 // C
	KVBytesPerToken   int64 // K
}

// Bytes returns P for a pass of rows tokens at context tokens of cache:
// W + rows·e + 2·S + 2·C + (context + rows)·K.
func (p PassModel) Bytes(context, rows int64) int64 {
	return p.WeightBytes + rows*p.EmbeddingRowBytes + 2*p.GDNStateBytes + 2*p.ConvStateBytes + (context+rows)*p.KVBytesPerToken
}

// DraftModel holds the byte terms of one DSpark draft block (CeilingFormula).
type DraftModel struct {
	BlockSize         int   // γ
	OnceBytes         int64 // H − W1: every head tensor read once per block (W2 included once)
	W2Bytes           int64 // W2, read again on each of the γ − 1 later Markov steps
	W1RowBytes        int64 // w1: one W1 row, gathered per Markov step
	VocabHeadBytes    int64 // V: the vocabulary head the draft runs (the target's when the head has none)
	EmbeddingRowBytes int64 // e: the block's tokens are embedded with the target's embedding
	KVBytesPerToken   int64 // Kd: the head's context K/V per committed token
}

// BlockBytes returns D(N) = OnceBytes + (γ−1)·W2 + γ·w1 + V + γ·e + N·Kd.
func (d DraftModel) BlockBytes(context int64) int64 {
	g := int64(d.BlockSize)
	return d.OnceBytes + (g-1)*d.W2Bytes + g*d.W1RowBytes + d.VocabHeadBytes + g*d.EmbeddingRowBytes + context*d.KVBytesPerToken
}

// TokPerS returns how many passes of bytes a bandwidth of gbps GB/s allows
// per second, times tokens per pass.
func TokPerS(tokens float64, bytes int64, gbps float64) float64 {
	if bytes <= 0 {
		return 0
	}
	return tokens * gbps * 1e9 / float64(bytes)
}

// Millis returns the floor in milliseconds of moving bytes at gbps GB/s.
func Millis(bytes int64, gbps float64) float64 {
	if gbps <= 0 {
		return 0
	}
	return float64(bytes) / (gbps * 1e9) * 1e3
}

// statePerPass derives S, C and K from the config: GDN state FP32
// [v_heads, dk, dv] per GDN layer (ARCHITECTURE.md §3.4; lithos-metal
// monolith/nn/gdn.py per the audit article); conv state BF16 [kernel−1,
// conv_dim] per GDN layer (the pre-conv window, qwen35-and-quant.md §A.5
// "Caches"); KV BF16 [kv_heads, head_dim] × K and V per full-attention layer
// per token (monolith/nn/attention.py per the article).
func statePerPass(t *TextConfig) (gdn, conv, kv int64) {
	nGDN := int64(t.CountLayers(LinearAttention))
	nFull := int64(t.CountLayers(FullAttention))
	convDim := int64(2*t.LinearNumKeyHeads*t.LinearKeyHeadDim + t.LinearNumValueHeads*t.LinearValueHeadDim)
	gdn = nGDN * int64(t.LinearNumValueHeads) * int64(t.LinearKeyHeadDim) * int64(t.LinearValueHeadDim) * 4
	conv = nGDN * int64(t.LinearConvKernelDim-1) * convDim * 2
	kv = nFull * int64(t.NumKeyValueHeads) * int64(t.HeadDim) * 2 * 2
	return gdn, conv, kv
}
