package safetensors

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	nlp "github.com/nlpodyssey/safetensors"
)

// fixtureDir holds the committed interop fixtures (repository testdata/).
const fixtureDir = "../../testdata/safetensors"

const pyScript = "python3 tools/safetensors_fixtures.py --out testdata/safetensors"

var update = flag.Bool("update", false, "rewrite testdata/safetensors/go_* (TestGoFixtures)")

// ---------------------------------------------------------------- py_ files

// pyExpected mirrors py_expected.json, written by tools/safetensors_fixtures.py
// from what the Python safetensors package wrote and what torch holds.
type pyExpected struct {
	Versions map[string]string `json:"versions"`
	Files    map[string]struct {
		Size      int64             `json:"size"`
		SHA256    string            `json:"sha256"`
		HeaderLen int64             `json:"header_len"`
		Metadata  map[string]string `json:"metadata"`
		Optional  bool              `json:"optional"`
		Tensors   map[string]struct {
			DType       string   `json:"dtype"`
			Shape       []int64  `json:"shape"`
			DataOffsets [2]int64 `json:"data_offsets"`
			NBytes      int64    `json:"nbytes"`
			SHA256      string   `json:"sha256"`
			Hex         *string  `json:"hex"`
		} `json:"tensors"`
	} `json:"files"`
	Sharded *struct {
		Dir       string            `json:"dir"`
		Index     string            `json:"index"`
		Producer  string            `json:"producer"`
		WeightMap map[string]string `json:"weight_map"`
	} `json:"sharded"`
}

// requiredPy are the files every run of the script writes (others depend on
// the torch version and are checked when present).
var requiredPy = []string{
	"py_bf16_f32.safetensors", "py_dtypes.safetensors", "py_f8.safetensors",
	"py_meta.safetensors", "py_escape.safetensors", "py_nometa.safetensors",
}

