package tokenizer

import (
	"fmt"
	"unicode/utf8"
)

// DecodeBytes returns the raw bytes that ids stand for (possibly invalid UTF-8 when a
// multi-byte character is split across the end). With skipSpecial, special added tokens are
// left out. An id that no token has is an error naming the id and its position.
func (t *Tokenizer) DecodeBytes(ids []int, skipSpecial bool) ([]byte, error) {
	var out []byte
	for i, id := range ids {
		b, err := t.tokenBytesOf(id, i)
		if err != nil {
			return nil, err
		}
		if skipSpecial && t.special[id] {
			continue
		}
		out = append(out, b...)
	}
	return out, nil
}

// Decode returns the text of ids as HF tokenizers' decode(ids, skip_special_tokens) does with a
// ByteLevel decoder: bytes joined, then invalid UTF-8 replaced by U+FFFD, one per maximal
// invalid subpart (Rust String::from_utf8_lossy). No clean-up of tokenization spaces.
func (t *Tokenizer) Decode(ids []int, skipSpecial bool) (string, error) {
	b, err := t.DecodeBytes(ids, skipSpecial)
	if err != nil {
		return "", err
	}
	if utf8.Valid(b) {
		return string(b), nil
	}
	return string(appendLossy(nil, b)), nil
}

// Known reports whether id is a token of this tokenizer. A model's vocabulary
// is often padded past the tokenizer's (Qwen's embedding has more rows than
// tokens), so a sampled id may have no text.
func (t *Tokenizer) Known(id int) bool {
	return id >= 0 && id < len(t.idKnown) && t.idKnown[id]
}

func (t *Tokenizer) tokenBytesOf(id, pos int) ([]byte, error) {
	if id < 0 || id >= len(t.idKnown) || !t.idKnown[id] {
		return nil, fmt.Errorf("tokenizer: token id %d at position %d is not in the vocabulary (size %d)", id, pos, len(t.idKnown))
	}
	return t.idBytes[id], nil
}

// StreamDecoder turns ids arriving one at a time into text, emitting only complete UTF-8: a
// multi-byte character split across tokens is held back until its last byte arrives.
// The concatenation of everything Add and Flush return equals Decode of all ids.
type StreamDecoder struct {
	t           *Tokenizer
	skipSpecial bool
	pending     []byte // an incomplete UTF-8 sequence (at most 3 bytes)
	n           int    // ids seen, for error positions
}

// NewStreamDecoder starts a stream; skipSpecial as in Decode.
func (t *Tokenizer) NewStreamDecoder(skipSpecial bool) *StreamDecoder {
	return &StreamDecoder{t: t, skipSpecial: skipSpecial}
}

// Add feeds one id and returns the text that is now complete (possibly empty).
// An unknown id is an error and leaves the decoder unchanged.
func (d *StreamDecoder) Add(id int) (string, error) {
	b, err := d.t.tokenBytesOf(id, d.n)
	if err != nil {
		return "", err
	}
	d.n++
	if d.skipSpecial && d.t.special[id] {
		return "", nil
	}
	d.pending = append(d.pending, b...)
	k := completePrefix(d.pending)
	out := appendLossy(nil, d.pending[:k])
	d.pending = append(d.pending[:0], d.pending[k:]...)
	return string(out), nil
}

// Flush returns what is held back, an incomplete sequence becoming U+FFFD, and resets the
// decoder for a new stream.
func (d *StreamDecoder) Flush() string {
	out := appendLossy(nil, d.pending)
	d.pending = d.pending[:0]
	d.n = 0
	return string(out)
}

// completePrefix returns the length of the longest prefix of b after which no byte can change
// meaning: everything except a trailing incomplete (but so far valid) UTF-8 sequence.
func completePrefix(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-3; i-- {
		if b[i] < 0x80 {
			return len(b)
		}
		if b[i] >= 0xC0 { // a lead byte (or an invalid one): is the sequence from it incomplete?
			if n := validPrefixLen(b[i:]); n == len(b)-i && n < seqLen(b[i]) {
				return i
			}
			return len(b)
		}
	}
	return len(b)
}

// seqLen is the length of a well-formed sequence that starts with lead byte c (0 if invalid).
func seqLen(c byte) int {
	switch {
	case c < 0x80:
		return 1
	case c >= 0xC2 && c <= 0xDF:
		return 2
	case c >= 0xE0 && c <= 0xEF:
		return 3
	case c >= 0xF0 && c <= 0xF4:
		return 4
	}
	return 0
}

// validPrefixLen returns how many leading bytes of b form a prefix of a well-formed UTF-8
// sequence (Unicode Table 3-7), at most one sequence long; 0 for an invalid lead byte.
func validPrefixLen(b []byte) int {
	n := seqLen(b[0])
	if n == 0 {
		return 0
	}
	lo, hi := byte(0x80), byte(0xBF)
	switch b[0] {
	case 0xE0:
		lo = 0xA0
	case 0xED:
		hi = 0x9F
	case 0xF0:
		lo = 0x90
	case 0xF4:
		hi = 0x8F
	}
	k := 1
	for ; k < n && k < len(b); k++ {
		if b[k] < lo || b[k] > hi {
			break
		}
		lo, hi = 0x80, 0xBF
	}
	return k
}

// appendLossy appends b to dst with every maximal invalid subpart replaced by U+FFFD
// (the "substitution of maximal subparts" practice of Unicode §3.9, which Rust's
// from_utf8_lossy, Python's decode(errors="replace") and the WHATWG decoder follow).
func appendLossy(dst, b []byte) []byte {
	for i := 0; i < len(b); {
		if b[i] < 0x80 {
			dst = append(dst, b[i])
			i++
			continue
		}
		n := seqLen(b[i])
		k := validPrefixLen(b[i:])
		if n > 0 && k == n {
			dst = append(dst, b[i:i+n]...)
			i += n
			continue
		}
		dst = utf8.AppendRune(dst, utf8.RuneError)
		i += max(k, 1)
	}
	return dst
}
