// signal_epilogue.cuh — a CUTLASS 3.x sm90 collective epilogue that writes each tile through a small
// shared-memory stage (staged_store.cuh: 16-byte row vectors, 128 bf16 columns per pass, 32 KiB, which
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
#include "tma_panels.cuh"

// BRAID_OVERLAP_EPILOGUE_STORES=0 compiles the stores into other ranks' memory out (a2a_dest_ptrs, part_dst are
// then ignored): for a same-call A/B of the plain GEMM against the epilogue with those branches
// (scripts/build-variant.sh build src/overlap/gemm_sm90.cu nostores BRAID_OVERLAP_EPILOGUE_STORES=0).
#ifndef BRAID_OVERLAP_EPILOGUE_STORES
#define BRAID_OVERLAP_EPILOGUE_STORES 1
#endif

// BRAID_OVERLAP_STAGE_BF16 (default 1) stages each tile in bf16 (StageBufferBf16: 128 columns per pass, half the
// passes, barriers and shared-memory bytes of the fp32 stage); 0 stages fp32 (64 columns per pass). The stored bits
// are the same (every path of this epilogue rounds each accumulator to bf16 once). Measured on 2x H100 (twenty-ninth
// session, gemm-variant A/B on the 12 shapes furthest below cuBLAS): braid/cuBLAS 0.938-0.950x against 0.907-0.916x
// with the fp32 stage.
#ifndef BRAID_OVERLAP_STAGE_BF16
#define BRAID_OVERLAP_STAGE_BF16 1
#endif

// BRAID_OVERLAP_TMA_STORE (compile-time; CMakeLists.txt passes the cache variable, default 3; 0 the st.global path of
// staged_store for every tile; A/B with scripts/build-variant.sh). Mode 3: tiles in the normal or reordered layout (not
// all-to-all rows, not parts stored into their owners) leave by TMA tensor stores (store_tile_tma): one 64-column panel
// at a time, written by stmatrix into two shared-memory panels in turn (the 128-byte swizzle), so that TMA reads one
// panel while the threads write the other, one thread per consumer warpgroup issuing its rows' boxes
// (BRAID_OVERLAP_TMA_WG below). Why: on one H200 (75286f1) CUTLASS's own
// TMA-store epilogue on braid's main loop and scheduler ran plain GEMMs at 0.979x of cuBLAS (geomean, 17 shapes) where
// the st.global epilogue ran 0.961x: the gap to cuBLAS was mostly the epilogue's stores. Measured on 2x H200
// (thirty-fourth session, ten short shapes, four alternating rounds, --no-tune): braid/cuBLAS geomean 0.966 against
// 0.954 for mode 0; the 128x256 shapes 0.5-2.7% faster, the 128x128 ones within 0.3%, the FlashOverlap op unchanged;
// the whole test suite passes with it. Two intermediate modes, measured in the same calls and removed since: 1 (both
// panels written, then their boxes: 0.958) and 2 (panels in turn, written by 4-byte stores: 0.963-0.964);
// docs/flashoverlap.md "Thirty-fourth session".
#ifndef BRAID_OVERLAP_TMA_STORE
#define BRAID_OVERLAP_TMA_STORE 3
#endif
#if BRAID_OVERLAP_TMA_STORE != 0 && BRAID_OVERLAP_TMA_STORE != 3
#error "BRAID_OVERLAP_TMA_STORE: 0 (st.global) or 3 (TMA stores from stmatrix-written panels)"
#endif
// BRAID_OVERLAP_TMA_WG (default 1; 0 for an A/B): in mode 3, each consumer warpgroup stores its own 64 rows of every
// panel (its own named barrier of 128 threads, its own TMA boxes of at most 64 rows issued by its first thread) instead
// of both warpgroups meeting at a 256-thread barrier twice per panel and thread 0 issuing the whole tile's boxes; the
// host encodes the store map with boxes of min(BM / parts, 64) rows (gemm_sm90.cu). A signalled tile: each warpgroup's
// first thread waits for its boxes' writes, then the two meet once (256 threads) before thread 0 releases. Measured on
// one H200 (c1ca0a9, ten short GEMMs, two alternating rounds, every row verified): braid/cuBLAS geomean 0.968-0.970x
// against 0.958x with 0, faster on all ten shapes (8192x4096x1024 0.965x -> 0.983x), and above CUTLASS's own TMA-store
// epilogue on the same main loop (0.966-0.969x) except on the two one-wave 128x128 shapes.
#ifndef BRAID_OVERLAP_TMA_WG
#define BRAID_OVERLAP_TMA_WG 1
#endif
#if BRAID_OVERLAP_TMA_STORE
#include <cuda.h>  // CUtensorMap
static_assert(alignof(CUtensorMap) >= 64, "TMA needs its tensor map 64-byte aligned");
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
  // Nonzero: the parts for other ranks leave by asynchronous bulk copies from a shared-memory row stage
  // (store_parts_bulk below) instead of the consumer threads' st.global; the host sets it only where the
  // remote rows of a tile fit the stage ((parts - 1) * BM / parts <= BM / 2, i.e. 2 ranks) and every
  // part_dst entry is 16-byte aligned.
  int part_bulk;
