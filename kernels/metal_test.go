package kernels

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestSourceDeterministicAndComplete(t *testing.T) {
	for _, tgt := range []Target{CUDA, Metal} {
		a, b := Source(tgt), Source(tgt)
		if a != b {
			t.Fatalf("%s: two generations differ", tgt)
		}
		for _, k := range Kernels() {
			if !strings.Contains(a, " "+k.Name+"(") {
				t.Errorf("%s: entry point %s missing", tgt, k.Name)
			}
			if k.Threads%32 != 0 || k.Threads == 0 || k.Threads > 1024 {
				t.Errorf("%s: %d threads", k.Name, k.Threads)
			}
		}
	}
	if m := Source(Metal); !strings.Contains(m, "[[buffer(1)]]") || !strings.Contains(m, "#include <metal_stdlib>") {
		t.Error("Metal source lacks buffer attributes or <metal_stdlib>")
	}
	if c := Source(CUDA); !strings.Contains(c, "extern \"C\" __global__") || strings.Contains(c, "metal_stdlib") {
		t.Error("CUDA source is not CUDA")
	}
}

func TestRecordLayout(t *testing.T) {
	p := RMSNormParams{DoneWord: NoWord, Rows: 3, RowsWord: 2, Groups: 4, N: 5, LdX: 6, LdZ: 7, LdY: 8, Mode: RMSGated, Eps: 1}
	got := bytesU32(Record(p))
	want := []uint32{0xFFFFFFFF, 3, 2, 4, 5, 6, 7, 8, 2, 0x3F800000, 0, 0}
	if len(got) != len(want) {
		t.Fatalf("record of %d words, want %d (padded to 16 bytes)", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("word %d = %#x, want %#x", i, got[i], want[i])
		}
	}
	// The C struct the kernels read has the same fields in the same order.
	if s := paramStruct("x", p); !strings.Contains(s, "u32 done_word;\n    u32 rows;\n    u32 rows_word;\n    u32 groups;\n    u32 n;\n    u32 ld_x;\n    u32 ld_z;\n    u32 ld_y;\n    u32 mode;\n    f32 eps;") {
		t.Fatalf("C struct:\n%s", s)
	}
}

// TestMetalCompilesWithShim compiles the generated MSL as C++ with clang against the shim in its
// check mode, where device/constant/threadgroup are distinct address spaces: a type error, an
// unknown function or a pointer passed into the wrong address space fails it. -Werror keeps
// it honest (only unused helpers are tolerated).
func TestMetalCompilesWithShim(t *testing.T) {
	cxx := clangxx(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "lithos.metal")
	if err := os.WriteFile(src, []byte(Source(Metal)), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(cxx, "-x", "c++", "-std=c++17", "-fsyntax-only", "-Wall", "-Wextra", "-Werror",
		"-Wno-unused-function", "-Wno-unused-parameter", "-I", "shim", src)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
	}
}

// TestShimCatchesAddressSpaces shows what the check mode adds over plain C++: a threadgroup
// pointer where a device pointer is expected, and a write through a constant reference, are
// compile errors.
func TestShimCatchesAddressSpaces(t *testing.T) {
	cxx := clangxx(t)
	for name, body := range map[string]string{
		"threadgroup as device": "static inline float f(device const float* p) { return p[0]; }\n" +
			"kernel void k(device float* y [[buffer(0)]], uint tid [[thread_index_in_threadgroup]]) {\n" +
			"    threadgroup float t[32];\n    t[tid] = 1; y[tid] = f(t); }\n",
		"write to constant": "struct P { uint n; };\n" +
			"kernel void k(constant P& p [[buffer(0)]]) { p.n = 1; }\n",
	} {
		t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) {
			src := filepath.Join(t.TempDir(), "bad.metal")
			os.WriteFile(src, []byte("#include <metal_stdlib>\nusing namespace metal;\n#define threadgroup_local static threadgroup\n"+
				strings.ReplaceAll(body, "    threadgroup float", "    threadgroup_local float")), 0o644)
			cmd := exec.Command(cxx, "-x", "c++", "-std=c++17", "-fsyntax-only", "-I", "shim", src)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("compiled without error")
			}
			t.Logf("rejected as expected: %s", firstLine(string(out), "error:"))
		})
	}
}

func firstLine(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return strings.TrimSpace(l)
		}
	}
	return ""
}
