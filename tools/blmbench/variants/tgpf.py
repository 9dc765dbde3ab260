#!/usr/bin/env python3
# Experiment: when a threadgroup starts, it asks L2 for every weight byte it will read
# (cp.async.bulk.prefetch.L2, one contiguous run per row: the quad-steps of its K parts, and the
# NVFP4 block-scale words), so that all of them are in flight at once instead of the ring's
# one quad-step per simdgroup. Rows are contiguous only with 32 lanes per row (the 27B's shapes).
import os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import helpers, sub
s = sys.stdin.read()
s = helpers(s, "static __device__ __forceinline__ void blm_bpf(const void* p, u32 n) { asm volatile(\"cp.async.bulk.prefetch.L2.global [%0], %1;\" :: \"l\"(p), \"r\"(n) : \"memory\"); }\n")
s = sub(s, "        const bool xvec = ((p.ld_x | W) & 3u) == 0u && BLM_ALIGNED16(x);\n",
"""        const bool xvec = ((p.ld_x | W) & 3u) == 0u && BLM_ALIGNED16(x);
        if (L == 32u) {
            const u32 qa = pb * nq / TP, qb = (pb + KG) * nq / TP;
            for (u32 rr = tid; rr < BT * 16u; rr += THREADS) {
                const u32 blk = grp * BT + rr / 16u, row = rr % 16u;
                if (blk < p.blocks && qb > qa) {
                    DEV const u8* rb = w + blk * blockBytes + row * UW * 512u;
                    blm_bpf(rb + qa * 64u, (qb - qa) * 64u);
                    if (FMT == FMT_NVFP4) blm_bpf(rb + (p.payload >> 4) * 512u, (UW - (p.payload >> 4)) * 512u);
                }
            }
        }
""", 12)
sys.stdout.write(s)
