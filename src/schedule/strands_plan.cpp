// The GPU layer's operator lists as schedule DAGs (strands.hpp): names, types, links, dependencies and
// analytic solo times. CPU only.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <set>
#include <limits>
#include <map>
#include <string>
#include <tuple>

#include "braid/errors.hpp"
#include "braid/model/config.hpp"
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
  std::string tag = buf;
  if (c.moe() && c.capacity > 0) {  // a capacity-factor layer's operators are other shapes (padded, static)
    std::snprintf(buf, sizeof buf, ",capacity=%g", c.capacity);
    tag += buf;
  }
  if (c.moe_device_sizes) tag += ",moe-sizes=device";  // grouped GEMMs and device-counted exchanges: other times
  // No ar_replicated_grads operator in the backward (reduced once per step, model::Layer::reduce_replicated_grads)
  if (p.reduces_replicated_grads_per_step()) tag += ",rep-grads=step";
  return tag;
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
      // Without sequence parallelism an accumulating layer adds this backward's replicated gradients (the norms',
      // and an MoE layer's router) into its totals inside norm1_bwd (model::Layer: there is no all-reduce op to do
      // it): the router's weight gradient, a sink, must be written before. (Found at one rank, thirty-seventh
      // session: an order that moved router_bwd after norm1_bwd lost that backward's router gradient.)
      // So too when they are reduced once per step (Parallel::replicated_grads_per_step).
      if (!fwd && o.name == "norm1_bwd" && !p.reduces_replicated_grads_per_backward())
        for (int j = 0; j < int(i); ++j)
          if (infos[size_t(j)].name == "router_bwd") op.deps.push_back(j);
      if (fwd || !is_sink(o.name)) last_main = int(i);
      op.solo_us = solo_estimate(o, op.type, p.tp, op.link, hw);
      // Dropless MoE: the dispatch's issue waits on the host for the counts (model::Layer's moe_finish_counts);
      // with a capacity factor the shapes are static and nothing waits.
      // (With its counts on the device, ModelConfig::moe_device_sizes, it does not wait either.)
      if (fwd && o.name == "a2a_dispatch" && c.moe() && c.capacity <= 0 && !c.moe_device_sizes && i > 0 &&
          infos[i - 1].name == "a2a_counts")
        op.host_waits_for = int(i) - 1;
      out.push_back(op);
    }
  }
  return L;
}

void apply_solo_times(Layer& dag, const PairTable& t) {
  for (auto* ops : {&dag.fwd, &dag.bwd})
    for (auto& op : *ops)
      if (const auto s = t.solo_us(op.name)) op.solo_us = *s;
  for (auto* ops : {&dag.fwd, &dag.bwd})
    for (auto& op : *ops)
      if (const auto h = t.host_us(op.name)) op.host_us = *h;
}

namespace {

// list_schedule with an optional activation budget (mem): a forward op that allocates starts only once
// the backward strand's already scheduled frees leave room for it; while they do not, the backward
// strand goes first. Without mem, exactly list_schedule.
struct MemoryModel {
  std::vector<double> alloc_f, free_b;  // bytes per forward op (at its start), per backward op (at its end)
  double live0 = 0, budget = 0;
};

std::vector<std::pair<Pass, int>> schedule(const Layer& dag, const std::vector<int>& fseg, const std::vector<int>& bseg,
                                           double* end_us, const MemoryModel* mem) {
  struct Strand {
    const std::vector<int>* seg;
    Pass pass;
    size_t k = 0;
    double ready = 0;
  };
  Strand st[2] = {{&fseg, Pass::Forward}, {&bseg, Pass::Backward}};
  double free_at[3] = {0, 0, 0};  // compute, local, cross
  double host = 0;  // the host: when the last op issued was enqueued (its gate and issue time, Op::host_us)
  // dep_ready: an op is ready at the end of its latest dependency issued here (else at 0).
  std::vector<double> end_of[2] = {std::vector<double>(dag.fwd.size(), 0.0), std::vector<double>(dag.bwd.size(), 0.0)};
  auto ready_of = [&](int s, const Op& op) {
    if (!dag.dep_ready) return st[s].ready;
    double r = 0;
    for (int d : op.deps) r = std::max(r, end_of[s][d]);
    return r;
  };
  // When `op` of strand s would be enqueued if issued next: after the previous issue, after its gate's end (the
  // waited-for op precedes it in its pass's order, so it is scheduled already), plus its own issue time.
  auto enqueue_at = [&](int s, const Op& op) {
    return (op.host_waits_for >= 0 ? std::max(host, end_of[s][op.host_waits_for]) : host) + std::max(op.host_us, 0.0);
  };
  std::vector<std::pair<double, double>> frees;  // scheduled backward frees: (end time, bytes)
  double allocated = 0;                          // forward allocations so far
  std::vector<std::pair<Pass, int>> order;
  // Earliest t >= from at which `need` more bytes fit, given the frees scheduled so far; < 0: never.
  auto fits_at = [&](double from, double need) {
    std::sort(frees.begin(), frees.end());
    double live = mem->live0 + allocated + need, t = from;
    for (const auto& [at, b] : frees) {
      if (at <= from) live -= b;
    }
    if (live <= mem->budget + 1e-6) return t;
    for (const auto& [at, b] : frees) {
      if (at <= from) continue;
      live -= b;
      if (live <= mem->budget + 1e-6) return at;
    }
    return -1.0;
  };
  while (true) {
    int best = -1;
    double best_start = 0;
    bool best_comm = false;
    for (int s = 0; s < 2; ++s) {
      if (st[s].k >= st[s].seg->size()) continue;
      const int i = (*st[s].seg)[st[s].k];
      const Op& op = dag.ops(st[s].pass)[i];
      double start = std::max({free_at[int(op.link)], ready_of(s, op), enqueue_at(s, op)});
      if (mem && s == 0 && mem->alloc_f[i] > 0) {
        start = fits_at(start, mem->alloc_f[i]);
        if (start < 0) continue;  // blocked until the backward strand frees more
      }
      const bool comm = op.kind == OpKind::Comm;
      // earliest start; ties: collectives first, then the forward strand (s = 0 comes first)
      if (best < 0 || start < best_start - 1e-9 || (start <= best_start + 1e-9 && comm && !best_comm)) {
        best = s, best_start = start, best_comm = comm;
      }
    }
    if (best < 0) {
      if (st[0].k < st[0].seg->size() || st[1].k < st[1].seg->size())
        throw UsageError("strands: the activation budget is below what the forward strand needs", __FILE__, __LINE__);
      break;
    }
    Strand& s = st[best];
    const int i = (*s.seg)[s.k++];
    const Op& op = dag.ops(s.pass)[i];
    host = enqueue_at(best, op);
    const double end = best_start + std::max(op.solo_us, 0.0);
    free_at[int(op.link)] = end;
    s.ready = end;
    end_of[best][i] = end;
    if (mem && best == 0) allocated += mem->alloc_f[i];
    if (mem && best == 1 && mem->free_b[i] > 0) frees.push_back({end, mem->free_b[i]});
    order.emplace_back(s.pass, i);
    if (end_us) *end_us = std::max(*end_us, end);
  }
  return order;
}

int op_index(const std::vector<Op>& ops, const std::string& name) {
  for (size_t i = 0; i < ops.size(); ++i)
    if (ops[i].name == name) return int(i);
  throw UsageError("strands: no operator " + name + " in the layer", __FILE__, __LINE__);
}

// Adds to `w` (once each) every backward op that reads `t`: whichever of them an issue order runs last.
void add_readers(const Layer& dag, const SavedTensor& t, std::vector<int>& w) {
  std::vector<std::string> readers = t.other_readers;
  readers.push_back(t.last_reader);
  for (const auto& name : readers) {
    const int r = op_index(dag.bwd, name);
    if (std::find(w.begin(), w.end(), r) == w.end()) w.push_back(r);
  }
}

}  // namespace

