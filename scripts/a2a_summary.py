#!/usr/bin/env python3
"""Summary of `braid bench gemm-a2a` rows: per transport the geomean speedup over the packed cuBLAS + all-to-all-v
baseline (same row), min / max, shapes below 0.97x, the geomean over the shapes whose GEMM and all-to-all times are
within 2x of each other, and the median fraction of the bound.

    python3 scripts/a2a_summary.py ROWS.jsonl [ROWS2.jsonl ...]

Transports present in the rows: NCCL's kernels (speedup), braid's copy engines (speedup_pce), the epilogue's stores
into the op's output (speedup_stores) and copied into the caller's buffer (speedup_stores_copy). Only rows marked
correct count; a file's rows are compared within that file (one call)."""
import json
import math
import statistics
import sys

FIELDS = [("kernels", "speedup", "fraction_of_bound"),
          ("peer-copy-engine", "speedup_pce", "fraction_of_bound_pce"),
          ("peer-stores", "speedup_stores", "fraction_of_bound_stores"),
          ("peer-stores, copied out", "speedup_stores_copy", None)]


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def summarize(path):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    rows = [r for r in rows if r.get("bench") == "gemm-a2a"]
    bad = [r for r in rows if not r.get("correct")]
    rows = [r for r in rows if r.get("correct")]
    if not rows:
        print(f"# {path}: no verified rows")
        return
    r0 = rows[0]
    print(f"# {path}: {len(rows)} verified shapes ({len(bad)} failed), world {r0.get('world')}, {r0.get('card')}, "
          f"commit {r0.get('commit')}")
    within = [r for r in rows if max(r["cublas_us"], r["collective_us"]) <= 2 * min(r["cublas_us"], r["collective_us"])]
    for name, key, bound in FIELDS:
        xs = [r[key] for r in rows if key in r]
        if not xs:
            continue
        w = [r[key] for r in within if key in r]
        line = (f"  {name:24s} geomean {geomean(xs):.3f}x  min {min(xs):.3f}  max {max(xs):.3f}  "
                f"below 0.97x {sum(x < 0.97 for x in xs)}")
        if w:
            line += f"  within 2x ({len(w)}) {geomean(w):.3f}x"
        if bound:
            fb = [r[bound] for r in rows if bound in r]
            line += f"  median of bound {statistics.median(fb):.3f}"
        print(line)


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    for path in argv[1:]:
        summarize(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
