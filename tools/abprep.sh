#!/usr/bin/env bash
# abprep.sh: on the Go machine, builds the lithos-run variants that tools/ab27b.sh compares on
# the GPU machine and packs them into one xz tar to carry (docs/performance.md §3.3p, §3.3x).
#   tools/abprep.sh base=044e425 ab=HEAD q3=ab:CONV_AB_QUADS=3u rx12=ab:BLMX_RX=12u
# NAME=REV builds /tmp/nb/NAME/lithos-run from commit REV (a detached worktree; WORKTREE for the
# working tree itself, uncommitted changes included); NAME=BUILD:D1,D2 is a two-line wrapper
# that runs BUILD's binary with LITHOS_CUDA_DEFINES="D1 D2" (the kernels' Overridable
# constants: one binary, one NVRTC compile per define set); NAME=BUILD+A1,A2,… a wrapper that
# appends the arguments A1 A2 … to BUILD's bench command lines (later flags win; other commands,
# such as ab27b.sh's SELFCHECK generate, run unchanged), e.g. a long context with each cache:
#   kv32=ab+--context,16448,--prompt-tokens,16000,--max-tokens,16,--runs,1,--kv-cache,f32
#   kv16=ab+--context,16448,--prompt-tokens,16000,--max-tokens,16,--runs,1,--kv-cache,bf16
# (two 16,000-token prefills per bench run at ≈ 800 tok/s on the 27B: give ab27b.sh BENCH_T=300);
# NAME=BUILD@V1=X1,V2=X2 a wrapper that runs BUILD's binary (or wrapper) with those environment
# variables, e.g. t1=ab@LITHOS_CUDA_TILES=1 (an A/B switch of the runtime).
# lithos-pack and the CUDA test binary (cuda.test, stripped: for TestKernelModule's registers
# with a define) come from the working tree. The tar goes to ${TAR:-bin/nb.tar.xz} (bin/ is ignored by git); it fails when the
# tracked files and the tar together pass the device call's 64 MiB. Then, there:
#   TAR=bin/nb.tar.xz ORDER="q3 ab base rx12 q3 ab base" SELFCHECK=q3 OUT=$OUT tools/ab27b.sh
set -euo pipefail
[ $# -gt 0 ] || { sed -n '2,19p' "$0" >&2; exit 2; }
root=$(git rev-parse --show-toplevel)
cd "$root"
NB=/tmp/nb
TAR=${TAR:-bin/nb.tar.xz}
rm -rf "$NB"
mkdir -p "$NB" "$(dirname "$TAR")"
export CGO_ENABLED=0
build() { # build DIR OUT: lithos-run from the tree at DIR
  (cd "$1" && go build -trimpath -ldflags='-s -w' -o "$2" ./cmd/lithos-run)
}
declare -A built
for spec in "$@"; do
  name=${spec%%=*}
  val=${spec#*=}
  [[ "$name" =~ ^[a-z0-9_]+$ && "$spec" == *=* && -n "$val" ]] || { echo "abprep: $spec: want NAME=REV, NAME=BUILD:DEFINES, NAME=BUILD+ARGS or NAME=BUILD@ENV (NAME lower-case letters, digits, _)" >&2; exit 2; }
  mkdir -p "$NB/$name"
  if [[ "$val" =~ ^([a-z0-9_]+)@([A-Z0-9_]+=[A-Za-z0-9_.-]*(,[A-Z0-9_]+=[A-Za-z0-9_.-]*)*)$ ]]; then
    base=${BASH_REMATCH[1]}
    env=${BASH_REMATCH[2]}
    [ -n "${built[$base]:-}" ] || { echo "abprep: $spec: build $base must come before it" >&2; exit 2; }
    printf '#!/bin/sh
%s exec %s/%s/lithos-run "$@"
' "${env//,/ }" "$NB" "$base" >"$NB/$name/lithos-run"
    chmod +x "$NB/$name/lithos-run"
  elif [[ "$val" =~ ^([a-z0-9_]+)\+(.+)$ && -n "${built[${BASH_REMATCH[1]}]:-}" ]]; then
    base=${BASH_REMATCH[1]}
    args=${BASH_REMATCH[2]}
    [[ "$args" =~ ^[A-Za-z0-9_.=,-]+$ ]] || { echo "abprep: $spec: arguments of letters, digits and . _ = - only, comma-separated" >&2; exit 2; }
    printf '#!/bin/sh\ncase "$1" in\nbench) exec %s/%s/lithos-run "$@" %s ;;\n*) exec %s/%s/lithos-run "$@" ;;\nesac\n' "$NB" "$base" "${args//,/ }" "$NB" "$base" >"$NB/$name/lithos-run"
    chmod +x "$NB/$name/lithos-run"
  elif [[ "$val" == *:* ]]; then
    base=${val%%:*}
    defs=${val#*:}
    [ -n "${built[$base]:-}" ] || { echo "abprep: $spec: build $base must come before it" >&2; exit 2; }
    printf '#!/bin/sh\nLITHOS_CUDA_DEFINES="%s" exec %s/%s/lithos-run "$@"\n' "${defs//,/ }" "$NB" "$base" >"$NB/$name/lithos-run"
    chmod +x "$NB/$name/lithos-run"
  elif [ "$val" = WORKTREE ]; then
    build "$root" "$NB/$name/lithos-run"
  else
    rev=$(git rev-parse --verify "$val^{commit}")
    wt=/tmp/abprep-$rev
    [ -d "$wt" ] || git worktree add -q --detach "$wt" "$rev"
    build "$wt" "$NB/$name/lithos-run"
  fi
  built[$name]=1
  echo "$name: $val"
done
go build -trimpath -ldflags='-s -w' -o "$NB/lithos-pack" ./cmd/lithos-pack
go test -c -trimpath -ldflags='-s -w' -o "$NB/cuda.test" ./runtime/backend/cuda
tar cf - -C "$NB" . | xz -9e -T2 >"$TAR.tmp"
mv "$TAR.tmp" "$TAR"
tracked=$(git ls-files -z | xargs -0 du -cb | tail -n 1 | cut -f1)
size=$(stat -c %s "$TAR")
echo "$TAR: $size bytes; with the tracked files $((tracked + size)) of $((64 << 20))"
[ $((tracked + size)) -lt $((64 << 20)) ] || { echo "abprep: over the device call's 64 MiB: fewer builds" >&2; exit 1; }
