package convert

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"lithos/formats/safetensors"
	"lithos/hub"
	"lithos/hub/hubtest"
)

// wantErr checks that err is non-nil and names every part.
func wantErr(t *testing.T, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error; want one naming %q", parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not name %q", err, p)
		}
	}
}

func TestBadInputMissingConfig(t *testing.T) {
	dir := synth(t, tinySpec(), t.TempDir())
	if err := os.Remove(filepath.Join(dir, "config.json")); err != nil {
		t.Fatal(err)
	}
	_, err := Audit(context.Background(), LocalSource{Dir: dir}, AuditOptions{})
	wantErr(t, err, "config.json", "not found", dir)
}

func TestBadInputConfigField(t *testing.T) {
	dir := synth(t, tinySpec(), t.TempDir())
	cfg := []byte(`{"architectures": ["Qwen3_5ForConditionalGeneration"], "text_config": {"hidden_size": 64, "intermediate_size": 128,
		"num_hidden_layers": 4, "num_attention_heads": 4, "vocab_size": -256}}`)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Audit(context.Background(), LocalSource{Dir: dir}, AuditOptions{})
	wantErr(t, err, "config.json", "text_config.vocab_size", "positive integer")
}

// indexed writes a two-shard checkpoint of the tiny spec and returns its
// directory and the index's weight map.
func indexed(t *testing.T) (string, map[string]string) {
	t.Helper()
	dir := synth(t, tinySpec(), t.TempDir())
	raw, err := os.ReadFile(filepath.Join(dir, safetensors.IndexName))
	if err != nil {
		t.Fatal(err)
	}
	var ix struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(raw, &ix); err != nil {
		t.Fatal(err)
	}
	return dir, ix.WeightMap
}

func writeIndex(t *testing.T, dir string, wm map[string]string) {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{}, "weight_map": wm})
	if err := os.WriteFile(filepath.Join(dir, safetensors.IndexName), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestBadInputIndexNamesAbsentTensor(t *testing.T) {
	dir, wm := indexed(t)
	wm["model.language_model.layers.0.mlp.extra_proj.weight"] = "model-00002-of-00003.safetensors"
	writeIndex(t, dir, wm)
	_, err := Audit(context.Background(), LocalSource{Dir: dir}, AuditOptions{})
	wantErr(t, err, safetensors.IndexName, "model.language_model.layers.0.mlp.extra_proj.weight", "model-00002-of-00003.safetensors", "no such tensor")
}

func TestBadInputShardTensorNotInIndex(t *testing.T) {
	dir, wm := indexed(t)
	delete(wm, "model.language_model.norm.weight")
	writeIndex(t, dir, wm)
	_, err := Audit(context.Background(), LocalSource{Dir: dir}, AuditOptions{})
	wantErr(t, err, "model.language_model.norm.weight", safetensors.IndexName, "does not list")
}

func TestBadInputMissingShard(t *testing.T) {
	dir, _ := indexed(t)
	if err := os.Remove(filepath.Join(dir, "model-00002-of-00003.safetensors")); err != nil {
		t.Fatal(err)
	}
	_, err := Audit(context.Background(), LocalSource{Dir: dir}, AuditOptions{})
	wantErr(t, err, "model-00002-of-00003.safetensors", "listed in "+safetensors.IndexName, "tensors (e.g.")
}

func TestBadInputHeaderLiesAboutSizes(t *testing.T) {
	t.Run("data past the end of the file", func(t *testing.T) {
		dir, _ := indexed(t)
		shard := filepath.Join(dir, "model-00003-of-00003.safetensors")
		st, err := os.Stat(shard)
		if err != nil {
			t.Fatal(err)
		}
		// The header still describes the full data section; the file is
		// 100 bytes shorter, as if the header claimed more than there is.
		if err := os.Truncate(shard, st.Size()-100); err != nil {
			t.Fatal(err)
		}
		_, err = Audit(context.Background(), LocalSource{Dir: dir}, AuditOptions{})
		wantErr(t, err, "model-00003-of-00003.safetensors", "tensor \"", string(safetensors.RulePastEOF))
	})
	t.Run("shape disagrees with byte range", func(t *testing.T) {
		dir := t.TempDir()
		// One tensor claiming BF16 [64] (128 bytes) over a 100-byte range.
		js := `{"model.language_model.norm.weight":{"dtype":"BF16","shape":[64],"data_offsets":[0,100]}}`
		for len(js)%8 != 0 {
			js += " "
		}
		b := binary.LittleEndian.AppendUint64(nil, uint64(len(js)))
		b = append(b, js...)
		b = append(b, make([]byte, 100)...)
		if err := os.WriteFile(filepath.Join(dir, "model.safetensors"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "config.json"), tinySpec().Config, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Audit(context.Background(), LocalSource{Dir: dir}, AuditOptions{})
		wantErr(t, err, "model.safetensors", "model.language_model.norm.weight", string(safetensors.RuleSize))
	})
}

// serveTiny synthesizes the tiny spec as repo test/tiny-hybrid under a
// hubtest server and returns the repo directory and a client.
func serveTiny(t *testing.T) (string, *hubtest.Server, *hub.Client) {
	t.Helper()
	root := t.TempDir()
	dir := synth(t, tinySpec(), filepath.Join(root, "test", "tiny-hybrid"))
	srv := hubtest.Start(t, root, hubtest.Options{})
	return dir, srv, hub.NewClient(srv.URL, hub.WithCacheDir(t.TempDir()), hub.WithRetry(0, 0))
}

func TestBadInputRemoteShard404(t *testing.T) {
	dir, _, c := serveTiny(t)
	if err := os.Remove(filepath.Join(dir, "model-00001-of-00003.safetensors")); err != nil {
		t.Fatal(err)
	}
	_, err := Audit(context.Background(), NewRemoteSource(c, "test/tiny-hybrid", ""), AuditOptions{})
	wantErr(t, err, "model-00001-of-00003.safetensors", "not found", "listed in "+safetensors.IndexName)
	if !IsNotExist(err) {
		t.Errorf("a 404 should read as not-exist: %v", err)
	}
}

func TestBadInputRemoteMissingConfig(t *testing.T) {
	dir, _, c := serveTiny(t)
	if err := os.Remove(filepath.Join(dir, "config.json")); err != nil {
		t.Fatal(err)
	}
	_, err := Audit(context.Background(), NewRemoteSource(c, "test/tiny-hybrid", ""), AuditOptions{})
	wantErr(t, err, "config.json", "not found", "test/tiny-hybrid@main")
}

func TestBadInputRemoteUnknownRepo(t *testing.T) {
	_, _, c := serveTiny(t)
	_, err := Audit(context.Background(), NewRemoteSource(c, "test/no-such-repo", ""), AuditOptions{})
	wantErr(t, err, "test/no-such-repo")
}
