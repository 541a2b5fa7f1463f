// CPU tests of the T3 address map: ring order and stagger for any TP size, launches covering every
// tile once, expected update counts per counter, and a symbolic run of all ranks (tiles in launch
// order, in-kernel waits, copy-engine triggers) that checks every owner ends with each rank's partial
// exactly once and that no schedule deadlocks.
#include <gtest/gtest.h>

#include <array>
#include <map>
#include <set>
#include <tuple>
#include <vector>

#include "braid/errors.hpp"
#include "braid/t3.hpp"

using namespace braid::t3;

TEST(T3Map, RingOrderStaggeredForAnyWorld) {
  for (int W = 1; W <= 8; ++W) {
    for (int s = 0; s < W; ++s) {
      std::set<int> at_stage;
      for (int r = 0; r < W; ++r) at_stage.insert(ring_order(W, r)[s]);
      EXPECT_EQ(int(at_stage.size()), W) << "stage " << s << " of world " << W << " is not a permutation";
    }
    for (int r = 0; r < W; ++r) {
      auto o = ring_order(W, r);
      EXPECT_EQ(o.back(), r);
      EXPECT_EQ(std::set<int>(o.begin(), o.end()).size(), size_t(W));
      // The rank computing chunk c at stage s+1 is the ring successor of the one at stage s.
      for (int s = 0; s + 1 < W; ++s) {
        const int c = o[s];
        const int nxt = ring_next(W, r);
        EXPECT_EQ(ring_order(W, nxt)[s + 1], c);
      }
      auto l = order_launches(o, 256);
      EXPECT_LE(l.size(), 2u);
      int64_t rows = 0;
      for (auto& x : l) rows += x.rows;
      EXPECT_EQ(rows, int64_t(W) * 256);
    }
  }
}

TEST(T3Map, RejectsBadShapes) {
  EXPECT_THROW(make_address_map(Variant::kRing, 2, 0, 1000, 512, 128, 256, 1), braid::UsageError);
  EXPECT_THROW(make_address_map(Variant::kRing, 2, 0, 1024, 500, 128, 256, 1), braid::UsageError);
  EXPECT_THROW(make_address_map(Variant::kRing, 2, 0, 1024, 512, 128, 256, 4), braid::UsageError);
  EXPECT_NO_THROW(make_address_map(Variant::kRing, 2, 0, 1024, 512, 128, 256, 2));
}

