// The GPU layer's operator lists as schedule DAGs (strands.hpp): names, types, links, dependencies and
// analytic solo times. CPU only.
#include <algorithm>
#include <cstdio>
#include <string>

#include "braid/errors.hpp"
#include "braid/schedule/strands.hpp"

namespace braid::schedule {

namespace {

bool ends_with(const std::string& s, const std::string& t) {
  return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
}

// Weight-gradient operators: nothing inside the layer reads what they write (but the final all-reduce
// of the replicated gradients, which reads the router gradient).
bool is_sink(const std::string& name) { return ends_with(name, "_wgrad") || name == "router_bwd"; }

std::string op_type(const model::OpInfo& o) {
  if (o.kind == model::OpKind::kComm) {
    switch (o.comm) {
      case model::CommKind::kAllGather: return "ag";
      case model::CommKind::kReduceScatter: return "rs";
      case model::CommKind::kAllReduce: return "ar";
      case model::CommKind::kAllToAll: return "a2a";
      default: return "comm";
    }
  }
  if (o.name.find("attention") != std::string::npos) return ends_with(o.name, "_bwd") ? "attn_bwd" : "attn";
  if (o.name.rfind("router", 0) == 0 || o.name.rfind("route", 0) == 0) return "router";
  return o.flops > 0 ? "gemm" : "elem";
}

// Analytic solo time (us) of one operator of one rank: only used to order a step's kernel launches and
// as the DP's input when no profile is given.
double solo_estimate(const model::OpInfo& o, const std::string& type, int tp, LinkClass link, const Hardware& hw) {
  if (o.kind == model::OpKind::kComm) {
    const double bw = link == LinkClass::Cross ? hw.cross_bw : hw.local_bw;
    const double lat = link == LinkClass::Cross ? hw.cross_lat_us : hw.local_lat_us;
    double bytes = o.bytes;
    if (type == "ag" || type == "rs") bytes *= double(tp - 1) / tp;
    if (type == "ar") bytes *= 2.0 * (tp - 1) / tp;
    return lat + bytes / bw * 1e6;
  }
  // braid's attention runs on CUDA cores (docs/layer.md): take 5% of the tensor-core peak.
  const double eff = type == "attn" || type == "attn_bwd" ? 0.05 : hw.gemm_eff;
  return 2.0 + o.flops / (hw.peak_flops * eff) * 1e6 + o.bytes / (hw.hbm_bw * hw.mem_eff) * 1e6;
}

}  // namespace

std::string strand_parallel_tag(const model::ModelConfig& c, const model::Parallel& p) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "tp=%d,sp=%d,ep=%d,seq=%d,mb=%d", p.tp, p.sp ? 1 : 0, c.moe() ? p.tp : 1, c.seq,
                c.micro_batch);
  return buf;
}

Layer strand_layer(const model::ModelConfig& c, const model::Parallel& p, const StrandLinks& links,
                   const Hardware& hw) {
  Layer L;
  L.model = c.name;
  L.parallel = strand_parallel_tag(c, p);
  for (const auto ph : {model::Phase::kForward, model::Phase::kBackward}) {
    const bool fwd = ph == model::Phase::kForward;
    const auto infos = model::plan_ops(c, p, ph);
    std::vector<Op>& out = fwd ? L.fwd : L.bwd;
    int last_main = -1;  // last operator that is not a weight-gradient sink
    for (size_t i = 0; i < infos.size(); ++i) {
      const auto& o = infos[i];
      Op op;
      op.name = std::string(fwd ? "f." : "b.") + o.name;
      op.type = op_type(o);
      op.kind = o.kind == model::OpKind::kComm ? OpKind::Comm : OpKind::Compute;
      op.link = op.kind == OpKind::Compute ? LinkClass::Compute : (op.type == "a2a" ? links.a2a : links.tp);
      op.pass = fwd ? Pass::Forward : Pass::Backward;
      if (fwd) {
        if (i > 0) op.deps = {int(i) - 1};
      } else if (o.name == "ar_replicated_grads") {
        for (int j = 0; j < int(i); ++j) op.deps.push_back(j);
      } else if (last_main >= 0) {
        op.deps = {last_main};
      }
      if (fwd || !is_sink(o.name)) last_main = int(i);
      op.solo_us = solo_estimate(o, op.type, p.tp, op.link, hw);
      out.push_back(op);
    }
  }
  return L;
}

void apply_solo_times(Layer& dag, const PairTable& t) {
  for (auto* ops : {&dag.fwd, &dag.bwd})
    for (auto& op : *ops)
      if (const auto s = t.solo_us(op.name)) op.solo_us = *s;
}

}  // namespace braid::schedule
