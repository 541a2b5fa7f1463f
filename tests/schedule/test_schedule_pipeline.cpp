// Model folding and the W-shaped pipeline against 1F1B: correctness, bubble ratio, activations.
#include <gtest/gtest.h>

#include <string>

#include "braid/errors.hpp"
#include "braid/schedule.hpp"
#include "braid/schedule/pipeline_exec.hpp"

using namespace braid::schedule;

TEST(Folding, ChunksFoldIntoAU) {
  for (int P : {1, 2, 4, 8}) {
    std::vector<int> held(P, 0);
    for (int c = 0; c < 2 * P; ++c) {
      const int s = fold_stage(c, P);
      ASSERT_GE(s, 0);
      ASSERT_LT(s, P);
      EXPECT_EQ(s, fold_stage(2 * P - 1 - c, P));  // chunk c and its mirror share a stage
      ++held[s];
    }
    for (int s = 0; s < P; ++s) EXPECT_EQ(held[s], 2);  // same parameter count per stage as 1F1B
    EXPECT_EQ(fold_stage(0, P), 0);
    EXPECT_EQ(fold_stage(P - 1, P), P - 1);
    EXPECT_EQ(fold_stage(P, P), P - 1);
    EXPECT_EQ(fold_stage(2 * P - 1, P), 0);
  }
}

TEST(Folding, SchedulesAreCorrect) {
  // check_pipeline: every micro-batch visits every chunk forward in order 0..C-1 and backward in
  // order C-1..0 on the chunk's own stage, and no stage runs two slots at once.
  for (int P : {1, 2, 3, 4, 8})
    for (int M = 1; M <= 4 * P + 1; ++M)
      for (PipeKind k : {PipeKind::OneFOneB, PipeKind::WShaped}) {
        PipeSchedule s = k == PipeKind::OneFOneB ? make_1f1b(P, M) : make_w_shaped(P, M);
        simulate_pipeline(s, PipeCosts{1.0, 2.0, 0.8, 1.0});
        EXPECT_EQ(check_pipeline(s), "") << pipe_kind_name(k) << " P=" << P << " M=" << M;
      }
}

TEST(Folding, SiBlocksPairMirrorChunksOfTwoStrands) {
  const int P = 4, M = 12;
  PipeSchedule s = make_w_shaped(P, M);
  simulate_pipeline(s);
  int si = 0;
  for (int st = 0; st < P; ++st)
    for (const auto& slot : s.stage_slots[st]) {
      if (slot.tasks.size() != 2) continue;
      ++si;
      const PipeTask& f = slot.tasks[0];
      const PipeTask& b = slot.tasks[1];
      EXPECT_FALSE(f.backward);
      EXPECT_TRUE(b.backward);
      EXPECT_EQ(f.chunk + b.chunk, 2 * P - 1);  // same stage, both strands moving the same way
      EXPECT_EQ(f.mb, b.mb + P);                // beta_{m+P} forward with alpha_m backward
    }
  EXPECT_EQ(si, (M - P) * 2 * P);  // every chunk of every steady-phase pair is co-executed
}

TEST(Pipeline, OneFOneBBubbleIsTheTextbookValue) {
  for (int P : {2, 4, 8})
    for (int M : {P, P + 1, 2 * P, 3 * P + 1, 4 * P}) {
      PipeSchedule s = make_1f1b(P, M);
      const PipeStats r = simulate_pipeline(s);
      EXPECT_NEAR(r.bubble_ratio, ideal_1f1b_bubble(P, M), 1e-12) << "P=" << P << " M=" << M;
      EXPECT_NEAR(r.makespan, (M + P - 1) * 3.0, 1e-9);
    }
}

