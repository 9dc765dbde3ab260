#!/usr/bin/env bash
# run.sh (written by `go run ./tools/blmbench -o DIR`): on the GPU machine, compiles the BLM
# harness for the generated source and for each variant, then times every case of cases.txt
# with each binary. A variant is an executable filter (python3 script or any program) in
# $VARIANTS (default: none) that reads the generated lithos_kernels.cu on stdin and writes the
# variant's source on stdout.
#   DIR/run.sh [OUTDIR]      logs and per-variant results into OUTDIR (default /tmp/blmbench)
# ARCH (default sm_90), CASES (a grep -E filter on cases.txt lines), DUMP=1 (outputs of copy 0 as .f32),
# NVCCFLAGS (extra nvcc flags, e.g. -DPROTO_FENCE=0 for proto.cuh's diagnostics).
set -u -o pipefail
cd "$(dirname "$0")"
out=${1:-/tmp/blmbench}
mkdir -p "$out"
arch=${ARCH:-sm_90}
grep -E "${CASES:-.}" cases.txt >"$out/cases.sel"
vs=(base)
if [ -n "${VARIANTS:-}" ]; then
  for f in "$VARIANTS"/*; do [ -x "$f" ] && vs+=("$(basename "${f%.*}"):$f"); done
fi
for v in "${vs[@]}"; do
  name=${v%%:*} filter=${v#*:}
  d="$out/v-$name"
  mkdir -p "$d"
  cp harness.cu proto.cuh kernel_table.inc "$d/"
  if [ "$name" = base ]; then cp lithos_kernels.cu "$d/"; else "$filter" <lithos_kernels.cu >"$d/lithos_kernels.cu" || { echo "variant $name: filter failed"; continue; }; fi
  (nvcc -O3 -std=c++17 -arch="$arch" ${NVCCFLAGS:-} -Xptxas -v -o "$d/harness" "$d/harness.cu" >"$d/build.log" 2>&1 || echo "variant $name: build failed (see $d/build.log)") &
done
wait
for v in "${vs[@]}"; do
  name=${v%%:*} d="$out/v-$name"
  [ -x "$d/harness" ] || { tail -20 "$d/build.log"; continue; }
  # ptxas -v: per BLM entry point, its spill stores and registers.
  grep -A3 "Compiling entry function 'lithos_blm_.*_r[18]'" "$d/build.log" | grep -oE "entry function 'lithos_blm_[a-z0-9_]+'|[0-9]+ bytes spill stores|Used [0-9]+ registers" | paste - - - | sed "s/^/$name /" >"$d/regs.txt" 2>/dev/null
  if [ -n "${DUMP:-}" ]; then mkdir -p "$out/dump"; fi
  DUMP=${DUMP:+$out/dump} "$d/harness" "$out/cases.sel" "$name" | tee "$d/result.txt"
done
