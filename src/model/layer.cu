// The GPU decoder layer: buffers, weights, and the forward/backward operator lists (see layer.hpp).
// Each operator is a closure over the layer's buffers, built in the order of plan_ops(); the two lists
// are checked name by name at construction.
#include <cublas_v2.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>

#include "braid/env.hpp"
#include "braid/errors.hpp"
#include "braid/model/layer.hpp"
#include "attention.hpp"
#include "ce_layout.hpp"
#include "kernels.cuh"
#include "moe_gemm.hpp"
#include "moe_layout.hpp"

namespace braid::model {

namespace k = kernels;
using bf16 = k::bf16;

namespace {

uint16_t to_bf16_bits(double v) {
  float fv = static_cast<float>(v);
  uint32_t u;
  std::memcpy(&u, &fv, 4);
  if ((u & 0x7f800000u) != 0x7f800000u) u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
double from_bf16_bits(uint16_t b) {
  const uint32_t u = uint32_t(b) << 16;
  float fv;
  std::memcpy(&fv, &u, 4);
  return fv;
}

}  // namespace

struct Layer::Impl {
  ModelConfig c;
  Parallel p;
  Comm& comm;
  int rank = 0, tp = 1;
  bool sp = false, moe = false;
  int64_t T = 0, Tl = 0, H = 0, S = 0, B = 0, d = 0, hq = 0, hkv = 0, qd = 0, kvd = 0, nqkv = 0, Fl = 0, F = 0;
  int64_t E = 0, El = 0, K = 0, Rmax = 0;
  int64_t cap = 0;    // MoE capacity rows per (source rank, expert) (ModelConfig::capacity); 0: dropless
  int64_t Srows = 0;  // MoE rows of the send-side buffers (send, ret, dret, drow): Tl * K, or E * cap
  cublasHandle_t blas = nullptr;
  std::unique_ptr<attn::Attention> attention;  // cuDNN fused attention or braid's kernels (attention.hpp)
  void* blas_ws = nullptr;
  std::vector<void*> allocations;
  const Impl* owner = nullptr;  // weights come from this layer (Layer(owner, comm))
  bool share_scratch = false;   // Share::kWeightsAndScratch / kAll: one-phase buffers are the owner's too
  bool share_grads = false;     // Share::kAll: weight gradients are the owner's (and accumulate)
  bool accumulate = false;      // set_accumulate_grads: backward adds to the gradients
  float* rep_step = nullptr;    // accumulate: this backward's replicated gradients before the add (scratch)
  int64_t rep_elems = 0;        // 2H + H·E
  // Where this backward writes the replicated gradients [dnorm1 H | dnorm2 H | drouter H·E].
  float* rep_out() const { return accumulate ? rep_step : rep; }
  float wgrad_beta() const { return accumulate ? 1.f : 0.f; }
  // Intra-batch decomposition (set_decomposition): each all-gather -> GEMM and GEMM -> reduce-scatter pair
  // runs in `decompose` row chunks, the collective of one chunk on `dstream` beside the GEMM of another.
  int decompose = 0;
  // set_opening_chunks: only the pairs that open a strand's pass (ag_h1 -> qkv_proj, ag_dy -> down_proj_dgrad) in
  // `open_chunks` chunks: the all-gather operator gathers chunk by chunk on its own stream and records oevents[pair][c]
  // after each; the GEMM operator waits for each on its stream before that chunk's GEMM. open_gathered[pair]: the
  // all-gather operator has been issued since the GEMM operator last ran (the events are recorded). Never with
  // decompose.
  int open_chunks = 0;
  std::vector<cudaEvent_t> oevents[2];  // [0] the forward's h1, [1] the backward's dy; one per chunk
  bool open_gathered[2] = {false, false};
  // The opening all-gather in chunks (set_opening_chunks) on `s`: chunk c (rows c·R .. of every rank, R = Tl / K) into
  // tmp [tp][R][H], copied into xf [T, H], then oevents[pair][c] recorded.
  void open_gather(int pair, cudaStream_t s, const bf16* x, bf16* xf, bf16* tmp) {
    const int K = open_chunks;
    const int64_t R = Tl / K;
    for (int c = 0; c < K; ++c) {
      bf16* t = tmp + int64_t(c) * tp * R * H;
      comm.all_gather(x + int64_t(c) * R * H, t, size_t(R * H), DType::kBF16, s);
      BRAID_CUDA_CHECK(cudaMemcpy2DAsync(xf + int64_t(c) * R * H, size_t(Tl * H) * 2, t, size_t(R * H) * 2,
                                         size_t(R * H) * 2, size_t(tp), cudaMemcpyDeviceToDevice, s));
      BRAID_CUDA_CHECK(cudaEventRecord(oevents[pair][size_t(c)], s));
    }
    open_gathered[pair] = true;
  }
  // ... and its GEMM, chunk by chunk on `s` as each chunk arrives.
  void open_gemm(int pair, cudaStream_t s, const std::function<void(cudaStream_t, int64_t, int64_t)>& gemm_chunk) {
    BRAID_REQUIRE(open_gathered[pair], std::string("layer: with opening chunks the ") +
                                           (pair == 0 ? "ag_h1 operator must run before qkv_proj" :
                                                        "ag_dy operator must run before down_proj_dgrad"));
    const int K = open_chunks;
    const int64_t R = Tl / K;
    for (int c = 0; c < K; ++c) {
      BRAID_CUDA_CHECK(cudaStreamWaitEvent(s, oevents[pair][size_t(c)], 0));
      gemm_chunk(s, int64_t(c) * R, R);
    }
    open_gathered[pair] = false;
  }
  cudaStream_t dstream = nullptr;
  std::vector<cudaEvent_t> devents;  // [0] fork, [1 + c] chunk c, [chunks + 1] join
  // TP = 2 collectives on the comm's copy engines (Comm::alloc_window: make_nccl_ce_comm), dense SP layers: the
  // gathered tensors h1f, h2f, dx1f are windows whose own slot [rank·Tl, (rank+1)·Tl) rows is h1, h2, dx1 (written in
  // place, so the all-gather moves only the peer's rows); each reduce-scatter's partial sums go to a window of
  // 4·Tl rows [k0 | s0 | s1 | k1] (ce_layout.hpp): rank r's GEMM writes its T rows at 2r·Tl, so its own rows land in
  // k_r and the peer's in s_r; the transfer is the in-place all-gather over [s0 | s1] (rank r's s_r goes to the peer's
  // s_r), and the consumer op sums k_r + s_peer (rs_finish: k::add, one bf16 rounding of the fp32 sum, as NCCL's
  // two-rank reduce-scatter rounds it) before its own kernel. No collective of the layer then takes an SM.
  bool ce = false;
  std::vector<void*> windows;  // comm.alloc_window memory (comm.free_window)
  // BRAID_LAYER_CE_RS=0 (diagnosis): the reduce-scatters stay NCCL's reduce_scatter, the all-gathers' windows kept.
  bool ce_rs_on = env::flag("BRAID_LAYER_CE_RS").value_or(true);
  bool ce_rs() const { return ce && ce_rs_on && decompose <= 1; }
  bf16* rs_gemm_out(bf16* part) const { return ce_rs() ? part + detail::ce_rs_slots(rank).gemm_out * Tl * H : part; }
  void rs_transfer(bf16* part, bf16* out, cudaStream_t s) {
    if (ce_rs())
      return comm.all_gather(part + detail::ce_rs_slots(rank).send * Tl * H, part + detail::kCeRsGatherFirst * Tl * H,
                             size_t(Tl * H), DType::kBF16, s);
    comm.reduce_scatter(part, out, size_t(Tl * H), DType::kBF16, s);
  }
  void rs_finish(const bf16* part, bf16* out, cudaStream_t s) {
    if (!ce_rs()) return;
    const auto slots = detail::ce_rs_slots(rank);
    k::add(part + slots.keep * Tl * H, part + slots.recv * Tl * H, out, Tl * H, s);
  }
  size_t* account = nullptr;    // which Memory field alloc() charges
  size_t mem_weights = 0, mem_grads = 0, mem_act = 0, mem_ws = 0;
  std::vector<OpInfo> plan[2];
  std::vector<std::function<void(cudaStream_t)>> fn[2];

  // weights
  bf16 *g1 = nullptr, *g2 = nullptr, *wqkv = nullptr, *wo = nullptr, *w13 = nullptr, *w2 = nullptr, *wr = nullptr;
  // weight gradients (bf16, fp32 for the replicated ones: rep = [dnorm1 H | dnorm2 H | drouter H·E])
  bf16 *dwqkv = nullptr, *dwo = nullptr, *dw13 = nullptr, *dw2 = nullptr;
  float *rep = nullptr, *norm_partial = nullptr;
  int norm_chunks = 0;
  // forward activations
  bf16 *x = nullptr, *h1 = nullptr, *h1f = nullptr, *qkv = nullptr, *o = nullptr, *attn_part = nullptr, *a = nullptr;
  bf16 *x1 = nullptr, *h2 = nullptr, *h2f = nullptr, *gu = nullptr, *act = nullptr, *mlp_part = nullptr, *mo = nullptr;
  bf16* y = nullptr;
  float *rstd1 = nullptr, *rstd2 = nullptr, *lse = nullptr, *delta = nullptr;
  // backward activations
  bf16 *dy = nullptr, *dyf = nullptr, *dact = nullptr, *dgu = nullptr, *dh2p = nullptr, *dh2 = nullptr;
  bf16 *dx1 = nullptr, *dx1f = nullptr, *dO = nullptr, *dqkv = nullptr, *dh1p = nullptr, *dh1 = nullptr, *dx = nullptr;
  // MoE
  float *logits = nullptr, *prob = nullptr, *counts = nullptr, *rcounts = nullptr, *dlogits = nullptr;
  int *route = nullptr, *pos = nullptr, *sort_map = nullptr, *unsort_map = nullptr;
  bf16 *send = nullptr, *recv = nullptr, *xs = nullptr, *egu = nullptr, *eact = nullptr, *eout = nullptr;
  bf16 *eout_u = nullptr, *ret = nullptr, *dret = nullptr, *drecv = nullptr, *dout_s = nullptr, *deact = nullptr;
  bf16 *degu = nullptr, *dxs = nullptr, *dxr = nullptr, *drow = nullptr;
  float *counts_h = nullptr, *rcounts_h = nullptr;  // pinned
  int* maps_h = nullptr;                            // pinned: sort map then unsort map
  std::vector<size_t> sc, sd, rc, rd;               // all-to-all counts/displacements (elements)
  std::vector<int64_t> expert_rows;                 // rows per local expert (last forward)
  int64_t R = 0;                                    // rows received in the last forward
  // The count exchange is split so that its host wait sits at the dispatch, not at the exchange:
  // a2a_counts enqueues the exchange and the copies to the host and records counts_ev; a2a_dispatch
  // first waits for counts_ev on the host (moe_finish_counts), so an executor issues the ops it placed
  // between the two (the other strand's) before the host blocks.
  cudaEvent_t counts_ev = nullptr;
  bool counts_pending = false;
  double host_wait_us = 0;  // cumulative host time blocked in moe_finish_counts (Layer::host_wait_us)
  // Dropless with the counts on the device (ModelConfig::moe_device_sizes): nothing above (host counts, sc/rc,
  // expert_rows, R) is used. a2a_counts all-gathers the counts into counts_all [tp, E]; expert_layout (compute: a
  // compute-only pass runs it) writes with moe_device_layout `layout` (int32 [tp·tp row matrix | El expert rows | R], a saved tensor: the backward's exchanges and GEMMs read
  // it) and the row maps; the exchanges are Comm::all_to_all_rows, the expert GEMMs grouped (one object per call
  // site: a call's device argument arrays stay its own while it runs).
  bool dev_sizes = false;
  float* counts_all = nullptr;
  int* layout = nullptr;
  enum GroupedSite { kGateUp, kDown, kDownDgrad, kDownWgrad, kGateUpDgrad, kGateUpWgrad, kSites };
  std::unique_ptr<detail::GroupedGemm> grouped[kSites];
  const int* layout_rows() const { return layout; }                       // [tp, tp]
  const int* layout_experts() const { return layout + tp * tp; }          // [El]
  const int* layout_R() const { return layout + tp * tp + El; }           // [1]

