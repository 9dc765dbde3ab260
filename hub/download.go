package hub

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/semaphore"
)

// partialSuffix names an in-flight download beside its final path. It is not
// huggingface_hub's ".incomplete" on purpose: our partial file is sparse
// (parts arrive out of order), and huggingface_hub ≤ 1.17 would resume an
// ".incomplete" blob by appending from its size.
const partialSuffix = ".lithos-partial"

// partState is the resume record persisted as <partial>.json.
type partState struct {
	Version  int     `json:"version"`
	ETag     string  `json:"etag"`
	Size     int64   `json:"size"`      // bytes
	PartSize int64   `json:"part_size"` // bytes per range request
	Done     []int64 `json:"done"`      // bytes written from the start of each part
}

// blobJob is one file to bring to a final path.
type blobJob struct {
	repo, commit, path string
	etag               string // sha256 (LFS) or git sha1
	size               int64
	final              string
	// partial is where the bytes arrive (its progress record is partial +
	// ".json"): a name no repository path can collide with, e.g.
	// blobs/<etag>.lithos-partial or <dir>/.cache/lithos/<etag>.partial.
	partial  string
	progress func(n int64) // bytes newly on disk (may be nil)
}

// maxParts bounds the range parts of one file (and so its progress record):
// a huge file gets larger parts.
const maxParts = 16384

// fetchBlob downloads one file into job.final: parallel range requests into a
// sparse partial file, progress persisted for resume, the hash verified, then
// an atomic rename. On a checksum mismatch the partial is deleted and nothing
// is published. On any other failure (cancel, disk full, network) the partial
// and its progress stay for the next run.
func (c *Client) fetchBlob(ctx context.Context, job blobJob, conns *semaphore.Weighted) error {
	partial := job.partial
	statePath := partial + ".json"
	if err := os.MkdirAll(filepath.Dir(partial), 0o755); err != nil {
		return fmt.Errorf("download %s: %w", job.path, err)
	}
	// Resolve where the bytes live (and check the HEAD agrees with the
	// listing) before anything is written.
	var loc locator
	loc.c, loc.job = c, job
	if _, _, err := loc.get(ctx); err != nil {
		return fmt.Errorf("download %s/%s: %w", job.repo, job.path, err)
	}
	st, f, err := c.openPartial(job, partial, statePath)
	if err != nil {
		return err
	}
	defer f.Close()

	var done atomic.Int64
	for _, d := range st.Done {
		done.Add(d)
	}
	if job.progress != nil && done.Load() > 0 {
		job.progress(done.Load())
	}

	// Persist progress every second while parts run, and once at the end.
	var mu sync.Mutex // guards st.Done
	save := func() error {
		mu.Lock()
		b, _ := json.Marshal(st)
		mu.Unlock()
		return writeFileAtomic(statePath, b)
	}
	stopSaver := make(chan struct{})
	saverDone := make(chan struct{})
	go func() {
		defer close(saverDone)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-stopSaver:
				return
			case <-t.C:
				_ = save()
			}
		}
	}()

	g, gctx := errgroup.WithContext(ctx)

	// The hash runs while parts arrive: it follows the completed prefix of
	// the file in order, reading back what was just written (still in the
	// page cache), so verification adds little time after the last byte.
	partDone := make([]chan struct{}, len(st.Done))
	for i := range partDone {
		partDone[i] = make(chan struct{})
	}
	hctx, stopHash := context.WithCancel(ctx)
	defer stopHash()
	hashed := make(chan error, 1)
	go func() { hashed <- hashPrefix(hctx, f, job.etag, st.Size, st.PartSize, partDone) }()

	for i := range st.Done {
		start := int64(i) * st.PartSize
		end := min(start+st.PartSize, st.Size) // exclusive
		mu.Lock()
		already := st.Done[i]
		mu.Unlock()
		if start+already >= end {
			close(partDone[i])
			continue
		}
		if err := conns.Acquire(gctx, 1); err != nil {
			break
		}
		g.Go(func() error {
			defer conns.Release(1)
			err := c.fetchPart(gctx, &loc, f, start, end, func(n int64) {
				mu.Lock()
				st.Done[i] += n
				mu.Unlock()
				done.Add(n)
				if job.progress != nil {
					job.progress(n)
				}
			}, func() int64 { mu.Lock(); defer mu.Unlock(); return st.Done[i] })
			if err == nil {
				close(partDone[i])
			}
			return err
		})
	}
	werr := g.Wait()
	if werr != nil {
		stopHash()
	}
	herr := <-hashed
	if werr == nil && ctx.Err() != nil {
		werr = context.Cause(ctx)
	}
	close(stopSaver)
	<-saverDone
	if serr := save(); serr != nil && werr == nil {
		werr = fmt.Errorf("save progress of %s: %w", job.path, serr)
	}
	if werr != nil {
		return fmt.Errorf("download %s/%s: %w%s", job.repo, job.path, werr, resumeHint(werr, partial))
	}
	if got := done.Load(); got != job.size {
		return fmt.Errorf("download %s/%s: %d of %d bytes on disk after all parts finished", job.repo, job.path, got, job.size)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", partial, err)
	}
	if herr != nil && !errors.Is(herr, ErrChecksum) {
		return fmt.Errorf("download %s/%s: %w%s", job.repo, job.path, herr, resumeHint(herr, partial))
	}
	if herr != nil {
		err := herr
		f.Close()
		os.Remove(partial)
		os.Remove(statePath)
		return fmt.Errorf("download %s/%s: %w; the partial file was deleted, nothing was published", job.repo, job.path, err)
	}
	verified, err := f.Stat()
	if err != nil {
		return fmt.Errorf("stat %s: %w", partial, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", partial, err)
	}
	if err := os.MkdirAll(filepath.Dir(job.final), 0o755); err != nil {
		return fmt.Errorf("publish %s: %w", job.final, err)
	}
	if err := os.Rename(partial, job.final); err != nil {
		return fmt.Errorf("publish %s: %w", job.final, err)
	}
	// The published file must be the one that was hashed (nothing swapped
	// the partial's name under us).
	if pub, err := os.Lstat(job.final); err != nil || !os.SameFile(pub, verified) {
		os.Remove(job.final)
		return fmt.Errorf("publish %s: the file at the partial's name changed while it was verified; nothing published", job.final)
	}
	os.Remove(statePath)
	return nil
}

