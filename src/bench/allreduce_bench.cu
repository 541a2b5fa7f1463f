// `braid bench allreduce`: every algorithm verified, then timed, beside NCCL in the same process.
//
// Verification: exact algorithms (nccl, oneshot, twoshot) run on half-integer data whose sums are
// exact, and must match the expected sum bit for bit on every rank. Quantized algorithms run on data
// from the chosen distribution; up to kRefElems elements per rank their output must equal the CPU
// reference (braid/quant_ref.hpp) bit for bit (up to the sign of zero) on every rank; above it, the
// input is the kRefElems block tiled, outputs must be identical on all ranks and their normalized RMS
// error against an fp32 NCCL reference must stay within 1.2x of the error at the bit-checked size.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>

#include "braid/allreduce.hpp"
#include "braid/bench.hpp"
#include "braid/dist.hpp"
#include "braid/quant_ref.hpp"
#include "braid/runtime.hpp"

namespace braid::bench {
namespace {

constexpr size_t kRefElems = size_t(4) << 20;

__global__ void to_f32_kernel(const uint16_t* in, float* out, size_t n, int dt) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    out[i] = dt == 0 ? quant::bf16_bits_to_float(in[i]) : quant::half_bits_to_float(in[i]);
}
// sums[0] += (out - ref)^2, sums[1] += ref^2, sums[2] = max |out - ref| (as ordered bits), sums[3]: NaNs,
// sums[4]: 64-bit hash of the output bits (order-independent sum of mixed values).
__global__ void error_kernel(const uint16_t* out, const float* ref, size_t n, int dt, double* sums,
                             unsigned long long* extra) {
  double se = 0, sr = 0;
  float mx = 0;
  unsigned long long nan = 0, hash = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float o = dt == 0 ? quant::bf16_bits_to_float(out[i]) : quant::half_bits_to_float(out[i]);
    if (!(o == o)) ++nan;
    const double d = static_cast<double>(o) - ref[i];
    se += d * d;
    sr += static_cast<double>(ref[i]) * ref[i];
    mx = fmaxf(mx, fabsf(static_cast<float>(d)));
    unsigned long long h = (static_cast<unsigned long long>(out[i]) + 0x9E3779B97F4A7C15ULL) * (i * 2 + 1);
    h ^= h >> 29;
    hash += h;
  }
  atomicAdd(&sums[0], se);
  atomicAdd(&sums[1], sr);
  atomicMax(reinterpret_cast<unsigned int*>(&extra[0]), __float_as_uint(mx));  // non-negative floats order as uints
  atomicAdd(&extra[1], nan);
  atomicAdd(&extra[2], hash);
}

struct ErrorStats {
  double nrms = 0, max_abs = 0;
  unsigned long long nans = 0, hash = 0;
};

ErrorStats device_error(const void* out, const float* ref, size_t n, DType t, cudaStream_t s) {
  double* d = nullptr;
  unsigned long long* e = nullptr;
  BRAID_CUDA_CHECK(cudaMalloc(&d, 2 * sizeof(double)));
  BRAID_CUDA_CHECK(cudaMalloc(&e, 3 * sizeof(unsigned long long)));
  BRAID_CUDA_CHECK(cudaMemsetAsync(d, 0, 2 * sizeof(double), s));
  BRAID_CUDA_CHECK(cudaMemsetAsync(e, 0, 3 * sizeof(unsigned long long), s));
  error_kernel<<<528, 256, 0, s>>>(static_cast<const uint16_t*>(out), ref, n, t == DType::kBF16 ? 0 : 1, d, e);
  BRAID_CHECK_LAUNCH();
  double hd[2];
  unsigned long long he[3];
  BRAID_CUDA_CHECK(cudaMemcpyAsync(hd, d, sizeof hd, cudaMemcpyDeviceToHost, s));
  BRAID_CUDA_CHECK(cudaMemcpyAsync(he, e, sizeof he, cudaMemcpyDeviceToHost, s));
  BRAID_CUDA_CHECK(cudaStreamSynchronize(s));
  cudaFree(d);
  cudaFree(e);
  ErrorStats r;
  r.nrms = hd[1] > 0 ? std::sqrt(hd[0] / hd[1]) : 0;
  unsigned int mxb = static_cast<unsigned int>(he[0]);
  float mx;
  std::memcpy(&mx, &mxb, 4);
  r.max_abs = mx;
  r.nans = he[1];
  r.hash = he[2];
  return r;
}

