#!/usr/bin/env python3
"""scripts/ncu-sass-top.py CSV — summarize `ncu --import R --page source --csv --print-source sass`.

For each kernel table in the CSV (a header row naming "Address" and "Source"), prints the total warp-stall samples,
the samples per opcode (the first word of the SASS line, predicate and modifiers dropped: HGMMA, BAR, SYNCS, ...)
and the N SASS lines with the most samples, so that two kernels (braid's GEMM and cuBLAS's) can be compared where
they spend their warps' time. Used by scripts/device-run.sh's `ncu-gemm` item.
"""
import collections
import csv
import re
import sys


def num(s):
    try:
        return float(str(s).replace(",", ""))
    except ValueError:
        return 0.0


def opcode(src):
    s = re.sub(r"^@!?U?P\w+\s+", "", src.strip())  # predicate
    return s.split(" ")[0].split(".")[0] if s else "?"


def main():
    path = sys.argv[1]
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    tables, context = [], []
    with open(path, newline="", errors="replace") as f:
        rows = list(csv.reader(f))
    cur = None
    for r in rows:
        if any(c == "Address" for c in r) and any(c == "Source" for c in r):
            cur = {"header": r, "rows": [], "context": context[-3:]}
            tables.append(cur)
            context = []
        elif cur is not None and len(r) == len(cur["header"]):
            cur["rows"].append(r)
        else:
            context.append(" ".join(r))
            cur = None
    if not tables:
        print("no source tables in", path)
        print("\n".join(" ".join(r) for r in rows[:20]))
        return
    for t in tables:
        h = t["header"]
        col = lambda name: next((i for i, c in enumerate(h) if name in c), None)
        src, all_s, ni_s, ex = col("Source"), col("Warp Stall Sampling (All"), col("Warp Stall Sampling (Not"), col(
            "Instructions Executed")
        print("=" * 100)
        for c in t["context"]:
            print("#", c[:200])
        if all_s is None:
            print("no stall-sampling column; columns:", h)
            continue
        tot = sum(num(r[all_s]) for r in t["rows"])
        print("instructions %d, stall samples %d" % (len(t["rows"]), tot))
        by = collections.Counter()
        for r in t["rows"]:
            by[opcode(r[src])] += num(r[all_s])
        print("per opcode: " + ", ".join("%s %.1f%%" % (k, 100 * v / max(tot, 1)) for k, v in by.most_common(14)))
        rs = sorted(t["rows"], key=lambda r: -num(r[all_s]))[:top]
        for r in rs:
            print("%6.2f%% %6.2f%% %10s  %s" % (100 * num(r[all_s]) / max(tot, 1),
                                                100 * num(r[ni_s]) / max(tot, 1) if ni_s is not None else 0,
                                                r[ex] if ex is not None else "", r[src][:110]))


if __name__ == "__main__":
    main()
