// tma_panels.cuh — the pieces the sm90 epilogues share to send a tile by the TMA unit instead of the consumer
// threads' stores: asynchronous bulk copies and bulk-group waits (PTX cp.async.bulk*, the bulk_group completion
// mechanism), the proxy fences, and the bf16 panel a warpgroup writes from its wgmma accumulators by stmatrix in the
// 128-byte swizzle of a tensor map (a TMA store or TMA reduce-add then reads it). Users: overlap's SignalEpilogue
// (signal_epilogue.cuh: store_tile_tma, store_parts_bulk) and T3's direct-tma epilogue (t3/t3_epilogue.cuh).
//
// Memory-ordering contract of every user (PTX memory model):
//   1. the threads that write a shared-memory source (generic proxy) execute fence.proxy.async.shared::cta, then meet
//      at a named barrier: their writes are visible to the async proxy's reads issued after it;
//   2. one thread issues the copies (or tensor stores / reductions) and commits them as a bulk async-group;
//   3. before the source is written again, the issuing thread waits for the group's reads (wait_group.read); before
//      anyone is told the data are there, it waits for the group's completion (wait_group without .read: the writes
//      are performed) and executes fence.proxy.async.global (async-proxy writes ordered before its later generic
//      operations); a barrier then orders that before the releasing thread's red.release (cumulative). The global
//      address may be a peer's (NVLink through a peer mapping): the same contract, with the release at system scope.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "braid/copy_device.cuh"
#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"

namespace braid::overlap::detail {

// The bulk-copy primitives (braid/copy_device.cuh), under the names the epilogues use.
using dev::bulk_commit;
using dev::bulk_copy_s2g;
using dev::bulk_wait_all;
using dev::fence_proxy_async_global;
using dev::fence_proxy_async_shared;
// Only the reads of the shared-memory source are complete (the stage may be rewritten); the writes may be in flight.
__device__ __forceinline__ void bulk_wait_read() { dev::bulk_wait_read<0>(); }
// The same for all but the most recent bulk group (groups complete in commit order).
__device__ __forceinline__ void bulk_wait_read_but1() { dev::bulk_wait_read<1>(); }

// Four 8x8 b16 matrices to shared memory (stmatrix.x4): lane L gives the address of row L % 8 of matrix L / 8 (16
// bytes, 16-byte aligned); register k of every lane holds its two elements of matrix k in the mma C-fragment layout
// (row lane / 4, columns 2 * (lane % 4) + {0, 1}).
__device__ __forceinline__ void stmatrix_x4(void* smem_row, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(smem_row));
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(a), "r"(r0), "r"(r1), "r"(r2),
               "r"(r3)
               : "memory");
}
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// The accumulator fragment of sm90 wgmma (one atom of 64 x BN per warpgroup, MMA_M = MMA_N = 1): value index
// i = j + 2h + 4g holds row (warp's first row) + 8h + lane / 4, column 8g + 2 (lane % 4) + j — the GMMA C layout
// (value strides 1 column, 8 rows, 8 columns). For stmatrix, lane L addresses row L % 8 of matrix L / 8, the matrices
// of a pair of column groups (g, g + 1) being (h, g) = (0, g), (1, g), (0, g + 1), (1, g + 1).
template <int BN, class Acc>
CUTLASS_DEVICE void check_panel_fragment(Acc const& acc) {
  using namespace cute;
  static_assert(decltype(rank(acc))::value == 3 && decltype(size<1>(acc))::value == 1 &&
                    decltype(size<2>(acc))::value == 1 && decltype(size<0, 0>(acc))::value == 2 &&
                    decltype(size<0, 1>(acc))::value == 2 && decltype(size<0, 2>(acc))::value == BN / 8,
                "stmatrix path: one 64xBN GMMA atom per warpgroup");
}
// The tile row this lane addresses in stmatrix_x4, from the row of its accumulator value 0 (tCcD(0)).
CUTLASS_DEVICE int panel_address_row(int first_value_row, int lane) {
  return first_value_row - (lane >> 2) + ((lane >> 3) & 1) * 8 + (lane & 7);
}
// Columns 64j .. 64j+63 of this warp's rows of the tile, bf16, into a (rows, 64) panel: row r at r * 128 bytes,
// 16-byte chunk c at c ^ (r & 7) (the 128-byte swizzle of CU_TENSOR_MAP_SWIZZLE_128B; the panel 1024-byte aligned).
// arow: panel_address_row(). Every lane of the warp calls it (stmatrix is warp-collective).
template <int BN, class Acc>
CUTLASS_DEVICE void write_panel(char* panel, Acc const& acc, int arow, int lane, int j) {
  CUTLASS_PRAGMA_UNROLL
  for (int gg = 0; gg < 4; ++gg) {  // column groups g, g + 1 of the panel's 8
    const int g = 8 * j + 2 * gg;
    const int chunk = (2 * gg + (lane >> 4)) ^ (arow & 7);
    stmatrix_x4(panel + arow * 128 + chunk * 16, pack_bf16x2(float(acc(4 * g)), float(acc(4 * g + 1))),
                pack_bf16x2(float(acc(4 * g + 2)), float(acc(4 * g + 3))),
                pack_bf16x2(float(acc(4 * g + 4)), float(acc(4 * g + 5))),
                pack_bf16x2(float(acc(4 * g + 6)), float(acc(4 * g + 7))));
  }
}

}  // namespace braid::overlap::detail
