// a2a_plan.cpp — host plan of FlashOverlap's GEMM + all-to-all (include/braid/overlap.hpp, A2aPlan):
// where each row of each tile lands in the send buffer, the per-(group, peer) NCCL counts on both
// sides, and the receiver's gather table. Host only; CPU-tested (tests/overlap/test_overlap_tables).
#include <algorithm>
#include <string>
#include <utility>

#include "braid/errors.hpp"
#include "braid/overlap.hpp"

namespace braid::overlap {

A2aPlan make_a2a_plan(const Mapping& map, int world, int rank, const std::vector<std::vector<int32_t>>& dest_all) {
  const TileGrid& g = map.grid;
  const int W = world, BM = g.bm, BN = g.bn, TM = g.tiles_m, TN = g.tiles_n, G = map.groups();
  BRAID_REQUIRE(W >= 1 && W <= 16 && rank >= 0 && rank < W, "a2a plan: 1..16 ranks");
  BRAID_REQUIRE(map.parts == 1, "a2a plan: the mapping must have one part per tile");
  BRAID_REQUIRE(int(dest_all.size()) == W, "a2a plan: one routing per rank");
  const int64_t M = int64_t(TM) * BM, N = int64_t(TN) * BN;
  for (int q = 0; q < W; ++q) {
    BRAID_REQUIRE(int64_t(dest_all[q].size()) == M, "a2a plan: routing of rank " + std::to_string(q) +
                                                        " has " + std::to_string(dest_all[q].size()) +
                                                        " rows, M is " + std::to_string(M));
    for (int32_t d : dest_all[q]) BRAID_REQUIRE(d >= 0 && d < W, "a2a plan: destination out of range");
  }
  A2aPlan p;
  p.world = W, p.rank = rank, p.m = M, p.n = N;

  // rows of m-block mb of rank q going to p: cnt[q][mb * W + p]
  std::vector<std::vector<int64_t>> cnt(W, std::vector<int64_t>(size_t(TM) * W, 0));
  for (int q = 0; q < W; ++q)
    for (int64_t i = 0; i < M; ++i) ++cnt[q][size_t(i / BM) * W + dest_all[q][i]];

  // ---- sender (this rank) ----
  const auto& dest = dest_all[rank];
  p.row_code.resize(size_t(M));
  {
    std::vector<int32_t> seen(static_cast<size_t>(W), 0);
    for (int mb = 0; mb < TM; ++mb) {
      std::fill(seen.begin(), seen.end(), 0);
      for (int r = 0; r < BM; ++r) {
        const int64_t i = int64_t(mb) * BM + r;
        const int d = dest[size_t(i)];
        p.row_code[size_t(i)] = (seen[size_t(d)]++ << 4) | d;
      }
    }
  }
  p.tile_dest_base.assign(size_t(g.num_tiles()) * W, 0);
  p.send_off.assign(size_t(G) * W, 0);
  p.send_cnt.assign(size_t(G) * W, 0);
  for (int gr = 0; gr < G; ++gr) {
    const int first = map.group_first[gr], last = map.group_first[gr + 1];
    int64_t off = map.group_offset(gr);
    for (int d = 0; d < W; ++d) {
      p.send_off[size_t(gr) * W + d] = off;
      for (int s = first; s < last; ++s) {
        const int tile = map.slot_tile[s], mb = tile / TN;
        p.tile_dest_base[size_t(tile) * W + d] = off;
        off += cnt[rank][size_t(mb) * W + d] * BN;
      }
      p.send_cnt[size_t(gr) * W + d] = off - p.send_off[size_t(gr) * W + d];
    }
    BRAID_REQUIRE(off == map.group_offset(gr) + map.group_elems(gr), "a2a plan: group size mismatch");
  }

  // ---- sender, rows stored into each destination's final layout (Transport::kPeerStores) ----
  // Destination d's output: rows of source 0 to d, then source 1, ...; inside a source by row, so the rows of
  // one m-block to d are consecutive: (tile, d) starts at (rows of earlier sources to d + our rows to d in
  // earlier m-blocks) * N + nb * BN, row stride N.
  p.direct_base.assign(size_t(g.num_tiles()) * W, 0);
  for (int d = 0; d < W; ++d) {
    int64_t row = 0;
    for (int q = 0; q < rank; ++q)
      for (int mb = 0; mb < TM; ++mb) row += cnt[q][size_t(mb) * W + d];
    for (int mb = 0; mb < TM; ++mb) {
      for (int nb = 0; nb < TN; ++nb) p.direct_base[size_t(mb * TN + nb) * W + d] = row * N + int64_t(nb) * BN;
      row += cnt[rank][size_t(mb) * W + d];
    }
  }

  // ---- receiver (this rank) ----
  // Output row of source q's row i (dest == rank): rows of earlier sources, then i's rank among q's rows to us.
  std::vector<std::vector<int64_t>> out_row(W);
  int64_t base = 0;
  p.recv_rows_from.assign(size_t(W), 0);
  for (int q = 0; q < W; ++q) {
    out_row[q].assign(size_t(M), -1);
    int64_t j = 0;
    for (int64_t i = 0; i < M; ++i)
      if (dest_all[q][size_t(i)] == rank) out_row[q][size_t(i)] = base + j++;
    p.recv_rows_from[size_t(q)] = j;
    base += j;
  }
  p.recv_rows = base;
  p.recv_off.assign(size_t(G) * W, 0);
  p.recv_cnt.assign(size_t(G) * W, 0);
  p.piece_dst.reserve(size_t(base) * TN);
  int64_t roff = 0;
  for (int gr = 0; gr < G; ++gr) {
    const int first = map.group_first[gr], last = map.group_first[gr + 1];
    for (int q = 0; q < W; ++q) {
      p.recv_off[size_t(gr) * W + q] = roff;
      for (int s = first; s < last; ++s) {
        const int tile = map.slot_tile[s], mb = tile / TN, nb = tile % TN;
        for (int r = 0; r < BM; ++r) {
          const int64_t i = int64_t(mb) * BM + r;
          if (dest_all[q][size_t(i)] != rank) continue;
          const int64_t code = out_row[q][size_t(i)] * TN + nb;
          BRAID_REQUIRE(code < (int64_t(1) << 31), "a2a plan: output too large for the piece table");
          p.piece_dst.push_back(int32_t(code));
          roff += BN;
        }
      }
      p.recv_cnt[size_t(gr) * W + q] = roff - p.recv_off[size_t(gr) * W + q];
    }
  }
  BRAID_REQUIRE(roff == base * N, "a2a plan: receive size mismatch");

  // ---- the baseline's packed layout ----
  p.send_rows.assign(size_t(W), 0);
  for (int32_t d : dest) ++p.send_rows[size_t(d)];
  p.pack_rows.reserve(size_t(M));
  for (int d = 0; d < W; ++d)
    for (int64_t i = 0; i < M; ++i)
      if (dest[size_t(i)] == d) p.pack_rows.push_back(int32_t(i));
  return p;
}

std::vector<std::pair<int, int64_t>> a2a_sources(const std::vector<std::vector<int32_t>>& dest_all, int rank) {
  std::vector<std::pair<int, int64_t>> v;
  for (size_t q = 0; q < dest_all.size(); ++q)
    for (size_t i = 0; i < dest_all[q].size(); ++i)
      if (dest_all[q][i] == rank) v.emplace_back(int(q), int64_t(i));
  return v;
}

}  // namespace braid::overlap
