package hub_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"lithos/hub"
	"lithos/hub/hubtest"
)

// randomBytes returns n deterministic pseudo-random bytes.
func randomBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// newRepo writes one repo under a fresh root and returns the root.
func newRepo(t *testing.T, org, name string, files map[string][]byte) string {
	t.Helper()
	root := t.TempDir()
	if err := hubtest.WriteRepo(root, org, name, files); err != nil {
		t.Fatal(err)
	}
	return root
}

// client returns a client with fast retries and small parts against srv.
func client(t *testing.T, srv *hubtest.Server, opts ...hub.Option) (*hub.Client, string) {
	t.Helper()
	cache := t.TempDir()
	base := []hub.Option{hub.WithCacheDir(cache), hub.WithRetry(5, time.Millisecond), hub.WithPartSize(256 << 10)}
	return hub.NewClient(srv.URL, append(base, opts...)...), cache
}

// checkSnapshot asserts the huggingface_hub cache layout for every file of
// the repo: refs/main holds the commit, snapshot entries are relative
// symlinks into blobs/<etag>, and the blob bytes equal the source bytes.
func checkSnapshot(t *testing.T, srv *hubtest.Server, cache, repo string, files map[string][]byte, dir string) {
	t.Helper()
	org, name, _ := strings.Cut(repo, "/")
	commit, entries, err := srv.Snapshot(org, name)
	if err != nil {
		t.Fatal(err)
	}
	repoDir := filepath.Join(cache, "models--"+org+"--"+name)
	if want := filepath.Join(repoDir, "snapshots", commit); dir != want {
		t.Fatalf("snapshot dir = %s, want %s", dir, want)
	}
	ref, err := os.ReadFile(filepath.Join(repoDir, "refs", "main"))
	if err != nil || string(ref) != commit {
		t.Fatalf("refs/main = %q (%v), want %s", ref, err, commit)
	}
	if _, err := os.Stat(filepath.Join(cache, "CACHEDIR.TAG")); err != nil {
		t.Errorf("no CACHEDIR.TAG: %v", err)
	}
	for _, e := range entries {
		if _, ok := files[e.Path]; !ok {
			continue
		}
		p := filepath.Join(dir, filepath.FromSlash(e.Path))
		target, err := os.Readlink(p)
		if err != nil {
			t.Fatalf("%s is not a symlink: %v", e.Path, err)
		}
		if filepath.IsAbs(target) {
			t.Errorf("%s links to absolute %s; huggingface_hub uses relative links", e.Path, target)
		}
		depth := strings.Count(e.Path, "/")
		want := strings.Repeat("../", depth+2) + "blobs/" + e.ETag
		if filepath.ToSlash(target) != want {
			t.Errorf("%s -> %s, want %s", e.Path, target, want)
		}
		got, err := os.ReadFile(p)
		if err != nil || !bytes.Equal(got, files[e.Path]) {
			t.Errorf("%s: content differs from the repo's (%v)", e.Path, err)
		}
		if e.LFS {
			sum := sha256.Sum256(got)
			if hex.EncodeToString(sum[:]) != e.ETag {
				t.Errorf("%s: blob name is not the content sha256", e.Path)
			}
		}
	}
	// No partial or state files left behind.
	filepath.Walk(repoDir, func(p string, info os.FileInfo, err error) error {
		if err == nil && strings.Contains(p, ".lithos-partial") {
			t.Errorf("leftover partial %s", p)
		}
		return nil
	})
}

