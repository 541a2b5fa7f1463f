// CPU: the GPU layer's operator lists as schedule DAGs (strand_layer), plans over them, plan files.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <tuple>
#include <cstdio>
#include <set>
#include <sstream>
#include <string>

#include "braid/errors.hpp"
#include "braid/model/config.hpp"
#include "braid/schedule.hpp"
#include "braid/schedule/strands.hpp"

namespace {

namespace m = braid::model;
namespace sch = braid::schedule;

m::ModelConfig cfg(const std::string& name, int seq) {
  auto c = m::preset(name);
  c.seq = seq;
  return c;
}

// A synthetic operator: a GEMM, or a collective of type `comm_type`; solo and host issue times in us.
sch::Op make_op(const char* name, sch::Pass pass, sch::OpKind kind, sch::LinkClass link, double us, double host = 0,
                const char* comm_type = "ag") {
  sch::Op o;
  o.name = name, o.pass = pass, o.kind = kind, o.link = link, o.type = kind == sch::OpKind::Comm ? comm_type : "gemm";
  o.solo_us = us, o.host_us = host;
  return o;
}

TEST(StrandsPlan, DagMirrorsTheLayerOperators) {
  for (const std::string name : {"llama3-8b", "llama3-70b", "mixtral-8x7b"}) {
    const auto c = cfg(name, 4096);
    const m::Parallel p{2, true};
    const auto dag = sch::strand_layer(c, p);
    for (const auto ph : {m::Phase::kForward, m::Phase::kBackward}) {
      const auto ops = m::plan_ops(c, p, ph);
      const auto& d = ph == m::Phase::kForward ? dag.fwd : dag.bwd;
      ASSERT_EQ(ops.size(), d.size()) << name;
      for (size_t i = 0; i < ops.size(); ++i) {
        EXPECT_EQ(d[i].name, std::string(ph == m::Phase::kForward ? "f." : "b.") + ops[i].name);
        EXPECT_EQ(d[i].kind == sch::OpKind::Comm, ops[i].kind == m::OpKind::kComm);
        EXPECT_EQ(d[i].link == sch::LinkClass::Compute, d[i].kind == sch::OpKind::Compute);
        EXPECT_GT(d[i].solo_us, 0) << d[i].name;
        for (int dep : d[i].deps) EXPECT_LT(dep, int(i));
      }
    }
    // Forward: a chain. Backward: weight-gradient ops have no users but the replicated-grad all-reduce.
    for (size_t i = 1; i < dag.fwd.size(); ++i) EXPECT_EQ(dag.fwd[i].deps, std::vector<int>{int(i) - 1});
    std::set<int> used;
    for (const auto& op : dag.bwd)
      if (op.name != "b.ar_replicated_grads") used.insert(op.deps.begin(), op.deps.end());
    for (size_t i = 0; i < dag.bwd.size(); ++i) {
      const auto& n = dag.bwd[i].name;
      const bool sink = n.size() > 6 && (n.substr(n.size() - 6) == "_wgrad" || n == "b.router_bwd");
      if (sink) {
        EXPECT_EQ(used.count(int(i)), 0u) << n;
      }
    }
    EXPECT_EQ(dag.bwd.back().name, "b.ar_replicated_grads");
    EXPECT_EQ(dag.bwd.back().deps.size(), dag.bwd.size() - 1);
  }
}

TEST(StrandsPlan, SearchedPlansAreValidAndRoundTrip) {
  for (const std::string name : {"llama3-8b", "mixtral-8x7b"}) {
    const auto c = cfg(name, 2048);
    const m::Parallel p{2, true};
    auto dag = sch::strand_layer(c, p);
    const auto table = sch::synthetic_pair_table(dag);
    sch::apply_solo_times(dag, table);
    sch::PairCost cost(dag, table);
    const auto plan = sch::search_plan(cost);  // exhaustive, as the GPU test and the bench do
    EXPECT_EQ(sch::validate_plan(cost, plan), "") << name;
    EXPECT_LE(plan.total_us, plan.serial_us + 1e-6) << name;
    std::stringstream ss;
    sch::write_plan(ss, sch::to_plan_file(dag, plan));
    const auto back = sch::from_plan_file(dag, sch::read_plan(ss));
    EXPECT_EQ(back.fwd_order, plan.fwd_order);
    EXPECT_EQ(back.bwd_order, plan.bwd_order);
    ASSERT_EQ(back.steps.size(), plan.steps.size());
    // A plan's operator names do not depend on the shape: it resolves against another sequence length.
    const auto other = sch::strand_layer(cfg(name, 512), p);
    std::stringstream s2;
    sch::write_plan(s2, sch::to_plan_file(dag, plan));
    EXPECT_NO_THROW(sch::from_plan_file(other, sch::read_plan(s2)));
  }
}

// The TP=2 layer DAG of `name` (seq 4096) with synthetic pair-table times, and the plan searched over it.
std::pair<sch::Layer, sch::Plan> timed_dag_and_plan(const std::string& name) {
  auto dag = sch::strand_layer(cfg(name, 4096), m::Parallel{2, true});
  const auto table = sch::synthetic_pair_table(dag);
  sch::apply_solo_times(dag, table);
  sch::PairCost cost(dag, table);
  return {dag, sch::search_plan(cost)};
}

TEST(StrandsPlan, WholePassPlanIsTheExecutorsListSchedule) {
  for (const std::string name : {"llama3-70b", "mixtral-8x7b"}) {
    const auto [dag, searched] = timed_dag_and_plan(name);
    const auto whole = sch::whole_pass_plan(dag, searched);
    // (validate_plan rejects it: its one step "pairs" collectives on the same link. The DP's rule is about
    // co-running; the list schedule puts both strands' collectives of a link on that link's one stream,
    // so they never run at the same time — same-link ops are serial below by construction.)
    ASSERT_EQ(whole.steps.size(), 1u);
    EXPECT_EQ(whole.fwd_order, searched.fwd_order);
    EXPECT_EQ(whole.bwd_order, searched.bwd_order);
    // One step: the plan's make-span is its list schedule's, every op issued once, each strand in order.
    EXPECT_DOUBLE_EQ(whole.total_us, sch::plan_makespan_us(dag, whole));
    const auto order = sch::list_schedule(dag, whole.steps[0].fwd, whole.steps[0].bwd);
    ASSERT_EQ(order.size(), dag.fwd.size() + dag.bwd.size());
    std::vector<int> f, b;
    for (const auto& [pass, i] : order) (pass == sch::Pass::Forward ? f : b).push_back(i);
    EXPECT_EQ(f, whole.fwd_order);
    EXPECT_EQ(b, whole.bwd_order);
    // Bounds: no longer than both passes back to back, no shorter than any one stream's work.
    double serial = 0, per_link[3] = {0, 0, 0};
    for (const auto* ops : {&dag.fwd, &dag.bwd})
      for (const auto& op : *ops) serial += op.solo_us, per_link[int(op.link)] += op.solo_us;
    EXPECT_LE(whole.total_us, serial + 1e-6) << name;
    for (double l : per_link) EXPECT_GE(whole.total_us, l - 1e-6) << name;
    // Chained steps never beat the same issue order in one step by more than rounding: the searched
    // plan under the executor model is at least the whole-pass plan's lower bound on the compute stream.
    EXPECT_GE(sch::plan_makespan_us(dag, searched), per_link[0] - 1e-6);
  }
}

// The greedy list schedule gives ties to the forward strand; here that is wrong: the backward strand's
// short GEMM should go first so that its long collective starts at once (both collectives share one link).
TEST(StrandsPlan, BestIssueOrderBeatsTheGreedyWhereItShould) {
  sch::Layer dag;
  auto op = [](const char* name, sch::OpKind kind, sch::LinkClass link, sch::Pass pass, double us) {
    sch::Op o;
    o.name = name, o.kind = kind, o.link = link, o.pass = pass, o.solo_us = us;
    o.type = kind == sch::OpKind::Comm ? "ag" : "gemm";
    return o;
  };
  using K = sch::OpKind;
  using L = sch::LinkClass;
  dag.fwd = {op("f.a", K::Compute, L::Compute, sch::Pass::Forward, 10), op("f.x", K::Comm, L::Local, sch::Pass::Forward, 10)};
  dag.bwd = {op("b.b", K::Compute, L::Compute, sch::Pass::Backward, 1), op("b.y", K::Comm, L::Local, sch::Pass::Backward, 30)};
  const auto whole = sch::whole_pass_plan(dag);
  EXPECT_DOUBLE_EQ(whole.total_us, 50);  // a 0-10, b 10-11, x 10-20, y 20-50
  const auto best = sch::best_issue_order(dag);
  EXPECT_DOUBLE_EQ(best.makespan_us, 41);  // b 0-1, y 1-31, a 1-11, x 31-41
  EXPECT_DOUBLE_EQ(sch::plan_makespan_us(dag, sch::order_plan(dag, best.order)), 41);
  ASSERT_EQ(best.order.size(), 4u);
  EXPECT_EQ(best.order[0].first, sch::Pass::Backward);
}

// The host gate (Op::host_waits_for): the dropless MoE dispatch's issue waits on the host for its counts, so
// no operator issued after it — of either strand — starts before the counts are done. An order that issues the
// other strand's work before the dispatch keeps the GPU busy through the wait; every executor model charges it.
TEST(StrandsPlan, HostGateDelaysEverythingIssuedAfterIt) {
  sch::Layer dag;
  auto op = [](const char* name, sch::Pass pass, sch::OpKind kind, sch::LinkClass link, double us) {
    return make_op(name, pass, kind, link, us, 0, "a2a");
  };
  const auto F = sch::Pass::Forward, B = sch::Pass::Backward;
  using K = sch::OpKind;
  using L = sch::LinkClass;
  dag.fwd = {op("f.route", F, K::Compute, L::Compute, 10), op("f.counts", F, K::Comm, L::Local, 20),
             op("f.dispatch", F, K::Comm, L::Local, 5), op("f.expert", F, K::Compute, L::Compute, 10)};
  for (int i = 1; i < 4; ++i) dag.fwd[size_t(i)].deps = {i - 1};
  dag.bwd = {op("b.gemm", B, K::Compute, L::Compute, 30)};
  using O = std::vector<std::pair<sch::Pass, int>>;
  const O after{{F, 0}, {F, 1}, {F, 2}, {B, 0}, {F, 3}};   // b.gemm issued after the dispatch
  const O before{{F, 0}, {F, 1}, {B, 0}, {F, 2}, {F, 3}};  // ... and before it
  const sch::PairTable none;
  // Ungated both orders run b.gemm at 10-40 beside the counts (10-30), the dispatch 30-35, the experts 40-50.
  EXPECT_NEAR(sch::corun_makespan_us(dag, after, none, 0.0), 50, 1e-6);
  EXPECT_NEAR(sch::corun_makespan_us(dag, before, none, 0.0), 50, 1e-6);
  dag.fwd[2].host_waits_for = 1;
  // Gated: issued after the dispatch, b.gemm waits for the counts (30-60), the experts follow it (60-70).
  EXPECT_NEAR(sch::corun_makespan_us(dag, after, none, 0.0), 70, 1e-6);
  EXPECT_NEAR(sch::corun_makespan_us(dag, before, none, 0.0), 50, 1e-6);
  EXPECT_NEAR(sch::plan_makespan_us(dag, sch::order_plan(dag, after)), 70, 1e-6);
  EXPECT_NEAR(sch::plan_makespan_us(dag, sch::order_plan(dag, before)), 50, 1e-6);
  // The DP finds the order that issues b.gemm before the wait.
  const auto best = sch::best_issue_order(dag);
  EXPECT_NEAR(best.makespan_us, 50, 1e-6);
  const auto at = [&](const O& o, sch::Pass pass, int i) {
    return std::find(o.begin(), o.end(), std::make_pair(pass, i)) - o.begin();
  };
  EXPECT_LT(at(best.order, B, 0), at(best.order, F, 2));
  EXPECT_NEAR(sch::plan_makespan_us(dag, sch::order_plan(dag, best.order)), 50, 1e-6);
  // A gate on an op that does not directly follow its waited op is refused by the DP.
  dag.fwd[2].host_waits_for = 0;
  EXPECT_THROW(sch::best_issue_order(dag), braid::UsageError);
}

// The host's issue time (Op::host_us): one host thread enqueues the ops in issue order, each when the previous is
// issued plus its own issue time (after its gate's end, if gated); an op starts on the GPU no earlier. A pass whose
// ops take longer to issue than to run is bound by the host, in every executor model alike.
TEST(StrandsPlan, HostIssueTimeBoundsAPass) {
  sch::Layer dag;
  auto op = [](const char* name, sch::Pass pass, sch::OpKind kind, sch::LinkClass link, double us, double host) {
    return make_op(name, pass, kind, link, us, host, "a2a");
  };
  const auto F = sch::Pass::Forward, B = sch::Pass::Backward;
  using K = sch::OpKind;
  using L = sch::LinkClass;
  using O = std::vector<std::pair<sch::Pass, int>>;
  const sch::PairTable none;
  // Host-bound chain: each op takes 30 us to issue and 10 to run: enqueued at 30 and 60, done at 40 and 70.
  dag.fwd = {op("f.a", F, K::Compute, L::Compute, 10, 30), op("f.b", F, K::Compute, L::Compute, 10, 30)};
  dag.fwd[1].deps = {0};
  dag.bwd = {op("b.c", B, K::Compute, L::Compute, 5, 0)};
  const O order{{F, 0}, {F, 1}, {B, 0}};
  EXPECT_NEAR(sch::corun_makespan_us(dag, order, none, 0.0), 75, 1e-6);  // b.c enqueued at 60, runs 70-75
  EXPECT_NEAR(sch::plan_makespan_us(dag, sch::order_plan(dag, order)), 75, 1e-6);
  // The DP: b.c issued first (enqueued at 0) runs 0-5; f.a 30-40, f.b 60-70.
  const auto best = sch::best_issue_order(dag);
  EXPECT_NEAR(best.makespan_us, 70, 1e-6);
  EXPECT_EQ(best.order.front(), std::make_pair(B, 0));
  EXPECT_NEAR(sch::corun_makespan_us(dag, best.order, none, 0.0), 70, 1e-6);
  // With the gate: the host issues the dispatch only after the counts are done, then pays its issue time.
  dag.fwd = {op("f.counts", F, K::Comm, L::Local, 20, 1), op("f.dispatch", F, K::Comm, L::Local, 5, 10),
             op("f.expert", F, K::Compute, L::Compute, 10, 1)};
  dag.fwd[1].deps = {0}, dag.fwd[2].deps = {1};
  dag.fwd[1].host_waits_for = 0;
  dag.bwd = {op("b.gemm", B, K::Compute, L::Compute, 30, 1)};
  // counts enqueued at 1 (1-21); the dispatch issued at 21 + 10 = 31 (31-36); b.gemm enqueued at 32 (32-62);
  // the experts enqueued at 33, after b.gemm on the compute stream: 62-72.
  const O after{{F, 0}, {F, 1}, {B, 0}, {F, 2}};
  EXPECT_NEAR(sch::corun_makespan_us(dag, after, none, 0.0), 72, 1e-6);
  EXPECT_NEAR(sch::plan_makespan_us(dag, sch::order_plan(dag, after)), 72, 1e-6);
  // b.gemm first: enqueued at 1 (1-31); counts at 2 (2-22); dispatch at 32 (32-37); experts at 33, compute free
  // at 31, after the dispatch: 37-47.
  const O before{{B, 0}, {F, 0}, {F, 1}, {F, 2}};
  EXPECT_NEAR(sch::corun_makespan_us(dag, before, none, 0.0), 47, 1e-6);
  EXPECT_NEAR(sch::plan_makespan_us(dag, sch::order_plan(dag, before)), 47, 1e-6);
  // Better still, the DP's: counts first (1-21), b.gemm enqueued at 2 (2-32), the dispatch at 31 (31-36), the
  // experts 36-46 — b.gemm fills the host's wait and the dispatch's issue.
  const auto best2 = sch::best_issue_order(dag);
  EXPECT_NEAR(best2.makespan_us, 46, 1e-6);
  EXPECT_EQ(best2.order, (O{{F, 0}, {B, 0}, {F, 1}, {F, 2}}));
  EXPECT_NEAR(sch::corun_makespan_us(dag, best2.order, none, 0.0), 46, 1e-6);
  EXPECT_NEAR(sch::plan_makespan_us(dag, sch::order_plan(dag, best2.order)), 46, 1e-6);
}

// The profiled host times reach the DAG with the solo times.
TEST(StrandsPlan, ApplySoloTimesCarriesHostTimes) {
  auto dag = sch::strand_layer(cfg("mixtral-8x7b", 4096), m::Parallel{2, true});
  sch::PairTable t;
  t.set_solo("f.norm1", 7), t.set_host("f.norm1", 3.5), t.set_host("b.norm1_bwd", 2);
  sch::apply_solo_times(dag, t);
  EXPECT_DOUBLE_EQ(dag.fwd[size_t(dag.find(sch::Pass::Forward, "f.norm1"))].solo_us, 7);
  EXPECT_DOUBLE_EQ(dag.fwd[size_t(dag.find(sch::Pass::Forward, "f.norm1"))].host_us, 3.5);
  EXPECT_DOUBLE_EQ(dag.bwd[size_t(dag.find(sch::Pass::Backward, "b.norm1_bwd"))].host_us, 2);
  EXPECT_DOUBLE_EQ(dag.fwd[size_t(dag.find(sch::Pass::Forward, "f.router"))].host_us, 0);
}

// The real layers: only the dropless MoE forward's dispatch is gated, on the counts just before it.
TEST(StrandsPlan, HostGateOnTheDroplessDispatchOnly) {
  const m::Parallel p{2, true};
  for (const std::string name : {"llama3-70b", "mixtral-8x7b"})
    for (const double capacity : {0.0, 1.0}) {
      auto c = cfg(name, 4096);
      if (!c.moe() && capacity > 0) continue;  // a capacity factor needs experts
      c.capacity = capacity;
      const auto dag = sch::strand_layer(c, p);
      int gated = 0;
      for (size_t i = 0; i < dag.fwd.size(); ++i)
        if (dag.fwd[i].host_waits_for >= 0) {
          ++gated;
          EXPECT_EQ(dag.fwd[i].name, "f.a2a_dispatch");
          EXPECT_EQ(dag.fwd[size_t(dag.fwd[i].host_waits_for)].name, "f.a2a_counts");
          EXPECT_EQ(dag.fwd[i].host_waits_for, int(i) - 1);
        }
      for (const auto& o : dag.bwd) EXPECT_EQ(o.host_waits_for, -1) << o.name;
      EXPECT_EQ(gated, name == "mixtral-8x7b" && capacity == 0 ? 1 : 0) << name << " capacity " << capacity;
      // The executor models run on it (the DP's precondition holds).
      const auto best = sch::best_issue_order(dag);
      EXPECT_GT(best.makespan_us, 0);
    }
}

// Dropless with the counts on the device (ModelConfig::moe_device_sizes): no host gate, the layout is a saved tensor
// written by the counts exchange and read to the end of the backward (the weight gradients may run last), the pair
// files are tagged apart from the host-sized layer's.
TEST(StrandsPlan, DeviceSizedMoEHasNoHostGateAndSavesItsLayout) {
  const m::Parallel p{2, true};
  auto c = cfg("mixtral-8x7b", 4096);
  c.moe_device_sizes = true;
  const auto dag = sch::strand_layer(c, p);
  for (const auto& o : dag.fwd) EXPECT_EQ(o.host_waits_for, -1) << o.name;
  const auto saved = sch::saved_tensors(c, p);
  int found = 0;
  for (const auto& t : saved)
    if (t.name == "moe_layout") {
      ++found;
      EXPECT_EQ(t.producer, "f.expert_layout");  // a compute operator: a compute-only pass still writes it
      EXPECT_EQ(t.last_reader, "b.a2a_dispatch_bwd");
      EXPECT_EQ(t.bytes, (2.0 * 2 + 4 + 1) * 4);  // [tp, tp] rows, El = 4 experts, R (int32)
      for (const char* r : {"b.expert_down_wgrad", "b.expert_gate_up_wgrad", "b.a2a_combine_bwd"})
        EXPECT_NE(std::find(t.other_readers.begin(), t.other_readers.end(), std::string(r)), t.other_readers.end()) << r;
    }
  EXPECT_EQ(found, 1);
  auto host = c;
  host.moe_device_sizes = false;
  for (const auto& t : sch::saved_tensors(host, p)) EXPECT_NE(t.name, "moe_layout");
  EXPECT_NE(sch::strand_parallel_tag(c, p), sch::strand_parallel_tag(host, p));
  EXPECT_NE(sch::strand_parallel_tag(c, p).find("moe-sizes=device"), std::string::npos);
  EXPECT_THROW(
      [&] {
        auto bad = c;
        bad.capacity = 1.0;  // device sizes are dropless only
        bad.validate();
      }(),
      braid::UsageError);
}

// Without sequence parallelism an accumulating layer folds its replicated gradients (an MoE layer's router gradient
// among them) into the totals inside norm1_bwd: the router's weight gradient, a movable sink, must precede it in every
// order (an order that moved it after norm1_bwd lost that backward's router gradient at one rank).
// So too with sequence parallelism when the replicated gradients are reduced once per step (Parallel::
// replicated_grads_per_step: norm1_bwd folds this rank's partial sums in, no backward all-reduce).
TEST(StrandsPlan, RouterGradientBeforeTheFoldWithoutSequenceParallelism) {
  m::Parallel per_step{2, true};
  per_step.replicated_grads_per_step = true;
  for (const m::Parallel p : {m::Parallel{1, true}, m::Parallel{2, true}, per_step}) {  // (MoE needs sp at TP > 1)
    auto c = m::preset("tiny-moe");
    c.hidden = 256, c.heads = 8, c.kv_heads = 2, c.ffn = 128, c.seq = 100, c.micro_batch = 2;
    const auto dag = sch::strand_layer(c, p);
    int router = -1, norm1 = -1;
    for (int i = 0; i < int(dag.bwd.size()); ++i) {
      if (dag.bwd[size_t(i)].name == "b.router_bwd") router = i;
      if (dag.bwd[size_t(i)].name == "b.norm1_bwd") norm1 = i;
    }
    ASSERT_GE(router, 0);
    ASSERT_GT(norm1, router);
    const auto& deps = dag.bwd[size_t(norm1)].deps;
    const bool folds_in_norm1 = !p.reduces_replicated_grads_per_backward();
    const bool has_ar = std::any_of(dag.bwd.begin(), dag.bwd.end(), [](const sch::Op& o) { return o.name == "b.ar_replicated_grads"; });
    EXPECT_EQ(has_ar, p.reduces_replicated_grads_per_backward()) << "tp " << p.tp;
    EXPECT_EQ(std::count(deps.begin(), deps.end(), router), folds_in_norm1 ? 1 : 0) << "tp " << p.tp << " sp " << p.sp;
    for (const bool two : {false, true}) {
      const sch::Layer d = two ? sch::two_link_layer(dag) : dag;
      const auto order = sch::best_issue_order(d, {}, 64, /*move_sinks=*/true).order;
      const auto pos = [&](int j) {
        return std::find(order.begin(), order.end(), std::make_pair(sch::Pass::Backward, j)) - order.begin();
      };
      if (folds_in_norm1) {
        EXPECT_LT(pos(router), pos(norm1)) << "tp " << p.tp << " two links " << two;
      }
    }
  }
}

// move_sinks: the search also places the backward strand's weight-gradient GEMM. Given early (after its
// dgrad), it delays the strand's collective behind it; placed after the collective, the forward strand's
// collective follows on the link at once.
TEST(StrandsPlan, BestIssueOrderMovesWeightGradients) {
  sch::Layer dag;
  auto op = [](const char* name, sch::OpKind kind, sch::LinkClass link, sch::Pass pass, double us, std::vector<int> deps) {
    sch::Op o;
    o.name = name, o.kind = kind, o.link = link, o.pass = pass, o.solo_us = us, o.deps = std::move(deps);
    o.type = kind == sch::OpKind::Comm ? "rs" : "gemm";
    return o;
  };
  using K = sch::OpKind;
  using L = sch::LinkClass;
  const auto F = sch::Pass::Forward, B = sch::Pass::Backward;
  dag.fwd = {op("f.a", K::Compute, L::Compute, F, 12, {}), op("f.x", K::Comm, L::Local, F, 20, {0})};
  dag.bwd = {op("b.dgrad", K::Compute, L::Compute, B, 10, {}), op("b.w_wgrad", K::Compute, L::Compute, B, 10, {0}),
             op("b.rs", K::Comm, L::Local, B, 20, {0}), op("b.next", K::Compute, L::Compute, B, 5, {2})};
  const auto fixed = sch::best_issue_order(dag);
  EXPECT_DOUBLE_EQ(fixed.makespan_us, 57);  // a 0-12, dgrad 12-22, x 12-32, wgrad 22-32, rs 32-52, next 52-57
  const auto moved = sch::best_issue_order(dag, {}, 256, /*move_sinks=*/true);
  EXPECT_DOUBLE_EQ(moved.makespan_us, 50);  // dgrad 0-10, rs 10-30, a 10-22, x 30-50, wgrad 30-40, next 40-45
  EXPECT_DOUBLE_EQ(sch::plan_makespan_us(dag, sch::order_plan(dag, moved.order)), 50);
  std::vector<int> b;
  for (const auto& [pass, i] : moved.order)
    if (pass == B) b.push_back(i);
  EXPECT_EQ(b, (std::vector<int>{0, 2, 1, 3}));
}

// On the real layers: a valid order of every op, each strand in its pass order, never worse than the
// greedy whole-pass schedule, and what order_plan runs is what the search predicted.
TEST(StrandsPlan, BestIssueOrderOnTheLayers) {
  for (const std::string name : {"llama3-70b", "mixtral-8x7b"}) {
    const auto [dag, searched] = timed_dag_and_plan(name);
    for (const auto& d : {dag, sch::two_link_layer(dag)}) {
      const auto whole = sch::whole_pass_plan(d, searched);
      const auto best = sch::best_issue_order(d, searched, 64);
      ASSERT_EQ(best.order.size(), d.fwd.size() + d.bwd.size());
      std::vector<int> f, b;
      for (const auto& [pass, i] : best.order) (pass == sch::Pass::Forward ? f : b).push_back(i);
      EXPECT_EQ(f, whole.fwd_order);
      EXPECT_EQ(b, whole.bwd_order);
      EXPECT_LE(best.makespan_us, whole.total_us + 1e-6) << name;
      EXPECT_NEAR(sch::plan_makespan_us(d, sch::order_plan(d, best.order)), best.makespan_us, 1e-6) << name;
      // Sinks placed by the search too: every op once, each after its dependencies, never slower.
      const auto moved = sch::best_issue_order(d, searched, 32, true);
      EXPECT_LE(moved.makespan_us, best.makespan_us + 1e-6) << name;
      ASSERT_EQ(moved.order.size(), d.fwd.size() + d.bwd.size());
      std::vector<int> pos(d.bwd.size(), -1);
      int k = 0;
      for (const auto& [pass, i] : moved.order)
        if (pass == sch::Pass::Backward) pos[i] = k++;
      for (size_t i = 0; i < d.bwd.size(); ++i) {
        ASSERT_GE(pos[i], 0) << d.bwd[i].name;
        for (int dep : d.bwd[i].deps) EXPECT_LT(pos[dep], pos[i]) << d.bwd[i].name << " after " << d.bwd[dep].name;
      }
      EXPECT_NEAR(sch::plan_makespan_us(d, sch::order_plan(d, moved.order)), moved.makespan_us, 1e-6) << name;
    }
  }
}

// Dependency-ready operators: a weight-gradient GEMM that depends only on the dgrad runs beside its own
// strand's collective instead of after it.
TEST(StrandsPlan, DependencyReadyModel) {
  sch::Layer dag;
  auto op = [](const char* name, sch::OpKind kind, sch::LinkClass link, double us, std::vector<int> deps) {
    sch::Op o;
    o.name = name, o.kind = kind, o.link = link, o.pass = sch::Pass::Backward, o.solo_us = us, o.deps = std::move(deps);
    o.type = kind == sch::OpKind::Comm ? "rs" : "gemm";
    return o;
  };
  using K = sch::OpKind;
  using L = sch::LinkClass;
  dag.bwd = {op("b.dgrad", K::Compute, L::Compute, 10, {}), op("b.rs", K::Comm, L::Local, 20, {0}),
             op("b.wgrad", K::Compute, L::Compute, 10, {0}), op("b.next", K::Compute, L::Compute, 5, {1})};
  const auto chained = sch::whole_pass_plan(dag);
  EXPECT_DOUBLE_EQ(chained.total_us, 45);  // dgrad 0-10, rs 10-30, wgrad 30-40, next 40-45
  const auto dd = sch::dep_ready_layer(dag);
  const auto free = sch::whole_pass_plan(dd);
  EXPECT_DOUBLE_EQ(free.total_us, 35);  // wgrad 10-20 beside rs 10-30, next 30-35
  EXPECT_DOUBLE_EQ(sch::plan_makespan_us(dd, free), 35);
  EXPECT_THROW(sch::best_issue_order(dd), braid::Error);
  // On the real layers the dependency-ready model is never slower than the chained one.
  for (const std::string name : {"llama3-70b", "mixtral-8x7b"}) {
    auto d = sch::strand_layer(cfg(name, 4096), m::Parallel{2, true});
    sch::apply_solo_times(d, sch::synthetic_pair_table(d));
    for (const auto& x : {d, sch::two_link_layer(d)})
      EXPECT_LE(sch::whole_pass_plan(sch::dep_ready_layer(x)).total_us, sch::whole_pass_plan(x).total_us + 1e-6) << name;
  }
}

// The static two-strand placement: sharing needs each tensor's reader issued before the other's writer.
TEST(StrandsPlan, TwoStrandPlacement) {
  sch::Layer dag;
  auto op = [](const char* name, sch::Pass pass) {
    sch::Op o;
    o.name = name, o.pass = pass, o.type = "gemm", o.solo_us = 1;
    return o;
  };
  const auto F = sch::Pass::Forward, B = sch::Pass::Backward;
  dag.fwd = {op("f.p0", F), op("f.p1", F)};
  dag.bwd = {op("b.r1", B), op("b.r0", B)};  // the backward reads t1 last first, t0 last at its end
  const std::vector<sch::SavedTensor> saved = {{"t0", 100, "f.p0", "b.r0", {}}, {"t1", 100, "f.p1", "b.r1", {}}};
  using O = std::vector<std::pair<sch::Pass, int>>;
  // β's readers all before α's writers: one set. α first: two sets.
  EXPECT_DOUBLE_EQ(sch::two_strand_placement(dag, O{{B, 0}, {B, 1}, {F, 0}, {F, 1}}, saved).pool_bytes, 200);
  EXPECT_DOUBLE_EQ(sch::two_strand_placement(dag, O{{F, 0}, {F, 1}, {B, 0}, {B, 1}}, saved).pool_bytes, 400);
  // Interleaved r1, p0, r0, p1: only t0 of a and t0 of b conflict; crossing pairs share: one set.
  const auto pl = sch::two_strand_placement(dag, O{{B, 0}, {F, 0}, {B, 1}, {F, 1}}, saved);
  EXPECT_DOUBLE_EQ(pl.pool_bytes, 200);
  EXPECT_DOUBLE_EQ(pl.one_set_bytes, 200);
  EXPECT_NE(pl.offset_a[0], pl.offset_b[0]);
  // On the dense 70B and the MoE layer, under the whole-pass and best orders: between one and two sets,
  // and valid.
  for (const std::string model : {"llama3-70b", "mixtral-8x7b"}) {
  SCOPED_TRACE(model);
  auto d = sch::strand_layer(cfg(model, 4096), m::Parallel{2, true});
  sch::apply_solo_times(d, sch::synthetic_pair_table(d));
  const auto sv = sch::saved_tensors(cfg(model, 4096), m::Parallel{2, true});
  ASSERT_FALSE(sv.empty());
  for (const auto& order : {sch::plan_issue_order(d, sch::whole_pass_plan(d)), sch::best_issue_order(d, {}, 32).order,
                            sch::best_issue_order(d, {}, 32, true).order}) {
    const auto a = sch::two_strand_placement(d, order, sv);
    // The memory waits (either layer forward) point backwards in the order.
    std::vector<int> fpos(d.fwd.size()), bpos(d.bwd.size());
    for (size_t k = 0; k < order.size(); ++k) (order[k].first == sch::Pass::Forward ? fpos : bpos)[order[k].second] = int(k);
    for (const bool a_fwd : {true, false}) {
      const auto w = sch::memory_waits(d, sv, a, a_fwd);
      ASSERT_EQ(w.size(), d.fwd.size());
      for (size_t i = 0; i < w.size(); ++i)
        for (int j : w[i]) EXPECT_LT(bpos[j], fpos[i]) << d.fwd[i].name << " waits for " << d.bwd[j].name;
    }
    EXPECT_GE(a.pool_bytes, a.one_set_bytes - 1e-6);
    EXPECT_LE(a.pool_bytes, 2 * a.one_set_bytes + 1e-6);
    std::printf("%s (synthetic pair table): pool %.1f MiB = %.3fx one saved set (%.1f MiB), bound %.1f MiB\n",
                model.c_str(), a.pool_bytes / 1048576.0, a.pool_bytes / a.one_set_bytes, a.one_set_bytes / 1048576.0,
                a.lower_bound_bytes / 1048576.0);
    // The bound is reached on the dense layer's orders (the first-fit rule alone gave 1.30x where 1.24x is
    // optimal, on the measured throttled 70B tables: docs/dhelix.md); on the MoE layer's within 2%.
    EXPECT_GE(a.lower_bound_bytes, a.one_set_bytes - 1e-6);
    if (model == "llama3-70b") EXPECT_NEAR(a.pool_bytes, a.lower_bound_bytes, 1e-6 * a.one_set_bytes);
    else EXPECT_LE(a.pool_bytes, 1.02 * a.lower_bound_bytes);
    for (size_t i = 0; i < sv.size(); ++i)
      for (size_t j = 0; j < sv.size(); ++j) {
        auto overlap = [&](double x, double y) { return x < y + sv[j].bytes && y < x + sv[i].bytes; };
        if (i != j) {
          EXPECT_FALSE(overlap(a.offset_a[i], a.offset_a[j])) << sv[i].name << " / " << sv[j].name;
          EXPECT_FALSE(overlap(a.offset_b[i], a.offset_b[j])) << sv[i].name << " / " << sv[j].name;
        }
      }
  }
  }
}

static double saved_mib(const std::vector<sch::SavedTensor>& saved) {
  double mib = 0;
  for (const auto& t : saved) mib += t.bytes / 1048576.0;
  return mib;
}

TEST(StrandsPlan, SavedTensorsOfTheDenseLayer) {
  // qkv 40, o 32, lse 0.5, x1 32, gu 224, act 112, h1f 64, h2f 64 MiB (+ two 8 KiB rstd vectors).
  EXPECT_NEAR(saved_mib(sch::saved_tensors(cfg("llama3-70b", 4096), m::Parallel{2, true})), 568.5, 0.05);
}

// A copy-engine layer placed in a window gathers h1f / h2f in place: its norms write their rank's slots first, so they
// are the producers the memory waits must precede; nothing else changes (and nothing without sp).
TEST(StrandsPlan, SavedTensorsGatheredInPlaceAreProducedByTheNorms) {
  const auto c = cfg("llama3-70b", 4096);
  const auto plain = sch::saved_tensors(c, m::Parallel{2, true});
  const auto ip = sch::saved_tensors(c, m::Parallel{2, true}, /*in_place_gathers=*/true);
  ASSERT_EQ(plain.size(), ip.size());
  for (size_t i = 0; i < ip.size(); ++i) {
    EXPECT_EQ(ip[i].name, plain[i].name);
    EXPECT_EQ(ip[i].bytes, plain[i].bytes);
    EXPECT_EQ(ip[i].last_reader, plain[i].last_reader);
    const std::string want = ip[i].name == "h1f" ? "f.norm1" : ip[i].name == "h2f" ? "f.residual_norm2" : plain[i].producer;
    EXPECT_EQ(ip[i].producer, want) << ip[i].name;
  }
  for (const auto& t : plain)
    if (t.name == "h1f" || t.name == "h2f") EXPECT_EQ(t.producer, t.name == "h1f" ? "f.ag_h1" : "f.ag_h2");
  const auto no_sp = sch::saved_tensors(c, m::Parallel{2, false}, true);
  for (const auto& t : no_sp) EXPECT_TRUE(t.name != "h1f" && t.name != "h2f") << t.name;
}

// Every producer and reader of the saved tensors is an operator of the layer's DAG (the names the GPU layer runs).
void expect_saved_in_dag(const std::vector<sch::SavedTensor>& saved, const sch::Layer& dag) {
  auto has = [](const std::vector<sch::Op>& ops, const std::string& n) {
    return std::any_of(ops.begin(), ops.end(), [&](const sch::Op& o) { return o.name == n; });
  };
  for (const auto& t : saved) {
    EXPECT_TRUE(has(dag.fwd, t.producer)) << t.name << " <- " << t.producer;
    EXPECT_TRUE(has(dag.bwd, t.last_reader)) << t.name << " -> " << t.last_reader;
    for (const auto& r : t.other_readers) EXPECT_TRUE(has(dag.bwd, r)) << t.name << " -> " << r;
  }
}

TEST(StrandsPlan, SavedTensorsOfTheMoeLayer) {
  const auto c = cfg("mixtral-8x7b", 4096);
  const m::Parallel p{2, true};
  const auto saved = sch::saved_tensors(c, p);
  const double mib = saved_mib(saved);
  // Attention half: qkv 24, o 16, lse 0.25, x1 16, h1f 32 MiB (+ rstd); MoE: h2 16, ret 32 MiB, and at the
  // capacity of T * top_k = 8192 rows: xs 64, egu 448, eact 224 MiB (+ prob/route/pos 16 KiB each, the two
  // row maps 32 KiB each).
  EXPECT_NEAR(mib, 872.25 + (2 * 8 + 3 * 16 + 2 * 32) / 1024.0, 1e-3);
  expect_saved_in_dag(saved, sch::strand_layer(c, p));
}

// A capacity factor: the same operators; the expert buffers hold E * cap rows (send side too) and the counts
// are kept for the backward; the row maps come from the route operator.
TEST(StrandsPlan, SavedTensorsOfTheMoeLayerWithCapacity) {
  auto c = cfg("mixtral-8x7b", 4096);
  const m::Parallel p{2, true};
  const auto dropless = sch::saved_tensors(c, p);
  c.capacity = 1.25;
  const int64_t Tl = c.tokens() / 2, cap = c.expert_capacity(Tl);
  EXPECT_EQ(cap, 640);  // ceil(1.25 * 2048 * 2 / 8)
  const auto saved = sch::saved_tensors(c, p);
  ASSERT_EQ(saved.size(), dropless.size() + 1);
  std::map<std::string, const sch::SavedTensor*> by;
  for (const auto& t : saved) by[t.name] = &t;
  ASSERT_TRUE(by.count("counts"));
  EXPECT_EQ(by["counts"]->bytes, 8 * 4.0);
  EXPECT_EQ(by["xs"]->bytes, 8.0 * cap * c.hidden * 2);
  EXPECT_EQ(by["ret"]->bytes, 8.0 * cap * c.hidden * 2);
  EXPECT_EQ(by["sort_map"]->producer, "f.route");
  expect_saved_in_dag(saved, sch::strand_layer(c, p));
  // The operator view keeps its names; the counts exchange moves nothing.
  for (auto ph : {m::Phase::kForward, m::Phase::kBackward}) {
    const auto a = m::plan_ops(cfg("mixtral-8x7b", 4096), p, ph), b = m::plan_ops(c, p, ph);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].name, b[i].name);
      if (a[i].name == "a2a_counts") {
        EXPECT_EQ(b[i].bytes, 0.0);
      }
    }
  }
}

