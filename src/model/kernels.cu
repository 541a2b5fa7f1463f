// Kernels of the transformer layer (see kernels.cuh). Kernels first, launchers after.
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include <algorithm>
#include <cfloat>

#include "braid/errors.hpp"
#include "kernels.cuh"
#include "moe_layout.hpp"

namespace braid::model::kernels {
namespace {

__device__ __forceinline__ float f(bf16 v) { return __bfloat162float(v); }
__device__ __forceinline__ bf16 b(float v) { return __float2bfloat16(v); }

int blocks_for(int64_t n, int threads, int cap = 65535 * 8) {
  const int64_t g = (n + threads - 1) / threads;
  return int(g < 1 ? 1 : (g > cap ? cap : g));
}

// ================================================================ kernels
constexpr int kNormThreads = 256;

__global__ void rmsnorm_fwd_kernel(const bf16* __restrict__ x, const bf16* __restrict__ add, bf16* sum_out,
                                   const bf16* __restrict__ g, bf16* __restrict__ y, float* __restrict__ rstd, int H,
                                   float eps) {
  using Reduce = cub::BlockReduce<float, kNormThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  __shared__ float r_s;
  const int64_t t = blockIdx.x;
  const bf16* xr = x + t * H;
  float ss = 0;
  for (int j = threadIdx.x; j < H; j += kNormThreads) {
    float v = f(xr[j]);
    if (add) {
      const bf16 sb = b(v + f(add[t * H + j]));
      sum_out[t * H + j] = sb;
      v = f(sb);
    }
    ss += v * v;
  }
  const float tot = Reduce(tmp).Sum(ss);
  if (threadIdx.x == 0) {
    r_s = rsqrtf(tot / H + eps);
    rstd[t] = r_s;
  }
  __syncthreads();
  const float r = r_s;
  const bf16* src = add ? sum_out + t * H : xr;
  for (int j = threadIdx.x; j < H; j += kNormThreads) y[t * H + j] = b(f(src[j]) * r * f(g[j]));
}

__global__ void rmsnorm_bwd_dx_kernel(const bf16* __restrict__ x, const bf16* __restrict__ g,
                                      const float* __restrict__ rstd, const bf16* __restrict__ dy,
                                      const bf16* __restrict__ resid, bf16* __restrict__ dx, int H) {
  using Reduce = cub::BlockReduce<float, kNormThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  __shared__ float dot_s;
  const int64_t t = blockIdx.x;
  float dot = 0;
  for (int j = threadIdx.x; j < H; j += kNormThreads) dot += f(dy[t * H + j]) * f(g[j]) * f(x[t * H + j]);
  const float tot = Reduce(tmp).Sum(dot);
  if (threadIdx.x == 0) dot_s = tot;
  __syncthreads();
  const float r = rstd[t], c = r * r * r * dot_s / H;
  for (int j = threadIdx.x; j < H; j += kNormThreads) {
    float v = r * f(dy[t * H + j]) * f(g[j]) - c * f(x[t * H + j]);
    if (resid) v += f(resid[t * H + j]);
    dx[t * H + j] = b(v);
  }
}

// partial[chunk, j] = Σ_{t in chunk} dy·x·r
__global__ void rmsnorm_dg_partial_kernel(const bf16* __restrict__ x, const float* __restrict__ rstd,
                                          const bf16* __restrict__ dy, float* __restrict__ partial, int64_t T, int H) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= H) return;
  const int64_t t0 = int64_t(blockIdx.y) * kNormChunkRows, t1 = min(T, t0 + kNormChunkRows);
  float acc = 0;
  for (int64_t t = t0; t < t1; ++t) acc += f(dy[t * H + j]) * f(x[t * H + j]) * rstd[t];
  partial[int64_t(blockIdx.y) * H + j] = acc;
}
__global__ void sum_chunks_kernel(const float* __restrict__ partial, float* __restrict__ out, int chunks, int H) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= H) return;
  float acc = 0;
  for (int c = 0; c < chunks; ++c) acc += partial[int64_t(c) * H + j];
  out[j] = acc;
}

__global__ void rope_kernel(bf16* a, int64_t T, int ld, int nheads, int d, int S, float theta, bool inverse) {
  const int half = d / 2;
  const int64_t n = T * nheads * half;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < n; idx += int64_t(gridDim.x) * blockDim.x) {
    const int i = int(idx % half);
    const int64_t th = idx / half;
    const int h = int(th % nheads);
    const int64_t t = th / nheads;
    const float inv_freq = powf(theta, -2.0f * i / d);
    float sn, cs;
    sincosf(float(t % S) * inv_freq, &sn, &cs);
    if (inverse) sn = -sn;
    bf16* p = a + t * ld + int64_t(h) * d;
    const float x0 = f(p[i]), x1 = f(p[i + half]);
    p[i] = b(x0 * cs - x1 * sn);
    p[i + half] = b(x1 * cs + x0 * sn);
  }
}