// resumeHint says that a run again resumes, for the failures a run again
// can get past (network, cancel, disk full), and nothing for the others.
func resumeHint(err error, partial string) string {
	var he *HTTPError
	var perm errPermanent
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, syscall.ENOSPC), errors.Is(err, errStalled):
	case errors.As(err, &he) && !retryable(he.Status):
		return ""
	case errors.As(err, &perm):
		return ""
	}
	return " (partial kept at " + partial + "; run the same command again to resume)"
}

// openPartial opens (or creates) the sparse partial file and its state. A
// state that does not match the job (another etag, size or part size) starts
// the file over.
func (c *Client) openPartial(job blobJob, partial, statePath string) (*partState, *os.File, error) {
	var st partState
	resume := false
	if b, err := os.ReadFile(statePath); err == nil && json.Unmarshal(b, &st) == nil &&
		st.Version == 1 && st.ETag == job.etag && st.Size == job.size && st.PartSize > 0 &&
		int64(len(st.Done)) == numParts(job.size, st.PartSize) {
		if fi, err := os.Lstat(partial); err == nil && fi.Mode().IsRegular() && fi.Size() == job.size {
			resume = true
			for i, d := range st.Done {
				if d < 0 || d > partLen(job.size, st.PartSize, i) {
					resume = false
				}
			}
		}
	}
	if !resume {
		partSize := max(c.partSize, (job.size+maxParts-1)/maxParts)
		st = partState{Version: 1, ETag: job.etag, Size: job.size, PartSize: partSize}
		st.Done = make([]int64, numParts(job.size, partSize))
		os.Remove(statePath)
		os.Remove(partial) // whatever is there, a symlink included, is not followed
		f, err := os.OpenFile(partial, os.O_CREATE|os.O_EXCL|os.O_RDWR|syscall.O_NOFOLLOW, 0o644)
		if err != nil {
			return nil, nil, fmt.Errorf("create %s: %w", partial, err)
		}
		if err := f.Truncate(job.size); err != nil {
			f.Close()
			return nil, nil, fmt.Errorf("size %s to %d bytes: %w", partial, job.size, err)
		}
		return &st, f, nil
	}
	f, err := os.OpenFile(partial, os.O_RDWR|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("open %s: %w", partial, err)
	}
	c.log.Info("hub: resuming", "file", job.path, "bytes_on_disk", sum(st.Done), "size", job.size)
	return &st, f, nil
}

func numParts(size, part int64) int64 { return (size + part - 1) / part }

