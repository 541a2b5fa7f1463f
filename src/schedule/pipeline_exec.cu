// The pipeline executor (pipeline_exec.hpp) and `braid bench pipeline`.
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "../model/kernels.cuh"
#include "braid/bench.hpp"
#include "braid/errors.hpp"
#include "braid/model.hpp"
#include "braid/runtime.hpp"
#include "braid/schedule/pipeline_exec.hpp"
#include "braid/schedule/strands.hpp"
#include "braid/signal_device.cuh"
#include "braid/stream_memops.cuh"

namespace braid::schedule {

namespace m = braid::model;

namespace {

// Peer-kernel channels (PipeChannel::kPeerKernel; the default of a team without NCCL above two stages). Per channel,
// its two ranks hold a symmetric staging buffer [M][T*H] and flags [2][M] (SymmetricBuffer on the two ends only):
// [0][mb] "data of step e arrived" (the sender's kPeerSendBlocks blocks each add 1 into the receiver's, so step e is
// complete at e x kPeerSendBlocks), [1][mb] "step e consumed" (the receiver stores e into the sender's). Ordering:
// each send block's stores into the receiver's buffer, then bar.sync, then thread 0's fence.acq_rel.sys and
// red.release.sys on the flag; the receiver's wait is an acquire (wait_geq), its copy out runs after it in stream
// order, and its consumed-store follows that copy (fence, st.release.sys), which the sender's next step acquires
// before it overwrites the buffer. Every wait is bounded by the team's timeout (a TimeoutError from
// Team::synchronize, not a hang).
constexpr int kPeerSendBlocks = 32;
constexpr int kPeerSendThreads = 256;

__global__ void __launch_bounds__(kPeerSendThreads)
    peer_send_kernel(SignalView v, const uint4* __restrict__ src, uint4* __restrict__ dst, size_t vecs,
                     const uint32_t* consumed, uint32_t consumed_epoch, uint32_t* arrived, int peer) {
  __shared__ int ok;
  if (threadIdx.x == 0) ok = dev::wait_geq(v, consumed, consumed_epoch, uint32_t(OpId::kFlagWait), 0, peer);
  __syncthreads();
  if (!ok) return;  // timed out: the receiver's wait times out too (the error is recorded)
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < vecs; i += size_t(gridDim.x) * blockDim.x)
    dst[i] = src[i];
  __syncthreads();
  if (threadIdx.x == 0) {
    dev::fence_release();
    dev::add_release(arrived, 1);
  }
}

__global__ void peer_arrived_kernel(SignalView v, const uint32_t* arrived, uint32_t expect, int peer) {
  dev::wait_geq(v, arrived, expect, uint32_t(OpId::kFlagWait), 0, peer);
}

__global__ void peer_consumed_kernel(uint32_t* consumed, uint32_t epoch) {
  dev::fence_release();  // the copy out of the channel buffer, earlier on this stream, is over
  dev::store_release(consumed, epoch);
}

// Copy-engine channels (PipeChannel::kCopyEngine): the same symmetric staging and flags, the words holding the
// step number itself. Sender, on the channel stream after the compute stream's copy into its own staging:
// cuStreamWaitValue32(own [1][mb] >= step - 1), cudaMemcpyAsync into the receiver's staging (a copy engine), then
// cuStreamWriteValue32(receiver's [0][mb] = step), whose default flags put a memory barrier over the copy before
// the write (braid/stream_memops.cuh). Receiver: cuStreamWaitValue32(own [0][mb] >= step, GEQ plus FLUSH of remote
// writes where supported) on the channel stream, the compute stream's copy out after it, then
// cuStreamWriteValue32(sender's [1][mb] = step) on the compute stream (the barrier orders the copy's reads first).
// No SM waits or copies for a channel. The stream waits have no timeout of their own: the destructor waits for
// the streams bounded by the team's timeout and, if they have not finished, writes 0xffffffff to this rank's
// flags (memops::release_words) so that no stream stays stuck; a step that waits forever surfaces as the
// TimeoutError of the caller's Team::synchronize.

}  // namespace

struct PipelineExecutor::Impl {
  Team& team;
  m::ModelConfig cfg;
  PipeSchedule sched;
  PipeExecOptions opt;
  int rank = 0, P = 0, C = 0, lpc = 1, M = 0;
  size_t elems = 0;  // T x H, one activation (bf16)
  std::unique_ptr<Team> solo;             // this rank alone: the stage's (TP = 1) communicator
  std::unique_ptr<m::Comm> comm1;
  SlotPlan slots;
  // chunks[c][k][i]: layer i of slot k of chunk c (empty for chunks of other stages).
  std::vector<std::vector<std::vector<std::unique_ptr<m::Layer>>>> chunks;
  // Channels: key (chunk boundary b = c -> c+1, direction 0 forward / 1 backward).
  struct Channel {
    ncclComm_t comm = nullptr;   // its own NCCL communicator (split from the team's)
    cudaStream_t stream = nullptr;
    void* staging = nullptr;     // [M][T*H] on the sending or receiving rank: one buffer per micro-batch
    // Peer transport (`peer`): staging [M][T*H] and flags [2][M] in symmetric memory (see peer_send_kernel).
    std::unique_ptr<SymmetricBuffer> peer_staging, peer_flags;
  };
  std::map<std::pair<int, int>, Channel> channels;
  bool peer = false;       // channels over peer memory (symmetric staging and flags) instead of NCCL send/recv
  bool ce = false;         // ... moved by copy engines and stream memory operations (else by peer_send_kernel)
  PipeChannel tx = PipeChannel::kNccl;  // the transport in use (opt.channels resolved)
  void* wait_value = nullptr;   // cuStreamWaitValue32 / cuStreamWriteValue32 (ce)
  void* write_value = nullptr;
  unsigned wait_flags = 0;
  uint32_t step_no = 0;    // steps enqueued: the peer channels' epoch
  cudaStream_t cs = nullptr, local = nullptr, cross = nullptr;  // compute, and the strand executor's links
  std::unique_ptr<StrandExecutor> strands;                      // for SI blocks
  std::vector<cudaEvent_t> events;
  size_t next_event = 0;
  // Block timing: [0] step start (after zeroing), [1] the compute stream's step end, [2] the fork, then four per
  // slot (before prepare, after prepare, after its layers, after finish).
  bool timing = false, timed = false;
  std::vector<cudaEvent_t> tevents;
  // recv_ahead >= 0: an event on the compute stream at the start of every slot of the step, and the slot being enqueued.
  std::vector<cudaEvent_t> block_starts;
  size_t cur_block = 0;
  void* out_y = nullptr;   // [M][T*H]: the last chunk's outputs (rank holding it)
  void* out_dx = nullptr;  // [M][T*H]: the first chunk's input gradients (rank holding it)

