// bench::device_hash52 on the GPU: the documented formula (a host reimplementation), deterministic, sensitive to
// every bit and to where a word sits, tails and unaligned starts handled.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "braid/bench.hpp"
#include "braid/hash.hpp"

namespace {

using braid::splitmix64;

// The header's formula over host copies of the buffers.
double host_hash52(const std::vector<std::vector<uint8_t>>& bufs) {
  uint64_t h = 0;
  for (size_t k = 0; k < bufs.size(); ++k) {
    const auto& b = bufs[k];
    if (b.empty()) continue;
    const uint64_t tag = splitmix64(0x6272616964ull + k) ^ (uint64_t(b.size()) << 20);
    for (size_t i = 0; i < (b.size() + 3) / 4; ++i) {
      uint32_t w = 0;
      for (size_t j = 0; j < 4 && 4 * i + j < b.size(); ++j) w |= uint32_t(b[4 * i + j]) << (8 * j);
      h += splitmix64(splitmix64(tag ^ uint64_t(i)) ^ w);
    }
  }
  h &= (1ull << 52) - 1;
  return double(h == 0 ? 1 : h);
}

struct Dev {
  uint8_t* p = nullptr;
  explicit Dev(const std::vector<uint8_t>& h) {
    EXPECT_EQ(cudaMalloc(&p, h.size() + 16), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p, h.data(), h.size(), cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~Dev() { cudaFree(p); }
};

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::vector<uint8_t> v(n);
  for (auto& x : v) x = uint8_t(g());
  return v;
}

TEST(DeviceHash, MatchesTheFormulaAndSeesEveryBit) {
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  for (size_t n : {size_t(1), size_t(3), size_t(4), size_t(1021), size_t(1) << 20, (size_t(1) << 22) + 6}) {
    std::vector<uint8_t> h = random_bytes(n, uint32_t(n));
    Dev d(h);
    const double ref = host_hash52({h});
    EXPECT_EQ(braid::bench::device_hash52(d.p, n, s), ref) << n << " bytes";
    EXPECT_EQ(braid::bench::device_hash52(d.p, n, s), ref) << n << " bytes, again";
    for (size_t at : {size_t(0), n / 2, n - 1}) {  // one bit flipped anywhere changes it
      std::vector<uint8_t> f = h;
      f[at] ^= 0x10;
      Dev df(f);
      EXPECT_NE(braid::bench::device_hash52(df.p, n, s), ref) << n << " bytes, bit flipped at " << at;
    }
    if (n >= 8) {  // two different words swapped change it
      std::vector<uint8_t> w = h;
      w[0] ^= 0xff;  // make sure words 0 and 1 differ
      std::vector<uint8_t> sw = w;
      std::swap_ranges(sw.begin(), sw.begin() + 4, sw.begin() + 4);
      Dev dw(w), ds(sw);
      EXPECT_NE(braid::bench::device_hash52(dw.p, n, s), braid::bench::device_hash52(ds.p, n, s)) << n;
    }
  }
  // An unaligned start: the same bytes as an aligned copy, and two buffers as the formula chains them.
  std::vector<uint8_t> h = random_bytes(4099, 7);
  Dev d(h);
  std::vector<uint8_t> tail(h.begin() + 1, h.end());
  EXPECT_EQ(braid::bench::device_hash52(d.p + 1, tail.size(), s), host_hash52({tail}));
  EXPECT_EQ(braid::bench::device_hash52({{d.p, 100}, {d.p + 1, tail.size()}}, s),
            host_hash52({std::vector<uint8_t>(h.begin(), h.begin() + 100), tail}));
  cudaStreamDestroy(s);
}

}  // namespace
