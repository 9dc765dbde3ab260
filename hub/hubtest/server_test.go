package hubtest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Independent re-computations of the Hub's ids (not the package's functions).
func sha256Hex(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

func gitSHA1(b []byte) string {
	h := sha1.New()
	h.Write([]byte("blob " + strconv.Itoa(len(b)) + "\x00"))
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}

func randBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// fixture is the content of the test repos.
type fixture struct {
	root  string
	tiny  map[string][]byte // acme/tiny
	gated map[string][]byte // acme/gated
}

const testLFSThreshold = 4096

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{root: t.TempDir()}
	f.tiny = map[string][]byte{
		"config.json":               []byte(`{"model_type": "qwen3_5", "hidden_size": 64}` + "\n"),
		"model.safetensors":         randBytes(1, 3000),                // LFS by extension
		"big.dat":                   randBytes(2, testLFSThreshold+17), // LFS by size
		"small.dat":                 randBytes(3, testLFSThreshold-1),  // regular, just under the threshold
		"sub/nested.txt":            []byte("nested\n"),
		"sub/deeper/weights.bin":    randBytes(4, 100),
		"tokenizer.json":            []byte(`{"version": "1.0"}`),
		"empty.txt":                 {},
		"name with space+plus.json": []byte("{}"),
	}
	if err := WriteRepo(f.root, "acme", "tiny", f.tiny); err != nil {
		t.Fatal(err)
	}
	f.gated = map[string][]byte{
		"config.json":       []byte(`{"gated": true}`),
		"model.safetensors": randBytes(5, 2000),
	}
	if err := WriteRepo(f.root, "acme", "gated", f.gated); err != nil {
		t.Fatal(err)
	}
	if err := WriteSettings(f.root, "acme", "gated", RepoSettings{Gated: "manual", Token: "tok-gated"}); err != nil {
		t.Fatal(err)
	}
	if err := WriteRepo(f.root, "acme", "private", map[string][]byte{"config.json": []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	if err := WriteSettings(f.root, "acme", "private", RepoSettings{Private: true, Tokens: []string{"tok-a", "tok-private"}}); err != nil {
		t.Fatal(err)
	}
	// A file outside any repo that must never be served.
	if err := os.WriteFile(filepath.Join(f.root, "SECRET"), []byte("top-secret-marker"), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) start(t *testing.T, opts Options) *Server {
	t.Helper()
	if opts.LFSThreshold == 0 {
		opts.LFSThreshold = testLFSThreshold
	}
	return Start(t, f.root, opts)
}

// noRedirect is a client that returns 3xx responses as they are.
var noRedirect = &http.Client{
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	Timeout:       20 * time.Second,
}

type hdr map[string]string

func do(t *testing.T, method, u string, h hdr) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, u, err)
	}
	return resp, body
}

func wantStatus(t *testing.T, resp *http.Response, want int) {
	t.Helper()
	if resp.StatusCode != want {
		t.Fatalf("%s %s: status %d, want %d (X-Error-Code %q, X-Error-Message %q)", resp.Request.Method,
			resp.Request.URL, resp.StatusCode, want, resp.Header.Get("X-Error-Code"), resp.Header.Get("X-Error-Message"))
	}
}

func wantHeader(t *testing.T, resp *http.Response, key, want string) {
	t.Helper()
	if got := resp.Header.Get(key); got != want {
		t.Errorf("%s %s: %s = %q, want %q", resp.Request.Method, resp.Request.URL, key, got, want)
	}
}

// wantHubError checks a Hub-style error response: status, X-Error-Code, X-Error-Message and the JSON body.
func wantHubError(t *testing.T, resp *http.Response, body []byte, status int, code string) {
	t.Helper()
	wantStatus(t, resp, status)
	wantHeader(t, resp, "X-Error-Code", code)
	msg := resp.Header.Get("X-Error-Message")
	if msg == "" {
		t.Errorf("%s: no X-Error-Message", resp.Request.URL)
	}
	if resp.Request.Method == http.MethodHead {
		return
	}
	var e struct{ Error string }
	if err := json.Unmarshal(body, &e); err != nil || e.Error == "" {
		t.Errorf("%s: error body %q: want {\"error\": ...} (%v)", resp.Request.URL, body, err)
	} else if e.Error != msg {
		t.Errorf("%s: body error %q != X-Error-Message %q", resp.Request.URL, e.Error, msg)
	}
}

func TestLFSPointerMatchesHub(t *testing.T) {
	// Values the Hub publishes for gpt2's model.safetensors (GET /api/models/gpt2?blobs=true, as quoted in
	// public code): size 548105171, lfs.sha256 248dfc39…, pointerSize 134, blobId 44b36d6e….
	const sha = "248dfc3911869ec493c76e65bf2fcf7f615828b0254c12b473182f0f81d3a707"
	ptr := lfsPointer(sha, 548105171)
	if len(ptr) != 134 {
		t.Errorf("pointer size %d, want 134", len(ptr))
	}
	if got := gitBlobSHA1(ptr); got != "44b36d6e32d13c8fb28b0feab0ac8bfefa7efeda" {
		t.Errorf("pointer blob id %s, want 44b36d6e32d13c8fb28b0feab0ac8bfefa7efeda", got)
	}
}

