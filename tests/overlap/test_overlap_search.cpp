// Predictive search: the dynamic program finds the same optimum as the paper's pruned enumeration;
// the predictor follows its recurrence; the decision cache picks the nearest M; files round-trip.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <vector>
#include <cstdlib>
#include <unistd.h>

#include "braid/errors.hpp"
#include "braid/overlap.hpp"

using namespace braid::overlap;

namespace {

// A new empty file /tmp/<stem>XXXXXX (mkstemp); "" if it could not be made.
std::string temp_file(const std::string& stem) {
  std::string p = "/tmp/" + stem + "XXXXXX";
  const int fd = mkstemp(p.data());
  if (fd < 0) return "";
  close(fd);
  return p;
}

SearchInputs inputs(int waves, double wave_us, double lat_us, double gbps) {
  SearchInputs in;
  in.waves = waves;
  in.wave_us = wave_us;
  in.bytes_per_wave = 132.0 * 128 * 256 * 2;
  in.last_wave_fraction = 0.6;
  in.signal_overhead_us = 2;
  for (double b = 1 << 16; b <= double(1ull << 31); b *= 2) {
    in.comm.bytes.push_back(b);
    in.comm.us.push_back(lat_us + b / (gbps * 1e3));
  }
  return in;
}

// The paper's enumeration: every composition with |G1| <= 2 and |GP| <= 4 (or one group), at most
// max_groups groups.
double brute_force(const SearchInputs& in, int max_groups, std::vector<int>* best_p) {
  double best = std::numeric_limits<double>::infinity();
  std::vector<int> cur;
  std::function<void(int)> rec = [&](int left) {
    if (left == 0) {
      const int P = static_cast<int>(cur.size());
      if (P > 1 && (cur.front() > 2 || cur.back() > 4)) return;
      const double t = predict_us(in, cur);
      if (t < best) best = t, *best_p = cur;
      return;
    }
    if (static_cast<int>(cur.size()) == max_groups) return;
    for (int w = 1; w <= left; ++w) {
      cur.push_back(w);
      rec(left - w);
      cur.pop_back();
    }
  };
  rec(in.waves);
  return best;
}

// Three waves of 10 us, 1000 output bytes each, the collective 5 us per 1000 bytes, no signal cost.
SearchInputs three_waves() {
  SearchInputs in;
  in.waves = 3;
  in.wave_us = 10;
  in.bytes_per_wave = 1000;
  in.signal_overhead_us = 0;
  in.comm.bytes = {1000, 3000};
  in.comm.us = {5, 15};
  return in;
}

TEST(OverlapSearch, PredictorFollowsTheRecurrence) {
  SearchInputs in = three_waves();
  // groups (1,2): tp 10 -> tm 15; tp 30 -> tm max(30,15)+10 = 40
  EXPECT_DOUBLE_EQ(predict_us(in, {1, 2}), 40.0);
  // one group: 30 + 15
  EXPECT_DOUBLE_EQ(predict_us(in, {3}), 45.0);
  // comm-bound: (1,1,1): 15, max(20,15)+5=25, max(30,25)+5=35
  EXPECT_DOUBLE_EQ(predict_us(in, {1, 1, 1}), 35.0);
}

TEST(OverlapSearch, ContentionModelAndFallback) {
  SearchInputs in = three_waves();
  // (1,2): P0 40, in sequence 30 + 5 + 10 = 45: rho 0 -> 40, rho 1 -> 45, rho 2 -> 50.
  EXPECT_DOUBLE_EQ(predict_contended_us(in, {1, 2}), 40.0);
  in.interference = 1;
  EXPECT_DOUBLE_EQ(predict_contended_us(in, {1, 2}), 45.0);
  in.interference = 2;
  EXPECT_DOUBLE_EQ(predict_contended_us(in, {1, 2}), 50.0);
  // Under heavy contention one group (no overlap at all) is the best partition...
  SearchResult r = search_partition(in);
  EXPECT_EQ(r.group_waves, (std::vector<int>{3}));
  EXPECT_DOUBLE_EQ(r.predicted_us, 45.0);
  EXPECT_FALSE(r.sequential);  // sequential_us unknown: never fall back
  // ...and with a measured sequential time it is not worth it: fall back.
  in.sequential_us = 44;
  r = search_partition(in);
  EXPECT_TRUE(r.sequential);
  EXPECT_EQ(r.group_waves, (std::vector<int>{3}));
  EXPECT_DOUBLE_EQ(r.predicted_us, 44.0);
  // Without contention the overlap wins against the same sequential time.
  in.interference = 0;
  r = search_partition(in);
  EXPECT_FALSE(r.sequential);
  EXPECT_LT(r.predicted_us, 0.95 * 44);
  // The margin: a predicted gain under 1/max_ratio - 1 is not worth the predictor's error.
  const double pred = r.predicted_us;
  in.sequential_us = pred / 0.96;  // predicted 4% faster
  if (!std::getenv("BRAID_OVERLAP_MAX_RATIO")) {
    EXPECT_DOUBLE_EQ(in.max_ratio, 0.97);
  }
  in.max_ratio = 0.95;  // a 5.3% margin: fall back
  EXPECT_TRUE(search_partition(in).sequential);
  in.max_ratio = 0.97;  // a 3.1% margin keeps the overlap
  EXPECT_FALSE(search_partition(in).sequential);
}

TEST(OverlapSearch, DynamicProgramMatchesEnumeration) {
  for (int waves : {1, 2, 3, 5, 8, 11}) {
    for (double wave_us : {5.0, 15.0, 40.0}) {
      for (int max_groups : {2, 4, 8}) {
        SearchInputs in = inputs(waves, wave_us, 25.0, 200.0);
        std::vector<int> bp;
        const double want = brute_force(in, max_groups, &bp);
        SearchResult r = search_partition(in, max_groups);
        EXPECT_NEAR(r.predicted_us, want, 1e-9) << waves << " waves, " << wave_us << " us";
        EXPECT_NEAR(predict_us(in, r.group_waves), r.predicted_us, 1e-9);
        int sum = 0;
        for (int w : r.group_waves) sum += w;
        EXPECT_EQ(sum, waves);
      }
    }
  }
}

TEST(OverlapSearch, LargeWaveCountsAreFast) {
  SearchInputs in = inputs(62, 13.0, 25.0, 250.0);
  SearchResult r = search_partition(in, 16);
  EXPECT_GT(r.group_waves.size(), 1u);
  EXPECT_LE(r.group_waves.front(), 2);
  EXPECT_LE(r.group_waves.back(), 4);
  // Overlap beats one group (GEMM then the whole collective).
  EXPECT_LT(r.predicted_us, predict_us(in, {62}));
}

// A transport with a large cost per call (the copy-engine transport: NCCL's handshakes and braid's
// reduction launch, ~20 us per group on 2x H200, docs/flashoverlap.md) gets fewer groups than one with a
// small one on the same shape, and its prediction counts the calls: the search trades groups against the
// tail through the measured latency curve alone.
TEST(OverlapSearch, PerCallCostMeansFewerGroups) {
  // 36 waves of 11.5 us (a 416-us GEMM), 128 MiB of output at ~350 GB/s: the comm-heavy 16384x8192x1024.
  for (int max_groups : {8, 18}) {
    const SearchInputs cheap = inputs(36, 11.5, 3.0, 350.0), costly = inputs(36, 11.5, 40.0, 350.0);
    const SearchResult a = search_partition(cheap, max_groups), b = search_partition(costly, max_groups);
    EXPECT_LT(b.group_waves.size(), a.group_waves.size()) << max_groups;
    EXPECT_GT(a.group_waves.size(), 1u);
    EXPECT_GT(b.predicted_us, a.predicted_us);
    // The costly transport's own optimum beats running its calls at the cheap one's partition.
    EXPECT_LE(b.predicted_us, predict_us(costly, a.group_waves) + 1e-9);
  }
}

// A tail (the copy-engine reduce-scatter's sums, on their own stream): group g's tail starts after its
// collective and the previous tail; the next collective does not wait for it.
TEST(OverlapSearch, TailRunsOffTheCommunicationChain) {
  SearchInputs in = three_waves();
  in.tail.bytes = {1000, 3000};
  in.tail.us = {2, 6};
  // (1,2): collectives end at 15 and 40 (as without a tail); tails end at 17 and max(17, 40) + 4 = 44.
  EXPECT_DOUBLE_EQ(predict_us(in, {1, 2}), 44.0);
  // In sequence: GEMM 30, then 5 + 2 and 10 + 4: rho 1 gives 51.
  in.interference = 1;
  EXPECT_DOUBLE_EQ(predict_contended_us(in, {1, 2}), 51.0);
  // Tails longer than the collectives queue behind each other: (1,1,1) collectives end at 15, 25, 35;
  // tails of 20 end at 35, 55, 75.
  in.interference = 0;
  in.tail.us = {20, 60};
  EXPECT_DOUBLE_EQ(predict_us(in, {1, 1, 1}), 75.0);
}

// A tail that cannot start before the GEMM's end (the GEMM on every SM: the sums find no SM until it
// exits): the tail chain starts at the GEMM's end, so its sums run back to back after it.
TEST(OverlapSearch, TailAfterGemmWaitsForTheGemmsEnd) {
  SearchInputs in = three_waves();
  in.tail.bytes = {1000, 3000};
  in.tail.us = {2, 6};
  in.tail_after_gemm = true;
  // (1,2): collectives end at 15 and 40; the GEMM ends at 30: tails end at max(30, 15) + 2 = 32, then
  // max(32, 40) + 4 = 44 (the second tail waited for its collective anyway).
  EXPECT_DOUBLE_EQ(predict_us(in, {1, 2}), 44.0);
  // (1,1,1): collectives end at 15, 25, 35; tails after 30: 32, 34, max(34, 35) + 2 = 37 (beside the GEMM:
  // 17, 27, 37 — the same end, here the last collective dominates).
  EXPECT_DOUBLE_EQ(predict_us(in, {1, 1, 1}), 37.0);
  // Long tails: 20 per wave. Beside the GEMM (1,1,1) would end at 15 + 20 = 35, 55, 75; after it: 50, 70, 90.
  in.tail.us = {20, 60};
  EXPECT_DOUBLE_EQ(predict_us(in, {1, 1, 1}), 90.0);
  in.tail_after_gemm = false;
  EXPECT_DOUBLE_EQ(predict_us(in, {1, 1, 1}), 75.0);
  // The candidates skip the tail-in-line model there (no sum runs beside the GEMM either way).
  in.tail_after_gemm = true;
  for (const auto& gw : candidate_partitions(in, 3, 8)) {
    int w = 0;
    for (int x : gw) w += x;
    EXPECT_EQ(w, 3);
  }
}

// A communication chain that cannot start before comm_start_us (the peer copy-engine transport's start
// barrier beside the GEMM): the first collective starts at max(its group's end, comm_start); the DP agrees.
TEST(OverlapSearch, CommStartDelaysTheFirstCollective) {
  SearchInputs in = three_waves();
  const double base = predict_us(in, {1, 2});
  in.comm_start_us = 5;  // before the first group's end (10): no change
  EXPECT_DOUBLE_EQ(predict_us(in, {1, 2}), base);
  in.comm_start_us = 30;  // after the whole GEMM: (1,2) chains 30 + 5, then + 10 -> 45; one group 30 + 15
  EXPECT_DOUBLE_EQ(predict_us(in, {1, 2}), 45.0);
  EXPECT_DOUBLE_EQ(predict_us(in, {3}), 45.0);
  const SearchResult r = search_partition(in, 3);
  EXPECT_NEAR(r.predicted_us, predict_contended_us(in, r.group_waves), 1e-9);
  for (const auto& gw : std::vector<std::vector<int>>{{1, 1, 1}, {1, 2}, {2, 1}, {3}})
    EXPECT_LE(r.predicted_us, predict_contended_us(in, gw) + 1e-9);
}

// Under contention the search scores each group count's best partition, not only the uncontended
// optimum and one group: its choice is never worse than those two, and its prediction is its own.
TEST(OverlapSearch, ContentionPicksAmongGroupCounts) {
  for (double rho : {0.0, 0.3, 0.6, 0.9}) {
    SearchInputs in = inputs(36, 11.5, 40.0, 350.0);
    in.interference = rho;
    SearchInputs plain = in;
    plain.interference = 0;
    const SearchResult r = search_partition(in, 18);
    const std::vector<int> dp_best = search_partition(plain, 18).group_waves;  // rho 0: the uncontended optimum
    EXPECT_LE(r.predicted_us, predict_contended_us(in, dp_best) + 1e-9) << rho;
    EXPECT_LE(r.predicted_us, predict_contended_us(in, {36}) + 1e-9) << rho;
    EXPECT_NEAR(r.predicted_us, predict_contended_us(in, r.group_waves), 1e-9) << rho;
  }
}

TEST(OverlapSearch, CurveInterpolates) {
  BandwidthCurve c;
  c.bytes = {100, 200, 400};
  c.us = {10, 20, 30};
  EXPECT_DOUBLE_EQ(c.latency_us(50), 10);
  EXPECT_DOUBLE_EQ(c.latency_us(150), 15);
  EXPECT_DOUBLE_EQ(c.latency_us(300), 25);
  EXPECT_DOUBLE_EQ(c.latency_us(800), 50);  // extrapolated along the last segment
}

TEST(OverlapSearch, CacheNearestM) {
  DecisionCache cache;
  CachedDecision d;
  d.coll = Collective::kReduceScatter, d.world = 2, d.n = 8192, d.k = 1024;
  d.m = 4096, d.group_waves = {1, 2};
  cache.put(d);
  d.m = 16384, d.group_waves = {2, 4, 4};
  cache.put(d);
  d.m = 8192, d.k = 2048, d.group_waves = {9}, d.sequential = true;
  cache.put(d);
  EXPECT_EQ(cache.lookup(Collective::kReduceScatter, 2, 5000, 8192, 1024)->m, 4096);
  EXPECT_EQ(cache.lookup(Collective::kReduceScatter, 2, 12000, 8192, 1024)->m, 16384);
  EXPECT_EQ(cache.lookup(Collective::kReduceScatter, 2, 10240, 8192, 1024)->m, 16384);  // tie: larger
  EXPECT_EQ(cache.lookup(Collective::kAllReduce, 2, 4096, 8192, 1024), nullptr);
  EXPECT_EQ(cache.lookup(Collective::kReduceScatter, 4, 4096, 8192, 1024), nullptr);
  std::string tmp = temp_file("braid_overlap_cache");
  ASSERT_FALSE(tmp.empty());
  char* path = tmp.data();
  cache.save(path);
  DecisionCache back;
  back.load(path);
  ASSERT_EQ(back.entries().size(), 3u);
  EXPECT_EQ(back.lookup(Collective::kReduceScatter, 2, 16384, 8192, 1024)->group_waves, (std::vector<int>{2, 4, 4}));
  EXPECT_FALSE(back.lookup(Collective::kReduceScatter, 2, 16384, 8192, 1024)->sequential);
  EXPECT_TRUE(back.lookup(Collective::kReduceScatter, 2, 8192, 8192, 2048)->sequential);
  std::remove(path);
}

// The calibration adds comm_stretch x the whole collective's solo time to the contended prediction of
// every partition alike: the chosen partition does not move, the prediction and the fallback do.
TEST(OverlapSearch, CommStretchMovesThePredictionNotThePartition) {
  SearchInputs in = three_waves();  // the whole collective (3000 bytes): 15 us
  for (double rho : {0.0, 0.5}) {
    in.interference = rho;
    in.comm_stretch = 0;
    const double p = predict_contended_us(in, {1, 2});
    const SearchResult r0 = search_partition(in);
    in.comm_stretch = 0.4;
    EXPECT_DOUBLE_EQ(predict_contended_us(in, {1, 2}), p + 0.4 * 15) << "rho " << rho;
    const SearchResult r1 = search_partition(in);
    EXPECT_EQ(r1.group_waves, r0.group_waves) << "rho " << rho;
    EXPECT_DOUBLE_EQ(r1.predicted_us, r0.predicted_us + 0.4 * 15) << "rho " << rho;
    // With a sequential time between the two predictions, only the calibrated one falls back.
    in.sequential_us = (r0.predicted_us + 0.2 * 15) / in.max_ratio;
    EXPECT_TRUE(search_partition(in).sequential) << "rho " << rho;
    in.comm_stretch = 0;
    EXPECT_FALSE(search_partition(in).sequential) << "rho " << rho;
    in.sequential_us = 0;
  }
}

TEST(OverlapSearch, CalibrationTable) {
  const auto rows = parse_overlap_table("# comment\nnccl-kernels\t0.5  # trailing\n\nnccl-symmetric 0.125\n");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].first, "nccl-kernels");
  EXPECT_DOUBLE_EQ(rows[0].second, 0.5);
  EXPECT_DOUBLE_EQ(rows[1].second, 0.125);
  EXPECT_THROW(parse_overlap_table("nccl-kernels\n"), braid::UsageError);
  EXPECT_THROW(parse_overlap_table("nccl-kernels x\n"), braid::UsageError);
  EXPECT_THROW(parse_overlap_table("nccl-kernels -1\n"), braid::UsageError);
  EXPECT_THROW(parse_overlap_table("nccl-kernels 1 2\n"), braid::UsageError);
  // The embedded table (tuning/overlap.tsv) has every transport; without BRAID_OVERLAP_COMM_STRETCH its
  // values are what the search uses.
  if (!std::getenv("BRAID_OVERLAP_COMM_STRETCH")) {
    EXPECT_GT(default_comm_stretch(Transport::kNcclKernels), 0);
    EXPECT_GT(default_comm_stretch(Transport::kNcclSymmetric), 0);
    EXPECT_DOUBLE_EQ(default_comm_stretch(Transport::kNcclCopyEngine), 0);
  }
}

