#!/usr/bin/env bash
# bench27b.sh: the 27B-shaped bundle's measurements of docs/performance.md §8.2, in one device
# call. On the Go machine build the two binaries into a folder the call carries:
#   mkdir -p .carry2 && for c in lithos-pack lithos-run; do
#     CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o /tmp/$c ./cmd/$c && xz -c /tmp/$c > .carry2/$c.xz; done
# then on the GPU machine, from the repository root:
#   BIN=.carry2 OUT=$OUT tools/bench27b.sh
# It synthesizes the 27B-shaped target (random weights in the real formats) and its DSpark head,
# packs them (~50 s; kept in /tmp/w while the machine lives), runs `lithos-run bench` with the
# BLM kernels' thread-block clusters on and off (MODES="on off"; LITHOS_CUDA_CLUSTERS=0 is off;
# the mode blm runs with LITHOS_CUDA_MMA=0: the BLM kernels instead of the MMA-layout ones,
# docs/performance.md §3.3j; noov with LITHOS_CUDA_OVERLAP=0: no programmatic dependent launch,
# §3.3k; nopush with LITHOS_CUDA_PUSH=0: the MMA-layout products' clusters read each other's
# partial sums instead of pushing them, §3.3o; rpcN with --rounds-per-call N: N decode steps
# queued per device call, §8.10; cfN with LITHOS_CUDA_CLUSTER_FIRST=N: the MMA-layout products
# try clusters of N first, cf2 being the split before §8.10),
# optionally the first-use self-check of --backend auto (SELFCHECK=1), and Nsight Compute's
# per-kernel durations of a speculative generate (NCU=1; ncu.csv.gz in $OUT, summed per kernel
# and grid as in §8.2). SNAPSHOT=N adds `--snapshot N` (a prefix checkpoint of N tokens copied out
# and back). Results: $OUT/bench-<mode>.json, one summary line per mode.
set -u
BIN=${BIN:-.carry2}
OUT=${OUT:-/tmp/bench27b}
mkdir -p "$OUT"
W=/tmp/w
mkdir -p $W
for c in lithos-pack lithos-run; do
  if [ -f "$BIN/$c.xz" ]; then xz -dc "$BIN/$c.xz" >$W/$c; else cp "$BIN/$c" $W/$c; fi
  chmod +x $W/$c
done
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
cd $W
if [ ! -e q.lithos ]; then
  ./lithos-pack synth --random qwen3.8-27b-nvfp4 --text-only -o T >/dev/null 2>&1 || echo synth T failed
  ./lithos-pack synth --random dspark-qwen3.8-27b-bf16 -o H >/dev/null 2>&1 || echo synth H failed
  ./lithos-pack pack T --draft H -o q.lithos >/dev/null 2>&1 || echo pack failed
  rm -rf T H
fi
for mode in ${MODES:-on off}; do
  if [ "$mode" = off ]; then export LITHOS_CUDA_CLUSTERS=0; else unset LITHOS_CUDA_CLUSTERS; fi
  if [ "$mode" = blm ]; then export LITHOS_CUDA_MMA=0; else unset LITHOS_CUDA_MMA; fi
  if [ "$mode" = noov ]; then export LITHOS_CUDA_OVERLAP=0; else unset LITHOS_CUDA_OVERLAP; fi
  if [ "$mode" = nopush ]; then export LITHOS_CUDA_PUSH=0; else unset LITHOS_CUDA_PUSH; fi
  case "$mode" in cf*) export LITHOS_CUDA_CLUSTER_FIRST=${mode#cf} ;; *) unset LITHOS_CUDA_CLUSTER_FIRST ;; esac
  rpc=0
  case "$mode" in rpc*) rpc=${mode#rpc} ;; esac
  ./lithos-run bench q.lithos --backend cuda --context 4096 --max-tokens 64 --runs 2 --rounds-per-call $rpc ${SNAPSHOT:+--snapshot $SNAPSHOT} --json >"$OUT/bench-$mode.json" 2>"$OUT/bench-$mode.err"
  python3 -c "
import json; d=json.load(open('$OUT/bench-$mode.json')); p=d['plain']; ss=d['speculative']['speculative']
q=d['passes']; r=q.get('round') or {}
print('$mode', 'plain %.1f tok/s %.3fx'%(p['decode_tok_per_s'],p['x_floor']), 'prefill %.0f'%p['prefill_tok_per_s'], 'draft %.2f verify %.2f ms'%(ss['draft_ms_per_round'],ss['verify_ms_per_round']), 'round %.2f ms %.3fx verify'%(r.get('ms',0),q.get('round_over_verify',0)), 'spec %.1f tok/s'%d['speculative']['decode_tok_per_s'], 'identical', d.get('identical'), 'floor', round(d['read_gb_per_s']))
n=d.get('snapshot')
if n: print('$mode', 'snapshot %d tokens %.1f MB: out %.1f ms (%.2f GB/s), back %.1f ms (%.2f GB/s), no-sample prefill %.0f ms'%(n['tokens'],n['bytes']/1e6,n['snapshot_seconds']*1e3,n['snapshot_gb_per_s'],n['restore_seconds']*1e3,n['restore_gb_per_s'],n['prefill_seconds']*1e3))"
done
unset LITHOS_CUDA_CLUSTERS LITHOS_CUDA_MMA LITHOS_CUDA_OVERLAP LITHOS_CUDA_PUSH LITHOS_CUDA_CLUSTER_FIRST
if [ "${SELFCHECK:-0}" = 1 ]; then
  LITHOS_SELFCHECK=force ./lithos-run generate q.lithos --prompt-ids 1,2,3 --max-tokens 4 --json >"$OUT/selfcheck.json" 2>"$OUT/selfcheck.err"
  echo "selfcheck+generate rc=$?"
  grep -i "self-check" "$OUT/selfcheck.err" | tail -3
fi
if [ "${NCU:-0}" = 1 ]; then
  timeout 300 ncu --cache-control none --clock-control none --metrics gpu__time_duration.sum --csv --page raw \
    ./lithos-run generate q.lithos --backend cuda --prompt-ids 1,2,3,4,5,6,7,8,9,10,11 --max-tokens 2 --context 512 \
    >"$OUT/ncu.csv" 2>"$OUT/ncu.err"
  tail -2 "$OUT/ncu.err"
  gzip -9f "$OUT/ncu.csv"
fi
