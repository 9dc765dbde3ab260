package kernels

import (
	"strings"
	"testing"
)

// clusterKernels exercise the fiber runtime's thread-block clusters (kernels/fiber/fiber.h):
// each threadgroup of a cluster writes its values into its own threadgroup memory, meets the
// cluster at a cluster barrier and reads the next rank's values through cluster_map, as the
// CUDA BLM kernels read the parts of the other threadgroups (distributed shared memory).
const clusterKernels = `#include <metal_stdlib>
using namespace metal;
#define SYNC(f, l) lithos_fiber::cluster_barrier(f, l)
// y[x·64 + tid] = 1000·(x of the next rank of the cluster) + its thread tid + a threadgroup
// barrier's worth of its own data (the sum over its group written before the barrier).
kernel void neighbour(device float* y, uint tid, uint3 tg) {
    LITHOS_TG_ARRAY(float, s, 64);
    LITHOS_TG_ARRAY(float, t, 1);
    const uint C = lithos_fiber::cluster_size(), rank = tg.x % C;
    s[tid] = 1000.0f * float(tg.x) + float(tid);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (tid == 0u) {
        float sum = 0.0f;
        for (uint i = 0; i < 64u; i++) sum += s[i];
        t[0] = sum;
    }
    SYNC(__FILE__, __LINE__);
    const uint next = (rank + 1u) % C;
    const float* ns = static_cast<const float*>(lithos_fiber::cluster_map(&s[0], next));
    const float* nt = static_cast<const float*>(lithos_fiber::cluster_map(&t[0], next));
    y[tg.x * 64u + tid] = ns[(tid + 1u) % 64u] + 0.0f * nt[0] + (tid == 0u ? nt[0] : 0.0f);
    SYNC(__FILE__, __LINE__);  // no threadgroup leaves while another reads its memory
}
// Rank 1 returns before the cluster barrier the others wait at.
kernel void early_exit(device float* y, uint tid, uint3 tg) {
    if (tg.x % lithos_fiber::cluster_size() == 1u) return;
    y[tid] = 1.0f;
    SYNC(__FILE__, __LINE__);
}
// In rank 0, threads 0–31 wait at a threadgroup barrier while threads 32–63 wait at the
// cluster barrier (a deadlock on the GPU).
kernel void mixed_barrier(device float* y, uint tid, uint3 tg) {
    if (tg.x % lithos_fiber::cluster_size() == 0u && tid < 32u) threadgroup_barrier(mem_flags::mem_threadgroup);
    SYNC(__FILE__, __LINE__);
    y[tid] = 1.0f;
}
// A threadgroup barrier inside each rank with the cluster's other ranks elsewhere: legal.
kernel void staggered(device float* y, uint tid, uint3 tg) {
    LITHOS_TG_ARRAY(float, s, 64);
    const uint rank = tg.x % lithos_fiber::cluster_size();
    for (uint k = 0; k < rank; k++) {
        s[tid] = float(k);
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    SYNC(__FILE__, __LINE__);
    y[tg.x * 64u + tid] = float(rank);
}
`

func clusterProgram(t *testing.T) string {
	t.Helper()
	order := []string{"neighbour", "early_exit", "mixed_barrier", "staggered"}
	calls := map[string]string{}
	for _, n := range order {
		calls[n] = n + "((float*)a[0], ids.tid, ids.tg)"
	}
	exe, err := buildFiber(t, t.TempDir(), "cluster", clusterKernels, calls, order)
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

func TestFiberClusters(t *testing.T) {
	exe := clusterProgram(t)
	run := func(name string, groups, cluster uint32) ([][]byte, error) {
		j := &job{}
		j.poison(int(groups) * 64)
		j.disps = append(j.disps, dispatch{name: name, grid: [3]uint32{groups, 1, 1}, threads: 64, args: []int{0}, cluster: cluster})
		return j.runSchedules(t, exe)
	}
	for _, c := range []uint32{1, 2, 4, 8} {
		res, err := run("neighbour", 8, c)
		if err != nil {
			t.Fatalf("clusters of %d: %v", c, err)
		}
		y := bytesF32(res[0])
		for x := uint32(0); x < 8; x++ {
			next := x/c*c + (x%c+1)%c
			var sum float32
			for i := 0; i < 64; i++ {
				sum += 1000*float32(next) + float32(i)
			}
			for tid := uint32(0); tid < 64; tid++ {
				want := 1000*float32(next) + float32((tid+1)%64)
				if tid == 0 {
					want += sum
				}
				if got := y[x*64+tid]; got != want {
					t.Fatalf("clusters of %d: y[%d, %d] = %g, want %g (rank %d reads rank %d)", c, x, tid, got, want, x%c, next%c)
				}
			}
		}
	}
	res, err := run("staggered", 4, 4)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range bytesF32(res[0]) {
		if v != float32(i/64) {
			t.Fatalf("staggered: y[%d] = %g, want %d", i, v, i/64)
		}
	}
	for _, c := range []struct {
		name, want string
	}{
		{"early_exit", "returned while thread 0 of rank 0 waits at the cluster barrier"},
		{"mixed_barrier", "in threadgroup rank 0 of the cluster, thread 0 waits at threadgroup_barrier"},
	} {
		_, err := run(c.name, 2, 2)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
		t.Logf("%s: %v", c.name, err)
	}
	if _, err := run("neighbour", 6, 4); err == nil || !strings.Contains(err.Error(), "cluster size must be 1 to 8 and divide the grid's x") {
		t.Fatalf("a grid of 6 in clusters of 4: %v, want a refusal", err)
	}
}
