// bench.cu — `braid bench t3-gemm-rs` and `braid bench ag-gemm`: T3 against cuBLAS+NCCL in sequence
// and FlashOverlap, with SMs used by communication and the correctness verdict printed before times.
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "braid/bench.hpp"
#include "braid/errors.hpp"
#include "braid/overlap.hpp"
#include "braid/overlap/verify.hpp"
#include "braid/runtime.hpp"
#include "braid/t3.hpp"

namespace braid::t3 {
namespace {

using overlap::bf16_to_float;
using overlap::download_bf16;

using Shape = bench::GemmShape;

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> v;
  std::stringstream ss(s);
  std::string tok;
  while (std::getline(ss, tok, sep))
    if (!tok.empty()) v.push_back(tok);
  return v;
}

struct Args {
  bool rs = true;  // t3-gemm-rs (else ag-gemm)
  std::vector<std::string> algos;
  std::vector<Shape> shapes;
  std::string json;
  int regions = 0;
  int reserve_sms = 16;
  bool profile_range = false;  // one run of each row between cudaProfilerStart/Stop (Nsight Compute ranges)
  int rounds = 5;               // timing passes over the rows (bench::time_interleaved)
  bench::TimingOptions timing{5, 20};
};

Args parse(int argc, char** argv) {
  Args a;
  BRAID_REQUIRE(argc >= 1, "t3 bench_main: argv[0] must be t3-gemm-rs or ag-gemm");
  const std::string what = argv[0];
  if (what == "t3-gemm-rs") {
    a.rs = true;
    a.algos = {"sequential", "flashoverlap", "t3-ring", "t3-ring-dma", "t3-ring-cublas", "t3-direct", "t3-direct-tma",
               "t3-auto"};
  } else if (what == "ag-gemm") {
    a.rs = false;
    a.algos = {"sequential", "t3"};
  } else {
    throw UsageError("t3 bench_main: unknown target '" + what + "' (t3-gemm-rs, ag-gemm)", __FILE__, __LINE__);
  }
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) throw UsageError(k + " needs a value", __FILE__, __LINE__);
      return argv[++i];
    };
    if (bench::parse_shape_option(k, val, a.shapes)) {
    } else if (k == "--algo") a.algos = split(val(), ',');
    else if (k == "--json") a.json = val();
    else if (k == "--regions") a.regions = std::stoi(val());
    else if (k == "--reserve-sms") a.reserve_sms = std::stoi(val());
    else if (k == "--iters") a.timing.iters = std::stoi(val());
    else if (k == "--warmup") a.timing.warmup = std::stoi(val());
    else if (k == "--profile-range") a.profile_range = true;
    else if (k == "--rounds") a.rounds = std::max(1, std::stoi(val()));
    else throw UsageError("unknown option '" + k + "' for bench " + what, __FILE__, __LINE__);
  }
  const std::vector<std::string> known =
      a.rs ? std::vector<std::string>{"sequential", "flashoverlap", "t3-ring", "t3-ring-dma", "t3-ring-cublas", "t3-direct",
                                      "t3-direct-tma", "t3-auto"}
           : std::vector<std::string>{"sequential", "t3"};
  for (const auto& x : a.algos)
    if (std::find(known.begin(), known.end(), x) == known.end())
      throw UsageError("bench " + what + ": unknown --algo '" + x + "'", __FILE__, __LINE__);
  if (a.shapes.empty()) throw UsageError("bench " + what + ": give --shape M,N,K or --shapes FILE", __FILE__, __LINE__);
  return a;
}

using DevBuf = bench::DeviceBuffer;

struct Row {
  std::string algo;
  int comm_sms = 0;        // -1: NCCL kernels after the GEMM (all SMs are theirs then)
  std::string comm_note;
  size_t wrong = 0;        // worst rank
  double max_err = 0;      // worst rank
  double us = 0;
  bool ok = false;
  std::function<void(int)> run;  // iteration i uses input set i % sets
};

