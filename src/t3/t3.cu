// t3.cu — T3 orchestration: symmetric landing/output buffers and counters, the start handshake, the
// copy-engine triggers (cuStreamWaitValue32 -> cudaMemcpyAsync peer -> cuStreamWriteValue32), the
// staggered GEMM launches, and the all-gather -> GEMM consumer.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <vector>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <utility>

#include "braid/bench.hpp"
#include "braid/env.hpp"
#include "braid/errors.hpp"
#include "braid/overlap.hpp"
#include "braid/runtime.hpp"
#include "braid/signal_device.cuh"
#include "braid/stream_memops.cuh"
#include "braid/t3.hpp"
#include "gemm_t3.hpp"
#include "../overlap/tma_map.hpp"

namespace braid::t3 {
namespace {

using memops::release_words;
using memops::start_barrier;
using memops::stream_wait;
using memops::stream_write;
using memops::wait_bounded;

// The driver entry points T3 cannot run without.
void* entry_point(const char* name) { return memops::required_entry_point(name, "T3"); }

// How a copy-engine stream signals a peer after its copy: cuStreamWriteValue32 on the peer's
// (IPC-mapped) counter (default), or, with BRAID_T3_SIGNAL=copy, a 4-byte cudaMemcpyAsync of the
// value from a device word (same stream, after the data copy) — the fallback if the driver refuses
// stream memory operations on peer memory.
bool signal_by_copy() {
  return env::choice("BRAID_T3_SIGNAL", {"memop", "copy"}).value_or("memop") == "copy";
}

// BRAID_T3_PERSIST_B=1 (experiment, default off): the ring stages (ring-cublas, ring-dma, ring) keep B
// (N x K, read by every stage's GEMM: ring-cublas W x regions times, braid's GEMM at least W times) in the L2 through a persisting access-policy window on the GEMM
// stream, so it is read from DRAM about once instead of once per region (issue 8's DRAM criterion). It
// sets this process's persisting-L2 carve-out (cudaLimitPersistingL2CacheSize, a per-context cache
// setting, not a device mode) to the device maximum and clears the window after enqueueing the stages
// (kernels launched later are not affected; lines already marked persisting age out normally —
// cudaCtxResetPersistingL2Cache is not stream-ordered, so it is not called under running GEMMs).
// Measured (2x H200, cb1ca49, `t3-w2x-swizzle8-persistB-*.jsonl`): it slows every op of the process,
// the sequential baseline included (the carve-out takes L2 from everything): t3-auto 1.27-1.49x instead of
// 1.6-1.9x on the large shapes. Kept as an opt-in experiment; not a default.
bool persist_b_requested() {
  static const bool on = env::flag("BRAID_T3_PERSIST_B").value_or(false);
  return on;
}

// BRAID_T3_POLL_NS=N: the epilogue's counter waits back off from a 64-ns sleep between polls, doubling, to N ns
// (1-100000); 0 = the old loop (a 128-ns sleep every 256 polls). Default 2000 (EpiParams::poll_ns). With the old loop
// a whole grid polling one counter slowed the copy engine's writes behind it: ring-dma at one region on a 32-MiB chunk
// took 4.5x the sequential time on 2x H200; a fixed sleep after every poll fixed it on 4096x8192x1024 (1.08-1.09x
// faster than sequential at 200-4000 ns), but 200 ns left 8192x8192x2048 at 0.85x where 1000 ns gave 1.06x, while on
// the small shapes the longer sleeps cost up to 5% (docs/t3.md, "Thirty-second session").
uint32_t poll_ns_requested() {
  static const uint32_t ns = [] {
    return uint32_t(env::integer("BRAID_T3_POLL_NS", 0, 100000).value_or(detail::kDefaultPollNs));
  }();
  return ns;
}

// Sets (bytes > 0) or clears (bytes == 0) the persisting window on `s`.
void persist_window(cudaStream_t s, const void* base, size_t bytes) {
  cudaStreamAttrValue v = {};
  if (bytes > 0) {
    // Once per process (one device per rank): the device's limits, and the carve-out set to its maximum.
    static const std::pair<int, int> lim = [] {
      int dev = 0, max_window = 0, max_persist = 0;
      BRAID_CUDA_CHECK(cudaGetDevice(&dev));
      BRAID_CUDA_CHECK(cudaDeviceGetAttribute(&max_window, cudaDevAttrMaxAccessPolicyWindowSize, dev));
      BRAID_CUDA_CHECK(cudaDeviceGetAttribute(&max_persist, cudaDevAttrMaxPersistingL2CacheSize, dev));
      if (max_window > 0 && max_persist > 0)
        BRAID_CUDA_CHECK(cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, size_t(max_persist)));
      return std::make_pair(max_window, max_persist);
    }();
    const int max_window = lim.first, max_persist = lim.second;
    if (max_window <= 0 || max_persist <= 0) return;  // no persisting L2 on this device: nothing to do
    const size_t window = std::min(bytes, size_t(max_window));
    v.accessPolicyWindow.base_ptr = const_cast<void*>(base);
    v.accessPolicyWindow.num_bytes = window;
    v.accessPolicyWindow.hitRatio = float(std::min(1.0, double(max_persist) / double(window)));
    v.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
    v.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
  }
  BRAID_CUDA_CHECK(cudaStreamSetAttribute(s, cudaStreamAttributeAccessPolicyWindow, &v));
}

void signal_peer(bool by_copy, void* write_value, const uint32_t* word, cudaStream_t s, uint32_t* peer_addr,
                 uint32_t value) {
  if (!by_copy) return stream_write(write_value, s, peer_addr, value);
  BRAID_CUDA_CHECK(cudaMemcpyAsync(peer_addr, word, 4, cudaMemcpyDefault, s));  // *word == value
}

// Destructor side of the no-hang contract: wait (bounded) for the end of the last run; if it has not
// come, release this rank's waits and wait again. Never throws.
template <class Release>
void drain_or_release(cudaEvent_t end, bool ran, double timeout_s, const char* what, int rank, Release release) {
  if (!ran) return;
  if (wait_bounded([&] { return cudaEventQuery(end); }, timeout_s)) return;
  std::fprintf(stderr, "braid: rank %d: %s did not finish within %.0f s; releasing its waits\n", rank, what,
               timeout_s);
  release();
  if (!wait_bounded([&] { return cudaEventQuery(end); }, timeout_s))
    std::fprintf(stderr, "braid: rank %d: %s still not finished after releasing its waits\n", rank, what);
}

int device_sms() {
  int dev = 0, sms = 0;
  BRAID_CUDA_CHECK(cudaGetDevice(&dev));
  BRAID_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  return sms;
}

// The cap of RsOptions::swizzle when the caller leaves it 0: BRAID_T3_SWIZZLE=1|2|4|8 if set, else 8 for
// the direct variant and 1 for the rings. Measured on 2x H200 (cb1ca49, the 25 within-2x shapes): with 8,
// direct moves 0.637x of sequential's DRAM bytes (geomean; 20/25 shapes >= 15% below) at unchanged time,
// while ring-dma slows down by up to 3.6x where a strip spans all regions of a chunk (the own-chunk tiles
// then wait for every landing region at once) — docs/t3.md.
int default_swizzle_cap(Variant variant) {
  const auto v = env::integer("BRAID_T3_SWIZZLE", 1, 8);
  if (!v) return is_direct(variant) ? 8 : 1;
  if (*v != 1 && *v != 2 && *v != 4 && *v != 8)
    throw UsageError("BRAID_T3_SWIZZLE: 1, 2, 4 or 8, got " + std::to_string(*v), __FILE__, __LINE__);
  return int(*v);
}

}  // namespace

