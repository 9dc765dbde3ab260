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

#define UNROLL _Pragma("unroll")             // fully unroll the next constant-trip loop
#define SIMD_BARRIER() simdgroup_barrier(mem_flags::mem_threadgroup)
#define THR thread                           // thread-private pointer qualifier
#define SIMD_XOR(x, m) simd_shuffle_xor((x), (ushort)(m))
#define SIMD_BCAST(x, l) simd_broadcast((x), (ushort)(l))
#define SIMD_SHUFFLE(x, l) simd_shuffle((x), (ushort)(l)) // l may differ per lane

// ALIGNED16: the pointer is 16-byte aligned (the kernels' vector loads: ops/conv.kern's
// in_proj_ab, and the tensor-core BLM and MMA-layout products, which only the fiber runtime
// builds from this prelude). Run as C++ by the fiber runtime (LITHOS_SHIM_RUN) the address is
// checked; on Metal it is taken as not aligned, so in_proj_ab's loads stay element-wise there
// (their form before the vector loads), and so it is in the fiber runtime of the emulated Metal
// device (LITHOS_SHIM_METAL: kernels/fiberexec's Options.Metal), which runs Metal's paths.
#if defined(LITHOS_SHIM_RUN) && !defined(LITHOS_SHIM_METAL)
#define ALIGNED16(ptr) ((reinterpret_cast<unsigned long>(ptr) & 15ul) == 0ul)
#else
#define ALIGNED16(ptr) false
#endif

#define AS_FLOAT(u) as_type<float>(u)
#define AS_UINT(f) as_type<uint>(f)
#define EXP(x) precise::exp(x)
#define LOG(x) precise::log(x)
#define SQRT(x) precise::sqrt(x)
#define COS(x) precise::cos(x)
#define SIN(x) precise::sin(x)

