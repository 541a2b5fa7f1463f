// braid/t3.hpp — T3 (track-and-trigger) on Hopper: GEMM -> reduce-scatter with no SMs spent on
// communication, and all-gather -> GEMM fed by copy engines. See docs/t3.md.
//
//   braid::t3::GemmReduceScatter rs(team, {braid::t3::Variant::kRing, M, N, K});
//   rs.run(A, B, out, stream);      // out: this rank's (M/world) x N rows [rank*M/world, ...)
//   braid::t3::AllGatherGemm ag(team, {M, N, K});
//   ag.run(A_shard, B, C, stream);  // A_shard: (M/world) x K of this rank; C: M x N (all rows)
//
// Layouts as in braid/overlap.hpp: A (M,K) row-major, B (N,K) row-major ("TN"), D = A·Bᵀ (M,N) bf16
// row-major, fp32 accumulation. The reduce-scatter output is NCCL's: rank p owns rows
// [p*Mc, (p+1)*Mc), Mc = M/world ("chunk" p), exactly ncclReduceScatter of a row-major D.
//
// The address map (the paper's remote_map / dma_map, Figure 12) is a host object describing, for
// every output tile of this rank's GEMM, where its values go and which counter its completion
// increments, plus the copy-engine transfers that the counters trigger. It is computed on the host
// (make_address_map), tested on the CPU, and lowered to the epilogue's parameters.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace braid {
class Team;
class SymmetricBuffer;
namespace bench {
struct Context;
}
namespace overlap {
class SignalGemm;
class CublasGemm;
}
}  // namespace braid

