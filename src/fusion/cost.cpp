// Communication volumes (Tables 1 and 2 of the paper) and the alpha-beta / calibrated time model.
#include "braid/fusion/cost.hpp"

#include <algorithm>
#include <istream>
#include <sstream>
#include <stdexcept>

namespace braid::fusion {

std::string transition_name(Transition t) {
  switch (t) {
    case Transition::TP_SP: return "TP+SP";
    case Transition::TP_PP: return "TP+PP";
    case Transition::TP_EP: return "TP+EP";
    case Transition::PP_EP: return "PP+EP";
    case Transition::SP_PP: return "SP+PP";
    case Transition::SP_EP: return "SP+EP";
  }
  return "?";
}

double table1_overhead(OpKind kind, const Problem& p, int n, int k) {
  const double d = p.bsh_bytes();
  const double ring = double(n - 1) / n;
  switch (kind) {
    case OpKind::AllReduce: return 2 * ring * d;
    case OpKind::ReduceScatter:
    case OpKind::AllGather: return ring * d;
    case OpKind::AllToAll: return ring * d * k;
    case OpKind::P2P:
    case OpKind::M2MS: return d;
    default: return 0;
  }
}

Table2Row table2(Transition t, const Problem& p, int n1, int n2, int k) {
  const double d = p.bsh_bytes();
  auto ring = [](int n) { return double(n - 1) / n; };
  switch (t) {
    case Transition::TP_SP: return {0, 2 * ring(n1) * d, ring(n1) * d};
    case Transition::TP_PP: return {2 * ring(n1) * d, d / n1 + ring(n2) * d, d + ring(n2) * d};
    case Transition::TP_EP: return {2 * ring(n1) * d, ring(n2) * d * k, ring(n1) * d + ring(n2) * d * k};
    case Transition::PP_EP: return {d, ring(n2) * d * k, d};
    case Transition::SP_PP: return {ring(n1) * d, d, d};
    case Transition::SP_EP: return {ring(n1) * d, ring(n2) * d * k, ring(n2) * d * k};
  }
  return {};
}

bool Calibration::has(OpKind kind) const {
  auto it = points.find(kind);
  return it != points.end() && !it->second.empty();
}

double Calibration::seconds(OpKind kind, double bytes) const {
  const auto& pts = points.at(kind);
  if (bytes <= pts.front().first) return pts.front().second;
  if (pts.size() == 1) return pts[0].second * bytes / pts[0].first;  // one point: constant bandwidth
  size_t i = 1;
  while (i + 1 < pts.size() && pts[i].first < bytes) ++i;
  const auto [b0, t0] = pts[i - 1];
  const auto [b1, t1] = pts[i];
  return t0 + (t1 - t0) * (bytes - b0) / (b1 - b0);  // interpolates, or extends the last segment
}

Calibration parse_calibration(std::istream& in) {
  static const std::map<std::string, OpKind> names = {
      {"AR", OpKind::AllReduce}, {"RS", OpKind::ReduceScatter}, {"AG", OpKind::AllGather},
      {"A2A", OpKind::AllToAll}, {"P2P", OpKind::P2P},          {"M2MS", OpKind::M2MS}};
  Calibration cal;
  std::string line;
  for (int lineno = 1; std::getline(in, line); ++lineno) {
    line = line.substr(0, line.find('#'));
    std::istringstream s(line);
    std::string op;
    if (!(s >> op)) continue;
    double bytes = 0, seconds = 0;
    std::string extra;
    auto it = names.find(op);
    if (it == names.end() || !(s >> bytes >> seconds) || (s >> extra) || bytes <= 0 || seconds < 0)
      throw std::runtime_error("calibration line " + std::to_string(lineno) +
                               ": expected '<AR|RS|AG|A2A|P2P|M2MS> <bytes> <seconds>'");
    cal.points[it->second].emplace_back(bytes, seconds);
  }
  for (auto& [kind, pts] : cal.points) std::sort(pts.begin(), pts.end());
  return cal;
}

OpCost op_cost(const Graph& g, const Op& op, const Link& link, const Calibration* cal) {
  OpCost c;
  c.kind = op.kind;
  if (!is_communication(op.kind)) return c;  // compute and Split move no bytes
  const Tensor& x = g.tensors[op.in[0]];
  const Tensor& y = g.tensors[op.out];
  const double eb = x.elem_bytes;
  const int nin = static_cast<int>(g.groups[x.layout.group].ranks.size());
  const int nout = static_cast<int>(g.groups[y.layout.group].ranks.size());
  const bool same = x.layout.group == y.layout.group;
  c.group_size = nin;
  if (op.route == Route::Dispatch) {  // uniform routing: a remote expert with probability (N-1)/N
    const double h = double(x.shape[2]), k = double(g.tensors[op.in[1]].shape[2] / 2);
    const double tokens = double(x.shape[0] * x.shape[1]);
    const double remote = same ? double(nout - 1) / nout : 1.0;
    c.message = tokens / nin * k * h * eb;
    c.volume = std::max(c.message * remote, tokens * k / nout * h * eb * remote);
  } else if (op.route == Route::Combine) {
    const double h = double(x.shape[3]), rows = double(x.shape[0] * x.shape[1] * x.shape[2]);
    const double remote = same ? double(nin - 1) / nin : 1.0;
    c.message = rows / nin * h * eb;
    c.volume = std::max(c.message * remote, rows / nout * h * eb * remote);
  } else {
    std::map<int, double> sent, recv, buffer;
    for (const Transfer& t : plan_transfers(g, op.kind, x, y)) {
      const double b = double(t.box.volume()) * eb;
      buffer[t.src] += b;  // the send buffer includes the part a rank keeps
      if (t.src == t.dst) continue;
      sent[t.src] += b;
      recv[t.dst] += b;
    }
    for (auto m : {&sent, &recv})
      for (const auto& [rank, b] : *m) c.volume = std::max(c.volume, b);
    if (op.kind == OpKind::AllReduce || op.kind == OpKind::ReduceScatter || op.kind == OpKind::AllGather) {
      int64_t n = 1;
      for (int64_t s : x.shape) n *= s;
      c.message = double(n) * eb;
    } else {
      for (const auto& [rank, b] : buffer) c.message = std::max(c.message, b);
    }
  }
  c.seconds = cal && cal->has(op.kind) ? cal->seconds(op.kind, c.message) : link.latency + c.volume / link.bandwidth;
  return c;
}

double total_volume(const Graph& g) {
  double v = 0;
  for (const Op& op : g.ops) v += op_cost(g, op, Link{}).volume;
  return v;
}

}  // namespace braid::fusion
