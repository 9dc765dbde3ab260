package pack

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// TestEntryWriter writes entries of awkward lengths through Write (in odd pieces) and ReadFrom,
// with direct I/O where the file system offers it and with the buffered descriptor, and checks
// the file's bytes, the zeros after each entry and the sha256.
func TestEntryWriter(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, direct := range []bool{true, false} {
		for _, n := range []int{1, 4095, 4096, 4097, chunkBytes - 1, chunkBytes, 3*chunkBytes + 12345} {
			path := filepath.Join(t.TempDir(), "w.bin")
			f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			const off = 16384
			size := off + alignUp(int64(n)) + 16384
			if err := preallocate(f, size); err != nil {
				t.Fatal(err)
			}
			var d *os.File
			if direct {
				d = openDirect(path)
			}
			wf := newWeightsFile(f, d, 2, 2)
			data := make([]byte, n)
			for i := range data {
				data[i] = byte(r.Uint32())
			}
			w, err := newEntryWriter(wf, off)
			if err != nil {
				t.Fatal(err)
			}
			if n%2 == 0 {
				for p := data; len(p) > 0; {
					k := min(len(p), 1+r.IntN(300000))
					if m, err := w.Write(p[:k]); err != nil || m != k {
						t.Fatal(m, err)
					}
					p = p[k:]
				}
			} else if m, err := w.ReadFrom(bytes.NewReader(data)); err != nil || m != int64(n) {
				t.Fatal(m, err)
			}
			sum, err := w.Close()
			if err != nil {
				t.Fatal(err)
			}
			wf.stop()
			if d != nil {
				d.Close()
			}
			f.Close()
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if int64(len(got)) != size || !bytes.Equal(got[off:off+n], data) || sum != sha256Hex(data) {
				t.Fatalf("direct %v, %d bytes: file or sha256 differ", direct, n)
			}
			if bytes.ContainsFunc(got[:off], func(r rune) bool { return r != 0 }) || bytes.ContainsFunc(got[off+n:], func(r rune) bool { return r != 0 }) {
				t.Fatalf("direct %v, %d bytes: non-zero bytes outside the entry", direct, n)
			}
		}
	}
	if _, err := newEntryWriter(newWeightsFile(nil, nil, 1, 1), 100); err == nil {
		t.Fatal("an unaligned entry offset was accepted")
	}
}
