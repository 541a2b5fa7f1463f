#!/usr/bin/env python3
"""Names the cuBLASLt enum values in `braid bench gemm-cublaslt` JSON rows, from the toolkit's cublasLt.h.

usage: scripts/cublaslt-names.py ROWS.jsonl [--header /usr/local/cuda/include/cublasLt.h]
Prints one line per row: shape, heuristic rank, tile / stages / cluster / inner-shape names, split-K, time against
cublasGemmEx, verdict. The header must be the one of the cuBLAS that ran (the rows' enum values are that version's).
"""
import argparse
import json
import re
import sys


def enums(header_text):
    """{typedef name: {value: enumerator name}} for every `typedef enum { ... } name;` of the header."""
    out = {}
    for body, name in re.findall(r"typedef\s+enum\s*\{(.*?)\}\s*(\w+)\s*;", header_text, re.S):
        body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
        body = re.sub(r"//[^\n]*", "", body)
        table, nxt = {}, 0
        for item in body.split(","):
            item = item.strip()
            if not item:
                continue
            m = re.match(r"(\w+)\s*(?:=\s*(.+))?$", item, re.S)
            if not m:
                continue
            key, val = m.group(1), m.group(2)
            if val is not None:
                try:
                    nxt = int(val.strip().rstrip("uU"), 0)
                except ValueError:
                    continue  # an expression; skip (not needed for the tables used here)
            table.setdefault(nxt, key)
            nxt += 1
        out[name] = table
    return out


def short(name, prefix):
    return name[len(prefix):] if name and name.startswith(prefix) else name


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("rows")
    ap.add_argument("--header", default="/usr/local/cuda/include/cublasLt.h")
    a = ap.parse_args()
    e = enums(open(a.header).read())
    tile = e.get("cublasLtMatmulTile_t", {})
    stages = e.get("cublasLtMatmulStages_t", {})
    cluster = e.get("cublasLtClusterShape_t", {})
    inner = e.get("cublasLtMatmulInnerShape_t", {})
    red = e.get("cublasLtReductionScheme_t", {})
    print("%-18s %2s %4s %-10s %-12s %-8s %-22s %6s %-10s %6s %9s %7s %s" %
          ("M,N,K", "#", "algo", "tile", "stages", "cluster", "inner", "splitk", "reduction", "swz", "us", "ex/lt", "verdict"))
    for line in open(a.rows):
        r = json.loads(line)
        print("%-18s %2d %4d %-10s %-12s %-8s %-22s %6d %-10s %6d %9.2f %7.3f %s" % (
            "%d,%d,%d" % (r["m"], r["n"], r["k"]), r["rank"], r["algo_id"],
            short(tile.get(r["tile_id"], str(r["tile_id"])), "CUBLASLT_MATMUL_TILE_"),
            short(stages.get(r["stages_id"], str(r["stages_id"])), "CUBLASLT_MATMUL_STAGES_"),
            short(cluster.get(r["cluster_shape_id"], str(r["cluster_shape_id"])), "CUBLASLT_CLUSTER_SHAPE_"),
            short(inner.get(r["inner_shape_id"], str(r["inner_shape_id"])), "CUBLASLT_MATMUL_INNER_SHAPE_"),
            r["splitk"], short(red.get(r["reduction_scheme"], str(r["reduction_scheme"])), "CUBLASLT_REDUCTION_SCHEME_"),
            r["cta_swizzling"], r["lt_us"], r["gemmex_vs_lt"],
            "ok" if r["correct"] else "FAILED"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
