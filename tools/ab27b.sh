#!/usr/bin/env bash
# ab27b.sh: A/B of several lithos-run builds on the 27B-shaped bundle in one device call
# (docs/performance.md §3.3p and §8.13 were measured this way). On the Go machine build each
# variant into its own folder and carry them with the pack binary in one xz tar (the call's
# 64 MiB limit counts the tracked tree too) — tools/abprep.sh does all of it, wrappers included,
# e.g. `tools/abprep.sh base=044e425 ab=HEAD q3=ab:CONV_AB_QUADS=3u`; by hand:
#   for v in base new; do (worktree of v) CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o /tmp/nb/$v/lithos-run ./cmd/lithos-run; done
#   CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o /tmp/nb/lithos-pack ./cmd/lithos-pack
#   tar cf - -C /tmp/nb . | xz -9e > bin/nb.tar.xz
# then on the GPU machine, from the repository root:
#   TAR=bin/nb.tar.xz ORDER="new base new base" OUT=$OUT tools/ab27b.sh
# Each name in ORDER runs `lithos-run bench --backend cuda --context 4096 --max-tokens 64 --runs 2`
# once, in that order (interleave them: the clocks drift within a call). SELFCHECK=NAME adds the
# first-use self-check of that build. TIMELINE=NAME adds, with that build, the two timelines of
# LITHOS_CUDA_TIMELINE summed by tools/timeline.py (docs/performance.md §3.3t): a speculative
# round (one bench run) into $OUT/timeline-round.txt, and a full 16-row prefill chunk (generate
# --no-draft with a 1,024-token prompt and one token: the last replay of a chunk before the
# last) into $OUT/timeline-prefill.txt; their per-launch lines go into ab-runs.tgz. Everything goes to $OUT/ab.log as it happens — not through
# a pipe, so a call cut off by its time limit still returns what was measured — one summary line
# per run; each run's JSON and stderr (ab-NAME-I.json, .err) go to $OUT/runs/ while it runs
# and into $OUT/ab-runs.tgz at the end (the device call returns at most 8 files: this leaves
# ab.log, ab-runs.tgz and the self-check's two, room for a caller's own; in the one call seen
# with too many, the first 8 by name came back, and ab.log sorts before runs/). An A/B switch of one build
# (LITHOS_CUDA_PUSH=0, LITHOS_CUDA_MMA=0, LITHOS_CUDA_DEFINES=BLMX_SX=12, …) runs as a build of
# its own: /tmp/nb/NAME/lithos-run a two-line script,
#   #!/bin/sh
#   LITHOS_CUDA_PUSH=0 exec /tmp/nb/new/lithos-run "$@"
# (chmod +x), carried in the tar beside the binaries.
set -u
[ -n "${ORDER:-}" ] || { echo "ab27b.sh: ORDER names the builds in /tmp/nb to run" >&2; exit 2; }
command -v nvidia-smi >/dev/null || { echo "ab27b.sh: no nvidia-smi: run it on the GPU machine" >&2; exit 1; }
ROOT=$(pwd)
OUT=$(realpath -m "${OUT:-/tmp/ab27b}")
R=$OUT/runs
mkdir -p "$OUT" "$R" /tmp/nb /tmp/w
L=$OUT/ab.log
exec >>"$L" 2>&1
[ -f "${TAR:-bin/nb.tar.xz}" ] && xz -dc "${TAR:-bin/nb.tar.xz}" | tar xf - -C /tmp/nb
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
cd /tmp/w
if [ ! -e q.lithos ]; then
  cp /tmp/nb/lithos-pack . && chmod +x lithos-pack || { echo "no /tmp/nb/lithos-pack"; exit 1; }
  ./lithos-pack synth --random qwen3.8-27b-nvfp4 --text-only -o T >/dev/null 2>&1 || echo synth T failed
  ./lithos-pack synth --random dspark-qwen3.8-27b-bf16 -o H >/dev/null 2>&1 || echo synth H failed
  ./lithos-pack pack T --draft H -o q.lithos >/dev/null 2>&1 || echo pack failed
  rm -rf T H
fi
echo "bundle ready at $(( $(date +%s) - t0 )) s"
i=0
for v in $ORDER; do
  i=$((i + 1))
  j=$R/ab-$v-$i.json
  if timeout "${BENCH_T:-120}" /tmp/nb/$v/lithos-run bench q.lithos --backend cuda --context 4096 --max-tokens 64 --runs 2 --json >"$j" 2>"$R/ab-$v-$i.err"; then
    python3 -c "
import json,sys; d=json.load(open(sys.argv[1])); p=d['plain']; ss=d['speculative']['speculative']; q=d['passes']; r=q.get('round') or {}
print(sys.argv[2], 'plain %.1f tok/s %.3fx'%(p['decode_tok_per_s'],p['x_floor']), 'prefill %.0f'%p['prefill_tok_per_s'], 'draft %.2f verify %.2f ms'%(ss['draft_ms_per_round'],ss['verify_ms_per_round']), 'round %.2f ms %.3fx'%(r.get('ms',0),q.get('round_over_verify',0)), 'spec %.1f tok/s'%d['speculative']['decode_tok_per_s'], 'identical', d.get('identical'), 'floor', round(d['read_gb_per_s']))" "$j" "$v"
  else
    echo "$v failed:"; tail -n 3 "$R/ab-$v-$i.err"
  fi
  echo "  at $(( $(date +%s) - t0 )) s"
done
if [ -n "${SELFCHECK:-}" ]; then
  LITHOS_SELFCHECK=force timeout 90 /tmp/nb/$SELFCHECK/lithos-run generate q.lithos --prompt-ids 1,2,3 --max-tokens 4 --json >"$OUT/selfcheck.json" 2>"$OUT/selfcheck.err"
  echo "selfcheck $SELFCHECK rc=$?"; grep -i "self-check" "$OUT/selfcheck.err" | tail -n 3
fi
if [ -n "${TIMELINE:-}" ]; then
  LITHOS_CUDA_TIMELINE=/tmp/tl-round.bin timeout 150 /tmp/nb/$TIMELINE/lithos-run bench q.lithos --backend cuda --context 4096 --max-tokens 64 --runs 1 --json >"$R/tl-round.json" 2>"$R/tl-round.err"
  echo "timeline round $TIMELINE rc=$?"
  python3 "$ROOT/tools/timeline.py" /tmp/tl-round.bin --launches "$R/tl-round-launches.txt" >"$OUT/timeline-round.txt" 2>&1
  head -n 30 "$OUT/timeline-round.txt"
  LITHOS_CUDA_TIMELINE=/tmp/tl-prefill.bin timeout 150 /tmp/nb/$TIMELINE/lithos-run generate q.lithos --backend cuda --context 2048 --no-draft --prompt-ids "$(seq -s, 1 1024)" --max-tokens 1 --json >"$R/tl-prefill.json" 2>"$R/tl-prefill.err"
  echo "timeline prefill $TIMELINE rc=$?"
  python3 "$ROOT/tools/timeline.py" /tmp/tl-prefill.bin --launches "$R/tl-prefill-launches.txt" >"$OUT/timeline-prefill.txt" 2>&1
  head -n 30 "$OUT/timeline-prefill.txt"
  rm -f /tmp/tl-round.bin /tmp/tl-prefill.bin
fi
tar -C "$OUT" -czf "$OUT/ab-runs.tgz" runs && rm -rf "$R"
echo "done at $(( $(date +%s) - t0 )) s"
