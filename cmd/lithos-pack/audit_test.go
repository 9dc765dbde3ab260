package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"lithos/formats/safetensors"
	"lithos/hub/hubtest"
)

func TestAuditCLI(t *testing.T) {
	srv := hubtest.Start(t, filepath.Join("..", "..", "testdata", "hub"), hubtest.Options{})
	t.Setenv("HF_ENDPOINT", srv.URL)
	t.Setenv("HF_HUB_CACHE", t.TempDir())
	t.Setenv("HF_HUB_OFFLINE", "")

	// A repo id not in the cache is audited remotely; --json has units in its keys.
	out, err := runCLI(t, "audit", "lithos-test/tiny-sharded", "--json", "--bandwidth", "100")
	if err != nil {
		t.Fatalf("audit: %v\n%s", err, out)
	}
	var r struct {
		Source struct {
			Kind         string `json:"kind"`
			BytesFetched int64  `json:"bytes_fetched"`
		} `json:"source"`
		PerPassWeightsBytes int64 `json:"per_pass_weights_bytes"`
		Ceilings            struct {
			BandwidthGBps float64 `json:"bandwidth_gb_per_s"`
		} `json:"ceilings"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("audit --json: %v\n%s", err, out)
	}
	// Independently: every tensor of the fixture is read per pass except the
	// embedding (a gather), the MTP head and the vision tower.
	m, err := safetensors.OpenModel(context.Background(), filepath.Join("..", "..", "testdata", "hub", "lithos-test", "tiny-sharded"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var want int64
	for _, name := range m.Names() {
		_, tn, _ := m.Lookup(name)
		if !strings.Contains(name, "embed_tokens") && !strings.HasPrefix(name, "mtp.") && !strings.Contains(name, ".visual.") {
			want += tn.Size
		}
	}
	if r.Source.Kind != "remote" || r.Source.BytesFetched <= 0 || r.PerPassWeightsBytes != want {
		t.Errorf("audit --json: %+v, want %d bytes per pass", r, want)
	}
	out, err = runCLI(t, "audit", "lithos-test/tiny-sharded")
	if err != nil || !strings.Contains(out, commas(want)) {
		t.Errorf("audit text lacks %s: %v\n%s", commas(want), err, out)
	}

	dir := t.TempDir()
	if _, err := runCLI(t, "audit", dir); err == nil || !strings.Contains(err.Error(), "config.json") {
		t.Errorf("audit of a folder without config.json: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "config.json"), []byte("{not json"), 0o644)
	if _, err := runCLI(t, "audit", dir); err == nil || !strings.Contains(err.Error(), "config.json") {
		t.Errorf("audit of a bad config.json: %v", err)
	}
	if _, err := runCLI(t, "audit", "lithos-test/tiny-sharded", "--chip", "nope"); err == nil {
		t.Error("an unknown chip was accepted")
	}
}

func commas(n int64) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
