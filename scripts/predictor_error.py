#!/usr/bin/env python3
"""FlashOverlap predictor error from `braid bench gemm-rs|gemm-ar --measure FILE --json OUT` rows.

Each row measured with --measure carries `predicted_us` (the search's prediction for the partition it
chose, contention included, or the sequential time when it chose the fallback) and `flashoverlap_us`
(the measured time of that choice). Prints per-shape |predicted - measured| / measured, the median
(issue 4 asks <= 10%) over all shapes and over the overlapped ones alone (a fallback's prediction is the
sequential time measured by --measure, which the fallback reruns, so its error is small by construction),
the overlapped shapes' mean signed error (> 0: the model is optimistic), and how often the choice (overlap vs fallback) was right, i.e. not slower than
the other option measured in the same row; for each transport measured (NCCL's kernels; its
symmetric-memory kernels: `*_sym*` fields; its copy engines: `*_ce*` fields; braid's own copy-engine pushes:
`*_pce*` fields), and, where several were
measured, the speedup of the transport each shape's lowest prediction picks, and of the one each transport's
tuning measured fastest. Usage: predictor_error.py
ROWS.jsonl [--json SUMMARY.jsonl]

`--fit`: the calibration of tuning/overlap.tsv instead — per transport, the comm_stretch c that makes
predicted + c x (the collective's solo time) fit the measured overlapped times (least squares on the
relative error), from rows measured with comm_stretch 0 (the rows' `comm_stretch` field, else 0); prints
the table's lines. `--check C_KERNELS,C_SYMMETRIC`: the overlapped-shape errors those values would give.
"""
import json
import math
import statistics
import sys


# Fields of each transport's row: (predicted, measured, decision, speedup vs cuBLAS + NCCL kernels).
# With tuning (`--measure` runs GemmOverlap::tune after the search unless --no-tune), a row whose search
# chose overlap carries the overlap's tuned time; if tuning then fell back, the prediction (of the overlap)
# is compared with that time, not with the fallback's.
TRANSPORTS = {
    "kernels": ("predicted_us", "flashoverlap_us", "decision", "speedup", "tuned_overlap_us"),
    "symmetric": ("predicted_sym_us", "flashoverlap_sym_us", "decision_sym", "speedup_sym", "tuned_overlap_sym_us"),
    "copy-engine": ("predicted_ce_us", "flashoverlap_ce_us", "decision_ce", "speedup_ce", "tuned_overlap_ce_us"),
    "peer-copy-engine": ("predicted_pce_us", "flashoverlap_pce_us", "decision_pce", "speedup_pce",
                         "tuned_overlap_pce_us"),
}


def gm(xs):
    """Geometric mean (nan for none)."""
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def report(rows, transport, argv):
    kp, km, kd, ks, kt = TRANSPORTS[transport]
    rows = [r for r in rows if kp in r and r.get("correct", False)]
    if not rows:
        print(f"# {transport}: no verified rows with {kp} (run the bench with --measure)")
        return 1
    errs, right, speedups, over_errs = [], 0, [], []
    print(f"# transport: {transport}")
    print(f"{'M':>7} {'N':>6} {'K':>6} {'decision':>10} {'pred_us':>9} {'meas_us':>9} {'seq_us':>9} {'err':>7} {'speedup':>8}"
          " (err of a tuned-away overlap: against its tuned time)")
    for r in rows:
        pred, meas, seq = r[kp], r[km], r["sequential_us"]
        fallback = r.get(kd) == "sequential"
        tuned_away = fallback and kt in r  # the search chose overlap, tuning measured it and fell back
        ref = r[kt] if tuned_away else meas
        err = abs(pred - ref) / ref
        errs.append(err)
        speedups.append(r[ks])
        if not fallback or tuned_away:
            over_errs.append((ref - pred) / ref)
        # Right choice: the fallback when overlap is not faster than sequential, overlap otherwise.
        right += (meas <= seq * 1.03) if not fallback else 1
        print(f"{r['m']:>7} {r['n']:>6} {r['k']:>6} {r.get(kd, '?'):>10} {pred:>9.1f} {meas:>9.1f} "
              f"{seq:>9.1f} {100 * err:>6.1f}% {r[ks]:>7.3f}x")
    med = statistics.median(errs)
    over_med = statistics.median(abs(e) for e in over_errs) if over_errs else float("nan")
    over_bias = statistics.fmean(over_errs) if over_errs else float("nan")
    geo = gm(speedups)
    print(f"# {transport}, {len(rows)} shapes: median predictor error {100 * med:.1f}% (target <= 10%), "
          f"max {100 * max(errs):.1f}%; overlap chosen and not slower than sequential (or fallback chosen): "
          f"{right}/{len(rows)}; speedup over cuBLAS + NCCL with these choices: geomean {geo:.3f}x, "
          f"min {min(speedups):.3f}x, below 0.97x on {sum(x < 0.97 for x in speedups)}")
    print(f"# {transport}, the {len(over_errs)} shapes the search overlapped: median predictor error {100 * over_med:.1f}%, "
          f"mean signed {100 * over_bias:+.1f}% (> 0: measured slower than predicted)")
    if "--json" in argv:
        out = argv[argv.index("--json") + 1]
        first = rows[0]
        with open(out, "a") as f:
            f.write(json.dumps({"bench": first.get("bench", "gemm-rs") + "-predictor", "transport": transport,
                                "shapes": len(rows), "median_error": med, "max_error": max(errs),
                                "right_choices": right, "overlapped": len(over_errs),
                                "median_error_overlapped": over_med, "mean_signed_error_overlapped": over_bias,
                                "geomean_speedup": geo, "min_speedup": min(speedups),
                                "card": first.get("card"), "commit": first.get("commit"),
                                "date": first.get("date"), "source": argv[1]}) + "\n")
    return 0


