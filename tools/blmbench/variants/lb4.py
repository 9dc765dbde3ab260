#!/usr/bin/env python3
# Register cap: __launch_bounds__(128, 4) on the BLM kernels (4 threadgroups per multiprocessor).
import sys
s = sys.stdin.read()
n = s.count("__launch_bounds__(128) lithos_blm")
assert n == 12, n
sys.stdout.write(s.replace("__launch_bounds__(128) lithos_blm", "__launch_bounds__(128, 4) lithos_blm"))
