//go:build linux && amd64

package metal

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"lithos/pack"
	"lithos/runtime/backend"
	"lithos/runtime/backend/cpu"
	"lithos/runtime/bundle"
	"lithos/runtime/generate/gentest"
	"lithos/runtime/model/goldentest"
)

// TestEmulatedSpecBlock15: a DSpark head with block_size 15 (its rounds verify 16 rows, the
// most gpu.MaxStepRows allows) on golden model b over the emulated Metal device, prefilled in
// chunks of 16 and of 4 rows: the session's step state must hold the anchor and 15 drafts
// even when the prefill chunk is smaller (a session sized by the chunk alone was refused at
// NewSession), and greedy speculative decoding gives the CPU backend's tokens, which are
// transformers' greedy tokens.
func TestEmulatedSpecBlock15(t *testing.T) {
	emuExec(t)
	tmp := t.TempDir()
	hd := filepath.Join(tmp, "head")
	if err := gentest.WriteDraft(hd, gentest.DraftFor(608, 256, 4), 1); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(hd, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["block_size"] = 15
	if raw, err = json.Marshal(cfg); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(hd, "config.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join("..", "..", "..")
	opt := pack.Options{Target: filepath.Join(root, "testdata", "goldens", "qwen35-b"), Workers: 2, ToolVersion: "test",
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Out: filepath.Join(tmp, "b.lithos"), Draft: hd, DraftFormat: pack.DraftBF16}
	if _, err := pack.Build(context.Background(), opt); err != nil {
		t.Fatal(err)
	}
	b, err := bundle.Open(opt.Out)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	_, i32 := goldentest.ReadTensors(t, filepath.Join(root, "testdata", "goldens", "qwen35-b", "goldens.safetensors"))
	prompt, want := i32["prompt.11"], i32["greedy.11"]
	n := 4
	_, tg := emuTarget(t, b)
	gd, err := tg.LoadDraft(t.Context(), b)
	if err != nil || gd == nil {
		t.Fatalf("LoadDraft: %v %v", gd, err)
	}
	if gd.BlockSize() != 15 {
		t.Fatalf("GPU head block %d, want 15", gd.BlockSize())
	}
	ct, err := cpu.Backend{}.Load(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	cd, err := ct.LoadDraft(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	for _, chunk := range []int{16, 4} {
		run := func(tgt backend.Target, dr backend.Drafter) ([]int32, backend.StepState) {
			s, err := tgt.NewSession(backend.SessionOptions{Capacity: len(prompt) + n + 32, Sampling: greedy, Drafter: dr, PrefillChunk: chunk})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			ss := s.State()
			ss.StopAt = ss.RingHead + uint32(n)
			if err := s.Prefill(t.Context(), prompt); err != nil {
				t.Fatal(err)
			}
			for i := 0; ss.Done == 0 && i < 6; i++ {
				if err := s.Decode(t.Context(), 1); err != nil {
					t.Fatalf("chunk %d: decode: %v", chunk, err)
				}
			}
			return s.Ring().Drain(ss, nil), *ss
		}
		mt, mss := run(tg, gd)
		c, css := run(ct, cd)
		if !slices.Equal(mt, c) || !slices.Equal(mt, want[:n]) || mss.Error != 0 || mss.Position != css.Position {
			t.Fatalf("chunk %d: GPU tokens %v (error %d, position %d), CPU %v (position %d), transformers %v", chunk, mt, mss.Error, mss.Position, c, css.Position, want[:n])
		}
	}
}