# Per transport: (predicted, measured overlap, decision, the collective's solo time in the same row).
# The comm_stretch each transport's prediction was made with (a row's field; absent: 0).
STRETCH_FIELD = {"predicted_us": "comm_stretch", "predicted_sym_us": "comm_stretch_sym",
                 "predicted_ce_us": "comm_stretch_ce", "predicted_pce_us": "comm_stretch_pce"}
FIT_FIELDS = {
    "nccl-kernels": ("predicted_us", "flashoverlap_us", "decision", "collective_us", "tuned_overlap_us"),
    "nccl-symmetric": ("predicted_sym_us", "flashoverlap_sym_us", "decision_sym", "collective_sym_us",
                       "tuned_overlap_sym_us"),
    "nccl-copy-engine": ("predicted_ce_us", "flashoverlap_ce_us", "decision_ce", "collective_ce_us",
                         "tuned_overlap_ce_us"),
    "peer-copy-engine": ("predicted_pce_us", "flashoverlap_pce_us", "decision_pce", "collective_pce_us",
                         "tuned_overlap_pce_us"),
}


def overlapped(rows, fields):
    kp, km, kd, kc, kt = fields
    out = []
    for r in rows:
        if kp not in r or not r.get("correct", False):
            continue
        if r.get(kd) != "sequential":
            meas = r[km]
        elif kt in r:
            meas = r[kt]  # the search's overlap, rejected by tuning: its tuned time
        else:
            continue
        stretch = r.get(STRETCH_FIELD[kp], 0.0)
        out.append((r[kp] - stretch * r[kc], meas, r[kc]))  # the prediction without any stretch
    return out


def fit(rows):
    for t, fields in FIT_FIELDS.items():
        pts = overlapped(rows, fields)
        if not pts:
            continue
        num = sum((m - p) * c / (m * m) for p, m, c in pts)
        den = sum(c * c / (m * m) for p, m, c in pts)
        c = max(0.0, num / den) if den > 0 else 0.0
        before = statistics.median(abs(m - p) / m for p, m, _ in pts)
        after = statistics.median(abs(m - p - c * cc) / m for p, m, cc in pts)
        print(f"{t}\t{c:.3f}\t# {len(pts)} overlapped shapes: median error {100 * before:.1f}% -> {100 * after:.1f}%")


def check(rows, values):
    for (t, fields), c in zip(FIT_FIELDS.items(), values):
        pts = overlapped(rows, fields)
        if not pts:
            continue
        e = [abs(m - p - c * cc) / m for p, m, cc in pts]
        print(f"# {t}, comm_stretch {c}: {len(pts)} overlapped shapes, median error {100 * statistics.median(e):.1f}%, "
              f"max {100 * max(e):.1f}%")


