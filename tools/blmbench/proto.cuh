// proto.cuh: a prototype BLM kernel for CUDA (docs/performance.md §3.3g), timed by harness.cu
// beside the generated kernel on the same bytes when PROTO is set. It tests the plan of §3.3f
// without the threadgroup-wide staging barriers that the generated kernel meets once per chunk:
//
//  - K is split into P parts by stripe (lane) ranges: part p is stripes [p·S, (p+1)·S), S = 32/P,
//    so a part's columns are S whole stripes and its block scales lie in its own units.
//  - A threadgroup works on one part only. Once, before any weight is read, it loads that
//    part's activations (all rows) and splits them into the three bf16 pieces in MMA fragment
//    order in shared memory (one barrier); after that no warp waits for another.
//  - Each warp takes tasks of NB blocks × its part (static stride over the part's tasks) and
//    streams the task's unit words straight into registers, one quad-step ahead (NB·2 16-byte
//    loads and NB·2 block-scale loads per lane in flight), with the generated kernel's
//    blm_qstep doing the decode and MMAs (one B fragment read serves NB blocks).
//  - The P parts of a task meet in global memory: each warp writes its float32 partial sums to
//    a scratch buffer, and the warp that finishes a task's last part (a counter per task, reset
//    by that warp) adds the P parts in part order and applies the row scale and epilogue. So
//    each output's summation order depends on the shape and P only, as in the generated kernel.
//
// Only the layouts the 27B uses: 32 lanes per row (Fold 1), NVFP4 with 16-column groups and
// stripes of whole groups, FP8, BF16.
namespace proto {

// PROTO_FENCE 0 (nvcc -DPROTO_FENCE=0, a diagnostic with possibly wrong sums) drops blm_ws2's
// fences around the scratch buffer, to time what they cost.
#ifndef PROTO_FENCE
#define PROTO_FENCE 1
#endif

typedef unsigned u32;

struct Args {
    const unsigned char* w;
    const float* scales;
    const float* x;
    float* y;
    float* scratch;   // [P, blocks·16, 8] partial sums
    u32* counters;    // [ntasks], zero between launches
    u32 rows, n, k, uw, stripe, payload, blocks, ldx, ldy, epi, parts;
    u32 smax;  // blm_ws2 with SK: scratch slots per (part, block) ([P, blocks, smax, 128])
};

// Codes per 16-byte word and MMAs per word (m16n8k16, four K slots per lane).
template <int FM> struct F;
template <> struct F<1> { static constexpr u32 epw = 32, mpw = 8; };
template <> struct F<2> { static constexpr u32 epw = 16, mpw = 4; };
template <> struct F<3> { static constexpr u32 epw = 8, mpw = 2; };

// slot returns, for code e of a word, its MMA (mi), B register (b: 0 = K slots 2q, 2q+1; 1 =
// 2q+8, 2q+9) and half (0 = low): the same mapping as lk::blm_qstep's decode.
template <int FM>
__device__ __forceinline__ void slot(u32 e, u32& mi, u32& b, u32& half) {
    if (FM == 1) {
        const u32 kk = e >> 3, c = e & 7u;
        mi = 2u * kk + ((c & 3u) >> 1); b = c & 1u; half = c >> 2;
    } else if (FM == 2) {
        const u32 c = e & 3u;
        mi = e >> 2; b = c & 1u; half = c >> 1;
    } else {
        const u32 c = e & 3u;
        mi = e >> 2; b = c >> 1; half = c & 1u;
    }
}

__device__ __forceinline__ uint4 ldg4(const unsigned char* p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}
__device__ __forceinline__ u32 ldg2(const unsigned char* p) {
    unsigned short v;
    asm volatile("ld.global.nc.u16 %0, [%1];" : "=h"(v) : "l"(p));
    return v;
}

// stage loads a threadgroup's part of the activations (stripes s0 … s0 + S − 1, all rows) and
// stores their three bf16 pieces in MMA fragment order in xs: token t, stripe s0 + sl, column c
// of the stripe at quad-step (j = c / EPW, u = sl / 4), lane 4t + sl % 4; tokens past the rows
// and columns past the stripe or K are zeros. Every thread of the threadgroup calls it (two
// barriers).
template <int FM>
__device__ __forceinline__ void stage(const Args& a, uint4* xs, u32 S, u32 s0, u32 UWp) {
    constexpr u32 EPW = F<FM>::epw, MPW = F<FM>::mpw, QV = 6u * MPW / 4u;
    const u32 SQ = S / 4u, T = SQ * UWp;
    u32* xw = (u32*)xs;
    const u32 nw = T * QV * 32u * 4u;
    for (u32 i = threadIdx.x; i < nw; i += blockDim.x) xw[i] = 0u;
    __syncthreads();
    unsigned short* xh = (unsigned short*)xs;
    const u32 cols = UWp * EPW, ne = a.rows * S * cols;
    for (u32 i = threadIdx.x; i < ne; i += blockDim.x) {
        const u32 c = i % cols, sl = (i / cols) % S, t = i / (cols * S);
        const u32 col = (s0 + sl) * a.stripe + c;
        const float v = (c < a.stripe && col < a.k) ? a.x[t * a.ldx + col] : 0.0f;
        const u32 uv = __float_as_uint(v);
        const float r = v - __uint_as_float(uv & 0xFFFF0000u);
        const u32 ur = __float_as_uint(r);
        const float lo = r - __uint_as_float(ur & 0xFFFF0000u);
        const u32 pc[3] = {uv >> 16, ur >> 16, __float_as_uint(lo) >> 16};
        const u32 j = c / EPW, e = c % EPW;
        u32 mi, b, half;
        slot<FM>(e, mi, b, half);
        const u32 tix = j * SQ + sl / 4u, ln = 4u * t + (sl & 3u);
        for (u32 k = 0; k < 3u; ++k) {
            const u32 wi = mi * 6u + 2u * k + b;
            xh[((((tix * QV + wi / 4u) * 32u + ln) * 4u + wi % 4u) << 1) + half] = (unsigned short)pc[k];
        }
    }
    __syncthreads();
}

// finish is the last arrival's work for blocks b0 … b0 + nb − 1: it adds the partial sums of
// the scratch buffer ([P, blocks, smax, 128]: parts outer, slots 0 … nseg − 1 inner), applies
// the row scale (× 2⁸ for NVFP4's decode) and the epilogue (store, add, SwiGLU). One warp.
template <int FM>
__device__ __forceinline__ void finish(const Args& a, u32 b0, u32 nb, u32 P, u32 nseg, u32 smax, u32 lane) {
    const float af = FM == 1 ? 256.0f : 1.0f;
    const u32 per = a.epi == 2u ? 8u : 16u;
    for (u32 idx = lane; idx < nb * per * a.rows; idx += 32u) {
        const u32 i = idx % per, t = (idx / per) % a.rows, lb = idx / (per * a.rows);
        const u32 blk = b0 + lb;
        if (blk >= a.blocks) continue;
        const u32 n = blk * 16u + i;
        float v = 0.0f, up = 0.0f;
        for (u32 pp = 0; pp < P; ++pp)
            for (u32 sg = 0; sg < nseg; ++sg) {
                const float* sp = a.scratch + (((size_t)pp * a.blocks + blk) * smax + sg) * 128u;
                v += __ldcg(sp + i * 8u + t);
                if (a.epi == 2u) up += __ldcg(sp + (i + 8u) * 8u + t);
            }
        if (a.epi == 2u) {
            if (n + 8u < a.n) {
                const float gate = v * af * a.scales[n];
                a.y[t * a.ldy + blk * 8u + i] = lk::silu(gate) * (up * af * a.scales[n + 8u]);
            }
        } else if (n < a.n) {
            const float r = v * af * a.scales[n];
            if (a.epi == 1u) a.y[t * a.ldy + n] += r;
            else a.y[t * a.ldy + n] = r;
        }
    }
}

template <int FM, int NB>
__global__ void __launch_bounds__(256) blm_ws(Args a) {
    extern __shared__ __align__(16) uint4 xs[];
    constexpr u32 QV = 6u * F<FM>::mpw / 4u;  // uint4 per lane and quad-step
    const u32 lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    const u32 P = a.parts, S = 32u / P, SQ = S / 4u;
    const u32 p = blockIdx.x % P, ci = blockIdx.x / P, cpp = gridDim.x / P;
    const u32 s0 = p * S;
    const u32 UWp = (a.payload + 15u) >> 4;
    const u32 T = SQ * UWp;  // quad-steps per task
    stage<FM>(a, xs, S, s0, UWp);
    const u32 g = lane >> 2, q = lane & 3u;
    const u32 ntasks = (a.blocks + NB - 1u) / NB;
    const u32 BB = 16u * a.uw * 512u;
    const u32 rowB = 8u * a.uw * 512u;
    const bool aligned = true;
    (void)aligned;
    lk::blm_gen gn;
    gn.uA0 = a.w; gn.uB0 = a.w; gn.uA1 = a.w; gn.uB1 = a.w;
    gn.cs = 0u; gn.payload = a.payload; gn.group = 16u; gn.g0 = 0u; gn.ubytes = a.uw * 16u;
    for (u32 task = ci * 8u + warp; task < ntasks; task += cpp * 8u) {
        const u32 b0 = task * NB;
        const unsigned char* base[NB];
        bool ok[NB];
#pragma unroll
        for (u32 b = 0; b < NB; ++b) {
            ok[b] = b0 + b < a.blocks;
            base[b] = a.w + (size_t)(ok[b] ? b0 + b : 0u) * BB + g * a.uw * 512u;
        }
        float acc[NB][4];
#pragma unroll
        for (u32 b = 0; b < NB; ++b) acc[b][0] = acc[b][1] = acc[b][2] = acc[b][3] = 0.0f;
        uint4 cA[NB], cB[NB], nA[NB], nB[NB];
        u32 cS[NB], nS[NB];
#define PROTO_LOAD(tt, A, B, Sc)                                                           \
    {                                                                                      \
        const u32 j_ = (tt) / SQ, u_ = (tt) % SQ, s_ = s0 + 4u * u_ + q;                 \
        const u32 off_ = j_ * 512u + s_ * 16u, sbi_ = a.payload + 2u * j_;               \
        const u32 so_ = ((sbi_ >> 4) * 32u + s_) * 16u + (sbi_ & 15u);                    \
        _Pragma("unroll") for (u32 b = 0; b < NB; ++b) {                                   \
            if (ok[b]) {                                                                   \
                A[b] = ldg4(base[b] + off_);                                               \
                B[b] = ldg4(base[b] + rowB + off_);                                        \
                Sc[b] = FM == 1 ? (ldg2(base[b] + so_) | (ldg2(base[b] + rowB + so_) << 16)) : 0u; \
            } else {                                                                       \
                A[b] = make_uint4(0u, 0u, 0u, 0u); B[b] = A[b]; Sc[b] = 0u;              \
            }                                                                              \
        }                                                                                  \
    }
        PROTO_LOAD(0u, cA, cB, cS)
        for (u32 t = 0; t < T; ++t) {
            if (t + 1u < T) PROTO_LOAD(t + 1u, nA, nB, nS)
            const uint4* xr = xs + t * QV * 32u + lane;
#pragma unroll
            for (u32 b = 0; b + 1u < NB; b += 2u)
                lk::blm_qstep<FM, 2u, true>(acc[b], acc[b + 1], cA[b], cB[b], cA[b + 1], cB[b + 1], cS[b], cS[b + 1], xr, gn, lane);
            if (NB & 1u) lk::blm_qstep<FM, 1u, true>(acc[NB - 1], acc[NB - 1], cA[NB - 1], cB[NB - 1], cA[NB - 1], cB[NB - 1], cS[NB - 1], cS[NB - 1], xr, gn, lane);
#pragma unroll
            for (u32 b = 0; b < NB; ++b) { cA[b] = nA[b]; cB[b] = nB[b]; cS[b] = nS[b]; }
        }
        // Partial sums: lane (g, q) holds rows g, g+8 × tokens 2q, 2q+1 of each block.
#pragma unroll
        for (u32 b = 0; b < NB; ++b) {
            if (!ok[b]) continue;
            float* sp = a.scratch + ((size_t)p * a.blocks + b0 + b) * 128u;
            sp[g * 8u + 2u * q] = acc[b][0]; sp[g * 8u + 2u * q + 1u] = acc[b][1];
            sp[(g + 8u) * 8u + 2u * q] = acc[b][2]; sp[(g + 8u) * 8u + 2u * q + 1u] = acc[b][3];
        }
        __threadfence();
        __syncwarp();
        u32 old = 0u;
        if (lane == 0u) old = atomicAdd(a.counters + task, 1u);
        old = __shfl_sync(0xFFFFFFFFu, old, 0);
        if (old != P - 1u) continue;
        __threadfence();
        if (lane == 0u) a.counters[task] = 0u;
        finish<FM>(a, b0, NB, P, 1u, 1u, lane);
    }
#undef PROTO_LOAD
}

inline size_t Smem(int fm, u32 parts, u32 payload);

// blm_ws2: blm_ws with the weights streamed in row order through a shared-memory ring per
// warp (§3.3g): a step is one unit word j of the task's NB blocks over the part's S stripes
// (16 rows × S·16 contiguous bytes per block, copied with 16-byte cp.async, lanes along the
// runs), D − 1 steps in flight while the warp computes one; the fragments are then read from
// shared memory (16-byte chunks of odd rows swizzled by 4 chunks when S ≥ 8, so that the
// reads of a quad-step are conflict-free). Block scales as blm_ws (2-byte loads, one step
// ahead). WARPS warps per threadgroup share the part's split activations.
//
// SK (NB 1 only): a "stream-K" split instead of whole-block tasks. A part's units (block,
// word) in block-major order are cut into one contiguous, equal share per warp of the part
// (the grid must give every warp at least one unit); a warp emits a partial sum for every block
// its share touches, into slot (its index − the index of the first warp touching the block),
// and the last of the P·(warps touching it) arrivals adds the slots, parts outer and slots
// inner: an order fixed by the shape and the grid.
template <int FM, int NB, int D, int WARPS, int PP, bool SK = false>
__global__ void __launch_bounds__(WARPS * 32) blm_ws2(Args a) {
    static_assert(!SK || NB == 1, "the stream-K split takes one block at a time");
    extern __shared__ __align__(16) uint4 xs[];
    constexpr u32 QV = 6u * F<FM>::mpw / 4u;  // uint4 per lane and quad-step
    const u32 lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    // The part count is compile-time (PP; a launch with another a.parts does nothing), so that
    // the copy loop's row and chunk of a lane are shifts and masks.
    constexpr u32 P = PP, S = 32u / P, SQ = S / 4u;
    if (a.parts != P) return;
    const u32 p = blockIdx.x % P, ci = blockIdx.x / P, cpp = gridDim.x / P;
    const u32 s0 = p * S;
    const u32 UWp = (a.payload + 15u) >> 4;
    const u32 T = SQ * UWp;
    const u32 xsN = T * QV * 32u;  // uint4 of activations
    stage<FM>(a, xs, S, s0, UWp);
    // This warp's ring: D slots of NB blocks × 16 rows × S chunks of 16 bytes.
    const u32 slotU4 = NB * 16u * S;
    uint4* ring = xs + xsN + warp * D * slotU4;
    const u32 g = lane >> 2, q = lane & 3u;
    const u32 ntasks = (a.blocks + NB - 1u) / NB;
    const u32 BB = 16u * a.uw * 512u, rowB = 8u * a.uw * 512u;
    const u32 tstride = cpp * WARPS, tfirst = ci * WARPS + warp;
    const u32 mytasks = tfirst < ntasks ? (ntasks - tfirst + tstride - 1u) / tstride : 0u;
    // SK: this warp's share [us, us + total) of the part's U units; Wp warps per part.
    const u32 U = a.blocks * UWp, Wp = cpp * WARPS, wg = ci * WARPS + warp;
    const u32 us = SK ? (u32)((unsigned long long)wg * U / Wp) : 0u;
    const u32 total = SK ? (u32)((unsigned long long)(wg + 1u) * U / Wp) - us : mytasks * UWp;
    const u32 jb = SK ? us % UWp : 0u, bb = SK ? us / UWp : 0u;  // first word and block
    // blockOf(k): the first block of the warp's k-th task (SK: its k-th block).
    auto blockOf = [&](u32 k) -> u32 { return SK ? bb + k : (tfirst + k * tstride) * NB; };
    // wfirst(x): the warp of the part whose share holds unit x (the shares are non-empty).
    auto wfirst = [&](u32 x) -> u32 { return (u32)(((unsigned long long)(x + 1u) * Wp + U - 1u) / U) - 1u; };
    const u32 sw = S >= 8u ? 4u : 0u;  // chunk swizzle of odd rows
    lk::blm_gen gn;
    gn.uA0 = a.w; gn.uB0 = a.w; gn.uA1 = a.w; gn.uB1 = a.w;
    gn.cs = 0u; gn.payload = a.payload; gn.group = 16u; gn.g0 = 0u; gn.ubytes = a.uw * 16u;
    // Three cursors over this warp's steps (task k of the warp, word j): the copies issued
    // (D − 1 steps ahead), the block scales loaded (one step ahead) and the step computed.
    // They only move forward, one step at a time, so no division is needed.
    u32 ik = 0u, ij = jb, sk = 0u, sj = jb, ck = 0u, cj = jb, in = 0u;
    auto issue = [&]() {
        if (in < total) {
            uint4* dst = ring + (in % D) * slotU4;
#pragma unroll
            for (u32 b = 0; b < NB; ++b) {
                const u32 blk = min(blockOf(ik) + b, a.blocks - 1u);
                const unsigned char* src = a.w + (size_t)blk * BB + ij * 512u + s0 * 16u;
#pragma unroll
                for (u32 i = 0; i < S / 2u; ++i) {
                    const u32 e = i * 32u + lane, row = e / S, c = e % S;
                    lk::blm_cp16(dst + (b * 16u + row) * S + (c ^ ((row & 1u) ? sw : 0u)), src + row * a.uw * 512u + c * 16u);
                }
            }
            if (++ij == UWp) { ij = 0u; ++ik; }
            ++in;
        }
        lk::blm_cp_commit();
    };
    for (u32 n = 0; n + 1u < (u32)D; ++n) issue();
    float acc[NB][4];
#pragma unroll
    for (u32 b = 0; b < NB; ++b) acc[b][0] = acc[b][1] = acc[b][2] = acc[b][3] = 0.0f;
    u32 cS[NB][4], nS[NB][4];  // block-scale pairs (rows g | g+8) per quad-step u < 4 of a step
#pragma unroll
    for (u32 b = 0; b < NB; ++b)
#pragma unroll
        for (u32 u = 0; u < 4u; ++u) cS[b][u] = nS[b][u] = 0u;
    u32 sn = 0u;
    auto scales = [&](u32 (&Sc)[NB][4]) {
        if (FM != 1 || sn >= total) return;
        const u32 sbi = a.payload + 2u * sj;
#pragma unroll
        for (u32 b = 0; b < NB; ++b) {
            const unsigned char* base = a.w + (size_t)min(blockOf(sk) + b, a.blocks - 1u) * BB + g * a.uw * 512u;
#pragma unroll
            for (u32 u = 0; u < SQ; ++u) {
                const u32 so = ((sbi >> 4) * 32u + s0 + 4u * u + q) * 16u + (sbi & 15u);
                Sc[b][u] = ldg2(base + so) | (ldg2(base + rowB + so) << 16);
            }
        }
        if (++sj == UWp) { sj = 0u; ++sk; }
        ++sn;
    };
    scales(cS);
    for (u32 n = 0; n < total; ++n) {
        issue();
        scales(nS);
        lk::blm_cp_wait<D - 1>();
        __syncwarp();
        const u32 j = cj, task = tfirst + ck * tstride, b0 = blockOf(ck);
        if (++cj == UWp) { cj = 0u; ++ck; }
        const uint4* sl = ring + (n % D) * slotU4;
#pragma unroll
        for (u32 u = 0; u < 4u; ++u) {
            if (u >= SQ) break;
            uint4 A[NB], B[NB];
#pragma unroll
            for (u32 b = 0; b < NB; ++b) {
                const u32 c = 4u * u + q;
                A[b] = sl[(b * 16u + g) * S + (c ^ ((g & 1u) ? sw : 0u))];
                B[b] = sl[(b * 16u + g + 8u) * S + (c ^ ((g & 1u) ? sw : 0u))];
            }
            const uint4* xr = xs + (j * SQ + u) * QV * 32u + lane;
#pragma unroll
            for (u32 b = 0; b + 1u < NB; b += 2u)
                lk::blm_qstep<FM, 2u, true>(acc[b], acc[b + 1], A[b], B[b], A[b + 1], B[b + 1], cS[b][u], cS[b + 1][u], xr, gn, lane);
            if (NB & 1u) lk::blm_qstep<FM, 1u, true>(acc[NB - 1], acc[NB - 1], A[NB - 1], B[NB - 1], A[NB - 1], B[NB - 1], cS[NB - 1][u], cS[NB - 1][u], xr, gn, lane);
        }
        __syncwarp();
#pragma unroll
        for (u32 b = 0; b < NB; ++b)
#pragma unroll
            for (u32 u = 0; u < 4u; ++u) cS[b][u] = nS[b][u];
        if (cj != 0u && !(SK && n + 1u == total)) continue;
        // The task's last word (SK: the block's, or the share's): partial sums out, the last
        // arrival adds them.
        const u32 w0 = SK ? wfirst(b0 * UWp) : 0u;
        const u32 nseg = SK ? wfirst(b0 * UWp + UWp - 1u) - w0 + 1u : 1u;
        const u32 slot0 = SK ? wg - w0 : 0u, smax = SK ? a.smax : 1u;
#pragma unroll
        for (u32 b = 0; b < NB; ++b) {
            if (b0 + b < a.blocks) {
                float* sp = a.scratch + (((size_t)p * a.blocks + b0 + b) * smax + slot0) * 128u;
                sp[g * 8u + 2u * q] = acc[b][0]; sp[g * 8u + 2u * q + 1u] = acc[b][1];
                sp[(g + 8u) * 8u + 2u * q] = acc[b][2]; sp[(g + 8u) * 8u + 2u * q + 1u] = acc[b][3];
            }
            acc[b][0] = acc[b][1] = acc[b][2] = acc[b][3] = 0.0f;
        }
        if (PROTO_FENCE) __threadfence();
        __syncwarp();
        u32 old = 0u;
        const u32 ctr = SK ? b0 : task;
        if (lane == 0u) old = atomicAdd(a.counters + ctr, 1u);
        old = __shfl_sync(0xFFFFFFFFu, old, 0);
        if (old != P * nseg - 1u) continue;
        if (PROTO_FENCE) __threadfence();
        if (lane == 0u) a.counters[ctr] = 0u;
        finish<FM>(a, b0, NB, P, nseg, smax, lane);
    }
    lk::blm_cp_wait<0>();
}

// Smem2 returns blm_ws2's dynamic shared memory: the activations and the WARPS rings.
inline size_t Smem2(int fm, u32 parts, u32 payload, u32 nb, u32 d, u32 warps) {
    return Smem(fm, parts, payload) + (size_t)warps * d * nb * 16u * (32u / parts) * 16u;
}

// mem_row_off: the byte offset in its block of a lane's i-th 16-byte load (i < 2·T) in the
// row-major order: run r = (i·32 + lane) / S of the part (row r / UWp, word r % UWp), its
// (i·32 + lane) % S-th 16 bytes.
__device__ __forceinline__ u32 mem_row_off(u32 i, u32 lane, u32 S, u32 s0, u32 UWp, u32 uw) {
    const u32 e = i * 32u + lane, r = e / S, row = r / UWp, j = r % UWp;
    return (row * uw + j) * 512u + (s0 + e % S) * 16u;
}

// mem_pattern: the loads of blm_ws alone (no decode, no MMA, no activations), to compare two
// orders of the same bytes (a task's unit words of its part): MODE 0 as blm_ws (lane (g, q) reads
// rows g and g+8 at stripe 4u + q: eight 64-byte runs per load instruction), MODE 1 row-major
// (a load instruction reads 512 / (16·S) whole runs of S·16 contiguous bytes: rows × words of
// the part). Each lane issues the same number of 16-byte loads, one step ahead, and folds them
// into a word that it stores only if it is a magic value (so that the loads are kept).
template <int MODE, int NB>
__global__ void __launch_bounds__(256) mem_pattern(Args a) {
    const u32 lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    const u32 P = a.parts, S = 32u / P, SQ = S / 4u;
    const u32 p = blockIdx.x % P, ci = blockIdx.x / P, cpp = gridDim.x / P;
    const u32 s0 = p * S;
    const u32 UWp = (a.payload + 15u) >> 4;
    const u32 T = SQ * UWp;
    const u32 g = lane >> 2, q = lane & 3u;
    const u32 ntasks = (a.blocks + NB - 1u) / NB;
    const u32 BB = 16u * a.uw * 512u, rowB = 8u * a.uw * 512u;
    u32 acc = 0u;
    for (u32 task = ci * 8u + warp; task < ntasks; task += cpp * 8u) {
        const u32 b0 = task * NB;
        uint4 c[NB][2], n[NB][2];
        // Load k of the task (k < 2·NB·T per lane): MODE 0: block k % NB... as blm_ws.
#define MEM_ADDR(t, b, h)                                                                            \
    (MODE == 0 ? (a.w + (size_t)min(b0 + (b), a.blocks - 1u) * BB + g * a.uw * 512u + (h) * rowB + \
                  ((t) / SQ) * 512u + (s0 + 4u * ((t) % SQ) + q) * 16u)                            \
               : (a.w + (size_t)min(b0 + (b), a.blocks - 1u) * BB + mem_row_off((t) * 2u + (h), lane, S, s0, UWp, a.uw)))
#define MEM_LOAD(t, X)                                                   \
    _Pragma("unroll") for (u32 b = 0; b < NB; ++b) {                     \
        X[b][0] = ldg4(MEM_ADDR(t, b, 0u));                              \
        X[b][1] = ldg4(MEM_ADDR(t, b, 1u));                              \
    }
        MEM_LOAD(0u, c)
        for (u32 t = 0; t < T; ++t) {
            if (t + 1u < T) { MEM_LOAD(t + 1u, n) }
#pragma unroll
            for (u32 b = 0; b < NB; ++b) acc ^= c[b][0].x ^ c[b][0].w ^ c[b][1].y ^ c[b][1].z;
#pragma unroll
            for (u32 b = 0; b < NB; ++b) { c[b][0] = n[b][0]; c[b][1] = n[b][1]; }
        }
#undef MEM_LOAD
#undef MEM_ADDR
    }
    if (acc == 0x9E3779B9u) a.y[0] = 1.0f;
}


// Smem returns the dynamic shared memory of a launch: the part's split activations.
inline size_t Smem(int fm, u32 parts, u32 payload) {
    const u32 mpw = fm == 1 ? 8u : fm == 2 ? 4u : 2u;
    const u32 T = (32u / parts / 4u) * ((payload + 15u) >> 4);
    return (size_t)T * (6u * mpw / 4u) * 32u * 16u;
}

template <int FM, int NB>
inline const void* Kernel() { return (const void*)blm_ws<FM, NB>; }

inline const void* PickMem(int mode, int nb) {
    switch (mode * 10 + nb) {
    case 1: return (const void*)mem_pattern<0, 1>;
    case 2: return (const void*)mem_pattern<0, 2>;
    case 4: return (const void*)mem_pattern<0, 4>;
    case 11: return (const void*)mem_pattern<1, 1>;
    case 12: return (const void*)mem_pattern<1, 2>;
    case 14: return (const void*)mem_pattern<1, 4>;
    }
    return nullptr;
}

// Pick2: blm_ws2 for format fm, NB blocks per task, a ring of D steps, W warps, 4 or 8 parts:
// the instantiations below (NB, D, W) ∈ {(1, 4, 16), (1, 3, 16), (2, 2, 16), (2, 3, 8), (1, 6, 8)}.
template <int FM>
inline const void* Pick2F(int nb, int d, int w, unsigned parts) {
#define PROTO_P2(NB_, D_, W_)                                                                      \
    if (nb == NB_ && d == D_ && w == W_)                                                           \
        return parts == 4 ? (const void*)blm_ws2<FM, NB_, D_, W_, 4> : (const void*)blm_ws2<FM, NB_, D_, W_, 8>;
    PROTO_P2(1, 4, 16)
    PROTO_P2(1, 3, 16)
    PROTO_P2(2, 2, 16)
    PROTO_P2(2, 3, 8)
    PROTO_P2(1, 6, 8)
#undef PROTO_P2
    return nullptr;
}
// PickSK: blm_ws2 with the stream-K split (NB 1), the same ring shapes.
template <int FM>
inline const void* PickSKF(int d, int w, unsigned parts) {
#define PROTO_SK(D_, W_)                                                                           \
    if (d == D_ && w == W_)                                                                        \
        return parts == 4 ? (const void*)blm_ws2<FM, 1, D_, W_, 4, true> : (const void*)blm_ws2<FM, 1, D_, W_, 8, true>;
    PROTO_SK(4, 16)
    PROTO_SK(3, 16)
#undef PROTO_SK
    return nullptr;
}
inline const void* PickSK(int fm, int d, int w, unsigned parts) {
    if (parts != 4 && parts != 8) return nullptr;
    return fm == 1 ? PickSKF<1>(d, w, parts) : fm == 2 ? PickSKF<2>(d, w, parts) : fm == 3 ? PickSKF<3>(d, w, parts) : nullptr;
}

inline const void* Pick2(int fm, int nb, int d, int w, unsigned parts) {
    if (parts != 4 && parts != 8) return nullptr;
    return fm == 1 ? Pick2F<1>(nb, d, w, parts) : fm == 2 ? Pick2F<2>(nb, d, w, parts) : fm == 3 ? Pick2F<3>(nb, d, w, parts) : nullptr;
}

inline const void* Pick(int fm, int nb) {
    switch (fm * 10 + nb) {
    case 11: return Kernel<1, 1>();
    case 12: return Kernel<1, 2>();
    case 14: return Kernel<1, 4>();
    case 21: return Kernel<2, 1>();
    case 22: return Kernel<2, 2>();
    case 24: return Kernel<2, 4>();
    case 31: return Kernel<3, 1>();
    case 32: return Kernel<3, 2>();
    case 34: return Kernel<3, 4>();
    }
    return nullptr;
}

}  // namespace proto
