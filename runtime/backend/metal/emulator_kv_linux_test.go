//go:build linux && amd64

package metal

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"lithos/runtime/backend"
	"lithos/runtime/backend/cpu"
	"lithos/runtime/model/goldentest"
)

// TestEmulatedKVBF16: with SessionOptions.KVCache = bf16, golden model b on the emulated Metal
// device (lithos_attn_prep_bf16 and lithos_attn_partial_bf16 from its plans) prefills the
// 11-token prompt and decodes 8 tokens: the last prompt row's logits within 1e-4 relative of
// the CPU backend's with its BF16-rounded cache (the bound of the float32 cache against
// transformers) and further from the float32 cache's logits than that bound allows unrounded
// (so the rounding ran), the tokens the CPU backend's with the same cache and transformers'
// greedy ones (this model's margins are wider than the rounding); a snapshot of the float32
// cache does not restore into the BF16 session.
func TestEmulatedKVBF16(t *testing.T) {
	b := emuBundle(t, "b")
	_, i32 := goldentest.ReadTensors(t, filepath.Join("..", "..", "..", "testdata", "goldens", "qwen35-b", "goldens.safetensors"))
	prompt, want := i32["prompt.11"], i32["greedy.11"]
	d, tg := emuTarget(t, b)
	vocab := tg.Cfg.Vocab
	const n = 8
	ct, err := cpu.Backend{}.Load(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	run := func(kv string) (gpuToks, cpuToks []int32, gpuLogits, cpuLogits []float32, snap backend.Snapshot) {
		opt := backend.SessionOptions{Capacity: len(prompt) + n + 8, Sampling: greedy, KVCache: kv}
		s, err := tg.NewDeviceSession(opt, true)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		if err := s.Prefill(t.Context(), prompt); err != nil {
			t.Fatal(err)
		}
		gpuLogits = d.floats(t, s.Logits().Ptr, vocab)
		gpuToks = decodeTo(t, s, n)
		if snap, err = s.Snapshot(); err != nil {
			t.Fatal(err)
		}
		cs, err := ct.NewSession(opt)
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		if err := cs.Prefill(t.Context(), prompt); err != nil {
			t.Fatal(err)
		}
		if cpuLogits, err = cs.(*cpu.Session).LastLogits(nil); err != nil {
			t.Fatal(err)
		}
		return gpuToks, decodeTo(t, cs, n), gpuLogits, cpuLogits, snap
	}
	gt, ct16, gl, cl, _ := run(backend.KVBF16)
	_, _, gl32, _, snap32 := run(backend.KVFloat32)
	re, moved := relErr(gl, cl), relErr(gl, gl32)
	t.Logf("BF16 KV cache: last-row logits %.3g relative from the CPU backend's with the same cache, %.3g from the float32 cache's", re, moved)
	if !(re <= 1e-4) {
		t.Errorf("last-row logits %.3g relative from the CPU backend's with a BF16 cache: more than 1e-4", re)
	}
	if !(moved > 1e-4) {
		t.Errorf("last-row logits only %.3g relative from the float32 cache's: the BF16 rounding did not run", moved)
	}
	if !slices.Equal(gt, ct16) || !slices.Equal(gt, want[:n]) {
		t.Fatalf("tokens with a BF16 KV cache: %v, CPU backend %v, transformers (float32) %v", gt, ct16, want[:n])
	}
	s, err := tg.NewDeviceSession(backend.SessionOptions{Capacity: len(prompt) + n + 8, Sampling: greedy, KVCache: backend.KVBF16}, true)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Restore(snap32); err == nil || !strings.Contains(err.Error(), "KV cache") {
		t.Fatalf("a float32 cache's snapshot restored into a BF16 session: %v", err)
	}
}
