// One GPU, one-rank team: bounded waits turn a missing signal into a typed error; the barrier works.
#include <gtest/gtest.h>

#include <chrono>

#include "braid/runtime.hpp"
#include "braid/signal_device.cuh"

namespace {

__global__ void wait_kernel(braid::SignalView v, int slot, uint32_t epoch) {
  braid::dev::wait_geq(v, braid::dev::flag_at(v.local_flags, slot, 0), epoch,
                       static_cast<uint32_t>(braid::OpId::kFlagWait), slot, 0);
}

__global__ void barrier_loop_kernel(braid::SignalView v, int slot, int rounds, int* done) {
  for (int i = 0; i < rounds; ++i)
    if (!braid::dev::barrier_block(v, slot, static_cast<uint32_t>(braid::OpId::kBarrier))) return;
  if (threadIdx.x == 0) *done = rounds;
}

TEST(Signal, UnsignalledWaitTimesOutWithTypedError) {
  braid::TeamOptions opt;
  opt.timeout_s = 0.3;
  braid::Team team(MPI_COMM_SELF, opt);
  ASSERT_TRUE(team.peer_ok()) << team.peer_status();
  const int slot = team.reserve_slots(1);
  const auto t0 = std::chrono::steady_clock::now();
  wait_kernel<<<1, 1, 0, team.stream()>>>(team.signals(), slot, 1u);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  try {
    team.synchronize("unsignalled wait");
    FAIL() << "expected TimeoutError";
  } catch (const braid::TimeoutError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("flag-wait"), std::string::npos) << m;
    EXPECT_NE(m.find("rank 0"), std::string::npos) << m;
    EXPECT_NE(m.find("flag slot " + std::to_string(slot)), std::string::npos) << m;
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 5.0);
}

TEST(Signal, SingleRankBarrierCompletes) {
  braid::Team team(MPI_COMM_SELF);
  ASSERT_TRUE(team.peer_ok()) << team.peer_status();
  const int slot = team.reserve_slots(1);
  int* done = nullptr;
  ASSERT_EQ(cudaMalloc(&done, sizeof(int)), cudaSuccess);
  cudaMemset(done, 0, sizeof(int));
  cudaDeviceSynchronize();  // the legacy-stream memset finishes before team.stream() runs
  barrier_loop_kernel<<<1, 64, 0, team.stream()>>>(team.signals(), slot, 10000, done);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  team.synchronize("barrier loop");
  int h = 0;
  cudaMemcpy(&h, done, sizeof(int), cudaMemcpyDeviceToHost);
  EXPECT_EQ(h, 10000);
  cudaFree(done);
}

}  // namespace
