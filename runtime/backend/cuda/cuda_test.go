//go:build linux && amd64

package cuda

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"lithos/runtime/backend/gpu"
)

// The tests need a GPU. Where none is usable they skip, saying why (the Go machine: "libcuda.so.1
// not found"); with LITHOS_CUDA_REQUIRE=1 (tools/cuda_check.sh on the GPU machine) they fail
// instead, so a broken driver setup is not mistaken for a pass.

var (
	devOnce sync.Once
	dev     *Device
	devErr  error
)

// testDevice returns the shared device of the test binary, or skips/fails with the reason.
func testDevice(t testing.TB) *Device {
	t.Helper()
	devOnce.Do(func() { dev, devErr = Open(0) })
	if devErr != nil {
		if os.Getenv("LITHOS_CUDA_REQUIRE") == "1" {
			t.Fatalf("no usable GPU (LITHOS_CUDA_REQUIRE=1): %v", devErr)
		}
		t.Skipf("no usable GPU: %v", devErr)
	}
	return dev
}

func TestMain(m *testing.M) {
	var em *cpuEmulator
	if emulatorEnabled() {
		var err error
		if em, err = startEmulator(); err != nil {
			fmt.Fprintln(os.Stderr, "LITHOS_CUDA_EMULATE=1: start the CPU emulator:", err)
			os.Exit(1)
		}
	}
	code := m.Run()
	if goldenTemp != "" {
		os.RemoveAll(goldenTemp)
	}
	if dev != nil {
		dev.Close()
	}
	if em != nil {
		em.stop()
	}
	os.Exit(code)
}

// TestOpenWithoutDriver: a driver library that is not there gives ErrNoDriver naming the
// library; Open on this machine either works or says what is missing.
func TestOpenWithoutDriver(t *testing.T) {
	err := loadDriverFrom("libcuda-lithos-missing.so.1")
	if !errors.Is(err, ErrNoDriver) || !strings.Contains(err.Error(), "libcuda-lithos-missing.so.1") {
		t.Fatalf("missing library: %v", err)
	}
	if _, err := Open(0); err != nil {
		t.Logf("Open(0) here: %v", err)
		if errors.Is(err, ErrNoDriver) && !strings.Contains(err.Error(), "libcuda.so.1 not found") {
			t.Fatalf("the no-driver error does not name libcuda.so.1: %v", err)
		}
	}
}

func TestDeviceInfo(t *testing.T) {
	d := testDevice(t)
	i := d.Info
	t.Logf("%v, arch %s", i, i.Arch())
	if i.Name == "" || i.Major*10+i.Minor < MinComputeCapability || i.SMs < 1 || i.MaxThreads < 256 || i.DriverVersion < MinDriverVersion {
		t.Fatalf("implausible device info %+v", i)
	}
	free, total, err := d.MemInfo()
	if err != nil {
		t.Fatal(err)
	}
	if total != i.TotalMemory || free <= 0 || free > total {
		t.Fatalf("memory: free %d, total %d, device total %d", free, total, i.TotalMemory)
	}
}

// TestReadWrite: random bytes through Write/Read at random offsets, sizes across the staging
// buffer's size, over a poisoned buffer whose untouched bytes must keep the poison.
func TestReadWrite(t *testing.T) {
	d := testDevice(t)
	r := rand.New(rand.NewPCG(1, 2))
	const size = 3*stageBytes + 12345
	b, err := d.Alloc(size)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	for _, n := range []int{1, 7, 4096, stageBytes - 1, stageBytes, 2*stageBytes + 3} {
		off := r.Int64N(size - int64(n))
		poison := bytes.Repeat([]byte{0xA5}, size)
		if err := d.Write(b, 0, poison); err != nil {
			t.Fatal(err)
		}
		src := make([]byte, n)
		for i := range src {
			src[i] = byte(r.Uint32())
		}
		if err := d.Write(b, off, src); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, size)
		if err := d.Read(got, b, 0); err != nil {
			t.Fatal(err)
		}
		copy(poison[off:], src)
		if !bytes.Equal(got, poison) {
			i := 0
			for got[i] == poison[i] {
				i++
			}
			t.Fatalf("%d bytes at %d: first difference at byte %d", n, off, i)
		}
	}
	if err := d.Write(b, size-1, []byte{1, 2}); err == nil {
		t.Fatal("a write past the end was accepted")
	}
}

