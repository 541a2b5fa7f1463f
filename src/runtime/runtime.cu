// Runtime, Team, SymmetricBuffer: MPI bootstrap, NCCL communicators, CUDA IPC peer memory, signals.
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "braid/env.hpp"
#include "braid/runtime.hpp"
#include "braid/signal_device.cuh"

namespace braid {

const char* op_name(uint32_t op) {
  switch (static_cast<OpId>(op)) {
    case OpId::kNone: return "none";
    case OpId::kBarrier: return "barrier";
    case OpId::kPeerProbe: return "peer-probe";
    case OpId::kFlagWait: return "flag-wait";
    case OpId::kAllReduceOneShot: return "allreduce-oneshot";
    case OpId::kAllReduceTwoShot: return "allreduce-twoshot";
    case OpId::kAllReduceQuant: return "allreduce-quantized";
    case OpId::kAllReduceSymmetric: return "allreduce-symmetric";
    case OpId::kPeerComm: return "peer-comm";
    case OpId::kRowsExchange: return "rows-exchange";
    case OpId::kTest: return "test";
  }
  return "unknown-op";
}

int visible_gpu_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

// ---------------------------------------------------------------------------------------------------
// Runtime

Runtime::Runtime(int* argc, char*** argv, bool need_gpu) {
  int inited = 0;
  BRAID_MPI_CHECK(MPI_Initialized(&inited));
  if (!inited) {
    int provided = 0;
    BRAID_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
    owns_mpi_ = true;
  }
  BRAID_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  BRAID_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size_));
  set_current_rank(rank_);
  // Connect NCCL's transports at communicator creation, not lazily inside the first collective: a
  // lazy connect blocks the host inside the NCCL call when a peer is missing, before any bounded
  // wait of ours can run. The user's own setting wins.
  setenv("NCCL_RUNTIME_CONNECT", "0", 0);
  MPI_Comm local;
  BRAID_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local));
  BRAID_MPI_CHECK(MPI_Comm_rank(local, &local_rank_));
  BRAID_MPI_CHECK(MPI_Comm_size(local, &local_size_));
  BRAID_MPI_CHECK(MPI_Comm_free(&local));
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  hostname_ = host;
  const int ngpu = visible_gpu_count();
  if (ngpu == 0) {
    if (need_gpu) throw UnavailableError("no CUDA device visible on " + hostname_, __FILE__, __LINE__);
    return;
  }
  device_ = local_rank_ % ngpu;
  BRAID_CUDA_CHECK(cudaSetDevice(device_));
  BRAID_CUDA_CHECK(cudaFree(nullptr));  // create the context now, not inside a timed region
}

Runtime::~Runtime() {
  if (owns_mpi_) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }
}

// ---------------------------------------------------------------------------------------------------
// Peer probe kernels

namespace {

// Writes `pattern ^ i` for i < n words into `dst` (a peer's memory) with plain remote stores.
__global__ void probe_write_kernel(uint32_t* dst, int n, uint32_t pattern) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) dst[i] = pattern ^ i;
}
__global__ void probe_check_kernel(const uint32_t* src, int n, uint32_t pattern, unsigned* wrong) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    if (src[i] != (pattern ^ static_cast<uint32_t>(i))) atomicAdd(wrong, 1u);
}

constexpr int kProbeWords = 1 << 16;  // 256 KiB per peer

uint32_t probe_pattern(int from, int to) { return 0x9E3779B9u * (from + 1) ^ (0x85EBCA6Bu * (to + 7)); }

}  // namespace

// ---------------------------------------------------------------------------------------------------
// Team

Team::Team(const Runtime&, TeamOptions opt) : Team(MPI_COMM_WORLD, opt) {}

Team::Team(MPI_Comm comm, TeamOptions opt) {
  BRAID_MPI_CHECK(MPI_Comm_dup(comm, &comm_));
  owns_comm_ = true;
  init(opt);
}

