package hub

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestFnmatch(t *testing.T) {
	cases := []struct {
		pat, name string
		want      bool
	}{
		{"*.json", "config.json", true},
		{"*.json", "sub/dir/config.json", true}, // '*' crosses '/' as in Python fnmatch
		{"*.safetensors", "model.safetensors.index.json", false},
		{"model-0000[12]*", "model-00001-of-00003.safetensors", true},
		{"model-0000[12]*", "model-00003-of-00003.safetensors", false},
		{"model-0000[!12]*", "model-00003-of-00003.safetensors", true},
		{"tok?nizer.json", "tokenizer.json", true},
		{"sub/", "sub/a/b.bin", true},
		{"a.b", "aXb", false}, // '.' is literal
		{"[", "[", true},      // unclosed set is literal
	}
	for _, c := range cases {
		if got := fnmatch(c.pat, c.name); got != c.want {
			t.Errorf("fnmatch(%q, %q) = %v, want %v", c.pat, c.name, got, c.want)
		}
	}
}

func TestCheckRepoPath(t *testing.T) {
	good := []string{"config.json", "a/b/c.safetensors", "with space.txt", "x..y"}
	bad := []string{"", "/etc/passwd", "../x", "a/../../x", `a\b`, "a//b", "./a", "a/.", "C:evil", "a\x00b"}
	for _, p := range good {
		if err := checkRepoPath(p); err != nil {
			t.Errorf("checkRepoPath(%q) = %v, want nil", p, err)
		}
	}
	for _, p := range bad {
		if err := checkRepoPath(p); !errors.Is(err, ErrUnsafePath) {
			t.Errorf("checkRepoPath(%q) = %v, want ErrUnsafePath", p, err)
		}
	}
}

func TestValidateRepoID(t *testing.T) {
	for _, id := range []string{"gpt2", "nvidia/Qwen3.8-27B-NVFP4", "a_b/c.d-e"} {
		if err := ValidateRepoID(id); err != nil {
			t.Errorf("ValidateRepoID(%q) = %v", id, err)
		}
	}
	for _, id := range []string{"", "a/b/c", "../x", "a--b/c", "a/..", "/a", "a/", "a b/c"} {
		if err := ValidateRepoID(id); err == nil {
			t.Errorf("ValidateRepoID(%q) = nil, want error", id)
		}
	}
}

func TestNextLink(t *testing.T) {
	got, err := nextLink(`<https://hub/api/models/a/b/tree/main?cursor=xyz>; rel="next"`, "https://hub/api/models/a/b/tree/main")
	if err != nil || got != "https://hub/api/models/a/b/tree/main?cursor=xyz" {
		t.Fatalf("nextLink = %q, %v", got, err)
	}
	got, err = nextLink(`</api/x?p=2>; rel="next", </api/x?p=9>; rel="last"`, "http://h:1/api/x?p=1")
	if err != nil || got != "http://h:1/api/x?p=2" {
		t.Fatalf("relative nextLink = %q, %v", got, err)
	}
	if got, err := nextLink("", "http://h/"); got != "" || err != nil {
		t.Fatalf("empty Link = %q, %v", got, err)
	}
	if _, err := nextLink(`garbage; rel="next"`, "http://h/"); err == nil {
		t.Fatal("malformed Link accepted")
	}
}

func TestErrorMapping(t *testing.T) {
	cases := []struct {
		status int
		code   string
		msg    string
		path   string
		want   error
	}{
		{404, "RepoNotFound", "", "", ErrRepoNotFound},
		{404, "RevisionNotFound", "", "", ErrRevisionNotFound},
		{404, "EntryNotFound", "", "x.json", ErrEntryNotFound},
		{401, "GatedRepo", "", "", ErrGatedRepo},
		{403, "GatedRepo", "", "", ErrGatedRepo},
		{401, "", "", "", ErrRepoNotFound}, // 401 without a code: private or missing (A6)
		{401, "", "Invalid credentials in Authorization header", "", ErrUnauthorized},
		{403, "", "", "", ErrForbidden},
		{429, "", "", "", ErrRateLimited},
	}
	for _, c := range cases {
		rec := httptest.NewRecorder()
		if c.code != "" {
			rec.Header().Set("X-Error-Code", c.code)
		}
		if c.msg != "" {
			rec.Header().Set("X-Error-Message", c.msg)
		}
		rec.WriteHeader(c.status)
		resp := rec.Result()
		resp.Request, _ = http.NewRequest("GET", "http://hub/x", nil)
		err := httpError(resp, "org/name", "main", c.path)
		if !errors.Is(err, c.want) {
			t.Errorf("status %d code %q: got %v, want %v", c.status, c.code, err, c.want)
		}
		if err.Error() == "" {
			t.Errorf("empty message")
		}
	}
}