func TestAllocTooLarge(t *testing.T) {
	d := testDevice(t)
	_, err := d.Alloc(4 * d.Info.TotalMemory)
	if !IsOutOfMemory(err) || !strings.Contains(err.Error(), "GB free") {
		t.Fatalf("allocating 4× the device: %v", err)
	}
	if err := d.Fit("a test model", 2*d.Info.TotalMemory); err == nil || !strings.Contains(err.Error(), "needs") {
		t.Fatalf("Fit of 2× the device: %v", err)
	}
}

// argsSource has a kernel that stores each scalar argument and computes out[i] = a·x[i] + y[i]
// in integers (exact), and one that reads a struct by value.
const argsSource = `
struct rec { unsigned int a; int b; float c; unsigned int d; };
extern "C" __global__ void t_axpy(int* out, const int* x, const int* y, unsigned long long n, int a) {
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a * x[i] + y[i];
}
extern "C" __global__ void t_args(unsigned long long* out, unsigned int u, int i, float f, double g, long long l, unsigned long long q, rec r) {
    out[0] = u; out[1] = (unsigned long long)(long long)i; out[2] = __float_as_uint(f);
    out[3] = __double_as_longlong(g); out[4] = (unsigned long long)l; out[5] = q;
    out[6] = r.a; out[7] = (unsigned long long)(long long)r.b; out[8] = __float_as_uint(r.c); out[9] = r.d;
}
extern "C" __global__ void t_step(unsigned int* state, unsigned int* log) {
    unsigned int c = state[0];
    log[c] = c * 7u + 1u;
    state[0] = c + 1u;
}
extern "C" __global__ void t_ring(unsigned long long* ring, unsigned int* state, unsigned int cap) {
    unsigned int h = state[0];
    ring[h % cap] = ((unsigned long long)(h + 1u) << 32) | (h * 3u);
    state[0] = h + 1u;
}
`

// gpuOnly skips a test that compiles a module of its own (the test and device-check kernels,
// NVRTC's errors) on the driver's emulator, which runs only lithos/kernels' module.
func gpuOnly(t *testing.T) {
	t.Helper()
	if emulatorEnabled() {
		t.Skip("needs the GPU: the emulator runs only lithos/kernels' module, not this test's own kernels")
	}
}

func loadTestModule(t *testing.T, d *Device) *Module {
	t.Helper()
	t.Setenv("LITHOS_CUDA_CACHE", t.TempDir())
	m, err := d.Load("lithos_test.cu", argsSource)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Unload() })
	return m
}

