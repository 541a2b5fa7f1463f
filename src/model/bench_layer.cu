// `braid bench layer`: verify the layer on a small shape against the CPU reference, then time forward
// and backward at the asked shape, per operator and whole, and report MFU and tokens/s.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "braid/bench.hpp"
#include "braid/errors.hpp"
#include "braid/model.hpp"
#include "braid/runtime.hpp"
#include "kernels.cuh"

namespace braid::model {
namespace {

constexpr double kPeakFlops = 989e12;  // H100 SXM dense bf16

struct Args {
  std::string model = "llama3-8b", ar = "nccl", json;
  std::string comm;  // "nccl" (with --ar), "peer" or "peer-ce" (make_peer_comm); empty: NCCL, or peer in a shared-GPU team
  int tp = 0, seq = 0, mb = 0, iters = 20, warmup = 5;
  bool moe = false, backward = false, sp = true, per_op = true;
  double capacity = 0;  // MoE capacity factor (ModelConfig::capacity)
  bool device_sizes = false;  // --moe-sizes device (ModelConfig::moe_device_sizes)
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto val = [&]() -> std::string {
      BRAID_REQUIRE(i + 1 < argc, "bench layer: " + k + " needs a value");
      return argv[++i];
    };
    if (k == "--model") a.model = val();
    else if (k == "--tp") a.tp = std::stoi(val());
    else if (k == "--seq") a.seq = std::stoi(val());
    else if (k == "--mb" || k == "--micro-batch") a.mb = std::stoi(val());
    else if (k == "--iters") a.iters = std::stoi(val());
    else if (k == "--warmup") a.warmup = std::stoi(val());
    else if (k == "--json") a.json = val();
    else if (k == "--ar") a.ar = val();
    else if (k == "--comm") a.comm = val();
    else if (k == "--moe") a.moe = true;
    else if (k == "--backward") a.backward = true;
    else if (k == "--no-sp") a.sp = false;
    else if (k == "--no-per-op") a.per_op = false;
    else if (k == "--capacity") a.capacity = std::stod(val());
    else if (k == "--moe-sizes") {
      const std::string v = val();
      BRAID_REQUIRE(v == "host" || v == "device", "bench layer: --moe-sizes host|device");
      a.device_sizes = v == "device";
    }
    // other words (bench, layer, ...) belong to the CLI
  }
  return a;
}

double rel_l2_host(const std::vector<uint16_t>& got, const std::vector<double>& ref, size_t off) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const uint32_t u = uint32_t(got[i]) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    const double d = f - ref[off + i];
    if (!(d == d)) return INFINITY;
    num += d * d, den += ref[off + i] * ref[off + i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

// Forward + backward of a small shape of the same kind against the float64 reference; returns the worst
// relative L2 error over y, dx and every weight-gradient shard of this rank.
double verify(Comm& comm, MPI_Comm mpi, const Parallel& p, bool moe, double capacity, bool device_sizes) {
  ModelConfig c = preset(moe ? "tiny-moe" : "tiny");
  c.hidden = 256, c.heads = 8, c.kv_heads = 4, c.seq = 100, c.ffn = moe ? 128 : 512;
  c.capacity = moe ? capacity : 0;
  c.moe_device_sizes = moe && device_sizes;
  const int rank = comm.rank();
  Layer layer(c, p, comm);
  const auto w = init_weights(c, 5);
  layer.load_weights(w);
  const size_t n = size_t(c.tokens()) * c.hidden, rows = size_t(layer.local_tokens()), H = size_t(c.hidden);
  const auto x = random_values(n, 6, 1.0), dy = random_values(n, 7, 1.0);
  auto ref = reference_layer(c, w, x, dy, nullptr, layer.local_tokens());
  const size_t off = (rows == size_t(c.tokens()) ? 0 : size_t(rank) * rows) * H;
  auto bits = [&](const std::vector<double>& v) {
    std::vector<uint16_t> o(rows * H);
    for (size_t i = 0; i < o.size(); ++i) {
      float f = float(v[off + i]);  // values are bf16 already
      uint32_t u;
      std::memcpy(&u, &f, 4);
      o[i] = uint16_t(u >> 16);
    }
    return o;
  };
  const auto xb = bits(x), dyb = bits(dy);
  BRAID_CUDA_CHECK(cudaMemcpy(layer.x(), xb.data(), xb.size() * 2, cudaMemcpyHostToDevice));
  BRAID_CUDA_CHECK(cudaMemcpy(layer.dy(), dyb.data(), dyb.size() * 2, cudaMemcpyHostToDevice));
  layer.forward(nullptr);
  layer.backward(nullptr);
  BRAID_CUDA_CHECK(cudaDeviceSynchronize());
  if (moe) {
    // Top-k is discontinuous: a near-tie token that bf16 logits route to another expert moves every
    // gradient summed over tokens by several percent (docs/layer.md). Check the GPU's routes are the
    // float64 top-k up to near ties, then compare with the reference on the GPU's routes.
    const auto local = layer.local_routes();
    std::vector<int> routes(local.size() * size_t(comm.size()));
    BRAID_REQUIRE(routes.size() == size_t(c.tokens() * c.top_k), "bench layer: MoE routes of every rank");
    BRAID_MPI_CHECK(MPI_Allgather(local.data(), int(local.size()), MPI_INT, routes.data(), int(local.size()), MPI_INT, mpi));
    if (route_deficit(c, ref, routes) > 2e-2) return INFINITY;  // routed away from a clearly better expert
    ref = reference_layer(c, w, x, dy, &routes, layer.local_tokens());
  }
  std::vector<uint16_t> y(rows * H), dx(rows * H);
  BRAID_CUDA_CHECK(cudaMemcpy(y.data(), layer.y(), y.size() * 2, cudaMemcpyDeviceToHost));
  BRAID_CUDA_CHECK(cudaMemcpy(dx.data(), layer.dx(), dx.size() * 2, cudaMemcpyDeviceToHost));
  double worst = std::max(rel_l2_host(y, ref.y, off), rel_l2_host(dx, ref.dx, off));
  const auto g = layer.download_grads();
  const auto s = shard_of(ref.grad, c, p, rank);
  for (const auto& name : field_names(c)) {
    const auto &a = *field(g, name), &b = *field(s, name);
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) num += (a[i] - b[i]) * (a[i] - b[i]), den += b[i] * b[i];
    const double e = std::sqrt(num / std::max(den, 1e-300));
    worst = std::max(worst, e == e ? e : INFINITY);
  }
  return worst;
}

}  // namespace