func TestServerMessage(t *testing.T) {
	cases := map[string]string{
		`{"error":"Repository not found"}`:  "Repository not found",
		`{"error":["a","b"]}`:               "a; b",
		`{"error_description":"bad token"}`: "bad token",
		`plain text`:                        "plain text",
		`<html>nope</html>`:                 "",
	}
	for in, want := range cases {
		if got := serverMessage([]byte(in)); got != want {
			t.Errorf("serverMessage(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestBackoff(t *testing.T) {
	c := NewClient("http://hub", WithRetry(5, time.Second))
	want := []time.Duration{1, 2, 4, 8, 8, 8}
	for i, w := range want {
		if got := c.backoff(i, nil); got != w*time.Second {
			t.Errorf("backoff(%d) = %v, want %v", i, got, w*time.Second)
		}
	}
	h := http.Header{}
	h.Set("Retry-After", "7")
	if got := c.backoff(0, &http.Response{Header: h}); got != 7*time.Second {
		t.Errorf("Retry-After 7 gave %v", got)
	}
	h = http.Header{}
	h.Set("RateLimit", `"api";r=0;t=55`)
	if got := c.backoff(0, &http.Response{Header: h}); got != 56*time.Second {
		t.Errorf("RateLimit t=55 gave %v, want 56s", got)
	}
	h = http.Header{}
	h.Set("Retry-After", "Wed, 21 Oct 2015 07:28:00 GMT") // HTTP-date is ignored, as huggingface_hub does
	if got := c.backoff(1, &http.Response{Header: h}); got != 2*time.Second {
		t.Errorf("HTTP-date Retry-After gave %v, want the exponential 2s", got)
	}
}

func TestEnv(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HF_HOME", home)
	t.Setenv("HF_HUB_CACHE", "")
	t.Setenv("HUGGINGFACE_HUB_CACHE", "")
	t.Setenv("HF_TOKEN", "")
	t.Setenv("HUGGING_FACE_HUB_TOKEN", "")
	t.Setenv("HF_TOKEN_PATH", "")
	if got := CacheDirFromEnv(); got != filepath.Join(home, "hub") {
		t.Errorf("cache dir = %s", got)
	}
	if err := os.WriteFile(filepath.Join(home, "token"), []byte("  hf_file\r\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := TokenFromEnv(); got != "hf_file" {
		t.Errorf("token from file = %q", got)
	}
	t.Setenv("HUGGING_FACE_HUB_TOKEN", "hf_legacy")
	if got := TokenFromEnv(); got != "hf_legacy" {
		t.Errorf("legacy token = %q", got)
	}
	t.Setenv("HF_TOKEN", "hf_env\n")
	if got := TokenFromEnv(); got != "hf_env" {
		t.Errorf("env token = %q", got)
	}
	t.Setenv("HF_HUB_CACHE", "/x/y")
	if got := CacheDirFromEnv(); got != "/x/y" {
		t.Errorf("HF_HUB_CACHE = %s", got)
	}
	t.Setenv("HF_HUB_OFFLINE", "yes")
	t.Setenv("HF_ENDPOINT", "http://mirror:9/")
	t.Setenv("HF_HUB_DOWNLOAD_TIMEOUT", "2.5")
	c, err := NewClientFromEnv()
	if err != nil || !c.Offline() || c.Endpoint() != "http://mirror:9" || c.stallTimeout != 2500*time.Millisecond {
		t.Errorf("client from env: offline=%v endpoint=%q stall=%v err=%v", c.Offline(), c.Endpoint(), c.stallTimeout, err)
	}
	t.Setenv("HF_HUB_DOWNLOAD_TIMEOUT", "soon")
	if _, err := NewClientFromEnv(); err == nil || !strings.Contains(err.Error(), "HF_HUB_DOWNLOAD_TIMEOUT") {
		t.Errorf("a malformed HF_HUB_DOWNLOAD_TIMEOUT gave %v", err)
	}
}

func TestCacheRefs(t *testing.T) {
	cache := t.TempDir()
	commit := "0123456789abcdef0123456789abcdef01234567"
	if err := writeRef(cache, "org/m", "refs/pr/1", commit); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(cache, "models--org--m", "refs", "refs", "pr", "1"))
	if err != nil || string(b) != commit {
		t.Fatalf("ref file = %q, %v (want the bare commit, no newline)", b, err)
	}
	if got, err := readRef(cache, "org/m", "refs/pr/1"); err != nil || got != commit {
		t.Fatalf("readRef = %q, %v", got, err)
	}
	if err := writeRef(cache, "org/m", "../../evil", commit); err == nil {
		t.Fatal("a revision escaping refs/ was accepted")
	}
	if _, err := SnapshotDir(cache, "org/m", "refs/pr/1"); err == nil {
		t.Fatal("SnapshotDir found a snapshot that does not exist")
	}
}