namespace braid::t3 {

// kRing: the chunk of owner c visits ranks c-1, c-2, ..., c (stage s at rank c-1-s); stage 0's tiles
//        are stored straight into the next hop's landing buffer (remote_map), later stages add the
//        arrived partial in the epilogue and the finished region is forwarded by a copy engine
//        (dma_map) that a counter triggers (cuStreamWaitValue32). Any world size.
// kDirect: every tile is atomically added (red.global.add.noftz.bf16x2 over NVLink) into its owner's
//        output; no copy engine, no SMs beyond the GEMM's. Needs a fully connected node.
// kRingDma: kRing with stage 0 also on the copy engines (the paper's dma_map for every hop): stage-0
//        tiles are stored locally (landing slot 0) and tracked; a finished region is pushed to the next
//        hop by cudaMemcpyAsync, so no SM stores to a peer at all (at W = 2 the only SM work besides
//        the GEMM is the fused add of the own chunk's last stage).
// kRingCublas: the same ring and copy-engine forwarding at region granularity, but each region's
//        GEMM is a cuBLAS call (tracking by stream events instead of tile counters; cuBLAS cannot
//        signal per tile), and a received partial is accumulated by the next stage's GEMM itself
//        (beta = 1 on the landing region). The result stays in the symmetric landing buffer (result()).
// kAuto: a ring-cublas, a ring-dma and a direct-tma op side by side; run() uses one of the first two by a rule
// (ring-cublas when M / world >= 2048 rows, the better of the two on the 2x H200 sweep for most shapes) until
// tune() has timed all three (and kSequential) on real inputs and kept the fastest (the same choice on every rank).
// kSequential: cuBLAS into a scratch M x N buffer, then ncclReduceScatter into `out` — the baseline as a
// variant, so kAuto can fall back to it (tune() tries it too and keeps it only when it is the fastest).
// kDirectTma: kDirect with the tiles sent by the TMA unit instead of the consumer threads: each warpgroup writes its
// rows of a 64-column panel into shared memory (bf16, stmatrix) and one thread issues a tensor store or reduce-add
// (cp.reduce.async.bulk.tensor .add, bf16) of the panel into the owner's output through a tensor map of that rank's
// buffer; completion (and the counters) wait until a later tile's epilogue, so the adds travel during the next main
// loops. The paper's "near-memory reduction" without SM instructions per element. Each rank computes its own chunk
// first and stores it (no zeroed output: no memset, no add onto zeros), announcing each region (stored[q]); the other
// ranks add onto a region once its owner has stored it (a bounded wait on the owner's counter), then signal out[q].
// Same rounding as kDirect (each other partial added once in bf16 onto the owner's bf16 value).
enum class Variant { kRing, kDirect, kRingDma, kRingCublas, kAuto, kSequential, kDirectTma };
const char* variant_name(Variant v);
inline bool is_direct(Variant v) { return v == Variant::kDirect || v == Variant::kDirectTma; }
inline bool is_ring(Variant v) { return !is_direct(v); }

// What one tile's epilogue does with its values.
enum class TileOp : uint8_t {
  kStoreRemote = 0,   // ring stage 0: st.global into dest_rank's landing slot (a peer)
  kAddStoreLocal = 1, // ring middle stage: wait landing region, load + add in fp32, store in place
  kAddStoreFinal = 2, // ring last stage (own chunk): wait landing region, load + add, store to `out`
  kStoreFinal = 3,    // world == 1: plain store to `out`
  kAtomicAdd = 4,     // direct: red.add.bf16x2 (direct-tma: a TMA reduce-add) into dest_rank's output
  kStoreLocal = 5,    // ring-dma stage 0: st.global into own landing slot 0, then signal local done[0][q]
};
const char* tile_op_name(TileOp op);

// Buffers named by the map (each rank holds the same set; "slot s" of the landing buffer holds one
// chunk, Mc x N elements).
enum class Buf : uint8_t { kLanding = 0, kOut = 1 };

struct TileRoute {
  int stage = 0;          // position of this tile's chunk in this rank's order (0 first)
  int chunk = 0;          // owner of the tile's rows
  int region = 0;         // region of the chunk (regions split a chunk into row blocks)
  TileOp op = TileOp::kStoreFinal;
  int dest_rank = 0;      // whose memory the values land in
  Buf dest_buf = Buf::kOut;
  int dest_slot = 0;      // landing slot (kLanding) — elements offset slot * chunk_elems
  int64_t dest_offset = 0;  // element offset of the tile's (0,0) inside the slot / output
  int wait_counter = -1;  // landing counter to wait for before reading (-1: none)
  int wait_rank = -1;     // whose counter array wait_counter indexes (-1: this rank's; direct-tma: the owner's)
  int signal_rank = 0;    // rank owning the counter this tile increments
  int signal_counter = 0; // its index in that rank's counter array (see AddressMap counters)
};

// One copy-engine transfer: when local counter `wait_counter` reaches `wait_value`, copy `elems`
// elements from local landing slot `src_slot` at `offset` to rank `dst_rank`'s landing slot
// `dst_slot` at the same offset, then write `signal_value` to dst_rank's counter `signal_counter`.
struct DmaTrigger {
  int stage = 0, region = 0;
  int wait_counter = 0;
  uint32_t wait_value = 0;
  int src_slot = 0, dst_slot = 0;
  int64_t offset = 0, elems = 0;
  int dst_rank = 0;
  int signal_counter = 0;
  uint32_t signal_value = 0;
};

// One GEMM launch: rows [row_begin, row_begin + rows) of A/D (the stagger needs two: the rotation of
// the chunk order is not one strided tensor).
struct Launch {
  int64_t row_begin = 0, rows = 0;
};

#if defined(__CUDACC__)
#define BRAID_T3_HD __host__ __device__ __forceinline__
#else
#define BRAID_T3_HD inline
#endif

// The direct-tma GEMM's order of m-blocks: its scheduler passes every tile's M index through
// physical_mblock (overlap/sm90_gemm.cuh, RemappedPersistentScheduler), and tile_execution_order does the
// same. Each chunk is cut into segments of seg_mblocks m-blocks (whole regions), and this rank's segment
// g + 1 runs before the other owners' segment g:
//   own 0, own 1, others' 0, own 2, others' 1, ..., own S-1, others' S-2, others' S-1
// ("others" in ring order: rank+1, rank+2, ...). The remote reduce-adds then start after 1/(world*S) of
// the GEMM instead of after the whole own chunk (1/world), and every owner stored its segment g one
// segment before anyone adds onto it (each rank runs the same order, so the waits rarely wait). Never
// a deadlock: a rank's own tiles wait for nothing, and a tile of owner c's segment g waits only for c's
// own segment g, which c runs before any tile that waits for segment g (induction over the order).
// Identity when world <= 1 or seg_mblocks <= 0; S = chunk_mblocks / seg_mblocks = 1 is "own chunk, then
// the others' in ring order".
// Column order (paired = 1; AddressMap::stored_by_column): no lag — strip k holds every owner's segment k, own first:
//   own k, (rank+1)'s k, ..., (rank+W-1)'s k  for k = 0 .. S-1
// so that the scheduler's swizzle strip (world * seg_mblocks m-blocks) walks N with each column's own tiles first and
// the others' tiles of the same segment and column after them (their waits are per (segment, column): t3_epilogue).
struct Interleave {
  int32_t world = 1, rank = 0;
  int32_t chunk_mblocks = 0;  // m-blocks per chunk
  int32_t seg_mblocks = 0;    // m-blocks per segment (a multiple of the region, dividing the chunk); 0: identity
  int32_t paired = 0;         // 1: the column order above
  BRAID_T3_HD int32_t physical_mblock(int32_t v) const {
    if (world <= 1 || seg_mblocks <= 0 || v < 0 || v >= world * chunk_mblocks) return v;
    if (paired) {
      const int32_t strip = world * seg_mblocks;
      const int32_t k = v / strip, rem = v - k * strip, p = rem / seg_mblocks, off = rem - p * seg_mblocks;
      return ((rank + p) % world) * chunk_mblocks + k * seg_mblocks + off;
    }
    const int32_t segs = chunk_mblocks / seg_mblocks;
    const int32_t s = v / seg_mblocks, off = v - s * seg_mblocks;
    int32_t chunk = rank, seg = 0;
    if (s > 0) {
      const int32_t j = (s - 1) / world + 1, p = (s - 1) - (j - 1) * world;  // block j: own j, others' j - 1
      if (j < segs) {
        chunk = p == 0 ? rank : (rank + p) % world;
        seg = p == 0 ? j : j - 1;
      } else {  // the tail: others' last segment
        chunk = (rank + 1 + p) % world;
        seg = segs - 1;
      }
    }
    return chunk * chunk_mblocks + seg * seg_mblocks + off;
  }
};

struct AddressMap {
  Variant variant = Variant::kRing;
  int world = 1, rank = 0;
  int64_t m = 0, n = 0;
  int bm = 128, bn = 256;
  int tiles_m = 0, tiles_n = 0;
  int chunk_mblocks = 0;      // m-blocks per chunk (Mc / bm)
  int regions = 1;            // regions per chunk
  int region_mblocks = 0;     // chunk_mblocks / regions
  int64_t chunk_elems = 0;    // Mc * N
  int64_t region_elems = 0;
  std::vector<int> order;     // stage -> chunk computed at that stage
  std::vector<Launch> launches;
  std::vector<TileRoute> tiles;  // tile id (mb * tiles_n + nb) -> route
  // Counters of THIS rank (each rank's array has the same layout), zeroed before every run:
  //   ring:   [0, world*regions)                land[s*regions + q]  (landing slot s, region q)
  //           [world*regions, 2*world*regions)  done[s*regions + q]  (local stage-s region q done)
  //   direct: [0, regions)                      out[q]               (owner's output region q: the other ranks'
  //                                                                     tiles; the own tiles signal nothing)
  //   direct-tma: also [regions, 2*regions)     stored[q]            (own region q stored: the others add onto it)
  //     column order: [regions, regions + S*tiles_n) stored[g*tiles_n + nb] (own tiles of segment g, column nb)
  int num_counters = 0;
  std::vector<uint32_t> expected;  // per local counter: updates it receives in one run
  std::vector<int> final_counters; // counters whose completion means `out` is final (direct)
  std::vector<DmaTrigger> dma;     // this rank's copy-engine transfers, in issue order
  int landing_slots = 0;           // slots of the landing buffer (ring: world; direct: 0)
  int land_counter(int slot, int region) const { return slot * regions + region; }
  int done_counter(int stage, int region) const { return world * regions + stage * regions + region; }
  int stored_counter(int region) const { return regions + region; }  // direct-tma
  int stored_column_counter(int seg, int nb) const { return regions + seg * tiles_n + nb; }  // column order
  Interleave interleave;           // direct-tma: the GEMM's m-block order (one launch over all rows)
  bool stored_by_column = false;   // direct-tma: column order (make_address_map)
  // The rows a scheduler swizzle strip must stay inside: every owner's segment in column order, else the
  // interleave's segment, else the chunk.
  int strip_mblocks() const {
    return stored_by_column ? world * interleave.seg_mblocks
           : interleave.seg_mblocks > 0 ? interleave.seg_mblocks : chunk_mblocks;
  }
};

// Ring order of rank `rank`: stage s computes chunk (rank + 1 + s) mod world; the last is its own.
std::vector<int> ring_order(int world, int rank);
// The rank that receives this rank's partial in the ring (rank - 1 mod world).
inline int ring_next(int world, int rank) { return (rank - 1 + world) % world; }
// Launches covering the rows in `order` (consecutive chunks merged): 1 or 2 for the ring rotation.
std::vector<Launch> order_launches(const std::vector<int>& order, int64_t chunk_rows);

// The persistent scheduler's swizzle for the T3 GEMM (CUTLASS max_swizzle_size, raster along N,
// clusters 2x1): strips of 2*s m-blocks walk N together, so a wave of ~132 tiles covers 2s m-blocks x
// ~66/s n-blocks of the output: it reads 2s row blocks of A and ~66/s column blocks of B, instead of 2
// row blocks and all of B. With s = 1 every wave streams B again (N >= 8192: every wave reads all of B);
// with s = 8 B is re-read once per 16 m-blocks. A strip must not straddle a chunk: chunks (stages) then
// still run in order within a launch, which is what the no-deadlock argument needs (docs/t3.md); regions
// of one strip complete together (later copy-engine triggers). Returns the largest s in {1, 2, 4, 8},
// s <= cap, with chunk_mblocks % (2s) == 0.
int pick_swizzle(int chunk_mblocks, int cap);
// The tiles of this rank's T3 GEMM in execution order: launch after launch, within a launch CUTLASS's
// persistent schedule (overlap::execution_order, raster along N, cluster 2x1, this swizzle). A tile id
// is mb * tiles_n + nb of the whole problem.
std::vector<int> tile_execution_order(const AddressMap& a, int swizzle);

// Regions per chunk for a variant, chunk_rows (M / world) rows of n bf16 columns in bm-row blocks, when the
// caller asked for `requested` (0: the variant's default). Defaults: ring-cublas (each region its own cuBLAS call)
// 1 region below 512 rows per chunk, 2 from 512 to 2047, min(4, rows / 1024) from 2048 — measured at 2 and 4 ranks
// on 2x/4x H200 (bb85931, bench/results/h200x{2,4}/t3-regions-*): at 512-1024 rows per chunk two regions beat one
// on 13 of 15 shapes, by up to 1.35x (4-rank 4096x8192x4096 0.95x -> 1.28x of sequential); from 2048 rows two to
// four are within a few percent. Every other variant: one region per ~8 MiB of chunk. Then at most
// chunk_mblocks / 2 (whole 2x1 clusters), lowered until chunk_mblocks % (2 * regions) == 0.
int pick_regions(Variant v, int64_t chunk_rows, int64_t n, int bm, int requested);

// Throws UsageError unless M % (world * 2*bm * regions) == 0 (every region whole 2x1 clusters), N % bn.
// segment_mblocks (direct-tma at world > 1; the others ignore it): the interleave's segment, at least that many
// m-blocks, in whole regions dividing the chunk (pick_segment); 0: the whole chunk (own chunk first, then the
// others'); -1: kDefaultSegmentMblocks.
// column_order (direct-tma at world > 1; BRAID_T3_COLUMN_ORDER=1 in t3.cu): segments of column_segment(world,
// chunk_mblocks) m-blocks, every owner's segment k in scheduler strip k (Interleave::paired: own first in every tile
// column), and stored[] counted per (segment, tile column) instead of per region: another owner's tile waits only for
// that owner's own tiles of the same segment and column, which run just before it in the owner's order. So a strip of
// swizzle 8 (16 m-blocks) spans every chunk — B is read once per 16 m-blocks of M, not once per chunk (the three
// within-2x shapes direct-tma left short of the DRAM target, M <= 2048 and K = 4096, read B once per chunk) — and the
// remote adds run from the first strip on, not after the own chunk. segment_mblocks is then ignored.
AddressMap make_address_map(Variant v, int world, int rank, int64_t m, int64_t n, int bm, int bn, int regions,
                            int segment_mblocks = -1, bool column_order = false);
// Column order's segment: the largest even divisor s of chunk_mblocks with world * s <= 16 (one swizzle-8 strip).
int column_segment(int world, int chunk_mblocks);
// direct-tma's default segment: 0, the whole chunk. Measured on 2x H200 (forty-first session, the 25 within-2x
// shapes, bench/results/h200x2/*-bb7cd9b*, *-07b24f2*): interleaving segments of >= 1024 rows gave 1.015x of the
// whole-chunk order's time (geomean of direct-tma's speedup over sequential), >= 512 rows 1.033x, >= 2048 rows 0.996x
// — the gain comes only with a segment narrower than swizzle 8's strip (16 m-blocks), and so does a loss of L2 reuse:
// DRAM bytes (Nsight Compute) with the whole chunk 0.560x of sequential's (geomean; >= 15% below on 22 of 25 shapes),
// with 1024-row segments 0.574x (21/25; 4096x4096x4096 -6% where the whole chunk is -23%), with 512-row segments
// worse again (8192x8192x2048 -7% against -41%, 4096x8192x2048 +2% against -42%). direct-tma is T3's DRAM-lean op
// (t3-auto is the fast one and picks direct-tma only where a chunk is one segment anyway), so the default keeps the
// bytes; BRAID_T3_SEGMENT_ROWS asks for segments (t3.cu).
inline constexpr int kDefaultSegmentMblocks = 0;
// The fewest whole regions of at least min_mblocks m-blocks that divide the chunk; the whole chunk when none does.
int pick_segment(int chunk_mblocks, int region_mblocks, int min_mblocks);

// ---- the fused GEMM + reduce-scatter ----
struct RsOptions {
  Variant variant = Variant::kRing;
  int64_t m = 0, n = 0, k = 0;
  int regions = 0;         // regions per chunk (0: the variant's default, pick_regions)
  int sm_count = 0;        // SMs of the persistent GEMM (0: all; nothing is left for communication)
  int swizzle = 0;         // cap on the T3 GEMM's scheduler swizzle (pick_swizzle); 0: BRAID_T3_SWIZZLE, else
                           // 8 (direct, direct-tma) or 1 (rings)
};

class GemmReduceScatter {
 public:
  GemmReduceScatter(Team& team, const RsOptions& opt);  // collective (symmetric buffers)
  ~GemmReduceScatter();
  GemmReduceScatter(const GemmReduceScatter&) = delete;
  GemmReduceScatter& operator=(const GemmReduceScatter&) = delete;

