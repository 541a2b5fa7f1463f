// Host model of the persistent scheduler's order and the reordering tables: every tile is scheduled
// once, groups are contiguous, the reordered layout is a bijection, reduce-scatter parts are whole rows.
// Also the host side of the reduced-output check (SumRef, sum_tolerance).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "braid/errors.hpp"
#include "braid/overlap.hpp"
#include "braid/overlap/verify.hpp"

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

// The swizzle cap braid's GEMM runs with leaves no phantom work item at that swizzle or any smaller one
// (CUTLASS may pick a smaller one), for both tile configurations' clusters and both rasters.
TEST(OverlapTables, SwizzleCapLeavesNoPhantomTiles) {
  EXPECT_EQ(swizzle_without_phantoms(8, 16, 2, 1, 8), 4);    // M = 1024 at 128x256: strips of 8 m-blocks
  EXPECT_EQ(swizzle_without_phantoms(128, 64, 2, 1, 8), 8);  // M = 16384, N = 16384
  EXPECT_EQ(swizzle_without_phantoms(8, 3, 2, 1, 8), 1);     // N = 768 at 256: 3 n-blocks
  EXPECT_EQ(swizzle_without_phantoms(4, 3, 2, 1, 8), 1);     // M = 512, N = 384 at 128x128
  EXPECT_EQ(swizzle_without_phantoms(64, 64, 2, 1, 6), 4);   // a cap that is not a power of two
  for (int tm = 2; tm <= 40; tm += 2)
    for (int tn = 1; tn <= 40; ++tn)
      for (int cap : {1, 2, 4, 8}) {
        const int s = swizzle_without_phantoms(tm, tn, 2, 1, cap);
        ASSERT_GE(s, 1);
        ASSERT_LE(s, cap);
        for (int log = 0; (1 << log) <= s; ++log)
          for (bool along_m : {false, true}) {
            const auto order = execution_order(grid(tm, tn, 132, 2, 1, along_m, log));
            for (int t : order) ASSERT_GE(t, 0) << tm << "x" << tn << " cap " << cap << " swizzle " << (1 << log);
          }
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
  std::vector<std::vector<int64_t>> shifts;  // [sender][group * parts + part]
  std::vector<std::vector<int>> landed(size_t(parts), std::vector<int>(size_t(M * N), 0));  // [receiver][slot]
  for (int me = 0; me < parts && parts > 1; ++me) shifts.push_back(part_store_shifts(m, parts, me));
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
      // By stores (OverlapOptions::peer_stores): sender `me` stores element i of part p != me into rank p's receive
      // buffer where the copy-engine push puts it (chunk `me` of the group there), each slot from one sender.
      for (int me = 0; me < parts && parts > 1; ++me) {
        const int64_t at = i + shifts[size_t(me)][size_t(grp) * parts + p];
        if (p == me) {
          EXPECT_EQ(at, i);  // own part: stays in d_
          continue;
        }
        EXPECT_EQ(at, off + me * len / parts + (i - off - p * len / parts));
        ASSERT_GE(at, 0);
        ASSERT_LT(at, M * N);
        landed[size_t(p)][size_t(at)]++;
      }
    }
  for (auto h : hit) ASSERT_EQ(h, 1);
  // Every receiver's slot is written by at most one sender (each peer's chunks, the own chunk's slots unused).
  for (const auto& l : landed)
    for (auto h : l) ASSERT_LE(h, 1);
  if (parts > 1) {
    EXPECT_THROW(part_store_shifts(m, parts + 1, 0), braid::UsageError);
  }
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

// GEMM + all-to-all: a host model of the whole data path (epilogue addresses -> per-group NCCL segments ->
// the receiver's gather), and of the baseline (pack -> per-peer segments), delivers every rank exactly
// the rows routed to it, ordered by source then row, for skewed and empty routings.
namespace {
using Cell = int64_t;  // encodes (source rank, row, column)
Cell cell(int q, int64_t row, int64_t col) { return (int64_t(q) << 40) | (row << 20) | col; }

void check_a2a(const TileGrid& g, const std::vector<int>& waves, int W, uint64_t seed, int skew_to) {
  const Mapping map = make_mapping(g, waves, 1);
  const int64_t M = int64_t(g.tiles_m) * g.bm, N = int64_t(g.tiles_n) * g.bn;
  std::vector<std::vector<int32_t>> dest(W, std::vector<int32_t>(size_t(M)));
  uint64_t x = seed;
  for (int q = 0; q < W; ++q)
    for (auto& d : dest[q]) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      d = skew_to >= 0 && (x >> 60) < 12 ? skew_to : int32_t((x >> 33) % uint64_t(W));
    }
  std::vector<A2aPlan> plans;
  for (int r = 0; r < W; ++r) plans.push_back(make_a2a_plan(map, W, r, dest));
  // Senders: the epilogue's addresses (every element of every tile).
  std::vector<std::vector<Cell>> send(W, std::vector<Cell>(size_t(M * N), -1));
  for (int q = 0; q < W; ++q) {
    const A2aPlan& p = plans[q];
    for (int tile = 0; tile < g.num_tiles(); ++tile) {
      const int mb = tile / g.tiles_n, nb = tile % g.tiles_n;
      for (int r = 0; r < g.bm; ++r) {
        const int64_t row = int64_t(mb) * g.bm + r;
        const int code = p.row_code[size_t(row)];
        ASSERT_EQ(code & 15, dest[q][size_t(row)]);
        for (int c = 0; c < g.bn; ++c) {
          const int64_t off = p.tile_dest_base[size_t(tile) * W + (code & 15)] + int64_t(code >> 4) * g.bn + c;
          ASSERT_GE(off, 0);
          ASSERT_LT(off, M * N);
          ASSERT_EQ(send[q][size_t(off)], -1) << "two elements at one address";
          // The element lies inside its group's range (the group's counter covers it).
          const int grp = map.tile_group[tile];
          ASSERT_GE(off, map.group_offset(grp));
          ASSERT_LT(off, map.group_offset(grp) + map.group_elems(grp));
          send[q][size_t(off)] = cell(q, row, int64_t(nb) * g.bn + c);
        }
      }
    }
  }
  // NCCL per group (and the copy-engine pushes): segment (g, r) of sender q lands at receiver r's (g, q) offset;
  // counts must agree.
  for (int r = 0; r < W; ++r) {
    const A2aPlan& p = plans[r];
    std::vector<Cell> recv(size_t(p.recv_rows * N), -1);
    for (int grp = 0; grp < map.groups(); ++grp)
      for (int q = 0; q < W; ++q) {
        const size_t si = size_t(grp) * W + r, ri = size_t(grp) * W + q;
        ASSERT_EQ(plans[q].send_cnt[si], p.recv_cnt[ri]) << "group " << grp << " " << q << "->" << r;
        // Inside the receiver's rows: the copy-engine transport (A2aOptions::transport) copies segment (g, r)
        // of q straight to this offset of r's receive buffer, taken from r's plan on rank q.
        ASSERT_GE(p.recv_off[ri], 0);
        ASSERT_LE(p.recv_off[ri] + p.recv_cnt[ri], p.recv_rows * N);
        for (int64_t e = 0; e < p.recv_cnt[ri]; ++e)
          recv[size_t(p.recv_off[ri] + e)] = send[q][size_t(plans[q].send_off[si] + e)];
      }
    // The gather.
    std::vector<Cell> out(size_t(p.recv_rows * N), -1);
    ASSERT_EQ(int64_t(p.piece_dst.size()), p.recv_rows * g.tiles_n);
    for (size_t k = 0; k < p.piece_dst.size(); ++k) {
      const int64_t row = p.piece_dst[k] / g.tiles_n, nb = p.piece_dst[k] % g.tiles_n;
      for (int c = 0; c < g.bn; ++c) out[size_t(row * N + nb * g.bn + c)] = recv[k * g.bn + c];
    }
    const auto src = a2a_sources(dest, r);
    ASSERT_EQ(int64_t(src.size()), p.recv_rows);
    for (int64_t j = 0; j < p.recv_rows; ++j)
      for (int64_t c = 0; c < N; ++c)
        ASSERT_EQ(out[size_t(j * N + c)], cell(src[j].first, src[j].second, c)) << "rank " << r << " row " << j;
    // Rows stored straight into the destination's final layout (Transport::kPeerStores): every sender's row
    // lands where the gather puts it, each address once.
    {
      std::vector<Cell> direct(size_t(p.recv_rows * N), -1);
      for (int q = 0; q < W; ++q)
        for (int tile = 0; tile < g.num_tiles(); ++tile) {
          const int mb = tile / g.tiles_n, nb = tile % g.tiles_n;
          for (int rr = 0; rr < g.bm; ++rr) {
            const int64_t row = int64_t(mb) * g.bm + rr;
            const int code = plans[q].row_code[size_t(row)];
            if ((code & 15) != r) continue;
            for (int c = 0; c < g.bn; ++c) {
              const int64_t off = plans[q].direct_base[size_t(tile) * W + r] + int64_t(code >> 4) * N + c;
              ASSERT_GE(off, 0);
              ASSERT_LT(off, p.recv_rows * N);
              ASSERT_EQ(direct[size_t(off)], -1) << "two elements at one address";
              direct[size_t(off)] = cell(q, row, int64_t(nb) * g.bn + c);
            }
          }
        }
      ASSERT_EQ(direct, out) << "rank " << r;
    }
    // The baseline: pack by destination, per-peer segments, same output.
    int64_t off = 0;
    for (int q = 0; q < W; ++q) {
      int64_t before = 0;
      for (int d = 0; d < r; ++d) before += plans[q].send_rows[d];
      ASSERT_EQ(plans[q].send_rows[r], p.recv_rows_from[q]);
      for (int64_t j = 0; j < p.recv_rows_from[q]; ++j) {
        const int64_t row = plans[q].pack_rows[size_t(before + j)];
        EXPECT_EQ(dest[q][size_t(row)], r);
        EXPECT_EQ(src[size_t(off + j)], std::make_pair(q, row));
      }
      off += p.recv_rows_from[q];
    }
  }
}
}  // namespace