TEST(OverlapSearch, InputsRoundTrip) {
  MeasuredInputs mi;
  mi.coll = Collective::kAllReduce;
  mi.m = 16384, mi.n = 8192, mi.k = 1024, mi.sm_count = 116;
  mi.in = inputs(36, 12.5, 30, 300);
  mi.in.interference = 1.32;
  mi.in.sequential_us = 969.5;
  std::string tmp = temp_file("braid_overlap_inputs");
  ASSERT_FALSE(tmp.empty());
  char* path = tmp.data();
  save_inputs(path, {mi, mi});
  auto v = load_inputs(path);
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[1].coll, Collective::kAllReduce);
  EXPECT_EQ(v[1].in.waves, 36);
  EXPECT_DOUBLE_EQ(v[1].in.wave_us, 12.5);
  ASSERT_EQ(v[1].in.comm.bytes.size(), mi.in.comm.bytes.size());
  EXPECT_NEAR(v[1].in.comm.us.back(), mi.in.comm.us.back(), 1e-6 * mi.in.comm.us.back());
  EXPECT_DOUBLE_EQ(v[1].in.interference, 1.32);
  EXPECT_DOUBLE_EQ(v[1].in.sequential_us, 969.5);
  EXPECT_TRUE(v[1].in.tail.bytes.empty());
  // With a tail curve (the copy-engine sums), appended after the sequential time.
  std::remove(path);
  mi.in.tail.bytes = {1e6, 2e6};
  mi.in.tail.us = {7.5, 12.25};
  save_inputs(path, {mi});
  v = load_inputs(path);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].in.tail.bytes, mi.in.tail.bytes);
  EXPECT_EQ(v[0].in.tail.us, mi.in.tail.us);
  EXPECT_DOUBLE_EQ(v[0].in.sequential_us, 969.5);
  EXPECT_DOUBLE_EQ(v[0].in.comm_start_us, 0);
  // comm_start, after the tail and without one.
  std::remove(path);
  mi.in.comm_start_us = 23.5;
  save_inputs(path, {mi});
  mi.in.tail = BandwidthCurve{};
  save_inputs(path, {mi});
  v = load_inputs(path);
  ASSERT_EQ(v.size(), 2u);
  EXPECT_DOUBLE_EQ(v[0].in.comm_start_us, 23.5);
  EXPECT_EQ(v[0].in.tail.us.size(), 2u);
  EXPECT_DOUBLE_EQ(v[1].in.comm_start_us, 23.5);
  EXPECT_TRUE(v[1].in.tail.bytes.empty());
  EXPECT_DOUBLE_EQ(v[1].in.sequential_us, 969.5);
  EXPECT_FALSE(v[1].in.tail_after_gemm);
  // tail_after_gemm, after comm_start and alone after the tail.
  std::remove(path);
  mi.in.tail.bytes = {1e6, 2e6};
  mi.in.tail.us = {7.5, 12.25};
  mi.in.tail_after_gemm = true;
  save_inputs(path, {mi});
  mi.in.comm_start_us = 0;
  save_inputs(path, {mi});
  v = load_inputs(path);
  ASSERT_EQ(v.size(), 2u);
  EXPECT_TRUE(v[0].in.tail_after_gemm);
  EXPECT_DOUBLE_EQ(v[0].in.comm_start_us, 23.5);
  EXPECT_TRUE(v[1].in.tail_after_gemm);
  EXPECT_DOUBLE_EQ(v[1].in.comm_start_us, 0);
  EXPECT_EQ(v[1].in.tail.us, mi.in.tail.us);
  std::remove(path);
}

