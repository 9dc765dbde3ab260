package manifests

import (
	"fmt"
	"slices"
	"strings"
)

// Chip is a machine profile for the byte-budget ceilings of `lithos-pack
// audit`: a decode pass that must stream B bytes cannot finish faster than
// B / BandwidthGBps nanoseconds, whatever the kernels do.
type Chip struct {
	// ID is the stable key ("apple-m5-max-40c"), lower case.
	ID string
	// Name is the marketing name with the GPU bin ("Apple M5 Max, 40-core GPU").
	Name string
	// BandwidthGBps is the nominal memory bandwidth the vendor publishes, in
	// GB/s with GB = 1e9 bytes.
	BandwidthGBps float64
	// PageSize is the virtual-memory page size in bytes that buffers mapped
	// from a bundle must be aligned to (16 KiB on Apple silicon, 4 KiB on
	// x86-64 Linux hosts).
	PageSize int64
	// Source names where BandwidthGBps is published.
	Source string
}

// DefaultChipID is the chip the audit assumes when none is named: the
// 40-core M5 Max, the first target of lithos (ARCHITECTURE.md).
const DefaultChipID = "apple-m5-max-40c"

const (
	applePage = 16384 // Apple silicon page size (lithos-metal.md §2: bundles are 16 KiB aligned for it)
	linuxPage = 4096  // x86-64 Linux base page
)