  const AddressMap& map() const { return map_; }
  size_t out_elems() const { return size_t(map_.chunk_elems); }
  // out: (M/world) x N bf16 (ring: any device pointer of this rank; direct: ignored, the result is in
  // result(), symmetric memory the peers add into). Enqueued on `stream`; the copy engine stream forks
  // from it and joins back. Capturable in a CUDA graph: test_overlap_mpi replays ring-cublas and ring-dma
  // from graphs through AutoGemmComm, every rank's rows checked (2x H200, a426f8a); ring and direct are not
  // captured by any test.
  void run(const void* a, const void* b, void* out, cudaStream_t stream);
  // Where the reduced rows are after run(): `out` (ring, ring-dma) or the op's own symmetric buffer (direct,
  // ring-cublas).
  const void* result() const;
  // That own buffer ((M/world) x N bf16; the same for every run, so a caller may read it without a copy) for direct
  // and ring-cublas, before any run too; null for the variants that write `out` (and kAuto, kSequential).
  const void* own_result() const;
  // Throws TimeoutError if an in-kernel wait of this op timed out (after synchronizing the stream);
  // first releases every wait still queued on this rank (release_waits), so no stream stays blocked.
  void check_error() const;
  int comm_sms() const { return 0; }  // SMs that move or reduce data for communication
  // Abort path: sets every counter of this rank to 0xffffffff (from a private stream), so that every
  // in-kernel wait and every cuStreamWaitValue32 (copy-engine stream, compute stream) of this rank is
  // satisfied and its streams drain; the output is garbage. Stream memory-operation waits have no
  // timeout of their own: the destructor calls this when the copy-engine stream has not finished
  // within the team's timeout, so a failed run turns into an error, never a hang. Each rank releases
  // its own counters (every stream wait is on a local counter; direct-tma's in-kernel waits on an owner's
  // counter are bounded by the kernel's own timeout, like every in-kernel wait).
  void release_waits() const;
  // "counter i: observed/expected" for every counter of this rank (diagnostics after a timeout).
  std::string counter_report() const;
  // kAuto only (else returns the op's variant): times the candidates on these inputs the way they run in
  // a training step — `kTuneBatch` runs back to back per measurement, not one synchronised run — in
  // `reps` interleaved rounds (A, B, C, A, B, C, ...: drift in clocks or temperature hits every candidate
  // alike), after one warm-up run each; takes the slowest rank's median per candidate, keeps the fastest.
  // Collective and synchronous; `out` holds a correct result of the last candidate timed (call run()
  // before reading result()). Returns the choice.
  Variant tune(const void* a, const void* b, void* out, cudaStream_t stream, int reps = 7);
  static constexpr int kTuneBatch = 4;
  // The variant run() executes (kAuto: the current choice).
  Variant active_variant() const { return active_ ? active_->active_variant() : opt_.variant; }

