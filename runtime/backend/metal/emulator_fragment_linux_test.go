//go:build linux && amd64

package metal

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"

	"lithos/kernels"
	"lithos/runtime/backend/gpu"
)

// fragDevice is the emulated device claiming the fragment-major layout (gpu.FragmentLayouter)
// — only to check LoadTarget's repack: its kernels, the Metal source's scalar path, do not
// read that layout (they report kernels.GuardBLMLayout).
type fragDevice struct{ *emuDevice }

func (fragDevice) FragmentLayout() bool { return true }

// TestFragmentRepack: on a device that reads the fragment-major layout, LoadTarget rewrites
// every target matrix that has a fragment-major copy in place (the device bytes at the matrix
// are kernels.BLMFragmentMajor of the bundle's, the rest of its bytes and the first bytes of its
// row-scale table as uploaded) and marks it so that its kernels are the lithos_blmf_* ones; on
// a device that does not, nothing changes. Golden model b (every matrix has a copy; the refused
// shapes are TestBLMFragmentMajorRefusals').
func TestFragmentRepack(t *testing.T) {
	b := emuBundle(t, "b")
	w := b.Weights()
	for _, frag := range []bool{true, false} {
		d := newEmuDevice(t)
		var dev gpu.Device = d
		if frag {
			dev = fragDevice{d}
		}
		tg, err := gpu.LoadTarget(t.Context(), dev, b)
		if err != nil {
			t.Fatal(err)
		}
		repacked := 0
		for _, name := range tg.MatrixNames() {
			mx, _ := tg.Matrix(name)
			off := int64(mx.Ptr - tg.Weights.Ptr)
			orig := w[off : off+mx.Geometry.TotalBytes]
			got := devBytes(t, d, mx.Ptr, len(orig))
			fm, err := kernels.BLMFragmentMajor(mx.Geometry, orig)
			want := orig
			wantLayout := uint32(kernels.BLMLayoutBLM)
			if frag && err == nil {
				want = append(fm, orig[len(fm):]...)
				wantLayout = kernels.BLMLayoutFragment
				repacked++
			}
			if mx.Layout != wantLayout || !bytes.Equal(got, want) {
				t.Fatalf("fragment layout %v: %s: layout %d (want %d), device bytes equal to the expected ones: %v", frag, name, mx.Layout, wantLayout, bytes.Equal(got, want))
			}
			k, err := mx.Kernel(8)
			if err != nil {
				t.Fatal(err)
			}
			if want, _ := kernels.BLMKernelLayout(mx.Geometry.Format, 8, wantLayout); k != want {
				t.Fatalf("%s: kernel %s, want %s", name, k, want)
			}
			sc := devBytes(t, d, mx.Scales, 4)
			if !bytes.Equal(sc, w[off+mx.Geometry.TotalBytes:off+mx.Geometry.TotalBytes+4]) {
				t.Fatalf("%s: the row scales after the matrix changed", name)
			}
		}
		if frag && repacked == 0 {
			t.Fatal("no matrix was repacked")
		}
		tg.Close()
	}
}

// devBytes reads n bytes of device memory at addr.
func devBytes(t *testing.T, d *emuDevice, addr uint64, n int) []byte {
	t.Helper()
	f := d.floats(t, addr, (n+3)/4)
	out := make([]byte, 4*len(f))
	for i, v := range f {
		binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(v))
	}
	return out[:n]
}
