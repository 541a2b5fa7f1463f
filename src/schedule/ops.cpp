// Operator DAGs of one layer and the analytic time model of the synthetic builders.
#include "braid/schedule/ops.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "braid/errors.hpp"

namespace braid::schedule {

int Layer::find(Pass p, const std::string& name) const {
  const auto& v = ops(p);
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i].name == name) return static_cast<int>(i);
  return -1;
}

const char* link_name(LinkClass l) {
  switch (l) {
    case LinkClass::Compute: return "compute";
    case LinkClass::Local: return "local";
    case LinkClass::Cross: return "cross";
  }
  return "?";
}

ModelDims model_dims(const std::string& name) {
  if (name == "llama3-70b") return {name, 8192, 28672, 64, 8, 128, 0, 0};
  if (name == "llama3-8b") return {name, 4096, 14336, 32, 8, 128, 0, 0};
  if (name == "mixtral-8x7b") return {name, 4096, 14336, 32, 8, 128, 8, 2};
  throw UsageError("unknown model '" + name + "' (llama3-70b, llama3-8b, mixtral-8x7b)", __FILE__,
                   __LINE__);
}

namespace {

constexpr double kLaunchUs = 2.0;  // fixed cost of any kernel

// Builds one pass: ops are appended in a canonical topological order; deps name earlier ops.
class PassBuilder {
 public:
  PassBuilder(std::vector<Op>& out, Pass pass, const Hardware& hw) : out_(out), pass_(pass), hw_(hw) {}

  int compute(const std::string& name, const std::string& type, double us,
              std::initializer_list<std::string> deps) {
    return add(name, type, OpKind::Compute, LinkClass::Compute, us, deps);
  }
  int comm(const std::string& name, const std::string& type, LinkClass link, double bytes,
           std::initializer_list<std::string> deps) {
    const double bw = link == LinkClass::Cross ? hw_.cross_bw : hw_.local_bw;
    const double lat = link == LinkClass::Cross ? hw_.cross_lat_us : hw_.local_lat_us;
    return add(name, type, OpKind::Comm, link, lat + bytes / bw * 1e6, deps);
  }

 private:
  int add(const std::string& name, const std::string& type, OpKind kind, LinkClass link, double us,
          std::initializer_list<std::string> deps) {
    Op op;
    op.name = (pass_ == Pass::Forward ? "f." : "b.") + name;
    op.type = type;
    op.kind = kind;
    op.link = link;
    op.pass = pass_;
    op.solo_us = us;
    for (const auto& d : deps) {
      const std::string full = (pass_ == Pass::Forward ? "f." : "b.") + d;
      auto it = std::find_if(out_.begin(), out_.end(), [&](const Op& o) { return o.name == full; });
      if (it == out_.end()) throw UsageError("builder: unknown dependency " + full, __FILE__, __LINE__);
      op.deps.push_back(static_cast<int>(it - out_.begin()));
    }
    out_.push_back(op);
    return static_cast<int>(out_.size()) - 1;
  }

