// One stage per rank: the pipeline executor. 1F1B and the W-shaped schedule (folded chunks, SI blocks
// co-executed by the strand executor) must give, bit for bit, the outputs, input gradients and
// accumulated weight gradients of running the micro-batches one after the other (no pipelining), for
// one and two layers per chunk; a second step must repeat the first exactly (gradients re-zeroed, slots
// reused).
#include <gtest/gtest.h>

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "braid/model.hpp"
#include "braid/runtime.hpp"
#include "braid/schedule/pipeline_exec.hpp"
#include "world_team.hpp"

namespace {

namespace m = braid::model;
namespace sch = braid::schedule;

::testing::Environment* const kEnv = ::testing::AddGlobalTestEnvironment(new braid::test::WorldTeam);
braid::Team& world() { return braid::test::WorldTeam::get(); }

m::ModelConfig tiny() {
  m::ModelConfig c = m::preset("tiny");
  c.name = "pipe-d32";
  c.hidden = 256, c.heads = 8, c.kv_heads = 4, c.seq = 100, c.micro_batch = 2, c.ffn = 512;
  return c;
}

struct Hashes {
  std::vector<double> y, dx, grads;
};

Hashes run(const sch::PipeSchedule& s, int lpc, int steps = 1, int recv_ahead = -1,
           sch::PipeChannel channels = sch::PipeChannel::kAuto) {
  braid::Team& team = world();
  sch::PipeExecOptions o;
  o.layers_per_chunk = lpc, o.seed = 3, o.recv_ahead = recv_ahead, o.channels = channels;
  sch::PipelineExecutor ex(team, tiny(), s, o);
  Hashes first;
  for (int i = 0; i < steps; ++i) {
    ex.step(team.stream());
    team.synchronize(team.stream(), "pipeline test");
    Hashes h{team.allreduce_max(ex.output_hashes()), team.allreduce_max(ex.input_grad_hashes()),
             team.allreduce_max(ex.grad_hashes())};
    if (i == 0) first = h;
    else {
      EXPECT_EQ(h.y, first.y) << "step " << i;
      EXPECT_EQ(h.dx, first.dx) << "step " << i;
      EXPECT_EQ(h.grads, first.grads) << "step " << i;
    }
  }
  const std::vector<const std::vector<double>*> all = {&first.y, &first.dx, &first.grads};
  for (const std::vector<double>* v : all)
    for (double x : *v) EXPECT_NE(x, 0.0) << "a hash is missing (no rank produced it)";
  return first;
}

void expect_same(const Hashes& a, const Hashes& b, const std::string& what) {
  EXPECT_EQ(a.y, b.y) << what << ": outputs";
  EXPECT_EQ(a.dx, b.dx) << what << ": input gradients";
  EXPECT_EQ(a.grads, b.grads) << what << ": weight gradients";
}

TEST(PipelineMpi, SchedulesEqualTheUnpipelinedRun) {
  const int P = world().size();
  for (int lpc : {1, 2})
    for (int M : {1, 2 * P + 1}) {
      const std::string tag = "layers per chunk " + std::to_string(lpc) + ", " + std::to_string(M) + " micro-batches";
      const Hashes ref = run(sch::make_sequential_pipe(sch::PipeKind::WShaped, P, M), lpc, 2);
      ASSERT_EQ(ref.grads.size(), size_t(2 * P * lpc));
      expect_same(run(sch::make_w_shaped(P, M), lpc, 2), ref, "W-shaped, " + tag);
      for (bool bf : {false, true})  // SI blocks run as two tasks in a row
        expect_same(run(sch::split_si_blocks(sch::make_w_shaped(P, M), bf), lpc, 2), ref,
                    std::string("W-shaped, SI blocks split ") + (bf ? "backward first, " : "forward first, ") + tag);
      expect_same(run(sch::make_1f1b(P, M), 2 * lpc), ref, "1F1B, " + tag);
      for (int ahead : {0, 1}) {  // receives posted only a slot or two before their consumer
        const std::string at = ", receives posted " + std::to_string(ahead) + " slots ahead, " + tag;
        expect_same(run(sch::make_w_shaped(P, M), lpc, 2, ahead), ref, "W-shaped" + at);
        expect_same(run(sch::make_1f1b(P, M), 2 * lpc, 1, ahead), ref, "1F1B" + at);
      }
      expect_same(run(sch::make_sequential_pipe(sch::PipeKind::OneFOneB, P, M), 2 * lpc), ref,
                  "unpipelined with 1F1B chunks, " + tag);
    }
}

// Every channel transport the team can run (copy engines and peer kernels with peer access, NCCL with NCCL),
// three steps each so that every flag and buffer is reused across steps, against the default's reference.
TEST(PipelineMpi, ChannelTransportsEqualTheUnpipelinedRun) {
  braid::Team& team = world();
  const int P = team.size();
  std::vector<sch::PipeChannel> chans;
  if (team.peer_ok()) chans = {sch::PipeChannel::kCopyEngine, sch::PipeChannel::kPeerKernel};
  if (team.has_nccl()) chans.push_back(sch::PipeChannel::kNccl);
  for (int M : {1, 2 * P + 1}) {
    const std::string tag = std::to_string(M) + " micro-batches";
    const Hashes ref = run(sch::make_sequential_pipe(sch::PipeKind::WShaped, P, M), 1, 1);
    for (sch::PipeChannel ch : chans) {
      const std::string what = std::string(sch::pipe_channel_name(ch)) + " channels, ";
      expect_same(run(sch::make_sequential_pipe(sch::PipeKind::WShaped, P, M), 1, 3, -1, ch), ref,
                  what + "unpipelined, " + tag);
      expect_same(run(sch::make_1f1b(P, M), 2, 3, -1, ch), ref, what + "1F1B, " + tag);
      expect_same(run(sch::split_si_blocks(sch::make_w_shaped(P, M), false), 1, 3, -1, ch), ref,
                  what + "W-shaped, SI blocks split forward first, " + tag);
      expect_same(run(sch::make_w_shaped(P, M), 1, 3, 0, ch), ref, what + "W-shaped, receives posted late, " + tag);
    }
  }
  {
    sch::PipeExecOptions o;
    o.seed = 3;
    sch::PipelineExecutor ex(team, tiny(), sch::make_1f1b(P, 2), o);
    const sch::PipeChannel want = P == 2 && team.peer_ok() ? sch::PipeChannel::kCopyEngine
                                  : team.has_nccl()          ? sch::PipeChannel::kNccl
                                                             : sch::PipeChannel::kPeerKernel;
    EXPECT_EQ(ex.channels(), want) << "the default transport";
  }
  EXPECT_EQ(sch::parse_pipe_channel("ce"), sch::PipeChannel::kCopyEngine);
  EXPECT_THROW(sch::parse_pipe_channel("tcp"), braid::Error);
}

// Block timing: one record per slot of this rank, in order, non-negative, within the compute stream's step.
TEST(PipelineMpi, BlockTimingCoversTheStep) {
  braid::Team& team = world();
  const int P = team.size();
  const sch::PipeSchedule s = sch::make_w_shaped(P, 2 * P + 1);
  sch::PipelineExecutor ex(team, tiny(), s, {1, 3});
  EXPECT_THROW(ex.block_timings(), braid::Error);  // no timed step yet
  ex.set_block_timing(true);
  ex.step(team.stream());
  team.synchronize(team.stream(), "pipeline timing test");
  double zero = -1, step = -1;
  const std::vector<sch::BlockTiming> bt = ex.block_timings(&zero, &step);
  const auto& slots = s.stage_slots[team.rank()];
  ASSERT_EQ(bt.size(), slots.size());
  EXPECT_GE(zero, 0.0);
  double sum = 0, last = 0;
  for (size_t i = 0; i < bt.size(); ++i) {
    EXPECT_EQ(bt[i].tasks, int(slots[i].tasks.size()));
    EXPECT_GE(bt[i].prepare_us, 0.0);
    EXPECT_GT(bt[i].run_us, 0.0);
    EXPECT_GE(bt[i].finish_us, 0.0);
    EXPECT_GE(bt[i].start_us, last - 1.0);
    last = bt[i].start_us;
    sum += bt[i].prepare_us + bt[i].run_us + bt[i].finish_us;
  }
  EXPECT_LE(sum, step * 1.001 + 5.0);
}

TEST(PipelineMpi, RejectsMismatchedStages) {
  braid::Team& team = world();
  EXPECT_THROW(sch::PipelineExecutor(team, tiny(), sch::make_1f1b(team.size() + 1, 2)), braid::Error);
}

}  // namespace
