// Command mkfixtures writes the committed Hub fixture repos under testdata/hub/, the root that
// package lithos/hub/hubtest serves in tests (and `lithos-pack hub serve testdata/hub` by hand):
//
//	go run ./tools/mkfixtures            # from the module root; rewrites testdata/hub/lithos-test/tiny-sharded
//	go run ./tools/mkfixtures -out DIR   # somewhere else
//
// lithos-test/tiny-sharded is a tiny model with the names, dtypes and shape rules of a ModelOpt
// mixed-precision export of a Qwen3.5 multimodal checkpoint (shared/reference/qwen35-and-quant.md §A.1,
// §A.2, §B.1–B.3, §B.7): 4 text layers (3 Gated DeltaNet + 1 gated full attention), an MTP block and a
// one-block vision tower, in two safetensors shards plus model.safetensors.index.json. Tensor bytes are
// deterministic pseudo-random values (not a trained model):
//
//   - FP8 (attention q/k/v/o, GDN in_proj_qkv/in_proj_z/out_proj): weight F8_E4M3 [out, in] (random
//     non-NaN codes), weight_scale and input_scale F32 scalars;
//   - NVFP4 (every MLP gate/up/down): weight U8 [out, in/2] (two E2M1 codes per byte), weight_scale
//     F8_E4M3 [out, in/16] (positive codes 0x28..0x58, i.e. 0.25..12), weight_scale_2 and input_scale F32
//     scalars;
//   - BF16 everything else (embeddings, lm_head, norms, A_log, dt_bias, conv1d, in_proj_a/b, mtp.*,
//     model.visual.*), uniform in ±1/sqrt(fan-in) (norm weights ±0.1, zero-centred as Qwen3.5 stores
//     them).
//
// Shards are written with lithos/formats/safetensors in the Python writer's tensor order with
// {"format": "pt"} metadata, so their headers are laid out as safetensors.torch.save_file lays them out.
// The test next to this file checks that the committed fixture is what this program writes.
package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"hash/fnv"
	"log"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"lithos/formats/safetensors"
)

func main() {
	out := flag.String("out", "testdata/hub", "Hub root to write the fixture repos into")
	flag.Parse()
	dir := filepath.Join(*out, "lithos-test", "tiny-sharded")
	files, err := TinySharded()
	if err != nil {
		log.Fatal(err)
	}
	if err := writeRepo(dir, files); err != nil {
		log.Fatal(err)
	}
	var total int
	for _, b := range files {
		total += len(b)
	}
	fmt.Printf("wrote %d files (%d bytes) to %s\n", len(files), total, dir)
}

// writeRepo replaces dir with files (repo path → content).
func writeRepo(dir string, files map[string][]byte) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	for p, b := range files {
		dst := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			return fmt.Errorf("write %s: %w", dst, err)
		}
	}
	return nil
}

// Tiny model dimensions (the 27B values are in qwen35-and-quant.md §A.1).
const (
	hidden        = 64
	intermediate  = 128
	layers        = 4 // full_attention_interval 4: layers 0-2 linear_attention, layer 3 full_attention
	vocab         = 512
	attnHeads     = 2
	kvHeads       = 1
	headDim       = 32
	linKeyHeads   = 2
	linValueHeads = 4
	linKeyDim     = 16
	linValueDim   = 16
	convKernel    = 4

	visDepth        = 1
	visHidden       = 32
	visIntermediate = 64
	visHeads        = 2
	visPatch        = 4
	visTemporal     = 2
	visMerge        = 2
	visPositions    = 16

	groupSize = 16 // NVFP4 block size
)

const (
	keyDim   = linKeyHeads * linKeyDim     // 32
	valueDim = linValueHeads * linValueDim // 64
	convDim  = 2*keyDim + valueDim         // 128
)

// Special tokens, after the 256 byte tokens and the merges.
var specials = []string{
	"<|endoftext|>", "<|im_start|>", "<|im_end|>",
	"<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>",
}

// quant is how one Linear is stored.
type quant int

const (
	bf16 quant = iota
	fp8
	nvfp4
)

type linear struct {
	name    string // module path, without ".weight"
	out, in int64
	q       quant
	bias    bool
}

