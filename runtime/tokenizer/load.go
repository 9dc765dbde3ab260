package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"
	"unicode/utf8"
)

// MaxFileBytes bounds the size of a tokenizer.json that Load reads (512 MiB; the Qwen3 file is
// 11.4 MB, Qwen3.5's about 20 MB).
const MaxFileBytes = 512 << 20

// maxTokenID bounds token ids so that a hostile file cannot make the id tables huge (2M ids
// take about 55 MB of tables; real vocabularies are below 300k: Qwen3.5 has 248,044 entries).
const maxTokenID = 1<<21 - 1

// AddedToken is one entry of tokenizer.json's "added_tokens": a string matched in the text
// before pre-tokenization and mapped to one id.
type AddedToken struct {
	ID         int    // token id (as HF assigns it; see buildIDs)
	Content    string // the literal text
	Special    bool   // skipped by Decode with skipSpecial; not matched when EncodeOptions.SplitSpecial
	Normalized bool   // matched against the normalized text instead of the raw text
	LStrip     bool   // a match swallows the whitespace on its left
	RStrip     bool   // a match swallows the whitespace on its right
	SingleWord bool   // matched only where it is not next to a word character
}

// Tokenizer is a loaded byte-level BPE tokenizer. It is safe for concurrent use.
type Tokenizer struct {
	vocab     map[string]int // model vocabulary: byte-level token string → id
	idBytes   [][]byte       // id → decoded bytes (nil where no token has that id)
	idKnown   []bool         // id → some token has it
	special   []bool         // id → added token marked special
	added     []AddedToken   // as listed in the file
	raw       *addedMatcher  // added tokens with normalized=false
	norm      *addedMatcher  // added tokens with normalized=true (content normalized)
	nfc       bool           // normalizer NFC
	splitters []splitter     // applied in order to every normalized piece
	bpe       *bpeModel
}

type fileJSON struct {
	Version       string           `json:"version"`
	Truncation    json.RawMessage  `json:"truncation"`
	Padding       json.RawMessage  `json:"padding"`
	AddedTokens   []addedTokenJSON `json:"added_tokens"`
	Normalizer    json.RawMessage  `json:"normalizer"`
	PreTokenizer  json.RawMessage  `json:"pre_tokenizer"`
	PostProcessor json.RawMessage  `json:"post_processor"`
	Decoder       json.RawMessage  `json:"decoder"`
	Model         *modelJSON       `json:"model"`
}

type addedTokenJSON struct {
	ID         *int    `json:"id"`
	Content    *string `json:"content"`
	SingleWord bool    `json:"single_word"`
	LStrip     bool    `json:"lstrip"`
	RStrip     bool    `json:"rstrip"`
	Normalized bool    `json:"normalized"`
	Special    bool    `json:"special"`
}