namespace {

using Contrib = std::array<int, 8>;  // partials of each rank summed into a value
struct Key {
  int rank, buf, slot;
  int64_t off;
  bool operator<(const Key& o) const {
    return std::tie(rank, buf, slot, off) < std::tie(o.rank, o.buf, o.slot, o.off);
  }
};

// Symbolic run of every rank's map. Returns false on a deadlock.
bool simulate(Variant v, int W, int64_t m, int64_t n, int regions, std::string* why, int swizzle = 1,
              int segment_mblocks = -1, bool column_order = false) {
  const int bm = 128, bn = 256;
  std::vector<AddressMap> maps;
  for (int r = 0; r < W; ++r)
    maps.push_back(make_address_map(v, W, r, m, n, bm, bn, regions, segment_mblocks, column_order));
  const AddressMap& a0 = maps[0];
  std::map<Key, Contrib> mem;
  std::vector<std::vector<uint32_t>> cnt(W, std::vector<uint32_t>(a0.num_counters, 0));
  std::vector<std::vector<uint32_t>> received(W, std::vector<uint32_t>(a0.num_counters, 0));
  // Each rank's tiles in execution order: launch order, then CUTLASS's persistent schedule within a launch
  // (swizzle 1: row-major tiles).
  std::vector<std::vector<int>> seq(W);
  for (int r = 0; r < W; ++r) {
    std::vector<int> seen(maps[r].tiles.size(), 0);
    const int s = pick_swizzle(maps[r].strip_mblocks(), swizzle);
    seq[r] = tile_execution_order(maps[r], s);
    for (int t : seq[r]) seen[t]++;
    for (int c : seen)
      if (c != 1) {
        *why = "a tile is not launched exactly once";
        return false;
      }
    // Ring stages never decrease along the execution order (no wait behind a later stage). (Direct modes wait
    // only for owners' stored regions; direct-tma interleaves its own chunk's segments with the others'.)
    for (size_t i = 1; i < seq[r].size() && is_ring(v); ++i)
      if (maps[r].tiles[seq[r][i]].stage < maps[r].tiles[seq[r][i - 1]].stage) {
        *why = "stage order not monotone";
        return false;
      }
  }
  std::vector<size_t> pc(W, 0), dma_pc(W, 0);
  const int64_t tile_rows = bm;
  auto tile_keys = [&](int rank, Buf b, int slot, int64_t off, std::vector<Key>& out) {
    out.clear();
    for (int64_t r = 0; r < tile_rows; r += 64) out.push_back({rank, int(b), slot, off + r * n});  // 2 samples per tile
  };
  bool progress = true;
  std::vector<Key> keys, src;
  while (progress) {
    progress = false;
    for (int r = 0; r < W; ++r) {
      const AddressMap& a = maps[r];
      // GEMM tiles.
      while (pc[r] < seq[r].size()) {
        const TileRoute& t = a.tiles[seq[r][pc[r]]];
        const int wr = t.wait_rank >= 0 ? t.wait_rank : r;  // direct-tma waits on the owner's counter
        if (t.wait_counter >= 0 && cnt[wr][t.wait_counter] < maps[wr].expected[t.wait_counter]) break;
        tile_keys(t.dest_rank, t.dest_buf, t.dest_slot, t.dest_offset, keys);
        for (const Key& k : keys) {
          Contrib c{};
          if (t.op == TileOp::kAddStoreLocal || t.op == TileOp::kAddStoreFinal) {
            Key lk{r, int(Buf::kLanding), t.stage, k.off};
            c = mem[lk];
          }
          if (t.op == TileOp::kAtomicAdd) c = mem[k];
          c[r] += 1;
          mem[k] = c;
        }
        if (t.signal_rank >= 0) {
          cnt[t.signal_rank][t.signal_counter] += 1;
          received[t.signal_rank][t.signal_counter] += 1;
        }
        ++pc[r];
        progress = true;
      }
      // Copy-engine triggers, in issue order (one stream).
      while (dma_pc[r] < a.dma.size()) {
        const DmaTrigger& d = a.dma[dma_pc[r]];
        if (cnt[r][d.wait_counter] < d.wait_value) break;
        // Every sampled element of the source region (whatever its column).
        auto lo = mem.lower_bound(Key{r, int(Buf::kLanding), d.src_slot, d.offset});
        auto hi = mem.lower_bound(Key{r, int(Buf::kLanding), d.src_slot, d.offset + d.elems});
        std::vector<std::pair<int64_t, Contrib>> copy;
        for (auto it = lo; it != hi; ++it) copy.push_back({it->first.off, it->second});
        for (auto& [e, c] : copy) mem[Key{d.dst_rank, int(Buf::kLanding), d.dst_slot, e}] = c;
        cnt[d.dst_rank][d.signal_counter] = d.signal_value;
        received[d.dst_rank][d.signal_counter] += d.signal_value;
        ++dma_pc[r];
        progress = true;
      }
    }
  }
  for (int r = 0; r < W; ++r)
    if (pc[r] != seq[r].size() || dma_pc[r] != maps[r].dma.size()) {
      *why = "deadlock at rank " + std::to_string(r);
      return false;
    }
  for (int r = 0; r < W; ++r)
    for (int i = 0; i < a0.num_counters; ++i)
      if (received[r][i] != maps[r].expected[i]) {
        *why = "counter " + std::to_string(i) + " of rank " + std::to_string(r) + " got " +
               std::to_string(received[r][i]) + " updates, expected " + std::to_string(maps[r].expected[i]);
        return false;
      }
  // Every owner's output: each rank's partial exactly once, at every sampled row of every tile.
  for (int r = 0; r < W; ++r)
    for (int64_t off = 0; off < maps[r].chunk_elems; off += 64 * n)
      for (int64_t col = 0; col < n; col += bn) {
        auto it = mem.find(Key{r, int(Buf::kOut), 0, off + col});
        if (it == mem.end()) {
          *why = "rank " + std::to_string(r) + " output never written";
          return false;
        }
        for (int p = 0; p < W; ++p)
          if (it->second[p] != 1) {
            *why = "rank " + std::to_string(r) + " output has rank " + std::to_string(p) + "'s partial " +
                   std::to_string(it->second[p]) + " times";
            return false;
          }
      }
  return true;
}

}  // namespace

