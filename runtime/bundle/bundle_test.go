package bundle

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"lithos/formats/safetensors"
	"lithos/manifests"
	"lithos/pack"
)

// packGolden packs the small golden checkpoint testdata/goldens/qwen35-b (ModelOpt mixed:
// NVFP4 MLP and head, FP8 projections, BF16 rest) with lithos/pack into a new directory.
func packGolden(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "b.lithos")
	_, err := pack.Build(context.Background(), pack.Options{Target: filepath.Join("..", "..", "testdata", "goldens", "qwen35-b"),
		Out: out, Workers: 2, ToolVersion: "test", Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// copyBundle copies a bundle directory (flat) so a test may damage it.
func copyBundle(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "copy.lithos")
	if err := os.Mkdir(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

func TestOpenMapsTensorsInPlace(t *testing.T) {
	dir := packGolden(t)
	b, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	file, err := os.ReadFile(filepath.Join(dir, manifests.BundleWeightsName))
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Weights()) != len(file) {
		t.Fatalf("mapped %d bytes, the file has %d", len(b.Weights()), len(file))
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(b.Weights())))
	for i := range b.Manifest.Tensors {
		tt := &b.Manifest.Tensors[i]
		v, err := b.Bytes(tt)
		if err != nil {
			t.Fatal(err)
		}
		if string(v) != string(file[tt.Offset:tt.Offset+tt.Length]) {
			t.Fatalf("tensor %s: view differs from the file's bytes", tt.Name)
		}
		// A view, not a copy: its first byte is the mapping's byte at the tensor's offset.
		if tt.Length > 0 && uintptr(unsafe.Pointer(unsafe.SliceData(v))) != base+uintptr(tt.Offset) {
			t.Fatalf("tensor %s: the view is not inside the mapping at offset %d", tt.Name, tt.Offset)
		}
		if tt.Encoding == manifests.EncodingBLM {
			m, err := b.Matrix(tt)
			if err != nil {
				t.Fatal(err)
			}
			if int64(len(m.Packed)) != m.Geometry.TotalBytes || m.Geometry.N != tt.Shape[0] {
				t.Fatalf("tensor %s: matrix view of %d bytes for %+v", tt.Name, len(m.Packed), m.Geometry)
			}
			// Row scales are the segments' tensor scales, 0 on padding rows.
			row := int64(0)
			for _, s := range m.Stack.Segments {
				if m.Stack.Mode == "concat" {
					got := math.Float32frombits(binary.LittleEndian.Uint32(m.RowScales[4*row:]))
					if got != s.TensorScale {
						t.Fatalf("tensor %s: row %d scale %g, segment %s has %g", tt.Name, row, got, s.Name, s.TensorScale)
					}
				}
				row += s.Rows
			}
		}
	}
	if _, ok := b.Tensor("layers.0.input_layernorm"); !ok {
		t.Fatal("no layers.0.input_layernorm")
	}
}

// TestFloatsTransforms checks the plain-tensor decode and transforms against the checkpoint's
// own values (read with lithos/formats/safetensors).
func TestFloatsTransforms(t *testing.T) {
	b, err := Open(packGolden(t))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ck, err := safetensors.Open(filepath.Join("..", "..", "testdata", "goldens", "qwen35-b", "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	source := func(name string) []float32 {
		for _, tt := range ck.Header.Tensors {
			if tt.Name == name {
				raw, err := ck.ReadTensor(tt)
				if err != nil {
					t.Fatal(err)
				}
				v, err := decodeFloats(string(tt.DType), raw)
				if err != nil {
					t.Fatal(err)
				}
				return v
			}
		}
		t.Fatalf("checkpoint has no %s", name)
		return nil
	}
	checked := map[string]int{}
	for i := range b.Manifest.Tensors {
		tt := &b.Manifest.Tensors[i]
		if tt.Encoding != manifests.EncodingPlain || tt.Role == manifests.RoleEmbedding {
			continue
		}
		got, err := b.Floats(tt)
		if err != nil {
			t.Fatal(err)
		}
		raw := source(tt.Source)
		for j, w := range raw {
			want := w
			switch tt.Transform {
			case manifests.TransformOnePlus:
				want = 1 + w
			case manifests.TransformNegExp:
				want = -float32(math.Exp(float64(w)))
			}
			if got[j] != want {
				t.Fatalf("tensor %s (%s) element %d: %g, want %g", tt.Name, tt.Transform, j, got[j], want)
			}
		}
		checked[tt.Transform]++
	}
	if checked[manifests.TransformOnePlus] == 0 || checked[manifests.TransformNegExp] == 0 || checked[manifests.TransformNone] == 0 {
		t.Fatalf("transforms checked: %v, want all three", checked)
	}
	if _, err := b.Floats(&b.Manifest.Tensors[len(b.Manifest.Tensors)-1]); err == nil {
		t.Error("Floats of a BLM matrix (lm_head) was accepted")
	}
}

// TestOpenRefuses checks that a damaged bundle is refused with the tensor or field named.
func TestOpenRefuses(t *testing.T) {
	good := packGolden(t)
	editManifest := func(t *testing.T, dir string, edit func(m map[string]any)) {
		path := filepath.Join(dir, manifests.BundleManifestName)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatal(err)
		}
		edit(m)
		if data, err = json.Marshal(m); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tensor := func(m map[string]any, name string) map[string]any {
		for _, x := range m["tensors"].([]any) {
			if tm := x.(map[string]any); tm["name"] == name {
				return tm
			}
		}
		t.Fatalf("no tensor %s", name)
		return nil
	}
	cases := []struct {
		name   string
		damage func(t *testing.T, dir string)
		want   []string
		is     error
	}{
		{"truncated weights", func(t *testing.T, dir string) {
			if err := os.Truncate(filepath.Join(dir, manifests.BundleWeightsName), 200000); err != nil {
				t.Fatal(err)
			}
		}, []string{"truncated", "tensor embed_tokens"}, nil},
		{"other version", func(t *testing.T, dir string) {
			editManifest(t, dir, func(m map[string]any) { m["version"] = 2 })
		}, []string{"version 2"}, manifests.ErrBundleVersion},
		{"tensor past the end", func(t *testing.T, dir string) {
			editManifest(t, dir, func(m map[string]any) {
				tensor(m, "norm")["offset"] = m["weights"].(map[string]any)["bytes"]
			})
		}, []string{"tensor norm"}, nil},
		{"layout that does not re-derive", func(t *testing.T, dir string) {
			editManifest(t, dir, func(m map[string]any) {
				tensor(m, "layers.0.mlp.down_proj")["layout"].(map[string]any)["lanes"] = 32
			})
		}, []string{"tensor layers.0.mlp.down_proj"}, nil},
		{"no manifest", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, manifests.BundleManifestName))
		}, []string{"manifest.json"}, os.ErrNotExist},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := copyBundle(t, good)
			c.damage(t, dir)
			b, err := Open(dir)
			if err == nil {
				b.Close()
				t.Fatal("the damaged bundle was opened")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
			if c.is != nil && !errors.Is(err, c.is) {
				t.Errorf("error %q is not %v", err, c.is)
			}
		})
	}
}
