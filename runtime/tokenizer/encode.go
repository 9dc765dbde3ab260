package tokenizer

import (
	"errors"
	"fmt"
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
	return t.encode(text, opt, -1)
}

// ErrLimit is EncodeLimit's error for a text of more tokens than the limit.
var ErrLimit = errors.New("tokenizer: the text has more tokens than the limit")

// EncodeLimit is EncodeWith for a caller that refuses texts of more than limit tokens (a
// server bounded by its context): when text has at most limit tokens it returns exactly
// EncodeWith's ids; otherwise it returns ErrLimit (and no ids) as soon as that is certain,
// without looking at the rest of the text. Its memory is then O(limit) ids besides the
// normalized text, whatever the length of text: encoding stops after the pre-token that
// passes the limit, and a piece longer than the remaining tokens can cover is refused without
// splitting or merging it (a token stands for at most as many bytes as the longest vocabulary
// entry has characters, and the pre-tokens of a piece tile it). A negative limit is an error.
func (t *Tokenizer) EncodeLimit(text string, opt EncodeOptions, limit int) ([]int, error) {
	if limit < 0 {
		return nil, fmt.Errorf("tokenizer: token limit %d must not be negative", limit)
	}
	return t.encode(text, opt, limit)
}

// encode runs the pipeline; limit < 0: no limit, else ErrLimit past limit ids.
func (t *Tokenizer) encode(text string, opt EncodeOptions, limit int) ([]int, error) {
	if !utf8.ValidString(text) {
		text = string(appendLossy(nil, []byte(text)))
	}
	hint := len(text)/3 + 4
	if limit >= 0 {
		hint = min(hint, limit+1)
	}
	out := make([]int, 0, hint)
	var err error
	// Each callback reports whether to go on: after an error (ErrLimit included) the rest of
	// the text is not looked at.
	t.raw.split(text, opt.SplitSpecial, func(piece string, id int) bool {
		if id >= 0 {
			out = append(out, id)
			if limit >= 0 && len(out) > limit {
				err = ErrLimit
			}
			return err == nil
		}
		if t.nfc {
			piece = normalizeNFC(piece)
		}
		t.norm.split(piece, opt.SplitSpecial, func(p string, id int) bool {
			if id >= 0 {
				out = append(out, id)
				if limit >= 0 && len(out) > limit {
					err = ErrLimit
				}
			} else {
				out, err = t.encodePiece(p, 0, out, limit)
			}
			return err == nil
		})
		return err == nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// encodePiece runs splitters[level:] over s, then BPE on each pre-token; limit as in encode.
func (t *Tokenizer) encodePiece(s string, level int, out []int, limit int) ([]int, error) {
	if limit >= 0 {
		// The pre-tokens of s tile it and no token stands for more than maxTok bytes, so s
		// needs at least ⌈len(s)/maxTok⌉ tokens: refuse without splitting or merging when
		// they cannot fit.
		if b := t.bpe.maxTok; b > 0 && (len(s)+b-1)/b > limit-len(out) {
			return out, ErrLimit
		}
	}
	if level == len(t.splitters) {
		out = t.bpe.encodeWord(s, out)
		if limit >= 0 && len(out) > limit {
			return out, ErrLimit
		}
		return out, nil
	}
	var err error
	emit := func(p string) bool {
		out, err = t.encodePiece(p, level+1, out, limit)
		return err == nil
	}
	var serr error
	if u, ok := t.splitters[level].(untilSplitter); ok {
		u.splitUntil(s, emit) // stops at the first error (ErrLimit) instead of walking the rest
	} else {
		serr = t.splitters[level].split(s, func(p string) {
			if err == nil {
				emit(p)
			}
		})
	}
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

// split calls emit for each piece of s in order: id ≥ 0 for an added token, -1 for text,
// until emit returns false. It follows HF AddedVocabulary::split_with_indices: single_word
// matches next to a word character are skipped; lstrip/rstrip widen the match over adjacent
// whitespace.
func (m *addedMatcher) split(s string, splitSpecial bool, emit func(string, int) bool) {
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
		if mStart > start && !emit(s[start:mStart], -1) {
			return
		}
		if !emit(s[mStart:mEnd], tok.ID) {
			return
		}
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