TEST(T3Map, RingDeliversEveryPartialOnceAnyWorld) {
  for (int W = 1; W <= 8; ++W)
    for (int regions : {1, 2}) {
      std::string why;
      EXPECT_TRUE(simulate(Variant::kRing, W, int64_t(W) * 2 * 128 * regions * 2, 512, regions, &why))
          << "world " << W << " regions " << regions << ": " << why;
    }
}

TEST(T3Map, RingDmaDeliversEveryPartialOnceAnyWorld) {
  for (int W = 1; W <= 8; ++W)
    for (int regions : {1, 2}) {
      std::string why;
      EXPECT_TRUE(simulate(Variant::kRingDma, W, int64_t(W) * 2 * 128 * regions * 2, 512, regions, &why))
          << "world " << W << " regions " << regions << ": " << why;
      // ring-cublas runs the same address map (regions forwarded by copy engines from slot s to s+1).
      EXPECT_TRUE(simulate(Variant::kRingCublas, W, int64_t(W) * 2 * 128 * regions * 2, 512, regions, &why))
          << "ring-cublas world " << W << " regions " << regions << ": " << why;
    }
  // Stage 0 stays local and is forwarded by a copy engine: W-1 hops per region, all on copy engines.
  const auto a = make_address_map(Variant::kRingDma, 2, 0, 2048, 512, 128, 256, 2);
  EXPECT_EQ(a.dma.size(), 2u);
  EXPECT_EQ(a.dma[0].src_slot, 0);
  EXPECT_EQ(a.dma[0].dst_slot, 1);
  EXPECT_EQ(a.tiles[size_t(a.chunk_mblocks) * a.tiles_n].op, TileOp::kStoreLocal);  // chunk 1 = stage 0 of rank 0
}

TEST(T3Map, DirectDeliversEveryPartialOnce) {
  for (int W = 1; W <= 8; ++W) {
    std::string why;
    EXPECT_TRUE(simulate(Variant::kDirect, W, int64_t(W) * 512, 768, 2, &why)) << "world " << W << ": " << why;
    EXPECT_TRUE(simulate(Variant::kDirectTma, W, int64_t(W) * 512, 768, 2, &why)) << "world " << W << ": " << why;
  }
}

// direct-tma's interleave: a permutation of the m-blocks that keeps 2x1 clusters whole, runs the own segment g + 1
// before the others' segment g (each other owner's segments in ring order), and is the old "own chunk, then the
// others' in ring order" with one segment per chunk.
TEST(T3Map, InterleaveRunsOwnSegmentsOneAhead) {
  for (int W = 1; W <= 8; ++W)
    for (int rank = 0; rank < W; ++rank)
      for (int segs : {1, 2, 3, 4}) {
        const int seg = 4, chunk = segs * seg;
        const Interleave il{W, rank, chunk, seg};
        std::vector<int> seen(size_t(W) * chunk, 0);
        std::vector<std::pair<int, int>> order;  // (chunk, segment) per segment of the execution order
        for (int v = 0; v < W * chunk; ++v) {
          const int p = il.physical_mblock(v);
          ASSERT_GE(p, 0);
          ASSERT_LT(p, W * chunk);
          seen[p]++;
          if (v % 2 == 1) {
            EXPECT_EQ(p, il.physical_mblock(v - 1) + 1);  // clusters stay whole
          }
          if (v % seg == 0) {
            order.push_back({p / chunk, (p % chunk) / seg});
          } else {
            EXPECT_EQ(p, il.physical_mblock(v - 1) + 1);  // a segment is contiguous
          }
        }
        for (int c : seen) EXPECT_EQ(c, 1);
        // Own segments g and g + 1 run before every other owner's segment g.
        std::vector<int> pos_own(segs, -1);
        for (size_t i = 0; i < order.size(); ++i)
          if (order[i].first == rank) pos_own[order[i].second] = int(i);
        for (size_t i = 0; i < order.size(); ++i) {
          const auto [c, g] = order[i];
          if (c == rank) continue;
          EXPECT_LT(pos_own[g], int(i)) << "W " << W << " rank " << rank << " segs " << segs;
          if (g + 1 < segs) {
            EXPECT_LT(pos_own[g + 1], int(i)) << "own segment g + 1 first";
          }
        }
        // Other owners in ring order within a segment.
        for (size_t i = 1; i < order.size(); ++i)
          if (order[i].first != rank && order[i - 1].first != rank && order[i].second == order[i - 1].second) {
            EXPECT_EQ(order[i].first, (order[i - 1].first + 1) % W);
          }
        if (segs == 1 && W > 1) {  // the old order: own chunk, then rank + 1, rank + 2, ...
          for (int i = 0; i < W; ++i) EXPECT_EQ(order[i].first, (rank + i) % W);
        }
      }
  EXPECT_EQ((Interleave{1, 0, 8, 4}).physical_mblock(5), 5);  // one rank: identity
  EXPECT_EQ((Interleave{2, 1, 8, 0}).physical_mblock(5), 5);  // no segment: identity
}

