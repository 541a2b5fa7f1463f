// peer_comm.cu — braid::model::Comm over the team's symmetric peer memory (CUDA IPC), no NCCL
// (include/braid/model/comm.hpp, make_peer_comm).
//
// Every method is rounds of four stream-ordered steps on the comm's own stream:
//   1. stage  — this rank's part of the round goes into its staging buffer (its symmetric memory);
//   2. meet   — barrier_kernel: one block per rank meets every rank on the comm's signal slot;
//   3. read   — the peers' staging buffers are read over peer memory into the output;
//   4. meet   — again, so that no rank restages (step 1 of the next round or method) while a peer still reads.
// (all_gather copies its own part straight into the output in step 1, beside the stage copy; at one rank it stages
// nothing. all_to_all_rows is one pipelined kernel and one meet by default: its contract is beside rows_push_kernel.)
// The engines differ only in who moves the bytes (copy()) and where a reduction reads (sum_round()). Engine kSm:
// copy_kernel stages and reads, sum_kernel reads the peers' staging and sums. Engine kCopyEngine: the copy engines
// stage and read (pulls straight into the output; for a reduction into the local receive buffer, which a sum_kernel
// of few CTAs then reduces with this rank's own staged part after step 4 — local reads only).
//
// Memory-ordering contract. Step 1 ends before step 2 starts (stream order: its writes are performed in this
// GPU's memory when the barrier kernel starts). The barrier kernel's fence.acq_rel.sys, then barrier_block's
// release store (signal_device.cuh), publish them: a peer whose barrier block acquires our flag and whose read
// kernel starts after its barrier kernel (stream order) reads the staged bytes. Step 4 orders every peer's
// reads of our buffer (their read kernels end before their barrier kernels start) before our next step 1. With
// the copy engines the same holds by stream order: a cudaMemcpyAsync completes (its bytes are in the destination's
// memory) before the next operation of its stream starts, so a stage copy precedes our barrier's release and a
// peer's pull follows its barrier's acquire.
// The barrier's epochs are device-side (SignalView::epochs), so a captured CUDA graph replays correctly; a
// wait is bounded by the team's timeout and records the team's DeviceError (Team::synchronize throws it).
#include <cuda_runtime.h>
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "braid/copy_device.cuh"
#include "braid/env.hpp"
#include "braid/errors.hpp"
#include "braid/model/comm.hpp"
#include "braid/quant.hpp"
#include "braid/signal_device.cuh"

