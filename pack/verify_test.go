package pack

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"lithos/manifests"
)

// flipByte xors one byte of a file.
func flipByte(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x40
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// TestVerifyNamesCorruptTensor: one changed byte anywhere in the weights file makes verify fail
// naming the tensor (its bytes, its row scales, or the padding after it); a changed copied file
// is named too. --deep names the source tensor and byte.
func TestVerifyNamesCorruptTensor(t *testing.T) {
	dir, m := build(t, Options{Target: fixtureDir})
	weights := filepath.Join(dir, manifests.BundleWeightsName)
	if _, err := Verify(context.Background(), dir, VerifyOptions{Deep: true}); err != nil {
		t.Fatalf("fresh bundle: %v", err)
	}
	down, _ := m.Tensor("layers.1.mlp.down_proj")
	gateUp, _ := m.Tensor("layers.2.mlp.gate_up")
	norm, _ := m.Tensor("layers.0.input_layernorm")
	cases := []struct {
		name   string
		off    int64
		tensor string
		msg    string
	}{
		{"packed matrix byte", down.Offset + 1000, "layers.1.mlp.down_proj", "sha256"},
		{"row scale", gateUp.RowScales.Offset + 4*17 + 3, "layers.2.mlp.gate_up", "row scale of row 17"},
		{"plain tensor", norm.Offset + 5, "layers.0.input_layernorm", "sha256"},
		{"alignment padding", norm.Offset + norm.Length + 100, "layers.0.input_layernorm", "padding after the tensor"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			flipByte(t, weights, c.off)
			defer flipByte(t, weights, c.off)
			rep, err := Verify(context.Background(), dir, VerifyOptions{})
			wantErr(t, err, "tensor "+c.tensor+":")
			found := false
			for _, p := range rep.Problems {
				if p.Tensor != c.tensor {
					t.Errorf("problem %q names another tensor than %s", p, c.tensor)
				}
				found = found || strings.Contains(p.Message, c.msg)
			}
			if !found {
				t.Errorf("problems %v: none says %q", rep.Problems, c.msg)
			}
		})
	}
	t.Run("deep names the source byte", func(t *testing.T) {
		// Byte 0 of the packed down_proj is code byte 0 of row 0 (unit of row 0, stripe 0).
		flipByte(t, weights, down.Offset)
		defer flipByte(t, weights, down.Offset)
		rep, err := Verify(context.Background(), dir, VerifyOptions{Deep: true})
		wantErr(t, err, "layers.1.mlp.down_proj")
		var deep string
		for _, p := range rep.Problems {
			if strings.Contains(p.Message, "differs from the source") {
				deep = p.String()
			}
		}
		if !strings.Contains(deep, "model.language_model.layers.1.mlp.down_proj.weight: byte 0 is") {
			t.Fatalf("deep problem %q, problems %v", deep, rep.Problems)
		}
	})
	t.Run("copied file", func(t *testing.T) {
		p := filepath.Join(dir, "tokenizer.json")
		flipByte(t, p, 10)
		defer flipByte(t, p, 10)
		_, err := Verify(context.Background(), dir, VerifyOptions{})
		wantErr(t, err, "tokenizer.json", "the file changed")
	})
}

// TestOpenBundleRefuses is the loader-side check: a truncated weights file, another manifest
// version, a misaligned offset, a layout blm does not re-derive, a stack that does not add up.
func TestOpenBundleRefuses(t *testing.T) {
	dir, m := build(t, Options{Target: fixtureDir})
	weights := filepath.Join(dir, manifests.BundleWeightsName)
	if _, err := OpenBundle(dir); err != nil {
		t.Fatal(err)
	}
	t.Run("truncated", func(t *testing.T) {
		gateUp, _ := m.Tensor("layers.1.mlp.gate_up")
		if err := os.Truncate(weights, gateUp.Offset+100); err != nil {
			t.Fatal(err)
		}
		defer os.Truncate(weights, m.Weights.Bytes) // zeros: the bytes are gone, the file's size is back
		_, err := OpenBundle(dir)
		wantErr(t, err, "truncated", "tensor layers.1.mlp.gate_up")
		_, err = Verify(context.Background(), dir, VerifyOptions{})
		wantErr(t, err, "truncated")
	})
	manifest := filepath.Join(dir, manifests.BundleManifestName)
	orig, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	edit := func(t *testing.T, f func(m map[string]any)) {
		t.Helper()
		editJSON(t, manifest, f)
		t.Cleanup(func() { os.WriteFile(manifest, orig, 0o644) })
	}
	tensor := func(m map[string]any, i int) map[string]any { return m["tensors"].([]any)[i].(map[string]any) }
	t.Run("version", func(t *testing.T) {
		edit(t, func(m map[string]any) { m["version"] = 2 })
		_, err := OpenBundle(dir)
		if !errors.Is(err, manifests.ErrBundleVersion) {
			t.Fatalf("error %v, want ErrBundleVersion", err)
		}
		wantErr(t, err, "version 2")
	})
	t.Run("misaligned offset", func(t *testing.T) {
		edit(t, func(m map[string]any) { tensor(m, 3)["offset"] = tensor(m, 3)["offset"].(float64) + 4096 })
		wantErr(t, func() error { _, err := OpenBundle(dir); return err }(), "tensor layers.0.linear_attn.in_proj_ab", "alignment")
	})
	t.Run("layout", func(t *testing.T) {
		edit(t, func(m map[string]any) { tensor(m, 2)["layout"].(map[string]any)["unit_bytes"] = 32.0 })
		wantErr(t, func() error { _, err := OpenBundle(dir); return err }(), "tensor layers.0.linear_attn.in_proj_zqkv", "unit_bytes")
	})
	t.Run("stack rows", func(t *testing.T) {
		edit(t, func(m map[string]any) {
			tensor(m, 2)["stack"].(map[string]any)["segments"].([]any)[0].(map[string]any)["rows"] = 63.0
		})
		wantErr(t, func() error { _, err := OpenBundle(dir); return err }(), "tensor layers.0.linear_attn.in_proj_zqkv", "stack")
	})
	t.Run("unknown field", func(t *testing.T) {
		edit(t, func(m map[string]any) { m["extra"] = true })
		wantErr(t, func() error { _, err := OpenBundle(dir); return err }(), "unknown field")
	})
	t.Run("longer file", func(t *testing.T) {
		if err := os.Truncate(weights, m.Weights.Bytes+16384); err != nil {
			t.Fatal(err)
		}
		defer os.Truncate(weights, m.Weights.Bytes)
		wantErr(t, func() error { _, err := OpenBundle(dir); return err }(), "longer")
	})
}

// TestManifestRoundTrip: what Build returns is what manifest.json holds.
func TestManifestRoundTrip(t *testing.T) {
	dir, m := build(t, Options{Target: fixtureDir})
	b := mustOpen(t, dir)
	a, _ := json.Marshal(m)
	c, _ := json.Marshal(b.Manifest)
	if string(a) != string(c) {
		t.Fatal("manifest.json differs from the manifest Build returned")
	}
}
