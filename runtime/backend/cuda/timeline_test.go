//go:build linux && amd64

package cuda

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"lithos/kernels"
)

// TestTimeline: with TimelineEnv set, the module records every threadgroup of every launch —
// on a plain exit and on the done check's early return — and Unload writes the ring: the
// header's count, each record's kernel, threadgroup, launch (its parameter record) and times in
// order (start ≤ wait ≤ exit; no staging or loop marks outside the MMA-layout kernels).
func TestTimeline(t *testing.T) {
	if emulatorEnabled() {
		// The emulator refuses the module's -DLITHOS_TIMELINE (its kernels are built without
		// compile options) and has no module globals to read the ring from.
		t.Skip("needs the GPU: the emulator applies no compile options, so no timeline")
	}
	e := newOpEnv(t, 5)
	path := filepath.Join(t.TempDir(), "timeline.bin")
	t.Setenv(TimelineEnv, path)
	ks, err := e.d.LoadKernels()
	if err != nil {
		t.Fatal(err)
	}
	e.ks = ks
	const rows, groups, n = 3, 2, 64
	rec := kernels.RMSNormParams{DoneWord: wordDone, Rows: rows, RowsWord: kernels.NoWord, Groups: groups, N: n,
		LdX: groups * n, LdZ: groups * n, LdY: groups * n, Mode: kernels.RMSPlain, Eps: 1e-6}
	bx, bw := e.f32(e.randn(rows*groups*n, 1)), e.f32(e.randn(n, 1))
	by := e.poisoned(rows * groups * n)
	e.run("lithos_rmsnorm", rec, rec.Grid(), bx, bw, bx, by)
	e.run("lithos_rmsnorm", rec, rec.Grid(), bx, bw, bx, by)
	ctl := make([]uint32, 64)
	ctl[wordDone] = 1
	e.setCtl(ctl) // the third launch returns at its done check
	defer e.setCtl(make([]uint32, 64))
	e.run("lithos_rmsnorm", rec, rec.Grid(), bx, bw, bx, by)
	if err := ks.Unload(); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("no timeline written: %v", err)
	}
	defer f.Close()
	br := bufio.NewReader(f)
	line, err := br.ReadBytes('\n')
	if err != nil {
		t.Fatal(err)
	}
	var h timelineHeader
	if err := json.Unmarshal(line, &h); err != nil {
		t.Fatalf("header %q: %v", line, err)
	}
	const want = 3 * rows * groups
	if h.Next != want {
		t.Fatalf("header: %d records written, want %d (3 launches × %d threadgroups)", h.Next, want, rows*groups)
	}
	id := kernels.TimelineID("lithos_rmsnorm")
	if k := h.Kernels[fmt.Sprintf("%08x", id)]; k != "lithos_rmsnorm" {
		t.Fatalf("header: kernel id %08x is %q", id, k)
	}
	body, err := io.ReadAll(br)
	if err != nil || len(body) != h.Records*64 {
		t.Fatalf("%d bytes of records (%v), header says %d records", len(body), err, h.Records)
	}
	launches := map[uint64]int{}
	type tgOf struct {
		x, y   uint32
		launch int
	}
	blocks := map[tgOf]bool{}
	var lastStart uint64
	for i := 0; i < want; i++ {
		w := make([]uint64, 8)
		for j := range w {
			w[j] = binary.LittleEndian.Uint64(body[64*i+8*j:])
		}
		if uint32(w[0]>>32) != id {
			t.Fatalf("record %d: kernel %08x, want %08x", i, w[0]>>32, id)
		}
		x, y := uint32(w[0])&(1<<20-1), uint32(w[0])>>20
		if x >= groups || y >= rows {
			t.Fatalf("record %d: threadgroup (%d, %d) outside the grid %d × %d", i, x, y, groups, rows)
		}
		start, waited, staged, looped, end := w[1], w[2], w[3], w[4], w[5]
		if start == 0 || waited < start || end < waited || staged != 0 || looped != 0 {
			t.Fatalf("record %d: times %d %d %d %d %d: want start ≤ wait ≤ exit, no staging or loop marks", i, start, waited, staged, looped, end)
		}
		if start < lastStart && i%(rows*groups) == 0 {
			t.Fatalf("record %d: launch started at %d, before the previous one's %d", i, start, lastStart)
		}
		lastStart = start
		launches[w[7]]++
		blocks[tgOf{x, y, i / (rows * groups)}] = true
	}
	if len(blocks) != want {
		t.Fatalf("%d distinct (launch, threadgroup) records, want %d", len(blocks), want)
	}
	for r, c := range launches {
		if r == 0 || c%(rows*groups) != 0 {
			t.Fatalf("parameter record %#x: %d records, want a whole launch's %d", r, c, rows*groups)
		}
	}
	for i := want * 64; i < len(body); i++ {
		if body[i] != 0 {
			t.Fatalf("byte %d of the ring written past the %d records", i, want)
		}
	}
}
