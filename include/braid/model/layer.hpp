// braid/model/layer.hpp — one Llama-style decoder layer (dense or MoE) on the GPU: bf16 storage, fp32
// accumulation, Megatron tensor parallelism with sequence parallelism (or plain TP with all-reduce),
// expert parallelism with all-to-all dispatch/combine for MoE, forward and backward.
//
//   auto comm = braid::model::make_nccl_comm(team);
//   braid::model::Layer layer(cfg, {.tp = team.size(), .sp = true}, *comm);
//   layer.load_weights(braid::model::init_weights(cfg, 1));     // full weights; each rank keeps its shard
//   upload rows of x to layer.x(); layer.forward(stream); read layer.y();
//   upload dy to layer.dy(); layer.backward(stream); read layer.dx(), layer.download_grads()
//
// Operator view: ops(phase) is the ordered list from plan_ops() (same names, shapes, FLOPs, bytes);
// run_op(phase, i, stream) runs operator i alone on any stream. forward()/backward() run them all in
// order. Running operators out of dependency order gives wrong numbers, never a crash: every buffer is
// allocated once at construction (MoE receive buffers are sized for the worst case).
//
// Rows: with sp, x/y/dy/dx hold this rank's local_tokens() = T/tp rows (rows rank·T/tp ...); without
// sp they hold all T rows, replicated. MoE is dropless by default: the dispatch operator exchanges
// per-expert counts and waits for them on the host (one device-to-host synchronisation per forward;
// backward reuses the forward's routing), so a dropless MoE forward cannot be captured in a CUDA graph.
// With a capacity factor (ModelConfig::capacity > 0) every shape is static — each rank sends each expert
// cap = expert_capacity(local tokens) rows (zero-padded; the (token, k) beyond cap in token order are
// dropped) — so nothing waits on the host and the whole layer is capturable. Dropless with the counts on the
// device (ModelConfig::moe_device_sizes) nothing waits either: the exchanges take device counts
// (Comm::all_to_all_rows) and the expert GEMMs device problem sizes (grouped GEMMs), also capturable.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "braid/model/comm.hpp"
#include "braid/model/config.hpp"
#include "braid/model/reference.hpp"

namespace braid::model {

class Layer {
 public:
  // The comm must have p.tp ranks and outlive the layer. Allocates every buffer.
  Layer(const ModelConfig& c, const Parallel& p, Comm& comm);
  // A second activation set of `owner`'s configuration sharing its weights (no weight copy): own
  // activations, own weight-gradient buffers, own cuBLAS handle, its own `comm` (same ranks; may be the
  // owner's or another communicator of the same team). `owner` must outlive this layer; load_weights /
  // init_random_weights through either layer write the one shared copy.
  Layer(const Layer& owner, Comm& comm);
  // What a second layer shares with its owner beyond the weights.
  enum class Share {
    kWeights,            // the constructor above: own activations, scratch and weight gradients
    kWeightsAndScratch,  // also the buffers only one phase touches: the backward's scratch (dyf, dact, dgu,
                         // dh2p/dh2, dx1/dx1f, dO, dqkv, delta, dh1p/dh1 and the MoE backward buffers) and
                         // the forward's transients, which the backward never reads (h1, a/mo and a dense
                         // layer's h2 with SP, attn_part, mlp_part, the MoE router logits, send/recv and expert
                         // outputs).
                         // Saved activations, x/y/dy/dx and weight gradients stay per layer.
    kAll,                // also the weight gradients, which then accumulate: the owner must have called
                         // set_accumulate_grads(true) first; this layer accumulates too. Each backward adds
                         // its contribution (no add_grads: the sum is already there). The owner keeps
                         // accumulating while such a layer exists.
  };
  // Contract for kWeightsAndScratch: the two layers never run their forwards at the same time, nor their
  // backwards (two strands, one forward paired with the other's backward, as DHelix pairs them); the
  // caller orders the streams so. Each layer's backward still reads its own saved activations. Copy-engine
  // layers (copy_engine_collectives) over two comms: construction registers the owner's scratch windows in this
  // layer's comm (Comm::register_window, collective) and destruction deregisters them, so the owner must outlive it.
  Layer(const Layer& owner, Comm& comm, Share share);
  ~Layer();
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  const ModelConfig& config() const;
  const Parallel& parallel() const;
  int64_t local_tokens() const;  // rows of x / y / dy / dx on this rank

