package generate

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"lithos/manifests"
	"lithos/pack"
	"lithos/runtime/backend"
	"lithos/runtime/generate/gentest"
	"lithos/runtime/model/goldentest"
	"lithos/runtime/sample"
)

// draftFixture packs golden target name ("a" or "b") with a random DSpark head (gentest.WriteDraft,
// seed) in format and returns the bundle directory.
func draftFixture(t *testing.T, name, format string, seed uint64) string {
	t.Helper()
	vocab, layers := 608, 4
	if name == "a" {
		vocab, layers = 1024, 8
	}
	tmp := t.TempDir()
	d := filepath.Join(tmp, "draft")
	if err := gentest.WriteDraft(d, gentest.DraftFor(vocab, 256, layers), seed); err != nil {
		t.Fatal(err)
	}
	dir, err := gentest.Bundle(context.Background(), tmp, gentest.Options{Golden: name, Draft: d, DraftFormat: format, NoTokenizer: name == "a"})
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestSpeculativeMatchesGoldens: the golden targets packed with random DSpark heads (b with a
// BF16 head, a with the NVFP4 re-export of one) load with their drafter, and greedy generation
// with it is token for token transformers' greedy continuation and the NoDraft output, for the
// 1-, 11- and 200-token prompts; the result carries the round telemetry (null without drafting).
func TestSpeculativeMatchesGoldens(t *testing.T) {
	for _, c := range []struct {
		golden, format string
		seed           uint64
	}{{"b", pack.DraftBF16, 1}, {"a", pack.DraftNVFP4, 2}} {
		t.Run(c.golden+"/"+c.format, func(t *testing.T) {
			r, err := OpenWith(context.Background(), draftFixture(t, c.golden, c.format, c.seed), Options{Log: quiet()})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if r.Draft == nil || r.Draft.BlockSize() != 7 {
				t.Fatalf("draft head not loaded: %v", r.Draft)
			}
			i32, _, err := gentest.Goldens(c.golden)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range []string{"1", "11", "200"} {
				req := Request{PromptIDs: i32["prompt."+p], MaxTokens: 32, Sampling: greedy}
				spec, err := r.Generate(context.Background(), req)
				if err != nil {
					t.Fatal(err)
				}
				req.NoDraft = true
				plain, err := r.Generate(context.Background(), req)
				if err != nil {
					t.Fatal(err)
				}
				if want := i32["greedy."+p]; !slices.Equal(spec.Tokens, want) || !slices.Equal(plain.Tokens, want) {
					t.Fatalf("prompt %s: speculative %v, no-draft %v, transformers %v", p, spec.Tokens, plain.Tokens, want)
				}
				s := spec.Speculative
				if s == nil || plain.Speculative != nil {
					t.Fatalf("telemetry: speculative %+v, no-draft %+v", s, plain.Speculative)
				}
				sum := 0
				for _, h := range s.Histogram {
					sum += h
				}
				if s.Rounds == 0 || s.Rounds+s.PlainSteps != spec.Rounds || sum != s.Rounds || len(s.Histogram) != 8 ||
					len(s.Acceptance) != 7 || len(s.Confidence) != 7 || s.DraftSampling != "argmax" || s.BlockSize != 7 ||
					!(s.TokensPerRound >= 1 && s.TokensPerRound <= 8) || !(s.VerifyMSPerRound > 0 && s.DraftMSPerRound > 0) {
					t.Fatalf("prompt %s: telemetry %+v (result rounds %d)", p, s, spec.Rounds)
				}
				t.Logf("prompt %s: %d rounds, %.2f tokens/round, acceptance %.2f, draft %.2f ms, verify %.2f ms per round",
					p, s.Rounds, s.TokensPerRound, s.Acceptance, s.DraftMSPerRound, s.VerifyMSPerRound)
			}
		})
	}
}

// TestSpeculativeSampledAndJSON: at temperature 0.9 the point-mass rule gives the NoDraft
// tokens for the same seed; sampled drafts run and report "sample"; the telemetry survives a
// JSON round trip under its documented keys.
func TestSpeculativeSampledAndJSON(t *testing.T) {
	r, err := OpenWith(context.Background(), draftFixture(t, "b", pack.DraftNVFP4, 3), Options{Log: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	prompt := golden(t)["prompt.11"]
	smp := sample.Params{Temperature: 0.9, TopP: 0.95, Seed: 17}
	spec, err := r.Generate(context.Background(), Request{PromptIDs: prompt, MaxTokens: 24, Sampling: smp})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := r.Generate(context.Background(), Request{PromptIDs: prompt, MaxTokens: 24, Sampling: smp, NoDraft: true})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(spec.Tokens, plain.Tokens) {
		t.Fatalf("point-mass rule: %v, no-draft %v", spec.Tokens, plain.Tokens)
	}
	sampled, err := r.Generate(context.Background(), Request{PromptIDs: prompt, MaxTokens: 24, Sampling: smp, DraftSampling: "sample"})
	if err != nil {
		t.Fatal(err)
	}
	if len(sampled.Tokens) != 24 || sampled.Speculative.DraftSampling != "sample" {
		t.Fatalf("sampled drafts: %+v", sampled)
	}
	if _, err := r.Generate(context.Background(), Request{PromptIDs: prompt, MaxTokens: 4, Sampling: smp, DraftSampling: "best"}); err == nil || !strings.Contains(err.Error(), "draft sampling") {
		t.Fatalf("unknown draft sampling: %v", err)
	}
	data, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]map[string]any
	var top map[string]json.RawMessage
	json.Unmarshal(data, &top)
	json.Unmarshal([]byte(`{"s":`+string(top["speculative"])+`}`), &m)
	for _, k := range []string{"draft_sampling", "block_size", "rounds", "plain_steps", "tokens_per_round", "tokens_per_round_histogram",
		"acceptance_by_position", "confidence_by_position", "draft_ms_per_round", "verify_ms_per_round"} {
		if _, ok := m["s"][k]; !ok {
			t.Errorf("speculative JSON has no %q: %s", k, top["speculative"])
		}
	}
}

// TestBadDraftRefusedNoDraftWorks: a bundle whose draft head does not fit the target (its
// manifest config edited to tap a layer the target lacks, or to another vocabulary or hidden
// size) is refused at load with the field named; NoDraft opens it and generates.
func TestBadDraftRefusedNoDraftWorks(t *testing.T) {
	dir := draftFixture(t, "b", pack.DraftBF16, 4)
	path := filepath.Join(dir, "manifest.json")
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		key  string
		val  any
		want string
	}{
		{"target_layer_ids", []int{0, 9}, "target_layer_ids"},
		{"vocab_size", 1000, "vocab_size"},
		{"hidden_size", 128, "hidden_size"},
	} {
		var man manifests.Bundle
		if err := json.Unmarshal(orig, &man); err != nil {
			t.Fatal(err)
		}
		var cfg map[string]any
		json.Unmarshal(man.Draft.Config, &cfg)
		if c.key == "target_layer_ids" {
			cfg["dflash_config"].(map[string]any)[c.key] = c.val
		} else {
			cfg[c.key] = c.val
		}
		man.Draft.Config, _ = json.Marshal(cfg)
		data, _ := json.MarshalIndent(&man, "", "  ")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := OpenWith(context.Background(), dir, Options{Log: quiet()}); err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "--no-draft") {
			t.Errorf("%s = %v: %v", c.key, c.val, err)
		}
		r, err := OpenWith(context.Background(), dir, Options{NoDraft: true, Log: quiet()})
		if err != nil {
			t.Fatalf("%s = %v, NoDraft: %v", c.key, c.val, err)
		}
		res, err := r.Generate(context.Background(), Request{PromptIDs: golden(t)["prompt.11"], MaxTokens: 8, Sampling: greedy})
		r.Close()
		if err != nil || !slices.Equal(res.Tokens, golden(t)["greedy.11"][:8]) || res.Speculative != nil || r.Draft != nil {
			t.Fatalf("%s = %v, NoDraft: %+v, %v", c.key, c.val, res, err)
		}
	}
}

// TestTinyPairRounds runs the trained tiny pair (testdata/hub/lithos-test/tiny-coder-NVFP4 and
// its DSpark head tiny-coder-DSpark, packed with the head in BF16) on the held-out prompt of
// testdata/goldens/tinypair: the speculative greedy output is the 32 tokens transformers
// computed, and the drafts accepted in each of the first 9 rounds are those of the round
// simulation tools/tinypair/run.py made with tools/dspark_ref.py and transformers
// (goldens.json rounds_over_32_tokens_bf16_cpu.rounds_accepted: the rounds whose 8 rows lie
// within the 32 golden tokens).
func TestTinyPairRounds(t *testing.T) {
	root := filepath.Join("..", "..")
	gdir := filepath.Join(root, "testdata", "goldens", "tinypair")
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
		t.Fatalf("goldens.json: %v (%d rounds)", err, len(gj.Sim.RoundsAccepted))
	}
	hub := filepath.Join(root, "testdata", "hub", "lithos-test")
	out := filepath.Join(t.TempDir(), "pair.lithos")
	if _, err := pack.Build(context.Background(), pack.Options{Target: filepath.Join(hub, "tiny-coder-NVFP4"), Draft: filepath.Join(hub, "tiny-coder-DSpark"),
		DraftFormat: pack.DraftBF16, Out: out, Workers: 2, ToolVersion: "test", Log: quiet()}); err != nil {
		t.Fatal(err)
	}
	r, err := OpenWith(context.Background(), out, Options{Log: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	prompt, want := i32["prompt"], i32["greedy"]
	s, err := r.Target.NewSession(backend.SessionOptions{Capacity: len(prompt) + 40, Sampling: greedy, Drafter: r.Draft})
	if err != nil {
		t.Fatal(err)
	}
	ss := s.State()
	ss.StopAt = uint32(len(want))
	ctx := context.Background()
	if err := s.Prefill(ctx, prompt); err != nil {
		t.Fatal(err)
	}
	var accepted []uint32
	for ss.Done == 0 {
		if err := s.Decode(ctx, 1); err != nil {
			t.Fatal(err)
		}
		accepted = append(accepted, ss.Accepted)
	}
	if got := s.Ring().Drain(ss, nil); !slices.Equal(got, want) {
		t.Fatalf("tokens %v, transformers %v", got, want)
	}
	sim := gj.Sim.RoundsAccepted
	if len(accepted) < len(sim) || !slices.Equal(accepted[:len(sim)], sim) {
		t.Fatalf("drafts accepted per round %v, the reference simulation %v", accepted, sim)
	}
	st := s.Stats()
	t.Logf("%d rounds, accepted per round %v, %.2f tokens/round", st.Rounds, accepted, float64(st.RoundTokens)/float64(st.Rounds))
}
