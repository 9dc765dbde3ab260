//go:build linux && amd64

package cuda

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"
)

// checkSource is the device check's own kernels (not lithos's model kernels, which come from
// lithos/kernels): a fill with a counter-based hash, and a streaming read that sums every
// 32-bit word so the host can check that each byte was read. The read kernel is written for
// bandwidth the way HOPPER.md advises: 16-byte loads coalesced across the warp, four
// independent loads in flight per thread, a grid of a few blocks per multiprocessor striding
// over the buffer, one atomic per warp.
const checkSource = `
__device__ __forceinline__ unsigned int lithos_mix32(unsigned long long x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return (unsigned int)x;
}

extern "C" __global__ void lithos_check_fill(unsigned int* __restrict__ p, unsigned long long n, unsigned long long seed) {
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        p[i] = lithos_mix32(i + seed);
}

__device__ __forceinline__ unsigned long long lithos_sum4(uint4 v) {
    return (unsigned long long)v.x + v.y + v.z + v.w;
}

extern "C" __global__ void __launch_bounds__(512) lithos_check_read(const uint4* __restrict__ p, unsigned long long n16, unsigned long long* __restrict__ out) {
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    unsigned long long acc = 0;
    for (; i + 3 * stride < n16; i += 4 * stride) {
        uint4 a = p[i], b = p[i + stride], c = p[i + 2 * stride], d = p[i + 3 * stride];
        acc += lithos_sum4(a) + lithos_sum4(b) + lithos_sum4(c) + lithos_sum4(d);
    }
    for (; i < n16; i += stride) acc += lithos_sum4(p[i]);
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
    if ((threadIdx.x & 31) == 0) atomicAdd(out, acc);
}

extern "C" __global__ void lithos_check_spin(unsigned long long cycles, unsigned int* flag) {
    long long start = clock64();
    while ((unsigned long long)(clock64() - start) < cycles) { }
    if (threadIdx.x == 0 && blockIdx.x == 0) *flag = 1u;
}
`

// checkKernels are the loaded device-check kernels.
type checkKernels struct {
	mod                *Module
	fill, read, spin   *Function
	blocksPerSM, block int
}

var checkMu sync.Mutex

// loadCheck loads the device-check module.
func (d *Device) loadCheck() (*checkKernels, error) {
	checkMu.Lock()
	defer checkMu.Unlock()
	m, err := d.Load("lithos_check.cu", checkSource)
	if err != nil {
		return nil, err
	}
	k := &checkKernels{mod: m, blocksPerSM: 4, block: 512}
	for _, p := range []struct {
		dst  **Function
		name string
	}{{&k.fill, "lithos_check_fill"}, {&k.read, "lithos_check_read"}, {&k.spin, "lithos_check_spin"}} {
		if *p.dst, err = m.Function(p.name); err != nil {
			m.Unload()
			return nil, err
		}
	}
	return k, nil
}

// CheckWord is the value lithos_check_fill writes at word i: the 64-bit finaliser of
// MurmurHash3 (fmix64) of i + seed, low 32 bits.
func CheckWord(i, seed uint64) uint32 {
	x := i + seed
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return uint32(x)
}

// checkSum returns Σ CheckWord(i, seed) for i < n modulo 2^64, on all cores.
func checkSum(n, seed uint64) uint64 {
	w := uint64(runtime.GOMAXPROCS(0))
	sums := make([]uint64, w)
	var wg sync.WaitGroup
	for g := range w {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var s uint64
			for i := n * g / w; i < n*(g+1)/w; i++ {
				s += uint64(CheckWord(i, seed))
			}
			sums[g] = s
		}()
	}
	wg.Wait()
	var s uint64
	for _, v := range sums {
		s += v
	}
	return s
}

// Bandwidth is a measured streaming rate.
type Bandwidth struct {
	Bytes  int64           // bytes moved per run (read, or read + write for copies)
	Runs   []time.Duration // device time of each timed run (CUDA events)
	Median time.Duration
	Best   time.Duration
}

// GBps returns Bytes over the median time in GB/s (GB = 1e9 bytes).
func (b Bandwidth) GBps() float64 { return float64(b.Bytes) / b.Median.Seconds() / 1e9 }

// BestGBps returns Bytes over the best time in GB/s.
func (b Bandwidth) BestGBps() float64 { return float64(b.Bytes) / b.Best.Seconds() / 1e9 }

func newBandwidth(bytes int64, runs []time.Duration) Bandwidth {
	s := slices.Clone(runs)
	slices.Sort(s)
	return Bandwidth{Bytes: bytes, Runs: runs, Median: s[len(s)/2], Best: s[0]}
}

