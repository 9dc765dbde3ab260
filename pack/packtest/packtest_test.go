package packtest

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"lithos/convert"
)

// TestWriteCheckpoint: the wrappers write what convert.SynthRandom writes for the same seed
// (convert's tests check the values), and ScaleSpec drops the MTP block and the vision tower.
func TestWriteCheckpoint(t *testing.T) {
	spec, err := convert.LoadSynthSpec("qwen3.8-27b-nvfp4")
	if err != nil {
		t.Fatal(err)
	}
	spec.Config = []byte(`{"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
	  "text_config": {"model_type": "qwen3_5_text", "dtype": "bfloat16", "hidden_size": 64, "intermediate_size": 128,
	    "num_hidden_layers": 4, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32, "vocab_size": 256,
	    "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 16, "linear_value_head_dim": 16,
	    "linear_conv_kernel_dim": 4, "full_attention_interval": 4, "mtp_num_hidden_layers": 1, "tie_word_embeddings": false}}`)
	if spec, err = ScaleSpec(spec, 4, false, false, 100_000); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(spec.Config), "vision_config") || !strings.Contains(string(spec.Config), `"mtp_num_hidden_layers":0`) {
		t.Fatalf("ScaleSpec kept the vision tower or the MTP block: %s", spec.Config)
	}
	a, b := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	res, err := WriteCheckpoint(context.Background(), spec, a, 9)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := convert.SynthRandom(context.Background(), spec, b, convert.SynthRandomOptions{Seed: 9}); err != nil {
		t.Fatal(err)
	}
	if len(res.Files) < 3 {
		t.Fatalf("%d files, want several shards plus JSON", len(res.Files))
	}
	for _, f := range res.Files {
		x, err1 := os.ReadFile(filepath.Join(a, f.Name))
		y, err2 := os.ReadFile(filepath.Join(b, f.Name))
		if err1 != nil || err2 != nil || !bytes.Equal(x, y) {
			t.Errorf("%s: WriteCheckpoint and convert.SynthRandom differ (%v, %v)", f.Name, err1, err2)
		}
	}
}
