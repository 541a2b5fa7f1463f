// Deterministic synthetic activations; see braid/dist.hpp.
#include "braid/dist.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace braid::dist {

namespace {

constexpr uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Independent 64-bit word number `k` of value `i` of `rank` under `seed`.
inline uint64_t word(uint64_t seed, uint64_t rank, uint64_t i, uint64_t k) {
  uint64_t h = splitmix64(seed ^ 0x5eed5eed5eed5eedull);
  h = splitmix64(h ^ (rank * 0xd1b54a32d192ed03ull));
  h = splitmix64(h ^ i);
  return splitmix64(h ^ (k * 0xa0761d6478bd642full));
}

// Uniform in (0, 1]: 53 random bits, never 0 (log-safe).
inline double uniform_pos(uint64_t w) { return static_cast<double>((w >> 11) + 1) * 0x1p-53; }

// Standard normal number `k` (Box-Muller, cosine branch) of value i.
inline double normal(uint64_t seed, uint64_t rank, uint64_t i, uint64_t k) {
  const double u1 = uniform_pos(word(seed, rank, i, 2 * k));
  const double u2 = uniform_pos(word(seed, rank, i, 2 * k + 1));
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

void check(const DistOptions& o) {
  if (o.hidden == 0) throw std::invalid_argument("braid::dist: hidden must be > 0");
  if (o.outlier_channels < 0 || static_cast<uint64_t>(o.outlier_channels) > o.hidden)
    throw std::invalid_argument("braid::dist: outlier_channels must be in [0, hidden]");
  if (!(o.outlier_gain_min > 0.f) || !(o.outlier_gain_max >= o.outlier_gain_min))
    throw std::invalid_argument("braid::dist: need 0 < outlier_gain_min <= outlier_gain_max");
  if (o.student_nu < 3) throw std::invalid_argument("braid::dist: student_nu must be >= 3 (finite variance)");
}

}  // namespace

const char* distribution_name(Distribution d) {
  switch (d) {
    case Distribution::normal: return "normal";
    case Distribution::student_t: return "student-t";
    case Distribution::outlier: return "outlier";
  }
  return "?";
}

std::optional<Distribution> parse_distribution(std::string_view s) {
  if (s == "normal") return Distribution::normal;
  if (s == "student-t" || s == "student_t" || s == "t") return Distribution::student_t;
  if (s == "outlier") return Distribution::outlier;
  return std::nullopt;
}

std::vector<OutlierChannel> outlier_channels(uint64_t seed, const DistOptions& opt) {
  check(opt);
  std::vector<OutlierChannel> ch;
  // Rank-independent stream: rank word ~0.
  for (uint64_t k = 0; static_cast<int>(ch.size()) < opt.outlier_channels; ++k) {
    const uint64_t c = word(seed, ~0ull, k, 0) % opt.hidden;
    if (std::any_of(ch.begin(), ch.end(), [&](const OutlierChannel& o) { return o.channel == c; })) continue;
    const double u = static_cast<double>(word(seed, ~0ull, k, 1) >> 11) * 0x1p-53;  // [0, 1)
    ch.push_back({c, static_cast<float>(opt.outlier_gain_min + u * (opt.outlier_gain_max - opt.outlier_gain_min))});
  }
  std::sort(ch.begin(), ch.end(), [](const OutlierChannel& a, const OutlierChannel& b) { return a.channel < b.channel; });
  return ch;
}

void fill(Distribution d, uint64_t seed, int rank, std::span<float> out, const DistOptions& opt, uint64_t offset) {
  check(opt);
  const uint64_t r = static_cast<uint64_t>(static_cast<int64_t>(rank));
  switch (d) {
    case Distribution::normal:
      for (size_t j = 0; j < out.size(); ++j) out[j] = static_cast<float>(normal(seed, r, offset + j, 0));
      break;
    case Distribution::student_t: {
      const int nu = opt.student_nu;
      const double unit = std::sqrt(static_cast<double>(nu - 2) / nu);
      for (size_t j = 0; j < out.size(); ++j) {
        const uint64_t i = offset + j;
        double chi2 = 0;
        for (int k = 1; k <= nu; ++k) {
          const double z = normal(seed, r, i, static_cast<uint64_t>(k));
          chi2 += z * z;
        }
        out[j] = static_cast<float>(unit * normal(seed, r, i, 0) / std::sqrt(chi2 / nu));
      }
      break;
    }
    case Distribution::outlier: {
      const std::vector<OutlierChannel> ch = outlier_channels(seed, opt);
      std::vector<float> gain(opt.hidden, 1.0f);
      for (const auto& c : ch) gain[c.channel] = c.gain;
      for (size_t j = 0; j < out.size(); ++j) {
        const uint64_t i = offset + j;
        out[j] = static_cast<float>(gain[i % opt.hidden] * normal(seed, r, i, 0));
      }
      break;
    }
  }
}

std::vector<float> generate(Distribution d, uint64_t n, uint64_t seed, int rank, const DistOptions& opt) {
  std::vector<float> v(n);
  fill(d, seed, rank, v, opt);
  return v;
}

}  // namespace braid::dist