// chips is the profile table. Bandwidths are the vendors' published nominal
// figures; each entry's Source says where. Apple publishes one figure per
// chip (per GPU bin where the memory bus differs) on the product's tech-specs
// page and in the chip's newsroom announcement.
var chips = []Chip{
	// The article that is lithos's byte-budget oracle
	// (shared/reference/000_1fcfc96d7abf8b5f.txt, "What one token costs the bus")
	// quotes Apple's MacBook Pro spec page, 614GB/s, and lithos-metal's backend
	// config, "nominal_gbps": 614.4 (lithos-metal.md §8.2); 614.4 is the exact
	// bus figure and the one the article's 34.3 tok/s is computed from.
	{ID: "apple-m5-max-40c", Name: "Apple M5 Max, 40-core GPU", BandwidthGBps: 614.4, PageSize: applePage,
		Source: "apple.com/macbook-pro/specs (614GB/s); lithos-metal m5_max_40c/config.json nominal_gbps 614.4"},
	// Same spec page and article: "the 32-core bin at 460GB/s".
	{ID: "apple-m5-max-32c", Name: "Apple M5 Max, 32-core GPU", BandwidthGBps: 460, PageSize: applePage,
		Source: "apple.com/macbook-pro/specs (460GB/s), quoted in the audit article"},
	// lithos-metal.md §2.1 measures 286–295 GB/s on the M5 Pro and calls it
	// 93–96 % of nominal, which puts nominal at 307 GB/s. Derived, not read
	// off Apple's page: check apple.com/macbook-pro/specs before relying on it.
	{ID: "apple-m5-pro", Name: "Apple M5 Pro", BandwidthGBps: 307, PageSize: applePage,
		Source: "derived: lithos-metal.md §2.1, 286–295 GB/s measured = 93–96 % of nominal"},
	{ID: "apple-m5", Name: "Apple M5", BandwidthGBps: 153, PageSize: applePage,
		Source: "Apple Newsroom, \"Apple unleashes M5\" (October 2025): 153GB/s"},
	{ID: "apple-m4-max-40c", Name: "Apple M4 Max, 40-core GPU", BandwidthGBps: 546, PageSize: applePage,
		Source: "Apple Newsroom, M4 Pro and M4 Max announcement (October 2024): 546GB/s"},
	{ID: "apple-m4-max-32c", Name: "Apple M4 Max, 32-core GPU", BandwidthGBps: 410, PageSize: applePage,
		Source: "apple.com MacBook Pro (M4 Max, 14-core CPU / 32-core GPU) tech specs: 410GB/s"},
	{ID: "apple-m4-pro", Name: "Apple M4 Pro", BandwidthGBps: 273, PageSize: applePage,
		Source: "Apple Newsroom, M4 Pro and M4 Max announcement (October 2024): 273GB/s"},
	{ID: "apple-m4", Name: "Apple M4", BandwidthGBps: 120, PageSize: applePage,
		Source: "Apple Newsroom, \"Apple introduces M4 chip\" (May 2024): 120GB/s"},
	{ID: "apple-m3-ultra", Name: "Apple M3 Ultra", BandwidthGBps: 819, PageSize: applePage,
		Source: "Apple Newsroom, M3 Ultra announcement (March 2025): 819GB/s"},
	{ID: "apple-m3-max-40c", Name: "Apple M3 Max, 40-core GPU", BandwidthGBps: 400, PageSize: applePage,
		Source: "apple.com MacBook Pro (M3 Max, 40-core GPU) tech specs: 400GB/s"},
	{ID: "apple-m3-max-30c", Name: "Apple M3 Max, 30-core GPU", BandwidthGBps: 300, PageSize: applePage,
		Source: "apple.com MacBook Pro (M3 Max, 30-core GPU) tech specs: 300GB/s"},
	{ID: "apple-m3-pro", Name: "Apple M3 Pro", BandwidthGBps: 150, PageSize: applePage,
		Source: "apple.com MacBook Pro (M3 Pro) tech specs: 150GB/s"},
	{ID: "apple-m3", Name: "Apple M3", BandwidthGBps: 100, PageSize: applePage,
		Source: "apple.com MacBook Pro (M3) tech specs: 100GB/s"},
	{ID: "apple-m2-ultra", Name: "Apple M2 Ultra", BandwidthGBps: 800, PageSize: applePage,
		Source: "Apple Newsroom, M2 Ultra announcement (June 2023): 800GB/s"},
	{ID: "apple-m2-max", Name: "Apple M2 Max", BandwidthGBps: 400, PageSize: applePage,
		Source: "Apple Newsroom, M2 Pro and M2 Max announcement (January 2023): 400GB/s"},
	{ID: "apple-m2-pro", Name: "Apple M2 Pro", BandwidthGBps: 200, PageSize: applePage,
		Source: "Apple Newsroom, M2 Pro and M2 Max announcement (January 2023): 200GB/s"},
	{ID: "apple-m2", Name: "Apple M2", BandwidthGBps: 100, PageSize: applePage,
		Source: "Apple Newsroom, M2 announcement (June 2022): 100GB/s"},
	{ID: "apple-m1-ultra", Name: "Apple M1 Ultra", BandwidthGBps: 800, PageSize: applePage,
		Source: "Apple Newsroom, M1 Ultra announcement (March 2022): 800GB/s"},
	{ID: "apple-m1-max", Name: "Apple M1 Max", BandwidthGBps: 400, PageSize: applePage,
		Source: "Apple Newsroom, M1 Pro and M1 Max announcement (October 2021): 400GB/s"},
	{ID: "apple-m1-pro", Name: "Apple M1 Pro", BandwidthGBps: 200, PageSize: applePage,
		Source: "Apple Newsroom, M1 Pro and M1 Max announcement (October 2021): 200GB/s"},
	{ID: "apple-m1", Name: "Apple M1", BandwidthGBps: 68.25, PageSize: applePage,
		Source: "derived: LPDDR4X-4266 on a 128-bit bus = 68.25GB/s (Apple's M1 Pro announcement calls 200GB/s \"nearly 3x\" M1)"},
	// NVIDIA publishes GPU memory bandwidth in TB/s on each product's datasheet.
	{ID: "nvidia-h200", Name: "NVIDIA H200 SXM (141 GB HBM3e)", BandwidthGBps: 4800, PageSize: linuxPage,
		Source: "NVIDIA H200 Tensor Core GPU datasheet: 4.8TB/s"},
	{ID: "nvidia-h100-sxm", Name: "NVIDIA H100 SXM (80 GB HBM3)", BandwidthGBps: 3350, PageSize: linuxPage,
		Source: "NVIDIA H100 Tensor Core GPU datasheet, H100 SXM: 3.35TB/s"},
	{ID: "nvidia-h100-pcie", Name: "NVIDIA H100 PCIe (80 GB HBM2e)", BandwidthGBps: 2000, PageSize: linuxPage,
		Source: "NVIDIA H100 Tensor Core GPU datasheet, H100 PCIe: 2TB/s"},
}

// Chips returns every chip profile, fastest Apple chips first, then NVIDIA.
func Chips() []Chip { return slices.Clone(chips) }

// ChipByID returns the profile whose ID equals id, ignoring case; a missing
// "apple-" or "nvidia-" prefix is tolerated ("m5-max-40c", "h200").
func ChipByID(id string) (Chip, bool) {
	id = strings.ToLower(strings.TrimSpace(id))
	for _, c := range chips {
		if c.ID == id || c.ID == "apple-"+id || c.ID == "nvidia-"+id {
			return c, true
		}
	}
	return Chip{}, false
}

// LookupChip is ChipByID with an error listing the known IDs.
func LookupChip(id string) (Chip, error) {
	if c, ok := ChipByID(id); ok {
		return c, nil
	}
	ids := make([]string, len(chips))
	for i, c := range chips {
		ids[i] = c.ID
	}
	return Chip{}, fmt.Errorf("unknown chip %q; known chips: %s (or give the bandwidth in GB/s)", id, strings.Join(ids, ", "))
}