  Impl(Team& t, const m::ModelConfig& c, const PipeSchedule& s, const PipeExecOptions& o)
      : team(t), cfg(c), sched(s), opt(o) {}

  int stage_of(int chunk) const { return chunk_stage(sched, chunk); }
  // True once every stream of the executor is idle, false if one is still busy after the team's timeout (or failed).
  bool drain() const {
    return memops::wait_bounded(
        [&] {
          cudaError_t e = cudaSuccess;
          for (cudaStream_t x : {cs, local, cross})
            if (e == cudaSuccess && x) e = cudaStreamQuery(x);
          for (auto& [key, ch] : channels)
            if (e == cudaSuccess && ch.stream) e = cudaStreamQuery(ch.stream);
          return e;
        },
        team.options().timeout_s);
  }
  // The getters' guard: the executor's work must end within the team's timeout before the device is synchronized.
  void require_drained(const char* what) const {
    if (!drain())
      throw TimeoutError(std::string("pipeline ") + what + ": the executor's streams did not complete within " +
                             std::to_string(team.options().timeout_s) + " s on rank " + std::to_string(rank),
                         __FILE__, __LINE__);
  }
  bool local_chunk(int chunk) const { return chunk >= 0 && chunk < C && stage_of(chunk) == rank; }
  cudaEvent_t event() {
    BRAID_REQUIRE(next_event < events.size(), "pipeline: event pool exhausted (internal error)");
    return events[next_event++];
  }
  cudaEvent_t record(cudaStream_t s) {
    cudaEvent_t e = event();
    BRAID_CUDA_CHECK(cudaEventRecord(e, s));
    return e;
  }
  std::vector<std::unique_ptr<m::Layer>>& slot_of(int mb, int chunk) {
    return chunks[chunk][slots.slot.at({mb, chunk})];
  }
  void copy(void* dst, const void* src) {
    BRAID_CUDA_CHECK(cudaMemcpyAsync(dst, src, elems * 2, cudaMemcpyDeviceToDevice, cs));
  }
  // Receive micro-batch mb's tensor of a channel into `dst` (a buffer of the task's slot). The receive
  // lands in the channel's own buffer for mb, so it waits for nothing of this rank (posted as soon as the
  // channel stream reaches it); the compute stream waits for it, then copies it into the slot. Likewise a
  // send goes from a copy: a slot is never held by a pending send, so only data dependencies — the
  // schedule's own — link the ranks (no buffer cycle can deadlock them).
  void recv(int boundary, int dir, int from, int mb, void* dst) {
    Channel& ch = channels.at({boundary, dir});
    void* buf = static_cast<char*>(ch.staging) + size_t(mb) * elems * 2;
    if (opt.recv_ahead >= 0) {  // post it once the compute stream reaches the slot recv_ahead slots before this one
      const size_t at = cur_block >= size_t(opt.recv_ahead) ? cur_block - size_t(opt.recv_ahead) : 0;
      BRAID_CUDA_CHECK(cudaStreamWaitEvent(ch.stream, block_starts.at(at), 0));
    }
    if (ce) {
      memops::stream_wait(wait_value, ch.stream, ch.peer_flags->local_as<uint32_t>() + mb, step_no, wait_flags);
    } else if (peer) {
      peer_arrived_kernel<<<1, 1, 0, ch.stream>>>(team.signals(), ch.peer_flags->local_as<uint32_t>() + mb,
                                                  step_no * kPeerSendBlocks, from);
      BRAID_CHECK_LAUNCH();
    } else {
      BRAID_NCCL_CHECK(ncclRecv(buf, elems, ncclBfloat16, from, ch.comm, ch.stream));
    }
    BRAID_CUDA_CHECK(cudaStreamWaitEvent(cs, record(ch.stream), 0));
    copy(dst, buf);
    if (ce) {
      memops::stream_write(write_value, cs, ch.peer_flags->peer_as<uint32_t>(from) + M + mb, step_no);
    } else if (peer) {
      peer_consumed_kernel<<<1, 1, 0, cs>>>(ch.peer_flags->peer_as<uint32_t>(from) + M + mb, step_no);
      BRAID_CHECK_LAUNCH();
    }
  }
  void send(int boundary, int dir, int to, int mb, const void* src) {
    Channel& ch = channels.at({boundary, dir});
    void* buf = static_cast<char*>(ch.staging) + size_t(mb) * elems * 2;
    copy(buf, src);
    BRAID_CUDA_CHECK(cudaStreamWaitEvent(ch.stream, record(cs), 0));
    if (ce) {
      auto* dst = ch.peer_staging->peer_as<char>(to) + size_t(mb) * elems * 2;
      memops::stream_wait(wait_value, ch.stream, ch.peer_flags->local_as<uint32_t>() + M + mb, step_no - 1, wait_flags);
      BRAID_CUDA_CHECK(cudaMemcpyAsync(dst, buf, elems * 2, cudaMemcpyDefault, ch.stream));
      memops::stream_write(write_value, ch.stream, ch.peer_flags->peer_as<uint32_t>(to) + mb, step_no);
    } else if (peer) {
      auto* dst = ch.peer_staging->peer_as<char>(to) + size_t(mb) * elems * 2;
      peer_send_kernel<<<kPeerSendBlocks, kPeerSendThreads, 0, ch.stream>>>(
          team.signals(), static_cast<const uint4*>(buf), reinterpret_cast<uint4*>(dst), elems * 2 / 16,
          ch.peer_flags->local_as<uint32_t>() + M + mb, step_no - 1, ch.peer_flags->peer_as<uint32_t>(to) + mb, to);
      BRAID_CHECK_LAUNCH();
    } else {
      BRAID_NCCL_CHECK(ncclSend(buf, elems, ncclBfloat16, to, ch.comm, ch.stream));
    }
  }