std::vector<std::pair<Pass, int>> list_schedule(const Layer& dag, const std::vector<int>& fseg,
                                                const std::vector<int>& bseg, double* end_us) {
  return schedule(dag, fseg, bseg, end_us, nullptr);
}

BudgetedSchedule budgeted_whole_pass(const Layer& dag, const std::vector<SavedTensor>& saved, double budget_bytes,
                                     const Plan& searched) {
  const Plan whole = whole_pass_plan(dag, searched);
  MemoryModel mem;
  mem.alloc_f.assign(dag.fwd.size(), 0);
  mem.free_b.assign(dag.bwd.size(), 0);
  for (const auto& t : saved) {
    mem.alloc_f[op_index(dag.fwd, t.producer)] += t.bytes;
    mem.free_b[op_index(dag.bwd, t.last_reader)] += t.bytes;
    mem.live0 += t.bytes;
  }
  mem.budget = budget_bytes;
  BudgetedSchedule r;
  r.order = schedule(dag, whole.steps[0].fwd, whole.steps[0].bwd, &r.makespan_us, &mem);
  return r;
}

BudgetedSchedule best_issue_order(const Layer& dag, const Plan& searched, int beam, bool move_sinks) {
  BRAID_REQUIRE(beam >= 1, "best_issue_order: beam >= 1");
  BRAID_REQUIRE(!dag.dep_ready, "best_issue_order: chained strands only (Layer::dep_ready is not modelled)");
  const Plan whole = whole_pass_plan(dag, searched);
  const std::vector<int>& fo = whole.steps[0].fwd;
  // The backward strand: its main sequence in the given order, and (move_sinks) the weight-gradient
  // sinks, each free to go anywhere after its dependencies.
  std::vector<int> bmain, sinks;
  for (int i : whole.steps[0].bwd)
    (move_sinks && is_sink(dag.bwd[i].name.substr(2)) ? sinks : bmain).push_back(i);
  BRAID_REQUIRE(sinks.size() <= 12, "best_issue_order: too many movable operators");
  const size_t nf = fo.size(), nm = bmain.size(), ns = sinks.size();
  std::vector<int> main_pos(dag.bwd.size(), -1), sink_bit(dag.bwd.size(), -1);
  for (size_t k = 0; k < nm; ++k) main_pos[bmain[k]] = int(k);
  for (size_t j = 0; j < ns; ++j) sink_bit[sinks[j]] = int(j);
  // Is backward op i ready to issue once kb main ops and the sinks in `mask` are issued?
  auto deps_done = [&](int i, size_t kb, uint32_t mask) {
    for (int d : dag.bwd[i].deps) {
      if (main_pos[d] >= 0 && size_t(main_pos[d]) >= kb) return false;
      if (sink_bit[d] >= 0 && !(mask >> sink_bit[d] & 1u)) return false;
    }
    return true;
  };
  // The host gate (Op::host_waits_for): only a forward op waits, for the op just before it in the forward order
  // (the dropless MoE dispatch for its counts), so the waited op's end is the forward strand's free time then.
  for (size_t k = 0; k < nf; ++k) {
    const int w = dag.fwd[fo[k]].host_waits_for;
    BRAID_REQUIRE(w < 0 || (k > 0 && fo[k - 1] == w),
                  "best_issue_order: a host-gated operator must directly follow the operator it waits for");
  }
  for (const Op& o : dag.bwd)
    BRAID_REQUIRE(o.host_waits_for < 0, "best_issue_order: host-gated backward operators are not modelled");
  struct State {
    double t[6];  // free times: compute, local, cross stream; forward, backward strand; the host (last enqueue)
    int parent;   // index into the previous diagonal's arena
    int pass, op; // the op issued last (pass 0 forward, 1 backward)
  };
  auto finish = [](const State& x) { return *std::max_element(x.t, x.t + 5); };
  auto sum = [](const State& x) { return x.t[0] + x.t[1] + x.t[2] + x.t[3] + x.t[4] + x.t[5]; };
  auto dominates = [](const State& a, const State& b) {
    for (int i = 0; i < 6; ++i)
      if (a.t[i] > b.t[i] + 1e-9) return false;
    return true;
  };
  // A cell: (forward ops issued, backward main ops issued, sinks issued); diagonal = ops issued in all.
  using Key = std::tuple<size_t, size_t, uint32_t>;
  const size_t total = nf + nm + ns;
  std::vector<std::vector<State>> arena(total + 1);
  std::vector<std::map<Key, std::vector<int>>> cell(total + 1);
  arena[0].push_back(State{{0, 0, 0, 0, 0, 0}, -1, -1, -1});
  cell[0][Key{0, 0, 0u}] = {0};
  for (size_t d = 0; d < total; ++d) {
    std::map<Key, std::vector<State>> cand;
    for (const auto& [key, idxs] : cell[d]) {
      const auto [kf, kb, mask] = key;
      auto expand = [&](int pass, int op, Key next) {
        const Op& o = pass == 0 ? dag.fwd[op] : dag.bwd[op];
        for (int idx : idxs) {
          State x = arena[d][idx];
          const int l = int(o.link);
          if (o.host_waits_for >= 0) x.t[5] = std::max(x.t[5], x.t[3 + pass]);
          x.t[5] += std::max(o.host_us, 0.0);
          const double end = std::max({x.t[l], x.t[3 + pass], x.t[5]}) + std::max(o.solo_us, 0.0);
          x.t[l] = x.t[3 + pass] = end;
          x.parent = idx, x.pass = pass, x.op = op;
          cand[next].push_back(x);
        }
      };
      if (kf < nf) expand(0, fo[kf], Key{kf + 1, kb, mask});
      if (kb < nm && deps_done(bmain[kb], kb, mask)) expand(1, bmain[kb], Key{kf, kb + 1, mask});
      for (size_t j = 0; j < ns; ++j)
        if (!(mask >> j & 1u) && deps_done(sinks[j], kb, mask)) expand(1, sinks[j], Key{kf, kb, mask | (1u << j)});
    }
    for (auto& [key, v] : cand) {
      std::sort(v.begin(), v.end(), [&](const State& a, const State& b) {
        const double fa = finish(a), fb = finish(b);
        return fa != fb ? fa < fb : sum(a) < sum(b);
      });
      std::vector<int>& kept = cell[d + 1][key];
      for (const State& x : v) {
        if (int(kept.size()) >= beam) break;
        bool dom = false;
        for (int k : kept)
          if (dominates(arena[d + 1][k], x)) {
            dom = true;
            break;
          }
        if (!dom) {
          kept.push_back(int(arena[d + 1].size()));
          arena[d + 1].push_back(x);
        }
      }
    }
  }
  const Key done{nf, nm, ns == 0 ? 0u : (1u << ns) - 1};
  BRAID_REQUIRE(cell[total].count(done) && !cell[total][done].empty(), "best_issue_order: no complete order");
  int best = cell[total][done][0];
  for (int idx : cell[total][done])
    if (finish(arena[total][idx]) < finish(arena[total][best])) best = idx;
  BudgetedSchedule r;
  r.makespan_us = finish(arena[total][best]);
  for (size_t d = total, idx = size_t(best); d > 0; --d) {
    const State& x = arena[d][idx];
    r.order.emplace_back(x.pass == 0 ? Pass::Forward : Pass::Backward, x.op);
    idx = size_t(x.parent);
  }
  std::reverse(r.order.begin(), r.order.end());
  if (whole.total_us < r.makespan_us - 1e-9) {  // the beam dropped the greedy order's prefix
    r.order = list_schedule(dag, fo, whole.steps[0].bwd);
    r.makespan_us = whole.total_us;
  }
  return r;
}

