// search.cpp — wave grouping: the latency predictor and search of FlashOverlap (Algorithm 1), the
// per-shape decision cache with nearest-M lookup, and the stored measured inputs.
//
// Predictor (the paper's, per group j in order):
//   t_p_acc += t_p(G_j)                        computation of the group's waves
//   t_m_acc  = max(t_p_acc, t_m_acc) + t_m(bytes(G_j)) + signal overhead
//   predicted = t_m_acc after the last group.
// Search: the paper enumerates the 2^(T-1) compositions of T waves, pruned to |G_1| <= S1 (2) and
// |G_P| <= S_P (4). Its recurrence is monotone in t_m_acc and t_p_acc at a wave boundary does not
// depend on the partition, so the minimum over all compositions ending at wave w with p groups extends
// only the minimal t_m_acc: a dynamic program over (groups, boundary) finds the same optimum in
// O(P·T²) instead of O(2^T) — needed on H100 where shapes have 30+ waves.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <ostream>
#include <sstream>
#include <string>

#include "braid/env.hpp"
#include "braid/errors.hpp"
#include "braid/overlap.hpp"
#include "shape_cache.hpp"

namespace braid::overlap {

// BRAID_OVERLAP_MAX_RATIO in (0, 1]: the fallback's threshold (SearchInputs::max_ratio), default 0.97.
double SearchInputs::default_max_ratio() {
  static const double r =
      env::number("BRAID_OVERLAP_MAX_RATIO", 0.97, [](double v) { return v > 0 && v <= 1; }, "a number in (0, 1]");
  return r;
}

namespace {
constexpr const char* kOverlapTable =
#include "braid_overlap_table.inc"
    ;
}  // namespace

std::vector<std::pair<std::string, double>> parse_overlap_table(const std::string& text) {
  std::vector<std::pair<std::string, double>> rows;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    std::istringstream ls(line);
    std::string name, value, extra;
    if (!(ls >> name)) continue;  // blank or comment
    char* end = nullptr;
    double v = 0;
    if (ls >> value) v = std::strtod(value.c_str(), &end);
    if (value.empty() || *end || !(v >= 0) || (ls >> extra))
      throw UsageError("overlap table: expected 'transport value', got '" + line + "'", __FILE__, __LINE__);
    rows.emplace_back(name, v);
  }
  return rows;
}

double default_comm_stretch(Transport t) {
  static const double env =
      env::number("BRAID_OVERLAP_COMM_STRETCH", -1.0, [](double v) { return v >= 0; }, "a number >= 0");
  if (env >= 0) return env;
  static const auto table = parse_overlap_table(kOverlapTable);
  for (const auto& [name, v] : table)
    if (name == transport_name(t)) return v;
  return 0;
}

double BandwidthCurve::latency_us(double b) const {
  BRAID_REQUIRE(!bytes.empty() && bytes.size() == us.size(), "bandwidth curve is empty");
  if (b <= bytes.front()) return us.front();  // below the smallest size: the latency floor
  if (bytes.size() == 1) return us[0] * (b / bytes[0]);
  size_t i = 1;
  while (i + 1 < bytes.size() && bytes[i] < b) ++i;
  const double x0 = bytes[i - 1], x1 = bytes[i], y0 = us[i - 1], y1 = us[i];
  return std::max(y0 + (y1 - y0) * (b - x0) / (x1 - x0), us.front());
}

namespace {
// Bytes and compute time of waves [w0, w1).
double group_bytes(const SearchInputs& in, int w0, int w1) {
  double waves = w1 - w0;
  if (w1 == in.waves) waves -= (1.0 - in.last_wave_fraction);
  return waves * in.bytes_per_wave;
}
double group_compute(const SearchInputs& in, int w0, int w1) {
  double t = (w1 - w0) * in.wave_us;
  if (w0 == 0) t += in.first_wave_extra_us;
  return t;
}
}  // namespace

