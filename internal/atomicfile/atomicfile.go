// Package atomicfile writes a file whole or not at all: the bytes go to a temporary file in the
// destination's directory, which is synced and renamed over the destination, so that a reader
// sees the old file or the new one, never part of one, and a process killed on the way leaves
// at most a temporary file (named by TempGlob) beside it.
package atomicfile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// TempGlob is the filepath.Glob pattern of the temporary files Write leaves in dir when it is
// killed between creating and renaming one: hidden files ".<name>.tmp-<random>".
func TempGlob(dir string) string { return filepath.Join(dir, ".*.tmp-*") }

// Write writes data to path with permission bits perm (exactly: os.File.Chmod sets them, so
// the umask does not apply) through a temporary file ".<base>.tmp-<random>" in path's
// directory, written, synced, closed and renamed over path. On any error the temporary
// file is removed and path is left as it was; the error names the step and the file.
func Write(path string, data []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	// CreateTemp makes 0600 files; the callers' files are read by other users and tools.
	err = f.Chmod(perm)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if err = errors.Join(err, f.Close()); err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s (through %s): %w", path, filepath.Base(tmp), err)
	}
	return nil
}
