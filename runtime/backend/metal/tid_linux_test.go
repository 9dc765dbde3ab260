package metal

import "syscall"

// threadID returns the calling OS thread's id.
func threadID() (int, bool) { return syscall.Gettid(), true }
