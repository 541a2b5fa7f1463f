// `braid bench comm`: the layer's Comm implementations (NCCL; braid's peer comm on SM kernels or on the copy
// engines) per collective and size, verified, timed alone and beside a cuBLAS GEMM on a second stream — what a
// strand's collective costs the other strand's compute (DHelix), and how much of it the pair hides.
// `--comm nccl-ce`: NCCL's own copy-engine collectives (NCCL >= 2.28: a zero-CTA communicator, Team::nccl_zero_cta,
// between buffers registered as symmetric windows, NcclWindow) — the all-gather in place and the all-to-all, the two
// it offers; no kernel at all, the handshakes are stream memory operations, so nothing of it needs an SM. It runs on
// the bench's own window buffers (not through a Comm: the layer's buffers are not windows); the reductions are skipped.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "braid/bench.hpp"
#include "braid/errors.hpp"
#include "braid/model.hpp"
#include "braid/runtime.hpp"

namespace braid::model {
namespace {

struct Args {
  std::vector<std::string> comms = {"nccl", "peer", "peer-ce"};
  std::vector<std::string> ops = {"allgather", "reducescatter", "allreduce", "alltoall"};
  size_t min_bytes = size_t(1) << 20, max_bytes = size_t(256) << 20;
  double factor = 4;
  bench::GemmShape gemm{8192, 8192, 8192};
  bool corun = true;
  int gemm_sm_reserve = 0;  // SMs the GEMM leaves free (cublasSetSmCountTarget)
  int throttle = 0;         // > 0: NCCL on a communicator of its own capped to this many CTAs (make_nccl_comm_split)
  bool ce_in_place = true;  // nccl-ce's all-gather in place (else out of place: NCCL copies this rank's part itself)
  bench::TimingOptions timing{5, 20};
  std::string json;
};

Args parse(int argc, char** argv) {
  Args a;
  bench::for_each_option(argc, argv, [&](const std::string& k, const bench::OptionValue& val) {
    if (k == "--comm") a.comms = bench::split_list(val());
    else if (k == "--op") a.ops = bench::split_list(val());
    else if (k == "-b") a.min_bytes = bench::parse_size(val());
    else if (k == "-e") a.max_bytes = bench::parse_size(val());
    else if (k == "-f") a.factor = std::stod(val());
    else if (k == "--gemm") a.gemm = bench::parse_gemm_shape(val());
    else if (k == "--no-gemm") a.corun = false;
    else if (k == "--gemm-sm-reserve") a.gemm_sm_reserve = std::stoi(val());
    else if (k == "--throttle") a.throttle = std::stoi(val());
    else if (k == "--ce-in-place") a.ce_in_place = std::stoi(val()) != 0;
    else if (k == "--iters") a.timing.iters = std::stoi(val());
    else if (k == "--warmup") a.timing.warmup = std::stoi(val());
    else if (k == "--json") a.json = val();
    else if (!k.empty() && k[0] == '-') throw UsageError("bench comm: unknown option " + k, __FILE__, __LINE__);
    // bare words (bench, comm) belong to the CLI
  });
  if (a.factor <= 1 || a.min_bytes == 0 || a.max_bytes < a.min_bytes || a.timing.iters < 1 || a.timing.warmup < 0)
    throw UsageError("bench comm: needs -f > 1, 0 < -b <= -e, --iters >= 1, --warmup >= 0", __FILE__, __LINE__);
  for (const auto& c : a.comms) {
    PeerCommOptions::Engine e;
    if (c != "nccl" && c != "nccl-ce" && c != "allreducer" && !peer_engine_from_name(c, &e))
      throw UsageError("bench comm: --comm takes nccl, nccl-ce, peer, peer-ce, allreducer (got '" + c + "')", __FILE__,
                       __LINE__);
  }
  for (const auto& o : a.ops)
    if (o != "allgather" && o != "reducescatter" && o != "allreduce" && o != "alltoall")
      throw UsageError("bench comm: --op takes allgather, reducescatter, allreduce, alltoall (got '" + o + "')",
                       __FILE__, __LINE__);
  if (a.gemm.m < 1 || a.gemm.n < 1 || a.gemm.k < 1) throw UsageError("bench comm: --gemm M,N,K >= 1", __FILE__, __LINE__);
  if (a.gemm_sm_reserve < 0 || a.throttle < 0)
    throw UsageError("bench comm: --gemm-sm-reserve and --throttle >= 0", __FILE__, __LINE__);
  return a;
}

using Counts = bench::CollectiveCounts;

// One call of `op` on `comm` (the all-to-all as all_to_all_v with equal segments).
void enqueue(Comm& comm, const std::string& op, const void* in, void* out, const Counts& c, cudaStream_t s) {
  const int W = comm.size();
  if (op == "allreduce") return comm.all_reduce(in, out, c.in, DType::kBF16, s);
  if (op == "reducescatter") return comm.reduce_scatter(in, out, c.out, DType::kBF16, s);
  if (op == "allgather") return comm.all_gather(in, out, c.in, DType::kBF16, s);
  const size_t chunk = c.in / size_t(W);
  std::vector<size_t> counts(W, chunk), displs(W);
  for (int r = 0; r < W; ++r) displs[r] = size_t(r) * chunk;
  comm.all_to_all_v(in, counts.data(), displs.data(), out, counts.data(), displs.data(), DType::kBF16, s);
}

// NCCL's copy-engine collectives (`--comm nccl-ce`) on window buffers: the all-gather in place (this rank's part
// already at its offset of `out`, so no local copy, which the driver would run as a kernel), the all-to-all from `in`.
void enqueue_nccl_ce(ncclComm_t ce, int rank, int W, const std::string& op, bool in_place, const void* in, void* out,
                     const Counts& c, cudaStream_t s) {
  auto* o = static_cast<__nv_bfloat16*>(out);
  if (op == "allgather")
    BRAID_NCCL_CHECK(ncclAllGather(in_place ? o + size_t(rank) * c.in : in, o, c.in, ncclBfloat16, ce, s));
  else
    BRAID_NCCL_CHECK(ncclAlltoAll(in, o, c.in / size_t(W), ncclBfloat16, ce, s));
}

double median(std::vector<double> v) { return bench::summarize(std::move(v)).median_us; }

// The load beside the collective: C[M,N] = A[M,K] · B[K,N] in bf16 with fp32 accumulation (cuBLAS), on its stream.
struct Gemm {
  bench::GemmShape shape;
  cublasHandle_t blas = nullptr;
  std::unique_ptr<bench::DeviceBuffer> a, b, c;
  Gemm(bench::GemmShape g, int rank, int sm_reserve, cudaStream_t s) : shape(g) {
    BRAID_CUBLAS_CHECK(cublasCreate(&blas));
    BRAID_CUBLAS_CHECK(cublasSetStream(blas, s));
    if (sm_reserve > 0) {
      int dev = 0, sms = 0;
      BRAID_CUDA_CHECK(cudaGetDevice(&dev));
      BRAID_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
      BRAID_REQUIRE(sm_reserve < sms, "bench comm: --gemm-sm-reserve must leave the GEMM at least one SM");
      BRAID_CUBLAS_CHECK(cublasSetSmCountTarget(blas, sms - sm_reserve));
    }
    a = std::make_unique<bench::DeviceBuffer>(size_t(g.m * g.k) * 2);  // (M, K) bf16
    b = std::make_unique<bench::DeviceBuffer>(size_t(g.k * g.n) * 2);  // (K, N) bf16
    c = std::make_unique<bench::DeviceBuffer>(size_t(g.m * g.n) * 2);  // (M, N) bf16
    bench::fill_pattern(a->p, DType::kBF16, size_t(g.m * g.k), 31, rank, 0, s);
    bench::fill_pattern(b->p, DType::kBF16, size_t(g.k * g.n), 37, rank, 0, s);
  }
  ~Gemm() { cublasDestroy(blas); }
  void run() {
    const float one = 1, zero = 0;
    // Column-major view: C^T (N x M) = B^T (N x K) · A^T (K x M).
    BRAID_CUBLAS_CHECK(cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, int(shape.n), int(shape.m), int(shape.k), &one,
                                    b->p, CUDA_R_16BF, int(shape.n), a->p, CUDA_R_16BF, int(shape.k), &zero, c->p,
                                    CUDA_R_16BF, int(shape.n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
  double tflop() const { return 2.0 * double(shape.m) * double(shape.n) * double(shape.k) / 1e12; }
};

struct Corun {
  double gemm_us = 0, comm_us = 0, makespan_us = 0;  // medians of the slowest rank
};

// `calls` collectives on cs beside one GEMM on gs, both from the same event; the iteration ends when both have.
Corun time_corun(Team& team, cudaStream_t cs, cudaStream_t gs, Gemm& gemm, const bench::TimingOptions& opt, int calls,
                 const std::function<void()>& comm_call) {
  const int n = opt.warmup + opt.iters;
  std::vector<cudaEvent_t> ev(size_t(n) * 4);
  for (auto& e : ev) BRAID_CUDA_CHECK(cudaEventCreate(&e));
  team.barrier();
  for (int i = 0; i < n; ++i) {
    if (i == opt.warmup && opt.lead_us > 0) bench::gpu_idle(cs, opt.lead_us);
    cudaEvent_t* e = &ev[size_t(i) * 4];  // start, GEMM done, collectives done, both done
    BRAID_CUDA_CHECK(cudaEventRecord(e[0], cs));
    BRAID_CUDA_CHECK(cudaStreamWaitEvent(gs, e[0], 0));
    gemm.run();
    BRAID_CUDA_CHECK(cudaEventRecord(e[1], gs));
    for (int k = 0; k < calls; ++k) comm_call();
    BRAID_CUDA_CHECK(cudaEventRecord(e[2], cs));
    BRAID_CUDA_CHECK(cudaStreamWaitEvent(cs, e[1], 0));
    BRAID_CUDA_CHECK(cudaEventRecord(e[3], cs));
  }
  team.synchronize(cs, "bench comm co-run");
  std::vector<double> g, c, m;
  for (int i = opt.warmup; i < n; ++i) {
    cudaEvent_t* e = &ev[size_t(i) * 4];
    float t1, t2, t3;
    BRAID_CUDA_CHECK(cudaEventElapsedTime(&t1, e[0], e[1]));
    BRAID_CUDA_CHECK(cudaEventElapsedTime(&t2, e[0], e[2]));
    BRAID_CUDA_CHECK(cudaEventElapsedTime(&t3, e[0], e[3]));
    g.push_back(t1 * 1e3), c.push_back(t2 * 1e3), m.push_back(t3 * 1e3);
  }
  for (auto e : ev) cudaEventDestroy(e);
  const std::vector<double> worst = team.allreduce_max(std::vector<double>{median(g), median(c), median(m)});
  return {worst[0], worst[1], worst[2]};
}

std::unique_ptr<Comm> make(Team& team, const std::string& name, int throttle) {
  if (name == "nccl") return throttle > 0 ? make_nccl_comm_split(team, throttle) : make_nccl_comm(team);
  // braid::AllReducer's exact all-reduce (the entry point's table; NCCL for the other collectives): with
  // BRAID_AR_PDL / BRAID_AR_REMOTE_DOMAIN its kernels' launch attributes beside the GEMM.
  if (name == "allreducer") return make_allreducer_comm(team);
  PeerCommOptions o;
  peer_engine_from_name(name, &o.engine);
  return make_peer_comm(team, o);
}

}  // namespace

int bench_comm_main(Team& team, int argc, char** argv, const bench::Context& ctx) {
  const Args a = parse(argc, argv);
  const bool root = team.rank() == 0;
  const int W = team.size();
  if (team.shared_gpu()) {
    BRAID_REQUIRE(a.json.empty(), "bench comm: a shared-GPU team (BRAID_SHARED_GPU=1) checks correctness only: no "
                                  "--json (its times are not measurements)");
    if (root)
      std::printf("# SHARED GPU (BRAID_SHARED_GPU=1): %d ranks time-slice one GPU; the verifications are real, every "
                  "time below is NOT a measurement\n", W);
  }
  cudaStream_t cs = team.stream(), gs = nullptr;
  BRAID_CUDA_CHECK(cudaStreamCreateWithFlags(&gs, cudaStreamNonBlocking));
  std::unique_ptr<Gemm> gemm;
  double gemm_alone = 0;
  if (a.corun) {
    gemm = std::make_unique<Gemm>(a.gemm, team.rank(), a.gemm_sm_reserve, gs);
    gemm_alone = median(bench::time_iterations(&team, gs, a.timing, [&](int) { gemm->run(); }));
  }
  const Counts cmax = bench::collective_counts("allgather", a.max_bytes, 2, W);  // every op's buffers fit max_bytes
  bench::DeviceBuffer in(std::max(cmax.in, cmax.out) * 2), out(std::max(cmax.in, cmax.out) * 2);
  if (root) {
    std::printf("# braid bench comm: %d ranks, bf16, %d warm-up + %d timed iterations, median of the slowest rank; "
                "verified before timing and again after the co-run; NCCL %s\n",
                W, a.timing.warmup, a.timing.iters,
                a.throttle > 0 ? ("capped to " + std::to_string(a.throttle) + " CTAs").c_str() : "uncapped");
    if (a.corun)
      std::printf("# beside the collectives: cuBLAS bf16 GEMM %lldx%lldx%lld on a second stream (leaving %d SMs), alone "
                  "%.1f us (%.0f TFLOP/s); k calls of the collective co-run with one GEMM (k ~ GEMM / collective time); hidden = "
                  "(GEMM + k x collective alone - makespan) / the shorter of the two\n",
                  (long long)a.gemm.m, (long long)a.gemm.n, (long long)a.gemm.k, a.gemm_sm_reserve, gemm_alone,
                  gemm->tflop() / (gemm_alone * 1e-6));
    std::printf("# %-8s %-13s %10s %9s %8s %8s %7s | %4s %9s %9s %10s %7s %7s %7s\n", "comm", "op", "size(B)", "time(us)",
                "algbw", "busbw", "#wrong", "k", "gemm(us)", "coll(us)", "makespan", "gemm-x", "coll-x", "hidden");
  }
  int failed = 0;
  for (const auto& name : a.comms) {
    if (name == "nccl" && !team.has_nccl()) {
      if (root) std::printf("# nccl: skipped (this team has no NCCL: shared GPU)\n");
      continue;
    }
    const bool nccl_ce = name == "nccl-ce";
    if (nccl_ce && (!team.has_nccl() || team.shared_gpu() || W < 2 || !team.peer_ok())) {
      if (root) std::printf("# nccl-ce: skipped (needs NCCL and two or more GPUs of one node with peer access)\n");
      continue;
    }
    std::unique_ptr<Comm> comm;
    ncclComm_t ce = nullptr;
    std::unique_ptr<NcclWindow> win_in, win_out;  // nccl-ce: the bench's buffers as symmetric windows
    void* in_p = in.p;
    void* out_p = out.p;
    if (nccl_ce) {
      ce = team.nccl_zero_cta();
      if (root)
        std::printf("# nccl-ce: NCCL's copy-engine collectives (zero-CTA communicator, symmetric windows); all-gather %s\n",
                    a.ce_in_place ? "in place" : "out of place (NCCL copies this rank's part)");
      win_in = std::make_unique<NcclWindow>(ce, std::max(cmax.in, cmax.out) * 2);
      win_out = std::make_unique<NcclWindow>(ce, std::max(cmax.in, cmax.out) * 2);
      in_p = win_in->get(), out_p = win_out->get();
    } else {
      comm = make(team, name, a.throttle);
    }
    for (const auto& op : a.ops)
      for (size_t bytes = a.min_bytes; bytes <= a.max_bytes;
           bytes = std::max(bytes + 1, size_t(double(bytes) * a.factor))) {
        if (nccl_ce && op != "allgather" && op != "alltoall") {
          if (root) std::printf("  %-8s %-13s (NCCL's copy engines offer no reduction: skipped)\n", name.c_str(), op.c_str());
          break;
        }
        const Counts c = bench::collective_counts(op, bytes, 2, W);
        if (c.in == 0 || c.out == 0) continue;
        const uint64_t seed = 0xC0A1D000ULL + bytes;
        // nccl-ce's in-place all-gather: this rank's input is its part of the output, refilled before every check
        // (the poison overwrites it); the peers' parts arrive.
        const bool in_place = nccl_ce && op == "allgather" && a.ce_in_place;
        void* const src = in_place ? static_cast<void*>(static_cast<char*>(out_p) + size_t(team.rank()) * c.in * 2) : in_p;
        auto fill = [&]() {
          bench::fill_pattern(src, DType::kBF16, c.in, seed, team.rank(), 0, cs);
        };
        auto poison = [&]() {
          BRAID_CUDA_CHECK(cudaMemsetAsync(out_p, 0xFF, c.out * 2, cs));  // NaN
          if (in_place) fill();
        };
        auto check = [&]() {
          unsigned long long w = bench::count_wrong(op, out_p, DType::kBF16, c.out, seed, team.rank(), W, cs);
          BRAID_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &w, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, team.mpi()));
          return size_t(w);
        };
        fill();
        poison();
        const auto call = [&]() {
          if (nccl_ce) enqueue_nccl_ce(ce, team.rank(), W, op, in_place, in_p, out_p, c, cs);
          else enqueue(*comm, op, in_p, out_p, c, cs);
        };
        call();
        team.synchronize(cs, "bench comm verification");
        size_t wrong = check();
        const bench::Stats st = bench::summarize(bench::time_iterations(&team, cs, a.timing, [&](int) { call(); }));
        const size_t size_bytes = std::max(c.in, c.out) * 2;
        const double algbw = double(size_bytes) / (st.median_us * 1e-6) / 1e9;
        const double busbw = algbw * bench::busbw_factor(op, W);
        Corun co;
        int k = 0;
        double hidden = 0;
        if (a.corun) {
          k = int(std::clamp(gemm_alone / st.median_us + 0.5, 1.0, 64.0));
          poison();
          co = time_corun(team, cs, gs, *gemm, a.timing, k, call);
          wrong += check();  // the output of the last co-run call
          const double coll = k * st.median_us;
          hidden = (gemm_alone + coll - co.makespan_us) / std::min(gemm_alone, coll);
        }
        failed += wrong != 0;
        if (root) {
          std::printf("  %-8s %-13s %10zu %9.1f %8.1f %8.1f %7zu", name.c_str(), op.c_str(), size_bytes, st.median_us,
                      algbw, busbw, wrong);
          if (a.corun)
            std::printf(" | %4d %9.1f %9.1f %10.1f %7.3f %7.3f %7.3f", k, co.gemm_us, co.comm_us, co.makespan_us,
                        co.gemm_us / gemm_alone, co.comm_us / (k * st.median_us), hidden);
          std::printf("%s\n", wrong ? "  FAILED" : "");
          bench::Json j;
          j.add("op", op).add("algo", name).add("dtype", "bf16").add("world", W).add("bytes", size_bytes)
              .add("in_place", in_place)
              .add("throttle_ctas", name == "nccl" ? a.throttle : 0)
              .add("count", std::max(c.in, c.out)).add("time_us", st.median_us).add("p10_us", st.p10_us)
              .add("p90_us", st.p90_us).add("iters", st.iters).add("algbw", algbw).add("busbw", busbw)
              .add("correct", wrong == 0).add("wrong", wrong);
          if (a.corun)
            j.add("gemm_m", a.gemm.m).add("gemm_n", a.gemm.n).add("gemm_k", a.gemm.k).add("gemm_us", gemm_alone)
                .add("gemm_sm_reserve", a.gemm_sm_reserve)
                .add("corun_calls", k).add("gemm_corun_us", co.gemm_us).add("comm_corun_us", co.comm_us)
                .add("makespan_us", co.makespan_us).add("gemm_slowdown", co.gemm_us / gemm_alone)
                .add("comm_slowdown", co.comm_us / (k * st.median_us)).add("hidden", hidden);
          j.add_context(ctx);
          if (!team.shared_gpu()) bench::append_jsonl(a.json, j.str());
        }
        if (bytes >= a.max_bytes) break;
      }
    team.synchronize(cs, "bench comm");
    win_out.reset(), win_in.reset();  // collective, in the same order on every rank
  }
  if (a.corun) {
    const double again = median(bench::time_iterations(&team, gs, a.timing, [&](int) { gemm->run(); }));
    if (root) std::printf("# GEMM alone again at the end: %.1f us (%.1f at the start)\n", again, gemm_alone);
  }
  gemm.reset();
  cudaStreamDestroy(gs);
  if (root) std::printf("# %s\n", failed ? "FAILED: a collective returned wrong data" : "every row verified");
  return failed ? 3 : 0;
}

}  // namespace braid::model
