package model

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"lithos/runtime/model/goldentest"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Goldens from HF transformers (tools/qwen35_goldens.py, run on the GPU machine): small
// random Qwen3.5 hybrid models quantized in the ModelOpt mixed layout, and transformers'
// FP32 outputs on the exactly dequantized weights.

const goldenCommand = goldentest.Command

// goldenTolerance is the bar: max|x − y| / max|y| over a prompt's stored logits.
const goldenTolerance = 1e-4

var goldenModels = []string{"a", "b"}

func goldenDir(name string) string {
	return filepath.Join("..", "..", "testdata", "goldens", "qwen35-"+name)
}

type goldenMeta struct {
	Versions      map[string]string    `json:"versions"`
	Prompts       map[string][]int32   `json:"prompts"`
	DequantSHA256 map[string]string    `json:"dequant_sha256"`
	GreedyMargins map[string][]float64 `json:"greedy_margins"`
}

type goldenSet struct {
	meta goldenMeta
	f32  map[string][]float32
	i32  map[string][]int32
}

// readGolden reads a model's goldens.json and goldens.safetensors, failing (not skipping)
// with the command that makes them when they are missing.
func readGolden(t testing.TB, dir string) *goldenSet {
	t.Helper()
	for _, f := range []string{"config.json", "hf_quant_config.json", "model.safetensors", "goldens.safetensors", "goldens.json"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Fatalf("golden file %s is missing (%v): run `%s` on the GPU machine (PyTorch + transformers), from the repository root", filepath.Join(dir, f), err, goldenCommand)
		}
	}
	g := &goldenSet{f32: map[string][]float32{}, i32: map[string][]int32{}}
	js, err := os.ReadFile(filepath.Join(dir, "goldens.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(js, &g.meta); err != nil {
		t.Fatalf("%s/goldens.json: %v", dir, err)
	}
	g.f32, g.i32 = goldentest.ReadTensors(t, filepath.Join(dir, "goldens.safetensors"))
	return g
}

func (g *goldenSet) floats(t testing.TB, name string) []float32 {
	t.Helper()
	v, ok := g.f32[name]
	if !ok {
		t.Fatalf("goldens.safetensors has no %s (rerun `%s`)", name, goldenCommand)
	}
	return v
}

func (g *goldenSet) ints(t testing.TB, name string) []int32 {
	t.Helper()
	v, ok := g.i32[name]
	if !ok {
		t.Fatalf("goldens.safetensors has no %s (rerun `%s`)", name, goldenCommand)
	}
	return v
}

