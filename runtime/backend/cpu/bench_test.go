package cpu

import (
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"lithos/formats"
	"lithos/pack/blm"
)

// Benchmarks report rates against a floor measured in the same run: this machine's memory
// bandwidth, measured as the best of 5 copies of 256 MiB split over GOMAXPROCS goroutines
// (read + write bytes per second, GB = 1e9). x-bw is the kernel's packed-bytes rate ÷ that
// bandwidth: 1 would be bandwidth-bound.

var (
	bwOnce sync.Once
	bwGBs  float64
)

// memBandwidth returns the machine's copy bandwidth in GB/s (read + write bytes).
func memBandwidth() float64 {
	bwOnce.Do(func() {
		const n = 256 << 20
		src, dst := make([]byte, n), make([]byte, n)
		for i := range src {
			src[i] = byte(i)
		}
		copy(dst, src)
		best := time.Duration(1 << 62)
		w := runtime.GOMAXPROCS(0)
		for range 5 {
			t := time.Now()
			var wg sync.WaitGroup
			per := n / w
			for i := 0; i < w; i++ {
				wg.Add(1)
				go func(lo int) {
					defer wg.Done()
					copy(dst[lo:lo+per], src[lo:lo+per])
				}(i * per)
			}
			wg.Wait()
			best = min(best, time.Since(t))
		}
		bwGBs = float64(2*n) / best.Seconds() / 1e9
	})
	return bwGBs
}

func benchPacked(b *testing.B, spec blm.Spec, rows int) {
	r := rand.New(rand.NewPCG(9, 9))
	m := newTestMatrix(b, r, spec)
	p, err := NewPacked(m.g, m.packed, m.table)
	if err != nil {
		b.Fatal(err)
	}
	mat, _ := p.All()
	x := randomX(r, rows*mat.K)
	y := make([]float32, rows*mat.N)
	bw := memBandwidth()
	b.SetBytes(m.g.TotalBytes)
	b.ResetTimer()
	for range b.N {
		if err := mat.Mul(y, x, rows); err != nil {
			b.Fatal(err)
		}
	}
	gbs := float64(m.g.TotalBytes) * float64(b.N) / b.Elapsed().Seconds() / 1e9
	b.ReportMetric(gbs, "GB/s-packed")
	b.ReportMetric(bw, "GB/s-memory")
	b.ReportMetric(gbs/bw, "x-bw")
}

// The 27B's MLP width (K = 5120) at 32–64 MB per matrix: larger than the caches.
func BenchmarkPackedNVFP4x1(b *testing.B) {
	benchPacked(b, blm.Spec{Format: formats.NVFP4, N: 8192, K: 5120}, 1)
}
func BenchmarkPackedNVFP4x8(b *testing.B) {
	benchPacked(b, blm.Spec{Format: formats.NVFP4, N: 8192, K: 5120}, 8)
}
func BenchmarkPackedFP8x1(b *testing.B) {
	benchPacked(b, blm.Spec{Format: formats.FP8, N: 6144, K: 5120}, 1)
}
func BenchmarkPackedFP8x8(b *testing.B) {
	benchPacked(b, blm.Spec{Format: formats.FP8, N: 6144, K: 5120}, 8)
}
func BenchmarkPackedBF16x1(b *testing.B) {
	benchPacked(b, blm.Spec{Format: formats.BF16, N: 3072, K: 5120}, 1)
}
func BenchmarkPackedBF16x8(b *testing.B) {
	benchPacked(b, blm.Spec{Format: formats.BF16, N: 3072, K: 5120}, 8)
}
func BenchmarkPackedInt4x1(b *testing.B) {
	benchPacked(b, blm.Spec{Format: formats.Int4, N: 8192, K: 5120, GroupSize: 64, ScaleType: "BF16"}, 1)
}
func BenchmarkPackedInt8x1(b *testing.B) {
	benchPacked(b, blm.Spec{Format: formats.Int8, N: 6144, K: 5120}, 1)
}
