package hub

import (
	"path/filepath"
	"strings"
	"testing"
)

// FuzzCheckRepoPath: a listing path that checkRepoPath accepts can never
// name a place outside the snapshot folder it is joined to.
func FuzzCheckRepoPath(f *testing.F) {
	for _, s := range []string{"config.json", "a/b/c", "../x", "a/../../b", "/abs", `a\b`, "a//b", ".", "..", "a/./b", "C:x", "…/x"} {
		f.Add(s)
	}
	base := filepath.Join("/cache", "models--o--n", "snapshots", "0123")
	f.Fuzz(func(t *testing.T, p string) {
		if checkRepoPath(p) != nil {
			return
		}
		joined := filepath.Join(base, filepath.FromSlash(p))
		if !strings.HasPrefix(joined, base+string(filepath.Separator)) {
			t.Fatalf("accepted %q joins to %q, outside %q", p, joined, base)
		}
	})
}

// FuzzNextLink: any Link header gives an error or a URL, never a panic.
func FuzzNextLink(f *testing.F) {
	f.Add(`<https://hub/api?cursor=1>; rel="next"`)
	f.Add(`<>; rel="next"`)
	f.Add(`>; <rel="next"`)
	f.Fuzz(func(t *testing.T, h string) {
		nextLink(h, "http://hub/api/models/o/n/tree/main")
	})
}
