package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// file returns a safetensors file: N (= len(js)) LE, js, then dataLen bytes
// of data (value i%251 at data byte i).
func file(js string, dataLen int) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(js)))
	b = append(b, js...)
	for i := range dataLen {
		b = append(b, byte(i%251))
	}
	return b
}

// wantFormatError checks that err is a *FormatError for rule, naming tensor
// (when hasTensor), and that the message shows both.
func wantFormatError(t *testing.T, err error, rule Rule, tensor string, hasTensor bool) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want rule %s", rule)
	}
	var fe *FormatError
	if !errors.As(err, &fe) {
		t.Fatalf("error %v (%T) is not a *FormatError", err, err)
	}
	if fe.Rule != rule {
		t.Errorf("rule = %s, want %s (error: %v)", fe.Rule, rule, err)
	}
	if fe.HasTensor != hasTensor || fe.Tensor != tensor {
		t.Errorf("tensor = %q (named %v), want %q (named %v) (error: %v)", fe.Tensor, fe.HasTensor, tensor, hasTensor, err)
	}
	msg := err.Error()
	if !strings.Contains(msg, string(rule)) {
		t.Errorf("message %q does not name rule %s", msg, rule)
	}
	if hasTensor && !strings.Contains(msg, fmt.Sprintf("%q", tensor)) {
		t.Errorf("message %q does not name tensor %q", msg, tensor)
	}
}

