//go:build linux && amd64

package fiberexec

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"lithos/kernels"
)

// TestLaunch: lithos_ewise (add) on random rows through the server, in arena memory written
// and read here: y = a + b exactly, rows past the grid untouched (NaN poison), the allocator's
// bookkeeping, and a launch with a bad kernel index refused.
func TestLaunch(t *testing.T) {
	e, err := Start(Options{KernelsDir: ".."})
	if errors.Is(err, ErrNoCompiler) {
		t.Skip("SKIP:", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer e.Stop()
	const rows, n = 3, 300
	f32 := func(p uintptr, k int) []float32 { return unsafe.Slice((*float32)(unsafe.Pointer(&Bytes(p, 4)[0])), k) }
	alloc := func(size uintptr) uintptr {
		p, ok := e.Alloc(size)
		if !ok || p%Align != 0 || !InArena(p, size) {
			t.Fatalf("Alloc(%d) = %#x, %v", size, p, ok)
		}
		return p
	}
	ctl, a, b, y := alloc(64), alloc(4*rows*n), alloc(4*rows*n), alloc(4*(rows+1)*n)
	clear(Bytes(ctl, 64))
	r := rand.New(rand.NewPCG(1, 2))
	for i := range rows * n {
		f32(a, rows*n)[i], f32(b, rows*n)[i] = r.Float32()*2-1, r.Float32()*2-1
	}
	for i := range (rows + 1) * n {
		f32(y, (rows+1)*n)[i] = float32(math.NaN())
	}
	p := kernels.EwiseParams{DoneWord: kernels.NoWord, Rows: rows, RowsWord: kernels.NoWord, N: n, LdA: n, LdB: n, LdY: n, Mode: kernels.EwAdd}
	rec := kernels.Record(p)
	prm := alloc(uintptr(len(rec)))
	copy(Bytes(prm, uintptr(len(rec))), rec)
	k, _ := kernels.Lookup("lithos_ewise")
	idx := -1
	for i, kk := range kernels.Kernels() {
		if kk.Name == k.Name {
			idx = i
		}
	}
	if err := e.Launch(idx, p.Grid(), uint32(k.Threads), 1, []uint64{uint64(ctl), uint64(prm), uint64(a), uint64(b), uint64(y)}); err != nil {
		t.Fatal(err)
	}
	got := f32(y, (rows+1)*n)
	for i := range rows * n {
		if want := f32(a, rows*n)[i] + f32(b, rows*n)[i]; got[i] != want {
			t.Fatalf("y[%d] = %v, want %v", i, got[i], want)
		}
	}
	for i := rows * n; i < (rows+1)*n; i++ {
		if !math.IsNaN(float64(got[i])) {
			t.Fatalf("y[%d] = %v past the rows, want the NaN poison", i, got[i])
		}
	}
	if e.Launches() != 1 {
		t.Fatalf("%d launches", e.Launches())
	}
	used := e.Used()
	if !e.Free(a) || e.Free(a) || e.Used() != used-4*rows*n/Align*Align-Align {
		t.Fatalf("free: used %d → %d", used, e.Used())
	}
	if err := e.Launch(len(kernels.Kernels()), [3]uint32{1, 1, 1}, 1, 1, nil); err == nil {
		t.Fatal("a launch of kernel index past the table was accepted")
	}
}