// Mapping::normal (the sequential fallback: cuBLAS's row-major D): the index functions are the identity
// layout, part p owning a contiguous block of rows, and agree with each other.
TEST(OverlapTables, NormalMappingIsRowMajorWithContiguousParts) {
  const TileGrid g = grid(6, 4, 5, 2, 1, false, 0, 32, 16);
  const int64_t M = 6 * 32, N = 4 * 16;
  for (const int parts : {1, 2, 4}) {
    Mapping m = make_mapping(g, {g.num_waves()}, parts);
    m.normal = true;
    std::vector<int> seen(size_t(M * N), 0);
    for (int64_t r = 0; r < M; ++r)
      for (int64_t c = 0; c < N; ++c) {
        int part = -1;
        const int64_t i = reordered_index(m, r, c, &part);
        EXPECT_EQ(i, r * N + c);
        EXPECT_EQ(part, int(r / (M / parts)));
        ++seen[size_t(i)];
        // The part's local buffer: row r is its local row r - part * M / parts.
        const int64_t j = scattered_index(m, r, c) / N;
        EXPECT_EQ(scattered_index(m, r, c) % N, c);
        EXPECT_EQ(rs_original_row(m, part, j), r);
      }
    for (int v : seen) EXPECT_EQ(v, 1);
    EXPECT_EQ(m.group_elems(0), M * N);  // the fallback's one collective covers D
  }
}