// A requested segment: whole regions, at least that many m-blocks, dividing the chunk; else the chunk. The default
// (kDefaultSegmentMblocks) is the whole chunk.
TEST(T3Map, PickSegmentAndTheMapsInterleave) {
  EXPECT_EQ(kDefaultSegmentMblocks, 0);
  EXPECT_EQ(pick_segment(64, 4, 4), 4);
  EXPECT_EQ(pick_segment(64, 2, 4), 4);
  EXPECT_EQ(pick_segment(64, 4, 8), 8);
  EXPECT_EQ(pick_segment(64, 32, 8), 32);
  EXPECT_EQ(pick_segment(64, 4, 16), 16);
  EXPECT_EQ(pick_segment(64, 4, 5), 8);      // rounded up to whole regions
  EXPECT_EQ(pick_segment(8, 4, 4), 4);
  EXPECT_EQ(pick_segment(4, 4, 4), 4);       // the whole chunk
  EXPECT_EQ(pick_segment(8, 8, 4), 8);       // the whole chunk
  EXPECT_EQ(pick_segment(8, 2, 16), 8);      // the whole chunk
  EXPECT_EQ(pick_segment(48, 6, 16), 24);    // 18 does not divide 48
  const auto a = make_address_map(Variant::kDirectTma, 2, 1, 2 * 8192, 1024, 128, 256, 4, 8);
  EXPECT_EQ(a.chunk_mblocks, 64);
  EXPECT_EQ(a.interleave.seg_mblocks, 16);  // regions of 16 m-blocks
  EXPECT_EQ(a.strip_mblocks(), 16);
  ASSERT_EQ(a.launches.size(), 1u);
  EXPECT_EQ(a.launches[0].rows, 2 * 8192);
  EXPECT_EQ(make_address_map(Variant::kDirectTma, 2, 1, 2 * 8192, 1024, 128, 256, 8, 0).interleave.seg_mblocks, 64);
  EXPECT_EQ(make_address_map(Variant::kDirectTma, 2, 1, 2 * 8192, 1024, 128, 256, 8).interleave.seg_mblocks, 64);
  EXPECT_EQ(make_address_map(Variant::kDirectTma, 2, 1, 2 * 8192, 1024, 128, 256, 8, 8).interleave.seg_mblocks, 8);
  EXPECT_EQ(make_address_map(Variant::kDirectTma, 2, 1, 2 * 8192, 1024, 128, 256, 8, 5).interleave.seg_mblocks, 8);
  EXPECT_EQ(make_address_map(Variant::kDirectTma, 2, 1, 2 * 8192, 1024, 128, 256, 4, 5).interleave.seg_mblocks, 16);
  EXPECT_EQ(make_address_map(Variant::kDirectTma, 2, 1, 2 * 8192, 1024, 128, 256, 4, 99).interleave.seg_mblocks, 64);
  EXPECT_EQ(make_address_map(Variant::kDirectTma, 1, 0, 8192, 1024, 128, 256, 8).interleave.seg_mblocks, 0);
  EXPECT_EQ(make_address_map(Variant::kDirect, 2, 1, 2 * 8192, 1024, 128, 256, 8).interleave.seg_mblocks, 0);
  // The execution order starts with the own chunk's first segment, then its second, then the other's first.
  const auto seq = tile_execution_order(a, pick_swizzle(a.strip_mblocks(), 8));
  const int per_seg = 16 * a.tiles_n;
  EXPECT_EQ(a.tiles[seq[0]].chunk, 1);
  EXPECT_EQ(a.tiles[seq[per_seg]].chunk, 1);
  EXPECT_EQ(a.tiles[seq[2 * per_seg]].chunk, 0);
  EXPECT_EQ(a.tiles[seq[2 * per_seg]].region, 0);
}