// Candidates for a timed choice: distinct partitions of several groups covering the waves, ordered by the
// contended prediction, at most k; the search's own choice (when it overlaps) is the first; with a tail,
// the tail-in-line model's bests join the list.
TEST(OverlapSearch, CandidatePartitions) {
  SearchInputs in = inputs(36, 11.5, 30.0, 350.0);
  in.interference = 0.3;
  const SearchResult r = search_partition(in);
  ASSERT_FALSE(r.sequential);
  ASSERT_GT(r.group_waves.size(), 1u);
  const auto c = candidate_partitions(in, 8, 5);
  ASSERT_FALSE(c.empty());
  EXPECT_LE(c.size(), 5u);
  EXPECT_EQ(c.front(), r.group_waves);
  for (size_t i = 0; i < c.size(); ++i) {
    int sum = 0;
    for (int w : c[i]) sum += w;
    EXPECT_EQ(sum, 36);
    EXPECT_GT(c[i].size(), 1u);
    for (size_t j = 0; j < i; ++j) EXPECT_NE(c[i], c[j]);
    if (i) {
      EXPECT_LE(predict_contended_us(in, c[i - 1]), predict_contended_us(in, c[i]) + 1e-9);
    }
  }
  // At most 7 group counts of several groups under max_groups 8; a tail adds the in-line model's bests.
  EXPECT_LE(candidate_partitions(in, 8, 100).size(), 7u);
  for (size_t i = 0; i < in.comm.bytes.size(); ++i) {
    in.tail.bytes.push_back(in.comm.bytes[i]);
    in.tail.us.push_back(5 + in.comm.bytes[i] / 1e6);
  }
  const auto ct = candidate_partitions(in, 8, 100);
  EXPECT_GE(ct.size(), 7u);
  EXPECT_LE(ct.size(), 14u);
}