  // Full float64 weights (reference layout); this rank uploads its shard rounded to bf16.
  void load_weights(const LayerWeights& full);
  // Random bf16 weights generated on the device (for large benchmarks): uniform ±1/sqrt(fan_in).
  void init_random_weights(uint64_t seed);
  // This rank's weight gradients in the shard layout (shard_of), as float64.
  LayerWeights download_grads() const;
  // The device buffers of this rank's weight gradients (shared with the owner under Share::kAll), in a fixed order:
  // the replicated fp32 ones (norms, router), then dwqkv, dwo, dw13, dw2 (bf16, shard layout): for comparing
  // gradients bit for bit on the device (bench::device_hash52) instead of downloading them.
  std::vector<std::pair<const void*, size_t>> grad_buffers() const;
  // Gradient accumulation: every backward adds its weight gradients to the buffers (wgrad GEMMs with
  // beta = 1; the replicated fp32 ones are computed apart, all-reduced, then added) instead of overwriting
  // them. zero_grads() clears them (stream-ordered). Off by default.
  void set_accumulate_grads(bool on);
  bool accumulates_grads() const;
  void zero_grads(cudaStream_t stream);
  // With Parallel::replicated_grads_per_step (sp at tp > 1): the backwards leave this rank's partial sums of the
  // replicated gradients (norms, router; accumulated when accumulating, else the last backward's); this all-reduces
  // them over the comm, once per step after the last backward — collective, stream-ordered. A Share::kAll layer and
  // its owner hold one set: call it on one of them. Otherwise nothing to do (returns at once). Until it ran,
  // download_grads returns the partial sums.
  void reduce_replicated_grads(cudaStream_t stream);
  // Intra-batch decomposition (the DHelix paper's baseline, Megatron's chunked TP overlap): with chunks >
  // 1, every all-gather -> GEMM and GEMM -> reduce-scatter pair (ag_h1/qkv_proj, out_proj/rs_attn,
  // ag_h2/gate_up_proj, down_proj/rs_mlp; backward ag_dy/down_proj_dgrad, gate_up_dgrad/rs_dh2,
  // ag_dx1/out_proj_dgrad, qkv_dgrad/rs_dh1) runs in `chunks` row chunks, each chunk's collective on a
  // stream of the layer's beside another chunk's GEMM (strided-batched cuBLAS over the ranks' row blocks).
  // The pair's first operator does the whole pair, the second is empty. Needs sp and chunks | local
  // tokens; 0 or 1 turns it off. Results equal the plain layer up to the GEMMs' and reductions' rounding.
  void set_decomposition(int chunks);
  int decomposition() const;
  // The pairs that open each pass in chunks (bench strands' -open<K> variants; docs/dhelix.md, fifty-seventh
  // session): with chunks > 1 the forward's ag_h1 -> qkv_proj and the backward's ag_dy -> down_proj_dgrad (dense) run
  // split across their two operators: the all-gather operator gathers `chunks` row chunks one after another on its
  // stream (each into scratch, then copied into the gathered tensor, an event recorded after each), and the GEMM
  // operator waits for each chunk's event on its own stream before that chunk's GEMM (strided-batched over the ranks'
  // row blocks). A strand executor whose GEMM operator does not wait for the all-gather operator's end
  // (schedule::opening_chunked_layer, dependency-ready) then starts a unit's compute after one chunk's all-gather. The
  // all-gather operator must be issued (host order) before its GEMM operator (which throws UsageError otherwise);
  // whatever else reads the gathered tensor (h1f, dyf) must run after the GEMM operator. Needs sp, chunks | local
  // tokens and no set_decomposition; 0 or 1 turns it off. Results equal the plain layer up to the GEMMs' rounding. A
  // runtime switch: a compute-only pass (no all-gather operators) runs with it off.
  void set_opening_chunks(int chunks);
  int opening_chunks() const;
  // True when this layer's collectives run on its comm's copy engines (a dense SP layer at TP = 2 over
  // make_nccl_ce_comm): the gathered tensors and the reduce-scatters' partial sums in the comm's windows, the
  // all-gathers in place, each reduce-scatter one in-place transfer summed by its consumer (no SM for any of them;
  // with set_decomposition the chunks take NCCL's kernels). Results equal NCCL's up to its reduce-scatter's order.
  bool copy_engine_collectives() const;
  // this layer's weight gradients += other's (same configuration), stream-ordered on `stream`: bf16
  // elementwise sums for the sharded gradients, fp32 for the replicated ones (norms, router). Summing
  // strand gradients always in the order (α += β) makes the result independent of how they overlapped.
  void add_grads(const Layer& other, cudaStream_t stream);

