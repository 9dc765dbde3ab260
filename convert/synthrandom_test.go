package convert

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"lithos/formats/bf16"
	"lithos/formats/fp8"
	"lithos/formats/nvfp4"
	"lithos/formats/safetensors"
)

// tiny27B is the embedded 27B spec's formats, rules and omit list on tiny widths (the real
// widths are too big for a unit test).
func tiny27B(t *testing.T) *SynthSpec {
	t.Helper()
	spec, err := LoadSynthSpec("qwen3.8-27b-nvfp4")
	if err != nil {
		t.Fatal(err)
	}
	spec.Config = []byte(`{"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
	  "text_config": {"model_type": "qwen3_5_text", "dtype": "bfloat16", "hidden_size": 64, "intermediate_size": 128,
	    "num_hidden_layers": 4, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32, "vocab_size": 256,
	    "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 16, "linear_value_head_dim": 16,
	    "linear_conv_kernel_dim": 4, "full_attention_interval": 4, "mtp_num_hidden_layers": 1, "tie_word_embeddings": false}}`)
	if spec, err = CutSynthSpec(spec, 4, false, false, 100_000); err != nil {
		t.Fatal(err)
	}
	return spec
}

// TestSynthRandomValues checks every value SynthRandom writes against its role, that no tensor
// is all zero, that NVFP4 modules pass the packer's 448 check, that the same seed gives the same
// bytes and another seed other bytes in every tensor, and that no temporary directory is left.
func TestSynthRandomValues(t *testing.T) {
	spec := tiny27B(t)
	parent := t.TempDir()
	dirs := []string{filepath.Join(parent, "a"), filepath.Join(parent, "b"), filepath.Join(parent, "c")}
	var progressed int64
	for i, d := range dirs {
		seed := uint64(9)
		if i == 2 {
			seed = 10
		}
		opt := SynthRandomOptions{Seed: seed, Workers: 1 + i}
		if i == 0 {
			opt.Progress = func(total, delta int64) { progressed += delta } // Workers 1: no race
		}
		res, err := SynthRandom(context.Background(), spec, d, opt)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 && progressed != res.TensorBytes {
			t.Errorf("progress reported %d bytes, want the %d bytes of tensor data", progressed, res.TensorBytes)
		}
	}
	if ents, _ := os.ReadDir(parent); len(ents) != 3 {
		t.Errorf("parent holds %d entries, want a, b, c only (temporary directory left?)", len(ents))
	}
	m, err := safetensors.OpenModel(context.Background(), dirs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	read := func(dir, file string, tt safetensors.Tensor) []byte {
		g, err := os.ReadFile(filepath.Join(dir, filepath.Base(file)))
		if err != nil {
			t.Fatal(err)
		}
		return g[tt.Offset : tt.Offset+tt.Size]
	}
	kinds := map[synthKind]int{}
	for _, name := range m.Names() {
		f, tt, _ := m.Lookup(name)
		b, err := f.ReadTensor(tt)
		if err != nil {
			t.Fatal(err)
		}
		if !slicesNonZero(b) {
			t.Errorf("%s: all %d bytes are zero", name, len(b))
		}
		k := synthKindOf(tt)
		kinds[k]++
		for i := 0; i < len(b); {
			switch k {
			case synthBF16:
				v := float64(bf16.ToFloat32(binary.LittleEndian.Uint16(b[i:])))
				if math.IsNaN(v) || math.IsInf(v, 0) || math.Abs(v) >= 0.0625 || math.Abs(v) < 1.0/4096 {
					t.Fatalf("%s: BF16 %v outside ±[2^-12, 2^-4)", name, v)
				}
				i += 2
			case synthF32, synthF32Scale:
				v := float64(math.Float32frombits(binary.LittleEndian.Uint32(b[i:])))
				if math.IsNaN(v) || math.IsInf(v, 0) || k == synthF32Scale && !(v >= 1.0/16384 && v < 1.0/512) {
					t.Fatalf("%s: F32 %v (kind %d)", name, v, k)
				}
				i += 4
			case synthE4M3Weight, synthE4M3Scale:
				v := float64(fp8.E4M3ToFloat32(b[i]))
				if math.IsNaN(v) || k == synthE4M3Scale && !(v >= 0.25 && v <= 15) {
					t.Fatalf("%s: E4M3 %#x = %v (kind %d)", name, b[i], v, k)
				}
				i++
			default:
				i = len(b)
			}
		}
		if !bytes.Equal(read(dirs[1], f.Path, tt), b) {
			t.Errorf("%s: another run with the same seed (and more workers) wrote other bytes", name)
		}
		if bytes.Equal(read(dirs[2], f.Path, tt), b) {
			t.Errorf("%s: seeds 9 and 10 wrote the same bytes", name)
		}
		if mod, ok := strings.CutSuffix(name, ".weight_scale_2"); ok {
			_, st, _ := m.Lookup(mod + ".weight_scale")
			sf, _, _ := m.Lookup(mod + ".weight_scale")
			scales, err := sf.ReadTensor(st)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := nvfp4.CheckConvention(scales, math.Float32frombits(binary.LittleEndian.Uint32(b))); err != nil {
				t.Errorf("%s: %v", mod, err)
			}
		}
	}
	for _, k := range []synthKind{synthBF16, synthF32Scale, synthE4M3Weight, synthE4M3Scale, synthBytes} {
		if kinds[k] == 0 {
			t.Errorf("no tensor of kind %d: the spec's formats did not apply", k)
		}
	}
	for _, n := range m.Names() {
		if strings.HasPrefix(n, "mtp.") || strings.Contains(n, "visual.") {
			t.Fatalf("%s: CutSynthSpec kept the MTP block or the vision tower", n)
		}
	}
	if _, err := SynthRandom(context.Background(), spec, dirs[0], SynthRandomOptions{}); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("existing directory: err = %v, want already exists", err)
	}
}

func slicesNonZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return true
		}
	}
	return false
}

// TestSynthRandomPerChannelScale: FP8_PER_CHANNEL_PER_TOKEN stores an F32 [out] weight_scale,
// which must be positive like the scalar scales.
func TestSynthRandomPerChannelScale(t *testing.T) {
	tt := safetensors.Tensor{Name: "model.layers.0.mlp.down_proj.weight_scale", DType: safetensors.F32, Shape: []int64{128}, Size: 512}
	if k := synthKindOf(tt); k != synthF32Scale {
		t.Fatalf("kind %d, want synthF32Scale", k)
	}
}

// TestSynthRandomCancel: a cancelled run returns the context error and leaves nothing behind.
func TestSynthRandomCancel(t *testing.T) {
	spec := tiny27B(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	parent := t.TempDir()
	_, err := SynthRandom(ctx, spec, filepath.Join(parent, "x"), SynthRandomOptions{Seed: 1})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if ents, _ := os.ReadDir(parent); len(ents) != 0 {
		t.Errorf("cancelled run left %d entries in the parent directory", len(ents))
	}
}

func TestCutSynthSpecErrors(t *testing.T) {
	spec := tiny27B(t)
	for _, tc := range []struct {
		layers int
		shard  int64
		want   string
	}{{5, 0, "fewer than the 5 layers"}, {-1, 0, "want 0 (all) or more"}, {0, -1, "shard bytes -1"}} {
		if _, err := CutSynthSpec(spec, tc.layers, false, false, tc.shard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("layers %d shard %d: err = %v, want %q", tc.layers, tc.shard, err, tc.want)
		}
	}
}
