// gemm_t3.hpp (internal) — the T3 GEMM: FlashOverlap's sm_90a persistent kernel composition (same
// CUTLASS main loop, scheduler and scheduling arguments, so overlap::execution_order() holds) with the
// T3 epilogue (t3_epilogue.cuh) that routes each tile by the address map and tracks regions.
#pragma once

#include <cuda.h>  // CUtensorMap
#include <cuda_runtime.h>

#include <cstdint>

#include "braid/t3.hpp"  // Interleave

namespace braid::t3::detail {

inline constexpr int kBM = 128, kBN = 256;  // the one tile configuration instantiated (gemm_t3.cu)
inline constexpr int kMaxRanks = 8;

// First timed-out in-kernel wait (host-mapped; first writer wins).
struct WaitError {
  uint32_t code;      // 0 none, 1 timeout
  uint32_t counter;   // local counter index waited on
  uint32_t expected;
  uint32_t observed;
};

// kModeDirectTma runs its own instantiation of the kernel (T3Epilogue<..., true>: only the TMA reduce-add path).
enum : int { kModeRing = 0, kModeDirect = 1, kModeRingDma = 2, kModeDirectTma = 3 };

// The counter waits' longest sleep between polls, in ns (they back off to it; BRAID_T3_POLL_NS; t3.cu says why).
inline constexpr uint32_t kDefaultPollNs = 2000;

// Everything the epilogue needs; the routing formulas mirror make_address_map() (map.cpp).
struct EpiParams {
  int mode = kModeRing;
  int rank = 0, world = 1;
  int mb_offset = 0;          // global m-block of this launch's first m-block
  int tiles_n = 0;
  int chunk_mblocks = 0, region_mblocks = 0, regions = 1;
  int stored_by_column = 0;   // direct-tma column order: stored[g * tiles_n + nb] per (segment, tile column)
  int seg_mblocks = 0;        //   and its segment (AddressMap::stored_by_column, interleave.seg_mblocks)
  int64_t n = 0;              // leading dimension of every buffer (elements)
  int64_t chunk_elems = 0;
  void* landing = nullptr;        // ring: local landing base, slot s at s * chunk_elems
  void* next_landing = nullptr;   // ring: the next hop's landing base (peer pointer)
  uint32_t* counters = nullptr;   // ring: local counters (land | done)
  uint32_t* next_counters = nullptr;  // ring: the next hop's counters (peer pointer)
  void* out = nullptr;            // ring: final output (Mc x N), local
  void* dst_out[kMaxRanks] = {};  // direct: each rank's output (peer pointers; [rank] local)
  uint32_t* dst_counters[kMaxRanks] = {};  // direct: each rank's region counters
  WaitError* err = nullptr;       // device alias of the host-mapped record
  uint64_t timeout_ns = 0;
  uint32_t poll_ns = kDefaultPollNs;  // wait_counter: sleeps from 64 ns doubling to this between polls; 0 = a 128-ns
                                      // sleep every 256 polls (BRAID_T3_POLL_NS overrides; t3.cu)
  // direct-tma: tensor maps of each rank's output (dst_out[i], (Mc rows, n columns) bf16, boxes of 64 x 64, the
  // 128-byte swizzle; tma_map.hpp), read by the kernel in its parameter space. Unused by the other modes.
  CUtensorMap tma_out[kMaxRanks];
};

// D rows [row_begin, row_begin + m) of the full problem: a points at A's row row_begin; the epilogue
// sees m-blocks offset by p.mb_offset. Requirements: m % 256 == 0, n % 256 == 0, k % 64 == 0.
// Loads the T3 kernel (call before any run: see Sm90PersistentGemm::preload in overlap/sm90_gemm.cuh).
void preload_t3_gemm();
// swizzle: the scheduler's max_swizzle_size (1, 2, 4 or 8; t3::pick_swizzle keeps strips inside chunks, or
// inside the interleave's segments). order: kModeDirectTma's m-block order (AddressMap::interleave; a launch
// over all rows), ignored by the other modes.
void run_t3_gemm(const void* a, const void* b, int64_t m, int64_t n, int64_t k, const EpiParams& p, int sm_count,
                 int swizzle, cudaStream_t stream, const Interleave& order = {});

}  // namespace braid::t3::detail