  void prepare(const PipeTask& t) {
    const int k = slots.slot.at({t.mb, t.chunk});
    auto& L = chunks[t.chunk][k];
    if (!t.backward) {
      void* x = L.front()->x();
      if (t.chunk == 0)
        m::kernels::fill_uniform(static_cast<m::kernels::bf16*>(x), elems, opt.seed + 1000 + t.mb, -1.f, 1.f, cs);
      else if (local_chunk(t.chunk - 1))
        copy(x, slot_of(t.mb, t.chunk - 1).back()->y());
      else
        recv(t.chunk - 1, 0, stage_of(t.chunk - 1), t.mb, x);
    } else {
      void* dy = L.back()->dy();
      if (t.chunk == C - 1)
        m::kernels::fill_uniform(static_cast<m::kernels::bf16*>(dy), elems, opt.seed + 2000 + t.mb, -1e-2f, 1e-2f, cs);
      else if (local_chunk(t.chunk + 1))
        copy(dy, slot_of(t.mb, t.chunk + 1).front()->dx());
      else
        recv(t.chunk, 1, stage_of(t.chunk + 1), t.mb, dy);
    }
  }

  void finish(const PipeTask& t) {
    const int k = slots.slot.at({t.mb, t.chunk});
    auto& L = chunks[t.chunk][k];
    if (!t.backward) {
      if (t.chunk == C - 1)
        copy(static_cast<char*>(out_y) + size_t(t.mb) * elems * 2, L.back()->y());
      else if (!local_chunk(t.chunk + 1))
        send(t.chunk, 0, stage_of(t.chunk + 1), t.mb, L.back()->y());
    } else {
      if (t.chunk == 0)
        copy(static_cast<char*>(out_dx) + size_t(t.mb) * elems * 2, L.front()->dx());
      else if (!local_chunk(t.chunk - 1))
        send(t.chunk - 1, 1, stage_of(t.chunk - 1), t.mb, L.front()->dx());
    }
  }

  // One task alone: its layers in order (forward) or reverse order (backward), activations handed from
  // layer to layer inside the slot.
  void run_alone(const PipeTask& t) {
    auto& L = slot_of(t.mb, t.chunk);
    const int n = int(L.size());
    if (!t.backward) {
      for (int i = 0; i < n; ++i) {
        if (i > 0) copy(L[i]->x(), L[i - 1]->y());
        L[i]->forward(cs);
      }
    } else {
      for (int i = n - 1; i >= 0; --i) {
        if (i < n - 1) copy(L[i]->dy(), L[i + 1]->dx());
        L[i]->backward(cs);
      }
    }
  }

  // An SI block: forward layer i of one task with backward layer n-1-i of the other, co-executed by the
  // strand executor (operator by operator on the compute stream, collectives on their own streams).
  void run_si(const PipeTask& f, const PipeTask& b) {
    auto& F = slot_of(f.mb, f.chunk);
    auto& B = slot_of(b.mb, b.chunk);
    BRAID_REQUIRE(F.size() == B.size(), "pipeline: SI block of chunks with different layer counts");
    const int n = int(F.size());
    for (int i = 0; i < n; ++i) {
      const int j = n - 1 - i;
      if (i > 0) copy(F[i]->x(), F[i - 1]->y());
      if (j < n - 1) copy(B[j]->dy(), B[j + 1]->dx());
      strands->run(*F[i], *B[j]);
    }
  }
};

