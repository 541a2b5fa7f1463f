// main() for single-GPU tests: without a GPU the whole binary reports itself skipped (exit 77, which
// ctest shows as "Skipped" with this reason), never as passed.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <cstdlib>

#include "braid/runtime.hpp"
#include "watchdog_listener.hpp"

int main(int argc, char** argv) {
  if (braid::visible_gpu_count() == 0) {
    std::printf("SKIPPED: no CUDA device visible; %s needs one GPU\n", argv[0]);
    return 77;
  }
  // Some tests build a one-rank Team (MPI singleton); allow it when running as root.
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  ::testing::InitGoogleTest(&argc, argv);
  braid::Runtime rt(&argc, &argv);
  braid::Watchdog wd(0, rt.rank());
  braid::test_support::arm_per_test(wd);
  return RUN_ALL_TESTS();
}
