// The pairing search: eq. (2) against brute force, constructed optima, legality, plan files.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <random>
#include <sstream>

#include "braid/errors.hpp"
#include "braid/schedule.hpp"

using namespace braid::schedule;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Every monotone alignment of nf forward and nb backward segments (solo or paired steps).
double brute_alignments(int i, int j, int nf, int nb, const std::function<double(int, int)>& pair,
                        const std::function<double(int)>& sf, const std::function<double(int)>& sb) {
  if (i == nf && j == nb) return 0;
  double best = kInf;
  if (i < nf) best = std::min(best, sf(i) + brute_alignments(i + 1, j, nf, nb, pair, sf, sb));
  if (j < nb) best = std::min(best, sb(j) + brute_alignments(i, j + 1, nf, nb, pair, sf, sb));
  if (i < nf && j < nb) best = std::min(best, pair(i, j) + brute_alignments(i + 1, j + 1, nf, nb, pair, sf, sb));
  return best;
}

// All ways to cut `order` into contiguous non-empty segments.
void cuts(const std::vector<int>& order, size_t from, std::vector<std::vector<int>>& cur,
          std::vector<std::vector<std::vector<int>>>& out) {
  if (from == order.size()) {
    out.push_back(cur);
    return;
  }
  for (size_t to = from + 1; to <= order.size(); ++to) {
    cur.emplace_back(order.begin() + from, order.begin() + to);
    cuts(order, to, cur, out);
    cur.pop_back();
  }
}

// Brute force over orders x partitions x alignments, with the PairCost segment costs.
double brute_search(const PairCost& cost) {
  const Layer& L = cost.layer();
  double best = kInf;
  for (const auto& F : topological_orders(L.fwd, 1 << 20))
    for (const auto& B : topological_orders(L.bwd, 1 << 20)) {
      std::vector<std::vector<int>> cur;
      std::vector<std::vector<std::vector<int>>> fp, bp;
      cuts(F, 0, cur, fp);
      cuts(B, 0, cur, bp);
      for (const auto& fs : fp)
        for (const auto& bs : bp) {
          const double v = brute_alignments(
              0, 0, int(fs.size()), int(bs.size()), [&](int i, int j) { return cost.corun(fs[i], bs[j]); },
              [&](int i) { return cost.solo(Pass::Forward, fs[i]); },
              [&](int j) { return cost.solo(Pass::Backward, bs[j]); });
          best = std::min(best, v);
        }
    }
  return best;
}

Op make_op(const std::string& name, OpKind kind, LinkClass link, Pass pass, double us, std::vector<int> deps,
           const std::string& type = "") {
  Op o;
  o.name = name;
  o.kind = kind;
  o.link = link;
  o.pass = pass;
  o.solo_us = us;
  o.deps = std::move(deps);
  o.type = type.empty() ? (kind == OpKind::Comm ? "ag" : "gemm") : type;
  return o;
}

// A random small layer: each op is compute or a collective on the local or cross link, with random
// earlier dependencies.
Layer random_layer(std::mt19937& rng, int nf, int nb) {
  Layer L;
  L.model = "random";
  std::uniform_real_distribution<double> t(1, 20);
  std::uniform_int_distribution<int> kind(0, 3);
  for (Pass p : {Pass::Forward, Pass::Backward}) {
    auto& v = p == Pass::Forward ? L.fwd : L.bwd;
    const int n = p == Pass::Forward ? nf : nb;
    for (int i = 0; i < n; ++i) {
      const int k = kind(rng);
      std::vector<int> deps;
      for (int d = 0; d < i; ++d)
        if (std::bernoulli_distribution(0.35)(rng)) deps.push_back(d);
      const LinkClass link = k == 0 ? LinkClass::Local : k == 1 ? LinkClass::Cross : LinkClass::Compute;
      v.push_back(make_op((p == Pass::Forward ? "f." : "b.") + std::to_string(i),
                          k <= 1 ? OpKind::Comm : OpKind::Compute, link, p, t(rng), deps));
    }
  }
  return L;
}

PairTable random_table(std::mt19937& rng, const Layer& L) {
  PairTable t;
  std::uniform_real_distribution<double> oef(-0.5, 1.0);
  for (const Op& o : L.fwd) t.set_solo(o.name, o.solo_us);
  for (const Op& o : L.bwd) t.set_solo(o.name, o.solo_us);
  for (const Op& f : L.fwd)
    for (const Op& b : L.bwd) t.set_corun(f.name, b.name, corun_from_oef(f.solo_us, b.solo_us, oef(rng)));
  return t;
}

}  // namespace

