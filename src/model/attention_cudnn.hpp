// cuDNN fused attention (attention_cudnn.cpp, compiled only with BRAID_HAVE_CUDNN); used by attention.cpp.
#pragma once

#include <cstddef>
#include <memory>

#include "attention.hpp"

namespace braid::model::attn::cudnn {

using Plans = Attention::Plans;

// Forward + backward graphs for this shape on the current device (cached; built on first request).
// Throws CudnnError when cuDNN cannot run it. deterministic: ask for the deterministic backward; when
// cuDNN has none for the shape the non-deterministic one is taken (see deterministic(Plans)).
std::shared_ptr<const Plans> plans_for(const kernels::AttnShape& a, bool deterministic);
size_t workspace_bytes(const Plans& p, bool backward);
bool deterministic(const Plans& p);

void forward(const Plans& p, void* ws, const kernels::bf16* qkv, kernels::bf16* o, float* lse,
             const kernels::AttnShape& a, cudaStream_t s);
void backward(const Plans& p, void* ws, const kernels::bf16* qkv, const kernels::bf16* o, const kernels::bf16* dout,
              const float* lse, kernels::bf16* dqkv, const kernels::AttnShape& a, cudaStream_t s);

}  // namespace braid::model::attn::cudnn
