// CPU: the entry point's option splitting (include/braid/cli_options.hpp).
#include <gtest/gtest.h>

#include <vector>

#include "braid/cli_options.hpp"

namespace {

braid::cli::Options parse(std::vector<const char*> args, std::vector<std::string> flags = {"--graph"}) {
  args.insert(args.begin(), "braid");
  return braid::cli::parse_options(int(args.size()), args.data(), flags);
}

TEST(CliOptions, WordsValuesAndFlags) {
  const auto o = parse({"bench", "allreduce", "-b", "64K", "--graph", "--algo", "nccl,int8"});
  EXPECT_EQ(o.words, (std::vector<std::string>{"bench", "allreduce"}));
  EXPECT_EQ(o.get("-b", ""), "64K");
  EXPECT_EQ(o.get("--algo", ""), "nccl,int8");
  EXPECT_TRUE(o.has("--graph"));
  EXPECT_EQ(o.get("--iters", "50"), "50");
}

TEST(CliOptions, UnlistedFlagLastOrBeforeAnotherOptionIsAFlag) {
  // `bench t3-gemm-rs ... --profile-range` (the flag last) once failed with "needs a value".
  const auto last = parse({"bench", "t3-gemm-rs", "--shape", "1024,1024,1024", "--profile-range"});
  EXPECT_EQ(last.get("--profile-range", ""), "1");
  EXPECT_EQ(last.get("--shape", ""), "1024,1024,1024");
  const auto mid = parse({"bench", "strands", "--no-verify", "--iters", "5"});
  EXPECT_EQ(mid.get("--no-verify", ""), "1");
  EXPECT_EQ(mid.get("--iters", ""), "5");
}

TEST(CliOptions, ListedFlagNeverTakesAValue) {
  const auto o = parse({"bench", "allreduce", "--graph", "extra"});
  EXPECT_EQ(o.get("--graph", ""), "1");
  EXPECT_EQ(o.words.back(), "extra");
}

}  // namespace