TEST(Pipeline, WShapedKeepsTheOneFOneBBubble) {
  // Stated precisely: with SI blocks costing the sum of their two halves (si_factor 1, i.e. the
  // schedule shape alone), the W-shaped bubble ratio equals 1F1B's for every M > P and is never
  // larger for M <= P (no SI blocks there; the folded chunks only fill the pipeline faster).
  for (double tb : {1.0, 2.0, 3.0})
    for (int P : {2, 4, 8})
      for (int M = 1; M <= 4 * P; ++M) {
        const PipeCosts c{1.0, tb, 1.0, 1.0};
        PipeSchedule a = make_1f1b(P, M), w = make_w_shaped(P, M);
        const PipeStats ra = simulate_pipeline(a, c), rw = simulate_pipeline(w, c);
        if (M > P) {
          EXPECT_NEAR(rw.bubble_ratio, ra.bubble_ratio, 1e-12) << "P=" << P << " M=" << M << " tb=" << tb;
          EXPECT_NEAR(rw.makespan, ra.makespan, 1e-9);
        } else {
          EXPECT_LE(rw.bubble_ratio, ra.bubble_ratio + 1e-12) << "P=" << P << " M=" << M << " tb=" << tb;
        }
      }
}

TEST(Pipeline, PeakActivations) {
  // In units of one micro-batch's activations over one stage's layers: 1F1B peaks at min(P, M) on
  // stage 0 (stage s holds min(P - s, M)); W holds P + 1/2 on every stage once SI blocks run (the
  // forward chunk of an SI block allocates before its backward chunk frees), min(P, M) otherwise.
  for (int P : {2, 4, 8})
    for (int M : {1, P - 1, P, P + 1, 2 * P, 4 * P}) {
      if (M < 1) continue;
      PipeSchedule a = make_1f1b(P, M), w = make_w_shaped(P, M);
      const PipeStats ra = simulate_pipeline(a), rw = simulate_pipeline(w);
      EXPECT_DOUBLE_EQ(ra.peak_activation, std::min(P, M)) << "P=" << P << " M=" << M;
      for (int s = 0; s < P; ++s) EXPECT_DOUBLE_EQ(ra.stage_peak[s], std::min(P - s, M));
      if (M > P) {
        EXPECT_DOUBLE_EQ(rw.peak_activation, P + 0.5) << "P=" << P << " M=" << M;
        if (M >= 2 * P) {
          for (int s = 0; s < P; ++s) EXPECT_DOUBLE_EQ(rw.stage_peak[s], P + 0.5) << "stage " << s;
        }
      } else {
        EXPECT_DOUBLE_EQ(rw.peak_activation, std::min(P, M)) << "P=" << P << " M=" << M;
      }
    }
}

TEST(Pipeline, FasterSiBlocksShortenOnlyTheWSchedule) {
  const int P = 4, M = 16;
  PipeSchedule a1 = make_1f1b(P, M), a2 = make_1f1b(P, M), w1 = make_w_shaped(P, M), w2 = make_w_shaped(P, M);
  const PipeCosts slow{1, 2, 1.0, 1}, fast{1, 2, 0.8, 1};
  EXPECT_DOUBLE_EQ(simulate_pipeline(a1, slow).makespan, simulate_pipeline(a2, fast).makespan);
  const double ws = simulate_pipeline(w1, slow).makespan, wf = simulate_pipeline(w2, fast).makespan;
  EXPECT_LT(wf, ws);
  // Each stage runs 2 steps of each of the M - P SI units; each step saves 0.2 * (0.5 + 1). The
  // make-span shrinks by at least that much (here 9 = 57 - 48; the fill and drain tighten too).
  EXPECT_GE(ws - wf, (M - P) * 2 * 0.2 * 1.5 - 1e-9);
}

