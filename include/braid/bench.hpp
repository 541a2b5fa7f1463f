// braid/bench.hpp — the benchmark harness every braid benchmark uses.
//
// Discipline: inputs are random (never zeros), outputs are verified before anything is timed, each
// iteration is timed with its own pair of CUDA events after a warm-up, buffers rotate when one set
// would fit in L2, and the reported time is the median over iterations of the slowest rank.
// Results are printed as an nccl-tests style table and written as JSON lines (schema: docs/results.md).
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace braid {
class Team;
}

namespace braid::bench {

// "64K" -> 65536, "1G" -> 2^30, "512" -> 512 (K/M/G are powers of 1024). Throws UsageError.
size_t parse_size(const std::string& s);
// 65536 -> "64K", 1536 -> "1.5K".
std::string format_size(size_t bytes);
// "a,b,,c" -> {"a", "b", "c"}: a comma-separated option value, empty items dropped.
std::vector<std::string> split_list(const std::string& s);

enum class DType { kBF16, kFP16, kFP32 };
size_t dtype_size(DType t);
const char* dtype_name(DType t);
DType parse_dtype(const std::string& s);
ncclDataType_t nccl_dtype(DType t);

struct Stats {
  double median_us = 0, p10_us = 0, p90_us = 0, mean_us = 0, min_us = 0;
  int iters = 0;
};
// Order statistics of a sample (nearest-rank percentiles).
Stats summarize(std::vector<double> us);
// time_interleaved's samples of one fn split back into its passes: `rounds` consecutive equal chunks (its
// per-pass iteration count), the median of each. Throws UsageError unless us.size() is a positive multiple of rounds.
std::vector<double> round_medians(const std::vector<double>& us, int rounds);
// Per pass r, the fraction of the reference's exposed time (ref[r] - base[r]) that variant v removes:
// 1 - max(0, v[r] - base[r]) / (ref[r] - base[r]); NaN where the reference exposes nothing. All three are
// round_medians of the same interleaved timing, so each pass compares runs made side by side.
std::vector<double> hidden_by_round(const std::vector<double>& v, const std::vector<double>& ref,
                                    const std::vector<double>& base);

// Element counts per rank of one collective call at a sweep point of `bytes` (nccl-tests convention: `bytes` is the
// larger of the per-rank send and receive buffers; the element count is rounded down to a multiple of `world`).
// op: allreduce | reducescatter | allgather | alltoall (alltoall: in / world elements to each rank). UsageError else.
struct CollectiveCounts {
  size_t in, out;
};
CollectiveCounts collective_counts(const std::string& op, size_t bytes, size_t esize, int world);

// nccl-tests bus-bandwidth factor: allreduce 2(n-1)/n; reducescatter, allgather, alltoall (n-1)/n.
double busbw_factor(const std::string& op, int world);

struct TimingOptions {
  int warmup = 10;
  int iters = 50;
  // Before the timed iterations the stream idles this long on the GPU (a bounded spin on the global
  // timer), so the host queues the first timed calls ahead of the GPU: times are GPU times, not host
  // launch latency, for braid and for the baselines alike (bench/peers/ scripts do the same). 0: off.
  int lead_us = 2000;
  // Calls per timed iteration (direct launches): 1 puts two events around every call; B > 1 puts them around
  // B back-to-back calls and reports the interval / B — nccl-tests' method (no event between calls, so no
  // drain-and-relaunch between them). The host must queue the B x iters calls within lead_us, or the later
  // batches time the host's launch rate (benches report the host's enqueue time per call beside).
  int batch = 1;
};
// Enqueues fn(i) on `stream` `warmup` times, then (after opt.lead_us of GPU idle) `iters` times, each
// iteration between two CUDA events (with opt.batch = B > 1, each iteration is B calls fn(warmup + B i + j),
// j < B, between the two events, and its entry is the interval / B). Returns per-iteration microseconds; when
// `team` is given, each entry is the maximum over its ranks (an iteration is as slow as its slowest rank).
// Synchronises with the team's bounded wait.
std::vector<double> time_iterations(Team* team, cudaStream_t stream, const TimingOptions& opt,
                                    const std::function<void(int)>& fn);
// The host side of timed calls: wrap(fn) returns fn with each call's host time (the issuing thread's time in it:
// launch APIs, library host work, host waits) added to total_us and counted in calls. The returned function
// refers to this clock, which must outlive it.
struct HostClock {
  double total_us = 0;
  int calls = 0;
  double per_call_us() const { return calls > 0 ? total_us / calls : 0; }
  std::function<void(int)> wrap(std::function<void(int)> fn);
};

// Several variants compared with each other: `rounds` passes, each pass timing every fn in turn for
// about iters / rounds iterations (warm-up `opt.warmup` in the first pass, 2 in later ones), so that
// clock or thermal drift during the run hits every variant alike instead of the last ones timed. The
// order of pass r is interleave_order(n, r): no fn is always first after the barrier that opens a pass,
// and no fn always runs right after the same other one (a hot predecessor, e.g. a two-stream
// decomposition, would otherwise slow the same variant in every pass).
// Returns, per fn, its per-iteration microseconds over all passes (slowest rank per iteration).
std::vector<std::vector<double>> time_interleaved(Team* team, cudaStream_t stream, const TimingOptions& opt,
                                                  int rounds, const std::vector<std::function<void(int)>>& fns);
// The order of pass r over n variants: it starts at r mod n and ascends (even r) or descends (odd r),
// wrapping around. Deterministic (every rank runs the same order).
std::vector<size_t> interleave_order(size_t n, int r);

// The ops' tune() (FlashOverlap, T3): times candidates the way they run in a step — `batch` calls back to
// back per measurement (µs per call between two CUDA events) — in `reps` interleaved rounds (A, B, B, A,
// A, B, ...: rotated, so drift and position hit every candidate alike), after one warm-up call each;
// `check(i)` runs after every synchronisation that follows candidate i (an op's check_error). Returns
// per candidate the slowest rank's median (the maximum over ranks of each rank's median: the same numbers on every rank, so every
// rank decides alike). Each measurement starts after a host barrier and a `lead_us` idle kernel (as time_iterations'
// lead), so the batch is queued before the GPU runs it: the medians are GPU times, as in a step whose host runs
// ahead. Collective and synchronous.
std::vector<double> tune_medians(Team& team, cudaStream_t stream, int reps, int batch,
                                 const std::vector<std::function<void()>>& cands,
                                 const std::function<void(size_t)>& check, int lead_us = 2000);

// Enqueues on `stream` a one-thread kernel that idles `us` microseconds of GPU time (bounded): work enqueued after it
// is queued before the GPU reaches it, so its timing excludes host launch latency.
void gpu_idle(cudaStream_t stream, int us);

// Median of time_iterations (the slowest rank per iteration) on the team's stream.
double median_us(Team& team, const TimingOptions& opt, const std::function<void(int)>& fn);

// The GPU's SM clock, board power and clock-event reasons over a window of host time, sampled by a host thread
// through NVML (libnvidia-ml.so.1, loaded at run time: nothing links against it, and without it — CI, containers
// without the driver's library — available() is false and every window is empty). It only reads: clocks, power
// limits and modes are never set. What it answers: whether a run's kernels ran at the same clock as another's (a
// serial pass against its operators' solo times, docs/dhelix.md), and whether the board capped it.
struct ClockSample {
  double sm_mhz = 0;       // nvmlDeviceGetClockInfo(NVML_CLOCK_SM)
  double power_w = 0;      // nvmlDeviceGetPowerUsage; < 0 where unsupported
  uint64_t reasons = 0;    // nvmlDeviceGetCurrentClocksEventReasons (throttle reasons), bit mask below
};
struct ClockSummary {
  int samples = 0;
  double mean_mhz = 0, min_mhz = 0, max_mhz = 0;
  double mean_w = -1;      // -1: no power readings
  double power_capped = 0; // fraction of samples with a software power cap or a hardware power brake
  double thermal = 0;      // fraction with a software or hardware thermal slowdown
  double idle = 0;         // fraction with the GPU-idle reason
  // "1702 MHz (1650-1980), 640 W, power-capped 83%, thermal 0%, idle 2%, 412 samples"; "no samples" when empty.
  std::string str() const;
};
// The reason bits (NVML's nvmlClocksEventReason* values) the summary counts.
inline constexpr uint64_t kClockReasonIdle = 0x1, kClockReasonSwPowerCap = 0x4, kClockReasonHwSlowdown = 0x8,
                          kClockReasonSwThermal = 0x20, kClockReasonHwThermal = 0x40, kClockReasonHwPowerBrake = 0x80;
ClockSummary summarize_clocks(const std::vector<ClockSample>& samples);

class GpuClockSampler {
 public:
  // cuda_device: the CUDA ordinal whose GPU is sampled (found in NVML by its PCI bus id). period_us >= 100.
  explicit GpuClockSampler(int cuda_device, int period_us = 1000);
  ~GpuClockSampler();
  GpuClockSampler(const GpuClockSampler&) = delete;
  GpuClockSampler& operator=(const GpuClockSampler&) = delete;
  bool available() const { return dev_ != nullptr; }
  void start();          // opens a window (the sampling thread runs until stop)
  ClockSummary stop();   // closes it: the window's samples summarized (empty when unavailable or not started)

