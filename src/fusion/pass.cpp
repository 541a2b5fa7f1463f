// The Chimera pass: split all-reduces, hoist gating, fuse adjacent communication (Table 3).
#include <algorithm>
#include <stdexcept>

#include "braid/fusion/cost.hpp"
#include "braid/fusion/pass.hpp"

namespace braid::fusion {
namespace {

bool is_output(const Graph& g, int t) { return std::count(g.outputs.begin(), g.outputs.end(), t) > 0; }

// True when `t` is read by exactly one operator and is not a graph output.
bool single_use(const Graph& g, int t) { return g.consumers(t).size() == 1 && !is_output(g, t); }

bool full_rows(const Tensor& t) {
  const int last = static_cast<int>(t.shape.size()) - 1;
  return t.layout.dist != Dist::Partial && t.layout.dist != Dist::Routed &&
         !(t.layout.dist == Dist::Sharded && t.layout.dim == last);
}

bool token_sharded(const Graph& g, const Layout& l) {
  return (l.dist == Dist::Sharded && (l.dim == 0 || l.dim == 1)) ||
         (l.dist == Dist::Replicated && g.groups[l.group].ranks.size() == 1);
}

double volume(const Graph& g, const Op& op) { return op_cost(g, op, Link{}).volume; }

std::string label(const Op& op) {
  std::string s = kind_name(op.kind);
  if (op.route == Route::Dispatch) s += "(dispatch)";
  if (op.route == Route::Combine) s += "(combine)";
  return s;
}

// Drops operators whose result nobody reads.
void drop_dead(Graph& g) {
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = g.ops.size(); i-- > 0;)
      if (g.consumers(g.ops[i].out).empty() && !is_output(g, g.ops[i].out)) {
        g.ops.erase(g.ops.begin() + static_cast<long>(i));
        changed = true;
      }
  }
}

// Makes every reader of tensor `from` read `to` instead (graph outputs included).
void replace_uses(Graph& g, int from, int to) {
  for (Op& op : g.ops) std::replace(op.in.begin(), op.in.end(), from, to);
  std::replace(g.outputs.begin(), g.outputs.end(), from, to);
}

// One fusion, or false when none applies. `keep` is the index of the later operator; it becomes
// the fused operator (or disappears), and the earlier ones are erased.
bool fuse_once(Graph& g, std::vector<std::string>* log) {
  auto record = [&](const std::string& s) {
    if (log) log->push_back(s);
  };
  for (size_t i = 0; i < g.ops.size(); ++i) {
    const Op later = g.ops[i];
    // move + move -> one move, or nothing (AG+Split, AG+P2P, AG+M2MS, A2A+A2A, ...)
    if (later.route == Route::None && is_plain_move(g, later)) {
      const int p = g.producer(later.in[0]);
      if (p < 0 || !is_plain_move(g, g.ops[p]) || !single_use(g, later.in[0])) continue;
      const Op earlier = g.ops[p];
      const Layout& l0 = g.tensors[earlier.in[0]].layout;
      const Layout& l2 = g.tensors[later.out].layout;
      std::optional<OpKind> k;
      try {
        k = classify(g, l0, l2);
      } catch (const std::invalid_argument&) {
        continue;
      }
      const double before = volume(g, earlier) + volume(g, later);
      if (!k) {
        if (before <= 0) continue;
        replace_uses(g, later.out, earlier.in[0]);
        g.ops.erase(g.ops.begin() + static_cast<long>(std::max<size_t>(i, p)));
        g.ops.erase(g.ops.begin() + static_cast<long>(std::min<size_t>(i, p)));
        record(label(earlier) + " + " + label(later) + " -> nothing");
        return true;
      }
      const Op fused{*k, {earlier.in[0]}, later.out};
      if (volume(g, fused) >= before) continue;
      g.ops[i] = fused;
      g.ops.erase(g.ops.begin() + p);
      record(label(earlier) + " + " + label(later) + " -> " + label(fused));
      return true;
    }
    // move + dispatch -> dispatch from the earlier layout (A-G+A2A, P2P+A2A, A2A+A2A)
    if (later.route == Route::Dispatch) {
      const int px = g.producer(later.in[0]), pr = g.producer(later.in[1]);
      if (px < 0 || pr < 0 || !is_plain_move(g, g.ops[px]) || !is_plain_move(g, g.ops[pr])) continue;
      if (!single_use(g, later.in[0]) || !single_use(g, later.in[1])) continue;
      const Op mx = g.ops[px], mr = g.ops[pr];
      const Layout& l0 = g.tensors[mx.in[0]].layout;
      if (mx.kind != mr.kind || !(g.tensors[mr.in[0]].layout == l0) || !token_sharded(g, l0)) continue;
      const Layout& routed = g.tensors[later.out].layout;
      const Op fused{*classify(g, l0, routed, Route::Dispatch), {mx.in[0], mr.in[0]}, later.out, Route::Dispatch};
      if (volume(g, fused) >= volume(g, mx) + volume(g, later)) continue;
      g.ops[i] = fused;
      g.ops.erase(g.ops.begin() + std::max(px, pr));
      g.ops.erase(g.ops.begin() + std::min(px, pr));
      record(label(mx) + " + " + label(later) + " -> " + label(fused));
      return true;
    }
  }
  // combine + move -> combine into the later layout (A2A+A2A, A2A+P2P)
  for (size_t i = 0; i < g.ops.size(); ++i) {
    const Op later = g.ops[i];
    if (!is_plain_move(g, later)) continue;
    const int p = g.producer(later.in[0]);
    if (p < 0 || g.ops[p].route != Route::Combine || !single_use(g, later.in[0])) continue;
    const Op earlier = g.ops[p];
    const Layout& l2 = g.tensors[later.out].layout;
    if (!token_sharded(g, l2)) continue;
    const Layout& routed = g.tensors[earlier.in[0]].layout;
    const Op fused{*classify(g, routed, l2, Route::Combine), {earlier.in[0]}, later.out, Route::Combine};
    if (volume(g, fused) >= volume(g, earlier) + volume(g, later)) continue;
    g.ops[i] = fused;
    g.ops.erase(g.ops.begin() + p);
    record(label(earlier) + " + " + label(later) + " -> " + label(fused));
    return true;
  }
  return false;
}

}  // namespace

