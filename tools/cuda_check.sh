#!/usr/bin/env bash
# cuda_check.sh: every GPU test and device measurement of lithos in one call.
#
#   tools/cuda_check.sh build     on the Go machine: CGO_ENABLED=0 test binaries into bin/
#                                 (bin/ is git-ignored; carry it to the GPU machine)
#   tools/cuda_check.sh run       on the GPU machine, from the repository root: runs them with
#                                 LITHOS_CUDA_REQUIRE=1 (a missing GPU fails instead of
#                                 skipping), the device-check benchmarks once each, and leaves
#                                 the logs in $OUT (default /tmp/lithos-cuda-check), tarred into
#                                 $OUT/cuda-check.tgz. With SLICE_LAYERS=N (N > 0),
#                                 BenchmarkBundleDecode first writes and packs the first N layers
#                                 of the 27B-shaped checkpoint (random weights in the real
#                                 formats, as tools/mkckpt) and decodes it. With PROFILE=1 it
#                                 ends with Nsight Compute on the NVFP4 matrix kernels
#                                 (BenchmarkBLMOne) into $OUT/logs/ncu-blm.txt. TESTS=REGEXP and
#                                 BENCH=REGEXP select the tests and benchmarks (default: all;
#                                 BENCH=none skips them); SLICE_LAYERS also sizes
#                                 BenchmarkSpecRound (the round on the slice with the 27B-shaped
#                                 DSpark head). The session, speculative and target tests run a
#                                 second time with LITHOS_CUDA_MMA=0 (the BLM kernels instead of
#                                 the MMA-layout ones; MMA=0 skips it, MMA_TESTS=REGEXP selects).
#   BIN=DIR (both steps) keeps the binaries in DIR instead of bin/ (helpers building at once).
#   LITHOS_CUDA_EMULATE=1 go test ./runtime/backend/cuda   the same tests on this machine, on a
#                                 CPU emulator of the driver (emulator_test.go; needs clang++;
#                                 LITHOS_CUDA_EMULATE_MMA=1: the GPU's tensor-core BLM path and
#                                 fragment-major weights, slower)
#
# The binaries are stripped and gzipped (bin/*.test.gz) so that they travel within the device
# machine's 64 MiB working-tree limit; `run` unpacks them into /tmp.
# The GPU machine has no Go toolchain; the binaries need only libcuda.so.1 and libnvrtc.so.*.
# Extra arguments to `run` go to every test binary (e.g. -test.run TestLaunch).
set -u -o pipefail
cd "$(dirname "$0")/.."

# name of the test binary : package directory (the binary runs there: testdata paths are
# relative to it)
PKGS=(
  "cuda:runtime/backend/cuda"
)

