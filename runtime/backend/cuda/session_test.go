//go:build linux && amd64

package cuda

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"testing"

	"lithos/kernels"
	"lithos/runtime/backend"
	"lithos/runtime/backend/cpu"
	"lithos/runtime/backend/gpu"
	"lithos/runtime/model/goldentest"
	"lithos/runtime/sample"
)

// greedySampling is temperature 0 (top-p 1: keep all, the only valid "off").
var greedySampling = sample.Params{TopP: 1}

// goldens of testdata/goldens/qwen35-a (transformers, FP32).
func readGoldenA(t *testing.T) (map[string][]float32, map[string][]int32) {
	t.Helper()
	return readGoldens(t, "a")
}

func readGoldens(t *testing.T, name string) (map[string][]float32, map[string][]int32) {
	t.Helper()
	return goldentest.ReadTensors(t, filepath.Join("..", "..", "..", "testdata", "goldens", "qwen35-"+name, "goldens.safetensors"))
}

// drain reads every token the ring holds.
func drain(s backend.Session) []int32 {
	return s.Ring().Drain(s.State(), nil)
}

func relErr(got, want []float32) float64 {
	var num, den float64
	for i := range want {
		num = math.Max(num, math.Abs(float64(got[i])-float64(want[i])))
		den = math.Max(den, math.Abs(float64(want[i])))
	}
	return num / den
}

// TestSessionGoldens: greedy generation on the GPU, graphs replayed, against transformers'
// records of golden models a and b (b: GQA 4:1, head_dim 64, d_k 128 ≠ d_v 64): the last
// prompt row's logits (prefill in chunks of 8 rows) within
// 1e-4 relative, and the 32 greedy tokens identical — decoded one step per call (as
// runtime/generate drives it) and, in a second session, all 31 steps in one call.
func TestSessionGoldens(t *testing.T) {
	for _, name := range []string{"a", "b"} {
		t.Run(name, func(t *testing.T) { testSessionGoldens(t, name) })
	}
}

// TestSessionGoldensClusters: TestSessionGoldens and TestSpecGreedyGoldens of model b with every
// BLM product in the cluster split (kernels.BLMClusterMinK lowered to 0: the golden models' K =
// 256 keeps them out of clusters otherwise), on a device that launches clusters.
func TestSessionGoldensClusters(t *testing.T) {
	if e := newOpEnv(t, 1); !e.clusters() {
		t.Skip("the device launches no thread-block clusters")
	}
	old := kernels.BLMClusterMinK
	kernels.BLMClusterMinK = 0
	t.Cleanup(func() { kernels.BLMClusterMinK = old })
	testSessionGoldens(t, "b")
	st := loadSpec(t, "b")
	_, i32 := readGoldens(t, "b")
	for _, T := range []int{11, 200} {
		t.Run(fmt.Sprint("spec/prompt", T), func(t *testing.T) { specGolden(t, st, i32, T) })
	}
}

func testSessionGoldens(t *testing.T, name string) {
	e, tg, _ := loadGoldenTargetOf(t, name)
	f32, i32 := readGoldens(t, name)
	vocab := tg.Cfg.Vocab
	for _, T := range []int{1, 11, 200} {
		for _, oneCall := range []bool{false, true} {
			t.Run(fmt.Sprintf("prompt%d/one-call-%v", T, oneCall), func(t *testing.T) {
				e.t = t
				prompt := i32[fmt.Sprint("prompt.", T)]
				greedy := i32[fmt.Sprint("greedy.", T)]
				logits := f32[fmt.Sprint("logits.", T)]
				if len(prompt) != T || len(greedy) < 2 || len(logits) < vocab {
					t.Fatalf("goldens: prompt %d, greedy %d, logits %d values", len(prompt), len(greedy), len(logits))
				}
				s, err := tg.NewDeviceSession(backend.SessionOptions{Capacity: T + len(greedy) + 4, Sampling: greedySampling}, true)
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				if err := s.Prefill(t.Context(), prompt); err != nil {
					t.Fatal(err)
				}
				got := e.read(s.Logits(), vocab)
				re := relErr(got, logits[len(logits)-vocab:])
				t.Logf("prompt %d: last-row logits max relative error %.3g against transformers", T, re)
				if re > 1e-4 {
					t.Errorf("prompt %d: last-row logits relative error %.3g > 1e-4", T, re)
				}
				toks := drain(s)
				if oneCall {
					if err := s.Decode(t.Context(), len(greedy)-1); err != nil {
						t.Fatal(err)
					}
					toks = append(toks, drain(s)...)
				} else {
					for len(toks) < len(greedy) {
						if err := s.Decode(t.Context(), 1); err != nil {
							t.Fatal(err)
						}
						toks = append(toks, drain(s)...)
					}
				}
				if !slices.Equal(toks, greedy) {
					t.Fatalf("greedy tokens\n got %v\nwant %v", toks, greedy)
				}
				st := s.State()
				if int(st.Position) != T+len(greedy)-1 || st.Done != 0 || st.Error != 0 || s.Stats().PlainSteps != len(greedy)-1 {
					t.Fatalf("final state %+v, stats %+v", st, s.Stats())
				}
			})
		}
	}
}

