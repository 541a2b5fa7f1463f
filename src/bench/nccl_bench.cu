// `braid bench nccl` and `braid bench p2p`.
#include <cuda.h>

#include <algorithm>
#include <cstdio>
#include <iostream>

#include "braid/bench.hpp"
#include "braid/copy_device.cuh"
#include "braid/runtime.hpp"

namespace braid::bench {
namespace {

using Counts = CollectiveCounts;

void enqueue(const std::string& op, const void* in, void* out, const Counts& c, DType t, Team& team,
             cudaStream_t s) {
  const auto dt = nccl_dtype(t);
  ncclComm_t comm = team.nccl();
  if (op == "allreduce") {
    BRAID_NCCL_CHECK(ncclAllReduce(in, out, c.in, dt, ncclSum, comm, s));
  } else if (op == "reducescatter") {
    BRAID_NCCL_CHECK(ncclReduceScatter(in, out, c.out, dt, ncclSum, comm, s));
  } else if (op == "allgather") {
    BRAID_NCCL_CHECK(ncclAllGather(in, out, c.in, dt, comm, s));
  } else {  // alltoall as grouped send/recv (NCCL 2.28 has no ncclAlltoAll)
    const size_t chunk = c.in / team.size();
    const size_t es = dtype_size(t);
    BRAID_NCCL_CHECK(ncclGroupStart());
    for (int r = 0; r < team.size(); ++r) {
      BRAID_NCCL_CHECK(ncclSend(static_cast<const char*>(in) + r * chunk * es, chunk, dt, r, comm, s));
      BRAID_NCCL_CHECK(ncclRecv(static_cast<char*>(out) + r * chunk * es, chunk, dt, r, comm, s));
    }
    BRAID_NCCL_CHECK(ncclGroupEnd());
  }
}

}  // namespace

size_t run_nccl_bench(Team& team, const NcclBenchArgs& a) {
  const size_t es = dtype_size(a.dtype);
  const int world = team.size();
  cudaStream_t s = team.stream();
  const Counts cmax = collective_counts(a.op, a.max_bytes, es, world);
  // One input pool and one output pool, each at least 128 MiB; small sizes rotate through slices of
  // them so that every timed launch reads and writes memory that is not in L2.
  const size_t pool_in = std::max<size_t>(cmax.in * es, size_t(128) << 20);
  const size_t pool_out = std::max<size_t>(cmax.out * es, size_t(128) << 20);
  char* in_pool = nullptr;
  char* out_pool = nullptr;
  BRAID_CUDA_CHECK(cudaMalloc(&in_pool, pool_in));
  BRAID_CUDA_CHECK(cudaMalloc(&out_pool, pool_out));
  if (team.rank() == 0) {
    std::printf("# braid bench nccl: op %s, dtype %s, %d ranks, %d warm-up + %d timed iterations%s, median of the "
                "slowest rank\n",
                a.op.c_str(), dtype_name(a.dtype), world, a.timing.warmup, a.timing.iters, a.graph ? " (CUDA graph)" : "");
    std::printf("# %12s %12s %6s %6s %10s %10s %10s %9s %9s %7s\n", "size(B)", "count", "type", "redop", "time(us)",
                "p10(us)", "p90(us)", "algbw", "busbw", "#wrong");
  }
  size_t total_wrong = 0;
  double busbw_sum = 0;
  int rows = 0;
  for (size_t bytes = a.min_bytes; bytes <= a.max_bytes;
       bytes = std::max(bytes + 1, static_cast<size_t>(bytes * a.factor))) {
    const Counts c = collective_counts(a.op, bytes, es, world);
    if (c.in == 0 || c.out == 0) continue;
    const size_t in_bytes = c.in * es, out_bytes = c.out * es;
    // Slices are 256-byte aligned; as many as rotation needs and the pools hold.
    const size_t in_stride = (in_bytes + 255) / 256 * 256, out_stride = (out_bytes + 255) / 256 * 256;
    const int sets = static_cast<int>(std::min<size_t>({static_cast<size_t>(rotation_sets(in_bytes + out_bytes)),
                                                        pool_in / in_stride, pool_out / out_stride}));
    std::vector<void*> ins(sets), outs(sets);
    for (int i = 0; i < sets; ++i) {
      ins[i] = in_pool + i * in_stride;
      outs[i] = out_pool + i * out_stride;
    }
    const uint64_t seed = 0xB5A1D000ULL + bytes;
    // Random inputs in every set; verify set 0's output before timing.
    for (int i = 0; i < sets; ++i) fill_pattern(ins[i], a.dtype, c.in, seed, team.rank(), 0, s);
    BRAID_CUDA_CHECK(cudaMemsetAsync(outs[0], 0xFF, c.out * es, s));  // poison: NaN in every dtype
    enqueue(a.op, ins[0], outs[0], c, a.dtype, team, s);
    team.synchronize(s, "nccl bench verification run");
    size_t wrong = count_wrong(a.op, outs[0], a.dtype, c.out, seed, team.rank(), world, s);
    unsigned long long w = wrong;
    BRAID_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &w, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, team.mpi()));
    wrong = static_cast<size_t>(w);
    total_wrong += wrong;