func TestModelInfo(t *testing.T) {
	f := newFixture(t)
	srv := f.start(t, Options{})
	commit, _, err := srv.Snapshot("acme", "tiny")
	if err != nil {
		t.Fatal(err)
	}
	type lfs struct {
		Size        int64
		SHA256      string
		PointerSize int
	}
	type sib struct {
		RFilename string
		BlobID    *string
		Size      *int64
		LFS       *lfs
	}
	type info struct {
		ID, ModelID, Author, SHA string
		Private                  bool
		Gated                    any
		Siblings                 []sib
		UsedStorage              int64
	}
	var paths []string
	var used int64
	for p, b := range f.tiny {
		paths = append(paths, p)
		used += int64(len(b))
	}
	sort.Strings(paths)

	for _, u := range []string{"/api/models/acme/tiny", "/api/models/acme/tiny/revision/main", "/api/models/acme/tiny/revision/" + commit} {
		resp, body := do(t, "GET", srv.URL+u, nil)
		wantStatus(t, resp, 200)
		wantHeader(t, resp, "Content-Type", "application/json; charset=utf-8")
		var mi info
		if err := json.Unmarshal(body, &mi); err != nil {
			t.Fatal(err)
		}
		if mi.ID != "acme/tiny" || mi.ModelID != "acme/tiny" || mi.Author != "acme" || mi.SHA != commit || mi.Private || mi.Gated != false {
			t.Errorf("%s: %+v", u, mi)
		}
		if mi.UsedStorage != used {
			t.Errorf("usedStorage %d, want %d", mi.UsedStorage, used)
		}
		var got []string
		for _, s := range mi.Siblings {
			got = append(got, s.RFilename)
			if s.BlobID != nil || s.Size != nil || s.LFS != nil {
				t.Errorf("%s: sibling %s has blob fields without ?blobs=true", u, s.RFilename)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(paths) {
			t.Errorf("%s: siblings %q, want %q", u, got, paths)
		}
	}

	resp, body := do(t, "GET", srv.URL+"/api/models/acme/tiny?blobs=true", nil)
	wantStatus(t, resp, 200)
	var mi info
	if err := json.Unmarshal(body, &mi); err != nil {
		t.Fatal(err)
	}
	lfsFiles := map[string]bool{"model.safetensors": true, "big.dat": true, "sub/deeper/weights.bin": true}
	for _, s := range mi.Siblings {
		b := f.tiny[s.RFilename]
		if s.Size == nil || *s.Size != int64(len(b)) {
			t.Errorf("%s: size %v, want %d", s.RFilename, s.Size, len(b))
		}
		if lfsFiles[s.RFilename] {
			ptr := fmt.Sprintf("version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n", sha256Hex(b), len(b))
			want := lfs{Size: int64(len(b)), SHA256: sha256Hex(b), PointerSize: len(ptr)}
			if s.LFS == nil || *s.LFS != want {
				t.Errorf("%s: lfs %+v, want %+v", s.RFilename, s.LFS, want)
			}
			if s.BlobID == nil || *s.BlobID != gitSHA1([]byte(ptr)) {
				t.Errorf("%s: blobId %v, want git id of the pointer %s", s.RFilename, s.BlobID, gitSHA1([]byte(ptr)))
			}
		} else {
			if s.LFS != nil {
				t.Errorf("%s: unexpected lfs %+v", s.RFilename, s.LFS)
			}
			if s.BlobID == nil || *s.BlobID != gitSHA1(b) {
				t.Errorf("%s: blobId %v, want %s", s.RFilename, s.BlobID, gitSHA1(b))
			}
		}
	}

	// expand keeps only the asked fields plus _id and id.
	resp, body = do(t, "GET", srv.URL+"/api/models/acme/tiny?expand=sha&expand=gated", nil)
	wantStatus(t, resp, 200)
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if fmt.Sprint(keys) != "[_id gated id sha]" || m["sha"] != commit || m["gated"] != false {
		t.Errorf("expand: %v", m)
	}

	// Gated repos show their metadata.
	resp, body = do(t, "GET", srv.URL+"/api/models/acme/gated", nil)
	wantStatus(t, resp, 200)
	if err := json.Unmarshal(body, &mi); err != nil || mi.Gated != "manual" {
		t.Errorf("gated repo info: gated %v (%v)", mi.Gated, err)
	}
}

type treeItem struct {
	Type string
	OID  string
	Size int64
	Path string
	LFS  *struct {
		OID         string
		Size        int64
		PointerSize int
	}
	LastCommit *struct{ ID, Title, Date string }
}

// listTree follows the Link pagination and returns all entries and the number of pages.
func listTree(t *testing.T, u string) ([]treeItem, int) {
	t.Helper()
	var all []treeItem
	pages := 0
	for u != "" {
		resp, body := do(t, "GET", u, nil)
		wantStatus(t, resp, 200)
		pages++
		var page []treeItem
		if err := json.Unmarshal(body, &page); err != nil {
			t.Fatalf("%s: %v", u, err)
		}
		all = append(all, page...)
		u = ""
		if l := resp.Header.Get("Link"); l != "" {
			rest, ok := strings.CutPrefix(l, "<")
			next, _, ok2 := strings.Cut(rest, `>; rel="next"`)
			if !ok || !ok2 {
				t.Fatalf("bad Link %q", l)
			}
			u = next
		}
		if pages > 100 {
			t.Fatal("pagination does not end")
		}
	}
	return all, pages
}

func TestTree(t *testing.T) {
	f := newFixture(t)
	srv := f.start(t, Options{PageSize: 3})
	commit, _, _ := srv.Snapshot("acme", "tiny")

	all, pages := listTree(t, srv.URL+"/api/models/acme/tiny/tree/main?recursive=true")
	// 9 files + 2 directories, 3 per page.
	if len(all) != 11 || pages != 4 {
		t.Fatalf("recursive listing: %d entries in %d pages, want 11 in 4", len(all), pages)
	}
	seen := map[string]bool{}
	for i, e := range all {
		if seen[e.Path] {
			t.Errorf("duplicate %s", e.Path)
		}
		seen[e.Path] = true
		if i > 0 && all[i-1].Path >= e.Path {
			t.Errorf("not sorted: %s before %s", all[i-1].Path, e.Path)
		}
		if e.Type == "directory" {
			if e.Path != "sub" && e.Path != "sub/deeper" || e.Size != 0 || len(e.OID) != 40 || e.LFS != nil {
				t.Errorf("directory entry %+v", e)
			}
			continue
		}
		b, ok := f.tiny[e.Path]
		if !ok || e.Type != "file" || e.Size != int64(len(b)) {
			t.Errorf("file entry %+v", e)
			continue
		}
		isLFS := strings.HasSuffix(e.Path, ".safetensors") || strings.HasSuffix(e.Path, ".bin") || len(b) >= testLFSThreshold
		if isLFS {
			ptr := fmt.Sprintf("version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n", sha256Hex(b), len(b))
			if e.LFS == nil || e.LFS.OID != sha256Hex(b) || e.LFS.Size != int64(len(b)) || e.LFS.PointerSize != len(ptr) || e.OID != gitSHA1([]byte(ptr)) {
				t.Errorf("LFS entry %+v (lfs %+v)", e, e.LFS)
			}
		} else if e.LFS != nil || e.OID != gitSHA1(b) {
			t.Errorf("regular entry %+v, want oid %s", e, gitSHA1(b))
		}
	}

	// Non-recursive root: direct children only (8 files at the root... and "sub").
	top, _ := listTree(t, srv.URL+"/api/models/acme/tiny/tree/main")
	var names []string
	for _, e := range top {
		names = append(names, e.Path)
	}
	want := "[big.dat config.json empty.txt model.safetensors name with space+plus.json small.dat sub tokenizer.json]"
	if fmt.Sprint(names) != want {
		t.Errorf("root listing %v, want %s", names, want)
	}

	// A subdirectory, at the commit, with expand: lastCommit.
	sub, _ := listTree(t, srv.URL+"/api/models/acme/tiny/tree/"+commit+"/sub?expand=true")
	names = nil
	for _, e := range sub {
		names = append(names, e.Path)
		if e.LastCommit == nil || e.LastCommit.ID != commit {
			t.Errorf("%s: lastCommit %+v", e.Path, e.LastCommit)
		}
	}
	if fmt.Sprint(names) != "[sub/deeper sub/nested.txt]" {
		t.Errorf("sub listing %v", names)
	}
	sub, _ = listTree(t, srv.URL+"/api/models/acme/tiny/tree/main/sub/?recursive=1")
	if len(sub) != 3 {
		t.Errorf("sub recursive: %d entries, want 3", len(sub))
	}

	// The Link header is absolute, on this server, and keeps the other parameters.
	resp, _ := do(t, "GET", srv.URL+"/api/models/acme/tiny/tree/main?recursive=true&expand=false", nil)
	l := resp.Header.Get("Link")
	if !strings.HasPrefix(l, "<"+srv.URL+"/api/models/acme/tiny/tree/main?") || !strings.Contains(l, "recursive=true") ||
		!strings.Contains(l, "cursor=") || !strings.HasSuffix(l, `>; rel="next"`) {
		t.Errorf("Link %q", l)
	}

	// Errors.
	resp, body := do(t, "GET", srv.URL+"/api/models/acme/tiny/tree/main/nope", nil)
	wantHubError(t, resp, body, 404, "EntryNotFound")
	wantHeader(t, resp, "X-Repo-Commit", commit)
	resp, body = do(t, "GET", srv.URL+"/api/models/acme/tiny/tree/main/config.json", nil)
	wantHubError(t, resp, body, 404, "EntryNotFound")
	resp, body = do(t, "GET", srv.URL+"/api/models/acme/tiny/tree/v2", nil)
	wantHubError(t, resp, body, 404, "RevisionNotFound")
	resp, _ = do(t, "GET", srv.URL+"/api/models/acme/tiny/tree/main?cursor=!!!", nil)
	wantStatus(t, resp, 400)
}

func TestPathsInfo(t *testing.T) {
	f := newFixture(t)
	srv := f.start(t, Options{})
	form := url.Values{"paths": {"sub/nested.txt", "missing.txt", "model.safetensors", "sub", "sub/nested.txt"}}
	resp, err := http.PostForm(srv.URL+"/api/models/acme/tiny/paths-info/main", form)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	wantStatus(t, resp, 200)
	var got []treeItem
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].Path != "sub/nested.txt" || got[0].OID != gitSHA1(f.tiny["sub/nested.txt"]) ||
		got[1].Path != "model.safetensors" || got[1].LFS == nil || got[1].LFS.OID != sha256Hex(f.tiny["model.safetensors"]) ||
		got[2].Path != "sub" || got[2].Type != "directory" {
		t.Errorf("paths-info: %s", body)
	}
	resp, err = http.PostForm(srv.URL+"/api/models/acme/tiny/paths-info/main", url.Values{"paths": {"../SECRET"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	wantStatus(t, resp, 400)
	resp, _ = do(t, "GET", srv.URL+"/api/models/acme/tiny/paths-info/main", nil)
	wantStatus(t, resp, 405)
	wantHeader(t, resp, "Allow", "POST")
}

func TestResolveRegular(t *testing.T) {
	f := newFixture(t)
	srv := f.start(t, Options{})
	commit, _, _ := srv.Snapshot("acme", "tiny")
	for _, p := range []string{"config.json", "sub/nested.txt", "small.dat", "empty.txt", "name with space+plus.json"} {
		b := f.tiny[p]
		for _, rev := range []string{"main", commit} {
			u := srv.URL + "/acme/tiny/resolve/" + rev + "/" + (&url.URL{Path: p}).EscapedPath()
			resp, body := do(t, "HEAD", u, hdr{"Accept-Encoding": "identity"})
			wantStatus(t, resp, 200)
			wantHeader(t, resp, "ETag", `"`+gitSHA1(b)+`"`)
			wantHeader(t, resp, "X-Repo-Commit", commit)
			wantHeader(t, resp, "Content-Length", strconv.Itoa(len(b)))
			wantHeader(t, resp, "X-Linked-Etag", "")
			if len(body) != 0 {
				t.Errorf("HEAD %s: body %d bytes", u, len(body))
			}
			resp, body = do(t, "GET", u, nil)
			wantStatus(t, resp, 200)
			if !bytes.Equal(body, b) {
				t.Errorf("GET %s: body differs", u)
			}
		}
	}
	// Ranges.
	b := f.tiny["small.dat"]
	u := srv.URL + "/acme/tiny/resolve/main/small.dat"
	resp, body := do(t, "GET", u, hdr{"Range": "bytes=100-199"})
	wantStatus(t, resp, 206)
	wantHeader(t, resp, "Content-Range", fmt.Sprintf("bytes 100-199/%d", len(b)))
	wantHeader(t, resp, "ETag", `"`+gitSHA1(b)+`"`)
	if !bytes.Equal(body, b[100:200]) {
		t.Error("range body differs")
	}
	resp, body = do(t, "GET", u, hdr{"Range": "bytes=-10"})
	wantStatus(t, resp, 206)
	if !bytes.Equal(body, b[len(b)-10:]) {
		t.Error("suffix range body differs")
	}
	resp, _ = do(t, "GET", u, hdr{"Range": fmt.Sprintf("bytes=%d-", len(b))})
	wantStatus(t, resp, 416)
	wantHeader(t, resp, "Content-Range", fmt.Sprintf("bytes */%d", len(b)))
	// The revision may come fully percent-encoded (quote(rev, safe="")).
	resp, _ = do(t, "HEAD", srv.URL+"/acme/tiny/resolve/"+url.PathEscape("main")+"/config.json", nil)
	wantStatus(t, resp, 200)
}

func TestResolveLFS(t *testing.T) {
	f := newFixture(t)
	srv := f.start(t, Options{})
	commit, _, _ := srv.Snapshot("acme", "tiny")
	for _, p := range []string{"model.safetensors", "big.dat", "sub/deeper/weights.bin"} {
		b := f.tiny[p]
		sum := sha256Hex(b)
		for _, m := range []string{"HEAD", "GET"} {
			resp, body := do(t, m, srv.URL+"/acme/tiny/resolve/main/"+p, hdr{"Accept-Encoding": "identity"})
			wantStatus(t, resp, 302)
			wantHeader(t, resp, "X-Linked-Etag", `"`+sum+`"`)
			wantHeader(t, resp, "X-Linked-Size", strconv.Itoa(len(b)))
			wantHeader(t, resp, "X-Repo-Commit", commit)
			wantHeader(t, resp, "Location", srv.URL+"/cdn/acme/tiny/"+sum)
			if cl := resp.Header.Get("Content-Length"); cl == strconv.Itoa(len(b)) || cl == "" {
				t.Errorf("%s %s: redirect Content-Length %q must be the redirect body's, not the file's", m, p, cl)
			}
			if m == "GET" && !strings.Contains(string(body), sum) {
				t.Errorf("GET %s: redirect body %q", p, body)
			}
		}
		loc := srv.URL + "/cdn/acme/tiny/" + sum
		resp, body := do(t, "GET", loc, nil)
		wantStatus(t, resp, 200)
		wantHeader(t, resp, "ETag", `"`+sum+`"`)
		// Same-host blobs carry X-Repo-Commit (a client that follows a same-host redirect, as
		// huggingface_hub 1.33 does, reads the metadata here).
		wantHeader(t, resp, "X-Repo-Commit", commit)
		if sha256Hex(body) != sum {
			t.Errorf("blob %s: sha256 mismatch", p)
		}
		resp, body = do(t, "GET", loc, hdr{"Range": "bytes=10-"})
		wantStatus(t, resp, 206)
		wantHeader(t, resp, "Content-Range", fmt.Sprintf("bytes 10-%d/%d", len(b)-1, len(b)))
		if !bytes.Equal(body, b[10:]) {
			t.Errorf("blob %s: range body differs", p)
		}
		resp, _ = do(t, "HEAD", loc, nil)
		wantStatus(t, resp, 200)
		wantHeader(t, resp, "Content-Length", strconv.Itoa(len(b)))
	}
	// The default client follows the absolute redirect and gets the bytes.
	resp, err := http.Get(srv.URL + "/acme/tiny/resolve/main/model.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Equal(body, f.tiny["model.safetensors"]) {
		t.Error("followed redirect: body differs")
	}
	// Unknown blobs.
	resp, _ = do(t, "GET", srv.URL+"/cdn/acme/tiny/"+strings.Repeat("0", 64), nil)
	wantStatus(t, resp, 404)
	resp, _ = do(t, "GET", srv.URL+"/cdn/acme/tiny/"+strings.Repeat("A", 64), nil)
	wantStatus(t, resp, 404)
}

func TestErrors(t *testing.T) {
	f := newFixture(t)
	srv := f.start(t, Options{})
	commit, _, _ := srv.Snapshot("acme", "tiny")
	auth := hdr{"Authorization": "Bearer someone"}
	for _, u := range []string{"/api/models/acme/nope", "/api/models/nobody/tiny/tree/main", "/acme/nope/resolve/main/config.json", "/api/models/a--b/c"} {
		resp, body := do(t, "GET", srv.URL+u, nil)
		wantHubError(t, resp, body, 401, "RepoNotFound")
		resp, body = do(t, "GET", srv.URL+u, auth)
		wantHubError(t, resp, body, 404, "RepoNotFound")
	}
	resp, body := do(t, "GET", srv.URL+"/acme/tiny/resolve/v1.0/config.json", nil)
	wantHubError(t, resp, body, 404, "RevisionNotFound")
	resp, body = do(t, "GET", srv.URL+"/api/models/acme/tiny/revision/refs%2Fpr%2F1", nil)
	wantHubError(t, resp, body, 404, "RevisionNotFound")
	if m := resp.Header.Get("X-Error-Message"); m != "Invalid rev id: refs/pr/1" {
		t.Errorf("revision message %q", m)
	}
	for _, m := range []string{"GET", "HEAD"} {
		resp, body = do(t, m, srv.URL+"/acme/tiny/resolve/main/missing.json", nil)
		wantHubError(t, resp, body, 404, "EntryNotFound")
		wantHeader(t, resp, "X-Repo-Commit", commit)
	}
	// A directory is not a file.
	resp, body = do(t, "GET", srv.URL+"/acme/tiny/resolve/main/sub", nil)
	wantHubError(t, resp, body, 404, "EntryNotFound")
	// Settings files are not part of the repo.
	resp, body = do(t, "GET", srv.URL+"/acme/gated/resolve/main/.hubtest.json", hdr{"Authorization": "Bearer tok-gated"})
	wantStatus(t, resp, 400)
	resp, _ = do(t, "GET", srv.URL+"/nothing/here", nil)
	wantStatus(t, resp, 404)
	wantHeader(t, resp, "X-Error-Code", "")
	resp, _ = do(t, "DELETE", srv.URL+"/acme/tiny/resolve/main/config.json", nil)
	wantStatus(t, resp, 405)
	wantHeader(t, resp, "Allow", "GET, HEAD")
	if resp.Header.Get("X-Request-Id") == "" {
		t.Error("no X-Request-Id")
	}
}

// rawGet sends a request line with exactly this path (no client-side cleaning).
func rawGet(t *testing.T, base, path string) (int, string) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", path, strings.TrimPrefix(base, "http://"))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("GET %q: %v", path, err)
	}
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestPathTraversal(t *testing.T) {
	f := newFixture(t)
	srv := f.start(t, Options{})
	for _, p := range []string{
		"/acme/tiny/resolve/main/../../SECRET",
		"/acme/tiny/resolve/main/..%2f..%2fSECRET",
		"/acme/tiny/resolve/main/%2e%2e/%2e%2e/SECRET",
		"/acme/tiny/resolve/main/sub/..%5c..%5cSECRET",
		"/acme/tiny/resolve/main/sub%5cnested.txt",
		"/acme/tiny/resolve/main//etc/passwd",
		"/acme/tiny/resolve/main/%2fetc%2fpasswd",
		"/acme/tiny/resolve/main/config.json%00",
		"/acme/tiny/resolve/main/./config.json",
		"/acme/tiny/resolve/main/sub/",
		"/acme/tiny/resolve/main/%zz",
		"/../acme/tiny/resolve/main/config.json",
		"/acme/../SECRET",
		"/api/models/acme/tiny/tree/main/..",
		"/api/models/acme/tiny/tree/main/sub/../..",
		"/api/models/../acme/tiny",
		"/api/models/acme/..",
		"/cdn/acme/../" + sha256Hex([]byte("top-secret-marker")),
		"/acme/tiny/resolve/main/.git/config",
	} {
		code, body := rawGet(t, srv.URL, p)
		if code != 400 && code != 404 && code != 401 {
			t.Errorf("GET %s: status %d, want 400/401/404", p, code)
		}
		if strings.Contains(body, "top-secret-marker") {
			t.Errorf("GET %s: leaked a file outside the repo", p)
		}
	}
}

func TestGatedAndPrivate(t *testing.T) {
	f := newFixture(t)
	srv := f.start(t, Options{Token: "tok-admin"})
	u := srv.URL + "/acme/gated/resolve/main/"
	for _, m := range []string{"HEAD", "GET"} {
		resp, body := do(t, m, u+"config.json", nil)
		wantHubError(t, resp, body, 401, "GatedRepo")
		resp, body = do(t, m, u+"config.json", hdr{"Authorization": "Bearer wrong"})
		wantHubError(t, resp, body, 403, "GatedRepo")
		for _, tok := range []string{"tok-gated", "tok-admin"} {
			resp, body = do(t, m, u+"config.json", hdr{"Authorization": "Bearer " + tok})
			wantStatus(t, resp, 200)
			if m == "GET" && !bytes.Equal(body, f.gated["config.json"]) {
				t.Error("gated config body differs")
			}
		}
	}
	resp, _ := do(t, "HEAD", u+"model.safetensors", hdr{"Authorization": "Bearer tok-gated"})
	wantStatus(t, resp, 302)
	loc := resp.Header.Get("Location")
	if !strings.Contains(loc, "?sig=") {
		t.Fatalf("gated LFS location %q has no signature", loc)
	}
	// The pre-signed URL works without a token; without its signature it does not.
	resp, body := do(t, "GET", loc, nil)
	wantStatus(t, resp, 200)
	if !bytes.Equal(body, f.gated["model.safetensors"]) {
		t.Error("gated blob differs")
	}
	unsigned, _, _ := strings.Cut(loc, "?")
	resp, _ = do(t, "GET", unsigned, hdr{"Authorization": "Bearer tok-gated"})
	wantStatus(t, resp, 403)
	resp, _ = do(t, "GET", unsigned+"?sig=00", nil)
	wantStatus(t, resp, 403)

	// Private: invisible without a granted token, on every endpoint.
	for _, p := range []string{"/api/models/acme/private", "/api/models/acme/private/tree/main", "/acme/private/resolve/main/config.json"} {
		resp, body := do(t, "GET", srv.URL+p, nil)
		wantHubError(t, resp, body, 401, "RepoNotFound")
		resp, body = do(t, "GET", srv.URL+p, hdr{"Authorization": "Bearer tok-gated"})
		wantHubError(t, resp, body, 404, "RepoNotFound")
		for _, tok := range []string{"tok-private", "tok-a", "tok-admin"} {
			resp, _ = do(t, "GET", srv.URL+p, hdr{"Authorization": "Bearer " + tok})
			wantStatus(t, resp, 200)
		}
	}
	var mi struct{ Private bool }
	_, body = do(t, "GET", srv.URL+"/api/models/acme/private", hdr{"Authorization": "Bearer tok-a"})
	if json.Unmarshal(body, &mi); !mi.Private {
		t.Errorf("private repo info: %s", body)
	}
}

func TestInvalidCredentials(t *testing.T) {
	f := newFixture(t)
	srv := f.start(t, Options{Token: "tok-admin", ValidTokens: []string{"tok-gated"}})
	for _, p := range []string{"/api/models/acme/tiny", "/acme/tiny/resolve/main/config.json", "/api/models/acme/nope"} {
		resp, body := do(t, "GET", srv.URL+p, hdr{"Authorization": "Bearer expired"})
		wantStatus(t, resp, 401)
		wantHeader(t, resp, "X-Error-Code", "")
		wantHeader(t, resp, "X-Error-Message", "Invalid credentials in Authorization header")
		if !strings.Contains(string(body), "Invalid credentials") {
			t.Errorf("%s: body %q", p, body)
		}
	}
	for _, tok := range []string{"tok-admin", "tok-gated"} {
		resp, _ := do(t, "GET", srv.URL+"/acme/gated/resolve/main/config.json", hdr{"Authorization": "Bearer " + tok})
		wantStatus(t, resp, 200)
	}
	resp, _ := do(t, "GET", srv.URL+"/acme/tiny/resolve/main/config.json", nil)
	wantStatus(t, resp, 200)
}

func TestWarm(t *testing.T) {
	f := newFixture(t)
	os.WriteFile(filepath.Join(f.root, "acme", "loose-file"), nil, 0o644) // not a repo
	srv, err := New(f.root, Options{Logger: slog.New(slog.DiscardHandler), LFSThreshold: testLFSThreshold})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Warm(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Every regular file and LFS file of the three repos is hashed once.
	if n := len(srv.hashes); n != len(f.tiny)+len(f.gated)+1 {
		t.Errorf("%d hashes cached, want %d", n, len(f.tiny)+len(f.gated)+1)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := srv.Warm(ctx); err == nil {
		t.Error("Warm with a cancelled context returned nil")
	}
}

func TestGatedWithoutConfiguredToken(t *testing.T) {
	f := newFixture(t)
	srv := f.start(t, Options{Repos: map[string]RepoSettings{"acme/tiny": {Gated: "auto"}}})
	resp, body := do(t, "GET", srv.URL+"/acme/tiny/resolve/main/config.json", nil)
	wantHubError(t, resp, body, 401, "GatedRepo")
	resp, _ = do(t, "GET", srv.URL+"/acme/tiny/resolve/main/config.json", hdr{"Authorization": "Bearer anything"})
	wantStatus(t, resp, 200)
	resp, _ = do(t, "GET", srv.URL+"/acme/tiny/resolve/main/config.json", hdr{"Authorization": "Basic Zm9vOmJhcg=="})
	wantStatus(t, resp, 403)
}

func TestRenamed(t *testing.T) {
	f := newFixture(t)
	if err := WriteSettings(f.root, "old-org", "tiny-old", RepoSettings{RenamedTo: "acme/tiny"}); err != nil {
		t.Fatal(err)
	}
	srv := f.start(t, Options{Renames: map[string]string{"legacy/tiny": "acme/tiny"}})
	for _, old := range []string{"old-org/tiny-old", "legacy/tiny"} {
		resp, _ := do(t, "HEAD", srv.URL+"/"+old+"/resolve/main/sub/nested.txt", nil)
		wantStatus(t, resp, 307)
		wantHeader(t, resp, "Location", "/acme/tiny/resolve/main/sub/nested.txt")
		resp, _ = do(t, "GET", srv.URL+"/api/models/"+old+"/tree/main?recursive=true", nil)
		wantStatus(t, resp, 307)
		wantHeader(t, resp, "Location", "/api/models/acme/tiny/tree/main?recursive=true")
		resp, _ = do(t, "GET", srv.URL+"/api/models/"+old, nil)
		wantStatus(t, resp, 307)
		wantHeader(t, resp, "Location", "/api/models/acme/tiny")
		// A client that follows relative redirects ends at the file.
		r, err := http.Get(srv.URL + "/" + old + "/resolve/main/sub/nested.txt")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if r.StatusCode != 200 || !bytes.Equal(b, f.tiny["sub/nested.txt"]) {
			t.Errorf("followed rename: %d %q", r.StatusCode, b)
		}
	}
}

func TestBlobHostAndAuthorizationRecords(t *testing.T) {
	f := newFixture(t)
	srv := StartWithBlobHost(t, f.root, Options{LFSThreshold: testLFSThreshold})
	sum := sha256Hex(f.tiny["model.safetensors"])
	resp, _ := do(t, "HEAD", srv.URL+"/acme/tiny/resolve/main/model.safetensors", hdr{"Authorization": "Bearer tok"})
	wantStatus(t, resp, 302)
	loc := resp.Header.Get("Location")
	if want := srv.BlobURL + "/cdn/acme/tiny/" + sum; loc != want || !strings.HasPrefix(loc, "http://localhost:") {
		t.Fatalf("Location %q, want %q on localhost", loc, want)
	}
	lu, _ := url.Parse(loc)
	su, _ := url.Parse(srv.URL)
	if lu.Host == su.Host || lu.Hostname() == su.Hostname() {
		t.Fatalf("blob host %s not distinct from %s", lu.Host, su.Host)
	}
	// A compliant client drops the token for the other host; this one (on purpose) does so once, then
	// sends it, and the records show both.
	resp, _ = do(t, "GET", loc, nil)
	wantHeader(t, resp, "X-Repo-Commit", "") // a CDN sends no Hub headers
	wantHeader(t, resp, "ETag", `"`+sum+`"`)
	do(t, "GET", loc, hdr{"Authorization": "Bearer tok", "Range": "bytes=0-9"})
	recs := srv.Requests()
	if len(recs) != 3 {
		t.Fatalf("%d records, want 3: %+v", len(recs), recs)
	}
	if recs[0].Host != su.Host || recs[0].Authorization != "Bearer tok" || recs[0].Status != 302 ||
		recs[0].FileKey != "acme/tiny/model.safetensors" || recs[0].FileBytes != 0 {
		t.Errorf("resolve record %+v", recs[0])
	}
	if recs[1].Host != lu.Host || recs[1].Authorization != "" || recs[1].Status != 200 ||
		recs[1].FileBytes != int64(len(f.tiny["model.safetensors"])) {
		t.Errorf("blob record %+v", recs[1])
	}
	if recs[2].Authorization != "Bearer tok" || recs[2].Range != "bytes=0-9" || recs[2].Status != 206 || recs[2].FileBytes != 10 {
		t.Errorf("ranged blob record %+v", recs[2])
	}
	st := srv.FileStats("acme/tiny/model.safetensors")
	if st != (FileStats{Requests: 3, BodyRequests: 2, Bytes: int64(len(f.tiny["model.safetensors"])) + 10}) {
		t.Errorf("file stats %+v", st)
	}
	srv.ResetRequests()
	if len(srv.Requests()) != 0 || srv.FileStats("acme/tiny/model.safetensors") != (FileStats{}) {
		t.Error("ResetRequests kept records")
	}
}

func TestRecordRing(t *testing.T) {
	f := newFixture(t)
	srv := f.start(t, Options{MaxRecords: 3})
	for i := 0; i < 5; i++ {
		do(t, "GET", srv.URL+"/api/models/acme/tiny?n="+strconv.Itoa(i), nil)
	}
	recs := srv.Requests()
	if len(recs) != 3 || recs[0].Query != "n=2" || recs[2].Query != "n=4" {
		t.Errorf("ring: %+v", recs)
	}
}

func TestCommitFollowsContent(t *testing.T) {
	f := newFixture(t)
	srv := f.start(t, Options{})
	c1, _, _ := srv.Snapshot("acme", "tiny")
	if len(c1) != 40 {
		t.Fatalf("commit %q", c1)
	}
	c1b, _, _ := srv.Snapshot("acme", "tiny")
	if c1 != c1b {
		t.Fatal("commit not deterministic")
	}
	// Same content in another repo → same commit (the id depends on the tree only).
	if err := WriteRepo(f.root, "copy", "tiny", f.tiny); err != nil {
		t.Fatal(err)
	}
	if c, _, _ := srv.Snapshot("copy", "tiny"); c != c1 {
		t.Errorf("copy commit %s, want %s", c, c1)
	}
	// New content (same size, later mtime) → new commit and new etag.
	p := filepath.Join(f.root, "acme", "tiny", "config.json")
	nb := bytes.ToUpper(f.tiny["config.json"])
	if err := os.WriteFile(p, nb, 0o644); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(2 * time.Second)
	os.Chtimes(p, later, later)
	c2, _, _ := srv.Snapshot("acme", "tiny")
	if c2 == c1 {
		t.Error("commit unchanged after a content change")
	}
	resp, _ := do(t, "HEAD", srv.URL+"/acme/tiny/resolve/main/config.json", nil)
	wantHeader(t, resp, "X-Repo-Commit", c2)
	wantHeader(t, resp, "ETag", `"`+gitSHA1(nb)+`"`)
	resp, body := do(t, "HEAD", srv.URL+"/acme/tiny/resolve/"+c1+"/config.json", nil)
	wantHubError(t, resp, body, 404, "RevisionNotFound")
}

func TestNewErrors(t *testing.T) {
	root := t.TempDir()
	if _, err := New(filepath.Join(root, "missing"), Options{}); err == nil {
		t.Error("missing root accepted")
	}
	file := filepath.Join(root, "f")
	os.WriteFile(file, nil, 0o644)
	if _, err := New(file, Options{}); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("file root: %v", err)
	}
	os.MkdirAll(filepath.Join(root, "o", "n"), 0o755)
	bad := filepath.Join(root, "o", "n", ".hubtest.json")
	os.WriteFile(bad, []byte(`{"gatd": "manual"}`), 0o644)
	if _, err := New(root, Options{}); err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "gatd") {
		t.Errorf("unknown settings field: %v", err)
	}
	os.WriteFile(bad, []byte(`{"gated": "yes"}`), 0o644)
	if _, err := New(root, Options{}); err == nil || !strings.Contains(err.Error(), "gated") {
		t.Errorf("bad gated value: %v", err)
	}
	os.Remove(bad)
	for _, o := range []Options{
		{Repos: map[string]RepoSettings{"no-slash": {}}},
		{Repos: map[string]RepoSettings{"o/n": {Gated: "sometimes"}}},
		{Renames: map[string]string{"o/n": "../x"}},
		{Renames: map[string]string{"o/../n": "a/b"}},
	} {
		if _, err := New(root, o); err == nil {
			t.Errorf("options %+v accepted", o)
		}
	}
	if err := WriteRepo(root, "o", "n", map[string][]byte{"../x": nil}); err == nil {
		t.Error("WriteRepo accepted ../x")
	}
	if err := WriteRepo(root, "o", "..", map[string][]byte{"x": nil}); err == nil {
		t.Error("WriteRepo accepted repo ..")
	}
}

func TestServeShutdown(t *testing.T) {
	f := newFixture(t)
	quiet := Options{Logger: slog.New(slog.DiscardHandler)}
	srv, err := New(f.root, quiet)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	resp, _ := do(t, "GET", "http://"+ln.Addr().String()+"/api/models/acme/tiny", nil)
	wantStatus(t, resp, 200)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve after cancel: %v", err)
	}
	if _, err := net.Dial("tcp", ln.Addr().String()); err == nil {
		t.Error("listener still open after shutdown")
	}
	if err := ListenAndServe(context.Background(), "127.0.0.1:0", filepath.Join(f.root, "missing"), quiet); err == nil {
		t.Error("ListenAndServe on a missing root succeeded")
	}
	ctx2, cancel2 := context.WithCancel(context.Background())
	cancel2()
	if err := ListenAndServe(ctx2, "127.0.0.1:0", f.root, quiet); err != nil {
		t.Errorf("ListenAndServe with a cancelled context: %v", err)
	}
}

// TestServesCommittedFixture serves testdata/hub (written by tools/mkfixtures): the shards are LFS files
// with their sha256, the JSON files regular git blobs, and every byte comes back as committed.
func TestServesCommittedFixture(t *testing.T) {
	root := filepath.Join("..", "..", "testdata", "hub")
	srv := Start(t, root, Options{})
	repo := filepath.Join(root, "lithos-test", "tiny-sharded")
	des, err := os.ReadDir(repo)
	if err != nil {
		t.Fatal(err)
	}
	items, _ := listTree(t, srv.URL+"/api/models/lithos-test/tiny-sharded/tree/main?recursive=true")
	if len(items) != len(des) || len(des) < 9 {
		t.Fatalf("tree lists %d entries, the repo has %d files", len(items), len(des))
	}
	for _, it := range items {
		b, err := os.ReadFile(filepath.Join(repo, it.Path))
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(it.Path, ".safetensors") {
			if it.LFS == nil || it.LFS.OID != sha256Hex(b) {
				t.Errorf("%s: lfs %+v", it.Path, it.LFS)
			}
		} else if it.LFS != nil || it.OID != gitSHA1(b) {
			t.Errorf("%s: oid %s lfs %+v", it.Path, it.OID, it.LFS)
		}
		r, err := http.Get(srv.URL + "/lithos-test/tiny-sharded/resolve/main/" + it.Path)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if !bytes.Equal(got, b) {
			t.Errorf("%s: served bytes differ", it.Path)
		}
	}
}

// TestDeclaredSHA256: a declared LFS id is announced without hashing the
// file (synthetic sparse checkpoints), and the blob is served under it.
func TestDeclaredSHA256(t *testing.T) {
	root := t.TempDir()
	data := randBytes(99, 5000)
	if err := WriteRepo(root, "acme", "synth", map[string][]byte{"model.safetensors": data}); err != nil {
		t.Fatal(err)
	}
	declared := strings.Repeat("ab", 32)
	if err := WriteSettings(root, "acme", "synth", RepoSettings{DeclaredSHA256: map[string]string{"model.safetensors": declared}}); err != nil {
		t.Fatal(err)
	}
	srv := Start(t, root, Options{})
	resp, _ := do(t, "HEAD", srv.URL+"/acme/synth/resolve/main/model.safetensors", nil)
	wantStatus(t, resp, 302)
	wantHeader(t, resp, "X-Linked-Etag", `"`+declared+`"`)
	resp, body := do(t, "GET", srv.URL+"/cdn/acme/synth/"+declared, hdr{"Range": "bytes=10-19"})
	wantStatus(t, resp, 206)
	if string(body) != string(data[10:20]) {
		t.Errorf("range under the declared id served %q", body)
	}
	if err := WriteSettings(root, "acme", "bad", RepoSettings{DeclaredSHA256: map[string]string{"x": "nothex"}}); err == nil {
		t.Error("a malformed declared sha256 was accepted")
	}
}
