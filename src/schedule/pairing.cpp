// The DHelix pairing search: segment costs, the DP of eq. (2), topological orders, plans and files.
#include "braid/schedule/pairing.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <limits>
#include <ostream>
#include <sstream>

#include "braid/errors.hpp"
#include "text_format.hpp"

namespace braid::schedule {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

unsigned link_bit(const Op& o) {
  if (o.kind != OpKind::Comm) return 0;
  return o.link == LinkClass::Local ? 1u : o.link == LinkClass::Cross ? 2u : 4u;
}

// Packs a segment of at most 8 operators with indices < 255 into 64 bits (0 = none).
bool pack(const std::vector<int>& seg, std::uint64_t& out) {
  if (seg.size() > 8) return false;
  std::uint64_t k = 0;
  for (int x : seg) {
    if (x < 0 || x >= 255) return false;
    k = (k << 8) | std::uint64_t(x + 1);
  }
  out = k;
  return true;
}

std::string join(const std::vector<std::string>& v, char sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? std::string(1, sep) : "") + v[i];
  return s;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

}  // namespace

// ---- PairCost ---------------------------------------------------------------------------------

PairCost::PairCost(const Layer& layer, const PairTable& table) : layer_(layer), table_(table) {
  if (auto e = validate_layer(layer); !e.empty()) throw UsageError("layer: " + e, __FILE__, __LINE__);
  for (const Op& o : layer.fwd) {
    fsolo_.push_back(table.solo_us(o.name).value_or(o.solo_us));
    fmask_.push_back(link_bit(o));
  }
  for (const Op& o : layer.bwd) {
    bsolo_.push_back(table.solo_us(o.name).value_or(o.solo_us));
    bmask_.push_back(link_bit(o));
  }
  const size_t nf = layer.fwd.size(), nb = layer.bwd.size();
  rate_.assign(nf, std::vector<double>(nb, 0.5));
  pair_.assign(nf, std::vector<double>(nb, std::numeric_limits<double>::quiet_NaN()));
  for (size_t i = 0; i < nf; ++i)
    for (size_t j = 0; j < nb; ++j) {
      auto p = table.corun_us(layer.fwd[i].name, layer.bwd[j].name);
      if (!p) continue;
      pair_[i][j] = *p;
      const double raw = overlap_effectiveness(fsolo_[i], bsolo_[j], *p);
      const double oef = std::clamp(raw, -1.0, 1.0);
      if (raw != oef) bound_ok_ = false;
      rate_[i][j] = 1.0 / (2.0 - oef);
    }
  for (size_t i = 0; i < nf; ++i)
    for (size_t j = 0; j < nb; ++j)
      if (layer.fwd[i].kind == OpKind::Compute && layer.bwd[j].kind == OpKind::Compute)
        max_compute_rate_ = std::max(max_compute_rate_, 2.0 * rate_[i][j]);
  auto segmented = [](const std::string& s) { return s.find('+') != std::string::npos; };
  for (const auto& [k, v] : table.corun) segment_entries_ |= segmented(k.first) || segmented(k.second);
  if (segment_entries_) bound_ok_ = false;
}

double PairCost::op_solo(Pass p, int i) const { return p == Pass::Forward ? fsolo_.at(i) : bsolo_.at(i); }

double PairCost::solo(Pass p, const std::vector<int>& seg) const {
  double s = 0;
  for (int i : seg) s += op_solo(p, i);
  return s;
}

double PairCost::op_oef(int i, int j) const {
  return std::isnan(pair_.at(i).at(j)) ? 0.0 : overlap_effectiveness(fsolo_[i], bsolo_[j], pair_[i][j]);
}

bool PairCost::legal(const std::vector<int>& fseg, const std::vector<int>& bseg) const {
  unsigned fm = 0, bm = 0;
  for (int i : fseg) fm |= fmask_.at(i);
  for (int j : bseg) bm |= bmask_.at(j);
  return (fm & bm) == 0;
}

