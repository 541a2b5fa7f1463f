#!/usr/bin/env python3
"""One numeric field of two result files, shape by shape (an A/B of two configurations or two commits).

    python3 scripts/ab_rows.py A.jsonl B.jsonl --field FIELD [--algo NAME] [--bench NAME] [--shapes FILE]
                               [--lower-better] [--json OUT]

Rows match on (m, n, k) — and on `algo` where --algo is given (t3-gemm-rs rows carry one algorithm per row); several
rows of one key (rounds, repeated calls) give their median. Prints A, B and B/A per shape, then over the shapes both
files have: the geomean of B/A, and on how many B is better (higher, or lower with --lower-better, e.g. for `us`).
--shapes FILE (M,N,K per line, '#' comments: bench/shapes/*.txt) restricts to those shapes, e.g. the within-2x set.
Examples: the direct-tma segment A/B (`t3-swizzle` item: t3-w2x-seg0.jsonl, t3-w2x-segdef.jsonl) with
`--algo t3-direct-tma --field speedup_vs_first`; the SM reserve A/B of `measure-rs` with and without --reserve-fit with
`--field speedup_auto`. Two files from different calls compare across calls (clocks differ): prefer fields relative
to a baseline timed in the same row (speedup_*) over absolute times."""
import argparse
import json
import math
import statistics
import sys


def load_shapes(path):
    out = set()
    for line in open(path):
        line = line.split('#', 1)[0].strip()
        if not line:
            continue
        m, n, k = (int(x) for x in line.split(',')[:3])
        out.add((m, n, k))
    return out


def load(path, field, algo, bench):
    vals = {}
    for line in open(path):
        line = line.strip()
        if not line:
            continue
        r = json.loads(line)
        if algo is not None and r.get('algo') != algo:
            continue
        if bench is not None and r.get('bench') != bench:
            continue
        v = r.get(field)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
            continue
        try:
            key = (int(r['m']), int(r['n']), int(r['k']))
        except (KeyError, TypeError, ValueError):
            continue
        vals.setdefault(key, []).append(float(v))
    return {k: statistics.median(v) for k, v in vals.items()}


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('a')
    ap.add_argument('b')
    ap.add_argument('--field', required=True)
    ap.add_argument('--algo')
    ap.add_argument('--bench')
    ap.add_argument('--shapes')
    ap.add_argument('--lower-better', action='store_true')
    ap.add_argument('--json')
    args = ap.parse_args(argv[1:])
    a = load(args.a, args.field, args.algo, args.bench)
    b = load(args.b, args.field, args.algo, args.bench)
    keys = sorted(set(a) & set(b))
    if args.shapes:
        want = load_shapes(args.shapes)
        keys = [k for k in keys if k in want]
    if not keys:
        print(f'no shape with a numeric {args.field} in both files', file=sys.stderr)
        return 1
    rows = []
    print(f'{"M":>6} {"N":>6} {"K":>6} | {"A":>10} {"B":>10} | {"B/A":>6}')
    for k in keys:
        ratio = b[k] / a[k] if a[k] else float('nan')
        rows.append({'m': k[0], 'n': k[1], 'k': k[2], 'a': a[k], 'b': b[k], 'b_over_a': ratio})
        print(f'{k[0]:>6} {k[1]:>6} {k[2]:>6} | {a[k]:>10.4g} {b[k]:>10.4g} | {ratio:>6.3f}')
    ratios = [r['b_over_a'] for r in rows if r['b_over_a'] > 0 and math.isfinite(r['b_over_a'])]
    geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios)) if ratios else float('nan')
    better = sum(1 for x in ratios if (x < 1 if args.lower_better else x > 1))
    only_a, only_b = len(set(a) - set(b)), len(set(b) - set(a))
    print(f'{args.field}: geomean B/A {geo:.4f} over {len(ratios)} shapes; B better on {better} '
          f'({"lower" if args.lower_better else "higher"} is better); only in A: {only_a}, only in B: {only_b}')
    if args.json:
        with open(args.json, 'w') as f:
            json.dump({'field': args.field, 'algo': args.algo, 'a': args.a, 'b': args.b, 'geomean_b_over_a': geo,
                       'b_better': better, 'shapes': rows}, f, indent=1)
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
