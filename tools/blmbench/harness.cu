// harness.cu: times lithos's BLM matrix kernels (generated lithos_kernels.cu, included below)
// on the GPU. Written by `go run ./tools/blmbench`; compiled and run by run.sh there.
//
//   harness CASES [VARIANT]   prints one line per case: GB/s, × the read floor measured first,
//                             and an FNV-1a hash of the first copy's outputs (bit patterns), so
//                             that variants that keep the summation order can be compared bit
//                             for bit and others by their max relative difference (dumped with
//                             DUMP=dir).
// Each case: enough copies of the matrix (random bytes masked with 0xBF: no E4M3 NaN, bf16 of
// magnitude < 4) to make ≥ 1 GB, launched back to back in one CUDA graph, median of 7 replays.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cstdint>
#include <vector>
#include <string>
#include <algorithm>
#include <cmath>
#include <cuda_runtime.h>
#include <cuda.h>  // CUtensorMap (proto.cuh's blm_tma)
#include <dlfcn.h>

// In a namespace: the generated source defines helpers (umin, umax, ...) that CUDA's own
// headers, included by nvcc but not by NVRTC, also declare.
namespace lk {
#include "lithos_kernels.cu"
}

// The prototype kernel (proto.cuh), timed beside the generated one when PROTO is set.
#include "proto.cuh"

// encodeTiled: the driver's cuTensorMapEncodeTiled, looked up in libcuda.so.1 (no -lcuda needed).
typedef CUresult (*EncodeTiledFn)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*, const cuuint64_t*,
                                  const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                  CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
static EncodeTiledFn encodeTiled() {
    static EncodeTiledFn f = nullptr;
    if (!f) {
        void* h = dlopen("libcuda.so.1", RTLD_NOW);
        if (h) f = (EncodeTiledFn)dlsym(h, "cuTensorMapEncodeTiled");
    }
    return f;
}

struct KernelEntry { const char* name; const void* fn; };
static const KernelEntry kernel_table[] = {
#include "kernel_table.inc"
};

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); exit(1); } } while (0)

__global__ void fill_bytes(unsigned* p, size_t n, unsigned seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        unsigned h = (unsigned)i * 2654435761u ^ seed * 0x9E3779B9u;
        h ^= h >> 15; h *= 0x2C1B3C6Du; h ^= h >> 12; h *= 0x297A2D39u; h ^= h >> 15;
        p[i] = h & 0xBFBFBFBFu;
    }
}
__global__ void fill_f32(float* p, size_t n, float v) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) p[i] = v;
}
__global__ void read_sum(const uint4* p, size_t n, unsigned* out) {
    unsigned acc = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint4 v = __ldcs(p + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x12345678u) out[0] = acc;
}

static float median(std::vector<float> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; }

