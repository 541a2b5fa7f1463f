// `braid plan` as a function.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "braid/fusion.hpp"

namespace {

int plan(std::vector<std::string> args, std::string& text) {
  args.insert(args.begin(), "plan");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  std::ostringstream out;
  const int rc = braid::fusion::plan_main(static_cast<int>(argv.size()), argv.data(), out);
  text = out.str();
  return rc;
}

}  // namespace

TEST(FusionPlan, Llama70bTpSpPp) {
  std::string text;
  ASSERT_EQ(plan({"--model", "llama3-70b", "--parallel", "tp=8,sp=8,pp=2", "--seq", "8192"}, text), 0) << text;
  EXPECT_NE(text.find("TP+SP"), std::string::npos) << text;
  EXPECT_NE(text.find("SP+PP"), std::string::npos) << text;
  EXPECT_NE(text.find("paper Table 2 ratio 50.0%"), std::string::npos) << text;
  EXPECT_NE(text.find("M2MS"), std::string::npos) << text;
}

TEST(FusionPlan, MixtralMoeTransitions) {
  std::string text;
  ASSERT_EQ(plan({"--model", "mixtral-8x7b", "--parallel", "tp=4,ep=4,pp=2", "--batch", "4"}, text), 0) << text;
  EXPECT_NE(text.find("TP+EP"), std::string::npos) << text;
  EXPECT_NE(text.find("TP+PP"), std::string::npos) << text;
  ASSERT_EQ(plan({"--model", "mixtral-8x7b", "--parallel", "pp=2,ep=8", "--dtype", "fp32"}, text), 0) << text;
  EXPECT_NE(text.find("PP+EP"), std::string::npos) << text;
  EXPECT_NE(text.find("M2MS dispatch"), std::string::npos) << text;
}

TEST(FusionPlan, CalibrationFile) {
  const std::string path = ::testing::TempDir() + "braid_plan_cal.txt";
  std::ofstream(path) << "RS 1e6 1e-4\nRS 1e9 1e-2\n";
  std::string text;
  ASSERT_EQ(plan({"--model", "llama3-8b", "--parallel", "tp=2,sp=2", "--calibration", path}, text), 0) << text;
  EXPECT_NE(text.find("calibrated"), std::string::npos) << text;
  std::remove(path.c_str());
}

TEST(FusionPlan, UsageErrors) {
  std::string text;
  EXPECT_EQ(plan({"--model", "nope", "--parallel", "tp=2"}, text), 2);
  EXPECT_EQ(plan({"--model", "llama3-8b", "--parallel", "ep=2"}, text), 2);  // dense model
  EXPECT_EQ(plan({"--model", "llama3-8b", "--parallel", "tp=4,sp=2"}, text), 2);
  EXPECT_EQ(plan({"--model", "llama3-8b", "--parallel", "tp=2", "--dtype", "fp8"}, text), 2);
  EXPECT_EQ(plan({"--model", "llama3-8b", "--parallel", "tp=2", "--topology", "mesh"}, text), 2);
  EXPECT_EQ(plan({"--help"}, text), 0);
}
