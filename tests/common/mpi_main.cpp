// main() for multi-rank tests, started by tests/common/run_mpi.sh under mpirun (one process per GPU).
// Rank 0 prints the usual gtest report; other ranks print only their failures, prefixed by the rank.
// The exit code is the worst over all ranks.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "braid/env.hpp"
#include "braid/runtime.hpp"
#include "watchdog_listener.hpp"

namespace {
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (r.failed())
      std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_, r.file_name() ? r.file_name() : "?",
                   r.line_number(), r.summary());
  }

 private:
  int rank_;
};
}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--braid-count-gpus") == 0) {
    std::printf("%d\n", braid::visible_gpu_count());
    return 0;
  }
  ::testing::InitGoogleTest(&argc, argv);
  braid::Runtime rt(&argc, &argv, /*need_gpu=*/false);
  // BRAID_SHARED_GPU=1: the ranks share one GPU (braid::TeamOptions::shared_gpu).
  const int need = braid::env::flag("BRAID_SHARED_GPU").value_or(false) ? 1 : rt.local_size();
  if (braid::visible_gpu_count() < need) {
    if (rt.rank() == 0)
      std::printf("SKIPPED: %d ranks on this node need %d GPUs, %d visible\n", rt.local_size(), need,
                  braid::visible_gpu_count());
    return 77;
  }
  if (rt.rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rt.rank()));
  }
  braid::Watchdog wd(0, rt.rank());
  braid::test_support::arm_per_test(wd);
  int rc = RUN_ALL_TESTS();
  MPI_Allreduce(MPI_IN_PLACE, &rc, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return rc;
}
