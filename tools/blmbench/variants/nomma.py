#!/usr/bin/env python3
# Diagnostic (wrong results): the MMA replaced by a fold of its operands (decode and staging kept).
import os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import sub
s = sys.stdin.read()
s = sub(s, 'asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"\n                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])\n                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));',
        'c[0] += __uint_as_float((a0 ^ a1 ^ a2 ^ a3 ^ b0 ^ b1) & 0x3FFFFFFFu);', 1)
sys.stdout.write(s)
