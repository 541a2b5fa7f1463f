// CPU: sizes, statistics, bus-bandwidth factors and JSON rows of the benchmark harness.
#include <gtest/gtest.h>

#include <chrono>
#include <set>
#include <thread>

#include <cmath>
#include <cstdio>

#include "braid/bench.hpp"
#include "braid/errors.hpp"

using namespace braid::bench;

TEST(Harness, ParseAndFormatSizes) {
  EXPECT_EQ(parse_size("64K"), 65536u);
  EXPECT_EQ(parse_size("1G"), size_t(1) << 30);
  EXPECT_EQ(parse_size("256M"), size_t(256) << 20);
  EXPECT_EQ(parse_size("512"), 512u);
  EXPECT_EQ(parse_size("1.5K"), 1536u);
  EXPECT_THROW(parse_size("12Q"), braid::UsageError);
  EXPECT_THROW(parse_size(""), braid::UsageError);
  EXPECT_EQ(format_size(65536), "64K");
  EXPECT_EQ(format_size(size_t(1) << 30), "1G");
  EXPECT_EQ(format_size(1536), "1.5K");
}

TEST(Harness, SummaryIsOrderStatistics) {
  std::vector<double> v;
  for (int i = 100; i >= 1; --i) v.push_back(i);
  const Stats s = summarize(v);
  EXPECT_EQ(s.iters, 100);
  EXPECT_DOUBLE_EQ(s.median_us, 50.5);
  EXPECT_DOUBLE_EQ(s.p10_us, 10);
  EXPECT_DOUBLE_EQ(s.p90_us, 90);
  EXPECT_DOUBLE_EQ(s.min_us, 1);
  EXPECT_DOUBLE_EQ(summarize({3, 1, 2}).median_us, 2);
}

TEST(Harness, BusBandwidthFactorsFollowNcclTests) {
  EXPECT_DOUBLE_EQ(busbw_factor("allreduce", 2), 1.0);
  EXPECT_DOUBLE_EQ(busbw_factor("allreduce", 8), 1.75);
  EXPECT_DOUBLE_EQ(busbw_factor("reducescatter", 8), 0.875);
  EXPECT_DOUBLE_EQ(busbw_factor("allgather", 2), 0.5);
  EXPECT_DOUBLE_EQ(busbw_factor("alltoall", 4), 0.75);
}

TEST(Harness, DtypesParseAndSize) {
  EXPECT_EQ(parse_dtype("bf16"), DType::kBF16);
  EXPECT_EQ(dtype_size(DType::kFP32), 4u);
  EXPECT_THROW(parse_dtype("int3"), braid::UsageError);
}

TEST(Harness, JsonRowsCarryTheSchemaFields) {
  Context c;
  c.card = "NVIDIA H100 80GB HBM3";
  c.date = "2026-11-25T00:00:00Z";
  c.commit = "abc";
  c.command = "braid bench nccl --op \"allreduce\"";
  Json j;
  j.add("op", "allreduce").add("world", 2).add("time_us", 12.5).add("correct", true).add_context(c);
  const std::string s = j.str();
  EXPECT_EQ(s.front(), '{');
  EXPECT_NE(s.find("\"op\": \"allreduce\""), std::string::npos) << s;
  EXPECT_NE(s.find("\"world\": 2"), std::string::npos) << s;
  EXPECT_NE(s.find("\"time_us\": 12.5"), std::string::npos) << s;
  EXPECT_NE(s.find("\"correct\": true"), std::string::npos) << s;
  EXPECT_NE(s.find("--op \\\"allreduce\\\""), std::string::npos) << s;
  EXPECT_EQ(card_tag(c.card, 2), "h100x2");
  EXPECT_NE(s.find("\"env\": \"\""), std::string::npos) << s;
}

// time_interleaved appends each pass's samples in pass order: the per-pass medians, and the hidden fraction
// of each pass against the same pass's reference and compute-only run.
TEST(Harness, RoundMediansAndHiddenByRound) {
  const std::vector<double> us = {5, 1, 3, 10, 30, 20};  // two passes of three
  EXPECT_EQ(round_medians(us, 2), (std::vector<double>{3, 20}));
  EXPECT_EQ(round_medians(us, 1), (std::vector<double>{7.5}));
  EXPECT_EQ(round_medians(us, 3), (std::vector<double>{3, 6.5, 25}));
  EXPECT_THROW(round_medians(us, 4), braid::UsageError);
  EXPECT_THROW(round_medians({}, 1), braid::UsageError);
  EXPECT_THROW(round_medians(us, 0), braid::UsageError);
  // base (compute only) 100, 110; the reference (single strand) 120, 120; a variant 105, 108.
  const auto h = hidden_by_round({105, 108}, {120, 120}, {100, 110});
  ASSERT_EQ(h.size(), 2u);
  EXPECT_DOUBLE_EQ(h[0], 0.75);  // 5 of 20 exposed left
  EXPECT_DOUBLE_EQ(h[1], 1.0);   // faster than compute only: nothing exposed
  EXPECT_TRUE(std::isnan(hidden_by_round({1}, {1}, {2})[0]));  // the reference exposes nothing
  EXPECT_THROW(hidden_by_round({1, 2}, {1}, {1}), braid::UsageError);
}

// HostClock::wrap: the wrapped fn still runs (with its argument), and each call's host time is counted.
TEST(Harness, HostClockCountsEachCall) {
  HostClock clock;
  int sum = 0;
  const auto fn = clock.wrap([&](int i) {
    sum += i;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  });
  EXPECT_EQ(clock.per_call_us(), 0);
  fn(3), fn(4);
  EXPECT_EQ(sum, 7);
  EXPECT_EQ(clock.calls, 2);
  EXPECT_GE(clock.total_us, 4000);
  EXPECT_GE(clock.per_call_us(), 2000);
}

