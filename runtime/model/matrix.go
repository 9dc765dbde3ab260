package model

import (
	"fmt"
	"lithos/runtime/vec"
)

// MulFunc computes dst[r·N + n] = Σ_k W[n, k]·x[r·K + k] for rows r < rows: x is [rows, K]
// and dst [rows, N], row-major, for a weight matrix W [N, K] (out, in) it owns. It
// accumulates in float32 and may use several goroutines. It returns an error when the
// slices are too short.
type MulFunc func(dst, x []float32, rows int) error

// Matrix is a weight matrix [N, K] seen through its product with activation rows: the one
// way the graph touches weights, so that a dense float32 matrix (Dense) and a packed BLM
// matrix (pack/blm) are interchangeable.
type Matrix struct {
	N, K int
	Mul  MulFunc
}

// Dense returns the Matrix of w, a float32 [n, k] row-major matrix (not copied). Its Mul
// splits the N output rows over GOMAXPROCS goroutines when the work is large enough and
// computes each dot product with four float32 partial sums.
func Dense(w []float32, n, k int) (Matrix, error) {
	if n <= 0 || k <= 0 || len(w) != n*k {
		return Matrix{}, fmt.Errorf("dense matrix: %d values for [%d, %d]", len(w), n, k)
	}
	mul := func(dst, x []float32, rows int) error {
		if rows < 0 || len(x) < rows*k || len(dst) < rows*n {
			return fmt.Errorf("dense matrix [%d, %d]: %d rows need x of %d and dst of %d floats, got %d and %d",
				n, k, rows, rows*k, rows*n, len(x), len(dst))
		}
		vec.ParallelFor(n, vec.MinRowsPerTask(k*max(rows, 1)), func(lo, hi int) {
			for j := lo; j < hi; j++ {
				wr := w[j*k : j*k+k]
				r := 0
				for ; r+4 <= rows; r += 4 {
					a, b, c, d := vec.Dot4(wr, x[r*k:r*k+k], x[(r+1)*k:(r+1)*k+k], x[(r+2)*k:(r+2)*k+k], x[(r+3)*k:(r+3)*k+k])
					dst[r*n+j], dst[(r+1)*n+j], dst[(r+2)*n+j], dst[(r+3)*n+j] = a, b, c, d
				}
				for ; r < rows; r++ {
					dst[r*n+j] = vec.Dot(wr, x[r*k:r*k+k])
				}
			}
		})
		return nil
	}
	return Matrix{N: n, K: k, Mul: mul}, nil
}
