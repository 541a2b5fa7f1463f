// braid/schedule/strands.hpp — DHelix on the GPU: two micro-batches (strands) of one decoder layer in
// flight, α's forward co-executed with β's backward segment by segment according to a plan.
//
//   model::Layer alpha(cfg, par, comm_a);           // owns the weights
//   model::Layer beta(alpha, comm_b);               // second activation set, same weights
//   auto dag = strand_layer(cfg, par);              // the GPU layer's operators as a schedule::Layer
//   Plan plan = search_plan(PairCost(dag, table));  // or from_plan_file(dag, read_plan(...))
//   StrandExecutor ex(dag, plan, {compute, local, cross});
//   beta.forward(compute);  ...                     // β's forward ran earlier (its activations exist)
//   ex.run(alpha, beta);                            // α forward ‖ β backward, on the three streams
//
// Streams. Compute operators of both strands go to `compute`, collectives to `local` (intra-node) or
// `cross` (inter-node) by the operator's LinkClass. Every op waits for its strand's previous op through
// a CUDA event when that ran on another stream; a plan step ends with a barrier (each of the three
// streams waits for the other two). run() starts by forking `local` and `cross` from `compute` and
// ends by joining them back, so the whole co-executed layer pair is stream-ordered on `compute` and
// can be captured in a CUDA graph (dense layers; an MoE forward synchronises the host, see layer.hpp).
// No device-wide synchronisation, no allocation: every event is created in the constructor.
//
// Issue order inside a step. With one compute stream the host must not enqueue a compute op that
// waits for a collective in flight ahead of the other strand's ready compute ops (it would block the
// stream). The executor therefore issues the two segments in the order of a small list-schedule
// simulation on the op solo times of the DAG (compute, local, cross each one resource; an op starts
// when its resource is free and its strand's previous op has finished; ties: collectives first, then
// the forward strand). The order depends only on the plan and the DAG, never on data, so every rank
// issues its collectives in the same order.
//
// Results. The two strands have separate activation and weight-gradient buffers and every kernel of
// the layer is deterministic, so α's outputs and β's gradients are bitwise those of running the same
// micro-batches one after the other; summing the strands' weight gradients with Layer::add_grads in a
// fixed order (α += β) keeps the sum bitwise too.
#pragma once

#include <cuda_runtime.h>

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "braid/bench.hpp"
#include "braid/model/config.hpp"
#include "braid/model/layer.hpp"
#include "braid/schedule/ops.hpp"
#include "braid/schedule/pairing.hpp"
#include "braid/schedule/profile.hpp"

namespace braid::model {
class Layer;
}