std::vector<OpSpan> plan_timeline(const Layer& dag, const Plan& plan) {
  double free_at[3] = {0, 0, 0};  // compute, local, cross
  double ready[2] = {0, 0};       // forward strand, backward strand
  std::vector<double> end_of[2] = {std::vector<double>(dag.fwd.size(), 0.0), std::vector<double>(dag.bwd.size(), 0.0)};
  std::vector<OpSpan> spans;
  double host = 0;  // the host: when the last op was enqueued (Op::host_waits_for, Op::host_us)
  for (const auto& st : plan.steps)
    for (const auto& [pass, i] : list_schedule(dag, st.fwd, st.bwd)) {
      const Op& op = dag.ops(pass)[i];
      const int s = pass == Pass::Forward ? 0 : 1;
      double r = ready[s];
      if (dag.dep_ready) {
        r = 0;
        for (int d : op.deps) r = std::max(r, end_of[s][d]);
      }
      if (op.host_waits_for >= 0) host = std::max(host, end_of[s][op.host_waits_for]);
      host += std::max(op.host_us, 0.0);  // enqueued once the host has issued it
      const double start = std::max({free_at[int(op.link)], r, host});
      ready[s] = free_at[int(op.link)] = end_of[s][i] = start + std::max(op.solo_us, 0.0);
      spans.push_back({pass, i, start, ready[s]});
    }
  return spans;
}

double plan_makespan_us(const Layer& dag, const Plan& plan) {
  double end = 0;
  for (const auto& s : plan_timeline(dag, plan)) end = std::max(end, s.end_us);
  return end;
}

std::pair<std::vector<char>, std::vector<char>> gemms_beside_collectives(const Layer& dag, const Plan& plan) {
  std::vector<char> f(dag.fwd.size(), 0), b(dag.bwd.size(), 0);
  const auto spans = plan_timeline(dag, plan);
  auto op_of = [&](const OpSpan& x) -> const Op& { return x.pass == Pass::Forward ? dag.fwd[x.op] : dag.bwd[x.op]; };
  for (const auto& g : spans) {
    if (op_of(g).type != "gemm") continue;
    for (const auto& c : spans)
      if (c.pass != g.pass && op_of(c).kind == OpKind::Comm && c.start_us < g.end_us && g.start_us < c.end_us) {
        (g.pass == Pass::Forward ? f : b)[g.op] = 1;
        break;
      }
  }
  return {f, b};
}

std::vector<SavedTensor> saved_tensors(const model::ModelConfig& c, const model::Parallel& p, bool in_place_gathers) {
  const bool moe = c.moe(), gathered = p.sp && p.tp > 1;
  const double T = double(c.tokens()), Tl = gathered ? T / p.tp : T, H = c.hidden;
  const double nqkv = double(c.q_dim() + 2 * c.kv_dim()) / p.tp, qd = double(c.q_dim()) / p.tp;
  const double Fl = moe ? double(c.ffn) : double(c.ffn) / p.tp, hq = double(c.heads) / p.tp;
  const double bf = 2, f32 = 4, i32 = 4;
  // The attention half (dense and MoE alike).
  std::vector<SavedTensor> v = {
      {"rstd1", Tl * f32, "f.norm1", "b.norm1_bwd", {}},
      {"qkv", T * nqkv * bf, "f.qkv_proj", "b.attention_bwd", {}},
      {"o", T * qd * bf, "f.attention", "b.attention_bwd", {"b.out_proj_wgrad"}},
      {"lse", double(c.micro_batch) * hq * c.seq * f32, "f.attention", "b.attention_bwd", {}},
      {"x1", Tl * H * bf, "f.residual_norm2", "b.norm2_bwd", {}},
      {"rstd2", Tl * f32, "f.residual_norm2", "b.norm2_bwd", {}},
  };
  // With sp the gathered copy (the local h1 then only feeds the all-gather), else h1 itself.
  // in_place_gathers (a copy-engine layer placed in a window, model::Layer::place_saved): the norms write their
  // rank's slot of h1f / h2f before the all-gathers fill the rest, so they are the first writers.
  const bool ip = gathered && in_place_gathers;
  const SavedTensor h1 = gathered ? SavedTensor{"h1f", T * H * bf, ip ? "f.norm1" : "f.ag_h1", "b.qkv_wgrad", {}}
                                  : SavedTensor{"h1", Tl * H * bf, "f.norm1", "b.qkv_wgrad", {}};
  if (!moe) {  // (this order is the placement's input order: kept as it was measured)
    v.push_back({"gu", T * 2 * Fl * bf, "f.gate_up_proj", "b.swiglu_bwd", {}});
    v.push_back({"act", T * Fl * bf, "f.swiglu", "b.down_proj_wgrad", {}});
    v.push_back(h1);
    if (gathered) v.push_back({"h2f", T * H * bf, ip ? "f.residual_norm2" : "f.ag_h2", "b.gate_up_wgrad", {}});
    else v.push_back({"h2", Tl * H * bf, "f.residual_norm2", "b.gate_up_wgrad", {}});  // without sp h2f is h2
    return v;
  }
  v.push_back(h1);
  // MoE (model::Layer, src/model/layer.cu): routing state, the combine's input, and the experts' inputs and
  // activations at the layer's worst-case capacity Rmax = T * top_k rows per rank (every token of every
  // rank routed here), which is what the layer allocates. sort_map / unsort_map are written by the counts
  // exchange (a host copy on the op's stream). h2 stays the router's input (router_bwd reads it).
  // With a capacity factor every expert buffer holds exactly E * cap rows (the send side too), the route op
  // writes the static row maps, and the forward's per-expert counts are kept for combine_bwd.
  const int64_t cap = c.expert_capacity(int64_t(Tl));
  const double K = c.top_k, F = double(c.ffn), E = c.experts;
  const double Rmax = cap > 0 ? E * double(cap) : T * K, Srows = cap > 0 ? E * double(cap) : Tl * K;
  const char* maps_by = cap > 0 ? "f.route" : c.moe_device_sizes ? "f.expert_layout" : "f.a2a_counts";
  v.push_back({"h2", Tl * H * bf, "f.residual_norm2", "b.router_bwd", {}});
  v.push_back({"prob", Tl * K * f32, "f.route", "b.combine_bwd", {}});
  v.push_back({"route", Tl * K * i32, "f.route", "b.combine_bwd", {}});
  v.push_back({"pos", Tl * K * i32, "f.route", "b.route_bwd", {"b.combine_bwd"}});
  v.push_back({"sort_map", Rmax * i32, maps_by, "b.expert_sort_bwd", {}});
  v.push_back({"unsort_map", Rmax * i32, maps_by, "b.expert_unsort_bwd", {}});
  v.push_back({"ret", Srows * H * bf, "f.a2a_combine", "b.combine_bwd", {}});
  v.push_back({"xs", Rmax * H * bf, "f.expert_sort", "b.expert_gate_up_wgrad", {}});
  v.push_back({"egu", Rmax * 2 * F * bf, "f.expert_gate_up", "b.expert_swiglu_bwd", {}});
  v.push_back({"eact", Rmax * F * bf, "f.expert_swiglu", "b.expert_down_wgrad", {}});
  if (cap > 0) v.push_back({"counts", E * f32, "f.route", "b.combine_bwd", {}});
  // Counts on the device: the layout expert_layout writes from the gathered counts (row matrix, rows per expert, R; int32
  // kernels::moe_layout_ints), read by every sized op of the backward — the weight gradients may run later.
  if (c.moe_device_sizes) {
    const double El = E / p.tp;
    v.push_back({"moe_layout", (double(p.tp) * p.tp + El + 1) * i32, "f.expert_layout", "b.a2a_dispatch_bwd",
                 {"b.a2a_combine_bwd", "b.expert_sort_bwd", "b.expert_down_dgrad", "b.expert_down_wgrad",
                  "b.expert_swiglu_bwd", "b.expert_gate_up_dgrad", "b.expert_gate_up_wgrad", "b.expert_unsort_bwd"}});
  }
  return v;
}