namespace braid::model {
namespace {

struct config {
  static constexpr int kThreads = 256;          // copy and sum kernels
  static constexpr int kBlocksPerSm = 4;        // grid cap: a few waves of the copy/sum blocks, no more
  static constexpr int kVecBytes = 16;          // uint4 accesses where every pointer of a range is aligned
  static constexpr size_t kDefaultStaging = size_t(32) << 20;  // per rank
  static constexpr int kCeSumSmDivisor = 8;     // kCopyEngine's default sum grid: 1/8 of the SMs
  static constexpr int kSumUnroll = 4;          // 16-byte loads in flight per thread (and source) in copy/sum kernels
  static_assert(kThreads % 32 == 0 && kThreads >= kMaxPeers, "the barrier's block must cover every peer");
};

// Up to kMaxPeers independent byte ranges (blockIdx.y = range). Ranges of 0 bytes are allowed.
struct Copies {
  const uint8_t* src[kMaxPeers];
  uint8_t* dst[kMaxPeers];
  uint64_t bytes[kMaxPeers];
  int n;
};

// b bytes from s to d by the grid's threads (tid of stride): 16-byte vectors where both pointers allow, 16-bit
// elements or bytes otherwise.
__device__ __forceinline__ void copy_bytes(const uint8_t* __restrict__ s, uint8_t* __restrict__ d, uint64_t b,
                                           uint64_t tid, uint64_t stride) {
  const uintptr_t align = reinterpret_cast<uintptr_t>(s) | reinterpret_cast<uintptr_t>(d);
  if (align % config::kVecBytes == 0) {
    // kSumUnroll 16-byte loads in flight per thread (remote pulls are bound by the bytes in flight)
    const uint64_t v = b / config::kVecBytes;
    dev::copy_vectors<config::kSumUnroll>(reinterpret_cast<const uint4*>(s), reinterpret_cast<uint4*>(d), v, tid, stride);
    for (uint64_t j = v * config::kVecBytes + tid; j < b; j += stride) d[j] = s[j];
  } else if (align % 2 == 0) {  // element-aligned 16-bit data (every dtype of the layer)
    const uint64_t v = b / 2;
    for (uint64_t k = tid; k < v; k += stride)
      reinterpret_cast<uint16_t*>(d)[k] = reinterpret_cast<const uint16_t*>(s)[k];
    for (uint64_t k = v * 2 + tid; k < b; k += stride) d[k] = s[k];
  } else {
    for (uint64_t k = tid; k < b; k += stride) d[k] = s[k];
  }
}

__global__ void __launch_bounds__(config::kThreads) copy_kernel(Copies c) {
  const int i = blockIdx.y;
  const uint64_t tid = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x, stride = uint64_t(gridDim.x) * blockDim.x;
  copy_bytes(c.src[i], c.dst[i], c.bytes[i], tid, stride);
}

// ---- The rows exchange (Comm::all_to_all_rows): counts on the device, one round.
// M(src, dst): rows rank src sends to rank dst, from the device count matrix [world][world] (transposed on request).
struct RowsMat {
  const int* m;
  int world;
  bool transpose;
  __device__ int operator()(int src, int dst) const { return transpose ? m[dst * world + src] : m[src * world + dst]; }
};
struct RowsBound {
  uint64_t max_rows;  // every rank's rows sent and received
  DeviceError* err;   // where a violation is recorded (nullptr: the kernel traps)
  int rank;
};

// The same verdict on every rank (every rank holds the same matrix): no rank sends or receives more than the bound
// and no count is negative. A violation is recorded (block 0, thread 0) and nothing moves anywhere.
__device__ bool rows_fit(const RowsMat& M, const RowsBound& b) {
  for (int r = 0; r < M.world; ++r) {
    int64_t out = 0, in = 0;
    bool neg = false;
    for (int q = 0; q < M.world; ++q) out += M(r, q), in += M(q, r), neg |= M(r, q) < 0;
    const int64_t most = out > in ? out : in;
    if (neg || most > int64_t(b.max_rows)) {
      if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) {
        if (!b.err) __trap();
        dev::record_bound(b.err, b.rank, static_cast<uint32_t>(OpId::kRowsExchange), b.max_rows,
                          neg ? ~0ull : uint64_t(most));
      }
      return false;
    }
  }
  return true;
}

// This rank's rows sent (sum over d of M(me, d), packed in destination order) from in to dst: the stage step, or at
// one rank the whole exchange.
__global__ void __launch_bounds__(config::kThreads) rows_stage_kernel(const uint8_t* in, uint8_t* dst, RowsMat M,
                                                                       int me, uint64_t row_bytes, RowsBound bound) {
  if (!rows_fit(M, bound)) return;
  uint64_t rows = 0;
  for (int d = 0; d < M.world; ++d) rows += uint64_t(M(me, d));
  const uint64_t tid = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x, stride = uint64_t(gridDim.x) * blockDim.x;
  copy_bytes(in, dst, rows * row_bytes, tid, stride);
}

struct RowsPeers {
  const uint8_t* stage[kMaxPeers];  // rank r's staging buffer (over peer memory)
};
// The read step (blockIdx.y = source rank r): r's rows for this rank, which start in r's staging after its rows for
// ranks 0..me-1, go to out after the rows from ranks 0..r-1.
__global__ void __launch_bounds__(config::kThreads) rows_pull_kernel(RowsPeers p, uint8_t* out, RowsMat M, int me,
                                                                      uint64_t row_bytes, RowsBound bound) {
  if (!rows_fit(M, bound)) return;
  const int r = blockIdx.y;
  uint64_t from = 0, to = 0;
  for (int d = 0; d < me; ++d) from += uint64_t(M(r, d));
  for (int q = 0; q < r; ++q) to += uint64_t(M(q, me));
  const uint64_t tid = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x, stride = uint64_t(gridDim.x) * blockDim.x;
  copy_bytes(p.stage[r] + from * row_bytes, out + to * row_bytes, uint64_t(M(r, me)) * row_bytes, tid, stride);
}

// ---- The pipelined rows exchange (the default; BRAID_ROWS_EXCHANGE=staged picks the two-step one above). One kernel
// per call, push: rank q's rows for rank d go straight from q's input into d's staging (peer memory), at the offset
// where they land in d's output (after the rows from ranks 0..q-1), in rows::kChunks chunks per block; after each chunk a flag
// tells d, and d's receiving warps copy that chunk from its staging into the output while the next is in flight.
// Block b of G moves part b of every (source, destination) block of rows and owns signal slot slot0 + b.
// Roles: warps [0, kRoleWarps) send (remote stores), warps [kRoleWarps, 2 kRoleWarps) receive (local copies; first
// this rank's own rows, straight from the input, while the peers' first chunks are in flight).
// Memory-ordering contract. A chunk's remote stores by every sending warp, then named barrier 1 (bar.sync: the
// stores happen before what warp 0 does next), then lane 0 of warp 0: fence.acq_rel.sys and st.release.sys of the
// flag [slot][me] in d's array, value e0 + k + 1 (cumulative over the barrier: signal_device.cuh's
// warp_signal_peers contract). The receiver's thread 0 of its role waits until the flag reaches that value
// (wait_geq: relaxed polls, then fence.acq_rel.sys) and named barrier 2 hands the acquire to the receiving warps,
// which then read the chunk. Epochs: e0 = epochs[slot] at entry (one block per slot), every rank's epochs[slot]
// becomes e0 + rows::kChunks at exit (the same on every rank: every rank runs every call with the same grid), so the
// flags only grow and a captured graph replays. Reuse: the staging is written by peers, so no rank may push the
// next call's rows before every receiver has drained it — the barrier kernel after each call (meet()) orders that,
// as it orders the other methods' staging. A timeout records the team's DeviceError; the receiving warps keep
// their barrier protocol (no wait after the first failure) so that nothing hangs.
namespace rows {
constexpr int kRoleWarps = 8;                       // warps per role
constexpr int kThreads = 2 * kRoleWarps * 32;       // 512
constexpr int kRoleThreads = kRoleWarps * 32;
constexpr int kChunks = 8;                          // flags per (block, source, destination) and call
constexpr int kMaxBlocks = 32;                      // signal slots reserved (by comms that exchange rows); grid cap
constexpr int kDefaultBlocks = 32;                  // uncapped grid (BRAID_ROWS_BLOCKS overrides)
static_assert(kThreads <= 1024 && kRoleThreads % 32 == 0, "rows_push_kernel: one block of both roles");
static_assert(kChunks >= 1 && kMaxBlocks >= kDefaultBlocks, "rows_push_kernel: chunks and blocks");
}  // namespace rows

struct RowsStages {
  uint8_t* stage[kMaxPeers];  // rank r's staging (over peer memory; [me] is this rank's own)
};

__global__ void __launch_bounds__(rows::kThreads) rows_push_kernel(const uint8_t* __restrict__ in,
                                                                    uint8_t* __restrict__ out, RowsStages p, RowsMat M,
                                                                    int me, uint64_t row_bytes, RowsBound bound,
                                                                    SignalView v, int slot0) {
  if (!rows_fit(M, bound)) return;  // the same verdict on every rank: no flag, no epoch touched anywhere
  const int W = M.world, G = int(gridDim.x), b = int(blockIdx.x), slot = slot0 + b;
  __shared__ uint32_t s_e0;
  __shared__ int s_ok;
  if (threadIdx.x == 0) s_e0 = v.epochs[slot], s_ok = 1;
  __syncthreads();
  const uint32_t e0 = s_e0;
  const int warp = int(threadIdx.x) / 32;
  const uint64_t tid = threadIdx.x % rows::kRoleThreads, stride = rows::kRoleThreads;
  // Block b's part of n rows, chunk k of it (k = -1: the whole part): [lo, hi).
  auto part = [&](uint64_t n, int k, uint64_t& lo, uint64_t& hi) {
    const uint64_t blo = n * uint64_t(b) / uint64_t(G), bhi = n * uint64_t(b + 1) / uint64_t(G);
    if (k < 0) {
      lo = blo, hi = bhi;
      return;
    }
    lo = blo + (bhi - blo) * uint64_t(k) / rows::kChunks;
    hi = blo + (bhi - blo) * uint64_t(k + 1) / rows::kChunks;
  };
  uint64_t lo = 0, hi = 0;
  if (warp < rows::kRoleWarps) {  // send
    for (int j = 1; j < W; ++j) {
      const int d = (me + j) % W;
      uint64_t from = 0, at = 0;  // my rows for d start at `from` in my input, land at `at` in d's output
      for (int q = 0; q < d; ++q) from += uint64_t(M(me, q));
      for (int q = 0; q < me; ++q) at += uint64_t(M(q, d));
      const uint64_t n = uint64_t(M(me, d));
      for (int k = 0; k < rows::kChunks; ++k) {
        part(n, k, lo, hi);
        copy_bytes(in + (from + lo) * row_bytes, p.stage[d] + (at + lo) * row_bytes, (hi - lo) * row_bytes, tid, stride);
        dev::named_sync(1, rows::kRoleThreads);
        if (threadIdx.x == 0) {
          dev::fence_release();
          dev::store_release(dev::flag_at(v.peer_flags[d], slot, me), e0 + uint32_t(k) + 1);
        }
      }
    }
  } else {  // receive: my own rows first, then every peer's, chunk by chunk as they arrive
    const bool waiter = threadIdx.x == rows::kRoleThreads;
    {
      uint64_t from = 0, at = 0;
      for (int q = 0; q < me; ++q) from += uint64_t(M(me, q)), at += uint64_t(M(q, me));
      part(uint64_t(M(me, me)), -1, lo, hi);
      copy_bytes(in + (from + lo) * row_bytes, out + (at + lo) * row_bytes, (hi - lo) * row_bytes, tid, stride);
    }
    for (int j = 1; j < W; ++j) {
      const int r = (me - j + W) % W;
      uint64_t at = 0;  // r's rows start at `at` in my output (and in my staging)
      for (int q = 0; q < r; ++q) at += uint64_t(M(q, me));
      const uint64_t n = uint64_t(M(r, me));
      for (int k = 0; k < rows::kChunks; ++k) {
        if (waiter && s_ok &&
            !dev::wait_geq(v, dev::flag_at(v.local_flags, slot, r), e0 + uint32_t(k) + 1,
                           static_cast<uint32_t>(OpId::kRowsExchange), uint32_t(slot), r))
          s_ok = 0;
        dev::named_sync(2, rows::kRoleThreads);
        if (!s_ok) continue;  // a timeout is recorded: no more waits, the barrier protocol goes on
        part(n, k, lo, hi);
        copy_bytes(p.stage[me] + (at + lo) * row_bytes, out + (at + lo) * row_bytes, (hi - lo) * row_bytes, tid, stride);
      }
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) v.epochs[slot] = e0 + rows::kChunks;
}

int rows_grid(uint64_t bytes) {
  int dev = 0, sms = 0;
  BRAID_CUDA_CHECK(cudaGetDevice(&dev));
  BRAID_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  const uint64_t want = bytes / (uint64_t(config::kThreads) * config::kVecBytes * config::kSumUnroll) + 1;
  return int(std::min<uint64_t>(want, uint64_t(sms) * config::kBlocksPerSm));
}

// One block of the comm's signal slot meets every rank (see the contract at the top).
__global__ void barrier_kernel(SignalView v, int slot) {
  dev::fence_release();  // what this stream wrote before (the stage copy) is published by the release below
  dev::barrier_block(v, slot, static_cast<uint32_t>(OpId::kPeerComm));
}

// Element codecs: the value as float, and float back with one rounding (nearest even).
template <DType T>
struct Elem;
template <>
struct Elem<DType::kBF16> {
  using Bits = uint16_t;
  __device__ static float load(Bits b) { return quant::bf16_bits_to_float(b); }
  __device__ static Bits store(float f) { return quant::float_to_bf16_bits(f); }
};
template <>
struct Elem<DType::kFP16> {
  using Bits = uint16_t;
  __device__ static float load(Bits b) { return quant::half_bits_to_float(b); }
  __device__ static Bits store(float f) { return quant::float_to_half_bits(f); }
};
template <>
struct Elem<DType::kFP32> {
  using Bits = float;
  __device__ static float load(Bits b) { return b; }
  __device__ static Bits store(float f) { return f; }
};

struct Sources {
  const void* src[kMaxPeers];  // world of them, summed in this order
  int world;
};

// out[i] = round(((src0[i] + src1[i]) + src2[i]) + ...) in fp32, rounded once to T: the same bits on every rank.
// src, out: (count) elements of T. 16-byte vectors where every pointer is aligned (kSumUnroll of them in flight per
// source and thread, so that a grid of few CTAs still keeps HBM busy), element by element otherwise.
template <DType T>
__global__ void __launch_bounds__(config::kThreads) sum_kernel(Sources s, void* out, uint64_t count) {
  using E = Elem<T>;
  using Bits = typename E::Bits;
  constexpr int kPer = config::kVecBytes / int(sizeof(Bits));
  constexpr int U = config::kSumUnroll;
  const uint64_t tid = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x, stride = uint64_t(gridDim.x) * blockDim.x;
  uintptr_t align = reinterpret_cast<uintptr_t>(out);
  for (int r = 0; r < s.world; ++r) align |= reinterpret_cast<uintptr_t>(s.src[r]);
  uint64_t head = 0;
  if (align % config::kVecBytes == 0) {
    const uint64_t v = count / kPer;
    for (uint64_t k0 = tid; k0 < v; k0 += U * stride) {
      float acc[U][kPer];
      for (int r = 0; r < s.world; ++r) {
        const uint4* src = reinterpret_cast<const uint4*>(s.src[r]);
        uint4 raw[U];
#pragma unroll
        for (int u = 0; u < U; ++u)
          if (k0 + u * stride < v) raw[u] = src[k0 + u * stride];
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const Bits* b = reinterpret_cast<const Bits*>(&raw[u]);
#pragma unroll
          for (int j = 0; j < kPer; ++j) acc[u][j] = r == 0 ? E::load(b[j]) : acc[u][j] + E::load(b[j]);
        }
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (k0 + u * stride >= v) break;
        uint4 res;
        Bits* o = reinterpret_cast<Bits*>(&res);
#pragma unroll
        for (int j = 0; j < kPer; ++j) o[j] = E::store(acc[u][j]);
        reinterpret_cast<uint4*>(out)[k0 + u * stride] = res;
      }
    }
    head = v * kPer;
  }
  for (uint64_t i = head + tid; i < count; i += stride) {
    float acc = E::load(static_cast<const Bits*>(s.src[0])[i]);
    for (int r = 1; r < s.world; ++r) acc += E::load(static_cast<const Bits*>(s.src[r])[i]);
    static_cast<Bits*>(out)[i] = E::store(acc);
  }
}

// The copy engines' copies of one step (Engine::kCopyEngine), issued as one batch: cudaMemcpyBatchAsync with the hint
// to overlap with compute where the runtime has it (CUDA >= 12.8), cudaMemcpyAsync per copy otherwise and while the
// stream is being captured (the batch call is not capturable: cudaErrorStreamCaptureUnsupported, CUDA 13.0). Sources
// are read in stream order; empty ranges and copies onto themselves are skipped. Measured on one H200
// (docs/layer.md): a copy within one GPU runs as a kernel either way — the hint did not move it to a copy engine — so
// only the copies between two GPUs (the pulls) leave the SMs alone.
void copy_engines(const Copies& c, cudaStream_t st) {
  void* dst[kMaxPeers];
  const void* src[kMaxPeers];
  size_t bytes[kMaxPeers];
  size_t n = 0;
  for (int i = 0; i < c.n; ++i)
    if (c.bytes[i] != 0 && c.src[i] != c.dst[i]) dst[n] = c.dst[i], src[n] = c.src[i], bytes[n] = c.bytes[i], ++n;
  if (n == 0) return;
#if CUDART_VERSION >= 12080
  cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  BRAID_CUDA_CHECK(cudaStreamIsCapturing(st, &cap));
  if (cap == cudaStreamCaptureStatusNone) {
    cudaMemcpyAttributes attr{};
    attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    attr.flags = cudaMemcpyFlagPreferOverlapWithCompute;
    size_t first = 0;
#if CUDART_VERSION >= 13000
    BRAID_CUDA_CHECK(cudaMemcpyBatchAsync(dst, src, bytes, n, &attr, &first, 1, st));
#else
    size_t fail = 0;
    BRAID_CUDA_CHECK(cudaMemcpyBatchAsync(dst, const_cast<void**>(src), bytes, n, &attr, &first, 1, &fail, st));
#endif
    return;
  }
#endif
  for (size_t i = 0; i < n; ++i) BRAID_CUDA_CHECK(cudaMemcpyAsync(dst[i], src[i], bytes[i], cudaMemcpyDefault, st));
}

using Engine = PeerCommOptions::Engine;

class PeerComm final : public Comm {
 public:
  PeerComm(Team& team, const PeerCommOptions& opt) : team_(team), ce_(opt.engine == Engine::kCopyEngine) {
    if (!team.peer_ok())
      throw UnavailableError("peer comm: needs peer memory between all ranks (" + team.peer_status() + ")",
                             __FILE__, __LINE__);
    BRAID_REQUIRE(opt.sum_ctas >= 0, "peer comm: sum_ctas must be >= 0");
    BRAID_REQUIRE(opt.max_ctas >= 0, "peer comm: max_ctas must be >= 0");
    max_ctas_ = opt.max_ctas;
    stage_bytes_ = opt.staging_bytes ? opt.staging_bytes : config::kDefaultStaging;
    BRAID_REQUIRE(stage_bytes_ >= size_t(config::kVecBytes) * kMaxPeers,
                  "peer comm: staging_bytes below 16 bytes per peer slot");
    stage_bytes_ -= stage_bytes_ % config::kVecBytes;
    stage_ = std::make_unique<SymmetricBuffer>(team, stage_bytes_);  // collective
    slot_ = team.reserve_slots(1);
    staged_rows_ = env::choice("BRAID_ROWS_EXCHANGE", {"pipelined", "staged"}).value_or("pipelined") == "staged";
    rows_blocks_ = int(env::integer("BRAID_ROWS_BLOCKS", 1, rows::kMaxBlocks).value_or(rows::kDefaultBlocks));
    int dev = 0;
    BRAID_CUDA_CHECK(cudaGetDevice(&dev));
    BRAID_CUDA_CHECK(cudaDeviceGetAttribute(&sms_, cudaDevAttrMultiProcessorCount, dev));
    sum_ctas_ = opt.sum_ctas ? opt.sum_ctas : ce_ ? std::max(1, sms_ / config::kCeSumSmDivisor) : 0;
    if (max_ctas_ > 0) sum_ctas_ = sum_ctas_ > 0 ? std::min(sum_ctas_, max_ctas_) : max_ctas_;
    if (ce_) {
      BRAID_CUDA_CHECK(cudaMalloc(&recv_, stage_bytes_));
      int least = 0, greatest = 0;
      BRAID_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
      BRAID_CUDA_CHECK(cudaStreamCreateWithPriority(&st_, cudaStreamNonBlocking, greatest));
    } else {
      BRAID_CUDA_CHECK(cudaStreamCreateWithFlags(&st_, cudaStreamNonBlocking));
    }
    BRAID_CUDA_CHECK(cudaEventCreateWithFlags(&in_, cudaEventDisableTiming));
    BRAID_CUDA_CHECK(cudaEventCreateWithFlags(&out_, cudaEventDisableTiming));
  }
  ~PeerComm() override {
    cudaStreamSynchronize(st_);
    cudaEventDestroy(out_);
    cudaEventDestroy(in_);
    cudaStreamDestroy(st_);
    if (recv_) cudaFree(recv_);
    // stage_'s destructor: collective (an MPI barrier), so no peer still maps what we free
  }