def transport_choice(rows, argv):
    """The transport the predictor would pick per shape: each measured transport's search predicted its own
    decision's time (an overlap, or the sequential time for its fallback); the lowest prediction picks the
    transport, and the row's measured time of that transport's op is what a user of the choice gets. Not the
    best measured time per shape (that would be an in-sample pick)."""
    keyed = [(t, TRANSPORTS[t]) for t in TRANSPORTS]
    picked, best_measured, counts = [], [], {}
    within, of_bound, bound_sp = [], [], []  # the other lines, for the picked transport
    for r in rows:
        if not r.get("correct", False):
            continue
        cands = [(r[kp], t, r[ks], r.get(km)) for t, (kp, km, kd, ks, kt) in keyed if kp in r and ks in r]
        if len(cands) < 2:
            continue
        _, t, sp, t_us = min(cands)
        picked.append(sp)
        g, c = r.get("cublas_us"), r.get("collective_us")
        if g and c and max(g, c) <= 2 * min(g, c):  # GEMM and collective within 2x of each other
            within.append(sp)
        if r.get("bound_us") and t_us:
            of_bound.append(r["bound_us"] / t_us)
            bound_sp.append(r["sequential_us"] / r["bound_us"])
        best_measured.append(max(c[2] for c in cands))
        counts[t] = counts.get(t, 0) + 1
    if not picked:
        return
    geo = gm(picked)
    best = gm(best_measured)
    print(f"# transport picked by the lowest prediction, {len(picked)} shapes ({counts}): speedup over cuBLAS + NCCL "
          f"geomean {geo:.3f}x, min {min(picked):.3f}x, below 0.97x on {sum(x < 0.97 for x in picked)} "
          f"(the best measured transport per shape, in sample: {best:.3f}x)")
    if of_bound:
        print(f"# picked transport: within 2x ({len(within)} shapes) geomean {gm(within):.3f}x; median fraction of the "
              f"bound {statistics.median(of_bound):.3f}; the bound's own speedup over sequential, geomean {gm(bound_sp):.3f}x")
    if "--json" in argv:
        first = rows[0]
        with open(argv[argv.index("--json") + 1], "a") as f:
            f.write(json.dumps({"bench": first.get("bench", "gemm-rs") + "-predictor", "transport": "predicted-choice",
                                "shapes": len(picked), "picks": counts, "geomean_speedup": geo,
                                "min_speedup": min(picked), "best_measured_geomean_in_sample": best,
                                "within2x_shapes": len(within), "within2x_geomean": gm(within),
                                "median_fraction_of_bound": statistics.median(of_bound) if of_bound else None,
                                "card": first.get("card"), "commit": first.get("commit"),
                                "date": first.get("date"), "source": argv[1]}) + "\n")


SUFFIX = {"kernels": "", "symmetric": "_sym", "copy-engine": "_ce", "peer-copy-engine": "_pce"}


def summarize_choice(label, transport, picked, within, of_bound, counts, rows, argv):
    """One choice's summary line (speedups over cuBLAS + NCCL, within 2x, fraction of the bound) and, with --json,
    its row."""
    print(f"# {label}: speedup over cuBLAS + NCCL geomean {gm(picked):.3f}x, min {min(picked):.3f}x, below 0.97x on "
          f"{sum(x < 0.97 for x in picked)}; within 2x ({len(within)} shapes) {gm(within) if within else float('nan'):.3f}x; "
          f"median fraction of the bound {statistics.median(of_bound) if of_bound else float('nan'):.3f}")
    if "--json" in argv:
        first = rows[0]
        with open(argv[argv.index("--json") + 1], "a") as f:
            f.write(json.dumps({"bench": first.get("bench", "gemm-rs") + "-predictor", "transport": transport,
                                "shapes": len(picked), "picks": counts, "geomean_speedup": gm(picked),
                                "min_speedup": min(picked), "within2x_shapes": len(within),
                                "within2x_geomean": gm(within) if within else None,
                                "median_fraction_of_bound": statistics.median(of_bound) if of_bound else None,
                                "card": first.get("card"), "commit": first.get("commit"),
                                "date": first.get("date"), "source": argv[1]}) + "\n")


