//go:build !linux

package pack

import "os"

// preallocate sets f's size to size bytes (a sparse file where the file system has them).
func preallocate(f *os.File, size int64) error { return f.Truncate(size) }

// openDirect returns nil: direct I/O is only used on Linux.
func openDirect(string) *os.File { return nil }

func directRefused(error) bool { return false }

// allocChunks returns n heap buffers of size bytes, aligned to ioAlign.
func allocChunks(n, size int) ([][]byte, func()) { return heapChunks(n, size), func() {} }