PipelineExecutor::PipelineExecutor(Team& team, const m::ModelConfig& c, const PipeSchedule& s,
                                   const PipeExecOptions& opt)
    : impl_(std::make_unique<Impl>(team, c, s, opt)) {
  Impl& I = *impl_;
  BRAID_REQUIRE(!c.moe(), "pipeline: dense models only (an MoE forward synchronises the host)");
  BRAID_REQUIRE(s.stages == team.size(), "pipeline: the schedule's stages must equal the ranks");
  BRAID_REQUIRE(opt.layers_per_chunk >= 1, "pipeline: layers_per_chunk >= 1");
  BRAID_REQUIRE(int(s.stage_slots.size()) == s.stages && s.chunks >= s.stages, "pipeline: malformed schedule");
  I.rank = team.rank(), I.P = s.stages, I.C = s.chunks, I.lpc = opt.layers_per_chunk, I.M = s.microbatches;
  const m::Parallel p1{1, false};
  p1.validate(c);
  I.elems = size_t(c.tokens()) * c.hidden;
  I.slots = plan_slots(s, I.rank);
  if (const std::string why = check_channel_order(s); !why.empty())
    throw UsageError("pipeline: " + why + " (the executor's channels are FIFOs)", __FILE__, __LINE__);
  // Collective part first, identical on every rank: the stage's own communicator, then the channels.
  I.solo = team.split(I.rank, 0);
  I.comm1 = m::make_default_comm(*I.solo);
  // kAuto: copy engines at two stages where the ranks have peer access and the driver its stream memory operations
  // (measured faster than NCCL send/recv on every schedule: docs/dhelix.md, sixty-sixth session), else NCCL, else
  // peer kernels. Above two stages NCCL stays the default until copy engines are measured there (the PP = 4 runs
  // so far are NCCL's). (Every rank decides alike: team size, the team-wide peer verdict and the node's driver.)
  PipeChannel tx = opt.channels;
  if (tx == PipeChannel::kAuto)
    tx = I.P == 2 && team.peer_ok() && memops::driver_entry_point("cuStreamWaitValue32") &&
                 memops::driver_entry_point("cuStreamWriteValue32")
             ? PipeChannel::kCopyEngine
             : team.has_nccl() ? PipeChannel::kNccl : PipeChannel::kPeerKernel;
  BRAID_REQUIRE(tx != PipeChannel::kNccl || team.has_nccl(), "pipeline: NCCL channels need a team with NCCL");
  I.tx = tx;
  I.peer = tx != PipeChannel::kNccl;
  I.ce = tx == PipeChannel::kCopyEngine;
  if (I.peer) {
    BRAID_REQUIRE(team.peer_ok(), std::string("pipeline: ") + pipe_channel_name(tx) + " channels need peer memory (" +
                                      team.peer_status() + ")");
    BRAID_REQUIRE(I.ce || I.elems * 2 % 16 == 0,
                  "pipeline: peer channels copy 16-byte vectors (tokens x hidden % 8 == 0)");
  }
  if (I.ce) {
    I.wait_value = memops::required_entry_point("cuStreamWaitValue32", "pipeline copy-engine channels");
    I.write_value = memops::required_entry_point("cuStreamWriteValue32", "pipeline copy-engine channels");
    I.wait_flags = memops::remote_wait_flags();
  }
  for (int b = 0; b + 1 < I.C; ++b) {
    if (I.stage_of(b) == I.stage_of(b + 1)) continue;
    for (int dir = 0; dir < 2; ++dir) {
      Impl::Channel ch;
      if (I.peer) {  // collective: every rank, in the same order; memory on the channel's two ends only
        const std::vector<int> ends = {I.stage_of(b), I.stage_of(b + 1)};
        ch.peer_staging = std::make_unique<SymmetricBuffer>(team, size_t(I.M) * I.elems * 2, ends);
        ch.peer_flags = std::make_unique<SymmetricBuffer>(team, size_t(2) * I.M * sizeof(uint32_t), ends);
        if (ch.peer_flags->member())  // synchronized below
          BRAID_CUDA_CHECK(cudaMemset(ch.peer_flags->local(), 0, ch.peer_flags->bytes()));
        ch.staging = ch.peer_staging->local();  // (nullptr on the other ranks)
      } else {
        ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
        if (opt.channel_ctas > 0) cfg.minCTAs = 1, cfg.maxCTAs = opt.channel_ctas;
        BRAID_NCCL_CHECK(ncclCommSplit(team.nccl(), 0, I.rank, &ch.comm, &cfg));
        if (I.rank == I.stage_of(b) || I.rank == I.stage_of(b + 1))
          BRAID_CUDA_CHECK(cudaMalloc(&ch.staging, size_t(I.M) * I.elems * 2));
      }
      BRAID_CUDA_CHECK(cudaStreamCreateWithFlags(&ch.stream, cudaStreamNonBlocking));
      I.channels.emplace(std::make_pair(b, dir), std::move(ch));
    }
  }
  // This stage's chunks: slot 0 owns the weights (global layer l from seed + l) and accumulates the
  // gradients; the other slots share both.
  I.chunks.resize(I.C);
  for (int ch = 0; ch < I.C; ++ch) {
    if (!I.local_chunk(ch)) continue;
    const int nslots = I.slots.count[ch];
    BRAID_REQUIRE(nslots >= 1, "pipeline: a local chunk without tasks");
    I.chunks[ch].resize(nslots);
    for (int i = 0; i < I.lpc; ++i) {
      auto owner = std::make_unique<m::Layer>(c, p1, *I.comm1);
      owner->init_random_weights(opt.seed + uint64_t(ch * I.lpc + i));
      owner->set_accumulate_grads(true);
      for (int k = 1; k < nslots; ++k) {  // every GEMM of the stage runs on the compute stream: one workspace
        I.chunks[ch][k].push_back(std::make_unique<m::Layer>(*owner, *I.comm1, m::Layer::Share::kAll));
        I.chunks[ch][k].back()->share_cublas_workspace(*owner);
      }
      I.chunks[ch][0].push_back(std::move(owner));
    }
  }
  for (int ch = 0; ch < I.C; ++ch)
    for (size_t k = 1; k < I.chunks[ch].size(); ++k)
      BRAID_REQUIRE(int(I.chunks[ch][k].size()) == I.lpc, "pipeline: slot layers (internal error)");
  BRAID_CUDA_CHECK(cudaStreamCreateWithFlags(&I.cs, cudaStreamNonBlocking));
  BRAID_CUDA_CHECK(cudaStreamCreateWithFlags(&I.local, cudaStreamNonBlocking));
  BRAID_CUDA_CHECK(cudaStreamCreateWithFlags(&I.cross, cudaStreamNonBlocking));
  bool si = false;
  for (const auto& block : s.stage_slots[I.rank]) si = si || block.tasks.size() == 2;
  if (si) {
    const Layer dag = strand_layer(c, p1);
    I.strands = std::make_unique<StrandExecutor>(dag, whole_pass_plan(dag), StrandStreams{I.cs, I.local, I.cross});
  }
  size_t tasks = 0;
  for (const auto& block : s.stage_slots[I.rank]) tasks += block.tasks.size();
  I.events.resize(8 * tasks + 64, nullptr);
  for (auto& e : I.events) BRAID_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  I.tevents.resize(3 + 4 * s.stage_slots[I.rank].size(), nullptr);
  for (auto& e : I.tevents) BRAID_CUDA_CHECK(cudaEventCreate(&e));
  BRAID_REQUIRE(opt.recv_ahead >= -1, "pipeline: recv_ahead is -1 (post at once) or >= 0 slots");
  if (opt.recv_ahead >= 0) {
    I.block_starts.resize(s.stage_slots[I.rank].size(), nullptr);
    for (auto& e : I.block_starts) BRAID_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  }
  if (I.local_chunk(I.C - 1)) BRAID_CUDA_CHECK(cudaMalloc(&I.out_y, size_t(I.M) * I.elems * 2));
  if (I.local_chunk(0)) BRAID_CUDA_CHECK(cudaMalloc(&I.out_dx, size_t(I.M) * I.elems * 2));
  BRAID_CUDA_CHECK(cudaDeviceSynchronize());
  team.barrier();
}

PipelineExecutor::~PipelineExecutor() {
  Impl& I = *impl_;
  // No hang at teardown (a step that never completed: a peer gone): wait for the executor's streams, bounded by the
  // team's timeout; if they are still busy, free them — copy-engine channels by releasing this rank's flag words,
  // NCCL channels by aborting their communicators (peer-kernel waits are bounded on the device) — and wait again.
  if (!I.drain()) {
    const double t = I.team.options().timeout_s;
    std::fprintf(stderr, "braid: rank %d: pipeline executor still busy at teardown after %.0f s (a peer gone?); %s\n",
                 I.rank, t, I.ce ? "releasing this rank's channel flags" : "aborting its channel communicators");
    for (auto& [key, ch] : I.channels) {
      if (I.ce) {
        if (ch.peer_flags->member())
          memops::release_words(I.write_value, ch.peer_flags->local_as<uint32_t>(), size_t(2) * I.M, t);
      } else if (ch.comm) {
        ncclCommAbort(ch.comm);
        ch.comm = nullptr;
      }
    }
    if (!I.drain())
      std::fprintf(stderr, "braid: rank %d: pipeline executor streams still busy after the release\n", I.rank);
  }
  if (I.cs) cudaStreamSynchronize(I.cs);
  for (auto& [key, ch] : I.channels) {
    if (ch.stream) cudaStreamSynchronize(ch.stream), cudaStreamDestroy(ch.stream);
    if (ch.comm) ncclCommDestroy(ch.comm);
    if (!ch.peer_staging) cudaFree(ch.staging);  // (peer channels: the symmetric buffers free theirs, collectively)
  }
  I.strands.reset();
  for (auto e : I.events)
    if (e) cudaEventDestroy(e);
  for (auto e : I.tevents)
    if (e) cudaEventDestroy(e);
  for (auto e : I.block_starts)
    if (e) cudaEventDestroy(e);
  cudaFree(I.out_y);
  cudaFree(I.out_dx);
  for (cudaStream_t s : {I.cs, I.local, I.cross})
    if (s) cudaStreamDestroy(s);
}

