package kernels

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Source(CUDA) checked by clang's CUDA front end without a CUDA toolkit (review item 14): clang
// -x cuda --cuda-device-only -nocudainc -nocudalib -fsyntax-only, with cudaStub standing in for
// what NVRTC declares without headers. It catches what NVRTC would reject in the source's
// syntax and types: a helper without __device__ called from a kernel, a write through a const
// buffer, an undeclared identifier, a type error in a CUDA-only branch of a template. It cannot
// catch a built-in that the stub declares but NVRTC lacks (or declares differently), PTX errors
// in inline asm (clang does not assemble with -fsyntax-only), or anything about sm_90 that the
// newest architecture clang knows does not share; NVRTC on the GPU machine is the real compiler
// (runtime/backend/cuda).

// cudaStub declares the NVRTC built-ins the kernels use: qualifiers, vector types, the built-in
// thread-id variables (clang's own __clang_cuda_builtin_vars.h, from its resource directory),
// warp shuffles and __syncwarp, bit casts, single-precision math. __syncthreads is a clang
// NVPTX builtin. Add a declaration here only for something NVRTC provides without an include
// (CUDA Programming Guide, "Built-in Variables", "Warp Shuffle Functions", the Math API).
const cudaStub = `// lithos: stand-in for NVRTC's built-in declarations (kernels/cuda_syntax_test.go).
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __host__ __attribute__((host))
#define __shared__ __attribute__((shared))
#define __constant__ __attribute__((constant))
#define __forceinline__ __inline__ __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...) __attribute__((launch_bounds(__VA_ARGS__)))
#define __align__(n) __attribute__((aligned(n)))

#define LITHOS_VEC2(T, N) struct __align__(2 * sizeof(T)) N { T x, y; };
#define LITHOS_VEC4(T, N) struct __align__(4 * sizeof(T)) N { T x, y, z, w; };
LITHOS_VEC2(float, float2) LITHOS_VEC4(float, float4)
LITHOS_VEC2(unsigned, uint2) LITHOS_VEC4(unsigned, uint4)
LITHOS_VEC2(int, int2) LITHOS_VEC4(int, int4)
LITHOS_VEC2(unsigned short, ushort2) LITHOS_VEC4(unsigned short, ushort4)
LITHOS_VEC4(unsigned char, uchar4)
struct float3 { float x, y, z; };
struct uint3 { unsigned x, y, z; };
struct int3 { int x, y, z; };
struct dim3 { unsigned x, y, z; };
#include <__clang_cuda_builtin_vars.h>

__device__ float2 make_float2(float, float);
__device__ float4 make_float4(float, float, float, float);
__device__ uint2 make_uint2(unsigned, unsigned);
__device__ uint3 make_uint3(unsigned, unsigned, unsigned);
__device__ uint4 make_uint4(unsigned, unsigned, unsigned, unsigned);

__device__ void __syncwarp(unsigned mask = 0xffffffffu);
template <class T> __device__ T __shfl_sync(unsigned mask, T v, int lane, int width = 32);
template <class T> __device__ T __shfl_xor_sync(unsigned mask, T v, int lanemask, int width = 32);
template <class T> __device__ T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32);
template <class T> __device__ T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32);

__device__ float __uint_as_float(unsigned);
__device__ unsigned __float_as_uint(float);
__device__ float __int_as_float(int);
__device__ int __float_as_int(float);

__device__ float expf(float);
__device__ float exp2f(float);
__device__ float logf(float);
__device__ float log2f(float);
__device__ float log1pf(float);
__device__ float sqrtf(float);
__device__ float rsqrtf(float);
__device__ float cosf(float);
__device__ float sinf(float);
__device__ float tanhf(float);
__device__ float powf(float, float);
__device__ float fabsf(float);
__device__ float fmaxf(float, float);
__device__ float fminf(float, float);
__device__ float floorf(float);
__device__ float ceilf(float);
__device__ float fmaf(float, float, float);
__device__ unsigned min(unsigned, unsigned);
__device__ unsigned max(unsigned, unsigned);
__device__ int min(int, int);
__device__ int max(int, int);
__device__ unsigned atomicAdd(unsigned*, unsigned);
`

var (
	cudaClangOnce sync.Once
	cudaClang     struct {
		path, arch, skip string
	}
)

// cudaFrontEnd returns clang and the newest CUDA architecture it accepts, or skips the test with
// the reason (no clang, or a clang without CUDA support).
func cudaFrontEnd(t *testing.T) (clang, arch, stubDir string) {
	t.Helper()
	cudaClangOnce.Do(func() {
		for _, name := range []string{"clang", "clang-19", "clang-16", "clang-14"} {
			if p, err := exec.LookPath(name); err == nil {
				cudaClang.path = p
				break
			}
		}
		if cudaClang.path == "" {
			cudaClang.skip = "SKIP: clang not found; the CUDA syntax check needs Debian's clang (apt-get install clang)"
			return
		}
		dir, err := os.MkdirTemp("", "lithos-cuda-probe-")
		if err != nil {
			cudaClang.skip = "SKIP: " + err.Error()
			return
		}
		defer os.RemoveAll(dir)
		stub, src := filepath.Join(dir, "stub.h"), filepath.Join(dir, "probe.cu")
		os.WriteFile(stub, []byte(cudaStub), 0o644)
		os.WriteFile(src, []byte("extern \"C\" __global__ void probe(float* y) { __syncthreads(); y[threadIdx.x] = expf(1.0f); }\n"), 0o644)
		var last string
		for _, a := range []string{"sm_90", "sm_89", "sm_86", "sm_80", "sm_70"} {
			out, err := exec.Command(cudaClang.path, cudaArgs(a, stub, src)...).CombinedOutput()
			if err == nil {
				cudaClang.arch = a
				return
			}
			last = firstLine(string(out), "error")
		}
		cudaClang.skip = "SKIP: " + cudaClang.path + " compiles no CUDA device code (" + last + ")"
	})
	if cudaClang.skip != "" {
		t.Skip(cudaClang.skip)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "stub.h"), []byte(cudaStub), 0o644); err != nil {
		t.Fatal(err)
	}
	return cudaClang.path, cudaClang.arch, dir
}

