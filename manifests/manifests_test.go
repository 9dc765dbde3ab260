package manifests

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestChips(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range Chips() {
		if seen[c.ID] || c.ID != strings.ToLower(c.ID) {
			t.Errorf("chip id %q duplicated or not lower case", c.ID)
		}
		seen[c.ID] = true
		if !(c.BandwidthGBps > 0) || c.Source == "" || c.Name == "" || (c.PageSize != 16384 && c.PageSize != 4096) {
			t.Errorf("incomplete profile %+v", c)
		}
	}
	// The figures the audit article computes with.
	for id, want := range map[string]float64{
		"apple-m5-max-40c": 614.4, "M5-MAX-32C": 460, "h200": 4800, "nvidia-h100-sxm": 3350,
	} {
		c, ok := ChipByID(id)
		if !ok || c.BandwidthGBps != want {
			t.Errorf("ChipByID(%q) = %+v, %v; want %v GB/s", id, c, ok, want)
		}
	}
	if c, ok := ChipByID(DefaultChipID); !ok || c.BandwidthGBps != 614.4 {
		t.Errorf("default chip %+v", c)
	}
	if _, err := LookupChip("m9-ultra"); err == nil || !strings.Contains(err.Error(), "apple-m5-max-40c") {
		t.Errorf("unknown chip error %v should list the known ones", err)
	}
	// Chips returns a copy.
	Chips()[0].BandwidthGBps = 1
	if c, _ := ChipByID(Chips()[0].ID); c.BandwidthGBps == 1 {
		t.Error("Chips exposes the table")
	}
}

func TestDraftFor(t *testing.T) {
	for _, repo := range []string{
		"nvidia/Qwen3.8-27B-NVFP4",
		"NVIDIA/qwen3.8-27b-nvfp4",
		"models--nvidia--Qwen3.8-27B-NVFP4",
		"/home/u/.cache/huggingface/hub/models--nvidia--Qwen3.8-27B-NVFP4/snapshots/0123456789abcdef0123456789abcdef01234567",
	} {
		p, ok := DraftFor(repo)
		if !ok || p.Draft != "LithosAI/Qwen3.8-27B-DSpark-NVFP4" || len(p.Alternatives) != 1 || p.Alternatives[0] != "RadixArk/Qwen3.8-27B-DSpark" {
			t.Errorf("DraftFor(%q) = %+v, %v", repo, p, ok)
		}
		if !p.Matches("Qwen3_5ForConditionalGeneration", 5120, 64) || p.Matches("Qwen3_5ForConditionalGeneration", 5120, 40) {
			t.Errorf("Matches on %+v", p)
		}
	}
	for _, repo := range []string{"LithosAI/Qwen3.8-27B-DSpark-NVFP4", "nvidia/Qwen3.8-27B", "", "models--x"} {
		if p, ok := DraftFor(repo); ok {
			t.Errorf("DraftFor(%q) = %+v", repo, p)
		}
	}
	// Registry returns copies.
	Registry()[0].Alternatives[0] = "x/y"
	if p, _ := DraftFor("nvidia/Qwen3.8-27B-NVFP4"); p.Alternatives[0] != "RadixArk/Qwen3.8-27B-DSpark" {
		t.Error("Registry exposes the table")
	}
	if got := RepoFromCachePath(`C:\hf\models--org--name\snapshots\x`); got != "org/name" {
		t.Errorf("RepoFromCachePath = %q", got)
	}
}

func TestModelSpecs(t *testing.T) {
	names := ModelSpecNames()
	if len(names) != 3 {
		t.Fatalf("embedded specs %v", names)
	}
	for _, n := range names {
		b, err := ModelSpec(n)
		if err != nil {
			t.Fatal(err)
		}
		var s struct {
			Repo   string          `json:"repo"`
			Notes  []string        `json:"notes"`
			Config json.RawMessage `json:"config"`
		}
		if err := json.Unmarshal(b, &s); err != nil || s.Repo == "" || len(s.Notes) == 0 || len(s.Config) == 0 {
			t.Errorf("%s: %v %+v", n, err, s)
		}
	}
	for _, bad := range []string{"../models/x", "", "nope"} {
		if _, err := ModelSpec(bad); err == nil {
			t.Errorf("ModelSpec(%q) accepted", bad)
		}
	}
}
