// `braid simulate`: collectives, Table 2 transitions and HP1-HP4 on simulated topologies.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <string>

#include "braid/fusion.hpp"
#include "braid/sim.hpp"

namespace braid::sim {
namespace fu = braid::fusion;
namespace {

const char* kUsage =
    "usage: braid simulate <collective|transition|hybrid|calibrate> [options]\n"
    "  --topology T     uniform:N | mesh2d:XxY | torus2d:XxY | torus3d:XxYxZ | fattree:DxL (D nodes per leaf)\n"
    "                   [,bw=GB/s,lat=ns,nicbw=GB/s,niclat=ns]; 'table4' = the 8 networks of Chimera's Table 4\n"
    "                   (default link 50 GB/s, 100 ns per hop)\n"
    "  --bytes LIST     sizes, e.g. 64K:256M (x4 steps), 1M:1G:2 (x2), or 1M,16M (default 64K:256M)\n"
    "  --json FILE      write JSON lines to FILE instead of stdout\n"
    "  --calibration F  per-kind fixed cost / efficiency ('<AR|RS|AG|A2A|P2P|M2MS> threshold alpha_s eff alpha_s eff')\n"
    "  --algo A         auto | ring | hring | hd | rotated | direct (default auto: hring on mesh/torus, hd on fat-tree)\n"
    " collective: --op AR|RS|AG|A2A|M2MS --group N (M2MS: N -> N nodes)\n"
    " transition: --transition TP+SP|TP+PP|TP+EP|PP+EP|SP+PP|SP+EP|all --n N (4) [--n2 N] [--k K (2)] [--per-op]\n"
    " hybrid:     --hybrid HP1..HP4|all [--stages S (Table 5 by topology)] [--seq S (256)] [--per-op]\n"
    " calibrate:  --nccl DIR (nccl-{allreduce,reducescatter,allgather,alltoall}.jsonl) [--link-bw GB/s (450)]\n"
    "             [--write FILE]\n";

int usage(std::ostream& out, const std::string& why) {
  out << "braid simulate: " << why << "\n" << kUsage;
  return 2;
}

double parse_size(const std::string& s) {
  size_t used = 0;
  double v = std::stod(s, &used);
  const std::string suf = s.substr(used);
  if (suf == "K") v *= 1024;
  else if (suf == "M") v *= 1024.0 * 1024;
  else if (suf == "G") v *= 1024.0 * 1024 * 1024;
  else if (!suf.empty()) throw std::invalid_argument("bad size '" + s + "'");
  return v;
}

std::vector<double> parse_sizes(const std::string& s) {
  std::vector<double> v;
  if (s.find(':') != std::string::npos) {
    std::stringstream ss(s);
    std::string a, b, f = "4";
    std::getline(ss, a, ':');
    std::getline(ss, b, ':');
    std::getline(ss, f, ':');
    const double lo = parse_size(a), hi = parse_size(b), step = std::stod(f);
    if (lo <= 0 || step <= 1) throw std::invalid_argument("bad size range '" + s + "'");
    for (double x = lo; x <= hi * 1.0000001; x *= step) v.push_back(x);
  } else {
    std::stringstream ss(s);
    std::string a;
    while (std::getline(ss, a, ',')) v.push_back(parse_size(a));
  }
  if (v.empty()) throw std::invalid_argument("no sizes in '" + s + "'");
  return v;
}

Algo parse_algo(const std::string& s) {
  for (Algo a : {Algo::Auto, Algo::Ring, Algo::HierRing, Algo::HalvingDoubling, Algo::Rotated, Algo::Direct})
    if (algo_name(a) == s) return a;
  throw std::invalid_argument("bad --algo '" + s + "'");
}

SimOptions load_calibration(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::invalid_argument("cannot read " + path);
  const std::map<std::string, fu::OpKind> kinds = {
      {"AR", fu::OpKind::AllReduce}, {"RS", fu::OpKind::ReduceScatter}, {"AG", fu::OpKind::AllGather},
      {"A2A", fu::OpKind::AllToAll}, {"P2P", fu::OpKind::P2P},          {"M2MS", fu::OpKind::M2MS}};
  SimOptions o;
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::stringstream ss(line);
    std::string k;
    SimOptions::KindCal c;
    if (!(ss >> k >> c.threshold >> c.small.alpha >> c.small.efficiency >> c.large.alpha >> c.large.efficiency) ||
        !kinds.count(k) || c.small.efficiency <= 0 || c.large.efficiency <= 0)
      throw std::invalid_argument("bad calibration line: " + line);
    o.calibration[kinds.at(k)] = c;
  }
  return o;
}

std::string jnum(double v) {
  char b[40];
  std::snprintf(b, sizeof b, "%.6g", v);
  return b;
}

// One JSON object per line, keys in insertion order.
struct Row {
  std::string s;
  Row& add(const std::string& k, const std::string& v) { return raw(k, "\"" + v + "\""); }
  Row& add(const std::string& k, double v) { return raw(k, jnum(v)); }
  Row& raw(const std::string& k, const std::string& v) {
    s += (s.empty() ? "{" : ", ") + ("\"" + k + "\": ") + v;
    return *this;
  }
  std::string str() const { return s + "}\n"; }
};

std::string ops_string(const std::vector<OpSim>& ops) {
  std::string s;
  for (const OpSim& o : ops) s += (s.empty() ? "" : " ") + o.op;
  return s.empty() ? "-" : s;
}

double model_total(const std::vector<OpSim>& ops) {
  double s = 0;
  for (const OpSim& o : ops) s += o.model_seconds;
  return s;
}

struct Totals {
  size_t flows = 0;
  double wall = 0;
};
Totals totals(const std::vector<OpSim>& a, const std::vector<OpSim>& b) {
  Totals t;
  for (const auto* v : {&a, &b})
    for (const OpSim& o : *v) t.flows += o.flows, t.wall += o.wall_s;
  return t;
}

void per_op_rows(std::ostream& out, const std::vector<OpSim>& ops, const std::string& context, bool fused,
                 const TopologySpec& t) {
  for (const OpSim& o : ops)
    out << Row{}
               .add("op", o.op)
               .add("algo", o.algo)
               .add("context", context)
               .add("fused", fused ? "yes" : "no")
               .add("topology", t.name())
               .add("nodes", t.nodes())
               .add("group", o.group_size)
               .add("bytes", o.message)
               .add("time_us", o.seconds * 1e6)
               .add("effective_bw", o.message / o.seconds / 1e9)
               .add("volume", o.volume)
               .add("model_volume", o.model_volume)
               .add("model_us", o.model_seconds * 1e6)
               .add("flows", double(o.flows))
               .str();
}

// Emits the unfused/fused comparison row of one graph.
void compare_row(std::ostream& out, Row head, const fu::Graph& g, const TopologySpec& t, const SimOptions& o,
                 Algo algo, double bytes, bool per_op, const std::string& context) {
  const fu::Graph f = fu::chimera(g);
  const std::vector<OpSim> u = simulate_graph(g, t, o, algo), v = simulate_graph(f, t, o, algo);
  const double tu = total_seconds(u), tf = total_seconds(v);
  const double mu = model_total(u), mf = model_total(v);
  const double rs = tu > 0 ? tf / tu : 0, rm = mu > 0 ? mf / mu : 0;
  const Totals tot = totals(u, v);
  out << head.add("topology", t.name())
             .add("nodes", t.nodes())
             .add("ranks", g.world_size())
             .add("bytes", bytes)
             .add("unfused_ops", ops_string(u))
             .add("fused_ops", ops_string(v))
             .add("unfused_us", tu * 1e6)
             .add("fused_us", tf * 1e6)
             .add("unfused_bw", tu > 0 ? bytes / tu / 1e9 : 0)
             .add("fused_bw", tf > 0 ? bytes / tf / 1e9 : 0)
             .add("speedup", tf > 0 ? tu / tf : 0)
             .add("ratio_sim", rs)
             .add("ratio_model", rm)
             .add("ratio_err", rm > 0 ? rs / rm - 1 : 0)
             .add("flows", double(tot.flows))
             .add("wall_s", tot.wall)
             .str();
  if (per_op) {
    per_op_rows(out, u, context, false, t);
    per_op_rows(out, v, context, true, t);
  }
}

const std::map<std::string, fu::Transition>& transitions() {
  static const std::map<std::string, fu::Transition> m = {
      {"TP+SP", fu::Transition::TP_SP}, {"TP+PP", fu::Transition::TP_PP}, {"TP+EP", fu::Transition::TP_EP},
      {"PP+EP", fu::Transition::PP_EP}, {"SP+PP", fu::Transition::SP_PP}, {"SP+EP", fu::Transition::SP_EP}};
  return m;
}

// Table 5 pipeline depth by topology family (GPT2: HP1/HP2; DeepSpeedMoE: HP3/HP4).
int table5_stages(const TopologySpec& t, bool moe) {
  switch (t.kind) {
    case TopoKind::Mesh2D: return moe ? 6 : 12;
    case TopoKind::Torus2D: return moe ? 4 : 8;
    case TopoKind::Torus3D: return moe ? 2 : 4;
    case TopoKind::FatTree: return moe ? 4 : 8;
    case TopoKind::Uniform: return std::max(1, t.nodes() / 2);
  }
  return 1;
}

}  // namespace

