// plan-strands and pipeline entry points (the braid CLI calls these).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "braid/schedule.hpp"
#include "braid/schedule/strands.hpp"

using namespace braid::schedule;

namespace {
int run(int (*fn)(int, char**, std::ostream&), std::vector<std::string> args, std::string& out) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  std::ostringstream os;
  const int rc = fn(static_cast<int>(argv.size()), argv.data(), os);
  out = os.str();
  return rc;
}
}  // namespace

TEST(Cli, PlanStrandsWritesAPlanAndReadsPairs) {
  const std::string pairs = testing::TempDir() + "dhelix_pairs.txt";
  const std::string plan = testing::TempDir() + "dhelix_plan.txt";
  std::string out;
  ASSERT_EQ(run(plan_strands_main,
                {"plan-strands", "--model", "llama3-8b", "--tp", "2", "--seq", "4096", "--max-shift", "2",
                 "--write-pairs", pairs, "--out", plan},
                out),
            0)
      << out;
  EXPECT_NE(out.find("speed-up"), std::string::npos) << out;
  EXPECT_NE(out.find("hidden"), std::string::npos);
  std::ifstream pf(plan);
  const PlanFile first = read_plan(pf);
  // Re-planning from the written pair file gives the same plan.
  std::string out2;
  ASSERT_EQ(run(plan_strands_main,
                {"plan-strands", "--model", "llama3-8b", "--tp", "2", "--seq", "4096", "--max-shift", "2",
                 "--pairs", pairs, "--out", plan, "--oef"},
                out2),
            0)
      << out2;
  EXPECT_NE(out2.find("OEF"), std::string::npos);
  std::ifstream pf2(plan);
  const PlanFile second = read_plan(pf2);
  EXPECT_EQ(first.total_us, second.total_us);
  EXPECT_EQ(first.bwd_order, second.bwd_order);
  std::remove(pairs.c_str());
  std::remove(plan.c_str());
}

// --order-out: the moved-operator order (a link per strand, operators on their dependencies) searched under solo
// times (weight 0), one operator per step, readable back onto that DAG; both searches' model line is printed either way.
TEST(Cli, PlanStrandsWritesTheMovedOperatorOrder) {
  const std::string order = testing::TempDir() + "dhelix_order.txt";
  std::string out;
  ASSERT_EQ(run(plan_strands_main,
                {"plan-strands", "--model", "llama3-8b", "--tp", "2", "--seq", "4096", "--max-shift", "2",
                 "--order-out", order},
                out),
            0)
      << out;
  EXPECT_NE(out.find("operators moved (corun_moves_issue_order)"), std::string::npos) << out;
  EXPECT_NE(out.find("under solo times (weight 0)"), std::string::npos) << out;
  EXPECT_NE(out.find("moved-operator order (weight 0) written to"), std::string::npos) << out;
  std::ifstream f(order);
  const PlanFile pf = read_plan(f);
  LayerConfig cfg;
  cfg.tp = 2, cfg.seq = 4096;
  const Layer dd2 = dep_ready_layer(two_link_layer(build_layer(model_dims("llama3-8b"), cfg)));
  const Plan plan = from_plan_file(dd2, pf);
  EXPECT_EQ(plan.steps.size(), dd2.fwd.size() + dd2.bwd.size());
  std::remove(order.c_str());
}

TEST(Cli, PlanStrandsMoe) {
  std::string out;
  ASSERT_EQ(run(plan_strands_main,
                {"plan-strands", "--model", "mixtral-8x7b", "--tp", "2", "--ep", "2", "--seq", "4096", "--max-shift",
                 "2"},
                out),
            0)
      << out;
  EXPECT_NE(out.find("dispatch[X]"), std::string::npos) << out;
}

