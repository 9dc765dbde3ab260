//go:build unix

package generate

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"lithos/pack"
)

// TestVerdictNotRegular: a FIFO, a symlink to /dev/zero or a symlink to a file holding a valid
// (failed) verdict for the key at the verdict path is not trusted: the check runs (the GPU,
// which now agrees, is kept), returns promptly (no blocking open of the FIFO, no unbounded read
// of /dev/zero) and its verdict replaces the path with a regular file; the symlink's target is
// left as it was.
func TestVerdictNotRegular(t *testing.T) {
	dir := draftFixture(t, "b", pack.DraftBF16, 1)
	cache := t.TempDir()
	g := &fakeGPU{wrap: shift}
	var logs bytes.Buffer
	openAuto(t, dir, cache, "", g, &logs) // a failed verdict, moved aside as the symlink's target
	f, failed := onlyVerdict(t, cache)
	elsewhere := filepath.Join(t.TempDir(), "failed.json")
	if err := os.Rename(f, elsewhere); err != nil {
		t.Fatal(err)
	}
	g.wrap = nil
	for _, c := range []struct {
		name string
		make func() error
	}{
		{"FIFO", func() error { return syscall.Mkfifo(f, 0o644) }},
		{"symlink to /dev/zero", func() error { return os.Symlink("/dev/zero", f) }},
		{"symlink to a verdict", func() error { return os.Symlink(elsewhere, f) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			os.Remove(f)
			if err := c.make(); err != nil {
				t.Skip(err)
			}
			before := g.sessions
			done := make(chan *Runner, 1)
			go func() {
				r, err := openWith(context.Background(), dir, Options{SelfCheckDir: cache, Log: quiet()}, autoCands(g, nil))
				if err != nil {
					t.Error(err)
				}
				done <- r
			}()
			var r *Runner
			select {
			case r = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("OpenWith did not return within 30 s (blocked on the verdict path)")
			}
			if r == nil {
				return
			}
			r.Close()
			if r.Backend.Name() != "fakegpu" || g.sessions != before+3 {
				t.Errorf("backend %s after %d GPU sessions: want fakegpu after 3 (the check ran)", r.Backend.Name(), g.sessions-before)
			}
			if fi, err := os.Lstat(f); err != nil || !fi.Mode().IsRegular() {
				t.Errorf("verdict path after the check: %v, %v: want a regular file", fi, err)
			}
			if _, v := onlyVerdict(t, cache); !v.Pass {
				t.Errorf("verdict %+v: want the new pass", v)
			}
			if v := readKeyVerdict(t, elsewhere); v.Pass != failed.Pass || v.Detail != failed.Detail {
				t.Errorf("the symlink's target changed: %+v", v)
			}
		})
	}
}

// readKeyVerdict reads the verdict in file f.
func readKeyVerdict(t *testing.T, f string) verdict {
	t.Helper()
	vs := verdicts(t, filepath.Dir(f))
	return vs[f]
}