// ============================================ GEMM + RS ============================================
GemmReduceScatter::GemmReduceScatter(Team& team, const RsOptions& opt) : team_(team), opt_(opt) {
  const int W = team.size();
  if (opt.variant == Variant::kAuto) {  // the candidates, built in the same order on every rank
    // direct-tma third: tune() keeps it where it is fastest (on the 2x H200 sweep the smallest shapes, M / world
    // = 512 rows, where both rings lost to sequential); run() before tune() uses one of the first two.
    for (Variant v : {Variant::kRingCublas, Variant::kRingDma, Variant::kDirectTma}) {
      RsOptions o = opt;
      o.variant = v;
      cand_.push_back(std::make_unique<GemmReduceScatter>(team, o));
    }
    active_ = cand_[opt.m / W >= 2048 ? 0 : 1].get();
    map_ = active_->map_;
    return;
  }
  if (opt.variant == Variant::kSequential) {  // cuBLAS, then NCCL reduce-scatter (no symmetric memory)
    BRAID_REQUIRE(opt.m > 0 && opt.n > 0 && opt.k > 0 && opt.m % W == 0, "T3 sequential: bad shape");
    cublas_ = std::make_unique<overlap::CublasGemm>();
    BRAID_CUDA_CHECK(cudaMalloc(&scratch_, size_t(opt.m) * opt.n * 2));
    map_.variant = opt.variant;
    map_.world = W, map_.rank = team.rank(), map_.m = opt.m, map_.n = opt.n, map_.regions = 1;
    map_.chunk_elems = opt.m / W * opt.n;
    return;
  }
  BRAID_REQUIRE(team.peer_ok(), "T3 needs peer access between all ranks: " + team.peer_status());
  BRAID_REQUIRE(W <= detail::kMaxRanks, "T3: at most 8 ranks");
  BRAID_REQUIRE(opt.m > 0 && opt.n > 0 && opt.k > 0 && opt.k % 64 == 0, "T3: bad shape (K % 64)");
  BRAID_REQUIRE(opt.m % (int64_t(W) * 2 * detail::kBM) == 0, "T3: M must be a multiple of world*256");
  const int regions = pick_regions(opt.variant, opt.m / W, opt.n, detail::kBM, opt.regions);
  // direct-tma's interleave segment: BRAID_T3_SEGMENT_ROWS (0: the whole chunk, own chunk first), else the default
  // (kDefaultSegmentMblocks: the whole chunk).
  const auto seg_rows = env::integer("BRAID_T3_SEGMENT_ROWS", 0, int64_t(1) << 30);
  // direct-tma's column order (stored[] per segment and tile column, every owner's segment in one swizzle strip):
  // BRAID_T3_COLUMN_ORDER=1.
  // Off by default (docs/t3.md, forty-sixth session, 2x H200): DRAM bytes 0.376x of sequential against the whole
  // chunk's 0.560x on the within-2x shapes, but 4.4% slower; t3-auto picks by time.
  const bool column_order = env::flag("BRAID_T3_COLUMN_ORDER").value_or(false);
  map_ = make_address_map(opt.variant, W, team.rank(), opt.m, opt.n, detail::kBM, detail::kBN, regions,
                          seg_rows ? int((*seg_rows + detail::kBM - 1) / detail::kBM) : -1, column_order);
  sm_count_ = opt.sm_count > 0 ? opt.sm_count : device_sms();
  swizzle_ = pick_swizzle(map_.strip_mblocks(), opt.swizzle > 0 ? opt.swizzle : default_swizzle_cap(opt.variant));
  (void)poll_ns_requested();  // a bad BRAID_T3_POLL_NS fails here, not in a run() under stream capture
  const size_t slots = is_ring(opt.variant) ? size_t(W) : 1;
  landing_ = std::make_unique<SymmetricBuffer>(team, slots * size_t(map_.chunk_elems) * 2);
  counters_ = std::make_unique<SymmetricBuffer>(team, (size_t(map_.num_counters) * 4 + 255) / 256 * 256);
  slot_ = team.reserve_slots(1);
  BRAID_CUDA_CHECK(cudaStreamCreateWithFlags(&ce_, cudaStreamNonBlocking));
  BRAID_CUDA_CHECK(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming));
  BRAID_CUDA_CHECK(cudaEventCreateWithFlags(&join_, cudaEventDisableTiming));
  BRAID_CUDA_CHECK(cudaEventCreateWithFlags(&end_, cudaEventDisableTiming));
  if (opt.variant != Variant::kRingCublas) detail::preload_t3_gemm();  // before any wait can be pending
  if (opt.variant == Variant::kRingCublas) {
    cublas_ = std::make_unique<overlap::CublasGemm>();
    region_done_.resize(size_t(W) * map_.regions);
    for (auto& e : region_done_) BRAID_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  }
  wait_value_ = entry_point("cuStreamWaitValue32");
  write_value_ = entry_point("cuStreamWriteValue32");
  wait_flags_ = memops::remote_wait_flags();
  by_copy_ = signal_by_copy();
  sigval_host_ = uint32_t(map_.region_mblocks) * uint32_t(map_.tiles_n);  // every DMA signals rt
  BRAID_CUDA_CHECK(cudaMalloc(&sigval_, 4));
  BRAID_CUDA_CHECK(cudaMemcpy(sigval_, &sigval_host_, 4, cudaMemcpyHostToDevice));
  BRAID_CUDA_CHECK(cudaHostAlloc(&err_host_, sizeof(detail::WaitError), cudaHostAllocMapped));
  std::memset(err_host_, 0, sizeof(detail::WaitError));
  // Its device address once here, not in run(): run() may be under stream capture (no API call it need not make).
  BRAID_CUDA_CHECK(cudaHostGetDevicePointer(&err_dev_, err_host_, 0));
  if (opt.variant == Variant::kDirectTma) {  // each rank's output as (Mc, N) bf16, boxes of one warpgroup's 64 rows
    tma_out_.resize(size_t(W) * sizeof(CUtensorMap));
    for (int i = 0; i < W; ++i) {
      CUtensorMap map;
      overlap::detail::encode_bf16_panel_map(&map, landing_->peer(i), uint64_t(opt.m / W), uint64_t(opt.n),
                                             uint64_t(opt.n), 64);
      std::memcpy(tma_out_.data() + size_t(i) * sizeof(map), &map, sizeof(map));
    }
  }
  BRAID_CUDA_CHECK(cudaMemset(counters_->local(), 0, counters_->bytes()));
  BRAID_CUDA_CHECK(cudaDeviceSynchronize());
  team.barrier();
}

