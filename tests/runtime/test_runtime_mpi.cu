// Multi-rank (one process per GPU, under mpirun): symmetric memory in both directions, a flag/barrier
// stress with stale-value checks, bounded waits, and a rank that leaves early. With BRAID_SHARED_GPU=1
// (test_runtime_mpi_shared*: the ranks time-slice one GPU, no NCCL) the NCCL cases skip and the stress runs
// fewer rounds: each barrier there waits for the GPU to switch between the ranks' contexts.
#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "braid/runtime.hpp"
#include "braid/signal_device.cuh"

namespace {

#define SKIP_WITHOUT_NCCL(team) \
  if ((team).shared_gpu()) GTEST_SKIP() << "needs NCCL, which a shared-GPU team has not"

uint32_t pattern(int writer, int owner, size_t i) {
  return static_cast<uint32_t>(0x01000193u * (writer + 1) ^ (0x9E3779B1u * (owner + 3)) ^ (i * 2654435761u));
}

// Each rank pushes into region [rank] of every peer's buffer (remote stores).
__global__ void push_kernel(uint32_t* const* peers, int world, int rank, size_t words) {
  for (int r = 0; r < world; ++r)
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < words; i += size_t(gridDim.x) * blockDim.x)
      peers[r][rank * words + i] = static_cast<uint32_t>(0x01000193u * (rank + 1) ^ (0x9E3779B1u * (r + 3)) ^
                                                         (i * 2654435761u));
}
// Each rank pulls region [r] of peer r's buffer into its own scratch (remote loads).
__global__ void pull_kernel(uint32_t* const* peers, int world, int rank, size_t words, uint32_t* out) {
  for (int r = 0; r < world; ++r)
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < words; i += size_t(gridDim.x) * blockDim.x)
      out[r * words + i] = peers[r][r * words + i];  // what peer r received from itself
}

TEST(Runtime, WorldTeamHasPeerMemory) {
  braid::Team team(MPI_COMM_WORLD);
  EXPECT_TRUE(team.peer_ok()) << team.peer_status();
  EXPECT_EQ(team.size(), [] { int n; MPI_Comm_size(MPI_COMM_WORLD, &n); return n; }());
}

TEST(Runtime, SymmetricMemoryRoundTripBothDirections) {
  braid::Team team(MPI_COMM_WORLD);
  ASSERT_TRUE(team.peer_ok()) << team.peer_status();
  const int world = team.size(), rank = team.rank();
  const size_t words = 1 << 20;  // 4 MiB per writer
  braid::SymmetricBuffer buf(team, words * sizeof(uint32_t) * world);
  std::vector<uint32_t*> hp(world);
  for (int r = 0; r < world; ++r) hp[r] = buf.peer_as<uint32_t>(r);
  uint32_t** dp = nullptr;
  ASSERT_EQ(cudaMalloc(&dp, world * sizeof(uint32_t*)), cudaSuccess);
  cudaMemcpy(dp, hp.data(), world * sizeof(uint32_t*), cudaMemcpyHostToDevice);
  cudaMemset(buf.local(), 0, buf.bytes());
  cudaDeviceSynchronize();
  team.barrier();
  // Push: every rank writes its region of every peer.
  push_kernel<<<64, 256, 0, team.stream()>>>(dp, world, rank, words);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  team.synchronize("push");
  team.barrier();
  std::vector<uint32_t> h(words * world);
  cudaMemcpy(h.data(), buf.local(), buf.bytes(), cudaMemcpyDeviceToHost);
  size_t bad = 0;
  for (int w = 0; w < world; ++w)
    for (size_t i = 0; i < words; ++i) bad += h[w * words + i] != pattern(w, rank, i);
  EXPECT_EQ(bad, 0u) << "push: words written by peers did not arrive";
  // Pull: read back from every peer what that peer wrote into itself.
  uint32_t* scratch = nullptr;
  ASSERT_EQ(cudaMalloc(&scratch, buf.bytes()), cudaSuccess);
  pull_kernel<<<64, 256, 0, team.stream()>>>(dp, world, rank, words, scratch);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  team.synchronize("pull");
  cudaMemcpy(h.data(), scratch, buf.bytes(), cudaMemcpyDeviceToHost);
  bad = 0;
  for (int r = 0; r < world; ++r)
    for (size_t i = 0; i < words; ++i) bad += h[r * words + i] != pattern(r, r, i);
  EXPECT_EQ(bad, 0u) << "pull: remote loads returned wrong data";
  team.barrier();
  cudaFree(scratch);
  cudaFree(dp);
}

