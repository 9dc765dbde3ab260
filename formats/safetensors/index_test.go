package safetensors

import (
	"context"
	"errors"
	"io"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestParseIndex(t *testing.T) {
	js := `{"metadata": {"total_size": 60000000000, "format": "pt"},
	"weight_map": {"b": "model-00002-of-00002.safetensors", "a": "model-00001-of-00002.safetensors",
	"c": "model-00001-of-00002.safetensors", "sub": "dir/x.safetensors"}, "extra": [1, 2]}`
	ix, err := ParseIndex(strings.NewReader(js))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"dir/x.safetensors", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}
	if !reflect.DeepEqual(ix.Shards(), want) {
		t.Errorf("Shards = %v", ix.Shards())
	}
	if n, ok := ix.TotalSize(); !ok || n != 60_000_000_000 {
		t.Errorf("TotalSize = %d, %v", n, ok)
	}
	if ix.Metadata["format"] != "pt" || len(ix.WeightMap) != 4 {
		t.Errorf("index %+v", ix)
	}
}

func TestParseIndexRejects(t *testing.T) {
	wm := func(inner string) string { return `{"weight_map": {` + inner + `}}` }
	cases := []struct {
		name      string
		js        string
		rule      Rule
		tensor    string
		hasTensor bool
	}{
		{"not JSON", `{"weight_map":`, RuleJSON, "", false},
		{"array", `[]`, RuleJSON, "", false},
		{"no weight_map", `{"metadata": {}}`, RuleIndex, "", false},
		{"null weight_map", `{"weight_map": null}`, RuleIndex, "", false},
		{"empty weight_map", wm(``), RuleIndex, "", false},
		{"weight_map array", `{"weight_map": ["a"]}`, RuleIndex, "weight_map", true},
		{"non-string shard", wm(`"w": 1`), RuleIndex, "w", true},
		{"duplicate tensor", wm(`"w": "a.safetensors", "w": "b.safetensors"`), RuleDuplicate, "w", true},
		{"dotdot", wm(`"w": "../a.safetensors"`), RuleIndex, "w", true},
		{"inner dotdot", wm(`"w": "x/../../a.safetensors"`), RuleIndex, "w", true},
		{"absolute", wm(`"w": "/etc/passwd"`), RuleIndex, "w", true},
		{"backslash", wm(`"w": "..\\a.safetensors"`), RuleIndex, "w", true},
		{"empty name", wm(`"w": ""`), RuleIndex, "w", true},
		{"dot", wm(`"w": "."`), RuleIndex, "w", true},
		{"dot element", wm(`"w": "./a.safetensors"`), RuleIndex, "w", true},
		{"double slash", wm(`"w": "a//b.safetensors"`), RuleIndex, "w", true},
		{"bad metadata", `{"metadata": 5, "weight_map": {"w": "a.safetensors"}}`, RuleIndex, "", false},
		{"non-UTF-8", "{\"weight_map\": {\"w\xff\": \"a\"}}", RuleUTF8, "", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ix, err := ParseIndex(strings.NewReader(c.js))
			if err == nil {
				t.Fatalf("accepted: %+v", ix)
			}
			wantFormatError(t, err, c.rule, c.tensor, c.hasTensor)
		})
	}
	t.Run("too large", func(t *testing.T) {
		r := io.MultiReader(strings.NewReader(`{"weight_map": {"w": "a.safetensors"}, "pad": "`), io.LimitReader(spaces{}, MaxIndexLen))
		_, err := ParseIndex(r)
		wantFormatError(t, err, RuleIndex, "", false)
	})
}

type spaces struct{}

func (spaces) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = ' '
	}
	return len(p), nil
}

