// Kernels of the transformer layer: RMSNorm, RoPE, causal GQA attention (flash-style, fp32 softmax),
// SwiGLU, residuals, and the MoE routing / permutation / combine kernels. bf16 storage, fp32 math.
// Layout: activations row-major [tokens, features], token t = b·S + s.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace braid::model::kernels {

using bf16 = __nv_bfloat16;

// ---- RMSNorm ----------------------------------------------------------------------------------------
// y = (x [+ add]) · r · g; r = rsqrt(mean(v²) + eps) stored in rstd[T]; when add != null the sum is
// written to sum_out (rounded to bf16) and normalised from the rounded value.
void rmsnorm_fwd(const bf16* x, const bf16* add, bf16* sum_out, const bf16* g, bf16* y, float* rstd, int64_t T,
                 int H, float eps, cudaStream_t s);
// dx = resid + r·dy·g − r³·x·(Σ dy·g·x)/H (resid may be null); dg[H] (fp32) = Σ_t dy·x·r (deterministic:
// per-chunk partials in `partial` [chunks, H], then a fixed-order sum).
void rmsnorm_bwd(const bf16* x, const bf16* g, const float* rstd, const bf16* dy, const bf16* resid, bf16* dx,
                 float* dg, float* partial, int chunks, int64_t T, int H, cudaStream_t s);
constexpr int kNormChunkRows = 256;
inline int norm_chunks(int64_t T) { return int((T + kNormChunkRows - 1) / kNormChunkRows); }

// ---- RoPE: in place on columns [0, nheads·d) of a [T, ld] buffer, pairs (i, i+d/2); inverse rotates back.
void rope(bf16* a, int64_t T, int ld, int nheads, int d, int S, float theta, bool inverse, cudaStream_t s);

// ---- attention ---------------------------------------------------------------------------------------
// qkv [T, ld] holds q heads at column q_off + h·d, k/v heads at k_off/v_off + g·d, g = h / group.
// o [T, ldo] at column h·d; lse [B, hq, S] fp32 (natural log).
struct AttnShape {
  int B, S, hq, hkv, d, ld, q_off, k_off, v_off, ldo;
  float scale;
};
void attention_fwd(const bf16* qkv, bf16* o, float* lse, const AttnShape& a, cudaStream_t s);
// dqkv [T, ld] gets dq, dk, dv at the same columns as qkv (every column of those heads is written).
// delta [B, hq, S] fp32 workspace.
void attention_bwd(const bf16* qkv, const bf16* o, const bf16* dout, const float* lse, float* delta, bf16* dqkv,
                   const AttnShape& a, cudaStream_t s);

// ---- SwiGLU: gu [T, 2F] = (gate | up) -> act [T, F] = silu(gate)·up; backward dgu from dact.
// rows_dev (optional, device): the rows are min(*rows_dev, T) — T is then a bound (the MoE layer's device sizes).
void swiglu_fwd(const bf16* gu, bf16* act, int64_t T, int F, cudaStream_t s, const int* rows_dev = nullptr);
void swiglu_bwd(const bf16* gu, const bf16* dact, bf16* dgu, int64_t T, int F, cudaStream_t s,
                const int* rows_dev = nullptr);

// ---- elementwise: y = a + b
void add(const bf16* a, const bf16* b, bf16* y, int64_t n, cudaStream_t s);
// fp32: y = a + b (y may equal a)
void add_f32(const float* a, const float* b, float* y, int64_t n, cudaStream_t s);

