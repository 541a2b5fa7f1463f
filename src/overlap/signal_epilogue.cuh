// signal_epilogue.cuh — a CUTLASS 3.x sm90 collective epilogue that writes each tile through a small
// shared-memory stage (staged_store.cuh: 16-byte row vectors, 64 columns per pass, 32 KiB, which
// leaves the main loop its 4 stages at 128x256x64), optionally to its execution-order-aware
// reordered place, then signals the tile's wave group.
//
// It implements the interface the sm90 warp-specialized kernels call on their CollectiveEpilogue (the
// same one cutlass::epilogue::collective::detail::Sm90TmaWarpSpecializedAdapter implements): no
// producer load, store() per tile from the consumer warpgroups, store_tail() at the end.
//
// Memory ordering of the signal (PTX memory model):
//   1. every consumer thread writes its share of the tile (16-byte rows from the stage) with st.global;
//   2. all consumer threads (size(TiledMma)) meet at a named barrier (bar.sync, CTA scope): the
//      barrier orders each thread's stores before everything thread 0 does after it;
//   3. thread 0 executes red.release.gpu.global.add.u32 on the group's counter. A release is
//      cumulative: every write that precedes it in causality order (its own, and the other threads'
//      through the barrier) is visible at gpu scope to any thread that observes the incremented value
//      with acquire semantics (the wait kernel's ld.acquire.gpu, or a fence.acq_rel.gpu after a
//      relaxed poll), and to work ordered after such a thread. The same pattern as
//      cooperative_groups' grid sync (bar.sync; thread 0: fence; atomic).
//   The counter is read by the comm stream (spin kernel with acquire, or cuStreamWaitValue32 on the
//   same GPU) before NCCL reads the group's slice. With a2a_dest_ptrs (rows stored into peers' memory)
//   the release is red.release.sys instead: the stores are made visible at system scope to whoever
//   acquires the counter at system scope (GemmAllToAll's end kernel, which then releases to the peers).
//   With part_dst (parts stored into their owners' receive buffers) the counter release is at system scope
//   too, and thread 0 then adds 1 with red.release.sys to each owner's flag for (group, this rank): the same
//   cumulative release (bar.sync first), so an owner that acquires its flag sees our part of every tile.
#pragma once

#include <cuda_bf16.h>

#include "cute/tensor.hpp"
#include "cutlass/arch/barrier.h"
#include "cutlass/cutlass.h"
#include "cutlass/pipeline/pipeline.hpp"
#include "staged_store.cuh"

// BRAID_OVERLAP_EPILOGUE_STORES=0 compiles the stores into other ranks' memory out (a2a_dest_ptrs, part_dst are
// then ignored): for a same-call A/B of the plain GEMM against the epilogue with those branches
// (scripts/build-variant.sh build src/overlap/gemm_sm90.cu nostores BRAID_OVERLAP_EPILOGUE_STORES=0).
#ifndef BRAID_OVERLAP_EPILOGUE_STORES
#define BRAID_OVERLAP_EPILOGUE_STORES 1
#endif

