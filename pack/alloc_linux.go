package pack

import (
	"errors"
	"os"
	"unsafe"

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

// hugePage is the size of a transparent huge page on x86-64 and arm64 (4 KiB base pages).
const hugePage = 2 << 20

// allocChunks returns n buffers of size bytes (a multiple of ioAlign) carved from one anonymous
// mapping aligned to, and advised as, transparent huge pages, and a function that unmaps them
// (to call once no buffer is used any more). Direct writes pin the pages of the buffer they
// write from; on 2 MiB pages that costs 0.02 ns of system time per byte written instead of
// 0.08 on 4 KiB pages (the development VM, Linux 6.18: 1.3 s less for the 27B's 20.8 GB). Where
// huge pages are refused the mapping works with small ones; where mmap fails, heap buffers are
// returned.
func allocChunks(n, size int) ([][]byte, func()) {
	total := n * size
	m, err := unix.Mmap(-1, 0, total+hugePage, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return heapChunks(n, size), func() {}
	}
	skip := int(-uintptr(unsafe.Pointer(&m[0])) & (hugePage - 1))
	region := m[skip : skip+total : skip+total]
	_ = unix.Madvise(region, unix.MADV_HUGEPAGE) // advice only
	out := make([][]byte, n)
	for i := range out {
		out[i] = region[i*size : (i+1)*size : (i+1)*size]
	}
	return out, func() { _ = unix.Munmap(m) }
}