TEST(PairDp, EquationTwoEqualsBruteForce) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(0, 1);
  for (int trial = 0; trial < 300; ++trial) {
    const int nf = 1 + trial % 5, nb = 1 + (trial / 5) % 5;
    std::vector<double> sf(nf), sb(nb);
    for (auto& x : sf) x = 1 + 10 * u(rng);
    for (auto& x : sb) x = 1 + 10 * u(rng);
    std::vector<std::vector<double>> P(nf, std::vector<double>(nb));
    for (int i = 0; i < nf; ++i)
      for (int j = 0; j < nb; ++j)
        P[i][j] = u(rng) < 0.2 ? kInf : std::max(sf[i], sb[j]) + u(rng) * std::min(sf[i], sb[j]) * 1.3;
    auto pair = [&](int i, int j) { return P[i][j]; };
    auto fs = [&](int i) { return sf[i]; };
    auto bs = [&](int j) { return sb[j]; };
    std::vector<std::pair<int, int>> steps;
    const double dp = pair_dp(nf, nb, pair, fs, bs, &steps);
    EXPECT_NEAR(dp, brute_alignments(0, 0, nf, nb, pair, fs, bs), 1e-9) << "trial " << trial;
    // The steps cover each segment once, in order, and add up to the optimum.
    double sum = 0;
    int ni = 0, nj = 0;
    for (auto [i, j] : steps) {
      if (i >= 0) {
        EXPECT_EQ(i, ni++);
      }
      if (j >= 0) {
        EXPECT_EQ(j, nj++);
      }
      sum += i >= 0 && j >= 0 ? P[i][j] : i >= 0 ? sf[i] : sb[j];
    }
    EXPECT_EQ(ni, nf);
    EXPECT_EQ(nj, nb);
    EXPECT_NEAR(sum, dp, 1e-9);
  }
}

TEST(Search, EqualsBruteForceOverOrdersAndPartitions) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 40; ++trial) {
    const int nf = 2 + trial % 3, nb = 2 + (trial / 3) % 4;  // up to 4 x 5 operators
    const Layer L = random_layer(rng, nf, nb);
    ASSERT_EQ(validate_layer(L), "");
    const PairTable t = random_table(rng, L);
    PairCost cost(L, t);
    SearchOptions opt;
    opt.max_segment_ops = 8;  // no segment-length limit at these sizes
    const Plan plan = search_plan(cost, opt);
    EXPECT_EQ(validate_plan(cost, plan), "") << "trial " << trial;
    EXPECT_NEAR(plan.total_us, brute_search(cost), 1e-9) << "trial " << trial;
    // The same optimum without pruning: one order pair at a time.
    double best = kInf;
    for (const auto& F : topological_orders(L.fwd, 1 << 20))
      for (const auto& B : topological_orders(L.bwd, 1 << 20)) best = std::min(best, pair_orders(cost, F, B, 8).total_us);
    EXPECT_NEAR(plan.total_us, best, 1e-9) << "trial " << trial;
  }
}

TEST(Search, KnownOptimumComplementaryStrands) {
  // Forward: GEMM then AG; backward: RS then GEMM, all 10 us. Comm fully hides under compute,
  // compute does not overlap compute: the optimum pairs GEMM|RS and AG|GEMM, 20 us.
  Layer L;
  L.fwd = {make_op("f.g", OpKind::Compute, LinkClass::Compute, Pass::Forward, 10, {}),
           make_op("f.ag", OpKind::Comm, LinkClass::Local, Pass::Forward, 10, {0})};
  L.bwd = {make_op("b.rs", OpKind::Comm, LinkClass::Local, Pass::Backward, 10, {}),
           make_op("b.g", OpKind::Compute, LinkClass::Compute, Pass::Backward, 10, {0})};
  SyntheticOverlap s;
  s.gemm_comm = 1.0;
  s.gemm_gemm = 0.0;
  const PairTable t = synthetic_pair_table(L, s);
  PairCost cost(L, t);
  const Plan p = search_plan(cost);
  EXPECT_DOUBLE_EQ(p.total_us, 20.0);
  EXPECT_DOUBLE_EQ(p.serial_us, 40.0);
  EXPECT_DOUBLE_EQ(p.hidden_comm_fraction(), 1.0);
  ASSERT_EQ(p.steps.size(), 2u);
  EXPECT_EQ(p.steps[0].fwd, std::vector<int>{0});
  EXPECT_EQ(p.steps[0].bwd, std::vector<int>{0});
}

