package hubtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// TB is the part of testing.TB that Start needs; *testing.T and *testing.B satisfy it. Declared here so
// that this package (imported by `lithos-pack hub serve`) does not link package testing into binaries.
type TB interface {
	Helper()
	Cleanup(func())
	Fatalf(format string, args ...any)
}

// Start serves root on a new loopback listener for the duration of the test and returns the Server with
// URL set ("http://127.0.0.1:<port>"); the listener is closed by tb.Cleanup. Failures call tb.Fatalf.
func Start(tb TB, root string, opts Options) *Server {
	tb.Helper()
	s, err := New(root, opts)
	if err != nil {
		tb.Fatalf("hubtest.Start: %v", err)
		return nil
	}
	s.URL = s.listen(tb)
	return s
}

// StartWithBlobHost is Start with LFS blobs on a second listener under a different host name: API and
// resolve at "http://127.0.0.1:<port1>" (URL), LFS redirects to "http://localhost:<port2>/cdn/..."
// (BlobURL). The host and port differ, as between huggingface.co and its CDN, so a test can check that
// a client drops the Authorization header on the cross-host redirect (hub-and-go.md A3 step 5; see
// Record.Host and Record.Authorization). opts.BlobBaseURL is overridden.
func StartWithBlobHost(tb TB, root string, opts Options) *Server {
	tb.Helper()
	s, err := New(root, opts)
	if err != nil {
		tb.Fatalf("hubtest.StartWithBlobHost: %v", err)
		return nil
	}
	s.URL = s.listen(tb)
	blob := s.listen(tb)
	_, port, _ := net.SplitHostPort(blob[len("http://"):])
	s.BlobURL = "http://localhost:" + port
	s.opts.BlobBaseURL = s.BlobURL
	return s
}

func (s *Server) listen(tb TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("hubtest: listen: %v", err)
		return ""
	}
	hs := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second, ErrorLog: nil}
	done := make(chan struct{})
	go func() {
		defer close(done)
		hs.Serve(ln)
	}()
	tb.Cleanup(func() {
		// Close (not Shutdown): a stalled handler must not hold the test up.
		hs.Close()
		<-done
	})
	return "http://" + ln.Addr().String()
}

// Serve serves HTTP on ln until ctx is cancelled, then shuts down gracefully (in-flight requests get up
// to 5 seconds). It sets s.URL from the listener address and returns nil after a graceful shutdown.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	s.URL = "http://" + ln.Addr().String()
	hs := &http.Server{Handler: s, ReadHeaderTimeout: 30 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	s.log.Info("hubtest: serving", "root", s.root, "url", s.URL)
	go func() {
		// Hash every repo now rather than inside the first request for it (a large mirror takes
		// seconds per GB; a client's metadata HEAD may time out first).
		if err := s.Warm(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("hubtest: warm-up", "err", err)
		}
	}()
	select {
	case err := <-errc:
		return fmt.Errorf("hubtest: serve %s: %w", s.URL, err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		hs.Close()
		return fmt.Errorf("hubtest: shutdown %s: %w", s.URL, err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("hubtest: serve %s: %w", s.URL, err)
	}
	return nil
}

// ListenAndServe serves root on addr (e.g. "127.0.0.1:8080") until ctx is cancelled; see Serve. It is
// what `lithos-pack hub serve DIR` runs.
func ListenAndServe(ctx context.Context, addr, root string, opts Options) error {
	s, err := New(root, opts)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("hubtest: listen %s: %w", addr, err)
	}
	return s.Serve(ctx, ln)
}

// Warm scans and hashes every repo under the root, so that later requests find the hashes cached. It
// stops at the first error or when ctx is done, and logs the time taken at info level.
func (s *Server) Warm(ctx context.Context) error {
	start := time.Now()
	orgs, err := os.ReadDir(s.root)
	if err != nil {
		return fmt.Errorf("hubtest: warm: %w", err)
	}
	var repos, files int
	var bytes int64
	for _, o := range orgs {
		if !validRepoPart(o.Name()) {
			continue
		}
		names, err := os.ReadDir(filepath.Join(s.root, o.Name()))
		if err != nil {
			continue // not a directory
		}
		for _, n := range names {
			if err := ctx.Err(); err != nil {
				return err
			}
			if !validRepoPart(n.Name()) {
				continue
			}
			snap, err := s.loadRepo(o.Name(), n.Name())
			if errors.Is(err, errRepoNotFound) {
				continue
			}
			if err != nil {
				return fmt.Errorf("hubtest: warm: %w", err)
			}
			repos++
			for _, e := range snap.Entries {
				if !e.Dir {
					files++
					bytes += e.Size
				}
			}
		}
	}
	s.log.Info("hubtest: hashed repos", "repos", repos, "files", files, "bytes", bytes, "dur", time.Since(start).Round(time.Millisecond))
	return nil
}
