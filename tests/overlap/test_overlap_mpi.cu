// Two ranks (one GPU each): FlashOverlap GEMM+RS and GEMM+AR equal cuBLAS + NCCL on every rank, with
// both waits (cuStreamWaitValue32 and the spin kernel), eagerly and replayed from a CUDA graph; the
// RMSNorm consumer and the row un-permutation after an all-gather give the original row order; the
// decomposition baseline is right too; GEMM + all-to-all delivers every routed row.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <nccl.h>

#include "braid/errors.hpp"
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

// Random A (M, K) and B (N, K) per rank (seeds base + rank, base + 100 + rank), and the reference: cuBLAS + NCCL
// all-reduce of A·Bᵀ over ranks, downloaded (M, N).
std::vector<uint16_t> random_inputs_and_reference(braid::Team& team, void* a, void* b, void* ref, int64_t m, int64_t n,
                                                  int64_t k, uint64_t base) {
  cudaStream_t s = team.stream();
  fill_uniform_bf16(a, m * k, base + team.rank(), 1.f, s);
  fill_uniform_bf16(b, n * k, base + 100 + team.rank(), 1.f, s);
  CublasGemm cublas;
  run_sequential(team, cublas, Collective::kAllReduce, a, b, ref, nullptr, m, n, k, s);
  team.synchronize("reference");
  return download_bf16(ref, m * n);
}

// `reps` runs of `enqueue` on s: eager before rep `graph_from`, then replays of one CUDA graph captured from it;
// `before(rep)` is enqueued ahead of each run and `check(rep)` called after each (synchronized) run.
void eager_then_graph(braid::Team& team, int reps, int graph_from, const std::function<void()>& enqueue,
                      const std::function<void(int)>& before, const std::function<void(int)>& check) {
  cudaStream_t s = team.stream();
  cudaGraphExec_t exec = nullptr;
  for (int rep = 0; rep < reps; ++rep) {
    before(rep);
    if (rep == graph_from) {
      cudaGraph_t graph = braid::test::capture_graph(s, enqueue);
      ASSERT_NE(graph, nullptr) << "stream capture failed";
      ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
      cudaGraphDestroy(graph);
    }
    if (exec) ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
    else enqueue();
    team.synchronize("eager_then_graph");
    check(rep);
  }
  if (exec) cudaGraphExecDestroy(exec);
}

// A shared-GPU team (BRAID_SHARED_GPU=1, ctest test_overlap_mpi_shared*: ranks time-slicing one GPU) has no NCCL:
// the tests of NCCL paths skip there; the references (run_sequential) sum on the host.
#define SKIP_WITHOUT_NCCL(team)                                                                   \
  if ((team).shared_gpu()) GTEST_SKIP() << "needs NCCL, which a shared-GPU team has not"

bool all_hopper(braid::Team& team) {
  int dev = 0, major = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  return team.allreduce_min(major == 9 ? 1.0 : 0.0) > 0;
}

struct Case {
  Collective coll;
  int64_t m, n, k;
  bool wait_value;
  bool graph;
  bool sequential = false;  // the fallback path (one group, GEMM on every SM, then one collective)
  Transport transport = Transport::kNcclKernels;
  // >= 0: GemmOverlap::tune(..., max_ratio = tune_ratio) before the checks. 0 forces the fallback (no
  // overlap is 0x the fallback's time), 1e9 keeps the overlap: both outcomes of a tuned op are checked.
  double tune_ratio = -1;
  int reserve_sms = 90;  // ~40 CTAs: several waves at these sizes; 0: the GEMM on every SM
  bool pull_last = false;  // OverlapOptions::peer_pull_last
  bool stores = false;     // OverlapOptions::peer_stores
  bool bulk = true;        // OverlapOptions::peer_stores_bulk (taken at 2 ranks)
};

class OverlapMpi : public ::testing::TestWithParam<Case> {};

