#!/usr/bin/env python3
"""What users would otherwise pick for GEMM + reduce-scatter and all-gather + GEMM: PyTorch's async
tensor parallelism (torch.ops.symm_mem.fused_matmul_reduce_scatter, fused_all_gather_matmul) beside
torch's own sequential mm + NCCL, on the same node and shapes as braid's sweeps, in braid's JSON schema
(the rows of `braid bench t3-gemm-rs` / `ag-gemm`: bench, algo, m, n, k, us, correct, ...).

  torchrun --nproc-per-node 2 bench/peers/async_tp_symm_mem.py --shapes bench/shapes/sweep.txt --json out.jsonl

Shapes as in braid: GEMM+RS: A (M,K) x B (N,K)^T -> D (M,N), reduce-scattered by rows (M/W rows each);
AG+GEMM: A_shard (M/W,K) all-gathered to (M,K), times B (N,K)^T. Inputs are random; each fused op is
checked against the sequential result on every rank before timing; times are per-call medians over
CUDA events (slowest rank). As in braid's benches, timed calls rotate over copies of the inputs spanning
twice the L2 (`buffer_sets` in the rows) and the sequential and fused ops are timed in interleaved rounds
(`--rounds`, `timing_rounds`), so both see the same cache state and the same drift.
"""
import argparse, datetime, json, os, statistics, sys

os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem


def read_shapes(path):
    out = []
    for line in open(path):
        line = line.split("#", 1)[0].replace(" ", "").strip()
        if line:
            m, n, k = (int(x) for x in line.split(","))
            out.append((m, n, k))
    return out


