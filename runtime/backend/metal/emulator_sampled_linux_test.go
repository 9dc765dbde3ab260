//go:build linux && amd64

package metal

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"lithos/runtime/backend"
	"lithos/runtime/backend/cpu"
	"lithos/runtime/model/goldentest"
	"lithos/runtime/sample"
)

// TestEmulatedSampled: at temperature > 0 on the emulated Metal device — lithos_sample in
// float32, as Metal runs it (the emulator's fiber runtime is built as Metal: fiberexec's
// Options.Metal; kernels.TestFiberSampleFloat32 checks the draws one by one) — plain and
// speculative sessions (the point-mass rule: the target samples each verified row's position,
// a draft is accepted while it equals that sample) commit exactly the CPU backend's tokens,
// plain and speculative, for a sampler with top-k and top-p cuts on golden b with a random BF16
// head, 8 tokens (≈ 40 s on the 2-core machine); with LITHOS_METAL_EMULATE=1 also two more
// settings, 12 tokens, and the trained tiny pair, whose drafts are accepted (minutes). The
// float32 draw can differ from the CPU's float64 one only where u falls within rounding
// (~1e-6) of a boundary of the cumulative distribution; these seeds and positions have no such
// draw (a difference here would name its position). The sampled tokens must differ from the
// greedy ones (the goldens), so a sampler that fell back to the argmax fails.
func TestEmulatedSampled(t *testing.T) {
	kinds, n := []string{"b+draft"}, 8
	samplers := []sample.Params{{Temperature: 0.6, TopK: 40, TopP: 0.9, Seed: 99}}
	if os.Getenv("LITHOS_METAL_EMULATE") == "1" {
		kinds, n = append(kinds, "pair"), 12
		samplers = append(samplers, sample.Params{Temperature: 0.8, TopP: 1, Seed: 1}, sample.Params{Temperature: 1.2, TopP: 0.95, Seed: 1 << 33})
	}
	emuExec(t)
	root := filepath.Join("..", "..", "..")
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			b := emuBundle(t, kind)
			var prompt, greedyToks []int32
			if kind == "pair" {
				_, i32 := goldentest.ReadTensors(t, filepath.Join(root, "testdata", "goldens", "tinypair", "goldens.safetensors"))
				prompt, greedyToks = i32["prompt"], i32["greedy"]
			} else {
				_, i32 := goldentest.ReadTensors(t, filepath.Join(root, "testdata", "goldens", "qwen35-b", "goldens.safetensors"))
				prompt, greedyToks = i32["prompt.11"], i32["greedy.11"]
			}
			_, tg := emuTarget(t, b)
			gd, err := tg.LoadDraft(t.Context(), b)
			if err != nil || gd == nil {
				t.Fatalf("LoadDraft: %v, %v", gd, err)
			}
			ct, err := cpu.Backend{}.Load(context.Background(), b)
			if err != nil {
				t.Fatal(err)
			}
			cd, err := ct.LoadDraft(context.Background(), b)
			if err != nil || cd == nil {
				t.Fatalf("LoadDraft on the CPU: %v, %v", cd, err)
			}
			run := func(tgt backend.Target, dr backend.Drafter, sp sample.Params) ([]int32, backend.RoundStats) {
				s, err := tgt.NewSession(backend.SessionOptions{Capacity: len(prompt) + n + 16, Sampling: sp, Drafter: dr})
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				if err := s.Prefill(t.Context(), prompt); err != nil {
					t.Fatal(err)
				}
				return decodeTo(t, s, n)[:n], s.Stats()
			}
			for _, sp := range samplers {
				spec, st := run(tg, gd, sp)
				plain, _ := run(tg, nil, sp)
				cpuPlain, _ := run(ct, nil, sp)
				cpuSpec, _ := run(ct, cd, sp)
				if !slices.Equal(spec, cpuPlain) || !slices.Equal(plain, cpuPlain) || !slices.Equal(cpuSpec, cpuPlain) {
					t.Fatalf("sampler %+v: Metal (emulated) speculative %v\nMetal plain %v\nCPU plain %v\nCPU speculative %v", sp, spec, plain, cpuPlain, cpuSpec)
				}
				if slices.Equal(plain, greedyToks[:n]) {
					t.Fatalf("sampler %+v: the sampled tokens %v are the greedy ones", sp, plain)
				}
				if st.Rounds == 0 {
					t.Fatalf("sampler %+v: no speculative round ran on Metal (emulated): %+v", sp, st)
				}
				t.Logf("sampler %+v: %d tokens identical; Metal (emulated) %d rounds, %d tokens in rounds", sp, n, st.Rounds, st.RoundTokens)
			}
		})
	}
}