// Interleaved direct-tma at any world, segment and swizzle: every partial once, no deadlock.
TEST(T3Map, InterleavedDirectTmaDeliversEveryPartialOnce) {
  for (int W = 2; W <= 8; ++W)
    for (int seg : {2, 4, 8})
      for (int swz : {1, 2, 4}) {
        std::string why;
        EXPECT_TRUE(simulate(Variant::kDirectTma, W, int64_t(W) * 16 * 128, 512, 8, &why, swz, seg))
            << "world " << W << " segment " << seg << " swizzle " << swz << ": " << why;
      }
}

// direct-tma: own chunk first, stored and announced (stored[q]); the other chunks' tiles go where direct's go, added
// only after the owner's stored[q] holds all its tiles of the region; out[q] counts the other ranks' tiles.
TEST(T3Map, DirectTmaStoresItsOwnChunkFirst) {
  EXPECT_FALSE(is_ring(Variant::kDirectTma));
  EXPECT_STREQ(variant_name(Variant::kDirectTma), "t3-direct-tma");
  for (int W : {1, 2, 4, 8})
    for (int rank = 0; rank < W; ++rank) {
      const int regions = 2;
      const auto d = make_address_map(Variant::kDirect, W, rank, int64_t(W) * 1024, 1024, 128, 256, regions);
      // segment 0: the whole chunk, own chunk first (the interleave is InterleavedDirectTmaDeliversEveryPartialOnce's)
      const auto t = make_address_map(Variant::kDirectTma, W, rank, int64_t(W) * 1024, 1024, 128, 256, regions, 0);
      ASSERT_EQ(d.tiles.size(), t.tiles.size());
      EXPECT_EQ(t.order.front(), rank);
      EXPECT_EQ(t.interleave.seg_mblocks, W > 1 ? t.chunk_mblocks : 0);  // one segment per chunk
      EXPECT_EQ(t.launches.size(), 1u);
      EXPECT_EQ(t.num_counters, 2 * regions);
      EXPECT_EQ(t.final_counters, d.final_counters);
      EXPECT_TRUE(t.dma.empty());
      const uint32_t rt = uint32_t(t.region_mblocks) * uint32_t(t.tiles_n);
      for (int q = 0; q < regions; ++q) {
        EXPECT_EQ(t.expected[q], uint32_t(W - 1) * rt);
        EXPECT_EQ(t.expected[t.stored_counter(q)], W > 1 ? rt : 0u);
      }
      for (size_t i = 0; i < d.tiles.size(); ++i) {
        const TileRoute &x = d.tiles[i], &y = t.tiles[i];
        EXPECT_EQ(y.dest_rank, x.dest_rank);
        EXPECT_EQ(y.dest_offset, x.dest_offset);
        if (y.chunk == rank) {
          EXPECT_EQ(int(y.op), int(TileOp::kStoreFinal));
          EXPECT_EQ(y.stage, 0);
          EXPECT_EQ(y.wait_counter, -1);
          EXPECT_EQ(y.signal_counter, W > 1 ? t.stored_counter(y.region) : -1);
        } else {
          EXPECT_EQ(int(y.op), int(TileOp::kAtomicAdd));
          EXPECT_EQ(y.wait_rank, y.chunk);
          EXPECT_EQ(y.wait_counter, t.stored_counter(y.region));
          EXPECT_EQ(y.signal_rank, x.signal_rank);
          EXPECT_EQ(y.signal_counter, x.signal_counter);
        }
      }
    }
}

