// braid/model/config.hpp — the model description, its presets, and the operator view of one decoder
// layer (ordered named operators with shapes, FLOPs and bytes). CPU only: no CUDA needed.
//
//   auto cfg = braid::model::preset("llama3-70b");  cfg.seq = 8192;  cfg.micro_batch = 1;
//   braid::model::Parallel par{.tp = 2, .sp = true};
//   for (const auto& op : braid::model::plan_ops(cfg, par, braid::model::Phase::kForward)) ...
//
// Token layout everywhere: T = micro_batch * seq tokens, token t = b * seq + s, activations row-major
// [tokens, features]. Weights row-major [in, out] (y = x · W).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace braid::model {

struct ModelConfig {
  std::string name = "custom";
  int hidden = 0;       // H
  int heads = 0;        // query heads
  int kv_heads = 0;     // key/value heads (GQA); heads % kv_heads == 0
  int head_dim = 0;     // 0: hidden / heads
  int ffn = 0;          // F: SwiGLU inner size (per expert for MoE)
  int experts = 0;      // 0: dense MLP; > 0: mixture of experts
  int top_k = 0;        // experts per token (MoE)
  int seq = 2048;       // S
  int micro_batch = 1;  // B
  double rope_theta = 500000.0;
  double norm_eps = 1e-5;
  // MoE capacity factor. 0: dropless — every (token, k) reaches its expert; the per-expert counts size
  // the exchange and the expert GEMMs, so each forward waits for them on the host (not capturable).
  // > 0: each rank sends every expert at most expert_capacity(local tokens) rows, in token order (t, then
  // k); the rest are dropped (their gate contributes nothing, GShard / Switch style) and unused slots are
  // zero rows. Every shape is static: no host synchronisation, a whole layer is CUDA-graph capturable.
  double capacity = 0;
  // Dropless only (capacity 0): where the per-expert counts live. false: on the host — the forward waits for
  // them (the exchange's sizes, one cuBLAS GEMM per expert). true: on the device — a layout kernel turns the
  // exchanged counts into the row maps, the exchange sizes and the experts' rows; the all-to-alls read their
  // counts on the device (Comm::all_to_all_rows) and the expert GEMMs are grouped GEMMs whose problem sizes are
  // read on the device (model/moe_gemm.hpp): no host wait, the MoE layer CUDA-graph capturable, dropless.
  bool moe_device_sizes = false;

  bool moe() const { return experts > 0; }
  // Rows per (source rank, expert) under `capacity` for a rank holding `local_tokens` tokens:
  // ceil(capacity * local_tokens * top_k / experts); 0 when dropless.
  int64_t expert_capacity(int64_t local_tokens) const;
  int hd() const { return head_dim > 0 ? head_dim : hidden / heads; }
  int64_t tokens() const { return int64_t(seq) * micro_batch; }
  int q_dim() const { return heads * hd(); }
  int kv_dim() const { return kv_heads * hd(); }
  // Throws UsageError when the shape is inconsistent.
  void validate() const;
  std::string describe() const;
};

// llama3-8b, llama3-70b, mixtral-8x7b, and the test shapes "tiny" and "tiny-moe". Throws UsageError.
ModelConfig preset(const std::string& name);
std::vector<std::string> preset_names();

struct Parallel {
  int tp = 1;      // tensor-parallel ranks (attention heads and FFN columns are split tp ways)
  bool sp = true;  // sequence parallelism: AG before column-parallel GEMMs, RS after row-parallel ones;
                   // false: plain TP (inputs replicated, all-reduce after row-parallel GEMMs)
  // Expert parallelism (MoE): experts are split over the same tp ranks (ep == tp), each expert whole
  // (not tensor-split); tokens move by all-to-all. MoE requires sp (tokens partitioned by rank).
  // With sp at tp > 1 each rank's backward sees only its tokens, so the replicated weights' gradients (the two
  // norms', an MoE router's: fp32) are partial sums until all-reduced. false: every backward all-reduces them (its
  // last operator, ar_replicated_grads). true: Megatron's way (finalize_model_grads) — the backward keeps this
  // rank's partial sums (added into the totals when accumulating, inside norm1_bwd as without sp) and has no such
  // operator; model::Layer::reduce_replicated_grads all-reduces the totals once per step, after its last backward.
  bool replicated_grads_per_step = false;
  void validate(const ModelConfig& c) const;
  // True when the backward ends in ar_replicated_grads (sp at tp > 1, not per step).
  bool reduces_replicated_grads_per_backward() const { return sp && tp > 1 && !replicated_grads_per_step; }
  // True when model::Layer::reduce_replicated_grads has them to all-reduce (sp at tp > 1, per step).
  bool reduces_replicated_grads_per_step() const { return sp && tp > 1 && replicated_grads_per_step; }
};

enum class Phase { kForward, kBackward };
enum class OpKind { kCompute, kComm };
enum class CommKind { kNone, kAllGather, kReduceScatter, kAllReduce, kAllToAll };
const char* comm_name(CommKind c);  // "", "allgather", "reducescatter", "allreduce", "alltoall"

// One operator of one rank. FLOPs count multiply-adds as 2; for attention only the causal half of the
// score matrix is counted (model FLOPs). For compute ops `bytes` is the minimum HBM traffic (each
// input read once, each output written once); for communication ops it is the payload per rank in the
// collective's own convention (allgather/reducescatter: the full gathered buffer; allreduce: the
// buffer; alltoall: what this rank sends). MoE operators after routing assume balanced routing
// (each expert receives tokens * top_k / experts rows); real counts are data dependent.
struct OpInfo {
  std::string name;
  OpKind kind = OpKind::kCompute;
  CommKind comm = CommKind::kNone;
  std::string shape;  // human-readable, e.g. "[8192,8192]x[8192,5120]"
  double flops = 0;
  double bytes = 0;
};

// The ordered operator list of one rank for a layer's forward or backward pass. bf16 activations and
// weights (2 bytes), fp32 statistics. The GPU layer (braid/model/layer.hpp) runs exactly this list.
std::vector<OpInfo> plan_ops(const ModelConfig& c, const Parallel& p, Phase phase);

// Model FLOPs of the whole layer for all ranks together (forward, or backward = input + weight
// gradients), causal attention counted half. Used for MFU.
double layer_model_flops(const ModelConfig& c, Phase phase);

}  // namespace braid::model