ArenaPeak two_strand_arena_peak(const Layer& dag, const Plan& plan, const std::vector<SavedTensor>& saved) {
  std::vector<double> fstart(dag.fwd.size(), 0), bend(dag.bwd.size(), 0);
  for (const auto& s : plan_timeline(dag, plan)) {
    if (s.pass == Pass::Forward) fstart[s.op] = s.start_us;
    else bend[s.op] = s.end_us;
  }
  // Events: +bytes when an α tensor's producer starts, -bytes when a β tensor's last reader ends; at one
  // instant frees go first (an op that ends frees before one that starts allocates).
  std::vector<std::pair<double, double>> ev;  // (time, delta)
  ArenaPeak r;
  for (const auto& t : saved) {
    r.one_set_bytes += t.bytes;
    ev.push_back({fstart[op_index(dag.fwd, t.producer)], t.bytes});
    ev.push_back({bend[op_index(dag.bwd, t.last_reader)], -t.bytes});
  }
  std::sort(ev.begin(), ev.end());
  double live = r.one_set_bytes;  // β's whole set at the start
  r.peak_bytes = live;
  for (const auto& [at, d] : ev) {
    live += d;
    if (live > r.peak_bytes) r.peak_bytes = live, r.peak_at_us = at;
  }
  return r;
}

std::vector<std::pair<Pass, int>> plan_issue_order(const Layer& dag, const Plan& plan) {
  std::vector<std::pair<Pass, int>> order;
  for (const auto& st : plan.steps) {
    const auto o = list_schedule(dag, st.fwd, st.bwd);
    order.insert(order.end(), o.begin(), o.end());
  }
  return order;
}

namespace {
// The conflict graph of two strands' saved tensors under an issue order (two_strand_placement): items
// 0..n-1 are a's tensors, n..2n-1 b's; two items conflict (may not overlap) when they belong to one layer
// or when the cross pair may not share.
struct PoolConflicts {
  const std::vector<SavedTensor>& saved;
  size_t n;
  std::vector<int> p, q;  // producer's and last reader's issue positions
  double one_set = 0;
  PoolConflicts(const Layer& dag, const std::vector<std::pair<Pass, int>>& order, const std::vector<SavedTensor>& sv)
      : saved(sv), n(sv.size()), p(sv.size()), q(sv.size()) {
    std::vector<int> fpos(dag.fwd.size(), -1), bpos(dag.bwd.size(), -1);
    for (size_t k = 0; k < order.size(); ++k) (order[k].first == Pass::Forward ? fpos : bpos)[order[k].second] = int(k);
    for (size_t i = 0; i < n; ++i) {
      p[i] = fpos[op_index(dag.fwd, saved[i].producer)];
      q[i] = bpos[op_index(dag.bwd, saved[i].last_reader)];
      for (const auto& r : saved[i].other_readers) q[i] = std::max(q[i], bpos[op_index(dag.bwd, r)]);
      BRAID_REQUIRE(p[i] >= 0 && q[i] >= 0, "two_strand_placement: the order misses a producer or reader");
      one_set += saved[i].bytes;
    }
  }
  bool share(size_t i, size_t j) const { return q[j] < p[i] && q[i] < p[j]; }  // a's i with b's j
  bool conflict(size_t u, size_t v) const {
    const bool ua = u < n, va = v < n;
    if (ua == va) return true;
    return ua ? !share(u, v - n) : !share(v, u - n);
  }
  double bytes_of(size_t u) const { return saved[u % n].bytes; }
  // The heaviest set of pairwise-conflicting items (all of them need disjoint bytes): exhaustive with
  // pruning. At least one set (a's items all conflict).
  double clique_bytes() const {
    double best = 0;
    std::vector<size_t> cand(2 * n);
    for (size_t u = 0; u < 2 * n; ++u) cand[u] = u;
    std::function<void(const std::vector<size_t>&, double)> grow = [&](const std::vector<size_t>& c, double w) {
      best = std::max(best, w);
      double rest = 0;
      for (size_t u : c) rest += bytes_of(u);
      if (w + rest <= best) return;
      for (size_t k = 0; k < c.size(); ++k) {
        std::vector<size_t> nc;
        for (size_t m = k + 1; m < c.size(); ++m)
          if (conflict(c[k], c[m])) nc.push_back(c[m]);
        grow(nc, w + bytes_of(c[k]));
      }
    };
    grow(cand, 0);
    return best;
  }
};
}  // namespace

