#!/usr/bin/env python3
"""ncu_sum.py: where one pass of the GPU runtime goes, from Nsight Compute's per-kernel times.

Reads the CSV that tools/bench27b.sh (NCU=1) writes — `ncu --metrics gpu__time_duration.sum
--csv --page raw lithos-run generate …`, plain or gzipped — and splits the launches into passes
at each embedding gather (lithos_gather: a target pass or a drafter pass begins with one). For
every pass it prints the launch count and the summed kernel time; for the pass named by --pass
(default: the longest) the time per kernel name and grid, largest first. Kernels are timed one
at a time by ncu, so the sum is what the kernels take alone, without the overlap of the graph
replay (docs/performance.md §8.2, §3.3k).

  python3 tools/ncu_sum.py ncu.csv.gz [--pass N] [--top 30]
"""
import argparse
import collections
import csv
import gzip
import sys


def rows(path):
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rt", newline="") as f:
        lines = [l for l in f if l.startswith('"')]  # ncu's own log lines are not quoted
    r = list(csv.reader(lines))
    if len(r) < 2:
        sys.exit(f"{path}: no CSV rows")
    head, units = r[0], r[1]
    try:
        name, grid, dur = head.index("Kernel Name"), head.index("Grid Size"), head.index("gpu__time_duration.sum")
    except ValueError as e:
        sys.exit(f"{path}: {e} (columns: {head})")
    scale = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "ns": 1e-3, "us": 1.0, "ms": 1e3}.get(units[dur], None)
    if scale is None:
        sys.exit(f"{path}: unknown unit {units[dur]!r} of gpu__time_duration.sum")
    out = []
    for x in r[2:]:
        if len(x) <= dur or not x[dur]:
            continue
        out.append((x[name].split("(")[0], x[grid], float(x[dur].replace(",", "")) * scale))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--pass", dest="pas", type=int, default=-1, help="pass to break down (default: the longest)")
    ap.add_argument("--top", type=int, default=30)
    a = ap.parse_args()
    ks = rows(a.csv)
    passes = [[]]
    for k in ks:
        if k[0] == "lithos_gather" and passes[-1]:
            passes.append([])
        passes[-1].append(k)
    for i, p in enumerate(passes):
        print(f"pass {i}: {len(p)} launches, {sum(k[2] for k in p) / 1e3:.3f} ms")
    pick = a.pas if a.pas >= 0 else max(range(len(passes)), key=lambda i: sum(k[2] for k in passes[i]))
    p = passes[pick]
    tot = sum(k[2] for k in p)
    by = collections.defaultdict(lambda: [0, 0.0])
    for n, g, d in p:
        by[(n, g)][0] += 1
        by[(n, g)][1] += d
    print(f"\npass {pick}: {len(p)} launches, {tot / 1e3:.3f} ms; by kernel and grid:")
    for (n, g), (c, d) in sorted(by.items(), key=lambda kv: -kv[1][1])[: a.top]:
        print(f"  {d / 1e3:7.3f} ms {100 * d / tot:5.1f} %  {c:4d} × {d / c:7.2f} µs  {n} grid {g}")


if __name__ == "__main__":
    main()