// Each round: write the round number into every peer's data slot [rank] with a plain remote store,
// barrier, read every slot [peer] of our own array expecting this round (a stale value is counted),
// barrier again so nobody overwrites before everyone has read. The stores and loads are made by the
// second warp, the flags by the first warp's threads 0..W-1: the barrier must order other threads'
// writes (through its bar.sync), not only the signalling thread's own.
__global__ void stress_kernel(braid::SignalView v, int slot, uint32_t* const* data, int rounds,
                              unsigned long long* stale, int* completed) {
  const int t = static_cast<int>(threadIdx.x) - 32;  // data lane: threads 32 .. 32 + W - 1
  for (int round = 1; round <= rounds; ++round) {
    if (t >= 0 && t < v.world) data[t][v.rank] = static_cast<uint32_t>(round);
    if (!braid::dev::barrier_block(v, slot, static_cast<uint32_t>(braid::OpId::kBarrier))) return;
    if (t >= 0 && t < v.world) {
      const uint32_t got = *reinterpret_cast<volatile uint32_t*>(&data[v.rank][t]);
      if (got != static_cast<uint32_t>(round)) atomicAdd(stale, 1ull);
    }
    if (!braid::dev::barrier_block(v, slot, static_cast<uint32_t>(braid::OpId::kBarrier))) return;
  }
  if (threadIdx.x == 0) *completed = rounds;
}

TEST(Runtime, FlagBarrierStress100kRounds) {
  braid::Team team(MPI_COMM_WORLD);
  ASSERT_TRUE(team.peer_ok()) << team.peer_status();
  const int world = team.size();
  const int slot = team.reserve_slots(1);
  braid::SymmetricBuffer data(team, braid::kMaxPeers * sizeof(uint32_t));
  cudaMemset(data.local(), 0, data.bytes());
  std::vector<uint32_t*> hp(world);
  for (int r = 0; r < world; ++r) hp[r] = data.peer_as<uint32_t>(r);
  uint32_t** dp = nullptr;
  unsigned long long* stale = nullptr;
  int* completed = nullptr;
  cudaMalloc(&dp, world * sizeof(uint32_t*));
  cudaMemcpy(dp, hp.data(), world * sizeof(uint32_t*), cudaMemcpyHostToDevice);
  cudaMalloc(&stale, sizeof(*stale));
  cudaMalloc(&completed, sizeof(int));
  cudaMemset(stale, 0, sizeof(*stale));
  cudaMemset(completed, 0, sizeof(int));
  cudaDeviceSynchronize();
  const int rounds = team.shared_gpu() ? 200 : 100000;  // shared GPU: a context switch per barrier
  // Both orderings of barrier_block (SignalView::barrier_mode: 0 fence, 1 release), whatever
  // BRAID_BARRIER says; the same slot, epochs continuing.
  for (int mode : {0, 1}) {
    SCOPED_TRACE(mode == 0 ? "barrier_mode fence" : "barrier_mode release");
    braid::SignalView v = team.signals();
    v.barrier_mode = mode;
    cudaMemset(stale, 0, sizeof(*stale));
    cudaMemset(completed, 0, sizeof(int));
    cudaDeviceSynchronize();
    team.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    stress_kernel<<<1, 64, 0, team.stream()>>>(v, slot, dp, rounds, stale, completed);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    team.synchronize("barrier stress");
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    unsigned long long h_stale = 0;
    int h_done = 0;
    cudaMemcpy(&h_stale, stale, sizeof(h_stale), cudaMemcpyDeviceToHost);
    cudaMemcpy(&h_done, completed, sizeof(int), cudaMemcpyDeviceToHost);
    EXPECT_EQ(h_done, rounds);
    EXPECT_EQ(h_stale, 0ull);
    if (team.rank() == 0)
      std::printf("[ info ] %s: %d rounds (%d barriers) in %.3f s: %.2f us per barrier\n",
                  mode == 0 ? "fence" : "release", rounds, 2 * rounds, sec, sec * 1e6 / (2 * rounds));
    team.barrier();
  }
  cudaFree(dp);
  cudaFree(stale);
  cudaFree(completed);
}