// Both strands walk their segments; a co-running pair (i, j) advances at rate_[i][j] each.
double PairCost::compose(const std::vector<int>& fseg, const std::vector<int>& bseg) const {
  if (fseg.size() == 1 && bseg.size() == 1 && !std::isnan(pair_[fseg[0]][bseg[0]]))
    return pair_[fseg[0]][bseg[0]];
  if (segment_entries_) {
    std::vector<std::string> fn, bn;
    for (int i : fseg) fn.push_back(layer_.fwd[i].name);
    for (int j : bseg) bn.push_back(layer_.bwd[j].name);
    if (auto p = table_.corun_us(join(fn, '+'), join(bn, '+'))) return *p;
  }
  size_t a = 0, b = 0;
  double ra = fseg.empty() ? 0 : fsolo_[fseg[0]], rb = bseg.empty() ? 0 : bsolo_[bseg[0]], t = 0;
  while (a < fseg.size() && b < bseg.size()) {
    const double r = rate_[fseg[a]][bseg[b]];
    const double work = std::min(ra, rb);
    t += work / r;
    ra -= work;
    rb -= work;
    if (ra <= 1e-12 && ++a < fseg.size()) ra = fsolo_[fseg[a]];
    if (rb <= 1e-12 && ++b < bseg.size()) rb = bsolo_[bseg[b]];
  }
  if (a < fseg.size()) {
    t += ra;
    while (++a < fseg.size()) t += fsolo_[fseg[a]];
  }
  if (b < bseg.size()) {
    t += rb;
    while (++b < bseg.size()) t += bsolo_[bseg[b]];
  }
  return t;
}

double PairCost::corun(const std::vector<int>& fseg, const std::vector<int>& bseg) const {
  if (!legal(fseg, bseg)) return kInf;
  std::uint64_t fk, bk;
  if (!pack(fseg, fk) || !pack(bseg, bk)) return compose(fseg, bseg);
  auto it = cache_.find({fk, bk});
  if (it != cache_.end()) return it->second;
  const double v = compose(fseg, bseg);
  cache_.emplace(std::make_pair(fk, bk), v);
  return v;
}

// ---- eq. (2) over fixed segments --------------------------------------------------------------

double pair_dp(int nf, int nb, const std::function<double(int, int)>& pair,
               const std::function<double(int)>& solo_f, const std::function<double(int)>& solo_b,
               std::vector<std::pair<int, int>>* steps) {
  // T[i][j]: best make-span of the first i forward and j backward segments; move[i][j] = 0 forward
  // alone, 1 backward alone, 2 paired.
  std::vector<std::vector<double>> T(nf + 1, std::vector<double>(nb + 1, kInf));
  std::vector<std::vector<int>> move(nf + 1, std::vector<int>(nb + 1, -1));
  T[0][0] = 0;
  for (int i = 0; i <= nf; ++i)
    for (int j = 0; j <= nb; ++j) {
      if (i == 0 && j == 0) continue;
      auto consider = [&](double v, int m) {
        if (v < T[i][j]) {
          T[i][j] = v;
          move[i][j] = m;
        }
      };
      if (i > 0) consider(T[i - 1][j] + solo_f(i - 1), 0);
      if (j > 0) consider(T[i][j - 1] + solo_b(j - 1), 1);
      if (i > 0 && j > 0) consider(T[i - 1][j - 1] + pair(i - 1, j - 1), 2);
    }
  if (steps) {
    steps->clear();
    for (int i = nf, j = nb; i > 0 || j > 0;) {
      const int m = move[i][j];
      if (m == 0) steps->push_back({--i, -1});
      else if (m == 1) steps->push_back({-1, --j});
      else {
        --i;
        --j;
        steps->push_back({i, j});
      }
    }
    std::reverse(steps->begin(), steps->end());
  }
  return T[nf][nb];
}

// ---- topological orders -------------------------------------------------------------------------

