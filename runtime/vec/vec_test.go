package vec

import (
	"math"
	"math/rand/v2"
	"sync/atomic"
	"testing"
)

func TestDotsAgainstFloat64(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 3, 4, 7, 64, 1001} {
		w := make([]float32, n)
		xs := make([][]float32, 4)
		for i := range w {
			w[i] = float32(r.NormFloat64())
		}
		for j := range xs {
			xs[j] = make([]float32, n)
			for i := range xs[j] {
				xs[j][i] = float32(r.NormFloat64())
			}
		}
		ref := func(x []float32) float64 {
			var s float64
			for i := range w {
				s += float64(w[i]) * float64(x[i])
			}
			return s
		}
		bound := func(x []float32) float64 {
			var abs float64
			for i := range w {
				abs += math.Abs(float64(w[i]) * float64(x[i]))
			}
			return float64(n+1) * 6e-8 * abs
		}
		if got := Dot(w, xs[0]); math.Abs(float64(got)-ref(xs[0])) > bound(xs[0])+1e-30 {
			t.Errorf("n=%d: Dot %v, float64 %v", n, got, ref(xs[0]))
		}
		a, b, c, d := Dot4(w, xs[0], xs[1], xs[2], xs[3])
		for j, got := range []float32{a, b, c, d} {
			if math.Abs(float64(got)-ref(xs[j])) > bound(xs[j])+1e-30 {
				t.Errorf("n=%d: Dot4[%d] %v, float64 %v", n, j, got, ref(xs[j]))
			}
		}
		y := make([]float32, n)
		copy(y, xs[1])
		Axpy(y, 0.5, w)
		for i := range y {
			if y[i] != xs[1][i]+0.5*w[i] {
				t.Fatalf("Axpy[%d] = %v", i, y[i])
			}
		}
	}
}

func TestParallelForCoversOnce(t *testing.T) {
	for _, n := range []int{0, 1, 5, 100, 1000} {
		hits := make([]atomic.Int32, n)
		ParallelFor(n, 7, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				hits[i].Add(1)
			}
		})
		for i := range hits {
			if hits[i].Load() != 1 {
				t.Fatalf("n=%d: index %d visited %d times", n, i, hits[i].Load())
			}
		}
	}
	if MinRowsPerTask(1<<20) != 1 || MinRowsPerTask(0) != 1<<16 {
		t.Error("MinRowsPerTask bounds")
	}
}
