//go:build linux && amd64

package cuda

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"lithos/kernels"
	"lithos/pack"
	"lithos/runtime/backend"
	"lithos/runtime/backend/cpu"
	"lithos/runtime/backend/gpu"
	"lithos/runtime/bundle"
	"lithos/runtime/generate/gentest"
	"lithos/runtime/model/goldentest"
	"lithos/runtime/sample"
)

// Speculative decoding on the GPU (docs/speculative.md; the round of buildRound) against the
// plain GPU session, the CPU backend's session and the oracles: transformers' greedy goldens
// (testdata/goldens/qwen35-{a,b}) with random DSpark heads (gentest.WriteDraft), and the trained
// tiny pair (testdata/hub/lithos-test/tiny-coder-{NVFP4,DSpark}) with its PyTorch goldens
// (testdata/goldens/tinypair: the target's greedy tokens, the first round of tools/dspark_ref.py,
// the round simulation's accepted drafts).

var specBundles = map[string]string{}

// specBundle packs a target with a draft head once per test binary: kind "a" or "b" (a golden
// target with a random head, gentest.DraftFor, NVFP4 for a and BF16 for b) or "pair-bf16",
// "pair-nvfp4" (the trained tiny pair with its head as stored or re-quantized), and opens it.
func specBundle(t *testing.T, kind string) *bundle.Bundle {
	t.Helper()
	dir, ok := specBundles[kind]
	if !ok {
		if goldenTemp == "" {
			var err error
			if goldenTemp, err = os.MkdirTemp("", "lithos-cuda-golden-"); err != nil {
				t.Fatal(err)
			}
		}
		root := filepath.Join("..", "..", "..")
		opt := pack.Options{Workers: 2, ToolVersion: "test", Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
			Out: filepath.Join(goldenTemp, "spec-"+kind+".lithos")}
		switch kind {
		case "a", "b":
			vocab, layers, format, seed := 1024, 8, pack.DraftNVFP4, uint64(2)
			if kind == "b" {
				vocab, layers, format, seed = 608, 4, pack.DraftBF16, 1
			}
			hd := filepath.Join(goldenTemp, "head-"+kind)
			if err := gentest.WriteDraft(hd, gentest.DraftFor(vocab, 256, layers), seed); err != nil {
				t.Fatal(err)
			}
			opt.Target, opt.Draft, opt.DraftFormat = filepath.Join(root, "testdata", "goldens", "qwen35-"+kind), hd, format
		case "pair-bf16", "pair-nvfp4":
			hub := filepath.Join(root, "testdata", "hub", "lithos-test")
			opt.Target, opt.Draft = filepath.Join(hub, "tiny-coder-NVFP4"), filepath.Join(hub, "tiny-coder-DSpark")
			opt.DraftFormat = pack.DraftNVFP4
			if kind == "pair-bf16" {
				opt.DraftFormat = pack.DraftBF16
			}
		default:
			t.Fatalf("no spec bundle %q", kind)
		}
		if _, err := pack.Build(context.Background(), opt); err != nil {
			t.Fatalf("pack %s: %v", kind, err)
		}
		dir = opt.Out
		specBundles[kind] = dir
	}
	b, err := bundle.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// emulatorKinds returns the spec bundles a test that compares the GPU with the CPU runs on:
// kinds on the GPU, golden b (the smallest: 4 layers, vocabulary 608) on the CPU emulator, where
// a round of the tiny pair takes seconds.
func emulatorKinds(kinds ...string) []string {
	if emulatorEnabled() {
		return []string{"b"}
	}
	return kinds
}

// specPrompt is the prompt such a test uses on a spec bundle: the held-out prompt of the tiny
// pair (194 tokens), the 11-token prompt of a golden model.
func specPrompt(t *testing.T, kind string) []int32 {
	t.Helper()
	if kind == "a" || kind == "b" {
		_, i32 := readGoldens(t, kind)
		return i32["prompt.11"]
	}
	_, i32 := goldentest.ReadTensors(t, filepath.Join("..", "..", "..", "testdata", "goldens", "tinypair", "goldens.safetensors"))
	return i32["prompt"]
}

// specTargets loads a spec bundle on the GPU and on the CPU, each with its draft head.
type specTargets struct {
	b          *bundle.Bundle
	e          *opEnv
	gpu        *gpu.Target
	gpuDraft   backend.Drafter
	cpu        backend.Target
	cpuDraft   backend.Drafter
	vocab, eos int32
}

func loadSpec(t *testing.T, kind string) *specTargets {
	t.Helper()
	e := newOpEnv(t, 41) // skips without a GPU before any packing
	b := specBundle(t, kind)
	tg, err := gpu.LoadTarget(t.Context(), Runtime(e.d, e.ks), b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tg.Close() })
	gd, err := tg.LoadDraft(t.Context(), b)
	if err != nil || gd == nil {
		t.Fatalf("LoadDraft on the GPU: %v, %v", gd, err)
	}
	ct, err := cpu.Backend{}.Load(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	cd, err := ct.LoadDraft(context.Background(), b)
	if err != nil || cd == nil {
		t.Fatalf("LoadDraft on the CPU: %v, %v", cd, err)
	}
	if gd.BlockSize() != cd.BlockSize() || !slices.Equal(gd.TapLayers(), cd.TapLayers()) {
		t.Fatalf("GPU head block %d taps %v, CPU head block %d taps %v", gd.BlockSize(), gd.TapLayers(), cd.BlockSize(), cd.TapLayers())
	}
	return &specTargets{b: b, e: e, gpu: tg, gpuDraft: gd, cpu: ct, cpuDraft: cd, vocab: int32(tg.Cfg.Vocab)}
}

// run generates n tokens (StopAt) from prompt with the options on a session of tg, one Decode
// call per step; it returns the tokens, the accepted drafts of each decode step and the session
// (closed at cleanup).
func runSession(t *testing.T, tg backend.Target, opt backend.SessionOptions, prompt []int32, n int) ([]int32, []uint32, backend.Session) {
	t.Helper()
	if opt.Capacity == 0 {
		opt.Capacity = len(prompt) + n + 8
	}
	s, err := tg.NewSession(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ss := s.State()
	ss.StopAt = ss.RingHead + uint32(n)
	if err := s.Prefill(t.Context(), prompt); err != nil {
		t.Fatal(err)
	}
	var acc []uint32
	for ss.Done == 0 {
		if err := s.Decode(t.Context(), 1); err != nil {
			t.Fatal(err)
		}
		acc = append(acc, ss.Accepted)
		if os.Getenv("LITHOS_CUDA_TRACE") == "1" {
			t.Logf("decode: position %d, head %d, rows %d, accepted %d, committed %d, done %d, error %d", ss.Position, ss.RingHead, ss.Rows, ss.Accepted, ss.Committed, ss.Done, ss.Error)
		}
	}
	if ss.Error != 0 {
		t.Fatalf("session error %d (state %+v)", ss.Error, *ss)
	}
	return drain(s), acc, s
}

// checkSpecState: a speculative session's drafter context covers the committed positions and
// its telemetry adds up.
func checkSpecState(t *testing.T, s backend.Session, B int) {
	t.Helper()
	ss, st := s.State(), s.Stats()
	if ss.DraftContext != ss.Position {
		t.Errorf("DraftContext %d, Position %d", ss.DraftContext, ss.Position)
	}
	sum, tok := 0, 0
	for n, c := range st.Committed {
		sum += c
		tok += (n + 1) * c
	}
	if sum != st.Rounds || tok != st.RoundTokens || len(st.Drafted) != B || (st.Rounds > 0 && st.Drafted[0] != st.Rounds) {
		t.Errorf("telemetry does not add up: %+v", st)
	}
}

// TestSpecGreedyGoldens: greedy speculative decoding on the GPU with random DSpark heads (golden
// a: NVFP4 head; b: BF16 head) gives transformers' greedy tokens for the 1-, 11- and 200-token
// prompts, the same as the plain GPU session, with the drafter's context = the committed
// positions; the CPU backend's speculative session gives the same tokens.
func TestSpecGreedyGoldens(t *testing.T) {
	for _, name := range []string{"a", "b"} {
		t.Run(name, func(t *testing.T) {
			st := loadSpec(t, name)
			_, i32 := readGoldens(t, name)
			for _, T := range []int{1, 11, 200} {
				t.Run(fmt.Sprint("prompt", T), func(t *testing.T) { specGolden(t, st, i32, T) })
			}
		})
	}
}

// specGolden is one prompt of TestSpecGreedyGoldens.
func specGolden(t *testing.T, st *specTargets, i32 map[string][]int32, T int) {
	prompt, want := i32[fmt.Sprint("prompt.", T)], i32[fmt.Sprint("greedy.", T)]
	opt := backend.SessionOptions{Sampling: greedySampling, Drafter: st.gpuDraft}
	spec, acc, s := runSession(t, st.gpu, opt, prompt, len(want))
	opt.Drafter = nil
	plain, _, _ := runSession(t, st.gpu, opt, prompt, len(want))
	opt.Drafter = st.cpuDraft
	cpuSpec, cpuAcc, cs := runSession(t, st.cpu, opt, prompt, len(want))
	if !slices.Equal(spec, want) || !slices.Equal(plain, want) || !slices.Equal(cpuSpec, want) {
		t.Fatalf("prompt %d: GPU speculative %v\nGPU plain %v\nCPU speculative %v\ntransformers %v", T, spec, plain, cpuSpec, want)
	}
	checkSpecState(t, s, st.gpuDraft.BlockSize())
	gs, csd := s.Stats(), cs.Stats()
	t.Logf("prompt %d: GPU %d rounds + %d single rows, accepted %v (CPU %d rounds, accepted %v); draft %v verify %v",
		T, gs.Rounds, gs.PlainSteps, acc, csd.Rounds, cpuAcc, gs.DraftTime, gs.VerifyTime)
	if gs.Rounds == 0 {
		t.Fatalf("no speculative round ran: %+v", gs)
	}
}

// TestSpecDrafterMatchesReference: the GPU drafter's first round on the tiny pair's held-out
// prompt (context = the GPU target's taps of the 194 prompt tokens, anchor = its first token)
// against tools/dspark_ref.py's record in testdata/goldens/tinypair (BF16 head and its NVFP4
// re-export): the 7 drafts equal, the Markov-adjusted logits within 1e-4·max|logit| and the
// confidences within 1e-4 (measured on the CPU emulator: 1.0e-6 and 5e-7). The context K/V are checked indirectly (the logits depend on them).
func TestSpecDrafterMatchesReference(t *testing.T) {
	gdir := filepath.Join("..", "..", "..", "testdata", "goldens", "tinypair")
	f32, i32 := goldentest.ReadTensors(t, filepath.Join(gdir, "goldens.safetensors"))
	for _, c := range []struct{ kind, prefix string }{{"pair-bf16", "draft."}, {"pair-nvfp4", "draft_nvfp4."}} {
		t.Run(c.kind, func(t *testing.T) {
			st := loadSpec(t, c.kind)
			prompt := i32["prompt"]
			s, err := st.gpu.NewDeviceSession(backend.SessionOptions{Capacity: len(prompt) + 16, Sampling: greedySampling, Drafter: st.gpuDraft}, true)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if err := s.Prefill(t.Context(), prompt); err != nil {
				t.Fatal(err)
			}
			if first := drain(s); len(first) != 1 || first[0] != i32["greedy"][0] {
				t.Fatalf("first token %v, want %d", first, i32["greedy"][0])
			}
			if s.State().DraftContext != uint32(len(prompt)) {
				t.Fatalf("drafter context %d after the prefill of %d tokens", s.State().DraftContext, len(prompt))
			}
			if err := s.Decode(t.Context(), 1); err != nil {
				t.Fatal(err)
			}
			B, base, confBuf, _ := s.DraftOutputs()
			V := st.gpu.Cfg.Vocab
			wantTok, wantConf, wantLogits := i32[c.prefix+"tokens"], f32[c.prefix+"confidence"], f32[c.prefix+"logits"]
			got := st.e.read(base, B*V)
			m := maxAbs(wantLogits)
			worst := 0.0
			for i := range wantLogits {
				worst = math.Max(worst, math.Abs(float64(got[i])-float64(wantLogits[i])))
			}
			t.Logf("Markov-adjusted logits: max |GPU − reference| %.3g (%.3g of max|logit| %.3g)", worst, worst/m, m)
			if !(worst <= 1e-4*m) {
				t.Errorf("logits differ from the reference by %.3g > 1e-4·%.3g", worst, m)
			}
			drafts := s.State().Pending[1 : 1+B]
			if !slices.Equal(drafts, wantTok) {
				t.Errorf("drafts %v, reference %v", drafts, wantTok)
			}
			conf := st.e.read(confBuf, B)
			for k := range B {
				if math.Abs(float64(conf[k]-wantConf[k])) > 1e-4 {
					t.Errorf("confidence %d: %v, reference %v", k, conf[k], wantConf[k])
				}
			}
			t.Logf("drafts %v, confidences %v (reference %v); round accepted %d", drafts, conf, wantConf, s.State().Accepted)
		})
	}
}

// TestSpecTinyPair: the trained pair on its held-out prompt, greedy: the GPU's speculative
// output is transformers' 32 tokens, the drafts accepted in each round equal the reference
// simulation's (goldens.json rounds_over_32_tokens_bf16_cpu, BF16 head) and the CPU session's;
// over 64 tokens the round commits at least 2 tokens on average (the CPU measured 2.33) and the
// output equals the plain GPU session's and the CPU's. Graph replay and direct launches give
// the same rounds.
func TestSpecTinyPair(t *testing.T) {
	gdir := filepath.Join("..", "..", "..", "testdata", "goldens", "tinypair")
	_, i32 := goldentest.ReadTensors(t, filepath.Join(gdir, "goldens.safetensors"))
	raw, err := os.ReadFile(filepath.Join(gdir, "goldens.json"))
	if err != nil {
		t.Fatal(err)
	}
	var gj struct {
		Sim struct {
			RoundsAccepted []uint32 `json:"rounds_accepted"`
		} `json:"rounds_over_32_tokens_bf16_cpu"`
	}
	if err := json.Unmarshal(raw, &gj); err != nil || len(gj.Sim.RoundsAccepted) == 0 {
		t.Fatalf("goldens.json: %v", err)
	}
	st := loadSpec(t, "pair-bf16")
	prompt, want := i32["prompt"], i32["greedy"]
	opt := backend.SessionOptions{Sampling: greedySampling, Drafter: st.gpuDraft}
	toks, acc, s := runSession(t, st.gpu, opt, prompt, len(want))
	if !slices.Equal(toks, want) {
		t.Fatalf("GPU speculative tokens %v\ntransformers %v", toks, want)
	}
	sim := gj.Sim.RoundsAccepted
	if len(acc) < len(sim) || !slices.Equal(acc[:len(sim)], sim) {
		t.Errorf("drafts accepted per round %v, the reference simulation %v", acc, sim)
	}
	checkSpecState(t, s, st.gpuDraft.BlockSize())
	opt.Drafter = st.cpuDraft
	_, cpuAcc, _ := runSession(t, st.cpu, opt, prompt, len(want))
	if !slices.Equal(acc, cpuAcc) {
		t.Errorf("accepted per round: GPU %v, CPU %v", acc, cpuAcc)
	}
	// 64 tokens: rounds, identical outputs.
	const n = 64
	opt.Drafter = st.gpuDraft
	spec64, _, s64 := runSession(t, st.gpu, opt, prompt, n)
	opt.Drafter = nil
	plain64, _, _ := runSession(t, st.gpu, opt, prompt, n)
	opt.Drafter = st.cpuDraft
	cpu64, _, c64 := runSession(t, st.cpu, opt, prompt, n)
	if !slices.Equal(spec64, plain64) || !slices.Equal(spec64, cpu64) {
		t.Fatalf("64 tokens: GPU speculative %v\nGPU plain %v\nCPU speculative %v", spec64, plain64, cpu64)
	}
	gs, cs := s64.Stats(), c64.Stats()
	tpr := float64(gs.RoundTokens) / float64(gs.Rounds)
	t.Logf("64 tokens: GPU %d rounds, %.2f tokens/round, histogram %v, accepted %v, draft %v + verify %v (device); CPU %d rounds, %.2f tokens/round, histogram %v",
		gs.Rounds, tpr, gs.Committed, gs.Accepted, gs.DraftTime, gs.VerifyTime, cs.Rounds, float64(cs.RoundTokens)/float64(cs.Rounds), cs.Committed)
	if tpr < 2 {
		t.Errorf("%.2f tokens per round < 2", tpr)
	}
	if !slices.Equal(gs.Committed, cs.Committed) || !slices.Equal(gs.Accepted, cs.Accepted) {
		t.Errorf("round histogram GPU %v (accepted %v), CPU %v (accepted %v)", gs.Committed, gs.Accepted, cs.Committed, cs.Accepted)
	}
	// Direct launches instead of the captured graph: the same rounds.
	d, err := st.gpu.NewDeviceSession(backend.SessionOptions{Capacity: len(prompt) + len(want) + 8, Sampling: greedySampling, Drafter: st.gpuDraft}, false)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	d.State().StopAt = uint32(len(want))
	if err := d.Prefill(t.Context(), prompt); err != nil {
		t.Fatal(err)
	}
	for d.State().Done == 0 {
		if err := d.Decode(t.Context(), 1); err != nil {
			t.Fatal(err)
		}
	}
	if got := drain(d); !slices.Equal(got, want) {
		t.Fatalf("direct launches: %v", got)
	}
	// Several rounds per call (one wait): the same tokens.
	m, err := st.gpu.NewSession(backend.SessionOptions{Capacity: len(prompt) + n + 8, Sampling: greedySampling, Drafter: st.gpuDraft})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	m.State().StopAt = n
	if err := m.Prefill(t.Context(), prompt); err != nil {
		t.Fatal(err)
	}
	if err := m.Decode(t.Context(), n); err != nil {
		t.Fatal(err)
	}
	if got := drain(m); !slices.Equal(got, spec64) {
		t.Fatalf("%d rounds queued in one call: %v", n, got)
	}
}

// TestSpecSampled: at temperature > 0 the point-mass rule commits, position by position, the
// token plain sampling with the same seed commits: the GPU's speculative output equals the GPU's
// plain output and the CPU's (plain and speculative), for several seeds and sampler settings,
// on the tiny pair and on golden a with a random head.
func TestSpecSampled(t *testing.T) {
	for _, kind := range emulatorKinds("pair-nvfp4", "a") {
		t.Run(kind, func(t *testing.T) {
			st := loadSpec(t, kind)
			prompt := specPrompt(t, kind)
			n := 40
			if emulatorEnabled() {
				n = 16
			}
			for i, sp := range []sample.Params{{Temperature: 0.8, TopP: 1, Seed: 1}, {Temperature: 0.6, TopK: 40, TopP: 0.9, Seed: 99},
				{Temperature: 1.2, TopK: 0, TopP: 0.95, Seed: 1 << 33}} {
				opt := backend.SessionOptions{Sampling: sp, Drafter: st.gpuDraft}
				spec, _, s := runSession(t, st.gpu, opt, prompt, n)
				opt.Drafter = nil
				plain, _, _ := runSession(t, st.gpu, opt, prompt, n)
				cpuPlain, _, _ := runSession(t, st.cpu, opt, prompt, n)
				opt.Drafter = st.cpuDraft
				cpuSpec, _, _ := runSession(t, st.cpu, opt, prompt, n)
				if !slices.Equal(spec, plain) || !slices.Equal(spec, cpuPlain) || !slices.Equal(spec, cpuSpec) {
					t.Fatalf("sampler %+v: GPU speculative %v\nGPU plain %v\nCPU plain %v\nCPU speculative %v", sp, spec, plain, cpuPlain, cpuSpec)
				}
				gs := s.Stats()
				t.Logf("sampler %d %+v: %d tokens identical; GPU %d rounds, %.2f tokens/round", i, sp, len(spec), gs.Rounds, float64(gs.RoundTokens)/float64(max(gs.Rounds, 1)))
			}
		})
	}
}

// TestSpecStops: EOS inside a round's accepted prefix, StopAt inside a round, the fallback to
// single rows near the end of the context and then a full context, the confidence stop, and a
// full ring: the GPU's speculative session ends with the tokens and step state (Position, Step
// from the prefill's end, Done, Error, RingHead, Anchor, DraftContext) of the CPU's.
func TestSpecStops(t *testing.T) {
	kind := emulatorKinds("pair-bf16")[0]
	st := loadSpec(t, kind)
	prompt := specPrompt(t, kind)
	// The EOS of the first case: the first token of the greedy continuation that does not occur
	// before it, from the 6th on (inside a round when drafts are accepted).
	cont, _, _ := runSession(t, st.cpu, backend.SessionOptions{Sampling: greedySampling}, prompt, 16)
	eos := cont[len(cont)-1]
	for i := 6; i < len(cont); i++ {
		if !slices.Contains(cont[:i], cont[i]) {
			eos = cont[i]
			break
		}
	}
	cases := []struct {
		name   string
		opt    backend.SessionOptions
		stopAt uint32
		decode []int
		drain  bool
	}{
		{"eos", backend.SessionOptions{Capacity: len(prompt) + 48, EOS: []int32{eos}}, 0, []int{2, 20}, true},
		{"stop-at", backend.SessionOptions{Capacity: len(prompt) + 48}, 5, []int{1, 20}, true},
		{"context", backend.SessionOptions{Capacity: len(prompt) + 20}, 0, []int{4, 30}, true},
		{"confidence", backend.SessionOptions{Capacity: len(prompt) + 48, ConfidenceStop: 0.5}, 24, []int{40}, true},
		{"ring", backend.SessionOptions{Capacity: len(prompt) + 48, RingCapacity: 6}, 0, []int{10}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var toks [2][]int32
			var states [2]backend.StepState
			var prefillSteps [2]uint32
			var stats [2]backend.RoundStats
			for i, tg := range []backend.Target{st.gpu, st.cpu} {
				opt := c.opt
				opt.Sampling = greedySampling
				opt.Drafter = st.gpuDraft
				if i == 1 {
					opt.Drafter = st.cpuDraft
				}
				s, err := tg.NewSession(opt)
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
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
				states[i] = *s.State()
				stats[i] = s.Stats()
			}
			g, w := states[0], states[1]
			if !slices.Equal(toks[0], toks[1]) || g.Position != w.Position || g.Step-prefillSteps[0] != w.Step-prefillSteps[1] ||
				g.Done != w.Done || g.Error != w.Error || g.RingHead != w.RingHead || g.Anchor != w.Anchor || g.DraftContext != w.DraftContext {
				t.Fatalf("GPU tokens %v state %+v\nCPU tokens %v state %+v", toks[0], g, toks[1], w)
			}
			if g.Done != 1 {
				t.Fatalf("not done: %+v", g)
			}
			if stats[0].Rounds != stats[1].Rounds || stats[0].PlainSteps != stats[1].PlainSteps || !slices.Equal(stats[0].Drafted, stats[1].Drafted) {
				t.Errorf("GPU stats %+v\nCPU stats %+v", stats[0], stats[1])
			}
			if c.name == "confidence" && stats[0].Drafted[len(stats[0].Drafted)-1] == stats[0].Rounds {
				t.Errorf("the confidence stop shortened no round: %+v", stats[0])
			}
			t.Logf("%s: %d tokens, error %d, position %d; %d rounds, %d single rows, drafted %v", c.name, len(toks[0]), g.Error, g.Position,
				stats[0].Rounds, stats[0].PlainSteps, stats[0].Drafted)
		})
	}
}

// TestSpecSnapshot: prefix checkpoints of GPU sessions with the trained tiny pair's drafter
// (runtime/backend/gpu/snapshot.go): a state saved after a no-sample prefill of part of the
// prompt, and one saved after two speculative rounds, restored into new sessions with the
// drafter (its context rows restored too) go on to transformers' greedy tokens, as the
// uninterrupted speculative run does (TestSpecTinyPair); a session without a drafter takes
// the drafter's snapshot; a drafter session refuses a snapshot without context rows.
func TestSpecSnapshot(t *testing.T) {
	gdir := filepath.Join("..", "..", "..", "testdata", "goldens", "tinypair")
	_, i32 := goldentest.ReadTensors(t, filepath.Join(gdir, "goldens.safetensors"))
	st := loadSpec(t, "pair-bf16")
	prompt, want := i32["prompt"], i32["greedy"]
	n := len(want)
	opt := backend.SessionOptions{Capacity: len(prompt) + n + 16, Sampling: greedySampling, Drafter: st.gpuDraft}
	open := func(opt backend.SessionOptions) backend.Session {
		s, err := st.gpu.NewSession(opt)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	// goOn prefills rest and decodes until the ring holds n tokens in all (have already out).
	goOn := func(s backend.Session, rest []int32, have, n int) []int32 {
		t.Helper()
		ss := s.State()
		ss.StopAt = ss.RingHead + uint32(n-have)
		if err := s.Prefill(t.Context(), rest); err != nil {
			t.Fatal(err)
		}
		for ss.Done == 0 {
			if err := s.Decode(t.Context(), 1); err != nil {
				t.Fatal(err)
			}
		}
		if ss.Error != 0 {
			t.Fatalf("session error %d", ss.Error)
		}
		return drain(s)
	}
	k := len(prompt) - 5
	a := open(opt)
	if err := a.(backend.NoSamplePrefiller).PrefillNoSample(t.Context(), prompt[:k]); err != nil {
		t.Fatal(err)
	}
	sn, err := a.(backend.Snapshotter).Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if got := goOn(a, prompt[k:], 0, n); !slices.Equal(got, want) {
		t.Fatalf("after a no-sample prefill of %d rows: %v, want %v", k, got, want)
	}
	// The drafter's context is checked through its work: with it restored, the restored
	// session's rounds accept exactly the drafts a's did (tokens alone would not show a wrong
	// context: greedy rounds emit the target's tokens whatever the drafts).
	counts := func(st backend.RoundStats) string {
		return fmt.Sprint(st.Rounds, st.PlainSteps, st.Committed, st.Drafted, st.Accepted)
	}
	for _, o := range []backend.SessionOptions{opt, {Capacity: opt.Capacity, Sampling: greedySampling}} {
		s := open(o)
		if err := s.(backend.Snapshotter).Restore(sn); err != nil {
			t.Fatal(err)
		}
		if st := s.State(); o.Drafter != nil && (st.DraftContext != st.Position || st.Position != uint32(k)) {
			t.Fatalf("after Restore: position %d, draft context %d; want %d, %d", st.Position, st.DraftContext, k, k)
		}
		if got := goOn(s, prompt[k:], 0, n); !slices.Equal(got, want) {
			t.Fatalf("restored (drafter %v): %v, want %v", o.Drafter != nil, got, want)
		}
		if o.Drafter != nil && counts(s.Stats()) != counts(a.Stats()) || a.Stats().Rounds == 0 {
			t.Fatalf("restored session's rounds %s, the uninterrupted session's %s", counts(s.Stats()), counts(a.Stats()))
		}
	}
	// After two rounds: the last token out is the anchor, fed again after Restore.
	m := open(opt)
	ms := m.State()
	if err := m.Prefill(t.Context(), prompt); err != nil {
		t.Fatal(err)
	}
	if err := m.Decode(t.Context(), 2); err != nil {
		t.Fatal(err)
	}
	got := drain(m)
	if len(got) < 3 || ms.Done != 0 || !slices.Equal(got, want[:len(got)]) {
		t.Fatalf("two rounds: %v (done %d), want a prefix of %v", got, ms.Done, want)
	}
	sm, err := m.(backend.Snapshotter).Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	r := open(opt)
	if err := r.(backend.Snapshotter).Restore(sm); err != nil {
		t.Fatal(err)
	}
	if tail := goOn(r, got[len(got)-1:], len(got), n); !slices.Equal(append(slices.Clone(got), tail...), want) {
		t.Fatalf("restored after two rounds: %v + %v, want %v", got, tail, want)
	}
	// A snapshot without context rows into a session with the drafter: refused.
	p := open(backend.SessionOptions{Capacity: opt.Capacity, Sampling: greedySampling})
	if err := p.(backend.NoSamplePrefiller).PrefillNoSample(t.Context(), prompt[:k]); err != nil {
		t.Fatal(err)
	}
	sp, err := p.(backend.Snapshotter).Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if err := open(opt).(backend.Snapshotter).Restore(sp); err == nil || !strings.Contains(err.Error(), "no drafter context") {
		t.Fatalf("restore of a snapshot without context rows into a drafter session: %v", err)
	}
}

// TestDraftMatrices: LoadDraft rewrites the draft head's matrices as LoadTarget does the
// target's (the MMA layout where its copy fits and splits on the device, else fragment-major
// where that copy exists, else the BLM layout; LITHOS_CUDA_MMA=0: no MMA layout), and each one
// on the device × 1 and 7 random rows (the Markov and confidence heads' and the block's row
// counts) equals the CPU's product of the bundle's packed bytes within the float32 summation
// bound. On the tiny pair's heads in BF16 and NVFP4 (the Markov head's w2 with K = 64, the
// confidence head with N = 1) and golden a's random NVFP4 head.
func TestDraftMatrices(t *testing.T) {
	for _, kind := range []string{"pair-bf16", "pair-nvfp4", "a"} {
		t.Run(kind, func(t *testing.T) {
			st := loadSpec(t, kind)
			e := st.e
			e.mma = st.gpu.MMA
			d, ok := st.gpuDraft.(*gpu.DSpark)
			if !ok {
				t.Fatalf("draft %T", st.gpuDraft)
			}
			w := st.b.Weights()
			fl, _ := Runtime(e.d, e.ks).(gpu.FragmentLayouter)
			frag := fl != nil && fl.FragmentLayout()
			layouts := map[uint32]int{}
			for _, m := range d.Matrices() {
				bt, ok := st.b.Tensor(m.Name)
				if !ok {
					t.Fatalf("no tensor %s", m.Name)
				}
				orig := w[bt.Offset : bt.Offset+m.Geometry.TotalBytes]
				want := uint32(kernels.BLMLayoutBLM)
				if st.gpu.MMA.SMs > 0 {
					if _, err := kernels.NewBLMXParams(m.Geometry, 1, kernels.EpiStore, st.gpu.MMA); err == nil && kernels.BLMXCopyBytes(m.Geometry) > 0 && kernels.BLMXCopyBytes(m.Geometry) <= m.Geometry.TotalBytes {
						want = kernels.BLMLayoutMMA
					}
				}
				if _, err := kernels.BLMFragmentMajor(m.Geometry, orig); want == kernels.BLMLayoutBLM && err == nil && frag {
					want = kernels.BLMLayoutFragment
				}
				if m.Layout != want {
					t.Fatalf("%s (%s [%d, %d]): layout %d, want %d", m.Name, m.Geometry.Format, m.Geometry.N, m.Geometry.K, m.Layout, want)
				}
				layouts[m.Layout]++
				p := cpuPacked(t, st.b, m.Name)
				n, k := int(m.Geometry.N), int(m.Geometry.K)
				for _, rows := range []int{1, 7} {
					x := e.randn(rows*k, 1)
					y := e.poisoned(rows * n)
					e.t = t
					e.blm(m, rows, kernels.EpiStore, e.f32(x), y)
					got := e.read(y, rows*n)
					ref, tol := packedRef(t, p, seq(n), x, rows)
					what := fmt.Sprintf("%s (%s [%d, %d], layout %d) × %d rows", m.Name, m.Geometry.Format, n, k, m.Layout, rows)
					check(t, what, got, f32s(ref), func(i int) float64 { return tol[i] })
					// The drafter's programs also add into wider rows (o_proj, down_proj and the
					// Markov head's EpiAdd; project's stacks side by side): the same product
					// added onto y0 in rows of n + 3, the 3 columns past n left as they were.
					ld := n + 3
					y0 := e.randn(rows*ld, 1)
					yb := e.f32(y0)
					e.blmLd(m, rows, kernels.EpiAdd, e.f32(x), yb, ld)
					gotA := e.read(yb, rows*ld)
					wantA, tolA := make([]float32, rows*ld), make([]float64, rows*ld)
					for r := 0; r < rows; r++ {
						for j := 0; j < ld; j++ {
							i := r*ld + j
							wantA[i] = y0[i]
							if j < n {
								wantA[i] = float32(float64(y0[i]) + ref[r*n+j])
								tolA[i] = tol[r*n+j] + 0x1p-23*math.Abs(float64(y0[i])+ref[r*n+j])
							}
						}
					}
					check(t, what+", added with ld "+fmt.Sprint(ld), gotA, wantA, func(i int) float64 { return tolA[i] })
				}
			}
			t.Logf("%d draft matrices, by layout (0 BLM, 1 fragment-major, 2 MMA): %v", len(d.Matrices()), layouts)
			if kind != "pair-bf16" && st.gpu.MMA.SMs > 0 && layouts[kernels.BLMLayoutMMA] == 0 {
				t.Errorf("no draft matrix of the NVFP4 head in the MMA layout on a device that reads it")
			}
		})
	}
}
