// t3_epilogue.cuh — the T3 collective epilogue: a sibling of overlap's SignalEpilogue (same CUTLASS
// 3.x sm90 warp-specialized interface: no producer load, store() per tile from the consumer
// warpgroups, writes straight from the accumulators), that routes each tile by the T3 address map
// (map.cpp; the formulas below are the same) and tracks regions with counters. Tiles go out through
// overlap's shared-memory stage (staged_store.cuh): every local load, local or remote store and NVLink
// atomic is a 16-byte row vector (red...v4.bf16x2 for the atomics).
//
// Per tile (stage s of its chunk c, region q; rt = tiles per region; W ranks):
//   ring  s == 0      st.global into the next hop's landing slot 1 (remote_map over NVLink), then
//                     red.release.sys on the next hop's land[1][q]
//   ring-dma s == 0   st.global into the local landing slot 0, red.release.sys on local done[0][q]; a
//                     copy engine forwards the region (dma_map) like the middle stages
//   ring  0 < s < W-1 wait land[s][q] >= rt (bounded), load landing slot s + add in fp32 + store in
//                     place (one rounding per stage), then red.release.sys on local done[s][q], which
//                     a copy engine waits on (cuStreamWaitValue32) to forward the region (dma_map)
//   ring  s == W-1    wait land[W-1][q] >= rt, load + add, store into `out` (own chunk: final)
//   direct            red.relaxed.sys.global.add.noftz.v4.bf16x2 into owner c's output (NVLink atomics),
//                     then red.release.sys on owner c's out[q] (c != this rank; see "signal" below)
//   direct-tma        its own instantiation (kDirectTma); each own segment runs one segment ahead of the others'
//                     (its scheduler's t3::Interleave; map.cpp). Per 64-column
//                     panel, each consumer warpgroup writes its 64 rows (bf16, stmatrix) into one of two shared-
//                     memory panels and its first thread sends them through tma_out[c]: own chunk (c == this rank)
//                     a tensor store, counted into this rank's stored[q]; another owner's chunk a tensor reduce-add
//                     (cp.reduce.async.bulk.tensor .add, bf16), after a bounded wait for owner c's stored[q] (the
//                     owner's values are there: no zeroed output), counted into owner c's out[q]. The counts are
//                     released once the sends are complete, when the CTA's next tile counts into another counter
//                     or in store_tail (the sends travel during the next tiles' main loops)
//
// Memory ordering (PTX memory model):
//   signal (every case): all consumer threads' stores/reds of the tile, then bar.sync of the consumer
//     threads (orders them before thread 0's next instruction in causality order), then thread 0's
//     red.release.sys: cumulative release at system scope over all of them. The observer is either a
//     thread that acquires (the wait below: relaxed poll + fence.acq_rel.sys) or a stream wait
//     (cuStreamWaitValue32 on the owner GPU, followed by work on that stream). Direct modes: the tiles of this
//     rank's own chunk signal nothing — the owner's final stream wait follows its own GEMM in stream order, and
//     kernel completion makes its adds visible — so only other ranks' tiles count (map.cpp); a release per own
//     tile cost thread 0 a MEMBAR + ERRBAR wait (Nsight Compute on one H200, 1024x4096x1024: 7-10% of the
//     kernel's warp-stall samples, at gpu scope as at system scope).
//   wait: thread 0 polls with ld.relaxed.sys, on success fence.acq_rel.sys (acquire), then bar.sync:
//     every consumer thread's subsequent loads of the landing region happen after the acquire. Landing
//     loads use ld.global.cg (L2; no stale L1 line can exist across the acquire anyway). The region
//     was written either by the previous hop's remote stores released per tile (stage 1), or by a
//     copy engine followed by cuStreamWriteValue32 without CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER,
//     whose documented fence orders the copy's writes before the counter write (stages >= 2).
//   direct-tma: tma_panels.cuh's contract — writers fence.proxy.async.shared::cta, then the warpgroup's barrier,
//     then its issuing thread's stores or reduce-adds, one bulk group per panel; before a counter is released, each
//     issuing thread waits for its groups' completion (wait_group 0: the writes are performed at the owner) and
//     executes fence.proxy.async.global, the consumer threads meet at a barrier, and thread 0 adds the run's tile
//     count with a release (cumulative) at system scope. A panel buffer is rewritten only after the group that read
//     it has finished reading. The wait for an owner's stored[q]: thread 0 polls it over NVLink and acquires
//     (fence.acq_rel.sys), bar.sync, then each issuing thread's fence.proxy.async.global orders its reduce-adds
//     (async proxy) after the acquire. out[q] is read only by the owner's final stream wait, after its own kernel;
//     stored[q] only by the other ranks' adds of region q, which run a segment after their own (t3::Interleave) —
//     so a release per run of tiles instead of per tile costs at most one main loop of delay; a run is released
//     before its CTA waits for anything (no count is held across a wait).
//   Waits are bounded (timeout_ns): on timeout the first waiter records WaitError, every later wait
//     of the launch returns at once, the tile is written with whatever is there, and the host's
//     check_error() throws. No wait can outlive the timeout.
#pragma once