// TestSessionGraphsAndChunks: the same generation with the kernels launched one by one (no
// graph) and with prefill chunks of 3 rows gives the same tokens; graphs and direct launches
// the same logits bit for bit; LastLogits after the prefill is Logits()' row 0.
func TestSessionGraphsAndChunks(t *testing.T) {
	e, tg, _ := loadGoldenTarget(t)
	_, i32 := readGoldenA(t)
	prompt := i32["prompt.11"]
	run := func(graphs bool, chunk int) ([]int32, []float32) {
		s, err := tg.NewDeviceSession(backend.SessionOptions{Capacity: 64, PrefillChunk: chunk, Sampling: greedySampling}, graphs)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if err := s.Prefill(t.Context(), prompt); err != nil {
			t.Fatal(err)
		}
		logits := e.read(s.Logits(), tg.Cfg.Vocab)
		// LastLogits (runtime/generate's self-check reads it) is the same row.
		if last, err := s.LastLogits(nil); err != nil || !slices.EqualFunc(last, logits, func(a, b float32) bool { return math.Float32bits(a) == math.Float32bits(b) }) {
			t.Fatalf("LastLogits after the prefill: %v, equal to Logits() row 0: %v", err, err == nil)
		}
		if err := s.Decode(t.Context(), 20); err != nil {
			t.Fatal(err)
		}
		return drain(s), logits
	}
	tg1, lg1 := run(true, 0)
	tg2, lg2 := run(false, 0)
	tg3, lg3 := run(true, 3)
	if !slices.Equal(tg1, tg2) || !slices.Equal(tg1, tg3) || len(tg1) != 21 {
		t.Fatalf("graphs %v\ndirect %v\nchunks of 3 %v", tg1, tg2, tg3)
	}
	for i := range lg1 {
		if math.Float32bits(lg1[i]) != math.Float32bits(lg2[i]) {
			t.Fatalf("logit %d: graph %v, direct launches %v", i, lg1[i], lg2[i])
		}
	}
	if re := relErr(lg3, lg1); re > 1e-5 {
		t.Fatalf("prefill in chunks of 3 vs 8: logits relative difference %.3g", re)
	}
}

// TestSessionStops: EOS, StopAt, a full context and a full ring end generation on the GPU with
// the step state the CPU session reaches after the same calls.
func TestSessionStops(t *testing.T) {
	_, tg, b := loadGoldenTarget(t)
	_, i32 := readGoldenA(t)
	prompt, greedy := i32["prompt.11"], i32["greedy.11"]
	cpuTarget, err := cpu.Backend{}.Load(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		opt    backend.SessionOptions
		stopAt uint32 // tokens after the prefill's
		decode []int  // Decode calls
		drain  bool   // drain between calls
	}{
		{"eos", backend.SessionOptions{Capacity: 64, EOS: []int32{greedy[5]}, Sampling: greedySampling}, 0, []int{3, 10}, true},
		{"stop-at", backend.SessionOptions{Capacity: 64, Sampling: greedySampling}, 4, []int{2, 10}, true},
		{"context", backend.SessionOptions{Capacity: len(prompt) + 3, Sampling: greedySampling}, 0, []int{10}, true},
		{"ring", backend.SessionOptions{Capacity: 64, RingCapacity: 4, Sampling: greedySampling}, 0, []int{10}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var sessions [2]backend.Session
			var toks [2][]int32
			var prefillSteps [2]uint32 // the GPU prefills in chunks of ≤ gpu.MaxStepRows rows, the CPU in one step
			for i := range 2 {
				var s backend.Session
				var err error
				if i == 0 {
					s, err = tg.NewSession(c.opt)
				} else {
					s, err = cpuTarget.NewSession(c.opt)
				}
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				sessions[i] = s
				if err := s.Prefill(t.Context(), prompt); err != nil {
					t.Fatal(err)
				}
				prefillSteps[i] = s.State().Step
				if c.stopAt > 0 {
					s.State().StopAt = s.State().RingHead + c.stopAt
				}
				for _, k := range c.decode {
					if c.drain {
						toks[i] = append(toks[i], drain(s)...)
					}
					if err := s.Decode(t.Context(), k); err != nil {
						t.Fatal(err)
					}
				}
				toks[i] = append(toks[i], drain(s)...)
			}
			g, w := sessions[0].State(), sessions[1].State()
			// On a ring overflow the CPU session has committed the row whose token was lost;
			// lithos_step commits nothing (the committed GDN slot is untouched): the positions
			// differ by that row, the error and the tokens do not.
			// Steps are compared from the end of the prefill (the GPU's prefill takes
			// ⌈11/gpu.MaxStepRows⌉ steps, the CPU's one).
			gs, ws := g.Step-prefillSteps[0], w.Step-prefillSteps[1]
			samePos := g.Position == w.Position && gs == ws
			if c.name == "ring" {
				samePos = g.Position+1 == w.Position && gs+1 == ws
				t.Logf("ring overflow: GPU position %d, %d decode steps; CPU position %d, %d decode steps", g.Position, gs, w.Position, ws)
			}
			if !slices.Equal(toks[0], toks[1]) || !samePos || g.Done != w.Done ||
				g.Error != w.Error || g.RingHead != w.RingHead || g.Anchor != w.Anchor {
				t.Fatalf("GPU tokens %v state %+v\nCPU tokens %v state %+v", toks[0], *g, toks[1], *w)
			}
			if g.Done != 1 {
				t.Fatalf("not done: %+v", *g)
			}
			t.Logf("%s: %d tokens, error %d, position %d", c.name, len(toks[0]), g.Error, g.Position)
		})
	}
}

