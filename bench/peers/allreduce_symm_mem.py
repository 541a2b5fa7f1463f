#!/usr/bin/env python3
"""What users would otherwise pick for all-reduce: PyTorch's symmetric-memory one-shot and two-shot
all-reduce, and NCCL through torch.distributed, on the same node, written in braid's JSON schema.

  torchrun --nproc-per-node 2 bench/peers/allreduce_symm_mem.py --json out.jsonl [--sizes 64K,1M,...]

Each op is verified against NCCL's result before timing; times are per-call medians over CUDA events
(one op between two events, launches back to back, buffers rotated past L2), maximum over ranks.
"""
import argparse, datetime, json, os, statistics, subprocess, sys

os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(s[:-1]) * mult[s[-1]]) if s[-1] in mult else int(s)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="64K,256K,1M,4M,16M,64M,256M")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--json", default="")
    ap.add_argument("--commit", default=os.environ.get("BRAID_COMMIT", "unknown"))
    args = ap.parse_args()
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    dev = torch.device("cuda")
    group = dist.group.WORLD
    gname = group.group_name
    card = torch.cuda.get_device_name()
    date = datetime.datetime.utcnow().strftime("%Y-%m-%dT%H:%M:%SZ")
    cmd = "torchrun --nproc-per-node %d bench/peers/allreduce_symm_mem.py %s" % (world, " ".join(sys.argv[1:]))
    l2 = 50 << 20
    rows = []
    for size in [parse_size(s) for s in args.sizes.split(",")]:
        n = size // 2
        sets = max(1, min(64, (2 * l2 + 2 * size - 1) // (2 * size)))
        torch.manual_seed(1234 + rank)
        base = torch.randn(n, device=dev, dtype=torch.bfloat16)
        expect = base.clone()
        dist.all_reduce(expect)
        # Symmetric buffers: one per rotation set.
        bufs = [symm_mem.empty(n, dtype=torch.bfloat16, device=dev) for _ in range(sets)]
        for b in bufs:
            symm_mem.rendezvous(b, gname)
            b.copy_(base)
        plain = [base.clone() for _ in range(sets)]
        ops = {
            "torch-nccl": lambda i: dist.all_reduce(plain[i % sets]),
            "torch-symm-oneshot": lambda i: torch.ops.symm_mem.one_shot_all_reduce(bufs[i % sets], "sum", gname),
            "torch-symm-twoshot": lambda i: torch.ops.symm_mem.two_shot_all_reduce_(bufs[i % sets], "sum", gname),
        }
        times = {}
        for name, op in ops.items():
            # verify
            for b in bufs:
                b.copy_(base)
            for p in plain:
                p.copy_(base)
            torch.cuda.synchronize()
            dist.barrier()
            out = op(0)
            if name == "torch-nccl":
                out = plain[0]
            elif name == "torch-symm-twoshot":
                out = bufs[0]
            torch.cuda.synchronize()
            ok = bool(torch.allclose(out.float(), expect.float(), rtol=1e-2, atol=1e-2))
            ok_all = torch.tensor([1 if ok else 0], device=dev)
            dist.all_reduce(ok_all, op=dist.ReduceOp.MIN)
            ok = bool(ok_all.item())
            # in-place ops grow the data; restore, then time
            for i in range(args.warmup):
                op(i)
            ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(args.iters)]
            torch.cuda.synchronize()
            dist.barrier()
            for i, (a, b) in enumerate(ev):
                a.record()
                op(i)
                b.record()
            torch.cuda.synchronize()
            us = torch.tensor([a.elapsed_time(b) * 1000.0 for a, b in ev], device=dev)
            dist.all_reduce(us, op=dist.ReduceOp.MAX)
            us = sorted(us.tolist())
            med = statistics.median(us)
            times[name] = med
            algbw = size / (med * 1e-6) / 1e9
            rows.append({
                "op": "allreduce", "algo": name, "dtype": "bf16", "world": world, "bytes": size, "count": n,
                "time_us": med, "p10_us": us[int(0.1 * len(us))], "p90_us": us[min(len(us) - 1, int(0.9 * len(us)))],
                "iters": len(us), "algbw": algbw, "busbw": algbw * 2 * (world - 1) / world,
                "baseline_algo": "torch-nccl", "baseline_time_us": times.get("torch-nccl", med),
                "speedup": times.get("torch-nccl", med) / med, "correct": ok, "buffer_sets": sets,
                "card": card, "date": date, "commit": args.commit, "command": cmd,
            })
            if rank == 0:
                print("%10d %-20s %10.2f us  busbw %7.1f GB/s  %s" % (size, name, med, rows[-1]["busbw"],
                                                                   "OK" if ok else "FAILED"), flush=True)
    if rank == 0 and args.json:
        with open(args.json, "a") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
