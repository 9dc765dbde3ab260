package hub

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/semaphore"
)

// DownloadOptions selects what Download fetches and where.
type DownloadOptions struct {
	Revision    string   // branch, tag or commit; "" means "main"
	Include     []string // fnmatch globs over repository paths ('*' crosses '/'); empty = all
	Exclude     []string // fnmatch globs; applied after Include
	HeadersOnly bool     // small text files in full, safetensors files as header + sparse hole
	LocalDir    string   // write plain files here instead of the HF cache
	MaxWorkers  int      // concurrent HTTP connections; default 8
	// Progress, when set, is called with the total bytes to fetch once, then
	// with every increment of bytes on disk. It must be safe for concurrent use.
	Progress func(total, delta int64)
}

// headerFiles are the files a headers-only fetch takes in full.
var headerFileRe = regexp.MustCompile(`(?i)(\.json|\.jinja|\.txt|\.model|\.tiktoken|\.md|tokenizer[^/]*)$`)

// maxSafetensorsHeader is the format's header cap (safetensors README).
const maxSafetensorsHeader = 100_000_000

// maxHeaderBytesInFlight bounds the safetensors header bytes a headers-only
// fetch holds in memory at once (bytes).
const maxHeaderBytesInFlight = 128 << 20

// LithosCacheDir returns where lithos keeps its own cached data (headers-only
// snapshots): $LITHOS_CACHE, else $XDG_CACHE_HOME/lithos, else ~/.cache/lithos.
func LithosCacheDir() string {
	if v := os.Getenv("LITHOS_CACHE"); v != "" {
		return expandHome(v)
	}
	if x := os.Getenv("XDG_CACHE_HOME"); x != "" {
		return filepath.Join(expandHome(x), "lithos")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		home = os.TempDir()
	}
	return filepath.Join(home, ".cache", "lithos")
}

// headersCache is the root of headers-only snapshots; it has the HF cache's
// layout (models--org--name/{refs,snapshots/<commit>}) without blobs.
func headersCache() string { return filepath.Join(LithosCacheDir(), "headers") }

// HeadersDir returns the folder of a headers-only snapshot.
func HeadersDir(repo, commit string) string {
	return filepath.Join(repoDir(headersCache(), repo), "snapshots", commit)
}

// privateDir is where downloads into a folder that a listing fills (a local
// dir, a headers-only snapshot) keep their partial files: no repository
// path may enter it (see Download), so nothing there can collide.
func privateDir(root string) string { return filepath.Join(root, ".cache", "lithos") }

// Download brings a repository snapshot onto this machine and returns its
// folder: snapshots/<commit> in the HF cache (files are relative symlinks to
// verified blobs), LocalDir when set, or HeadersDir for a headers-only fetch.
// Blobs already in the cache are not fetched again. Offline, it returns the
// cached snapshot or an error saying it is absent.
func (c *Client) Download(ctx context.Context, repo string, opt DownloadOptions) (string, error) {
	if err := ValidateRepoID(repo); err != nil {
		return "", err
	}
	rev := opt.Revision
	if rev == "" {
		rev = "main"
	}
	if opt.MaxWorkers < 0 {
		return "", fmt.Errorf("download %s: max workers %d: want a positive number", repo, opt.MaxWorkers)
	}
	if c.offline {
		switch {
		case opt.LocalDir != "":
			return "", fmt.Errorf("download %s: %w; --local-dir needs the network", repo, ErrOffline)
		case opt.HeadersOnly:
			return SnapshotDir(headersCache(), repo, rev)
		}
		return SnapshotDir(c.cacheDir, repo, rev)
	}
	commit, err := c.ResolveCommit(ctx, repo, rev)
	if err != nil {
		return "", err
	}
	all, err := c.ListFiles(ctx, repo, commit)
	if err != nil {
		return "", err
	}
	var files []RepoFile
	for _, f := range all {
		if !selected(f.Path, opt.Include, opt.Exclude) {
			continue
		}
		if opt.HeadersOnly && !headerFileRe.MatchString(f.Path) && !strings.HasSuffix(f.Path, ".safetensors") {
			continue
		}
		if (opt.HeadersOnly || opt.LocalDir != "") && (f.Path == ".cache" || strings.HasPrefix(f.Path, ".cache/")) {
			return "", fmt.Errorf("download %s: the repository has %q, inside the .cache/ folder that downloads into a plain folder keep for themselves; fetch into the HF cache instead (no --local-dir)", repo, f.Path)
		}
		files = append(files, f)
	}
	if len(files) == 0 {
		return "", fmt.Errorf("download %s@%s: no file matches the include/exclude patterns (the repository has %d files)", repo, rev, len(all))
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Size > files[j].Size }) // big files first

	var dest string
	switch {
	case opt.HeadersOnly:
		dest = HeadersDir(repo, commit)
		if err := writeRef(headersCache(), repo, rev, commit); err != nil {
			return "", fmt.Errorf("download %s: %w", repo, err)
		}
	case opt.LocalDir != "":
		dest = opt.LocalDir
	default:
		ensureCacheDirTag(c.cacheDir)
		dest = filepath.Join(repoDir(c.cacheDir, repo), "snapshots", commit)
		if err := writeRef(c.cacheDir, repo, rev, commit); err != nil {
			return "", fmt.Errorf("download %s: %w", repo, err)
		}
	}
	if err := os.MkdirAll(dest, 0o755); err != nil {
		return "", fmt.Errorf("download %s: %w", repo, err)
	}

	workers := opt.MaxWorkers
	if workers <= 0 {
		workers = 8
	}
	var total int64
	for _, f := range files {
		if opt.HeadersOnly && strings.HasSuffix(f.Path, ".safetensors") {
			continue
		}
		total += f.Size
	}
	var progMu sync.Mutex
	progress := func(n int64) {
		if opt.Progress != nil {
			progMu.Lock()
			opt.Progress(total, n)
			progMu.Unlock()
		}
	}
	if opt.Progress != nil {
		opt.Progress(total, 0)
	}

	conns := semaphore.NewWeighted(int64(workers))
	headerBytes := semaphore.NewWeighted(maxHeaderBytesInFlight)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(workers)
	for _, f := range files {
		g.Go(func() error {
			switch {
			case opt.HeadersOnly && strings.HasSuffix(f.Path, ".safetensors"):
				return c.fetchHeaderOnly(gctx, repo, commit, f, dest, headerBytes)
			case opt.HeadersOnly:
				return c.fetchToPath(gctx, repo, commit, f, dest, conns, progress)
			case opt.LocalDir != "":
				return c.fetchToLocalDir(gctx, repo, commit, f, dest, conns, progress)
			default:
				return c.fetchToCache(gctx, repo, commit, f, conns, progress)
			}
		})
	}
	if err := g.Wait(); err != nil {
		return "", err
	}
	return dest, nil
}

