package quantize

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"lithos/formats/safetensors"
)

// TestBadInput: every refusal names the tensor or config key and the rule,
// and leaves neither the output directory nor a temporary directory behind.
func TestBadInput(t *testing.T) {
	with := func(kv ...any) map[string]any {
		c := tinyConfig()
		for i := 0; i < len(kv); i += 2 {
			c[kv[i].(string)] = kv[i+1]
		}
		return c
	}
	nanAt := func(tensor string, idx int, v float32) func(string, []int64, []float32) {
		return func(name string, _ []int64, w []float32) {
			if name == tensor {
				w[idx] = v
			}
		}
	}
	cases := []struct {
		name string
		h    head
		want []string
	}{
		{"layer count above", head{cfg: with("num_hidden_layers", 3), tensors: tinyConfig()},
			[]string{"num_hidden_layers is 3", "layers.1.*", "layers.2.* and above are missing"}},
		{"layer count below", head{cfg: with("num_hidden_layers", 1), tensors: tinyConfig()},
			[]string{"num_hidden_layers is 1", "layers.1.*"}},
		{"hidden size", head{cfg: with("hidden_size", 80, "target_hidden_size", 64), tensors: tinyConfig()},
			[]string{"fc.weight", "[64, 192]", "hidden_size=80"}},
		{"vocab", head{cfg: with("vocab_size", 128), tensors: tinyConfig()},
			[]string{"markov_head.markov_w1.weight", "[100, 32]", "vocab_size=128"}},
		{"markov rank", head{cfg: with("markov_rank", 48), tensors: tinyConfig()},
			[]string{"markov_head.markov_w1.weight", "[100, 32]", "markov_rank=48"}},
		{"no markov head in config", head{cfg: func() map[string]any {
			c := tinyConfig()
			delete(c, "markov_rank")
			delete(c, "markov_head_type")
			c["confidence_head_with_markov"] = false
			return c
		}(),
			tensors: with("confidence_head_with_markov", false)},
			[]string{"markov_head.markov_w1.weight", "no markov_rank"}},
		{"missing tensor", head{cfg: tinyConfig(), omit: []string{"layers.0.mlp.down_proj.weight"}},
			[]string{"missing", "layers.0.mlp.down_proj.weight"}},
		{"extra tensor", head{cfg: tinyConfig(), extra: []safetensors.TensorSpec{{Name: "lm_head.weight", DType: safetensors.BF16, Shape: []int64{100, 64}}}},
			[]string{"lm_head.weight", "not part of the head", "target's embedding and lm_head"}},
		{"group size", head{cfg: with("intermediate_size", 100)},
			[]string{"layers.0.mlp.down_proj.weight", "[64, 100]", "K=100", "group size 16"}},
		{"markov rank not a multiple of 16", head{cfg: with("markov_rank", 40)},
			[]string{"markov_head.markov_w2.weight", "K=40", "group size 16"}},
		{"NaN", head{cfg: tinyConfig(), fill: nanAt("layers.1.mlp.up_proj.weight", 3*64+5, float32(math.NaN()))},
			[]string{"layers.1.mlp.up_proj.weight", "element [3, 5]", "flat index 197", "NaN", "finite"}},
		{"Inf in a chunk past the first", head{cfg: tinyConfig(), fill: nanAt("fc.weight", 40*192+7, float32(math.Inf(-1)))},
			[]string{"fc.weight", "element [40, 7]", "-Inf"}},
		{"Inf in a kept norm", head{cfg: tinyConfig(), fill: nanAt("layers.0.input_layernorm.weight", 9, float32(math.Inf(1)))},
			[]string{"layers.0.input_layernorm.weight", "element [9]", "+Inf"}},
		{"NaN in an F32 head, past the first chunk", head{cfg: tinyConfig(), dtype: safetensors.F32, fill: nanAt("fc.weight", 40*192+7, float32(math.NaN()))},
			[]string{"fc.weight", "element [40, 7]", "NaN"}},
		{"Inf in a kept F16 norm", head{cfg: tinyConfig(), dtype: safetensors.F16, fill: nanAt("norm.weight", 63, float32(math.Inf(-1)))},
			[]string{"norm.weight", "element [63]", "-Inf"}},
		{"not a draft", head{cfg: func() map[string]any {
			c := tinyConfig()
			for _, k := range []string{"target_layer_ids", "markov_rank", "markov_head_type", "num_target_layers", "mask_token_id", "block_size", "enable_confidence_head", "confidence_head_with_markov", "target_hidden_size"} {
				delete(c, k)
			}
			c["architectures"] = []string{"Qwen3ForCausalLM"}
			return c
		}(), tensors: tinyConfig()},
			[]string{"config.json", "not a DSpark/DFlash draft head"}},
		{"already quantized", head{cfg: with("quantization_config", map[string]any{"quant_method": "modelopt", "quant_algo": "NVFP4"})},
			[]string{"config.json", "quantiz"}},
		{"int dtype", head{cfg: tinyConfig(), dtype: safetensors.I16},
			[]string{"dtype I16", "BF16, F16 or F32"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			if c.h.dtype == safetensors.I16 {
				c.h.dtype = ""
				src := writeHead(t, filepath.Join(root, "src"), c.h)
				rewriteDType(t, filepath.Join(src, "model.safetensors"), safetensors.I16)
			} else {
				writeHead(t, filepath.Join(root, "src"), c.h)
			}
			out := filepath.Join(root, "out")
			_, err := Run(context.Background(), filepath.Join(root, "src"), out, quantOpts())
			if err == nil {
				t.Fatal("Run accepted bad input")
			}
			t.Log(err)
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			noLeftovers(t, out)
		})
	}
}