// ---- attention: blocks of 64 query rows x 64 keys, 256 threads; thread (row r = tid/4, sub = tid%4)
// owns keys/queries sub + 4·kk of the 64 and output columns sub + 4·cc of the D.
namespace attn {
constexpr int kB = 64, kThreads = 256;
template <int D>
struct config {
  static constexpr int kLd = D + 1;  // padded rows: conflict-free column reads
  static constexpr int kTile = kB * kLd;
  static constexpr size_t fwd_smem = (3 * kTile + kB * (kB + 1)) * sizeof(float);
  static constexpr size_t dq_smem = (4 * kTile + kB * (kB + 1)) * sizeof(float);
  static constexpr size_t dkv_smem = (4 * kTile + 2 * kB * (kB + 1) + 2 * kB) * sizeof(float);
  static_assert(dkv_smem <= 227 * 1024, "attention backward tile exceeds Hopper shared memory");
};

// rows [r0, r0+64) of a head (column col) of a [T, ld] bf16 buffer into smem [64][D+1] (zeros past S).
template <int D>
__device__ void load_tile(float* dst, const bf16* src, int64_t row0, int nvalid, int ld, int col) {
  for (int idx = threadIdx.x; idx < kB * D; idx += kThreads) {
    const int r = idx / D, c = idx % D;
    dst[r * config<D>::kLd + c] = r < nvalid ? f(src[(row0 + r) * ld + col + c]) : 0.f;
  }
}
template <int D>
__device__ __forceinline__ float dot_rows(const float* a, const float* bb) {
  float s = 0;
#pragma unroll 8
  for (int e = 0; e < D; ++e) s += a[e] * bb[e];
  return s;
}

template <int D>
__global__ void __launch_bounds__(kThreads) fwd_kernel(const bf16* __restrict__ qkv, bf16* __restrict__ o,
                                                       float* __restrict__ lse, AttnShape a) {
  using C = config<D>;
  extern __shared__ float sm[];
  float *Qs = sm, *Ks = Qs + C::kTile, *Vs = Ks + C::kTile, *Ps = Vs + C::kTile;
  const int bb = blockIdx.z, h = blockIdx.y, g = h / (a.hq / a.hkv), q0 = blockIdx.x * kB;
  const int S = a.S;
  const int64_t base = int64_t(bb) * S;
  const int r = threadIdx.x / 4, sub = threadIdx.x % 4, i = q0 + r;
  load_tile<D>(Qs, qkv, base + q0, min(kB, S - q0), a.ld, a.q_off + h * D);
  float m = -INFINITY, l = 0, acc[D / 4];
#pragma unroll
  for (int cc = 0; cc < D / 4; ++cc) acc[cc] = 0;
  const int kend = min(S, q0 + kB);
  for (int k0 = 0; k0 < kend; k0 += kB) {
    __syncthreads();  // previous tile fully consumed
    load_tile<D>(Ks, qkv, base + k0, min(kB, S - k0), a.ld, a.k_off + g * D);
    load_tile<D>(Vs, qkv, base + k0, min(kB, S - k0), a.ld, a.v_off + g * D);
    __syncthreads();
    float sc[kB / 4], mt = -INFINITY;
#pragma unroll
    for (int kk = 0; kk < kB / 4; ++kk) {
      const int j = sub + 4 * kk, key = k0 + j;
      const bool ok = key <= i && key < S && i < S;
      sc[kk] = ok ? dot_rows<D>(Qs + r * C::kLd, Ks + j * C::kLd) * a.scale : -INFINITY;
      mt = fmaxf(mt, sc[kk]);
    }
    mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 1));
    mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 2));
    const float mn = fmaxf(m, mt);
    const float alpha = mn == -INFINITY ? 1.f : __expf(m - mn);  // m = -inf, mn finite: 0
    float ls = 0;
#pragma unroll
    for (int kk = 0; kk < kB / 4; ++kk) {
      const float p = sc[kk] == -INFINITY ? 0.f : __expf(sc[kk] - mn);
      ls += p;
      Ps[r * (kB + 1) + sub + 4 * kk] = p;
    }
    ls += __shfl_xor_sync(0xffffffffu, ls, 1);
    ls += __shfl_xor_sync(0xffffffffu, ls, 2);
    l = l * alpha + ls;
    m = mn;
    __syncwarp();
#pragma unroll
    for (int cc = 0; cc < D / 4; ++cc) acc[cc] *= alpha;
    for (int j = 0; j < kB; ++j) {
      const float p = Ps[r * (kB + 1) + j];
#pragma unroll
      for (int cc = 0; cc < D / 4; ++cc) acc[cc] += p * Vs[j * C::kLd + sub + 4 * cc];
    }
  }
  if (i < S) {
    const float inv = l > 0 ? 1.f / l : 0.f;
#pragma unroll
    for (int cc = 0; cc < D / 4; ++cc) o[(base + i) * a.ldo + h * D + sub + 4 * cc] = b(acc[cc] * inv);
    if (sub == 0) lse[(int64_t(bb) * a.hq + h) * S + i] = m + logf(l);
  }
}

// delta[b, h, i] = Σ_c dO·O, one warp per row.
__global__ void delta_kernel(const bf16* __restrict__ o, const bf16* __restrict__ dout, float* __restrict__ delta,
                             AttnShape a) {
  const int64_t warp = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  const int64_t rows = int64_t(a.B) * a.hq * a.S;
  if (warp >= rows) return;
  const int i = int(warp % a.S);
  const int h = int((warp / a.S) % a.hq);
  const int bb = int(warp / (int64_t(a.S) * a.hq));
  const int64_t off = (int64_t(bb) * a.S + i) * a.ldo + int64_t(h) * a.d;
  float s = 0;
  for (int c = lane; c < a.d; c += 32) s += f(o[off + c]) * f(dout[off + c]);
  for (int w = 16; w; w >>= 1) s += __shfl_xor_sync(0xffffffffu, s, w);
  if (lane == 0) delta[warp] = s;
}