quant::Dtype qdtype(DType t) { return t == DType::kBF16 ? quant::Dtype::bf16 : quant::Dtype::fp16; }

}  // namespace

int run_allreduce_bench(Team& team, const AllReduceBenchArgs& a) {
  if (a.dtype == DType::kFP32) throw UsageError("bench allreduce: bf16 or fp16", __FILE__, __LINE__);
  const auto dist = braid::dist::parse_distribution(a.dist);
  if (!dist) throw UsageError("unknown distribution '" + a.dist + "'", __FILE__, __LINE__);
  const int W = team.size(), rank = team.rank();
  const size_t es = dtype_size(a.dtype);
  cudaStream_t s = team.stream();
  AllReducer ar(team);

  std::vector<std::string> algos = a.algos;
  if (std::find(algos.begin(), algos.end(), "nccl") == algos.end()) algos.insert(algos.begin(), "nccl");
  // "oneshot-sym" / "twoshot-sym" / "oneshot-ce-sym": AllReducer::run_symmetric, the input in a
  // SymmetricBuffer (read by the peers directly — by their SMs, or by their copy engines for oneshot-ce;
  // two-shot in place), as PyTorch's symmetric-memory all-reduce takes it.
  auto sym_algo = [](const std::string& name, ArAlgo* al) {
    if (name == "oneshot-sym") return *al = ArAlgo::kOneShot, true;
    if (name == "twoshot-sym") return *al = ArAlgo::kTwoShot, true;
    if (name == "oneshot-ce-sym") return *al = ArAlgo::kOneShotCE, true;
    return false;
  };
  bool any_sym = false;
  for (const auto& name : algos) {
    ArAlgo al;
    Precision p;
    QuantImpl impl;
    if (sym_algo(name, &al)) {
      any_sym = true;
      continue;
    }
    if (!parse_algo(name, &al, &p, &impl)) throw UsageError("unknown all-reduce algorithm '" + name + "'", __FILE__, __LINE__);
  }

  // Pools: inputs and outputs, >= 128 MiB each, sliced into rotation sets.
  const size_t max_count = a.max_bytes / es;
  const size_t pool = std::max<size_t>(max_count * es, size_t(128) << 20);
  char *in_pool = nullptr, *out_pool = nullptr;
  float* ref = nullptr;  // fp32 reference sum (quantized modes above kRefElems)
  float* ref_in = nullptr;
  BRAID_CUDA_CHECK(cudaMalloc(&in_pool, pool));
  BRAID_CUDA_CHECK(cudaMalloc(&out_pool, pool));
  BRAID_CUDA_CHECK(cudaMalloc(&ref, max_count * sizeof(float)));
  BRAID_CUDA_CHECK(cudaMalloc(&ref_in, max_count * sizeof(float)));
  std::unique_ptr<SymmetricBuffer> sym_pool;  // the -sym algorithms' inputs, sliced like in_pool
  if (any_sym) {
    if (!team.peer_ok()) throw UsageError("-sym all-reduce algorithms need peer access", __FILE__, __LINE__);
    sym_pool = std::make_unique<SymmetricBuffer>(team, pool);
  }

  // Quantized inputs: a block of up to kRefElems values per rank from the distribution (the same
  // generator on every rank, so each rank can also compute the CPU reference for all ranks).
  const size_t block = std::min(kRefElems, max_count);
  std::vector<std::vector<uint16_t>> qin(W);
  for (int r = 0; r < W; ++r) {
    const auto f = braid::dist::generate(*dist, block, 0xF1A5C0DEULL, r);
    qin[r] = quant::to_bits(f, qdtype(a.dtype));
  }
  std::map<std::string, double> nrms_at_ref;  // per quantized algorithm: nRMS at the last bit-checked size

  if (rank == 0) {
    std::printf("# braid bench allreduce: %s, %d ranks, quantized inputs '%s', group %d, %d+%d iterations%s, median "
                "of the slowest rank; busbw on the original %s bytes\n",
                dtype_name(a.dtype), W, a.dist.c_str(), a.group, a.timing.warmup, a.timing.iters,
                a.graph ? " (CUDA graph replays)"
                : a.timing.batch > 1 ? (" (direct launches, " + std::to_string(a.timing.batch) +
                                        " back to back per event pair)").c_str()
                                     : " (direct launches)",
                dtype_name(a.dtype));
    std::printf("# %10s %-11s %10s %9s %9s %8s %8s %10s %9s  %s\n", "size(B)", "algo", "time(us)", "p10", "p90",
                "busbw", "speedup", "nrms", "max_err", "verdict");
  }
  int failures = 0;
  std::vector<std::pair<size_t, std::string>> fastest_exact;
  // The fastest verified algorithm per lossy precision and size, by its table name (quant, quant-nccl,
  // quant-1step), when the run measured one (kernel-suffixed and -sym variants are not table algorithms).
  std::map<std::string, std::vector<std::pair<size_t, std::string>>> fastest_quant;
  for (size_t bytes = a.min_bytes; bytes <= a.max_bytes;
       bytes = std::max(bytes + 1, static_cast<size_t>(bytes * a.factor))) {
    const size_t n = bytes / es;
    if (n == 0) continue;
    const size_t stride = (n * es + 255) / 256 * 256;
    const int sets = static_cast<int>(std::min<size_t>(rotation_sets(2 * stride), pool / stride));
    double nccl_us = 0;
    double best_exact = 1e30;
    std::string best_exact_name;
    std::map<std::string, std::pair<double, std::string>> best_quant;  // precision -> (time, table algo)
    bool have_qin = false, have_ref = false;
    for (const auto& name : algos) {
      ArAlgo al;
      Precision prec = Precision::kExact;
      QuantImpl impl = QuantImpl::kDefault;
      const bool sym = sym_algo(name, &al);
      if (!sym) parse_algo(name, &al, &prec, &impl);  // "int8-pipe" / "int8-classic": that kernel of the fused path
      AllReduceOptions opt;
      opt.algo = al;
      opt.precision = prec;
      opt.group = a.group;
      opt.quant_impl = impl;
      const bool quant_mode = prec != Precision::kExact;
      char* in_base = sym ? static_cast<char*>(sym_pool->local()) : in_pool;
      char* in0 = in_base;
      char* out0 = out_pool;
      // run(): set k of the rotation (the -sym two-shot reduces in place, so its "output" is its input)
      const bool sym_one = sym && (al == ArAlgo::kOneShot || al == ArAlgo::kOneShotCE);
      auto call = [&](int k) {
        if (sym)
          ar.run_symmetric(*sym_pool, n, a.dtype, s, al, sym_one ? out_pool + k * stride : nullptr, k * stride / es);
        else
          ar.run(in_pool + k * stride, out_pool + k * stride, n, a.dtype, s, opt);
      };
      char* result0 = sym && !sym_one ? in0 : out0;
      // ---- inputs
      if (!quant_mode) {
        for (int i = 0; i < sets; ++i) fill_pattern(in_base + i * stride, a.dtype, n, 0xA11ULL + n, rank, 0, s);
        have_qin = false;
      } else if (!have_qin) {
        const size_t first = std::min(n, block);
        BRAID_CUDA_CHECK(cudaMemcpyAsync(in0, qin[rank].data(), first * es, cudaMemcpyHostToDevice, s));
        for (size_t done = first; done < n;) {  // tile the block
          const size_t c = std::min(done, n - done);
          BRAID_CUDA_CHECK(cudaMemcpyAsync(in0 + done * es, in0, c * es, cudaMemcpyDeviceToDevice, s));
          done += c;
        }
        for (int i = 1; i < sets; ++i)
          BRAID_CUDA_CHECK(cudaMemcpyAsync(in_pool + i * stride, in0, n * es, cudaMemcpyDeviceToDevice, s));
        have_qin = true;
      }
      // ---- verify
      BRAID_CUDA_CHECK(cudaMemsetAsync(out0, 0xFF, n * es, s));
      call(0);
      team.synchronize(s, "all-reduce verification run");
      bool ok = true;
      double nrms = 0, max_err = 0;
      std::string why;
      if (!quant_mode) {
        const size_t wrong = count_wrong("allreduce", result0, a.dtype, n, 0xA11ULL + n, rank, W, s);
        ok = wrong == 0;
        if (!ok) why = std::to_string(wrong) + " wrong";
      } else {
        if (n <= block) {
          std::vector<std::vector<uint16_t>> ins(W);
          for (int r = 0; r < W; ++r) ins[r].assign(qin[r].begin(), qin[r].begin() + n);
          const auto expect =
              al == ArAlgo::kQuantOneStep && prec != Precision::kInt6  // INT6's one-step: the two-step's bits
                  ? quant::reference_allreduce_onestep(prec == Precision::kInt8 ? 8 : 4, a.group, qdtype(a.dtype), ins)
                  : quant::reference_allreduce(prec == Precision::kInt8   ? quant::Mode::int8
                                               : prec == Precision::kInt6 ? quant::Mode::int6
                                                                          : quant::Mode::int4,
                                               a.group, qdtype(a.dtype), ins);
          std::vector<uint16_t> got(n);
          BRAID_CUDA_CHECK(cudaMemcpy(got.data(), out0, n * es, cudaMemcpyDeviceToHost));
          size_t diff = 0;
          for (size_t i = 0; i < n; ++i)
            if (got[i] != expect[i] && ((got[i] | expect[i]) & 0x7fffu) != 0) ++diff;  // +0 == -0
          if (diff) {
            ok = false;
            why = std::to_string(diff) + " differ from CPU reference";
          }
        }
        // Error against an fp32 NCCL sum of the same inputs; identical on all ranks.
        if (!have_ref) {
          to_f32_kernel<<<528, 256, 0, s>>>(reinterpret_cast<const uint16_t*>(in0), ref_in, n,
                                            a.dtype == DType::kBF16 ? 0 : 1);
          BRAID_CHECK_LAUNCH();
          BRAID_NCCL_CHECK(ncclAllReduce(ref_in, ref, n, ncclFloat32, ncclSum, team.nccl(), s));
          team.synchronize(s, "fp32 reference");
          have_ref = true;
        }
        const ErrorStats e = device_error(out0, ref, n, a.dtype, s);
        nrms = e.nrms;
        max_err = e.max_abs;
        const double hmin = team.allreduce_min(static_cast<double>(e.hash));
        const double hmax = team.allreduce_max(static_cast<double>(e.hash));
        if (hmin != hmax) {
          ok = false;
          why += " ranks differ";
        }
        if (e.nans) {
          ok = false;
          why += " NaN";
        }
        if (n <= block) {
          nrms_at_ref[name] = nrms;
        } else if (nrms_at_ref.count(name) && nrms > 1.2 * nrms_at_ref[name] + 1e-12) {
          ok = false;
          why += " error above the bit-checked size's";
        }
      }
      int all_ok = ok ? 1 : 0;
      BRAID_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &all_ok, 1, MPI_INT, MPI_MIN, team.mpi()));
      ok = all_ok != 0;
      // ---- time
      std::vector<double> us;
      // Host time to enqueue one call during the timed direct launches (the call alone, not the events
      // around it): where it exceeds the GPU time, the direct-launch rows measure the host, not the kernel.
      double host_sum_us = 0;
      int host_calls = 0;
      // (The -sym two-shot keeps reducing its sets in place: the values grow by W per call and may reach
      // inf; the time does not depend on them. Verified above, before any timing.)
      if (a.graph) {  // one graph of `sets` calls over the rotating buffers
        us = time_graph_iterations(&team, s, a.timing, sets, [&](int k) { call(k); });
      } else {
        us = time_iterations(&team, s, a.timing, [&](int i) {
          const auto t0 = std::chrono::steady_clock::now();
          call(i % sets);
          if (i >= a.timing.warmup) {
            host_sum_us += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
            ++host_calls;
          }
        });
      }
      // The slowest rank's mean (direct launches only; -1 in graph replays, where one launch replays `sets` calls).
      const double host_us = host_calls ? team.allreduce_max(host_sum_us / host_calls) : -1.0;
      const Stats st = summarize(us);
      if (name == "nccl") nccl_us = st.median_us;
      if (!quant_mode && !sym && ok && st.median_us < best_exact) {  // (the table serves run(): no -sym)
        best_exact = st.median_us;
        best_exact_name = name;
      }
      if (quant_mode && !sym && ok && impl == QuantImpl::kDefault) {
        auto& b = best_quant[precision_name(prec)];
        if (b.second.empty() || st.median_us < b.first) b = {st.median_us, algo_name(al)};
      }
      const double algbw = n * es / (st.median_us * 1e-6) / 1e9;
      const double busbw = algbw * busbw_factor("allreduce", W);
      const double speedup = nccl_us > 0 ? nccl_us / st.median_us : 1.0;
      if (!ok) ++failures;
      if (rank == 0) {
        std::printf("  %10zu %-11s %10.2f %9.2f %9.2f %8.1f %7.2fx %10.3g %9.3g  %s%s\n", n * es, name.c_str(),
                    st.median_us, st.p10_us, st.p90_us, busbw, speedup, nrms, max_err, ok ? "OK" : "FAILED",
                    why.c_str());
        Json j;
        j.add("op", "allreduce").add("algo", name).add("dtype", dtype_name(a.dtype)).add("world", W)
            .add("bytes", n * es).add("count", n).add("time_us", st.median_us).add("p10_us", st.p10_us)
            .add("p90_us", st.p90_us).add("iters", st.iters).add("algbw", algbw).add("busbw", busbw)
            .add("baseline_algo", "nccl").add("baseline_time_us", nccl_us).add("speedup", speedup)
            .add("correct", ok).add("precision", precision_name(prec)).add("group", a.group)
            .add("dist", quant_mode ? a.dist : std::string("half-integers")).add("nrms", nrms).add("max_err", max_err)
            .add("buffer_sets", sets).add("graph", a.graph).add("batch", a.graph ? 1 : a.timing.batch)
            .add("lead_us", a.timing.lead_us).add("host_enqueue_us", host_us).add_context(a.ctx);
        append_jsonl(a.json, j.str());
      }
      // ---- ablation: each phase of the NCCL-transport quantized path alone (same buffers, same grid)
      if (a.phases && al == ArAlgo::kQuantNccl && !a.graph) {
        double sum = 0;
        std::string line;
        for (unsigned ph : {kPhaseQuantize, kPhaseExchange, kPhaseReduce, kPhaseGather, kPhaseDequant}) {
          AllReduceOptions po = opt;
          po.quant_phases = ph;
          const Stats ps = summarize(time_iterations(&team, s, a.timing, [&](int i) {
            const int k = i % sets;
            ar.run(in_pool + k * stride, out_pool + k * stride, n, a.dtype, s, po);
          }));
          sum += ps.median_us;
          char buf[64];
          std::snprintf(buf, sizeof buf, " %s %.2f", quant_phase_name(ph), ps.median_us);
          line += buf;
          if (rank == 0) {
            Json j;
            j.add("op", "allreduce-phase").add("algo", name + ":" + quant_phase_name(ph)).add("dtype", dtype_name(a.dtype))
                .add("world", W).add("bytes", n * es).add("count", n).add("time_us", ps.median_us)
                .add("p10_us", ps.p10_us).add("p90_us", ps.p90_us).add("iters", ps.iters).add("full_time_us", st.median_us)
                .add("precision", precision_name(prec)).add("group", a.group).add("buffer_sets", sets).add_context(a.ctx);
            append_jsonl(a.json, j.str());
          }
        }
        if (rank == 0)
          std::printf("  %10s phases (us, each alone):%s; sum %.2f vs %.2f together\n", "", line.c_str(), sum,
                      st.median_us);
      }
      // ---- one-step phase stamps (--phases): each block's quantize / wait / pull in the last of 8
      // back-to-back calls, 5 times; per rank, us: median over the 5 of the blocks' median (and max).
      if (a.phases && al == ArAlgo::kQuantOneStep && !a.graph) {
        ar.set_onestep_profile(true);
        std::vector<double> quant_med, wait_med, pull_med, quant_max, wait_max, pull_max, span, start_spread;
        auto med = [](std::vector<double> v) {
          if (v.empty()) return 0.0;
          std::sort(v.begin(), v.end());
          return v[v.size() / 2];
        };
        auto mx = [](const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); };
        for (int rep = 0; rep < 5; ++rep) {
          team.barrier();  // both ranks' devices idle: the 8 calls start together (else "wait" shows host skew)
          for (int i = 0; i < 8; ++i) call((rep * 8 + i) % sets);
          const std::vector<uint64_t> t = ar.onestep_profile();
          const size_t B = t.size() / 4;
          if (B == 0) break;
          std::vector<double> dq(B), dw(B), dp(B);
          uint64_t first = ~0ull, last_start = 0, end = 0;
          for (size_t b = 0; b < B; ++b) {
            dq[b] = (t[4 * b + 1] - t[4 * b]) * 1e-3;
            dw[b] = (t[4 * b + 2] - t[4 * b + 1]) * 1e-3;
            dp[b] = (t[4 * b + 3] - t[4 * b + 2]) * 1e-3;
            first = std::min(first, t[4 * b]);
            last_start = std::max(last_start, t[4 * b]);
            end = std::max(end, t[4 * b + 3]);
          }
          quant_med.push_back(med(dq));
          wait_med.push_back(med(dw));
          pull_med.push_back(med(dp));
          quant_max.push_back(mx(dq));
          wait_max.push_back(mx(dw));
          pull_max.push_back(mx(dp));
          span.push_back((end - first) * 1e-3);
          start_spread.push_back((last_start - first) * 1e-3);
        }
        team.synchronize(s, "one-step phase stamps");
        ar.set_onestep_profile(false);
        std::printf("  %10s rank %d %s stamps (us; block median / max): quantize %.2f / %.2f, wait %.2f / %.2f, "
                    "pull %.2f / %.2f; span %.2f, block starts over %.2f\n",
                    "", rank, name.c_str(), med(quant_med), med(quant_max), med(wait_med), med(wait_max),
                    med(pull_med), med(pull_max), med(span), med(start_spread));
        std::fflush(stdout);
        if (rank == 0) {
          Json j;
          j.add("op", "allreduce-stamps").add("algo", name).add("dtype", dtype_name(a.dtype)).add("world", W)
              .add("bytes", n * es).add("count", n).add("quantize_us", med(quant_med))
              .add("quantize_max_us", med(quant_max)).add("wait_us", med(wait_med)).add("wait_max_us", med(wait_max))
              .add("pull_us", med(pull_med)).add("pull_max_us", med(pull_max)).add("span_us", med(span))
              .add("start_spread_us", med(start_spread)).add("full_time_us", st.median_us).add("group", a.group)
              .add_context(a.ctx);
          append_jsonl(a.json, j.str());
        }
      }
    }
    fastest_exact.emplace_back(n * es, best_exact_name);
    for (const auto& [p, b] : best_quant) fastest_quant[p].emplace_back(n * es, b.second);
    if (bytes >= a.max_bytes) break;
  }
  if (rank == 0 && !a.write_table.empty()) {
    std::FILE* f = std::fopen(a.write_table.c_str(), "w");
    if (!f) throw UsageError("cannot write " + a.write_table, __FILE__, __LINE__);
    std::fprintf(f, "# braid all-reduce tuning table, measured by: %s\n# card %s, %s, commit %s\n", a.ctx.command.c_str(),
                 a.ctx.card.c_str(), a.ctx.date.c_str(), a.ctx.commit.c_str());
    std::fprintf(f, "# Columns: world dtype precision max_bytes algo (first match wins; '*' matches anything)\n");
    auto rows = [&](const char* prec, const std::vector<std::pair<size_t, std::string>>& v) {
      for (size_t i = 0; i < v.size(); ++i) {
        // A row covers sizes up to the midpoint (geometric) towards the next measured size.
        if (i + 1 < v.size() && v[i + 1].second == v[i].second) continue;
        const size_t upto =
            i + 1 < v.size() ? static_cast<size_t>(std::sqrt(double(v[i].first) * v[i + 1].first)) : SIZE_MAX;
        std::fprintf(f, "%d\t%s\t%s\t%zu\t%s\n", W, dtype_name(a.dtype), prec, upto, v[i].second.c_str());
      }
    };
    rows("exact", fastest_exact);
    for (const auto& [p, v] : fastest_quant) rows(p.c_str(), v);
    std::fprintf(f, "*\t*\texact\t%zu\tnccl\n*\t*\tint8\t%zu\tquant\n*\t*\tint6\t%zu\tquant\n*\t*\tint4\t%zu\tquant\n",
                 SIZE_MAX, SIZE_MAX, SIZE_MAX, SIZE_MAX);
    std::fclose(f);
    std::printf("# wrote %s\n", a.write_table.c_str());
  }
  cudaFree(in_pool);
  cudaFree(out_pool);
  cudaFree(ref);
  cudaFree(ref_in);
  if (rank == 0) std::printf("# %d row(s) failed verification\n", failures);
  return failures;
}

}  // namespace braid::bench
