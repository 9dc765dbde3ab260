package model

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"testing"

	"lithos/formats/safetensors"
)

// TestGoldenHarness runs the golden comparison (testGolden) on a golden directory laid out
// exactly as tools/qwen35_goldens.py writes it, but made here: the checkpoint by
// writeCheckpoint and the "transformers" outputs by the tests' float64 reference. It checks
// the harness itself (file reading, sha256 of the dequantization, row selection, traces,
// greedy decoding) before the real goldens exist; the oracle for the model math remains
// TestGoldens.
func TestGoldenHarness(t *testing.T) {
	dir := t.TempDir()
	raw := randomRaw(loadCheckpointTestConfig(), 41)
	deq := writeCheckpoint(t, dir, raw, ckptOptions{})
	ref, err := rawFromTensors(raw.cfg, deq, "model.language_model.")
	if err != nil {
		t.Fatal(err)
	}
	vocab := raw.cfg.Vocab
	rng := rand.New(rand.NewPCG(42, 42))
	f32 := map[string][]float32{}
	i32 := map[string][]int32{}
	meta := map[string]any{"versions": map[string]string{"oracle": "float64 reference (harness test)"}}
	prompts := map[string][]int32{}
	margins := map[string][]float64{}
	for _, T := range []int{1, 11, 200} {
		ts := strconv.Itoa(T)
		prompt := randomTokens(rng, T, vocab-4)
		prompts[ts] = prompt
		i32["prompt."+ts] = prompt
		var pos []int32
		if T <= 16 {
			for p := 0; p < T; p++ {
				pos = append(pos, int32(p))
			}
		} else {
			for p := 0; p < T; p += 8 {
				pos = append(pos, int32(p))
			}
			if pos[len(pos)-1] != int32(T-1) {
				pos = append(pos, int32(T-1))
			}
		}
		i32["positions."+ts] = pos
		var trace func(kind string, layer int, x [][]float64)
		if T == 11 {
			trace = func(kind string, layer int, x [][]float64) {
				f32[kind+".11."+strconv.Itoa(layer)] = toF32(flatten(x))
			}
		}
		lg := ref.logits64(prompt, trace)
		var sel []float64
		for _, p := range pos {
			sel = append(sel, lg[p]...)
		}
		f32["logits."+ts] = toF32(sel)
		// Greedy by full recomputation, as the script does.
		seq := append([]int32(nil), prompt...)
		var toks []int32
		var steps []float64
		for range 32 {
			last := ref.logits64(seq, nil)[len(seq)-1]
			best, second := 0, -1
			for i := range last {
				if last[i] > last[best] {
					best = i
				}
			}
			for i := range last {
				if i != best && (second < 0 || last[i] > last[second]) {
					second = i
				}
			}
			margins[ts] = append(margins[ts], last[best]-last[second])
			toks = append(toks, int32(best))
			if T == 11 {
				steps = append(steps, last...)
			}
			seq = append(seq, int32(best))
		}
		i32["greedy."+ts] = toks
		if T == 11 {
			f32["greedy_logits.11"] = toF32(steps)
		}
	}
	// The final norm of the 11-token prompt, from the reference's last hidden state.
	last := f32["hidden.11."+strconv.Itoa(len(raw.cfg.Layers))]
	h := raw.cfg.Hidden
	var norm []float64
	for r := 0; r < 11; r++ {
		norm = append(norm, rms64(to64(last[r*h:(r+1)*h]), ref.norm, true, float64(raw.cfg.RMSEps))...)
	}
	f32["norm.11"] = toF32(norm)

	sums := map[string]string{}
	for name, v := range deq {
		if name == "model.visual.merger.norm.weight" || name == "mtp.norm.weight" {
			continue
		}
		s := sha256.Sum256(f32Bytes(v))
		sums[name] = hex.EncodeToString(s[:])
	}
	meta["dequant_sha256"] = sums
	meta["prompts"] = prompts
	meta["greedy_margins"] = margins
	writeJSON(t, filepath.Join(dir, "goldens.json"), meta)
	writeGoldenTensors(t, filepath.Join(dir, "goldens.safetensors"), f32, i32)

	testGolden(t, dir)
}

func toF32(x []float64) []float32 {
	y := make([]float32, len(x))
	for i, v := range x {
		y[i] = float32(v)
	}
	return y
}

func writeGoldenTensors(t *testing.T, path string, f32 map[string][]float32, i32 map[string][]int32) {
	t.Helper()
	type tensor struct {
		spec safetensors.TensorSpec
		data []byte
	}
	var ts []tensor
	for name, v := range f32 {
		ts = append(ts, tensor{safetensors.TensorSpec{Name: name, DType: safetensors.F32, Shape: []int64{int64(len(v))}}, f32Bytes(v)})
	}
	for name, v := range i32 {
		b := make([]byte, 4*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint32(b[4*i:], uint32(x))
		}
		ts = append(ts, tensor{safetensors.TensorSpec{Name: name, DType: safetensors.I32, Shape: []int64{int64(len(v))}}, b})
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].spec.Name < ts[j].spec.Name })
	var specs []safetensors.TensorSpec
	for _, x := range ts {
		specs = append(specs, x.spec)
	}
	var buf bytes.Buffer
	w, err := safetensors.NewWriter(&buf, specs, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range ts {
		if err := w.WriteTensor(x.spec.Name, x.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}
