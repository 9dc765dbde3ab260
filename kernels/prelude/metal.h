// lithos kernel prelude: Metal Shading Language (compiled with the language version set
// explicitly and fast math off, docs/metal.md). Maps the kernel dialect of kernels/ops/*.kern
// onto MSL. The CUDA prelude (prelude/cuda.h) defines the same names.
#include <metal_stdlib>
using namespace metal;

typedef uint u32;
typedef int i32;
typedef ushort u16;
typedef uchar u8;
typedef ulong u64;
typedef float f32;

#define FN static inline
#define DEV device                           // device memory pointer qualifier
#define TG threadgroup                       // threadgroup memory pointer qualifier
#ifndef LITHOS_TG_ARRAY
#define LITHOS_TG_ARRAY(T, name, n) threadgroup T name[n]
#endif
#define TG_ARRAY(T, name, n) LITHOS_TG_ARRAY(T, name, n)
#define BARRIER() threadgroup_barrier(mem_flags::mem_threadgroup)
#define BARRIER_DEV() threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup)

#define SIMD_XOR(x, m) simd_shuffle_xor((x), (ushort)(m))
#define SIMD_BCAST(x, l) simd_broadcast((x), (ushort)(l))

#define AS_FLOAT(u) as_type<float>(u)
#define AS_UINT(f) as_type<uint>(f)
#define EXP(x) precise::exp(x)
#define LOG(x) precise::log(x)
#define SQRT(x) precise::sqrt(x)
#define COS(x) precise::cos(x)
#define SIN(x) precise::sin(x)
