"""CPU: issue 9's verdict rules (scripts/acceptance_issue9.py) on synthetic `bench strands` rows.

The noise test decides whether a run's hidden fractions are claimed at all: rows that carry the compute-only pass's
spread over the interleaved passes (compute_only_pass_min_us / _max_us, since 890e6ce) are judged by it; older rows
by the compute-only pass against its operators' solo sum."""
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import acceptance_issue9 as a9  # noqa: E402


def row(variant, hidden, mem=1.0, single=1.0, rr=1.0, throttle=0, **extra):
    r = {"bench": "strands", "variant": variant, "model": "llama3-70b", "layers": 1, "throttle_ctas": throttle,
         "date": "2026-11-30T08:00:00Z", "hidden_fraction": hidden, "mem_ratio_vs_single": mem,
         "speedup_vs_single": single, "speedup_vs_round_robin": rr, "verified": True}
    r.update(extra)
    return r


def single(exposed, compute=18000.0, **extra):
    return row("single-strand", 0.0, exposed_comm_us=exposed, compute_only_us=compute, **extra)


class Issue9Rules(unittest.TestCase):
    def verdicts(self, rows):
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "strands.jsonl")
            with open(p, "w") as f:
                for r in rows:
                    f.write(json.dumps(r) + "\n")
            return {v["criterion"]: v for v in a9.check([p])}

    def nvlink(self, rows):
        return self.verdicts(rows)["strands: llama3-70b, 1 layer, full NVLink"]

    def test_spread_below_the_exposure_is_judged(self):
        v = self.nvlink([single(1000, compute_only_pass_min_us=17900, compute_only_pass_max_us=18400),
                         row("strands-arena", 0.75, mem=1.04)])
        self.assertTrue(v["met"])
        self.assertNotIn("not claimed", v["measured"])

    def test_spread_above_the_exposure_is_not_claimed(self):
        v = self.nvlink([single(800, compute_only_pass_min_us=17700, compute_only_pass_max_us=18600),
                         row("strands-arena", 0.95, mem=1.04)])
        self.assertIsNone(v["met"])  # would be met, but within the noise: n/a
        self.assertIn("not claimed", v["measured"])

    def test_the_spread_takes_precedence_over_the_solo_sum(self):
        # The solo sum (another clock) is 2.5 ms off, the spread small: judged by the spread.
        v = self.nvlink([single(1000, compute_solo_sum_us=15500, compute_only_pass_min_us=17900,
                                compute_only_pass_max_us=18300),
                         row("strands-arena", 0.60, mem=1.04)])
        self.assertFalse(v["met"])
        self.assertNotIn("not claimed", v["measured"])

    def test_older_rows_keep_the_solo_sum_test(self):
        v = self.nvlink([single(1000, compute_solo_sum_us=15500), row("strands-arena", 0.80, mem=1.04)])
        self.assertIsNone(v["met"])
        self.assertIn("not claimed", v["measured"])

    def test_a_variant_timed_on_its_own_is_said_so(self):
        ref = dict(compute_only_pass_min_us=17900, compute_only_pass_max_us=18100)
        alone = self.nvlink([single(2000, **ref), row("strands-arena", 0.75, mem=1.04, timing_rounds=0)])
        self.assertTrue(alone["met"])
        self.assertIn("timed on its own", alone["measured"])
        grouped = self.nvlink([single(2000, **ref), row("strands-arena", 0.75, mem=1.04, timing_rounds=8,
                                                        reference="own interleaved group")])
        self.assertNotIn("timed on its own", grouped["measured"])

    def test_memory_and_throughput_bounds(self):
        v = self.verdicts([single(10000, throttle=1, compute_only_pass_min_us=17900, compute_only_pass_max_us=18100),
                           row("strands-two-sets", 0.90, mem=1.77, single=1.5, rr=1.2, throttle=1),
                           row("strands-arena", 0.72, mem=1.04, single=1.14, rr=1.2, throttle=1)])
        v = v["strands: llama3-70b, 1 layer, NCCL at 1 CTA"]
        self.assertFalse(v["met"])  # two sets exceed 1.05x memory; the arena misses 1.15x single


if __name__ == "__main__":
    unittest.main()