#include <cuda_bf16.h>

#include <type_traits>

#include "cute/tensor.hpp"
#include "cutlass/arch/barrier.h"
#include "cutlass/cutlass.h"
#include "cutlass/pipeline/pipeline.hpp"
#include "gemm_t3.hpp"
#include "../overlap/staged_store.cuh"
#include "../overlap/tma_panels.cuh"
#include "cute/arch/copy_sm90_tma.hpp"

namespace braid::t3::detail {

__device__ __forceinline__ void red_release_sys(uint32_t* p, uint32_t v) {
  asm volatile("red.release.sys.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// Eight bf16 added at once (NVLink atomic when p is a peer address; performed at the owner's L2).
__device__ __forceinline__ void red_add_bf16x8_sys(void* p, uint4 v) {
  asm volatile("red.relaxed.sys.global.add.noftz.v4.bf16x2 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y),
               "r"(v.z), "r"(v.w)
               : "memory");
}
__device__ __forceinline__ uint32_t ld_relaxed_sys(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ uint64_t globaltimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Bounded acquire wait for counter >= expected (one thread). With p.poll_ns != 0 (default 2000) it backs off: a sleep
// after every poll, 64 ns at first, doubled after each until p.poll_ns — a short wait is seen within ~100 ns, a long
// one is polled every ~2 us (back-to-back polls by a whole grid waiting on one long copy slowed that copy 4-5x, and
// a fixed 200-ns sleep left 8192x8192x2048 at 0.85x of sequential; docs/t3.md "Thirty-second session"). With
// p.poll_ns == 0 the old loop: back-to-back polls with a 128-ns sleep every 256.
// c: the counter (this rank's, or for direct-tma the owner's over NVLink); index: its index in that array (reported).
__device__ __forceinline__ void wait_counter(const EpiParams& p, const uint32_t* c, int index, uint32_t expected) {
  uint32_t seen = ld_relaxed_sys(c);
  if (seen < expected) {
    const uint64_t start = globaltimer();
    uint32_t sleep_ns = 64u;
    for (uint32_t it = 1;; ++it) {
      seen = ld_relaxed_sys(c);
      if (seen >= expected) break;
      if (p.poll_ns != 0u) {
        __nanosleep(sleep_ns);
        sleep_ns = sleep_ns * 2u < p.poll_ns ? sleep_ns * 2u : p.poll_ns;
      }
      // Every 256 polls (~0.5 ms once backed off): the error word lives in mapped host memory, and reading it on
      // every poll from every waiting CTA made ring-dma 10-30x slower (measured, thirty-second session).
      if ((it & 255u) == 0u) {
        if (*reinterpret_cast<volatile uint32_t*>(&p.err->code) != 0u) return;  // someone timed out
        if (globaltimer() - start > p.timeout_ns) {
          if (atomicCAS(&p.err->code, 0u, 1u) == 0u) {
            p.err->counter = uint32_t(index);
            p.err->expected = expected;
            p.err->observed = seen;
            __threadfence_system();
          }
          return;
        }
        if (p.poll_ns == 0u) __nanosleep(128);
      }
    }
  }
  asm volatile("fence.acq_rel.sys;" ::: "memory");
}

// kDirectTma: the direct-tma instantiation (only that path compiled in; the host launches it for kModeDirectTma).
template <int BM, int BN, bool kDirectTma = false>
class T3Epilogue {
 public:
  using ElementC = void;
  using ElementD = cutlass::bfloat16_t;
  using StrideC = cute::Stride<int64_t, cute::Int<1>, int64_t>;
  using StrideD = cute::Stride<int64_t, cute::Int<1>, int64_t>;
  using GmemTiledCopyC = void;
  using GmemTiledCopyD = void;
  using ThreadEpilogueOp = void;

  using LoadPipeline = cutlass::PipelineTransactionAsync<0>;
  using LoadPipelineState = cutlass::PipelineState<0>;
  static constexpr uint32_t TmaTransactionBytes = 0;
  static constexpr bool RequiresTransactionBytes = false;
  using StorePipeline = cutlass::PipelineTmaStore<0>;
  using StorePipelineState = cutlass::PipelineState<0>;

  static constexpr int kStageCols = 64;
  struct StageStorage {
    overlap::detail::StageBuffer<BM, kStageCols> stage;
  };
  using Panel = overlap::detail::StageBufferBf16<BM, 64>;  // (BM, 64) bf16 in the 128-byte swizzle (tma_panels.cuh)
  static constexpr int kPanels = 2;                          // written and read in turn
  struct PanelStorage {
    alignas(1024) Panel panels[kPanels];
  };
  using SharedStorage = std::conditional_t<kDirectTma, PanelStorage, StageStorage>;
  static_assert(sizeof(SharedStorage) <= 32 * 1024, "the stage must leave the main loop 4 stages at 128x256x64");
  static_assert(sizeof(Panel) % 1024 == 0, "panels: whole 1024-byte swizzle atoms");
  using TensorStorage = SharedStorage;
  using TensorMapStorage = SharedStorage;
  using PipelineStorage = typename LoadPipeline::SharedStorage;

  using Arguments = EpiParams;
  using Params = EpiParams;

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
    return m % BM == 0 && n % BN == 0 && args.world >= 1 && args.world <= kMaxRanks && args.err != nullptr;
  }

  template <class CtaTileMNK>
  CUTLASS_HOST_DEVICE static constexpr int get_load_pipe_increment(CtaTileMNK) { return 1; }
  template <class CtaTileMNK>
  CUTLASS_HOST_DEVICE static constexpr int get_store_pipe_increment(CtaTileMNK) { return 1; }
  CUTLASS_DEVICE static void prefetch_tma_descriptors(Params const& params) {
    if constexpr (kDirectTma)
      for (int i = 0; i < params.world; ++i) cute::prefetch_tma_descriptor(&params.tma_out[i]);
  }

  // `params` is the kernel's own (parameter space): the direct-tma path hands TMA the address of a tensor map in it.
  CUTLASS_HOST_DEVICE T3Epilogue(Params const& params, TensorStorage& smem)
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
    const Params& p = params_;
    const int gmb = int(get<0>(cta_coord_mnkl)) + p.mb_offset;  // global m-block
    const int nb = int(get<1>(cta_coord_mnkl));
    const int c = gmb / p.chunk_mblocks;
    const int q = (gmb - c * p.chunk_mblocks) / p.region_mblocks;
    if constexpr (kDirectTma) {
      store_direct_tma(accumulators, tiled_mma, thread_idx, c, q, gmb - c * p.chunk_mblocks, nb);
    } else {
      constexpr int kThreads = size(TiledMma{});
      const int W = p.world;
      const int s = (c - p.rank - 1 + 2 * W) % W;
      const uint32_t rt = uint32_t(p.region_mblocks) * uint32_t(p.tiles_n);
      const int64_t off = int64_t(gmb - c * p.chunk_mblocks) * BM * p.n + int64_t(nb) * BN;

      // Route of this tile (see the table at the top).
      enum { kStoreRemote, kAddLocal, kAddFinal, kStoreFinal, kAtomic };
      int op;
      __nv_bfloat16* dst;
      const __nv_bfloat16* src = nullptr;  // landing region to add (ring)
      uint32_t* signal = nullptr;
      int wait_index = -1;
      if (p.mode == kModeDirect) {
        op = kAtomic;
        // Select by unrolled compare: a dynamic index into the parameter arrays would copy them to
        // local memory (stack frame).
        void* o = nullptr;
        uint32_t* k = nullptr;
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < kMaxRanks; ++i)
          if (i == c) o = p.dst_out[i], k = p.dst_counters[i];
        dst = static_cast<__nv_bfloat16*>(o) + off;
        if (c != p.rank) signal = k + q;  // the own chunk's tiles signal nothing (map.cpp)
      } else if (W == 1) {
        op = kStoreFinal;
        dst = static_cast<__nv_bfloat16*>(p.out) + off;
      } else if (s == 0 && p.mode == kModeRingDma) {
        op = kStoreRemote;  // a plain store; here into the local landing slot 0, forwarded by a copy engine
        dst = static_cast<__nv_bfloat16*>(p.landing) + off;
        signal = p.counters + W * p.regions + q;  // done[0][q]
      } else if (s == 0) {
        op = kStoreRemote;
        dst = static_cast<__nv_bfloat16*>(p.next_landing) + 1 * p.chunk_elems + off;
        signal = p.next_counters + 1 * p.regions + q;
      } else {
        wait_index = s * p.regions + q;
        src = static_cast<const __nv_bfloat16*>(p.landing) + int64_t(s) * p.chunk_elems + off;
        if (s < W - 1) {
          op = kAddLocal;
          dst = static_cast<__nv_bfloat16*>(p.landing) + int64_t(s) * p.chunk_elems + off;
          signal = p.counters + W * p.regions + s * p.regions + q;
        } else {
          op = kAddFinal;
          dst = static_cast<__nv_bfloat16*>(p.out) + off;
        }
      }

      if (wait_index >= 0) {
        if (thread_idx == 0) wait_counter(p, p.counters + wait_index, wait_index, rt);
        cutlass::arch::NamedBarrier::sync(kThreads, cutlass::arch::ReservedNamedBarriers::EpilogueBarrier);
      }

      Tensor cD = make_identity_tensor(make_shape(Int<BM>{}, Int<BN>{}));
      auto thr_mma = tiled_mma.get_thread_slice(thread_idx);
      Tensor tCcD = thr_mma.partition_C(cD);
      static_assert(decltype(size(tCcD))::value == decltype(size(accumulators))::value, "fragment mismatch");
      const int64_t ld = p.n;
      overlap::detail::staged_store<BM, BN, kThreads>(
          smem_->stage, accumulators, tCcD, thread_idx, [&](int r, int col, const overlap::detail::Floats8& f8) {
            const float(&f)[8] = f8.f;
            const int64_t e = int64_t(r) * ld + col;  // 16-byte aligned: n % 256 == 0, col % 8 == 0
            float x[8] = {f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7]};
            if (src != nullptr) {
              float g[8];
              overlap::detail::unpack_bf16x8(__ldcg(reinterpret_cast<const uint4*>(src + e)), g);
              CUTLASS_PRAGMA_UNROLL
              for (int i = 0; i < 8; ++i) x[i] += g[i];
            }
            const uint4 v = overlap::detail::pack_bf16x8(x);
            if (op == kAtomic) red_add_bf16x8_sys(dst + e, v);
            else *reinterpret_cast<uint4*>(dst + e) = v;
          });

      if (signal != nullptr) {
        cutlass::arch::NamedBarrier::sync(kThreads, cutlass::arch::ReservedNamedBarriers::EpilogueBarrier);
        if (thread_idx == 0) red_release_sys(signal, 1u);
      }
    }
    return cute::make_tuple(load_state, store_state);
  }

