package model

import (
	"fmt"
	"lithos/runtime/vec"
	"math"
)

// GDNShape is the head geometry of a Gated DeltaNet layer.
type GDNShape struct {
	KHeads, VHeads int // query/key heads, value heads (VHeads % KHeads == 0)
	KDim, VDim     int // d_k, d_v
}

// StateLen returns the floats of one recurrent state: VHeads·KDim·VDim ([H_v, d_k, d_v],
// transformers' layout without the batch dimension).
func (s GDNShape) StateLen() int { return s.VHeads * s.KDim * s.VDim }

// keyHead returns the query/key head value head h reads: h / (H_v/H_k) (transformers'
// repeat_interleave on the head axis, qwen35-and-quant.md §A.5 step 4).
func (s GDNShape) keyHead(h int) int { return h / (s.VHeads / s.KHeads) }

// check validates the slices of a gated-delta-rule call.
func (s GDNShape) check(out, q, k, v, beta, g []float32, rows int, state, newState []float32) error {
	if s.KHeads <= 0 || s.VHeads <= 0 || s.KDim <= 0 || s.VDim <= 0 || s.VHeads%s.KHeads != 0 {
		return fmt.Errorf("gated delta rule: bad shape %+v", s)
	}
	qk := rows * s.KHeads * s.KDim
	vv := rows * s.VHeads * s.VDim
	hh := rows * s.VHeads
	if rows < 0 || len(q) < qk || len(k) < qk || len(v) < vv || len(out) < vv || len(beta) < hh || len(g) < hh ||
		len(state) != s.StateLen() || len(newState) != s.StateLen() {
		return fmt.Errorf("gated delta rule: %d rows of %+v: q %d, k %d, v %d, out %d, beta %d, g %d, state %d, new state %d floats",
			rows, s, len(q), len(k), len(v), len(out), len(beta), len(g), len(state), len(newState))
	}
	return nil
}

func exp32(x float32) float32 { return float32(math.Exp(float64(x))) }

// expDiff returns float32(e^{a−b}).
func expDiff(a, b float64) float32 { return float32(math.Exp(a - b)) }

// GDNRecurrent runs the gated delta rule one token at a time (transformers'
// torch_recurrent_gated_delta_rule; qwen35-and-quant.md §A.5 step 7). Per row t and value
// head h, with key head g(h), state S [d_k, d_v]:
//
//	S ← e^{g_t}·S;  m = Sᵀk_t;  δ = β_t·(v_t − m);  S ← S + k_t δᵀ;  o_t = Sᵀq_t
//
// q, k: [rows, KHeads·KDim], already L2-normalised (q also scaled by 1/√d_k); v, out:
// [rows, VHeads·VDim]; beta, g: [rows, VHeads] (g = log decay ≤ 0). It reads the state
// before the first row from state and writes the state after the last row to newState
// ([VHeads, KDim, VDim]); newState may be state itself, or else must not overlap it.
// Heads run in parallel.
func GDNRecurrent(s GDNShape, out, q, k, v, beta, g []float32, rows int, state, newState []float32) error {
	if err := s.check(out, q, k, v, beta, g, rows, state, newState); err != nil {
		return err
	}
	dk, dv := s.KDim, s.VDim
	hs := dk * dv
	// The SIMD row update (gdnStepAVX2: the same loops with fused multiply-adds) runs ~8×
	// faster, so its tasks take more heads.
	simd := useSIMD() && dv%32 == 0
	grain := rows * hs * 4
	if simd {
		grain = rows * hs / 2
	}
	vec.ParallelFor(s.VHeads, vec.MinRowsPerTask(grain), func(lo, hi int) {
		var m, delta []float32
		if !simd {
			m = make([]float32, dv)
			delta = make([]float32, dv)
		}
		for h := lo; h < hi; h++ {
			kh := s.keyHead(h)
			S := newState[h*hs : (h+1)*hs]
			src := state[h*hs : (h+1)*hs]
			if rows == 0 {
				copy(S, src)
				continue
			}
			for t := 0; t < rows; t++ {
				qt := q[(t*s.KHeads+kh)*dk : (t*s.KHeads+kh+1)*dk]
				kt := k[(t*s.KHeads+kh)*dk : (t*s.KHeads+kh+1)*dk]
				vt := v[(t*s.VHeads+h)*dv : (t*s.VHeads+h+1)*dv]
				ot := out[(t*s.VHeads+h)*dv : (t*s.VHeads+h+1)*dv]
				decay := exp32(g[t*s.VHeads+h])
				b := beta[t*s.VHeads+h]
				if simd {
					gdnStepAVX2(&S[0], &src[0], &qt[0], &kt[0], &vt[0], &ot[0], dk, dv, decay, b)
					src = S
					continue
				}
				clear(m)
				for i := 0; i < dk; i++ {
					sr := src[i*dv : (i+1)*dv]
					dr := S[i*dv : (i+1)*dv]
					ki := kt[i]
					for j, e := range sr {
						e *= decay
						dr[j] = e
						m[j] += e * ki
					}
				}
				src = S
				for j := range delta {
					delta[j] = (vt[j] - m[j]) * b
				}
				clear(ot)
				for i := 0; i < dk; i++ {
					dr := S[i*dv : (i+1)*dv]
					ki, qi := kt[i], qt[i]
					for j, e := range dr {
						e += ki * delta[j]
						dr[j] = e
						ot[j] += e * qi
					}
				}
			}
		}
	})
	return nil
}

