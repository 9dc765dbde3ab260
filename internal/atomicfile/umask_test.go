//go:build unix

package atomicfile

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestWriteIgnoresUmask: the file gets exactly the bits asked for, whatever the process's umask
// (a 0600 temporary file renamed as is, or a mode left to the umask, would fail).
func TestWriteIgnoresUmask(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	p := filepath.Join(t.TempDir(), "f")
	for _, perm := range []os.FileMode{0o664, 0o644, 0o640} {
		if err := Write(p, []byte("x"), perm); err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != perm {
			t.Fatalf("mode %v, %v, want %v under umask 077", fi.Mode().Perm(), err, perm)
		}
	}
}
