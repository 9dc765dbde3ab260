package hub

import "os"

// SetWriteAtForTest replaces how c writes downloaded bytes (tests simulate a full disk).
func SetWriteAtForTest(c *Client, w func(f *os.File, p []byte, off int64) (int, error)) {
	c.writeAt = w
}
