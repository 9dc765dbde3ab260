#!/usr/bin/env bash
# ncu_blmx.sh: Nsight Compute on single launches of the MMA-layout matrix kernels
# (BenchmarkBLMXShapes narrowed to one shape at a time, NewBLMXParams's split), with the
# per-instruction stall samples, on the GPU machine:
#
#   CUDA_TEST=/tmp/lithos-bin/cuda.test OUT=DIR tools/ncu_blmx.sh [SHAPE ...]
#
# SHAPE is one of BenchmarkBLMXShapes's names (default nvfp4-gate_up nvfp4-down fp8-qkvz);
# ROWS (default 8) the activation rows. Leaves per shape DIR/SHAPE.details.txt (the sections'
# tables) and DIR/SHAPE.source.csv (SASS with its stall samples; tools/ncu_stalls.py sums it),
# all of them also in DIR/ncu.tgz (a device call returns few files). Used in
# docs/performance.md §3.3n.
set -u -o pipefail
# Absolute paths: the benchmark runs in its package directory, the reports are read from here.
OUT=$(realpath -m "${OUT:-/tmp/lithos-ncu}")
T=$(realpath -m "${CUDA_TEST:-/tmp/lithos-bin/cuda.test}")
cd "$(dirname "$0")/.."
ROWS=${ROWS:-8}
mkdir -p "$OUT"
[ -x "$T" ] || { echo "ncu_blmx.sh: no test binary $T (CUDA_TEST)" >&2; exit 1; }
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | sort -V | tail -1)
[ -n "$ncu" ] || { echo "ncu_blmx.sh: no Nsight Compute (ncu) on this machine" >&2; exit 1; }
"$ncu" --version | tail -1
shapes=("$@")
[ ${#shapes[@]} -gt 0 ] || shapes=(nvfp4-gate_up nvfp4-down fp8-qkvz)
for sh in "${shapes[@]}"; do
  case $sh in nvfp4*) k=lithos_blmx_nvfp4 ;; *) k=lithos_blmx_fp8 ;; esac
  (cd runtime/backend/cuda && LITHOS_CUDA_BENCH_SHAPES="^$sh\$" LITHOS_CUDA_BENCH_ROWS=$ROWS LITHOS_CUDA_BENCH_DEFAULT=1 \
    LITHOS_CUDA_CACHE=/tmp/lithos-cuda-cache timeout 240 "$ncu" --clock-control none --cache-control none \
    -k "regex:$k" --launch-skip 5 --launch-count 1 \
    --section SpeedOfLight --section LaunchStats --section Occupancy --section SchedulerStats \
    --section WarpStateStats --section MemoryWorkloadAnalysis --section SourceCounters \
    --import-source no -o "$OUT/$sh" -f \
    "$T" -test.run '^$' -test.bench 'BLMXShapes$' -test.benchtime 1x) >"$OUT/$sh.run.txt" 2>&1
  echo "$sh: ncu rc $?"
  "$ncu" -i "$OUT/$sh.ncu-rep" --page details >"$OUT/$sh.details.txt" 2>&1
  "$ncu" -i "$OUT/$sh.ncu-rep" --page source --csv --print-source sass >"$OUT/$sh.source.csv" 2>"$OUT/$sh.source.err" ||
    "$ncu" -i "$OUT/$sh.ncu-rep" --page source --csv >"$OUT/$sh.source.csv" 2>>"$OUT/$sh.source.err"
  grep -E "median|Duration|DRAM Throughput|Registers Per|Warp Cycles Per Issued|Issued Warp|Eligible|Achieved Occ" "$OUT/$sh.run.txt" "$OUT/$sh.details.txt" | head -20
done
# Written beside $OUT, then moved in: tar reading the folder it writes into fails ("file changed").
tar czf "$OUT.tgz.tmp" -C "$OUT" --exclude=ncu.tgz --exclude='*.ncu-rep' . && mv "$OUT.tgz.tmp" "$OUT/ncu.tgz"
