// braid/fusion/cost.hpp — communication cost model of Chimera (Tables 1-3) and per-operator time.
//
// Volumes are bytes sent or received by the busiest device, the paper's "overhead". Time is an
// alpha-beta model, t = latency + volume / bandwidth, where the volume already carries the ring
// factors ((N-1)/N for RS and AG, 2(N-1)/N for AR). A Calibration replaces it per operator kind by
// piecewise-linear interpolation of measured (message bytes, seconds) points.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "braid/fusion/ir.hpp"

namespace braid::fusion {

/// The cascaded parallelisms of Table 2 ("former + latter").
enum class Transition { TP_SP, TP_PP, TP_EP, PP_EP, SP_PP, SP_EP };

/// "TP+SP", "TP+PP", ...
std::string transition_name(Transition t);

/// The activation exchanged at a transition: B*S*H elements of elem_bytes bytes.
struct Problem {
  int64_t batch = 1, seq = 1, hidden = 1;
  int elem_bytes = 2;
  double bsh_bytes() const { return double(batch) * double(seq) * double(hidden) * elem_bytes; }
};

/// Table 1: bytes each device sends/receives for one operator over n devices (k = MoE top-k).
double table1_overhead(OpKind kind, const Problem& p, int n, int k = 1);

/// One row of Table 2, in bytes: the two original communications and the real demand.
struct Table2Row {
  double size1 = 0, size2 = 0, demand = 0;
  double ratio() const { return demand / (size1 + size2); }
};

/// Table 2 for a transition with n1 devices in the former and n2 in the latter parallelism.
Table2Row table2(Transition t, const Problem& p, int n1, int n2, int k = 1);

/// A link of the alpha-beta model; defaults approximate one NVLink-4 direction on H100.
struct Link {
  double bandwidth = 370e9;  // bytes/s
  double latency = 10e-6;    // s per operator
};

/// Measured time curves, one per communication kind: (message bytes, seconds), sorted by bytes.
struct Calibration {
  std::map<OpKind, std::vector<std::pair<double, double>>> points;

  /// True when `kind` has at least one point.
  bool has(OpKind kind) const;
  /// Interpolated seconds for a message of `bytes`; linear between points, extended with the last
  /// segment's slope above the largest point and clamped to the first point below the smallest.
  double seconds(OpKind kind, double bytes) const;
};

/// Parses "<AR|RS|AG|A2A|P2P|M2MS> <message bytes> <seconds>" lines ('#' starts a comment);
/// throws std::runtime_error naming the line on a malformed entry.
Calibration parse_calibration(std::istream& in);

/// Cost of one operator of a graph.
struct OpCost {
  OpKind kind = OpKind::Split;
  int group_size = 0;     // ranks of the (source) group
  double message = 0;     // message bytes, nccl-tests convention: the whole buffer for AR/RS/AG, the
                          // send buffer of one rank for A2A/P2P/M2MS
  double volume = 0;      // bytes sent or received by the busiest rank
  double seconds = 0;     // predicted time
};

/// Predicted cost of `op`. Plain moves and reductions are exact (from plan_transfers); Dispatch and
/// Combine assume uniform routing over the experts. Compute operators cost 0 here.
OpCost op_cost(const Graph& g, const Op& op, const Link& link, const Calibration* cal = nullptr);

/// Sum of op_cost volumes (bytes) over the communication operators of `g`.
double total_volume(const Graph& g);

}  // namespace braid::fusion
