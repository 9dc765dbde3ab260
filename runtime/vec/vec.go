// Package vec holds the float32 vector loops and the row-parallel helper that
// the CPU model graph (runtime/model) and the CPU backend's packed kernels
// (runtime/backend/cpu) share: dot products with FP32 accumulation in a fixed
// order, axpy, and ParallelFor over disjoint row ranges. It imports only the
// standard library.
package vec

import (
	"runtime"
	"sync"
)

// Dot returns Σ a[i]·b[i] over len(a) in float32 with four partial sums.
func Dot(a, b []float32) float32 {
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

// Dot4 returns the dot products of w with four vectors, reading w once.
func Dot4(w, x0, x1, x2, x3 []float32) (float32, float32, float32, float32) {
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

// Axpy does y[i] += a·x[i].
func Axpy(y []float32, a float32, x []float32) {
	x = x[:len(y)]
	for i := range y {
		y[i] += a * x[i]
	}
}

// MinRowsPerTask is how many output rows of cost elements each goroutine gets at least, so
// that a task does ~64k multiply-adds (spawning one costs about a microsecond).
func MinRowsPerTask(cost int) int {
	return max(1, (1<<16)/max(cost, 1))
}

// ParallelFor calls fn on disjoint ranges covering [0, n), on up to GOMAXPROCS goroutines,
// each range at least minPer long (one call on the caller's goroutine when n ≤ minPer).
func ParallelFor(n, minPer int, fn func(lo, hi int)) {
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