double two_strand_pool_bound(const Layer& dag, const std::vector<std::pair<Pass, int>>& order,
                             const std::vector<SavedTensor>& saved) {
  return PoolConflicts(dag, order, saved).clique_bytes();
}

ArenaPlacement two_strand_placement(const Layer& dag, const std::vector<std::pair<Pass, int>>& order,
                                    const std::vector<SavedTensor>& saved, const PlacementChoice* choice) {
  const PoolConflicts pc(dag, order, saved);
  const size_t n = pc.n;
  ArenaPlacement r;
  r.one_set_bytes = pc.one_set;
  auto conflict = [&](size_t u, size_t v) { return pc.conflict(u, v); };
  auto bytes_of = [&](size_t u) { return pc.bytes_of(u); };
  // First fit in a given insertion order: each item at the lowest offset clear of every placed item it
  // conflicts with.
  auto first_fit = [&](const std::vector<size_t>& ins, std::vector<double>& off) {
    off.assign(2 * n, -1);
    double top = 0;
    std::vector<std::pair<double, double>> busy;
    for (size_t u : ins) {
      busy.clear();
      for (size_t v = 0; v < 2 * n; ++v)
        if (off[v] >= 0 && conflict(u, v)) busy.push_back({off[v], off[v] + bytes_of(v)});
      std::sort(busy.begin(), busy.end());
      double at = 0;
      for (const auto& [lo, hi] : busy) {
        if (lo - at >= bytes_of(u)) break;
        at = std::max(at, hi);
      }
      off[u] = at;
      top = std::max(top, at + bytes_of(u));
    }
    return top;
  };
  // Insertion orders tried: largest first with a's and b's copy of each tensor in turn (the original rule),
  // a's whole set then b's, then seeded random permutations; the smallest pool wins (first fit is not
  // optimal for any one order, and the instance is small: 2n items).
  std::vector<size_t> by_size(n);
  for (size_t i = 0; i < n; ++i) by_size[i] = i;
  std::stable_sort(by_size.begin(), by_size.end(), [&](size_t x, size_t y) { return saved[x].bytes > saved[y].bytes; });
  std::vector<std::vector<size_t>> orders(2);
  for (size_t i : by_size) orders[0].push_back(i), orders[0].push_back(i + n);
  for (size_t i : by_size) orders[1].push_back(i);
  for (size_t i : by_size) orders[1].push_back(i + n);
  std::vector<size_t> perm = orders[0];
  uint64_t rng = 0x9e3779b97f4a7c15ull;
  auto next = [&]() {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
  };
  std::vector<double> off, best_off, chosen_off;
  double best = -1, chosen = -1, chosen_cost = 0;
  const int kRandom = 4000;
  ArenaPlacement cand = r;  // a candidate, for the choice's cost
  std::set<std::vector<double>> seen;
  for (int t = 0; t < 2 + kRandom; ++t) {
    if (t >= 2) {
      for (size_t k = perm.size(); k > 1; --k) std::swap(perm[k - 1], perm[next() % k]);
    }
    const double top = first_fit(t < 2 ? orders[t] : perm, off);
    if (best < 0 || top < best - 1e-9) best = top, best_off = off;
    if (choice && top <= choice->budget_bytes && seen.insert(off).second) {  // each distinct placement once
      cand.offset_a.assign(off.begin(), off.begin() + long(n));
      cand.offset_b.assign(off.begin() + long(n), off.end());
      cand.pool_bytes = top;
      const double c = choice->cost(saved, cand);
      if (chosen < 0 || c < chosen_cost - 1e-9 || (c < chosen_cost + 1e-9 && top < chosen - 1e-9))
        chosen = top, chosen_cost = c, chosen_off = off;
    }
  }
  if (chosen >= 0) best = chosen, best_off = chosen_off;  // the choice's pick (it fits the budget)
  r.offset_a.assign(best_off.begin(), best_off.begin() + long(n));
  r.offset_b.assign(best_off.begin() + long(n), best_off.end());
  r.pool_bytes = best;
  r.lower_bound_bytes = pc.clique_bytes();  // no placement for this order goes below it
  return r;
}

std::vector<std::vector<int>> memory_waits(const Layer& dag, const std::vector<SavedTensor>& saved,
                                           const ArenaPlacement& placement, bool a_forward) {
  const size_t n = saved.size();
  BRAID_REQUIRE(placement.offset_a.size() == n && placement.offset_b.size() == n, "memory_waits: placement size");
  const auto& fo = a_forward ? placement.offset_a : placement.offset_b;  // the forward layer's tensors
  const auto& bo = a_forward ? placement.offset_b : placement.offset_a;
  std::vector<std::vector<int>> waits(dag.fwd.size());
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < n; ++j) {
      const bool overlap = fo[i] < bo[j] + saved[j].bytes && bo[j] < fo[i] + saved[i].bytes;
      if (!overlap) continue;
      add_readers(dag, saved[j], waits[op_index(dag.fwd, saved[i].producer)]);
    }
  return waits;
}

double placement_wait_cost(const Layer& dag, const std::vector<std::pair<Pass, int>>& order,
                           const std::vector<SavedTensor>& saved, const ArenaPlacement& placement,
                           const PairTable& table, double weight) {
  return 0.5 * (corun_makespan_us(dag, order, table, weight, memory_waits(dag, saved, placement, true)) +
                corun_makespan_us(dag, order, table, weight, memory_waits(dag, saved, placement, false)));
}

std::vector<std::vector<int>> slot_reuse_waits(const Layer& dag, const std::vector<SavedTensor>& saved,
                                               const std::vector<std::string>& names) {
  std::vector<std::vector<int>> waits(dag.fwd.size());
  for (const auto& name : names) {
    const auto t = std::find_if(saved.begin(), saved.end(), [&](const SavedTensor& x) { return x.name == name; });
    BRAID_REQUIRE(t != saved.end(), "slot_reuse_waits: no saved tensor " + name);
    add_readers(dag, *t, waits[op_index(dag.fwd, t->producer)]);
  }
  return waits;
}

