// braid/overlap.hpp — FlashOverlap on Hopper: a GEMM whose epilogue signals per wave group, NCCL on
// each finished group, and execution-order-aware reordering undone by the consumer (RMSNorm).
//
//   braid::overlap::GemmOverlap op(team, {Collective::kReduceScatter, M, N, K});   // plans, allocates
//   op.run(A, B, out, stream);        // GEMM on `stream`, NCCL per wave group on a comm stream, joined
//   op.rmsnorm(out, gamma, y, eps, stream);   // consumer: reads the reordered result, writes rows
//
// Layouts (all bf16, fp32 accumulation):
//   A  (M, K) row-major (K contiguous)           — activations
//   B  (N, K) row-major (K contiguous), "TN"     — a Linear layer's weight as stored by PyTorch; the
//                                                   GEMM computes D = A · Bᵀ, i.e. cuBLAS
//                                                   gemm(OP_T, OP_N, N, M, K, B, ldb=K, A, lda=K)
//   D  (M, N) row-major in normal mode; in overlap mode the *reordered* buffer described below.
//
// Reordered buffer ("column of tiles", slot-major): the GEMM's tiles (BM x BN) are numbered by slot,
// the order in which the persistent scheduler runs them (wave by wave); wave groups own consecutive
// slots [first[g], first[g+1]). Each tile is split into `parts` sub-tiles of BM/parts rows
// (parts = 1 for all-reduce, world size for reduce-scatter). Sub-tile p of the tile at slot s of group
// g (i = s - first[g], T = first[g+1] - first[g], sub = BM/parts) lands at rows
//     first[g]*BM + p*T*sub + i*sub + [0, sub)        (each row BN contiguous elements)
// so group g is one contiguous range of T*BM*BN elements, ordered [part][tile][row][col]: exactly the
// send buffer ncclReduceScatter needs (rank p gets sub-tile p of every tile: complete rows), and for
// all-reduce (parts = 1) the tiles of the group back to back.
//
// Reduce-scatter output on rank p (recv, M/world x N elements): sub-tile p of the tile at slot s is at
// recv[(s*sub + r) * BN + c]; the RMSNorm writes rank p's rows in the order
//     local row j = mb*sub + r  <->  original row mb*BM + p*sub + r
// (block-cyclic; an all-gather of y followed by un_permute_rows() restores the original order).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "braid/t3.hpp"  // AutoGemmComm's T3 candidates (GemmCommPick::Schedule::kT3)

namespace braid {
class Team;
class NcclWindow;
class SymmetricBuffer;
namespace bench {
struct Context;
}
}  // namespace braid

namespace braid::overlap {

enum class Collective { kAllReduce, kReduceScatter };
const char* collective_name(Collective c);
Collective parse_collective(const std::string& s);  // "allreduce" | "reducescatter"; UsageError otherwise

// ---- tile configurations of the sm_90a GEMM (few on purpose: each is a slow CUTLASS instantiation) ----
enum class TileConfig : int {
  k128x256 = 0,  // 128x256x64, cluster 2x1, cooperative (2 consumer warpgroups), persistent
  k128x128 = 1,  // 128x128x64, cluster 2x1, cooperative, persistent (smaller problems: more waves)
  kAuto = -1,
};
const char* tile_config_name(TileConfig c);

// What the persistent scheduler does for one problem: enough to predict which tile runs in which wave.
// Filled by SignalGemm::plan() from CUTLASS's own scheduler parameters.
struct TileGrid {
  int bm = 128, bn = 256;
  int tiles_m = 0, tiles_n = 0;
  int ctas = 0;          // persistent grid size = tiles per wave
  int cluster_m = 1, cluster_n = 1;
  bool raster_along_m = false;  // CUTLASS RasterOrder::AlongM (else AlongN)
  int log_swizzle = 0;
  int num_tiles() const { return tiles_m * tiles_n; }
  // Work items the scheduler walks: tiles padded to whole clusters (and swizzle groups) per dimension.
  int padded_tiles() const {
    const int sm = (1 << log_swizzle) * cluster_m, sn = (1 << log_swizzle) * cluster_n;
    return (tiles_m + sm - 1) / sm * sm * ((tiles_n + sn - 1) / sn * sn);
  }
  int num_waves() const { return ctas > 0 ? (padded_tiles() + ctas - 1) / ctas : 0; }
};

// Linear work index (execution order: work index w runs in wave w / ctas) -> tile id (mb * tiles_n + nb).
// Reproduces CUTLASS's static persistent scheduler (cutlass/gemm/kernel/sm90_tile_scheduler.hpp).
std::vector<int> execution_order(const TileGrid& g);

// The largest power of two s <= cap whose strips (s x cluster tiles per dimension) divide the tile grid,
// so that the scheduler walks no phantom work items at that swizzle or any smaller one (CUTLASS may lower
// the cap further). braid's signalling epilogue does not predicate phantom tiles: 9e2ead2 ran cap 8 on
// every shape and got wrong outputs, and one fault, at M <= 1024 (2x H200).
int swizzle_without_phantoms(int tiles_m, int tiles_n, int cluster_m, int cluster_n, int cap);

// Host mapping tables of one (problem, partition, parts).
struct Mapping {
  TileGrid grid;
  int parts = 1;                        // sub-tiles per tile (1: all-reduce; world: reduce-scatter)
  std::vector<int> group_waves;         // waves per group (sums to grid.num_waves())
  std::vector<int32_t> tile_slot;       // tile id -> slot
  std::vector<int32_t> tile_group;      // tile id -> group
  std::vector<int32_t> slot_tile;       // slot -> tile id (inverse of tile_slot)
  std::vector<int32_t> group_first;     // size groups+1: first slot of each group
  // The sequential fallback's layout (GemmOverlap::set_sequential): D row-major as cuBLAS writes it (M x N,
  // M = tiles_m * bm, N = tiles_n * bn), one group of every tile, the collective on all of it; part p of a
  // reduce-scatter owns rows [p M / parts, (p + 1) M / parts). The index functions below follow it; the
  // tables above (one group) are not used by it.
  bool normal = false;
  int groups() const { return static_cast<int>(group_waves.size()); }
  int64_t group_elems(int g) const;     // elements of group g in the reordered buffer
  int64_t group_offset(int g) const;    // first element of group g
  int32_t tiles_in_group(int g) const { return group_first[g + 1] - group_first[g]; }
};
// The partition used without measurements: a 1-wave head, groups of 2 waves, a last group of at most 4.
std::vector<int> default_group_waves(int waves);
// Reduce-scatter by stores (OverlapOptions::peer_stores): for group g and part q (map.parts == world), the element
// shift from d_ to rank q's receive buffer, (rank - q) * chunk(g): element off of part q lands at off + shift, i.e.
// at the group's offset + rank * chunk + (off - the part's first element), where the copy-engine push puts it.
// groups x world entries; 0 for q == rank (that part stays in d_).
std::vector<int64_t> part_store_shifts(const Mapping& map, int world, int rank);
// group_waves empty: one group per wave. Throws UsageError if the partition does not cover the waves or
// bm is not divisible by parts.
Mapping make_mapping(const TileGrid& grid, std::vector<int> group_waves, int parts);
// Where original element (row, col) of D goes in the reordered buffer (index), and which part (rank
// for reduce-scatter) owns it.
int64_t reordered_index(const Mapping& m, int64_t row, int64_t col, int* part = nullptr);
// Rank p's reduce-scatter output: index into recv of original element (row, col) owned by p.
int64_t scattered_index(const Mapping& m, int64_t row, int64_t col);
// Original row of rank p's local output row j (the block-cyclic order the RS RMSNorm writes; with
// Mapping::normal, rank p's contiguous block of rows).
int64_t rs_original_row(const Mapping& m, int part, int64_t j);

// ---- the GEMM (sm_90a, CUTLASS 3.x / CuTe: TMA loads, wgmma, warp-specialized, persistent) ----
// Epilogue hook: after a tile's stores, the consumer warpgroups meet at a named barrier and one
// thread does `red.release.gpu.global.add.u32 counters[group], 1`. See docs/flashoverlap.md.
struct EpilogueArgs {
  void* d = nullptr;                    // bf16 output (normal or reordered layout)
  int64_t ldd = 0;                      // normal mode leading dimension (elements, >= N, % 8 == 0); 0: N
  const int32_t* tile_slot = nullptr;   // device; null: normal layout (no reordering)
  const int32_t* tile_group = nullptr;  // device
  const int32_t* group_first = nullptr; // device
  uint32_t* counters = nullptr;         // device, one per group; null: no signalling
  int parts = 1;
  int32_t* wave_log = nullptr;          // device, debug: tile id -> the CTA-local iteration that ran it
  // All-to-all layout (GemmAllToAll; overrides parts): row r of the tile goes to
  //   a2a_tile_dest_base[tile * a2a_world + dest] + rank * BN + c,  code = a2a_row_code[mb * bm + r],
  //   dest = code & 15, rank = code >> 4 (see A2aPlan). tile_slot / tile_group still give the group.
  const int32_t* a2a_row_code = nullptr;       // device, M entries
  const int64_t* a2a_tile_dest_base = nullptr; // device, tiles * a2a_world entries
  int a2a_world = 0;
  // Rows stored straight into each destination's buffer (Transport::kPeerStores): row r of the tile goes to
  //   a2a_dest_ptrs[dest] + a2a_tile_dest_base[tile * a2a_world + dest] + rank * a2a_ld + c
  // (a2a_dest_ptrs: device array of a2a_world bf16 pointers, peers' through peer mappings; null: every row into
  // d with a2a_ld = BN as above). The counters are then released at system scope (red.release.sys), so a
  // thread on this GPU that acquires a counter value may hand the tiles' remote stores on to peers.
  void* const* a2a_dest_ptrs = nullptr;
  int64_t a2a_ld = 0;
  // Parts stored into their owners' memory (reduce-scatter by stores, OverlapOptions::peer_stores): element `off`
  // of the reordered layout in part p of group g goes to byte address part_dst[g * parts + p] + 2 * off (device
  // table; null: d + off), and after the tile's stores its part p != part_rank adds 1, with red.release.sys, to
  // part_flags[p][g * parts + part_rank] (device table of `parts` pointers, peers' through peer mappings).
  const uint64_t* part_dst = nullptr;
  uint32_t* const* part_flags = nullptr;
  int part_rank = 0;
  // The other ranks' parts leave by asynchronous bulk copies (cp.async.bulk from a shared-memory row stage,
  // left in flight while the next tile's main loop runs; the owners' flags raised when they complete) instead
  // of the consumer threads' stores. Taken only where a tile's remote rows fit the stage ((parts - 1) / parts
  // of the tile <= half: 2 ranks); every part_dst entry must then be 16-byte aligned.
  bool part_bulk = false;
};

class SignalGemm {
 public:
  // sm_count: SMs the persistent grid may use (0: all); fewer leaves SMs to NCCL's kernels.
  explicit SignalGemm(TileConfig cfg = TileConfig::k128x256, int sm_count = 0);
  ~SignalGemm();
  SignalGemm(const SignalGemm&) = delete;
  SignalGemm& operator=(const SignalGemm&) = delete;