int finish_rows(Team& team, const Args& a, const Shape& sh, std::vector<Row>& rows, const bench::Context& ctx,
                const char* name, const std::string& tolerance, const std::string& extra_json_key,
                int extra_json_value, int buffer_sets) {
  int failures = 0;
  for (auto& r : rows) {
    r.wrong = size_t(team.allreduce_max(double(r.wrong)));
    r.max_err = team.allreduce_max(r.max_err);
    r.ok = r.wrong == 0;
    if (!r.ok) ++failures;
  }
  if (team.rank() == 0) {
    std::printf("%lld,%lld,%lld: %s (wrong elements, worst rank:", (long long)sh.m, (long long)sh.n, (long long)sh.k,
                failures == 0 ? "Disposition: Passed" : "Disposition: FAILED");
    for (auto& r : rows) std::printf(" %s %zu (max err %.3g)", r.algo.c_str(), r.wrong, r.max_err);
    std::printf("; %s)\n", tolerance.c_str());
    std::printf("# SMs used by communication:");
    for (auto& r : rows) std::printf(" %s %s", r.algo.c_str(), r.comm_note.c_str());
    std::printf("\n");
    std::fflush(stdout);
  }
  // --profile-range: one run of every row as its own profiler range, every rank in step, for DRAM traffic
  // per op under `ncu --replay-mode app-range` (kernel-level profiling serialises kernels, and the fused
  // ops' kernels wait on each other across streams: they cannot finish under it). Ranges are numbered in
  // row order; the copy-engine transfers of T3 count in a range's DRAM bytes, not in any kernel's.
  if (a.profile_range)
    for (auto& r : rows) {
      team.synchronize(team.stream(), "profile range");
      team.barrier();
      BRAID_CUDA_CHECK(cudaProfilerStart());
      r.run(0);
      team.synchronize(team.stream(), "profile range");
      BRAID_CUDA_CHECK(cudaProfilerStop());
    }
  // Rows are compared with each other: their iterations are interleaved in rounds (drift hits all alike).
  std::vector<std::function<void(int)>> fns;
  for (auto& r : rows) fns.push_back([&r](int i) { r.run(i); });
  const auto samples = bench::time_interleaved(&team, team.stream(), a.timing, a.rounds, fns);
  for (size_t i = 0; i < rows.size(); ++i) rows[i].us = bench::summarize(samples[i]).median_us;
  if (team.rank() == 0) {
    std::printf("%8s %6s %6s |", "M", "N", "K");
    for (auto& r : rows) std::printf(" %12s", r.algo.c_str());
    std::printf(" | speedup vs sequential\n%8lld %6lld %6lld |", (long long)sh.m, (long long)sh.n, (long long)sh.k);
    for (auto& r : rows) std::printf(" %12.1f", r.us);
    std::printf(" |");
    for (auto& r : rows) std::printf(" %.3f", rows[0].us / r.us);
    std::printf("\n");
    std::fflush(stdout);
    if (!a.json.empty())
      for (auto& r : rows) {
        bench::Json j;
        j.add("bench", name)
            .add("algo", r.algo)
            .add("m", sh.m)
            .add("n", sh.n)
            .add("k", sh.k)
            .add("dtype", "bf16")
            .add("us", r.us)
            .add("speedup_vs_first", rows[0].us / r.us)
            .add("comm_sms", r.comm_sms)
            .add("comm_sms_note", r.comm_note)
            .add("wrong", r.wrong)
            .add("max_err", r.max_err)
            .add("tolerance", tolerance)
            .add("timing_rounds", a.rounds)
            .add("buffer_sets", buffer_sets)
            .add("correct", r.ok);
        if (!extra_json_key.empty()) j.add(extra_json_key, extra_json_value);
        j.add_context(ctx);
        bench::append_jsonl(a.json, j.str());
      }
  }
  return failures;
}

