// src/model/moe_layout.hpp — the MoE layer's row layouts, shared by the host (Layer::Impl::set_layout), the
// capacity kernel (kernels.cu) and the CPU tests. No CUDA needed.
//
// Receive layout (what the dispatch all-to-all delivers): [source rank][local expert][rows].
// Sorted layout (what the expert GEMMs read): [local expert][source rank][rows].
// sort_map[sorted row] = its receive row; unsort_map is the inverse.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define BRAID_MOE_HD __host__ __device__ __forceinline__
#else
#define BRAID_MOE_HD inline
#endif

namespace braid::model::detail {

// Capacity factor: every (source, local expert) block holds cap rows; the receive row of sorted row i.
BRAID_MOE_HD int64_t capacity_receive_row(int64_t i, int tp, int El, int64_t cap) {
  const int64_t e = i / (int64_t(tp) * cap), src = (i / cap) % tp, j = i % cap;
  return (src * El + e) * cap + j;
}

// From the received counts rcounts[src * El + e] (fp32, exact below 2^24): smap / umap as above and the rows per
// local expert; returns the rows received.
inline int64_t moe_row_maps(int tp, int El, const float* rcounts, int* smap, int* umap, int64_t* expert_rows) {
  auto rcnt = [&](int src, int e) { return int64_t(rcounts[src * El + e]); };
  int64_t sorted = 0;
  for (int e = 0; e < El; ++e) {
    expert_rows[e] = 0;
    int64_t src_base = 0;  // receive row where this source's block starts
    for (int src = 0; src < tp; ++src) {
      int64_t roff = src_base;
      for (int e2 = 0; e2 < e; ++e2) roff += rcnt(src, e2);
      for (int64_t j = 0; j < rcnt(src, e); ++j) {
        smap[sorted + j] = int(roff + j);
        umap[roff + j] = int(sorted + j);
      }
      sorted += rcnt(src, e);
      expert_rows[e] += rcnt(src, e);
      for (int e2 = 0; e2 < El; ++e2) src_base += rcnt(src, e2);
    }
  }
  return sorted;
}

}  // namespace braid::model::detail
