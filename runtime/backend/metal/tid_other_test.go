//go:build !linux

package metal

// threadID is not available here: thread identity is not checked.
func threadID() (int, bool) { return 0, false }