template <int D>
__global__ void __launch_bounds__(kThreads) dq_kernel(const bf16* __restrict__ qkv, const bf16* __restrict__ dout,
                                                      const float* __restrict__ lse, const float* __restrict__ delta,
                                                      bf16* __restrict__ dqkv, AttnShape a) {
  using C = config<D>;
  extern __shared__ float sm[];
  float *Qs = sm, *dOs = Qs + C::kTile, *Ks = dOs + C::kTile, *Vs = Ks + C::kTile, *dSs = Vs + C::kTile;
  const int bb = blockIdx.z, h = blockIdx.y, g = h / (a.hq / a.hkv), q0 = blockIdx.x * kB, S = a.S;
  const int64_t base = int64_t(bb) * S;
  const int r = threadIdx.x / 4, sub = threadIdx.x % 4, i = q0 + r;
  load_tile<D>(Qs, qkv, base + q0, min(kB, S - q0), a.ld, a.q_off + h * D);
  load_tile<D>(dOs, dout, base + q0, min(kB, S - q0), a.ldo, h * D);
  const int64_t row = (int64_t(bb) * a.hq + h) * S + i;
  const float lse_i = i < S ? lse[row] : 0.f, delta_i = i < S ? delta[row] : 0.f;
  float acc[D / 4];
#pragma unroll
  for (int cc = 0; cc < D / 4; ++cc) acc[cc] = 0;
  const int kend = min(S, q0 + kB);
  for (int k0 = 0; k0 < kend; k0 += kB) {
    __syncthreads();
    load_tile<D>(Ks, qkv, base + k0, min(kB, S - k0), a.ld, a.k_off + g * D);
    load_tile<D>(Vs, qkv, base + k0, min(kB, S - k0), a.ld, a.v_off + g * D);
    __syncthreads();
#pragma unroll 4
    for (int kk = 0; kk < kB / 4; ++kk) {
      const int j = sub + 4 * kk, key = k0 + j;
      float ds = 0;
      if (key <= i && key < S && i < S) {
        const float p = __expf(dot_rows<D>(Qs + r * C::kLd, Ks + j * C::kLd) * a.scale - lse_i);
        const float dp = dot_rows<D>(dOs + r * C::kLd, Vs + j * C::kLd);
        ds = p * (dp - delta_i);
      }
      dSs[r * (kB + 1) + j] = ds;
    }
    __syncwarp();
    for (int j = 0; j < kB; ++j) {
      const float ds = dSs[r * (kB + 1) + j];
#pragma unroll
      for (int cc = 0; cc < D / 4; ++cc) acc[cc] += ds * Ks[j * C::kLd + sub + 4 * cc];
    }
  }
  if (i < S) {
#pragma unroll
    for (int cc = 0; cc < D / 4; ++cc) dqkv[(base + i) * a.ld + a.q_off + h * D + sub + 4 * cc] = b(acc[cc] * a.scale);
  }
}

// One block per 64 keys of kv head g: loops over the group's query heads and the query tiles at or
// after the key tile (causal), accumulating dK and dV in registers (thread: key row r, columns sub+4cc).
template <int D>
__global__ void __launch_bounds__(kThreads) dkv_kernel(const bf16* __restrict__ qkv, const bf16* __restrict__ dout,
                                                       const float* __restrict__ lse, const float* __restrict__ delta,
                                                       bf16* __restrict__ dqkv, AttnShape a) {
  using C = config<D>;
  extern __shared__ float sm[];
  float *Qs = sm, *dOs = Qs + C::kTile, *Ks = dOs + C::kTile, *Vs = Ks + C::kTile;
  float *Ps = Vs + C::kTile, *dSs = Ps + kB * (kB + 1), *lse_s = dSs + kB * (kB + 1), *delta_s = lse_s + kB;
  const int bb = blockIdx.z, g = blockIdx.y, k0 = blockIdx.x * kB, S = a.S, group = a.hq / a.hkv;
  const int64_t base = int64_t(bb) * S;
  const int r = threadIdx.x / 4, sub = threadIdx.x % 4, key = k0 + r;
  load_tile<D>(Ks, qkv, base + k0, min(kB, S - k0), a.ld, a.k_off + g * D);
  load_tile<D>(Vs, qkv, base + k0, min(kB, S - k0), a.ld, a.v_off + g * D);
  float dk[D / 4], dv[D / 4];
#pragma unroll
  for (int cc = 0; cc < D / 4; ++cc) dk[cc] = dv[cc] = 0;
  for (int h = g * group; h < (g + 1) * group; ++h) {
    for (int q0 = k0; q0 < S; q0 += kB) {  // k0 is a multiple of kB: tiles at or after the key tile
      __syncthreads();
      load_tile<D>(Qs, qkv, base + q0, min(kB, S - q0), a.ld, a.q_off + h * D);
      load_tile<D>(dOs, dout, base + q0, min(kB, S - q0), a.ldo, h * D);
      if (threadIdx.x < kB) {
        const int i = q0 + threadIdx.x;
        const int64_t row = (int64_t(bb) * a.hq + h) * S + i;
        lse_s[threadIdx.x] = i < S ? lse[row] : 0.f;
        delta_s[threadIdx.x] = i < S ? delta[row] : 0.f;
      }
      __syncthreads();
#pragma unroll 4
      for (int kk = 0; kk < kB / 4; ++kk) {
        const int qi = sub + 4 * kk, i = q0 + qi;
        float p = 0, ds = 0;
        if (key <= i && i < S && key < S) {
          p = __expf(dot_rows<D>(Qs + qi * C::kLd, Ks + r * C::kLd) * a.scale - lse_s[qi]);
          const float dp = dot_rows<D>(dOs + qi * C::kLd, Vs + r * C::kLd);
          ds = p * (dp - delta_s[qi]);
        }
        Ps[r * (kB + 1) + qi] = p;
        dSs[r * (kB + 1) + qi] = ds;
      }
      __syncwarp();
      for (int qi = 0; qi < kB; ++qi) {
        const float p = Ps[r * (kB + 1) + qi], ds = dSs[r * (kB + 1) + qi];
#pragma unroll
        for (int cc = 0; cc < D / 4; ++cc) {
          dv[cc] += p * dOs[qi * C::kLd + sub + 4 * cc];
          dk[cc] += ds * Qs[qi * C::kLd + sub + 4 * cc];
        }
      }
    }
  }
  if (key < S) {
#pragma unroll
    for (int cc = 0; cc < D / 4; ++cc) {
      dqkv[(base + key) * a.ld + a.k_off + g * D + sub + 4 * cc] = b(dk[cc] * a.scale);
      dqkv[(base + key) * a.ld + a.v_off + g * D + sub + 4 * cc] = b(dv[cc]);
    }
  }
}
}  // namespace attn

