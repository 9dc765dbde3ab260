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
	vec.ParallelFor(c, vec.MinRowsPerTask(rows*kernel*4), func(lo, hi int) {
		for t := 0; t < rows; t++ {
			o := out[t*c : t*c+c]
			for ch := lo; ch < hi; ch++ {
				wr := w[ch*kernel : ch*kernel+kernel]
				var acc float32
				for j, wj := range wr {
					acc += wj * in(t-hist+j, ch)
				}
				o[ch] = SiLU(acc)
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
