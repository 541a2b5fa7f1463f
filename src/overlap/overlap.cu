// overlap.cu — FlashOverlap orchestration: counters, the comm stream's waits (cuStreamWaitValue32 from
// the driver entry point, or a bounded spin kernel), NCCL per wave group, the consumers with the
// inverse reordering fused (RMSNorm), and the baselines (cuBLAS + NCCL sequential, decomposition).
#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "braid/bench.hpp"
#include "braid/env.hpp"
#include "braid/errors.hpp"
#include "braid/overlap.hpp"
#include "braid/overlap/verify.hpp"
#include "braid/quant.hpp"
#include "braid/runtime.hpp"
#include "comm_wait.cuh"

namespace braid::overlap {

// =============================================== kernels ===============================================
namespace {

using detail::WaitError;
using detail::wait_value_entry_point;

// RMSNorm over rows gathered through the slot table. Row j of the output reads, for each column block nb,
// BN contiguous elements at x[(slot(mb, nb) * rows_per_tile + rr) * BN], mb = j / rows_per_tile,
// rr = j % rows_per_tile (rows_per_tile = BM / parts); with `normal` (Mapping::normal), row j of x is
// x[j * N ... j * N + N). 16-byte accesses; N % 8 == 0, BN % 8 == 0.
constexpr int kNormThreads = 256;
// The 16-byte vector v (columns 8v..8v+7) of row rr of m-block mb in the tile-scattered x (slot table as above).
__device__ __forceinline__ const uint4* scattered_vec(const __nv_bfloat16* x, const int32_t* tile_slot, int mb, int rr,
                                                      int v, int bn, int tiles_n, int rows_per_tile) {
  const int col = v * 8, nb = col / bn, c = col % bn;
  const int64_t s = tile_slot[mb * tiles_n + nb];
  return reinterpret_cast<const uint4*>(x + (s * rows_per_tile + rr) * bn + c);
}
__global__ void __launch_bounds__(kNormThreads) rmsnorm_gather_kernel(const __nv_bfloat16* __restrict__ x,
                                                                      const __nv_bfloat16* __restrict__ gamma,
                                                                      __nv_bfloat16* __restrict__ y,
                                                                      const int32_t* __restrict__ tile_slot, int n,
                                                                      int bn, int tiles_n, int rows_per_tile,
                                                                      float eps, int normal) {
  const int64_t j = blockIdx.x;
  const int mb = static_cast<int>(j / rows_per_tile), rr = static_cast<int>(j % rows_per_tile);
  const int vecs = n / 8;
  auto src = [&](int v) -> const uint4* {
    if (normal) return reinterpret_cast<const uint4*>(x + j * n) + v;  // Mapping::normal: row j is contiguous
    return scattered_vec(x, tile_slot, mb, rr, v, bn, tiles_n, rows_per_tile);
  };
  float ss = 0.f;
  for (int v = threadIdx.x; v < vecs; v += kNormThreads) {
    const uint4 u = *src(v);
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __bfloat1622float2(h[i]);
      ss += f.x * f.x + f.y * f.y;
    }
  }
  __shared__ float red[kNormThreads / 32];
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = ss;
  __syncthreads();
  float tot = 0.f;
#pragma unroll
  for (int i = 0; i < kNormThreads / 32; ++i) tot += red[i];
  const float inv = rsqrtf(tot / static_cast<float>(n) + eps);
  for (int v = threadIdx.x; v < vecs; v += kNormThreads) {
    const uint4 u = *src(v);
    const uint4 g = reinterpret_cast<const uint4*>(gamma)[v];
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
    const __nv_bfloat162* gg = reinterpret_cast<const __nv_bfloat162*>(&g);
    uint4 o;
    __nv_bfloat162* oo = reinterpret_cast<__nv_bfloat162*>(&o);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __bfloat1622float2(h[i]);
      const float2 w = __bfloat1622float2(gg[i]);
      oo[i] = __floats2bfloat162_rn(f.x * inv * w.x, f.y * inv * w.y);
    }
    reinterpret_cast<uint4*>(y + j * n)[v] = o;
  }
}

// Row j of y (N contiguous elements) gathered from the tile-scattered x, as rmsnorm_gather_kernel reads it.
__global__ void gather_rows_kernel(const __nv_bfloat16* __restrict__ x, __nv_bfloat16* __restrict__ y,
                                   const int32_t* __restrict__ tile_slot, int n, int bn, int tiles_n,
                                   int rows_per_tile) {
  const int64_t j = blockIdx.x;
  const int mb = static_cast<int>(j / rows_per_tile), rr = static_cast<int>(j % rows_per_tile);
  for (int v = threadIdx.x; v < n / 8; v += blockDim.x)
    reinterpret_cast<uint4*>(y + j * n)[v] = *scattered_vec(x, tile_slot, mb, rr, v, bn, tiles_n, rows_per_tile);
}

__global__ void un_permute_rows_kernel(const uint4* __restrict__ src, uint4* __restrict__ dst, int64_t rows_per_rank,
                                       int vecs_per_row, int bm, int sub) {
  const int64_t dst_row = blockIdx.x;
  const int64_t mb = dst_row / bm, r = dst_row % bm, p = r / sub, rr = r % sub;
  const int64_t src_row = p * rows_per_rank + mb * sub + rr;
  for (int v = threadIdx.x; v < vecs_per_row; v += blockDim.x)
    dst[dst_row * vecs_per_row + v] = src[src_row * vecs_per_row + v];
}

__device__ __forceinline__ uint64_t mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}
__global__ void fill_uniform_kernel(__nv_bfloat16* p, size_t count, uint64_t seed, float scale) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x) {
    const uint64_t h = mix64(seed * 0x9e3779b97f4a7c15ULL + i);
    const float u = static_cast<float>(h >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    p[i] = __float2bfloat16_rn((2.f * u - 1.f) * scale);
  }
}
// x[i] (bf16) -> v[i] = x, a[i] = |x| (float32), the inputs of sum_reference's two all-reduces.
__global__ void split_abs_kernel(const __nv_bfloat16* __restrict__ x, float* __restrict__ v, float* __restrict__ a,
                                 size_t count) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x) {
    const float f = __bfloat162float(x[i]);
    v[i] = f;
    a[i] = fabsf(f);
  }
}

__global__ void fill_const_kernel(__nv_bfloat16* p, size_t count, float v) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x)
    p[i] = __float2bfloat16_rn(v);
}

// Copy-engine transports' reduction: out[i] = sum over q < world of src.p[q][i], in fp32, in rank order
// (so every rank that sums the same slices gets the same bits). 8 bf16 per 16-byte access; the slices
// are multiples of 8 elements. It streams world + 1 slices through HBM with nothing to compute, so it
// is bound by the loads in flight: each thread issues the loads of kSumUnroll vectors of every source
// before it adds (the first form, one vector per thread and 32 CTAs, had ~256 KB in flight, an estimated
// 0.2-0.3 TB/s, and was most of the transport's time: 2x H200, 8d01bed and 9e04529, docs/flashoverlap.md).
// NCCL's all-to-all puts the slices at src + q * chunk; the peer copy-engine transport reads its own
// slice in place, so the sources are pointers.
constexpr int kSumThreads = 256, kSumUnroll = 4, kMaxSumSources = 16;
struct SumSources {
  const uint4* p[kMaxSumSources];
};
__device__ __forceinline__ void add_bf16x8(float (&acc)[8], const uint4& u, bool first) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(h[i]);
    if (first) {
      acc[2 * i] = f.x, acc[2 * i + 1] = f.y;
    } else {
      acc[2 * i] += f.x, acc[2 * i + 1] += f.y;
    }
  }
}
__device__ __forceinline__ uint4 pack_bf16x8(const float (&acc)[8]) {
  uint4 o;
  __nv_bfloat162* oo = reinterpret_cast<__nv_bfloat162*>(&o);
#pragma unroll
  for (int i = 0; i < 4; ++i) oo[i] = __floats2bfloat162_rn(acc[2 * i], acc[2 * i + 1]);
  return o;
}
__global__ void __launch_bounds__(kSumThreads) sum_slices_kernel(const SumSources src, uint4* __restrict__ out,
                                                                 int64_t chunk_vecs, int world) {
  const int64_t stride = int64_t(gridDim.x) * kSumThreads;
  int64_t v = blockIdx.x * int64_t(kSumThreads) + threadIdx.x;
  // Whole rounds: kSumUnroll vectors per thread, stride apart (coalesced across the block).
  for (; v + (kSumUnroll - 1) * stride < chunk_vecs; v += kSumUnroll * stride) {
    float acc[kSumUnroll][8];
    uint4 a[kSumUnroll], b[kSumUnroll];
#pragma unroll
    for (int u = 0; u < kSumUnroll; ++u) a[u] = src.p[0][v + u * stride];
    if (world >= 2) {
#pragma unroll
      for (int u = 0; u < kSumUnroll; ++u) b[u] = src.p[1][v + u * stride];
    }
#pragma unroll
    for (int u = 0; u < kSumUnroll; ++u) add_bf16x8(acc[u], a[u], true);
    if (world >= 2) {
#pragma unroll
      for (int u = 0; u < kSumUnroll; ++u) add_bf16x8(acc[u], b[u], false);
    }
    for (int q = 2; q < world; ++q) {
#pragma unroll
      for (int u = 0; u < kSumUnroll; ++u) a[u] = src.p[q][v + u * stride];
#pragma unroll
      for (int u = 0; u < kSumUnroll; ++u) add_bf16x8(acc[u], a[u], false);
    }
#pragma unroll
    for (int u = 0; u < kSumUnroll; ++u) out[v + u * stride] = pack_bf16x8(acc[u]);
  }
  for (; v < chunk_vecs; v += stride) {  // the rest, one vector at a time (the same adds in the same order)
    float acc[8];
    add_bf16x8(acc, src.p[0][v], true);
    for (int q = 1; q < world; ++q) add_bf16x8(acc, src.p[q][v], false);
    out[v] = pack_bf16x8(acc);
  }
}
// Slices at base + q * chunk (NCCL's all-to-all layout).
SumSources strided_sources(const __nv_bfloat16* base, size_t chunk, int world) {
  SumSources s{};
  for (int q = 0; q < world; ++q) s.p[q] = reinterpret_cast<const uint4*>(base + size_t(q) * chunk);
  return s;
}

ncclDataType_t kBf16 = ncclBfloat16;

// The sum kernel's CTAs per SM at full occupancy (at least 1), and on every SM of the current device.
int sum_blocks_per_sm() {
  int per_sm = 0;
  BRAID_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, sum_slices_kernel, kSumThreads, 0));
  return std::max(1, per_sm);
}
int sum_ctas_all_sms() {
  int dev = 0, sms = 0;
  BRAID_CUDA_CHECK(cudaGetDevice(&dev));
  BRAID_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  return sum_blocks_per_sm() * sms;
}

}  // namespace

