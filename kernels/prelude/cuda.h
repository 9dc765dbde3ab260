// lithos kernel prelude: CUDA C++ (NVRTC). Maps the kernel dialect of kernels/ops/*.kern
// (see docs/metal.md §2) onto CUDA. The Metal prelude (prelude/metal.h) defines the same names.
typedef unsigned int u32;
typedef int i32;
typedef unsigned short u16;
typedef unsigned char u8;
typedef unsigned long long u64;
typedef float f32;

#define FN static __device__ __forceinline__
#define DEV                                  // device (global) memory pointer qualifier
#define TG                                   // threadgroup (shared) memory pointer qualifier
#define TG_ARRAY(T, name, n) __shared__ T name[n]
#define BARRIER() __syncthreads()            // threadgroup barrier, threadgroup memory ordered
#define BARRIER_DEV() __syncthreads()        // barrier that also orders device memory within the block

#define SIMD_XOR(x, m) __shfl_xor_sync(0xffffffffu, (x), (m))
#define SIMD_BCAST(x, l) __shfl_sync(0xffffffffu, (x), (l))

#define AS_FLOAT(u) __uint_as_float(u)
#define AS_UINT(f) __float_as_uint(f)
#define EXP(x) expf(x)
#define LOG(x) logf(x)
#define SQRT(x) sqrtf(x)
#define COS(x) cosf(x)
#define SIN(x) sinf(x)

// Thread ids as the Metal entry points receive them: tg (threadgroup position in the grid),
// ngroups (threadgroups per grid), tid (thread in threadgroup), lane (in simdgroup), sg
// (simdgroup in threadgroup). Threadgroups are one-dimensional.
#define LITHOS_THREAD_IDS                                                     \
    const uint3 tg = blockIdx; const uint3 ngroups = gridDim;                  \
    const u32 tid = threadIdx.x; const u32 lane = tid & 31u; const u32 sg = tid >> 5; \
    (void)tg; (void)ngroups; (void)lane; (void)sg
