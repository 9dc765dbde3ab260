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
		if left, _ := filepath.Glob(TempGlob(dir)); len(left) != 0 {
			t.Fatalf("temporary files left: %v", left)
		}
	}
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
	if fi, err := os.Stat(sub); err != nil || !fi.IsDir() {
		t.Fatalf("the directory was replaced: %v, %v", fi, err)
	}
	if left, _ := filepath.Glob(TempGlob(dir)); len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}
	missing := filepath.Join(dir, "no", "such", "file")
	if err := Write(missing, []byte("x"), 0o644); err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("Write into a missing directory: %v, want an error naming the path", err)
	}
}