__global__ void wait_kernel(braid::SignalView v, int slot, int peer, uint32_t epoch) {
  braid::dev::wait_geq(v, braid::dev::flag_at(v.local_flags, slot, peer), epoch,
                       static_cast<uint32_t>(braid::OpId::kFlagWait), slot, peer);
}

TEST(Runtime, NeverSignalledWaitFailsWithTypedTimeout) {
  braid::TeamOptions opt;
  opt.timeout_s = 0.5;
  braid::Team team(MPI_COMM_WORLD, opt);
  ASSERT_TRUE(team.peer_ok());
  const int slot = team.reserve_slots(1);
  const int peer = (team.rank() + 1) % team.size();
  wait_kernel<<<1, 1, 0, team.stream()>>>(team.signals(), slot, peer, 1u);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  try {
    team.synchronize("never-signalled wait");
    ADD_FAILURE() << "expected TimeoutError";
  } catch (const braid::TimeoutError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("rank " + std::to_string(team.rank())), std::string::npos) << m;
    EXPECT_NE(m.find("from peer " + std::to_string(peer)), std::string::npos) << m;
    EXPECT_NE(m.find("flag-wait"), std::string::npos) << m;
  }
  team.barrier();
}

// One rank's team breaks (it aborted after a local failure) while the others are healthy: the teardown
// agreement makes every rank abort, so nobody waits in a barrier or a ncclCommDestroy that the broken rank
// skips (the hang a racing host timeout once caused in the test above).
TEST(Runtime, OneBrokenRankMakesEveryRankAbortAtTeardown) {
  braid::TeamOptions opt;
  opt.timeout_s = 5.0;
  braid::Team team(MPI_COMM_WORLD, opt);
  ASSERT_TRUE(team.peer_ok());
  {
    braid::SymmetricBuffer buf(team, 1 << 16);
    if (team.rank() == 0) team.abort();
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_FALSE(team.agree_healthy());
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 4.0);
    EXPECT_TRUE(team.broken());
  }  // ~SymmetricBuffer and then ~Team agree again: bounded, no hang
  MPI_Barrier(MPI_COMM_WORLD);
}

__global__ void one_barrier_kernel(braid::SignalView v, int slot) {
  braid::dev::barrier_block(v, slot, static_cast<uint32_t>(braid::OpId::kBarrier));
}

// The last rank leaves before the device barrier; the others fail with a timeout naming it.
TEST(Runtime, RankLeavingBeforeDeviceBarrierIsReportedNotHung) {
  braid::TeamOptions opt;
  opt.timeout_s = 1.0;
  braid::Team team(MPI_COMM_WORLD, opt);
  ASSERT_TRUE(team.peer_ok());
  const int slot = team.reserve_slots(1);
  const int leaver = team.size() - 1;
  if (team.rank() != leaver) {
    one_barrier_kernel<<<1, 32, 0, team.stream()>>>(team.signals(), slot);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    try {
      team.synchronize("device barrier with a departed peer");
      ADD_FAILURE() << "expected TimeoutError";
    } catch (const braid::TimeoutError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("barrier"), std::string::npos) << m;
      EXPECT_NE(m.find("from peer " + std::to_string(leaver)), std::string::npos) << m;
    }
  }
  team.barrier();
}

