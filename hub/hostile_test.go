package hub_test

// Hostile-server tests of hub.Client: each one is an attack a review found
// (lying listings, ranges, redirects, stalls, planted symlinks) and what the
// client must do instead of publishing wrong bytes, hanging or crashing.

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"lithos/hub"
)

const fakeCommit = "0123456789abcdef0123456789abcdef01234567"

type fakeFile struct {
	path string
	data []byte
	lfs  bool
	// overrides
	listSize  *int64
	listOid   string // LFS oid or git oid override
	headEtag  string
	headSize  string
	location  string // absolute/relative Location for HEAD (LFS only; default: /cdn/<path>)
	serveBody func(w http.ResponseWriter, r *http.Request, f *fakeFile)
}

func sha256hex(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }
func gitsha1(b []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(b))
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}

type fakeHub struct {
	t       *testing.T
	files   []*fakeFile
	srv     *httptest.Server
	tree    func(w http.ResponseWriter, r *http.Request) bool // return true if handled
	hits    atomic.Int64
	authCDN atomic.Int64 // requests to /cdn carrying Authorization
}

func (h *fakeHub) find(p string) *fakeFile {
	for _, f := range h.files {
		if f.path == p {
			return f
		}
	}
	return nil
}

func (h *fakeHub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.hits.Add(1)
	p := r.URL.Path
	switch {
	case strings.HasPrefix(p, "/api/models/o/r/revision/"):
		json.NewEncoder(w).Encode(map[string]string{"sha": fakeCommit})
	case strings.HasPrefix(p, "/api/models/o/r/tree/"):
		if h.tree != nil && h.tree(w, r) {
			return
		}
		var out []map[string]any
		for _, f := range h.files {
			size := int64(len(f.data))
			if f.listSize != nil {
				size = *f.listSize
			}
			e := map[string]any{"type": "file", "path": f.path, "size": size, "oid": gitsha1(f.data)}
			if f.lfs {
				oid := sha256hex(f.data)
				if f.listOid != "" {
					oid = f.listOid
				}
				e["lfs"] = map[string]any{"oid": oid, "size": size, "pointerSize": 134}
				e["oid"] = gitsha1([]byte("pointer" + f.path))
			} else if f.listOid != "" {
				e["oid"] = f.listOid
			}
			out = append(out, e)
		}
		json.NewEncoder(w).Encode(out)
	case strings.HasPrefix(p, "/o/r/resolve/"+fakeCommit+"/"):
		f := h.find(strings.TrimPrefix(p, "/o/r/resolve/"+fakeCommit+"/"))
		if f == nil {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("X-Repo-Commit", fakeCommit)
		etag := gitsha1(f.data)
		if f.lfs {
			etag = sha256hex(f.data)
			if f.listOid != "" {
				etag = f.listOid
			}
		} else if f.listOid != "" {
			etag = f.listOid
		}
		if f.headEtag != "" {
			etag = f.headEtag
		}
		size := strconv.Itoa(len(f.data))
		if f.listSize != nil {
			size = strconv.FormatInt(*f.listSize, 10)
		}
		if f.headSize != "" {
			size = f.headSize
		}
		if f.lfs {
			loc := f.location
			if loc == "" {
				loc = h.srv.URL + "/cdn/" + f.path
			}
			w.Header().Set("Location", loc)
			w.Header().Set("X-Linked-Etag", `"`+etag+`"`)
			w.Header().Set("X-Linked-Size", size)
			w.WriteHeader(http.StatusFound)
			return
		}
		w.Header().Set("ETag", `"`+etag+`"`)
		if r.Method == http.MethodHead {
			w.Header().Set("Content-Length", size)
			return
		}
		h.body(w, r, f)
	case strings.HasPrefix(p, "/cdn/"):
		if r.Header.Get("Authorization") != "" {
			h.authCDN.Add(1)
		}
		f := h.find(strings.TrimPrefix(p, "/cdn/"))
		if f == nil {
			http.NotFound(w, r)
			return
		}
		h.body(w, r, f)
	default:
		http.NotFound(w, r)
	}
}

func (h *fakeHub) body(w http.ResponseWriter, r *http.Request, f *fakeFile) {
	if f.serveBody != nil {
		f.serveBody(w, r, f)
		return
	}
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(f.data))
}