  TileConfig config() const { return cfg_; }
  int sm_count() const { return sm_count_; }
  // Requirements: M % bm == 0, N % bn == 0, K % 64 == 0 (throws UsageError otherwise).
  TileGrid plan(int64_t m, int64_t n, int64_t k) const;
  // The grid a SignalGemm(cfg, sm_count) would plan (host only, no kernel load).
  static TileGrid plan_for(TileConfig cfg, int sm_count, int64_t m, int64_t n, int64_t k);
  // D = A · Bᵀ (layouts at the top of this file). Capturable in CUDA graphs.
  void run(const void* a, const void* b, int64_t m, int64_t n, int64_t k, const EpilogueArgs& epi,
           cudaStream_t stream);

 private:
  TileConfig cfg_;
  int sm_count_;
};

// The persistent scheduler's swizzle cap for braid's GEMMs (BRAID_GEMM_SWIZZLE, default 8).
int gemm_swizzle();

// Picks a tile configuration for a shape (larger tiles unless that leaves under ~2 waves).
TileConfig choose_tile_config(int64_t m, int64_t n, int64_t k, int sm_count);

// The largest reserve r in [floor, cap] (SMs left out of the GEMM's persistent grid) with waves_at(sms - r) ==
// waves_at(sms), i.e. one that costs the GEMM no extra wave; cap when none does (or floor > cap). waves_at(s):
// the waves of the grid planned on s SMs.
int wave_fit_reserve(int sms, int cap, int floor, const std::function<int(int)>& waves_at);

// ---- wave grouping: the predictive search (FlashOverlap Algorithm 1) ----
// Measured inputs: the collective's latency as a function of bytes, and the GEMM's time per wave.
struct BandwidthCurve {
  std::vector<double> bytes;  // ascending
  std::vector<double> us;     // latency of one call of `bytes`
  double latency_us(double b) const;  // piecewise-linear interpolation; linear extrapolation past the ends
};
struct SearchInputs {
  BandwidthCurve comm;        // of the collective in use (all-reduce or reduce-scatter), this world
  // Per-group work that trails a group's collective off the communication chain (the copy-engine
  // reduce-scatter's sums, on their own stream: group g's sum starts after its transfer and the previous
  // sum; the next transfer does not wait for it). Empty: none (comm is the whole per-group time).
  BandwidthCurve tail;
  double wave_us = 0;         // GEMM time per wave (total GEMM time / waves), with the SMs left to NCCL
  double first_wave_extra_us = 0;  // ramp-up of the first wave (prologue), added to wave 0
  int waves = 0;
  double bytes_per_wave = 0;  // output bytes of one full wave (ctas * bm * bn * 2)
  double last_wave_fraction = 1;   // tiles in the last wave / ctas
  double signal_overhead_us = 2;   // per-group cost: stream wait + NCCL launch gap
  // Earliest start of the communication chain (0: the first group's end). The peer copy-engine
  // transport's start barrier, where it runs on the comm stream beside the GEMM's first waves.
  double comm_start_us = 0;
  // The tail chain cannot start before the GEMM's end: the peer copy-engine transport with its GEMM on
  // every SM (reserve_sms 0), whose per-group sums find no free SM until the persistent GEMM exits.
  bool tail_after_gemm = false;
  // Contention (measured by `--measure`): rho = (t_together - max(t_gemm, t_coll)) / min(t_gemm, t_coll)
  // for the GEMM and the whole collective started at once with no dependency. 0: they overlap
  // perfectly; 1: no better than in sequence; > 1: worse (seen on 2x H200, docs/flashoverlap.md).
  double interference = 0;
  double sequential_us = 0;        // cuBLAS + the collective in sequence (0: unknown, never fall back)
  // Overlap is kept only when predicted <= max_ratio x sequential_us, i.e. a predicted gain of at least
  // 1/max_ratio - 1 (3.1% at 0.97). Before the calibration below, 0.95 covered the model's optimism
  // (on 2x H100, 378ca05, the 8 shapes chosen with a predicted gain under 5% ran 0.92-1.05x, 5 of them
  // below 0.97x); with it, 0.97 keeps the real gains (docs/flashoverlap.md). BRAID_OVERLAP_MAX_RATIO
  // overrides the default. GemmOverlap::tune() then checks a kept overlap by timing it.
  double max_ratio = default_max_ratio();
  static double default_max_ratio();
  // Calibration: predict_contended_us adds comm_stretch x the whole collective's solo time (the
  // collective cut into groups beside the GEMM runs slower than its latency curve and the contention
  // term say). The same for every partition of a shape, so it moves the prediction and the fallback
  // decision, not the partition. Per transport from tuning/overlap.tsv (default_comm_stretch).
  double comm_stretch = 0;
};
struct SearchResult {
  std::vector<int> group_waves;
  double predicted_us = 0;    // of the chosen partition, contention included
  int candidates = 0;         // partitions evaluated after pruning
  bool sequential = false;    // fall back: predicted overlap > max_ratio x sequential_us
};
// Predicted end-to-end time of one partition (the paper's recurrence; no contention), with the tail
// chain where SearchInputs::tail is given: end = the last group's tail.
double predict_us(const SearchInputs& in, const std::vector<int>& group_waves);
// The same with contention: P0 + interference * (S - P0), where P0 = predict_us and S is the time of
// the same partition run in sequence (GEMM, then every group's collective and overhead). Equals P0 at
// interference 0 and S at 1; for one group started with no dependency it is the measured rho's model.
double predict_contended_us(const SearchInputs& in, const std::vector<int>& group_waves);
// Exhaustive over compositions of `waves` with pruning: the first group is at most max_first waves,
// groups never shrink by more than the pruning rule allows (see docs). The dynamic programme minimises the
// uncontended recurrence for each group count; the contended prediction then picks among those bests
// and one group (under contention fewer, larger groups can win), then against the fallback.
SearchResult search_partition(const SearchInputs& in, int max_groups = 8);
// Up to k partitions of several groups for a timed choice (GemmOverlap::tune_partitions): each group count's
// best, and, where the inputs have a tail, each group count's best with the tail in line (the model without
// it, from the same measurements); distinct, ordered by the contended prediction.
std::vector<std::vector<int>> candidate_partitions(const SearchInputs& in, int max_groups, int k);

// Decisions cached per shape (N, K, collective, world, tile config): nearest M wins for unseen M.
struct CachedDecision {
  Collective coll = Collective::kReduceScatter;
  int world = 2;
  int64_t m = 0, n = 0, k = 0;
  int tile_config = 0;
  int sm_count = 0;
  std::vector<int> group_waves;
  double predicted_us = 0;
  bool sequential = false;  // the search chose the fallback (one group after the whole GEMM)
};
class DecisionCache {
 public:
  void put(const CachedDecision& d);
  // Same (coll, world, n, k); nearest m (ties: the larger). Null if nothing matches.
  const CachedDecision* lookup(Collective coll, int world, int64_t m, int64_t n, int64_t k) const;
  // Text format, one decision per line: coll world m n k cfg sms pred_us w0,w1,... [sequential]
  void load(const std::string& path);  // missing file: empty cache
  void save(const std::string& path) const;
  const std::vector<CachedDecision>& entries() const { return v_; }