// `braid plan-overlap`: the search replayed on an inputs file prints one row per shape, the same decision
// and prediction as search_partition.
TEST(OverlapSearch, PlanOverlapReplaysTheSearch) {
  MeasuredInputs mi;
  mi.m = 16384, mi.n = 8192, mi.k = 1024, mi.sm_count = 116;
  mi.in = inputs(36, 11.5, 3.0, 350.0);
  mi.in.sequential_us = 2000;  // overlap clearly wins
  MeasuredInputs slow = mi;
  slow.m = 8192;
  slow.in.sequential_us = 100;  // nothing beats it: fall back
  std::string tmp = temp_file("braid_plan_overlap");
  ASSERT_FALSE(tmp.empty());
  char* path = tmp.data();
  save_inputs(path, {mi, slow});
  std::string arg_inputs = "--inputs", arg_t = "--transport", t = "symmetric";
  char* argv[] = {arg_inputs.data(), path, arg_t.data(), t.data()};
  std::ostringstream os;
  EXPECT_EQ(plan_overlap_main(4, argv, os), 0);
  std::remove(path);
  const std::string out = os.str();
  std::istringstream lines(out);
  std::string line;
  std::vector<std::string> rows;
  while (std::getline(lines, line))
    if (!line.empty() && line[0] != '#') rows.push_back(line);
  ASSERT_EQ(rows.size(), 2u) << out;
  EXPECT_NE(rows[0].find("overlap"), std::string::npos) << rows[0];
  EXPECT_NE(rows[1].find("sequential"), std::string::npos) << rows[1];
  SearchInputs in = mi.in;
  in.comm_stretch = default_comm_stretch(Transport::kNcclSymmetric);
  const SearchResult r = search_partition(in);
  char want[32];
  std::snprintf(want, sizeof want, "%.1f", r.predicted_us);
  EXPECT_NE(rows[0].find(want), std::string::npos) << rows[0] << " vs " << want;
}