// Region defaults (pick_regions): ring-cublas two regions from 512 rows per chunk, up to four of >= 1024 rows from
// 2048; the other variants one per ~8 MiB of chunk; always whole 2x1 clusters that divide the chunk; an explicit
// request is kept where the chunk allows it.
TEST(T3Map, PickRegionsDefaultsAndLimits) {
  constexpr int bm = 128;
  // ring-cublas, by rows per chunk
  EXPECT_EQ(pick_regions(Variant::kRingCublas, 256, 8192, bm, 0), 1);    // 2 m-blocks: one cluster pair
  EXPECT_EQ(pick_regions(Variant::kRingCublas, 512, 4096, bm, 0), 2);
  EXPECT_EQ(pick_regions(Variant::kRingCublas, 1024, 8192, bm, 0), 2);   // was 1 (>= 1024 rows per region)
  EXPECT_EQ(pick_regions(Variant::kRingCublas, 1536, 8192, bm, 0), 2);   // 12 m-blocks: 12 % 4 == 0
  EXPECT_EQ(pick_regions(Variant::kRingCublas, 2048, 8192, bm, 0), 2);
  EXPECT_EQ(pick_regions(Variant::kRingCublas, 3072, 8192, bm, 0), 3);   // 24 m-blocks: 24 % 6 == 0
  EXPECT_EQ(pick_regions(Variant::kRingCublas, 4096, 16384, bm, 0), 4);
  EXPECT_EQ(pick_regions(Variant::kRingCublas, 8192, 16384, bm, 0), 4);  // at most four
  // ring-dma and the others: one per 8 MiB of bf16 chunk
  EXPECT_EQ(pick_regions(Variant::kRingDma, 1024, 4096, bm, 0), 1);      // 8 MiB
  EXPECT_EQ(pick_regions(Variant::kRingDma, 1024, 8192, bm, 0), 2);      // 16 MiB
  EXPECT_EQ(pick_regions(Variant::kRingDma, 2048, 8192, bm, 0), 4);      // 32 MiB
  EXPECT_EQ(pick_regions(Variant::kRingDma, 4096, 16384, bm, 0), 16);    // 128 MiB: 32 m-blocks allow 16
  EXPECT_EQ(pick_regions(Variant::kDirect, 512, 4096, bm, 0), 1);
  EXPECT_EQ(pick_regions(Variant::kRing, 256, 65536, bm, 0), 1);         // 32 MiB but one cluster pair
  // explicit requests: kept, or lowered to whole clusters dividing the chunk
  EXPECT_EQ(pick_regions(Variant::kRingCublas, 4096, 8192, bm, 1), 1);
  EXPECT_EQ(pick_regions(Variant::kRingDma, 1024, 8192, bm, 4), 4);
  EXPECT_EQ(pick_regions(Variant::kRingDma, 1024, 8192, bm, 8), 4);      // 8 m-blocks: at most 4
  EXPECT_EQ(pick_regions(Variant::kRingDma, 1536, 8192, bm, 4), 3);      // 12 m-blocks: 12 % 8 != 0
  EXPECT_THROW(pick_regions(Variant::kRingDma, 1000, 8192, bm, 0), braid::UsageError);
}

TEST(T3Map, PickSwizzleKeepsStripsInsideChunks) {
  EXPECT_EQ(pick_swizzle(4, 8), 2);    // strips of 4 m-blocks
  EXPECT_EQ(pick_swizzle(8, 8), 4);
  EXPECT_EQ(pick_swizzle(16, 8), 8);
  EXPECT_EQ(pick_swizzle(64, 8), 8);
  EXPECT_EQ(pick_swizzle(24, 8), 4);   // 24 % 16 != 0
  EXPECT_EQ(pick_swizzle(2, 8), 1);
  EXPECT_EQ(pick_swizzle(64, 1), 1);   // the cap
  EXPECT_EQ(pick_swizzle(64, 4), 4);
  EXPECT_EQ(pick_swizzle(64, 3), 2);
}

