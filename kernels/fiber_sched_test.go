package kernels

import (
	"encoding/binary"
	"flag"
	"fmt"
	"hash/fnv"
	"math"
	"strings"
	"testing"
)

// Schedules of the fiber runtime (kernels/fiber/fiber.h, LITHOS_FIBER_SCHEDULE): every job run
// by mustRun runs once per schedule and the outputs must agree bitwise. A kernel whose result
// depends on the order of its threads between two barriers (a missing barrier) or on the order
// of its threadgroups fails here, though any one schedule may give plausible numbers.
var fiberSchedules = flag.String("fiber.schedules", "asc,desc,random,sg",
	"schedules every fiber op test runs under, compared bitwise: asc, desc, random (seeded from the test name), random:SEED or sg (each simdgroup to its next barrier before the next)")

// schedules returns the schedule names for t: "random" becomes random:<FNV-1a of the test
// name>, so a failure reproduces with -run and the same name.
func schedules(t testing.TB) []string {
	var out []string
	for _, s := range strings.Split(*fiberSchedules, ",") {
		s = strings.TrimSpace(s)
		if s == "random" {
			h := fnv.New64a()
			h.Write([]byte(t.Name()))
			s = fmt.Sprintf("random:%d", h.Sum64())
		}
		if s != "" {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		out = []string{"asc"}
	}
	return out
}

// runSchedules runs the job with exe under every schedule and returns the first schedule's
// buffers; an error when a run fails (naming the schedule) or when two schedules' buffers
// differ (naming both, the buffer, the first differing word).
func (j *job) runSchedules(t testing.TB, exe string) ([][]byte, error) {
	t.Helper()
	defer func() { j.sched = "" }()
	var first [][]byte
	var firstName string
	for _, s := range schedules(t) {
		j.sched = s
		r, err := j.run(t, exe)
		if err != nil {
			return nil, fmt.Errorf("schedule %s: %w", s, err)
		}
		if first == nil {
			first, firstName = r, s
			continue
		}
		if d := diffBuffers(first, r); d != "" {
			return nil, fmt.Errorf("schedules %s and %s disagree: %s", firstName, s, d)
		}
	}
	return first, nil
}

// diffBuffers describes the first difference between two runs' buffers, or returns "".
func diffBuffers(a, b [][]byte) string {
	for i := range a {
		for k := range a[i] {
			if a[i][k] == b[i][k] {
				continue
			}
			w := k / 4 * 4
			if w+4 <= len(a[i]) {
				x, y := binary.LittleEndian.Uint32(a[i][w:]), binary.LittleEndian.Uint32(b[i][w:])
				return fmt.Sprintf("buffer %d, word %d: %#08x (%g) vs %#08x (%g)", i, w/4, x, math.Float32frombits(x), y, math.Float32frombits(y))
			}
			return fmt.Sprintf("buffer %d, byte %d: %#02x vs %#02x", i, k, a[i][k], b[i][k])
		}
	}
	return ""
}

// schedKernels are hand-written MSL kernels, each with one bug that only the schedule
// comparison, the threadgroup-memory poison or the call-path matching of barriers shows (the
// fiber runtime before those checks ran every one of them without complaint), and correct
// twins that must pass.
const schedKernels = `#include <metal_stdlib>
using namespace metal;

// Missing barrier: each thread updates its slot and reads its neighbour's without a barrier
// in between, so it sees the old or the new value depending on which thread ran first.
kernel void missing_barrier(device float* y [[buffer(0)]], uint tid [[thread_index_in_threadgroup]]) {
    threadgroup float s[64];
    s[tid] = float(tid);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    s[tid] += 100.0f;
    y[tid] = s[(tid + 1u) % 64u];
}

// The same with the barrier: y[tid] = (tid + 1) % 64 + 100 under every schedule.
kernel void with_barrier(device float* y [[buffer(0)]], uint tid [[thread_index_in_threadgroup]]) {
    threadgroup float s[64];
    s[tid] = float(tid);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    s[tid] += 100.0f;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    y[tid] = s[(tid + 1u) % 64u];
}

// Reads threadgroup memory no thread of its group wrote: group 0 writes all 64 slots, group 1
// only the first 32 and reads all 64. With static zero-initialised arrays reused across
// groups, group 1 read group 0's ones.
kernel void unwritten_tg(device float* y [[buffer(0)]], uint tid [[thread_index_in_threadgroup]],
                         uint3 tg [[threadgroup_position_in_grid]]) {
    threadgroup float s[64];
    if (tid < (tg.x == 0u ? 64u : 32u)) s[tid] = 1.0f;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    y[tg.x * 64u + tid] = s[tid];
}

// A barrier in a helper, called from a loop whose trip count differs between threads and once
// more by the threads with fewer trips: three barrier episodes for everyone at one file:line,
// but in episode 3 threads 0-31 are in the loop and threads 32-63 after it.
static inline void sync_tg() { threadgroup_barrier(mem_flags::mem_threadgroup); }
kernel void divergent_loop(device float* y [[buffer(0)]], uint tid [[thread_index_in_threadgroup]]) {
    const uint n = tid < 32u ? 3u : 2u;
    for (uint i = 0u; i < n; i++) sync_tg();
    if (tid >= 32u) sync_tg();
    y[tid] = float(n);
}

// The helper in a loop with a trip count that is uniform across the threadgroup: correct.
kernel void uniform_loop(device float* y [[buffer(0)]], uint tid [[thread_index_in_threadgroup]],
                         uint3 tg [[threadgroup_position_in_grid]]) {
    const uint n = 2u + tg.x;
    for (uint i = 0u; i < n; i++) sync_tg();
    sync_tg();
    y[tg.x * 64u + tid] = float(n);
}

// Threadgroup 1 reads what threadgroup 0 wrote in the same dispatch (Metal gives no order
// between threadgroups).
kernel void cross_group(device float* y [[buffer(0)]], uint tid [[thread_index_in_threadgroup]],
                        uint3 tg [[threadgroup_position_in_grid]]) {
    if (tid != 0u) return;
    y[tg.x] = tg.x == 0u ? 7.0f : y[tg.x - 1u] + 1.0f;
}

// Threadgroup memory reused for a second batch without a barrier before it (lithos_gdn's
// batches of rows): each simdgroup reads the other's slot and passes it through a SIMD call. In
// the lock-step schedules no simdgroup gets past another's SIMD call, so every read of batch 0
// comes before any write of batch 1; when simdgroup 0 runs ahead to its next barrier ("sg"),
// simdgroup 1 reads batch 1's values for batch 0.
kernel void simd_ahead(device float* y [[buffer(0)]], uint tid [[thread_index_in_threadgroup]]) {
    threadgroup float s[64];
    float acc = 0.0f;
    for (uint b = 0u; b < 2u; b++) {
        s[tid] = float(b * 1000u + tid);
        threadgroup_barrier(mem_flags::mem_threadgroup);
        acc += simd_shuffle_xor(s[(tid + 32u) % 64u], ushort(1));
    }
    y[tid] = acc;
}

// The same with the barrier before the second batch's writes: correct under every schedule.
kernel void simd_ahead_ok(device float* y [[buffer(0)]], uint tid [[thread_index_in_threadgroup]]) {
    threadgroup float s[64];
    float acc = 0.0f;
    for (uint b = 0u; b < 2u; b++) {
        if (b > 0u) threadgroup_barrier(mem_flags::mem_threadgroup);
        s[tid] = float(b * 1000u + tid);
        threadgroup_barrier(mem_flags::mem_threadgroup);
        acc += simd_shuffle_xor(s[(tid + 32u) % 64u], ushort(1));
    }
    y[tid] = acc;
}

// 36000 bytes of threadgroup memory: more than Metal's 32 KiB.
kernel void too_much_tg(device float* y [[buffer(0)]], uint tid [[thread_index_in_threadgroup]]) {
    threadgroup float big[9000];
    big[tid] = 1.0f;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    y[tid] = big[tid];
}
`

// schedProgram builds schedKernels into a fiber executable.
func schedProgram(t *testing.T) string {
	t.Helper()
	order := []string{"missing_barrier", "with_barrier", "unwritten_tg", "divergent_loop", "uniform_loop", "cross_group", "too_much_tg", "simd_ahead", "simd_ahead_ok"}
	calls := map[string]string{}
	for _, n := range order {
		calls[n] = n + "((float*)a[0], ids.tid)"
	}
	for _, n := range []string{"unwritten_tg", "uniform_loop", "cross_group"} {
		calls[n] = n + "((float*)a[0], ids.tid, ids.tg)"
	}
	src := schedKernels
	for _, decl := range []string{"float s[64]", "float big[9000]"} {
		name, n, _ := strings.Cut(strings.TrimPrefix(decl, "float "), "[")
		src = strings.ReplaceAll(src, "threadgroup "+decl+";", "LITHOS_TG_ARRAY(float, "+name+", "+strings.TrimSuffix(n, "]")+");")
	}
	exe, err := buildFiber(t, t.TempDir(), "sched", src, calls, order)
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

// TestFiberDetectors proves each detector of the fiber runtime with a kernel that has the bug
// it exists for, and its correct twin.
func TestFiberDetectors(t *testing.T) {
	exe := schedProgram(t)
	one := func(name string, groups uint32, n int) *job {
		j := &job{}
		j.poison(n)
		j.disps = append(j.disps, dispatch{name: name, grid: [3]uint32{groups, 1, 1}, threads: 64, args: []int{0}})
		return j
	}

	t.Run("missing barrier: schedules disagree", func(t *testing.T) {
		_, err := one("missing_barrier", 1, 64).runSchedules(t, exe)
		if err == nil || !strings.Contains(err.Error(), "disagree: buffer 0") {
			t.Fatalf("error %v, want schedules that disagree", err)
		}
		t.Log(err)
		res, err := one("with_barrier", 1, 64).runSchedules(t, exe)
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range bytesF32(res[0]) {
			if want := float32((i+1)%64 + 100); v != want {
				t.Fatalf("with_barrier: y[%d] = %g, want %g", i, v, want)
			}
		}
	})

	t.Run("unwritten threadgroup memory: NaN shows", func(t *testing.T) {
		res, err := one("unwritten_tg", 2, 128).runSchedules(t, exe)
		if err != nil {
			t.Fatal(err)
		}
		for i, u := range bytesU32(res[0]) {
			want := math.Float32bits(1)
			if i >= 96 {
				want = 0x7FC0DEAD // the runtime's poison, a NaN
			}
			if u != want {
				t.Fatalf("y[%d] = %#08x, want %#08x (group %d, thread %d)", i, u, want, i/64, i%64)
			}
		}
	})

	t.Run("divergent trip counts: different call paths", func(t *testing.T) {
		_, err := one("divergent_loop", 1, 64).run(t, exe)
		if err == nil || !strings.Contains(err.Error(), "through different calls, in episode 3") {
			t.Fatalf("error %v, want a barrier reached through different calls in episode 3", err)
		}
		t.Log(err)
		res, err := one("uniform_loop", 2, 128).runSchedules(t, exe)
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range bytesF32(res[0]) {
			if want := float32(2 + i/64); v != want {
				t.Fatalf("uniform_loop: y[%d] = %g, want %g", i, v, want)
			}
		}
	})

	t.Run("threadgroup order: schedules disagree", func(t *testing.T) {
		j := &job{}
		j.f32(make([]float32, 4))
		j.disps = append(j.disps, dispatch{name: "cross_group", grid: [3]uint32{4, 1, 1}, threads: 64, args: []int{0}})
		_, err := j.runSchedules(t, exe)
		if err == nil || !strings.Contains(err.Error(), "disagree") {
			t.Fatalf("error %v, want schedules that disagree", err)
		}
		t.Log(err)
	})

	t.Run("a simdgroup running ahead: only sg shows it", func(t *testing.T) {
		for _, s := range []string{"asc", "desc", "random:1"} {
			j := one("simd_ahead", 1, 64)
			j.sched = s
			res, err := j.run(t, exe)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := bytesF32(res[0])[0], float32(2*(32^1)+1000); got != want {
				t.Fatalf("simd_ahead under %s: y[0] = %g, want %g (lock-step: batch 0's read before batch 1's write)", s, got, want)
			}
		}
		_, err := one("simd_ahead", 1, 64).runSchedules(t, exe)
		if err == nil || !strings.Contains(err.Error(), "and sg disagree: buffer 0") {
			t.Fatalf("error %v, want sg to disagree", err)
		}
		t.Log(err)
		res, err := one("simd_ahead_ok", 1, 64).runSchedules(t, exe)
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range bytesF32(res[0]) {
			o := float32(((i + 32) % 64) ^ 1)
			if want := 2*o + 1000; v != want {
				t.Fatalf("simd_ahead_ok: y[%d] = %g, want %g", i, v, want)
			}
		}
	})

	t.Run("threadgroup memory over 32 KiB", func(t *testing.T) {
		_, err := one("too_much_tg", 1, 64).run(t, exe)
		if err == nil || !strings.Contains(err.Error(), "threadgroup array big (36000 bytes") {
			t.Fatalf("error %v, want the 32 KiB limit", err)
		}
		t.Log(err)
	})

	t.Run("schedule option", func(t *testing.T) { testScheduleOption(t, exe) })
}

// testScheduleOption: the runtime refuses an unknown schedule, and the three schedules really
// run threads in different orders (a kernel recording the order threads pass a point).
func testScheduleOption(t *testing.T, exe string) {
	j := &job{sched: "sideways"}
	j.poison(64)
	j.disps = append(j.disps, dispatch{name: "with_barrier", grid: [3]uint32{1, 1, 1}, threads: 64, args: []int{0}})
	if _, err := j.run(t, exe); err == nil || !strings.Contains(err.Error(), "want asc, desc, random:SEED (decimal) or sg") {
		t.Fatalf("unknown schedule: %v", err)
	}
	// missing_barrier's y[tid] is tid+1+100 when thread tid+1 ran before thread tid, else tid+1.
	order := func(sched string) string {
		j := one64("missing_barrier")
		j.sched = sched
		res, err := j.run(t, exe)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		for i, v := range bytesF32(res[0])[:63] {
			if v == float32(i+1+100) {
				b.WriteByte('<')
			} else {
				b.WriteByte('>')
			}
		}
		return b.String()
	}
	asc, desc, r1, r2 := order("asc"), order("desc"), order("random:1"), order("random:2")
	if asc != strings.Repeat(">", 63) || desc != strings.Repeat("<", 63) {
		t.Fatalf("asc %s\ndesc %s: want thread order ascending and descending", asc, desc)
	}
	if r1 == asc || r1 == desc || r1 == r2 || r1 != order("random:1") {
		t.Fatalf("random:1 %s\nrandom:2 %s: want orders that differ from asc, desc and each other, and repeat for one seed", r1, r2)
	}
}

func one64(name string) *job {
	j := &job{}
	j.poison(64)
	j.disps = append(j.disps, dispatch{name: name, grid: [3]uint32{1, 1, 1}, threads: 64, args: []int{0}})
	return j
}