 private:
  std::vector<CachedDecision> v_;
};

// Measured search inputs, stored per shape (written by `braid bench gemm-rs|gemm-ar --measure FILE`).
struct MeasuredInputs {
  Collective coll = Collective::kReduceScatter;
  int world = 2;
  int64_t m = 0, n = 0, k = 0;
  int tile_config = 0;
  int sm_count = 0;
  SearchInputs in;
};
void save_inputs(const std::string& path, const std::vector<MeasuredInputs>& v);  // appends
std::vector<MeasuredInputs> load_inputs(const std::string& path);
// `braid plan-overlap --inputs FILE [--transport kernels|symmetric|copy-engine] [--max-groups G] [--candidates K]`:
// the search replayed on measured inputs (a `bench gemm-rs --measure` file), no GPU: per shape the chosen
// partition and prediction, the uncontended optimum's contended prediction, the sequential time and the
// decision; with --candidates, the partitions `bench gemm-rs --tune-candidates K` would time.
int plan_overlap_main(int argc, char** argv, std::ostream& os);

// ---- the overlapped operation ----
// How a finished group's bytes travel. The first three are NCCL calls on the group's contiguous slice:
//   kNcclKernels     ncclReduceScatter / ncclAllReduce on the team's communicator (NCCL's kernels: SMs
//                    that poll and copy beside the GEMM);
//   kNcclCopyEngine  ncclAlltoAll (and, for all-reduce, ncclAllGather) on the team's zero-CTA
//                    communicator between symmetric windows: NCCL moves the bytes with the copy engines
//                    (NCCL >= 2.28, one node); the reduction of the W received slices is a small kernel on
//                    the comm stream (fp32, rank order). All-reduce = all-to-all, reduce, all-gather.
//   kNcclSymmetric   ncclReduceScatter / ncclAllReduce on the team's communicator between symmetric windows
//                    (NCCL >= 2.28, one node): NCCL's symmetric-memory kernels, which load the peers'
//                    slices over NVLink with few CTAs instead of its ring's FIFO copies. Reduce-scatter
//                    writes into the op's own window, output(): pass it as run()'s `out`.
//   kPeerCopyEngine  no NCCL: braid's own copy-engine pushes over symmetric peer memory (needs
//                    Team::peer_ok() and the stream memory operations). Per group, the comm
//                    stream waits for the group's counter, then cudaMemcpyAsync copies chunk q of the
//                    group into rank q's receive buffer (a copy engine over NVLink; no SM, no NCCL kernel)
//                    and cuStreamWriteValue32 raises rank q's flag for (group, this rank); a sum stream
//                    waits for the group's counter and every peer's flag, then sums the W chunks (own
//                    chunk read in place) in rank order, fp32, into `out`. All-reduce: the sum goes in
//                    place into our chunk of d_ (symmetric memory then), is pushed from the sum stream
//                    into every peer's d_ with a second flag, and run() ends when every peer's reduced
//                    chunks have landed. Each run starts with a reset of the flags and a 32-thread
//                    cross-rank barrier (as T3's), so it is capturable.
//   kPeerStores      (GemmAllToAll only) no NCCL, no copy: the GEMM's epilogue stores each row straight into its
//                    destination rank's output over NVLink (symmetric memory; the final layout, so no gather),
//                    and a 32-thread cross-rank barrier after the GEMM hands the rows over.
enum class Transport { kNcclKernels, kNcclCopyEngine, kNcclSymmetric, kPeerCopyEngine, kPeerStores };
const char* transport_name(Transport t);
// The predictor's calibration of a transport (SearchInputs::comm_stretch): tuning/overlap.tsv, embedded
// at build time; BRAID_OVERLAP_COMM_STRETCH (a number >= 0) overrides it for every transport. 0 where
// the table has no row.
double default_comm_stretch(Transport t);
// Parses the table's text ("transport value" lines, '#' comments); throws UsageError on a bad line.
std::vector<std::pair<std::string, double>> parse_overlap_table(const std::string& text);

struct OverlapOptions {
  Collective coll = Collective::kReduceScatter;
  int64_t m = 0, n = 0, k = 0;
  TileConfig tile = TileConfig::kAuto;
  int reserve_sms = 16;          // SMs left free for NCCL kernels during the GEMM
  // Lower reserve_sms (> 0) to the largest value >= 2 whose persistent grid needs no more waves than the grid on
  // every SM (wave_fit_reserve); where every value from 2 up adds a wave, reserve_sms stays. options() then
  // reports the reserve used. On one H200 (3f97b3b, 4096x4096x1024, 128x256: 512 tiles) the op's GEMM took
  // 50.5-51.0 us at reserve 4 (128 CTAs, 4 waves) and 60.5-60.7 at 16 (116 CTAs, 5 waves): the reserve's wave, not
  // the signalling (132 CTAs: 50.6-50.8). What the fewer free SMs cost the collective is measured at two ranks.
  bool reserve_fit = false;
  std::vector<int> group_waves;  // empty: from `cache`, else from the search's defaults (see plan)
  const DecisionCache* cache = nullptr;
  bool use_stream_wait_value = true;  // cuStreamWaitValue32 (driver entry point) if available, else
                                      // a bounded spin kernel
  // Fallback (also taken from a cached decision): cuBLAS + NCCL in sequence on the same stream, exactly
  // the baseline: D row-major (mapping().normal; the consumers below follow the mapping), the collective on
  // plain memory (NCCL's ring kernels) whatever the transport.
  bool sequential = false;
  Transport transport = Transport::kNcclKernels;
  // Transport::kPeerCopyEngine, reduce-scatter: the last group is not pushed by the copy engines; each peer
  // raises its flag once the group's tiles are done, and the last sum (after the GEMM, on every SM) reads the
  // peers' chunks straight from their d_ over NVLink — one kernel instead of a copy-engine copy (its ~20 us
  // floor per call) then a sum. d_ is symmetric memory then, and the start barrier runs before the GEMM (a
  // peer reads our d_ until its last sum ends, so our next GEMM must not start before every peer's).
  bool peer_pull_last = false;
  // Transport::kPeerCopyEngine, reduce-scatter: no copy engine at all — the GEMM's epilogue stores each tile's
  // part q straight into rank q's receive buffer over NVLink (where the copy would have put it) and adds 1 to
  // rank q's flag for (group, this rank) with red.release.sys after the tile's stores; each rank's sum for group g
  // waits until every peer's flag reached the group's tile count (and its own counter), then reads the receive
  // buffer as before. The start barrier runs before the GEMM (peers store into our receive buffer from their
  // GEMM's first tile on). Excludes peer_pull_last.
  bool peer_stores = false;
  // With peer_stores: the remote parts leave by asynchronous bulk copies from shared memory (EpilogueArgs::
  // part_bulk; 2 ranks) instead of the consumer threads' stores. Off by default: measured slower (2x H200,
  // docs/flashoverlap.md "Bulk copies"): the owners' flags wait for the copies' completion, which only the
  // next tile's epilogue can observe, and the copies still drain at NVLink's pace (`bench gemm-rs --pce-bulk`).
  bool peer_stores_bulk = false;
};

class CublasGemm;

class GemmOverlap {
 public:
  // OverlapOptions::peer_stores_bulk in effect (after the environment and the alignment check).
  bool stores_bulk() const { return part_bulk_; }
  GemmOverlap(Team& team, const OverlapOptions& opt);
  ~GemmOverlap();
  GemmOverlap(const GemmOverlap&) = delete;
  GemmOverlap& operator=(const GemmOverlap&) = delete;