TEST(Search, KnownOptimumNeedsTheWgradToMove) {
  // Forward: AG (10, local) then GEMM (1). Backward: dgrad (1), RS (10, local) after it, wgrad (10)
  // after dgrad only. With compute|comm fully overlapping and no compute|compute overlap, the
  // canonical backward order (dgrad, RS, wgrad) reaches 22 us; moving the wgrad before the RS lets
  // the AG hide under it: dgrad 1 + AG|wgrad 10 + GEMM|RS 10 = 21 us, the optimum.
  Layer L;
  L.fwd = {make_op("f.ag", OpKind::Comm, LinkClass::Local, Pass::Forward, 10, {}),
           make_op("f.g", OpKind::Compute, LinkClass::Compute, Pass::Forward, 1, {0})};
  L.bwd = {make_op("b.dgrad", OpKind::Compute, LinkClass::Compute, Pass::Backward, 1, {}),
           make_op("b.rs", OpKind::Comm, LinkClass::Local, Pass::Backward, 10, {0}),
           make_op("b.wgrad", OpKind::Compute, LinkClass::Compute, Pass::Backward, 10, {0})};
  SyntheticOverlap s;
  s.gemm_comm = 1.0;
  s.gemm_gemm = 0.0;
  const PairTable t = synthetic_pair_table(L, s);
  PairCost cost(L, t);
  EXPECT_DOUBLE_EQ(pair_orders(cost, {0, 1}, {0, 1, 2}, 4).total_us, 22.0);
  const Plan p = search_plan(cost);
  EXPECT_DOUBLE_EQ(p.total_us, 21.0);
  EXPECT_EQ(p.bwd_order, (std::vector<int>{0, 2, 1}));
  EXPECT_NEAR(p.total_us, brute_search(cost), 1e-12);
}

TEST(Legality, CollectivesOnOneLinkNeverPair) {
  // A table that claims AG|RS on the same link overlaps perfectly must still not pair them.
  Layer L;
  L.fwd = {make_op("f.ag", OpKind::Comm, LinkClass::Local, Pass::Forward, 10, {})};
  L.bwd = {make_op("b.rs", OpKind::Comm, LinkClass::Local, Pass::Backward, 10, {})};
  PairTable t;
  t.set_corun("f.ag", "b.rs", 10);
  PairCost same(L, t);
  EXPECT_FALSE(same.legal({0}, {0}));
  EXPECT_EQ(same.corun({0}, {0}), kInf);
  EXPECT_DOUBLE_EQ(search_plan(same).total_us, 20.0);
  // On different links (local AG, cross-node RS) they may pair.
  L.bwd[0].link = LinkClass::Cross;
  PairCost other(L, t);
  EXPECT_TRUE(other.legal({0}, {0}));
  EXPECT_DOUBLE_EQ(search_plan(other).total_us, 10.0);
}

TEST(Legality, RealLayersRespectLinksAndDependencies) {
  struct Case {
    const char* model;
    int tp, ep;
  };
  for (const Case& c : {Case{"llama3-8b", 2, 1}, Case{"llama3-70b", 8, 1}, Case{"mixtral-8x7b", 2, 2}}) {
    LayerConfig cfg;
    cfg.tp = c.tp;
    cfg.ep = c.ep;
    cfg.seq = 4096;
    const Layer L = build_layer(model_dims(c.model), cfg);
    const PairTable t = synthetic_pair_table(L);
    PairCost cost(L, t);
    SearchOptions opt;
    opt.max_shift = 3;  // keeps the test fast; the CLI searches all orders
    const Plan p = search_plan(cost, opt);
    EXPECT_EQ(validate_plan(cost, p), "") << c.model;
    EXPECT_LE(p.total_us, p.serial_us + 1e-6);
    // Independently of validate_plan: no step holds a collective of each strand on one link.
    for (const auto& s : p.steps)
      for (int i : s.fwd)
        for (int j : s.bwd)
          if (L.fwd[i].kind == OpKind::Comm && L.bwd[j].kind == OpKind::Comm) {
            EXPECT_NE(L.fwd[i].link, L.bwd[j].link) << c.model << ": " << L.fwd[i].name << " | " << L.bwd[j].name;
          }
    // Every dependency runs earlier in its strand's order.
    for (Pass pass : {Pass::Forward, Pass::Backward}) {
      const auto& order = pass == Pass::Forward ? p.fwd_order : p.bwd_order;
      std::vector<int> pos(order.size());
      for (size_t k = 0; k < order.size(); ++k) pos[order[k]] = int(k);
      for (size_t x = 0; x < order.size(); ++x)
        for (int d : L.ops(pass)[x].deps) EXPECT_LT(pos[d], pos[x]) << c.model;
    }
    // The search is at least as good as the canonical orders.
    std::vector<int> F(L.fwd.size()), B(L.bwd.size());
    for (size_t i = 0; i < F.size(); ++i) F[i] = int(i);
    for (size_t i = 0; i < B.size(); ++i) B[i] = int(i);
    EXPECT_LE(p.total_us, pair_orders(cost, F, B, opt.max_segment_ops).total_us + 1e-9);
  }
}

