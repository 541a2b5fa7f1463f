#!/usr/bin/env python3
"""DRAM traffic per op from `ncu --csv --replay-mode app-range` logs of `braid bench t3-gemm-rs
--profile-range` (scripts/device-run.sh, item ncu-t3): one file per shape, named ncu-t3-M,N,K.txt, whose
ranges 0, 1, ... are the algorithms of --algos in order, on every rank (ncu's "ID" column, process per
rank). Prints a table and writes JSON rows: bench t3-dram, algo, m, n, k, dram read / write bytes summed
over the ranks, and the change against the first algorithm (the sequential baseline).

  scripts/ncu_dram.py --algos sequential,t3-auto,... [--choices SWEEP.jsonl] [--json out.jsonl] ncu-t3-*.txt

Under ncu every kernel launch is intercepted, so t3-auto's own tuning (timed in the profiled process) is
skewed towards the sequential fallback, which has the fewest launches. --choices takes a timed t3-gemm-rs
sweep (not profiled) and adds rows `t3-auto-as-timed`: the DRAM bytes of the variant t3-auto chose there.
"""
import argparse, csv, collections, json, math, os, re, sys


def parse(path):
    """{range id: [read bytes, write bytes, gpu ns]} summed over the processes (ranks)."""
    tot = collections.defaultdict(lambda: [0, 0, 0])
    ranks = set()
    for line in open(path, errors="replace"):
        if not line.startswith('"'):
            continue
        r = next(csv.reader([line]))
        if len(r) < 13 or not r[0].isdigit():
            continue
        name, value = r[10], r[12].replace(",", "")
        try:
            v = float(value)
        except ValueError:
            continue
        ranks.add(r[1])
        slot = {"dram__bytes_read.sum": 0, "dram__bytes_write.sum": 1, "gpu__time_duration.sum": 2}.get(name)
        if slot is not None:
            tot[int(r[0])][slot] += v
    return tot, len(ranks)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--algos", required=True)
    ap.add_argument("--json", default="")
    ap.add_argument("--choices", default="")
    ap.add_argument("--card", default=os.environ.get("BRAID_CARD", ""))
    ap.add_argument("--commit", default=os.environ.get("BRAID_COMMIT", "unknown"))
    ap.add_argument("--env", default="", help="NAME=VALUE ... the profiled run had (recorded in each row)")
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    algos = a.algos.split(",")
    chosen = {}
    if a.choices:
        for line in open(a.choices):
            r = json.loads(line)
            m = re.search(r"chose ([a-z0-9-]+)", r.get("comm_sms_note", ""))
            if r.get("algo") == "t3-auto" and m:
                chosen[(r["m"], r["n"], r["k"])] = m.group(1)
    names = algos + (["t3-auto-as-timed"] if chosen else [])
    rows, ratios = [], collections.defaultdict(list)
    for f in sorted(a.files):
        m = re.search(r"ncu-t3-(\d+),(\d+),(\d+)\.txt$", f)
        if not m:
            continue
        shape = tuple(int(x) for x in m.groups())
        tot, nranks = parse(f)
        if len(tot) != len(algos) or 0 not in tot:
            print("%s: %d ranges for %d algos, skipped" % (os.path.basename(f), len(tot), len(algos)))
            continue
        base = tot[0][0] + tot[0][1]
        line = "%6d %6d %6d |" % shape
        entries = [(algo, tot[i], algo) for i, algo in enumerate(algos)]
        if chosen:
            c = chosen.get(shape)
            if c in algos:
                entries.append(("t3-auto-as-timed", tot[algos.index(c)], c))
        for algo, (rd, wr, ns), source in entries:
            ratio = (rd + wr) / base
            ratios[algo].append(ratio)
            line += " %s %.0f MB %+.0f%% |" % (algo if algo == source else "%s=%s" % (algo, source), (rd + wr) / 1e6,
                                               100 * (ratio - 1))
            rows.append({"bench": "t3-dram", "algo": algo, "variant": source, "m": shape[0], "n": shape[1],
                         "k": shape[2], "dram_read_bytes": rd, "dram_write_bytes": wr, "ranks": nranks,
                         "vs_sequential": ratio, "profiled_ns": ns, "card": a.card, "commit": a.commit,
                         "command": (a.env + " " if a.env else "") + "ncu --replay-mode app-range --metrics dram__bytes_read.sum,"
                                    "dram__bytes_write.sum braid bench t3-gemm-rs --shape %d,%d,%d --algo %s "
                                    "--profile-range --iters 1 --warmup 0" % (shape + (a.algos,))})
        print(line)
    for algo in names[1:]:
        r = ratios[algo]
        if r:
            below = sum(1 for x in r if x <= 0.85)
            print("%s: DRAM bytes vs %s geomean %.3f, >= 15%% below on %d of %d shapes" %
                  (algo, algos[0], math.exp(sum(map(math.log, r)) / len(r)), below, len(r)))
    if a.json:
        with open(a.json, "a") as out:
            for r in rows:
                out.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
