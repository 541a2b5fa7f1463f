// braid/fusion/pass.hpp — the Chimera communication-fusion pass and the CPU reference executor.
//
// The pass has the paper's three steps, each a Graph -> Graph function whose result is again a
// valid, executable graph:
//   1. split_allreduce    AR -> RS + AG (split on the dimension the consumer wants, else S);
//   2. hoist_gating       gate(C(x)) -> C'(gate(x)) for a plain move C on a non-partial x, so that
//                         the move meets the dispatch it feeds (C' carries the routing tensor);
//   3. fuse_communication replaces adjacent pairs by one operator (Table 3), whenever the fused
//                         operator moves strictly fewer bytes on the busiest rank:
//                         move+move -> one move or nothing (AG+Split, AG+P2P, AG+M2MS, ...),
//                         move+dispatch -> dispatch (A2A or M2MS), combine+move -> combine.
// Equivalence is not assumed: execute() simulates every rank with exact arithmetic (integer values
// in doubles), so original and fused graphs can be compared bit for bit.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "braid/fusion/ir.hpp"

namespace braid::fusion {

/// Step 1: every AllReduce becomes a ReduceScatter followed by an AllGather.
Graph split_allreduce(const Graph& g);

/// Step 2: moves every gate that reads the output of a plain move feeding a dispatch above it.
Graph hoist_gating(const Graph& g);

/// Step 3: fuses adjacent communication operators to a fixed point, then drops dead operators.
Graph fuse_communication(const Graph& g, std::vector<std::string>* log = nullptr);

/// The whole pass: split_allreduce, hoist_gating, fuse_communication. `log` gets one line per rewrite.
Graph chimera(const Graph& g, std::vector<std::string>* log = nullptr);

/// A dense logical tensor, row-major.
struct Dense {
  std::vector<int64_t> shape;
  std::vector<double> v;
  friend bool operator==(const Dense&, const Dense&) = default;
};

/// What one rank holds of one tensor: a box of the logical tensor (Replicated/Partial/Sharded) or
/// routed rows.
struct Local {
  Box box;
  std::vector<double> data;  // row-major over the box
  struct Row {
    int64_t token = 0;  // b*S + s
    int slot = 0;       // 0..k-1
    int expert = 0;
    double gate = 0;
    std::vector<double> data;  // (H)
  };
  std::vector<Row> rows;
};

/// Result of a simulated run.
struct Execution {
  std::vector<std::map<int, Local>> values;  // [tensor][rank]
  std::vector<double> volume;                // [op] measured bytes sent or received by the busiest rank
};

/// Integer-valued inputs in [-3, 3] for g.inputs, reproducible from `seed`.
std::vector<Dense> random_inputs(const Graph& g, uint64_t seed);

/// Runs `g` on every rank with exact arithmetic; `inputs` are the logical values of g.inputs.
/// Throws std::runtime_error if a rank reads data it does not hold.
Execution execute(const Graph& g, const std::vector<Dense>& inputs);

/// The logical value of tensor `t` assembled from all ranks (partials summed; routed tensors as
/// (B,S,k,H+1) with the expert id last). Throws std::runtime_error if replicas disagree.
Dense logical(const Graph& g, const Execution& e, int t);

}  // namespace braid::fusion
