// src/model/moe_gemm_fprop.cu — GroupedGemm (moe_gemm.hpp): the object (device arrays, workspace, SM cap) and the
// forward kind, D[off_g + i, :] = A[off_g + i, :] · W_g (W_g [K, N] row-major). The one CUTLASS instantiation here is
// moe_gemm_impl.cuh's GroupedKernel<kFprop>; dgrad and wgrad have their own translation units.
#include <cuda_runtime.h>

#include <algorithm>
#include <memory>
#include <string>

#include "braid/env.hpp"
#include "braid/errors.hpp"
#include "moe_gemm_impl.cuh"

namespace braid::model::detail {

namespace moe {
size_t prepare_fprop(int device, int sm_count) { return prepare<FpropKernel>(device, sm_count); }
}  // namespace moe

GroupedGemm::GroupedGemm(int max_groups) : state_(std::make_unique<State>()) {
  BRAID_REQUIRE(max_groups >= 1, "GroupedGemm: max_groups must be >= 1");
  State& st = *state_;
  st.max_groups = max_groups;
  BRAID_CUDA_CHECK(cudaGetDevice(&st.device));
  BRAID_CUDA_CHECK(cudaDeviceGetAttribute(&st.device_sms, cudaDevAttrMultiProcessorCount, st.device));
  st.sm_count = st.device_sms;
  // The group scheduler's tile order: an experiment's knobs (CUTLASS's defaults: swizzle 1, raster along M).
  st.swizzle = int(env::integer("BRAID_MOE_GEMM_SWIZZLE", 1, 8).value_or(1));
  if (st.swizzle != 1 && st.swizzle != 2 && st.swizzle != 4 && st.swizzle != 8)
    throw UsageError("BRAID_MOE_GEMM_SWIZZLE: 1, 2, 4 or 8", __FILE__, __LINE__);
  st.along_n = env::choice("BRAID_MOE_GEMM_RASTER", {"m", "n"}).value_or("m") == "n";
  // Every kind's kernel is loaded here, outside any capture; the workspace serves the largest at every SM.
  st.workspace_bytes = std::max({moe::prepare_fprop(st.device, st.device_sms),
                                 moe::prepare_dgrad(st.device, st.device_sms),
                                 moe::prepare_wgrad(st.device, st.device_sms)});
  st.array_bytes = moe::array_bytes(max_groups);
  BRAID_CUDA_CHECK(cudaMalloc(&st.args, size_t(moe::kArrays) * st.array_bytes));
  if (st.workspace_bytes > 0) BRAID_CUDA_CHECK(cudaMalloc(&st.workspace, st.workspace_bytes));
}

GroupedGemm::~GroupedGemm() = default;

void GroupedGemm::set_sm_count(int sm_count) {
  BRAID_REQUIRE(sm_count >= 0, "GroupedGemm::set_sm_count: sm_count must be >= 0 (0: every SM)");
  state_->sm_count = sm_count == 0 ? state_->device_sms : std::min(sm_count, state_->device_sms);
}

void GroupedGemm::fprop(cudaStream_t s, const int* rows, int groups, int64_t N, int64_t K, const bf16* A,
                        const bf16* W, bf16* D) {
  const moe::Call c{rows, groups, 0, N, K, A, W, D, 0.f};
  moe::check_call(*state_, moe::Kind::kFprop, c);
  if (groups == 0) return;
  moe::run<moe::FpropKernel>(*state_, c, s);
}

}  // namespace braid::model::detail
