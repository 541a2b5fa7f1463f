"""Issue 3 (Flash Communication all-reduce) acceptance verdicts from `braid bench allreduce` JSONL rows.

    python3 scripts/acceptance.py --issue 3 [--card CARD] FILES.jsonl...

FILES: `braid bench allreduce` rows (op allreduce; each row carries its own NCCL baseline timed in the same run:
baseline_time_us, speedup) and `bench/peers/allreduce_symm_mem.py` rows (algo torch-*). Criteria (issue 3, 2x H100,
64 MiB bf16):
  * INT8 >= 2.4x, INT6 >= 2.8x, INT4 >= 3.5x faster than NCCL in the same run, every row verified: per file the best
    algorithm of each precision at 64 MiB (median over its rows in that file: rounds); met when every file meets it.
  * the bf16 (exact) peer all-reduce >= 1.5x NCCL from 64 KiB to 4 MiB and not slower above: per file, per size, the
    fastest exact braid algorithm against NCCL's row of that size; each size's newest commit decides (the slowest of
    its files); graph replays,
    direct launches (events around each call) and back-to-back direct launches (--batch) reported apart.
  * at least as fast as the better of PyTorch's symmetric-memory one-shot / two-shot at every size: braid's fastest
    exact time per size against the peers', call by call (rows of the same commit: the device call that ran both),
    per launch mode as above.
Only rows with correct == true count; others are counted and excluded. `check()` returns dicts for
scripts/acceptance.py."""
import json
import os
import statistics

MiB = 1 << 20
TARGETS = {"int8": 2.4, "int6": 2.8, "int4": 3.5}


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def fmt_bytes(b):
    return f"{b // MiB} MiB" if b >= MiB else f"{b // 1024} KiB"


# How a row was timed: CUDA graph replays; direct launches with two events around each call; or B > 1 calls back to
# back per event pair (`--batch B`, nccl-tests' method: no drain and relaunch between the calls).
MODES = ("graph replays", "direct launches", "back-to-back direct launches")


def mode_of(r):
    if r.get("graph"):
        return MODES[0]
    return MODES[2] if int(r.get("batch", 1) or 1) > 1 else MODES[1]


def verdict(issue, criterion, measured, target, met, files):
    return {"issue": issue, "criterion": criterion, "measured": measured, "target": target, "met": met,
            "files": sorted(set(files))}


