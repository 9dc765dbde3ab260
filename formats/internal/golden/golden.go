// Package golden loads the numeric-format goldens under testdata/formats/ for the tests of
// lithos/formats/...: JSON tables and one safetensors file, all written by
// tools/formats_goldens.py from PyTorch on the GPU machine (docs/formats.md § "Goldens").
//
// A missing golden fails the calling test with the command that generates it; it never skips.
//
// Imports: lithos/formats/safetensors, testing and the standard library; for tests only.
package golden

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"lithos/formats/safetensors"
)

// Command is what regenerates the goldens, run from the repository root on the GPU machine.
const Command = "python3 tools/formats_goldens.py --out testdata/formats"

// Dir returns testdata/formats of the module containing the working directory.
func Dir() (string, error) {
	d, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return filepath.Join(d, "testdata", "formats"), nil
		}
		p := filepath.Dir(d)
		if p == d {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		d = p
	}
}

// Path returns the path of testdata/formats/name, failing t when the file is missing.
func Path(t testing.TB, name string) string {
	t.Helper()
	dir, err := Dir()
	if err != nil {
		t.Fatalf("golden %s: %v", name, err)
	}
	p := filepath.Join(dir, name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("golden testdata/formats/%s is missing or unreadable (%v): generate it on the GPU machine with `%s` (tools/formats_goldens.py)", name, err, Command)
	}
	return p
}

// Read returns the bytes of testdata/formats/name, failing t when the file is missing.
func Read(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(Path(t, name))
	if err != nil {
		t.Fatalf("golden testdata/formats/%s: %v", name, err)
	}
	return b
}

// JSON decodes testdata/formats/name into v, failing t when the file is missing or malformed.
func JSON(t testing.TB, name string, v any) {
	t.Helper()
	if err := json.Unmarshal(Read(t, name), v); err != nil {
		t.Fatalf("golden testdata/formats/%s: %v (regenerate with `%s`)", name, err, Command)
	}
}

// Tensor is one tensor of a safetensors golden.
type Tensor struct {
	DType string
	Shape []int64
	Data  []byte
}

// Safetensors reads testdata/formats/name with lithos/formats/safetensors, failing t on a
// missing or malformed file. It returns the tensors by name and the __metadata__ map.
func Safetensors(t testing.TB, name string) (map[string]Tensor, map[string]string) {
	t.Helper()
	f, err := safetensors.Open(Path(t, name))
	if err != nil {
		t.Fatalf("golden testdata/formats/%s: %v (regenerate with `%s`)", name, err, Command)
	}
	defer f.Close()
	out := make(map[string]Tensor, len(f.Header.Tensors))
	for _, tn := range f.Header.Tensors {
		b, err := f.ReadTensor(tn)
		if err != nil {
			t.Fatalf("golden testdata/formats/%s: %v", name, err)
		}
		out[tn.Name] = Tensor{DType: string(tn.DType), Shape: tn.Shape, Data: b}
	}
	return out, f.Header.Metadata
}
