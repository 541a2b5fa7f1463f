"""CPU: issue 3's verdict rules (scripts/acceptance_issue3.py) on synthetic `bench allreduce` rows.

Three launch modes are judged apart (events around each call, `--batch` back to back, graph replays); each size of the
bf16 band takes the newest commit that measured it (the slowest of that commit's files), so a newer file that stops at
16 MiB does not hide an older 1-GiB row; the quantized criteria are per mode as well."""
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import acceptance_issue3 as a3  # noqa: E402

KiB, MiB = 1024, 1 << 20


def row(algo, nbytes, time_us, nccl_us, commit, date, graph=False, batch=1, precision="exact"):
    return {"op": "allreduce", "algo": algo, "bytes": nbytes, "time_us": time_us, "baseline_time_us": nccl_us,
            "speedup": nccl_us / time_us, "correct": True, "precision": precision, "graph": graph, "batch": batch,
            "commit": commit, "date": date}


def pair(nbytes, braid_us, nccl_us, commit, date, **kw):
    return [row("nccl", nbytes, nccl_us, nccl_us, commit, date, **kw),
            row("oneshot-ll128", nbytes, braid_us, nccl_us, commit, date, **kw)]


class Issue3Rules(unittest.TestCase):
    def verdicts(self, files):
        with tempfile.TemporaryDirectory() as d:
            paths = []
            for name, rows in files.items():
                p = os.path.join(d, name)
                with open(p, "w") as f:
                    for r in rows:
                        f.write(json.dumps(r) + "\n")
                paths.append(p)
            return {v["criterion"]: v for v in a3.check(paths)}

    def test_modes_are_judged_apart(self):
        old, new = "2026-11-01T00:00:00Z", "2026-11-02T00:00:00Z"
        v = self.verdicts({
            "call.jsonl": pair(64 * KiB, 8.7, 9.8, "bbbbbbb", new),                  # 1.13x, events around each call
            "batch.jsonl": pair(64 * KiB, 4.8, 7.5, "bbbbbbb", new, batch=16),      # 1.56x, back to back
            "graph.jsonl": pair(64 * KiB, 4.0, 7.0, "aaaaaaa", old, graph=True),    # 1.75x, replayed
        })
        self.assertFalse(v["bf16 >= 1.5x NCCL, 64 KiB - 4 MiB (direct launches)"]["met"])
        self.assertTrue(v["bf16 >= 1.5x NCCL, 64 KiB - 4 MiB (back-to-back direct launches)"]["met"])
        self.assertTrue(v["bf16 >= 1.5x NCCL, 64 KiB - 4 MiB (graph replays)"]["met"])

    def test_a_newer_file_does_not_hide_an_older_size(self):
        old, new = "2026-11-01T00:00:00Z", "2026-11-02T00:00:00Z"
        v = self.verdicts({
            "old.jsonl": pair(16 * MiB, 70.0, 80.0, "aaaaaaa", old) + pair(1024 * MiB, 3600.0, 3270.0, "aaaaaaa", old),
            "new.jsonl": pair(16 * MiB, 60.0, 80.0, "bbbbbbb", new),
        })
        above = v["bf16 not slower than NCCL above 4 MiB (direct launches)"]
        self.assertFalse(above["met"])  # the 1-GiB row of the older commit still counts
        self.assertIn("1024 MiB", above["measured"])
        self.assertEqual(above["files"], ["new.jsonl", "old.jsonl"])

    def test_the_newest_commit_takes_the_slowest_of_its_rounds(self):
        old, new = "2026-11-01T00:00:00Z", "2026-11-02T00:00:00Z"
        v = self.verdicts({
            "old.jsonl": pair(64 * KiB, 5.0, 7.0, "aaaaaaa", old, graph=True),       # 1.40x, superseded
            "r1.jsonl": pair(64 * KiB, 4.0, 7.0, "bbbbbbb", new, graph=True),        # 1.75x
            "r2.jsonl": pair(64 * KiB, 4.6, 7.0, "bbbbbbb", new, graph=True),        # 1.52x: the slowest round decides
        })
        band = v["bf16 >= 1.5x NCCL, 64 KiB - 4 MiB (graph replays)"]
        self.assertTrue(band["met"])
        self.assertIn("1.52x", band["measured"])
        self.assertIn("older: old.jsonl", band["measured"])

    def test_quantized_criteria_per_mode(self):
        d = "2026-11-02T00:00:00Z"
        q = lambda us, nccl, **kw: row("int8-1step", 64 * MiB, us, nccl, "bbbbbbb", d, precision="int8", **kw)
        v = self.verdicts({"call.jsonl": [q(125.0, 250.0)], "batch.jsonl": [q(100.0, 246.0, batch=16)]})
        self.assertFalse(v["INT8 >= 2.4x NCCL at 64 MiB"]["met"])  # 2.00x
        self.assertTrue(v["INT8 >= 2.4x NCCL at 64 MiB (back-to-back direct launches)"]["met"])  # 2.46x
        self.assertEqual(v["INT4 >= 3.5x NCCL at 64 MiB"]["measured"], "no rows")
        self.assertNotIn("INT4 >= 3.5x NCCL at 64 MiB (back-to-back direct launches)", v)


if __name__ == "__main__":
    unittest.main()