  std::vector<Op>& out_;
  Pass pass_;
  const Hardware& hw_;
};

struct Model {
  const Hardware& hw;
  double gemm_us(double flops, double eff_scale = 1.0) const {
    return kLaunchUs + flops / (hw.peak_flops * hw.gemm_eff * eff_scale) * 1e6;
  }
  double attn_us(double flops, bool bwd) const {
    return kLaunchUs + flops / (hw.peak_flops * (bwd ? hw.attn_bwd_eff : hw.attn_fwd_eff)) * 1e6;
  }
  double mem_us(double bytes) const { return kLaunchUs + bytes / (hw.hbm_bw * hw.mem_eff) * 1e6; }
};

void check_config(const ModelDims& m, const LayerConfig& c) {
  if (c.tp < 1 || c.ep < 1 || c.seq < 1 || c.batch < 1)
    throw UsageError("tp, ep, seq and batch must be positive", __FILE__, __LINE__);
  if (c.seq % c.tp != 0) throw UsageError("seq must be a multiple of tp (sequence parallel)", __FILE__, __LINE__);
  if (m.heads % c.tp != 0 || m.kv_heads % c.tp != 0)
    throw UsageError("tp must divide the attention and KV heads of " + m.name, __FILE__, __LINE__);
  if (m.experts > 0 && m.experts % c.ep != 0)
    throw UsageError("ep must divide the number of experts of " + m.name, __FILE__, __LINE__);
}

std::string parallel_string(const ModelDims& m, const LayerConfig& c) {
  std::string s = "tp=" + std::to_string(c.tp) + ",sp=" + std::to_string(c.tp);
  if (m.experts > 0) s += ",ep=" + std::to_string(c.ep) + (c.ep_cross_node ? "x" : "");
  if (c.tp_cross_node) s += ",tpx";
  s += ",seq=" + std::to_string(c.seq) + ",batch=" + std::to_string(c.batch);
  if (m.experts > 0 && c.capacity > 0) {
    char buf[32];
    std::snprintf(buf, sizeof buf, ",capacity=%g", c.capacity);
    s += buf;
  }
  return s;
}

// The attention half (TP+SP), shared by both layer kinds. Forward: norm1 .. rs1. Backward ops are
// added by attention_bwd after the MLP half (the backward runs in reverse).
void attention_fwd(PassBuilder& f, const ModelDims& m, const LayerConfig& c, const Model& t) {
  const double T = double(c.seq) * c.batch, H = m.hidden, tp = c.tp, eb = c.elem_bytes;
  const double qkv_out = double(m.heads + 2 * m.kv_heads) * m.head_dim;
  const double act = T * H * eb;                 // one full activation
  const double ag = act * (tp - 1) / tp;         // bytes each rank receives in AG / sends in RS
  const LinkClass tl = c.tp_cross_node ? LinkClass::Cross : LinkClass::Local;
  const double attn_flops = 2.0 * c.batch * double(c.seq) * c.seq * H / tp;  // causal, QK^T + PV
  f.compute("norm1", "elem", t.mem_us(2 * act / tp), {});
  f.comm("ag1", "ag", tl, ag, {"norm1"});
  f.compute("qkv", "gemm", t.gemm_us(2 * T * H * qkv_out / tp), {"ag1"});
  f.compute("attn", "attn", t.attn_us(attn_flops, false), {"qkv"});
  f.compute("out", "gemm", t.gemm_us(2 * T * H * H / tp), {"attn"});
  f.comm("rs1", "rs", tl, ag, {"out"});
  f.compute("norm2", "elem", t.mem_us(2 * act / tp), {"rs1"});
}

void attention_bwd(PassBuilder& b, const ModelDims& m, const LayerConfig& c, const Model& t,
                   const std::string& after) {
  const double T = double(c.seq) * c.batch, H = m.hidden, tp = c.tp, eb = c.elem_bytes;
  const double qkv_out = double(m.heads + 2 * m.kv_heads) * m.head_dim;
  const double act = T * H * eb, ag = act * (tp - 1) / tp;
  const LinkClass tl = c.tp_cross_node ? LinkClass::Cross : LinkClass::Local;
  const double attn_flops = 2.5 * 2.0 * c.batch * double(c.seq) * c.seq * H / tp;
  b.comm("ag_rs1", "ag", tl, ag, {after});                       // backward of rs1
  b.compute("out_dgrad", "gemm", t.gemm_us(2 * T * H * H / tp), {"ag_rs1"});
  b.compute("out_wgrad", "gemm", t.gemm_us(2 * T * H * H / tp), {"ag_rs1"});
  b.compute("attn", "attn_bwd", t.attn_us(attn_flops, true), {"out_dgrad"});
  b.compute("qkv_dgrad", "gemm", t.gemm_us(2 * T * H * qkv_out / tp), {"attn"});
  b.comm("ag_in1", "ag", tl, ag, {after});                       // re-gather norm1 output for wgrad
  b.compute("qkv_wgrad", "gemm", t.gemm_us(2 * T * H * qkv_out / tp), {"attn", "ag_in1"});
  b.comm("rs_qkv", "rs", tl, ag, {"qkv_dgrad"});                 // backward of ag1
  b.compute("norm1", "elem", t.mem_us(3 * act / tp), {"rs_qkv"});
}

}  // namespace

Layer build_llama_layer(const ModelDims& m, const LayerConfig& c, const Hardware& hw) {
  check_config(m, c);
  Layer L;
  L.model = m.name;
  L.parallel = parallel_string(m, c);
  const Model t{hw};
  const double T = double(c.seq) * c.batch, H = m.hidden, F = m.ffn, tp = c.tp, eb = c.elem_bytes;
  const double act = T * H * eb, ag = act * (tp - 1) / tp;
  const LinkClass tl = c.tp_cross_node ? LinkClass::Cross : LinkClass::Local;

  PassBuilder f(L.fwd, Pass::Forward, hw);
  attention_fwd(f, m, c, t);
  f.comm("ag2", "ag", tl, ag, {"norm2"});
  f.compute("upgate", "gemm", t.gemm_us(2 * T * H * 2 * F / tp), {"ag2"});
  f.compute("swiglu", "elem", t.mem_us(3 * T * F / tp * eb), {"upgate"});
  f.compute("down", "gemm", t.gemm_us(2 * T * F * H / tp), {"swiglu"});
  f.comm("rs2", "rs", tl, ag, {"down"});

  PassBuilder b(L.bwd, Pass::Backward, hw);
  b.comm("ag_rs2", "ag", tl, ag, {});                               // backward of rs2
  b.compute("down_dgrad", "gemm", t.gemm_us(2 * T * F * H / tp), {"ag_rs2"});
  b.compute("down_wgrad", "gemm", t.gemm_us(2 * T * F * H / tp), {"ag_rs2"});
  b.compute("swiglu", "elem", t.mem_us(5 * T * F / tp * eb), {"down_dgrad"});
  b.compute("upgate_dgrad", "gemm", t.gemm_us(2 * T * H * 2 * F / tp), {"swiglu"});
  b.comm("ag_in2", "ag", tl, ag, {"ag_rs2"});                       // re-gather norm2 output
  b.compute("upgate_wgrad", "gemm", t.gemm_us(2 * T * H * 2 * F / tp), {"swiglu", "ag_in2"});
  b.comm("rs_upgate", "rs", tl, ag, {"upgate_dgrad"});              // backward of ag2
  b.compute("norm2", "elem", t.mem_us(3 * act / tp), {"rs_upgate"});
  attention_bwd(b, m, c, t, "norm2");
  return L;
}