  // Use `other`'s cuBLAS workspace (32 MiB) instead of this layer's own, which is freed. Only for layers
  // whose GEMMs never run at the same time — stream-ordered on one compute stream, as the strand executor
  // and the pipeline executor issue them (not round-robin on two streams). `other` must outlive this layer
  // and keep its workspace. Synchronizes the device.
  void share_cublas_workspace(const Layer& other);
  // At most `sms` SMs for this layer's cuBLAS GEMMs (cublasSetSmCountTarget; 0: all, the default), so that
  // a collective launched beside a GEMM finds SMs free: a persistent GEMM kernel that took every SM first
  // holds a later collective's CTAs back until it ends. Host-side setting of the layer's handle; takes
  // effect for GEMMs launched after it.
  void set_gemm_sm_target(int sms);
  // Use `owner`'s y, dy and dx instead of this layer's own, which are freed (SP layers, dense or MoE):
  // for two strands of one layer, a forward writes y, a backward reads dy and writes dx, and a real stack
  // hands them on to the next layer at once. Contract: whoever consumes a layer's y or dx does so before
  // the other layer's forward or backward writes it again, and each backward's dy is written just before
  // it (one strand's forward beside the other's backward never conflict: disjoint buffers). x stays per
  // layer (the backward reads it). `owner` must outlive this layer.
  void share_interfaces(const Layer& owner);

  // Device memory this layer allocated itself (cudaMalloc'd bytes; pinned host buffers excluded).
  struct Memory {
    size_t weights = 0;      // 0 for a layer sharing another's weights
    size_t grads = 0;        // weight gradients (and the norm-gradient scratch)
    size_t activations = 0;  // forward and backward activations, MoE buffers
    size_t workspace = 0;    // cuBLAS workspace
    size_t total() const { return weights + grads + activations + workspace; }
  };
  Memory memory() const;
  bool shares_weights() const;

  // The saved activations — what the backward reads of the forward's results — named and sized as
  // schedule::saved_tensors lists them: dense rstd1, qkv, o, lse, x1, rstd2, gu, act, and h1f/h2f with sp
  // at tp > 1, else h1/h2; MoE the attention half (h1f or h1), h2, prob, route, pos, sort_map, unsort_map,
  // ret, xs, egu, eact (the expert buffers at the layer's capacity, T * top_k rows).
  std::vector<std::pair<std::string, size_t>> saved_layout() const;
  // Moves them into caller-owned device memory: tensor `name` to base + offset (offsets 256-byte aligned,
  // every saved_layout() name given once). The layer frees its own copies (memory() stops counting them)
  // and every later operator uses the new addresses. Contents are not copied. Whoever shares that memory
  // must order its writes after the layer's last reads (schedule::two_strand_placement and the strand
  // executor's memory waits do that for two strands).
  // Copy-engine layers (copy_engine_collectives()): where h1f / h2f land inside a window of this layer's comm
  // (Comm::in_window: schedule::PlacedMemory), h1 / h2 stay their rank's slots of them and the all-gathers stay on the
  // copy engines — so norm1 / residual_norm2 write the placed tensor first (schedule::saved_tensors with
  // in_place_gathers names them its producers, so the memory waits come before them). Elsewhere h1 / h2 become
  // buffers of their own and those all-gathers take NCCL's kernels.
  void place_saved(void* base, const std::vector<std::pair<std::string, size_t>>& offsets);
  // The comm this layer's collectives use (what it was constructed with).
  Comm& comm() const;
  // Uses caller-owned device memory as x ([local_tokens(), hidden] bf16, 256-byte aligned): the input the
  // forward reads and the backward reads again (norm1). Frees the layer's own x the first time (memory()
  // stops counting it; synchronizes the device then), and only moves a host pointer after that, so a
  // stack of layers can rotate one layer object's input (and, with place_saved, its saved activations)
  // through slots between operators (schedule::StrandStack). Contents are not copied.
  void place_input(void* x);

