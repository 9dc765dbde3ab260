package quantize

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"lithos/convert"
	"lithos/formats/bf16"
	"lithos/formats/f16"
	"lithos/formats/safetensors"
)

// head describes a synthetic draft head for tests: the config written to
// config.json and (optionally different) the config whose inventory the
// tensors follow.
type head struct {
	cfg     map[string]any // config.json
	tensors map[string]any // config the tensors follow; nil = cfg
	dtype   safetensors.DType
	seed    uint64
	// fill, when set, may overwrite a tensor's float32 values (already
	// random) before they are stored.
	fill func(name string, shape []int64, w []float32)
	// omit drops tensors; extra adds zero-filled BF16 tensors.
	omit  []string
	extra []safetensors.TensorSpec
	// shards > 1 writes model-0000i-of-0000n.safetensors and an index.
	shards int
}

// tinyConfig is a small DSpark head: hidden 64, 2 layers, 4/2 heads × 16,
// intermediate 96, vocab 100, markov rank 32, 3 taps of a 64-wide target.
func tinyConfig() map[string]any {
	return map[string]any{
		"architectures":               []string{"DSparkDraftModel"},
		"model_type":                  "qwen3",
		"hidden_size":                 64,
		"intermediate_size":           96,
		"num_hidden_layers":           2,
		"num_attention_heads":         4,
		"num_key_value_heads":         2,
		"head_dim":                    16,
		"vocab_size":                  100,
		"rms_norm_eps":                1e-06,
		"rope_theta":                  10000000,
		"tie_word_embeddings":         false,
		"dtype":                       "bfloat16",
		"num_target_layers":           8,
		"block_size":                  7,
		"target_layer_ids":            []int{1, 3, 5},
		"mask_token_id":               99,
		"markov_rank":                 32,
		"markov_head_type":            "vanilla",
		"enable_confidence_head":      true,
		"confidence_head_with_markov": true,
		"target_hidden_size":          64,
	}
}

func cloneCfg(c map[string]any) map[string]any {
	out := make(map[string]any, len(c))
	for k, v := range c {
		out[k] = v
	}
	return out
}

// randomValues fills w with BF16-exact normal(0, 0.02) values, norms with
// 1 + small noise.
func randomValues(r *rand.Rand, name string, w []float32) {
	norm := strings.HasSuffix(name, "norm.weight")
	for i := range w {
		v := float32(r.NormFloat64() * 0.02)
		if norm {
			v += 1
		}
		w[i] = bf16.ToFloat32(bf16.FromFloat32(v))
	}
}

func encodeAs(d safetensors.DType, w []float32) []byte {
	switch d {
	case safetensors.F32:
		b := make([]byte, 4*len(w))
		for i, v := range w {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
		}
		return b
	case safetensors.F16:
		b := make([]byte, 2*len(w))
		if err := f16.Encode(b, w); err != nil {
			panic(err)
		}
		return b
	}
	b := make([]byte, 2*len(w))
	if err := bf16.Encode(b, w); err != nil {
		panic(err)
	}
	return b
}