def timed_choice(rows, argv):
    """The transport a runtime that tunes every transport would pick: each transport's tuning (before the
    row's timed runs, in the same process: --tune-candidates' cand_best / cand_reference (or cand_sequential), else tune()'s
    tuned_overlap / tuned_sequential) measured its chosen overlap against the fallback's work on its own
    buffers; the lowest ratio picks, a fallback decision counting 1. The row's separately timed speedup of
    that transport is what the choice gets (the reported times are not the ones the choice was made on)."""
    picked, within, of_bound, counts = [], [], [], {}
    for r in rows:
        if not r.get("correct", False):
            continue
        cands = []
        for t, (kp, km, kd, ks, kt) in TRANSPORTS.items():
            if kp not in r or ks not in r:
                continue
            sfx = SUFFIX[t]
            # cand_reference (since the twenty-third session): what the bench held cand_best against
            ov = r.get("cand_best" + sfx + "_us")
            sq = r.get("cand_reference" + sfx + "_us") or r.get("cand_sequential" + sfx + "_us")
            if ov is None:
                ov, sq = r.get("tuned_overlap" + sfx + "_us"), r.get("tuned_sequential" + sfx + "_us")
            ratio = ov / sq if (r.get(kd) == "overlap" and ov and sq) else 1.0
            cands.append((ratio, t, r[ks], r.get(km)))
        if len(cands) < 2:
            continue
        _, t, sp, t_us = min(cands)
        counts[t] = counts.get(t, 0) + 1
        picked.append(sp)
        g, c = r.get("cublas_us"), r.get("collective_us")
        if g and c and max(g, c) <= 2 * min(g, c):
            within.append(sp)
        if r.get("bound_us") and t_us:
            of_bound.append(r["bound_us"] / t_us)
    if not picked:
        return
    summarize_choice(f"transport picked by its tuning's measurements, {len(picked)} shapes ({counts})", "timed-choice",
                     picked, within, of_bound, counts, rows, argv)

def field_pick(rows, argv, key, name_field, label, transport):
    """A per-shape choice the row reports as speedup_<key> (its time in the compared rounds), fraction_of_bound_<key>
    and the chosen name in name_field."""
    picked, within, of_bound, counts = [], [], [], {}
    for r in rows:
        if not r.get("correct", False) or "speedup_" + key not in r:
            continue
        counts[r[name_field]] = counts.get(r[name_field], 0) + 1
        picked.append(r["speedup_" + key])
        g, c = r.get("cublas_us"), r.get("collective_us")
        if g and c and max(g, c) <= 2 * min(g, c):
            within.append(r["speedup_" + key])
        if r.get("fraction_of_bound_" + key):
            of_bound.append(r["fraction_of_bound_" + key])
    if not picked:
        return
    summarize_choice(f"{label}, {len(picked)} shapes ({counts})", transport, picked, within, of_bound, counts, rows, argv)


def owner_pick(rows, argv):
    """`bench gemm-rs --owner`: per shape the fastest of {the peer op as its tuning decided, the owner-ordered
    reduce-scatter with cuBLAS's / braid's GEMM}, chosen by a separate timing before the row's compared rounds
    (pce_pre_us, owner_*_pre_us); the row's speedup_pick is that choice's time in the compared rounds."""
    field_pick(rows, argv, "pick", "pick", "pick of the peer op and the owner-ordered ops (--owner)", "owner-pick")


def auto_pick(rows, argv):
    """`bench gemm-rs|gemm-ar --auto`: the library's AutoGemmComm, tuned per shape by its own tune(); speedup_auto is its pick's
    time in the row's compared rounds."""
    field_pick(rows, argv, "auto", "auto_pick", "AutoGemmComm's own pick (--auto)", "auto")

def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    rows = [json.loads(l) for l in open(argv[1]) if l.strip()]
    if "--fit" in argv:
        fit(rows)
        return 0
    if "--check" in argv:
        check(rows, [float(x) for x in argv[argv.index("--check") + 1].split(",")])
        return 0
    rcs = [report(rows, t, argv) for t in TRANSPORTS if any(TRANSPORTS[t][0] in r for r in rows)]
    if not rcs:
        print("no verified rows with predicted_us (run the bench with --measure)")
        return 1
    transport_choice(rows, argv)
    timed_choice(rows, argv)
    owner_pick(rows, argv)
    auto_pick(rows, argv)
    return max(rcs)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
