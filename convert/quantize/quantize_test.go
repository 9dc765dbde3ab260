package quantize

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"lithos/convert"
	"lithos/formats"
	"lithos/formats/fp8"
	"lithos/formats/nvfp4"
	"lithos/formats/safetensors"
)

// specialFill plants the cases the quantizer must get right: an all-zero
// block, a row of tiny values whose block scales round to E4M3 zero, an
// outlier, negative zeros, and an all-zero tensor.
func specialFill(name string, shape []int64, w []float32) {
	switch name {
	case "layers.0.mlp.up_proj.weight":
		k := int(shape[1])
		for i := 16; i < 32; i++ { // row 0, block 1: all zero
			w[i] = 0
		}
		for i := 0; i < k; i++ { // row 1: tiny values next to an outlier
			w[k+i] = float32(1e-9 * float64(i%7-3))
		}
		w[2*k+5] = 3.5 // row 2: an outlier dominating amax
		w[3*k] = float32(math.Copysign(0, -1))
	case "layers.1.self_attn.v_proj.weight":
		clear(w) // all-zero tensor: amax taken as 1
	}
}

func runTiny(t *testing.T, h head, opt Options) (src, out string, conv *Conversion) {
	t.Helper()
	root := t.TempDir()
	src = writeHead(t, filepath.Join(root, "src"), h)
	out = filepath.Join(root, "out")
	conv, err := Run(context.Background(), src, out, opt)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return src, out, conv
}

