package cpu

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"lithos/formats/safetensors"
	"lithos/pack"
	"lithos/runtime/bundle"
	"lithos/runtime/model"
)

// variantCheckpoint copies golden checkpoint b into a new directory, passing every tensor
// through edit (which may change its dtype and bytes, or drop it by returning ok = false) and
// the config through editConfig.
func variantCheckpoint(t *testing.T, edit func(name string, dt safetensors.DType, shape []int64, data []byte) (safetensors.DType, []byte, bool), editConfig func(map[string]any)) string {
	t.Helper()
	src := goldenDir("b")
	dir := filepath.Join(t.TempDir(), "ckpt")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := safetensors.Open(filepath.Join(src, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var specs []safetensors.TensorSpec
	datas := map[string][]byte{}
	for _, tt := range f.Header.Tensors {
		raw, err := f.ReadTensor(tt)
		if err != nil {
			t.Fatal(err)
		}
		dt, data, ok := edit(tt.Name, tt.DType, tt.Shape, raw)
		if !ok {
			continue
		}
		specs = append(specs, safetensors.TensorSpec{Name: tt.Name, DType: dt, Shape: tt.Shape})
		datas[tt.Name] = data
	}
	var buf bytes.Buffer
	w, err := safetensors.NewWriter(&buf, specs, f.Header.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range specs {
		if err := w.WriteTensor(s.Name, datas[s.Name]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors"), buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"config.json", "hf_quant_config.json"} {
		data, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			t.Fatal(err)
		}
		if name == "config.json" && editConfig != nil {
			var c map[string]any
			if err := json.Unmarshal(data, &c); err != nil {
				t.Fatal(err)
			}
			editConfig(c)
			if data, err = json.Marshal(c); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func packAndLoad(t *testing.T, ckpt string) *model.Model {
	t.Helper()
	out := filepath.Join(t.TempDir(), "v.lithos")
	if _, err := pack.Build(context.Background(), pack.Options{Target: ckpt, Out: out, Workers: 2, ToolVersion: "test",
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}); err != nil {
		t.Fatal(err)
	}
	b, err := bundle.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	m, err := LoadTarget(b)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func logits11(t *testing.T, m *model.Model) []float32 {
	t.Helper()
	st, _ := m.NewState(16)
	out, err := m.Forward(context.Background(), st, readGoldens(t, "b").ints(t, "prompt.11"), true)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

const embedName = "model.language_model.embed_tokens.weight"

// TestF32Embedding: an F32 embedding table (the BF16 values widened, so exactly the same
// numbers) is gathered in place by the F32 gatherer and gives bit-identical logits.
func TestF32Embedding(t *testing.T) {
	ck := variantCheckpoint(t, func(name string, dt safetensors.DType, _ []int64, data []byte) (safetensors.DType, []byte, bool) {
		if name != embedName {
			return dt, data, true
		}
		out := make([]byte, 2*len(data))
		for i := 0; i < len(data)/2; i++ {
			v := math.Float32frombits(uint32(binary.LittleEndian.Uint16(data[2*i:])) << 16)
			binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(v))
		}
		return safetensors.F32, out, true
	}, nil)
	_, ref := openGoldenTarget(t, "b")
	got, want := logits11(t, packAndLoad(t, ck)), logits11(t, ref)
	if !slices.Equal(got, want) {
		e, _ := relErr(got, want)
		t.Fatalf("F32 embedding: logits differ from the BF16 embedding's (relative %.3g)", e)
	}
}

// TestTiedEmbeddings: with tie_word_embeddings and no lm_head tensor, the packer stores the
// embedding a second time as the BLM lm_head; the packed target must agree with
// runtime/model's dense model of the same checkpoint.
func TestTiedEmbeddings(t *testing.T) {
	ck := variantCheckpoint(t, func(name string, dt safetensors.DType, _ []int64, data []byte) (safetensors.DType, []byte, bool) {
		return dt, data, name != "lm_head.weight" && name != "lm_head.weight_scale" && name != "lm_head.weight_scale_2" && name != "lm_head.input_scale"
	}, func(c map[string]any) {
		c["tie_word_embeddings"] = true
		c["text_config"].(map[string]any)["tie_word_embeddings"] = true
	})
	dense, err := model.LoadCheckpoint(context.Background(), ck, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, want := logits11(t, packAndLoad(t, ck)), logits11(t, dense)
	if e, _ := relErr(got, want); e > 1e-5 {
		t.Fatalf("tied head: packed vs dense relative error %.3g", e)
	}
}