    std::vector<double> us;
    if (a.graph) {
      // One graph holding `sets` launches (one per buffer set); per-call time = replay / sets.
      us = time_graph_iterations(&team, s, a.timing, sets,
                                 [&](int k) { enqueue(a.op, ins[k], outs[k], c, a.dtype, team, s); });
    } else {
      us = time_iterations(&team, s, a.timing, [&](int i) {
        const int k = i % sets;
        enqueue(a.op, ins[k], outs[k], c, a.dtype, team, s);
      });
    }
    const Stats st = summarize(us);
    const size_t size_bytes = std::max(c.in, c.out) * es;
    const double algbw = size_bytes / (st.median_us * 1e-6) / 1e9;
    const double busbw = algbw * busbw_factor(a.op, world);
    busbw_sum += busbw;
    ++rows;
    if (team.rank() == 0) {
      std::printf("  %12zu %12zu %6s %6s %10.2f %10.2f %10.2f %9.2f %9.2f %7zu\n", size_bytes, std::max(c.in, c.out),
                  dtype_name(a.dtype), a.op == "allgather" || a.op == "alltoall" ? "none" : "sum", st.median_us,
                  st.p10_us, st.p90_us, algbw, busbw, wrong);
      Json j;
      j.add("op", a.op).add("algo", std::string("nccl")).add("dtype", dtype_name(a.dtype)).add("world", world)
          .add("bytes", size_bytes).add("count", std::max(c.in, c.out)).add("time_us", st.median_us)
          .add("p10_us", st.p10_us).add("p90_us", st.p90_us).add("iters", st.iters).add("algbw", algbw)
          .add("busbw", busbw).add("baseline_algo", std::string("nccl")).add("baseline_time_us", st.median_us)
          .add("speedup", 1.0).add("correct", wrong == 0).add("wrong", wrong).add("graph", a.graph)
          .add("buffer_sets", sets).add_context(a.ctx);
      append_jsonl(a.json, j.str());
    }
    if (bytes >= a.max_bytes) break;
  }
  if (team.rank() == 0) {
    std::printf("# Out of bounds values : %zu %s\n", total_wrong, total_wrong ? "FAILED" : "OK");
    std::printf("# Avg bus bandwidth    : %.2f GB/s\n", rows ? busbw_sum / rows : 0.0);
  }
  cudaFree(in_pool);
  cudaFree(out_pool);
  return total_wrong;
}

// ---------------------------------------------------------------------------------------------------
// Peer bandwidth

