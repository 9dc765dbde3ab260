package hubtest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

// WriteRepo writes files (repo path "a/b.json" → content) into root/org/name, creating directories, so a
// test can build a fixture repo in a t.TempDir(). Existing files are overwritten; others are left alone.
// It returns an error for an invalid org/name or path (same rules as the server).
func WriteRepo(root, org, name string, files map[string][]byte) error {
	if !validRepoPart(org) || !validRepoPart(name) {
		return fmt.Errorf("hubtest: WriteRepo: invalid repo id %q", org+"/"+name)
	}
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		if !validRepoPath(p) {
			return fmt.Errorf("hubtest: WriteRepo %s/%s: invalid path %q", org, name, p)
		}
		dst := filepath.Join(root, org, name, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return fmt.Errorf("hubtest: WriteRepo: %w", err)
		}
		if err := os.WriteFile(dst, files[p], 0o644); err != nil {
			return fmt.Errorf("hubtest: WriteRepo: %w", err)
		}
	}
	return nil
}

// WriteSettings writes root/org/name/.hubtest.json.
func WriteSettings(root, org, name string, set RepoSettings) error {
	if !validRepoPart(org) || !validRepoPart(name) {
		return fmt.Errorf("hubtest: WriteSettings: invalid repo id %q", org+"/"+name)
	}
	if err := set.validate(); err != nil {
		return fmt.Errorf("hubtest: WriteSettings %s/%s: %w", org, name, err)
	}
	b, err := json.MarshalIndent(set, "", "  ")
	if err != nil {
		return err
	}
	dir := filepath.Join(root, org, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("hubtest: WriteSettings: %w", err)
	}
	return os.WriteFile(filepath.Join(dir, settingsFile), append(b, '\n'), 0o644)
}

// Entry is what the Hub knows about one repo file, as this server computes it: a test's expected values.
type Entry struct {
	Path   string
	Size   int64  // bytes
	LFS    bool   // stored in LFS (302 to the blob path on resolve)
	ETag   string // unquoted: sha256 hex (LFS) or git blob sha1 hex (regular)
	OID    string // git blob id (of the LFS pointer for LFS files)
	SHA256 string // LFS only
}

// Snapshot returns the commit id and the files of repo org/name as the server currently serves them
// (nil error only for an existing, not renamed repo).
func (s *Server) Snapshot(org, name string) (commit string, files []Entry, err error) {
	if !validRepoPart(org) || !validRepoPart(name) {
		return "", nil, fmt.Errorf("hubtest: invalid repo id %q", org+"/"+name)
	}
	snap, err := s.loadRepo(org, name)
	if err != nil {
		return "", nil, fmt.Errorf("hubtest: %s/%s: %w", org, name, err)
	}
	if snap.Settings.RenamedTo != "" {
		return "", nil, fmt.Errorf("hubtest: %s/%s is renamed to %s", org, name, snap.Settings.RenamedTo)
	}
	for _, e := range snap.Entries {
		if e.Dir {
			continue
		}
		files = append(files, Entry{Path: e.Path, Size: e.Size, LFS: e.LFS, ETag: e.etag(), OID: e.OID, SHA256: e.SHA256})
	}
	return snap.Commit, files, nil
}
