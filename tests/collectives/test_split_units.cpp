// The units of the one-step split kernel (src/collectives/split_units.hpp): every chunk's groups are cut into
// consecutive, non-empty, non-overlapping units that cover it exactly, tapered ends where asked and where the
// chunk is long enough, and never more units than the flag table holds (one per iteration and chunk, plus one).
#include <gtest/gtest.h>

#include <cstdint>

#include "../../src/collectives/split_units.hpp"

using braid::ar::SplitUnits;

namespace {
void check_partition(uint64_t gpc, uint64_t ug, uint64_t a, uint64_t s, uint64_t iter_groups) {
  const SplitUnits su(gpc, ug, a, s);
  uint64_t next = 0;
  for (uint64_t j = 0; j < su.per_chunk(); ++j) {
    uint64_t ga = 0, gb = 0;
    su.range(j, ga, gb);
    ASSERT_EQ(ga, next) << "gpc " << gpc << " ug " << ug << " a " << a << " s " << s << " unit " << j;
    ASSERT_GT(gb, ga) << "empty unit " << j;
    next = gb;
  }
  EXPECT_EQ(next, gpc) << "gpc " << gpc << " ug " << ug << " a " << a << " s " << s;
  EXPECT_LE(su.per_chunk(), gpc / iter_groups + 1) << "more units than the flag table's (gpc " << gpc << ")";
}
}  // namespace

TEST(SplitUnits, UniformWithoutTaper) {
  const SplitUnits su(1000, 96, 0, 32);
  EXPECT_EQ(su.per_chunk(), 11u);  // ceil(1000 / 96)
  uint64_t ga = 0, gb = 0;
  su.range(10, ga, gb);
  EXPECT_EQ(ga, 960u);
  EXPECT_EQ(gb, 1000u);
}

TEST(SplitUnits, TaperedEndsAroundTheMiddle) {
  // 64 MiB of bf16 at two ranks and g = 128: 131072 groups per chunk; INT4's 16-iteration units (512 groups)
  // with 4 one-iteration units (32 groups) at each end.
  const SplitUnits su(131072, 512, 4, 32);
  EXPECT_EQ(su.per_chunk(), 8u + (131072u - 256u + 511u) / 512u);
  uint64_t ga = 0, gb = 0;
  su.range(0, ga, gb);
  EXPECT_EQ(gb - ga, 32u);
  su.range(4, ga, gb);
  EXPECT_EQ(ga, 128u);
  EXPECT_EQ(gb - ga, 512u);
  su.range(su.per_chunk() - 1, ga, gb);
  EXPECT_EQ(gb, 131072u);
  EXPECT_EQ(gb - ga, 32u);
}

TEST(SplitUnits, ShortChunksFallBackToUniformUnits) {
  const SplitUnits su(64, 96, 2, 32);  // 2 x 2 x 32 = 128 > 64 groups
  EXPECT_EQ(su.a, 0u);
  EXPECT_EQ(su.per_chunk(), 1u);
}

TEST(SplitUnits, EveryShapePartitionsTheChunk) {
  for (uint64_t iter_groups : {16u, 32u, 128u})  // g = 256, 128, 32 at 512 threads x 8 values
    for (uint64_t gpc : {1u, 2u, 31u, 32u, 33u, 200u, 4096u, 4097u, 131072u, 131075u})
      for (uint64_t split : {1u, 3u, 8u, 16u})
        for (uint64_t a : {0u, 1u, 2u, 4u})
          for (uint64_t ti : {1u, 2u}) {
            if (ti > split) continue;  // the host caps the ends at a middle unit
            check_partition(gpc, split * iter_groups, a, ti * iter_groups, iter_groups);
          }
}