// Swizzled schedules (strips of up to 16 m-blocks across several regions) still deliver every partial
// once and never deadlock, at any world size.
TEST(T3Map, SwizzledSchedulesDeliverEveryPartialOnceAnyWorld) {
  for (int W = 1; W <= 8; ++W)
    for (int regions : {1, 2, 4})
      for (int swz : {2, 4, 8})
        for (Variant v : {Variant::kRing, Variant::kRingDma, Variant::kDirect, Variant::kDirectTma}) {
          std::string why;
          EXPECT_TRUE(simulate(v, W, int64_t(W) * 16 * 128, 512, regions, &why, swz))
              << variant_name(v) << " world " << W << " regions " << regions << " swizzle " << swz << ": " << why;
        }
}

// Why pick_swizzle stops at the chunk: a strip spanning two chunks would interleave two stages in one
// launch (rank 1 of 2 runs chunks 0 and 1 in one launch), so a stage-1 tile could run before stage 0's.
TEST(T3Map, StripAcrossChunksWouldBreakStageOrder) {
  const auto a = make_address_map(Variant::kRingDma, 2, 1, 1024, 512, 128, 256, 1);  // chunks of 4 m-blocks
  ASSERT_EQ(a.launches.size(), 1u);
  auto monotone = [&](int swz) {
    const auto seq = tile_execution_order(a, swz);
    for (size_t i = 1; i < seq.size(); ++i)
      if (a.tiles[seq[i]].stage < a.tiles[seq[i - 1]].stage) return false;
    return true;
  };
  EXPECT_TRUE(monotone(pick_swizzle(a.chunk_mblocks, 8)));
  EXPECT_FALSE(monotone(4));  // strips of 8 m-blocks = both chunks
}

TEST(T3Map, ExpectedCountsAndDmaTable) {
  const int W = 4, regions = 2;
  const auto a = make_address_map(Variant::kRing, W, 1, 4 * 1024, 1024, 128, 256, regions);
  const uint32_t rt = uint32_t(a.region_mblocks * a.tiles_n);
  EXPECT_EQ(a.chunk_mblocks, 8);
  EXPECT_EQ(rt, 4u * 4u);
  EXPECT_EQ(a.dma.size(), size_t((W - 2) * regions));
  for (const auto& d : a.dma) {
    EXPECT_EQ(d.dst_rank, 0);
    EXPECT_EQ(d.dst_slot, d.src_slot + 1);
    EXPECT_EQ(d.wait_value, rt);
    EXPECT_EQ(d.elems, a.region_elems);
  }
  EXPECT_EQ(a.launches.size(), 2u);  // chunks 2,3 then 0,1
  EXPECT_EQ(a.launches[0].row_begin, 2 * 1024);
  EXPECT_EQ(a.launches[1].row_begin, 0);
  // Stage 0 tiles are remote stores into rank 0's landing slot 1.
  const TileRoute& t = a.tiles[size_t(2 * 8) * a.tiles_n];
  EXPECT_EQ(t.op, TileOp::kStoreRemote);
  EXPECT_EQ(t.dest_rank, 0);
  EXPECT_EQ(t.dest_slot, 1);
  EXPECT_EQ(t.dest_offset, 0);
  const auto d = make_address_map(Variant::kDirect, W, 1, 4 * 1024, 1024, 128, 256, regions);
  EXPECT_EQ(d.expected[0], uint32_t(W - 1) * rt);  // the other ranks' tiles (the own ones signal nothing)
  EXPECT_TRUE(d.dma.empty());
}