namespace braid::overlap::detail {

struct SignalEpilogueParams {
  __nv_bfloat16* d;
  int64_t ldd;              // normal layout leading dimension
  const int32_t* tile_slot; // null: normal layout
  const int32_t* tile_group;
  const int32_t* group_first;
  uint32_t* counters;       // null: no signal
  int32_t* wave_log;        // null: no log
  int tiles_n;
  int log2_parts;
  // All-to-all layout (overlap.hpp, A2aPlan): non-null replaces the parts layout by per-row addresses.
  const int32_t* a2a_row_code;        // M: (rank among the m-block's rows to dest) << 4 | dest
  const int64_t* a2a_tile_dest_base;  // tiles * a2a_world
  int a2a_world;
  // Rows stored into each destination's own buffer (EpilogueArgs::a2a_dest_ptrs; null: into d, row stride BN)
  // with row stride a2a_ld; the counter release is then at system scope (the stores may be remote).
  __nv_bfloat16* const* a2a_dest_ptrs;
  int64_t a2a_ld;
  // Parts stored into their owners' memory (EpilogueArgs::part_dst / part_flags; reduce-scatter by stores):
  // element off of part p of group g at byte address part_dst[g << log2_parts | p] + 2 * off; after the tile,
  // part_flags[p][g << log2_parts | part_rank] += 1 (release, system scope) for every p != part_rank.
  const uint64_t* part_dst;
  uint32_t* const* part_flags;
  int part_rank;
};

__device__ __forceinline__ void signal_add_release_gpu(uint32_t* p, uint32_t v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
// The same at system scope: for tiles whose rows went to peers over NVLink (all-to-all by stores), so that a
// thread that acquires the counter at system scope may release them on to the peers (GemmAllToAll::run).
__device__ __forceinline__ void signal_add_release_sys(uint32_t* p, uint32_t v) {
  asm volatile("red.release.sys.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

template <int BM, int BN>
class SignalEpilogue {
 public:
  using ElementC = void;
  using ElementD = cutlass::bfloat16_t;
  using StrideC = cute::Stride<int64_t, cute::Int<1>, int64_t>;
  using StrideD = cute::Stride<int64_t, cute::Int<1>, int64_t>;
  using GmemTiledCopyC = void;
  using GmemTiledCopyD = void;
  using ThreadEpilogueOp = void;  // no per-element functor: D = bf16(accumulator)

  using LoadPipeline = cutlass::PipelineTransactionAsync<0>;
  using LoadPipelineState = cutlass::PipelineState<0>;
  static constexpr uint32_t TmaTransactionBytes = 0;
  static constexpr bool RequiresTransactionBytes = false;
  using StorePipeline = cutlass::PipelineTmaStore<0>;
  using StorePipelineState = cutlass::PipelineState<0>;

  static constexpr int kStageCols = 64;
  struct SharedStorage {
    StageBuffer<BM, kStageCols> stage;
  };
  static_assert(sizeof(SharedStorage) <= 32 * 1024, "the stage must leave the main loop 4 stages at 128x256x64");
  using TensorStorage = SharedStorage;
  using TensorMapStorage = SharedStorage;
  using PipelineStorage = typename LoadPipeline::SharedStorage;

  using Arguments = SignalEpilogueParams;
  using Params = SignalEpilogueParams;

  template <class ProblemShape>
  static constexpr Params to_underlying_arguments(ProblemShape const&, Arguments const& args, void*) {
    return args;
  }
  template <class ProblemShape>
  static size_t get_workspace_size(ProblemShape const&, Arguments const&) { return 0; }
  template <class ProblemShape>
  static cutlass::Status initialize_workspace(ProblemShape const&, Arguments const&, void*, cudaStream_t,
                                              cutlass::CudaHostAdapter* = nullptr) {
    return cutlass::Status::kSuccess;
  }
  template <class ProblemShape>
  static bool can_implement(ProblemShape const& problem_shape, Arguments const& args) {
    auto shape = cute::append<4>(problem_shape, 1);
    const auto m = cute::get<0>(shape), n = cute::get<1>(shape);
    return args.d != nullptr && reinterpret_cast<uintptr_t>(args.d) % 16 == 0 && args.ldd % 8 == 0 && m % BM == 0 && n % BN == 0 && (BM >> args.log2_parts) % 8 == 0;
  }

  template <class CtaTileMNK>
  CUTLASS_HOST_DEVICE static constexpr int get_load_pipe_increment(CtaTileMNK) { return 1; }
  template <class CtaTileMNK>
  CUTLASS_HOST_DEVICE static constexpr int get_store_pipe_increment(CtaTileMNK) { return 1; }
  CUTLASS_DEVICE static void prefetch_tma_descriptors(Params const&) {}

  CUTLASS_HOST_DEVICE SignalEpilogue(Params const& params, TensorStorage& smem) : params_(params), smem_(&smem) {}

  CUTLASS_DEVICE bool is_producer_load_needed() const { return false; }

  template <class... Ts>
  CUTLASS_DEVICE auto load(LoadPipeline, LoadPipelineState state, Ts&&...) { return state; }
  CUTLASS_DEVICE auto load_tail(LoadPipeline, LoadPipelineState state) { return state; }

  template <class ProblemShapeMNKL, class CtaTileMNK, class CtaCoordMNKL, class AccEngine, class AccLayout,
            class TiledMma>
  CUTLASS_DEVICE auto store(LoadPipeline, LoadPipelineState load_state, StorePipeline,
                            StorePipelineState store_state, ProblemShapeMNKL, CtaTileMNK,
                            CtaCoordMNKL cta_coord_mnkl, cute::Tensor<AccEngine, AccLayout> accumulators,
                            TiledMma tiled_mma, int thread_idx, TensorStorage&, int = -1) {
    using namespace cute;
    static_assert(size<0>(CtaTileMNK{}) == BM && size<1>(CtaTileMNK{}) == BN, "epilogue tile mismatch");
    constexpr int kThreads = size(TiledMma{});
    const int mb = int(get<0>(cta_coord_mnkl));
    const int nb = int(get<1>(cta_coord_mnkl));
    const int tile = mb * params_.tiles_n + nb;

    // Destination of tile row r, column c:  base + (r >> log2_sub) * part_stride + (r & (sub-1)) * ld + c
    int64_t base, part_stride, ld;
    int log2_sub;
    int group = -1;
    const bool a2a = params_.a2a_row_code != nullptr;
    const int32_t* row_code = a2a ? params_.a2a_row_code + int64_t(mb) * BM : nullptr;       // (BM)
    const int64_t* dest_base = a2a ? params_.a2a_tile_dest_base + int64_t(tile) * params_.a2a_world : nullptr;
    constexpr bool kStores = BRAID_OVERLAP_EPILOGUE_STORES != 0;
    __nv_bfloat16* const* dest_ptrs = kStores ? params_.a2a_dest_ptrs : nullptr;  // null: every row into d
    const uint64_t* part_dst = kStores && !a2a ? params_.part_dst : nullptr;      // null: every part into d
    if (a2a) {
      base = 0, part_stride = 0, log2_sub = 30;  // per-row addresses below
      ld = dest_ptrs != nullptr ? params_.a2a_ld : BN;
      group = params_.tile_group[tile];
    } else if (params_.tile_slot == nullptr) {
      base = int64_t(mb) * BM * params_.ldd + int64_t(nb) * BN;
      ld = params_.ldd;
      log2_sub = 30;  // one part
      part_stride = 0;
      if (params_.counters != nullptr) group = params_.tile_group[tile];
    } else {
      const int slot = params_.tile_slot[tile];
      group = params_.tile_group[tile];
      const int first = params_.group_first[group];
      const int tiles = params_.group_first[group + 1] - first;
      constexpr int kLog2BM = BM == 256 ? 8 : BM == 128 ? 7 : 6;
      static_assert((1 << kLog2BM) == BM, "BM must be 64, 128 or 256");
      log2_sub = kLog2BM - params_.log2_parts;
      const int64_t sub = int64_t(1) << log2_sub;
      base = (int64_t(first) * BM + int64_t(slot - first) * sub) * BN;
      part_stride = int64_t(tiles) * sub * BN;
      ld = BN;
    }
    const int sub_mask = log2_sub >= 30 ? 0x7fffffff : (1 << log2_sub) - 1;

    // (BM,BN) coordinates of this thread's accumulator values.
    Tensor cD = make_identity_tensor(make_shape(Int<BM>{}, Int<BN>{}));  // (BM,BN)
    auto thr_mma = tiled_mma.get_thread_slice(thread_idx);
    Tensor tCcD = thr_mma.partition_C(cD);                               // (MMA,MMA_M,MMA_N)
    static_assert(decltype(size(tCcD))::value == decltype(size(accumulators))::value, "fragment mismatch");

    __nv_bfloat16* d = params_.d;
    staged_store<BM, BN, kStageCols, kThreads>(
        smem_->stage, accumulators, tCcD, thread_idx, [&](int r, int c, const float(&f)[8]) {
          int64_t off;
          __nv_bfloat16* dst = d;
          if (a2a) {  // row r goes to its destination's segment (rows of one tile and dest are consecutive)
            const int code = __ldg(row_code + r);
            off = __ldg(dest_base + (code & 15)) + int64_t(code >> 4) * ld + c;
            if (dest_ptrs != nullptr)  // this rank's or a peer's (NVLink) output
              dst = reinterpret_cast<__nv_bfloat16*>(
                  __ldg(reinterpret_cast<const unsigned long long*>(dest_ptrs) + (code & 15)));
          } else {
            off = base + int64_t(r >> log2_sub) * part_stride + int64_t(r & sub_mask) * ld + c;
            if (part_dst != nullptr)  // part r >> log2_sub belongs to that rank: its receive buffer, or our d
              dst = reinterpret_cast<__nv_bfloat16*>(__ldg(part_dst + ((group << params_.log2_parts) | (r >> log2_sub))));
          }
          *reinterpret_cast<uint4*>(dst + off) = pack_bf16x8(f);  // 16-byte aligned: ld, BN, c % 8 == 0
        });

    if (params_.counters != nullptr || params_.wave_log != nullptr) {
      // (2) all consumer threads' stores precede thread 0's release below.
      cutlass::arch::NamedBarrier::sync(kThreads, cutlass::arch::ReservedNamedBarriers::EpilogueBarrier);
      if (thread_idx == 0) {
        if (params_.wave_log != nullptr) params_.wave_log[tile] = iteration_;
        // (3) release at gpu scope, cumulative over the barrier.
        if (params_.counters != nullptr) {
          if (dest_ptrs != nullptr || part_dst != nullptr) signal_add_release_sys(params_.counters + group, 1u);
          else signal_add_release_gpu(params_.counters + group, 1u);
        }
        if (part_dst != nullptr) {  // each owner's flag for (group, this rank): our part of the tile is there
          const int parts = 1 << params_.log2_parts;
          for (int p = 0; p < parts; ++p)
            if (p != params_.part_rank)
              signal_add_release_sys(params_.part_flags[p] + ((group << params_.log2_parts) | params_.part_rank), 1u);
        }
      }
    }
    ++iteration_;
    return cute::make_tuple(load_state, store_state);
  }

  template <class... Ts>
  CUTLASS_DEVICE auto store_tail(LoadPipeline, LoadPipelineState load_state, StorePipeline,
                                 StorePipelineState store_state, Ts&&...) {
    return cute::make_tuple(load_state, store_state);
  }

 private:
  Params params_;
  SharedStorage* smem_;
  int iteration_ = 0;
};

}  // namespace braid::overlap::detail