TEST(StrandsPlan, ArenaPeakBetweenOneAndTwoSets) {
  const auto c = cfg("llama3-70b", 4096);
  const m::Parallel p{2, true};
  const auto dag = sch::strand_layer(c, p);
  const auto saved = sch::saved_tensors(c, p);
  std::vector<int> f(dag.fwd.size()), b(dag.bwd.size());
  for (size_t i = 0; i < f.size(); ++i) f[i] = int(i);
  for (size_t i = 0; i < b.size(); ++i) b[i] = int(i);
  auto plan_of = [&](std::vector<sch::PlanStep> steps) {
    sch::Plan pl;
    pl.fwd_order = f, pl.bwd_order = b, pl.steps = std::move(steps);
    return pl;
  };
  // β's backward entirely first: every β tensor is gone before α allocates: one set.
  const auto bwd_first = sch::two_strand_arena_peak(dag, plan_of({{{}, b}, {f, {}}}), saved);
  EXPECT_DOUBLE_EQ(bwd_first.peak_bytes, bwd_first.one_set_bytes);
  // α's forward entirely first: both sets.
  const auto fwd_first = sch::two_strand_arena_peak(dag, plan_of({{f, {}}, {{}, b}}), saved);
  EXPECT_DOUBLE_EQ(fwd_first.peak_bytes, 2 * fwd_first.one_set_bytes);
  // Interleaved: in between.
  const auto whole = sch::two_strand_arena_peak(dag, sch::whole_pass_plan(dag), saved);
  EXPECT_GE(whole.peak_bytes, whole.one_set_bytes);
  EXPECT_LE(whole.peak_bytes, 2 * whole.one_set_bytes);
  EXPECT_GT(whole.peak_at_us, 0);
}