namespace braid::schedule {

/// Which link the GPU layer's collectives use (TP collectives and MoE all-to-alls).
struct StrandLinks {
  LinkClass tp = LinkClass::Local;
  LinkClass a2a = LinkClass::Local;  // EP all-to-all; Cross when experts span nodes
};

/// The GPU layer's operator lists (model::plan_ops) as the DAGs the pairing search works on. Names
/// are "f.<op>" / "b.<op>". Forward: a chain. Backward: the weight-gradient operators (`*_wgrad`,
/// `router_bwd`) have no users inside the layer except the final all-reduce of replicated gradients,
/// which depends on everything before it; every other op depends on the op before it (not counting
/// weight-gradient ops). Solo times are analytic estimates (Hardware), replaced by a PairTable's
/// solo times where given.
Layer strand_layer(const model::ModelConfig& c, const model::Parallel& p, const StrandLinks& links = {},
                   const Hardware& hw = {});
/// Replaces the DAG's solo times by those recorded in `t` (where present).
void apply_solo_times(Layer& dag, const PairTable& t);
/// A parallel-setting string for pair and plan files, e.g. "tp=2,sp=1,ep=1,seq=8192,mb=1".
std::string strand_parallel_tag(const model::ModelConfig& c, const model::Parallel& p);

/// The strand executor's model of one step: a list schedule of the forward segment `fseg` and the
/// backward segment `bseg` (op indices, each run in its given order), every op starting at the earliest
/// time its stream (compute, local or cross link, by Op::link) and its strand's previous op are done,
/// taking its solo time; ties go to collectives, then to the forward strand. Returns the (pass, op) issue
/// order; adds the make-span to max(*end_us, ...) when end_us is given. StrandExecutor issues steps in
/// this order.
std::vector<std::pair<Pass, int>> list_schedule(const Layer& dag, const std::vector<int>& fseg,
                                                const std::vector<int>& bseg, double* end_us = nullptr);

/// Make-span (us) of `plan` run by the barrier-free executor, under list_schedule's model: the steps'
/// issue orders back to back, each op starting when its stream and its strand's previous op are done.
/// No co-run slowdown: a lower bound, for comparing plans' issue orders.
double plan_makespan_us(const Layer& dag, const Plan& plan);

/// One op of a plan as the barrier-free executor's model runs it (plan_makespan_us): its pass and
/// index, start and end (us).
struct OpSpan {
  Pass pass;
  int op;
  double start_us, end_us;
};
/// Every op of `plan` with its simulated start and end, in issue order.
std::vector<OpSpan> plan_timeline(const Layer& dag, const Plan& plan);

/// The GEMMs worth capping (StrandExecutor::set_gemm_caps): in `plan`'s timeline, the GEMM operators
/// (type "gemm") whose span overlaps a collective of the other strand — a persistent GEMM that takes every
/// SM holds such a collective's CTAs back. Indexed like dag.fwd / dag.bwd.
std::pair<std::vector<char>, std::vector<char>> gemms_beside_collectives(const Layer& dag, const Plan& plan);

/// A tensor the forward saves for the backward: written by forward op `producer` ("f.<op>"), last read
/// by backward op `last_reader` ("b.<op>").
struct SavedTensor {
  std::string name;
  double bytes = 0;
  std::string producer, last_reader;  // last_reader: the last reader in the backward's own (DAG) order
  std::vector<std::string> other_readers;  // backward ops that also read it (an issue order may run one later)
};
/// The saved activations of the GPU layer (model::Layer, src/model/layer.cu) per rank, with their producer
/// and last reader; the layer's interfaces (x, y, dy, dx) are not in it. MoE layers: the attention half,
/// the router's input and routing state, the combine's input and the experts' inputs and activations at the
/// layer's worst-case capacity (T * top_k rows per rank). in_place_gathers: the layer's copy-engine collectives
/// (model::Layer::copy_engine_collectives) gather h1f / h2f in place, its norms writing their rank's slots first —
/// f.norm1 and f.residual_norm2 are then those tensors' producers (what memory waits must precede).
std::vector<SavedTensor> saved_tensors(const model::ModelConfig& c, const model::Parallel& p,
                                       bool in_place_gathers = false);

/// Peak of the two strands' saved activations when both live in one arena with ideal placement: β's
/// tensors (its forward ran earlier) are all live at the start and each is freed when its last reader
/// ends; α's are allocated when their producer starts. Times from plan_timeline; `one_set_bytes` is one
/// strand's saved set (what a single strand holds), so peak / one_set is the saved-activation memory of
/// two strands relative to one.
struct ArenaPeak {
  double one_set_bytes = 0, peak_bytes = 0, peak_at_us = 0;
};
ArenaPeak two_strand_arena_peak(const Layer& dag, const Plan& plan, const std::vector<SavedTensor>& saved);

/// A static placement of both strands' saved activations in one pool that works for every unit, the two
/// layers swapping roles: layer a's tensor i and layer b's tensor j may share bytes only when, in the issue
/// `order`, the backward op that last reads each comes before the forward op that writes the other
/// (q_j < p_i and q_i < p_j: one stream wait on the reader's event before the writer orders them, with a
/// and b either way round). Tensors of one layer never share (all are live when its forward ends). First
/// fit over several insertion orders (largest tensors first with a's and b's copy in turn, a's set then
/// b's, and 4000 seeded random permutations), the smallest pool kept; `lower_bound_bytes` is the heaviest
/// set of pairwise-conflicting tensors, which no placement for this order can go below. Deterministic.
struct ArenaPlacement {
  std::vector<double> offset_a, offset_b;  // bytes, per saved tensor (saved_tensors order)
  double pool_bytes = 0, one_set_bytes = 0;
  double lower_bound_bytes = 0;  // heaviest clique of the conflict graph (pool_bytes == it: optimal)
};
/// Which placement two_strand_placement keeps when not simply the smallest pool: among the candidate
/// placements (the insertion orders above, each distinct one once) whose pool fits `budget_bytes`, the one
/// with the smallest `cost(saved, placement)` (ties: the smaller pool; `saved` is the placement's own tensor
/// list); none fitting: the smallest pool, as without a choice. For a pool placed for speed rather than size
/// within a memory budget (placement_wait_cost: a wait on a backward reader that is still running stalls the
/// forward; a larger pool within the budget can place the forward's writes where the readers have finished).
struct PlacementChoice {
  double budget_bytes = 0;
  std::function<double(const std::vector<SavedTensor>&, const ArenaPlacement&)> cost;
};
ArenaPlacement two_strand_placement(const Layer& dag, const std::vector<std::pair<Pass, int>>& order,
                                    const std::vector<SavedTensor>& saved, const PlacementChoice* choice = nullptr);
/// The heaviest clique of that conflict graph alone (two_strand_placement's lower_bound_bytes): what no
/// static pool for `order` goes below, cheap enough for a search.
double two_strand_pool_bound(const Layer& dag, const std::vector<std::pair<Pass, int>>& order,
                             const std::vector<SavedTensor>& saved);
/// The issue order a plan runs in (its steps' list schedules back to back).
std::vector<std::pair<Pass, int>> plan_issue_order(const Layer& dag, const Plan& plan);

/// The whole-pass list schedule under an activation budget: a forward op that writes saved tensors
/// starts only when the backward strand's frees (each saved tensor of β at the end of its last reader)
/// leave room within `budget_bytes` for the two strands' saved sets together (β's whole set at the
/// start); while they do not, β's ops go first. A model of what the executor would run with a shared
/// arena and an event edge from each freeing β op to the α op that reuses its memory (neither built).
/// Throws UsageError when the budget is below one set plus the largest forward allocation.
struct BudgetedSchedule {
  std::vector<std::pair<Pass, int>> order;
  double makespan_us = 0;
};
BudgetedSchedule budgeted_whole_pass(const Layer& dag, const std::vector<SavedTensor>& saved, double budget_bytes,
                                     const Plan& searched = {});

/// The interleaving of the two whole passes (each strand's ops in `searched`'s orders, or the DAG's)
/// with the smallest make-span under the executor model of plan_makespan_us (an op starts when its stream
/// and its strand's previous op are done, solo times, no co-run slowdown). A dynamic programme over
/// (forward ops issued, backward ops issued): each cell keeps its non-dominated states (the three streams'
/// and two strands' free times), at most `beam` of them (smallest latest-finish first); exact when no
/// cell overflows. Never worse than list_schedule's greedy order (returned instead if the beam lost it).
/// The order runs on the executor as order_plan(dag, order). move_sinks: the backward strand's
/// weight-gradient operators (and the MoE router's) are placed by the search too — anywhere after their
/// dependencies — instead of where `searched` put them (cells then also carry the set of sinks issued).
BudgetedSchedule best_issue_order(const Layer& dag, const Plan& searched = {}, int beam = 256,
                                  bool move_sinks = false);

/// The executor model with co-run slowdown, for an issue order (what StrandExecutor runs): each stream
/// takes its ops in issue order; an op starts when the previous op on its stream and its dependencies are
/// done (its strand's previous op, or with dag.dep_ready its DAG deps). While ops overlap each progresses
/// at rate 1/k, k the largest pairwise slowdown among the ops running beside it, from the pair table's
/// co-run time T_ab of a and b: k(a, b) = 1 + weight * max(0, T_ab - max(d_a, d_b)) / min(d_a, d_b) (both
/// slowed alike; weight 1 and T_ab = d_a + d_b, no overlap at all, give k = 2 over the shorter op);
/// k = 1 for pairs the table lacks (e.g. two collectives on two links). d: the ops' solo_us. weight 0 is
/// plan_makespan_us's model. The profiler's pairs (both ops started together) overstate what the
/// executor sees: on the throttled 70B layer weight 0.4 — chosen on one run's 12 measured variants,
/// checked on another run's 11 — predicts the measured make-spans within 4.1% / 3.1% (mean; Spearman
/// 0.82 / 0.95), the solo model within 12.9% / 14.7% (0.62 / 0.83) (docs/dhelix.md). Event-driven;
/// returns the make-span (us).
/// fwd_waits (optional): one activation pool's memory waits (memory_waits; StrandExecutor::set_memory_waits):
/// forward op i starts only after every backward op in fwd_waits[i] is done (each issued before it: UsageError
/// otherwise). Empty: no such waits.
inline constexpr double kCorunWeight = 0.4;
double corun_makespan_us(const Layer& dag, const std::vector<std::pair<Pass, int>>& order, const PairTable& table,
                         double weight = kCorunWeight, const std::vector<std::vector<int>>& fwd_waits = {});

/// A local search over issue orders under corun_makespan_us: starting from each of `starts`, adjacent ops
/// of different passes are swapped (each pass keeps its own order) while that shortens the co-run
/// make-span (first improvement, every position, until none does or `max_rounds`). Returns the best
/// order found (and its model make-span in makespan_us). Deterministic.
BudgetedSchedule corun_issue_order(const Layer& dag, const std::vector<std::vector<std::pair<Pass, int>>>& starts,
                                   const PairTable& table, double weight = kCorunWeight, int max_rounds = 200);

/// corun_issue_order with freer moves: one op moved to any position that keeps each of its dependencies
/// before it, every op depending on it after it, and a host-gated op after its gate (Op::host_waits_for).
/// So the backward strand's weight-gradient GEMMs (and on a dep_ready DAG the ops beside them) may move
/// anywhere after their inputs: the filler the compute stream lacks while both strands wait on
/// collectives. Every such order is valid for the executor (a pass's operators run in an order of its
/// DAG; Layer::dep_ready's note says why a moved weight-gradient operator is safe). Rounds of first improvement
/// of corun_makespan_us (every op, every position) until none improves or `max_rounds`; the best
/// over `starts` (each a valid order). Deterministic. On the throttled 70B layer (pair table e782a52,
/// two links, dep_ready) it takes the whole-pass order's 22.9 ms to 20.9 ms in the model (docs/dhelix.md,
/// fifty-first session).
BudgetedSchedule corun_moves_issue_order(const Layer& dag, const std::vector<std::vector<std::pair<Pass, int>>>& starts,
                                         const PairTable& table, double weight = kCorunWeight, int max_rounds = 100);

/// A local search for an issue order whose static two-strand pool fits `budget_bytes` (by
/// two_strand_pool_bound) with the shortest co-run make-span: from each of `starts`, moves shift one op
/// past 1..16 consecutive ops of the other pass (each pass keeps its own order, so every order is valid);
/// while the bound is over budget, the move that lowers it most (ties: the shorter make-span); then first
/// improvements of the make-span among moves that keep the bound within budget. Returns the fastest fitting order found;
/// if none fits, the lowest-bound order with makespan_us = +inf. Deterministic.
BudgetedSchedule pool_bounded_issue_order(const Layer& dag, const std::vector<std::vector<std::pair<Pass, int>>>& starts,
                                          const std::vector<SavedTensor>& saved, double budget_bytes,
                                          const PairTable& table, double weight = kCorunWeight, int max_rounds = 200);

/// corun_moves_issue_order's free moves (any op to any position its dependencies allow) under
/// pool_bounded_issue_order's budget: from each start whose two_strand_pool_bound fits `budget_bytes`
/// (others are skipped), first improvements of the co-run make-span among moves that keep the bound within
/// it. So a dep_ready two-link order can fill the compute stream with moved operators and still run in one
/// activation pool. Returns the fastest fitting order found; makespan_us = +inf and an empty order when
/// no start fits. Deterministic.
BudgetedSchedule pool_bounded_moves_issue_order(const Layer& dag,
                                                const std::vector<std::vector<std::pair<Pass, int>>>& starts,
                                                const std::vector<SavedTensor>& saved, double budget_bytes,
                                                const PairTable& table, double weight = kCorunWeight,
                                                int max_rounds = 100);

/// The one-activation-pool search `bench strands` and `plan-strands` run (docs/dhelix.md, fifty-third and
/// fifty-fourth sessions): pool_bounded_issue_order over `starts1` on `dag` (one link) and over `starts2` on
/// two_link_layer(dag) (plus the one-link fit: the pool bound depends on the order only), then
/// pool_bounded_moves_issue_order from the fitting ones on dep_ready_layer(two_link_layer(dag)) at each of
/// `weights`, each distinct order once (in `weights` order). `saved`, `budget_bytes` as pool_bounded_issue_order.
struct OnePoolOrders {
  BudgetedSchedule one_link, two_links;  // makespan_us = +inf where no order fits the budget
  struct Moves {
    double weight = 0;                   // the co-run weight the search ran at
    std::vector<std::pair<Pass, int>> order;  // on dep_ready_layer(two_link_layer(dag))
    double makespan_us = 0;              // corun_makespan_us at `weight` (two activation sets, no waits)
  };
  std::vector<Moves> moves;  // empty when neither pool-bounded search fits
};
OnePoolOrders one_pool_orders(const Layer& dag, const std::vector<std::vector<std::pair<Pass, int>>>& starts1,
                              const std::vector<std::vector<std::pair<Pass, int>>>& starts2, const PairTable& table,
                              const std::vector<SavedTensor>& saved, double budget_bytes,
                              const std::vector<double>& weights = {kCorunWeight, 0.0, 0.2, 0.7, 1.0});
/// The PlacementChoice the moves arena runs with (`bench strands`' strands-arena-*-moves-*): among the
/// placements of `order` within `budget_bytes`, the least placement_wait_cost on `dag` at `weight`. The
/// returned choice refers to `dag`, `order` and `table`: they must outlive it.
PlacementChoice wait_aware_choice(const Layer& dag, const std::vector<std::pair<Pass, int>>& order,
                                  const PairTable& table, double budget_bytes, double weight = kCorunWeight);

/// `dag` with the backward strand's local-link collectives on the cross-link stream: each strand's
/// collectives get their own stream, as round-robin's do (with one communicator per strand they then run
/// side by side). For comparisons under a per-communicator throttle; on one real link they would contend.
Layer two_link_layer(Layer dag);

/// `dag` with Layer::dep_ready set: the executor makes an operator wait only for its DAG dependencies
/// (events of the latest dependency on each other stream), not for its strand's previous operator; the
/// executor model (list_schedule, plan_timeline, plan_makespan_us) starts it at the end of its latest
/// dependency. Safe for model::Layer strands because its backward weight-gradient operators (the only
/// operators off the chain) read saved activations and scratch that no later operator of the pass writes
/// (src/model/layer.cu). best_issue_order does not support it (throws UsageError).
Layer dep_ready_layer(Layer dag);

/// One strand's issue order for a pass with its weight-gradient operators (sinks: *_wgrad, router_bwd) moved beside
/// its own collectives: each sink is held back from its place in the pass order; after each collective is issued,
/// the most recently held sinks follow it until their solo times reach the collective's solo time x `comm_scale`
/// (after the pass's last collective, every held sink); an operator that depends on a held sink gets it first; what is
/// still held at the end follows. With the collectives on a stream of their own (StrandStack::pass_chained_rr's
/// moves) those sinks then run while the collective moves, as Megatron overlaps the weight-gradient GEMM with the
/// input gradient's reduce-scatter. Returns operator indices of pass `p`, every operator once, dependencies first.
std::vector<int> sinks_beside_collectives(const Layer& dag, Pass p, double comm_scale = 3.0);

/// `dag` for layers with model::Layer::set_opening_chunks on: the pairs that open each pass (f.ag_h1 -> f.qkv_proj;
/// b.ag_dy -> b.down_proj_dgrad) split across their operators, the GEMM operator waiting for each chunk of the
/// all-gather itself. So the GEMM operator no longer depends on the all-gather operator (it takes the all-gather's own
/// dependencies instead), and every other operator that depended on the all-gather (what reads the gathered tensor)
/// depends on the GEMM operator too (strand_layer's DAGs have that already: the forward is a chain, a backward sink
/// depends on the main operator before it). Only a dependency-ready executor (dep_ready_layer) then lets the GEMM start
/// before the whole gather ends; a chained one still waits for its strand's previous operator. The all-gather must stay
/// before the GEMM in every pass's own order (the layer throws otherwise): plans made on `dag` keep it. Times are kept.
/// Pairs the DAG lacks (no sequence parallelism; the MoE backward) are left alone.
Layer opening_chunked_layer(Layer dag);

/// The backward operators each forward operator must wait for when both layers' saved activations live in
/// one pool placed by two_strand_placement: forward op i waits for every backward op that last reads a
/// tensor of the backward layer overlapping one that op i writes for the forward layer. `a_forward`: layer
/// a (placement.offset_a) runs the forward. Every wait points backwards in `order` (the placement's rule).
std::vector<std::vector<int>> memory_waits(const Layer& dag, const std::vector<SavedTensor>& saved,
                                           const ArenaPlacement& placement, bool a_forward);
/// The co-run model's make-span of `order` run in one pool placed as `placement` (corun_makespan_us with the
/// pool's memory waits, memory_waits), the mean of the two roles (a forward, then b forward): what a
/// PlacementChoice minimizes to keep the waits a placement adds off the order's critical path.
double placement_wait_cost(const Layer& dag, const std::vector<std::pair<Pass, int>>& order,
                           const std::vector<SavedTensor>& saved, const ArenaPlacement& placement,
                           const PairTable& table, double weight = kCorunWeight);

/// A stack's slot handed from one layer's backward to the next layer's forward (StrandStack::pass_chained):
/// for each forward op, the backward ops it must wait for because it writes one of the saved tensors
/// `names` that they read (every reader, last_reader and other_readers) in the same memory.
std::vector<std::vector<int>> slot_reuse_waits(const Layer& dag, const std::vector<SavedTensor>& saved,
                                               const std::vector<std::string>& names);

/// Device memory that two strands' layers place saved tensors in (SharedActivationPool, StrandStack). Where both
/// layers run their collectives on copy engines (model::Layer::copy_engine_collectives: nccl-ce), a window of a's
/// comm registered in b's as well (Comm::alloc_window, Comm::register_window), so the all-gathers of placed tensors
/// stay in place on the copy engines (model::Layer::place_saved); else cudaMalloc. Collective over the ranks then
/// (construction and destruction, in the same order on every rank); both layers' comms must outlive it.
class PlacedMemory {
 public:
  PlacedMemory(model::Layer& a, model::Layer& b, size_t bytes);
  ~PlacedMemory();
  PlacedMemory(const PlacedMemory&) = delete;
  PlacedMemory& operator=(const PlacedMemory&) = delete;
  void* get() const { return p_; }
  bool window() const { return window_; }
  /// Whether PlacedMemory for these two layers is a window (known before its size: a placement needs it first).
  static bool windowed(const model::Layer& a, const model::Layer& b);

