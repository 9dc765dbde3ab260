package generate

import (
	"context"
	"math"
	"os"
	"testing"

	"lithos/runtime/backend"
	"lithos/runtime/backend/cpu"
	"lithos/runtime/bundle"
	"lithos/runtime/model"
	"lithos/runtime/sample"
)

// TestBF16CacheSensitivity measures what SelfCheckToleranceBF16 rests on, on the bundle named by
// $LITHOS_BF16_SENSITIVITY_BUNDLE (opt-in: minutes on a large bundle; docs/performance.md §8.20
// used the 27B-shaped one, `lithos-pack synth --random qwen3.8-27b-nvfp4 --text-only -o T &&
// lithos-pack pack T -o q.lithos`): the CPU backend's last-row logits after the self-check's
// prefill (ids 0…10) with a BF16 cache, against the same with every key and value moved by ±ε
// relative (a hash of its index and bits picks the sign) before its rounding — what the GPU's
// and the CPU's float32 differences do to the check. Each must stay within
// SelfCheckToleranceBF16, and the largest ε must move the logits at all (the probe ran).
func TestBF16CacheSensitivity(t *testing.T) {
	dir := os.Getenv("LITHOS_BF16_SENSITIVITY_BUNDLE")
	if dir == "" {
		t.Skip("SKIP: set LITHOS_BF16_SENSITIVITY_BUNDLE to a bundle directory to measure")
	}
	ctx := context.Background()
	b, err := bundle.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	tg, err := cpu.Backend{}.Load(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	prompt := make([]int32, min(selfCheckPrompt, tg.Config().Vocab))
	for i := range prompt {
		prompt[i] = int32(i)
	}
	run := func(kv string) []float32 {
		s, err := tg.NewSession(backend.SessionOptions{Capacity: len(prompt) + 1, Sampling: sample.Params{TopP: 1}, KVCache: kv})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if err := s.Prefill(ctx, prompt); err != nil {
			t.Fatal(err)
		}
		l, err := s.(logitsReader).LastLogits(nil)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	l32, l16 := run(""), run(backend.KVBF16)
	t.Logf("the BF16 cache against float32: logits %.3g relative", relDiff(l16, l32))
	defer func() { model.KVRoundingProbe = nil }()
	var moved float64
	for _, eps := range []float64{1e-6, 4e-6, 1.6e-5} {
		up, down := float32(1+eps), float32(1-eps)
		model.KVRoundingProbe = func(rows []float32) {
			for i, v := range rows {
				h := uint32(i)*2654435761 ^ math.Float32bits(v)
				h ^= h >> 15
				h *= 2246822519
				h ^= h >> 13
				if h&1 == 0 {
					rows[i] = v * up
				} else {
					rows[i] = v * down
				}
			}
		}
		moved = relDiff(run(backend.KVBF16), l16)
		model.KVRoundingProbe = nil
		t.Logf("keys and values moved ±%.2g relative before the BF16 rounding: logits %.3g relative", eps, moved)
		if !(moved <= SelfCheckToleranceBF16) {
			t.Errorf("±%.2g before the rounding moves the logits %.3g relative, beyond SelfCheckToleranceBF16 = %g", eps, moved, SelfCheckToleranceBF16)
		}
	}
	if moved == 0 {
		t.Error("the largest nudge moved no logit: the probe did not run")
	}
}