// SI blocks split into two tasks (the executor's choice when a stage has no collective to hide): a correct,
// FIFO schedule with no SI block, never slower than the co-executed blocks at si_factor 1 (each half hands
// its output on when it ends), so the bubble stays at 1F1B's or below; backward first holds one activation
// set less.
TEST(Pipeline, SplitSiBlocks) {
  for (int P : {2, 4, 8})
    for (int M : {1, P, P + 1, 2 * P, 4 * P})
      for (double tb : {1.0, 2.0}) {
        const PipeCosts c{1.0, tb, 1.0, 1.0};
        PipeSchedule w = make_w_shaped(P, M), a = make_1f1b(P, M);
        const PipeStats rw = simulate_pipeline(w, c), ra = simulate_pipeline(a, c);
        for (bool bf : {false, true}) {
          const std::string id = std::string(bf ? "bf" : "fb") + " P=" + std::to_string(P) + " M=" + std::to_string(M);
          PipeSchedule s = split_si_blocks(make_w_shaped(P, M), bf);
          size_t tasks_w = 0, tasks_s = 0;
          for (const auto& v : w.stage_slots)
            for (const auto& b : v) tasks_w += b.tasks.size();
          for (const auto& v : s.stage_slots)
            for (const auto& b : v) {
              EXPECT_EQ(b.tasks.size(), 1u) << id;
              tasks_s += b.tasks.size();
            }
          EXPECT_EQ(tasks_s, tasks_w) << id;
          const PipeStats rs = simulate_pipeline(s, c);
          EXPECT_EQ(check_pipeline(s), "") << id;
          EXPECT_EQ(check_channel_order(s), "") << id;
          EXPECT_LE(rs.makespan, rw.makespan + 1e-9) << id;
          // With steady SI units the split fill is shorter by (P - 1) stage forwards (the folded chunks' forward
          // halves reach the next stage a backward earlier), for either order.
          if (M > P) EXPECT_NEAR(rs.makespan, rw.makespan - (P - 1) * c.t_fwd, 1e-9) << id << " tb=" << tb;
          EXPECT_LE(rs.bubble_ratio, ra.bubble_ratio + 1e-12) << id;
          if (M > P) {
            EXPECT_DOUBLE_EQ(rs.peak_activation, bf ? P : P + 0.5) << id << " tb=" << tb;
          } else {
            EXPECT_DOUBLE_EQ(rs.peak_activation, rw.peak_activation) << id;
          }
          for (int st = 0; st < P; ++st) {
            const SlotPlan pw = plan_slots(w, st), ps = plan_slots(s, st);
            int nw = 0, ns = 0;
            for (int k : pw.count) nw += k;
            for (int k : ps.count) ns += k;
            if (bf) EXPECT_LE(ns, nw) << id << " stage " << st;
            else EXPECT_EQ(ns, nw) << id << " stage " << st;
          }
        }
      }
  PipeSchedule one = make_1f1b(2, 4);
  PipeSchedule same = split_si_blocks(one, false);
  EXPECT_EQ(same.stage_slots.size(), one.stage_slots.size());
  for (size_t st = 0; st < one.stage_slots.size(); ++st) EXPECT_EQ(same.stage_slots[st].size(), one.stage_slots[st].size());
}

TEST(Pipeline, DeadlockIsReported) {
  PipeSchedule s = make_1f1b(2, 2);
  std::swap(s.stage_slots[1][0], s.stage_slots[1][1]);  // backward before its forward
  EXPECT_THROW(simulate_pipeline(s), braid::UsageError);
  EXPECT_THROW(make_w_shaped(0, 4), braid::UsageError);
}

// The un-pipelined reference is a correct schedule of the same chunking, with no overlap at all.
TEST(PipelineExec, SequentialScheduleIsCorrect) {
  for (PipeKind k : {PipeKind::OneFOneB, PipeKind::WShaped})
    for (int P : {1, 2, 4})
      for (int M : {1, 3, 8}) {
        PipeSchedule s = make_sequential_pipe(k, P, M);
        EXPECT_EQ(s.chunks, k == PipeKind::OneFOneB ? P : 2 * P);
        PipeCosts c;
        const PipeStats st = simulate_pipeline(s, c);
        EXPECT_EQ(check_pipeline(s), "") << pipe_kind_name(k) << " P=" << P << " M=" << M;
        // Every chunk pass of every micro-batch runs alone.
        EXPECT_DOUBLE_EQ(st.makespan, M * s.chunks * (c.t_fwd + c.t_bwd) / (k == PipeKind::WShaped ? 2 : 1));
        for (int st_i = 0; st_i < P; ++st_i)
          for (int c2 : plan_slots(s, st_i).count) EXPECT_LE(c2, 1);
      }
}

