// a2a.cu — FlashOverlap GEMM + all-to-all (include/braid/overlap.hpp, GemmAllToAll): the GEMM's
// epilogue writes each row into its destination's segment of its wave group and signals the group;
// the comm stream waits per group and sends every (group, peer) segment with ncclSend/ncclRecv inside
// one NCCL group (or braid's copy-engine pushes); the consumer gather writes the normal layout. Or
// (Transport::kPeerStores) the epilogue stores every row straight into its destination's output over
// NVLink and a barrier after the GEMM hands them over. Plus the packed all-to-all-v baseline.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "braid/errors.hpp"
#include "braid/overlap.hpp"
#include "braid/runtime.hpp"
#include "comm_wait.cuh"

namespace braid::overlap {
namespace {

// out[row][nb*bn + c] = recv[k*bn + c] for piece k (piece_dst[k] = row * tiles_n + nb): one warp per
// piece, 16-byte accesses (bn % 8 == 0). recv: (pieces, bn); out: (rows, tiles_n*bn).
__global__ void a2a_gather_kernel(const uint4* __restrict__ recv, uint4* __restrict__ out,
                                  const int32_t* __restrict__ piece_dst, int64_t pieces, int tiles_n, int vecs) {
  const int64_t warp = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (warp >= pieces) return;
  const int32_t code = piece_dst[warp];
  const int64_t row = code / tiles_n, nb = code % tiles_n;
  const uint4* src = recv + warp * vecs;
  uint4* dst = out + (row * tiles_n + nb) * vecs;
  for (int v = lane; v < vecs; v += 32) dst[v] = src[v];
}

// packed[j] = d[pack_rows[j]] (rows of n elements, 16-byte vectors): the baseline's pack by destination.
__global__ void pack_rows_kernel(const uint4* __restrict__ d, uint4* __restrict__ packed,
                                 const int32_t* __restrict__ rows, int vecs) {
  const int64_t j = blockIdx.x;
  const int64_t i = rows[j];
  for (int v = threadIdx.x; v < vecs; v += blockDim.x) packed[j * vecs + v] = d[i * vecs + v];
}

// Transport::kPeerStores, after the GEMM (same stream): thread 0 acquires the tile counter at system scope (every
// tile's rows, stored into this rank's and the peers' outputs, were released with red.release.sys before its
// increment), then the block meets every rank: barrier_block's __syncthreads orders that acquire before the
// per-peer release stores, so a peer that passes the barrier (acquire) sees every row we stored into its
// output, and the peer's later work on its stream reads them. Bounded: a timeout records the team's
// DeviceError (Team::synchronize / check_error throw it).
__global__ void a2a_stores_end_kernel(SignalView v, int slot, const uint32_t* counter, uint32_t tiles) {
  if (threadIdx.x == 0) dev::wait_geq(v, counter, tiles, uint32_t(OpId::kBarrier), uint32_t(slot), v.rank);
  dev::barrier_block(v, slot, uint32_t(OpId::kBarrier));
}

const ncclDataType_t kBf16 = ncclBfloat16;

// One all-to-all-v step: every peer's segment sent and received inside one NCCL group (self included).
void send_recv(const __nv_bfloat16* send, const int64_t* send_off, const int64_t* send_cnt, __nv_bfloat16* recv,
               const int64_t* recv_off, const int64_t* recv_cnt, int world, ncclComm_t comm, cudaStream_t s) {
  BRAID_NCCL_CHECK(ncclGroupStart());
  for (int p = 0; p < world; ++p) {
    if (send_cnt[p] > 0) BRAID_NCCL_CHECK(ncclSend(send + send_off[p], size_t(send_cnt[p]), kBf16, p, comm, s));
    if (recv_cnt[p] > 0) BRAID_NCCL_CHECK(ncclRecv(recv + recv_off[p], size_t(recv_cnt[p]), kBf16, p, comm, s));
  }
  BRAID_NCCL_CHECK(ncclGroupEnd());
}

}  // namespace

GemmAllToAll::GemmAllToAll(Team& team, const A2aOptions& opt) : team_(team), opt_(opt) {
  BRAID_REQUIRE(opt.m > 0 && opt.n > 0 && opt.k > 0, "GemmAllToAll: empty shape");
  BRAID_REQUIRE(team.size() <= 16, "GemmAllToAll: at most 16 ranks");
  BRAID_REQUIRE(opt.transport == Transport::kNcclKernels || opt.transport == Transport::kPeerCopyEngine ||
                    opt.transport == Transport::kPeerStores,
                "GemmAllToAll: transport kNcclKernels, kPeerCopyEngine or kPeerStores");
  int dev = 0, sms = 0;
  BRAID_CUDA_CHECK(cudaGetDevice(&dev));
  BRAID_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  // Only NCCL's kernels need SMs beside the GEMM; the copy engines and the stores none.
  if (opt_.reserve_sms < 0) opt_.reserve_sms = opt.transport == Transport::kNcclKernels ? 16 : 0;
  const int gemm_sms = std::max(8, sms - opt_.reserve_sms);
  if (opt_.tile == TileConfig::kAuto) opt_.tile = choose_tile_config(opt.m, opt.n, opt.k, gemm_sms);
  gemm_ = std::make_unique<SignalGemm>(opt_.tile, gemm_sms);
  const TileGrid grid = gemm_->plan(opt.m, opt.n, opt.k);
  const int T = grid.num_waves();
  std::vector<int> waves = opt.group_waves;
  if (stores()) waves.assign(1, T);  // nothing waits per group: one counter of every tile
  if (waves.empty()) waves = default_group_waves(T);
  map_ = make_mapping(grid, waves, 1);
  const size_t tiles = grid.num_tiles();
  const int G = map_.groups();
  if (!stores()) BRAID_CUDA_CHECK(cudaMalloc(&d_, size_t(opt.m) * opt.n * 2));  // stores: rows go to output()s
  BRAID_CUDA_CHECK(cudaMalloc(&tables_, (2 * tiles + size_t(G) + 1) * sizeof(int32_t)));
  std::vector<int32_t> h;
  h.insert(h.end(), map_.tile_slot.begin(), map_.tile_slot.end());
  h.insert(h.end(), map_.tile_group.begin(), map_.tile_group.end());
  h.insert(h.end(), map_.group_first.begin(), map_.group_first.end());
  BRAID_CUDA_CHECK(cudaMemcpy(tables_, h.data(), h.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
  BRAID_CUDA_CHECK(cudaMalloc(&row_code_, size_t(opt.m) * sizeof(int32_t)));
  BRAID_CUDA_CHECK(cudaMalloc(&pack_rows_, size_t(opt.m) * sizeof(int32_t)));
  BRAID_CUDA_CHECK(cudaMalloc(&tile_dest_base_, tiles * team.size() * sizeof(int64_t)));
  BRAID_CUDA_CHECK(cudaMalloc(&counters_, (size_t(G) + 1) * sizeof(uint32_t)));
  BRAID_CUDA_CHECK(cudaMemset(counters_, 0, (size_t(G) + 1) * sizeof(uint32_t)));
  BRAID_CUDA_CHECK(cudaStreamCreateWithFlags(&comm_, cudaStreamNonBlocking));
  BRAID_CUDA_CHECK(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming));
  BRAID_CUDA_CHECK(cudaEventCreateWithFlags(&join_, cudaEventDisableTiming));
  if (peer() || stores()) {  // peers' memory mapped, a barrier slot
    if (!team.peer_ok())
      throw UnavailableError(std::string("FlashOverlap all-to-all over ") + transport_name(opt.transport) +
                                 ": needs peer access between all ranks (" + team.peer_status() + ")",
                             __FILE__, __LINE__);
    peer_slot_ = team.reserve_slots(1);
  }
  if (peer()) {  // braid's copy-engine pushes: the stream memory operations, flags
    const char* what = "FlashOverlap all-to-all over peer copy engines";
    write_value_ = memops::required_entry_point("cuStreamWriteValue32", what);
    wait_value_ = memops::required_entry_point("cuStreamWaitValue32", what);
    peer_flags_ = std::make_unique<SymmetricBuffer>(team, size_t(G) * team.size() * 4);  // collective
    BRAID_CUDA_CHECK(cudaMemset(peer_flags_->local(), 0, size_t(G) * team.size() * 4));
    peer_wait_flags_ = memops::remote_wait_flags();
  } else if (stores()) {  // every rank's output(), as this rank's kernels address it
    BRAID_CUDA_CHECK(cudaMalloc(&dest_ptrs_, size_t(team.size()) * sizeof(void*)));
  } else if (opt.use_stream_wait_value) {
    wait_value_ = detail::wait_value_entry_point();
  }
  BRAID_CUDA_CHECK(cudaHostAlloc(&err_host_, sizeof(detail::WaitError), cudaHostAllocMapped));
  std::memset(err_host_, 0, sizeof(detail::WaitError));
  // cudaMemset/cudaMemcpy above run on the legacy stream, which the library's non-blocking streams do not
  // wait for (and a pageable host-to-device copy may return before its DMA lands): finish them here.
  BRAID_CUDA_CHECK(cudaDeviceSynchronize());
}

GemmAllToAll::~GemmAllToAll() {
  if (peer_flags_ && comm_ && write_value_) {
    // No-hang contract: the comm stream waits (stream memory operations, no timeout of their own) for the
    // flags peers raise; if the last run has not finished within the timeout, a peer failed: release this
    // rank's flags so the stream drains (that run's output is garbage).
    if (!memops::wait_bounded([&] { return cudaStreamQuery(comm_); }, team_.options().timeout_s))
      memops::release_words(write_value_, peer_flags_->local_as<uint32_t>(), peer_flags_->bytes() / 4,
                            team_.options().timeout_s);
  }
  if (comm_) cudaStreamSynchronize(comm_);  // its counter waits are released by the GEMM, which has no waits
  cudaFree(d_);
  if (!peer_recv_) cudaFree(recv_);  // peer_recv_ (symmetric memory) is released with the object, collectively
  cudaFree(tables_);
  cudaFree(row_code_);
  cudaFree(pack_rows_);
  cudaFree(tile_dest_base_);
  cudaFree(piece_dst_);
  cudaFree(dest_ptrs_);
  cudaFree(counters_);
  if (err_host_) cudaFreeHost(err_host_);
  if (fork_) cudaEventDestroy(fork_);
  if (join_) cudaEventDestroy(join_);
  if (comm_) cudaStreamDestroy(comm_);
}

void GemmAllToAll::set_routing(const std::vector<int32_t>& dest) {
  const int W = team_.size();
  BRAID_REQUIRE(int64_t(dest.size()) == opt_.m, "GemmAllToAll::set_routing: one destination per row");
  std::vector<int32_t> all(size_t(opt_.m) * W);
  BRAID_MPI_CHECK(MPI_Allgather(dest.data(), int(opt_.m), MPI_INT32_T, all.data(), int(opt_.m), MPI_INT32_T,
                                team_.mpi()));
  dest_all_.assign(size_t(W), {});
  for (int q = 0; q < W; ++q) dest_all_[q].assign(all.begin() + int64_t(q) * opt_.m, all.begin() + int64_t(q + 1) * opt_.m);
  plan_ = make_a2a_plan(map_, W, team_.rank(), dest_all_);
  BRAID_CUDA_CHECK(cudaDeviceSynchronize());  // no run still reads the old tables
  const size_t tiles = map_.grid.num_tiles();
  BRAID_CUDA_CHECK(cudaMemcpy(row_code_, plan_.row_code.data(), plan_.row_code.size() * 4, cudaMemcpyHostToDevice));
  BRAID_CUDA_CHECK(cudaMemcpy(pack_rows_, plan_.pack_rows.data(), plan_.pack_rows.size() * 4, cudaMemcpyHostToDevice));
  BRAID_CUDA_CHECK(cudaMemcpy(tile_dest_base_, (stores() ? plan_.direct_base : plan_.tile_dest_base).data(),
                              tiles * W * 8, cudaMemcpyHostToDevice));
  if (stores()) {
    // Every rank's output() as large as the largest rank's rows (symmetric memory: one size, collectively).
    std::vector<int64_t> rows_to(static_cast<size_t>(W), 0);  // rows every rank receives
    for (const auto& dq : dest_all_)
      for (int32_t d : dq) ++rows_to[size_t(d)];
    const int64_t most = *std::max_element(rows_to.begin(), rows_to.end());
    if (most > recv_cap_ || !peer_recv_) {
      peer_recv_.reset();  // collective, as the allocation below (every rank computes the same `most`)
      recv_cap_ = most;
      peer_recv_ = std::make_unique<SymmetricBuffer>(team_, std::max<size_t>(16, size_t(recv_cap_) * opt_.n * 2));
      recv_ = peer_recv_->local();
      std::vector<void*> ptrs(static_cast<size_t>(W));
      for (int q = 0; q < W; ++q) ptrs[size_t(q)] = peer_recv_->peer(q);
      BRAID_CUDA_CHECK(cudaMemcpy(dest_ptrs_, ptrs.data(), ptrs.size() * sizeof(void*), cudaMemcpyHostToDevice));
    }
  } else if (peer()) {
    // Where our (group, peer) segments land in each peer's receive buffer: that peer's plan (every rank has
    // every routing), and a receive buffer as large as the largest rank's, the same on every rank (symmetric
    // memory is allocated collectively with one size).
    const int me = team_.rank(), G = map_.groups();
    peer_dst_off_.assign(size_t(G) * W, 0);
    int64_t most = 0;
    for (int q = 0; q < W; ++q) {
      const A2aPlan pq = q == me ? plan_ : make_a2a_plan(map_, W, q, dest_all_);
      most = std::max(most, pq.recv_rows);
      for (int g = 0; g < G; ++g) peer_dst_off_[size_t(g) * W + q] = pq.recv_off[size_t(g) * W + me];
    }
    if (most > recv_cap_) {
      peer_recv_.reset();  // collective, as the allocation below (every rank computes the same `most`)
      recv_cap_ = most;
      peer_recv_ = std::make_unique<SymmetricBuffer>(team_, std::max<size_t>(16, size_t(recv_cap_) * opt_.n * 2));
      recv_ = peer_recv_->local();
      cudaFree(piece_dst_);
      piece_dst_ = nullptr;
      BRAID_CUDA_CHECK(cudaMalloc(&piece_dst_, std::max<size_t>(16, size_t(recv_cap_) * map_.grid.tiles_n * 4)));
    }
  } else if (plan_.recv_rows > recv_cap_) {
    cudaFree(recv_);
    cudaFree(piece_dst_);
    recv_ = nullptr, piece_dst_ = nullptr;
    recv_cap_ = plan_.recv_rows;
    BRAID_CUDA_CHECK(cudaMalloc(&recv_, std::max<size_t>(16, size_t(recv_cap_) * opt_.n * 2)));
    BRAID_CUDA_CHECK(cudaMalloc(&piece_dst_, std::max<size_t>(16, size_t(recv_cap_) * map_.grid.tiles_n * 4)));
  }
  if (!stores() && !plan_.piece_dst.empty())  // kPeerStores has no gather
    BRAID_CUDA_CHECK(cudaMemcpy(piece_dst_, plan_.piece_dst.data(), plan_.piece_dst.size() * 4, cudaMemcpyHostToDevice));
  BRAID_CUDA_CHECK(cudaDeviceSynchronize());  // pageable uploads land before the next run reads them
}

// The epilogue's tables (group, counters, per-row destinations) with rows written into `d`.
EpilogueArgs GemmAllToAll::epilogue(void* d) const {
  const size_t tiles = map_.grid.num_tiles();
  EpilogueArgs e;
  e.d = d;
  e.tile_slot = tables_;
  e.tile_group = tables_ + tiles;
  e.group_first = tables_ + 2 * tiles;
  e.counters = counters_;
  e.a2a_row_code = row_code_;
  e.a2a_tile_dest_base = tile_dest_base_;
  e.a2a_world = team_.size();
  return e;
}

void GemmAllToAll::check_error() const { detail::throw_if_wait_timed_out(err_host_, team_.rank(), "FlashOverlap all-to-all"); }

void GemmAllToAll::run(const void* a, const void* b, void* out, cudaStream_t stream) {
  BRAID_REQUIRE(!dest_all_.empty(), "GemmAllToAll::run: set_routing first");
  const int W = team_.size(), G = map_.groups();
  const size_t tiles = map_.grid.num_tiles();
  BRAID_CUDA_CHECK(cudaMemsetAsync(counters_, 0, G * sizeof(uint32_t), stream));
  if (stores()) {
    // Meet every rank first (each has finished, in its stream's order, whatever read its output() before this
    // run), then store every row into its destination's output(), then the end kernel hands them over.
    memops::start_barrier(team_, peer_slot_, stream);
    EpilogueArgs e = epilogue(recv_);  // d unused for rows (each goes through a2a_dest_ptrs), checked as set
    e.a2a_dest_ptrs = dest_ptrs_;
    e.a2a_ld = opt_.n;
    gemm_->run(a, b, opt_.m, opt_.n, opt_.k, e, stream);
    a2a_stores_end_kernel<<<1, 32, 0, stream>>>(team_.signals(), peer_slot_, counters_, uint32_t(tiles));
    BRAID_CHECK_LAUNCH();
    if (out != recv_ && plan_.recv_rows > 0)
      BRAID_CUDA_CHECK(cudaMemcpyAsync(out, recv_, size_t(plan_.recv_rows) * opt_.n * 2, cudaMemcpyDeviceToDevice,
                                       stream));
    return;
  }
  if (peer()) {
    // Reset the flags peers raise here, then meet every rank (each has joined its previous run's gather into
    // its stream before this point): only then may any rank push into a peer's receive buffer.
    BRAID_CUDA_CHECK(cudaMemsetAsync(peer_flags_->local(), 0, peer_flags_->bytes(), stream));
    memops::start_barrier(team_, peer_slot_, stream);
  }
  BRAID_CUDA_CHECK(cudaEventRecord(fork_, stream));
  BRAID_CUDA_CHECK(cudaStreamWaitEvent(comm_, fork_, 0));

  gemm_->run(a, b, opt_.m, opt_.n, opt_.k, epilogue(d_), stream);  // launched before the comm stream's waits

  const uint64_t timeout_ns = static_cast<uint64_t>(team_.options().timeout_s * 1e9);
  const auto* d = static_cast<const __nv_bfloat16*>(d_);
  auto* r = static_cast<__nv_bfloat16*>(recv_);
  const int me = team_.rank();
  for (int g = 0; g < G; ++g) {
    detail::enqueue_group_wait(wait_value_, comm_, counters_ + g, uint32_t(map_.tiles_in_group(g)), g, timeout_ns,
                               err_host_);
    const size_t o = size_t(g) * W;
    if (!peer()) {
      send_recv(d, plan_.send_off.data() + o, plan_.send_cnt.data() + o, r, plan_.recv_off.data() + o,
                plan_.recv_cnt.data() + o, W, team_.nccl(), comm_);
      continue;
    }
    // Ordering (as FlashOverlap's reduce-scatter pushes, GemmOverlap::run_peer_copy_group): counter -> copy
    // on comm_ (the epilogue released the tiles before the counter value); copy -> the peer's flag by
    // cuStreamWriteValue32 with default flags (a memory barrier over the stream's earlier work precedes it);
    // flag -> gather: the waits below (GEQ + flush of remote writes), then the gather on `stream` after the
    // join. Staggered: rank me pushes to me + 1 first, its own segment (a local copy) last. Empty segments
    // move nothing and raise nothing (the receiver's count for (g, me) is our send count: it does not wait).
    for (int i = 1; i <= W; ++i) {
      const int q = (me + i) % W;
      const int64_t cnt = plan_.send_cnt[o + q];
      if (cnt <= 0) continue;
      __nv_bfloat16* dst = q == me ? r + plan_.recv_off[o + me] : peer_recv_->peer_as<__nv_bfloat16>(q) + peer_dst_off_[o + q];
      BRAID_CUDA_CHECK(cudaMemcpyAsync(dst, d + plan_.send_off[o + q], size_t(cnt) * 2, cudaMemcpyDefault, comm_));
      if (q != me) memops::stream_write(write_value_, comm_, peer_flags_->peer_as<uint32_t>(q) + o + me, 1u);
    }
  }
  if (peer()) {  // every segment a peer sends us has landed
    const uint32_t* flags = peer_flags_->local_as<uint32_t>();
    for (int g = 0; g < G; ++g)
      for (int q = 0; q < W; ++q)
        if (q != me && plan_.recv_cnt[size_t(g) * W + q] > 0)
          memops::stream_wait(wait_value_, comm_, flags + size_t(g) * W + q, 1u, peer_wait_flags_);
  }
  BRAID_CUDA_CHECK(cudaEventRecord(join_, comm_));
  BRAID_CUDA_CHECK(cudaStreamWaitEvent(stream, join_, 0));
  // The consumer: the inverse reordering (gather into the normal layout).
  const int64_t pieces = plan_.recv_rows * map_.grid.tiles_n;
  if (pieces > 0) {
    const int threads = 256;
    const int64_t blocks = (pieces * 32 + threads - 1) / threads;
    a2a_gather_kernel<<<unsigned(blocks), threads, 0, stream>>>(static_cast<const uint4*>(recv_),
                                                                static_cast<uint4*>(out), piece_dst_, pieces,
                                                                map_.grid.tiles_n, map_.grid.bn / 8);
    BRAID_CHECK_LAUNCH();
  }
}

void GemmAllToAll::run_sequential(CublasGemm& gemm, const void* a, const void* b, void* d, void* packed, void* out,
                                  cudaStream_t stream) const {
  BRAID_REQUIRE(!dest_all_.empty(), "GemmAllToAll::run_sequential: set_routing first");
  BRAID_REQUIRE(opt_.n % 8 == 0, "GemmAllToAll: N % 8");
  const int W = team_.size();
  gemm.run(a, b, d, opt_.m, opt_.n, opt_.k, stream);
  pack_rows_kernel<<<unsigned(opt_.m), 128, 0, stream>>>(static_cast<const uint4*>(d), static_cast<uint4*>(packed),
                                                         pack_rows_, int(opt_.n / 8));
  BRAID_CHECK_LAUNCH();
  std::vector<int64_t> so(W), sc(W), ro(W), rc(W);
  int64_t s_off = 0, r_off = 0;
  for (int p = 0; p < W; ++p) {
    so[p] = s_off, sc[p] = plan_.send_rows[p] * opt_.n, s_off += sc[p];
    ro[p] = r_off, rc[p] = plan_.recv_rows_from[p] * opt_.n, r_off += rc[p];
  }
  send_recv(static_cast<const __nv_bfloat16*>(packed), so.data(), sc.data(), static_cast<__nv_bfloat16*>(out),
            ro.data(), rc.data(), W, team_.nccl(), stream);
}

}  // namespace braid::overlap
