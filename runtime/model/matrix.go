package model

import (
	"fmt"
	"runtime"
	"sync"
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
		parallelFor(n, minRowsPerTask(k*max(rows, 1)), func(lo, hi int) {
			for j := lo; j < hi; j++ {
				wr := w[j*k : j*k+k]
				r := 0
				for ; r+4 <= rows; r += 4 {
					a, b, c, d := dot4(wr, x[r*k:r*k+k], x[(r+1)*k:(r+1)*k+k], x[(r+2)*k:(r+2)*k+k], x[(r+3)*k:(r+3)*k+k])
					dst[r*n+j], dst[(r+1)*n+j], dst[(r+2)*n+j], dst[(r+3)*n+j] = a, b, c, d
				}
				for ; r < rows; r++ {
					dst[r*n+j] = dot(wr, x[r*k:r*k+k])
				}
			}
		})
		return nil
	}
	return Matrix{N: n, K: k, Mul: mul}, nil
}

// dot returns Σ a[i]·b[i] over len(a) in float32 with four partial sums.
func dot(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		aa := a[i : i+4 : i+4]
		bb := b[i : i+4 : i+4]
		s0 += aa[0] * bb[0]
		s1 += aa[1] * bb[1]
		s2 += aa[2] * bb[2]
		s3 += aa[3] * bb[3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// dot4 returns the dot products of w with four vectors, reading w once.
func dot4(w, x0, x1, x2, x3 []float32) (float32, float32, float32, float32) {
	n := len(w)
	x0, x1, x2, x3 = x0[:n], x1[:n], x2[:n], x3[:n]
	var a0, a1, b0, b1, c0, c1, d0, d1 float32
	i := 0
	for ; i+2 <= n; i += 2 {
		w0, w1 := w[i], w[i+1]
		a0 += w0 * x0[i]
		a1 += w1 * x0[i+1]
		b0 += w0 * x1[i]
		b1 += w1 * x1[i+1]
		c0 += w0 * x2[i]
		c1 += w1 * x2[i+1]
		d0 += w0 * x3[i]
		d1 += w1 * x3[i+1]
	}
	if i < n {
		a0 += w[i] * x0[i]
		b0 += w[i] * x1[i]
		c0 += w[i] * x2[i]
		d0 += w[i] * x3[i]
	}
	return a0 + a1, b0 + b1, c0 + c1, d0 + d1
}

// axpy does y[i] += a·x[i].
func axpy(y []float32, a float32, x []float32) {
	x = x[:len(y)]
	for i := range y {
		y[i] += a * x[i]
	}
}

// minRowsPerTask is how many output rows of cost elements each goroutine gets at least, so
// that a task does ~64k multiply-adds (spawning one costs about a microsecond).
func minRowsPerTask(cost int) int {
	return max(1, (1<<16)/max(cost, 1))
}

// parallelFor calls fn on disjoint ranges covering [0, n), on up to GOMAXPROCS goroutines,
// each range at least minPer long (one call on the caller's goroutine when n ≤ minPer).
func parallelFor(n, minPer int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	workers := min(runtime.GOMAXPROCS(0), (n+minPer-1)/minPer)
	if workers <= 1 {
		fn(0, n)
		return
	}
	var wg sync.WaitGroup
	per := (n + workers - 1) / workers
	for lo := per; lo < n; lo += per {
		wg.Add(1)
		go func(lo, hi int) {
			defer wg.Done()
			fn(lo, hi)
		}(lo, min(lo+per, n))
	}
	fn(0, min(per, n))
	wg.Wait()
}