namespace {

// Depth-first enumeration of the topological orders of a pass, with push/pop/leaf callbacks so that
// the search can extend its DP one operator at a time.
class TopoWalk {
 public:
  TopoWalk(const std::vector<Op>& ops, int max_shift) : ops_(ops), max_shift_(max_shift) {
    const int n = static_cast<int>(ops.size());
    waiting_.assign(n, 0);
    users_.assign(n, {});
    for (int i = 0; i < n; ++i)
      for (int d : ops[i].deps) {
        ++waiting_[i];
        users_[d].push_back(i);
      }
    placed_.assign(n, false);
  }

  // Calls push(op) / pop() around each placement and leaf() at each complete order; a placement
  // whose push() returns false is not extended; stops when leaf() returns false.
  template <class Push, class Pop, class Leaf>
  bool run(Push&& push, Pop&& pop, Leaf&& leaf) {
    const int n = static_cast<int>(ops_.size());
    const int pos = depth_;
    if (pos == n) return leaf();
    int forced = -1;
    if (max_shift_ >= 0)
      for (int y = 0; y < n && y + max_shift_ <= pos; ++y)
        if (!placed_[y]) {
          forced = y;
          break;
        }
    for (int x = 0; x < n; ++x) {
      if (placed_[x] || waiting_[x] != 0) continue;
      if (forced >= 0 && x != forced) continue;
      if (max_shift_ >= 0 && x > pos + max_shift_) break;
      placed_[x] = true;
      for (int u : users_[x]) --waiting_[u];
      ++depth_;
      const bool descend = push(x);
      const bool go_on = descend ? run(push, pop, leaf) : true;
      pop();
      --depth_;
      for (int u : users_[x]) ++waiting_[u];
      placed_[x] = false;
      if (!go_on) return false;
    }
    return true;
  }

 private:
  const std::vector<Op>& ops_;
  int max_shift_;
  std::vector<int> waiting_;
  std::vector<std::vector<int>> users_;
  std::vector<bool> placed_;
  int depth_ = 0;
};

}  // namespace

std::vector<std::vector<int>> topological_orders(const std::vector<Op>& ops, std::size_t max_orders,
                                                 int max_shift) {
  std::vector<std::vector<int>> out;
  if (max_orders == 0) return out;
  std::vector<int> cur;
  TopoWalk walk(ops, max_shift);
  walk.run([&](int x) { cur.push_back(x); return true; }, [&] { cur.pop_back(); },
           [&] {
             out.push_back(cur);
             return out.size() < max_orders;
           });
  return out;
}

// ---- the DP with cut points, one backward operator at a time --------------------------------------

// T[j][i]: best make-span of forward prefix F[0..i) with backward prefix B[0..j), where the last step
// takes a forward segment of a operators and a backward segment of b operators (a, b <= K).
class PairDp {
 public:
  PairDp(const PairCost& cost, std::vector<int> fwd, int K) : cost_(cost), F_(std::move(fwd)), K_(K) {
    if (K_ < 1) throw UsageError("max_segment_ops must be >= 1", __FILE__, __LINE__);
    nf_ = static_cast<int>(F_.size());
    fmask_.assign(nf_ + 1, std::vector<unsigned>(K_ + 1, 0));
    fkey_.assign(nf_ + 1, std::vector<std::uint64_t>(K_ + 1, 0));
    fseg_.assign(nf_ + 1, std::vector<std::vector<int>>(K_ + 1));
    for (int i = 1; i <= nf_; ++i)
      for (int a = 1; a <= std::min(K_, i); ++a) {
        fseg_[i][a].assign(F_.begin() + (i - a), F_.begin() + i);
        for (int x : fseg_[i][a]) fmask_[i][a] |= cost_.fmask_[x];
        if (!pack(fseg_[i][a], fkey_[i][a])) fkey_[i][a] = kNoKey;
      }
    remf_.assign(nf_ + 1, 0);
    remfc_.assign(nf_ + 1, 0);
    for (int i = nf_ - 1; i >= 0; --i) {
      remf_[i] = remf_[i + 1] + cost_.fsolo_[F_[i]];
      remfc_[i] = remfc_[i + 1] + (cost_.fmask_[F_[i]] ? 0 : cost_.fsolo_[F_[i]]);
    }
    for (size_t j = 0; j < cost_.bsolo_.size(); ++j) {
      remb_ += cost_.bsolo_[j];
      if (!cost_.bmask_[j]) rembc_ += cost_.bsolo_[j];
    }
    std::vector<double> col(nf_ + 1, 0);
    std::vector<Move> mv(nf_ + 1, Move{1, 0});
    for (int i = 1; i <= nf_; ++i) col[i] = col[i - 1] + cost_.fsolo_[F_[i - 1]];
    T_.push_back(std::move(col));
    M_.push_back(std::move(mv));
  }