// TestBackendLoad: the backend as runtime/generate uses it (Backend.Load → NewSession →
// Prefill → Decode(1)…), against the golden greedy tokens (the bundle has no draft head:
// LoadDraft returns nil, nil), and at temperature 0.7 with top-k and top-p against the CPU
// backend's tokens for the same seed.
func TestBackendLoad(t *testing.T) {
	testDevice(t)
	b := goldenBundle(t)
	_, i32 := readGoldenA(t)
	prompt, greedy := i32["prompt.11"], i32["greedy.11"]
	tg, err := Backend{}.Load(t.Context(), b)
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	if dr, err := tg.LoadDraft(t.Context(), b); dr != nil || err != nil {
		t.Fatalf("LoadDraft: %v, %v", dr, err)
	}
	// UsableDevice describes the device as the loaded target's device does (runtime/generate
	// reads a cached self-check verdict by it before loading).
	// (Not on the emulator: UsableDevice opens NVRTC itself, which the emulator does not stand
	// in for.)
	if !emulatorEnabled() {
		desc, err := UsableDevice()
		gt, ok := tg.(*gpu.Target)
		if err != nil || !ok || desc == "" || desc != gt.Device.(fmt.Stringer).String() {
			t.Fatalf("UsableDevice %q, %v; the loaded target's device %v", desc, err, tg)
		}
	}
	s, err := tg.NewSession(backend.SessionOptions{Capacity: 128, Sampling: greedySampling})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Prefill(t.Context(), prompt); err != nil {
		t.Fatal(err)
	}
	toks := drain(s)
	for len(toks) < 8 {
		if err := s.Decode(t.Context(), 1); err != nil {
			t.Fatal(err)
		}
		toks = append(toks, drain(s)...)
	}
	if !slices.Equal(toks, greedy[:8]) {
		t.Fatalf("tokens %v, want %v", toks, greedy[:8])
	}
	// Sampling at temperature > 0 runs on the device: the CPU backend's tokens for the same seed.
	sp := sample.Params{Temperature: 0.7, TopK: 20, TopP: 0.9, Seed: 5}
	ct, err := cpu.Backend{}.Load(t.Context(), b)
	if err != nil {
		t.Fatal(err)
	}
	var got [2][]int32
	for i, tgt := range []backend.Target{tg, ct} {
		s, err := tgt.NewSession(backend.SessionOptions{Capacity: 64, Sampling: sp})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		s.State().StopAt = 24
		if err := s.Prefill(t.Context(), prompt); err != nil {
			t.Fatal(err)
		}
		for s.State().Done == 0 {
			if err := s.Decode(t.Context(), 1); err != nil {
				t.Fatal(err)
			}
		}
		got[i] = drain(s)
	}
	if len(got[0]) != 24 || !slices.Equal(got[0], got[1]) {
		t.Fatalf("temperature 0.7: GPU %v, CPU %v", got[0], got[1])
	}
	if slices.Equal(got[0], greedy[:24]) {
		t.Fatalf("temperature 0.7 gave the greedy tokens %v", got[0])
	}
}
