//go:build !amd64

package sha256x2

// available is false: the two-at-a-time kernel is x86-only, and crypto/sha256 uses the
// SHA instructions of other CPUs (arm64's) itself.
const available = false

func block1(h *[8]uint32, p *byte, n int)                            { panic("sha256x2: no kernel") }
func block2(ha *[8]uint32, pa *byte, hb *[8]uint32, pb *byte, n int) { panic("sha256x2: no kernel") }
