// cuDNN fused flash attention for the layer (see attention.hpp): SDPA forward and backward built with the
// cudnn-frontend graph API, bf16 in/out, fp32 softmax statistics, causal (top-left diagonal), GQA.
//
// Every tensor is a 4-d view [B, heads, S, d] into the layer's buffers (token t = b·S + s):
//   Q  qkv + q_off   dims [B, hq,  S, d]  strides [S·ld,  d, ld,  1]
//   K  qkv + k_off   dims [B, hkv, S, d]  strides [S·ld,  d, ld,  1]     (V likewise at v_off)
//   O  o             dims [B, hq,  S, d]  strides [S·ldo, d, ldo, 1]     (dO likewise)
//   Stats lse        dims [B, hq,  S, 1]  strides [hq·S,  S, 1,   1]     fp32, natural-log LSE
//   dQ/dK/dV dqkv at Q/K/V's offsets and strides
// so nothing is copied or reshuffled. The graphs depend on the shape only: pointers are bound at execute
// time through the tensors' uids (the variant pack), so one cached graph serves every layer of a shape.
#include "attention_cudnn.hpp"

#include <cudnn.h>
#include <cudnn_frontend.h>

#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <unordered_map>

#include "braid/errors.hpp"

namespace braid::model::attn {

namespace fe = cudnn_frontend;

struct Attention::Plans {
  std::shared_ptr<fe::graph::Graph> fwd, bwd;
  int64_t fwd_ws = 0, bwd_ws = 0;
  bool deterministic = false;
};

namespace cudnn {
namespace {

using kernels::AttnShape;
using kernels::bf16;

enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kdO, kdQ, kdK, kdV };

// One handle per thread and device (cudnnSetStream before every execute makes it follow the caller's
// stream). Never destroyed: process exit may come after the CUDA context is gone.
cudnnHandle_t handle() {
  thread_local std::unordered_map<int, cudnnHandle_t> handles;
  int dev = 0;
  BRAID_CUDA_CHECK(cudaGetDevice(&dev));
  auto it = handles.find(dev);
  if (it == handles.end()) {
    cudnnHandle_t h = nullptr;
    BRAID_CUDNN_CHECK(cudnnCreate(&h));
    it = handles.emplace(dev, h).first;
  }
  return it->second;
}

using Tensor = std::shared_ptr<fe::graph::Tensor_attributes>;

// [B, heads, S, d] view of a row-major [B·S, ld] buffer whose head h starts at column h·d (the pointer
// carries the column offset).
fe::graph::Tensor_attributes heads_view(const char* name, int64_t uid, const AttnShape& a, int64_t heads, int64_t ld) {
  const int64_t S = a.S, d = a.d;
  return fe::graph::Tensor_attributes()
      .set_name(name)
      .set_uid(uid)
      .set_dim({a.B, heads, S, d})
      .set_stride({S * ld, d, ld, 1});
}

void set_heads_view(const Tensor& t, int64_t uid, const AttnShape& a, int64_t heads, int64_t ld) {
  const int64_t S = a.S, d = a.d;
  t->set_output(true).set_uid(uid).set_dim({a.B, heads, S, d}).set_stride({S * ld, d, ld, 1});
}

std::shared_ptr<fe::graph::Graph> new_graph() {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}

void build(fe::graph::Graph& g, cudnnHandle_t h) {
  BRAID_CUDNN_FE_CHECK(g.validate());
  BRAID_CUDNN_FE_CHECK(g.build_operation_graph(h));
  BRAID_CUDNN_FE_CHECK(g.create_execution_plans({fe::HeurMode_t::A}));
  BRAID_CUDNN_FE_CHECK(g.check_support(h));
  BRAID_CUDNN_FE_CHECK(g.build_plans(h));
}

// O [B,hq,S,d], Stats [B,hq,S,1] = causal softmax(scale · Q·Kᵀ)·V, K/V heads shared by hq/hkv q heads.
std::shared_ptr<fe::graph::Graph> build_forward(const AttnShape& a, cudnnHandle_t h) {
  auto g = new_graph();
  auto q = g->tensor(heads_view("Q", kQ, a, a.hq, a.ld));
  auto k = g->tensor(heads_view("K", kK, a, a.hkv, a.ld));
  auto v = g->tensor(heads_view("V", kV, a, a.hkv, a.ld));
  auto opt = fe::graph::SDPA_attributes()
                 .set_name("braid_attention_fwd")
                 .set_generate_stats(true)
                 .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                 .set_diagonal_band_right_bound(0)  // causal: key ≤ query
                 .set_attn_scale(a.scale);
  auto [o, stats] = g->sdpa(q, k, v, opt);
  set_heads_view(o, kO, a, a.hq, a.ldo);
  stats->set_output(true)
      .set_uid(kStats)
      .set_data_type(fe::DataType_t::FLOAT)
      .set_dim({a.B, a.hq, a.S, 1})
      .set_stride({int64_t(a.hq) * a.S, a.S, 1, 1});
  build(*g, h);
  return g;
}

// dQ, dK, dV from Q, K, V, O, dO and the forward's Stats (cuDNN forms rowsum(dO ∘ O) itself, in its
// workspace); GQA: dK/dV sum over the q heads of a group.
std::shared_ptr<fe::graph::Graph> build_backward(const AttnShape& a, bool deterministic, cudnnHandle_t h) {
  auto g = new_graph();
  auto q = g->tensor(heads_view("Q", kQ, a, a.hq, a.ld));
  auto k = g->tensor(heads_view("K", kK, a, a.hkv, a.ld));
  auto v = g->tensor(heads_view("V", kV, a, a.hkv, a.ld));
  auto o = g->tensor(heads_view("O", kO, a, a.hq, a.ldo));
  auto dout = g->tensor(heads_view("dO", kdO, a, a.hq, a.ldo));
  auto stats = g->tensor(fe::graph::Tensor_attributes()
                             .set_name("Stats")
                             .set_uid(kStats)
                             .set_data_type(fe::DataType_t::FLOAT)
                             .set_dim({a.B, a.hq, a.S, 1})
                             .set_stride({int64_t(a.hq) * a.S, a.S, 1, 1}));
  auto opt = fe::graph::SDPA_backward_attributes()
                 .set_name("braid_attention_bwd")
                 .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                 .set_diagonal_band_right_bound(0)
                 .set_attn_scale(a.scale)
                 .set_deterministic_algorithm(deterministic);
  auto [dq, dk, dv] = g->sdpa_backward(q, k, v, o, dout, stats, opt);
  set_heads_view(dq, kdQ, a, a.hq, a.ld);
  set_heads_view(dk, kdK, a, a.hkv, a.ld);
  set_heads_view(dv, kdV, a, a.hkv, a.ld);
  build(*g, h);
  return g;
}

int64_t workspace_of(fe::graph::Graph& g) {
  int64_t ws = 0;
  BRAID_CUDNN_FE_CHECK(g.get_workspace_size(ws));
  return ws;
}

// The cache: graphs depend on device, dimensions, strides, scale and the determinism request.
using Key = std::tuple<int, int, int, int, int, int, int, int, uint32_t, bool>;
std::mutex g_mutex;
std::map<Key, std::shared_ptr<const Plans>> g_cache;

}  // namespace

std::shared_ptr<const Plans> plans_for(const AttnShape& a, bool deterministic) {
  BRAID_REQUIRE(a.hkv > 0 && a.hq % a.hkv == 0, "attention: hq must be a multiple of hkv");
  int dev = 0;
  BRAID_CUDA_CHECK(cudaGetDevice(&dev));
  uint32_t scale_bits;
  std::memcpy(&scale_bits, &a.scale, 4);
  const Key key{dev, a.B, a.S, a.hq, a.hkv, a.d, a.ld, a.ldo, scale_bits, deterministic};
  std::lock_guard<std::mutex> lock(g_mutex);
  if (auto it = g_cache.find(key); it != g_cache.end()) return it->second;
  cudnnHandle_t h = handle();
  auto p = std::make_shared<Plans>();
  try {
    p->fwd = build_forward(a, h);
    p->deterministic = deterministic;
    try {
      p->bwd = build_backward(a, deterministic, h);
    } catch (const CudnnError&) {
      if (!deterministic) throw;
      p->bwd = build_backward(a, false, h);  // no deterministic engine for this shape
      p->deterministic = false;
    }
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {  // cudnn-frontend throws for some unsupported configurations
    throw CudnnError(std::string("building the SDPA graphs: ") + e.what(), __FILE__, __LINE__);
  }
  p->fwd_ws = workspace_of(*p->fwd);
  p->bwd_ws = workspace_of(*p->bwd);
  g_cache.emplace(key, p);
  return p;
}

size_t workspace_bytes(const Plans& p, bool backward) { return size_t(backward ? p.bwd_ws : p.fwd_ws); }
bool deterministic(const Plans& p) { return p.deterministic; }

void forward(const Plans& p, void* ws, const bf16* qkv, bf16* o, float* lse, const AttnShape& a, cudaStream_t s) {
  auto* base = const_cast<bf16*>(qkv);
  std::unordered_map<int64_t, void*> pack{
      {kQ, base + a.q_off}, {kK, base + a.k_off}, {kV, base + a.v_off}, {kO, o}, {kStats, lse}};
  cudnnHandle_t h = handle();
  BRAID_CUDNN_CHECK(cudnnSetStream(h, s));
  BRAID_CUDNN_FE_CHECK(p.fwd->execute(h, pack, ws));
}

void backward(const Plans& p, void* ws, const bf16* qkv, const bf16* o, const bf16* dout, const float* lse,
              bf16* dqkv, const AttnShape& a, cudaStream_t s) {
  auto* base = const_cast<bf16*>(qkv);
  std::unordered_map<int64_t, void*> pack{{kQ, base + a.q_off},
                                          {kK, base + a.k_off},
                                          {kV, base + a.v_off},
                                          {kO, const_cast<bf16*>(o)},
                                          {kdO, const_cast<bf16*>(dout)},
                                          {kStats, const_cast<float*>(lse)},
                                          {kdQ, dqkv + a.q_off},
                                          {kdK, dqkv + a.k_off},
                                          {kdV, dqkv + a.v_off}};
  cudnnHandle_t h = handle();
  BRAID_CUDNN_CHECK(cudnnSetStream(h, s));
  BRAID_CUDNN_FE_CHECK(p.bwd->execute(h, pack, ws));
}

}  // namespace cudnn
}  // namespace braid::model::attn