// AutoGemmComm's picks (no GPU): names round-trip and bad ones are refused; legality follows OwnerOrderedRs's
// divisibility; the rule without a measurement; the pick cache's text, replacement and nearest-M lookup.
TEST(GemmCommPick, NamesRoundTrip) {
  using S = GemmCommPick::Schedule;
  const std::vector<GemmCommPick> all{GemmCommPick{},
                                GemmCommPick{S::kFlashOverlap},
                                GemmCommPick{S::kOwnerOrdered, OwnerGemm::kCublas, 1},
                                GemmCommPick{S::kOwnerOrdered, OwnerGemm::kCublas, 4},
                                GemmCommPick{S::kOwnerOrdered, OwnerGemm::kBraid, 1},
                                GemmCommPick{S::kOwnerOrdered, OwnerGemm::kBraid, 16},
                                GemmCommPick::t3_op(braid::t3::Variant::kRingCublas),
                                GemmCommPick::t3_op(braid::t3::Variant::kRingDma),
                                GemmCommPick::t3_op(braid::t3::Variant::kRing),
                                GemmCommPick::t3_op(braid::t3::Variant::kDirect),
                                GemmCommPick::t3_op(braid::t3::Variant::kDirectTma),
                                GemmCommPick{S::kPull}};
  const std::vector<std::string> names{"sequential", "flashoverlap", "owner-cublas", "owner-cublas-c4", "owner-braid",
                                       "owner-braid-c16", "t3-ring-cublas", "t3-ring-dma", "t3-ring", "t3-direct",
                                       "t3-direct-tma", "cublas-pull"};
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(pick_name(all[i]), names[i]);
    EXPECT_EQ(parse_pick(names[i]), all[i]) << names[i];
  }
  for (const char* bad : {"", "owner", "owner-cublas-", "owner-cublas-c", "owner-cublas-c0", "owner-cublas-4",
                          "owner-cublas-c4x", "owner-cublas-c12345", "owner-nccl", "flash", "Sequential", "t3",
                          "t3-auto", "t3-ring-", "t3-sequential", "ring-cublas", "pull", "cublas-pull-c2"})
    EXPECT_THROW(parse_pick(bad), braid::UsageError) << bad;
}

