// Multi-rank (one process per GPU, under mpirun): Many-to-Many Scatter delivers exactly the right
// variable-size blocks, and every transition this world can express gives bit-identical outputs for
// its original and its fused communication sequence (bf16 and fp32).
#include <gtest/gtest.h>

#include <cstdio>
#include <vector>

#include "braid/fusion/gpu.hpp"
#include "braid/m2ms.hpp"
#include "braid/runtime.hpp"

namespace {

using braid::M2msBlocks;
using braid::M2msGroups;

// Value of element e of the block source s sends to destination d: never zero, distinct per block.
uint32_t block_value(int s, int d, size_t e) {
  return 0x80000000u | (static_cast<uint32_t>(s) << 24) | (static_cast<uint32_t>(d) << 16) |
         static_cast<uint32_t>(e & 0xFFFF);
}
// Block size from source index i to destination index j: variable, sometimes empty.
size_t block_count(int i, int j, int salt) {
  return size_t((i * 7 + j * 3 + salt) % 5) * 37 + ((i + j + salt) % 3 == 0 ? 0 : 5);
}

// Runs one M2MS between `g` (ranks of the world team) and checks every received element; also
// checks that the sending buffer's untouched guard around each receive block stays intact.
void check_m2ms(braid::Team& team, const M2msGroups& g, int salt) {
  const int rank = team.rank();
  const int si = g.source_index(rank), di = g.destination_index(rank);
  const int m = static_cast<int>(g.sources.size()), n = static_cast<int>(g.destinations.size());
  // Source side: blocks laid out in reverse destination order with a gap, to exercise displacements.
  M2msBlocks sb;
  std::vector<uint32_t> hsend;
  if (si >= 0) {
    sb.counts.resize(n);
    sb.displs.resize(n);
    size_t at = 3;
    for (int j = n - 1; j >= 0; --j) {
      sb.counts[j] = block_count(si, j, salt);
      sb.displs[j] = at;
      at += sb.counts[j] + 2;
    }
    hsend.assign(at, 0xDEADBEEFu);
    for (int j = 0; j < n; ++j)
      for (size_t e = 0; e < sb.counts[j]; ++e) hsend[sb.displs[j] + e] = block_value(si, j, e);
  }
  // Destination side: counts come from the exchange (and must equal what we know they are).
  const std::vector<size_t> recv_counts =
      braid::m2ms_exchange_counts(team, g, si >= 0 ? sb.counts : std::vector<size_t>{});
  M2msBlocks rb;
  size_t rtotal = 0;
  if (di >= 0) {
    ASSERT_EQ(recv_counts.size(), size_t(m));
    for (int i = 0; i < m; ++i) EXPECT_EQ(recv_counts[i], block_count(i, di, salt)) << "count from source " << i;
    rb.counts = recv_counts;
    rb.displs.resize(m);
    size_t at = 1;  // one guard word before each block
    for (int i = 0; i < m; ++i) {
      rb.displs[i] = at;
      at += rb.counts[i] + 1;
    }
    rtotal = at;
  } else {
    EXPECT_TRUE(recv_counts.empty());
  }
  uint32_t *dsend = nullptr, *drecv = nullptr;
  ASSERT_EQ(cudaMalloc(&dsend, std::max<size_t>(1, hsend.size()) * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&drecv, std::max<size_t>(1, rtotal) * 4), cudaSuccess);
  if (!hsend.empty()) ASSERT_EQ(cudaMemcpy(dsend, hsend.data(), hsend.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemset(drecv, 0x5A, std::max<size_t>(1, rtotal) * 4), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // legacy-stream setup lands before team.stream() runs
  braid::m2ms(team, dsend, sb, drecv, rb, ncclUint32, g);
  team.synchronize("m2ms test");
  std::vector<uint32_t> hrecv(rtotal);
  if (rtotal) ASSERT_EQ(cudaMemcpy(hrecv.data(), drecv, rtotal * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  size_t bad = 0, guards = 0;
  if (di >= 0) {
    for (int i = 0; i < m; ++i) {
      guards += hrecv[rb.displs[i] - 1] != 0x5A5A5A5Au;
      for (size_t e = 0; e < rb.counts[i]; ++e) bad += hrecv[rb.displs[i] + e] != block_value(i, di, e);
    }
  }
  EXPECT_EQ(bad, 0u) << "rank " << rank << ": wrong elements received";
  EXPECT_EQ(guards, 0u) << "rank " << rank << ": a receive wrote outside its block";
  cudaFree(dsend);
  cudaFree(drecv);
  team.barrier();
}

TEST(M2ms, RotatedOrder) {
  EXPECT_EQ(braid::m2ms_send_order(0, 3), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(braid::m2ms_send_order(2, 3), (std::vector<int>{2, 0, 1}));
  // Destination 1 of 3, 3 sources: source 1 at step 0, source 0 at step 1, source 2 at step 2.
  EXPECT_EQ(braid::m2ms_recv_order(1, 3, 3), (std::vector<int>{1, 0, 2}));
  // 4 sources onto 2 destinations: sources 0 and 2 reach destination 0 at step 0.
  EXPECT_EQ(braid::m2ms_recv_order(0, 4, 2), (std::vector<int>{0, 2, 1, 3}));
}

TEST(M2ms, AllToAllVariableBlocksWithSelf) {
  braid::Team team(MPI_COMM_WORLD);
  const int n = team.size();
  M2msGroups g;
  for (int r = 0; r < n; ++r) g.sources.push_back(r), g.destinations.push_back(r);
  for (int salt = 0; salt < 3; ++salt) check_m2ms(team, g, salt);
}

TEST(M2ms, DisjointAndOverlappingGroups) {
  braid::Team team(MPI_COMM_WORLD);
  const int n = team.size();
  ASSERT_GE(n, 2);
  // Rank 0 -> everyone else, then the reverse, then a rotated destination list, then a group where
  // the last rank only receives.
  M2msGroups a{{0}, {}}, b{{}, {0}}, c{{}, {}}, d{{}, {}};
  for (int r = 1; r < n; ++r) a.destinations.push_back(r), b.sources.push_back(r);
  for (int r = 0; r < n; ++r) c.sources.push_back(r), c.destinations.push_back((r + 1) % n);
  for (int r = 0; r < n - 1; ++r) d.sources.push_back(r);
  for (int r = n - 1; r >= 0; --r) d.destinations.push_back(r);
  for (const auto* g : {&a, &b, &c, &d}) check_m2ms(team, *g, 1);
}

TEST(M2ms, RejectsBadArguments) {
  braid::Team team(MPI_COMM_WORLD);
  M2msGroups dup{{0, 0}, {0}};
  EXPECT_THROW(dup.validate(team.size()), braid::UsageError);
  M2msGroups out{{0}, {team.size()}};
  EXPECT_THROW(out.validate(team.size()), braid::UsageError);
  M2msGroups g{{team.rank()}, {team.rank()}};
  M2msBlocks sb = M2msBlocks::packed({4}), rb = M2msBlocks::packed({3});
  // Purely local (this rank to itself): mismatched self block is rejected before any NCCL call.
  EXPECT_THROW(braid::m2ms(nullptr, sb, nullptr, rb, ncclFloat32, g, team.rank(), team.size(), team.nccl(),
                           team.stream()),
               braid::UsageError);
}

// Every expressible transition: the fused output equals the original's, bit for bit.
void check_transitions(braid::bench::DType dt) {
  braid::Team team(MPI_COMM_WORLD);
  using braid::fusion::Transition;
  struct Shape {
    int64_t B, S, H;
  };
  // B = 2: SP+EP splits the batch (the paper's SP+EP+SP with the B -> S all-to-all);
  // B = 1: the EP split falls back to the sequence.
  for (const Shape sh : {Shape{2, 256, 512}, Shape{1, 128, 256}, Shape{4, 64, 1024}}) {
    for (Transition t : {Transition::TP_SP, Transition::TP_EP, Transition::SP_EP, Transition::TP_PP,
                         Transition::SP_PP, Transition::PP_EP}) {
      braid::fusion::GpuTransitionConfig c;
      c.transition = t;
      c.batch = sh.B;
      c.seq = sh.S;
      c.hidden = sh.H;
      c.ffn = 4 * sh.H;
      c.experts = 8;
      c.top_k = 2;
      c.dtype = dt;
      c.time = false;
      const auto r = braid::fusion::run_gpu_transition(team, c);
      const std::string name = braid::fusion::transition_name(t);
      std::string why;
      if (!braid::fusion::gpu_transition_expressible(t, c, team.size(), &why)) {
        EXPECT_FALSE(r.ran);
        if (team.rank() == 0) std::printf("[ skip ] %s on %d ranks: %s\n", name.c_str(), team.size(), why.c_str());
        continue;
      }
      ASSERT_TRUE(r.ran) << name;
      EXPECT_GT(r.checked, 0u) << name;
      EXPECT_EQ(r.wrong, 0u) << name << " B=" << sh.B << " S=" << sh.S << " H=" << sh.H << " "
                             << braid::bench::dtype_name(dt) << ": fused output differs from the original";
      EXPECT_GE(r.variants.size(), 2u);
      if (t == Transition::TP_SP) EXPECT_NE(r.find("megatron-sp"), nullptr);
    }
  }
  // A different k and expert count (k = 1, 4 experts).
  for (Transition t : {Transition::TP_EP, Transition::SP_EP}) {
    braid::fusion::GpuTransitionConfig c;
    c.transition = t;
    c.batch = 2;
    c.seq = 128;
    c.hidden = 256;
    c.ffn = 1024;
    c.experts = 4;
    c.top_k = 1;
    c.dtype = dt;
    c.time = false;
    const auto r = braid::fusion::run_gpu_transition(team, c);
    if (!r.ran) continue;
    EXPECT_EQ(r.wrong, 0u) << braid::fusion::transition_name(t) << " k=1";
  }
}

TEST(Transitions, FusedEqualsOriginalBf16) { check_transitions(braid::bench::DType::kBF16); }
TEST(Transitions, FusedEqualsOriginalFp32) { check_transitions(braid::bench::DType::kFP32); }

TEST(Transitions, TimedRunReportsStatsAndPrediction) {
  braid::Team team(MPI_COMM_WORLD);
  braid::fusion::GpuTransitionConfig c;
  c.transition = braid::fusion::Transition::TP_EP;
  c.batch = 2;
  c.seq = 256;
  c.hidden = 512;
  c.ffn = 2048;
  c.timing = {2, 5};
  const auto r = braid::fusion::run_gpu_transition(team, c);
  ASSERT_TRUE(r.ran);
  EXPECT_TRUE(r.correct());
  for (const auto& v : r.variants) {
    EXPECT_EQ(v.stats.iters, 5) << v.algo;
    EXPECT_GT(v.stats.median_us, 0) << v.algo;
    EXPECT_GT(v.predicted_us, 0) << v.algo;
  }
  // The cost model predicts the fused sequence (RS + dispatch) to be cheaper than AR + dispatch.
  EXPECT_LT(r.find("fused")->predicted_us, r.find("unfused")->predicted_us);
}

}  // namespace
