package hubtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCommitMatchesGit checks the blob, tree and commit ids against git itself: the fixture is committed
// into a real git repository (LFS files as their git-lfs pointer files) with the fixed author, date and
// message the package documents, and every id must agree.
func TestCommitMatchesGit(t *testing.T) {
	gitBin, err := exec.LookPath("git")
	if err != nil {
		t.Skip("git not installed")
	}
	f := newFixture(t)
	srv := f.start(t, Options{})
	commit, files, err := srv.Snapshot("acme", "tiny")
	if err != nil {
		t.Fatal(err)
	}

	work := t.TempDir()
	env := append(os.Environ(),
		"GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=hubtest", "GIT_AUTHOR_EMAIL=hubtest@lithos.invalid", "GIT_AUTHOR_DATE=@0 +0000",
		"GIT_COMMITTER_NAME=hubtest", "GIT_COMMITTER_EMAIL=hubtest@lithos.invalid", "GIT_COMMITTER_DATE=@0 +0000")
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(gitBin, args...)
		cmd.Dir, cmd.Env = work, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("init", "-q")
	for p, b := range f.tiny {
		content := b
		if strings.HasSuffix(p, ".safetensors") || strings.HasSuffix(p, ".bin") || len(b) >= testLFSThreshold {
			content = []byte(fmt.Sprintf("version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n", sha256Hex(b), len(b)))
		}
		dst := filepath.Join(work, filepath.FromSlash(p))
		os.MkdirAll(filepath.Dir(dst), 0o755)
		if err := os.WriteFile(dst, content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git("add", "-A")
	tree := git("write-tree")
	gitCommit := git("commit-tree", tree, "-m", "hubtest snapshot")
	if commit != gitCommit {
		t.Errorf("commit %s, git says %s", commit, gitCommit)
	}

	// Every blob and tree id of the listing, against `git ls-tree -r -t`.
	want := map[string]string{}
	for _, line := range strings.Split(git("ls-tree", "-r", "-t", tree), "\n") {
		meta, path, _ := strings.Cut(line, "\t")
		fs := strings.Fields(meta)
		want[path] = fs[2]
	}
	for _, e := range files {
		if want[e.Path] != e.OID {
			t.Errorf("%s: oid %s, git says %s", e.Path, e.OID, want[e.Path])
		}
	}
	items, _ := listTree(t, srv.URL+"/api/models/acme/tiny/tree/main?recursive=true")
	if len(items) != len(want) {
		t.Errorf("tree lists %d entries, git %d", len(items), len(want))
	}
	for _, it := range items {
		if want[it.Path] != it.OID {
			t.Errorf("tree %s: oid %s, git says %s", it.Path, it.OID, want[it.Path])
		}
	}
}

func TestScanSkipsHiddenAndFollowsFileSymlinks(t *testing.T) {
	root := t.TempDir()
	if err := WriteRepo(root, "o", "n", map[string][]byte{"a.txt": []byte("a")}); err != nil {
		t.Fatal(err)
	}
	repo := filepath.Join(root, "o", "n")
	os.WriteFile(filepath.Join(repo, ".hubtest-notes"), []byte("x"), 0o644)
	os.MkdirAll(filepath.Join(repo, ".git"), 0o755)
	os.WriteFile(filepath.Join(repo, ".git", "HEAD"), []byte("ref"), 0o644)
	blob := filepath.Join(t.TempDir(), "blob")
	os.WriteFile(blob, []byte("linked"), 0o644)
	if err := os.Symlink(blob, filepath.Join(repo, "linked.txt")); err != nil {
		t.Skip("symlinks unsupported:", err)
	}
	os.Symlink(t.TempDir(), filepath.Join(repo, "dirlink"))
	os.Symlink(filepath.Join(repo, "missing"), filepath.Join(repo, "dangling"))
	srv, err := New(root, Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, files, err := srv.Snapshot("o", "n")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range files {
		got = append(got, e.Path)
	}
	if fmt.Sprint(got) != "[a.txt linked.txt]" {
		t.Errorf("files %v, want [a.txt linked.txt]", got)
	}
	if files[1].ETag != gitSHA1([]byte("linked")) {
		t.Errorf("symlinked file etag %s", files[1].ETag)
	}
}
