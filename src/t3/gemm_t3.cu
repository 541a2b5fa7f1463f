// gemm_t3.cu — the only CUTLASS translation unit of T3: two instantiations (128x256x64, cluster 2x1,
// cooperative, persistent) of the composition shared with FlashOverlap (overlap/sm90_gemm.cuh), with
// the T3 epilogue: the general one (ring, ring-dma, direct) and the direct-tma one (only the TMA reduce-add path).
#include <cuda_runtime.h>

#include <string>
#include <type_traits>

#include "braid/errors.hpp"
#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "gemm_t3.hpp"
#include "t3_epilogue.cuh"
#include "../overlap/sm90_gemm.cuh"

namespace braid::t3::detail {
namespace {

// The composition shared with FlashOverlap (overlap/sm90_gemm.cuh) with the T3 epilogue. AlongN raster;
// the swizzle's strips of m-blocks stay inside a chunk (pick_swizzle), so stages complete in order.
// direct-tma's scheduler interleaves the chunks' segments (t3::Interleave).
template <bool kDirectTma>
using Scheduler = std::conditional_t<kDirectTma, overlap::detail::RemappedSchedulerTag<Interleave>,
                                     cutlass::gemm::PersistentScheduler>;
template <int BM, int BN, int BK, int CM, int CN, bool kDirectTma>
using Kernel =
    overlap::detail::Sm90PersistentGemm<T3Epilogue<BM, BN, kDirectTma>, BM, BN, BK, CM, CN, Scheduler<kDirectTma>>;

using K128x256 = Kernel<kBM, kBN, 64, 2, 1, false>;
using K128x256DirectTma = Kernel<kBM, kBN, 64, 2, 1, true>;

}  // namespace

void preload_t3_gemm() {
  K128x256::preload();
  K128x256DirectTma::preload();
}

void run_t3_gemm(const void* a, const void* b, int64_t m, int64_t n, int64_t k, const EpiParams& p, int sm_count,
                 int swizzle, cudaStream_t stream, const Interleave& order) {
  BRAID_REQUIRE(swizzle == 1 || swizzle == 2 || swizzle == 4 || swizzle == 8, "T3 GEMM: swizzle 1, 2, 4 or 8");
  const bool interleaved = p.mode == kModeDirectTma && order.world > 1 && order.seg_mblocks > 0;
  // The rows one scheduler strip (2 * swizzle m-blocks) must stay inside, as AddressMap::strip_mblocks: every
  // owner's segment in column order (one strip of the remapped order spans all chunks), the segment, the chunk.
  const int strip = !interleaved ? p.chunk_mblocks : order.paired ? order.world * order.seg_mblocks : order.seg_mblocks;
  BRAID_REQUIRE(strip % (2 * swizzle) == 0, "T3 GEMM: a swizzle strip must not straddle a chunk (or a segment strip)");
  BRAID_REQUIRE(!interleaved || (p.chunk_mblocks % order.seg_mblocks == 0 &&
                                 order.chunk_mblocks == p.chunk_mblocks && order.world == p.world &&
                                 order.rank == p.rank && p.mb_offset == 0 && m == int64_t(p.world) * p.chunk_mblocks * kBM),
                "T3 GEMM: the interleave needs one launch over all rows, whole swizzle strips per segment");
  BRAID_REQUIRE(m > 0 && m % (2 * kBM) == 0 && n % kBN == 0 && k % 64 == 0,
                "T3 GEMM: M % 256, N % 256, K % 64 must be 0");
  BRAID_REQUIRE(m < (int64_t(1) << 31) && n < (int64_t(1) << 31) && k < (int64_t(1) << 31), "T3 GEMM: too large");
  BRAID_REQUIRE(reinterpret_cast<uintptr_t>(a) % 16 == 0 && reinterpret_cast<uintptr_t>(b) % 16 == 0,
                "T3 GEMM: A and B must be 16-byte aligned");
  BRAID_REQUIRE(p.err != nullptr && p.world >= 1 && p.world <= kMaxRanks && p.chunk_mblocks > 0 &&
                    p.region_mblocks > 0 && p.n == n,
                "T3 GEMM: incomplete epilogue parameters");
  if (p.mode == kModeDirectTma) {
    auto args = K128x256DirectTma::arguments(a, b, int(m), int(n), int(k), p, sm_count, swizzle);
    args.scheduler.remap = interleaved ? order : Interleave{};
    K128x256DirectTma::run(args, stream, "the T3 GEMM (direct-tma)");
  }
  else
    K128x256::run(K128x256::arguments(a, b, int(m), int(n), int(k), p, sm_count, swizzle), stream, "the T3 GEMM");
}

}  // namespace braid::t3::detail