  // Appends backward operator `x` and computes the new column.
  void push(int x) {
    B_.push_back(x);
    remb_ -= cost_.bsolo_[x];
    if (!cost_.bmask_[x]) rembc_ -= cost_.bsolo_[x];
    const int j = static_cast<int>(B_.size());
    const int kb = std::min(K_, j);
    std::vector<std::vector<int>> bseg(kb + 1);
    std::vector<unsigned> bmask(kb + 1, 0);
    std::vector<std::uint64_t> bkey(kb + 1, 0);
    for (int b = 1; b <= kb; ++b) {
      bseg[b].assign(B_.end() - b, B_.end());
      for (int y : bseg[b]) bmask[b] |= cost_.bmask_[y];
      if (!pack(bseg[b], bkey[b])) bkey[b] = kNoKey;
    }
    std::vector<double> col(nf_ + 1, kInf);
    std::vector<Move> mv(nf_ + 1, Move{0, 1});
    const double bsolo = cost_.bsolo_[x];
    for (int i = 0; i <= nf_; ++i) {
      double best = T_[j - 1][i] + bsolo;
      Move m{0, 1};
      if (i > 0) {
        const double v = col[i - 1] + cost_.fsolo_[F_[i - 1]];
        if (v < best) best = v, m = Move{1, 0};
      }
      for (int a = 1; a <= std::min(K_, i); ++a)
        for (int b = 1; b <= kb; ++b) {
          if (fmask_[i][a] & bmask[b]) continue;  // two collectives on one link
          const double prev = T_[j - b][i - a];
          if (prev >= best) continue;
          double c;
          if (fkey_[i][a] != kNoKey && bkey[b] != kNoKey) {
            auto it = cost_.cache_.find({fkey_[i][a], bkey[b]});
            if (it != cost_.cache_.end()) {
              c = it->second;
            } else {
              c = cost_.compose(fseg_[i][a], bseg[b]);
              cost_.cache_.emplace(std::make_pair(fkey_[i][a], bkey[b]), c);
            }
          } else {
            c = cost_.corun(fseg_[i][a], bseg[b]);
          }
          const double v = prev + c;
          if (v < best) best = v, m = Move{static_cast<std::uint8_t>(a), static_cast<std::uint8_t>(b)};
        }
      col[i] = best;
      mv[i] = m;
    }
    T_.push_back(std::move(col));
    M_.push_back(std::move(mv));
  }

  // Removes the last backward operator.
  void pop() {
    remb_ += cost_.bsolo_[B_.back()];
    if (!cost_.bmask_[B_.back()]) rembc_ += cost_.bsolo_[B_.back()];
    B_.pop_back();
    T_.pop_back();
    M_.pop_back();
  }

  double best() const { return T_.back()[nf_]; }

  // A lower bound on the make-span of any completion of the current backward prefix (valid when
  // cost.bound_ok_): per strand, remaining solo work; overall, remaining compute work at the
  // fastest compute co-run rate.
  double lower_bound() const {
    double lb = std::numeric_limits<double>::infinity();
    const auto& col = T_.back();
    for (int i = 0; i <= nf_; ++i) {
      const double rest = std::max({remf_[i], remb_, (remfc_[i] + rembc_) / cost_.max_compute_rate_});
      lb = std::min(lb, col[i] + rest);
    }
    return lb;
  }

