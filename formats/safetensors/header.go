package safetensors

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"unicode/utf8"
)

// MaxHeaderLen is the largest header (JSON part, N) accepted, in bytes:
// the reference crate's MAX_HEADER_SIZE (README "Prevent DOS attacks").
// huggingface_hub caps remote header reads lower, at 25,000,000 bytes
// (hub-and-go.md §A1); that cap belongs to the Hub client.
const MaxHeaderLen = 100_000_000

// InitialReadLen is the size of ReadHeader's first read, in bytes: the
// 100,000-byte first range request of huggingface_hub's
// parse_safetensors_file_metadata (hub-and-go.md §A13), which holds the whole
// header of most models, so a remote read usually needs one request.
const InitialReadLen = 100_000

// Rule names a format rule that a header can break. Every *FormatError
// carries one; the string appears in the error message.
type Rule string

// The rules a header, index or writer input can break.
const (
	RuleHeaderLength Rule = "header-length" // file shorter than 8 bytes; N > MaxHeaderLen; 8+N past the end of the file
	RuleUTF8         Rule = "utf8"          // header or a name is not valid UTF-8
	RuleJSON         Rule = "json"          // not one JSON object, syntax error, trailing bytes, lone surrogate escape
	RuleDuplicate    Rule = "duplicate-key" // a key repeated in the header, __metadata__ or an index weight_map
	RuleField        Rule = "field"         // tensor entry not an object, or a missing, repeated or unknown field
	RuleDType        Rule = "dtype"         // dtype not a string naming a dtype of the current format
	RuleShape        Rule = "shape"         // shape not an array of non-negative integers
	RuleOverflow     Rule = "overflow"      // element, bit or byte count overflows (int64 / uint64)
	RuleWholeBytes   Rule = "whole-bytes"   // sub-byte dtype whose total bit count is not a multiple of 8
	RuleOffsets      Rule = "data-offsets"  // data_offsets not [begin, end] with 0 <= begin <= end < 2^64
	RuleSize         Rule = "size"          // shape × dtype bits / 8 differs from end − begin
	RulePastEOF      Rule = "past-eof"      // a tensor's range ends past the end of the file
	RuleOverlap      Rule = "overlap"       // two tensors' ranges share bytes
	RuleGap          Rule = "gap"           // data section bytes owned by no tensor (holes, leading or trailing bytes)
	RuleMetadata     Rule = "metadata"      // __metadata__ not an object of string values
	RuleName         Rule = "name"          // writer: tensor name "__metadata__"
	RuleIndex        Rule = "index"         // index file: missing weight_map, bad shard name, shards disagree with it
)

// FormatError is the error returned for a file, header, index or writer input
// that breaks the format. It names the tensor (when the rule concerns one) and
// the rule; Detail says what was found, with byte positions where known.
type FormatError struct {
	Tensor string // tensor name, or the __metadata__ / weight_map key; see HasTensor
	Rule   Rule
	Detail string
	// HasTensor is false when the rule concerns the whole header or file
	// (then Tensor is ""); true when Tensor names the offending entry
	// (which may be the empty name "").
	HasTensor bool
}

func (e *FormatError) Error() string {
	if e.HasTensor {
		return fmt.Sprintf("safetensors: tensor %q: %s: %s", e.Tensor, e.Rule, e.Detail)
	}
	return fmt.Sprintf("safetensors: %s: %s", e.Rule, e.Detail)
}

func fileErr(rule Rule, format string, args ...any) *FormatError {
	return &FormatError{Rule: rule, Detail: fmt.Sprintf(format, args...)}
}

func tensorErr(name string, rule Rule, format string, args ...any) *FormatError {
	return &FormatError{Tensor: name, HasTensor: true, Rule: rule, Detail: fmt.Sprintf(format, args...)}
}

// Tensor is one tensor of a safetensors file, as located by its header.
type Tensor struct {
	Name  string
	DType DType
	// Shape is the logical shape, outermost first (row-major); [] is a
	// scalar. For F4 the last dimension counts elements, two per byte.
	Shape  []int64
	Offset int64 // absolute byte offset of the data in the file: 8 + N + data_offsets[0]
	Size   int64 // bytes: data_offsets[1] − data_offsets[0]
}

