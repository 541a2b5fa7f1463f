// The watchdog fires once, with the phase and rank, when not re-armed in time; re-arming and disarming
// keep it quiet; the environment sets its budget.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#include "braid/watchdog.hpp"

namespace {

using namespace std::chrono_literals;

struct Catch {
  std::mutex m;
  std::string report;
  std::atomic<int> n{0};
  std::function<void(const std::string&)> fn() {
    return [this](const std::string& r) {
      std::lock_guard<std::mutex> l(m);
      report = r;
      ++n;
    };
  }
};

TEST(Watchdog, FiresOnceWithPhaseAndRank) {
  Catch c;
  braid::Watchdog wd(0, 3, c.fn());
  wd.rearm(0.05, "bench t3-gemm-rs 8192x8192x4096");
  std::this_thread::sleep_for(400ms);
  EXPECT_EQ(c.n.load(), 1);
  EXPECT_TRUE(wd.fired());
  std::lock_guard<std::mutex> l(c.m);
  EXPECT_NE(c.report.find("rank 3"), std::string::npos) << c.report;
  EXPECT_NE(c.report.find("bench t3-gemm-rs 8192x8192x4096"), std::string::npos) << c.report;
}

TEST(Watchdog, RearmedInTimeOrDisarmedStaysQuiet) {
  Catch c;
  braid::Watchdog wd(0.3, 0, c.fn());
  for (int i = 0; i < 6; ++i) {
    std::this_thread::sleep_for(100ms);
    wd.rearm(0.3, "step " + std::to_string(i));
  }
  wd.disarm();
  std::this_thread::sleep_for(500ms);
  EXPECT_EQ(c.n.load(), 0);
  EXPECT_FALSE(wd.fired());
}

TEST(Watchdog, ZeroSecondsIsOff) {
  Catch c;
  { braid::Watchdog wd(0, 0, c.fn()); std::this_thread::sleep_for(100ms); }
  EXPECT_EQ(c.n.load(), 0);
}

TEST(Watchdog, SecondsFromEnvironment) {
  setenv("BRAID_TEST_WD", "12.5", 1);
  EXPECT_DOUBLE_EQ(braid::Watchdog::seconds_from_env("BRAID_TEST_WD", 3), 12.5);
  setenv("BRAID_TEST_WD", "nonsense", 1);
  EXPECT_DOUBLE_EQ(braid::Watchdog::seconds_from_env("BRAID_TEST_WD", 3), 3);
  setenv("BRAID_TEST_WD", "-1", 1);
  EXPECT_DOUBLE_EQ(braid::Watchdog::seconds_from_env("BRAID_TEST_WD", 3), 3);
  unsetenv("BRAID_TEST_WD");
  EXPECT_DOUBLE_EQ(braid::Watchdog::seconds_from_env("BRAID_TEST_WD", 0), 0);
}

}  // namespace

namespace {
TEST(WatchdogDeathTest, EndsTheProcessWith124AndAReport) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        braid::Watchdog wd(0, 5);
        wd.rearm(0.1, "a stuck phase");
        std::this_thread::sleep_for(5s);
        std::exit(0);
      },
      ::testing::ExitedWithCode(124), "rank 5: 'a stuck phase' still running");
}
}  // namespace
