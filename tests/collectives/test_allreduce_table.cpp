// CPU: the embedded all-reduce tuning table parses and picks what it says; lossy precisions are only
// picked for lossy requests.
#include <gtest/gtest.h>

#include "braid/allreduce.hpp"

using braid::ArAlgo;
using braid::DType;
using braid::Precision;

TEST(AllReduceTable, BuiltinTableParsesAndPicks) {
  const auto t = braid::parse_tuning_table(braid::builtin_allreduce_table());
  ASSERT_FALSE(t.empty());
  EXPECT_EQ(braid::pick_from_table(t, 2, DType::kBF16, Precision::kExact, 64 << 10), ArAlgo::kOneShotLL128);
  EXPECT_EQ(braid::pick_from_table(t, 2, DType::kBF16, Precision::kExact, 4 << 20), ArAlgo::kOneShotLL128);
  EXPECT_EQ(braid::pick_from_table(t, 2, DType::kFP16, Precision::kExact, 16 << 20), ArAlgo::kOneShotLL128);
  EXPECT_EQ(braid::pick_from_table(t, 2, DType::kBF16, Precision::kExact, 64 << 20), ArAlgo::kTwoShot);
  EXPECT_EQ(braid::pick_from_table(t, 2, DType::kBF16, Precision::kExact, size_t(1) << 30), ArAlgo::kNccl);
  EXPECT_EQ(braid::pick_from_table(t, 4, DType::kBF16, Precision::kExact, 64 << 10), ArAlgo::kOneShotLL128);
  EXPECT_EQ(braid::pick_from_table(t, 4, DType::kFP16, Precision::kExact, 512 << 10), ArAlgo::kOneShotLL128);
  EXPECT_EQ(braid::pick_from_table(t, 4, DType::kBF16, Precision::kExact, 4 << 20), ArAlgo::kTwoShot);
  EXPECT_EQ(braid::pick_from_table(t, 4, DType::kBF16, Precision::kExact, 32 << 20), ArAlgo::kTwoShot);
  EXPECT_EQ(braid::pick_from_table(t, 4, DType::kBF16, Precision::kExact, 64 << 20), ArAlgo::kNccl);
  EXPECT_EQ(braid::pick_from_table(t, 8, DType::kBF16, Precision::kExact, 64 << 10), ArAlgo::kNccl);  // unmeasured
  EXPECT_EQ(braid::pick_from_table(t, 2, DType::kBF16, Precision::kInt8, 64 << 20), ArAlgo::kQuantOneStep);
  EXPECT_EQ(braid::pick_from_table(t, 2, DType::kFP16, Precision::kInt4, 1 << 20), ArAlgo::kQuantOneStep);
  // INT6 at world 2: its one-step form (INT4 codes once, step 2 on every rank: the two-step's bits)
  EXPECT_EQ(braid::pick_from_table(t, 2, DType::kBF16, Precision::kInt6, 64 << 20), ArAlgo::kQuantOneStep);
  EXPECT_EQ(braid::pick_from_table(t, 4, DType::kBF16, Precision::kInt6, 64 << 20), ArAlgo::kQuantP2P);
  EXPECT_EQ(braid::pick_from_table(t, 4, DType::kBF16, Precision::kInt8, 64 << 20), ArAlgo::kQuantP2P);
  for (size_t b = 1; b < (size_t(1) << 34); b *= 4) {
    const ArAlgo a = braid::pick_from_table(t, 2, DType::kBF16, Precision::kExact, b);
    EXPECT_NE(a, ArAlgo::kQuantP2P) << b;
    EXPECT_NE(a, ArAlgo::kQuantNccl) << b;
    EXPECT_NE(a, ArAlgo::kQuantOneStep) << b;
  }
}

TEST(AllReduceTable, RejectsUnknownAlgorithms) {
  EXPECT_THROW(braid::parse_tuning_table("2\tbf16\texact\t100\tmagic\n"), braid::UsageError);
  const auto t = braid::parse_tuning_table("# comment\n*\t*\texact\t1000\ttwoshot\n");
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(braid::pick_from_table(t, 4, DType::kFP16, Precision::kExact, 999), ArAlgo::kTwoShot);
  EXPECT_EQ(braid::pick_from_table(t, 4, DType::kFP16, Precision::kExact, 1001), ArAlgo::kAuto);
}

