"""Issue 4's acceptance verdicts (FlashOverlap GEMM + reduce-scatter), computed from committed result rows.

    python3 scripts/acceptance.py --issue 4 [--card CARD] FILES.jsonl...

FILEs: `braid bench gemm-rs|gemm-ar|gemm-a2a --json` rows and `bench/peers/async_tp_symm_mem.py` rows (peer-gemm-rs).
Prints one line per criterion: criterion | measured | target | MET / NOT MET / reported. Other scripts import
`check(paths, card=None)`, which returns the same as a list of dicts (issue, criterion, measured, target, met, files).

Rules (those of docs/flashoverlap.md and scripts/predictor_error.py, compare_peers.py, a2a_summary.py):
- Only rows with `correct: true` count; the others are excluded and counted in the measured text.
- Files of one bench whose shapes are disjoint are halves of one sweep and are pooled (the docs' GEMM+RS halves, the
  GEMM+AR 38 + 12 shapes of two commits); a file that repeats a pooled shape is another run, reported on its own.
  The measured text names the commits and says when a pooled set mixes commits.
- The speed of the library's entry point: `speedup_auto` / `fraction_of_bound_auto` / `flashoverlap_auto_us`
  (AutoGemmComm, `--auto`) where the rows have them; GEMM + all-to-all has no AutoGemmComm, and the docs report its
  epilogue-stores transport into the op's output (`speedup_stores`); otherwise the plain `speedup`.
- Speedup is over cuBLAS + NCCL in sequence, timed in the same row. "Within 2x": max(cublas_us, collective_us)
  <= 2 x min(cublas_us, collective_us). Fraction of the bound: bound_us / the op's time (the rows' field).
- Predictor error per transport the rows predict (predicted<_sfx>_us against flashoverlap<_sfx>_us, or the tuned
  overlap's time where tuning rejected the search's overlap), median over all verified shapes; met when every
  transport's median is <= 10%.
- Beside torch: braid's op faster in time than `torch-fused-matmul-rs` of a peers file on >= 90% of the shapes both
  have (the count faster in speedup over each one's own sequential is shown too).
Card: `--card H100` (or h100x2) keeps rows whose `card` field names that GPU.
"""
import json
import math
import os
import re
import statistics

SWEEPS = ("gemm-rs", "gemm-ar", "gemm-a2a")
NAMES = {"gemm-rs": "GEMM+RS", "gemm-ar": "GEMM+AR", "gemm-a2a": "GEMM+A2A"}
# Field suffix of the op the docs' acceptance uses, in order of preference (see the docstring).
PREFERRED = {"gemm-rs": ("auto", ""), "gemm-ar": ("auto", ""), "gemm-a2a": ("stores", "")}
# Per transport: (predicted, measured, decision, tuned overlap); as scripts/predictor_error.py's TRANSPORTS.
PREDICTOR = {"nccl-kernels": ""}
PREDICTOR.update({"nccl-symmetric": "_sym", "nccl-copy-engine": "_ce", "peer-copy-engine": "_pce"})