  int rank() const override { return team_.rank(); }
  int size() const override { return team_.size(); }
  std::string name() const override { return ce_ ? "peer-ce" : "peer"; }

  void all_gather(const void* in, void* out, size_t count, DType t, cudaStream_t s) override {
    const size_t es = bench::dtype_size(t), W = size_t(size()), me = size_t(rank());
    const size_t C = stage_bytes_ / es;  // elements per round
    begin(s);
    for (size_t off = 0; off < count; off += C) {
      const size_t n = std::min(C, count - off);
      // Steps 1-2 with this rank's own part copied into the output beside the stage copy (one batch), so only the
      // peers' parts follow the barrier; at one rank nothing is staged.
      Copies c{};
      if (W > 1) add(c, bytes(in) + off * es, local(), n * es);
      add(c, bytes(in) + off * es, bytes(out) + (me * count + off) * es, n * es);
      copy(c);
      meet();
      Copies g{};
      for (size_t r = 0; r < W; ++r)
        if (r != me) add(g, peer(int(r)), bytes(out) + (r * count + off) * es, n * es);
      copy(g);
      meet();
    }
    end(s);
  }

  void reduce_scatter(const void* in, void* out, size_t count, DType t, cudaStream_t s) override {
    const size_t es = bench::dtype_size(t), W = size_t(size()), me = size_t(rank());
    const size_t C = per_peer(es);  // elements per (destination, round)
    begin(s);
    for (size_t off = 0; off < count; off += C) {
      const size_t n = std::min(C, count - off);
      Copies c{};
      for (size_t d = 0; d < W; ++d) add(c, bytes(in) + (d * count + off) * es, local() + d * C * es, n * es);
      copy(c);
      meet();
      sum_round(me * C * es, bytes(out) + off * es, n, t);
    }
    end(s);
  }

