// braid/schedule/pairing.hpp — DHelix strand pairing: orders, segments, the DP of eq. (2), plans.
//
// The forward pass of one strand (micro-batch) and the backward pass of the other are each run as a
// topological order of their DAG, cut into contiguous segments. A plan is a sequence of steps; a step
// runs one forward segment, one backward segment, or one of each co-scheduled (a cross-strand
// barrier before and after). Within a segment the strand's operators run in order.
//
// The cost of a step comes from a PairCost:
//   solo      sum of the profiled solo times of the segment's operators;
//   co-run    the profiled co-run time of the two segments if the table has it, otherwise composed
//             from operator pairs: both strands advance through their operators, and while op i of
//             one strand and op j of the other run together both progress at rate 1/(2 - OEF(i,j))
//             of their solo speed (alone: rate 1). For two single operators this reproduces the
//             measured P_ij exactly; a missing pair is taken as serial (OEF 0).
//   legality  a step may not put a collective of each strand on the same link (they would contend
//             for one link and one communication stream); such a pair costs +infinity.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "braid/schedule/ops.hpp"
#include "braid/schedule/profile.hpp"

namespace braid::schedule {

/// Step costs of one layer under one profile (memoized; not thread-safe).
class PairCost {
 public:
  /// Solo times come from `table` where recorded, else from the layer's op.solo_us.
  PairCost(const Layer& layer, const PairTable& table);

  /// Solo time of operator `i` of pass `p`.
  double op_solo(Pass p, int i) const;
  /// Solo time of a segment of pass `p` (sum of its operators).
  double solo(Pass p, const std::vector<int>& seg) const;
  /// False when both segments hold a collective on the same link.
  bool legal(const std::vector<int>& fseg, const std::vector<int>& bseg) const;
  /// Co-run time of a forward and a backward segment (+infinity when illegal).
  double corun(const std::vector<int>& fseg, const std::vector<int>& bseg) const;
  /// The OEF used for forward op i and backward op j (0 when the table lacks the pair).
  double op_oef(int i, int j) const;

  const Layer& layer() const { return layer_; }
  /// True when every co-run follows the rate model, so the search may prune with lower bounds.
  bool bound_ok() const { return bound_ok_; }

 private:
  const Layer& layer_;
  const PairTable& table_;
  std::vector<double> fsolo_, bsolo_;
  std::vector<std::vector<double>> rate_;  // rate_[i][j] = 1 / (2 - OEF(i,j)), OEF clamped to [-1, 1]
  std::vector<std::vector<double>> pair_;  // measured co-run of single ops (NaN: not measured)
  std::vector<unsigned> fmask_, bmask_;    // link bits of collectives
  bool segment_entries_ = false;           // the table has "a+b" segment records
  bool bound_ok_ = true;                   // co-runs obey the rate model (branch and bound is exact)
  double max_compute_rate_ = 1.0;          // most compute work per unit time (two co-running ops)
  struct KeyHash {
    std::size_t operator()(const std::pair<std::uint64_t, std::uint64_t>& k) const {
      return std::hash<std::uint64_t>()(k.first * 0x9E3779B97F4A7C15ull ^ k.second);
    }
  };
  mutable std::unordered_map<std::pair<std::uint64_t, std::uint64_t>, double, KeyHash> cache_;

  double compose(const std::vector<int>& fseg, const std::vector<int>& bseg) const;
  friend class PairDp;
};

/// Eq. (2) over fixed segments: the minimum make-span of pairing forward segments 0..nf-1 with
/// backward segments 0..nb-1, in order, each either alone or with one of the other strand.
/// `pair(i,j)` is P(i,j) (may be +infinity), `solo_f(i)` P(i,0), `solo_b(j)` P(0,j). When `steps` is
/// given it receives the chosen steps as (i or -1, j or -1).
double pair_dp(int nf, int nb, const std::function<double(int, int)>& pair,
               const std::function<double(int)>& solo_f, const std::function<double(int)>& solo_b,
               std::vector<std::pair<int, int>>* steps = nullptr);

/// Topological orders of a pass, lexicographic by index, at most `max_orders` of them. With
/// `max_shift` >= 0 an operator may sit at most that many positions from its index (its canonical
/// place), which bounds the enumeration for DAGs with many movable operators.
std::vector<std::vector<int>> topological_orders(const std::vector<Op>& ops, std::size_t max_orders,
                                                 int max_shift = -1);

/// One step of a plan: forward segment, backward segment (either may be empty) and its time.
struct PlanStep {
  std::vector<int> fwd, bwd;
  double time_us = 0;
};

/// A strand-interleaving plan for one layer.
struct Plan {
  std::vector<int> fwd_order, bwd_order;
  std::vector<PlanStep> steps;
  double total_us = 0;          // predicted make-span of the co-scheduled forward + backward
  double serial_us = 0;         // single strand: forward then backward, no overlap
  double comm_us = 0;           // solo time of all communication operators
  std::size_t orders_searched = 0;  // complete order pairs evaluated by the DP
  std::size_t orders_pruned = 0;    // subtrees of partial orders cut by the lower bound

