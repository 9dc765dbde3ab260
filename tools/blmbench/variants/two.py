#!/usr/bin/env python3
# Two bf16 pieces of each activation instead of three (the lo piece's MMAs dropped): 16
# significant bits of x, not exact; measures the third piece's cost.
import os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import sub
s = sys.stdin.read()
s = sub(s, "    blm_mma(acc0, a0, a1, a2, a3, bl0, bl1, lane);\n    if (NB > 1u) blm_mma(acc1, e0, e1, e2, e3, bl0, bl1, lane);\n", "", 1)
sys.stdout.write(s)