 private:
  model::Comm* ca_ = nullptr;  // the window's owner (window_)
  model::Comm* cb_ = nullptr;  // where it is registered too
  void* p_ = nullptr;
  bool window_ = false;
};

/// Both strands' saved activations in one device pool: two_strand_placement over `order` (each tensor
/// rounded up to 256 bytes, sizes from a.saved_layout()), placed into `a` and `b` with
/// model::Layer::place_saved (they free their own copies), and the memory waits for `a` running the
/// forward (StrandExecutor::set_memory_waits), and for `b` running it. The placement assumes the steady
/// state: units alternate roles (a forward with b backward, then b forward with a backward, in the same
/// issue order), so each strand's backward reads the set its own forward wrote one unit earlier; running a
/// forward twice in a row into the pool overwrites the other strand's set. Dense and MoE layers of
/// configuration (c, p). Freed with the holder. The pool is PlacedMemory (a window of both layers' comms for
/// copy-engine layers, whose placement then names the norms as h1f / h2f's producers: saved_tensors' in_place_gathers).
struct SharedActivationPool {
  std::unique_ptr<PlacedMemory> memory;
  void* base = nullptr;
  double bytes = 0, one_set = 0;
  std::vector<std::vector<int>> waits;    // `a` runs the forward (b the backward)
  std::vector<std::vector<int>> waits_b;  // the next unit, roles swapped: `b` runs the forward, `a` the backward
  std::vector<SavedTensor> saved;         // the placed tensors (bytes rounded to 256), and where each layer's lies
  std::vector<double> offset_a, offset_b;
  /// choice (optional): the placement picked by PlacementChoice (its cost sees the layer's own tensor sizes).
  SharedActivationPool(const Layer& dag, const std::vector<std::pair<Pass, int>>& order, const model::ModelConfig& c,
                       const model::Parallel& p, model::Layer& a, model::Layer& b,
                       const PlacementChoice* choice = nullptr);
  ~SharedActivationPool();
  SharedActivationPool(const SharedActivationPool&) = delete;
  SharedActivationPool& operator=(const SharedActivationPool&) = delete;
};

class StrandExecutor;
namespace detail {
struct IssueState;  // strands.cu: one issue call's sequence and bookkeeping
}

/// Per strand (0: the forward, 1: the backward) and stream (compute, local, cross): events recorded after
/// the strand's last operator on that stream in one chained unit (StrandExecutor::run_chained). The owner
/// creates the events; used[s][j] says whether strand s ran anything on stream j.
struct StrandTailEvents {
  cudaEvent_t ev[2][3] = {};
  bool used[2][3] = {};
};

/// Chained units' memory hand-over at operator grain (StrandStack::pass_chained with split slots): forward
/// op i waits for the events before_fwd[i] (recorded by an earlier unit) before it is issued; an event
/// after_bwd[j] (when not null) is recorded after backward op j. Empty vectors: none.
struct ChainMemoryEvents {
  std::vector<std::vector<cudaEvent_t>> before_fwd;  // [forward op]
  std::vector<cudaEvent_t> after_bwd;                 // [backward op]
};

class OpTrace;  // below: GPU time per operator of a traced run

/// DHelix over a stack of layers, as a model stage runs it: strand f's forward through layers 0..L-1
/// beside strand b's backward through layers L-1..0, one unit per layer (f's layer i with b's layer
/// L-1-i), roles swapped every pass. The L layers are the two layer objects `a` and `b` (one weight copy,
/// shared: a real stack's per-layer weights would only add to both sides of the memory comparison);
/// what differs per layer — the saved activations and the layer input x, a "slot" — lives in a pool of
/// L+1 slots that the objects' pointers rotate through (model::Layer::place_saved / place_input) before
/// each layer runs. b's backward of layer j frees its slot at the end of its unit and f's forward of the
/// next layer takes it, so two strands hold L+1 slots where one strand holds L: the memory a stack of
/// two micro-batches costs over one is one layer's saved set, however long the stack.
///
///   model::Layer a(cfg, par, comm_a);  a.init_random_weights(17);  a.set_accumulate_grads(true);
///   model::Layer b(a, comm_b, model::Layer::Share::kAll);  b.share_interfaces(a);  // (SP layers)
///   StrandStack stack(a, b, 16);
///   fill stack.input(o) and stack.dout(o) for o = 0, 1;  a.zero_grads(s);
///   stack.forward(1, s);                                   // b's micro-batch: its forward ran earlier
///   stack.pass(s, [&](model::Layer& f, model::Layer& bw) { ex.run(f, bw); });  // a forward || b backward
///   stack.pass(s, ...);                                    // b's next micro-batch forward || a backward
///
/// Chained, within about one layer's early tensors more (what hid the most on 2x H200, docs/dhelix.md):
///   StrandStack split(a, b, 16, 0, {"x", "rstd1", "h1f"});  // x and the first-written tensors in L+2 parts
///   split.forward(1, s);  split.pass_chained(s, ex);        // ex barrier-free; no join between layers
///
/// Ordering (pass): everything is enqueued on `s`, and `unit` must be stream-ordered on it (StrandExecutor::run,
/// run_round_robin and run_single_strand are): a unit's work ends before the next unit's copies and
/// operators start, so a freed slot is rewritten only after its last reader. pass_chained drops that join
/// and keeps only what the data needs (see there): each strand after its own previous unit; f's input copy
/// into a freed slot after the unit of b that freed it. The contract of Layer::share_interfaces holds
/// there too: within a pass only f writes y and only b writes dy and dx, each strand in order. Between units the stack
/// copies f's output y into the next layer's slot x (f's input(o) for layer 0) and b's dx into b's dy
/// (dout(o) for the top layer) on `s`. Results equal the same micro-batches run one strand at a time
/// (pass_single) bit for bit: the same kernels on the same data, each backward accumulating its layers'
/// weight gradients in the same order. MoE layers too: the forward's host-side routing
/// (model::Layer::routing) is kept per layer after its forward is enqueued and put back before its
/// backward. Both layers must accumulate their gradients (Share::kAll or set_accumulate_grads): the L
/// layers' contributions add up in the one gradient copy. The two layers' saved tensors and x then point
/// into the stack's pool: the layers must not run after the stack is gone.
class StrandStack {
 public:
  /// spare: slots beyond L+1 (0 or more). pass() does not need them; pass_chained() with spare >= 1 gives
  /// f's forward a slot freed spare+1 units earlier, so it need not wait for b's current layer.
  /// doubled (spare 0 only): saved tensors (names of Layer::saved_layout) kept apart from the slots, with x,
  /// in L+2 early parts: pass_chained hands those over two units after b freed them and the rest (the late
  /// tensors) at operator grain one unit after (slot_reuse_waits), so f's first operators need not wait for
  /// the end of b's layer. What it costs: one more early part (x and the doubled tensors).
  StrandStack(model::Layer& a, model::Layer& b, int layers, int spare = 0, std::vector<std::string> doubled = {});
  ~StrandStack();
  StrandStack(const StrandStack&) = delete;
  StrandStack& operator=(const StrandStack&) = delete;

