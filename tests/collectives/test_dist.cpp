// Deterministic input generators: reproducibility, rank independence, slice independence, moments,
// tails and the outlier channel layout.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "braid/dist.hpp"

namespace bd = braid::dist;

namespace {
struct Moments {
  double mean = 0, var = 0, max_abs = 0;
};
Moments moments(const std::vector<float>& v) {
  Moments m;
  for (float x : v) m.mean += x, m.max_abs = std::max(m.max_abs, double(std::fabs(x)));
  m.mean /= v.size();
  for (float x : v) m.var += (x - m.mean) * (x - m.mean);
  m.var /= v.size();
  return m;
}
}  // namespace

TEST(Dist, ParseNames) {
  for (auto d : {bd::Distribution::normal, bd::Distribution::student_t, bd::Distribution::outlier})
    EXPECT_EQ(bd::parse_distribution(bd::distribution_name(d)), d);
  EXPECT_STREQ(bd::distribution_name(bd::Distribution::student_t), "student-t");
  EXPECT_EQ(bd::parse_distribution("uniform"), std::nullopt);
}

TEST(Dist, DeterministicPerRankAndSliceable) {
  for (auto d : {bd::Distribution::normal, bd::Distribution::student_t, bd::Distribution::outlier}) {
    const auto a = bd::generate(d, 10000, 7, 0);
    EXPECT_EQ(a, bd::generate(d, 10000, 7, 0));
    EXPECT_NE(a, bd::generate(d, 10000, 7, 1));
    EXPECT_NE(a, bd::generate(d, 10000, 8, 0));
    std::vector<float> slice(1000);
    bd::fill(d, 7, 0, slice, {}, 4321);
    EXPECT_TRUE(std::equal(slice.begin(), slice.end(), a.begin() + 4321));
  }
}

TEST(Dist, NormalAndStudentMoments) {
  const auto z = moments(bd::generate(bd::Distribution::normal, 1 << 20, 1, 0));
  EXPECT_NEAR(z.mean, 0.0, 0.01);
  EXPECT_NEAR(z.var, 1.0, 0.01);
  EXPECT_LT(z.max_abs, 6.5);
  const auto t = moments(bd::generate(bd::Distribution::student_t, 1 << 20, 1, 0));
  EXPECT_NEAR(t.mean, 0.0, 0.02);
  EXPECT_NEAR(t.var, 1.0, 0.25);  // nu = 3: the variance estimate itself is heavy-tailed
  EXPECT_GT(t.max_abs, 15.0);     // heavy tail: a normal would stay below ~5.5
}

TEST(Dist, OutlierChannelsAreFixedAcrossRanks) {
  const bd::DistOptions opt;  // hidden 4096, 8 channels, gain 20..100
  const auto ch = bd::outlier_channels(5, opt);
  ASSERT_EQ(ch.size(), 8u);
  for (size_t i = 0; i < ch.size(); ++i) {
    EXPECT_LT(ch[i].channel, 4096u);
    EXPECT_GE(ch[i].gain, 20.f);
    EXPECT_LE(ch[i].gain, 100.f);
    if (i) {
      EXPECT_LT(ch[i - 1].channel, ch[i].channel);
    }
  }
  const uint64_t rows = 64, n = rows * 4096;
  for (int rank : {0, 3}) {
    const auto v = bd::generate(bd::Distribution::outlier, n, 5, rank);
    std::vector<double> ms(4096, 0.0);
    for (uint64_t i = 0; i < n; ++i) ms[i % 4096] += double(v[i]) * v[i] / rows;
    double normal_ms = 0;
    for (uint64_t c = 0; c < 4096; ++c) {
      const auto it = std::find_if(ch.begin(), ch.end(), [&](const bd::OutlierChannel& o) { return o.channel == c; });
      if (it == ch.end()) normal_ms += ms[c] / (4096 - ch.size());
      else EXPECT_NEAR(std::sqrt(ms[c]) / it->gain, 1.0, 0.35) << "channel " << c;
    }
    EXPECT_NEAR(normal_ms, 1.0, 0.02);
  }
  EXPECT_THROW(bd::generate(bd::Distribution::outlier, 10, 1, 0, bd::DistOptions{.hidden = 4, .outlier_channels = 8}),
               std::invalid_argument);
}