def gm(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def shape(r):
    return (r.get("m"), r.get("n"), r.get("k"))


def load(paths, card):
    """{bench: [(basename, rows)]} in the order given; rows of other cards dropped when card is given."""
    want = re.sub(r"x\d+$", "", card).lower() if card else None
    out = {}
    for p in paths:
        rows = []
        for line in open(p):
            line = line.strip()
            if not line.startswith("{"):
                continue
            r = json.loads(line)
            if want and want not in str(r.get("card", "")).lower():
                continue
            rows.append(r)
        for b in sorted({r.get("bench") for r in rows if r.get("bench") in SWEEPS + ("peer-gemm-rs",)}):
            out.setdefault(b, []).append((os.path.basename(p), [r for r in rows if r.get("bench") == b]))
    return out


def runs(files):
    """Pools files of disjoint shapes (halves of one sweep); a file repeating a pooled shape starts another run."""
    pooled = []  # [files, rows, shapes]
    for name, rows in files:
        s = {shape(r) for r in rows}
        for run in pooled:
            if not (s & run[2]):
                run[0].append(name), run[1].extend(rows), run[2].update(s)
                break
        else:
            pooled.append([[name], list(rows), s])
    return [(f, rows) for f, rows, _ in pooled]


def provenance(rows, files):
    """'N verified of M rows, commit X' plus notes on excluded rows and pooled files."""
    good = [r for r in rows if r.get("correct") is True]
    commits = sorted({str(r.get("commit")) for r in rows})
    text = f"{len(good)} verified of {len(rows)} rows"
    if len(good) < len(rows):
        text += f" ({len(rows) - len(good)} not verified, excluded)"
    text += ", commit " + "+".join(commits)
    if len(files) > 1:
        text += f", pooled from {len(files)} files" + (" of different commits (as the docs did)" if len(commits) > 1
                                                         else "")
    return good, text


def sweep_criteria(bench, files, rows, card):
    good, prov = provenance(rows, files)
    key = next((k for k in PREFERRED[bench] if any(("speedup_" + k if k else "speedup") in r for r in good)), "")
    sfx = "_" + key if key else ""
    field = "speedup" + sfx
    used = [r for r in good if field in r]
    if len(used) < len(good):
        prov += f", {len(good) - len(used)} without {field} left out"
    name = NAMES[bench]
    rs = bench == "gemm-rs"
    res = []

    def add(criterion, measured, target, met):
        res.append({"issue": 4, "criterion": f"{name} {criterion}", "measured": measured, "target": target,
                    "met": met if rs else None, "files": list(files)})

    if not used:
        add("speedup over sequential", f"no verified rows with {field}; {prov}", ">= 1.2x" if rs else "reported", None)
        return res
    sp = [r[field] for r in used]
    within = [r[field] for r in used if r.get("cublas_us") and r.get("collective_us")
              and max(r["cublas_us"], r["collective_us"]) <= 2 * min(r["cublas_us"], r["collective_us"])]
    bound = [r["fraction_of_bound" + sfx] for r in used if ("fraction_of_bound" + sfx) in r]
    rep = "reported (issue: measured the same way)"
    add("geomean speedup over sequential", f"{gm(sp):.3f}x over {len(sp)} shapes ({field}; {prov})",
        ">= 1.2x" if rs else rep, gm(sp) >= 1.2)
    add("geomean within 2x (GEMM vs collective)",
        f"{gm(within):.3f}x over {len(within)} shapes" if within else "no shape within 2x",
        ">= 1.4x" if rs else rep, gm(within) >= 1.4 if within else None)
    add("min speedup", f"{min(sp):.3f}x ({sum(x < 0.97 for x in sp)} below 0.97x)", ">= 0.97x" if rs else rep,
        min(sp) >= 0.97)
    add("median fraction of the bound",
        f"{statistics.median(bound):.3f} over {len(bound)} shapes" if bound else "no fraction_of_bound" + sfx,
        ">= 0.85" if rs else rep, statistics.median(bound) >= 0.85 if bound else None)
    if bench != "gemm-a2a":
        res.append(predictor(name, good, files, rs))
    return res


def predictor(name, good, files, judged):
    parts, medians = [], []
    for t, s in PREDICTOR.items():
        errs = []
        for r in good:
            kp, km, kt = f"predicted{s}_us", f"flashoverlap{s}_us", f"tuned_overlap{s}_us"
            if kp not in r or km not in r:
                continue
            # A fallback whose overlap tuning measured and rejected: the prediction (of the overlap) against that time.
            ref = r[kt] if r.get("decision" + s) == "sequential" and kt in r else r[km]
            errs.append(abs(r[kp] - ref) / ref)
        if errs:
            medians.append(statistics.median(errs))
            parts.append(f"{t} {100 * medians[-1]:.1f}% (max {100 * max(errs):.1f}%, {len(errs)} shapes)")
    met = (max(medians) <= 0.10 if medians else None) if judged else None
    return {"issue": 4, "criterion": f"{name} predictor median error", "files": list(files),
            "measured": "; ".join(parts) if parts else "no verified rows with predicted_us (run with --measure)",
            "target": "<= 10% (every transport)" if judged else "reported", "met": met}


def versus_torch(rs_files, rs_rows, peer_files, peer_rows):
    good = [r for r in rs_rows if r.get("correct") is True]
    key = "auto" if any("flashoverlap_auto_us" in r for r in good) else ""
    sfx = "_" + key if key else ""
    braid = {shape(r): r for r in good if f"flashoverlap{sfx}_us" in r}
    fused = [p for p in peer_rows if p.get("algo") == "torch-fused-matmul-rs"]
    torch = {shape(p): p for p in fused if p.get("correct") is True}
    common = sorted(s for s in torch if s in braid)
    files = list(rs_files) + list(peer_files)
    crit = "GEMM+RS faster than torch's fused_matmul_reduce_scatter"
    if not common:
        return {"issue": 4, "criterion": crit, "measured": "no shapes in common", "target": ">= 90% of the sweep",
                "met": None, "files": files}
    absw = sum(braid[s][f"flashoverlap{sfx}_us"] < torch[s]["us"] for s in common)
    relw = sum(braid[s][f"speedup{sfx}"] > torch[s]["speedup_vs_sequential"] for s in common)
    bc = "+".join(sorted({str(braid[s].get("commit")) for s in common}))
    pc = "+".join(sorted({str(torch[s].get("commit")) for s in common}))
    note = f"flashoverlap{sfx}_us vs torch us; braid {bc}, torch {pc}"
    if len(fused) > len(torch):
        note += f"; {len(fused) - len(torch)} unverified torch rows excluded"
    if len(rs_files) > 1:
        note += f"; braid rows from {len(rs_files)} files (calls), torch's from {len(peer_files)}"
    return {"issue": 4, "criterion": crit, "measured": f"{absw} / {len(common)} in time ({relw} / {len(common)} in "
            f"speedup over each one's own sequential; {note})", "target": ">= 90% of the sweep",
            "met": absw >= 0.9 * len(common), "files": files}


def check(paths, card=None):
    """paths: list of JSONL files (gemm-rs / gemm-ar / gemm-a2a rows, peers rows). Returns a list of dicts:
    {"issue": 4, "criterion": <short text>, "measured": <short text with the number(s)>, "target": <text>,
     "met": True/False/None (None = reported only or not enough data), "files": [basenames used]}"""
    data = load(paths, card)
    out = []
    for bench in SWEEPS:
        for files, rows in runs(data.get(bench, [])):
            out.extend(sweep_criteria(bench, files, rows, card))
    peers = runs(data.get("peer-gemm-rs", []))
    for rs_files, rs_rows in runs(data.get("gemm-rs", [])):
        for peer_files, peer_rows in peers:
            out.append(versus_torch(rs_files, rs_rows, peer_files, peer_rows))
    return out
