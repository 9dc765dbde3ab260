package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"lithos/convert"
	"lithos/formats/safetensors"
)

// tinySpecFile writes the embedded 27B spec (formats, quantization rules, omit list, vision
// tower and MTP block) with tiny widths as a spec JSON file and returns its path.
func tinySpecFile(t *testing.T) string {
	t.Helper()
	spec, err := convert.LoadSynthSpec("qwen3.8-27b-nvfp4")
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(spec.Config, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["text_config"] = map[string]any{"model_type": "qwen3_5_text", "dtype": "bfloat16", "hidden_size": 64, "intermediate_size": 128,
		"num_hidden_layers": 4, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32, "vocab_size": 256,
		"linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 16, "linear_value_head_dim": 16,
		"linear_conv_kernel_dim": 4, "full_attention_interval": 2, "mtp_num_hidden_layers": 1, "tie_word_embeddings": false}
	delete(cfg, "vision_config")
	spec.Omit = nil
	if spec.Config, err = json.Marshal(cfg); err != nil {
		t.Fatal(err)
	}
	spec.Shards.MaxBytes = 200_000
	b, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "tiny-27b.json")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSynthRandomPackVerify: a random checkpoint of a 2-layer cut of the tiny 27B-shaped spec
// packs, and verify --deep compares every packed tensor with it; the same seed writes the same
// files, another seed other shard bytes.
func TestSynthRandomPackVerify(t *testing.T) {
	spec := tinySpecFile(t)
	tmp := t.TempDir()
	dirs := []string{filepath.Join(tmp, "s7"), filepath.Join(tmp, "s7again"), filepath.Join(tmp, "s8")}
	for i, d := range dirs {
		seed := "7"
		if i == 2 {
			seed = "8"
		}
		text, err := runCLI(t, "synth", "--random", spec, "--layers", "2", "--seed", seed, "--shard-bytes", "100000", "-o", d)
		if err != nil {
			t.Fatalf("synth: %v\n%s", err, text)
		}
		if !strings.Contains(text, "of random tensor data (seed "+seed+")") {
			t.Errorf("synth summary:\n%s", text)
		}
	}
	var cfg struct {
		TextConfig struct {
			Layers int `json:"num_hidden_layers"`
			MTP    int `json:"mtp_num_hidden_layers"`
		} `json:"text_config"`
	}
	if err := json.Unmarshal(must(os.ReadFile(filepath.Join(dirs[0], "config.json"))), &cfg); err != nil || cfg.TextConfig.Layers != 2 || cfg.TextConfig.MTP != 1 {
		t.Fatalf("config.json: %+v %v, want 2 layers and the MTP block kept", cfg, err)
	}
	ents := must(os.ReadDir(dirs[0]))
	shards := 0
	for _, e := range ents {
		a := must(os.ReadFile(filepath.Join(dirs[0], e.Name())))
		if !bytes.Equal(a, must(os.ReadFile(filepath.Join(dirs[1], e.Name())))) {
			t.Errorf("%s: seed 7 twice wrote other bytes", e.Name())
		}
		if strings.HasSuffix(e.Name(), ".safetensors") {
			shards++
			if bytes.Equal(a, must(os.ReadFile(filepath.Join(dirs[2], e.Name())))) {
				t.Errorf("%s: seeds 7 and 8 wrote the same bytes", e.Name())
			}
		}
	}
	if shards < 2 {
		t.Errorf("%d shards, want several with --shard-bytes 100000", shards)
	}
	if _, err := os.Stat(filepath.Join(dirs[0], safetensors.IndexName)); err != nil {
		t.Errorf("no index: %v", err)
	}

	out := filepath.Join(tmp, "tiny.lithos")
	text, err := runCLI(t, "pack", dirs[0], "-o", out)
	if err != nil {
		t.Fatalf("pack: %v\n%s", err, text)
	}
	text, err = runCLI(t, "verify", out, "--deep", "--source", dirs[0])
	if err != nil || !strings.Contains(text, ": OK") || !strings.Contains(text, "tensors compared") || strings.Contains(text, " 0 tensors compared") {
		t.Fatalf("verify --deep: %v\n%s", err, text)
	}

	// An existing output directory is refused before anything is written.
	if text, err := runCLI(t, "synth", "--random", spec, "-o", dirs[0]); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("synth into an existing directory: %v\n%s", err, text)
	}
}

// TestSynthEmbeddedCut: an embedded spec name with --layers and --text-only, header-only (the
// 27B's real widths are too big to fill in a unit test): the cut reaches config.json and the
// vision tower and MTP block are gone from the headers.
func TestSynthEmbeddedCut(t *testing.T) {
	d := filepath.Join(t.TempDir(), "q27")
	text, err := runCLI(t, "synth", "qwen3.8-27b-nvfp4", "--layers", "2", "--text-only", "--shard-bytes", "1000000000", "-o", d)
	if err != nil {
		t.Fatalf("synth: %v\n%s", err, text)
	}
	var cfg struct {
		TextConfig struct {
			Layers int `json:"num_hidden_layers"`
		} `json:"text_config"`
		Vision json.RawMessage `json:"vision_config"`
	}
	if err := json.Unmarshal(must(os.ReadFile(filepath.Join(d, "config.json"))), &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.TextConfig.Layers != 2 || cfg.Vision != nil {
		t.Fatalf("config.json: %d layers, vision %s", cfg.TextConfig.Layers, cfg.Vision)
	}
	m, err := safetensors.OpenModel(t.Context(), d)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, n := range m.Names() {
		if strings.HasPrefix(n, "mtp.") || strings.Contains(n, "visual.") || strings.Contains(n, "layers.2.") {
			t.Fatalf("%s: the cut kept it", n)
		}
	}
	if _, err := runCLI(t, "synth", "qwen3.8-27b-nvfp4", "--layers", "999", "-o", filepath.Join(t.TempDir(), "x")); err == nil || !strings.Contains(err.Error(), "fewer than the 999 layers") {
		t.Errorf("--layers 999: %v", err)
	}
}