// min(*rows_dev, bound) when the rows live on the device, else bound
__device__ __forceinline__ int64_t rows_of(const int* rows_dev, int64_t bound) {
  if (!rows_dev) return bound;
  const int64_t r = *rows_dev;
  return r < bound ? (r < 0 ? 0 : r) : bound;
}

__global__ void swiglu_fwd_kernel(const bf16* __restrict__ gu, bf16* __restrict__ act, int64_t T, int F,
                                  const int* rows_dev) {
  const int64_t n = rows_of(rows_dev, T) * F;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < n; idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = idx / F;
    const int j = int(idx % F);
    const float z = f(gu[t * 2 * F + j]), u = f(gu[t * 2 * F + F + j]);
    act[idx] = b(z / (1.f + __expf(-z)) * u);
  }
}
__global__ void swiglu_bwd_kernel(const bf16* __restrict__ gu, const bf16* __restrict__ dact, bf16* __restrict__ dgu,
                                  int64_t T, int F, const int* rows_dev) {
  const int64_t n = rows_of(rows_dev, T) * F;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < n; idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = idx / F;
    const int j = int(idx % F);
    const float z = f(gu[t * 2 * F + j]), u = f(gu[t * 2 * F + F + j]), da = f(dact[idx]);
    const float sg = 1.f / (1.f + __expf(-z));
    dgu[t * 2 * F + j] = b(da * u * sg * (1.f + z * (1.f - sg)));
    dgu[t * 2 * F + F + j] = b(da * z * sg);
  }
}

__global__ void add_kernel(const bf16* a, const bf16* bb, bf16* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = b(f(a[i]) + f(bb[i]));
}
__global__ void add_f32_kernel(const float* a, const float* bb, float* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = a[i] + bb[i];
}

// ---- MoE
// one warp per (t, e)
__global__ void router_fwd_kernel(const bf16* __restrict__ h, const bf16* __restrict__ wr, float* __restrict__ logits,
                                  int64_t T, int H, int E) {
  const int64_t warp = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= T * E) return;
  const int64_t t = warp / E;
  const int e = int(warp % E);
  float s = 0;
  for (int j = lane; j < H; j += 32) s += f(h[t * H + j]) * f(wr[int64_t(j) * E + e]);
  for (int w = 16; w; w >>= 1) s += __shfl_xor_sync(0xffffffffu, s, w);
  if (lane == 0) logits[warp] = s;
}

constexpr int kMaxK = 8;
__global__ void topk_kernel(const float* __restrict__ logits, int* __restrict__ route, float* __restrict__ prob,
                            int64_t T, int E, int K) {
  const int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (t >= T) return;
  const float* lt = logits + t * E;
  int sel[kMaxK];
  float val[kMaxK];
  for (int k = 0; k < K; ++k) {
    int best = -1;
    float bv = -INFINITY;
    for (int e = 0; e < E; ++e) {
      bool taken = false;
      for (int j = 0; j < k; ++j) taken |= sel[j] == e;
      if (!taken && (best < 0 || lt[e] > bv)) best = e, bv = lt[e];
    }
    sel[k] = best, val[k] = bv;
  }
  float sum = 0;
  for (int k = 0; k < K; ++k) sum += __expf(val[k] - val[0]);
  for (int k = 0; k < K; ++k) {
    route[t * K + k] = sel[k];
    prob[t * K + k] = __expf(val[k] - val[0]) / sum;
  }
}