  void all_reduce(const void* in, void* out, size_t count, DType t, cudaStream_t s) override {
    const size_t es = bench::dtype_size(t);
    // elements per round (kCopyEngine: the receive buffer holds every peer's round)
    const size_t C = ce_ ? per_peer(es) : stage_bytes_ / es;
    begin(s);
    for (size_t off = 0; off < count; off += C) {
      const size_t n = std::min(C, count - off);
      stage(bytes(in) + off * es, n * es);  // out may equal in: every rank reads the staged copies only
      sum_round(0, bytes(out) + off * es, n, t);
    }
    end(s);
  }

  void all_to_all_v(const void* in, const size_t* send_counts, const size_t* send_displs, void* out,
                    const size_t* recv_counts, const size_t* recv_displs, DType t, cudaStream_t s) override {
    const size_t es = bench::dtype_size(t), W = size_t(size()), me = size_t(rank());
    const size_t C = per_peer(es);
    BRAID_REQUIRE(send_counts[me] == recv_counts[me], "peer comm: all_to_all_v's own segment differs in size (send " +
                                                          std::to_string(send_counts[me]) + ", receive " +
                                                          std::to_string(recv_counts[me]) + ")");
    const size_t rounds = agreed_rounds(send_counts, recv_counts, C);
    begin(s);
    for (size_t k = 0; k < rounds; ++k) {
      const size_t lo = k * C;
      auto part = [&](size_t total) { return total > lo ? std::min(C, total - lo) : size_t(0); };
      Copies c{};
      for (size_t d = 0; d < W; ++d)
        add(c, bytes(in) + (send_displs[d] + lo) * es, local() + d * C * es, part(send_counts[d]) * es);
      copy(c);
      meet();
      Copies g{};
      for (size_t r = 0; r < W; ++r)
        add(g, peer(int(r)) + me * C * es, bytes(out) + (recv_displs[r] + lo) * es, part(recv_counts[r]) * es);
      copy(g);
      meet();
    }
    end(s);
  }