  const Mapping& mapping() const { return map_; }
  const OverlapOptions& options() const { return opt_; }
  bool uses_stream_wait_value() const { return wait_value_ != nullptr; }
  // Bytes of the reordered GEMM output (M*N bf16) and of `out` of run(): M*N (all-reduce, in place on
  // the reordered buffer) or M*N/world (reduce-scatter).
  size_t out_elems() const;
  void* reordered() const { return sequential_ && fb_ ? fb_ : d_; }
  // Reduce-scatter over Transport::kNcclSymmetric: the window run() must write into (out_elems() elements);
  // null for the other transports, which write any `out`.
  void* output() const { return sym_out_; }
  // Transport::kPeerCopyEngine: whether run()'s flag reset and start barrier run on the comm stream beside
  // the GEMM (true when the GEMM leaves SMs free, so the barrier's block finds one) rather than before it.
  bool peer_barrier_beside_gemm() const { return peer_barrier_on_comm_; }

  // GEMM + signalled collective. All-reduce: the reduced result stays in reordered() (in place), `out`
  // is ignored (may be null). Reduce-scatter: `out` receives out_elems() elements.
  // Enqueued on `stream` (fork to the comm stream and join back); capturable in a CUDA graph.
  void run(const void* a, const void* b, void* out, cudaStream_t stream);
  // Consumer with the inverse reordering fused: y = x / rms(x) * gamma per row, normal layout.
  // All-reduce: x = reordered(), y is M x N. Reduce-scatter: x = run()'s out, y is (M/world) x N in
  // block-cyclic row order (rs_original_row).
  void rmsnorm(const void* x, const void* gamma, void* y, float eps, cudaStream_t stream) const;
  // Reduce-scatter: run()'s `out` x (tile-scattered, scattered_index) copied into y as (M/world, N) row-major bf16,
  // row j = original row rs_original_row(mapping(), rank, j) (with Mapping::normal a plain copy). x and y must not
  // overlap. For consumers that want rows rather than the fused rmsnorm(); costs one read and write of the part.
  void gather_rows(const void* x, void* y, cudaStream_t stream) const;

  // Re-plan with another partition (same shape); device tables are rewritten. Leaves the fallback.
  void set_partition(const std::vector<int>& group_waves);
  // Switch to (or leave) the sequential fallback (one group; see OverlapOptions::sequential).
  void set_sequential(bool on);
  bool sequential() const { return sequential_; }
  // Checks the search's choice by timing it: the op as planned (overlapped, its partition) against the
  // fallback's exact work (cuBLAS + NCCL on plain memory) on the caller's inputs, `reps` interleaved
  // rounds of kTuneBatch back-to-back runs each, the slowest rank's median per candidate (the same
  // numbers on every rank, so every rank decides alike). Keeps the overlap only when it measured at most
  // max_ratio x the fallback; otherwise switches to the fallback. Returns sequential(). No-op on an op
  // already in the fallback, or whose shape the fallback's row-major layout cannot take (M, N not
  // multiples of the tile). Collective: every rank calls it with the same arguments. Not capturable.
  static constexpr int kTuneBatch = 4;
  bool tune(const void* a, const void* b, void* out, cudaStream_t stream, int reps = 5, double max_ratio = 0.99);
  // The medians the last tune() measured (µs; 0 before any): the overlapped op and the fallback's work.
  double tuned_overlap_us() const { return tuned_overlap_us_; }
  double tuned_sequential_us() const { return tuned_sequential_us_; }
  // This transport's collective alone, as run() issues it for one wave group of `count` elements (a
  // multiple of 8 x world) at the start of the reordered buffer, with no GEMM and no wait: NCCL's
  // reduce-scatter / all-reduce over the op's buffer, or over the copy engines the all-to-all, the
  // reduction on the SMs the GEMM leaves free (a group beside the GEMM) and, for all-reduce, the
  // all-gather. Reduce-scatter writes count / world elements into `out` (output() over symmetric windows);
  // all-reduce works in place. The search's latency curve and contention for the copy-engine transport
  // (`bench gemm-rs --measure`). Overwrites the op's buffers; collective: every rank calls it alike.
  // `part`: kTransfer / kTail time the two halves of a transport that splits (has_tail(): the copy-engine
  // reduce-scatter's all-to-all, or the peer copy-engine pushes, then the sum alone on the data in place);
  // elsewhere kTransfer is the whole and kTail does nothing. The peer copy-engine transport's call starts
  // with its start barrier (kWhole, kTransfer), as each run() does.
  // kSetup: the per-call setup alone where a transport has one (the peer copy-engine transport's flag reset
  // and start barrier, which run() pays once per run and each standalone call pays again); elsewhere nothing.
  // kCopies: the peer copy-engine transport's setup and its copies alone (no flag raised, no wait for the
  // peers: the copy engines' own time, which kTransfer less kCopies leaves to the flags; `bench gemm-rs
  // --probe-pce`); elsewhere nothing.
  // kAfterSetup: everything after the setup (the peer copy-engine transport's pushes, flags, waits, sum and
  // all-reduce's second phase), issued after a kSetup call of the same count on this or an earlier-ordered
  // stream — the split run() makes where the GEMM leaves no SM free (the flag reset's memset and the start
  // barrier before the GEMM, the transfers beside it); elsewhere the same as kWhole.
  enum class Part { kWhole, kTransfer, kTail, kSetup, kCopies, kAfterSetup };
  void transport_collective(size_t count, void* out, cudaStream_t stream, Part part = Part::kWhole);
  // run() issues part of each group's collective off the communication chain (SearchInputs::tail).
  bool has_tail() const { return sum_ != nullptr && opt_.coll == Collective::kReduceScatter; }
  // Throws TimeoutError if a spin wait of this op timed out (call after synchronizing the stream).
  void check_error() const;
  const SignalGemm& gemm() const { return *gemm_; }