func TestDownloadSnapshotLayout(t *testing.T) {
	files := map[string][]byte{
		"config.json":                        []byte(`{"model_type":"qwen3_5"}`),
		"tokenizer.json":                     []byte(`{"version":"1.0"}`),
		"sub/dir/notes.txt":                  []byte("hello\n"),
		"model-00001-of-00002.safetensors":   randomBytes(1, 700_000),
		"model-00002-of-00002.safetensors":   randomBytes(2, 1_300_000),
		"model.safetensors.index.json":       []byte(`{"weight_map":{}}`),
		"big-regular-but-lfs-by-size.pack.x": randomBytes(3, 1<<20),
	}
	srv := hubtest.Start(t, newRepo(t, "org", "model", files), hubtest.Options{PageSize: 3})
	c, cache := client(t, srv)
	var total, seen atomic.Int64
	dir, err := c.Download(context.Background(), "org/model", hub.DownloadOptions{
		Progress: func(tot, d int64) { total.Store(tot); seen.Add(d) },
	})
	if err != nil {
		t.Fatal(err)
	}
	checkSnapshot(t, srv, cache, "org/model", files, dir)
	var want int64
	for _, b := range files {
		want += int64(len(b))
	}
	if total.Load() != want || seen.Load() != want {
		t.Errorf("progress total=%d seen=%d, want %d", total.Load(), seen.Load(), want)
	}

	// A second fetch reuses every blob: only API calls and HEAD-free.
	srv.ResetRequests()
	if _, err := c.Download(context.Background(), "org/model", hub.DownloadOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, r := range srv.Requests() {
		if r.FileBytes > 0 {
			t.Errorf("second fetch downloaded %s again (%d bytes)", r.FileKey, r.FileBytes)
		}
	}

	// Offline: the cached snapshot, no request at all.
	srv.ResetRequests()
	off := hub.NewClient(srv.URL, hub.WithCacheDir(cache), hub.WithOffline(true))
	odir, err := off.Download(context.Background(), "org/model", hub.DownloadOptions{})
	if err != nil || odir != dir {
		t.Fatalf("offline download = %s, %v; want %s", odir, err, dir)
	}
	if n := len(srv.Requests()); n != 0 {
		t.Errorf("offline download sent %d requests", n)
	}
	if got, err := hub.SnapshotDir(cache, "org/model", "main"); err != nil || got != dir {
		t.Errorf("SnapshotDir = %s, %v", got, err)
	}
}

func TestDownloadIncludeExclude(t *testing.T) {
	files := map[string][]byte{
		"config.json": []byte(`{}`), "a.safetensors": randomBytes(4, 1000), "b.safetensors": randomBytes(5, 1000),
	}
	srv := hubtest.Start(t, newRepo(t, "org", "m", files), hubtest.Options{})
	c, _ := client(t, srv)
	dir, err := c.Download(context.Background(), "org/m", hub.DownloadOptions{Include: []string{"*.safetensors"}, Exclude: []string{"b.*"}})
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]bool{"a.safetensors": true, "b.safetensors": false, "config.json": false} {
		_, err := os.Stat(filepath.Join(dir, p))
		if (err == nil) != want {
			t.Errorf("%s present=%v, want %v", p, err == nil, want)
		}
	}
	if _, err := c.Download(context.Background(), "org/m", hub.DownloadOptions{Include: []string{"*.gguf"}}); err == nil {
		t.Error("a pattern matching nothing was not reported")
	}
}

