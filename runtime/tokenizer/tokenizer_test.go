package tokenizer

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"unicode/utf8"
)

func mustEncode(t *testing.T, tok *Tokenizer, s string) []int {
	t.Helper()
	ids, err := tok.Encode(s)
	if err != nil {
		t.Fatalf("encode %q: %v", s, err)
	}
	return ids
}

func concat(parts ...[]int) []int {
	var out []int
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// TestTinyFixture loads the test checkpoint's tokenizer and checks values read off its file:
// 272 vocabulary entries + 7 added tokens (ids 272..278), merge "Ġ t" → "Ġt", "Ġt he" → "Ġthe".
func TestTinyFixture(t *testing.T) {
	tok, err := Load(tinyPath)
	if err != nil {
		t.Fatal(err)
	}
	if tok.VocabSize() != 279 {
		t.Errorf("VocabSize = %d, want 279", tok.VocabSize())
	}
	id, ok := tok.TokenID("<|im_end|>")
	if !ok || id != 274 || !tok.IsSpecial(274) {
		t.Errorf("<|im_end|> = %d, %v, special %v; want 274 special", id, ok, tok.IsSpecial(274))
	}
	the, ok := tok.TokenID("Ġthe")
	if !ok {
		t.Fatal("Ġthe not in the tiny vocabulary")
	}
	ids := mustEncode(t, tok, " the<|im_end|>")
	if len(ids) != 2 || ids[0] != the || ids[1] != 274 {
		t.Errorf("encode(\" the<|im_end|>\") = %v, want [%d 274]", ids, the)
	}
	if got, _ := tok.Decode(ids, true); got != " the" {
		t.Errorf("decode skipping special = %q", got)
	}
	if got, _ := tok.Decode(ids, false); got != " the<|im_end|>" {
		t.Errorf("decode = %q", got)
	}
}

func tinyVariant(t *testing.T, edit func(m map[string]any)) *Tokenizer {
	t.Helper()
	data, err := os.ReadFile(tinyPath)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	data, _ = json.Marshal(m)
	tok, err := Parse(data)
	if err != nil {
		t.Fatalf("parse variant: %v", err)
	}
	return tok
}

func addTokens(m map[string]any, toks ...map[string]any) {
	list := m["added_tokens"].([]any)
	for _, tk := range toks {
		list = append(list, tk)
	}
	m["added_tokens"] = list
}

// TestAddedTokenFlags checks lstrip, rstrip and single_word as HF's AddedVocabulary defines
// them; the expected ids are the plain encodings of the pieces the flags should produce.
// The ids are the ones HF assigns: the next free ids after the fixture's 279, and for "é",
// which is already the vocabulary's token for byte 0xE9, its vocabulary id 233.
func TestAddedTokenFlags(t *testing.T) {
	tok := tinyVariant(t, func(m map[string]any) {
		addTokens(m,
			map[string]any{"id": 279, "content": "<mask>", "lstrip": true, "rstrip": false, "single_word": false, "normalized": false, "special": true},
			map[string]any{"id": 280, "content": "[R]", "lstrip": false, "rstrip": true, "single_word": false, "normalized": false, "special": false},
			map[string]any{"id": 281, "content": "cat", "lstrip": false, "rstrip": false, "single_word": true, "normalized": false, "special": false},
			map[string]any{"id": 233, "content": "é", "lstrip": false, "rstrip": false, "single_word": false, "normalized": true, "special": false},
		)
	})
	plain := testTokenizer(t, "tiny")
	p := func(s string) []int { return mustEncode(t, plain, s) }
	cases := []struct {
		in   string
		want []int
	}{
		{"a  \t<mask> b", concat(p("a"), []int{279}, p(" b"))},
		{"<mask>x", concat([]int{279}, p("x"))},
		{"a [R]  \n b", concat(p("a "), []int{280}, p("b"))},
		{"a cat b", concat(p("a "), []int{281}, p(" b"))},
		{"concat cats cat_ _cat", p("concat cats cat_ _cat")},
		{"cat", []int{281}},
		// normalized=true: matched after NFC, so a decomposed e + U+0301 also matches.
		{"e\u0301 é", concat([]int{233}, p(" "), []int{233})},
	}
	for _, c := range cases {
		if got := mustEncode(t, tok, c.in); !equalInts(got, c.want) {
			t.Errorf("encode %q = %v, want %v", c.in, got, c.want)
		}
	}
}

// TestSplitSpecial: with SplitSpecial, special tokens are plain text, non-special added
// tokens (Qwen's <think>) are still matched.
func TestSplitSpecial(t *testing.T) {
	tok := testTokenizer(t, "qwen3")
	imStart, _ := tok.TokenID("<|im_start|>")
	think, _ := tok.TokenID("<think>")
	if tok.IsSpecial(think) || !tok.IsSpecial(imStart) {
		t.Fatalf("Qwen3 <think> special=%v, <|im_start|> special=%v", tok.IsSpecial(think), tok.IsSpecial(imStart))
	}
	text := "<|im_start|>x<think>"
	normal := mustEncode(t, tok, text)
	if len(normal) != 3 || normal[0] != imStart || normal[2] != think {
		t.Errorf("encode %q = %v", text, normal)
	}
	split, err := tok.EncodeWith(text, EncodeOptions{SplitSpecial: true})
	if err != nil {
		t.Fatal(err)
	}
	wantText, _ := tok.Decode(split, false)
	if wantText != text || split[len(split)-1] != think || len(split) <= 3 {
		t.Errorf("split-special encode %q = %v (decodes to %q), want text tokens then <think>", text, split, wantText)
	}
	for _, id := range split {
		if id == imStart {
			t.Errorf("split-special encode still produced <|im_start|>: %v", split)
		}
	}
}

func TestEncodeInvalidUTF8(t *testing.T) {
	tok := testTokenizer(t, "qwen3")
	got := mustEncode(t, tok, "a\xffb\xe4\xb8")
	want := mustEncode(t, tok, "a\uFFFDb\uFFFD")
	if !equalInts(got, want) {
		t.Errorf("encode of invalid UTF-8 = %v, want %v (as with U+FFFD)", got, want)
	}
}

func TestDecodeUnknownID(t *testing.T) {
	tok := testTokenizer(t, "tiny")
	for _, ids := range [][]int{{1, 279}, {-1}, {1 << 30}} {
		if _, err := tok.Decode(ids, false); err == nil || !strings.Contains(err.Error(), "not in the vocabulary") {
			t.Errorf("decode %v: err = %v", ids, err)
		}
	}
	d := tok.NewStreamDecoder(false)
	if _, err := d.Add(5000); err == nil {
		t.Error("stream decoder accepted id 5000")
	}
	for id, want := range map[int]bool{1: true, 278: true, 279: false, -1: false, 1 << 30: false} {
		if tok.Known(id) != want {
			t.Errorf("Known(%d) = %v, want %v", id, !want, want)
		}
	}
}

// TestStreamDecoder: the streamed pieces are valid UTF-8, none is emitted before its last
// byte arrives, and their concatenation equals Decode — on random id sequences of the real
// vocabulary and of single-byte tokens.
func TestStreamDecoder(t *testing.T) {
	tok := testTokenizer(t, "qwen3")
	r := rand.New(rand.NewPCG(3, 4))
	text := "emoji 👨‍👩‍👧 中文 नमस्ते ñ €<|im_end|>"
	base := mustEncode(t, tok, text)
	for trial := range 300 {
		var ids []int
		switch trial % 3 {
		case 0:
			ids = base
		case 1: // random single-byte tokens: lots of invalid and partial sequences
			for range 1 + r.IntN(20) {
				ids = append(ids, int(tok.bpe.byteID[0x60+r.IntN(0xA0)]))
			}
		default: // random ids from the whole vocabulary
			for range 1 + r.IntN(20) {
				ids = append(ids, r.IntN(tok.VocabSize()))
			}
		}
		for _, skip := range []bool{false, true} {
			want, err := tok.Decode(ids, skip)
			if err != nil {
				t.Fatal(err)
			}
			d := tok.NewStreamDecoder(skip)
			var sb strings.Builder
			for _, id := range ids {
				s, err := d.Add(id)
				if err != nil {
					t.Fatal(err)
				}
				if !utf8.ValidString(s) {
					t.Fatalf("stream emitted invalid UTF-8 %q", s)
				}
				sb.WriteString(s)
			}
			sb.WriteString(d.Flush())
			if sb.String() != want {
				t.Fatalf("ids %v skip=%v: streamed %q, decode %q", ids, skip, sb.String(), want)
			}
		}
	}
	// Holding back: the 4 bytes of 😀 as single-byte tokens give "" three times, then 😀.
	d := tok.NewStreamDecoder(false)
	for i, c := range []byte("😀") {
		s, _ := d.Add(int(tok.bpe.byteID[c]))
		if (i < 3 && s != "") || (i == 3 && s != "😀") {
			t.Errorf("byte %d: emitted %q", i, s)
		}
	}
	// An unfinished sequence at the end becomes one U+FFFD.
	d.Add(int(tok.bpe.byteID[0xF0]))
	d.Add(int(tok.bpe.byteID[0x9F]))
	if s := d.Flush(); s != "\uFFFD" {
		t.Errorf("flush of F0 9F = %q, want U+FFFD", s)
	}
}

// TestAppendLossy pins the maximal-subpart rule on the examples of Unicode §3.9 (Table 3-8:
// "61 F1 80 80 E1 80 C2 62 80 63 80 BF 64" → a, FFFD, FFFD, FFFD, b, FFFD, c, FFFD, FFFD, d).
func TestAppendLossy(t *testing.T) {
	in := []byte{0x61, 0xF1, 0x80, 0x80, 0xE1, 0x80, 0xC2, 0x62, 0x80, 0x63, 0x80, 0xBF, 0x64}
	want := "a\uFFFD\uFFFD\uFFFDb\uFFFDc\uFFFD\uFFFDd"
	if got := string(appendLossy(nil, in)); got != want {
		t.Errorf("appendLossy = %q, want %q", got, want)
	}
}

// TestParseRefusals: each unsupported or broken field is refused with its name.
func TestParseRefusals(t *testing.T) {
	data, err := os.ReadFile(tinyPath)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		field string
		edit  func(m map[string]any)
	}{
		{"normalizer.type", func(m map[string]any) { m["normalizer"] = map[string]any{"type": "Lowercase"} }},
		{"pre_tokenizer.pretokenizers[0].behavior", func(m map[string]any) {
			m["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[0].(map[string]any)["behavior"] = "MergedWithPrevious"
		}},
		{"pre_tokenizer.pretokenizers[0]: regex", func(m map[string]any) {
			m["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[0].(map[string]any)["pattern"] = map[string]any{"Regex": "(unclosed"}
		}},
		{"pre_tokenizer.pretokenizers[1].add_prefix_space", func(m map[string]any) {
			m["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[1].(map[string]any)["add_prefix_space"] = true
		}},
		{"pre_tokenizer.type", func(m map[string]any) { m["pre_tokenizer"] = map[string]any{"type": "Whitespace"} }},
		{"post_processor.type", func(m map[string]any) { m["post_processor"] = map[string]any{"type": "TemplateProcessing"} }},
		{"decoder.type", func(m map[string]any) { m["decoder"] = map[string]any{"type": "WordPiece"} }},
		{"model.type", func(m map[string]any) { m["model"].(map[string]any)["type"] = "Unigram" }},
		{"model.dropout", func(m map[string]any) { m["model"].(map[string]any)["dropout"] = 0.1 }},
		{"model.byte_fallback", func(m map[string]any) { m["model"].(map[string]any)["byte_fallback"] = true }},
		{"model.merges[2]", func(m map[string]any) {
			m["model"].(map[string]any)["merges"].([]any)[2] = "i nvalid"
		}},
		{"model.merges[0]", func(m map[string]any) { m["model"].(map[string]any)["merges"].([]any)[0] = "nospace" }},
		{"model.vocab has no token for byte 0x41", func(m map[string]any) { delete(m["model"].(map[string]any)["vocab"].(map[string]any), "A") }},
		{"model.vocab[", func(m map[string]any) { m["model"].(map[string]any)["vocab"].(map[string]any)["zz"] = -3 }},
		{"added_tokens[1].content", func(m map[string]any) { m["added_tokens"].([]any)[1].(map[string]any)["content"] = "" }},
		{"added_tokens[2].content", func(m map[string]any) {
			m["added_tokens"].([]any)[2].(map[string]any)["content"] = "<|endoftext|>"
		}},
		{"truncation", func(m map[string]any) { m["truncation"] = map[string]any{"max_length": 8} }},
	}
	for _, c := range cases {
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatal(err)
		}
		c.edit(m)
		b, _ := json.Marshal(m)
		_, err := Parse(b)
		if err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("edit of %s: err = %v", c.field, err)
		}
	}
	if _, err := Parse([]byte("{")); err == nil {
		t.Error("truncated JSON accepted")
	}
	if _, err := Load("/nonexistent/tokenizer.json"); err == nil {
		t.Error("missing file accepted")
	}
}

// TestMergesArrayForm: merges written as ["a", "b"] pairs give the same tokenizer.
func TestMergesArrayForm(t *testing.T) {
	tok := tinyVariant(t, func(m map[string]any) {
		model := m["model"].(map[string]any)
		var pairs []any
		for _, s := range model["merges"].([]any) {
			a, b, _ := strings.Cut(s.(string), " ")
			pairs = append(pairs, []any{a, b})
		}
		model["merges"] = pairs
	})
	plain := testTokenizer(t, "tiny")
	for _, s := range []string{" the weather is in the well", "rerun an online answer"} {
		a, b := mustEncode(t, tok, s), mustEncode(t, plain, s)
		if !equalInts(a, b) {
			t.Errorf("%q: array-form merges %v, string-form %v", s, a, b)
		}
	}
}

// TestIgnoreMerges: with ignore_merges a pre-token that is itself in the vocabulary is one
// token even when the merges would not build it.
func TestIgnoreMerges(t *testing.T) {
	// "Ġwe" is not reachable by the tiny merges ("Ġ w" exists, "Ġw e" does not).
	tok := tinyVariant(t, func(m map[string]any) {
		model := m["model"].(map[string]any)
		model["vocab"].(map[string]any)["Ġwe"] = 272
		model["ignore_merges"] = true
		for _, a := range m["added_tokens"].([]any) { // keep the added ids consecutive after it
			a.(map[string]any)["id"] = a.(map[string]any)["id"].(float64) + 1
		}
	})
	if got := mustEncode(t, tok, " we"); !equalInts(got, []int{272}) {
		t.Errorf("ignore_merges encode \" we\" = %v, want [272]", got)
	}
	plain := testTokenizer(t, "tiny")
	if got := mustEncode(t, plain, " we"); len(got) != 2 {
		t.Errorf("without ignore_merges \" we\" = %v, want 2 tokens (Ġw, e)", got)
	}
}

// FuzzParse: the loader never panics, and what it accepts can encode and decode.
func FuzzParse(f *testing.F) {
	tiny, err := os.ReadFile(tinyPath)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(tiny)
	f.Add([]byte(`{"model":{"type":"BPE","vocab":{"a":0},"merges":[]},"pre_tokenizer":{"type":"ByteLevel"},"decoder":{"type":"ByteLevel"}}`))
	f.Add([]byte(`{"model":{"vocab":{},"merges":[["a","b"]]}}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		tok, err := Parse(data)
		if err != nil {
			return
		}
		ids, err := tok.Encode("Hello  world\n<|im_end|> 中文 'll 123")
		if err != nil {
			return
		}
		if _, err := tok.Decode(ids, true); err != nil {
			t.Fatalf("decode of own ids: %v", err)
		}
	})
}

// TestConcurrentEncode: one Tokenizer serves several goroutines (the pre-token cache is
// shared); every goroutine gets the single-threaded result.
func TestConcurrentEncode(t *testing.T) {
	tok := testTokenizer(t, "qwen3")
	texts := []string{"concurrent encoders share the cache", "中文 and English", "def f(x):\n    return x  # ok"}
	want := make([][]int, len(texts))
	for i, s := range texts {
		want[i] = mustEncode(t, tok, s)
	}
	errs := make(chan string, 64)
	done := make(chan struct{})
	for g := range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for k := range 50 {
				i := (g + k) % len(texts)
				got, err := tok.Encode(texts[i])
				if err != nil || !equalInts(got, want[i]) {
					errs <- texts[i]
					return
				}
			}
		}()
	}
	for range 4 {
		<-done
	}
	close(errs)
	for s := range errs {
		t.Errorf("concurrent encode of %q differs", s)
	}
}
