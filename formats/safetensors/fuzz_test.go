package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// headerSeeds are valid and hostile headers for the fuzz corpus.
var headerSeeds = []struct {
	js   string
	data int64
}{
	{`{}`, 0},
	{`{"__metadata__":{"format":"pt"},"w":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]}}`, 12},
	{`{"b":{"dtype":"F32","shape":[],"data_offsets":[2,6]},"a":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}}`, 6},
	{`{"e":{"dtype":"F4","shape":[0,3],"data_offsets":[0,0]},"f":{"dtype":"F4","shape":[2,3],"data_offsets":[0,3]}}`, 3},
	{`{"x":{"dtype":"F6_E3M2","shape":[4],"data_offsets":[0,3]},"\u00e9\ud83d\ude00":{"dtype":"U8","shape":[1],"data_offsets":[3,4]}}`, 4},
	{`{"__metadata__":null}   `, 0},
	{`{"w":{"dtype":"U8","shape":[18446744073709551615],"data_offsets":[0,18446744073709551615]}}`, 8},
	{`{"w":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,0]}}`, 0},
	{`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"a":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}}`, 8},
	{`{"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[8],"data_offsets":[4,12]}}`, 12},
	{"{\"\\ud800\":1}", 0},
	{"{\"a\xff\":1}", 0},
	{`[{"a":1}]`, 0},
	{`{"w":{"dtype":"U8","shape":[1.5e3],"data_offsets":[-1,0]}}`, 0},
}

// FuzzParseHeader checks that ParseHeader never panics and that whatever it
// accepts is a consistent layout that encoding/json also reads as JSON and
// that our writer re-encodes to an equivalent header.
func FuzzParseHeader(f *testing.F) {
	for _, s := range headerSeeds {
		f.Add([]byte(s.js), s.data)
	}
	f.Fuzz(func(t *testing.T, js []byte, data int64) {
		if data < 0 || data > 1<<40 {
			return
		}
		fileSize := 8 + int64(len(js)) + data
		h, err := ParseHeader(js, fileSize)
		if err != nil {
			var fe *FormatError
			if !errors.As(err, &fe) || fe.Rule == "" {
				t.Fatalf("error %v is not a *FormatError with a rule", err)
			}
			return
		}
		checkHeader(t, h, js, fileSize)
	})
}

// FuzzReadHeader feeds whole files (length prefix included) to ReadHeader.
func FuzzReadHeader(f *testing.F) {
	for _, s := range headerSeeds {
		f.Add(file(s.js, int(s.data)))
	}
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, '{', '}'})
	f.Add([]byte{2, 0, 0, 0, 0, 0, 0})
	if raw, err := os.ReadFile(filepath.Join(fixtureDir, "go_pyorder.safetensors")); err == nil {
		f.Add(raw)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ReadHeader(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v is not a *FormatError", err)
			}
			return
		}
		n := binary.LittleEndian.Uint64(b)
		checkHeader(t, h, b[8:8+n], int64(len(b)))
	})
}

func checkHeader(t *testing.T, h *Header, js []byte, fileSize int64) {
	t.Helper()
	if !json.Valid(js) {
		t.Fatalf("accepted JSON that encoding/json rejects: %q", js)
	}
	if h.DataStart != 8+int64(len(js)) || h.DataStart+h.DataSize() != fileSize {
		t.Fatalf("DataStart %d DataSize %d for file %d", h.DataStart, h.DataSize(), fileSize)
	}
	pos := h.DataStart
	var specs []TensorSpec
	for _, tt := range h.Tensors {
		if tt.Offset != pos {
			t.Fatalf("tensor %q at %d, want %d (no gaps or overlaps)", tt.Name, tt.Offset, pos)
		}
		size, err := ByteSize(tt.DType, tt.Shape)
		if err != nil || size != tt.Size {
			t.Fatalf("tensor %q: size %d, ByteSize %d %v", tt.Name, tt.Size, size, err)
		}
		if got, ok := h.Lookup(tt.Name); !ok || !reflect.DeepEqual(got, tt) {
			t.Fatalf("Lookup(%q) = %+v", tt.Name, got)
		}
		pos += tt.Size
		specs = append(specs, TensorSpec{Name: tt.Name, DType: tt.DType, Shape: tt.Shape})
	}
	// Re-encode in the same order: the same layout and metadata come back.
	prefix, _, err := EncodeHeader(specs, h.Metadata)
	if err != nil {
		t.Fatalf("cannot re-encode an accepted header: %v", err)
	}
	h2, err := ParseHeader(prefix[8:], int64(len(prefix))+h.DataSize())
	if err != nil {
		t.Fatalf("re-encoded header rejected: %v", err)
	}
	if !reflect.DeepEqual(h2.Metadata, h.Metadata) || len(h2.Tensors) != len(h.Tensors) {
		t.Fatalf("re-encoded header differs")
	}
	for i, tt := range h.Tensors {
		u := h2.Tensors[i]
		if u.Name != tt.Name || u.DType != tt.DType || !reflect.DeepEqual(u.Shape, tt.Shape) ||
			u.Offset-h2.DataStart != tt.Offset-h.DataStart || u.Size != tt.Size {
			t.Fatalf("re-encoded tensor %+v, want %+v", u, tt)
		}
	}
}