  int layers() const { return layers_; }
  /// Slots (late parts): L + 1 + spare; early parts (with doubled tensors, else 0): L + 2.
  int slots() const { return layers_ + 1 + spare_; }
  int early_regions() const { return x_early_ ? layers_ + 2 : 0; }
  int spare() const { return spare_; }
  /// One layer's storage: a saved set and x, each tensor 256-byte aligned (late + early parts).
  size_t slot_bytes() const { return late_bytes_ + early_bytes_; }
  /// The early part of one layer (x and the doubled tensors; 0 without doubled tensors).
  size_t early_bytes() const { return early_bytes_; }
  /// The stack's pool: slots() late parts and early_regions() early parts.
  size_t pool_bytes() const { return pool_bytes_; }
  bool pool_in_window() const { return pool_mem_->window(); }  // PlacedMemory: the layers' copy-engine windows
  /// Object o's (0: a, 1: b) micro-batch input to layer 0 and output gradient of the top layer,
  /// [local_tokens, hidden] bf16, owned by the stack (counted in extra_bytes()).
  void* input(int o) const { return io_[o][0]; }
  void* dout(int o) const { return io_[o][1]; }
  /// Bytes the stack allocates besides the slots (the four buffers above).
  size_t extra_bytes() const { return extra_bytes_; }
  /// The object whose forward the next pass runs (the other one holds every layer's slot).
  int forward_object() const { return turn_; }
  /// Object o's layer l's forward routing as kept for its backward (MoE with host-side counts; empty otherwise).
  const model::Layer::Routing& routing(int o, int l) const { return routes_[o].at(size_t(l)); }

