package formats

import (
	"strings"
	"testing"
)

type tm = map[string]Tensor

func ten(dtype string, shape ...int64) Tensor { return Tensor{DType: dtype, Shape: shape} }

func TestDetect(t *testing.T) {
	modelopt := Scheme{Method: "modelopt", Algo: "NVFP4", GroupSize: 16}
	cases := []struct {
		name   string
		ts     tm
		s      Scheme
		want   Layout
		ignore []string
	}{
		{"bf16 matrix", tm{"weight": ten("BF16", 5120, 17408)}, Scheme{}, Layout{Format: BF16, N: 5120, K: 17408}, nil},
		{"bf16 norm under a ModelOpt config", tm{"weight": ten("BF16", 5120)}, modelopt, Layout{Format: BF16, N: 1, K: 5120}, nil},
		{"f32 conv1d", tm{"weight": ten("F32", 10240, 1, 4)}, Scheme{}, Layout{Format: F32, N: 10240, K: 4}, nil},
		{"modelopt nvfp4", tm{"weight": ten("U8", 5120, 8704), "weight_scale": ten("F8_E4M3", 5120, 1088),
			"weight_scale_2": ten("F32"), "input_scale": ten("F32")}, modelopt,
			Layout{Format: NVFP4, N: 5120, K: 17408, GroupSize: 16}, []string{"input_scale"}},
		{"nvfp4 without config, [1] tensor scale", tm{"weight": ten("U8", 64, 128), "weight_scale": ten("F8_E4M3", 64, 16),
			"weight_scale_2": ten("F32", 1)}, Scheme{}, Layout{Format: NVFP4, N: 64, K: 256, GroupSize: 16}, nil},
		{"mlx nvfp4", tm{"weight": ten("U32", 64, 32), "scales": ten("U8", 64, 16)}, Scheme{Method: "mlx", Mode: "nvfp4"},
			Layout{Format: NVFP4MLX, N: 64, K: 256, GroupSize: 16}, nil},
		{"mlx affine g64 bf16", tm{"weight": ten("U32", 5120, 640), "scales": ten("BF16", 5120, 80), "biases": ten("BF16", 5120, 80)},
			Scheme{Method: "mlx", Mode: "affine", Bits: 4, GroupSize: 64}, Layout{Format: Int4, N: 5120, K: 5120, GroupSize: 64, ScaleDType: "BF16"}, nil},
		{"mlx affine g32 f16 without config", tm{"weight": ten("U32", 8, 64), "scales": ten("F16", 8, 16), "biases": ten("F16", 8, 16), "bias": ten("F16", 8)},
			Scheme{}, Layout{Format: Int4, N: 8, K: 512, GroupSize: 32, ScaleDType: "F16"}, []string{"bias"}},
		{"fp8 per-tensor", tm{"weight": ten("F8_E4M3", 128, 256), "weight_scale": ten("F32"), "input_scale": ten("F32")},
			Scheme{Method: "modelopt", Algo: "FP8"}, Layout{Format: FP8, N: 128, K: 256}, []string{"input_scale"}},
		{"int8 groups", tm{"weight": ten("I8", 128, 256), "weight_scale": ten("F16", 128, 8)}, Scheme{},
			Layout{Format: Int8, N: 128, K: 256, GroupSize: 32, ScaleDType: "F16"}, nil},
		{"awq", tm{"qweight": ten("I32", 4096, 1536), "qzeros": ten("I32", 32, 1536), "scales": ten("F16", 32, 12288)},
			Scheme{Method: "awq", Bits: 4, GroupSize: 128, Version: "gemm"}, Layout{Format: Int4AWQ, N: 12288, K: 4096, GroupSize: 128, ScaleDType: "F16"}, nil},
		{"gptq v1", tm{"qweight": ten("I32", 512, 12288), "qzeros": ten("I32", 32, 1536), "scales": ten("F16", 32, 12288), "g_idx": ten("I32", 4096)},
			Scheme{Method: "gptq", Bits: 4, GroupSize: 128}, Layout{Format: Int4GPTQ, N: 12288, K: 4096, GroupSize: 128, ScaleDType: "F16", ZeroOffset: 1}, nil},
		{"gptq v2, one group", tm{"qweight": ten("I32", 16, 64), "qzeros": ten("I32", 1, 8), "scales": ten("F16", 1, 64)},
			Scheme{Method: "gptq", Bits: 4, GroupSize: -1, Version: "gptq_v2"}, Layout{Format: Int4GPTQ, N: 64, K: 128, GroupSize: 128, ScaleDType: "F16"}, nil},
		{"excluded module stays bf16", tm{"weight": ten("BF16", 10, 20)}, Scheme{Method: "modelopt", Algo: "NVFP4", Exclude: []string{"lm_head"}},
			Layout{Format: BF16, N: 10, K: 20}, nil},
	}
	for _, c := range cases {
		l, err := Detect(Group{Name: "model.layers.0.mlp.down_proj", Tensors: c.ts}, c.s)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		c.want.Ignored = c.ignore
		if l.Format != c.want.Format || l.N != c.want.N || l.K != c.want.K || l.GroupSize != c.want.GroupSize ||
			l.ScaleDType != c.want.ScaleDType || l.ZeroOffset != c.want.ZeroOffset || strings.Join(l.Ignored, ",") != strings.Join(c.want.Ignored, ",") {
			t.Errorf("%s: got %+v, want %+v", c.name, l, c.want)
		}
	}
}

