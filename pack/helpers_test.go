package pack

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"lithos/convert"
	"lithos/formats/safetensors"
	"lithos/manifests"
	"lithos/pack/packtest"
)

// fixtureDir is the sharded fixture repo hub/hubtest serves (tools/mkfixtures).
var fixtureDir = filepath.Join("..", "testdata", "hub", "lithos-test", "tiny-sharded")

// tinyDraftSpec is a DSpark head for the tiny fixture target (hidden 64, vocabulary 512, 4
// layers): one Qwen3 layer, Markov rank 32, confidence head over [hidden | W1 row]. The config
// keys are the public heads' (lithos-metal.md §5.2); edit is applied to the config first.
func tinyDraftSpec(t *testing.T, edit func(cfg map[string]any)) *convert.SynthSpec {
	t.Helper()
	cfg := map[string]any{
		"architectures": []string{"DSparkDraftModel"}, "model_type": "qwen3",
		"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
		"num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32, "vocab_size": 512,
		"max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "rope_theta": 1e6, "hidden_act": "silu",
		"tie_word_embeddings": false, "dtype": "bfloat16", "num_target_layers": 4, "block_size": 7,
		"target_layer_ids": []int{1, 2}, "mask_token_id": 500, "markov_rank": 32, "markov_head_type": "vanilla",
		"enable_confidence_head": true, "confidence_head_with_markov": true, "target_hidden_size": 64,
	}
	if edit != nil {
		edit(cfg)
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &convert.SynthSpec{Repo: "lithos-test/tiny-dspark", Config: b,
		Shards: convert.SynthShards{Pattern: "model.safetensors"}, Metadata: map[string]string{"format": "pt"}}
}

// writeSpec writes a random-data checkpoint for spec into a new directory.
func writeSpec(t *testing.T, spec *convert.SynthSpec, seed uint64) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ckpt")
	if _, err := packtest.WriteCheckpoint(context.Background(), spec, dir, seed); err != nil {
		t.Fatal(err)
	}
	return dir
}

// copyDir copies a flat checkpoint directory (following symlinks) so a test can edit it.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), filepath.Base(src))
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// editJSON rewrites a JSON file of dir through edit.
func editJSON(t *testing.T, path string, edit func(m map[string]any)) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	if b, err = json.MarshalIndent(m, "", "  "); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// build packs into a fresh directory and returns the bundle path and manifest.
func build(t *testing.T, opt Options) (string, *manifests.Bundle) {
	t.Helper()
	if opt.Out == "" {
		opt.Out = filepath.Join(t.TempDir(), "model.lithos")
	}
	opt.ToolVersion = "test"
	m, err := Build(context.Background(), opt)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	return opt.Out, m
}

// sourceTensor reads a whole tensor of a checkpoint directory.
func sourceTensor(t *testing.T, m *safetensors.Model, name string) []byte {
	t.Helper()
	f, tt, ok := m.Lookup(name)
	if !ok {
		t.Fatalf("source has no %s", name)
	}
	b, err := f.ReadTensor(tt)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func f32At(b []byte, i int) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])) }

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func fileSHA(t *testing.T, p string) string {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// dirNames lists a directory's entries.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// wantErr fails unless err is non-nil and mentions every fragment.
func wantErr(t *testing.T, err error, fragments ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one mentioning %q", fragments)
	}
	for _, f := range fragments {
		if !strings.Contains(err.Error(), f) {
			t.Fatalf("error %q does not mention %q", err, f)
		}
	}
}

// normJSON re-encodes JSON so that equal documents compare equal.
func normJSON(t *testing.T, b []byte) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}
