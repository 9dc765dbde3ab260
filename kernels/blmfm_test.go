package kernels

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"lithos/formats"
	"lithos/pack/blm"
)

// TestBLMFragmentMajorBlocks: the copy of a matrix of many blocks (rewritten by several
// goroutines) is the concatenation of its blocks' copies, each made alone from a one-block
// geometry of the same K; and its size is BLMFragmentMajorBytes. (What the kernels read from it
// is checked in the fiber runtime: TestFiberBLMTensorCorePath.)
func TestBLMFragmentMajorBlocks(t *testing.T) {
	r := rand.New(rand.NewPCG(61, 62))
	for _, f := range []formats.Format{formats.NVFP4, formats.FP8, formats.BF16} {
		g, err := blm.NewGeometry(blm.Spec{Format: f, N: 16 * 300, K: 1024})
		if err != nil {
			t.Fatal(err)
		}
		one, err := blm.NewGeometry(blm.Spec{Format: f, N: 16, K: 1024})
		if err != nil {
			t.Fatal(err)
		}
		packed := make([]byte, g.TotalBytes)
		for i := range packed {
			packed[i] = byte(r.Uint32())
		}
		fm, err := BLMFragmentMajor(g, packed)
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(fm)) != BLMFragmentMajorBytes(g) || int64(len(fm)) > g.TotalBytes {
			t.Fatalf("%s: %d bytes, BLMFragmentMajorBytes %d, packed %d", f, len(fm), BLMFragmentMajorBytes(g), g.TotalBytes)
		}
		per := BLMFragmentMajorBytes(one)
		for b := int64(0); b < g.Blocks; b++ {
			want, err := BLMFragmentMajor(one, packed[b*one.TotalBytes:(b+1)*one.TotalBytes])
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(fm[b*per:(b+1)*per], want) {
				t.Fatalf("%s: block %d differs from its copy made alone", f, b)
			}
		}
	}
}

// TestBLMFragmentMajorRefusals: NVFP4 stripes starting inside a group, a copy larger than the
// packed bytes (NVFP4 stripes of 16 columns: a scale word per payload word), packed bytes of
// another size, and a format without a kernel are refused with what is wrong.
func TestBLMFragmentMajorRefusals(t *testing.T) {
	for _, c := range []struct {
		name string
		spec blm.Spec
		cut  int64
		want string
	}{
		{"stripes inside groups", blm.Spec{Format: formats.NVFP4, N: 32, K: 48}, 0, "whole 16-column groups"},
		{"larger copy", blm.Spec{Format: formats.NVFP4, N: 32, K: 512, Lanes: 32}, 0, "larger than"},
		{"short packed", blm.Spec{Format: formats.FP8, N: 32, K: 512}, 16, "packed bytes, want"},
		{"format", blm.Spec{Format: formats.Int8, N: 32, K: 512}, 0, "no BLM kernel"},
	} {
		g, err := blm.NewGeometry(c.spec)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		_, err = BLMFragmentMajor(g, make([]byte, g.TotalBytes-c.cut))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%s: %v, want an error containing %q", c.name, err, c.want)
		}
	}
}

// BenchmarkBLMFragmentMajor times the host-side copy of gate_up's shape (NVFP4 [34816, 5120],
// 107 MB: what gpu.LoadTarget does per matrix on CUDA) against a plain copy of the same bytes
// measured in the same run (the floor): `go test -bench BLMFragmentMajor ./kernels`.
func BenchmarkBLMFragmentMajor(b *testing.B) {
	g, err := blm.NewGeometry(blm.Spec{Format: formats.NVFP4, N: 34816, K: 5120})
	if err != nil {
		b.Fatal(err)
	}
	packed := make([]byte, g.TotalBytes)
	dst := make([]byte, g.TotalBytes)
	copy(dst, packed) // touch the pages
	b.SetBytes(g.TotalBytes)
	var copyNs, fmNs int64
	for b.Loop() {
		t0 := time.Now()
		copy(dst, packed)
		copyNs += time.Since(t0).Nanoseconds()
		t0 = time.Now()
		if _, err := BLMFragmentMajor(g, packed); err != nil {
			b.Fatal(err)
		}
		fmNs += time.Since(t0).Nanoseconds()
	}
	b.ReportMetric(float64(g.TotalBytes)*float64(b.N)/float64(fmNs), "GB/s")
	b.ReportMetric(float64(copyNs)/float64(fmNs), "xcopy")
}