GemmReduceScatter::~GemmReduceScatter() {
  drain_or_release(end_, result_ != nullptr && end_ != nullptr, team_.options().timeout_s, "T3 GEMM+RS", team_.rank(),
                   [this] { release_waits(); });
  if (ce_ && !wait_bounded([&] { return cudaStreamQuery(ce_); }, team_.options().timeout_s)) {
    release_waits();
    wait_bounded([&] { return cudaStreamQuery(ce_); }, team_.options().timeout_s);
  }
  if (end_) cudaEventDestroy(end_);
  cudaFree(scratch_);
  for (auto e : region_done_) cudaEventDestroy(e);
  if (err_host_) cudaFreeHost(err_host_);
  cudaFree(sigval_);
  if (fork_) cudaEventDestroy(fork_);
  if (join_) cudaEventDestroy(join_);
  if (ce_) cudaStreamDestroy(ce_);
}

const void* GemmReduceScatter::result() const { return active_ ? active_->result() : result_; }

const void* GemmReduceScatter::own_result() const {
  if (active_ || !landing_) return nullptr;
  if (is_direct(opt_.variant)) return landing_->local();  // run(): result_ = landing_->local()
  if (opt_.variant == Variant::kRingCublas)  // run_cublas(): the last stage's slot
    return landing_->local_as<uint16_t>() + int64_t(map_.world - 1) * map_.chunk_elems;
  return nullptr;
}

