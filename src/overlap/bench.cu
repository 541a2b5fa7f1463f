// bench.cu — `braid bench gemm-rs | gemm-ar`: FlashOverlap against GEMM alone (cuBLAS, braid), the
// collective alone, cuBLAS+NCCL in sequence and decomposition, with the correctness verdict first.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "braid/bench.hpp"
#include "braid/env.hpp"
#include "braid/errors.hpp"
#include "braid/overlap.hpp"
#include "braid/overlap/verify.hpp"
#include "braid/runtime.hpp"

namespace braid::overlap {
namespace {

using Shape = bench::GemmShape;

std::vector<int64_t> parse_ints(const std::string& s, char sep) {
  std::vector<int64_t> v;
  std::stringstream ss(s);
  std::string tok;
  while (std::getline(ss, tok, sep))
    if (!tok.empty()) {
      try {
        v.push_back(std::stoll(tok));
      } catch (...) {
        throw UsageError("bad number '" + tok + "' in '" + s + "'", __FILE__, __LINE__);
      }
    }
  return v;
}

struct Args {
  Collective coll = Collective::kReduceScatter;
  std::vector<Shape> shapes;
  std::string json, cache, measure;
  std::vector<int> groups;
  int reserve_sms = 16;
  // --reserve-sms-ce N: the copy-engine transports' ops leave N SMs free instead (their transfers need none;
  // at 0 its GEMM takes every SM and the per-group sums wait for the GEMM's end). -1: --reserve-sms.
  int reserve_sms_ce = -1;
  // --reserve-fit: every FlashOverlap op lowers its reserve to one that costs its GEMM no wave
  // (OverlapOptions::reserve_fit; JSON reserve_fit, reserve_sms: the reserve used).
  bool reserve_fit = false;
  int chunks = 4;
  // --transport kernels|copy-engine|symmetric|both|all: FlashOverlap over NCCL's kernels (always), and also
  // over its copy engines (copy-engine, both) and/or its symmetric-memory kernels (symmetric, all)
  // (docs/flashoverlap.md)
  std::vector<Transport> extra;
  TileConfig tile = TileConfig::kAuto;
  bench::TimingOptions timing{5, 20};
  // --tune (with --measure): after the search, GemmOverlap::tune() times the chosen partition against the
  // fallback's work and keeps the faster (the overlap only when <= 0.99x); --no-tune: the search alone.
  bool tune = true;
  // --tune-candidates K (with --measure, K > 1): instead of timing the search's one choice, time up to K
  // candidate partitions (overlap::candidate_partitions) against the fallback's work and keep the fastest
  // if it is <= 0.99x the fallback (a measured choice; the predictor only proposes). JSON: cand_*_<t>.
  int tune_candidates = 1;
  // --pce-reserves R0,R1,... (with --measure): the peer copy-engine transport's op is measured, searched and
  // tuned at each of these SM reserves (SMs its GEMM leaves free for the sums; 0: the GEMM on every SM, the
  // sums after it), and the reserve whose timed choice measured the lowest ratio to the fallback's work
  // wins (its op is the one verified and timed). Empty: the one reserve the op was made with.
  std::vector<int> pce_reserves;
  // --pce-pull-last: the peer copy-engine op pulls its last group (OverlapOptions::peer_pull_last).
  bool pce_pull_last = false;
  // --pce-stores: the peer copy-engine op's parts stored by the GEMM's epilogue into the owners' receive buffers,
  // no copy engine (OverlapOptions::peer_stores; reduce-scatter). Same as --pce-modes stores.
  bool pce_stores = false;
  // --pce-modes copies,stores (with --measure; reduce-scatter): the peer op is measured, searched and tuned in
  // each mode at each --pce-reserves value, and the lowest measured ratio to the fallback's work wins, as for
  // the reserves. Empty: the mode --pce-stores names.
  std::vector<bool> pce_modes;
  // --pce-bulk: with stores, the remote parts by bulk copies (OverlapOptions::peer_stores_bulk).
  bool pce_bulk = false;
  // --owner (with the peer copy-engine transport): also the owner-ordered reduce-scatter (OwnerOrderedRs: one GEMM
  // launch per owner block, peers' blocks first, pushes by copy engines; gemm-ar: its all-reduce form, each reduced
  // block then pushed to every peer) with cuBLAS's and braid's GEMM, verified and timed; per shape the fastest of
  // {the peer op as decided, the owner-ordered ops}, by a separate timing before the compared rounds, is the row's
  // `pick`.
  bool owner = false;
  // --owner-phases: with --owner, each owner-ordered op also run 20 times with its phase stamps
  // (OwnerOrderedRs::set_profile), eager, each run after a barrier and a 500-us GPU lead; the median time of each
  // phase boundary from the op's start is printed (rank 0 and the slowest rank) and written as `owner_phases_*`.
  bool owner_phases = false;
  // --owner-chunks 1,4: the owner-ordered ops made with cuBLAS at each of these chunk counts (OwnerOrderedRs
  // chunks: each peer block's GEMM in that many launches, each pushed when done), with braid's GEMM at the first;
  // default 1.
  std::vector<int> owner_chunks{1};
  bool owner_chunks_given = false;
  // --auto [--picks FILE]: also the library's entry point, AutoGemmComm — made per shape, tune()d on the row's inputs
  // (reduce-scatter: its flashoverlap candidate with the peer op's options and partition where the row has one),
  // verified (reduce-scatter through original_row(); all-reduce every row) and timed in the compared rounds (`auto_*`
  // in the JSON). --picks: the picks are read from and written back to FILE (PickCache).
  bool auto_rs = false;
  // --no-auto-t3: AutoGemmComm without T3's candidates (AutoOptions::try_t3 = false; the earlier sessions' rows).
  bool auto_t3 = true;
  // --auto-t3 NAMES: T3's candidates (comma-separated t3 variant names, e.g. t3-ring-cublas,t3-ring-dma,t3-direct-tma;
  // AutoOptions::t3_variants; empty: its default two).
  std::vector<t3::Variant> auto_t3_variants;
  bool auto_pull = true;  // GemmPullRs among AutoGemmComm's candidates (AutoOptions::try_pull); --no-auto-pull: not
  std::string picks;
  // --probe-pce: instead of the benchmark, the peer copy-engine transport's per-call costs by size (probe_pce).
  bool probe_pce = false;
};

Args parse(int argc, char** argv) {
  Args a;
  BRAID_REQUIRE(argc >= 1, "bench_main: argv[0] must be gemm-rs or gemm-ar");
  const std::string what = argv[0];
  if (what == "gemm-rs") a.coll = Collective::kReduceScatter;
  else if (what == "gemm-ar") a.coll = Collective::kAllReduce;
  else throw UsageError("bench_main: unknown target '" + what + "' (gemm-rs, gemm-ar)", __FILE__, __LINE__);
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) throw UsageError(k + " needs a value", __FILE__, __LINE__);
      return argv[++i];
    };
    if (bench::parse_shape_option(k, val, a.shapes)) {
    } else if (k == "--json") a.json = val();
    else if (k == "--cache") a.cache = val();
    else if (k == "--measure") a.measure = val();
    else if (k == "--tune") a.tune = true;
    else if (k == "--no-tune") a.tune = false;
    else if (k == "--reserve-fit") a.reserve_fit = true;
    else if (k == "--groups") {
      for (auto w : parse_ints(val(), ',')) a.groups.push_back(static_cast<int>(w));
    } else if (k == "--reserve-sms") a.reserve_sms = std::stoi(val());
    else if (k == "--reserve-sms-ce") a.reserve_sms_ce = std::stoi(val());
    else if (k == "--tune-candidates") a.tune_candidates = std::max(1, std::stoi(val()));
    else if (k == "--chunks") a.chunks = std::stoi(val());
    else if (k == "--probe-pce") a.probe_pce = true;
    else if (k == "--pce-pull-last") a.pce_pull_last = true;
    else if (k == "--pce-stores") a.pce_stores = true;
    else if (k == "--pce-bulk") a.pce_bulk = true;
    else if (k == "--owner") a.owner = true;
    else if (k == "--owner-phases") a.owner_phases = true;
    else if (k == "--auto") a.auto_rs = true;
    else if (k == "--no-auto-t3") a.auto_t3 = false;
    else if (k == "--auto-t3") {
      a.auto_t3_variants.clear();
      std::stringstream ss(val());
      for (std::string name; std::getline(ss, name, ',');) {
        const GemmCommPick pick = parse_pick(name);  // the same names as a cached pick's (throws on others)
        if (pick.schedule != GemmCommPick::Schedule::kT3)
          throw UsageError("--auto-t3: '" + name + "' is not a T3 variant (t3-ring, t3-ring-dma, t3-ring-cublas, "
                           "t3-direct, t3-direct-tma)", __FILE__, __LINE__);
        a.auto_t3_variants.push_back(pick.t3_variant);
      }
    }
    else if (k == "--pull") a.auto_pull = true;  // the default since the thirty-second session; kept for old commands
    else if (k == "--no-auto-pull") a.auto_pull = false;
    else if (k == "--picks") a.picks = val();
    else if (k == "--owner-chunks") {
      a.owner_chunks_given = true;
      a.owner_chunks.clear();
      for (auto c : parse_ints(val(), ','))
        if (c >= 1 && std::find(a.owner_chunks.begin(), a.owner_chunks.end(), int(c)) == a.owner_chunks.end())
          a.owner_chunks.push_back(static_cast<int>(c));
      if (a.owner_chunks.empty()) throw UsageError("--owner-chunks: counts >= 1", __FILE__, __LINE__);
    }
    else if (k == "--pce-modes") {
      a.pce_modes.clear();
      std::stringstream ss(val());
      for (std::string m; std::getline(ss, m, ',');) {
        if (m != "copies" && m != "stores") throw UsageError("--pce-modes: copies and/or stores", __FILE__, __LINE__);
        if (std::find(a.pce_modes.begin(), a.pce_modes.end(), m == "stores") == a.pce_modes.end())
          a.pce_modes.push_back(m == "stores");
      }
    }
    else if (k == "--pce-reserves") {
      a.pce_reserves.clear();
      for (auto r : parse_ints(val(), ',')) {
        if (r < 0 || r > 1024) throw UsageError("--pce-reserves: SM counts >= 0", __FILE__, __LINE__);
        if (std::find(a.pce_reserves.begin(), a.pce_reserves.end(), int(r)) == a.pce_reserves.end())
          a.pce_reserves.push_back(static_cast<int>(r));
      }
    }
    else if (k == "--transport") {
      // The kernel transport always runs (it is the FlashOverlap row); the others are added beside it.
      // A comma-separated list of names (each once, in the order given; peer-copy-engine only on request).
      a.extra.clear();
      auto add = [&](Transport x) {
        if (std::find(a.extra.begin(), a.extra.end(), x) == a.extra.end()) a.extra.push_back(x);
      };
      std::stringstream ts(val());
      for (std::string t; std::getline(ts, t, ',');) {
        if (t == "copy-engine" || t == "both" || t == "all") add(Transport::kNcclCopyEngine);
        if (t == "symmetric" || t == "all") add(Transport::kNcclSymmetric);
        if (t == "peer-copy-engine") add(Transport::kPeerCopyEngine);
        if (t != "kernels" && t != "copy-engine" && t != "both" && t != "all" && t != "symmetric" &&
            t != "peer-copy-engine")
          throw UsageError("--transport: a comma-separated list of kernels, copy-engine, symmetric, both (kernels + "
                           "copy-engine), all (the three NCCL transports), peer-copy-engine",
                           __FILE__, __LINE__);
      }
    }
    else if (k == "--iters") a.timing.iters = std::stoi(val());
    else if (k == "--warmup") a.timing.warmup = std::stoi(val());
    else if (k == "--tile") {
      const std::string t = val();
      if (t == "128x256") a.tile = TileConfig::k128x256;
      else if (t == "128x128") a.tile = TileConfig::k128x128;
      else if (t == "auto") a.tile = TileConfig::kAuto;
      else throw UsageError("--tile: 128x256, 128x128 or auto", __FILE__, __LINE__);
    } else throw UsageError("unknown option '" + k + "' for bench " + what, __FILE__, __LINE__);
  }
  if (a.shapes.empty()) throw UsageError("bench " + what + ": give --shape M,N,K or --shapes FILE", __FILE__, __LINE__);
  if (a.owner_phases && !a.owner) throw UsageError("--owner-phases needs --owner", __FILE__, __LINE__);
  return a;
}