double corun_makespan_us(const Layer& dag, const std::vector<std::pair<Pass, int>>& order, const PairTable& table,
                         double weight, const std::vector<std::vector<int>>& fwd_waits) {
  BRAID_REQUIRE(weight >= 0, "corun_makespan_us: weight >= 0");
  BRAID_REQUIRE(fwd_waits.empty() || fwd_waits.size() == dag.fwd.size(),
                "corun_makespan_us: fwd_waits needs one list per forward op");
  const size_t n = order.size();
  BRAID_REQUIRE(n == dag.fwd.size() + dag.bwd.size(), "corun_makespan_us: the order must hold every op once");
  const Op* ops[2] = {dag.fwd.data(), dag.bwd.data()};
  auto op_of = [&](size_t k) -> const Op& { return ops[order[k].first == Pass::Forward ? 0 : 1][order[k].second]; };
  // Per item: its stream, its predecessors (the previous item on its stream; its strand's previous item
  // or its deps), its work (solo us).
  std::vector<int> stream(n);
  std::vector<std::vector<size_t>> preds(n);
  std::vector<double> work(n);
  std::vector<int> pos[2] = {std::vector<int>(dag.fwd.size(), -1), std::vector<int>(dag.bwd.size(), -1)};
  int last_on[3] = {-1, -1, -1}, last_of[2] = {-1, -1};
  std::vector<int> gate_item(n, -1);  // the item whose end the host waits for before issuing item k (Op::host_waits_for)
  std::vector<double> host_us(n, 0.0);
  for (size_t k = 0; k < n; ++k) {
    const int s = order[k].first == Pass::Forward ? 0 : 1;
    const Op& op = op_of(k);
    BRAID_REQUIRE(pos[s][order[k].second] < 0, "corun_makespan_us: an op issued twice");
    pos[s][order[k].second] = int(k);
    stream[k] = int(op.link);
    work[k] = std::max(op.solo_us, 0.0);
    if (op.host_waits_for >= 0) {
      BRAID_REQUIRE(pos[s][op.host_waits_for] >= 0, "corun_makespan_us: a host-gated op issued before the op it waits for");
      gate_item[k] = pos[s][op.host_waits_for];
    }
    host_us[k] = std::max(op.host_us, 0.0);
    if (last_on[stream[k]] >= 0) preds[k].push_back(size_t(last_on[stream[k]]));
    if (dag.dep_ready) {
      for (int d : op.deps) {
        BRAID_REQUIRE(pos[s][d] >= 0, "corun_makespan_us: an op issued before its dependency");
        preds[k].push_back(size_t(pos[s][d]));
      }
    } else if (last_of[s] >= 0) {
      preds[k].push_back(size_t(last_of[s]));
    }
    if (s == 0 && !fwd_waits.empty())
      for (int j : fwd_waits[size_t(order[k].second)]) {  // the pool's waits: backward readers of reused memory
        BRAID_REQUIRE(j >= 0 && size_t(j) < dag.bwd.size() && pos[1][size_t(j)] >= 0,
                      "corun_makespan_us: a memory wait on a backward op not issued before its forward op");
        preds[k].push_back(size_t(pos[1][size_t(j)]));
      }
    last_on[stream[k]] = int(k), last_of[s] = int(k);
  }
  // Pairwise slowdowns of the items that may overlap (different streams), from the table.
  auto slow = [&](size_t a, size_t b) {
    const Op &x = op_of(a), &y = op_of(b);
    const auto t = table.corun_us(x.name, y.name);
    const double da = work[a], db = work[b];
    if (!t || da <= 0 || db <= 0) return 1.0;
    return 1.0 + weight * std::max(0.0, *t - std::max(da, db)) / std::min(da, db);
  };
  std::vector<double> left = work, enqueued(n, 0.0), done_at(n, 0.0);
  std::vector<char> done(n, 0), running(n, 0);
  double now = 0, host = 0;
  size_t finished = 0, issued = 0;
  while (finished < n) {
    // The host issues in order: item k is enqueued at max(the previous enqueue, its gate item's end) + its issue
    // time; a gated item waits (and every item after it) until its gate item is done.
    for (; issued < n; ++issued) {
      const int g = gate_item[issued];
      if (g >= 0 && !done[size_t(g)]) break;
      host = (g >= 0 ? std::max(host, done_at[size_t(g)]) : host) + host_us[issued];
      enqueued[issued] = host;
    }
    // Start every enqueued item whose predecessors are done and whose stream is idle (streams are FIFOs in order).
    for (size_t k = 0; k < issued; ++k) {
      if (done[k] || running[k] || enqueued[k] > now + 1e-9) continue;
      bool ok = true;
      for (size_t p : preds[k]) ok = ok && done[p];
      if (ok) running[k] = 1;
    }
    std::vector<size_t> run;
    for (size_t k = 0; k < n; ++k)
      if (running[k]) run.push_back(k);
    // Rates, then the next event: a completion, or an item's enqueue.
    std::vector<double> rate(run.size(), 1.0);
    for (size_t i = 0; i < run.size(); ++i)
      for (size_t j = 0; j < run.size(); ++j)
        if (i != j) rate[i] = std::min(rate[i], 1.0 / slow(run[i], run[j]));
    double dt = std::numeric_limits<double>::infinity();
    for (size_t i = 0; i < run.size(); ++i) dt = std::min(dt, left[run[i]] / rate[i]);
    for (size_t k = 0; k < issued; ++k)
      if (!done[k] && !running[k] && enqueued[k] > now + 1e-9) dt = std::min(dt, enqueued[k] - now);
    BRAID_REQUIRE(std::isfinite(dt), "corun_makespan_us: no op can start (internal error)");
    now += dt;
    for (size_t i = 0; i < run.size(); ++i) {
      left[run[i]] -= dt * rate[i];
      if (left[run[i]] <= 1e-9 * std::max(1.0, work[run[i]])) {
        left[run[i]] = 0, running[run[i]] = 0, done[run[i]] = 1, done_at[run[i]] = now, ++finished;
      }
    }
  }
  return now;
}

BudgetedSchedule corun_issue_order(const Layer& dag, const std::vector<std::vector<std::pair<Pass, int>>>& starts,
                                   const PairTable& table, double weight, int max_rounds) {
  BRAID_REQUIRE(!starts.empty(), "corun_issue_order: needs a start order");
  BudgetedSchedule best;
  best.makespan_us = std::numeric_limits<double>::infinity();
  for (auto order : starts) {
    double cur = corun_makespan_us(dag, order, table, weight);
    for (int round = 0; round < max_rounds; ++round) {
      bool improved = false;
      for (size_t k = 0; k + 1 < order.size(); ++k) {
        if (order[k].first == order[k + 1].first) continue;  // each pass keeps its own order
        std::swap(order[k], order[k + 1]);
        // A swap may put an op before its dependency only within one pass, which adjacent ops of two
        // passes never are: every swapped order is valid for the executor.
        const double t = corun_makespan_us(dag, order, table, weight);
        if (t < cur - 1e-6) cur = t, improved = true;
        else std::swap(order[k], order[k + 1]);
      }
      if (!improved) break;
    }
    if (cur < best.makespan_us) best.makespan_us = cur, best.order = order;
  }
  return best;
}

