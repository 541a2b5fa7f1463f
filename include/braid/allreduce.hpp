// braid/allreduce.hpp — all-reduce over symmetric peer memory: bf16/fp16 one-shot and two-shot, and
// Flash Communication's quantized two-step all-reduce (INT8, INT6 = INT4 then INT8, INT4), plus the
// same quantized algorithm over NCCL as transport (works across nodes and without peer access).
//
//   braid::AllReducer ar(team);                           // collective: allocates the workspaces
//   ar.run(in, out, count, DType::kBF16, stream);         // exact (sum, fp32 accumulation)
//   ar.run(in, out, count, DType::kBF16, stream, {.precision = Precision::kInt8});   // lossy: asked for
//
// Every algorithm is deterministic: a fixed reduction order (rank 0, 1, ..., W-1) in fp32, and every
// rank (the owner of a chunk too) reads the same bytes, so all ranks end with bit-identical outputs.
// Calls are CUDA-graph capturable (no host synchronisation, static workspaces). Consecutive calls on
// one AllReducer must be issued in the same order on every rank (as for NCCL).
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <vector>

#include "braid/bench.hpp"
#include "braid/runtime.hpp"

namespace braid {

using bench::DType;

enum class Precision { kExact, kInt8, kInt6, kInt4 };
enum class ArAlgo {
  kAuto,
  kNccl,      // ncclAllReduce
  kOneShot,   // push the whole buffer to every peer, each rank reduces everything
  kOneShotLL, // the same with data and flag in one 16-byte store (NCCL's LL protocol): small messages
  kOneShotLL128, // the same with a flag per 128-byte line (NCCL's LL128 wire format): 1.07x the bytes
  kTwoShot,   // reduce-scatter by remote stores, then all-gather by remote stores
  kQuantP2P,  // Flash Communication two-step, fused, over peer memory
  kQuantNccl, // Flash Communication two-step, NCCL all-to-all + all-gather as transport
  kOneShotCE,   // AllReducer::run_symmetric only: copy engines pull the peers' copies, SMs only add
  kQuantOneStep // INT8/INT4: each rank quantizes its input once into its own workspace, every rank
                // pulls every rank's codes and sums them (quant::reference_allreduce_onestep); W = 2's
                // equal of the two-step in link bytes, with one quantization instead of two.
                // INT6: the INT4 codes exchanged the same way, then every rank does the two-step's step 2
                // itself (re-quantizes its fp32 sums to INT8 and decodes them): the two-step INT6's output
                // bit for bit (quant::reference_allreduce), with 2/3 of its link bytes at W = 2
};
// Kernel of the fused quantized algorithm (kQuantP2P); same output bits either way.
enum class QuantImpl {
  kDefault,    // AllReducerConfig::quant_impl (BRAID_AR_QUANT_IMPL=classic|pipelined overrides it)
  kClassic,    // quant_allreduce_kernel: three stages per block, one flag exchange between stages
  kPipelined   // quant_pipelined_kernel: sub-rounds in flight, a signalling warp, per-sub-round flags
};
const char* algo_name(ArAlgo a);
const char* precision_name(Precision p);
const char* quant_impl_name(QuantImpl i);
// "nccl", "oneshot", "oneshot-ll", "oneshot-ll128", "twoshot", "int8", "int6", "int4", "int8-nccl", "int8-1step", "int6-1step", "int4-1step",
// ... -> (algo, precision).
bool parse_algo(const std::string& s, ArAlgo* algo, Precision* precision);
// The same, plus "int8-pipe" / "int8-classic" (and int6/int4): the fused algorithm with a given kernel
// (*impl = kDefault for every other name).
bool parse_algo(const std::string& s, ArAlgo* algo, Precision* precision, QuantImpl* impl);
// "classic" / "pipelined" (also "pipe") -> impl; false otherwise.
bool parse_quant_impl(const std::string& s, QuantImpl* impl);

struct AllReduceOptions {
  Precision precision = Precision::kExact;  // lossy modes are only ever used when asked for here
  ArAlgo algo = ArAlgo::kAuto;              // kAuto: from the tuning table (tuning/allreduce.tsv)
  int group = 128;                          // quantization group size: 32, 64, 128 or 256
  QuantImpl quant_impl = QuantImpl::kDefault;  // kernel of kQuantP2P (kDefault: the reducer's config)
  bool debug_check_counts = false;          // host check that every rank passed the same count
  // Ablation (`braid bench allreduce --phases`): kQuantNccl enqueues only these phases (QuantPhase bits),
  // so each can be timed alone; the output is meaningless unless every phase runs.
  unsigned quant_phases = ~0u;
};
// The phases of the quantized two-step all-reduce over the NCCL transport.
enum QuantPhase : unsigned {
  kPhaseQuantize = 1,  // stage 1: quantize this rank's input, one chunk per destination
  kPhaseExchange = 2,  // ncclSend/ncclRecv of the stage-1 chunks (all-to-all)
  kPhaseReduce = 4,    // stage 2: dequantize the received chunks, sum, requantize the own chunk
  kPhaseGather = 8,    // ncclAllGather of the requantized chunks
  kPhaseDequant = 16,  // stage 3: dequantize every chunk into the output
};
const char* quant_phase_name(unsigned phase);

struct AllReducerConfig {
  size_t oneshot_max_bytes = size_t(16) << 20;   // largest message the one-shot workspace holds
  size_t ll_max_bytes = size_t(1) << 20;          // largest message of one LL launch (2x on the link)
  int ll_blocks = 132;
  // LL128 one-shot (kOneShotLL128): largest message of one launch (the workspace holds 128/120 of it per
  // peer and phase), grid cap (lowered to what is resident) and the least 128-byte lines per block.
  // Environment: BRAID_AR_LL128_BLOCKS, BRAID_AR_LL128_MIN_LINES.
  size_t ll128_max_bytes = size_t(8) << 20;
  int ll128_blocks = 1 << 16;
  uint64_t ll128_min_lines = 64;
  // Programmatic dependent launch of the exact kernels (one-shot, LL, LL128, two-shot, their symmetric-buffer forms)
  // and of the one-step quantized split kernel: each is launched with
  // cudaLaunchAttributeProgrammaticStreamSerialization, waits for the stream's previous kernel in
  // griddepcontrol.wait before touching memory, and lets the next one launch early (dev::launch_dependents),
  // so back-to-back kernels overlap their launch with the previous kernel's tail. On by default since 2x H200
  // measured it faster at every size (LL128 at 64 KiB: 4.35 -> 3.99 us in graph replays, 5.6 -> 4.8 us back to
  // back; docs/flash-communication.md, sixty-second session); off on GPUs before sm_90. Environment: BRAID_AR_PDL=0
  // turns it off.
  bool pdl = true;
  // The same kernels launched in the remote memory synchronization domain (cudaLaunchMemSyncDomainRemote, as NCCL
  // launches its own): a fence in them does not wait for the default domain's traffic, nor a compute kernel's fence
  // for theirs. Safe for braid's kernels: they meet other kernels of their GPU only across kernel boundaries, their
  // peers at system scope. GPUs with one domain ignore it. Environment: BRAID_AR_REMOTE_DOMAIN.
  bool remote_domain = false;
  size_t piece_elems = size_t(32) << 20;         // elements per launch for two-shot / quantized
  // Grid: at most this many blocks (each owns one signal slot); fewer for small messages, so that a
  // block has at least the given amount of work (vectors of 8 values; quantization groups). Environment
  // overrides for experiments: BRAID_AR_{ONESHOT,TWOSHOT,QUANT,LL}_BLOCKS and
  // BRAID_AR_{ONESHOT,TWOSHOT,LL}_MIN_VECS (positive integers; device item `ar-grid` sweeps them).
  int oneshot_blocks = 264;
  int twoshot_blocks = 528;
  int quant_blocks = 528;
  uint64_t oneshot_min_vecs = 512;
  uint64_t twoshot_min_vecs = 512;
  uint64_t ll_min_vecs = 512;  // LL one-shot (its grid strides, so any value works)
  // run_symmetric's kernels: each block's vectors one contiguous range (false) or pieces dealt round
  // robin over the blocks (true, PyTorch's grid-stride order); the same bits either way. Environment:
  // BRAID_AR_SYMM_LAYOUT=blocked|interleaved. Interleaved is 3-6% faster from 8 MiB on 2x H100 and 2x
  // H200 (one-shot-sym 67.0 vs 69.4 us at 16 MiB, 219 vs 227 at 64 MiB, 820 vs 848 at 256 MiB, H100
  // b6a92a2), within run-to-run noise below.
  bool symm_interleaved = true;
  // run_symmetric's kernels: each thread loads two sources' vectors before adding them (PyTorch's
  // load_and_reduce issues every source's load first) instead of one source at a time; the same bits.
  // Environment: BRAID_AR_SYMM_BATCH=none|oneshot|twoshot|both. On 2x H200 (01854e8) pairing made the
  // one-shot 3-4% faster from 4 MiB (212.5 vs 219.3 us at 64 MiB) and the two-shot 14-20% slower from
  // 32 MiB (255.7 vs 220.5), so by default only the one-shot pairs its loads.
  bool symm_pair_oneshot = true;
  bool symm_pair_twoshot = false;
  // The fused quantized kernel's stage 2 (dequantize + sum the W contributions): two sources' codes
  // and metadata loaded before the first is decoded, or one source at a time; the same bits.
  // Environment: BRAID_AR_QUANT_PAIR=0|1 (2x H200, 16a19b8: INT4 4%, INT8 1.5% faster at 64 MiB paired).
  bool quant_pair_sources = true;
  // The one-step kernels' quantizer (ar::quantize_groups) and 8-value pull (W = 2): the next iteration's
  // loads issued before the current one is processed (two iterations in flight per block), or one at a
  // time; the same codes and bits. Environment: BRAID_AR_QUANT_PREFETCH=0|1. Why: the split kernel's
  // quantizers took ~100 us for 64 MiB (INT8) with one block per SM, against ~45 us for the flat kernel's
  // two per SM (2x H200, eec29f6 phase stamps): the quantizer's rate followed its loads in flight. 2x H200
  // (9d52836, two rounds): INT8 64 MiB 127.4-127.6 vs 136.9-137.2 us without (1.96x vs 1.84x NCCL), INT4
  // 94.2-94.6 vs 111.4-111.5 (2.65x vs 2.25x); 256 MiB 1.77x / 2.41x vs 1.65x / 2.04x; 4 MiB equal. Four
  // iterations in flight by cp.async into shared memory (d881d11, reverted) were slower: 130.6 / 98.5 us
  // against 128.0 / 93.7 in the same call, with no shorter quantizing phase in the stamps.
  bool quant_prefetch = true;
  // The one-step quantized kernel (kQuantOneStep), per code width ([0]: INT8, [1]: INT4).
  // onestep_step_iters: pipelined, each block's work cut into steps of this many iterations (512 threads x
  // 8 values each) with a flag per step, quantizing step k + onestep_lag while it pulls and reduces step k;
  // 0 = not pipelined (every block quantizes all, one barrier, pulls all). onestep_wide_pull: the pull
  // loads 16 bytes of codes per thread (16 INT8 / 32 INT4 values) instead of the quantizer's 8-value
  // mapping (onestep_reduce_unroll: 8-value iterations whose loads are in flight together, 1, 2 or 4). The
  // same bits for every setting. Defaults from 2x H200 (cff08b2, ar-1pipe, 64 MiB, two rounds): INT8
  // pipelined with 8 iterations per step and 16-byte pulls 148.7 us vs 163.0 flat (1.68x vs 1.54x NCCL);
  // INT4 flat with the 8-value pull 122.4-122.9 us (flat 16-byte 124-127, pipelined 124.5-138). Environment
  // (both widths): BRAID_AR_1STEP_ITERS, BRAID_AR_1STEP_LAG, BRAID_AR_1STEP_RU, BRAID_AR_1STEP_WIDE=0|1.
  int onestep_step_iters[2] = {8, 0};
  bool onestep_wide_pull[2] = {true, false};  // also the split kernel's pull
  // onestep_split_iters > 0 (taking precedence over onestep_step_iters): split roles — on each SM one block
  // quantizes and the other pulls (onestep_wide_pull selects its pull), in units of this many iterations
  // (512 threads x 8 values) with a flag per unit, so quantizing and pulling overlap on every SM
  // (ar::quant_onestep_split_kernel), for pieces of at least onestep_split_min_elems elements (smaller
  // ones take the kernels above). The same bits. Environment (both widths): BRAID_AR_1STEP_SPLIT (0: the
  // kernels above), BRAID_AR_1STEP_SPLIT_MIN. Defaults from 2x H100 (cb4bfa1, f60ddc9; 64 MiB, two rounds
  // per call): INT8 with 8 iterations per unit and 16-byte pulls 141.2-141.6 us vs 155.8-157.3 pipelined
  // (1.78x vs 1.60x NCCL; 256 MiB 558 vs 621-624 us; 16 MiB 51.2-51.7 vs 53.1-53.2; 4 MiB 29.1-29.4 vs
  // 23.8-24.2, hence from 4 Mi elements = 8 MiB of bf16, between the two). INT4 with 16 iterations and
  // the 8-value pull 119.3-119.9 vs 121.2-121.4 flat (cb4bfa1: 121.0-121.2 vs 122.3-122.5; 256 MiB 471 vs
  // 476-478), but 52-54 vs 41 us at 16 MiB, hence only from 32 Mi elements (64 MiB of bf16, a full piece).
  int onestep_split_iters[2] = {8, 16};
  // The split kernel's pull with 16 values per thread and the next iteration's loads in flight
  // (ar::pull_sum_vals<V = 16>; W = 2, else the 8-value pull): one 8-byte (INT4) or 16-byte (INT8) code load per
  // source where the 8-value pull makes a 4- or 8-byte one. Takes precedence over onestep_wide_pull in the
  // split kernel. The same bits. Environment (both widths): BRAID_AR_1STEP_PULL16=0|1. Default from 2x H200
  // (04ad5d3, two rounds): INT4 64 MiB 84.7-84.8 us vs 94.4-94.5 with the 8-value pull (2.96-2.98x vs
  // 2.65-2.66x NCCL), 256 MiB 332.4-332.9 vs 371.1-371.4; INT8 slower with it (130.3-130.7 vs 127.1-127.5).
  // 32 values per INT4 thread (one 16-byte code load per source) was measured too and is slower: 64 MiB
  // 92.7 vs 84.1-84.5 us, 256 MiB 360.9 vs 330.0-330.6 (2x H200, f5fc316, nineteenth session); removed.
  bool onestep_pull16[2] = {false, true};
  // Split roles: a puller on every k-th SM only (the others run two quantizers; quantizers pull once the
  // quantizing is taken). 1 = every SM (the measured default). k = 2 is slower (2x H200, c8bd288: 64 MiB
  // INT8 137.5-138.0 vs 127.8-128.1 us, INT4 90.2-90.5 vs 85.0-85.1). Environment (both widths):
  // BRAID_AR_1STEP_SPLIT_PULLERS.
  int onestep_split_puller_every[2] = {1, 1};
  uint64_t onestep_split_min_elems[2] = {uint64_t(4) << 20, uint64_t(32) << 20};
  // Tapered units in the split kernel: each chunk opens and closes with onestep_split_taper units of
  // onestep_split_taper_iters iterations (512 threads x 8 values; smaller than the middle's
  // onestep_split_iters), so the first pulls start sooner and the last units end sooner (ar::SplitUnits).
  // 0 = uniform units. The same bits. Environment (both widths): BRAID_AR_1STEP_TAPER,
  // BRAID_AR_1STEP_TAPER_ITERS. Default from 2x H200 (70022c4, seven settings, two rounds, 64 and 256 MiB):
  // 16 one-iteration units at each end — INT8 64 MiB 124.9 us against 127.1-127.2 uniform, 256 MiB 492.7-492.9
  // against 502.3-502.8; INT4 82.3-82.9 against 84.4-84.5, 324.1-324.9 against 331.5-331.6; INT6 86.5-86.8
  // against 86.9-87.1. The pullers' first wait halves (INT4 median 11 -> 5-6 us), the span moves ~1 us: the
  // call stays bound by the quantizers' pace and the link (docs/flash-communication.md, sixty-first session).
  // Only for pieces of at least onestep_split_taper_min_elems elements (BRAID_AR_1STEP_TAPER_MIN): INT8 at 16 MiB
  // is slower tapered (e1e2c2d, two rounds: 46.8-47.6 us against 45.3-45.5), so the taper starts at a full piece
  // (32 Mi elements, 64 MiB of bf16; 32 MiB not measured).
  int onestep_split_taper[2] = {16, 16};
  int onestep_split_taper_iters[2] = {1, 1};
  uint64_t onestep_split_taper_min_elems[2] = {uint64_t(32) << 20, uint64_t(32) << 20};
  int onestep_lag = 1;
  int onestep_reduce_unroll = 1;
  // run_symmetric's kOneShotCE: bytes per pipelined chunk (a copy-engine transfer per peer, then an add
  // kernel that waits for it), 0 = by size (bytes / 8, between 1 and 16 MiB). Environment:
  // BRAID_AR_CE_CHUNK_BYTES. At most kMaxCeChunks chunks per piece (larger chunks then).
  size_t ce_chunk_bytes = 0;
  // kOneShotCE at W > 2: elements per piece; peers 2..W-1 are staged in a local buffer of
  // (W - 2) x ce_piece_elems elements (rounded up to a multiple of 8), allocated by the first such call
  // (W = 2 stages in `out`).
  size_t ce_piece_elems = size_t(16) << 20;
  uint64_t quant_min_groups = 32;
  int threads = 512;
  // Two-shot: 16-byte vectors per thread per loop iteration (1, 2 or 4; loads issued together before
  // their stores), or 0: 4 for launches of at least 2 Mi elements, else 1 (2x H200: 4 is 5-15% faster
  // from 4 to 16 MiB, equal from 64 MiB, 2-3% slower at 1-2 MiB). Environment: BRAID_AR_TWOSHOT_UNROLL.
  // Bit-identical output for every value.
  int twoshot_unroll = 0;
  // Pipelined quantized kernel (QuantImpl::kPipelined; 288 threads per block, fixed). Default kernel of
  // kQuantP2P; the environment overrides: BRAID_AR_QUANT_IMPL=classic|pipelined, BRAID_AR_PIPE_BLOCKS,
  // BRAID_AR_PIPE_MIN_ROUNDS.
  QuantImpl quant_impl = QuantImpl::kClassic;
  int quant_pipe_blocks = 1024;   // at most (capped by occupancy: every block resident)
  int quant_pipe_min_rounds = 2;  // fewer blocks for small messages, so each has this many sub-rounds
};

struct TuningRow;

class AllReducer {
 public:
  explicit AllReducer(Team& team, AllReducerConfig cfg = {});
  ~AllReducer();
  AllReducer(const AllReducer&) = delete;
  AllReducer& operator=(const AllReducer&) = delete;