func TestDetectRefuses(t *testing.T) {
	nvfp4 := tm{"weight": ten("U8", 64, 128), "weight_scale": ten("F8_E4M3", 64, 16), "weight_scale_2": ten("F32")}
	with := func(base tm, extra tm) tm {
		out := tm{}
		for k, v := range base {
			out[k] = v
		}
		for k, v := range extra {
			if v.DType == "" {
				delete(out, k)
			} else {
				out[k] = v
			}
		}
		return out
	}
	cases := []struct {
		name string
		ts   tm
		s    Scheme
		want string
	}{
		{"compressed-tensors nvfp4", tm{"weight_packed": ten("U8", 64, 128), "weight_scale": ten("F8_E4M3", 64, 16), "weight_global_scale": ten("F32")},
			Scheme{Method: "compressed-tensors"}, "compressed-tensors"},
		{"nvfp4 missing weight_scale_2", with(nvfp4, tm{"weight_scale_2": {}}), Scheme{}, "missing tensor weight_scale_2"},
		{"nvfp4 u8 block scales (swizzled)", with(nvfp4, tm{"weight_scale": ten("U8", 64, 16)}), Scheme{}, "swizzled"},
		{"nvfp4 wrong block-scale shape", with(nvfp4, tm{"weight_scale": ten("F8_E4M3", 64, 8)}), Scheme{}, "weight_scale shape"},
		{"nvfp4 per-row tensor scale", with(nvfp4, tm{"weight_scale_2": ten("F32", 64)}), Scheme{}, "scalar"},
		{"nvfp4 awq-smoothed", with(nvfp4, tm{"pre_quant_scale": ten("BF16", 256)}), Scheme{}, "pre_quant_scale"},
		{"nvfp4 under an fp8 config", nvfp4, Scheme{Method: "modelopt", Algo: "FP8"}, "quant_algo"},
		{"nvfp4 group size 32", nvfp4, Scheme{Method: "modelopt", Algo: "NVFP4", GroupSize: 32}, "group_size 32"},
		{"nvfp4 with unknown side tensor", with(nvfp4, tm{"weight_zero": ten("F32")}), Scheme{}, "unexpected tensors weight_zero"},
		{"fp8 per-channel", tm{"weight": ten("F8_E4M3", 128, 256), "weight_scale": ten("F32", 128)}, Scheme{}, "per-tensor"},
		{"fp8 block", tm{"weight": ten("F8_E4M3", 128, 256), "weight_scale_inv": ten("F32", 1, 2)}, Scheme{Method: "fp8"}, "block-scaled FP8"},
		{"mlx 8-bit", tm{"weight": ten("U32", 8, 128), "scales": ten("BF16", 8, 8), "biases": ten("BF16", 8, 8)}, Scheme{Method: "mlx", Bits: 8, GroupSize: 64}, "bits=8"},
		{"mlx mxfp4", tm{"weight": ten("U32", 8, 32), "scales": ten("U8", 8, 8)}, Scheme{}, "mxfp4"},
		{"mlx group 16", tm{"weight": ten("U32", 8, 32), "scales": ten("BF16", 8, 16), "biases": ten("BF16", 8, 16)}, Scheme{}, "group size 16"},
		{"mlx biases dtype mismatch", tm{"weight": ten("U32", 8, 32), "scales": ten("BF16", 8, 4), "biases": ten("F16", 8, 4)}, Scheme{}, "biases"},
		{"awq gemv", tm{"qweight": ten("I32", 128, 8), "qzeros": ten("I32", 1, 8), "scales": ten("F16", 1, 64)}, Scheme{Method: "awq", Version: "gemv"}, "gemm"},
		{"awq no zero point", tm{"qweight": ten("I32", 128, 8), "qzeros": ten("I32", 1, 8), "scales": ten("F16", 1, 64)}, Scheme{Method: "awq", NoZeroPoint: true}, "zero_point"},
		{"gptq act-order", tm{"qweight": ten("I32", 16, 64), "qzeros": ten("I32", 1, 8), "scales": ten("F16", 1, 64), "g_idx": ten("I32", 128)}, Scheme{Method: "gptq", DescAct: true}, "desc_act"},
		{"gptq 8-bit", tm{"qweight": ten("I32", 16, 64), "qzeros": ten("I32", 1, 8), "scales": ten("F16", 1, 64)}, Scheme{Method: "gptq", Bits: 8}, "bits=8"},
		{"awq packing under gptq config", tm{"qweight": ten("I32", 128, 8), "qzeros": ten("I32", 1, 8), "scales": ten("F16", 1, 64)}, Scheme{Method: "gptq"}, "AutoAWQ packing"},
		{"bitsandbytes", tm{"weight": ten("U8", 100, 1)}, Scheme{Method: "bitsandbytes"}, "bitsandbytes"},
		{"no weight", tm{"bias": ten("BF16", 8)}, Scheme{}, "no weight"},
		{"e5m2 weight", tm{"weight": ten("F8_E5M2", 8, 8)}, Scheme{}, "F8_E5M2"},
		{"quantized module the config excludes", nvfp4, Scheme{Method: "modelopt", Algo: "NVFP4", Exclude: []string{"model.layers.3.self_attn"}}, "leaves this module unquantized"},
		{"bf16 with scale", tm{"weight": ten("BF16", 8, 8), "weight_scale": ten("F32")}, Scheme{}, "unexpected tensors weight_scale"},
	}
	for _, c := range cases {
		_, err := Detect(Group{Name: "model.layers.3.self_attn.q_proj", Tensors: c.ts}, c.s)
		if err == nil {
			t.Errorf("%s: accepted", c.name)
			continue
		}
		if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "model.layers.3.self_attn.q_proj") {
			t.Errorf("%s: error %q, want one naming the module and mentioning %q", c.name, err, c.want)
		}
	}
}