// Slots: one per micro-batch in flight on a chunk; the W schedule's folded chunks hold more.
TEST(PipelineExec, SlotsCoverEveryTaskAndNeverOverlap) {
  for (int P : {2, 4})
    for (int M : {2, 4, 8, 16})
      for (PipeKind k : {PipeKind::OneFOneB, PipeKind::WShaped}) {
        PipeSchedule s = k == PipeKind::OneFOneB ? make_1f1b(P, M) : make_w_shaped(P, M);
        for (int st = 0; st < P; ++st) {
          const SlotPlan sp = plan_slots(s, st);
          int tasks = 0;
          for (const auto& block : s.stage_slots[st])
            for (const auto& t : block.tasks) {
              ++tasks;
              ASSERT_TRUE(sp.slot.count({t.mb, t.chunk}));
              EXPECT_LT(sp.slot.at({t.mb, t.chunk}), sp.count[t.chunk]);
            }
          EXPECT_EQ(int(sp.slot.size()) * 2, tasks);
          for (int c = 0; c < s.chunks; ++c) {
            if (chunk_stage(s, c) != st) {
              EXPECT_EQ(sp.count[c], 0);
              continue;
            }
            EXPECT_GE(sp.count[c], 1);
            EXPECT_LE(sp.count[c], std::min(M, 2 * P + 1)) << pipe_kind_name(k) << " P=" << P << " M=" << M;
          }
        }
        if (k == PipeKind::OneFOneB) {  // stage 0 holds min(P, M) micro-batches (the textbook 1F1B peak)
          EXPECT_EQ(plan_slots(s, 0).count[0], std::min(P, M));
        }
      }
  // A task of another stage is refused.
  PipeSchedule s = make_1f1b(2, 2);
  std::swap(s.stage_slots[0], s.stage_slots[1]);
  EXPECT_THROW(plan_slots(s, 0), braid::Error);
}

// Every boundary between stages is a FIFO in all three generators, so one ordered channel per boundary
// and direction carries the right tensors; a swapped pair of tasks is caught.
TEST(PipelineExec, ChannelsAreFifos) {
  for (int P : {1, 2, 4, 8})
    for (int M : {1, 2, 5, 16}) {
      EXPECT_EQ(check_channel_order(make_1f1b(P, M)), "") << "1f1b P=" << P << " M=" << M;
      EXPECT_EQ(check_channel_order(make_w_shaped(P, M)), "") << "w P=" << P << " M=" << M;
      for (PipeKind k : {PipeKind::OneFOneB, PipeKind::WShaped})
        EXPECT_EQ(check_channel_order(make_sequential_pipe(k, P, M)), "") << "sequential P=" << P << " M=" << M;
    }
  PipeSchedule s = make_1f1b(2, 4);
  auto& v = s.stage_slots[0];
  for (size_t i = 0; i + 1 < v.size(); ++i)  // swap stage 0's first two forwards
    if (!v[i].tasks[0].backward && !v[i + 1].tasks[0].backward) {
      std::swap(v[i], v[i + 1]);
      break;
    }
  EXPECT_NE(check_channel_order(s), "");
}

// The PP executor's channel transports by name (bench pipeline --channels): every name reads back, nothing else does.
TEST(PipelineExec, ChannelTransportNames) {
  for (PipeChannel c : {PipeChannel::kAuto, PipeChannel::kNccl, PipeChannel::kPeerKernel, PipeChannel::kCopyEngine})
    EXPECT_EQ(parse_pipe_channel(pipe_channel_name(c)), c) << pipe_channel_name(c);
  EXPECT_STREQ(pipe_channel_name(PipeChannel::kCopyEngine), "ce");
  for (const char* bad : {"", "tcp", "CE", "nccl,ce"}) EXPECT_THROW(parse_pipe_channel(bad), braid::UsageError) << bad;
  EXPECT_EQ(PipeExecOptions{}.channels, PipeChannel::kAuto);
}
