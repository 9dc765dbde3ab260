package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"lithos/formats/safetensors"
)

const committed = "../../testdata/hub/lithos-test/tiny-sharded"

// TestCommittedFixtureIsCurrent: the committed files are exactly what the generator writes (run
// `go run ./tools/mkfixtures` from the module root after changing it).
func TestCommittedFixtureIsCurrent(t *testing.T) {
	files, err := TinySharded()
	if err != nil {
		t.Fatal(err)
	}
	var total int
	for p, want := range files {
		got, err := os.ReadFile(filepath.Join(committed, p))
		if err != nil {
			t.Errorf("%s: %v (regenerate with go run ./tools/mkfixtures)", p, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: committed file differs from the generator's output (regenerate with go run ./tools/mkfixtures)", p)
		}
		total += len(want)
	}
	des, err := os.ReadDir(committed)
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range des {
		if _, ok := files[de.Name()]; !ok {
			t.Errorf("%s: committed but not generated", de.Name())
		}
	}
	if total > 2<<20 {
		t.Errorf("fixture is %d bytes, keep it under 2 MiB", total)
	}
}

// TestShardsMatchIndex reads the committed shards back with lithos/formats/safetensors and checks the
// ModelOpt storage rules tensor by tensor.
func TestShardsMatchIndex(t *testing.T) {
	m, err := safetensors.OpenModel(context.Background(), committed)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if len(m.Files) != 2 {
		t.Fatalf("%d shards, want 2", len(m.Files))
	}
	var total int64
	for _, f := range m.Files {
		if f.Header.Metadata["format"] != "pt" {
			t.Errorf("%s: metadata %v", f.Path, f.Header.Metadata)
		}
		total += f.Header.DataSize()
	}
	if ts, ok := m.Index.TotalSize(); !ok || ts != total {
		t.Errorf("index total_size %d (%v), shards hold %d bytes", ts, ok, total)
	}
	lookup := func(name string) safetensors.Tensor {
		t.Helper()
		_, ts, ok := m.Lookup(name)
		if !ok {
			t.Fatalf("missing tensor %s", name)
		}
		return ts
	}
	counts := map[string]int{}
	for _, name := range m.Names() {
		if !strings.HasSuffix(name, ".weight_scale_2") {
			continue
		}
		mod := strings.TrimSuffix(name, ".weight_scale_2")
		w, s, s2 := lookup(mod+".weight"), lookup(mod+".weight_scale"), lookup(name)
		if w.DType != safetensors.U8 || s.DType != safetensors.F8E4M3 || s2.DType != safetensors.F32 || len(s2.Shape) != 0 ||
			len(w.Shape) != 2 || len(s.Shape) != 2 || s.Shape[0] != w.Shape[0] || s.Shape[1]*groupSize != w.Shape[1]*2 {
			t.Errorf("%s: NVFP4 weight %s%v, scale %s%v, scale_2 %s%v", mod, w.DType, w.Shape, s.DType, s.Shape, s2.DType, s2.Shape)
		}
		if !strings.HasSuffix(mod, "_proj") || !strings.Contains(mod, ".mlp.") {
			t.Errorf("%s: NVFP4 outside the MLP", mod)
		}
		counts["nvfp4"]++
	}
	for _, name := range m.Names() {
		if !strings.HasSuffix(name, ".weight") {
			continue
		}
		ts := lookup(name)
		switch ts.DType {
		case safetensors.F8E4M3:
			mod := strings.TrimSuffix(name, ".weight")
			if s := lookup(mod + ".weight_scale"); s.DType != safetensors.F32 || len(s.Shape) != 0 {
				t.Errorf("%s: FP8 weight_scale %s%v", mod, s.DType, s.Shape)
			}
			f, _, _ := m.Lookup(name)
			codes, err := f.ReadTensor(ts)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range codes {
				if c&0x7f == 0x7f {
					t.Fatalf("%s: NaN code %#x", name, c)
				}
			}
			counts["fp8"]++
		case safetensors.BF16:
			if strings.Contains(name, ".mlp.") && strings.HasPrefix(name, "model.language_model.") {
				t.Errorf("%s: MLP weight left in BF16", name)
			}
			counts["bf16"]++
		}
	}
	// 4 layers × 3 MLP projections; 3 GDN layers × 3 + 1 attention layer × 4 FP8 projections.
	if counts["nvfp4"] != 12 || counts["fp8"] != 13 || counts["bf16"] == 0 {
		t.Errorf("format counts %v, want 12 NVFP4, 13 FP8 and some BF16", counts)
	}
	for _, name := range []string{
		"model.language_model.embed_tokens.weight", "lm_head.weight", "model.language_model.norm.weight",
		"model.language_model.layers.0.linear_attn.A_log", "model.language_model.layers.3.self_attn.q_norm.weight",
		"mtp.fc.weight", "model.visual.merger.linear_fc2.weight",
	} {
		if ts := lookup(name); ts.DType != safetensors.BF16 {
			t.Errorf("%s: %s, want BF16", name, ts.DType)
		}
	}
	if ts := lookup("model.language_model.layers.0.linear_attn.in_proj_qkv.weight"); ts.Shape[0] != convDim || ts.Shape[1] != hidden {
		t.Errorf("in_proj_qkv shape %v", ts.Shape)
	}
}
