// src/model/ce_layout.hpp — the reduce-scatter window of a layer whose collectives run on the copy engines
// (Layer::Impl::ce, nccl-ce comm, TP = 2), shared by the layer and its CPU test. No CUDA needed.
//
// The window holds 4 blocks of Tl rows (Tl = T / 2, each rank's rows): [k0 | s0 | s1 | k1]. Rank r's row-parallel GEMM
// writes its partial sums of all T rows — row blocks c0 then c1 — starting at block gemm_out = 2r, so its own block
// c_r lands in keep = k_r and the peer's block c_p in send = s_r. The transfer is the in-place all-gather over the
// blocks [s0 | s1] (this rank's part is block 1 + r, its send), after which block recv = s_p holds the peer's partial
// sums of c_r; the consumer adds keep + recv. No block the GEMM writes is one the peer's transfer writes.
#pragma once

#include <cstdint>

namespace braid::model::detail {

struct CeRsSlots {
  int64_t gemm_out, send, keep, recv;  // in blocks of Tl rows from the window's start
};
constexpr int64_t kCeRsBlocks = 4;        // the window's size in blocks
constexpr int64_t kCeRsGatherFirst = 1;   // the all-gather's output starts at block s0 (two blocks, rank order)
constexpr CeRsSlots ce_rs_slots(int rank) { return {2 * rank, 1 + rank, 3 * rank, 2 - rank}; }

static_assert(ce_rs_slots(0).gemm_out + 1 == ce_rs_slots(0).send && ce_rs_slots(0).keep == ce_rs_slots(0).gemm_out,
              "rank 0: its rows c0 then c1 land in k0 and s0");
static_assert(ce_rs_slots(1).gemm_out == ce_rs_slots(1).send && ce_rs_slots(1).gemm_out + 1 == ce_rs_slots(1).keep,
              "rank 1: its rows c0 then c1 land in s1 and k1");
static_assert(ce_rs_slots(0).recv == ce_rs_slots(1).send && ce_rs_slots(1).recv == ce_rs_slots(0).send,
              "each rank receives into the block the peer sends from");
static_assert(ce_rs_slots(1).keep + 1 == kCeRsBlocks, "the window holds 4 blocks");

}  // namespace braid::model::detail
