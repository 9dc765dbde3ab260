//go:build linux && amd64

package cuda

import (
	"fmt"
	"testing"
)

// patternSource: read kernels with the MMA-layout products' access pattern and its
// alternatives, over pieces of 512 bytes (one 16-byte load per lane of a warp, as
// ops/blmx.kern loads a chunk), for BenchmarkReadPattern. One threadgroup of 16 warps per
// multiprocessor (grid = multiprocessors), each lane with ahead·4 loads in flight:
//
//	mode 0: every warp streams its own contiguous range of pieces (the products now: each
//	        simdgroup its range of groups);
//	mode 1: each threadgroup streams a contiguous range, its 16 warps reading adjacent pieces
//	        (piece 16·s + w of the range at step s);
//	mode 2: the whole grid reads adjacent pieces (piece NW·s + W), as the read floor does.
//
// Every lane sums the words it read into out, so nothing is optimized away.
const patternSource = `
__device__ __forceinline__ unsigned long long pat_sum(uint4 v) { return (unsigned long long)v.x + v.y + v.z + v.w; }
__device__ __forceinline__ unsigned long long pat_piece(unsigned mode, unsigned long long np, unsigned long long s) {
    const unsigned long long w = threadIdx.x >> 5, W = blockIdx.x * 16ull + w, NW = gridDim.x * 16ull;
    if (mode == 0u) { const unsigned long long per = np / NW; return W * per + s; }
    if (mode == 1u) { const unsigned long long per = np / gridDim.x; return blockIdx.x * per + s * 16ull + w; }
    return s * NW + W;
}
template <int AHEAD>
__device__ void pat_read(const uint4* __restrict__ p, unsigned long long np, unsigned mode, unsigned long long* out) {
    const unsigned lane = threadIdx.x & 31u;
    const unsigned long long NW = gridDim.x * 16ull, steps = np / NW;
    unsigned long long acc = 0;
    for (unsigned long long s = 0; s + 4 * AHEAD <= steps; s += 4 * AHEAD) {
        uint4 v[4 * AHEAD];
#pragma unroll
        for (int j = 0; j < 4 * AHEAD; ++j) v[j] = __ldg(p + pat_piece(mode, np, s + j) * 32ull + lane);
#pragma unroll
        for (int j = 0; j < 4 * AHEAD; ++j) acc += pat_sum(v[j]);
    }
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
    if (lane == 0u) atomicAdd(out, acc);
}
extern "C" __global__ void __launch_bounds__(512) lithos_pat1(const uint4* p, unsigned long long np, unsigned mode, unsigned long long* out) { pat_read<1>(p, np, mode, out); }
extern "C" __global__ void __launch_bounds__(512) lithos_pat2(const uint4* p, unsigned long long np, unsigned mode, unsigned long long* out) { pat_read<2>(p, np, mode, out); }
`

// BenchmarkReadPattern times patternSource's kernels over 4 GiB (median of 10 event-timed
// reads, after one untimed) against the read floor of the same run: whether the MMA-layout
// products' pattern — 16 warps per multiprocessor, each streaming its own range — can reach the
// floor at all, and what the threadgroup- and grid-interleaved orders reach. Reports GB/s and
// × floor per kernel (1 or 2 groups of 4 pieces in flight) and mode.
func BenchmarkReadPattern(b *testing.B) {
	d := testDevice(b)
	floor, err := d.ReadBandwidth(4<<30, 10)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("read bandwidth floor: %.0f GB/s", floor.GBps())
	m, err := d.Load("lithos_pattern.cu", patternSource)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Unload()
	_, s := benchStream(b, d)
	const bytes = 4 << 30
	buf, err := d.Alloc(bytes)
	if err != nil {
		b.Fatal(err)
	}
	defer buf.Free()
	out, err := d.Alloc(8)
	if err != nil {
		b.Fatal(err)
	}
	defer out.Free()
	if err := s.Fill32(buf, 0, bytes/4, 0x01010101); err != nil {
		b.Fatal(err)
	}
	np := uint64(bytes / 512)
	grid := D1(d.Info.SMs)
	for _, kn := range []string{"lithos_pat1", "lithos_pat2"} {
		f, err := m.Function(kn)
		if err != nil {
			b.Fatal(err)
		}
		for mode := uint32(0); mode < 3; mode++ {
			times := timeLaunches(b, d, s, 10, func() error { return f.Launch(s, grid, D1(512), 0, buf, np, mode, out) })
			// The bytes the kernel reads: whole rounds of 4·ahead steps per warp.
			nw := uint64(d.Info.SMs) * 16
			ahead := uint64(1)
			if kn == "lithos_pat2" {
				ahead = 2
			}
			steps := np / nw / (4 * ahead) * (4 * ahead)
			bw := newBandwidth(int64(steps*nw*512), times)
			key := fmt.Sprintf("%s-mode%d", kn, mode)
			b.ReportMetric(bw.GBps()/floor.GBps(), key+"-xfloor")
			b.Logf("%s mode %d: %.0f GB/s = %.3f × floor", kn, mode, bw.GBps(), bw.GBps()/floor.GBps())
		}
	}
}