type modelJSON struct {
	Type                    string          `json:"type"`
	Dropout                 *float64        `json:"dropout"`
	UnkToken                *string         `json:"unk_token"`
	ContinuingSubwordPrefix *string         `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string         `json:"end_of_word_suffix"`
	FuseUnk                 bool            `json:"fuse_unk"`
	ByteFallback            bool            `json:"byte_fallback"`
	IgnoreMerges            bool            `json:"ignore_merges"`
	Vocab                   map[string]int  `json:"vocab"`
	Merges                  json.RawMessage `json:"merges"`
}

type typedJSON struct {
	Type string `json:"type"`
}

// Load reads and parses a tokenizer.json file (at most MaxFileBytes).
// Errors name the file and the field that breaks a rule.
func Load(path string) (*Tokenizer, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("tokenizer: read %s: %w", path, err)
	}
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("tokenizer: %s is larger than %d bytes", path, MaxFileBytes)
	}
	t, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// Parse builds a Tokenizer from the bytes of a tokenizer.json. It supports what the Qwen
// files use (see the package doc) and refuses anything else with an error naming the field.
func Parse(data []byte) (*Tokenizer, error) {
	var f fileJSON
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("tokenizer: parse tokenizer.json: %w", err)
	}
	if !isNull(f.Truncation) {
		return nil, fmt.Errorf("tokenizer: truncation must be null (not supported)")
	}
	if !isNull(f.Padding) {
		return nil, fmt.Errorf("tokenizer: padding must be null (not supported)")
	}
	t := &Tokenizer{}
	var err error
	if t.nfc, err = parseNormalizer(f.Normalizer); err != nil {
		return nil, err
	}
	if t.splitters, err = parsePreTokenizer(f.PreTokenizer); err != nil {
		return nil, err
	}
	if err := checkPostProcessor(f.PostProcessor); err != nil {
		return nil, err
	}
	if err := checkDecoder(f.Decoder); err != nil {
		return nil, err
	}
	if f.Model == nil {
		return nil, fmt.Errorf("tokenizer: model is missing")
	}
	if t.bpe, err = parseModel(f.Model); err != nil {
		return nil, err
	}
	if err := t.buildIDs(f.Model.Vocab, f.AddedTokens); err != nil {
		return nil, err
	}
	return t, nil
}

func isNull(m json.RawMessage) bool {
	s := strings.TrimSpace(string(m))
	return s == "" || s == "null"
}

func typeOf(m json.RawMessage, field string) (string, error) {
	var t typedJSON
	if err := json.Unmarshal(m, &t); err != nil {
		return "", fmt.Errorf("tokenizer: %s: %w", field, err)
	}
	return t.Type, nil
}

// parseNormalizer accepts null, NFC, and a Sequence of those; it reports whether NFC applies.
func parseNormalizer(m json.RawMessage) (bool, error) {
	if isNull(m) {
		return false, nil
	}
	typ, err := typeOf(m, "normalizer")
	if err != nil {
		return false, err
	}
	switch typ {
	case "NFC":
		return true, nil
	case "Sequence":
		var s struct {
			Normalizers []json.RawMessage `json:"normalizers"`
		}
		if err := json.Unmarshal(m, &s); err != nil {
			return false, fmt.Errorf("tokenizer: normalizer: %w", err)
		}
		nfc := false
		for i, n := range s.Normalizers {
			typ, err := typeOf(n, fmt.Sprintf("normalizer.normalizers[%d]", i))
			if err != nil {
				return false, err
			}
			if typ != "NFC" {
				return false, fmt.Errorf("tokenizer: normalizer.normalizers[%d].type %q is not supported (only NFC)", i, typ)
			}
			nfc = true
		}
		return nfc, nil
	}
	return false, fmt.Errorf("tokenizer: normalizer.type %q is not supported (only null, NFC, Sequence of NFC)", typ)
}

type splitJSON struct {
	Type    string `json:"type"`
	Pattern struct {
		Regex  *string `json:"Regex"`
		String *string `json:"String"`
	} `json:"pattern"`
	Behavior string `json:"behavior"`
	Invert   bool   `json:"invert"`
}

type byteLevelJSON struct {
	Type           string `json:"type"`
	AddPrefixSpace bool   `json:"add_prefix_space"`
	TrimOffsets    bool   `json:"trim_offsets"`
	UseRegex       *bool  `json:"use_regex"`
}

// parsePreTokenizer accepts ByteLevel alone or Sequence[Split..., ByteLevel] with ByteLevel
// last (the byte mapping itself happens in the BPE step).
func parsePreTokenizer(m json.RawMessage) ([]splitter, error) {
	if isNull(m) {
		return nil, fmt.Errorf("tokenizer: pre_tokenizer is null; a ByteLevel pre-tokenizer is required")
	}
	typ, err := typeOf(m, "pre_tokenizer")
	if err != nil {
		return nil, err
	}
	var steps []json.RawMessage
	prefix := "pre_tokenizer"
	switch typ {
	case "Sequence":
		var s struct {
			Pretokenizers []json.RawMessage `json:"pretokenizers"`
		}
		if err := json.Unmarshal(m, &s); err != nil {
			return nil, fmt.Errorf("tokenizer: pre_tokenizer: %w", err)
		}
		steps = s.Pretokenizers
		prefix = "pre_tokenizer.pretokenizers"
	case "ByteLevel":
		steps = []json.RawMessage{m}
	default:
		return nil, fmt.Errorf("tokenizer: pre_tokenizer.type %q is not supported (only Sequence of Split and ByteLevel, or ByteLevel)", typ)
	}
	if len(steps) == 0 {
		return nil, fmt.Errorf("tokenizer: %s is empty; a ByteLevel pre-tokenizer is required", prefix)
	}
	var out []splitter
	for i, step := range steps {
		field := fmt.Sprintf("%s[%d]", prefix, i)
		typ, err := typeOf(step, field)
		if err != nil {
			return nil, err
		}
		switch typ {
		case "Split":
			if i == len(steps)-1 {
				return nil, fmt.Errorf("tokenizer: %s: the last pre-tokenizer must be ByteLevel", field)
			}
			var s splitJSON
			if err := json.Unmarshal(step, &s); err != nil {
				return nil, fmt.Errorf("tokenizer: %s: %w", field, err)
			}
			if s.Behavior != "Isolated" {
				return nil, fmt.Errorf("tokenizer: %s.behavior %q is not supported (only Isolated)", field, s.Behavior)
			}
			if s.Invert {
				return nil, fmt.Errorf("tokenizer: %s.invert true is not supported", field)
			}
			var sp splitter
			switch {
			case s.Pattern.Regex != nil && s.Pattern.String == nil:
				sp, err = newRegexSplitter(*s.Pattern.Regex)
			case s.Pattern.String != nil && s.Pattern.Regex == nil:
				sp, err = newLiteralSplitter(*s.Pattern.String)
			default:
				err = fmt.Errorf("pattern must have exactly one of Regex, String")
			}
			if err != nil {
				return nil, fmt.Errorf("tokenizer: %s: %w", field, err)
			}
			out = append(out, sp)
		case "ByteLevel":
			if i != len(steps)-1 {
				return nil, fmt.Errorf("tokenizer: %s: ByteLevel must be the last pre-tokenizer", field)
			}
			var b byteLevelJSON
			if err := json.Unmarshal(step, &b); err != nil {
				return nil, fmt.Errorf("tokenizer: %s: %w", field, err)
			}
			if b.AddPrefixSpace {
				return nil, fmt.Errorf("tokenizer: %s.add_prefix_space true is not supported", field)
			}
			// HF's default for a missing use_regex is true.
			if b.UseRegex == nil || *b.UseRegex {
				sp, err := newRegexSplitter(gpt2Pattern)
				if err != nil {
					return nil, fmt.Errorf("tokenizer: %s: %w", field, err)
				}
				out = append(out, sp)
			}
		default:
			return nil, fmt.Errorf("tokenizer: %s.type %q is not supported (only Split, ByteLevel)", field, typ)
		}
	}
	return out, nil
}

func checkPostProcessor(m json.RawMessage) error {
	if isNull(m) {
		return nil
	}
	typ, err := typeOf(m, "post_processor")
	if err != nil {
		return err
	}
	if typ != "ByteLevel" {
		return fmt.Errorf("tokenizer: post_processor.type %q is not supported (only null or ByteLevel; Encode adds no special tokens)", typ)
	}
	return nil
}

func checkDecoder(m json.RawMessage) error {
	if isNull(m) {
		return fmt.Errorf("tokenizer: decoder is null; a ByteLevel decoder is required")
	}
	typ, err := typeOf(m, "decoder")
	if err != nil {
		return err
	}
	if typ != "ByteLevel" {
		return fmt.Errorf("tokenizer: decoder.type %q is not supported (only ByteLevel)", typ)
	}
	return nil
}

func parseModel(m *modelJSON) (*bpeModel, error) {
	if m.Type != "BPE" && !(m.Type == "" && len(m.Merges) > 0) {
		return nil, fmt.Errorf("tokenizer: model.type %q is not supported (only BPE)", m.Type)
	}
	if m.Dropout != nil && *m.Dropout != 0 {
		return nil, fmt.Errorf("tokenizer: model.dropout %v is not supported (only null)", *m.Dropout)
	}
	if m.ByteFallback {
		return nil, fmt.Errorf("tokenizer: model.byte_fallback true is not supported (byte-level BPE needs none)")
	}
	if m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "" {
		return nil, fmt.Errorf("tokenizer: model.continuing_subword_prefix %q is not supported (only empty)", *m.ContinuingSubwordPrefix)
	}
	if m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "" {
		return nil, fmt.Errorf("tokenizer: model.end_of_word_suffix %q is not supported (only empty)", *m.EndOfWordSuffix)
	}
	if len(m.Vocab) == 0 {
		return nil, fmt.Errorf("tokenizer: model.vocab is empty")
	}
	for tok, id := range m.Vocab {
		if id < 0 || id > maxTokenID {
			return nil, fmt.Errorf("tokenizer: model.vocab[%q] = %d is outside [0, %d]", tok, id, maxTokenID)
		}
	}
	b := &bpeModel{vocab: m.Vocab, ignoreMerges: m.IgnoreMerges, unk: -1}
	if m.UnkToken != nil {
		id, ok := m.Vocab[*m.UnkToken]
		if !ok {
			return nil, fmt.Errorf("tokenizer: model.unk_token %q is not in model.vocab", *m.UnkToken)
		}
		b.unk = id
	}
	for tok := range m.Vocab {
		b.maxTok = max(b.maxTok, utf8.RuneCountInString(tok))
	}
	if m.UnkToken != nil && *m.UnkToken == "" {
		b.maxTok = 0
	}
	// Every byte must have a token, or some text could not be encoded.
	for c := 0; c < 256; c++ {
		id, ok := m.Vocab[string(byteToRune[c])]
		if !ok {
			if b.unk < 0 {
				return nil, fmt.Errorf("tokenizer: model.vocab has no token for byte 0x%02x (%q) and no unk_token", c, string(byteToRune[c]))
			}
			id = b.unk
		}
		b.byteID[c] = int32(id)
	}
	merges, err := parseMerges(m.Merges)
	if err != nil {
		return nil, err
	}
	b.merges = make(map[uint64]mergeInfo, len(merges))
	for rank, mg := range merges {
		a, ok1 := m.Vocab[mg[0]]
		c, ok2 := m.Vocab[mg[1]]
		n, ok3 := m.Vocab[mg[0]+mg[1]]
		if !ok1 || !ok2 || !ok3 {
			return nil, fmt.Errorf("tokenizer: model.merges[%d] %q %q: a part or their concatenation is not in model.vocab", rank, mg[0], mg[1])
		}
		k := pairKey(int32(a), int32(c))
		if _, dup := b.merges[k]; dup {
			continue // HF keeps the first (lowest) rank of a repeated pair
		}
		b.merges[k] = mergeInfo{rank: int32(rank), id: int32(n)}
	}
	if m.IgnoreMerges {
		b.rawVocab = make(map[string]int32, len(m.Vocab))
		for tok, id := range m.Vocab {
			if raw, ok := byteLevelDecode(tok); ok {
				b.rawVocab[string(raw)] = int32(id)
			}
		}
	}
	return b, nil
}

// parseMerges accepts both forms HF writes: ["a b", ...] and [["a", "b"], ...].
func parseMerges(m json.RawMessage) ([][2]string, error) {
	if isNull(m) {
		return nil, nil
	}
	var strs []string
	if err := json.Unmarshal(m, &strs); err == nil {
		out := make([][2]string, len(strs))
		for i, s := range strs {
			a, b, ok := strings.Cut(s, " ")
			if !ok || a == "" || b == "" || strings.Contains(b, " ") {
				return nil, fmt.Errorf("tokenizer: model.merges[%d] %q is not two tokens separated by one space", i, s)
			}
			out[i] = [2]string{a, b}
		}
		return out, nil
	}
	var pairs [][]string
	if err := json.Unmarshal(m, &pairs); err != nil {
		return nil, fmt.Errorf("tokenizer: model.merges must be a list of \"a b\" strings or of [a, b] pairs: %w", err)
	}
	out := make([][2]string, len(pairs))
	for i, p := range pairs {
		if len(p) != 2 || p[0] == "" || p[1] == "" {
			return nil, fmt.Errorf("tokenizer: model.merges[%d] must be two non-empty tokens, got %d", i, len(p))
		}
		out[i] = [2]string{p[0], p[1]}
	}
	return out, nil
}

// buildIDs fills the id tables from the model vocabulary and the added tokens.
//
// Added-token ids are assigned as HF tokenizers assigns them when it loads a file
// (AddedVocabulary::add_tokens), not read from the file: a content already in the model
// vocabulary keeps its vocabulary id; any other token gets the next id after
// max(len(model.vocab), the largest added id so far + 1). HF warns when that differs from
// the "id" written in the file, and so do we (log/slog); in real Qwen files they agree.
func (t *Tokenizer) buildIDs(vocab map[string]int, added []addedTokenJSON) error {
	t.vocab = vocab
	maxID := 0
	for _, id := range vocab {
		maxID = max(maxID, id)
	}
	t.added = make([]AddedToken, 0, len(added))
	seen := make(map[string]int, len(added))
	maxAdded := -1
	for i, a := range added {
		if a.ID == nil || a.Content == nil {
			return fmt.Errorf("tokenizer: added_tokens[%d] needs both id and content", i)
		}
		if *a.ID < 0 || *a.ID > maxTokenID {
			return fmt.Errorf("tokenizer: added_tokens[%d].id %d is outside [0, %d]", i, *a.ID, maxTokenID)
		}
		if *a.Content == "" || !utf8.ValidString(*a.Content) {
			return fmt.Errorf("tokenizer: added_tokens[%d].content must be non-empty UTF-8", i)
		}
		if j, dup := seen[*a.Content]; dup {
			return fmt.Errorf("tokenizer: added_tokens[%d].content %q repeats added_tokens[%d]", i, *a.Content, j)
		}
		seen[*a.Content] = i
		id, inVocab := vocab[*a.Content]
		if !inVocab {
			switch {
			case maxAdded < 0:
				id = len(vocab)
			case maxAdded >= len(vocab):
				id = maxAdded + 1
			default:
				id = len(vocab)
			}
		}
		if id > maxTokenID {
			return fmt.Errorf("tokenizer: added_tokens[%d] would get id %d, outside [0, %d]", i, id, maxTokenID)
		}
		maxAdded = max(maxAdded, id)
		if id != *a.ID {
			slog.Warn("tokenizer: added token gets another id than tokenizer.json says, as in HF tokenizers",
				"content", *a.Content, "file_id", *a.ID, "id", id)
		}
		maxID = max(maxID, id)
		t.added = append(t.added, AddedToken{ID: id, Content: *a.Content, Special: a.Special,
			Normalized: a.Normalized, LStrip: a.LStrip, RStrip: a.RStrip, SingleWord: a.SingleWord})
	}
	t.idBytes = make([][]byte, maxID+1)
	t.idKnown = make([]bool, maxID+1)
	t.special = make([]bool, maxID+1)
	for tok, id := range vocab {
		t.idBytes[id] = tokenBytes(tok)
		t.idKnown[id] = true
	}
	var rawTok, normTok []AddedToken
	for _, a := range t.added {
		t.idBytes[a.ID] = tokenBytes(a.Content)
		t.idKnown[a.ID] = true
		t.special[a.ID] = a.Special
		if a.Normalized && t.nfc {
			a.Content = normalizeNFC(a.Content)
			normTok = append(normTok, a)
		} else if a.Normalized {
			normTok = append(normTok, a)
		} else {
			rawTok = append(rawTok, a)
		}
	}
	t.raw = newAddedMatcher(rawTok)
	t.norm = newAddedMatcher(normTok)
	return nil
}

// tokenBytes is what the HF ByteLevel decoder makes of one token: its characters mapped back
// through the byte table, or, if any character is not in the table, the token's own UTF-8.
func tokenBytes(tok string) []byte {
	if b, ok := byteLevelDecode(tok); ok {
		return b
	}
	return []byte(tok)
}

// VocabSize is one more than the largest token id (model vocabulary and added tokens).
func (t *Tokenizer) VocabSize() int { return len(t.idBytes) }

// AddedTokens returns the added tokens as listed in tokenizer.json.
func (t *Tokenizer) AddedTokens() []AddedToken { return append([]AddedToken(nil), t.added...) }

// TokenID returns the id of an added token's content or of a model vocabulary entry
// (byte-level spelling, e.g. "Ġthe"), and whether it exists.
func (t *Tokenizer) TokenID(token string) (int, bool) {
	for _, a := range t.added {
		if a.Content == token {
			return a.ID, true
		}
	}
	id, ok := t.vocab[token]
	return id, ok
}

// IsSpecial reports whether id is an added token marked special.
func (t *Tokenizer) IsSpecial(id int) bool {
	return id >= 0 && id < len(t.special) && t.special[id]
}

// SpecialTokens lists the contents of the special added tokens, sorted.
func (t *Tokenizer) SpecialTokens() []string {
	var out []string
	for _, a := range t.added {
		if a.Special {
			out = append(out, a.Content)
		}
	}
	sort.Strings(out)
	return out
}