  // The steps of the best plan for the current full prefix.
  std::vector<PlanStep> steps() const {
    std::vector<PlanStep> out;
    for (int i = nf_, j = static_cast<int>(B_.size()); i > 0 || j > 0;) {
      const Move m = M_[j][i];
      PlanStep s;
      s.fwd.assign(F_.begin() + (i - m.a), F_.begin() + i);
      s.bwd.assign(B_.begin() + (j - m.b), B_.begin() + j);
      s.time_us = T_[j][i] - T_[j - m.b][i - m.a];
      out.push_back(std::move(s));
      i -= m.a;
      j -= m.b;
    }
    std::reverse(out.begin(), out.end());
    return out;
  }

  const std::vector<int>& fwd() const { return F_; }
  const std::vector<int>& bwd() const { return B_; }

  // True when another prefix with the same placed set and the same last K-1 operators reached
  // columns no worse than ours on every cell of the last K columns (the only state a completion
  // depends on); otherwise remembers ours. `placed` is the bitmask of placed operators.
  bool dominated(std::uint64_t placed) {
    const int j = static_cast<int>(B_.size());
    std::vector<int> tail(B_.end() - std::min(j, K_ - 1), B_.end());
    std::uint64_t tk = 0;
    if (!pack(tail, tk)) return false;
    std::vector<double> cols;
    for (int b = std::min(j, K_ - 1); b >= 0; --b) cols.insert(cols.end(), T_[j - b].begin(), T_[j - b].end());
    auto it = memo_.find({placed, tk});
    if (it != memo_.end()) {
      bool worse = true, better = true;
      for (size_t k = 0; k < cols.size(); ++k) {
        worse &= cols[k] >= it->second[k] - 1e-9;
        better &= cols[k] <= it->second[k];
      }
      if (worse) return true;
      if (better) it->second = std::move(cols);
      return false;
    }
    if (memo_.size() < kMemoStates) memo_.emplace(std::make_pair(placed, tk), std::move(cols));
    return false;
  }

 private:
  struct Move {
    std::uint8_t a, b;
  };
  const PairCost& cost_;
  std::vector<int> F_, B_;
  int K_, nf_ = 0;
  static constexpr std::uint64_t kNoKey = ~std::uint64_t(0);
  std::vector<std::vector<unsigned>> fmask_;
  std::vector<std::vector<std::uint64_t>> fkey_;
  std::vector<std::vector<std::vector<int>>> fseg_;
  std::vector<std::vector<double>> T_;
  std::vector<std::vector<Move>> M_;
  std::vector<double> remf_, remfc_;  // forward work (all, compute) from position i on
  double remb_ = 0, rembc_ = 0;       // backward work (all, compute) not yet placed
  static constexpr std::size_t kMemoStates = 400000;
  struct KeyHash {
    std::size_t operator()(const std::pair<std::uint64_t, std::uint64_t>& k) const {
      return std::hash<std::uint64_t>()(k.first * 0x9E3779B97F4A7C15ull ^ k.second);
    }
  };
  std::unordered_map<std::pair<std::uint64_t, std::uint64_t>, std::vector<double>, KeyHash> memo_;
};

namespace {

// Merges runs of single-strand steps of the same strand and recomputes their times from solos.
std::vector<PlanStep> merge_solo_steps(const PairCost& cost, std::vector<PlanStep> steps) {
  std::vector<PlanStep> out;
  for (auto& s : steps) {
    if (!out.empty()) {
      PlanStep& p = out.back();
      const bool both_f = p.bwd.empty() && s.bwd.empty(), both_b = p.fwd.empty() && s.fwd.empty();
      if (both_f || both_b) {
        p.fwd.insert(p.fwd.end(), s.fwd.begin(), s.fwd.end());
        p.bwd.insert(p.bwd.end(), s.bwd.begin(), s.bwd.end());
        p.time_us = both_f ? cost.solo(Pass::Forward, p.fwd) : cost.solo(Pass::Backward, p.bwd);
        continue;
      }
    }
    out.push_back(std::move(s));
  }
  return out;
}

void finish(const PairCost& cost, Plan& plan) {
  plan.steps = merge_solo_steps(cost, std::move(plan.steps));
  plan.total_us = 0;
  for (const auto& s : plan.steps) plan.total_us += s.time_us;
  plan.serial_us = plan.comm_us = 0;
  for (Pass p : {Pass::Forward, Pass::Backward}) {
    const auto& ops = cost.layer().ops(p);
    for (size_t i = 0; i < ops.size(); ++i) {
      const double t = cost.op_solo(p, static_cast<int>(i));
      plan.serial_us += t;
      if (ops[i].kind == OpKind::Comm) plan.comm_us += t;
    }
  }
}

}  // namespace

