#!/usr/bin/env python3
"""Turns `braid bench nccl` JSON lines into the Chimera cost model's calibration file
("<AR|RS|AG|A2A|P2P|M2MS> <message bytes> <seconds>" per line, nccl-tests size convention).

  scripts/calibration_from_json.py bench/results/h100x2/nccl-*.jsonl > calibration.txt

P2P and M2MS have no NCCL benchmark of their own: they take the all-to-all curve (grouped send/recv,
the same transport), which the file says.
"""
import json, sys

KIND = {"allreduce": "AR", "reducescatter": "RS", "allgather": "AG", "alltoall": "A2A"}
rows = []
for path in sys.argv[1:]:
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if r.get("algo") == "nccl" and r.get("op") in KIND and r.get("correct"):
                rows.append(r)
if not rows:
    sys.exit("no verified NCCL rows in the given files")
r0 = rows[0]
print("# calibration from braid bench nccl: card %s, world %s, commit %s, date %s" %
      (r0["card"], r0["world"], r0["commit"], r0["date"]))
print("# P2P and M2MS use the all-to-all curve (grouped NCCL send/recv)")
for r in sorted(rows, key=lambda r: (r["op"], r["bytes"])):
    kinds = [KIND[r["op"]]] + (["P2P", "M2MS"] if r["op"] == "alltoall" else [])
    for k in kinds:
        print("%s %d %.9g" % (k, r["bytes"], r["time_us"] * 1e-6))
