// braid/fusion/gpu.hpp — GPU executor for Chimera's parallelism transitions (original vs fused).
//
// For one Table 2 transition it runs, on real device tensors with NCCL, the ORIGINAL communication
// sequence of the IR's natural graph (build_transition) and the FUSED one (chimera() of it), with the
// data movement the transition implies between the collectives (the split, MoE gating on the right
// tokens, the routing plan, packing, the expert stand-in, the combine, the B->S re-layout), verifies
// that both give bit-identical outputs, and times them with bench::time_iterations.
//
// One-group transitions (TP, SP and EP share the n = world ranks):
//   TP+SP  original  AR of the partial sums (S,B,H), keep the own S-chunk (the Split is a view)
//          fused     RS                               (= Megatron-SP, also timed as "megatron-sp")
//   TP+EP  original  AR, Split(B) (view), gate on the shard, M2MS dispatch (ids, then rows)
//          fused     RS, gate on the shard, M2MS dispatch
//   SP+EP  original  AG, Split(B) (strided view), gate, dispatch, experts, combine to the B-owner,
//                    A2A (B -> S) and a local re-layout          (Split(S) and no A2A when n does not divide B)
//          fused     gate on the S-shard, dispatch, experts, combine straight into the S-shard
// Two-stage transitions (stage 0 = ranks [0,n), stage 1 = [n,2n), n = world/2 >= 2):
//   TP+PP  original  AR on stage 0, P2P of S-chunk i (rank i -> n+i), AG on stage 1
//          fused     RS on stage 0, P2P,                        AG on stage 1
//   SP+PP  original  AG on stage 0, P2P of the whole tensor (rank i -> n+i)
//          fused     M2MS: every S-shard of stage 0 to every rank of stage 1 (rotated order)
//   PP+EP  original  P2P of the B-shard (rank i -> n+i), gate on stage 1, A2A dispatch on stage 1
//          fused     gate on stage 0, M2MS dispatch from stage 0 straight to the experts on stage 1
//          (when chimera() leaves it unfused, i.e. k*BSH >= BSH + (n-1)k*BSH/n, it is reported as such)
// With 2 GPUs the two-stage transitions would have stages of one rank, where TP/SP/EP are empty; they
// are skipped with a message.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "braid/bench.hpp"
#include "braid/fusion/cost.hpp"

namespace braid {
class Team;
}

namespace braid::fusion {

struct GpuTransitionConfig {
  Transition transition = Transition::TP_SP;
  int64_t batch = 2, seq = 4096, hidden = 4096;  // B, S, H of the logical activation (B per rank for PP+EP)
  int64_t ffn = 14336;                           // F of the TP block (prediction only: the GEMMs are not run)
  int experts = 8, top_k = 2;                    // MoE transitions
  bench::DType dtype = bench::DType::kBF16;      // bf16 or fp32
  bench::TimingOptions timing{10, 50};
  bool time = true;                              // false: verify only
  uint64_t seed = 0xC41A3E7ULL;
  Link link;                                     // alpha-beta defaults of the cost model
  const Calibration* calibration = nullptr;      // replaces `link` per operator kind when given
};

/// One timed communication sequence.
struct GpuVariant {
  std::string algo;          // "unfused", "megatron-sp", "fused"
  std::string sequence;      // e.g. "AR -> Split(view) -> gate -> M2MS dispatch"
  bench::Stats stats;        // per-iteration max over ranks, microseconds
  double predicted_us = 0;   // cost model: sum over the IR's communication operators of this sequence
  double volume_bytes = 0;   // cost model: busiest-rank bytes over the same operators
};

struct GpuTransitionResult {
  bool ran = false;          // false: not expressible on this team (see skip_reason)
  std::string skip_reason;
  std::string note;          // e.g. "chimera() leaves PP+EP unfused at k=2, n=2"
  std::vector<GpuVariant> variants;  // unfused first, fused last
  size_t wrong = 0;          // elements (bytes for raw comparisons) that differ, summed over ranks
  size_t checked = 0;        // elements compared, summed over ranks
  bool correct() const { return ran && wrong == 0 && checked > 0; }
  const GpuVariant* find(const std::string& algo) const;
};

/// Whether `t` can run on `world` ranks with these sizes; `why` says what is missing.
bool gpu_transition_expressible(Transition t, const GpuTransitionConfig& cfg, int world, std::string* why);

/// Runs, verifies and (cfg.time) times the original and the fused sequence of one transition.
/// Collective over `team` (every rank calls with the same config). Throws braid::Error on a failing
/// CUDA/NCCL call or a bounded wait that expired; returns ran = false for an inexpressible transition.
GpuTransitionResult run_gpu_transition(Team& team, const GpuTransitionConfig& cfg);

/// `braid bench transitions [--transition tp+sp,tp+ep,sp+ep] [--model llama3-8b|llama3-70b|mixtral-8x7b]
/// [--seq 1024,4096,8192] [--batch B] [--dtype bf16,fp32] [--experts E] [--topk k] [--iters N]
/// [--warmup N] [--calibration FILE] [--json FILE]`. argv may start with the program name and the
/// words "bench" "transitions" (words without a leading '-' are skipped). Prints a table on rank 0,
/// writes one JSON line per (transition, shape, variant). Returns 0 when every verdict is correct,
/// 3 when an output differs, 2 on a usage error (message on rank 0's stderr).
int bench_transitions(Team& team, int argc, char** argv, const bench::Context& ctx);

}  // namespace braid::fusion
