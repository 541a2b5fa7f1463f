// map.cpp — the T3 address map (remote_map / dma_map) and the ring schedule, host only.
#include <algorithm>
#include <string>

#include "braid/errors.hpp"
#include "braid/overlap.hpp"
#include "braid/t3.hpp"

namespace braid::t3 {

const char* variant_name(Variant v) {
  switch (v) {
    case Variant::kRing: return "t3-ring";
    case Variant::kDirect: return "t3-direct";
    case Variant::kDirectTma: return "t3-direct-tma";
    case Variant::kRingDma: return "t3-ring-dma";
    case Variant::kRingCublas: return "t3-ring-cublas";
    case Variant::kAuto: return "t3-auto";
    case Variant::kSequential: return "sequential";
  }
  return "?";
}

const char* tile_op_name(TileOp op) {
  switch (op) {
    case TileOp::kStoreRemote: return "store-remote";
    case TileOp::kAddStoreLocal: return "add-store-local";
    case TileOp::kAddStoreFinal: return "add-store-final";
    case TileOp::kStoreFinal: return "store-final";
    case TileOp::kAtomicAdd: return "atomic-add";
    case TileOp::kStoreLocal: return "store-local";
  }
  return "?";
}

std::vector<int> ring_order(int world, int rank) {
  BRAID_REQUIRE(world >= 1 && rank >= 0 && rank < world, "ring_order: bad rank/world");
  std::vector<int> o(world);
  for (int s = 0; s < world; ++s) o[s] = (rank + 1 + s) % world;
  return o;
}

std::vector<Launch> order_launches(const std::vector<int>& order, int64_t chunk_rows) {
  std::vector<Launch> v;
  int prev = -2;
  for (int c : order) {
    if (!v.empty() && c == prev + 1) v.back().rows += chunk_rows;
    else v.push_back({int64_t(c) * chunk_rows, chunk_rows});
    prev = c;
  }
  return v;
}

int pick_regions(Variant v, int64_t chunk_rows, int64_t n, int bm, int requested) {
  BRAID_REQUIRE(chunk_rows > 0 && n > 0 && bm > 0 && chunk_rows % bm == 0, "pick_regions: bad chunk");
  const int chunk_mblocks = int(chunk_rows / bm);
  int want = requested;
  if (want <= 0 && v == Variant::kRingCublas)
    want = chunk_rows < 512 ? 1 : chunk_rows < 2048 ? 2 : int(std::min<int64_t>(4, chunk_rows / 1024));
  if (want <= 0) want = int(std::max<int64_t>(1, chunk_rows * n * 2 / (int64_t(8) << 20)));
  want = std::min(want, std::max(1, chunk_mblocks / 2));
  while (want > 1 && chunk_mblocks % (2 * want) != 0) --want;
  return want;
}

int pick_swizzle(int chunk_mblocks, int cap) {
  BRAID_REQUIRE(chunk_mblocks > 0, "pick_swizzle: chunk_mblocks > 0");
  int s = 1;
  for (int c = 2; c <= 8 && c <= cap; c *= 2)
    if (chunk_mblocks % (2 * c) == 0) s = c;
  return s;
}

int column_segment(int world, int chunk_mblocks) {
  BRAID_REQUIRE(world >= 1 && chunk_mblocks >= 2 && chunk_mblocks % 2 == 0, "column_segment: whole 2x1 clusters");
  int best = 2;
  for (int s = 2; s <= chunk_mblocks && world * s <= 16; s += 2)
    if (chunk_mblocks % s == 0) best = s;
  return best;
}

int pick_segment(int chunk_mblocks, int region_mblocks, int min_mblocks) {
  BRAID_REQUIRE(chunk_mblocks > 0 && region_mblocks > 0 && chunk_mblocks % region_mblocks == 0,
                "pick_segment: regions must divide the chunk");
  for (int seg = region_mblocks; seg < chunk_mblocks; seg += region_mblocks)
    if (seg >= min_mblocks && chunk_mblocks % seg == 0) return seg;
  return chunk_mblocks;
}

std::vector<int> tile_execution_order(const AddressMap& a, int swizzle) {
  BRAID_REQUIRE(swizzle == 1 || swizzle == 2 || swizzle == 4 || swizzle == 8, "tile_execution_order: swizzle 1/2/4/8");
  BRAID_REQUIRE(a.interleave.seg_mblocks <= 0 || (a.launches.size() == 1 && a.launches[0].row_begin == 0),
                "tile_execution_order: an interleaved map is one launch over all rows");
  std::vector<int> seq;
  seq.reserve(a.tiles.size());
  for (const Launch& l : a.launches) {
    overlap::TileGrid g;
    g.bm = a.bm, g.bn = a.bn;
    g.tiles_m = int(l.rows / a.bm), g.tiles_n = a.tiles_n;
    g.cluster_m = 2, g.cluster_n = 1;
    g.log_swizzle = swizzle == 8 ? 3 : swizzle == 4 ? 2 : swizzle == 2 ? 1 : 0;
    const int mb0 = int(l.row_begin / a.bm);
    for (int t : overlap::execution_order(g))
      if (t >= 0) seq.push_back(a.interleave.physical_mblock(mb0 + t / a.tiles_n) * a.tiles_n + t % a.tiles_n);
  }
  return seq;
}

AddressMap make_address_map(Variant v, int world, int rank, int64_t m, int64_t n, int bm, int bn, int regions,
                            int segment_mblocks, bool column_order) {
  BRAID_REQUIRE(world >= 1 && world <= 8 && rank >= 0 && rank < world, "t3: 1..8 ranks");
  BRAID_REQUIRE(bm > 0 && bn > 0 && regions >= 1, "t3: bad tile or regions");
  BRAID_REQUIRE(n > 0 && n % bn == 0, "t3: N must be a multiple of " + std::to_string(bn));
  const int64_t unit = int64_t(world) * 2 * bm * regions;
  BRAID_REQUIRE(m > 0 && m % unit == 0,
                "t3: M must be a multiple of world*2*bm*regions = " + std::to_string(unit) +
                    " (each region whole 2x1 clusters)");
  AddressMap a;
  a.variant = v;
  a.world = world;
  a.rank = rank;
  a.m = m;
  a.n = n;
  a.bm = bm;
  a.bn = bn;
  a.tiles_m = int(m / bm);
  a.tiles_n = int(n / bn);
  a.chunk_mblocks = a.tiles_m / world;
  a.regions = regions;
  a.region_mblocks = a.chunk_mblocks / regions;
  a.chunk_elems = (m / world) * n;
  a.region_elems = a.chunk_elems / regions;
  a.order = ring_order(world, rank);
  if (v == Variant::kDirectTma) std::rotate(a.order.begin(), a.order.end() - 1, a.order.end());  // own chunk first
  a.launches = order_launches(a.order, m / world);
  if (v == Variant::kDirectTma && world > 1) {  // one launch; its scheduler interleaves segments (Interleave)
    a.stored_by_column = column_order;
    const int want = segment_mblocks < 0 ? kDefaultSegmentMblocks : segment_mblocks;
    const int seg = column_order ? column_segment(world, a.chunk_mblocks)
                    : want == 0  ? a.chunk_mblocks
                                 : pick_segment(a.chunk_mblocks, a.region_mblocks, want);
    a.interleave = Interleave{int32_t(world), int32_t(rank), int32_t(a.chunk_mblocks), int32_t(seg),
                              int32_t(column_order ? 1 : 0)};
    a.launches = {Launch{0, m}};
  }
  const uint32_t rt = uint32_t(a.region_mblocks) * uint32_t(a.tiles_n);  // tiles per region
  const int W = world;
  if (is_ring(v)) {
    a.num_counters = 2 * W * regions;
    a.landing_slots = W;
  } else {
    a.num_counters = v != Variant::kDirectTma ? regions  // out[q]
                     : a.stored_by_column     ? regions + a.chunk_mblocks / a.interleave.seg_mblocks * a.tiles_n
                                              : 2 * regions;  // + stored[q]
    a.landing_slots = 0;
  }
  a.expected.assign(a.num_counters, 0);
  a.tiles.resize(size_t(a.tiles_m) * a.tiles_n);
  const int next = ring_next(W, rank);
  for (int mb = 0; mb < a.tiles_m; ++mb) {
    const int c = mb / a.chunk_mblocks;
    const int s = int(std::find(a.order.begin(), a.order.end(), c) - a.order.begin());  // ring: (c - rank - 1) mod W
    const int ms = mb % a.chunk_mblocks;  // m-block within its chunk
    const int q = ms / a.region_mblocks;
    for (int nb = 0; nb < a.tiles_n; ++nb) {
      TileRoute t;
      t.stage = s;
      t.chunk = c;
      t.region = q;
      t.dest_offset = int64_t(mb - c * a.chunk_mblocks) * bm * n + int64_t(nb) * bn;
      t.signal_rank = -1;
      t.signal_counter = -1;
      if (v == Variant::kDirectTma && c == rank) {  // own chunk first, stored (no zeroed output), then announced
        t.op = TileOp::kStoreFinal;
        t.dest_rank = rank;
        t.dest_buf = Buf::kOut;
        if (W > 1) {
          t.signal_rank = rank;
          t.signal_counter = a.stored_by_column ? a.stored_column_counter(ms / a.interleave.seg_mblocks, nb)
                                                : a.stored_counter(q);
        }
      } else if (is_direct(v)) {
        t.op = TileOp::kAtomicAdd;
        t.dest_rank = c;
        t.dest_buf = Buf::kOut;
        // The own chunk's tiles signal nothing: the owner's final stream wait follows its own GEMM in stream order.
        t.signal_rank = c == rank ? -1 : c;
        t.signal_counter = c == rank ? -1 : q;
        if (v == Variant::kDirectTma) {  // added only onto the owner's stored region (column)
          t.wait_rank = c;
          t.wait_counter = a.stored_by_column ? a.stored_column_counter(ms / a.interleave.seg_mblocks, nb)
                                              : a.stored_counter(q);
        }
      } else if (W == 1) {
        t.op = TileOp::kStoreFinal;
        t.dest_rank = rank;
        t.dest_buf = Buf::kOut;
      } else if (s == 0 && (v == Variant::kRingDma || v == Variant::kRingCublas)) {
        t.op = TileOp::kStoreLocal;
        t.dest_rank = rank;
        t.dest_buf = Buf::kLanding;
        t.dest_slot = 0;
        t.signal_rank = rank;
        t.signal_counter = a.done_counter(0, q);
      } else if (s == 0) {
        t.op = TileOp::kStoreRemote;
        t.dest_rank = next;
        t.dest_buf = Buf::kLanding;
        t.dest_slot = 1;
        t.signal_rank = next;
        t.signal_counter = a.land_counter(1, q);
      } else if (s < W - 1) {
        t.op = TileOp::kAddStoreLocal;
        t.dest_rank = rank;
        t.dest_buf = Buf::kLanding;
        t.dest_slot = s;
        t.wait_counter = a.land_counter(s, q);
        t.signal_rank = rank;
        t.signal_counter = a.done_counter(s, q);
      } else {
        t.op = TileOp::kAddStoreFinal;
        t.dest_rank = rank;
        t.dest_buf = Buf::kOut;
        t.wait_counter = a.land_counter(s, q);
      }
      a.tiles[size_t(mb) * a.tiles_n + nb] = t;
    }
  }
  if (is_direct(v)) {
    for (int q = 0; q < regions; ++q) {
      a.expected[q] = uint32_t(W - 1) * rt;  // every other rank's tiles of region q of this rank's chunk
      a.final_counters.push_back(q);
      if (v == Variant::kDirectTma && W > 1 && !a.stored_by_column) a.expected[a.stored_counter(q)] = rt;  // own tiles
    }
    if (a.stored_by_column)  // this rank's own tiles of each (segment, column)
      for (int g = 0; g < a.chunk_mblocks / a.interleave.seg_mblocks; ++g)
        for (int nb = 0; nb < a.tiles_n; ++nb)
          a.expected[a.stored_column_counter(g, nb)] = uint32_t(a.interleave.seg_mblocks);
  } else {
    for (int s = 1; s < W; ++s)
      for (int q = 0; q < regions; ++q) a.expected[a.land_counter(s, q)] = rt;  // stage 1: per tile; later: one DMA write of rt
    for (int s = v == Variant::kRing ? 1 : 0; s + 1 < W; ++s)
      for (int q = 0; q < regions; ++q) {
        a.expected[a.done_counter(s, q)] = rt;
        DmaTrigger d;
        d.stage = s;
        d.region = q;
        d.wait_counter = a.done_counter(s, q);
        d.wait_value = rt;
        d.src_slot = s;
        d.dst_slot = s + 1;
        d.offset = int64_t(q) * a.region_elems;
        d.elems = a.region_elems;
        d.dst_rank = next;
        d.signal_counter = a.land_counter(s + 1, q);
        d.signal_value = rt;
        a.dma.push_back(d);
      }
  }
  return a;
}

}  // namespace braid::t3
