package pack

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// preallocate sets f's size to size bytes and reserves its blocks, so that a full disk fails
// here rather than halfway through the weights. File systems without fallocate get a sparse
// file (Truncate).
func preallocate(f *os.File, size int64) error {
	if size > 0 {
		err := unix.Fallocate(int(f.Fd()), 0, 0, size)
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.ENOSYS) {
			return err
		}
	}
	return f.Truncate(size)
}

// openDirect opens path for direct-I/O writes (O_DIRECT); nil when the file system refuses.
func openDirect(path string) *os.File {
	f, err := os.OpenFile(path, os.O_WRONLY|unix.O_DIRECT, 0)
	if err != nil {
		return nil
	}
	return f
}

// directRefused reports whether a direct write failed because of direct I/O itself (EINVAL:
// alignment or a file system without it), so that a buffered write may succeed.
func directRefused(err error) bool { return errors.Is(err, unix.EINVAL) }