// loadGolden loads a golden checkpoint, checking every dequantized tensor's sha256 against
// the script's PyTorch dequantization, and returns the model and the dequantized tensors.
func loadGolden(t testing.TB, dir string, g *goldenSet) (*Model, map[string][]float32) {
	t.Helper()
	tensors := map[string][]float32{}
	sums := map[string]string{}
	m, err := LoadCheckpoint(context.Background(), dir, &LoadOptions{OnTensor: func(n string, v []float32) {
		tensors[n] = append([]float32(nil), v...)
		b := make([]byte, 4*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
		}
		s := sha256.Sum256(b)
		sums[n] = hex.EncodeToString(s[:])
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(g.meta.DequantSHA256) == 0 {
		t.Fatalf("goldens.json has no dequant_sha256")
	}
	for n, want := range g.meta.DequantSHA256 {
		if sums[n] != want {
			t.Errorf("%s: dequantized float32 sha256 %s, PyTorch's %s", n, sums[n], want)
		}
	}
	if len(sums) != len(g.meta.DequantSHA256) {
		t.Errorf("loader decoded %d tensors, the script dequantized %d", len(sums), len(g.meta.DequantSHA256))
	}
	if t.Failed() {
		t.FailNow()
	}
	return m, tensors
}

// rowsAt gathers the logits of the given positions from an all-rows result.
func rowsAt(all []float32, vocab int, positions []int32) []float32 {
	var out []float32
	for _, p := range positions {
		out = append(out, all[int(p)*vocab:(int(p)+1)*vocab]...)
	}
	return out
}

func TestGoldens(t *testing.T) {
	for _, name := range goldenModels {
		t.Run(name, func(t *testing.T) { testGolden(t, goldenDir(name)) })
	}
}

// testGolden checks the Go model of the checkpoint in dir against its goldens.
func testGolden(t *testing.T, dir string) {
	g := readGolden(t, dir)
	m, tensors := loadGolden(t, dir, g)
	t.Logf("%s: %d layers, vocab %d; goldens from %v", filepath.Base(dir), len(m.Cfg.Layers), m.Cfg.Vocab, g.meta.Versions)
	ctx := context.Background()
	vocab := m.Cfg.Vocab
	ref, err := rawFromTensors(m.Cfg, tensors, "model.language_model.")
	if err != nil {
		t.Fatal(err)
	}
	for _, T := range []int{1, 11, 200} {
		ts := strconv.Itoa(T)
		prompt := g.ints(t, "prompt."+ts)
		positions := g.ints(t, "positions."+ts)
		want := g.floats(t, "logits."+ts)

		// Prompt logits: one call (the chunked GDN rule from 16 rows on).
		var trace map[string][]float32
		if T == 11 {
			trace = map[string][]float32{}
			m.Trace = func(kind string, layer, rows int, data []float32) {
				key := kind + ".11"
				if kind != "norm" {
					key += "." + strconv.Itoa(layer)
				}
				trace[key] = append([]float32(nil), data...)
			}
		}
		st := newState(t, m, T+40)
		all, err := m.Forward(ctx, st, prompt, true)
		m.Trace = nil
		if err != nil {
			t.Fatal(err)
		}
		got := rowsAt(all, vocab, positions)
		e, at := relErr32(got, want)
		msg := fmt.Sprintf("prompt %d: max relative logit error %.3g (row %d)", T, e, positions[at/vocab])
		if w64, ok := g.f32["logits64."+ts]; ok {
			ours, _ := relErr32(got, w64)
			hf, _ := relErr32(want, w64)
			msg += fmt.Sprintf("; against transformers' float64 record: ours %.3g, transformers' float32 %.3g", ours, hf)
		}
		t.Log(msg)
		if e > goldenTolerance {
			t.Errorf("%s, want ≤ %g", msg, goldenTolerance)
		}

		// The same prompt prefilled in pieces of 64 and of 48 rows: the last row's logits.
		if T > 64 {
			for _, chunk := range []int{64, 48} {
				pst := newState(t, m, T)
				lastRow, err := m.Prefill(ctx, pst, prompt, chunk)
				if err != nil {
					t.Fatal(err)
				}
				if e, _ := relErr32(lastRow, want[len(want)-vocab:]); e > goldenTolerance {
					t.Errorf("prompt %d prefilled in chunks of %d: last-row relative error %.3g", T, chunk, e)
				}
			}
		}

		// The float64 reference of this package's tests against transformers too.
		if T > 1 {
			r64 := ref.logits64(prompt, nil)
			var sel []float64
			for _, p := range positions {
				sel = append(sel, r64[p]...)
			}
			if e, _ := relErr(want, sel); e > goldenTolerance {
				t.Errorf("prompt %d: the tests' float64 reference differs from transformers by %.3g", T, e)
			}
		}

		// Per-layer activations of the 11-token prompt.
		if T == 11 {
			for key, w := range g.f32 {
				if !strings.HasPrefix(key, "hidden.11.") && !strings.HasPrefix(key, "mixer.11.") && key != "norm.11" {
					continue
				}
				ours, ok := trace[key]
				if !ok {
					t.Errorf("golden %s has no traced counterpart", key)
					continue
				}
				if e, at := relErr32(ours, w); e > goldenTolerance {
					t.Errorf("%s: relative error %.3g at row %d", key, e, at/m.Cfg.Hidden)
				}
			}
		}

		// Greedy continuation by decode steps (recurrent GDN rule, one attention row).
		greedy := g.ints(t, "greedy."+ts)
		margins := g.meta.GreedyMargins[ts]
		stepLogits := g.f32["greedy_logits."+ts]
		last := all[(T-1)*vocab:]
		for i, wantTok := range greedy {
			tok := int32(Argmax(last))
			if stepLogits != nil {
				if e, _ := relErr32(last, stepLogits[i*vocab:(i+1)*vocab]); e > goldenTolerance {
					t.Errorf("prompt %d, greedy step %d: logits relative error %.3g", T, i, e)
				}
			}
			if tok != wantTok {
				margin := math.NaN()
				if i < len(margins) {
					margin = margins[i]
				}
				// Errorf, not Fatalf: the later prompts' logit and trace checks still run (they
				// locate a divergence better than the first differing token does).
				t.Errorf("prompt %d, greedy step %d: token %d, transformers %d (its top-2 margin %.3g); tokens so far %v",
					T, i, tok, wantTok, margin, greedy[:i])
				break
			}
			if last, err = m.Forward(ctx, st, []int32{tok}, false); err != nil {
				t.Fatal(err)
			}
		}
	}
}
