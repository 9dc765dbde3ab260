package draft

import (
	"strings"
	"testing"
)

// TestNewStateBoundNoOverflow: the 1 TB bound of NewState holds for geometries whose byte count
// per context row, Layers·KVHeads·HeadDim·8, overflows int (2^24·2^48·2^3 = 2^75 wraps to 0; a
// product-first bound divided by it). The drafter is built directly (New would refuse the config),
// so no weight is needed and nothing is allocated.
func TestNewStateBoundNoOverflow(t *testing.T) {
	for _, c := range []struct {
		name     string
		cfg      Config
		capacity int
	}{
		{"overflowing product", Config{Layers: 1 << 24, KVHeads: 1 << 24, HeadDim: 1 << 24, BlockSize: 7, Hidden: 8}, 1},
		// 27B-like geometry: 5 layers × 8 × 128 × 8 bytes = 40960 bytes a row; 2^40/40960 = 26843545.6.
		{"just past 1 TB", Config{Layers: 5, KVHeads: 8, HeadDim: 128, BlockSize: 7, Hidden: 8}, 26843546},
	} {
		d := &Drafter{Cfg: c.cfg}
		st, err := d.NewState(c.capacity)
		if err == nil || st != nil || !strings.Contains(err.Error(), "needs more than 1 TB") {
			t.Errorf("%s: NewState(%d): %v, want the 1 TB refusal", c.name, c.capacity, err)
		}
	}
	if _, err := (&Drafter{}).NewState(1); err == nil {
		t.Error("NewState of a zero Drafter accepted")
	}
}