func TestReadHeaderRejects(t *testing.T) {
	const u8x8 = `"dtype":"U8","shape":[8]`
	cases := []struct {
		name      string
		js        string
		data      int
		rule      Rule
		tensor    string
		hasTensor bool
	}{
		{"empty header", ``, 0, RuleJSON, "", false},
		{"array", `[1,2]`, 0, RuleJSON, "", false},
		{"string", `"x"`, 0, RuleJSON, "", false},
		{"null", `null`, 0, RuleJSON, "", false},
		{"BOM", "\ufeff{}", 0, RuleJSON, "", false},
		{"trailing garbage", `{} x`, 0, RuleJSON, "", false},
		{"two objects", `{}{}`, 0, RuleJSON, "", false},
		{"trailing NUL padding", "{}\x00\x00", 0, RuleJSON, "", false},
		{"trailing comma", `{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},}`, 0, RuleJSON, "", false},
		{"unterminated", `{"a":{"dtype":"U8"`, 0, RuleJSON, "", false},
		{"non-UTF-8 name", "{\"a\xff\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}", 0, RuleUTF8, "", false},
		{"overlong UTF-8", "{\"\xc0\xaf\":{}}", 0, RuleUTF8, "", false},
		{"lone surrogate", `{"\ud800":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}`, 0, RuleJSON, "", false},
		{"raw control char", "{\"a\x01\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}", 0, RuleJSON, "", false},
		{"bad escape", `{"a\x":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}`, 0, RuleJSON, "", false},
		{"duplicate tensor", `{"a":{` + u8x8 + `,"data_offsets":[0,8]},"a":{` + u8x8 + `,"data_offsets":[8,16]}}`, 16, RuleDuplicate, "a", true},
		{"duplicate via escape", `{"a":{` + u8x8 + `,"data_offsets":[0,8]},"\u0061":{` + u8x8 + `,"data_offsets":[8,16]}}`, 16, RuleDuplicate, "a", true},
		{"duplicate metadata", `{"__metadata__":{},"__metadata__":{}}`, 0, RuleDuplicate, "__metadata__", true},
		{"duplicate metadata key", `{"__metadata__":{"k":"1","k":"2"}}`, 0, RuleDuplicate, "__metadata__", true},
		{"metadata number", `{"__metadata__":{"k":1}}`, 0, RuleMetadata, "__metadata__", true},
		{"metadata nested", `{"__metadata__":{"k":{"x":"y"}}}`, 0, RuleMetadata, "__metadata__", true},
		{"metadata array", `{"__metadata__":["k"]}`, 0, RuleMetadata, "__metadata__", true},
		{"metadata string", `{"__metadata__":"k"}`, 0, RuleMetadata, "__metadata__", true},
		{"entry not object", `{"w":5}`, 0, RuleField, "w", true},
		{"entry empty", `{"w":{}}`, 0, RuleField, "w", true},
		{"missing dtype", `{"w":{"shape":[0],"data_offsets":[0,0]}}`, 0, RuleField, "w", true},
		{"missing shape", `{"w":{"dtype":"U8","data_offsets":[0,0]}}`, 0, RuleField, "w", true},
		{"missing offsets", `{"w":{"dtype":"U8","shape":[0]}}`, 0, RuleField, "w", true},
		{"unknown field", `{"w":{"dtype":"U8","shape":[0],"data_offsets":[0,0],"strides":[1]}}`, 0, RuleField, "w", true},
		{"repeated field", `{"w":{"dtype":"U8","dtype":"U8","shape":[0],"data_offsets":[0,0]}}`, 0, RuleField, "w", true},
		{"unknown dtype", `{"w":{"dtype":"F128","shape":[2],"data_offsets":[0,32]}}`, 32, RuleDType, "w", true},
		{"lowercase dtype", `{"w":{"dtype":"f32","shape":[2],"data_offsets":[0,8]}}`, 8, RuleDType, "w", true},
		{"dtype number", `{"w":{"dtype":4,"shape":[2],"data_offsets":[0,8]}}`, 8, RuleDType, "w", true},
		{"negative dim", `{"w":{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}}`, 0, RuleShape, "w", true},
		{"float dim", `{"w":{"dtype":"U8","shape":[2.0],"data_offsets":[0,2]}}`, 2, RuleShape, "w", true},
		{"exponent dim", `{"w":{"dtype":"U8","shape":[2e0],"data_offsets":[0,2]}}`, 2, RuleShape, "w", true},
		{"leading zero dim", `{"w":{"dtype":"U8","shape":[02],"data_offsets":[0,2]}}`, 2, RuleShape, "w", true},
		{"string shape", `{"w":{"dtype":"U8","shape":"2","data_offsets":[0,2]}}`, 2, RuleShape, "w", true},
		{"nested shape", `{"w":{"dtype":"U8","shape":[[2]],"data_offsets":[0,2]}}`, 2, RuleShape, "w", true},
		{"null dim", `{"w":{"dtype":"U8","shape":[null],"data_offsets":[0,2]}}`, 2, RuleShape, "w", true},
		{"dim over 2^64", `{"w":{"dtype":"U8","shape":[18446744073709551616],"data_offsets":[0,0]}}`, 0, RuleShape, "w", true},
		{"elements overflow", `{"w":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,0]}}`, 0, RuleOverflow, "w", true},
		{"overflow before zero dim", `{"w":{"dtype":"U8","shape":[4294967296,4294967296,0],"data_offsets":[0,0]}}`, 0, RuleOverflow, "w", true},
		{"dim over int64 beside zero", `{"w":{"dtype":"U8","shape":[0,9223372036854775808],"data_offsets":[0,0]}}`, 0, RuleOverflow, "w", true},
		{"bits overflow", `{"w":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,0]}}`, 0, RuleOverflow, "w", true},
		{"F4 odd count", `{"w":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}}`, 2, RuleWholeBytes, "w", true},
		{"F6 two elements", `{"w":{"dtype":"F6_E2M3","shape":[2],"data_offsets":[0,2]}}`, 2, RuleWholeBytes, "w", true},
		{"size mismatch", `{"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}}`, 20, RuleSize, "w", true},
		{"BF16 counted as bytes", `{"w":{"dtype":"BF16","shape":[4],"data_offsets":[0,4]}}`, 4, RuleSize, "w", true},
		{"scalar without data", `{"w":{"dtype":"F32","shape":[],"data_offsets":[0,0]}}`, 0, RuleSize, "w", true},
		{"end before begin", `{"w":{"dtype":"U8","shape":[4],"data_offsets":[8,4]}}`, 8, RuleOffsets, "w", true},
		{"three offsets", `{"w":{"dtype":"U8","shape":[4],"data_offsets":[0,4,8]}}`, 4, RuleOffsets, "w", true},
		{"one offset", `{"w":{"dtype":"U8","shape":[4],"data_offsets":[4]}}`, 4, RuleOffsets, "w", true},
		{"negative offset", `{"w":{"dtype":"U8","shape":[4],"data_offsets":[-4,0]}}`, 4, RuleOffsets, "w", true},
		{"float offset", `{"w":{"dtype":"U8","shape":[4],"data_offsets":[0,4.0]}}`, 4, RuleOffsets, "w", true},
		{"offset over 2^64", `{"w":{"dtype":"U8","shape":[4],"data_offsets":[0,18446744073709551620]}}`, 4, RuleOffsets, "w", true},
		{"offsets past EOF", `{"w":{"dtype":"U8","shape":[16],"data_offsets":[0,16]}}`, 8, RulePastEOF, "w", true},
		{"offsets at 2^64-1", `{"w":{"dtype":"U8","shape":[4],"data_offsets":[18446744073709551611,18446744073709551615]}}`, 4, RulePastEOF, "w", true},
		{"overlap", `{"a":{` + u8x8 + `,"data_offsets":[0,8]},"b":{` + u8x8 + `,"data_offsets":[4,12]}}`, 12, RuleOverlap, "b", true},
		{"same range", `{"a":{` + u8x8 + `,"data_offsets":[0,8]},"b":{` + u8x8 + `,"data_offsets":[0,8]}}`, 8, RuleOverlap, "b", true},
		{"empty inside range", `{"a":{` + u8x8 + `,"data_offsets":[0,8]},"e":{"dtype":"U8","shape":[0],"data_offsets":[4,4]}}`, 8, RuleOverlap, "e", true},
		{"hole", `{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[8,12]}}`, 12, RuleGap, "b", true},
		{"leading gap", `{"a":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}}`, 8, RuleGap, "a", true},
		{"trailing bytes", `{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}`, 8, RuleGap, "a", true},
		{"no tensors but data", `{}`, 3, RuleGap, "", false},
		{"metadata only but data", `{"__metadata__":{"format":"pt"}}`, 1, RuleGap, "", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := file(c.js, c.data)
			h, err := ReadHeader(bytes.NewReader(b), int64(len(b)))
			if err == nil {
				t.Fatalf("accepted %q: %+v", c.js, h)
			}
			wantFormatError(t, err, c.rule, c.tensor, c.hasTensor)
		})
	}
}

