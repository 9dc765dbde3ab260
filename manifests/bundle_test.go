package manifests

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// sampleManifest is a small valid manifest written by hand from docs/bundle.md: a plain BF16
// norm [64] at 0 and an FP8 [16, 64] matrix at 16384 (lanes 4: W 16, U 16, one block of 1024
// bytes; 16 row scales of 4 bytes after it).
const sampleManifest = `{
  "format": "lithos-bundle", "version": 1, "tool": "lithos-pack", "tool_version": "test", "alignment": 16384,
  "weights": {"path": "weights.bin", "bytes": 32768},
  "target": {"architecture": "Qwen3_5ForCausalLM", "config": {"hidden_size": 64},
             "source": {"repo": "org/name", "commit": "0123456789abcdef0123456789abcdef01234567", "path": "/x",
                        "files": [{"path": "config.json", "bytes": 10, "sha256": "` + zeros64 + `"}]}},
  "draft": null,
  "tensors": [
    {"name": "norm", "model": "target", "role": "norm", "group": "small", "encoding": "plain", "format": "BF16",
     "shape": [64], "offset": 0, "length": 128, "sha256": "` + zeros64 + `", "stored_bytes": 128,
     "source": "model.norm.weight", "transform": "one_plus"},
    {"name": "layers.0.mlp.down_proj", "model": "target", "role": "matrix", "group": "mlp", "encoding": "blm",
     "format": "fp8_e4m3", "shape": [16, 64], "offset": 16384, "length": 1088, "sha256": "` + zeros64 + `",
     "stored_bytes": 1024,
     "layout": {"format": "fp8_e4m3", "n": 16, "k": 64, "rows": 16, "lanes": 4, "fold": 8, "steps": 2, "stripe": 16,
                "group_size": 0, "scale_slot_bytes": 0, "scale_slots": 0, "payload_bytes": 16, "scale_bytes": 0,
                "unit_bytes": 16, "block_bytes": 1024, "blocks": 1, "total_bytes": 1024, "stored_bytes": 1024,
                "padding_bytes": 0},
     "stack": {"mode": "concat", "segments": [{"name": "model.layers.0.mlp.down_proj.weight", "rows": 16,
               "tensor_scale": 0.5, "tensors": ["model.layers.0.mlp.down_proj.weight", "model.layers.0.mlp.down_proj.weight_scale"]}]},
     "row_scales": {"offset": 17408, "bytes": 64, "count": 16, "uniform": true}}
  ],
  "skipped": [{"model": "target", "name": "mtp.fc.weight", "dtype": "BF16", "shape": [64, 128], "bytes": 16384, "reason": "MTP"}],
  "files": [],
  "padding": {"stored_bytes": 1152, "layout_bytes": 0, "row_scale_bytes": 64, "alignment_bytes": 31552, "skipped_bytes": 16384}
}`

const zeros64 = "0000000000000000000000000000000000000000000000000000000000000000"

func TestParseBundleSample(t *testing.T) {
	b, err := ParseBundle([]byte(sampleManifest))
	if err != nil {
		t.Fatal(err)
	}
	if b.Target.Source.Repo == nil || *b.Target.Source.Repo != "org/name" || len(b.Tensors) != 2 || b.Tensors[1].Stack.Segments[0].TensorScale != 0.5 {
		t.Fatalf("%+v", b)
	}
	if tt, ok := b.Tensor("layers.0.mlp.down_proj"); !ok || tt.RowScales.Offset != 17408 {
		t.Fatal("Tensor lookup")
	}
	// Re-encoding gives a manifest that parses to the same value.
	data, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	b2, err := ParseBundle(data)
	if err != nil {
		t.Fatal(err)
	}
	if d2, _ := json.Marshal(b2); !bytes.Equal(data, d2) {
		t.Fatal("round trip changed the manifest")
	}
}

