//go:build linux && amd64

package cuda

import (
	"context"
	"slices"
	"testing"

	"lithos/runtime/backend"
	"lithos/runtime/backend/cpu"
)

// TestSessionKVBF16: golden model b with SessionOptions.KVCache = bf16 (lithos_attn_prep_bf16,
// lithos_attn_partial_bf16 in the replayed graphs) prefills the 200-token prompt — keys across
// several attention partitions — and decodes 16 tokens: the last prompt row's logits within
// 1e-4 relative of the CPU backend's with its BF16-rounded cache and more than 1e-4 from the
// GPU's own with the float32 cache (so the rounding ran), the tokens the CPU backend's with the
// same cache. (runtime/backend/metal's TestEmulatedKVBF16 is the same check on the emulated Metal
// device.)
func TestSessionKVBF16(t *testing.T) {
	e, tg, b := loadGoldenTargetOf(t, "b")
	_, i32 := readGoldens(t, "b")
	prompt := i32["prompt.200"]
	vocab := tg.Cfg.Vocab
	const n = 16
	ct, err := cpu.Backend{}.Load(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	run := func(tgt backend.Target, kv string) ([]int32, []float32) {
		opt := backend.SessionOptions{Capacity: len(prompt) + n + 4, Sampling: greedySampling, KVCache: kv}
		s, err := tgt.NewSession(opt)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if err := s.Prefill(t.Context(), prompt); err != nil {
			t.Fatal(err)
		}
		var logits []float32
		switch s := s.(type) {
		case *cpu.Session:
			if logits, err = s.LastLogits(nil); err != nil {
				t.Fatal(err)
			}
		default:
			logits = e.read(s.(interface{ Logits() *Buffer }).Logits(), vocab)
		}
		toks := drain(s)
		for len(toks) < n {
			if err := s.Decode(t.Context(), 1); err != nil {
				t.Fatal(err)
			}
			toks = append(toks, drain(s)...)
		}
		return toks[:n], logits
	}
	gt, gl := run(tg, backend.KVBF16)
	_, gl32 := run(tg, backend.KVFloat32)
	ct16, cl := run(ct, backend.KVBF16)
	re, moved := relErr(gl, cl), relErr(gl, gl32)
	t.Logf("BF16 KV cache: last-row logits %.3g relative from the CPU backend's with the same cache, %.3g from the float32 cache's", re, moved)
	if !(re <= 1e-4) {
		t.Errorf("last-row logits %.3g relative from the CPU backend's with a BF16 cache: more than 1e-4", re)
	}
	if !(moved > 1e-4) {
		t.Errorf("last-row logits only %.3g relative from the float32 cache's: the BF16 rounding did not run", moved)
	}
	if !slices.Equal(gt, ct16) {
		t.Fatalf("tokens with a BF16 KV cache: GPU %v, CPU backend %v", gt, ct16)
	}
}
