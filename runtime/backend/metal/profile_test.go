package metal

import (
	"strings"
	"testing"
)

// TestProfileChip: a device profile finds its manifests entry by name, binned chips by name
// and core count; an unknown core count or chip finds none.
func TestProfileChip(t *testing.T) {
	for _, c := range []struct {
		name  string
		cores int
		want  string // chip ID, "" for none
	}{
		{"Apple M5 Max", 40, "apple-m5-max-40c"},
		{"Apple M5 Max", 32, "apple-m5-max-32c"},
		{"Apple M5 Max", 0, ""},  // binned: the core count decides
		{"Apple M5 Max", 36, ""}, // no such bin in the table
		{"Apple M4 Pro", 20, "apple-m4-pro"},
		{"Apple M4 Pro", 0, "apple-m4-pro"},
		{"Apple M1", 8, "apple-m1"},
		{"Apple M9 Hyper", 80, ""},
	} {
		chip, ok := Profile{Name: c.name, GPUCores: c.cores}.Chip()
		if ok != (c.want != "") || chip.ID != c.want {
			t.Errorf("%s, %d cores: %q %v, want %q", c.name, c.cores, chip.ID, ok, c.want)
		}
		if ok && chip.PageSize != PageBytes {
			t.Errorf("%s: page size %d, want the Apple page %d", chip.ID, chip.PageSize, PageBytes)
		}
	}
	s := Profile{Name: "Apple M5 Max", GPUCores: 40, Family: 10, WorkingSet: 36e9}.String()
	if !strings.Contains(s, "40 GPU cores") || !strings.Contains(s, "36.0 GB") {
		t.Errorf("String: %q", s)
	}
}
