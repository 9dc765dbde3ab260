// Package drafttest reads the DSpark drafter goldens that tools/dspark_goldens.py writes
// (testdata/goldens/dspark-tiny/goldens.safetensors, and yarn-config.json beside it) and the tiny
// DSpark head they were made from (testdata/dspark/), for the tests of runtime/draft and of the
// backends. It is imported by tests only.
package drafttest

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"lithos/formats/bf16"
	"lithos/formats/nvfp4"
	"lithos/formats/safetensors"
	"lithos/runtime/draft"
	"lithos/runtime/model"
)

// Command makes the goldens; failures name it.
const Command = "python3 tools/dspark_goldens.py --out testdata/goldens/dspark-tiny"

// Variants of the tiny head the goldens were recorded for: "bf16" (testdata/dspark/tiny-bf16)
// and "nvfp4" (testdata/dspark/tiny-nvfp4-expected.safetensors, what `lithos-pack quantize`
// writes for it, dequantized).
var Variants = []string{"bf16", "nvfp4"}

// Cases are the context lengths recorded for Variants (features.17 = the first 17 rows of
// features.40).
var Cases = []int{6, 17, 40}

// Yarn is the variant of the tiny head's BF16 weights under YaRN RoPE (YarnConfig: factor 4 over
// original_max_position_embeddings 1024), recorded for the context lengths YarnCases; the 1100-row
// case puts the context and the block (positions 1100 … 1106) past the original length.
const Yarn = "yarn"

// YarnCases are the context lengths recorded for the Yarn variant.
var YarnCases = []int{23, 1100}

// Root returns the repository root (the directory holding go.mod), found upwards from the
// test's working directory.
func Root(tb testing.TB) string {
	tb.Helper()
	dir, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			tb.Fatal("no go.mod above the test directory")
		}
		dir = up
	}
}

// TinyDir is testdata/dspark/tiny-bf16 (config.json + model.safetensors).
func TinyDir(tb testing.TB) string { return filepath.Join(Root(tb), "testdata", "dspark", "tiny-bf16") }

// Goldens are the records of goldens.safetensors: float32 and int32 tensors by name, and the
// target's BF16 tables embed and lm_head ([1000, 128]) decoded to float32.
type Goldens struct {
	F32 map[string][]float32
	I32 map[string][]int32
}