BIN=${BIN:-bin}
case "${1:-}" in
build)
  mkdir -p "$BIN"
  for p in "${PKGS[@]}"; do
    name=${p%%:*} dir=${p#*:}
    echo "build $BIN/$name.test ($dir)"
    CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go test -c -ldflags=-s -o "$BIN/$name.test" "./$dir" || exit 1
    gzip -9f "$BIN/$name.test" || exit 1
  done
  { git rev-parse HEAD; git status --porcelain | grep -q . && echo "dirty: uncommitted changes"; } >"$BIN/COMMIT" 2>/dev/null
  cat "$BIN/COMMIT"
  ;;
run)
  shift
  OUT=${OUT:-/tmp/lithos-cuda-check}
  mkdir -p "$OUT/logs"
  export LITHOS_CUDA_REQUIRE=1
  export LITHOS_CUDA_CACHE=${LITHOS_CUDA_CACHE:-/tmp/lithos-cuda-cache}
  root=$(pwd)
  {
    echo "commit: $(cat "$BIN/COMMIT" 2>/dev/null | tr '\n' ' ')"
    date -u +"date: %Y-%m-%dT%H:%M:%SZ"
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw --format=csv
    nvidia-smi | head -4 | tail -2
  } 2>&1 | tee "$OUT/logs/gpu.txt"
  status=0
  export LITHOS_CUDA_SLICE_LAYERS=${SLICE_LAYERS:-0}
  mkdir -p /tmp/lithos-bin
  for p in "${PKGS[@]}"; do
    name=${p%%:*} dir=${p#*:}
    bin=/tmp/lithos-bin/$name.test
    [ -f "$root/$BIN/$name.test.gz" ] && gunzip -c "$root/$BIN/$name.test.gz" >"$bin" && chmod +x "$bin"
    if [ ! -x "$bin" ]; then
      echo "missing $bin: run tools/cuda_check.sh build on the Go machine and carry bin/" | tee -a "$OUT/logs/summary.txt"
      status=1
      continue
    fi
    echo "== $name: tests" | tee -a "$OUT/logs/summary.txt"
    (cd "$dir" && timeout 240 "$bin" -test.v -test.count=1 -test.timeout 230s -test.run "${TESTS:-.}" "$@") >"$OUT/logs/$name-test.log" 2>&1
    rc=$?
    grep -E '^(--- |ok|FAIL|PASS|panic)' "$OUT/logs/$name-test.log" | tee -a "$OUT/logs/summary.txt"
    echo "rc=$rc" | tee -a "$OUT/logs/summary.txt"
    [ $rc -eq 0 ] || status=1
    if [ "${MMA:-1}" = 1 ]; then
      # The sessions again with the BLM matrix kernels instead of the MMA-layout ones
      # (LITHOS_CUDA_MMA=0; docs/performance.md §3.3j), so both paths stay tested. MMA=0 skips
      # this pass.
      echo "== $name: session tests with LITHOS_CUDA_MMA=0" | tee -a "$OUT/logs/summary.txt"
      (cd "$dir" && LITHOS_CUDA_MMA=0 timeout 240 "$bin" -test.v -test.count=1 -test.timeout 230s \
        -test.run "${MMA_TESTS:-TestSession|TestSpec|TestBackendLoad|TestTarget}" "$@") >"$OUT/logs/$name-test-mma.log" 2>&1
      rc=$?
      grep -E '^(--- |ok|FAIL|PASS|panic)' "$OUT/logs/$name-test-mma.log" | tee -a "$OUT/logs/summary.txt"
      echo "rc=$rc" | tee -a "$OUT/logs/summary.txt"
      [ $rc -eq 0 ] || status=1
    fi
    [ "${BENCH:-.}" = none ] && continue
    echo "== $name: benchmarks" | tee -a "$OUT/logs/summary.txt"
    (cd "$dir" && timeout 200 "$bin" -test.run '^$' -test.bench "${BENCH:-.}" -test.benchtime 1x -test.v -test.timeout 190s "$@") >"$OUT/logs/$name-bench.log" 2>&1
    rc=$?
    grep -E '^(Benchmark|ok|FAIL|PASS|panic)|bench_test.go' "$OUT/logs/$name-bench.log" | tee -a "$OUT/logs/summary.txt"
    echo "rc=$rc" | tee -a "$OUT/logs/summary.txt"
    [ $rc -eq 0 ] || status=1
  done
  if [ "${PROFILE:-0}" = 1 ]; then
    ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
    echo "== Nsight Compute ($ncu): the NVFP4 BLM kernels of BenchmarkBLMOne" | tee -a "$OUT/logs/summary.txt"
    (cd runtime/backend/cuda && timeout 120 "$ncu" --clock-control none -k regex:lithos_blm_nvfp4 --launch-count 4 \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section LaunchStats --section Occupancy \
      /tmp/lithos-bin/cuda.test -test.run '^$' -test.bench BLMOne -test.benchtime 1x) >"$OUT/logs/ncu-blm.txt" 2>&1
    echo "rc=$?" | tee -a "$OUT/logs/summary.txt"
    grep -E "lithos_blm|Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Registers Per" "$OUT/logs/ncu-blm.txt" | head -40 | tee -a "$OUT/logs/summary.txt"
  fi
  tar -C "$OUT" -czf "$OUT/cuda-check.tgz" logs
  exit $status
  ;;
*)
  sed -n '2,/^set -u/p' "$0" | sed '$d'  # the header
  exit 2
  ;;
esac
