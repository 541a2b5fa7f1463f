// The fusion pass: every rewrite is checked by running the original and the rewritten graph on the
// CPU reference executor (all ranks simulated, exact arithmetic) and comparing outputs bit for bit.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "braid/fusion.hpp"

namespace bf = braid::fusion;
using bf::OpKind;
using bf::Transition;

namespace {

// (B,S,H) = (4,8,8), F = 16, E = 4 experts: divisible by 1, 2 and 4 ranks.
bf::Dims small(int k) { return bf::Dims{4, 8, 8, 16, 4, k, 2}; }

void expect_equivalent(const bf::Graph& a, const bf::Graph& b) {
  ASSERT_EQ(a.outputs.size(), b.outputs.size());
  for (uint64_t seed : {1u, 2u, 3u}) {
    const auto in = bf::random_inputs(a, seed);
    const bf::Execution ea = bf::execute(a, in), eb = bf::execute(b, in);
    for (size_t i = 0; i < a.outputs.size(); ++i) {
      const bf::Dense x = bf::logical(a, ea, a.outputs[i]), y = bf::logical(b, eb, b.outputs[i]);
      ASSERT_EQ(x.shape, y.shape);
      ASSERT_TRUE(x.v == y.v) << "outputs differ, seed " << seed << "\n" << bf::to_string(a) << "vs\n"
                              << bf::to_string(b);
    }
  }
}

// The executor's measured bytes equal the cost model's for every operator that does not route.
void expect_measured_equals_predicted(const bf::Graph& g) {
  const bf::Execution e = bf::execute(g, bf::random_inputs(g, 7));
  for (size_t i = 0; i < g.ops.size(); ++i) {
    if (bf::is_communication(g.ops[i].kind) && g.ops[i].route == bf::Route::None) {
      EXPECT_DOUBLE_EQ(e.volume[i], bf::op_cost(g, g.ops[i], bf::Link{}).volume) << bf::kind_name(g.ops[i].kind);
    }
  }
}

std::vector<std::string> comms(const bf::Graph& g) {
  std::vector<std::string> s;
  for (const bf::Op& op : g.ops)
    if (bf::is_communication(op.kind))
      s.push_back(bf::kind_name(op.kind) + (op.route == bf::Route::Dispatch  ? "/d"
                                            : op.route == bf::Route::Combine ? "/c"
                                                                             : ""));
  return s;
}

// Predicted bytes of the communication up to the expert computation: the transition itself.
double transition_volume(const bf::Graph& g) {
  double v = 0;
  for (const bf::Op& op : g.ops) {
    if (op.kind == OpKind::Expert) break;
    v += bf::op_cost(g, op, bf::Link{}).volume;
  }
  return v;
}

}  // namespace

struct Case {
  Transition t;
  int n1, n2, k;
  std::vector<std::string> fused;  // communication after the pass
};

class FusionTransition : public ::testing::TestWithParam<Case> {};

TEST_P(FusionTransition, EveryStepIsExactlyEquivalent) {
  const Case c = GetParam();
  const bf::Graph g = bf::build_transition(c.t, small(c.k), c.n1, c.n2, 11);
  const bf::Graph s = bf::split_allreduce(g);
  const bf::Graph h = bf::hoist_gating(s);
  expect_equivalent(g, s);
  expect_equivalent(g, h);
  expect_equivalent(g, bf::fuse_communication(h));
  const bf::Graph f = bf::chimera(g);
  expect_equivalent(g, f);
  EXPECT_EQ(comms(f), c.fused) << bf::to_string(f);
  expect_measured_equals_predicted(g);
  expect_measured_equals_predicted(f);
  EXPECT_LT(bf::total_volume(f), bf::total_volume(g));
}

INSTANTIATE_TEST_SUITE_P(
    Table2, FusionTransition,
    ::testing::Values(Case{Transition::TP_SP, 2, 2, 1, {"RS"}}, Case{Transition::TP_SP, 4, 4, 1, {"RS"}},
                      // With N1 == N2 the fused M2MS sends shard i to rank i of the next stage: a P2P.
                      Case{Transition::TP_PP, 2, 2, 1, {"RS", "P2P", "AG"}},
                      Case{Transition::TP_PP, 4, 2, 1, {"RS", "M2MS", "AG"}},
                      Case{Transition::TP_PP, 2, 4, 1, {"RS", "M2MS", "AG"}},
                      Case{Transition::TP_EP, 2, 2, 2, {"RS", "A2A/d", "A2A/c"}},
                      Case{Transition::TP_EP, 4, 4, 1, {"RS", "A2A/d", "A2A/c"}},
                      Case{Transition::PP_EP, 2, 2, 1, {"M2MS/d", "A2A/c"}},
                      Case{Transition::PP_EP, 4, 4, 2, {"M2MS/d", "A2A/c"}},
                      Case{Transition::SP_PP, 2, 2, 1, {"M2MS"}}, Case{Transition::SP_PP, 4, 4, 1, {"M2MS"}},
                      Case{Transition::SP_EP, 2, 2, 1, {"A2A/d", "A2A/c"}},
                      Case{Transition::SP_EP, 4, 4, 2, {"A2A/d", "A2A/c"}}));

