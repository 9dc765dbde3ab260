package cpu

import (
	"context"
	"io"
	"lithos/runtime/model/goldentest"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"lithos/pack"
	"lithos/runtime/bundle"
	"lithos/runtime/model"
)

// The goldens of runtime/model (testdata/goldens/qwen35-{a,b}: transformers' FP32 outputs on
// the exactly dequantized weights of small ModelOpt-mixed checkpoints, made by
// tools/qwen35_goldens.py on the GPU machine), checked here on the packed path: the test packs
// each checkpoint into a bundle with lithos/pack (the real packer), maps it, builds the target
// with LoadTarget (every matrix read packed) and requires the bar: max relative logit
// error ≤ 1e-4 and identical greedy tokens.

const goldenTolerance = 1e-4

func goldenDir(name string) string {
	return filepath.Join("..", "..", "..", "testdata", "goldens", "qwen35-"+name)
}

var (
	packOnce  = map[string]*sync.Once{"a": {}, "b": {}}
	packed    = map[string]string{}
	packErr   = map[string]error{}
	packMu    sync.Mutex
	packTemps []string
)

// TestMain removes the bundles the tests packed.
func TestMain(m *testing.M) {
	code := m.Run()
	for _, d := range packTemps {
		os.RemoveAll(d)
	}
	os.Exit(code)
}