  // out may equal in. Pointers 16-byte aligned; dtype bf16 or fp16 (fp32 only through NCCL).
  void run(const void* in, void* out, size_t count, DType dtype, cudaStream_t stream,
           const AllReduceOptions& opt = {});
  // The algorithm run() would use.
  ArAlgo choose(size_t count, DType dtype, const AllReduceOptions& opt) const;

  // All-reduce of buf.local()[offset, offset + count) on a SymmetricBuffer of this reducer's team (every rank allocates
  // it with the same size): the kernels read the peers' copies directly, with no workspace copy —
  // PyTorch symmetric memory's model, for callers that can keep the tensor in such a buffer. Exact,
  // fp32 in rank order: the same bits as run() with the same algorithm.
  //   kTwoShot (and kAuto without `out`): in place, buf.local() receives the sum. Each rank reduces its
  //     1/W chunk from every copy and writes it into every copy.
  //   kOneShot (kAuto with `out`): every rank reads every copy and writes the sum to `out`, a local
  //     buffer that must not overlap buf.
  //   kOneShotCE: as kOneShot, but the copy engines move the peers' copies (cudaMemcpyAsync from the
  //     peer mapping, on a side stream, in chunks) into `out` (W = 2) or a local staging buffer, and an
  //     add kernel per chunk sums them in rank order once its copy has landed: no SM issues a remote
  //     load or store. One barrier kernel before the copies, one after them (on the side stream).
  // Two per-block barriers (signal_device.cuh), no closing device-wide sync; graph-capturable. The
  // kernels share the two-shot's signal slots, so calls on one reducer must be issued in the same order
  // on every rank (as for run()). bf16/fp16; needs peer access (Team::peer_ok()).
  // Measured on 2x H100 (docs/flash-communication.md, eleventh session); kAuto's rule is not tuned.
  // `offset` (elements, a multiple of 8) selects a slice buf.local()[offset, offset + count), the same on
  // every rank (benchmarks rotate over slices of one buffer).
  void run_symmetric(SymmetricBuffer& buf, size_t count, DType dtype, cudaStream_t stream,
                     ArAlgo algo = ArAlgo::kAuto, void* out = nullptr, size_t offset = 0);
  Team& team() const { return team_; }

