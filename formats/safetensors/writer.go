package safetensors

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"unicode/utf8"
)

// TensorSpec describes a tensor to write: its name, dtype and logical shape
// (outermost first; [] is a scalar; for F4 the last dimension counts
// elements, two per byte).
type TensorSpec struct {
	Name  string
	DType DType
	Shape []int64
}

// PythonOrder returns a copy of specs sorted the way the Python/Rust
// safetensors writer lays tensors out: by dtype rank descending (the order of
// the crate's Dtype enum, widest alignment first), then by name bytewise
// (tensor.rs prepare). Unknown dtypes sort last. With this order and at most
// one metadata key, EncodeHeader's output is byte-identical to the header of
// safetensors.torch.save_file.
func PythonOrder(specs []TensorSpec) []TensorSpec {
	out := slices.Clone(specs)
	rank := func(d DType) int {
		if info, ok := dtypeTable[d]; ok {
			return info.rank
		}
		return -1
	}
	slices.SortStableFunc(out, func(a, b TensorSpec) int {
		return cmp.Or(cmp.Compare(rank(b.DType), rank(a.DType)), cmp.Compare(a.Name, b.Name))
	})
	return out
}

// EncodeHeader lays out specs in the given order and returns the file prefix
// — the 8-byte little-endian N followed by the N-byte header JSON, padded with
// spaces so that N is a multiple of 8 — and the tensors with absolute
// offsets (the first starts at len(prefix)). metadata nil writes no
// "__metadata__" key; a non-nil empty map writes "__metadata__":{} (as the
// Python package does for metadata={}); keys are written sorted. Errors
// (*FormatError naming the tensor): unknown dtype, negative dimension,
// overflow, sub-byte size not in whole bytes, duplicate name, the name
// "__metadata__", invalid UTF-8, a header longer than MaxHeaderLen.
func EncodeHeader(specs []TensorSpec, metadata map[string]string) (prefix []byte, tensors []Tensor, err error) {
	js := make([]byte, 8, 64+64*len(specs))
	js = append(js, '{')
	if metadata != nil {
		var mdLen int
		for k, v := range metadata {
			mdLen += len(k) + len(v)
		}
		if mdLen > MaxHeaderLen {
			return nil, nil, fileErr(RuleHeaderLength, "metadata of %d bytes exceeds the %d-byte header limit", mdLen, MaxHeaderLen)
		}
		keys := make([]string, 0, len(metadata))
		for k, v := range metadata {
			if !utf8.ValidString(k) || !utf8.ValidString(v) {
				return nil, nil, tensorErr(metadataKey, RuleUTF8, "key %q or its value is not valid UTF-8", k)
			}
			keys = append(keys, k)
		}
		slices.Sort(keys)
		js = appendJSONString(js, metadataKey)
		js = append(js, ":{"...)
		for i, k := range keys {
			if i > 0 {
				js = append(js, ',')
			}
			js = appendJSONString(js, k)
			js = append(js, ':')
			js = appendJSONString(js, metadata[k])
		}
		js = append(js, '}')
	}
	seen := make(map[string]struct{}, len(specs))
	tensors = make([]Tensor, len(specs))
	var begin int64
	for i, s := range specs {
		switch {
		case s.Name == metadataKey:
			return nil, nil, tensorErr(s.Name, RuleName, "%q is reserved for the metadata map", metadataKey)
		case !utf8.ValidString(s.Name):
			return nil, nil, tensorErr(s.Name, RuleUTF8, "name is not valid UTF-8")
		}
		if _, dup := seen[s.Name]; dup {
			return nil, nil, tensorErr(s.Name, RuleDuplicate, "tensor appears twice in the specs")
		}
		seen[s.Name] = struct{}{}
		info, ok := dtypeTable[s.DType]
		if !ok {
			return nil, nil, tensorErr(s.Name, RuleDType, "unknown dtype %q", string(s.DType))
		}
		u := make([]uint64, len(s.Shape))
		for j, d := range s.Shape {
			if d < 0 {
				return nil, nil, tensorErr(s.Name, RuleShape, "dimension %d is negative (%d)", j, d)
			}
			u[j] = uint64(d)
		}
		_, nbytes, rule, msg := elementBytes(u, info.bits)
		if rule != "" {
			return nil, nil, tensorErr(s.Name, rule, "shape %v dtype %s: %s", s.Shape, s.DType, msg)
		}
		if begin > maxInt64-nbytes {
			return nil, nil, tensorErr(s.Name, RuleOverflow, "data section exceeds int64 bytes")
		}
		end := begin + nbytes
		if len(js) > 9 {
			js = append(js, ',')
		}
		js = appendJSONString(js, s.Name)
		js = append(js, `:{"dtype":`...)
		js = appendJSONString(js, string(s.DType))
		js = append(js, `,"shape":[`...)
		for j, d := range s.Shape {
			if j > 0 {
				js = append(js, ',')
			}
			js = strconv.AppendInt(js, d, 10)
		}
		js = append(js, `],"data_offsets":[`...)
		js = strconv.AppendInt(js, begin, 10)
		js = append(js, ',')
		js = strconv.AppendInt(js, end, 10)
		js = append(js, "]}"...)
		tensors[i] = Tensor{Name: s.Name, DType: s.DType, Shape: slices.Clone(s.Shape), Offset: begin, Size: nbytes}
		begin = end
		if len(js)-8 > MaxHeaderLen {
			return nil, nil, fileErr(RuleHeaderLength, "header exceeds the %d-byte limit at tensor %q", MaxHeaderLen, s.Name)
		}
	}
	js = append(js, '}')
	for (len(js)-8)%8 != 0 {
		js = append(js, ' ')
	}
	n := len(js) - 8
	if n > MaxHeaderLen {
		return nil, nil, fileErr(RuleHeaderLength, "header of %d bytes exceeds the %d-byte limit", n, MaxHeaderLen)
	}
	binary.LittleEndian.PutUint64(js[:8], uint64(n))
	for i := range tensors {
		tensors[i].Offset += int64(len(js))
	}
	return js, tensors, nil
}

