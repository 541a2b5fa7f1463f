// gemm_t3.cu — the only CUTLASS translation unit of T3: one instantiation (128x256x64, cluster 2x1,
// cooperative, persistent), the same composition and scheduling arguments as overlap's gemm_sm90.cu,
// with the T3 epilogue.
#include <cuda_runtime.h>

#include <string>

#include "braid/errors.hpp"
#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "gemm_t3.hpp"
#include "t3_epilogue.cuh"

namespace braid::t3::detail {
namespace {

using namespace cute;

template <int BM, int BN, int BK, int CM, int CN>
struct Kernel {
  using Element = cutlass::bfloat16_t;
  using TileShape = Shape<Int<BM>, Int<BN>, Int<BK>>;
  using ClusterShape = Shape<Int<CM>, Int<CN>, _1>;
  using Epilogue = T3Epilogue<BM, BN>;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Element, cutlass::layout::RowMajor, 8, Element,
      cutlass::layout::ColumnMajor, 8, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      cutlass::gemm::KernelTmaWarpSpecializedCooperative>::CollectiveOp;
  using GemmKernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue,
                                                          cutlass::gemm::PersistentScheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;
  // The epilogue's shared-memory stage (32 KiB) must not cost the main loop a pipeline stage.
  static_assert(BN != 256 || Mainloop::DispatchPolicy::Stages >= 4, "128x256x64 main loop needs 4 stages");
  static_assert(size(typename GemmKernel::TiledMma{}) == 256, "cooperative: two consumer warpgroups");

  static void run(const void* a, const void* b, int m, int n, int k, const EpiParams& epi, int sm_count,
                  cudaStream_t stream) {
    using StrideA = typename Gemm::GemmKernel::StrideA;
    using StrideB = typename Gemm::GemmKernel::StrideB;
    typename Gemm::Arguments args{};
    args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
    args.problem_shape = {m, n, k, 1};
    args.mainloop.ptr_A = static_cast<const Element*>(a);
    StrideA dA{};
    get<0>(dA) = int64_t(k);
    get<2>(dA) = int64_t(m) * k;
    args.mainloop.dA = dA;
    args.mainloop.ptr_B = static_cast<const Element*>(b);
    StrideB dB{};
    get<0>(dB) = int64_t(k);
    get<2>(dB) = int64_t(n) * k;
    args.mainloop.dB = dB;
    args.epilogue = epi;
    args.hw_info.device_id = 0;
    args.hw_info.sm_count = sm_count;
    // As overlap: AlongN raster, no swizzle, so m-blocks (hence stages and regions) complete in order.
    args.scheduler.max_swizzle_size = 1;
    args.scheduler.raster_order = cutlass::gemm::kernel::detail::RasterOrderOptions::AlongN;
    Gemm gemm;
    cutlass::Status st = gemm.can_implement(args);
    BRAID_REQUIRE(st == cutlass::Status::kSuccess,
                  std::string("CUTLASS cannot implement the T3 GEMM: ") + cutlassGetStatusString(st));
    BRAID_REQUIRE(Gemm::get_workspace_size(args) == 0, "unexpected CUTLASS workspace");
    st = gemm.initialize(args, nullptr, stream);
    if (st != cutlass::Status::kSuccess)
      throw CudaError(std::string("CUTLASS initialize: ") + cutlassGetStatusString(st), __FILE__, __LINE__);
    st = gemm.run(stream);
    if (st != cutlass::Status::kSuccess)
      throw CudaError(std::string("CUTLASS run: ") + cutlassGetStatusString(st) + " (" +
                          cudaGetErrorString(cudaGetLastError()) + ")",
                      __FILE__, __LINE__);
    BRAID_CHECK_LAUNCH();
  }
};

using K128x256 = Kernel<kBM, kBN, 64, 2, 1>;

}  // namespace

void run_t3_gemm(const void* a, const void* b, int64_t m, int64_t n, int64_t k, const EpiParams& p, int sm_count,
                 cudaStream_t stream) {
  BRAID_REQUIRE(m > 0 && m % (2 * kBM) == 0 && n % kBN == 0 && k % 64 == 0,
                "T3 GEMM: M % 256, N % 256, K % 64 must be 0");
  BRAID_REQUIRE(m < (int64_t(1) << 31) && n < (int64_t(1) << 31) && k < (int64_t(1) << 31), "T3 GEMM: too large");
  BRAID_REQUIRE(reinterpret_cast<uintptr_t>(a) % 16 == 0 && reinterpret_cast<uintptr_t>(b) % 16 == 0,
                "T3 GEMM: A and B must be 16-byte aligned");
  BRAID_REQUIRE(p.err != nullptr && p.world >= 1 && p.world <= kMaxRanks && p.chunk_mblocks > 0 &&
                    p.region_mblocks > 0 && p.n == n,
                "T3 GEMM: incomplete epilogue parameters");
  K128x256::run(a, b, int(m), int(n), int(k), p, sm_count, stream);
}

}  // namespace braid::t3::detail