 private:
  Team& team_;
  RsOptions opt_;
  AddressMap map_;
  std::unique_ptr<SymmetricBuffer> landing_;   // ring: world slots of Mc x N; direct: the output
  std::unique_ptr<SymmetricBuffer> counters_;
  int slot_ = 0;                               // team signal slot of the start barrier
  cudaStream_t ce_ = nullptr;
  cudaEvent_t fork_ = nullptr, join_ = nullptr;
  cudaEvent_t end_ = nullptr;  // recorded on the compute stream at the end of run() (destructor: bounded wait)
  void run_cublas(const void* a, const void* b, cudaStream_t stream);
  std::unique_ptr<overlap::CublasGemm> cublas_;  // kRingCublas
  std::vector<cudaEvent_t> region_done_;          // kRingCublas: stage s region q computed
  std::vector<unsigned char> tma_out_;            // kDirectTma: world CUtensorMap (encoded once) of the ranks' outputs
  void* wait_value_ = nullptr, *write_value_ = nullptr;  // driver entry points
  unsigned wait_flags_ = 0;
  void* err_host_ = nullptr;
  void* err_dev_ = nullptr;  // err_host_'s device address (mapped host memory), for the epilogue's timeouts
  int sm_count_ = 0;
  int swizzle_ = 1;                            // the T3 GEMM's scheduler swizzle (pick_swizzle)
  const void* result_ = nullptr;
  bool by_copy_ = false;                       // BRAID_T3_SIGNAL=copy: signal peers by a 4-byte copy
  uint32_t* sigval_ = nullptr;                 // device word holding the DMA signal value
  uint32_t sigval_host_ = 0;
  std::vector<std::unique_ptr<GemmReduceScatter>> cand_;  // kAuto: the candidates
  void* scratch_ = nullptr;                               // kSequential: the GEMM's M x N output
  GemmReduceScatter* active_ = nullptr;                   // kAuto: the one run() uses
};

// ---- all-gather fused with the following GEMM (T3 §7.2, consumer side) ----
// Every rank pushes its shard to each peer's gathered buffer with copy engines (descending peer
// order: the peer that needs it soonest first), then writes the peer's arrival flag
// (cuStreamWriteValue32, with its memory barrier). The compute stream runs one GEMM per chunk in the
// order own, rank+1, rank+2, ...; the GEMM of chunk j is gated by cuStreamWaitValue32(arrival[j]).
// Per-chunk launches (not a wait in the TMA producer warp) reuse the FlashOverlap kernel unchanged:
// no CUTLASS mainloop change, no new instantiation; the cost is one partial last wave per chunk.
struct AgOptions {
  int64_t m = 0, n = 0, k = 0;  // full M (gathered); this rank's shard is M/world rows
  int sm_count = 0;
  bool cublas = true;           // the per-chunk GEMMs: cuBLAS (default), or braid's sm90 GEMM
};
class AllGatherGemm {
 public:
  AllGatherGemm(Team& team, const AgOptions& opt);
  ~AllGatherGemm();
  AllGatherGemm(const AllGatherGemm&) = delete;
  AllGatherGemm& operator=(const AllGatherGemm&) = delete;
  // a_shard: (M/world) x K, b: (N,K), c: (M,N) row-major. After run(), gathered() (M x K) holds every
  // peer's shard at its rows; this rank's own rows are not written there (its shard is used in place).
  void run(const void* a_shard, const void* b, void* c, cudaStream_t stream);
  // As GemmReduceScatter::release_waits: sets this rank's arrival flags so no queued wait can block.
  void release_waits() const;
  const void* gathered() const;
  std::vector<int> chunk_order() const;  // own first, then rank+1, ...
  int comm_sms() const { return 0; }