// direct-tma's column order: every owner's segment k in scheduler strip k (own first in each tile column), stored[]
// per (segment, column). Counts, waits and every partial once at worlds 2-8, chunks of 2-32 m-blocks, any swizzle.
TEST(T3Map, ColumnOrderDirectTmaDeliversEveryPartialOnce) {
  EXPECT_EQ(column_segment(2, 4), 4);
  EXPECT_EQ(column_segment(2, 8), 8);
  EXPECT_EQ(column_segment(2, 32), 8);
  EXPECT_EQ(column_segment(4, 32), 4);
  EXPECT_EQ(column_segment(8, 32), 2);
  EXPECT_EQ(column_segment(3, 8), 4);
  EXPECT_EQ(column_segment(2, 12), 6);
  for (int W = 2; W <= 8; ++W)
    for (int chunk : {2, 4, 8, 16, 32})
      for (int regions : {1, 2})
        for (int swz : {1, 2, 4, 8}) {
          if (chunk % (2 * regions) != 0) continue;
          std::string why;
          EXPECT_TRUE(simulate(Variant::kDirectTma, W, int64_t(W) * chunk * 128, 768, regions, &why, swz, -1, true))
              << "world " << W << " chunk " << chunk << " regions " << regions << " swizzle " << swz << ": " << why;
        }
  // The order: strip k = own segment k, then the other owners' segment k.
  const Interleave il{3, 1, 8, 4, 1};
  const int expect[] = {8, 9, 10, 11, 16, 17, 18, 19, 0, 1, 2, 3, 12, 13, 14, 15, 20, 21, 22, 23, 4, 5, 6, 7};
  for (int v = 0; v < 24; ++v) EXPECT_EQ(il.physical_mblock(v), expect[v]) << v;
  // M = 1024 at two ranks: one segment of 4 m-blocks per chunk, one strip of 8 over M, stored[] per column.
  const auto a = make_address_map(Variant::kDirectTma, 2, 1, 1024, 8192, 128, 256, 1, 4, true);
  EXPECT_TRUE(a.stored_by_column);
  EXPECT_EQ(a.chunk_mblocks, 4);
  EXPECT_EQ(a.interleave.seg_mblocks, 4);  // the requested segment is ignored
  EXPECT_EQ(a.strip_mblocks(), 8);
  EXPECT_EQ(pick_swizzle(a.strip_mblocks(), 8), 4);  // 4 clusters of 2: one strip over M = 1024
  EXPECT_EQ(a.num_counters, 1 + 32);
  for (int nb = 0; nb < 32; ++nb) EXPECT_EQ(a.expected[a.stored_column_counter(0, nb)], 4u);
  EXPECT_EQ(a.expected[0], 4u * 32u);  // out[0]: the other rank's 4 x 32 tiles
  // In execution order, each tile column runs this rank's 4 tiles, then the other chunk's 4 (which wait for the
  // owner's tiles of that column): B's column block is read by one strip.
  const auto seq = tile_execution_order(a, pick_swizzle(a.strip_mblocks(), 8));
  ASSERT_EQ(seq.size(), 256u);
  for (int j = 0; j < 4; ++j) {
    std::set<int> cols;
    for (int i = 0; i < 8; ++i) cols.insert(int(a.tiles[seq[j * 8 + i]].dest_offset % 8192 / 256));
    EXPECT_EQ(cols.size(), 1u) << "group " << j << " spans several columns";
    for (int i = 0; i < 4; ++i) EXPECT_EQ(a.tiles[seq[j * 8 + i]].chunk, 1) << "group " << j;
    for (int i = 4; i < 8; ++i) {
      const TileRoute& t = a.tiles[seq[j * 8 + i]];
      EXPECT_EQ(t.chunk, 0);
      EXPECT_EQ(t.wait_rank, 0);
      EXPECT_EQ(t.wait_counter, a.stored_column_counter(0, *cols.begin()));
    }
  }
  // M = 8192 at two ranks: segments of 8, strips of 16 m-blocks (swizzle 8) holding 8 own and 8 other m-blocks.
  const auto b = make_address_map(Variant::kDirectTma, 2, 0, 8192, 1024, 128, 256, 4, -1, true);
  EXPECT_EQ(b.interleave.seg_mblocks, 8);
  EXPECT_EQ(b.strip_mblocks(), 16);
  EXPECT_EQ(pick_swizzle(b.strip_mblocks(), 8), 8);
  EXPECT_EQ(b.num_counters, 4 + 4 * 4);
  const auto bseq = tile_execution_order(b, 8);
  for (int i = 0; i < 16 * 4; ++i) {  // the first strip: own segment 0 and the other's segment 0, both walking N
    const TileRoute& t = b.tiles[bseq[i]];
    EXPECT_EQ(t.dest_offset / (int64_t(128) * 1024) / 8, 0) << i;  // segment 0 of its chunk
  }
  // One rank: no column order (nothing to wait for).
  EXPECT_FALSE(make_address_map(Variant::kDirectTma, 1, 0, 1024, 512, 128, 256, 1, -1, true).stored_by_column);
}