  // One round whatever the sizes (the host does not know them), SM kernels for both engines (the copy engines need
  // their sizes on the host). By default pipelined: rows_push_kernel pushes every rank's rows into the receivers'
  // staging chunk by chunk while the receivers drain it (staging of at least max_rows rows, reserve_rows_exchange),
  // then every rank meets. BRAID_ROWS_EXCHANGE=staged: this rank's rows sent are staged whole, every rank meets, each
  // rank pulls its rows from every peer's staging (rows_pull_kernel: one grid row per source), every rank meets again.
  // Under a CTA cap (PeerCommOptions::max_ctas) the pipelined kernel runs that many blocks of both roles.
  void all_to_all_rows(const void* in, void* out, const int* rows_mat, bool transpose, size_t row_elems,
                       size_t max_rows, DType t, cudaStream_t s) override {
    const size_t row_bytes = row_elems * bench::dtype_size(t), W = size_t(size());
    BRAID_REQUIRE(max_rows * row_bytes <= rows_reserved_,
                  "peer comm: all_to_all_rows beyond reserve_rows_exchange (" + std::to_string(max_rows * row_bytes) +
                      " bytes, " + std::to_string(rows_reserved_) + " reserved)");
    BRAID_REQUIRE(rows_slot_ >= 0, "peer comm: all_to_all_rows before reserve_rows_exchange");
    const RowsMat M{rows_mat, int(W), transpose};
    const SignalView v = team_.signals();
    const RowsBound bound{max_rows, v.err, rank()};
    const int g = max_ctas_ > 0 ? std::min(rows_grid(max_rows * row_bytes), max_ctas_) : rows_grid(max_rows * row_bytes);
    begin(s);
    if (W == 1) {
      rows_stage_kernel<<<g, config::kThreads, 0, st_>>>(bytes(in), bytes(out), M, 0, row_bytes, bound);
      BRAID_CHECK_LAUNCH();
      return end(s);
    }
    if (!staged_rows_) {  // the pipelined push (rows_push_kernel), then one barrier: the staging is free again
      RowsStages p{};
      for (size_t r = 0; r < W; ++r) p.stage[r] = const_cast<uint8_t*>(peer(int(r)));  // written: the push
      const int gb = max_ctas_ > 0 ? std::min(max_ctas_, rows::kMaxBlocks) : rows_blocks_;
      rows_push_kernel<<<gb, rows::kThreads, 0, st_>>>(bytes(in), bytes(out), p, M, rank(), row_bytes, bound, v,
                                                       rows_slot_);
      BRAID_CHECK_LAUNCH();
      meet();
      return end(s);
    }
    rows_stage_kernel<<<g, config::kThreads, 0, st_>>>(bytes(in), local(), M, rank(), row_bytes, bound);
    BRAID_CHECK_LAUNCH();
    meet();
    RowsPeers p{};
    for (size_t r = 0; r < W; ++r) p.stage[r] = peer(int(r));
    // one grid row per source: under a cap the rows share it (max_ctas in all, at least one per source)
    const int gp = max_ctas_ > 0 ? std::max(1, std::min(g, max_ctas_ / int(W))) : g;
    rows_pull_kernel<<<dim3(gp, unsigned(W)), config::kThreads, 0, st_>>>(p, bytes(out), M, rank(), row_bytes, bound);
    BRAID_CHECK_LAUNCH();
    meet();
    end(s);
  }

