#!/usr/bin/env python3
"""What users would otherwise pick for GEMM + reduce-scatter and all-gather + GEMM: PyTorch's async
tensor parallelism (torch.ops.symm_mem.fused_matmul_reduce_scatter, fused_all_gather_matmul) beside
torch's own sequential mm + NCCL, on the same node and shapes as braid's sweeps, in braid's JSON schema
(the rows of `braid bench t3-gemm-rs` / `ag-gemm`: bench, algo, m, n, k, us, correct, ...).

  torchrun --nproc-per-node 2 bench/peers/async_tp_symm_mem.py --shapes bench/shapes/sweep.txt --json out.jsonl

Shapes as in braid: GEMM+RS: A (M,K) x B (N,K)^T -> D (M,N), reduce-scattered by rows (M/W rows each);
AG+GEMM: A_shard (M/W,K) all-gathered to (M,K), times B (N,K)^T. Inputs are random; each fused op is
checked against the sequential result on every rank before timing; times are per-call medians over
CUDA events (slowest rank).
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


def timed(op, iters, warmup, dev):
    for _ in range(warmup):
        op()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
    torch.cuda.synchronize()
    dist.barrier()
    for a, b in ev:
        a.record()
        op()
        b.record()
    torch.cuda.synchronize()
    us = torch.tensor([a.elapsed_time(b) * 1000.0 for a, b in ev], device=dev)
    dist.all_reduce(us, op=dist.ReduceOp.MAX)
    return statistics.median(us.tolist())


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

    def row(bench, algo, m, n, k, us, base_us, ok):
        r = {"bench": bench, "algo": algo, "m": m, "n": n, "k": k, "dtype": "bf16", "world": world, "us": us,
             "speedup_vs_sequential": base_us / us, "correct": ok, "card": card, "date": date,
             "commit": args.commit, "command": cmd}
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

            def seq():
                d = torch.mm(A, Bt)
                dist.reduce_scatter_tensor(out, d)
                return out

            ref = seq().clone()
            fused = lambda: torch.ops.symm_mem.fused_matmul_reduce_scatter(A, Bt, "sum", 0, gname)
            try:
                got = fused()
                ok = agree(got, ref, atol * world, rtol, dev)
                t_seq = timed(seq, args.iters, args.warmup, dev)
                t_f = timed(fused, args.iters, args.warmup, dev)
                row("peer-gemm-rs", "torch-sequential", m, n, k, t_seq, t_seq, True)
                row("peer-gemm-rs", "torch-fused-matmul-rs", m, n, k, t_f, t_seq, ok)
            except Exception as e:  # report, keep going
                if rank == 0:
                    print("peer-gemm-rs %d,%d,%d: %s" % (m, n, k, e), flush=True)
            del A, out
        if "ag" in which and m % world == 0:
            As = (torch.rand(m // world, k, device=dev, dtype=torch.bfloat16) * 2 - 1)
            gathered = torch.empty(m, k, device=dev, dtype=torch.bfloat16)

            def seq_ag():
                dist.all_gather_into_tensor(gathered, As)
                return torch.mm(gathered, Bt)

            ref = seq_ag().clone()
            fused = lambda: torch.ops.symm_mem.fused_all_gather_matmul(As, [Bt], 0, gname)[1][0]
            try:
                got = fused()
                ok = agree(got, ref, atol, rtol, dev)
                t_seq = timed(seq_ag, args.iters, args.warmup, dev)
                t_f = timed(fused, args.iters, args.warmup, dev)
                row("peer-ag-gemm", "torch-sequential", m, n, k, t_seq, t_seq, True)
                row("peer-ag-gemm", "torch-fused-all-gather-matmul", m, n, k, t_f, t_seq, ok)
            except Exception as e:
                if rank == 0:
                    print("peer-ag-gemm %d,%d,%d: %s" % (m, n, k, e), flush=True)
            del As, gathered
        torch.cuda.empty_cache()
    if rank == 0 and args.json:
        with open(args.json, "a") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