int main(int argc, char** argv) {
    if (argc < 2) { fprintf(stderr, "usage: harness CASES [VARIANT]\n"); return 2; }
    const char* variant = argc > 2 ? argv[2] : "base";
    cudaDeviceProp prop; CK(cudaGetDeviceProperties(&prop, 0));
    cudaStream_t s; CK(cudaStreamCreate(&s));
    cudaEvent_t ev[8]; for (auto& e : ev) CK(cudaEventCreate(&e));
    // Read floor: 4 GiB streamed, median of 7.
    double floor_gbs;
    {
        size_t bytes = (size_t)4 << 30; uint4* p; unsigned* o;
        CK(cudaMalloc(&p, bytes)); CK(cudaMalloc(&o, 4));
        fill_bytes<<<prop.multiProcessorCount * 8, 512, 0, s>>>((unsigned*)p, bytes / 4, 1);
        read_sum<<<prop.multiProcessorCount * 8, 512, 0, s>>>(p, bytes / 16, o);
        std::vector<float> t;
        for (int r = 0; r < 7; r++) {
            CK(cudaEventRecord(ev[0], s));
            read_sum<<<prop.multiProcessorCount * 8, 512, 0, s>>>(p, bytes / 16, o);
            CK(cudaEventRecord(ev[1], s)); CK(cudaEventSynchronize(ev[1]));
            float ms; CK(cudaEventElapsedTime(&ms, ev[0], ev[1])); t.push_back(ms);
        }
        floor_gbs = bytes / (median(t) * 1e-3) / 1e9;
        CK(cudaFree(p)); CK(cudaFree(o));
    }
    printf("variant %s device %s floor %.0f GB/s\n", variant, prop.name, floor_gbs);
    FILE* f = fopen(argv[1], "r");
    if (!f) { perror(argv[1]); return 1; }
    char line[4096];
    const char* dump = getenv("DUMP");
    while (fgets(line, sizeof line, f)) {
        char name[128], kname[128], mark[8];
        int rows, parts, wb, cl; unsigned gridx; long long wbytes, trows, nx, ny;
        int off = 0;
        if (sscanf(line, "%127s %127s %d %d %d %d %7s %u %lld %lld %lld %lld%n", name, kname, &rows, &parts, &wb, &cl, mark, &gridx, &wbytes, &trows, &nx, &ny, &off) != 12) continue;
        std::vector<unsigned> rec; { char* q = line + off; char* e; for (;;) { unsigned long v = strtoul(q, &e, 10); if (e == q) break; rec.push_back((unsigned)v); q = e; } }
        while (rec.size() % 4) rec.push_back(0);
        const void* fn = nullptr;
        for (auto& k : kernel_table) if (!strcmp(k.name, kname)) fn = k.fn;
        if (!fn) { fprintf(stderr, "no kernel %s\n", kname); return 1; }
        // The weight ring's dynamic shared memory (kernels.BLMRingBytes; BLM_RING from the source).
        const int dyn = BLM_RING > 0 ? 4 * BLM_RING * 5 * 32 * 16 : 0;
        if (dyn > 0) CK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, dyn));
        cudaFuncAttributes fa; CK(cudaFuncGetAttributes(&fa, fn));
        const long long per = wbytes + 4 * trows;
        const int copies = (int)((1000000000LL + per - 1) / per);
        std::vector<unsigned char*> W(copies); std::vector<float*> S(copies);
        for (int c = 0; c < copies; c++) {
            CK(cudaMalloc(&W[c], wbytes)); CK(cudaMalloc(&S[c], 4 * trows));
            fill_bytes<<<prop.multiProcessorCount * 4, 512, 0, s>>>((unsigned*)W[c], wbytes / 4, c + 1);
            fill_f32<<<prop.multiProcessorCount, 256, 0, s>>>(S[c], trows, 0.0078125f);
        }
        float *x, *y; unsigned *ctl, *prm;
        CK(cudaMalloc(&x, 4 * nx)); CK(cudaMalloc(&y, 4 * ny)); CK(cudaMalloc(&ctl, 256)); CK(cudaMalloc(&prm, 4 * rec.size()));
        CK(cudaMemsetAsync(ctl, 0, 256, s));
        CK(cudaMemcpyAsync(prm, rec.data(), 4 * rec.size(), cudaMemcpyHostToDevice, s));
        { std::vector<float> hx(nx); unsigned r = 9; for (auto& v : hx) { r = r * 1664525u + 1013904223u; v = (1.0f + (r >> 8) / 16777216.0f) * ((r & 1) ? -1.f : 1.f); }
          CK(cudaMemcpyAsync(x, hx.data(), 4 * nx, cudaMemcpyHostToDevice, s)); CK(cudaStreamSynchronize(s)); }
        // One launch of copy 0 for the output hash.
        auto launch = [&](int c) {
            void* a[6]; const void* pc = ctl; const void* pp = prm; const void* pw = W[c]; const void* ps = S[c]; const void* px = x; void* py = y;
            a[0] = &pc; a[1] = &pp; a[2] = &pw; a[3] = &ps; a[4] = &px; a[5] = &py;
            if (cl > 1) {
                // K split across the threadgroups of a cluster (BLMParams.Clusters).
                cudaLaunchConfig_t cfg = {};
                cudaLaunchAttribute at[1];
                at[0].id = cudaLaunchAttributeClusterDimension;
                at[0].val.clusterDim.x = cl; at[0].val.clusterDim.y = 1; at[0].val.clusterDim.z = 1;
                cfg.gridDim = dim3(gridx); cfg.blockDim = dim3(128); cfg.dynamicSmemBytes = dyn; cfg.stream = s;
                cfg.attrs = at; cfg.numAttrs = 1;
                CK(cudaLaunchKernelExC(&cfg, fn, a));
            } else {
                CK(cudaLaunchKernel(fn, dim3(gridx), dim3(128), a, dyn, s));
            }
        };
        CK(cudaMemsetAsync(y, 0xFF, 4 * ny, s));
        launch(0);
        CK(cudaStreamSynchronize(s));
        std::vector<float> hy(ny); CK(cudaMemcpy(hy.data(), y, 4 * ny, cudaMemcpyDeviceToHost));
        unsigned long long h = 1469598103934665603ULL;
        for (float v : hy) { unsigned u; memcpy(&u, &v, 4); for (int i = 0; i < 4; i++) { h ^= (u >> (8 * i)) & 255u; h *= 1099511628211ULL; } }
        if (dump) { char p[512]; snprintf(p, sizeof p, "%s/%s-%s-r%d-p%dw%dc%d.f32", dump, variant, name, rows, parts, wb, cl); FILE* o = fopen(p, "wb"); if (o) { fwrite(hy.data(), 4, ny, o); fclose(o); } }
        cudaGraph_t g; cudaGraphExec_t ge;
        CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
        for (int c = 0; c < copies; c++) launch(c);
        CK(cudaStreamEndCapture(s, &g)); CK(cudaGraphInstantiate(&ge, g, 0));
        CK(cudaGraphLaunch(ge, s));
        std::vector<float> t;
        for (int r = 0; r < 7; r++) {
            CK(cudaEventRecord(ev[0], s)); CK(cudaGraphLaunch(ge, s)); CK(cudaEventRecord(ev[1], s)); CK(cudaEventSynchronize(ev[1]));
            float ms; CK(cudaEventElapsedTime(&ms, ev[0], ev[1])); t.push_back(ms);
        }
        const double ms = median(t), gbs = copies * (double)per / (ms * 1e-3) / 1e9;
        printf("%-8s %-14s rows %d parts %d wb %d cl %d%-2s grid %6u regs %3d smem %6d: %3d x %6.1f MB %8.1f us/matrix %6.0f GB/s = %.3f x floor  y#%016llx\n",
               variant, name, rows, parts, wb, cl, mark[0] == '-' ? "  " : mark, gridx, fa.numRegs, (int)fa.sharedSizeBytes + dyn, copies, per / 1e6, ms * 1e3 / copies, gbs, gbs / floor_gbs, h);
        fflush(stdout);
        CK(cudaGraphExecDestroy(ge)); CK(cudaGraphDestroy(g));
        // PROTO="P:NB ..." (parts:blocks per task): the prototype kernel on the same bytes, its
        // largest difference from the generated kernel's outputs relative to their largest
        // magnitude, and its time over the same copies (8 rows at most: the prototypes have one
        // n-tile).
        const char* protos = getenv("PROTO");
        const int fm = strstr(kname, "nvfp4") ? 1 : strstr(kname, "fp8") ? 2 : strstr(kname, "bf16") ? 3 : 0;
        if (protos && fm && rec.size() >= 17 && rec[1] <= 8 && rec[5] == 32 && (fm != 1 || (rec[9] == 16 && rec[7] % 16 == 0))) {
            char buf[256]; snprintf(buf, sizeof buf, "%s", protos);
            for (char* tok = strtok(buf, " ,"); tok; tok = strtok(nullptr, " ,")) {
                if (tok[0] == 'f') {
                    // "fP:NB": blm_fm (blm_ws over a fragment-major copy of the weights, made by
                    // repack_fm before the timing), P parts, NB blocks per task.
                    unsigned P = 0, NB = 0;
                    if (sscanf(tok + 1, "%u:%u", &P, &NB) < 2 || (P != 1 && P != 2 && P != 4 && P != 8)) continue;
                    const void* pf = proto::PickFm(fm, (int)NB);
                    if (!pf) { printf("%-8s %-14s rows %d %s: no such instantiation\n", variant, name, rows, tok); continue; }
                    proto::Args pa = {};
                    pa.scales = S[0]; pa.x = x; pa.y = y;
                    pa.rows = rec[1]; pa.n = rec[3]; pa.k = rec[4]; pa.uw = rec[6]; pa.stripe = rec[7]; pa.payload = rec[8];
                    pa.blocks = rec[10]; pa.ldx = rec[11]; pa.ldy = rec[12]; pa.epi = rec[13]; pa.parts = P; pa.smax = 1;
                    const size_t sm = proto::Smem(fm, P, pa.payload);
                    if (sm > 227 * 1024) { printf("%-8s %-14s rows %d %s: %zu bytes of shared memory\n", variant, name, rows, tok, sm); continue; }
                    CK(cudaFuncSetAttribute(pf, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm));
                    int occ = 0; CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, pf, 256, sm));
                    if (occ == 0) { printf("%-8s %-14s rows %d %s: does not fit\n", variant, name, rows, tok); continue; }
                    const unsigned ntasks = (pa.blocks + NB - 1) / NB;
                    unsigned grid = prop.multiProcessorCount * occ / P * P;
                    const unsigned need = (ntasks + 7) / 8 * P;
                    if (grid > need) grid = need;
                    CK(cudaMalloc(&pa.scratch, (size_t)4 * P * pa.blocks * 128)); CK(cudaMalloc(&pa.counters, 4 * (ntasks > pa.blocks ? ntasks : pa.blocks)));
                    CK(cudaMemsetAsync(pa.counters, 0, 4 * (ntasks > pa.blocks ? ntasks : pa.blocks), s));
                    const size_t rb = proto::FmBytes(pa.blocks, P, pa.payload), rsw = proto::FmScaleWords(pa.blocks, P, pa.payload);
                    std::vector<unsigned char*> RW(copies); std::vector<unsigned*> RSc(copies);
                    const void* rp = proto::PickRepack(fm);
                    for (int c = 0; c < copies; c++) {
                        CK(cudaMalloc(&RW[c], rb)); CK(cudaMalloc(&RSc[c], 4 * rsw));
                        proto::Args b = pa; b.w = W[c];
                        unsigned char* r0 = RW[c]; unsigned* r1 = RSc[c];
                        void* args[3] = {&b, &r0, &r1};
                        CK(cudaLaunchKernel(rp, dim3(prop.multiProcessorCount * 4), dim3(256), args, 0, s));
                    }
                    CK(cudaStreamSynchronize(s));
                    cudaFuncAttributes pfa; CK(cudaFuncGetAttributes(&pfa, pf));
                    auto fl = [&](int c) {
                        proto::Args b = pa; b.w = W[c]; b.scales = S[c]; b.rw = RW[c]; b.rs = RSc[c];
                        void* args[1] = {&b};
                        CK(cudaLaunchKernel(pf, dim3(grid), dim3(256), args, sm, s));
                    };
                    CK(cudaMemsetAsync(y, 0xFF, 4 * ny, s));
                    fl(0);
                    CK(cudaStreamSynchronize(s));
                    std::vector<float> py(ny); CK(cudaMemcpy(py.data(), y, 4 * ny, cudaMemcpyDeviceToHost));
                    double md = 0, mx = 0; long long bad = 0;
                    for (long long i = 0; i < ny; i++) {
                        const double d = fabs((double)py[i] - hy[i]);
                        if (!(d <= 1e30)) bad++; else if (d > md) md = d;
                        if (fabs((double)hy[i]) > mx) mx = fabs((double)hy[i]);
                    }
                    cudaGraph_t pg; cudaGraphExec_t pge;
                    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
                    for (int c = 0; c < copies; c++) fl(c);
                    CK(cudaStreamEndCapture(s, &pg)); CK(cudaGraphInstantiate(&pge, pg, 0));
                    CK(cudaGraphLaunch(pge, s));
                    std::vector<float> pt;
                    for (int r = 0; r < 7; r++) {
                        CK(cudaEventRecord(ev[0], s)); CK(cudaGraphLaunch(pge, s)); CK(cudaEventRecord(ev[1], s)); CK(cudaEventSynchronize(ev[1]));
                        float ms2; CK(cudaEventElapsedTime(&ms2, ev[0], ev[1])); pt.push_back(ms2);
                    }
                    const double pms = median(pt), pgbs = copies * (double)per / (pms * 1e-3) / 1e9;
                    printf("%-8s %-14s rows %d fm P %u NB %u grid %5u occ %d regs %3d smem %6zu: %8.1f us/matrix %6.0f GB/s = %.3f x floor (%.2fx base)  maxdiff %.2e of %.2e%s\n",
                           variant, name, rows, P, NB, grid, occ, pfa.numRegs, sm, pms * 1e3 / copies, pgbs, pgbs / floor_gbs, ms / pms, md / (mx > 0 ? mx : 1), mx, bad ? " NONFINITE" : "");
                    fflush(stdout);
                    CK(cudaGraphExecDestroy(pge)); CK(cudaGraphDestroy(pg));
                    for (int c = 0; c < copies; c++) { CK(cudaFree(RW[c])); CK(cudaFree(RSc[c])); }
                    CK(cudaFree(pa.scratch)); CK(cudaFree(pa.counters));
                    continue;
                }
                if (tok[0] == 't') {
                    // "tP:NB:BS[:D[:DIAG]]": blm_tma with P parts, NB blocks per stage split among BS
                    // warps per quad-step owner, D stages (0 or none: the most, up to 8, that fit in
                    // shared memory), diagnostics DIAG (proto::Args.diag).
                    unsigned P = 0, NB = 0, BS = 1, RD = 0, DG = 0;
                    if (sscanf(tok + 1, "%u:%u:%u:%u:%u", &P, &NB, &BS, &RD, &DG) < 3 || (P != 1 && P != 2 && P != 4 && P != 8)) continue;
                    proto::Args pa = {};
                    pa.scales = S[0]; pa.x = x; pa.y = y;
                    pa.rows = rec[1]; pa.n = rec[3]; pa.k = rec[4]; pa.uw = rec[6]; pa.stripe = rec[7]; pa.payload = rec[8];
                    pa.blocks = rec[10]; pa.ldx = rec[11]; pa.ldy = rec[12]; pa.epi = rec[13]; pa.parts = P; pa.smax = 1;
                    const unsigned SQ = 32 / P / 4, nqs = ((pa.payload + 15) / 16) * SQ, tq = proto::TmaQ(fm);
                    unsigned nwq = (nqs + tq - 1) / tq;
                    if ((DG & 1) && nwq > 20) nwq = 20;  // the data path alone: the warps read part of each stage
                    const unsigned nw = nwq * BS;
                    const void* pf = proto::PickT(fm, (int)NB, (int)BS, P, nwq);
                    if (!pf) { printf("%-8s %-14s rows %d %s: no instantiation for %u warps\n", variant, name, rows, tok, nw); continue; }
                    if (RD == 0) { RD = 8; while (RD > 1 && proto::TmaSmem(P, pa.uw, NB, RD, nwq) > 227 * 1024) RD--; }
                    const size_t sm = proto::TmaSmem(P, pa.uw, NB, RD, nwq);
                    if (sm > 227 * 1024) { printf("%-8s %-14s rows %d %s: %zu bytes of shared memory\n", variant, name, rows, tok, sm); continue; }
                    pa.depth = RD; pa.diag = DG;
                    CK(cudaFuncSetAttribute(pf, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm));
                    int occ = 0; CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, pf, 32 * nw, sm));
                    if (occ == 0) { printf("%-8s %-14s rows %d %s: does not fit (%zu bytes of shared memory, %u warps)\n", variant, name, rows, tok, sm, nw); continue; }
                    const unsigned nst = (pa.blocks + NB - 1) / NB;
                    unsigned grid = prop.multiProcessorCount * occ / P * P;
                    if (grid > nst * P) grid = nst * P;
                    CK(cudaMalloc(&pa.scratch, (size_t)4 * P * pa.blocks * 128)); CK(cudaMalloc(&pa.counters, 4 * nst));
                    CK(cudaMemsetAsync(pa.counters, 0, 4 * nst, s));
                    EncodeTiledFn enc = encodeTiled();
                    if (!enc) { printf("no cuTensorMapEncodeTiled in libcuda.so.1\n"); exit(1); }
                    // TMA_PROMO: the tensor maps' L2 promotion (0 none, 1 64 B, 2 128 B, 3 256 B; default 3).
                    const char* pe = getenv("TMA_PROMO");
                    const int promo = pe ? atoi(pe) : 3;
                    const CUtensorMapL2promotion l2p = promo == 0 ? CU_TENSOR_MAP_L2_PROMOTION_NONE : promo == 1 ? CU_TENSOR_MAP_L2_PROMOTION_L2_64B
                                                      : promo == 2 ? CU_TENSOR_MAP_L2_PROMOTION_L2_128B : CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
                    std::vector<CUtensorMap> tms(copies);
                    for (int c = 0; c < copies; c++) {
                        const cuuint64_t dims[3] = {128, pa.uw, (cuuint64_t)pa.blocks * 16};
                        const cuuint64_t strides[2] = {512, (cuuint64_t)pa.uw * 512};
                        const cuuint32_t box[3] = {4 * (32 / P), pa.uw, 16 * NB};
                        const cuuint32_t es[3] = {1, 1, 1};
                        const CUresult r = enc(&tms[c], CU_TENSOR_MAP_DATA_TYPE_UINT32, 3, W[c], dims, strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                               CU_TENSOR_MAP_SWIZZLE_NONE, l2p, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
                        if (r != CUDA_SUCCESS) { printf("cuTensorMapEncodeTiled: error %d\n", (int)r); exit(1); }
                    }
                    cudaFuncAttributes pfa; CK(cudaFuncGetAttributes(&pfa, pf));
                    auto tl = [&](int c) {
                        proto::Args b = pa; b.w = W[c]; b.scales = S[c];
                        void* args[2] = {&tms[c], &b};
                        CK(cudaLaunchKernel(pf, dim3(grid), dim3(32 * nw), args, sm, s));
                    };
                    CK(cudaMemsetAsync(y, 0xFF, 4 * ny, s));
                    tl(0);
                    CK(cudaStreamSynchronize(s));
                    std::vector<float> py(ny); CK(cudaMemcpy(py.data(), y, 4 * ny, cudaMemcpyDeviceToHost));
                    double md = 0, mx = 0; long long bad = 0;
                    for (long long i = 0; i < ny; i++) {
                        const double d = fabs((double)py[i] - hy[i]);
                        if (!(d <= 1e30)) bad++; else if (d > md) md = d;
                        if (fabs((double)hy[i]) > mx) mx = fabs((double)hy[i]);
                    }
                    cudaGraph_t pg; cudaGraphExec_t pge;
                    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
                    for (int c = 0; c < copies; c++) tl(c);
                    CK(cudaStreamEndCapture(s, &pg)); CK(cudaGraphInstantiate(&pge, pg, 0));
                    CK(cudaGraphLaunch(pge, s));
                    std::vector<float> pt;
                    for (int r = 0; r < 7; r++) {
                        CK(cudaEventRecord(ev[0], s)); CK(cudaGraphLaunch(pge, s)); CK(cudaEventRecord(ev[1], s)); CK(cudaEventSynchronize(ev[1]));
                        float ms2; CK(cudaEventElapsedTime(&ms2, ev[0], ev[1])); pt.push_back(ms2);
                    }
                    const double pms = median(pt), pgbs = copies * (double)per / (pms * 1e-3) / 1e9;
                    printf("%-8s %-14s rows %d tma P %u NB %u BS %u D %u diag %u promo %d W %2u grid %5u occ %d regs %3d smem %6zu: %8.1f us/matrix %6.0f GB/s = %.3f x floor (%.2fx base)  maxdiff %.2e of %.2e%s\n",
                           variant, name, rows, P, NB, BS, RD, DG, promo, nw, grid, occ, pfa.numRegs, sm, pms * 1e3 / copies, pgbs, pgbs / floor_gbs, ms / pms, md / (mx > 0 ? mx : 1), mx, bad ? " NONFINITE" : "");
                    fflush(stdout);
                    CK(cudaGraphExecDestroy(pge)); CK(cudaGraphDestroy(pg));
                    CK(cudaFree(pa.scratch)); CK(cudaFree(pa.counters));
                    continue;
                }
                // "wP:NB[:D:W]": blm_ws2 with a ring of D steps (default 4) and W warps (default 16).
                unsigned P = 0, NB = 0, RD = 4, RW = 16;
                if (sscanf(tok + (tok[0] == 'm' || tok[0] == 'r' || tok[0] == 'w' || tok[0] == 's'), "%u:%u:%u:%u", &P, &NB, &RD, &RW) < 2 || (P != 1 && P != 2 && P != 4 && P != 8)) continue;
                const int memmode = tok[0] == 'm' ? 1 : tok[0] == 'r' ? 2 : 0;  // "m P:NB" fragment order, "r P:NB" row order
                const bool sk = tok[0] == 's';              // "s P:1:D:W": blm_ws2 with the stream-K split
                const bool ring = tok[0] == 'w' || sk;  // "w P:NB": blm_ws2 (row-order ring)
                if (sk && NB != 1) { printf("%-8s %-14s rows %d %s: the stream-K split takes NB 1\n", variant, name, rows, tok); continue; }
                const void* pf = memmode ? proto::PickMem(memmode - 1, (int)NB) : sk ? proto::PickSK(fm, (int)RD, (int)RW, P) : ring ? proto::Pick2(fm, (int)NB, (int)RD, (int)RW, P) : proto::Pick(fm, (int)NB);
                const unsigned threads = ring ? 32 * RW : 256;
                if (!pf) { printf("%-8s %-14s rows %d %s: no such instantiation in proto.cuh\n", variant, name, rows, tok); continue; }
                proto::Args pa = {};
                pa.scales = S[0]; pa.x = x; pa.y = y;
                pa.rows = rec[1]; pa.n = rec[3]; pa.k = rec[4]; pa.uw = rec[6]; pa.stripe = rec[7]; pa.payload = rec[8];
                pa.blocks = rec[10]; pa.ldx = rec[11]; pa.ldy = rec[12]; pa.epi = rec[13]; pa.parts = P;
                // The load-order kernels take 64 KiB of (unused) shared memory: three threadgroups
                // per multiprocessor whatever the split, the same for both orders.
                const size_t sm = memmode ? 65536 : ring ? proto::Smem2(fm, P, pa.payload, NB, RD, RW) : proto::Smem(fm, P, pa.payload);
                if (sm > 227 * 1024) { printf("%-8s %-14s rows %d proto P %u NB %u: %zu bytes of shared memory\n", variant, name, rows, P, NB, sm); continue; }
                CK(cudaFuncSetAttribute(pf, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm));
                int occ = 0; CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, pf, threads, sm));
                const unsigned ntasks = (pa.blocks + NB - 1) / NB;
                if (occ == 0) { printf("%-8s %-14s rows %d %s P %u NB %u: does not fit (%zu bytes of shared memory)\n", variant, name, rows, tok, P, NB, sm); continue; }
                unsigned grid = prop.multiProcessorCount * occ / P * P;
                const unsigned need = (ntasks + threads / 32 - 1) / (threads / 32) * P;
                if (grid > need) grid = need;
                pa.smax = 1;
                if (sk) {
                    // Every warp of a part needs at least one (block, word) unit of the part.
                    const unsigned U = pa.blocks * ((pa.payload + 15) / 16), UWp = (pa.payload + 15) / 16;
                    if (U < RW) { printf("%-8s %-14s rows %d %s: fewer units than warps\n", variant, name, rows, tok); continue; }
                    unsigned cpp = prop.multiProcessorCount * occ / P;
                    if (cpp * RW > U) cpp = U / RW;
                    if (cpp == 0) { printf("%-8s %-14s rows %d %s: fewer resident threadgroups than parts\n", variant, name, rows, tok); continue; }
                    grid = cpp * P;
                    const unsigned L = U / (cpp * RW);
                    pa.smax = (UWp + L - 1) / L + 1;
                }
                const unsigned nctr = ntasks > pa.blocks ? ntasks : pa.blocks;
                CK(cudaMalloc(&pa.scratch, (size_t)4 * P * pa.blocks * pa.smax * 128)); CK(cudaMalloc(&pa.counters, 4 * nctr));
                CK(cudaMemsetAsync(pa.counters, 0, 4 * nctr, s));
                cudaFuncAttributes pfa; CK(cudaFuncGetAttributes(&pfa, pf));
                auto plaunch = [&](int c) {
                    proto::Args b = pa; b.w = W[c]; b.scales = S[c];
                    void* args[1] = {&b};
                    CK(cudaLaunchKernel(pf, dim3(grid), dim3(threads), args, sm, s));
                };
                CK(cudaMemsetAsync(y, 0xFF, 4 * ny, s));
                plaunch(0);
                if (memmode) CK(cudaMemcpyAsync(y, hy.data(), 4 * ny, cudaMemcpyHostToDevice, s));
                CK(cudaStreamSynchronize(s));
                std::vector<float> py(ny); CK(cudaMemcpy(py.data(), y, 4 * ny, cudaMemcpyDeviceToHost));
                double md = 0, mx = 0; long long bad = 0;
                for (long long i = 0; i < ny; i++) {
                    const double d = fabs((double)py[i] - hy[i]);
                    if (!(d <= 1e30)) bad++; else if (d > md) md = d;
                    if (fabs((double)hy[i]) > mx) mx = fabs((double)hy[i]);
                }
                cudaGraph_t pg; cudaGraphExec_t pge;
                CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
                for (int c = 0; c < copies; c++) plaunch(c);
                CK(cudaStreamEndCapture(s, &pg)); CK(cudaGraphInstantiate(&pge, pg, 0));
                CK(cudaGraphLaunch(pge, s));
                std::vector<float> pt;
                for (int r = 0; r < 7; r++) {
                    CK(cudaEventRecord(ev[0], s)); CK(cudaGraphLaunch(pge, s)); CK(cudaEventRecord(ev[1], s)); CK(cudaEventSynchronize(ev[1]));
                    float ms; CK(cudaEventElapsedTime(&ms, ev[0], ev[1])); pt.push_back(ms);
                }
                const double pms = median(pt), pgbs = copies * (double)per / (pms * 1e-3) / 1e9;
                printf("%-8s %-14s rows %d %s P %u NB %u%s grid %5u occ %d regs %3d smem %6zu: %8.1f us/matrix %6.0f GB/s = %.3f x floor (%.2fx base)  maxdiff %.2e of %.2e%s\n",
                       variant, name, rows, memmode == 1 ? "memfrag" : memmode == 2 ? "memrow" : sk ? "ringSK" : ring ? "ring" : "proto", P, NB, ring ? (" D " + std::to_string(RD) + " W " + std::to_string(RW)).c_str() : "", grid, occ, pfa.numRegs, sm, pms * 1e3 / copies, pgbs, pgbs / floor_gbs, ms / pms, md / (mx > 0 ? mx : 1), mx, bad ? " NONFINITE" : "");
                fflush(stdout);
                CK(cudaGraphExecDestroy(pge)); CK(cudaGraphDestroy(pg));
                CK(cudaFree(pa.scratch)); CK(cudaFree(pa.counters));
            }
        }
        for (int c = 0; c < copies; c++) { CK(cudaFree(W[c])); CK(cudaFree(S[c])); }
        CK(cudaFree(x)); CK(cudaFree(y)); CK(cudaFree(ctl)); CK(cudaFree(prm));
    }
    return 0;
}