Layer build_moe_layer(const ModelDims& m, const LayerConfig& c, const Hardware& hw) {
  check_config(m, c);
  if (m.experts <= 0) throw UsageError(m.name + " is not an MoE model", __FILE__, __LINE__);
  Layer L;
  L.model = m.name;
  L.parallel = parallel_string(m, c);
  const Model t{hw};
  const double T = double(c.seq) * c.batch, H = m.hidden, F = m.ffn, tp = c.tp, eb = c.elem_bytes;
  const double k = m.top_k, E = m.experts, ep = c.ep;
  const double local_tokens = T / tp;           // sequence-parallel shard each rank routes
  // token-expert rows each rank computes and sends: balanced when dropless, every expert's capacity slots
  // (padding included) with a capacity factor
  if (c.capacity < 0) throw UsageError("the MoE capacity factor must be >= 0", __FILE__, __LINE__);
  const double routed = c.capacity > 0 ? E * std::ceil(c.capacity * local_tokens * k / E - 1e-9) : local_tokens * k;
  const double a2a = routed * H * eb * (ep - 1) / ep;
  const LinkClass el = c.ep_cross_node ? LinkClass::Cross : LinkClass::Local;
  const double grouped = 0.85;                  // grouped GEMM efficiency relative to a dense one

  PassBuilder f(L.fwd, Pass::Forward, hw);
  attention_fwd(f, m, c, t);
  f.compute("router", "router", t.gemm_us(2 * local_tokens * H * E, 0.3), {"norm2"});
  f.comm("dispatch", "a2a", el, a2a, {"router"});
  f.compute("expert_upgate", "gemm", t.gemm_us(2 * routed * H * 2 * F, grouped), {"dispatch"});
  f.compute("swiglu", "elem", t.mem_us(3 * routed * F * eb), {"expert_upgate"});
  f.compute("expert_down", "gemm", t.gemm_us(2 * routed * F * H, grouped), {"swiglu"});
  f.comm("combine", "a2a", el, a2a, {"expert_down"});

  PassBuilder b(L.bwd, Pass::Backward, hw);
  b.comm("combine", "a2a", el, a2a, {});                            // gradients to the experts
  b.compute("router", "router", t.gemm_us(4 * local_tokens * H * E, 0.3), {});  // gate gradient
  b.compute("expert_down_dgrad", "gemm", t.gemm_us(2 * routed * F * H, grouped), {"combine"});
  b.compute("expert_down_wgrad", "gemm", t.gemm_us(2 * routed * F * H, grouped), {"combine"});
  b.compute("swiglu", "elem", t.mem_us(5 * routed * F * eb), {"expert_down_dgrad"});
  b.compute("expert_upgate_dgrad", "gemm", t.gemm_us(2 * routed * H * 2 * F, grouped), {"swiglu"});
  b.compute("expert_upgate_wgrad", "gemm", t.gemm_us(2 * routed * H * 2 * F, grouped), {"swiglu"});
  b.comm("dispatch", "a2a", el, a2a, {"expert_upgate_dgrad"});      // gradients back to owners
  b.compute("norm2", "elem", t.mem_us(3 * T * H * eb / tp), {"dispatch", "router"});
  attention_bwd(b, m, c, t, "norm2");
  return L;
}

Layer build_layer(const ModelDims& m, const LayerConfig& c, const Hardware& hw) {
  return m.experts > 0 ? build_moe_layer(m, c, hw) : build_llama_layer(m, c, hw);
}

std::string validate_layer(const Layer& layer) {
  for (Pass p : {Pass::Forward, Pass::Backward}) {
    const auto& v = layer.ops(p);
    for (size_t i = 0; i < v.size(); ++i) {
      const Op& o = v[i];
      if (o.pass != p) return o.name + ": listed in the wrong pass";
      if ((o.kind == OpKind::Comm) != (o.link != LinkClass::Compute))
        return o.name + ": communication operators (and only they) use a link";
      if (o.solo_us < 0) return o.name + ": negative solo time";
      for (int d : o.deps)
        if (d < 0 || d >= static_cast<int>(i)) return o.name + ": dependency must be an earlier operator";
      for (size_t j = 0; j < i; ++j)
        if (v[j].name == o.name) return o.name + ": duplicate name";
    }
  }
  return {};
}

}  // namespace braid::schedule
