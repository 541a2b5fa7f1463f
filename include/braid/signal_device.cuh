// braid/signal_device.cuh — device signalling primitives over symmetric peer memory.
//
// Memory-ordering contracts (PTX memory model, scope .sys because the flag lives in another GPU's
// memory mapped over NVLink/PCIe):
//   store_release(p, v)   : every write this thread made (or observed, incl. through a preceding
//                           __syncthreads in its block) is visible to a thread that acquires v.
//   load_acquire(p)       : writes released before the value read are visible to this thread's later
//                           reads.
//   load_relaxed(p)       : no ordering; for polling only, followed by fence_acquire().
//   add_release(p, v)     : atomic add with release semantics (counters with several producers).
//   wait_geq(...)         : spins with relaxed loads, then an acquire fence; bounded by view.timeout_ns.
//                           On timeout it records a DeviceError (first one wins), returns false, and
//                           the caller must leave the kernel. It never spins forever.
//   barrier_block(...)    : all ranks' blocks with the same slot meet; every write made by any thread
//                           of this block before the call is visible to all peers' blocks after it.
//                           SignalView::barrier_mode picks the instructions: release/acquire only
//                           (default; the bar.sync before the release store makes the block's writes
//                           part of what it releases, the bar.sync after the acquire poll hands the
//                           acquire to every thread) or with two fence.acq_rel.sys added (BRAID_BARRIER=fence).
// Epochs, not resets: a slot's flag only grows; wait for (int32)(flag - epoch) >= 0.
#pragma once

#include <cuda_runtime.h>

#include "braid/signal.hpp"