double Plan::hidden_comm_fraction() const {
  if (comm_us <= 0) return 0;
  return std::clamp((serial_us - total_us) / comm_us, 0.0, 1.0);
}

Plan pair_orders(const PairCost& cost, const std::vector<int>& fwd_order,
                 const std::vector<int>& bwd_order, int max_segment_ops) {
  PairDp dp(cost, fwd_order, max_segment_ops);
  for (int x : bwd_order) dp.push(x);
  Plan plan;
  plan.fwd_order = fwd_order;
  plan.bwd_order = bwd_order;
  plan.steps = dp.steps();
  plan.orders_searched = 1;
  finish(cost, plan);
  return plan;
}

Plan search_plan(const PairCost& cost, const SearchOptions& opt) {
  const Layer& L = cost.layer();
  Plan best;
  best.total_us = kInf;
  std::size_t searched = 0;
  for (const auto& F : topological_orders(L.fwd, opt.max_orders, opt.max_shift)) {
    PairDp dp(cost, F, opt.max_segment_ops);
    std::size_t leaves = 0;
    TopoWalk walk(L.bwd, opt.max_shift);
    const bool bound = cost.bound_ok();
    const bool memo = L.bwd.size() <= 64;
    std::uint64_t placed = 0;
    walk.run(
        [&](int x) {
          dp.push(x);
          if (memo) placed |= std::uint64_t(1) << x;
          if ((bound && dp.lower_bound() >= best.total_us - 1e-9) || (memo && dp.dominated(placed))) {
            ++best.orders_pruned;
            return false;
          }
          return true;
        },
        [&] {
          if (memo) placed &= ~(std::uint64_t(1) << dp.bwd().back());
          dp.pop();
        },
             [&] {
               ++leaves;
               if (dp.best() < best.total_us - 1e-9) {
                 best.total_us = dp.best();
                 best.fwd_order = dp.fwd();
                 best.bwd_order = dp.bwd();
                 best.steps = dp.steps();
               }
               return leaves < opt.max_orders;
             });
    searched += leaves;
  }
  if (best.steps.empty() && !(L.fwd.empty() && L.bwd.empty()))
    throw UsageError("pairing search found no plan", __FILE__, __LINE__);
  const std::size_t pruned = best.orders_pruned;
  best.orders_searched = searched;
  finish(cost, best);
  best.orders_pruned = pruned;
  return best;
}

// ---- validation -----------------------------------------------------------------------------------

namespace {
std::string check_order(const std::vector<Op>& ops, const std::vector<int>& order, const char* what) {
  std::vector<int> pos(ops.size(), -1);
  if (order.size() != ops.size()) return std::string(what) + " order has the wrong length";
  for (size_t k = 0; k < order.size(); ++k) {
    const int x = order[k];
    if (x < 0 || x >= static_cast<int>(ops.size()) || pos[x] >= 0)
      return std::string(what) + " order is not a permutation";
    pos[x] = static_cast<int>(k);
  }
  for (size_t x = 0; x < ops.size(); ++x)
    for (int d : ops[x].deps)
      if (pos[d] > pos[x]) return ops[x].name + " runs before its dependency " + ops[d].name;
  return {};
}
}  // namespace

