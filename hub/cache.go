package hub

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"lithos/internal/atomicfile"

	"golang.org/x/sys/unix"
)

// RepoFolderName returns the cache folder of a model repository:
// "models--" + repo with "/" replaced by "--" (hub-and-go.md A10).
func RepoFolderName(repo string) string {
	return "models--" + strings.ReplaceAll(repo, "/", "--")
}

func repoDir(cache, repo string) string { return filepath.Join(cache, RepoFolderName(repo)) }

func blobPath(cache, repo, etag string) string {
	return filepath.Join(repoDir(cache, repo), "blobs", etag)
}

// checkRevisionName refuses revision names that would escape refs/.
func checkRevisionName(rev string) error {
	if err := checkRepoPath(rev); err != nil {
		return fmt.Errorf("invalid revision name %q", rev)
	}
	return nil
}

// readRef returns the commit stored in refs/<revision>, or the revision itself
// when it is a commit whose snapshot folder exists.
func readRef(cache, repo, rev string) (string, error) {
	if rev == "" {
		rev = "main"
	}
	if IsCommit(rev) {
		if _, err := os.Stat(filepath.Join(repoDir(cache, repo), "snapshots", rev)); err == nil {
			return rev, nil
		}
		return "", fmt.Errorf("commit %s of %s is not in the cache %s", rev, repo, cache)
	}
	if err := checkRevisionName(rev); err != nil {
		return "", err
	}
	b, err := os.ReadFile(filepath.Join(repoDir(cache, repo), "refs", filepath.FromSlash(rev)))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("revision %q of %s is not in the cache %s (fetch it once online)", rev, repo, cache)
		}
		return "", err
	}
	c := strings.TrimSpace(string(b))
	if !IsCommit(c) {
		return "", fmt.Errorf("cache ref %s of %s holds %q, not a commit", rev, repo, c)
	}
	return c, nil
}

// writeRef records refs/<revision> = commit, atomically, only when it changed.
func writeRef(cache, repo, rev, commit string) error {
	if rev == "" || IsCommit(rev) {
		return nil
	}
	if err := checkRevisionName(rev); err != nil {
		return err
	}
	p := filepath.Join(repoDir(cache, repo), "refs", filepath.FromSlash(rev))
	if b, err := os.ReadFile(p); err == nil && string(b) == commit {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("write ref %s: %w", rev, err)
	}
	return writeFileAtomic(p, []byte(commit))
}

// SnapshotDir returns the cached snapshot folder of repo at revision (a
// branch or tag recorded in refs/, or a commit) without any network access.
func SnapshotDir(cacheDir, repo, revision string) (string, error) {
	if err := ValidateRepoID(repo); err != nil {
		return "", err
	}
	commit, err := readRef(cacheDir, repo, revision)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(repoDir(cacheDir, repo), "snapshots", commit)
	if _, err := os.Stat(dir); err != nil {
		return "", fmt.Errorf("snapshot %s of %s: %w", commit, repo, err)
	}
	return dir, nil
}

// linkSnapshot makes snapshots/<commit>/<path> a relative symlink to
// ../../blobs/<etag> (depth adjusted), replacing whatever was there.
func linkSnapshot(cache, repo, commit, path, etag string) error {
	if err := checkRepoPath(path); err != nil {
		return err
	}
	snap := filepath.Join(repoDir(cache, repo), "snapshots", commit)
	dst := filepath.Join(snap, filepath.FromSlash(path))
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("link %s: %w", path, err)
	}
	// No folder on the way may be a symlink leading out of the snapshot.
	realSnap, err1 := filepath.EvalSymlinks(snap)
	realDir, err2 := filepath.EvalSymlinks(filepath.Dir(dst))
	if err1 != nil || err2 != nil || (realDir != realSnap && !strings.HasPrefix(realDir, realSnap+string(filepath.Separator))) {
		return fmt.Errorf("link %s: the snapshot folder %s leads outside %s (a symlink in the cache?)", path, filepath.Dir(dst), snap)
	}
	rel, err := filepath.Rel(filepath.Dir(dst), blobPath(cache, repo, etag))
	if err != nil {
		return fmt.Errorf("link %s: %w", path, err)
	}
	if cur, err := os.Readlink(dst); err == nil && cur == rel {
		return nil
	}
	var rnd [8]byte
	rand.Read(rnd[:])
	tmp := filepath.Join(filepath.Dir(dst), ".lithos-link-"+hex.EncodeToString(rnd[:]))
	if err := os.Symlink(rel, tmp); err != nil {
		return fmt.Errorf("link %s: %w", path, err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("link %s: %w", path, err)
	}
	return nil
}

// ensureCacheDirTag creates CACHEDIR.TAG at the cache root as huggingface_hub
// does, so backup tools skip the cache.
func ensureCacheDirTag(cache string) {
	p := filepath.Join(cache, "CACHEDIR.TAG")
	if _, err := os.Stat(p); err == nil {
		return
	}
	_ = os.MkdirAll(cache, 0o755)
	_ = os.WriteFile(p, []byte("Signature: 8a477f597d28d172789f06886806bc55\n# This file is a cache directory tag created by Hugging Face Hub tools (lithos).\n"), 0o644)
}

// lockBlob takes the exclusive flock huggingface_hub takes on
// .locks/<repo folder>/<etag>.lock, so two tools never write one blob at once.
// While another process holds it, it polls and says so once in the log; ctx
// ends the wait. The returned function releases it.
func lockBlob(ctx context.Context, cache, repo, etag string, log *slog.Logger) (func(), error) {
	dir := filepath.Join(cache, ".locks", RepoFolderName(repo))
	path := filepath.Join(dir, etag+".lock")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("lock %s: %w (a read-only cache can be used with HF_HUB_OFFLINE=1)", path, err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o664)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w (a read-only cache can be used with HF_HUB_OFFLINE=1)", path, err)
	}
	release := func() {
		unix.Flock(int(f.Fd()), unix.LOCK_UN)
		f.Close()
	}
	for waited := false; ; {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		switch {
		case err == nil, errors.Is(err, unix.ENOTSUP), errors.Is(err, unix.ENOSYS), errors.Is(err, unix.ENOLCK):
			return release, nil // taken, or a file system without flock (as huggingface_hub, go on)
		case !errors.Is(err, unix.EWOULDBLOCK):
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if !waited {
			log.Warn("hub: waiting for another process downloading the same file", "lock", path)
			waited = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, context.Cause(ctx)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// writeFileAtomic writes data to path through a synced temporary file renamed over it, 0644:
// refs and records must be readable by the other users of a shared cache (huggingface_hub
// writes them 0644).
func writeFileAtomic(path string, data []byte) error {
	return atomicfile.Write(path, data, 0o644)
}
