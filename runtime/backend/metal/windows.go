package metal

import (
	"fmt"
	"math"
)

// PageBytes is the Apple page size: newBufferWithBytesNoCopy needs a page-aligned pointer and
// length (bundle tensors start on 16 KiB boundaries, docs/bundle.md).
const PageBytes = 16384

// MaxWindowBytes bounds a no-copy buffer: offsets bound in an indirect command buffer are 32-bit,
// so every window is < 4 GiB.
const MaxWindowBytes = 1<<32 - PageBytes

// Range is a tensor's bytes [Off, Off+Len) in the mapped weights file.
type Range struct{ Off, Len int64 }

// Window is one no-copy buffer over the mapping: [Off, Off+Len), page-aligned.
type Window struct{ Off, Len int64 }

// Placement is where a tensor lives: window index and its offset inside that window (< 4 GiB).
type Placement struct {
	Window int
	Off    uint32
}

// PlanWindows covers the tensors of a mapping of size bytes with windows of at most max bytes
// (MaxWindowBytes when max ≤ 0), each a page-aligned range that wholly contains every tensor
// placed in it. Tensors are taken in order of offset; a tensor that does not fit the current
// window starts the next one at its own page. Windows may overlap. Errors: a negative size or
// one within a page of the largest int64 (page rounding would overflow), max above
// MaxWindowBytes (placements are 32-bit) or not a multiple of PageBytes, a tensor outside the
// mapping (checked without overflow: Len > size − Off), or larger than a window.
func PlanWindows(size int64, tensors []Range, max int64) ([]Window, []Placement, error) {
	if max <= 0 {
		max = MaxWindowBytes
	}
	if max%PageBytes != 0 || max < PageBytes || max > MaxWindowBytes {
		return nil, nil, fmt.Errorf("metal: window size %d is not a multiple of the %d-byte page in [%d, %d]", max, PageBytes, PageBytes, int64(MaxWindowBytes))
	}
	if size < 0 || size > math.MaxInt64-PageBytes {
		return nil, nil, fmt.Errorf("metal: mapping of %d bytes: want 0 to %d", size, int64(math.MaxInt64-PageBytes))
	}
	mapped := (size + PageBytes - 1) / PageBytes * PageBytes
	order := make([]int, len(tensors))
	for i := range order {
		order[i] = i
	}
	// Sort by offset (insertion sort keeps it dependency-free; bundles hold < 10⁴ tensors).
	for i := 1; i < len(order); i++ {
		for j := i; j > 0 && tensors[order[j]].Off < tensors[order[j-1]].Off; j-- {
			order[j], order[j-1] = order[j-1], order[j]
		}
	}
	var ws []Window
	pl := make([]Placement, len(tensors))
	for _, i := range order {
		t := tensors[i]
		if t.Off < 0 || t.Len < 0 || t.Off > size || t.Len > size-t.Off {
			return nil, nil, fmt.Errorf("metal: tensor %d (offset %d, %d bytes) is outside the %d-byte mapping", i, t.Off, t.Len, size)
		}
		start := t.Off / PageBytes * PageBytes
		if t.Off+t.Len-start > max {
			return nil, nil, fmt.Errorf("metal: tensor %d of %d bytes does not fit a %d-byte window", i, t.Len, max)
		}
		if n := len(ws); n > 0 && t.Off+t.Len-ws[n-1].Off <= max {
			w := &ws[n-1]
			end := min((t.Off+t.Len+PageBytes-1)/PageBytes*PageBytes, mapped)
			w.Len = max64(w.Len, end-w.Off)
			pl[i] = Placement{n - 1, uint32(t.Off - w.Off)}
			continue
		}
		end := min((t.Off+t.Len+PageBytes-1)/PageBytes*PageBytes, mapped)
		ws = append(ws, Window{start, max64(end-start, PageBytes)})
		pl[i] = Placement{len(ws) - 1, uint32(t.Off - start)}
	}
	return ws, pl, nil
}

func max64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}
