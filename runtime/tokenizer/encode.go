package tokenizer

import (
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// EncodeOptions changes how Encode treats added tokens.
type EncodeOptions struct {
	// SplitSpecial makes special added tokens plain text (HF split_special_tokens /
	// encode_special_tokens): "<|im_start|>" typed by a user is then tokenized like any other
	// text. Non-special added tokens (Qwen's <think>, <tool_call>) are still matched.
	SplitSpecial bool
}

// Encode returns the token ids of text as HF tokenizers' encode(text, add_special_tokens)
// does for these files (no post-processor adds tokens). Added tokens in the text are
// recognized. Invalid UTF-8 in text is first replaced by U+FFFD (one per maximal invalid
// subpart, as Python's bytes.decode(errors="replace") does). An error comes only from a
// custom Split regex that times out.
func (t *Tokenizer) Encode(text string) ([]int, error) {
	return t.EncodeWith(text, EncodeOptions{})
}

// EncodeWith is Encode with options.
func (t *Tokenizer) EncodeWith(text string, opt EncodeOptions) ([]int, error) {
	if !utf8.ValidString(text) {
		text = string(appendLossy(nil, []byte(text)))
	}
	out := make([]int, 0, len(text)/3+4)
	var err error
	t.raw.split(text, opt.SplitSpecial, func(piece string, id int) {
		if err != nil {
			return
		}
		if id >= 0 {
			out = append(out, id)
			return
		}
		if t.nfc {
			piece = normalizeNFC(piece)
		}
		t.norm.split(piece, opt.SplitSpecial, func(p string, id int) {
			if err != nil {
				return
			}
			if id >= 0 {
				out = append(out, id)
				return
			}
			out, err = t.encodePiece(p, 0, out)
		})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// encodePiece runs splitters[level:] over s, then BPE on each pre-token.
func (t *Tokenizer) encodePiece(s string, level int, out []int) ([]int, error) {
	if level == len(t.splitters) {
		return t.bpe.encodeWord(s, out), nil
	}
	var err error
	serr := t.splitters[level].split(s, func(p string) {
		if err == nil {
			out, err = t.encodePiece(p, level+1, out)
		}
	})
	if serr != nil {
		return out, serr
	}
	return out, err
}

func normalizeNFC(s string) string {
	if norm.NFC.IsNormalString(s) {
		return s
	}
	return norm.NFC.String(s)
}

// addedMatcher finds added tokens in text, leftmost first and longest at a position, like the
// Aho-Corasick LeftmostLongest automaton of HF's AddedVocabulary.
type addedMatcher struct {
	first   [256]bool
	byFirst map[byte][]AddedToken // longest content first
}

func newAddedMatcher(toks []AddedToken) *addedMatcher {
	m := &addedMatcher{byFirst: make(map[byte][]AddedToken)}
	for _, a := range toks {
		c := a.Content[0]
		m.first[c] = true
		m.byFirst[c] = append(m.byFirst[c], a)
	}
	for _, l := range m.byFirst {
		sort.SliceStable(l, func(i, j int) bool { return len(l[i].Content) > len(l[j].Content) })
	}
	return m
}

// split calls emit for each piece of s in order: id ≥ 0 for an added token, -1 for text.
// It follows HF AddedVocabulary::split_with_indices: single_word matches next to a word
// character are skipped; lstrip/rstrip widen the match over adjacent whitespace.
func (m *addedMatcher) split(s string, splitSpecial bool, emit func(string, int)) {
	if len(m.byFirst) == 0 {
		if s != "" {
			emit(s, -1)
		}
		return
	}
	start := 0 // end of the previous match
	for i := 0; i < len(s); i++ {
		if !m.first[s[i]] {
			continue
		}
		var tok *AddedToken
		for k := range m.byFirst[s[i]] {
			a := &m.byFirst[s[i]][k]
			if strings.HasPrefix(s[i:], a.Content) {
				tok = a
				break
			}
		}
		if tok == nil {
			continue
		}
		mStart, mEnd := i, i+len(tok.Content)
		if splitSpecial && tok.Special {
			i = mEnd - 1 // HF still finds the match, then drops it: the search goes on after it
			continue
		}
		if tok.SingleWord {
			before, _ := utf8.DecodeLastRuneInString(s[:mStart])
			after, _ := utf8.DecodeRuneInString(s[mEnd:])
			if (mStart > 0 && isWordChar(before)) || (mEnd < len(s) && isWordChar(after)) {
				i = mEnd - 1
				continue
			}
		}
		if tok.LStrip {
			j := mStart
			for j > start {
				r, n := utf8.DecodeLastRuneInString(s[:j])
				if !unicode.IsSpace(r) {
					break
				}
				j -= n
			}
			mStart = j
		}
		if tok.RStrip {
			for mEnd < len(s) {
				r, n := utf8.DecodeRuneInString(s[mEnd:])
				if !unicode.IsSpace(r) {
					break
				}
				mEnd += n
			}
		}
		if mStart > start {
			emit(s[start:mStart], -1)
		}
		emit(s[mStart:mEnd], tok.ID)
		start = mEnd
		i = mEnd - 1
	}
	if start < len(s) {
		emit(s[start:], -1)
	}
}

// isWordChar is HF's word-character test for single_word tokens: alphanumeric or '_'.
func isWordChar(r rune) bool {
	return r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r)
}
