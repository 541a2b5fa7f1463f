// Pair tables, eq. (1), the pair file format and the synthetic profile.
#include "braid/schedule/profile.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <limits>
#include <sstream>

#include "braid/errors.hpp"
#include "text_format.hpp"

namespace braid::schedule {

double overlap_effectiveness(double t_i, double t_j, double p_ij) {
  const double m = std::min(t_i, t_j);
  if (m <= 0) return 0.0;  // nothing to hide
  return (t_i + t_j - p_ij) / m;
}

double corun_from_oef(double t_i, double t_j, double oef) {
  return t_i + t_j - oef * std::min(t_i, t_j);
}

namespace {
std::pair<std::string, std::string> key(const std::string& a, const std::string& b) {
  return a < b ? std::make_pair(a, b) : std::make_pair(b, a);
}
}  // namespace

void PairTable::set_solo(const std::string& name, double us) { solo[name] = us; }

void PairTable::set_host(const std::string& name, double us) { host[name] = us; }

std::optional<double> PairTable::host_us(const std::string& name) const {
  auto it = host.find(name);
  if (it == host.end()) return std::nullopt;
  return it->second;
}

void PairTable::set_corun(const std::string& a, const std::string& b, double us) {
  corun[key(a, b)] = us;
}

std::optional<double> PairTable::solo_us(const std::string& name) const {
  auto it = solo.find(name);
  if (it == solo.end()) return std::nullopt;
  return it->second;
}

std::optional<double> PairTable::corun_us(const std::string& a, const std::string& b) const {
  auto it = corun.find(key(a, b));
  if (it == corun.end()) return std::nullopt;
  return it->second;
}

std::optional<double> PairTable::oef(const std::string& a, const std::string& b) const {
  auto ta = solo_us(a), tb = solo_us(b), p = corun_us(a, b);
  if (!ta || !tb || !p) return std::nullopt;
  return overlap_effectiveness(*ta, *tb, *p);
}

std::vector<std::vector<double>> PairTable::oef_matrix(const std::vector<std::string>& rows,
                                                       const std::vector<std::string>& cols) const {
  std::vector<std::vector<double>> m(rows.size(),
                                     std::vector<double>(cols.size(), std::numeric_limits<double>::quiet_NaN()));
  for (size_t i = 0; i < rows.size(); ++i)
    for (size_t j = 0; j < cols.size(); ++j)
      if (auto v = oef(rows[i], cols[j])) m[i][j] = *v;
  return m;
}

void write_pair_table(std::ostream& os, const PairTable& t) {
  auto word = [](const std::string& s) { return s.empty() ? std::string("-") : s; };
  os << "braid-pairs 1\n";
  os << "node " << word(t.node) << "\n";
  os << "model " << word(t.model) << "\n";
  os << "parallel " << word(t.parallel) << "\n";
  os << std::setprecision(17);
  for (const auto& [n, us] : t.solo) os << "solo " << n << " " << us << "\n";
  for (const auto& [k, us] : t.corun) os << "corun " << k.first << " " << k.second << " " << us << "\n";
  for (const auto& [n, us] : t.host) os << "host " << n << " " << us << "\n";
}

PairTable read_pair_table(std::istream& is) {
  PairTable t;
  std::string line;
  int lineno = 0;
  bool header = false;
  auto fail = [&](const std::string& why) {
    throw UsageError("pair table line " + std::to_string(lineno) + ": " + why, __FILE__, __LINE__);
  };
  auto number = [&](const std::string& s) { return text::number(s, true, "time", fail); };
  while (std::getline(is, line)) {
    ++lineno;
    const std::vector<std::string> w = text::words(line);
    if (w.empty()) continue;
    if (!header) {
      if (w.size() != 2 || w[0] != "braid-pairs" || w[1] != "1") fail("expected 'braid-pairs 1'");
      header = true;
      continue;
    }
    auto one_word = [&](std::string& dst) {
      if (w.size() != 2) fail(w[0] + " takes one word");
      dst = w[1] == "-" ? "" : w[1];
    };
    if (w[0] == "node") one_word(t.node);
    else if (w[0] == "model") one_word(t.model);
    else if (w[0] == "parallel") one_word(t.parallel);
    else if (w[0] == "solo") {
      if (w.size() != 3) fail("solo <name> <us>");
      t.set_solo(w[1], number(w[2]));
    } else if (w[0] == "corun") {
      if (w.size() != 4) fail("corun <a> <b> <us>");
      t.set_corun(w[1], w[2], number(w[3]));
    } else if (w[0] == "host") {
      if (w.size() != 3) fail("host <name> <us>");
      t.set_host(w[1], number(w[2]));
    } else {
      fail("unknown record '" + w[0] + "'");
    }
  }
  if (!header) fail("empty pair table");
  return t;
}

void save_pair_table(const std::string& path, const PairTable& t) {
  std::ofstream f(path);
  if (!f) throw UsageError("cannot write " + path, __FILE__, __LINE__);
  write_pair_table(f, t);
}

PairTable load_pair_table(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw UsageError("cannot read " + path, __FILE__, __LINE__);
  return read_pair_table(f);
}

double synthetic_oef(const Op& f, const Op& b, const SyntheticOverlap& s) {
  const bool fc = f.kind == OpKind::Comm, bc = b.kind == OpKind::Comm;
  if (fc && bc) return f.link == b.link ? s.comm_comm_same_link : s.comm_comm_other_link;
  if (fc || bc) {
    const Op& comp = fc ? b : f;
    if (comp.type == "gemm") return s.gemm_comm;
    if (comp.type == "attn" || comp.type == "attn_bwd") return s.attn_comm;
    if (comp.type == "router") return s.router_comm;
    return s.elem_comm;
  }
  // Both compute.
  const bool fg = f.type == "gemm", bg = b.type == "gemm";
  if (fg && bg) return s.gemm_gemm;
  if ((f.type == "attn_bwd" && bg) || (b.type == "attn_bwd" && fg)) return s.attn_bwd_gemm;
  if ((f.type.rfind("attn", 0) == 0 && bg) || (b.type.rfind("attn", 0) == 0 && fg)) return s.attn_gemm;
  if (f.type.rfind("attn", 0) == 0 && b.type.rfind("attn", 0) == 0) return s.attn_gemm;
  return s.elem_compute;
}

PairTable synthetic_pair_table(const Layer& layer, const SyntheticOverlap& s, const std::string& node) {
  PairTable t;
  t.node = node;
  t.model = layer.model;
  t.parallel = layer.parallel;
  for (const Op& o : layer.fwd) t.set_solo(o.name, o.solo_us);
  for (const Op& o : layer.bwd) t.set_solo(o.name, o.solo_us);
  for (const Op& f : layer.fwd)
    for (const Op& b : layer.bwd)
      t.set_corun(f.name, b.name, corun_from_oef(f.solo_us, b.solo_us, synthetic_oef(f, b, s)));
  return t;
}

}  // namespace braid::schedule
