#!/usr/bin/env bash
# Pack benchmark (issue 5): pack a multi-GB synthetic checkpoint of random data with the 27B's
# real widths, formats and layout (tools/mkckpt: nvidia/Qwen3.8-27B-NVFP4's spec cut to its first
# LAYERS decoder layers, vision tower and MTP block left out) and copy the same files with a plain
# `cp -r`, in the same run, from a warm page cache; report pack throughput in GB/s of checkpoint
# bytes (GB = 1e9), the ratio to cp (and to cp followed by sync: the pack fsyncs its bundle), and
# lithos-pack's peak RSS (GNU time's "Maximum resident set size").
#
# Two sources, the same bytes: a plain directory (the pack also computes every shard's sha256,
# while it packs: pack/srchash.go) and an HF cache snapshot of it (hard links; what
# `lithos-pack fetch` or `pack REPO_ID` leaves), where the sha256 are the blob names hub verified
# at download. cp copies the plain directory with `cp -r` and the snapshot with `cp -rL`.
#
#   tools/bench_pack.sh [LAYERS] [WORKDIR]      e.g. tools/bench_pack.sh 12 /tmp/lithos-bench-pack
#
# LAYERS defaults to 12 (6.4 GB of tensors: embedding 2.54 GB, lm_head 0.72 GB, 12 layers of
# 0.26 GB). FULL=1 packs the whole 27B inventory instead (64 layers, vision tower and MTP:
# 21.9 GB; needs about 3 × that of free disk, or set NOCP=1 to skip cp). REPS=N repeats the
# cp / pack pair N times. VERIFY=1 also times `lithos-pack verify`. SOURCES=plain or SOURCES=hf
# runs one source only (default both: a FULL=1 run of both takes about 3 minutes after the
# checkpoint is written, 12 layers about 1). The checkpoint is kept in WORKDIR between runs.
# On a shared machine each run prints the load average and the pack's CPU time (user + sys, and
# the cores it kept busy on average), which other jobs change less than the wall times;
# AUTOGROUP_NICE=-20 (Linux, as root) runs the benchmark's session at that autogroup nice, so
# that cp and the pack get most of the CPU back from other sessions' jobs (docs/bundle.md §8).
#
# Needs: go, GNU time (/usr/bin/time), bc.
set -euo pipefail
layers=${1:-12}
work=${2:-$(mktemp -d /tmp/lithos-bench-pack.XXXX)}
reps=${REPS:-1}
if [ -n "${AUTOGROUP_NICE:-}" ]; then
  echo "$AUTOGROUP_NICE" > /proc/self/autogroup
  trap 'echo 0 > /proc/self/autogroup' EXIT
fi
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$work/bin"
( cd "$root" && CGO_ENABLED=0 go build -o "$work/bin/lithos-pack" ./cmd/lithos-pack && go build -o "$work/bin/mkckpt" ./tools/mkckpt )

if [ "${FULL:-0}" = 1 ]; then
  ckpt="$work/ckpt-full"; gen=(-layers 0 -vision -mtp)
else
  ckpt="$work/ckpt-$layers"; gen=(-layers "$layers" -shard-bytes 2000000000)
fi
if [ ! -f "$ckpt/config.json" ] || [ ! -d "$work/hub/models--bench--$(basename "$ckpt")" ]; then
  rm -rf "$ckpt"
  echo "writing the random checkpoint $ckpt ..." >&2
  rm -rf "$work/hub/models--bench--$(basename "$ckpt")"
  "$work/bin/mkckpt" -spec qwen3.8-27b-nvfp4 "${gen[@]}" -o "$ckpt" -hf-cache "$work/hub" -repo "bench/$(basename "$ckpt")" >&2
fi
snap=$(ls -d "$work/hub/models--bench--$(basename "$ckpt")"/snapshots/* | head -1)
bytes=$(cat "$ckpt"/*.safetensors "$ckpt"/*.json | wc -c)

now() { date +%s.%N; }
nproc_=$(nproc)
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $nproc_ cores, $(free -g | awk '/Mem:/ {print $2}') GiB; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
printf "checkpoint      %s: %.3f GB in %d files\n" "$ckpt" "$(echo "$bytes/1000000000" | bc -l)" "$(ls "$ckpt" | wc -l)"
bench() { # NAME SOURCE CP_FLAGS
local name=$1 src=$2 cpf=$3
for rep in $(seq "$reps"); do
  cat "$ckpt"/* > /dev/null   # both read from the page cache
  rm -rf "$work/cp" "$work/out.lithos"; sync
  if [ "${NOCP:-0}" != 1 ]; then
    t0=$(now); cp $cpf "$src" "$work/cp"; t1=$(now); sync; t2=$(now)
    rm -rf "$work/cp"; sync
  fi
  cat "$ckpt"/* > /dev/null
  t3=$(now)
  /usr/bin/time -v "$work/bin/lithos-pack" pack "$src" -o "$work/out.lithos" >"$work/pack.out" 2>"$work/pack.time"
  t4=$(now)
  rss_kb=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$work/pack.time")
  cpu=$(awk -F': ' -v p="$(echo "$t4 - $t3" | bc)" '/User time/ {u=$2} /System time/ {s=$2} END {printf "user %.1f s, sys %.1f s: %.2f cores", u, s, (u+s)/p}' "$work/pack.time")
  echo "$name, run $rep (load $(cut -d' ' -f1-3 /proc/loadavg))"
  if [ "${NOCP:-0}" != 1 ]; then
    awk -v b="$bytes" -v c="$(echo "$t1 - $t0" | bc)" -v cs="$(echo "$t2 - $t0" | bc)" -v p="$(echo "$t4 - $t3" | bc)" 'BEGIN {
      printf "  cp %-12s %6.2f s  %.3f GB/s (page cache, not synced)\n", cpf, c, b/1e9/c
      printf "  cp + sync       %6.2f s  %.3f GB/s\n", cs, b/1e9/cs
      printf "  lithos-pack     %6.2f s  %.3f GB/s (checks, BLM packing, sha256, fsync, rename)\n", p, b/1e9/p
      printf "  ratio           %.2f x cp, %.2f x cp+sync\n", c/p, cs/p
    }'
  else
    awk -v b="$bytes" -v p="$(echo "$t4 - $t3" | bc)" 'BEGIN { printf "  lithos-pack     %6.2f s  %.3f GB/s\n", p, b/1e9/p }'
  fi
  echo "  peak RSS        $(echo "scale=1; $rss_kb/1024" | bc) MB (lithos-pack pack; $cpu)"
  if [ "${VERIFY:-0}" = 1 ]; then
    t5=$(now); "$work/bin/lithos-pack" verify "$work/out.lithos" >/dev/null; t6=$(now)
    echo "  verify          $(echo "$t6 - $t5" | bc) s"
  fi
  rm -rf "$work/out.lithos"
done
}
case "${SOURCES:-both}" in
  plain) bench "plain directory" "$ckpt" "-r" ;;
  hf) bench "HF cache snapshot" "$snap" "-rL" ;;
  *) bench "plain directory" "$ckpt" "-r"; bench "HF cache snapshot" "$snap" "-rL" ;;
esac
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
head -4 "$work/pack.out"