func cudaArgs(arch, stub, src string) []string {
	return []string{"-x", "cuda", "--cuda-device-only", "-nocudainc", "-nocudalib", "--cuda-gpu-arch=" + arch,
		"-std=c++17", "-fsyntax-only", "-Wall", "-Wextra", "-Werror", "-Wno-unused-function", "-Wno-unused-parameter",
		"-include", stub, src}
}

// TestCUDASourceSyntax compiles Source(CUDA) with clang's CUDA front end against cudaStub, as
// the CUDA backend compiles it and with the timeline diagnostic compiled in (-DLITHOS_TIMELINE,
// prelude TL_BEGIN).
func TestCUDASourceSyntax(t *testing.T) {
	clang, arch, dir := cudaFrontEnd(t)
	src := filepath.Join(dir, "lithos.cu")
	if err := os.WriteFile(src, []byte(Source(CUDA)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, def := range []string{"", "-DLITHOS_TIMELINE=1"} {
		args := cudaArgs(arch, filepath.Join(dir, "stub.h"), src)
		if def != "" {
			args = append([]string{def}, args...)
		}
		cmd := exec.Command(clang, args...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
		}
		t.Logf("Source(CUDA) %q passes clang's CUDA front end for %s (NVRTC targets sm_90)", def, arch)
	}
}

// TestCUDASyntaxCatches: the check rejects what NVRTC rejects — a host helper called from a
// kernel (a helper written without FN), a write through a const buffer, an undeclared name —
// each for that reason, and accepts a correct kernel.
func TestCUDASyntaxCatches(t *testing.T) {
	clang, arch, dir := cudaFrontEnd(t)
	pre := "typedef unsigned int u32;\n"
	for name, c := range map[string]struct{ body, want string }{
		"host helper": {"static inline float h(float x) { return x + 1.0f; }\nextern \"C\" __global__ void k(float* y) { y[threadIdx.x] = h(y[0]); }\n",
			"call to __host__ function from __global__ function"},
		"const write":     {"extern \"C\" __global__ void k(const float* __restrict__ y) { y[threadIdx.x] = 1.0f; }\n", "read-only variable is not assignable"},
		"undeclared name": {"extern \"C\" __global__ void k(float* y) { y[threadIdx.x] = simd_sum(y[0]); }\n", "undeclared identifier 'simd_sum'"},
		"correct":         {"extern \"C\" __global__ void k(float* y) { y[threadIdx.x] = __shfl_xor_sync(0xffffffffu, y[0], 1); }\n", ""},
	} {
		t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) {
			src := filepath.Join(dir, strings.ReplaceAll(name, " ", "_")+".cu")
			os.WriteFile(src, []byte(pre+c.body), 0o644)
			out, err := exec.Command(clang, cudaArgs(arch, filepath.Join(dir, "stub.h"), src)...).CombinedOutput()
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("a correct kernel was rejected: %v\n%s", err, out)
			case c.want == "":
			case err == nil:
				t.Fatal("compiled without error")
			case !strings.Contains(string(out), c.want):
				t.Fatalf("rejected for another reason than %q:\n%s", c.want, out)
			default:
				t.Logf("rejected as expected: %s", firstLine(string(out), "error:"))
			}
		})
	}
}

// TestOverridable: every name of Overridable is defined in Source (both targets) only under
// #ifndef, so that a -D option changes it instead of being redefined with a warning; and the
// CUDA source with each overridden (to its default value) still passes clang's front end.
func TestOverridable(t *testing.T) {
	for _, tg := range []Target{CUDA, Metal} {
		src := Source(tg)
		for _, name := range Overridable {
			guard := "#ifndef " + name + "\n#define " + name + " "
			if strings.Count(src, guard) != 1 || strings.Count(src, "#define "+name+" ") != 1 {
				t.Errorf("%s source: %s is not defined exactly once, under #ifndef", tg, name)
			}
		}
	}
	clang, arch, dir := cudaFrontEnd(t)
	src := filepath.Join(dir, "lithos-overridden.cu")
	if err := os.WriteFile(src, []byte(Source(CUDA)), 0o644); err != nil {
		t.Fatal(err)
	}
	args := cudaArgs(arch, filepath.Join(dir, "stub.h"), src)
	for _, name := range Overridable {
		args = append([]string{"-D" + name + "=8u"}, args...)
	}
	if out, err := exec.Command(clang, args...).CombinedOutput(); err != nil {
		t.Fatalf("Source(CUDA) with %v overridden: %v\n%s", Overridable, err, out)
	}
}