int bench_layer_main(Team& team, int argc, char** argv, const bench::Context& ctx) {
  const Args a = parse(argc, argv);
  ModelConfig c = preset(a.model);
  if (a.seq) c.seq = a.seq;
  if (a.mb) c.micro_batch = a.mb;
  if (a.moe && !c.moe()) c.experts = 8, c.top_k = 2, c.name += "+moe8x2";
  c.capacity = a.capacity;
  c.moe_device_sizes = a.device_sizes;
  c.validate();
  const int tp = a.tp ? a.tp : team.size();
  BRAID_REQUIRE(tp == team.size(), "bench layer: --tp must equal the number of ranks (mpirun -np)");
  const Parallel p{tp, a.sp};
  p.validate(c);
  const bool root = team.rank() == 0;

  std::unique_ptr<Comm> comm;
  PeerCommOptions po;
  const bool peer = peer_engine_from_name(a.comm, &po.engine);
  BRAID_REQUIRE(a.comm.empty() || a.comm == "nccl" || peer, "bench layer: --comm must be nccl, peer or peer-ce");
  if (team.shared_gpu()) {  // the ranks time-slice one GPU: a correctness check, never a measurement
    BRAID_REQUIRE(a.json.empty(), "bench layer: a shared-GPU team (BRAID_SHARED_GPU=1) checks correctness only: no "
                                  "--json (its times are not measurements)");
    if (root)
      std::printf("# SHARED GPU (BRAID_SHARED_GPU=1): %d ranks time-slice one GPU over the peer comm; the "
                  "verification is real, every time below is NOT a measurement\n", team.size());
  }
  if (peer || (a.comm.empty() && !team.has_nccl())) {
    BRAID_REQUIRE(a.ar == "nccl", "bench layer: --ar picks the all-reduce of the NCCL comm: not with the peer comm");
    comm = make_peer_comm(team, po);
  } else if (a.ar == "nccl") {
    comm = make_nccl_comm(team);
  } else {
    AllReduceOptions o;
    BRAID_REQUIRE(parse_algo(a.ar, &o.algo, &o.precision), "bench layer: unknown --ar '" + a.ar + "'");
    comm = make_allreducer_comm(team, o);
  }

  // ---- verification (a small shape of the same kind, same comm) ----
  const double err = verify(*comm, team.mpi(), p, c.moe(), c.capacity, c.moe_device_sizes);
  const double worst_err = team.allreduce_max(err);
  const bool ok = worst_err < 2.5e-2;
  if (root)
    std::printf("# verification (d 32, GQA 8/4, seq 100, %s, tp %d%s): worst relative L2 error %.3g -> %s\n",
                c.moe() ? "MoE" : "dense", tp, p.sp ? " sp" : "", worst_err, ok ? "Passed" : "FAILED");
  if (!ok) return 3;

  // ---- timing at the asked shape ----
  Layer layer(c, p, *comm);
  layer.init_random_weights(17);
  if (root) std::printf("# attention: %s\n", layer.attention_backend().c_str());
  cudaStream_t s = team.stream();
  const size_t n = size_t(layer.local_tokens()) * c.hidden;
  kernels::fill_uniform(static_cast<kernels::bf16*>(layer.x()), n, 100 + team.rank(), -1.f, 1.f, s);
  kernels::fill_uniform(static_cast<kernels::bf16*>(layer.dy()), n, 200 + team.rank(), -1e-2f, 1e-2f, s);
  layer.forward(s);
  if (a.backward) layer.backward(s);
  team.synchronize("layer warm-up");
  // MoE with a capacity factor: what the warm-up forward dropped, all ranks (-1 otherwise)
  const double drop_fraction = layer.moe_dropped_fraction(team, true);

  bench::TimingOptions opt{a.warmup, a.iters};
  struct Row {
    std::string phase, name, kind, shape;
    double us, flops, bytes;
    double host_us;  // host time to issue one call (mean over every call the timing made, warm-up included)
  };
  // Times fn on the GPU (time_iterations) and, around each call, on the host: what the issuing thread spends in
  // the call (launch APIs, cuBLAS/cuDNN/NCCL host work, a dropless MoE dispatch's wait for its counts). An
  // operator whose host time reaches its GPU time keeps the GPU waiting on the host whenever the queue is empty.
  auto timed = [&](const std::function<void()>& fn, double* host_us) {
    bench::HostClock clock;
    const auto st = bench::summarize(bench::time_iterations(&team, s, opt, clock.wrap([&](int) { fn(); })));
    *host_us = clock.per_call_us();
    return st;
  };
  std::vector<Row> rows;
  auto phase_run = [&](Phase ph) {
    const char* pname = ph == Phase::kForward ? "forward" : "backward";
    double phase_host_us = 0;
    const double waited0 = layer.host_wait_us();
    int phase_calls = 0;
    const auto st = timed([&] {
      if (ph == Phase::kForward) layer.forward(s);
      else layer.backward(s);
      ++phase_calls;
    }, &phase_host_us);
    // of the host time, blocked waiting for a dropless MoE dispatch's counts (waiting for the GPU, not issuing)
    const double phase_wait_us = phase_calls ? (layer.host_wait_us() - waited0) / phase_calls : 0;
    double comm_us = 0, comp_us = 0, ops_host_us = 0;
    if (a.per_op) {
      const auto& ops = layer.ops(ph);
      for (size_t i = 0; i < ops.size(); ++i) {
        double host_us = 0;
        const auto os = timed([&] { layer.run_op(ph, i, s); }, &host_us);
        (ops[i].kind == OpKind::kComm ? comm_us : comp_us) += os.median_us;
        ops_host_us += host_us;
        rows.push_back({pname, ops[i].name, ops[i].kind == OpKind::kComm ? comm_name(ops[i].comm) : "compute",
                        ops[i].shape, os.median_us, ops[i].flops, ops[i].bytes, host_us});
      }
    }
    const double flops = layer_model_flops(c, ph) / tp;  // per GPU
    const double mfu = flops / (st.median_us * 1e-6) / kPeakFlops;
    const double tok_s = double(c.tokens()) / (st.median_us * 1e-6);
    if (root) {
      std::printf("%-9s %10.1f us  (sum of ops: compute %.1f us, communication %.1f us)  MFU %.1f%%  %.0f tokens/s; "
                  "host %.1f us per call, of it %.1f us waiting for MoE counts%s\n",
                  pname, st.median_us, comp_us, comm_us, 100 * mfu, tok_s, phase_host_us, phase_wait_us,
                  phase_host_us - phase_wait_us >= st.median_us ? " (host-bound: the GPU waits for the host)" : "");
      bench::Json j;
      j.add("bench", "layer").add("phase", pname).add("model", c.name).add("hidden", c.hidden).add("heads", c.heads);
      j.add("kv_heads", c.kv_heads).add("ffn", c.ffn).add("experts", c.experts).add("top_k", c.top_k);
      if (c.capacity > 0) j.add("capacity", c.capacity).add("moe_dropped_fraction", drop_fraction);
      if (c.moe()) j.add("moe_sizes", c.moe_device_sizes ? "device" : "host");
      j.add("seq", c.seq).add("micro_batch", c.micro_batch).add("tp", tp).add("sp", p.sp).add("comm", comm->name());
      j.add("attention", layer.attention_backend());
      j.add("time_us", st.median_us).add("p10_us", st.p10_us).add("p90_us", st.p90_us);
      j.add("ops_compute_us", comp_us).add("ops_comm_us", comm_us).add("model_tflops_per_gpu", flops / 1e12);
      j.add("host_issue_us", phase_host_us).add("host_moe_wait_us", phase_wait_us);
      if (a.per_op) j.add("ops_host_issue_us", ops_host_us);
      j.add("mfu", mfu).add("tokens_per_s", tok_s).add("verified", ok).add("verify_rel_l2", worst_err);
      j.add_context(ctx);
      bench::append_jsonl(a.json, j.str());
    }
  };
  phase_run(Phase::kForward);
  if (a.backward) phase_run(Phase::kBackward);

  if (root && a.per_op) {
    std::printf("\n# host(us): the host's time to issue one call of the op (its GPU time is time(us)); '*': host >= GPU\n");
    std::printf("%-9s %-22s %-13s %10s %9s %9s %10s  %s\n", "phase", "op", "kind", "time(us)", "TFLOP/s", "GB/s",
                "host(us)", "shape");
    for (const auto& r : rows) {
      std::printf("%-9s %-22s %-13s %10.1f %9.1f %9.1f %9.1f%s  %s\n", r.phase.c_str(), r.name.c_str(), r.kind.c_str(),
                  r.us, r.flops / (r.us * 1e-6) / 1e12, r.bytes / (r.us * 1e-6) / 1e9, r.host_us,
                  r.host_us >= r.us ? "*" : " ", r.shape.c_str());
      bench::Json j;
      j.add("bench", "layer_op").add("phase", r.phase).add("op", r.name).add("kind", r.kind).add("shape", r.shape);
      j.add("model", c.name).add("seq", c.seq).add("tp", tp).add("time_us", r.us).add("flops", r.flops);
      j.add("bytes", r.bytes).add("host_issue_us", r.host_us).add_context(ctx);
      bench::append_jsonl(a.json, j.str());
    }
  }
  return 0;
}

}  // namespace braid::model
