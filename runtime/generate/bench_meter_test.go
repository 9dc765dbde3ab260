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
// (bandwidth_of "device"); the host's is measured only for targets that do not.
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
}
