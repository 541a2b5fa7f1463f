// `braid plan`: the communication plan of a model under hybrid parallelism, before and after fusion.
#include <cstdio>
#include <fstream>
#include <map>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <string>

#include "braid/fusion.hpp"

namespace braid::fusion {
namespace {

struct Preset {
  int64_t hidden, heads, kv_heads, ffn;
  int layers, experts, top_k;
};

const std::map<std::string, Preset>& presets() {
  static const std::map<std::string, Preset> p = {
      {"llama3-8b", {4096, 32, 8, 14336, 32, 0, 1}},
      {"llama3-70b", {8192, 64, 8, 28672, 80, 0, 1}},
      {"mixtral-8x7b", {4096, 32, 8, 14336, 32, 8, 2}},
  };
  return p;
}

const char* kUsage =
    "usage: braid plan --model llama3-8b|llama3-70b|mixtral-8x7b --parallel tp=N,sp=N,pp=N,ep=N\n"
    "                  [--seq S (4096)] [--batch B (1, micro-batch)] [--dtype bf16|fp32]\n"
    "                  [--topology nvlink|bw=<GB/s>,lat=<us>] [--calibration FILE]\n"
    "  Prints the communication of each parallelism transition before and after Chimera fusion.\n"
    "  Calibration lines: '<AR|RS|AG|A2A|P2P|M2MS> <message bytes> <seconds>'.\n";

std::string fmt(const char* f, double a) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, a);
  return buf;
}

std::string mib(double bytes) { return fmt("%.2f", bytes / (1024.0 * 1024.0)); }

struct Totals {
  double bytes = 0, seconds = 0;
};

Totals print_ops(const Graph& g, const Link& link, const Calibration* cal, std::ostream& out) {
  Totals t;
  char line[160];
  for (const Op& op : g.ops) {
    if (!is_communication(op.kind)) continue;
    const OpCost c = op_cost(g, op, link, cal);
    std::string name = kind_name(op.kind) + (op.route == Route::Dispatch ? " dispatch"
                                             : op.route == Route::Combine ? " combine" : "");
    const Tensor& x = g.tensors[op.in[0]];
    const Tensor& y = g.tensors[op.out];
    const std::string from = g.groups[x.layout.group].name, to = g.groups[y.layout.group].name;
    std::snprintf(line, sizeof line, "    %-14s %-15s %5d %12s %12s %10.1f\n", name.c_str(),
                  (from == to ? from : from + "->" + to).c_str(), c.group_size, mib(c.message).c_str(),
                  mib(c.volume).c_str(), c.seconds * 1e6);
    out << line;
    t.bytes += c.volume;
    t.seconds += c.seconds;
  }
  return t;
}

int usage(std::ostream& out, const std::string& why) {
  out << "braid plan: " << why << "\n" << kUsage;
  return 2;
}

}  // namespace

int plan_main(int argc, char** argv, std::ostream& out) { return plan_main(argc, argv, out, nullptr); }

