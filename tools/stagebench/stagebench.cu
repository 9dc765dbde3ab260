// stagebench: what bounds the MMA-layout products' staging (docs/performance.md §3.3t, §3.3w).
//
// A product's threadgroup (512 threads, one per multiprocessor) first copies its K part of the
// activations — 8 tokens × P floats, P = K/CL — from the L2 into threadgroup memory, while
// every other threadgroup of the launch reads the same parts at once. This times that copy
// alone, per threadgroup with %globaltimer, in several forms, so that one device call tells
// whether it is bound by the sharing (every threadgroup reading the same lines), by a
// multiprocessor's own load throughput, or by the way the loads are issued:
//   mode 0  the kernel's pattern (kernels/ops/blmx.kern): entry e = 32·ks + lane holds token
//           lane/4's columns 16ks + 2q, +1, +8, +9 (q = lane%4), two 8-byte loads per entry,
//           SX entries per thread in flight, one 16-byte store each; x shared (threadgroup i
//           reads part i % CL of one x)
//   mode 1  the same, each threadgroup reading its own copy of x (nothing shared)
//   mode 2  one 16-byte load per entry (four contiguous columns), x shared
//   mode 3  bulk copies (cp.async.bulk, one per token row, on an mbarrier), x shared
//   mode 4  bulk copies, each threadgroup its own copy
//   mode 5  mode 0 with the kernel's rotation: cluster c (threadgroups c·CL … c·CL + CL − 1)
//           starts at k-step c·KS/clusters, so that the clusters read different lines at once
//   mode 6  the kernel's whole staging since the 16-byte loads: mode 2's loads and float32
//           stores, each token's largest |x| (shuffles, one word per simdgroup, a barrier), then
//           a second pass over threadgroup memory that splits every entry into its two f16
//           pieces (blmx_split), and a barrier
//   mode 7  the kernel's staging since BLMX_RX (its own kernel, stage_regs<RX>, so that
//           -Xptxas -v reports its registers apart): a thread's first RX entries kept in
//           registers through the maxima's barrier and split from there, one store each; the
//           rest as mode 6 (float32 through threadgroup memory, split by a second pass over
//           the thread's own entries); run with RX 12 (the kernel's default) and 17 (all of
//           down's entries)
// Usage: stagebench [P [NTG [CL [REPS]]]] — prints, per mode and SX (RX for mode 7), the median and largest
// threadgroup time of one staging (averaged over REPS stagings in a row, after one untimed) and
// the launch's aggregate rate (NTG · 8 · P · 4 bytes ÷ the median). Build: nvcc -O3
// -arch=sm_90 -o stagebench stagebench.cu (run.sh).
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>
#include <cuda_fp16.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)

static __device__ __forceinline__ uint64_t gtimer() { uint64_t t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t; }

// The split of kernels/ops/blmx.kern (blmx_split) and the prelude's f16 conversions.
static __device__ __forceinline__ unsigned f16x2(float lo, float hi) {
    unsigned d;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
    return d;
}
static __device__ __forceinline__ float f16lo(unsigned h) { return __half2float(__ushort_as_half((unsigned short)(h & 0xFFFFu))); }
static __device__ __forceinline__ float f16hi(unsigned h) { return __half2float(__ushort_as_half((unsigned short)(h >> 16))); }
static __device__ __forceinline__ float rem(float v, float h) { return h == v ? 0.0f : (v - h) * 2048.0f; }
static __device__ __forceinline__ uint4 split(float4 r, float s) {
    const float v0 = r.x * s, v1 = r.y * s, v2 = r.z * s, v3 = r.w * s;
    const unsigned h01 = f16x2(v0, v1), h23 = f16x2(v2, v3);
    return make_uint4(h01, h23, f16x2(rem(v0, f16lo(h01)), rem(v1, f16hi(h01))), f16x2(rem(v2, f16lo(h23)), rem(v3, f16hi(h23))));
}
static __device__ __forceinline__ unsigned amax4(float4 v) {
    return max(max(__float_as_uint(v.x) & 0x7FFFFFFFu, __float_as_uint(v.y) & 0x7FFFFFFFu),
               max(__float_as_uint(v.z) & 0x7FFFFFFFu, __float_as_uint(v.w) & 0x7FFFFFFFu));
}
static __device__ __forceinline__ float sigma(unsigned m) { return __uint_as_float((268u - min(max((m >> 23) & 0xFFu, 16u), 254u)) << 23); }

