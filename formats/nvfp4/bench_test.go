package nvfp4

import (
	"math/rand/v2"
	"testing"
	"time"

	"lithos/formats/bf16"
)

// BenchmarkQuantizeNVFP4 measures the streaming quantizer on one core: BF16 rows (a
// 5120-column matrix, the 27B's hidden size) decoded to float32 and quantized by ModelOpt's rule
// in chunks of 16 rows, the working set a converter holds. b.SetBytes counts BF16 input bytes,
// so MB/s is BF16 input throughput (GB = 1e9 bytes). Peak memory is the caller's slices: one
// float32 chunk plus its codes and scales.
//
// The metric "x-floor" is the time per byte relative to a floor measured in the same run: one
// pass that decodes the same BF16 chunk to float32 and takes its absolute maximum, the least
// any quantizer must do.
func BenchmarkQuantizeNVFP4(b *testing.B) {
	const k, rows, chunks = 5120, 16, 8
	r := rand.New(rand.NewPCG(1, 1))
	src := make([]byte, 2*rows*k*chunks)
	for i := 0; i < len(src); i += 2 {
		h := bf16.FromFloat32(float32(r.NormFloat64() * 0.02))
		src[i], src[i+1] = byte(h), byte(h>>8)
	}
	w := make([]float32, rows*k)
	codes := make([]byte, rows*k/2)
	scales := make([]byte, rows*k/16)
	s2 := TensorScale(0.5, DivideExact)
	chunk := 2 * rows * k

	floor := func(iters int) time.Duration {
		start := time.Now()
		var sink float32
		for it := 0; it < iters; it++ {
			for c := 0; c < chunks; c++ {
				if err := bf16.Decode(w, src[c*chunk:(c+1)*chunk]); err != nil {
					b.Fatal(err)
				}
				m, err := AbsMax(w)
				if err != nil {
					b.Fatal(err)
				}
				sink += m
			}
		}
		if sink < 0 {
			b.Fatal("unreachable")
		}
		return time.Since(start)
	}
	floorPerIter := floor(20) / 20

	b.SetBytes(int64(len(src)))
	b.ResetTimer()
	for b.Loop() {
		for c := 0; c < chunks; c++ {
			if err := bf16.Decode(w, src[c*chunk:(c+1)*chunk]); err != nil {
				b.Fatal(err)
			}
			if err := QuantizeRows(codes, scales, w, k, s2); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	if b.N > 0 && floorPerIter > 0 {
		per := b.Elapsed() / time.Duration(b.N)
		b.ReportMetric(float64(per)/float64(floorPerIter), "x-floor")
	}
}