constexpr int kRouteThreads = 256;
// Block e: counts its entries, then (after a grid-wide pass in the next kernel) assigns stable positions.
__global__ void expert_count_kernel(const int* __restrict__ route, float* __restrict__ counts, int64_t n) {
  using Reduce = cub::BlockReduce<int, kRouteThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  const int e = blockIdx.x;
  int c = 0;
  for (int64_t i = threadIdx.x; i < n; i += kRouteThreads) c += route[i] == e;
  const int tot = Reduce(tmp).Sum(c);
  if (threadIdx.x == 0) counts[e] = float(tot);
}
// cap == 0: pos = the dropless expert-major position; cap > 0: e·cap + rank below cap, else -1 (dropped).
__global__ void expert_position_kernel(const int* __restrict__ route, const float* __restrict__ counts,
                                       int* __restrict__ pos, int64_t n, int cap) {
  using Scan = cub::BlockScan<int, kRouteThreads>;
  __shared__ typename Scan::TempStorage tmp;
  __shared__ int carry;
  const int e = blockIdx.x;
  if (threadIdx.x == 0) {
    int off = 0;
    for (int j = 0; j < e; ++j) off += int(counts[j]);
    carry = cap > 0 ? 0 : off;
  }
  __syncthreads();
  for (int64_t i0 = 0; i0 < n; i0 += kRouteThreads) {
    const int64_t i = i0 + threadIdx.x;
    const int flag = i < n && route[i] == e;
    int rank, total;
    Scan(tmp).ExclusiveSum(flag, rank, total);
    if (flag) pos[i] = cap == 0 ? carry + rank : carry + rank < cap ? e * cap + carry + rank : -1;
    __syncthreads();
    if (threadIdx.x == 0) carry += total;
    __syncthreads();
  }
}
// send[pos[i]] = h[i / K]
__global__ void permute_rows_kernel(const bf16* __restrict__ h, const int* __restrict__ pos, bf16* __restrict__ send,
                                    int K, int H) {
  const int64_t i = blockIdx.x;
  if (pos[i] < 0) return;  // dropped by the capacity
  const bf16* src = h + (i / K) * H;
  bf16* dst = send + int64_t(pos[i]) * H;
  for (int j = threadIdx.x; j < H; j += blockDim.x) dst[j] = src[j];
}
// block per slot row e·cap + j: zero when j >= counts[e]
__global__ void zero_padding_kernel(const float* __restrict__ counts, bf16* __restrict__ rows, int64_t cap, int H) {
  const int64_t r = blockIdx.x, e = r / cap, j = r - e * cap;
  if (j < int64_t(counts[e])) return;
  for (int c = threadIdx.x; c < H; c += blockDim.x) rows[r * H + c] = b(0.f);
}
__global__ void capacity_maps_kernel(int* __restrict__ sort_map, int* __restrict__ unsort_map, int tp, int El,
                                     int64_t cap) {
  const int64_t n = int64_t(tp) * El * cap;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = ::braid::model::detail::capacity_receive_row(i, tp, El, cap);
    sort_map[i] = int(r);
    unsort_map[r] = int(i);
  }
}
__global__ void gather_rows_kernel(const bf16* __restrict__ src, bf16* __restrict__ dst, const int* __restrict__ map,
                                   int H, const int* rows_dev, int64_t bound) {
  // One block per row; with the rows on the device a capped grid strides over them (no idle blocks past R).
  const int64_t rows = rows_dev ? rows_of(rows_dev, bound) : int64_t(gridDim.x);
  for (int64_t i = blockIdx.x; i < rows; i += gridDim.x) {
    const bf16* s = src + int64_t(map[i]) * H;
    for (int j = threadIdx.x; j < H; j += blockDim.x) dst[i * H + j] = s[j];
  }
}
// The device layout (moe_device_layout). Every block derives the (source, local expert) blocks' starts in both
// layouts from counts_all in shared memory — receive order [src][e], sorted order [e][src] — then the grid fills the
// maps; block 0 also writes the matrix, the rows per expert and R.
constexpr int kLayoutBlocks = 1024;  // tp x El blocks at most
constexpr int kLayoutThreads = 256;
constexpr int kLayoutGrid = 264;     // 2 waves of 132 SMs; the maps are a few thousand rows
__global__ void __launch_bounds__(kLayoutThreads) moe_layout_kernel(const float* __restrict__ counts_all, int tp, int me,
                                                                   int El, int* __restrict__ layout,
                                                                   int* __restrict__ sort_map,
                                                                   int* __restrict__ unsort_map, int64_t Rmax) {
  __shared__ int sorted_start[kLayoutBlocks + 1];  // block b = e·tp + src, sorted order
  __shared__ int recv_start[kLayoutBlocks];        // receive row where (src, e) starts: index e·tp + src too
  __shared__ int total;
  const int E = tp * El, nb = tp * El;
  auto rcnt = [&](int src, int e) { return int(counts_all[int64_t(src) * E + int64_t(me) * El + e]); };
  if (threadIdx.x == 0) {
    int acc = 0;
    for (int src = 0; src < tp; ++src)
      for (int e = 0; e < El; ++e) recv_start[e * tp + src] = acc, acc += rcnt(src, e);
    acc = 0;
    for (int e = 0; e < El; ++e)
      for (int src = 0; src < tp; ++src) sorted_start[e * tp + src] = acc, acc += rcnt(src, e);
    sorted_start[nb] = acc;
    total = acc;
  }
  __syncthreads();
  const int R = total;
  if (R > Rmax) {  // cannot happen for the layer's own counts (Rmax is the worst case)
    if (blockIdx.x == 0 && threadIdx.x == 0) layout[int64_t(tp) * tp + El] = 0;
    __trap();
  }
  if (blockIdx.x == 0) {
    for (int i = threadIdx.x; i < tp * tp; i += blockDim.x) {
      const int src = i / tp, dst = i % tp;
      int rows = 0;
      for (int e = 0; e < El; ++e) rows += int(counts_all[int64_t(src) * E + int64_t(dst) * El + e]);
      layout[i] = rows;
    }
    for (int e = threadIdx.x; e < El; e += blockDim.x) layout[tp * tp + e] = sorted_start[(e + 1) * tp] - sorted_start[e * tp];
    if (threadIdx.x == 0) layout[tp * tp + El] = R;
  }
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < R; i += gridDim.x * blockDim.x) {
    int lo = 0, hi = nb - 1;  // the last block whose start is <= i
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (sorted_start[mid] <= i) lo = mid;
      else hi = mid - 1;
    }
    const int r = recv_start[lo] + (i - sorted_start[lo]);
    sort_map[i] = r;
    unsort_map[r] = i;
  }
}

