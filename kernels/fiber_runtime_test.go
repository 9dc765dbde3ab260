package kernels

import (
	"strings"
	"testing"
)

// The fiber runtime's own checks: kernels with the bugs it must catch, each written as MSL by
// hand, and one correct kernel that uses every synchronisation it offers.

const badKernels = `#include <metal_stdlib>
using namespace metal;

// Thread 5 returns before the barrier the others wait at.
kernel void leave_barrier(device float* y [[buffer(0)]], uint tid [[thread_index_in_threadgroup]]) {
    if (tid == 5) return;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    y[tid] = 1;
}

// Lanes 0-15 and 16-31 reach different simd_shuffle_xor calls.
kernel void diverge_simd(device float* y [[buffer(0)]], uint tid [[thread_index_in_threadgroup]]) {
    float v = float(tid);
    if (tid < 16) v = simd_shuffle_xor(v, 1);
    else v = simd_shuffle_xor(v, 2);
    y[tid] = v;
}

// Lane 3 of simdgroup 1 skips a SIMD call its simdgroup makes (it returns).
kernel void leave_simd(device float* y [[buffer(0)]], uint tid [[thread_index_in_threadgroup]]) {
    if (tid == 35) return;
    y[tid] = simd_broadcast(float(tid), 0);
}

// Two barriers at different lines.
kernel void two_barriers(device float* y [[buffer(0)]], uint tid [[thread_index_in_threadgroup]]) {
    if (tid < 32) threadgroup_barrier(mem_flags::mem_threadgroup);
    else threadgroup_barrier(mem_flags::mem_threadgroup);
    y[tid] = 1;
}

// Reads one float past the end of its buffer.
kernel void out_of_bounds(device float* y [[buffer(0)]], uint tid [[thread_index_in_threadgroup]]) {
    y[tid] = y[tid + 1];
}

// Correct: a threadgroup reduction through threadgroup memory, barriers in a loop, a shuffle
// butterfly and a broadcast. y[0] = Σ tid over 64 threads = 2016, every y[i] the same.
kernel void good(device float* y [[buffer(0)]], uint tid [[thread_index_in_threadgroup]],
                 uint lane [[thread_index_in_simdgroup]], uint sg [[simdgroup_index_in_threadgroup]]) {
    threadgroup float part[2];
    float v = float(tid);
    for (ushort o = 16; o > 0; o >>= 1) v += simd_shuffle_xor(v, o);
    v = simd_broadcast(v, 7);
    if (lane == 0) part[sg] = v;
    for (int i = 0; i < 3; i++) threadgroup_barrier(mem_flags::mem_threadgroup);
    y[tid] = part[0] + part[1];
}
`

func TestFiberRuntimeCatchesBugs(t *testing.T) {
	calls := map[string]string{}
	order := []string{"leave_barrier", "diverge_simd", "leave_simd", "two_barriers", "out_of_bounds", "good"}
	for _, n := range order {
		calls[n] = n + "((float*)a[0], ids.tid"
		if n == "good" {
			calls[n] += ", ids.tid & 31u, ids.tid >> 5"
		}
		calls[n] += ")"
	}
	src := strings.ReplaceAll(badKernels, "    threadgroup float part[2];", "    LITHOS_TG_ARRAY(float, part, 2);")
	exe, err := buildFiber(t, t.TempDir(), "bad", src, calls, order)
	if err != nil {
		t.Fatal(err)
	}
	run := func(name string) ([]float32, error) {
		var j job
		y := j.f32(make([]float32, 64))
		j.disps = append(j.disps, dispatch{name: name, grid: [3]uint32{2, 1, 1}, threads: 64, args: []int{y}})
		res, err := j.run(t, exe)
		if err != nil {
			return nil, err
		}
		return bytesF32(res[y]), nil
	}
	for name, want := range map[string]string{
		"leave_barrier": "thread 5 returned while thread 0 waits at threadgroup_barrier",
		"diverge_simd":  "lanes of simdgroup 0 reached different SIMD calls",
		"leave_simd":    "lanes of simdgroup 1 reached different SIMD calls: lane 0 at simd_broadcast",
		"two_barriers":  "threads wait at different barriers",
		"out_of_bounds": "SIGSEGV",
	} {
		_, err := run(name)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want one containing %q", name, err, want)
			continue
		}
		t.Logf("%s: %v", name, err)
	}
	y, err := run("good")
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range y {
		if v != 2016 {
			t.Fatalf("good: y[%d] = %g, want 2016", i, v)
		}
	}
}