TEST(Legality, ValidatePlanCatchesBrokenPlans) {
  const Layer L = build_layer(model_dims("llama3-8b"), LayerConfig{});
  const PairTable t = synthetic_pair_table(L);
  PairCost cost(L, t);
  SearchOptions opt;
  opt.max_shift = 2;
  const Plan good = search_plan(cost, opt);
  ASSERT_EQ(validate_plan(cost, good), "");
  Plan bad = good;
  std::swap(bad.bwd_order[0], bad.bwd_order[1]);  // b.down_dgrad before the AG it needs
  EXPECT_NE(validate_plan(cost, bad), "");
  bad = good;
  bad.total_us += 1;
  EXPECT_NE(validate_plan(cost, bad), "");
  // Pair the forward AG with the backward RS (both local) in one step.
  Plan illegal;
  illegal.fwd_order.resize(L.fwd.size());
  illegal.bwd_order.resize(L.bwd.size());
  for (size_t i = 0; i < L.fwd.size(); ++i) illegal.fwd_order[i] = int(i);
  for (size_t i = 0; i < L.bwd.size(); ++i) illegal.bwd_order[i] = int(i);
  illegal.steps.push_back({{0, 1}, {0}, 0});  // f.norm1 f.ag1 | b.ag_rs2
  EXPECT_NE(validate_plan(cost, illegal).find("same link"), std::string::npos);
}

TEST(CostModel, RateModelComposesSegments) {
  // f: A (4, compute) then B (6, comm); b: X (8, compute). OEF(A,X) = 0 -> rate 1/2;
  // OEF(B,X) = 1 -> rate 1. A|X for 8 us (4 us of work each), then B|X at full speed: X has 4 left,
  // B 6 -> 4 more us, then B alone 2: 14 us.
  Layer L;
  L.fwd = {make_op("f.a", OpKind::Compute, LinkClass::Compute, Pass::Forward, 4, {}),
           make_op("f.b", OpKind::Comm, LinkClass::Local, Pass::Forward, 6, {0})};
  L.bwd = {make_op("b.x", OpKind::Compute, LinkClass::Compute, Pass::Backward, 8, {})};
  PairTable t;
  t.set_corun("f.a", "b.x", corun_from_oef(4, 8, 0.0));
  t.set_corun("f.b", "b.x", corun_from_oef(6, 8, 1.0));
  PairCost cost(L, t);
  EXPECT_DOUBLE_EQ(cost.corun({0}, {0}), 12.0);  // measured pair used as is
  EXPECT_DOUBLE_EQ(cost.corun({1}, {0}), 8.0);
  EXPECT_DOUBLE_EQ(cost.corun({0, 1}, {0}), 14.0);
  // A measured segment pair overrides the composition.
  t.set_corun("f.a+f.b", "b.x", 13.0);
  PairCost measured(L, t);
  EXPECT_DOUBLE_EQ(measured.corun({0, 1}, {0}), 13.0);
  EXPECT_FALSE(measured.bound_ok());
}

// The Mixtral EP = 2 layer, its synthetic pair table and a plan searched on it (shifts up to 3).
struct MoeSearch {
  Layer L;
  PairTable t;
  Plan p;
};
MoeSearch moe_search() {
  LayerConfig cfg;
  cfg.ep = 2;
  MoeSearch r;
  r.L = build_layer(model_dims("mixtral-8x7b"), cfg);
  r.t = synthetic_pair_table(r.L);
  PairCost cost(r.L, r.t);
  SearchOptions opt;
  opt.max_shift = 3;
  r.p = search_plan(cost, opt);
  return r;
}