const char* transport_name(Transport t) {
  switch (t) {
    case Transport::kNcclCopyEngine: return "nccl-copy-engine";
    case Transport::kNcclSymmetric: return "nccl-symmetric";
    case Transport::kPeerCopyEngine: return "peer-copy-engine";
    case Transport::kPeerStores: return "peer-stores";
    default: return "nccl-kernels";
  }
}

// ============================================ verify helpers ============================================
void fill_uniform_bf16(void* p, size_t count, uint64_t seed, float scale, cudaStream_t s) {
  fill_uniform_kernel<<<1024, 256, 0, s>>>(static_cast<__nv_bfloat16*>(p), count, seed, scale);
  BRAID_CHECK_LAUNCH();
}
void fill_const_bf16(void* p, size_t count, float value, cudaStream_t s) {
  fill_const_kernel<<<1024, 256, 0, s>>>(static_cast<__nv_bfloat16*>(p), count, value);
  BRAID_CHECK_LAUNCH();
}
float bf16_to_float(uint16_t v) {
  const uint32_t u = uint32_t(v) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
std::vector<uint16_t> download_bf16(const void* p, size_t count) {
  std::vector<uint16_t> h(count);
  BRAID_CUDA_CHECK(cudaMemcpy(h.data(), p, count * 2, cudaMemcpyDeviceToHost));
  return h;
}
namespace {
// v[i] summed over the team's ranks, in place (host, MPI; int counts per call).
void host_allreduce_sum(Team& team, std::vector<float>& v) {
  for (size_t off = 0; off < v.size(); off += size_t(1) << 28) {
    const int n = static_cast<int>(std::min<size_t>(v.size() - off, size_t(1) << 28));
    BRAID_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, v.data() + off, n, MPI_FLOAT, MPI_SUM, team.mpi()));
  }
}
}  // namespace

SumRef sum_reference(Team& team, const void* d, size_t count, cudaStream_t s) {
  float* buf = nullptr;  // [2][count]: values, magnitudes
  BRAID_CUDA_CHECK(cudaMallocAsync(&buf, 2 * count * sizeof(float), s));
  split_abs_kernel<<<1024, 256, 0, s>>>(static_cast<const __nv_bfloat16*>(d), buf, buf + count, count);
  BRAID_CUDA_CHECK(cudaGetLastError());
  SumRef r;
  r.sum.resize(count);
  r.mag.resize(count);
  if (team.has_nccl()) BRAID_NCCL_CHECK(ncclAllReduce(buf, buf, 2 * count, ncclFloat32, ncclSum, team.nccl(), s));
  BRAID_CUDA_CHECK(cudaMemcpyAsync(r.sum.data(), buf, count * sizeof(float), cudaMemcpyDeviceToHost, s));
  BRAID_CUDA_CHECK(cudaMemcpyAsync(r.mag.data(), buf + count, count * sizeof(float), cudaMemcpyDeviceToHost, s));
  BRAID_CUDA_CHECK(cudaFreeAsync(buf, s));
  team.synchronize(s, "sum reference");
  if (!team.has_nccl()) {  // a shared-GPU team: the same float sums on the host, over MPI
    host_allreduce_sum(team, r.sum);
    host_allreduce_sum(team, r.mag);
  }
  return r;
}

void allgather_bf16(Team& team, const void* src, void* dst, size_t count, cudaStream_t s) {
  if (team.has_nccl()) {
    BRAID_NCCL_CHECK(ncclAllGather(src, dst, count, ncclBfloat16, team.nccl(), s));
    return;
  }
  team.synchronize(s, "all-gather reference (host)");
  const std::vector<uint16_t> mine = download_bf16(src, count);
  std::vector<uint16_t> all(count * team.size());
  BRAID_REQUIRE(count <= size_t(INT_MAX), "allgather_bf16: count beyond an MPI count");
  BRAID_MPI_CHECK(MPI_Allgather(mine.data(), int(count), MPI_UINT16_T, all.data(), int(count), MPI_UINT16_T,
                                team.mpi()));
  BRAID_CUDA_CHECK(cudaMemcpy(dst, all.data(), all.size() * 2, cudaMemcpyHostToDevice));
  // A pageable upload may return before its DMA lands, and `s` (non-blocking) does not wait for the legacy stream.
  BRAID_CUDA_CHECK(cudaDeviceSynchronize());
}

size_t count_mismatch(const SumRef& ref, const std::function<int64_t(int64_t)>& ref_index, int64_t count,
                      const std::vector<uint16_t>& test, const std::function<int64_t(int64_t)>& test_index, int world,
                      double atol, int64_t* first, double* max_err, std::string* detail) {
  size_t bad = 0;
  double mx = 0;
  if (first) *first = -1;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t r = ref_index(i), t = test_index(i);
    const bool in = r >= 0 && r < static_cast<int64_t>(ref.sum.size()) && t >= 0 &&
                    t < static_cast<int64_t>(test.size());
    const double v = in ? bf16_to_float(test[t]) : NAN, want = in ? ref.sum[r] : 0, mag = in ? ref.mag[r] : 0;
    const double e = std::fabs(v - want);
    if (!(e <= sum_tolerance(mag, world, atol))) {  // NaN counts as wrong
      if (!bad) {
        if (first) *first = i;
        if (detail) {
          char line[200];
          std::snprintf(line, sizeof line, "first at %lld: got %.6g, sum %.6g, magnitude %.6g, bound %.3g",
                        static_cast<long long>(i), v, want, mag, sum_tolerance(mag, world, atol));
          *detail = line;
        }
      }
      ++bad;
    }
    if (e > mx || e != e) mx = e;
  }
  if (max_err) *max_err = mx;
  return bad;
}

size_t count_mismatch(const std::vector<uint16_t>& ref, const std::vector<uint16_t>& test,
                      const std::function<int64_t(int64_t)>& index, double atol, double rtol, int64_t* first,
                      double* max_err) {
  size_t bad = 0;
  double mx = 0;
  if (first) *first = -1;
  for (int64_t i = 0; i < static_cast<int64_t>(ref.size()); ++i) {
    const int64_t t = index(i);
    if (t < 0 || t >= static_cast<int64_t>(test.size())) {
      if (!bad && first) *first = i;
      ++bad;
      continue;
    }
    const double r = bf16_to_float(ref[i]), v = bf16_to_float(test[t]);
    const double e = std::fabs(v - r);
    if (!(e <= atol + rtol * std::fabs(r))) {  // NaN counts as wrong
      if (!bad && first) *first = i;
      ++bad;
    }
    if (e > mx || e != e) mx = e;
  }
  if (max_err) *max_err = mx;
  return bad;
}

