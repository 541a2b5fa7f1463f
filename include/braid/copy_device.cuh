// braid/copy_device.cuh — the grid-stride vector copy shared by the kernels that move bytes between GPUs with SM
// loads and stores (bench p2p's SM push/pull, the model's peer comm).
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

}  // namespace braid::dev
