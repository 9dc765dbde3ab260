package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"lithos/formats/safetensors"
	"lithos/hub/hubtest"
)

// runCLI runs lithos-pack in-process with args and returns its stdout.
func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

// TestFetchShardedFixture is issue 2's "done when": fetch the sharded fixture
// (FP8/NVFP4/BF16 tensors, config, tokenizer) from hubtest into a temp HF
// cache, check the huggingface_hub layout, and read it back.
func TestFetchShardedFixture(t *testing.T) {
	hubRoot := filepath.Join("..", "..", "testdata", "hub")
	srv := hubtest.Start(t, hubRoot, hubtest.Options{})
	cache := t.TempDir()
	t.Setenv("HF_ENDPOINT", srv.URL)
	t.Setenv("HF_HUB_CACHE", cache)
	t.Setenv("HF_TOKEN", "")
	t.Setenv("HF_HUB_OFFLINE", "")
	t.Setenv("LITHOS_CACHE", t.TempDir())

	out, err := runCLI(t, "fetch", "lithos-test/tiny-sharded", "--json")
	if err != nil {
		t.Fatalf("fetch: %v\n%s", err, out)
	}
	var res struct {
		Snapshots []struct{ Repo, Path, Role string }
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || len(res.Snapshots) != 1 {
		t.Fatalf("fetch --json printed %q (%v)", out, err)
	}
	snap := res.Snapshots[0].Path
	commit, entries, err := srv.Snapshot("lithos-test", "tiny-sharded")
	if err != nil {
		t.Fatal(err)
	}
	repoDir := filepath.Join(cache, "models--lithos-test--tiny-sharded")
	if snap != filepath.Join(repoDir, "snapshots", commit) {
		t.Fatalf("snapshot %s, want snapshots/%s", snap, commit)
	}
	if ref, _ := os.ReadFile(filepath.Join(repoDir, "refs", "main")); string(ref) != commit {
		t.Errorf("refs/main = %q, want %s", ref, commit)
	}
	for _, e := range entries {
		link, err := os.Readlink(filepath.Join(snap, e.Path))
		if err != nil || link != "../../blobs/"+e.ETag {
			t.Errorf("%s -> %q (%v), want ../../blobs/%s", e.Path, link, err, e.ETag)
		}
		want, _ := os.ReadFile(filepath.Join(hubRoot, "lithos-test", "tiny-sharded", e.Path))
		got, _ := os.ReadFile(filepath.Join(snap, e.Path))
		if !bytes.Equal(got, want) {
			t.Errorf("%s: bytes differ from the served repo", e.Path)
		}
	}

	// Read it back as a sharded safetensors model through the index.
	m, err := safetensors.OpenModel(context.Background(), snap)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if len(m.Files) != 2 {
		t.Errorf("%d shards, want 2", len(m.Files))
	}
	dtypes := map[safetensors.DType]int{}
	for _, name := range m.Names() {
		_, tn, _ := m.Lookup(name)
		dtypes[tn.DType]++
	}
	for _, dt := range []safetensors.DType{safetensors.F8E4M3, safetensors.U8, safetensors.BF16, safetensors.F32} {
		if dtypes[dt] == 0 {
			t.Errorf("no %s tensor read back (dtypes %v)", dt, dtypes)
		}
	}
	for _, f := range []string{"config.json", "tokenizer.json", "tokenizer_config.json"} {
		if _, err := os.Stat(filepath.Join(snap, f)); err != nil {
			t.Errorf("%s missing: %v", f, err)
		}
	}

	// Offline, the same command prints the same snapshot without the server.
	t.Setenv("HF_HUB_OFFLINE", "1")
	t.Setenv("HF_ENDPOINT", "http://127.0.0.1:1")
	out, err = runCLI(t, "fetch", "lithos-test/tiny-sharded")
	if err != nil || strings.TrimSpace(out) != snap {
		t.Errorf("offline fetch printed %q (%v), want %s", out, err, snap)
	}
}

func TestFetchHeadersOnly(t *testing.T) {
	hubRoot := filepath.Join("..", "..", "testdata", "hub")
	srv := hubtest.Start(t, hubRoot, hubtest.Options{})
	t.Setenv("HF_ENDPOINT", srv.URL)
	t.Setenv("HF_HUB_CACHE", t.TempDir())
	t.Setenv("HF_HUB_OFFLINE", "")
	lc := t.TempDir()
	t.Setenv("LITHOS_CACHE", lc)
	out, err := runCLI(t, "fetch", "lithos-test/tiny-sharded", "--headers-only")
	if err != nil {
		t.Fatalf("fetch --headers-only: %v\n%s", err, out)
	}
	dir := strings.TrimSpace(out)
	if !strings.HasPrefix(dir, lc) {
		t.Fatalf("headers-only snapshot %s is not under LITHOS_CACHE %s", dir, lc)
	}
	m, err := safetensors.OpenModel(context.Background(), dir)
	if err != nil {
		t.Fatalf("header-only snapshot does not open as a model: %v", err)
	}
	defer m.Close()
	var fileBytes int64
	for _, r := range srv.Requests() {
		if strings.HasSuffix(r.FileKey, ".safetensors") {
			fileBytes += r.FileBytes
		}
	}
	// One range request per shard of the first 100,000 bytes (or the whole
	// header when it is longer), as huggingface_hub reads remote headers.
	var want int64
	for _, f := range m.Files {
		src, _ := os.Stat(filepath.Join(hubRoot, "lithos-test", "tiny-sharded", filepath.Base(f.Path)))
		want += min(src.Size(), max(100_000, f.Header.DataStart))
		if fi, _ := os.Stat(f.Path); fi.Size() != src.Size() {
			t.Errorf("%s: apparent size %d, want the real %d", f.Path, fi.Size(), src.Size())
		}
	}
	if fileBytes != want {
		t.Errorf("fetched %d bytes of safetensors files, want %d", fileBytes, want)
	}
}

func TestFetchErrors(t *testing.T) {
	srv := hubtest.Start(t, filepath.Join("..", "..", "testdata", "hub"), hubtest.Options{})
	t.Setenv("HF_ENDPOINT", srv.URL)
	t.Setenv("HF_HUB_CACHE", t.TempDir())
	t.Setenv("HF_HUB_OFFLINE", "")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"fetch", "lithos-test/nope"}, "not found"},
		{[]string{"fetch", "lithos-test/tiny-sharded", "--revision", "v2"}, `revision "v2" not found`},
		{[]string{"fetch", "lithos-test/tiny-sharded", "--include", "*.gguf"}, "no file matches"},
		{[]string{"fetch"}, "accepts 1 arg"},
		{[]string{"fetch", "../../etc"}, "invalid repository id"},
	} {
		_, err := runCLI(t, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error containing %q", c.args, err, c.want)
		}
	}
}