using DevBuf = bench::DeviceBuffer;

// "t3-ring-cublas,t3-ring-dma": the JSON's record of AutoGemmComm's T3 candidates.
std::string t3_names(const std::vector<t3::Variant>& vs) {
  std::string s;
  for (const t3::Variant v : vs) s += (s.empty() ? "" : ",") + std::string(t3::variant_name(v));
  return s;
}
using bench::median_us;

// RMSNorm of one row (fp64) into out.
void host_rmsnorm(const uint16_t* x, const std::vector<uint16_t>& gamma, int64_t n, float eps, double* out) {
  double ss = 0;
  for (int64_t c = 0; c < n; ++c) {
    const double v = bf16_to_float(x[c]);
    ss += v * v;
  }
  const double inv = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
  for (int64_t c = 0; c < n; ++c) out[c] = bf16_to_float(x[c]) * inv * bf16_to_float(gamma[c]);
}

// The buffers the measurement's collectives run between: plain cudaMalloc'd ones (NCCL's ring kernels) or
// symmetric windows (its symmetric-memory kernels: Transport::kNcclSymmetric). `in` is M*N bf16, `out`
// M*N/world; `other`/`other_out` the same sizes, for the collective run beside the GEMM; `seq_in`/`seq_out`
// plain buffers for the sequential time (cuBLAS + NCCL in sequence: what the fallback runs, any transport).
struct MeasureBuffers {
  void *in, *out, *other, *other_out, *seq_in, *seq_out;
};

// BRAID_OVERLAP_CE_TAIL=0: --measure times the copy-engine reduce-scatter's transfer and sum as one curve
// (the model before the tail; for A/B runs), although run() issues the sums off the chain either way.
bool ce_tail_model() { return env::flag("BRAID_OVERLAP_CE_TAIL").value_or(true); }

// Measures the inputs of the predictive search for this shape (NCCL latency curve over the sizes a
// group can have, GEMM time per wave with the SMs left to NCCL).
MeasuredInputs measure_inputs(Team& team, const Args& a, const Shape& sh, GemmOverlap& op, CublasGemm& cublas,
                              const void* A, const void* B, const MeasureBuffers& buf) {
  void* scratch_in = buf.in;
  void* scratch_out = buf.out;
  MeasuredInputs mi;
  mi.coll = a.coll;
  mi.world = team.size();
  mi.m = sh.m, mi.n = sh.n, mi.k = sh.k;
  mi.tile_config = static_cast<int>(op.options().tile);
  const TileGrid& g = op.mapping().grid;
  mi.sm_count = g.ctas;
  SignalGemm gemm(op.options().tile, op.gemm().sm_count());
  EpilogueArgs e;
  e.d = scratch_in;
  const double t_gemm =
      median_us(team, a.timing, [&](int) { gemm.run(A, B, sh.m, sh.n, sh.k, e, team.stream()); });
  mi.in.comm_stretch = default_comm_stretch(op.options().transport);  // the calibration (not stored in the file)
  mi.in.waves = g.num_waves();
  mi.in.wave_us = t_gemm / g.num_waves();
  mi.in.bytes_per_wave = double(g.ctas) * g.bm * g.bn * 2;
  const int last = g.num_tiles() - (g.num_waves() - 1) * g.ctas;
  mi.in.last_wave_fraction = double(last) / g.ctas;
  const double full = double(sh.m) * sh.n * 2;
  // The copy-engine transport's collective is the op's own (NCCL's copy-engine all-to-all between its
  // windows, then braid's reduction on the SMs left free): measured through the op. The others are NCCL's
  // collective over the given buffers (plain memory: ring kernels; windows: symmetric kernels).
  // Where the op issues part of each group's collective off the chain (the copy-engine reduce-scatter's
  // sums), the curve is the transfer alone and the tail curve the sum alone, at the same sizes.
  // (The peer copy-engine transport likewise: its pushes, then its sum.)
  const bool ce = op.options().transport == Transport::kNcclCopyEngine ||
                  op.options().transport == Transport::kPeerCopyEngine;
  const bool split = ce && op.has_tail() && ce_tail_model();
  // With the GEMM on every SM (reserve 0) the persistent GEMM leaves no SM to a group's sum until it exits.
  mi.in.tail_after_gemm = split && op.options().reserve_sms == 0;
  using Part = GemmOverlap::Part;
  // The peer copy-engine transport's standalone call starts with its flag reset and start barrier, which
  // run() pays once per run, not per group: timed alone, taken out of every point of the curve and charged
  // once — as the communication chain's earliest start where run() meets beside the GEMM
  // (SearchInputs::comm_start_us), else before the first wave (first_wave_extra_us).
  // BRAID_OVERLAP_PEER_SETUP=0: kept in the curve (the twenty-second session's first measurements; A/B runs).
  static const bool setup_split = env::flag("BRAID_OVERLAP_PEER_SETUP").value_or(true);
  double t_setup = 0;
  if (op.options().transport == Transport::kPeerCopyEngine && setup_split) {
    t_setup = median_us(team, a.timing, [&](int) { op.transport_collective(size_t(team.size()) * 8, scratch_out,
                                                                           team.stream(), Part::kSetup); });
    if (op.peer_barrier_beside_gemm()) mi.in.comm_start_us = t_setup;
    else mi.in.first_wave_extra_us += t_setup;
  }
  for (double b = mi.in.bytes_per_wave / 2; b < 2 * full; b *= 2) {
    const double bb = std::min(b, full);
    size_t count = static_cast<size_t>(bb / 2);
    count -= count % (size_t(team.size()) * 8);
    if (split) {
      mi.in.tail.bytes.push_back(double(count) * 2);
      mi.in.tail.us.push_back(
          median_us(team, a.timing, [&](int) { op.transport_collective(count, scratch_out, team.stream(), Part::kTail); }));
    }
    const double t = median_us(team, a.timing, [&](int) {
      if (ce)
        op.transport_collective(count, scratch_out, team.stream(), split ? Part::kTransfer : Part::kWhole);
      else if (a.coll == Collective::kReduceScatter)
        BRAID_NCCL_CHECK(ncclReduceScatter(scratch_in, scratch_out, count / team.size(), ncclBfloat16, ncclSum,
                                           team.nccl(), team.stream()));
      else
        BRAID_NCCL_CHECK(ncclAllReduce(scratch_in, scratch_in, count, ncclBfloat16, ncclSum, team.nccl(), team.stream()));
    });
    mi.in.comm.bytes.push_back(double(count) * 2);
    mi.in.comm.us.push_back(std::max(1.0, t - t_setup));
    if (bb >= full) break;
  }
  // Contention: the GEMM (reserved SMs) and the whole collective started together with no dependency
  // (the collective on its own buffer, a second stream); rho as defined in SearchInputs.
  const size_t mn = size_t(sh.m) * sh.n, W = size_t(team.size());
  cudaStream_t s2 = nullptr;
  cudaEvent_t fork = nullptr, join = nullptr;
  BRAID_CUDA_CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  BRAID_CUDA_CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  BRAID_CUDA_CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  auto collective = [&](void* in, void* out, cudaStream_t st) {  // NCCL's (the sequential baseline's)
    if (a.coll == Collective::kReduceScatter)
      BRAID_NCCL_CHECK(ncclReduceScatter(in, out, mn / W, ncclBfloat16, ncclSum, team.nccl(), st));
    else
      BRAID_NCCL_CHECK(ncclAllReduce(in, in, mn, ncclBfloat16, ncclSum, team.nccl(), st));
  };
  const double t_coll = split ? median_us(team, a.timing, [&](int) { op.transport_collective(mn, scratch_out, team.stream()); })
                              : mi.in.comm.us.back();
  // Where run() resets the peer flags and meets before the GEMM (it leaves no SM free: the flag reset's
  // memset could not start beside the persistent GEMM until a CTA exits), the setup goes first here too
  // and is taken out of both times, as it is out of the curve (charged once, first_wave_extra_us). Issued
  // beside the GEMM instead, the setup waited for the GEMM's last wave and the pushes with it, so rho read
  // 0.5-0.9 where the op overlaps (2x H200, e362de6: predictor median error 14% on half the sweep).
  const bool setup_first = op.options().transport == Transport::kPeerCopyEngine && setup_split &&
                           !op.peer_barrier_beside_gemm();
  const double t_both = median_us(team, a.timing, [&](int) {
    if (setup_first) op.transport_collective(mn, buf.other_out, team.stream(), Part::kSetup);
    BRAID_CUDA_CHECK(cudaEventRecord(fork, team.stream()));
    BRAID_CUDA_CHECK(cudaStreamWaitEvent(s2, fork, 0));
    gemm.run(A, B, sh.m, sh.n, sh.k, e, team.stream());
    if (ce)  // the op's windows; the GEMM writes buf.in
      op.transport_collective(mn, buf.other_out, s2, setup_first ? Part::kAfterSetup : Part::kWhole);
    else
      collective(buf.other, buf.other_out, s2);
    BRAID_CUDA_CHECK(cudaEventRecord(join, s2));
    BRAID_CUDA_CHECK(cudaStreamWaitEvent(team.stream(), join, 0));
  });
  const double setup_out = setup_first ? t_setup : 0.0;
  const double tb = t_both - setup_out, tc = std::max(1.0, t_coll - setup_out);
  mi.in.interference = std::max(0.0, (tb - std::max(t_gemm, tc)) / std::max(1e-9, std::min(t_gemm, tc)));
  mi.in.sequential_us = median_us(team, a.timing, [&](int) {
    cublas.run(A, B, buf.seq_in, sh.m, sh.n, sh.k, team.stream());
    collective(buf.seq_in, buf.seq_out, team.stream());
  });
  BRAID_CUDA_CHECK(cudaStreamSynchronize(s2));
  cudaEventDestroy(fork);
  cudaEventDestroy(join);
  cudaStreamDestroy(s2);
  return mi;
}

}  // namespace

