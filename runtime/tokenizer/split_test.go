package tokenizer

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// splitAlphabet holds characters from every class the Qwen patterns distinguish: ASCII
// letters (also the contraction letters in both cases), marks, numbers of all three kinds,
// the whitespace characters (newlines and the Unicode spaces), apostrophes, punctuation,
// symbols, CJK, emoji parts, format characters and U+017F (folds to 's').
var splitAlphabet = []rune{
	'a', 's', 'S', 't', 'T', 'r', 'R', 'e', 'E', 'v', 'V', 'm', 'M', 'l', 'L', 'd', 'D', 'x',
	'\'', '\'', '\'', '"', '.', ',', '-', '_', '(', ')', '{', '<', '>', '|', '#', '\\',
	'0', '7', '٣', 'Ⅻ', '½', '²',
	' ', ' ', ' ', '\t', '\n', '\n', '\r', '\v', '\f', 0x85, 0xA0, 0x1680, 0x2003, 0x2028, 0x2029, 0x202F, 0x3000,
	0x0301, 0x0308, 0x093F, 0x0E31, 0x200D, 0xFE0F, 0x200B, 0xFEFF,
	'é', 'ß', 'ſ', 'K', 'Ω', 'あ', '中', 'ह', 'ก', '😀', '🏽', '€', '∑',
}

func randomText(r *rand.Rand, n int) string {
	var sb strings.Builder
	for range n {
		sb.WriteRune(splitAlphabet[r.IntN(len(splitAlphabet))])
	}
	return sb.String()
}

func collect(t testing.TB, sp splitter, s string) []string {
	var out []string
	if err := sp.split(s, func(p string) { out = append(out, p) }); err != nil {
		t.Fatalf("split %q: %v", s, err)
	}
	return out
}

// TestQwenSplitterMatchesRegexp2 checks the hand-written matcher against regexp2 running the
// pattern text itself, on random strings over splitAlphabet (both Qwen patterns).
func TestQwenSplitterMatchesRegexp2(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, pat := range []string{QwenPattern, Qwen35Pattern} {
		re, err := compileRegexSplitter(pat)
		if err != nil {
			t.Fatal(err)
		}
		fast, _ := newRegexSplitter(pat)
		if _, ok := fast.(qwenSplitter); !ok {
			t.Fatalf("pattern %q did not select the hand-written matcher", pat)
		}
		for i := range 4000 {
			s := randomText(r, 1+i%40)
			want := collect(t, re, s)
			got := collect(t, fast, s)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("pattern %d, %q:\n hand    %q\n regexp2 %q", len(pat), s, got, want)
			}
			if strings.Join(got, "") != s {
				t.Fatalf("pieces of %q do not tile it: %q", s, got)
			}
		}
	}
}

// TestQwenSplitExamples pins pre-tokenizations that hub-and-go.md §B14 names (Python `regex`
// gives these; the naive lookahead-free rewrite does not).
func TestQwenSplitExamples(t *testing.T) {
	cases := []struct {
		in   string
		want []string
	}{
		{"a  b", []string{"a", " ", " b"}},
		{"Hello world", []string{"Hello", " world"}},
		{"x   ", []string{"x", "   "}},
		{"a \n\n b", []string{"a", " \n\n", " b"}},
		{"it's", []string{"it", "'s"}},
		{"IT'S", []string{"IT", "'S"}},
		{"123", []string{"1", "2", "3"}},
		{" ...\n\nx", []string{" ...\n\n", "x"}},
	}
	for _, c := range cases {
		if got := collect(t, qwenSplitter{}, c.in); !reflect.DeepEqual(got, c.want) {
			t.Errorf("split %q = %q, want %q", c.in, got, c.want)
		}
	}
	// \p{M} joins the letter run only with the Qwen3.5 pattern.
	if got := collect(t, qwenSplitter{}, "a\u0301b"); !reflect.DeepEqual(got, []string{"a", "\u0301b"}) {
		t.Errorf("qwen3 split of a+U+0301+b = %q", got)
	}
	if got := collect(t, qwenSplitter{marks: true}, "a\u0301b"); !reflect.DeepEqual(got, []string{"a\u0301b"}) {
		t.Errorf("qwen3.5 split of a+U+0301+b = %q", got)
	}
}

// FuzzQwenSplit compares the hand-written matcher with regexp2 on arbitrary valid UTF-8.
func FuzzQwenSplit(f *testing.F) {
	for _, s := range []string{"a  b", "it's 'ſt", "\r\n \t\n", "x\u0301\u0302 y", "😀‍👩 ١٢", "   "} {
		f.Add(s)
	}
	re2, err := compileRegexSplitter(QwenPattern)
	if err != nil {
		f.Fatal(err)
	}
	re35, err := compileRegexSplitter(Qwen35Pattern)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) || len(s) > 4096 {
			return
		}
		for _, c := range []struct {
			re   splitter
			hand qwenSplitter
		}{{re2, qwenSplitter{}}, {re35, qwenSplitter{marks: true}}} {
			want := collect(t, c.re, s)
			got := collect(t, c.hand, s)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("marks=%v %q:\n hand    %q\n regexp2 %q", c.hand.marks, s, got, want)
			}
		}
	})
}