__global__ void combine_kernel(const bf16* __restrict__ x1, const bf16* __restrict__ ret, const int* __restrict__ pos,
                               const float* __restrict__ prob, bf16* __restrict__ y, int K, int H) {
  const int64_t t = blockIdx.x;
  for (int j = threadIdx.x; j < H; j += blockDim.x) {
    float v = f(x1[t * H + j]);
    for (int k = 0; k < K; ++k)
      if (pos[t * K + k] >= 0) v += prob[t * K + k] * f(ret[int64_t(pos[t * K + k]) * H + j]);
    y[t * H + j] = b(v);
  }
}
__global__ void combine_bwd_kernel(const bf16* __restrict__ dy, const bf16* __restrict__ ret,
                                   const int* __restrict__ pos, const int* __restrict__ route,
                                   const float* __restrict__ prob, bf16* __restrict__ dret,
                                   float* __restrict__ dlogits, int K, int E, int H) {
  using Reduce = cub::BlockReduce<float, kRouteThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  __shared__ float dp[kMaxK];
  const int64_t t = blockIdx.x;
  for (int k = 0; k < K; ++k) {
    const int64_t row = pos[t * K + k];
    const float p = prob[t * K + k];
    float s = 0;
    for (int j = threadIdx.x; row >= 0 && j < H; j += kRouteThreads) {  // row < 0: dropped, dp = 0
      const float g = f(dy[t * H + j]);
      s += g * f(ret[row * H + j]);
      dret[row * H + j] = b(p * g);
    }
    const float tot = Reduce(tmp).Sum(s);
    if (threadIdx.x == 0) dp[k] = tot;
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    float avg = 0;
    for (int k = 0; k < K; ++k) avg += prob[t * K + k] * dp[k];
    for (int e = 0; e < E; ++e) dlogits[t * E + e] = 0.f;
    for (int k = 0; k < K; ++k) dlogits[t * E + route[t * K + k]] = prob[t * K + k] * (dp[k] - avg);
  }
}
__global__ void route_bwd_kernel(const bf16* __restrict__ drow, const int* __restrict__ pos,
                                 const float* __restrict__ dlogits, const bf16* __restrict__ wr, bf16* __restrict__ dh,
                                 int K, int E, int H) {
  const int64_t t = blockIdx.x;
  for (int j = threadIdx.x; j < H; j += blockDim.x) {
    float v = 0;
    for (int k = 0; k < K; ++k)
      if (pos[t * K + k] >= 0) v += f(drow[int64_t(pos[t * K + k]) * H + j]);
    for (int e = 0; e < E; ++e) v += dlogits[t * E + e] * f(wr[int64_t(j) * E + e]);
    dh[t * H + j] = b(v);
  }
}
// dwr[H, E] (fp32) = h[T, H]^T · dl[T, E], deterministic. A block owns kCols columns j of h (one per lane:
// a warp reads kCols contiguous bf16 of a token's row) and every token: warp w sums tokens w, w + kWarps, ...,
// kUnroll tokens' loads in flight at once; the warps' partial sums are then added in warp order (the same
// bits every run, whatever the schedule). Experts in groups of kE (registers). The thread-per-(j, e) kernel
// it replaces read h 32 times over with 8-byte warp accesses: 177 us for Mixtral's [4096, 4096] h on an
// H200, 425 us inside a stack pass where h is cold (bench strands --op-trace).
namespace router_wgrad_cfg {
constexpr int kCols = 32, kWarps = 16, kE = 8, kUnroll = 8;
constexpr int kThreads = kWarps * 32;
static_assert(kE * kCols <= kThreads, "router_wgrad: the final sum needs a thread per (expert, column)");
static_assert(sizeof(float) * kWarps * kE * kCols <= 48 * 1024, "router_wgrad: partial sums exceed static smem");
}  // namespace router_wgrad_cfg
__global__ void __launch_bounds__(router_wgrad_cfg::kThreads)
    router_wgrad_kernel(const bf16* __restrict__ h, const float* __restrict__ dl, float* __restrict__ dwr, int64_t T,
                        int H, int E) {
  using namespace router_wgrad_cfg;
  __shared__ float part[kWarps][kE][kCols];  // [warp, expert of the group, column]
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  const int j = blockIdx.x * kCols + lane;
  for (int e0 = 0; e0 < E; e0 += kE) {
    const int ne = min(kE, E - e0);
    float acc[kE];
#pragma unroll
    for (int e = 0; e < kE; ++e) acc[e] = 0.f;
    if (j < H) {
      for (int64_t t0 = w; t0 < T; t0 += int64_t(kWarps) * kUnroll) {
        float x[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int64_t t = t0 + int64_t(u) * kWarps;
          x[u] = t < T ? f(h[t * H + j]) : 0.f;
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int64_t t = t0 + int64_t(u) * kWarps;
          if (t >= T) break;
          const float* d = dl + t * E + e0;
#pragma unroll
          for (int e = 0; e < kE; ++e)
            if (e < ne) acc[e] += x[u] * __ldg(d + e);
        }
      }
    }
#pragma unroll
    for (int e = 0; e < kE; ++e) part[w][e][lane] = acc[e];
    __syncthreads();
    if (threadIdx.x < kE * kCols) {
      const int e = threadIdx.x / kCols, c = threadIdx.x % kCols, jj = blockIdx.x * kCols + c;
      if (e < ne && jj < H) {
        float s = 0.f;
        for (int q = 0; q < kWarps; ++q) s += part[q][e][c];
        dwr[int64_t(jj) * E + e0 + e] = s;
      }
    }
    __syncthreads();
  }
}

__global__ void fill_uniform_kernel(bf16* p, size_t n, uint64_t seed, float lo, float hi) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint64_t z = seed * 0x9E3779B97F4A7C15ULL + i * 0xBF58476D1CE4E5B9ULL + 1;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    p[i] = b(lo + (hi - lo) * float(z >> 40) * (1.0f / 16777216.0f));
  }
}
__global__ void to_float_kernel(const bf16* in, float* out, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    out[i] = f(in[i]);
}

template <int D>
void attention_fwd_d(const bf16* qkv, bf16* o, float* lse, const AttnShape& a, cudaStream_t s) {
  using C = attn::config<D>;
  BRAID_CUDA_CHECK(cudaFuncSetAttribute(attn::fwd_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(C::fwd_smem)));
  dim3 grid((a.S + attn::kB - 1) / attn::kB, a.hq, a.B);
  attn::fwd_kernel<D><<<grid, attn::kThreads, C::fwd_smem, s>>>(qkv, o, lse, a);
  BRAID_CHECK_LAUNCH();
}
template <int D>
void attention_bwd_d(const bf16* qkv, const bf16* dout, const float* lse, const float* delta, bf16* dqkv,
                     const AttnShape& a, cudaStream_t s) {
  using C = attn::config<D>;
  BRAID_CUDA_CHECK(cudaFuncSetAttribute(attn::dq_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(C::dq_smem)));
  BRAID_CUDA_CHECK(cudaFuncSetAttribute(attn::dkv_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(C::dkv_smem)));
  const int tiles = (a.S + attn::kB - 1) / attn::kB;
  attn::dq_kernel<D><<<dim3(tiles, a.hq, a.B), attn::kThreads, C::dq_smem, s>>>(qkv, dout, lse, delta, dqkv, a);
  BRAID_CHECK_LAUNCH();
  attn::dkv_kernel<D><<<dim3(tiles, a.hkv, a.B), attn::kThreads, C::dkv_smem, s>>>(qkv, dout, lse, delta, dqkv, a);
  BRAID_CHECK_LAUNCH();
}

}  // namespace

