package model

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"lithos/formats/bf16"
	"lithos/formats/fp8"
	"lithos/formats/nvfp4"
	"lithos/formats/safetensors"
)

// ckptOptions shape a synthetic checkpoint written like tools/qwen35_goldens.py writes its
// goldens: ModelOpt mixed layout (MLP + lm_head NVFP4, GDN/attention projections FP8, the
// rest BF16), multimodal names.
type ckptOptions struct {
	textOnly    bool   // "model.*" names and a text-only config (quantization in config.json)
	aLogF32     bool   // A_log stored F32
	drop        string // checkpoint tensor to leave out
	extra       string // extra tensor name (BF16 [4])
	reshape     string // checkpoint tensor whose first dimension is doubled
	mutateJSON  func(map[string]any)
	scaleFactor map[string]float32 // multiply a stored weight_scale_2 (convention errors)
}

type ckptTensor struct {
	spec safetensors.TensorSpec
	data []byte
}

func f32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// writeCheckpoint writes raw's weights quantized into dir and returns the exact dequantized
// values by checkpoint name.
func writeCheckpoint(t testing.TB, dir string, raw *rawModel, o ckptOptions) map[string][]float32 {
	t.Helper()
	c := raw.cfg
	prefix := "model.language_model."
	if o.textOnly {
		prefix = "model."
	}
	deq := map[string][]float32{}
	var tensors []ckptTensor
	quantized := map[string]any{}
	add := func(name string, dt safetensors.DType, shape []int64, data []byte) {
		if name == o.drop {
			return
		}
		if name == o.reshape {
			shape = append([]int64{2 * shape[0]}, shape[1:]...)
			data = append(data, data...)
		}
		tensors = append(tensors, ckptTensor{safetensors.TensorSpec{Name: name, DType: dt, Shape: shape}, data})
	}
	plain := func(name string, w []float32, shape []int64, f32 bool) {
		if f32 {
			deq[name] = w
			add(name, safetensors.F32, shape, f32Bytes(w))
			return
		}
		b := make([]byte, 2*len(w))
		if err := bf16.Encode(b, w); err != nil {
			t.Fatal(err)
		}
		d := make([]float32, len(w))
		_ = bf16.Decode(d, b)
		deq[name] = d
		add(name, safetensors.BF16, shape, b)
	}
	matrix := func(module string, w []float32, n, k int) {
		name := module + ".weight"
		switch {
		case strings.Contains(module, "mlp.") || module == "lm_head":
			q, err := nvfp4.Quantize(w, n, k, nvfp4.DivideExact)
			if err != nil {
				t.Fatal(err)
			}
			d := make([]float32, n*k)
			if err := nvfp4.DecodeRows(d, q.Codes, q.Scales, k, q.TensorScale); err != nil {
				t.Fatal(err)
			}
			deq[name] = d
			ts := q.TensorScale
			if f, ok := o.scaleFactor[module]; ok {
				ts *= f
			}
			add(name, safetensors.U8, []int64{int64(n), int64(k / 2)}, q.Codes)
			add(module+".weight_scale", safetensors.F8E4M3, []int64{int64(n), int64(k / 16)}, q.Scales)
			add(module+".weight_scale_2", safetensors.F32, []int64{}, f32Bytes([]float32{ts}))
			add(module+".input_scale", safetensors.F32, []int64{}, f32Bytes([]float32{8.0 / 2688}))
			quantized[module] = map[string]any{"quant_algo": "NVFP4", "group_size": 16}
		case fp8Module(module):
			var amax float32
			for _, v := range w {
				amax = max(amax, float32(math.Abs(float64(v))))
			}
			scale := fp8.WeightScale(amax)
			codes := make([]byte, len(w))
			if err := fp8.QuantizeWeights(codes, w, scale); err != nil {
				t.Fatal(err)
			}
			d := make([]float32, len(w))
			if err := fp8.DecodeWeights(d, codes, scale); err != nil {
				t.Fatal(err)
			}
			deq[name] = d
			add(name, safetensors.F8E4M3, []int64{int64(n), int64(k)}, codes)
			add(module+".weight_scale", safetensors.F32, []int64{}, f32Bytes([]float32{scale}))
			add(module+".input_scale", safetensors.F32, []int64{}, f32Bytes([]float32{8.0 / 448}))
			quantized[module] = map[string]any{"quant_algo": "FP8"}
		default:
			plain(name, w, []int64{int64(n), int64(k)}, false)
		}
	}
	h := c.Hidden
	plain(prefix+"embed_tokens.weight", raw.embed, []int64{int64(c.Vocab), int64(h)}, false)
	plain(prefix+"norm.weight", raw.norm, []int64{int64(h)}, false)
	matrix("lm_head", raw.lmHead, c.Vocab, h)
	for i, l := range raw.layers {
		p := fmt.Sprintf("%slayers.%d.", prefix, i)
		plain(p+"input_layernorm.weight", l.inNorm, []int64{int64(h)}, false)
		plain(p+"post_attention_layernorm.weight", l.postNorm, []int64{int64(h)}, false)
		matrix(p+"mlp.gate_proj", l.gate, c.Intermediate, h)
		matrix(p+"mlp.up_proj", l.up, c.Intermediate, h)
		matrix(p+"mlp.down_proj", l.down, h, c.Intermediate)
		if l.kind == GDN {
			a := p + "linear_attn."
			vd := c.VHeads * c.VDim
			matrix(a+"in_proj_qkv", l.qkv, c.ConvDim(), h)
			matrix(a+"in_proj_z", l.z, vd, h)
			matrix(a+"in_proj_b", l.b, c.VHeads, h)
			matrix(a+"in_proj_a", l.a, c.VHeads, h)
			matrix(a+"out_proj", l.out, h, vd)
			plain(a+"conv1d.weight", l.conv, []int64{int64(c.ConvDim()), 1, int64(c.ConvKernel)}, false)
			plain(a+"A_log", l.aLog, []int64{int64(c.VHeads)}, o.aLogF32)
			plain(a+"dt_bias", l.dtBias, []int64{int64(c.VHeads)}, false)
			plain(a+"norm.weight", l.gNorm, []int64{int64(c.VDim)}, false)
		} else {
			a := p + "self_attn."
			qd, kvd := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
			matrix(a+"q_proj", l.q, 2*qd, h)
			matrix(a+"k_proj", l.k, kvd, h)
			matrix(a+"v_proj", l.v, kvd, h)
			matrix(a+"o_proj", l.o, h, qd)
			plain(a+"q_norm.weight", l.qNorm, []int64{int64(c.HeadDim)}, false)
			plain(a+"k_norm.weight", l.kNorm, []int64{int64(c.HeadDim)}, false)
		}
	}
	if !o.textOnly {
		plain("model.visual.merger.norm.weight", []float32{1, 1, 1, 1}, []int64{4}, false)
		plain("mtp.norm.weight", make([]float32, h), []int64{int64(h)}, false)
	}
	if o.extra != "" {
		plain(o.extra, []float32{1, 2, 3, 4}, []int64{4}, false)
	}
	sort.Slice(tensors, func(i, j int) bool { return tensors[i].spec.Name < tensors[j].spec.Name })
	var specs []safetensors.TensorSpec
	for _, tt := range tensors {
		specs = append(specs, tt.spec)
	}
	var buf bytes.Buffer
	w, err := safetensors.NewWriter(&buf, specs, map[string]string{"format": "pt"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tensors {
		if err := w.WriteTensor(tt.spec.Name, tt.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors"), buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}

	// config.json as transformers writes it (the keys the Python script's config carries).
	layerTypes := make([]string, len(c.Layers))
	for i, k := range c.Layers {
		layerTypes[i] = k.String()
	}
	text := map[string]any{
		"model_type": "qwen3_5_text", "vocab_size": c.Vocab, "hidden_size": h, "intermediate_size": c.Intermediate,
		"num_hidden_layers": len(c.Layers), "num_attention_heads": c.Heads, "num_key_value_heads": c.KVHeads,
		"head_dim": c.HeadDim, "hidden_act": "silu", "max_position_embeddings": 4096, "rms_norm_eps": c.RMSEps,
		"tie_word_embeddings": false, "attention_bias": false, "attention_dropout": 0.0,
		"linear_conv_kernel_dim": c.ConvKernel, "linear_key_head_dim": c.KDim, "linear_value_head_dim": c.VDim,
		"linear_num_key_heads": c.KHeads, "linear_num_value_heads": c.VHeads, "layer_types": layerTypes,
		"full_attention_interval": 4, "partial_rotary_factor": 0.25,
		"rope_parameters": map[string]any{"rope_type": "default", "rope_theta": c.RopeTheta,
			"partial_rotary_factor": float64(c.RotaryDim) / float64(c.HeadDim), "mrope_section": []int{2, 1, 1}, "mrope_interleaved": true},
		"pad_token_id": nil, "bos_token_id": nil, "eos_token_id": nil, "dtype": "float32",
	}
	exclude := []string{"model.visual*", "mtp*"}
	hfq := map[string]any{
		"producer":     map[string]any{"name": "modelopt", "version": "test"},
		"quantization": map[string]any{"quant_algo": "MIXED_PRECISION", "kv_cache_quant_algo": nil, "quantized_layers": quantized, "exclude_modules": exclude},
	}
	qc := map[string]any{"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION", "kv_cache_scheme": nil,
		"ignore": exclude, "quantized_layers": quantized, "producer": hfq["producer"]}
	var cfg map[string]any
	if o.textOnly {
		cfg = text
		cfg["architectures"] = []string{"Qwen3_5ForCausalLM"}
		cfg["quantization_config"] = qc
	} else {
		cfg = map[string]any{
			"architectures": []string{"Qwen3_5ForConditionalGeneration"}, "model_type": "qwen3_5",
			"text_config": text, "tie_word_embeddings": false, "image_token_id": c.Vocab - 4,
			"vision_config": map[string]any{"model_type": "qwen3_5_vision", "depth": 1, "hidden_size": 64, "intermediate_size": 128,
				"num_heads": 2, "out_hidden_size": h, "num_position_embeddings": 64},
			"quantization_config": qc, "transformers_version": "5.17.0",
		}
		writeJSON(t, filepath.Join(dir, "hf_quant_config.json"), hfq)
	}
	if o.mutateJSON != nil {
		o.mutateJSON(cfg)
	}
	writeJSON(t, filepath.Join(dir, "config.json"), cfg)
	return deq
}

// fp8Module reports whether the goldens' layout stores module in FP8: GDN in_proj_qkv,
// in_proj_z, out_proj and attention q/k/v/o projections.
func fp8Module(module string) bool {
	for _, s := range []string{"in_proj_qkv", "in_proj_z", "out_proj", "q_proj", "k_proj", "v_proj", "o_proj"} {
		if strings.HasSuffix(module, "."+s) {
			return true
		}
	}
	return false
}

func writeJSON(t testing.TB, path string, v any) {
	t.Helper()
	b, err := json.MarshalIndent(v, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// loadCheckpointTestConfig is testConfig with the NVFP4 constraint (K a multiple of 16) and
// the Qwen3.5 layer pattern.
func loadCheckpointTestConfig() Config {
	c := testConfig()
	c.Layers = []LayerKind{GDN, GDN, GDN, Attention}
	return c
}

func TestLoadCheckpoint(t *testing.T) {
	for _, o := range []ckptOptions{{}, {textOnly: true, aLogF32: true}} {
		t.Run(fmt.Sprintf("textOnly=%v", o.textOnly), func(t *testing.T) {
			raw := randomRaw(loadCheckpointTestConfig(), 31)
			dir := t.TempDir()
			want := writeCheckpoint(t, dir, raw, o)
			got := map[string][]float32{}
			m, err := LoadCheckpoint(context.Background(), dir, &LoadOptions{OnTensor: func(name string, v []float32) {
				got[name] = append([]float32(nil), v...)
			}})
			if err != nil {
				t.Fatal(err)
			}
			if m.Cfg.RotaryDim != raw.cfg.RotaryDim || m.Cfg.RopeTheta != raw.cfg.RopeTheta || m.Cfg.RMSEps != raw.cfg.RMSEps ||
				len(m.Cfg.Layers) != len(raw.cfg.Layers) || m.Cfg.ConvDim() != raw.cfg.ConvDim() {
				t.Fatalf("config read back as %+v, want %+v", m.Cfg, raw.cfg)
			}
			// Every tensor decoded exactly as the writer's own decode.
			n := 0
			for name, w := range want {
				if strings.HasPrefix(name, "model.visual.") || strings.HasPrefix(name, "mtp.") {
					continue
				}
				n++
				if e, _ := relErr32(got[name], w); e != 0 || len(got[name]) != len(w) {
					t.Fatalf("%s: loader's dequantization differs (relative %.3g, %d of %d values)", name, e, len(got[name]), len(w))
				}
			}
			if n != len(got) {
				t.Fatalf("loader reported %d tensors, checkpoint has %d", len(got), n)
			}
			// The loaded model against the float64 reference on the dequantized weights.
			prefix := "model.language_model."
			if o.textOnly {
				prefix = "model."
			}
			ref, err := rawFromTensors(m.Cfg, got, prefix)
			if err != nil {
				t.Fatal(err)
			}
			tokens := []int32{3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4}
			logits, err := m.Forward(context.Background(), newState(t, m, 32), tokens, true)
			if err != nil {
				t.Fatal(err)
			}
			if e, at := relErr(logits, flatten(ref.logits64(tokens, nil))); e > 1e-5 {
				t.Fatalf("relative logit error %.3g at %d", e, at)
			}
		})
	}
}

func TestLoadCheckpointErrors(t *testing.T) {
	lm := "model.language_model.layers.1."
	cases := []struct {
		name   string
		o      ckptOptions
		expect string
	}{
		{"missing tensor", ckptOptions{drop: lm + "linear_attn.dt_bias"}, lm + "linear_attn.dt_bias: missing"},
		{"missing scale", ckptOptions{drop: lm + "mlp.up_proj.weight_scale_2"}, lm + "mlp.up_proj"},
		{"wrong shape", ckptOptions{reshape: lm + "linear_attn.in_proj_z.weight"}, lm + "linear_attn.in_proj_z"},
		{"unexpected tensor", ckptOptions{extra: "model.language_model.layers.9.mlp.gate_proj.weight"}, "layers.9.mlp.gate_proj.weight"},
		{"divisor-convention scale", ckptOptions{scaleFactor: map[string]float32{lm + "mlp.down_proj": 1e7}}, lm + "mlp.down_proj"},
		{"yarn rope", ckptOptions{mutateJSON: func(c map[string]any) {
			c["text_config"].(map[string]any)["rope_parameters"] = map[string]any{"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0}
		}}, `rope_type "yarn"`},
		{"no output gate", ckptOptions{mutateJSON: func(c map[string]any) {
			c["text_config"].(map[string]any)["attn_output_gate"] = false
		}}, "attn_output_gate"},
		{"gelu", ckptOptions{mutateJSON: func(c map[string]any) {
			c["text_config"].(map[string]any)["hidden_act"] = "gelu"
		}}, "hidden_act"},
		{"bad GQA", ckptOptions{mutateJSON: func(c map[string]any) {
			c["text_config"].(map[string]any)["num_key_value_heads"] = 3
		}}, "num_key_value_heads 3"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			writeCheckpoint(t, dir, randomRaw(loadCheckpointTestConfig(), 32), c.o)
			_, err := LoadCheckpoint(context.Background(), dir, nil)
			if err == nil || !strings.Contains(err.Error(), c.expect) {
				t.Fatalf("error %v, want one containing %q", err, c.expect)
			}
		})
	}
	if _, err := LoadCheckpoint(context.Background(), t.TempDir(), nil); err == nil || !strings.Contains(err.Error(), "config.json") {
		t.Fatalf("empty dir: %v", err)
	}
}

func TestParseConfigDefaults(t *testing.T) {
	// A text-only config with legacy top-level RoPE keys and no eps.
	js := `{"model_type": "qwen3_5_text", "vocab_size": 10, "hidden_size": 16, "intermediate_size": 32,
	"num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8,
	"full_attention_interval": 2, "rope_theta": 5000, "partial_rotary_factor": 0.5,
	"linear_num_key_heads": 1, "linear_num_value_heads": 2, "linear_key_head_dim": 4, "linear_value_head_dim": 4}`
	c, err := ParseConfig([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	if c.RopeTheta != 5000 || c.RotaryDim != 4 || c.RMSEps != 1e-6 || c.ConvKernel != 4 ||
		len(c.Layers) != 2 || c.Layers[0] != GDN || c.Layers[1] != Attention || c.ConvDim() != 16 {
		t.Fatalf("parsed %+v", c)
	}
}
