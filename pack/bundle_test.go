package pack

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"lithos/formats/safetensors"
	"lithos/hub"
	"lithos/hub/hubtest"
	"lithos/manifests"
)

// tinyNames is the bundle of the tiny fixture (layers 0–2 Gated DeltaNet, layer 3 attention),
// in file order, as docs/bundle.md §3 names and orders tensors.
func tinyNames() []string {
	out := []string{"embed_tokens"}
	for i := range 4 {
		p := fmt.Sprintf("layers.%d.", i)
		out = append(out, p+"input_layernorm")
		if i < 3 {
			out = append(out, p+"linear_attn.in_proj_zqkv", p+"linear_attn.in_proj_ab", p+"linear_attn.conv1d",
				p+"linear_attn.dt_bias", p+"linear_attn.A_log", p+"linear_attn.norm", p+"linear_attn.out_proj")
		} else {
			out = append(out, p+"self_attn.qkv", p+"self_attn.o_proj", p+"self_attn.q_norm", p+"self_attn.k_norm")
		}
		out = append(out, p+"post_attention_layernorm", p+"mlp.gate_up", p+"mlp.down_proj")
	}
	return append(out, "norm", "lm_head")
}

// TestPackFixtureFromHub is issue 5's end-to-end proof: pack the sharded fixture repo served
// by hubtest, by repo id, and check the bundle against the fixture read independently.
func TestPackFixtureFromHub(t *testing.T) {
	srv := hubtest.Start(t, filepath.Join("..", "testdata", "hub"), hubtest.Options{})
	cache := t.TempDir()
	c := hub.NewClient(srv.URL, hub.WithCacheDir(cache), hub.WithToken(""))
	dir, m := build(t, Options{Target: "lithos-test/tiny-sharded", Hub: c})
	commit, _, err := srv.Snapshot("lithos-test", "tiny-sharded")
	if err != nil {
		t.Fatal(err)
	}

	// Source identity: repo, commit, and every file's sha256 as computed here.
	src := m.Target.Source
	if src.Repo == nil || *src.Repo != "lithos-test/tiny-sharded" || src.Commit == nil || *src.Commit != commit {
		t.Fatalf("source repo/commit %v/%v, want lithos-test/tiny-sharded@%s", src.Repo, src.Commit, commit)
	}
	var paths []string
	for _, f := range src.Files {
		paths = append(paths, f.Path)
		if want := fileSHA(t, filepath.Join(fixtureDir, f.Path)); f.SHA256 != want {
			t.Errorf("source file %s: sha256 %s, want %s", f.Path, f.SHA256, want)
		}
	}
	if want := []string{"config.json", "hf_quant_config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "model.safetensors.index.json"}; !slices.Equal(paths, want) {
		t.Errorf("source files %v, want %v", paths, want)
	}
	cfg, _ := os.ReadFile(filepath.Join(fixtureDir, "config.json"))
	if m.Target.Architecture != "Qwen3_5ForConditionalGeneration" || !jsonEqual(t, m.Target.Config, cfg) {
		t.Errorf("target architecture %q or config differs from config.json", m.Target.Architecture)
	}

	// Names, order, alignment, hashes.
	var names []string
	for _, tt := range m.Tensors {
		names = append(names, tt.Name)
	}
	if want := tinyNames(); !slices.Equal(names, want) {
		t.Fatalf("tensors\n%v\nwant\n%v", names, want)
	}
	weights, err := os.ReadFile(filepath.Join(dir, manifests.BundleWeightsName))
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(weights)) != m.Weights.Bytes || len(weights)%16384 != 0 {
		t.Fatalf("weights.bin is %d bytes, manifest %d, want a multiple of 16384", len(weights), m.Weights.Bytes)
	}
	for _, tt := range m.Tensors {
		if tt.Offset%16384 != 0 {
			t.Errorf("%s: offset %d not 16 KiB aligned", tt.Name, tt.Offset)
		}
		if got := sha256Hex(weights[tt.Offset : tt.Offset+tt.Length]); got != tt.SHA256 {
			t.Errorf("%s: sha256 %s, manifest %s", tt.Name, got, tt.SHA256)
		}
	}

	// Every fixture tensor is in exactly one place: a plain tensor's source, a stack segment's
	// tensors, or the skipped list; the skipped are the vision tower, the MTP block and the
	// activation scales.
	fx, err := safetensors.OpenModel(context.Background(), fixtureDir)
	if err != nil {
		t.Fatal(err)
	}
	defer fx.Close()
	seen := map[string]string{}
	note := func(name, where string) {
		if prev, ok := seen[name]; ok {
			t.Errorf("%s is in %s and in %s", name, prev, where)
		}
		seen[name] = where
	}
	for _, tt := range m.Tensors {
		if tt.Encoding == manifests.EncodingPlain {
			note(tt.Source, tt.Name)
			continue
		}
		for _, s := range tt.Stack.Segments {
			for _, n := range s.Tensors {
				note(n, tt.Name)
			}
		}
	}
	for _, s := range m.Skipped {
		note(s.Name, "skipped")
		ok := strings.HasPrefix(s.Name, "mtp.") && strings.HasPrefix(s.Reason, "MTP") ||
			strings.HasPrefix(s.Name, "model.visual.") && strings.HasPrefix(s.Reason, "vision") ||
			strings.HasSuffix(s.Name, ".input_scale") && strings.HasPrefix(s.Reason, "activation")
		if !ok {
			t.Errorf("skipped %s: %q", s.Name, s.Reason)
		}
	}
	for _, n := range fx.Names() {
		if _, ok := seen[n]; !ok {
			t.Errorf("fixture tensor %s is nowhere in the manifest", n)
		}
	}
	if len(seen) != len(fx.Names()) {
		t.Errorf("the manifest accounts for %d tensors, the fixture has %d", len(seen), len(fx.Names()))
	}

	// Transforms are recorded, values stored raw.
	for name, want := range map[string]string{
		"layers.0.input_layernorm": "one_plus", "norm": "one_plus", "layers.3.self_attn.q_norm": "one_plus",
		"layers.0.linear_attn.A_log": "neg_exp", "layers.0.linear_attn.norm": "none", "layers.0.linear_attn.dt_bias": "none",
		"embed_tokens": "none", "layers.1.linear_attn.conv1d": "none",
	} {
		tt, _ := m.Tensor(name)
		if tt.Transform != want {
			t.Errorf("%s: transform %q, want %q", name, tt.Transform, want)
		}
		if got := weights[tt.Offset : tt.Offset+tt.Length]; !slices.Equal(got, sourceTensor(t, fx, tt.Source)) {
			t.Errorf("%s: stored bytes differ from %s", name, tt.Source)
		}
	}

	// Copied files, byte for byte.
	var copied []string
	for _, f := range m.Files {
		copied = append(copied, f.Path)
		a, _ := os.ReadFile(filepath.Join(dir, f.Path))
		b, _ := os.ReadFile(filepath.Join(fixtureDir, f.Path))
		if !slices.Equal(a, b) || len(a) == 0 || sha256Hex(a) != f.SHA256 {
			t.Errorf("copied %s differs from the fixture's", f.Path)
		}
	}
	if want := []string{"generation_config.json", "tokenizer.json", "tokenizer_config.json"}; !slices.Equal(copied, want) {
		t.Errorf("copied %v, want %v", copied, want)
	}

	// Stacks, element by element, from the fixture's tensors.
	checkGateUp(t, m, weights, fx, "layers.2.mlp.gate_up", "model.language_model.layers.2.mlp.")
	checkConcatFP8(t, m, weights, fx, "layers.3.self_attn.qkv", "model.language_model.layers.3.self_attn.", []string{"q_proj", "k_proj", "v_proj"})
	checkConcatFP8(t, m, weights, fx, "layers.0.linear_attn.in_proj_zqkv", "model.language_model.layers.0.linear_attn.", []string{"in_proj_z", "in_proj_qkv"})

	// verify, and verify --deep against the HF cache snapshot the pack downloaded.
	rep, err := Verify(context.Background(), dir, VerifyOptions{Deep: true, CacheDir: cache})
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if rep.Deep.Compared != len(m.Tensors) || rep.Deep.NotCompared != 0 || !strings.Contains(rep.Deep.Sources[0].Note, "HF cache snapshot") {
		t.Errorf("deep: %+v", rep.Deep)
	}
	if len(rep.Problems) != 0 {
		t.Errorf("problems: %v", rep.Problems)
	}
	// The inspect totals add up to the file.
	r := Inspect(mustOpen(t, dir))
	if r.Total.FileBytes != m.Weights.Bytes || r.Total.StoredBytes != m.Padding.StoredBytes || r.Total.Tensors != len(m.Tensors) {
		t.Errorf("inspect total %+v, weights %d, stored %d", r.Total, m.Weights.Bytes, m.Padding.StoredBytes)
	}
}