// rewriteDType relabels every BF16 tensor of a file as d (same size).
func rewriteDType(t *testing.T, path string, d safetensors.DType) {
	t.Helper()
	f, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	var specs []safetensors.TensorSpec
	data := map[string][]byte{}
	for _, tt := range f.Header.Tensors {
		b, err := f.ReadTensor(tt)
		if err != nil {
			t.Fatal(err)
		}
		specs = append(specs, safetensors.TensorSpec{Name: tt.Name, DType: d, Shape: tt.Shape})
		data[tt.Name] = b
	}
	f.Close()
	writeST(t, path, specs, data)
}

func TestOutputExists(t *testing.T) {
	root := t.TempDir()
	src := writeHead(t, filepath.Join(root, "src"), head{cfg: tinyConfig(), seed: 1})
	out := filepath.Join(root, "out")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(out, "keep")
	if err := os.WriteFile(marker, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Run(context.Background(), src, out, quantOpts())
	if err == nil || !strings.Contains(err.Error(), "exists") || !strings.Contains(err.Error(), out) {
		t.Fatalf("existing output: err = %v", err)
	}
	if b, err := os.ReadFile(marker); err != nil || string(b) != "x" {
		t.Error("existing output directory was touched")
	}
	// An empty existing directory is refused too, and so is an existing file.
	if err := os.WriteFile(filepath.Join(root, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Run(context.Background(), src, filepath.Join(root, "file"), quantOpts()); err == nil {
		t.Error("existing file accepted as output")
	}
	if _, err := Run(context.Background(), src, filepath.Join(root, "no", "such", "out"), quantOpts()); err == nil || !strings.Contains(err.Error(), "parent") {
		t.Errorf("missing parent: err = %v", err)
	}
	if _, err := Run(context.Background(), filepath.Join(root, "nosrc"), filepath.Join(root, "o2"), quantOpts()); err == nil || !strings.Contains(err.Error(), "config.json") {
		t.Errorf("missing source: err = %v", err)
	}
	noLeftovers(t, filepath.Join(root, "o2"))
}

// TestCancel: a cancelled run removes its temporary directory.
func TestCancel(t *testing.T) {
	root := t.TempDir()
	src := writeHead(t, filepath.Join(root, "src"), head{cfg: tinyConfig(), seed: 1})
	out := filepath.Join(root, "out")
	ctx, cancel := context.WithCancel(context.Background())
	opt := quantOpts()
	opt.Workers = 1
	n := 0
	opt.Progress = func(_, d int64) {
		if n++; n == 3 {
			cancel()
		}
	}
	_, err := Run(ctx, src, out, opt)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	noLeftovers(t, out)
}