Variant GemmReduceScatter::tune(const void* a, const void* b, void* out, cudaStream_t stream, int reps) {
  if (!active_) return opt_.variant;
  BRAID_REQUIRE(reps >= 1, "T3 tune: reps >= 1");
  double best = 0;
  GemmReduceScatter* pick = nullptr;
  // The fallback, built only for the tuning: kept when it beats both overlapped variants.
  RsOptions so = opt_;
  so.variant = Variant::kSequential;
  auto seq = std::make_unique<GemmReduceScatter>(team_, so);
  std::vector<GemmReduceScatter*> all;
  for (auto& c : cand_)
    if (c->opt_.variant != Variant::kSequential) all.push_back(c.get());
  all.push_back(seq.get());
  std::vector<std::function<void()>> runs;
  for (GemmReduceScatter* c : all) runs.push_back([=] { c->run(a, b, out, stream); });
  const std::vector<double> med =
      bench::tune_medians(team_, stream, reps, kTuneBatch, runs, [&](size_t i) { all[i]->check_error(); });
  for (size_t i = 0; i < all.size(); ++i)
    if (!pick || med[i] < best) best = med[i], pick = all[i];
  if (pick == seq.get()) {
    cand_.push_back(std::move(seq));  // (a tuned op that fell back once keeps the fallback around)
  } else {
    team_.synchronize(stream, "t3 tune");  // nothing of the discarded fallback is still queued
  }
  active_ = pick;
  map_ = pick->map_;
  return pick->opt_.variant;
}

void GemmReduceScatter::release_waits() const {
  if (active_) {
    for (const auto& c : cand_) c->release_waits();
    return;
  }
  if (!counters_) return;  // kSequential: no counters
  release_words(write_value_, counters_->local_as<uint32_t>(), map_.num_counters, team_.options().timeout_s);
}

