package safetensors

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
)

func TestEncodeHeaderCrateExample(t *testing.T) {
	// The header of the example file in the crate's SafeTensors::deserialize
	// doc comment (safetensors/src/tensor.rs), which is 60 bytes long; the
	// writer pads it with spaces to 64 so the data starts 8-byte aligned.
	const example = `{"test":{"dtype":"I32","shape":[2,2],"data_offsets":[0,16]}}`
	prefix, tensors, err := EncodeHeader([]TensorSpec{{Name: "test", DType: I32, Shape: []int64{2, 2}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(example) != 60 {
		t.Fatalf("example is %d bytes", len(example))
	}
	want := append(binary.LittleEndian.AppendUint64(nil, 64), example+"    "...)
	if !bytes.Equal(prefix, want) {
		t.Errorf("prefix\n%q\nwant\n%q", prefix, want)
	}
	if len(tensors) != 1 || tensors[0].Offset != 72 || tensors[0].Size != 16 {
		t.Errorf("tensors %+v", tensors)
	}
}

var trickyNames = []string{
	"a.weight", "ünï.名前", "sp ace", `quote"d\back`, "ctl\x01\x1f\tx\n", "emoji😀<&>\u2028\x7f", "", "slash/ok",
}

func TestEncodeHeaderRoundTrip(t *testing.T) {
	var specs []TensorSpec
	dts := DTypes()
	for i, name := range trickyNames {
		d := dts[(i*5)%len(dts)]
		specs = append(specs, TensorSpec{Name: name, DType: d, Shape: []int64{int64(i % 3), 8}})
	}
	specs = append(specs, TensorSpec{Name: "scalar", DType: F64}, TensorSpec{Name: "f4", DType: F4, Shape: []int64{3, 2}})
	meta := map[string]string{"format": "pt", "q": "a \"b\" \\ c\n\t\x01", "ü": "😀", "html": "<&>", "": ""}
	for _, md := range []map[string]string{nil, {}, meta} {
		prefix, tensors, err := EncodeHeader(specs, md)
		if err != nil {
			t.Fatal(err)
		}
		if len(prefix)%8 != 0 || int(binary.LittleEndian.Uint64(prefix)) != len(prefix)-8 {
			t.Fatalf("prefix of %d bytes, N = %d", len(prefix), binary.LittleEndian.Uint64(prefix))
		}
		last := tensors[len(tensors)-1]
		size := last.Offset + last.Size
		h, err := ParseHeader(prefix[8:], size)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(h.Metadata, md) {
			t.Errorf("metadata %q, want %q", h.Metadata, md)
		}
		for i, s := range specs {
			got, ok := h.Lookup(s.Name)
			if !ok {
				t.Fatalf("tensor %q lost", s.Name)
			}
			if got.DType != s.DType || fmt.Sprint(got.Shape) != fmt.Sprint(s.Shape) || got.Offset != tensors[i].Offset || got.Size != tensors[i].Size {
				t.Errorf("tensor %q = %+v, want %+v", s.Name, got, tensors[i])
			}
		}
		// Independent check of the escaping: encoding/json reads the same keys and strings.
		var top map[string]json.RawMessage
		if err := json.Unmarshal(prefix[8:], &top); err != nil {
			t.Fatalf("encoding/json rejects our header: %v", err)
		}
		if len(top) != len(specs)+btoi(md != nil) {
			t.Errorf("encoding/json sees %d keys", len(top))
		}
		for _, s := range specs {
			var e struct {
				DType       string   `json:"dtype"`
				Shape       []int64  `json:"shape"`
				DataOffsets [2]int64 `json:"data_offsets"`
			}
			if err := json.Unmarshal(top[s.Name], &e); err != nil || e.DType != string(s.DType) {
				t.Errorf("encoding/json: tensor %q: %+v %v", s.Name, e, err)
			}
		}
		if md != nil {
			var m map[string]string
			if err := json.Unmarshal(top[metadataKey], &m); err != nil || !reflect.DeepEqual(m, md) {
				t.Errorf("encoding/json metadata %q (%v), want %q", m, err, md)
			}
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestEncodeHeaderRejects(t *testing.T) {
	cases := []struct {
		name   string
		specs  []TensorSpec
		meta   map[string]string
		rule   Rule
		tensor string
	}{
		{"duplicate", []TensorSpec{{"a", U8, []int64{1}}, {"a", U8, []int64{1}}}, nil, RuleDuplicate, "a"},
		{"reserved name", []TensorSpec{{metadataKey, U8, []int64{1}}}, nil, RuleName, metadataKey},
		{"unknown dtype", []TensorSpec{{"w", "F128", []int64{1}}}, nil, RuleDType, "w"},
		{"negative dim", []TensorSpec{{"w", F32, []int64{2, -1}}}, nil, RuleShape, "w"},
		{"F4 odd", []TensorSpec{{"w", F4, []int64{3}}}, nil, RuleWholeBytes, "w"},
		{"overflow", []TensorSpec{{"w", F32, []int64{1 << 40, 1 << 40}}}, nil, RuleOverflow, "w"},
		{"bad UTF-8 name", []TensorSpec{{"w\xff", F32, nil}}, nil, RuleUTF8, "w\xff"},
		{"bad UTF-8 metadata", nil, map[string]string{"k": "\xfe"}, RuleUTF8, metadataKey},
		{"data over int64", func() (s []TensorSpec) { // 8 × 2^60 bytes = 2^63
			for i := range 8 {
				s = append(s, TensorSpec{string(rune('a' + i)), U8, []int64{1 << 30, 1 << 30}})
			}
			return s
		}(), nil, RuleOverflow, "h"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := EncodeHeader(c.specs, c.meta)
			wantFormatError(t, err, c.rule, c.tensor, true)
		})
	}
	t.Run("header too long", func(t *testing.T) {
		_, _, err := EncodeHeader(nil, map[string]string{"pad": strings.Repeat("x", MaxHeaderLen)})
		wantFormatError(t, err, RuleHeaderLength, "", false)
	})
}

func TestPythonOrder(t *testing.T) {
	// tensor.rs prepare: descending Dtype enum rank, then name.
	in := []TensorSpec{
		{Name: "b", DType: U8}, {Name: "a", DType: BF16}, {Name: "c", DType: F32}, {Name: "a2", DType: F32},
		{Name: "z", DType: Bool}, {Name: "e", DType: F8E4M3}, {Name: "d", DType: F8E5M2}, {Name: "x", DType: I64},
		{Name: "y", DType: F16}, {Name: "B", DType: F16}, {Name: "f4", DType: F4}, {Name: "u", DType: U64},
	}
	var got []string
	for _, s := range PythonOrder(in) {
		got = append(got, s.Name)
	}
	want := "u x a2 c a B y e d b f4 z"
	if strings.Join(got, " ") != want {
		t.Errorf("PythonOrder = %v, want %s", got, want)
	}
	if in[0].Name != "b" {
		t.Error("PythonOrder modified its input")
	}
}

// countingWriter counts bytes and hashes them; it keeps nothing.
type countingWriter struct {
	n      int64
	writes int
	h      io.Writer
}

func (c *countingWriter) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	c.writes++
	return c.h.Write(p)
}

func TestWriterStreams(t *testing.T) {
	specs := []TensorSpec{
		{Name: "embed", DType: BF16, Shape: []int64{1024, 1024}}, // 2 MiB
		{Name: "empty", DType: F32, Shape: []int64{0, 7}},
		{Name: "scale", DType: F32},
		{Name: "codes", DType: U8, Shape: []int64{1 << 20}},   // 1 MiB
		{Name: "nvfp4", DType: F4, Shape: []int64{512, 2048}}, // 512 KiB
	}
	meta := map[string]string{"format": "pt"}
	hw := sha256.New()
	cw := &countingWriter{h: hw}
	w, err := NewWriter(cw, specs, meta)
	if err != nil {
		t.Fatal(err)
	}
	prefix, layout, err := EncodeHeader(specs, meta)
	if err != nil {
		t.Fatal(err)
	}
	if cw.n != int64(len(prefix)) || !reflect.DeepEqual(w.Tensors(), layout) {
		t.Fatalf("after NewWriter: %d bytes written, want the %d-byte prefix", cw.n, len(prefix))
	}
	want := sha256.New()
	want.Write(prefix)
	total := w.Remaining()
	if total != 2<<20+4+1<<20+512<<10 {
		t.Fatalf("Remaining = %d", total)
	}
	chunk := make([]byte, 48<<10) // not a divisor of any tensor size: writes span tensors
	var written int64
	for written < total {
		n := min(int64(len(chunk)), total-written)
		for i := range chunk[:n] {
			chunk[i] = byte((written + int64(i)) * 7)
		}
		want.Write(chunk[:n])
		if _, err := w.Write(chunk[:n]); err != nil {
			t.Fatal(err)
		}
		written += n
		// Nothing is held back: every byte has reached the underlying writer.
		if cw.n != int64(len(prefix))+written {
			t.Fatalf("after %d data bytes the underlying writer has %d, want %d", written, cw.n, int64(len(prefix))+written)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(hw.Sum(nil), want.Sum(nil)) {
		t.Error("stream differs from prefix + data")
	}
	// Write passes through without allocating (no buffering).
	w2, _ := NewWriter(io.Discard, []TensorSpec{{Name: "x", DType: U8, Shape: []int64{1 << 30}}}, nil)
	p := make([]byte, 4096)
	if allocs := testing.AllocsPerRun(100, func() { w2.Write(p) }); allocs != 0 {
		t.Errorf("Write allocates %.1f times per call", allocs)
	}
}

func TestWriterWholeFileReadsBack(t *testing.T) {
	specs := []TensorSpec{{Name: "a", DType: F32, Shape: []int64{2}}, {Name: "e", DType: BF16, Shape: []int64{0}}, {Name: "b", DType: U8, Shape: []int64{3}}}
	var buf bytes.Buffer
	w, err := NewWriter(&buf, specs, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteTensor("a", []byte{1, 2, 3, 4, 5, 6, 7, 8}); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteTensor("e", nil); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteTensor("b", []byte{9, 10, 11}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	h, err := ReadHeader(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := h.Lookup("b")
	if got := buf.Bytes()[b.Offset : b.Offset+b.Size]; !bytes.Equal(got, []byte{9, 10, 11}) {
		t.Errorf("b = %v", got)
	}
}

func TestWriterErrors(t *testing.T) {
	specs := []TensorSpec{{Name: "a", DType: F32, Shape: []int64{2}}, {Name: "b", DType: U8, Shape: []int64{3}}}
	t.Run("too many bytes", func(t *testing.T) {
		var buf bytes.Buffer
		w, _ := NewWriter(&buf, specs, nil)
		before := buf.Len()
		if _, err := w.Write(make([]byte, 12)); err == nil {
			t.Fatal("accepted 12 bytes for 11")
		}
		if buf.Len() != before {
			t.Error("rejected write reached the writer")
		}
	})
	t.Run("missing bytes", func(t *testing.T) {
		w, _ := NewWriter(io.Discard, specs, nil)
		w.Write(make([]byte, 9))
		err := w.Close()
		wantFormatError(t, err, RuleSize, "b", true)
		if !strings.Contains(err.Error(), "1 of 3 bytes") {
			t.Errorf("message %q", err)
		}
	})
	t.Run("nothing written", func(t *testing.T) {
		w, _ := NewWriter(io.Discard, specs, nil)
		wantFormatError(t, w.Close(), RuleSize, "a", true)
	})
	t.Run("WriteTensor out of order", func(t *testing.T) {
		w, _ := NewWriter(io.Discard, specs, nil)
		wantFormatError(t, w.WriteTensor("b", make([]byte, 3)), RuleName, "b", true)
	})
	t.Run("WriteTensor wrong size", func(t *testing.T) {
		w, _ := NewWriter(io.Discard, specs, nil)
		wantFormatError(t, w.WriteTensor("a", make([]byte, 4)), RuleSize, "a", true)
	})
	t.Run("WriteTensor mid-tensor", func(t *testing.T) {
		w, _ := NewWriter(io.Discard, specs, nil)
		w.Write(make([]byte, 2))
		wantFormatError(t, w.WriteTensor("b", make([]byte, 3)), RuleName, "b", true)
	})
	t.Run("underlying error is sticky", func(t *testing.T) {
		boom := errors.New("disk full")
		fw := &failingWriter{after: 1, err: boom}
		w, err := NewWriter(fw, specs, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(make([]byte, 4)); !errors.Is(err, boom) {
			t.Fatalf("err = %v", err)
		}
		if _, err := w.Write(make([]byte, 4)); !errors.Is(err, boom) {
			t.Fatalf("second err = %v", err)
		}
		if err := w.Close(); !errors.Is(err, boom) {
			t.Fatalf("Close err = %v", err)
		}
	})
	t.Run("header write fails", func(t *testing.T) {
		boom := errors.New("closed pipe")
		if _, err := NewWriter(&failingWriter{err: boom}, specs, nil); !errors.Is(err, boom) {
			t.Fatalf("err = %v", err)
		}
	})
}

type failingWriter struct {
	after int // successful writes before failing
	err   error
}

func (f *failingWriter) Write(p []byte) (int, error) {
	if f.after > 0 {
		f.after--
		return len(p), nil
	}
	return 0, f.err
}