Team::Team(MPI_Comm adopted, ncclComm_t adopted_nccl, TeamOptions opt) {
  comm_ = adopted;
  owns_comm_ = true;
  nccl_ = adopted_nccl;
  init(opt);
}

void Team::init(TeamOptions opt) {
  opt_ = opt;
  BRAID_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  BRAID_MPI_CHECK(MPI_Comm_size(comm_, &size_));
  if (visible_gpu_count() == 0) throw UnavailableError("Team needs a GPU per rank", __FILE__, __LINE__);

  if (env::flag("BRAID_SHARED_GPU").value_or(false)) opt_.shared_gpu = true;
  if (!nccl_ && !opt_.shared_gpu) {
    ncclUniqueId id;
    if (rank_ == 0) BRAID_NCCL_CHECK(ncclGetUniqueId(&id));
    BRAID_MPI_CHECK(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, comm_));
    BRAID_NCCL_CHECK(ncclCommInitRank(&nccl_, size_, id, rank_));
  }
  BRAID_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));

  // Error word: pinned and mapped, so the host reads it while a kernel may still be stuck.
  BRAID_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&err_host_), sizeof(DeviceError), cudaHostAllocMapped));
  std::memset(err_host_, 0, sizeof(DeviceError));
  BRAID_CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&err_dev_), err_host_, 0));

  // Same node? Compare host names (MPI shared-memory split gives the same answer for one node).
  MPI_Comm local;
  BRAID_MPI_CHECK(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local));
  int local_size = 0;
  BRAID_MPI_CHECK(MPI_Comm_size(local, &local_size));
  BRAID_MPI_CHECK(MPI_Comm_free(&local));
  same_node_ = local_size == size_;

  if (!same_node_) {
    peer_status_ = "ranks span several nodes: peer memory disabled, NCCL only";
  } else if (size_ > kMaxPeers) {
    peer_status_ = "more than " + std::to_string(kMaxPeers) + " ranks: peer memory disabled";
  } else if (!opt_.probe_peers) {
    peer_status_ = "peer probe disabled by option";
  } else {
    probe_peers();
  }
  if (peer_ok_) {
    const size_t flag_bytes = static_cast<size_t>(opt_.signal_slots) * kMaxPeers * sizeof(uint32_t);
    flags_ = std::make_unique<SymmetricBuffer>(*this, flag_bytes);
    BRAID_CUDA_CHECK(cudaMemset(flags_->local(), 0, flag_bytes));
    BRAID_CUDA_CHECK(cudaMalloc(&epochs_, opt_.signal_slots * sizeof(uint32_t)));
    BRAID_CUDA_CHECK(cudaMemset(epochs_, 0, opt_.signal_slots * sizeof(uint32_t)));
    BRAID_CUDA_CHECK(cudaDeviceSynchronize());
    barrier();  // every rank's flags are zero before anyone signals
    view_.local_flags = flags_->local_as<uint32_t>();
    for (int r = 0; r < kMaxPeers; ++r) view_.peer_flags[r] = r < size_ ? flags_->peer_as<uint32_t>(r) : nullptr;
    view_.epochs = epochs_;
    view_.err = err_dev_;
    view_.rank = rank_;
    view_.world = size_;
    view_.num_slots = opt_.signal_slots;
    view_.timeout_ns = static_cast<uint64_t>(opt_.timeout_s * 1e9);
    view_.barrier_mode = 1;  // "release" (2x H100: one-shot 64 KiB 10.7 -> 6.9 us; docs/flash-communication.md)
    if (env::choice("BRAID_BARRIER", {"fence", "release"}).value_or("release") == "fence") view_.barrier_mode = 0;
  }
}

