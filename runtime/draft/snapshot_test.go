package draft_test

import (
	"context"
	"math"
	"strings"
	"testing"

	"lithos/runtime/draft"
	"lithos/runtime/draft/drafttest"
)

// sameBits requires a and b to be the same float32 values bit for bit.
func sameBits(t *testing.T, what string, a, b []float32) {
	t.Helper()
	if len(a) != len(b) {
		t.Fatalf("%s: %d and %d values", what, len(a), len(b))
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			t.Fatalf("%s: value %d is %v, want %v", what, i, a[i], b[i])
		}
	}
}

// sameContext requires the context rows of a and b to be bit-identical.
func sameContext(t *testing.T, what string, d *draft.Drafter, a, b *draft.State) {
	t.Helper()
	if a.Len() != b.Len() {
		t.Fatalf("%s: %d and %d context rows", what, a.Len(), b.Len())
	}
	for l := range d.Cfg.Layers {
		ka, va, err := a.Context(l)
		if err != nil {
			t.Fatal(err)
		}
		kb, vb, _ := b.Context(l)
		sameBits(t, what+": K", ka, kb)
		sameBits(t, what+": V", va, vb)
	}
}

// TestSnapshotRestore: the tiny head's context copied after 17 rows (directly, and as a prefix
// of a state holding 40) and restored — into a fresh state and into one holding other rows —
// then extended with rows 17 … 39 drafts exactly as the uninterrupted state: bit-identical
// context K/V, Markov-adjusted logits, tokens and confidences. The snapshot is restored twice,
// after the first restored state has moved on, so it shares no memory with them.
func TestSnapshotRestore(t *testing.T) {
	g := drafttest.Read(t)
	d := newDense(t, g, "bf16")
	ctx := context.Background()
	fd := d.Cfg.FeatureDim()
	feats := g.Features(t, 40, fd)
	newState := func() *draft.State {
		st, err := d.NewState(64)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	appendRows := func(st *draft.State, from, to int) {
		t.Helper()
		if err := d.Append(ctx, st, feats[from*fd:to*fd], to-from); err != nil {
			t.Fatal(err)
		}
	}
	drafted := func(st *draft.State) *draft.Proposal {
		t.Helper()
		out := &draft.Proposal{KeepLogits: true}
		if err := d.Draft(ctx, st, 5, nil, out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	same := func(what string, st, ref *draft.State) {
		t.Helper()
		sameContext(t, what, d, st, ref)
		a, b := drafted(st), drafted(ref)
		sameBits(t, what+": logits", a.Logits, b.Logits)
		sameBits(t, what+": confidence", a.Confidence, b.Confidence)
		if len(a.Tokens) != 7 || len(a.Tokens) != len(b.Tokens) {
			t.Fatalf("%s: %d and %d drafts", what, len(a.Tokens), len(b.Tokens))
		}
		for k := range a.Tokens {
			if a.Tokens[k] != b.Tokens[k] {
				t.Fatalf("%s: drafts %v, uninterrupted %v", what, a.Tokens, b.Tokens)
			}
		}
	}

	ref := newState()
	appendRows(ref, 0, 17)
	appendRows(ref, 17, 40)
	src := newState()
	appendRows(src, 0, 17)
	sn, err := src.Snapshot(17)
	if err != nil {
		t.Fatal(err)
	}
	full := newState()
	appendRows(full, 0, 17)
	appendRows(full, 17, 40)
	prefix, err := full.Snapshot(17)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		sn   *draft.StateSnapshot
	}{{"snapshot at 17", sn}, {"prefix of 17 of 40", prefix}} {
		fresh := newState()
		if err := fresh.Restore(c.sn); err != nil {
			t.Fatal(err)
		}
		if fresh.Len() != 17 {
			t.Fatalf("%s: restored %d rows", c.name, fresh.Len())
		}
		appendRows(fresh, 17, 40)
		same(c.name+", fresh state", fresh, ref)
		// A state holding 29 other rows (its rows 17 … 28 stale after the restore).
		used := newState()
		if err := d.Append(ctx, used, feats[11*fd:40*fd], 29); err != nil {
			t.Fatal(err)
		}
		if err := used.Restore(c.sn); err != nil {
			t.Fatal(err)
		}
		appendRows(used, 17, 40)
		same(c.name+", used state", used, ref)
		// Again into the fresh state, now at 40.
		if err := fresh.Restore(c.sn); err != nil {
			t.Fatal(err)
		}
		appendRows(fresh, 17, 40)
		same(c.name+", second restore", fresh, ref)
	}
	// A state restored to 17 rows drafts as one appended to 17 rows.
	at17 := newState()
	if err := at17.Restore(sn); err != nil {
		t.Fatal(err)
	}
	same("restored at 17", at17, src)
}

// TestSnapshotRefusesAndBytes: snapshots of more rows than held or negative rows are refused;
// restores of another drafter's rows, of more rows than the capacity, or of nil are refused
// without changing the state. The memory: 2 layers × 2 KV heads × 32 × (K, V) × 4 bytes = 1024
// bytes a row, what ContextBytes and Bytes report.
func TestSnapshotRefusesAndBytes(t *testing.T) {
	g := drafttest.Read(t)
	d := newDense(t, g, "bf16")
	other := newDense(t, g, "nvfp4")
	fd := d.Cfg.FeatureDim()
	st, err := d.NewState(32)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Append(context.Background(), st, g.Features(t, 17, fd), 17); err != nil {
		t.Fatal(err)
	}
	for _, rows := range []int{18, -1} {
		if _, err := st.Snapshot(rows); err == nil || !strings.Contains(err.Error(), "it holds 17") {
			t.Errorf("Snapshot(%d) of 17 rows: %v", rows, err)
		}
	}
	sn, err := st.Snapshot(17)
	if err != nil {
		t.Fatal(err)
	}
	if sn.Len() != 17 || sn.Bytes() != 17*1024 || d.ContextBytes(17) != 17*1024 {
		t.Fatalf("snapshot of %d rows: %d bytes, ContextBytes %d; want 17 rows, %d bytes", sn.Len(), sn.Bytes(), d.ContextBytes(17), 17*1024)
	}
	small, _ := d.NewState(16)
	foreign, _ := other.NewState(32)
	for _, c := range []struct {
		st   *draft.State
		sn   *draft.StateSnapshot
		want string
	}{{small, sn, "capacity is 16"}, {foreign, sn, "another drafter"}, {st, nil, "nil snapshot"}} {
		n := c.st.Len()
		if err := c.st.Restore(c.sn); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Restore: %v, want %q", err, c.want)
		}
		if c.st.Len() != n {
			t.Errorf("a refused restore changed Len to %d", c.st.Len())
		}
	}
}
