// Collective algorithms as DAGs of flows (no SimGrid here).
#include <algorithm>
#include <stdexcept>

#include "braid/sim.hpp"

namespace braid::sim {
namespace {

bool power_of_two(int n) { return n > 0 && (n & (n - 1)) == 0; }

std::vector<int> shape_of(const NodeGroup& g) {
  if (g.shape.empty()) return {int(g.nodes.size())};
  int p = 1;
  for (int x : g.shape) p *= x;
  if (p != int(g.nodes.size())) throw std::invalid_argument("NodeGroup: shape does not match size");
  return g.shape;
}

Frontier start(const NodeGroup& g, Frontier f) {
  f.resize(g.nodes.size());
  return f;
}

// One ring of k-1 steps over group members `m` (indices into g.nodes), `chunk` bytes per step:
// member i sends to member i+1; its step s waits for its own step s-1 and for what it received
// at step s-1. Used for both reduce-scatter and all-gather (same traffic, different arithmetic).
void ring(Schedule& s, const NodeGroup& g, const std::vector<int>& m, double chunk, Frontier& f) {
  const int k = int(m.size());
  if (k < 2) return;
  std::vector<int> prev(k, -1), cur(k, -1);
  for (int step = 0; step < k - 1; ++step) {
    for (int i = 0; i < k; ++i) {
      std::vector<int> after = step == 0 ? f[m[i]] : std::vector<int>{prev[i], prev[(i + k - 1) % k]};
      cur[i] = s.add(g.nodes[m[i]], g.nodes[m[(i + 1) % k]], chunk, std::move(after));
    }
    std::swap(prev, cur);
  }
  for (int i = 0; i < k; ++i) f[m[i]] = {prev[i], prev[(i + k - 1) % k]};
}

// Members of the line through member `j` along dimension `d` of `shape` (dimension 0 fastest).
std::vector<int> line(const std::vector<int>& shape, int j, int d) {
  int stride = 1;
  for (int e = 0; e < d; ++e) stride *= shape[e];
  const int c = (j / stride) % shape[d];
  std::vector<int> m;
  for (int x = 0; x < shape[d]; ++x) m.push_back(j + (x - c) * stride);
  return m;
}

// Rings along dimension d for every line of the grid.
void rings_along(Schedule& s, const NodeGroup& g, const std::vector<int>& shape, int d, double chunk,
                 Frontier& f) {
  int stride = 1;
  for (int e = 0; e < d; ++e) stride *= shape[e];
  for (int j = 0; j < int(g.nodes.size()); ++j)
    if ((j / stride) % shape[d] == 0) ring(s, g, line(shape, j, d), chunk, f);
}

// Halving-doubling: log2(n) pairwise exchanges; `reduce` = recursive halving (RS), else doubling (AG).
void halving_doubling(Schedule& s, const NodeGroup& g, double bytes, bool reduce, Frontier& f) {
  const int n = int(g.nodes.size());
  int steps = 0;
  while ((1 << steps) < n) ++steps;
  std::vector<int> prev(n, -1), cur(n, -1);
  for (int st = 0; st < steps; ++st) {
    const int dist = reduce ? n >> (st + 1) : 1 << st;
    const int pdist = reduce ? n >> st : 1 << (st - 1);  // partner distance of the previous step
    const double b = reduce ? bytes / double(1 << (st + 1)) : bytes / n * double(1 << st);
    for (int i = 0; i < n; ++i) {
      std::vector<int> after = st == 0 ? f[i] : std::vector<int>{prev[i], prev[i ^ pdist]};
      cur[i] = s.add(g.nodes[i], g.nodes[i ^ dist], b, std::move(after));
    }
    std::swap(prev, cur);
  }
  if (steps > 0) {
    const int last = reduce ? 1 : n >> 1;
    for (int i = 0; i < n; ++i) f[i] = {prev[i], prev[i ^ last]};
  }
}

Algo resolve(Algo a, int n) {
  if (a == Algo::Auto) return Algo::Ring;
  if (a == Algo::HalvingDoubling && !power_of_two(n)) return Algo::Ring;
  return a;
}

}  // namespace

std::string algo_name(Algo a) {
  switch (a) {
    case Algo::Auto: return "auto";
    case Algo::Ring: return "ring";
    case Algo::HierRing: return "hring";
    case Algo::HalvingDoubling: return "hd";
    case Algo::Rotated: return "rotated";
    case Algo::Direct: return "direct";
  }
  return "?";
}

Algo default_algo(const TopologySpec& t, int group_size) {
  switch (t.kind) {
    case TopoKind::Mesh2D:
    case TopoKind::Torus2D:
    case TopoKind::Torus3D: return Algo::HierRing;
    case TopoKind::FatTree: return power_of_two(group_size) ? Algo::HalvingDoubling : Algo::Ring;
    case TopoKind::Uniform: return Algo::Ring;
  }
  return Algo::Ring;
}

int Schedule::add(int src, int dst, double bytes, std::vector<int> after) {
  if (src == dst || bytes <= 0) return -1;
  std::erase(after, -1);
  std::sort(after.begin(), after.end());
  after.erase(std::unique(after.begin(), after.end()), after.end());
  flows.push_back(Flow{src, dst, bytes, std::move(after)});
  return int(flows.size()) - 1;
}

double Schedule::max_node_volume() const {
  std::map<int, double> sent, recv;
  for (const Flow& f : flows) {
    sent[f.src] += f.bytes;
    recv[f.dst] += f.bytes;
  }
  double v = 0;
  for (const auto* m : {&sent, &recv})
    for (const auto& [node, b] : *m) v = std::max(v, b);
  return v;
}

Frontier reduce_scatter(Schedule& s, const NodeGroup& g, double bytes, Algo a, Frontier f) {
  f = start(g, std::move(f));
  const int n = int(g.nodes.size());
  a = resolve(a, n);
  if (a == Algo::HalvingDoubling) {
    halving_doubling(s, g, bytes, true, f);
    return f;
  }
  const std::vector<int> shape = a == Algo::HierRing ? shape_of(g) : std::vector<int>{n};
  double size = bytes;
  for (int d = 0; d < int(shape.size()); ++d) {  // each stage scatters over one dimension
    rings_along(s, g, shape, d, size / shape[d], f);
    size /= shape[d];
  }
  return f;
}

Frontier all_gather(Schedule& s, const NodeGroup& g, double bytes, Algo a, Frontier f) {
  f = start(g, std::move(f));
  const int n = int(g.nodes.size());
  a = resolve(a, n);
  if (a == Algo::HalvingDoubling) {
    halving_doubling(s, g, bytes, false, f);
    return f;
  }
  const std::vector<int> shape = a == Algo::HierRing ? shape_of(g) : std::vector<int>{n};
  double size = bytes / n;  // what each member holds before the stage
  for (int d = int(shape.size()) - 1; d >= 0; --d) {
    rings_along(s, g, shape, d, size, f);
    size *= shape[d];
  }
  return f;
}

Frontier all_reduce(Schedule& s, const NodeGroup& g, double bytes, Algo a, Frontier f) {
  return all_gather(s, g, bytes, a, reduce_scatter(s, g, bytes, a, std::move(f)));
}

Frontier many_to_many(Schedule& s, const NodeGroup& src, const NodeGroup& dst,
                      const std::vector<std::vector<double>>& matrix, Algo a, Frontier f) {
  f = start(src, std::move(f));
  const int m = int(src.nodes.size()), n = int(dst.nodes.size());
  if (int(matrix.size()) != m) throw std::invalid_argument("many_to_many: matrix rows != source size");
  Frontier out(n);
  for (int i = 0; i < m; ++i) {
    std::vector<int> prev = f[i];
    for (int t = 0; t < n; ++t) {
      const int j = (i + t) % n;
      const int id = s.add(src.nodes[i], dst.nodes[j], matrix[i][j], a == Algo::Direct ? f[i] : prev);
      if (id < 0) continue;
      if (a != Algo::Direct) prev = {id};
      out[j].push_back(id);
    }
  }
  return out;
}

}  // namespace braid::sim
