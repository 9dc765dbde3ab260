package kernels

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// The fiber harness: compiles MSL (the generated source, or a test's own) as C++ against the
// shim in run mode together with kernels/fiber/fiber.h and a generated dispatch table, then runs
// jobs (buffers + dispatches) through the resulting executable (docs/metal.md §4).

// clangxx returns the clang++ path, or skips the test with the reason.
func clangxx(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"clang++", "clang++-19", "clang++-16", "clang++-14"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("SKIP: clang++ not found; the Metal checks need Debian's clang (apt-get install clang; .ci/run installs it)")
	return ""
}

// fiberProgram is a compiled fiber executable.
type fiberProgram struct {
	exe string
	err error
}

var (
	fiberOnce sync.Once
	fiberMain fiberProgram
	fiberDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if fiberDir != "" {
		os.RemoveAll(fiberDir)
	}
	os.Exit(code)
}

// fiberCall is the C++ call of one generated kernel entry point with one thread's ids.
func fiberCall(k Kernel) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s((u32*)a[0], *(const %s*)a[1]", k.Name, k.ParamsType())
	for i, buf := range k.Buffers {
		c := "const "
		if buf.Write {
			c = ""
		}
		fmt.Fprintf(&b, ", (%s%s*)a[%d]", c, buf.Elem, i+2)
	}
	b.WriteString(", ids.tg, ids.ngroups, ids.tid, ids.tid & 31u, ids.tid >> 5)")
	return b.String()
}

// buildFiber compiles src (MSL) with a dispatch table of name → C++ call expression (which sees
// void** a and lithos_fiber::Ids ids) into an executable in dir.
func buildFiber(t testing.TB, dir, name, src string, calls map[string]string, order []string) (string, error) {
	cxx := clangxx(t)
	root, err := filepath.Abs(".")
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, name+".metal"), []byte(src), 0o644); err != nil {
		return "", err
	}
	var d strings.Builder
	fmt.Fprintf(&d, "#include \"%s.metal\"\n#include \"fiber.h\"\n", name)
	for i, n := range order {
		fmt.Fprintf(&d, "static void call_%d(void** a, lithos_fiber::Ids ids) { %s; }\n", i, calls[n])
	}
	d.WriteString("static const lithos_fiber::KernelEntry table[] = {\n")
	for i, n := range order {
		fmt.Fprintf(&d, "    {\"%s\", call_%d},\n", n, i)
	}
	d.WriteString("    {nullptr, nullptr}};\nint main(int argc, char** argv) { if (argc != 3) return 2; return lithos_fiber::run_job(table, argv[1], argv[2]); }\n")
	drv := filepath.Join(dir, name+"_driver.cpp")
	if err := os.WriteFile(drv, []byte(d.String()), 0o644); err != nil {
		return "", err
	}
	exe := filepath.Join(dir, name)
	// Frame pointers: the runtime matches barriers and SIMD calls by call path; convergent
	// functions: the optimizer may not duplicate a barrier call into several call sites.
	cmd := exec.Command(cxx, "-std=c++17", "-O1", "-g0", "-DLITHOS_SHIM_RUN", "-Wno-unused-function",
		"-fno-omit-frame-pointer", "-Xclang", "-fconvergent-functions",
		"-I", filepath.Join(root, "shim"), "-I", filepath.Join(root, "fiber"), "-I", dir, drv, "-o", exe)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
	}
	return exe, nil
}

// generatedFiber returns the fiber executable of Source(Metal) (built once per test binary).
func generatedFiber(t testing.TB) string {
	t.Helper()
	clangxx(t)
	fiberOnce.Do(func() {
		fiberDir, fiberMain.err = os.MkdirTemp("", "lithos-fiber-")
		if fiberMain.err != nil {
			return
		}
		calls := map[string]string{}
		var order []string
		for _, k := range Kernels() {
			if k.MMAOnly {
				continue // only in the tensor-core build (mmaFiberExe)
			}
			calls[k.Name] = fiberCall(k)
			order = append(order, k.Name)
		}
		fiberMain.exe, fiberMain.err = buildFiber(t, fiberDir, "lithos", Source(Metal), calls, order)
	})
	if fiberMain.err != nil {
		t.Fatalf("build the fiber runtime: %v", fiberMain.err)
	}
	return fiberMain.exe
}

// job is one run of the fiber executable: buffers and dispatches over them.
type job struct {
	bufs  [][]byte
	disps []dispatch
	sched string // LITHOS_FIBER_SCHEDULE for run ("" = the runtime's default, asc)
}