func TestReadHeaderLengthRules(t *testing.T) {
	withN := func(n uint64, rest string) []byte {
		return append(binary.LittleEndian.AppendUint64(nil, n), rest...)
	}
	cases := []struct {
		name string
		b    []byte
	}{
		{"empty file", nil},
		{"7 bytes", []byte{2, 0, 0, 0, 0, 0, 0}},
		{"N = 2^63", withN(1<<63, "{}")},
		{"N = 2^64-1", withN(1<<64-1, "{}")},
		{"N = 200 MB", withN(200_000_000, "{}")},
		{"N = MaxHeaderLen+1", withN(MaxHeaderLen+1, "{}")},
		{"N = MaxHeaderLen past EOF", withN(MaxHeaderLen, "{}")},
		{"N one past EOF", withN(3, "{}")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ReadHeader(bytes.NewReader(c.b), int64(len(c.b)))
			wantFormatError(t, err, RuleHeaderLength, "", false)
		})
	}
}

func TestParseHeaderAccepts(t *testing.T) {
	t.Run("empty object, no data", func(t *testing.T) {
		h, err := ParseHeader([]byte(`{}`), 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(h.Tensors) != 0 || h.Metadata != nil || h.DataStart != 10 || h.HeaderLen != 2 || h.DataSize() != 0 {
			t.Errorf("got %+v", h)
		}
	})
	t.Run("whitespace padding both sides", func(t *testing.T) {
		js := " \t\r\n{\"__metadata__\" : null , \"x\" : { \"shape\" : [ ] , \"dtype\" : \"I32\" , \"data_offsets\" : [ 0 , 4 ] } }    "
		b := file(js, 4)
		h, err := ReadHeader(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			t.Fatal(err)
		}
		x, ok := h.Lookup("x")
		if !ok || x.DType != I32 || len(x.Shape) != 0 || x.Offset != int64(8+len(js)) || x.Size != 4 || x.NumElements() != 1 {
			t.Errorf("x = %+v, %v", x, ok)
		}
		if h.Metadata != nil {
			t.Errorf("metadata null read as %v", h.Metadata)
		}
	})
	t.Run("key order is not data order", func(t *testing.T) {
		// c (empty) and b before a in the JSON; a holds the first bytes.
		js := `{"c":{"dtype":"BF16","shape":[0,3],"data_offsets":[12,12]},` +
			`"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]},` +
			`"__metadata__":{"format":"pt","k":"\u00e9\ud83d\ude00\"\\\n"},` +
			`"a":{"dtype":"F8_E4M3","shape":[2,2],"data_offsets":[0,4]}}`
		b := file(js, 12)
		h, err := ReadHeader(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, tt := range h.Tensors {
			names = append(names, tt.Name)
		}
		if got := strings.Join(names, ","); got != "a,b,c" {
			t.Errorf("order %s, want a,b,c (by offset)", got)
		}
		if h.Metadata["format"] != "pt" || h.Metadata["k"] != "é😀\"\\\n" || len(h.Metadata) != 2 {
			t.Errorf("metadata %q", h.Metadata)
		}
		if h.DataSize() != 12 {
			t.Errorf("DataSize %d", h.DataSize())
		}
		a, _ := h.Lookup("a")
		if a.Offset != h.DataStart || a.Size != 4 || a.NumElements() != 4 {
			t.Errorf("a = %+v", a)
		}
		c, _ := h.Lookup("c")
		if c.Size != 0 || c.NumElements() != 0 || c.Offset != h.DataStart+12 {
			t.Errorf("c = %+v", c)
		}
	})
	t.Run("sub-byte and every dtype", func(t *testing.T) {
		var sb strings.Builder
		sb.WriteString("{")
		off := 0
		for i, d := range DTypes() {
			// 8 elements: a whole number of bytes for every width.
			n := 8 * d.Bits() / 8
			if i > 0 {
				sb.WriteString(",")
			}
			fmt.Fprintf(&sb, `"t%d":{"dtype":%q,"shape":[2,4],"data_offsets":[%d,%d]}`, i, d, off, off+n)
			off += n
		}
		sb.WriteString("}")
		b := file(sb.String(), off)
		h, err := ReadHeader(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			t.Fatal(err)
		}
		if len(h.Tensors) != len(DTypes()) {
			t.Fatalf("%d tensors", len(h.Tensors))
		}
		f4, _ := h.Lookup("t1")
		if f4.DType != F4 || f4.Size != 4 {
			t.Errorf("F4 [2,4] = %+v, want 4 bytes", f4)
		}
		f6, _ := h.Lookup("t2")
		if f6.DType != F6E2M3 || f6.Size != 6 {
			t.Errorf("F6_E2M3 [2,4] = %+v, want 6 bytes", f6)
		}
	})
	t.Run("zero dim before huge dims", func(t *testing.T) {
		js := `{"w":{"dtype":"U8","shape":[0,4294967296,4294967296],"data_offsets":[0,0]}}`
		if _, err := ParseHeader([]byte(js), int64(8+len(js))); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("several empty tensors at one offset", func(t *testing.T) {
		js := `{"e2":{"dtype":"U8","shape":[0],"data_offsets":[2,2]},"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},` +
			`"e1":{"dtype":"F32","shape":[3,0],"data_offsets":[2,2]},"z":{"dtype":"U8","shape":[1],"data_offsets":[2,3]}}`
		h, err := ParseHeader([]byte(js), int64(8+len(js)+3))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, tt := range h.Tensors {
			names = append(names, tt.Name)
		}
		if got := strings.Join(names, ","); got != "a,e1,e2,z" {
			t.Errorf("order %s", got)
		}
	})
}

// recordingReaderAt serves a virtual file: the 8-byte length n, then spaces
// and data bytes, without holding it; it records every ReadAt.
type recordingReaderAt struct {
	size  int64
	n     uint64
	js    []byte // header bytes (may be shorter than n: then spaces)
	reads [][2]int64
}

func (r *recordingReaderAt) ReadAt(p []byte, off int64) (int, error) {
	r.reads = append(r.reads, [2]int64{off, int64(len(p))})
	var hdr [8]byte
	binary.LittleEndian.PutUint64(hdr[:], r.n)
	for i := range p {
		pos := off + int64(i)
		switch {
		case pos >= r.size:
			return i, fmt.Errorf("read past end: %w", errEOF)
		case pos < 8:
			p[i] = hdr[pos]
		case pos-8 < int64(len(r.js)):
			p[i] = r.js[pos-8]
		default:
			p[i] = ' '
		}
	}
	return len(p), nil
}

var errEOF = errors.New("EOF")

func TestReadHeaderBoundedReads(t *testing.T) {
	// Hostile lengths on huge virtual files: one read of InitialReadLen bytes, then an error.
	for _, n := range []uint64{1 << 63, 200_000_000, MaxHeaderLen + 1} {
		r := &recordingReaderAt{size: 1 << 40, n: n}
		_, err := ReadHeader(r, r.size)
		wantFormatError(t, err, RuleHeaderLength, "", false)
		if len(r.reads) != 1 || r.reads[0] != [2]int64{0, InitialReadLen} {
			t.Errorf("N=%d: reads %v, want one of %d bytes", n, r.reads, InitialReadLen)
		}
	}
	// A legal-looking length on a small file: no read beyond the file.
	r := &recordingReaderAt{size: 2048, n: 99_000_000}
	_, err := ReadHeader(r, r.size)
	wantFormatError(t, err, RuleHeaderLength, "", false)
	if len(r.reads) != 1 || r.reads[0] != [2]int64{0, 2048} {
		t.Errorf("reads %v", r.reads)
	}
}

func TestReadHeaderLongHeaderTwoReads(t *testing.T) {
	// A 150 kB header: metadata padding makes it longer than InitialReadLen.
	big := strings.Repeat("x", 150_000)
	js := `{"__metadata__":{"pad":"` + big + `"},"w":{"dtype":"BF16","shape":[3],"data_offsets":[0,6]}}`
	r := &recordingReaderAt{size: int64(8 + len(js) + 6), n: uint64(len(js)), js: []byte(js)}
	h, err := ReadHeader(r, r.size)
	if err != nil {
		t.Fatal(err)
	}
	want := [][2]int64{{0, InitialReadLen}, {InitialReadLen, int64(8+len(js)) - InitialReadLen}}
	if fmt.Sprint(r.reads) != fmt.Sprint(want) {
		t.Errorf("reads %v, want %v", r.reads, want)
	}
	if h.Metadata["pad"] != big {
		t.Errorf("metadata pad has %d bytes", len(h.Metadata["pad"]))
	}
	w, ok := h.Lookup("w")
	if !ok || w.Offset != int64(8+len(js)) || w.Size != 6 {
		t.Errorf("w = %+v", w)
	}
}

func TestReadHeaderShortReader(t *testing.T) {
	// The caller claims a larger file than the reader holds.
	b := file(`{"w":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}`, 4)
	_, err := ReadHeader(bytes.NewReader(b[:20]), int64(len(b)))
	if err == nil || !strings.Contains(err.Error(), "read first") {
		t.Fatalf("err = %v", err)
	}
	var fe *FormatError
	if errors.As(err, &fe) {
		t.Errorf("I/O error reported as format error: %v", err)
	}
}