 private:
  void upload();
  void make_fallback_resources();  // cuBLAS handle, and fb_ for the window transports
  void enter_fallback();           // checks the shape, then make_fallback_resources()
  // Group g's collective on [off, off + count) of d_ (g < 0: a standalone call, everything on s).
  void run_group_collective(size_t off, size_t count, void* out, int g, bool last, cudaStream_t s);
  void run_copy_engine_group(size_t off, size_t count, void* out, int g, bool last, cudaStream_t s,
                             Part part = Part::kWhole);
  // Transport::kPeerCopyEngine: group g's pushes on s (after its counter wait), its sum on sum_.
  void run_peer_copy_group(size_t off, size_t count, void* out, int g, bool last, cudaStream_t s);
  void run_peer_standalone(size_t count, void* out, cudaStream_t s, Part part);  // transport_collective's
  // flags = false: the copies alone (Part::kCopies).
  void push_chunks(const SymmetricBuffer& dst, size_t off, size_t chunk, bool reduced, size_t flag, cudaStream_t s,
                   bool flags = true);
  void wait_peer_flags(size_t flag, cudaStream_t s);
  // OverlapOptions::peer_stores: on s, every peer's flag for group g at the group's tile count (GEQ, flush).
  void wait_peer_stores(int g, cudaStream_t s);
  // pull: the peers' chunks read from their d_ (OverlapOptions::peer_pull_last), not from the receive buffer.
  void peer_sum(size_t off, size_t chunk, void* out, int ctas, cudaStream_t s, bool pull = false);
  // Index of the second half of the flags (the all-reduce's reduced chunks): waves x world.
  size_t peer_second_flags() const;
  // Writes 0xffffffff into this rank's peer flags (private stream): every wait on them is satisfied, so
  // a run whose peer failed cannot leave sum_ blocked. The output of such a run is garbage.
  void release_peer_flags() const;
  Team& team_;
  OverlapOptions opt_;
  std::unique_ptr<SignalGemm> gemm_;
  std::unique_ptr<CublasGemm> cublas_;   // the fallback's GEMM (cuBLAS, every SM, row-major D)
  void* fb_ = nullptr;                    // the fallback's D where d_ is a symmetric window (plain memory, so
                                          // NCCL runs the same ring kernels as cuBLAS + NCCL in sequence)
  bool sequential_ = false;
  double tuned_overlap_us_ = 0, tuned_sequential_us_ = 0;
  Mapping map_;
  void* d_ = nullptr;                 // reordered GEMM output (a symmetric window for the window transports)
  void* recv_ = nullptr;              // copy-engine transport: the all-to-all's receive buffer (M*N bf16)
  void* sym_out_ = nullptr;           // symmetric transport, reduce-scatter: the output window
  // Symmetric windows behind d_, recv_, sym_out_ (transports other than kNcclKernels); released out, recv,
  // d on every rank.
  std::unique_ptr<NcclWindow> win_d_, win_recv_, win_out_;
  void* ce_comm_ = nullptr;           // ncclComm_t: team.nccl_zero_cta() (copy-engine transport)
  int reduce_ctas_ = 16;              // CTAs of the per-group reduction (copy-engine transport)
  int reduce_ctas_last_ = 16;         // the same for the last group (after the GEMM: every SM)
  int32_t* tables_ = nullptr;         // tile_slot | tile_group | group_first | slot_tile
  uint32_t* counters_ = nullptr;
  cudaStream_t comm_ = nullptr;
  cudaEvent_t fork_ = nullptr, join_ = nullptr;
  // Copy-engine reduce-scatter: the per-group sums run on sum_ after group g's all-to-all (event
  // a2a_done_[g]), so a group's all-to-all never waits for the previous group's sum, which needs SMs the
  // GEMM may hold (all of them at reserve_sms 0). join_sum_ joins sum_ back into the caller's stream.
  cudaStream_t sum_ = nullptr;
  std::vector<cudaEvent_t> a2a_done_;  // one per wave (the most groups a partition has)
  cudaEvent_t join_sum_ = nullptr;
  void* wait_value_ = nullptr;        // PFN of cuStreamWaitValue32 (null: spin kernel)
  // Transport::kPeerCopyEngine: receive buffer (chunk `rank` of every peer's group at the all-to-all's
  // offsets: recv[off + q * chunk] from rank q), flags[g * world + q] raised by rank q when its chunk of
  // group g has landed here, the start barrier's signal slot, cuStreamWriteValue32, the waits' flags.
  // flags: [2][waves][world]: the pushes of the chunks (first half) and, all-reduce, of the reduced chunks
  // (second half); peer_d_: d_ in symmetric memory (all-reduce only).
  std::unique_ptr<SymmetricBuffer> peer_recv_, peer_flags_, peer_d_;
  int peer_slot_ = -1;
  bool peer_barrier_on_comm_ = false;
  cudaEvent_t peer_ready_ = nullptr;  // on comm_ after the flag reset and the barrier: the sums wait for it
  void* write_value_ = nullptr;
  unsigned peer_wait_flags_ = 0;
  // OverlapOptions::peer_stores: the epilogue's destinations per (group, part) (byte addresses: d_ for our own
  // part, rank q's receive buffer shifted so that the part lands at off + me * chunk) and every rank's flags.
  uint64_t* part_dst_ = nullptr;      // waves x world (the most groups a partition has)
  uint32_t** part_flags_ = nullptr;   // world
  bool part_bulk_ = false;            // peer_stores_bulk, and every part_dst_ entry 16-byte aligned
  void* err_host_ = nullptr;          // pinned, mapped: the spin kernel's timeout record
};

// ---- GEMM + all-to-all (FlashOverlap's third collective; MoE token routing) ----
// Row i of D = A·Bᵀ (M, N) is sent to rank dest[i] (one destination per row: e.g. an expert's output
// going back to the token's rank). The reordering puts, inside each wave group, the rows of the group's
// tiles by destination: group g = [dest p][tile of g in slot order][rows of that tile's m-block with
// dest p, increasing][BN columns]. Segment (g, p) is contiguous, so one ncclSend per (group, peer) inside
// an NCCL group; the receiver gets [g][source q][pieces], a piece being BN contiguous elements of one
// row, and the consumer (a gather) writes the normal layout: out row = rows of source 0 in its row
// order, then source 1, ... — what a packed all-to-all-v (ncclSend/ncclRecv per peer) delivers.
// Counts are data-dependent: the host plans them (as every NCCL all-to-all-v must) from all ranks'
// routing, exchanged once per routing with MPI.
struct A2aPlan {
  int world = 1, rank = 0;
  int64_t m = 0, n = 0;
  // sender side
  std::vector<int32_t> row_code;          // M: (rank of the row among its m-block's rows to dest) << 4 | dest
  std::vector<int64_t> tile_dest_base;    // tiles * world: element offset of (tile, dest)'s first row
  std::vector<int64_t> send_off, send_cnt;  // groups * world (elements), into the reordered buffer
  // receiver side
  std::vector<int64_t> recv_off, recv_cnt;  // groups * world (source), into the receive buffer
  std::vector<int32_t> piece_dst;         // per received piece (receive order): out_row * tiles_n + nb
  int64_t recv_rows = 0;                  // rows of `out` (sum over sources)
  // the baseline's packed all-to-all-v
  // Transport::kPeerStores: element offset in dest's output (final layout, row stride N) of (tile, dest)'s first
  // row: rows of earlier sources to dest, then this rank's rows to dest in earlier m-blocks; + nb * BN.
  std::vector<int64_t> direct_base;       // tiles * world
  std::vector<int32_t> pack_rows;         // M: packed row j <- D row pack_rows[j] (stable by dest)
  std::vector<int64_t> send_rows, recv_rows_from;  // world each
};
// dest_all[q] = rank q's routing (M entries in [0, world)); every rank has the same M and grid.
A2aPlan make_a2a_plan(const Mapping& m, int world, int rank, const std::vector<std::vector<int32_t>>& dest_all);
// (source rank, source row) of every output row of `rank`, in output order (by source, then row).
std::vector<std::pair<int, int64_t>> a2a_sources(const std::vector<std::vector<int32_t>>& dest_all, int rank);

struct A2aOptions {
  int64_t m = 0, n = 0, k = 0;
  TileConfig tile = TileConfig::kAuto;
  // SMs the GEMM leaves free; < 0 (default): 16 for kNcclKernels (NCCL's kernels run beside the GEMM), 0 for
  // the others (copy engines and stores need no SM; the gather runs after the GEMM).
  int reserve_sms = -1;
  std::vector<int> group_waves;  // empty: the GemmOverlap default (1-wave head, 2-wave groups); kPeerStores: one group
  bool use_stream_wait_value = true;
  // kNcclKernels: per group ncclSend/ncclRecv inside one NCCL group (NCCL's kernels beside the GEMM).
  // kPeerCopyEngine: no NCCL: per group and peer a cudaMemcpyAsync of the (group, peer) segment straight
  // into the peer's receive buffer (IPC-mapped symmetric memory: a copy engine over NVLink, no SM) and a
  // cuStreamWriteValue32 on the peer's flag for (group, this rank); the comm stream then waits for every
  // flag it expects before the gather. Each run resets the flags and meets the other ranks first (the
  // start barrier), so a peer never writes our receive buffer while our previous gather reads it. Needs
  // peer access and the stream memory operations (UnavailableError otherwise).
  // kPeerStores: the epilogue stores every row into its destination's output() (symmetric memory, the final
  // layout) over NVLink; after the GEMM a 32-thread kernel acquires the tile counter (released at system scope)
  // and meets every rank (barrier_block: its release hands our remote stores to the peers). No comm stream, no
  // copy, no gather. run()'s `out`: output() itself (nothing more), or another buffer (one device copy). Each
  // run first meets every rank, so no peer stores into our output() while work we ordered before run() on
  // `stream` still reads it. Needs peer access (UnavailableError otherwise).
  Transport transport = Transport::kNcclKernels;
};

class GemmAllToAll {
 public:
  GemmAllToAll(Team& team, const A2aOptions& opt);
  ~GemmAllToAll();
  GemmAllToAll(const GemmAllToAll&) = delete;
  GemmAllToAll& operator=(const GemmAllToAll&) = delete;

