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

// mmaDevice is the emulated device claiming the MMA layout as well (gpu.MMALayouter, 8
// multiprocessors, clusters of 8) — only to check LoadTarget's repack, as fragDevice.
type mmaDevice struct{ *emuDevice }

func (mmaDevice) FragmentLayout() bool { return true }
func (mmaDevice) MMALayout() (kernels.BLMXDevice, bool) {
	return kernels.BLMXDevice{SMs: 8, MaxCluster: kernels.BLMMaxClusters}, true
}

// TestMMARepack: on a device that reads the MMA layout, LoadTarget rewrites every NVFP4 and FP8
// target matrix whose copy fits into it (device bytes kernels.BLMXCopy of the bundle's, then
// the rest as uploaded; kernel lithos_blmx_*), every other matrix fragment-major; Target.MMA is
// the device's description.
func TestMMARepack(t *testing.T) {
	b := emuBundle(t, "b")
	w := b.Weights()
	d := newEmuDevice(t)
	tg, err := gpu.LoadTarget(t.Context(), mmaDevice{d}, b)
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	if tg.MMA.SMs != 8 || tg.MMA.MaxCluster != kernels.BLMMaxClusters {
		t.Fatalf("Target.MMA %+v", tg.MMA)
	}
	mma := 0
	for _, name := range tg.MatrixNames() {
		mx, _ := tg.Matrix(name)
		off := int64(mx.Ptr - tg.Weights.Ptr)
		orig := w[off : off+mx.Geometry.TotalBytes]
		got := devBytes(t, d, mx.Ptr, len(orig))
		want, wantLayout := orig, uint32(kernels.BLMLayoutBLM)
		if cp, err := kernels.BLMXCopy(mx.Geometry, orig); err == nil {
			want, wantLayout = append(cp, orig[len(cp):]...), kernels.BLMLayoutMMA
			mma++
		} else if fm, err := kernels.BLMFragmentMajor(mx.Geometry, orig); err == nil {
			want, wantLayout = append(fm, orig[len(fm):]...), kernels.BLMLayoutFragment
		}
		if mx.Layout != wantLayout || !bytes.Equal(got, want) {
			t.Fatalf("%s (%s): layout %d (want %d), device bytes as expected: %v", name, mx.Geometry.Format, mx.Layout, wantLayout, bytes.Equal(got, want))
		}
		k, err := mx.Kernel(8)
		if err != nil {
			t.Fatal(err)
		}
		if wantLayout == kernels.BLMLayoutMMA {
			if wk, _ := kernels.BLMXKernel(mx.Geometry.Format); k != wk {
				t.Fatalf("%s: kernel %s, want %s", name, k, wk)
			}
		}
	}
	if mma == 0 {
		t.Fatal("no matrix was rewritten into the MMA layout")
	}
	t.Logf("%d of %d matrices in the MMA layout", mma, len(tg.MatrixNames()))
}
