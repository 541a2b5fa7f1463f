// The layer's causal GQA attention behind one interface, two implementations:
//   cudnn : cuDNN's fused flash attention (SDPA forward/backward through the cudnn-frontend graph API,
//           tensor cores), when braid is built with cuDNN (BRAID_HAVE_CUDNN; see CMakeLists.txt);
//   naive : braid's own CUDA-core kernels (kernels.cuh attention_fwd/attention_bwd), the fallback.
// Environment BRAID_ATTN=auto|cudnn|naive picks one (auto, the default: cudnn when built with it and
// cuDNN accepts the shape, else naive). BRAID_ATTN_DETERMINISTIC=0 lets cuDNN use its faster,
// non-deterministic backward (dQ by atomics); the default asks for the deterministic one.
//
// Tensors (as kernels::AttnShape describes them, token t = b·S + s):
//   qkv  [B·S, ld] bf16: q head h at column q_off + h·d, k/v head g at k_off/v_off + g·d (g = h / (hq/hkv))
//   o    [B·S, ldo] bf16, head h at column h·d; dout has o's layout
//   lse  [B, hq, S] fp32: log-sum-exp of the scaled scores, natural log (the two implementations write the
//        same quantity, so either backward takes either forward's lse)
//   dqkv [B·S, ld] bf16: dq, dk, dv at qkv's columns
// cuDNN reads q/k/v in place from the packed qkv through strides (no copies) and writes dq/dk/dv in place.
//
// An Attention object is one layer's attention at one shape: the constructor builds (or finds in a
// process-wide cache keyed by device and shape) the cuDNN graphs and allocates this object's own
// workspaces, so forward()/backward() neither allocate nor synchronise: they can be captured in a CUDA
// graph and run on any stream. Build the object outside stream capture, on the thread that will call it
// first (cuDNN handles are per thread and device and are created on first use).
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <string>

#include "kernels.cuh"

namespace braid::model::attn {

enum class Impl { kAuto, kNaive, kCudnn };

bool cudnn_built();           // braid was compiled with cuDNN fused attention
Impl impl_from_env();         // BRAID_ATTN (unset/empty: kAuto); a bad value throws UsageError
const char* impl_name(Impl);  // "auto", "naive", "cudnn"

class Attention {
 public:
  // kCudnn throws (UnavailableError without cuDNN, CudnnError when cuDNN rejects the shape); kAuto falls
  // back to naive, with one line on stderr saying why, and records the reason in describe().
  explicit Attention(const kernels::AttnShape& a, Impl want = impl_from_env());
  ~Attention();
  Attention(const Attention&) = delete;
  Attention& operator=(const Attention&) = delete;

  Impl impl() const { return impl_; }  // kNaive or kCudnn: what runs
  std::string describe() const;        // e.g. "cudnn", "cudnn (non-deterministic backward)", "naive"
  const kernels::AttnShape& shape() const { return a_; }

  void forward(const kernels::bf16* qkv, kernels::bf16* o, float* lse, cudaStream_t s);
  // delta [B, hq, S] fp32 is the naive backward's workspace (rowsum(dout ∘ o)); cuDNN computes its own.
  void backward(const kernels::bf16* qkv, const kernels::bf16* o, const kernels::bf16* dout, const float* lse,
                float* delta, kernels::bf16* dqkv, cudaStream_t s);

  struct Plans;  // cuDNN graphs (opaque; attention_cudnn.cpp)

 private:
  kernels::AttnShape a_;
  Impl impl_ = Impl::kNaive;
  std::string note_;
  std::shared_ptr<const Plans> plans_;
  void* ws_fwd_ = nullptr;  // this object's cuDNN workspaces (device)
  void* ws_bwd_ = nullptr;
};

}  // namespace braid::model::attn
