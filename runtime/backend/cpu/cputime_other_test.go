//go:build !unix

package cpu

import "time"

// processCPU is not measured on this platform (0).
func processCPU() time.Duration { return 0 }