constexpr Collective RS = Collective::kReduceScatter, AR = Collective::kAllReduce;

TEST(GemmCommPick, LegalityAndRule) {
  using S = GemmCommPick::Schedule;
  const GemmCommPick cub{S::kOwnerOrdered, OwnerGemm::kCublas, 1}, cub4{S::kOwnerOrdered, OwnerGemm::kCublas, 4},
      br{S::kOwnerOrdered, OwnerGemm::kBraid, 1}, br2{S::kOwnerOrdered, OwnerGemm::kBraid, 2};
  EXPECT_TRUE(pick_legal(GemmCommPick{}, RS, 2, 1024, 4096, 1024));
  EXPECT_FALSE(pick_legal(GemmCommPick{}, RS, 2, 1023, 4096, 1024));  // M % world
  EXPECT_TRUE(pick_legal(cub, RS, 2, 1024, 4096, 1024));
  EXPECT_FALSE(pick_legal(cub, RS, 2, 1024, 4100, 1024));        // N % 8
  EXPECT_FALSE(pick_legal(cub, RS, 32, 32 * 64, 4096, 1024));    // at most 16 ranks
  EXPECT_TRUE(pick_legal(cub4, RS, 2, 1024, 4096, 1024));        // 512 rows in 4 chunks
  EXPECT_FALSE(pick_legal(cub4, RS, 2, 1020, 4096, 1024));       // 510 rows: not in 4
  EXPECT_TRUE(pick_legal(br, RS, 2, 1024, 4096, 1024));          // 512 rows: 256-row steps
  EXPECT_TRUE(pick_legal(br2, RS, 2, 1024, 4096, 1024));         // 512 rows in 2 chunks of 256
  EXPECT_TRUE(pick_legal(br, RS, 4, 1024, 4096, 1024));          // 256 rows per block
  EXPECT_TRUE(pick_legal(br, RS, 2, 1536, 4096, 1024));          // 768 rows
  EXPECT_FALSE(pick_legal(br2, RS, 2, 1536, 4096, 1024));        // 384-row chunks
  EXPECT_FALSE(pick_legal(br, RS, 2, 1024, 4096 + 128, 1024));   // N % 256
  // All-reduce: the same owner-ordered rules; FlashOverlap is a reduce-scatter candidate only.
  EXPECT_TRUE(pick_legal(GemmCommPick{S::kFlashOverlap}, RS, 2, 1024, 4096, 1024));
  EXPECT_FALSE(pick_legal(GemmCommPick{S::kFlashOverlap}, AR, 2, 1024, 4096, 1024));
  EXPECT_TRUE(pick_legal(cub4, AR, 2, 1024, 4096, 1024));
  EXPECT_FALSE(pick_legal(br2, AR, 2, 1536, 4096, 1024));
  EXPECT_TRUE(pick_legal(GemmCommPick{}, AR, 2, 1024, 4096, 1024));
  // T3's fused reduce-scatters: 2 to 8 ranks, M in world x 256-row steps, N % 256, K % 64; never for all-reduce.
  const GemmCommPick t3c = GemmCommPick::t3_op(braid::t3::Variant::kRingCublas),
                     t3d = GemmCommPick::t3_op(braid::t3::Variant::kRingDma);
  EXPECT_TRUE(pick_legal(t3c, RS, 2, 1024, 4096, 1024));
  EXPECT_TRUE(pick_legal(t3d, RS, 4, 1024, 4096, 1024));           // 256 rows per rank
  EXPECT_FALSE(pick_legal(t3c, RS, 4, 1536, 4096, 1024));          // 384 rows per rank
  EXPECT_FALSE(pick_legal(t3c, RS, 2, 1024, 4096 + 128, 1024));    // N % 256
  EXPECT_FALSE(pick_legal(t3c, RS, 2, 1024, 4096, 1000));          // K % 64
  EXPECT_FALSE(pick_legal(t3c, RS, 1, 1024, 4096, 1024));          // a reduce-scatter over one rank
  EXPECT_FALSE(pick_legal(t3c, RS, 16, 16 * 256, 4096, 1024));     // at most 8 ranks
  EXPECT_FALSE(pick_legal(t3c, AR, 2, 1024, 4096, 1024));
  EXPECT_FALSE(pick_legal(GemmCommPick::t3_op(braid::t3::Variant::kAuto), RS, 2, 1024, 4096, 1024));
  EXPECT_FALSE(t3c == t3d);
  EXPECT_FALSE(t3c == GemmCommPick{});
  // GemmPullRs: reduce-scatter at 2 to 16 ranks, N % 8; never for all-reduce.
  const GemmCommPick pull{S::kPull};
  EXPECT_TRUE(pick_legal(pull, RS, 2, 1024, 4096, 1024));
  EXPECT_TRUE(pick_legal(pull, RS, 4, 1536, 4104, 1000));          // any M % world, N % 8, any K
  EXPECT_FALSE(pick_legal(pull, RS, 2, 1024, 4100, 1024));         // N % 8
  EXPECT_FALSE(pick_legal(pull, RS, 1, 1024, 4096, 1024));
  EXPECT_FALSE(pick_legal(pull, RS, 32, 32 * 64, 4096, 1024));     // at most 16 ranks
  EXPECT_FALSE(pick_legal(pull, AR, 2, 1024, 4096, 1024));
  EXPECT_FALSE(pull == GemmCommPick{});
  EXPECT_FALSE(pull == t3c);
  // The rule: owner-cublas from 512 rows per rank with peer access, else the baseline.
  EXPECT_EQ(default_pick(RS, 2, 1024, 4096, 1024, true), cub);
  EXPECT_EQ(default_pick(RS, 4, 2048, 4096, 1024, true), cub);
  EXPECT_EQ(default_pick(RS, 4, 1024, 4096, 1024, true), GemmCommPick{});
  EXPECT_EQ(default_pick(RS, 2, 1024, 4096, 1024, false), GemmCommPick{});
  EXPECT_EQ(default_pick(RS, 1, 1024, 4096, 1024, true), GemmCommPick{});
  EXPECT_EQ(default_pick(RS, 2, 1024, 4100, 1024, true), GemmCommPick{});
  // all-reduce: owner-ordered from 1024 rows per rank, 4 chunks from 2048
  EXPECT_EQ(default_pick(AR, 2, 8192, 8192, 4096, true), cub4);
  EXPECT_EQ(default_pick(AR, 2, 2048, 8192, 4096, true), cub);
  EXPECT_EQ(default_pick(AR, 2, 1024, 8192, 4096, true), GemmCommPick{});
  EXPECT_EQ(default_pick(AR, 2, 8192, 8192, 4096, false), GemmCommPick{});
  EXPECT_EQ(default_pick(AR, 2, 4098 * 2, 8192, 4096, true), cub);  // 4098 rows: 4 chunks do not divide them
}