std::string GemmReduceScatter::counter_report() const {
  if (active_) return active_->counter_report();
  if (!counters_) return "rank " + std::to_string(team_.rank()) + ": no counters (" + variant_name(opt_.variant) + ")";
  std::vector<uint32_t> v(size_t(map_.num_counters));
  cudaStream_t s = nullptr;
  std::string r;
  if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess ||
      cudaMemcpyAsync(v.data(), counters_->local(), v.size() * 4, cudaMemcpyDeviceToHost, s) != cudaSuccess ||
      !wait_bounded([&] { return cudaStreamQuery(s); }, 5.0)) {
    cudaGetLastError();
    r = "(counters unreadable)";
  } else {
    for (size_t i = 0; i < v.size(); ++i)
      r += (i ? " " : "") + std::to_string(i) + ":" + std::to_string(v[i]) + "/" + std::to_string(map_.expected[i]);
  }
  if (s) cudaStreamDestroy(s);
  return "rank " + std::to_string(team_.rank()) + " counters (observed/expected) " + r;
}

void GemmReduceScatter::check_error() const {
  if (active_) {
    for (const auto& c : cand_) c->check_error();
    return;
  }
  if (!err_host_) return;  // kSequential: no in-kernel waits
  const auto* e = static_cast<const volatile detail::WaitError*>(err_host_);
  if (e->code != 0) release_waits();
  if (e->code != 0)
    throw TimeoutError("rank " + std::to_string(team_.rank()) + ": T3 " + variant_name(opt_.variant) +
                           " wait on counter " + std::to_string(e->counter) + " timed out (" +
                           std::to_string(e->observed) + " of " + std::to_string(e->expected) + ")",
                       __FILE__, __LINE__);
  team_.check_device_error("t3 start barrier");
}

