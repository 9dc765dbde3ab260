//go:build unix

package generate

import "golang.org/x/sys/unix"

// openVerdictFlags are readVerdict's open flags beyond O_RDONLY: O_NOFOLLOW (a symlink at the
// verdict path fails to open) and O_NONBLOCK (a FIFO swapped in after the Lstat opens at once,
// then fails the regular-file check, instead of blocking for a writer).
const openVerdictFlags = unix.O_NOFOLLOW | unix.O_NONBLOCK