TEST(PlanFile, RoundTrip) {
  const MoeSearch m = moe_search();
  const Layer& L = m.L;
  const Plan& p = m.p;
  PairCost cost(L, m.t);
  std::stringstream ss;
  write_plan(ss, to_plan_file(L, p));
  const std::string text = ss.str();
  const PlanFile f = read_plan(ss);
  EXPECT_EQ(f.model, L.model);
  EXPECT_EQ(f.parallel, L.parallel);
  const Plan q = from_plan_file(L, f);
  EXPECT_EQ(q.fwd_order, p.fwd_order);
  EXPECT_EQ(q.bwd_order, p.bwd_order);
  ASSERT_EQ(q.steps.size(), p.steps.size());
  for (size_t k = 0; k < p.steps.size(); ++k) {
    EXPECT_EQ(q.steps[k].fwd, p.steps[k].fwd);
    EXPECT_EQ(q.steps[k].bwd, p.steps[k].bwd);
    EXPECT_EQ(q.steps[k].time_us, p.steps[k].time_us);
  }
  EXPECT_EQ(q.total_us, p.total_us);
  EXPECT_EQ(q.serial_us, p.serial_us);
  EXPECT_EQ(validate_plan(cost, q), "");
  std::stringstream again;
  write_plan(again, to_plan_file(L, q));
  EXPECT_EQ(again.str(), text);
  std::stringstream unknown("braid-plan 1\nfwd_order f.nope\n");
  EXPECT_THROW(from_plan_file(L, read_plan(unknown)), braid::UsageError);
  std::stringstream malformed("braid-plan 1\nstep f.norm1 -\n");
  EXPECT_THROW(read_plan(malformed), braid::UsageError);
}

// plan_structure_hash (what ranks compare before running a plan): the same for the same orders and steps whatever
// the modelled times, different when an operator moves between steps or the orders differ.
TEST(PlanFile, StructureHashIgnoresTimesNotOrders) {
  const MoeSearch m = moe_search();
  const PlanFile f = to_plan_file(m.L, m.p);
  ASSERT_GE(f.steps.size(), 2u);
  PlanFile timed = f;
  for (auto& st : timed.steps) st.time_us *= 1.1;
  timed.total_us += 1, timed.serial_us += 1, timed.comm_us += 1;
  EXPECT_EQ(plan_structure_hash(timed), plan_structure_hash(f));
  PlanFile swapped = f;  // the two passes' orders exchanged: a different plan
  std::swap(swapped.fwd_order, swapped.bwd_order);
  EXPECT_NE(plan_structure_hash(swapped), plan_structure_hash(f));
  PlanFile moved = f;  // the first step's last forward operator moved to the start of the second step
  size_t k = 0;
  while (k + 1 < moved.steps.size() && moved.steps[k].fwd.empty()) ++k;
  ASSERT_LT(k + 1, moved.steps.size());
  moved.steps[k + 1].fwd.insert(moved.steps[k + 1].fwd.begin(), moved.steps[k].fwd.back());
  moved.steps[k].fwd.pop_back();
  EXPECT_NE(plan_structure_hash(moved), plan_structure_hash(f));
  PlanFile across = f;  // an operator name moved from one side of a step to the other
  for (auto& st : across.steps)
    if (!st.fwd.empty()) {
      st.bwd.insert(st.bwd.begin(), st.fwd.back());
      st.fwd.pop_back();
      break;
    }
  EXPECT_NE(plan_structure_hash(across), plan_structure_hash(f));
}

// The analytic MoE layer with a capacity factor: the expert work and the all-to-all bytes grow with the padded
// rows (E x ceil(C x local tokens x top_k / E) instead of the balanced local tokens x top_k); the rest is unchanged.
TEST(OperatorModel, MoeCapacityPadsExpertWorkAndAllToAll) {
  LayerConfig cfg;
  cfg.ep = 2;
  const Layer dropless = build_layer(model_dims("mixtral-8x7b"), cfg);
  cfg.capacity = 1.5;
  const Layer padded = build_layer(model_dims("mixtral-8x7b"), cfg);
  EXPECT_NE(padded.parallel, dropless.parallel);  // pair files of the two are not interchangeable
  ASSERT_EQ(padded.fwd.size(), dropless.fwd.size());
  int grown = 0, same = 0;
  for (size_t i = 0; i < padded.fwd.size(); ++i) {
    const auto &a = dropless.fwd[i], &b = padded.fwd[i];
    EXPECT_EQ(a.name, b.name);
    if (a.name == "f.dispatch" || a.name == "f.combine" || a.name == "f.expert_upgate" || a.name == "f.expert_down") {
      EXPECT_GT(b.solo_us, a.solo_us) << a.name;
      ++grown;
    } else if (a.name == "f.qkv" || a.name == "f.attn") {
      EXPECT_DOUBLE_EQ(b.solo_us, a.solo_us) << a.name;
      ++same;
    }
  }
  EXPECT_EQ(grown, 4);
  EXPECT_EQ(same, 2);
  cfg.capacity = -1;
  EXPECT_THROW(build_layer(model_dims("mixtral-8x7b"), cfg), braid::UsageError);
}