func kernel(t *testing.T, m *Module, name string) *Function {
	t.Helper()
	f, err := m.Function(name)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestLaunch(t *testing.T) {
	d := testDevice(t)
	gpuOnly(t)
	m := loadTestModule(t, d)
	s, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := rand.New(rand.NewPCG(3, 4))
	const n = 100003
	x, y := make([]int32, n), make([]int32, n)
	for i := range x {
		x[i], y[i] = r.Int32N(1<<20)-1<<19, r.Int32N(1<<20)-1<<19
	}
	bx, _ := d.Upload(Int32Bytes(x))
	by, _ := d.Upload(Int32Bytes(y))
	bo, err := d.Alloc(4 * n)
	if err != nil {
		t.Fatal(err)
	}
	defer bx.Free()
	defer by.Free()
	defer bo.Free()
	const a = int32(-37)
	if err := s.Fill32(bo, 0, n, 0x7fc00001); err != nil { // NaN poison
		t.Fatal(err)
	}
	if err := kernel(t, m, "t_axpy").Launch(s, D1((n+255)/256), D1(256), 0, bo, bx, by, uint64(n), a); err != nil {
		t.Fatal(err)
	}
	if err := s.Wait(0); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4*n)
	if err := d.Read(got, bo, 0); err != nil {
		t.Fatal(err)
	}
	for i := range x {
		if v := int32(binary.LittleEndian.Uint32(got[4*i:])); v != a*x[i]+y[i] {
			t.Fatalf("out[%d] = %d, want %d", i, v, a*x[i]+y[i])
		}
	}

	// Every argument type arrives as the kernel's parameter.
	out, err := d.Alloc(80)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Free()
	rec := make([]byte, 16)
	binary.LittleEndian.PutUint32(rec[0:], 0xdeadbeef)
	binary.LittleEndian.PutUint32(rec[4:], uint32(0xffffff85)) // −123
	binary.LittleEndian.PutUint32(rec[8:], math.Float32bits(2.5))
	binary.LittleEndian.PutUint32(rec[12:], 77)
	if err := kernel(t, m, "t_args").Launch(s, D1(1), D1(1), 0, out, uint32(4000000000), int32(-5), float32(1.25), float64(-3.5), int64(-1<<40), uint64(1<<63|5), rec); err != nil {
		t.Fatal(err)
	}
	if err := s.Wait(0); err != nil {
		t.Fatal(err)
	}
	w := make([]byte, 80)
	if err := d.Read(w, out, 0); err != nil {
		t.Fatal(err)
	}
	want := []uint64{4000000000, uint64(1<<64 - 5), uint64(math.Float32bits(1.25)), math.Float64bits(-3.5), uint64(1<<64 - 1<<40), 1<<63 | 5,
		0xdeadbeef, uint64(1<<64 - 123), uint64(math.Float32bits(2.5)), 77}
	for i, v := range want {
		if g := binary.LittleEndian.Uint64(w[8*i:]); g != v {
			t.Errorf("argument slot %d: %#x, want %#x", i, g, v)
		}
	}
	if err := kernel(t, m, "t_args").Launch(s, D1(1), D1(1), 0, out, 3); err == nil || !strings.Contains(err.Error(), "type int") {
		t.Fatalf("an int argument: %v", err)
	}
}

// TestCompileCache: the second compilation of the same source is read from the disk cache.
func TestCompileCache(t *testing.T) {
	d := testDevice(t)
	gpuOnly(t)
	dir := t.TempDir()
	t.Setenv("LITHOS_CUDA_CACHE", dir)
	src := argsSource + "\n// cache test " + time.Now().String() + "\n"
	c1, err := Compile("cache.cu", src, d.Info.Arch())
	if err != nil {
		t.Fatal(err)
	}
	compileCount.Lock()
	n := compileCount.n
	compileCount.Unlock()
	c2, err := Compile("cache.cu", src, d.Info.Arch())
	if err != nil {
		t.Fatal(err)
	}
	compileCount.Lock()
	n2 := compileCount.n
	compileCount.Unlock()
	if c1.Cached || !c2.Cached || n2 != n || !bytes.Equal(c1.Image, c2.Image) || c1.Key != c2.Key {
		t.Fatalf("first cached %v, second cached %v, compilations %d → %d", c1.Cached, c2.Cached, n, n2)
	}
	if _, err := os.Stat(filepath.Join(dir, c1.Key+".cubin")); err != nil {
		t.Fatalf("cache entry: %v (PTX image %v)", err, c1.PTX)
	}
	c3, err := Compile("cache.cu", src, d.Info.Arch(), "-DLITHOS_OTHER=1")
	if err != nil {
		t.Fatal(err)
	}
	if c3.Cached || c3.Key == c1.Key {
		t.Fatal("other options hit the cache entry of the first compilation")
	}
	if _, err := d.LoadImage("cache.cu", c2.Image); err != nil {
		t.Fatalf("the cached image does not load: %v", err)
	}
	major, minor, _ := NVRTCVersion()
	t.Logf("NVRTC %d.%d (%s), %d-byte %s image", major, minor, nvrtc.path, len(c1.Image), map[bool]string{true: "PTX", false: "CUBIN"}[c1.PTX])
}

