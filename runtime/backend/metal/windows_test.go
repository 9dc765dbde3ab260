package metal

import "testing"

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
