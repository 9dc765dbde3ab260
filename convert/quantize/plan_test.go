package quantize

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"lithos/convert"
	"lithos/formats/safetensors"
)

// TestPlan27BMatchesShippedHead plans the conversion of a header-only copy of
// RadixArk/Qwen3.8-27B-DSpark (the BF16 head, lithos-metal.md §5.3; spec
// manifests/models/dspark-qwen3.8-27b-bf16.json) and compares the output
// tensors with those of LithosAI/Qwen3.8-27B-DSpark-NVFP4, the NVFP4 head
// lithos-metal shipped (manifests/models/dspark-qwen3.8-27b-nvfp4.json, whose
// tensor data the article gives as 1,136,243,862 bytes).
func TestPlan27BMatchesShippedHead(t *testing.T) {
	ctx := context.Background()
	src := filepath.Join(t.TempDir(), "head")
	spec, err := convert.LoadSynthSpec("dspark-qwen3.8-27b-bf16")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := convert.SynthHeaders(ctx, spec, src); err != nil {
		t.Fatal(err)
	}
	cfg, err := convert.ParseConfig(mustRead(t, filepath.Join(src, "config.json")))
	if err != nil {
		t.Fatal(err)
	}
	m, err := safetensors.OpenModel(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	p, err := makePlan(cfg, m)
	if err != nil {
		t.Fatal(err)
	}
	shipped, err := convert.LoadSynthSpec("dspark-qwen3.8-27b-nvfp4")
	if err != nil {
		t.Fatal(err)
	}
	want, _, _, err := shipped.StoredTensors()
	if err != nil {
		t.Fatal(err)
	}
	key := func(s safetensors.TensorSpec) string { return fmt.Sprintf("%s %s %v", s.Name, s.DType, s.Shape) }
	var a, b []string
	var bytes int64
	for _, s := range p.specs {
		a = append(a, key(s))
		n, err := safetensors.ByteSize(s.DType, s.Shape)
		if err != nil {
			t.Fatal(err)
		}
		bytes += n
	}
	for _, s := range want {
		b = append(b, key(s))
	}
	slices.Sort(a)
	slices.Sort(b)
	if !slices.Equal(a, b) {
		t.Errorf("planned output tensors differ from the shipped head's:\n ours %v\n shipped %v", a, b)
	}
	nq := 0
	for _, it := range p.items {
		if it.quantize {
			nq++
		}
	}
	if nq != 37 || bytes != 1_136_243_862 {
		t.Errorf("%d quantized matrices, %d tensor bytes; want 37 and 1,136,243,862 (lithos-metal.md §5.3)", nq, bytes)
	}
	if !slices.Equal(p.exclude, []string{"confidence_head.proj", "markov_head.markov_w1"}) {
		t.Errorf("exclude %v", p.exclude)
	}
}

// FuzzPlanConfig feeds arbitrary config.json bytes against the tensors of the
// tiny head: parsing and planning must return an error or a plan whose
// outputs cover every source tensor, never panic.
func FuzzPlanConfig(f *testing.F) {
	dir := writeHead(f, filepath.Join(f.TempDir(), "src"), head{cfg: tinyConfig(), seed: 1})
	good, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		f.Fatal(err)
	}
	m, err := safetensors.OpenModel(context.Background(), dir)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { m.Close() })
	f.Add(good)
	f.Add([]byte(`{"architectures":["DSparkDraftModel"],"hidden_size":64,"intermediate_size":96,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":100,"markov_rank":32,"target_layer_ids":[1]}`))
	f.Add([]byte(`{"dspark_config":{"markov_rank":-1},"hidden_size":1e30}`))
	f.Add([]byte(`{"num_hidden_layers":99999999999,"dflash_config":{}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := convert.ParseConfig(data)
		if err != nil || !cfg.IsDraft() {
			return
		}
		p, err := makePlan(cfg, m)
		if err != nil {
			return
		}
		if len(p.items) != len(m.Names()) {
			t.Fatalf("plan covers %d of %d tensors", len(p.items), len(m.Names()))
		}
		if _, err := rewriteConfig(data, "x", p.exclude); err != nil && cfg.Quantization == nil && cfg.Lithos == nil {
			t.Fatalf("rewriteConfig of a parsed config: %v", err)
		}
	})
}
