#!/usr/bin/env bash
# Fetch benchmark (issue 2): on loopback against `lithos-pack hub serve`, fetch one
# random file of SIZE (default 4G) with `lithos-pack fetch` and with a single-stream
# `curl -L -o` of the same resolve URL, in the same run, and report throughput as a
# ratio to curl plus lithos-pack's peak RSS (GNU time's "Maximum resident set size").
#
#   tools/bench_fetch.sh [SIZE] [WORKDIR]      e.g. tools/bench_fetch.sh 4G /tmp/lithos-bench
#
# Needs: go, curl, GNU time (/usr/bin/time), about 3×SIZE of free disk in WORKDIR.
set -euo pipefail
size=${1:-4G}
work=${2:-$(mktemp -d /tmp/lithos-bench-fetch.XXXX)}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$work/bin" "$work/hub/bench/random"
( cd "$root" && CGO_ENABLED=0 go build -o "$work/bin/lithos-pack" ./cmd/lithos-pack )
blob="$work/hub/bench/random/random.bin"
if [ ! -f "$blob" ] || [ "$(stat -c %s "$blob")" != "$(numfmt --from=iec "$size")" ]; then
  echo "making $size of random bytes..." >&2
  head -c "$size" /dev/urandom > "$blob"
fi
port=$(( 20000 + RANDOM % 20000 ))
"$work/bin/lithos-pack" hub serve "$work/hub" --addr "127.0.0.1:$port" 2>"$work/serve.log" &
srv=$!
trap 'kill $srv 2>/dev/null || true' EXIT
for _ in $(seq 100); do curl -fsS "http://127.0.0.1:$port/api/models/bench/random" >/dev/null 2>&1 && break; sleep 0.1; done
# Warm up: the server hashes LFS files on first listing; keep that out of the timings.
curl -fsS "http://127.0.0.1:$port/api/models/bench/random/tree/main?recursive=true" >/dev/null
url="http://127.0.0.1:$port/bench/random/resolve/main/random.bin"
bytes=$(stat -c %s "$blob")

runs=${RUNS:-3}
workers=${WORKERS:-8}
: > "$work/times"
for i in $(seq "$runs"); do
  rm -f "$work/curl.bin"
  t0=$(date +%s.%N)
  curl -fsS -L -o "$work/curl.bin" "$url"
  tc=$(date +%s.%N)
  sync "$work/curl.bin"   # lithos-pack fsyncs before it publishes; time curl's bytes to disk too
  t1=$(date +%s.%N)
  rm -rf "$work/cache"
  HF_HUB_CACHE="$work/cache" HF_ENDPOINT="http://127.0.0.1:$port" \
    /usr/bin/time -v "$work/bin/lithos-pack" fetch bench/random --max-workers "$workers" >"$work/fetch.out" 2>"$work/fetch.time"
  t2=$(date +%s.%N)
  rss_kb=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$work/fetch.time")
  cmp -s "$work/curl.bin" "$(cat "$work/fetch.out")/random.bin" || { echo "fetched bytes differ from curl's" >&2; exit 1; }
  echo "$(echo "$tc - $t0" | bc) $(echo "$t1 - $t0" | bc) $(echo "$t2 - $t1" | bc) $rss_kb" >> "$work/times"
done
echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), load $(cut -d' ' -f1-3 /proc/loadavg); $runs runs, lithos-pack --max-workers $workers"
med() { sort -n | awk '{ v[NR]=$1 } END { print v[int((NR+1)/2)] }'; }
c=$(cut -d' ' -f1 "$work/times" | med); cs=$(cut -d' ' -f2 "$work/times" | med); l=$(cut -d' ' -f3 "$work/times" | med)
rss_kb=$(cut -d' ' -f4 "$work/times" | sort -n | tail -1)
awk -v b="$bytes" -v c="$c" -v cs="$cs" -v l="$l" -v r="$rss_kb" 'BEGIN {
  printf "file            %.3f GB\n", b/1e9
  printf "curl -L -o      median %.2f s  %.3f GB/s (single stream, no hash, data left in the page cache)\n", c, b/1e9/c
  printf "curl + sync     median %.2f s  %.3f GB/s (same, then its file synced to disk)\n", cs, b/1e9/cs
  printf "lithos-pack     median %.2f s  %.3f GB/s (parallel ranges + sha256 + fsync + publish)\n", l, b/1e9/l
  printf "ratio           %.2f x curl, %.2f x curl+sync (throughput, medians)\n", c/l, cs/l
  printf "peak RSS        %.1f MB (lithos-pack fetch, max over runs)\n", r/1024
}'
rm -f "$work/curl.bin"; rm -rf "$work/cache"
