#!/usr/bin/env python3
"""What FlashOverlap's SM reserve costs its GEMM, shape by shape, from `braid bench gemm-rs` rows.

    python3 scripts/reserve_waves.py ROWS.jsonl [ROWS2.jsonl ...] [--shapes FILE] [--sms 132] [--reserve 16]

Per shape: the tile count (the row's tile), the persistent grid's waves on every SM and on sms - reserve (2x1
clusters: an even CTA count), the reserve `--reserve-fit` would take (largest in [2, reserve] that adds no wave:
overlap::wave_fit_reserve), the row's braid GEMM on every SM and on the reserved grid (braid_gemm_us,
braid_gemm_reserved_us) and their ratio, and the row's sequential time, AutoGemmComm pick and speedup where present.
--shapes FILE restricts to those shapes (e.g. bench/shapes/within2x-h100x2.txt). Only arithmetic on measured rows:
what the collective loses with fewer free SMs is not in them."""
import argparse
import json
import math
import sys


def waves(tiles, sms):
    ctas = sms // 2 * 2
    return math.ceil(tiles / ctas)


def fit(tiles, sms, cap, floor=2):
    full = waves(tiles, sms)
    for r in range(cap, floor - 1, -1):
        if waves(tiles, sms - r) == full:
            return r
    return cap


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('rows', nargs='+')
    ap.add_argument('--shapes')
    ap.add_argument('--sms', type=int, default=132)
    ap.add_argument('--reserve', type=int, default=16)
    a = ap.parse_args(argv[1:])
    want = None
    if a.shapes:
        want = set()
        for line in open(a.shapes):
            line = line.split('#', 1)[0].strip()
            if line:
                want.add(tuple(int(x) for x in line.split(',')[:3]))
    rows = []
    for path in a.rows:
        rows += [json.loads(line) for line in open(path) if line.strip()]
    print(f'{"M":>6} {"N":>6} {"K":>6} {"tile":>7} {"tiles":>5} {"w_all":>5} {"w_res":>5} {"fit":>3} | '
          f'{"gemm":>7} {"gemm_r":>7} {"r/all":>5} | {"seq":>7} {"pick":>15} {"sp_auto":>7}')
    ratios, lost = [], 0
    for r in rows:
        if r.get('bench') != 'gemm-rs' or 'braid_gemm_reserved_us' not in r:
            continue
        key = (r['m'], r['n'], r['k'])
        if want is not None and key not in want:
            continue
        bm, bn = (int(x) for x in r.get('tile', '128x256').split('x'))
        tiles = (r['m'] // bm) * (r['n'] // bn)
        w_all, w_res = waves(tiles, a.sms), waves(tiles, a.sms - a.reserve)
        lost += w_res > w_all
        ratio = r['braid_gemm_reserved_us'] / r['braid_gemm_us']
        ratios.append(ratio)
        print(f'{r["m"]:>6} {r["n"]:>6} {r["k"]:>6} {r.get("tile", ""):>7} {tiles:>5} {w_all:>5} {w_res:>5} '
              f'{fit(tiles, a.sms, a.reserve):>3} | {r["braid_gemm_us"]:>7.1f} {r["braid_gemm_reserved_us"]:>7.1f} '
              f'{ratio:>5.2f} | {r.get("sequential_us", 0):>7.1f} {r.get("auto_pick", ""):>15} '
              f'{r.get("speedup_auto", 0):>7.3f}')
    if ratios:
        geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
        print(f'{len(ratios)} shapes: {lost} lose a wave at {a.reserve} reserved SMs; reserved GEMM / GEMM on every SM '
              f'geomean {geo:.3f}, max {max(ratios):.2f}')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