func TestQuantizeTinyHead(t *testing.T) {
	h := head{cfg: tinyConfig(), seed: 1, fill: specialFill}
	src, out, conv := runTiny(t, h, quantOpts())

	in := readModel(t, src)
	got := readModel(t, out)
	cfg, err := convert.ParseConfig(mustRead(t, filepath.Join(src, "config.json")))
	if err != nil {
		t.Fatal(err)
	}
	inv, err := convert.Inventory(cfg)
	if err != nil {
		t.Fatal(err)
	}

	// Every expected output tensor, nothing else.
	var want []string
	nLinear := 0
	for _, lt := range inv {
		if lt.Kind == convert.KindLinear {
			m := lt.Module()
			want = append(want, m+".weight", m+".weight_scale", m+".weight_scale_2")
			nLinear++
		} else {
			want = append(want, lt.Name)
		}
	}
	slices.Sort(want)
	var have []string
	for n := range got {
		have = append(have, n)
	}
	slices.Sort(have)
	if !slices.Equal(have, want) {
		t.Fatalf("output tensors:\n got %v\nwant %v", have, want)
	}
	if nLinear != 2*7+2 {
		t.Fatalf("%d linears in the tiny head, want 16 (2 layers × 7, fc, markov_w2)", nLinear)
	}
	if len(conv.Quantized) != nLinear || len(conv.Kept) != len(inv)-nLinear {
		t.Fatalf("conversion.json lists %d quantized and %d kept, want %d and %d", len(conv.Quantized), len(conv.Kept), nLinear, len(inv)-nLinear)
	}

	for _, lt := range inv {
		if lt.Kind != convert.KindLinear {
			if !bytes.Equal(got[lt.Name].data, in[lt.Name].data) || got[lt.Name].dtype != in[lt.Name].dtype {
				t.Errorf("%s: kept tensor changed", lt.Name)
			}
			continue
		}
		checkQuantized(t, lt.Name, floats(t, in[lt.Name]), got, nvfp4.DivideExact)
	}

	// markov_w1 and the confidence head are kept BF16 and excluded by name.
	for _, n := range []string{"markov_head.markov_w1.weight", "confidence_head.proj.weight", "confidence_head.proj.bias", "norm.weight"} {
		if got[n].dtype != safetensors.BF16 {
			t.Errorf("%s: dtype %s, want BF16 (kept)", n, got[n].dtype)
		}
	}

	// The all-zero tensor: block scales 1.0, zero codes, zero error.
	z := got["layers.1.self_attn.v_proj.weight_scale"]
	for i, c := range z.data {
		if c != fp8.E4M3FromFloat32(1) {
			t.Fatalf("all-zero tensor: block scale %d is %#x, want E4M3(1.0)", i, c)
		}
	}
	if !allZero(got["layers.1.self_attn.v_proj.weight"].data) {
		t.Fatal("all-zero tensor: nonzero codes")
	}
	for _, q := range conv.Quantized {
		switch q.Name {
		case "layers.1.self_attn.v_proj.weight":
			if q.RelRMSError != 0 || q.MaxAbsError != 0 || q.SNRdB != nil || q.WeightScale2 != float32(1)/2688 {
				t.Errorf("all-zero tensor stats %+v: want zero errors, null SNR, weight_scale_2 1/2688", q)
			}
		case "layers.0.mlp.up_proj.weight":
			// Row 1 (tiny values) flushes all its blocks: K/16 = 64/16.
			if q.FlushedBlocks != q.Shape[1]/16 {
				t.Errorf("up_proj flushed_blocks = %d, want %d (the tiny row)", q.FlushedBlocks, q.Shape[1]/16)
			}
			if q.Amax != 3.5 {
				t.Errorf("up_proj amax = %g, want the planted outlier 3.5", q.Amax)
			}
		default:
			if q.SNRdB == nil || *q.SNRdB < 18 || *q.SNRdB > 23 || q.FlushedBlocks != 0 {
				t.Errorf("%s: SNR %v dB, flushed %d: want 18–23 dB (NVFP4 on Gaussian weights: about 20.4), none flushed", q.Name, q.SNRdB, q.FlushedBlocks)
			}
		}
	}

	checkStatsIndependently(t, conv, in, got)
	checkConfigs(t, src, out, inv)
	checkHashes(t, src, out, conv)
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

func mustRead(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkQuantized verifies one quantized linear against its source w: the
// layout, the convention check, the tensor scale, bit-equality with
// nvfp4.Quantize of the whole tensor (so row chunking changes nothing), and
// the per-element error bound of the E2M1 grid.
func checkQuantized(t *testing.T, name string, w []float32, got map[string]stTensor, div nvfp4.Division) {
	t.Helper()
	m := strings.TrimSuffix(name, ".weight")
	cw, cs, cs2 := got[m+".weight"], got[m+".weight_scale"], got[m+".weight_scale_2"]
	n, k := cw.shape[0], 2*cw.shape[1]
	if cw.dtype != safetensors.U8 || cs.dtype != safetensors.F8E4M3 || cs2.dtype != safetensors.F32 ||
		!slices.Equal(cs.shape, []int64{n, k / 16}) || len(cs2.shape) != 0 || int64(len(w)) != n*k {
		t.Fatalf("%s: layout weight %s%v scale %s%v scale_2 %s%v", m, cw.dtype, cw.shape, cs.dtype, cs.shape, cs2.dtype, cs2.shape)
	}
	s2 := math.Float32frombits(binary.LittleEndian.Uint32(cs2.data))
	if _, err := nvfp4.CheckConvention(cs.data, s2); err != nil {
		t.Errorf("%s: convention check: %v", m, err)
	}
	ref, err := nvfp4.Quantize(w, int(n), int(k), div)
	if err != nil {
		t.Fatalf("%s: reference quantize: %v", m, err)
	}
	if ref.TensorScale != s2 || !bytes.Equal(ref.Codes, cw.data) || !bytes.Equal(ref.Scales, cs.data) {
		t.Errorf("%s: differs from nvfp4.Quantize of the whole tensor", m)
	}
	var amax float32
	for _, v := range w {
		amax = max(amax, float32(math.Abs(float64(v))))
	}
	if want := nvfp4.TensorScale(amax, div); s2 != want {
		t.Errorf("%s: weight_scale_2 %g, want %g", m, s2, want)
	}
	// Error bound: with den = e4m3(scale)·s2 and x = w/den, the code is the
	// nearest E2M1 value (half-gaps 0.25, 0.5, 1 below 2, 4, 6; saturated
	// above 6), so |d − w| ≤ den·err_x plus float32 rounding.
	for i, v := range w {
		b := i / 16
		den := e4m3Exact(cs.data[b]) * float64(s2)
		c := cw.data[i/2]
		if i%2 == 1 {
			c >>= 4
		}
		d := e2m1Table[c&0xF] * den
		if den == 0 {
			if math.Abs(float64(v)) > 6*float64(s2)*math.Ldexp(1, -10)*1.0001 {
				t.Fatalf("%s[%d]: flushed block holds %g, above 6·s2·2^-10", m, i, v)
			}
			continue
		}
		x := math.Abs(float64(v)) / den
		var bound float64
		switch {
		case x <= 2:
			bound = 0.25
		case x <= 4:
			bound = 0.5
		case x <= 6:
			bound = 1
		default:
			bound = x - 6
		}
		if e := math.Abs(d - float64(v)); e > bound*den*(1+1e-6)+1e-6*math.Abs(float64(v)) {
			t.Fatalf("%s[%d]: w=%g dequant %g: error %g over the bound %g (den %g)", m, i, v, d, e, bound*den, den)
		}
	}
}

// checkStatsIndependently recomputes conversion.json's error statistics from
// the files: textbook BF16 decode, E2M1 table, E4M3 by its definition,
// products and sums in float64. Our stats use the float32 dequantization, so
// they agree to float32 rounding, not bit for bit.
func checkStatsIndependently(t *testing.T, conv *Conversion, in, got map[string]stTensor) {
	t.Helper()
	for _, q := range conv.Quantized {
		m := strings.TrimSuffix(q.Name, ".weight")
		w := floats(t, in[q.Name])
		cw, cs := got[m+".weight"], got[m+".weight_scale"]
		s2 := float64(math.Float32frombits(binary.LittleEndian.Uint32(got[m+".weight_scale_2"].data)))
		var sw, se, mx float64
		for i, v := range w {
			c := cw.data[i/2]
			if i%2 == 1 {
				c >>= 4
			}
			d := e2m1Table[c&0xF] * e4m3Exact(cs.data[i/16]) * s2
			e := d - float64(v)
			sw += float64(v) * float64(v)
			se += e * e
			mx = max(mx, math.Abs(e))
		}
		if float64(q.WeightScale2) != s2 {
			t.Errorf("%s: conversion.json weight_scale_2 %g, file %g", q.Name, q.WeightScale2, s2)
		}
		if !slices.Equal(q.Shape, in[q.Name].shape) || q.SourceDType != string(in[q.Name].dtype) {
			t.Errorf("%s: conversion.json shape %v dtype %s, source %v %s", q.Name, q.Shape, q.SourceDType, in[q.Name].shape, in[q.Name].dtype)
		}
		if sw == 0 {
			continue // the all-zero tensor, checked by the caller
		}
		rel := math.Sqrt(se / sw)
		snr := 10 * math.Log10(sw/se)
		if !near(q.RelRMSError, rel, 1e-5) || !near(q.MaxAbsError, mx, 1e-5) || q.SNRdB == nil || math.Abs(*q.SNRdB-snr) > 1e-4 {
			t.Errorf("%s: stats rel_rms %g max_abs %g snr %v; independent float64: %g %g %g", q.Name, q.RelRMSError, q.MaxAbsError, q.SNRdB, rel, mx, snr)
		}
		if rel < 0.01 || rel > 0.5 {
			t.Errorf("%s: relative RMS error %g is not plausible for NVFP4", q.Name, rel)
		}
	}
}

func near(a, b, rel float64) bool { return math.Abs(a-b) <= rel*math.Max(math.Abs(a), math.Abs(b)) }

// checkConfigs parses the written configs with both of lithos's readers and
// checks that they describe exactly the tensors.
func checkConfigs(t *testing.T, src, out string, inv []convert.LogicalTensor) {
	t.Helper()
	srcCfg := mustRead(t, filepath.Join(src, "config.json"))
	outCfg := mustRead(t, filepath.Join(out, "config.json"))
	hfq := mustRead(t, filepath.Join(out, "hf_quant_config.json"))

	// Every source key is preserved with its value.
	var a, b map[string]json.RawMessage
	if err := json.Unmarshal(srcCfg, &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(outCfg, &b); err != nil {
		t.Fatalf("output config.json: %v", err)
	}
	for k, v := range a {
		if !bytes.Equal(bytes.TrimSpace(v), bytes.TrimSpace(b[k])) {
			t.Errorf("config.json key %q changed: %s -> %s", k, v, b[k])
		}
	}
	if len(b) != len(a)+1 {
		t.Errorf("config.json has %d keys, want the source's %d + quantization_config", len(b), len(a))
	}
	var qc struct {
		QuantMethod  string   `json:"quant_method"`
		QuantAlgo    string   `json:"quant_algo"`
		Ignore       []string `json:"ignore"`
		ConfigGroups map[string]struct {
			Weights          map[string]any `json:"weights"`
			InputActivations map[string]any `json:"input_activations"`
			Targets          []string       `json:"targets"`
		} `json:"config_groups"`
		Producer struct{ Name string } `json:"producer"`
	}
	if err := json.Unmarshal(b["quantization_config"], &qc); err != nil {
		t.Fatal(err)
	}
	g := qc.ConfigGroups["group_0"]
	if qc.QuantMethod != "modelopt" || qc.QuantAlgo != "W4A16_NVFP4" || qc.Producer.Name != "modelopt" || len(qc.ConfigGroups) != 1 ||
		g.InputActivations != nil || g.Weights["num_bits"] != 4.0 || g.Weights["type"] != "float" || g.Weights["group_size"] != 16.0 ||
		!slices.Equal(g.Targets, []string{"Linear"}) || !slices.Equal(qc.Ignore, []string{"confidence_head.proj", "markov_head.markov_w1"}) {
		t.Errorf("quantization_config = %s", b["quantization_config"])
	}

	// lithos/convert's reader (the audit).
	c1, err := convert.ParseConfig(outCfg)
	if err != nil {
		t.Fatalf("convert.ParseConfig(output config.json): %v", err)
	}
	c2, err := convert.ParseHFQuantConfig(hfq)
	if err != nil {
		t.Fatalf("convert.ParseHFQuantConfig: %v", err)
	}
	// lithos/formats's reader (detection), with the real tensors.
	s1, err := formats.ParseConfig(outCfg)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := formats.ParseHFQuantConfig(hfq)
	if err != nil {
		t.Fatal(err)
	}
	m, err := safetensors.OpenModel(context.Background(), out)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	groups := map[string]map[string]formats.Tensor{}
	for _, n := range m.Names() {
		_, tt, _ := m.Lookup(n)
		mod, suf := n, ""
		for _, s := range []string{".weight_scale_2", ".weight_scale", ".weight", ".bias"} {
			if strings.HasSuffix(n, s) {
				mod, suf = strings.TrimSuffix(n, s), s[1:]
				break
			}
		}
		if groups[mod] == nil {
			groups[mod] = map[string]formats.Tensor{}
		}
		groups[mod][suf] = formats.Tensor{DType: string(tt.DType), Shape: tt.Shape}
	}
	for _, lt := range inv {
		mod := lt.Module()
		wantQ := lt.Kind == convert.KindLinear
		// Norms and biases are not Linear modules (targets ["Linear"]), so
		// ModelOpt lists them nowhere; the Linear and Embedding modules kept
		// in BF16 must be excluded by name.
		for _, q := range []*convert.QuantConfig{c1.Quantization, c2} {
			if lt.Kind == convert.KindNorm || lt.Kind == convert.KindBias {
				continue
			}
			if algo := q.ModuleAlgo(mod); (algo == "W4A16_NVFP4") != wantQ || (!wantQ && algo != "") {
				t.Errorf("%s (%s): %s declares %q", mod, lt.Kind, q.Source, algo)
			}
		}
		if lt.Kind == convert.KindBias {
			continue
		}
		for _, s := range []formats.Scheme{s1, s2} {
			ts := groups[mod]
			if lt.Kind == convert.KindNorm || lt.Kind == convert.KindHead {
				ts = map[string]formats.Tensor{"weight": ts["weight"]}
			}
			l, err := formats.Detect(formats.Group{Name: mod, Tensors: ts}, s.Module(mod))
			if err != nil {
				t.Errorf("detect %s: %v", mod, err)
				continue
			}
			if wantQ != (l.Format == formats.NVFP4) || (wantQ && (l.N != lt.Shape[0] || l.K != lt.Shape[1])) {
				t.Errorf("detect %s: %s [%d, %d], want nvfp4=%v %v", mod, l.Format, l.N, l.K, wantQ, lt.Shape)
			}
		}
	}
}

func checkHashes(t *testing.T, src, out string, conv *Conversion) {
	t.Helper()
	sum := func(p string) (string, int64) {
		b := mustRead(t, p)
		h := sha256.Sum256(b)
		return hex.EncodeToString(h[:]), int64(len(b))
	}
	var inNames []string
	for _, f := range conv.Inputs {
		inNames = append(inNames, f.Path)
		s, n := sum(filepath.Join(src, f.Path))
		if s != f.SHA256 || n != f.Bytes {
			t.Errorf("input %s: conversion.json %s/%d, file %s/%d", f.Path, f.SHA256, f.Bytes, s, n)
		}
	}
	if !slices.Equal(inNames, []string{"config.json", "model.safetensors"}) {
		t.Errorf("inputs %v", inNames)
	}
	var outNames []string
	for _, f := range conv.Outputs {
		outNames = append(outNames, f.Path)
		s, n := sum(filepath.Join(out, f.Path))
		if s != f.SHA256 || n != f.Bytes {
			t.Errorf("output %s: conversion.json %s/%d, file %s/%d", f.Path, f.SHA256, f.Bytes, s, n)
		}
	}
	if !slices.Equal(outNames, []string{"config.json", "hf_quant_config.json", "model.safetensors"}) {
		t.Errorf("outputs %v", outNames)
	}
	// conversion.json on disk is what Run returned.
	var disk Conversion
	if err := json.Unmarshal(mustRead(t, filepath.Join(out, "conversion.json")), &disk); err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(disk)
	b, _ := json.Marshal(conv)
	if !bytes.Equal(a, b) {
		t.Error("conversion.json on disk differs from Run's result")
	}
	if disk.Source.Repo != nil || disk.Source.Revision != nil {
		t.Errorf("plain directory: source %v %v, want null", disk.Source.Repo, disk.Source.Revision)
	}
	ents, _ := os.ReadDir(out)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"config.json", "conversion.json", "hf_quant_config.json", "model.safetensors"}) {
		t.Errorf("output directory holds %v", names)
	}
}

// TestDeterministic: one worker with tiny chunks and many workers with big
// chunks write the same bytes, twice.
func TestDeterministic(t *testing.T) {
	h := head{cfg: tinyConfig(), seed: 2, fill: specialFill}
	_, out1, _ := runTiny(t, h, Options{ToolVersion: "test", Workers: 1, ChunkBytes: 1})
	_, out2, _ := runTiny(t, h, Options{ToolVersion: "test", Workers: 8, ChunkBytes: 1 << 20})
	for _, f := range []string{"model.safetensors", "config.json", "hf_quant_config.json", "conversion.json"} {
		a, b := mustRead(t, filepath.Join(out1, f)), mustRead(t, filepath.Join(out2, f))
		if f == "conversion.json" {
			// The source directories differ (temp dirs) but are not recorded.
			if !bytes.Equal(a, b) {
				t.Errorf("%s differs between runs", f)
			}
			continue
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs between runs", f)
		}
	}
}

// TestSourceKinds: the same values stored as F32, F16-exact or sharded BF16
// quantize to the same bytes as the BF16 single file.
func TestSourceKinds(t *testing.T) {
	base := head{cfg: tinyConfig(), seed: 3}
	_, outBF, _ := runTiny(t, base, quantOpts())
	ref := readModel(t, outBF)

	sharded := base
	sharded.shards = 3
	src, out, conv := runTiny(t, sharded, quantOpts())
	if !bytes.Equal(mustRead(t, filepath.Join(out, "model.safetensors")), mustRead(t, filepath.Join(outBF, "model.safetensors"))) {
		t.Error("sharded source: model.safetensors differs from the single-file source's")
	}
	var inNames []string
	for _, f := range conv.Inputs {
		inNames = append(inNames, f.Path)
	}
	want := []string{"config.json", "model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors", "model.safetensors.index.json"}
	if !slices.Equal(inNames, want) {
		t.Errorf("sharded inputs %v, want %v", inNames, want)
	}
	checkHashes2(t, src, conv)

	f32 := base
	f32.dtype = safetensors.F32
	_, out32, conv32 := runTiny(t, f32, quantOpts())
	got := readModel(t, out32)
	for _, q := range conv32.Quantized {
		m := strings.TrimSuffix(q.Name, ".weight")
		for _, s := range []string{".weight", ".weight_scale", ".weight_scale_2"} {
			if !bytes.Equal(got[m+s].data, ref[m+s].data) {
				t.Errorf("F32 source: %s%s differs from the BF16 source's", m, s)
			}
		}
		if q.SourceDType != "F32" {
			t.Errorf("%s: source_dtype %s", q.Name, q.SourceDType)
		}
	}
	if got["norm.weight"].dtype != safetensors.F32 {
		t.Errorf("F32 norm kept as %s", got["norm.weight"].dtype)
	}

	f16 := base
	f16.dtype = safetensors.F16
	src16, out16, conv16 := runTiny(t, f16, quantOpts())
	in16, got16 := readModel(t, src16), readModel(t, out16)
	for _, q := range conv16.Quantized {
		checkQuantized(t, q.Name, floats(t, in16[q.Name]), got16, nvfp4.DivideExact)
	}
	checkStatsIndependently(t, conv16, in16, got16)
}

func checkHashes2(t *testing.T, src string, conv *Conversion) {
	t.Helper()
	for _, f := range conv.Inputs {
		b := mustRead(t, filepath.Join(src, f.Path))
		h := sha256.Sum256(b)
		if hex.EncodeToString(h[:]) != f.SHA256 || int64(len(b)) != f.Bytes {
			t.Errorf("input %s: hash or size wrong", f.Path)
		}
	}
}

// TestReciprocalDivision: Options.Division reaches the tensor scale and
// conversion.json.
func TestReciprocalDivision(t *testing.T) {
	h := head{cfg: tinyConfig(), seed: 4}
	opt := quantOpts()
	opt.Division = nvfp4.DivideByReciprocal
	src, out, conv := runTiny(t, h, opt)
	if conv.Method.TensorScale != "reciprocal" {
		t.Errorf("tensor_scale_division %q", conv.Method.TensorScale)
	}
	in, got := readModel(t, src), readModel(t, out)
	differs := 0
	for _, q := range conv.Quantized {
		w := floats(t, in[q.Name])
		checkQuantized(t, q.Name, w, got, nvfp4.DivideByReciprocal)
		if nvfp4.TensorScale(q.Amax, nvfp4.DivideExact) != q.WeightScale2 {
			differs++
		}
	}
	t.Logf("%d of %d tensor scales differ from the exact division", differs, len(conv.Quantized))
}

func TestSourceFromPath(t *testing.T) {
	commit := strings.Repeat("ab", 20)
	for _, c := range []struct {
		path, repo, rev string
		ok              bool
	}{
		{"/c/hub/models--RadixArk--Qwen3.8-27B-DSpark/snapshots/" + commit, "RadixArk/Qwen3.8-27B-DSpark", commit, true},
		{"/c/hub/models--RadixArk--Qwen3.8-27B-DSpark/snapshots/" + commit + "/sub", "RadixArk/Qwen3.8-27B-DSpark", commit, true},
		{"rel/models--a--b/snapshots/" + commit + "/", "a/b", commit, true},
		{"/c/hub/models--RadixArk--X/snapshots/main", "", "", false},
		{"/c/hub/datasets--a--b/snapshots/" + commit, "", "", false},
		{"/c/hub/models--nodash/snapshots/" + commit, "", "", false},
		{"/plain/dir", "", "", false},
		{"", "", "", false},
	} {
		repo, rev, ok := SourceFromPath(c.path)
		if repo != c.repo || rev != c.rev || ok != c.ok {
			t.Errorf("SourceFromPath(%q) = %q %q %v, want %q %q %v", c.path, repo, rev, ok, c.repo, c.rev, c.ok)
		}
	}
}

// TestHFCacheSource: a snapshot directory records its repo and commit; the
// options override them.
func TestHFCacheSource(t *testing.T) {
	commit := strings.Repeat("0123456789", 4)
	root := t.TempDir()
	src := writeHead(t, filepath.Join(root, "hub", "models--org--head", "snapshots", commit), head{cfg: tinyConfig(), seed: 5})
	conv, err := Run(context.Background(), src, filepath.Join(root, "a"), quantOpts())
	if err != nil {
		t.Fatal(err)
	}
	if conv.Source.Repo == nil || *conv.Source.Repo != "org/head" || conv.Source.Revision == nil || *conv.Source.Revision != commit {
		t.Errorf("source %v %v", conv.Source.Repo, conv.Source.Revision)
	}
	opt := quantOpts()
	opt.SourceRevision = "v1.0"
	conv, err = Run(context.Background(), src, filepath.Join(root, "b"), opt)
	if err != nil {
		t.Fatal(err)
	}
	if *conv.Source.Repo != "org/head" || *conv.Source.Revision != "v1.0" {
		t.Errorf("override: source %v %v", *conv.Source.Repo, *conv.Source.Revision)
	}
	raw := mustRead(t, filepath.Join(root, "b", "conversion.json"))
	if !bytes.Contains(raw, []byte(`"revision": "v1.0"`)) {
		t.Errorf("conversion.json does not record the revision:\n%s", raw[:300])
	}
}

// TestProgress: the callback sees the total once and every tensor's bytes.
func TestProgress(t *testing.T) {
	var total, sum int64
	calls := 0
	opt := quantOpts()
	opt.Workers = 1
	opt.Progress = func(tot, d int64) {
		calls++
		if tot > 0 {
			total = tot
		}
		sum += d
	}
	_, _, conv := runTiny(t, head{cfg: tinyConfig(), seed: 6}, opt)
	if total != conv.SourceTensorBytes || sum != total || calls != 1+len(conv.Quantized)+len(conv.Kept) {
		t.Errorf("progress total %d sum %d calls %d; source bytes %d", total, sum, calls, conv.SourceTensorBytes)
	}
}

// TestGoldenShapedConfig runs the exact config tools/dspark_quant_golden.py
// writes (DFlash-style nested dflash_config, DSpark fields at the top
// level), so the Go side of the golden protocol is exercised before the
// fixtures exist.
func TestGoldenShapedConfig(t *testing.T) {
	c := tinyConfig()
	for k, v := range map[string]any{"hidden_size": 128, "intermediate_size": 384, "head_dim": 32, "vocab_size": 1000,
		"markov_rank": 64, "target_hidden_size": 128, "max_position_embeddings": 4096, "hidden_act": "silu"} {
		c[k] = v
	}
	delete(c, "target_layer_ids")
	delete(c, "mask_token_id")
	c["dflash_config"] = map[string]any{"mask_token_id": 999, "target_layer_ids": []int{1, 3, 5}}
	src, out, conv := runTiny(t, head{cfg: c, seed: 9}, Options{ToolVersion: goldenVersion})
	if len(conv.Quantized) != 16 || len(conv.Kept) != 13 {
		t.Fatalf("%d quantized, %d kept", len(conv.Quantized), len(conv.Kept))
	}
	in, got := readModel(t, src), readModel(t, out)
	var bytesOut int64
	for _, x := range got {
		bytesOut += int64(len(x.data))
	}
	if fc := in["fc.weight"]; !slices.Equal(fc.shape, []int64{128, 384}) {
		t.Errorf("fc shape %v, want [128, 384] (3 taps × 128)", fc.shape)
	}
	if bytesOut != conv.OutputTensorBytes || conv.SourceTensorBytes != 2*571_457 {
		t.Errorf("tensor bytes: output %d (conversion.json %d), source %d", bytesOut, conv.OutputTensorBytes, conv.SourceTensorBytes)
	}
}
