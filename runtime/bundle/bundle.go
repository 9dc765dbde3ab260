// Package bundle is the runtime's loader: it opens a lithos bundle (docs/bundle.md), maps its
// weights file read-only into memory and hands out each tensor as a view of the mapping — the
// CPU backend computes on those bytes in place, and a Metal backend can wrap the same pages with
// newBufferWithBytesNoCopy (every tensor starts on a 16 KiB boundary, ARCHITECTURE.md §3.3).
//
// Open runs lithos/pack.OpenBundle first — manifest format and version, every tensor's range
// inside the weights file, every BLM geometry and stack re-derived, plain tensor sizes, copied
// files — and refuses a bundle that fails any of it with the tensor named. It then maps the file
// it opened and checks that file's size again (the file may have changed since it was checked).
// It does not hash the weights: `lithos-pack verify` does.
//
// Imports: lithos/pack (OpenBundle), lithos/pack/blm, lithos/manifests, golang.org/x/sys/unix.
package bundle

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"

	"lithos/formats/f16"
	"lithos/manifests"
	"lithos/pack"
	"lithos/pack/blm"
)

// Bundle is an opened, checked and mapped bundle. Views it returns stay valid until Close.
type Bundle struct {
	// Dir is the bundle directory; Manifest its checked manifest.
	Dir      string
	Manifest *manifests.Bundle
	data     []byte // the weights file, mapped read-only (nil when it is empty)
	unmap    func() error
	byName   map[string]*manifests.BundleTensor
}