TEST(StrandsPlan, BudgetedScheduleTradesTimeForMemory) {
  const auto c = cfg("llama3-70b", 4096);
  const m::Parallel p{2, true};
  const auto dag = sch::strand_layer(c, p);
  const auto saved = sch::saved_tensors(c, p);
  const auto whole = sch::whole_pass_plan(dag);
  const double one = sch::two_strand_arena_peak(dag, whole, saved).one_set_bytes;
  // No binding budget: the unconstrained list schedule, op for op.
  const auto loose = sch::budgeted_whole_pass(dag, saved, 2 * one);
  EXPECT_DOUBLE_EQ(loose.makespan_us, whole.total_us);
  EXPECT_EQ(loose.order, sch::list_schedule(dag, whole.steps[0].fwd, whole.steps[0].bwd));
  // Tighter budgets: every op still issued once, each strand in order, never faster than one stream's
  // work. (Not monotone in the budget: holding the forward back reorders a greedy list schedule, which
  // can come out shorter — list-scheduling anomalies; docs/dhelix.md has measured-time examples.)
  double biggest = 0, compute = 0;
  for (const auto& t : saved) biggest = std::max(biggest, t.bytes);
  for (const auto* ops : {&dag.fwd, &dag.bwd})
    for (const auto& op : *ops)
      if (op.link == sch::LinkClass::Compute) compute += op.solo_us;
  for (const double extra : {0.5, 0.2, 0.05}) {
    const auto b = sch::budgeted_whole_pass(dag, saved, one * (1 + extra) + biggest);
    EXPECT_GE(b.makespan_us, compute - 1e-6) << extra;
    ASSERT_EQ(b.order.size(), dag.fwd.size() + dag.bwd.size());
    int nf = 0, nb = 0;
    for (const auto& [pass, i] : b.order) EXPECT_EQ(i, pass == sch::Pass::Forward ? nf++ : nb++);
  }
  // An order runs as a plan of single-op steps, with the same make-span as the unconstrained schedule
  // when the order is that schedule's (a budgeted order's memory wait is not in the plain executor model).
  const auto op = sch::order_plan(dag, loose.order);
  EXPECT_EQ(op.steps.size(), loose.order.size());
  EXPECT_DOUBLE_EQ(op.total_us, whole.total_us);
  std::stringstream ss;
  sch::write_plan(ss, sch::to_plan_file(dag, op));
  EXPECT_EQ(sch::from_plan_file(dag, sch::read_plan(ss)).steps.size(), op.steps.size());
  // Below one set plus the forward's largest allocation the forward cannot finish.
  EXPECT_THROW(sch::budgeted_whole_pass(dag, saved, one * 0.5), braid::UsageError);
}

