"""Issue 8 (T3 track-and-trigger GEMM + reduce-scatter, and AG + GEMM) acceptance verdicts from result JSONL files.

    python3 scripts/acceptance.py --issue 8 [--card CARD] FILES.jsonl...

Each file is one call (one commit); a criterion is computed per file and never mixes files, except AG+GEMM against
torch, which pairs an `ag-gemm` file with a peer file (rows of bench/peers/async_tp_symm_mem.py) of the same commit
(two calls, as the docs did; a pair of different commits is used only when no same-commit file was given, and said).
  * `t3-gemm-rs` (braid bench t3-gemm-rs; algos sequential, flashoverlap, t3-auto, ...): t3-auto at least as fast as
    flashoverlap (us) on >= 60% of the 50 sweep shapes (bench/shapes/sweep.txt); geomean of t3-auto's speedup over
    sequential (cuBLAS + NCCL reduce-scatter) >= 1.25x. Needs t3-auto and the whole sweep verified in the file.
  * `t3-dram` (scripts/ncu_dram.py): per algo, DRAM bytes (read + written, both ranks) vs the same file's sequential
    row, >= 15% below (ratio <= 0.85) on every within-2x shape (bench/shapes/within2x-<card>.txt). These rows carry no
    verdict; it is read from the bench's "Disposition" lines beside the file: ncu-t3-<tag>/ for t3-dram-<tag>.jsonl,
    else run-<commit>*ncu*.log in the same folder. A row with no passing verdict there does not count.
  * `ag-gemm` (algo t3 vs sequential = NCCL all-gather then cuBLAS): geomean >= 1.15x; t3 faster (lower us) than
    torch's fused_all_gather_matmul (bench peer-ag-gemm) on >= 90% of the shapes.
  * the ring at any TP size / the 8-GPU run: reported (met None); not measurable from 2-GPU files.
Only rows with correct == true (and no wrong elements) count; the others are excluded and counted. A shape counts when
every row it needs is verified. --card picks the within-2x file; by default it follows the rows' card and world.
check(paths, card=None) returns the verdict dicts (scripts/acceptance.py prints them)."""
import glob
import json
import math
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHAPES = os.path.join(ROOT, "bench", "shapes")
FO_SHARE, RS_GEOMEAN, DRAM_RATIO, AG_GEOMEAN, TORCH_SHARE = 0.60, 1.25, 0.85, 1.15, 0.90


def load(path):
    return [json.loads(line) for line in open(path) if line.strip()]


def verdict(criterion, measured, target, met, files):
    return {"issue": 8, "criterion": criterion, "measured": measured, "target": target, "met": met,
            "files": sorted(set(os.path.basename(f) for f in files))}


def shape(r):
    return int(r["m"]), int(r["n"]), int(r["k"])


def sname(s):
    return "x".join(map(str, s))


def gmean(xs):
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def read_shapes(path):
    lines = (line.split("#", 1)[0].replace(" ", "").strip() for line in open(path))
    return {tuple(int(x) for x in line.split(",")[:3]) for line in lines if line}


def world(rows):
    """Ranks of the call: the rows' world / ranks field, else mpirun's -np or torchrun's --nproc-per-node."""
    for r in rows:
        m = re.search(r"(?:-np|--nproc-per-node)\s+(\d+)", r.get("command", ""))
        w = r.get("world", r.get("ranks", int(m.group(1)) if m else None))
        if isinstance(w, int):
            return w
    return 2


def card_key(rows, card):
    if card:
        return card
    name = next((r.get("card", "") for r in rows if r.get("card")), "")
    gpu = "h100" if "H100" in name else "h200" if "H200" in name else "unknown"
    return "%sx%d" % (gpu, world(rows))


def ok(r, verdicts=None):
    """A row counts when it says correct/verified (and no wrong elements), or, for t3-dram rows, its verdict passed."""
    if "correct" in r or "verified" in r:
        return r.get("correct", r.get("verified")) is True and not r.get("wrong")
    return verdicts is not None and verdicts.get((shape(r), r.get("variant") or r.get("algo"))) == 0