  template <class... Ts>
  CUTLASS_DEVICE auto store_tail(LoadPipeline, LoadPipelineState load_state, StorePipeline,
                                 StorePipelineState store_state, Ts&&...) {
    if constexpr (kDirectTma) finish_pending();  // the last run's adds, then its owner's counter
    return cute::make_tuple(load_state, store_state);
  }

 private:
  static constexpr int kWgRows = 64;  // rows of the tile one consumer warpgroup holds (one 64xBN GMMA atom)

  // The pending run of tiles (if any): their reduce-adds complete (contract above), then thread 0 adds their count to
  // the owner's counter. Every consumer thread calls it (uniform: pending_ is the same in every thread).
  CUTLASS_DEVICE void finish_pending() {
    if (pending_ == nullptr) return;
    if (tid_ % 128 == 0) {
      overlap::detail::bulk_wait_all();
      overlap::detail::fence_proxy_async_global();
    }
    cutlass::arch::NamedBarrier::sync(threads_, cutlass::arch::ReservedNamedBarriers::EpilogueBarrier);
    if (tid_ == 0) red_release_sys(pending_, pending_tiles_);
    pending_ = nullptr;
    pending_tiles_ = 0;
  }

  // direct-tma: tile (mb_in_chunk, nb) of owner c's chunk, region q. The own chunk's tiles (computed first) are
  // stored, and counted into this rank's stored[q]; another owner's are added onto its region once it is stored (one
  // bounded wait per (owner, region) and CTA), and counted into the owner's out[q]. Column order
  // (p.stored_by_column): stored[] per (segment, tile column) instead of per region, so a tile of another owner waits
  // only for that owner's own tiles of its segment and column (seg_mblocks of them); out[q] stays per region. Panel j (columns 64j..64j+63)
  // through buffer j % kPanels; warpgroup w = tid / 128 writes and sends rows 64w..64w+63 (its own named barrier,
  // user id w).
  template <class Acc, class TiledMma>
  CUTLASS_DEVICE void store_direct_tma(Acc const& acc, TiledMma tiled_mma, int tid, int c, int q, int mb_in_chunk,
                                       int nb) {
    using namespace cute;
    constexpr int kThreads = size(TiledMma{});
    static_assert(BM == 2 * kWgRows && kThreads == 256, "direct-tma: two consumer warpgroups of 64 rows");
    static_assert((BN / 64) % kPanels == 0, "the panels alternate across tiles");
    const Params& p = params_;
    threads_ = kThreads;
    tid_ = tid;
    const bool own = c == p.rank;
    uint32_t* const counters = signal_of(c);  // owner c's counter array (this rank's own when own)
    // The owner's stored[] entry this tile belongs to: its region q, or (column order) its segment and column.
    const int sq = p.stored_by_column ? mb_in_chunk / p.seg_mblocks * p.tiles_n + nb : q;
    const uint32_t stored_expect =
        p.stored_by_column ? uint32_t(p.seg_mblocks) : uint32_t(p.region_mblocks) * uint32_t(p.tiles_n);
    // What this tile counts into: own -> stored[sq] here (the peers poll it), else the owner's out[q]; one rank: none.
    uint32_t* const signal = p.world == 1 ? nullptr : own ? counters + p.regions + sq : counters + q;
    if (signal != nullptr && signal != pending_) finish_pending();  // a new run: the previous one's sends are done
    if (!own && counters + p.regions + sq != waited_) {  // uniform across the CTA
      if (tid == 0) wait_counter(p, counters + p.regions + sq, p.regions + sq, stored_expect);
      cutlass::arch::NamedBarrier::sync(kThreads, cutlass::arch::ReservedNamedBarriers::EpilogueBarrier);
      // thread 0's acquire, then (barrier) each issuer orders its later async-proxy adds after it
      if (tid % 128 == 0) overlap::detail::fence_proxy_async_global();
      waited_ = counters + p.regions + sq;
    }
    Tensor cD = make_identity_tensor(make_shape(Int<BM>{}, Int<BN>{}));  // (BM,BN)
    Tensor tCcD = tiled_mma.get_thread_slice(tid).partition_C(cD);       // (MMA,MMA_M,MMA_N)
    overlap::detail::check_panel_fragment<BN>(acc);
    const int lane = tid & 31, wg = tid / 128;
    const bool issuer = tid % 128 == 0;
    const int arow = overlap::detail::panel_address_row(int(get<0>(tCcD(0))), lane);
    const CUtensorMap* map = kparams_->tma_out + c;  // owner c's output, (Mc, n)
    const int row = mb_in_chunk * BM + wg * kWgRows;
    CUTLASS_PRAGMA_UNROLL
    for (int j = 0; j < BN / 64; ++j) {
      Panel& panel = smem_->panels[j % kPanels];
      if (issuer) overlap::detail::bulk_wait_read_but1();  // the group that last read this buffer (kPanels == 2)
      cutlass::arch::NamedBarrier::sync(128, uint32_t(wg));
      overlap::detail::write_panel<BN>(reinterpret_cast<char*>(panel.v), acc, arow, lane, j);
      overlap::detail::fence_proxy_async_shared();
      cutlass::arch::NamedBarrier::sync(128, uint32_t(wg));
      if (issuer) {
        if (own) SM90_TMA_STORE_2D::copy(map, panel.v + wg * kWgRows * 64, nb * BN + j * 64, row);
        else SM90_TMA_REDUCE_ADD_2D::copy(map, panel.v + wg * kWgRows * 64, nb * BN + j * 64, row);
        overlap::detail::bulk_commit();
      }
    }
    if (signal != nullptr) {  // counted now, released by finish_pending()
      pending_ = signal;
      ++pending_tiles_;
      // Column order: the other owners' tiles of this column run in the same wave and wait for this column's own
      // tiles, so an own tile announces itself now (its local stores complete first) instead of after the next
      // tile's main loop.
      if (p.stored_by_column && own) finish_pending();
    }
  }

  // Owner c's counter array, selected by unrolled compare (a dynamic index into the parameter array would copy it to
  // local memory).
  CUTLASS_DEVICE uint32_t* signal_of(int c) const {
    uint32_t* k = nullptr;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < kMaxRanks; ++i)
      if (i == c) k = params_.dst_counters[i];
    return k;
  }

  Params params_;
  Params const* kparams_;  // the kernel's parameters (tensor maps' addresses for TMA)
  SharedStorage* smem_;
  uint32_t* pending_ = nullptr;  // direct-tma: the owner counter of the run of tiles whose adds may be in flight
  uint32_t pending_tiles_ = 0;   // tiles in that run
  const uint32_t* waited_ = nullptr;  // direct-tma: the owner's stored[q] this CTA last waited for (it stays complete)
  int threads_ = 0, tid_ = 0;
};

}  // namespace braid::t3::detail