void PipelineExecutor::step(cudaStream_t stream) {
  Impl& I = *impl_;
  I.next_event = 0;
  ++I.step_no;
  // Fork: the compute stream and every channel start after the caller's prior work.
  cudaEvent_t start = I.event();
  BRAID_CUDA_CHECK(cudaEventRecord(start, stream));
  BRAID_CUDA_CHECK(cudaStreamWaitEvent(I.cs, start, 0));
  for (auto& [key, ch] : I.channels) BRAID_CUDA_CHECK(cudaStreamWaitEvent(ch.stream, start, 0));
  const bool timing = I.timing;
  auto mark = [&](size_t k) {
    if (timing) BRAID_CUDA_CHECK(cudaEventRecord(I.tevents[k], I.cs));
  };
  mark(2);
  for (int c = 0; c < I.C; ++c)
    if (I.local_chunk(c))
      for (auto& layer : I.chunks[c][0]) layer->zero_grads(I.cs);
  mark(0);
  // This stage's slots in order.
  size_t bi = 0;
  for (const PipeSlot& block : I.sched.stage_slots[I.rank]) {
    I.cur_block = bi;
    if (!I.block_starts.empty()) BRAID_CUDA_CHECK(cudaEventRecord(I.block_starts[bi], I.cs));
    const size_t tk = 3 + 4 * bi++;
    mark(tk);
    for (const PipeTask& t : block.tasks) I.prepare(t);
    mark(tk + 1);
    if (block.tasks.size() == 2) {
      const PipeTask& f = block.tasks[0].backward ? block.tasks[1] : block.tasks[0];
      const PipeTask& b = block.tasks[0].backward ? block.tasks[0] : block.tasks[1];
      BRAID_REQUIRE(!f.backward && b.backward, "pipeline: an SI block pairs a forward with a backward");
      I.run_si(f, b);
    } else {
      BRAID_REQUIRE(block.tasks.size() == 1, "pipeline: a slot holds one task or an SI pair");
      I.run_alone(block.tasks[0]);
    }
    mark(tk + 2);
    for (const PipeTask& t : block.tasks) I.finish(t);
    mark(tk + 3);
    // Slots are reused in the compute stream's order (plan_slots' releases are host bookkeeping only:
    // every write into a slot — a copy from a channel buffer included — is on the compute stream).
  }
  mark(1);
  I.timed = timing;
  // Join: the caller's stream waits for the compute stream and every channel.
  BRAID_CUDA_CHECK(cudaStreamWaitEvent(stream, I.record(I.cs), 0));
  for (auto& [key, ch] : I.channels) BRAID_CUDA_CHECK(cudaStreamWaitEvent(stream, I.record(ch.stream), 0));
}

namespace {
// Per micro-batch hashes of a [M][T*H] buffer (zeros where this rank has no such buffer), computed on the device
// (bench::device_hash52; the host-side FNV over float64 copies of the gradients — gigabytes a layer pair — was,
// by estimate, most of a bench run's wall time).
std::vector<double> per_microbatch_hashes(const void* buf, int M, size_t elems, cudaStream_t s) {
  BRAID_CUDA_CHECK(cudaDeviceSynchronize());  // (the callers drained the executor's streams, bounded)
  std::vector<double> h(M, 0.0);
  if (buf)
    for (int mb = 0; mb < M; ++mb)
      h[mb] = bench::device_hash52(static_cast<const char*>(buf) + size_t(mb) * elems * 2, elems * 2, s);
  return h;
}
}  // namespace

std::vector<double> PipelineExecutor::output_hashes() const {
  impl_->require_drained("output_hashes");
  return per_microbatch_hashes(impl_->out_y, impl_->M, impl_->elems, impl_->cs);
}

std::vector<double> PipelineExecutor::input_grad_hashes() const {
  impl_->require_drained("input_grad_hashes");
  return per_microbatch_hashes(impl_->out_dx, impl_->M, impl_->elems, impl_->cs);
}

std::vector<double> PipelineExecutor::grad_hashes() const {
  const Impl& I = *impl_;
  I.require_drained("grad_hashes");
  BRAID_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<double> h(size_t(I.C) * I.lpc, 0.0);
  for (int c = 0; c < I.C; ++c)
    if (I.local_chunk(c))
      for (int i = 0; i < I.lpc; ++i) h[size_t(c) * I.lpc + i] = bench::device_hash52(I.chunks[c][0][i]->grad_buffers(), I.cs);
  return h;
}

void PipelineExecutor::set_block_timing(bool on) { impl_->timing = on; }

std::vector<BlockTiming> PipelineExecutor::block_timings(double* zero_us, double* step_us) const {
  const Impl& I = *impl_;
  BRAID_REQUIRE(I.timed, "pipeline: block_timings() needs a step run with set_block_timing(true)");
  I.require_drained("block_timings");
  BRAID_CUDA_CHECK(cudaDeviceSynchronize());
  auto us = [&](size_t a, size_t b) {
    float ms = 0;
    BRAID_CUDA_CHECK(cudaEventElapsedTime(&ms, I.tevents[a], I.tevents[b]));
    return double(ms) * 1e3;
  };
  if (zero_us) *zero_us = us(2, 0);
  if (step_us) *step_us = us(0, 1);
  std::vector<BlockTiming> r;
  size_t bi = 0;
  for (const PipeSlot& block : I.sched.stage_slots[I.rank]) {
    const size_t tk = 3 + 4 * bi++;
    BlockTiming b;
    b.tasks = int(block.tasks.size());
    const PipeTask& t = block.tasks.size() == 2 && block.tasks[0].backward ? block.tasks[1] : block.tasks[0];
    b.backward = b.tasks == 1 && t.backward, b.mb = t.mb, b.chunk = t.chunk;
    b.start_us = us(0, tk), b.prepare_us = us(tk, tk + 1), b.run_us = us(tk + 1, tk + 2), b.finish_us = us(tk + 2, tk + 3);
    r.push_back(b);
  }
  return r;
}

int PipelineExecutor::total_layers() const { return impl_->C * impl_->lpc; }

PipeChannel PipelineExecutor::channels() const { return impl_->tx; }

