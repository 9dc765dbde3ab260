package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"lithos/convert"
	"lithos/hub"
	"lithos/hub/hubtest"
)

// tinyHeadSpec is a header-only DSpark head (tensor data reads as zeros):
// enough for the command's plumbing; convert/quantize tests the numerics.
const tinyHeadSpec = `{
  "repo": "org/tiny-dspark",
  "config": {
    "architectures": ["DSparkDraftModel"], "model_type": "qwen3",
    "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 100,
    "dtype": "bfloat16", "block_size": 7, "target_layer_ids": [1, 3], "mask_token_id": 99,
    "markov_rank": 32, "markov_head_type": "vanilla",
    "enable_confidence_head": true, "confidence_head_with_markov": true
  },
  "shards": {"max_bytes": 0, "pattern": "model.safetensors"},
  "metadata": {"format": "pt"}
}`

func writeTinyHead(t *testing.T, dir string) {
	t.Helper()
	specPath := filepath.Join(t.TempDir(), "spec.json")
	if err := os.WriteFile(specPath, []byte(tinyHeadSpec), 0o644); err != nil {
		t.Fatal(err)
	}
	spec, err := convert.LoadSynthSpec(specPath)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := convert.SynthHeaders(context.Background(), spec, dir); err != nil {
		t.Fatal(err)
	}
}

func TestQuantizeCLI(t *testing.T) {
	root := t.TempDir()
	src := filepath.Join(root, "head")
	writeTinyHead(t, src)
	out := filepath.Join(root, "head-nvfp4")

	text, err := runCLI(t, "quantize", src, "--to", "nvfp4", "-o", out, "--source-revision", "r1")
	if err != nil {
		t.Fatalf("quantize: %v\n%s", err, text)
	}
	// The header-only head reads as zeros: no quantization error at all.
	for _, want := range []string{out, "local directory @ r1", "16 linears -> NVFP4 (W4A16_NVFP4, group 16, tensor scale exact); 13 tensors kept",
		"error       none (every quantized tensor is exactly representable); 0 flushed blocks"} {
		if !strings.Contains(text, want) {
			t.Errorf("summary lacks %q:\n%s", want, text)
		}
	}
	for _, f := range []string{"model.safetensors", "config.json", "hf_quant_config.json", "conversion.json"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Errorf("output: %v", err)
		}
	}
	var conv struct {
		ToolVersion string `json:"tool_version"`
		Source      struct{ Revision *string }
	}
	b, _ := os.ReadFile(filepath.Join(out, "conversion.json"))
	if err := json.Unmarshal(b, &conv); err != nil || conv.ToolVersion != version || conv.Source.Revision == nil || *conv.Source.Revision != "r1" {
		t.Errorf("conversion.json: %v %+v", err, conv)
	}

	// Refusals: an existing output, a format other than nvfp4, a missing -o,
	// a bad --tensor-scale, a path that is neither a directory nor a repo id.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"quantize", src, "--to", "nvfp4", "-o", out}, "exists"},
		{[]string{"quantize", src, "--to", "int4", "-o", out + "2"}, "only nvfp4"},
		{[]string{"quantize", src, "--to", "nvfp4"}, "-o DIR is required"},
		{[]string{"quantize", src, "--to", "nvfp4", "-o", out + "3", "--tensor-scale", "x"}, "exact or reciprocal"},
		{[]string{"quantize", filepath.Join(root, "no", "such"), "--to", "nvfp4", "-o", out + "4"}, "not a Hub repo id"},
		{[]string{"quantize", filepath.Join(src, "config.json"), "--to", "nvfp4", "-o", out + "5"}, "not a directory"},
	} {
		text, err := runCLI(t, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err = %v, want %q\n%s", c.args[1:], err, c.want, text)
		}
	}

	// A repo id is fetched into the HF cache first; conversion.json records
	// the repo and the snapshot's commit.
	hubRoot := t.TempDir()
	writeTinyHead(t, filepath.Join(hubRoot, "org", "tiny-dspark"))
	srv := hubtest.Start(t, hubRoot, hubtest.Options{})
	t.Setenv("HF_ENDPOINT", srv.URL)
	t.Setenv("HF_HUB_CACHE", t.TempDir())
	t.Setenv("HF_HUB_OFFLINE", "")
	out2 := filepath.Join(root, "from-hub")
	text, err = runCLI(t, "quantize", "org/tiny-dspark", "--to", "nvfp4", "-o", out2, "--json", "--tensor-scale", "reciprocal")
	if err != nil {
		t.Fatalf("quantize repo id: %v\n%s", err, text)
	}
	var res struct {
		Output     string `json:"output"`
		Conversion struct {
			Source struct {
				Repo, Revision *string
			} `json:"source"`
			Quantization struct {
				TensorScale string `json:"tensor_scale_division"`
			} `json:"quantization"`
		} `json:"conversion"`
	}
	if err := json.Unmarshal([]byte(text), &res); err != nil {
		t.Fatalf("--json: %v\n%s", err, text)
	}
	s := res.Conversion.Source
	if res.Output != out2 || s.Repo == nil || *s.Repo != "org/tiny-dspark" || s.Revision == nil || !hub.IsCommit(*s.Revision) ||
		res.Conversion.Quantization.TensorScale != "reciprocal" {
		t.Errorf("--json: %s", text)
	}
}
