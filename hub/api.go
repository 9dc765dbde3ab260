package hub

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
)

// RepoFile is one file of a repository listing (the tree API, A2).
type RepoFile struct {
	Path   string   // slash-separated, relative to the repository root
	Size   int64    // bytes
	BlobID string   // git blob sha1 (40 hex)
	LFS    *LFSInfo // nil for files stored in git itself
}

// LFSInfo describes a file stored in Git LFS (or Xet behind the LFS bridge).
type LFSInfo struct {
	SHA256 string // 64 hex; also the file's ETag and its blob name in the cache
	Size   int64  // bytes
}

// ETag returns the identifier huggingface_hub names the cached blob by: the
// LFS sha256, else the git blob sha1 (hub-and-go.md A10).
func (f RepoFile) ETag() string {
	if f.LFS != nil {
		return f.LFS.SHA256
	}
	return f.BlobID
}

var (
	repoIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$`)
	commitPattern = regexp.MustCompile(`^[0-9a-f]{40}$`)
	sha256Pattern = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// ValidateRepoID checks that id is "name" or "org/name" as the Hub allows.
func ValidateRepoID(id string) error {
	if !repoIDPattern.MatchString(id) || strings.Contains(id, "--") || strings.Contains(id, "..") || len(id) > 96 {
		return fmt.Errorf("invalid repository id %q: want org/name with letters, digits, '-', '_', '.'", id)
	}
	return nil
}

// IsCommit reports whether rev is a full 40-hex commit id.
func IsCommit(rev string) bool { return commitPattern.MatchString(rev) }

// escapePath percent-encodes each segment of a repository path, keeping '/'.
func escapePath(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return strings.Join(segs, "/")
}

// ResolveURL returns {endpoint}/{repo}/resolve/{rev}/{path} with the revision
// fully percent-encoded (so refs/pr/1 becomes refs%2Fpr%2F1), as hf_hub_url does.
func (c *Client) ResolveURL(repo, rev, path string) string {
	return c.endpoint + "/" + repo + "/resolve/" + url.PathEscape(rev) + "/" + escapePath(path)
}

// ResolveCommit returns the 40-hex commit a revision (branch, tag, or commit)
// points to. A full commit id is returned as is without a request. Offline,
// the answer comes from refs/<revision> in the cache.
func (c *Client) ResolveCommit(ctx context.Context, repo, revision string) (string, error) {
	if err := ValidateRepoID(repo); err != nil {
		return "", err
	}
	if revision == "" {
		revision = "main"
	}
	if IsCommit(revision) {
		return revision, nil
	}
	if c.offline {
		commit, err := readRef(c.cacheDir, repo, revision)
		if err != nil {
			return "", fmt.Errorf("resolve %s@%s offline: %w", repo, revision, err)
		}
		return commit, nil
	}
	u := c.endpoint + "/api/models/" + repo + "/revision/" + url.PathEscape(revision)
	var info struct {
		SHA string `json:"sha"`
	}
	if _, err := c.getJSON(ctx, u, 64<<20, &info, repo, revision, ""); err != nil {
		var he *HTTPError
		if errors.As(err, &he) {
			return "", err
		}
		return "", fmt.Errorf("resolve %s@%s: %w", repo, revision, err)
	}
	if !IsCommit(info.SHA) {
		return "", fmt.Errorf("resolve %s@%s: the Hub answered no commit id (sha=%q); is HF_ENDPOINT a Hub?", repo, revision, info.SHA)
	}
	return info.SHA, nil
}

// ListFiles lists every file of the repository at a commit through the tree
// API (recursive, following Link rel="next" pages). Paths that could escape a
// directory (.., absolute, backslashes, empty segments) are refused with
// ErrUnsafePath: nothing from a listing can write outside the cache.
func (c *Client) ListFiles(ctx context.Context, repo, commit string) ([]RepoFile, error) {
	if err := ValidateRepoID(repo); err != nil {
		return nil, err
	}
	if c.offline {
		return nil, fmt.Errorf("list %s: %w", repo, ErrOffline)
	}
	next := c.endpoint + "/api/models/" + repo + "/tree/" + url.PathEscape(commit) + "?recursive=true&expand=false"
	var files []RepoFile
	seen := map[string]bool{}
	for next != "" {
		if seen[next] {
			return nil, fmt.Errorf("list %s@%s: the listing's next page %s was already read (a loop)", repo, commit, next)
		}
		seen[next] = true
		if len(seen) > 10000 {
			return nil, fmt.Errorf("list %s@%s: more than 10000 pages", repo, commit)
		}
		u := next
		var entries []struct {
			Type string `json:"type"`
			Path string `json:"path"`
			Oid  string `json:"oid"`
			Size int64  `json:"size"`
			LFS  *struct {
				Oid  string `json:"oid"`
				Size int64  `json:"size"`
			} `json:"lfs"`
		}
		hdr, err := c.getJSON(ctx, u, maxTreePage, &entries, repo, commit, "")
		if err != nil {
			var he *HTTPError
			if errors.As(err, &he) {
				return nil, err
			}
			return nil, fmt.Errorf("list %s@%s: %w", repo, commit, err)
		}
		if len(files)+len(entries) > maxRepoFiles {
			return nil, fmt.Errorf("list %s@%s: more than %d entries", repo, commit, maxRepoFiles)
		}
		for _, e := range entries {
			if e.Type != "file" {
				continue
			}
			if err := checkRepoPath(e.Path); err != nil {
				return nil, fmt.Errorf("list %s@%s: %w", repo, commit, err)
			}
			f := RepoFile{Path: e.Path, Size: e.Size, BlobID: e.Oid}
			if e.LFS != nil {
				if !sha256Pattern.MatchString(e.LFS.Oid) {
					return nil, fmt.Errorf("list %s@%s: file %s has LFS oid %q, not a sha256", repo, commit, e.Path, e.LFS.Oid)
				}
				f.LFS = &LFSInfo{SHA256: e.LFS.Oid, Size: e.LFS.Size}
				f.Size = e.LFS.Size
			} else if !commitPattern.MatchString(e.Oid) {
				return nil, fmt.Errorf("list %s@%s: file %s has git oid %q, not a sha1", repo, commit, e.Path, e.Oid)
			}
			if f.Size < 0 || f.Size > MaxFileSize {
				return nil, fmt.Errorf("list %s@%s: file %s has size %d bytes, outside [0, %d]", repo, commit, e.Path, f.Size, int64(MaxFileSize))
			}
			files = append(files, f)
		}
		next, err = nextLink(hdr.Get("Link"), u)
		if err != nil {
			return nil, fmt.Errorf("list %s@%s: %w", repo, commit, err)
		}
	}
	return files, nil
}

// Limits on what a listing may claim; a hostile server cannot push memory
// or disk use past them.
const (
	maxTreePage  = 16 << 20  // bytes of one tree listing page (the Hub's pages of 1000 entries are ~0.3 MB)
	maxRepoFiles = 1_000_000 // entries in a listing
	// MaxFileSize is the largest file a listing may announce: 1 TiB (the Hub's
	// own per-file limit is far below).
	MaxFileSize = 1 << 40
)

// nextLink returns the rel="next" target of a GitHub-style Link header,
// resolved against the request URL, or "" when there is none.
func nextLink(header, base string) (string, error) {
	for _, part := range strings.Split(header, ",") {
		part = strings.TrimSpace(part)
		if !strings.Contains(part, `rel="next"`) {
			continue
		}
		i, j := strings.Index(part, "<"), strings.Index(part, ">")
		if i < 0 || j < i {
			return "", fmt.Errorf("malformed Link header %q", header)
		}
		bu, err := url.Parse(base)
		if err != nil {
			return "", err
		}
		ref, err := url.Parse(part[i+1 : j])
		if err != nil {
			return "", fmt.Errorf("malformed Link header %q: %w", header, err)
		}
		return bu.ResolveReference(ref).String(), nil
	}
	return "", nil
}

// checkRepoPath refuses repository paths that could escape a directory.
func checkRepoPath(p string) error {
	if p == "" || strings.HasPrefix(p, "/") || strings.Contains(p, `\`) || strings.ContainsRune(p, 0) {
		return fmt.Errorf("%w: %q", ErrUnsafePath, p)
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("%w: %q", ErrUnsafePath, p)
		}
	}
	if len(p) >= 2 && p[1] == ':' { // C:foo
		return fmt.Errorf("%w: %q", ErrUnsafePath, p)
	}
	return nil
}

// fileMeta is what a HEAD on a resolve URL tells (A3).
type fileMeta struct {
	Commit string
	ETag   string // normalised: no W/ prefix, no quotes
	Size   int64
	URL    string // where to GET the bytes (the redirect target for LFS files)
}

// head resolves a file's metadata: HEAD with redirects off, following only
// relative redirects (a renamed repository), stopping at the first absolute
// one whose Location is where the bytes live.
func (c *Client) head(ctx context.Context, repo, rev, path string) (fileMeta, error) {
	u := c.ResolveURL(repo, rev, path)
	for hops := 0; hops < 10; hops++ {
		cur := u
		resp, err := c.doRetry(ctx, func() (*http.Request, error) {
			req, err := c.newRequest(ctx, http.MethodHead, cur)
			if err == nil {
				req.Header.Set("Accept-Encoding", "identity")
			}
			return req, err
		})
		if err != nil {
			return fileMeta{}, fmt.Errorf("head %s/%s: %w", repo, path, err)
		}
		resp.Body.Close()
		if resp.StatusCode >= 400 {
			return fileMeta{}, httpError(resp, repo, rev, path)
		}
		m := fileMeta{Commit: resp.Header.Get("X-Repo-Commit"), URL: cur}
		m.ETag = normalizeETag(resp.Header.Get("X-Linked-Etag"))
		if m.ETag == "" {
			m.ETag = normalizeETag(resp.Header.Get("ETag"))
		}
		isRedirect := resp.StatusCode >= 300 && resp.StatusCode < 400
		if isRedirect {
			loc := resp.Header.Get("Location")
			lu, err := url.Parse(loc)
			if err != nil || loc == "" {
				return fileMeta{}, fmt.Errorf("head %s/%s: bad redirect Location %q", repo, path, loc)
			}
			bu, _ := url.Parse(cur)
			abs := bu.ResolveReference(lu)
			if err := httpScheme(abs); err != nil {
				return fileMeta{}, fmt.Errorf("head %s/%s: %w", repo, path, err)
			}
			if lu.Host == "" { // relative: repository moved; ask again there
				u = abs.String()
				continue
			}
			m.URL = abs.String()
		}
		size := resp.Header.Get("X-Linked-Size")
		if size == "" && !isRedirect {
			size = resp.Header.Get("Content-Length")
		}
		if size != "" {
			n, err := strconv.ParseInt(size, 10, 64)
			if err != nil || n < 0 {
				return fileMeta{}, fmt.Errorf("head %s/%s: bad size header %q", repo, path, size)
			}
			m.Size = n
		} else {
			m.Size = -1
		}
		if m.Commit == "" {
			return fileMeta{}, fmt.Errorf("head %s/%s: no X-Repo-Commit header: is %s a Hugging Face Hub (or is a proxy in the way)?", repo, path, c.endpoint)
		}
		if m.ETag == "" || m.Size < 0 {
			return fileMeta{}, fmt.Errorf("head %s/%s: the Hub sent no ETag or size for the file", repo, path)
		}
		if m.Size > MaxFileSize {
			return fileMeta{}, fmt.Errorf("head %s/%s: the Hub says the file is %d bytes, more than %d", repo, path, m.Size, int64(MaxFileSize))
		}
		return m, nil
	}
	return fileMeta{}, fmt.Errorf("head %s/%s: too many redirects", repo, path)
}

func normalizeETag(s string) string {
	s = strings.TrimPrefix(strings.TrimSpace(s), "W/")
	return strings.Trim(s, `"`)
}