TEST(OverlapTables, AllToAllPlanDeliversEveryRowOnce) {
  check_a2a(grid(8, 3, 6, 2, 1, false, 0, 64, 16), {1, 2, 1}, 2, 1, -1);
  check_a2a(grid(8, 3, 6, 2, 1, false, 0, 64, 16), {}, 3, 2, -1);
  check_a2a(grid(6, 4, 5, 2, 1, false, 0, 32, 8), {2, 3}, 4, 3, 1);  // skewed: most rows to rank 1
  check_a2a(grid(4, 2, 3, 2, 1, false, 0, 16, 8), {}, 8, 4, -1);     // some (tile, dest) segments empty
}

TEST(OverlapTables, AllToAllPlanRejectsBadRouting) {
  const Mapping map = make_mapping(grid(4, 2, 3, 2, 1, false, 0, 16, 8), {}, 1);
  std::vector<std::vector<int32_t>> dest(2, std::vector<int32_t>(64, 0));
  dest[1][5] = 2;  // no rank 2
  EXPECT_THROW(make_a2a_plan(map, 2, 0, dest), braid::UsageError);
  dest[1].resize(63);
  EXPECT_THROW(make_a2a_plan(map, 2, 0, dest), braid::UsageError);
}

// The reduced-output check: the bound follows the partials' magnitudes, not the result.
TEST(OverlapVerify, SumBoundFollowsThePartials) {
  auto bf16 = [](float f) {  // round to nearest even, as the GPU converts
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
  };
  SumRef ref;
  ref.sum = {0.265625f, 10.f, 0.f};
  ref.mag = {45.390625f, 10.f, 0.f};
  const auto id = [](int64_t i) { return i; };
  // The 4-rank case seen on 4x H200: ring 0.09375, NCCL 0.375 — both within (4 + 2)/256 * 45.4.
  for (float got : {0.09375f, 0.375f}) {
    const std::vector<uint16_t> t = {bf16(got), bf16(10.f), bf16(0.f)};
    EXPECT_EQ(count_mismatch(ref, id, 3, t, id, 4, sum_atol(512)), 0u) << got;
  }
  // Beyond the bound, and NaN, are wrong; the detail names the first.
  std::string detail;
  int64_t first = -1;
  const std::vector<uint16_t> bad = {bf16(2.f), 0x7fc0, bf16(0.f)};
  EXPECT_EQ(count_mismatch(ref, id, 3, bad, id, 4, sum_atol(512), &first, nullptr, &detail), 2u);
  EXPECT_EQ(first, 0);
  EXPECT_NE(detail.find("magnitude 45.39"), std::string::npos) << detail;
  // A test index outside the buffer is wrong, not a crash.
  EXPECT_EQ(count_mismatch(ref, id, 3, std::vector<uint16_t>(2, bf16(0.f)), id, 4, 1.0), 2u);  // 10 != 0, index 2
  EXPECT_NEAR(sum_tolerance(45.390625, 4, 0.0), 6 * 45.390625 / 256, 1e-12);
}