// The copy-engine one-shot is a run_symmetric algorithm: it parses (for the bench and run_symmetric's
// callers) but a tuning table, which serves run(), may not name it.
TEST(AllReduceTable, CopyEngineOneShotIsNotATableAlgorithm) {
  ArAlgo a;
  Precision p;
  ASSERT_TRUE(braid::parse_algo("oneshot-ce", &a, &p));
  EXPECT_EQ(a, ArAlgo::kOneShotCE);
  EXPECT_EQ(p, Precision::kExact);
  EXPECT_STREQ(braid::algo_name(ArAlgo::kOneShotCE), "oneshot-ce");
  EXPECT_THROW(braid::parse_tuning_table("2\tbf16\texact\t100\toneshot-ce\n"), braid::UsageError);
}

TEST(AllReduceTable, AlgorithmNamesRoundTrip) {
  for (const char* n : {"nccl", "oneshot", "oneshot-ll", "oneshot-ll128", "twoshot", "int8", "int6-nccl", "int4"}) {
    ArAlgo a;
    Precision p;
    ASSERT_TRUE(braid::parse_algo(n, &a, &p)) << n;
  }
  ArAlgo a;
  Precision p;
  EXPECT_FALSE(braid::parse_algo("int3", &a, &p));
}

// The one-step quantized all-reduce: INT8, INT4, and INT6 (the two-step's bits, step 2 on every rank); no
// kernel suffixes.
TEST(AllReduceTable, OneStepNamesParse) {
  ArAlgo a;
  Precision p;
  ASSERT_TRUE(braid::parse_algo("int8-1step", &a, &p));
  EXPECT_EQ(a, ArAlgo::kQuantOneStep);
  EXPECT_EQ(p, Precision::kInt8);
  ASSERT_TRUE(braid::parse_algo("int4-1step", &a, &p));
  EXPECT_EQ(p, Precision::kInt4);
  ASSERT_TRUE(braid::parse_algo("int6-1step", &a, &p));
  EXPECT_EQ(a, ArAlgo::kQuantOneStep);
  EXPECT_EQ(p, Precision::kInt6);
  braid::QuantImpl i;
  EXPECT_FALSE(braid::parse_algo("int8-1step-pipe", &a, &p, &i));
  EXPECT_STREQ(braid::algo_name(ArAlgo::kQuantOneStep), "quant-1step");
  const auto t = braid::parse_tuning_table("2\tbf16\tint8\t100\tquant-1step\n");
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].algo, ArAlgo::kQuantOneStep);
}

TEST(AllReduceTable, QuantImplSuffixesSelectTheFusedKernel) {
  ArAlgo a;
  Precision p;
  braid::QuantImpl i;
  ASSERT_TRUE(braid::parse_algo("int8-pipe", &a, &p, &i));
  EXPECT_EQ(a, ArAlgo::kQuantP2P);
  EXPECT_EQ(p, Precision::kInt8);
  EXPECT_EQ(i, braid::QuantImpl::kPipelined);
  ASSERT_TRUE(braid::parse_algo("int4-classic", &a, &p, &i));
  EXPECT_EQ(p, Precision::kInt4);
  EXPECT_EQ(i, braid::QuantImpl::kClassic);
  ASSERT_TRUE(braid::parse_algo("int6", &a, &p, &i));
  EXPECT_EQ(i, braid::QuantImpl::kDefault);
  ASSERT_TRUE(braid::parse_algo("twoshot", &a, &p, &i));
  EXPECT_EQ(i, braid::QuantImpl::kDefault);
  EXPECT_FALSE(braid::parse_algo("int8-nccl-pipe", &a, &p, &i));  // the NCCL transport has one kernel set
  EXPECT_FALSE(braid::parse_algo("twoshot-pipe", &a, &p, &i));
  EXPECT_FALSE(braid::parse_algo("int8-pipe", &a, &p));           // the plain parser (tuning tables) refuses it
  EXPECT_TRUE(braid::parse_quant_impl("pipelined", &i));
  EXPECT_FALSE(braid::parse_quant_impl("fast", &i));
}
