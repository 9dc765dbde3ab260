package packtest

import (
	"bytes"
	"context"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"lithos/convert"
	"lithos/formats/bf16"
	"lithos/formats/fp8"
	"lithos/formats/safetensors"
)

// TestWriteCheckpoint writes the embedded 27B spec's formats and rules on a tiny config (the real
// widths are too big for a unit test), without its MTP block: every value must be valid for its
// role, and the same seed must give the same bytes.
func TestWriteCheckpoint(t *testing.T) {
	spec, err := convert.LoadSynthSpec("qwen3.8-27b-nvfp4")
	if err != nil {
		t.Fatal(err)
	}
	// The 27B's formats and rules on tiny widths.
	tiny := []byte(`{"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
	  "text_config": {"model_type": "qwen3_5_text", "dtype": "bfloat16", "hidden_size": 64, "intermediate_size": 128,
	    "num_hidden_layers": 4, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32, "vocab_size": 256,
	    "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 16, "linear_value_head_dim": 16,
	    "linear_conv_kernel_dim": 4, "full_attention_interval": 4, "mtp_num_hidden_layers": 1, "tie_word_embeddings": false}}`)
	spec.Config = tiny
	if spec, err = ScaleSpec(spec, 4, false, false, 100_000); err != nil {
		t.Fatal(err)
	}
	dirs := []string{filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")}
	for _, d := range dirs {
		if _, err := WriteCheckpoint(context.Background(), spec, d, 9); err != nil {
			t.Fatal(err)
		}
	}
	m, err := safetensors.OpenModel(context.Background(), dirs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	kinds := map[kind]int{}
	for _, name := range m.Names() {
		f, tt, _ := m.Lookup(name)
		b, err := f.ReadTensor(tt)
		if err != nil {
			t.Fatal(err)
		}
		k := kindOf(tt)
		kinds[k]++
		for i := 0; i < len(b); {
			switch k {
			case kindBF16:
				v := bf16.ToFloat32(binary.LittleEndian.Uint16(b[i:]))
				if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) || math.Abs(float64(v)) >= 0.0625 || v != 0 && math.Abs(float64(v)) < 1.0/4096 {
					t.Fatalf("%s: BF16 %v", name, v)
				}
				i += 2
			case kindF32, kindF32Scale:
				v := math.Float32frombits(binary.LittleEndian.Uint32(b[i:]))
				if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) || k == kindF32Scale && !(v > 0) {
					t.Fatalf("%s: F32 %v", name, v)
				}
				i += 4
			case kindE4M3Weight, kindE4M3Scale:
				v := fp8.E4M3ToFloat32(b[i])
				if math.IsNaN(float64(v)) || k == kindE4M3Scale && !(v >= 0.25 && v <= 15) {
					t.Fatalf("%s: E4M3 %#x = %v", name, b[i], v)
				}
				i++
			default:
				i = len(b)
			}
		}
		g, _ := os.ReadFile(filepath.Join(dirs[1], filepath.Base(f.Path)))
		if !bytes.Equal(g[tt.Offset:tt.Offset+tt.Size], b) {
			t.Fatalf("%s: another run with the same seed wrote other bytes", name)
		}
	}
	for _, k := range []kind{kindBF16, kindF32Scale, kindE4M3Weight, kindE4M3Scale, kindBytes} {
		if kinds[k] == 0 {
			t.Errorf("no tensor of kind %d: the spec's formats did not apply", k)
		}
	}
	for _, n := range m.Names() {
		if strings.HasPrefix(n, "mtp.") || strings.Contains(n, "visual.") {
			t.Fatalf("%s: ScaleSpec kept the MTP block or the vision tower", n)
		}
	}
}