  // Collective (MPI all-gather of every rank's routing): plans counts and tables for `dest` (M entries).
  // Synchronous; call when the routing changes, not per run.
  void set_routing(const std::vector<int32_t>& dest);
  const A2aPlan& plan() const { return plan_; }
  const Mapping& mapping() const { return map_; }
  int64_t recv_rows() const { return plan_.recv_rows; }
  // Transport::kPeerStores: where the rows land (recv_rows() x N, the final layout; valid after set_routing,
  // until the next run). Null for the other transports.
  void* output() const { return stores() ? recv_ : nullptr; }
  const std::vector<std::vector<int32_t>>& routing() const { return dest_all_; }
  // GEMM + per-group all-to-all + the gather into `out` (recv_rows() x N, normal layout). Enqueued on
  // `stream` (comm stream forked and joined); capturable once the routing is set.
  void run(const void* a, const void* b, void* out, cudaStream_t stream);
  // The baseline in the same binary: cuBLAS GEMM into d (M x N), pack rows by destination into
  // `packed` (M x N), ncclSend/ncclRecv per peer into `out` (same layout as run()).
  void run_sequential(CublasGemm& gemm, const void* a, const void* b, void* d, void* packed, void* out,
                      cudaStream_t stream) const;
  void check_error() const;
  const SignalGemm& gemm() const { return *gemm_; }
  const A2aOptions& options() const { return opt_; }

 private:
  Team& team_;
  A2aOptions opt_;
  std::unique_ptr<SignalGemm> gemm_;
  Mapping map_;
  A2aPlan plan_;
  std::vector<std::vector<int32_t>> dest_all_;
  void* d_ = nullptr;                 // reordered GEMM output (send buffer), M x N
  void* recv_ = nullptr;              // receive buffer, recv_cap_ x N
  int64_t recv_cap_ = 0;
  int32_t* tables_ = nullptr;         // tile_slot | tile_group | group_first
  int32_t* row_code_ = nullptr;       // M
  int32_t* pack_rows_ = nullptr;      // M
  int64_t* tile_dest_base_ = nullptr; // tiles * world
  int32_t* piece_dst_ = nullptr;      // recv_cap_ * tiles_n
  uint32_t* counters_ = nullptr;
  cudaStream_t comm_ = nullptr;
  cudaEvent_t fork_ = nullptr, join_ = nullptr;
  void* wait_value_ = nullptr;
  void* err_host_ = nullptr;
  // Transport::kPeerCopyEngine: the receive buffer (symmetric memory, the largest rank's rows; recv_ is its
  // local part), flags [group][source rank], the barrier slot, and where our (group, peer) segments go in
  // each peer's receive buffer (groups x world element offsets, from that peer's plan).
  std::unique_ptr<SymmetricBuffer> peer_recv_, peer_flags_;
  int peer_slot_ = -1;
  void* write_value_ = nullptr;
  unsigned peer_wait_flags_ = 0;
  std::vector<int64_t> peer_dst_off_;
  bool peer() const { return opt_.transport == Transport::kPeerCopyEngine; }
  bool stores() const { return opt_.transport == Transport::kPeerStores; }
  EpilogueArgs epilogue(void* d) const;  // the tables of run()'s GEMM, rows into d
  void** dest_ptrs_ = nullptr;        // kPeerStores: world bf16 pointers (each rank's output(), peers' mapped)
};

// ---- GEMM + reduce-scatter ordered by owner ----
// What PyTorch's fused_matmul_reduce_scatter does, over braid's copy engines: rank `me` owns rows
// [me * M/W, (me + 1) * M/W) of the reduced output (NCCL's reduce-scatter layout; nothing to un-permute). Its GEMM
// runs as one launch per owner block, the peers' blocks first (me + 1, me + 2, ... mod W): each block, once its
// launch ends, is pushed by a copy engine into its owner's receive buffer (slot me) and the owner's flag raised,
// while the next block computes; its own block last; then the sum of its own block and the W - 1 received ones.
// Exposed beyond the GEMM: the sum of M/W rows (and any push still running). FlashOverlap's tile-group mapping
// puts every rank's rows in every group, so its last group always has a transfer to make after the GEMM; this
// order has none. The GEMM per block: cuBLAS or braid's (OwnerGemm).
enum class OwnerGemm { kCublas, kBraid };

class OwnerOrderedRs {
 public:
  // Collective (symmetric buffers). Needs peer access between all ranks (UnavailableError otherwise);
  // M % (W * 256) == 0 for braid's GEMM (2x1 clusters of 128-row tiles), M % W == 0 for cuBLAS.
  // chunks: each peer block's GEMM in that many row chunks, each pushed as soon as it is done (the pushes start
  // sooner and end sooner where they outlast the own block's GEMM; more, smaller launches); M/W % chunks == 0, and
  // for braid's GEMM M/W/chunks % 256 == 0. Past one chunk the own block runs in chunks too, each chunk's sum
  // beside the next chunk's GEMM (only the last chunk's sum is exposed).
  // all_reduce: an all-reduce instead — each rank's sums go into its block of result() (symmetric, (M, N)), and as
  // each chunk's sum ends a copy engine pushes it into the same rows of every peer's result() (then raises the
  // peer's second flag); run() ends when every peer's blocks have landed. `out` is then (M, N): result() itself
  // (no copy) or any buffer (one device copy at the end).
  OwnerOrderedRs(Team& team, int64_t m, int64_t n, int64_t k, OwnerGemm gemm = OwnerGemm::kCublas, int chunks = 1,
                 bool all_reduce = false);
  ~OwnerOrderedRs();
  OwnerOrderedRs(const OwnerOrderedRs&) = delete;
  OwnerOrderedRs& operator=(const OwnerOrderedRs&) = delete;
  // out: (M/W, N) bf16, rows [me * M/W, ...) of the sum over ranks of A·Bᵀ (all_reduce: (M, N), all of it).
  // Capturable in CUDA graphs.
  void run(const void* a, const void* b, void* out, cudaStream_t stream);
  OwnerGemm gemm() const { return kind_; }
  int chunks() const { return chunks_; }
  bool all_reduce() const { return result_ != nullptr; }
  // all_reduce: the (M, N) bf16 result of the last run (pass it as run()'s out to skip the copy); else null.
  void* result() const;
  // Diagnostics, for eager runs (not under capture): with profile on, run() records a timing event at each phase
  // boundary — start, start barrier passed, each peer chunk's GEMM done and its push done (on the push stream), each
  // own chunk's GEMM done, the peers' flags seen and the sum done, all-reduce gathers, end — and phases() gives each
  // one's name and microseconds from the start of the last run, in the order recorded (after the run has finished).
  void set_profile(bool on);
  std::vector<std::pair<std::string, float>> phases() const;

 private:
  Team& team_;
  int64_t m_, n_, k_;
  OwnerGemm kind_;
  int chunks_;
  std::unique_ptr<CublasGemm> cublas_;
  std::unique_ptr<SignalGemm> braid_;
  void* d_ = nullptr;                                  // (M, N) bf16: this rank's partial products, by block
  std::unique_ptr<SymmetricBuffer> recv_, flags_;      // recv: W slots of (M/W, N); flags: W words (source rank),
                                                       // all_reduce: W more (the gathered blocks, by source rank)
  std::unique_ptr<SymmetricBuffer> result_;            // all_reduce: (M, N)
  std::vector<cudaEvent_t> sum_ev_;                    // all_reduce: per own chunk, its sum done
  int slot_ = -1;                                      // the start barrier's slot
  void *write_value_ = nullptr, *wait_value_ = nullptr;
  unsigned wait_flags_ = 0;
  cudaStream_t push_ = nullptr;                        // the copy-engine pushes
  std::vector<cudaEvent_t> ev_;                        // per peer chunk: its GEMM done; last: pushes done
  cudaEvent_t fork_ = nullptr, ready_ = nullptr;       // cuBLAS: the setup on push_ (run() step 1)
  cudaStream_t sum_ = nullptr;                         // chunks > 1: our block's chunk sums
  std::vector<cudaEvent_t> own_ev_;                    // chunks > 1: per own chunk its GEMM done; last: sums done
  int sum_ctas_ = 0;
  cudaEvent_t end_ = nullptr;                          // recorded on the caller's stream at the end of run()
  bool ran_ = false;
  std::vector<cudaEvent_t> prof_ev_;                   // set_profile(true): timing events, one per phase boundary
  std::vector<std::string> prof_names_;                // ... and their names, for the last run
  size_t prof_n_ = 0;                                  // stamps recorded by the last run
  // No-hang contract: sets this rank's flags to 0xffffffff from a private stream, so every flag wait of this rank
  // passes and its streams drain (the run's output is then garbage). The destructor calls it when the last run has
  // not ended within the team's timeout (a peer failed).
  void release_flags() const;
};

// ---- GEMM, then a reduce-scatter by pulls over peer memory (no overlap) ----
// Each rank's GEMM (cuBLAS, all M rows, one launch) writes its (M, N) partial products into a symmetric buffer; a
// start barrier (every rank's GEMM written: memops::start_barrier's contract); one kernel on every SM sums block `me`
// of every rank's buffer — the peers' read by the SMs' loads over NVLink — in rank order into `out` (the owner-ordered
// op's sum, sum_slices_kernel); an end barrier (no rank's next GEMM overwrites its buffer while a peer still reads
// it). Nothing overlaps: what it can save over cuBLAS + NCCL is the collective's cost at the sizes where NCCL's
// reduce-scatter is far from the link (2x H100, 6417c26: 8 MiB in 35.5 us, 16 MiB in 55.8 us — 118-150 GB/s per
// direction — where the SMs' loads pull ~310 GB/s, Flash Communication's one-step). GPU-run since the thirty-second
// session (2x H200: its test passes; 1.07-1.22x faster than cuBLAS + NCCL on the ten small within-2x shapes, picked
// by AutoGemmComm on the smallest); an AutoGemmComm candidate unless AutoOptions::try_pull is off.
// Requirements: peer access between all ranks (UnavailableError), M % world == 0, N % 8 == 0, world <= 16.
// Every wait is a bounded barrier (a timeout becomes the team's DeviceError: check_error()).
class GemmPullRs {
 public:
  GemmPullRs(Team& team, int64_t m, int64_t n, int64_t k);  // collective (symmetric buffer)
  ~GemmPullRs();
  GemmPullRs(const GemmPullRs&) = delete;
  GemmPullRs& operator=(const GemmPullRs&) = delete;
  // out: (M / world, N) bf16, 16-byte aligned: rows [me * M/W, ...) of the sum over ranks of A·Bᵀ. Capturable.
  void run(const void* a, const void* b, void* out, cudaStream_t stream);
  void check_error() const;  // a barrier that timed out (a peer failed): DeviceError