// The last rank never joins a NCCL all-reduce; the others' bounded synchronize aborts the
// communicator and throws instead of hanging.
TEST(Runtime, RankLeavingBeforeNcclCallIsReportedNotHung) {
  braid::TeamOptions opt;
  opt.timeout_s = 3.0;
  opt.probe_peers = false;
  braid::Team team(MPI_COMM_WORLD, opt);
  SKIP_WITHOUT_NCCL(team);
  const int leaver = team.size() - 1;
  float* buf = nullptr;
  ASSERT_EQ(cudaMalloc(&buf, 1 << 20), cudaSuccess);
  cudaMemset(buf, 0, 1 << 20);
  cudaDeviceSynchronize();
  // Everyone takes part once (connections are up, as in any running job); then one rank leaves.
  ASSERT_EQ(ncclAllReduce(buf, buf, (1 << 20) / 4, ncclFloat32, ncclSum, team.nccl(), team.stream()), ncclSuccess);
  team.synchronize("all-reduce with every rank");
  if (team.rank() != leaver) {
    ASSERT_EQ(ncclAllReduce(buf, buf, (1 << 20) / 4, ncclFloat32, ncclSum, team.nccl(), team.stream()), ncclSuccess);
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_THROW(team.synchronize("all-reduce with a departed peer"), braid::TimeoutError);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(s, 30.0);
    EXPECT_TRUE(team.broken());
  } else {
    team.abort();  // this rank "left": it drops its communicator without a collective step
  }
  cudaStreamSynchronize(team.stream());
  cudaFree(buf);
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(Runtime, SplitCreatesSubTeamsEagerly) {
  braid::Team team(MPI_COMM_WORLD);
  auto sub = team.split(team.rank() % 2, team.rank());
  ASSERT_TRUE(sub);
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  EXPECT_EQ(sub->size(), (n + 1 - team.rank() % 2) / 2);
  EXPECT_EQ(sub->shared_gpu(), team.shared_gpu());
  SKIP_WITHOUT_NCCL(*sub);
  // A NCCL all-reduce on the sub-team works.
  float* d = nullptr;
  cudaMalloc(&d, sizeof(float));
  float one = 1.f;
  cudaMemcpy(d, &one, sizeof(float), cudaMemcpyHostToDevice);
  cudaDeviceSynchronize();  // the pageable upload lands before the sub-team's stream reads it
  ASSERT_EQ(ncclAllReduce(d, d, 1, ncclFloat32, ncclSum, sub->nccl(), sub->stream()), ncclSuccess);
  sub->synchronize("sub-team all-reduce");
  float h = 0;
  cudaMemcpy(&h, d, sizeof(float), cudaMemcpyDeviceToHost);
  EXPECT_EQ(h, static_cast<float>(sub->size()));
  cudaFree(d);
}


// A symmetric buffer on some ranks only (a channel's two ends): members map each other, non-members hold nothing,
// and a disagreement on the members or the size throws on every rank (nobody is left waiting in the exchange).
TEST(Runtime, SymmetricBufferOnMembersOnly) {
  braid::Team team(MPI_COMM_WORLD);
  ASSERT_TRUE(team.peer_ok()) << team.peer_status();
  const int world = team.size(), rank = team.rank();
  const std::vector<int> ends = {0, world - 1};
  const size_t n = 1 << 16;  // words
  {
    braid::SymmetricBuffer buf(team, n * 4, ends);
    const bool me = rank == 0 || rank == world - 1;
    EXPECT_EQ(buf.member(), me);
    EXPECT_EQ(buf.bytes(), me ? n * 4 : 0u);
    for (int r = 0; r < world; ++r)
      EXPECT_EQ(buf.peer(r) != nullptr, me && (r == 0 || r == world - 1)) << "rank " << rank << " peer " << r;
    if (me) {  // each end writes its rank into the other end's buffer by a copy engine, then reads its own
      std::vector<uint32_t> h(n, uint32_t(rank) + 1);
      const int other = rank == 0 ? world - 1 : 0;
      ASSERT_EQ(cudaMemcpy(buf.peer(other), h.data(), n * 4, cudaMemcpyDefault), cudaSuccess);
    }
    cudaDeviceSynchronize();
    team.barrier();
    if (me) {
      std::vector<uint32_t> h(n, 0);
      ASSERT_EQ(cudaMemcpy(h.data(), buf.local(), n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      const uint32_t want = uint32_t(rank == 0 ? world - 1 : 0) + 1;
      size_t bad = 0;
      for (uint32_t v : h) bad += v != want;
      EXPECT_EQ(bad, 0u);
    }
    team.barrier();
  }
  {
    braid::SymmetricBuffer one(team, 256, {world - 1});  // a single member: nobody to map
    EXPECT_EQ(one.member(), rank == world - 1);
    for (int r = 0; r < world; ++r) EXPECT_EQ(one.peer(r) != nullptr, rank == world - 1 && r == rank);
  }
  if (world >= 2) {
    EXPECT_THROW(braid::SymmetricBuffer(team, 256, {rank}), braid::UsageError);             // members differ
    EXPECT_THROW(braid::SymmetricBuffer(team, 256 * size_t(1 + rank), ends), braid::UsageError);  // sizes differ
  }
  EXPECT_THROW(braid::SymmetricBuffer(team, 256, {world}), braid::UsageError);  // outside the team (every rank)
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
