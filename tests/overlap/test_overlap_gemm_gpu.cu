// One GPU: the sm_90a GEMM equals cuBLAS (both tile configs), its counters reach the tiles of each
// group, tiles run in the waves the host model predicts, the reordered layout round-trips, and the
// whole one-rank FlashOverlap all-reduce (NCCL with one rank) + RMSNorm consumer is right, also when
// replayed from a CUDA graph.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "braid/overlap.hpp"
#include "braid/overlap/verify.hpp"
#include "braid/runtime.hpp"
#include "capture.hpp"

using namespace braid::overlap;

namespace {

struct Buf {
  void* p = nullptr;
  explicit Buf(size_t bytes) { EXPECT_EQ(cudaMalloc(&p, bytes), cudaSuccess); }
  ~Buf() { cudaFree(p); }
};

bool is_hopper() {
  int dev = 0, major = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  return major == 9;
}

#define REQUIRE_HOPPER()                                                  \
  do {                                                                    \
    if (!is_hopper()) GTEST_SKIP() << "the GEMM is built for sm_90a only"; \
  } while (0)

struct Case {
  TileConfig cfg;
  int64_t m, n, k;
};

class GemmVsCublas : public ::testing::TestWithParam<Case> {};

TEST_P(GemmVsCublas, NormalLayoutMatches) {
  REQUIRE_HOPPER();
  const Case c = GetParam();
  Buf a(c.m * c.k * 2), b(c.n * c.k * 2), d(c.m * c.n * 2), ref(c.m * c.n * 2);
  fill_uniform_bf16(a.p, c.m * c.k, 11, 1.f, 0);
  fill_uniform_bf16(b.p, c.n * c.k, 12, 1.f, 0);
  cudaMemset(d.p, 0xff, c.m * c.n * 2);  // NaN pattern: unwritten elements fail
  CublasGemm cublas;
  cublas.run(a.p, b.p, ref.p, c.m, c.n, c.k, 0);
  SignalGemm gemm(c.cfg);
  EpilogueArgs e;
  e.d = d.p;
  gemm.run(a.p, b.p, c.m, c.n, c.k, e, 0);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  int64_t first = -1;
  double mx = 0;
  const size_t bad = count_mismatch(download_bf16(ref.p, c.m * c.n), download_bf16(d.p, c.m * c.n),
                                    [](int64_t i) { return i; }, gemm_atol(c.k, 1), kGemmRtol, &first, &mx);
  EXPECT_EQ(bad, 0u) << "first wrong element " << first << " (row " << first / c.n << ", col " << first % c.n
                     << "), max error " << mx;
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemmVsCublas,
                         ::testing::Values(Case{TileConfig::k128x256, 256, 256, 64},
                                           Case{TileConfig::k128x256, 1024, 768, 512},
                                           Case{TileConfig::k128x256, 4096, 2048, 1024},
                                           Case{TileConfig::k128x128, 512, 384, 320},
                                           Case{TileConfig::k128x128, 2048, 4096, 2048}));

// D with a row stride (ldd > N): the TMA-store epilogue's tensor map and the stores must honour it, equal cuBLAS and
// leave the padding between rows untouched. A D the 16-byte stores cannot address (ldd % 8 != 0, an 8-byte-aligned
// base) is refused with a UsageError, not written wrongly.
TEST(OverlapGemm, StridedOutputAndRefusedLayouts) {
  REQUIRE_HOPPER();
  const int64_t m = 256, n = 512, k = 128, ldd = n + 64;
  Buf a(m * k * 2), b(n * k * 2), ref(m * n * 2), d(m * ldd * 2);
  fill_uniform_bf16(a.p, m * k, 21, 1.f, 0);
  fill_uniform_bf16(b.p, n * k, 22, 1.f, 0);
  CublasGemm cublas;
  cublas.run(a.p, b.p, ref.p, m, n, k, 0);
  const auto r = download_bf16(ref.p, m * n);
  for (TileConfig cfg : {TileConfig::k128x256, TileConfig::k128x128}) {
    cudaMemset(d.p, 0xff, m * ldd * 2);  // NaN pattern: unwritten elements fail, padding must stay NaN
    SignalGemm gemm(cfg);
    EpilogueArgs e;
    e.d = d.p;
    e.ldd = ldd;
    gemm.run(a.p, b.p, m, n, k, e, 0);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const auto got = download_bf16(d.p, m * ldd);
    int64_t first = -1;
    EXPECT_EQ(count_mismatch(r, got, [&](int64_t i) { return (i / n) * ldd + i % n; }, gemm_atol(k, 1), kGemmRtol,
                             &first),
              0u)
        << tile_config_name(cfg) << ": first wrong " << first;
    size_t touched = 0;
    for (int64_t row = 0; row < m; ++row)
      for (int64_t col = n; col < ldd; ++col) touched += !std::isnan(bf16_to_float(got[row * ldd + col]));
    EXPECT_EQ(touched, 0u) << tile_config_name(cfg) << ": padding written";
    e.ldd = n + 4;
    EXPECT_THROW(gemm.run(a.p, b.p, m, n, k, e, 0), braid::UsageError) << "ldd % 8 != 0";
    e.ldd = ldd;
    e.d = static_cast<char*>(d.p) + 8;
    EXPECT_THROW(gemm.run(a.p, b.p, m, n, k, e, 0), braid::UsageError) << "8-byte-aligned D";
  }
}

TEST(OverlapGemm, CountersWavesAndReorderedLayout) {
  REQUIRE_HOPPER();
  const int64_t m = 2048, n = 2048, k = 256;
  for (int parts : {1, 2, 4}) {
    SignalGemm gemm(TileConfig::k128x256, 20);  // ~20 CTAs: 128 tiles in several waves
    const TileGrid g = gemm.plan(m, n, k);
    ASSERT_GE(g.num_waves(), 3) << g.ctas << " CTAs";
    std::vector<int> waves{1};
    for (int left = g.num_waves() - 1; left > 0; left -= 2) waves.push_back(left >= 2 ? 2 : 1);
    const Mapping map = make_mapping(g, waves, parts);
    std::vector<int32_t> tables;
    for (auto* v : {&map.tile_slot, &map.tile_group, &map.group_first}) tables.insert(tables.end(), v->begin(), v->end());
    Buf t(tables.size() * 4), counters(64), log(g.num_tiles() * 4), a(m * k * 2), b(n * k * 2), d(m * n * 2),
        ref(m * n * 2);
    cudaMemcpy(t.p, tables.data(), tables.size() * 4, cudaMemcpyHostToDevice);
    cudaMemset(counters.p, 0, 64);
    cudaMemset(log.p, 0xff, g.num_tiles() * 4);
    fill_uniform_bf16(a.p, m * k, 21, 1.f, 0);
    fill_uniform_bf16(b.p, n * k, 22, 1.f, 0);
    CublasGemm cublas;
    cublas.run(a.p, b.p, ref.p, m, n, k, 0);
    EpilogueArgs e;
    e.d = d.p;
    e.tile_slot = static_cast<int32_t*>(t.p);
    e.tile_group = e.tile_slot + g.num_tiles();
    e.group_first = e.tile_group + g.num_tiles();
    e.counters = static_cast<uint32_t*>(counters.p);
    e.parts = parts;
    e.wave_log = static_cast<int32_t*>(log.p);
    gemm.run(a.p, b.p, m, n, k, e, 0);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<uint32_t> cnt(map.groups());
    cudaMemcpy(cnt.data(), counters.p, cnt.size() * 4, cudaMemcpyDeviceToHost);
    for (int grp = 0; grp < map.groups(); ++grp) EXPECT_EQ(cnt[grp], uint32_t(map.tiles_in_group(grp))) << "group " << grp;
    std::vector<int32_t> wl(g.num_tiles());
    cudaMemcpy(wl.data(), log.p, wl.size() * 4, cudaMemcpyDeviceToHost);
    int wrong_wave = 0;
    for (int tile = 0; tile < g.num_tiles(); ++tile)
      if (wl[tile] != map.tile_slot[tile] / g.ctas) ++wrong_wave;
    EXPECT_EQ(wrong_wave, 0) << "tiles that ran in another wave than execution_order() predicts";
    const size_t bad = count_mismatch(download_bf16(ref.p, m * n), download_bf16(d.p, m * n),
                                      [&](int64_t i) { return reordered_index(map, i / n, i % n); },
                                      gemm_atol(k, 1), kGemmRtol);
    EXPECT_EQ(bad, 0u) << "parts " << parts;
  }
}

TEST(OverlapGemm, OneRankAllReduceAndRmsNormAlsoInAGraph) {
  REQUIRE_HOPPER();
  braid::Team team(MPI_COMM_SELF);
  const int64_t m = 1024, n = 1024, k = 512;
  for (bool wait_value : {true, false}) {
    OverlapOptions o;
    o.coll = Collective::kAllReduce;
    o.m = m, o.n = n, o.k = k;
    o.tile = TileConfig::k128x128;
    o.reserve_sms = 100;  // few CTAs: several waves
    o.use_stream_wait_value = wait_value;
    GemmOverlap op(team, o);
    ASSERT_GT(op.mapping().groups(), 1);
    Buf a(m * k * 2), b(n * k * 2), ref(m * n * 2), gamma(n * 2), y(m * n * 2);
    fill_uniform_bf16(a.p, m * k, 31, 1.f, team.stream());
    fill_uniform_bf16(b.p, n * k, 32, 1.f, team.stream());
    fill_uniform_bf16(gamma.p, n, 33, 1.f, team.stream());
    CublasGemm cublas;
    cublas.run(a.p, b.p, ref.p, m, n, k, team.stream());
    cudaGraphExec_t exec = nullptr;
    cudaGraph_t graph = braid::test::capture_graph(team.stream(), [&] {
      op.run(a.p, b.p, nullptr, team.stream());
      op.rmsnorm(op.reordered(), gamma.p, y.p, 1e-6f, team.stream());
    });
    ASSERT_NE(graph, nullptr) << "stream capture failed";
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    for (int rep = 0; rep < 3; ++rep) {
      cudaMemset(y.p, 0, m * n * 2);
      cudaDeviceSynchronize();  // the legacy-stream memset finishes before team.stream() writes y
      if (rep == 0) {
        op.run(a.p, b.p, nullptr, team.stream());  // eager
        op.rmsnorm(op.reordered(), gamma.p, y.p, 1e-6f, team.stream());
      } else {
        ASSERT_EQ(cudaGraphLaunch(exec, team.stream()), cudaSuccess);
      }
      team.synchronize("one-rank flashoverlap");
      op.check_error();
      const auto r = download_bf16(ref.p, m * n);
      EXPECT_EQ(count_mismatch(r, download_bf16(op.reordered(), m * n),
                               [&](int64_t i) { return reordered_index(op.mapping(), i / n, i % n); }, gemm_atol(k, 1),
                               kGemmRtol),
                0u)
          << "rep " << rep << " wait_value " << wait_value;
      const auto yh = download_bf16(y.p, m * n), gh = download_bf16(gamma.p, n);
      size_t bad = 0;
      for (int64_t row = 0; row < m; ++row) {
        double ss = 0;
        for (int64_t c = 0; c < n; ++c) ss += std::pow(bf16_to_float(r[row * n + c]), 2);
        const double inv = 1.0 / std::sqrt(ss / n + 1e-6);
        for (int64_t c = 0; c < n; ++c) {
          const double want = bf16_to_float(r[row * n + c]) * inv * bf16_to_float(gh[c]);
          if (!(std::fabs(bf16_to_float(yh[row * n + c]) - want) <= 0.05 + 0.02 * std::fabs(want))) ++bad;
        }
      }
      EXPECT_EQ(bad, 0u) << "rmsnorm, rep " << rep;
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
}

}  // namespace