// NumElements returns the product of the shape (1 for a scalar, 0 for an
// empty tensor). For a Tensor of a validated Header it cannot overflow.
func (t Tensor) NumElements() int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// Header is the parsed, validated header of one safetensors file.
type Header struct {
	Metadata  map[string]string // "__metadata__"; nil when absent or null
	Tensors   []Tensor          // sorted by Offset (then Size, then Name), tiling the data section
	HeaderLen int64             // N, the JSON length in bytes (u64 LE in bytes 0..8), padding included
	DataStart int64             // 8 + N: absolute offset of the data section

	index map[string]int // name → position in Tensors
}

// Lookup returns the tensor called name.
func (h *Header) Lookup(name string) (Tensor, bool) {
	if h.index != nil {
		i, ok := h.index[name]
		if !ok {
			return Tensor{}, false
		}
		return h.Tensors[i], true
	}
	for _, t := range h.Tensors {
		if t.Name == name {
			return t, true
		}
	}
	return Tensor{}, false
}

// DataSize returns the size of the data section in bytes: the end of the last
// tensor's range relative to DataStart (file size − DataStart for a header
// read from a file).
func (h *Header) DataSize() int64 {
	var end int64
	for _, t := range h.Tensors {
		end = max(end, t.Offset+t.Size-h.DataStart)
	}
	return end
}

// ReadHeader reads and validates the header of a safetensors file of size
// bytes (the whole file) through r, without reading tensor data. It issues one
// ReadAt of min(size, InitialReadLen) bytes at offset 0 and, only when 8+N is
// longer than that, a second ReadAt for the rest of the header. It never
// allocates more than min(size, InitialReadLen) bytes before N has been
// checked against MaxHeaderLen and size. Errors: a *FormatError (errors.As)
// for a header that breaks a Rule; a wrapped read error otherwise.
func ReadHeader(r io.ReaderAt, size int64) (*Header, error) {
	if size < 8 {
		return nil, fileErr(RuleHeaderLength, "file of %d bytes is shorter than the 8-byte header length", size)
	}
	first := make([]byte, min(size, InitialReadLen))
	if err := readFullAt(r, first, 0); err != nil {
		return nil, fmt.Errorf("safetensors: read first %d bytes: %w", len(first), err)
	}
	n := binary.LittleEndian.Uint64(first[:8])
	if n > MaxHeaderLen {
		return nil, fileErr(RuleHeaderLength, "header length %d exceeds the %d-byte limit", n, MaxHeaderLen)
	}
	if n > uint64(size-8) {
		return nil, fileErr(RuleHeaderLength, "header length %d runs past the end of the %d-byte file", n, size)
	}
	end := 8 + int64(n)
	var js []byte
	if end <= int64(len(first)) {
		js = first[8:end]
	} else {
		js = make([]byte, n)
		copied := copy(js, first[8:])
		if err := readFullAt(r, js[copied:], int64(len(first))); err != nil {
			return nil, fmt.Errorf("safetensors: read header bytes [%d, %d): %w", len(first), end, err)
		}
	}
	return ParseHeader(js, size)
}

// readFullAt fills p from r at off; a short read is an error
// (io.ErrUnexpectedEOF when the reader reported io.EOF).
func readFullAt(r io.ReaderAt, p []byte, off int64) error {
	got, err := r.ReadAt(p, off)
	if got == len(p) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		return fmt.Errorf("got %d of %d bytes: %w", got, len(p), io.ErrUnexpectedEOF)
	}
	return err
}

