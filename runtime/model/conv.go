package model

import (
	"fmt"

	"lithos/runtime/vec"
)

// CausalConv1D is the GDN's causal depthwise convolution followed by SiLU
// (qwen35-and-quant.md §A.5 step 2; transformers' causal_conv1d_fn / causal_conv1d_update):
//
//	out[t, c] = silu( Σ_{j<K} w[c, j] · in[t − (K−1) + j, c] )
//
// over rows rows of C = len(w)/K channels, where in[τ] is x[τ] for τ ≥ 0 and the conv
// state for τ < 0: state holds the K−1 inputs before x, oldest first ([K−1, C], zeros for a
// fresh sequence). newState receives the last K−1 inputs of state ++ x, so the next call
// continues the sequence; it must not overlap state (the two-slot scheme gives it its own
// slot). x, out: [rows, C]; w: [C, K] (the checkpoint's [C, 1, K]). out may not alias x.
func CausalConv1D(out, x []float32, rows int, state, newState, w []float32, kernel int) error {
	if kernel <= 0 || len(w)%kernel != 0 {
		return fmt.Errorf("conv1d: %d weights do not make rows of kernel %d", len(w), kernel)
	}
	c := len(w) / kernel
	hist := kernel - 1
	if len(x) < rows*c || len(out) < rows*c || len(state) != hist*c || len(newState) != hist*c {
		return fmt.Errorf("conv1d: %d rows of %d channels, kernel %d: x %d, out %d, state %d, new state %d floats",
			rows, c, kernel, len(x), len(out), len(state), len(newState))
	}
	in := func(tau, ch int) float32 {
		if tau >= 0 {
			return x[tau*c+ch]
		}
		return state[(hist+tau)*c+ch]
	}
	simd := useSIMD()
	// inRow returns the input row at tau (≥ −hist): a row of x or of the state.
	inRow := func(tau int) []float32 {
		if tau >= 0 {
			return x[tau*c : tau*c+c]
		}
		return state[(hist+tau)*c : (hist+tau)*c+c]
	}
	vec.ParallelFor(c, vec.MinRowsPerTask(rows*kernel*4), func(lo, hi int) {
		for t := 0; t < rows; t++ {
			o := out[t*c : t*c+c]
			if kernel == 4 { // Qwen3.5's conv: the same sums, without a branch per tap
				r0, r1, r2, r3 := inRow(t-3), inRow(t-2), inRow(t-1), inRow(t)
				for ch := lo; ch < hi; ch++ {
					wr := (*[4]float32)(w[ch*4 : ch*4+4])
					o[ch] = (((0 + wr[0]*r0[ch]) + wr[1]*r1[ch]) + wr[2]*r2[ch]) + wr[3]*r3[ch]
				}
			} else {
				for ch := lo; ch < hi; ch++ {
					wr := w[ch*kernel : ch*kernel+kernel]
					var acc float32
					for j, wj := range wr {
						acc += wj * in(t-hist+j, ch)
					}
					o[ch] = acc
				}
			}
			if simd {
				vexp(o[lo:hi], o[lo:hi], vexpSiLU)
				continue
			}
			for ch := lo; ch < hi; ch++ {
				o[ch] = SiLU(o[ch])
			}
		}
		for i := 0; i < hist; i++ {
			tau := rows - hist + i
			for ch := lo; ch < hi; ch++ {
				newState[i*c+ch] = in(tau, ch)
			}
		}
	})
	return nil
}
