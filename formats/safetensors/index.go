package safetensors

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"
)

// IndexName is the file name of a sharded checkpoint's index
// (transformers / huggingface_hub convention, hub-and-go.md §A13).
const IndexName = "model.safetensors.index.json"

// SingleName is the file name of an unsharded checkpoint.
const SingleName = "model.safetensors"

// MaxIndexLen bounds the size of an index file read by ParseIndex, in bytes
// (64 MiB; the indexes of the largest public checkpoints are a few MB).
const MaxIndexLen = 64 << 20

// Index is a parsed model.safetensors.index.json:
// {"metadata": {...}, "weight_map": {tensor name: shard file name}}.
type Index struct {
	// Metadata is the free-form "metadata" object (nil when absent); JSON
	// numbers are json.Number, exact (e.g. "total_size"; see TotalSize).
	Metadata map[string]any
	// WeightMap maps every tensor name to the shard file holding it, a
	// slash-separated path relative to the index's directory.
	WeightMap map[string]string
}

// ParseIndex reads and validates an index: at most MaxIndexLen bytes of
// UTF-8 JSON; an object with a non-empty "weight_map" of string values and
// no repeated tensor name; shard names that are relative, slash-separated,
// clean paths (io/fs.ValidPath: no "..", no leading "/", no empty element)
// without backslashes; "metadata" absent, null or an object. Other top-level
// keys are ignored. Errors are *FormatError with RuleIndex, RuleDuplicate,
// RuleUTF8 or RuleJSON, naming the tensor where one is concerned.
func ParseIndex(r io.Reader) (*Index, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxIndexLen+1))
	if err != nil {
		return nil, fmt.Errorf("safetensors: read index: %w", err)
	}
	if len(data) > MaxIndexLen {
		return nil, fileErr(RuleIndex, "index exceeds %d bytes", MaxIndexLen)
	}
	if !utf8.Valid(data) {
		return nil, fileErr(RuleUTF8, "index is not valid UTF-8 (first bad byte at offset %d)", firstInvalidUTF8(data))
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, fileErr(RuleJSON, "index is not a JSON object: %v", err)
	}
	raw, ok := top["weight_map"]
	if !ok || string(raw) == "null" {
		return nil, fileErr(RuleIndex, "index has no weight_map")
	}
	p := parser{b: raw, src: "weight_map"}
	wm, err := p.stringMap("weight_map", RuleIndex, false, true)
	if err != nil {
		return nil, err
	}
	if p.ws(); p.i != len(p.b) {
		return nil, p.syntaxErr("trailing bytes after weight_map")
	}
	if len(wm) == 0 {
		return nil, fileErr(RuleIndex, "weight_map is empty")
	}
	for name, shard := range wm {
		if err := checkShardName(shard); err != nil {
			return nil, tensorErr(name, RuleIndex, "shard name %q: %v", shard, err)
		}
	}
	ix := &Index{WeightMap: wm}
	if m, ok := top["metadata"]; ok && string(m) != "null" {
		dec := json.NewDecoder(bytes.NewReader(m))
		dec.UseNumber()
		if err := dec.Decode(&ix.Metadata); err != nil {
			return nil, fileErr(RuleIndex, "metadata must be an object: %v", err)
		}
	}
	return ix, nil
}

func checkShardName(s string) error {
	switch {
	case strings.ContainsRune(s, '\\'):
		return errors.New("contains a backslash")
	case !fs.ValidPath(s) || s == ".":
		return errors.New("not a clean relative slash-separated path (no '..', leading '/', empty or '.' element)")
	}
	return nil
}