namespace {
// 16-byte vector copy with a grid-stride loop; `src` or `dst` is a peer's memory. U loads are issued
// before their U stores (U = 1: one load in flight per thread; U = 4 keeps four, for remote loads, whose
// rate is bound by the bytes in flight): dev::copy_vectors.
template <int U>
__global__ void copy_kernel(const int4* __restrict__ src, int4* __restrict__ dst, size_t n16) {
  dev::copy_vectors<U>(src, dst, n16, blockIdx.x * uint64_t(blockDim.x) + threadIdx.x, uint64_t(gridDim.x) * blockDim.x);
}
// Copies through shared memory by the TMA unit (bulk copies, braid/copy_device.cuh), kBulkChunk bytes per copy,
// kBulkStages stages per block, chunks taken block-cyclically. Push: the threads load a chunk from local memory into
// a stage, fence it to the async proxy and meet; thread 0 copies the stage to the peer as one bulk group; a stage is
// rewritten once its group's reads are done. Pull: thread 0 keeps kBulkStages loads from the peer in flight, each
// completing on its stage's mbarrier; every thread waits for the stage's phase (bounded: a lost copy traps), stores
// the chunk to local memory, and a barrier frees the stage. The question they answer: does the link carry bulk
// copies faster than 16-byte loads and stores (docs/flash-communication.md, "Sixty-first session").
constexpr int kBulkStages = 4;
constexpr uint32_t kBulkChunk = 8192;
__global__ void __launch_bounds__(512) bulk_push_kernel(const int4* __restrict__ src, char* dst, size_t nchunks) {
  __shared__ alignas(128) int4 stage[kBulkStages][kBulkChunk / 16];
  int k = 0;
  for (size_t c = blockIdx.x; c < nchunks; c += gridDim.x, ++k) {
    const int st = k % kBulkStages;
    if (k >= kBulkStages && threadIdx.x == 0) dev::bulk_wait_read<kBulkStages - 1>();  // stage st's group read
    __syncthreads();
    const int4* x = src + c * (kBulkChunk / 16);
    for (uint32_t i = threadIdx.x; i < kBulkChunk / 16; i += blockDim.x) stage[st][i] = x[i];
    dev::fence_proxy_async_shared();
    __syncthreads();
    if (threadIdx.x == 0) {
      dev::bulk_copy_s2g(dst + c * kBulkChunk, &stage[st][0], kBulkChunk);
      dev::bulk_commit();
    }
  }
  if (threadIdx.x == 0) dev::bulk_wait_all();
}
__global__ void __launch_bounds__(512) bulk_pull_kernel(const char* src, int4* __restrict__ dst, size_t nchunks) {
  __shared__ alignas(128) int4 stage[kBulkStages][kBulkChunk / 16];
  __shared__ alignas(8) uint64_t bar[kBulkStages];
  if (threadIdx.x == 0) {
    for (int i = 0; i < kBulkStages; ++i) dev::mbarrier_init(&bar[i], 1);
    dev::mbarrier_init_fence();
    for (int i = 0; i < kBulkStages; ++i)
      if (const size_t c = blockIdx.x + size_t(i) * gridDim.x; c < nchunks)
        dev::bulk_copy_g2s(&stage[i][0], src + c * kBulkChunk, kBulkChunk, &bar[i]);
  }
  __syncthreads();
  int k = 0;
  for (size_t c = blockIdx.x; c < nchunks; c += gridDim.x, ++k) {
    const int st = k % kBulkStages;
    if (!dev::mbarrier_wait_parity(&bar[st], static_cast<uint32_t>(k / kBulkStages) & 1u, 1ll << 35))
      __trap();  // ~17 s
    int4* y = dst + c * (kBulkChunk / 16);
    for (uint32_t i = threadIdx.x; i < kBulkChunk / 16; i += blockDim.x) y[i] = stage[st][i];
    __syncthreads();  // every thread has read the stage before it is loaded again
    const size_t next = c + size_t(kBulkStages) * gridDim.x;
    if (threadIdx.x == 0 && next < nchunks)
      dev::bulk_copy_g2s(&stage[st][0], src + next * kBulkChunk, kBulkChunk, &bar[st]);
  }
}
__global__ void noop_kernel() {}
__global__ void compare_kernel(const uint32_t* a, const uint32_t* b, size_t n, unsigned long long* wrong) {
  unsigned long long w = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    w += a[i] != b[i];
  if (w) atomicAdd(wrong, w);
}
}  // namespace

