// braid/bulk_device.cuh — Hopper bulk copies (TMA, no tensor map) from global into shared memory,
// completed on an mbarrier; sm_90 and later.
//
// Memory-ordering contracts (PTX memory model):
//   mbar_init(bar, n)      : one thread, before any use; then fence_mbar_init() and a __syncthreads, so
//                            every thread and the async proxy (the copy engine of the SM) see the barrier.
//   mbar_expect_bytes(b,n) : the producing thread announces the bytes the current phase's copies will
//                            write (arrive + expect_tx; the barrier's count is 1: this is its only arrival).
//   bulk_load(d, s, n, b)  : an asynchronous copy of n bytes (multiple of 16; d and s 16-byte aligned)
//                            from global s into shared d, counted against barrier b's expected bytes. The
//                            source must not change until the copy completes (stream order for a kernel's
//                            input).
//   mbar_wait(...)         : a thread that sees the phase with parity `parity` complete sees every byte
//                            of the copies counted against it (try_wait has acquire semantics at CTA
//                            scope). Bounded by view.timeout_ns like dev::wait_geq: on timeout it records
//                            a DeviceError and returns false; the caller must leave.
//   Reusing a buffer: every thread's reads of it must precede the next bulk_load into it (a __syncthreads
//   between them, as CUTLASS's pipelines put a barrier between a consumer's release and the next TMA).
// The k-th completed phase of a barrier has parity k & 1; a barrier reused round-robin over S buffers
// completes phase k / S for the k-th copy overall.
#pragma once

#include <cuda_runtime.h>

#include "braid/signal_device.cuh"

namespace braid::dev {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void fence_mbar_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n\tfence.proxy.async.shared::cta;" ::: "memory");
}
__device__ __forceinline__ void mbar_expect_bytes(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void bulk_load(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   smem_u32(dst)),
               "l"(src), "r"(bytes), "r"(smem_u32(bar))
               : "memory");
}
__device__ __forceinline__ bool mbar_try_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\tselp.u32 %0, 1, 0, p;\n\t}"
      : "=r"(done)
      : "r"(smem_u32(bar)), "r"(parity)
      : "memory");
  return done != 0u;
}
// Bounded wait for phase `parity` of `bar`. `tag` names the wait in the DeviceError (its flag field).
__device__ __forceinline__ bool mbar_wait(const SignalView& v, uint64_t* bar, uint32_t parity, uint32_t op,
                                          uint32_t tag) {
  if (mbar_try_wait(bar, parity)) return true;
  const uint64_t start = globaltimer_ns();
  for (uint32_t it = 1;; ++it) {
    if (mbar_try_wait(bar, parity)) return true;
    if ((it & 63u) == 0u) {
      // No early exit when another waiter failed: a local copy completes whatever the peers do, and
      // leaving with copies in flight would let them land in the next block's shared memory.
      if (globaltimer_ns() - start > v.timeout_ns) {
        record_timeout(v, op, tag, v.rank, parity, 0u);
        return false;
      }
    }
  }
}

}  // namespace braid::dev