  /// Object o's forward alone through every layer; o must hold no slot (setup: the first backward's sets).
  void forward(int o, cudaStream_t s);
  /// One pass of two strands: unit(f, b) per layer, f = forward_object(); then the roles swap.
  void pass(cudaStream_t s, const std::function<void(model::Layer& fwd, model::Layer& bwd)>& unit);
  /// pass() with the units chained instead of joined: each strand's operators of unit i+1 wait only for
  /// that strand's operators of unit i (StrandExecutor::run_chained), so b's backward of the next layer
  /// starts while f's forward of this one still runs, and the other way round. What still orders the two
  /// strands between units: f's forward of a layer writes into the slot b's backward freed spare+1 units
  /// earlier, so its input copy waits for that unit of b (spare = 0: the previous unit's b, which f's
  /// forward then cannot outrun by more than a unit; with doubled tensors see the constructor). The copies
  /// between units run on two streams of the stack's own (one per strand). Ordered after prior work on `s`;
  /// later work on `s` runs after the whole pass. `ex` must be barrier-free (step_barrier false).
  void pass_chained(cudaStream_t s, StrandExecutor& ex);
  /// Round-robin chained: f's forward of every layer, operator by operator, on one stream of the stack's
  /// own and b's backward on another (no executor, no pairing: the GPU interleaves the two streams), with
  /// the same hand-over between units as pass_chained (slots, early parts, operator-grain waits).
  /// backward_first: b's stream has the device's greatest stream priority and f's the least, so whenever both
  /// strands have work ready the GPU's block scheduler starts b's (the longer chain: its compute and collectives
  /// in sequence) and f's fills what b leaves; the same work and results, only the start order of ready blocks
  /// differs.
  /// moves: b's backward issued in sinks_beside_collectives' order (on the layer's DAG, strand_layer), its
  /// collectives on a stream of b's own (the link stream; events carry the DAG's dependencies across), so its
  /// weight-gradient GEMMs run beside its reduce-scatters and all-gathers instead of after them in one stream.
  void pass_chained_rr(cudaStream_t s, bool backward_first = false, bool moves = false);
  /// The same work one strand at a time (Megatron-style): b's whole backward, then f's whole forward (at
  /// most L slots held); then the roles swap.
  void pass_single(cudaStream_t s);
  /// The compute of a pass without its collectives (run_compute_only per layer, joined units, on `s`; trace:
  /// every operator timed): the reference the strands' hidden fraction is measured against. A MoE forward's
  /// routing comes from its count exchange, which a compute-only pass skips: without it every layer's forward
  /// would size its experts' work by whatever routing the layer object held last (in a stack of random-weight
  /// layers the routing drifts away from balanced with depth, so that is not this layer's work). So each
  /// forward is given its own layer's routing as a real forward of the same object found it (a stack's
  /// routing per object and layer is the same every pass: fixed inputs and weights): host counts through
  /// Layer::set_routing, device counts (Layer::device_counts) copied back on `s` before the forward.
  /// Dense layers: run_compute_only per layer, nothing replayed or required. MoE layers need f's every layer
  /// recorded first: forward() and pass_single() record (they run on one stream, so the
  /// device counts are copied there, tp·experts floats per layer); the other passes do not (their units may be
  /// compute-only). reset() forgets the recordings (new inputs route differently).
  void pass_compute_only(cudaStream_t s, OpTrace* trace = nullptr);
  /// Forgets every slot (contents are kept, nothing is enqueued): for a new setup with forward().
  void reset();

