// braid/fusion/ir.hpp — a small IR for hybrid-parallel dataflow (Chimera, ISCA'25).
//
// A Graph is a straight-line program over distributed tensors. Every tensor has a logical (global)
// shape and a Layout that says how its value is spread over one device Group:
//   Replicated   every rank of the group holds the whole tensor;
//   Partial      every rank holds a whole-shape partial sum; the value is the sum over ranks;
//   Sharded(d)   rank i of the group holds chunk i of dimension d (equal chunks);
//   Routed       rows (token, slot) live on the rank that owns their expert (MoE dispatch).
// Operators are compute (GEMM, norm, element-wise, gating, expert MLP), communication (the paper's
// AR, RS, AG, A2A, P2P, M2MS) or Split, the free local slice of a replicated tensor.
// A communication operator is a redistribution: its kind names the pattern, and its input and
// output layouts define the result. Dispatch/Combine mark the MoE flavours of A2A and M2MS.
//
// Activations are (B,S,H); a routing tensor is (B,S,2k) = k expert ids then k gate weights; a routed
// tensor is (B,S,k,H), one row per (token, slot).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace braid::fusion {

/// The parallelism a device group serves.
enum class Parallel { DP, TP, SP, PP, EP };

/// A set of ranks that run operators together; position in `ranks` is the rank's index in the group.
struct Group {
  std::string name;
  Parallel kind = Parallel::TP;
  std::vector<int> ranks;  // global rank ids
};

/// How a tensor's value is spread over its group.
enum class Dist { Replicated, Partial, Sharded, Routed };

struct Layout {
  Dist dist = Dist::Replicated;
  int group = 0;  // index into Graph::groups
  int dim = -1;   // Sharded only: the split dimension
  friend bool operator==(const Layout&, const Layout&) = default;
};

struct Tensor {
  std::string name;
  std::vector<int64_t> shape;  // logical shape
  Layout layout;
  int elem_bytes = 2;  // bytes per element on the wire (bf16 = 2, fp32 = 4)
};

/// A weight is described, not stored: its values are generated from `seed` when executed, so
/// graphs built with real model sizes (for planning) cost no memory.
struct Weight {
  std::string name;
  std::vector<int64_t> shape;  // Gemm (K,N); Norm (H); Gate (H,E); Expert (E,H,H)
  uint64_t seed = 0;
};

enum class OpKind {
  // compute
  Gemm, Norm, Elementwise, Gate, Expert,
  // communication (Table 1 of the paper)
  AllReduce, ReduceScatter, AllGather, AllToAll, P2P, M2MS,
  // local slice Replicated -> Sharded(d) on the same group; moves no bytes
  Split,
};

/// MoE flavour of an AllToAll / M2MS: Dispatch sends each token to its experts, Combine sends each
/// expert output back to the token's owner and sums it weighted by the gate.
enum class Route { None, Dispatch, Combine };

/// How a Gemm's weight is split over the group (Megatron column / row parallel).
enum class WeightSplit { None, Column, Row };

struct Op {
  OpKind kind = OpKind::Gemm;
  std::vector<int> in;  // tensor ids; Dispatch: {x, routing}
  int out = -1;         // tensor id
  Route route = Route::None;
  WeightSplit split = WeightSplit::None;
  int weight = -1;  // index into Graph::weights
  int top_k = 0;    // Gate only
};

struct Graph {
  std::vector<Group> groups;
  std::vector<Tensor> tensors;
  std::vector<Weight> weights;
  std::vector<Op> ops;  // program order
  std::vector<int> inputs, outputs;
  int num_experts = 0;  // experts are spread evenly, in order, over the group of a routed tensor

  /// Number of ranks: one more than the largest rank id of any group.
  int world_size() const;
  /// Appends a tensor and returns its id.
  int add_tensor(Tensor t);
  /// Ids of the ops that read tensor `t`.
  std::vector<int> consumers(int t) const;
  /// Id of the op that writes tensor `t`, or -1 for graph inputs.
  int producer(int t) const;
};

/// Half-open index box [lo, hi) in a tensor's logical index space.
struct Box {
  std::vector<int64_t> lo, hi;
  int64_t volume() const;
  bool empty() const;
};

/// Intersection of two boxes (may be empty).
Box intersect(const Box& a, const Box& b);

/// The box held by the rank at position `index` of the tensor's group (Replicated/Partial/Sharded).
Box local_box(const Graph& g, const Tensor& t, int index);

/// One message of a redistribution: `box` of the input goes from rank `src` to rank `dst` and is
/// added into the destination when `reduce`. src == dst is a local copy and costs nothing.
struct Transfer {
  int src = 0, dst = 0;
  Box box;
  bool reduce = false;
};

/// Messages of a redistribution from `in` to `out` (neither Routed). AllReduce is planned as its
/// ReduceScatter on `ar_dim(in)` followed by the AllGather, so its bytes follow the ring volume.
std::vector<Transfer> plan_transfers(const Graph& g, OpKind kind, const Tensor& in, const Tensor& out);

/// The dimension an AllReduce of `t` is split on: the first of (S, B, ...) divisible by the group.
int ar_dim(const Graph& g, const Tensor& t);

/// True for the six communication kinds (not Split, not compute).
bool is_communication(OpKind k);

/// True for redistributions that move values without adding them: AG, A2A, P2P, M2MS and Split.
bool is_plain_move(const Graph& g, const Op& op);

/// Short name of an operator kind: "AR", "RS", "AG", "A2A", "P2P", "M2MS", "Split", "GEMM", ...
std::string kind_name(OpKind k);

/// "Sharded(1)@tp0"-style description of a layout.
std::string describe(const Graph& g, const Layout& l);

/// The communication kind that turns layout `in` into layout `out` with a plain move (or a
/// reduction, for a Partial input); nullopt when the layouts are equal (no operator needed).
std::optional<OpKind> classify(const Graph& g, const Layout& in, const Layout& out, Route route = Route::None);

/// Checks every operator's input and output layouts and shapes; throws std::invalid_argument
/// naming the operator when one is illegal (e.g. a norm on a partial sum).
void validate(const Graph& g);

/// One line per operator: "AR  y(Replicated@tp) <- x(Partial@tp)".
std::string to_string(const Graph& g);

}  // namespace braid::fusion