// sinks_beside_collectives on the 70B backward (solo times as profiled on 2x H200 over nccl-ce): each weight-gradient
// GEMM follows a collective of its own strand, so that with the collectives on a stream of their own it runs while the
// collective moves; every operator once, after its dependencies.
TEST(StrandsPlan, SinksBesideCollectives) {
  m::Parallel p{2, true};
  p.replicated_grads_per_step = true;
  sch::Layer dag = sch::strand_layer(cfg("llama3-70b", 4096), p);
  const std::map<std::string, double> solo = {
      {"b.ag_dy", 158},          {"b.down_proj_dgrad", 1200}, {"b.down_proj_wgrad", 1252}, {"b.swiglu_bwd", 294},
      {"b.gate_up_dgrad", 2398}, {"b.gate_up_wgrad", 2476},   {"b.rs_dh2", 111},           {"b.norm2_bwd", 164},
      {"b.ag_dx1", 113},         {"b.out_proj_dgrad", 346},   {"b.out_proj_wgrad", 353},   {"b.attention_bwd", 909},
      {"b.rope_bwd", 106},       {"b.qkv_dgrad", 437},        {"b.qkv_wgrad", 440},        {"b.rs_dh1", 129},
      {"b.norm1_bwd", 163}};
  for (auto& op : dag.bwd) {
    ASSERT_TRUE(solo.count(op.name)) << op.name;
    op.solo_us = solo.at(op.name);
  }
  const auto order = sch::sinks_beside_collectives(dag, sch::Pass::Backward);
  std::vector<std::string> names;
  for (const int k : order) names.push_back(dag.bwd[size_t(k)].name);
  const std::vector<std::string> want = {"b.ag_dy",         "b.down_proj_dgrad", "b.swiglu_bwd",     "b.gate_up_dgrad",
                                         "b.rs_dh2",        "b.gate_up_wgrad",   "b.norm2_bwd",      "b.ag_dx1",
                                         "b.down_proj_wgrad", "b.out_proj_dgrad", "b.attention_bwd", "b.rope_bwd",
                                         "b.qkv_dgrad",     "b.rs_dh1",          "b.qkv_wgrad",      "b.out_proj_wgrad",
                                         "b.norm1_bwd"};
  EXPECT_EQ(names, want);
  std::vector<int> pos(dag.bwd.size(), -1);
  for (size_t i = 0; i < order.size(); ++i) pos[size_t(order[i])] = int(i);
  for (size_t k = 0; k < dag.bwd.size(); ++k) {
    ASSERT_GE(pos[k], 0) << dag.bwd[k].name;
    for (const int d : dag.bwd[k].deps) EXPECT_LT(pos[size_t(d)], pos[k]) << dag.bwd[k].name;
  }
  // Per backward (sp): the replicated gradients' all-reduce, the last collective, depends on every operator: the sinks
  // still held go before it.
  const auto dag_ar = sch::strand_layer(cfg("llama3-70b", 4096), {2, true});
  const auto order_ar = sch::sinks_beside_collectives(dag_ar, sch::Pass::Backward);
  ASSERT_EQ(order_ar.size(), dag_ar.bwd.size());
  EXPECT_EQ(dag_ar.bwd[size_t(order_ar.back())].name, "b.ar_replicated_grads");
  // The MoE backward (router_bwd a sink that norm1_bwd waits for when folding): dependencies first there too.
  for (const auto& pp : {p, m::Parallel{2, true}}) {
    const auto moe = sch::strand_layer(cfg("mixtral-8x7b", 4096), pp);
    const auto o = sch::sinks_beside_collectives(moe, sch::Pass::Backward);
    std::vector<int> at(moe.bwd.size(), -1);
    for (size_t i = 0; i < o.size(); ++i) at[size_t(o[i])] = int(i);
    for (size_t k = 0; k < moe.bwd.size(); ++k) {
      ASSERT_GE(at[k], 0);
      for (const int d : moe.bwd[k].deps) EXPECT_LT(at[size_t(d)], at[k]) << moe.bwd[k].name;
    }
  }
}