#if BRAID_OVERLAP_TMA_STORE
  // Nonzero: store_tile_tma through tma_d, a 2-D bf16 tensor map of the destination in the 128-byte swizzle with a
  // box of 64 columns x (BM >> log2_parts) rows: the normal layout as (M rows, N columns, row stride ldd), the
  // reordered one as (M*N/BN rows, BN columns). The kernel reads it in its parameter space (__grid_constant__),
  // where TMA needs it (64-byte aligned).
  int tma_store;
  CUtensorMap tma_d;  // the type carries TMA's alignment (>= 64 bytes)
#endif
};

__device__ __forceinline__ void signal_add_release_gpu(uint32_t* p, uint32_t v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
// The same at system scope: for tiles whose rows went to peers over NVLink (all-to-all by stores), so that a
// thread that acquires the counter at system scope may release them on to the peers (GemmAllToAll::run).
__device__ __forceinline__ void signal_add_release_sys(uint32_t* p, uint32_t v) {
  asm volatile("red.release.sys.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// Asynchronous bulk copies (tma_panels.cuh) in store_parts_bulk follow tma_panels.cuh's contract: (1) the writers of
// the row stage fence (fence.proxy.async.shared::cta) and meet at the named barrier; (2) one thread per row issues the
// copy and commits it as its own bulk async-group; (3) before the stage is written again (next tile) or the owners are
// signalled, each issuing thread waits for completion of its groups (wait_group 0: the writes are performed, not only
// the reads) and executes fence.proxy.async.global; the named barrier then orders that before thread 0's
// red.release.sys on each owner's flag (cumulative).

// The bf16 row stage of the bulk-copy path: kRows rows of BN bf16, each row's stride padded by 16 bytes so
// that the fragment writes of 8 consecutive rows (one warp instruction) fall in distinct bank groups; a row
// is 16-byte aligned and contiguous (the bulk copy's source).
template <int kRows, int BN>
struct RowStage {
  static constexpr int kStride = BN + 8;  // elements
  alignas(128) __nv_bfloat16 v[kRows * kStride];  // (kRows, BN) bf16, padded rows
};

// kTmaOnly: the epilogue of a kernel that only ever stores by TMA (store_tile_tma: the normal or reordered layout, no
// all-to-all rows, no parts stored into their owners; the host launches it only for such arguments, gemm_sm90.cu).
// The general paths (staged st.global stores, per-row all-to-all addresses, bulk copies to the owners) are then not
// compiled in: Nsight Compute on one H200 (ee02225, 1024x4096x1024, 128x256) found the general kernel's 4928
// instructions against 1288 for CUTLASS's own epilogue on the same main loop, with 19% of its warp-stall samples on
// instruction fetch ("no instruction": 313 samples against 27) and 18.0 us against 16.2.
template <int BM, int BN, bool kTmaOnly = false>
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
  static constexpr int kStageColsBf16 = BN < 128 ? BN : 128;
  static constexpr bool kStageBf16 = BRAID_OVERLAP_STAGE_BF16 != 0;
  static constexpr int kBulkRows = BM / 2;  // remote rows a tile may send by bulk copies (2 ranks: half the tile)
  static constexpr bool kTmaStore = BRAID_OVERLAP_TMA_STORE != 0;
  static constexpr bool kTmaPerWarpgroup = BRAID_OVERLAP_TMA_WG != 0;
  static_assert(!kTmaOnly || kTmaStore, "a TMA-only epilogue needs BRAID_OVERLAP_TMA_STORE");
  static constexpr int kWgRows = 64;  // rows of the tile one consumer warpgroup holds (one 64xBN GMMA atom)
  static constexpr int kTmaPassCols = BN < 128 ? BN : 128;  // store_tile_tma's panels: kTmaPassCols / 64 of 64 columns
  struct SharedStorage {
    union {
      StageBuffer<BM, kStageCols> stage;           // fp32 passes (staged_store)
      StageBufferBf16<BM, kStageColsBf16> stage16;  // bf16 passes (staged_store, BRAID_OVERLAP_STAGE_BF16)
      RowStage<kBulkRows, BN> rows;                // bf16 remote rows (store_parts_bulk)
#if BRAID_OVERLAP_TMA_STORE
      alignas(1024) StageBufferBf16<BM, 64> panels[kTmaPassCols / 64];  // (BM, 64) bf16, 128-byte swizzle (store_tile_tma)
#endif
    };
  };
  static_assert(sizeof(SharedStorage) <= 34 * 1024, "the stage must leave the main loop 4 stages at 128x256x64");
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
  CUTLASS_DEVICE static void prefetch_tma_descriptors(Params const& params) {
#if BRAID_OVERLAP_TMA_STORE
    if (params.tma_store != 0) cute::prefetch_tma_descriptor(&params.tma_d);
#else
    (void)params;
#endif
  }

  // `params` is the kernel's own (parameter space): store_tile_tma hands TMA the address of its tensor map.
  CUTLASS_HOST_DEVICE SignalEpilogue(Params const& params, TensorStorage& smem)
      : params_(params), kparams_(&params), smem_(&smem) {}

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
    const bool a2a = !kTmaOnly && params_.a2a_row_code != nullptr;
    const int32_t* row_code = a2a ? params_.a2a_row_code + int64_t(mb) * BM : nullptr;       // (BM)
    const int64_t* dest_base = a2a ? params_.a2a_tile_dest_base + int64_t(tile) * params_.a2a_world : nullptr;
    constexpr bool kStores = BRAID_OVERLAP_EPILOGUE_STORES != 0;
    __nv_bfloat16* const* dest_ptrs = kStores ? params_.a2a_dest_ptrs : nullptr;  // null: every row into d
    const uint64_t* part_dst = kStores && !kTmaOnly && !a2a ? params_.part_dst : nullptr;  // null: every part into d
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
    threads_ = kThreads;
    tid_ = thread_idx;

    // (BM,BN) coordinates of this thread's accumulator values.
    Tensor cD = make_identity_tensor(make_shape(Int<BM>{}, Int<BN>{}));  // (BM,BN)
    auto thr_mma = tiled_mma.get_thread_slice(thread_idx);
    Tensor tCcD = thr_mma.partition_C(cD);                               // (MMA,MMA_M,MMA_N)
    static_assert(decltype(size(tCcD))::value == decltype(size(accumulators))::value, "fragment mismatch");

    if (part_dst != nullptr && params_.part_bulk != 0 && params_.tile_slot != nullptr) {
      store_parts_bulk(accumulators, tCcD, thread_idx, tile, group, base, part_stride, ld, log2_sub, part_dst);
      ++iteration_;
      return cute::make_tuple(load_state, store_state);
    }

    bool tma = false;  // this tile left by TMA stores (store_tile_tma)
#if BRAID_OVERLAP_TMA_STORE
    tma = kTmaOnly || (params_.tma_store != 0 && !a2a && part_dst == nullptr);
    if (tma) store_tile_tma(accumulators, tCcD, thread_idx, mb, nb, base, part_stride);
#endif
    __nv_bfloat16* d = params_.d;
    // Columns c..c+7 of tile row r, as 8 floats (fp32 stage) or 8 packed bf16 (bf16 stage), to their destination.
    auto emit = [&](int r, int c, const auto& v) {
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
      *reinterpret_cast<uint4*>(dst + off) = as_bf16x8(v);  // 16-byte aligned: ld, BN, c % 8 == 0
    };
    if (tma) {
      // The tile's data are the issuing threads' TMA stores: each waits for its boxes' writes (not only their reads of
      // the stage) and orders them (async proxy) before its own later generic operations; thread 0 then releases as
      // below. Per warpgroup (kTmaPerWarpgroup) the two issuers' waits precede thread 0's release through a barrier of
      // both warpgroups (cumulative, as in the contract above); otherwise thread 0 is the only issuer, no barrier.
      if constexpr (kTmaPerWarpgroup) {
        if (params_.counters != nullptr) {
          if (thread_idx % 128 == 0) {
            bulk_wait_all();
            fence_proxy_async_global();
          }
          cutlass::arch::NamedBarrier::sync(kThreads, cutlass::arch::ReservedNamedBarriers::EpilogueBarrier);
        }
      }
      if (thread_idx == 0 && (params_.counters != nullptr || params_.wave_log != nullptr)) {
        if (params_.counters != nullptr && !kTmaPerWarpgroup) {
          bulk_wait_all();
          fence_proxy_async_global();
        }
        if (params_.wave_log != nullptr) params_.wave_log[tile] = iteration_;
        if (params_.counters != nullptr) signal_add_release_gpu(params_.counters + group, 1u);
      }
      ++iteration_;
      return cute::make_tuple(load_state, store_state);
    }
    if constexpr (kStageBf16)
      staged_store<BM, BN, kThreads>(smem_->stage16, accumulators, tCcD, thread_idx, emit);
    else
      staged_store<BM, BN, kThreads>(smem_->stage, accumulators, tCcD, thread_idx, emit);

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
    if constexpr (!kTmaOnly) finish_bulk();  // the last tile's bulk copies, then its owners' flags
    // store_tile_tma's last boxes (no-op where none were issued): only their reads of the panels must be complete
    // before the CTA's shared memory is released; their writes complete with the grid, as CUTLASS's own TMA-store
    // epilogue relies on (PipelineTmaStore::producer_tail). A signalled tile already waited for its writes in store().
    // (Until the thirty-eighth session this waited for the writes; on one H200 the two timed alike, c1ca0a9.)
    if (kTmaStore && (kTmaPerWarpgroup ? tid_ % 128 == 0 : tid_ == 0)) bulk_wait_read();
    return cute::make_tuple(load_state, store_state);
  }

 private:
#if BRAID_OVERLAP_TMA_STORE
  // The tile by TMA tensor stores (BRAID_OVERLAP_TMA_STORE). Per 64-column panel of the tile, through the panel
  // buffers in turn: the issuing thread waits until the group that last read this buffer has read it (wait_group.read),
  // barrier; every thread writes its bf16 columns by stmatrix into the buffer, whose layout (row r at r * 128
  // bytes, 16-byte chunk j at j ^ (r & 7), 1024-byte aligned) is the tensor map's 128-byte swizzle;
  // fence.proxy.async.shared::cta (the generic writes before the async proxy's reads), barrier; the issuing thread
  // issues one box per part — rows p * sub .. of the panel to the part's place — and commits them as one bulk group.
  // Per warpgroup (the default): the threads, barrier, issuing thread and boxes are one consumer warpgroup's, over its
  // 64 rows of the panel (boxes of min(sub, 64) rows); otherwise all consumer threads and thread 0, boxes of sub rows.
  // Completion: store()'s release path (wait_group 0), store_tail.
  template <class Acc, class Coords>
  CUTLASS_DEVICE void store_tile_tma(Acc const& acc, Coords const& tCcD, int tid, int mb, int nb, int64_t base,
                                     int64_t part_stride) {
    using namespace cute;
    using Panel = StageBufferBf16<BM, 64>;
    static_assert(sizeof(Panel) % 1024 == 0 && alignof(SharedStorage) >= 1024, "panels: whole 1024-byte swizzle atoms");
    constexpr int kPanels = kTmaPassCols / 64;
    const bool normal = params_.tile_slot == nullptr;
    const int log2_parts = normal ? 0 : params_.log2_parts;
    const int parts = 1 << log2_parts;
    const int sub = BM >> log2_parts;
    check_panel_fragment<BN>(acc);
    const int lane = tid & 31;
    const int arow = panel_address_row(int(get<0>(tCcD(0))), lane);  // this lane's stmatrix row
    // Panel j of the tile (columns 64j..64j+63) through buffer q = j % kPanels. Before writing buffer q, the group that
    // last read it is the one committed kPanels panels ago (this tile's, or the previous tile's last panels: BN / 64
    // is a multiple of kPanels), so all but the kPanels - 1 most recent groups must have finished reading.
    static_assert((BN / 64) % kPanels == 0, "the panels alternate across tiles");
    // Per warpgroup (kTmaPerWarpgroup): warpgroup w = tid / 128 owns rows 64w..64w+63 of every panel (its lanes' arow
    // lie there), synchronizes on its own named barrier (user id w, 128 threads) and its first thread issues its boxes.
    const int wg = kTmaPerWarpgroup ? tid / 128 : 0;
    const bool issuer = kTmaPerWarpgroup ? tid % 128 == 0 : tid == 0;
    auto panel_sync = [&] {
      if constexpr (kTmaPerWarpgroup) cutlass::arch::NamedBarrier::sync(128, uint32_t(wg));
      else cutlass::arch::NamedBarrier::sync(threads_, cutlass::arch::ReservedNamedBarriers::EpilogueBarrier);
    };
    static_assert(!kTmaPerWarpgroup || BM == 2 * kWgRows, "per-warpgroup stores: two warpgroups of 64 rows");
    CUTLASS_PRAGMA_UNROLL
    for (int j = 0; j < BN / 64; ++j) {
      const int q = j % kPanels;
      if (issuer) {
        if constexpr (kPanels == 2) bulk_wait_read_but1();
        else bulk_wait_read();
      }
      panel_sync();
      write_panel<BN>(reinterpret_cast<char*>(smem_->panels[q].v), acc, arow, lane, j);
      fence_proxy_async_shared();
      panel_sync();
      if (issuer) {
        const int col = (normal ? nb * BN : 0) + j * 64;
        if constexpr (kTmaPerWarpgroup) {  // boxes of min(sub, 64) rows over this warpgroup's 64 rows
          const int box = sub < kWgRows ? sub : kWgRows;
          for (int r0 = wg * kWgRows; r0 < (wg + 1) * kWgRows; r0 += box) {
            const int p = r0 / sub;
            const int row = normal ? mb * BM + r0 : int((base + int64_t(p) * part_stride) / BN) + (r0 % sub);
            SM90_TMA_STORE_2D::copy(&kparams_->tma_d, smem_->panels[q].v + r0 * 64, col, row);
          }
        } else {
          for (int p = 0; p < parts; ++p) {
            const int row = normal ? mb * BM : int((base + int64_t(p) * part_stride) / BN);
            SM90_TMA_STORE_2D::copy(&kparams_->tma_d, smem_->panels[q].v + p * sub * 64, col, row);
          }
        }
        bulk_commit();
      }
    }
  }
#endif

  // The previous tile's bulk copies (if any): complete (contract above, step 3), then thread 0 adds 1 to each
  // owner's flag for (that tile's group, this rank). Every consumer thread calls it (named barrier inside).
  CUTLASS_DEVICE void finish_bulk() {
    if (bulk_rows_ == 0) return;
    if (tid_ < bulk_rows_) {
      bulk_wait_all();
      fence_proxy_async_global();
    }
    cutlass::arch::NamedBarrier::sync(threads_, cutlass::arch::ReservedNamedBarriers::EpilogueBarrier);
    if (tid_ == 0) {
      const int parts = 1 << params_.log2_parts;
      for (int p = 0; p < parts; ++p)
        if (p != params_.part_rank)
          signal_add_release_sys(params_.part_flags[p] + ((bulk_group_ << params_.log2_parts) | params_.part_rank), 1u);
    }
    bulk_rows_ = 0;
  }

  // Reduce-scatter by stores, asynchronous: the own part goes straight from the accumulators to d (4-byte
  // stores into local memory), the other parts' rows into the bf16 row stage, one bulk copy per row to the
  // owner's receive buffer (2 * BN contiguous bytes at the address the synchronous path would write), left in
  // flight while the next tile's main loop runs; their owners' flags are raised when they complete (at the
  // next tile's epilogue or in store_tail). The own counter is released once the local stores are done.
  template <class Acc, class Coords>
  CUTLASS_DEVICE void store_parts_bulk(Acc const& acc, Coords const& tCcD, int tid, int tile, int group,
                                       int64_t base, int64_t part_stride, int64_t ld, int log2_sub,
                                       const uint64_t* part_dst) {
    using namespace cute;
    using Rows = RowStage<kBulkRows, BN>;
    const int me = params_.part_rank;
    const int parts = 1 << params_.log2_parts;
    const int sub_mask = (1 << log2_sub) - 1;
    const int remote_rows = (parts - 1) << log2_sub;  // <= kBulkRows (host: part_bulk only then)
    finish_bulk();  // the stage is free and the previous tile's owners are signalled
    __nv_bfloat16* rows = smem_->rows.v;
    const uint64_t* dst_of = part_dst + (int64_t(group) << params_.log2_parts);
    __nv_bfloat16* own = reinterpret_cast<__nv_bfloat16*>(__ldg(dst_of + me));
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < size(acc); i += 2) {
      const auto coord = tCcD(i);
      const int r = get<0>(coord), c = get<1>(coord);
      const int p = r >> log2_sub;
      const __nv_bfloat162 v = __floats2bfloat162_rn(float(acc(i)), float(acc(i + 1)));
      if (p == me) {
        *reinterpret_cast<__nv_bfloat162*>(own + base + int64_t(p) * part_stride + int64_t(r & sub_mask) * ld + c) = v;
      } else {
        const int ri = ((p < me ? p : p - 1) << log2_sub) | (r & sub_mask);
        *reinterpret_cast<__nv_bfloat162*>(rows + ri * Rows::kStride + c) = v;
      }
    }
    fence_proxy_async_shared();  // (1)
    cutlass::arch::NamedBarrier::sync(threads_, cutlass::arch::ReservedNamedBarriers::EpilogueBarrier);
    if (tid < remote_rows) {  // (2) one row per thread
      const int pp = tid >> log2_sub;
      const int p = pp < me ? pp : pp + 1;
      const int64_t off = base + int64_t(p) * part_stride + int64_t(tid & sub_mask) * ld;
      char* dst = reinterpret_cast<char*>(__ldg(dst_of + p)) + 2 * off;
      bulk_copy_s2g(dst, rows + tid * Rows::kStride, uint32_t(2 * BN));
      bulk_commit();
    }
    if (tid == 0) {
      if (params_.wave_log != nullptr) params_.wave_log[tile] = iteration_;
      // The local stores of every consumer thread precede this release (the barrier above).
      if (params_.counters != nullptr) signal_add_release_sys(params_.counters + group, 1u);
    }
    bulk_rows_ = remote_rows;
    bulk_group_ = group;
  }

  Params params_;
  Params const* kparams_;  // the kernel's parameters (the tensor map's address for TMA)
  SharedStorage* smem_;
  int iteration_ = 0;
  int threads_ = 0;     // consumer threads (size(TiledMma)), set by store()
  int tid_ = 0;         // this thread's index among them
  int bulk_rows_ = 0;   // rows of the previous tile still in flight by bulk copies (0: none)
  int bulk_group_ = 0;  // that tile's group
};

}  // namespace braid::overlap::detail
