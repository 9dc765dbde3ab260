#!/usr/bin/env python3
"""timeline.py: where the time of a captured round goes, from the CUDA backend's timeline.

Reads the file that $LITHOS_CUDA_TIMELINE names (runtime/backend/cuda/timeline.go: a JSON
header line, then 64-byte records, one per threadgroup of every launch: start, end of the
entry's wait, end of the MMA-layout products' staging and main loop, exit, in ns of the
GPU's %globaltimer) and reports the last complete replay of the graph that ran last (a
speculative round when the run was `lithos-run bench` or a speculative `generate`):

  python3 tools/timeline.py TIMELINE [--launches FILE] [--json]

Per launch (threadgroups of one parameter record in one replay): the gap from the previous
launch's last exit to this launch's first wait release ("gap": what programmatic dependent
launch and the grid's drain cost), the median threadgroup's wait → staged → loop → exit, and
the spread of the exits (last − median: the slowest threadgroup's lead). Summed by kernel and
over the replay; docs/performance.md §3.3t has the numbers it printed.
"""
import argparse
import json
import statistics
import struct
import sys
from collections import defaultdict


def load(path):
    with open(path, "rb") as f:
        head = json.loads(f.readline())
        body = f.read()
    n = head["records"]
    if len(body) != n * 64:
        sys.exit(f"{path}: {len(body)} bytes of records, the header says {n} × 64")
    names = {int(k, 16): v for k, v in head["kernels"].items()}
    recs = []
    for w in struct.iter_unpack("<8Q", body):
        if w[1] == 0 or w[5] == 0:  # never written, or still running when copied
            continue
        kid = w[0] >> 32
        recs.append({"kernel": names.get(kid, f"{kid:08x}"), "block": w[0] & 0xFFFFFFFF, "start": w[1],
                     "waited": w[2], "staged": w[3], "looped": w[4], "end": w[5], "sm": w[6], "rec": w[7]})
    if head["next"] > n:
        print(f"# the ring wrapped: the last {n} of {head['next']} records", file=sys.stderr)
    return recs


def launches(recs, split_ns=200_000):
    """Groups the records into launches: one parameter record's threadgroups, split where
    their starts are more than split_ns apart (two replays of the same node). So two replays of
    a node less than split_ns apart would read as one launch, and a launch whose threadgroups
    start over more than split_ns (waves) as several: neither happens in a round of the 27B."""
    by = defaultdict(list)
    for r in recs:
        by[r["rec"]].append(r)
    out = []
    for rec, rs in by.items():
        rs.sort(key=lambda r: r["start"])
        cur = [rs[0]]
        for r in rs[1:]:
            if r["start"] - cur[-1]["start"] > split_ns:
                out.append(cur)
                cur = []
            cur.append(r)
        out.append(cur)
    out.sort(key=lambda g: min(r["start"] for r in g))
    return out


def med(xs):
    return statistics.median(xs) if xs else 0.0


def summarize(g, prev_end):
    first_wait = min(r["waited"] for r in g if r["waited"]) if any(r["waited"] for r in g) else min(r["start"] for r in g)
    ends = [r["end"] for r in g]
    s = {"kernel": g[0]["kernel"], "rec": g[0]["rec"], "blocks": len(g),
         "start": min(r["start"] for r in g), "first_wait": first_wait, "last_end": max(ends),
         "gap_us": (first_wait - prev_end) / 1e3 if prev_end else 0.0}
    w = [(r["end"] - r["waited"]) / 1e3 for r in g if r["waited"]]
    s["wait_to_exit_us"] = med(w)
    st = [(r["staged"] - r["waited"]) / 1e3 for r in g if r["staged"] and r["waited"]]
    lp = [(r["looped"] - r["staged"]) / 1e3 for r in g if r["looped"] and r["staged"]]
    tl = [(r["end"] - r["looped"]) / 1e3 for r in g if r["looped"]]
    s["staging_us"], s["loop_us"], s["tail_us"] = med(st), med(lp), med(tl)
    s["exit_spread_us"] = (max(ends) - med(ends)) / 1e3
    s["span_us"] = (max(ends) - first_wait) / 1e3
    return s


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("timeline")
    ap.add_argument("--launches", help="write the replay's launches, one per line, to this file")
    ap.add_argument("--json", action="store_true", help="print the summary as JSON")
    a = ap.parse_args()
    ls = launches(load(a.timeline))
    if len(ls) < 2:
        sys.exit("fewer than two launches in the timeline")
    # The last complete replay: the launches after the previous launch of the last node that
    # ran more than once, up to that node's last launch.
    seen = defaultdict(list)
    for i, g in enumerate(ls):
        seen[g[0]["rec"]].append(i)
    i = max((v[-1] for v in seen.values() if len(v) > 1), default=None)
    if i is None:
        sys.exit("no node ran twice: no replay to cut out")
    j = seen[ls[i][0]["rec"]][-2]
    replay = ls[j + 1:i + 1]
    rows, prev_end = [], 0
    for g in replay:
        s = summarize(g, prev_end)  # the first launch's gap (after the host) is not counted
        rows.append(s)
        prev_end = s["last_end"]
    total = (rows[-1]["last_end"] - rows[0]["first_wait"]) / 1e3
    byk = defaultdict(lambda: defaultdict(float))
    for s in rows:
        k = byk[s["kernel"]]
        k["launches"] += 1
        for f in ("gap_us", "span_us", "staging_us", "loop_us", "tail_us", "exit_spread_us"):
            k[f] += s[f]
    summary = {"replay_us": total, "launches": len(rows), "gap_us": sum(s["gap_us"] for s in rows),
               "span_us": sum(s["span_us"] for s in rows), "kernels": byk}
    if a.launches:
        with open(a.launches, "w") as f:
            for s in rows:
                f.write(json.dumps(s) + "\n")
    if a.json:
        json.dump(summary, sys.stdout, indent=1)
        print()
        return
    print(f"replay: {len(rows)} launches ({rows[0]['kernel']} … {rows[-1]['kernel']}), {total:.1f} µs from the first wait to the last exit; "
          f"gaps {summary['gap_us']:.1f} µs, launch spans {summary['span_us']:.1f} µs")
    print(f"{'kernel':32} {'n':>4} {'gap':>8} {'span':>9} {'staging':>8} {'loop':>9} {'tail':>8} {'spread':>8}  (µs, summed)")
    for name, k in sorted(byk.items(), key=lambda kv: -kv[1]["span_us"]):
        print(f"{name:32} {int(k['launches']):4} {k['gap_us']:8.1f} {k['span_us']:9.1f} {k['staging_us']:8.1f} "
              f"{k['loop_us']:9.1f} {k['tail_us']:8.1f} {k['exit_spread_us']:8.1f}")


if __name__ == "__main__":
    main()