  void reserve_rows_exchange(size_t max_rows, size_t row_elems, DType t) override {
    // Collective, so the slots are the same on every rank; only comms that exchange rows take them (a team has a
    // fixed number and never gets them back).
    if (rows_slot_ < 0) rows_slot_ = team_.reserve_slots(rows::kMaxBlocks);
    size_t need = max_rows * row_elems * bench::dtype_size(t);
    need += (config::kVecBytes - need % config::kVecBytes) % config::kVecBytes;
    rows_reserved_ = std::max(rows_reserved_, need);
    if (need <= stage_bytes_) return;  // the same decision on every rank (the same arguments)
    BRAID_CUDA_CHECK(cudaStreamSynchronize(st_));
    stage_.reset();  // collective: every rank unmaps the old staging before it is freed
    stage_ = std::make_unique<SymmetricBuffer>(team_, need);
    stage_bytes_ = need;
    if (ce_) {
      BRAID_CUDA_CHECK(cudaFree(recv_));
      recv_ = nullptr;
      BRAID_CUDA_CHECK(cudaMalloc(&recv_, stage_bytes_));
    }
  }

 private:
  // Every rank must take part in the same number of rounds: the largest segment of any pair, agreed over MPI.
  size_t agreed_rounds(const size_t* send_counts, const size_t* recv_counts, size_t C) const {
    unsigned long long most = 0;
    for (size_t r = 0; r < size_t(size()); ++r)
      most = std::max<unsigned long long>(most, std::max(send_counts[r], recv_counts[r]));
    BRAID_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &most, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, team_.mpi()));
    return (size_t(most) + C - 1) / C;
  }

  static const uint8_t* bytes(const void* p) { return static_cast<const uint8_t*>(p); }
  static uint8_t* bytes(void* p) { return static_cast<uint8_t*>(p); }
  uint8_t* local() const { return stage_->local_as<uint8_t>(); }
  const uint8_t* peer(int r) const { return stage_->peer_as<uint8_t>(r); }
  // Elements per (peer, round) of the per-peer staging layout, a multiple of 16 bytes.
  size_t per_peer(size_t es) const {
    const size_t slot = stage_bytes_ / size_t(size());
    return (slot - slot % config::kVecBytes) / es;
  }
  static void add(Copies& c, const uint8_t* src, uint8_t* dst, size_t n) {
    c.src[c.n] = src, c.dst[c.n] = dst, c.bytes[c.n] = n, ++c.n;
  }
  int grid(uint64_t units) const {
    const uint64_t want = (units + config::kThreads - 1) / config::kThreads;
    const uint64_t cap = max_ctas_ > 0 ? uint64_t(max_ctas_) : uint64_t(sms_) * config::kBlocksPerSm;
    return int(std::max<uint64_t>(1, std::min<uint64_t>(want, cap)));
  }
  void copy(const Copies& c) {
    if (ce_) return copy_engines(c, st_);
    uint64_t most = 0;
    for (int i = 0; i < c.n; ++i) most = std::max(most, c.bytes[i]);
    if (most == 0) return;
    int g = grid(most / config::kVecBytes + 1);
    if (max_ctas_ > 0) g = std::max(1, std::min(g, max_ctas_ / c.n));  // the ranges share the cap
    copy_kernel<<<dim3(g, c.n), config::kThreads, 0, st_>>>(c);
    BRAID_CHECK_LAUNCH();
  }
  void sum(const Sources& s, void* out, size_t n, DType t) {
    if (n == 0) return;
    int g = grid(n * bench::dtype_size(t) / config::kVecBytes + 1);
    if (sum_ctas_ > 0) g = std::min(g, sum_ctas_);
    switch (t) {
      case DType::kBF16: sum_kernel<DType::kBF16><<<g, config::kThreads, 0, st_>>>(s, out, n); break;
      case DType::kFP16: sum_kernel<DType::kFP16><<<g, config::kThreads, 0, st_>>>(s, out, n); break;
      case DType::kFP32: sum_kernel<DType::kFP32><<<g, config::kThreads, 0, st_>>>(s, out, n); break;
    }
    BRAID_CHECK_LAUNCH();
  }
  // Steps 3 and 4 of a reduction round: out[n] = the sum in rank order of every rank's staged part at byte `at` of
  // its staging buffer. kSm: the sum kernel reads the peers' staging over peer memory, then every rank meets.
  // kCopyEngine: the peers' parts are pulled into the receive buffer (slot r: rank r's), every rank meets (the
  // staging is free again), then the sum reads local memory only — this rank's own staging and the receive slots.
  void sum_round(size_t at, void* out, size_t n, DType t) {
    const size_t es = bench::dtype_size(t), W = size_t(size()), me = size_t(rank()), slot = per_peer(es) * es;
    Sources src{};
    src.world = int(W);
    if (!ce_) {
      for (size_t r = 0; r < W; ++r) src.src[r] = peer(int(r)) + at;
      sum(src, out, n, t);
      meet();
      return;
    }
    Copies pull{};
    for (size_t r = 0; r < W; ++r)
      if (r != me) add(pull, peer(int(r)) + at, recv_ + r * slot, n * es);
    copy(pull);
    meet();
    for (size_t r = 0; r < W; ++r) src.src[r] = r == me ? local() + at : recv_ + r * slot;
    sum(src, out, n, t);
  }
  // Steps 1 and 2 for one contiguous piece: it goes to the start of this rank's staging buffer, then every rank meets.
  void stage(const uint8_t* src, size_t n) {
    Copies c{};
    add(c, src, local(), n);
    copy(c);
    meet();
  }
  void meet() {
    barrier_kernel<<<1, 32, 0, st_>>>(team_.signals(), slot_);
    BRAID_CHECK_LAUNCH();
  }
  // The comm's stream joins the caller's (and leaves it at end): the methods run in issue order.
  void begin(cudaStream_t s) {
    BRAID_CUDA_CHECK(cudaEventRecord(in_, s));
    BRAID_CUDA_CHECK(cudaStreamWaitEvent(st_, in_, 0));
  }
  void end(cudaStream_t s) {
    BRAID_CUDA_CHECK(cudaEventRecord(out_, st_));
    BRAID_CUDA_CHECK(cudaStreamWaitEvent(s, out_, 0));
  }

  Team& team_;
  const bool ce_;  // Engine::kCopyEngine
  size_t stage_bytes_ = 0;
  size_t rows_reserved_ = 0;                // bytes all_to_all_rows may move per rank (reserve_rows_exchange)
  std::unique_ptr<SymmetricBuffer> stage_;  // (stage_bytes_) per rank
  int slot_ = 0;
  int rows_slot_ = -1;  // rows::kMaxBlocks slots from the first reserve_rows_exchange: rows_push_kernel's block b owns rows_slot_ + b
  bool staged_rows_ = false;                 // BRAID_ROWS_EXCHANGE=staged: the two-step rows exchange
  int rows_blocks_ = rows::kDefaultBlocks;   // rows_push_kernel's grid without a cap (BRAID_ROWS_BLOCKS)
  int sms_ = 0;
  int sum_ctas_ = 0;          // grid cap of sum_kernel (0: none)
  int max_ctas_ = 0;          // grid cap of every kernel (0: none; PeerCommOptions::max_ctas)
  uint8_t* recv_ = nullptr;   // kCopyEngine: (stage_bytes_) local, slot r (per_peer elements) = rank r's pulled part
  cudaStream_t st_ = nullptr;
  cudaEvent_t in_ = nullptr, out_ = nullptr;
};

}  // namespace