 private:
  model::Layer& obj(int o) { return o == 0 ? a_ : b_; }
  struct Held {
    int slot = -1, early = -1;  // the late part (slot) and the early part a layer's tensors live in
  };
  void place(int o, int slot, int eslot);
  char* x_of(int slot, int eslot) const;
  // prep_forward takes the most recently freed slot and early part (pass, forward) or the longest free
  // ones (fifo: pass_chained) and returns them.
  Held prep_forward(int o, int l, cudaStream_t s, bool fifo = false);
  void prep_backward(int o, int l, cudaStream_t s);
  void release(int o, int l);
  // After object o's forward of layer l was enqueued: its routing for the backward; with record (a real
  // forward, all on `s`) also as that layer's real routing (and device counts, copied on s) for pass_compute_only.
  void keep_routing(int o, int l, cudaStream_t s = nullptr, bool record = false);
  void require_pass_start(int f, int b) const;  // b holds every layer, f none
  // With doubled tensors: slot_reuse_waits of the late tensors on `dag`, and reads_ events for their readers.
  std::vector<std::vector<int>> late_waits(const Layer& dag);

  model::Layer &a_, &b_;
  int layers_ = 0, spare_ = 0, turn_ = 0;
  size_t late_bytes_ = 0, early_bytes_ = 0, pool_bytes_ = 0, x_offset_ = 0, extra_bytes_ = 0, io_bytes_ = 0;
  struct Where {
    std::string name;
    bool early = false;  // in the early part (doubled) or the late part (slot)
    size_t offset = 0;   // within that part
  };
  std::vector<Where> where_;             // every saved tensor of the layout
  std::vector<std::string> late_names_;  // the saved tensors in the slots
  bool x_early_ = false;                 // doubled tensors given: x and they live in early parts
  std::unique_ptr<PlacedMemory> pool_mem_;  // (declared before pool_: pool_ points into it)
  char* pool_ = nullptr;
  void* io_[2][2] = {{nullptr, nullptr}, {nullptr, nullptr}};
  std::vector<Held> held_[2];  // held_[o][l]: where object o's layer l lives ({-1, -1}: not held)
  std::vector<model::Layer::Routing> routes_[2];  // routes_[o][l]: object o's layer l's forward routing (MoE)
  std::vector<model::Layer::Routing> real_[2];    // real_[o][l]: ... as its last real forward found it
  std::vector<char> recorded_[2];                 // real_[o][l] (and its device counts) recorded
  float* counts_stash_ = nullptr;                 // device counts: [2][L][Layer::device_counts_size()]
  std::deque<int> free_, free_early_;  // free slots / early parts, in the order freed (pass: the last freed first)
  // pass_chained: the copy streams (0: f's input copies, 1: b's output-gradient copies), events, and per
  // slot the unit of this pass whose b freed it (-1: before this pass, ordered by the pass's start).
  cudaStream_t copy_[2] = {nullptr, nullptr};
  cudaStream_t ranked_[2] = {nullptr, nullptr};  // pass_chained_rr(backward_first): f's at least, b's at greatest priority
  cudaStream_t link_ = nullptr;                  // pass_chained_rr(moves): b's collectives (b's stream's priority)
  std::vector<cudaEvent_t> done_;                // pass_chained_rr(moves): after each backward op, on its stream
  cudaEvent_t start_ = nullptr, copied_[2] = {nullptr, nullptr};
  std::vector<StrandTailEvents> tails_;  // a ring of spare + 2 units
  std::vector<int> freed_in_, freed_early_in_;
  std::vector<cudaEvent_t> reads_[2];  // by unit parity: after each backward op that reads a late tensor
};

/// A plan that makes the barrier-free executor issue exactly `order` ((pass, op) pairs, each strand's ops
/// in its pass order): one step per op. How a schedule found outside the DP (budgeted_whole_pass) runs.
Plan order_plan(const Layer& dag, const std::vector<std::pair<Pass, int>>& order);

/// The plan with one step holding each whole pass (in `searched`'s operator orders, or the DAG's when
/// `searched` has none): the barrier-free executor's list scheduler then interleaves the two strands
/// operator by operator (issue_order), with no segment boundary from the pairing DP. Its predicted
/// times are the executor model's (plan_makespan_us).
Plan whole_pass_plan(const Layer& dag, const Plan& searched = {});

/// The three DHelix streams. `cross` may equal nobody's use (TP=2 on one node) but must exist.
struct StrandStreams {
  cudaStream_t compute = nullptr, local = nullptr, cross = nullptr;
};

/// Runs plans of one DAG with two model::Layer strands (see the file comment).
class StrandExecutor {
 public:
  /// The plan must be valid for `dag` (validate_plan with any cost); throws UsageError otherwise.
  /// The streams must be distinct and outlive the executor.
  /// step_barrier: the plan's steps are separated by a barrier among the three streams (each waits
  /// for the other two); without it (default) an op waits only for its own strand's previous op, and
  /// the plan's pairing survives as the issue order on each stream, so a slow collective holds only
  /// its own strand, not the next step's compute.
  StrandExecutor(const Layer& dag, const Plan& plan, StrandStreams streams, bool step_barrier = false);
  ~StrandExecutor();
  StrandExecutor(const StrandExecutor&) = delete;
  StrandExecutor& operator=(const StrandExecutor&) = delete;

