#!/usr/bin/env python3
# Diagnostic (wrong results): no activation staging and no barriers in the chunk loop.
import os, re, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import sub
s = sys.stdin.read()
s = sub(s, "for (u32 ui = tid; ui < nunits; ui += THREADS) {", "for (u32 ui = tid; ui < 0u; ui += THREADS) {", 12)
s = sub(s, "            if (c > 0u) BARRIER();\n", "", 12)
# The barrier between the staging and the compute loop (either form of that loop).
s, n = re.subn(r"            BARRIER\(\);\n(            (UNROLL for \(u32 cq = 0u; cq < BLM_CQ|for \(u32 cg = 0u; cg < CQE))", r"\1", s)
if n != 12:
    sys.exit("nostage: found the compute loop %d times" % n)
sys.stdout.write(s)