func mustOpen(t *testing.T, dir string) *Bundle {
	t.Helper()
	b, err := OpenBundle(dir)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkGateUp states the gate/up interleave independently of blm.Stack: packed row p is row
// (p/16)·8 + p%8 of gate when (p/8) is even, of up otherwise. Every code nibble and block scale
// is compared with the fixture's, and every row scale with its matrix's weight_scale_2.
func checkGateUp(t *testing.T, m *manifests.Bundle, weights []byte, fx *safetensors.Model, name, prefix string) {
	t.Helper()
	tt, ok := m.Tensor(name)
	if !ok || tt.Format != "nvfp4" || tt.Stack.Mode != "interleave" || tt.Stack.Chunk != 8 {
		t.Fatalf("%s: %+v", name, tt)
	}
	g := geometryOf(*tt.Layout)
	packed := weights[tt.Offset : tt.Offset+g.TotalBytes]
	codes := [2][]byte{sourceTensor(t, fx, prefix+"gate_proj.weight"), sourceTensor(t, fx, prefix+"up_proj.weight")}
	scales := [2][]byte{sourceTensor(t, fx, prefix+"gate_proj.weight_scale"), sourceTensor(t, fx, prefix+"up_proj.weight_scale")}
	s2 := [2][]byte{sourceTensor(t, fx, prefix+"gate_proj.weight_scale_2"), sourceTensor(t, fx, prefix+"up_proj.weight_scale_2")}
	rows := g.N / 2
	if g.N != 2*rows || g.N != 256 || g.K != 64 {
		t.Fatalf("%s: shape [%d, %d]", name, g.N, g.K)
	}
	for p := range g.N {
		seg, r := (p/8)%2, (p/16)*8+p%8
		for c := range g.K {
			off, shift, err := g.Element(p, c)
			if err != nil {
				t.Fatal(err)
			}
			got := packed[off] >> shift & 0xF
			want := codes[seg][r*g.K/2+c/2] >> (4 * (c % 2)) & 0xF
			if got != want {
				t.Fatalf("%s: row %d col %d: code %#x, want %#x (segment %d row %d)", name, p, c, got, want, seg, r)
			}
			so, err := g.Scale(p, c)
			if err != nil {
				t.Fatal(err)
			}
			if packed[so] != scales[seg][r*g.K/16+c/16] {
				t.Fatalf("%s: row %d col %d: block scale %#x, want %#x", name, p, c, packed[so], scales[seg][r*g.K/16+c/16])
			}
		}
		if got, want := f32At(weights[tt.RowScales.Offset:], int(p)), f32At(s2[seg], 0); got != want {
			t.Fatalf("%s: row scale %d = %v, want weight_scale_2 %v", name, p, got, want)
		}
	}
	for p := g.N; p < tt.RowScales.Count; p++ {
		if f32At(weights[tt.RowScales.Offset:], int(p)) != 0 {
			t.Fatalf("%s: padding row scale %d is not 0", name, p)
		}
	}
}

// checkConcatFP8 states concatenation independently: the members' rows one after the other,
// each row's scale its member's weight_scale.
func checkConcatFP8(t *testing.T, m *manifests.Bundle, weights []byte, fx *safetensors.Model, name, prefix string, members []string) {
	t.Helper()
	tt, ok := m.Tensor(name)
	if !ok || tt.Format != "fp8_e4m3" || tt.Stack.Mode != "concat" || len(tt.Stack.Segments) != len(members) {
		t.Fatalf("%s: %+v", name, tt)
	}
	g := geometryOf(*tt.Layout)
	packed := weights[tt.Offset : tt.Offset+g.TotalBytes]
	var p int64
	for _, mem := range members {
		w := sourceTensor(t, fx, prefix+mem+".weight")
		ws := f32At(sourceTensor(t, fx, prefix+mem+".weight_scale"), 0)
		for r := range int64(len(w)) / g.K {
			for c := range g.K {
				off, _, err := g.Element(p, c)
				if err != nil {
					t.Fatal(err)
				}
				if packed[off] != w[r*g.K+c] {
					t.Fatalf("%s: row %d (%s row %d) col %d: %#x, want %#x", name, p, mem, r, c, packed[off], w[r*g.K+c])
				}
			}
			if got := f32At(weights[tt.RowScales.Offset:], int(p)); got != ws {
				t.Fatalf("%s: row scale %d = %v, want %s weight_scale %v", name, p, got, mem, ws)
			}
			p++
		}
	}
	if p != g.N {
		t.Fatalf("%s: %d rows from the members, N = %d", name, p, g.N)
	}
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	return normJSON(t, a) == normJSON(t, b)
}
