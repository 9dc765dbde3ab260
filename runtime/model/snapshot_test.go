package model

import (
	"context"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
)

// sameBits requires a and b to be the same float32 values bit for bit.
func sameBits(t *testing.T, what string, a, b []float32) {
	t.Helper()
	if len(a) != len(b) {
		t.Fatalf("%s: %d and %d values", what, len(a), len(b))
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			t.Fatalf("%s: value %d is %v, uninterrupted %v", what, i, a[i], b[i])
		}
	}
}

// sameCommitted requires the committed states of a and b to be bit-identical: position, slot,
// the committed slot's GDN conv and recurrent states, the KV rows of the committed positions.
func sameCommitted(t *testing.T, what string, a, b *State) {
	t.Helper()
	if a.Pos() != b.Pos() || a.Slot() != b.Slot() {
		t.Fatalf("%s: position %d slot %d, uninterrupted %d and %d", what, a.Pos(), a.Slot(), b.Pos(), b.Slot())
	}
	for gi := 0; gi < a.GDNLayers(); gi++ {
		sameBits(t, what+": conv state", a.Conv(gi, a.Slot()), b.Conv(gi, b.Slot()))
		sameBits(t, what+": recurrent state", a.Recurrent(gi, a.Slot()), b.Recurrent(gi, b.Slot()))
	}
	for ai := 0; ai < a.AttentionLayers(); ai++ {
		ka, va, err := a.KV(ai, a.Pos())
		if err != nil {
			t.Fatal(err)
		}
		kb, vb, _ := b.KV(ai, b.Pos())
		sameBits(t, what+": K rows", ka, kb)
		sameBits(t, what+": V rows", va, vb)
	}
}

// TestSnapshotRestoreBitIdentical: a state copied at a prompt boundary and restored into other
// states — a fresh one, and one left at another position with the other slot parity, stale KV
// rows past the boundary and an uncommitted step — continues exactly as the uninterrupted
// state: the logits of the rest of the prompt (chunked GDN, 19 rows) and of 6 single-row
// decode steps (recurrent GDN), and the committed states after them, are bit-identical. The
// snapshot is restored twice, after the first restored state has moved on, so it shares no
// memory with the states it was restored into.
func TestSnapshotRestoreBitIdentical(t *testing.T) {
	raw := randomRaw(testConfig(), 31)
	m := raw.model(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(32, 32))
	a := randomTokens(rng, 21, raw.cfg.Vocab)
	b := randomTokens(rng, 19, raw.cfg.Vocab)
	dec := randomTokens(rng, 6, raw.cfg.Vocab)

	// continueRun feeds b as one step and dec one token at a time; it returns every logit.
	continueRun := func(st *State) []float32 {
		t.Helper()
		out, err := m.Forward(ctx, st, b, true)
		if err != nil {
			t.Fatal(err)
		}
		for _, tok := range dec {
			l, err := m.Forward(ctx, st, []int32{tok}, false)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, l...)
		}
		return out
	}
	ref := newState(t, m, 64)
	if _, err := m.Forward(ctx, ref, a, false); err != nil {
		t.Fatal(err)
	}
	src := newState(t, m, 64)
	if _, err := m.Forward(ctx, src, a, false); err != nil {
		t.Fatal(err)
	}
	sn, err := src.Snapshot(src.Pos())
	if err != nil {
		t.Fatal(err)
	}
	if sn.Pos() != len(a) || sn.Slot() != src.Slot() || sn.Slot() != 1 {
		t.Fatalf("snapshot at %d slot %d; the state is at %d slot %d", sn.Pos(), sn.Slot(), src.Pos(), src.Slot())
	}
	want := continueRun(ref)

	// A fresh state.
	fresh := newState(t, m, 64)
	if err := fresh.Restore(sn); err != nil {
		t.Fatal(err)
	}
	sameBits(t, "fresh state: logits", continueRun(fresh), want)
	sameCommitted(t, "fresh state", fresh, ref)

	// A used state: 30 committed positions (slot 0, a step count of even parity: two steps),
	// then an uncommitted step of 3 rows.
	used := newState(t, m, 64)
	for _, n := range []int{17, 13} {
		if _, err := m.Forward(ctx, used, randomTokens(rng, n, raw.cfg.Vocab), false); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.StepWith(ctx, used, randomTokens(rng, 3, raw.cfg.Vocab), StepOptions{Keep: true, Taps: []int{1}}); err != nil {
		t.Fatal(err)
	}
	if used.Slot() == sn.Slot() {
		t.Fatal("the used state has the snapshot's parity: the test would not cover a parity change")
	}
	if err := used.Restore(sn); err != nil {
		t.Fatal(err)
	}
	if used.Taps() != nil || used.Commit(3) == nil {
		t.Fatal("the restored state kept the pending step")
	}
	sameBits(t, "used state: logits", continueRun(used), want)
	sameCommitted(t, "used state", used, ref)

	// The snapshot again, into the first restored state (now past it).
	if err := fresh.Restore(sn); err != nil {
		t.Fatal(err)
	}
	sameBits(t, "second restore: logits", continueRun(fresh), want)
	sameCommitted(t, "second restore", fresh, ref)
}

