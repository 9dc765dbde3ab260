package safetensors

import (
	"fmt"
	"io"
	"os"
)

// File is an open safetensors file whose header has been read and validated.
type File struct {
	Header *Header
	Path   string
	Size   int64 // file size in bytes

	f *os.File
}

// Open opens the safetensors file at path and reads its header (two reads at
// most; no tensor data). Errors are wrapped with the path; a header that
// breaks the format yields a *FormatError (errors.As).
func Open(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open safetensors: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open safetensors %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("open safetensors %s: not a regular file", path)
	}
	h, err := ReadHeader(f, st.Size())
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open safetensors %s: %w", path, err)
	}
	return &File{Header: h, Path: path, Size: st.Size(), f: f}, nil
}

// Section returns a reader over the data of t, a tensor of f.Header.
func (f *File) Section(t Tensor) *io.SectionReader {
	return io.NewSectionReader(f.f, t.Offset, t.Size)
}

// ReadTensor returns the raw bytes of t (t.Size bytes, little-endian,
// row-major), read in one ReadAt.
func (f *File) ReadTensor(t Tensor) ([]byte, error) {
	if t.Offset < f.Header.DataStart || t.Size < 0 || t.Offset+t.Size > f.Size {
		return nil, fmt.Errorf("read tensor %q of %s: range [%d, %d) outside the data section", t.Name, f.Path, t.Offset, t.Offset+t.Size)
	}
	b := make([]byte, t.Size)
	if err := readFullAt(f.f, b, t.Offset); err != nil {
		return nil, fmt.Errorf("read tensor %q of %s: %w", t.Name, f.Path, err)
	}
	return b, nil
}

// Close closes the file.
func (f *File) Close() error { return f.f.Close() }