// RemoteFile is an io.ReaderAt over HTTP range requests of one repository
// file, for reading safetensors headers without downloading the weights.
type RemoteFile struct {
	c       *Client
	repo    string
	path    string
	meta    fileMeta
	fetched atomic.Int64
}

// OpenRemote resolves a file at a revision (one HEAD request) and returns a
// reader whose ReadAt calls each send one Range request.
func (c *Client) OpenRemote(ctx context.Context, repo, revision, path string) (*RemoteFile, error) {
	if err := ValidateRepoID(repo); err != nil {
		return nil, err
	}
	if c.offline {
		return nil, fmt.Errorf("open %s/%s: %w", repo, path, ErrOffline)
	}
	if revision == "" {
		revision = "main"
	}
	m, err := c.head(ctx, repo, revision, path)
	if err != nil {
		return nil, err
	}
	return &RemoteFile{c: c, repo: repo, path: path, meta: m}, nil
}

// Size returns the file size in bytes.
func (f *RemoteFile) Size() int64 { return f.meta.Size }

// Commit returns the commit the revision resolved to.
func (f *RemoteFile) Commit() string { return f.meta.Commit }

// ETag returns the file's normalised ETag (sha256 for LFS files).
func (f *RemoteFile) ETag() string { return f.meta.ETag }