  /// Fraction of the communication time the plan hides: (serial - total) / comm, in [0, 1].
  double hidden_comm_fraction() const;
};

/// Search limits.
struct SearchOptions {
  int max_segment_ops = 4;        // longest segment the DP forms
  std::size_t max_orders = 1000000;  // per pass
  int max_shift = -1;             // see topological_orders
};

/// The best plan for fixed forward and backward orders: eq. (2) where the DP also chooses the cut
/// points (segments of 1..max_segment_ops operators). Exact for those orders.
Plan pair_orders(const PairCost& cost, const std::vector<int>& fwd_order,
                 const std::vector<int>& bwd_order, int max_segment_ops);

/// The full search: the best pair_orders over all (bounded) topological orders of both passes.
/// Backward orders are enumerated depth first, extending the DP one operator at a time; a partial
/// order is cut when a lower bound (each strand's remaining solo work, and the remaining compute
/// work at the fastest compute-compute co-run rate) cannot beat the best plan, or when another
/// prefix with the same operator set and the same last K-1 operators reached DP columns at least as
/// good (its completions cost no more). The bound is used only when every co-run follows the rate
/// model, so the result is exact within the limits.
Plan search_plan(const PairCost& cost, const SearchOptions& opt = {});

/// Empty when `plan` is a valid plan for `cost.layer()`: orders are permutations respecting the
/// DAG, the steps concatenate to the orders, no step pairs two collectives on one link, and step
/// times add to total_us. Otherwise the first problem found.
std::string validate_plan(const PairCost& cost, const Plan& plan);

// ---- plan file --------------------------------------------------------------------------------
// Text, one record per line ('#' comments):
//     braid-plan 1
//     model <name>
//     parallel <setting>
//     fwd_order <op> <op> ...
//     bwd_order <op> <op> ...
//     step <fwd ops joined by '+', or -> <bwd ops joined by '+', or -> <microseconds>
//     total_us <t>
//     serial_us <t>
//     comm_us <t>

/// A plan with operator names, independent of a Layer.
struct PlanFile {
  std::string model, parallel;
  std::vector<std::string> fwd_order, bwd_order;
  struct Step {
    std::vector<std::string> fwd, bwd;
    double time_us = 0;
  };
  std::vector<Step> steps;
  double total_us = 0, serial_us = 0, comm_us = 0;
};

/// Names the operators of `plan`.
PlanFile to_plan_file(const Layer& layer, const Plan& plan);
/// Resolves names against `layer` (throws UsageError on an unknown operator).
Plan from_plan_file(const Layer& layer, const PlanFile& file);
/// Writes the format above (times with full precision, so reading back is exact).
void write_plan(std::ostream& os, const PlanFile& file);
/// Reads the format above (throws UsageError naming the line on a malformed record).
PlanFile read_plan(std::istream& is);
/// A 64-bit hash (FNV-1a) of what an executor runs of a plan: both passes' operator orders and every step's
/// operators, not the model, the parallel setting or the modelled times. Ranks compare it to check that they run
/// the same plan (an executor on each rank issues its collectives in the plan's order).
uint64_t plan_structure_hash(const PlanFile& file);

/// Human-readable table of a plan (one row per step, with stream classes and times).
void print_plan(std::ostream& os, const Layer& layer, const Plan& plan);

}  // namespace braid::schedule