int simulate_main(int argc, char** argv, std::ostream& out) {
  if (argc < 2) return usage(out, "missing mode");
  const std::string mode = argv[1];
  std::map<std::string, std::string> opt = {{"--topology", "torus2d:4x4"}, {"--bytes", "64K:256M"},
                                            {"--algo", "auto"},           {"--n", "4"},
                                            {"--k", "2"},                 {"--transition", "all"},
                                            {"--hybrid", "all"},          {"--seq", "256"},
                                            {"--link-bw", "450"},         {"--op", "AR"},
                                            {"--group", "4"}};
  bool per_op = false;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--per-op") {
      per_op = true;
      continue;
    }
    if (a.rfind("--", 0) != 0 || i + 1 >= argc) return usage(out, "bad argument '" + a + "'");
    opt[a] = argv[++i];
  }
  std::ofstream file;
  std::ostream* os = &out;
  if (opt.count("--json")) {
    file.open(opt["--json"], std::ios::app);
    if (!file) return usage(out, "cannot write " + opt["--json"]);
    os = &file;
  }
  try {
    SimOptions o;
    if (opt.count("--calibration")) o = load_calibration(opt["--calibration"]);
    const Algo algo = parse_algo(opt["--algo"]);
    std::vector<TopologySpec> topos;
    if (opt["--topology"] == "table4") topos = table4_topologies();
    else topos = {parse_topology(opt["--topology"])};
    const std::vector<double> sizes = parse_sizes(opt["--bytes"]);

    if (mode == "calibrate") {
      if (!opt.count("--nccl")) return usage(out, "calibrate needs --nccl DIR");
      const SimOptions c = calibrate(opt["--nccl"], std::stod(opt["--link-bw"]) * 1e9, *os);
      if (opt.count("--write")) {
        std::ofstream w(opt["--write"]);
        w << "# kind threshold_bytes alpha_small_s efficiency_small alpha_large_s efficiency_large\n";
        for (const auto& [k, v] : c.calibration)
          w << fu::kind_name(k) << " " << jnum(v.threshold) << " " << jnum(v.small.alpha) << " "
            << jnum(v.small.efficiency) << " " << jnum(v.large.alpha) << " " << jnum(v.large.efficiency) << "\n";
      }
      return 0;
    }
    if (mode == "collective") {
      const std::map<std::string, fu::OpKind> kinds = {{"AR", fu::OpKind::AllReduce},
                                                        {"RS", fu::OpKind::ReduceScatter},
                                                        {"AG", fu::OpKind::AllGather},
                                                        {"A2A", fu::OpKind::AllToAll},
                                                        {"M2MS", fu::OpKind::M2MS}};
      if (!kinds.count(opt["--op"])) return usage(out, "bad --op '" + opt["--op"] + "'");
      const fu::OpKind kind = kinds.at(opt["--op"]);
      const int n = std::stoi(opt["--group"]);
      if (n < 2) return usage(out, "--group must be at least 2");
      for (const TopologySpec& t : topos) {
        fu::Graph g;  // only the groups matter for the placement
        g.groups.push_back({"g0", fu::Parallel::TP, {}});
        for (int i = 0; i < n; ++i) g.groups[0].ranks.push_back(i);
        if (kind == fu::OpKind::M2MS) {
          g.groups.push_back({"g1", fu::Parallel::TP, {}});
          for (int i = 0; i < n; ++i) g.groups[1].ranks.push_back(n + i);
        }
        const Placement p = place(g, t);
        NodeGroup a, b;
        for (int i = 0; i < n; ++i) a.nodes.push_back(p.node_of_rank[i]);
        a.shape = p.group_shape[0];
        b = a;
        if (kind == fu::OpKind::M2MS) {
          b.nodes.clear();
          for (int i = 0; i < n; ++i) b.nodes.push_back(p.node_of_rank[n + i]);
          b.shape = p.group_shape[1];
        }
        const Network net(t);
        Algo al = algo == Algo::Auto ? default_algo(t, n) : algo;
        for (double m : sizes) {
          Schedule s;
          double analytic = 0;
          if (kind == fu::OpKind::AllReduce) all_reduce(s, a, m, al), analytic = 2 * m * (n - 1) / n;
          else if (kind == fu::OpKind::ReduceScatter) reduce_scatter(s, a, m, al), analytic = m * (n - 1) / n;
          else if (kind == fu::OpKind::AllGather) all_gather(s, a, m, al), analytic = m * (n - 1) / n;
          else {
            if (al != Algo::Direct) al = Algo::Rotated;
            many_to_many(s, a, b, std::vector<std::vector<double>>(n, std::vector<double>(n, m / n)), al);
            analytic = kind == fu::OpKind::AllToAll ? m * (n - 1) / n : m;
          }
          SimOptions::Regime reg;
          if (auto it = o.calibration.find(kind); it != o.calibration.end()) reg = it->second.at(m);
          for (Flow& f : s.flows) f.bytes /= reg.efficiency;
          const SimResult r = simulate(net, s, o.verbose_simgrid);
          const double sec = reg.alpha + r.seconds;
          *os << Row{}
                     .add("op", opt["--op"])
                     .add("algo", kind == fu::OpKind::AllToAll && al == Algo::Rotated ? "pairwise" : algo_name(al))
                     .add("topology", t.name())
                     .add("nodes", t.nodes())
                     .add("group", n)
                     .add("bytes", m)
                     .add("time_us", sec * 1e6)
                     .add("effective_bw", m / sec / 1e9)
                     .add("volume", s.max_node_volume() * reg.efficiency)
                     .add("analytic_volume", analytic)
                     .add("model_us", (reg.alpha + analytic / (t.link_bw * reg.efficiency)) * 1e6)
                     .add("flows", double(r.flows))
                     .add("wall_s", r.wall_s)
                     .str();
        }
      }
      return 0;
    }
    if (mode == "transition") {
      const int n = std::stoi(opt["--n"]), n2 = opt.count("--n2") ? std::stoi(opt["--n2"]) : n;
      const int k = std::stoi(opt["--k"]);
      std::vector<std::string> names;
      if (opt["--transition"] == "all")
        for (const auto& [name, tr] : transitions()) names.push_back(name);
      else if (transitions().count(opt["--transition"])) names = {opt["--transition"]};
      else return usage(out, "bad --transition '" + opt["--transition"] + "'");
      for (const TopologySpec& t : topos)
        for (const std::string& name : names)
          for (double m : sizes) {
            const fu::Transition tr = transitions().at(name);
            fu::Dims d;
            d.batch = 1;
            d.hidden = 1024;
            while (d.hidden % std::max(n, n2)) d.hidden *= 2;
            d.ffn = 4 * d.hidden;
            const int64_t q = std::max(n, n2);
            d.seq = std::max<int64_t>(q, int64_t(m / (2.0 * d.hidden) / q) * q);
            d.experts = n * std::max(1, (k + n - 1) / n);
            d.top_k = k;
            const fu::Graph g = fu::build_transition(tr, d, n, tr == fu::Transition::TP_PP ? n2 : n);
            const double bytes = double(d.batch * d.seq * d.hidden * d.elem_bytes);
            compare_row(*os, Row{}.add("op", "transition").add("transition", name).add("k", k), g, t, o, algo,
                        bytes, per_op, name);
          }
      return 0;
    }
    if (mode == "hybrid") {
      std::vector<std::string> names;
      if (opt["--hybrid"] == "all") names = {"HP1", "HP2", "HP3", "HP4"};
      else names = {opt["--hybrid"]};
      for (const TopologySpec& t : topos)
        for (const std::string& name : names) {
          const std::map<std::string, fu::Hybrid> hs = {
              {"HP1", fu::Hybrid::HP1}, {"HP2", fu::Hybrid::HP2}, {"HP3", fu::Hybrid::HP3}, {"HP4", fu::Hybrid::HP4}};
          if (!hs.count(name)) return usage(out, "bad --hybrid '" + name + "'");
          const bool moe = name == "HP3" || name == "HP4";
          // Table 5 / §V-C: GPT2 (H 1600) and DeepSpeedMoE (H 2048, top-1), B = 1, S = 256, TP = SP = EP = 2.
          fu::Dims d;
          d.batch = 1;
          d.seq = std::stoi(opt["--seq"]);
          d.hidden = moe ? 2048 : 1600;
          d.ffn = 4 * d.hidden;
          d.experts = moe ? 8 : 0;
          d.top_k = 1;
          const int stages = opt.count("--stages") ? std::stoi(opt["--stages"]) : table5_stages(t, moe);
          const fu::Graph g = fu::build_hybrid(hs.at(name), d, 2, stages);
          compare_row(*os, Row{}.add("op", "hybrid").add("hybrid", name).add("stages", stages), g, t, o, algo,
                      double(d.batch * d.seq * d.hidden * d.elem_bytes), per_op, name);
        }
      return 0;
    }
    return usage(out, "unknown mode '" + mode + "'");
  } catch (const std::invalid_argument& e) {
    return usage(out, e.what());
  } catch (const std::exception& e) {
    out << "braid simulate: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace braid::sim