std::string validate_plan(const PairCost& cost, const Plan& plan) {
  const Layer& L = cost.layer();
  if (auto e = check_order(L.fwd, plan.fwd_order, "forward"); !e.empty()) return e;
  if (auto e = check_order(L.bwd, plan.bwd_order, "backward"); !e.empty()) return e;
  std::vector<int> f, b;
  double total = 0;
  for (size_t k = 0; k < plan.steps.size(); ++k) {
    const PlanStep& s = plan.steps[k];
    if (s.fwd.empty() && s.bwd.empty()) return "step " + std::to_string(k) + " is empty";
    if (!s.fwd.empty() && !s.bwd.empty() && !cost.legal(s.fwd, s.bwd))
      return "step " + std::to_string(k) + " pairs two collectives on the same link";
    const double t = s.fwd.empty()   ? cost.solo(Pass::Backward, s.bwd)
                     : s.bwd.empty() ? cost.solo(Pass::Forward, s.fwd)
                                     : cost.corun(s.fwd, s.bwd);
    if (std::abs(t - s.time_us) > 1e-6 * std::max(1.0, t))
      return "step " + std::to_string(k) + " time does not match the cost model";
    total += s.time_us;
    f.insert(f.end(), s.fwd.begin(), s.fwd.end());
    b.insert(b.end(), s.bwd.begin(), s.bwd.end());
  }
  if (f != plan.fwd_order) return "steps do not follow the forward order";
  if (b != plan.bwd_order) return "steps do not follow the backward order";
  if (std::abs(total - plan.total_us) > 1e-6 * std::max(1.0, total)) return "total_us is not the sum of steps";
  return {};
}

// ---- plan file ------------------------------------------------------------------------------------

PlanFile to_plan_file(const Layer& layer, const Plan& plan) {
  PlanFile f;
  f.model = layer.model;
  f.parallel = layer.parallel;
  for (int i : plan.fwd_order) f.fwd_order.push_back(layer.fwd.at(i).name);
  for (int j : plan.bwd_order) f.bwd_order.push_back(layer.bwd.at(j).name);
  for (const auto& s : plan.steps) {
    PlanFile::Step st;
    for (int i : s.fwd) st.fwd.push_back(layer.fwd.at(i).name);
    for (int j : s.bwd) st.bwd.push_back(layer.bwd.at(j).name);
    st.time_us = s.time_us;
    f.steps.push_back(std::move(st));
  }
  f.total_us = plan.total_us;
  f.serial_us = plan.serial_us;
  f.comm_us = plan.comm_us;
  return f;
}

Plan from_plan_file(const Layer& layer, const PlanFile& file) {
  auto resolve = [&](Pass p, const std::vector<std::string>& names) {
    std::vector<int> out;
    for (const auto& n : names) {
      const int i = layer.find(p, n);
      if (i < 0) throw UsageError("plan names unknown operator " + n, __FILE__, __LINE__);
      out.push_back(i);
    }
    return out;
  };
  Plan p;
  p.fwd_order = resolve(Pass::Forward, file.fwd_order);
  p.bwd_order = resolve(Pass::Backward, file.bwd_order);
  for (const auto& s : file.steps) p.steps.push_back({resolve(Pass::Forward, s.fwd), resolve(Pass::Backward, s.bwd), s.time_us});
  p.total_us = file.total_us;
  p.serial_us = file.serial_us;
  p.comm_us = file.comm_us;
  return p;
}

void write_plan(std::ostream& os, const PlanFile& f) {
  auto word = [](const std::string& s) { return s.empty() ? std::string("-") : s; };
  auto seg = [](const std::vector<std::string>& v) { return v.empty() ? std::string("-") : join(v, '+'); };
  os << "braid-plan 1\n";
  os << "model " << word(f.model) << "\n";
  os << "parallel " << word(f.parallel) << "\n";
  os << "fwd_order";
  for (const auto& n : f.fwd_order) os << " " << n;
  os << "\nbwd_order";
  for (const auto& n : f.bwd_order) os << " " << n;
  os << "\n" << std::setprecision(17);
  for (const auto& s : f.steps) os << "step " << seg(s.fwd) << " " << seg(s.bwd) << " " << s.time_us << "\n";
  os << "total_us " << f.total_us << "\n";
  os << "serial_us " << f.serial_us << "\n";
  os << "comm_us " << f.comm_us << "\n";
}