namespace braid::dev {

// Programmatic dependent launch (PDL; sm_90 and later, compiled out before). Both are no-ops in a kernel
// launched without cudaLaunchAttributeProgrammaticStreamSerialization.
//   grid_dependency_wait() : griddepcontrol.wait — returns once every grid this one depends on (the kernel
//                            before it in the stream) has completed and its memory writes are visible to this
//                            grid. Call it before reading anything earlier stream work wrote (the input, a
//                            launch counter) and before writing anything it may still read (a workspace).
//   launch_dependents()    : griddepcontrol.launch_dependents — the next kernel in the stream, if launched with
//                            PDL, may start once every block of this grid has called it or exited; it still
//                            waits for this grid's completion in its own grid_dependency_wait(). Only its launch
//                            and prologue overlap this grid's tail; no ordering is given up.
__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ uint64_t globaltimer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ void store_release(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void store_relaxed(uint32_t* p, uint32_t v) {
  asm volatile("st.relaxed.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ uint32_t load_acquire(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ uint32_t load_relaxed(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void fence_acquire() { asm volatile("fence.acq_rel.sys;" ::: "memory"); }
__device__ __forceinline__ void fence_release() { asm volatile("fence.acq_rel.sys;" ::: "memory"); }
__device__ __forceinline__ void add_release(uint32_t* p, uint32_t v) {
  asm volatile("red.release.sys.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ bool epoch_reached(uint32_t value, uint32_t epoch) {
  return static_cast<int32_t>(value - epoch) >= 0;
}

__device__ __forceinline__ void record_timeout(const SignalView& v, uint32_t op, uint32_t flag, int peer,
                                               uint32_t expected, uint32_t observed) {
  if (atomicCAS(&v.err->code, 0u, 1u) == 0u) {
    v.err->op = op;
    v.err->flag = flag;
    v.err->peer = peer;
    v.err->expected = expected;
    v.err->observed = observed;
    v.err->rank = v.rank;
    v.err->block = blockIdx.x;
    __threadfence_system();
  }
}

// A device-side bound exceeded (DeviceError code 2): value against bound, recorded once per rank.
__device__ __forceinline__ void record_bound(DeviceError* err, int rank, uint32_t op, uint64_t bound, uint64_t value) {
  if (atomicCAS(&err->code, 0u, 2u) == 0u) {
    err->op = op;
    err->flag = 0;
    err->peer = -1;
    err->expected = uint32_t(bound > 0xffffffffull ? 0xffffffffull : bound);
    err->observed = uint32_t(value > 0xffffffffull ? 0xffffffffull : value);
    err->rank = rank;
    err->block = blockIdx.x;
    __threadfence_system();
  }
}

// True once an error has been recorded by any thread of this rank (lets other waiters bail out).
__device__ __forceinline__ bool error_raised(const SignalView& v) {
  return *reinterpret_cast<volatile uint32_t*>(&v.err->code) != 0u;
}

// Wait until *flag >= epoch (wrap-safe). Bounded: returns false after view.timeout_ns or as soon as
// another waiter of this rank has timed out. Acquire on success: by default relaxed polls, then one
// fence.acq_rel.sys; kAcquireLoads polls with ld.acquire.sys instead (no fence; the load that sees the
// epoch is the acquire).
template <bool kAcquireLoads = false>
__device__ __forceinline__ bool wait_geq(const SignalView& v, const uint32_t* flag, uint32_t epoch, uint32_t op,
                                         uint32_t flag_index, int peer) {
  auto poll = [flag] { return kAcquireLoads ? load_acquire(flag) : load_relaxed(flag); };
  uint32_t seen = poll();
  if (epoch_reached(seen, epoch)) {
    if (!kAcquireLoads) fence_acquire();
    return true;
  }
  const uint64_t start = globaltimer_ns();
  for (uint32_t it = 1;; ++it) {
    seen = poll();
    if (epoch_reached(seen, epoch)) {
      if (!kAcquireLoads) fence_acquire();
      return true;
    }
    if ((it & 255u) == 0u) {
      if (globaltimer_ns() - start > v.timeout_ns) {
        record_timeout(v, op, flag_index, peer, epoch, seen);
        return false;
      }
      if (error_raised(v)) return false;
    }
  }
}

// The flag that peer `from` writes for slot `slot` in rank `owner`'s array.
__device__ __forceinline__ uint32_t* flag_at(uint32_t* base, int slot, int from) {
  return base + static_cast<size_t>(slot) * kMaxPeers + from;
}

// Cross-rank barrier for one block per rank, all using the same slot. Call from every thread of the
// block. Returns false (for every thread) if any wait timed out. Cost: one remote store per peer and
// one NVLink round trip.
__device__ __forceinline__ bool barrier_block(const SignalView& v, int slot, uint32_t op) {
  __shared__ uint32_t s_epoch;
  __shared__ int s_ok;
  __syncthreads();  // all of this block's prior writes are ordered before thread 0's release below
  if (threadIdx.x == 0) {
    s_epoch = ++v.epochs[slot];
    s_ok = 1;
  }
  __syncthreads();
  const uint32_t epoch = s_epoch;
  if (threadIdx.x < static_cast<unsigned>(v.world)) {
    const int peer = threadIdx.x;
    if (v.barrier_mode == 0) {  // "fence" (SignalView::barrier_mode)
      fence_release();
      store_release(flag_at(v.peer_flags[peer], slot, v.rank), epoch);
      if (!wait_geq(v, flag_at(v.local_flags, slot, peer), epoch, op, slot, peer)) s_ok = 0;
    } else {  // "release": the release store and acquire polls carry the ordering
      store_release(flag_at(v.peer_flags[peer], slot, v.rank), epoch);
      if (!wait_geq<true>(v, flag_at(v.local_flags, slot, peer), epoch, op, slot, peer)) s_ok = 0;
    }
  }
  __syncthreads();
  return s_ok != 0;
}

// ---------------------------------------------------------------------------------------------------
// Warp-specialized signalling (used by the pipelined quantized all-reduce): one warp of a block does all
// flag traffic while the other warps compute, and hands data over through named CTA barriers.

// Named CTA barriers `bar.sync id, count` / `bar.arrive id, count` (PTX barrier{.cta}.aligned), ids 1..15
// (id 0 is __syncthreads). `count` is the number of threads taking part (a multiple of 32, counted per
// warp); every thread of a calling warp must execute the same call (reconverge with __syncwarp first).
// Ordering contract (PTX memory model, "barrier" synchronizes-with): a bar.arrive or bar.sync on id b
// synchronizes with every bar.sync on b that completes the same barrier phase, so every memory
// operation a thread made before its arrive/sync happens-before every operation a syncing thread makes
// after the sync returns (CTA scope; for peers, follow it with warp_signal_peers, below). arrive never
// waits. A producer must not arrive twice on one id before the consumer's sync of the first phase has
// completed (the phases would merge): protocols that run ahead alternate ids, or have a back edge.
__device__ __forceinline__ void named_sync(int id, int count) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int count) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(count) : "memory");
}

// Called by all 32 lanes of one warp. Lane p < world, p != rank: fence.acq_rel.sys, then st.release.sys of
// `value` into peer p's flag [slot][rank]. Contract: every write made before the call by this warp, or
// by any thread whose barrier arrive/sync this warp's preceding named_sync (or __syncthreads)
// synchronized with, is visible to a peer thread that reads a flag value >= `value` and then acquires
// (warp_wait_peers, wait_geq). Values written to one slot must grow (epochs); the flag never resets.
__device__ __forceinline__ void warp_signal_peers(const SignalView& v, int slot, uint32_t value) {
  __syncwarp();
  const int lane = static_cast<int>(threadIdx.x & 31u);
  if (lane < v.world && lane != v.rank) {
    fence_release();
    store_release(flag_at(v.peer_flags[lane], slot, v.rank), value);
  }
  __syncwarp();
}

// Called by all 32 lanes of one warp. Lane p < world, p != rank waits until this rank's flag [slot][p]
// reaches `value` (wrap-safe), bounded by timeout_ns (wait_geq: relaxed polling, then fence.acq_rel.sys).
// Returns the AND over the lanes (warp-uniform). Contract: on true, the peers' writes released with
// values >= `value` are visible to this warp; to hand them to other warps of the block, follow with a
// named_arrive (or named_sync) that those warps named_sync on. On false a timeout (or another waiter's)
// is recorded in the error word: the caller must not wait again in this launch, but must keep its
// barrier protocol going so that no warp of the block waits forever.
__device__ __forceinline__ bool warp_wait_peers(const SignalView& v, int slot, uint32_t value, uint32_t op) {
  __syncwarp();
  const int lane = static_cast<int>(threadIdx.x & 31u);
  bool ok = true;
  if (lane < v.world && lane != v.rank) ok = wait_geq(v, flag_at(v.local_flags, slot, lane), value, op, slot, lane);
  return __all_sync(0xffffffffu, ok);
}

}  // namespace braid::dev