  // Device bf16 buffers, [local_tokens(), hidden] row-major.
  void* x() const;
  void* y() const;
  void* dy() const;
  void* dx() const;

  const std::vector<OpInfo>& ops(Phase ph) const;
  void run_op(Phase ph, size_t index, cudaStream_t stream);
  void forward(cudaStream_t stream);
  void backward(cudaStream_t stream);

  // MoE: the host-side routing of the last forward that its backward reads (the all-to-all counts and
  // displacements, rows per local expert, rows received), taken after the forward's operators were
  // enqueued (its dispatch waits for the counts on the host). A stack of MoE layers run through one layer
  // object (schedule::StrandStack) keeps one per layer and puts it back before that layer's backward; the
  // device-side routing (prob, route, pos, the row maps) is among the saved tensors. Empty for a dense layer.
  struct Routing {
    std::vector<size_t> sc, sd, rc, rd;  // all-to-all send/receive counts and displacements (elements)
    std::vector<int64_t> expert_rows;    // rows per local expert
    int64_t rows = 0;                    // rows received
  };
  Routing routing() const;
  // Cumulative host time (us) this layer's MoE forwards spent blocked waiting for the all-to-all counts
  // (the dispatch's host wait); 0 for a dense layer. What an executor issuing both strands from one thread
  // loses to it.
  double host_wait_us() const;
  void set_routing(const Routing& r);
  // Dropless MoE with the counts on the device (ModelConfig::moe_device_sizes): every rank's per-expert counts as
  // the last forward's exchange (a2a_counts) left them, [tp, experts] fp32 (device_counts_size() values); nullptr
  // and 0 otherwise. expert_layout derives the forward's layout from them; a compute-only pass skips the exchange,
  // so a stack that replays a layer's routing (schedule::StrandStack::pass_compute_only) puts its own back first.
  float* device_counts() const;
  size_t device_counts_size() const;

  // MoE: the (token, k) entries this rank routed in its last forward, and how many of them the capacity factor
  // dropped (reads the forward's per-expert counts: synchronizes the device). {0, 0} for a dense layer; dropped
  // is 0 when dropless.
  struct MoeDrops {
    int64_t routed = 0, dropped = 0;
  };
  MoeDrops moe_drops() const;
  // moe_drops() summed over the team's ranks as a fraction of the routed (token, k); -1 for a dense or dropless
  // layer. Collective (every rank calls it); rank 0 prints one line when `print`.
  double moe_dropped_fraction(const Team& team, bool print = false) const;
  // MoE: rows each local expert received in the last forward (host copy), E/tp entries.
  std::vector<int64_t> local_expert_rows() const;
  // MoE: the experts each local token was routed to in the last forward, [local_tokens(), top_k]
  // row-major, highest logit first (host copy; synchronizes the device). Tests pass these to
  // reference_layer(..., &routes) so that a near-tie ordered differently by bf16 logits does not count
  // as an error (docs/layer.md, "MoE gradient mismatch").
  std::vector<int> local_routes() const;
  // Which attention runs: "cudnn" (fused, tensor cores), "cudnn (non-deterministic backward)", or
  // "naive" (braid's CUDA-core kernels; with the reason when cuDNN was wanted but unavailable).
  // Environment BRAID_ATTN=auto|cudnn|naive at construction chooses (src/model/attention.hpp).
  std::string attention_backend() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace braid::model
