// braid/schedule/ops.hpp — the operator description the DHelix pairing search works on.
//
// One transformer layer is two small DAGs: its forward operators and its backward operators. Each
// operator names what it is (compute or communication), which resource it occupies (the compute
// stream, the local-node link or the cross-node link: DHelix's three streams), and its solo time.
// Dependencies are indices into the same pass. A later layer implementation (issue 5) produces a
// Layer from its real kernels; the builders below produce one from an analytic model so the planner
// runs without a GPU.
#pragma once

#include <string>
#include <vector>

namespace braid::schedule {

/// Computation-intensive or communication-intensive (Table 2 of the paper).
enum class OpKind { Compute, Comm };
/// Which DHelix stream / link the operator occupies.
enum class LinkClass { Compute, Local, Cross };
/// Which pass of the layer the operator belongs to.
enum class Pass { Forward, Backward };

/// One operator base.
struct Op {
  std::string name;           // unique within the layer, e.g. "f.qkv" or "b.qkv_wgrad"
  std::string type;           // fine class for overlap rules: gemm, attn, elem, router, ag, rs, a2a
  OpKind kind = OpKind::Compute;
  LinkClass link = LinkClass::Compute;
  Pass pass = Pass::Forward;
  std::vector<int> deps;      // indices of operators of the same pass that must finish first
  double solo_us = 0;         // time when running alone (analytic or profiled)
  /// The host gate: index of an operator of the same pass (directly before this one in its pass's order) whose
  /// GPU completion the issuing thread waits for before it can issue this operator — the dropless MoE dispatch,
  /// which needs the all-to-all counts on the host. -1: none. Every operator issued after this one, of either
  /// strand, then starts no earlier than that completion (the executor models: list_schedule, plan_timeline,
  /// best_issue_order, corun_makespan_us; not the segment pairing DP).
  int host_waits_for = -1;
  /// The host's time to issue this operator (us; profiled, PairTable::host_us; 0: free). The executor models
  /// issue every operator in issue order on one host thread: operator k is enqueued at
  /// H_k = max(H_{k-1}, its gate's end) + host_us and starts on the GPU no earlier — so a pass whose operators
  /// take the host longer to issue than the GPU to run is bound by the host.
  double host_us = 0;
};

/// The forward and backward DAGs of one layer for one parallel setting.
struct Layer {
  std::string model;          // e.g. "llama3-70b"
  std::string parallel;       // e.g. "tp=2,sp=2,seq=8192"
  std::vector<Op> fwd, bwd;
  /// How the strand executor and its model start an operator: false (default): when its strand's previous
  /// operator (in issue order) is done — each strand a chain; true: when its DAG dependencies (Op::deps)
  /// are done, so e.g. a weight-gradient GEMM runs beside its own strand's collective (dep_ready_layer).
  bool dep_ready = false;

  /// The operators of one pass.
  const std::vector<Op>& ops(Pass p) const { return p == Pass::Forward ? fwd : bwd; }
  /// Index of the operator called `name` in pass `p`, or -1.
  int find(Pass p, const std::string& name) const;
};

/// Dimensions of a Llama-style (optionally MoE) model; see model_dims().
struct ModelDims {
  std::string name;
  int hidden = 0, ffn = 0, heads = 0, kv_heads = 0, head_dim = 0;
  int experts = 0, top_k = 0;  // experts == 0: dense
};

/// The known models: llama3-70b, llama3-8b, mixtral-8x7b (throws UsageError otherwise).
ModelDims model_dims(const std::string& name);

/// The hardware of the analytic time model (defaults: one H100 SXM, NVLink, 400 Gb/s IB).
struct Hardware {
  double peak_flops = 989e12;     // dense BF16
  double gemm_eff = 0.70;         // fraction of peak a large GEMM reaches
  double attn_fwd_eff = 0.50;     // flash attention forward
  double attn_bwd_eff = 0.40;     // flash attention backward
  double hbm_bw = 3.35e12;        // bytes/s
  double mem_eff = 0.70;          // fraction of HBM bandwidth memory-bound kernels reach
  double local_bw = 360e9;        // NVLink bus bandwidth per GPU, bytes/s
  double local_lat_us = 10;
  double cross_bw = 45e9;         // InfiniBand per GPU, bytes/s
  double cross_lat_us = 20;
};

/// The parallel setting of a synthetic layer.
struct LayerConfig {
  int tp = 2;                     // tensor (and sequence) parallel size
  int ep = 1;                     // expert parallel size (MoE only)
  long seq = 8192;                // tokens per micro-batch
  int batch = 1;                  // sequences per micro-batch
  bool ep_cross_node = true;      // A2A on the cross-node link (else local)
  bool tp_cross_node = false;     // TP AG/RS on the cross-node link (else local)
  int elem_bytes = 2;             // bf16
  double capacity = 0;            // MoE capacity factor (model::ModelConfig::capacity): every expert's rows
                                  // padded to ceil(capacity * local tokens * top_k / experts); 0: dropless
};

/// Llama-style TP+SP layer: 12 forward and 18 backward operators, dgrad/wgrad separate and the
/// Megatron re-gather of the sharded input before each wgrad.
Layer build_llama_layer(const ModelDims& m, const LayerConfig& c, const Hardware& hw = {});

/// MoE/EP variant: the attention half as in build_llama_layer, then router, A2A dispatch, expert
/// GEMMs and A2A combine; the router backward and all wgrads can move in the backward DAG.
Layer build_moe_layer(const ModelDims& m, const LayerConfig& c, const Hardware& hw = {});

/// build_moe_layer when m.experts > 0, else build_llama_layer.
Layer build_layer(const ModelDims& m, const LayerConfig& c, const Hardware& hw = {});

/// Empty when every dependency points backwards to an existing operator of the same pass and the
/// fields agree (Comm <=> link != Compute); otherwise what is wrong.
std::string validate_layer(const Layer& layer);

/// "compute", "local", "cross".
const char* link_name(LinkClass l);

}  // namespace braid::schedule