// Shards returns the distinct shard file names of the weight map, sorted.
func (ix *Index) Shards() []string {
	var out []string
	for _, s := range ix.WeightMap {
		out = append(out, s)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// TotalSize returns metadata.total_size when it is present and an integer.
// transformers writes the sum of tensor sizes in bytes there; other writers
// differ, so it is informational only.
func (ix *Index) TotalSize() (int64, bool) {
	n, ok := ix.Metadata["total_size"].(json.Number)
	if !ok {
		return 0, false
	}
	v, err := n.Int64()
	return v, err == nil
}

// Model is a checkpoint of one or several safetensors files, opened with
// every header read and cross-checked against the index.
type Model struct {
	Dir   string
	Index *Index  // nil for a single-file model
	Files []*File // one per shard, in Index.Shards order

	where map[string]int // tensor name → position in Files
}

// OpenModel opens the checkpoint at path: a directory holding
// model.safetensors.index.json (sharded) or model.safetensors (single), or a
// .safetensors file. For a sharded model every shard's header is read and
// the index must agree with the shards exactly: each weight_map tensor is in
// the shard it names, and each shard tensor is in the weight_map under that
// shard (so no tensor is in two shards). Disagreements are *FormatError with
// RuleIndex naming the tensor. ctx is checked between shards.
func OpenModel(ctx context.Context, path string) (*Model, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("open model: %w", err)
	}
	if !st.IsDir() {
		f, err := Open(path)
		if err != nil {
			return nil, err
		}
		return singleModel(filepath.Dir(path), f), nil
	}
	ixPath := filepath.Join(path, IndexName)
	r, err := os.Open(ixPath)
	if errors.Is(err, fs.ErrNotExist) {
		f, err := Open(filepath.Join(path, SingleName))
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("open model %s: neither %s nor %s exists", path, IndexName, SingleName)
		}
		if err != nil {
			return nil, err
		}
		return singleModel(path, f), nil
	}
	if err != nil {
		return nil, fmt.Errorf("open model: %w", err)
	}
	ix, err := ParseIndex(r)
	r.Close()
	if err != nil {
		return nil, fmt.Errorf("open model %s: %w", ixPath, err)
	}
	m := &Model{Dir: path, Index: ix, where: make(map[string]int, len(ix.WeightMap))}
	fail := func(err error) (*Model, error) {
		m.Close()
		return nil, err
	}
	for _, shard := range ix.Shards() {
		if err := ctx.Err(); err != nil {
			return fail(fmt.Errorf("open model %s: %w", path, err))
		}
		f, err := Open(filepath.Join(path, filepath.FromSlash(shard)))
		if err != nil {
			return fail(fmt.Errorf("open model %s: shard %s: %w", path, shard, err))
		}
		m.Files = append(m.Files, f)
		for _, t := range f.Header.Tensors {
			mapped, ok := ix.WeightMap[t.Name]
			switch {
			case !ok:
				return fail(fmt.Errorf("open model %s: %w", path, tensorErr(t.Name, RuleIndex, "in shard %s but not in the weight_map", shard)))
			case mapped != shard:
				return fail(fmt.Errorf("open model %s: %w", path, tensorErr(t.Name, RuleIndex, "in shard %s but the weight_map maps it to %s", shard, mapped)))
			}
			m.where[t.Name] = len(m.Files) - 1
		}
	}
	for _, name := range slices.Sorted(maps.Keys(ix.WeightMap)) {
		if _, ok := m.where[name]; !ok {
			return fail(fmt.Errorf("open model %s: %w", path, tensorErr(name, RuleIndex, "the weight_map maps it to %s, which has no such tensor", ix.WeightMap[name])))
		}
	}
	return m, nil
}

func singleModel(dir string, f *File) *Model {
	m := &Model{Dir: dir, Files: []*File{f}, where: make(map[string]int, len(f.Header.Tensors))}
	for _, t := range f.Header.Tensors {
		m.where[t.Name] = 0
	}
	return m
}

// Lookup returns the file holding the tensor called name and the tensor.
func (m *Model) Lookup(name string) (*File, Tensor, bool) {
	i, ok := m.where[name]
	if !ok {
		return nil, Tensor{}, false
	}
	t, ok := m.Files[i].Header.Lookup(name)
	return m.Files[i], t, ok
}

// Names returns every tensor name of the model, sorted.
func (m *Model) Names() []string {
	out := make([]string, 0, len(m.where))
	for n := range m.where {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Close closes every file; it returns the errors joined.
func (m *Model) Close() error {
	var errs []error
	for _, f := range m.Files {
		errs = append(errs, f.Close())
	}
	return errors.Join(errs...)
}
