#!/usr/bin/env python3
"""ncu_stalls.py: where one kernel's warps wait, from Nsight Compute's per-instruction samples.

Reads the SASS page that tools/ncu_blmx.sh writes (`ncu -i REP --page source --csv
--print-source sass`, the Source Counters section's warp-state samples per instruction) and
prints the kernel's stall reasons summed over all instructions, then every instruction that
holds at least --min percent of the samples (index, executions, share, the instruction, its two
largest reasons), then the samples per region when --regions gives instruction index ranges
(e.g. "staging:0-1400,loop:1446-1602,tail:1603-9999"; indices as printed). Used in
docs/performance.md §3.3n.

  python3 tools/ncu_stalls.py fp8-qkvz.source.csv [--min 0.4] [--regions ...]
"""
import argparse
import collections
import csv
import sys


def load(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    # Line 1 names the kernel; line 2 is the header.
    if len(rows) < 3 or "Address" not in rows[1]:
        sys.exit(f"{path}: not an ncu SASS source page (no Address header on line 2)")
    head = rows[1]
    ix = {n: i for i, n in enumerate(head)}
    for need in ("Source", "Warp Stall Sampling (All Samples)", "Instructions Executed"):
        if need not in ix:
            sys.exit(f"{path}: no column {need!r}")
    reasons = [n for n in head if n.startswith("stall_") and "(Not" not in n]
    out = []
    for r in rows[2:]:
        if len(r) < len(head):
            continue
        def num(col):
            v = r[ix[col]].replace(",", "")
            try:
                return int(float(v))
            except ValueError:  # empty, "N/A"
                return 0
        out.append({
            "src": r[ix["Source"]].strip(),
            "samples": num("Warp Stall Sampling (All Samples)"),
            "exec": num("Instructions Executed"),
            "why": {k: num(k) for k in reasons},
        })
    return rows[0][1] if len(rows[0]) > 1 else "?", out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--min", type=float, default=0.4, help="percent of the samples an instruction needs to be listed")
    ap.add_argument("--regions", default="", help="name:first-last,… instruction index ranges to sum")
    a = ap.parse_args()
    kernel, ins = load(a.csv)
    total = sum(i["samples"] for i in ins)
    if total == 0:
        sys.exit(f"{a.csv}: no stall samples (was the SourceCounters section collected?)")
    print(f"{kernel}: {len(ins)} instructions, {total} samples")
    agg = collections.Counter()
    for i in ins:
        agg.update(i["why"])
    for k, v in agg.most_common(12):
        print(f"  {k:26s} {v:8d} {100 * v / total:5.1f} %")
    print(f"instructions with ≥ {a.min} % of the samples:")
    for n, i in enumerate(ins):
        if 100 * i["samples"] / total >= a.min:
            top = ", ".join(f"{k[6:]} {v}" for k, v in sorted(i["why"].items(), key=lambda kv: -kv[1])[:2] if v)
            print(f"  {n:5d} ×{i['exec']:<8d} {100 * i['samples'] / total:5.1f} %  {i['src'][:64]:64s} {top}")
    if a.regions:
        print("regions:")
        for part in a.regions.split(","):
            name, rng = part.split(":")
            lo, hi = (int(x) for x in rng.split("-"))
            s = sum(i["samples"] for i in ins[lo:hi + 1])
            print(f"  {name:12s} {lo:5d}–{hi:<5d} {100 * s / total:5.1f} %")


if __name__ == "__main__":
    main()