 private:
  void* dev_ = nullptr;  // nvmlDevice_t
  int period_us_;
  struct Window;
  std::unique_ptr<Window> w_;
};

// Device memory in use on the current device (cudaMemGetInfo: total - free), bytes.
double device_used_bytes();

// A 52-bit hash of the bits of device buffers, computed on the device (for bit-for-bit comparisons of large
// results without copying them to the host): the sum mod 2^64 of splitmix64(buffer, word index, 32-bit word) over
// every word of every buffer (a last partial word zero-padded), so it depends on every bit and on where it is, and
// not on the order the GPU sums in. Returned as an exactly representable double, never 0. Stream-ordered on
// `stream`, then synchronizes it.
double device_hash52(const std::vector<std::pair<const void*, size_t>>& buffers, cudaStream_t stream);
inline double device_hash52(const void* p, size_t bytes, cudaStream_t stream) {
  return device_hash52({{p, bytes}}, stream);
}

// A device allocation owned for one benchmark case (at least 16 bytes, so empty shapes stay valid).
struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

// The same with the `calls` calls enqueue(0..calls-1) captured once into a CUDA graph: each iteration
// replays the graph, and the per-call time (replay / calls) is returned. No host launch cost is timed.
std::vector<double> time_graph_iterations(Team* team, cudaStream_t stream, const TimingOptions& opt, int calls,
                                          const std::function<void(int)>& enqueue);

// GEMM shapes for the fused GEMM+collective benchmarks: "M,N,K" on the command line, or a file with
// one "M,N,K" per line ('#' comments, blanks ignored). Throw UsageError on a malformed entry.
struct GemmShape {
  int64_t m, n, k;
};
GemmShape parse_gemm_shape(const std::string& s);
std::vector<GemmShape> read_gemm_shapes(const std::string& path);
// Handles `--shape M,N,K` and `--shapes FILE` for the GEMM benches: appends to `shapes` and returns true
// when `key` is one of them (`value` fetches the option's argument).
bool parse_shape_option(const std::string& key, const std::function<std::string()>& value,
                        std::vector<GemmShape>& shapes);
// Calls on(key, value) for each of argv[1..argc-1] in turn; value() consumes the next argument and returns it
// (UsageError "KEY needs a value" past the end). A bench's option loop.
using OptionValue = std::function<std::string()>;
void for_each_option(int argc, char** argv, const std::function<void(const std::string&, const OptionValue&)>& on);
// The same plus the options every GEMM bench shares: --json FILE, --iters N, --warmup N.
bool parse_gemm_bench_option(const std::string& key, const std::function<std::string()>& value,
                             std::vector<GemmShape>& shapes, std::string& json, TimingOptions& timing);

// Number of buffer sets to rotate so that `bytes_per_set` * sets spans at least twice the L2 cache.
int rotation_sets(size_t bytes_per_set, size_t max_total_bytes = size_t(8) << 30);

// Copies of a case's two inputs, enough sets to span twice the L2 (rotation_sets, at most 16 GiB); set
// 0 is the caller's buffers, the others are device copies made on `s`, so every set gives the verified
// result. Timed iteration i uses set i % sets().
class InputSets {
 public:
  InputSets(void* a, size_t a_bytes, void* b, size_t b_bytes, cudaStream_t s);
  const void* a(int i) const { return a_[size_t(i) % a_.size()]; }
  const void* b(int i) const { return b_[size_t(i) % b_.size()]; }
  int sets() const { return int(a_.size()); }