func newFakeHub(t *testing.T, files ...*fakeFile) *fakeHub {
	h := &fakeHub{t: t, files: files}
	h.srv = httptest.NewServer(h)
	t.Cleanup(h.srv.Close)
	return h
}

func fastClient(t *testing.T, h *fakeHub, opts ...hub.Option) (*hub.Client, string) {
	cache := t.TempDir()
	base := []hub.Option{hub.WithCacheDir(cache), hub.WithRetry(2, time.Millisecond), hub.WithPartSize(64 << 10), hub.WithStallTimeout(500 * time.Millisecond)}
	return hub.NewClient(h.srv.URL, append(base, opts...)...), cache
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// blobs lists what is in blobs/ (names), to check nothing corrupt is published.
func blobs(t *testing.T, cache string) []string {
	ents, _ := os.ReadDir(filepath.Join(cache, "models--o--r", "blobs"))
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

func rnd(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/251)
	}
	return b
}

func mustFail(t *testing.T, err error, wants ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error; want one containing %q", wants)
	}
	for _, w := range wants {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}
}

// A listing announcing an absurd size is refused before any allocation.
func TestHostileHugeListingSize(t *testing.T) {
	big := int64(1) << 62
	h := newFakeHub(t, &fakeFile{path: "w.safetensors", data: []byte("x"), lfs: true, listSize: &big, listOid: strings.Repeat("a", 64)})
	c, cache := fastClient(t, h)
	_, err := c.Download(ctxT(t, 10*time.Second), "o/r", hub.DownloadOptions{})
	mustFail(t, err, "w.safetensors", "outside [0, 1099511627776]")
	if b := blobs(t, cache); len(b) != 0 {
		t.Errorf("wrote %v", b)
	}
}

// The HEAD must agree with the listing, and nothing is created before it does.
func TestHostileHeadDisagreesWithListing(t *testing.T) {
	big := int64(10 << 30)
	h := newFakeHub(t, &fakeFile{path: "w.safetensors", data: []byte("hello"), lfs: true, listSize: &big, listOid: strings.Repeat("d", 64), headSize: "5"})
	c, cache := fastClient(t, h)
	_, err := c.Download(ctxT(t, 10*time.Second), "o/r", hub.DownloadOptions{})
	mustFail(t, err, "listing says w.safetensors is 10737418240 bytes", "gives 5 bytes")
	if b := blobs(t, cache); len(b) != 0 {
		t.Errorf("a partial was created before the HEAD was checked: %v", b)
	}
}

// A server that answers another range than asked is caught at once, named,
// and the good progress so far is kept.
func TestHostileContentRangeLie(t *testing.T) {
	data := rnd(300 << 10)
	f := &fakeFile{path: "w.safetensors", data: data, lfs: true}
	f.serveBody = func(w http.ResponseWriter, r *http.Request, f *fakeFile) {
		var a, b int64
		fmt.Sscanf(r.Header.Get("Range"), "bytes=%d-%d", &a, &b)
		if a < 128<<10 {
			http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(f.data))
			return
		}
		w.Header().Set("Content-Range", fmt.Sprintf("bytes 0-%d/%d", b-a, len(f.data)))
		w.WriteHeader(http.StatusPartialContent)
		w.Write(f.data[:b-a+1])
	}
	h := newFakeHub(t, f)
	c, cache := fastClient(t, h)
	_, err := c.Download(ctxT(t, 10*time.Second), "o/r", hub.DownloadOptions{MaxWorkers: 1})
	mustFail(t, err, "server answered bytes 0-")
	if strings.Contains(err.Error(), "run the same command again") {
		t.Errorf("a server that lies is not fixed by running again, but the error says so: %v", err)
	}
	st, rerr := os.ReadFile(filepath.Join(cache, "models--o--r", "blobs", sha256hex(data)+".lithos-partial.json"))
	if rerr != nil || !strings.Contains(string(st), `"done":[65536,65536,0`) {
		t.Errorf("progress before the lie not kept: %s (%v)", st, rerr)
	}
	for _, b := range blobs(t, cache) {
		if b == sha256hex(data) {
			t.Error("published a blob")
		}
	}
}