// modules lists every Linear-like weight and every vector of the checkpoint.
func modules() (lins []linear, vecs []safetensors.TensorSpec) {
	lm := "model.language_model."
	vec := func(name string, shape ...int64) {
		vecs = append(vecs, safetensors.TensorSpec{Name: name, DType: safetensors.BF16, Shape: shape})
	}
	lins = append(lins, linear{name: lm + "embed_tokens", out: vocab, in: hidden})
	for i := 0; i < layers; i++ {
		p := lm + "layers." + strconv.Itoa(i) + "."
		vec(p+"input_layernorm.weight", hidden)
		vec(p+"post_attention_layernorm.weight", hidden)
		if (i+1)%4 != 0 {
			a := p + "linear_attn."
			lins = append(lins,
				linear{name: a + "in_proj_qkv", out: convDim, in: hidden, q: fp8},
				linear{name: a + "in_proj_z", out: valueDim, in: hidden, q: fp8},
				linear{name: a + "in_proj_b", out: linValueHeads, in: hidden},
				linear{name: a + "in_proj_a", out: linValueHeads, in: hidden},
				linear{name: a + "out_proj", out: hidden, in: valueDim, q: fp8})
			vecs = append(vecs, safetensors.TensorSpec{Name: a + "conv1d.weight", DType: safetensors.BF16, Shape: []int64{convDim, 1, convKernel}})
			vec(a+"dt_bias", linValueHeads)
			vec(a+"A_log", linValueHeads)
			vec(a+"norm.weight", linValueDim)
		} else {
			a := p + "self_attn."
			lins = append(lins,
				linear{name: a + "q_proj", out: 2 * attnHeads * headDim, in: hidden, q: fp8}, // query + output gate
				linear{name: a + "k_proj", out: kvHeads * headDim, in: hidden, q: fp8},
				linear{name: a + "v_proj", out: kvHeads * headDim, in: hidden, q: fp8},
				linear{name: a + "o_proj", out: hidden, in: attnHeads * headDim, q: fp8})
			vec(a+"q_norm.weight", headDim)
			vec(a+"k_norm.weight", headDim)
		}
		lins = append(lins,
			linear{name: p + "mlp.gate_proj", out: intermediate, in: hidden, q: nvfp4},
			linear{name: p + "mlp.up_proj", out: intermediate, in: hidden, q: nvfp4},
			linear{name: p + "mlp.down_proj", out: hidden, in: intermediate, q: nvfp4})
	}
	vec(lm+"norm.weight", hidden)
	lins = append(lins, linear{name: "lm_head", out: vocab, in: hidden})

	// MTP block: excluded from quantization (mtp.*), BF16.
	lins = append(lins, linear{name: "mtp.fc", out: hidden, in: 2 * hidden})
	vec("mtp.pre_fc_norm_embedding.weight", hidden)
	vec("mtp.pre_fc_norm_hidden.weight", hidden)
	vec("mtp.norm.weight", hidden)
	vec("mtp.layers.0.input_layernorm.weight", hidden)
	vec("mtp.layers.0.post_attention_layernorm.weight", hidden)
	vec("mtp.layers.0.self_attn.q_norm.weight", headDim)
	vec("mtp.layers.0.self_attn.k_norm.weight", headDim)
	lins = append(lins,
		linear{name: "mtp.layers.0.self_attn.q_proj", out: 2 * attnHeads * headDim, in: hidden},
		linear{name: "mtp.layers.0.self_attn.k_proj", out: kvHeads * headDim, in: hidden},
		linear{name: "mtp.layers.0.self_attn.v_proj", out: kvHeads * headDim, in: hidden},
		linear{name: "mtp.layers.0.self_attn.o_proj", out: hidden, in: attnHeads * headDim},
		linear{name: "mtp.layers.0.mlp.gate_proj", out: intermediate, in: hidden},
		linear{name: "mtp.layers.0.mlp.up_proj", out: intermediate, in: hidden},
		linear{name: "mtp.layers.0.mlp.down_proj", out: hidden, in: intermediate})

	// Vision tower (excluded: *visual*), BF16, with biases.
	v := "model.visual."
	vecs = append(vecs,
		safetensors.TensorSpec{Name: v + "patch_embed.proj.weight", DType: safetensors.BF16, Shape: []int64{visHidden, 3, visTemporal, visPatch, visPatch}},
		safetensors.TensorSpec{Name: v + "patch_embed.proj.bias", DType: safetensors.BF16, Shape: []int64{visHidden}})
	lins = append(lins, linear{name: v + "pos_embed", out: visPositions, in: visHidden})
	for i := 0; i < visDepth; i++ {
		b := v + "blocks." + strconv.Itoa(i) + "."
		for _, n := range []string{"norm1", "norm2"} {
			vec(b+n+".weight", visHidden)
			vec(b+n+".bias", visHidden)
		}
		lins = append(lins,
			linear{name: b + "attn.qkv", out: 3 * visHidden, in: visHidden, bias: true},
			linear{name: b + "attn.proj", out: visHidden, in: visHidden, bias: true},
			linear{name: b + "mlp.linear_fc1", out: visIntermediate, in: visHidden, bias: true},
			linear{name: b + "mlp.linear_fc2", out: visHidden, in: visIntermediate, bias: true})
	}
	merged := int64(visHidden * visMerge * visMerge)
	vec(v+"merger.norm.weight", visHidden)
	vec(v+"merger.norm.bias", visHidden)
	lins = append(lins,
		linear{name: v + "merger.linear_fc1", out: merged, in: merged, bias: true},
		linear{name: v + "merger.linear_fc2", out: hidden, in: merged, bias: true})
	return lins, vecs
}