 private:
  std::vector<void*> a_, b_;
  std::vector<std::unique_ptr<DeviceBuffer>> own_;
};

// Device-side deterministic random data. value(i, rank, seed) is a half-integer in [-15.5, 15.5]: sums
// of up to 8 ranks are exact in bf16/fp16/fp32, so collectives are verified bit for bit.
void fill_pattern(void* dst, DType t, size_t count, uint64_t seed, int rank, size_t offset, cudaStream_t s);
// Counts elements of `out` that differ from the expected result of op on rank `rank` of `world`, where
// every rank's input was fill_pattern(count_in, seed, its rank, 0). `count_out` elements are checked.
// op: allreduce | reducescatter | allgather | alltoall.
size_t count_wrong(const std::string& op, const void* out, DType t, size_t count_out, uint64_t seed, int rank,
                   int world, cudaStream_t s);

// Run context written into every JSON row.
struct Context {
  std::string card;     // e.g. "NVIDIA H100 80GB HBM3"
  std::string date;     // ISO 8601 UTC
  std::string commit;   // BRAID_COMMIT at build time
  std::string command;  // the command line
  std::string env;      // the run's BRAID_* / NCCL_* settings (run_environment), e.g. "BRAID_T3_COLUMN_ORDER=1"
  int world = 1;
};
Context make_context(int argc, char** argv, int world);
// The environment variables that change what a run measures, as "NAME=VALUE NAME=VALUE", sorted: every
// BRAID_* and NCCL_* entry of `envp` (a NULL-terminated environ-style array) except the bookkeeping ones
// (BRAID_COMMIT, which has its own field, the watchdogs' BRAID_DEADLINE_S / BRAID_TEST_DEADLINE_S, BRAID_OFFLINE).
std::string run_environment(const char* const* envp);
// Short folder name for results, e.g. "h100x2".
std::string card_tag(const std::string& card, int world);

// An ordered JSON object (one result row). Values are formatted at insertion.
class Json {
 public:
  Json& add(const std::string& k, const std::string& v);
  Json& add(const std::string& k, const char* v) { return add(k, std::string(v)); }
  Json& add(const std::string& k, double v);
  Json& add(const std::string& k, int64_t v);
  Json& add(const std::string& k, int v) { return add(k, static_cast<int64_t>(v)); }
  Json& add(const std::string& k, size_t v) { return add(k, static_cast<int64_t>(v)); }
  Json& add(const std::string& k, bool v);
  Json& add_raw(const std::string& k, const std::string& json);
  Json& add_context(const Context& c);
  std::string str() const;