 private:
  Team& team_;
  int64_t m_, n_, k_;
  std::unique_ptr<CublasGemm> cublas_;
  std::unique_ptr<SymmetricBuffer> d_;  // (M, N) bf16: this rank's partial products, read by every peer
  int slot_ = -1;                       // both barriers' slot (epochs only grow: one slot serves both)
  int sum_ctas_ = 0;
};

// Inverse of the reduce-scatter row order after an all-gather of every rank's y (world blocks of
// M/world rows, rank-major): dst row mb*bm + p*sub + r <- src row p*(M/world) + mb*sub + r.
void un_permute_rows(const void* src, void* dst, int64_t m, int64_t n, int bm, int world, cudaStream_t s);
// The same for the rows of an op's mapping: a plain copy where the mapping is normal (already in order).
void un_permute_rows(const Mapping& map, const void* src, void* dst, int64_t m, int64_t n, int world, cudaStream_t s);

// ---- baselines (same binary) ----
// cuBLAS bf16 GEMM (fp32 accumulate), D row-major (M, N) = A · Bᵀ with the layouts above.
class CublasGemm {
 public:
  CublasGemm();
  ~CublasGemm();
  CublasGemm(const CublasGemm&) = delete;
  CublasGemm& operator=(const CublasGemm&) = delete;
  // D = A·Bᵀ + beta·D (beta 0: D is write-only; beta 1 accumulates in fp32 before the one rounding).
  void run(const void* a, const void* b, void* d, int64_t m, int64_t n, int64_t k, cudaStream_t s, float beta = 0.f);

 private:
  void* handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t ws_bytes_ = 0;
};
// Sequential: cuBLAS GEMM then NCCL on `stream` (a team without NCCL, TeamOptions::shared_gpu: the sum on the
// host over MPI, synchronous; tests only).
void run_sequential(Team& team, CublasGemm& gemm, Collective c, const void* a, const void* b, void* d,
                    void* out, int64_t m, int64_t n, int64_t k, cudaStream_t stream);
// Decomposition: M split into `chunks` row blocks; chunk i's GEMM on one of two streams, its collective
// on the comm stream right after it. Output layout is the normal one (RS: chunk-major rows).
class Decomposition {
 public:
  Decomposition(Team& team, int chunks);
  ~Decomposition();
  void run(CublasGemm& gemm, Collective c, const void* a, const void* b, void* d, void* out, int64_t m,
           int64_t n, int64_t k, cudaStream_t stream);
  int chunks() const { return chunks_; }

 private:
  Team& team_;
  int chunks_;
  cudaStream_t s2_ = nullptr, comm_ = nullptr;
  std::vector<cudaEvent_t> ev_;
  std::unique_ptr<CublasGemm> second_;  // cuBLAS handle of the second GEMM stream
};

// ---- GEMM + reduce-scatter / all-reduce, the schedule chosen per shape (the entry point for an application) ----
// One op that runs whichever of braid's schedules is fastest for its collective and shape on this node:
//   sequential        cuBLAS, then NCCL's reduce-scatter (all-reduce: in place on `out`) — the baseline, always there
//   flashoverlap      (reduce-scatter only) GemmOverlap over AutoOptions::flash (default: the peer copy engines),
//                     itself tuned against its fallback; its partition from AutoOptions::flash.cache or the default.
//                     Not an all-reduce candidate: its result stays in its tile-reordered buffer, which only its own
//                     consumers read.
//   owner-<gemm>[-cN] OwnerOrderedRs (all-reduce: its all_reduce form) with cuBLAS's or braid's GEMM, N chunks per
//                     block (no suffix: 1)
//   t3-<variant>      (reduce-scatter only) t3::GemmReduceScatter, AutoOptions::t3_variants (ring-cublas: cuBLAS per
//                     region, received partials added by the next stage's GEMM; ring-dma: braid's T3 GEMM, every
//                     hop by copy engines); timed by tune() only, never the rule's choice
//   cublas-pull       (reduce-scatter only, AutoOptions::try_pull) GemmPullRs; timed by tune() only
// The choice comes from tune() (every candidate timed on the caller's inputs, the slowest rank's medians, the
// fastest kept — cuBLAS + NCCL unless beaten by more than AutoOptions::max_ratio — and written to
// AutoOptions::picks), else from AutoOptions::picks (this collective and shape, or the nearest M with the same
// world, N and K whose choice is legal for this M), else from the rule (default_pick):
// reduce-scatter: owner-cublas where legal and M / world >= 512 rows, else sequential (measured: on the 50-shape
// sweep, 2x H200, owner-cublas alone was 1.058-1.77x of cuBLAS + NCCL; on 4x H200 0.975x or better from 512 rows per
// rank, 0.80x at 256; docs/flashoverlap.md "Twenty-sixth session"); all-reduce: owner-cublas from 1024 rows per
// rank, at 4 chunks from 2048 (2x H200 sweep: 1.01-1.55x of cuBLAS + NCCL there; 0.85x at 512 rows; 4 chunks lost
// below 2048 rows; "Twenty-seventh session"), else sequential. Not measured at 4+ ranks for all-reduce.
// Output, reduce-scatter: `out` (M / world, N) bf16, this rank's rows of the sum over ranks of A·Bᵀ, local row j
// being original row original_row(j) — rank * M/world + j for every schedule but flashoverlap, whose rows are
// block-cyclic (rs_original_row; its rmsnorm() follows them; run() gathers the op's tile-scattered part into these
// rows, GemmOverlap::gather_rows, and the time includes that pass). All-reduce: `out` (M, N), every row, normal order
// (output() names the buffer that saves a copy). run() is capturable (T3's ring-cublas and ring-dma picks replayed
// from CUDA graphs in test_overlap_mpi, 2x H200, a426f8a); tune() is not.
struct GemmCommPick {
  // kT3: reduce-scatter by one of T3's fused ops (braid/t3.hpp, t3::GemmReduceScatter): NCCL's output layout, its
  // result in `out` (ring, ring-dma) or in its own symmetric buffer (ring-cublas, direct: AutoGemmComm::output()).
  // kPull: GemmPullRs (reduce-scatter only; cuBLAS, then the SMs pull the peers' partials over NVLink).
  enum class Schedule { kSequential, kFlashOverlap, kOwnerOrdered, kT3, kPull };
  Schedule schedule = Schedule::kSequential;
  OwnerGemm gemm = OwnerGemm::kCublas;  // kOwnerOrdered
  int chunks = 1;                       // kOwnerOrdered
  t3::Variant t3_variant = t3::Variant::kRingCublas;  // kT3: kRing, kDirect, kRingDma or kRingCublas
  static GemmCommPick t3_op(t3::Variant v) {
    GemmCommPick p;
    p.schedule = Schedule::kT3;
    p.t3_variant = v;
    return p;
  }
  bool operator==(const GemmCommPick& o) const {
    if (schedule != o.schedule) return false;
    if (schedule == Schedule::kOwnerOrdered) return gemm == o.gemm && chunks == o.chunks;
    if (schedule == Schedule::kT3) return t3_variant == o.t3_variant;
    return true;
  }
};
// "sequential", "flashoverlap", "owner-cublas", "owner-braid-c4", "t3-ring-cublas", "cublas-pull", ... and back
// (UsageError on anything else).
std::string pick_name(const GemmCommPick& p);
GemmCommPick parse_pick(const std::string& name);
// Whether a pick can run for this collective, shape and world (the divisibility OwnerOrderedRs needs; braid's GEMM
// per block in 256-row steps with N % 256 == 0; flashoverlap for reduce-scatter only; T3 for reduce-scatter at 2 to 8
// ranks with M % (world * 256) == 0, N % 256 == 0, K % 64 == 0; the constructors check the rest).
bool pick_legal(const GemmCommPick& p, Collective coll, int world, int64_t m, int64_t n, int64_t k);
// The rule used without a measurement (see above).
GemmCommPick default_pick(Collective coll, int world, int64_t m, int64_t n, int64_t k, bool peer_ok);
// tune()'s choice among timed candidates (pick, median µs): the fastest, except that cuBLAS + NCCL (sequential), where
// timed, is kept unless the fastest is at most max_ratio x its median. Returns an index into `timed` (non-empty).
size_t choose_timed(const std::vector<std::pair<GemmCommPick, double>>& timed, double max_ratio);

// Picks per collective and shape. Text, one per line: "coll world m n k name [us]" (coll: reducescatter |
// allreduce; '#' comments); a later line for the same key wins.
class PickCache {
 public:
  struct Entry {
    Collective coll = Collective::kReduceScatter;
    int world = 2;
    int64_t m = 0, n = 0, k = 0;
    GemmCommPick pick;
    double us = 0;  // the pick's tuned median (0: not measured)
  };
  void put(const Entry& e);  // replaces the entry of the same (coll, world, m, n, k)
  // Same (coll, world, n, k), nearest m whose pick is legal at m (ties: the larger m); null if none.
  const Entry* lookup(Collective coll, int world, int64_t m, int64_t n, int64_t k) const;
  void load(const std::string& path);  // missing file: empty
  void save(const std::string& path) const;
  void parse(const std::string& text);  // throws UsageError naming the line
  std::string text() const;
  const std::vector<Entry>& entries() const { return v_; }