TEST(StrandsPlan, ParallelTag) {
  EXPECT_EQ(sch::strand_parallel_tag(cfg("mixtral-8x7b", 4096), {2, true}), "tp=2,sp=1,ep=2,seq=4096,mb=1");
  m::Parallel per_step{2, true};
  per_step.replicated_grads_per_step = true;
  EXPECT_EQ(sch::strand_parallel_tag(cfg("llama3-70b", 4096), per_step), "tp=2,sp=1,ep=1,seq=4096,mb=1,rep-grads=step");
}

}  // namespace


// The co-run model on two ops: a collective and a GEMM whose profiled pair time is the serial sum.
TEST(StrandsPlan, CorunModelOnAPair) {
  sch::Layer dag;
  auto op = [](const char* name, sch::Pass pass, sch::OpKind kind, sch::LinkClass link, double us) {
    return make_op(name, pass, kind, link, us);
  };
  const auto F = sch::Pass::Forward, B = sch::Pass::Backward;
  dag.fwd = {op("f.g", F, sch::OpKind::Compute, sch::LinkClass::Compute, 100)};
  dag.bwd = {op("b.c", B, sch::OpKind::Comm, sch::LinkClass::Local, 100),
             op("b.d", B, sch::OpKind::Compute, sch::LinkClass::Compute, 50)};
  dag.bwd[1].deps = {0};
  sch::PairTable t;
  t.set_solo("f.g", 100), t.set_solo("b.c", 100), t.set_solo("b.d", 50);
  t.set_corun("f.g", "b.c", 200);  // no overlap at all
  using O = std::vector<std::pair<sch::Pass, int>>;
  const O together{{B, 0}, {F, 0}, {B, 1}};
  // Weight 0: perfect overlap (100), then b.d on the compute stream after f.g: 150.
  EXPECT_NEAR(sch::corun_makespan_us(dag, together, t, 0.0), 150, 1e-6);
  // Weight 1: k = 2, both end at 200, then b.d: 250. Weight 0.5: k = 1.5: 150 + 50.
  EXPECT_NEAR(sch::corun_makespan_us(dag, together, t, 1.0), 250, 1e-6);
  EXPECT_NEAR(sch::corun_makespan_us(dag, together, t, 0.5), 200, 1e-6);
  // The search never returns worse than its best start, and keeps each pass's order.
  const O apart{{B, 0}, {B, 1}, {F, 0}};
  const auto r = sch::corun_issue_order(dag, {together, apart}, t, 1.0);
  EXPECT_LE(r.makespan_us, std::min(sch::corun_makespan_us(dag, together, t, 1.0), sch::corun_makespan_us(dag, apart, t, 1.0)) + 1e-6);
  std::vector<int> bseen;
  for (const auto& [pass, i] : r.order)
    if (pass == B) bseen.push_back(i);
  EXPECT_EQ(bseen, (std::vector<int>{0, 1}));
  EXPECT_THROW(sch::corun_makespan_us(dag, O{{B, 0}, {F, 0}}, t), braid::Error);
}

// The co-run model against measured make-spans of the strand executor (committed bench results, 2x H200,
// throttled Llama-3-70B TP=2): every issue order the bench timed, rebuilt from the run's pair table.
namespace {
struct CorunFit {
  double spearman_solo, spearman_corun, err_solo, err_corun;
};
CorunFit corun_fit(const std::string& pairs, const std::map<std::string, double>& measured) {
  const auto c = cfg("llama3-70b", 4096);
  const m::Parallel p{2, true};
  const auto table = sch::load_pair_table(pairs);
  auto dag = sch::strand_layer(c, p);
  sch::apply_solo_times(dag, table);
  const auto plan = sch::search_plan(sch::PairCost(dag, table), {});
  const auto dag2 = sch::two_link_layer(dag), dd = sch::dep_ready_layer(dag), dd2 = sch::dep_ready_layer(dag2);
  const auto saved = sch::saved_tensors(c, p);
  double one = 0;
  for (const auto& t : saved) one += t.bytes;
  using Order = std::vector<std::pair<sch::Pass, int>>;
  std::vector<std::tuple<std::string, const sch::Layer*, Order>> all;
  Order budget_best;
  double budget_best_us = 0;
  for (double h : {0.07, 0.15, 0.25, 0.4, 1.0}) {  // as bench strands builds them
    const auto b = sch::budgeted_whole_pass(dag, saved, one * (1 + h), plan);
    if (h == 0.07) all.emplace_back("strands-budget-7pct", &dag, b.order);
    if (budget_best.empty() || b.makespan_us < budget_best_us) budget_best_us = b.makespan_us, budget_best = b.order;
  }
  all.emplace_back("strands-budget-best", &dag, budget_best);
  all.emplace_back("strands", &dag, sch::plan_issue_order(dag, plan));
  all.emplace_back("strands-whole", &dag, sch::plan_issue_order(dag, sch::whole_pass_plan(dag, plan)));
  all.emplace_back("strands-whole-2link", &dag2, sch::plan_issue_order(dag2, sch::whole_pass_plan(dag2, plan)));
  all.emplace_back("strands-whole-dag", &dd, sch::plan_issue_order(dd, sch::whole_pass_plan(dd, plan)));
  all.emplace_back("strands-whole-2link-dag", &dd2, sch::plan_issue_order(dd2, sch::whole_pass_plan(dd2, plan)));
  all.emplace_back("strands-best-order", &dag, sch::best_issue_order(dag, plan, 128).order);
  all.emplace_back("strands-best-order-2link", &dag2, sch::best_issue_order(dag2, plan, 128).order);
  const auto m2 = sch::best_issue_order(dag2, plan, 128, true).order;
  all.emplace_back("strands-best-order-sinks", &dag, sch::best_issue_order(dag, plan, 128, true).order);
  all.emplace_back("strands-best-order-sinks-2link", &dag2, m2);
  all.emplace_back("strands-best-order-sinks-2link-dag", &dd2, m2);
  std::vector<double> meas, solo, corun;
  for (const auto& [name, d, order] : all) {
    if (!measured.count(name)) continue;
    meas.push_back(measured.at(name));
    solo.push_back(sch::plan_makespan_us(*d, sch::order_plan(*d, order)));
    corun.push_back(sch::corun_makespan_us(*d, order, table));
  }
  EXPECT_EQ(meas.size(), measured.size());
  auto rank = [](const std::vector<double>& x) {
    std::vector<size_t> id(x.size());
    for (size_t i = 0; i < id.size(); ++i) id[i] = i;
    std::sort(id.begin(), id.end(), [&](size_t a, size_t b) { return x[a] < x[b]; });
    std::vector<double> r(x.size());
    for (size_t i = 0; i < id.size(); ++i) r[id[i]] = double(i);
    return r;
  };
  auto spearman = [&](const std::vector<double>& a) {
    const auto ra = rank(a), rb = rank(meas);
    double d = 0;
    for (size_t i = 0; i < ra.size(); ++i) d += (ra[i] - rb[i]) * (ra[i] - rb[i]);
    const double n = double(ra.size());
    return 1 - 6 * d / (n * (n * n - 1));
  };
  auto err = [&](const std::vector<double>& a) {
    double e = 0;
    for (size_t i = 0; i < a.size(); ++i) e += std::abs(a[i] - meas[i]) / meas[i];
    return e / double(a.size());
  };
  return {spearman(solo), spearman(corun), err(solo), err(corun)};
}
}  // namespace