// --probe-pce: where the peer copy-engine transport's per-call time goes, by size, with no GEMM (its
// transfer curve has a floor of ~20 us beside ~5 us of bytes at 3.8 MB on 2x H200, docs/flashoverlap.md).
// Per shape, that shape's op (its output bounds the sizes), sizes from 256 KiB to the whole output by 2x,
// each timed alone (median, slowest rank): the setup (flag reset and start barrier), the setup and the copies
// (no flags), the setup, copies, flags and waits for the peers' flags (kTransfer, the curve's point before
// the setup is taken out), and the sum alone (kTail). Rows `bench: pce-probe`.
int probe_pce(Team& team, const Args& a, const bench::Context& ctx) {
  const int W = team.size(), rank = team.rank();
  cudaStream_t s = team.stream();
  if (!team.peer_ok()) {
    if (rank == 0) std::printf("# --probe-pce: not run (%s)\n", team.peer_status().c_str());
    return 0;
  }
  using Part = GemmOverlap::Part;
  if (rank == 0)
    std::printf("# peer copy-engine transport per call, %d ranks, median of %d (slowest rank), us; bytes = the group's "
                "output (each rank sends (W-1)/W of it)\n%10s %8s %8s %9s %8s | %8s %9s %9s\n",
                W, a.timing.iters, "bytes", "setup", "copies", "transfer", "sum", "copies-s", "flags", "GB/s/peer");
  for (const Shape& sh : a.shapes) {
    OverlapOptions oo;
    oo.coll = a.coll;
    oo.m = sh.m, oo.n = sh.n, oo.k = sh.k;
    oo.tile = a.tile;
    oo.reserve_sms = a.reserve_sms_ce >= 0 ? a.reserve_sms_ce : a.reserve_sms;
    oo.reserve_fit = a.reserve_fit;
    oo.transport = Transport::kPeerCopyEngine;
    GemmOverlap op(team, oo);
    const size_t mn = size_t(sh.m) * sh.n;
    DevBuf out(mn * 2 / W);
    fill_uniform_bf16(op.reordered(), mn, 4000 + rank, 1.f, s);
    auto time = [&](size_t count, Part part) {
      return median_us(team, a.timing, [&](int) { op.transport_collective(count, out.p, s, part); });
    };
    for (double b = 256.0 * 1024; ; b *= 2) {
      size_t count = static_cast<size_t>(std::min(b, double(mn) * 2) / 2);
      count -= count % (size_t(W) * 8);
      const double setup = time(count, Part::kSetup), copies = time(count, Part::kCopies),
                   transfer = time(count, Part::kTransfer), sum = time(count, Part::kTail);
      op.check_error();
      const double per_peer = double(count) * 2 / W;  // bytes this rank copies to each peer
      const double gbs = copies > setup ? per_peer / ((copies - setup) * 1e3) : 0;
      if (rank == 0) {
        std::printf("%10zu %8.1f %8.1f %9.1f %8.1f | %8.1f %9.1f %9.1f\n", count * 2, setup, copies, transfer, sum,
                    copies - setup, transfer - copies, gbs);
        if (!a.json.empty()) {
          bench::Json j;
          j.add("bench", "pce-probe").add("m", sh.m).add("n", sh.n).add("k", sh.k).add("world", W)
              .add("bytes", double(count) * 2).add("setup_us", setup).add("copies_us", copies)
              .add("transfer_us", transfer).add("sum_us", sum).add("copy_gbs_per_peer", gbs)
              .add("reserve_sms", oo.reserve_sms).add_context(ctx);
          bench::append_jsonl(a.json, j.str());
        }
      }
      if (double(count) * 2 >= double(mn) * 2 - double(W) * 16) break;
    }
    std::fflush(stdout);
  }
  return 0;
}

// "owner-cublas", "owner-braid", with "-c<chunks>" past one chunk: the bench's name of an owner-ordered op.
static std::string owner_name(const OwnerOrderedRs& o) {
  return pick_name(GemmCommPick{GemmCommPick::Schedule::kOwnerOrdered, o.gemm(), o.chunks()});
}

