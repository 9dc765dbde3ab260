package hubtest

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var fuzzSeeds = []string{
	"/api/models/acme/tiny",
	"/api/models/acme/tiny/revision/main",
	"/api/models/acme/tiny/revision/refs%2Fpr%2F1",
	"/api/models/acme/tiny/tree/main/sub/deeper",
	"/api/models/acme/tiny/tree/main/",
	"/api/models/acme/tiny/paths-info/main",
	"/acme/tiny/resolve/main/sub/nested.txt",
	"/acme/tiny/resolve/main/../../SECRET",
	"/acme/tiny/resolve/main/%2e%2e%2fSECRET",
	"/acme/tiny/resolve/main/a%5cb",
	"/acme/tiny/resolve/main/%00",
	"/cdn/acme/tiny/0000000000000000000000000000000000000000000000000000000000000000",
	"/acme/tiny/resolve/main/.hubtest.json",
	"//",
	"/%",
	"",
}

// FuzzParseRoute: parsing never panics, and whatever it accepts is a clean repo path and valid repo id.
func FuzzParseRoute(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		rt, err := parseRoute(p)
		if err != nil {
			return
		}
		if !validRepoPart(rt.org) || !validRepoPart(rt.name) {
			t.Fatalf("%q: accepted repo id %q/%q", p, rt.org, rt.name)
		}
		if rt.path != "" {
			if !validRepoPath(rt.path) || filepath.IsAbs(rt.path) || strings.HasPrefix(rt.path, "/") {
				t.Fatalf("%q: accepted path %q", p, rt.path)
			}
			for _, c := range strings.Split(rt.path, "/") {
				if c == ".." || c == "." || c == "" || strings.ContainsAny(c, "\\\x00") {
					t.Fatalf("%q: accepted component %q", p, c)
				}
			}
		}
		if rt.kind == routeResolve && rt.path == "" {
			t.Fatalf("%q: resolve without a path", p)
		}
		if rt.kind == routeBlob && !isSHA256Hex(rt.sha) {
			t.Fatalf("%q: blob id %q", p, rt.sha)
		}
	})
}

// FuzzServe sends arbitrary paths to the handler: it never panics, never answers 5xx, and never serves
// the file planted next to the repos.
func FuzzServe(f *testing.F) {
	root := f.TempDir()
	if err := WriteRepo(root, "acme", "tiny", map[string][]byte{
		"config.json": []byte("{}"), "sub/nested.txt": []byte("n"), "w.safetensors": []byte("weights"),
	}); err != nil {
		f.Fatal(err)
	}
	if err := WriteSettings(root, "acme", "gated", RepoSettings{Gated: "manual"}); err != nil {
		f.Fatal(err)
	}
	os.WriteFile(filepath.Join(root, "SECRET"), []byte("top-secret-marker"), 0o644)
	os.WriteFile(filepath.Join(root, "acme", "SECRET"), []byte("top-secret-marker"), 0o644)
	srv, err := New(root, Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range fuzzSeeds {
		f.Add("GET", s)
	}
	f.Add("HEAD", "/acme/tiny/resolve/main/w.safetensors")
	f.Add("POST", "/api/models/acme/tiny/paths-info/main")
	f.Fuzz(func(t *testing.T, method, p string) {
		req := httptest.NewRequest("GET", "/", nil)
		req.Method = method
		if u, err := url.PathUnescape(p); err == nil {
			req.URL.Path, req.URL.RawPath = u, p // EscapedPath() == p when p is a valid encoding
		} else {
			req.URL.Path, req.URL.RawPath = p, ""
		}
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, req)
		if w.Code >= 500 {
			t.Fatalf("%s %q: status %d: %s", method, p, w.Code, w.Body)
		}
		if strings.Contains(w.Body.String(), "top-secret-marker") {
			t.Fatalf("%s %q: served a file outside the repos", method, p)
		}
		if w.Code == http.StatusOK && w.Header().Get("ETag") != "" && method == "GET" {
			switch w.Body.String() {
			case "{}", "n", "weights":
			default:
				t.Fatalf("%s %q: 200 with unexpected body %q", method, p, w.Body)
			}
		}
	})
}
