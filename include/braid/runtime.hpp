// braid/runtime.hpp — ranks, NCCL communicators, symmetric peer memory, device signals.
//
// Model: one process per GPU, started by mpirun. MPI bootstraps everything (the NCCL unique id, the
// CUDA IPC handles of symmetric buffers); all data movement afterwards is NCCL or braid's kernels.
//
//   braid::Runtime rt(&argc, &argv);          // MPI_Init, picks this rank's GPU (local rank)
//   braid::Team world(rt);                     // NCCL comm over all ranks + peer probe + signals
//   auto tp = world.split(color, key);         // eager sub-team (ncclCommSplit), never in timed code
//   braid::SymmetricBuffer buf(world, bytes);  // collective: each rank's buffer, mapped by its peers
//
// Symmetric memory uses CUDA IPC (cudaIpcGetMemHandle / cudaIpcOpenMemHandle): one cudaMalloc per
// buffer per rank, mapped once into every peer of the same node. The mapping is static, so kernels
// that use it can be captured in CUDA graphs. Peer access is decided at Team creation by a real
// write probe (each rank stores a pattern into every peer's buffer with a kernel and the owner checks
// it); if any rank fails, peer_ok() is false on all ranks and callers fall back to NCCL.
#pragma once

#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <memory>
#include <string>
#include <vector>

#include "braid/errors.hpp"
#include "braid/signal.hpp"

namespace braid {

// Number of CUDA devices visible (0 when there is no driver or no GPU; never throws).
int visible_gpu_count();

class Runtime {
 public:
  // MPI_Init_thread (unless MPI is already initialised) and device selection: local rank r uses GPU
  // r % visible_gpu_count(). Throws UnavailableError when the node has no GPU and need_gpu is set.
  Runtime(int* argc, char*** argv, bool need_gpu = true);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  int device() const { return device_; }
  std::string hostname() const { return hostname_; }

 private:
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1, device_ = -1;
  bool owns_mpi_ = false;
  std::string hostname_;
};

struct TeamOptions {
  double timeout_s = 30.0;       // bound of device waits and of synchronize()
  int signal_slots = 2048;       // flag slots available to kernels (one block per slot at a time)
  bool probe_peers = true;       // run the peer-write probe (else peer_ok() is false)
  // Functional emulation on a one-GPU node (also set by BRAID_SHARED_GPU=1): several ranks may share one
  // GPU. NCCL refuses that ("Duplicate GPU detected"), so no NCCL communicator is created and nccl()
  // throws UnavailableError; peer memory is CUDA IPC between processes on the same device. The ranks'
  // kernels then time-slice instead of running side by side, so a cross-rank device wait completes only
  // when the scheduler switches contexts: for correctness tests of peer-memory paths, never for timing.
  bool shared_gpu = false;
};

class Team {
 public:
  // Collective over `comm` (every rank of it must call). Creates the NCCL communicator, the signal
  // flags in symmetric memory and runs the peer probe.
  Team(MPI_Comm comm, TeamOptions opt = {});
  explicit Team(const Runtime&, TeamOptions opt = {});
  ~Team();
  Team(const Team&) = delete;
  Team& operator=(const Team&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  MPI_Comm mpi() const { return comm_; }
  // Throws UnavailableError in a shared-GPU team (TeamOptions::shared_gpu), which has no NCCL.
  ncclComm_t nccl() const;
  bool has_nccl() const { return nccl_ != nullptr; }
  bool shared_gpu() const { return opt_.shared_gpu; }
  cudaStream_t stream() const { return stream_; }
  const TeamOptions& options() const { return opt_; }

  // True when all ranks are on one node, within kMaxPeers, and the write probe passed everywhere.
  bool peer_ok() const { return peer_ok_; }
  const std::string& peer_status() const { return peer_status_; }

  // Eager sub-team: ranks with the same color, ordered by key (MPI_Comm_split + ncclCommSplit).
  std::unique_ptr<Team> split(int color, int key, TeamOptions opt = {}) const;

  // A second NCCL communicator over the same ranks with the zero-CTA policy (NCCL_CTA_POLICY_ZERO,
  // NCCL >= 2.28): its all-gather / all-to-all / scatter / gather between buffers registered as symmetric
  // windows (ncclCommWindowRegister, NCCL_WIN_COLL_SYMMETRIC) run on the copy engines, no SMs. Created
  // on the first call, which is collective (every rank calls it at the same point). Throws
  // UnavailableError where NCCL is older or the ranks are not on one node with peer access.
  ncclComm_t nccl_zero_cta();
  // A new zero-CTA communicator of the caller's (who destroys it), under the same conditions and collective the same
  // way: for users that need one of their own (a strand's comm, model::make_nccl_ce_comm).
  ncclComm_t split_nccl_zero_cta();

  // Signals for kernels (requires peer_ok()).
  const SignalView& signals() const;
  // Reserve `n` consecutive signal slots for one operation object; returns the first slot. Slots are
  // allocated identically on every rank when ops are created in the same order (which they must be).
  int reserve_slots(int n);

  // Waits for `stream` with a bound. A device wait that timed out, or a stream that does not finish
  // within timeout_s plus a grace of 0.1 s + 10% (a peer that never joined a NCCL call; the grace lets a
  // device wait with the same bound report first), throws TimeoutError naming the rank, the
  // operation and the flag; in the second case the NCCL communicator is aborted first, so the team is
  // unusable afterwards (broken() is true).
  void synchronize(cudaStream_t stream, const char* what, double timeout_s = -1);
  void synchronize(const char* what) { synchronize(stream_, what); }
  // Throws TimeoutError if a device wait of this rank has recorded an error.
  void check_device_error(const char* what) const;
  bool broken() const { return broken_; }
  // Aborts the NCCL communicator and marks the team unusable (after a peer failed). Local: no peer
  // needs to take part; destruction then aborts everywhere through the teardown agreement below.
  void abort();
  // Teardown agreement, bounded by timeout_s: every rank says whether its team is broken; returns true
  // when all are healthy. A rank that is broken, hears of a broken peer, or gets no answer in time marks
  // its team broken (aborting NCCL), so every rank takes the same teardown path: NCCL >= 2.19 expects a
  // communicator aborted on one rank of a node to be aborted on all, and a healthy rank must not wait in
  // a barrier that a broken one skips. Collective: called by ~Team and ~SymmetricBuffer on every rank; a
  // rank that reaches it more than timeout_s after its peers is taken for absent (they abort).
  bool agree_healthy();

  // Host-side helpers over MPI.
  void barrier() const;
  double allreduce_max(double v) const;
  double allreduce_min(double v) const;
  std::vector<double> allreduce_max(const std::vector<double>& v) const;

 private:
  friend class SymmetricBuffer;
  Team(MPI_Comm adopted, ncclComm_t adopted_nccl, TeamOptions opt);  // for split()
  void init(TeamOptions opt);
  void probe_peers();

  MPI_Comm comm_ = MPI_COMM_NULL;
  bool owns_comm_ = false;
  int rank_ = 0, size_ = 1;
  TeamOptions opt_;
  ncclComm_t nccl_ = nullptr;
  ncclComm_t nccl_zero_cta_ = nullptr;  // nccl_zero_cta(), lazily
  cudaStream_t stream_ = nullptr;
  bool same_node_ = false;
  bool peer_ok_ = false;
  bool broken_ = false;
  bool comm_pending_ = false;  // an agreement never completed: its request still uses comm_
  std::string peer_status_;
  DeviceError* err_host_ = nullptr;  // pinned, mapped
  DeviceError* err_dev_ = nullptr;   // device alias of err_host_
  std::unique_ptr<class SymmetricBuffer> flags_;
  uint32_t* epochs_ = nullptr;
  SignalView view_{};
  int next_slot_ = 1;  // slot 0 is the team's own barrier
};

// A buffer from ncclMemAlloc registered as a symmetric window (ncclCommWindowRegister,
// NCCL_WIN_COLL_SYMMETRIC) on `comm` (NCCL >= 2.28, one node): NCCL's symmetric-memory kernels — and, on
// a zero-CTA communicator (Team::nccl_zero_cta), its copy engines — run between such buffers. Creation
// and destruction are collective over the communicator: every rank creates and destroys its windows with
// the same sizes, in the same order. Throws UnavailableError where NCCL is older.
// The second constructor registers memory another NcclWindow allocated (another communicator's window) on `comm` as
// well, without owning it: destruction deregisters it and leaves the memory to its owner, which must outlive it.
class NcclWindow {
 public:
  NcclWindow(ncclComm_t comm, size_t bytes);
  NcclWindow(ncclComm_t comm, void* borrowed, size_t bytes);
  ~NcclWindow();
  NcclWindow(const NcclWindow&) = delete;
  NcclWindow& operator=(const NcclWindow&) = delete;
  void* get() const { return p_; }
  size_t bytes() const { return bytes_; }
  bool owned() const { return owned_; }

