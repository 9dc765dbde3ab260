package gpu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"lithos/kernels"
	"lithos/runtime/backend"
	"lithos/runtime/bundle"
	"lithos/runtime/generate/gentest"
)

// editManifest rewrites the manifest of the bundle in dir with edit (on its JSON as maps).
func editManifest(t *testing.T, dir string, edit func(m map[string]any)) {
	t.Helper()
	path := filepath.Join(dir, "manifest.json")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	if data, err = json.Marshal(m); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestCheckHead: the golden fixture (a packed lm_head, BF16 embeddings) passes; without a
// packed lm_head (the tied-embeddings case) Load's pre-check refuses it, before any device
// work, with the session's message and backend.ErrUnsupported, so --backend auto runs it on
// the CPU.
func TestCheckHead(t *testing.T) {
	dir, err := gentest.Bundle(context.Background(), t.TempDir(), gentest.Options{NoTokenizer: true})
	if err != nil {
		t.Fatal(err)
	}
	b, err := bundle.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	err = checkHead(b, "CUDA")
	b.Close()
	if err != nil {
		t.Fatalf("golden fixture: %v", err)
	}
	editManifest(t, dir, func(m map[string]any) {
		for _, x := range m["tensors"].([]any) {
			if tm := x.(map[string]any); tm["name"] == "lm_head" {
				tm["name"] = "lm_head_renamed"
			}
		}
	})
	if b, err = bundle.Open(dir); err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	err = checkHead(b, "CUDA")
	if !errors.Is(err, backend.ErrUnsupported) || !strings.Contains(err.Error(), "no packed lm_head [608, 256] (tied embeddings do not run on CUDA yet)") {
		t.Fatalf("bundle without lm_head: %v", err)
	}
}

// TestLoadRefusesKernelLimits: a model whose GDN key heads are wider than the delta-rule kernel
// holds (kernels.GDNMaxKDim) or whose conv is longer than lithos_conv takes
// (kernels.ConvMaxKernel) is refused by LoadTarget before any device work, naming the config
// field, with backend.ErrUnsupported (so --backend auto runs it on the CPU).
func TestLoadRefusesKernelLimits(t *testing.T) {
	for _, c := range []struct {
		field string
		value int
	}{{"linear_key_head_dim", kernels.GDNMaxKDim + 1}, {"linear_conv_kernel_dim", kernels.ConvMaxKernel + 1}} {
		t.Run(c.field, func(t *testing.T) {
			dir, err := gentest.Bundle(context.Background(), t.TempDir(), gentest.Options{NoTokenizer: true})
			if err != nil {
				t.Fatal(err)
			}
			editManifest(t, dir, func(m map[string]any) {
				cfg := m["target"].(map[string]any)["config"].(map[string]any)
				if tc, ok := cfg["text_config"].(map[string]any); ok {
					cfg = tc
				}
				cfg[c.field] = c.value
			})
			b, err := bundle.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			_, err = LoadTarget(context.Background(), namedDevice{}, b)
			want := fmt.Sprintf("%s %d", c.field, c.value)
			if err == nil || !errors.Is(err, backend.ErrUnsupported) || !strings.Contains(err.Error(), want) {
				t.Fatalf("LoadTarget = %v, want an ErrUnsupported naming %s", err, want)
			}
		})
	}
}

// namedDevice is a Device that only has a name: any other call panics (LoadTarget must refuse
// before using the device).
type namedDevice struct{ Device }

func (namedDevice) Name() string { return "Fake" }
