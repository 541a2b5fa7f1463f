// braid/fusion/build.hpp — graphs for the transitions of Table 2 and the hybrids HP1-HP4 of Table 5.
//
// Each builder returns the unfused ("natural") graph: the communication each parallelism needs on
// its own, in program order. Former and latter parallelism share one group of n ranks, except
// across a pipeline boundary, where stage s is its own group of ranks [s*n, (s+1)*n).
#pragma once

#include <cstdint>

#include "braid/fusion/cost.hpp"
#include "braid/fusion/ir.hpp"

namespace braid::fusion {

/// Sizes of the tensors a builder creates.
struct Dims {
  int64_t batch = 1;   // B: sequences in the logical tensor of a group (per rank for PP+EP)
  int64_t seq = 1;     // S
  int64_t hidden = 1;  // H
  int64_t ffn = 1;     // F: inner width of the TP block (column GEMM H->F, row GEMM F->H)
  int experts = 0;     // E (MoE transitions only)
  int top_k = 1;       // k
  int elem_bytes = 2;
};

/// The unfused graph of one Table 2 transition with n1 ranks in the former and n2 in the latter
/// parallelism (n1 == n2 unless the transition crosses a pipeline boundary: TP+PP).
///   TP+SP  TP block -> AR -> Split(S) -> norm                              (one group)
///   TP+PP  TP block -> AR -> M2MS(-> Sharded(S) on stage 1) -> AG -> norm  (Alpa's scheme)
///   TP+EP  TP block -> AR -> Split(B) -> gate -> A2A dispatch -> experts -> A2A combine
///   PP+EP  norm -> P2P (Sharded(B)) -> gate -> A2A dispatch -> experts -> A2A combine
///   SP+PP  norm on Sharded(S) -> AG -> P2P -> norm on stage 1
///   SP+EP  norm on Sharded(S) -> AG -> Split(B) -> gate -> A2A dispatch -> experts -> A2A combine
///          -> A2A (B -> S) -> norm                                        (the paper's SP+EP+SP)
/// The EP split uses B when n divides it, else S. Throws std::invalid_argument on bad sizes.
Graph build_transition(Transition t, const Dims& d, int n1, int n2, uint64_t seed = 1);

/// The whole-model hybrids of Table 5.
enum class Hybrid { HP1, HP2, HP3, HP4 };

/// One transformer block per pipeline stage, `stages` stages of n ranks (TP = SP = EP = n; the DP
/// replicas of HP3/HP4 are independent in the forward pass and are not modelled):
///   HP1 TP+SP, SP+PP    HP2 TP+SP, TP+PP    HP3 TP+SP, SP+EP, SP+PP    HP4 TP+SP, TP+EP, TP+PP
Graph build_hybrid(Hybrid h, const Dims& d, int n, int stages, uint64_t seed = 1);

}  // namespace braid::fusion