 private:
  ncclComm_t comm_;
  size_t bytes_;
  void* p_ = nullptr;
  void* win_ = nullptr;  // ncclWindow_t
  bool owned_ = true;    // p_ from ncclMemAlloc here (else borrowed: only registered)
};

// A buffer of the same size on every rank of a team, each mapped into every peer of the node.
// Construction and destruction are collective over the team.
// The second constructor holds the buffer on `members` only (team ranks, the same list on every rank; a non-member
// passes it too and gets no memory: local() == nullptr, bytes() == 0), each member's mapped into the other members
// only (peer(r) == nullptr for a non-member r): e.g. a channel's staging on its two ends. Still collective over the
// whole team.
class SymmetricBuffer {
 public:
  SymmetricBuffer(Team& team, size_t bytes);
  SymmetricBuffer(Team& team, size_t bytes, const std::vector<int>& members);
  bool member() const { return local_ != nullptr; }
  ~SymmetricBuffer();
  SymmetricBuffer(const SymmetricBuffer&) = delete;
  SymmetricBuffer& operator=(const SymmetricBuffer&) = delete;

  size_t bytes() const { return bytes_; }
  void* local() const { return local_; }
  // Pointer to rank r's buffer, usable in this rank's kernels (r == rank: local()).
  void* peer(int r) const { return peers_.at(r); }
  template <class T>
  T* local_as() const { return static_cast<T*>(local_); }
  template <class T>
  T* peer_as(int r) const { return static_cast<T*>(peer(r)); }

 private:
  Team& team_;
  size_t bytes_;
  void* local_ = nullptr;
  std::vector<void*> peers_;
};

// Peer-write probe across all GPUs this process can see (used by `braid info` in a single process).
struct PeerLink {
  int from, to;
  bool can_access;   // driver's answer
  bool probe_ok;     // a kernel on `from` wrote to `to` and the data arrived
  std::string detail;
};
std::vector<PeerLink> probe_local_peers();

}  // namespace braid
