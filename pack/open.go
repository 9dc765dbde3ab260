package pack

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"lithos/formats/safetensors"
	"lithos/manifests"
	"lithos/pack/blm"
)

// Bundle is an opened bundle whose manifest and layout have been checked against its files.
type Bundle struct {
	Dir         string
	Manifest    *manifests.Bundle
	WeightsPath string
	// WeightsSize is the weights file's size in bytes (= Manifest.Weights.Bytes).
	WeightsSize int64
}

// OpenBundle reads and checks a bundle directory without reading any weights: the manifest
// (manifests.ParseBundle: format, version, field rules, tensor order and alignment); the
// weights file's size against the manifest (a truncated file is refused naming the first
// tensor past its end: manifests.Bundle.CheckFile); every BLM tensor's geometry re-derived by
// blm.Geometry.Check and its stack by blm.Stack.Check; every plain tensor's length against its
// dtype and shape; every copied file present with its recorded size. It is what the runtime
// runs before it maps a single tensor. Errors name the file or tensor and the rule.
func OpenBundle(dir string) (*Bundle, error) {
	mpath := filepath.Join(dir, manifests.BundleManifestName)
	f, err := os.Open(mpath)
	if err != nil {
		return nil, fmt.Errorf("bundle %s: %w", dir, err)
	}
	data, err := io.ReadAll(io.LimitReader(f, manifests.MaxManifestBytes+1))
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", mpath, err)
	}
	m, err := manifests.ParseBundle(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", mpath, err)
	}
	b := &Bundle{Dir: dir, Manifest: m, WeightsPath: filepath.Join(dir, m.Weights.Path)}
	st, err := os.Stat(b.WeightsPath)
	if err != nil {
		return nil, fmt.Errorf("bundle %s: %w", dir, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("bundle %s: %s is not a regular file", dir, m.Weights.Path)
	}
	b.WeightsSize = st.Size()
	if err := m.CheckFile(st.Size()); err != nil {
		return nil, fmt.Errorf("bundle %s: %w", dir, err)
	}
	for i := range m.Tensors {
		t := &m.Tensors[i]
		if t.Encoding == manifests.EncodingBLM {
			if _, _, err := b.Matrix(t); err != nil {
				return nil, fmt.Errorf("bundle %s: %w", dir, err)
			}
			continue
		}
		d, err := safetensors.ParseDType(t.Format)
		if err != nil {
			return nil, fmt.Errorf("bundle %s: tensor %s: format: %w", dir, t.Name, err)
		}
		n, err := safetensors.ByteSize(d, t.Shape)
		if err != nil || n != t.Length {
			return nil, fmt.Errorf("bundle %s: tensor %s: %s %v is %d bytes, the manifest says length %d (%v)", dir, t.Name, d, t.Shape, n, t.Length, err)
		}
	}
	for _, cf := range m.Files {
		st, err := os.Stat(filepath.Join(dir, filepath.FromSlash(cf.Path)))
		if err != nil {
			return nil, fmt.Errorf("bundle %s: %w", dir, err)
		}
		if st.Size() != cf.Bytes {
			return nil, fmt.Errorf("bundle %s: %s: %d bytes, the manifest says %d", dir, cf.Path, st.Size(), cf.Bytes)
		}
	}
	return b, nil
}

// Matrix returns the BLM geometry and row stack of a packed tensor of the bundle, re-checked:
// blm.Geometry.Check must re-derive every field of the manifest's layout, and the stack must be
// valid for N rows. Errors name the tensor and the field.
func (b *Bundle) Matrix(t *manifests.BundleTensor) (blm.Geometry, blm.Stack, error) {
	if t.Encoding != manifests.EncodingBLM || t.Layout == nil || t.Stack == nil {
		return blm.Geometry{}, blm.Stack{}, fmt.Errorf("tensor %s: not a BLM matrix", t.Name)
	}
	g := geometryOf(*t.Layout)
	if err := g.Check(); err != nil {
		return g, blm.Stack{}, fmt.Errorf("tensor %s: layout: %w", t.Name, err)
	}
	st := stackOf(*t.Stack)
	if err := st.Check(); err != nil {
		return g, st, fmt.Errorf("tensor %s: stack: %w", t.Name, err)
	}
	if st.Rows() != g.N {
		return g, st, fmt.Errorf("tensor %s: stack of %d rows for a matrix of %d", t.Name, st.Rows(), g.N)
	}
	return g, st, nil
}

// Section returns a reader over a tensor's bytes [Offset, Offset+Length) of the weights file,
// and the file to close.
func (b *Bundle) Section(t *manifests.BundleTensor) (*io.SectionReader, *os.File, error) {
	f, err := os.Open(b.WeightsPath)
	if err != nil {
		return nil, nil, err
	}
	return io.NewSectionReader(f, t.Offset, t.Length), f, nil
}