void GemmReduceScatter::run(const void* a, const void* b, void* out, cudaStream_t stream) {
  if (active_) return active_->run(a, b, out, stream);
  if (opt_.variant == Variant::kSequential) {
    BRAID_REQUIRE(out != nullptr, "T3 sequential: needs an output buffer");
    cublas_->run(a, b, scratch_, opt_.m, opt_.n, opt_.k, stream);
    BRAID_NCCL_CHECK(ncclReduceScatter(scratch_, out, size_t(map_.chunk_elems), ncclBfloat16, ncclSum, team_.nccl(),
                                       stream));
    result_ = out;
    return;
  }
  const AddressMap& m = map_;
  const int W = m.world, r = m.rank;
  const bool ring = is_ring(m.variant);
  BRAID_REQUIRE(!ring || out != nullptr, "T3 ring: needs an output buffer");
  BRAID_REQUIRE(!ring || reinterpret_cast<uintptr_t>(out) % 4 == 0, "T3 ring: out must be 4-byte aligned");
  result_ = ring ? out : landing_->local();

  // (1) Reset what peers will write: counters, and (direct) the output the peers add into. Ordered
  // after the previous run's readers by stream order (the CE stream joined back into `stream`).
  BRAID_CUDA_CHECK(cudaMemsetAsync(counters_->local(), 0, size_t(m.num_counters) * 4, stream));
  // (direct-tma stores its own chunk before anyone adds onto it: nothing to zero)
  if (m.variant == Variant::kDirect)
    BRAID_CUDA_CHECK(cudaMemsetAsync(landing_->local(), 0, size_t(m.chunk_elems) * 2, stream));
  // (2) Nobody writes into a peer before that peer has reset (and finished reading the last run).
  start_barrier(team_, slot_, stream);

  auto* cnt = counters_->local_as<uint32_t>();
  if (m.variant == Variant::kRingCublas) return run_cublas(a, b, stream);
  // (3) remote_map: the GEMM, in the staggered order (1 or 2 launches). The CE stream forks here, before
  // the launches, so its copies run while the GEMM does.
  if (ring && !m.dma.empty()) BRAID_CUDA_CHECK(cudaEventRecord(fork_, stream));
  detail::EpiParams p;
  p.mode = m.variant == Variant::kDirectTma ? detail::kModeDirectTma
           : !ring                          ? detail::kModeDirect
           : m.variant == Variant::kRingDma ? detail::kModeRingDma
                                            : detail::kModeRing;
  p.rank = r;
  p.world = W;
  p.tiles_n = m.tiles_n;
  p.chunk_mblocks = m.chunk_mblocks;
  p.region_mblocks = m.region_mblocks;
  p.regions = m.regions;
  p.stored_by_column = m.stored_by_column ? 1 : 0;
  p.seg_mblocks = m.interleave.seg_mblocks;
  p.n = m.n;
  p.chunk_elems = m.chunk_elems;
  if (ring) {
    const int next = ring_next(W, r);
    p.landing = landing_->local();
    p.next_landing = landing_->peer(next);
    p.counters = cnt;
    p.next_counters = counters_->peer_as<uint32_t>(next);
    p.out = out;
  } else {
    p.counters = cnt;
    for (int i = 0; i < W; ++i) {
      p.dst_out[i] = landing_->peer(i);
      p.dst_counters[i] = counters_->peer_as<uint32_t>(i);
    }
    if (m.variant == Variant::kDirectTma) std::memcpy(p.tma_out, tma_out_.data(), tma_out_.size());
  }
  p.err = static_cast<detail::WaitError*>(err_dev_);
  p.timeout_ns = static_cast<uint64_t>(team_.options().timeout_s * 1e9);
  p.poll_ns = poll_ns_requested();
  const auto* A = static_cast<const uint16_t*>(a);
  const bool persist = persist_b_requested() && ring;  // ring stages read B once per stage
  if (persist) persist_window(stream, b, size_t(m.n) * opt_.k * 2);
  for (const Launch& l : m.launches) {
    p.mb_offset = int(l.row_begin / m.bm);
    detail::run_t3_gemm(A + l.row_begin * opt_.k, b, l.rows, m.n, opt_.k, p, sm_count_, swizzle_, stream, m.interleave);
  }
  if (persist) persist_window(stream, nullptr, 0);

  // (4) dma_map: the copy-engine stream forwards each finished ring region to the next hop. Enqueued
  // after the GEMM launches (host order only: the CE stream forked before them), so no front-end wait
  // is pending while a launch runs on the host (see Sm90PersistentGemm::preload).
  if (ring && !m.dma.empty()) {
    BRAID_CUDA_CHECK(cudaStreamWaitEvent(ce_, fork_, 0));
    auto* land = landing_->local_as<uint16_t>();
    for (const DmaTrigger& d : m.dma) {
      auto* dst = landing_->peer_as<uint16_t>(d.dst_rank);
      stream_wait(wait_value_, ce_, cnt + d.wait_counter, d.wait_value, wait_flags_);
      BRAID_CUDA_CHECK(cudaMemcpyAsync(dst + d.dst_slot * m.chunk_elems + d.offset,
                                       land + d.src_slot * m.chunk_elems + d.offset, size_t(d.elems) * 2,
                                       cudaMemcpyDefault, ce_));
      BRAID_REQUIRE(d.signal_value == sigval_host_, "T3: DMA signal values differ");
      signal_peer(by_copy_, write_value_, sigval_, ce_, counters_->peer_as<uint32_t>(d.dst_rank) + d.signal_counter,
                  d.signal_value);
    }
    BRAID_CUDA_CHECK(cudaEventRecord(join_, ce_));
  }

  // (5) Completion. Direct: this rank's rows are final once every rank's tiles of every region have
  // been added (the owner's counters, acquired by the stream wait). Ring: the last stage's tiles wrote
  // `out` inside this rank's own GEMM; join the CE stream so the next run's reset follows its copies.
  if (!ring)  // (the own tiles were added by this stream's GEMM, before the waits; one rank: nothing to wait for)
    for (int c : m.final_counters)
      if (m.expected[c] > 0) stream_wait(wait_value_, stream, cnt + c, m.expected[c], wait_flags_);
  if (ring && !m.dma.empty()) BRAID_CUDA_CHECK(cudaStreamWaitEvent(stream, join_, 0));
  BRAID_CUDA_CHECK(cudaEventRecord(end_, stream));
}