size_t run_p2p_bench(Team& team, const P2pBenchArgs& a) {
  if (team.size() < 2) throw UnavailableError("p2p bench needs 2 ranks", __FILE__, __LINE__);
  if (!team.peer_ok()) throw UnavailableError("p2p bench needs peer memory: " + team.peer_status(), __FILE__, __LINE__);
  SymmetricBuffer buf(team, a.bytes);  // [bytes] push destination, pull source
  void* src = nullptr;                  // [bytes] local push source
  void* dst = nullptr;                  // [bytes] local pull destination
  BRAID_CUDA_CHECK(cudaMalloc(&src, a.bytes));
  BRAID_CUDA_CHECK(cudaMalloc(&dst, a.bytes));
  cudaStream_t s = team.stream();
  fill_pattern(buf.local(), DType::kFP32, a.bytes / 4, 7, team.rank(), 0, s);
  fill_pattern(src, DType::kFP32, a.bytes / 4, 11, team.rank(), 0, s);
  team.synchronize(s, "p2p setup");
  team.barrier();
  const size_t n16 = a.bytes / 16;
  size_t total_wrong = 0;
  // Rank pairs (0,1), (2,3), ...; one-way: only the even rank of a pair moves data; both ways: both at once.
  const int peer = team.rank() ^ 1;
  const bool paired = peer < team.size();
  const bool mover = paired && (a.bidir || team.rank() % 2 == 0);
  if (team.rank() == 0) {
    std::printf("# braid bench p2p: rank 0 %s rank 1, %s per transfer%s, median of %d\n", a.bidir ? "<->" : "->",
                format_size(a.bytes).c_str(), a.bidir ? " each way at once (GB/s per direction)" : "",
                a.timing.iters);
    std::printf("# %-18s %7s %10s %10s %7s\n", "method", "blocks", "time(us)", "GB/s", "#wrong");
  }
  struct Case {
    std::string method;
    int blocks;
  };
  std::vector<Case> cases{{"copy-engine", 0}};
  if (a.chunks > 1) {
    cases.push_back({"copy-engine-chunks", 0});
    cases.push_back({"copy-engine-flag", 0});
    cases.push_back({"copy-engine-event", 0});
  }
  // The chunked copy-engine cases: a flag word on every rank, cuStreamWriteValue32, a second stream.
  SymmetricBuffer flag(team, 256);
  using WriteValueFn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
  WriteValueFn write_value = nullptr;
  cudaStream_t side = nullptr;
  std::vector<cudaEvent_t> evs;
  if (a.chunks > 1) {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult qr{};
    BRAID_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuStreamWriteValue32", &fn, 12000, cudaEnableDefault, &qr));
    if (qr != cudaDriverEntryPointSuccess || fn == nullptr)
      throw UnavailableError("bench p2p --chunks needs cuStreamWriteValue32", __FILE__, __LINE__);
    write_value = reinterpret_cast<WriteValueFn>(fn);
    BRAID_CUDA_CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
    evs.resize(a.chunks);
    for (auto& e : evs) BRAID_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  }
  uint32_t flag_value = 0;
  for (int b : a.blocks) cases.push_back({"sm-push", b});
  for (int b : a.blocks) cases.push_back({"sm-pull", b});
  for (int b : a.blocks) cases.push_back({"sm-pull-u4", b});
  if (a.bytes % kBulkChunk == 0) {  // bulk copies of whole 8 KiB chunks
    for (int b : a.blocks) cases.push_back({"sm-push-bulk", b});
    for (int b : a.blocks) cases.push_back({"sm-pull-bulk", b});
  }
  for (const auto& cs : cases) {
    // Both ranks follow the same sequence; a rank that does not move data is the remote end.
    team.barrier();
    if (mover) {
      void* remote = buf.peer(peer);
      auto op = [&](int) {
        if (cs.method == "copy-engine") {
          BRAID_CUDA_CHECK(cudaMemcpyAsync(remote, src, a.bytes, cudaMemcpyDefault, s));
        } else if (cs.method.rfind("copy-engine-", 0) == 0) {
          const size_t cb = (a.bytes / a.chunks) & ~size_t(255);
          for (int k = 0; k < a.chunks; ++k) {
            const size_t off = k * cb, len = k + 1 == a.chunks ? a.bytes - off : cb;
            if (cs.method == "copy-engine-event") {  // the copy waits for a kernel on another stream
              noop_kernel<<<1, 32, 0, side>>>();
              BRAID_CHECK_LAUNCH();
              BRAID_CUDA_CHECK(cudaEventRecord(evs[k], side));
              BRAID_CUDA_CHECK(cudaStreamWaitEvent(s, evs[k], 0));
            }
            BRAID_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(remote) + off, static_cast<const char*>(src) + off,
                                             len, cudaMemcpyDefault, s));
            if (cs.method != "copy-engine-chunks") {  // flag the peer after each copy (default: with a barrier)
              const CUresult rc = write_value(reinterpret_cast<CUstream>(s),
                                              reinterpret_cast<CUdeviceptr>(flag.peer(peer)), ++flag_value, 0u);
              if (rc != CUDA_SUCCESS) ::braid::detail::throw_cu(rc, "cuStreamWriteValue32", __FILE__, __LINE__);
            }
          }
        } else if (cs.method == "sm-push") {
          copy_kernel<1><<<cs.blocks, 512, 0, s>>>(static_cast<const int4*>(src), static_cast<int4*>(remote), n16);
          BRAID_CHECK_LAUNCH();
        } else if (cs.method == "sm-push-bulk") {
          bulk_push_kernel<<<cs.blocks, 512, 0, s>>>(static_cast<const int4*>(src), static_cast<char*>(remote),
                                                     a.bytes / kBulkChunk);
          BRAID_CHECK_LAUNCH();
        } else if (cs.method == "sm-pull-bulk") {
          bulk_pull_kernel<<<cs.blocks, 512, 0, s>>>(static_cast<const char*>(remote), static_cast<int4*>(dst),
                                                     a.bytes / kBulkChunk);
          BRAID_CHECK_LAUNCH();
        } else if (cs.method == "sm-pull") {
          copy_kernel<1><<<cs.blocks, 512, 0, s>>>(static_cast<const int4*>(remote), static_cast<int4*>(dst), n16);
          BRAID_CHECK_LAUNCH();
        } else {
          copy_kernel<4><<<cs.blocks, 512, 0, s>>>(static_cast<const int4*>(remote), static_cast<int4*>(dst), n16);
          BRAID_CHECK_LAUNCH();
        }
      };
      const std::vector<double> us = time_iterations(nullptr, s, a.timing, op);
      team.synchronize(s, "p2p timing");
      // Verify after every mover is done: the destination equals the source.
      if (a.bidir) team.barrier();
      unsigned long long wrong = 0, *d = nullptr;
      BRAID_CUDA_CHECK(cudaMalloc(&d, sizeof(*d)));
      BRAID_CUDA_CHECK(cudaMemsetAsync(d, 0, sizeof(*d), s));
      const bool pull = cs.method.rfind("sm-pull", 0) == 0;
      const uint32_t* x = static_cast<const uint32_t*>(pull ? remote : src);
      const uint32_t* y = static_cast<const uint32_t*>(pull ? dst : remote);
      compare_kernel<<<264, 512, 0, s>>>(x, y, a.bytes / 4, d);
      BRAID_CHECK_LAUNCH();
      BRAID_CUDA_CHECK(cudaMemcpyAsync(&wrong, d, sizeof(wrong), cudaMemcpyDeviceToHost, s));
      BRAID_CUDA_CHECK(cudaStreamSynchronize(s));
      cudaFree(d);
      const Stats st = summarize(us);
      const double gbs = a.bytes / (st.median_us * 1e-6) / 1e9;
      if (team.rank() == 0)
        std::printf("  %-18s %7d %10.2f %10.2f %7llu\n", cs.method.c_str(), cs.blocks, st.median_us, gbs, wrong);
      else if (a.bidir && team.rank() == 1)
        std::printf("  %-18s %7d %10.2f %10.2f %7llu   (rank 1)\n", cs.method.c_str(), cs.blocks, st.median_us, gbs,
                    wrong);
      Json j;
      j.add("op", std::string(a.bidir ? "p2p-copy-bidir" : "p2p-copy")).add("algo", cs.method)
          .add("dtype", std::string("bytes")).add("world", 2).add("rank", team.rank()).add("bytes", a.bytes)
          .add("blocks", cs.blocks).add("time_us", st.median_us).add("p10_us", st.p10_us).add("p90_us", st.p90_us)
          .add("iters", st.iters).add("algbw", gbs).add("busbw", gbs).add("baseline_algo", std::string("copy-engine"))
          .add("correct", wrong == 0).add("wrong", (size_t)wrong).add_context(a.ctx);
      if (team.rank() <= 1) append_jsonl(a.json, j.str());
      total_wrong += wrong;
    } else if (a.bidir) {
      team.barrier();  // matches a mover's pre-verification barrier (ranks without a pair)
    }
  }
  team.barrier();
  for (auto e : evs) cudaEventDestroy(e);
  if (side) cudaStreamDestroy(side);
  cudaFree(src);
  cudaFree(dst);
  return total_wrong;
}

}  // namespace braid::bench