double predict_us(const SearchInputs& in, const std::vector<int>& group_waves) {
  const bool tail = !in.tail.bytes.empty();
  double tp = 0, tm = in.comm_start_us, tt = 0;  // compute, communication chain, tail chain
  if (tail && in.tail_after_gemm) tt = group_compute(in, 0, in.waves);
  int w = 0;
  for (int gw : group_waves) {
    tp += group_compute(in, w, w + gw);
    tm = std::max(tp, tm) + in.comm.latency_us(group_bytes(in, w, w + gw)) + in.signal_overhead_us;
    if (tail) tt = std::max(tt, tm) + in.tail.latency_us(group_bytes(in, w, w + gw));
    w += gw;
  }
  BRAID_REQUIRE(w == in.waves, "predict_us: partition does not cover the waves");
  return tail ? tt : tm;
}

double predict_contended_us(const SearchInputs& in, const std::vector<int>& group_waves) {
  // The calibration (SearchInputs::comm_stretch) is added last, to the contended time it was fitted on.
  const double stretch = in.comm_stretch > 0 ? in.comm_stretch * in.comm.latency_us(group_bytes(in, 0, in.waves)) : 0;
  const double p0 = predict_us(in, group_waves);
  if (in.interference <= 0) return p0 + stretch;
  double serial = group_compute(in, 0, in.waves);
  int w = 0;
  for (int gw : group_waves) {
    const double b = group_bytes(in, w, w + gw);
    serial += in.comm.latency_us(b) + in.signal_overhead_us + (in.tail.bytes.empty() ? 0 : in.tail.latency_us(b));
    w += gw;
  }
  return p0 + in.interference * (serial - p0) + stretch;
}

namespace {
// The dynamic programme over compositions (pruned as the paper's enumeration): for each group count p, the
// partition minimising the uncontended recurrence's communication chain (without any tail); one entry per p
// that has an admissible partition, in increasing p. `candidates` counts the transitions evaluated.
std::vector<std::vector<int>> per_count_bests(const SearchInputs& in, int max_groups, int* candidates) {
  const int T = in.waves;
  BRAID_REQUIRE(T >= 1, "search_partition: no waves");
  constexpr int S1 = 2, SP = 4;  // the paper's pruning of the first and last group sizes
  max_groups = std::max(1, std::min(max_groups, T));
  const double inf = std::numeric_limits<double>::infinity();
  // best[p][w]: minimal t_m_acc with p groups covering waves [0, w); from[p][w]: previous boundary.
  std::vector<std::vector<double>> best(max_groups + 1, std::vector<double>(T + 1, inf));
  std::vector<std::vector<int>> from(max_groups + 1, std::vector<int>(T + 1, -1));
  best[0][0] = in.comm_start_us;  // the chain's start (predict_us's initial t_m)
  int evaluated = 0;
  for (int p = 1; p <= max_groups; ++p) {
    for (int w = 1; w <= T; ++w) {
      for (int v = (p == 1 ? 0 : 1); v < w; ++v) {
        if (best[p - 1][v] == inf) continue;
        if (p == 1 && w - v > S1 && w != T) continue;      // first group at most S1 waves (unless only one)
        if (w == T && p > 1 && w - v > SP) continue;        // last group at most S_P waves
        ++evaluated;
        const double tp = group_compute(in, 0, w);          // t_p_acc at boundary w
        const double tm = std::max(tp, best[p - 1][v]) + in.comm.latency_us(group_bytes(in, v, w)) +
                          in.signal_overhead_us;
        if (tm < best[p][w]) {
          best[p][w] = tm;
          from[p][w] = v;
        }
      }
    }
  }
  if (candidates) *candidates = evaluated;
  std::vector<std::vector<int>> out;
  for (int bp = 1; bp <= max_groups; ++bp) {
    if (best[bp][T] == inf) continue;
    std::vector<int> gw;
    for (int p = bp, w = T; p > 0; --p) {
      const int v = from[p][w];
      gw.push_back(w - v);
      w = v;
    }
    std::reverse(gw.begin(), gw.end());
    out.push_back(std::move(gw));
  }
  return out;
}
}  // namespace