Graph split_allreduce(const Graph& in) {
  Graph g = in;
  g.ops.clear();
  for (const Op& op : in.ops) {
    if (op.kind != OpKind::AllReduce) {
      g.ops.push_back(op);
      continue;
    }
    const Tensor x = g.tensors[op.in[0]];
    const int n = static_cast<int>(g.groups[x.layout.group].ranks.size());
    int dim = ar_dim(g, x);
    const std::vector<int> readers = in.consumers(op.out);
    if (readers.size() == 1) {  // scatter on the dimension the reader shards, so the AG can meet it
      const Layout& want = in.tensors[in.ops[readers[0]].out].layout;
      if (want.dist == Dist::Sharded && x.shape[want.dim] % n == 0) dim = want.dim;
    }
    Tensor mid = x;
    mid.name = g.tensors[op.out].name + ".rs";
    mid.layout = Layout{Dist::Sharded, x.layout.group, dim};
    const int t = g.add_tensor(mid);
    g.ops.push_back(Op{OpKind::ReduceScatter, {op.in[0]}, t});
    g.ops.push_back(Op{OpKind::AllGather, {t}, op.out});
  }
  validate(g);
  return g;
}

Graph hoist_gating(const Graph& in) {
  Graph g = in;
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t gi = 0; gi < g.ops.size() && !changed; ++gi) {
      const Op gate = g.ops[gi];
      if (gate.kind != OpKind::Gate) continue;
      const int p = g.producer(gate.in[0]);
      if (p < 0 || !is_plain_move(g, g.ops[p])) continue;
      const Op move = g.ops[p];
      if (!full_rows(g.tensors[move.in[0]])) continue;  // never gate a partial sum
      // gate(move(x0)) == move'(gate(x0)): the gate is token-local and the move does not add.
      Tensor r0 = g.tensors[gate.out];
      r0.name += ".early";
      r0.layout = g.tensors[move.in[0]].layout;
      const int r0_id = g.add_tensor(r0);
      Op early = gate;
      early.in = {move.in[0]};
      early.out = r0_id;
      const Op carry{*classify(g, r0.layout, g.tensors[gate.out].layout), {r0_id}, gate.out};
      g.ops.erase(g.ops.begin() + static_cast<long>(gi));
      g.ops.insert(g.ops.begin() + p + 1, carry);
      g.ops.insert(g.ops.begin() + p, early);
      changed = true;
    }
  }
  validate(g);
  return g;
}

Graph fuse_communication(const Graph& in, std::vector<std::string>* log) {
  Graph g = in;
  while (fuse_once(g, log)) {
  }
  drop_dead(g);
  validate(g);
  return g;
}

Graph chimera(const Graph& in, std::vector<std::string>* log) {
  const Graph split = split_allreduce(in);
  std::vector<std::string> plain_log, hoist_log;
  const Graph plain = fuse_communication(split, &plain_log);
  const Graph hoisted = fuse_communication(hoist_gating(split), &hoist_log);
  // Reordering gates adds moves of the routing tensor; keep it only when it pays off.
  const bool use_hoist = total_volume(hoisted) < total_volume(plain);
  if (log) {
    for (const Op& op : in.ops)
      if (op.kind == OpKind::AllReduce) log->push_back("AR -> RS + AG");
    if (use_hoist) log->push_back("gate moved above the communication that feeds its dispatch");
    const auto& l = use_hoist ? hoist_log : plain_log;
    log->insert(log->end(), l.begin(), l.end());
  }
  return use_hoist ? hoisted : plain;
}

}  // namespace braid::fusion