int bench_rs(Team& team, const Args& a, const bench::Context& ctx) {
  const int W = team.size(), rank = team.rank();
  cudaStream_t s = team.stream();
  int failures = 0;
  if (rank == 0)
    std::printf("# braid bench t3-gemm-rs: %d ranks, bf16, fp32 accumulate; D = A·Bᵀ reduce-scattered by rows; "
                "times: median of %d iterations (slowest rank) in %d rounds interleaving the algorithms, µs\n",
                W, a.timing.iters, a.rounds);
  for (const Shape& sh : a.shapes) {
    if (sh.m % (int64_t(W) * 256) != 0 || sh.n % 256 != 0 || sh.k % 64 != 0) {  // a sweep for another W
      if (rank == 0) std::printf("%lld,%lld,%lld: skipped (T3 at %d ranks needs M %% %d == 0, N %% 256, K %% 64)\n",
                                 (long long)sh.m, (long long)sh.n, (long long)sh.k, W, W * 256);
      continue;
    }
    const int64_t mn = sh.m * sh.n, mc = sh.m / W;
    DevBuf A(size_t(sh.m) * sh.k * 2), B(size_t(sh.n) * sh.k * 2), D(size_t(mn) * 2), Dref(size_t(mn) * 2),
        out(size_t(mn) * 2 / W);
    overlap::fill_uniform_bf16(A.p, size_t(sh.m) * sh.k, 1000 + rank, 1.f, s);
    overlap::fill_uniform_bf16(B.p, size_t(sh.n) * sh.k, 2000 + rank, 1.f, s);
    // Timed iterations rotate over copies of (A, B) spanning twice the L2 (set 0 is A, B themselves).
    const bench::InputSets in(A.p, size_t(sh.m) * sh.k * 2, B.p, size_t(sh.n) * sh.k * 2, s);
    overlap::CublasGemm cublas;
    // Reference: the float32 sum over ranks of cuBLAS's D and the sum of magnitudes, which bounds every
    // partial sum a bf16 reduction rounds (overlap::sum_tolerance); rank p's rows [p*Mc, (p+1)*Mc) for T3.
    cublas.run(A.p, B.p, Dref.p, sh.m, sh.n, sh.k, s);
    const overlap::SumRef ref = overlap::sum_reference(team, Dref.p, size_t(mn), s);
    const int64_t own = int64_t(rank) * mc * sh.n;
    const double atol = overlap::sum_atol(sh.k);
    const auto own_ref = [own](int64_t i) { return own + i; };
    const auto same = [](int64_t i) { return i; };
    std::vector<Row> rows;
    std::unique_ptr<overlap::GemmOverlap> fo;
    std::vector<std::unique_ptr<GemmReduceScatter>> t3ops;  // kept alive: the rows time them later
    int regions = 0;
    for (const auto& algo : a.algos) {
      Row r;
      r.algo = algo;
      if (algo == "sequential") {
        r.comm_sms = -1;
        r.comm_note = "nccl-after-gemm";
        r.run = [&](int i) {
          overlap::run_sequential(team, cublas, overlap::Collective::kReduceScatter, in.a(i), in.b(i), D.p, out.p,
                                  sh.m, sh.n, sh.k, s);
        };
        r.run(0);
        team.synchronize(s, "sequential check");
        r.wrong = overlap::count_mismatch(ref, own_ref, mn / W, download_bf16(out.p, size_t(mn / W)), same, W, atol,
                                          nullptr, &r.max_err);
      } else if (algo == "flashoverlap") {
        overlap::OverlapOptions oo;
        oo.coll = overlap::Collective::kReduceScatter;
        oo.m = sh.m, oo.n = sh.n, oo.k = sh.k;
        oo.reserve_sms = a.reserve_sms;
        fo = std::make_unique<overlap::GemmOverlap>(team, oo);
        r.comm_sms = a.reserve_sms;
        r.comm_note = std::to_string(a.reserve_sms) + "(reserved-for-nccl)";
        auto* op = fo.get();
        r.run = [&, op](int i) { op->run(in.a(i), in.b(i), out.p, s); };
        r.run(0);
        team.synchronize(s, "flashoverlap check");
        op->check_error();
        const auto& map = op->mapping();
        r.wrong = overlap::count_mismatch(
            ref, [&](int64_t i) { return overlap::rs_original_row(map, rank, i / sh.n) * sh.n + i % sh.n; }, mn / W,
            download_bf16(out.p, size_t(mn / W)),
            [&](int64_t i) {
              return overlap::scattered_index(map, overlap::rs_original_row(map, rank, i / sh.n), i % sh.n);
            },
            W, atol, nullptr, &r.max_err);
      } else {
        RsOptions o;
        o.variant = algo == "t3-ring"          ? Variant::kRing
                    : algo == "t3-ring-dma"    ? Variant::kRingDma
                    : algo == "t3-ring-cublas" ? Variant::kRingCublas
                    : algo == "t3-auto"        ? Variant::kAuto
                    : algo == "t3-direct-tma"  ? Variant::kDirectTma
                                               : Variant::kDirect;
        o.m = sh.m, o.n = sh.n, o.k = sh.k;
        o.regions = a.regions;
        auto op = std::make_unique<GemmReduceScatter>(team, o);
        regions = op->map().regions;
        r.comm_sms = op->comm_sms();
        r.comm_note = "0";
        auto* p = op.get();
        r.run = [&, p](int i) { p->run(in.a(i), in.b(i), out.p, s); };
        if (o.variant == Variant::kAuto) {  // times its candidates on these inputs, keeps the fastest
          const Variant chosen = p->tune(A.p, B.p, out.p, s);
          r.comm_note = std::string("0(chose ") + variant_name(chosen) + ")";
        }
        BRAID_CUDA_CHECK(cudaMemsetAsync(out.p, 0xff, size_t(mn / W) * 2, s));
        r.run(0);
        team.synchronize(s, "t3 check");
        p->check_error();
        r.wrong = overlap::count_mismatch(ref, own_ref, mn / W, download_bf16(p->result(), size_t(mn / W)), same, W,
                                          atol, nullptr, &r.max_err);
        t3ops.push_back(std::move(op));
      }
      rows.push_back(std::move(r));
    }
    char tol[120];
    std::snprintf(tol, sizeof tol, "|got - fp32 sum| <= %.2g + %d/256 * sum of |partials|", atol, W + 2);
    failures += finish_rows(team, a, sh, rows, ctx, "t3-gemm-rs", tol, "regions", regions, in.sets());
    for (const auto& op : t3ops) op->check_error();
    if (fo) fo->check_error();
  }
  return failures;
}

