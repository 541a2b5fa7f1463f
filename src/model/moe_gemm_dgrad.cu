// src/model/moe_gemm_dgrad.cu — GroupedGemm::dgrad (moe_gemm.hpp): D[off_g + i, :] = A[off_g + i, :] · W_g^T with
// W_g [N, K] row-major (B column-major in CUTLASS terms). The one CUTLASS instantiation here is moe_gemm_impl.cuh's
// GroupedKernel<kDgrad>.
#include <cuda_runtime.h>

#include "braid/errors.hpp"
#include "moe_gemm_impl.cuh"

namespace braid::model::detail {

namespace moe {
size_t prepare_dgrad(int device, int sm_count) { return prepare<DgradKernel>(device, sm_count); }
}  // namespace moe

void GroupedGemm::dgrad(cudaStream_t s, const int* rows, int groups, int64_t N, int64_t K, const bf16* A,
                        const bf16* W, bf16* D) {
  const moe::Call c{rows, groups, 0, N, K, A, W, D, 0.f};
  moe::check_call(*state_, moe::Kind::kDgrad, c);
  if (groups == 0) return;
  moe::run<moe::DgradKernel>(*state_, c, s);
}

}  // namespace braid::model::detail