void Team::probe_peers() {
  // Driver's answer first.
  int dev = 0;
  BRAID_CUDA_CHECK(cudaGetDevice(&dev));
  std::vector<int> devs(size_);
  BRAID_MPI_CHECK(MPI_Allgather(&dev, 1, MPI_INT, devs.data(), 1, MPI_INT, comm_));
  bool ok = true;
  std::string why;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    if (devs[r] == dev) {
      if (opt_.shared_gpu) continue;  // CUDA IPC between processes on one device; no peer access needed
      ok = false;
      why = "two ranks share GPU " + std::to_string(dev);
      continue;
    }
    int can = 0;
    BRAID_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, dev, devs[r]));
    if (!can) {
      ok = false;
      why = "driver: GPU " + std::to_string(dev) + " cannot access GPU " + std::to_string(devs[r]);
    }
  }
  int all_ok = ok ? 1 : 0;
  BRAID_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &all_ok, 1, MPI_INT, MPI_MIN, comm_));
  if (!all_ok) {
    peer_status_ = why.empty() ? "a peer's driver refused peer access" : why;
    return;
  }
  // Real write probe: a region per writer in each rank's buffer.
  peer_ok_ = true;  // SymmetricBuffer needs to map; reset below on failure
  {
    SymmetricBuffer probe(*this, static_cast<size_t>(kProbeWords) * sizeof(uint32_t) * size_);
    BRAID_CUDA_CHECK(cudaMemset(probe.local(), 0, probe.bytes()));
    BRAID_CUDA_CHECK(cudaDeviceSynchronize());
    barrier();
    for (int r = 0; r < size_; ++r) {
      uint32_t* dst = probe.peer_as<uint32_t>(r) + static_cast<size_t>(rank_) * kProbeWords;
      probe_write_kernel<<<32, 256, 0, stream_>>>(dst, kProbeWords, probe_pattern(rank_, r));
      BRAID_CHECK_LAUNCH();
    }
    BRAID_CUDA_CHECK(cudaStreamSynchronize(stream_));
    barrier();
    unsigned* wrong = nullptr;
    BRAID_CUDA_CHECK(cudaMalloc(&wrong, sizeof(unsigned)));
    BRAID_CUDA_CHECK(cudaMemsetAsync(wrong, 0, sizeof(unsigned), stream_));
    for (int r = 0; r < size_; ++r) {
      const uint32_t* src = probe.local_as<uint32_t>() + static_cast<size_t>(r) * kProbeWords;
      probe_check_kernel<<<32, 256, 0, stream_>>>(src, kProbeWords, probe_pattern(r, rank_), wrong);
      BRAID_CHECK_LAUNCH();
    }
    unsigned bad = 0;
    BRAID_CUDA_CHECK(cudaMemcpyAsync(&bad, wrong, sizeof(bad), cudaMemcpyDeviceToHost, stream_));
    BRAID_CUDA_CHECK(cudaStreamSynchronize(stream_));
    BRAID_CUDA_CHECK(cudaFree(wrong));
    all_ok = bad == 0 ? 1 : 0;
    BRAID_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &all_ok, 1, MPI_INT, MPI_MIN, comm_));
  }
  peer_ok_ = all_ok != 0;
  peer_status_ = peer_ok_ ? "peer writes verified (CUDA IPC)" : "peer write probe failed: data did not arrive";
  if (peer_ok_ && opt_.shared_gpu) peer_status_ += "; shared GPU (BRAID_SHARED_GPU): no NCCL, ranks time-slice";
}

Team::~Team() {
  agree_healthy();  // every rank then tears down the same way (abort everywhere, or destroy everywhere)
  flags_.reset();
  if (epochs_) cudaFree(epochs_);
  if (err_host_) cudaFreeHost(err_host_);
  if (stream_) cudaStreamDestroy(stream_);
  if (nccl_zero_cta_) {
    if (broken_) ncclCommAbort(nccl_zero_cta_);
    else ncclCommDestroy(nccl_zero_cta_);
  }
  if (nccl_) {
    if (broken_) ncclCommAbort(nccl_);
    else ncclCommDestroy(nccl_);
  }
  if (owns_comm_ && comm_ != MPI_COMM_NULL && !comm_pending_) MPI_Comm_free(&comm_);
}