// Bytes of the natural and the fused transition against Tables 1 and 2.
TEST(FusionVolumes, MatchTable2) {
  const bf::Dims d = small(1);
  const bf::Problem p{d.batch, d.seq, d.hidden, d.elem_bytes};
  auto check = [&](Transition t, int n1, int n2, int k, double before, double after) {
    bf::Dims dk = d;
    dk.top_k = k;
    const bf::Graph g = bf::build_transition(t, dk, n1, n2);
    EXPECT_DOUBLE_EQ(transition_volume(g), before) << bf::transition_name(t) << " n=" << n1 << "," << n2;
    EXPECT_DOUBLE_EQ(transition_volume(bf::chimera(g)), after) << bf::transition_name(t) << " n=" << n1 << "," << n2;
  };
  for (int n : {2, 4}) {
    const bf::Table2Row sp = bf::table2(Transition::TP_SP, p, n, n);
    check(Transition::TP_SP, n, n, 1, sp.size1 + sp.size2, sp.demand);
    const bf::Table2Row spp = bf::table2(Transition::SP_PP, p, n, n);
    check(Transition::SP_PP, n, n, 1, spp.size1 + spp.size2, spp.demand);
    for (int n2 : {2, 4}) {
      // Table 2 counts what an M2MS sender sends, BSH/N1; with N2 < N1 a receiver gets more, BSH/N2,
      // and the busiest-rank volume counts that.
      const bf::Table2Row tpp = bf::table2(Transition::TP_PP, p, n, n2);
      const double recv_excess = n2 < n ? p.bsh_bytes() / n2 - p.bsh_bytes() / n : 0.0;
      check(Transition::TP_PP, n, n2, 1, tpp.size1 + tpp.size2 + recv_excess, tpp.demand + recv_excess);
    }
    // PP+EP: B sequences per rank. The fused M2MS sends each token to its k experts: k*BSH, which is
    // the paper's BSH for k = 1.
    for (int k : {1, 2}) {
      const bf::Table2Row pe = bf::table2(Transition::PP_EP, p, n, n, k);
      check(Transition::PP_EP, n, n, k, pe.size1 + pe.size2, k * p.bsh_bytes());
    }
    // TP+EP and SP+EP on one group: the EP side dispatches B*S/n tokens per rank.
    const bf::Problem per_rank{d.batch / n, d.seq, d.hidden, d.elem_bytes};
    for (int k : {1, 2}) {
      const double a2a = bf::table1_overhead(OpKind::AllToAll, per_rank, n, k);
      check(Transition::TP_EP, n, n, k, bf::table1_overhead(OpKind::AllReduce, p, n) + a2a,
            bf::table1_overhead(OpKind::ReduceScatter, p, n) + a2a);
      check(Transition::SP_EP, n, n, k, bf::table1_overhead(OpKind::AllGather, p, n) + a2a, a2a);
    }
  }
}

TEST(FusionVolumes, NoFusionWhenItDoesNotPay) {
  // PP+EP with k = N = 2: P2P (BSH) + A2A ((N-1)/N * k * BSH) = 2 BSH = the fused M2MS (k BSH).
  const bf::Graph g = bf::build_transition(Transition::PP_EP, small(2), 2, 2);
  const bf::Graph f = bf::chimera(g);
  EXPECT_EQ(comms(f), (std::vector<std::string>{"P2P", "A2A/d", "A2A/c"}));
  expect_equivalent(g, f);
}

class FusionHybrid : public ::testing::TestWithParam<std::tuple<bf::Hybrid, int>> {};

TEST_P(FusionHybrid, WholeModelIsExactlyEquivalentAndCheaper) {
  const auto [h, stages] = GetParam();
  const bf::Graph g = bf::build_hybrid(h, small(2), 2, stages, 5);
  std::vector<std::string> log;
  const bf::Graph f = bf::chimera(g, &log);
  expect_equivalent(g, f);
  expect_measured_equals_predicted(f);
  EXPECT_LT(bf::total_volume(f), bf::total_volume(g));
  EXPECT_FALSE(log.empty());
  for (const bf::Op& op : f.ops) EXPECT_NE(op.kind, OpKind::AllReduce) << "every AR is split or fused";
}

INSTANTIATE_TEST_SUITE_P(Table5, FusionHybrid,
                         ::testing::Combine(::testing::Values(bf::Hybrid::HP1, bf::Hybrid::HP2, bf::Hybrid::HP3,
                                                              bf::Hybrid::HP4),
                                            ::testing::Values(2, 3)));

// The comparison is not vacuous: a different weight changes the output.
TEST(FusionExecutor, DetectsADifferentGraph) {
  const bf::Graph g = bf::build_transition(Transition::TP_SP, small(1), 2, 2);
  bf::Graph f = bf::chimera(g);
  f.weights[0].seed += 1;
  const auto in = bf::random_inputs(g, 1);
  const bf::Execution ea = bf::execute(g, in), eb = bf::execute(f, in);
  EXPECT_FALSE(bf::logical(g, ea, g.outputs[0]) == bf::logical(f, eb, f.outputs[0]));
}

// Illegal dataflow is rejected before anything runs: a norm (or a gate) on partial sums.
TEST(FusionIr, RejectsComputeOnPartialSums) {
  bf::Graph g = bf::build_transition(Transition::TP_SP, small(1), 2, 2);
  for (bf::Op& op : g.ops) {
    if (op.kind == OpKind::Norm) op.in[0] = g.ops[2].out;  // the row GEMM's partial output
  }
  EXPECT_THROW(bf::validate(g), std::invalid_argument);
}

TEST(FusionIr, GateIsNotHoistedAboveAReduction) {
  const bf::Graph g = bf::split_allreduce(bf::build_transition(Transition::TP_EP, small(2), 2, 2));
  const bf::Graph h = bf::hoist_gating(g);
  for (const bf::Op& op : h.ops) {
    if (op.kind == OpKind::Gate) {
      EXPECT_NE(h.tensors[op.in[0]].layout.dist, bf::Dist::Partial);
    }
  }
  expect_equivalent(g, h);
}
