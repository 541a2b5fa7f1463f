// Choice between cuDNN fused attention and braid's own kernels (see attention.hpp).
#include "attention.hpp"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "braid/env.hpp"
#include "braid/errors.hpp"

#if BRAID_HAVE_CUDNN
#include "attention_cudnn.hpp"
#endif

namespace braid::model::attn {

bool cudnn_built() {
#if BRAID_HAVE_CUDNN
  return true;
#else
  return false;
#endif
}

Impl impl_from_env() {
  const std::string v = env::choice("BRAID_ATTN", {"auto", "cudnn", "naive"}).value_or("auto");
  return v == "naive" ? Impl::kNaive : v == "cudnn" ? Impl::kCudnn : Impl::kAuto;
}

const char* impl_name(Impl i) {
  switch (i) {
    case Impl::kAuto: return "auto";
    case Impl::kNaive: return "naive";
    case Impl::kCudnn: return "cudnn";
  }
  return "?";
}

#if BRAID_HAVE_CUDNN
namespace {
bool deterministic_from_env() {
  return env::flag("BRAID_ATTN_DETERMINISTIC").value_or(true);
}
std::string shape_text(const kernels::AttnShape& a) {
  return "B " + std::to_string(a.B) + ", S " + std::to_string(a.S) + ", heads " + std::to_string(a.hq) + "/" +
         std::to_string(a.hkv) + ", d " + std::to_string(a.d);
}
}  // namespace
#endif

Attention::Attention(const kernels::AttnShape& a, Impl want) : a_(a) {
  BRAID_REQUIRE(a.hkv > 0 && a.hq % a.hkv == 0, "attention: hq must be a multiple of hkv");
  if (want == Impl::kNaive) return;
#if BRAID_HAVE_CUDNN
  try {
    plans_ = cudnn::plans_for(a, deterministic_from_env());
  } catch (const Error& e) {
    if (want == Impl::kCudnn) throw;
    note_ = e.what();
    std::fprintf(stderr, "braid: cuDNN attention unavailable for %s, using braid's kernels: %s\n",
                 shape_text(a).c_str(), e.what());
    return;
  }
  const size_t wf = cudnn::workspace_bytes(*plans_, false), wb = cudnn::workspace_bytes(*plans_, true);
  if (wf) BRAID_CUDA_CHECK(cudaMalloc(&ws_fwd_, wf));
  if (wb) BRAID_CUDA_CHECK(cudaMalloc(&ws_bwd_, wb));
  impl_ = Impl::kCudnn;
#else
  if (want == Impl::kCudnn)
    throw UnavailableError("BRAID_ATTN=cudnn, but braid was built without cuDNN (see the CMake output)", __FILE__,
                           __LINE__);
  note_ = "built without cuDNN";
#endif
}

Attention::~Attention() {
  if (ws_fwd_) cudaFree(ws_fwd_);
  if (ws_bwd_) cudaFree(ws_bwd_);
}

std::string Attention::describe() const {
  if (impl_ == Impl::kNaive) return note_.empty() ? "naive" : "naive (" + note_ + ")";
#if BRAID_HAVE_CUDNN
  return cudnn::deterministic(*plans_) ? "cudnn" : "cudnn (non-deterministic backward)";
#else
  return "cudnn";
#endif
}

void Attention::forward(const kernels::bf16* qkv, kernels::bf16* o, float* lse, cudaStream_t s) {
#if BRAID_HAVE_CUDNN
  if (impl_ == Impl::kCudnn) return cudnn::forward(*plans_, ws_fwd_, qkv, o, lse, a_, s);
#endif
  kernels::attention_fwd(qkv, o, lse, a_, s);
}

void Attention::backward(const kernels::bf16* qkv, const kernels::bf16* o, const kernels::bf16* dout,
                         const float* lse, float* delta, kernels::bf16* dqkv, cudaStream_t s) {
#if BRAID_HAVE_CUDNN
  if (impl_ == Impl::kCudnn) return cudnn::backward(*plans_, ws_bwd_, qkv, o, dout, lse, dqkv, a_, s);
#endif
  kernels::attention_bwd(qkv, o, dout, lse, delta, dqkv, a_, s);
}

}  // namespace braid::model::attn
