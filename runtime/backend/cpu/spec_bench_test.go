package cpu

import (
	"context"
	"slices"
	"testing"
	"time"

	"lithos/runtime/backend"
	"lithos/runtime/sample"
)

// BenchmarkRoundOracleGoldenA measures the speculative round at its best — a drafter that
// proposes transformers' greedy continuation, so every round accepts all 7 drafts — against
// plain decoding, on the packed golden target a (8 layers, hidden 256, vocabulary 1024): 24
// decode tokens after the 11-token prompt (3 rounds of 8, or 24 single-row steps), the prefill
// untimed. Metrics: plain-tok/s and spec-tok/s (decode tokens ÷ decode time), speedup, the
// floor of each (bandwidth measured in the same process ÷ bytes per target pass ×
// tokens per pass; the oracle drafter reads nothing) and x-floor.
func BenchmarkRoundOracleGoldenA(b *testing.B) {
	bd, m := openGoldenTarget(b, "a")
	g := readGoldens(b, "a")
	prompt, want := g.ints(b, "prompt.11"), g.ints(b, "greedy.11")
	seq := append(slices.Clone(prompt), want...)
	tg := &Target{M: m}
	bw := memBandwidth()
	perPass := decodeBytes(bd, &m.Cfg, len(prompt)+12)
	const n = 25 // the prefill's token and 24 decoded
	run := func(d backend.Drafter) (time.Duration, int) {
		s, err := tg.NewSession(backend.SessionOptions{Capacity: 64, Sampling: sample.Params{TopP: 1}, Drafter: d})
		if err != nil {
			b.Fatal(err)
		}
		ss := s.State()
		ss.StopAt = n
		ctx := context.Background()
		if err := s.Prefill(ctx, prompt); err != nil {
			b.Fatal(err)
		}
		passes := 0
		t := time.Now()
		for ss.Done == 0 {
			if err := s.Decode(ctx, 1); err != nil {
				b.Fatal(err)
			}
			passes++
		}
		el := time.Since(t)
		if got := s.Ring().Drain(ss, nil); !slices.Equal(got, want[:n]) {
			b.Fatalf("tokens %v, transformers %v", got, want[:n])
		}
		return el, passes
	}
	var plainT, specT time.Duration
	var plainP, specP int
	b.ResetTimer()
	for range b.N {
		t, p := run(nil)
		plainT, plainP = plainT+t, plainP+p
		t, p = run(seqDrafter(m, seq, func(int) bool { return false }))
		specT, specP = specT+t, specP+p
	}
	dec := float64((n - 1) * b.N)
	plain, spec := dec/plainT.Seconds(), dec/specT.Seconds()
	floorPlain := bw * 1e9 / perPass
	floorSpec := floorPlain * dec / float64(specP)
	b.ReportMetric(plain, "plain-tok/s")
	b.ReportMetric(spec, "spec-tok/s")
	b.ReportMetric(spec/plain, "speedup")
	b.ReportMetric(dec/float64(specP), "tok/round")
	b.ReportMetric(plain/floorPlain, "plain-x-floor")
	b.ReportMetric(spec/floorSpec, "spec-x-floor")
	b.ReportMetric(float64(specT.Microseconds())/float64(specP)/1e3, "ms/round")
	b.ReportMetric(float64(plainT.Microseconds())/float64(plainP)/1e3, "ms/step")
}