type dispatch struct {
	name    string
	grid    [3]uint32
	threads int
	args    []int
	cluster uint32 // threadgroups per thread-block cluster along x (0 or 1: none)
}

// buf adds a buffer and returns its index.
func (j *job) buf(b []byte) int {
	j.bufs = append(j.bufs, append([]byte(nil), b...))
	return len(j.bufs) - 1
}

func (j *job) f32(v []float32) int { return j.buf(f32Bytes(v)) }

// poison adds a buffer of n float32 NaNs (an output the kernel must overwrite).
func (j *job) poison(n int) int {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(math.NaN())
	}
	return j.f32(v)
}

// launch adds a dispatch of a generated kernel: args are the buffer indices of ctl, the params
// record and the kernel's buffers.
func (j *job) launch(t testing.TB, name string, grid [3]uint32, args ...int) {
	t.Helper()
	k, ok := Lookup(name)
	if !ok {
		t.Fatalf("no kernel %s", name)
	}
	if len(args) != 2+len(k.Buffers) {
		t.Fatalf("%s: %d arguments, want %d", name, len(args), 2+len(k.Buffers))
	}
	j.disps = append(j.disps, dispatch{name: name, grid: grid, threads: k.Threads, args: args})
}

// launchCluster is launch in thread-block clusters of cluster threadgroups along x (the fiber
// runtime runs a cluster's threadgroups together; kernels/fiber/fiber.h).
func (j *job) launchCluster(t testing.TB, name string, grid [3]uint32, cluster uint32, args ...int) {
	t.Helper()
	j.launch(t, name, grid, args...)
	j.disps[len(j.disps)-1].cluster = cluster
}

// run executes the job with exe and returns the buffers after the last dispatch.
func (j *job) run(t testing.TB, exe string) ([][]byte, error) {
	t.Helper()
	var b bytes.Buffer
	u := func(v uint32) { binary.Write(&b, binary.LittleEndian, v) }
	u(uint32(len(j.bufs)))
	for _, x := range j.bufs {
		u(uint32(len(x)))
		b.Write(x)
	}
	u(uint32(len(j.disps)))
	for _, d := range j.disps {
		u(uint32(len(d.name)))
		b.WriteString(d.name)
		u(d.grid[0])
		u(d.grid[1])
		u(d.grid[2])
		u(uint32(d.threads))
		u(max(d.cluster, 1))
		u(uint32(len(d.args)))
		for _, a := range d.args {
			u(uint32(a))
		}
	}
	dir := t.TempDir()
	in, out := filepath.Join(dir, "job"), filepath.Join(dir, "out")
	if err := os.WriteFile(in, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, in, out)
	if j.sched != "" {
		cmd.Env = append(os.Environ(), "LITHOS_FIBER_SCHEDULE="+j.sched)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%v: %s", err, strings.TrimSpace(stderr.String()))
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	res := make([][]byte, len(j.bufs))
	for i, x := range j.bufs {
		if len(raw) < len(x) {
			t.Fatalf("fiber output: %d bytes short", len(x)-len(raw))
		}
		res[i], raw = raw[:len(x)], raw[len(x):]
	}
	return res, nil
}

// mustRun runs the job under every schedule of -fiber.schedules (runSchedules) and fails the
// test on an error or when two schedules' outputs differ in any byte.
func (j *job) mustRun(t testing.TB) [][]byte {
	t.Helper()
	r, err := j.runSchedules(t, generatedFiber(t))
	if err != nil {
		t.Fatalf("fiber run: %v", err)
	}
	return r
}

func f32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func bytesF32(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

func u32Bytes(v []uint32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], x)
	}
	return b
}

func bytesU32(b []byte) []uint32 {
	v := make([]uint32, len(b)/4)
	for i := range v {
		v[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	return v
}

// zeroCtl is a step state of 64 zero words (no done flag, no dynamic values).
var zeroCtl = make([]byte, 256)

// closeTo checks |got − want| ≤ rel·|want| + abs elementwise (NaN in got never passes) and
// reports the worst element.
func closeTo(t testing.TB, what string, got, want []float32, rel, abs float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	worst, wi := 0.0, -1
	for i := range want {
		g, w := float64(got[i]), float64(want[i])
		d := math.Abs(g - w)
		lim := rel*math.Abs(w) + abs
		if math.IsNaN(g) || d > lim {
			t.Fatalf("%s: element %d = %g, want %g (|Δ| %.3g > %.3g)", what, i, g, w, d, lim)
		}
		if r := d / lim; r > worst {
			worst, wi = r, i
		}
	}
	t.Logf("%s: %d values, worst |Δ| at %.2f of the tolerance (element %d)", what, len(want), worst, wi)
}
