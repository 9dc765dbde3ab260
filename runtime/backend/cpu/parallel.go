package cpu

import (
	"runtime"
	"sync/atomic"
)

// dot2x4 returns the 8 dot products of two activation rows x0, x1 with four weight rows,
// loading each element once: r[4·j + i] = x_j · w_i, each a float32 sum in index order.
func dot2x4(x0, x1, w0, w1, w2, w3 []float32) (r [8]float32) {
	n := len(x0)
	x1, w0, w1, w2, w3 = x1[:n], w0[:n], w1[:n], w2[:n], w3[:n]
	var a0, a1, a2, a3, b0, b1, b2, b3 float32
	for i := 0; i < n; i++ {
		p, q := x0[i], x1[i]
		u0, u1, u2, u3 := w0[i], w1[i], w2[i], w3[i]
		a0 += p * u0
		a1 += p * u1
		a2 += p * u2
		a3 += p * u3
		b0 += q * u0
		b1 += q * u1
		b2 += q * u2
		b3 += q * u3
	}
	return [8]float32{a0, a1, a2, a3, b0, b1, b2, b3}
}

// chunksPerWorker is how many pieces parallelChunks cuts the work into per goroutine: pieces
// are claimed one at a time, so a goroutine that the OS runs late (a machine shared with other
// jobs) delays the product by at most one piece instead of half of it.
const chunksPerWorker = 4

// parallelChunks calls fn on disjoint ranges covering [0, n), each a multiple of align long
// (but the last) and at least minPer rows when possible, on up to GOMAXPROCS goroutines that
// claim the ranges dynamically; it returns when every range is done. The calling goroutine
// works too, and a helper that starts after all ranges are claimed does nothing, so a helper
// the scheduler has not run yet never holds the caller up. Which goroutine runs a range does
// not change its result: fn's rows must be independent.
func parallelChunks(n, minPer, align int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	workers := min(runtime.GOMAXPROCS(0), (n+minPer-1)/minPer)
	if workers <= 1 {
		fn(0, n)
		return
	}
	size := max(minPer, (n+workers*chunksPerWorker-1)/(workers*chunksPerWorker))
	size = (size + align - 1) / align * align
	chunks := (n + size - 1) / size
	var next, left atomic.Int64
	left.Store(int64(chunks))
	done := make(chan struct{})
	work := func() {
		for {
			c := int(next.Add(1) - 1)
			if c >= chunks {
				return
			}
			fn(c*size, min((c+1)*size, n))
			if left.Add(-1) == 0 {
				close(done)
			}
		}
	}
	for range min(workers, chunks) - 1 {
		go work()
	}
	work()
	<-done
}