func TestHostileIgnoredRangeAndEncoding(t *testing.T) {
	data := rnd(300 << 10)
	whole := &fakeFile{path: "a.safetensors", data: data, lfs: true, serveBody: func(w http.ResponseWriter, r *http.Request, f *fakeFile) {
		w.Write(f.data) // 200 whatever the Range
	}}
	gz := &fakeFile{path: "b.safetensors", data: rnd(100 << 10), lfs: true, serveBody: func(w http.ResponseWriter, r *http.Request, f *fakeFile) {
		var a, b int
		fmt.Sscanf(r.Header.Get("Range"), "bytes=%d-%d", &a, &b)
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		zw.Write(f.data[a : b+1])
		zw.Close()
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", a, b, len(f.data)))
		w.WriteHeader(http.StatusPartialContent)
		w.Write(buf.Bytes())
	}}
	for _, f := range []*fakeFile{whole, gz} {
		h := newFakeHub(t, f)
		c, _ := fastClient(t, h)
		_, err := c.Download(ctxT(t, 10*time.Second), "o/r", hub.DownloadOptions{MaxWorkers: 1})
		if f == whole {
			mustFail(t, err, "ignored the Range request")
		} else {
			mustFail(t, err, "answer to bytes=0-65535")
		}
	}
}

// Bodies that stop arriving are aborted by the stall watchdog everywhere:
// API listings and the range reads audit does, not only downloads.
func TestHostileStalledBodies(t *testing.T) {
	stall := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100")
		w.WriteHeader(http.StatusOK)
		w.Write([]byte("["))
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-time.After(20 * time.Second):
		}
	}
	h := newFakeHub(t, &fakeFile{path: "w.safetensors", data: rnd(1000), lfs: true})
	h.tree = func(w http.ResponseWriter, r *http.Request) bool { stall(w, r); return true }
	c, _ := fastClient(t, h)
	start := time.Now()
	_, err := c.ListFiles(ctxT(t, 15*time.Second), "o/r", fakeCommit)
	mustFail(t, err, "no data for 500ms")
	if time.Since(start) > 10*time.Second {
		t.Errorf("the stalled listing took %v", time.Since(start))
	}

	f := &fakeFile{path: "x.safetensors", data: rnd(1000), lfs: true}
	f.serveBody = func(w http.ResponseWriter, r *http.Request, f *fakeFile) {
		w.Header().Set("Content-Range", "bytes 0-99/1000")
		w.Header().Set("Content-Length", "100")
		w.WriteHeader(http.StatusPartialContent)
		w.Write(f.data[:10])
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-time.After(20 * time.Second):
		}
	}
	h2 := newFakeHub(t, f)
	c2, _ := fastClient(t, h2)
	rf, err := c2.OpenRemote(ctxT(t, 15*time.Second), "o/r", fakeCommit, "x.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	_, err = rf.ReadAt(make([]byte, 100), 0)
	mustFail(t, err, "no data for 500ms")
	if time.Since(start) > 10*time.Second {
		t.Errorf("the stalled range read took %v", time.Since(start))
	}
}