namespace {
// Every op once, each after its dependencies (its pass's DAG) and a host-gated op after its gate.
bool respects_deps(const Layer& dag, const std::vector<std::pair<Pass, int>>& order) {
  std::vector<int> pos[2] = {std::vector<int>(dag.fwd.size(), -1), std::vector<int>(dag.bwd.size(), -1)};
  for (size_t k = 0; k < order.size(); ++k) {
    auto& ps = pos[order[k].first == Pass::Forward ? 0 : 1];
    if (order[k].second < 0 || size_t(order[k].second) >= ps.size()) return false;
    int& p = ps[size_t(order[k].second)];
    if (p >= 0) return false;
    p = int(k);
  }
  for (size_t k = 0; k < order.size(); ++k) {
    const int s = order[k].first == Pass::Forward ? 0 : 1;
    const Op& op = dag.ops(order[k].first)[size_t(order[k].second)];
    for (int d : op.deps)
      if (pos[s][size_t(d)] < 0 || pos[s][size_t(d)] > int(k)) return false;
    if (op.host_waits_for >= 0 && (pos[s][size_t(op.host_waits_for)] < 0 || pos[s][size_t(op.host_waits_for)] > int(k)))
      return false;
  }
  return true;
}
}  // namespace

namespace {
// The free-moves search of corun_moves_issue_order: from each start that `fits`, rounds of first improvement of
// corun_makespan_us over one op moved to any position its dependencies allow, a move taken only when the moved
// order also `fits` (checked after the make-span: it may cost more); a round ends at its first improving move (the
// scan starts again from the front of the new order). The best over the fitting starts (+inf, empty if none).
BudgetedSchedule free_moves_search(const Layer& dag, const std::vector<std::vector<std::pair<Pass, int>>>& starts,
                                   const PairTable& table, double weight, int max_rounds, const char* who,
                                   const std::function<bool(const std::vector<std::pair<Pass, int>>&)>& fits) {
  BRAID_REQUIRE(!starts.empty(), std::string(who) + ": needs a start order");
  using Order = std::vector<std::pair<Pass, int>>;
  BudgetedSchedule best;
  best.makespan_us = std::numeric_limits<double>::infinity();
  for (Order order : starts) {
    BRAID_REQUIRE(order.size() == dag.fwd.size() + dag.bwd.size() && respects_deps(dag, order),
                  std::string(who) + ": a start order is not a valid issue order of the DAG");
    if (!fits(order)) continue;
    double cur = corun_makespan_us(dag, order, table, weight);
    for (int round = 0; round < max_rounds; ++round) {
      bool improved = false;
      for (size_t k = 0; k < order.size() && !improved; ++k)
        for (size_t to = 0; to < order.size() && !improved; ++to) {
          if (to == k) continue;
          Order c = order;
          const auto op = c[k];
          c.erase(c.begin() + long(k));
          c.insert(c.begin() + long(to), op);
          if (!respects_deps(dag, c)) continue;
          const double t = corun_makespan_us(dag, c, table, weight);
          if (t < cur - 1e-6 && fits(c)) cur = t, order = std::move(c), improved = true;
        }
      if (!improved) break;
    }
    if (cur < best.makespan_us) best.makespan_us = cur, best.order = order;
  }
  return best;
}
}  // namespace

BudgetedSchedule corun_moves_issue_order(const Layer& dag, const std::vector<std::vector<std::pair<Pass, int>>>& starts,
                                         const PairTable& table, double weight, int max_rounds) {
  return free_moves_search(dag, starts, table, weight, max_rounds, "corun_moves_issue_order",
                           [](const std::vector<std::pair<Pass, int>>&) { return true; });
}

BudgetedSchedule pool_bounded_moves_issue_order(const Layer& dag,
                                                const std::vector<std::vector<std::pair<Pass, int>>>& starts,
                                                const std::vector<SavedTensor>& saved, double budget_bytes,
                                                const PairTable& table, double weight, int max_rounds) {
  return free_moves_search(dag, starts, table, weight, max_rounds, "pool_bounded_moves_issue_order",
                           [&](const std::vector<std::pair<Pass, int>>& o) {
                             return two_strand_pool_bound(dag, o, saved) <= budget_bytes;
                           });
}

BudgetedSchedule pool_bounded_issue_order(const Layer& dag, const std::vector<std::vector<std::pair<Pass, int>>>& starts,
                                          const std::vector<SavedTensor>& saved, double budget_bytes,
                                          const PairTable& table, double weight, int max_rounds) {
  BRAID_REQUIRE(!starts.empty(), "pool_bounded_issue_order: needs a start order");
  using Order = std::vector<std::pair<Pass, int>>;
  const double inf = std::numeric_limits<double>::infinity();
  // Moves: one op shifted past 1..kMaxShift consecutive ops of the other pass, left or right (each pass
  // keeps its own order, so every result is a valid interleaving; a shift of 1 is an adjacent swap).
  constexpr int kMaxShift = 16;
  auto moved = [](const Order& o, size_t k, int shift) {  // shift > 0: right, < 0: left; empty if illegal
    const int to = int(k) + shift;
    if (to < 0 || to >= int(o.size())) return Order{};
    const int step = shift > 0 ? 1 : -1;
    for (int j = int(k) + step; j != to + step; j += step)
      if (o[size_t(j)].first == o[k].first) return Order{};
    Order r = o;
    r.erase(r.begin() + long(k));
    r.insert(r.begin() + to, o[k]);  // at position `to` of the result, either direction
    return r;
  };
  BudgetedSchedule best;
  best.makespan_us = inf;
  double best_bound = inf;
  Order lowest;  // the lowest-bound order seen, if none fits
  for (Order order : starts) {
    double bound = two_strand_pool_bound(dag, order, saved);
    double cur = corun_makespan_us(dag, order, table, weight);
    // Phase 1: while the bound is over budget, the move that lowers it most (ties: the shorter make-span).
    for (int round = 0; bound > budget_bytes && round < max_rounds; ++round) {
      Order pick;
      double pick_bound = bound, pick_t = cur;
      for (size_t k = 0; k < order.size(); ++k)
        for (int sh = -kMaxShift; sh <= kMaxShift; ++sh) {
          if (sh == 0) continue;
          const Order o = moved(order, k, sh);
          if (o.empty()) continue;
          const double b = two_strand_pool_bound(dag, o, saved);
          if (b > pick_bound + 1e-6 || (pick.empty() && b >= bound - 1e-6)) continue;
          const double t = corun_makespan_us(dag, o, table, weight);
          if (b < pick_bound - 1e-6 || t < pick_t) pick = o, pick_bound = b, pick_t = t;
        }
      if (pick.empty()) break;  // no move lowers the bound
      order = pick, bound = pick_bound, cur = pick_t;
    }
    if (bound < best_bound) best_bound = bound, lowest = order;
    if (bound > budget_bytes) continue;
    // Phase 2: first improvements of the make-span among moves that keep the bound within budget.
    for (int round = 0; round < max_rounds; ++round) {
      bool improved = false;
      for (size_t k = 0; k < order.size(); ++k)
        for (int sh = -kMaxShift; sh <= kMaxShift; ++sh) {
          if (sh == 0) continue;
          const Order o = moved(order, k, sh);
          if (o.empty()) continue;
          const double t = corun_makespan_us(dag, o, table, weight);
          if (t < cur - 1e-6 && two_strand_pool_bound(dag, o, saved) <= budget_bytes) {
            order = o, cur = t, improved = true;
          }
        }
      if (!improved) break;
    }
    if (cur < best.makespan_us) best.makespan_us = cur, best.order = order;
  }
  if (best.order.empty()) best.order = lowest;  // nothing fits: the lowest bound found, makespan_us = inf
  return best;
}

