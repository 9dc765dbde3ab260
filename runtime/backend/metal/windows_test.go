package metal

import (
	"math"
	"strings"
	"testing"
)

func TestPlanWindows(t *testing.T) {
	const page = PageBytes
	max := int64(4 * page)
	tensors := []Range{{0, 100}, {page, 2 * page}, {3 * page, page}, {4 * page, 10}, {6 * page, 3 * page}, {2 * page, 5}}
	size := int64(9 * page)
	ws, pl, err := PlanWindows(size, tensors, max)
	if err != nil {
		t.Fatal(err)
	}
	for i, tr := range tensors {
		w := ws[pl[i].Window]
		if w.Off%page != 0 || w.Len%page != 0 || w.Len > max {
			t.Fatalf("window %+v: not page-aligned or too long", w)
		}
		if int64(pl[i].Off)+w.Off != tr.Off || tr.Off+tr.Len > w.Off+w.Len {
			t.Fatalf("tensor %d %+v placed at %+v in window %+v", i, tr, pl[i], w)
		}
	}
	// [0, 4 pages) holds the first four tensors by offset; the one at 4 pages starts a window.
	if len(ws) != 3 || ws[0] != (Window{0, 4 * page}) || ws[1] != (Window{4 * page, page}) {
		t.Fatalf("windows %+v", ws)
	}
	if _, _, err := PlanWindows(size, []Range{{0, 5 * page}}, max); err == nil {
		t.Fatal("a tensor larger than a window was accepted")
	}
	if _, _, err := PlanWindows(size, []Range{{8 * page, 2 * page}}, max); err == nil {
		t.Fatal("a tensor past the mapping was accepted")
	}
}

// TestPlanWindowsOverflow: bounds that overflow int64 when added are refused, not wrapped into
// acceptance (review item 17: Off+Len > size wrapped negative for Off near the int64 limit).
func TestPlanWindowsOverflow(t *testing.T) {
	const big = math.MaxInt64 - 2*PageBytes // a valid (huge) mapping size
	for _, c := range []struct {
		name string
		size int64
		r    Range
		max  int64
		want string
	}{
		{"off+len wraps", big, Range{big - 10, math.MaxInt64 - 5}, 0, "outside the"},
		{"len max int64", big, Range{PageBytes, math.MaxInt64}, 0, "outside the"},
		{"off past size", 4 * PageBytes, Range{5 * PageBytes, 0}, 0, "outside the"},
		{"size near max", math.MaxInt64 - 1, Range{0, 1}, 0, "mapping of"},
		{"negative size", -1, Range{0, 0}, 0, "mapping of"},
		{"window over 32 bits", 4 * PageBytes, Range{0, 1}, 1 << 32, "is not a multiple"},
	} {
		ws, _, err := PlanWindows(c.size, []Range{c.r}, c.max)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: windows %v, error %v; want an error containing %q", c.name, ws, err, c.want)
		}
	}
	// The last bytes of the largest mapping are still placeable.
	ws, pl, err := PlanWindows(big, []Range{{big - 100, 100}}, 0)
	if err != nil || len(ws) != 1 || ws[0].Off+int64(pl[0].Off) != big-100 {
		t.Fatalf("tensor at the end of a %d-byte mapping: %v %v %v", int64(big), ws, pl, err)
	}
}