// TestSnapshotRefuses: a snapshot is taken at the current position only (GDN states cannot be
// truncated), and restored only into a state of the same model with room for it; a refused
// restore leaves the state as it was.
func TestSnapshotRefuses(t *testing.T) {
	raw := randomRaw(testConfig(), 33)
	m := raw.model(t)
	ctx := context.Background()
	st := newState(t, m, 32)
	if _, err := m.Forward(ctx, st, randomTokens(rand.New(rand.NewPCG(1, 1)), 10, raw.cfg.Vocab), false); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		rows int
		want string
	}{{9, "cannot be truncated"}, {0, "cannot be truncated"}, {11, "only the first 10 positions are committed"}} {
		if _, err := st.Snapshot(c.rows); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Snapshot(%d) at 10: %v, want %q", c.rows, err, c.want)
		}
	}
	sn, err := st.Snapshot(10)
	if err != nil {
		t.Fatal(err)
	}
	small := newState(t, m, 8)
	other := newState(t, randomRaw(testConfig(), 34).model(t), 32)
	for _, c := range []struct {
		st   *State
		sn   *StateSnapshot
		want string
	}{{small, sn, "capacity is 8"}, {other, sn, "another model"}, {st, nil, "nil snapshot"}, {st, &StateSnapshot{}, "another model"}} {
		pos, slot := c.st.Pos(), c.st.Slot()
		if err := c.st.Restore(c.sn); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Restore: %v, want %q", err, c.want)
		}
		if c.st.Pos() != pos || c.st.Slot() != slot {
			t.Errorf("a refused restore moved the state to %d slot %d", c.st.Pos(), c.st.Slot())
		}
	}
	if _, _, err := st.KV(2, 1); err == nil {
		t.Error("KV of attention layer 2 of 2 accepted")
	}
	if _, _, err := st.KV(0, 33); err == nil {
		t.Error("KV of 33 rows of a 32-position state accepted")
	}
}

// TestSnapshotBytes: the memory of a snapshot, by hand for the test model (3 GDN layers: 6·16·8
// recurrent values and 3·112 conv values each; 2 attention layers: 2·2·32 values a position),
// is SnapshotBytes, is what Bytes reports, and is what Snapshot allocates.
func TestSnapshotBytes(t *testing.T) {
	raw := randomRaw(testConfig(), 35)
	m := raw.model(t)
	st := newState(t, m, 64)
	if _, err := m.Forward(context.Background(), st, randomTokens(rand.New(rand.NewPCG(2, 2)), 21, raw.cfg.Vocab), false); err != nil {
		t.Fatal(err)
	}
	const want = 3*(6*16*8+3*112)*4 + 2*21*2*2*32*4 // 13,248 + 21,504
	if got := SnapshotBytes(&m.Cfg, 21); got != want {
		t.Fatalf("SnapshotBytes: %d, by hand %d", got, want)
	}
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	sn, err := st.Snapshot(21)
	runtime.ReadMemStats(&m1)
	if err != nil {
		t.Fatal(err)
	}
	// The allocator rounds each object up to its size class (at most a page, 8 KiB, for a
	// large one): allow that much per allocation.
	alloc, objects := int64(m1.TotalAlloc-m0.TotalAlloc), int64(m1.Mallocs-m0.Mallocs)
	if sn.Bytes() != want || alloc < want || alloc > want+objects*8192 {
		t.Fatalf("Bytes %d, allocated %d in %d objects: want %d", sn.Bytes(), alloc, objects, want)
	}
	t.Logf("a snapshot of 21 positions: %d bytes, %d allocated", sn.Bytes(), alloc)
}
