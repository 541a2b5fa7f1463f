// world_team.hpp — a gtest environment holding one braid::Team over MPI_COMM_WORLD for a multi-rank test binary:
// created in SetUp (after mpi_main.cpp's MPI_Init), destroyed in TearDown (collective, before MPI_Finalize).
// Register it once per binary: AddGlobalTestEnvironment(new braid::test::WorldTeam).
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <memory>

#include "braid/runtime.hpp"

namespace braid::test {

class WorldTeam : public ::testing::Environment {
 public:
  void SetUp() override { team_ = std::make_unique<Team>(MPI_COMM_WORLD); }
  void TearDown() override { team_.reset(); }
  static Team& get() { return *team_; }

 private:
  static inline std::unique_ptr<Team> team_;
};

}  // namespace braid::test