// loadPyExpected fails (never skips) when the Python-made fixtures are absent.
func loadPyExpected(t *testing.T) *pyExpected {
	t.Helper()
	path := filepath.Join(fixtureDir, "py_expected.json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("Python interop fixtures missing (%v): run `%s` where torch + safetensors are installed (the GPU machine) and commit testdata/safetensors/py_*", err, pyScript)
	}
	var e pyExpected
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	for _, name := range requiredPy {
		if _, ok := e.Files[name]; !ok {
			t.Fatalf("%s lacks %s: rerun `%s`", path, name, pyScript)
		}
	}
	if e.Sharded == nil {
		t.Fatalf("%s lacks the sharded set: rerun `%s`", path, pyScript)
	}
	return &e
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func TestPythonFixtures(t *testing.T) {
	exp := loadPyExpected(t)
	t.Logf("fixtures made with %v", exp.Versions)
	for _, rel := range slices.Sorted(maps.Keys(exp.Files)) {
		want := exp.Files[rel]
		t.Run(rel, func(t *testing.T) {
			path := filepath.Join(fixtureDir, filepath.FromSlash(rel))
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if int64(len(raw)) != want.Size || sha256Hex(raw) != want.SHA256 {
				t.Fatalf("file differs from py_expected.json (size %d, want %d): rerun `%s`", len(raw), want.Size, pyScript)
			}
			f, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			h := f.Header
			if h.HeaderLen != want.HeaderLen || h.DataStart != 8+want.HeaderLen {
				t.Errorf("HeaderLen %d, want %d", h.HeaderLen, want.HeaderLen)
			}
			if !reflect.DeepEqual(h.Metadata, want.Metadata) {
				t.Errorf("metadata %q, want %q", h.Metadata, want.Metadata)
			}
			if len(h.Tensors) != len(want.Tensors) {
				t.Errorf("%d tensors, want %d", len(h.Tensors), len(want.Tensors))
			}
			for name, wt := range want.Tensors {
				got, ok := h.Lookup(name)
				if !ok {
					t.Errorf("tensor %q missing", name)
					continue
				}
				if string(got.DType) != wt.DType || fmt.Sprint(got.Shape) != fmt.Sprint(wt.Shape) ||
					got.Offset != h.DataStart+wt.DataOffsets[0] || got.Size != wt.DataOffsets[1]-wt.DataOffsets[0] || got.Size != wt.NBytes {
					t.Errorf("tensor %q = %+v, want %+v", name, got, wt)
				}
				b, err := f.ReadTensor(got)
				if err != nil {
					t.Fatal(err)
				}
				if sha256Hex(b) != wt.SHA256 {
					t.Errorf("tensor %q: bytes differ from torch's (sha256)", name)
				}
				if wt.Hex != nil && hex.EncodeToString(b) != *wt.Hex {
					t.Errorf("tensor %q: bytes %x, want %s", name, b, *wt.Hex)
				}
				sec := make([]byte, got.Size)
				if n, err := f.Section(got).ReadAt(sec, 0); int64(n) != got.Size || (err != nil && got.Size > 0) || !bytes.Equal(sec, b) {
					t.Errorf("tensor %q: Section read %d bytes, %v", name, n, err)
				}
			}
		})
	}
}

// TestPythonByteIdentical re-encodes every Python-written file with at most
// one metadata key (the Rust writer orders several keys randomly) and
// requires the same bytes: header JSON, escaping, padding, tensor order.
func TestPythonByteIdentical(t *testing.T) {
	exp := loadPyExpected(t)
	checked := 0
	for _, rel := range slices.Sorted(maps.Keys(exp.Files)) {
		path := filepath.Join(fixtureDir, filepath.FromSlash(rel))
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		h, err := headerOf(raw)
		if err != nil {
			t.Fatalf("%s: %v", rel, err)
		}
		if len(h.Metadata) > 1 {
			continue
		}
		var specs []TensorSpec
		for _, tt := range h.Tensors {
			specs = append(specs, TensorSpec{Name: tt.Name, DType: tt.DType, Shape: tt.Shape})
		}
		specs = PythonOrder(specs)
		var out bytes.Buffer
		w, err := NewWriter(&out, specs, h.Metadata)
		if err != nil {
			t.Fatalf("%s: %v", rel, err)
		}
		for _, s := range specs {
			tt, _ := h.Lookup(s.Name)
			if err := w.WriteTensor(s.Name, raw[tt.Offset:tt.Offset+tt.Size]); err != nil {
				t.Fatalf("%s: %v", rel, err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out.Bytes()[:h.DataStart], raw[:min(int64(len(raw)), h.DataStart)]) {
			t.Errorf("%s: header differs from Python's:\n got %q\nwant %q", rel, out.Bytes()[8:min(int64(out.Len()), h.DataStart)], raw[8:h.DataStart])
			continue
		}
		if !bytes.Equal(out.Bytes(), raw) {
			t.Errorf("%s: data layout differs from Python's", rel)
		}
		checked++
	}
	if checked < 5 {
		t.Errorf("only %d files compared byte for byte", checked)
	}
	t.Logf("%d Python-written files re-encoded byte for byte", checked)
}

// headerOf parses the header of a whole file held in memory.
func headerOf(b []byte) (*Header, error) {
	return ReadHeader(bytes.NewReader(b), int64(len(b)))
}

func TestPythonSharded(t *testing.T) {
	exp := loadPyExpected(t)
	dir := filepath.Join(fixtureDir, exp.Sharded.Dir)
	t.Logf("shards made by %s", exp.Sharded.Producer)
	m, err := OpenModel(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Index == nil || len(m.Files) < 2 {
		t.Fatalf("index %v, %d files", m.Index, len(m.Files))
	}
	if !reflect.DeepEqual(m.Index.WeightMap, exp.Sharded.WeightMap) {
		t.Errorf("weight_map %v, want %v", m.Index.WeightMap, exp.Sharded.WeightMap)
	}
	if got, want := m.Names(), slices.Sorted(maps.Keys(exp.Sharded.WeightMap)); !reflect.DeepEqual(got, want) {
		t.Errorf("names %v, want %v", got, want)
	}
	var sum int64
	for name, shard := range exp.Sharded.WeightMap {
		f, tt, ok := m.Lookup(name)
		if !ok || filepath.Base(f.Path) != shard {
			t.Errorf("tensor %q in %v, want %s", name, f, shard)
			continue
		}
		b, err := f.ReadTensor(tt)
		if err != nil {
			t.Fatal(err)
		}
		if want := exp.Files[exp.Sharded.Dir+"/"+shard].Tensors[name].SHA256; sha256Hex(b) != want {
			t.Errorf("tensor %q: sha256 %s, want %s", name, sha256Hex(b), want)
		}
		sum += tt.Size
	}
	if total, ok := m.Index.TotalSize(); !ok || total != sum {
		t.Errorf("metadata.total_size = %d (%v), tensors hold %d bytes", total, ok, sum)
	}
}

// ------------------------------------------------------- nlpodyssey check

// crossCheckNLP parses b with nlpodyssey/safetensors and with ours and
// requires the same names, dtypes, shapes and bytes.
func crossCheckNLP(t *testing.T, what string, b []byte) {
	t.Helper()
	st, err := nlp.Deserialize(b)
	if err != nil {
		t.Fatalf("%s: nlpodyssey: %v", what, err)
	}
	h, err := headerOf(b)
	if err != nil {
		t.Fatalf("%s: ours: %v", what, err)
	}
	names := st.Names()
	slices.Sort(names)
	var ours []string
	for _, tt := range h.Tensors {
		ours = append(ours, tt.Name)
	}
	slices.Sort(ours)
	if !reflect.DeepEqual(names, ours) {
		t.Fatalf("%s: names %q (nlpodyssey) vs %q (ours)", what, names, ours)
	}
	for _, tt := range h.Tensors {
		v, _ := st.Tensor(tt.Name)
		shape := make([]int64, len(v.Shape()))
		for i, d := range v.Shape() {
			shape[i] = int64(d)
		}
		if v.DType().String() != string(tt.DType) || fmt.Sprint(shape) != fmt.Sprint(tt.Shape) ||
			!bytes.Equal(v.Data(), b[tt.Offset:tt.Offset+tt.Size]) {
			t.Errorf("%s: tensor %q: nlpodyssey %s %v %d bytes; ours %+v", what, tt.Name, v.DType(), v.Shape(), len(v.Data()), tt)
		}
	}
	n, md, err := nlp.ReadMetadata(b)
	if err != nil || int64(n) != h.HeaderLen {
		t.Errorf("%s: nlpodyssey header length %d (%v), ours %d", what, n, err, h.HeaderLen)
	}
	if !reflect.DeepEqual(md.Metadata(), h.Metadata) && !(len(md.Metadata()) == 0 && len(h.Metadata) == 0) {
		t.Errorf("%s: metadata %q (nlpodyssey) vs %q (ours)", what, md.Metadata(), h.Metadata)
	}
}

// TestNlpodysseyPython cross-checks on the Python-written BF16/F32 file (the
// only dtypes both codecs know).
func TestNlpodysseyPython(t *testing.T) {
	loadPyExpected(t)
	raw, err := os.ReadFile(filepath.Join(fixtureDir, "py_bf16_f32.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	crossCheckNLP(t, "py_bf16_f32", raw)
	if f8, err := os.ReadFile(filepath.Join(fixtureDir, "py_f8.safetensors")); err == nil {
		_, nerr := nlp.Deserialize(f8)
		t.Logf("nlpodyssey on py_f8.safetensors: %v (why this package has its own codec)", nerr)
	}
}

func TestNlpodysseyCrossCheck(t *testing.T) {
	// Our writer → nlpodyssey reader.
	specs := []TensorSpec{
		{Name: "w.bf16", DType: BF16, Shape: []int64{3, 5}}, {Name: "ünï \"q\"\n", DType: F32, Shape: []int64{4}},
		{Name: "scalar", DType: F32}, {Name: "empty", DType: BF16, Shape: []int64{0, 2}},
	}
	var buf bytes.Buffer
	w, err := NewWriter(&buf, specs, map[string]string{"format": "pt", "k": "v"})
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, w.Remaining())
	for i := range data {
		data[i] = byte(i*13 + 1)
	}
	w.Write(data)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	crossCheckNLP(t, "ours", buf.Bytes())

	// nlpodyssey writer → our reader (nlpodyssey cannot make 0-rank views).
	v1, _ := nlp.NewTensorView(nlp.BF16, []uint64{2, 3}, data[:12])
	v2, _ := nlp.NewTensorView(nlp.F32, []uint64{1, 2}, data[12:20])
	v3, _ := nlp.NewTensorView(nlp.F32, []uint64{0}, nil)
	nb, err := nlp.Serialize(map[string]nlp.TensorView{"b": v1, "a": v2, "e": v3}, map[string]string{"format": "pt"})
	if err != nil {
		t.Fatal(err)
	}
	crossCheckNLP(t, "nlpodyssey", nb)
}

// ---------------------------------------------------------------- go_ files

// recipe says how a go_ fixture tensor's values are made, so that the Python
// script can recompute them with numpy/torch, independently of our code.
type recipe struct {
	Kind  string  `json:"kind"` // "arange": start + i·step cast to the dtype; "bool_mod": i % mod == 0; "bytes": byte i = (i·mul + add) mod 256
	Start float64 `json:"start,omitempty"`
	Step  float64 `json:"step,omitempty"`
	Mod   int     `json:"mod,omitempty"`
	Mul   int     `json:"mul,omitempty"`
	Add   int     `json:"add,omitempty"`
}

type goTensor struct {
	spec TensorSpec
	gen  recipe
}

type goFile struct {
	name        string
	tensors     []goTensor
	metadata    map[string]string
	pythonOrder bool // laid out with PythonOrder (then the script re-saves and compares bytes)
	optional    bool // needs dtypes an older torch/safetensors lacks
}

func arange(start, step float64) recipe { return recipe{Kind: "arange", Start: start, Step: step} }

func goFixtureFiles() []goFile {
	mixed := []goTensor{
		{TensorSpec{"z.bool", Bool, []int64{7}}, recipe{Kind: "bool_mod", Mod: 3}},
		{TensorSpec{"y.u8", U8, []int64{2, 5}}, recipe{Kind: "bytes", Mul: 7, Add: 3}},
		{TensorSpec{"x.i8", I8, []int64{6}}, arange(-3, 1)},
		{TensorSpec{"w.i16", I16, []int64{2, 2}}, arange(-300, 211)},
		{TensorSpec{"v.i32", I32, []int64{3}}, arange(-100000, 77777)},
		{TensorSpec{"u.i64", I64, []int64{2}}, arange(-5000000000, 9000000000)},
		{TensorSpec{"t.f16", F16, []int64{2, 4}}, arange(-4, 0.75)},
		{TensorSpec{"s.bf16", BF16, []int64{3, 4}}, arange(-2, 0.125)},
		{TensorSpec{"r.f32", F32, []int64{5}}, arange(-1.5, 0.375)},
		{TensorSpec{"q.f64", F64, []int64{2, 3}}, arange(0.1, 0.3)},
		{TensorSpec{"p.f8_e4m3", F8E4M3, []int64{4, 4}}, recipe{Kind: "bytes", Mul: 37, Add: 11}},
		{TensorSpec{"o.f8_e5m2", F8E5M2, []int64{8}}, recipe{Kind: "bytes", Mul: 13, Add: 1}},
		{TensorSpec{"n.scalar", F32, nil}, arange(2.5, 0)},
		{TensorSpec{"m.empty", BF16, []int64{0, 3}}, arange(0, 1)},
		{TensorSpec{"l.empty", I32, []int64{4, 0}}, arange(0, 1)},
		{TensorSpec{"ünï.名前", F32, []int64{2}}, arange(1, 1)},
		{TensorSpec{`quote"d\back`, U8, []int64{2}}, recipe{Kind: "bytes", Mul: 1, Add: 200}},
		{TensorSpec{"ctl\x01\x1f\tx\n", F16, nil}, arange(3, 0)},
		{TensorSpec{"emoji😀<&>\u2028\x7f", Bool, []int64{1}}, recipe{Kind: "bool_mod", Mod: 1}},
	}
	sorted := func(ts []goTensor) []goTensor {
		var specs []TensorSpec
		by := map[string]goTensor{}
		for _, t := range ts {
			specs = append(specs, t.spec)
			by[t.spec.Name] = t
		}
		var out []goTensor
		for _, s := range PythonOrder(specs) {
			out = append(out, by[s.Name])
		}
		return out
	}
	return []goFile{
		{name: "go_specorder.safetensors", tensors: mixed, metadata: map[string]string{
			"format": "pt", "note": "ünïcödé ✓", "quote": "a \"b\" \\ c\n\t", "empty": "", "html": "<tag>&amp;",
		}},
		{name: "go_pyorder.safetensors", tensors: sorted(mixed), metadata: map[string]string{"format": "pt"}, pythonOrder: true},
		{name: "go_nometa.safetensors", tensors: sorted(mixed[6:12]), pythonOrder: true},
		{name: "go_emptymeta.safetensors", tensors: sorted(mixed[:3]), metadata: map[string]string{}, pythonOrder: true},
		{name: "go_unsigned.safetensors", tensors: sorted([]goTensor{
			{TensorSpec{"u16", U16, []int64{4}}, arange(0, 21845)},
			{TensorSpec{"u32", U32, []int64{3}}, arange(0, 2000000000)},
			{TensorSpec{"u64", U64, []int64{3}}, arange(1, 1e15)},
		}), metadata: map[string]string{"format": "pt"}, pythonOrder: true, optional: true},
		{name: "go_mx.safetensors", tensors: sorted([]goTensor{
			{TensorSpec{"e8m0_scales", F8E8M0, []int64{8}}, recipe{Kind: "bytes", Mul: 32, Add: 3}},
			{TensorSpec{"fp4_packed", F4, []int64{2, 8}}, recipe{Kind: "bytes", Mul: 29, Add: 5}},
		}), metadata: map[string]string{"format": "pt"}, pythonOrder: true, optional: true},
	}
}

// recipeBytes computes a tensor's bytes from its recipe. Float values must be
// exactly representable in the dtype (so no rounding rule is involved).
func recipeBytes(t *testing.T, spec TensorSpec, r recipe) []byte {
	t.Helper()
	nbytes, err := ByteSize(spec.DType, spec.Shape)
	if err != nil {
		t.Fatal(err)
	}
	n := Tensor{Shape: spec.Shape}.NumElements()
	out := make([]byte, 0, nbytes)
	switch r.Kind {
	case "bytes":
		for i := range nbytes {
			out = append(out, byte((i*int64(r.Mul)+int64(r.Add))%256))
		}
		return out
	case "bool_mod":
		for i := range n {
			out = append(out, btob(i%int64(r.Mod) == 0))
		}
		return out
	}
	for i := range n {
		switch spec.DType {
		case I8, U8, I16, U16, I32, U32, I64, U64:
			v := int64(r.Start) + i*int64(r.Step)
			bits := spec.DType.Bits()
			lo, hi := int64(-1)<<(bits-1), int64(1)<<(bits-1)-1
			if spec.DType[0] == 'U' {
				lo, hi = 0, int64(uint64(1)<<bits-1)
				if bits == 64 {
					hi = math.MaxInt64
				}
			}
			if v < lo || v > hi {
				t.Fatalf("%s: value %d out of range", spec.Name, v)
			}
			l := len(out)
			out = binary.LittleEndian.AppendUint64(out, uint64(v))[:l+bits/8]
		default:
			v := float64(float64(i)*r.Step) + r.Start // no fused multiply-add
			f32 := float32(v)
			switch spec.DType {
			case F64:
				out = binary.LittleEndian.AppendUint64(out, math.Float64bits(v))
			case F32:
				exact(t, spec.Name, float64(f32) == v)
				out = binary.LittleEndian.AppendUint32(out, math.Float32bits(f32))
			case BF16:
				b := math.Float32bits(f32)
				exact(t, spec.Name, float64(f32) == v && b&0xFFFF == 0)
				out = binary.LittleEndian.AppendUint16(out, uint16(b>>16))
			case F16:
				out = binary.LittleEndian.AppendUint16(out, f16Exact(t, spec.Name, v))
			default:
				t.Fatalf("%s: no arange for %s", spec.Name, spec.DType)
			}
		}
	}
	return out
}

func btob(b bool) byte {
	if b {
		return 1
	}
	return 0
}

func exact(t *testing.T, name string, ok bool) {
	t.Helper()
	if !ok {
		t.Fatalf("%s: recipe value not exactly representable", name)
	}
}

// f16Exact encodes v as IEEE binary16; v must be zero or a normal binary16
// value exactly (sign, 5-bit exponent biased by 15, 10-bit fraction).
func f16Exact(t *testing.T, name string, v float64) uint16 {
	t.Helper()
	if v == 0 {
		return uint16(btob(math.Signbit(v))) << 15
	}
	b := math.Float32bits(float32(v))
	exact(t, name, float64(float32(v)) == v)
	sign := uint16(b>>31) << 15
	e := int(b>>23&0xFF) - 127 + 15
	frac := b & 0x7FFFFF
	exact(t, name, e >= 1 && e <= 30 && frac&0x1FFF == 0)
	return sign | uint16(e)<<10 | uint16(frac>>13)
}

type goExpectedTensor struct {
	Name        string   `json:"name"`
	DType       string   `json:"dtype"`
	Shape       []int64  `json:"shape"`
	DataOffsets [2]int64 `json:"data_offsets"`
	NBytes      int64    `json:"nbytes"`
	SHA256      string   `json:"sha256"`
	Hex         string   `json:"hex"`
	Gen         recipe   `json:"gen"`
}

type goExpectedFile struct {
	Size        int64              `json:"size"`
	SHA256      string             `json:"sha256"`
	Metadata    map[string]string  `json:"metadata"`
	PythonOrder bool               `json:"python_order"`
	Optional    bool               `json:"optional"`
	Tensors     []goExpectedTensor `json:"tensors"`
}

// buildGoFixtures makes every go_ file in memory and go_expected.json.
func buildGoFixtures(t *testing.T) (map[string][]byte, []byte) {
	files := map[string][]byte{}
	exp := struct {
		Generator string                    `json:"generator"`
		Checker   string                    `json:"checker"`
		Files     map[string]goExpectedFile `json:"files"`
	}{
		Generator: "go test ./formats/safetensors -run TestGoFixtures -update",
		Checker:   pyScript,
		Files:     map[string]goExpectedFile{},
	}
	for _, gf := range goFixtureFiles() {
		var specs []TensorSpec
		for _, gt := range gf.tensors {
			specs = append(specs, gt.spec)
		}
		var buf bytes.Buffer
		w, err := NewWriter(&buf, specs, gf.metadata)
		if err != nil {
			t.Fatalf("%s: %v", gf.name, err)
		}
		rec := goExpectedFile{Metadata: gf.metadata, PythonOrder: gf.pythonOrder, Optional: gf.optional}
		for i, gt := range gf.tensors {
			data := recipeBytes(t, gt.spec, gt.gen)
			if err := w.WriteTensor(gt.spec.Name, data); err != nil {
				t.Fatalf("%s: %v", gf.name, err)
			}
			lay := w.Tensors()[i]
			begin := lay.Offset - w.start
			rec.Tensors = append(rec.Tensors, goExpectedTensor{
				Name: gt.spec.Name, DType: string(gt.spec.DType), Shape: append([]int64{}, gt.spec.Shape...),
				DataOffsets: [2]int64{begin, begin + lay.Size}, NBytes: int64(len(data)),
				SHA256: sha256Hex(data), Hex: hex.EncodeToString(data), Gen: gt.gen,
			})
		}
		if err := w.Close(); err != nil {
			t.Fatalf("%s: %v", gf.name, err)
		}
		rec.Size, rec.SHA256 = int64(buf.Len()), sha256Hex(buf.Bytes())
		files[gf.name] = buf.Bytes()
		exp.Files[gf.name] = rec
	}
	js, err := json.MarshalIndent(exp, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	return files, append(js, '\n')
}

// TestGoFixtures checks that the committed go_ files are exactly what our
// writer produces now, and that they read back. With -update it rewrites them;
// tools/safetensors_fixtures.py then checks them with the Python package.
func TestGoFixtures(t *testing.T) {
	files, expJSON := buildGoFixtures(t)
	files["go_expected.json"] = expJSON
	for _, name := range slices.Sorted(maps.Keys(files)) {
		want := files[name]
		path := filepath.Join(fixtureDir, name)
		if *update {
			if err := os.MkdirAll(fixtureDir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v: run `go test ./formats/safetensors -run TestGoFixtures -update`, then `%s` on the GPU machine", err, pyScript)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from what the writer produces now: rerun with -update and re-verify with `%s`", name, pyScript)
		}
	}
	// Self-consistency: every go_ file reads back with the recipe's bytes.
	for _, gf := range goFixtureFiles() {
		h, err := headerOf(files[gf.name])
		if err != nil {
			t.Fatalf("%s: %v", gf.name, err)
		}
		if !reflect.DeepEqual(h.Metadata, gf.metadata) {
			t.Errorf("%s: metadata %q", gf.name, h.Metadata)
		}
		for _, gt := range gf.tensors {
			tt, ok := h.Lookup(gt.spec.Name)
			if !ok || !bytes.Equal(files[gf.name][tt.Offset:tt.Offset+tt.Size], recipeBytes(t, gt.spec, gt.gen)) {
				t.Errorf("%s: tensor %q does not read back", gf.name, gt.spec.Name)
			}
		}
	}
	var total int
	for _, b := range files {
		total += len(b)
	}
	if total > 100_000 {
		t.Errorf("go fixtures hold %d bytes; keep them tiny", total)
	}
}
