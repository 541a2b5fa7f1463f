// The dataflow IR: layouts, boxes, redistribution plans and validation.
#include "braid/fusion/ir.hpp"

#include <algorithm>
#include <sstream>
#include <stdexcept>

namespace braid::fusion {

int Graph::world_size() const {
  int n = 0;
  for (const Group& grp : groups)
    for (int r : grp.ranks) n = std::max(n, r + 1);
  return n;
}

int Graph::add_tensor(Tensor t) {
  tensors.push_back(std::move(t));
  return static_cast<int>(tensors.size()) - 1;
}

std::vector<int> Graph::consumers(int t) const {
  std::vector<int> ids;
  for (size_t i = 0; i < ops.size(); ++i)
    if (std::find(ops[i].in.begin(), ops[i].in.end(), t) != ops[i].in.end()) ids.push_back(static_cast<int>(i));
  return ids;
}

int Graph::producer(int t) const {
  for (size_t i = 0; i < ops.size(); ++i)
    if (ops[i].out == t) return static_cast<int>(i);
  return -1;
}

int64_t Box::volume() const {
  int64_t v = 1;
  for (size_t d = 0; d < lo.size(); ++d) v *= std::max<int64_t>(0, hi[d] - lo[d]);
  return v;
}

bool Box::empty() const { return volume() == 0; }

Box intersect(const Box& a, const Box& b) {
  Box c = a;
  for (size_t d = 0; d < a.lo.size(); ++d) {
    c.lo[d] = std::max(a.lo[d], b.lo[d]);
    c.hi[d] = std::max(c.lo[d], std::min(a.hi[d], b.hi[d]));
  }
  return c;
}

namespace {

Box full_box(const std::vector<int64_t>& shape) { return Box{std::vector<int64_t>(shape.size(), 0), shape}; }

// Chunk i of n along dimension d.
Box chunk(const std::vector<int64_t>& shape, int d, int i, int n) {
  Box b = full_box(shape);
  const int64_t c = shape[d] / n;
  b.lo[d] = i * c;
  b.hi[d] = (i + 1) * c;
  return b;
}

int group_size(const Graph& g, const Layout& l) { return static_cast<int>(g.groups.at(l.group).ranks.size()); }

std::string fail(size_t op, const Graph& g, const std::string& why) {
  return "op " + std::to_string(op) + " (" + kind_name(g.ops[op].kind) + "): " + why;
}

bool token_sharded(const Graph& g, const Layout& l) {
  return (l.dist == Dist::Sharded && (l.dim == 0 || l.dim == 1)) ||
         (l.dist == Dist::Replicated && group_size(g, l) == 1);
}

}  // namespace

Box local_box(const Graph& g, const Tensor& t, int index) {
  switch (t.layout.dist) {
    case Dist::Replicated:
    case Dist::Partial: return full_box(t.shape);
    case Dist::Sharded: return chunk(t.shape, t.layout.dim, index, group_size(g, t.layout));
    case Dist::Routed: break;
  }
  throw std::invalid_argument("local_box: routed tensor " + t.name + " has no box");
}

int ar_dim(const Graph& g, const Tensor& t) {
  const int n = group_size(g, t.layout);
  std::vector<int> order = {1, 0};
  for (int d = 2; d < static_cast<int>(t.shape.size()); ++d) order.push_back(d);
  for (int d : order)
    if (d < static_cast<int>(t.shape.size()) && t.shape[d] % n == 0) return d;
  throw std::invalid_argument("ar_dim: no dimension of " + t.name + " is divisible by the group size");
}

std::vector<Transfer> plan_transfers(const Graph& g, OpKind kind, const Tensor& in, const Tensor& out) {
  const Group& gin = g.groups.at(in.layout.group);
  const Group& gout = g.groups.at(out.layout.group);
  const int nin = static_cast<int>(gin.ranks.size());
  std::vector<Transfer> plan;
  if (kind == OpKind::AllReduce) {  // ring volume: ReduceScatter then AllGather
    Tensor mid = in;
    mid.layout = Layout{Dist::Sharded, in.layout.group, ar_dim(g, in)};
    plan = plan_transfers(g, OpKind::ReduceScatter, in, mid);
    std::vector<Transfer> ag = plan_transfers(g, OpKind::AllGather, mid, out);
    plan.insert(plan.end(), ag.begin(), ag.end());
    return plan;
  }
  if (kind == OpKind::P2P) {  // rank i of the source group to rank i of the destination group
    for (int i = 0; i < nin; ++i) plan.push_back({gin.ranks[i], gout.ranks[i], local_box(g, in, i), false});
    return plan;
  }
  for (int i = 0; i < nin; ++i) {
    // The part of the logical tensor source i is responsible for sending.
    Box mine = local_box(g, in, i);
    if (in.layout.dist == Dist::Replicated && nin > 1) {
      int d = out.layout.dist == Dist::Sharded ? out.layout.dim : -1;
      if (d < 0 || in.shape[d] % nin != 0) {
        d = -1;
        for (int e = 0; e < static_cast<int>(in.shape.size()) && d < 0; ++e)
          if (in.shape[e] % nin == 0) d = e;
      }
      if (d >= 0) mine = chunk(in.shape, d, i, nin);
      else if (i > 0) continue;  // nothing divisible: rank 0 sends everything
    }
    for (size_t j = 0; j < gout.ranks.size(); ++j) {
      Box b = intersect(mine, local_box(g, out, static_cast<int>(j)));
      if (!b.empty()) plan.push_back({gin.ranks[i], gout.ranks[j], b, in.layout.dist == Dist::Partial});
    }
  }
  return plan;
}

bool is_communication(OpKind k) {
  switch (k) {
    case OpKind::AllReduce: case OpKind::ReduceScatter: case OpKind::AllGather:
    case OpKind::AllToAll: case OpKind::P2P: case OpKind::M2MS: return true;
    default: return false;
  }
}

bool is_plain_move(const Graph& g, const Op& op) {
  const bool mover = op.kind == OpKind::AllGather || op.kind == OpKind::AllToAll || op.kind == OpKind::P2P ||
                     op.kind == OpKind::M2MS || op.kind == OpKind::Split;
  return mover && op.route == Route::None && g.tensors[op.in[0]].layout.dist != Dist::Partial;
}

std::string kind_name(OpKind k) {
  switch (k) {
    case OpKind::Gemm: return "GEMM";
    case OpKind::Norm: return "Norm";
    case OpKind::Elementwise: return "Eltwise";
    case OpKind::Gate: return "Gate";
    case OpKind::Expert: return "Expert";
    case OpKind::AllReduce: return "AR";
    case OpKind::ReduceScatter: return "RS";
    case OpKind::AllGather: return "AG";
    case OpKind::AllToAll: return "A2A";
    case OpKind::P2P: return "P2P";
    case OpKind::M2MS: return "M2MS";
    case OpKind::Split: return "Split";
  }
  return "?";
}

std::string describe(const Graph& g, const Layout& l) {
  std::string s;
  switch (l.dist) {
    case Dist::Replicated: s = "Replicated"; break;
    case Dist::Partial: s = "Partial"; break;
    case Dist::Sharded: s = "Sharded(" + std::to_string(l.dim) + ")"; break;
    case Dist::Routed: s = "Routed"; break;
  }
  return s + "@" + g.groups.at(l.group).name;
}

std::optional<OpKind> classify(const Graph& g, const Layout& in, const Layout& out, Route route) {
  if (route != Route::None) return in.group == out.group ? OpKind::AllToAll : OpKind::M2MS;
  if (in == out) return std::nullopt;
  if (in.group == out.group) {
    if (in.dist == Dist::Partial && out.dist == Dist::Replicated) return OpKind::AllReduce;
    if (in.dist == Dist::Partial && out.dist == Dist::Sharded) return OpKind::ReduceScatter;
    if (in.dist == Dist::Sharded && out.dist == Dist::Replicated) return OpKind::AllGather;
    if (in.dist == Dist::Replicated && out.dist == Dist::Sharded) return OpKind::Split;
    if (in.dist == Dist::Sharded && out.dist == Dist::Sharded) return OpKind::AllToAll;
    throw std::invalid_argument("classify: no operator turns " + describe(g, in) + " into " + describe(g, out));
  }
  if (in.dist == out.dist && in.dim == out.dim && in.dist != Dist::Partial && group_size(g, in) == group_size(g, out))
    return OpKind::P2P;
  if (out.dist == Dist::Partial || out.dist == Dist::Routed || in.dist == Dist::Routed)
    throw std::invalid_argument("classify: no operator turns " + describe(g, in) + " into " + describe(g, out));
  return OpKind::M2MS;
}

void validate(const Graph& g) {
  for (const Tensor& t : g.tensors) {
    if (t.layout.group < 0 || t.layout.group >= static_cast<int>(g.groups.size()))
      throw std::invalid_argument("tensor " + t.name + ": bad group");
    if (t.layout.dist == Dist::Sharded) {
      const int d = t.layout.dim;
      if (d < 0 || d >= static_cast<int>(t.shape.size()) || t.shape[d] % group_size(g, t.layout) != 0)
        throw std::invalid_argument("tensor " + t.name + ": dimension " + std::to_string(d) +
                                    " is not divisible by its group");
    }
  }
  for (size_t i = 0; i < g.ops.size(); ++i) {
    const Op& op = g.ops[i];
    if (op.in.empty() || op.out < 0) throw std::invalid_argument(fail(i, g, "missing operand"));
    const Tensor& x = g.tensors.at(op.in[0]);
    const Tensor& y = g.tensors.at(op.out);
    const int last = static_cast<int>(x.shape.size()) - 1;
    const bool x_full_rows = x.layout.dist != Dist::Partial && x.layout.dist != Dist::Routed &&
                             !(x.layout.dist == Dist::Sharded && x.layout.dim == last);
    auto need = [&](bool ok, const std::string& why) {
      if (!ok) throw std::invalid_argument(fail(i, g, why));
    };
    auto weight_shape = [&]() -> const std::vector<int64_t>& {
      need(op.weight >= 0 && op.weight < static_cast<int>(g.weights.size()), "missing weight");
      return g.weights[op.weight].shape;
    };
    switch (op.kind) {
      case OpKind::Gemm: {
        const auto& w = weight_shape();
        need(w.size() == 2 && w[0] == x.shape[last], "weight (K,N) does not match the input's last dimension");
        std::vector<int64_t> ys = x.shape;
        ys[last] = w[1];
        need(y.shape == ys, "output shape");
        if (op.split == WeightSplit::Column) {
          need(x.layout.dist == Dist::Replicated, "column-parallel GEMM needs a replicated input");
          need(y.layout == Layout{Dist::Sharded, x.layout.group, last}, "column-parallel output is Sharded(last)");
        } else if (op.split == WeightSplit::Row) {
          need(x.layout == Layout{Dist::Sharded, x.layout.group, last}, "row-parallel GEMM needs Sharded(last)");
          need(y.layout == Layout{Dist::Partial, x.layout.group, -1}, "row-parallel output is Partial");
        } else {
          need(x_full_rows, "GEMM needs whole, non-partial rows");
          need(y.layout == x.layout, "output layout");
        }
        break;
      }
      case OpKind::Norm:
      case OpKind::Elementwise:
        if (op.kind == OpKind::Norm) {
          need(weight_shape() == std::vector<int64_t>{x.shape[last]}, "gamma shape");
          need(x_full_rows, "a norm needs whole, non-partial rows");
        }
        need(x.layout.dist != Dist::Partial && x.layout.dist != Dist::Routed, "needs non-partial values");
        need(y.layout == x.layout && y.shape == x.shape, "output must keep layout and shape");
        break;
      case OpKind::Gate: {
        const auto& w = weight_shape();
        need(x_full_rows, "gating needs whole, non-partial rows");
        need(w.size() == 2 && w[0] == x.shape[last] && w[1] == g.num_experts, "gate weight (H,E)");
        need(op.top_k >= 1 && op.top_k <= g.num_experts, "top_k");
        need(y.layout == x.layout && y.shape == std::vector<int64_t>{x.shape[0], x.shape[1], 2 * op.top_k},
             "routing is (B,S,2k) in the input's layout");
        break;
      }
      case OpKind::Expert: {
        const auto& w = weight_shape();
        need(x.layout.dist == Dist::Routed && y.layout == x.layout && y.shape == x.shape, "routed in, routed out");
        need(w == std::vector<int64_t>{g.num_experts, x.shape[3], x.shape[3]}, "expert weight (E,H,H)");
        need(g.num_experts % group_size(g, x.layout) == 0, "experts must divide evenly over the group");
        break;
      }
      default: {
        need(is_communication(op.kind) || op.kind == OpKind::Split, "unknown operator");
        if (op.route == Route::Dispatch) {
          need(op.in.size() == 2, "dispatch takes (x, routing)");
          const Tensor& r = g.tensors.at(op.in[1]);
          need(token_sharded(g, x.layout), "dispatch needs each token on exactly one rank (Sharded(B|S))");
          need(r.layout == x.layout, "routing must share the input's layout");
          need(y.layout.dist == Dist::Routed, "dispatch output is Routed");
          need(y.shape == std::vector<int64_t>{x.shape[0], x.shape[1], r.shape[2] / 2, x.shape[2]}, "shape (B,S,k,H)");
          need(g.num_experts % group_size(g, y.layout) == 0, "experts must divide evenly over the group");
        } else if (op.route == Route::Combine) {
          need(x.layout.dist == Dist::Routed, "combine input is Routed");
          need(token_sharded(g, y.layout), "combine output must be Sharded(B|S)");
          need(y.shape == std::vector<int64_t>{x.shape[0], x.shape[1], x.shape[3]}, "shape (B,S,H)");
        } else {
          need(x.layout.dist != Dist::Routed && y.layout.dist != Dist::Routed, "routed operand needs a route");
          need(x.shape == y.shape, "a redistribution keeps the shape");
          if (op.kind == OpKind::P2P) need(group_size(g, x.layout) == group_size(g, y.layout), "P2P group sizes");
        }
        std::optional<OpKind> k = classify(g, x.layout, y.layout, op.route);
        need(k.has_value() && (*k == op.kind || (op.kind == OpKind::M2MS && *k == OpKind::P2P)),
             "layouts " + describe(g, x.layout) + " -> " + describe(g, y.layout) + " are not this operator");
      }
    }
  }
}

std::string to_string(const Graph& g) {
  std::ostringstream s;
  auto name = [&](int t) { return g.tensors[t].name + "(" + describe(g, g.tensors[t].layout) + ")"; };
  for (const Op& op : g.ops) {
    std::string k = kind_name(op.kind);
    if (op.route == Route::Dispatch) k += " dispatch";
    if (op.route == Route::Combine) k += " combine";
    s << k << "  " << name(op.out) << " <-";
    for (int t : op.in) s << " " << name(t);
    s << "\n";
  }
  return s.str();
}

}  // namespace braid::fusion
