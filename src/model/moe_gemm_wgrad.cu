// src/model/moe_gemm_wgrad.cu — GroupedGemm::wgrad (moe_gemm.hpp): G_g [M, N] = beta·G_g + A_g^T · B_g over the
// groups' rows (K = rows_g), G_g in place as the epilogue's C and D. The one CUTLASS instantiation here is
// moe_gemm_impl.cuh's GroupedKernel<kWgrad>. A group without rows gets M = 0 in the device problem shapes (no tiles:
// the main loop would leave its accumulators uninitialised at K = 0); scale_empty_groups gives it beta·G_g instead.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "braid/errors.hpp"
#include "moe_gemm_impl.cuh"

namespace braid::model::detail {
namespace moe {

size_t prepare_wgrad(int device, int sm_count) { return prepare<WgradKernel>(device, sm_count); }

namespace {

constexpr int kVec = 8;  // bf16 per 16-byte access
constexpr int kMaxGridY = 65535;

// G [groups, M, N] (mn = M·N, a multiple of 64 since M and N are multiples of 8; G 16-byte aligned): every group
// g with rows[g] <= 0 gets G_g = beta·G_g, exact zeros at beta = 0 whatever G_g held (NaN included); the blocks of
// the other groups return at once. grid (x: blocks per group, y: groups, strided past 65535).
__global__ void __launch_bounds__(config::kScaleThreads)
    scale_empty_groups(const int* rows, int groups, bf16* G, int64_t mn, float beta) {
  const int64_t v = mn / kVec;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int g = blockIdx.y; g < groups; g += gridDim.y) {
    if (rows[g] > 0) continue;
    uint4* p = reinterpret_cast<uint4*>(G + int64_t(g) * mn);  // [mn / 8]
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < v; i += stride) {
      if (beta == 0.f) {
        p[i] = make_uint4(0u, 0u, 0u, 0u);
        continue;
      }
      uint4 x = p[i];
      __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&x);  // [4]
#pragma unroll
      for (int j = 0; j < kVec / 2; ++j) {
        const float2 f = __bfloat1622float2(h[j]);
        h[j] = __floats2bfloat162_rn(f.x * beta, f.y * beta);
      }
      p[i] = x;
    }
  }
}

}  // namespace
}  // namespace moe

void GroupedGemm::wgrad(cudaStream_t s, const int* rows, int groups, int64_t M, int64_t N, const bf16* A,
                        const bf16* B, bf16* G, float beta) {
  const moe::Call c{rows, groups, M, N, 0, A, B, G, beta};
  moe::check_call(*state_, moe::Kind::kWgrad, c);
  if (groups == 0) return;
  if (beta != 1.f) {  // at beta = 1 an empty group's G_g stays as it is
    const int64_t mn = M * N, vecs = mn / moe::kVec;
    const int bx = int(std::min<int64_t>((vecs + moe::config::kScaleThreads - 1) / moe::config::kScaleThreads,
                                         moe::config::kScaleMaxBlocks));
    const dim3 grid(unsigned(std::max(bx, 1)), unsigned(std::min(groups, moe::kMaxGridY)));
    moe::scale_empty_groups<<<grid, moe::config::kScaleThreads, 0, s>>>(rows, groups, G, mn, beta);
    BRAID_CHECK_LAUNCH();
  }
  moe::run<moe::WgradKernel>(*state_, c, s);
}

}  // namespace braid::model::detail