// BytesFetched returns the body bytes this reader has received.
func (f *RemoteFile) BytesFetched() int64 { return f.fetched.Load() }

// ReadAt reads len(p) bytes at off with one Range request (retried on
// transient errors). It returns io.EOF when the read reaches the end.
func (f *RemoteFile) ReadAt(p []byte, off int64) (int, error) {
	return f.readAt(context.Background(), p, off)
}

// ReadAtContext is ReadAt with a context for cancellation.
func (f *RemoteFile) ReadAtContext(ctx context.Context, p []byte, off int64) (int, error) {
	return f.readAt(ctx, p, off)
}

func (f *RemoteFile) readAt(ctx context.Context, p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("read %s: negative offset", f.path)
	}
	if off >= f.meta.Size {
		return 0, io.EOF
	}
	n := min(int64(len(p)), f.meta.Size-off)
	if n == 0 {
		return 0, nil
	}
	for attempt := 0; ; attempt++ {
		got, err := f.readOnce(ctx, p[:n], off)
		if err == nil {
			if n < int64(len(p)) {
				return got, io.EOF
			}
			return got, nil
		}
		var perm errPermanent
		var he *HTTPError
		if errors.As(err, &perm) || errors.As(err, &he) || ctx.Err() != nil || attempt >= f.c.maxRetries {
			return 0, fmt.Errorf("read %s/%s bytes=%d-%d: %w", f.repo, f.path, off, off+n-1, err)
		}
		wait := f.c.backoff(attempt, nil)
		f.c.log.Warn("hub: range read failed, retrying", "file", f.path, "err", err, "wait", wait)
		if err := sleepCtx(ctx, wait); err != nil {
			return 0, err
		}
	}
}

