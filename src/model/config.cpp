// Model presets, validation and the operator plan (names, shapes, FLOPs, bytes) of one layer.
#include <algorithm>
#include <cmath>
#include <sstream>

#include "braid/errors.hpp"
#include "braid/model/config.hpp"

namespace braid::model {

void ModelConfig::validate() const {
  BRAID_REQUIRE(hidden > 0 && heads > 0 && kv_heads > 0 && ffn > 0, "model: hidden, heads, kv_heads, ffn must be > 0");
  BRAID_REQUIRE(heads % kv_heads == 0, "model: heads must be a multiple of kv_heads");
  BRAID_REQUIRE(head_dim > 0 || hidden % heads == 0, "model: hidden must be a multiple of heads");
  BRAID_REQUIRE(hd() % 2 == 0, "model: head_dim must be even (rotary pairs)");
  BRAID_REQUIRE(seq > 0 && micro_batch > 0, "model: seq and micro_batch must be > 0");
  if (experts > 0) BRAID_REQUIRE(top_k > 0 && top_k <= experts, "model: need 0 < top_k <= experts");
  BRAID_REQUIRE(capacity >= 0 && capacity <= 1024, "model: the MoE capacity factor must be in [0, 1024] (0: dropless)");
  BRAID_REQUIRE(capacity == 0 || experts > 0, "model: a capacity factor needs experts");
  BRAID_REQUIRE(!moe_device_sizes || (experts > 0 && capacity == 0),
                "model: device-side MoE sizes need a dropless MoE model (experts, capacity 0)");
}

int64_t ModelConfig::expert_capacity(int64_t local_tokens) const {
  if (!moe() || capacity <= 0) return 0;
  const double rows = capacity * double(local_tokens) * top_k / experts;
  return std::max<int64_t>(1, int64_t(std::ceil(rows - 1e-9)));
}

std::string ModelConfig::describe() const {
  std::ostringstream o;
  o << name << ": hidden " << hidden << ", heads " << heads << " (kv " << kv_heads << ", d " << hd() << "), ffn "
    << ffn;
  if (moe()) o << ", " << experts << " experts top-" << top_k;
  if (moe() && capacity > 0) o << " capacity " << capacity;
  if (moe_device_sizes) o << " (dropless, counts on the device)";
  o << ", seq " << seq << " x micro-batch " << micro_batch;
  return o.str();
}

std::vector<std::string> preset_names() { return {"llama3-8b", "llama3-70b", "mixtral-8x7b", "tiny", "tiny-moe"}; }

ModelConfig preset(const std::string& name) {
  ModelConfig c;
  c.name = name;
  if (name == "llama3-8b") {
    c.hidden = 4096, c.heads = 32, c.kv_heads = 8, c.ffn = 14336, c.seq = 8192;
  } else if (name == "llama3-70b") {
    c.hidden = 8192, c.heads = 64, c.kv_heads = 8, c.ffn = 28672, c.seq = 8192;
  } else if (name == "mixtral-8x7b") {
    c.hidden = 4096, c.heads = 32, c.kv_heads = 8, c.ffn = 14336, c.experts = 8, c.top_k = 2, c.seq = 8192;
    c.rope_theta = 1e6;
  } else if (name == "tiny") {  // test shape: d = 16, two micro-batches
    c.hidden = 64, c.heads = 4, c.kv_heads = 2, c.ffn = 96, c.seq = 16, c.micro_batch = 2, c.rope_theta = 10000;
  } else if (name == "tiny-moe") {
    c.hidden = 64, c.heads = 4, c.kv_heads = 2, c.ffn = 48, c.experts = 4, c.top_k = 2, c.seq = 16;
    c.micro_batch = 2, c.rope_theta = 10000;
  } else {
    std::string all;
    for (const auto& n : preset_names()) all += " " + n;
    throw UsageError("unknown model '" + name + "' (presets:" + all + ")", __FILE__, __LINE__);
  }
  return c;
}

void Parallel::validate(const ModelConfig& c) const {
  BRAID_REQUIRE(tp >= 1, "parallel: tp must be >= 1");
  BRAID_REQUIRE(c.heads % tp == 0 && c.kv_heads % tp == 0, "parallel: heads and kv_heads must be multiples of tp");
  BRAID_REQUIRE(c.tokens() % tp == 0, "parallel: micro_batch * seq must be a multiple of tp");
  if (c.moe()) {
    BRAID_REQUIRE(c.experts % tp == 0, "parallel: experts must be a multiple of tp (ep = tp)");
    BRAID_REQUIRE(sp || tp == 1, "parallel: MoE needs sequence parallelism (tokens partitioned by rank)");
  } else {
    BRAID_REQUIRE(c.ffn % tp == 0, "parallel: ffn must be a multiple of tp");
  }
}

const char* comm_name(CommKind c) {
  switch (c) {
    case CommKind::kAllGather: return "allgather";
    case CommKind::kReduceScatter: return "reducescatter";
    case CommKind::kAllReduce: return "allreduce";
    case CommKind::kAllToAll: return "alltoall";
    default: return "";
  }
}

namespace {

std::string dims(std::initializer_list<int64_t> d) {
  std::string s = "[";
  bool first = true;
  for (int64_t v : d) {  // appended piece by piece (GCC 12's -Wrestrict misfires on `const char* + std::string&&`)
    if (!first) s += ',';
    s += std::to_string(v);
    first = false;
  }
  return s + "]";
}

struct Planner {
  std::vector<OpInfo> ops;
  // C[m,n] = A[m,k] · B[k,n] (any transposition): bf16 in, bf16 out.
  void gemm(const std::string& name, int64_t m, int64_t n, int64_t k, double count = 1) {
    OpInfo o;
    o.name = name;
    o.shape = dims({m, k}) + "x" + dims({k, n});
    if (count != 1) o.shape += " x" + std::to_string(int64_t(count)) + " groups";
    o.flops = 2.0 * m * n * k * count;
    o.bytes = 2.0 * (m * k + k * n + m * n) * count;
    ops.push_back(o);
  }
  // Elementwise / memory-bound operator: FLOPs are not counted (model FLOPs are matrix FLOPs).
  void eltwise(const std::string& name, const std::string& shape, double bytes) {
    OpInfo o;
    o.name = name, o.shape = shape, o.bytes = bytes;
    ops.push_back(o);
  }
  void comm(const std::string& name, CommKind k, const std::string& shape, double bytes) {
    OpInfo o;
    o.name = name, o.kind = OpKind::kComm, o.comm = k, o.shape = shape, o.bytes = bytes;
    ops.push_back(o);
  }
  void custom(const std::string& name, const std::string& shape, double flops, double bytes) {
    OpInfo o;
    o.name = name, o.shape = shape, o.flops = flops, o.bytes = bytes;
    ops.push_back(o);
  }
};

}  // namespace

std::vector<OpInfo> plan_ops(const ModelConfig& c, const Parallel& p, Phase phase) {
  c.validate();
  p.validate(c);
  const int tp = p.tp;
  const bool sp = p.sp && tp > 1;
  const int64_t T = c.tokens(), Tl = sp ? T / tp : T, H = c.hidden, d = c.hd(), S = c.seq, B = c.micro_batch;
  const int64_t hq = c.heads / tp, hkv = c.kv_heads / tp, qd = hq * d, kvd = hkv * d, nqkv = qd + 2 * kvd;
  const int64_t F = c.ffn, Fl = c.moe() ? F : F / tp;
  // MoE rows sent (= received): balanced dropless Tl * K; with a capacity factor every expert's slots, E * cap
  const int64_t E = c.experts, El = E / tp, K = c.top_k, cap = c.expert_capacity(Tl), R = cap > 0 ? E * cap : Tl * K;
  const double attn_fwd = 4.0 * B * hq * (double(S) * S / 2) * d;     // QK^T and PV, causal half
  const std::string tl_h = dims({Tl, H}), t_h = dims({T, H});
  const CommKind row_comm = sp ? CommKind::kReduceScatter : CommKind::kAllReduce;
  const std::string rs = sp ? "rs_" : "ar_";
  Planner P;
  if (phase == Phase::kForward) {
    P.eltwise("norm1", tl_h, 2.0 * 2 * Tl * H + 2 * H);
    if (sp) P.comm("ag_h1", CommKind::kAllGather, t_h, 2.0 * T * H);
    P.gemm("qkv_proj", T, nqkv, H);
    P.eltwise("rope", dims({T, qd + kvd}), 2.0 * 2 * T * (qd + kvd));
    P.custom("attention", dims({B, hq, S, d}) + " kv " + std::to_string(hkv), attn_fwd,
             2.0 * T * (nqkv + qd) + 4.0 * B * hq * S);
    P.gemm("out_proj", T, H, qd);
    P.comm(rs + "attn", row_comm, t_h, 2.0 * T * H);
    P.eltwise("residual_norm2", tl_h, 2.0 * 4 * Tl * H + 2 * H);
    if (!c.moe()) {
      if (sp) P.comm("ag_h2", CommKind::kAllGather, t_h, 2.0 * T * H);
      P.gemm("gate_up_proj", T, 2 * Fl, H);
      P.eltwise("swiglu", dims({T, Fl}), 2.0 * 3 * T * Fl);
      P.gemm("down_proj", T, H, Fl);
      P.comm(rs + "mlp", row_comm, t_h, 2.0 * T * H);
      P.eltwise("residual2", tl_h, 2.0 * 3 * Tl * H);
    } else {
      P.custom("router", dims({Tl, H}) + "x" + dims({H, E}), 2.0 * Tl * H * E, 2.0 * (Tl * H + H * E) + 4.0 * Tl * E);
      P.eltwise("route", dims({R, H}), 2.0 * (Tl * H + R * H) + 4.0 * Tl * E);
      P.comm("a2a_counts", CommKind::kAllToAll, dims({E}), cap > 0 ? 0.0 : 8.0 * E * (tp - 1) / tp);  // capacity: none
      // Counts on the device: the layout (row matrix, rows per expert, the row maps) from the gathered counts, a
      // compute operator of its own (a compute-only pass, which skips the exchanges, still writes the layout).
      if (c.moe_device_sizes) P.eltwise("expert_layout", dims({tp, E}), 4.0 * (tp * E + 2 * R));
      P.comm("a2a_dispatch", CommKind::kAllToAll, dims({R, H}), 2.0 * R * H * (tp - 1) / tp);
      P.eltwise("expert_sort", dims({R, H}), 2.0 * 2 * R * H);
      P.gemm("expert_gate_up", R / El, 2 * F, H, double(El));
      P.eltwise("expert_swiglu", dims({R, F}), 2.0 * 3 * R * F);
      P.gemm("expert_down", R / El, H, F, double(El));
      P.eltwise("expert_unsort", dims({R, H}), 2.0 * 2 * R * H);
      P.comm("a2a_combine", CommKind::kAllToAll, dims({R, H}), 2.0 * R * H * (tp - 1) / tp);
      P.eltwise("combine", tl_h, 2.0 * (3 * Tl * H + R * H));
    }
  } else {
    if (!c.moe()) {
      if (sp) P.comm("ag_dy", CommKind::kAllGather, t_h, 2.0 * T * H);
      P.gemm("down_proj_dgrad", T, Fl, H);
      P.gemm("down_proj_wgrad", Fl, H, T);
      P.eltwise("swiglu_bwd", dims({T, Fl}), 2.0 * 5 * T * Fl);
      P.gemm("gate_up_dgrad", T, H, 2 * Fl);
      P.gemm("gate_up_wgrad", H, 2 * Fl, T);
      P.comm(rs + "dh2", row_comm, t_h, 2.0 * T * H);
    } else {
      P.eltwise("combine_bwd", dims({R, H}), 2.0 * (Tl * H + 2 * R * H) + 4.0 * Tl * E);
      P.comm("a2a_combine_bwd", CommKind::kAllToAll, dims({R, H}), 2.0 * R * H * (tp - 1) / tp);
      P.eltwise("expert_sort_bwd", dims({R, H}), 2.0 * 2 * R * H);
      P.gemm("expert_down_dgrad", R / El, F, H, double(El));
      P.gemm("expert_down_wgrad", F, H, R / El, double(El));
      P.eltwise("expert_swiglu_bwd", dims({R, F}), 2.0 * 5 * R * F);
      P.gemm("expert_gate_up_dgrad", R / El, H, 2 * F, double(El));
      P.gemm("expert_gate_up_wgrad", H, 2 * F, R / El, double(El));
      P.eltwise("expert_unsort_bwd", dims({R, H}), 2.0 * 2 * R * H);
      P.comm("a2a_dispatch_bwd", CommKind::kAllToAll, dims({R, H}), 2.0 * R * H * (tp - 1) / tp);
      // route_bwd: dh2 = Σ_k expert-row grads + dlogits · Wr^T; router_bwd: dWr = h2^T · dlogits.
      P.custom("route_bwd", dims({Tl, E}) + "x" + dims({E, H}), 2.0 * Tl * H * E,
               2.0 * (R * H + Tl * H + H * E) + 4.0 * Tl * E);
      P.custom("router_bwd", dims({H, Tl}) + "x" + dims({Tl, E}), 2.0 * Tl * H * E, 2.0 * Tl * H + 4.0 * (Tl * E + H * E));
    }
    P.eltwise("norm2_bwd", tl_h, 2.0 * 4 * Tl * H + 4.0 * H);
    if (sp) P.comm("ag_dx1", CommKind::kAllGather, t_h, 2.0 * T * H);
    P.gemm("out_proj_dgrad", T, qd, H);
    P.gemm("out_proj_wgrad", qd, H, T);
    P.custom("attention_bwd", dims({B, hq, S, d}) + " kv " + std::to_string(hkv), 2.0 * attn_fwd,
             2.0 * T * (nqkv + 2 * qd) + 2.0 * T * nqkv + 8.0 * B * hq * S);
    P.eltwise("rope_bwd", dims({T, qd + kvd}), 2.0 * 2 * T * (qd + kvd));
    P.gemm("qkv_dgrad", T, H, nqkv);
    P.gemm("qkv_wgrad", H, nqkv, T);
    P.comm(rs + "dh1", row_comm, t_h, 2.0 * T * H);
    P.eltwise("norm1_bwd", tl_h, 2.0 * 4 * Tl * H + 4.0 * H);
    if (p.reduces_replicated_grads_per_backward()) {
      const int64_t n = 2 * H + (c.moe() ? H * E : 0);
      P.comm("ar_replicated_grads", CommKind::kAllReduce, dims({n}) + " fp32", 4.0 * n);
    }
  }
  return P.ops;
}

double layer_model_flops(const ModelConfig& c, Phase phase) {
  const double T = double(c.tokens()), H = c.hidden, S = c.seq, B = c.micro_batch, d = c.hd();
  double f = 2 * T * H * (c.q_dim() + 2.0 * c.kv_dim()) + 4 * B * c.heads * (S * S / 2) * d + 2 * T * c.q_dim() * H;
  if (c.moe())
    f += 2 * T * H * c.experts + 6 * T * c.top_k * H * c.ffn;
  else
    f += 6 * T * H * c.ffn;
  return phase == Phase::kForward ? f : 2 * f;
}

}  // namespace braid::model