func TestFamily(t *testing.T) {
	cases := map[Format]Format{Int4AWQ: Int4, Int4GPTQ: Int4, Int4: Int4, NVFP4MLX: NVFP4, NVFP4: NVFP4, BF16: BF16}
	for f, want := range cases {
		if f.Family() != want {
			t.Errorf("%s.Family() = %s, want %s", f, f.Family(), want)
		}
	}
	if BF16.Quantized() || !NVFP4.Quantized() {
		t.Error("Quantized: bf16 should be false, nvfp4 true")
	}
}

func FuzzDetect(f *testing.F) {
	f.Add([]byte(`{"quantization_config":{"quant_method":"modelopt","quant_algo":"NVFP4","ignore":["lm_head"]}}`), "U8", int64(64), int64(128), "F8_E4M3", int64(16))
	f.Add([]byte(`{"quantization":{"group_size":64,"bits":4,"model.x":false}}`), "U32", int64(8), int64(8), "BF16", int64(1))
	f.Fuzz(func(t *testing.T, cfg []byte, wdt string, n, c int64, sdt string, sc int64) {
		s, err := ParseConfig(cfg)
		if err != nil {
			return
		}
		g := Group{Name: "model.x", Tensors: tm{"weight": ten(wdt, n, c), "weight_scale": ten(sdt, n, sc), "scales": ten(sdt, n, sc)}}
		l, err := Detect(g, s)
		if err == nil && (l.N <= 0 || l.K <= 0) {
			t.Fatalf("Detect accepted a non-positive shape: %+v", l)
		}
	})
}

// FuzzDetectPacked drives the AWQ/GPTQ branch (qweight/qzeros/scales) with
// arbitrary shapes, zero and negative dimensions included: errors, never a
// panic (a zero-row scales tensor used to divide by zero).
func FuzzDetectPacked(f *testing.F) {
	f.Add(int64(16), int64(1), int64(0), int64(1), int64(0), int64(8))
	f.Add(int64(128), int64(16), int64(1), int64(16), int64(1), int64(128))
	f.Add(int64(16), int64(128), int64(2), int64(16), int64(2), int64(128))
	f.Fuzz(func(t *testing.T, q0, q1, z0, z1, s0, s1 int64) {
		g := Group{Name: "model.x", Tensors: tm{"qweight": ten("I32", q0, q1), "qzeros": ten("I32", z0, z1), "scales": ten("F16", s0, s1)}}
		l, err := Detect(g, Scheme{})
		if err == nil && (l.N <= 0 || l.K <= 0 || l.GroupSize <= 0) {
			t.Fatalf("Detect accepted %+v", l)
		}
	})
}

func TestDetectPackedZeroGroups(t *testing.T) {
	g := Group{Name: "model.x", Tensors: tm{"qweight": ten("I32", 16, 1), "qzeros": ten("I32", 0, 1), "scales": ten("F16", 0, 8)}}
	if _, err := Detect(g, Scheme{}); err == nil || !strings.Contains(err.Error(), "positive") {
		t.Errorf("zero groups: %v", err)
	}
}