 private:
  std::vector<std::pair<std::string, std::string>> kv_;
};
std::string json_escape(const std::string& s);
// Appends one line to `path` ("" writes nothing, "-" writes to stdout).
void append_jsonl(const std::string& path, const std::string& line);

}  // namespace braid::bench

namespace braid::bench {

// `braid bench nccl`: nccl-tests style sweep of one NCCL collective.
struct NcclBenchArgs {
  std::string op = "allreduce";  // allreduce | reducescatter | allgather | alltoall
  size_t min_bytes = 64 << 10, max_bytes = size_t(1) << 30;
  double factor = 2;
  DType dtype = DType::kBF16;
  TimingOptions timing;
  bool graph = false;            // time replays of a CUDA graph of the op instead of direct launches
  std::string json;              // JSON-lines output path ("" none, "-" stdout)
  Context ctx;
};
// Prints the table on rank 0; returns the number of wrong elements summed over sizes and ranks.
size_t run_nccl_bench(Team& team, const NcclBenchArgs& a);

// `braid bench p2p`: rank 0 -> rank 1 bandwidth by copy engine, SM push (remote stores) and SM pull
// (remote loads) for several block counts. Verified by comparing the copied bytes.
struct P2pBenchArgs {
  size_t bytes = size_t(256) << 20;
  std::vector<int> blocks = {8, 16, 32, 66, 132};
  bool bidir = false;  // both ranks of a pair move data at once (each direction carries `bytes`)
  // > 1: the copy engine also moves `bytes` as this many back-to-back copies, alone, each followed by a
  // cuStreamWriteValue32 to the peer (copy-engine-flag), and each after an event from a kernel on a second
  // stream (copy-engine-event): what a pipelined copy-engine transport pays per copy.
  int chunks = 1;
  TimingOptions timing{5, 20};
  std::string json;
  Context ctx;
};
size_t run_p2p_bench(Team& team, const P2pBenchArgs& a);

}  // namespace braid::bench

namespace braid::bench {

// `braid bench allreduce`: braid's all-reduce algorithms against NCCL in the same run.
struct AllReduceBenchArgs {
  std::vector<std::string> algos = {"nccl", "oneshot-ll", "oneshot", "twoshot", "int8", "int6", "int4"};
  bool graph = false;           // time replays of a CUDA graph of `sets` calls (no host launch cost)
  size_t min_bytes = 64 << 10, max_bytes = size_t(1) << 30;
  double factor = 2;
  DType dtype = DType::kBF16;
  std::string dist = "normal";  // quantized modes' inputs: normal | student-t | outlier
  int group = 128;
  TimingOptions timing;
  std::string json;
  std::string write_table;      // write the fastest exact algorithm per size as a tuning table
  bool phases = false;          // --phases: also time each phase of the *-nccl quantized modes alone
  Context ctx;
};
// Returns the number of rows that failed verification.
int run_allreduce_bench(Team& team, const AllReduceBenchArgs& a);

}  // namespace braid::bench
