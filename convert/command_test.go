package convert

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"lithos/hub"
)

// cacheRepo synthesizes an embedded spec as the main snapshot of repo in an
// HF cache layout (refs/main → snapshots/<commit>).
func cacheRepo(t *testing.T, cache, spec, repo string) string {
	t.Helper()
	folder := filepath.Join(cache, "models--"+strings.ReplaceAll(repo, "/", "--"))
	commit := strings.Repeat("c0", 20)
	if _, err := SynthHeadersFromArg(context.Background(), spec, filepath.Join(folder, "snapshots", commit)); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(folder, "refs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(folder, "refs", "main"), []byte(commit), 0o644); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(folder, "snapshots", commit)
}

func TestRunAuditAutoDraftFromCache(t *testing.T) {
	cache := t.TempDir()
	snap := cacheRepo(t, cache, spec27B, repo27B)
	cacheRepo(t, cache, specHeadNVFP4, repoHeadNVFP4)
	// The endpoint is unreachable: everything must come from the cache.
	c := hub.NewClient("http://127.0.0.1:1", hub.WithCacheDir(cache), hub.WithRetry(0, 0))
	for _, target := range []string{repo27B, snap} {
		r, err := RunAudit(context.Background(), c, AuditRequest{Target: target, Draft: DraftAuto, Accept: 3.39, Chip: "m5-max-40c"})
		if err != nil {
			t.Fatalf("%s: %v", target, err)
		}
		if r.Draft == nil || !strings.Contains(r.Draft.Location, "models--LithosAI--Qwen3.8-27B-DSpark-NVFP4") ||
			r.Ceilings.ShortContext.Round.AcceptTokens != 3.39 || r.Source.Kind != "local" {
			t.Errorf("%s: draft %+v", target, r.Draft)
		}
	}
	// No registered head: the audit goes on without one and says so.
	other := synthNamed(t, spec27B)
	r, err := RunAudit(context.Background(), c, AuditRequest{Target: other, Draft: DraftAuto})
	if err != nil {
		t.Fatal(err)
	}
	if r.Draft != nil || !strings.Contains(strings.Join(r.Warnings, "\n"), "no draft head is registered") {
		t.Errorf("draft %+v warnings %v", r.Draft, r.Warnings)
	}
	if _, err := RunAudit(context.Background(), c, AuditRequest{Target: other, Chip: "m9"}); err == nil {
		t.Error("unknown chip accepted")
	}
}

func TestSynthHeadersFromArg(t *testing.T) {
	dir := t.TempDir()
	res, err := SynthHeadersFromArg(context.Background(), specHeadNVFP4, filepath.Join(dir, "head"))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := res.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"model-00001.safetensors", "model-00003.safetensors", "model.safetensors.index.json",
		"136 tensors", "1,136,243,862 bytes of tensor data"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("listing lacks %q:\n%s", want, b.String())
		}
	}
	if _, err := SynthHeadersFromArg(context.Background(), specHeadNVFP4, filepath.Join(dir, "head")); err == nil ||
		!strings.Contains(err.Error(), "not empty") {
		t.Errorf("non-empty output directory: %v", err)
	}
}
