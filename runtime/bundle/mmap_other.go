//go:build !unix

package bundle

import (
	"io"
	"os"
)

// mapFile reads the file into memory where mmap is not available (a copy; the CPU backend
// computes on it the same way).
func mapFile(f *os.File, size int) ([]byte, func() error, error) {
	data := make([]byte, size)
	if _, err := io.ReadFull(f, data); err != nil {
		return nil, nil, err
	}
	return data, func() error { return nil }, nil
}