// Open checks the bundle in dir (pack.OpenBundle) and maps its weights file read-only. Errors
// name the bundle, the file or the tensor, and the rule broken.
func Open(dir string) (*Bundle, error) {
	pb, err := pack.OpenBundle(dir)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(pb.WeightsPath)
	if err != nil {
		return nil, fmt.Errorf("bundle %s: %w", dir, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("bundle %s: %w", dir, err)
	}
	if err := pb.Manifest.CheckFile(st.Size()); err != nil {
		return nil, fmt.Errorf("bundle %s: the weights file changed after it was checked: %w", dir, err)
	}
	if st.Size() > math.MaxInt {
		return nil, fmt.Errorf("bundle %s: %s is %d bytes, more than this process can map", dir, pb.Manifest.Weights.Path, st.Size())
	}
	b := &Bundle{Dir: dir, Manifest: pb.Manifest, byName: make(map[string]*manifests.BundleTensor, len(pb.Manifest.Tensors))}
	if st.Size() > 0 {
		if b.data, b.unmap, err = mapFile(f, int(st.Size())); err != nil {
			return nil, fmt.Errorf("bundle %s: map %s: %w", dir, pb.Manifest.Weights.Path, err)
		}
	}
	for i := range b.Manifest.Tensors {
		t := &b.Manifest.Tensors[i]
		if t.Offset < 0 || t.Length < 0 || t.Offset > int64(len(b.data)) || t.Length > int64(len(b.data))-t.Offset {
			b.Close()
			return nil, fmt.Errorf("bundle %s: tensor %s: bytes [%d, %d) are outside the %d mapped bytes", dir, t.Name, t.Offset, t.Offset+t.Length, len(b.data))
		}
		b.byName[t.Name] = t
	}
	return b, nil
}

// Close unmaps the weights. Views handed out before must not be used after it.
func (b *Bundle) Close() error {
	if b == nil || b.unmap == nil {
		return nil
	}
	err := b.unmap()
	b.unmap, b.data = nil, nil
	return err
}

// Weights returns the whole mapped weights file (read-only: writing to it faults).
func (b *Bundle) Weights() []byte { return b.data }

// Tensor returns the manifest entry called name (a runtime name, docs/bundle.md §3).
func (b *Bundle) Tensor(name string) (*manifests.BundleTensor, bool) {
	t, ok := b.byName[name]
	return t, ok
}

// Bytes returns the view of a tensor's bytes [Offset, Offset+Length) in the mapping.
func (b *Bundle) Bytes(t *manifests.BundleTensor) ([]byte, error) {
	if t.Offset < 0 || t.Length < 0 || t.Offset > int64(len(b.data)) || t.Length > int64(len(b.data))-t.Offset {
		return nil, fmt.Errorf("tensor %s: bytes [%d, %d) are outside the %d mapped bytes", t.Name, t.Offset, t.Offset+t.Length, len(b.data))
	}
	return b.data[t.Offset : t.Offset+t.Length : t.Offset+t.Length], nil
}

// Matrix is a BLM-packed tensor: its checked geometry and stack and views of its packed bytes
// and row-scale table.
type Matrix struct {
	Tensor    *manifests.BundleTensor
	Geometry  blm.Geometry
	Stack     blm.Stack
	Packed    []byte // Geometry.TotalBytes
	RowScales []byte // 4·Blocks·Rows bytes: little-endian float32 per packed row
}

// Matrix returns the packed matrix t (Encoding blm), re-checking its geometry and stack
// (pack.Bundle.Matrix). Errors name the tensor.
func (b *Bundle) Matrix(t *manifests.BundleTensor) (Matrix, error) {
	pb := pack.Bundle{Dir: b.Dir, Manifest: b.Manifest}
	g, st, err := pb.Matrix(t)
	if err != nil {
		return Matrix{}, err
	}
	raw, err := b.Bytes(t)
	if err != nil {
		return Matrix{}, err
	}
	if int64(len(raw)) != g.TotalBytes+t.RowScales.Bytes || t.RowScales.Bytes != 4*g.Blocks*int64(g.Rows) {
		return Matrix{}, fmt.Errorf("tensor %s: %d bytes for a %d-byte matrix and %d bytes of row scales", t.Name, len(raw), g.TotalBytes, t.RowScales.Bytes)
	}
	return Matrix{Tensor: t, Geometry: g, Stack: st, Packed: raw[:g.TotalBytes], RowScales: raw[g.TotalBytes:]}, nil
}

// Floats decodes a plain BF16, F16 or F32 tensor to float32 (exact) and applies its manifest
// transform (one_plus: 1 + w; neg_exp: −exp(w), in float32 as lithos/runtime/model computes
// them). It copies: meant for the small vectors (norms, conv weights, GDN parameters).
func (b *Bundle) Floats(t *manifests.BundleTensor) ([]float32, error) {
	if t.Encoding != manifests.EncodingPlain {
		return nil, fmt.Errorf("tensor %s: encoding %s, want plain", t.Name, t.Encoding)
	}
	raw, err := b.Bytes(t)
	if err != nil {
		return nil, err
	}
	v, err := decodeFloats(t.Format, raw)
	if err != nil {
		return nil, fmt.Errorf("tensor %s: %w", t.Name, err)
	}
	switch t.Transform {
	case manifests.TransformNone:
	case manifests.TransformOnePlus:
		for i := range v {
			v[i] = 1 + v[i]
		}
	case manifests.TransformNegExp:
		for i := range v {
			v[i] = -float32(math.Exp(float64(v[i])))
		}
	default:
		return nil, fmt.Errorf("tensor %s: transform %q is not known", t.Name, t.Transform)
	}
	return v, nil
}

func decodeFloats(format string, raw []byte) ([]float32, error) {
	var size int
	switch format {
	case "BF16", "F16":
		size = 2
	case "F32":
		size = 4
	default:
		return nil, fmt.Errorf("dtype %s, want BF16, F16 or F32", format)
	}
	if len(raw)%size != 0 {
		return nil, fmt.Errorf("%d bytes is not a whole number of %s values", len(raw), format)
	}
	v := make([]float32, len(raw)/size)
	for i := range v {
		switch format {
		case "BF16":
			v[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(raw[2*i:])) << 16)
		case "F16":
			v[i] = f16.ToFloat32(binary.LittleEndian.Uint16(raw[2*i:]))
		case "F32":
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
	}
	return v, nil
}

// File returns the path of a file copied into the bundle (tokenizer.json,
// generation_config.json, …) and whether the manifest lists it.
func (b *Bundle) File(name string) (string, bool) {
	for _, f := range b.Manifest.Files {
		if f.Path == name {
			return filepath.Join(b.Dir, filepath.FromSlash(f.Path)), true
		}
	}
	return "", false
}

// ReadFile reads a copied file of at most limit bytes. A file the manifest does not list is an
// error wrapping os.ErrNotExist.
func (b *Bundle) ReadFile(name string, limit int64) ([]byte, error) {
	path, ok := b.File(name)
	if !ok {
		return nil, fmt.Errorf("bundle %s: no %s: %w", b.Dir, name, os.ErrNotExist)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("bundle %s: %w", b.Dir, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("bundle %s: read %s: %w", b.Dir, name, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("bundle %s: %s is larger than %d bytes", b.Dir, name, limit)
	}
	return data, nil
}