def rotation_sets(bytes_per_set, max_total=16 << 30):
    """braid's bench::rotation_sets: enough input copies to span twice the L2 (at most 256, 16 GiB)."""
    l2 = getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "L2_cache_size", 50 << 20)
    sets = max(1, min((2 * l2 + bytes_per_set - 1) // bytes_per_set, 256))
    while sets > 1 and sets * bytes_per_set > max_total:
        sets -= 1
    return sets


def timed_interleaved(ops, iters, warmup, rounds, dev):
    """braid's bench::time_interleaved: `rounds` rounds, each timing every op for ceil(iters / rounds)
    calls (after `warmup` calls in the first round, at most 2 later); op(i) takes the call index (input
    set). Returns each op's per-call median (slowest rank)."""
    per = max(1, -(-iters // rounds))
    samples = [[] for _ in ops]
    for r in range(rounds):
        for j, op in enumerate(ops):
            for w in range(warmup if r == 0 else min(warmup, 2)):
                op(w)
            ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(per)]
            torch.cuda.synchronize()
            dist.barrier()
            # The GPU idles ~2 ms while the host queues the timed calls: torch's ops are host-heavy (async TP
            # launches many kernels from Python), and this keeps launch latency out of their GPU times —
            # torch's best case. (braid's harness does not do this for itself: its numbers are conservative.)
            torch.cuda._sleep(4_000_000)
            for i, (a, b) in enumerate(ev):
                a.record()
                op(r * per + i)
                b.record()
            torch.cuda.synchronize()
            samples[j] += [a.elapsed_time(b) * 1000.0 for a, b in ev]
    out = []
    for s in samples:
        us = torch.tensor(s, device=dev)
        dist.all_reduce(us, op=dist.ReduceOp.MAX)
        out.append(statistics.median(us.tolist()))
    return out


def agree(x, y, atol, rtol, dev):
    ok = bool(torch.allclose(x.float(), y.float(), atol=atol, rtol=rtol))
    t = torch.tensor([1 if ok else 0], device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return bool(t.item())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="bench/shapes/sweep.txt")
    ap.add_argument("--shape", action="append", default=[])
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", default="")
    ap.add_argument("--which", default="rs,ag")
    ap.add_argument("--commit", default=os.environ.get("BRAID_COMMIT", "unknown"))
    args = ap.parse_args()
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    dev = torch.device("cuda")
    group = dist.group.WORLD
    gname = group.group_name
    try:  # needed by older releases, a no-op or absent in newer ones
        symm_mem.enable_symm_mem_for_group(gname)
    except Exception:
        pass
    card = torch.cuda.get_device_name()
    date = datetime.datetime.utcnow().strftime("%Y-%m-%dT%H:%M:%SZ")
    cmd = "torchrun --nproc-per-node %d bench/peers/async_tp_symm_mem.py %s" % (world, " ".join(sys.argv[1:]))
    shapes = [tuple(int(x) for x in s.split(",")) for s in args.shape] or read_shapes(args.shapes)
    which = args.which.split(",")
    rows = []

    def row(bench, algo, m, n, k, us, base_us, ok, sets):
        r = {"bench": bench, "algo": algo, "m": m, "n": n, "k": k, "dtype": "bf16", "world": world, "us": us,
             "speedup_vs_sequential": base_us / us, "correct": ok, "timing_rounds": args.rounds,
             "buffer_sets": sets, "card": card, "date": date, "commit": args.commit, "command": cmd}
        rows.append(r)
        if rank == 0:
            print("%-12s %-28s %6d %6d %6d %10.1f us  %.3fx  %s" % (bench, algo, m, n, k, us, base_us / us,
                                                                   "OK" if ok else "FAILED"), flush=True)

    for (m, n, k) in shapes:
        torch.manual_seed(1000 + rank)
        B = (torch.rand(n, k, device=dev, dtype=torch.bfloat16) * 2 - 1)  # (N,K), same role as braid's B
        Bt = B.t()                                                           # (K,N) view
        atol, rtol = 0.05 * (k ** 0.5) / 8, 1.6e-2
        if "rs" in which and m % world == 0:
            A = (torch.rand(m, k, device=dev, dtype=torch.bfloat16) * 2 - 1)
            out = torch.empty(m // world, n, device=dev, dtype=torch.bfloat16)
            sets = rotation_sets((m * k + n * k) * 2)
            As_ = [A] + [A.clone() for _ in range(sets - 1)]  # timed call i uses set i % sets
            Bts = [Bt] + [B.clone().t() for _ in range(sets - 1)]

            def seq(i=0):
                d = torch.mm(As_[i % sets], Bts[i % sets])
                dist.reduce_scatter_tensor(out, d)
                return out

            ref = seq().clone()
            fused = lambda i=0: torch.ops.symm_mem.fused_matmul_reduce_scatter(As_[i % sets], Bts[i % sets], "sum",
                                                                               0, gname)
            try:
                got = fused()
                ok = agree(got, ref, atol * world, rtol, dev)
                t_seq, t_f = timed_interleaved([seq, fused], args.iters, args.warmup, args.rounds, dev)
                row("peer-gemm-rs", "torch-sequential", m, n, k, t_seq, t_seq, True, sets)
                row("peer-gemm-rs", "torch-fused-matmul-rs", m, n, k, t_f, t_seq, ok, sets)
            except Exception as e:  # report, keep going
                if rank == 0:
                    print("peer-gemm-rs %d,%d,%d: %s" % (m, n, k, e), flush=True)
            del A, As_, Bts, out
        if "ag" in which and m % world == 0:
            As = (torch.rand(m // world, k, device=dev, dtype=torch.bfloat16) * 2 - 1)
            gathered = torch.empty(m, k, device=dev, dtype=torch.bfloat16)
            sets = rotation_sets((m // world * k + n * k) * 2)
            Ass = [As] + [As.clone() for _ in range(sets - 1)]
            Bts = [Bt] + [B.clone().t() for _ in range(sets - 1)]

            def seq_ag(i=0):
                dist.all_gather_into_tensor(gathered, Ass[i % sets])
                return torch.mm(gathered, Bts[i % sets])

            ref = seq_ag().clone()
            fused = lambda i=0: torch.ops.symm_mem.fused_all_gather_matmul(Ass[i % sets], [Bts[i % sets]], 0,
                                                                           gname)[1][0]
            try:
                got = fused()
                ok = agree(got, ref, atol, rtol, dev)
                t_seq, t_f = timed_interleaved([seq_ag, fused], args.iters, args.warmup, args.rounds, dev)
                row("peer-ag-gemm", "torch-sequential", m, n, k, t_seq, t_seq, True, sets)
                row("peer-ag-gemm", "torch-fused-all-gather-matmul", m, n, k, t_f, t_seq, ok, sets)
            except Exception as e:
                if rank == 0:
                    print("peer-ag-gemm %d,%d,%d: %s" % (m, n, k, e), flush=True)
            del As, Ass, Bts, gathered
        torch.cuda.empty_cache()
    if rank == 0 and args.json:
        with open(args.json, "a") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