  /// Enqueues the whole plan: `fwd`'s forward co-executed with `bwd`'s backward. Ordered after prior
  /// work on `compute`; later work on `compute` runs after it. fwd and bwd must be different layers.
  void run(model::Layer& fwd, model::Layer& bwd);
  /// run() without the fork from and join to `compute`, for units chained one after another
  /// (StrandStack::pass_chained): strand s's (0: fwd's forward, 1: bwd's backward) first operator on each
  /// stream waits for the events after[s] (what ends that strand's previous unit, recorded by the caller);
  /// tails receives, per strand and stream, an event recorded after that strand's last operator there, and
  /// which streams it used. Each strand's operators of this unit are then ordered after its previous unit
  /// and nothing else between units orders the two strands. Barrier-free executors only.
  /// mem (optional): operator-grain waits and records for memory handed between units.
  void run_chained(model::Layer& fwd, model::Layer& bwd, const std::vector<cudaEvent_t> (&after)[2],
                   StrandTailEvents& tails, const ChainMemoryEvents* mem = nullptr);
  /// One step: operators `fseg` of `fwd`'s forward and `bseg` of `bwd`'s backward (indices into the
  /// layer's op lists; either may be empty, the layer pointer then unused), forked from and joined to
  /// `compute`. What the profiler times.
  void run_step(model::Layer* fwd, const std::vector<int>& fseg, model::Layer* bwd, const std::vector<int>& bseg);
  /// The order run_step issues a step's operators in: (pass, op index) pairs.
  std::vector<std::pair<Pass, int>> issue_order(const std::vector<int>& fseg, const std::vector<int>& bseg) const;
  /// plan_makespan_us of the executor's plan (0 without one); with step barriers the real run is longer.
  double simulated_us() const;
  /// For two strands sharing one activation pool (two_strand_placement, memory_waits): waits[i] lists the
  /// backward operators whose completion forward operator i waits for (it writes memory they read).
  /// Each must be issued before i (run() throws UsageError otherwise). Empty (default): no such waits.
  void set_memory_waits(std::vector<std::vector<int>> waits);
  /// Per-operator GEMM SM caps: before issuing forward op i (backward op j) the executor sets its layer's
  /// cuBLAS SM target (model::Layer::set_gemm_sm_target) to `sms` where fwd[i] (bwd[j]) is non-zero, else
  /// to 0 (all SMs); both layers are left at 0 after run(). Empty vectors (default): no per-op setting.
  void set_gemm_caps(std::vector<char> fwd, std::vector<char> bwd, int sms);

  const Plan& plan() const { return plan_; }
  const Layer& dag() const { return dag_; }
  const StrandStreams& streams() const { return s_; }

 private:
  cudaStream_t stream_of(Pass p, int op) const;
  void uncap(model::Layer* fwd, model::Layer* bwd);  // set_gemm_caps: both layers back to every SM
  cudaEvent_t next_event();
  cudaEvent_t record_after(cudaStream_t st);
  void fork();
  void join();
  void step(model::Layer* fwd, const std::vector<int>& fseg, model::Layer* bwd, const std::vector<int>& bseg);
  // Issues `order` ((pass, op) pairs), chaining each strand's ops: an op on another stream than its
  // strand's previous op waits for that op's event (recorded only when needed). With dag_.dep_ready an op
  // waits instead for its dependencies issued earlier in `order` (the latest one on each other stream).
  void issue(model::Layer* fwd, model::Layer* bwd, const std::vector<std::pair<Pass, int>>& order);
  void issue_by_deps(model::Layer* fwd, model::Layer* bwd, const std::vector<std::pair<Pass, int>>& order);
  // The memory waits of forward op i, issued on stream `st`, given the events recorded after backward ops.
  void memory_wait(int i, cudaStream_t st, const std::vector<cudaEvent_t>& after_bwd) const;
  // run_chained: before strand s's first op on stream st in this run, wait for chain_after_[s].
  void chain_wait(int s, cudaStream_t st, bool (&waited)[2][3]);
  int stream_index(cudaStream_t st) const { return st == s_.compute ? 0 : st == s_.local ? 1 : 2; }
  // run_chained: record the tails after each strand's last op per stream (last[s][j]: its index in order).
  void chain_tails_last(const std::vector<std::pair<Pass, int>>& order, int (&last)[2][3]) const;
  std::vector<std::pair<Pass, int>> whole_order() const;  // the plan's steps' issue orders back to back
  detail::IssueState begin_issue(const std::vector<std::pair<Pass, int>>& order, model::Layer* fwd) const;
  const std::vector<cudaEvent_t>* chain_after_ = nullptr;
  StrandTailEvents* chain_tails_ = nullptr;
  const ChainMemoryEvents* chain_mem_ = nullptr;
  void chain_before(int s, int i, cudaStream_t st) const;  // chain_mem_: forward op i's waits
  void chain_after(int s, int i, cudaStream_t st) const;   // chain_mem_: backward op i's record
  std::vector<std::vector<int>> mem_waits_;
  std::vector<char> cap_f_, cap_b_;  // set_gemm_caps
  int cap_sms_ = 0;
  std::vector<char> mem_needed_;  // backward op j is waited for by some forward op

