package model

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// Decode benchmarks report tokens/s against a floor measured in the same run: the time to
// stream the bytes one decode token reads at this machine's memory bandwidth. The bandwidth
// is measured with a 256 MiB copy (best of 5; read + write bytes, GB = 1e9); the bytes per
// token are the dense float32 weights (every matrix, the embedding row, the norm vectors)
// plus the GDN recurrent states read and written and the KV rows read at the mean position.
// Metrics: tok/s; floor-tok/s = bandwidth / bytes-per-token; x-floor = tok/s ÷ floor-tok/s
// (1 = bandwidth-bound; above 1 when the weights fit in the caches); GB/s-copy; MB/token.

var (
	bwOnce sync.Once
	bwGBs  float64
)

// copyBandwidth returns the machine's copy bandwidth in GB/s (read + write).
func copyBandwidth() float64 {
	bwOnce.Do(func() {
		const n = 256 << 20
		src, dst := make([]byte, n), make([]byte, n)
		for i := range src {
			src[i] = byte(i)
		}
		copy(dst, src) // fault the pages in
		best := time.Duration(1 << 62)
		for range 5 {
			t := time.Now()
			copy(dst, src)
			best = min(best, time.Since(t))
		}
		bwGBs = float64(2*n) / best.Seconds() / 1e9
	})
	return bwGBs
}

// decodeBytes returns the bytes one decode token reads (see above) at position pos.
func decodeBytes(c *Config, pos int) float64 {
	h := float64(c.Hidden)
	b := 4 * (float64(c.Vocab)*h + h + h) // lm_head, embedding row, final norm
	for _, k := range c.Layers {
		b += 4 * (3*h*float64(c.Intermediate) + 2*h)
		switch k {
		case GDN:
			vd := float64(c.VHeads * c.VDim)
			b += 4 * (h*float64(c.ConvDim()) + 2*h*vd + 2*h*float64(c.VHeads) + float64(c.ConvDim()*c.ConvKernel))
			b += 2 * 4 * float64(c.VHeads*c.KDim*c.VDim) // recurrent state in and out
		case Attention:
			b += 4 * h * float64(3*c.Heads*c.HeadDim+2*c.KVHeads*c.HeadDim)
			b += 4 * 2 * float64(pos*c.KVHeads*c.HeadDim) // K and V rows
		}
	}
	return b
}

func benchDecode(b *testing.B, m *Model) {
	ctx := context.Background()
	const capacity, prompt = 2048, 16
	st, err := m.NewState(capacity)
	if err != nil {
		b.Fatal(err)
	}
	tokens := randomTokens(rand.New(rand.NewPCG(1, 1)), prompt, m.Cfg.Vocab)
	restart := func() int32 {
		st.Reset()
		logits, err := m.Forward(ctx, st, tokens, false)
		if err != nil {
			b.Fatal(err)
		}
		return int32(Argmax(logits))
	}
	tok := restart()
	bw := copyBandwidth()
	posSum := 0
	b.ResetTimer()
	start := time.Now()
	var paused time.Duration
	for i := 0; i < b.N; i++ {
		if st.Pos() == capacity {
			b.StopTimer()
			p := time.Now()
			tok = restart()
			paused += time.Since(p)
			b.StartTimer()
		}
		posSum += st.Pos()
		logits, err := m.Forward(ctx, st, []int32{tok}, false)
		if err != nil {
			b.Fatal(err)
		}
		tok = int32(Argmax(logits))
	}
	elapsed := time.Since(start) - paused
	b.StopTimer()
	perTok := decodeBytes(&m.Cfg, posSum/max(b.N, 1))
	tokS := float64(b.N) / elapsed.Seconds()
	floor := bw * 1e9 / perTok
	b.ReportMetric(tokS, "tok/s")
	b.ReportMetric(floor, "floor-tok/s")
	b.ReportMetric(tokS/floor, "x-floor")
	b.ReportMetric(bw, "GB/s-copy")
	b.ReportMetric(perTok/1e6, "MB/token")
}

// BenchmarkDecodeGoldenA decodes with the larger golden model (testdata/goldens/qwen35-a,
// 8 layers, hidden 256, vocab 1024: 4.7 M parameters, ≈ 19 MB as dense float32).
func BenchmarkDecodeGoldenA(b *testing.B) {
	g := readGolden(b, goldenDir("a"))
	m, _ := loadGolden(b, goldenDir("a"), g)
	benchDecode(b, m)
}

// BenchmarkDecodeWide decodes with a random model too large for the caches: hidden 1024,
// intermediate 2816, 8 layers [GDN GDN GDN ATT]×2, 8 query / 2 KV heads of 128, GDN 4 key /
// 8 value heads of 128, vocab 16384 (≈ 0.47 GB of float32 weights per token).
func BenchmarkDecodeWide(b *testing.B) {
	c := Config{Vocab: 16384, Hidden: 1024, Intermediate: 2816,
		Layers: []LayerKind{GDN, GDN, GDN, Attention, GDN, GDN, GDN, Attention},
		Heads:  8, KVHeads: 2, HeadDim: 128, RotaryDim: 32, RopeTheta: 1e7,
		KHeads: 4, VHeads: 8, KDim: 128, VDim: 128, ConvKernel: 4, RMSEps: 1e-6}
	m := randomRaw(c, 3).model(b)
	benchDecode(b, m)
}

// BenchmarkPrefillGoldenA runs the golden model A's 200-token prompt as one prefill call
// (chunked GDN rule) and reports prompt tokens/s.
func BenchmarkPrefillGoldenA(b *testing.B) {
	g := readGolden(b, goldenDir("a"))
	m, _ := loadGolden(b, goldenDir("a"), g)
	prompt := g.ints(b, "prompt.200")
	st, err := m.NewState(len(prompt))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		st.Reset()
		if _, err := m.Forward(ctx, st, prompt, false); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*len(prompt))/b.Elapsed().Seconds(), "tok/s")
}
