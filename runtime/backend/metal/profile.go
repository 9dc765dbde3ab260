package metal

import (
	"fmt"

	"lithos/manifests"
)

// Profile is what a Metal device says about itself (Device.Profile): the chip profile of
// issue 11, matched to the published figures of manifests.Chips by Chip.
type Profile struct {
	Name          string // MTLDevice.name: "Apple M5 Max"
	Family        int    // highest MTLGPUFamilyApple<N> supported (N); 0 if none of 7…10
	GPUCores      int    // IORegistry gpu-core-count (AGXAccelerator); 0 = unknown
	WorkingSet    uint64 // recommendedMaxWorkingSetSize, bytes
	MaxBuffer     uint64 // maxBufferLength, bytes
	UnifiedMemory bool
}

// Chip returns the manifests chip profile of this device (nominal bandwidth, page size): the
// entry named Name, or, for chips whose bins differ in bandwidth, the entry named
// "<Name>, <GPUCores>-core GPU" (manifests' naming, "Apple M5 Max, 40-core GPU"). ok is
// false when no entry matches — a chip not in the table, or a binned chip whose core count
// is unknown (GPUCores 0: the bins cannot be told apart).
func (p Profile) Chip() (manifests.Chip, bool) {
	binned := fmt.Sprintf("%s, %d-core GPU", p.Name, p.GPUCores)
	for _, c := range manifests.Chips() {
		if c.Name == p.Name || p.GPUCores > 0 && c.Name == binned {
			return c, true
		}
	}
	return manifests.Chip{}, false
}

// String describes the profile for logs: "Apple M5 Max (40 GPU cores, Apple10, 36.0 GB working set)".
func (p Profile) String() string {
	cores := "unknown GPU cores"
	if p.GPUCores > 0 {
		cores = fmt.Sprintf("%d GPU cores", p.GPUCores)
	}
	return fmt.Sprintf("%s (%s, Apple%d, %.1f GB working set)", p.Name, cores, p.Family, float64(p.WorkingSet)/1e9)
}

// OSVersion returns the macOS version the process runs on, "14.4.1 (23E224)" (sysctl
// kern.osproductversion and kern.osversion, the build), or "" where it cannot be read and on
// other systems. The OS compiles the Metal source (MTLDevice newLibraryWithSource), so a
// macOS update may change the code the kernels run as: runtime/generate keys its first-use
// self-check verdicts by it.
func OSVersion() string { return osVersion() }

// osVersion is OSVersion's source: "" here, sysctl on darwin (osversion_darwin.go).
var osVersion = func() string { return "" }