SearchResult search_partition(const SearchInputs& in, int max_groups) {
  SearchResult res;
  const std::vector<std::vector<int>> bests = per_count_bests(in, max_groups, &res.candidates);
  // Each group count's best (uncontended) partition, scored with contention and the tail: under
  // contention fewer, larger groups can win. One group of all waves is always a candidate.
  const std::vector<int> one{in.waves};
  res.group_waves = one;
  res.predicted_us = predict_contended_us(in, one);
  for (const auto& gw : bests) {
    const double t = predict_contended_us(in, gw);
    if (t < res.predicted_us) res.group_waves = gw, res.predicted_us = t;
  }
  // Then the sequential fallback.
  if (in.sequential_us > 0 && res.predicted_us > in.max_ratio * in.sequential_us) {
    res.sequential = true;
    res.group_waves = one;
    res.predicted_us = in.sequential_us;
  }
  return res;
}

std::vector<std::vector<int>> candidate_partitions(const SearchInputs& in, int max_groups, int k) {
  BRAID_REQUIRE(k >= 1, "candidate_partitions: k >= 1");
  std::vector<std::vector<int>> all = per_count_bests(in, max_groups, nullptr);
  // The same measurements with each group's tail in line (no second chain); not where the tail waits for
  // the GEMM's end anyway (no sum can run beside the GEMM, in line or not).
  if (!in.tail.bytes.empty() && !in.tail_after_gemm) {
    SearchInputs serial = in;
    serial.tail = BandwidthCurve{};
    for (size_t i = 0; i < in.comm.bytes.size(); ++i) serial.comm.us[i] += in.tail.latency_us(in.comm.bytes[i]);
    for (auto& gw : per_count_bests(serial, max_groups, nullptr)) all.push_back(std::move(gw));
  }
  std::vector<std::pair<double, std::vector<int>>> scored;
  for (auto& gw : all) {
    if (gw.size() < 2) continue;  // one group: the fallback's work, measured beside the candidates anyway
    bool seen = false;
    for (const auto& e : scored) seen = seen || e.second == gw;
    if (!seen) scored.emplace_back(predict_contended_us(in, gw), std::move(gw));
  }
  std::stable_sort(scored.begin(), scored.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::vector<int>> out;
  for (auto& e : scored) {
    if (static_cast<int>(out.size()) == k) break;
    out.push_back(std::move(e.second));
  }
  return out;
}

// ---- decision cache ----
void DecisionCache::put(const CachedDecision& d) { detail::put_by_shape(v_, d); }

const CachedDecision* DecisionCache::lookup(Collective coll, int world, int64_t m, int64_t n, int64_t k) const {
  return detail::nearest_m(v_, coll, world, m, n, k, [](const CachedDecision&) { return true; });
}

namespace {
std::string join(const std::vector<int>& v) {
  std::ostringstream o;
  for (size_t i = 0; i < v.size(); ++i) o << (i ? "," : "") << v[i];
  return o.str();
}
std::vector<int> split_ints(const std::string& s) {
  std::vector<int> v;
  std::stringstream ss(s);
  std::string tok;
  while (std::getline(ss, tok, ','))
    if (!tok.empty()) v.push_back(std::stoi(tok));
  return v;
}
std::vector<double> split_doubles(const std::string& s) {
  std::vector<double> v;
  std::stringstream ss(s);
  std::string tok;
  while (std::getline(ss, tok, ','))
    if (!tok.empty()) v.push_back(std::stod(tok));
  return v;
}
std::string join_d(const std::vector<double>& v) {
  std::ostringstream o;
  o.precision(10);
  for (size_t i = 0; i < v.size(); ++i) o << (i ? "," : "") << v[i];
  return o.str();
}
}  // namespace

void DecisionCache::load(const std::string& path) {
  std::ifstream f(path);
  if (!f) return;
  std::string line;
  int ln = 0;
  while (std::getline(f, line)) {
    ++ln;
    if (line.empty() || line[0] == '#') continue;
    std::istringstream is(line);
    std::string coll, waves;
    CachedDecision d;
    if (!(is >> coll >> d.world >> d.m >> d.n >> d.k >> d.tile_config >> d.sm_count >> d.predicted_us >> waves))
      throw UsageError(path + ":" + std::to_string(ln) + ": malformed decision", __FILE__, __LINE__);
    std::string flag;
    if (is >> flag) {
      if (flag != "sequential") throw UsageError(path + ":" + std::to_string(ln) + ": unknown flag " + flag, __FILE__, __LINE__);
      d.sequential = true;
    }
    d.coll = parse_collective(coll);
    d.group_waves = split_ints(waves);
    put(d);
  }
}

void DecisionCache::save(const std::string& path) const {
  std::ofstream f(path);
  if (!f) throw UsageError("cannot write " + path, __FILE__, __LINE__);
  f << "# coll world m n k tile_config sm_count predicted_us group_waves [sequential]\n";
  for (const auto& d : v_)
    f << collective_name(d.coll) << ' ' << d.world << ' ' << d.m << ' ' << d.n << ' ' << d.k << ' ' << d.tile_config
      << ' ' << d.sm_count << ' ' << d.predicted_us << ' ' << join(d.group_waves) << (d.sequential ? " sequential" : "")
      << '\n';
}

// One line per shape: coll world m n k cfg sms waves wave_us first_extra bytes_per_wave last_frac
//                     overhead curve_bytes(csv) curve_us(csv) [interference sequential_us [tail_bytes(csv)
//                     tail_us(csv)] [comm_start=<us>] [tail_after_gemm=1]]
void save_inputs(const std::string& path, const std::vector<MeasuredInputs>& v) {
  std::ofstream f(path, std::ios::app);
  if (!f) throw UsageError("cannot write " + path, __FILE__, __LINE__);
  f.precision(10);
  for (const auto& x : v) {
    f << collective_name(x.coll) << ' ' << x.world << ' ' << x.m << ' ' << x.n << ' ' << x.k << ' ' << x.tile_config
      << ' ' << x.sm_count << ' ' << x.in.waves << ' ' << x.in.wave_us << ' ' << x.in.first_wave_extra_us << ' '
      << x.in.bytes_per_wave << ' ' << x.in.last_wave_fraction << ' ' << x.in.signal_overhead_us << ' '
      << join_d(x.in.comm.bytes) << ' ' << join_d(x.in.comm.us) << ' ' << x.in.interference << ' '
      << x.in.sequential_us
      << (x.in.tail.bytes.empty() ? std::string() : ' ' + join_d(x.in.tail.bytes) + ' ' + join_d(x.in.tail.us));
    if (x.in.comm_start_us > 0) f << " comm_start=" << x.in.comm_start_us;  // optional
    if (x.in.tail_after_gemm) f << " tail_after_gemm=1";                       // optional, last
    f << '\n';
  }
}

std::vector<MeasuredInputs> load_inputs(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw UsageError("cannot read " + path, __FILE__, __LINE__);
  std::vector<MeasuredInputs> v;
  std::string line;
  int ln = 0;
  while (std::getline(f, line)) {
    ++ln;
    if (line.empty() || line[0] == '#') continue;
    std::istringstream is(line);
    MeasuredInputs x;
    std::string coll, cb, cu;
    if (!(is >> coll >> x.world >> x.m >> x.n >> x.k >> x.tile_config >> x.sm_count >> x.in.waves >> x.in.wave_us >>
          x.in.first_wave_extra_us >> x.in.bytes_per_wave >> x.in.last_wave_fraction >> x.in.signal_overhead_us >> cb >>
          cu))
      throw UsageError(path + ":" + std::to_string(ln) + ": malformed inputs", __FILE__, __LINE__);
    double rho = 0, seq = 0;
    if (is >> rho >> seq) x.in.interference = rho, x.in.sequential_us = seq;  // optional (older files)
    // Optional, in this order: the tail curve (two csv tokens), comm_start=<us>, tail_after_gemm=1.
    const std::string kStart = "comm_start=", kAfter = "tail_after_gemm=";
    std::string tb, tu;
    if (is >> tb && tb.rfind(kStart, 0) != 0 && tb.rfind(kAfter, 0) != 0) {
      if (!(is >> tu)) throw UsageError(path + ":" + std::to_string(ln) + ": tail curve without times", __FILE__, __LINE__);
      x.in.tail.bytes = split_doubles(tb);
      x.in.tail.us = split_doubles(tu);
      BRAID_REQUIRE(x.in.tail.bytes.size() == x.in.tail.us.size() && !x.in.tail.bytes.empty(),
                    path + ":" + std::to_string(ln) + ": bad tail curve");
      tb.clear();
      is >> tb;
    }
    if (tb.rfind(kStart, 0) == 0) {
      x.in.comm_start_us = std::stod(tb.substr(kStart.size()));
      tb.clear();
      is >> tb;
    }
    if (tb.rfind(kAfter, 0) == 0) x.in.tail_after_gemm = std::stoi(tb.substr(kAfter.size())) != 0;
    else if (!tb.empty()) throw UsageError(path + ":" + std::to_string(ln) + ": unexpected '" + tb + "'", __FILE__, __LINE__);
    x.coll = parse_collective(coll);
    x.in.comm.bytes = split_doubles(cb);
    x.in.comm.us = split_doubles(cu);
    BRAID_REQUIRE(x.in.comm.bytes.size() == x.in.comm.us.size() && !x.in.comm.bytes.empty(),
                  path + ":" + std::to_string(ln) + ": bad bandwidth curve");
    v.push_back(x);
  }
  return v;
}

int plan_overlap_main(int argc, char** argv, std::ostream& os) {
  std::string inputs, transport = "kernels";
  int max_groups = 8;  // as bench gemm-rs --measure
  int candidates = 0;  // > 0: also list candidate_partitions (bench gemm-rs --tune-candidates)
  for (int i = 0; i < argc; ++i) {
    const std::string k = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) throw UsageError(k + ": missing value", __FILE__, __LINE__);
      return argv[++i];
    };
    if (k == "--inputs") inputs = val();
    else if (k == "--transport") transport = val();
    else if (k == "--max-groups") max_groups = std::stoi(val());
    else if (k == "--candidates") candidates = std::stoi(val());
    else throw UsageError("plan-overlap: unknown option " + k, __FILE__, __LINE__);
  }
  if (inputs.empty()) throw UsageError("plan-overlap: --inputs FILE (from bench gemm-rs --measure)", __FILE__, __LINE__);
  Transport t = Transport::kNcclKernels;
  if (transport == "symmetric") t = Transport::kNcclSymmetric;
  else if (transport == "copy-engine") t = Transport::kNcclCopyEngine;
  else if (transport == "peer-copy-engine") t = Transport::kPeerCopyEngine;
  else if (transport != "kernels")
    throw UsageError("--transport: kernels, symmetric, copy-engine or peer-copy-engine", __FILE__, __LINE__);
  os << "# search replayed on " << inputs << " (" << transport_name(t) << ", comm_stretch " << default_comm_stretch(t)
     << ", at most " << max_groups << " groups); times in us\n"
     << "#      M      N      K waves tail | decision   predicted  sequential | uncontended optimum: contended | partition\n";
  for (MeasuredInputs& x : load_inputs(inputs)) {
    x.in.comm_stretch = default_comm_stretch(t);
    const SearchResult r = search_partition(x.in, max_groups);
    SearchInputs plain = x.in;
    plain.interference = 0, plain.comm_stretch = 0, plain.sequential_us = 0;
    const std::vector<int> opt = search_partition(plain, max_groups).group_waves;
    char line[256];
    std::snprintf(line, sizeof line, "%8lld %6lld %6lld %5d %4s | %-10s %9.1f %11.1f | %9.1f (%s) | ", (long long)x.m,
                  (long long)x.n, (long long)x.k, x.in.waves, x.in.tail.bytes.empty() ? "no" : "yes",
                  r.sequential ? "sequential" : "overlap", r.predicted_us, x.in.sequential_us,
                  predict_contended_us(x.in, opt), join(opt).c_str());
    os << line << (r.sequential ? "-" : join(r.group_waves)) << '\n';
    if (candidates > 0) {
      os << "#   candidates:";
      for (const auto& c : candidate_partitions(x.in, max_groups, candidates))
        os << ' ' << join(c) << " (" << std::lround(predict_contended_us(x.in, c)) << ')';
      os << '\n';
    }
  }
  return 0;
}

}  // namespace braid::overlap