bool Team::agree_healthy() {
  if (comm_ == MPI_COMM_NULL || comm_pending_) return !broken_;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return !broken_;
  // Heap-held so that a request that never completes still has valid buffers (leaked on that path).
  auto* v = new int[2]{broken_ ? 1 : 0, 0};
  MPI_Request req = MPI_REQUEST_NULL;
  if (MPI_Iallreduce(&v[0], &v[1], 1, MPI_INT, MPI_MAX, comm_, &req) != MPI_SUCCESS) {
    delete[] v;
    abort();
    return false;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(opt_.timeout_s);
  for (int spins = 0;; ++spins) {
    int done = 0;
    if (MPI_Test(&req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
      comm_pending_ = true;
      abort();
      return false;
    }
    if (done) break;
    if (std::chrono::steady_clock::now() > deadline) {  // a peer never came: leave it, abort locally
      comm_pending_ = true;
      abort();
      return false;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(spins < 1000 ? 20 : 1000));
  }
  const bool healthy = v[1] == 0;
  delete[] v;
  if (!healthy) abort();
  return healthy;
}

std::unique_ptr<Team> Team::split(int color, int key, TeamOptions opt) const {
  MPI_Comm sub;
  BRAID_MPI_CHECK(MPI_Comm_split(comm_, color, key, &sub));
  ncclComm_t nsub = nullptr;
  if (!opt_.shared_gpu) BRAID_NCCL_CHECK(ncclCommSplit(nccl(), color, key, &nsub, nullptr));
  opt.shared_gpu = opt.shared_gpu || opt_.shared_gpu;
  return std::unique_ptr<Team>(new Team(sub, nsub, opt));
}

ncclComm_t Team::nccl_zero_cta() {
  if (!nccl_zero_cta_) nccl_zero_cta_ = split_nccl_zero_cta();
  return nccl_zero_cta_;
}

ncclComm_t Team::split_nccl_zero_cta() {
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
  if (!same_node_ || !peer_ok_)
    throw UnavailableError("zero-CTA NCCL communicator: the ranks are not on one node with peer access (" +
                               peer_status_ + ")",
                           __FILE__, __LINE__);
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.CTAPolicy = NCCL_CTA_POLICY_ZERO;
  ncclComm_t c = nullptr;
  BRAID_NCCL_CHECK(ncclCommSplit(nccl(), 0, rank_, &c, &cfg));
  return c;
#else
  throw UnavailableError("zero-CTA NCCL communicator: needs NCCL >= 2.28 (built with " + std::to_string(NCCL_MAJOR) +
                             "." + std::to_string(NCCL_MINOR) + ")",
                         __FILE__, __LINE__);
#endif
}

NcclWindow::NcclWindow(ncclComm_t comm, size_t bytes) : comm_(comm), bytes_(bytes) {
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
  BRAID_NCCL_CHECK(ncclMemAlloc(&p_, bytes));
  ncclWindow_t w = nullptr;
  const ncclResult_t r = ncclCommWindowRegister(comm, p_, bytes, &w, NCCL_WIN_COLL_SYMMETRIC);
  if (r != ncclSuccess) ncclMemFree(p_);
  BRAID_NCCL_CHECK(r);
  win_ = w;
#else
  (void)comm_;
  throw UnavailableError("NCCL symmetric window: needs NCCL >= 2.28 (built with " + std::to_string(NCCL_MAJOR) + "." +
                             std::to_string(NCCL_MINOR) + ")",
                         __FILE__, __LINE__);
#endif
}

NcclWindow::NcclWindow(ncclComm_t comm, void* borrowed, size_t bytes)
    : comm_(comm), bytes_(bytes), p_(borrowed), owned_(false) {
  BRAID_REQUIRE(borrowed != nullptr, "NcclWindow: registering no memory");
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
  ncclWindow_t w = nullptr;
  BRAID_NCCL_CHECK(ncclCommWindowRegister(comm, p_, bytes, &w, NCCL_WIN_COLL_SYMMETRIC));
  win_ = w;
#else
  (void)comm_;
  throw UnavailableError("NCCL symmetric window: needs NCCL >= 2.28", __FILE__, __LINE__);
#endif
}

NcclWindow::~NcclWindow() {
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
  if (win_) ncclCommWindowDeregister(comm_, static_cast<ncclWindow_t>(win_));
  if (p_ && owned_) ncclMemFree(p_);
#endif
}

const SignalView& Team::signals() const {
  if (!peer_ok_) throw UnavailableError("no peer memory on this team: " + peer_status_, __FILE__, __LINE__);
  return view_;
}

int Team::reserve_slots(int n) {
  if (next_slot_ + n > opt_.signal_slots)
    throw UsageError("out of signal slots (" + std::to_string(opt_.signal_slots) + ")", __FILE__, __LINE__);
  const int s = next_slot_;
  next_slot_ += n;
  return s;
}

void Team::check_device_error(const char* what) const {
  if (!err_host_) return;
  if (const_cast<volatile DeviceError*>(err_host_)->code == 0) return;
  DeviceError e;
  std::memcpy(&e, err_host_, sizeof(e));  // the waiter wrote the fields before its fence
  if (e.code == 2)
    throw UsageError(std::string(what) + ": a device-side bound was exceeded in op '" + op_name(e.op) + "' on rank " +
                         std::to_string(e.rank) + ": " + std::to_string(e.observed) + " against a bound of " +
                         std::to_string(e.expected) + " (nothing was moved)",
                     __FILE__, __LINE__);
  throw TimeoutError(std::string(what) + ": device wait timed out in op '" + op_name(e.op) + "' on rank " +
                         std::to_string(e.rank) + " (block " + std::to_string(e.block) + "), flag slot " +
                         std::to_string(e.flag) + " from peer " + std::to_string(e.peer) + ": expected epoch " +
                         std::to_string(e.expected) + ", saw " + std::to_string(e.observed) + " after " +
                         std::to_string(opt_.timeout_s) + " s",
                     __FILE__, __LINE__);
}

void Team::synchronize(cudaStream_t stream, const char* what, double timeout_s) {
  if (timeout_s < 0) timeout_s = opt_.timeout_s;
  // A device wait bounded by the same timeout started no later than this call, so it reports first
  // (naming its flag and peer) if the host gives it a grace beyond timeout_s for the clock checks, the
  // error write and the kernel's exit. Without the grace the two raced (both at 0.5 s in the runtime test).
  const double grace_s = 0.1 + 0.1 * timeout_s;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s + grace_s);
  for (int spins = 0;; ++spins) {
    const cudaError_t q = cudaStreamQuery(stream);
    if (q == cudaSuccess) break;
    if (q != cudaErrorNotReady) BRAID_CUDA_CHECK(q);
    if (err_host_ && const_cast<volatile DeviceError*>(err_host_)->code != 0) {
      // A device wait gave up; its kernel is exiting. Let the stream drain, then report.
      BRAID_CUDA_CHECK(cudaStreamSynchronize(stream));
      break;
    }
    if (nccl_) {
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(nccl_, &async);
      if (async != ncclSuccess && async != ncclInProgress) {
        broken_ = true;
        ncclCommAbort(nccl_);
        nccl_ = nullptr;
        throw NcclError(std::string(what) + ": NCCL asynchronous error " + ncclGetErrorString(async), __FILE__,
                        __LINE__);
      }
    }
    if (std::chrono::steady_clock::now() > deadline) {
      broken_ = true;
      if (nccl_) {
        ncclCommAbort(nccl_);  // makes NCCL kernels stuck on an absent peer exit
        nccl_ = nullptr;
      }
      throw TimeoutError(std::string(what) + ": stream did not complete within " + std::to_string(timeout_s + grace_s) +
                             " s on rank " + std::to_string(rank_) +
                             " (a peer never joined; NCCL communicator aborted, team unusable)",
                         __FILE__, __LINE__);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(spins < 1000 ? 20 : 1000));
  }
  check_device_error(what);
}

void Team::abort() {
  broken_ = true;
  if (nccl_) {
    ncclCommAbort(nccl_);
    nccl_ = nullptr;
  }
}

ncclComm_t Team::nccl() const {
  if (!nccl_)
    throw UnavailableError(opt_.shared_gpu ? "NCCL communicator: none in a shared-GPU team (BRAID_SHARED_GPU)"
                                           : "NCCL communicator: aborted (the team is broken)",
                           __FILE__, __LINE__);
  return nccl_;
}

void Team::barrier() const { BRAID_MPI_CHECK(MPI_Barrier(comm_)); }

double Team::allreduce_max(double v) const {
  BRAID_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_DOUBLE, MPI_MAX, comm_));
  return v;
}
double Team::allreduce_min(double v) const {
  BRAID_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_DOUBLE, MPI_MIN, comm_));
  return v;
}
std::vector<double> Team::allreduce_max(const std::vector<double>& v) const {
  std::vector<double> out(v);
  BRAID_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, out.data(), static_cast<int>(out.size()), MPI_DOUBLE, MPI_MAX, comm_));
  return out;
}

