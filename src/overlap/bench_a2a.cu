// bench_a2a.cu — `braid bench gemm-a2a`: FlashOverlap GEMM + all-to-all against cuBLAS + pack + NCCL
// all-to-all-v in sequence (same process, same card), with the correctness verdict first. Routing:
// every row of every rank goes to a uniformly random rank (seeded), as an MoE combine would.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "braid/bench.hpp"
#include "braid/errors.hpp"
#include "braid/overlap.hpp"
#include "braid/overlap/verify.hpp"
#include "braid/runtime.hpp"

namespace braid::overlap {
namespace {

using Buf = bench::DeviceBuffer;
using bench::median_us;

}  // namespace

int bench_a2a_main(Team& team, int argc, char** argv, const bench::Context& ctx) {
  std::vector<bench::GemmShape> shapes;
  std::string json;
  A2aOptions base;
  bench::TimingOptions timing{5, 20};
  uint64_t seed = 1;
  bool pce = false;     // --transport peer-copy-engine|both|all: also over braid's copy-engine pushes (A2aOptions)
  bool stores = false;  // --transport peer-stores|all: also by the epilogue's stores into the peers' outputs
  bench::for_each_option(argc, argv, [&](const std::string& k, const bench::OptionValue& val) {
    if (bench::parse_gemm_bench_option(k, val, shapes, json, timing)) {
    } else if (k == "--reserve-sms") base.reserve_sms = std::stoi(val());
    else if (k == "--seed") seed = std::stoull(val());
    else if (k == "--transport") {  // a comma-separated list; the NCCL op always runs
      const std::string v = val();
      size_t pos = 0;
      while (pos < v.size()) {
        const size_t e = v.find(',', pos);
        const std::string t = v.substr(pos, e - pos);
        pos = e == std::string::npos ? v.size() : e + 1;
        if (t == "kernels") {
        } else if (t == "peer-copy-engine" || t == "both") pce = true;
        else if (t == "peer-stores") stores = true;
        else if (t == "all") pce = stores = true;
        else
          throw UsageError("--transport: kernels, peer-copy-engine, peer-stores, both (kernels + peer-copy-engine) or "
                           "all, comma-separated (the NCCL op always runs)",
                           __FILE__, __LINE__);
      }
    }
    else if (k == "--groups") {
      const std::string v = val();
      size_t pos = 0;
      while (pos < v.size()) {
        const size_t e = v.find(',', pos);
        base.group_waves.push_back(std::stoi(v.substr(pos, e - pos)));
        pos = e == std::string::npos ? v.size() : e + 1;
      }
    } else if (k == "--tile") {
      const std::string t = val();
      base.tile = t == "128x256" ? TileConfig::k128x256 : t == "128x128" ? TileConfig::k128x128 : TileConfig::kAuto;
    } else throw UsageError("unknown option '" + k + "' for bench gemm-a2a", __FILE__, __LINE__);
  });
  if (shapes.empty()) throw UsageError("bench gemm-a2a: give --shape M,N,K or --shapes FILE", __FILE__, __LINE__);
  const int W = team.size(), rank = team.rank();
  cudaStream_t s = team.stream();
  if (rank == 0) {
    std::printf("# braid bench gemm-a2a: %d ranks, bf16, fp32 accumulate; row i of D = A·Bᵀ goes to a uniformly "
                "random rank (seed %llu); times: median of %d iterations (slowest rank), µs\n",
                W, (unsigned long long)seed, timing.iters);
    std::printf("# sequential = cuBLAS + pack by destination + ncclSend/Recv per peer; flashoverlap = signalled "
                "GEMM + per-group ncclSend/Recv + the gather into the same layout\n");
  }
  int failures = 0;
  for (const auto& sh : shapes) {
    A2aOptions o = base;
    o.m = sh.m, o.n = sh.n, o.k = sh.k;
    bool fits = true;
    try {
      GemmAllToAll probe(team, o);  // throws UsageError for shapes the GEMM cannot tile
    } catch (const UsageError& e) {
      fits = false;
      if (rank == 0) std::printf("%lld,%lld,%lld: skipped (%s)\n", (long long)sh.m, (long long)sh.n, (long long)sh.k, e.what());
    }
    if (!fits) continue;
    GemmAllToAll op(team, o);
    std::mt19937_64 rng(seed * 1000003ULL + uint64_t(rank));
    std::vector<int32_t> dest(size_t(sh.m));
    for (auto& d : dest) d = int32_t(rng() % uint64_t(W));
    op.set_routing(dest);
    // The same op over braid's copy-engine pushes (same partition and routing, where the node allows it; its
    // GEMM on every SM by default, A2aOptions::reserve_sms < 0; the NCCL op's leaves 16 free).
    std::unique_ptr<GemmAllToAll> pop, sop;
    if ((pce || stores) && !team.peer_ok() && rank == 0)
      std::printf("# over peer copy engines / by peer stores: not run (%s)\n", team.peer_status().c_str());
    if (pce && team.peer_ok()) {
      A2aOptions po = o;
      po.transport = Transport::kPeerCopyEngine;
      pop = std::make_unique<GemmAllToAll>(team, po);
      pop->set_routing(dest);
    }
    // By the epilogue's stores into every rank's output() over NVLink (one group, no gather), timed twice: into
    // output() itself (the consumer reads the op's buffer) and copied into a buffer of the caller's.
    if (stores && team.peer_ok()) {
      A2aOptions so = o;
      so.transport = Transport::kPeerStores;
      sop = std::make_unique<GemmAllToAll>(team, so);
      sop->set_routing(dest);
    }
    const size_t mn = size_t(sh.m) * sh.n;
    const int64_t rows = op.recv_rows();
    Buf A(size_t(sh.m) * sh.k * 2), B(size_t(sh.n) * sh.k * 2), D(mn * 2), P(mn * 2),
        out_seq(size_t(rows) * sh.n * 2), out_fo(size_t(rows) * sh.n * 2), out_pce(size_t(rows) * sh.n * 2),
        out_st(size_t(rows) * sh.n * 2);
    fill_uniform_bf16(A.p, size_t(sh.m) * sh.k, 5000 + rank, 1.f, s);
    fill_uniform_bf16(B.p, size_t(sh.n) * sh.k, 6000, 1.f, s);  // one weight on every rank
    CublasGemm cublas;

    // ---------------- correctness (before any timing) ----------------
    // (1) the baseline's own rows (self segment) against the local cuBLAS D; (2) FlashOverlap against the
    // baseline on every row (the baseline's peer segments are checked the same way on their senders).
    op.run_sequential(cublas, A.p, B.p, D.p, P.p, out_seq.p, s);
    team.synchronize(s, "gemm-a2a baseline");
    const auto dref = download_bf16(D.p, mn);
    const auto seq = download_bf16(out_seq.p, size_t(rows) * sh.n);
    size_t wrong_self = 0;
    {
      int64_t base_rows = 0;
      for (int q = 0; q < rank; ++q) base_rows += op.plan().recv_rows_from[q];
      int64_t j = base_rows;
      for (int64_t i = 0; i < sh.m; ++i) {
        if (dest[size_t(i)] != rank) continue;
        for (int64_t c = 0; c < sh.n; ++c)
          if (seq[size_t(j * sh.n + c)] != dref[size_t(i * sh.n + c)]) ++wrong_self;
        ++j;
      }
    }
    BRAID_CUDA_CHECK(cudaMemsetAsync(out_fo.p, 0xff, size_t(rows) * sh.n * 2, s));  // NaN: unwritten rows are caught
    op.run(A.p, B.p, out_fo.p, s);
    team.synchronize(s, "gemm-a2a flashoverlap");
    op.check_error();
    const size_t wrong_fo = count_mismatch(seq, download_bf16(out_fo.p, size_t(rows) * sh.n),
                                           [](int64_t i) { return i; }, gemm_atol(sh.k, 1), kGemmRtol);
    size_t wrong_pce = 0;
    if (pop) {
      BRAID_CUDA_CHECK(cudaMemsetAsync(out_pce.p, 0xff, size_t(rows) * sh.n * 2, s));
      pop->run(A.p, B.p, out_pce.p, s);
      team.synchronize(s, "gemm-a2a flashoverlap over peer copy engines");
      pop->check_error();
      wrong_pce = count_mismatch(seq, download_bf16(out_pce.p, size_t(rows) * sh.n), [](int64_t i) { return i; },
                                 gemm_atol(sh.k, 1), kGemmRtol);
    }
    size_t wrong_st = 0;
    if (sop) {  // both ways: copied into the caller's buffer, then read in output() itself
      for (void* dst : {out_st.p, sop->output()}) {
        BRAID_CUDA_CHECK(cudaMemsetAsync(dst, 0xff, size_t(rows) * sh.n * 2, s));
        sop->run(A.p, B.p, dst, s);
        team.synchronize(s, "gemm-a2a flashoverlap by peer stores");
        sop->check_error();
        wrong_st += count_mismatch(seq, download_bf16(dst, size_t(rows) * sh.n), [](int64_t i) { return i; },
                                   gemm_atol(sh.k, 1), kGemmRtol);
      }
    }
    const auto wr = team.allreduce_max(
        std::vector<double>{double(wrong_self), double(wrong_fo), double(wrong_pce), double(wrong_st)});
    const bool ok = wr[0] == 0 && wr[1] == 0 && wr[2] == 0 && wr[3] == 0;
    if (!ok) ++failures;
    if (rank == 0)
      std::printf("%lld,%lld,%lld: %s (wrong, worst rank: baseline self rows %.0f, flashoverlap %.0f%s%s)\n",
                  (long long)sh.m, (long long)sh.n, (long long)sh.k, ok ? "Disposition: Passed" : "Disposition: FAILED",
                  wr[0], wr[1], pop ? (", over peer copy engines " + std::to_string(int64_t(wr[2]))).c_str() : "",
                  sop ? (", by peer stores " + std::to_string(int64_t(wr[3]))).c_str() : "");

    // ---------------- timings ----------------
    SignalGemm braid_full(op.options().tile, 0);
    EpilogueArgs plain;
    plain.d = D.p;
    // Timed iterations rotate over copies of (A, B) spanning twice the L2 (set 0: A, B themselves).
    const bench::InputSets in(A.p, size_t(sh.m) * sh.k * 2, B.p, size_t(sh.n) * sh.k * 2, s);
    const double t_cublas =
        median_us(team, timing, [&](int i) { cublas.run(in.a(i), in.b(i), D.p, sh.m, sh.n, sh.k, s); });
    const double t_braid =
        median_us(team, timing, [&](int i) { braid_full.run(in.a(i), in.b(i), sh.m, sh.n, sh.k, plain, s); });
    // The collective alone: the baseline's all-to-all-v of the packed rows (pack excluded).
    std::vector<int64_t> so(W), sc(W), ro(W), rc(W);
    {
      int64_t a = 0, b = 0;
      for (int p = 0; p < W; ++p) {
        so[p] = a, sc[p] = op.plan().send_rows[p] * sh.n, a += sc[p];
        ro[p] = b, rc[p] = op.plan().recv_rows_from[p] * sh.n, b += rc[p];
      }
    }
    const double t_comm = median_us(team, timing, [&](int) {
      BRAID_NCCL_CHECK(ncclGroupStart());
      for (int p = 0; p < W; ++p) {
        if (sc[p]) BRAID_NCCL_CHECK(ncclSend(static_cast<const uint16_t*>(P.p) + so[p], sc[p], ncclBfloat16, p, team.nccl(), s));
        if (rc[p]) BRAID_NCCL_CHECK(ncclRecv(static_cast<uint16_t*>(out_seq.p) + ro[p], rc[p], ncclBfloat16, p, team.nccl(), s));
      }
      BRAID_NCCL_CHECK(ncclGroupEnd());
    });
    // Sequential and FlashOverlap timed interleaved (5 rounds): drift hits both alike.
    std::vector<std::function<void(int)>> fns = {
        [&](int i) { op.run_sequential(cublas, in.a(i), in.b(i), D.p, P.p, out_seq.p, s); },
        [&](int i) { op.run(in.a(i), in.b(i), out_fo.p, s); }};
    const size_t i_pce = fns.size();
    if (pop) fns.push_back([&](int i) { pop->run(in.a(i), in.b(i), out_pce.p, s); });
    const size_t i_st = fns.size();
    if (sop) {
      fns.push_back([&](int i) { sop->run(in.a(i), in.b(i), sop->output(), s); });
      fns.push_back([&](int i) { sop->run(in.a(i), in.b(i), out_st.p, s); });
    }
    const auto cmp = bench::time_interleaved(&team, s, timing, 5, fns);
    const double t_seq = bench::summarize(cmp[0]).median_us, t_fo = bench::summarize(cmp[1]).median_us;
    const double t_pce = pop ? bench::summarize(cmp[i_pce]).median_us : 0.0;
    const double t_st = sop ? bench::summarize(cmp[i_st]).median_us : 0.0;
    const double t_st_copy = sop ? bench::summarize(cmp[i_st + 1]).median_us : 0.0;
    op.check_error();
    if (pop) pop->check_error();
    if (sop) sop->check_error();
    const double bound = std::max(std::min(t_cublas, t_braid), t_comm);
    std::string groups;
    for (size_t i = 0; i < op.mapping().group_waves.size(); ++i)
      groups += (i ? "," : "") + std::to_string(op.mapping().group_waves[i]);
    if (rank == 0) {
      std::printf("%8s %6s %6s | %8s %8s | %8s | %8s %8s | %8s %7s %6s | %s\n", "M", "N", "K", "cublas", "braid", "a2a",
                  "seq", "flash", "bound", "speedup", "of-bnd", "groups");
      std::printf("%8lld %6lld %6lld | %8.1f %8.1f | %8.1f | %8.1f %8.1f | %8.1f %7.3f %6.3f | %s (%s, %d CTAs, %d "
                  "waves)\n",
                  (long long)sh.m, (long long)sh.n, (long long)sh.k, t_cublas, t_braid, t_comm, t_seq, t_fo, bound,
                  t_seq / t_fo, bound / t_fo, groups.c_str(), tile_config_name(op.options().tile),
                  op.mapping().grid.ctas, op.mapping().grid.num_waves());
      if (pop)
        std::printf("         over peer copy engines (GEMM leaves %d SMs): %.1f us (%.3fx seq, %.3f of the bound)\n",
                    pop->options().reserve_sms, t_pce, t_seq / t_pce, bound / t_pce);
      if (sop)
        std::printf("         by peer stores (GEMM on %d CTAs): into output() %.1f us (%.3fx seq, %.3f of the bound); "
                    "copied out %.1f us (%.3fx seq)\n",
                    sop->mapping().grid.ctas, t_st, t_seq / t_st, bound / t_st, t_st_copy, t_seq / t_st_copy);
      std::fflush(stdout);
    }
    if (rank == 0 && !json.empty()) {
      bench::Json j;
      j.add("bench", "gemm-a2a")
          .add("m", sh.m)
          .add("n", sh.n)
          .add("k", sh.k)
          .add("dtype", "bf16")
          .add("world", W)
          .add("routing", std::string("uniform seed ") + std::to_string(seed))
          .add("tile", tile_config_name(op.options().tile))
          .add("gemm_ctas", op.mapping().grid.ctas)
          .add("waves", op.mapping().grid.num_waves())
          .add("groups", groups)
          .add("cublas_us", t_cublas)
          .add("braid_gemm_us", t_braid)
          .add("collective_us", t_comm)
          .add("sequential_us", t_seq)
          .add("flashoverlap_us", t_fo)
          .add("bound_us", bound)
          .add("speedup", t_seq / t_fo)
          .add("fraction_of_bound", bound / t_fo)
          .add("buffer_sets", in.sets())
          .add("correct", ok)
          .add_context(ctx);
      if (pop)
        j.add("flashoverlap_pce_us", t_pce)
            .add("speedup_pce", t_seq / t_pce)
            .add("fraction_of_bound_pce", bound / t_pce)
            .add("reserve_sms_pce", pop->options().reserve_sms);
      if (sop)
        j.add("flashoverlap_stores_us", t_st)
            .add("speedup_stores", t_seq / t_st)
            .add("fraction_of_bound_stores", bound / t_st)
            .add("flashoverlap_stores_copy_us", t_st_copy)
            .add("speedup_stores_copy", t_seq / t_st_copy);
      bench::append_jsonl(json, j.str());
    }
  }
  return failures == 0 ? 0 : 3;
}

}  // namespace braid::overlap
