// Package gentest builds small bundles for the tests of lithos/runtime/generate and
// cmd/lithos-run: the golden checkpoint testdata/goldens/qwen35-b (a 4-layer Qwen3.5 hybrid,
// vocabulary 608, with transformers goldens; or qwen35-a) plus a tiny byte-level BPE
// tokenizer.json in the Qwen layout, a tokenizer_config.json with a ChatML chat template and a
// generation_config.json, packed with lithos/pack — optionally with a random DSpark draft head
// (WriteDraft) for the speculative-decoding tests.
//
// The tokenizer is made here, not taken from a model: ids 0–255 are the 256 byte-level symbols
// (id = byte value), ids 256… the merges listed in Merges, and the special tokens
// <|endoftext|>, <|im_start|>, <|im_end|> are ids 600–602.
//
// Imports: lithos/pack, lithos/formats/safetensors, lithos/runtime/model (GoldenConfig), the
// standard library.
package gentest

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime"

	"lithos/formats/safetensors"
	"lithos/pack"
	"lithos/runtime/model"
)

// Special token ids of the fixture tokenizer. Ids 603–607 are the special tokens
// <|extra_0|> … <|extra_4|>, so that every id of the model's vocabulary (608) is a token.
const (
	EndOfText = 600
	IMStart   = 601
	IMEnd     = 602
	// VocabSize is the model's (and the tokenizer's) vocabulary.
	VocabSize = 608
)

// Merges are the fixture's BPE merges, in rank order (pieces of byte-level text: Ġ is a space).
var Merges = [][2]string{
	{"Ġ", "t"}, {"h", "e"}, {"Ġt", "he"}, {"i", "n"}, {"e", "r"}, {"a", "n"}, {"o", "n"},
	{"Ġ", "a"}, {"r", "e"}, {"Ġ", "s"}, {"e", "n"}, {"a", "t"}, {"o", "r"}, {"Ġ", "w"},
}

// ChatTemplate is the fixture's chat template (ChatML, as Qwen's templates render plain
// messages).
const ChatTemplate = "{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"

// GoldenDir returns testdata/goldens/qwen35-<name>, found from this source file.
func GoldenDir(name string) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "testdata", "goldens", "qwen35-"+name)
}

// GoldenConfig is the parsed config.json of the golden checkpoint qwen35-<name>
// (model.ParseConfig); errors name the file.
func GoldenConfig(name string) (model.Config, error) {
	f := filepath.Join(GoldenDir(name), "config.json")
	data, err := os.ReadFile(f)
	if err != nil {
		return model.Config{}, err
	}
	c, err := model.ParseConfig(data)
	if err != nil {
		return model.Config{}, fmt.Errorf("%s: %w", f, err)
	}
	return c, nil
}

// byteLevel is GPT-2's byte → printable rune table (the ByteLevel pre-tokenizer's alphabet).
func byteLevel() [256]rune {
	var t [256]rune
	n := 0
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			t[b] = rune(b)
		} else {
			t[b] = rune(256 + n)
			n++
		}
	}
	return t
}

