package model

import (
	"fmt"
	"lithos/runtime/vec"
	"math"
)

// AttnShape is the head geometry of a gated full-attention layer.
type AttnShape struct {
	Heads, KVHeads, HeadDim int // Heads % KVHeads == 0
}

// DefaultKeyPartition is the number of keys one online-softmax partial covers (the Metal
// decode kernels use chunks of 64 keys, lithos-metal.md §4.3).
const DefaultKeyPartition = 64

// Attend is causal GQA softmax attention over a KV cache (qwen35-and-quant.md §A.6 step 5;
// transformers' eager_attention_forward): for each of rows rows, at position p0+r, and each
// query head j reading KV head j / (Heads/KVHeads),
//
//	out[r, j] = Σ_{t ≤ p0+r} softmax_t(scale · q[r, j]·k[t]) · v[t]
//
// computed with an online softmax over partitions of part keys: each partition keeps its
// maximum m_p, its sum l_p = Σ e^{s−m_p} and its partial output o_p = Σ e^{s−m_p} v, merged as
// m = max(m, m_p), l = l·e^{m_old−m} + l_p·e^{m_p−m}, o likewise; out = o / l. The order of
// the partitions is fixed, so the result does not depend on the number of goroutines.
//
// q, out: [rows, Heads·HeadDim]; kc, vc: the layer's cache [capacity, KVHeads·HeadDim],
// holding every position ≤ p0+rows−1 (the rows' own keys included). (row, head) pairs run in
// parallel.
func Attend(s AttnShape, out, q []float32, rows, p0 int, kc, vc []float32, scale float32, part int) error {
	if s.Heads <= 0 || s.KVHeads <= 0 || s.HeadDim <= 0 || s.Heads%s.KVHeads != 0 || part <= 0 {
		return fmt.Errorf("attention: bad shape %+v or key partition %d", s, part)
	}
	hd := s.HeadDim
	row := s.Heads * hd
	kvRow := s.KVHeads * hd
	if rows < 0 || p0 < 0 || len(q) < rows*row || len(out) < rows*row || len(kc) < (p0+rows)*kvRow || len(vc) < (p0+rows)*kvRow {
		return fmt.Errorf("attention: %d rows at position %d of %+v: q %d, out %d, k cache %d, v cache %d floats",
			rows, p0, s, len(q), len(out), len(kc), len(vc))
	}
	group := s.Heads / s.KVHeads
	tasks := rows * s.Heads
	// The SIMD scores and weighted sums (dotsAVX2, axpysAVX2) run ~8× faster: larger tasks.
	simd := useSIMD() && hd%32 == 0
	grain := (p0 + rows) * hd * 2
	if simd {
		grain /= 8
	}
	vec.ParallelFor(tasks, vec.MinRowsPerTask(grain), func(lo, hi int) {
		scores := make([]float32, part)
		acc := make([]float32, hd)
		po := make([]float32, hd)
		for task := lo; task < hi; task++ {
			r, j := task/s.Heads, task%s.Heads
			kvh := j / group
			qv := q[(r*s.Heads+j)*hd : (r*s.Heads+j+1)*hd]
			last := p0 + r
			m := float32(math.Inf(-1))
			var l float32
			clear(acc)
			for s0 := 0; s0 <= last; s0 += part {
				e := min(s0+part, last+1)
				pm := float32(math.Inf(-1))
				var pl float32
				clear(po)
				if simd {
					sc := scores[:e-s0]
					dotsAVX2(&sc[0], &qv[0], &kc[s0*kvRow+kvh*hd], kvRow, e-s0, hd)
					for i, v := range sc {
						v *= scale
						sc[i] = v
						pm = max(pm, v)
					}
					for i, v := range sc {
						sc[i] = v - pm
					}
					vexp(sc, sc, vexpExp)
					for _, p := range sc {
						pl += p
					}
					axpysAVX2(&po[0], &sc[0], &vc[s0*kvRow+kvh*hd], kvRow, e-s0, hd)
				} else {
					for t := s0; t < e; t++ {
						sc := vec.Dot(qv, kc[t*kvRow+kvh*hd:t*kvRow+kvh*hd+hd]) * scale
						scores[t-s0] = sc
						pm = max(pm, sc)
					}
					for t := s0; t < e; t++ {
						p := exp32(scores[t-s0] - pm)
						pl += p
						vec.Axpy(po, p, vc[t*kvRow+kvh*hd:t*kvRow+kvh*hd+hd])
					}
				}
				nm := max(m, pm)
				a := exp32(m - nm) // 0 for the first partition (m = −Inf)
				b := exp32(pm - nm)
				l = l*a + pl*b
				for i := range acc {
					acc[i] = acc[i]*a + po[i]*b
				}
				m = nm
			}
			o := out[(r*s.Heads+j)*hd : (r*s.Heads+j+1)*hd]
			for i, v := range acc {
				o[i] = v / l
			}
		}
	})
	return nil
}