// =============================================== the op ================================================
GemmOverlap::GemmOverlap(Team& team, const OverlapOptions& opt) : team_(team), opt_(opt) {
  BRAID_REQUIRE(opt.m > 0 && opt.n > 0 && opt.k > 0, "GemmOverlap: empty shape");
  BRAID_REQUIRE(opt.transport != Transport::kPeerStores, "GemmOverlap: kPeerStores is GemmAllToAll's transport");
  int dev = 0, sms = 0;
  BRAID_CUDA_CHECK(cudaGetDevice(&dev));
  BRAID_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  int gemm_sms = std::max(8, sms - std::max(0, opt.reserve_sms));
  TileConfig cfg = opt.tile;
  std::vector<int> waves = opt.group_waves;
  sequential_ = opt.sequential;
  if (waves.empty() && opt.cache) {
    if (const CachedDecision* d = opt.cache->lookup(opt.coll, team.size(), opt.m, opt.n, opt.k)) {
      if (cfg == TileConfig::kAuto) cfg = static_cast<TileConfig>(d->tile_config);
      waves = d->group_waves;  // may not fit an unseen M: rescaled below
      sequential_ = sequential_ || d->sequential;
    }
  }
  if (cfg == TileConfig::kAuto) cfg = choose_tile_config(opt.m, opt.n, opt.k, gemm_sms);
  opt_.tile = cfg;
  if (opt.reserve_fit && opt.reserve_sms > 0 && sms - opt.reserve_sms >= 8) {  // no wave for the reserve
    opt_.reserve_sms = wave_fit_reserve(sms, opt.reserve_sms, 2, [&](int s) {
      return SignalGemm::plan_for(cfg, s, opt.m, opt.n, opt.k).num_waves();
    });
    gemm_sms = sms - opt_.reserve_sms;
  }
  gemm_ = std::make_unique<SignalGemm>(cfg, gemm_sms);
  const TileGrid grid = gemm_->plan(opt.m, opt.n, opt.k);
  const int parts = opt.coll == Collective::kReduceScatter ? team.size() : 1;
  BRAID_REQUIRE(grid.bm % parts == 0 && (grid.bm / parts) % 8 == 0, "GemmOverlap: too many ranks for the tile");
  // A cached partition for another M: keep its first groups, cut or extend the last to cover the waves.
  const int T = grid.num_waves();
  int sum = 0;
  std::vector<int> fit;
  for (int w : waves) {
    if (sum + w > T) break;
    fit.push_back(w);
    sum += w;
  }
  if (sum < T) {
    if (fit.empty()) fit.push_back(T - sum);
    else fit.back() += T - sum;
  }
  if (sequential_) {
    fit.assign(1, T);  // the fallback: one group of every wave
  } else if (waves.empty()) {
    fit = default_group_waves(T);  // no measurements
  }
  map_ = make_mapping(grid, fit, parts);
  map_.normal = sequential_;

  const size_t d_bytes = size_t(opt.m) * opt.n * 2;
  const bool peer = opt.transport == Transport::kPeerCopyEngine;
  const bool pull_last = peer && opt.coll == Collective::kReduceScatter && opt.peer_pull_last;
  BRAID_REQUIRE(!opt.peer_stores || (peer && opt.coll == Collective::kReduceScatter && !opt.peer_pull_last),
                "GemmOverlap: peer_stores is a reduce-scatter over kPeerCopyEngine, without peer_pull_last");
  const bool stores = peer && opt.peer_stores;
  if (peer && (opt.coll == Collective::kAllReduce || pull_last)) {
    // The peer copy-engine all-reduce pushes each reduced chunk into the peers' d_, and the pulled last group
    // is read from them: symmetric memory.
    if (!team.peer_ok())
      throw UnavailableError("FlashOverlap peer copy-engine transport: needs peer access between all ranks (" +
                                 team.peer_status() + ")",
                             __FILE__, __LINE__);
    peer_d_ = std::make_unique<SymmetricBuffer>(team, d_bytes);  // collective
    d_ = peer_d_->local();
  } else if (opt.transport == Transport::kNcclKernels || peer) {
    BRAID_CUDA_CHECK(cudaMalloc(&d_, d_bytes));
  } else {
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
    // Symmetric windows (collective: every rank registers the same sizes in the same order; group slices sit
    // at the same offsets on every rank, as the windows require) on the zero-CTA communicator (copy engines)
    // or on the team's (symmetric-memory kernels).
    const bool ce = opt.transport == Transport::kNcclCopyEngine, rs = opt.coll == Collective::kReduceScatter;
    ncclComm_t wc = ce ? team.nccl_zero_cta() : team.nccl();
    auto window = [&](void** p, std::unique_ptr<NcclWindow>& win, size_t bytes) {
      win = std::make_unique<NcclWindow>(wc, bytes);
      *p = win->get();
    };
    window(&d_, win_d_, d_bytes);
    if (ce) window(&recv_, win_recv_, d_bytes);             // the all-to-all's receive buffer
    if (!ce && rs) window(&sym_out_, win_out_, d_bytes / team.size());  // the reduce-scatter's output
    // The per-group reduction fills the SMs the GEMM leaves free (as many CTAs as one SM holds, each); the
    // last group's, which runs once the GEMM is done, may take every SM (run_copy_engine_group). With no SM
    // left free (the GEMM's CTAs fill every register file) every group's reduction waits for the GEMM's end,
    // so each may take every SM.
    if (ce) {
      const int per_sm = sum_blocks_per_sm();
      ce_comm_ = wc;
      reduce_ctas_last_ = per_sm * sms;
      reduce_ctas_ = opt_.reserve_sms > 0 ? per_sm * std::min(sms, opt_.reserve_sms) : reduce_ctas_last_;
    }
    // NCCL sets up its copy-engine state (a symmetric sync window: ncclMemAlloc + registration), and may set
    // up its symmetric runtime, at a communicator's first such collective, which fails inside a stream
    // capture (seen on the node: "unhandled cuda error" from a captured ncclAlltoAll). One eager call of
    // each collective run() uses, on a few elements, so run() can be captured.
    cudaStream_t warm = nullptr;
    BRAID_CUDA_CHECK(cudaStreamCreateWithFlags(&warm, cudaStreamNonBlocking));
    const size_t few = 64;  // elements per rank
    auto* dd = static_cast<__nv_bfloat16*>(d_);
    if (ce) {
      BRAID_NCCL_CHECK(ncclAlltoAll(dd, static_cast<__nv_bfloat16*>(recv_), few, kBf16, wc, warm));
      BRAID_NCCL_CHECK(ncclAllGather(dd + size_t(team.rank()) * few, dd, few, kBf16, wc, warm));
    } else if (rs) {
      BRAID_NCCL_CHECK(ncclReduceScatter(dd, sym_out_, few, kBf16, ncclSum, wc, warm));
    } else {
      BRAID_NCCL_CHECK(ncclAllReduce(dd, dd, few * team.size(), kBf16, ncclSum, wc, warm));
    }
    team.synchronize(warm, "FlashOverlap transport warm-up");
    BRAID_CUDA_CHECK(cudaStreamDestroy(warm));
#else
    throw UnavailableError(std::string("FlashOverlap transport ") + transport_name(opt.transport) +
                               ": needs NCCL >= 2.28",
                           __FILE__, __LINE__);
#endif
  }
  if (peer) {  // braid's own copy-engine pushes (no NCCL): receive buffer, flags, barrier slot, stream memops
    const int W = team.size();
    const char* what = "FlashOverlap peer copy-engine transport";
    if (!team.peer_ok())
      throw UnavailableError(std::string(what) + ": needs peer access between all ranks (" + team.peer_status() + ")",
                             __FILE__, __LINE__);
    BRAID_REQUIRE(W <= kMaxSumSources, "FlashOverlap peer copy-engine transport: at most 16 ranks");
    write_value_ = memops::required_entry_point("cuStreamWriteValue32", what);
    wait_value_ = memops::required_entry_point("cuStreamWaitValue32", what);
    peer_recv_ = std::make_unique<SymmetricBuffer>(team, d_bytes);                // collective
    peer_flags_ = std::make_unique<SymmetricBuffer>(team, 2 * size_t(T) * W * 4);  // collective
    BRAID_CUDA_CHECK(cudaMemset(peer_flags_->local(), 0, 2 * size_t(T) * W * 4));
    peer_slot_ = team.reserve_slots(1);
    // The flag reset and start barrier run on the comm stream beside the GEMM's first waves when the GEMM
    // leaves SMs free (its 32-thread block needs one), else before the GEMM. BRAID_OVERLAP_PEER_BARRIER=stream:
    // always before the GEMM (the first GPU-run form; for A/B runs).
    static const bool barrier_on_stream =
        env::choice("BRAID_OVERLAP_PEER_BARRIER", {"comm", "stream"}).value_or("comm") == "stream";
    // Pulling the last group from the peers' d_ needs the barrier before our GEMM rewrites d_ (see run()).
    // Stores: peers write our receive buffer from their GEMM's first tile on, so the barrier (after which they
    // may) runs before our GEMM too.
    peer_barrier_on_comm_ = opt_.reserve_sms > 0 && !barrier_on_stream && !pull_last && !stores;
    BRAID_CUDA_CHECK(cudaEventCreateWithFlags(&peer_ready_, cudaEventDisableTiming));
    peer_wait_flags_ = memops::remote_wait_flags();
    const int per_sm = sum_blocks_per_sm();  // the sums' CTAs, as for NCCL's copy engines above
    reduce_ctas_last_ = per_sm * sms;
    reduce_ctas_ = opt_.reserve_sms > 0 ? per_sm * std::min(sms, opt_.reserve_sms) : reduce_ctas_last_;
    if (stores) {  // the epilogue's tables: destinations per (group, part), filled by upload(); every rank's flags
      BRAID_CUDA_CHECK(cudaMalloc(&part_dst_, size_t(T) * W * sizeof(uint64_t)));
      BRAID_CUDA_CHECK(cudaMalloc(&part_flags_, size_t(W) * sizeof(uint32_t*)));
      std::vector<uint32_t*> f(static_cast<size_t>(W));
      for (int q = 0; q < W; ++q) f[size_t(q)] = peer_flags_->peer_as<uint32_t>(q);
      BRAID_CUDA_CHECK(cudaMemcpy(part_flags_, f.data(), f.size() * sizeof(uint32_t*), cudaMemcpyHostToDevice));
    }
  }
  const size_t tiles = grid.num_tiles();
  BRAID_CUDA_CHECK(cudaMalloc(&tables_, (3 * tiles + 2 * size_t(T) + 2) * sizeof(int32_t)));
  BRAID_CUDA_CHECK(cudaMalloc(&counters_, (size_t(T) + 1) * sizeof(uint32_t)));
  BRAID_CUDA_CHECK(cudaMemset(counters_, 0, (size_t(T) + 1) * sizeof(uint32_t)));
  BRAID_CUDA_CHECK(cudaStreamCreateWithFlags(&comm_, cudaStreamNonBlocking));
  BRAID_CUDA_CHECK(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming));
  BRAID_CUDA_CHECK(cudaEventCreateWithFlags(&join_, cudaEventDisableTiming));
  // BRAID_OVERLAP_CE_SUM_STREAM=0: the sums on the comm stream, in line with the all-to-alls (for A/B runs).
  static const bool sum_stream = env::flag("BRAID_OVERLAP_CE_SUM_STREAM").value_or(true);
  if ((ce_comm_ && opt.coll == Collective::kReduceScatter && sum_stream) || peer) {
    BRAID_CUDA_CHECK(cudaStreamCreateWithFlags(&sum_, cudaStreamNonBlocking));
    BRAID_CUDA_CHECK(cudaEventCreateWithFlags(&join_sum_, cudaEventDisableTiming));
    if (!peer) {
      a2a_done_.assign(size_t(T), nullptr);
      for (auto& e : a2a_done_) BRAID_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    }
  }
  if (opt.use_stream_wait_value && !peer) wait_value_ = wait_value_entry_point();
  void* err = nullptr;
  BRAID_CUDA_CHECK(cudaHostAlloc(&err, sizeof(WaitError), cudaHostAllocMapped));
  std::memset(err, 0, sizeof(WaitError));
  err_host_ = err;
  upload();
  if (sequential_) enter_fallback();
}

void GemmOverlap::make_fallback_resources() {
  if (!cublas_) cublas_ = std::make_unique<CublasGemm>();
  if (!fb_ && opt_.transport != Transport::kNcclKernels)
    BRAID_CUDA_CHECK(cudaMalloc(&fb_, size_t(opt_.m) * opt_.n * 2));
}

void GemmOverlap::enter_fallback() {
  const TileGrid& g = map_.grid;
  BRAID_REQUIRE(opt_.m == int64_t(g.tiles_m) * g.bm && opt_.n == int64_t(g.tiles_n) * g.bn,
                "GemmOverlap: the fallback's row-major layout needs M and N multiples of the tile");
  make_fallback_resources();
}

GemmOverlap::~GemmOverlap() {
  if (peer_flags_ && sum_) {
    // No-hang contract: the sums wait (stream memory operations, no timeout of their own) for flags that
    // peers raise; if the last run's sums have not finished within the timeout, a peer failed: release
    // this rank's flags so the stream drains (that run's output is garbage).
    if (!memops::wait_bounded([&] { return cudaStreamQuery(sum_); }, team_.options().timeout_s)) release_peer_flags();
  }
  if (comm_) cudaStreamSynchronize(comm_);
  if (sum_) cudaStreamSynchronize(sum_);
  if (win_d_) {  // symmetric windows: deregistration is collective, in the same order on every rank
    win_out_.reset();
    win_recv_.reset();
    win_d_.reset();
  } else if (!peer_d_) {  // peer_d_ (symmetric memory) is released with the object, collectively
    cudaFree(d_);
  }
  if (fb_) cudaFree(fb_);
  cudaFree(part_dst_);
  cudaFree(part_flags_);
  cudaFree(tables_);
  cudaFree(counters_);
  if (err_host_) cudaFreeHost(err_host_);
  if (fork_) cudaEventDestroy(fork_);
  if (join_) cudaEventDestroy(join_);
  if (comm_) cudaStreamDestroy(comm_);
  for (auto e : a2a_done_) cudaEventDestroy(e);
  if (join_sum_) cudaEventDestroy(join_sum_);
  if (peer_ready_) cudaEventDestroy(peer_ready_);
  if (sum_) cudaStreamDestroy(sum_);
}