// readOnce sends one Range request for exactly len(p) bytes at off.
func (f *RemoteFile) readOnce(ctx context.Context, p []byte, off int64) (int, error) {
	n := int64(len(p))
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	rng := fmt.Sprintf("bytes=%d-%d", off, off+n-1)
	resp, err := f.c.doRetry(rctx, func() (*http.Request, error) {
		req, err := f.c.newRequest(rctx, http.MethodGet, f.meta.URL)
		if err == nil {
			req.Header.Set("Range", rng)
		}
		return req, err
	})
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusPartialContent:
		if last, err := checkContentRange(resp, off, off+n, f.meta.Size); err != nil {
			return 0, err
		} else if last != off+n-1 {
			return 0, errPermanent{fmt.Errorf("server answered a shorter range (to byte %d) for %s", last, rng)}
		}
	case resp.StatusCode == http.StatusOK && off == 0 && n == f.meta.Size:
	case resp.StatusCode >= 400:
		return 0, httpError(resp, f.repo, "", f.path)
	default:
		return 0, errPermanent{fmt.Errorf("server answered %d instead of 206 Partial Content to %s", resp.StatusCode, rng)}
	}
	body := f.c.watchBody(resp.Body, cancel)
	defer body.Stop()
	got, err := io.ReadFull(body, p)
	f.fetched.Add(int64(got))
	if err != nil {
		if errors.Is(context.Cause(rctx), errStalled) {
			return got, fmt.Errorf("no data for %s: %w", f.c.stallTimeout, errStalled)
		}
		return got, err
	}
	return got, nil
}