uint64_t plan_structure_hash(const PlanFile& f) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a, 64 bits
  auto eat = [&h](const std::string& s, char end) {
    for (const unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
    h = (h ^ static_cast<unsigned char>(end)) * 1099511628211ull;
  };
  for (const auto* v : {&f.fwd_order, &f.bwd_order}) {
    for (const auto& n : *v) eat(n, ' ');
    eat("", '\n');
  }
  for (const auto& st : f.steps) {
    for (const auto* v : {&st.fwd, &st.bwd}) {
      for (const auto& n : *v) eat(n, '+');
      eat("", ';');
    }
    eat("", '|');
  }
  return h;
}

PlanFile read_plan(std::istream& is) {
  PlanFile f;
  std::string line;
  int lineno = 0;
  bool header = false;
  auto fail = [&](const std::string& why) {
    throw UsageError("plan line " + std::to_string(lineno) + ": " + why, __FILE__, __LINE__);
  };
  auto number = [&](const std::string& s) { return text::number(s, false, "number", fail); };
  auto seg = [](const std::string& s) { return s == "-" ? std::vector<std::string>{} : split(s, '+'); };
  while (std::getline(is, line)) {
    ++lineno;
    const std::vector<std::string> w = text::words(line);
    if (w.empty()) continue;
    if (!header) {
      if (w.size() != 2 || w[0] != "braid-plan" || w[1] != "1") fail("expected 'braid-plan 1'");
      header = true;
      continue;
    }
    if (w[0] == "model" || w[0] == "parallel") {
      if (w.size() != 2) fail(w[0] + " takes one word");
      (w[0] == "model" ? f.model : f.parallel) = w[1] == "-" ? "" : w[1];
    } else if (w[0] == "fwd_order" || w[0] == "bwd_order") {
      (w[0] == "fwd_order" ? f.fwd_order : f.bwd_order).assign(w.begin() + 1, w.end());
    } else if (w[0] == "step") {
      if (w.size() != 4) fail("step <fwd> <bwd> <us>");
      f.steps.push_back({seg(w[1]), seg(w[2]), number(w[3])});
    } else if (w[0] == "total_us" || w[0] == "serial_us" || w[0] == "comm_us") {
      if (w.size() != 2) fail(w[0] + " takes one number");
      (w[0] == "total_us" ? f.total_us : w[0] == "serial_us" ? f.serial_us : f.comm_us) = number(w[1]);
    } else {
      fail("unknown record '" + w[0] + "'");
    }
  }
  if (!header) fail("empty plan");
  return f;
}

void print_plan(std::ostream& os, const Layer& layer, const Plan& plan) {
  auto names = [&](Pass p, const std::vector<int>& seg) {
    if (seg.empty()) return std::string("-");
    std::string s;
    for (size_t k = 0; k < seg.size(); ++k) {
      const Op& o = layer.ops(p)[seg[k]];
      if (k) s += ' ';
      s.append(o.name, 2, std::string::npos);
      if (o.kind == OpKind::Comm) s += o.link == LinkClass::Cross ? "[X]" : "[L]";
    }
    return s;
  };
  os << "  step  forward segment (strand b)                   backward segment (strand a)"
        "                          time_us\n";
  char buf[64];
  for (size_t k = 0; k < plan.steps.size(); ++k) {
    const auto& s = plan.steps[k];
    std::string f = names(Pass::Forward, s.fwd), b = names(Pass::Backward, s.bwd);
    std::snprintf(buf, sizeof buf, "%10.1f", s.time_us);
    std::ostringstream row;
    row << "  " << std::setw(4) << k << "  " << std::left << std::setw(45) << f << " " << std::setw(52) << b
        << std::right << buf << "\n";
    os << row.str();
  }
}

}  // namespace braid::schedule