void GemmOverlap::upload() {
  const size_t tiles = map_.grid.num_tiles();
  std::vector<int32_t> h;
  h.reserve(3 * tiles + map_.group_first.size());
  h.insert(h.end(), map_.tile_slot.begin(), map_.tile_slot.end());
  h.insert(h.end(), map_.tile_group.begin(), map_.tile_group.end());
  h.insert(h.end(), map_.slot_tile.begin(), map_.slot_tile.end());
  h.insert(h.end(), map_.group_first.begin(), map_.group_first.end());
  BRAID_CUDA_CHECK(cudaMemcpy(tables_, h.data(), h.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
  if (part_dst_) {
    // OverlapOptions::peer_stores: element `off` of part q of group g (d_ offset off, in [goff + q * chunk,
    // goff + (q + 1) * chunk)) goes where push_chunks would copy it: rank q's receive buffer at off - q * chunk +
    // me * chunk; our own part stays in d_. Byte addresses (the shifted base may lie outside the allocation; the
    // address the epilogue forms does not).
    const int W = team_.size(), me = team_.rank();
    const std::vector<int64_t> shift = part_store_shifts(map_, W, me);
    std::vector<uint64_t> dst(shift.size());
    for (int g = 0; g < map_.groups(); ++g)
      for (int q = 0; q < W; ++q) {
        const size_t i = size_t(g) * W + q;
        dst[i] = q == me ? reinterpret_cast<uint64_t>(d_)
                         : reinterpret_cast<uint64_t>(peer_recv_->peer(q)) + static_cast<uint64_t>(2 * shift[i]);
      }
    BRAID_CUDA_CHECK(cudaMemcpy(part_dst_, dst.data(), dst.size() * sizeof(uint64_t), cudaMemcpyHostToDevice));
    // The row stage holds half a tile: the remote rows fit at 2 ranks only (the same test as SignalGemm::run's).
    part_bulk_ = opt_.peer_stores_bulk && (W - 1) * (map_.grid.bm / W) <= map_.grid.bm / 2;
    for (const uint64_t a : dst) part_bulk_ = part_bulk_ && a % 16 == 0;  // the bulk copy's destination alignment
  }
  // cudaMemset/cudaMemcpy above run on the legacy stream, which the library's non-blocking streams do not
  // wait for (and a pageable host-to-device copy may return before its DMA lands): finish them here.
  BRAID_CUDA_CHECK(cudaDeviceSynchronize());
}

void GemmOverlap::set_partition(const std::vector<int>& group_waves) {
  BRAID_CUDA_CHECK(cudaStreamSynchronize(comm_));
  if (sum_) BRAID_CUDA_CHECK(cudaStreamSynchronize(sum_));
  map_ = make_mapping(map_.grid, group_waves, map_.parts);
  sequential_ = false;
  upload();
}

void GemmOverlap::set_sequential(bool on) {
  if (!on) {
    sequential_ = false;
    map_.normal = false;  // the one-group tables below it are valid
    return;
  }
  set_partition({map_.grid.num_waves()});  // one group (tables valid if the fallback is left again)
  map_.normal = true;
  sequential_ = true;
  enter_fallback();
}

bool GemmOverlap::tune(const void* a, const void* b, void* out, cudaStream_t stream, int reps, double max_ratio) {
  BRAID_REQUIRE(reps >= 1, "GemmOverlap::tune: reps >= 1");
  const TileGrid& g = map_.grid;
  if (sequential_ || opt_.m != int64_t(g.tiles_m) * g.bm || opt_.n != int64_t(g.tiles_n) * g.bn) return sequential_;
  make_fallback_resources();  // what the fallback would run, made without leaving the overlap
  void* seq_d = fb_ ? fb_ : d_;  // the ring transport's fallback writes d_, as the overlap does
  const std::vector<std::function<void()>> cand = {
      [&] { run(a, b, out, stream); },
      [&] { run_sequential(team_, *cublas_, opt_.coll, a, b, seq_d, out, opt_.m, opt_.n, opt_.k, stream); }};
  const std::vector<double> med =
      bench::tune_medians(team_, stream, reps, kTuneBatch, cand, [&](size_t) { check_error(); });
  tuned_overlap_us_ = med[0];
  tuned_sequential_us_ = med[1];
  if (med[0] > max_ratio * med[1]) set_sequential(true);
  return sequential_;
}

size_t GemmOverlap::out_elems() const {
  const size_t mn = size_t(opt_.m) * opt_.n;
  return opt_.coll == Collective::kReduceScatter ? mn / team_.size() : mn;
}

void GemmOverlap::check_error() const {
  detail::throw_if_wait_timed_out(err_host_, team_.rank(), "FlashOverlap");
  if (peer_flags_) team_.check_device_error("FlashOverlap peer copy-engine start barrier");
}

void GemmOverlap::run(const void* a, const void* b, void* out, cudaStream_t stream) {
  const int G = map_.groups();
  const size_t tiles = map_.grid.num_tiles();
  const int32_t* tile_slot = tables_;
  const int32_t* tile_group = tables_ + tiles;
  const int32_t* group_first = tables_ + 3 * tiles;
  const bool rs = opt_.coll == Collective::kReduceScatter;
  BRAID_REQUIRE(!rs || out != nullptr, "GemmOverlap: reduce-scatter needs an output buffer");
  BRAID_REQUIRE(!rs || !sym_out_ || out == sym_out_,
                "GemmOverlap: the symmetric transport's reduce-scatter writes into output() (pass it as out)");

  if (sequential_) {
    // Fallback: cuBLAS + NCCL in sequence on `stream`, exactly the baseline (row-major D, Mapping::normal),
    // the collective on plain memory (fb_ where d_ is a symmetric window) on the team's communicator.
    // Nothing else is enqueued (no counter reset, no fork/join: a few µs on small shapes); an earlier
    // overlapped run already joined comm_ into `stream`.
    run_sequential(team_, *cublas_, opt_.coll, a, b, reordered(), out, opt_.m, opt_.n, opt_.k, stream);
    return;
  }
  // Counters restart at 0 every run: ordered after the previous run's waits by the join below (the
  // stream waits on comm_ before this memset), before this run's waits by the fork.
  BRAID_CUDA_CHECK(cudaMemsetAsync(counters_, 0, G * sizeof(uint32_t), stream));
  // Peer copy-engine transport: reset the flags peers raise here, then meet every rank (each has reset its
  // own and joined its previous run's sums and consumers into its stream, before its fork): only then may
  // any rank push into a peer. On the comm stream after the fork (beside the GEMM, which writes only our
  // own d_ meanwhile; a peer writes our d_ — all-reduce — only after our push of that group), or before
  // the GEMM where it leaves no SM free. The sums' stream starts after it (its waits read the flags).
  auto reset_and_meet = [&](cudaStream_t st) {
    BRAID_CUDA_CHECK(cudaMemsetAsync(peer_flags_->local(), 0, peer_second_flags() * 2 * 4, st));
    memops::start_barrier(team_, peer_slot_, st);
  };
  if (peer_flags_ && !peer_barrier_on_comm_) reset_and_meet(stream);
  BRAID_CUDA_CHECK(cudaEventRecord(fork_, stream));
  BRAID_CUDA_CHECK(cudaStreamWaitEvent(comm_, fork_, 0));
  if (peer_flags_) {
    if (peer_barrier_on_comm_) reset_and_meet(comm_);
    BRAID_CUDA_CHECK(cudaEventRecord(peer_ready_, comm_));
    BRAID_CUDA_CHECK(cudaStreamWaitEvent(sum_, peer_ready_, 0));
  }

  EpilogueArgs e;
  e.d = d_;
  e.tile_slot = tile_slot;
  e.tile_group = tile_group;
  e.group_first = group_first;
  e.counters = counters_;
  e.parts = map_.parts;
  if (part_dst_) {  // OverlapOptions::peer_stores: each part into its owner's receive buffer, owners' flags raised
    e.part_dst = part_dst_;
    e.part_flags = part_flags_;
    e.part_rank = team_.rank();
    e.part_bulk = part_bulk_;
  }
  gemm_->run(a, b, opt_.m, opt_.n, opt_.k, e, stream);

  const uint64_t timeout_ns = static_cast<uint64_t>(team_.options().timeout_s * 1e9);
  // Diagnostics only (results are wrong in these modes): BRAID_OVERLAP_DEBUG=nocomm skips the
  // collectives (GEMM + signals + waits alone), =nowait issues them without waiting (contention
  // between the GEMM and NCCL with no dependency).
  static const std::string debug = env::choice("BRAID_OVERLAP_DEBUG", {"nocomm", "nowait"}).value_or("");
  for (int g = 0; g < G; ++g) {
    const uint32_t expected = static_cast<uint32_t>(map_.tiles_in_group(g));
    // peer_stores: nothing moves on comm_; the sums wait for the counter themselves (run_peer_copy_group).
    if (debug != "nowait" && !part_dst_)
      detail::enqueue_group_wait(wait_value_, comm_, counters_ + g, expected, g, timeout_ns, err_host_);
    const size_t off = map_.group_offset(g), count = map_.group_elems(g);
    if (debug == "nocomm") continue;
    run_group_collective(off, count, out, g, g == G - 1, comm_);
  }
  BRAID_CUDA_CHECK(cudaEventRecord(join_, comm_));
  BRAID_CUDA_CHECK(cudaStreamWaitEvent(stream, join_, 0));
  if (peer_flags_ && opt_.coll == Collective::kAllReduce && debug != "nocomm") {
    // Peer copy-engine all-reduce: every peer's reduced chunk of every group has landed in d_.
    for (int g = 0; g < G; ++g) wait_peer_flags(peer_second_flags() + size_t(g) * team_.size(), sum_);
  }
  if (sum_ && debug != "nocomm") {  // the copy-engine reduce-scatter's sums (each after its group's all-to-all)
    BRAID_CUDA_CHECK(cudaEventRecord(join_sum_, sum_));
    BRAID_CUDA_CHECK(cudaStreamWaitEvent(stream, join_sum_, 0));
  }
}

// One group over the copy engines: the group's slice [off, off + count) of d_ is W chunks, chunk p for
// rank p (reduce-scatter: sub-tiles of part p; all-reduce: an equal split of whole tiles).
//   ncclAlltoAll d_ -> recv_ (zero-CTA comm, symmetric windows: copy engines; recv_ gets chunk `rank` of
//   every rank q at recv_[off + q * chunk]), then the W chunks are summed in rank order into out (RS) or
//   into d_'s own chunk (AR), and for AR ncclAllGather (in place, copy engines) spreads the reduced chunks.
// Ordering: NCCL's copy-engine collectives end with a completion handshake on the comm stream, so when
// the all-to-all is done every peer has finished writing recv_ and reading nothing of ours (push only);
// the all-gather starts with a ready handshake, so no peer writes our d_ before we reduced into it.
// Reduce-scatter in run() (g >= 0): the sum runs on sum_ after an event on s, so the next group's
// all-to-all on s does not queue behind it.
void GemmOverlap::run_copy_engine_group(size_t off, size_t count, void* out, int g, bool last, cudaStream_t s,
                                        Part part) {
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
  const int W = team_.size(), me = team_.rank();
  const size_t chunk = count / W;
  auto ce = static_cast<ncclComm_t>(ce_comm_);
  auto* d = static_cast<__nv_bfloat16*>(d_);
  auto* r = static_cast<__nv_bfloat16*>(recv_);
  if (part != Part::kTail) BRAID_NCCL_CHECK(ncclAlltoAll(d + off, r + off, chunk, kBf16, ce, s));
  if (part == Part::kTransfer) return;
  const int64_t vecs = static_cast<int64_t>(chunk / 8);
  // After the last group's wait the GEMM has stored every tile: its reduction may use the whole GPU.
  const int ctas = last ? reduce_ctas_last_ : reduce_ctas_;
  const int blocks = static_cast<int>(std::min<int64_t>(ctas, (vecs + kSumThreads - 1) / kSumThreads));
  const bool rs = opt_.coll == Collective::kReduceScatter;
  __nv_bfloat16* dst = rs ? static_cast<__nv_bfloat16*>(out) + off / W : d + off + size_t(me) * chunk;
  cudaStream_t ss = s;
  if (rs && sum_ && g >= 0) {
    BRAID_CUDA_CHECK(cudaEventRecord(a2a_done_[size_t(g)], s));
    BRAID_CUDA_CHECK(cudaStreamWaitEvent(sum_, a2a_done_[size_t(g)], 0));
    ss = sum_;
  }
  sum_slices_kernel<<<std::max(1, blocks), kSumThreads, 0, ss>>>(strided_sources(r + off, chunk, W),
                                                                reinterpret_cast<uint4*>(dst), vecs, W);
  BRAID_CHECK_LAUNCH();
  if (!rs) BRAID_NCCL_CHECK(ncclAllGather(d + off + size_t(me) * chunk, d + off, chunk, kBf16, ce, s));
#else
  (void)off, (void)count, (void)out, (void)g, (void)last, (void)s, (void)part;
  throw UnavailableError("FlashOverlap copy-engine transport: needs NCCL >= 2.28", __FILE__, __LINE__);
#endif
}

// One group's collective on [off, off + count) of d_ (reduce-scatter: into out + off / world): NCCL's
// kernels on the team's communicator, or the copy-engine group above.
void GemmOverlap::run_group_collective(size_t off, size_t count, void* out, int g, bool last, cudaStream_t s) {
  if (ce_comm_) return run_copy_engine_group(off, count, out, g, last, s);
  if (peer_flags_) return run_peer_copy_group(off, count, out, g, last, s);
  const size_t W = static_cast<size_t>(team_.size());
  auto* d = static_cast<__nv_bfloat16*>(d_);
  if (opt_.coll == Collective::kReduceScatter) {
    BRAID_NCCL_CHECK(ncclReduceScatter(d + off, static_cast<__nv_bfloat16*>(out) + off / W, count / W, kBf16,
                                       ncclSum, team_.nccl(), s));
  } else {
    BRAID_NCCL_CHECK(ncclAllReduce(d + off, d + off, count, kBf16, ncclSum, team_.nccl(), s));
  }
}

// Group g over braid's copy-engine pushes (Transport::kPeerCopyEngine; run() has reset the flags, passed
// the start barrier and enqueued, on s, the wait for the group's counter). The group's slice is W chunks,
// chunk q for rank q (sub-tiles of part q, as for NCCL's reduce-scatter). Ordering:
//   counter -> copy: cuStreamWaitValue32 on s, then the copy on s (the epilogue's red.release.gpu made the
//     tiles visible before the counter value; the same pattern as counter -> NCCL);
//   copy -> peer flag: cuStreamWriteValue32 with default flags after the copy on s (a memory barrier over
//     the stream's earlier work precedes the write), into rank q's flags[g * W + me];
//   flag -> sum: cuStreamWaitValue32 (GEQ, plus FLUSH of remote writes where supported) on sum_ for every
//     peer's flag and for our own counter, then the sum kernel on sum_ (own chunk read in place).
// Reuse: a peer pushes into our receive buffer only after the next run's start barrier, which we reach
// only after our sums (joined into the caller's stream) have read it.
// Pulled last group (OverlapOptions::peer_pull_last, reduce-scatter): no copy; s raises each peer's flag
// for (g, this rank) after its wait for our counter, and the sum reads chunk `me` of every peer's group from
// that peer's d_. Ordering: our epilogue's tiles are released (gpu scope, into our L2, through which a
// peer's NVLink loads read our memory) before the counter value s waited for; the flag write follows that
// wait in s; a peer's sum kernel launches after its stream saw the flag, so its loads see the tiles. Reuse:
// a peer reads our d_ until its last sum ends, which its stream joins before the next run's start barrier;
// with pull_last that barrier precedes our GEMM (peer_barrier_on_comm_ is false), so d_ is not rewritten
// while a peer may still read it.
void GemmOverlap::run_peer_copy_group(size_t off, size_t count, void* out, int g, bool last, cudaStream_t s) {
  const int W = team_.size(), me = team_.rank();
  const size_t chunk = count / static_cast<size_t>(W);
  if (part_dst_) {
    // OverlapOptions::peer_stores: the epilogue stored our parts into the owners' receive buffers and raised their
    // flags (release, system scope, after the tile's stores); here nothing moves. Ordering: the sum waits for our
    // counter (our own part, in d_) and for every peer's flag at the group's tile count (GEQ with the remote-write
    // flush), then reads the receive buffer. Reuse: as for the pushes (the start barrier, before our GEMM).
    memops::stream_wait(wait_value_, sum_, counters_ + g, static_cast<uint32_t>(map_.tiles_in_group(g)),
                        CU_STREAM_WAIT_VALUE_GEQ);
    wait_peer_stores(g, sum_);
    peer_sum(off, chunk, out, last ? reduce_ctas_last_ : reduce_ctas_, sum_);
    return;
  }
  if (last && opt_.peer_pull_last && opt_.coll == Collective::kReduceScatter) {
    for (int i = 1; i < W; ++i) {
      const int q = (me + i) % W;
      memops::stream_write(write_value_, s, peer_flags_->peer_as<uint32_t>(q) + size_t(g) * W + me, 1u);
    }
    memops::stream_wait(wait_value_, sum_, counters_ + g, static_cast<uint32_t>(map_.tiles_in_group(g)),
                        CU_STREAM_WAIT_VALUE_GEQ);
    wait_peer_flags(size_t(g) * W, sum_);
    peer_sum(off, chunk, out, reduce_ctas_last_, sum_, true);
    return;
  }
  push_chunks(*peer_recv_, off, chunk, false, size_t(g) * W, s);
  memops::stream_wait(wait_value_, sum_, counters_ + g, static_cast<uint32_t>(map_.tiles_in_group(g)),
                      CU_STREAM_WAIT_VALUE_GEQ);
  wait_peer_flags(size_t(g) * W, sum_);
  // The last group's sum runs after the GEMM: every SM.
  peer_sum(off, chunk, out, last ? reduce_ctas_last_ : reduce_ctas_, sum_);
  if (opt_.coll == Collective::kAllReduce) push_chunks(*peer_d_, off, chunk, true, peer_second_flags() + size_t(g) * W, sum_);
}

// On s, for every peer q (staggered: rank me pushes to me + 1 first, so the peers' first pushes differ): a
// copy into rank q's `dst` at off + me * chunk of chunk q of [off, off + W chunks) of d_ (or, `reduced`, of
// our own chunk, the all-reduce's second step), then rank q's flags[flag + me] raised.
void GemmOverlap::push_chunks(const SymmetricBuffer& dst, size_t off, size_t chunk, bool reduced, size_t flag,
                              cudaStream_t s, bool flags) {
  const int W = team_.size(), me = team_.rank();
  const auto* d = static_cast<const __nv_bfloat16*>(d_);
  for (int i = 1; i < W; ++i) {
    const int q = (me + i) % W;
    BRAID_CUDA_CHECK(cudaMemcpyAsync(dst.peer_as<__nv_bfloat16>(q) + off + size_t(me) * chunk,
                                     d + off + size_t(reduced ? me : q) * chunk, chunk * 2, cudaMemcpyDefault, s));
    if (flags) memops::stream_write(write_value_, s, peer_flags_->peer_as<uint32_t>(q) + flag + me, 1u);
  }
}

size_t GemmOverlap::peer_second_flags() const { return size_t(map_.grid.num_waves()) * size_t(team_.size()); }

void GemmOverlap::wait_peer_stores(int g, cudaStream_t s) {
  const uint32_t* flags = peer_flags_->local_as<uint32_t>();
  const auto tiles = static_cast<uint32_t>(map_.tiles_in_group(g));
  for (int q = 0; q < team_.size(); ++q)
    if (q != team_.rank())
      memops::stream_wait(wait_value_, s, flags + size_t(g) * team_.size() + q, tiles, peer_wait_flags_);
}

// On s: every peer's flags[flag + q] raised (GEQ 1, with the remote-write flush where supported).
void GemmOverlap::wait_peer_flags(size_t flag, cudaStream_t s) {
  const uint32_t* flags = peer_flags_->local_as<uint32_t>();
  for (int q = 0; q < team_.size(); ++q)
    if (q != team_.rank()) memops::stream_wait(wait_value_, s, flags + flag + q, 1u, peer_wait_flags_);
}

// On s: the W chunks of [off, off + W chunks) summed in rank order (own chunk read in place from d_, the
// peers' from the receive buffer) into `out` + off / W (reduce-scatter) or in place into our chunk of d_
// (all-reduce: each element is loaded from every source by the thread that then stores it), on at most
// `ctas` CTAs.
void GemmOverlap::peer_sum(size_t off, size_t chunk, void* out, int ctas, cudaStream_t s, bool pull) {
  const int W = team_.size(), me = team_.rank();
  const auto* d = static_cast<const __nv_bfloat16*>(d_);
  const auto* recv = peer_recv_->local_as<const __nv_bfloat16>();
  SumSources src{};
  for (int q = 0; q < W; ++q) {
    const __nv_bfloat16* p = q == me ? d + off + size_t(q) * chunk                      // own chunk, in place
                             : pull   ? peer_d_->peer_as<const __nv_bfloat16>(q) + off + size_t(me) * chunk
                                      : recv + off + size_t(q) * chunk;                 // pushed to us by q
    src.p[q] = reinterpret_cast<const uint4*>(p);
  }
  const int64_t vecs = static_cast<int64_t>(chunk / 8);
  const int blocks = static_cast<int>(std::min<int64_t>(ctas, (vecs + kSumThreads - 1) / kSumThreads));
  auto* dst = opt_.coll == Collective::kReduceScatter ? static_cast<__nv_bfloat16*>(out) + off / W
                                                       : static_cast<__nv_bfloat16*>(d_) + off + size_t(me) * chunk;
  sum_slices_kernel<<<std::max(1, blocks), kSumThreads, 0, s>>>(src, reinterpret_cast<uint4*>(dst), vecs, W);
  BRAID_CHECK_LAUNCH();
}

// The peer copy-engine collective alone, for --measure (everything on s, as one group at offset 0): reset
// the flags, the start barrier (kSetup stops here; kAfterSetup starts after it), the pushes and flags, the
// waits for the peers' flags (kTransfer stops here), then the sum on the CTAs a group's sum gets beside the
// GEMM (kTail: the sum alone, on the data in place) and, all-reduce, the reduced chunks' pushes and waits.
// The barrier orders each call after every rank's previous one, as in run().
void GemmOverlap::run_peer_standalone(size_t count, void* out, cudaStream_t s, Part part) {
  const size_t chunk = count / static_cast<size_t>(team_.size());
  if (part != Part::kTail) {
    if (part != Part::kAfterSetup) {  // kAfterSetup: a kSetup call of this count was issued before it
      BRAID_CUDA_CHECK(cudaMemsetAsync(peer_flags_->local(), 0, peer_second_flags() * 2 * 4, s));
      memops::start_barrier(team_, peer_slot_, s);
    }
    if (part == Part::kSetup) return;
    // kCopies: no flag, so no peer waits on this call's copies (the next call's barrier orders them after
    // every rank's copies here, as for any call).
    push_chunks(*peer_recv_, 0, chunk, false, 0, s, part != Part::kCopies);
    if (part == Part::kCopies) return;
    wait_peer_flags(0, s);
  }
  if (part == Part::kTransfer) return;
  peer_sum(0, chunk, out, reduce_ctas_, s);
  if (opt_.coll == Collective::kReduceScatter || part == Part::kTail) return;
  push_chunks(*peer_d_, 0, chunk, true, peer_second_flags(), s);
  wait_peer_flags(peer_second_flags(), s);
}

void GemmOverlap::release_peer_flags() const {
  if (!peer_flags_ || !write_value_) return;
  memops::release_words(write_value_, peer_flags_->local_as<uint32_t>(), 2 * peer_second_flags(),
                        team_.options().timeout_s);
}

void GemmOverlap::transport_collective(size_t count, void* out, cudaStream_t stream, Part part) {
  const size_t W = static_cast<size_t>(team_.size());
  if (peer_flags_) {
    BRAID_REQUIRE(count > 0 && count % (8 * W) == 0 && count <= size_t(opt_.m) * opt_.n,
                  "GemmOverlap::transport_collective: count must be a positive multiple of 8 x world, at most M x N");
    return run_peer_standalone(count, out, stream, part);
  }
  BRAID_REQUIRE(count > 0 && count % (8 * W) == 0 && count <= size_t(opt_.m) * opt_.n,
                "GemmOverlap::transport_collective: count must be a positive multiple of 8 x world, at most M x N");
  if (part == Part::kSetup || part == Part::kCopies) return;  // NCCL's transports: no setup, no copies apart
  if (!has_tail()) {
    if (part != Part::kTail) run_group_collective(0, count, out, -1, false, stream);
    return;
  }
  run_copy_engine_group(0, count, out, -1, false, stream, part);
}

void GemmOverlap::rmsnorm(const void* x, const void* gamma, void* y, float eps, cudaStream_t stream) const {
  const auto& g = map_.grid;
  BRAID_REQUIRE(opt_.n % 8 == 0 && g.bn % 8 == 0, "rmsnorm: N must be a multiple of 8");
  const int rows_per_tile = g.bm / map_.parts;
  const int64_t rows = opt_.m / map_.parts;
  rmsnorm_gather_kernel<<<static_cast<unsigned>(rows), kNormThreads, 0, stream>>>(
      static_cast<const __nv_bfloat16*>(x), static_cast<const __nv_bfloat16*>(gamma), static_cast<__nv_bfloat16*>(y),
      tables_, static_cast<int>(opt_.n), g.bn, g.tiles_n, rows_per_tile, eps, map_.normal ? 1 : 0);
  BRAID_CHECK_LAUNCH();
}

void GemmOverlap::gather_rows(const void* x, void* y, cudaStream_t stream) const {
  BRAID_REQUIRE(opt_.coll == Collective::kReduceScatter, "gather_rows: reduce-scatter only");
  const int64_t rows = opt_.m / map_.parts;
  if (map_.normal) {
    BRAID_CUDA_CHECK(cudaMemcpyAsync(y, x, size_t(rows) * size_t(opt_.n) * 2, cudaMemcpyDeviceToDevice, stream));
    return;
  }
  const auto& g = map_.grid;
  BRAID_REQUIRE(opt_.n % 8 == 0 && g.bn % 8 == 0, "gather_rows: N must be a multiple of 8");
  gather_rows_kernel<<<static_cast<unsigned>(rows), 256, 0, stream>>>(
      static_cast<const __nv_bfloat16*>(x), static_cast<__nv_bfloat16*>(y), tables_, static_cast<int>(opt_.n), g.bn,
      g.tiles_n, g.bm / map_.parts);
  BRAID_CHECK_LAUNCH();
}

void un_permute_rows(const Mapping& map, const void* src, void* dst, int64_t m, int64_t n, int world, cudaStream_t s) {
  if (!map.normal) return un_permute_rows(src, dst, m, n, map.grid.bm, world, s);
  BRAID_CUDA_CHECK(cudaMemcpyAsync(dst, src, size_t(m) * n * 2, cudaMemcpyDeviceToDevice, s));
}

void un_permute_rows(const void* src, void* dst, int64_t m, int64_t n, int bm, int world, cudaStream_t s) {
  BRAID_REQUIRE(n % 8 == 0 && m % bm == 0 && bm % world == 0, "un_permute_rows: bad shape");
  un_permute_rows_kernel<<<static_cast<unsigned>(m), 128, 0, s>>>(static_cast<const uint4*>(src),
                                                                   static_cast<uint4*>(dst), m / world,
                                                                   static_cast<int>(n / 8), bm, bm / world);
  BRAID_CHECK_LAUNCH();
}

// ============================================ owner-ordered RS ============================================
OwnerOrderedRs::OwnerOrderedRs(Team& team, int64_t m, int64_t n, int64_t k, OwnerGemm gemm, int chunks,
                               bool all_reduce)
    : team_(team), m_(m), n_(n), k_(k), kind_(gemm), chunks_(chunks) {
  const int W = team.size();
  const char* what = all_reduce ? "owner-ordered all-reduce" : "owner-ordered reduce-scatter";
  BRAID_REQUIRE(m > 0 && n > 0 && k > 0 && m % W == 0 && n % 8 == 0, "OwnerOrderedRs: M % world == 0, N % 8 == 0");
  BRAID_REQUIRE(chunks >= 1 && (m / W) % chunks == 0, "OwnerOrderedRs: chunks >= 1 dividing M / world");
  BRAID_REQUIRE(W <= kMaxSumSources, "OwnerOrderedRs: at most 16 ranks");
  if (!team.peer_ok())
    throw UnavailableError(std::string(what) + ": needs peer access between all ranks (" + team.peer_status() + ")",
                           __FILE__, __LINE__);
  const int64_t rows = m / W;
  if (gemm == OwnerGemm::kBraid) {
    braid_ = std::make_unique<SignalGemm>(TileConfig::k128x256, 0);
    (void)braid_->plan(rows, n, k);           // throws UsageError if a block does not fit the tiles
    (void)braid_->plan(rows / chunks, n, k);  // nor a peer block's chunk
  } else {
    cublas_ = std::make_unique<CublasGemm>();
  }
  write_value_ = memops::required_entry_point("cuStreamWriteValue32", what);
  wait_value_ = memops::required_entry_point("cuStreamWaitValue32", what);
  wait_flags_ = memops::remote_wait_flags();
  const size_t bytes = size_t(m) * n * 2;
  BRAID_CUDA_CHECK(cudaMalloc(&d_, bytes));
  recv_ = std::make_unique<SymmetricBuffer>(team, bytes);                  // collective
  const size_t flag_words = size_t(W) * (all_reduce ? 2 : 1);
  flags_ = std::make_unique<SymmetricBuffer>(team, flag_words * 4);       // collective
  BRAID_CUDA_CHECK(cudaMemset(flags_->local(), 0, flag_words * 4));
  if (all_reduce) {
    result_ = std::make_unique<SymmetricBuffer>(team, bytes);              // collective
    sum_ev_.resize(size_t(chunks));
    for (auto& e : sum_ev_) BRAID_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  }
  BRAID_CUDA_CHECK(cudaDeviceSynchronize());
  slot_ = team.reserve_slots(1);
  BRAID_CUDA_CHECK(cudaStreamCreateWithFlags(&push_, cudaStreamNonBlocking));
  ev_.resize(size_t(W - 1) * size_t(chunks) + 1);
  for (auto& e : ev_) BRAID_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  BRAID_CUDA_CHECK(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming));
  if (chunks > 1) {  // our own block's chunks: their sums on sum_ (run() step 4)
    BRAID_CUDA_CHECK(cudaStreamCreateWithFlags(&sum_, cudaStreamNonBlocking));
    own_ev_.resize(size_t(chunks) + 1);
    for (auto& e : own_ev_) BRAID_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  }
  BRAID_CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
  BRAID_CUDA_CHECK(cudaEventCreateWithFlags(&end_, cudaEventDisableTiming));
  sum_ctas_ = sum_ctas_all_sms();
}

void OwnerOrderedRs::release_flags() const {
  if (!flags_ || !write_value_) return;
  memops::release_words(write_value_, flags_->local_as<uint32_t>(), flags_->bytes() / 4, team_.options().timeout_s);
}

OwnerOrderedRs::~OwnerOrderedRs() {
  // No-hang contract (as GemmOverlap's): the flag waits (stream memory operations, no timeout of their own) on the
  // caller's stream and on sum_ wait for peers, and push_ waits for events behind them (all_reduce). If the last
  // run has not ended within the team's timeout, a peer failed: release this rank's flags so every stream drains
  // (before cudaFree, which would wait for them).
  const double t = team_.options().timeout_s;
  auto ended = [&](auto query) { return memops::wait_bounded(query, t); };
  if ((ran_ && !ended([&] { return cudaEventQuery(end_); })) || (sum_ && !ended([&] { return cudaStreamQuery(sum_); })) ||
      (push_ && !ended([&] { return cudaStreamQuery(push_); })))
    release_flags();
  if (push_) cudaStreamSynchronize(push_);
  if (sum_) cudaStreamSynchronize(sum_);
  for (auto e : ev_) cudaEventDestroy(e);
  for (auto e : own_ev_) cudaEventDestroy(e);
  for (auto e : sum_ev_) cudaEventDestroy(e);
  for (auto e : prof_ev_) cudaEventDestroy(e);
  if (sum_) cudaStreamDestroy(sum_);
  if (fork_) cudaEventDestroy(fork_);
  if (ready_) cudaEventDestroy(ready_);
  if (end_) cudaEventDestroy(end_);
  if (push_) cudaStreamDestroy(push_);
  cudaFree(d_);
}

// Ordering, per run (every step on `stream` unless named):
//   1. our flags reset, then the start barrier: every rank has finished its previous run (its sum read its receive
//      buffer, its pushes landed), so no peer writes our receive buffer or flags before this point, and we write
//      theirs only after it. With cuBLAS's GEMM (kernels that retire, so the barrier's one block finds an SM) both
//      run on push_ after a fork from `stream`, beside the first block's GEMM, and `stream` waits for them (event
//      `ready`) only before its flag waits in 4 (which must not read a flag the reset has not cleared yet); with
//      braid's persistent GEMM (every SM until its end) both run on `stream` before the GEMM;
//   2. peer block q = me + i (i = 1 .. W-1), in `chunks` row chunks: each chunk's GEMM, an event; on push_: wait for
//      the event, copy the chunk into rank q's receive buffer (slot me, the chunk's rows), then write c + 1 into
//      rank q's flag [me] (stream order on push_ puts the write after the chunk's copy and every earlier one);
//   3. our own block's GEMM: one launch (chunks == 1), or `chunks` launches;
//   4. chunks == 1: wait for every peer's flag [q] (GEQ 1, with the remote-write flush), then sum our block and the
//      W - 1 received slots in rank order into out. chunks > 1: chunk c's sum on sum_, after its GEMM (event) and
//      every peer's flag >= c + 1, beside our next chunk's GEMM; `stream` joins sum_. Then join push_ (the next
//      run's reset and barrier follow every push).
//   all_reduce: the sums go into our block of result_; after chunk c's sum (event), push_ copies it into the same
//      rows of every peer's result_ and writes c + 1 into that peer's second flag [W + me] (stream order on push_:
//      after the copy); `stream` waits for every peer's second flag >= chunks (their blocks landed in ours) before
//      the join of push_, then copies result_ into out unless out is result_. No rank writes a peer's result_ or
//      flags before the next run's barrier, which every rank reaches only after its own run ended (its pushes
//      joined, every peer's blocks landed), and a run's stream reaches the barrier only after the caller's earlier
//      work on it (reads of the previous result included).
void* OwnerOrderedRs::result() const { return result_ ? result_->local() : nullptr; }

void OwnerOrderedRs::set_profile(bool on) {
  BRAID_CUDA_CHECK(cudaDeviceSynchronize());  // no recorded stamp is pending when its event goes
  for (auto e : prof_ev_) cudaEventDestroy(e);
  prof_ev_.clear();
  prof_names_.clear();
  prof_n_ = 0;
  if (!on) return;
  // start, barrier, end, and per chunk: a GEMM and a push per peer block, the own GEMM, flags seen, sum, gathers
  const size_t n = 4 + size_t(chunks_) * (2 * size_t(team_.size()) + 4);
  prof_ev_.resize(n);
  prof_names_.resize(n);
  for (auto& e : prof_ev_) BRAID_CUDA_CHECK(cudaEventCreate(&e));
}

std::vector<std::pair<std::string, float>> OwnerOrderedRs::phases() const {
  std::vector<std::pair<std::string, float>> v;
  for (size_t i = 0; i < prof_n_; ++i) {
    float ms = 0;
    BRAID_CUDA_CHECK(cudaEventElapsedTime(&ms, prof_ev_[0], prof_ev_[i]));
    v.emplace_back(prof_names_[i], ms * 1000.f);
  }
  return v;
}

void OwnerOrderedRs::run(const void* a, const void* b, void* out, cudaStream_t stream) {
  BRAID_REQUIRE(out != nullptr, "OwnerOrderedRs::run: out");
  const int W = team_.size(), me = team_.rank();
  const bool ar = result_ != nullptr;
  const int64_t rows = m_ / W, crows = rows / chunks_;
  const size_t blk = size_t(rows) * size_t(n_), cel = size_t(crows) * size_t(n_);  // elements of a block, a chunk
  const auto* A = static_cast<const __nv_bfloat16*>(a);
  auto* D = static_cast<__nv_bfloat16*>(d_);
  auto gemm_rows = [&](int64_t row0, int64_t count) {  // rows [row0, row0 + count) of D = A·Bᵀ
    const __nv_bfloat16* ar = A + size_t(row0) * size_t(k_);  // (count, K)
    __nv_bfloat16* dr = D + size_t(row0) * size_t(n_);         // (count, N)
    if (cublas_) {
      cublas_->run(ar, b, dr, count, n_, k_, stream);
    } else {
      EpilogueArgs e;
      e.d = dr;
      braid_->run(ar, b, count, n_, k_, e, stream);
    }
  };
  // set_profile(true): a timing event per phase boundary, on the stream that reaches it
  prof_n_ = 0;
  auto stamp = [&](const char* what, cudaStream_t s) {
    if (prof_ev_.empty()) return;
    BRAID_REQUIRE(prof_n_ < prof_ev_.size(), "OwnerOrderedRs: more phase stamps than events");
    prof_names_[prof_n_] = what;
    BRAID_CUDA_CHECK(cudaEventRecord(prof_ev_[prof_n_++], s));
  };
  stamp("start", stream);
  const bool beside = cublas_ != nullptr;
  cudaStream_t setup = stream;
  if (beside) {
    BRAID_CUDA_CHECK(cudaEventRecord(fork_, stream));
    BRAID_CUDA_CHECK(cudaStreamWaitEvent(push_, fork_, 0));
    setup = push_;
  }
  BRAID_CUDA_CHECK(cudaMemsetAsync(flags_->local(), 0, size_t(W) * (ar ? 8 : 4), setup));
  memops::start_barrier(team_, slot_, setup);
  stamp("barrier", setup);
  if (beside) BRAID_CUDA_CHECK(cudaEventRecord(ready_, push_));
  for (int i = 1; i < W; ++i) {
    const int q = (me + i) % W;
    for (int c = 0; c < chunks_; ++c) {
      const int64_t row0 = int64_t(q) * rows + int64_t(c) * crows;
      gemm_rows(row0, crows);
      stamp("peer gemm", stream);
      cudaEvent_t ev = ev_[size_t(i - 1) * size_t(chunks_) + size_t(c)];
      BRAID_CUDA_CHECK(cudaEventRecord(ev, stream));
      BRAID_CUDA_CHECK(cudaStreamWaitEvent(push_, ev, 0));
      BRAID_CUDA_CHECK(cudaMemcpyAsync(recv_->peer_as<__nv_bfloat16>(q) + size_t(me) * blk + size_t(c) * cel,
                                       D + size_t(row0) * size_t(n_), cel * 2, cudaMemcpyDefault, push_));
      // rank q's flag [me] = chunks of its block landed so far (stream order on push_: after this chunk's copy)
      memops::stream_write(write_value_, push_, flags_->peer_as<uint32_t>(q) + me, uint32_t(c + 1));
      stamp("push", push_);
    }
  }
  const uint32_t* flags = flags_->local_as<uint32_t>();
  const auto* recv = recv_->local_as<const __nv_bfloat16>();
  // Where our block's sums go: out (reduce-scatter) or our block of result_ (all-reduce).
  __nv_bfloat16* const sums =
      ar ? result_->local_as<__nv_bfloat16>() + size_t(me) * blk : static_cast<__nv_bfloat16*>(out);
  // all_reduce: after chunk c's sum on s, its rows pushed into every peer's result_ and the peer's second flag.
  auto gather_chunk = [&](int c, cudaStream_t s) {
    if (!ar) return;
    BRAID_CUDA_CHECK(cudaEventRecord(sum_ev_[size_t(c)], s));
    BRAID_CUDA_CHECK(cudaStreamWaitEvent(push_, sum_ev_[size_t(c)], 0));
    const size_t off = size_t(me) * blk + size_t(c) * cel;
    for (int i = 1; i < W; ++i) {
      const int q = (me + i) % W;
      BRAID_CUDA_CHECK(cudaMemcpyAsync(result_->peer_as<__nv_bfloat16>(q) + off, result_->local_as<__nv_bfloat16>() + off,
                                       cel * 2, cudaMemcpyDefault, push_));
      memops::stream_write(write_value_, push_, flags_->peer_as<uint32_t>(q) + W + me, uint32_t(c + 1));
    }
    stamp("gather push", push_);
  };
  // On s: elements [e0, e0 + elems) of our block summed with the peers' (same offsets in their receive slots) into
  // sums + e0, after every peer's flag reached `landed` chunks.
  auto sum_rows = [&](size_t e0, size_t elems, uint32_t landed, cudaStream_t s) {
    for (int q = 0; q < W; ++q)
      if (q != me) memops::stream_wait(wait_value_, s, flags + q, landed, wait_flags_);
    stamp("flags", s);
    SumSources src{};
    for (int q = 0; q < W; ++q)
      src.p[q] = reinterpret_cast<const uint4*>(q == me ? D + size_t(me) * blk + e0 : recv + size_t(q) * blk + e0);
    const int64_t vecs = static_cast<int64_t>(elems / 8);
    const int blocks = static_cast<int>(std::min<int64_t>(sum_ctas_, (vecs + kSumThreads - 1) / kSumThreads));
    sum_slices_kernel<<<std::max(1, blocks), kSumThreads, 0, s>>>(src, reinterpret_cast<uint4*>(sums + e0), vecs, W);
    BRAID_CHECK_LAUNCH();
    stamp("sum", s);
  };
  if (chunks_ == 1) {  // our block in one launch, then its sum on `stream`
    gemm_rows(int64_t(me) * rows, rows);
    stamp("own gemm", stream);
    if (beside) BRAID_CUDA_CHECK(cudaStreamWaitEvent(stream, ready_, 0));  // the reset precedes the waits below
    sum_rows(0, blk, 1u, stream);
    gather_chunk(0, stream);
  } else {
    // Our block in `chunks` launches too; chunk c's sum on sum_ after its GEMM (event) and the peers' chunk c
    // (flags >= c + 1), beside our next chunk's GEMM; `stream` joins sum_ at the end.
    if (beside) BRAID_CUDA_CHECK(cudaStreamWaitEvent(sum_, ready_, 0));  // the reset precedes the waits
    for (int c = 0; c < chunks_; ++c) {
      gemm_rows(int64_t(me) * rows + int64_t(c) * crows, crows);
      stamp("own gemm", stream);
      cudaEvent_t ev = own_ev_[size_t(c)];
      BRAID_CUDA_CHECK(cudaEventRecord(ev, stream));
      BRAID_CUDA_CHECK(cudaStreamWaitEvent(sum_, ev, 0));
      sum_rows(size_t(c) * cel, cel, uint32_t(c + 1), sum_);
      gather_chunk(c, sum_);
    }
    BRAID_CUDA_CHECK(cudaEventRecord(own_ev_.back(), sum_));
    BRAID_CUDA_CHECK(cudaStreamWaitEvent(stream, own_ev_.back(), 0));
  }
  if (ar)  // every peer's block landed in our result_ (their second flags, after the copies on their push streams)
    for (int q = 0; q < W; ++q)
      if (q != me) memops::stream_wait(wait_value_, stream, flags + W + q, uint32_t(chunks_), wait_flags_);
  if (ar) stamp("gathered", stream);
  // Join push_ where it ran anything of this call (forked for the setup, or the peer blocks' copies): with one rank
  // and no setup beside, nothing forked it, and inside a capture the join would be a dependency on uncaptured work
  // (cudaErrorStreamCaptureIsolation, seen at one rank on one H200).
  if (beside || W > 1) {
    BRAID_CUDA_CHECK(cudaEventRecord(ev_.back(), push_));
    BRAID_CUDA_CHECK(cudaStreamWaitEvent(stream, ev_.back(), 0));
  }
  if (ar && out != result_->local())
    BRAID_CUDA_CHECK(cudaMemcpyAsync(out, result_->local(), size_t(m_) * size_t(n_) * 2, cudaMemcpyDeviceToDevice, stream));
  stamp("end", stream);
  BRAID_CUDA_CHECK(cudaEventRecord(end_, stream));
  ran_ = true;
}

// ============================================== baselines ==============================================
CublasGemm::CublasGemm() {
  cublasHandle_t h = nullptr;
  BRAID_CUBLAS_CHECK(cublasCreate(&h));
  handle_ = h;
  ws_bytes_ = size_t(32) << 20;
  BRAID_CUDA_CHECK(cudaMalloc(&workspace_, ws_bytes_));
  BRAID_CUBLAS_CHECK(cublasSetWorkspace(h, workspace_, ws_bytes_));
}
CublasGemm::~CublasGemm() {
  if (handle_) cublasDestroy(static_cast<cublasHandle_t>(handle_));
  cudaFree(workspace_);
}
void CublasGemm::run(const void* a, const void* b, void* d, int64_t m, int64_t n, int64_t k, cudaStream_t s,
                     float beta) {
  auto h = static_cast<cublasHandle_t>(handle_);
  BRAID_CUBLAS_CHECK(cublasSetStream(h, s));
  const float alpha = 1.f;
  // Column-major view: Dᵀ (N x M) = op_T(B as K x N col-major) · A (K x M col-major).
  BRAID_CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
                                  static_cast<int>(k), &alpha, b, CUDA_R_16BF, static_cast<int>(k), a, CUDA_R_16BF,
                                  static_cast<int>(k), &beta, d, CUDA_R_16BF, static_cast<int>(n), CUBLAS_COMPUTE_32F,
                                  CUBLAS_GEMM_DEFAULT));
}

