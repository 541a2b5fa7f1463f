#!/usr/bin/env python3
"""FlashOverlap predictor error from `braid bench gemm-rs|gemm-ar --measure FILE --json OUT` rows.

Each row measured with --measure carries `predicted_us` (the search's prediction for the partition it
chose, contention included, or the sequential time when it chose the fallback) and `flashoverlap_us`
(the measured time of that choice). Prints per-shape |predicted - measured| / measured, the median
(issue 4 asks <= 10%), and how often the choice (overlap vs fallback) was right, i.e. not slower than
the other option measured in the same row. Usage: predictor_error.py ROWS.jsonl [--json SUMMARY.jsonl]
"""
import json
import statistics
import sys


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    rows = [json.loads(l) for l in open(argv[1]) if l.strip()]
    rows = [r for r in rows if "predicted_us" in r and r.get("correct", False)]
    if not rows:
        print("no verified rows with predicted_us (run the bench with --measure)")
        return 1
    errs, right = [], 0
    print(f"{'M':>7} {'N':>6} {'K':>6} {'decision':>10} {'pred_us':>9} {'meas_us':>9} {'seq_us':>9} {'err':>7}")
    for r in rows:
        pred, meas, seq = r["predicted_us"], r["flashoverlap_us"], r["sequential_us"]
        err = abs(pred - meas) / meas
        errs.append(err)
        # Right choice: the fallback when overlap is not faster than sequential, overlap otherwise.
        fallback = r.get("decision") == "sequential"
        right += (meas <= seq * 1.03) if not fallback else 1
        print(f"{r['m']:>7} {r['n']:>6} {r['k']:>6} {r.get('decision', '?'):>10} {pred:>9.1f} {meas:>9.1f} "
              f"{seq:>9.1f} {100 * err:>6.1f}%")
    med = statistics.median(errs)
    print(f"# {len(rows)} shapes: median predictor error {100 * med:.1f}% (target <= 10%), "
          f"max {100 * max(errs):.1f}%; overlap chosen and not slower than sequential (or fallback chosen): "
          f"{right}/{len(rows)}")
    if "--json" in argv:
        out = argv[argv.index("--json") + 1]
        first = rows[0]
        with open(out, "a") as f:
            f.write(json.dumps({"bench": first.get("bench", "gemm-rs") + "-predictor", "shapes": len(rows),
                                "median_error": med, "max_error": max(errs), "right_choices": right,
                                "card": first.get("card"), "commit": first.get("commit"),
                                "date": first.get("date"), "source": argv[1]}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
