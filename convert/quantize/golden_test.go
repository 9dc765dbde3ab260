package quantize

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"lithos/formats/nvfp4"
)

var update = flag.Bool("update", false, "rewrite testdata/dspark/go-nvfp4 with this run's output")

const (
	goldenDir = "../../testdata/dspark"
	goldenCmd = "python3 tools/dspark_quant_golden.py --out testdata/dspark"
	// goldenVersion is the tool version recorded in go-nvfp4; the device
	// protocol builds lithos-pack with -ldflags "-X main.version=golden" so
	// its output is byte-identical (docs/quantize.md).
	goldenVersion = "golden"
)

func needGolden(t *testing.T, rel string) string {
	t.Helper()
	p := filepath.Join(goldenDir, rel)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("golden %s is missing: generate it on the GPU machine with `%s` (docs/quantize.md)", filepath.Join("testdata/dspark", rel), goldenCmd)
	}
	return p
}

// TestGoldenTinyHead quantizes the committed tiny BF16 DSpark head and
// compares the result byte for byte with the checkpoint the Python script's
// own PyTorch implementation of ModelOpt's rule wrote
// (tools/dspark_quant_golden.py), for both tensor-scale divisions, and with
// the committed go-nvfp4 output (which the script's --verify step loads with
// the Python safetensors package).
func TestGoldenTinyHead(t *testing.T) {
	src := filepath.Dir(needGolden(t, "tiny-bf16/model.safetensors"))
	needGolden(t, "tiny-bf16/config.json")
	expPath := needGolden(t, "tiny-nvfp4-expected.safetensors")
	expCUDA := needGolden(t, "tiny-nvfp4-expected-cuda.safetensors")

	out := filepath.Join(t.TempDir(), "go-nvfp4")
	conv, err := Run(context.Background(), src, out, Options{ToolVersion: goldenVersion})
	if err != nil {
		t.Fatal(err)
	}
	got, want := readModel(t, out), readModel(t, expPath)
	compareTensors(t, "exact division", got, want, nil)
	if !bytes.Equal(mustRead(t, filepath.Join(out, ModelFile)), mustRead(t, expPath)) {
		t.Error("model.safetensors is not byte-identical to the expected file that safetensors.torch.save_file wrote")
	}
	if len(conv.Quantized) != 16 || len(conv.Kept) != 13 {
		t.Errorf("%d quantized, %d kept; want 16 linears and 13 others", len(conv.Quantized), len(conv.Kept))
	}
	flushed := int64(0)
	for _, q := range conv.Quantized {
		flushed += q.FlushedBlocks
	}
	if flushed == 0 {
		t.Error("the golden head has no flushed block: the script no longer plants the tiny rows")
	}

	out2 := filepath.Join(t.TempDir(), "reciprocal")
	if _, err := Run(context.Background(), src, out2, Options{ToolVersion: goldenVersion, Division: nvfp4.DivideByReciprocal}); err != nil {
		t.Fatal(err)
	}
	gotR, wantR := readModel(t, out2), readModel(t, expCUDA)
	compareTensors(t, "reciprocal division (ModelOpt on CUDA)", gotR, wantR, func(name string) bool {
		return strings.HasSuffix(name, ".weight_scale_2") || strings.HasSuffix(name, ".weight_scale") ||
			(strings.HasSuffix(name, ".weight") && wantR[strings.TrimSuffix(name, ".weight")+".weight_scale"].data != nil)
	})
	diff := 0
	for n, x := range wantR {
		if strings.HasSuffix(n, ".weight_scale_2") && !bytes.Equal(x.data, want[n].data) {
			diff++
		}
	}
	t.Logf("%d of %d tensor scales differ between the exact and the reciprocal division", diff, len(conv.Quantized))

	committed := filepath.Join(goldenDir, "go-nvfp4")
	if *update {
		if err := os.RemoveAll(committed); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(committed, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{ModelFile, ConfigFile, HFQuantFile, ConversionFile} {
			if err := os.WriteFile(filepath.Join(committed, f), mustRead(t, filepath.Join(out, f)), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("rewrote %s; now run `%s --verify` on the GPU machine", committed, goldenCmd)
		return
	}
	for _, f := range []string{ModelFile, ConfigFile, HFQuantFile, ConversionFile} {
		p := filepath.Join(committed, f)
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatalf("committed output %s is missing: write it with `go test ./convert/quantize -run TestGoldenTinyHead -update`, then check it with `%s --verify` on the GPU machine", p, goldenCmd)
		}
		if !bytes.Equal(b, mustRead(t, filepath.Join(out, f))) {
			t.Errorf("testdata/dspark/go-nvfp4/%s differs from this run's output (rerun with -update and --verify if the change is intended)", f)
		}
	}
}

// compareTensors checks that got has exactly want's tensors (or, with only,
// those of got for which only is true) with equal dtype, shape and bytes.
func compareTensors(t *testing.T, what string, got, want map[string]stTensor, only func(string) bool) {
	t.Helper()
	var gn, wn []string
	for n := range got {
		if only == nil || only(n) {
			gn = append(gn, n)
		}
	}
	for n := range want {
		wn = append(wn, n)
	}
	slices.Sort(gn)
	slices.Sort(wn)
	if !slices.Equal(gn, wn) {
		t.Fatalf("%s: tensors\n ours     %v\n expected %v", what, gn, wn)
	}
	for _, n := range wn {
		g, w := got[n], want[n]
		if g.dtype != w.dtype || !slices.Equal(g.shape, w.shape) {
			t.Errorf("%s: %s is %s%v, expected %s%v", what, n, g.dtype, g.shape, w.dtype, w.shape)
			continue
		}
		if !bytes.Equal(g.data, w.data) {
			bad, first := 0, -1
			for i := range g.data {
				if g.data[i] != w.data[i] {
					if first < 0 {
						first = i
					}
					bad++
				}
			}
			t.Errorf("%s: %s: %d of %d bytes differ (first at byte %d: %#x, expected %#x)", what, n, bad, len(g.data), first, g.data[first], w.data[first])
		}
	}
}