// fetchToCache downloads one file's blob (unless present) and links it into
// the snapshot.
func (c *Client) fetchToCache(ctx context.Context, repo, commit string, f RepoFile, conns *semaphore.Weighted, progress func(int64)) error {
	etag := f.ETag()
	final := blobPath(c.cacheDir, repo, etag)
	// A blob already published needs no lock (a read-only shared cache works).
	if fi, err := os.Stat(final); err == nil && fi.Size() == f.Size {
		progress(f.Size)
		return linkSnapshot(c.cacheDir, repo, commit, f.Path, etag)
	}
	if err := os.MkdirAll(filepath.Dir(final), 0o755); err != nil {
		return fmt.Errorf("download %s: %w", f.Path, err)
	}
	unlock, err := lockBlob(ctx, c.cacheDir, repo, etag, c.log)
	if err != nil {
		return err
	}
	defer unlock()
	if fi, err := os.Stat(final); err == nil && fi.Size() == f.Size {
		progress(f.Size) // another process published it while we waited
	} else {
		job := blobJob{repo: repo, commit: commit, path: f.Path, etag: etag, size: f.Size, final: final,
			partial: final + partialSuffix, progress: progress}
		if err := c.fetchBlob(ctx, job, conns); err != nil {
			return err
		}
	}
	return linkSnapshot(c.cacheDir, repo, commit, f.Path, etag)
}

// fetchToPath downloads one file to root/<path> (verified, atomic), with its
// partial in root's private folder.
func (c *Client) fetchToPath(ctx context.Context, repo, commit string, f RepoFile, root string, conns *semaphore.Weighted, progress func(int64)) error {
	final := filepath.Join(root, filepath.FromSlash(f.Path))
	if fi, err := os.Lstat(final); err == nil && fi.Mode().IsRegular() && fi.Size() == f.Size {
		if fh, err := os.Open(final); err == nil {
			verr := verifyFile(fh, f.ETag(), f.Size)
			fh.Close()
			if verr == nil {
				progress(f.Size)
				return nil
			}
		}
	}
	job := blobJob{repo: repo, commit: commit, path: f.Path, etag: f.ETag(), size: f.Size, final: final,
		partial: filepath.Join(privateDir(root), f.ETag()+".partial"), progress: progress}
	return c.fetchBlob(ctx, job, conns)
}

// fetchToLocalDir downloads into a plain folder the way huggingface_hub's
// local_dir mode does, with the per-file metadata it keeps in
// <dir>/.cache/huggingface/download/<path>.metadata (commit, etag, time).
func (c *Client) fetchToLocalDir(ctx context.Context, repo, commit string, f RepoFile, dir string, conns *semaphore.Weighted, progress func(int64)) error {
	final := filepath.Join(dir, filepath.FromSlash(f.Path))
	meta := filepath.Join(dir, ".cache", "huggingface", "download", filepath.FromSlash(f.Path)+".metadata")
	if b, err := os.ReadFile(meta); err == nil {
		lines := strings.Split(string(b), "\n")
		if fi, err := os.Stat(final); err == nil && fi.Size() == f.Size && len(lines) >= 2 && lines[1] == f.ETag() {
			progress(f.Size)
			return nil
		}
	}
	if err := c.fetchToPath(ctx, repo, commit, f, dir, conns, progress); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(meta), 0o755); err != nil {
		return fmt.Errorf("download %s: %w", f.Path, err)
	}
	return writeFileAtomic(meta, []byte(fmt.Sprintf("%s\n%s\n%d\n", commit, f.ETag(), time.Now().Unix())))
}