TEST(StrandsPlan, CorunModelPredictsMeasuredOrders) {
  const std::string dir = BRAID_RESULTS_DIR "/h200x2/";
  // c8a9442's run (bench strands --pairs the e782a52 table): the run the weight was chosen on.
  const auto a = corun_fit(dir + "strands-pairs-llama3-70b-throttled-e782a52.txt",
                           {{"strands-budget-7pct", 28275.8}, {"strands-budget-best", 26495.1}, {"strands", 29809.0},
                            {"strands-whole", 25601.1}, {"strands-whole-2link", 22788.1}, {"strands-whole-dag", 24886.3},
                            {"strands-whole-2link-dag", 22803.9}, {"strands-best-order", 28029.0},
                            {"strands-best-order-2link", 22162.5}, {"strands-best-order-sinks", 27486.2},
                            {"strands-best-order-sinks-2link", 23054.9}, {"strands-best-order-sinks-2link-dag", 23574.8}});
  // 69f6399's run (its own freshly profiled table): a check the weight was not chosen on.
  const auto b = corun_fit(dir + "strands-pairs-llama3-70b-throttled-69f6399.txt",
                           {{"strands-budget-7pct", 28318.8}, {"strands-budget-best", 28220.0}, {"strands", 29843.0},
                            {"strands-whole", 28746.1}, {"strands-whole-2link", 24327.7}, {"strands-whole-dag", 24179.1},
                            {"strands-whole-2link-dag", 23708.8}, {"strands-best-order", 28255.0},
                            {"strands-best-order-2link", 24943.5}, {"strands-best-order-sinks", 28037.6},
                            {"strands-best-order-sinks-2link", 23559.9}});
  for (const auto& f : {a, b}) {
    std::printf("solo model: Spearman %.3f, mean error %.1f%%; co-run model: Spearman %.3f, mean error %.1f%%\n",
                f.spearman_solo, 100 * f.err_solo, f.spearman_corun, 100 * f.err_corun);
    EXPECT_GT(f.spearman_corun, f.spearman_solo);
    EXPECT_LT(f.err_corun, 0.05);
    EXPECT_GT(f.err_solo, 0.10);
  }
}

// The co-run search with free moves: on the throttled 70B layer's measured pair table (two links, operators on
// their dependencies), from the whole-pass order the stack ran, it moves only the backward's movable operators
// (the forward is a chain), returns a valid order, and finds one the model puts >= 5% faster (22.9 -> 20.9 ms,
// fifty-first session); never worse than its starts; and it refuses an invalid start.
TEST(StrandsPlan, CorunMovesOrderSearch) {
  const auto c = cfg("llama3-70b", 4096);
  const m::Parallel p{2, true};
  const auto table = sch::load_pair_table(BRAID_RESULTS_DIR "/h200x2/strands-pairs-llama3-70b-throttled-e782a52.txt");
  auto dag = sch::strand_layer(c, p);
  sch::apply_solo_times(dag, table);
  const auto plan = sch::search_plan(sch::PairCost(dag, table), {});
  const auto dd2 = sch::dep_ready_layer(sch::two_link_layer(dag));
  const auto whole = sch::plan_issue_order(dd2, sch::whole_pass_plan(dd2, plan));
  const double start = sch::corun_makespan_us(dd2, whole, table);
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = sch::corun_moves_issue_order(dd2, {whole}, table);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("whole-pass order %.0f us, searched %.0f us (%.2f s)\n", start, r.makespan_us, secs);
  EXPECT_NEAR(r.makespan_us, sch::corun_makespan_us(dd2, r.order, table), 1e-6);
  EXPECT_LT(r.makespan_us, 0.95 * start);
  EXPECT_LT(secs, 60.0);
  // Valid: every op once, each after its dependencies; the forward keeps its order (a chain).
  ASSERT_EQ(r.order.size(), dd2.fwd.size() + dd2.bwd.size());
  std::vector<int> pos[2] = {std::vector<int>(dd2.fwd.size(), -1), std::vector<int>(dd2.bwd.size(), -1)};
  for (size_t k = 0; k < r.order.size(); ++k) {
    const int s = r.order[k].first == sch::Pass::Forward ? 0 : 1;
    ASSERT_EQ(pos[s][size_t(r.order[k].second)], -1);
    pos[s][size_t(r.order[k].second)] = int(k);
  }
  for (int s = 0; s < 2; ++s)
    for (size_t i = 0; i < pos[s].size(); ++i)
      for (int d : dd2.ops(s == 0 ? sch::Pass::Forward : sch::Pass::Backward)[i].deps) EXPECT_LT(pos[s][size_t(d)], pos[s][i]);
  for (size_t i = 1; i < pos[0].size(); ++i) EXPECT_LT(pos[0][i - 1], pos[0][i]);
  // Runs as a plan (the executor's single-op steps) and is never worse than the best start.
  EXPECT_NO_THROW(sch::order_plan(dd2, r.order));
  const auto b2 = sch::best_issue_order(sch::two_link_layer(dag), plan, 64).order;
  const auto r2 = sch::corun_moves_issue_order(dd2, {b2, whole}, table, sch::kCorunWeight, 3);
  EXPECT_LE(r2.makespan_us, std::min(start, sch::corun_makespan_us(dd2, b2, table)) + 1e-6);
  auto bad = whole;
  std::swap(bad.front(), bad.back());  // b.ag_dy last: its users before it
  EXPECT_THROW(sch::corun_moves_issue_order(dd2, {bad}, table), braid::Error);
  auto out_of_range = whole;
  out_of_range.back().second = 999;
  EXPECT_THROW(sch::corun_moves_issue_order(dd2, {out_of_range}, table), braid::Error);
}

// The pool-bounded order search: on measured pair tables of the 70B layer (NVLink and throttled, two links)
// and on the MoE layer's synthetic table, from the model's best orders, it finds an order whose pool bound
// fits a budget the starts miss (or reports none), every order a valid interleaving, in seconds.
TEST(StrandsPlan, PoolBoundedOrderSearch) {
  const std::string dir = BRAID_RESULTS_DIR "/h200x2/";
  struct Case {
    std::string model, pairs;
  };
  for (const Case& k : {Case{"llama3-70b", dir + "strands-pairs-llama3-70b.txt"},
                        Case{"llama3-70b", dir + "strands-pairs-llama3-70b-throttled-e782a52.txt"},
                        Case{"mixtral-8x7b", ""}}) {
    SCOPED_TRACE(k.model + " " + k.pairs);
    const auto c = cfg(k.model, 4096);
    const m::Parallel p{2, true};
    auto dag = sch::strand_layer(c, p);
    const auto table = k.pairs.empty() ? sch::synthetic_pair_table(dag) : sch::load_pair_table(k.pairs);
    sch::apply_solo_times(dag, table);
    const auto dag2 = sch::two_link_layer(dag);
    const auto sv = sch::saved_tensors(c, p);
    double one = 0;
    for (const auto& t : sv) one += t.bytes;
    const auto b2 = sch::best_issue_order(dag2, {}, 64), m2 = sch::best_issue_order(dag2, {}, 64, true);
    double start_bound = std::numeric_limits<double>::infinity();
    for (const auto& o : {b2.order, m2.order}) start_bound = std::min(start_bound, sch::two_strand_pool_bound(dag2, o, sv));
    const double budget = (k.model == "llama3-70b" ? 1.20 : 1.02) * one;
    const auto t0 = std::chrono::steady_clock::now();
    const auto r = sch::pool_bounded_issue_order(dag2, {b2.order, m2.order}, sv, budget, table);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double bound = sch::two_strand_pool_bound(dag2, r.order, sv);
    std::printf("%s, budget %.2fx: starts' smallest pool bound %.2fx one set (co-run %.0f / %.0f us); search: "
                "bound %.2fx, co-run %.0f us (%.1f s)\n",
                k.model.c_str(), budget / one, start_bound / one, sch::corun_makespan_us(dag2, b2.order, table),
                sch::corun_makespan_us(dag2, m2.order, table), bound / one, r.makespan_us, secs);
    // A valid interleaving: every op once, each pass in its own order as in a start (whole-pass order).
    ASSERT_EQ(r.order.size(), dag2.fwd.size() + dag2.bwd.size());
    std::vector<int> seenf, seenb, wantf, wantb;
    for (const auto& [pass, i] : r.order) (pass == sch::Pass::Forward ? seenf : seenb).push_back(i);
    for (const auto& [pass, i] : m2.order) (pass == sch::Pass::Forward ? wantf : wantb).push_back(i);
    EXPECT_EQ(seenf, wantf);
    EXPECT_EQ(std::multiset<int>(seenb.begin(), seenb.end()), std::multiset<int>(wantb.begin(), wantb.end()));
    if (std::isfinite(r.makespan_us)) {
      EXPECT_LE(bound, budget + 1e-6);
      // The placement reaches (or nearly reaches) the bound it searched on.
      EXPECT_LE(sch::two_strand_placement(dag2, r.order, sv).pool_bytes, 1.02 * bound);
    }
    EXPECT_LT(secs, 60.0);
    // One link (both strands' collectives on one stream), from the one-link best orders.
    const auto b1 = sch::best_issue_order(dag, {}, 64), m1 = sch::best_issue_order(dag, {}, 64, true);
    const auto r1 = sch::pool_bounded_issue_order(dag, {b1.order, m1.order}, sv, budget, table);
    std::printf("  one link: starts' pool bounds %.2fx / %.2fx; search: bound %.2fx, co-run %.0f us (starts %.0f / "
                "%.0f)\n",
                sch::two_strand_pool_bound(dag, b1.order, sv) / one, sch::two_strand_pool_bound(dag, m1.order, sv) / one,
                sch::two_strand_pool_bound(dag, r1.order, sv) / one, r1.makespan_us,
                sch::corun_makespan_us(dag, b1.order, table), sch::corun_makespan_us(dag, m1.order, table));
    if (std::isfinite(r1.makespan_us)) {
      EXPECT_LE(sch::two_strand_pool_bound(dag, r1.order, sv), budget + 1e-6);
    }
  }
}

namespace {
// One measured one-layer case as bench strands searches it: the DAG with the table's solo times, its DP plan, the
// saved tensors and the pool budget (one saved set + 5% of the single strand's memory - 64 MiB), the two-link
// dependency-ready DAG, and the one-link pool-bounded order (a fitting start).
struct OneLayerPool {
  sch::PairTable table;
  sch::Layer dag, dd2;
  sch::Plan plan;
  std::vector<sch::SavedTensor> sv;
  double one = 0, budget = 0;
  sch::BudgetedSchedule q1;
};
OneLayerPool one_layer_pool(const std::string& model, const std::string& pairs, double single_mib) {
  OneLayerPool o;
  const auto c = cfg(model, 4096);
  const m::Parallel p{2, true};
  o.table = sch::load_pair_table(pairs);
  o.dag = sch::strand_layer(c, p);
  sch::apply_solo_times(o.dag, o.table);
  o.plan = sch::search_plan(sch::PairCost(o.dag, o.table), {});
  o.sv = sch::saved_tensors(c, p);
  for (const auto& t : o.sv) o.one += t.bytes;
  o.budget = o.one + 0.05 * single_mib * 1048576.0 - 64.0 * 1048576.0;
  o.dd2 = sch::dep_ready_layer(sch::two_link_layer(o.dag));
  const auto b1 = sch::best_issue_order(o.dag, o.plan, 128), m1 = sch::best_issue_order(o.dag, o.plan, 128, true);
  o.q1 = sch::pool_bounded_issue_order(o.dag, {b1.order, m1.order}, o.sv, o.budget, o.table);
  return o;
}
}  // namespace