void run_sequential(Team& team, CublasGemm& gemm, Collective c, const void* a, const void* b, void* d, void* out,
                    int64_t m, int64_t n, int64_t k, cudaStream_t stream) {
  gemm.run(a, b, d, m, n, k, stream);
  const size_t count = size_t(m) * n;
  if (!team.has_nccl()) {  // a shared-GPU team (tests only): the sum on the host over MPI, in float, rounded once
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    BRAID_CUDA_CHECK(cudaStreamIsCapturing(stream, &cap));
    if (cap != cudaStreamCaptureStatusNone)
      throw UnavailableError("run_sequential: a team without NCCL sums on the host, not under stream capture",
                             __FILE__, __LINE__);
    std::vector<uint16_t> h(count);
    BRAID_CUDA_CHECK(cudaMemcpyAsync(h.data(), d, count * 2, cudaMemcpyDeviceToHost, stream));
    team.synchronize(stream, "run_sequential (host sum)");
    std::vector<float> f(count);
    for (size_t i = 0; i < count; ++i) f[i] = bf16_to_float(h[i]);
    host_allreduce_sum(team, f);
    for (size_t i = 0; i < count; ++i) h[i] = quant::float_to_bf16_bits(f[i]);
    const size_t part = count / team.size();
    if (c == Collective::kReduceScatter)
      BRAID_CUDA_CHECK(cudaMemcpyAsync(out, h.data() + part * team.rank(), part * 2, cudaMemcpyHostToDevice, stream));
    else
      BRAID_CUDA_CHECK(cudaMemcpyAsync(d, h.data(), count * 2, cudaMemcpyHostToDevice, stream));
    team.synchronize(stream, "run_sequential (host sum)");  // h lives on this stack
    return;
  }
  if (c == Collective::kReduceScatter)
    BRAID_NCCL_CHECK(ncclReduceScatter(d, out, count / team.size(), kBf16, ncclSum, team.nccl(), stream));
  else
    BRAID_NCCL_CHECK(ncclAllReduce(d, d, count, kBf16, ncclSum, team.nccl(), stream));
}

