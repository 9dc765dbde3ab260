//go:build linux && amd64

package cuda

import (
	"fmt"
	"testing"

	"lithos/kernels"
)

// TestOverlappedChain: a chain of kernels on one stream, each reading what the one before it
// wrote and writing what the one before it read (a₀ → b → a → b …, y = x + 1 over 4 Mi floats,
// 16 Ki threadgroups, so many waves; 16 Ki floats on the emulator), eagerly and captured into a graph and replayed. With
// programmatic dependent launch (Kernels.Overlap, on sm_90 unless LITHOS_CUDA_OVERLAP=0) each
// kernel may start while the one before it runs: the result is exact only if every kernel
// waits for its predecessor before reading (read after write) and before writing (write after
// read) — the entry's GRID_WAIT (on the GPU; the emulator runs launches one after the other,
// so there only the count below can fail). The overlapped launches are counted (by the
// emulator from the attribute it parsed, on the GPU by Kernels.launch): every launch that
// follows a lithos kernel on the stream, not the first after a fill or the start of a capture.
func TestOverlappedChain(t *testing.T) {
	e := newOpEnv(t, 31)
	if e.d.Info.Major >= 9 && overlapOn() && !e.ks.Overlap {
		t.Fatalf("compute %d.%d with cuLaunchKernelEx: Kernels.Overlap is off", e.d.Info.Major, e.d.Info.Minor)
	}
	t.Logf("overlapped launches: %v", e.ks.Overlap)
	n, links := 4<<20, 24
	if emulatorEnabled() {
		n = 1 << 14 // the fiber runtime runs every thread
	}
	ones := make([]float32, n)
	start := make([]float32, n)
	for i := range ones {
		ones[i] = 1
		start[i] = float32(i % 1000)
	}
	u := uint32(n)
	rec := kernels.EwiseParams{DoneWord: kernels.NoWord, Rows: 1, RowsWord: kernels.NoWord, N: u, LdA: u, LdB: u, LdY: u, Mode: kernels.EwAdd}
	prm := e.bytes(kernels.Record(rec))
	bo := e.f32(ones)
	chain := func(a, b *Buffer) error {
		for i := 0; i < links; i++ {
			x, y := a, b
			if i%2 == 1 {
				x, y = b, a
			}
			if err := e.ks.Launch(e.s, "lithos_ewise", rec.Grid(), e.ctl.Ptr, prm.Ptr, x.Ptr, bo.Ptr, y.Ptr); err != nil {
				return err
			}
		}
		return nil
	}
	check := func(what string, buf *Buffer, links int) {
		t.Helper()
		got := e.read(buf, n)
		bad := 0
		for i, v := range got {
			if want := start[i] + float32(links); v != want {
				if bad < 5 {
					t.Errorf("%s: element %d = %v, want %v", what, i, v, want)
				}
				bad++
			}
		}
		if bad > 0 {
			t.Fatalf("%s: %d of %d elements wrong", what, bad, n)
		}
	}
	// counted: the overlapped launches as the emulator saw them (the attribute marshalled), or
	// on the GPU as Kernels.launch made them.
	counted := func() int {
		if c, ok := emu.(*cpuEmulator); ok {
			return c.overlapped
		}
		return e.ks.overlapped
	}

	a, b := e.f32(start), e.poisoned(n)
	before := counted()
	if err := chain(a, b); err != nil {
		t.Fatal(err)
	}
	if got := counted() - before; e.ks.Overlap && got != links-1 {
		t.Errorf("emulator: %d of %d eager launches overlapped, want %d (all but the first, after the fill)", got, links, links-1)
	}
	// links is even: the last kernel wrote a.
	check("eager chain", a, links)

	a, b = e.f32(start), e.poisoned(n)
	if err := e.s.Wait(0); err != nil {
		t.Fatal(err)
	}
	before = counted()
	g, err := e.s.Capture(func() error { return chain(a, b) })
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if got := counted() - before; e.ks.Overlap && got != links-1 {
		t.Errorf("emulator: %d of %d captured launches overlapped, want %d", got, links, links-1)
	}
	for r := 1; r <= 3; r++ {
		if err := g.Launch(e.s); err != nil {
			t.Fatal(err)
		}
		check(fmt.Sprintf("graph replay %d", r), a, r*links)
	}
}
