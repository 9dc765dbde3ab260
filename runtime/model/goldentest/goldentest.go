// Package goldentest reads the transformers goldens that tools/qwen35_goldens.py writes
// (testdata/goldens/<model>/goldens.safetensors) for the tests of runtime/model and of the
// backends. It is imported by tests only.
package goldentest

import (
	"encoding/binary"
	"math"
	"testing"

	"lithos/formats/safetensors"
)

// Command makes the goldens; failures name it.
const Command = "python3 tools/qwen35_goldens.py --out testdata/goldens"

// ReadTensors returns every F32 and I32 tensor of a goldens.safetensors file by name. It fails
// the test (never skips) when the file is missing or holds another dtype.
func ReadTensors(tb testing.TB, path string) (map[string][]float32, map[string][]int32) {
	tb.Helper()
	f, err := safetensors.Open(path)
	if err != nil {
		tb.Fatalf("%v (the goldens come from `%s` on the GPU machine)", err, Command)
	}
	defer f.Close()
	f32, i32 := map[string][]float32{}, map[string][]int32{}
	for _, tt := range f.Header.Tensors {
		raw, err := f.ReadTensor(tt)
		if err != nil {
			tb.Fatal(err)
		}
		switch tt.DType {
		case safetensors.F32:
			v := make([]float32, len(raw)/4)
			for i := range v {
				v[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
			}
			f32[tt.Name] = v
		case safetensors.I32:
			v := make([]int32, len(raw)/4)
			for i := range v {
				v[i] = int32(binary.LittleEndian.Uint32(raw[4*i:]))
			}
			i32[tt.Name] = v
		default:
			tb.Fatalf("%s: tensor %s has dtype %s, want F32 or I32", path, tt.Name, tt.DType)
		}
	}
	return f32, i32
}
