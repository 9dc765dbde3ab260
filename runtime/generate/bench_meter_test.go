package generate

import (
	"context"
	"math"
	"testing"

	"lithos/runtime/backend"
)

// meteredTarget is a target that reports its own memory's read bandwidth, as the GPU backends do.
type meteredTarget struct {
	backend.Target
	gbs float64
}

func (m meteredTarget) ReadBandwidthGBs() (float64, error) { return m.gbs, nil }

// TestBenchDeviceBandwidth: a target that measures its device's bandwidth gives the floor
// (bandwidth_of "device"); the host's is measured only for targets that do not. The report's
// passes (plain step, verify, draft, full round) are the runs' times against that floor.
func TestBenchDeviceBandwidth(t *testing.T) {
	r, err := OpenWith(context.Background(), draftFixture(t, "a", "nvfp4", 1), Options{Log: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	req := Request{PromptIDs: []int32{1, 2, 3, 4, 5}, MaxTokens: 12, Sampling: greedy}
	host, err := r.Bench(context.Background(), req, 1)
	if err != nil {
		t.Fatal(err)
	}
	if host.BandwidthOf != "host" || !(host.ReadGBs > 0) {
		t.Fatalf("CPU target: bandwidth %v GB/s of %q, want the host's", host.ReadGBs, host.BandwidthOf)
	}
	r.Target = meteredTarget{Target: r.Target, gbs: 4630}
	dev, err := r.Bench(context.Background(), req, 1)
	if err != nil {
		t.Fatal(err)
	}
	if dev.BandwidthOf != "device" || dev.ReadGBs != 4630 {
		t.Fatalf("metered target: bandwidth %v GB/s of %q, want 4630 of the device", dev.ReadGBs, dev.BandwidthOf)
	}
	p := dev.Plain
	want := float64(p.DecodeTokens) / (float64(p.BytesRead) / 4630e9)
	if math.Abs(p.FloorTokPerS-want) > 1e-9*want {
		t.Fatalf("floor %v tok/s, want %v from the device's bandwidth", p.FloorTokPerS, want)
	}
	// Each pass against the time its bytes take at the device's bandwidth.
	near := func(name string, got PassTime, ms float64, bytes int64) {
		t.Helper()
		floor := float64(bytes) / 4630e9 * 1e3
		if !(ms > 0) || math.Abs(got.MS-ms) > 1e-9*ms || math.Abs(got.FloorMS-floor) > 1e-9*floor || math.Abs(got.XFloor-floor/ms) > 1e-9 {
			t.Errorf("%s: %+v, want %v ms against a floor of %v ms", name, got, ms, floor)
		}
	}
	q, s := dev.Passes, dev.Speculative
	near("plain step", q.PlainStep, p.DecodeSeconds*1e3/float64(p.Passes), dev.TargetBytesPerPass)
	if q.Verify == nil || q.Draft == nil || q.Round == nil {
		t.Fatalf("passes %+v: want verify, draft and round with the draft head", q)
	}
	near("verify", *q.Verify, s.Speculative.VerifyMSPerRound, dev.TargetBytesPerPass)
	near("draft", *q.Draft, s.Speculative.DraftMSPerRound, dev.DraftBytesPerRound)
	near("round", *q.Round, s.DecodeSeconds*1e3/float64(s.Passes), dev.TargetBytesPerPass+dev.DraftBytesPerRound)
	if math.Abs(q.RoundOverVerify-q.Round.MS/q.Verify.MS) > 1e-9 {
		t.Errorf("round over verify %v, want %v", q.RoundOverVerify, q.Round.MS/q.Verify.MS)
	}
}
