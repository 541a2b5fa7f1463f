// A gtest listener that gives each test its own watchdog budget (BRAID_TEST_DEADLINE_S, default 240 s:
// under ctest's timeout), so a hang no bounded wait catches ends the binary naming the test instead of
// a silent kill by ctest. Used by gpu_main.cpp and mpi_main.cpp.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "braid/watchdog.hpp"

namespace braid::test_support {

class WatchdogArmer : public ::testing::EmptyTestEventListener {
 public:
  WatchdogArmer(Watchdog& wd, double seconds) : wd_(wd), s_(seconds) {}
  void OnTestStart(const ::testing::TestInfo& t) override {
    wd_.rearm(s_, std::string(t.test_suite_name()) + "." + t.name());
  }
  void OnTestEnd(const ::testing::TestInfo&) override { wd_.disarm(); }

 private:
  Watchdog& wd_;
  double s_;
};

// Appends the listener for `wd` (which must outlive RUN_ALL_TESTS).
inline void arm_per_test(Watchdog& wd) {
  ::testing::UnitTest::GetInstance()->listeners().Append(
      new WatchdogArmer(wd, Watchdog::seconds_from_env("BRAID_TEST_DEADLINE_S", 240)));
}

}  // namespace braid::test_support
