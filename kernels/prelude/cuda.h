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

#define UNROLL _Pragma("unroll")             // fully unroll the next constant-trip loop
#define SIMD_BARRIER() __syncwarp()        // simdgroup barrier, threadgroup memory ordered among its lanes
#define THR                                  // thread-private pointer qualifier
#define SIMD_XOR(x, m) __shfl_xor_sync(0xffffffffu, (x), (m))
#define SIMD_BCAST(x, l) __shfl_sync(0xffffffffu, (x), (l))
#define SIMD_SHUFFLE(x, l) __shfl_sync(0xffffffffu, (x), (l)) // l may differ per lane

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

// Tensor-core primitives of the BLM matrix kernels (ops/blm.kern, BLM_MMA path; docs/performance.md §3).
// bf16x2_mul: both bf16 halves of a times those of b, rounded to nearest (subnormal inputs kept:
// PTX bf16 arithmetic has no flush-to-zero mode); fma with −0 as the addend is the product.
#define BLM_MMA 1
FN u32 bf16x2_mul(u32 a, u32 b) {
    u32 d;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(0x80008000u));
    return d;
}
// blm_mma: c[0..3] += A·B for one m16n8k16 tile, bf16 inputs, f32 accumulators, in the PTX ISA's
// fragment layout (groupID = lane/4, tig = lane%4): a0 = A[gid][2tig, 2tig+1], a1 = A[gid+8][…],
// a2 = A[gid][2tig+8, 2tig+9], a3 = A[gid+8][…]; b0 = B[2tig, 2tig+1][gid], b1 = B[2tig+8, 2tig+9][gid];
// c = D[gid][2tig, 2tig+1], D[gid+8][2tig, 2tig+1]. The lower-indexed element is the low half.
FN void blm_mma(THR float* c, u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1, u32 lane) {
    (void)lane;
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
// Primitives of the MMA-layout matrix kernels (ops/blmx.kern: f16 tensor-core MMAs over weights
// decoded into f16 exactly; docs/performance.md §3.3j).
// blmx_e4m3x2: the two E4M3 bytes in the low 16 bits of s as f16x2 (byte 0 in the low half),
// exact: one cvt on sm_90 and newer; before, the bytes' seven low bits placed into the f16
// fields (worth value·2⁻⁸, E4M3 subnormals as f16 subnormals) times 256 (exact).
FN u32 blmx_e4m3x2(u32 s) {
    u32 d;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm("{\n\t.reg .b16 t;\n\tcvt.u16.u32 t, %1;\n\tcvt.rn.f16x2.e4m3x2 %0, t;\n\t}" : "=r"(d) : "r"(s));
#else
    const u32 t = (s & 0xFFu) | ((s & 0xFF00u) << 8);
    const u32 b = ((t & 0x007F007Fu) << 7) | ((t & 0x00800080u) << 8);
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(b), "r"(0x5C005C00u));
#endif
    return d;
}
// blmx_hmul_lo / blmx_hmul_hi: both f16 halves of a times the low (high) half of s, rounded to
// nearest, subnormals kept (ptxas folds the half into the operand: HMUL2 R, R, R.H0_H0).
FN u32 blmx_hmul_lo(u32 a, u32 s) {
    u32 d;
    asm("{\n\t.reg .b16 l, h;\n\t.reg .b32 t;\n\tmov.b32 {l, h}, %2;\n\tmov.b32 t, {l, l};\n\tmul.rn.f16x2 %0, %1, t;\n\t}" : "=r"(d) : "r"(a), "r"(s));
    return d;
}
FN u32 blmx_hmul_hi(u32 a, u32 s) {
    u32 d;
    asm("{\n\t.reg .b16 l, h;\n\t.reg .b32 t;\n\tmov.b32 {l, h}, %2;\n\tmov.b32 t, {h, h};\n\tmul.rn.f16x2 %0, %1, t;\n\t}" : "=r"(d) : "r"(a), "r"(s));
    return d;
}
// blmx_f16x2: lo and hi rounded to nearest f16 (subnormals kept, overflow to ±inf), lo in the low half.
FN u32 blmx_f16x2(float lo, float hi) {
    u32 d;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
    return d;
}
// blmx_f16lo / blmx_f16hi: the low (high) f16 half of h as float32 (exact).
FN float blmx_f16lo(u32 h) {
    float f;
    asm("{\n\t.reg .b16 l, u;\n\tmov.b32 {l, u}, %1;\n\tcvt.f32.f16 %0, l;\n\t}" : "=f"(f) : "r"(h));
    return f;
}
FN float blmx_f16hi(u32 h) {
    float f;
    asm("{\n\t.reg .b16 l, u;\n\tmov.b32 {l, u}, %1;\n\tcvt.f32.f16 %0, u;\n\t}" : "=f"(f) : "r"(h));
    return f;
}
// blmx_mma: c[0..3] += A·B for one m16n8k16 tile, f16 inputs, f32 accumulators (the fragment
// layout of blm_mma).
FN void blmx_mma(THR float* c, u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1, u32 lane) {
    (void)lane;
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
// blmx_ld16 / blmx_ld8: streaming loads of weights read once per product (read-only, not kept
// in L1).
FN uint4 blmx_ld16(DEV const u8* p) {
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}
FN uint2 blmx_ld8(DEV const u8* p) {
    uint2 v;
    asm("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
    return v;
}
// blmx_ld16_early / blmx_ld8_early: the same loads, volatile, so that the compiler keeps them
// where they are written — before the entry's GRID_WAIT (ops/blmx.kern's first group).
FN uint4 blmx_ld16_early(DEV const u8* p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}
FN uint2 blmx_ld8_early(DEV const u8* p) {
    uint2 v;
    asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
    return v;
}
// Asynchronous global → threadgroup copies (sm_80 cp.async) for the BLM kernels' weight ring:
// blm_cp16 (16 bytes, L2 only: .cg) and blm_cp4 (4 bytes, .ca) queue a copy, blm_cp_commit closes
// the thread's current group, blm_cp_wait<N> waits until at most N of its groups are pending.
// A thread's own copies are visible to it after the wait; nothing orders them for other threads.
FN unsigned blm_smem_addr(const void* p) {
    unsigned long long a;
    asm("cvta.to.shared.u64 %0, %1;" : "=l"(a) : "l"(p));
    return (unsigned)a;
}
FN void blm_cp16(void* dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(blm_smem_addr(dst)), "l"(src) : "memory");
}
FN void blm_cp4(void* dst, const void* src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(blm_smem_addr(dst)), "l"(src) : "memory");
}
FN void blm_cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
FN void blm_cp_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }
// TG_DYN_ARRAY: threadgroup memory sized at launch (the kernel's Shared bytes: dynamic shared
// memory, which may take the block past the 48 KiB of static shared memory); n is its size,
// which the Metal prelude allocates statically.
#define TG_DYN_ARRAY(T, name, n) extern __shared__ __align__(16) T name[]
// ALIGNED16: the pointer is 16-byte aligned (the kernels' vector loads of activations and
// weights: the BLM and MMA-layout products, ops/conv.kern's in_proj_ab).
#define ALIGNED16(ptr) ((((unsigned long long)(ptr)) & 15ull) == 0ull)
// Thread-block clusters (sm_90 and newer: the PTX below does not exist before, and the module
// is compiled for the device's own architecture) for the BLM kernels' K split across
// threadgroups (BLMParams.Clusters; docs/performance.md §3.3e): blm_cluster_sync is a barrier of
// every thread of the cluster that orders threadgroup memory (release/acquire at cluster scope; a
// launch without a cluster is a cluster of one), blm_cluster_map the address of the same
// threadgroup variable in the cluster's threadgroup `rank` (distributed shared memory, read with
// plain loads), blm_cluster_size the threadgroups of the launch's cluster (%cluster_nctarank).
// blm_cluster_arrive and blm_cluster_wait are the two halves of a cluster barrier whose arrival
// orders nothing (PTX barrier.cluster.arrive.relaxed) and whose wait acquires (barrier.cluster.wait,
// .acquire by default): a threadgroup that arrives early and waits just before its first push
// into another rank's threadgroup memory knows that rank has started (the CUDA programming
// guide's rule for distributed shared memory) and, through the wait's acquire paired with the
// rank's fence.mbarrier_init.release.cluster (blm_rx_init), sees its receive barrier
// initialised, without waiting for it anywhere else.
// Without them (BLM_CLUSTER 0) the kernels take Clusters as 1.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define BLM_CLUSTER 1
FN void blm_cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
FN const float* blm_cluster_map(const float* p, u32 rank) {
    unsigned long long r;
    asm("mapa.u64 %0, %1, %2;" : "=l"(r) : "l"(p), "r"(rank));
    return (const float*)r;
}
// Pushes that the receiving threadgroup waits for on its own mbarrier (PTX st.async with
// complete_tx, sm_90; no fence and no cluster barrier after them): blm_rx_init, by one thread
// before the cluster's blm_cluster_arrive, makes bar expect `bytes` (the phase completes when
// they have all arrived); blm_push4 / blm_push1 store 16 / 4 bytes at the address of the
// threadgroup variable element p in the cluster's threadgroup `rank`, counted on that rank's
// bar (p 16- / 4-byte aligned; after the cluster's blm_cluster_wait, which tells the sender that
// rank has started and initialised bar); blm_rx_wait: the thread waits until its threadgroup
// has received every byte bar expects, which are then visible to it (phase 0: once per launch).
// A sender may leave before its pushes land: they carry registers, and only the receiver's
// memory, which it keeps until its barrier completes, is involved (PTX names no rule against
// it; not something a test here can show).
FN unsigned blm_cluster_addr(const void* p, u32 rank) {
    unsigned r;
    asm("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(blm_smem_addr(p)), "r"(rank));
    return r;
}
FN void blm_rx_init(u64* bar, u32 bytes) {
    const unsigned a = blm_smem_addr(bar);
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(a) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(a), "r"(bytes) : "memory");
}
FN void blm_push4(float* p, u32 rank, u64* bar, float a, float b, float c, float d) {
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];" ::"r"(blm_cluster_addr(p, rank)),
                 "r"(AS_UINT(a)), "r"(AS_UINT(b)), "r"(AS_UINT(c)), "r"(AS_UINT(d)), "r"(blm_cluster_addr(bar, rank))
                 : "memory");
}
FN void blm_push1(float* p, u32 rank, u64* bar, float a) {
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(blm_cluster_addr(p, rank)), "r"(AS_UINT(a)),
                 "r"(blm_cluster_addr(bar, rank))
                 : "memory");
}
FN void blm_rx_wait(u64* bar) {
    asm volatile(
        "{\n\t.reg .pred P;\n\tLITHOS_RX_WAIT:\n\tmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 P, [%0], 0;\n\t@!P bra "
        "LITHOS_RX_WAIT;\n\t}" ::"r"(blm_smem_addr(bar))
        : "memory");
}
FN void blm_cluster_arrive() { asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory"); }
FN void blm_cluster_wait() { asm volatile("barrier.cluster.wait.aligned;" ::: "memory"); }
FN u32 blm_cluster_size() {
    u32 n;
    asm("mov.u32 %0, %%cluster_nctarank;" : "=r"(n));
    return n;
}
#else
#define BLM_CLUSTER 0
#endif
// Programmatic dependent launch (sm_90 and newer; docs/performance.md §3.3k): a kernel the
// host launches with CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION may start while the
// kernel before it on the stream still runs. GRID_WAIT waits until that kernel has finished
// and its memory writes are visible (griddepcontrol.wait; immediate when the launch had no such
// predecessor), so every kernel calls it before it reads or writes anything but its parameter
// record and its weights (kernels.Source emits it at the entry; LITHOS_ENTRY places it in a body
// that loads weights first). GRID_LAUNCH_DEPENDENTS is this threadgroup's signal that the next
// kernel may be launched: it is, once every threadgroup of this grid has signalled or exited,
// and its threadgroups then wait in their own GRID_WAIT; the entry signals right after
// GRID_WAIT, so at most two kernels are in flight.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define GRID_WAIT() asm volatile("griddepcontrol.wait;" ::: "memory")
#define GRID_LAUNCH_DEPENDENTS() asm volatile("griddepcontrol.launch_dependents;" ::: "memory")
#else
#define GRID_WAIT() ((void)0)
#define GRID_LAUNCH_DEPENDENTS() ((void)0)
#endif
// The timeline, a diagnostic (docs/performance.md §3.3t; compiled in only with -DLITHOS_TIMELINE,
// which the CUDA backend adds when $LITHOS_CUDA_TIMELINE names a file, runtime/backend/cuda
// timeline.go): thread 0 of every threadgroup reads %globaltimer (ns) at the kernel's start
// (TL_BEGIN, the generator's first statement of every entry), after the entry's wait
// (TL_MARK(1)), at up to two marks of the body (TL_MARK(2), TL_MARK(3): the MMA-layout
// products' end of staging and end of main loop) and at its exit (the record's destructor, so
// every return counts), and stores one record of 8 words into the ring lithos_tl (slot from a
// counter taken at the start, modulo LITHOS_TL_RECS; each time stored as it is read, so the
// marks hold only the record's pointer in registers): the kernel (FNV-1a 32 of its name) << 32
// | the threadgroup (x | y << 20: x below 2²⁰, y below 2¹², z not recorded), the five times (0
// where a mark was not reached), the multiprocessor, the address of the launch's parameter
// record (which tells one launch of a graph from another). Without LITHOS_TIMELINE the macros
// are empty.
#if defined(LITHOS_TIMELINE)
#define LITHOS_TL_RECS (1u << 18)
__device__ u64 lithos_tl[LITHOS_TL_RECS * 8u];
__device__ u32 lithos_tl_next;
FN u64 tl_now() {
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
struct TLRec {
    u64* o;  // this threadgroup's record (thread 0), else null
    __device__ TLRec(u32 kid, const void* rec) : o(nullptr) {
        if (threadIdx.x != 0u) return;
        const u64 t = tl_now();
        o = lithos_tl + (atomicAdd(&lithos_tl_next, 1u) & (LITHOS_TL_RECS - 1u)) * 8u;
        o[0] = ((u64)kid << 32) | (u64)(blockIdx.x | (blockIdx.y << 20));
        o[1] = t;
        o[2] = 0ull;
        o[3] = 0ull;
        o[4] = 0ull;
        o[7] = (u64)rec;
    }
    __device__ void mark(u32 i) {
        if (o != nullptr) o[i + 1u] = tl_now();
    }
    __device__ ~TLRec() {
        if (o == nullptr) return;
        u32 sm;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
        o[5] = tl_now();
        o[6] = sm;
    }
};
#define TL_BEGIN(kid) TLRec tl_rec(kid, prm)
#define TL_MARK(i) tl_rec.mark(i)
#else
#define TL_BEGIN(kid) ((void)0)
#define TL_MARK(i) ((void)0)
#endif