const char* pipe_channel_name(PipeChannel c) {
  switch (c) {
    case PipeChannel::kAuto: return "auto";
    case PipeChannel::kNccl: return "nccl";
    case PipeChannel::kPeerKernel: return "peer";
    case PipeChannel::kCopyEngine: return "ce";
  }
  return "?";
}

PipeChannel parse_pipe_channel(const std::string& name) {
  for (PipeChannel c : {PipeChannel::kAuto, PipeChannel::kNccl, PipeChannel::kPeerKernel, PipeChannel::kCopyEngine})
    if (name == pipe_channel_name(c)) return c;
  throw UsageError("pipeline: channels are auto, nccl, peer or ce, not '" + name + "'", __FILE__, __LINE__);
}

int PipelineExecutor::activation_sets() const {
  int n = 0;
  for (const auto& ch : impl_->chunks)
    for (const auto& slot : ch) n += int(slot.size());
  return n;
}

const PipeSchedule& PipelineExecutor::schedule() const { return impl_->sched; }

// ============================================ bench ============================================
namespace {

struct PipeArgs {
  std::string model = "llama3-8b", json;
  int seq = 4096, mb = 1, microbatches = 8, lpc = 1, iters = 5, warmup = 2;
  int channel_ctas = PipeExecOptions{}.channel_ctas;
  int recv_ahead = PipeExecOptions{}.recv_ahead;
  // How the W-shaped schedule's SI blocks run, one W row each: "corun" (the strand executor), "fb" / "bf" (split
  // into two tasks, forward or backward first: split_si_blocks).
  std::vector<std::string> w_si = {"corun", "fb", "bf"};
  // Channel transports, each a set of runs (every schedule, the un-pipelined reference included); the first
  // transport's un-pipelined run is the reference every other run is checked against.
  std::vector<PipeChannel> channels = {PipeChannel::kAuto};
};

PipeArgs parse_pipe(int argc, char** argv) {
  PipeArgs a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) throw UsageError("bench pipeline: " + k + " needs a value", __FILE__, __LINE__);
      return argv[++i];
    };
    if (k == "--model") a.model = val();
    else if (k == "--seq") a.seq = std::stoi(val());
    else if (k == "--mb") a.mb = std::stoi(val());
    else if (k == "--microbatches") a.microbatches = std::stoi(val());
    else if (k == "--layers-per-chunk") a.lpc = std::stoi(val());
    else if (k == "--channel-ctas") a.channel_ctas = std::stoi(val());
    else if (k == "--recv-ahead") a.recv_ahead = std::stoi(val());
    else if (k == "--channels") {
      a.channels.clear();
      for (const std::string& w : bench::split_list(val())) a.channels.push_back(parse_pipe_channel(w));
      if (a.channels.empty()) throw UsageError("bench pipeline: --channels names no transport", __FILE__, __LINE__);
    }
    else if (k == "--w-si") {
      a.w_si = bench::split_list(val());
      for (const std::string& w : a.w_si)
        if (w != "corun" && w != "fb" && w != "bf")
          throw UsageError("bench pipeline: --w-si takes corun, fb and bf (comma-separated), not '" + w + "'", __FILE__,
                           __LINE__);
    }
    else if (k == "--iters") a.iters = std::stoi(val());
    else if (k == "--warmup") a.warmup = std::stoi(val());
    else if (k == "--json") a.json = val();
    else if (k.rfind("--", 0) == 0) throw UsageError("bench pipeline: unknown option " + k, __FILE__, __LINE__);
    // other words (bench, pipeline) belong to the CLI
  }
  if (a.seq < 1 || a.mb < 1 || a.microbatches < 1 || a.lpc < 1 || a.iters < 1 || a.warmup < 0 || a.channel_ctas < 0 ||
      a.recv_ahead < -1)
    throw UsageError("bench pipeline: sizes and --iters must be >= 1, --warmup and --channel-ctas >= 0, --recv-ahead >= -1",
                     __FILE__, __LINE__);
  return a;
}

}  // namespace