// ---------------------------------------------------------------------------------------------------
// SymmetricBuffer

namespace {
std::vector<int> all_ranks(int n) {
  std::vector<int> v(n);
  for (int r = 0; r < n; ++r) v[r] = r;
  return v;
}
}  // namespace

// Every rank a member: one mechanism for both forms.
SymmetricBuffer::SymmetricBuffer(Team& team, size_t bytes) : SymmetricBuffer(team, bytes, all_ranks(team.size_)) {}

SymmetricBuffer::SymmetricBuffer(Team& team, size_t bytes, const std::vector<int>& members)
    : team_(team), bytes_(bytes) {
  if (!team.peer_ok_) throw UnavailableError("symmetric memory needs peer access: " + team.peer_status_, __FILE__, __LINE__);
  std::vector<char> in(team.size_, 0);
  for (int r : members) {
    if (r < 0 || r >= team.size_) throw UsageError("SymmetricBuffer: a member outside the team", __FILE__, __LINE__);
    in[r] = 1;
  }
  const bool me = in[team.rank_] != 0;
  // Collective agreement on the members and the size: a mismatch would map buffers of different lengths, or wait
  // for a handle that never comes. Members contribute their size, non-members nothing.
  const unsigned long long big = ~0ull;
  unsigned long long lo[2] = {me ? bytes : big, me ? ~bytes : big}, out[2] = {0, 0};  // min bytes, max bytes
  BRAID_MPI_CHECK(MPI_Allreduce(lo, out, 2, MPI_UNSIGNED_LONG_LONG, MPI_MIN, team.comm_));
  std::vector<char> every(size_t(team.size_) * team.size_);
  BRAID_MPI_CHECK(MPI_Allgather(in.data(), team.size_, MPI_CHAR, every.data(), team.size_, MPI_CHAR, team.comm_));
  for (int r = 0; r < team.size_; ++r)
    if (!std::equal(in.begin(), in.end(), every.begin() + size_t(r) * team.size_))
      throw UsageError("SymmetricBuffer: ranks named different members", __FILE__, __LINE__);
  if (out[0] != big && out[0] != ~out[1])  // (every rank sees it alike and throws: no rank is left in the exchange)
    throw UsageError("SymmetricBuffer: ranks asked for different sizes", __FILE__, __LINE__);
  cudaIpcMemHandle_t mine{};
  if (me) {
    BRAID_CUDA_CHECK(cudaMalloc(&local_, bytes_ == 0 ? 256 : bytes_));
    BRAID_CUDA_CHECK(cudaIpcGetMemHandle(&mine, local_));
  } else {
    bytes_ = 0;
  }
  std::vector<cudaIpcMemHandle_t> all(team.size_);
  BRAID_MPI_CHECK(MPI_Allgather(&mine, sizeof(mine), MPI_BYTE, all.data(), sizeof(mine), MPI_BYTE, team.comm_));
  peers_.assign(team.size_, nullptr);
  if (!me) return;
  for (int r = 0; r < team.size_; ++r) {
    if (r == team.rank_) {
      peers_[r] = local_;
    } else if (in[r]) {
      BRAID_CUDA_CHECK(cudaIpcOpenMemHandle(&peers_[r], all[r], cudaIpcMemLazyEnablePeerAccess));
    }
  }
}