// token_sigma: the scale of lane g's token from the threads' maxima mx (two shuffles, a word
// per simdgroup in tmax, a barrier), as the kernel's staging.
static __device__ __forceinline__ float token_sigma(unsigned mx, unsigned* tmax, unsigned tid, unsigned g, unsigned q) {
    mx = max(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 1));
    mx = max(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 2));
    if (q == 0u) tmax[(tid >> 5) * 8u + g] = mx;
    __syncthreads();
    unsigned mg = 0u;
    for (unsigned i = 0; i < 16u; ++i) mg = max(mg, tmax[i * 8u + g]);
    return sigma(mg);
}

static __device__ __forceinline__ uint4 bits4(float4 v) {
    return make_uint4(__float_as_uint(v.x), __float_as_uint(v.y), __float_as_uint(v.z), __float_as_uint(v.w));
}
static __device__ __forceinline__ float4 floats4(uint4 u) {
    return make_float4(__uint_as_float(u.x), __uint_as_float(u.y), __uint_as_float(u.z), __uint_as_float(u.w));
}
// stage_mem: the thread's entries j0·512 + tid, (j0 + 1)·512 + tid, … of the part (x shared,
// one 16-byte load each, SX in flight per step) as float32 into sm; returns mx with their
// largest |x| folded in. split_mem: the thread's float32 entries from e on (every 512th) split
// into their f16 pieces in place (modes 6 and 7).
template <int SX>
static __device__ __forceinline__ unsigned stage_mem(uint4* sm, const float* xr, unsigned NE, unsigned tid, unsigned q, unsigned j0, unsigned mx) {
    for (; j0 * 512u + tid < NE; j0 += SX) {
        float4 v[SX];
#pragma unroll
        for (int j = 0; j < SX; ++j) {
            const unsigned e = (j0 + j) * 512u + tid;
            v[j] = make_float4(0.f, 0.f, 0.f, 0.f);
            if (e < NE) v[j] = *(const float4*)(xr + (e >> 5) * 16u + 4u * q);
        }
#pragma unroll
        for (int j = 0; j < SX; ++j) {
            const unsigned e = (j0 + j) * 512u + tid;
            mx = max(mx, amax4(v[j]));
            if (e < NE) sm[e] = bits4(v[j]);
        }
    }
    return mx;
}
static __device__ __forceinline__ void split_mem(uint4* sm, unsigned e, unsigned NE, float s) {
    for (; e < NE; e += 512u) sm[e] = split(floats4(sm[e]), s);
}
// rep_end: the end of one timed staging (a read of the staged entries keeps the copies live);
// report: thread 0's time for the reps since t0.
static __device__ __forceinline__ float rep_end(const uint4* sm, unsigned NE, unsigned tid, int r) {
    __syncthreads();
    const float a = __uint_as_float(sm[(tid * 7u + r) % NE].x);
    __syncthreads();
    return a;
}
static __device__ __forceinline__ void report(unsigned long long t0, unsigned long long* t, float* sink, float acc) {
    const unsigned long long t1 = gtimer();
    if (threadIdx.x == 0) t[blockIdx.x] = t1 - t0;
    if (acc == 12345.0f) sink[0] = acc;
}

static __device__ __forceinline__ void mbar_init(uint64_t* b, unsigned n) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"((unsigned)__cvta_generic_to_shared(b)), "r"(n) : "memory");
}
static __device__ __forceinline__ void mbar_expect(uint64_t* b, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"((unsigned)__cvta_generic_to_shared(b)), "r"(bytes) : "memory");
}
static __device__ __forceinline__ void mbar_wait(uint64_t* b, unsigned parity) {
    unsigned a = (unsigned)__cvta_generic_to_shared(b);
    asm volatile("{\n .reg .pred p;\n W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n @!p bra W;\n}" :: "r"(a), "r"(parity) : "memory");
}
static __device__ __forceinline__ void bulk_copy(void* dst, const void* src, unsigned bytes, uint64_t* b) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"((unsigned)__cvta_generic_to_shared(dst)), "l"(src), "r"(bytes), "r"((unsigned)__cvta_generic_to_shared(b)) : "memory");
}