int plan_main(int argc, char** argv, std::ostream& out, const PlanSimulator* simulate) {
  std::map<std::string, std::string> opt = {{"--seq", "4096"}, {"--batch", "1"}, {"--dtype", "bf16"},
                                            {"--topology", "nvlink"}};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      out << kUsage;
      return 0;
    }
    if (a.rfind("--", 0) != 0 || i + 1 >= argc) return usage(out, "bad argument '" + a + "'");
    opt[a] = argv[++i];
  }
  if (opt.count("--simulate") && !simulate) return usage(out, "--simulate needs a braid built with SimGrid");
  if (!opt.count("--model") || !presets().count(opt["--model"])) return usage(out, "unknown or missing --model");
  if (!opt.count("--parallel")) return usage(out, "missing --parallel");
  const Preset m = presets().at(opt["--model"]);

  std::map<std::string, int> par = {{"tp", 1}, {"sp", 1}, {"pp", 1}, {"ep", 1}, {"dp", 1}};
  Dims d;
  Link link;
  Calibration cal;
  try {
    std::stringstream ps(opt["--parallel"]);
    for (std::string kv; std::getline(ps, kv, ',');) {
      const auto eq = kv.find('=');
      if (eq == std::string::npos || !par.count(kv.substr(0, eq))) return usage(out, "bad --parallel entry '" + kv + "'");
      par[kv.substr(0, eq)] = std::stoi(kv.substr(eq + 1));
    }
    d.seq = std::stoll(opt["--seq"]);
    d.batch = std::stoll(opt["--batch"]);
    const std::string topo = opt["--topology"];
    if (topo != "nvlink") {
      if (std::sscanf(topo.c_str(), "bw=%lf,lat=%lf", &link.bandwidth, &link.latency) != 2)
        return usage(out, "bad --topology '" + topo + "'");
      link.bandwidth *= 1e9;
      link.latency *= 1e-6;
    }
    if (opt.count("--calibration")) {
      std::ifstream f(opt["--calibration"]);
      if (!f) return usage(out, "cannot read " + opt["--calibration"]);
      cal = parse_calibration(f);
    }
  } catch (const std::exception& e) {
    return usage(out, e.what());
  }
  if (opt["--dtype"] != "bf16" && opt["--dtype"] != "fp32") return usage(out, "--dtype is bf16 or fp32");
  for (const auto& [k, v] : par)
    if (v < 1) return usage(out, k + " must be >= 1");
  const int tp = par["tp"], sp = par["sp"], pp = par["pp"], ep = par["ep"];
  if (ep > 1 && m.experts == 0) return usage(out, "ep > 1 needs an MoE model");
  if (sp > 1 && tp > 1 && sp != tp) return usage(out, "sp must equal tp (Megatron sequence parallelism)");
  const int n = std::max(tp, sp);
  if (ep > 1 && n > 1 && ep != n) return usage(out, "ep must equal the TP/SP group size (EP runs on that group)");
  d.hidden = m.hidden;
  d.ffn = m.ffn;
  d.experts = m.experts;
  d.top_k = m.top_k;
  d.elem_bytes = opt["--dtype"] == "fp32" ? 4 : 2;

  struct Item {
    Transition t;
    int n1, n2, per_model;
  };
  std::vector<Item> items;
  if (tp > 1 && sp > 1) items.push_back({Transition::TP_SP, tp, tp, 2 * m.layers});
  if (ep > 1) {
    if (sp > 1) items.push_back({Transition::SP_EP, sp, sp, m.layers});
    else if (tp > 1) items.push_back({Transition::TP_EP, tp, tp, m.layers});
    else if (pp > 1) items.push_back({Transition::PP_EP, ep, ep, pp - 1});
  }
  if (pp > 1 && !(ep > 1 && n == 1)) {
    if (sp > 1) items.push_back({Transition::SP_PP, sp, sp, pp - 1});
    else if (tp > 1) items.push_back({Transition::TP_PP, tp, tp, pp - 1});
  }

  out << "braid plan: " << opt["--model"] << "  tp=" << tp << " sp=" << sp << " pp=" << pp << " ep=" << ep
      << "  B=" << d.batch << " S=" << d.seq << " H=" << d.hidden << " " << opt["--dtype"];
  if (m.experts) out << "  E=" << m.experts << " k=" << m.top_k;
  out << "\n  time model: "
      << (cal.points.empty() ? "alpha-beta, " + fmt("%.0f", link.bandwidth / 1e9) + " GB/s, " +
                                   fmt("%.1f", link.latency * 1e6) + " us per operator"
                             : "calibrated (" + opt["--calibration"] + "), alpha-beta for missing kinds")
      << "\n";
  if (items.empty()) {
    out << "  no parallelism transition: nothing to fuse (a single parallelism keeps its own collectives)\n";
    return 0;
  }
  Totals model_before, model_after;
  for (const Item& it : items) {
    Graph g;
    try {
      g = build_transition(it.t, d, it.n1, it.n2);
    } catch (const std::invalid_argument& e) {
      return usage(out, e.what());
    }
    std::vector<std::string> log;
    const Graph f = chimera(g, &log);
    out << "\n" << transition_name(it.t) << " (" << it.per_model << " per forward pass)\n";
    out << "    op             group          ranks  message MiB  volume MiB   time us\n";
    out << "  before:\n";
    const Totals b = print_ops(g, link, cal.points.empty() ? nullptr : &cal, out);
    out << "  after:\n";
    const Totals a = print_ops(f, link, cal.points.empty() ? nullptr : &cal, out);
    out << "  rewrites:";
    for (const std::string& s : log) out << " [" << s << "]";
    const Table2Row row = table2(it.t, Problem{d.batch, d.seq, d.hidden, d.elem_bytes}, it.n1, it.n2, d.top_k);
    out << "\n  volume " << mib(b.bytes) << " -> " << mib(a.bytes) << " MiB (" << fmt("%.1f", 100 * a.bytes / b.bytes)
        << "%; paper Table 2 ratio " << fmt("%.1f", 100 * row.ratio()) << "%), time " << fmt("%.1f", b.seconds * 1e6)
        << " -> " << fmt("%.1f", a.seconds * 1e6) << " us (" << fmt("%.2f", b.seconds / a.seconds) << "x)\n";
    model_before.seconds += b.seconds * it.per_model;
    model_after.seconds += a.seconds * it.per_model;
    if (simulate && opt.count("--simulate")) out << (*simulate)(g, f, opt["--simulate"]);
  }
  out << "\ntransition communication per forward pass: " << fmt("%.3f", model_before.seconds * 1e3) << " ms -> "
      << fmt("%.3f", model_after.seconds * 1e3) << " ms ("
      << fmt("%.2f", model_before.seconds / model_after.seconds) << "x), predicted, not measured\n";
  return 0;
}

}  // namespace braid::fusion