// The co-run moves search within a pool budget: on the measured one-layer tables (throttled 70B, throttled Mixtral
// EP=2; two links, operators on their dependencies), from the pool-bounded orders that fit the bench's budget (one
// saved set + 5% of the single strand's memory - 64 MiB), it returns a valid order whose pool bound fits, never
// slower in the model than its start, and within 5% of the unbounded moves search (fifty-third session: 70B
// 21385 vs 20898 us, Mixtral 10698 vs 10413); a start over budget is skipped (none: +inf, empty order).
TEST(StrandsPlan, PoolBoundedMovesOrderSearch) {
  const std::string dir = BRAID_RESULTS_DIR "/h200x2/";
  struct Case {
    std::string model, pairs;
    double single_mib;  // the single strand's memory that run measured (its budget)
  };
  for (const Case& k : {Case{"llama3-70b", dir + "strands-pairs-llama3-70b-throttled-e782a52.txt", 3377.4},
                        Case{"mixtral-8x7b", dir + "strands-pairs-mixtral-8x7b-onelayer-throttle1-9dc255e.txt", 5169.1}}) {
    SCOPED_TRACE(k.model);
    const OneLayerPool o = one_layer_pool(k.model, k.pairs, k.single_mib);
    const auto& [table, dag, dd2, plan, sv, one, budget, q1] = o;
    ASSERT_TRUE(std::isfinite(q1.makespan_us));
    const auto whole = sch::plan_issue_order(dd2, sch::whole_pass_plan(dd2, plan));
    const auto mv = sch::corun_moves_issue_order(dd2, {whole}, table);
    const auto t0 = std::chrono::steady_clock::now();
    const auto r = sch::pool_bounded_moves_issue_order(dd2, {q1.order}, sv, budget, table);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double bound = sch::two_strand_pool_bound(dd2, r.order, sv);
    std::printf("%s: budget %.2fx; unbounded moves %.0f us (bound %.2fx); pool-bounded moves %.0f us (bound %.2fx, "
                "from %.0f us; %.1f s)\n",
                k.model.c_str(), budget / one, mv.makespan_us, sch::two_strand_pool_bound(dd2, mv.order, sv) / one,
                r.makespan_us, bound / one, sch::corun_makespan_us(dd2, q1.order, table), secs);
    ASSERT_TRUE(std::isfinite(r.makespan_us));
    EXPECT_LE(bound, budget + 1e-6);
    EXPECT_NEAR(r.makespan_us, sch::corun_makespan_us(dd2, r.order, table), 1e-6);
    EXPECT_LE(r.makespan_us, sch::corun_makespan_us(dd2, q1.order, table) + 1e-6);
    EXPECT_LT(r.makespan_us, 1.05 * mv.makespan_us);
    EXPECT_LT(secs, 60.0);
    EXPECT_NO_THROW(sch::order_plan(dd2, r.order));  // valid: runs as the executor's single-op steps
    // Only fitting starts: with a budget below every start's bound, nothing is returned.
    const auto none = sch::pool_bounded_moves_issue_order(dd2, {q1.order}, sv, 0.5 * one, table);
    EXPECT_FALSE(std::isfinite(none.makespan_us));
    EXPECT_TRUE(none.order.empty());
  }
}

// The co-run model with one pool's memory waits, and the placement chosen for it: on the measured one-layer Mixtral
// table (1 CTA), the pool-bounded moves order in its smallest placement runs longer in the model than with two sets
// (its forward's writes wait on backward readers still running); among placements within the bench's budget the
// chosen one costs less (here: no more than two sets), fits the budget, and its waits all point backwards in the
// order. Waits never shorten the make-span; a wait on a backward op issued later is refused.
TEST(StrandsPlan, PlacementChosenForMemoryWaits) {
  const OneLayerPool o = one_layer_pool(
      "mixtral-8x7b", BRAID_RESULTS_DIR "/h200x2/strands-pairs-mixtral-8x7b-onelayer-throttle1-9dc255e.txt", 5169.1);
  const auto& [table, dag, dd2, plan, sv, one, budget, q1] = o;
  ASSERT_TRUE(std::isfinite(q1.makespan_us));
  const auto r = sch::pool_bounded_moves_issue_order(dd2, {q1.order}, sv, budget, table);
  ASSERT_TRUE(std::isfinite(r.makespan_us));
  const double two_sets = sch::corun_makespan_us(dd2, r.order, table);
  const auto small = sch::two_strand_placement(dd2, r.order, sv);
  const double small_cost = sch::placement_wait_cost(dd2, r.order, sv, small, table);
  sch::PlacementChoice choice;
  choice.budget_bytes = budget;
  choice.cost = [&](const std::vector<sch::SavedTensor>& s, const sch::ArenaPlacement& pl) {
    return sch::placement_wait_cost(dd2, r.order, s, pl, table);
  };
  const auto chosen = sch::two_strand_placement(dd2, r.order, sv, &choice);
  const double chosen_cost = sch::placement_wait_cost(dd2, r.order, sv, chosen, table);
  std::printf("two sets %.0f us; smallest pool %.2fx: %.0f us; chosen %.2fx: %.0f us\n", two_sets,
              small.pool_bytes / one, small_cost, chosen.pool_bytes / one, chosen_cost);
  EXPECT_GE(small_cost, two_sets - 1e-6);
  EXPECT_GE(chosen_cost, two_sets - 1e-6);
  EXPECT_LT(chosen_cost, small_cost);  // this table: the smallest pool's waits cost 1-4% in the model
  EXPECT_LE(chosen.pool_bytes, budget + 1e-6);
  EXPECT_GE(chosen.pool_bytes, small.pool_bytes - 1e-6);
  // No choice fits a budget below the smallest pool: the smallest pool, as without one.
  choice.budget_bytes = 0.5 * small.pool_bytes;
  EXPECT_EQ(sch::two_strand_placement(dd2, r.order, sv, &choice).pool_bytes, small.pool_bytes);
  // Waits on a backward op issued after its forward op are refused.
  // (The first forward op issued and the last backward op issued: the latter comes after the former.)
  int first_fwd = -1, last_bwd = -1;
  for (const auto& [pass, i] : r.order) {
    if (pass == sch::Pass::Forward && first_fwd < 0) first_fwd = i;
    if (pass == sch::Pass::Backward) last_bwd = i;
  }
  ASSERT_GE(first_fwd, 0);
  ASSERT_GE(last_bwd, 0);
  const auto at = [&](sch::Pass pass, int i) {
    return std::find(r.order.begin(), r.order.end(), std::make_pair(pass, i)) - r.order.begin();
  };
  ASSERT_LT(at(sch::Pass::Forward, first_fwd), at(sch::Pass::Backward, last_bwd));
  std::vector<std::vector<int>> bad(dd2.fwd.size());
  bad[size_t(first_fwd)].push_back(last_bwd);
  EXPECT_THROW(sch::corun_makespan_us(dd2, r.order, table, sch::kCorunWeight, bad), braid::Error);
  EXPECT_THROW(sch::corun_makespan_us(dd2, r.order, table, sch::kCorunWeight, {{}}), braid::Error);  // wrong size
}

// The GEMMs the -opcap variants cap: only GEMMs, each overlapping a collective of the other strand in the
// plan's timeline; on the 70B layer some are and some are not.
TEST(StrandsPlan, GemmsBesideCollectives) {
  auto d = sch::two_link_layer(sch::strand_layer(cfg("llama3-70b", 4096), m::Parallel{2, true}));
  sch::apply_solo_times(d, sch::synthetic_pair_table(d));
  const auto plan = sch::whole_pass_plan(d);
  const auto [f, b] = sch::gemms_beside_collectives(d, plan);
  ASSERT_EQ(f.size(), d.fwd.size());
  ASSERT_EQ(b.size(), d.bwd.size());
  const auto spans = sch::plan_timeline(d, plan);
  auto op_of = [&](const sch::OpSpan& x) -> const sch::Op& { return x.pass == sch::Pass::Forward ? d.fwd[x.op] : d.bwd[x.op]; };
  int flagged = 0, gemms = 0;
  for (const auto& g : spans) {
    const bool flag = (g.pass == sch::Pass::Forward ? f : b)[g.op] != 0;
    if (op_of(g).type != "gemm") {
      EXPECT_FALSE(flag) << op_of(g).name;
      continue;
    }
    ++gemms;
    bool beside = false;
    for (const auto& c : spans)
      beside = beside || (c.pass != g.pass && op_of(c).kind == sch::OpKind::Comm && c.start_us < g.end_us &&
                          g.start_us < c.end_us);
    EXPECT_EQ(flag, beside) << op_of(g).name;
    flagged += flag;
  }
  EXPECT_GT(flagged, 0);
  EXPECT_LT(flagged, gemms);
}

// The stack's operator-grain hand-over of a slot (StrandStack split slots): each forward producer of a named
// saved tensor waits for every backward reader of it; nothing else waits.
TEST(StrandsPlan, SlotReuseWaits) {
  for (const std::string model : {"llama3-70b", "mixtral-8x7b"}) {
    SCOPED_TRACE(model);
    const m::Parallel p{2, true};
    const auto d = sch::strand_layer(cfg(model, 4096), p);
    const auto sv = sch::saved_tensors(cfg(model, 4096), p);
    std::vector<std::string> all;
    for (const auto& t : sv) all.push_back(t.name);
    for (const auto& w : sch::slot_reuse_waits(d, sv, {})) EXPECT_TRUE(w.empty());
    const auto w = sch::slot_reuse_waits(d, sv, all);
    ASSERT_EQ(w.size(), d.fwd.size());
    auto index = [](const std::vector<sch::Op>& ops, const std::string& name) {
      for (size_t i = 0; i < ops.size(); ++i)
        if (ops[i].name == name) return int(i);
      return -1;
    };
    size_t n = 0;
    for (const auto& t : sv) {
      const int pi = index(d.fwd, t.producer);
      ASSERT_GE(pi, 0) << t.producer;
      std::vector<std::string> readers = t.other_readers;
      readers.push_back(t.last_reader);
      for (const auto& r : readers) {
        const int ri = index(d.bwd, r);
        ASSERT_GE(ri, 0) << r;
        EXPECT_NE(std::find(w[pi].begin(), w[pi].end(), ri), w[pi].end()) << t.name << ": " << t.producer << " / " << r;
      }
    }
    for (size_t i = 0; i < w.size(); ++i) {
      n += w[i].size();
      // Only producers wait, and only once per reader.
      if (!w[i].empty()) {
        EXPECT_TRUE(std::any_of(sv.begin(), sv.end(), [&](const sch::SavedTensor& t) { return t.producer == d.fwd[i].name; }));
      }
      std::vector<int> u = w[i];
      std::sort(u.begin(), u.end());
      EXPECT_EQ(std::unique(u.begin(), u.end()), u.end()) << d.fwd[i].name;
    }
    EXPECT_GT(n, 0u);
    // One late tensor: only its producer waits (the dense layer's gu: gate_up_proj for swiglu_bwd).
    if (model == "llama3-70b") {
      const auto g = sch::slot_reuse_waits(d, sv, {"gu"});
      for (size_t i = 0; i < g.size(); ++i)
        EXPECT_EQ(g[i].empty(), d.fwd[i].name != "f.gate_up_proj") << d.fwd[i].name;
      EXPECT_EQ(g[size_t(index(d.fwd, "f.gate_up_proj"))], std::vector<int>{index(d.bwd, "b.swiglu_bwd")});
    }
    EXPECT_THROW(sch::slot_reuse_waits(d, sv, {"no_such_tensor"}), braid::Error);
  }
}