// DefaultChunk is the chunk length of the chunked gated delta rule (transformers' chunk_size).
const DefaultChunk = 64

// GDNChunked runs the gated delta rule over rows tokens in chunks of chunk rows (the first
// chunk starts at row 0; the last may be shorter), as transformers'
// torch_chunk_gated_delta_rule does (qwen35-and-quant.md §A.5 step 8). Per value head and
// chunk, with γ_i the cumulative log decay inside the chunk:
//
//	A_ij = β_i (k_i·k_j) e^{γ_i−γ_j} (j < i);  L = I + A (unit lower triangular)
//	U = L⁻¹ (β ⊙ V);  W = L⁻¹ (β ⊙ K ⊙ e^γ)            (the UT transform, forward substitution)
//	V' = U − W S
//	O_i = e^{γ_i} q_iᵀS + Σ_{j≤i} (q_i·k_j) e^{γ_i−γ_j} V'_j
//	S ← e^{γ_last} S + Σ_j e^{γ_last−γ_j} k_j V'_jᵀ
//
// which equals GDNRecurrent in exact arithmetic. γ is accumulated in float64 and every decay
// factor e^{γ_i−γ_j} is taken from a float64 difference: with fast decays γ reaches −10³
// inside a chunk, where a float32 cumulative sum (transformers' cumsum) loses ~1e-4 of
// e^{γ_i−γ_j}; this form stays within float32 rounding of the recurrence. Arguments as
// GDNRecurrent.
func GDNChunked(s GDNShape, out, q, k, v, beta, g []float32, rows int, state, newState []float32, chunk int) error {
	if err := s.check(out, q, k, v, beta, g, rows, state, newState); err != nil {
		return err
	}
	if chunk <= 0 {
		return fmt.Errorf("gated delta rule: chunk %d must be positive", chunk)
	}
	dk, dv := s.KDim, s.VDim
	hs := dk * dv
	c := min(chunk, max(rows, 1))
	vec.ParallelFor(s.VHeads, 1, func(lo, hi int) {
		gam := make([]float64, c)
		eg := make([]float32, c)
		A := make([]float32, c*c)
		U := make([]float32, c*dv)
		W := make([]float32, c*dk)
		Vp := make([]float32, c*dv)
		for h := lo; h < hi; h++ {
			kh := s.keyHead(h)
			S := newState[h*hs : (h+1)*hs]
			copy(S, state[h*hs:(h+1)*hs])
			Q := func(t int) []float32 { return q[(t*s.KHeads+kh)*dk : (t*s.KHeads+kh+1)*dk] }
			K := func(t int) []float32 { return k[(t*s.KHeads+kh)*dk : (t*s.KHeads+kh+1)*dk] }
			V := func(t int) []float32 { return v[(t*s.VHeads+h)*dv : (t*s.VHeads+h+1)*dv] }
			for c0 := 0; c0 < rows; c0 += c {
				n := min(c, rows-c0)
				var acc float64
				for i := 0; i < n; i++ {
					acc += float64(g[(c0+i)*s.VHeads+h])
					gam[i] = acc
					eg[i] = float32(math.Exp(acc))
				}
				// UT transform: strictly lower A, then forward substitution for U and W.
				for i := 0; i < n; i++ {
					ki := K(c0 + i)
					bi := beta[(c0+i)*s.VHeads+h]
					for j := 0; j < i; j++ {
						A[i*c+j] = (bi * vec.Dot(ki, K(c0+j))) * expDiff(gam[i], gam[j])
					}
					u := U[i*dv : (i+1)*dv]
					for jv, e := range V(c0 + i) {
						u[jv] = bi * e
					}
					w := W[i*dk : (i+1)*dk]
					for a, e := range ki {
						w[a] = (bi * e) * eg[i]
					}
					for j := 0; j < i; j++ {
						aij := A[i*c+j]
						vec.Axpy(u, -aij, U[j*dv:(j+1)*dv])
						vec.Axpy(w, -aij, W[j*dk:(j+1)*dk])
					}
				}
				// V' = U − W S.
				for i := 0; i < n; i++ {
					vp := Vp[i*dv : (i+1)*dv]
					copy(vp, U[i*dv:(i+1)*dv])
					w := W[i*dk : (i+1)*dk]
					for a := 0; a < dk; a++ {
						vec.Axpy(vp, -w[a], S[a*dv:(a+1)*dv])
					}
				}
				// Outputs: the decayed read of the old state plus the causal intra-chunk part.
				for i := 0; i < n; i++ {
					t := c0 + i
					o := out[(t*s.VHeads+h)*dv : (t*s.VHeads+h+1)*dv]
					clear(o)
					qi := Q(t)
					for a := 0; a < dk; a++ {
						vec.Axpy(o, qi[a]*eg[i], S[a*dv:(a+1)*dv])
					}
					for j := 0; j <= i; j++ {
						coef := vec.Dot(qi, K(c0+j)) * expDiff(gam[i], gam[j])
						vec.Axpy(o, coef, Vp[j*dv:(j+1)*dv])
					}
				}
				// State update.
				last := gam[n-1]
				el := eg[n-1]
				for a := range S {
					S[a] *= el
				}
				for j := 0; j < n; j++ {
					kj := K(c0 + j)
					f := expDiff(last, gam[j])
					vp := Vp[j*dv : (j+1)*dv]
					for a := 0; a < dk; a++ {
						vec.Axpy(S[a*dv:(a+1)*dv], kj[a]*f, vp)
					}
				}
			}
		}
	})
	return nil
}
