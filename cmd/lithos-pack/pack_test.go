package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"lithos/hub/hubtest"
	"lithos/manifests"
)

// TestPackVerifyInspectCLI runs the three commands on the sharded fixture fetched from hubtest
// by repo id, then corrupts one byte of a tensor and expects verify to fail naming it.
func TestPackVerifyInspectCLI(t *testing.T) {
	srv := hubtest.Start(t, filepath.Join("..", "..", "testdata", "hub"), hubtest.Options{})
	t.Setenv("HF_ENDPOINT", srv.URL)
	t.Setenv("HF_HUB_CACHE", t.TempDir())
	t.Setenv("HF_TOKEN", "")
	t.Setenv("HF_HUB_OFFLINE", "")
	out := filepath.Join(t.TempDir(), "tiny.lithos")

	text, err := runCLI(t, "pack", "lithos-test/tiny-sharded", "-o", out)
	if err != nil {
		t.Fatalf("pack: %v\n%s", err, text)
	}
	if !strings.Contains(text, "44 (20 BLM matrices, 24 plain arrays), 61 left out") {
		t.Errorf("pack summary:\n%s", text)
	}
	if text, err = runCLI(t, "verify", out, "--deep"); err != nil || !strings.Contains(text, ": OK") || !strings.Contains(text, "44 tensors compared") {
		t.Fatalf("verify --deep: %v\n%s", err, text)
	}
	text, err = runCLI(t, "inspect", out, "--json")
	if err != nil {
		t.Fatalf("inspect: %v", err)
	}
	var rep struct {
		WeightsBytes int64 `json:"weights_bytes"`
		Total        struct {
			Tensors   int   `json:"tensors"`
			FileBytes int64 `json:"file_bytes"`
		} `json:"total"`
		Models []struct{ Repo string }
	}
	if err := json.Unmarshal([]byte(text), &rep); err != nil || rep.Total.Tensors != 44 || rep.Total.FileBytes != rep.WeightsBytes ||
		len(rep.Models) != 1 || rep.Models[0].Repo != "lithos-test/tiny-sharded" {
		t.Fatalf("inspect --json: %v\n%s", err, text)
	}
	if text, err = runCLI(t, "inspect", out); err != nil || !strings.Contains(text, "vision tower: not read in text decoding") {
		t.Fatalf("inspect: %v\n%s", err, text)
	}

	// One byte of layers.2.linear_attn.out_proj.
	b, err := manifests.ParseBundle(must(os.ReadFile(filepath.Join(out, manifests.BundleManifestName))))
	if err != nil {
		t.Fatal(err)
	}
	tt, _ := b.Tensor("layers.2.linear_attn.out_proj")
	w := filepath.Join(out, manifests.BundleWeightsName)
	data := must(os.ReadFile(w))
	data[tt.Offset+7] ^= 1
	if err := os.WriteFile(w, data, 0o644); err != nil {
		t.Fatal(err)
	}
	text, err = runCLI(t, "verify", out)
	if err == nil || !strings.Contains(err.Error(), "tensor layers.2.linear_attn.out_proj") || !strings.Contains(text, "1 PROBLEM(S)") {
		t.Fatalf("verify of a corrupt bundle: %v\n%s", err, text)
	}
	// The output exists now: pack refuses to overwrite it.
	if _, err := runCLI(t, "pack", "lithos-test/tiny-sharded", "-o", out); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("pack over an existing bundle: %v", err)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
