package tokenizer

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Goldens come from tools/tokenizer_goldens.mjs (@huggingface/tokenizers, required) and
// tools/tokenizer_goldens.py (HF tokenizers in Python, checked when its file exists).
const (
	testdataDir   = "../../testdata/tokenizer"
	jsGoldenPath  = testdataDir + "/goldens_js.json"
	pyGoldenPath  = testdataDir + "/goldens_py.json"
	qwen3Path     = testdataDir + "/qwen3/tokenizer.json.gz"
	tinyPath      = "../../testdata/hub/lithos-test/tiny-sharded/tokenizer.json"
	regenerateCmd = "node tools/tokenizer_goldens.mjs --npm /tmp/lithos-npm --out testdata/tokenizer"
)

type goldenCase struct {
	Tokenizer          string  `json:"tokenizer"`
	Name               string  `json:"name"`
	Text               string  `json:"text"`
	IDs                []int   `json:"ids"`
	Decoded            string  `json:"decoded"`
	DecodedSkipSpecial *string `json:"decoded_skip_special"`
	SplitSpecial       bool    `json:"split_special"`
}

type goldenFile struct {
	Oracle      string                 `json:"oracle"`
	Variants    map[string]variantJSON `json:"variants"`
	Versions    map[string]string      `json:"versions"`
	Cases       []goldenCase           `json:"cases"`
	DecodeCases []goldenCase           `json:"decode_cases"`
}

// variantJSON is a tokenizer made from a base test tokenizer by appending added tokens.
type variantJSON struct {
	Base            string            `json:"base"`
	ExtraAddedToken []json.RawMessage `json:"extra_added_tokens"`
}

var (
	variantsMu sync.Mutex
	variants   = map[string]variantJSON{}

	qwen3JSONOnce sync.Once
	qwen3JSON     []byte
	qwen3JSONErr  error

	tokCacheMu sync.Mutex
	tokCache   = map[string]*Tokenizer{}
)

func readQwen3JSON(t testing.TB) []byte {
	t.Helper()
	qwen3JSONOnce.Do(func() {
		f, err := os.Open(qwen3Path)
		if err != nil {
			qwen3JSONErr = err
			return
		}
		defer f.Close()
		zr, err := gzip.NewReader(f)
		if err != nil {
			qwen3JSONErr = err
			return
		}
		qwen3JSON, qwen3JSONErr = io.ReadAll(zr)
	})
	if qwen3JSONErr != nil {
		t.Fatalf("read %s (made by %s): %v", qwen3Path, regenerateCmd, qwen3JSONErr)
	}
	return qwen3JSON
}

// testTokenizer returns "qwen3", "qwen35" (Qwen3 with the Qwen3.5 split pattern), "tiny",
// "qwen3-regexp2" / "qwen35-regexp2" (the same files, split by regexp2 instead of the
// hand-written matcher) or a variant made by a test.
func testTokenizer(t testing.TB, name string) *Tokenizer {
	t.Helper()
	tokCacheMu.Lock()
	defer tokCacheMu.Unlock()
	if tok, ok := tokCache[name]; ok {
		return tok
	}
	var data []byte
	switch name {
	case "qwen3", "qwen3-regexp2":
		data = readQwen3JSON(t)
	case "qwen35", "qwen35-regexp2":
		data = withPattern(t, readQwen3JSON(t), Qwen35Pattern)
	case "tiny":
		var err error
		if data, err = os.ReadFile(tinyPath); err != nil {
			t.Fatal(err)
		}
	default:
		variantsMu.Lock()
		v, ok := variants[name]
		variantsMu.Unlock()
		if !ok || v.Base != "tiny" {
			t.Fatalf("unknown test tokenizer %q", name)
		}
		base, err := os.ReadFile(tinyPath)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(base, &m); err != nil {
			t.Fatal(err)
		}
		var added []json.RawMessage
		if err := json.Unmarshal(m["added_tokens"], &added); err != nil {
			t.Fatal(err)
		}
		m["added_tokens"], _ = json.Marshal(append(added, v.ExtraAddedToken...))
		data, _ = json.Marshal(m)
	}
	tok, err := Parse(data)
	if err != nil {
		t.Fatalf("parse %s: %v", name, err)
	}
	if strings.HasSuffix(name, "-regexp2") {
		pat := QwenPattern
		if strings.HasPrefix(name, "qwen35") {
			pat = Qwen35Pattern
		}
		re, err := compileRegexSplitter(pat)
		if err != nil {
			t.Fatal(err)
		}
		tok.splitters = []splitter{re}
	}
	tokCache[name] = tok
	return tok
}