Decomposition::Decomposition(Team& team, int chunks) : team_(team), chunks_(chunks) {
  BRAID_REQUIRE(chunks >= 1, "Decomposition: chunks >= 1");
  BRAID_CUDA_CHECK(cudaStreamCreateWithFlags(&s2_, cudaStreamNonBlocking));
  BRAID_CUDA_CHECK(cudaStreamCreateWithFlags(&comm_, cudaStreamNonBlocking));
  ev_.resize(chunks + 3);
  for (auto& e : ev_) BRAID_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  second_ = std::make_unique<CublasGemm>();
}
Decomposition::~Decomposition() {
  if (comm_) cudaStreamSynchronize(comm_);
  if (s2_) cudaStreamSynchronize(s2_);
  for (auto e : ev_) cudaEventDestroy(e);
  if (s2_) cudaStreamDestroy(s2_);
  if (comm_) cudaStreamDestroy(comm_);
}

// Chunk i: rows [i*R, (i+1)*R) of D, R = M / chunks. GEMMs alternate between `stream` and s2_; each
// chunk's collective runs on comm_ after its GEMM. Reduce-scatter output: chunk-major, rank p holds
// rows [i*R + p*R/world, ...) of chunk i at out[i*R/world*N ...].
void Decomposition::run(CublasGemm& gemm, Collective c, const void* a, const void* b, void* d, void* out, int64_t m,
                        int64_t n, int64_t k, cudaStream_t stream) {
  const int W = team_.size();
  BRAID_REQUIRE(m % (int64_t(chunks_) * W) == 0, "Decomposition: M must divide into chunks x ranks");
  const int64_t R = m / chunks_;
  cudaEvent_t fork = ev_[chunks_], join_comm = ev_[chunks_ + 1], join_s2 = ev_[chunks_ + 2];
  BRAID_CUDA_CHECK(cudaEventRecord(fork, stream));
  BRAID_CUDA_CHECK(cudaStreamWaitEvent(s2_, fork, 0));
  BRAID_CUDA_CHECK(cudaStreamWaitEvent(comm_, fork, 0));
  const auto* A = static_cast<const __nv_bfloat16*>(a);
  auto* D = static_cast<__nv_bfloat16*>(d);
  auto* O = static_cast<__nv_bfloat16*>(out);
  for (int i = 0; i < chunks_; ++i) {
    cudaStream_t s = (i % 2 == 0) ? stream : s2_;
    CublasGemm& g = (i % 2 == 0) ? gemm : *second_;
    g.run(A + i * R * k, b, D + i * R * n, R, n, k, s);
    BRAID_CUDA_CHECK(cudaEventRecord(ev_[i], s));
    BRAID_CUDA_CHECK(cudaStreamWaitEvent(comm_, ev_[i], 0));
    const size_t count = size_t(R) * n;
    if (c == Collective::kReduceScatter)
      BRAID_NCCL_CHECK(ncclReduceScatter(D + i * R * n, O + i * R * n / W, count / W, kBf16, ncclSum, team_.nccl(),
                                         comm_));
    else
      BRAID_NCCL_CHECK(ncclAllReduce(D + i * R * n, D + i * R * n, count, kBf16, ncclSum, team_.nccl(), comm_));
  }
  BRAID_CUDA_CHECK(cudaEventRecord(join_comm, comm_));
  BRAID_CUDA_CHECK(cudaEventRecord(join_s2, s2_));
  BRAID_CUDA_CHECK(cudaStreamWaitEvent(stream, join_comm, 0));
  BRAID_CUDA_CHECK(cudaStreamWaitEvent(stream, join_s2, 0));
}

