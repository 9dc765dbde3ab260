package tokenizer

import (
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2/v2"
)

// Split patterns as tokenizer.json spells them (hub-and-go.md §B14).
const (
	// QwenPattern is the Split regex of the Qwen2 and Qwen3 tokenizers.
	QwenPattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// Qwen35Pattern is the Qwen3.5 variant: combining marks (\p{M}) join letters
	// (llama.cpp LLAMA_VOCAB_PRE_TYPE_QWEN35).
	Qwen35Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// gpt2Pattern is what HF's ByteLevel pre-tokenizer splits with when use_regex is true.
	gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
)

// regexTimeout bounds one regexp2 search so that a pathological pattern from a hostile
// tokenizer.json cannot hang Encode; the Qwen patterns never come near it.
const regexTimeout = time.Second

// splitter cuts a piece of normalized text into pre-tokens (HF Split, behavior Isolated:
// every match and every gap between matches is a pre-token; empty ones are dropped).
type splitter interface {
	split(s string, emit func(string)) error
}

// newRegexSplitter compiles a tokenizer.json Split regex. The two Qwen patterns get a
// hand-written matcher (qwenSplitter) that the tests check against regexp2.
func newRegexSplitter(pattern string) (splitter, error) {
	switch pattern {
	case QwenPattern:
		return qwenSplitter{marks: false}, nil
	case Qwen35Pattern:
		return qwenSplitter{marks: true}, nil
	}
	return compileRegexSplitter(pattern)
}

func compileRegexSplitter(pattern string) (*regexSplitter, error) {
	re, err := compileRegexp(pattern)
	if err != nil {
		return nil, err
	}
	return &regexSplitter{re: re}, nil
}

// compileRegexp compiles with .NET semantics (regexp2.None): \s is Unicode White_Space and
// \p{..} are Unicode categories, as in Oniguruma, which HF tokenizers uses.
func compileRegexp(pattern string) (re *regexp2.Regexp, err error) {
	defer func() {
		if r := recover(); r != nil {
			re, err = nil, fmt.Errorf("regex %q: %v", pattern, r)
		}
	}()
	re, err = regexp2.Compile(pattern, regexp2.None)
	if err != nil {
		return nil, fmt.Errorf("regex %q: %w", pattern, err)
	}
	re.MatchTimeout = regexTimeout
	return re, nil
}

type regexSplitter struct{ re *regexp2.Regexp }

func (r *regexSplitter) split(s string, emit func(string)) error {
	idx, err := r.re.FindAllStringIndex(s, -1)
	if err != nil {
		return fmt.Errorf("split regex: %w", err)
	}
	prev := 0
	for _, m := range idx {
		if m[0] > prev {
			emit(s[prev:m[0]])
		}
		if m[1] > m[0] {
			emit(s[m[0]:m[1]])
		}
		prev = m[1]
	}
	if prev < len(s) {
		emit(s[prev:])
	}
	return nil
}

// literalSplitter is Split with a String pattern.
type literalSplitter struct{ lit string }

func newLiteralSplitter(lit string) (splitter, error) {
	if lit == "" {
		return nil, fmt.Errorf("pattern.String is empty")
	}
	return literalSplitter{lit: lit}, nil
}

func (l literalSplitter) split(s string, emit func(string)) error {
	for {
		i := strings.Index(s, l.lit)
		if i < 0 {
			break
		}
		if i > 0 {
			emit(s[:i])
		}
		emit(s[i : i+len(l.lit)])
		s = s[i+len(l.lit):]
	}
	if s != "" {
		emit(s)
	}
	return nil
}

// qwenSplitter matches QwenPattern (marks false) or Qwen35Pattern (marks true) by hand.
// The alternatives are tried in pattern order at each position, exactly as a backtracking
// engine would; every character is covered by some alternative, so the matches tile the input.
type qwenSplitter struct{ marks bool }

func isWS(r rune) bool { return unicode.IsSpace(r) } // = Unicode White_Space = .NET/Oniguruma \s

func (q qwenSplitter) isLet(r rune) bool {
	return unicode.IsLetter(r) || (q.marks && unicode.IsMark(r))
}

