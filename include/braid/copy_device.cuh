// braid/copy_device.cuh — the grid-stride vector copy shared by the kernels that move bytes between GPUs with SM
// loads and stores (bench p2p's SM push/pull, the model's peer comm), and the TMA unit's bulk copies through shared
// memory (PTX cp.async.bulk: the sm90 epilogues' tile sends, src/overlap/tma_panels.cuh; bench p2p's bulk cases).
#pragma once

#include <cstdint>

namespace braid::dev {

// dst[i] = src[i] for i in [0, n) vectors (V: a 16-byte type, uint4 or int4), the indices of this thread being
// first, first + stride, ... — U loads issued before their U stores (U = 1: one load in flight per thread; a remote
// load's rate is bound by the bytes in flight, so pulls over NVLink want U = 4), the remainder one at a time.
// Plain loads and stores: ordering with other threads is the caller's (kernel boundaries, fences).
template <int U, class V>
__device__ __forceinline__ void copy_vectors(const V* __restrict__ src, V* __restrict__ dst, uint64_t n, uint64_t first,
                                             uint64_t stride) {
  static_assert(U >= 1 && sizeof(V) == 16, "copy_vectors: U >= 1 loads of 16-byte vectors");
  uint64_t i = first;
  for (; i + (U - 1) * stride < n; i += U * stride) {
    V v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) v[u] = src[i + u * stride];
#pragma unroll
    for (int u = 0; u < U; ++u) dst[i + u * stride] = v[u];
  }
  for (; i < n; i += stride) dst[i] = src[i];
}

// Bulk copies (sm_90). Shared memory -> global (a peer's through a peer mapping too), tracked as a bulk async-group
// of the issuing thread: commit, then wait for the group's reads of the source (.read: the stage may be rewritten)
// or for its completion (the writes performed). Global -> shared, completion counted in bytes on an mbarrier.
// Ordering contract (PTX memory model), for every user: a shared-memory source written by generic stores is fenced
// (fence_proxy_async_shared) and handed over by a barrier before the copy reads it; the destination of a completed
// shared -> global group is ordered before the thread's later generic operations by fence_proxy_async_global, and
// before other threads' by a release (system scope where it is a peer's memory).
__device__ __forceinline__ void bulk_copy_s2g(void* gmem, const void* smem, uint32_t bytes) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(gmem), "r"(s), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }
// The reads of every group but the newest N are complete (their sources may be rewritten; groups complete in
// commit order); the writes may be in flight.
template <int N>
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
__device__ __forceinline__ void fence_proxy_async_global() { asm volatile("fence.proxy.async.global;" ::: "memory"); }
// An mbarrier in shared memory: init (one arrival per phase), the thread's arrival announcing `bytes` of
// transactions, a global -> shared copy completing them, and the bounded wait for a phase's parity (false after
// max_cycles: the caller turns it into an error).
__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(static_cast<uint32_t>(__cvta_generic_to_shared(bar))),
               "r"(arrivals)
               : "memory");
}
__device__ __forceinline__ void mbarrier_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
__device__ __forceinline__ void bulk_copy_g2s(void* smem, const void* gmem, uint32_t bytes, uint64_t* bar) {
  const uint32_t b = static_cast<uint32_t>(__cvta_generic_to_shared(bar));
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(b), "r"(bytes) : "memory");
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   static_cast<uint32_t>(__cvta_generic_to_shared(smem))),
               "l"(gmem), "r"(bytes), "r"(b)
               : "memory");
}
__device__ __forceinline__ bool mbarrier_wait_parity(uint64_t* bar, uint32_t parity, long long max_cycles) {
  const uint32_t b = static_cast<uint32_t>(__cvta_generic_to_shared(bar));
  const long long t0 = clock64();
  for (uint32_t done = 0;;) {
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(done)
                 : "r"(b), "r"(parity)
                 : "memory");
    if (done) return true;
    if (clock64() - t0 > max_cycles) return false;
  }
}

}  // namespace braid::dev