// ================================================================ launchers
void rmsnorm_fwd(const bf16* x, const bf16* add, bf16* sum_out, const bf16* g, bf16* y, float* rstd, int64_t T, int H,
                 float eps, cudaStream_t s) {
  BRAID_REQUIRE(T <= 0x7fffffff, "rmsnorm: too many rows");
  BRAID_REQUIRE(!add || sum_out, "rmsnorm: a residual add needs sum_out");
  if (T == 0) return;
  rmsnorm_fwd_kernel<<<unsigned(T), kNormThreads, 0, s>>>(x, add, sum_out, g, y, rstd, H, eps);
  BRAID_CHECK_LAUNCH();
}

void rmsnorm_bwd(const bf16* x, const bf16* g, const float* rstd, const bf16* dy, const bf16* resid, bf16* dx,
                 float* dg, float* partial, int chunks, int64_t T, int H, cudaStream_t s) {
  BRAID_REQUIRE(chunks >= norm_chunks(T), "rmsnorm_bwd: partial buffer too small");
  if (T == 0) return;
  rmsnorm_bwd_dx_kernel<<<unsigned(T), kNormThreads, 0, s>>>(x, g, rstd, dy, resid, dx, H);
  BRAID_CHECK_LAUNCH();
  const int nc = norm_chunks(T);
  rmsnorm_dg_partial_kernel<<<dim3((H + 255) / 256, nc), 256, 0, s>>>(x, rstd, dy, partial, T, H);
  BRAID_CHECK_LAUNCH();
  sum_chunks_kernel<<<(H + 255) / 256, 256, 0, s>>>(partial, dg, nc, H);
  BRAID_CHECK_LAUNCH();
}

void rope(bf16* a, int64_t T, int ld, int nheads, int d, int S, float theta, bool inverse, cudaStream_t s) {
  BRAID_REQUIRE(d % 2 == 0, "rope: head_dim must be even");
  const int64_t n = T * nheads * (d / 2);
  if (n == 0) return;
  rope_kernel<<<blocks_for(n, 256), 256, 0, s>>>(a, T, ld, nheads, d, S, theta, inverse);
  BRAID_CHECK_LAUNCH();
}

#define BRAID_ATTN_DISPATCH(d, CALL)                                                   \
  switch (d) {                                                                        \
    case 16: { constexpr int D = 16; CALL; break; }                                   \
    case 32: { constexpr int D = 32; CALL; break; }                                   \
    case 64: { constexpr int D = 64; CALL; break; }                                   \
    case 128: { constexpr int D = 128; CALL; break; }                                 \
    default: BRAID_REQUIRE(false, "attention: head_dim must be 16, 32, 64 or 128");   \
  }

void attention_fwd(const bf16* qkv, bf16* o, float* lse, const AttnShape& a, cudaStream_t s) {
  BRAID_REQUIRE(a.hq % a.hkv == 0, "attention: hq must be a multiple of hkv");
  BRAID_ATTN_DISPATCH(a.d, (attention_fwd_d<D>(qkv, o, lse, a, s)));
}

void attention_bwd(const bf16* qkv, const bf16* o, const bf16* dout, const float* lse, float* delta, bf16* dqkv,
                   const AttnShape& a, cudaStream_t s) {
  BRAID_REQUIRE(a.hq % a.hkv == 0, "attention: hq must be a multiple of hkv");
  const int64_t rows = int64_t(a.B) * a.hq * a.S;
  attn::delta_kernel<<<blocks_for(rows * 32, 256, 0x7fffffff), 256, 0, s>>>(o, dout, delta, a);
  BRAID_CHECK_LAUNCH();
  BRAID_ATTN_DISPATCH(a.d, (attention_bwd_d<D>(qkv, dout, lse, delta, dqkv, a, s)));
}

// With the rows on the device (T a bound) the grid-stride kernels get a capped grid: a grid sized for the bound
// spent ~160 us per call on Mixtral's expert SwiGLU launching blocks that found nothing to do (R ~ Rmax / 2 at EP = 2).
constexpr int kDeviceRowsGrid = 132 * 16;
static int grid_for(int64_t n, const int* rows_dev) {
  const int g = blocks_for(n, 256);
  return rows_dev ? std::min(g, kDeviceRowsGrid) : g;
}

void swiglu_fwd(const bf16* gu, bf16* act, int64_t T, int F, cudaStream_t s, const int* rows_dev) {
  if (T * F == 0) return;
  swiglu_fwd_kernel<<<grid_for(T * F, rows_dev), 256, 0, s>>>(gu, act, T, F, rows_dev);
  BRAID_CHECK_LAUNCH();
}
void swiglu_bwd(const bf16* gu, const bf16* dact, bf16* dgu, int64_t T, int F, cudaStream_t s, const int* rows_dev) {
  if (T * F == 0) return;
  swiglu_bwd_kernel<<<grid_for(T * F, rows_dev), 256, 0, s>>>(gu, dact, dgu, T, F, rows_dev);
  BRAID_CHECK_LAUNCH();
}
void add(const bf16* a, const bf16* bb, bf16* y, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  add_kernel<<<blocks_for(n, 256), 256, 0, s>>>(a, bb, y, n);
  BRAID_CHECK_LAUNCH();
}
void add_f32(const float* a, const float* bb, float* y, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  add_f32_kernel<<<blocks_for(n, 256), 256, 0, s>>>(a, bb, y, n);
  BRAID_CHECK_LAUNCH();
}

