#!/usr/bin/env python3
# Diagnostic (wrong results): each quad-step only folds its loaded words into the accumulator:
# the kernel's memory access pattern, staging and occupancy without decode or MMAs.
import os, re, sys
s = sys.stdin.read()
s2, n = re.subn(r"blm_qstep<FMT, [^;]*;", "acc0[0] += AS_FLOAT((cA0.x ^ cB0.y ^ cA1.z ^ cB1.w ^ cA0.w ^ cB0.z ^ cA1.x ^ cB1.y) & 0x3FFFFFFFu);", s)
assert n > 0
sys.stdout.write(s2)