SymmetricBuffer::~SymmetricBuffer() {
  for (int r = 0; r < static_cast<int>(peers_.size()); ++r)
    if (r != team_.rank_ && peers_[r]) cudaIpcCloseMemHandle(peers_[r]);
  // Nobody may still map our memory when we free it: the agreement is the barrier (skipped, bounded,
  // on every rank alike once any rank's team is broken).
  team_.agree_healthy();
  cudaDeviceSynchronize();
  if (local_) cudaFree(local_);
}

// ---------------------------------------------------------------------------------------------------
// Single-process peer probe (braid info)

std::vector<PeerLink> probe_local_peers() {
  std::vector<PeerLink> links;
  const int n = visible_gpu_count();
  int saved = 0;
  if (n > 0) cudaGetDevice(&saved);
  for (int a = 0; a < n; ++a) {
    for (int b = 0; b < n; ++b) {
      if (a == b) continue;
      PeerLink l{a, b, false, false, ""};
      int can = 0;
      BRAID_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, a, b));
      l.can_access = can != 0;
      if (!can) {
        l.detail = "driver refuses";
        links.push_back(l);
        continue;
      }
      uint32_t* dst = nullptr;
      BRAID_CUDA_CHECK(cudaSetDevice(b));
      BRAID_CUDA_CHECK(cudaMalloc(&dst, kProbeWords * sizeof(uint32_t)));
      BRAID_CUDA_CHECK(cudaMemset(dst, 0, kProbeWords * sizeof(uint32_t)));
      BRAID_CUDA_CHECK(cudaDeviceSynchronize());
      BRAID_CUDA_CHECK(cudaSetDevice(a));
      const cudaError_t e = cudaDeviceEnablePeerAccess(b, 0);
      if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) BRAID_CUDA_CHECK(e);
      cudaGetLastError();
      probe_write_kernel<<<32, 256>>>(dst, kProbeWords, probe_pattern(a, b));
      BRAID_CHECK_LAUNCH();
      BRAID_CUDA_CHECK(cudaDeviceSynchronize());
      BRAID_CUDA_CHECK(cudaSetDevice(b));
      unsigned* wrong = nullptr;
      BRAID_CUDA_CHECK(cudaMalloc(&wrong, sizeof(unsigned)));
      BRAID_CUDA_CHECK(cudaMemset(wrong, 0, sizeof(unsigned)));
      probe_check_kernel<<<32, 256>>>(dst, kProbeWords, probe_pattern(a, b), wrong);
      BRAID_CHECK_LAUNCH();
      unsigned bad = 0;
      BRAID_CUDA_CHECK(cudaMemcpy(&bad, wrong, sizeof(bad), cudaMemcpyDeviceToHost));
      cudaFree(wrong);
      cudaFree(dst);
      l.probe_ok = bad == 0;
      l.detail = l.probe_ok ? "remote stores verified" : std::to_string(bad) + " words wrong";
      links.push_back(l);
      BRAID_CUDA_CHECK(cudaSetDevice(a));
      cudaDeviceDisablePeerAccess(b);
      cudaGetLastError();
    }
  }
  if (n > 0) cudaSetDevice(saved);
  return links;
}

}  // namespace braid
