#!/usr/bin/env python3
# Bulk L2 prefetch (sm_90 cp.async.bulk.prefetch.L2): when a simdgroup starts unit word j of its
# K part (and at its first quad-step), lane l prefetches word j+D (D from the name, default 2)
# of row l%16 of block l/16: L·16 contiguous bytes per row, 32 rows per instruction.
import os, re, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import helpers, sub
m = re.search(r"bpf(\d+)", os.path.basename(sys.argv[0]))
d = int(m.group(1)) if m else 2
s = sys.stdin.read()
s = helpers(s, "static __device__ __forceinline__ void blm_bpf(const void* p, u32 n) { asm volatile(\"cp.async.bulk.prefetch.L2.global [%0], %1;\" :: \"l\"(p), \"r\"(n) : \"memory\"); }\n")
s = sub(s, "                    // Prefetch quad-step u+1's weights.\n",
"""                    if (u == q0 || ((4u * u) & (L - 1u)) == 0u) {
                        const u32 jw = (4u * u) >> lsh;
                        const u32 rr = lane & 15u, bb = lane >> 4;
                        const bool okb = bb == 0u ? ok0 : ok1;
                        const u32 base = ((rr / F) * UW * 32u + (rr % F) * L) * 16u;
                        DEV const u8* wb = bb == 0u ? w0 : w1;
                        for (u32 dd = (u == q0 ? 0u : DDu); dd <= DDu; ++dd)
                            if (okb && jw + dd < UW) blm_bpf(wb + base + (jw + dd) * 512u, L * 16u);
                    }
                    // Prefetch quad-step u+1's weights.
""".replace("DD", str(d)), 12)
sys.stdout.write(s)