// other is the class [^\s\p{L}\p{N}] (Qwen3.5: [^\s\p{L}\p{M}\p{N}]).
func (q qwenSplitter) other(r rune) bool {
	return !isWS(r) && !unicode.IsLetter(r) && !unicode.IsNumber(r) && !(q.marks && unicode.IsMark(r))
}

func (q qwenSplitter) split(s string, emit func(string)) error {
	q.splitUntil(s, func(p string) bool { emit(p); return true })
	return nil
}

// untilSplitter is a splitter that can stop early: splitUntil calls emit for each piece of s
// in order until emit returns false (Tokenizer.EncodeLimit then skips the rest of the text).
type untilSplitter interface {
	splitUntil(s string, emit func(string) bool)
}

func (q qwenSplitter) splitUntil(s string, emit func(string) bool) {
	for i := 0; i < len(s); {
		n := q.match(s, i)
		if !emit(s[i : i+n]) {
			return
		}
		i += n
	}
}

func at(s string, i int) (rune, int) {
	if i >= len(s) {
		return -1, 0
	}
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[i:])
}

// match returns the byte length (> 0) of the match that starts at i.
func (q qwenSplitter) match(s string, i int) int {
	r0, n0 := at(s, i)
	// (?i:'s|'t|'re|'ve|'m|'ll|'d). Case folding is Unicode simple folding, as in Oniguruma
	// (which HF tokenizers uses) and regexp2: the only non-ASCII letter in those orbits is
	// U+017F LATIN SMALL LETTER LONG S, which folds to 's'.
	if r0 == '\'' && strings.HasPrefix(s[i+1:], "\u017f") {
		return 1 + len("\u017f")
	}
	if r0 == '\'' && i+1 < len(s) {
		c1 := s[i+1] | 0x20
		switch c1 {
		case 's', 't', 'm', 'd':
			if s[i+1] == c1 || s[i+1] == c1-0x20 {
				return 2
			}
		case 'r', 'v', 'l':
			want := byte('e')
			if c1 == 'l' {
				want = 'l'
			}
			if (s[i+1] == c1 || s[i+1] == c1-0x20) && i+2 < len(s) && (s[i+2]|0x20) == want &&
				(s[i+2] == want || s[i+2] == want-0x20) {
				return 3
			}
		}
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+  (Qwen3.5: [^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+)
	if r0 != '\r' && r0 != '\n' && !unicode.IsLetter(r0) && !unicode.IsNumber(r0) {
		if r1, _ := at(s, i+n0); r1 >= 0 && q.isLet(r1) {
			return n0 + q.letRun(s, i+n0)
		}
	}
	if q.isLet(r0) {
		return q.letRun(s, i)
	}
	// \p{N}
	if unicode.IsNumber(r0) {
		return n0
	}
	// ` ?[^\s\p{L}\p{N}]+[\r\n]*`
	j := i
	if r0 == ' ' {
		j += n0
	}
	if r, _ := at(s, j); r >= 0 && q.other(r) {
		for {
			r, n := at(s, j)
			if r < 0 || !q.other(r) {
				break
			}
			j += n
		}
		for j < len(s) && (s[j] == '\r' || s[j] == '\n') {
			j++
		}
		return j - i
	}
	// Only whitespace is left here: r0 is \s.
	end, lastNL := i, -1
	for {
		r, n := at(s, end)
		if r < 0 || !isWS(r) {
			break
		}
		if r == '\r' || r == '\n' {
			lastNL = end
		}
		end += n
	}
	// \s*[\r\n]+ : \s* gives back characters until [\r\n]+ can match at the last newline.
	if lastNL >= 0 {
		return lastNL + 1 - i
	}
	// \s+(?!\S) : the whole run at the end of the text, else the run less its last character.
	if end == len(s) {
		return end - i
	}
	if _, lastN := utf8.DecodeLastRuneInString(s[i:end]); end-lastN > i {
		return end - lastN - i
	}
	// \s+
	if end > i {
		return end - i
	}
	return n0 // unreachable for valid UTF-8: every character is in some class above
}

func (q qwenSplitter) letRun(s string, i int) int {
	j := i
	for {
		r, n := at(s, j)
		if r < 0 || !q.isLet(r) {
			return j - i
		}
		j += n
	}
}