 private:
  Team& team_;
  AgOptions opt_;
  std::unique_ptr<overlap::SignalGemm> gemm_;
  std::unique_ptr<overlap::CublasGemm> cublas_;
  std::unique_ptr<SymmetricBuffer> gathered_;  // M x K
  std::unique_ptr<SymmetricBuffer> arrival_;   // world uint32 per rank
  int slot_ = 0;
  cudaStream_t ce_ = nullptr;
  cudaEvent_t fork_ = nullptr, join_ = nullptr;
  bool ran_ = false;
  cudaEvent_t end_ = nullptr;  // recorded on the compute stream at the end of run() (destructor: bounded wait)
  void* wait_value_ = nullptr, *write_value_ = nullptr;
  unsigned wait_flags_ = 0;
  bool by_copy_ = false;
  uint32_t* sigval_ = nullptr;
};

// `braid bench t3-gemm-rs --algo sequential,flashoverlap,t3-ring,t3-direct --shape M,N,K|--shapes FILE`
// `braid bench ag-gemm --algo sequential,t3 --shape M,N,K|--shapes FILE`
// [--json FILE] [--iters N] [--warmup N] [--regions R]. argv[0] is the bench name. Returns 0 if every
// row verified, 3 otherwise.
int bench_main(Team& team, int argc, char** argv, const bench::Context& ctx);

}  // namespace braid::t3