// ParseHeader parses and validates js, the N-byte JSON part of a safetensors
// file of fileSize bytes (the whole file: 8 + N + data section). See the
// package doc for the rules checked; every violation is a *FormatError naming
// the tensor (when one is concerned) and the Rule.
func ParseHeader(js []byte, fileSize int64) (*Header, error) {
	n := int64(len(js))
	if n > MaxHeaderLen {
		return nil, fileErr(RuleHeaderLength, "header length %d exceeds the %d-byte limit", n, MaxHeaderLen)
	}
	if fileSize < 8 || fileSize-8 < n {
		return nil, fileErr(RuleHeaderLength, "header length %d runs past the end of the %d-byte file", n, fileSize)
	}
	dataSize := uint64(fileSize - 8 - n)
	if !utf8.Valid(js) {
		return nil, fileErr(RuleUTF8, "header is not valid UTF-8 (first bad byte at header offset %d)", firstInvalidUTF8(js))
	}
	p := parser{b: js}
	raw, meta, err := p.header()
	if err != nil {
		return nil, err
	}
	h := &Header{
		Metadata:  meta,
		Tensors:   make([]Tensor, 0, len(raw)),
		HeaderLen: n,
		DataStart: 8 + n,
		index:     make(map[string]int, len(raw)),
	}
	for i := range raw {
		rt := &raw[i]
		d, err := ParseDType(rt.dtype)
		if err != nil {
			return nil, tensorErr(rt.name, RuleDType, "unknown dtype %q", rt.dtype)
		}
		if rt.end < rt.begin {
			return nil, tensorErr(rt.name, RuleOffsets, "data_offsets [%d, %d] end before begin", rt.begin, rt.end)
		}
		if rt.end > dataSize {
			return nil, tensorErr(rt.name, RulePastEOF, "data_offsets [%d, %d] end past the %d-byte data section (file %d bytes, data starts at %d)",
				rt.begin, rt.end, dataSize, fileSize, 8+n)
		}
		shape := make([]int64, len(rt.shape))
		for j, s := range rt.shape {
			if s > maxInt64 {
				return nil, tensorErr(rt.name, RuleOverflow, "dimension %d = %d exceeds int64", j, s)
			}
			shape[j] = int64(s)
		}
		_, nbytes, rule, msg := elementBytes(rt.shape, d.Bits())
		if rule != "" {
			return nil, tensorErr(rt.name, rule, "shape %v dtype %s: %s", rt.shape, d, msg)
		}
		if uint64(nbytes) != rt.end-rt.begin {
			return nil, tensorErr(rt.name, RuleSize, "shape %v × %s (%d bits) = %d bytes, but data_offsets [%d, %d] hold %d bytes",
				rt.shape, d, d.Bits(), nbytes, rt.begin, rt.end, rt.end-rt.begin)
		}
		h.Tensors = append(h.Tensors, Tensor{
			Name:   rt.name,
			DType:  d,
			Shape:  shape,
			Offset: 8 + n + int64(rt.begin),
			Size:   int64(rt.end - rt.begin),
		})
	}
	// Key order means nothing: sort by range, as the crate does, then check
	// that the ranges tile [0, dataSize).
	slices.SortFunc(h.Tensors, func(a, b Tensor) int {
		return cmp.Or(cmp.Compare(a.Offset, b.Offset), cmp.Compare(a.Size, b.Size), cmp.Compare(a.Name, b.Name))
	})
	pos := h.DataStart
	for i, t := range h.Tensors {
		switch {
		case t.Offset > pos:
			return nil, tensorErr(t.Name, RuleGap, "data section bytes [%d, %d) before this tensor belong to no tensor",
				pos-h.DataStart, t.Offset-h.DataStart)
		case t.Offset < pos:
			prev := h.Tensors[i-1]
			return nil, tensorErr(t.Name, RuleOverlap, "data_offsets [%d, %d] overlap tensor %q [%d, %d]",
				t.Offset-h.DataStart, t.Offset+t.Size-h.DataStart, prev.Name, prev.Offset-h.DataStart, prev.Offset+prev.Size-h.DataStart)
		}
		pos = t.Offset + t.Size
		h.index[t.Name] = i
	}
	if pos != fileSize {
		if len(h.Tensors) == 0 {
			return nil, fileErr(RuleGap, "no tensors, but the data section holds %d bytes", fileSize-pos)
		}
		last := h.Tensors[len(h.Tensors)-1]
		return nil, tensorErr(last.Name, RuleGap, "data section bytes [%d, %d) after the last tensor belong to no tensor",
			pos-h.DataStart, fileSize-h.DataStart)
	}
	return h, nil
}

// firstInvalidUTF8 returns the offset of the first byte of b that does not
// start a valid UTF-8 sequence.
func firstInvalidUTF8(b []byte) int {
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size <= 1 {
			return i
		}
		i += size
	}
	return len(b)
}