template <int SX>
__global__ void __launch_bounds__(512, 1) stage(const float* x, unsigned K, unsigned P, unsigned CL, int mode, int reps,
                                                unsigned long long* t, float* sink) {
    extern __shared__ uint4 sm[];
    __shared__ uint64_t bar;
    __shared__ unsigned tmax[16 * 8];
    const unsigned tid = threadIdx.x, lane = tid & 31u, g = lane >> 2, q = lane & 3u;
    const unsigned part = blockIdx.x % CL;
    const bool priv = mode == 1 || mode == 4;
    const float* xb = x + (priv ? (size_t)blockIdx.x * 8u * K : 0) + part * P; // token 0's part
    const unsigned NE = P / 16u * 32u; // entries: 32 per k-step of 16 columns
    const unsigned ncl = max(gridDim.x / CL, 1u);
    const unsigned rot = mode == 5 ? (blockIdx.x / CL % ncl) * (P / 16u) / ncl * 32u : 0u;
    if (tid == 0) {
        mbar_init(&bar, 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    float acc = 0.0f;
    unsigned long long t0 = 0;
    for (int r = 0; r <= reps; ++r) {
        if (r == 1) { __syncthreads(); t0 = gtimer(); }
        if (mode == 3 || mode == 4) {
            if (tid == 0) {
                // The reads of the last staging (generic proxy) before these writes (async proxy).
                asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
                mbar_expect(&bar, 8u * P * 4u);
                for (unsigned tk = 0; tk < 8u; ++tk) bulk_copy((float*)sm + tk * P, xb + (size_t)tk * K, P * 4u, &bar);
            }
            mbar_wait(&bar, r & 1);
        } else if (mode == 6) {
            const float* xr = xb + (size_t)g * K;
            const unsigned mx = stage_mem<SX>(sm, xr, NE, tid, q, 0u, 0u);
            split_mem(sm, tid, NE, token_sigma(mx, tmax, tid, g, q));
        } else {
            const float* xr = xb + (size_t)g * K;
            for (unsigned e0 = tid; e0 < NE; e0 += SX * 512u) {
                float4 v[SX];
#pragma unroll
                for (int j = 0; j < SX; ++j) {
                    const unsigned e = e0 + j * 512u, er = e + rot >= NE ? e + rot - NE : e + rot;
                    v[j] = make_float4(0.f, 0.f, 0.f, 0.f);
                    if (e < NE) {
                        const unsigned col = (er >> 5) * 16u;
                        if (mode == 2) {
                            v[j] = *(const float4*)(xr + col + 4u * q);
                        } else {
                            const float2 a = *(const float2*)(xr + col + 2u * q), b = *(const float2*)(xr + col + 2u * q + 8u);
                            v[j] = make_float4(a.x, a.y, b.x, b.y);
                        }
                    }
                }
#pragma unroll
                for (int j = 0; j < SX; ++j) {
                    const unsigned e = e0 + j * 512u, er = e + rot >= NE ? e + rot - NE : e + rot;
                    if (e < NE) sm[er] = bits4(v[j]);
                }
            }
        }
        acc += rep_end(sm, NE, tid, r);
    }
    report(t0, t, sink, acc);
}

// stage_regs: mode 7, the staging with a thread's first RX entries in registers (8 loads in
// flight per step, as the kernel's BLMX_SX), x shared as in modes 0, 2 and 6.
template <int RX>
__global__ void __launch_bounds__(512, 1) stage_regs(const float* x, unsigned K, unsigned P, unsigned CL, int reps,
                                                     unsigned long long* t, float* sink) {
    extern __shared__ uint4 sm[];
    __shared__ unsigned tmax[16 * 8];
    const unsigned tid = threadIdx.x, lane = tid & 31u, g = lane >> 2, q = lane & 3u;
    const float* xr = x + (blockIdx.x % CL) * P + (size_t)g * K;
    const unsigned NE = P / 16u * 32u;
    float acc = 0.0f;
    unsigned long long t0 = 0;
    for (int r = 0; r <= reps; ++r) {
        if (r == 1) { __syncthreads(); t0 = gtimer(); }
        unsigned mx = 0u;
        float4 rv[RX];
#pragma unroll
        for (int j0 = 0; j0 < RX; j0 += 8) {
#pragma unroll
            for (int j = j0; j < j0 + 8 && j < RX; ++j) {
                const unsigned e = tid + j * 512u;
                rv[j] = make_float4(0.f, 0.f, 0.f, 0.f);
                if (e < NE) rv[j] = *(const float4*)(xr + (e >> 5) * 16u + 4u * q);
            }
#pragma unroll
            for (int j = j0; j < j0 + 8 && j < RX; ++j) mx = max(mx, amax4(rv[j]));
        }
        mx = stage_mem<8>(sm, xr, NE, tid, q, RX, mx);
        const float s = token_sigma(mx, tmax, tid, g, q);
#pragma unroll
        for (int j = 0; j < RX; ++j) {
            const unsigned e = tid + j * 512u;
            if (e < NE) sm[e] = split(rv[j], s);
        }
        split_mem(sm, tid + RX * 512u, NE, s);
        acc += rep_end(sm, NE, tid, r);
    }
    report(t0, t, sink, acc);
}

int main(int argc, char** argv) {
    const unsigned P = argc > 1 ? atoi(argv[1]) : 4352;    // down: 17408 / 4
    const unsigned NTG = argc > 2 ? atoi(argv[2]) : 120;  // 30 clusters of 4
    const unsigned CL = argc > 3 ? atoi(argv[3]) : 4;
    const int reps = argc > 4 ? atoi(argv[4]) : 20;
    const unsigned K = P * CL;
    const size_t smem = 8u * P * 4u;
    if (P % 16 || smem > 226u * 1024u) { fprintf(stderr, "P %u: want a multiple of 16 with 8·P·4 ≤ 226 KiB (1 KiB of static shared memory beside it)\n", P); return 2; }
    float *x, *sink;
    unsigned long long* t;
    CK(cudaMalloc(&x, (size_t)NTG * 8u * K * 4u));
    CK(cudaMalloc(&sink, 4));
    CK(cudaMalloc(&t, NTG * 8));
    std::vector<float> h((size_t)NTG * 8u * K);
    for (size_t i = 0; i < h.size(); ++i) h[i] = (float)((i * 2654435761u) % 1000u) * 0.001f;
    CK(cudaMemcpy(x, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
    // Force one threadgroup per multiprocessor, as the products run.
    const size_t dyn = std::max(smem, (size_t)120 * 1024);
    CK(cudaFuncSetAttribute(stage<8>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dyn));
    CK(cudaFuncSetAttribute(stage<16>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dyn));
    CK(cudaFuncSetAttribute(stage_regs<12>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dyn));
    CK(cudaFuncSetAttribute(stage_regs<17>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dyn));
    int dev; cudaDeviceProp pr; CK(cudaGetDevice(&dev)); CK(cudaGetDeviceProperties(&pr, dev));
    printf("%s, %d SMs; P %u floats per token (%u KB per threadgroup), %u threadgroups, parts %u, %d stagings timed\n",
           pr.name, pr.multiProcessorCount, P, (unsigned)(smem / 1000), NTG, CL, reps);
    const char* names[] = {"kernel pattern, shared", "kernel pattern, private", "16-byte loads, shared", "bulk copies, shared", "bulk copies, private",
                           "kernel pattern, rotated", "whole staging, 2 passes", "whole staging, RX in regs"};
    for (int mode = 0; mode < 8; ++mode) {
        // v: SX (8, 16) for modes 0–6 (0 for the bulk copies), RX (12, 17) for mode 7.
        for (int v : {8, 16, 12, 17}) {
            if (mode == 7 ? v != 12 && v != 17 : v != 8 && v != 16) continue;
            if ((mode == 3 || mode == 4) && v == 16) continue;
            std::vector<unsigned long long> ht(NTG);
            for (int it = 0; it < 3; ++it) { // the last of three launches
                if (mode == 7 && v == 12) stage_regs<12><<<NTG, 512, dyn>>>(x, K, P, CL, reps, t, sink);
                else if (mode == 7) stage_regs<17><<<NTG, 512, dyn>>>(x, K, P, CL, reps, t, sink);
                else if (v == 8) stage<8><<<NTG, 512, dyn>>>(x, K, P, CL, mode, reps, t, sink);
                else stage<16><<<NTG, 512, dyn>>>(x, K, P, CL, mode, reps, t, sink);
                CK(cudaGetLastError());
                CK(cudaDeviceSynchronize());
            }
            CK(cudaMemcpy(ht.data(), t, NTG * 8, cudaMemcpyDeviceToHost));
            std::sort(ht.begin(), ht.end());
            const double med = ht[NTG / 2] / 1e3 / reps, mx = ht[NTG - 1] / 1e3 / reps;
            printf("mode %d %s %2d  %-26s median %6.2f µs  max %6.2f µs  %7.0f GB/s aggregate\n", mode, mode == 7 ? "RX" : "SX",
                   mode == 3 || mode == 4 ? 0 : v, names[mode], med, mx, (double)NTG * smem / (med * 1e3));
        }
    }
    return 0;
}
