// braid/model/comm.hpp — the one interface every communication of the model layer goes through.
//
// Implementations can fuse, overlap or quantize; the layer only ever calls these five methods, and
// never NCCL directly. All methods are stream-ordered and issued in the same order on every rank.
// Counts are in elements of `dtype`. Buffers are device pointers; `in` and `out` never alias unless
// the method says so.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <string>

#include "braid/allreduce.hpp"
#include "braid/bench.hpp"
#include "braid/runtime.hpp"

namespace braid::model {

using bench::DType;

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string name() const = 0;
  // out[size·count] = in of rank 0, rank 1, ... (each `count` elements).
  virtual void all_gather(const void* in, void* out, size_t count, DType t, cudaStream_t s) = 0;
  // out[count] = Σ_ranks in[rank·count, (rank+1)·count) (in has size·count elements).
  virtual void reduce_scatter(const void* in, void* out, size_t count, DType t, cudaStream_t s) = 0;
  // out[count] = Σ_ranks in[count]; out may equal in.
  virtual void all_reduce(const void* in, void* out, size_t count, DType t, cudaStream_t s) = 0;
  // Variable all-to-all: send_counts[r] elements from in + send_displs[r] go to rank r, which stores
  // them at its out + recv_displs[this rank]; recv_counts[r] elements arrive from rank r. Host arrays
  // of size() entries. Equal counts give the classic all-to-all.
  virtual void all_to_all_v(const void* in, const size_t* send_counts, const size_t* send_displs, void* out,
                            const size_t* recv_counts, const size_t* recv_displs, DType t, cudaStream_t s) = 0;

  // Variable all-to-all of rows whose counts live on the device: a dropless MoE dispatch that never waits on the
  // host (capturable in a CUDA graph). rows_mat: device int32 [size][size], the same values on every rank;
  // rows_mat[src * size + dst] = rows rank src sends to rank dst (transpose: the transposed matrix — the reverse
  // exchange, where rank a sends back to rank b the rows it got from b). in: this rank's rows for rank 0, then for
  // rank 1, ... (row_elems elements of t each); out: the rows from rank 0, then rank 1, ... . max_rows bounds this
  // rank's rows sent and received (the buffers' rows); a rank sending more is a DeviceError (Team::synchronize), not
  // an overrun. Needs reserve_rows_exchange(max_rows, row_elems, t) first. The base class serves one rank (a copy);
  // the peer comm serves any team with peer memory, the NCCL comms through a peer comm of their own (NCCL's
  // send/receive take host counts).
  virtual void all_to_all_rows(const void* in, void* out, const int* rows_mat, bool transpose, size_t row_elems,
                               size_t max_rows, DType t, cudaStream_t s);
  // Collective (every rank, the same arguments): makes all_to_all_rows ready for max_rows rows of row_elems elements
  // of t (staging memory). Call before any capture; a smaller request than an earlier one is a no-op; a larger one may
  // reallocate the staging, so a CUDA graph captured before it must not be replayed after it.
  virtual void reserve_rows_exchange(size_t max_rows, size_t row_elems, DType t);

  // Memory this comm's copy engines move without any SM (make_nccl_ce_comm: a symmetric window), or nullptr where the
  // comm has none (every other comm). Collective: every rank, the same sizes, the same order. An all_gather in place
  // (in == out + rank·count) whose output lies in one window runs on the copy engines; anything else as before.
  // free_window (collective too) releases one; the comm releases the rest when it is destroyed.
  virtual void* alloc_window(size_t bytes) {
    (void)bytes;
    return nullptr;
  }
  virtual void free_window(void* p) { (void)p; }
  // Memory another comm's alloc_window returned, made a window of this comm as well (collective, like alloc_window),
  // so that memory two comms' collectives both use (two strands' layers placing tensors in one pool) is a window of
  // each. false where the comm has no windows. free_window(p) deregisters it here and leaves the memory to its owner
  // (free it here first).
  virtual bool register_window(void* p, size_t bytes) {
    (void)p, (void)bytes;
    return false;
  }
  // Whether [p, p + bytes) lies in one window of this comm (what an all_gather needs to take the copy engines).
  virtual bool in_window(const void* p, size_t bytes) const {
    (void)p, (void)bytes;
    return false;
  }
};

// Plain NCCL on the team's communicator (ncclAllGather, ncclReduceScatter, ncclAllReduce, grouped
// ncclSend/ncclRecv for the all-to-all). The team must outlive the Comm.
std::unique_ptr<Comm> make_nccl_comm(Team& team);
// Plain NCCL on a communicator of its own, split from the team's (ncclCommSplit, collective over the
// team: every rank calls it in the same order). max_ctas > 0 caps the CTAs (channels) NCCL may use for
// it (ncclConfig_t minCTAs = 1, maxCTAs = max_ctas): a throttled link for sensitivity studies. A second
// communicator also lets two micro-batches issue collectives on two streams without sharing one
// communicator. The team must outlive the Comm; destruction frees the communicator (collective).
// all_to_all_rows goes through a peer comm of the NCCL comm's own, capped at the same max_ctas (PeerCommOptions).
std::unique_ptr<Comm> make_nccl_comm_split(Team& team, int max_ctas = 0);
// NCCL for everything but the all-reduce, which goes through braid::AllReducer with `opt` (inference
// TP: one-shot/two-shot over peer memory, or quantized when opt.precision asks for it).
std::unique_ptr<Comm> make_allreducer_comm(Team& team, AllReduceOptions opt = {});