// goldenBundle packs golden checkpoint name once per test binary and returns the bundle dir.
func goldenBundle(t testing.TB, name string) string {
	t.Helper()
	packMu.Lock()
	once := packOnce[name]
	packMu.Unlock()
	once.Do(func() {
		tmp, err := os.MkdirTemp("", "lithos-cpu-golden-")
		if err != nil {
			packErr[name] = err
			return
		}
		packMu.Lock()
		packTemps = append(packTemps, tmp)
		packMu.Unlock()
		out := filepath.Join(tmp, "qwen35-"+name+".lithos")
		_, err = pack.Build(context.Background(), pack.Options{Target: goldenDir(name), Out: out, Workers: 2,
			ToolVersion: "test", Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
		packed[name], packErr[name] = out, err
	})
	if err := packErr[name]; err != nil {
		t.Fatalf("pack %s: %v", goldenDir(name), err)
	}
	return packed[name]
}

// openGoldenTarget packs, opens and loads golden model name; the bundle is closed at cleanup.
func openGoldenTarget(t testing.TB, name string) (*bundle.Bundle, *model.Model) {
	t.Helper()
	b, err := bundle.Open(goldenBundle(t, name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	m, err := LoadTarget(b)
	if err != nil {
		t.Fatal(err)
	}
	return b, m
}

type goldens struct {
	f32 map[string][]float32
	i32 map[string][]int32
}

func readGoldens(t testing.TB, name string) *goldens {
	t.Helper()
	path := filepath.Join(goldenDir(name), "goldens.safetensors")
	g := &goldens{}
	g.f32, g.i32 = goldentest.ReadTensors(t, path)
	return g
}

func (g *goldens) ints(t testing.TB, k string) []int32 {
	t.Helper()
	v, ok := g.i32[k]
	if !ok {
		t.Fatalf("goldens.safetensors has no %s", k)
	}
	return v
}

func (g *goldens) floats(t testing.TB, k string) []float32 {
	t.Helper()
	v, ok := g.f32[k]
	if !ok {
		t.Fatalf("goldens.safetensors has no %s", k)
	}
	return v
}

// relErr returns max|got − want| / max|want| and the index of the largest difference.
func relErr(got, want []float32) (float64, int) {
	if len(got) != len(want) {
		return math.Inf(1), -1
	}
	var num, den float64
	at := 0
	for i := range want {
		if d := math.Abs(float64(got[i]) - float64(want[i])); d > num || math.IsNaN(d) {
			num, at = d, i
		}
		den = max(den, math.Abs(float64(want[i])))
	}
	return num / den, at
}

func rowsAt(all []float32, vocab int, positions []int32) []float32 {
	var out []float32
	for _, p := range positions {
		out = append(out, all[int(p)*vocab:(int(p)+1)*vocab]...)
	}
	return out
}

func TestGoldensFromBundle(t *testing.T) {
	for _, name := range []string{"a", "b"} {
		t.Run(name, func(t *testing.T) {
			_, m := openGoldenTarget(t, name)
			g := readGoldens(t, name)
			ctx := context.Background()
			vocab := m.Cfg.Vocab
			for _, T := range []int{1, 11, 200} {
				ts := strconv.Itoa(T)
				prompt := g.ints(t, "prompt."+ts)
				positions := g.ints(t, "positions."+ts)
				want := g.floats(t, "logits."+ts)
				st, err := m.NewState(T + 40)
				if err != nil {
					t.Fatal(err)
				}
				all, err := m.Forward(ctx, st, prompt, true)
				if err != nil {
					t.Fatal(err)
				}
				e, at := relErr(rowsAt(all, vocab, positions), want)
				t.Logf("prompt %d: max relative logit error %.3g (row %d)", T, e, positions[max(at, 0)/vocab])
				if e > goldenTolerance {
					t.Errorf("prompt %d: max relative logit error %.3g, want ≤ %g", T, e, goldenTolerance)
				}
				if T > 64 { // prefill in chunks crossing the 64-row GDN chunk
					for _, chunk := range []int{64, 48} {
						pst, _ := m.NewState(T)
						last, err := m.Prefill(ctx, pst, prompt, chunk)
						if err != nil {
							t.Fatal(err)
						}
						if e, _ := relErr(last, want[len(want)-vocab:]); e > goldenTolerance {
							t.Errorf("prompt %d in chunks of %d: last-row relative error %.3g", T, chunk, e)
						}
					}
				}
				// Greedy continuation, one decode row at a time.
				greedy := g.ints(t, "greedy."+ts)
				stepLogits := g.f32["greedy_logits."+ts]
				last := all[(T-1)*vocab:]
				var decoded [][]float32
				for i, wantTok := range greedy {
					tok := int32(model.Argmax(last))
					if stepLogits != nil {
						if e, _ := relErr(last, stepLogits[i*vocab:(i+1)*vocab]); e > goldenTolerance {
							t.Errorf("prompt %d, greedy step %d: logits relative error %.3g", T, i, e)
						}
					}
					if tok != wantTok {
						t.Fatalf("prompt %d, greedy step %d: token %d, transformers %d; tokens so far %v", T, i, tok, wantTok, greedy[:i])
					}
					if last, err = m.Forward(ctx, st, []int32{tok}, false); err != nil {
						t.Fatal(err)
					}
					decoded = append(decoded, last)
				}
				// The same continuation as multi-row steps (the verify shape: 1–8 rows per step,
				// the decode-once kernels) agrees with the one-row steps.
				vst, _ := m.NewState(T + 40)
				if _, err := m.Forward(ctx, vst, prompt, false); err != nil {
					t.Fatal(err)
				}
				for i := 0; i < len(greedy)-1; {
					n := min(1+i%8, len(greedy)-1-i)
					rows, err := m.Forward(ctx, vst, greedy[i:i+n], true)
					if err != nil {
						t.Fatal(err)
					}
					for r := 0; r < n; r++ {
						if e, _ := relErr(rows[r*vocab:(r+1)*vocab], decoded[i+r]); e > 1e-5 {
							t.Errorf("prompt %d: %d-row step, row %d (token %d): relative error %.3g against one-row decode", T, n, r, i+r, e)
						}
					}
					i += n
				}
			}
		})
	}
}

// TestPackedMatchesDense compares the packed target with runtime/model's dense float32 model
// of the same checkpoint (LoadCheckpoint) on the 11-token prompt: they differ only in float32
// rounding.
func TestPackedMatchesDense(t *testing.T) {
	_, m := openGoldenTarget(t, "b")
	dense, err := model.LoadCheckpoint(context.Background(), goldenDir("b"), nil)
	if err != nil {
		t.Fatal(err)
	}
	prompt := readGoldens(t, "b").ints(t, "prompt.11")
	ctx := context.Background()
	var out [2][]float32
	for i, mm := range []*model.Model{m, dense} {
		st, _ := mm.NewState(16)
		if out[i], err = mm.Forward(ctx, st, prompt, true); err != nil {
			t.Fatal(err)
		}
	}
	if e, _ := relErr(out[0], out[1]); e > 1e-5 {
		t.Errorf("packed vs dense logits: relative error %.3g", e)
	} else {
		t.Logf("packed vs dense logits: relative error %.3g", e)
	}
}
