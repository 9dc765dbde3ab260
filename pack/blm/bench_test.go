package blm

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"lithos/formats"
)

// BenchmarkPackNVFP4 streams a random NVFP4 matrix [4096, 5120] (the 27B's hidden size: 11.8 MB
// of codes and block scales, random bytes, not zeros) through Pack into a preallocated buffer,
// on one core. b.SetBytes counts the stored (checkpoint) bytes, so MB/s is checkpoint
// throughput (GB = 1e9 bytes).
//
// The metric "x-copy" is pack time relative to a floor measured in the same run: io.Copy of the
// same codes and scales from bytes.Readers into a preallocated buffer of the same kind, the
// least a packer that reads a checkpoint stream and writes a bundle stream must do.
// "copy-GB/s" reports that floor.
func BenchmarkPackNVFP4(b *testing.B) {
	benchPack(b, Spec{Format: formats.NVFP4, N: 4096, K: 5120})
}

// BenchmarkPackNVFP4Narrow is the same for the Markov W2 shape [248320, 256] (2 lanes per row).
func BenchmarkPackNVFP4Narrow(b *testing.B) {
	benchPack(b, Spec{Format: formats.NVFP4, N: 248320 / 4, K: 256})
}

// BenchmarkPackFP8 is the same for an FP8 [4096, 5120] matrix (units of whole words).
func BenchmarkPackFP8(b *testing.B) {
	benchPack(b, Spec{Format: formats.FP8, N: 4096, K: 5120})
}

func benchPack(b *testing.B, s Spec) {
	g := mustGeometry(b, s)
	src := randomRows(rand.New(rand.NewPCG(1, 2)), g, int(g.N))
	out := bytes.NewBuffer(make([]byte, 0, g.TotalBytes))
	ctx := context.Background()
	reset := func() Source {
		out.Reset()
		return sourceOf(src, nilWrap)
	}
	floor := func(iters int) time.Duration {
		start := time.Now()
		for range iters {
			out.Reset()
			for _, part := range [][]byte{src.Codes, src.Scales} {
				if _, err := out.ReadFrom(bytes.NewReader(part)); err != nil {
					b.Fatal(err)
				}
			}
		}
		return time.Since(start) / time.Duration(iters)
	}
	floor(3) // touch the output buffer's pages
	floorPerIter := floor(10)

	b.SetBytes(g.StoredBytes)
	b.ResetTimer()
	for b.Loop() {
		if _, err := Pack(ctx, out, g, reset()); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if b.N > 0 && floorPerIter > 0 {
		per := b.Elapsed() / time.Duration(b.N)
		b.ReportMetric(float64(per)/float64(floorPerIter), "x-copy")
		b.ReportMetric(float64(g.StoredBytes)/floorPerIter.Seconds()/1e9, "copy-GB/s")
	}
}
