#!/usr/bin/env python3
"""Braid's GEMM + reduce-scatter rows against a peer's (bench/peers/async_tp_symm_mem.py) on the same shapes.

    python3 scripts/compare_peers.py BRAID.jsonl PEERS.jsonl [--key pce] [--json OUT]

BRAID.jsonl: `braid bench gemm-rs` rows (flashoverlap<_key>_us, speedup<_key>, sequential_us); PEERS.jsonl: the
peer script's rows (bench peer-gemm-rs, algo torch-fused-matmul-rs / torch-sequential, us). Per shape two
comparisons: absolute (braid's time below the peer's) and relative (braid's speedup over its own cuBLAS + NCCL above
the peer's over its own sequential matmul + reduce-scatter), which holds across calls where clocks differ. Files from
different calls compare across calls: say so where the numbers are used."""
import json
import sys


def load(path):
    return [json.loads(line) for line in open(path) if line.strip()]


def main(argv):
    if len(argv) < 3:
        print(__doc__)
        return 2
    key = argv[argv.index("--key") + 1] if "--key" in argv else "pce"
    sfx = "" if key in ("", "kernels") else "_" + key
    braid = {(r["m"], r["n"], r["k"]): r for r in load(argv[1]) if r.get("bench") == "gemm-rs" and r.get("correct")}
    peers = load(argv[2])
    fused = {(p["m"], p["n"], p["k"]): p for p in peers
             if p.get("bench") == "peer-gemm-rs" and p.get("algo") == "torch-fused-matmul-rs" and p.get("correct")}
    shapes = sorted(k for k in fused if k in braid and ("flashoverlap%s_us" % sfx) in braid[k])
    if not shapes:
        print("no shapes in common")
        return 1
    absw = [k for k in shapes if braid[k]["flashoverlap%s_us" % sfx] < fused[k]["us"]]
    relw = [k for k in shapes if braid[k]["speedup%s" % sfx] > fused[k]["speedup_vs_sequential"]]
    print(f"# braid ({key}) vs torch fused_matmul_reduce_scatter, {len(shapes)} shapes: faster on {len(absw)} "
          f"(absolute time), on {len(relw)} (speedup over each one's own sequential); target: 90% of the shapes")
    for k in shapes:
        if k not in absw or k not in relw:
            b, p = braid[k], fused[k]
            print(f"  {k[0]:6d} {k[1]:6d} {k[2]:6d}  braid {b['flashoverlap%s_us' % sfx]:8.1f} us ({b['speedup%s' % sfx]:.3f}x)"
                  f"  torch {p['us']:8.1f} us ({p['speedup_vs_sequential']:.3f}x)")
    if "--json" in argv:
        b0, p0 = braid[shapes[0]], fused[shapes[0]]
        row = {"bench": "gemm-rs-vs-peer", "transport": key, "peer": "torch-fused-matmul-rs", "shapes": len(shapes),
               "faster_absolute": len(absw), "faster_relative": len(relw),
               "braid_commit": b0.get("commit"), "braid_card": b0.get("card"), "braid_date": b0.get("date"),
               "peer_commit": p0.get("commit"), "peer_card": p0.get("card"), "peer_date": p0.get("date"),
               "command": " ".join(["python3"] + argv)}
        with open(argv[argv.index("--json") + 1], "a") as f:
            f.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