// A listing whose next page points back to itself, or whose page is huge,
// is refused with bounded memory.
func TestHostileListingBombs(t *testing.T) {
	h := newFakeHub(t)
	h.tree = func(w http.ResponseWriter, r *http.Request) bool {
		w.Header().Set("Link", "<"+h.srv.URL+r.URL.RequestURI()+">; rel=\"next\"")
		w.Write([]byte("[]"))
		return true
	}
	c, _ := fastClient(t, h)
	_, err := c.ListFiles(ctxT(t, 10*time.Second), "o/r", fakeCommit)
	mustFail(t, err, "already read (a loop)")

	h2 := newFakeHub(t)
	h2.tree = func(w http.ResponseWriter, r *http.Request) bool {
		w.Write([]byte("["))
		chunk := bytes.Repeat([]byte(" "), 1<<20)
		for i := 0; i < 40; i++ {
			if _, err := w.Write(chunk); err != nil {
				break
			}
		}
		return true
	}
	c2, _ := fastClient(t, h2)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err = c2.ListFiles(ctxT(t, 10*time.Second), "o/r", fakeCommit)
	runtime.ReadMemStats(&after)
	mustFail(t, err, "larger than 16777216 bytes")
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 200<<20 {
		t.Errorf("a 40 MB page allocated %d MiB", grew>>20)
	}
}

// Redirects to other schemes are refused at once; protocol-relative and
// chained CDN redirects work and never carry the token off the Hub.
func TestHostileRedirects(t *testing.T) {
	for _, loc := range []string{"file:///etc/passwd", "ftp://127.0.0.1/x", "gopher://x/"} {
		h := newFakeHub(t, &fakeFile{path: "w.safetensors", data: rnd(1000), lfs: true, location: loc})
		c, cache := fastClient(t, h, hub.WithRetry(5, time.Second))
		start := time.Now()
		_, err := c.Download(ctxT(t, 10*time.Second), "o/r", hub.DownloadOptions{})
		mustFail(t, err, "only http and https are followed")
		if time.Since(start) > 2*time.Second {
			t.Errorf("%s: refused after %v of retries", loc, time.Since(start))
		}
		if b := blobs(t, cache); len(b) != 0 {
			t.Errorf("%s: wrote %v", loc, b)
		}
	}
	data := rnd(200 << 10)
	f := &fakeFile{path: "w.safetensors", data: data, lfs: true}
	h := newFakeHub(t, f)
	cdn := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" {
			t.Errorf("token sent to the CDN: %s", r.URL)
		}
		if r.URL.Path == "/hop" {
			http.Redirect(w, r, "/final", http.StatusFound) // a second, relative hop
			return
		}
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(data))
	}))
	defer cdn.Close()
	f.location = "//" + strings.TrimPrefix(cdn.URL, "http://") + "/hop" // protocol-relative
	c, cache := fastClient(t, h, hub.WithToken("hf_secret"))
	dir, err := c.Download(ctxT(t, 10*time.Second), "o/r", hub.DownloadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(filepath.Join(dir, "w.safetensors"))
	if !bytes.Equal(got, data) {
		t.Error("content through the redirect chain differs")
	}
	_ = cache
}