// tune()'s choice: the fastest, but cuBLAS + NCCL stays unless beaten by more than the margin (a23551e: at 4 ranks
// a mis-timed tune picked owner ops at 0.66x of the baseline; the margin is the second guard).
TEST(GemmCommPick, ChoiceKeepsTheBaselineWithinTheMargin) {
  using S = GemmCommPick::Schedule;
  const GemmCommPick seq{}, cub{S::kOwnerOrdered, OwnerGemm::kCublas, 1}, br{S::kOwnerOrdered, OwnerGemm::kBraid, 1};
  EXPECT_EQ(choose_timed({{seq, 100.0}, {cub, 80.0}, {br, 90.0}}, 0.99), 1u);   // clearly faster
  EXPECT_EQ(choose_timed({{seq, 100.0}, {cub, 99.5}}, 0.99), 0u);               // within 1%: the baseline
  EXPECT_EQ(choose_timed({{seq, 100.0}, {cub, 99.0}}, 0.99), 1u);               // at the margin: kept
  EXPECT_EQ(choose_timed({{cub, 99.5}, {seq, 100.0}}, 0.99), 1u);               // wherever the baseline stands
  EXPECT_EQ(choose_timed({{seq, 100.0}, {cub, 120.0}}, 0.99), 0u);              // slower
  EXPECT_EQ(choose_timed({{cub, 50.0}, {br, 40.0}}, 0.99), 1u);                 // no baseline timed: the fastest
  EXPECT_EQ(choose_timed({{seq, 100.0}, {cub, 99.5}}, 1.0), 1u);                // no margin: the fastest
  EXPECT_THROW(choose_timed({}, 0.99), braid::UsageError);
}

