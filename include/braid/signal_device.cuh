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
// Epochs, not resets: a slot's flag only grows; wait for (int32)(flag - epoch) >= 0.
#pragma once

#include <cuda_runtime.h>

#include "braid/signal.hpp"

namespace braid::dev {

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

// True once an error has been recorded by any thread of this rank (lets other waiters bail out).
__device__ __forceinline__ bool error_raised(const SignalView& v) {
  return *reinterpret_cast<volatile uint32_t*>(&v.err->code) != 0u;
}

// Wait until *flag >= epoch (wrap-safe). Bounded: returns false after view.timeout_ns or as soon as
// another waiter of this rank has timed out. Acquire on success.
__device__ __forceinline__ bool wait_geq(const SignalView& v, const uint32_t* flag, uint32_t epoch, uint32_t op,
                                         uint32_t flag_index, int peer) {
  uint32_t seen = load_relaxed(flag);
  if (epoch_reached(seen, epoch)) {
    fence_acquire();
    return true;
  }
  const uint64_t start = globaltimer_ns();
  for (uint32_t it = 1;; ++it) {
    seen = load_relaxed(flag);
    if (epoch_reached(seen, epoch)) {
      fence_acquire();
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
    fence_release();
    store_release(flag_at(v.peer_flags[peer], slot, v.rank), epoch);
    if (!wait_geq(v, flag_at(v.local_flags, slot, peer), epoch, op, slot, peer)) s_ok = 0;
  }
  __syncthreads();
  return s_ok != 0;
}

}  // namespace braid::dev