func partLen(size, part int64, i int) int64 {
	return min(part, size-int64(i)*part)
}

func sum(xs []int64) (s int64) {
	for _, x := range xs {
		s += x
	}
	return s
}

// locator holds the download URL of one file, re-resolved when a signed CDN
// URL stops being accepted.
type locator struct {
	c   *Client
	job blobJob
	mu  sync.Mutex
	url string
	gen int
}

func (l *locator) get(ctx context.Context) (string, int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.url == "" {
		m, err := l.c.head(ctx, l.job.repo, l.job.commit, l.job.path)
		if err != nil {
			return "", 0, err
		}
		if m.ETag != l.job.etag || m.Size != l.job.size {
			return "", 0, fmt.Errorf("the Hub's listing says %s is %d bytes with etag %s, but resolving it gives %d bytes with etag %s", l.job.path, l.job.size, l.job.etag, m.Size, m.ETag)
		}
		l.url = m.URL
		l.gen++
	}
	return l.url, l.gen, nil
}

// invalidate forgets the URL of generation gen (the first caller wins).
func (l *locator) invalidate(gen int) {
	l.mu.Lock()
	if l.gen == gen {
		l.url = ""
	}
	l.mu.Unlock()
}

// errPermanent marks errors that retrying cannot fix.
type errPermanent struct{ err error }

func (e errPermanent) Error() string { return e.err.Error() }
func (e errPermanent) Unwrap() error { return e.err }

// fetchPart brings bytes [start+done(), end) of the file into f, retrying with
// backoff. The retry counter resets whenever bytes arrive, as huggingface_hub
// does, so a flaky but moving connection finishes.
func (c *Client) fetchPart(ctx context.Context, loc *locator, f *os.File, start, end int64, add func(int64), done func() int64) error {
	failures := 0
	relocated := false
	for {
		from := start + done()
		if from >= end {
			return nil
		}
		n, err := c.fetchRange(ctx, loc, f, from, end, add)
		if err == nil {
			continue
		}
		var perm errPermanent
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if errors.As(err, &perm) {
			return err
		}
		var he *HTTPError
		if errors.As(err, &he) && (he.Status == http.StatusForbidden || he.Status == http.StatusUnauthorized || he.Status == http.StatusGone) && !relocated {
			// A pre-signed CDN URL may have expired: resolve once more.
			relocated = true
			continue
		}
		if errors.As(err, &he) && !retryable(he.Status) {
			return err
		}
		if n > 0 {
			failures = 0
		}
		if failures >= c.maxRetries {
			return err
		}
		var resp *http.Response
		if he != nil {
			resp = he.resp
		}
		wait := c.backoff(failures, resp)
		failures++
		c.log.Warn("hub: range failed, retrying", "file", loc.job.path, "from", from, "err", err, "wait", wait)
		if err := sleepCtx(ctx, wait); err != nil {
			return err
		}
	}
}