// TestFetchRegistryDraft: a registry target brings its DSpark head along,
// unless --no-draft, and only when the target's config is the registered one.
func TestFetchRegistryDraft(t *testing.T) {
	root := t.TempDir()
	target := map[string][]byte{
		"config.json":       []byte(`{"architectures":["Qwen3_5ForConditionalGeneration"],"text_config":{"hidden_size":5120,"num_hidden_layers":64}}`),
		"model.safetensors": []byte("not really"),
	}
	draft := map[string][]byte{"config.json": []byte(`{"architectures":["DSparkDraftModel"]}`)}
	if err := hubtest.WriteRepo(root, "nvidia", "Qwen3.8-27B-NVFP4", target); err != nil {
		t.Fatal(err)
	}
	if err := hubtest.WriteRepo(root, "LithosAI", "Qwen3.8-27B-DSpark-NVFP4", draft); err != nil {
		t.Fatal(err)
	}
	srv := hubtest.Start(t, root, hubtest.Options{})
	t.Setenv("HF_ENDPOINT", srv.URL)
	t.Setenv("HF_HUB_OFFLINE", "")
	cache := t.TempDir()
	t.Setenv("HF_HUB_CACHE", cache)

	out, err := runCLI(t, "fetch", "nvidia/Qwen3.8-27B-NVFP4")
	if err != nil {
		t.Fatalf("fetch: %v", err)
	}
	lines := strings.Fields(out)
	if len(lines) != 2 || !strings.Contains(lines[0], "models--nvidia--Qwen3.8-27B-NVFP4") || !strings.Contains(lines[1], "models--LithosAI--Qwen3.8-27B-DSpark-NVFP4") {
		t.Fatalf("fetch printed %q, want the target's then the draft's snapshot", out)
	}
	if b, err := os.ReadFile(filepath.Join(lines[1], "config.json")); err != nil || !bytes.Equal(b, draft["config.json"]) {
		t.Errorf("draft config not fetched: %v", err)
	}

	t.Setenv("HF_HUB_CACHE", t.TempDir())
	out, err = runCLI(t, "fetch", "nvidia/Qwen3.8-27B-NVFP4", "--no-draft")
	if err != nil || len(strings.Fields(out)) != 1 {
		t.Errorf("--no-draft printed %q (%v), want only the target", out, err)
	}

	// A checkpoint under the registered name but of another shape gets no draft.
	target["config.json"] = []byte(`{"architectures":["Qwen3_5ForConditionalGeneration"],"text_config":{"hidden_size":4096,"num_hidden_layers":32}}`)
	if err := hubtest.WriteRepo(root, "nvidia", "Qwen3.8-27B-NVFP4", target); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HF_HUB_CACHE", t.TempDir())
	_, err = runCLI(t, "fetch", "nvidia/Qwen3.8-27B-NVFP4")
	if err == nil || !strings.Contains(err.Error(), "refusing to pair") {
		t.Errorf("mismatched target config: %v, want a refusal to pair", err)
	}
}
