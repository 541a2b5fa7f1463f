// Mapping the communication operators of a braid::fusion::Graph to simulated collectives.
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "braid/sim.hpp"

namespace braid::sim {
namespace fu = braid::fusion;

namespace {

bool is_grid(TopoKind k) { return k == TopoKind::Mesh2D || k == TopoKind::Torus2D || k == TopoKind::Torus3D; }

// Node ids of a grid in serpentine (boustrophedon) order: consecutive entries are neighbours.
std::vector<int> serpentine(const std::vector<int>& dims) {
  std::vector<int> order = {0};
  int stride = 1;
  for (int size : dims) {  // extend the snake one dimension at a time
    std::vector<int> next;
    for (int c = 0; c < size; ++c)
      for (size_t i = 0; i < order.size(); ++i)
        next.push_back(order[c % 2 == 0 ? i : order.size() - 1 - i] + c * stride);
    order = std::move(next);
    stride *= size;
  }
  return order;
}

// The squarest block shape of n nodes that tiles at least `blocks` times into `dims`; empty if none.
std::vector<int> block_shape(const std::vector<int>& dims, int n, int blocks) {
  std::vector<int> best, cur(dims.size(), 1);
  int best_max = 0;
  const auto rec = [&](auto&& self, size_t d, int rest) -> void {
    if (d == dims.size()) {
      if (rest != 1) return;
      int fit = 1, mx = 0;
      for (size_t e = 0; e < dims.size(); ++e) {
        fit *= dims[e] / cur[e];
        mx = std::max(mx, cur[e]);
      }
      if (fit >= blocks && (best.empty() || mx < best_max)) best = cur, best_max = mx;
      return;
    }
    for (int b = 1; b <= std::min(rest, dims[d]); ++b)
      if (rest % b == 0) {
        cur[d] = b;
        self(self, d + 1, rest / b);
      }
  };
  rec(rec, 0, n);
  return best;
}

double tensor_bytes(const fu::Tensor& t) {
  double n = t.elem_bytes;
  for (int64_t s : t.shape) n *= double(s);
  return n;
}

}  // namespace

Placement place(const fu::Graph& g, const TopologySpec& t) {
  const int world = g.world_size(), nodes = t.nodes();
  if (world > nodes)
    throw std::invalid_argument("place: " + std::to_string(world) + " ranks do not fit " + t.name());
  Placement p;
  p.node_of_rank.resize(world);
  // Stage blocks: every group is [s*n, (s+1)*n) for one n.
  int n = 0;
  bool blocks = !g.groups.empty();
  for (const fu::Group& grp : g.groups) {
    const int sz = int(grp.ranks.size());
    n = std::max(n, sz);
    for (int i = 0; i < sz; ++i) blocks = blocks && grp.ranks[i] == grp.ranks[0] + i && grp.ranks[0] % sz == 0;
  }
  for (const fu::Group& grp : g.groups) blocks = blocks && int(grp.ranks.size()) == n;
  const int stages = n ? (world + n - 1) / n : 0;
  std::vector<int> b = blocks && is_grid(t.kind) ? block_shape(t.dims, n, stages) : std::vector<int>{};
  if (!b.empty()) {
    std::vector<int> per(t.dims.size());
    for (size_t d = 0; d < per.size(); ++d) per[d] = t.dims[d] / b[d];
    for (int r = 0; r < world; ++r) {
      int blk = r / n, in = r % n, node = 0, stride = 1;
      for (size_t d = 0; d < per.size(); ++d) {
        const int c = (blk % per[d]) * b[d] + in % b[d];
        blk /= per[d];
        in /= b[d];
        node += c * stride;
        stride *= t.dims[d];
      }
      p.node_of_rank[r] = node;
    }
    p.group_shape.assign(g.groups.size(), b);
  } else {
    const std::vector<int> order = is_grid(t.kind) ? serpentine(t.dims) : std::vector<int>{};
    for (int r = 0; r < world; ++r) p.node_of_rank[r] = order.empty() ? r : order[r];
    for (const fu::Group& grp : g.groups) p.group_shape.push_back({int(grp.ranks.size())});
  }
  return p;
}

Schedule op_schedule(const fu::Graph& g, const fu::Op& op, const Placement& p, const TopologySpec& t,
                     Algo algo, std::string* algo_used) {
  Schedule s;
  if (!fu::is_communication(op.kind)) return s;
  const fu::Tensor& x = g.tensors[op.in[0]];
  const fu::Tensor& y = g.tensors[op.out];
  const fu::Group& gx = g.groups[x.layout.group];
  const fu::Group& gy = g.groups[y.layout.group];
  NodeGroup src, dst;
  for (int r : gx.ranks) src.nodes.push_back(p.node_of_rank[r]);
  for (int r : gy.ranks) dst.nodes.push_back(p.node_of_rank[r]);
  src.shape = p.group_shape[x.layout.group];
  dst.shape = p.group_shape[y.layout.group];
  const int nin = int(src.nodes.size()), nout = int(dst.nodes.size());
  std::string used;
  if (op.kind == fu::OpKind::AllReduce || op.kind == fu::OpKind::ReduceScatter ||
      op.kind == fu::OpKind::AllGather) {
    Algo a = algo == Algo::Auto ? default_algo(t, nin) : algo;
    if (a == Algo::HalvingDoubling && (nin & (nin - 1))) a = Algo::Ring;
    const double m = tensor_bytes(op.kind == fu::OpKind::AllGather ? y : x);
    if (op.kind == fu::OpKind::AllReduce) all_reduce(s, src, m, a);
    else if (op.kind == fu::OpKind::ReduceScatter) reduce_scatter(s, src, m, a);
    else all_gather(s, src, m, a);
    used = algo_name(a);
  } else {
    std::vector<std::vector<double>> matrix(nin, std::vector<double>(nout, 0.0));
    const double eb = x.elem_bytes;
    if (op.route == fu::Route::Dispatch) {  // uniform routing, as the cost model assumes
      const double tokens = double(x.shape[0] * x.shape[1]), h = double(x.shape[2]);
      const double k = double(g.tensors[op.in[1]].shape[2] / 2);
      for (auto& row : matrix) std::fill(row.begin(), row.end(), tokens / nin * k * h * eb / nout);
    } else if (op.route == fu::Route::Combine) {
      const double rows = double(x.shape[0] * x.shape[1] * x.shape[2]), h = double(x.shape[3]);
      for (auto& row : matrix) std::fill(row.begin(), row.end(), rows / nin * h * eb / nout);
    } else {
      std::map<int, int> in_pos, out_pos;
      for (int i = 0; i < nin; ++i) in_pos[gx.ranks[i]] = i;
      for (int j = 0; j < nout; ++j) out_pos[gy.ranks[j]] = j;
      for (const fu::Transfer& tr : fu::plan_transfers(g, op.kind, x, y))
        if (tr.src != tr.dst) matrix.at(in_pos.at(tr.src)).at(out_pos.at(tr.dst)) += double(tr.box.volume()) * eb;
    }
    const Algo a = algo == Algo::Direct || op.kind == fu::OpKind::P2P ? Algo::Direct : Algo::Rotated;
    many_to_many(s, src, dst, matrix, a);
    used = op.kind == fu::OpKind::AllToAll ? (a == Algo::Direct ? "direct" : "pairwise") : algo_name(a);
  }
  if (algo_used) *algo_used = used;
  return s;
}

std::vector<OpSim> simulate_graph(const fu::Graph& g, const TopologySpec& t, const SimOptions& o, Algo algo) {
  const Network net(t);
  const Placement p = place(g, t);
  std::vector<OpSim> out;
  for (const fu::Op& op : g.ops) {
    if (!fu::is_communication(op.kind)) continue;
    OpSim r;
    r.op = fu::kind_name(op.kind) + (op.route == fu::Route::Dispatch  ? " dispatch"
                                     : op.route == fu::Route::Combine ? " combine"
                                                                      : "");
    Schedule s = op_schedule(g, op, p, t, algo, &r.algo);
    const fu::OpCost c = fu::op_cost(g, op, fu::Link{t.link_bw, 0.0});
    r.group_size = c.group_size;
    r.message = c.message;
    r.model_volume = c.volume;
    r.volume = s.max_node_volume();
    SimOptions::Regime reg;
    if (auto it = o.calibration.find(op.kind); it != o.calibration.end()) reg = it->second.at(c.message);
    for (Flow& f : s.flows) f.bytes /= reg.efficiency;  // = every link at efficiency * bandwidth
    const SimResult sr = simulate(net, s, o.verbose_simgrid);
    r.seconds = reg.alpha + sr.seconds;
    r.model_seconds = fu::op_cost(g, op, fu::Link{t.link_bw * reg.efficiency, reg.alpha}).seconds;
    r.flows = sr.flows;
    r.wall_s = sr.wall_s;
    out.push_back(r);
  }
  return out;
}

double total_seconds(const std::vector<OpSim>& ops) {
  double s = 0;
  for (const OpSim& o : ops) s += o.seconds;
  return s;
}

}  // namespace braid::sim
