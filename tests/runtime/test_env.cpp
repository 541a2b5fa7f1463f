// braid::env: a set knob parses whole and in range or throws a UsageError naming it; unset or empty keeps the
// caller's default.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "braid/env.hpp"
#include "braid/errors.hpp"

namespace {

constexpr const char* kName = "BRAID_TEST_ENV_KNOB";

struct Env : ::testing::Test {
  void set(const char* v) { ASSERT_EQ(setenv(kName, v, 1), 0); }
  void TearDown() override { unsetenv(kName); }
};

TEST_F(Env, UnsetOrEmptyIsNullopt) {
  unsetenv(kName);
  EXPECT_FALSE(braid::env::integer(kName, 0, 10).has_value());
  EXPECT_FALSE(braid::env::flag(kName).has_value());
  set("");
  EXPECT_FALSE(braid::env::integer(kName, 0, 10).has_value());
  set("  ");
  EXPECT_FALSE(braid::env::flag(kName).has_value());
}

TEST_F(Env, ParsesWholeIntegersInRange) {
  set("7");
  EXPECT_EQ(braid::env::integer(kName, 0, 10), 7);
  set(" +10 ");
  EXPECT_EQ(braid::env::integer(kName, 0, 10), 10);
  set("-3");
  EXPECT_EQ(braid::env::integer(kName, -5, 5), -3);
  set("8589934592");  // 2^33: 64-bit values (byte counts)
  EXPECT_EQ(braid::env::integer(kName, 1, int64_t(1) << 40), int64_t(1) << 33);
}

TEST_F(Env, RejectsWhatAtoiWouldTurnIntoANumber) {
  for (const char* bad : {"abc", "12abc", "1.5", "0x10", "--1", "+", "99999999999999999999999"}) {
    set(bad);
    try {
      (void)braid::env::integer(kName, 0, 1000);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const braid::UsageError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(kName), std::string::npos) << what;
      EXPECT_NE(what.find(bad), std::string::npos) << what;
    }
  }
}

TEST_F(Env, RejectsOutOfRange) {
  set("11");
  EXPECT_THROW((void)braid::env::integer(kName, 0, 10), braid::UsageError);
  set("-1");
  EXPECT_THROW((void)braid::env::integer(kName, 0, 10), braid::UsageError);
}

TEST_F(Env, FlagIsZeroOrOne) {
  set("1");
  EXPECT_EQ(braid::env::flag(kName), true);
  set("0");
  EXPECT_EQ(braid::env::flag(kName), false);
  for (const char* bad : {"2", "yes", "true", "on"}) {
    set(bad);
    EXPECT_THROW((void)braid::env::flag(kName), braid::UsageError) << bad;
  }
}

TEST_F(Env, ChoiceIsOneOfTheWords) {
  unsetenv(kName);
  EXPECT_FALSE(braid::env::choice(kName, {"a", "bb"}).has_value());
  set("bb");
  EXPECT_EQ(braid::env::choice(kName, {"a", "bb"}), "bb");
  set("b");
  try {
    (void)braid::env::choice(kName, {"a", "bb"});
    ADD_FAILURE() << "accepted 'b'";
  } catch (const braid::UsageError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("a, bb"), std::string::npos) << what;
  }
}

TEST_F(Env, NumberParsesWholeAndChecksItsRange) {
  auto in_unit = [](double v) { return v > 0 && v <= 1; };
  unsetenv(kName);
  EXPECT_DOUBLE_EQ(braid::env::number(kName, 0.97, in_unit, "in (0, 1]"), 0.97);
  set("0.5");
  EXPECT_DOUBLE_EQ(braid::env::number(kName, 0.97, in_unit, "in (0, 1]"), 0.5);
  for (const char* bad : {"1.5", "0", "0.5x", "x"}) {
    set(bad);
    EXPECT_THROW((void)braid::env::number(kName, 0.97, in_unit, "in (0, 1]"), braid::UsageError) << bad;
  }
}

}  // namespace