// appendJSONString appends s as a JSON string escaped exactly as serde_json
// escapes (serde_json ser.rs format_escaped_str): '"' and '\\' with a
// backslash, \b \t \n \f \r short forms, other bytes below 0x20 as \u00XX
// with lowercase hex; everything else (0x7F, non-ASCII, U+2028) raw. s must
// be valid UTF-8.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\b':
			b = append(b, '\\', 'b')
		case '\t':
			b = append(b, '\\', 't')
		case '\n':
			b = append(b, '\\', 'n')
		case '\f':
			b = append(b, '\\', 'f')
		case '\r':
			b = append(b, '\\', 'r')
		default:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// Writer writes one safetensors file as a stream: NewWriter writes the header
// at once, then the caller writes every tensor's bytes in spec order (raw,
// little-endian, row-major) with Write or WriteTensor. Nothing is buffered:
// each call passes its bytes straight to the underlying writer. Close checks
// that every declared byte was written; it does not close the underlying
// writer. A Writer is not safe for concurrent use.
type Writer struct {
	w       io.Writer
	tensors []Tensor
	start   int64 // len(prefix): absolute offset of the data section
	total   int64 // bytes of the data section
	written int64 // data bytes written so far
	err     error // sticky
	closed  bool
}

// NewWriter encodes the header of specs (laid out in the given order; see
// EncodeHeader for metadata and errors), writes it to w and returns a Writer
// for the tensor data.
func NewWriter(w io.Writer, specs []TensorSpec, metadata map[string]string) (*Writer, error) {
	prefix, tensors, err := EncodeHeader(specs, metadata)
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(prefix); err != nil {
		return nil, fmt.Errorf("safetensors: write header: %w", err)
	}
	sw := &Writer{w: w, tensors: tensors, start: int64(len(prefix))}
	if len(tensors) > 0 {
		last := tensors[len(tensors)-1]
		sw.total = last.Offset + last.Size - sw.start
	}
	return sw, nil
}

// Tensors returns the layout being written, with absolute offsets.
func (w *Writer) Tensors() []Tensor { return slices.Clone(w.tensors) }

// Remaining returns the number of data bytes still to write.
func (w *Writer) Remaining() int64 { return w.total - w.written }

// current returns the index of the tensor that the next data byte belongs to
// (skipping empty tensors), or len(w.tensors) when all are complete.
func (w *Writer) current() int {
	pos := w.start + w.written
	i, _ := slices.BinarySearchFunc(w.tensors, pos, func(t Tensor, p int64) int {
		return cmp.Compare(t.Offset+t.Size, p+1)
	})
	return i
}

// Write writes tensor data, continuing where the previous call stopped (it
// may span tensor boundaries). Writing more bytes than declared is an error
// and writes nothing; so is writing after an error or after Close.
func (w *Writer) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	if w.closed {
		return 0, errors.New("safetensors: write after Close")
	}
	if int64(len(p)) > w.total-w.written {
		return 0, fmt.Errorf("safetensors: write of %d bytes exceeds the declared data: %d bytes left", len(p), w.total-w.written)
	}
	n, err := w.w.Write(p)
	w.written += int64(n)
	if err == nil && n < len(p) {
		err = io.ErrShortWrite
	}
	if err != nil {
		w.err = fmt.Errorf("safetensors: write data at byte %d: %w", w.start+w.written, err)
		return n, w.err
	}
	return n, nil
}

// WriteTensor writes the whole data of the tensor called name, which must
// start where the previous write stopped (the next tensor in spec order;
// empty tensors may be skipped or written with empty data); len(data) must
// equal its size. Errors name the tensor.
func (w *Writer) WriteTensor(name string, data []byte) error {
	pos := w.start + w.written
	i, _ := slices.BinarySearchFunc(w.tensors, pos, func(t Tensor, p int64) int { return cmp.Compare(t.Offset, p) })
	for j := i; j < len(w.tensors) && w.tensors[j].Offset == pos; j++ {
		if t := w.tensors[j]; t.Name == name {
			if int64(len(data)) != t.Size {
				return tensorErr(name, RuleSize, "got %d bytes, want %d", len(data), t.Size)
			}
			_, err := w.Write(data)
			return err
		}
	}
	switch {
	case i < len(w.tensors) && w.tensors[i].Offset == pos:
		return tensorErr(name, RuleName, "next tensor to write is %q", w.tensors[i].Name)
	case w.written < w.total:
		t := w.tensors[w.current()]
		return tensorErr(name, RuleName, "writer is inside tensor %q (%d of %d bytes written)", t.Name, pos-t.Offset, t.Size)
	default:
		return tensorErr(name, RuleName, "no tensor left to write (all %d data bytes written)", w.total)
	}
}

// Close reports an error naming the first incomplete tensor when fewer bytes
// than declared were written; the stream is then not a valid file. It does
// not close the underlying writer.
func (w *Writer) Close() error {
	if w.closed {
		return nil
	}
	w.closed = true
	if w.err != nil {
		return w.err
	}
	if w.written < w.total {
		t := w.tensors[w.current()]
		got := max(0, w.start+w.written-t.Offset)
		return tensorErr(t.Name, RuleSize, "incomplete: %d of %d bytes written (%d data bytes missing in all)",
			got, t.Size, w.total-w.written)
	}
	return nil
}