void router_fwd(const bf16* h, const bf16* wr, float* logits, int64_t T, int H, int E, cudaStream_t s) {
  if (T == 0) return;
  router_fwd_kernel<<<blocks_for(T * E * 32, 256, 0x7fffffff), 256, 0, s>>>(h, wr, logits, T, H, E);
  BRAID_CHECK_LAUNCH();
}
void topk(const float* logits, int* route, float* prob, int64_t T, int E, int K, cudaStream_t s) {
  BRAID_REQUIRE(K >= 1 && K <= kMaxK && K <= E, "topk: need 1 <= top_k <= min(8, experts)");
  if (T == 0) return;
  topk_kernel<<<blocks_for(T, 128, 0x7fffffff), 128, 0, s>>>(logits, route, prob, T, E, K);
  BRAID_CHECK_LAUNCH();
}
void route_permute(const int* route, float* counts, int* pos, const bf16* h, bf16* send, int64_t T, int K, int E,
                   int H, cudaStream_t s, int64_t cap) {
  const int64_t n = T * K;
  BRAID_REQUIRE(n < (int64_t(1) << 24), "route_permute: counts are exchanged as fp32 (exact below 2^24)");
  BRAID_REQUIRE(cap >= 0 && int64_t(E) * cap < (int64_t(1) << 31), "route_permute: capacity slots fit an int");
  expert_count_kernel<<<E, kRouteThreads, 0, s>>>(route, counts, n);
  BRAID_CHECK_LAUNCH();
  if (cap > 0) route_zero_padding(counts, send, E, cap, H, s);
  if (n == 0) return;
  expert_position_kernel<<<E, kRouteThreads, 0, s>>>(route, counts, pos, n, int(cap));
  BRAID_CHECK_LAUNCH();
  permute_rows_kernel<<<unsigned(n), 256, 0, s>>>(h, pos, send, K, H);
  BRAID_CHECK_LAUNCH();
}
void capacity_maps(int* sort_map, int* unsort_map, int tp, int El, int64_t cap, cudaStream_t s) {
  const int64_t n = int64_t(tp) * El * cap;
  if (n == 0) return;
  BRAID_REQUIRE(n < (int64_t(1) << 31), "capacity_maps: rows fit an int");
  capacity_maps_kernel<<<blocks_for(n, 256), 256, 0, s>>>(sort_map, unsort_map, tp, El, cap);
  BRAID_CHECK_LAUNCH();
}
void route_zero_padding(const float* counts, bf16* rows, int E, int64_t cap, int H, cudaStream_t s) {
  if (E == 0 || cap == 0) return;
  zero_padding_kernel<<<unsigned(E * cap), 256, 0, s>>>(counts, rows, cap, H);
  BRAID_CHECK_LAUNCH();
}
void gather_rows(const bf16* src, bf16* dst, const int* map, int64_t rows, int H, cudaStream_t s, const int* rows_dev) {
  if (rows == 0) return;
  const unsigned grid = rows_dev ? unsigned(std::min<int64_t>(rows, kDeviceRowsGrid)) : unsigned(rows);
  gather_rows_kernel<<<grid, 256, 0, s>>>(src, dst, map, H, rows_dev, rows);
  BRAID_CHECK_LAUNCH();
}
void moe_device_layout(const float* counts_all, int tp, int me, int El, int* layout, int* sort_map, int* unsort_map,
                       int64_t Rmax, cudaStream_t s) {
  BRAID_REQUIRE(tp >= 1 && El >= 1 && int64_t(tp) * El <= kLayoutBlocks, "moe_device_layout: tp x local experts <= 1024");
  BRAID_REQUIRE(Rmax < (int64_t(1) << 31), "moe_device_layout: rows fit an int");
  moe_layout_kernel<<<kLayoutGrid, kLayoutThreads, 0, s>>>(counts_all, tp, me, El, layout, sort_map, unsort_map, Rmax);
  BRAID_CHECK_LAUNCH();
}
void combine(const bf16* x1, const bf16* ret, const int* pos, const float* prob, bf16* y, int64_t T, int K, int H,
             cudaStream_t s) {
  if (T == 0) return;
  combine_kernel<<<unsigned(T), 256, 0, s>>>(x1, ret, pos, prob, y, K, H);
  BRAID_CHECK_LAUNCH();
}
void combine_bwd(const bf16* dy, const bf16* ret, const int* pos, const int* route, const float* prob, bf16* dret,
                 float* dlogits, int64_t T, int K, int E, int H, cudaStream_t s) {
  BRAID_REQUIRE(K <= kMaxK, "combine_bwd: top_k <= 8");
  if (T == 0) return;
  combine_bwd_kernel<<<unsigned(T), kRouteThreads, 0, s>>>(dy, ret, pos, route, prob, dret, dlogits, K, E, H);
  BRAID_CHECK_LAUNCH();
}
void route_bwd(const bf16* drow, const int* pos, const float* dlogits, const bf16* wr, bf16* dh, int64_t T, int K,
               int E, int H, cudaStream_t s) {
  if (T == 0) return;
  route_bwd_kernel<<<unsigned(T), 256, 0, s>>>(drow, pos, dlogits, wr, dh, K, E, H);
  BRAID_CHECK_LAUNCH();
}
void router_wgrad(const bf16* h, const float* dlogits, float* dwr, int64_t T, int H, int E, cudaStream_t s) {
  if (H == 0 || E == 0) return;
  using router_wgrad_cfg::kCols;
  router_wgrad_kernel<<<(H + kCols - 1) / kCols, router_wgrad_cfg::kThreads, 0, s>>>(h, dlogits, dwr, T, H, E);
  BRAID_CHECK_LAUNCH();
}

void fill_uniform(bf16* p, size_t n, uint64_t seed, float lo, float hi, cudaStream_t s) {
  if (n == 0) return;
  fill_uniform_kernel<<<blocks_for(int64_t(n), 256), 256, 0, s>>>(p, n, seed, lo, hi);
  BRAID_CHECK_LAUNCH();
}
void to_float(const bf16* in, float* out, size_t n, cudaStream_t s) {
  if (n == 0) return;
  to_float_kernel<<<blocks_for(int64_t(n), 256), 256, 0, s>>>(in, out, n);
  BRAID_CHECK_LAUNCH();
}

}  // namespace braid::model::kernels