// rng returns a generator seeded by the tensor name, so each tensor's bytes do not depend on the others.
func rng(name string) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(name))
	return rand.New(rand.NewPCG(h.Sum64(), 0x6c6974686f73)) // "lithos"
}

// bf16Bits rounds f (finite) to bfloat16, round-to-nearest-even on the float32 bits.
func bf16Bits(f float32) uint16 {
	b := math.Float32bits(f)
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

func bf16Uniform(name string, n int64, bound float32) []byte {
	r := rng(name)
	out := make([]byte, 2*n)
	for i := int64(0); i < n; i++ {
		f := (2*r.Float32() - 1) * bound
		binary.LittleEndian.PutUint16(out[2*i:], bf16Bits(f))
	}
	return out
}

func f32Scalar(v float32) []byte {
	return binary.LittleEndian.AppendUint32(nil, math.Float32bits(v))
}

// e4m3Codes returns n random F8_E4M3 codes without the NaN codes 0x7f/0xff.
func e4m3Codes(name string, n int64) []byte {
	r := rng(name)
	out := make([]byte, n)
	for i := range out {
		c := byte(r.Uint32())
		if c&0x7f == 0x7f {
			c ^= 1
		}
		out[i] = c
	}
	return out
}

// tensor is one tensor of the checkpoint with its bytes.
type tensor struct {
	spec safetensors.TensorSpec
	data []byte
}

func tensors() []tensor {
	lins, vecs := modules()
	var ts []tensor
	add := func(name string, dt safetensors.DType, shape []int64, data []byte) {
		ts = append(ts, tensor{safetensors.TensorSpec{Name: name, DType: dt, Shape: shape}, data})
	}
	for _, l := range lins {
		w := l.name + ".weight"
		r := rng(l.name + ":scales")
		switch l.q {
		case bf16:
			add(w, safetensors.BF16, []int64{l.out, l.in}, bf16Uniform(w, l.out*l.in, float32(1/math.Sqrt(float64(l.in)))))
		case fp8:
			add(w, safetensors.F8E4M3, []int64{l.out, l.in}, e4m3Codes(w, l.out*l.in))
			add(l.name+".weight_scale", safetensors.F32, []int64{}, f32Scalar(float32(0.05/448*(0.5+r.Float64()))))
			add(l.name+".input_scale", safetensors.F32, []int64{}, f32Scalar(float32(4.0/448*(0.5+r.Float64()))))
		case nvfp4:
			packed := make([]byte, l.out*l.in/2)
			pr := rng(w)
			for i := range packed {
				packed[i] = byte(pr.Uint32())
			}
			add(w, safetensors.U8, []int64{l.out, l.in / 2}, packed)
			scales := make([]byte, l.out*l.in/groupSize)
			sr := rng(l.name + ".weight_scale")
			for i := range scales {
				scales[i] = 0x28 + byte(sr.IntN(0x31)) // 0x28..0x58: 0.25 .. 12
			}
			add(l.name+".weight_scale", safetensors.F8E4M3, []int64{l.out, l.in / groupSize}, scales)
			add(l.name+".weight_scale_2", safetensors.F32, []int64{}, f32Scalar(float32(0.05/2688*(0.5+r.Float64()))))
			add(l.name+".input_scale", safetensors.F32, []int64{}, f32Scalar(float32(4.0/2688*(0.5+r.Float64()))))
		}
		if l.bias {
			add(l.name+".bias", safetensors.BF16, []int64{l.out}, bf16Uniform(l.name+".bias", l.out, 0.02))
		}
	}
	for _, v := range vecs {
		n := int64(1)
		for _, d := range v.Shape {
			n *= d
		}
		bound := float32(0.1) // norm weights: zero-centred
		switch {
		case len(v.Shape) > 1: // conv1d, patch_embed: fan-in = product of the inner dims
			bound = float32(1 / math.Sqrt(float64(n/v.Shape[0])))
		case strings.HasSuffix(v.Name, "A_log"):
			bound = 2
		case strings.HasSuffix(v.Name, "dt_bias"), strings.HasSuffix(v.Name, ".bias"):
			bound = 0.5
		}
		add(v.Name, safetensors.BF16, v.Shape, bf16Uniform(v.Name, n, bound))
	}
	return ts
}

// shardOf puts the embedding and layers 0-1 in shard 1, everything else in shard 2.
func shardOf(name string) int {
	for _, p := range []string{"model.language_model.embed_tokens.", "model.language_model.layers.0.", "model.language_model.layers.1."} {
		if strings.HasPrefix(name, p) {
			return 1
		}
	}
	return 2
}

const nShards = 2

func shardName(i int) string { return fmt.Sprintf("model-%05d-of-%05d.safetensors", i, nShards) }

// marshal writes v as JSON indented by 2 spaces, keys of maps sorted, no HTML escaping, trailing newline
// (as transformers writes config files: json.dumps(indent=2, sort_keys=True) + "\n").
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// TinySharded returns the files of lithos-test/tiny-sharded (repo path → bytes).
func TinySharded() (map[string][]byte, error) {
	files := map[string][]byte{}
	ts := tensors()
	byShard := map[int][]tensor{}
	weightMap := map[string]string{}
	var total int64
	for _, t := range ts {
		s := shardOf(t.spec.Name)
		byShard[s] = append(byShard[s], t)
		weightMap[t.spec.Name] = shardName(s)
		total += int64(len(t.data))
	}
	for s := 1; s <= nShards; s++ {
		data := map[string][]byte{}
		var specs []safetensors.TensorSpec
		for _, t := range byShard[s] {
			specs = append(specs, t.spec)
			data[t.spec.Name] = t.data
		}
		specs = safetensors.PythonOrder(specs)
		var b bytes.Buffer
		w, err := safetensors.NewWriter(&b, specs, map[string]string{"format": "pt"})
		if err != nil {
			return nil, fmt.Errorf("shard %d: %w", s, err)
		}
		for _, sp := range specs {
			if err := w.WriteTensor(sp.Name, data[sp.Name]); err != nil {
				return nil, fmt.Errorf("shard %d: %w", s, err)
			}
		}
		if err := w.Close(); err != nil {
			return nil, fmt.Errorf("shard %d: %w", s, err)
		}
		files[shardName(s)] = b.Bytes()
	}

	quantized := map[string]any{}
	lins, _ := modules()
	for _, l := range lins {
		switch l.q {
		case fp8:
			quantized[l.name] = map[string]any{"quant_algo": "FP8"}
		case nvfp4:
			quantized[l.name] = map[string]any{"quant_algo": "NVFP4", "group_size": groupSize}
		}
	}
	exclude := []string{"lm_head", "model.visual*", "mtp*", "*linear_attn.conv1d*", "*linear_attn.in_proj_a*", "*linear_attn.in_proj_b*"}
	producer := map[string]any{"name": "modelopt", "version": "0.37.0"}

	docs := map[string]any{
		"model.safetensors.index.json": map[string]any{
			"metadata":   map[string]any{"total_size": total},
			"weight_map": weightMap,
		},
		"hf_quant_config.json": map[string]any{
			"producer": producer,
			"quantization": map[string]any{
				"quant_algo":          "MIXED_PRECISION",
				"kv_cache_quant_algo": nil,
				"quantized_layers":    quantized,
				"exclude_modules":     exclude,
			},
		},
		"config.json":            config(producer, quantized, exclude),
		"generation_config.json": generationConfig(),
		"tokenizer.json":         tokenizerJSON(),
		"tokenizer_config.json":  tokenizerConfig(),
	}
	for name, d := range docs {
		b, err := marshal(d)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		files[name] = b
	}
	files["README.md"] = []byte(readme)
	return files, nil
}

const readme = `---
license: apache-2.0
library_name: transformers
tags: [lithos-test, modelopt, nvfp4, fp8, qwen3_5]
---
# lithos-test/tiny-sharded

A tiny synthetic checkpoint laid out like a ModelOpt mixed-precision (FP8 + NVFP4) export of a Qwen3.5
multimodal model, in two safetensors shards. Weights are deterministic pseudo-random bytes, not a
trained model. Generated by ` + "`go run ./tools/mkfixtures`" + ` in the lithos repository; do not edit.
`

func tokenID(tok string) int {
	for i, s := range specials {
		if s == tok {
			return 256 + len(merges) + i
		}
	}
	panic("unknown special token " + tok)
}

func config(producer map[string]any, quantized map[string]any, exclude []string) map[string]any {
	layerTypes := make([]string, layers)
	for i := range layerTypes {
		layerTypes[i] = "linear_attention"
		if (i+1)%4 == 0 {
			layerTypes[i] = "full_attention"
		}
	}
	return map[string]any{
		"architectures":         []string{"Qwen3_5ForConditionalGeneration"},
		"model_type":            "qwen3_5",
		"image_token_id":        tokenID("<|image_pad|>"),
		"video_token_id":        tokenID("<|video_pad|>"),
		"vision_start_token_id": tokenID("<|vision_start|>"),
		"vision_end_token_id":   tokenID("<|vision_end|>"),
		"tie_word_embeddings":   false,
		"transformers_version":  "4.57.0.dev0",
		"text_config": map[string]any{
			"model_type":                   "qwen3_5_text",
			"vocab_size":                   vocab,
			"hidden_size":                  hidden,
			"intermediate_size":            intermediate,
			"num_hidden_layers":            layers,
			"num_attention_heads":          attnHeads,
			"num_key_value_heads":          kvHeads,
			"head_dim":                     headDim,
			"linear_num_key_heads":         linKeyHeads,
			"linear_num_value_heads":       linValueHeads,
			"linear_key_head_dim":          linKeyDim,
			"linear_value_head_dim":        linValueDim,
			"linear_conv_kernel_dim":       convKernel,
			"full_attention_interval":      4,
			"layer_types":                  layerTypes,
			"hidden_act":                   "silu",
			"rms_norm_eps":                 1e-6,
			"max_position_embeddings":      4096,
			"attention_bias":               false,
			"attention_dropout":            0.0,
			"attn_output_gate":             true,
			"initializer_range":            0.02,
			"tie_word_embeddings":          false,
			"use_cache":                    true,
			"dtype":                        "bfloat16",
			"mtp_num_hidden_layers":        1,
			"mtp_use_dedicated_embeddings": false,
			"mamba_ssm_dtype":              "float32",
			"eos_token_id":                 tokenID("<|im_end|>"),
			"rope_parameters": map[string]any{
				"rope_type":             "default",
				"rope_theta":            10000000,
				"partial_rotary_factor": 0.25,
				"mrope_section":         []int{2, 1, 1}, // sums to head_dim·0.25/2 = 4
				"mrope_interleaved":     true,
			},
		},
		"vision_config": map[string]any{
			"model_type":               "qwen3_5_vision",
			"depth":                    visDepth,
			"hidden_size":              visHidden,
			"hidden_act":               "gelu_pytorch_tanh",
			"intermediate_size":        visIntermediate,
			"num_heads":                visHeads,
			"in_channels":              3,
			"patch_size":               visPatch,
			"spatial_merge_size":       visMerge,
			"temporal_patch_size":      visTemporal,
			"out_hidden_size":          hidden,
			"num_position_embeddings":  visPositions,
			"deepstack_visual_indexes": []int{},
		},
		"quantization_config": map[string]any{
			"quant_method":     "modelopt",
			"quant_algo":       "MIXED_PRECISION",
			"producer":         producer,
			"kv_cache_scheme":  nil,
			"ignore":           exclude,
			"quantized_layers": quantized,
		},
	}
}

func generationConfig() map[string]any {
	return map[string]any{
		"bos_token_id":         tokenID("<|endoftext|>"),
		"pad_token_id":         tokenID("<|endoftext|>"),
		"eos_token_id":         []int{tokenID("<|im_end|>"), tokenID("<|endoftext|>")},
		"do_sample":            true,
		"temperature":          0.6,
		"top_k":                20,
		"top_p":                0.95,
		"transformers_version": "4.57.0.dev0",
	}
}

// merges are the BPE merges of the tiny tokenizer, by rank; each result is a vocab entry.
var merges = [][2]string{
	{"Ġ", "t"}, {"h", "e"}, {"i", "n"}, {"e", "r"}, {"a", "n"}, {"o", "n"}, {"Ġ", "a"}, {"r", "e"},
	{"Ġt", "he"}, {"Ġ", "s"}, {"i", "s"}, {"Ġ", "i"}, {"e", "n"}, {"o", "r"}, {"Ġ", "w"}, {"l", "l"},
}

// byteToUnicode is GPT-2's byte-level mapping (bytes_to_unicode): printable Latin-1 bytes map to
// themselves, the others to U+0100 upwards in byte order.
func byteToUnicode() [256]rune {
	var m [256]rune
	next := rune(256)
	for b := 0; b < 256; b++ {
		if b >= '!' && b <= '~' || b >= 0xa1 && b <= 0xac || b >= 0xae && b <= 0xff {
			m[b] = rune(b)
		} else {
			m[b] = next
			next++
		}
	}
	return m
}

// qwen35Split is the Qwen3.5 pre-tokenizer pattern (qwen35-and-quant.md via hub-and-go.md §B14).
const qwen35Split = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

func tokenizerJSON() map[string]any {
	vocabMap := map[string]int{}
	m := byteToUnicode()
	for b := 0; b < 256; b++ {
		vocabMap[string(m[b])] = b
	}
	mergeStrs := make([]string, len(merges))
	for i, mg := range merges {
		vocabMap[mg[0]+mg[1]] = 256 + i
		mergeStrs[i] = mg[0] + " " + mg[1]
	}
	var added []map[string]any
	for _, s := range specials {
		added = append(added, map[string]any{
			"id": tokenID(s), "content": s, "single_word": false, "lstrip": false, "rstrip": false,
			"normalized": false, "special": true,
		})
	}
	byteLevel := map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}
	return map[string]any{
		"version":      "1.0",
		"truncation":   nil,
		"padding":      nil,
		"added_tokens": added,
		"normalizer":   map[string]any{"type": "NFC"},
		"pre_tokenizer": map[string]any{
			"type": "Sequence",
			"pretokenizers": []any{
				map[string]any{"type": "Split", "pattern": map[string]any{"Regex": qwen35Split}, "behavior": "Isolated", "invert": false},
				byteLevel,
			},
		},
		"post_processor": byteLevel,
		"decoder":        byteLevel,
		"model": map[string]any{
			"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": "",
			"end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
			"vocab": vocabMap, "merges": mergeStrs,
		},
	}
}

const chatTemplate = "{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"

func tokenizerConfig() map[string]any {
	dec := map[string]any{}
	for _, s := range specials {
		dec[strconv.Itoa(tokenID(s))] = map[string]any{
			"content": s, "lstrip": false, "normalized": false, "rstrip": false, "single_word": false, "special": true,
		}
	}
	return map[string]any{
		"add_bos_token":                false,
		"add_prefix_space":             false,
		"added_tokens_decoder":         dec,
		"bos_token":                    nil,
		"chat_template":                chatTemplate,
		"clean_up_tokenization_spaces": false,
		"eos_token":                    "<|im_end|>",
		"errors":                       "replace",
		"model_max_length":             4096,
		"pad_token":                    "<|endoftext|>",
		"split_special_tokens":         false,
		"tokenizer_class":              "Qwen2Tokenizer",
		"unk_token":                    nil,
	}
}