  // Diagnostic (`braid bench allreduce --phases`): with it on, the one-step quantized kernels write per-block
  // phase stamps of each launch (globaltimer ns: entry, own codes quantized, peers' codes visible, done);
  // onestep_profile() synchronizes the device and returns the last launch's, 4 per block. Off by default
  // (the kernels then take no stamp and no extra __syncthreads).
  void set_onestep_profile(bool on);
  std::vector<uint64_t> onestep_profile() const;

 private:
  void run_oneshot(const void* in, void* out, size_t count, DType dtype, cudaStream_t s);
  void run_oneshot_ll(const void* in, void* out, size_t count, DType dtype, cudaStream_t s);
  void run_oneshot_ll128(const void* in, void* out, size_t count, DType dtype, cudaStream_t s);
  void run_twoshot(const void* in, void* out, size_t count, DType dtype, cudaStream_t s);
  void run_quant_p2p(const void* in, void* out, size_t count, DType dtype, cudaStream_t s, int bits1, int bits2,
                     int group, QuantImpl impl, bool one_step = false);
  void run_quant_nccl(const void* in, void* out, size_t count, DType dtype, cudaStream_t s, int bits1, int bits2,
                      int group, unsigned phases);
  void run_symmetric_ce(SymmetricBuffer& buf, size_t count, DType dtype, cudaStream_t s, uint16_t* out, size_t offset);

