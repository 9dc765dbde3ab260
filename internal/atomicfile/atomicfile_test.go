package atomicfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWrite: a new file and a replaced one hold exactly the bytes with the permission bits
// asked for, and no temporary file is left beside them.
func TestWrite(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "refs")
	for _, c := range []struct {
		data string
		perm os.FileMode
	}{{"first", 0o644}, {"second, longer", 0o600}, {"", 0o644}} {
		if err := Write(p, []byte(c.data), c.perm); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(p)
		if err != nil || string(got) != c.data {
			t.Fatalf("read back %q, %v, want %q", got, err, c.data)
		}
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != c.perm {
			t.Fatalf("mode %v, %v, want %v", fi.Mode().Perm(), err, c.perm)
		}
		if names := entries(t, dir); len(names) != 1 || names[0] != "refs" {
			t.Fatalf("the directory holds %v, want [refs]", names)
		}
	}
}

// entries lists dir's names.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

// TestWriteFails: a rename onto a directory fails, leaves the directory as it was and no
// temporary file; a missing directory fails with an error that names the path.
func TestWriteFails(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sub, "keep"), []byte("k"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := Write(sub, []byte("x"), 0o644)
	if err == nil || !strings.Contains(err.Error(), sub) {
		t.Fatalf("Write over a directory: %v, want an error naming it", err)
	}
	// The error names the temporary file, which TempGlob matches and which is gone.
	_, through, _ := strings.Cut(err.Error(), "(through ")
	tmp, _, _ := strings.Cut(through, ")")
	if ok, _ := filepath.Match(TempGlob(dir), filepath.Join(dir, tmp)); !ok {
		t.Fatalf("the temporary file %q (from %q) does not match TempGlob", tmp, err)
	}
	if fi, err := os.Stat(sub); err != nil || !fi.IsDir() {
		t.Fatalf("the directory was replaced: %v, %v", fi, err)
	}
	if names := entries(t, dir); len(names) != 1 || names[0] != "sub" {
		t.Fatalf("the directory holds %v after the failure, want [sub]", names)
	}
	missing := filepath.Join(dir, "no", "such", "file")
	if err := Write(missing, []byte("x"), 0o644); err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("Write into a missing directory: %v, want an error naming the path", err)
	}
}
