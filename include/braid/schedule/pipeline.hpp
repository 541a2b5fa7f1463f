// braid/schedule/pipeline.hpp — model folding and the W-shaped pipeline (Figures 7-8), and 1F1B.
//
// 1F1B: P stages, stage s holds layer chunk s (L/P layers); a micro-batch goes forward through
// chunks 0..P-1 and backward through P-1..0.
//
// W-shaped (DHelix model folding): the layers are cut into 2P chunks and folded into a U, so stage s
// holds chunks s and 2P-1-s (fold_stage). A micro-batch's forward visits stages 0..P-1 then P-1..0
// (a V) and its backward does the same (a second V): forward + backward make the W. Because chunk c
// and chunk 2P-1-c live on the same stage, the forward of micro-batch m+P (beta strand) and the
// backward of micro-batch m (alpha strand) move through the stages together: each of their 2P steps
// is one strand-interleaving (SI) block on one stage. The generator emits "units" in this order:
//     warm-up   P forward-only units      F(m)            m = 0..P-1
//     steady    M-P SI units              F(m+P) | B(m)   m = 0..M-P-1
//     cool-down P backward-only units     B(m)            m = M-P..M-1
// (fewer when M < P). Unit u's step k runs on stage fold_stage(k); each stage runs its steps in the
// order of the ideal periodic schedule in which unit u starts at slot 2u (down-steps of stage s fall
// on slots of parity s, up-steps on the other parity, so they never collide).
//
// The simulator runs any such per-stage order under the dependencies (a forward chunk after the
// previous chunk of the same micro-batch, the first backward chunk after the last forward chunk, a
// backward chunk after the next chunk's backward) and reports make-span, bubble ratio and peak
// activation memory (a micro-batch's activations of a chunk are held from the start of its forward
// chunk to the end of its backward chunk).
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace braid::schedule {

/// Which pipeline schedule.
enum class PipeKind { OneFOneB, WShaped };

/// One chunk pass of one micro-batch.
struct PipeTask {
  int mb = 0;           // micro-batch
  int chunk = 0;        // layer chunk (0..P-1 for 1F1B, 0..2P-1 for W)
  bool backward = false;
};

/// What a stage runs in one slot: one task, or an SI block (a forward and a backward task
/// co-executed; tasks[0] is the forward).
struct PipeSlot {
  std::vector<PipeTask> tasks;
  double start = 0, end = 0;   // filled by simulate_pipeline
};

/// A schedule: per stage, the slots in execution order.
struct PipeSchedule {
  PipeKind kind = PipeKind::OneFOneB;
  int stages = 0, microbatches = 0, chunks = 0;
  std::vector<std::vector<PipeSlot>> stage_slots;
};

/// Per-stage costs, for a micro-batch through all of a stage's layers.
struct PipeCosts {
  double t_fwd = 1.0;        // forward time of one stage's layers (L/P layers)
  double t_bwd = 2.0;        // backward time of the same layers
  double si_factor = 1.0;    // SI block time = si_factor * (forward + backward time of its tasks)
  double act = 1.0;          // activation memory of one micro-batch over one stage's layers
};

/// Results of a simulation.
struct PipeStats {
  double makespan = 0;
  double busy = 0;                 // sum over stages of slot durations
  double bubble_ratio = 0;         // 1 - busy / (stages * makespan)
  double peak_activation = 0;      // max over stages and time, in units of PipeCosts::act
  std::vector<double> stage_peak;  // per stage
};

/// The stage that holds chunk c of a W-shaped (folded) pipeline with P stages.
int fold_stage(int chunk, int stages);
/// The stage that holds chunk c of `s` (1F1B: c; W: fold_stage).
int chunk_stage(const PipeSchedule& s, int chunk);

/// Classic 1F1B (PipeDream-flush): stage s warms up with min(P-1-s, M) forwards.
PipeSchedule make_1f1b(int stages, int microbatches);
/// DHelix's W-shaped schedule with model folding and SI blocks (see above).
PipeSchedule make_w_shaped(int stages, int microbatches);

/// `s` with every SI block run as two tasks one after the other (forward first, or with
/// `backward_first` the backward first) instead of co-executed. Co-running two strands pays off when a
/// stage has collectives to hide (tensor parallelism inside the stage); with TP = 1 per stage the two
/// strands' GEMMs only contend for the SMs, and split blocks also hand each task's output on as soon as
/// that task ends (the forward's activation, or the backward's input gradient, goes to the next stage
/// before the other half runs). Backward first frees the backward's activation set before the forward
/// takes one, so the stage holds one set less. Every other slot is kept as it is.
PipeSchedule split_si_blocks(const PipeSchedule& s, bool backward_first);

/// Runs `s` as early as dependencies and stage order allow, filling slot times. Throws UsageError
/// on a deadlock (an order that cannot run).
PipeStats simulate_pipeline(PipeSchedule& s, const PipeCosts& c = {});

/// Empty when the simulated `s` is a correct schedule: every micro-batch runs each chunk forward
/// once and backward once, each on the chunk's stage, forward chunks in order 0..C-1, backward in
/// order C-1..0 after the forward, and no stage runs two slots at once. Otherwise the first problem.
std::string check_pipeline(const PipeSchedule& s);

/// The bubble ratio of 1F1B with equal-cost micro-batches: (P-1)/(M+P-1).
double ideal_1f1b_bubble(int stages, int microbatches);

/// "1f1b" or "w".
const char* pipe_kind_name(PipeKind k);

/// No pipelining: micro-batch after micro-batch, each through every chunk forward then backward; each
/// stage runs its own chunks' tasks in that order. With `chunking`'s chunks and stages (1F1B: P chunks,
/// W: 2P folded), it is the reference a pipelined run of the same chunking must reproduce bit for bit.
PipeSchedule make_sequential_pipe(PipeKind chunking, int stages, int microbatches);

/// Which activation set ("slot") of each of a stage's chunks every micro-batch uses when the stage runs
/// its slots in order. A forward task takes the lowest free slot of its chunk when its block starts; a
/// slot is released after the block that ends the micro-batch's use of it: its backward, or — when the
/// chunk before it is on the same stage and reads its input gradient from it — that chunk's backward.
struct SlotPlan {
  std::map<std::pair<int, int>, int> slot;  // (micro-batch, chunk) -> slot index
  std::vector<int> count;                   // per chunk: slots needed (0 for chunks of other stages)
};
/// Throws UsageError if a task of another stage is in the stage's list, or a backward has no forward.
SlotPlan plan_slots(const PipeSchedule& s, int stage);

/// Empty when every chunk boundary that crosses stages is a FIFO: the producing stage runs the boundary's
/// tasks (forward of chunk c, backward of chunk c+1) in the same micro-batch order as the consuming stage
/// runs the receiving tasks (forward of c+1, backward of c). A pipeline executor that passes tensors over
/// one ordered channel per boundary and direction needs it; otherwise the first mismatch.
std::string check_channel_order(const PipeSchedule& s);

}  // namespace braid::schedule
