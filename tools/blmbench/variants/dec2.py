#!/usr/bin/env python3
# The E2M1 and E4M3 decodes with each field shifted straight from the word (one shift for the
# magnitude bits, one for the sign, two masks) instead of a shift of the word followed by a
# shift of each masked field: the same bits (the harness hashes must equal base's), fewer
# instructions.
import os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import sub
s = sys.stdin.read()
s = sub(s, """    const u32 t = v >> (4u * i);
    return ((t & 0x00070007u) << 6) | ((t & 0x00080008u) << 12);""", """    const u32 m = 4u * i <= 6u ? v << (6u - 4u * i) : v >> (4u * i - 6u);
    return (m & 0x01C001C0u) | ((v << (12u - 4u * i)) & 0x80008000u);""", 1)
s = sub(s, """    const u32 t = v >> (8u * i);
    return ((t & 0x007F007Fu) << 4) | ((t & 0x00800080u) << 8);""", """    const u32 m = i == 0u ? v << 4 : v >> 4;
    return (m & 0x07F007F0u) | ((v << (8u - 8u * i)) & 0x80008000u);""", 1)
sys.stdout.write(s)