// fetchRange sends one Range GET for [from, end) and writes what arrives.
// It returns how many bytes it wrote.
func (c *Client) fetchRange(ctx context.Context, loc *locator, f *os.File, from, end int64, add func(int64)) (int64, error) {
	u, gen, err := loc.get(ctx)
	if err != nil {
		var he *HTTPError
		if errors.As(err, &he) && retryable(he.Status) {
			return 0, err
		}
		return 0, errPermanent{err}
	}
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var resp *http.Response
	for hops := 0; ; hops++ {
		req, err := c.newRequest(rctx, http.MethodGet, u) // the token only goes to the Hub's host
		if err != nil {
			return 0, errPermanent{err}
		}
		req.Header.Set("Range", "bytes="+strconv.FormatInt(from, 10)+"-"+strconv.FormatInt(end-1, 10))
		resp, err = c.roundTrip(req)
		if err != nil {
			return 0, err
		}
		if resp.StatusCode < 300 || resp.StatusCode >= 400 || resp.StatusCode == http.StatusNotModified {
			break
		}
		// A CDN may redirect once more: follow up to 5 hops.
		resp.Body.Close()
		lu, err := req.URL.Parse(resp.Header.Get("Location"))
		if err != nil || hops >= 5 {
			return 0, errPermanent{fmt.Errorf("GET %s: bad or too many redirects (Location %q)", req.URL.Redacted(), resp.Header.Get("Location"))}
		}
		if err := httpScheme(lu); err != nil {
			return 0, err
		}
		u = lu.String()
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusPartialContent:
		last, err := checkContentRange(resp, from, end, loc.job.size)
		if err != nil {
			return 0, err
		}
		end = last + 1
	case resp.StatusCode == http.StatusOK && from == 0 && resp.ContentLength == loc.job.size:
		// The server ignored Range but sends the whole file from byte 0;
		// take what this part needs, then stop reading.
	case resp.StatusCode == http.StatusOK:
		return 0, errPermanent{fmt.Errorf("the server ignored the Range request (HTTP 200 for bytes=%d-%d); it cannot serve parallel or resumed downloads", from, end-1)}
	default:
		he := httpError(resp, loc.job.repo, loc.job.commit, loc.job.path)
		he.resp = resp
		if resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusGone {
			loc.invalidate(gen)
		}
		return 0, he
	}
	body := c.watchBody(resp.Body, cancel)
	defer body.Stop()
	buf := make([]byte, 1<<20)
	var wrote int64
	off := from
	for off < end {
		want := min(int64(len(buf)), end-off)
		n, rerr := io.ReadFull(body, buf[:want])
		if n > 0 {
			if _, werr := c.writeAt(f, buf[:n], off); werr != nil {
				if errors.Is(werr, syscall.ENOSPC) {
					return wrote, errPermanent{fmt.Errorf("disk full writing %s: %w", f.Name(), werr)}
				}
				return wrote, errPermanent{fmt.Errorf("write %s: %w", f.Name(), werr)}
			}
			off += int64(n)
			wrote += int64(n)
			add(int64(n))
		}
		if rerr != nil {
			if off >= end {
				break
			}
			if cause := context.Cause(rctx); errors.Is(cause, errStalled) {
				return wrote, fmt.Errorf("no data for %s: %w", c.stallTimeout, errStalled)
			}
			if rerr == io.ErrUnexpectedEOF || rerr == io.EOF {
				return wrote, fmt.Errorf("connection closed after %d bytes of range %d-%d: %w", wrote, from, end-1, io.ErrUnexpectedEOF)
			}
			return wrote, rerr
		}
	}
	return wrote, nil
}

// newHasher returns the hash an etag names: sha256 for a 64-hex etag (LFS),
// git blob sha1 ("blob <size>\0" + content) for a 40-hex one, or nil for an
// etag that is neither (a server that is not a Hub: size is all we check).
func newHasher(etag string, size int64) hash.Hash {
	switch {
	case sha256Pattern.MatchString(etag):
		return sha256.New()
	case commitPattern.MatchString(etag):
		h := sha1.New()
		fmt.Fprintf(h, "blob %d\x00", size)
		return h
	}
	return nil
}

// hashPrefix hashes f part by part in order, each as soon as partDone[i] is
// closed, and compares the result with etag. It returns ctx's error if the
// download stops first.
func hashPrefix(ctx context.Context, f *os.File, etag string, size, partSize int64, partDone []chan struct{}) error {
	h := newHasher(etag, size)
	buf := make([]byte, 1<<20)
	for i, ch := range partDone {
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		if h == nil {
			continue
		}
		start := int64(i) * partSize
		end := min(start+partSize, size)
		for off := start; off < end; {
			n, err := f.ReadAt(buf[:min(int64(len(buf)), end-off)], off)
			if err != nil && !(err == io.EOF && off+int64(n) == end) {
				return fmt.Errorf("hash %s: %w", f.Name(), err)
			}
			h.Write(buf[:n])
			off += int64(n)
		}
	}
	return checkSum(h, etag)
}

func checkSum(h hash.Hash, etag string) error {
	if h == nil {
		return nil
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != etag {
		return fmt.Errorf("%w: content hashes to %s, the Hub says %s", ErrChecksum, got, etag)
	}
	return nil
}

// verifyFile checks a downloaded file against its etag: sha256 for a 64-hex
// etag (LFS), git blob sha1 ("blob <size>\0" + content) for a 40-hex one.
// Other etags (a Hub that is not a Hub) are accepted on size alone.
func verifyFile(f *os.File, etag string, size int64) error {
	h := newHasher(etag, size)
	if h == nil {
		return nil
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	n, err := io.Copy(h, f)
	if err != nil {
		return fmt.Errorf("hash %s: %w", f.Name(), err)
	}
	if n != size {
		return fmt.Errorf("%w: %s has %d bytes, want %d", ErrChecksum, f.Name(), n, size)
	}
	return checkSum(h, etag)
}