// ---- MoE ---------------------------------------------------------------------------------------------
// logits [T, E] fp32 = h [T, H] · wr [H, E]
void router_fwd(const bf16* h, const bf16* wr, float* logits, int64_t T, int H, int E, cudaStream_t s);
// top-k by logit (ties: lower expert first), probs = softmax over the k selected: route [T, K], prob [T, K].
void topk(const float* logits, int* route, float* prob, int64_t T, int E, int K, cudaStream_t s);
// counts[E] (as float: exact below 2^24) and the stable expert-major position of every (t, k) entry:
// pos[t·K + k] = Σ_{e' < e} counts[e'] + (entries of expert e before it). Then send[pos] = h[t].
// cap > 0 (capacity factor): send is [E, cap, H]; pos[t·K + k] = e·cap + (entries of expert e before it) when
// that is < cap, else -1 (dropped, not sent); slots past counts[e] are zero rows (route_zero_padding).
void route_permute(const int* route, float* counts, int* pos, const bf16* h, bf16* send, int64_t T, int K, int E,
                   int H, cudaStream_t s, int64_t cap = 0);
// Capacity's static row maps between the receive layout [source][local expert][cap] and the expert-major
// one [local expert][source][cap]: sort_map[i] = receive row of sorted row i, unsort_map its inverse.
void capacity_maps(int* sort_map, int* unsort_map, int tp, int El, int64_t cap, cudaStream_t s);
// rows [E, cap, H]: zero every row e·cap + j with j >= counts[e] (the unused capacity slots).
void route_zero_padding(const float* counts, bf16* rows, int E, int64_t cap, int H, cudaStream_t s);
// dst[i] = src[map[i]] for rows of H elements; rows_dev (optional, device): min(*rows_dev, rows) rows.
void gather_rows(const bf16* src, bf16* dst, const int* map, int64_t rows, int H, cudaStream_t s,
                 const int* rows_dev = nullptr);
// Dropless MoE with its counts on the device (ModelConfig::moe_device_sizes). counts_all [tp, E] fp32: every rank's
// per-expert counts (route_permute's, all-gathered). For this rank (`me`, experts me·El .. me·El + El - 1) writes
// layout (int32, moe_layout_ints(tp, El) of them): [0, tp·tp) the exchange's row matrix, rows[src·tp + dst] = rows
// rank src sends rank dst (the same on every rank); [tp·tp, tp·tp + El) the rows per local expert; then R, the rows
// received (<= Rmax). sort_map / unsort_map [Rmax]: the rows of moe_row_maps (moe_layout.hpp), entries < R written.
// A count matrix beyond Rmax rows writes R = 0 and nothing else, and traps (a layer bug: the buffers hold the worst case).
inline int64_t moe_layout_ints(int tp, int El) { return int64_t(tp) * tp + El + 1; }
void moe_device_layout(const float* counts_all, int tp, int me, int El, int* layout, int* sort_map, int* unsort_map,
                       int64_t Rmax, cudaStream_t s);
// y[t] = x1[t] + Σ_k prob[t,k] · ret[pos[t,k]]   (combine, combine_bwd, route_bwd: an entry with pos < 0 was
// dropped by the capacity: it adds nothing, and its row is neither read nor written)
void combine(const bf16* x1, const bf16* ret, const int* pos, const float* prob, bf16* y, int64_t T, int K, int H,
             cudaStream_t s);
// dret[pos[t,k]] = prob[t,k]·dy[t]; dlogits [T, E] (zero but for the selected) through the top-k softmax.
void combine_bwd(const bf16* dy, const bf16* ret, const int* pos, const int* route, const float* prob, bf16* dret,
                 float* dlogits, int64_t T, int K, int E, int H, cudaStream_t s);
// dh[t] = Σ_k drow[pos[t,k]] + Σ_e dlogits[t,e]·wr[:,e]
void route_bwd(const bf16* drow, const int* pos, const float* dlogits, const bf16* wr, bf16* dh, int64_t T, int K,
               int E, int H, cudaStream_t s);
// dwr [H, E] fp32 = h^T · dlogits
void router_wgrad(const bf16* h, const float* dlogits, float* dwr, int64_t T, int H, int E, cudaStream_t s);

// ---- misc
void fill_uniform(bf16* p, size_t n, uint64_t seed, float lo, float hi, cudaStream_t s);
void to_float(const bf16* in, float* out, size_t n, cudaStream_t s);

}  // namespace braid::model::kernels