// fetchHeaderOnly writes a safetensors file's header (8-byte length + JSON)
// followed by a hole up to the real file size, so header readers see the
// true layout while the disk holds only the header. It costs one or two
// range requests.
func (c *Client) fetchHeaderOnly(ctx context.Context, repo, commit string, f RepoFile, dest string, headerBytes *semaphore.Weighted) error {
	rf, err := c.OpenRemote(ctx, repo, commit, f.Path)
	if err != nil {
		return err
	}
	if rf.Size() != f.Size {
		return fmt.Errorf("header of %s: listing says %d bytes, the file is %d", f.Path, f.Size, rf.Size())
	}
	// Headers may be up to 100 MB each: bound what is held at once.
	hold := min(f.Size, maxSafetensorsHeader+8, maxHeaderBytesInFlight)
	if err := headerBytes.Acquire(ctx, hold); err != nil {
		return err
	}
	defer headerBytes.Release(hold)
	head, err := ReadSafetensorsHeaderBytes(ctx, rf)
	if err != nil {
		return fmt.Errorf("header of %s/%s: %w", repo, f.Path, err)
	}
	final := filepath.Join(dest, filepath.FromSlash(f.Path))
	if err := os.MkdirAll(filepath.Dir(final), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(final), "."+filepath.Base(final)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(head); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", final, err)
	}
	if err := tmp.Truncate(f.Size); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", final, err)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), final)
}

// ReadSafetensorsHeaderBytes returns the first 8+N bytes of a safetensors
// file (the u64 little-endian length N and the JSON header) with at most two
// reads: the first 100,000 bytes, then the rest of the header if it is
// longer (huggingface_hub's parse_safetensors_file_metadata, A13). The JSON
// itself is not validated here; formats/safetensors does that.
func ReadSafetensorsHeaderBytes(ctx context.Context, rf *RemoteFile) ([]byte, error) {
	size := rf.Size()
	if size < 8 {
		return nil, fmt.Errorf("file is %d bytes, shorter than the 8-byte header length", size)
	}
	first := make([]byte, min(size, 100_000))
	if n, err := rf.ReadAtContext(ctx, first, 0); err != nil && !(errors.Is(err, io.EOF) && n == len(first)) {
		return nil, err
	}
	n := binary.LittleEndian.Uint64(first[:8])
	if n > maxSafetensorsHeader {
		return nil, fmt.Errorf("header length %d exceeds the format's limit of %d bytes", n, maxSafetensorsHeader)
	}
	if int64(n)+8 > size {
		return nil, fmt.Errorf("header length %d runs past the end of the %d-byte file", n, size)
	}
	total := int64(n) + 8
	if total <= int64(len(first)) {
		return first[:total], nil
	}
	out := make([]byte, total)
	copy(out, first)
	if got, err := rf.ReadAtContext(ctx, out[len(first):], int64(len(first))); err != nil && !(errors.Is(err, io.EOF) && got == len(out)-len(first)) {
		return nil, err
	}
	return out, nil
}

// selected applies include then exclude globs to a repository path.
func selected(p string, include, exclude []string) bool {
	if len(include) > 0 {
		ok := false
		for _, g := range include {
			if fnmatch(g, p) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	for _, g := range exclude {
		if fnmatch(g, p) {
			return false
		}
	}
	return true
}

// fnmatch matches like Python's fnmatch (as huggingface_hub's allow_patterns
// do): '*' matches any run including '/', '?' one character, [seq] a set,
// [!seq] its complement. A pattern ending in '/' matches everything below it.
func fnmatch(pattern, name string) bool {
	if strings.HasSuffix(pattern, "/") {
		pattern += "*"
	}
	var b strings.Builder
	b.WriteString("^")
	for i := 0; i < len(pattern); i++ {
		ch := pattern[i]
		switch ch {
		case '*':
			b.WriteString(".*")
		case '?':
			b.WriteString(".")
		case '[':
			j := i + 1
			if j < len(pattern) && pattern[j] == '!' {
				j++
			}
			if j < len(pattern) && pattern[j] == ']' {
				j++
			}
			for j < len(pattern) && pattern[j] != ']' {
				j++
			}
			if j >= len(pattern) {
				b.WriteString(`\[`)
				continue
			}
			set := pattern[i+1 : j]
			if strings.HasPrefix(set, "!") {
				set = "^" + set[1:]
			}
			b.WriteString("[" + strings.ReplaceAll(set, `\`, `\\`) + "]")
			i = j
		default:
			b.WriteString(regexp.QuoteMeta(string(ch)))
		}
	}
	b.WriteString("$")
	re, err := regexp.Compile(b.String())
	return err == nil && re.MatchString(name)
}