// writeFile writes a safetensors file of specs whose data bytes are all fill.
func writeFile(t *testing.T, path string, specs []TensorSpec, fill byte) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := NewWriter(f, specs, map[string]string{"format": "pt"})
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, w.Remaining())
	for i := range data {
		data[i] = fill
	}
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestOpenModel(t *testing.T) {
	ctx := context.Background()
	mk := func(t *testing.T, index string, shards map[string][]TensorSpec) string {
		dir := t.TempDir()
		fill := byte(1) // shards in name order get 1, 2, ...
		for _, name := range slices.Sorted(maps.Keys(shards)) {
			writeFile(t, filepath.Join(dir, name), shards[name], fill)
			fill++
		}
		if index != "" {
			if err := os.WriteFile(filepath.Join(dir, IndexName), []byte(index), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	s1 := "model-00001-of-00002.safetensors"
	s2 := "model-00002-of-00002.safetensors"
	shards := map[string][]TensorSpec{
		s1: {{Name: "a", DType: BF16, Shape: []int64{2, 2}}, {Name: "b", DType: F8E4M3, Shape: []int64{4}}},
		s2: {{Name: "c", DType: F32}},
	}
	good := `{"metadata":{"total_size":16},"weight_map":{"a":"` + s1 + `","b":"` + s1 + `","c":"` + s2 + `"}}`

	t.Run("sharded", func(t *testing.T) {
		dir := mk(t, good, shards)
		m, err := OpenModel(ctx, dir)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		if got := strings.Join(m.Names(), ","); got != "a,b,c" {
			t.Errorf("names %s", got)
		}
		f, c, ok := m.Lookup("c")
		if !ok || filepath.Base(f.Path) != s2 || c.DType != F32 || c.Size != 4 {
			t.Fatalf("c: %v %+v %v", f, c, ok)
		}
		b, err := f.ReadTensor(c)
		if err != nil || string(b) != "\x02\x02\x02\x02" {
			t.Errorf("c bytes %v %v", b, err)
		}
		if _, _, ok := m.Lookup("zz"); ok {
			t.Error("found a tensor that does not exist")
		}
	})
	t.Run("single file dir and path", func(t *testing.T) {
		dir := mk(t, "", map[string][]TensorSpec{SingleName: shards[s1]})
		for _, p := range []string{dir, filepath.Join(dir, SingleName)} {
			m, err := OpenModel(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			if m.Index != nil || len(m.Names()) != 2 {
				t.Errorf("%s: %+v", p, m)
			}
			m.Close()
		}
	})
	t.Run("nothing there", func(t *testing.T) {
		_, err := OpenModel(ctx, t.TempDir())
		if err == nil || !strings.Contains(err.Error(), IndexName) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("shard tensor not in weight_map", func(t *testing.T) {
		dir := mk(t, `{"weight_map":{"a":"`+s1+`","c":"`+s2+`"}}`, shards)
		_, err := OpenModel(ctx, dir)
		wantFormatError(t, err, RuleIndex, "b", true)
	})
	t.Run("weight_map tensor not in shard", func(t *testing.T) {
		dir := mk(t, `{"weight_map":{"a":"`+s1+`","b":"`+s1+`","c":"`+s2+`","d":"`+s2+`"}}`, shards)
		_, err := OpenModel(ctx, dir)
		wantFormatError(t, err, RuleIndex, "d", true)
	})
	t.Run("tensor in two shards", func(t *testing.T) {
		two := map[string][]TensorSpec{s1: shards[s1], s2: {{Name: "c", DType: F32}, {Name: "a", DType: BF16, Shape: []int64{2, 2}}}}
		dir := mk(t, good, two)
		_, err := OpenModel(ctx, dir)
		wantFormatError(t, err, RuleIndex, "a", true)
	})
	t.Run("missing shard", func(t *testing.T) {
		dir := mk(t, good, map[string][]TensorSpec{s1: shards[s1]})
		_, err := OpenModel(ctx, dir)
		if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), s2) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("corrupt shard names the file", func(t *testing.T) {
		dir := mk(t, good, shards)
		if err := os.WriteFile(filepath.Join(dir, s2), []byte("\x02\x00\x00\x00\x00\x00\x00\x00[]"), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := OpenModel(ctx, dir)
		wantFormatError(t, err, RuleJSON, "", false)
		if !strings.Contains(err.Error(), s2) {
			t.Errorf("error %q does not name the shard", err)
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		dir := mk(t, good, shards)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := OpenModel(cctx, dir); !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v", err)
		}
	})
}