  Team& team_;
  AllReducerConfig cfg_;
  std::vector<struct TuningRow> table_;
  // Symmetric workspaces (null without peer access) and local buffers for the NCCL transport.
  std::unique_ptr<SymmetricBuffer> ws_oneshot_, ws_twoshot_, ws_quant_, ws_ll_, ws_ll128_;
  size_t ll_slot_ = 0, ll128_slot_ = 0;
  size_t oneshot_slot_ = 0, twoshot_slot_ = 0, quant_slot_ = 0;
  int slot_oneshot_ = 0, slot_twoshot_ = 0, slot_quant_ = 0;
  int symm_blocks_ = 0;  // grid cap of run_symmetric's kernels (all resident at once)
  // kOneShotCE: the copy-engine side stream, its fork/chunk/join events, the W > 2 staging buffer.
  static constexpr int kMaxCeChunks = 32;
  cudaStream_t ce_stream_ = nullptr;
  std::vector<cudaEvent_t> ce_events_;  // [0] fork, [1 .. kMaxCeChunks] chunks, [kMaxCeChunks + 1] join
  void* ce_stage_ = nullptr;
  // launch sequence per algorithm, (count, blocks done): one-shot, two-shot, quantized, LL, LL128
  uint32_t* seq_ = nullptr;
  uint64_t* prof_ = nullptr;  // one-step phase stamps [4 x blocks] (set_onestep_profile), else null
  // The split one-step kernel's role/ticket counters (local) and per-unit flags (symmetric), zeroed.
  uint32_t* split_ctl_ = nullptr;
  std::unique_ptr<SymmetricBuffer> ws_split_;
  int prof_blocks_ = 0;       // blocks of the last profiled launch
  void* nccl_send_ = nullptr;
  void* nccl_recv_ = nullptr;
  void* nccl_ag_ = nullptr;
  size_t nccl_slot_ = 0;
};

// The built-in tuning table (tuning/allreduce.tsv, embedded at build time): "world dtype precision
// max_bytes algo" per line.
const char* builtin_allreduce_table();

// One row of a tuning table ('*' fields are stored as world 0 / "*").
struct TuningRow {
  int world;
  std::string dtype, precision;
  size_t max_bytes;
  ArAlgo algo;
};
// Parses a tuning table; throws UsageError on an unknown algorithm.
std::vector<TuningRow> parse_tuning_table(const std::string& text);
// The first row matching (world, dtype, precision) with bytes <= max_bytes, or kAuto if none.
ArAlgo pick_from_table(const std::vector<TuningRow>& table, int world, DType dtype, Precision precision, size_t bytes);

}  // namespace braid
