// braid/dist.hpp — deterministic synthetic activations for the quantized all-reduce tests/benchmarks.
//
// Every value is a pure function of (seed, rank, index): a counter-based generator (splitmix64 of the
// triple) feeds Box-Muller, so any slice of any rank can be produced independently, on any thread, in
// any order, and the same call always gives the same floats on the same platform (libm's log/cos/sqrt
// are the only platform dependence). Values are floats; callers convert to bf16/fp16.
//
//   normal     N(0, 1) i.i.d.
//   student-t  Student's t with nu degrees of freedom (default 3), scaled by sqrt((nu-2)/nu) to unit
//              variance: heavy tails (a 1M-value vector typically has max |x| of a few tens).
//   outlier    the vector is rows of `hidden` channels (index i is channel i % hidden); a fixed set of
//              `outlier_channels` channels, chosen from the seed only (the same on every rank), carry
//              gain_c * N(0, 1) with gain_c uniform in [outlier_gain_min, outlier_gain_max]; the other
//              channels are N(0, 1). Models LLM hidden-state outlier channels.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace braid::dist {

enum class Distribution { normal, student_t, outlier };

const char* distribution_name(Distribution d);                  // "normal", "student-t", "outlier"
std::optional<Distribution> parse_distribution(std::string_view s);  // inverse; also accepts "student_t", "t"

struct DistOptions {
  uint64_t hidden = 4096;        // outlier: channels per row
  int outlier_channels = 8;      // outlier: how many channels are large (<= hidden)
  float outlier_gain_min = 20.f;
  float outlier_gain_max = 100.f;
  int student_nu = 3;            // student-t: degrees of freedom, integer >= 3
};

// The outlier channels (sorted, distinct, in [0, hidden)) and their gains, for this seed.
struct OutlierChannel {
  uint64_t channel;
  float gain;
};
std::vector<OutlierChannel> outlier_channels(uint64_t seed, const DistOptions& opt = {});

// Fills out[j] with value number (offset + j) of `rank`'s vector. Throws std::invalid_argument on bad
// options.
void fill(Distribution d, uint64_t seed, int rank, std::span<float> out, const DistOptions& opt = {},
          uint64_t offset = 0);
// n values of rank `rank`.
std::vector<float> generate(Distribution d, uint64_t n, uint64_t seed, int rank, const DistOptions& opt = {});

}  // namespace braid::dist