func withPattern(t testing.TB, data []byte, pattern string) []byte {
	t.Helper()
	oldQ, _ := json.Marshal(QwenPattern)
	newQ, _ := json.Marshal(pattern)
	if bytes.Count(data, oldQ) != 1 {
		t.Fatalf("the Qwen3 tokenizer.json does not hold the Qwen split pattern exactly once")
	}
	return bytes.Replace(data, oldQ, newQ, 1)
}

func readGoldens(t testing.TB, path string) *goldenFile {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	var g goldenFile
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	if len(g.Cases) == 0 {
		t.Fatalf("%s has no cases", path)
	}
	return &g
}

func checkGoldens(t *testing.T, g *goldenFile, suffix string) {
	variantsMu.Lock()
	for name, v := range g.Variants {
		variants[name] = v
	}
	variantsMu.Unlock()
	for _, c := range g.Cases {
		tok := testTokenizer(t, c.Tokenizer+suffix)
		ids, err := tok.EncodeWith(c.Text, EncodeOptions{SplitSpecial: c.SplitSpecial})
		if err != nil {
			t.Errorf("%s/%s: encode: %v", c.Tokenizer, c.Name, err)
			continue
		}
		if !equalInts(ids, c.IDs) {
			i := firstDiff(ids, c.IDs)
			t.Errorf("%s/%s: ids differ at %d of %d/%d: got %v, want %v", c.Tokenizer+suffix, c.Name, i,
				len(ids), len(c.IDs), window(ids, i), window(c.IDs, i))
			continue
		}
		got, err := tok.Decode(c.IDs, false)
		if err != nil || got != c.Decoded {
			t.Errorf("%s/%s: decode = %q, %v; want %q", c.Tokenizer, c.Name, trunc(got), err, trunc(c.Decoded))
		}
		if c.DecodedSkipSpecial != nil {
			got, err := tok.Decode(c.IDs, true)
			if err != nil || got != *c.DecodedSkipSpecial {
				t.Errorf("%s/%s: decode(skip special) = %q, %v; want %q", c.Tokenizer, c.Name, trunc(got), err, trunc(*c.DecodedSkipSpecial))
			}
		}
	}
	for i, c := range g.DecodeCases {
		tok := testTokenizer(t, c.Tokenizer)
		got, err := tok.Decode(c.IDs, false)
		if err != nil || got != c.Decoded {
			t.Errorf("decode case %d %v: got %q, %v; want %q", i, c.IDs, got, err, c.Decoded)
		}
		if c.DecodedSkipSpecial != nil {
			got, err := tok.Decode(c.IDs, true)
			if err != nil || got != *c.DecodedSkipSpecial {
				t.Errorf("decode case %d %v (skip special): got %q, %v; want %q", i, c.IDs, got, err, *c.DecodedSkipSpecial)
			}
		}
		// Streaming must give the same text.
		if got := streamAll(t, tok, c.IDs, false); got != c.Decoded {
			t.Errorf("decode case %d %v: streamed %q, want %q", i, c.IDs, got, c.Decoded)
		}
	}
}

// TestGoldensJS is the required oracle check (see tools/tokenizer_goldens.mjs).
func TestGoldensJS(t *testing.T) {
	g := readGoldens(t, jsGoldenPath)
	checkGoldens(t, g, "")
}

// TestGoldensJSRegexp2 runs the same cases with the generic regexp2 splitter in place of the
// hand-written Qwen matcher.
func TestGoldensJSRegexp2(t *testing.T) {
	g := readGoldens(t, jsGoldenPath)
	var keep []goldenCase
	for _, c := range g.Cases {
		if c.Tokenizer != "tiny" {
			keep = append(keep, c)
		}
	}
	g.Cases, g.DecodeCases = keep, nil
	checkGoldens(t, g, "-regexp2")
}

// TestGoldensPython checks the goldens of HF tokenizers (Python/Rust) made on the GPU machine
// by tools/tokenizer_goldens.py.
func TestGoldensPython(t *testing.T) {
	if _, err := os.Stat(pyGoldenPath); err != nil {
		t.Fatalf("%s: %v: make it with `python3 tools/tokenizer_goldens.py --out testdata/tokenizer` on the GPU machine", filepath.Base(pyGoldenPath), err)
	}
	g := readGoldens(t, pyGoldenPath)
	checkGoldens(t, g, "")
}

func streamAll(t *testing.T, tok *Tokenizer, ids []int, skip bool) string {
	d := tok.NewStreamDecoder(skip)
	var sb strings.Builder
	for _, id := range ids {
		s, err := d.Add(id)
		if err != nil {
			t.Fatalf("stream add %d: %v", id, err)
		}
		sb.WriteString(s)
	}
	sb.WriteString(d.Flush())
	return sb.String()
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func firstDiff(a, b []int) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func window(a []int, i int) []int {
	lo, hi := max(0, i-3), min(len(a), i+4)
	return a[lo:hi]
}

func trunc(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}