  Impl(const ModelConfig& cfg, const Parallel& par, Comm& cm) : c(cfg), p(par), comm(cm) {}

  // A buffer only one phase touches: the owner's with Share::kWeightsAndScratch, else a new one.
  template <class Tp>
  Tp* one_phase(Tp* Impl::*field, size_t n) {
    return share_scratch ? owner->*field : alloc<Tp>(n);
  }

  // A window of the comm (ce), charged like alloc().
  template <class Tp>
  Tp* window(size_t n) {
    void* ptr = comm.alloc_window(std::max<size_t>(n, 1) * sizeof(Tp));
    BRAID_REQUIRE(ptr != nullptr, "layer: the comm offers no window (internal error)");
    BRAID_CUDA_CHECK(cudaMemset(ptr, 0, std::max<size_t>(n, 1) * sizeof(Tp)));
    windows.push_back(ptr);
    if (account) *account += std::max<size_t>(n, 1) * sizeof(Tp);
    return static_cast<Tp*>(ptr);
  }
  // one_phase() for a window: the owner's with Share::kWeightsAndScratch — a window of the owner's comm, registered
  // in this one too (Comm::register_window) where the comms differ, so this layer's collectives on it take the copy
  // engines as well (before a89b5bd they fell back to NCCL's kernels: every collective of a second strand object
  // sharing the owner's scratch took SMs) — else a new one.
  template <class Tp>
  Tp* one_phase_window(Tp* Impl::*field, size_t n) {
    if (!share_scratch) return window<Tp>(n);
    Tp* ptr = owner->*field;
    if (&comm != &owner->comm) {
      BRAID_REQUIRE(comm.register_window(ptr, std::max<size_t>(n, 1) * sizeof(Tp)),
                    "layer: the comm takes no window of the owner's (internal error)");
      windows.push_back(ptr);  // (free_window: deregistered here; the owner frees it)
    }
    return ptr;
  }

  template <class Tp>
  Tp* alloc(size_t n) {
    void* ptr = nullptr;
    BRAID_CUDA_CHECK(cudaMalloc(&ptr, std::max<size_t>(n, 1) * sizeof(Tp)));
    BRAID_CUDA_CHECK(cudaMemset(ptr, 0, std::max<size_t>(n, 1) * sizeof(Tp)));
    allocations.push_back(ptr);
    if (account) *account += std::max<size_t>(n, 1) * sizeof(Tp);
    return static_cast<Tp*>(ptr);
  }

