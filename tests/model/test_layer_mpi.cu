// Two GPUs: the layer at TP=2 (sequence parallel; plain TP with all-reduce; MoE with expert
// parallelism) against TP=1 on the same rank and against the float64 reference.
#include <gtest/gtest.h>
#include <mpi.h>

#include <memory>

#include "layer_check.hpp"

namespace {

namespace m = braid::model;
using namespace layer_check;

class Env : public ::testing::Environment {
 public:
  void SetUp() override {
    world_ = std::make_unique<braid::Team>(MPI_COMM_WORLD);
    self_ = world_->split(world_->rank(), 0);
    comm_ = m::make_nccl_comm(*world_);
    self_comm_ = m::make_nccl_comm(*self_);
  }
  void TearDown() override {
    self_comm_.reset();
    comm_.reset();
    self_.reset();
    world_.reset();
  }
  static std::unique_ptr<braid::Team> world_, self_;
  static std::unique_ptr<m::Comm> comm_, self_comm_;
};
std::unique_ptr<braid::Team> Env::world_, Env::self_;
std::unique_ptr<m::Comm> Env::comm_, Env::self_comm_;
::testing::Environment* const kEnv = ::testing::AddGlobalTestEnvironment(new Env);

void tp_vs_tp1(bool moe, bool sp) {
  const int tp = Env::world_->size(), rank = Env::world_->rank();
  for (const auto& c : shapes(moe)) {
    SCOPED_TRACE(c.describe() + (sp ? " sp" : " tp-allreduce"));
    const m::Parallel p{tp, sp}, p1{1, true};
    const auto w = m::init_weights(c, 31);
    const size_t n = size_t(c.tokens()) * c.hidden;
    const auto x = m::random_values(n, 32, 1.0), dy = m::random_values(n, 33, 1.0);
    const auto ref = m::reference_layer(c, w, x, dy);
    m::Layer layer(c, p, *Env::comm_);
    layer.load_weights(w);
    const auto got = run_layer(layer, rank, x, dy, Env::world_->stream());
    expect_close(got, ref, c, p, rank, layer.local_tokens(), kTol, c.name + " tp vs reference");
    // TP=1 on this rank's GPU, then this rank's rows and shard of it.
    m::Layer one(c, p1, *Env::self_comm_);
    one.load_weights(w);
    const auto full = run_layer(one, 0, x, dy, Env::self_->stream());
    m::RefResult as_ref;
    as_ref.y = full.y, as_ref.dx = full.dx;
    // TP=1's gradients are the full layout: rebuild it as a "reference" for shard_of.
    as_ref.grad = full.grad;
    expect_close(got, as_ref, c, p, rank, layer.local_tokens(), kTol, c.name + " tp vs tp=1");
  }
}

TEST(LayerMpi, DenseSequenceParallelEqualsTp1) { tp_vs_tp1(false, true); }
TEST(LayerMpi, DensePlainTpEqualsTp1) { tp_vs_tp1(false, false); }
TEST(LayerMpi, MoEExpertParallelEqualsTp1) { tp_vs_tp1(true, true); }

TEST(LayerMpi, AllReducerCommForInference) {
  // Plain TP forward with the all-reduce through braid::AllReducer (exact algorithms).
  const auto c = shapes(false)[1];
  const int tp = Env::world_->size(), rank = Env::world_->rank();
  auto comm = m::make_allreducer_comm(*Env::world_);
  const m::Parallel p{tp, false};
  const auto w = m::init_weights(c, 41);
  const size_t n = size_t(c.tokens()) * c.hidden;
  const auto x = m::random_values(n, 42, 1.0), dy = m::random_values(n, 43, 1.0);
  const auto ref = m::reference_layer(c, w, x, dy);
  m::Layer layer(c, p, *comm);
  layer.load_weights(w);
  const auto got = run_layer(layer, rank, x, dy, Env::world_->stream());
  expect_close(got, ref, c, p, rank, layer.local_tokens(), kTol, "allreducer comm");
}

}  // namespace