// kRingCublas, after the reset and the start handshake. Stage s computes chunk order[s] region by region
// with cuBLAS into landing slot s (stage 0: D = A·Bᵀ; later stages first wait, on the stream, for the
// region to have arrived from the previous hop, then D = A·Bᵀ + D: the reduction is the GEMM's own
// beta = 1 epilogue). A finished region (an event on `stream`) is forwarded to the next hop's slot s+1
// by the copy engine, which then writes the next hop's land counter (cuStreamWriteValue32, with its
// memory barrier after the copy). No SM moves or adds a byte outside the GEMMs. Result: slot W-1.
void GemmReduceScatter::run_cublas(const void* a, const void* b, cudaStream_t stream) {
  const AddressMap& m = map_;
  const int W = m.world;
  const int64_t K = opt_.k, N = m.n, Mc = m.m / W, rows = Mc / m.regions;
  const uint32_t rt = sigval_host_;
  auto* cnt = counters_->local_as<uint32_t>();
  auto* land = landing_->local_as<uint16_t>();
  const auto* A = static_cast<const uint16_t*>(a);
  BRAID_CUDA_CHECK(cudaEventRecord(fork_, stream));
  BRAID_CUDA_CHECK(cudaStreamWaitEvent(ce_, fork_, 0));
  const bool persist = persist_b_requested();
  if (persist) persist_window(stream, b, size_t(N) * K * 2);
  size_t di = 0;
  for (int s = 0; s < W; ++s) {
    const int c = m.order[s];
    for (int q = 0; q < m.regions; ++q) {
      if (s > 0) stream_wait(wait_value_, stream, cnt + m.land_counter(s, q), rt, wait_flags_);
      uint16_t* dst = land + int64_t(s) * m.chunk_elems + int64_t(q) * m.region_elems;  // (rows, N)
      cublas_->run(A + (int64_t(c) * Mc + int64_t(q) * rows) * K, b, dst, rows, N, K, stream, s > 0 ? 1.f : 0.f);
      if (s + 1 < W) {
        BRAID_REQUIRE(di < m.dma.size() && m.dma[di].stage == s && m.dma[di].region == q, "T3: DMA table order");
        const DmaTrigger& d = m.dma[di++];
        cudaEvent_t ev = region_done_[size_t(s) * m.regions + q];
        BRAID_CUDA_CHECK(cudaEventRecord(ev, stream));
        BRAID_CUDA_CHECK(cudaStreamWaitEvent(ce_, ev, 0));
        auto* peer = landing_->peer_as<uint16_t>(d.dst_rank);
        BRAID_CUDA_CHECK(cudaMemcpyAsync(peer + d.dst_slot * m.chunk_elems + d.offset,
                                         land + d.src_slot * m.chunk_elems + d.offset, size_t(d.elems) * 2,
                                         cudaMemcpyDefault, ce_));
        signal_peer(by_copy_, write_value_, sigval_, ce_, counters_->peer_as<uint32_t>(d.dst_rank) + d.signal_counter,
                    d.signal_value);
      }
    }
  }
  if (persist) persist_window(stream, nullptr, 0);
  BRAID_CUDA_CHECK(cudaEventRecord(join_, ce_));
  BRAID_CUDA_CHECK(cudaStreamWaitEvent(stream, join_, 0));
  BRAID_CUDA_CHECK(cudaEventRecord(end_, stream));
  result_ = land + int64_t(W - 1) * m.chunk_elems;
}

// ========================================== AG + GEMM ==========================================
AllGatherGemm::AllGatherGemm(Team& team, const AgOptions& opt) : team_(team), opt_(opt) {
  const int W = team.size();
  BRAID_REQUIRE(team.peer_ok(), "T3 AG+GEMM needs peer access between all ranks: " + team.peer_status());
  BRAID_REQUIRE(opt.m > 0 && opt.m % (int64_t(W) * 256) == 0, "T3 AG+GEMM: M must be a multiple of world*256");
  BRAID_REQUIRE(opt.k % 64 == 0 && opt.n % 128 == 0, "T3 AG+GEMM: K % 64 and N % 128 must be 0");
  const int sms = opt.sm_count > 0 ? opt.sm_count : device_sms();
  const auto cfg = overlap::choose_tile_config(opt.m / W, opt.n, opt.k, sms);
  // The consumer GEMMs wait per chunk on the stream (a chunk is whole once its copy has signalled), so
  // they need no signalling epilogue: cuBLAS by default (faster than braid's GEMM at large K).
  if (opt.cublas) cublas_ = std::make_unique<overlap::CublasGemm>();
  else gemm_ = std::make_unique<overlap::SignalGemm>(cfg, sms);
  gathered_ = std::make_unique<SymmetricBuffer>(team, size_t(opt.m) * opt.k * 2);
  arrival_ = std::make_unique<SymmetricBuffer>(team, 256);
  slot_ = team.reserve_slots(1);
  BRAID_CUDA_CHECK(cudaStreamCreateWithFlags(&ce_, cudaStreamNonBlocking));
  BRAID_CUDA_CHECK(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming));
  BRAID_CUDA_CHECK(cudaEventCreateWithFlags(&join_, cudaEventDisableTiming));
  BRAID_CUDA_CHECK(cudaEventCreateWithFlags(&end_, cudaEventDisableTiming));
  wait_value_ = entry_point("cuStreamWaitValue32");
  write_value_ = entry_point("cuStreamWriteValue32");
  wait_flags_ = memops::remote_wait_flags();
  by_copy_ = signal_by_copy();
  const uint32_t one = 1;
  BRAID_CUDA_CHECK(cudaMalloc(&sigval_, 4));
  BRAID_CUDA_CHECK(cudaMemcpy(sigval_, &one, 4, cudaMemcpyHostToDevice));
  BRAID_CUDA_CHECK(cudaMemset(arrival_->local(), 0, arrival_->bytes()));
  BRAID_CUDA_CHECK(cudaDeviceSynchronize());
  team.barrier();
}