// wave_fit_reserve: the largest reserve in [floor, cap] that adds no wave to the persistent grid's (here: 2x1
// clusters, ceil(tiles / CTAs) waves of an even CTA count), else cap.
TEST(OverlapTables, WaveFitReserveKeepsTheFullGridsWaves) {
  auto waves_for = [](int tiles) {
    return [tiles](int sms) {
      const int ctas = sms / 2 * 2;
      return (tiles + ctas - 1) / ctas;
    };
  };
  EXPECT_EQ(wave_fit_reserve(132, 16, 2, waves_for(512)), 4);    // 4096x4096 at 128x256: 128 CTAs, 4 waves
  EXPECT_EQ(wave_fit_reserve(132, 16, 2, waves_for(256)), 4);    // 2 waves need 128 CTAs (5 free: 126 CTAs)
  EXPECT_EQ(wave_fit_reserve(132, 16, 2, waves_for(200)), 16);   // 116 CTAs still 2 waves: the reserve stays
  EXPECT_EQ(wave_fit_reserve(132, 16, 2, waves_for(528)), 16);   // every reserve adds a wave: the reserve stays
  EXPECT_EQ(wave_fit_reserve(132, 16, 2, waves_for(1024)), 4);   // 8 waves of 128
  EXPECT_EQ(wave_fit_reserve(132, 0, 2, waves_for(512)), 0);     // floor above cap: cap
  EXPECT_EQ(wave_fit_reserve(132, 16, 6, waves_for(512)), 16);   // floor above every fitting reserve: cap
  // Monotone model: the fit never adds a wave and never exceeds the cap.
  for (int tiles = 1; tiles < 3000; tiles += 7)
    for (int cap : {2, 8, 16, 32}) {
      const int r = wave_fit_reserve(132, cap, 2, waves_for(tiles));
      EXPECT_LE(r, cap);
      if (r != cap) {
        EXPECT_EQ(waves_for(tiles)(132 - r), waves_for(tiles)(132));
      }
    }
}