// Symlinks planted in a shared cache do not make the client write elsewhere. The two plants are
// tried in separate downloads: in one download the refusal of the second would cancel the first
// file's transfer at a time that depends on scheduling (this test failed ~5% of runs that way).
func TestHostilePlantedSymlinks(t *testing.T) {
	// A partial file planted as a symlink to a victim: the download replaces it, the victim
	// keeps its bytes and the blob is a regular file.
	data := rnd(100 << 10)
	h := newFakeHub(t, &fakeFile{path: "w.safetensors", data: data, lfs: true})
	c, cache := fastClient(t, h)
	victim := filepath.Join(t.TempDir(), "victim")
	os.WriteFile(victim, []byte("precious, 18 bytes"), 0o644)
	blobDir := filepath.Join(cache, "models--o--r", "blobs")
	os.MkdirAll(blobDir, 0o755)
	os.Symlink(victim, filepath.Join(blobDir, sha256hex(data)+".lithos-partial"))
	if _, err := c.Download(ctxT(t, 10*time.Second), "o/r", hub.DownloadOptions{}); err != nil {
		t.Fatalf("download with a planted partial symlink: %v", err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "precious, 18 bytes" {
		t.Errorf("the planted partial symlink was written through: victim is now %d bytes", len(b))
	}
	if fi, err := os.Lstat(filepath.Join(blobDir, sha256hex(data))); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("the blob is not a regular file: %v %v", fi, err)
	}

	// A snapshot folder planted as a symlink to a folder outside the cache: refused, nothing
	// written there.
	h2 := newFakeHub(t, &fakeFile{path: "sub/config.json", data: []byte("{}")})
	c2, cache2 := fastClient(t, h2)
	outside := t.TempDir()
	snap := filepath.Join(cache2, "models--o--r", "snapshots", fakeCommit)
	os.MkdirAll(snap, 0o755)
	os.Symlink(outside, filepath.Join(snap, "sub"))
	_, err := c2.Download(ctxT(t, 10*time.Second), "o/r", hub.DownloadOptions{})
	mustFail(t, err, "leads outside")
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Errorf("wrote outside the cache: %v", ents)
	}
}

// A repository path that ends like our partial files cannot make another
// file's bytes be published under its name (local-dir mode).
func TestHostileLocalDirNameCollision(t *testing.T) {
	a := &fakeFile{path: "a", data: rnd(1 << 20), lfs: true}
	a.serveBody = func(w http.ResponseWriter, r *http.Request, f *fakeFile) {
		time.Sleep(100 * time.Millisecond)
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(f.data))
	}
	b := &fakeFile{path: "a.lithos-partial", data: []byte("I am the file named a.lithos-partial")}
	c := &fakeFile{path: ".cache/lithos/x", data: []byte("sneaky")}
	h := newFakeHub(t, a, b)
	cl, _ := fastClient(t, h, hub.WithPartSize(4<<20))
	dir := t.TempDir()
	if _, err := cl.Download(ctxT(t, 10*time.Second), "o/r", hub.DownloadOptions{LocalDir: dir}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []*fakeFile{a, b} {
		got, err := os.ReadFile(filepath.Join(dir, f.path))
		if err != nil || !bytes.Equal(got, f.data) {
			t.Errorf("%s: %d bytes (%v), not its own content", f.path, len(got), err)
		}
	}
	h2 := newFakeHub(t, a, c)
	cl2, _ := fastClient(t, h2)
	_, err := cl2.Download(ctxT(t, 10*time.Second), "o/r", hub.DownloadOptions{LocalDir: t.TempDir()})
	mustFail(t, err, `".cache/lithos/x"`)
}

// Refs and progress records are readable by other users of a shared cache.
func TestCacheFileModes(t *testing.T) {
	h := newFakeHub(t, &fakeFile{path: "config.json", data: []byte("{}")})
	c, cache := fastClient(t, h)
	if _, err := c.Download(ctxT(t, 10*time.Second), "o/r", hub.DownloadOptions{}); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(cache, "models--o--r", "refs", "main"))
	if err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("refs/main mode %v (%v), want 0644", fi.Mode().Perm(), err)
	}
}

// A headers-only snapshot fetched once is found again offline.
func TestHeadersOnlyOffline(t *testing.T) {
	t.Setenv("LITHOS_CACHE", t.TempDir())
	h := newFakeHub(t, &fakeFile{path: "config.json", data: []byte("{}")})
	c, cache := fastClient(t, h)
	dir, err := c.Download(ctxT(t, 10*time.Second), "o/r", hub.DownloadOptions{HeadersOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	off := hub.NewClient(h.srv.URL, hub.WithCacheDir(cache), hub.WithOffline(true))
	got, err := off.Download(ctxT(t, 10*time.Second), "o/r", hub.DownloadOptions{HeadersOnly: true})
	if err != nil || got != dir {
		t.Errorf("offline headers-only = %q, %v; want %q", got, err, dir)
	}
}
