#!/usr/bin/env python3
# Diagnostic (wrong results): the NVFP4 code decode (E2M1 bits into bf16 fields) replaced by one
# logic instruction; the block-scale multiply, the loads, the staging and the MMAs are kept. The
# gain over base is what the decode costs.
import os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import sub
s = sys.stdin.read()
s = sub(s, """    const u32 t = v >> (4u * i);
    return ((t & 0x00070007u) << 6) | ((t & 0x00080008u) << 12);""", """    return v ^ i;""", 1)
sys.stdout.write(s)