// TokenizerJSON returns the fixture's tokenizer.json.
func TokenizerJSON() []byte {
	bl := byteLevel()
	vocab := map[string]int{}
	for b := 0; b < 256; b++ {
		vocab[string(bl[b])] = b
	}
	var merges []string
	for i, m := range Merges {
		vocab[m[0]+m[1]] = 256 + i
		merges = append(merges, m[0]+" "+m[1])
	}
	// Fillers up to id 599: tokens no merge produces (decoded as their own text).
	for id := 256 + len(Merges); id < EndOfText; id++ {
		vocab[fmt.Sprintf("<f%03d>", id)] = id
	}
	// Added tokens take the ids after the vocabulary, in this order (HF's rule).
	added := []map[string]any{}
	names := []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>"}
	for i := 0; i < VocabSize-EndOfText-3; i++ {
		names = append(names, fmt.Sprintf("<|extra_%d|>", i))
	}
	for i, content := range names {
		added = append(added, map[string]any{"id": EndOfText + i, "content": content, "single_word": false, "lstrip": false,
			"rstrip": false, "normalized": false, "special": true})
	}
	byteLevelCfg := map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}
	doc := map[string]any{
		"version": "1.0", "truncation": nil, "padding": nil, "added_tokens": added,
		"normalizer": map[string]any{"type": "NFC"},
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`},
				"behavior": "Isolated", "invert": false},
			byteLevelCfg,
		}},
		"post_processor": byteLevelCfg,
		"decoder":        byteLevelCfg,
		"model": map[string]any{"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": "",
			"end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
			"vocab": vocab, "merges": merges},
	}
	data, err := json.Marshal(doc)
	if err != nil {
		panic(err) // static data
	}
	return data
}

// Options vary the fixture.
type Options struct {
	// EOS is generation_config.json's eos_token_id; nil writes no generation_config.json.
	EOS []int
	// NoTokenizer leaves out tokenizer.json and tokenizer_config.json.
	NoTokenizer bool
	// Golden is the target checkpoint: "b" ("" means it) or "a" (8 layers, vocabulary 1024).
	Golden string
	// Draft is a DSpark draft head's checkpoint directory (WriteDraft) packed with the target
	// in DraftFormat (pack.DraftNVFP4, "" means it, or pack.DraftBF16); "" packs none.
	Draft, DraftFormat string
}

// Bundle writes the fixture checkpoint under dir/ckpt and packs it (with opt.Draft when set)
// into dir/b.lithos, whose path it returns.
func Bundle(ctx context.Context, dir string, opt Options) (string, error) {
	golden := opt.Golden
	if golden == "" {
		golden = "b"
	}
	src := GoldenDir(golden)
	ck := filepath.Join(dir, "ckpt")
	if err := os.MkdirAll(ck, 0o755); err != nil {
		return "", err
	}
	for _, f := range []string{"config.json", "hf_quant_config.json", "model.safetensors"} {
		data, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(ck, f), data, 0o644); err != nil {
			return "", err
		}
	}
	files := map[string][]byte{}
	if !opt.NoTokenizer {
		files["tokenizer.json"] = TokenizerJSON()
		tc, _ := json.Marshal(map[string]any{"chat_template": ChatTemplate, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
			"bos_token": nil, "additional_special_tokens": []string{"<|im_start|>", "<|im_end|>"}})
		files["tokenizer_config.json"] = tc
	}
	if opt.EOS != nil {
		gc, _ := json.Marshal(map[string]any{"eos_token_id": opt.EOS})
		files["generation_config.json"] = gc
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(ck, name), data, 0o644); err != nil {
			return "", err
		}
	}
	out := filepath.Join(dir, "b.lithos")
	if _, err := pack.Build(ctx, pack.Options{Target: ck, Out: out, Draft: opt.Draft, DraftFormat: opt.DraftFormat,
		Workers: 2, ToolVersion: "gentest", Log: quiet()}); err != nil {
		return "", fmt.Errorf("gentest: pack %s: %w", ck, err)
	}
	return out, nil
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// Goldens reads testdata/goldens/qwen35-<name>/goldens.safetensors: the prompts
// ("prompt.1", "prompt.11", "prompt.200") and greedy continuations ("greedy.N") as int32, the
// logits as float32, recorded by tools/qwen35_goldens.py from transformers.
func Goldens(name string) (map[string][]int32, map[string][]float32, error) {
	f, err := safetensors.Open(filepath.Join(GoldenDir(name), "goldens.safetensors"))
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	i32, f32 := map[string][]int32{}, map[string][]float32{}
	for _, t := range f.Header.Tensors {
		raw, err := f.ReadTensor(t)
		if err != nil {
			return nil, nil, err
		}
		switch t.DType {
		case safetensors.I32:
			v := make([]int32, len(raw)/4)
			for i := range v {
				v[i] = int32(binary.LittleEndian.Uint32(raw[4*i:]))
			}
			i32[t.Name] = v
		case safetensors.F32:
			v := make([]float32, len(raw)/4)
			for i := range v {
				v[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
			}
			f32[t.Name] = v
		}
	}
	return i32, f32, nil
}
