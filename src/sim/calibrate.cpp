// Fitting the simulator to measured NCCL curves (bench/results/<node>/nccl-*.jsonl).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <stdexcept>

#include "braid/sim.hpp"

namespace braid::sim {
namespace fu = braid::fusion;
namespace {

// The number after "key": on a JSON line (enough for the flat objects of braid's results).
double json_number(const std::string& line, const std::string& key) {
  const size_t k = line.find("\"" + key + "\"");
  if (k == std::string::npos) throw std::runtime_error("calibrate: no '" + key + "' in: " + line.substr(0, 80));
  const size_t colon = line.find(':', k);
  return std::stod(line.substr(colon + 1));
}

// Simulated seconds of one 2-rank (or n-rank) collective of `bytes` (nccl-tests convention) on a
// uniform network with no latency, every flow's bytes divided by `efficiency`.
double base_time(fu::OpKind kind, double bytes, int n, double link_bw, double efficiency) {
  TopologySpec t;
  t.kind = TopoKind::Uniform;
  t.dims = {n};
  t.link_bw = link_bw;
  t.link_lat = 0;
  NodeGroup g;
  for (int i = 0; i < n; ++i) g.nodes.push_back(i);
  Schedule s;
  if (kind == fu::OpKind::AllReduce) all_reduce(s, g, bytes, Algo::Ring);
  else if (kind == fu::OpKind::ReduceScatter) reduce_scatter(s, g, bytes, Algo::Ring);
  else if (kind == fu::OpKind::AllGather) all_gather(s, g, bytes, Algo::Ring);
  else many_to_many(s, g, g, std::vector<std::vector<double>>(n, std::vector<double>(n, bytes / n)), Algo::Rotated);
  for (Flow& f : s.flows) f.bytes /= efficiency;
  return simulate(Network(t), s).seconds;
}

struct Point {
  double bytes, measured, base;  // s; base = simulated at efficiency 1 without fixed cost
};

// Least squares on relative error of t = alpha + base / efficiency over points [lo, hi).
SimOptions::Regime fit(const std::vector<Point>& p, size_t lo, size_t hi) {
  double a11 = 0, a12 = 0, a22 = 0, b1 = 0, b2 = 0;
  for (size_t i = lo; i < hi; ++i) {
    const double u = 1 / p[i].measured, v = p[i].base / p[i].measured;  // row (u, v) . (alpha, 1/eff) = 1
    a11 += u * u, a12 += u * v, a22 += v * v, b1 += u, b2 += v;
  }
  const double det = a11 * a22 - a12 * a12;
  SimOptions::Regime r;
  if (std::abs(det) < 1e-300) return r;
  r.alpha = std::max(0.0, (b1 * a22 - b2 * a12) / det);
  const double gamma = (a11 * b2 - a12 * b1) / det;
  r.efficiency = gamma > 0 ? 1 / gamma : 1;
  return r;
}

double predict(const SimOptions::KindCal& c, const Point& p) {
  const auto& r = c.at(p.bytes);
  return r.alpha + p.base / r.efficiency;
}

}  // namespace

SimOptions calibrate(const std::string& dir, double link_bw, std::ostream& out, int ranks) {
  SimOptions o;
  const std::pair<const char*, fu::OpKind> files[] = {{"allreduce", fu::OpKind::AllReduce},
                                                      {"reducescatter", fu::OpKind::ReduceScatter},
                                                      {"allgather", fu::OpKind::AllGather},
                                                      {"alltoall", fu::OpKind::AllToAll}};
  char buf[512];
  for (const auto& [name, kind] : files) {
    const std::string path = dir + "/nccl-" + name + ".jsonl";
    std::ifstream f(path);
    if (!f) throw std::runtime_error("calibrate: cannot read " + path);
    std::vector<Point> pts;
    std::string line;
    while (std::getline(f, line))
      if (line.find('{') != std::string::npos) {
        const double b = json_number(line, "bytes");
        pts.push_back({b, json_number(line, "time_us") * 1e-6, base_time(kind, b, ranks, link_bw, 1.0)});
      }
    std::sort(pts.begin(), pts.end(), [](const Point& a, const Point& b) { return a.bytes < b.bytes; });
    if (pts.size() < 2) throw std::runtime_error("calibrate: too few points in " + path);
    // Two regimes (NCCL switches protocol with size): the split minimising the worst relative error.
    SimOptions::KindCal best;
    double best_err = 1e300;
    for (size_t k = 2; k + 2 <= pts.size() || k == 2; ++k) {
      SimOptions::KindCal c;
      const bool split = pts.size() >= 4;
      c.small = fit(pts, 0, split ? k : pts.size());
      c.large = split ? fit(pts, k, pts.size()) : c.small;
      c.threshold = split ? pts[k].bytes : 0;
      double err = 0;
      for (const Point& p : pts) err = std::max(err, std::abs(predict(c, p) / p.measured - 1));
      if (err < best_err) best_err = err, best = c;
      if (!split) break;
    }
    o.calibration[kind] = best;
    // Check with the simulator itself (efficiency applied to the flows, fixed cost added).
    double err_1m = 0, err_all = 0;
    for (const Point& p : pts) {
      const auto& r = best.at(p.bytes);
      const double sim = r.alpha + base_time(kind, p.bytes, ranks, link_bw, r.efficiency);
      const double e = sim / p.measured - 1;
      err_all = std::max(err_all, std::abs(e));
      if (p.bytes >= 1 << 20) err_1m = std::max(err_1m, std::abs(e));
      std::snprintf(buf, sizeof buf,
                    "{\"op\": \"calibration\", \"kind\": \"%s\", \"ranks\": %d, \"bytes\": %.0f, \"nccl_us\": %.3f, "
                    "\"sim_us\": %.3f, \"err\": %.4f}\n",
                    fu::kind_name(kind).c_str(), ranks, p.bytes, p.measured * 1e6, sim * 1e6, e);
      out << buf;
    }
    std::snprintf(buf, sizeof buf,
                  "{\"op\": \"calibration-fit\", \"kind\": \"%s\", \"ranks\": %d, \"link_bw_GBps\": %.1f, "
                  "\"threshold\": %.0f, \"small_alpha_us\": %.3f, \"small_efficiency\": %.4f, "
                  "\"large_alpha_us\": %.3f, \"large_efficiency\": %.4f, \"max_err_ge_1MiB\": %.4f, "
                  "\"max_err\": %.4f, \"source\": \"%s\"}\n",
                  fu::kind_name(kind).c_str(), ranks, link_bw / 1e9, best.threshold, best.small.alpha * 1e6,
                  best.small.efficiency, best.large.alpha * 1e6, best.large.efficiency, err_1m, err_all, path.c_str());
    out << buf;
  }
  return o;
}

}  // namespace braid::sim
