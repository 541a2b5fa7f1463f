// sm90_gemm.cuh — the one CUTLASS 3.x kernel composition braid's GEMMs share (FlashOverlap's
// gemm_sm90.cu and T3's gemm_t3.cu differ only in their collective epilogue): bf16 A (M,K) row-major
// times B (N,K) row-major ("TN"), fp32 accumulation, TMA loads with multicast over a CM x CN cluster,
// wgmma, warp-specialized cooperative (two consumer warpgroups per tile), persistent static scheduler
// raster along N (optionally with its M indices remapped: RemappedPersistentScheduler). The main loop
// gets every stage that the epilogue's shared storage leaves.
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
#include "cutlass/gemm/kernel/tile_scheduler.hpp"

namespace braid::overlap::detail {

// CUTLASS's static persistent scheduler (PersistentTileSchedulerSm90: the same linear order, swizzle and
// raster) with every tile's M index passed through `Remap` (trivially copyable, with a device-callable
// `int32_t physical_mblock(int32_t) const`; set per launch in Arguments::remap; e.g. t3::Interleave).
// Producer and consumers of a tile ask the same scheduler, so the main loop's A rows and the epilogue's
// rows agree. The remap must be a permutation that keeps a 2x1 cluster's CTAs on consecutive m-blocks.
template <class Remap>
struct RemappedSchedulerTag {};

template <class Remap>
class RemappedPersistentScheduler : public cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90 {
  using Base = cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90;

 public:
  struct Arguments : Base::Arguments {
    Remap remap{};
  };
  struct Params : Base::Params {
    Remap remap{};
  };

  template <class ProblemShapeMNKL, class TileShape, class ClusterShape>
  static Params to_underlying_arguments(ProblemShapeMNKL problem, TileShape tile, ClusterShape cluster,
                                        cutlass::KernelHardwareInfo const& hw, Arguments const& args,
                                        void* workspace = nullptr, const uint32_t subtiles = 1,
                                        uint32_t ktile_align = 1u) {
    Params p;
    static_cast<Base::Params&>(p) =
        Base::to_underlying_arguments(problem, tile, cluster, hw, args, workspace, subtiles, ktile_align);
    p.remap = args.remap;
    return p;
  }

  CUTLASS_HOST_DEVICE RemappedPersistentScheduler() {}
  CUTLASS_DEVICE explicit RemappedPersistentScheduler(Params const& p) : Base(p), remap_(p.remap) {}

  template <class ClusterShape>
  CUTLASS_DEVICE WorkTileInfo initial_work_tile_info(ClusterShape) {
    return get_current_work();
  }
  CUTLASS_DEVICE WorkTileInfo get_current_work() const { return remapped(Base::get_current_work()); }
  CUTLASS_DEVICE auto fetch_next_work(WorkTileInfo w) {
    if (continue_current_work(w)) return cute::make_tuple(w, true);
    advance_to_next_work();
    return cute::make_tuple(get_current_work(), true);
  }
  template <class Pipeline, class PipelineState>
  CUTLASS_DEVICE auto fetch_next_work(WorkTileInfo w, Pipeline&, PipelineState) {
    return fetch_next_work(w);
  }

 private:
  CUTLASS_DEVICE WorkTileInfo remapped(WorkTileInfo w) const {
    if (w.is_valid_tile) w.M_idx = remap_.physical_mblock(w.M_idx);
    return w;
  }
  Remap remap_{};
};

}  // namespace braid::overlap::detail

namespace cutlass::gemm::kernel::detail {
template <class Remap, class ArchTag, class TileShape, class ClusterShape, uint32_t Stages>
struct TileSchedulerSelector<braid::overlap::detail::RemappedSchedulerTag<Remap>, ArchTag, TileShape, ClusterShape,
                             Stages> {
  using Scheduler = braid::overlap::detail::RemappedPersistentScheduler<Remap>;
};
}  // namespace cutlass::gemm::kernel::detail

namespace braid::overlap::detail {

// SchedulerTag: cutlass::gemm::PersistentScheduler, or RemappedSchedulerTag<Remap> (then set
// args.scheduler.remap after arguments()).
template <class Epilogue, int BM, int BN, int BK, int CM, int CN,
          class SchedulerTag = cutlass::gemm::PersistentScheduler>
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
  using GemmKernel =
      cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, Mainloop, Epilogue, SchedulerTag>;
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
