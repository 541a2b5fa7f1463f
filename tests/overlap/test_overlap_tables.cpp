// Host model of the persistent scheduler's order and the reordering tables: every tile is scheduled
// once, groups are contiguous, the reordered layout is a bijection, reduce-scatter parts are whole rows.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "braid/errors.hpp"
#include "braid/overlap.hpp"

using namespace braid::overlap;

namespace {

TileGrid grid(int tm, int tn, int ctas, int cm, int cn, bool along_m, int log_swz, int bm = 128, int bn = 256) {
  TileGrid g;
  g.bm = bm, g.bn = bn, g.tiles_m = tm, g.tiles_n = tn, g.ctas = ctas;
  g.cluster_m = cm, g.cluster_n = cn, g.raster_along_m = along_m, g.log_swizzle = log_swz;
  return g;
}

TEST(OverlapTables, ExecutionOrderIsAPermutation) {
  for (auto g : {grid(8, 4, 6, 2, 1, false, 0), grid(8, 4, 6, 2, 1, true, 0), grid(6, 6, 10, 1, 2, false, 1),
                 grid(128, 32, 132, 2, 1, false, 0), grid(7, 5, 9, 1, 1, true, 2)}) {
    auto order = execution_order(g);
    std::set<int> seen;
    for (int t : order)
      if (t >= 0) {
        EXPECT_TRUE(seen.insert(t).second) << "tile " << t << " twice";
      }
    EXPECT_EQ(static_cast<int>(seen.size()), g.num_tiles());
  }
}

TEST(OverlapTables, AlongNWithClusterOfTwoWalksPairsOfRows) {
  // Cluster 2x1, raster along N, no swizzle: work i and i+1 are the two CTAs of one cluster (rows 2c,
  // 2c+1 of the same column), then the column advances.
  auto order = execution_order(grid(4, 3, 4, 2, 1, false, 0));
  ASSERT_GE(order.size(), 6u);
  EXPECT_EQ(order[0], 0 * 3 + 0);
  EXPECT_EQ(order[1], 1 * 3 + 0);
  EXPECT_EQ(order[2], 0 * 3 + 1);
  EXPECT_EQ(order[3], 1 * 3 + 1);
  EXPECT_EQ(order[4], 0 * 3 + 2);
  EXPECT_EQ(order[6], 2 * 3 + 0);
}

TEST(OverlapTables, GroupsAreContiguousAndFollowWaves) {
  auto g = grid(16, 8, 20, 2, 1, false, 0, 128, 128);  // 128 tiles, 7 waves (last partial)
  ASSERT_EQ(g.num_waves(), 7);
  Mapping m = make_mapping(g, {1, 2, 2, 2}, 1);
  ASSERT_EQ(m.groups(), 4);
  EXPECT_EQ(m.group_first.front(), 0);
  EXPECT_EQ(m.group_first.back(), g.num_tiles());
  EXPECT_EQ(m.tiles_in_group(0), 20);
  EXPECT_EQ(m.tiles_in_group(1), 40);
  EXPECT_EQ(m.tiles_in_group(3), 128 - 100);
  auto order = execution_order(g);
  for (size_t L = 0; L < order.size(); ++L) {
    const int t = order[L];
    EXPECT_EQ(m.tile_slot[t], static_cast<int>(L));
    const int wave = static_cast<int>(L) / g.ctas;
    const int want = wave == 0 ? 0 : (wave - 1) / 2 + 1;
    EXPECT_EQ(m.tile_group[t], want);
    EXPECT_EQ(m.slot_tile[m.tile_slot[t]], t);
  }
  EXPECT_THROW(make_mapping(g, {1, 2}, 1), braid::UsageError);
  EXPECT_THROW(make_mapping(g, {}, 3), braid::UsageError);
}

void check_layout(const TileGrid& g, const std::vector<int>& waves, int parts) {
  Mapping m = make_mapping(g, waves, parts);
  const int64_t M = int64_t(g.tiles_m) * g.bm, N = int64_t(g.tiles_n) * g.bn;
  std::vector<int> hit(size_t(M * N), 0);
  const int64_t sub = g.bm / parts;
  for (int64_t r = 0; r < M; ++r)
    for (int64_t c = 0; c < N; ++c) {
      int p = -1;
      const int64_t i = reordered_index(m, r, c, &p);
      ASSERT_GE(i, 0);
      ASSERT_LT(i, M * N);
      hit[i]++;
      const int t = static_cast<int>((r / g.bm) * g.tiles_n + c / g.bn);
      const int grp = m.tile_group[t];
      // Inside its group's contiguous range, and inside part p's share of it (what NCCL RS sends to p).
      const int64_t off = m.group_offset(grp), len = m.group_elems(grp);
      ASSERT_GE(i, off + p * len / parts);
      ASSERT_LT(i, off + (p + 1) * len / parts);
      EXPECT_EQ(p, (r % g.bm) / sub);
      // Reduce-scatter: rank p's receive index is the send index minus the other parts' shares.
      const int64_t recv = scattered_index(m, r, c);
      EXPECT_EQ(recv, off / parts + (i - off - p * len / parts));
    }
  for (auto h : hit) ASSERT_EQ(h, 1);
  // Block-cyclic rows: every original row belongs to exactly one (part, local row).
  std::vector<int> rows(size_t(M), 0);
  for (int p = 0; p < parts; ++p)
    for (int64_t j = 0; j < M / parts; ++j) {
      const int64_t r = rs_original_row(m, p, j);
      ASSERT_LT(r, M);
      EXPECT_EQ((r % g.bm) / sub, p);
      rows[r]++;
    }
  for (auto h : rows) EXPECT_EQ(h, 1);
}

TEST(OverlapTables, ReorderedLayoutIsABijectionAllReduce) { check_layout(grid(6, 4, 5, 2, 1, false, 0, 32, 16), {1, 2, 2}, 1); }
TEST(OverlapTables, ReorderedLayoutIsABijectionReduceScatter2) {
  check_layout(grid(6, 4, 5, 2, 1, false, 0, 32, 16), {2, 3}, 2);
}
TEST(OverlapTables, ReorderedLayoutIsABijectionReduceScatter4) {
  check_layout(grid(4, 6, 7, 1, 2, true, 1, 32, 16), {}, 4);
}

}  // namespace