// The base class's rows exchange: one rank only (a device-counted copy; a bound exceeded traps, there is no team).
void Comm::all_to_all_rows(const void* in, void* out, const int* rows_mat, bool transpose, size_t row_elems,
                           size_t max_rows, DType t, cudaStream_t s) {
  if (size() != 1)
    throw UnavailableError("comm '" + name() + "': no all-to-all with device counts at " + std::to_string(size()) +
                               " ranks",
                           __FILE__, __LINE__);
  const size_t row_bytes = row_elems * bench::dtype_size(t);
  const RowsBound bound{max_rows, nullptr, 0};
  rows_stage_kernel<<<rows_grid(max_rows * row_bytes), config::kThreads, 0, s>>>(
      static_cast<const uint8_t*>(in), static_cast<uint8_t*>(out), RowsMat{rows_mat, 1, transpose}, 0, row_bytes, bound);
  BRAID_CHECK_LAUNCH();
}

void Comm::reserve_rows_exchange(size_t, size_t, DType) {
  if (size() != 1)
    throw UnavailableError("comm '" + name() + "': no all-to-all with device counts at " + std::to_string(size()) +
                               " ranks",
                           __FILE__, __LINE__);
}

std::unique_ptr<Comm> make_peer_comm(Team& team, size_t staging_bytes) {
  PeerCommOptions o;
  o.staging_bytes = staging_bytes;
  return std::make_unique<PeerComm>(team, o);
}

std::unique_ptr<Comm> make_peer_comm(Team& team, const PeerCommOptions& opt) {
  return std::make_unique<PeerComm>(team, opt);
}

bool peer_engine_from_name(const std::string& name, PeerCommOptions::Engine* engine) {
  if (name == "peer") return *engine = Engine::kSm, true;
  if (name == "peer-ce") return *engine = Engine::kCopyEngine, true;
  return false;
}

std::unique_ptr<Comm> make_default_comm(Team& team, bool second) {
  if (!team.has_nccl()) return make_peer_comm(team);
  return second ? make_nccl_comm_split(team) : make_nccl_comm(team);
}

}  // namespace braid::model