// ============================================ GemmPullRs ============================================
// Ordering, per run (all on `stream`):
//   1. the GEMM writes our partial products into d_ (every row; no peer reads d_ now: every peer passed our previous
//      run's end barrier only after its sum had read our d_, and we reach this GEMM only after that barrier);
//   2. start barrier: every write the stream ordered before it (the GEMM's) precedes every peer's work after its own
//      barrier (memops::start_barrier), so their sums read our finished rows;
//   3. the sum: block `me` of every rank's d_ (peers' through their IPC mappings) in rank order into out;
//   4. end barrier: every rank's sum has read our d_ before any rank passes it, so our next run's GEMM (step 1) writes
//      d_ only after every peer finished with it. Both barriers use one slot (epochs only grow; a barrier waits for
//      each peer's epoch >= its own), and both are bounded (a timeout records the team's DeviceError).
GemmPullRs::GemmPullRs(Team& team, int64_t m, int64_t n, int64_t k) : team_(team), m_(m), n_(n), k_(k) {
  const int W = team.size();
  BRAID_REQUIRE(m > 0 && n > 0 && k > 0 && m % W == 0 && n % 8 == 0, "GemmPullRs: M % world == 0, N % 8 == 0");
  BRAID_REQUIRE(W <= kMaxSumSources, "GemmPullRs: at most 16 ranks");
  if (!team.peer_ok())
    throw UnavailableError("GEMM + pull reduce-scatter: needs peer access between all ranks (" + team.peer_status() +
                               ")",
                           __FILE__, __LINE__);
  cublas_ = std::make_unique<CublasGemm>();
  d_ = std::make_unique<SymmetricBuffer>(team, size_t(m) * size_t(n) * 2);  // collective
  slot_ = team.reserve_slots(1);
  sum_ctas_ = sum_ctas_all_sms();
}

