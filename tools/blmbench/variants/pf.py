#!/usr/bin/env python3
# L2 prefetch: at quad-step u, lane q=0 of each quad prefetches (prefetch.global.L2) the lines
# that quad-step u+PFD will load (rows g, g+8 of both blocks). PFD from the file name suffix
# (pf4.py -> 4); default 4.
import os, re, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import helpers, sub
m = re.search(r"pf(\d+)", os.path.basename(sys.argv[0]))
d = int(m.group(1)) if m else 4
s = sys.stdin.read()
s = helpers(s, "static __device__ __forceinline__ void blm_pf(const void* p) { asm volatile(\"prefetch.global.L2 [%0];\" :: \"l\"(p)); }\n")
s = sub(s, "                    // Prefetch quad-step u+1's weights.\n",
"""                    if (qq == 0u && u + DDu < q1) {
                        const u32 it2 = 4u * (u + DDu);
                        if (it2 < nitems) {
                            const u32 o2 = ((it2 >> lsh) * 32u + (it2 & (L - 1u))) * 16u;
                            if (ok0) { blm_pf(w0 + baseA + o2); blm_pf(w0 + baseB + o2); }
                            if (ok1) { blm_pf(w1 + baseA + o2); blm_pf(w1 + baseB + o2); }
                        }
                    }
                    // Prefetch quad-step u+1's weights.
""".replace("DD", str(d)), 12)
sys.stdout.write(s)