int bench_ag(Team& team, const Args& a, const bench::Context& ctx) {
  const int W = team.size(), rank = team.rank();
  cudaStream_t s = team.stream();
  int failures = 0;
  if (rank == 0)
    std::printf("# braid bench ag-gemm: %d ranks, bf16, fp32 accumulate; C = allgather(A)·Bᵀ; times: median of %d "
                "iterations (slowest rank) in %d rounds interleaving the algorithms, µs\n",
                W, a.timing.iters, a.rounds);
  for (const Shape& sh : a.shapes) {
    if (sh.m % (int64_t(W) * 256) != 0 || sh.n % 128 != 0 || sh.k % 64 != 0) {
      if (rank == 0) std::printf("%lld,%lld,%lld: skipped (AG+GEMM at %d ranks needs M %% %d == 0, N %% 128, K %% 64)\n",
                                 (long long)sh.m, (long long)sh.n, (long long)sh.k, W, W * 256);
      continue;
    }
    const int64_t mc = sh.m / W, mn = sh.m * sh.n;
    DevBuf shard(size_t(mc) * sh.k * 2), full(size_t(sh.m) * sh.k * 2), B(size_t(sh.n) * sh.k * 2),
        C(size_t(mn) * 2), Cref(size_t(mn) * 2);
    overlap::fill_uniform_bf16(shard.p, size_t(mc) * sh.k, 3000 + rank, 1.f, s);
    overlap::fill_uniform_bf16(B.p, size_t(sh.n) * sh.k, 4000 + rank, 1.f, s);
    const bench::InputSets in(shard.p, size_t(mc) * sh.k * 2, B.p, size_t(sh.n) * sh.k * 2, s);  // rotated (set 0: these)
    overlap::CublasGemm cublas;
    auto sequential = [&](void* c, int i) {
      BRAID_NCCL_CHECK(ncclAllGather(in.a(i), full.p, size_t(mc) * sh.k, ncclBfloat16, team.nccl(), s));
      cublas.run(full.p, in.b(i), c, sh.m, sh.n, sh.k, s);
    };
    sequential(Cref.p, 0);
    team.synchronize(s, "reference");
    const auto ref = download_bf16(Cref.p, size_t(mn));
    const double atol = overlap::gemm_atol(sh.k, 1);
    std::vector<Row> rows;
    std::unique_ptr<AllGatherGemm> op;
    for (const auto& algo : a.algos) {
      Row r;
      r.algo = algo;
      if (algo == "sequential") {
        r.comm_sms = -1;
        r.comm_note = "nccl-before-gemm";
        r.run = [&](int i) { sequential(C.p, i); };
      } else {
        op = std::make_unique<AllGatherGemm>(team, AgOptions{sh.m, sh.n, sh.k, 0});
        r.comm_sms = 0;
        r.comm_note = "0";
        auto* p = op.get();
        r.run = [&, p](int i) { p->run(in.a(i), in.b(i), C.p, s); };
      }
      BRAID_CUDA_CHECK(cudaMemsetAsync(C.p, 0xff, size_t(mn) * 2, s));
      r.run(0);
      team.synchronize(s, "ag-gemm check");
      r.wrong = overlap::count_mismatch(ref, download_bf16(C.p, size_t(mn)), [](int64_t i) { return i; }, atol,
                                        overlap::kGemmRtol, nullptr, &r.max_err);
      rows.push_back(std::move(r));
    }
    char tol[80];
    std::snprintf(tol, sizeof tol, "atol %.3g rtol %.3g", atol, overlap::kGemmRtol);
    failures += finish_rows(team, a, sh, rows, ctx, "ag-gemm", tol, "", 0, in.sets());
  }
  return failures;
}

}  // namespace

int bench_main(Team& team, int argc, char** argv, const bench::Context& ctx) {
  const Args a = parse(argc, argv);
  const int failures = a.rs ? bench_rs(team, a, ctx) : bench_ag(team, a, ctx);
  return failures == 0 ? 0 : 3;
}

}  // namespace braid::t3