// TestResumeAfterKill cancels a download half way (as Ctrl-C does), then runs
// it again: the second run must fetch only what is missing.
func TestResumeAfterKill(t *testing.T) {
	const size = 4 << 20
	files := map[string][]byte{"w.safetensors": randomBytes(7, size)}
	srv := hubtest.Start(t, newRepo(t, "org", "big", files), hubtest.Options{})
	c, cache := client(t, srv, hub.WithPartSize(128<<10))
	ctx, cancel := context.WithCancel(context.Background())
	var got atomic.Int64
	_, err := c.Download(ctx, "org/big", hub.DownloadOptions{MaxWorkers: 2, Progress: func(_, d int64) {
		if got.Add(d) > size/2 {
			cancel()
		}
	}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted download returned %v, want context.Canceled", err)
	}
	blobs, _ := filepath.Glob(filepath.Join(cache, "models--org--big", "blobs", "*"))
	var partial, state bool
	for _, b := range blobs {
		partial = partial || strings.HasSuffix(b, ".lithos-partial")
		state = state || strings.HasSuffix(b, ".lithos-partial.json")
		if !strings.Contains(b, ".lithos-partial") {
			t.Errorf("an interrupted download published %s", b)
		}
	}
	if !partial || !state {
		t.Fatalf("no partial+progress kept after the interrupt: %v", blobs)
	}
	_, key := "", "org/big/w.safetensors"
	before := srv.FileStats(key).Bytes
	dir, err := c.Download(context.Background(), "org/big", hub.DownloadOptions{MaxWorkers: 2})
	if err != nil {
		t.Fatal(err)
	}
	second := srv.FileStats(key).Bytes - before
	if second >= size*3/4 {
		t.Errorf("resume fetched %d of %d bytes: it restarted instead of resuming", second, size)
	}
	if second == 0 {
		t.Errorf("resume fetched nothing, but the first run was cut half way")
	}
	checkSnapshot(t, srv, cache, "org/big", files, dir)
}

// TestDropMidStream: the connection drops in the middle of a range; the
// client retries from the byte it reached (Range: bytes=N-).
func TestDropMidStream(t *testing.T) {
	files := map[string][]byte{"w.bin": randomBytes(8, 600_000)}
	srv := hubtest.Start(t, newRepo(t, "org", "drop", files), hubtest.Options{})
	srv.Faults().DropAfter("org/drop/w.bin", 100_000)
	c, cache := client(t, srv, hub.WithPartSize(1<<20))
	dir, err := c.Download(context.Background(), "org/drop", hub.DownloadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkSnapshot(t, srv, cache, "org/drop", files, dir)
	var ranges []string
	for _, r := range srv.Requests() {
		if r.FileKey == "org/drop/w.bin" && r.Range != "" {
			ranges = append(ranges, r.Range)
		}
	}
	if len(ranges) != 2 || ranges[0] != "bytes=0-599999" || ranges[1] != "bytes=100000-599999" {
		t.Errorf("range requests %v, want the full range then a resume from byte 100000", ranges)
	}
}

func TestRetryOn429And503(t *testing.T) {
	files := map[string][]byte{"config.json": []byte(`{"a":1}`), "w.bin": randomBytes(9, 10_000)}
	srv := hubtest.Start(t, newRepo(t, "org", "rl", files), hubtest.Options{})
	srv.Faults().RateLimit("/api/models/org/rl/revision/main", 1, 1)
	srv.Faults().Status("org/rl/w.bin", 503, 2)
	c, cache := client(t, srv)
	dir, err := c.Download(context.Background(), "org/rl", hub.DownloadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkSnapshot(t, srv, cache, "org/rl", files, dir)
	var statuses []int
	for _, r := range srv.Requests() {
		if r.Fault != "" {
			statuses = append(statuses, r.Status)
		}
	}
	if len(statuses) != 3 {
		t.Errorf("faults fired on %v, want one 429 and two 503", statuses)
	}

	// Persistent 429: the error says so after the retries.
	srv.Faults().RateLimit("/api/models/org/rl/revision/main", 0, 10)
	c2 := hub.NewClient(srv.URL, hub.WithCacheDir(t.TempDir()), hub.WithRetry(2, time.Millisecond))
	_, err = c2.Download(context.Background(), "org/rl", hub.DownloadOptions{})
	if !errors.Is(err, hub.ErrRateLimited) {
		t.Errorf("persistent 429 gave %v, want ErrRateLimited", err)
	}
}

func TestGatedRepo(t *testing.T) {
	files := map[string][]byte{"config.json": []byte(`{}`), "w.safetensors": randomBytes(10, 5000)}
	root := newRepo(t, "org", "gated", files)
	opts := hubtest.Options{Repos: map[string]hubtest.RepoSettings{"org/gated": {Gated: "manual", Token: "hf_good"}}}
	srv := hubtest.StartWithBlobHost(t, root, opts)

	c, _ := client(t, srv)
	_, err := c.Download(context.Background(), "org/gated", hub.DownloadOptions{})
	if !errors.Is(err, hub.ErrGatedRepo) || !strings.Contains(err.Error(), "HF_TOKEN") {
		t.Fatalf("anonymous fetch of a gated repo: %v; want ErrGatedRepo telling to set HF_TOKEN", err)
	}
	c, _ = client(t, srv, hub.WithToken("hf_bad"))
	_, err = c.Download(context.Background(), "org/gated", hub.DownloadOptions{})
	var he *hub.HTTPError
	if !errors.Is(err, hub.ErrGatedRepo) || !errors.As(err, &he) || he.Status != 403 {
		t.Fatalf("wrong token: %v; want a 403 GatedRepo", err)
	}
	// A fresh server, so no request of the failed attempts above (a cancelled
	// request can still arrive late) is counted below.
	srv = hubtest.StartWithBlobHost(t, root, opts)
	c, cache := client(t, srv, hub.WithToken("hf_good"))
	dir, err := c.Download(context.Background(), "org/gated", hub.DownloadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkSnapshot(t, srv, cache, "org/gated", files, dir)
	var blobReqs int
	for _, r := range srv.Requests() {
		onBlobHost := strings.HasPrefix(r.Host, "localhost:")
		if onBlobHost {
			blobReqs++
			if r.Authorization != "" {
				t.Errorf("token sent to the blob host: %s %s", r.Method, r.Path)
			}
		} else if r.Authorization != "Bearer hf_good" {
			t.Errorf("token missing on a Hub request: %s %s", r.Method, r.Path)
		}
	}
	if blobReqs == 0 {
		t.Error("no request reached the blob host; the cross-host path was not exercised")
	}
}

func TestCorruptedBlob(t *testing.T) {
	files := map[string][]byte{"good.safetensors": randomBytes(11, 3000), "bad.safetensors": randomBytes(12, 300_000)}
	srv := hubtest.Start(t, newRepo(t, "org", "cor", files), hubtest.Options{})
	c, cache := client(t, srv)
	// First publish the good file alone.
	if _, err := c.Download(context.Background(), "org/cor", hub.DownloadOptions{Include: []string{"good.*"}}); err != nil {
		t.Fatal(err)
	}
	srv.Faults().Corrupt("org/cor/bad.safetensors", 123_456)
	_, err := c.Download(context.Background(), "org/cor", hub.DownloadOptions{})
	if !errors.Is(err, hub.ErrChecksum) {
		t.Fatalf("corrupted blob gave %v, want ErrChecksum", err)
	}
	_, entries, _ := srv.Snapshot("org", "cor")
	for _, e := range entries {
		p := filepath.Join(cache, "models--org--cor", "blobs", e.ETag)
		_, statErr := os.Stat(p)
		switch e.Path {
		case "bad.safetensors":
			if statErr == nil {
				t.Error("the corrupted blob was published under its sha256 name")
			}
			if _, err := os.Stat(p + ".lithos-partial"); err == nil {
				t.Error("the corrupted partial was kept")
			}
		case "good.safetensors":
			if statErr != nil {
				t.Errorf("the good blob published earlier was lost: %v", statErr)
			}
		}
	}
	// The next run fetches it correctly.
	dir, err := c.Download(context.Background(), "org/cor", hub.DownloadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkSnapshot(t, srv, cache, "org/cor", files, dir)
}

func TestStallWatchdog(t *testing.T) {
	files := map[string][]byte{"w.bin": randomBytes(13, 200_000)}
	srv := hubtest.Start(t, newRepo(t, "org", "stall", files), hubtest.Options{})
	srv.Faults().Stall("org/stall/w.bin", 50_000, 30*time.Second)
	c, cache := client(t, srv, hub.WithStallTimeout(200*time.Millisecond))
	start := time.Now()
	dir, err := c.Download(context.Background(), "org/stall", hub.DownloadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if time.Since(start) > 20*time.Second {
		t.Errorf("the stalled request was not aborted by the watchdog")
	}
	checkSnapshot(t, srv, cache, "org/stall", files, dir)
}

func TestDiskFullKeepsPartial(t *testing.T) {
	files := map[string][]byte{"w.bin": randomBytes(14, 1<<20)}
	srv := hubtest.Start(t, newRepo(t, "org", "full", files), hubtest.Options{})
	c, cache := client(t, srv)
	var written atomic.Int64
	hub.SetWriteAtForTest(c, func(f *os.File, p []byte, off int64) (int, error) {
		if written.Add(int64(len(p))) > 600_000 {
			return 0, fmt.Errorf("write %s: %w", f.Name(), syscall.ENOSPC)
		}
		return f.WriteAt(p, off)
	})
	_, err := c.Download(context.Background(), "org/full", hub.DownloadOptions{MaxWorkers: 1})
	if err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("full disk gave %v, want a disk-full error", err)
	}
	parts, _ := filepath.Glob(filepath.Join(cache, "models--org--full", "blobs", "*.lithos-partial*"))
	if len(parts) != 2 {
		t.Fatalf("partial and progress not kept for resume: %v", parts)
	}
	hub.SetWriteAtForTest(c, (*os.File).WriteAt)
	dir, err := c.Download(context.Background(), "org/full", hub.DownloadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkSnapshot(t, srv, cache, "org/full", files, dir)
}

func TestRenamedRepoRelativeRedirect(t *testing.T) {
	files := map[string][]byte{"config.json": []byte(`{"x":2}`), "w.safetensors": randomBytes(15, 2000)}
	srv := hubtest.Start(t, newRepo(t, "org", "new", files), hubtest.Options{Renames: map[string]string{"org/old": "org/new"}})
	c, _ := client(t, srv)
	rf, err := c.OpenRemote(context.Background(), "org/old", "main", "config.json")
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, rf.Size())
	if _, err := rf.ReadAt(buf, 0); err != nil && err != io.EOF || string(buf) != `{"x":2}` {
		t.Fatalf("read through a renamed repo: %q, %v", buf, err)
	}
}

func TestErrorsNameTheProblem(t *testing.T) {
	srv := hubtest.Start(t, newRepo(t, "org", "m", map[string][]byte{"config.json": []byte(`{}`)}), hubtest.Options{})
	c, _ := client(t, srv)
	ctx := context.Background()
	if _, err := c.Download(ctx, "org/missing", hub.DownloadOptions{}); !errors.Is(err, hub.ErrRepoNotFound) {
		t.Errorf("missing repo: %v", err)
	}
	if _, err := c.Download(ctx, "org/m", hub.DownloadOptions{Revision: "v9"}); !errors.Is(err, hub.ErrRevisionNotFound) || !strings.Contains(err.Error(), `"v9"`) {
		t.Errorf("missing revision: %v", err)
	}
	if _, err := c.OpenRemote(ctx, "org/m", "main", "nope.json"); !errors.Is(err, hub.ErrEntryNotFound) || !strings.Contains(err.Error(), "nope.json") {
		t.Errorf("missing file: %v", err)
	}
	if _, err := c.Download(ctx, "../etc", hub.DownloadOptions{}); err == nil {
		t.Error("a hostile repo id was accepted")
	}
}

// TestUnsafeListingRefused serves a tree listing with hostile paths from a
// fake Hub: nothing may be written, and the error names the path.
func TestUnsafeListingRefused(t *testing.T) {
	for _, bad := range []string{"../../evil", "/etc/passwd", `a\..\b`, "a/../../b"} {
		commit := strings.Repeat("a", 40)
		fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch {
			case strings.Contains(r.URL.Path, "/revision/"):
				fmt.Fprintf(w, `{"sha":%q}`, commit)
			case strings.Contains(r.URL.Path, "/tree/"):
				fmt.Fprintf(w, `[{"type":"file","path":%q,"oid":"%s","size":3}]`, bad, strings.Repeat("b", 40))
			default:
				t.Errorf("unexpected request %s", r.URL.Path)
				http.NotFound(w, r)
			}
		}))
		cache := t.TempDir()
		c := hub.NewClient(fake.URL, hub.WithCacheDir(cache), hub.WithRetry(0, time.Millisecond))
		_, err := c.Download(context.Background(), "org/m", hub.DownloadOptions{})
		fake.Close()
		if !errors.Is(err, hub.ErrUnsafePath) || !strings.Contains(err.Error(), fmt.Sprintf("%q", bad)) {
			t.Errorf("listing path %q: %v, want ErrUnsafePath naming it", bad, err)
		}
		if entries, _ := os.ReadDir(filepath.Join(cache, "models--org--m", "snapshots")); len(entries) != 0 {
			t.Errorf("listing path %q: something was written to snapshots/", bad)
		}
	}
}

func TestRemoteReadAt(t *testing.T) {
	data := randomBytes(16, 50_000)
	srv := hubtest.StartWithBlobHost(t, newRepo(t, "org", "r", map[string][]byte{"w.safetensors": data}), hubtest.Options{})
	c, _ := client(t, srv)
	rf, err := c.OpenRemote(context.Background(), "org/r", "main", "w.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	if rf.Size() != int64(len(data)) {
		t.Fatalf("size %d", rf.Size())
	}
	for _, c := range []struct{ off, n int }{{0, 10}, {49_990, 10}, {1234, 5000}} {
		buf := make([]byte, c.n)
		if _, err := rf.ReadAt(buf, int64(c.off)); err != nil && err != io.EOF {
			t.Fatal(err)
		}
		if !bytes.Equal(buf, data[c.off:c.off+c.n]) {
			t.Errorf("ReadAt(%d, %d) differs", c.off, c.n)
		}
	}
	buf := make([]byte, 100)
	n, err := rf.ReadAt(buf, 49_950)
	if n != 50 || err != io.EOF || !bytes.Equal(buf[:50], data[49_950:]) {
		t.Errorf("read across the end: n=%d err=%v", n, err)
	}
	if rf.BytesFetched() != 10+10+5000+50 {
		t.Errorf("BytesFetched = %d, want exactly the bytes asked for", rf.BytesFetched())
	}
}