GemmPullRs::~GemmPullRs() = default;  // d_'s release synchronizes the device (SymmetricBuffer)

void GemmPullRs::run(const void* a, const void* b, void* out, cudaStream_t stream) {
  BRAID_REQUIRE(out != nullptr && reinterpret_cast<uintptr_t>(out) % 16 == 0, "GemmPullRs::run: out 16-byte aligned");
  const int W = team_.size(), me = team_.rank();
  const size_t blk = size_t(m_ / W) * size_t(n_);  // elements of one rank's block (M/W, N)
  cublas_->run(a, b, d_->local(), m_, n_, k_, stream);
  memops::start_barrier(team_, slot_, stream);
  SumSources src{};
  for (int q = 0; q < W; ++q)  // rank q's partial of our rows; q == me: local
    src.p[q] = reinterpret_cast<const uint4*>(d_->peer_as<const __nv_bfloat16>(q) + size_t(me) * blk);
  const int64_t vecs = static_cast<int64_t>(blk / 8);
  const int blocks = static_cast<int>(std::min<int64_t>(sum_ctas_, (vecs + kSumThreads - 1) / kSumThreads));
  sum_slices_kernel<<<std::max(1, blocks), kSumThreads, 0, stream>>>(src, static_cast<uint4*>(out), vecs, W);
  BRAID_CHECK_LAUNCH();
  memops::start_barrier(team_, slot_, stream);
}

void GemmPullRs::check_error() const { team_.check_device_error("GEMM + pull reduce-scatter barrier"); }

}  // namespace braid::overlap
