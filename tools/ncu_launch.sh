#!/usr/bin/env bash
# ncu_launch.sh: Nsight Compute on single launches of any lithos kernel inside a speculative
# `lithos-run generate` on a bundle, with the per-instruction stall samples (Source Counters), on
# the GPU machine. docs/performance.md §3.3p used it on lithos_gdn and lithos_conv:
#
#   RUN=/tmp/w/lithos-run BUNDLE=/tmp/w/q.lithos OUT=DIR tools/ncu_launch.sh NAME:KERNEL:SKIP ...
#
# NAME names the outputs, KERNEL is a kernel name or regex (lithos_gdn), SKIP the launches of it to
# skip first: with the default prompt of 11 ids and 2 new tokens, a GDN-layer kernel's launches
# 0–47 are the prefill, 48–95 the verify pass, 96–143 the commit replay. tools/bench27b.sh
# leaves the 27B-shaped bundle and the binaries in /tmp/w. Leaves DIR/NAME.details.txt (the
# sections' tables), DIR/NAME.source.csv (SASS with its samples: tools/ncu_stalls.py sums it by
# reason and region) and DIR/NAME.run.txt, all of them also in DIR/ncu.tgz (a device call returns
# few files). Output goes to files, not through a pipe, so that a call cut off by its time limit
# still returns what was done.
set -u -o pipefail
OUT=$(realpath -m "${OUT:-/tmp/lithos-ncu}")
RUN=$(realpath -m "${RUN:-/tmp/w/lithos-run}")
BUNDLE=$(realpath -m "${BUNDLE:-/tmp/w/q.lithos}")
PROMPT=${PROMPT:-1,2,3,4,5,6,7,8,9,10,11}
mkdir -p "$OUT"
[ -x "$RUN" ] || { echo "ncu_launch.sh: no lithos-run at $RUN (RUN)" >&2; exit 1; }
[ -e "$BUNDLE" ] || { echo "ncu_launch.sh: no bundle at $BUNDLE (BUNDLE)" >&2; exit 1; }
[ $# -gt 0 ] || { echo "usage: ncu_launch.sh NAME:KERNEL:SKIP ..." >&2; exit 2; }
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | sort -V | tail -1)
[ -n "$ncu" ] || { echo "ncu_launch.sh: no Nsight Compute (ncu) on this machine" >&2; exit 1; }
for spec in "$@"; do
  IFS=: read -r name k skip <<<"$spec"
  [ -n "$name" ] && [ -n "$k" ] && [ -n "$skip" ] || { echo "ncu_launch.sh: bad spec $spec (want NAME:KERNEL:SKIP)" >&2; exit 2; }
  timeout "${NCU_T:-150}" "$ncu" --clock-control none --cache-control none -k "regex:$k" --launch-skip "$skip" --launch-count 1 \
    --section SpeedOfLight --section LaunchStats --section Occupancy --section SchedulerStats \
    --section WarpStateStats --section MemoryWorkloadAnalysis --section SourceCounters --import-source no -o "$OUT/$name" -f \
    "$RUN" generate "$BUNDLE" --backend cuda --prompt-ids "$PROMPT" --max-tokens 2 --context 512 >"$OUT/$name.run.txt" 2>&1
  echo "$name: ncu rc $?"
  "$ncu" -i "$OUT/$name.ncu-rep" --page details >"$OUT/$name.details.txt" 2>&1
  "$ncu" -i "$OUT/$name.ncu-rep" --page source --csv --print-source sass >"$OUT/$name.source.csv" 2>"$OUT/$name.source.err"
  grep -E "Grid Size|Block Size|Duration|DRAM Throughput|Registers Per|Warp Cycles Per Issued|Eligible Warps|Achieved Occ" "$OUT/$name.details.txt" | head -10
  rm -f "$OUT/$name.ncu-rep"
done
tar czf "$OUT.tgz.tmp" -C "$OUT" --exclude=ncu.tgz . && mv "$OUT.tgz.tmp" "$OUT/ncu.tgz"
