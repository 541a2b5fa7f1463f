// sm90_gemm.cuh — the one CUTLASS 3.x kernel composition braid's GEMMs share (FlashOverlap's
// gemm_sm90.cu and T3's gemm_t3.cu differ only in their collective epilogue): bf16 A (M,K) row-major
// times B (N,K) row-major ("TN"), fp32 accumulation, TMA loads with multicast over a CM x CN cluster,
// wgmma, warp-specialized cooperative (two consumer warpgroups per tile), persistent static scheduler
// raster along N. The main loop gets every stage that the epilogue's shared storage leaves.
// Include only from a CUTLASS translation unit (each instantiation costs minutes of compile time).
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "braid/errors.hpp"
#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"

namespace braid::overlap::detail {

template <class Epilogue, int BM, int BN, int BK, int CM, int CN>
struct Sm90PersistentGemm {
  using Element = cutlass::bfloat16_t;
  using TileShape = cute::Shape<cute::Int<BM>, cute::Int<BN>, cute::Int<BK>>;
  using ClusterShape = cute::Shape<cute::Int<CM>, cute::Int<CN>, cute::_1>;
  // A (M,K) row-major; B stored (N,K) row-major = (K,N) column-major in BLAS terms.
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Element, cutlass::layout::RowMajor, 8, Element,
      cutlass::layout::ColumnMajor, 8, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      cutlass::gemm::KernelTmaWarpSpecializedCooperative>::CollectiveOp;
  using GemmKernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, Mainloop, Epilogue,
                                                          cutlass::gemm::PersistentScheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;
  // The epilogue's shared-memory stage (32 KiB) must not cost the main loop a pipeline stage.
  static_assert(BN != 256 || Mainloop::DispatchPolicy::Stages >= 4, "128x256x64 main loop needs 4 stages");
  static_assert(cute::size(typename GemmKernel::TiledMma{}) == 256, "cooperative: two consumer warpgroups");
  static_assert(GemmKernel::SharedStorageSize <= 232448, "over sm_90's 227 KiB of shared memory per block");

  // Fixed scheduling (AlongN raster unless along_m, the given swizzle) so that the host model of the execution
  // order (overlap::execution_order, which reads both from the kernel's params) holds.
  static typename Gemm::Arguments arguments(const void* a, const void* b, int m, int n, int k,
                                            const typename Epilogue::Arguments& epi, int sm_count, int swizzle,
                                            bool along_m = false) {
    using StrideA = typename GemmKernel::StrideA;
    using StrideB = typename GemmKernel::StrideB;
    typename Gemm::Arguments args{};
    args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
    args.problem_shape = {m, n, k, 1};
    args.mainloop.ptr_A = static_cast<const Element*>(a);
    // Both operands are K-contiguous: (rows, K, L) with strides (K, 1, rows*K).
    StrideA dA{};
    cute::get<0>(dA) = int64_t(k);
    cute::get<2>(dA) = int64_t(m) * k;
    args.mainloop.dA = dA;
    args.mainloop.ptr_B = static_cast<const Element*>(b);
    StrideB dB{};
    cute::get<0>(dB) = int64_t(k);
    cute::get<2>(dB) = int64_t(n) * k;
    args.mainloop.dB = dB;
    args.epilogue = epi;
    args.hw_info.device_id = 0;
    args.hw_info.sm_count = sm_count;
    args.scheduler.max_swizzle_size = swizzle;
    args.scheduler.raster_order = along_m ? cutlass::gemm::kernel::detail::RasterOrderOptions::AlongM
                                          : cutlass::gemm::kernel::detail::RasterOrderOptions::AlongN;
    return args;
  }

  // Loads the kernel now (CUDA lazy loading would otherwise load it at its first launch, and a load
  // may synchronize the context). Contract for every braid op that enqueues a front-end wait
  // (cuStreamWaitValue32) whose release depends on this kernel: call preload() before the first run,
  // when no such wait can be pending — a wait pending on any stream during the load deadlocks the
  // host thread inside the launch, where no timeout applies (seen with T3 rings at 4 ranks).
  static void preload() {
    cudaFuncAttributes attr{};
    BRAID_CUDA_CHECK(cudaFuncGetAttributes(&attr, cutlass::device_kernel<GemmKernel>));
    BRAID_CUDA_CHECK(cudaFuncSetAttribute(cutlass::device_kernel<GemmKernel>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          int(GemmKernel::SharedStorageSize)));
  }

  static void run(const typename Gemm::Arguments& args, cudaStream_t stream, const char* what) {
    Gemm gemm;
    cutlass::Status st = gemm.can_implement(args);
    BRAID_REQUIRE(st == cutlass::Status::kSuccess,
                  std::string("CUTLASS cannot implement ") + what + ": " + cutlassGetStatusString(st));
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

}  // namespace braid::overlap::detail
