package cpu

import (
	"runtime"
	"sync/atomic"
	"testing"
)

// TestParallelChunksCoversOnce checks that every index is visited exactly once, that ranges
// start on multiples of align, and that it works with one and with several goroutines.
func TestParallelChunksCoversOnce(t *testing.T) {
	for _, procs := range []int{1, 2, 5} {
		old := runtime.GOMAXPROCS(procs)
		for _, n := range []int{0, 1, 3, 4, 5, 17, 100, 1023} {
			for _, c := range [][2]int{{1, 1}, {1, 4}, {7, 4}, {64, 1}} {
				hits := make([]atomic.Int32, n)
				parallelChunks(n, c[0], c[1], func(lo, hi int) {
					if lo%c[1] != 0 || lo >= hi || hi > n {
						t.Errorf("n=%d minPer=%d align=%d: range [%d, %d)", n, c[0], c[1], lo, hi)
					}
					for i := lo; i < hi; i++ {
						hits[i].Add(1)
					}
				})
				for i := range hits {
					if hits[i].Load() != 1 {
						t.Fatalf("procs %d, n=%d minPer=%d align=%d: index %d visited %d times", procs, n, c[0], c[1], i, hits[i].Load())
					}
				}
			}
		}
		runtime.GOMAXPROCS(old)
	}
}
