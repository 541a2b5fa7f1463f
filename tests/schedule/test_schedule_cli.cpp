// plan-strands and pipeline entry points (the braid CLI calls these).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
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

// --order-out: the co-run model's moved-operator order (a link per strand, operators on their dependencies), one
// operator per step, readable back onto that DAG; the model line is printed either way.
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
}