  // Row-major C[M,N] = op(A)·op(B), op(A) [M,K]; ta: A is stored [K,M]; tb: B is stored [N,K].
  // beta = 1 accumulates into C (weight gradients under set_accumulate_grads).
  void gemm(cudaStream_t s, bool ta, bool tb, int64_t M, int64_t N, int64_t Kd, const bf16* A, int64_t lda,
            const bf16* Bm, int64_t ldb, bf16* C, int64_t ldc, float beta = 0.f) {
    if (M == 0 || N == 0) return;
    if (Kd == 0) {  // an empty expert: C = 0 (or unchanged when accumulating)
      if (beta == 0.f) BRAID_CUDA_CHECK(cudaMemset2DAsync(C, ldc * sizeof(bf16), 0, N * sizeof(bf16), M, s));
      return;
    }
    const float alpha = 1.f;
    BRAID_CUBLAS_CHECK(cublasSetStream(blas, s));
    BRAID_CUBLAS_CHECK(cublasGemmEx(blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, int(N),
                                    int(M), int(Kd), &alpha, Bm, CUDA_R_16BF, int(ldb), A, CUDA_R_16BF, int(lda), &beta,
                                    C, CUDA_R_16BF, int(ldc), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }

  // Row-major C_b[M,N] = A_b[M,K]·op(B) for b < batch (A, C with batch strides sA, sC; B shared).
  void gemm_batched(cudaStream_t s, bool tb, int64_t M, int64_t N, int64_t Kd, const bf16* A, int64_t lda, int64_t sA,
                    const bf16* Bm, int64_t ldb, bf16* C, int64_t ldc, int64_t sC, int batch) {
    if (M == 0 || N == 0 || batch == 0) return;
    const float alpha = 1.f, beta = 0.f;
    BRAID_CUBLAS_CHECK(cublasSetStream(blas, s));
    BRAID_CUBLAS_CHECK(cublasGemmStridedBatchedEx(blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, int(N), int(M),
                                                  int(Kd), &alpha, Bm, CUDA_R_16BF, int(ldb), 0, A, CUDA_R_16BF,
                                                  int(lda), sA, &beta, C, CUDA_R_16BF, int(ldc), sC, batch,
                                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }

  // Decomposed all-gather -> GEMM in K chunks. x [Tl, H] local rows; xf [T, H] gathered (token order, kept for the
  // backward); tmp [T, H] scratch. Chunk c (rows c·R .. of every rank, R = Tl / K) is gathered on
  // dstream into tmp [tp][R][H], copied into xf, then gemm_chunk(s, c·R, R) runs on `s` once it arrived.
  void ag_then_gemm(int K, cudaStream_t s, const bf16* x, bf16* xf, bf16* tmp,
                    const std::function<void(cudaStream_t, int64_t, int64_t)>& gemm_chunk) {
    const int64_t R = Tl / K;
    BRAID_CUDA_CHECK(cudaEventRecord(devents[0], s));
    BRAID_CUDA_CHECK(cudaStreamWaitEvent(dstream, devents[0], 0));
    for (int c = 0; c < K; ++c) {
      bf16* t = tmp + int64_t(c) * tp * R * H;
      comm.all_gather(x + int64_t(c) * R * H, t, size_t(R * H), DType::kBF16, dstream);
      BRAID_CUDA_CHECK(cudaMemcpy2DAsync(xf + int64_t(c) * R * H, size_t(Tl * H) * 2, t, size_t(R * H) * 2,
                                         size_t(R * H) * 2, size_t(tp), cudaMemcpyDeviceToDevice, dstream));
      BRAID_CUDA_CHECK(cudaEventRecord(devents[1 + c], dstream));
    }
    for (int c = 0; c < K; ++c) {
      BRAID_CUDA_CHECK(cudaStreamWaitEvent(s, devents[1 + c], 0));
      gemm_chunk(s, int64_t(c) * R, R);
    }
  }
  // Decomposed GEMM -> reduce-scatter. gemm_chunk(s, c·R, R, dst) writes chunk c's partial sums as
  // [tp][R][H] at dst = part + c·T/K·H; dstream reduce-scatters it into out rows c·R .. as soon as it is done.
  void gemm_then_rs(cudaStream_t s, bf16* part, bf16* out,
                    const std::function<void(cudaStream_t, int64_t, int64_t, bf16*)>& gemm_chunk) {
    const int K = decompose;
    const int64_t R = Tl / K;
    for (int c = 0; c < K; ++c) {
      bf16* dst = part + int64_t(c) * tp * R * H;
      gemm_chunk(s, int64_t(c) * R, R, dst);
      BRAID_CUDA_CHECK(cudaEventRecord(devents[1 + c], s));
      BRAID_CUDA_CHECK(cudaStreamWaitEvent(dstream, devents[1 + c], 0));
      comm.reduce_scatter(dst, out + int64_t(c) * R * H, size_t(R * H), DType::kBF16, dstream);
    }
    BRAID_CUDA_CHECK(cudaEventRecord(devents[K + 1], dstream));
    BRAID_CUDA_CHECK(cudaStreamWaitEvent(s, devents[K + 1], 0));
  }

  k::AttnShape attn_shape() const {
    return k::AttnShape{int(B), int(S), int(hq), int(hkv), int(d), int(nqkv), 0, int(qd), int(qd + kvd), int(qd),
                        float(1.0 / std::sqrt(double(d)))};
  }

  void setup();
  void build_forward();
  void build_backward();
  void moe_exchange_counts(cudaStream_t s);
  void moe_finish_counts(cudaStream_t s);
  void set_layout();
  void add_op(Phase ph, const std::string& name, std::function<void(cudaStream_t)> f) {
    const int i = int(ph);
    const size_t idx = fn[i].size();
    BRAID_REQUIRE(idx < plan[i].size() && plan[i][idx].name == name,
                  "layer: operator '" + name + "' out of step with plan_ops() (internal error)");
    fn[i].push_back(std::move(f));
  }
};

void Layer::Impl::setup() {
  c.validate();
  p.validate(c);
  tp = p.tp;
  BRAID_REQUIRE(comm.size() == tp, "layer: the comm must have tp ranks");
  rank = comm.rank();
  sp = p.sp && tp > 1;
  moe = c.moe();
  T = c.tokens(), Tl = sp ? T / tp : T, H = c.hidden, S = c.seq, B = c.micro_batch, d = c.hd();
  hq = c.heads / tp, hkv = c.kv_heads / tp, qd = hq * d, kvd = hkv * d, nqkv = qd + 2 * kvd;
  F = c.ffn, Fl = moe ? F : F / tp, E = c.experts, El = moe ? E / tp : 0, K = c.top_k;
  // Rows one rank's experts can receive: dropless, the worst case (every token of every rank); with a
  // capacity factor, exactly E * cap (tp sources x El experts x cap slots, padding included).
  cap = moe ? c.expert_capacity(Tl) : 0;
  Rmax = cap > 0 ? E * cap : T * K;
  Srows = cap > 0 ? E * cap : Tl * K;
  plan[0] = plan_ops(c, p, Phase::kForward);
  plan[1] = plan_ops(c, p, Phase::kBackward);

  BRAID_CUBLAS_CHECK(cublasCreate(&blas));
  const size_t ws = size_t(32) << 20;
  BRAID_CUDA_CHECK(cudaMalloc(&blas_ws, ws));
  BRAID_CUBLAS_CHECK(cublasSetWorkspace(blas, blas_ws, ws));
  mem_ws = ws;

  // weights (or the owner's) and gradients
  if (owner) {
    g1 = owner->g1, g2 = owner->g2, wqkv = owner->wqkv, wo = owner->wo, w13 = owner->w13, w2 = owner->w2;
    wr = owner->wr;
  } else {
    account = &mem_weights;
    g1 = alloc<bf16>(H), g2 = alloc<bf16>(H);
    wqkv = alloc<bf16>(H * nqkv), wo = alloc<bf16>(qd * H);
    if (moe) w13 = alloc<bf16>(El * H * 2 * F), w2 = alloc<bf16>(El * F * H), wr = alloc<bf16>(H * E);
    else w13 = alloc<bf16>(H * 2 * Fl), w2 = alloc<bf16>(Fl * H);
  }
  account = &mem_grads;
  rep_elems = 2 * H + H * E;
  norm_chunks = k::norm_chunks(Tl);
  if (share_grads) {
    dwqkv = owner->dwqkv, dwo = owner->dwo, dw13 = owner->dw13, dw2 = owner->dw2, rep = owner->rep;
    rep_step = owner->rep_step, accumulate = true;
  } else {
    dwqkv = alloc<bf16>(H * nqkv), dwo = alloc<bf16>(qd * H);
    if (moe) dw13 = alloc<bf16>(El * H * 2 * F), dw2 = alloc<bf16>(El * F * H);
    else dw13 = alloc<bf16>(H * 2 * Fl), dw2 = alloc<bf16>(Fl * H);
    rep = alloc<float>(rep_elems);
  }
  norm_partial = one_phase(&Impl::norm_partial, size_t(norm_chunks) * H);
  account = &mem_act;

  // activations: "f" buffers hold all T rows (aliases of the local ones without sp). one_phase(): buffers
  // only the forward (and not read by the backward) or only the backward touches — shared with the owner
  // under Share::kWeightsAndScratch. An alias takes whatever its target is; h1, a and mo (and h2 of a
  // dense layer) are transient only with sp (without it they alias h1f, attn_part and mlp_part), dyf and dh2p are scratch only with sp.
  x = alloc<bf16>(Tl * H), y = alloc<bf16>(Tl * H), x1 = alloc<bf16>(Tl * H);
  // Copy-engine collectives (see `ce`): a dense SP layer at TP = 2 over a comm named nccl-ce. Decided by the name, the
  // same on every rank, not by probing alloc_window (collective).
  ce = sp && !moe && tp == 2 && comm.name() == "nccl-ce";
  BRAID_REQUIRE(!share_scratch || owner->ce == ce,
                "layer: sharing scratch (Share::kWeightsAndScratch / kAll) needs the owner's comm and this one alike "
                "(both nccl-ce, or neither)");
  if (ce) {
    h1f = window<bf16>(T * H), h1 = h1f + rank * Tl * H;
  } else {
    h1 = sp ? one_phase(&Impl::h1, Tl * H) : alloc<bf16>(Tl * H), h1f = sp ? alloc<bf16>(T * H) : h1;
  }
  qkv = alloc<bf16>(T * nqkv), o = alloc<bf16>(T * qd);
  lse = alloc<float>(B * hq * S), delta = one_phase(&Impl::delta, B * hq * S);
  attn_part = ce ? one_phase_window(&Impl::attn_part, detail::kCeRsBlocks * Tl * H) : one_phase(&Impl::attn_part, T * H);
  a = sp ? one_phase(&Impl::a, Tl * H) : attn_part;
  rstd1 = alloc<float>(Tl), rstd2 = alloc<float>(Tl);
  if (ce) h2f = window<bf16>(T * H), h2 = h2f + rank * Tl * H;
  else h2 = sp && !moe ? one_phase(&Impl::h2, Tl * H) : alloc<bf16>(Tl * H);  // MoE: router_bwd reads h2
  dy = alloc<bf16>(Tl * H), dx = alloc<bf16>(Tl * H);
  if (ce) dx1f = one_phase_window(&Impl::dx1f, T * H), dx1 = dx1f + rank * Tl * H;
  else dx1 = one_phase(&Impl::dx1, Tl * H);
  dh2 = one_phase(&Impl::dh2, Tl * H);
  if (!ce) dx1f = sp ? one_phase(&Impl::dx1f, T * H) : dx1;
  dO = one_phase(&Impl::dO, T * qd), dqkv = one_phase(&Impl::dqkv, T * nqkv);
  dh1p = ce ? one_phase_window(&Impl::dh1p, detail::kCeRsBlocks * Tl * H) : one_phase(&Impl::dh1p, T * H);
  dh1 = sp ? one_phase(&Impl::dh1, Tl * H) : dh1p;
  if (!moe) {
    if (!ce) h2f = sp ? alloc<bf16>(T * H) : h2;
    gu = alloc<bf16>(T * 2 * Fl), act = alloc<bf16>(T * Fl);
    mlp_part = ce ? one_phase_window(&Impl::mlp_part, detail::kCeRsBlocks * Tl * H) : one_phase(&Impl::mlp_part, T * H);
    mo = sp ? one_phase(&Impl::mo, Tl * H) : mlp_part;
    // Copy-engine layers: dyf is a window; ag_dy copies dy into its rank's slot and gathers in place there. (dy is
    // not that slot itself: dyf is scratch a second layer may share, whose backward would overwrite this one's dy —
    // a89b5bd, caught by bench strands' shared-scratch verification.)
    dyf = ce ? one_phase_window(&Impl::dyf, T * H) : sp ? one_phase(&Impl::dyf, T * H) : dy;
    dact = one_phase(&Impl::dact, T * Fl), dgu = one_phase(&Impl::dgu, T * 2 * Fl);
    dh2p = ce ? one_phase_window(&Impl::dh2p, detail::kCeRsBlocks * Tl * H) : sp ? one_phase(&Impl::dh2p, T * H) : dh2;
  } else {
    logits = one_phase(&Impl::logits, Tl * E), dlogits = one_phase(&Impl::dlogits, Tl * E);
    prob = alloc<float>(Tl * K);
    counts = alloc<float>(E), rcounts = alloc<float>(tp * El);
    route = alloc<int>(Tl * K), pos = alloc<int>(Tl * K);
    sort_map = alloc<int>(Rmax), unsort_map = alloc<int>(Rmax);
    send = one_phase(&Impl::send, Srows * H), ret = alloc<bf16>(Srows * H);
    dret = one_phase(&Impl::dret, Srows * H), drow = one_phase(&Impl::drow, Srows * H);
    recv = one_phase(&Impl::recv, Rmax * H), xs = alloc<bf16>(Rmax * H), egu = alloc<bf16>(Rmax * 2 * F);
    eact = alloc<bf16>(Rmax * F), eout = one_phase(&Impl::eout, Rmax * H), eout_u = one_phase(&Impl::eout_u, Rmax * H);
    drecv = one_phase(&Impl::drecv, Rmax * H), dout_s = one_phase(&Impl::dout_s, Rmax * H);
    deact = one_phase(&Impl::deact, Rmax * F), degu = one_phase(&Impl::degu, Rmax * 2 * F);
    dxs = one_phase(&Impl::dxs, Rmax * H), dxr = one_phase(&Impl::dxr, Rmax * H);
    BRAID_CUDA_CHECK(cudaMallocHost(&counts_h, E * sizeof(float)));
    BRAID_CUDA_CHECK(cudaMallocHost(&rcounts_h, tp * El * sizeof(float)));
    BRAID_CUDA_CHECK(cudaMallocHost(&maps_h, 2 * Rmax * sizeof(int)));
    BRAID_CUDA_CHECK(cudaEventCreateWithFlags(&counts_ev, cudaEventDisableTiming));
    sc.assign(tp, 0), sd.assign(tp, 0), rc.assign(tp, 0), rd.assign(tp, 0);
    expert_rows.assign(El, 0);
    dev_sizes = c.moe_device_sizes;
    if (dev_sizes) {
      counts_all = alloc<float>(tp * E);
      layout = alloc<int>(k::moe_layout_ints(int(tp), int(El)));
      for (auto& g : grouped) g = std::make_unique<detail::GroupedGemm>(int(El));
      // the exchanges move at most Rmax rows per rank either way (collective: every rank, the same sizes)
      comm.reserve_rows_exchange(size_t(std::max(Rmax, Srows)), size_t(H), DType::kBF16);
    }
    if (cap > 0) {  // static layout: every (source, expert) block holds cap rows, padding included
      for (int64_t e = 0; e < E; ++e) counts_h[e] = float(cap);
      for (int64_t i = 0; i < tp * El; ++i) rcounts_h[i] = float(cap);
      set_layout();
    }
  }
  // Builds the cuDNN graphs (or finds them cached) and allocates their workspaces now, so that the
  // attention operators never allocate: capturable, any stream. BRAID_ATTN=naive|cudnn|auto.
  attention = std::make_unique<attn::Attention>(attn_shape());
  build_forward();
  build_backward();
  BRAID_REQUIRE(fn[0].size() == plan[0].size() && fn[1].size() == plan[1].size(),
                "layer: operator list shorter than plan_ops() (internal error)");
  // cudaMemset/cudaMemcpy above run on the legacy stream, which the library's non-blocking streams do not
  // wait for (and a pageable host-to-device copy may return before its DMA lands): finish them here.
  BRAID_CUDA_CHECK(cudaDeviceSynchronize());
}

// Exchange per-expert counts and copy them to the host (asynchronous: counts_ev marks their arrival).
void Layer::Impl::moe_exchange_counts(cudaStream_t s) {
  std::vector<size_t> one(tp, size_t(El)), displ(tp);
  for (int r = 0; r < tp; ++r) displ[r] = size_t(r) * El;
  comm.all_to_all_v(counts, one.data(), displ.data(), rcounts, one.data(), displ.data(), DType::kFP32, s);
  BRAID_CUDA_CHECK(cudaMemcpyAsync(counts_h, counts, E * sizeof(float), cudaMemcpyDeviceToHost, s));
  BRAID_CUDA_CHECK(cudaMemcpyAsync(rcounts_h, rcounts, tp * El * sizeof(float), cudaMemcpyDeviceToHost, s));
  BRAID_CUDA_CHECK(cudaEventRecord(counts_ev, s));
  counts_pending = true;
}

// Wait for the counts on the host (dropless: they size the exchange), then derive the all-to-all layout
// and the row maps between the receive layout [source rank][local expert][rows] and the expert-major
// layout [expert][source][rows], and upload the maps on `s` (the dispatch's stream, before the dispatch;
// the ops that read them follow it). Nothing of the layer reads these between a2a_counts and
// a2a_dispatch (the forward DAG chains them).
void Layer::Impl::moe_finish_counts(cudaStream_t s) {
  if (!counts_pending) return;
  const auto t0 = std::chrono::steady_clock::now();
  BRAID_CUDA_CHECK(cudaEventSynchronize(counts_ev));
  host_wait_us += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  counts_pending = false;
  set_layout();
  BRAID_CUDA_CHECK(cudaMemcpyAsync(sort_map, maps_h, R * sizeof(int), cudaMemcpyHostToDevice, s));
  BRAID_CUDA_CHECK(cudaMemcpyAsync(unsort_map, maps_h + Rmax, R * sizeof(int), cudaMemcpyHostToDevice, s));
}

// The all-to-all layout, rows per local expert and the row maps (host, maps_h) from counts_h / rcounts_h.
void Layer::Impl::set_layout() {
  auto rcnt = [&](int src, int e) { return int64_t(rcounts_h[src * El + e]); };
  size_t so = 0, ro = 0;
  for (int r = 0; r < tp; ++r) {
    int64_t n = 0;
    for (int64_t e = r * El; e < (r + 1) * El; ++e) n += int64_t(counts_h[e]);
    sc[r] = size_t(n * H), sd[r] = so, so += sc[r];
    int64_t m = 0;
    for (int e = 0; e < El; ++e) m += rcnt(r, e);
    rc[r] = size_t(m * H), rd[r] = ro, ro += rc[r];
  }
  R = int64_t(ro / H);
  BRAID_REQUIRE(R <= Rmax, "layer: received more MoE rows than the worst case (internal error)");
  const int64_t sorted = detail::moe_row_maps(int(tp), int(El), rcounts_h, maps_h, maps_h + Rmax, expert_rows.data());
  BRAID_REQUIRE(sorted == R, "layer: MoE row maps disagree with the all-to-all layout (internal error)");
}

void Layer::Impl::build_forward() {
  const Phase F_ = Phase::kForward;
  const float eps = float(c.norm_eps), theta = float(c.rope_theta);
  add_op(F_, "norm1", [=, this](cudaStream_t s) { k::rmsnorm_fwd(x, nullptr, nullptr, g1, h1, rstd1, Tl, H, eps, s); });
  // With set_decomposition(K) the first op of each collective/GEMM pair runs both, chunked; the second is empty.
  const auto qkv_chunk = [this](cudaStream_t st, int64_t r0, int64_t rows) {
    gemm_batched(st, false, rows, nqkv, H, h1f + r0 * H, H, Tl * H, wqkv, nqkv, qkv + r0 * nqkv, nqkv, Tl * nqkv, tp);
  };
  if (sp) add_op(F_, "ag_h1", [=, this](cudaStream_t s) {
    if (decompose > 1) return ag_then_gemm(decompose, s, h1, h1f, attn_part, qkv_chunk);
    if (open_chunks > 1) return open_gather(0, s, h1, h1f, attn_part);  // qkv_proj waits chunk by chunk
    comm.all_gather(h1, h1f, Tl * H, DType::kBF16, s);
  });
  add_op(F_, "qkv_proj", [=, this](cudaStream_t s) {
    if (decompose > 1) return;
    if (open_chunks > 1) return open_gemm(0, s, qkv_chunk);
    gemm(s, false, false, T, nqkv, H, h1f, H, wqkv, nqkv, qkv, nqkv);
  });
  add_op(F_, "rope", [=, this](cudaStream_t s) { k::rope(qkv, T, int(nqkv), int(hq + hkv), int(d), int(S), theta, false, s); });
  add_op(F_, "attention", [=, this](cudaStream_t s) { attention->forward(qkv, o, lse, s); });
  add_op(F_, "out_proj", [=, this](cudaStream_t s) {
    if (decompose > 1)
      return gemm_then_rs(s, attn_part, a, [this](cudaStream_t st, int64_t r0, int64_t rows, bf16* dst) {
        gemm_batched(st, false, rows, H, qd, o + r0 * qd, qd, Tl * qd, wo, H, dst, H, rows * H, tp);
      });
    gemm(s, false, false, T, H, qd, o, qd, wo, H, rs_gemm_out(attn_part), H);
  });
  if (sp)
    add_op(F_, "rs_attn", [=, this](cudaStream_t s) {
      if (decompose > 1) return;
      rs_transfer(attn_part, a, s);
    });
  else
    add_op(F_, "ar_attn", [=, this](cudaStream_t s) { comm.all_reduce(attn_part, attn_part, T * H, DType::kBF16, s); });
  add_op(F_, "residual_norm2", [=, this](cudaStream_t s) {
    rs_finish(attn_part, a, s);
    k::rmsnorm_fwd(x, a, x1, g2, h2, rstd2, Tl, H, eps, s);
  });
  if (!moe) {
    if (sp) add_op(F_, "ag_h2", [=, this](cudaStream_t s) {
      if (decompose > 1)
        return ag_then_gemm(decompose, s, h2, h2f, mlp_part, [this](cudaStream_t st, int64_t r0, int64_t rows) {
          gemm_batched(st, false, rows, 2 * Fl, H, h2f + r0 * H, H, Tl * H, w13, 2 * Fl, gu + r0 * 2 * Fl, 2 * Fl,
                       Tl * 2 * Fl, tp);
        });
      comm.all_gather(h2, h2f, Tl * H, DType::kBF16, s);
    });
    add_op(F_, "gate_up_proj", [=, this](cudaStream_t s) {
      if (decompose > 1) return;
      gemm(s, false, false, T, 2 * Fl, H, h2f, H, w13, 2 * Fl, gu, 2 * Fl);
    });
    add_op(F_, "swiglu", [=, this](cudaStream_t s) { k::swiglu_fwd(gu, act, T, int(Fl), s); });
    add_op(F_, "down_proj", [=, this](cudaStream_t s) {
      if (decompose > 1)
        return gemm_then_rs(s, mlp_part, mo, [this](cudaStream_t st, int64_t r0, int64_t rows, bf16* dst) {
          gemm_batched(st, false, rows, H, Fl, act + r0 * Fl, Fl, Tl * Fl, w2, H, dst, H, rows * H, tp);
        });
      gemm(s, false, false, T, H, Fl, act, Fl, w2, H, rs_gemm_out(mlp_part), H);
    });
    if (sp)
      add_op(F_, "rs_mlp", [=, this](cudaStream_t s) {
        if (decompose > 1) return;
        rs_transfer(mlp_part, mo, s);
      });
    else
      add_op(F_, "ar_mlp", [=, this](cudaStream_t s) { comm.all_reduce(mlp_part, mlp_part, T * H, DType::kBF16, s); });
    add_op(F_, "residual2", [=, this](cudaStream_t s) {
      rs_finish(mlp_part, mo, s);
      k::add(x1, mo, y, Tl * H, s);
    });
    return;
  }
  add_op(F_, "router", [=, this](cudaStream_t s) { k::router_fwd(h2, wr, logits, Tl, int(H), int(E), s); });
  add_op(F_, "route", [=, this](cudaStream_t s) {
    k::topk(logits, route, prob, Tl, int(E), int(K), s);
    k::route_permute(route, counts, pos, h2, send, Tl, int(K), int(E), int(H), s, cap);
    // Capacity: the row maps are the static layout's (saved tensors, so written every forward).
    if (cap > 0) k::capacity_maps(sort_map, unsort_map, int(tp), int(El), cap, s);
  });
  // Capacity: no counts to exchange (static shapes); the operator stays, empty, so the plan is the same.
  add_op(F_, "a2a_counts", [=, this](cudaStream_t s) {
    if (dev_sizes) return comm.all_gather(counts, counts_all, size_t(E), DType::kFP32, s);
    if (cap == 0) moe_exchange_counts(s);
  });
  if (dev_sizes)  // compute: a compute-only pass (schedule::run_compute_only skips the exchanges) still writes it
    add_op(F_, "expert_layout", [=, this](cudaStream_t s) {
      k::moe_device_layout(counts_all, int(tp), rank, int(El), layout, sort_map, unsort_map, Rmax, s);
    });
  add_op(F_, "a2a_dispatch", [=, this](cudaStream_t s) {
    if (dev_sizes) return comm.all_to_all_rows(send, recv, layout_rows(), false, size_t(H), size_t(Rmax), DType::kBF16, s);
    moe_finish_counts(s);
    comm.all_to_all_v(send, sc.data(), sd.data(), recv, rc.data(), rd.data(), DType::kBF16, s);
  });
  add_op(F_, "expert_sort", [=, this](cudaStream_t s) {
    if (dev_sizes) return k::gather_rows(recv, xs, sort_map, Rmax, int(H), s, layout_R());
    k::gather_rows(recv, xs, sort_map, R, int(H), s);
  });
  add_op(F_, "expert_gate_up", [=, this](cudaStream_t s) {
    if (dev_sizes) return grouped[kGateUp]->fprop(s, layout_experts(), int(El), 2 * F, H, xs, w13, egu);
    int64_t r0 = 0;
    for (int64_t e = 0; e < El; ++e) {
      gemm(s, false, false, expert_rows[e], 2 * F, H, xs + r0 * H, H, w13 + e * H * 2 * F, 2 * F, egu + r0 * 2 * F, 2 * F);
      r0 += expert_rows[e];
    }
  });
  add_op(F_, "expert_swiglu", [=, this](cudaStream_t s) {
    if (dev_sizes) return k::swiglu_fwd(egu, eact, Rmax, int(F), s, layout_R());
    k::swiglu_fwd(egu, eact, R, int(F), s);
  });
  add_op(F_, "expert_down", [=, this](cudaStream_t s) {
    if (dev_sizes) return grouped[kDown]->fprop(s, layout_experts(), int(El), H, F, eact, w2, eout);
    int64_t r0 = 0;
    for (int64_t e = 0; e < El; ++e) {
      gemm(s, false, false, expert_rows[e], H, F, eact + r0 * F, F, w2 + e * F * H, H, eout + r0 * H, H);
      r0 += expert_rows[e];
    }
  });
  add_op(F_, "expert_unsort", [=, this](cudaStream_t s) {
    if (dev_sizes) return k::gather_rows(eout, eout_u, unsort_map, Rmax, int(H), s, layout_R());
    k::gather_rows(eout, eout_u, unsort_map, R, int(H), s);
  });
  add_op(F_, "a2a_combine", [=, this](cudaStream_t s) {
    if (dev_sizes) return comm.all_to_all_rows(eout_u, ret, layout_rows(), true, size_t(H), size_t(Rmax), DType::kBF16, s);
    comm.all_to_all_v(eout_u, rc.data(), rd.data(), ret, sc.data(), sd.data(), DType::kBF16, s);
  });
  add_op(F_, "combine", [=, this](cudaStream_t s) { k::combine(x1, ret, pos, prob, y, Tl, int(K), int(H), s); });
}

void Layer::Impl::build_backward() {
  const Phase B_ = Phase::kBackward;
  const float theta = float(c.rope_theta);
  // The replicated gradients go to rep_out() (rep, or rep_step when accumulating), read at call time.
  if (!moe) {
    const auto dgrad_chunk = [this](cudaStream_t st, int64_t r0, int64_t rows) {
      gemm_batched(st, true, rows, Fl, H, dyf + r0 * H, H, Tl * H, w2, H, dact + r0 * Fl, Fl, Tl * Fl, tp);
    };
    if (sp) add_op(B_, "ag_dy", [=, this](cudaStream_t s) {
      if (decompose > 1) return ag_then_gemm(decompose, s, dy, dyf, dh2p, dgrad_chunk);
      if (open_chunks > 1) return open_gather(1, s, dy, dyf, dh2p);  // down_proj_dgrad waits chunk by chunk
      if (ce) {  // dy into its slot of the window (a device copy), then the all-gather in place on the copy engines
        bf16* mine = dyf + rank * Tl * H;
        BRAID_CUDA_CHECK(cudaMemcpyAsync(mine, dy, size_t(Tl * H) * sizeof(bf16), cudaMemcpyDeviceToDevice, s));
        return comm.all_gather(mine, dyf, Tl * H, DType::kBF16, s);
      }
      comm.all_gather(dy, dyf, Tl * H, DType::kBF16, s);
    });
    add_op(B_, "down_proj_dgrad", [=, this](cudaStream_t s) {
      if (decompose > 1) return;
      if (open_chunks > 1) return open_gemm(1, s, dgrad_chunk);
      gemm(s, false, true, T, Fl, H, dyf, H, w2, H, dact, Fl);
    });
    add_op(B_, "down_proj_wgrad", [=, this](cudaStream_t s) { gemm(s, true, false, Fl, H, T, act, Fl, dyf, H, dw2, H, wgrad_beta()); });
    add_op(B_, "swiglu_bwd", [=, this](cudaStream_t s) { k::swiglu_bwd(gu, dact, dgu, T, int(Fl), s); });
    add_op(B_, "gate_up_dgrad", [=, this](cudaStream_t s) {
      if (decompose > 1)
        return gemm_then_rs(s, dh2p, dh2, [this](cudaStream_t st, int64_t r0, int64_t rows, bf16* dst) {
          gemm_batched(st, true, rows, H, 2 * Fl, dgu + r0 * 2 * Fl, 2 * Fl, Tl * 2 * Fl, w13, 2 * Fl, dst, H, rows * H, tp);
        });
      gemm(s, false, true, T, H, 2 * Fl, dgu, 2 * Fl, w13, 2 * Fl, rs_gemm_out(dh2p), H);
    });
    add_op(B_, "gate_up_wgrad", [=, this](cudaStream_t s) { gemm(s, true, false, H, 2 * Fl, T, h2f, H, dgu, 2 * Fl, dw13, 2 * Fl, wgrad_beta()); });
    if (sp)
      add_op(B_, "rs_dh2", [=, this](cudaStream_t s) {
        if (decompose > 1) return;
        rs_transfer(dh2p, dh2, s);
      });
    else
      add_op(B_, "ar_dh2", [=, this](cudaStream_t s) { comm.all_reduce(dh2p, dh2p, T * H, DType::kBF16, s); });
  } else {
    add_op(B_, "combine_bwd", [=, this](cudaStream_t s) {
      k::combine_bwd(dy, ret, pos, route, prob, dret, dlogits, Tl, int(K), int(E), int(H), s);
      // Capacity: the unused slots travel too; zero rows keep the experts' gradients finite and exact.
      if (cap > 0) k::route_zero_padding(counts, dret, int(E), cap, int(H), s);
    });
    add_op(B_, "a2a_combine_bwd", [=, this](cudaStream_t s) {
      if (dev_sizes)
        return comm.all_to_all_rows(dret, drecv, layout_rows(), false, size_t(H), size_t(Rmax), DType::kBF16, s);
      comm.all_to_all_v(dret, sc.data(), sd.data(), drecv, rc.data(), rd.data(), DType::kBF16, s);
    });
    add_op(B_, "expert_sort_bwd", [=, this](cudaStream_t s) {
      if (dev_sizes) return k::gather_rows(drecv, dout_s, sort_map, Rmax, int(H), s, layout_R());
      k::gather_rows(drecv, dout_s, sort_map, R, int(H), s);
    });
    add_op(B_, "expert_down_dgrad", [=, this](cudaStream_t s) {
      if (dev_sizes) return grouped[kDownDgrad]->dgrad(s, layout_experts(), int(El), F, H, dout_s, w2, deact);
      int64_t r0 = 0;
      for (int64_t e = 0; e < El; ++e) {
        gemm(s, false, true, expert_rows[e], F, H, dout_s + r0 * H, H, w2 + e * F * H, H, deact + r0 * F, F);
        r0 += expert_rows[e];
      }
    });
    add_op(B_, "expert_down_wgrad", [=, this](cudaStream_t s) {
      if (dev_sizes)
        return grouped[kDownWgrad]->wgrad(s, layout_experts(), int(El), F, H, eact, dout_s, dw2, wgrad_beta());
      int64_t r0 = 0;
      for (int64_t e = 0; e < El; ++e) {
        gemm(s, true, false, F, H, expert_rows[e], eact + r0 * F, F, dout_s + r0 * H, H, dw2 + e * F * H, H, wgrad_beta());
        r0 += expert_rows[e];
      }
    });
    add_op(B_, "expert_swiglu_bwd", [=, this](cudaStream_t s) {
      if (dev_sizes) return k::swiglu_bwd(egu, deact, degu, Rmax, int(F), s, layout_R());
      k::swiglu_bwd(egu, deact, degu, R, int(F), s);
    });
    add_op(B_, "expert_gate_up_dgrad", [=, this](cudaStream_t s) {
      if (dev_sizes) return grouped[kGateUpDgrad]->dgrad(s, layout_experts(), int(El), H, 2 * F, degu, w13, dxs);
      int64_t r0 = 0;
      for (int64_t e = 0; e < El; ++e) {
        gemm(s, false, true, expert_rows[e], H, 2 * F, degu + r0 * 2 * F, 2 * F, w13 + e * H * 2 * F, 2 * F, dxs + r0 * H, H);
        r0 += expert_rows[e];
      }
    });
    add_op(B_, "expert_gate_up_wgrad", [=, this](cudaStream_t s) {
      if (dev_sizes)
        return grouped[kGateUpWgrad]->wgrad(s, layout_experts(), int(El), H, 2 * F, xs, degu, dw13, wgrad_beta());
      int64_t r0 = 0;
      for (int64_t e = 0; e < El; ++e) {
        gemm(s, true, false, H, 2 * F, expert_rows[e], xs + r0 * H, H, degu + r0 * 2 * F, 2 * F, dw13 + e * H * 2 * F, 2 * F,
             wgrad_beta());
        r0 += expert_rows[e];
      }
    });
    add_op(B_, "expert_unsort_bwd", [=, this](cudaStream_t s) {
      if (dev_sizes) return k::gather_rows(dxs, dxr, unsort_map, Rmax, int(H), s, layout_R());
      k::gather_rows(dxs, dxr, unsort_map, R, int(H), s);
    });
    add_op(B_, "a2a_dispatch_bwd", [=, this](cudaStream_t s) {
      if (dev_sizes)
        return comm.all_to_all_rows(dxr, drow, layout_rows(), true, size_t(H), size_t(Rmax), DType::kBF16, s);
      comm.all_to_all_v(dxr, rc.data(), rd.data(), drow, sc.data(), sd.data(), DType::kBF16, s);
    });
    add_op(B_, "route_bwd", [=, this](cudaStream_t s) { k::route_bwd(drow, pos, dlogits, wr, dh2, Tl, int(K), int(E), int(H), s); });
    add_op(B_, "router_bwd", [=, this](cudaStream_t s) { k::router_wgrad(h2, dlogits, rep_out() + 2 * H, Tl, int(H), int(E), s); });
  }
  bf16* dh2_in = moe ? dh2 : (sp ? dh2 : dh2p);
  add_op(B_, "norm2_bwd", [=, this](cudaStream_t s) {
    if (!moe) rs_finish(dh2p, dh2, s);
    k::rmsnorm_bwd(x1, g2, rstd2, dh2_in, dy, dx1, rep_out() + H, norm_partial, norm_chunks, Tl, int(H), s);
  });
  if (sp) add_op(B_, "ag_dx1", [=, this](cudaStream_t s) {
    if (decompose > 1)
      return ag_then_gemm(decompose, s, dx1, dx1f, dh1p, [this](cudaStream_t st, int64_t r0, int64_t rows) {
        gemm_batched(st, true, rows, qd, H, dx1f + r0 * H, H, Tl * H, wo, H, dO + r0 * qd, qd, Tl * qd, tp);
      });
    comm.all_gather(dx1, dx1f, Tl * H, DType::kBF16, s);
  });
  add_op(B_, "out_proj_dgrad", [=, this](cudaStream_t s) {
    if (decompose > 1) return;
    gemm(s, false, true, T, qd, H, dx1f, H, wo, H, dO, qd);
  });
  add_op(B_, "out_proj_wgrad", [=, this](cudaStream_t s) { gemm(s, true, false, qd, H, T, o, qd, dx1f, H, dwo, H, wgrad_beta()); });
  add_op(B_, "attention_bwd", [=, this](cudaStream_t s) { attention->backward(qkv, o, dO, lse, delta, dqkv, s); });
  add_op(B_, "rope_bwd", [=, this](cudaStream_t s) { k::rope(dqkv, T, int(nqkv), int(hq + hkv), int(d), int(S), theta, true, s); });
  add_op(B_, "qkv_dgrad", [=, this](cudaStream_t s) {
    if (decompose > 1)
      return gemm_then_rs(s, dh1p, dh1, [this](cudaStream_t st, int64_t r0, int64_t rows, bf16* dst) {
        gemm_batched(st, true, rows, H, nqkv, dqkv + r0 * nqkv, nqkv, Tl * nqkv, wqkv, nqkv, dst, H, rows * H, tp);
      });
    gemm(s, false, true, T, H, nqkv, dqkv, nqkv, wqkv, nqkv, rs_gemm_out(dh1p), H);
  });
  add_op(B_, "qkv_wgrad", [=, this](cudaStream_t s) { gemm(s, true, false, H, nqkv, T, h1f, H, dqkv, nqkv, dwqkv, nqkv, wgrad_beta()); });
  if (sp)
    add_op(B_, "rs_dh1", [=, this](cudaStream_t s) {
      if (decompose > 1) return;
      rs_transfer(dh1p, dh1, s);
    });
  else
    add_op(B_, "ar_dh1", [=, this](cudaStream_t s) { comm.all_reduce(dh1p, dh1p, T * H, DType::kBF16, s); });
  add_op(B_, "norm1_bwd", [=, this](cudaStream_t s) {
    rs_finish(dh1p, dh1, s);
    k::rmsnorm_bwd(x, g1, rstd1, dh1, dx1, dx, rep_out(), norm_partial, norm_chunks, Tl, int(H), s);
    // Without sp the replicated gradients are complete here (every rank saw every token): add them now. So too
    // with them reduced once per step (Parallel::replicated_grads_per_step): this rank's partial sums add up
    // here, reduce_replicated_grads all-reduces the totals after the step's last backward.
    if (!p.reduces_replicated_grads_per_backward() && accumulate)
      k::add_f32(rep, rep_step, rep, 2 * H + (moe ? H * E : 0), s);
  });
  if (p.reduces_replicated_grads_per_backward()) {
    const size_t n = size_t(2 * H + (moe ? H * E : 0));
    add_op(B_, "ar_replicated_grads", [=, this](cudaStream_t s) {
      float* r = rep_out();
      comm.all_reduce(r, r, n, DType::kFP32, s);
      if (accumulate) k::add_f32(rep, r, rep, int64_t(n), s);
    });
  }
}

Layer::Layer(const ModelConfig& c, const Parallel& p, Comm& comm) : impl_(std::make_unique<Impl>(c, p, comm)) {
  impl_->setup();
}

Layer::Layer(const Layer& owner, Comm& comm) : Layer(owner, comm, Share::kWeights) {}

Layer::Layer(const Layer& owner, Comm& comm, Share share)
    : impl_(std::make_unique<Impl>(owner.impl_->c, owner.impl_->p, comm)) {
  BRAID_REQUIRE(comm.rank() == owner.impl_->comm.rank() && comm.size() == owner.impl_->comm.size(),
                "layer: a weight-sharing layer needs a comm of the same ranks as its owner");
  BRAID_REQUIRE(share != Share::kAll || owner.impl_->accumulate,
                "layer: Share::kAll needs an owner with set_accumulate_grads(true)");
  impl_->owner = owner.impl_.get();
  impl_->share_scratch = share == Share::kWeightsAndScratch || share == Share::kAll;
  impl_->share_grads = share == Share::kAll;
  impl_->setup();
}

Layer::Memory Layer::memory() const {
  return Memory{impl_->mem_weights, impl_->mem_grads, impl_->mem_act, impl_->mem_ws};
}
bool Layer::shares_weights() const { return impl_->owner != nullptr; }

namespace {
// The saved tensors of the layer: name, member (a bf16*, float* or int* through void**), bytes.
struct SavedField {
  const char* name;
  void** ptr;
  size_t bytes;
};
}  // namespace

static std::vector<SavedField> saved_fields(Layer::Impl& m) {
  const size_t bf = 2, f32 = 4, i32 = 4;
  const bool gathered = m.sp && m.tp > 1;
  auto field = [](const char* name, auto** ptr, size_t bytes) {
    return SavedField{name, reinterpret_cast<void**>(ptr), bytes};
  };
  // The attention half, dense and MoE alike (schedule::saved_tensors' order).
  std::vector<SavedField> v = {field("rstd1", &m.rstd1, size_t(m.Tl) * f32),
                               field("qkv", &m.qkv, size_t(m.T * m.nqkv) * bf),
                               field("o", &m.o, size_t(m.T * m.qd) * bf),
                               field("lse", &m.lse, size_t(m.B * m.hq * m.S) * f32),
                               field("x1", &m.x1, size_t(m.Tl * m.H) * bf),
                               field("rstd2", &m.rstd2, size_t(m.Tl) * f32)};
  const SavedField h1 = field(gathered ? "h1f" : "h1", &m.h1f, size_t((m.sp ? m.T : m.Tl) * m.H) * bf);
  if (!m.moe) {
    v.push_back(field("gu", &m.gu, size_t(m.T * 2 * m.Fl) * bf));
    v.push_back(field("act", &m.act, size_t(m.T * m.Fl) * bf));
    v.push_back(h1);
    v.push_back(field(gathered ? "h2f" : "h2", &m.h2f, size_t((m.sp ? m.T : m.Tl) * m.H) * bf));
    return v;
  }
  // MoE: the router's input, routing state, the combine's input, the experts at capacity (Rmax rows);
  // with a capacity factor also the forward's per-expert counts (combine_bwd zeroes the unused slots).
  v.push_back(h1);
  v.push_back(field("h2", &m.h2, size_t(m.Tl * m.H) * bf));
  v.push_back(field("prob", &m.prob, size_t(m.Tl * m.K) * f32));
  v.push_back(field("route", &m.route, size_t(m.Tl * m.K) * i32));
  v.push_back(field("pos", &m.pos, size_t(m.Tl * m.K) * i32));
  v.push_back(field("sort_map", &m.sort_map, size_t(m.Rmax) * i32));
  v.push_back(field("unsort_map", &m.unsort_map, size_t(m.Rmax) * i32));
  v.push_back(field("ret", &m.ret, size_t(m.Srows * m.H) * bf));
  v.push_back(field("xs", &m.xs, size_t(m.Rmax * m.H) * bf));
  v.push_back(field("egu", &m.egu, size_t(m.Rmax * 2 * m.F) * bf));
  v.push_back(field("eact", &m.eact, size_t(m.Rmax * m.F) * bf));
  if (m.cap > 0) v.push_back(field("counts", &m.counts, size_t(m.E) * f32));
  if (m.dev_sizes) v.push_back(field("moe_layout", &m.layout, size_t(k::moe_layout_ints(int(m.tp), int(m.El))) * i32));
  return v;
}

std::vector<std::pair<std::string, size_t>> Layer::saved_layout() const {
  std::vector<std::pair<std::string, size_t>> v;
  for (const auto& f : saved_fields(*impl_)) v.push_back({f.name, f.bytes});
  return v;
}

void Layer::place_saved(void* base, const std::vector<std::pair<std::string, size_t>>& offsets) {
  Impl& m = *impl_;
  BRAID_REQUIRE(base != nullptr, "layer: place_saved needs memory");
  auto fields = saved_fields(m);
  BRAID_REQUIRE(offsets.size() == fields.size(), "layer: place_saved needs every saved tensor once");
  for (auto& f : fields) {
    size_t off = 0;
    int found = 0;
    for (const auto& [name, o] : offsets)
      if (name == f.name) off = o, ++found;
    BRAID_REQUIRE(found == 1, std::string("layer: place_saved: tensor ") + f.name + " given " + std::to_string(found) + " times");
    BRAID_REQUIRE(off % 256 == 0, std::string("layer: place_saved: offset of ") + f.name + " not 256-byte aligned");
    void* old = *f.ptr;
    void* now = static_cast<char*>(base) + off;
    // Without sp, h1f / h2f are h1 / h2 (one allocation): move both names. (MoE: h2f is unused, h2 saved.) With sp
    // they are two tensors even where the pointers meet: a copy-engine layer's h1 / h2 are its rank's slots of the
    // windows, and rank 0's starts where the window does (moving it into the pool made rank 0's norm write h2 into
    // placed memory the other strand may still read: the fifty-sixth session's arena failure).
    if (!m.sp && f.ptr == reinterpret_cast<void**>(&m.h1f) && m.h1 == m.h1f) m.h1 = static_cast<bf16*>(now);
    if (!m.sp && f.ptr == reinterpret_cast<void**>(&m.h2f) && m.h2 == m.h2f) m.h2 = static_cast<bf16*>(now);
    // Copy-engine layers: h1 / h2 were the gathered tensors' own slots. Placed inside a window of this comm
    // (schedule::PlacedMemory) they stay slots of the placed tensors: the all-gather stays in place on the copy
    // engines, and the norm writing h1 / h2 is the placed tensor's first writer, which the placement's memory waits
    // must then precede (schedule::saved_tensors with in_place_gathers). Placed memory that is no window: a placement
    // (a shared pool) may hold another tensor there until the all-gather's memory wait, which the norm writing h1 / h2
    // would not honour: they become scratch of their own again (the owner's where it has detached its own, as
    // one_phase shares them), and that all-gather takes NCCL's kernels out of place, as without nccl-ce.
    if (m.ce && (f.ptr == reinterpret_cast<void**>(&m.h1f) || f.ptr == reinterpret_cast<void**>(&m.h2f))) {
      const bool one = f.ptr == reinterpret_cast<void**>(&m.h1f);
      bf16* Layer::Impl::*field = one ? &Layer::Impl::h1 : &Layer::Impl::h2;
      bf16* Layer::Impl::*full = one ? &Layer::Impl::h1f : &Layer::Impl::h2f;
      const Layer::Impl* o = m.owner;
      const bool owner_detached = m.share_scratch && o && o->ce &&
                                  (o->*field < o->*full || o->*field >= o->*full + o->T * o->H);
      const bool detached = m.*field < m.*full || m.*field >= m.*full + m.T * m.H;  // placed before
      if (m.comm.in_window(now, size_t(m.T * m.H) * sizeof(bf16))) {
        // (a buffer detached by an earlier placement stays allocated until the layer goes: the owner's may be
        // another layer's h1 / h2 still)
        m.*field = static_cast<bf16*>(now) + m.rank * m.Tl * m.H;
      } else if (!detached && owner_detached) {
        m.*field = o->*field;
      } else if (!detached) {
        size_t* keep = m.account;
        m.account = &m.mem_act;
        m.*field = m.alloc<bf16>(size_t(m.Tl * m.H));
        m.account = keep;
      }
    }
    *f.ptr = now;
    auto it = std::find(m.allocations.begin(), m.allocations.end(), old);
    if (it != m.allocations.end()) {  // (already placed before: nothing of ours to free)
      BRAID_CUDA_CHECK(cudaFree(old));
      m.allocations.erase(it);
      m.mem_act -= std::min(m.mem_act, std::max<size_t>(f.bytes, 1));
    }
    auto wt = std::find(m.windows.begin(), m.windows.end(), old);
    if (wt != m.windows.end()) {  // a window (collective: every rank places alike)
      BRAID_CUDA_CHECK(cudaDeviceSynchronize());
      m.comm.free_window(old);
      m.windows.erase(wt);
      m.mem_act -= std::min(m.mem_act, std::max<size_t>(f.bytes, 1));
    }
  }
}

void Layer::place_input(void* x) {
  Impl& m = *impl_;
  BRAID_REQUIRE(x != nullptr && reinterpret_cast<uintptr_t>(x) % 256 == 0, "layer: place_input needs 256-byte aligned memory");
  auto it = std::find(m.allocations.begin(), m.allocations.end(), static_cast<void*>(m.x));
  if (it != m.allocations.end()) {  // (placed before: nothing of ours to free)
    BRAID_CUDA_CHECK(cudaFree(m.x));
    m.allocations.erase(it);
    m.mem_act -= std::min(m.mem_act, size_t(m.Tl * m.H) * sizeof(bf16));
  }
  m.x = static_cast<bf16*>(x);
}

void Layer::add_grads(const Layer& other, cudaStream_t s) {
  Impl& m = *impl_;
  const Impl& o = *other.impl_;
  BRAID_REQUIRE(m.H == o.H && m.nqkv == o.nqkv && m.Fl == o.Fl && m.El == o.El && m.E == o.E && m.moe == o.moe,
                "layer: add_grads needs two layers of one configuration");
  BRAID_REQUIRE(m.dwqkv != o.dwqkv, "layer: add_grads on layers sharing their gradients (Share::kAll accumulates)");
  const int64_t ne = m.moe ? m.El : 1;
  k::add(m.dwqkv, o.dwqkv, m.dwqkv, m.H * m.nqkv, s);
  k::add(m.dwo, o.dwo, m.dwo, m.qd * m.H, s);
  k::add(m.dw13, o.dw13, m.dw13, ne * m.H * 2 * m.Fl, s);
  k::add(m.dw2, o.dw2, m.dw2, ne * m.Fl * m.H, s);
  k::add_f32(m.rep, o.rep, m.rep, 2 * m.H + m.H * m.E, s);
}

void Layer::set_accumulate_grads(bool on) {
  Impl& m = *impl_;
  BRAID_REQUIRE(!m.share_grads || on, "layer: a Share::kAll layer always accumulates");
  if (on && !m.rep_step) {
    m.account = &m.mem_grads;
    m.rep_step = m.alloc<float>(size_t(m.rep_elems));
  }
  m.accumulate = on;
}
bool Layer::accumulates_grads() const { return impl_->accumulate; }

namespace {
// The chunked pairs' stream and events (set_decomposition, set_opening_chunks): the layer's second stream and
// chunks + 2 events, made once.
void chunk_resources(cudaStream_t* dstream, std::vector<cudaEvent_t>* devents, int chunks) {
  if (!*dstream) BRAID_CUDA_CHECK(cudaStreamCreateWithFlags(dstream, cudaStreamNonBlocking));
  while (int(devents->size()) < chunks + 2) {
    cudaEvent_t e = nullptr;
    BRAID_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    devents->push_back(e);
  }
}
// set_decomposition and set_opening_chunks (`what`): chunks >= 0; more than one needs sequence parallelism, must divide
// the local tokens, and excludes the other (`other_on`).
void require_chunks(bool sp, int64_t Tl, int chunks, bool other_on, const char* what) {
  BRAID_REQUIRE(chunks >= 0, std::string("layer: ") + what + ": chunks >= 0");
  if (chunks <= 1) return;
  BRAID_REQUIRE(sp, std::string("layer: ") + what + " needs sequence parallelism (all-gathers / reduce-scatters)");
  BRAID_REQUIRE(Tl % chunks == 0, std::string("layer: ") + what + ": the chunks must divide the local tokens (" +
                                      std::to_string(Tl) + ")");
  BRAID_REQUIRE(!other_on, std::string("layer: ") + what + ": set_decomposition and set_opening_chunks exclude each other");
}
}  // namespace

void Layer::set_decomposition(int chunks) {
  Impl& m = *impl_;
  require_chunks(m.sp, m.Tl, chunks, m.open_chunks > 1, "set_decomposition");
  if (chunks > 1) chunk_resources(&m.dstream, &m.devents, chunks);
  m.decompose = chunks > 1 ? chunks : 0;
}
int Layer::decomposition() const { return impl_->decompose; }

void Layer::set_opening_chunks(int chunks) {
  Impl& m = *impl_;
  require_chunks(m.sp, m.Tl, chunks, m.decompose > 1, "set_opening_chunks");
  if (chunks > 1) {
    for (auto& ev : m.oevents)
      while (int(ev.size()) < chunks) {
        cudaEvent_t e = nullptr;
        BRAID_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
        ev.push_back(e);
      }
  }
  m.open_chunks = chunks > 1 ? chunks : 0;
  m.open_gathered[0] = m.open_gathered[1] = false;
}
int Layer::opening_chunks() const { return impl_->open_chunks; }
bool Layer::copy_engine_collectives() const { return impl_->ce; }

Comm& Layer::comm() const { return impl_->comm; }

void Layer::reduce_replicated_grads(cudaStream_t s) {
  Impl& m = *impl_;
  if (!m.p.reduces_replicated_grads_per_step()) return;  // complete already (no sp, tp 1), or reduced per backward
  m.comm.all_reduce(m.rep, m.rep, size_t(m.rep_elems), DType::kFP32, s);
}

void Layer::zero_grads(cudaStream_t s) {
  Impl& m = *impl_;
  const int64_t ne = m.moe ? m.El : 1;
  BRAID_CUDA_CHECK(cudaMemsetAsync(m.dwqkv, 0, size_t(m.H * m.nqkv) * 2, s));
  BRAID_CUDA_CHECK(cudaMemsetAsync(m.dwo, 0, size_t(m.qd * m.H) * 2, s));
  BRAID_CUDA_CHECK(cudaMemsetAsync(m.dw13, 0, size_t(ne * m.H * 2 * m.Fl) * 2, s));
  BRAID_CUDA_CHECK(cudaMemsetAsync(m.dw2, 0, size_t(ne * m.Fl * m.H) * 2, s));
  BRAID_CUDA_CHECK(cudaMemsetAsync(m.rep, 0, size_t(m.rep_elems) * 4, s));
}

void Layer::share_interfaces(const Layer& owner) {
  Impl& m = *impl_;
  const Impl& o = *owner.impl_;
  BRAID_REQUIRE(&o != &m && m.sp && o.sp && m.moe == o.moe && m.H == o.H && m.Tl == o.Tl,
                "layer: share_interfaces needs two SP layers of one configuration");
  BRAID_CUDA_CHECK(cudaDeviceSynchronize());
  for (auto [mine, theirs] : {std::pair{&m.y, o.y}, std::pair{&m.dy, o.dy}, std::pair{&m.dx, o.dx}}) {
    if (*mine == theirs) continue;
    auto it = std::find(m.allocations.begin(), m.allocations.end(), static_cast<void*>(*mine));
    if (it != m.allocations.end()) {
      BRAID_CUDA_CHECK(cudaFree(*mine));
      m.allocations.erase(it);
      m.mem_act -= std::min(m.mem_act, size_t(m.Tl * m.H) * sizeof(bf16));
    }
    *mine = theirs;
  }
}

void Layer::set_gemm_sm_target(int sms) {
  BRAID_REQUIRE(sms >= 0, "layer: set_gemm_sm_target needs sms >= 0");
  BRAID_CUBLAS_CHECK(cublasSetSmCountTarget(impl_->blas, sms));
  for (auto& g : impl_->grouped)
    if (g) g->set_sm_count(sms);
}

void Layer::share_cublas_workspace(const Layer& other) {
  Impl& m = *impl_;
  const Impl& o = *other.impl_;
  BRAID_REQUIRE(&o != &m && o.blas_ws != nullptr && o.mem_ws > 0,
                "layer: share_cublas_workspace needs another layer that owns its workspace");
  BRAID_CUDA_CHECK(cudaDeviceSynchronize());  // work queued with the old workspace finishes first
  BRAID_CUBLAS_CHECK(cublasSetWorkspace(m.blas, o.blas_ws, o.mem_ws));
  if (m.blas_ws) BRAID_CUDA_CHECK(cudaFree(m.blas_ws));
  m.blas_ws = nullptr;  // not ours: the destructor frees nothing
  m.mem_ws = 0;
}

Layer::~Layer() {
  if (!impl_) return;
  cudaDeviceSynchronize();
  for (void* ptr : impl_->allocations) cudaFree(ptr);
  for (void* ptr : impl_->windows) {  // collective, as the layer's construction
    try {
      impl_->comm.free_window(ptr);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "layer: releasing a window: %s\n", e.what());
    }
  }
  if (impl_->blas) cublasDestroy(impl_->blas);
  if (impl_->blas_ws) cudaFree(impl_->blas_ws);
  if (impl_->counts_h) cudaFreeHost(impl_->counts_h);
  if (impl_->rcounts_h) cudaFreeHost(impl_->rcounts_h);
  if (impl_->maps_h) cudaFreeHost(impl_->maps_h);
  if (impl_->counts_ev) cudaEventDestroy(impl_->counts_ev);
  for (cudaEvent_t e : impl_->devents) cudaEventDestroy(e);
  for (const auto& ev : impl_->oevents)
    for (cudaEvent_t e : ev) cudaEventDestroy(e);
  if (impl_->dstream) cudaStreamDestroy(impl_->dstream);
}

const ModelConfig& Layer::config() const { return impl_->c; }
const Parallel& Layer::parallel() const { return impl_->p; }
int64_t Layer::local_tokens() const { return impl_->Tl; }
void* Layer::x() const { return impl_->x; }
void* Layer::y() const { return impl_->y; }
void* Layer::dy() const { return impl_->dy; }
void* Layer::dx() const { return impl_->dx; }
const std::vector<OpInfo>& Layer::ops(Phase ph) const { return impl_->plan[int(ph)]; }

void Layer::run_op(Phase ph, size_t index, cudaStream_t stream) {
  auto& f = impl_->fn[int(ph)];
  BRAID_REQUIRE(index < f.size(), "layer: operator index out of range");
  f[index](stream);
}
void Layer::forward(cudaStream_t stream) {
  for (auto& f : impl_->fn[0]) f(stream);
}
void Layer::backward(cudaStream_t stream) {
  for (auto& f : impl_->fn[1]) f(stream);
}

Layer::Routing Layer::routing() const {
  const Impl& m = *impl_;
  BRAID_REQUIRE(!m.counts_pending, "layer: routing() before the forward's dispatch was enqueued");
  return Routing{m.sc, m.sd, m.rc, m.rd, m.expert_rows, m.R};
}

void Layer::set_routing(const Routing& r) {
  Impl& m = *impl_;
  BRAID_REQUIRE(r.sc.size() == m.sc.size() && r.sd.size() == m.sd.size() && r.rc.size() == m.rc.size() &&
                    r.rd.size() == m.rd.size() && r.expert_rows.size() == m.expert_rows.size() && r.rows <= m.Rmax,
                "layer: set_routing needs a routing of this layer's configuration");
  m.sc = r.sc, m.sd = r.sd, m.rc = r.rc, m.rd = r.rd, m.expert_rows = r.expert_rows, m.R = r.rows;
}

float* Layer::device_counts() const { return impl_->dev_sizes ? impl_->counts_all : nullptr; }
size_t Layer::device_counts_size() const { return impl_->dev_sizes ? size_t(impl_->tp * impl_->E) : 0; }

std::vector<int64_t> Layer::local_expert_rows() const {
  const Impl& m = *impl_;
  if (!m.dev_sizes) return m.expert_rows;
  BRAID_CUDA_CHECK(cudaDeviceSynchronize());  // the counts on the device: the last forward's layout
  std::vector<int> r(size_t(m.El));
  if (!r.empty()) BRAID_CUDA_CHECK(cudaMemcpy(r.data(), m.layout_experts(), r.size() * sizeof(int), cudaMemcpyDeviceToHost));
  return std::vector<int64_t>(r.begin(), r.end());
}
Layer::MoeDrops Layer::moe_drops() const {
  const Impl& m = *impl_;
  MoeDrops d;
  if (!m.moe) return d;
  d.routed = m.Tl * m.K;
  if (m.cap == 0) return d;
  BRAID_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> c(size_t(m.E));
  BRAID_CUDA_CHECK(cudaMemcpy(c.data(), m.counts, c.size() * sizeof(float), cudaMemcpyDeviceToHost));
  for (float v : c) d.dropped += std::max<int64_t>(0, int64_t(v) - m.cap);
  return d;
}
double Layer::moe_dropped_fraction(const Team& team, bool print) const {
  const Impl& m = *impl_;
  if (!m.moe || m.cap == 0) return -1;
  const auto d = moe_drops();
  double v[2] = {double(d.dropped), double(d.routed)};
  BRAID_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_DOUBLE, MPI_SUM, team.mpi()));
  const double f = v[1] > 0 ? v[0] / v[1] : 0;
  if (print && team.rank() == 0)
    std::printf("# MoE capacity factor %g (%lld rows per source rank and expert): %.2f%% of the routed (token, k) "
                "dropped in the last forward (all ranks)\n",
                m.c.capacity, (long long)m.cap, 100 * f);
  return f;
}
double Layer::host_wait_us() const { return impl_->host_wait_us; }
std::vector<int> Layer::local_routes() const {
  const Impl& m = *impl_;
  if (!m.moe) return {};
  BRAID_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<int> r(size_t(m.Tl * m.K));
  if (!r.empty()) BRAID_CUDA_CHECK(cudaMemcpy(r.data(), m.route, r.size() * sizeof(int), cudaMemcpyDeviceToHost));
  return r;
}
std::string Layer::attention_backend() const { return impl_->attention->describe(); }

void Layer::load_weights(const LayerWeights& full) {
  Impl& m = *impl_;
  const LayerWeights s = shard_of(full, m.c, m.p, m.rank);
  auto up = [](bf16* dst, const std::vector<uint16_t>& h) {
    BRAID_CUDA_CHECK(cudaMemcpy(dst, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
  };
  auto bits = [](const std::vector<double>& v) {
    std::vector<uint16_t> o(v.size());
    for (size_t i = 0; i < v.size(); ++i) o[i] = to_bf16_bits(v[i]);
    return o;
  };
  // Concatenate columns of row-major blocks: out[r] = a[r] | b[r] | ...
  auto hcat = [](int64_t rows, std::initializer_list<std::pair<const std::vector<double>*, int64_t>> parts) {
    int64_t cols = 0;
    for (auto& pr : parts) cols += pr.second;
    std::vector<double> o(rows * cols);
    for (int64_t r = 0; r < rows; ++r) {
      int64_t c0 = 0;
      for (auto& pr : parts) {
        std::copy(pr.first->begin() + r * pr.second, pr.first->begin() + (r + 1) * pr.second, o.begin() + r * cols + c0);
        c0 += pr.second;
      }
    }
    return o;
  };
  up(m.g1, bits(s.norm1));
  up(m.g2, bits(s.norm2));
  up(m.wqkv, bits(hcat(m.H, {{&s.wq, m.qd}, {&s.wk, m.kvd}, {&s.wv, m.kvd}})));
  up(m.wo, bits(s.wo));
  if (!m.moe) {
    up(m.w13, bits(hcat(m.H, {{&s.w1, m.Fl}, {&s.w3, m.Fl}})));
    up(m.w2, bits(s.w2));
  } else {
    std::vector<double> w13;
    for (int64_t e = 0; e < m.El; ++e) {
      std::vector<double> a(s.w1.begin() + e * m.H * m.F, s.w1.begin() + (e + 1) * m.H * m.F);
      std::vector<double> b(s.w3.begin() + e * m.H * m.F, s.w3.begin() + (e + 1) * m.H * m.F);
      const auto cat = hcat(m.H, {{&a, m.F}, {&b, m.F}});
      w13.insert(w13.end(), cat.begin(), cat.end());
    }
    up(m.w13, bits(w13));
    up(m.w2, bits(s.w2));
    up(m.wr, bits(s.router));
  }
  BRAID_CUDA_CHECK(cudaDeviceSynchronize());  // the uploads land before any non-blocking stream reads them
}

void Layer::init_random_weights(uint64_t seed) {
  Impl& m = *impl_;
  cudaStream_t s = nullptr;
  const float sh = float(1 / std::sqrt(double(m.H))), sq = float(1 / std::sqrt(double(m.c.q_dim())));
  const float sf = float(1 / std::sqrt(double(m.F)));
  const uint64_t r = seed * 1000 + m.rank * 16;
  k::fill_uniform(m.g1, m.H, seed, 0.9f, 1.1f, s);
  k::fill_uniform(m.g2, m.H, seed + 1, 0.9f, 1.1f, s);
  k::fill_uniform(m.wqkv, m.H * m.nqkv, r + 2, -sh, sh, s);
  k::fill_uniform(m.wo, m.qd * m.H, r + 3, -sq, sq, s);
  const int64_t ne = m.moe ? m.El : 1;
  k::fill_uniform(m.w13, ne * m.H * 2 * m.Fl, r + 4, -sh, sh, s);
  k::fill_uniform(m.w2, ne * m.Fl * m.H, r + 5, -sf, sf, s);
  if (m.moe) k::fill_uniform(m.wr, m.H * m.E, seed + 6, -sh, sh, s);  // replicated: same seed on every rank
  BRAID_CUDA_CHECK(cudaStreamSynchronize(s));
}

std::vector<std::pair<const void*, size_t>> Layer::grad_buffers() const {
  const Impl& m = *impl_;
  const size_t h = size_t(m.H);
  const size_t w13 = m.moe ? size_t(m.El) * h * 2 * size_t(m.F) : h * 2 * size_t(m.Fl);
  const size_t w2 = m.moe ? size_t(m.El) * size_t(m.F) * h : size_t(m.Fl) * h;
  return {{m.rep, size_t(m.rep_elems) * 4},
          {m.dwqkv, h * size_t(m.nqkv) * 2},
          {m.dwo, size_t(m.qd) * h * 2},
          {m.dw13, w13 * 2},
          {m.dw2, w2 * 2}};
}

LayerWeights Layer::download_grads() const {
  const Impl& m = *impl_;
  BRAID_CUDA_CHECK(cudaDeviceSynchronize());
  auto down = [](const bf16* src, int64_t n) {
    std::vector<uint16_t> h(n);
    BRAID_CUDA_CHECK(cudaMemcpy(h.data(), src, n * 2, cudaMemcpyDeviceToHost));
    std::vector<double> o(n);
    for (int64_t i = 0; i < n; ++i) o[i] = from_bf16_bits(h[i]);
    return o;
  };
  auto downf = [](const float* src, int64_t n) {
    std::vector<float> h(n);
    BRAID_CUDA_CHECK(cudaMemcpy(h.data(), src, n * 4, cudaMemcpyDeviceToHost));
    return std::vector<double>(h.begin(), h.end());
  };
  // Split the columns of a row-major [rows, Σ widths] block.
  auto hsplit = [](const std::vector<double>& a, int64_t rows, std::vector<int64_t> widths) {
    int64_t cols = 0;
    for (auto w : widths) cols += w;
    std::vector<std::vector<double>> out(widths.size());
    for (int64_t r = 0; r < rows; ++r) {
      int64_t c0 = 0;
      for (size_t i = 0; i < widths.size(); ++i) {
        out[i].insert(out[i].end(), a.begin() + r * cols + c0, a.begin() + r * cols + c0 + widths[i]);
        c0 += widths[i];
      }
    }
    return out;
  };
  LayerWeights g;
  g.norm1 = downf(m.rep, m.H);
  g.norm2 = downf(m.rep + m.H, m.H);
  auto qkv = hsplit(down(m.dwqkv, m.H * m.nqkv), m.H, {m.qd, m.kvd, m.kvd});
  g.wq = qkv[0], g.wk = qkv[1], g.wv = qkv[2];
  g.wo = down(m.dwo, m.qd * m.H);
  if (!m.moe) {
    auto w13 = hsplit(down(m.dw13, m.H * 2 * m.Fl), m.H, {m.Fl, m.Fl});
    g.w1 = w13[0], g.w3 = w13[1];
    g.w2 = down(m.dw2, m.Fl * m.H);
  } else {
    const auto all = down(m.dw13, m.El * m.H * 2 * m.F);
    for (int64_t e = 0; e < m.El; ++e) {
      std::vector<double> blk(all.begin() + e * m.H * 2 * m.F, all.begin() + (e + 1) * m.H * 2 * m.F);
      auto parts = hsplit(blk, m.H, {m.F, m.F});
      g.w1.insert(g.w1.end(), parts[0].begin(), parts[0].end());
      g.w3.insert(g.w3.end(), parts[1].begin(), parts[1].end());
    }
    g.w2 = down(m.dw2, m.El * m.F * m.H);
    g.router = downf(m.rep + 2 * m.H, m.H * m.E);
  }
  return g;
}

}  // namespace braid::model