def table(rows, bench, verdicts=None):
    """{algo: {shape: row}} of one bench's verified rows (the median `us` row where a key repeats), and a note
    saying how many rows were excluded as unverified."""
    keep, bad, total = {}, 0, 0
    for r in rows:
        if r.get("bench") == bench:
            total += 1
            if ok(r, verdicts):
                keep.setdefault(r["algo"], {}).setdefault(shape(r), []).append(r)
            else:
                bad += 1
    for per in keep.values():
        for s, rs in per.items():
            per[s] = sorted(rs, key=lambda r: r.get("us", 0))[(len(rs) - 1) // 2]
    return keep, "; %d of %d %s rows unverified, excluded" % (bad, total, bench) if bad else \
        "; all %d %s rows verified" % (total, bench)


def dram_verdicts(path, rows):
    """{(shape, algo): worst rank's wrong elements} from the Disposition lines logged with a t3-dram file."""
    folder, base = os.path.dirname(path), os.path.basename(path)
    tag = base[len("t3-dram-"):-len(".jsonl")] if base.startswith("t3-dram-") else None
    logs = glob.glob(os.path.join(folder, "ncu-t3-%s" % tag, "*.txt")) if tag else []
    if not logs:
        commit = (rows[0].get("commit") or "")[:7] if rows else ""
        logs = glob.glob(os.path.join(folder, "run-%s*ncu*.log" % commit)) if commit else []
    out = {}
    for log in logs:
        for line in open(log, errors="replace"):
            m = re.search(r"(\d+),(\d+),(\d+): Disposition: \w+ \(wrong elements, worst rank:(.*?);", line)
            if not m:
                continue
            s = tuple(int(x) for x in m.groups()[:3])
            for algo, wrong in re.findall(r"(\S+) (\d+) \(max err", m.group(4)):
                out[(s, algo)] = max(out.get((s, algo), 0), int(wrong))
    names = sorted({os.path.basename(os.path.dirname(l)) + "/" if l.endswith(".txt") else os.path.basename(l)
                    for l in logs})
    return out, names


def rs_verdicts(path, rows):
    t, note = table(rows, "t3-gemm-rs")
    seq, fo, auto = t.get("sequential", {}), t.get("flashoverlap", {}), t.get("t3-auto", {})
    sweep = read_shapes(os.path.join(SHAPES, "sweep.txt"))
    present = {shape(r) for r in rows if r.get("bench") == "t3-gemm-rs"}
    cover = "" if sweep <= present else " (file covers %d of the %d sweep shapes)" % (len(sweep & present), len(sweep))
    out = []
    if not auto and not any(r.get("algo") == "t3-auto" for r in rows):
        return out + sms_verdict(path, rows)
    if fo:
        both = [s for s in sweep if s in fo and s in auto]
        wins = [s for s in both if auto[s]["us"] <= fo[s]["us"]]
        losses = ", ".join(sname(s) for s in sorted(set(both) - set(wins)))
        out.append(verdict("T3 GEMM+RS (t3-auto) >= FlashOverlap on >= 60% of the sweep",
                           "%d / %d sweep shapes%s%s%s" % (len(wins), len(sweep), " (loses " + losses + ")" if losses
                                                          else "", cover, note),
                           ">= 60%", len(wins) >= FO_SHARE * len(sweep) if not cover else None, [path]))
    sp = {s: seq[s]["us"] / auto[s]["us"] for s in sweep if s in seq and s in auto}
    if sp:
        g = gmean(list(sp.values()))
        out.append(verdict("T3 GEMM+RS (t3-auto) geomean over sequential (cuBLAS + NCCL RS)",
                           "%.3fx (min %.3fx, max %.3fx) over %d shapes%s%s" % (
                               g, min(sp.values()), max(sp.values()), len(sp), cover, note),
                           ">= 1.25x", (g >= RS_GEOMEAN) if not cover and len(sp) == len(sweep) else None, [path]))
    return out + sms_verdict(path, rows)


def sms_verdict(path, rows):
    sms = [r.get("comm_sms") for r in rows if r.get("bench") == "t3-gemm-rs" and r["algo"].startswith("t3-")]
    return [verdict("SMs used by communication on the T3 rows (docs' table; reported only)",
                    "max %s over %d T3 rows" % (max(sms), len(sms)), "0", None, [path])] if sms else []


def dram_verdict_rows(path, rows, card):
    verdicts, logs = dram_verdicts(path, rows)
    t, note = table(rows, "t3-dram", verdicts)
    key = card_key(rows, card)
    setfile = os.path.join(SHAPES, "within2x-%s.txt" % key)
    if not os.path.exists(setfile):
        return [verdict("DRAM bytes >= 15% below sequential on every within-2x shape", "no within-2x set for "
                        "card %s (bench/shapes/within2x-%s.txt)" % (key, key), ">= 15% below on all", None, [path])]
    want = read_shapes(setfile)
    seq = t.get("sequential", {})
    src = "verdicts from %s" % ", ".join(logs) if logs else "no verdict logs found"
    out = []
    for algo in sorted({r["algo"] for r in rows if r.get("bench") == "t3-dram"} - {"sequential"}):
        ratio, mine = {}, t.get(algo, {})
        for s in want:
            if s in seq and s in mine:
                b = seq[s]["dram_read_bytes"] + seq[s]["dram_write_bytes"]
                ratio[s] = (mine[s]["dram_read_bytes"] + mine[s]["dram_write_bytes"]) / b
        below = [s for s in ratio if ratio[s] <= DRAM_RATIO]
        miss = ", ".join("%s %+.1f%%" % (sname(s), 100 * (ratio[s] - 1)) for s in sorted(set(ratio) - set(below)))
        absent = sorted(want - set(ratio))
        absent = ", ".join(map(sname, absent)) if len(absent) <= 6 else "%d shapes" % len(absent)
        env = re.findall(r"(?:^| )(BRAID_\w+=\S+)", next(r for r in rows if r.get("algo") == algo)["command"])
        out.append(verdict("DRAM bytes >= 15%% below sequential on every within-2x shape: %s%s"
                           % (algo, " [%s]" % " ".join(env) if env else ""),
                           "%d of %d measured shapes (%d in within2x-%s), geomean %.3fx%s%s; %s%s" % (
                               len(below), len(ratio), len(want), key, gmean(list(ratio.values())),
                               "; misses " + miss if miss else "", "; not measured/verified: " + absent if absent
                               else "", src, note),
                           ">= 15%% below on all %d" % len(want),
                           False if miss else (len(below) == len(want) or None), [path]))  # None: not all shown
    return out


def ag_verdicts(path, rows, peers):
    t, note = table(rows, "ag-gemm")
    seq, t3 = t.get("sequential", {}), t.get("t3", {})
    sp = {s: seq[s]["us"] / t3[s]["us"] for s in t3 if s in seq}
    out = []
    if sp:
        g = gmean(list(sp.values()))
        out.append(verdict("AG+GEMM (t3) geomean over NCCL all-gather then cuBLAS",
                           "%.3fx (min %.3fx) over %d shapes%s" % (g, min(sp.values()), len(sp), note),
                           ">= 1.15x", g >= AG_GEOMEAN, [path]))
    commit = rows[0].get("commit", "")[:7] if rows else ""
    same = [(p, pr) for p, pr in peers if pr and pr[0].get("commit", "")[:7] == commit]
    for p, prs in same or peers:
        pt, pnote = table(prs, "peer-ag-gemm")
        fused = pt.get("torch-fused-all-gather-matmul", {})
        pseq = pt.get("torch-sequential", {})
        shapes = sorted(s for s in t3 if s in fused)
        if not shapes:
            continue
        wins = [s for s in shapes if t3[s]["us"] < fused[s]["us"]]
        rel = [s for s in shapes if s in seq and s in pseq and sp[s] > pseq[s]["us"] / fused[s]["us"]]
        loses = ", ".join("%s by %.1f%%" % (sname(s), 100 * (t3[s]["us"] / fused[s]["us"] - 1))
                          for s in shapes if s not in wins)
        cross = "" if same else "; cross-commit pair (%s vs %s)" % (commit, prs[0].get("commit", "")[:7])
        out.append(verdict("AG+GEMM (t3) faster than torch fused_all_gather_matmul on >= 90% of the shapes",
                           "%d / %d (absolute us)%s; %d / %d by speedup over each one's own sequential%s%s%s" % (
                               len(wins), len(shapes), " (loses " + loses + ")" if loses else "", len(rel),
                               len(shapes), cross, note, pnote),
                           ">= 90%", len(wins) >= TORCH_SHARE * len(shapes), [path, p]))
    return out


def check(paths, card=None):
    """paths: list of JSONL files. Returns a list of verdict dicts (issue, criterion, measured, target, met, files)."""
    files = [(p, load(p)) for p in paths]
    peers = [(p, rows) for p, rows in files if any(r.get("bench") == "peer-ag-gemm" and "bench/peers/" in
                                                   r.get("command", "") for r in rows)]
    out = []
    for p, rows in files:
        benches = {r.get("bench") for r in rows}
        if "t3-gemm-rs" in benches:
            out += rs_verdicts(p, rows)
        if "t3-dram" in benches:
            out += dram_verdict_rows(p, rows, card)
        if "ag-gemm" in benches:
            out += ag_verdicts(p, rows, peers)
    worlds = {p: world(rows) for p, rows in files}
    top = max(worlds.values()) if worlds else 0
    out.append(verdict("the ring variant for any TP size; the 8-GPU run",
                       "largest world in these files: %d ranks; the 8-GPU run is not measurable from them" % top
                       if top < 8 else "%d-rank rows present: judge by hand" % top,
                       "ring at every TP size, run on 8 GPUs", None, [p for p, w in worlds.items() if w == top]))
    return out
