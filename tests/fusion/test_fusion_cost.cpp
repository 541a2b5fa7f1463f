// Tables 1 and 2 of the paper and the time model.
#include <gtest/gtest.h>

#include <sstream>

#include "braid/fusion.hpp"

namespace bf = braid::fusion;
using bf::OpKind;
using bf::Transition;

namespace {
const bf::Problem kP{2, 1024, 4096, 2};  // B, S, H, bf16
double ratio(Transition t, int n1, int n2, int k = 1) { return bf::table2(t, kP, n1, n2, k).ratio(); }
}  // namespace

TEST(FusionTable1, RingVolumes) {
  const double d = kP.bsh_bytes();
  EXPECT_DOUBLE_EQ(bf::table1_overhead(OpKind::AllReduce, kP, 4), 2 * 3 * d / 4);
  EXPECT_DOUBLE_EQ(bf::table1_overhead(OpKind::ReduceScatter, kP, 4), 3 * d / 4);
  EXPECT_DOUBLE_EQ(bf::table1_overhead(OpKind::AllGather, kP, 8), 7 * d / 8);
  EXPECT_DOUBLE_EQ(bf::table1_overhead(OpKind::AllToAll, kP, 4, 2), 3 * d * 2 / 4);
  EXPECT_DOUBLE_EQ(bf::table1_overhead(OpKind::P2P, kP, 4), d);
  EXPECT_DOUBLE_EQ(bf::table1_overhead(OpKind::M2MS, kP, 4), d);
}

// The Ratio column of Table 2: the value at the smallest configuration and the limits of its range.
TEST(FusionTable2, TpSpIsHalf) {
  for (int n : {2, 4, 8, 64}) EXPECT_DOUBLE_EQ(ratio(Transition::TP_SP, n, n), 0.5);
}

TEST(FusionTable2, TpPpBetween60And80) {
  EXPECT_DOUBLE_EQ(ratio(Transition::TP_PP, 2, 2), 0.75);
  EXPECT_DOUBLE_EQ(ratio(Transition::TP_PP, 4, 4), 0.7);
  EXPECT_NEAR(ratio(Transition::TP_PP, 1 << 20, 2), 0.6, 1e-5);  // N1 -> inf, N2 = 2
  EXPECT_NEAR(ratio(Transition::TP_PP, 2, 1 << 20), 0.8, 1e-5);  // N1 = 2, N2 -> inf
  for (int a = 2; a <= 64; a *= 2)
    for (int b = 2; b <= 64; b *= 2) {
      EXPECT_GT(ratio(Transition::TP_PP, a, b), 0.6);
      EXPECT_LT(ratio(Transition::TP_PP, a, b), 0.8);
    }
}

TEST(FusionTable2, TpEpBetween67And100) {
  EXPECT_NEAR(ratio(Transition::TP_EP, 2, 2, 1), 2.0 / 3, 1e-12);
  EXPECT_NEAR(ratio(Transition::TP_EP, 8, 8, 1 << 20), 1.0, 1e-5);
  for (int n = 2; n <= 64; n *= 2)
    for (int k = 1; k <= 8; k *= 2) EXPECT_GE(ratio(Transition::TP_EP, n, n, k), 2.0 / 3 - 1e-12);
}

TEST(FusionTable2, PpEpBelow67) {
  EXPECT_NEAR(ratio(Transition::PP_EP, 2, 2, 1), 2.0 / 3, 1e-12);
  EXPECT_NEAR(ratio(Transition::PP_EP, 8, 8, 2), 1.0 / (1 + 7.0 * 2 / 8), 1e-12);
  EXPECT_LT(ratio(Transition::PP_EP, 1 << 20, 1 << 20, 1 << 10), 1e-3);  // -> 0%
}

TEST(FusionTable2, SpPpBetween50And67) {
  EXPECT_NEAR(ratio(Transition::SP_PP, 2, 2), 2.0 / 3, 1e-12);
  EXPECT_NEAR(ratio(Transition::SP_PP, 4, 4), 4.0 / 7, 1e-12);
  EXPECT_NEAR(ratio(Transition::SP_PP, 1 << 20, 1 << 20), 0.5, 1e-6);
}

TEST(FusionTable2, SpEpBetween50And100) {
  EXPECT_DOUBLE_EQ(ratio(Transition::SP_EP, 4, 4, 1), 0.5);
  EXPECT_NEAR(ratio(Transition::SP_EP, 4, 4, 2), 2.0 / 3, 1e-12);
  EXPECT_NEAR(ratio(Transition::SP_EP, 4, 4, 1 << 20), 1.0, 1e-5);
}

TEST(FusionCost, AlphaBetaTimeOfAnAllReduce) {
  bf::Dims d{2, 8, 16, 32, 0, 1, 2};
  const bf::Graph g = bf::build_transition(Transition::TP_SP, d, 4, 4);
  const bf::Link link{100e9, 5e-6};
  for (const bf::Op& op : g.ops) {
    if (op.kind != OpKind::AllReduce) continue;
    const bf::OpCost c = bf::op_cost(g, op, link);
    const double bytes = 2.0 * 8 * 16 * 2;
    EXPECT_DOUBLE_EQ(c.message, bytes);
    EXPECT_DOUBLE_EQ(c.volume, 2 * 3 * bytes / 4);
    EXPECT_DOUBLE_EQ(c.seconds, 5e-6 + c.volume / 100e9);
  }
}

TEST(FusionCost, CalibrationInterpolatesAndExtends) {
  std::istringstream in("# op bytes seconds\nAR 1000 1e-5\nAR 3000 3e-5  # comment\nRS 100 2e-6\n");
  const bf::Calibration cal = bf::parse_calibration(in);
  EXPECT_TRUE(cal.has(OpKind::AllReduce));
  EXPECT_FALSE(cal.has(OpKind::AllGather));
  EXPECT_DOUBLE_EQ(cal.seconds(OpKind::AllReduce, 500), 1e-5);    // clamped below
  EXPECT_DOUBLE_EQ(cal.seconds(OpKind::AllReduce, 2000), 2e-5);   // interpolated
  EXPECT_DOUBLE_EQ(cal.seconds(OpKind::AllReduce, 5000), 5e-5);   // last slope
  EXPECT_DOUBLE_EQ(cal.seconds(OpKind::ReduceScatter, 200), 4e-6);  // one point: constant bandwidth
  std::istringstream bad("XX 1 2\n");
  EXPECT_THROW(bf::parse_calibration(bad), std::runtime_error);
}