OnePoolOrders one_pool_orders(const Layer& dag, const std::vector<std::vector<std::pair<Pass, int>>>& starts1,
                              const std::vector<std::vector<std::pair<Pass, int>>>& starts2, const PairTable& table,
                              const std::vector<SavedTensor>& saved, double budget_bytes,
                              const std::vector<double>& weights) {
  BRAID_REQUIRE(!starts1.empty() && !starts2.empty(), "one_pool_orders: needs one- and two-link start orders");
  const Layer dag2 = two_link_layer(dag), dd2 = dep_ready_layer(dag2);
  OnePoolOrders r;
  r.one_link = pool_bounded_issue_order(dag, starts1, saved, budget_bytes, table);
  auto s2 = starts2;
  if (std::isfinite(r.one_link.makespan_us)) s2.push_back(r.one_link.order);
  r.two_links = pool_bounded_issue_order(dag2, s2, saved, budget_bytes, table);
  std::vector<std::vector<std::pair<Pass, int>>> fit;
  for (const auto* q : {&r.one_link, &r.two_links})
    if (std::isfinite(q->makespan_us)) fit.push_back(q->order);
  if (fit.empty()) return r;
  for (const double w : weights) {
    const auto pm = pool_bounded_moves_issue_order(dd2, fit, saved, budget_bytes, table, w);
    if (!std::isfinite(pm.makespan_us)) continue;
    bool seen = false;
    for (const auto& m : r.moves) seen |= m.order == pm.order;
    if (!seen) r.moves.push_back({w, pm.order, pm.makespan_us});
  }
  return r;
}

PlacementChoice wait_aware_choice(const Layer& dag, const std::vector<std::pair<Pass, int>>& order,
                                  const PairTable& table, double budget_bytes, double weight) {
  PlacementChoice c;
  c.budget_bytes = budget_bytes;
  c.cost = [&dag, &order, &table, weight](const std::vector<SavedTensor>& sv, const ArenaPlacement& pl) {
    return placement_wait_cost(dag, order, sv, pl, table, weight);
  };
  return c;
}

Layer two_link_layer(Layer dag) {
  for (auto& op : dag.bwd)
    if (op.kind == OpKind::Comm && op.link == LinkClass::Local) op.link = LinkClass::Cross;
  return dag;
}

Layer dep_ready_layer(Layer dag) {
  dag.dep_ready = true;
  return dag;
}

std::vector<int> sinks_beside_collectives(const Layer& dag, Pass p, double comm_scale) {
  const auto& ops = dag.ops(p);
  const int n = int(ops.size());
  std::vector<int> order, held;  // held: sinks not issued yet, in pass order
  order.reserve(size_t(n));
  auto depends = [&](int k, int h) { return std::find(ops[size_t(k)].deps.begin(), ops[size_t(k)].deps.end(), h) != ops[size_t(k)].deps.end(); };
  int last_comm = -1;
  for (int k = 0; k < n; ++k)
    if (ops[size_t(k)].kind == OpKind::Comm) last_comm = k;
  for (int k = 0; k < n; ++k) {
    const Op& o = ops[size_t(k)];
    if (is_sink(o.name.substr(2)) && o.kind == OpKind::Compute) {
      held.push_back(k);
      continue;
    }
    for (auto it = held.begin(); it != held.end();) {  // what k waits for goes first
      if (depends(k, *it)) {
        order.push_back(*it);
        it = held.erase(it);
      } else {
        ++it;
      }
    }
    order.push_back(k);
    if (o.kind != OpKind::Comm) continue;
    const double need = o.solo_us * comm_scale;
    double got = 0;
    while (!held.empty() && (k == last_comm || got < need)) {
      got += ops[size_t(held.back())].solo_us;
      order.push_back(held.back());
      held.pop_back();
    }
  }
  order.insert(order.end(), held.begin(), held.end());
  return order;
}

Layer opening_chunked_layer(Layer dag) {
  const std::pair<const char*, const char*> pairs[] = {{"f.ag_h1", "f.qkv_proj"}, {"b.ag_dy", "b.down_proj_dgrad"}};
  for (const auto& [coll, gemm] : pairs) {
    const Pass pass = coll[0] == 'f' ? Pass::Forward : Pass::Backward;
    const int c = dag.find(pass, coll), g = dag.find(pass, gemm);
    if (c < 0 || g < 0) continue;
    auto& ops = pass == Pass::Forward ? dag.fwd : dag.bwd;
    // The GEMM operator waits for the chunks itself (model::Layer's events), not for the all-gather operator's end:
    // it takes the all-gather's own dependencies instead.
    auto& gd = ops[size_t(g)].deps;
    if (std::find(gd.begin(), gd.end(), c) != gd.end()) {
      gd.erase(std::find(gd.begin(), gd.end(), c));
      for (int d : ops[size_t(c)].deps)
        if (std::find(gd.begin(), gd.end(), d) == gd.end()) gd.push_back(d);
    }
    for (int i = 0; i < int(ops.size()); ++i) {
      auto& d = ops[size_t(i)].deps;
      if (i == g || std::find(d.begin(), d.end(), c) == d.end() || std::find(d.begin(), d.end(), g) != d.end()) continue;
      BRAID_REQUIRE(i > g, "opening_chunked_layer: " + ops[size_t(i)].name + " reads " + coll + " but comes before " +
                               gemm + " in the pass (internal error)");
      d.push_back(g);
    }
  }
  return dag;
}

Plan order_plan(const Layer& dag, const std::vector<std::pair<Pass, int>>& order) {
  Plan p;
  for (const auto& [pass, i] : order) {
    PlanStep st;
    (pass == Pass::Forward ? st.fwd : st.bwd).push_back(i);
    (pass == Pass::Forward ? p.fwd_order : p.bwd_order).push_back(i);
    st.time_us = std::max(dag.ops(pass)[i].solo_us, 0.0);
    p.steps.push_back(st);
  }
  p.total_us = plan_makespan_us(dag, p);
  return p;
}

Plan whole_pass_plan(const Layer& dag, const Plan& searched) {
  Plan p;
  auto iota = [](size_t n) {
    std::vector<int> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = int(i);
    return v;
  };
  p.fwd_order = searched.fwd_order.size() == dag.fwd.size() ? searched.fwd_order : iota(dag.fwd.size());
  p.bwd_order = searched.bwd_order.size() == dag.bwd.size() ? searched.bwd_order : iota(dag.bwd.size());
  PlanStep st;
  st.fwd = p.fwd_order, st.bwd = p.bwd_order;
  p.steps.push_back(st);
  p.serial_us = searched.serial_us, p.comm_us = searched.comm_us;
  list_schedule(dag, st.fwd, st.bwd, &p.total_us);
  p.steps[0].time_us = p.total_us;
  return p;
}

}  // namespace braid::schedule