// TestCheckLayoutRules breaks one rule at a time; each error names the tensor or field.
func TestCheckLayoutRules(t *testing.T) {
	cases := map[string]struct {
		edit func(b *Bundle)
		want string
	}{
		"format":            {func(b *Bundle) { b.Format = "gguf" }, `format "gguf"`},
		"alignment":         {func(b *Bundle) { b.Alignment = 4096 }, "alignment 4096"},
		"weights name":      {func(b *Bundle) { b.Weights.Path = "../w" }, "weights.path"},
		"weights size":      {func(b *Bundle) { b.Weights.Bytes = 1000 }, "weights.bytes 1000"},
		"unaligned":         {func(b *Bundle) { b.Tensors[1].Offset = 16000 }, "tensor layers.0.mlp.down_proj: offset 16000"},
		"overlap":           {func(b *Bundle) { b.Tensors[0].Length = 20000; b.Tensors[0].StoredBytes = 20000 }, "before the end (20000)"},
		"past the end":      {func(b *Bundle) { b.Weights.Bytes = 16384 }, "end past weights.bytes 16384"},
		"duplicate":         {func(b *Bundle) { b.Tensors[1].Name = "norm" }, "tensor norm: listed twice"},
		"sha":               {func(b *Bundle) { b.Tensors[0].SHA256 = "ABC" }, "tensor norm: sha256"},
		"role":              {func(b *Bundle) { b.Tensors[0].Role = "lut" }, `role "lut"`},
		"transform":         {func(b *Bundle) { b.Tensors[0].Transform = "exp" }, `transform "exp"`},
		"plain with layout": {func(b *Bundle) { b.Tensors[0].Layout = b.Tensors[1].Layout }, "layout/stack/row_scales are for blm"},
		"stack rows":        {func(b *Bundle) { b.Tensors[1].Stack.Segments[0].Rows = 15 }, "1 segments of 15 rows"},
		"tensor scale":      {func(b *Bundle) { b.Tensors[1].Stack.Segments[0].TensorScale = 0 }, "tensor_scale 0"},
		"row scales":        {func(b *Bundle) { b.Tensors[1].RowScales.Offset = 16384 }, "row_scales {offset 16384"},
		"length":            {func(b *Bundle) { b.Tensors[1].Length = 1024 }, "length 1024"},
		"shape":             {func(b *Bundle) { b.Tensors[1].Shape = []int64{16, 32} }, "shape [16 32] but layout"},
		"draft tensor":      {func(b *Bundle) { b.Tensors[0].Model = ModelDraft }, "no draft"},
		"commit":            {func(b *Bundle) { c := "main"; b.Target.Source.Commit = &c }, "source.commit"},
		"file path":         {func(b *Bundle) { b.Files = []BundleFile{{Path: "../x", SHA256: zeros64}} }, "not a clean relative path"},
		"skipped":           {func(b *Bundle) { b.Skipped[0].Reason = "" }, "skipped[0]"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			b, err := ParseBundle([]byte(sampleManifest))
			if err != nil {
				t.Fatal(err)
			}
			c.edit(b)
			err = b.CheckLayout()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("CheckLayout: %v, want %q", err, c.want)
			}
		})
	}
}

func TestParseBundleVersionFirst(t *testing.T) {
	// A newer manifest may have any fields: the version is checked before anything else.
	_, err := ParseBundle([]byte(`{"format": "lithos-bundle", "version": 2, "new_field": {}}`))
	if !errors.Is(err, ErrBundleVersion) || !strings.Contains(err.Error(), "version 2") {
		t.Fatalf("%v", err)
	}
	if _, err := ParseBundle([]byte(`{"version": 1}`)); err == nil || !strings.Contains(err.Error(), "not a lithos bundle manifest") {
		t.Fatalf("%v", err)
	}
	if _, err := ParseBundle([]byte(sampleManifest + ` {}`)); err == nil {
		t.Fatal("trailing data accepted")
	}
}

func TestCheckFile(t *testing.T) {
	b, err := ParseBundle([]byte(sampleManifest))
	if err != nil {
		t.Fatal(err)
	}
	for size, want := range map[int64]string{
		32768: "",
		17000: "truncated: tensor layers.0.mlp.down_proj (bytes [16384, 17472))",
		17472: "truncated (in the padding after the last tensor)",
		100:   "truncated: tensor norm",
		49152: "longer than the bundle",
	} {
		err := b.CheckFile(size)
		if (want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), want) {
			t.Errorf("CheckFile(%d) = %v, want %q", size, err, want)
		}
	}
}

// TestSchemaInDocs: docs/bundle.md prints the embedded schema verbatim.
func TestSchemaInDocs(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "docs", "bundle.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(doc, append(append([]byte("```json\n"), BundleSchema()...), "```"...)) {
		t.Fatal("docs/bundle.md does not hold manifests/bundle.schema.json verbatim in a ```json block")
	}
	var v any
	if err := json.Unmarshal(BundleSchema(), &v); err != nil {
		t.Fatal(err)
	}
}

// FuzzParseBundle: any bytes give a manifest or an error, never a panic; what parses re-encodes
// to a manifest that parses again and still passes its own checks.
func FuzzParseBundle(f *testing.F) {
	f.Add([]byte(sampleManifest))
	f.Add([]byte(`{"format": "lithos-bundle", "version": 1}`))
	f.Add([]byte(strings.Replace(sampleManifest, `"offset": 16384`, `"offset": -16384`, 1)))
	f.Add([]byte(strings.Replace(sampleManifest, `"blocks": 1`, `"blocks": 9223372036854775807`, 1)))
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := ParseBundle(data)
		if err != nil {
			return
		}
		for _, size := range []int64{0, b.Weights.Bytes, b.Weights.Bytes - 1} {
			_ = b.CheckFile(size)
		}
		again, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ParseBundle(again); err != nil {
			t.Fatalf("re-encoded manifest does not parse: %v", err)
		}
	})
}

func TestCheckFilePaths(t *testing.T) {
	sum := strings.Repeat("a", 64)
	for _, p := range []string{"tokenizer.json", "sub/chat_template.jinja"} {
		if err := checkFile("files", BundleFile{Path: p, SHA256: sum}); err != nil {
			t.Errorf("%q refused: %v", p, err)
		}
	}
	for _, p := range []string{"", ".", "/abs", "../x", "a/../b", "a//b", "./x", "x/.", `a\b`} {
		if err := checkFile("files", BundleFile{Path: p, SHA256: sum}); err == nil {
			t.Errorf("%q accepted", p)
		}
	}
}