TEST(PickCache, TextLookupAndFiles) {
  using S = GemmCommPick::Schedule;
  PickCache c;
  c.parse("# comment\n\nreducescatter 2 4096 8192 1024 owner-cublas-c4 180.5\n"
          "reducescatter 2 16384 8192 1024 flashoverlap\n"
          "reducescatter 2 4096 8192 1024 owner-cublas 190  # a later line replaces\n"
          "reducescatter 4 4096 8192 1024 sequential 10\nreducescatter 2 2048 8192 1024 owner-braid-c2 50\n"
          "allreduce 2 4096 8192 1024 owner-braid 300\n");
  ASSERT_EQ(c.entries().size(), 5u);
  const auto* e = c.lookup(RS, 2, 4096, 8192, 1024);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->pick, (GemmCommPick{S::kOwnerOrdered, OwnerGemm::kCublas, 1}));
  EXPECT_DOUBLE_EQ(e->us, 190);
  // Nearest M (ties: the larger): 10240 is 6144 from 4096 and 16384.
  ASSERT_NE(c.lookup(RS, 2, 10240, 8192, 1024), nullptr);
  EXPECT_EQ(c.lookup(RS, 2, 10240, 8192, 1024)->m, 16384);
  EXPECT_EQ(c.lookup(RS, 2, 8192, 8192, 1024)->m, 4096);
  // owner-braid-c2 at M = 2048 (512 rows, 256-row chunks) is legal there, not at M = 2560 (1280 rows: 640 a chunk):
  // the next nearest legal entry answers.
  EXPECT_EQ(c.lookup(RS, 2, 2048, 8192, 1024)->m, 2048);
  EXPECT_EQ(c.lookup(RS, 2, 2560, 8192, 1024)->m, 4096);
  EXPECT_EQ(c.lookup(RS, 4, 4096, 8192, 1024)->pick, GemmCommPick{});
  EXPECT_EQ(c.lookup(RS, 2, 4096, 8192, 2048), nullptr);  // another K
  EXPECT_EQ(c.lookup(RS, 8, 4096, 8192, 1024), nullptr);  // another world
  // The all-reduce entry answers all-reduce only (the nearest M at any M, no flashoverlap there).
  EXPECT_EQ(c.lookup(AR, 2, 4096, 8192, 1024)->pick, (GemmCommPick{S::kOwnerOrdered, OwnerGemm::kBraid, 1}));
  EXPECT_EQ(c.lookup(AR, 2, 16384, 8192, 1024)->m, 4096);
  EXPECT_EQ(c.lookup(AR, 2, 4096, 8192, 2048), nullptr);
  // The text round-trips.
  PickCache d;
  d.parse(c.text());
  ASSERT_EQ(d.entries().size(), c.entries().size());
  for (size_t i = 0; i < d.entries().size(); ++i) {
    EXPECT_EQ(d.entries()[i].pick, c.entries()[i].pick);
    EXPECT_EQ(d.entries()[i].coll, c.entries()[i].coll);
    EXPECT_EQ(d.entries()[i].m, c.entries()[i].m);
    EXPECT_DOUBLE_EQ(d.entries()[i].us, c.entries()[i].us);
  }
  // Files: a missing one is empty; what save writes, load reads.
  std::string tmp = temp_file("braid_rs_picks");
  ASSERT_FALSE(tmp.empty());
  char* path = tmp.data();
  c.save(path);
  PickCache f;
  f.load(path);
  EXPECT_EQ(f.entries().size(), c.entries().size());
  std::remove(path);
  PickCache none;
  none.load(path);
  EXPECT_TRUE(none.entries().empty());
  // Malformed lines name themselves.
  for (const char* bad :
       {"reducescatter 2 4096 8192 owner-cublas\n", "reducescatter 2 4096 8192 1024 owner-x\n",
        "reducescatter 0 4096 8192 1024 sequential\n", "reducescatter 2 4096 8192 1024 sequential fast\n",
        "reducescatter 2 -4 8192 1024 sequential\n", "2 4096 8192 1024 sequential\n",
        "allgather 2 4096 8192 1024 sequential\n", "allreduce 2 4096 8192 1024 flashoverlap\n",
        "reducescatter 2 1020 8192 1024 owner-cublas-c4\n", "allreduce 2 4096 8192 1024 t3-ring-cublas\n",
        "reducescatter 2 4096 8192 1000 t3-ring-dma\n"})
    EXPECT_THROW(PickCache().parse(bad), braid::UsageError) << bad;
  // A T3 pick round-trips through the text.
  PickCache t;
  t.parse("reducescatter 2 8192 8192 1024 t3-ring-cublas 250\n");
  ASSERT_NE(t.lookup(RS, 2, 8192, 8192, 1024), nullptr);
  EXPECT_EQ(t.lookup(RS, 2, 8192, 8192, 1024)->pick, GemmCommPick::t3_op(braid::t3::Variant::kRingCublas));
  EXPECT_NE(t.text().find("t3-ring-cublas"), std::string::npos);
}

}  // namespace
