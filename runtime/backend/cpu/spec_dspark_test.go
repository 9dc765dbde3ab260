package cpu

import (
	"math/rand/v2"
	"slices"
	"testing"

	"lithos/runtime/backend"
	"lithos/runtime/draft"
	"lithos/runtime/draft/drafttest"
	"lithos/runtime/model"
	"lithos/runtime/model/modeltest"
	"lithos/runtime/sample"
)

// dsparkTargetConfig is a random hybrid target the tiny DSpark head of testdata/dspark fits:
// vocabulary 1000, hidden 128, 8 layers (its num_target_layers; its taps are layers 1, 3, 5).
func dsparkTargetConfig() model.Config {
	return model.Config{
		Vocab: 1000, Hidden: 128, Intermediate: 256,
		Layers: []model.LayerKind{model.GDN, model.GDN, model.GDN, model.Attention, model.GDN, model.GDN, model.GDN, model.Attention},
		Heads:  2, KVHeads: 1, HeadDim: 64, RotaryDim: 16, RopeTheta: 1e6,
		KHeads: 1, VHeads: 2, KDim: 32, VDim: 32, ConvKernel: 4, RMSEps: 1e-6,
	}
}

// TestDSparkRoundsLossless: random target/draft pairs — two random targets, each with the
// tiny DSpark head in its BF16 weights and in its NVFP4 re-export (runtime/draft's graph
// through the DSpark adapter, with its Markov and confidence heads) — and three prompts each:
// the speculative output is token for token the plain decode's, greedy (and at temperature 0.8,
// point-mass rule, same seed, for the 9-token prompt); the confidence telemetry is the head's.
func TestDSparkRoundsLossless(t *testing.T) {
	cfg := drafttest.Config(t)
	rng := rand.New(rand.NewPCG(51, 51))
	prompts := [][]int32{{7}, randomIDs(rng, 9, 1000), randomIDs(rng, 40, 1000)}
	for _, variant := range drafttest.Variants {
		w := drafttest.Weights(t, cfg, variant)
		for tseed := uint64(1); tseed <= 2; tseed++ {
			m, err := modeltest.Random(dsparkTargetConfig(), tseed, 2)
			if err != nil {
				t.Fatal(err)
			}
			d, err := draft.New(cfg, w, m.W.Embed, m.W.LMHead)
			if err != nil {
				t.Fatal(err)
			}
			tg := &Target{M: m}
			var rounds, accepted, confRounds int
			for pi, prompt := range prompts {
				params := []sample.Params{{TopP: 1}}
				if pi == 1 {
					params = append(params, sample.Params{Temperature: 0.8, TopP: 1, Seed: tseed})
				}
				for _, smp := range params {
					plain, _, _ := generate(t, tg, backend.SessionOptions{Capacity: 96, Sampling: smp}, prompt, 25)
					got, s, _ := generate(t, tg, backend.SessionOptions{Capacity: 96, Sampling: smp, Drafter: DSpark{D: d}}, prompt, 25)
					if !slices.Equal(got, plain) {
						t.Fatalf("%s head, target %d, prompt %d, %+v: speculative %v, plain %v", variant, tseed, pi, smp, got, plain)
					}
					st := s.Stats()
					rounds += st.Rounds
					accepted += st.RoundTokens - st.Rounds
					confRounds += st.ConfidenceRounds
					for k, c := range st.ConfidenceSum {
						if mean := c / float64(st.ConfidenceRounds); !(mean > 0 && mean < 1) {
							t.Fatalf("mean confidence of draft %d: %v", k, mean)
						}
					}
				}
			}
			if rounds == 0 || confRounds != rounds {
				t.Fatalf("%d rounds, %d with confidences", rounds, confRounds)
			}
			t.Logf("%s head, target %d: %d rounds, %d drafts accepted", variant, tseed, rounds, accepted)
		}
	}
}

func randomIDs(rng *rand.Rand, n, vocab int) []int32 {
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32(rng.IntN(vocab))
	}
	return ids
}
