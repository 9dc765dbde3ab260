//go:build linux && amd64

package cuda

import (
	"strings"
	"testing"
	"unsafe"
)

// TestLaunchConfigLayout: launchConfig and launchAttr have the byte layout of cuda.h's
// CUlaunchConfig and CUlaunchAttribute on 64-bit Linux, which cuLaunchKernelEx reads (grid and
// block dimensions and shared bytes as 7 uint32, then CUstream at 32, the attribute pointer at
// 40, their count at 48, 56 bytes; an attribute is its 4-byte id, 4 bytes of padding and a
// 64-byte value union, 72 bytes, the cluster dimension x, y, z first in the value).
func TestLaunchConfigLayout(t *testing.T) {
	var c launchConfig
	var a launchAttr
	for _, f := range []struct {
		name      string
		got, want uintptr
	}{
		{"sizeof(CUlaunchConfig)", unsafe.Sizeof(c), 56},
		{"offsetof(sharedMemBytes)", unsafe.Offsetof(c.shared), 24},
		{"offsetof(hStream)", unsafe.Offsetof(c.stream), 32},
		{"offsetof(attrs)", unsafe.Offsetof(c.attrs), 40},
		{"offsetof(numAttrs)", unsafe.Offsetof(c.numAttrs), 48},
		{"sizeof(CUlaunchAttribute)", unsafe.Sizeof(a), 72},
		{"offsetof(value)", unsafe.Offsetof(a.val), 8},
	} {
		if f.got != f.want {
			t.Errorf("%s = %d, want %d", f.name, f.got, f.want)
		}
	}
}

// TestQueueClusterRefusals: a queue without clusters (MaxCluster 0: emulator, pre-sm_90, no
// cuLaunchKernelEx, LITHOS_CUDA_CLUSTERS=0) refuses a cluster launch, and a queue refuses a
// cluster larger than its MaxCluster, both before touching the stream.
func TestQueueClusterRefusals(t *testing.T) {
	q := &queue{}
	if err := q.LaunchCluster("lithos_blm_nvfp4_r8", [3]uint32{8, 1, 1}, [3]uint32{2, 1, 1}, 1, 2, 3, 4, 5, 6); err == nil || !strings.Contains(err.Error(), "does not launch thread-block clusters") {
		t.Fatalf("queue without clusters: %v", err)
	}
	q.maxCluster = 8
	if err := q.LaunchCluster("lithos_blm_nvfp4_r8", [3]uint32{32, 1, 1}, [3]uint32{16, 1, 1}, 1, 2, 3, 4, 5, 6); err == nil || !strings.Contains(err.Error(), "more than the 8") {
		t.Fatalf("cluster of 16: %v", err)
	}
}