int bench_main(Team& team, int argc, char** argv, const bench::Context& ctx) {
  const Args a = parse(argc, argv);
  if (a.probe_pce) return probe_pce(team, a, ctx);
  const int W = team.size(), rank = team.rank();
  cudaStream_t s = team.stream();
  DecisionCache cache;
  DecisionCache cache_sym, cache_ce, cache_pce;  // --measure: the other transports' decisions (every shape's)
  if (!a.cache.empty()) {
    cache.load(a.cache);
    cache_sym.load(a.cache + ".symmetric");
    cache_ce.load(a.cache + ".copy-engine");
    cache_pce.load(a.cache + ".peer-copy-engine");
  }
  PickCache picks;  // --auto: AutoGemmComm's picks (--picks FILE: read here, written after every shape)
  if (!a.picks.empty()) picks.load(a.picks);
  int failures = 0;
  const char* op_name = a.coll == Collective::kReduceScatter ? "gemm-rs" : "gemm-ar";
  if (rank == 0) {
    std::printf("# braid bench %s: %d ranks, bf16 in/out, fp32 accumulate; A (M,K) row-major, B (N,K) row-major\n",
                op_name, W);
    std::printf("# times: median of %d iterations (slowest rank), microseconds\n", a.timing.iters);
  }
  // The other transports need NCCL >= 2.28 and one node with peer access (the zero-CTA communicator's
  // requirements are the same as the symmetric windows').
  // braid's own copy-engine transport needs peer access (and, in GemmOverlap, the stream memory operations).
  std::vector<Transport> extra;
  bool nccl_extra = false;
  for (Transport t : a.extra) nccl_extra = nccl_extra || t != Transport::kPeerCopyEngine;
  if (nccl_extra) {
    try {
      team.nccl_zero_cta();
      for (Transport t : a.extra)
        if (t != Transport::kPeerCopyEngine) extra.push_back(t);
    } catch (const UnavailableError& e) {
      if (rank == 0) std::printf("# FlashOverlap over other NCCL transports: not run (%s)\n", e.what());
    }
  }
  if (std::find(a.extra.begin(), a.extra.end(), Transport::kPeerCopyEngine) != a.extra.end()) {
    if (team.peer_ok()) extra.push_back(Transport::kPeerCopyEngine);
    else if (rank == 0)
      std::printf("# FlashOverlap over braid's peer copy engines: not run (%s)\n", team.peer_status().c_str());
  }
  // JSON key of a transport's fields: flashoverlap_<key>_us, speedup_<key>, ...
  auto key_of = [](Transport t) {
    return t == Transport::kNcclCopyEngine ? std::string("ce")
           : t == Transport::kPeerCopyEngine ? std::string("pce")
                                             : std::string("sym");
  };
  for (const Shape& sh : a.shapes) {
    const size_t mn = size_t(sh.m) * sh.n;
    DevBuf A(size_t(sh.m) * sh.k * 2), B(size_t(sh.n) * sh.k * 2), D(mn * 2), Dref(mn * 2), out(mn * 2 / W),
        gamma(size_t(sh.n) * 2), y(mn * 2);
    fill_uniform_bf16(A.p, size_t(sh.m) * sh.k, 1000 + rank, 1.f, s);
    fill_uniform_bf16(B.p, size_t(sh.n) * sh.k, 2000 + rank, 1.f, s);
    fill_uniform_bf16(gamma.p, sh.n, 3000, 1.f, s);

    OverlapOptions oo;
    oo.coll = a.coll;
    oo.m = sh.m, oo.n = sh.n, oo.k = sh.k;
    oo.tile = a.tile;
    oo.reserve_sms = a.reserve_sms;
    oo.reserve_fit = a.reserve_fit;
    oo.group_waves = a.groups;
    oo.cache = a.cache.empty() ? nullptr : &cache;
    GemmOverlap op(team, oo);
    // The same op over the other transports, same partition; each writes its reduce-scatter into `out`
    // or, over symmetric windows, into its own output window.
    struct Other {
      Transport t;
      std::unique_ptr<GemmOverlap> op;
      void* out = nullptr;
      size_t wrong = 0, wrong_norm = 0;
      double eager_us = 0, graph_us = 0;
    };
    std::vector<Other> others;
    for (const Transport t : extra) {
      OverlapOptions oc = oo;
      oc.transport = t;
      oc.group_waves = op.mapping().group_waves;
      const bool copy_engines = t == Transport::kNcclCopyEngine || t == Transport::kPeerCopyEngine;
      if (copy_engines && a.reserve_sms_ce >= 0 && a.reserve_sms_ce != a.reserve_sms) {
        // Another SM count, other waves: the --groups given (cut or extended to its waves), else its default.
        oc.reserve_sms = a.reserve_sms_ce;
        oc.group_waves = a.groups;
      }
      oc.cache = nullptr;
      oc.tile = op.options().tile;
      oc.peer_pull_last = t == Transport::kPeerCopyEngine && a.pce_pull_last;
      oc.peer_stores = t == Transport::kPeerCopyEngine && a.coll == Collective::kReduceScatter &&
                       (a.pce_modes.empty() ? a.pce_stores : bool(a.pce_modes[0]));
      oc.peer_stores_bulk = a.pce_bulk;
      Other o{t, std::make_unique<GemmOverlap>(team, oc)};
      o.out = o.op->output() ? o.op->output() : out.p;
      others.push_back(std::move(o));
    }
    CublasGemm cublas;
    SignalGemm braid_full(op.options().tile, 0);
    // braid's other tile configuration on all SMs, where the shape allows it: the op picks its tile for wave
    // grouping (128x128 below ~2 waves of 128x256), not for the plain GEMM's speed; rows report both
    // (`braid_gemm_other_*`, `braid_best_vs_cublas`), the overlapped ops keep theirs.
    const TileConfig other_tile =
        op.options().tile == TileConfig::k128x256 ? TileConfig::k128x128 : TileConfig::k128x256;
    std::unique_ptr<SignalGemm> braid_other = std::make_unique<SignalGemm>(other_tile, 0);
    try {
      (void)braid_other->plan(sh.m, sh.n, sh.k);  // the GEMM's own shape rules
    } catch (const UsageError&) {
      braid_other.reset();  // the shape does not tile at that configuration: no second row
    }

    // cuBLAS + NCCL in sequence between symmetric windows (NCCL's symmetric-memory kernels): what a user
    // who registers windows would run without FlashOverlap, so the fair baseline of the symmetric transport.
    Other* sym = nullptr;
    for (auto& o : others)
      if (o.t == Transport::kNcclSymmetric) sym = &o;
    std::unique_ptr<NcclWindow> sym_d, sym_out;
    if (sym) {
      sym_d = std::make_unique<NcclWindow>(team.nccl(), mn * 2);
      sym_out = std::make_unique<NcclWindow>(team.nccl(), mn * 2 / W);
    }

    // --measure: the search's inputs measured on this node per transport (the collective's latency curve,
    // its contention with the GEMM, the sequential time, all over that transport's buffers), the search,
    // and its decision applied to that transport's op (partition, or the sequential fallback).
    std::string searched, searched_sym, searched_ce, searched_pce;
    // --tune-candidates: per transport, what the timed choice among candidates measured.
    struct CandidateTuning {
      int count = 0;
      double best_us = 0, best_predicted_us = 0, sequential_us = 0;
      double reference_us = 0;  // what best_us was held against (see the decision below)
      std::vector<int> best_groups;
    };
    std::map<Transport, CandidateTuning> tuned_by_candidates;
    Other *ce = nullptr, *pce = nullptr;
    for (auto& o : others) {
      if (o.t == Transport::kNcclCopyEngine) ce = &o;
      if (o.t == Transport::kPeerCopyEngine) pce = &o;
    }
    // --pce-reserves / --pce-modes: the ratio (timed choice / fallback's work, 1 for the fallback) each
    // (reserve, mode) measured.
    struct PceVariant {
      int reserve;
      bool stores;
      double ratio;
    };
    std::vector<PceVariant> pce_reserve_ratios;
    if (!a.measure.empty()) {
      // One op's inputs measured (appended to `path`), its search, its timed choice applied to it. The
      // decision goes to a cache by commit() (the caller picks among several ops of one transport first).
      struct Decided {
        std::string predicted;
        CachedDecision d;
        bool has_ct = false;
        CandidateTuning ct;
        double ratio = 1;  // measured: the kept choice over the fallback's work (1: the fallback)
      };
      auto measure_and_decide = [&](GemmOverlap& o, const MeasureBuffers& mb, const std::string& path) {
        const MeasuredInputs mi = measure_inputs(team, a, sh, o, cublas, A.p, B.p, mb);
        if (rank == 0) save_inputs(path, {mi});
        SearchResult r = search_partition(mi.in);
        void* o_out = o.output() ? o.output() : out.p;
        const TileGrid& og = o.mapping().grid;
        const bool tiled = int64_t(og.tiles_m) * og.bm == sh.m && int64_t(og.tiles_n) * og.bn == sh.n;  // tune()'s
        Decided res;
        if (a.groups.empty() && a.tune && a.tune_candidates > 1 && og.num_waves() > 1 && tiled) {
          // A timed choice among the predictor's candidates (each against the fallback's work, interleaved).
          CandidateTuning ct;
          const auto cands = candidate_partitions(mi.in, 8, a.tune_candidates);
          std::vector<double> seqs;
          double best = std::numeric_limits<double>::infinity();
          size_t bi = 0;
          for (size_t i = 0; i < cands.size(); ++i) {
            o.set_partition(cands[i]);
            o.tune(A.p, B.p, o_out, s, 5, std::numeric_limits<double>::infinity());  // times, never falls back
            seqs.push_back(o.tuned_sequential_us());
            if (o.tuned_overlap_us() < best) best = o.tuned_overlap_us(), bi = i;
          }
          ct.count = static_cast<int>(cands.size());
          if (!seqs.empty()) {
            std::nth_element(seqs.begin(), seqs.begin() + seqs.size() / 2, seqs.end());
            ct.sequential_us = seqs[seqs.size() / 2];
            ct.best_us = best;
            ct.best_predicted_us = predict_contended_us(mi.in, cands[bi]);
            ct.best_groups = cands[bi];
          }
          // The fallback's reference: the lower of tune()'s measurement and the inputs' (cuBLAS + NCCL timed per
          // call after a lead, as the rows are). On 2x H200 (757c1f8) tune()'s batched fallback measured 2-17%
          // above the rows' sequential time on every shape (8-17% at the ~50-80 us ones), while its overlap
          // matched the rows', so a short op could pass 0.99x and run 0.93-0.95x in its row (docs/flashoverlap.md).
          // BRAID_OVERLAP_TUNE_REF=tuned: tune()'s alone (the 757c1f8 rule, for A/B runs).
          static const bool tuned_ref_only =
              env::choice("BRAID_OVERLAP_TUNE_REF", {"min", "tuned"}).value_or("min") == "tuned";
          const double ref = tuned_ref_only || mi.in.sequential_us <= 0 ? ct.sequential_us
                                                                        : std::min(ct.sequential_us, mi.in.sequential_us);
          ct.reference_us = ref;
          if (!seqs.empty() && best <= 0.99 * ref) {
            o.set_partition(cands[bi]);
            r.sequential = false, r.group_waves = cands[bi], r.predicted_us = ct.best_predicted_us;
            res.ratio = best / ref;
          } else {
            o.set_sequential(true);
            r.sequential = true, r.group_waves = {o.mapping().grid.num_waves()}, r.predicted_us = mi.in.sequential_us;
          }
          res.has_ct = true, res.ct = ct;
        } else if (a.groups.empty()) {
          if (r.sequential) o.set_sequential(true);
          else o.set_partition(r.group_waves);
          // The search's overlap checked by timing it against the fallback (GemmOverlap::tune).
          if (!r.sequential && a.tune) o.tune(A.p, B.p, o_out, s);
          if (!o.sequential())
            res.ratio = o.tuned_sequential_us() > 0 ? o.tuned_overlap_us() / o.tuned_sequential_us()
                                                    : r.predicted_us / std::max(1e-9, mi.in.sequential_us);
        }
        CachedDecision& d = res.d;
        d.coll = a.coll, d.world = W, d.m = sh.m, d.n = sh.n, d.k = sh.k;
        d.tile_config = mi.tile_config, d.sm_count = mi.sm_count, d.group_waves = r.group_waves;
        d.predicted_us = r.predicted_us;
        d.sequential = o.sequential();
        res.predicted = std::to_string(r.predicted_us);
        return res;
      };
      auto commit = [&](const Decided& res, Transport t, DecisionCache& dc, const std::string& cache_path) {
        if (res.has_ct) tuned_by_candidates[t] = res.ct;
        dc.put(res.d);
        if (rank == 0 && !cache_path.empty()) dc.save(cache_path);
        return res.predicted;
      };
      {
        DevBuf other(mn * 2), other_out(mn * 2 / W);
        searched = commit(measure_and_decide(op, {D.p, out.p, other.p, other_out.p, D.p, out.p}, a.measure),
                          Transport::kNcclKernels, cache, a.cache);
      }
      if (sym) {  // inputs and decisions of the symmetric transport beside the others' files, suffixed
        NcclWindow other(team.nccl(), mn * 2), other_out(team.nccl(), mn * 2 / W);
        searched_sym = commit(measure_and_decide(*sym->op, {sym_d->get(), sym_out->get(), other.get(), other_out.get(), D.p,
                                                            out.p},
                                                 a.measure + ".symmetric"),
                              sym->t, cache_sym, a.cache.empty() ? std::string() : a.cache + ".symmetric");
      }
      if (ce) {  // the copy-engine transport's own collective (the op's windows), GEMM output elsewhere
        DevBuf gemm_out(mn * 2), coll_out(mn * 2 / W), other_out(mn * 2 / W);
        searched_ce = commit(measure_and_decide(*ce->op, {gemm_out.p, coll_out.p, nullptr, other_out.p, D.p, out.p},
                                                a.measure + ".copy-engine"),
                             ce->t, cache_ce, a.cache.empty() ? std::string() : a.cache + ".copy-engine");
      }
      if (pce) {  // braid's peer copy-engine transport: its own pushes and sum, as for NCCL's copy engines
        DevBuf gemm_out(mn * 2), coll_out(mn * 2 / W), other_out(mn * 2 / W);
        const MeasureBuffers mb{gemm_out.p, coll_out.p, nullptr, other_out.p, D.p, out.p};
        std::vector<int> reserves = a.pce_reserves;
        if (reserves.empty()) reserves.push_back(pce->op->options().reserve_sms);
        std::vector<bool> modes = a.pce_modes;  // OverlapOptions::peer_stores per variant
        if (modes.empty() || a.coll != Collective::kReduceScatter) modes = {pce->op->options().peer_stores};
        // Each (reserve, mode) op measured and decided in turn (the one made above for its own); the lowest
        // measured ratio wins, ties to the earlier one. Every rank compares the same (slowest-rank) numbers.
        Decided best;
        std::unique_ptr<GemmOverlap> winner;  // null: the op made above won
        bool have = false;
        for (const int r : reserves)
          for (const bool st : modes) {
            std::unique_ptr<GemmOverlap> made;
            GemmOverlap* o = pce->op.get();
            if (r != o->options().reserve_sms || st != o->options().peer_stores) {
              OverlapOptions oc = pce->op->options();
              oc.reserve_sms = r;
              oc.peer_stores = st;
              oc.group_waves.clear();
              oc.sequential = false;
              made = std::make_unique<GemmOverlap>(team, oc);
              o = made.get();
            }
            Decided res = measure_and_decide(*o, mb, a.measure + (st ? ".peer-stores" : ".peer-copy-engine"));
            pce_reserve_ratios.push_back({r, st, res.ratio});
            if (!have || res.ratio < best.ratio) {
              best = res, have = true;
              winner = std::move(made);
            }
          }
        if (winner) {
          pce->op = std::move(winner);
          pce->out = pce->op->output() ? pce->op->output() : out.p;
        }
        searched_pce = commit(best, pce->t, cache_pce, a.cache.empty() ? std::string() : a.cache + ".peer-copy-engine");
      }
    }

    // ---------------- correctness (before any timing) ----------------
    const float eps = 1e-6f;
    const double rtol = kGemmRtol;
    size_t wrong_gemm = 0, wrong_fo = 0, wrong_dec = 0, wrong_norm = 0;
    {
      // GEMM alone: braid (normal layout) vs cuBLAS, local.
      cublas.run(A.p, B.p, Dref.p, sh.m, sh.n, sh.k, s);
      EpilogueArgs e;
      e.d = D.p;
      braid_full.run(A.p, B.p, sh.m, sh.n, sh.k, e, s);
      team.synchronize(s, "gemm check");
      auto ref = download_bf16(Dref.p, mn), got = download_bf16(D.p, mn);
      wrong_gemm = count_mismatch(ref, got, [](int64_t i) { return i; }, gemm_atol(sh.k, 1), rtol);
      if (braid_other) {  // counted with the GEMM's own mismatches (the row's "braid gemm" count)
        BRAID_CUDA_CHECK(cudaMemsetAsync(D.p, 0, size_t(mn) * 2, s));
        braid_other->run(A.p, B.p, sh.m, sh.n, sh.k, e, s);
        team.synchronize(s, "gemm check (other tile)");
        got = download_bf16(D.p, mn);
        wrong_gemm += count_mismatch(ref, got, [](int64_t i) { return i; }, gemm_atol(sh.k, 1), rtol);
      }
    }
    // Reference for the reduced outputs: float32 sum over ranks of cuBLAS's D (in Dref now) and the sum of
    // magnitudes (sum_tolerance: the bound follows the partial sums a bf16 reduction rounds).
    const SumRef exact = sum_reference(team, Dref.p, size_t(mn), s);
    const double satol = sum_atol(sh.k);
    const auto same = [](int64_t i) { return i; };
    // cuBLAS + NCCL all-reduce of the whole D (every rank gets the full matrix): the RMSNorm check's input.
    run_sequential(team, cublas, Collective::kAllReduce, A.p, B.p, Dref.p, nullptr, sh.m, sh.n, sh.k, s);
    team.synchronize(s, "reference");
    const auto ref = download_bf16(Dref.p, mn);
    const Mapping& map = op.mapping();
    auto check_fo = [&](GemmOverlap& op, void* outp, size_t& wrong_fo, size_t& wrong_norm) {
      const Mapping& map = op.mapping();
      op.run(A.p, B.p, outp, s);
      team.synchronize(s, "flashoverlap check");
      op.check_error();
      if (a.coll == Collective::kAllReduce) {
        auto got = download_bf16(op.reordered(), mn);
        wrong_fo = count_mismatch(exact, same, mn, got,
                                  [&](int64_t i) { return reordered_index(map, i / sh.n, i % sh.n); }, W, satol);
      } else {
        auto got = download_bf16(outp, mn / W);
        wrong_fo = count_mismatch(
            exact, [&](int64_t i) { return rs_original_row(map, rank, i / sh.n) * sh.n + i % sh.n; }, mn / W, got,
            [&](int64_t i) { return scattered_index(map, rs_original_row(map, rank, i / sh.n), i % sh.n); }, W, satol);
      }
      // Consumer: RMSNorm through the mapping.
      const void* x = a.coll == Collective::kAllReduce ? op.reordered() : outp;
      op.rmsnorm(x, gamma.p, y.p, eps, s);
      team.synchronize(s, "rmsnorm check");
      const int64_t rows = a.coll == Collective::kAllReduce ? sh.m : sh.m / W;
      auto yh = download_bf16(y.p, size_t(rows) * sh.n);
      auto gh = download_bf16(gamma.p, sh.n);
      std::vector<double> row(sh.n);
      for (int64_t j = 0; j < rows; ++j) {
        const int64_t orow = a.coll == Collective::kAllReduce ? j : rs_original_row(map, rank, j);
        host_rmsnorm(ref.data() + orow * sh.n, gh, sh.n, eps, row.data());
        for (int64_t c = 0; c < sh.n; ++c) {
          const double v = bf16_to_float(yh[j * sh.n + c]);
          if (!(std::fabs(v - row[c]) <= 0.05 + 0.02 * std::fabs(row[c]))) ++wrong_norm;
        }
      }
    };
    check_fo(op, out.p, wrong_fo, wrong_norm);
    for (auto& o : others) check_fo(*o.op, o.out, o.wrong, o.wrong_norm);
    size_t wrong_seq_sym = 0;  // cuBLAS + NCCL between symmetric windows, normal layout
    if (sym) {
      run_sequential(team, cublas, a.coll, A.p, B.p, sym_d->get(), sym_out->get(), sh.m, sh.n, sh.k, s);
      team.synchronize(s, "sequential over symmetric windows check");
      if (a.coll == Collective::kAllReduce)
        wrong_seq_sym = count_mismatch(exact, same, mn, download_bf16(sym_d->get(), mn), same, W, satol);
      else
        wrong_seq_sym = count_mismatch(
            exact, [&](int64_t i) { return int64_t(rank) * int64_t(mn / W) + i; }, mn / W,
            download_bf16(sym_out->get(), mn / W), same, W, satol);
    }
    Decomposition dec(team, a.chunks);
    {
      dec.run(cublas, a.coll, A.p, B.p, D.p, out.p, sh.m, sh.n, sh.k, s);
      team.synchronize(s, "decomposition check");
      if (a.coll == Collective::kAllReduce) {
        wrong_dec = count_mismatch(exact, same, mn, download_bf16(D.p, mn), same, W, satol);
      } else {
        const int64_t R = sh.m / a.chunks, Rw = R / W;
        const auto ref_index = [&](int64_t i) {  // local row j = chunk * Rw + q is original row chunk*R + rank*Rw + q
          const int64_t j = i / sh.n, chunk = j / Rw, q = j % Rw;
          return (chunk * R + int64_t(rank) * Rw + q) * sh.n + i % sh.n;
        };
        wrong_dec = count_mismatch(exact, ref_index, mn / W, download_bf16(out.p, mn / W), same, W, satol);
      }
    }
    // --owner: the owner-ordered reduce-scatters (NCCL's output layout: rows [rank * M/W, ...) of the sum).
    std::vector<std::unique_ptr<OwnerOrderedRs>> owners;
    std::vector<size_t> wrong_owner;
    // gemm-ar: the owner-ordered all-reduce (all_reduce: the reduce-scatter, then each reduced block pushed to every
    // peer), into its own result() (no copy).
    const bool owner_ar = a.coll == Collective::kAllReduce;
    auto owner_out = [&](OwnerOrderedRs& ow) { return owner_ar ? ow.result() : out.p; };
    if (a.owner && pce) {
      for (const int c : a.owner_chunks) {
        if ((sh.m / W) % c != 0) continue;
        owners.push_back(std::make_unique<OwnerOrderedRs>(team, sh.m, sh.n, sh.k, OwnerGemm::kCublas, c, owner_ar));
        // braid's GEMM at the first chunk count only (128x256 tiles in 2x1 clusters per launch)
        if (c == a.owner_chunks.front() && (sh.m / W / c) % 256 == 0 && sh.n % 256 == 0)
          owners.push_back(std::make_unique<OwnerOrderedRs>(team, sh.m, sh.n, sh.k, OwnerGemm::kBraid, c, owner_ar));
      }
      for (auto& ow : owners) {
        ow->run(A.p, B.p, owner_out(*ow), s);
        team.synchronize(s, "owner-ordered op check");
        if (owner_ar)
          wrong_owner.push_back(count_mismatch(exact, same, mn, download_bf16(ow->result(), mn), same, W, satol));
        else
          wrong_owner.push_back(count_mismatch(
              exact, [&](int64_t i) { return int64_t(rank) * int64_t(mn / W) + i; }, mn / W,
              download_bf16(out.p, mn / W), same, W, satol));
      }
    }
    // --auto: the library's entry point (AutoGemmComm), tuned on these inputs, then checked through original_row()
    // (all-reduce: every row, into a buffer of its own).
    std::unique_ptr<AutoGemmComm> autop;
    std::unique_ptr<DevBuf> auto_buf;
    void* auto_dst = out.p;
    if (a.auto_rs) {
      AutoOptions ao;
      ao.coll = a.coll;
      if (a.coll == Collective::kAllReduce) {
        auto_buf = std::make_unique<DevBuf>(mn * 2);
        auto_dst = auto_buf->p;
      }
      if (a.owner_chunks_given) ao.owner_chunks = a.owner_chunks;
      ao.try_t3 = a.auto_t3;
      if (!a.auto_t3_variants.empty()) ao.t3_variants = a.auto_t3_variants;
      ao.try_pull = a.auto_pull;
      if (pce && a.coll == Collective::kReduceScatter) {  // the flashoverlap candidate as the row's peer op was decided
        ao.flash = pce->op->options();
        ao.flash.cache = nullptr;
        ao.flash.sequential = false;
        ao.flash.group_waves = pce->op->mapping().group_waves;
        ao.try_flash = !pce->op->sequential();
      }
      ao.picks = &picks;
      autop = std::make_unique<AutoGemmComm>(team, sh.m, sh.n, sh.k, ao);
      autop->tune(A.p, B.p, auto_dst, s);
      if (void* o = autop->output()) auto_dst = o;  // an owner-ordered all-reduce's, T3 ring-cublas's result: no copy
      autop->run(A.p, B.p, auto_dst, s);
      team.synchronize(s, "AutoGemmComm check");
      const size_t elems = a.coll == Collective::kAllReduce ? mn : mn / W;
      wrong_owner.push_back(count_mismatch(
          exact, [&](int64_t i) { return autop->original_row(i / sh.n) * sh.n + i % sh.n; }, elems,
          download_bf16(auto_dst, elems), same, W, satol));
      if (!a.picks.empty() && rank == 0) picks.save(a.picks);
    }
    std::vector<double> wv{double(wrong_gemm), double(wrong_fo), double(wrong_dec), double(wrong_norm)};
    for (const auto& o : others) wv.push_back(double(o.wrong)), wv.push_back(double(o.wrong_norm));
    if (sym) wv.push_back(double(wrong_seq_sym));
    for (const size_t w : wrong_owner) wv.push_back(double(w));
    const std::vector<double> wr = team.allreduce_max(wv);
    const bool ok = std::all_of(wr.begin(), wr.end(), [](double w) { return w == 0; });
    if (!ok) ++failures;
    if (rank == 0) {
      std::string more;
      for (size_t i = 0; i < others.size(); ++i)
        more += ", flashoverlap over " + std::string(transport_name(others[i].t)) + " " +
                std::to_string(long(wr[4 + 2 * i])) + " / rmsnorm " + std::to_string(long(wr[5 + 2 * i]));
      if (sym) more += ", cuBLAS + NCCL over symmetric windows " + std::to_string(long(wr[4 + 2 * others.size()]));
      for (size_t i = 0; i < owners.size(); ++i)
        more += ", " + owner_name(*owners[i]) + " " + std::to_string(long(wr[4 + 2 * others.size() + (sym ? 1 : 0) + i]));
      if (autop)
        more += ", auto (" + pick_name(autop->pick()) + ") " +
                std::to_string(long(wr[4 + 2 * others.size() + (sym ? 1 : 0) + owners.size()]));
      std::printf("%lld,%lld,%lld: %s (wrong, worst rank: braid gemm %.0f, flashoverlap %.0f, decomposition %.0f, "
                  "rmsnorm %.0f%s; gemm: atol %.3g rtol %.3g; reduced: |got - fp32 sum| <= %.2g + %d/256 * sum "
                  "|partials|)\n",
                  (long long)sh.m, (long long)sh.n, (long long)sh.k, ok ? "Disposition: Passed" : "Disposition: FAILED",
                  wr[0], wr[1], wr[2], wr[3], more.c_str(), gemm_atol(sh.k, 1), rtol, satol, W + 2);
    }

    // ---------------- timings ----------------
    const auto& t = a.timing;
    EpilogueArgs plain;
    plain.d = D.p;
    SignalGemm braid_reserved(op.options().tile, op.gemm().sm_count());
    // Timed iterations rotate over copies of (A, B) spanning twice the L2 (set 0: A, B themselves).
    const bench::InputSets in(A.p, size_t(sh.m) * sh.k * 2, B.p, size_t(sh.n) * sh.k * 2, s);
    // --owner: one owner block (M/W rows) timed before the full GEMM too, against the same after it below: a gap
    // between the two is the GPU's state (clocks under the power cap after the long GEMMs), not cuBLAS's kernel.
    const double t_cublas_block_first = owners.empty() ? 0.0 : median_us(team, t, [&](int i) {
      cublas.run(in.a(i), in.b(i), D.p, sh.m / W, sh.n, sh.k, s);
    });
    // cuBLAS's GEMM and braid's (all SMs, and with the transport's SM reserve) timed interleaved (5 rounds, rotated
    // order): the long GEMMs run the card into its power cap, so whichever was timed after the others met a lower
    // clock (up to 15% on a 1.4-ms GEMM, 2x H200, twenty-eighth session). Until the thirtieth session cuBLAS was
    // timed first and braid's GEMM after it; rows say which in `gemm_timing`.
    std::vector<std::function<void(int)>> gemm_fns = {
        [&](int i) { cublas.run(in.a(i), in.b(i), D.p, sh.m, sh.n, sh.k, s); },
        [&](int i) { braid_full.run(in.a(i), in.b(i), sh.m, sh.n, sh.k, plain, s); },
        [&](int i) { braid_reserved.run(in.a(i), in.b(i), sh.m, sh.n, sh.k, plain, s); }};
    if (braid_other) gemm_fns.push_back([&](int i) { braid_other->run(in.a(i), in.b(i), sh.m, sh.n, sh.k, plain, s); });
    const auto gemms = bench::time_interleaved(&team, s, t, 5, gemm_fns);
    const double t_cublas = bench::summarize(gemms[0]).median_us, t_braid = bench::summarize(gemms[1]).median_us,
                 t_braid_res = bench::summarize(gemms[2]).median_us,
                 t_braid_other = braid_other ? bench::summarize(gemms[3]).median_us : 0.0;
    // --owner: cuBLAS on the W owner blocks in sequence, nothing else — what splitting the GEMM costs the
    // owner-ordered op before any communication (M/W rows per launch).
    const double t_cublas_blocks = owners.empty() ? 0.0 : median_us(team, t, [&](int i) {
      const int64_t rows = sh.m / W;
      for (int q = 0; q < W; ++q)
        cublas.run(static_cast<const __nv_bfloat16*>(in.a(i)) + size_t(q) * size_t(rows) * size_t(sh.k), in.b(i),
                   static_cast<__nv_bfloat16*>(D.p) + size_t(q) * size_t(rows) * size_t(sh.n), rows, sh.n, sh.k, s);
    });
    // ... and one block alone (W of them apart against the W back to back above: whether the split's cost is cuBLAS's
    // kernel for M/W rows or the launches in a row).
    const double t_cublas_block = owners.empty() ? 0.0 : median_us(team, t, [&](int i) {
      cublas.run(in.a(i), in.b(i), D.p, sh.m / W, sh.n, sh.k, s);
    });
    const double t_comm = median_us(team, t, [&](int) {
      if (a.coll == Collective::kReduceScatter)
        BRAID_NCCL_CHECK(ncclReduceScatter(D.p, out.p, mn / W, ncclBfloat16, ncclSum, team.nccl(), s));
      else
        BRAID_NCCL_CHECK(ncclAllReduce(D.p, D.p, mn, ncclBfloat16, ncclSum, team.nccl(), s));
    });
    // --owner: which of {the peer op as decided, each owner-ordered op} is fastest, by its own timing before the
    // compared rounds (every rank picks from the same slowest-rank medians); the rounds then time the pick.
    int pick = -1;  // -1: the peer op; else owners[pick]
    std::vector<double> pick_pre;
    if (!owners.empty()) {
      pick_pre.push_back(median_us(team, t, [&](int i) { pce->op->run(in.a(i), in.b(i), pce->out, s); }));
      for (auto& ow : owners)
        pick_pre.push_back(median_us(team, t, [&](int i) { ow->run(in.a(i), in.b(i), owner_out(*ow), s); }));
      for (size_t i = 1; i < pick_pre.size(); ++i)
        if (pick_pre[i] < pick_pre[size_t(pick + 1)]) pick = int(i) - 1;
    }
    // The three compared end to end are timed interleaved (5 rounds): drift hits them alike.
    std::vector<std::function<void(int)>> fns = {
        [&](int i) { run_sequential(team, cublas, a.coll, in.a(i), in.b(i), D.p, out.p, sh.m, sh.n, sh.k, s); },
        [&](int i) { dec.run(cublas, a.coll, in.a(i), in.b(i), D.p, out.p, sh.m, sh.n, sh.k, s); },
        [&](int i) { op.run(in.a(i), in.b(i), out.p, s); }};
    for (auto& o : others) fns.push_back([&o, &in, s](int i) { o.op->run(in.a(i), in.b(i), o.out, s); });
    if (sym)
      fns.push_back([&](int i) {
        run_sequential(team, cublas, a.coll, in.a(i), in.b(i), sym_d->get(), sym_out->get(), sh.m, sh.n, sh.k, s);
      });
    const size_t owner_fn = fns.size();
    for (auto& ow : owners)
      fns.push_back([&ow, &in, &owner_out, s](int i) { ow->run(in.a(i), in.b(i), owner_out(*ow), s); });
    const size_t auto_fn = fns.size();
    if (autop) fns.push_back([&autop, &in, auto_dst, s](int i) { autop->run(in.a(i), in.b(i), auto_dst, s); });
    const auto cmp = bench::time_interleaved(&team, s, t, 5, fns);
    std::vector<double> t_owner;
    for (size_t i = 0; i < owners.size(); ++i) t_owner.push_back(bench::summarize(cmp[owner_fn + i]).median_us);
    const double t_auto = autop ? bench::summarize(cmp[auto_fn]).median_us : 0.0;
    // --owner-phases: per owner op, each phase boundary's median offset from the op's start (rank 0's, and the
    // slowest rank's), as "name:us" pairs in run order.
    std::vector<std::string> owner_phases(owners.size());
    if (a.owner_phases)
      for (size_t o = 0; o < owners.size(); ++o) {
        OwnerOrderedRs& ow = *owners[o];
        ow.set_profile(true);
        std::vector<std::vector<double>> at;  // [phase][run]
        std::vector<std::string> names;
        for (int r = 0; r < 20; ++r) {
          team.barrier();
          bench::gpu_idle(s, 500);
          ow.run(in.a(r), in.b(r), owner_out(ow), s);
          team.synchronize(s, "owner phases");
          const auto ph = ow.phases();
          if (at.empty()) {
            at.resize(ph.size());
            for (const auto& p : ph) names.push_back(p.first);
          }
          BRAID_REQUIRE(ph.size() == at.size(), "owner phases: the stamps differ between runs");
          for (size_t i = 0; i < ph.size(); ++i) at[i].push_back(ph[i].second);
        }
        ow.set_profile(false);
        std::vector<double> med;
        for (auto& v : at) med.push_back(bench::summarize(v).median_us);
        const std::vector<double> slow = team.allreduce_max(med);
        std::string txt;
        for (size_t i = 0; i < med.size(); ++i) {
          char buf[96];
          std::snprintf(buf, sizeof buf, "%s%s:%.1f/%.1f", i ? "," : "", names[i].c_str(), med[i], slow[i]);
          txt += buf;
        }
        owner_phases[o] = txt;
      }
    const double t_seq = bench::summarize(cmp[0]).median_us, t_dec = bench::summarize(cmp[1]).median_us,
                 t_fo = bench::summarize(cmp[2]).median_us;
    for (size_t i = 0; i < others.size(); ++i) others[i].eager_us = bench::summarize(cmp[3 + i]).median_us;
    const double t_seq_sym = sym ? bench::summarize(cmp[3 + others.size()]).median_us : 0.0;
    const double t_comm_sym = !sym ? 0.0 : median_us(team, t, [&](int) {
      if (a.coll == Collective::kReduceScatter)
        BRAID_NCCL_CHECK(ncclReduceScatter(sym_d->get(), sym_out->get(), mn / W, ncclBfloat16, ncclSum, team.nccl(), s));
      else
        BRAID_NCCL_CHECK(ncclAllReduce(sym_d->get(), sym_d->get(), mn, ncclBfloat16, ncclSum, team.nccl(), s));
    });
    // The copy-engine transport's whole collective alone (its all-to-all and reduction, as for one group).
    // Overwrites the op's buffers: after its verified and timed runs, before its graph replays (which
    // rewrite them).
    const double t_comm_ce = !ce ? 0.0 : median_us(team, t, [&](int) { ce->op->transport_collective(mn, ce->out, s); });
    const double t_comm_pce =
        !pce ? 0.0 : median_us(team, t, [&](int) { pce->op->transport_collective(mn, pce->out, s); });
    op.check_error();
    for (auto& o : others) o.op->check_error();
    // The same ops replayed from CUDA graphs (one per input set): no host work per wave group, which
    // shows how much of the eager time is launch overhead (the copy-engine collectives' host setup and
    // stream memory operations especially). Timed interleaved with each other.
    double t_fo_graph = 0;
    {
      std::vector<cudaGraphExec_t> ge;
      auto capture = [&](GemmOverlap& o, void* outp, int i) {
        cudaGraph_t g = nullptr;
        cudaGraphExec_t e = nullptr;
        BRAID_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
        o.run(in.a(i), in.b(i), outp, s);
        BRAID_CUDA_CHECK(cudaStreamEndCapture(s, &g));
        BRAID_CUDA_CHECK(cudaGraphInstantiate(&e, g, 0));
        BRAID_CUDA_CHECK(cudaGraphDestroy(g));
        ge.push_back(e);
      };
      const int sets = in.sets();
      for (int i = 0; i < sets; ++i) capture(op, out.p, i);
      for (auto& o : others)
        for (int i = 0; i < sets; ++i) capture(*o.op, o.out, i);
      std::vector<std::function<void(int)>> gfns;
      for (size_t k = 0; k <= others.size(); ++k)
        gfns.push_back([&ge, k, sets, s](int i) { BRAID_CUDA_CHECK(cudaGraphLaunch(ge[k * sets + size_t(i % sets)], s)); });
      const auto gt = bench::time_interleaved(&team, s, t, 5, gfns);
      t_fo_graph = bench::summarize(gt[0]).median_us;
      for (size_t i = 0; i < others.size(); ++i) others[i].graph_us = bench::summarize(gt[1 + i]).median_us;
      team.synchronize(s, "graph timing");
      for (auto e : ge) BRAID_CUDA_CHECK(cudaGraphExecDestroy(e));
      op.check_error();
      for (auto& o : others) o.op->check_error();
    }
    const double t_gemm = std::min(t_cublas, t_braid);
    const double bound = std::max(t_gemm, t_comm);
    std::ostringstream gs;
    for (size_t i = 0; i < map.group_waves.size(); ++i) gs << (i ? "," : "") << map.group_waves[i];
    if (op.sequential()) gs << " sequential-fallback";
    const std::string groups = gs.str();
    if (rank == 0) {
      std::printf("%8s %6s %6s | %8s %8s %8s | %8s | %8s %8s %8s | %8s %7s %6s | %s\n", "M", "N", "K", "cublas",
                  "braid", "braid-r", "coll", "seq", "decomp", "flash", "bound", "speedup", "of-bnd", "groups");
      std::printf("%8lld %6lld %6lld | %8.1f %8.1f %8.1f | %8.1f | %8.1f %8.1f %8.1f | %8.1f %7.3f %6.3f | %s (%s, %d "
                  "CTAs, %d waves)\n",
                  (long long)sh.m, (long long)sh.n, (long long)sh.k, t_cublas, t_braid, t_braid_res, t_comm, t_seq, t_dec,
                  t_fo, bound, t_seq / t_fo, bound / t_fo, groups.c_str(), tile_config_name(op.options().tile),
                  map.grid.ctas, map.grid.num_waves());
      std::printf("         graph replay: flash %.1f us (%.3fx seq)", t_fo_graph, t_seq / t_fo_graph);
      for (const auto& o : others)
        std::printf("; over %s: eager %.1f us (%.3fx seq), graph %.1f us (%.3fx)", transport_name(o.t), o.eager_us,
                    t_seq / o.eager_us, o.graph_us, t_seq / o.graph_us);
      std::printf("\n");
      if (pce && pce_reserve_ratios.size() > 1) {
        std::printf("         peer copy engines: GEMM leaves %d SMs free (measured ratio to the fallback per reserve:",
                    pce->op->options().reserve_sms);
        for (const auto& v : pce_reserve_ratios) std::printf(" %d%s: %.3f", v.reserve, v.stores ? "s" : "", v.ratio);
        std::printf(")\n");
      }
      if (!owners.empty()) {
        std::printf("         owner-ordered:");
        for (size_t i = 0; i < owners.size(); ++i)
          std::printf(" %s %.1f us (%.3fx seq)", owner_name(*owners[i]).c_str(), t_owner[i], t_seq / t_owner[i]);
        const double t_pick = pick < 0 ? pce->eager_us : t_owner[size_t(pick)];
        std::printf("; pick %s: %.1f us (%.3fx seq)\n", pick < 0 ? "peer op" : owner_name(*owners[size_t(pick)]).c_str(),
                    t_pick, t_seq / t_pick);
        if (a.owner_phases)
          for (size_t i = 0; i < owners.size(); ++i)
            std::printf("         %s phases (us from its start, median over 20 runs, rank 0 / slowest rank): %s\n",
                        owner_name(*owners[i]).c_str(), owner_phases[i].c_str());
      }
      if (autop) {
        std::printf("         auto (AutoGemmComm): %s %.1f us (%.3fx seq); tuned:", pick_name(autop->pick()).c_str(),
                    t_auto, t_seq / t_auto);
        for (const auto& [p, us] : autop->tuned()) std::printf(" %s %.1f", pick_name(p).c_str(), us);
        std::printf("\n");
      }
      if (sym)
        std::printf("         cuBLAS + NCCL between symmetric windows: collective %.1f us, sequential %.1f us; "
                    "FlashOverlap over %s %.3fx of it%s\n",
                    t_comm_sym, t_seq_sym, transport_name(sym->t), t_seq_sym / sym->eager_us,
                    sym->op->sequential() ? " (decision: sequential fallback)" : "");
      std::fflush(stdout);
    }
    if (rank == 0 && !a.json.empty()) {
      bench::Json j;
      j.add("bench", op_name)
          .add("m", sh.m)
          .add("n", sh.n)
          .add("k", sh.k)
          .add("dtype", "bf16")
          .add("tile", tile_config_name(op.options().tile))
          .add("gemm_ctas", map.grid.ctas)
          .add("reserve_sms", op.options().reserve_sms)
          .add("reserve_fit", a.reserve_fit)
          .add("waves", map.grid.num_waves())
          .add("groups", groups)
          .add("decision", op.sequential() ? "sequential" : "overlap")
          .add("wait", op.uses_stream_wait_value() ? "cuStreamWaitValue32" : "spin-kernel")
          .add("cublas_us", t_cublas)
          .add("braid_gemm_us", t_braid)
          .add("braid_gemm_reserved_us", t_braid_res)
          .add("collective_us", t_comm)
          .add("sequential_us", t_seq)
          .add("decomposition_us", t_dec)
          .add("decomposition_chunks", a.chunks)
          .add("flashoverlap_us", t_fo)
          .add("bound_us", bound)
          .add("speedup", t_seq / t_fo)
          .add("fraction_of_bound", bound / t_fo)
          .add("transport", transport_name(Transport::kNcclKernels))
          .add("buffer_sets", in.sets())
          .add("braid_vs_cublas", t_cublas / t_braid)
          .add("braid_best_vs_cublas", t_cublas / (braid_other ? std::min(t_braid, t_braid_other) : t_braid))
          .add("gemm_timing", "interleaved")
          .add("correct", ok)
          .add_context(ctx);
      if (braid_other) j.add("braid_gemm_other_tile", tile_config_name(other_tile)).add("braid_gemm_other_us", t_braid_other);
      if (!searched.empty())
        j.add("predicted_us", std::stod(searched)).add("comm_stretch", default_comm_stretch(Transport::kNcclKernels));
      // --tune-candidates: the timed choice's fields (the op's tuned_* are then the last candidate's: not written).
      auto add_candidates = [&](Transport t, const std::string& sfx) {
        const auto it = tuned_by_candidates.find(t);
        if (it == tuned_by_candidates.end()) return false;
        const CandidateTuning& ct = it->second;
        std::ostringstream g;
        for (size_t i = 0; i < ct.best_groups.size(); ++i) g << (i ? "," : "") << ct.best_groups[i];
        j.add("cand_count" + sfx, ct.count)
            .add("cand_best" + sfx + "_us", ct.best_us)
            .add("cand_best_predicted" + sfx + "_us", ct.best_predicted_us)
            .add("cand_best_groups" + sfx, g.str())
            .add("cand_sequential" + sfx + "_us", ct.sequential_us)
            .add("cand_reference" + sfx + "_us", ct.reference_us);
        return true;
      };
      // tune(): the search chose overlap and tuning measured it (and the fallback) before deciding.
      if (!add_candidates(Transport::kNcclKernels, "") && op.tuned_overlap_us() > 0)
        j.add("tuned_overlap_us", op.tuned_overlap_us()).add("tuned_sequential_us", op.tuned_sequential_us());
      // A transport's own decision: partition, choice, prediction, tuning (fields suffixed _sym / _ce).
      auto add_decision = [&](const Other& o, const std::string& predicted) {
        const std::string k = key_of(o.t);
        std::ostringstream g;
        const std::vector<int>& waves = o.op->mapping().group_waves;
        for (size_t i = 0; i < waves.size(); ++i) g << (i ? "," : "") << waves[i];
        j.add("groups_" + k, g.str()).add("decision_" + k, o.op->sequential() ? "sequential" : "overlap")
            .add("gemm_ctas_" + k, o.op->mapping().grid.ctas);
        if (!predicted.empty())
          j.add("predicted_" + k + "_us", std::stod(predicted)).add("comm_stretch_" + k, default_comm_stretch(o.t));
        if (!add_candidates(o.t, "_" + k) && o.op->tuned_overlap_us() > 0)
          j.add("tuned_overlap_" + k + "_us", o.op->tuned_overlap_us())
              .add("tuned_sequential_" + k + "_us", o.op->tuned_sequential_us());
      };
      if (sym) {
        j.add("collective_sym_us", t_comm_sym)
            .add("sequential_sym_us", t_seq_sym)
            .add("speedup_sym_vs_seq_sym", t_seq_sym / sym->eager_us);
        add_decision(*sym, searched_sym);
      }
      if (ce) {
        // Whether the op runs its sums on their own stream (off under BRAID_OVERLAP_CE_SUM_STREAM=0).
        j.add("collective_ce_us", t_comm_ce).add("ce_sum_stream", ce->op->has_tail());
        if (!a.measure.empty()) j.add("ce_tail_model", ce_tail_model() && ce->op->has_tail());
        add_decision(*ce, searched_ce);
      }
      if (autop) {  // the library's entry point: its pick, its time in the compared rounds, what tune() measured
        std::ostringstream tu;
        for (size_t i = 0; i < autop->tuned().size(); ++i)
          tu << (i ? "," : "") << pick_name(autop->tuned()[i].first) << ':' << autop->tuned()[i].second;
        j.add("auto_pick", pick_name(autop->pick()))
            .add("flashoverlap_auto_us", t_auto)
            .add("speedup_auto", t_seq / t_auto)
            .add("fraction_of_bound_auto", bound / t_auto)
            .add("auto_tuned", tu.str())
            .add("auto_into_output", autop->output() != nullptr)
            .add("auto_try_t3", a.auto_t3)
            .add("auto_t3_variants", t3_names(a.auto_t3_variants.empty() ? AutoOptions{}.t3_variants
                                                                          : a.auto_t3_variants))
            .add("auto_try_pull", a.auto_pull);
      }
      if (pce) {
        j.add("collective_pce_us", t_comm_pce).add("reserve_sms_pce", pce->op->options().reserve_sms)
            .add("pce_pull_last", pce->op->options().peer_pull_last)
            .add("pce_stores", pce->op->options().peer_stores)
            .add("pce_stores_bulk", pce->op->options().peer_stores && pce->op->stores_bulk());
        if (!owners.empty()) {
          for (size_t i = 0; i < owners.size(); ++i) {
            std::string key = owner_name(*owners[i]);  // owner-cublas[-cN] -> owner_cublas[_cN]_us
            std::replace(key.begin(), key.end(), '-', '_');
            j.add(key + "_us", t_owner[i]).add(key + "_pre_us", pick_pre[i + 1]);
            if (a.owner_phases) j.add("owner_phases_" + key.substr(6), owner_phases[i]);  // owner_phases_cublas[_cN]
          }
          const double t_pick = pick < 0 ? pce->eager_us : t_owner[size_t(pick)];
          j.add("pick", pick < 0 ? std::string("pce") : owner_name(*owners[size_t(pick)]))
              .add("pce_pre_us", pick_pre[0])
              .add("cublas_owner_blocks_us", t_cublas_blocks)
              .add("cublas_owner_block_us", t_cublas_block)
              .add("cublas_owner_block_first_us", t_cublas_block_first)
              .add("flashoverlap_pick_us", t_pick)
              .add("speedup_pick", t_seq / t_pick)
              .add("fraction_of_bound_pick", bound / t_pick);
        }
        if (pce_reserve_ratios.size() > 1) {  // --pce-reserves: what each reserve's timed choice measured
          std::ostringstream rr;
          for (size_t i = 0; i < pce_reserve_ratios.size(); ++i)
            rr << (i ? "," : "") << pce_reserve_ratios[i].reserve << (pce_reserve_ratios[i].stores ? "s" : "") << ':'
               << pce_reserve_ratios[i].ratio;
          j.add("pce_reserve_ratios", rr.str());
        }
        add_decision(*pce, searched_pce);
      }
      j.add("flashoverlap_graph_us", t_fo_graph).add("speedup_graph", t_seq / t_fo_graph);
      for (const auto& o : others) {
        const std::string k = key_of(o.t);
        j.add("flashoverlap_" + k + "_graph_us", o.graph_us)
            .add("speedup_" + k + "_graph", t_seq / o.graph_us)
            .add("flashoverlap_" + k + "_us", o.eager_us)
            .add("speedup_" + k, t_seq / o.eager_us)
            .add("fraction_of_bound_" + k, bound / o.eager_us);
      }
      bench::append_jsonl(a.json, j.str());
    }
  }
  return failures == 0 ? 0 : 3;
}

}  // namespace braid::overlap