  Layer dag_;
  Plan plan_;
  StrandStreams s_;
  std::vector<cudaEvent_t> events_;
  size_t next_ = 0;
  bool step_barrier_ = false;
  int defer_dispatch_ = 0;  // BRAID_STRANDS_DEFER_DISPATCH: backward ops issued ahead of an MoE dispatch (IssueSequence)
};

/// Baselines, same unit of work (fwd's forward + bwd's backward):
/// single strand (Megatron): fwd.forward then bwd.backward, everything on one stream.
void run_single_strand(model::Layer& fwd, model::Layer& bwd, cudaStream_t stream);
/// Naive round-robin (Wavelet+-like): fwd's whole forward on `s1`, bwd's whole backward on `s2`, no
/// pairing or barriers; s2 forks from s1 and joins back (`ev` two events made by the caller). The two
/// layers should use different communicators (two streams issuing collectives on one communicator
/// rely on NCCL's cross-stream ordering).
void run_round_robin(model::Layer& fwd, model::Layer& bwd, cudaStream_t s1, cudaStream_t s2, cudaEvent_t ev[2]);
/// GPU time per operator of a traced run (`bench strands --op-trace`): an event pair around every operator the
/// run enqueues on its stream, read after the stream is synchronized. Names are the strand DAG's ("f.<op>",
/// "b.<op>"); an operator run once per layer of a stack adds up over the layers. The events are timing events
/// (cudaEventCreate, not capturable): no trace inside a CUDA graph.
class OpTrace {
 public:
  OpTrace() = default;
  OpTrace(const OpTrace&) = delete;
  OpTrace& operator=(const OpTrace&) = delete;
  ~OpTrace();
  void begin(const std::string& name, cudaStream_t s);  // records the operator's start event on s
  void end(cudaStream_t s);                             // and its end event (after its kernels)
  struct Total {
    std::string name;
    double us = 0;  // summed over the calls
    int calls = 0;
  };
  std::vector<Total> totals() const;  // by name, in first-seen order (synchronize the stream first)
  double span_us() const;             // the first operator's start to the last one's end
  double ops_us() const;              // the operators' summed times (span - this: the gaps between them)
  /// One traced operator: its stream and its start and end, in us from the earliest start in the trace
  /// (operators of several streams: a traced two-strand unit). In recording order.
  struct Span {
    std::string name;
    cudaStream_t stream = nullptr;
    double start_us = 0, end_us = 0;
  };
  std::vector<Span> spans() const;  // (synchronize the streams first)

  /// The trace that every StrandExecutor issuing on this thread records its operators into while a Scope
  /// lives (`bench strands --op-trace` traces a variant by running it inside one, whichever executors it
  /// uses); nullptr outside one. An operator's start event is recorded after the waits issued before it
  /// (its dependencies, memory waits), so a span is the operator's own time on its stream. Scopes do not nest.
  static OpTrace* active();
  class Scope {
   public:
    explicit Scope(OpTrace& trace);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
  };

 private:
  std::vector<std::string> names_;
  std::vector<cudaStream_t> streams_;
  std::vector<cudaEvent_t> ev_;  // two per operator: start, end
};

/// Where a traced two-strand run's time goes (`bench strands --op-trace`), against a traced compute-only run of the
/// same operators on one stream (no collectives): the run's span less the reference's is what `bench strands`
/// calls exposed, and it splits into the compute stream's extra busy time (its operators slower beside the
/// collectives, or faster where the clock recovers while the stream waits) and its extra idle time (the compute
/// stream waiting: on a collective, a memory wait, or nothing in flight). Spans on `compute` are compute operators,
/// every other stream's are collectives. CPU only (tests/schedule/test_strands_plan.cpp on synthetic spans).
struct StrandTraceSummary {
  double span_us = 0, ref_span_us = 0;  // first start to last end
  double busy_us = 0, ref_busy_us = 0;  // the compute operators' summed times
  double idle_us = 0, ref_idle_us = 0;  // span - busy (the compute stream's idle time)
  double idle_in_flight_us = 0;         // of idle_us, time with a collective in flight
  double link_busy_us = 0;              // the collectives' summed times (streams overlap)
  int collectives = 0;
  /// A compute-stream gap (1 us or more: the events' resolution), summed by the operator it held back and the
  /// collective that ended last within it (what the compute stream resumed after: most likely what it waited for;
  /// "-" when none ended there; "(the end)" for the gap after the last compute operator).
  struct Gap {
    std::string held, waited;
    double us = 0, in_flight_us = 0, longest_us = 0;
    int count = 0;
  };
  std::vector<Gap> gaps;  // longest total first
  /// A compute operator name (a stack runs each once per layer): summed times here and in the reference, and how
  /// much of its time here ran with a collective in flight.
  struct Op {
    std::string name;
    double us = 0, ref_us = 0, beside_us = 0;
    int calls = 0;
  };
  std::vector<Op> ops;  // most time over the reference first
  /// busy_us - ref_busy_us split by where it fell: operators that ran mostly (> half their time) beside a
  /// collective, and the others.
  double excess_beside_us = 0, excess_alone_us = 0;
};
StrandTraceSummary summarize_strand_trace(const std::vector<OpTrace::Span>& run, const std::vector<OpTrace::Span>& ref,
                                          cudaStream_t compute);

/// Compute operators only of the single-strand unit (collectives skipped; numbers are meaningless):
/// the compute-only time that exposed communication is measured against. With a trace, every operator
/// it runs is timed into it.
void run_compute_only(model::Layer& fwd, model::Layer& bwd, cudaStream_t stream, OpTrace* trace = nullptr);

/// The operator-pair profiler: with both strands' buffers filled by one forward + backward each, times
/// (median over opt.iters, slowest rank) every forward operator of `a` alone, every backward operator
/// of `b` alone, and every legal pair (forward op of `a` with backward op of `b`; two collectives on one
/// link are illegal) co-run through ex.run_step — the executor's own issue rule, collectives first.
/// Names are the DAG's ("f.<op>", "b.<op>"); `node` goes into the table. Every time has the time of an
/// empty step (fork + join) subtracted. Collective over the team. solo_clocks (optional): this rank's GPU
/// clocks while the solo operators were timed (bench::GpuClockSampler; empty without NVML).
PairTable profile_pairs(Team& team, model::Layer& a, model::Layer& b, StrandExecutor& ex,
                        const bench::TimingOptions& opt, const std::string& node, bool verbose,
                        bench::ClockSummary* solo_clocks = nullptr);

/// `braid profile-pairs --model M [--tp N] [--ep N] [--seq S] [--mb B] [--out PAIRS] [--plan-out PLAN]
/// [--profile-iters 3] [--throttle CTAS] [--a2a-link local|cross] [--max-seg 4] [--max-shift S]`:
/// profiles the pairs at that shape, writes the pair file (rank 0) and searches a plan.
int profile_pairs_main(Team& team, int argc, char** argv, const bench::Context& ctx);
/// `braid bench strands --model M [--tp 2] [--ep 2] [--seq S] [--mb B] [--plan FILE | --pairs FILE]
/// [--throttle CTAS] [--iters 10] [--warmup 3] [--rounds 5] [--no-graph] [--no-verify] [--json FILE]
/// [--layers L [--no-chain]] [--gemm-sm-reserve N]`:
/// verifies strands == single strand bitwise on a small shape of the same kind, then times every variant
/// (single strand, round-robin and the strand executors interleaved over --rounds passes). With --layers
/// L > 1, a stack of L layers (StrandStack) per pass, its executors also chained (pass_chained, with and
/// without a spare slot) unless --no-chain.
/// Returns 0, or 3 when verification failed.
int bench_strands_main(Team& team, int argc, char** argv, const bench::Context& ctx);

}  // namespace braid::schedule