void AllGatherGemm::release_waits() const {
  release_words(write_value_, arrival_->local_as<uint32_t>(), team_.size(), team_.options().timeout_s);
}

AllGatherGemm::~AllGatherGemm() {
  drain_or_release(end_, ran_, team_.options().timeout_s, "T3 AG+GEMM", team_.rank(), [this] { release_waits(); });
  if (ce_ && !wait_bounded([&] { return cudaStreamQuery(ce_); }, team_.options().timeout_s)) {
    release_waits();
    wait_bounded([&] { return cudaStreamQuery(ce_); }, team_.options().timeout_s);
  }
  if (end_) cudaEventDestroy(end_);
  cudaFree(sigval_);
  if (fork_) cudaEventDestroy(fork_);
  if (join_) cudaEventDestroy(join_);
  if (ce_) cudaStreamDestroy(ce_);
}

const void* AllGatherGemm::gathered() const { return gathered_->local(); }

std::vector<int> AllGatherGemm::chunk_order() const {
  std::vector<int> o;
  for (int i = 0; i < team_.size(); ++i) o.push_back((team_.rank() + i) % team_.size());
  return o;
}

void AllGatherGemm::run(const void* a_shard, const void* b, void* c, cudaStream_t stream) {
  const int W = team_.size(), r = team_.rank();
  const int64_t mc = opt_.m / W, n = opt_.n, k = opt_.k;
  auto* arr = arrival_->local_as<uint32_t>();
  // Reset, then the handshake: no peer pushes into our gathered buffer before we are done with it.
  BRAID_CUDA_CHECK(cudaMemsetAsync(arr, 0, size_t(W) * 4, stream));
  start_barrier(team_, slot_, stream);
  if (W > 1) {
    BRAID_CUDA_CHECK(cudaEventRecord(fork_, stream));
    BRAID_CUDA_CHECK(cudaStreamWaitEvent(ce_, fork_, 0));
    // Copy engines push our shard; peer r-1 needs it soonest (its second chunk), r+1 last.
    for (int i = 1; i < W; ++i) {
      const int j = (r - i + W) % W;
      auto* dst = gathered_->peer_as<uint16_t>(j) + int64_t(r) * mc * k;
      BRAID_CUDA_CHECK(cudaMemcpyAsync(dst, a_shard, size_t(mc * k) * 2, cudaMemcpyDefault, ce_));
      signal_peer(by_copy_, write_value_, sigval_, ce_, arrival_->peer_as<uint32_t>(j) + r, 1u);
    }
    BRAID_CUDA_CHECK(cudaEventRecord(join_, ce_));
  }
  auto* C = static_cast<uint16_t*>(c);
  const auto* G = gathered_->local_as<uint16_t>();
  overlap::EpilogueArgs e;
  e.parts = 1;
  for (int i = 0; i < W; ++i) {
    const int j = (r + i) % W;
    const void* a = a_shard;
    if (j != r) {
      stream_wait(wait_value_, stream, arr + j, 1u, wait_flags_);  // chunk j has arrived
      a = G + int64_t(j) * mc * k;
    }
    e.d = C + int64_t(j) * mc * n;
    e.ldd = n;
    if (cublas_) cublas_->run(a, b, C + int64_t(j) * mc * n, mc, n, k, stream);
    else gemm_->run(a, b, mc, n, k, e, stream);
  }
  if (W > 1) BRAID_CUDA_CHECK(cudaStreamWaitEvent(stream, join_, 0));
  BRAID_CUDA_CHECK(cudaEventRecord(end_, stream));
  ran_ = true;
}

}  // namespace braid::t3
