// One GPU: the layer at TP=1 (dense and MoE) against the float64 CPU reference (forward, input and
// weight gradients), op-by-op execution on another stream equal to forward()/backward() bit for bit.
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
    team_ = std::make_unique<braid::Team>(MPI_COMM_SELF);
    comm_ = m::make_nccl_comm(*team_);
  }
  void TearDown() override {
    comm_.reset();
    team_.reset();
  }
  static std::unique_ptr<braid::Team> team_;
  static std::unique_ptr<m::Comm> comm_;
};
std::unique_ptr<braid::Team> Env::team_;
std::unique_ptr<m::Comm> Env::comm_;
::testing::Environment* const kEnv = ::testing::AddGlobalTestEnvironment(new Env);

void check_against_reference(bool moe) {
  for (const auto& c : shapes(moe)) {
    SCOPED_TRACE(c.describe());
    const m::Parallel p{1, true};
    m::Layer layer(c, p, *Env::comm_);
    const auto w = m::init_weights(c, 21);
    layer.load_weights(w);
    const size_t n = size_t(c.tokens()) * c.hidden;
    const auto x = m::random_values(n, 22, 1.0), dy = m::random_values(n, 23, 1.0);
    const auto ref = m::reference_layer(c, w, x, dy);
    const auto got = run_layer(layer, 0, x, dy, Env::team_->stream());
    if (moe) {
      const auto rows = layer.local_expert_rows();
      int64_t total = 0;
      for (auto r : rows) total += r;
      EXPECT_EQ(total, c.tokens() * c.top_k) << "dropless: every (token, k) reaches an expert";
      // Near-tie tokens may be routed differently by bf16 logits: compare with the reference on the
      // GPU's routes (see layer_check.hpp), and log the errors against both references.
      const auto routes = layer.local_routes();
      const int differ = expect_routes_near_reference(routes, ref, c, c.name);
      print_errors(got, ref, c, p, 0, layer.local_tokens(), c.name + " vs float64 routes");
      if (differ > 0) {
        const auto ref_gpu_routes = m::reference_layer(c, w, x, dy, &routes);
        print_errors(got, ref_gpu_routes, c, p, 0, layer.local_tokens(), c.name + " vs GPU routes");
        expect_close(got, ref_gpu_routes, c, p, 0, layer.local_tokens(), kTol, c.name + " (GPU routes)");
      } else {
        expect_close(got, ref, c, p, 0, layer.local_tokens(), kTol, c.name);
      }
    } else {
      expect_close(got, ref, c, p, 0, layer.local_tokens(), kTol, c.name);
    }
    // Op by op on another stream: the same bits.
    cudaStream_t s2;
    ASSERT_EQ(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking), cudaSuccess);
    const auto again = run_layer(layer, 0, x, dy, s2, /*op_by_op=*/true);
    cudaStreamDestroy(s2);
    EXPECT_EQ(again.y, got.y);
    EXPECT_EQ(again.dx, got.dx);
    EXPECT_EQ(again.grad.wq, got.grad.wq);
  }
}

TEST(LayerGpu, DenseMatchesReference) { check_against_reference(false); }
TEST(LayerGpu, MoEMatchesReference) { check_against_reference(true); }

TEST(LayerGpu, OperatorViewMatchesPlan) {
  const auto c = m::preset("tiny");
  m::Layer layer(c, {1, true}, *Env::comm_);
  const auto plan = m::plan_ops(c, {1, true}, m::Phase::kForward);
  ASSERT_EQ(layer.ops(m::Phase::kForward).size(), plan.size());
  for (size_t i = 0; i < plan.size(); ++i) EXPECT_EQ(layer.ops(m::Phase::kForward)[i].name, plan[i].name);
  EXPECT_THROW(layer.run_op(m::Phase::kForward, plan.size(), nullptr), braid::UsageError);
}

}  // namespace