// A pair table profiled on the GPU names the GPU layer's operators: plan-strands plans that layer (auto), and with
// the single strand's memory it also plans both strands in one activation pool — the pool-bounded co-run moves
// orders (schedule::one_pool_orders, the search bench strands runs), each placed for its memory waits
// (wait_aware_choice) — and writes the recommended order for dep_ready_layer(two_link_layer(strand_layer)).
TEST(Cli, PlanStrandsGpuLayerAndOnePool) {
  const std::string pairs = BRAID_RESULTS_DIR "/h200x2/strands-pairs-llama3-70b-throttled-e782a52.txt";
  const std::string order = testing::TempDir() + "dhelix_pool_order.txt";
  std::string out;
  ASSERT_EQ(run(plan_strands_main,
                {"plan-strands", "--model", "llama3-70b", "--tp", "2", "--seq", "4096", "--pairs", pairs,
                 "--single-mib", "3377.4", "--pool-order-out", order},
                out),
            0)
      << out;
  EXPECT_NE(out.find("operators: the GPU layer"), std::string::npos) << out;
  EXPECT_EQ(out.find("warning: pair table is for"), std::string::npos) << out;  // the table's own layer
  EXPECT_NE(out.find("one activation pool: budget"), std::string::npos) << out;
  EXPECT_NE(out.find("recommended:"), std::string::npos) << out;
  std::ifstream f(order);
  const PlanFile pf = read_plan(f);
  auto c = braid::model::preset("llama3-70b");
  c.seq = 4096;
  const braid::model::Parallel p{2, true};
  Layer dag = strand_layer(c, p);
  apply_solo_times(dag, load_pair_table(pairs));
  const Layer dd2 = dep_ready_layer(two_link_layer(dag));
  const Plan plan = from_plan_file(dd2, pf);
  EXPECT_EQ(plan.steps.size(), dd2.fwd.size() + dd2.bwd.size());
  // Its pool fits the budget the bench would use (one set + 5% of the single strand - 64 MiB).
  const auto saved = saved_tensors(c, p);
  double one = 0;
  for (const auto& t : saved) one += t.bytes;
  const double budget = one + (0.05 * 3377.4 - 64.0) * 1048576.0;
  const auto ord = plan_issue_order(dd2, plan);
  EXPECT_LE(two_strand_pool_bound(dd2, ord, saved), budget + 1e-6);
  const PlacementChoice choice = wait_aware_choice(dd2, ord, load_pair_table(pairs), budget);
  EXPECT_LE(two_strand_placement(dd2, ord, saved, &choice).pool_bytes, budget + 1e-6);
  std::remove(order.c_str());
  // The same table planned on the analytic builder's operators: none of its names match (a warning).
  ASSERT_EQ(run(plan_strands_main,
                {"plan-strands", "--model", "llama3-70b", "--tp", "2", "--seq", "4096", "--pairs", pairs, "--layer",
                 "analytic", "--max-shift", "2"},
                out),
            0)
      << out;
  EXPECT_NE(out.find("operators: the analytic builder"), std::string::npos) << out;
  EXPECT_NE(out.find("warning: pair table is for"), std::string::npos) << out;
  // Without a budget the pool is not planned (a hint instead); the pool options need the GPU layer, one budget.
  ASSERT_EQ(run(plan_strands_main,
                {"plan-strands", "--model", "llama3-70b", "--tp", "2", "--seq", "4096", "--pairs", pairs}, out),
            0)
      << out;
  EXPECT_NE(out.find("give --single-mib"), std::string::npos) << out;
  EXPECT_EQ(run(plan_strands_main,
                {"plan-strands", "--model", "llama3-8b", "--tp", "2", "--seq", "4096", "--layer", "analytic",
                 "--single-mib", "3000"},
                out),
            2);
  EXPECT_EQ(run(plan_strands_main,
                {"plan-strands", "--model", "llama3-70b", "--tp", "2", "--seq", "4096", "--pairs", pairs,
                 "--single-mib", "3000", "--pool-budget-mib", "700"},
                out),
            2);
  EXPECT_EQ(run(plan_strands_main, {"plan-strands", "--model", "llama3-8b", "--layer", "both"}, out), 2);
}

TEST(Cli, UsageErrors) {
  std::string out;
  EXPECT_EQ(run(plan_strands_main, {"plan-strands"}, out), 2);
  EXPECT_NE(out.find("usage"), std::string::npos);
  EXPECT_EQ(run(plan_strands_main, {"plan-strands", "--model", "nope"}, out), 2);
  EXPECT_EQ(run(plan_strands_main, {"plan-strands", "--model", "llama3-8b", "--ep", "2"}, out), 2);
  EXPECT_EQ(run(simulate_pipeline_main, {"pipeline", "--stages", "4"}, out), 2);
  EXPECT_EQ(run(simulate_pipeline_main, {"pipeline", "--stages", "4", "--microbatches", "8", "--schedule", "x"}, out), 2);
}

TEST(Cli, PipelineTable) {
  std::string out;
  ASSERT_EQ(run(simulate_pipeline_main, {"pipeline", "--stages", "2,4,8", "--microbatches", "16", "--schedule", "both"}, out),
            0)
      << out;
  int rows = 0;
  std::istringstream is(out);
  for (std::string line; std::getline(is, line);) rows += line.rfind("1f1b", 0) == 0 || line.rfind("w ", 0) == 0;
  EXPECT_EQ(rows, 6) << out;
  // all: the split W forms too, faster than W with si-factor 1 once SI units run (M > P).
  ASSERT_EQ(run(simulate_pipeline_main, {"pipeline", "--stages", "4", "--microbatches", "16", "--schedule", "all"}, out), 0)
      << out;
  std::map<std::string, double> span;
  std::istringstream is2(out);
  for (std::string line; std::getline(is2, line);) {
    std::istringstream ls(line);
    std::string name;
    long P = 0, M = 0;
    double makespan = 0;
    if (ls >> name >> P >> M >> makespan && P == 4) span[name] = makespan;
  }
  ASSERT_EQ(span.size(), 4u) << out;
  EXPECT_DOUBLE_EQ(span["w"], span["1f1b"]);
  EXPECT_LT(span["w-fb"], span["w"]);
  EXPECT_DOUBLE_EQ(span["w-fb"], span["w-bf"]);
}