 private:
  std::vector<Entry> v_;
};

struct AutoOptions {
  Collective coll = Collective::kReduceScatter;
  OverlapOptions flash = peer_flash_options();  // reduce-scatter: the flashoverlap candidate (coll, m, n, k set by
                                                // the op)
  bool try_flash = true;
  bool try_owner = true;
  bool try_owner_braid = true;          // at the first of owner_chunks only
  // cuBLAS at each chunk count (where legal). 2 added in the twenty-ninth session: on 2x H100 (6df90f9, 12 shapes
  // within 2x, bench/results/h100x2/owner-chunks-6df90f9.jsonl) the 2-chunk op won 4096x8192x1024 (182.1 us against
  // 205.5 at 1 chunk, 209.9 at 4) and tied 16384x8192x2048; 1 chunk kept the other ten.
  std::vector<int> owner_chunks{1, 2, 4};
  // Reduce-scatter: T3's fused ops as candidates too (these variants; t3-auto's two). Added in the twenty-ninth
  // session: on 2x H100 t3-auto's rows beat AutoGemmComm's pick on 13 of the 25 within-2x sweep shapes (25 of 50 in
  // all; 6417c26 against e9566f7, two sessions' rows compared by speedup over each row's own cuBLAS + NCCL;
  // docs/flashoverlap.md "Twenty-ninth session"). GPU-run as candidates since the thirtieth session (2x H200: 1.341x
  // on the whole sweep, within 2x 1.481x; not yet on H100).
  bool try_t3 = true;
  std::vector<t3::Variant> t3_variants{t3::Variant::kRingCublas, t3::Variant::kRingDma};
  // Reduce-scatter: GemmPullRs ("cublas-pull") as a candidate too (GPU-run since the thirty-second session; `bench
  // gemm-rs --auto --no-auto-pull` leaves it out).
  bool try_pull = true;
  PickCache* picks = nullptr;           // read at construction, written by tune()
  int reps = 5;                         // tune(): interleaved rounds
  double max_ratio = 0.99;              // tune(): another schedule beats cuBLAS + NCCL only at <= max_ratio x its median
  static OverlapOptions peer_flash_options() {
    OverlapOptions o;
    o.coll = Collective::kReduceScatter;
    o.transport = Transport::kPeerCopyEngine;
    return o;
  }
};

class AutoGemmComm {
 public:
  // Collective (every rank, same arguments). Builds only the chosen schedule (see above).
  AutoGemmComm(Team& team, int64_t m, int64_t n, int64_t k, const AutoOptions& opt = {});
  ~AutoGemmComm();
  AutoGemmComm(const AutoGemmComm&) = delete;
  AutoGemmComm& operator=(const AutoGemmComm&) = delete;

  // out: reduce-scatter (M / world, N) bf16 (original_row() says which rows); all-reduce (M, N). Capturable.
  void run(const void* a, const void* b, void* out, cudaStream_t stream);
  // Builds every legal candidate (those that throw UnavailableError — no peer access, no stream memory operations —
  // are skipped), times them on (a, b) into `out` (an owner-ordered all-reduce into its own result: output() is
  // where a caller that wants no copy reads) (reps interleaved rounds, the slowest rank's medians: every rank
  // picks alike), keeps choose_timed()'s pick, frees the rest and records the pick in opt.picks. Collective;
  // synchronous; not capturable. Candidates coexist while timed: up to ~2 x M x N x 2 bytes each (all-reduce: 3).
  GemmCommPick tune(const void* a, const void* b, void* out, cudaStream_t stream);
  const GemmCommPick& pick() const { return pick_; }
  Collective collective() const { return opt_.coll; }
  // The candidates the last tune() timed and their medians (µs), in the same order.
  const std::vector<std::pair<GemmCommPick, double>>& tuned() const { return tuned_; }
  // Original row (of the M rows of A·Bᵀ) of this rank's local output row j (all-reduce: j).
  int64_t original_row(int64_t j) const;
  // All-reduce over an owner-ordered schedule: its result buffer ((M, N), valid until the next run), which run() may
  // be given as `out` to skip the final copy; reduce-scatter over T3's ring-cublas or direct op: its symmetric result
  // ((M / world, N)) likewise; null otherwise (any `out` then costs nothing extra).
  void* output() const;
  // The flashoverlap schedule's op while it is the pick (its mapping, rmsnorm()); null otherwise.
  GemmOverlap* flash() const;

  struct Schedule;  // one schedule's resources (src/overlap/auto_gemm.cu)

 private:
  Team& team_;
  int64_t m_, n_, k_;
  AutoOptions opt_;
  GemmCommPick pick_;
  std::unique_ptr<Schedule> cur_;
  std::vector<std::pair<GemmCommPick, double>> tuned_;
};

// `braid bench gemm-rs|gemm-ar --shape M,N,K | --shapes FILE [--json FILE] [--iters N] [--warmup N]
//   [--groups w0,w1,..] [--reserve-sms S] [--tile 128x256|128x128] [--cache FILE] [--measure FILE]`
// argv[0] is the target (gemm-rs | gemm-ar). Returns 0 if every row verified, 3 otherwise.
int bench_main(Team& team, int argc, char** argv, const bench::Context& ctx);
// `braid bench gemm-a2a --shape M,N,K | --shapes FILE [--json FILE] [--iters N] [--warmup N]
//   [--groups w0,..] [--reserve-sms S] [--tile ...] [--seed S]`: uniform random routing per row.
int bench_a2a_main(Team& team, int argc, char** argv, const bench::Context& ctx);
// `braid bench gemm-cublaslt --shape M,N,K | --shapes FILE [--algos 8] [--json FILE] [--iters N] [--warmup N]`
// (one rank): cuBLASLt's top heuristic configurations for each GEMM (tile, stages, split-K, cluster, as cublasLt.h
// enum values), each verified against and timed beside cublasGemmEx. Returns 0 if every output verified, 3 otherwise.
int bench_cublaslt_main(Team& team, int argc, char** argv, const bench::Context& ctx);

}  // namespace braid::overlap