// writeHead writes h into dir (created) and returns dir.
func writeHead(t testing.TB, dir string, h head) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfgJSON, err := json.MarshalIndent(h.cfg, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), append(cfgJSON, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	tc := h.tensors
	if tc == nil {
		tc = h.cfg
	}
	tcJSON, _ := json.Marshal(tc)
	cfg, err := convert.ParseConfig(tcJSON)
	if err != nil {
		t.Fatalf("tensor config: %v", err)
	}
	inv, err := convert.Inventory(cfg)
	if err != nil {
		t.Fatalf("inventory: %v", err)
	}
	d := h.dtype
	if d == "" {
		d = safetensors.BF16
	}
	r := rand.New(rand.NewPCG(h.seed, 7))
	data := map[string][]byte{}
	var specs []safetensors.TensorSpec
	for _, lt := range inv {
		skip := false
		for _, o := range h.omit {
			if o == lt.Name {
				skip = true
			}
		}
		if skip {
			continue
		}
		n := int64(1)
		for _, s := range lt.Shape {
			n *= s
		}
		w := make([]float32, n)
		randomValues(r, lt.Name, w)
		if h.fill != nil {
			h.fill(lt.Name, lt.Shape, w)
		}
		specs = append(specs, safetensors.TensorSpec{Name: lt.Name, DType: d, Shape: lt.Shape})
		data[lt.Name] = encodeAs(d, w)
	}
	for _, e := range h.extra {
		specs = append(specs, e)
		sz, err := safetensors.ByteSize(e.DType, e.Shape)
		if err != nil {
			t.Fatal(err)
		}
		data[e.Name] = make([]byte, sz)
	}
	specs = safetensors.PythonOrder(specs)
	if h.shards <= 1 {
		writeST(t, filepath.Join(dir, "model.safetensors"), specs, data)
		return dir
	}
	weightMap := map[string]string{}
	per := (len(specs) + h.shards - 1) / h.shards
	var total int64
	for s := 0; s < h.shards; s++ {
		lo, hi := s*per, min((s+1)*per, len(specs))
		name := shardName(s+1, h.shards)
		writeST(t, filepath.Join(dir, name), specs[lo:hi], data)
		for _, sp := range specs[lo:hi] {
			weightMap[sp.Name] = name
			total += int64(len(data[sp.Name]))
		}
	}
	ix, _ := json.MarshalIndent(map[string]any{"metadata": map[string]any{"total_size": total}, "weight_map": weightMap}, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, safetensors.IndexName), ix, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func shardName(i, n int) string {
	return "model-" + pad5(i) + "-of-" + pad5(n) + ".safetensors"
}

func pad5(i int) string {
	s := "00000" + itoa(i)
	return s[len(s)-5:]
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}

func writeST(t testing.TB, path string, specs []safetensors.TensorSpec, data map[string][]byte) {
	t.Helper()
	var buf bytes.Buffer
	w, err := safetensors.NewWriter(&buf, specs, map[string]string{"format": "pt"})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range specs {
		if err := w.WriteTensor(s.Name, data[s.Name]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// readAll returns every tensor of the model at dir: raw bytes, dtype and shape.
type stTensor struct {
	dtype safetensors.DType
	shape []int64
	data  []byte
}

func readModel(t testing.TB, dir string) map[string]stTensor {
	t.Helper()
	m, err := safetensors.OpenModel(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	out := map[string]stTensor{}
	for _, n := range m.Names() {
		f, tt, _ := m.Lookup(n)
		b, err := f.ReadTensor(tt)
		if err != nil {
			t.Fatal(err)
		}
		out[n] = stTensor{dtype: tt.DType, shape: tt.Shape, data: b}
	}
	return out
}

// floats decodes a BF16/F16/F32 tensor to float32 by the textbook formulas.
func floats(t testing.TB, x stTensor) []float32 {
	t.Helper()
	switch x.dtype {
	case safetensors.BF16:
		out := make([]float32, len(x.data)/2)
		for i := range out {
			out[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(x.data[2*i:])) << 16)
		}
		return out
	case safetensors.F32:
		out := make([]float32, len(x.data)/4)
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(x.data[4*i:]))
		}
		return out
	case safetensors.F16:
		out := make([]float32, len(x.data)/2)
		if err := f16.Decode(out, x.data); err != nil {
			t.Fatal(err)
		}
		return out
	}
	t.Fatalf("floats: dtype %s", x.dtype)
	return nil
}

// e4m3Exact decodes an E4M3 code by its definition (1/4/3, bias 7,
// subnormals m·2^-9), independently of formats/fp8.
func e4m3Exact(c byte) float64 {
	e, m := int(c>>3&0xF), float64(c&7)
	var v float64
	if e == 0 {
		v = m * math.Ldexp(1, -9)
	} else {
		v = (1 + m/8) * math.Ldexp(1, e-7)
	}
	if c&0x80 != 0 {
		v = -v
	}
	return v
}

var e2m1Table = [16]float64{0, 0.5, 1, 1.5, 2, 3, 4, 6, 0, -0.5, -1, -1.5, -2, -3, -4, -6}

// quantOpts are the options tests run with.
func quantOpts() Options {
	return Options{ToolVersion: "test", Workers: 3, ChunkBytes: 1000}
}

// noLeftovers fails when parent holds anything named like base's temp dirs,
// or base itself.
func noLeftovers(t testing.TB, out string) {
	t.Helper()
	if _, err := os.Lstat(out); err == nil {
		t.Errorf("output directory %s exists after a failed run", out)
	}
	ents, err := os.ReadDir(filepath.Dir(out))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), filepath.Base(out)+".tmp-") {
			t.Errorf("temporary directory %s left behind", e.Name())
		}
	}
}