// The BLM matrix kernels (ops/blm.kern) take their scalar path on Metal (BLM_MMA 0). With
// LITHOS_BLM_MMA defined before this prelude (a test build for the fiber runtime only,
// kernels/fiber_blm_test.go), they take the CUDA tensor-core path instead, with the two CUDA
// primitives emulated below: the same data flow and fragment layouts, so that the path the
// H200 runs is checked off the device too (the products are exact in both; sums are float32).
#ifdef LITHOS_BLM_MMA
#define BLM_MMA 1
// The CUDA path's threadgroup memory (static + the ring's dynamic memory) is allowed up to the
// H100/H200 limit per block, 227 KiB, in this test build only (the fiber runtime reads it).
#define LITHOS_TG_BYTES 232448
// ... of which at most 48 KiB static (CUDA's limit without opt-in; the rest is the launch's
// dynamic shared memory: TG_DYN_ARRAY).
#define LITHOS_TG_STATIC_BYTES 49152
// bf16_bits_to_f32 / f32 → bf16 (round to nearest even; NaN not special-cased: test inputs have none).
static inline float blm_bf16lo(uint a) { return as_type<float>(a << 16); }
static inline float blm_bf16hi(uint a) { return as_type<float>(a & 0xFFFF0000u); }
static inline uint blm_rn_bf16(float f) {
    const uint u = as_type<uint>(f);
    return (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
}
static inline uint bf16x2_mul(uint a, uint b) {
    return blm_rn_bf16(blm_bf16lo(a) * blm_bf16lo(b)) | (blm_rn_bf16(blm_bf16hi(a) * blm_bf16hi(b)) << 16);
}
static inline float blm_dot2(uint a, uint b) { return blm_bf16lo(a) * blm_bf16lo(b) + blm_bf16hi(a) * blm_bf16hi(b); }
// blm_mma_emu: the PTX m16n8k16 MMA (see prelude/cuda.h for the fragment layout) by simdgroup
// shuffles: lane (g, q) gathers row g's and row g+8's A fragments and columns 2q, 2q+1's B
// fragments from the four lanes of each quad; DOT multiplies two packed pairs (bf16 or f16) and
// adds the products in float32.
template <float (*DOT)(uint, uint)>
static inline void blm_mma_emu(thread float* c, uint a0, uint a1, uint a2, uint a3, uint b0, uint b1, uint lane) {
    const uint g = lane >> 2, q = lane & 3u;
    uint4 av;
    av.x = a0; av.y = a1; av.z = a2; av.w = a3;
    uint2 bv;
    bv.x = b0; bv.y = b1;
    float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
    for (uint k = 0; k < 4u; ++k) {
        const uint4 A = simd_shuffle(av, (ushort)(4u * g + k));
        const uint2 B0 = simd_shuffle(bv, (ushort)(8u * q + k));
        const uint2 B1 = simd_shuffle(bv, (ushort)(8u * q + 4u + k));
        s0 += DOT(A.x, B0.x) + DOT(A.z, B0.y);
        s1 += DOT(A.x, B1.x) + DOT(A.z, B1.y);
        s2 += DOT(A.y, B0.x) + DOT(A.w, B0.y);
        s3 += DOT(A.y, B1.x) + DOT(A.w, B1.y);
    }
    c[0] += s0; c[1] += s1; c[2] += s2; c[3] += s3;
}
// blm_mma: the bf16 MMA of the BLM kernels.
static inline void blm_mma(thread float* c, uint a0, uint a1, uint a2, uint a3, uint b0, uint b1, uint lane) {
    blm_mma_emu<blm_dot2>(c, a0, a1, a2, a3, b0, b1, lane);
}
// The MMA-layout kernels' primitives (prelude/cuda.h, ops/blmx.kern), emulated exactly: IEEE
// binary16 conversions with round-to-nearest-even and subnormals.
static inline uint blmx_f32_to_f16(float f) {
    const uint x = as_type<uint>(f), sign = (x >> 16) & 0x8000u, ax = x & 0x7FFFFFFFu;
    if (ax >= 0x7F800000u) return sign | (ax > 0x7F800000u ? 0x7E00u : 0x7C00u);
    if (ax >= 0x477FF000u) return sign | 0x7C00u;  // ≥ 65520: rounds to infinity
    if (ax < 0x38800000u) {                         // below 2⁻¹⁴: a subnormal, in units of 2⁻²⁴
        const uint e = ax >> 23;
        if (e < 101u) return sign;                  // below 2⁻²⁶: rounds to zero
        const uint m = (ax & 0x7FFFFFu) | 0x800000u, sh = 126u - e;
        uint q = m >> sh;
        const uint rem = m & ((1u << sh) - 1u), half = 1u << (sh - 1u);
        if (rem > half || (rem == half && (q & 1u))) q++;
        return sign | q;
    }
    uint r = ((((ax >> 23) - 112u) << 10) | ((ax >> 13) & 0x3FFu));
    const uint rem = ax & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) r++;
    return sign | r;
}
static inline float blmx_f16_to_f32(uint h) {
    const uint sign = (h & 0x8000u) << 16, e = (h >> 10) & 31u, m = h & 0x3FFu;
    if (e == 0u) return as_type<float>(as_type<uint>(float(m) * 5.9604644775390625e-8f) | sign);
    if (e == 31u) return as_type<float>(sign | 0x7F800000u | (m << 13));
    return as_type<float>(sign | ((e + 112u) << 23) | (m << 13));
}
static inline float blmx_e4m3(uint b) {
    const uint s = (b & 0x80u) << 24, e = (b >> 3) & 15u, m = b & 7u;
    if (e == 15u && m == 7u) return as_type<float>(s | 0x7FC00000u);
    const float v = e == 0u ? float(m) * 0.001953125f : as_type<float>(((e + 120u) << 23) | (m << 20));
    return as_type<float>(as_type<uint>(v) | s);
}
static inline uint blmx_e4m3x2(uint s) { return blmx_f32_to_f16(blmx_e4m3(s & 0xFFu)) | (blmx_f32_to_f16(blmx_e4m3((s >> 8) & 0xFFu)) << 16); }
static inline uint blmx_hmul(uint a, float s) {
    return blmx_f32_to_f16(blmx_f16_to_f32(a & 0xFFFFu) * s) | (blmx_f32_to_f16(blmx_f16_to_f32(a >> 16) * s) << 16);
}
static inline uint blmx_hmul_lo(uint a, uint s) { return blmx_hmul(a, blmx_f16_to_f32(s & 0xFFFFu)); }
static inline uint blmx_hmul_hi(uint a, uint s) { return blmx_hmul(a, blmx_f16_to_f32(s >> 16)); }
static inline uint blmx_f16x2(float lo, float hi) { return blmx_f32_to_f16(lo) | (blmx_f32_to_f16(hi) << 16); }
static inline float blmx_f16lo(uint h) { return blmx_f16_to_f32(h & 0xFFFFu); }
static inline float blmx_f16hi(uint h) { return blmx_f16_to_f32(h >> 16); }
static inline float blmx_dot2(uint a, uint b) { return blmx_f16lo(a) * blmx_f16lo(b) + blmx_f16hi(a) * blmx_f16hi(b); }
// blmx_mma: the f16 MMA of the MMA-layout kernels (the products are exact in float32).
static inline void blmx_mma(thread float* c, uint a0, uint a1, uint a2, uint a3, uint b0, uint b1, uint lane) {
    blm_mma_emu<blmx_dot2>(c, a0, a1, a2, a3, b0, b1, lane);
}
static inline uint4 blmx_ld16(device const uchar* p) { return *(device const uint4*)p; }
static inline uint2 blmx_ld8(device const uchar* p) { return *(device const uint2*)p; }
// The loads before the entry's wait (prelude/cuda.h): plain loads here.
static inline uint4 blmx_ld16_early(device const uchar* p) { return blmx_ld16(p); }
static inline uint2 blmx_ld8_early(device const uchar* p) { return blmx_ld8(p); }
// The asynchronous copies of the weight ring (prelude/cuda.h), as plain copies: the fiber
// runtime runs each thread to its next barrier, so a copy is complete when it returns.
static inline void blm_cp16(threadgroup void* dst, device const void* src) { *(threadgroup uint4*)dst = *(device const uint4*)src; }
static inline void blm_cp4(threadgroup void* dst, device const void* src) { *(threadgroup uint*)dst = *(device const uint*)src; }
static inline void blm_cp_commit() {}
template <int N>
static inline void blm_cp_wait() {}
#ifdef LITHOS_TG_DYN_ARRAY
#define TG_DYN_ARRAY(T, name, n) LITHOS_TG_DYN_ARRAY(T, name, n)
#else
#define TG_DYN_ARRAY(T, name, n) TG_ARRAY(T, name, n)
#endif
#else
#define BLM_MMA 0
#endif
// No thread-block clusters on Metal: the BLM kernels take BLMParams.Clusters as 1 (a record
// with more is computed by the grid's first threadgroups; the host gives Metal Clusters 1).
// The CUDA prelude's BLM_CLUSTER (sm_90+) adds a K split across threadgroups through
// distributed shared memory; the tensor-core test build of the fiber runtime (LITHOS_BLM_MMA in
// run mode) has it too, its clusters run by kernels/fiber/fiber.h (a cluster's threadgroups
// as one set of fibers, each with its own threadgroup memory).
#if defined(LITHOS_BLM_MMA) && defined(LITHOS_SHIM_RUN)
#define BLM_CLUSTER 1
static inline void blm_cluster_sync(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    lithos_fiber::cluster_barrier(file, line);
}
static inline threadgroup const float* blm_cluster_map(threadgroup const float* p, uint rank) {
    return static_cast<threadgroup const float*>(lithos_fiber::cluster_map(p, rank));
}
static inline threadgroup float* blm_cluster_map_rw(threadgroup float* p, uint rank) {
    return static_cast<threadgroup float*>(lithos_fiber::cluster_map(p, rank));
}
// The split cluster barrier: the arrival marks the thread, the wait (of a marked thread only) is
// a whole cluster barrier, which every thread of the cluster reaches where the kernels use it
// (stricter than CUDA's, where the wait completes once all have arrived, and the same for what
// it orders); a push from a thread that has not waited is reported (lithos_fiber::cluster_push).
static inline void blm_cluster_arrive(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    lithos_fiber::cluster_arrive(file, line);
}
static inline void blm_cluster_wait(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    lithos_fiber::cluster_wait(file, line);
}
// The pushes the receiver waits for (CUDA: st.async counted on the receiver's mbarrier): here
// bar is a byte count — set by blm_rx_init, lowered by each push into its rank — and
// blm_rx_wait is a cluster barrier after which the count must be 0 (the fiber runtime reports
// a receiver that expected more or fewer bytes than were pushed to it).
static inline void blm_rx_init(threadgroup u64* bar, uint bytes) { *bar = bytes; }
static inline void blm_push4(threadgroup float* p, uint rank, threadgroup u64* bar, float a, float b, float c, float d,
                             const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    lithos_fiber::cluster_push(file, line);
    threadgroup float* q = blm_cluster_map_rw(p, rank);
    q[0] = a;
    q[1] = b;
    q[2] = c;
    q[3] = d;
    *static_cast<threadgroup u64*>(lithos_fiber::cluster_map(bar, rank)) -= 16u;
}
static inline void blm_push1(threadgroup float* p, uint rank, threadgroup u64* bar, float a, const char* file = __builtin_FILE(),
                             int line = __builtin_LINE()) {
    lithos_fiber::cluster_push(file, line);
    *blm_cluster_map_rw(p, rank) = a;
    *static_cast<threadgroup u64*>(lithos_fiber::cluster_map(bar, rank)) -= 4u;
}
static inline void blm_rx_wait(threadgroup u64* bar, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    lithos_fiber::cluster_rx_wait(bar, file, line);
}
static inline uint blm_cluster_size() { return lithos_fiber::cluster_size(); }
#else
#define BLM_CLUSTER 0
#endif
// Programmatic dependent launch is CUDA's (prelude/cuda.h): a Metal command runs after the one
// before it on the encoder, so there is nothing to wait for.
#define GRID_WAIT() ((void)0)
#define GRID_LAUNCH_DEPENDENTS() ((void)0)
// The timeline diagnostic is CUDA's (prelude/cuda.h): nothing here.
#define TL_BEGIN(kid) ((void)0)
#define TL_MARK(i) ((void)0)
