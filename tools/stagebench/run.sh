#!/usr/bin/env bash
# run.sh: on the GPU machine, builds stagebench.cu and runs it at the 27B's staging shapes
# (docs/performance.md §3.3w): down (P = 17408/4 in clusters of 4: 120 threadgroups), gate_up
# and the LM head (5120/2 in clusters of 2: 132), the FP8 products (5120/4, 6144/4: 120), each
# also with one threadgroup alone (a multiprocessor's own rate) and with 30 (a quarter of the
# sharers). Output on stdout.
set -u
cd "$(dirname "$0")"
nvcc -O3 -Xptxas -v -std=c++17 -arch="${ARCH:-sm_90}" -o /tmp/stagebench stagebench.cu || exit 1
for a in "4352 120 4" "4352 1 4" "4352 30 4" "2560 132 2" "2560 1 2" "1280 120 4" "1536 120 4"; do
  /tmp/stagebench $a 20
done