// Read reads goldens.safetensors. It fails the test (never skips) when the file is missing.
func Read(tb testing.TB) *Goldens {
	tb.Helper()
	p := filepath.Join(Root(tb), "testdata", "goldens", "dspark-tiny", "goldens.safetensors")
	g := &Goldens{F32: map[string][]float32{}, I32: map[string][]int32{}}
	f, err := safetensors.Open(p)
	if err != nil {
		tb.Fatalf("%v (the goldens come from `%s` on the GPU machine)", err, Command)
	}
	defer f.Close()
	for _, t := range f.Header.Tensors {
		raw, err := f.ReadTensor(t)
		if err != nil {
			tb.Fatal(err)
		}
		switch t.DType {
		case safetensors.F32:
			v := make([]float32, len(raw)/4)
			for i := range v {
				v[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
			}
			g.F32[t.Name] = v
		case safetensors.BF16:
			v := make([]float32, len(raw)/2)
			if err := bf16.Decode(v, raw); err != nil {
				tb.Fatal(err)
			}
			g.F32[t.Name] = v
		case safetensors.I32:
			v := make([]int32, len(raw)/4)
			for i := range v {
				v[i] = int32(binary.LittleEndian.Uint32(raw[4*i:]))
			}
			g.I32[t.Name] = v
		default:
			tb.Fatalf("%s: tensor %s has dtype %s", p, t.Name, t.DType)
		}
	}
	return g
}

// Floats returns a float32 record, failing the test when it is missing.
func (g *Goldens) Floats(tb testing.TB, name string) []float32 {
	tb.Helper()
	v, ok := g.F32[name]
	if !ok {
		tb.Fatalf("goldens: no tensor %s (rerun `%s`)", name, Command)
	}
	return v
}

// Ints returns an int32 record, failing the test when it is missing.
func (g *Goldens) Ints(tb testing.TB, name string) []int32 {
	tb.Helper()
	v, ok := g.I32[name]
	if !ok {
		tb.Fatalf("goldens: no tensor %s (rerun `%s`)", name, Command)
	}
	return v
}

// Features returns the context features of case n ([n, FeatureDim]): features.6 for n = 6, else
// row p = features.40[p mod 40] (the first n rows for n ≤ 40; tiled beyond, as
// tools/dspark_goldens.py tiled() builds the long YaRN case).
func (g *Goldens) Features(tb testing.TB, n, featureDim int) []float32 {
	tb.Helper()
	if n == 6 {
		return g.Floats(tb, "features.6")
	}
	f40 := g.Floats(tb, "features.40")
	if n <= 40 {
		return f40[:n*featureDim]
	}
	out := make([]float32, 0, n*featureDim)
	for p := 0; p < n; p++ {
		r := p % 40
		out = append(out, f40[r*featureDim:(r+1)*featureDim]...)
	}
	return out
}

// Target returns the dense target embedding and LM head of the goldens ([Vocab, Hidden]).
func (g *Goldens) Target(tb testing.TB, vocab, hidden int) (model.Embedding, model.Matrix) {
	tb.Helper()
	e, err := model.DenseEmbedding(g.Floats(tb, "embed"), vocab, hidden)
	if err != nil {
		tb.Fatal(err)
	}
	m, err := model.Dense(g.Floats(tb, "lm_head"), vocab, hidden)
	if err != nil {
		tb.Fatal(err)
	}
	return e, m
}

// Config parses tiny-bf16/config.json.
func Config(tb testing.TB) draft.Config {
	tb.Helper()
	return parseFile(tb, filepath.Join(TinyDir(tb), "config.json"))
}

// YarnConfigPath is the config of the Yarn variant, written by tools/dspark_goldens.py next to the
// goldens (tiny-bf16/config.json plus rope_scaling yarn).
func YarnConfigPath(tb testing.TB) string {
	return filepath.Join(Root(tb), "testdata", "goldens", "dspark-tiny", "yarn-config.json")
}

// YarnConfig parses YarnConfigPath.
func YarnConfig(tb testing.TB) draft.Config {
	tb.Helper()
	return parseFile(tb, YarnConfigPath(tb))
}

func parseFile(tb testing.TB, p string) draft.Config {
	tb.Helper()
	raw, err := os.ReadFile(p)
	if err != nil {
		tb.Fatalf("%v (made by `%s`)", err, Command)
	}
	c, err := draft.ParseConfig(raw)
	if err != nil {
		tb.Fatalf("%s: %v", p, err)
	}
	return c
}

// Tensors returns the float32 weights of a variant by checkpoint name ("yarn" has the bf16 ones): BF16 decoded exactly,
// NVFP4 linears dequantized (formats/nvfp4.DecodeRows: e2m1 · e4m3 block scale · weight_scale_2),
// with their shapes.
func Tensors(tb testing.TB, variant string) (map[string][]float32, map[string][]int64) {
	tb.Helper()
	p := filepath.Join(TinyDir(tb), "model.safetensors")
	switch variant {
	case "nvfp4":
		p = filepath.Join(Root(tb), "testdata", "dspark", "tiny-nvfp4-expected.safetensors")
	case "bf16", Yarn:
	default:
		tb.Fatalf("drafttest: unknown variant %q", variant)
	}
	f, err := safetensors.Open(p)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	read := func(name string) ([]byte, safetensors.Tensor) {
		t, ok := f.Header.Lookup(name)
		if !ok {
			tb.Fatalf("%s: no tensor %s", p, name)
		}
		b, err := f.ReadTensor(t)
		if err != nil {
			tb.Fatal(err)
		}
		return b, t
	}
	vals, shapes := map[string][]float32{}, map[string][]int64{}
	for _, t := range f.Header.Tensors {
		switch {
		case strings.HasSuffix(t.Name, ".weight_scale"), strings.HasSuffix(t.Name, ".weight_scale_2"):
			continue
		case t.DType == safetensors.BF16:
			raw, _ := read(t.Name)
			v := make([]float32, len(raw)/2)
			if err := bf16.Decode(v, raw); err != nil {
				tb.Fatal(err)
			}
			vals[t.Name], shapes[t.Name] = v, t.Shape
		case t.DType == safetensors.U8:
			codes, _ := read(t.Name)
			mod := strings.TrimSuffix(t.Name, ".weight")
			scales, _ := read(mod + ".weight_scale")
			s2raw, _ := read(mod + ".weight_scale_2")
			s2 := math.Float32frombits(binary.LittleEndian.Uint32(s2raw))
			n, k := t.Shape[0], 2*t.Shape[1]
			v := make([]float32, n*k)
			if err := nvfp4.DecodeRows(v, codes, scales, int(k), s2); err != nil {
				tb.Fatalf("%s: %v", t.Name, err)
			}
			vals[t.Name], shapes[t.Name] = v, []int64{n, k}
		default:
			tb.Fatalf("%s: tensor %s: dtype %s", p, t.Name, t.DType)
		}
	}
	return vals, shapes
}

// Weights builds dense draft weights of a variant for cfg.
func Weights(tb testing.TB, cfg draft.Config, variant string) draft.Weights {
	tb.Helper()
	vals, shapes := Tensors(tb, variant)
	mat := func(name string) model.Matrix {
		s := shapes[name+".weight"]
		if len(s) != 2 {
			tb.Fatalf("%s.weight: shape %v", name, s)
		}
		m, err := model.Dense(vals[name+".weight"], int(s[0]), int(s[1]))
		if err != nil {
			tb.Fatalf("%s: %v", name, err)
		}
		return m
	}
	vec := func(name string) []float32 {
		v, ok := vals[name+".weight"]
		if !ok {
			tb.Fatalf("no %s.weight", name)
		}
		return v
	}
	w := draft.Weights{FC: mat("fc"), HiddenNorm: vec("hidden_norm"), Norm: vec("norm")}
	for i := 0; i < cfg.Layers; i++ {
		p := "layers." + strconv.Itoa(i) + "."
		w.Layers = append(w.Layers, draft.Layer{
			InputNorm: vec(p + "input_layernorm"), PostNorm: vec(p + "post_attention_layernorm"),
			Q: mat(p + "self_attn.q_proj"), K: mat(p + "self_attn.k_proj"), V: mat(p + "self_attn.v_proj"), O: mat(p + "self_attn.o_proj"),
			QNorm: vec(p + "self_attn.q_norm"), KNorm: vec(p + "self_attn.k_norm"),
			Gate: mat(p + "mlp.gate_proj"), Up: mat(p + "mlp.up_proj"), Down: mat(p + "mlp.down_proj"),
		})
	}
	var err error
	if w.MarkovW1, err = model.DenseEmbedding(vec("markov_head.markov_w1"), cfg.Vocab, cfg.MarkovRank); err != nil {
		tb.Fatal(err)
	}
	w.MarkovW2 = mat("markov_head.markov_w2")
	w.ConfProj = mat("confidence_head.proj")
	w.ConfBias = vals["confidence_head.proj.bias"][0]
	return w
}

// RelErr returns max|got − want| / max|want| and the index of the largest difference
// (+Inf when the lengths differ or a value is not finite).
func RelErr(got, want []float32) (float64, int) {
	if len(got) != len(want) {
		return math.Inf(1), -1
	}
	var num, den float64
	at := 0
	for i := range want {
		d := math.Abs(float64(got[i]) - float64(want[i]))
		if math.IsNaN(d) {
			return math.Inf(1), i
		}
		if d > num {
			num, at = d, i
		}
		den = max(den, math.Abs(float64(want[i])))
	}
	if den == 0 {
		return num, at
	}
	return num / den, at
}

// Tolerances against the PyTorch FP32 oracle (tools/dspark_ref.py on the same float32 weights):
// relative error max|x − y| / max|y| per record. The oracle's own float32-vs-float64 noise is
// ≈5e-7 (goldens.json summary.checks.float64_vs_float32); these leave two orders of margin.
const (
	TolLogits = 1e-4 // base and Markov-adjusted logits, final-normed hidden rows
	TolKV     = 1e-5 // context K/V (two matrix products and one norm from the features)
	TolConf   = 1e-5 // absolute, on the σ outputs of the confidence head
)

// Compare checks a drafter whose state st holds case n's context against the goldens of a
// variant: the context K/V of every layer (TolKV; a record of fewer than n rows holds the last
// rows; with a recorded <variant>.inv_freq, TolKV grows by the rotation-angle difference the
// inverse frequencies allow, 2·(n+B)·max|Δinv_freq|), then a greedy Draft from the recorded anchor
// (final-normed rows, base logits and adjusted logits within TolLogits, identical tokens,
// confidences within TolConf), then a forced chain (choose returns the recorded tokens and
// scribbles on its copy of the logits; Logits must be the unmodified rows). Draft must leave
// Len() at n. d.Trace is used and reset.
func Compare(t *testing.T, g *Goldens, d *draft.Drafter, st *draft.State, variant string, n int) {
	t.Helper()
	ctx := context.Background()
	key := func(what string) string { return fmt.Sprintf("%s.%s.%d", variant, what, n) }
	tolKV := TolKV
	if want, ok := g.F32[variant+".inv_freq"]; ok {
		// Both sides round the angle p·inv_freq to float32 alike; an inverse frequency that differs
		// (pow rounded differently) turns a row by at most p·Δ more, a relative change ≤ √2·p·Δ.
		got := draft.NewRope(&d.Cfg).InvFreq
		if len(got) != len(want) {
			t.Fatalf("%s.inv_freq: %d values, the drafter has %d", variant, len(want), len(got))
		}
		var df float64
		for i := range want {
			df = max(df, math.Abs(float64(got[i])-float64(want[i])))
		}
		tolKV += 2 * float64(n+d.Cfg.BlockSize) * df
	}
	kvRow := d.Cfg.KVHeads * d.Cfg.HeadDim
	for l := 0; l < d.Cfg.Layers; l++ {
		k, v, err := st.Context(l)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range []struct {
			what string
			got  []float32
		}{{"ctx_k", k}, {"ctx_v", v}} {
			name := fmt.Sprintf("%s.%d", key(r.what), l)
			want := g.Floats(t, name)
			rows := len(want) / kvRow
			if rows < 1 || rows > n || rows*kvRow != len(want) || len(r.got) != n*kvRow {
				t.Fatalf("%s: %d values for %d rows of %d (the state holds %d values)", name, len(want), n, kvRow, len(r.got))
			}
			e, at := RelErr(r.got[(n-rows)*kvRow:], want)
			t.Logf("%s (last %d rows): relative error %.3g", name, rows, e)
			if e > tolKV {
				t.Errorf("%s: relative error %.3g at %d (tolerance %.3g)", name, e, at, tolKV)
			}
		}
	}
	anchor := g.Ints(t, fmt.Sprintf("anchor.%d", n))[0]
	var hn, base []float32
	d.Trace = func(kind string, rows int, data []float32) {
		switch kind {
		case "hidden":
			hn = slices.Clone(data)
		case "base":
			base = slices.Clone(data)
		}
	}
	defer func() { d.Trace = nil }()
	p := draft.Proposal{KeepLogits: true}
	if err := d.Draft(ctx, st, anchor, nil, &p); err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct {
		name string
		got  []float32
	}{{key("hn"), hn}, {key("base"), base}, {key("greedy_logits"), p.Logits}} {
		e, at := RelErr(r.got, g.Floats(t, r.name))
		t.Logf("%s: relative error %.3g", r.name, e)
		if e > TolLogits {
			t.Errorf("%s: relative error %.3g at %d (tolerance %g)", r.name, e, at, TolLogits)
		}
	}
	if want := g.Ints(t, key("greedy")); !slices.Equal(p.Tokens, want) {
		t.Errorf("%s: greedy chain %v, want %v", key("greedy"), p.Tokens, want)
	}
	checkConf(t, key("greedy_conf"), p.Confidence, g.Floats(t, key("greedy_conf")))

	forced := g.Ints(t, fmt.Sprintf("forced.%d", n))
	var seen []int
	choose := func(k int, logits []float32) int32 {
		seen = append(seen, k)
		logits[0] = float32(math.Inf(1))
		return forced[k]
	}
	if err := d.Draft(ctx, st, anchor, choose, &p); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p.Tokens, forced) || len(seen) != d.Cfg.BlockSize {
		t.Errorf("forced chain: tokens %v (want %v), choose called for slots %v", p.Tokens, forced, seen)
	}
	if e, at := RelErr(p.Logits, g.Floats(t, key("forced_logits"))); e > TolLogits {
		t.Errorf("%s: relative error %.3g at %d (tolerance %g)", key("forced_logits"), e, at, TolLogits)
	}
	checkConf(t, key("forced_conf"), p.Confidence, g.Floats(t, key("forced_conf")))
	if st.Len() != n {
		t.Errorf("Draft changed Len() to %d, want %d", st.Len(), n)
	}
}

func checkConf(t *testing.T, name string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d values, want %d", name, len(got), len(want))
		return
	}
	for i := range want {
		if d := math.Abs(float64(got[i] - want[i])); !(d <= TolConf) {
			t.Errorf("%s[%d] = %v, want %v (tolerance %g)", name, i, got[i], want[i], TolConf)
		}
	}
}