int bench_pipeline_main(Team& team, int argc, char** argv, const bench::Context& ctx) {
  const PipeArgs a = parse_pipe(argc, argv);
  m::ModelConfig c = m::preset(a.model);
  c.seq = a.seq, c.micro_batch = a.mb;
  c.validate();
  const int P = team.size(), M = a.microbatches;
  const bool root = team.rank() == 0;
  if (team.shared_gpu()) {  // the ranks time-slice one GPU: a correctness check, never a measurement
    BRAID_REQUIRE(a.json.empty(), "bench pipeline: a shared-GPU team (BRAID_SHARED_GPU=1) checks correctness only: no "
                                  "--json (its times are not measurements)");
    if (root)
      std::printf("# SHARED GPU (BRAID_SHARED_GPU=1): %d ranks time-slice one GPU, channels over peer memory; the "
                  "verification is real, every time below is NOT a measurement\n", P);
  }
  cudaStream_t s = team.stream();
  struct Run {
    std::string name;
    PipeSchedule sched;
    int lpc;
    PipeChannel channels;
  };
  // One model of 2P x lpc layers in every run: W and its reference fold it into 2P chunks, 1F1B into P.
  // More than one transport: every run's name carries its transport ("1f1b/ce").
  std::vector<Run> runs;
  for (PipeChannel ch : a.channels) {
    const std::string tag = a.channels.size() > 1 ? std::string("/") + pipe_channel_name(ch) : "";
    runs.push_back({"sequential" + tag, make_sequential_pipe(PipeKind::WShaped, P, M), a.lpc, ch});
    runs.push_back({"1f1b" + tag, make_1f1b(P, M), 2 * a.lpc, ch});
    for (const std::string& w : a.w_si) {
      if (w == "corun") runs.push_back({"w-shaped" + tag, make_w_shaped(P, M), a.lpc, ch});
      else runs.push_back({"w-shaped-" + w + tag, split_si_blocks(make_w_shaped(P, M), w == "bf"), a.lpc, ch});
    }
  }
  if (root)
    std::printf("# pipeline: %s, seq %d, micro-batch %d, %d micro-batches, %d stages, %d layers (%d per W chunk), "
                "TP = 1 per stage\n",
                c.name.c_str(), c.seq, c.micro_batch, M, P, 2 * P * a.lpc, a.lpc);
  // Verification: every run against the reference, bit for bit.
  std::vector<std::vector<double>> ref;
  bool ok = true;
  std::vector<double> mem(runs.size(), 0), sets(runs.size(), 0), us(runs.size(), 0);
  std::vector<std::string> used(runs.size());  // each run's transport, resolved
  // Per run, per stage (kBd values each, gathered from every rank): where the stage's step went.
  enum { kStep, kZero, kPrepare, kRun, kFinish, kFwdPasses, kBwdPasses, kMhz, kCapped, kRunF, kRunB, kBd };
  std::vector<std::vector<double>> bd(runs.size());
  int device = 0;
  BRAID_CUDA_CHECK(cudaGetDevice(&device));
  bench::GpuClockSampler clocks(device);
  for (size_t r = 0; r < runs.size(); ++r) {
    const double before = bench::device_used_bytes();
    PipeExecOptions po;
    po.layers_per_chunk = runs[r].lpc, po.seed = 1, po.channel_ctas = a.channel_ctas, po.recv_ahead = a.recv_ahead;
    po.channels = runs[r].channels;
    PipelineExecutor ex(team, c, runs[r].sched, po);
    used[r] = pipe_channel_name(ex.channels());
    mem[r] = team.allreduce_max(bench::device_used_bytes() - before);
    sets[r] = team.allreduce_max(double(ex.activation_sets()));
    ex.step(s);
    team.synchronize(s, "bench pipeline verification");
    std::vector<std::vector<double>> h = {team.allreduce_max(ex.output_hashes()), team.allreduce_max(ex.input_grad_hashes()),
                                          team.allreduce_max(ex.grad_hashes())};
    if (r == 0) {
      ref = h;
    } else {
      int diff = 0;
      for (size_t q = 0; q < h.size(); ++q)
        for (size_t i = 0; i < h[q].size(); ++i) diff += h[q][i] != ref[q][i] || h[q][i] == 0;
      ok = ok && diff == 0;
      if (root)
        std::printf("# verification: %s vs sequential: %d of %zu outputs / input gradients / layer gradients differ "
                    "(bitwise) -> %s\n",
                    runs[r].name.c_str(), diff, h[0].size() + h[1].size() + h[2].size(), diff == 0 ? "Passed" : "FAILED");
    }
    const bench::TimingOptions topt{a.warmup, a.iters};
    clocks.start();
    us[r] = bench::summarize(bench::time_iterations(&team, s, topt, [&](int) { ex.step(s); })).median_us;
    const bench::ClockSummary clk = clocks.stop();
    // One more step with events around every slot of this stage.
    ex.set_block_timing(true);
    bench::time_iterations(&team, s, bench::TimingOptions{0, 1}, [&](int) { ex.step(s); });
    ex.set_block_timing(false);
    std::vector<double> v(size_t(P) * kBd, 0.0);
    double* mine = v.data() + size_t(team.rank()) * kBd;
    for (const BlockTiming& b : ex.block_timings(&mine[kZero], &mine[kStep])) {
      mine[kPrepare] += b.prepare_us, mine[kRun] += b.run_us, mine[kFinish] += b.finish_us;
      if (b.tasks == 2) mine[kFwdPasses] += runs[r].lpc, mine[kBwdPasses] += runs[r].lpc;
      else mine[b.backward ? kBwdPasses : kFwdPasses] += runs[r].lpc;
      if (b.tasks == 1) mine[b.backward ? kRunB : kRunF] += b.run_us;  // (SI blocks: in layers only)
    }
    mine[kMhz] = clk.mean_mhz, mine[kCapped] = clk.power_capped;
    bd[r] = team.allreduce_max(v);
  }
  // The simulator's prediction from measured one-layer times (a W chunk = half a stage's layers).
  double t_f = 0, t_b = 0, t_b0 = 0, t_f2 = 0, t_b2 = 0;
  bench::ClockSummary layer_clk;
  {
    auto solo = team.split(team.rank(), 0);  // must outlive the communicator made from it
    auto comm = m::make_default_comm(*solo);
    m::Layer l(c, m::Parallel{1, false}, *comm);
    l.init_random_weights(7);
    // Random inputs as the executor's (x uniform in ±1, dy in ±1e-2): GEMMs on zeros run at higher clocks.
    const size_t n = size_t(l.local_tokens()) * c.hidden;
    m::kernels::fill_uniform(static_cast<m::kernels::bf16*>(l.x()), n, 1000 + 7, -1.f, 1.f, s);
    m::kernels::fill_uniform(static_cast<m::kernels::bf16*>(l.dy()), n, 2000 + 7, -1e-2f, 1e-2f, s);
    const bench::TimingOptions topt{2, 5};
    clocks.start();
    t_f = team.allreduce_max(bench::summarize(bench::time_iterations(&team, s, topt, [&](int) { l.forward(s); })).median_us);
    t_b0 = team.allreduce_max(bench::summarize(bench::time_iterations(&team, s, topt, [&](int) { l.backward(s); })).median_us);
    // The executor's layers accumulate their weight gradients (wgrad GEMMs with beta = 1): the prediction
    // uses the backward timed that way.
    l.set_accumulate_grads(true);
    l.zero_grads(s);
    t_b = team.allreduce_max(bench::summarize(bench::time_iterations(&team, s, topt, [&](int) { l.backward(s); })).median_us);
    layer_clk = clocks.stop();
    // The same passes alternating between two layers (other weights, other saved activations), as a stage's
    // slots do: what repeating one layer keeps in the caches.
    m::Layer l2(c, m::Parallel{1, false}, *comm);
    l2.init_random_weights(8);
    l2.set_accumulate_grads(true);
    l2.zero_grads(s);
    m::kernels::fill_uniform(static_cast<m::kernels::bf16*>(l2.x()), n, 1000 + 8, -1.f, 1.f, s);
    m::kernels::fill_uniform(static_cast<m::kernels::bf16*>(l2.dy()), n, 2000 + 8, -1e-2f, 1e-2f, s);
    t_f2 = team.allreduce_max(bench::summarize(bench::time_iterations(&team, s, topt, [&](int) {
                                l.forward(s);
                                l2.forward(s);
                              })).median_us) / 2;
    t_b2 = team.allreduce_max(bench::summarize(bench::time_iterations(&team, s, topt, [&](int) {
                                l.backward(s);
                                l2.backward(s);
                              })).median_us) / 2;
  }
  std::vector<double> lclk(size_t(P) * 2, 0.0);
  lclk[2 * team.rank()] = layer_clk.mean_mhz, lclk[2 * team.rank() + 1] = layer_clk.power_capped;
  lclk = team.allreduce_max(lclk);
  const double tokens = double(M) * double(c.tokens());
  if (root) {
    std::printf("# one layer alone: forward %.1f us, backward %.1f us accumulating its gradients (%.1f us "
                "overwriting them); alternating two layers: forward %.1f us, backward %.1f us\n",
                t_f, t_b, t_b0, t_f2, t_b2);
    std::printf("%-18s %12s %12s %10s %14s %10s %12s %10s %14s\n", "schedule", "time(us)", "tokens/s", "vs seq", "predicted(us)",
                "bubble", "act sets", "mem(MiB)", "pred. alt(us)");
  }
  for (size_t r = 0; r < runs.size(); ++r) {
    PipeSchedule sim = runs[r].sched;
    PipeCosts pc;
    pc.t_fwd = 2 * a.lpc * t_f, pc.t_bwd = 2 * a.lpc * t_b;  // one stage's layers
    const PipeStats st = simulate_pipeline(sim, pc);
    // The same with the one-layer times taken alternating two layers (closer to a stage's passes: sixty-fifth
    // session, docs/dhelix.md).
    PipeSchedule sim2 = runs[r].sched;
    PipeCosts pc2 = pc;
    pc2.t_fwd = 2 * a.lpc * t_f2, pc2.t_bwd = 2 * a.lpc * t_b2;
    const double alt = simulate_pipeline(sim2, pc2).makespan;
    if (root) {
      std::printf("%-18s %12.1f %12.0f %9.3fx %14.1f %10.4f %12.0f %10.1f %14.1f\n", runs[r].name.c_str(), us[r],
                  tokens / (us[r] * 1e-6), us[0] / us[r], st.makespan, st.bubble_ratio, sets[r], mem[r] / 1048576.0, alt);
      bench::Json j;
      j.add("bench", "pipeline").add("schedule", runs[r].name).add("model", c.name).add("seq", c.seq);
      j.add("micro_batch", c.micro_batch).add("microbatches", M).add("stages", P).add("layers", 2 * P * a.lpc);
      j.add("time_us", us[r]).add("tokens_per_s", tokens / (us[r] * 1e-6)).add("speedup_vs_sequential", us[0] / us[r]);
      j.add("predicted_us", st.makespan).add("predicted_alternating_us", alt).add("predicted_bubble", st.bubble_ratio)
          .add("layer_fwd_us", t_f).add("layer_bwd_us", t_b).add("layer_fwd_alternating_us", t_f2)
          .add("layer_bwd_alternating_us", t_b2).add("recv_ahead", a.recv_ahead)
          .add("layer_bwd_overwrite_us", t_b0).add("channel_ctas", a.channel_ctas)
          .add("channels", used[r]);
      j.add("activation_sets", sets[r]).add("mem_bytes", mem[r]).add("verified", ok);
      j.add_context(ctx);
      bench::append_jsonl(a.json, j.str());
    }
  }
  if (root) {
    std::printf("# where each stage's step went (one more step, events on the stage's compute stream; ms): layers = its\n"
                "# slots' layer passes (alone: the same passes at the one-layer times), inputs = waits for a channel and\n"
                "# copies before a slot, outputs = copies after one, gaps = the rest; SM clock during the timed steps\n");
    std::printf("%-18s %5s %8s %6s %8s %8s %8s %7s %6s %14s %17s %17s\n", "schedule", "stage", "step", "zero", "inputs",
                "layers", "alone", "outputs", "gaps", "clock MHz(cap)", "fwd tasks (alone)", "bwd tasks (alone)");
    for (int st = 0; st < P; ++st)
      std::printf("%-18s %5d %8s %6s %8s %8s %8s %7s %6s %9.0f (%3.0f%%)\n", "one layer", st, "", "", "", "", "", "", "",
                  lclk[2 * st], 100 * lclk[2 * st + 1]);
  }
  for (size_t r = 0; r < runs.size(); ++r) {
    std::string js = "[";
    for (int st = 0; st < P; ++st) {
      const double* v = bd[r].data() + size_t(st) * kBd;
      const double alone = v[kFwdPasses] * t_f + v[kBwdPasses] * t_b;
      const double gaps = v[kStep] - v[kPrepare] - v[kRun] - v[kFinish];
      if (root)
        std::printf("%-18s %5d %8.2f %6.2f %8.2f %8.2f %8.2f %7.2f %6.2f %9.0f (%3.0f%%) %8.2f (%6.2f) %8.2f (%6.2f)\n",
                    runs[r].name.c_str(), st, v[kStep] / 1e3, v[kZero] / 1e3, v[kPrepare] / 1e3, v[kRun] / 1e3, alone / 1e3,
                    v[kFinish] / 1e3, gaps / 1e3, v[kMhz], 100 * v[kCapped], v[kRunF] / 1e3,
                    (v[kRunF] > 0 ? v[kFwdPasses] * t_f : 0) / 1e3, v[kRunB] / 1e3, (v[kRunB] > 0 ? v[kBwdPasses] * t_b : 0) / 1e3);
      bench::Json sj;
      sj.add("stage", st).add("step_us", v[kStep]).add("zero_us", v[kZero]).add("inputs_us", v[kPrepare]);
      sj.add("layers_us", v[kRun]).add("layers_alone_us", alone).add("outputs_us", v[kFinish]).add("gaps_us", gaps);
      sj.add("sm_mhz", v[kMhz]).add("power_capped", v[kCapped]).add("layer_timing_sm_mhz", lclk[2 * st]);
      sj.add("fwd_tasks_us", v[kRunF]).add("bwd_tasks_us", v[kRunB]).add("fwd_passes", v[kFwdPasses]);
      sj.add("bwd_passes", v[kBwdPasses]);
      js += (st ? ", " : "") + sj.str();
    }
    if (root) {
      bench::Json j;
      j.add("bench", "pipeline-breakdown").add("schedule", runs[r].name).add("model", c.name).add("microbatches", M);
      j.add("channels", used[r]).add("recv_ahead", a.recv_ahead);
      j.add("stages", P).add("layers", 2 * P * a.lpc).add("time_us", us[r]).add("layer_fwd_us", t_f).add("layer_bwd_us", t_b);
      j.add("layer_fwd_alternating_us", t_f2).add("layer_bwd_alternating_us", t_b2).add_raw("per_stage", js + "]");
      j.add("verified", ok).add_context(ctx);
      bench::append_jsonl(a.json, j.str());
    }
  }
  team.synchronize(s, "bench pipeline end");
  return ok ? 0 : 3;
}

}  // namespace braid::schedule