// NCCL on a communicator of its own (as make_nccl_comm_split, uncapped) plus NCCL's copy-engine collectives (NCCL >=
// 2.28, one node with peer access: a zero-CTA communicator split from the team's, NCCL_CTA_POLICY_ZERO) between the
// symmetric windows of alloc_window (ncclMemAlloc + ncclCommWindowRegister). An all_gather in place whose output is
// in a window is peer copies framed by stream memory operations — no kernel, so it overlaps a GEMM that fills every
// SM (bench comm: 84-97% hidden on 2x H200, NCCL's kernels 8-19%); every other call is NCCL's kernels. The layer puts
// its gathered tensors and, at TP = 2, its reduce-scatters into windows when its comm offers them (docs/layer.md).
// Construction is collective and runs one eager copy-engine call (NCCL sets up its copy-engine state there, which a
// stream capture cannot). Name "nccl-ce". UnavailableError where NCCL is older or the ranks lack peer access.
std::unique_ptr<Comm> make_nccl_ce_comm(Team& team);

// braid's own transport over the team's symmetric peer memory (CUDA IPC), no NCCL at all: every method
// is rounds of (stage this rank's part into its staging buffer, a cross-rank device barrier, read the
// peers' staging buffers — copies for the gather and the all-to-all, sums in rank order with fp32
// accumulation and one rounding for the reductions — and a second barrier before the buffer is reused).
// The methods of one PeerComm run one after another on its own stream, joined to the caller's stream by
// events (NCCL's order on one communicator), so one PeerComm may be called from several streams; two
// PeerComms run side by side. CUDA-graph capturable (the barrier's epochs live on the device); a peer
// that never arrives is a TimeoutError from Team::synchronize, not a hang. The reductions are the same
// bits on every rank and equal to the float sum in rank order rounded once. Not tuned for speed (one
// copy in, one read out, two barriers per round of `staging_bytes`): it exists for teams without NCCL —
// the shared-GPU teams that check the multi-rank layer and strands on a one-GPU node — and as a
// reference transport. Needs peer_ok() (UnavailableError otherwise); all_to_all_v also agrees on its
// number of rounds over MPI (host). staging_bytes: per rank (0: 32 MiB); collective construction.
std::unique_ptr<Comm> make_peer_comm(Team& team, size_t staging_bytes = 0);

// The peer comm's options. Engine::kSm is the comm above (SM copy and sum kernels read the peers' staging
// over peer memory). Engine::kCopyEngine moves every byte with the copy engines (cudaMemcpyAsync: the stage
// copy, and the peers' staging pulled straight into the output — all-gather, all-to-all-v — or into a local
// receive buffer of staging_bytes that a sum kernel of `sum_ctas` CTAs then reduces with this rank's part,
// local reads only, same rank order and rounding, so the same bits as kSm); the comm's stream has the
// highest priority. Its SM work is the two 32-thread barrier blocks per round and the reductions' local sum:
// a collective beside a GEMM takes the link and HBM bandwidth but (almost) no SMs — the copy-engine
// argument of T3 and of FlashOverlap's copy-engine transport, for the layer's own collectives. Name
// "peer-ce". Graph capture and the timeout contract are kSm's.
struct PeerCommOptions {
  enum class Engine { kSm, kCopyEngine };
  Engine engine = Engine::kSm;
  size_t staging_bytes = 0;  // per rank (0: 32 MiB); kCopyEngine also allocates a local buffer of this size
  int sum_ctas = 0;          // CTAs of the reductions' sum kernel; 0: kSm a few waves, kCopyEngine 1/8 of the SMs
  // > 0: no kernel of the comm (copies, sums, the rows exchange) uses more CTAs — a throttled link for sensitivity
  // studies, as NCCL's maxCTAs in make_nccl_comm_split (the bandwidth it gives is its own: measure it).
  int max_ctas = 0;
};
std::unique_ptr<Comm> make_peer_comm(Team& team, const PeerCommOptions& opt);
// "peer" / "peer-ce" (the comm's name()) -> its engine; false for any other name.
bool peer_engine_from_name(const std::string& name, PeerCommOptions::Engine* engine);
// NCCL when the team has it (make_nccl_comm / make_nccl_comm_split), the peer comm otherwise (a
// shared-GPU team). `second`: a communicator of its own (a second strand's).
std::unique_ptr<Comm> make_default_comm(Team& team, bool second = false);

}  // namespace braid::model