// ReadBandwidth measures the device's streaming read bandwidth: a buffer of bytes (rounded
// down to 16) is filled with CheckWord values, read once untimed, then runs times, each
// timed with events around one kernel; every run's sum of all words must equal the host's
// (else an error: the kernel did not read every byte). Use a buffer many times the L2
// (gigabytes) so the cache does not serve the reads.
func (d *Device) ReadBandwidth(bytes int64, runs int) (Bandwidth, error) {
	bytes &^= 15
	if bytes < 1<<20 || runs < 1 {
		return Bandwidth{}, fmt.Errorf("cuda: read bandwidth over %d bytes, %d runs: want ≥ 1 MiB and ≥ 1 run", bytes, runs)
	}
	k, err := d.loadCheck()
	if err != nil {
		return Bandwidth{}, err
	}
	defer k.mod.Unload()
	buf, err := d.Alloc(bytes)
	if err != nil {
		return Bandwidth{}, err
	}
	defer buf.Free()
	out, err := d.Alloc(8 * int64(runs+1))
	if err != nil {
		return Bandwidth{}, err
	}
	defer out.Free()
	s, err := d.NewStream()
	if err != nil {
		return Bandwidth{}, err
	}
	defer s.Close()
	evs := make([]*Event, runs+1)
	for i := range evs {
		if evs[i], err = d.NewEvent(); err != nil {
			return Bandwidth{}, err
		}
		defer evs[i].Close()
	}
	const seed = 0x5eed
	words := uint64(bytes / 4)
	grid := D1(d.Info.SMs * k.blocksPerSM)
	if err := k.fill.Launch(s, grid, D1(k.block), 0, buf, words, uint64(seed)); err != nil {
		return Bandwidth{}, err
	}
	if err := s.Fill32(out, 0, 2*int64(runs+1), 0); err != nil {
		return Bandwidth{}, err
	}
	n16 := uint64(bytes / 16)
	// run 0 warms up (untimed); run i ≥ 1 sits between events i−1 and i.
	for i := 0; i <= runs; i++ {
		if i > 0 {
			if err := evs[i-1].Record(s); err != nil {
				return Bandwidth{}, err
			}
		}
		if err := k.read.Launch(s, grid, D1(k.block), 0, buf, n16, out.At(8*int64(i))); err != nil {
			return Bandwidth{}, err
		}
		if i > 0 {
			if err := evs[i].Record(s); err != nil {
				return Bandwidth{}, err
			}
		}
	}
	want := checkSum(words, seed)
	if err := s.Wait(0); err != nil {
		return Bandwidth{}, err
	}
	sums := make([]byte, 8*(runs+1))
	if err := d.Read(sums, out, 0); err != nil {
		return Bandwidth{}, err
	}
	for i := 0; i <= runs; i++ {
		if got := le64(sums[8*i:]); got != want {
			return Bandwidth{}, fmt.Errorf("cuda: read check run %d: device sum %#x, host sum %#x: the kernel did not read every word", i, got, want)
		}
	}
	times := make([]time.Duration, runs)
	for i := 1; i <= runs; i++ {
		if times[i-1], err = evs[i].Since(evs[i-1]); err != nil {
			return Bandwidth{}, err
		}
	}
	return newBandwidth(bytes, times), nil
}

// CopyBandwidth measures a device-to-device copy (cuMemcpyDtoDAsync) of bytes, counting the
// bytes read and written (2·bytes), median of runs after one untimed copy; the copy of the
// first run is checked against the source.
func (d *Device) CopyBandwidth(bytes int64, runs int) (Bandwidth, error) {
	bytes &^= 15
	if bytes < 1<<20 || runs < 1 {
		return Bandwidth{}, fmt.Errorf("cuda: copy bandwidth over %d bytes, %d runs: want ≥ 1 MiB and ≥ 1 run", bytes, runs)
	}
	k, err := d.loadCheck()
	if err != nil {
		return Bandwidth{}, err
	}
	defer k.mod.Unload()
	src, err := d.Alloc(bytes)
	if err != nil {
		return Bandwidth{}, err
	}
	defer src.Free()
	dst, err := d.Alloc(bytes)
	if err != nil {
		return Bandwidth{}, err
	}
	defer dst.Free()
	s, err := d.NewStream()
	if err != nil {
		return Bandwidth{}, err
	}
	defer s.Close()
	a, err := d.NewEvent()
	if err != nil {
		return Bandwidth{}, err
	}
	defer a.Close()
	b, err := d.NewEvent()
	if err != nil {
		return Bandwidth{}, err
	}
	defer b.Close()
	grid := D1(d.Info.SMs * k.blocksPerSM)
	if err := k.fill.Launch(s, grid, D1(k.block), 0, src, uint64(bytes/4), uint64(7)); err != nil {
		return Bandwidth{}, err
	}
	if err := s.CopyDtoD(dst, 0, src, 0, bytes); err != nil {
		return Bandwidth{}, err
	}
	if err := s.Wait(0); err != nil {
		return Bandwidth{}, err
	}
	probe := make([]byte, 1<<20)
	if err := d.Read(probe, dst, bytes-int64(len(probe))); err != nil {
		return Bandwidth{}, err
	}
	base := uint64(bytes-int64(len(probe))) / 4
	for i := 0; i < len(probe)/4; i++ {
		if got, want := le32(probe[4*i:]), CheckWord(base+uint64(i), 7); got != want {
			return Bandwidth{}, fmt.Errorf("cuda: copy check: word %d is %#x, want %#x", base+uint64(i), got, want)
		}
	}
	times := make([]time.Duration, runs)
	for i := range times {
		if err := a.Record(s); err != nil {
			return Bandwidth{}, err
		}
		if err := s.CopyDtoD(dst, 0, src, 0, bytes); err != nil {
			return Bandwidth{}, err
		}
		if err := b.Record(s); err != nil {
			return Bandwidth{}, err
		}
		if err := b.Wait(0); err != nil {
			return Bandwidth{}, err
		}
		if times[i], err = b.Since(a); err != nil {
			return Bandwidth{}, err
		}
	}
	return newBandwidth(2*bytes, times), nil
}

func le64(b []byte) uint64 {
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}

func le32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}