func TestCompileError(t *testing.T) {
	d := testDevice(t)
	gpuOnly(t)
	t.Setenv("LITHOS_CUDA_CACHE", t.TempDir())
	_, err := Compile("lithos_bad.cu", "extern \"C\" __global__ void k(int* p) { p[0] = undefined_name; }\n", d.Info.Arch())
	var ne *NVRTCError
	if !errors.As(err, &ne) || !strings.Contains(err.Error(), "lithos_bad.cu") || !strings.Contains(ne.Log, "undefined_name") {
		t.Fatalf("compilation error: %v", err)
	}
}

// TestGraphReplay: three launches of a kernel whose control value (a counter) lives in device
// memory, captured once and replayed five times, leave the same trace as fifteen launches.
func TestGraphReplay(t *testing.T) {
	d := testDevice(t)
	gpuOnly(t)
	m := loadTestModule(t, d)
	step := kernel(t, m, "t_step")
	s, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	state, _ := d.Alloc(4)
	log, err := d.Alloc(4 * 64)
	if err != nil {
		t.Fatal(err)
	}
	defer state.Free()
	defer log.Free()
	if err := d.Write(state, 0, make([]byte, 4)); err != nil {
		t.Fatal(err)
	}
	if err := s.Fill32(log, 0, 64, 0xffffffff); err != nil {
		t.Fatal(err)
	}
	g, err := s.Capture(func() error {
		for range 3 {
			if err := step.Launch(s, D1(1), D1(1), 0, state, log); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if g.Nodes != 3 {
		t.Errorf("graph has %d nodes, want 3", g.Nodes)
	}
	if err := s.Wait(0); err != nil { // capture ran nothing: the counter is still 0
		t.Fatal(err)
	}
	c := make([]byte, 4)
	if err := d.Read(c, state, 0); err != nil || binary.LittleEndian.Uint32(c) != 0 {
		t.Fatalf("after capture the counter is %d (%v), want 0", binary.LittleEndian.Uint32(c), err)
	}
	for range 5 {
		if err := g.Launch(s); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Wait(0); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4*64)
	if err := d.Read(got, log, 0); err != nil {
		t.Fatal(err)
	}
	for i := range 64 {
		want := uint32(0xffffffff)
		if i < 15 {
			want = uint32(i*7 + 1)
		}
		if v := binary.LittleEndian.Uint32(got[4*i:]); v != want {
			t.Fatalf("log[%d] = %d, want %d", i, v, want)
		}
	}
}

// TestMappedRing: a kernel writes ring words straight into mapped pinned host memory; the host
// reads them after the stream's wait, with sequence numbers that wrap the ring.
func TestMappedRing(t *testing.T) {
	d := testDevice(t)
	gpuOnly(t)
	m := loadTestModule(t, d)
	ring, err := d.HostAlloc(8*8, true, false)
	if err != nil {
		t.Fatal(err)
	}
	defer ring.Free()
	state, err := d.Alloc(4)
	if err != nil {
		t.Fatal(err)
	}
	defer state.Free()
	s, _ := d.NewStream()
	defer s.Close()
	if err := s.Fill32(state, 0, 1, 0); err != nil {
		t.Fatal(err)
	}
	clear(ring.Bytes)
	f := kernel(t, m, "t_ring")
	for range 11 {
		if err := f.Launch(s, D1(1), D1(1), 0, ring, state, uint32(8)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Wait(0); err != nil {
		t.Fatal(err)
	}
	for slot := range 8 {
		h := uint32(slot)
		if slot < 3 {
			h += 8 // slots 0..2 were written twice
		}
		want := uint64(h+1)<<32 | uint64(h*3)
		if v := binary.LittleEndian.Uint64(ring.Bytes[8*slot:]); v != want {
			t.Fatalf("ring slot %d = %#x, want %#x", slot, v, want)
		}
	}
}

// TestTimeoutIsDeviceBusy (no GPU needed): a wait's timeout, wrapped as Wait wraps it, is a
// gpu.ErrDeviceBusy, so that the shared runtime keeps the memory a hung kernel may still use.
func TestTimeoutIsDeviceBusy(t *testing.T) {
	err := fmt.Errorf("cuda: wait for the stream: %w (%v)", ErrTimeout, time.Second)
	if !errors.Is(err, ErrTimeout) || !errors.Is(err, gpu.ErrDeviceBusy) {
		t.Fatalf("%v: errors.Is ErrTimeout %v, gpu.ErrDeviceBusy %v", err, errors.Is(err, ErrTimeout), errors.Is(err, gpu.ErrDeviceBusy))
	}
	if errors.Is(errors.New("cuda: launch failed"), gpu.ErrDeviceBusy) {
		t.Fatal("an unrelated error matches gpu.ErrDeviceBusy")
	}
}

// TestWaitBounded: a wait shorter than a spinning kernel returns ErrTimeout; a long one then
// sees it finish; event timing measures it.
func TestWaitBounded(t *testing.T) {
	d := testDevice(t)
	gpuOnly(t)
	k, err := d.loadCheck()
	if err != nil {
		t.Fatal(err)
	}
	defer k.mod.Unload()
	s, _ := d.NewStream()
	defer s.Close()
	flag, err := d.Alloc(4)
	if err != nil {
		t.Fatal(err)
	}
	defer flag.Free()
	a, _ := d.NewEvent()
	b, _ := d.NewEvent()
	defer a.Close()
	defer b.Close()
	if err := s.Fill32(flag, 0, 1, 0); err != nil {
		t.Fatal(err)
	}
	if err := a.Record(s); err != nil {
		t.Fatal(err)
	}
	// 1e9 cycles: 0.5 s at 2 GHz, 1 s at 1 GHz.
	if err := k.spin.Launch(s, D1(1), D1(32), 0, uint64(1e9), flag); err != nil {
		t.Fatal(err)
	}
	if err := b.Record(s); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	err = s.Wait(5 * time.Millisecond)
	if !errors.Is(err, ErrTimeout) || !errors.Is(err, gpu.ErrDeviceBusy) {
		t.Fatalf("a 5 ms wait on a spinning kernel: %v (want ErrTimeout, which is a gpu.ErrDeviceBusy)", err)
	}
	if el := time.Since(t0); el > 500*time.Millisecond {
		t.Fatalf("the 5 ms wait took %v", el)
	}
	if err := s.Wait(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	el, err := b.Since(a)
	if err != nil {
		t.Fatal(err)
	}
	c := make([]byte, 4)
	if err := d.Read(c, flag, 0); err != nil || c[0] != 1 {
		t.Fatalf("flag %v (%v)", c, err)
	}
	if el < 100*time.Millisecond || el > 5*time.Second {
		t.Fatalf("1e9 cycles took %v of device time", el)
	}
	t.Logf("1e9 cycles: %v (%.2f GHz)", el, 1e9/el.Seconds()/1e9)
}

// TestReadCheck: the read kernel sums every word of a buffer that is not a multiple of its
// unrolled stride, and the sum matches the host's; the copy check passes.
func TestReadCheck(t *testing.T) {
	d := testDevice(t)
	gpuOnly(t)
	bw, err := d.ReadBandwidth(64<<20+48, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(bw.Runs) != 3 || bw.Median <= 0 {
		t.Fatalf("%+v", bw)
	}
	if _, err := d.CopyBandwidth(32<<20, 2); err != nil {
		t.Fatal(err)
	}
}

// TestUploadStaged: random bytes (not a multiple of the chunk) through the pinned staging
// path arrive intact.
func TestUploadStaged(t *testing.T) {
	d := testDevice(t)
	n := 2*UploadChunk + UploadChunk/3 + 5
	src := make([]byte, n)
	r := rand.New(rand.NewPCG(5, 6))
	for i := 0; i+8 <= n; i += 8 {
		binary.LittleEndian.PutUint64(src[i:], r.Uint64())
	}
	dst, err := d.Alloc(int64(n))
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Free()
	st, err := d.UploadStaged(t.Context(), dst, src, "")
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, n)
	if err := d.Read(got, dst, 0); err != nil {
		t.Fatal(err)
	}
	if sha256.Sum256(got) != sha256.Sum256(src) {
		t.Fatal("uploaded bytes differ")
	}
	t.Logf("%d bytes in %v (%.1f GB/s; pinning %v)", st.Bytes, st.Wall, st.GBps(), st.Setup)
}