def check(paths, card=None):
    out = []
    braid, peers, bad = {}, [], 0
    for p in paths:
        for r in load(p):
            if r.get("op") != "allreduce":
                continue
            if not r.get("correct", False):
                bad += 1
                continue
            if str(r.get("algo", "")).startswith("torch-"):
                peers.append((os.path.basename(p), r))
            else:
                braid.setdefault(os.path.basename(p), []).append(r)
    note = f"; {bad} unverified rows excluded" if bad else ""

    # Quantized speedups at 64 MiB: per algorithm of the precision, its median speedup in each file that has it
    # (rows of one file: rounds of one call); the precision's best algorithm is the one with the best median, and
    # the criterion holds when it meets the target in every file that ran it.
    # Per launch mode (the issue's rows are direct launches with events around each call; back-to-back and graph
    # rows, where a file has them, are reported as criteria of their own).
    for prec, target in TARGETS.items():
        for mode in MODES[1:] + MODES[:1]:
            per_algo = {}
            for f, rows in braid.items():
                by_algo = {}
                for r in rows:
                    if r.get("bytes") == 64 * MiB and r.get("precision") == prec and mode_of(r) == mode:
                        by_algo.setdefault(r["algo"], []).append(float(r["speedup"]))
                for a, v in by_algo.items():
                    per_algo.setdefault(a, {})[f] = statistics.median(v)
            crit = f"{prec.upper()} >= {target}x NCCL at 64 MiB" + ("" if mode == MODES[1] else f" ({mode})")
            if not per_algo:
                if mode == MODES[1]:
                    out.append(verdict(3, crit, "no rows", f">= {target}x", None, []))
                continue
            algo = max(per_algo, key=lambda a: statistics.median(per_algo[a].values()))
            sps = list(per_algo[algo].values())
            others = ", ".join(f"{a} {statistics.median(v.values()):.2f}x" for a, v in sorted(per_algo.items())
                               if a != algo)
            lo, hi = f"{min(sps):.2f}", f"{max(sps):.2f}"
            out.append(verdict(3, crit, f"{algo} {lo if lo == hi else lo + '-' + hi}x ({len(sps)} file"
                               f"{'s' * (len(sps) > 1)})" + (f"; {others}" if others else "") + note,
                               f">= {target}x in every file", min(sps) >= target, per_algo[algo].keys()))

    # bf16 band against NCCL, per launch mode: in each file the fastest exact braid algorithm per size against NCCL's
    # row of that size in the same file; each size's verdict is the newest file that measured it (rows' date: older
    # files ran older code and are listed beside it), so a newer file that stops at 16 MiB does not hide an older
    # 1-GiB row.
    for mode in MODES:
        per_file = []  # (date, file, {bytes: speedup})
        for f, rows in braid.items():
            rows = [r for r in rows if mode_of(r) == mode and r.get("precision", "exact") == "exact"]
            nccl = {r["bytes"]: float(r["time_us"]) for r in rows if r["algo"] == "nccl"}
            best = {}
            for r in rows:
                if r["algo"] != "nccl" and r["bytes"] in nccl:
                    best[r["bytes"]] = min(best.get(r["bytes"], 1e30), float(r["time_us"]))
            if best:
                per_file.append((max(str(r.get("date", "")) for r in rows), f, {b: nccl[b] / t for b, t in best.items()},
                                 str(rows[0].get("commit", ""))[:7]))
        if not per_file:
            continue
        per_file.sort()
        for crit, target, limit, inside in (
                (f"bf16 >= 1.5x NCCL, 64 KiB - 4 MiB ({mode})", ">= 1.5x at every size", 1.5,
                 lambda b: 64 * 1024 <= b <= 4 * MiB),
                (f"bf16 not slower than NCCL above 4 MiB ({mode})", ">= 1.0x at every size", 1.0, lambda b: b > 4 * MiB)):
            # bytes -> the newest file's commit measuring that size; then the worst of that commit's files (its rounds)
            last = {}
            for _, f, sp, c in per_file:
                for b in sp:
                    if inside(b):
                        last[b] = c
            if not last:
                continue
            newest = {}  # bytes -> (speedup, file): the slowest row of that size at its newest commit
            used = set()
            for _, f, sp, c in per_file:
                for b, x in sp.items():
                    if b in last and c == last[b]:
                        used.add(f)
                        if b not in newest or x < newest[b][0]:
                            newest[b] = (x, f)
            worst_b = min(newest, key=lambda b: newest[b][0])
            worst, wf = newest[worst_b]
            used = sorted(used)
            measured = f"lowest {worst:.2f}x at {fmt_bytes(worst_b)} ({wf}); sizes {fmt_bytes(min(newest))}-" \
                       f"{fmt_bytes(max(newest))}, each from the newest commit measuring it: {', '.join(used)}"
            if limit == 1.0 and worst < 1.0:
                measured += "; the entry point's table runs NCCL where it is faster"
            older = [f for _, f, sp, _ in per_file if f not in used and any(inside(b) for b in sp)]
            if older:
                measured += "; older: " + ", ".join(older)
            out.append(verdict(3, crit, measured, target, worst >= limit, used))

    # Against PyTorch's symmetric memory (the better of its one-shot and two-shot per size), call by call: braid's
    # rows and the peers' rows of the same commit (one device call runs both), graph replays and direct launches
    # apart; met when braid's fastest exact path is at least as fast at every size of every call.
    if peers:
        calls = {}
        for f, r in peers:
            if r["algo"] in ("torch-symm-oneshot", "torch-symm-twoshot"):
                t = calls.setdefault(str(r.get("commit", ""))[:7], {})
                t[r["bytes"]] = min(t.get(r["bytes"], 1e30), float(r["time_us"]))
        for mode in MODES:
            worse, n, ratios, used, skipped = [], 0, [], [], []
            for commit, torch in calls.items():
                # Like for like: PyTorch's all-reduces read inputs in symmetric memory, so a call counts only where
                # braid's symmetric-buffer paths (*-sym) ran too.
                mine = [(f, r) for f, rows in braid.items() for r in rows
                        if str(r.get("commit", ""))[:7] == commit and mode_of(r) == mode]
                if mine and not any(r["algo"].endswith("-sym") for _, r in mine):
                    skipped.append(commit)
                    continue
                best = {}
                for f, r in mine:
                    if r.get("precision", "exact") == "exact" and r["algo"] != "nccl" and r["bytes"] in torch:
                        best[r["bytes"]] = min(best.get(r["bytes"], 1e30), float(r["time_us"]))
                        used.append(f)
                n += len(best)
                ratios += [torch[b] / best[b] for b in best]
                worse += [f"{fmt_bytes(b)} ({commit}, {torch[b] / best[b]:.3f}x)" for b in sorted(best)
                          if best[b] > torch[b]]
            if not n:
                continue
            out.append(verdict(3, f"bf16 at least as fast as PyTorch symm-mem at every size ({mode})",
                               f"{n - len(worse)}/{n} (size, call) pairs, torch/braid {min(ratios):.3f}-"
                               f"{max(ratios):.2f}x" + (f"; slower at {', '.join(worse)}" if worse else "")
                               + (f"; not compared where braid's symmetric paths did not run ({', '.join(skipped)})"
                                  if skipped else ""),
                               "every size", not worse, used + [f for f, _ in peers]))
    out.append(verdict(3, "errors within the quantizer's expectation; docs explain the floors",
                       "see docs/flash-communication.md (Error model, Byte floors); checked by test_allreduce_ref",
                       "every distribution", None, []))
    return out