// bench strands --op-trace's breakdown (summarize_strand_trace) on synthetic spans: the compute stream's gaps named by
// the operator held back and the collective that ended in the gap, idle time split by a collective in flight, and
// the operators' excess over the compute-only reference split by whether they ran beside a collective.
TEST(StrandTrace, SplitsTheExposureIntoWaitsAndSlowdown) {
  const auto C = reinterpret_cast<cudaStream_t>(std::uintptr_t(1)), L1 = reinterpret_cast<cudaStream_t>(std::uintptr_t(2)),
             L2 = reinterpret_cast<cudaStream_t>(std::uintptr_t(3));
  using S = sch::OpTrace::Span;
  const std::vector<S> run = {{"f.norm1", C, 0, 10},         {"f.ag_h1", L1, 10, 110},     {"b.ag_dy", L2, 0, 100},
                              {"b.down_proj_dgrad", C, 100, 300}, {"f.qkv_proj", C, 300, 400}, {"f.rs_mlp", L1, 400, 450},
                              {"f.residual2", C, 460, 480}};
  const std::vector<S> ref = {{"f.norm1", C, 0, 10}, {"b.down_proj_dgrad", C, 10, 190}, {"f.qkv_proj", C, 190, 290},
                              {"f.residual2", C, 290, 310}};
  const auto x = sch::summarize_strand_trace(run, ref, C);
  EXPECT_DOUBLE_EQ(x.span_us, 480);
  EXPECT_DOUBLE_EQ(x.ref_span_us, 310);
  EXPECT_DOUBLE_EQ(x.busy_us, 330);
  EXPECT_DOUBLE_EQ(x.ref_busy_us, 310);
  EXPECT_DOUBLE_EQ(x.idle_us, 150);
  EXPECT_DOUBLE_EQ(x.ref_idle_us, 0);
  EXPECT_DOUBLE_EQ(x.idle_in_flight_us, 140);  // 90 waiting for the all-gather, 50 of 60 for the reduce-scatter
  EXPECT_DOUBLE_EQ(x.link_busy_us, 250);
  EXPECT_EQ(x.collectives, 3);
  ASSERT_EQ(x.gaps.size(), 2u);
  EXPECT_EQ(x.gaps[0].held, "b.down_proj_dgrad");
  EXPECT_EQ(x.gaps[0].waited, "b.ag_dy");  // f.ag_h1 ends after the gap
  EXPECT_DOUBLE_EQ(x.gaps[0].us, 90);
  EXPECT_DOUBLE_EQ(x.gaps[0].in_flight_us, 90);
  EXPECT_EQ(x.gaps[1].held, "f.residual2");
  EXPECT_EQ(x.gaps[1].waited, "f.rs_mlp");
  EXPECT_DOUBLE_EQ(x.gaps[1].us, 60);
  EXPECT_DOUBLE_EQ(x.gaps[1].in_flight_us, 50);
  // Exposure 170 = 150 idle + 20 busy: the dgrad ran 20 us over its reference, 10 of its 200 us beside a collective.
  EXPECT_DOUBLE_EQ((x.idle_us - x.ref_idle_us) + (x.busy_us - x.ref_busy_us), x.span_us - x.ref_span_us);
  EXPECT_DOUBLE_EQ(x.excess_alone_us, 20);
  EXPECT_DOUBLE_EQ(x.excess_beside_us, 0);
  ASSERT_EQ(x.ops.size(), 4u);
  EXPECT_EQ(x.ops[0].name, "b.down_proj_dgrad");
  EXPECT_DOUBLE_EQ(x.ops[0].beside_us, 10);
  EXPECT_EQ(x.ops[0].calls, 1);
}

// A stack runs every name once per layer: gaps and operators add up by name, and the gap after the last compute
// operator counts as "(the end)", waiting for the collective that ended there.
TEST(StrandTrace, SumsByNameOverLayersAndNamesTheTail) {
  const auto C = reinterpret_cast<cudaStream_t>(std::uintptr_t(1)), L = reinterpret_cast<cudaStream_t>(std::uintptr_t(2));
  using S = sch::OpTrace::Span;
  const std::vector<S> run = {{"f.ag", L, 0, 50},   {"f.gemm", C, 50, 150},  {"f.ag", L, 150, 200},
                              {"f.gemm", C, 200, 310}, {"b.rs", L, 310, 340}, {"x.small", C, 150.5, 150.6}};
  const std::vector<S> ref = {{"f.gemm", C, 0, 100}, {"f.gemm", C, 100, 200}, {"x.small", C, 200, 200.1}};
  const auto x = sch::summarize_strand_trace(run, ref, C);
  ASSERT_GE(x.gaps.size(), 2u);
  EXPECT_EQ(x.gaps[0].held, "f.gemm");
  EXPECT_EQ(x.gaps[0].waited, "f.ag");
  EXPECT_EQ(x.gaps[0].count, 2);
  EXPECT_NEAR(x.gaps[0].us, 50 + 49.4, 1e-9);  // the second gap starts after x.small
  EXPECT_DOUBLE_EQ(x.gaps[0].longest_us, 50);
  EXPECT_EQ(x.gaps[1].held, "(the end)");
  EXPECT_EQ(x.gaps[1].waited, "b.rs");
  EXPECT_DOUBLE_EQ(x.gaps[1].us, 30);
  const auto g = std::find_if(x.ops.begin(), x.ops.end(), [](const auto& o) { return o.name == "f.gemm"; });
  ASSERT_NE(g, x.ops.end());
  EXPECT_EQ(g->calls, 2);
  EXPECT_DOUBLE_EQ(g->us, 210);
  EXPECT_DOUBLE_EQ(g->ref_us, 200);
  EXPECT_EQ(x.ops[0].name, "f.gemm");  // the most over its reference
}

// opening_chunked_layer: the opening pairs split across their operators (the GEMM operator waits for each chunk of the
// all-gather itself), so the GEMM operator takes the all-gather's dependencies instead of the all-gather, and whatever
// else read the gathered tensor after the all-gather still waits for the GEMM operator. The GPU layer's DAGs have the
// latter already (the forward is a chain; a backward sink depends on the main operator before it); the function adds
// it where a DAG lacks it (here one made by hand). Layers without a pair (no sequence parallelism; the MoE backward)
// are left alone.
TEST(OpeningChunks, TheGemmWaitsForTheChunksAndReadersForTheGemm) {
  const m::Parallel sp{2, true}, nosp{2, false};
  auto reaches = [](const std::vector<sch::Op>& ops, int i, int target) {  // transitive dependency of op i
    std::vector<int> todo{i};
    std::vector<char> seen(ops.size(), 0);
    while (!todo.empty()) {
      const int k = todo.back();
      todo.pop_back();
      for (int d : ops[size_t(k)].deps) {
        if (d == target) return true;
        if (!seen[size_t(d)]) seen[size_t(d)] = 1, todo.push_back(d);
      }
    }
    return false;
  };
  for (const char* name : {"llama3-70b", "llama3-8b", "mixtral-8x7b"}) {
    const auto dag = sch::strand_layer(cfg(name, 4096), sp);
    const auto open = sch::opening_chunked_layer(dag);
    for (const auto pass : {sch::Pass::Forward, sch::Pass::Backward}) {
      const bool fwd = pass == sch::Pass::Forward;
      const int ag = dag.find(pass, fwd ? "f.ag_h1" : "b.ag_dy"), g = dag.find(pass, fwd ? "f.qkv_proj" : "b.down_proj_dgrad");
      const auto &before = dag.ops(pass), &after = open.ops(pass);
      for (size_t i = 0; i < before.size(); ++i) {
        if (ag >= 0 && int(i) == g) continue;
        EXPECT_EQ(before[i].deps, after[i].deps) << name << " " << before[i].name;
      }
      if (ag < 0) continue;  // the MoE backward
      ASSERT_GT(g, ag) << name;
      EXPECT_EQ(after[size_t(g)].deps, before[size_t(ag)].deps) << name << ": the GEMM takes the all-gather's dependencies";
      EXPECT_FALSE(reaches(after, g, ag)) << name;
      for (int i = 0; i < int(before.size()); ++i)
        if (i != g && reaches(before, i, ag)) EXPECT_TRUE(reaches(after, i, g)) << name << " " << before[size_t(i)].name;
    }
    const auto again = sch::opening_chunked_layer(open);  // twice is once
    for (size_t i = 0; i < open.bwd.size(); ++i) EXPECT_EQ(again.bwd[i].deps, open.bwd[i].deps) << name;
    for (size_t i = 0; i < open.fwd.size(); ++i) EXPECT_EQ(again.fwd[i].deps, open.fwd[i].deps) << name;
  }
  {  // a DAG whose weight gradient reads dy's gather directly
    auto dag = sch::strand_layer(cfg("llama3-70b", 4096), sp);
    const int ag = dag.find(sch::Pass::Backward, "b.ag_dy"), dg = dag.find(sch::Pass::Backward, "b.down_proj_dgrad"),
              wg = dag.find(sch::Pass::Backward, "b.down_proj_wgrad");
    ASSERT_GE(ag, 0);
    ASSERT_GT(dg, ag);
    ASSERT_GT(wg, dg);
    dag.bwd[size_t(wg)].deps = {ag};
    const auto open = sch::opening_chunked_layer(dag);
    EXPECT_EQ(open.bwd[size_t(wg)].deps, (std::vector<int>{ag, dg}));
    EXPECT_EQ(open.bwd[size_t(dg)].deps, dag.bwd[size_t(ag)].deps);
    const auto again = sch::opening_chunked_layer(open);  // twice is once
    EXPECT_EQ(again.bwd[size_t(wg)].deps, open.bwd[size_t(wg)].deps);
  }
  {  // no sequence parallelism: no all-gathers
    const auto dag = sch::strand_layer(cfg("llama3-70b", 4096), nosp);
    EXPECT_LT(dag.find(sch::Pass::Backward, "b.ag_dy"), 0);
    const auto open = sch::opening_chunked_layer(dag);
    for (size_t i = 0; i < dag.bwd.size(); ++i) EXPECT_EQ(dag.bwd[i].deps, open.bwd[i].deps);
  }
}