TEST_P(OverlapMpi, MatchesCublasPlusNccl) {
  braid::Team team(MPI_COMM_WORLD);
  if (!all_hopper(team)) GTEST_SKIP() << "the GEMM is built for sm_90a only";
  const Case c = GetParam();
  if (team.shared_gpu() && (c.transport != Transport::kPeerCopyEngine || c.tune_ratio >= 0 || c.sequential))
    GTEST_SKIP() << "NCCL transports and the sequential fallback need NCCL, which a shared-GPU team has not";
  const int W = team.size(), rank = team.rank();
  const int64_t m = c.m, n = c.n, k = c.k, mn = m * n;
  cudaStream_t s = team.stream();
  Buf a(m * k * 2), b(n * k * 2), ref(mn * 2), out(mn * 2 / W), gamma(n * 2), y(mn * 2), yall(mn * 2), yorig(mn * 2);
  fill_uniform_bf16(a.p, m * k, 100 + rank, 1.f, s);
  fill_uniform_bf16(b.p, n * k, 200 + rank, 1.f, s);
  fill_uniform_bf16(gamma.p, n, 300, 1.f, s);
  CublasGemm cublas;
  run_sequential(team, cublas, Collective::kAllReduce, a.p, b.p, ref.p, nullptr, m, n, k, s);
  team.synchronize("reference");
  const auto r = download_bf16(ref.p, mn);

  OverlapOptions o;
  o.coll = c.coll;
  o.m = m, o.n = n, o.k = k;
  o.reserve_sms = c.reserve_sms;
  o.use_stream_wait_value = c.wait_value;
  o.sequential = c.sequential;
  o.transport = c.transport;
  o.peer_pull_last = c.pull_last;
  o.peer_stores = c.stores;
  o.peer_stores_bulk = c.bulk;
  if (c.transport == Transport::kPeerCopyEngine) {  // braid's own copy-engine pushes: peer access only
    if (!team.peer_ok()) GTEST_SKIP() << "no peer access: " << team.peer_status();
  } else if (c.transport != Transport::kNcclKernels) {  // NCCL >= 2.28, one node with peer access
    try {
      team.nccl_zero_cta();
    } catch (const braid::UnavailableError& e) {
      GTEST_SKIP() << e.what();
    }
  }
  GemmOverlap op(team, o);
  if (c.stores)
    EXPECT_EQ(op.stores_bulk(), c.bulk && W <= 2);  // the row stage holds half a tile: the remote parts at 1 and 2 ranks
  if (c.sequential) EXPECT_EQ(op.mapping().groups(), 1);
  else EXPECT_GT(op.mapping().groups(), 1);
  const bool rs = c.coll == Collective::kReduceScatter;
  void* outp = op.output() ? op.output() : out.p;  // the symmetric transport's reduce-scatter window
  if (c.tune_ratio >= 0) {
    const bool fell_back = op.tune(a.p, b.p, outp, s, 2, c.tune_ratio);
    EXPECT_EQ(fell_back, c.tune_ratio == 0);
    EXPECT_EQ(op.sequential(), fell_back);
    EXPECT_GT(op.tuned_overlap_us(), 0);
    EXPECT_GT(op.tuned_sequential_us(), 0);
    EXPECT_EQ(op.mapping().groups() == 1, fell_back);
  }
  const void* x = rs ? outp : op.reordered();
  cudaGraphExec_t exec = nullptr;
  if (c.graph) {
    cudaGraph_t graph = braid::test::capture_graph(s, [&] {
      op.run(a.p, b.p, outp, s);
      op.rmsnorm(x, gamma.p, y.p, 1e-6f, s);
    });
    ASSERT_NE(graph, nullptr) << "stream capture failed";
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    cudaGraphDestroy(graph);
  }
  const Mapping& map = op.mapping();
  const double atol = gemm_atol(k, W);
  for (int rep = 0; rep < (c.graph ? 3 : 2); ++rep) {
    if (exec) ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
    else {
      op.run(a.p, b.p, outp, s);
      op.rmsnorm(x, gamma.p, y.p, 1e-6f, s);
    }
    team.synchronize("flashoverlap");
    op.check_error();
    const int64_t rows = rs ? m / W : m;
    std::vector<uint16_t> ref_rows(size_t(rows) * n);
    for (int64_t j = 0; j < rows; ++j) {
      const int64_t orow = rs ? rs_original_row(map, rank, j) : j;
      std::copy_n(r.begin() + orow * n, n, ref_rows.begin() + j * n);
    }
    size_t bad;
    if (rs) {
      bad = count_mismatch(ref_rows, download_bf16(outp, mn / W),
                           [&](int64_t i) { return scattered_index(map, rs_original_row(map, rank, i / n), i % n); },
                           atol, kGemmRtol);
    } else {
      bad = count_mismatch(ref_rows, download_bf16(op.reordered(), mn),
                           [&](int64_t i) { return reordered_index(map, i / n, i % n); }, atol, kGemmRtol);
    }
    EXPECT_EQ(bad, 0u) << "rank " << rank << " rep " << rep;
    // RMSNorm rows in the documented order.
    const auto yh = download_bf16(y.p, size_t(rows) * n), gh = download_bf16(gamma.p, n);
    size_t bad_norm = 0;
    for (int64_t j = 0; j < rows; ++j) {
      double ss = 0;
      for (int64_t col = 0; col < n; ++col) ss += std::pow(bf16_to_float(ref_rows[j * n + col]), 2);
      const double inv = 1.0 / std::sqrt(ss / n + 1e-6);
      for (int64_t col = 0; col < n; ++col) {
        const double want = bf16_to_float(ref_rows[j * n + col]) * inv * bf16_to_float(gh[col]);
        if (!(std::fabs(bf16_to_float(yh[j * n + col]) - want) <= 0.05 + 0.02 * std::fabs(want))) ++bad_norm;
      }
    }
    EXPECT_EQ(bad_norm, 0u) << "rank " << rank << " rep " << rep;
  }
  if (exec) cudaGraphExecDestroy(exec);
  if (rs) {
    // All-gather of y then un-permutation: every rank holds the normalized rows in original order.
    allgather_bf16(team, y.p, yall.p, mn / W, s);  // NCCL, or MPI on the host (verify.hpp)
    un_permute_rows(map, yall.p, yorig.p, m, n, W, s);
    team.synchronize("all-gather");
    const auto yo = download_bf16(yorig.p, mn);
    const auto yl = download_bf16(y.p, mn / W);
    // Rank's own rows must sit at their original positions.
    size_t bad = 0;
    for (int64_t j = 0; j < m / W; ++j) {
      const int64_t orow = rs_original_row(map, rank, j);
      for (int64_t col = 0; col < n; ++col) bad += yo[orow * n + col] != yl[j * n + col];
    }
    EXPECT_EQ(bad, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, OverlapMpi,
    ::testing::Values(Case{Collective::kReduceScatter, 2048, 2048, 512, true, false},
                      Case{Collective::kReduceScatter, 2048, 2048, 512, false, false},
                      Case{Collective::kReduceScatter, 4096, 4096, 1024, true, true},
                      Case{Collective::kAllReduce, 2048, 2048, 512, true, false},
                      Case{Collective::kAllReduce, 2048, 2048, 512, false, true},
                      Case{Collective::kAllReduce, 4096, 1024, 1024, true, true},
                      Case{Collective::kReduceScatter, 4096, 4096, 1024, true, true, true},
                      Case{Collective::kAllReduce, 2048, 2048, 512, true, false, true},
                      // over NCCL's copy engines (zero-CTA communicator, symmetric windows), eager and captured
                      Case{Collective::kReduceScatter, 2048, 2048, 512, true, false, false, Transport::kNcclCopyEngine},
                      Case{Collective::kReduceScatter, 4096, 4096, 1024, false, true, false, Transport::kNcclCopyEngine},
                      Case{Collective::kAllReduce, 2048, 2048, 512, true, false, false, Transport::kNcclCopyEngine},
                      Case{Collective::kAllReduce, 4096, 1024, 1024, true, true, false, Transport::kNcclCopyEngine},
                      // ... with the GEMM on every SM: each group's sum waits for SMs, the next all-to-alls do not
                      Case{Collective::kReduceScatter, 4096, 4096, 1024, true, false, false, Transport::kNcclCopyEngine, -1, 0},
                      Case{Collective::kReduceScatter, 4096, 4096, 1024, true, true, false, Transport::kNcclCopyEngine, -1, 0},
                      // over NCCL's symmetric-memory kernels (symmetric windows on the team's communicator)
                      Case{Collective::kReduceScatter, 2048, 2048, 512, true, false, false, Transport::kNcclSymmetric},
                      Case{Collective::kReduceScatter, 4096, 4096, 1024, false, true, false, Transport::kNcclSymmetric},
                      Case{Collective::kAllReduce, 2048, 2048, 512, true, true, false, Transport::kNcclSymmetric},
                      // tuned (GemmOverlap::tune): forced to the fallback, and kept overlapped, then run eager and
                      // captured; the fallback reached after construction writes the row-major layout
                      Case{Collective::kReduceScatter, 4096, 4096, 1024, true, true, false, Transport::kNcclKernels, 0},
                      Case{Collective::kReduceScatter, 4096, 4096, 1024, true, false, false, Transport::kNcclKernels, 1e9},
                      Case{Collective::kAllReduce, 2048, 2048, 512, true, false, false, Transport::kNcclKernels, 0},
                      Case{Collective::kReduceScatter, 4096, 4096, 1024, true, true, false, Transport::kNcclSymmetric, 0},
                      Case{Collective::kReduceScatter, 2048, 2048, 512, true, false, false, Transport::kNcclSymmetric, 1e9},
                      // over braid's own copy-engine pushes (no NCCL): eager, captured (replays reset the flags
                      // and meet at the start barrier), the GEMM on every SM, tuned both ways
                      Case{Collective::kReduceScatter, 2048, 2048, 512, true, false, false, Transport::kPeerCopyEngine},
                      Case{Collective::kReduceScatter, 4096, 4096, 1024, true, true, false, Transport::kPeerCopyEngine},
                      Case{Collective::kReduceScatter, 4096, 4096, 1024, true, false, false, Transport::kPeerCopyEngine, -1, 0},
                      Case{Collective::kReduceScatter, 4096, 4096, 1024, true, true, false, Transport::kPeerCopyEngine, -1, 0},
                      Case{Collective::kReduceScatter, 4096, 4096, 1024, true, true, false, Transport::kPeerCopyEngine, 0},
                      Case{Collective::kReduceScatter, 2048, 2048, 512, true, false, false, Transport::kPeerCopyEngine, 1e9},
                      // ... the last group pulled from the peers' d_ by the last sum: eager, captured (three
                      // replays: a peer must not read d_ the next GEMM rewrites), the GEMM on every SM, tuned
                      Case{Collective::kReduceScatter, 4096, 4096, 1024, true, false, false, Transport::kPeerCopyEngine, -1, 90, true},
                      Case{Collective::kReduceScatter, 4096, 4096, 1024, true, true, false, Transport::kPeerCopyEngine, -1, 90, true},
                      Case{Collective::kReduceScatter, 4096, 4096, 1024, true, true, false, Transport::kPeerCopyEngine, -1, 0, true},
                      Case{Collective::kReduceScatter, 2048, 2048, 512, true, false, false, Transport::kPeerCopyEngine, 1e9, 90, true},
                      // ... every part stored by the epilogue into its owner's receive buffer (no copy engine):
                      // eager, captured (replays: the flags are counted per tile and reset each run), the GEMM on
                      // every SM (the sums after it), tuned
                      Case{Collective::kReduceScatter, 4096, 4096, 1024, true, false, false, Transport::kPeerCopyEngine, -1, 90, false, true},
                      Case{Collective::kReduceScatter, 4096, 4096, 1024, true, true, false, Transport::kPeerCopyEngine, -1, 90, false, true},
                      Case{Collective::kReduceScatter, 4096, 4096, 1024, true, true, false, Transport::kPeerCopyEngine, -1, 0, false, true},
                      Case{Collective::kReduceScatter, 2048, 2048, 512, true, false, false, Transport::kPeerCopyEngine, 1e9, 90, false, true},
                      // ... by the consumer threads' own stores (no bulk copies), eager and captured
                      Case{Collective::kReduceScatter, 4096, 4096, 1024, true, false, false, Transport::kPeerCopyEngine, -1, 90, false, true, false},
                      Case{Collective::kReduceScatter, 4096, 4096, 1024, true, true, false, Transport::kPeerCopyEngine, -1, 0, false, true, false},
                      // ... its all-reduce (the reduced chunks pushed back into the peers' d_): eager, captured,
                      // the GEMM on every SM, tuned into the fallback
                      Case{Collective::kAllReduce, 2048, 2048, 512, true, false, false, Transport::kPeerCopyEngine},
                      Case{Collective::kAllReduce, 4096, 1024, 1024, true, true, false, Transport::kPeerCopyEngine},
                      Case{Collective::kAllReduce, 4096, 4096, 1024, true, true, false, Transport::kPeerCopyEngine, -1, 0},
                      Case{Collective::kAllReduce, 2048, 2048, 512, true, false, false, Transport::kPeerCopyEngine, 0}));

TEST(OverlapMpiBaselines, DecompositionMatchesSequential) {
  braid::Team team(MPI_COMM_WORLD);
  SKIP_WITHOUT_NCCL(team);
  const int W = team.size(), rank = team.rank();
  const int64_t m = 2048, n = 1024, k = 512, mn = m * n;
  cudaStream_t s = team.stream();
  Buf a(m * k * 2), b(n * k * 2), ref(mn * 2), d(mn * 2), out(mn * 2 / W);
  const auto r = random_inputs_and_reference(team, a.p, b.p, ref.p, m, n, k, 400);
  CublasGemm cublas;
  Decomposition dec(team, 4);
  dec.run(cublas, Collective::kAllReduce, a.p, b.p, d.p, out.p, m, n, k, s);
  team.synchronize("decomposition AR");
  EXPECT_EQ(count_mismatch(r, download_bf16(d.p, mn), [](int64_t i) { return i; }, gemm_atol(k, W), kGemmRtol), 0u);
  dec.run(cublas, Collective::kReduceScatter, a.p, b.p, d.p, out.p, m, n, k, s);
  team.synchronize("decomposition RS");
  const int64_t R = m / 4, Rw = R / W;
  std::vector<uint16_t> want(size_t(mn / W));
  for (int64_t j = 0; j < m / W; ++j)
    std::copy_n(r.begin() + ((j / Rw) * R + int64_t(rank) * Rw + j % Rw) * n, n, want.begin() + j * n);
  EXPECT_EQ(count_mismatch(want, download_bf16(out.p, mn / W), [](int64_t i) { return i; }, gemm_atol(k, W), kGemmRtol),
            0u);
}

// OwnerOrderedRs: rank r's output is rows [r * M/W, ...) of the sum (NCCL's reduce-scatter layout), with cuBLAS's and
// braid's GEMM per owner block, each peer block in one launch and in two chunks, eager (twice: the flags and the start
// barrier order the second run after the first) and replayed from a CUDA graph (three replays). With all_reduce every
// rank ends with all M rows of the sum, in result() and copied into another buffer.
TEST(OverlapMpiOwnerOrdered, MatchesCublasPlusNccl) {
  braid::Team team(MPI_COMM_WORLD);
  if (!all_hopper(team)) GTEST_SKIP() << "the GEMM is built for sm_90a only";
  if (!team.peer_ok()) GTEST_SKIP() << "no peer access: " << team.peer_status();
  const int W = team.size(), rank = team.rank();
  const int64_t m = 512 * W, n = 2048, k = 1024, mn = m * n;
  cudaStream_t s = team.stream();
  Buf a(m * k * 2), b(n * k * 2), ref(mn * 2), out(mn * 2);
  const auto r = random_inputs_and_reference(team, a.p, b.p, ref.p, m, n, k, 600);
  const std::vector<uint16_t> want(r.begin() + int64_t(rank) * (mn / W), r.begin() + int64_t(rank + 1) * (mn / W));
  const auto cases = {std::pair{OwnerGemm::kCublas, 1}, std::pair{OwnerGemm::kBraid, 1}, std::pair{OwnerGemm::kCublas, 2},
                      std::pair{OwnerGemm::kBraid, 2}};
  auto name = [](OwnerGemm g) { return g == OwnerGemm::kCublas ? "cuBLAS" : "braid"; };
  for (const auto& [g, chunks] : cases) {
    OwnerOrderedRs op(team, m, n, k, g, chunks);
    eager_then_graph(
        team, 5, 2, [&] { op.run(a.p, b.p, out.p, s); },
        [&](int) { ASSERT_EQ(cudaMemsetAsync(out.p, 0xff, mn * 2 / W, s), cudaSuccess); },
        [&](int rep) {
          EXPECT_EQ(count_mismatch(want, download_bf16(out.p, mn / W), [](int64_t i) { return i; }, gemm_atol(k, W),
                                   kGemmRtol),
                    0u)
              << "rank " << rank << " reduce-scatter, gemm " << name(g) << " chunks " << chunks << " rep " << rep;
        });
  }
  for (const auto& [g, chunks] : cases) {
    OwnerOrderedRs op(team, m, n, k, g, chunks, /*all_reduce=*/true);
    ASSERT_TRUE(op.all_reduce());
    ASSERT_NE(op.result(), nullptr);
    for (void* dst : {op.result(), out.p})
      eager_then_graph(
          team, 4, 2, [&] { op.run(a.p, b.p, dst, s); },
          [&](int) { ASSERT_EQ(cudaMemsetAsync(dst, 0xff, mn * 2, s), cudaSuccess); },
          [&](int rep) {
            EXPECT_EQ(count_mismatch(r, download_bf16(dst, mn), [](int64_t i) { return i; }, gemm_atol(k, W), kGemmRtol),
                      0u)
                << "rank " << rank << " all-reduce, gemm " << name(g) << " chunks " << chunks
                << (dst == op.result() ? " into result()" : " copied out") << " rep " << rep;
          });
  }
  // Phase stamps (set_profile): the same rows, and every boundary named in run order from "start" (0) to "end".
  for (bool all_reduce : {false, true}) {
    OwnerOrderedRs op(team, m, n, k, OwnerGemm::kCublas, 2, all_reduce);
    op.set_profile(true);
    void* dst = all_reduce ? op.result() : out.p;
    ASSERT_EQ(cudaMemsetAsync(dst, 0xff, all_reduce ? mn * 2 : mn * 2 / W, s), cudaSuccess);
    op.run(a.p, b.p, dst, s);
    team.synchronize("stamped run");
    if (all_reduce)
      EXPECT_EQ(count_mismatch(r, download_bf16(dst, mn), [](int64_t i) { return i; }, gemm_atol(k, W), kGemmRtol), 0u);
    else
      EXPECT_EQ(count_mismatch(want, download_bf16(dst, mn / W), [](int64_t i) { return i; }, gemm_atol(k, W), kGemmRtol),
                0u);
    const auto ph = op.phases();
    // start, barrier, (peer gemm, push) per peer chunk, (own gemm, flags, sum[, gather push]) per own chunk,
    // [gathered,] end
    EXPECT_EQ(ph.size(), size_t(3 + 2 * 2 * (W - 1) + 2 * (all_reduce ? 4 : 3) + (all_reduce ? 1 : 0)));
    ASSERT_FALSE(ph.empty());
    EXPECT_EQ(ph.front().first, "start");
    EXPECT_EQ(ph.front().second, 0.f);
    EXPECT_EQ(ph.back().first, "end");
    for (const auto& [what, us] : ph) EXPECT_GE(us, 0.f) << what;
    op.set_profile(false);
    EXPECT_TRUE(op.phases().empty());
  }
}

// GemmPullRs: rank r's output is rows [r * M/W, ...) of the sum (NCCL's reduce-scatter layout), eager (twice: the end
// barrier orders the second run's GEMM after every peer's reads of the first) and replayed from a CUDA graph (three
// replays), at two shapes (one with a block that is not a whole number of the sum kernel's grid strides).
TEST(OverlapMpiPull, MatchesCublasPlusNccl) {
  braid::Team team(MPI_COMM_WORLD);
  if (!team.peer_ok()) GTEST_SKIP() << "no peer access: " << team.peer_status();
  const int W = team.size(), rank = team.rank();
  cudaStream_t s = team.stream();
  for (const auto& [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{512 * W, 2048, 1024},
                                std::tuple<int64_t, int64_t, int64_t>{24 * W, 1032, 320}}) {
    const int64_t mn = m * n;
    Buf a(m * k * 2), b(n * k * 2), ref(mn * 2), out(mn * 2);
    const auto r = random_inputs_and_reference(team, a.p, b.p, ref.p, m, n, k, 650);
    const std::vector<uint16_t> want(r.begin() + int64_t(rank) * (mn / W), r.begin() + int64_t(rank + 1) * (mn / W));
    GemmPullRs op(team, m, n, k);
    eager_then_graph(
        team, 5, 2, [&] { op.run(a.p, b.p, out.p, s); },
        [&](int) { ASSERT_EQ(cudaMemsetAsync(out.p, 0xff, mn * 2 / W, s), cudaSuccess); },
        [&](int rep) {
          op.check_error();
          EXPECT_EQ(count_mismatch(want, download_bf16(out.p, mn / W), [](int64_t i) { return i; }, gemm_atol(k, W),
                                   kGemmRtol),
                    0u)
              << "rank " << rank << " " << m << "x" << n << "x" << k << " rep " << rep;
        });
  }
}

// AutoGemmComm, reduce-scatter and all-reduce: every schedule it can pick gives rank r the rows original_row(j) of the
// sum (all-reduce: every row) — by the rule (no pick), after tune() (its own pick), and each schedule forced through a
// pick cache, eager and from a CUDA graph (T3's ring-cublas and ring-dma too, reduce-scatter); an all-reduce over an
// owner-ordered schedule and T3's ring-cublas also into output(); the pick cache round-trips through a file.
TEST(OverlapMpiAutoGemm, EverySchedulePicksTheRightRows) {
  braid::Team team(MPI_COMM_WORLD);
  SKIP_WITHOUT_NCCL(team);
  if (!all_hopper(team)) GTEST_SKIP() << "the GEMMs are built for sm_90a only";
  const int W = team.size(), rank = team.rank();
  const int64_t m = 512 * W, n = 2048, k = 1024, mn = m * n;
  cudaStream_t s = team.stream();
  Buf a(m * k * 2), b(n * k * 2), ref(mn * 2), out(mn * 2);
  const auto r = random_inputs_and_reference(team, a.p, b.p, ref.p, m, n, k, 700);
  for (const Collective coll : {Collective::kReduceScatter, Collective::kAllReduce}) {
    const bool rs = coll == Collective::kReduceScatter;
    const int64_t rows = rs ? m / W : m;
    auto check = [&](AutoGemmComm& op, bool graph, const std::string& what, void* dst) {
      eager_then_graph(
          team, 2, graph ? 0 : 2, [&] { op.run(a.p, b.p, dst, s); },
          [&](int) { ASSERT_EQ(cudaMemsetAsync(dst, 0xff, size_t(rows * n) * 2, s), cudaSuccess); },
          [&](int rep) {
            std::vector<uint16_t> want(size_t(rows * n));
            for (int64_t j = 0; j < rows; ++j) std::copy_n(r.begin() + op.original_row(j) * n, n, want.begin() + j * n);
            EXPECT_EQ(count_mismatch(want, download_bf16(dst, size_t(rows * n)), [](int64_t i) { return i; },
                                     gemm_atol(k, W), kGemmRtol),
                      0u)
                << "rank " << rank << " " << collective_name(coll) << " " << what << " pick " << pick_name(op.pick())
                << (graph ? " graph" : " eager") << (dst == out.p ? "" : " into output()") << " rep " << rep;
          });
    };
    AutoOptions opt;
    opt.coll = coll;
    opt.flash.reserve_sms = 90;  // several waves at this size
    if (!team.peer_ok()) opt.flash.transport = Transport::kNcclKernels;
    PickCache picks;
    opt.picks = &picks;
    {
      AutoGemmComm op(team, m, n, k, opt);
      EXPECT_EQ(op.pick(), default_pick(coll, W, m, n, k, team.peer_ok()));
      check(op, false, "rule", out.p);
      const GemmCommPick p = op.tune(a.p, b.p, out.p, s);
      EXPECT_EQ(p, op.pick());
      ASSERT_FALSE(op.tuned().empty());
      EXPECT_EQ(op.tuned().front().first, GemmCommPick{});  // the baseline is always a candidate
      for (const auto& [q, us] : op.tuned()) EXPECT_GT(us, 0) << pick_name(q);
      check(op, false, "tuned", out.p);
      check(op, true, "tuned", out.p);
    }
    ASSERT_EQ(picks.entries().size(), 1u);
    const std::string path = "/tmp/braid-test-autogemm-" + std::to_string(rank) + ".txt";
    picks.save(path);
    PickCache loaded;
    loaded.load(path);
    std::remove(path.c_str());
    ASSERT_EQ(loaded.entries().size(), 1u);
    EXPECT_EQ(loaded.entries()[0].pick, picks.entries()[0].pick);
    EXPECT_EQ(loaded.entries()[0].coll, coll);
    // Every schedule the op can take, forced through a cache (flashoverlap: reduce-scatter only).
    std::vector<GemmCommPick> all{GemmCommPick{}};
    if (rs) all.push_back(GemmCommPick{GemmCommPick::Schedule::kFlashOverlap});
    if (team.peer_ok())
      for (const auto& [g, c] : {std::pair{OwnerGemm::kCublas, 1}, std::pair{OwnerGemm::kCublas, 2},
                                 std::pair{OwnerGemm::kBraid, 1}})
        all.push_back(GemmCommPick{GemmCommPick::Schedule::kOwnerOrdered, g, c});
    if (rs && team.peer_ok() && W >= 2)  // T3's fused reduce-scatters (AutoOptions::t3_variants), graphs included
      for (const braid::t3::Variant v : {braid::t3::Variant::kRingCublas, braid::t3::Variant::kRingDma})
        all.push_back(GemmCommPick::t3_op(v));
    if (rs && team.peer_ok() && W >= 2) all.push_back(GemmCommPick{GemmCommPick::Schedule::kPull});  // try_pull below
    for (const GemmCommPick& p : all) {
      PickCache one;
      one.put({coll, W, m, n, k, p, 0});
      AutoOptions o = opt;
      o.picks = &one;
      o.try_pull = true;
      AutoGemmComm op(team, m, n, k, o);
      EXPECT_EQ(op.pick(), p) << pick_name(p);
      // output(): an owner-ordered all-reduce's result; T3 ring-cublas's own reduce-scatter buffer.
      const bool own = (!rs && p.schedule == GemmCommPick::Schedule::kOwnerOrdered) ||
                       (p.schedule == GemmCommPick::Schedule::kT3 && p.t3_variant == braid::t3::Variant::kRingCublas);
      EXPECT_EQ(op.output() != nullptr, own) << pick_name(p);
      check(op, false, "forced", out.p);
      check(op, true, "forced", out.p);
      if (op.output()) check(op, true, "forced", op.output());
    }
  }
}

// GemmOverlap::transport_collective (the collective the search measures per transport): on the op's own
// buffer, for a whole and a partial group, it gives what NCCL's reduce-scatter / all-reduce gives on a plain
// copy of the same data, for every transport (the copy-engine one: NCCL's all-to-all and braid's reduction).
TEST(OverlapMpiTransportCollective, MatchesNcclOnTheSameData) {
  braid::Team team(MPI_COMM_WORLD);
  SKIP_WITHOUT_NCCL(team);
  if (!all_hopper(team)) GTEST_SKIP() << "the op's GEMM is built for sm_90a only";
  const int W = team.size(), rank = team.rank();
  const int64_t m = 2048, n = 1024, k = 512, mn = m * n;
  cudaStream_t s = team.stream();
  bool have_windows = true;
  try {
    team.nccl_zero_cta();
  } catch (const braid::UnavailableError&) {
    have_windows = false;
  }
  for (const Transport t : {Transport::kNcclKernels, Transport::kNcclSymmetric, Transport::kNcclCopyEngine,
                            Transport::kPeerCopyEngine}) {
    const bool peer = t == Transport::kPeerCopyEngine;  // braid's own pushes: peer access only
    if ((peer && !team.peer_ok()) || (!peer && t != Transport::kNcclKernels && !have_windows)) continue;
    for (const Collective coll : {Collective::kReduceScatter, Collective::kAllReduce}) {
      SCOPED_TRACE(std::string(transport_name(t)) + (coll == Collective::kReduceScatter ? " RS" : " AR"));
      OverlapOptions o;
      o.coll = coll;
      o.m = m, o.n = n, o.k = k;
      o.transport = t;
      GemmOverlap op(team, o);
      const bool rs = coll == Collective::kReduceScatter;
      Buf plain(mn * 2), plain_out(mn * 2 / W), out(mn * 2 / W);
      void* outp = op.output() ? op.output() : out.p;
      const int64_t partial = (mn / 3) / (8 * W) * (8 * W);
      for (int v = 0; v < 4; ++v) {  // a whole and a partial group; one call, or kSetup then kAfterSetup
        const int64_t count = v < 2 ? mn : partial;
        const bool two_calls = v % 2 == 1;  // --measure's split where run() meets before the GEMM
        fill_uniform_bf16(op.reordered(), size_t(count), 600 + rank, 1.f, s);
        ASSERT_EQ(cudaMemcpyAsync(plain.p, op.reordered(), size_t(count) * 2, cudaMemcpyDeviceToDevice, s),
                  cudaSuccess);
        if (two_calls) {
          op.transport_collective(size_t(count), outp, s, GemmOverlap::Part::kSetup);
          op.transport_collective(size_t(count), outp, s, GemmOverlap::Part::kAfterSetup);
        } else {
          op.transport_collective(size_t(count), outp, s);
        }
        if (rs)
          ASSERT_EQ(ncclReduceScatter(plain.p, plain_out.p, size_t(count / W), ncclBfloat16, ncclSum, team.nccl(), s),
                    ncclSuccess);
        else
          ASSERT_EQ(ncclAllReduce(plain.p, plain.p, size_t(count), ncclBfloat16, ncclSum, team.nccl(), s), ncclSuccess);
        team.synchronize("transport collective");
        const int64_t len = rs ? count / W : count;
        const auto want = download_bf16(rs ? plain_out.p : plain.p, size_t(len));
        const auto got = download_bf16(rs ? outp : op.reordered(), size_t(len));
        // Sums of W values of |x| < 1 rounded to bf16: NCCL's order and roundings may differ from braid's fp32
        // sum by an ulp or two at magnitude W (wrong data is off by O(1)).
        EXPECT_EQ(count_mismatch(want, got, [](int64_t i) { return i; }, W / 64.0, 1.0 / 128.0), 0u)
            << "count " << count << (two_calls ? ", setup and the rest as two calls" : "");
      }
    }
  }
}

// GEMM + all-to-all: every rank regenerates every rank's A and computes its D with cuBLAS, so the
// expected rows of each receiver are known exactly; FlashOverlap (both waits) and the packed baseline
// must deliver them, repeatedly, for a uniform and a skewed routing (most rows to rank 0).
TEST(OverlapMpiAllToAll, DeliversEveryRoutedRow) {
  braid::Team team(MPI_COMM_WORLD);
  SKIP_WITHOUT_NCCL(team);
  if (!all_hopper(team)) GTEST_SKIP() << "the GEMM is built for sm_90a only";
  const int W = team.size(), rank = team.rank();
  const int64_t m = 2048, n = 1024, k = 256, mn = m * n;
  cudaStream_t s = team.stream();
  Buf b(n * k * 2), aq(m * k * 2), dq(mn * 2), d(mn * 2), packed(mn * 2);
  fill_uniform_bf16(b.p, n * k, 700, 1.f, s);  // one weight everywhere
  CublasGemm cublas;
  std::vector<std::vector<uint16_t>> dall(W);
  for (int q = 0; q < W; ++q) {  // D_q = A_q · Bᵀ for every rank q, locally
    fill_uniform_bf16(aq.p, m * k, 800 + q, 1.f, s);
    cublas.run(aq.p, b.p, dq.p, m, n, k, s);
    team.synchronize("reference");
    dall[q] = download_bf16(dq.p, mn);
  }
  Buf a(m * k * 2);
  fill_uniform_bf16(a.p, m * k, 800 + rank, 1.f, s);
  // Over NCCL (both waits), over braid's copy-engine pushes (A2aOptions::transport; stream memory operations
  // only) and by the epilogue's stores into the peers' outputs (into output() itself and copied out), skewed
  // routing too.
  for (Transport t : {Transport::kNcclKernels, Transport::kPeerCopyEngine, Transport::kPeerStores})
  for (int skew : {0, 1})
  for (bool wait_value : {true, false}) {
    if (t != Transport::kNcclKernels && (!wait_value || !team.peer_ok())) continue;
    A2aOptions o;
    o.m = m, o.n = n, o.k = k;
    o.reserve_sms = 90;  // several waves
    o.use_stream_wait_value = wait_value;
    o.transport = t;
    GemmAllToAll op(team, o);
    ASSERT_GE(op.mapping().groups(), t == Transport::kPeerStores ? 1 : 2);
    std::vector<int32_t> dest(m);
    uint64_t x = 12345 + rank * 77 + skew;
    for (auto& v : dest) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      v = skew && (x >> 60) < 12 ? 0 : int32_t((x >> 33) % uint64_t(W));
    }
    op.set_routing(dest);
    ASSERT_EQ(op.output() != nullptr, t == Transport::kPeerStores);  // allocated by set_routing
    const int64_t rows = op.recv_rows();
    const auto src = a2a_sources(op.routing(), rank);
    std::vector<uint16_t> want(size_t(rows * n));
    for (int64_t j = 0; j < rows; ++j)
      std::copy_n(dall[src[j].first].begin() + src[j].second * n, n, want.begin() + j * n);
    Buf out(std::max<int64_t>(rows, 1) * n * 2);
    for (int rep = 0; rep < 2; ++rep) {
      // kPeerStores, second run: into output() itself (no copy). The reset comes before run()'s start barrier
      // on this stream, so no peer stores into output() before it.
      void* dst = t == Transport::kPeerStores && rep == 1 ? op.output() : out.p;
      ASSERT_EQ(cudaMemsetAsync(dst, 0xff, rows * n * 2, s), cudaSuccess);
      op.run(a.p, b.p, dst, s);
      team.synchronize("gemm-a2a");
      op.check_error();
      EXPECT_EQ(count_mismatch(want, download_bf16(dst, rows * n), [](int64_t i) { return i; }, gemm_atol(k, 1),
                               kGemmRtol),
                0u)
          << "flashoverlap rank " << rank << " transport " << transport_name(t) << " skew " << skew << " wait_value "
          << wait_value << " rep " << rep;
    }
    ASSERT_EQ(cudaMemsetAsync(out.p, 0xff, rows * n * 2, s), cudaSuccess);
    op.run_sequential(cublas, a.p, b.p, d.p, packed.p, out.p, s);
    team.synchronize("gemm-a2a baseline");
    EXPECT_EQ(count_mismatch(want, download_bf16(out.p, rows * n), [](int64_t i) { return i; }, 0.0, 0.0), 0u)
        << "baseline rank " << rank << " skew " << skew;
  }
}

}  // namespace