// Rows name the settings that change what was measured (a knob A/B's two runs share one command line).
TEST(Harness, RunEnvironmentKeepsTheKnobsOnly) {
  const char* envp[] = {"PATH=/usr/bin", "BRAID_T3_COLUMN_ORDER=1", "NCCL_NVLS_ENABLE=0", "BRAID_COMMIT=abc",
                        "BRAID_DEADLINE_S=90", "BRAID_TEST_DEADLINE_S=45", "BRAID_OFFLINE=1", "HOME=/root",
                        "BRAID_AR_1STEP_PULL16=0", "XBRAID_X=1", nullptr};
  EXPECT_EQ(run_environment(envp), "BRAID_AR_1STEP_PULL16=0 BRAID_T3_COLUMN_ORDER=1 NCCL_NVLS_ENABLE=0");
  const char* none[] = {"PATH=/usr/bin", nullptr};
  EXPECT_EQ(run_environment(none), "");
  EXPECT_EQ(run_environment(nullptr), "");
}

// time_interleaved's pass orders: each a permutation; over passes the first variant changes, and a
// variant's predecessor is not always the same one (n >= 3).
TEST(Harness, InterleaveOrderVariesFirstAndPredecessor) {
  for (size_t n : {1u, 2u, 3u, 6u}) {
    std::vector<std::set<size_t>> preds(n);
    std::set<size_t> firsts;
    for (int r = 0; r < 5; ++r) {
      const auto o = braid::bench::interleave_order(n, r);
      ASSERT_EQ(o.size(), n);
      EXPECT_EQ(std::set<size_t>(o.begin(), o.end()).size(), n) << "pass " << r << " is not a permutation";
      firsts.insert(o[0]);
      for (size_t j = 1; j < n; ++j) preds[o[j]].insert(o[j - 1]);
    }
    EXPECT_EQ(firsts.size(), std::min<size_t>(n, 5)) << n;
    if (n >= 3) {
      for (size_t f = 0; f < n; ++f) EXPECT_GE(preds[f].size(), 2u) << "variant " << f << " of " << n;
    }
  }
}

TEST(Harness, RotationSpansTwiceTheL2) {
  const int sets = rotation_sets(size_t(1) << 20);
  EXPECT_GE(static_cast<size_t>(sets) << 20, size_t(2) * (40u << 20));  // any L2 of >= 40 MiB
  EXPECT_EQ(rotation_sets(size_t(1) << 30), 1);
}

TEST(Harness, GemmShapesParseFromTextAndFile) {
  const GemmShape g = parse_gemm_shape("16384,8192,1024");
  EXPECT_EQ(g.m, 16384);
  EXPECT_EQ(g.n, 8192);
  EXPECT_EQ(g.k, 1024);
  EXPECT_THROW(parse_gemm_shape("16384,8192"), braid::UsageError);
  EXPECT_THROW(parse_gemm_shape("16384,8x,1024"), braid::UsageError);
  const std::string path = ::testing::TempDir() + "braid_shapes.txt";
  {
    std::FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("# shapes\n4096, 8192, 3584  # a comment\n\n8192,8192,14336\r\n", f);
    std::fclose(f);
  }
  const auto v = read_gemm_shapes(path);
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0].k, 3584);
  EXPECT_EQ(v[1].k, 14336);
  EXPECT_THROW(read_gemm_shapes(path + ".missing"), braid::UsageError);
}

TEST(Harness, ClockSummaryCountsTheReasonBits) {
  EXPECT_EQ(summarize_clocks({}).samples, 0);
  EXPECT_EQ(summarize_clocks({}).str(), "no samples");
  const std::vector<ClockSample> xs = {
      {1980, 400, 0},
      {1700, 700, kClockReasonSwPowerCap},
      {1600, 700, kClockReasonHwPowerBrake | kClockReasonSwThermal},
      {1800, -1, kClockReasonIdle},
  };
  const ClockSummary s = summarize_clocks(xs);
  EXPECT_EQ(s.samples, 4);
  EXPECT_DOUBLE_EQ(s.mean_mhz, (1980 + 1700 + 1600 + 1800) / 4.0);
  EXPECT_DOUBLE_EQ(s.min_mhz, 1600);
  EXPECT_DOUBLE_EQ(s.max_mhz, 1980);
  EXPECT_DOUBLE_EQ(s.mean_w, 600);  // the sample without a power reading is left out
  EXPECT_DOUBLE_EQ(s.power_capped, 0.5);
  EXPECT_DOUBLE_EQ(s.thermal, 0.25);
  EXPECT_DOUBLE_EQ(s.idle, 0.25);
  EXPECT_NE(s.str().find("power-capped 50%"), std::string::npos) << s.str();
}

TEST(Harness, ClockSamplerWindowIsEmptyWithoutNvml) {
  // Without the driver's NVML (CI) the sampler is unavailable and a window holds nothing; with it, a window
  // of 20 ms at 1 ms holds samples. Either way start/stop are safe to call in any order.
  GpuClockSampler g(0, 1000);
  EXPECT_EQ(g.stop().samples, 0);  // not started
  g.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const ClockSummary s = g.stop();
  if (g.available()) {
    EXPECT_GT(s.samples, 0);
    EXPECT_GT(s.mean_mhz, 0);
  } else {
    EXPECT_EQ(s.samples, 0);
  }
}
