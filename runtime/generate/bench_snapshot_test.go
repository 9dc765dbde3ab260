package generate

import (
	"context"
	"errors"
	"strings"
	"testing"

	"lithos/runtime/generate/gentest"
	"lithos/runtime/model"
)

// TestBenchSnapshot: the snapshot measurement holds the state of the position it prefilled
// (model.SnapshotBytes of the target's config: one GDN slot and the KV rows), its times and
// rates are positive and consistent with the bytes, and bad arguments are refused.
func TestBenchSnapshot(t *testing.T) {
	r := openFixture(t, gentest.Options{EOS: []int{gentest.IMEnd, gentest.EndOfText}})
	ctx := context.Background()
	cfg := r.Target.Config()
	for _, n := range []int{1, 40} {
		rep, err := r.BenchSnapshot(ctx, n, 2, false, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		if rep.Tokens != n || rep.Drafter || rep.Bytes != model.SnapshotBytes(&cfg, n) {
			t.Fatalf("%d tokens: report %+v, want %d bytes without a drafter", n, rep, model.SnapshotBytes(&cfg, n))
		}
		if rep.SnapshotSeconds <= 0 || rep.RestoreSeconds <= 0 || rep.PrefillSeconds <= 0 {
			t.Fatalf("%d tokens: times %+v", n, rep)
		}
		if d := rep.SnapshotGBs*rep.SnapshotSeconds*1e9/float64(rep.Bytes) - 1; d > 1e-9 || d < -1e-9 {
			t.Errorf("%d tokens: snapshot rate %.3f GB/s is not bytes ÷ time", n, rep.SnapshotGBs)
		}
		if d := rep.RestoreGBs*rep.RestoreSeconds*1e9/float64(rep.Bytes) - 1; d > 1e-9 || d < -1e-9 {
			t.Errorf("%d tokens: restore rate %.3f GB/s is not bytes ÷ time", n, rep.RestoreGBs)
		}
	}
	for _, c := range []struct{ tokens, runs int }{{0, 1}, {4, 0}, {MaxContext, 1}} {
		if _, err := r.BenchSnapshot(ctx, c.tokens, c.runs, false, 0, ""); err == nil || !strings.Contains(err.Error(), "bench snapshot") {
			t.Errorf("%d tokens, %d runs: err %v", c.tokens, c.runs, err)
		}
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := r.BenchSnapshot(cancelled, 8, 1, false, 0, ""); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: err %v, want context.Canceled", err)
	}
}
