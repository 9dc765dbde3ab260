package cpu

import (
	"context"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"lithos/manifests"
	"lithos/runtime/bundle"
	"lithos/runtime/model"
)

// Model benchmarks run the target from a bundle and report, next to tokens per second, the
// floor of the same run: floor-tok/s = memory bandwidth (memBandwidth, measured in the same
// process) ÷ bytes read per decode token, and x-floor = tok/s ÷ floor-tok/s (1 = as fast as
// streaming the bytes). Bytes per token (decodeBytes) are the packed bytes of every target
// matrix with their row-scale tables, one embedding row, the float32 vectors the loader
// decoded (norms, conv weights, GDN parameters), the GDN recurrent and conv states read and
// written, and the KV rows read at the mean position.
//
// BenchmarkDecodeBundle and BenchmarkPrefillBundle read the bundle named by
// $LITHOS_BENCH_BUNDLE (skipped without it), e.g. a slice of the 27B with its real widths and
// formats:
//
//	go run ./tools/mkckpt -spec qwen3.8-27b-nvfp4 -layers 4 -o /tmp/ck27
//	go run ./cmd/lithos-pack pack /tmp/ck27 -o /tmp/27b-4.lithos
//	LITHOS_BENCH_BUNDLE=/tmp/27b-4.lithos go test -run X -bench Bundle -benchtime 5x ./runtime/backend/cpu

// decodeBytes returns the bytes one decode token reads at position pos.
func decodeBytes(b *bundle.Bundle, c *model.Config, pos int) float64 {
	var n float64
	for _, t := range b.Manifest.Tensors {
		if t.Model != manifests.ModelTarget {
			continue
		}
		switch {
		case t.Encoding == manifests.EncodingBLM:
			n += float64(t.Length) // packed matrix + row scales
		case t.Role == manifests.RoleEmbedding:
			n += float64(t.Length) / float64(c.Vocab) // one row
		default:
			n += 4 * float64(t.Length) / float64(max(1, bytesPerElem(t.Format))) // decoded float32
		}
	}
	for _, k := range c.Layers {
		switch k {
		case model.GDN:
			n += 2 * 4 * float64(c.VHeads*c.KDim*c.VDim+(c.ConvKernel-1)*c.ConvDim())
		case model.Attention:
			n += 2 * 4 * float64(pos*c.KVHeads*c.HeadDim)
		}
	}
	return n
}

func bytesPerElem(dtype string) int {
	switch dtype {
	case "F32":
		return 4
	case "BF16", "F16":
		return 2
	}
	return 1
}

func benchDecodeBundle(b *testing.B, bd *bundle.Bundle, m *model.Model) {
	ctx := context.Background()
	const capacity, prompt = 1024, 16
	st, err := m.NewState(capacity)
	if err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 1))
	tokens := make([]int32, prompt)
	for i := range tokens {
		tokens[i] = int32(r.IntN(m.Cfg.Vocab))
	}
	restart := func() int32 {
		st.Reset()
		logits, err := m.Forward(ctx, st, tokens, false)
		if err != nil {
			b.Fatal(err)
		}
		return int32(model.Argmax(logits))
	}
	tok := restart()
	bw := memBandwidth()
	posSum := 0
	b.ResetTimer()
	start := time.Now()
	var paused time.Duration
	for i := 0; i < b.N; i++ {
		if st.Pos() == capacity {
			p := time.Now()
			tok = restart()
			paused += time.Since(p)
		}
		posSum += st.Pos()
		logits, err := m.Forward(ctx, st, []int32{tok}, false)
		if err != nil {
			b.Fatal(err)
		}
		tok = int32(model.Argmax(logits))
	}
	elapsed := time.Since(start) - paused
	b.StopTimer()
	perTok := decodeBytes(bd, &m.Cfg, posSum/max(b.N, 1))
	tokS := float64(b.N) / elapsed.Seconds()
	floor := bw * 1e9 / perTok
	b.ReportMetric(tokS, "tok/s")
	b.ReportMetric(floor, "floor-tok/s")
	b.ReportMetric(tokS/floor, "x-floor")
	b.ReportMetric(bw, "GB/s-memory")
	b.ReportMetric(perTok/1e6, "MB/token")
}

func benchPrefillBundle(b *testing.B, m *model.Model, n int) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(2, 2))
	tokens := make([]int32, n)
	for i := range tokens {
		tokens[i] = int32(r.IntN(m.Cfg.Vocab))
	}
	st, err := m.NewState(n)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		st.Reset()
		if _, err := m.Prefill(ctx, st, tokens, 128); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "tok/s")
}

func envBundle(b *testing.B) (*bundle.Bundle, *model.Model) {
	dir := os.Getenv("LITHOS_BENCH_BUNDLE")
	if dir == "" {
		b.Skip("set LITHOS_BENCH_BUNDLE to a bundle directory")
	}
	bd, err := bundle.Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { bd.Close() })
	m, err := LoadTarget(bd)
	if err != nil {
		b.Fatal(err)
	}
	return bd, m
}

// BenchmarkDecodeGoldenA decodes with golden model A packed (8 layers, hidden 256, vocab 1024:
// 2.5 MB per token, cache-resident, so x-floor exceeds 1).
func BenchmarkDecodeGoldenA(b *testing.B) {
	bd, m := openGoldenTarget(b, "a")
	benchDecodeBundle(b, bd, m)
}

// BenchmarkPrefillGoldenA prefills 200 tokens of golden model A.
func BenchmarkPrefillGoldenA(b *testing.B) {
	_, m := openGoldenTarget(b, "a")
	benchPrefillBundle(b, m, 200)
}

// BenchmarkDecodeBundle decodes with $LITHOS_BENCH_BUNDLE.
func BenchmarkDecodeBundle(b *testing.B) {
	bd, m := envBundle(b)
	benchDecodeBundle(b, bd, m)
}

// BenchmarkPrefillBundle prefills 128 tokens of $LITHOS_BENCH_BUNDLE.
func BenchmarkPrefillBundle(b *testing.B) {
	_, m := envBundle(b)
	benchPrefillBundle(b, m, 128)
}
