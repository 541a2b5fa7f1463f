// `braid profile-pairs` and `braid bench strands`: the operator-pair profiler on the GPU and the strand
// benchmark (verification, then every variant timed). See docs/dhelix.md, "GPU part".
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "../model/kernels.cuh"
#include "braid/overlap/verify.hpp"
#include "braid/env.hpp"
#include "braid/bench.hpp"
#include "braid/errors.hpp"
#include "braid/model.hpp"
#include "braid/runtime.hpp"
#include "braid/schedule/strands.hpp"

namespace braid::schedule {

namespace {

namespace m = braid::model;
constexpr double kPeakFlops = 989e12;  // H100 SXM dense bf16 (as bench layer)

struct Args {
  std::string model = "llama3-8b", plan, pairs, json, out, plan_out, a2a_link = "local";
  std::string comm;         // "nccl", "nccl-ce" (make_nccl_ce_comm), "peer" or "peer-ce" (model::make_peer_comm, SM or copy engines); empty: NCCL, or peer in a shared-GPU team
  int tp = 0, ep = 0, seq = 0, mb = 0, iters = 10, warmup = 3, throttle = 0, prof_iters = 3, prof_warmup = 1;
  int max_seg = 4, max_shift = -1;
  int rounds = 5;     // interleaved passes over the core variants (time_interleaved)
  int decompose = 4;  // chunks of the intra-batch decomposition baseline (0: not timed)
  int open_chunks = 4;  // the -open<K> variants: each pass's opening all-gather -> GEMM pair in K chunks
                        // (model::Layer::set_opening_chunks; one layer, sequence parallelism); 0: not timed
  int gemm_sm_reserve = 0;  // > 0: also time variants whose GEMMs leave this many SMs free (-smres)
  int layers = 1;           // > 1: the stack of that many layers (StrandStack) instead of the one-layer variants
  double capacity = 0;      // MoE capacity factor (ModelConfig::capacity); 0: dropless
  bool device_sizes = false;  // --moe-sizes device: dropless with the counts on the device (ModelConfig::moe_device_sizes)
  bool graph = true, verify = true;
  bool verify_only = false;  // one layer: stop after the verification (rc 0 passed, 3 failed), nothing timed
  bool chain = true;        // stack: also the chained variants (StrandStack::pass_chained); --no-chain drops them
  bool op_trace = false;    // one compute-only pass more (the stack's or the layer pair's), every operator timed
                            // (OpTrace) against its solo time
  // --replicated-grads step[:M]: the replicated gradients all-reduced once per step of M micro-batches
  // (model::Parallel::replicated_grads_per_step, Megatron's way), not by every backward; every row then carries
  // that all-reduce's measured time x layers / M (see report). 0: per backward (the default, as before).
  int step_microbatches = 0;
  // --comm-scale X: the searches' collectives last X times their profiled solo time (Op::solo_us of every collective
  // of the DAG, after the pair table's times): in the stack at full NVLink over nccl-ce a collective took 2.5-4x its
  // solo time on the link streams (two strands' collectives at once, beside GEMMs: docs/dhelix.md, fifty-ninth
  // session), so orders searched on solo times put a collective's consumer too close behind it. 1: as profiled.
  double comm_scale = 1.0;
};

Args parse(int argc, char** argv, const char* who) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) throw UsageError(std::string(who) + ": " + k + " needs a value", __FILE__, __LINE__);
      return argv[++i];
    };
    if (k == "--model") a.model = val();
    else if (k == "--tp") a.tp = std::stoi(val());
    else if (k == "--ep") a.ep = std::stoi(val());
    else if (k == "--seq") a.seq = std::stoi(val());
    else if (k == "--mb" || k == "--micro-batch") a.mb = std::stoi(val());
    else if (k == "--plan") a.plan = val();
    else if (k == "--pairs") a.pairs = val();
    else if (k == "--out") a.out = val();
    else if (k == "--plan-out") a.plan_out = val();
    else if (k == "--json") a.json = val();
    else if (k == "--iters") a.iters = std::stoi(val());
    else if (k == "--rounds") a.rounds = std::stoi(val());
    else if (k == "--gemm-sm-reserve") a.gemm_sm_reserve = std::stoi(val());
    else if (k == "--warmup") a.warmup = std::stoi(val());
    else if (k == "--profile-iters") a.prof_iters = std::stoi(val());
    else if (k == "--throttle") a.throttle = std::stoi(val());
    else if (k == "--max-seg") a.max_seg = std::stoi(val());
    else if (k == "--max-shift") a.max_shift = std::stoi(val());
    else if (k == "--a2a-link") a.a2a_link = val();
    else if (k == "--no-graph") a.graph = false;
    else if (k == "--no-verify") a.verify = false;
    else if (k == "--verify-only") a.verify_only = true;
    else if (k == "--decompose") a.decompose = std::stoi(val());
    else if (k == "--open-chunks") a.open_chunks = std::stoi(val());
    else if (k == "--layers") a.layers = std::stoi(val());
    else if (k == "--no-chain") a.chain = false;
    else if (k == "--op-trace") a.op_trace = true;
    else if (k == "--capacity") a.capacity = std::stod(val());
    else if (k == "--comm-scale") a.comm_scale = std::stod(val());
    else if (k == "--moe-sizes") {
      const std::string v = val();
      if (v != "host" && v != "device")
        throw UsageError(std::string(who) + ": --moe-sizes host|device", __FILE__, __LINE__);
      a.device_sizes = v == "device";
    }
    else if (k == "--comm") a.comm = val();
    else if (k == "--replicated-grads") {
      const std::string v = val();
      if (v == "backward") a.step_microbatches = 0;
      else if (v == "step") a.step_microbatches = 8;
      else if (v.rfind("step:", 0) == 0 && v.size() > 5 && std::stoi(v.substr(5)) >= 1) a.step_microbatches = std::stoi(v.substr(5));
      else throw UsageError(std::string(who) + ": --replicated-grads backward|step|step:M (M >= 1)", __FILE__, __LINE__);
    }
    // other words (bench, strands, profile-pairs) belong to the CLI
  }
  if (!(a.comm_scale > 0)) throw UsageError(std::string(who) + ": --comm-scale must be > 0", __FILE__, __LINE__);
  if (a.iters < 1 || a.warmup < 0 || a.prof_iters < 1 || a.rounds < 1 || a.layers < 1)
    throw UsageError(std::string(who) + ": --iters/--profile-iters/--rounds/--layers must be >= 1, --warmup >= 0",
                     __FILE__, __LINE__);
  if (a.a2a_link != "local" && a.a2a_link != "cross")
    throw UsageError(std::string(who) + ": --a2a-link must be local or cross", __FILE__, __LINE__);
  m::PeerCommOptions::Engine engine;
  if (!a.comm.empty() && a.comm != "nccl" && a.comm != "nccl-ce" && !m::peer_engine_from_name(a.comm, &engine))
    throw UsageError(std::string(who) + ": --comm must be nccl, nccl-ce, peer or peer-ce", __FILE__, __LINE__);
  if (a.comm == "nccl-ce" && a.throttle > 0)
    throw UsageError(std::string(who) + ": --throttle caps NCCL's CTAs: not with nccl-ce (no CTA moves its bytes)",
                     __FILE__, __LINE__);
  return a;
}

// A strand's communicator: NCCL (strand β's a second communicator; --throttle caps both), or braid's peer comm
// (--comm peer or peer-ce, one per strand; the default in a shared-GPU team, which has no NCCL). A shared-GPU team's ranks
// time-slice one GPU: every verification runs, but its times are not measurements, so it writes no JSON.
std::unique_ptr<m::Comm> strand_comm(Team& team, const Args& a, bool second, const char* who) {
  m::PeerCommOptions po;
  const bool peer = m::peer_engine_from_name(a.comm, &po.engine) || (a.comm.empty() && !team.has_nccl());
  if (!second && team.shared_gpu()) {
    if (!a.json.empty() || !a.out.empty())
      throw UsageError(std::string(who) + ": a shared-GPU team (BRAID_SHARED_GPU=1) checks correctness only: no --json "
                           "or --out (its times are not measurements)",
                       __FILE__, __LINE__);
    if (team.rank() == 0)
      std::printf("# SHARED GPU (BRAID_SHARED_GPU=1): %d ranks time-slice one GPU over the peer comm; the "
                  "verifications are real, every time below is NOT a measurement\n",
                  team.size());
  }
  if (peer) {
    if (a.throttle > 0)
      throw UsageError(std::string(who) + ": --throttle caps NCCL's CTAs: not with the peer comm", __FILE__, __LINE__);
    return m::make_peer_comm(team, po);
  }
  // nccl-ce: NCCL's copy engines for the dense SP layer's collectives at TP = 2 (model::make_nccl_ce_comm; a
  // communicator pair of its own per strand), NCCL's kernels for the rest.
  if (a.comm == "nccl-ce") return m::make_nccl_ce_comm(team);
  if (second || a.throttle > 0) return m::make_nccl_comm_split(team, a.throttle);
  return m::make_nccl_comm(team);
}

m::ModelConfig model_of(const Args& a, Team& team, m::Parallel* par, const char* who) {
  m::ModelConfig c = m::preset(a.model);
  if (a.seq) c.seq = a.seq;
  if (a.mb) c.micro_batch = a.mb;
  c.capacity = a.capacity;
  c.moe_device_sizes = a.device_sizes;
  c.validate();  // (a capacity needs an MoE model; device sizes a dropless one)
  const int tp = a.tp ? a.tp : team.size();
  if (tp != team.size())
    throw UsageError(std::string(who) + ": --tp must equal the number of ranks (mpirun -np)", __FILE__, __LINE__);
  if (a.ep && (!c.moe() || a.ep != tp))
    throw UsageError(std::string(who) + ": --ep needs an MoE model and equals --tp (experts are split over the TP ranks)",
                     __FILE__, __LINE__);
  *par = m::Parallel{tp, true};
  par->replicated_grads_per_step = a.step_microbatches > 0;
  par->validate(c);
  return c;
}

// BRAID_STRANDS_LINK_PRIORITY=high: the strands' two link streams get the device's greatest stream
// priority, so a collective's CTAs are scheduled ahead of waiting GEMM CTAs instead of queueing behind a
// whole compute kernel (what a separate communication stream allows and round-robin's mixed streams do
// not). Default: normal priority, like every other stream.
bool link_priority_high() {
  return env::choice("BRAID_STRANDS_LINK_PRIORITY", {"normal", "high"}).value_or("normal") == "high";
}

// Three non-blocking streams (and round-robin's second), destroyed with the holder.
struct Streams {
  StrandStreams s;
  cudaStream_t extra = nullptr;  // round-robin's second stream
  cudaStream_t first = nullptr;  // ... at the device's greatest priority (-bfirst: the backward's blocks start first)
  cudaEvent_t rr[2] = {nullptr, nullptr};
  Streams() {
    int least = 0, greatest = 0;
    BRAID_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    const int link = link_priority_high() ? greatest : 0;
    for (cudaStream_t* p : {&s.compute, &s.local, &s.cross, &extra})
      BRAID_CUDA_CHECK(cudaStreamCreateWithPriority(p, cudaStreamNonBlocking,
                                                    p == &s.local || p == &s.cross ? link : 0));
    BRAID_CUDA_CHECK(cudaStreamCreateWithPriority(&first, cudaStreamNonBlocking, greatest));
    for (auto& e : rr) BRAID_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  }
  ~Streams() {
    for (auto e : rr) cudaEventDestroy(e);
    for (cudaStream_t p : {s.compute, s.local, s.cross, extra, first}) cudaStreamDestroy(p);
  }
};

void fill_inputs(m::Layer& l, uint64_t seed, cudaStream_t s) {
  const size_t n = size_t(l.local_tokens()) * l.config().hidden;
  model::kernels::fill_uniform(static_cast<model::kernels::bf16*>(l.x()), n, seed, -1.f, 1.f, s);
  model::kernels::fill_uniform(static_cast<model::kernels::bf16*>(l.dy()), n, seed + 1, -1e-2f, 1e-2f, s);
}

std::vector<uint16_t> bits_of(const void* p, size_t n) {
  std::vector<uint16_t> h(n);
  BRAID_CUDA_CHECK(cudaMemcpy(h.data(), p, n * 2, cudaMemcpyDeviceToHost));
  return h;
}

// What one run of the verification sequence leaves: α's y and dx, β's dx, β's gradients, α's gradients
// after α += β.
struct Snapshot {
  std::vector<uint16_t> ya, dxa, dxb;
  std::vector<uint16_t> yb2;  // two units: β's forward output in the second unit (empty otherwise)
  m::LayerWeights gb, gsum;
};

size_t count_diff(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return std::max(a.size(), b.size()) + 1;
  size_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += std::memcmp(&a[i], &b[i], sizeof(double)) != 0;
  return n;
}
size_t count_diff(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  if (a.size() != b.size()) return std::max(a.size(), b.size()) + 1;
  size_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += a[i] != b[i];
  return n;
}

// ---- verification sequence ---------------------------------------------------------------------------

size_t strands_differences(const Snapshot& x, const Snapshot& y, const m::ModelConfig& c) {
  size_t n = count_diff(x.ya, y.ya) + count_diff(x.dxa, y.dxa) + count_diff(x.dxb, y.dxb) + count_diff(x.yb2, y.yb2);
  for (const auto& f : m::field_names(c)) {
    n += count_diff(*m::field(x.gb, f), *m::field(y.gb, f));
    n += count_diff(*m::field(x.gsum, f), *m::field(y.gsum, f));
  }
  return n;
}

// Where two snapshots differ (this rank): each tensor's count, gradients by field; "" when they agree.
std::string strands_difference_report(const Snapshot& x, const Snapshot& y, const m::ModelConfig& c) {
  std::string r;
  auto one = [&](const std::string& what, size_t n) {
    if (n) r += " " + what + " " + std::to_string(n);
  };
  one("ya", count_diff(x.ya, y.ya)), one("dxa", count_diff(x.dxa, y.dxa)), one("dxb", count_diff(x.dxb, y.dxb));
  one("yb2", count_diff(x.yb2, y.yb2));
  for (const auto& f : m::field_names(c)) {
    one("gb." + f, count_diff(*m::field(x.gb, f), *m::field(y.gb, f)));
    one("gsum." + f, count_diff(*m::field(x.gsum, f), *m::field(y.gsum, f)));
  }
  return r;
}

// variant: 0 single strand, 1 strands (eager), 2 strands (CUDA graph), 3 round-robin.
// accumulating: β shares α's accumulating gradients (Layer::Share::kAll): they are zeroed first, the unit
// leaves β's contribution and α's backward adds its own — no add_grads.
// shared_io: the layers share y/dy/dx (Layer::share_interfaces): α's dy is written again before its backward.
// One unit (α forward, β backward after β's forward of an earlier unit), snapshot, then α's backward as
// the next unit's. With `next` (two units, the steady state of a shared activation pool): the next unit
// runs through `next` — β's forward on a fresh input beside α's backward, roles swapped — and the snapshot
// adds β's forward output; variant 0 (the reference) then runs α's backward and β's forward one after the
// other.
Snapshot strands_sequence(Team& team, m::Layer& a, m::Layer& b, StrandExecutor& ex, Streams& st, int variant,
                          bool accumulating = false, bool shared_io = false, StrandExecutor* next = nullptr,
                          bool two_units = false) {
  two_units = two_units || next != nullptr;
  cudaStream_t s = st.s.compute;
  fill_inputs(a, 11, s);
  fill_inputs(b, 21, s);
  if (accumulating) a.zero_grads(s);
  b.forward(s);  // β's forward ran in an earlier unit
  if (variant == 0) {
    run_single_strand(a, b, s);
  } else if (variant == 1) {
    ex.run(a, b);
  } else if (variant == 2) {
    cudaGraph_t g;
    cudaGraphExec_t ge;
    BRAID_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    ex.run(a, b);
    BRAID_CUDA_CHECK(cudaStreamEndCapture(s, &g));
    BRAID_CUDA_CHECK(cudaGraphInstantiate(&ge, g, 0));
    BRAID_CUDA_CHECK(cudaGraphLaunch(ge, s));
    team.synchronize(s, "strands graph replay");
    BRAID_CUDA_CHECK(cudaGraphExecDestroy(ge));
    BRAID_CUDA_CHECK(cudaGraphDestroy(g));
  } else {
    run_round_robin(a, b, s, st.extra, st.rr);
  }
  team.synchronize(s, "strands verification unit");
  Snapshot r;
  const size_t n = size_t(a.local_tokens()) * a.config().hidden;
  r.ya = bits_of(a.y(), n);
  r.dxb = bits_of(b.dx(), n);
  r.gb = b.download_grads();
  if (two_units) fill_inputs(b, 31, s);  // β's next micro-batch (x; its dy is not read by a forward)
  if (shared_io) fill_inputs(a, 11, s);  // α's dy (x again, unchanged), after β's: dy may be one buffer
  if (two_units && variant != 0) {
    BRAID_REQUIRE(next != nullptr, "strands_sequence: two units need the next unit's executor");
    next->run(b, a);  // β forward beside α's backward: the next unit
  } else {
    a.backward(s);  // α's backward: the next unit
    if (two_units) b.forward(s);
  }
  if (!accumulating) a.add_grads(b, s);
  team.synchronize(s, "strands verification grads");
  r.dxa = bits_of(a.dx(), n);
  r.gsum = a.download_grads();
  if (two_units) r.yb2 = bits_of(b.y(), n);
  return r;
}

// Activations bitwise; gradients within what accumulating in the GEMM (one rounding of fp32 α + bf16 β)
// instead of adding two rounded bf16 values allows: 2^-7 (|want| + |β's|) + 1e-6. Per term: ("ya", count), ...,
// ("grad <field> (beta)", count), ("grad <field> (sum)", count); a field of another size counts whole, plus one.
std::vector<std::pair<std::string, size_t>> accumulating_difference_terms(const Snapshot& x, const Snapshot& y,
                                                                          const m::ModelConfig& c) {
  std::vector<std::pair<std::string, size_t>> v = {{"ya", count_diff(x.ya, y.ya)},
                                                   {"dxa", count_diff(x.dxa, y.dxa)},
                                                   {"dxb", count_diff(x.dxb, y.dxb)},
                                                   {"yb2", count_diff(x.yb2, y.yb2)}};
  for (const auto& f : m::field_names(c)) {
    const auto &gb = *m::field(x.gb, f), &gb2 = *m::field(y.gb, f);
    const auto &gs = *m::field(x.gsum, f), &gs2 = *m::field(y.gsum, f);
    if (gb.size() != gb2.size() || gs.size() != gs2.size()) {
      v.push_back({"grad " + f + " (sizes)", gb.size() + gs.size() + 1});
      continue;
    }
    size_t nb = 0, ns = 0;
    for (size_t i = 0; i < gb.size(); ++i) {
      nb += !(std::abs(gb2[i] - gb[i]) <= std::abs(gb[i]) / 128 + 1e-6);
      ns += !(std::abs(gs2[i] - gs[i]) <= (std::abs(gs[i]) + std::abs(gb[i])) / 128 + 1e-6);
    }
    v.push_back({"grad " + f + " (beta)", nb});
    v.push_back({"grad " + f + " (sum)", ns});
  }
  return v;
}

size_t accumulating_differences(const Snapshot& x, const Snapshot& y, const m::ModelConfig& c) {
  size_t n = 0;
  for (const auto& [name, k] : accumulating_difference_terms(x, y, c)) n += k;
  return n;
}

// Where accumulating_differences found its values: "ya 12, grad wqkv (beta) 40, ..." (the nonzero terms only).
std::string difference_breakdown(const Snapshot& x, const Snapshot& y, const m::ModelConfig& c) {
  std::string out;
  for (const auto& [name, k] : accumulating_difference_terms(x, y, c))
    if (k) out += (out.empty() ? "" : ", ") + name + " " + std::to_string(k);
  return out.empty() ? "none" : out;
}

// Relative L2 distance of two snapshots, per tensor (activations from bf16 bits, every gradient field);
// returns how many tensors exceed `tol`.
size_t relative_l2_failures(const Snapshot& x, const Snapshot& y, const m::ModelConfig& c, double tol,
                            double* worst) {
  size_t bad = 0;
  auto check = [&](const std::vector<double>& a, const std::vector<double>& b) {
    double num = 0, den = 0;
    if (a.size() != b.size()) num = 1, den = 0;
    for (size_t i = 0; i < a.size() && a.size() == b.size(); ++i) num += (a[i] - b[i]) * (a[i] - b[i]), den += a[i] * a[i];
    const double r = den > 0 ? std::sqrt(num / den) : (num > 0 ? 1.0 : 0.0);
    *worst = std::max(*worst, r);
    bad += !(r <= tol);
  };
  auto val = [](const std::vector<uint16_t>& h) {
    std::vector<double> v(h.size());
    for (size_t i = 0; i < h.size(); ++i) v[i] = overlap::bf16_to_float(h[i]);
    return v;
  };
  check(val(x.ya), val(y.ya));
  check(val(x.dxa), val(y.dxa));
  check(val(x.dxb), val(y.dxb));
  check(val(x.yb2), val(y.yb2));
  for (const auto& f : m::field_names(c)) {
    check(*m::field(x.gb, f), *m::field(y.gb, f));
    check(*m::field(x.gsum, f), *m::field(y.gsum, f));
  }
  return bad;
}

// The relative-L2 verdict over every rank (worst tensor, tolerance 1e-2), printed by the root as
// "# verification (<case>): <what> vs <against>: worst relative L2 ... -> Passed|FAILED"; true if passed.
bool l2_verdict(Team& team, bool root, const Snapshot& ref, const Snapshot& got, const m::ModelConfig& c,
                const std::string& what, const char* against = "single strand") {
  double worst = 0;
  const size_t bad = size_t(team.allreduce_max(double(relative_l2_failures(ref, got, c, 1e-2, &worst))));
  worst = team.allreduce_max(worst);
  if (root)
    std::printf("# verification (%s): %s vs %s: worst relative L2 %.2e (tolerance 1e-2) -> %s\n", c.name.c_str(),
                what.c_str(), against, worst, bad == 0 ? "Passed" : "FAILED");
  return bad == 0;
}

}  // namespace

// ---- profiler ---------------------------------------------------------------------------------------

// Throws unless every rank holds the same plan (the strands issue their collectives on two communicators in its
// order; ranks with different orders could wait on each other forever): the top 52 bits of plan_structure_hash (an
// exact double) compared across ranks, as AutoGemmComm compares its picks.
void require_same_plan_on_every_rank(const Team& team, const std::string& what, const PlanFile& pf) {
  const double h = double(plan_structure_hash(pf) >> 12);
  const std::vector<double> mx = team.allreduce_max({h, -h});
  if (mx[0] != -mx[1])
    throw UsageError("bench strands: " + what + " differs across ranks (they would issue their collectives in "
                     "different orders); every rank must search on the same pair table",
                     __FILE__, __LINE__);
}

PairTable profile_pairs(Team& team, m::Layer& a, m::Layer& b, StrandExecutor& ex, const bench::TimingOptions& opt,
                        const std::string& node, bool verbose, bench::ClockSummary* solo_clocks) {
  cudaStream_t s = ex.streams().compute;
  const Layer& dag = ex.dag();
  // Fill every buffer once (and the MoE counts) so isolated operators see realistic data.
  fill_inputs(a, 31, s);
  fill_inputs(b, 41, s);
  a.forward(s), a.backward(s), b.forward(s), b.backward(s);
  team.synchronize(s, "profile-pairs warm-up");
  // The step's GPU time (median), and in *host_us the host's mean time per call to issue it (warm-up included).
  auto time_of = [&](const std::vector<int>& f, const std::vector<int>& bw, double* host_us = nullptr) {
    bench::HostClock clock;
    const auto st = bench::summarize(bench::time_iterations(&team, s, opt, clock.wrap([&](int) {
      ex.run_step(f.empty() ? nullptr : &a, f, bw.empty() ? nullptr : &b, bw);
    })));
    // The slowest rank's host time, as the GPU time is the slowest rank's: every rank must hold the same table,
    // since the plan and issue orders searched on it decide the order in which each rank issues its collectives.
    if (host_us) *host_us = team.allreduce_max(clock.per_call_us());
    return st.median_us;
  };
  // An empty step (fork + join only) is the fixed cost of every measurement; subtract it so that it
  // does not count as overlap in eq. (1). The same for the host: an operator's host time is its step's less
  // the empty step's (the fork and join events).
  double empty_host_us = 0;
  const double empty_us = time_of({}, {}, &empty_host_us);
  auto net = [&](double us) { return std::max(us - empty_us, 0.01); };
  PairTable t;
  t.node = node;
  t.model = dag.model, t.parallel = dag.parallel;
  int device = 0;
  BRAID_CUDA_CHECK(cudaGetDevice(&device));
  bench::GpuClockSampler clocks(device);
  clocks.start();
  for (int pass = 0; pass < 2; ++pass) {
    const auto& ops = pass == 0 ? dag.fwd : dag.bwd;
    for (size_t i = 0; i < ops.size(); ++i) {
      double host_us = 0;
      const double us = pass == 0 ? time_of({int(i)}, {}, &host_us) : time_of({}, {int(i)}, &host_us);
      t.set_solo(ops[i].name, net(us));
      t.set_host(ops[i].name, std::max(host_us - empty_host_us, 0.0));
    }
  }
  const bench::ClockSummary solo_window = clocks.stop();
  if (solo_clocks) *solo_clocks = solo_window;
  size_t pairs = 0;
  for (size_t i = 0; i < dag.fwd.size(); ++i)
    for (size_t j = 0; j < dag.bwd.size(); ++j) {
      const Op &f = dag.fwd[i], &bo = dag.bwd[j];
      if (f.kind == OpKind::Comm && bo.kind == OpKind::Comm && f.link == bo.link) continue;  // illegal pair
      t.set_corun(f.name, bo.name, net(time_of({int(i)}, {int(j)})));
      ++pairs;
    }
  if (verbose) {
    std::printf("# profiled %zu solo operators and %zu co-run pairs (empty step %.1f us subtracted)\n", t.solo.size(),
                pairs, empty_us);
    // Issuing against running: the host's time to issue each operator once (its step less the empty step's, a
    // dropless MoE dispatch's count wait included) beside the operators' solo GPU times, per pass.
    for (int pass = 0; pass < 2; ++pass) {
      double host = 0, gpu = 0, worst = 0;
      std::string worst_name = "-";
      for (const Op& o : pass == 0 ? dag.fwd : dag.bwd) {
        const double h = t.host_us(o.name).value_or(0), g = t.solo_us(o.name).value_or(0);
        host += h, gpu += g;
        if (h - g > worst) worst = h - g, worst_name = o.name;
      }
      std::printf("# host issue, %s: %.1f us for the operators once against %.1f us of their solo GPU time; most "
                  "host over GPU: %s (%+.1f us)\n",
                  pass == 0 ? "forward" : "backward", host, gpu, worst_name.c_str(), worst);
    }
  }
  return t;
}

namespace {

Plan search(const Layer& dag, const PairTable& table, const Args& a, double* search_s) {
  PairCost cost(dag, table);
  SearchOptions o;
  o.max_segment_ops = a.max_seg;
  o.max_shift = a.max_shift;
  const double t0 = MPI_Wtime();
  Plan p = search_plan(cost, o);
  *search_s = MPI_Wtime() - t0;
  return p;
}

// SMs the layers' GEMMs may use when `reserve` are left to the collectives (--gemm-sm-reserve).
int gemm_sms_leaving(int reserve) {
  int dev = 0, n = 0;
  BRAID_CUDA_CHECK(cudaGetDevice(&dev));
  BRAID_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
  return std::max(1, n - reserve);
}

StrandLinks links_of(const Args& a) {
  StrandLinks l;
  l.a2a = a.a2a_link == "cross" ? LinkClass::Cross : LinkClass::Local;
  return l;
}

}  // namespace

int profile_pairs_main(Team& team, int argc, char** argv, const bench::Context& ctx) {
  const Args a = parse(argc, argv, "profile-pairs");
  m::Parallel p;
  const m::ModelConfig c = model_of(a, team, &p, "profile-pairs");
  const bool root = team.rank() == 0;
  auto comm_a = strand_comm(team, a, false, "profile-pairs");
  auto comm_b = strand_comm(team, a, true, "profile-pairs");
  Streams st;
  m::Layer la(c, p, *comm_a);
  la.init_random_weights(17);
  m::Layer lb(la, *comm_b);
  Layer dag = strand_layer(c, p, links_of(a));
  StrandExecutor ex(dag, Plan{}, st.s);
  const PairTable t = profile_pairs(team, la, lb, ex, {a.prof_warmup, a.prof_iters},
                                    bench::card_tag(ctx.card, team.size()), root);
  apply_solo_times(dag, t);
  double search_s = 0;
  const Plan plan = search(dag, t, a, &search_s);
  if (root) {
    const std::string out = a.out.empty() ? "pairs-" + c.name + "-tp" + std::to_string(p.tp) + "-seq" +
                                                std::to_string(c.seq) + ".txt"
                                          : a.out;
    save_pair_table(out, t);
    std::printf("# pair table: %s (%s, %s)\n", out.c_str(), t.model.c_str(), t.parallel.c_str());
    std::printf("# plan search: %.2f s, %zu order pairs, predicted %.1f us vs single strand %.1f us (%.3fx)\n",
                search_s, plan.orders_searched, plan.total_us, plan.serial_us,
                plan.total_us > 0 ? plan.serial_us / plan.total_us : 0.0);
    print_plan(std::cout, dag, plan);
    if (!a.plan_out.empty()) {
      std::ofstream f(a.plan_out);
      if (!f) throw UsageError("profile-pairs: cannot write " + a.plan_out, __FILE__, __LINE__);
      PlanFile pf = to_plan_file(dag, plan);
      write_plan(f, pf);
      std::printf("# plan: %s\n", a.plan_out.c_str());
    }
  }
  team.synchronize(st.s.compute, "profile-pairs end");
  return 0;
}

// ---- bench strands ----------------------------------------------------------------------------------

namespace {

// The verification shape of the kind of `c` (dense or MoE), same parallel setting.
m::ModelConfig small_of(const m::ModelConfig& big) {
  m::ModelConfig c = m::preset(big.moe() ? "tiny-moe" : "tiny");
  c.name = big.moe() ? "verify-moe-d32" : "verify-d32";
  c.hidden = 256, c.heads = 8, c.kv_heads = 4, c.seq = 100, c.micro_batch = 2, c.ffn = big.moe() ? 128 : 512;
  c.capacity = big.capacity;
  c.moe_device_sizes = big.moe_device_sizes;
  return c;
}

}  // namespace

namespace {

struct Variant {
  std::string name;
  double us;
  double mem;      // device bytes the variant needs (allocator accounting)
  int rounds = 0;  // > 0: timed interleaved with the core variants over this many passes
  std::vector<double> round_us;  // timed interleaved: the median of each pass (bench::round_medians)
  // Host side, per call (a unit or a pass), averaged over every call the timing made (warm-up included):
  // the time the host took to issue it, and of that the time blocked waiting for MoE all-to-all counts.
  // The GPU runs ahead of the host only while issue < time; negative: not measured.
  double host_issue_us = -1, host_wait_us = -1;
  // One-pool (arena) variants: the issue order they ran (its variant name) and the pool's bytes; empty / 0 otherwise.
  std::string order;
  double pool_bytes = 0;
  // A variant timed in an interleaved group of its own (the arenas, which build their own layers): that group's
  // single strand, round-robin and compute-only medians and per-pass medians, which its row is measured against
  // (the same passes, hence the same clock: docs/dhelix.md, fifty-sixth session). 0 / empty: the main group's.
  double ref_single_us = 0, ref_rr_us = 0, ref_compute_us = 0;
  std::vector<double> ref_single_rounds, ref_compute_rounds;
};

// Variants timed interleaved (bench::time_interleaved: `rounds` passes over all of them in turn, so that clock,
// thermal or link drift hits them alike), with the compute-only run that exposed communication is measured
// against timed among them, last: the same data and thermal state as the variants; not a row.
struct Interleaved {
  std::vector<std::string> names;
  std::vector<std::function<void(int)>> fns;
  std::vector<double> mems;
  // Optional: the layers' cumulative MoE host wait (model::Layer::host_wait_us summed), read around each call.
  std::function<double()> waited;
  struct Host {
    bench::HostClock issue;  // the host's time per call
    double wait_us = 0;      // of it, blocked on MoE counts
  };
  std::vector<std::shared_ptr<Host>> hosts;
  std::vector<double> compute_rounds;  // after time(): compute only's median in each pass
  void add(const std::string& name, std::function<void(int)> fn, double mem) {
    names.push_back(name), fns.push_back(std::move(fn)), mems.push_back(mem);
  }
  // Appends every variant's median to `vs`; returns compute only's (its host figures in *compute_host).
  double time(Team& team, cudaStream_t s, const bench::TimingOptions& opt, int rounds,
              std::function<void(int)> compute_only, std::vector<Variant>& vs, Variant* compute_host = nullptr) {
    fns.push_back(std::move(compute_only));
    std::vector<std::function<void(int)>> timed;
    hosts.clear();
    for (auto& fn : fns) {
      auto h = std::make_shared<Host>();
      hosts.push_back(h);
      timed.push_back(h->issue.wrap([this, h, &fn](int i) {
        const double w0 = waited ? waited() : 0;
        fn(i);
        h->wait_us += (waited ? waited() : 0) - w0;
      }));
    }
    const auto t = bench::time_interleaved(&team, s, opt, rounds, timed);
    fns.pop_back();
    auto host_of = [&](size_t i, Variant& v) {
      const int calls = hosts[i]->issue.calls;
      if (calls == 0) return;
      v.host_issue_us = hosts[i]->issue.per_call_us();
      v.host_wait_us = waited ? hosts[i]->wait_us / calls : -1;
    };
    for (size_t i = 0; i < fns.size(); ++i) {
      vs.push_back({names[i], bench::summarize(t[i]).median_us, mems[i], rounds});
      vs.back().round_us = bench::round_medians(t[i], rounds);
      host_of(i, vs.back());
    }
    if (compute_host) host_of(fns.size(), *compute_host);
    compute_rounds = bench::round_medians(t.back(), rounds);
    return bench::summarize(t.back()).median_us;
  }
};

// The link bandwidth the run reached, then the table (root) and a JSON row per variant. vs[0] is the
// reference (single strand); `rr_name` the round-robin row the "vs rr" column divides by; one_set the
// reference's memory; `context` prints the lines between the link lines and the table (root only).
void report(Team& team, const Args& a, const m::ModelConfig& c, const m::Parallel& p, const bench::Context& ctx,
            Streams& st, m::Comm& comm_a, m::Comm& comm_b, int64_t local_tokens, const std::vector<Variant>& measured,
            double compute_us, double comm_us, double one_set, const std::string& rr_name, int layers,
            const std::string& plan_source, const Plan& plan, bool ok,
            const std::function<void(double, double)>& context, const m::Layer& probe,
            const std::vector<double>& compute_rounds = {},
            const std::vector<std::pair<std::string, double>>& extras = {}) {
  const bool root = team.rank() == 0;
  // MoE with a capacity factor: what it dropped in the probe layer's last forward, summed over the ranks.
  const double drop_fraction = probe.moe_dropped_fraction(team, true);
  cudaStream_t s = st.s.compute;
  const bench::TimingOptions opt{a.warmup, a.iters};
  auto med = [&](const std::function<void(int)>& fn) {
    return bench::summarize(bench::time_iterations(&team, s, opt, fn)).median_us;
  };
  // Link bandwidth actually reached: one all-gather of the layer's AG size on comm_a.
  const size_t ag_count = size_t(local_tokens) * c.hidden;
  void *ag_in = nullptr, *ag_out = nullptr;
  BRAID_CUDA_CHECK(cudaMalloc(&ag_in, ag_count * 2));
  BRAID_CUDA_CHECK(cudaMalloc(&ag_out, ag_count * 2 * p.tp));
  const double ag_us = med([&](int) { comm_a.all_gather(ag_in, ag_out, ag_count, m::DType::kBF16, s); });
  // ... and two at once, one per communicator on two streams, as round-robin's strands run them: with the
  // throttle each communicator has its own CTAs, so the pair may move more than one link's worth (a real
  // slow link would be shared). Reported as the pair's aggregate bandwidth (both all-gathers' bytes).
  void *ag_in2 = nullptr, *ag_out2 = nullptr;
  BRAID_CUDA_CHECK(cudaMalloc(&ag_in2, ag_count * 2));
  BRAID_CUDA_CHECK(cudaMalloc(&ag_out2, ag_count * 2 * p.tp));
  const double ag2_us = med([&](int) {
    BRAID_CUDA_CHECK(cudaEventRecord(st.rr[0], s));
    BRAID_CUDA_CHECK(cudaStreamWaitEvent(st.extra, st.rr[0], 0));
    comm_b.all_gather(ag_in2, ag_out2, ag_count, m::DType::kBF16, st.extra);
    comm_a.all_gather(ag_in, ag_out, ag_count, m::DType::kBF16, s);
    BRAID_CUDA_CHECK(cudaEventRecord(st.rr[1], st.extra));
    BRAID_CUDA_CHECK(cudaStreamWaitEvent(s, st.rr[1], 0));
  });
  BRAID_CUDA_CHECK(cudaFree(ag_in));
  BRAID_CUDA_CHECK(cudaFree(ag_out));
  BRAID_CUDA_CHECK(cudaFree(ag_in2));
  BRAID_CUDA_CHECK(cudaFree(ag_out2));
  const double ag_bytes = double(ag_count) * 2 * p.tp;
  const double algbw = ag_bytes / (ag_us * 1e-6) / 1e9, busbw = algbw * (p.tp - 1) / p.tp;
  // With the MoE counts on the device the all-to-alls are Comm::all_to_all_rows, which an NCCL comm runs over a peer
  // comm of its own (capped at the same CTAs as NCCL under --throttle, but its own bandwidth): measure it too, at the
  // dispatch's size with balanced routing (each rank sends local tokens x top-k rows, an equal share to every rank).
  double rows_us = 0, rows_busbw = 0;
  if (c.moe() && c.moe_device_sizes && p.tp > 1) {
    const int64_t per_pair = int64_t(local_tokens) * c.top_k / p.tp, rows = per_pair * p.tp;
    void *r_in = nullptr, *r_out = nullptr;
    int* mat = nullptr;
    BRAID_CUDA_CHECK(cudaMalloc(&r_in, size_t(rows) * c.hidden * 2));
    BRAID_CUDA_CHECK(cudaMalloc(&r_out, size_t(rows) * c.hidden * 2));
    BRAID_CUDA_CHECK(cudaMalloc(&mat, sizeof(int) * p.tp * p.tp));
    const std::vector<int> m_h(size_t(p.tp) * p.tp, int(per_pair));
    BRAID_CUDA_CHECK(cudaMemcpy(mat, m_h.data(), m_h.size() * sizeof(int), cudaMemcpyHostToDevice));
    comm_a.reserve_rows_exchange(size_t(rows), size_t(c.hidden), m::DType::kBF16);  // (the layers reserved more)
    rows_us = med([&](int) {
      comm_a.all_to_all_rows(r_in, r_out, mat, false, size_t(c.hidden), size_t(rows), m::DType::kBF16, s);
    });
    BRAID_CUDA_CHECK(cudaFree(r_in));
    BRAID_CUDA_CHECK(cudaFree(r_out));
    BRAID_CUDA_CHECK(cudaFree(mat));
    // nccl-tests' all-to-all: busbw = algbw x (n - 1) / n, algbw = the bytes each rank sends / time
    rows_busbw = double(rows) * c.hidden * 2 / (rows_us * 1e-6) / 1e9 * (p.tp - 1) / p.tp;
  }
  const double busbw2 = 2 * ag_bytes / (ag2_us * 1e-6) / 1e9 * (p.tp - 1) / p.tp;

  // --replicated-grads step[:M]: no backward all-reduces the replicated gradients (their totals are reduced once per
  // step, model::Layer::reduce_replicated_grads), so no timed unit paid for it. Every row pays it here: that
  // all-reduce (fp32, 2H + H·E values, on comm_a, random data) timed alone, x layers (one per layer: no coalescing
  // assumed), / M units per step — added to every variant and to the single-strand and round-robin references,
  // not to compute only (the reduce is communication a step exposes whole: charged as exposed for everyone).
  double step_reduce_us = 0, step_charge_us = 0;
  std::vector<Variant> vs = measured;
  if (a.step_microbatches > 0 && p.reduces_replicated_grads_per_step()) {
    const size_t n = size_t(2 * c.hidden) + (c.moe() ? size_t(c.hidden) * c.experts : 0);
    const std::vector<double> v = m::random_values(n, 71 + uint64_t(team.rank()), 1.0);
    const std::vector<float> h(v.begin(), v.end());
    float* r = nullptr;
    BRAID_CUDA_CHECK(cudaMalloc(&r, n * sizeof(float)));
    BRAID_CUDA_CHECK(cudaMemcpy(r, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    step_reduce_us = med([&](int) { comm_a.all_reduce(r, r, n, m::DType::kFP32, s); });
    BRAID_CUDA_CHECK(cudaFree(r));
    step_charge_us = step_reduce_us * layers / a.step_microbatches;
    for (auto& v : vs) {
      v.us += step_charge_us;
      for (auto& u : v.round_us) u += step_charge_us;
      if (v.ref_single_us > 0) v.ref_single_us += step_charge_us;
      if (v.ref_rr_us > 0) v.ref_rr_us += step_charge_us;
      for (auto& u : v.ref_single_rounds) u += step_charge_us;
    }
  }

  const double flops = layers * (m::layer_model_flops(c, m::Phase::kForward) + m::layer_model_flops(c, m::Phase::kBackward)) / p.tp;
  const double single_us = vs[0].us;
  const double exposed_single = std::max(0.0, single_us - compute_us);
  // A second compute reference: the pair table's solo times of the compute operators, summed (each operator
  // timed alone, repeated: no launch gaps between operators). Chained stack passes ran below the compute-only
  // pass (9e94336: 321 against 359 ms for the 70B stack at 2 CTAs), so that pass is no floor for them.
  const double solo_us = plan.serial_us > plan.comm_us ? layers * (plan.serial_us - plan.comm_us) : 0.0;
  const double exposed_single_solo = std::max(0.0, single_us - solo_us);
  const double rr_us = [&] {
    for (const auto& v : vs)
      if (v.name == rr_name) return v.us;
    return 0.0;
  }();
  if (root) {
    std::printf("# %s, %s, tokens per micro-batch %lld, throttle %s: all-gather of %.1f MiB %.1f us = %.1f GB/s algbw, "
                "%.1f GB/s busbw\n",
                c.name.c_str(), strand_parallel_tag(c, p).c_str(), (long long)c.tokens(),
                a.throttle > 0 ? (std::to_string(a.throttle) + " CTAs").c_str() : "off", ag_bytes / 1048576.0, ag_us,
                algbw, busbw);
    std::printf("# two all-gathers at once (comm a and comm b on two streams, as round-robin runs them): %.1f us, "
                "%.1f GB/s aggregate busbw (%.2fx one)\n",
                ag2_us, busbw2, busbw > 0 ? busbw2 / busbw : 0.0);
    if (step_reduce_us > 0)
      std::printf("# replicated gradients reduced once per step of %d micro-batches (Megatron's way; no backward "
                  "all-reduces them): that all-reduce %.1f us alone x %d layer(s) / %d = %.1f us added to every row "
                  "below and its single-strand / round-robin references (not to compute only)\n",
                  a.step_microbatches, step_reduce_us, layers, a.step_microbatches, step_charge_us);
    if (rows_us > 0)
      std::printf("# the MoE all-to-all with device counts (Comm::all_to_all_rows over peer memory, not NCCL%s): the "
                  "dispatch's size, balanced, %.1f us = %.1f GB/s busbw\n",
                  a.throttle > 0 ? ", capped at the same CTAs" : "", rows_us, rows_busbw);
    context(compute_us, comm_us);
    if (solo_us > 0)
      std::printf("# compute from the pair table's solo operator times: %.1f us (compute-only pass %.1f us); hidden(solo) "
                  "measures exposure against it\n",
                  solo_us, compute_us);
    if (!compute_rounds.empty()) {
      std::printf("# hidden/pass: the hidden fraction in each interleaved pass (the variant, the single strand and compute "
                  "only timed side by side in that pass), lowest-highest; '-' for a variant timed on its own\n");
      // The reference's own noise against what is measured (docs/dhelix.md, fifty-sixth session: with two timed
      // iterations per pass a 70B layer's NVLink figures were noise).
      const double spread = *std::max_element(compute_rounds.begin(), compute_rounds.end()) -
                            *std::min_element(compute_rounds.begin(), compute_rounds.end());
      std::printf("# noise: compute only spreads %.1f us over the %zu passes against %.1f us exposed by the single "
                  "strand%s\n",
                  spread, compute_rounds.size(), exposed_single,
                  spread >= exposed_single ? ": the hidden fractions below are within the reference's noise (more "
                                             "--iters per pass narrow it)"
                                           : "");
    }
    std::printf("%-20s %10s %12s %7s %12s %8s %11s %12s %9s %9s %9s %10s %10s\n", "variant", "time(us)", "tokens/s", "MFU",
                "exposed(us)", "hidden", "hidden(solo)", "hidden/pass", "vs single", "vs rr", "mem(MiB)", "host(us)",
                "moewait");
  }
  for (const auto& v : vs) {
    // A variant with a group of its own is measured against that group's references.
    const bool own = v.ref_single_us > 0 && v.ref_compute_us > 0;
    const double v_compute = own ? v.ref_compute_us : compute_us, v_single = own ? v.ref_single_us : single_us;
    const double v_rr = own ? v.ref_rr_us : rr_us;
    const double v_exposed_single = std::max(0.0, v_single - v_compute);
    const double exposed = std::max(0.0, v.us - v_compute);
    const double hidden = v_exposed_single > 0 ? 1.0 - exposed / v_exposed_single : 0.0;
    const double hidden_solo =
        exposed_single_solo > 0 ? 1.0 - std::max(0.0, v.us - solo_us) / exposed_single_solo : 0.0;
    // a unit (a stack's pass) moves one micro-batch's forward and another's backward through the layer (the stack)
    const double tok_s = double(c.tokens()) / (v.us * 1e-6);
    const double mfu = flops / (v.us * 1e-6) / kPeakFlops;
    // The spread over passes: each pass's hidden fraction against that pass's single strand and compute only.
    double pass_lo = std::nan(""), pass_hi = std::nan("");
    const std::vector<double>& c_rounds = own ? v.ref_compute_rounds : compute_rounds;
    const std::vector<double>& s_rounds = own ? v.ref_single_rounds : vs[0].round_us;
    if (!c_rounds.empty() && v.round_us.size() == c_rounds.size() && s_rounds.size() == c_rounds.size())
      for (const double h : bench::hidden_by_round(v.round_us, s_rounds, c_rounds))
        if (!std::isnan(h)) {
          pass_lo = std::isnan(pass_lo) ? h : std::min(pass_lo, h);
          pass_hi = std::isnan(pass_hi) ? h : std::max(pass_hi, h);
        }
    if (root) {
      char hs[32] = "-";
      if (solo_us > 0) std::snprintf(hs, sizeof hs, "%.1f%%", 100 * hidden_solo);
      char hi[32] = "-", hw[32] = "-";
      if (v.host_issue_us >= 0) std::snprintf(hi, sizeof hi, "%.0f", v.host_issue_us);
      if (v.host_wait_us >= 0) std::snprintf(hw, sizeof hw, "%.0f", v.host_wait_us);
      char hp[32] = "-";
      if (!std::isnan(pass_lo)) std::snprintf(hp, sizeof hp, "%.0f..%.0f%%", 100 * pass_lo, 100 * pass_hi);
      std::printf("%-20s %10.1f %12.0f %6.1f%% %12.1f %7.1f%% %11s %12s %8.3fx %8.3fx %9.1f %10s %10s\n", v.name.c_str(),
                  v.us, tok_s, 100 * mfu, exposed, 100 * hidden, hs, hp, v_single / v.us, v_rr > 0 ? v_rr / v.us : 0.0,
                  v.mem / 1048576.0, hi, hw);
      bench::Json j;
      j.add("bench", "strands").add("variant", v.name).add("model", c.name).add("parallel", strand_parallel_tag(c, p));
      j.add("layers", layers).add("seq", c.seq).add("micro_batch", c.micro_batch).add("tp", p.tp).add("comm", comm_a.name())
          .add("throttle_ctas", a.throttle)
          .add("rows_exchange_us", rows_us)
          .add("rows_exchange_busbw_gbs", rows_busbw)
          .add("link_priority", link_priority_high() ? "high" : "normal").add("timing_rounds", v.rounds)
          .add("gemm_sm_reserve", v.name.size() > 6 && v.name.compare(v.name.size() - 6, 6, "-smres") == 0 ? a.gemm_sm_reserve : 0);
      j.add("replicated_grads", a.step_microbatches > 0 ? "per step" : "per backward");
      if (a.step_microbatches > 0)
        j.add("step_microbatches", a.step_microbatches).add("step_reduce_us", step_reduce_us)
            .add("step_reduce_charge_us", step_charge_us);
      j.add("time_us", v.us).add("tokens_per_s", tok_s).add("mfu", mfu).add("compute_only_us", compute_us);
      j.add("comm_alone_us", comm_us).add("exposed_comm_us", exposed).add("hidden_fraction", hidden);
      j.add("compute_solo_sum_us", solo_us).add("hidden_fraction_vs_solo_sum", hidden_solo);
      j.add("hidden_fraction_pass_min", pass_lo).add("hidden_fraction_pass_max", pass_hi);
      if (!compute_rounds.empty())  // the reference's own spread over the interleaved passes
        j.add("compute_only_pass_min_us", *std::min_element(compute_rounds.begin(), compute_rounds.end()))
            .add("compute_only_pass_max_us", *std::max_element(compute_rounds.begin(), compute_rounds.end()));
      j.add("host_issue_us", v.host_issue_us).add("host_moe_wait_us", v.host_wait_us);
      j.add("speedup_vs_single", v_single / v.us).add("speedup_vs_round_robin", v_rr > 0 ? v_rr / v.us : 0.0);
      if (own)  // measured against its own group's references (the main group's are in compute_only_us etc.)
        j.add("reference", "own interleaved group").add("ref_single_us", v.ref_single_us)
            .add("ref_round_robin_us", v.ref_rr_us).add("ref_compute_only_us", v.ref_compute_us);
      if (own && !v.ref_compute_rounds.empty())
        j.add("ref_compute_only_pass_min_us", *std::min_element(v.ref_compute_rounds.begin(), v.ref_compute_rounds.end()))
            .add("ref_compute_only_pass_max_us",
                 *std::max_element(v.ref_compute_rounds.begin(), v.ref_compute_rounds.end()));
      j.add("mem_bytes", v.mem).add("mem_ratio_vs_single", v.mem / one_set);
      j.add("ag_busbw_gbs", busbw).add("ag_pair_busbw_gbs", busbw2).add("plan_source", plan_source).add("plan_predicted_us", plan.total_us);
      j.add("plan_steps", plan.steps.size()).add("verified", ok);
      if (!v.order.empty()) j.add("arena_order", v.order).add("arena_pool_bytes", v.pool_bytes);
      if (drop_fraction >= 0) j.add("moe_capacity", c.capacity).add("moe_dropped_fraction", drop_fraction);
      if (c.moe()) {
        j.add("moe_sizes", c.moe_device_sizes ? "device" : "host");
        // What the compute-only pass's MoE forwards were sized by: a stack replays every layer's own routing
        // (StrandStack::pass_compute_only, since 9235032; stack rows without this key ran on stale routing), one
        // layer keeps its own last real forward's.
        j.add("compute_only_routing", a.layers > 1 ? "replayed per layer" : "the layer's own");
      }
      for (const auto& [k, v] : extras) j.add(k, v);
      j.add_context(ctx);
      bench::append_jsonl(a.json, j.str());
    }
  }
}

// ---- the stack (--layers L > 1) ---------------------------------------------------------------------------

// The strand executors the stack runs, by the one-layer variant's name: the two-link orders that hid the most
// with two full activation sets in the one-layer runs (docs/dhelix.md), on `base` (the layer's DAG, the
// small or the timed shape). `plan_file`: the searched plan; `orders2`: the two-link issue orders.
std::unique_ptr<StrandExecutor> stack_executor(const std::string& name, const Layer& base, const PlanFile& plan_file,
                                               const std::vector<std::pair<std::string, PlanFile>>& orders2,
                                               const StrandStreams& streams) {
  const Layer two = two_link_layer(base);
  if (name == "strands-whole-2link-dag") {
    const Layer d = dep_ready_layer(two);
    return std::make_unique<StrandExecutor>(d, whole_pass_plan(d, from_plan_file(base, plan_file)), streams);
  }
  for (const auto& [n, pf] : orders2) {
    if (n == name) return std::make_unique<StrandExecutor>(two, from_plan_file(two, pf), streams);
    if (n + "-dag" == name) {
      const Layer d = dep_ready_layer(two);
      return std::make_unique<StrandExecutor>(d, from_plan_file(d, pf), streams);
    }
  }
  return nullptr;  // that order was not searched (no two-link orders)
}

const char* const kStackOrders[] = {"strands-whole-2link-dag", "strands-best-order-2link",
                                    "strands-best-order-sinks-2link-dag", "strands-corun-moves-2link-dag",
                                    "strands-corun-moves-w0-2link-dag"};
// The stack executors also run chained (StrandStack::pass_chained), with and without a spare slot.
bool chained(const std::string& name) { return name != "strands-best-order-sinks-2link-dag"; }

// The saved tensors a split-slot stack doubles within `budget` bytes (beside the joined stack's L + 1
// slots): x (always, written first) and then the saved tensors in the order of their producers in the
// forward, while the early part (256-byte rounded, as StrandStack lays it out) fits. Stops at the first that
// does not fit: a later tensor alone buys nothing while an earlier one still waits for b's layer.
std::vector<std::string> doubled_within(const m::Layer& l, const Layer& dag, double budget) {
  const auto layout = l.saved_layout();
  auto bytes_of = [&](const std::string& name) {
    for (const auto& [n, b] : layout)
      if (n == name) return double((b + 255) / 256 * 256);
    return 0.0;
  };
  std::vector<std::pair<int, std::string>> by_producer;
  for (const auto& t : saved_tensors(l.config(), l.parallel())) {
    int k = 0;
    while (size_t(k) < dag.fwd.size() && dag.fwd[size_t(k)].name != t.producer) ++k;
    by_producer.push_back({k, t.name});
  }
  std::stable_sort(by_producer.begin(), by_producer.end(),
                   [](const auto& x, const auto& y) { return x.first < y.first; });
  double used = double((size_t(l.local_tokens()) * size_t(l.config().hidden) * 2 + 255) / 256 * 256);  // x
  if (used > budget) return {};
  std::vector<std::string> out = {"x"};
  for (const auto& [k, name] : by_producer) {
    if (used + bytes_of(name) > budget) break;
    used += bytes_of(name);
    out.push_back(name);
  }
  return out;
}

// The op trace of one traced run (root only): span, operators and the time between them, then every operator
// against its solo time (dag's, from the pair table), by excess.
void print_op_trace(const OpTrace& trace, const Layer& dag, const std::string& what) {
  auto solo_of = [&](const std::string& name) {
    for (const auto* ops : {&dag.fwd, &dag.bwd})
      for (const auto& o : *ops)
        if (o.name == name) return o.solo_us;
    return 0.0;
  };
  auto tot = trace.totals();
  std::stable_sort(tot.begin(), tot.end(), [&](const OpTrace::Total& x, const OpTrace::Total& y) {
    return x.us - x.calls * solo_of(x.name) > y.us - y.calls * solo_of(y.name);
  });
  const double span = trace.span_us(), ops = trace.ops_us();
  std::printf("# op trace (%s, rank 0, events around every operator): span %.1f us, operators %.1f us, between them "
              "%.1f us; per operator, by excess over its solo time:\n",
              what.c_str(), span, ops, span - ops);
  std::printf("# %-26s %6s %12s %10s %10s %7s %12s\n", "operator", "calls", "total(us)", "per call", "solo(us)", "ratio",
              "excess(us)");
  double solo_total = 0;
  for (const auto& t : tot) {
    const double solo = solo_of(t.name), per = t.us / std::max(1, t.calls);
    solo_total += solo * t.calls;
    std::printf("# %-26s %6d %12.1f %10.1f %10.1f %7.3f %12.1f\n", t.name.c_str(), t.calls, t.us, per, solo,
                solo > 0 ? per / solo : 0.0, t.us - solo * t.calls);
  }
  std::printf("# op trace total: operators %.1f us against their solo times %.1f us (%.3fx); pass span %.1f us\n", ops,
              solo_total, solo_total > 0 ? ops / solo_total : 0.0, span);
}

// A traced two-strand unit's (or stack pass's) breakdown (summarize_strand_trace, rank 0's trace) against the traced
// compute-only run `ref`, printed: the span less the reference's is what the table calls exposed.
void print_strand_trace(const OpTrace& t, const OpTrace& ref, cudaStream_t compute, const std::string& what) {
  const StrandTraceSummary x = summarize_strand_trace(t.spans(), ref.spans(), compute);
  std::printf("# strand trace (%s, rank 0): span %.1f us against the traced compute-only run's %.1f (%+.1f us); compute "
              "stream busy %.1f us (compute only %.1f: %+.1f, co-run slowdown), idle %.1f us (compute only %.1f: %+.1f; "
              "of the idle time %.1f us with a collective in flight); %d collectives, %.1f us on the link streams\n",
              what.c_str(), x.span_us, x.ref_span_us, x.span_us - x.ref_span_us, x.busy_us, x.ref_busy_us,
              x.busy_us - x.ref_busy_us, x.idle_us, x.ref_idle_us, x.idle_us - x.ref_idle_us, x.idle_in_flight_us,
              x.collectives, x.link_busy_us);
  std::printf("#   compute-stream gaps of 1 us or more by the operator held back <- the collective that ended last in the "
              "gap (total us, with a collective in flight, times, longest):");
  for (size_t i = 0; i < x.gaps.size() && i < 10; ++i)
    std::printf("%s %s <- %s %.1f (%.1f) x%d max %.1f", i ? ";" : "", x.gaps[i].held.c_str(), x.gaps[i].waited.c_str(),
                x.gaps[i].us, x.gaps[i].in_flight_us, x.gaps[i].count, x.gaps[i].longest_us);
  std::printf("\n#   compute operators by time over the compute-only run's: %+.1f us in operators run mostly beside a "
              "collective, %+.1f us in the others;",
              x.excess_beside_us, x.excess_alone_us);
  for (size_t i = 0; i < x.ops.size() && i < 8; ++i)
    std::printf("%s %s %.1f/%.1f (%.0f%% beside)", i ? "," : "", x.ops[i].name.c_str(), x.ops[i].us, x.ops[i].ref_us,
                x.ops[i].us > 0 ? 100 * x.ops[i].beside_us / x.ops[i].us : 0.0);
  std::printf("\n");
}

// --op-trace for one variant (a unit, or a stack pass): two untraced runs first (the state the timed passes ran in),
// then one inside an OpTrace::Scope, printed (rank 0) against the traced compute-only run `ref`. Collective.
void trace_variant(Team& team, cudaStream_t s, const std::string& name, const std::function<void(int)>& fn,
                   const OpTrace& ref) {
  fn(0);
  fn(0);
  OpTrace t;
  {
    OpTrace::Scope scope(t);
    fn(0);
  }
  team.synchronize(s, "bench strands variant trace");
  if (team.rank() == 0) print_strand_trace(t, ref, s, name);
}

// A clock window's line (collective): rank 0's summary and the lowest mean SM clock over the ranks.
void print_clocks(Team& team, const std::string& what, const bench::ClockSummary& c) {
  const double lo = team.allreduce_min(c.samples > 0 ? c.mean_mhz : 1e9);
  if (team.rank() == 0) {
    if (lo >= 1e9) std::printf("# GPU clock, %s: no samples (NVML unavailable)\n", what.c_str());
    else std::printf("# GPU clock, %s: rank 0 %s; lowest rank's mean %.0f MHz\n", what.c_str(), c.str().c_str(), lo);
  }
}

// DHelix over a stack of a.layers layers (StrandStack): verified on the small shape (3 layers) against the
// same micro-batches one strand at a time, then single strand, round-robin and the strand executors timed
// interleaved, a pass each (one micro-batch's forward through the stack beside another's backward).
int bench_stack(Team& team, const Args& a, const m::ModelConfig& c, const m::Parallel& p, const bench::Context& ctx,
                Streams& st, m::Comm& comm_a, m::Comm& comm_b, const Layer& dag, const PlanFile& plan_file,
                const std::vector<std::pair<std::string, PlanFile>>& orders2, const std::string& plan_source,
                const Plan& plan) {
  const bool root = team.rank() == 0;
  cudaStream_t s = st.s.compute;
  const bool io = p.sp && p.tp > 1;  // y/dy/dx shared by the two objects (Layer::share_interfaces)
  namespace k = model::kernels;
  auto fill = [&](void* ptr, const m::Layer& l, uint64_t seed, float lo, float hi) {
    k::fill_uniform(static_cast<k::bf16*>(ptr), size_t(l.local_tokens()) * l.config().hidden, seed, lo, hi, s);
  };
  // Both objects' micro-batches: inputs in [-1, 1], output gradients in [-1e-2, 1e-2] (as fill_inputs).
  auto fill_stack = [&](StrandStack& sk, const m::Layer& l, uint64_t seed) {
    for (int o = 0; o < 2; ++o) {
      fill(sk.input(o), l, seed + 10 * o, -1.f, 1.f);
      fill(sk.dout(o), l, seed + 10 * o + 1, -1e-2f, 1e-2f);
    }
  };
  bool ok = true;
  // Verification on the small shape. split empty: every stack variant; else only the chained variants on
  // split slots with those doubled tensors (StrandStack's `doubled`), chosen at the timed shape.
  auto verify_stack = [&](const std::vector<std::string>& split) {
    const m::ModelConfig sc = small_of(c);
    const int lv = std::min(a.layers, 3);
    m::Layer va(sc, p, comm_a);
    va.init_random_weights(5);
    va.set_accumulate_grads(true);
    m::Layer vb(va, comm_b, m::Layer::Share::kAll);
    if (io) vb.share_interfaces(va);
    StrandStack vstack(va, vb, lv);
    const Layer vdag = strand_layer(sc, p, links_of(a));
    const size_t n = size_t(va.local_tokens()) * sc.hidden;
    // Two passes from the same start: a's forward beside b's backward, then b's next micro-batch forward
    // beside a's backward. The snapshot: a's top output, b's bottom dx and the gradients after the first;
    // a's bottom dx, the gradients (both micro-batches, accumulated) and b's top output after the second.
    auto sequence_on = [&](StrandStack& vstack, const std::function<void()>& one_pass) {
      vstack.reset();
      fill_stack(vstack, va, 11);
      va.zero_grads(s);
      vstack.forward(1, s);
      one_pass();
      team.synchronize(s, "stack verification pass");
      Snapshot r;
      r.ya = bits_of(va.y(), n);
      r.dxb = bits_of(vb.dx(), n);
      r.gb = va.download_grads();
      fill(vstack.input(1), va, 41, -1.f, 1.f);  // b's next micro-batch
      one_pass();
      team.synchronize(s, "stack verification pass 2");
      r.dxa = bits_of(va.dx(), n);
      r.gsum = va.download_grads();
      r.yb2 = bits_of(vb.y(), n);
      return r;
    };
    auto sequence = [&](const std::function<void()>& one_pass) { return sequence_on(vstack, one_pass); };
    const Snapshot ref = sequence([&] { vstack.pass_single(s); });
    auto check_bits = [&](const std::string& what, const Snapshot& got) {
      const double diff = team.allreduce_max(double(strands_differences(ref, got, sc)));
      ok = ok && diff == 0;
      if (root)
        std::printf("# verification (%s, stack of %d layers, two passes): %s vs one strand at a time: %.0f differing "
                    "values (bitwise) -> %s\n",
                    sc.name.c_str(), lv, what.c_str(), diff, diff == 0 ? "Passed" : "FAILED");
      if (diff != 0)
        std::printf("#   [rank %d] differing:%s\n", team.rank(), strands_difference_report(ref, got, sc).c_str());
    };
    if (!split.empty()) {
      StrandStack sk(va, vb, lv, 0, split);
      for (const char* name : kStackOrders)
        if (auto ex = chained(name) ? stack_executor(name, vdag, plan_file, orders2, st.s) : nullptr)
          check_bits(std::string("stack-chained-split-") + name, sequence_on(sk, [&] { sk.pass_chained(s, *ex); }));
      check_bits("stack-chained-split-round-robin", sequence_on(sk, [&] { sk.pass_chained_rr(s); }));
      check_bits("stack-chained-split-round-robin-bfirst", sequence_on(sk, [&] { sk.pass_chained_rr(s, true); }));
      check_bits("stack-chained-split-round-robin-bfirst-moves",
                 sequence_on(sk, [&] { sk.pass_chained_rr(s, true, true); }));
      return;
    }
    check_bits("stack-round-robin", sequence([&] {
                 vstack.pass(s, [&](m::Layer& f, m::Layer& b) { run_round_robin(f, b, s, st.extra, st.rr); });
               }));
    check_bits("stack-round-robin-bfirst", sequence([&] {
                 vstack.pass(s, [&](m::Layer& f, m::Layer& b) { run_round_robin(f, b, s, st.first, st.rr); });
               }));
    for (const char* name : kStackOrders) {
      auto ex = stack_executor(name, vdag, plan_file, orders2, st.s);
      if (!ex) continue;
      check_bits(std::string("stack-") + name, sequence([&] { vstack.pass(s, [&](m::Layer& f, m::Layer& b) { ex->run(f, b); }); }));
      if (a.chain && chained(name)) {
        check_bits(std::string("stack-chained-") + name, sequence([&] { vstack.pass_chained(s, *ex); }));
        StrandStack spare(va, vb, lv, 1);  // the sequence runs on vstack: swap it in for this check
        check_bits(std::string("stack-chained-spare-") + name, sequence_on(spare, [&] { spare.pass_chained(s, *ex); }));
      }
    }
    if (a.gemm_sm_reserve > 0) {  // GEMMs on fewer SMs: cuBLAS may pick other kernels (relative L2, not bits)
      const int sms = gemm_sms_leaving(a.gemm_sm_reserve);
      auto ex = stack_executor(kStackOrders[0], vdag, plan_file, orders2, st.s);
      va.set_gemm_sm_target(sms), vb.set_gemm_sm_target(sms);
      const Snapshot got = sequence([&] { vstack.pass(s, [&](m::Layer& f, m::Layer& b) { ex->run(f, b); }); });
      va.set_gemm_sm_target(0), vb.set_gemm_sm_target(0);
      ok = l2_verdict(team, root, ref, got, sc,
                      std::string("stack-") + kStackOrders[0] + " with GEMMs on " + std::to_string(sms) + " SMs",
                      "one strand at a time") &&
           ok;
    }
  };
  if (a.verify) {
    verify_stack({});
    if (!ok) return 3;
  }

  // ---- timing: the stack at the timed shape ----
  m::Layer sa(c, p, comm_a);
  sa.init_random_weights(17);
  sa.set_accumulate_grads(true);
  m::Layer sb(sa, comm_b, m::Layer::Share::kAll);
  if (io) sb.share_interfaces(sa);
  StrandStack stack(sa, sb, a.layers);
  fill_stack(stack, sa, 101 + 100 * uint64_t(team.rank()));
  sa.zero_grads(s);
  stack.forward(1, s);
  team.synchronize(s, "stack warm-up");
  const bench::TimingOptions opt{a.warmup, a.iters};
  auto med = [&](const std::function<void(int)>& fn) {
    return bench::summarize(bench::time_iterations(&team, s, opt, fn)).median_us;
  };
  // Memory by the allocator's accounting, as the one-layer variants: one strand needs one layer object,
  // L slots and one micro-batch input and output gradient; two strands both objects and L + 1 slots.
  const double L = a.layers, slot = double(stack.slot_bytes()), extra = double(stack.extra_bytes()) / 2;
  const double mem_single = double(sa.memory().total()) + L * slot + extra;
  const double mem_two = double(sa.memory().total()) + double(sb.memory().total()) + (L + 1) * slot + extra;
  // Communication alone (every collective of a layer's forward and backward, one at a time) times L.
  double comm_us = 0;
  for (const auto ph : {m::Phase::kForward, m::Phase::kBackward}) {
    m::Layer& l = ph == m::Phase::kForward ? sa : sb;
    const auto& ops = l.ops(ph);
    for (size_t i = 0; i < ops.size(); ++i)
      if (ops[i].kind == m::OpKind::kComm) comm_us += L * med([&](int) { l.run_op(ph, i, s); });
  }
  const int gemm_sms = gemm_sms_leaving(a.gemm_sm_reserve);
  auto reserved = [&](const std::function<void()>& f) {
    sa.set_gemm_sm_target(gemm_sms), sb.set_gemm_sm_target(gemm_sms);
    f();
    sa.set_gemm_sm_target(0), sb.set_gemm_sm_target(0);
  };
  std::vector<std::unique_ptr<StrandExecutor>> exs;
  Interleaved iv;
  auto rr = [&](m::Layer& f, m::Layer& b) { run_round_robin(f, b, s, st.extra, st.rr); };
  iv.add("stack-single-strand", [&](int) { stack.pass_single(s); }, mem_single);
  iv.add("stack-round-robin", [&](int) { stack.pass(s, rr); }, mem_two);
  auto rr_first = [&](m::Layer& f, m::Layer& b) { run_round_robin(f, b, s, st.first, st.rr); };
  if (a.gemm_sm_reserve > 0) {
    iv.add("stack-round-robin-smres", [&](int) { reserved([&] { stack.pass(s, rr); }); }, mem_two);
    iv.add("stack-round-robin-bfirst-smres", [&](int) { reserved([&] { stack.pass(s, rr_first); }); }, mem_two);
  }
  // Chained units with one spare slot: a second stack over the same two objects (its own L + 2 slots;
  // each stack places the objects' pointers before every layer it runs, so their passes interleave).
  std::unique_ptr<StrandStack> spare, split;
  const double mem_spare = mem_two + slot;
  double mem_split = 0;
  if (a.chain) {
    spare = std::make_unique<StrandStack>(sa, sb, a.layers, 1);
    fill_stack(*spare, sa, 101 + 100 * uint64_t(team.rank()));
    spare->forward(1, s);
    // Split slots: x and the saved tensors written first in the forward doubled, as many as fit in the
    // memory two strands may take (1.05x one strand) beside the joined stack's L + 1 slots.
    const std::vector<std::string> doubled = doubled_within(sa, dag, 1.05 * mem_single - mem_two);
    if (root) {
      std::printf("# split slots: doubled");
      for (const auto& d : doubled) std::printf(" %s", d.c_str());
      std::printf("%s (%.1f MiB of headroom under 1.05x one strand)\n", doubled.empty() ? " nothing, not even x: not run" : "",
                  (1.05 * mem_single - mem_two) / 1048576.0);
    }
    if (!doubled.empty()) {
      if (a.verify) {
        verify_stack(doubled);
        if (!ok) return 3;
      }
      split = std::make_unique<StrandStack>(sa, sb, a.layers, 0, doubled);
      mem_split = double(sa.memory().total()) + double(sb.memory().total()) + double(split->pool_bytes()) + extra;
      fill_stack(*split, sa, 101 + 100 * uint64_t(team.rank()));
      split->forward(1, s);
    }
    team.synchronize(s, "stack (spare slot, split slots) warm-up");
  }
  if (split)  // round-robin's two streams, chained between units, on the split slots; -bfirst: b's stream first
    for (const bool first : {false, true})
      iv.add(std::string("stack-chained-split-round-robin") + (first ? "-bfirst" : "") +
                 (a.gemm_sm_reserve > 0 ? "-smres" : ""),
             [&, first](int) {
               a.gemm_sm_reserve > 0 ? reserved([&] { split->pass_chained_rr(s, first); }) : split->pass_chained_rr(s, first);
             },
             mem_split);
  // -moves: b's weight-gradient GEMMs beside its own collectives, which run on a stream of b's own
  // (sinks_beside_collectives; fifty-ninth session: in the bfirst pass each of b's collectives is followed at once, on
  // b's one stream, by the operator that waits for it; no gain measured, docs/dhelix.md)
  if (split)
    iv.add(std::string("stack-chained-split-round-robin-bfirst-moves") + (a.gemm_sm_reserve > 0 ? "-smres" : ""),
           [&](int) {
             a.gemm_sm_reserve > 0 ? reserved([&] { split->pass_chained_rr(s, true, true); })
                                   : split->pass_chained_rr(s, true, true);
           },
           mem_split);
  for (const char* name : kStackOrders) {
    auto ex = stack_executor(name, dag, plan_file, orders2, st.s);
    if (!ex) continue;
    StrandExecutor* e = ex.get();
    exs.push_back(std::move(ex));
    auto unit = [&, e](m::Layer& f, m::Layer& b) { e->run(f, b); };
    const bool res = a.gemm_sm_reserve > 0 && std::string(name) != "strands-best-order-sinks-2link-dag";
    iv.add(std::string("stack-") + name, [&, unit](int) { stack.pass(s, unit); }, mem_two);
    if (res)
      iv.add(std::string("stack-") + name + "-smres", [&, unit](int) { reserved([&] { stack.pass(s, unit); }); }, mem_two);
    if (!a.chain || !chained(name)) continue;
    // Chained variants at the better cap only (the -smres one where GEMMs leave SMs to the collectives).
    // Chained on the L + 1 slots alone (spare 0) ran within 1% of the joined units (d088076, 7b6bd9a):
    // verified, not timed. The spare slot (1.08x memory) for the first executor only, beside the split.
    const std::string suffix = res ? "-smres" : "";
    if (std::string(name) == kStackOrders[0])
      iv.add(std::string("stack-chained-spare-") + name + suffix,
             [&, e, res](int) { res ? reserved([&] { spare->pass_chained(s, *e); }) : spare->pass_chained(s, *e); },
             mem_spare);
    if (split)
      iv.add(std::string("stack-chained-split-") + name + suffix,
             [&, e, res](int) { res ? reserved([&] { split->pass_chained(s, *e); }) : split->pass_chained(s, *e); },
             mem_split);
  }
  // Compute only, interleaved (Interleaved::time): a compute-only pass skips the all-gathers, so its GEMMs read
  // whatever the gathered buffers of their slots hold. Timed on its own before the variants, those were the
  // pool's zeros and the pass ran 15.1 ms per layer (GEMMs on zero inputs run faster); timed on its own after
  // them, on a GPU warm from the passes, 17.8 ms (throttled 70B layer, 2x H200, 36872c0).
  // MoE: the compute-only pass replays every layer's own routing (StrandStack::pass_compute_only), which a
  // real forward of each object records first: one strand at a time, a pass per object.
  if (c.moe()) {
    stack.pass_single(s), stack.pass_single(s);
    team.synchronize(s, "bench strands (stack) routing of every layer");
  }
  std::vector<Variant> vs;
  iv.waited = [&] { return sa.host_wait_us() + sb.host_wait_us(); };
  Variant compute_host;
  const size_t first_iv = vs.size();  // vs[first_iv + k]: iv.names[k]'s row
  const double compute_us =
      iv.time(team, s, opt, a.rounds, [&](int) { stack.pass_compute_only(s); }, vs, &compute_host);
  if (root)
    std::printf("# interleaved timing: %d rounds over %zu variants and compute only, %d passes each\n", a.rounds,
                vs.size(), a.iters);
  // Timed data must be data: every timed stack's micro-batch inputs and output gradients, after the timing, hold
  // values other than zeros (the thirty-sixth session's chained stacks computed on inputs a late constructor memset
  // had zeroed; their times were withdrawn in the fiftieth). A zeroed one fails the run.
  {
    BRAID_CUDA_CHECK(cudaDeviceSynchronize());
    const size_t n = std::min<size_t>(size_t(sa.local_tokens()) * c.hidden, size_t(1) << 20);
    std::vector<uint16_t> h(n);
    auto zeros = [&](const void* d) {
      BRAID_CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(uint16_t), cudaMemcpyDeviceToHost));
      return std::none_of(h.begin(), h.end(), [](uint16_t v) { return (v & 0x7fffu) != 0; });
    };
    int zeroed = 0;
    for (const StrandStack* sk : {&stack, spare.get(), split.get()})
      for (int o = 0; sk && o < 2; ++o) zeroed += int(zeros(sk->input(o))) + int(zeros(sk->dout(o)));
    zeroed = int(team.allreduce_max(double(zeroed)));
    if (root)
      std::printf("# stack inputs: %s\n", zeroed ? "ZEROED buffers among the timed stacks' inputs / output gradients: "
                                                   "the times below are not measurements -> FAILED"
                                                 : "every timed stack's inputs and output gradients hold data");
    if (zeroed) ok = false;
  }
  report(team, a, c, p, ctx, st, comm_a, comm_b, sa.local_tokens(), vs, compute_us, comm_us, mem_single,
         "stack-round-robin", a.layers, plan_source, plan, ok, [&](double compute, double comm) {
           std::printf("# stack of %d layers (one weight copy shared by the layers; StrandStack): a pass = one micro-batch's "
                       "forward through the stack + another's backward; compute only %.1f us, collectives alone %.1f "
                       "us; strands' link streams at %s priority\n",
                       a.layers, compute, comm, link_priority_high() ? "high" : "normal");
           std::printf("# host: issuing a compute-only pass took %.1f us; host(us) below: issuing a pass, moewait: of that, "
                       "blocked on MoE all-to-all counts (per pass, warm-up included)\n",
                       compute_host.host_issue_us);
           std::printf("# memory: layer object a %.1f MiB (weights %.1f, gradients %.1f, its other buffers and "
                       "workspace), b %.1f MiB; slot (saved set + x) %.1f MiB; one strand %d slots, two strands %d; "
                       "micro-batch input and output gradient %.1f MiB; two strands / one: %.4fx\n",
                       sa.memory().total() / 1048576.0, sa.memory().weights / 1048576.0, sa.memory().grads / 1048576.0,
                       sb.memory().total() / 1048576.0, slot / 1048576.0, a.layers, a.layers + 1, extra / 1048576.0,
                       mem_two / mem_single);
         }, sa, iv.compute_rounds);
  if (a.op_trace) {
    // One compute-only pass more, an event pair around every operator (rank 0's, printed): where the pass's time
    // goes against the operators' solo times (the pair table's), and how much sits between operators.
    stack.pass_single(s);
    team.synchronize(s, "bench strands (stack) pass before the op trace");
    if (c.moe() && !c.moe_device_sizes) {
      // The rows each rank's experts received per layer in the real forward just run (one weight copy shared by
      // the layers, random weights: the routing drifts away from balanced with depth), which the traced
      // compute-only pass replays as every compute-only pass does (StrandStack::pass_compute_only).
      const int held = 1 - stack.forward_object(), L = stack.layers(), n = team.size();
      std::vector<long long> mine(static_cast<size_t>(L)), all(static_cast<size_t>(L) * n);
      for (int l = 0; l < L; ++l) mine[size_t(l)] = stack.routing(held, l).rows;
      BRAID_MPI_CHECK(MPI_Gather(mine.data(), L, MPI_LONG_LONG, all.data(), L, MPI_LONG_LONG, 0, team.mpi()));
      if (root) {
        std::printf("# MoE rows received per layer (layer: rank 0, rank 1, ...; the most over the mean):");
        double worst = 0;
        for (int l = 0; l < L; ++l) {
          long long sum = 0, most = 0;
          std::printf(" %d:", l);
          for (int r = 0; r < n; ++r) {
            const long long v = all[size_t(r) * L + l];
            std::printf("%s%lld", r ? "," : "", v);
            sum += v, most = std::max(most, v);
          }
          const double ratio = sum > 0 ? double(most) * n / double(sum) : 0.0;
          worst = std::max(worst, ratio);
          std::printf("(%.2f)", ratio);
        }
        std::printf("; worst %.2fx\n", worst);
      }
    }
    OpTrace trace;
    stack.pass_compute_only(s, &trace);
    team.synchronize(s, "bench strands (stack) op trace");
    if (root) print_op_trace(trace, dag, "one compute-only pass of the stack");
    // ... and the fastest two-strand stack variants, a pass each traced the same way (their executors record into
    // the scope's trace; the stack's copies between layers are not operators: they show as gaps): where their
    // exposure goes against the traced compute-only pass. After two untraced passes of the variant.
    std::vector<size_t> idx;
    for (size_t k = 0; k < iv.names.size(); ++k)
      if (iv.names[k].find("strands") != std::string::npos) idx.push_back(k);
    std::sort(idx.begin(), idx.end(), [&](size_t x, size_t y) { return vs[first_iv + x].us < vs[first_iv + y].us; });
    for (size_t j = 0; j < idx.size() && j < 2; ++j) trace_variant(team, s, iv.names[idx[j]], iv.fns[idx[j]], trace);
  }
  team.synchronize(s, "bench strands (stack) end");
  return ok ? 0 : 3;
}
}  // namespace

int bench_strands_main(Team& team, int argc, char** argv, const bench::Context& ctx) {
  const Args a = parse(argc, argv, "bench strands");
  m::Parallel p;
  const m::ModelConfig c = model_of(a, team, &p, "bench strands");
  const bool root = team.rank() == 0;
  const bool moe = c.moe();
  // A dropless MoE forward synchronises the host (the counts size the exchange); with a capacity factor or the
  // counts on the device it does not.
  const bool graph = a.graph && (!moe || c.capacity > 0 || c.moe_device_sizes);
  const double mem0 = bench::device_used_bytes();
  auto comm_a = strand_comm(team, a, false, "bench strands");
  const double mem_comm_a = bench::device_used_bytes();
  auto comm_b = strand_comm(team, a, true, "bench strands");
  const double mem_comm_b = bench::device_used_bytes();
  Streams st;
  cudaStream_t s = st.s.compute;

  // ---- the plan: from a file, or searched over a pair table (from a file, or profiled now) ----
  Layer dag = strand_layer(c, p, links_of(a));
  PairTable table;
  std::string plan_source;
  double search_s = 0;
  // GPU clocks (NVML; docs/dhelix.md "Fifty-sixth session") over the windows that give the compute references:
  // the solo operators, the compute-only pass alone, the interleaved variants. Mean SM MHz per window, in every row.
  std::vector<std::pair<std::string, double>> clock_fields;
  int device = 0;
  BRAID_CUDA_CHECK(cudaGetDevice(&device));
  bench::GpuClockSampler clocks(device);
  Plan plan;
  // Layers of the timed shape (built before the plan: profiling needs them).
  m::Layer la(c, p, *comm_a);
  la.init_random_weights(17);
  const double mem_a = bench::device_used_bytes();
  m::Layer lb(la, *comm_b);
  const double mem_b = bench::device_used_bytes();
  if (root && a.comm == "nccl-ce")
    std::printf("# nccl-ce: %s\n",
                la.copy_engine_collectives()
                    ? "the layer's collectives on NCCL's copy engines (all-gathers in place, reduce-scatters as in-place "
                      "transfers summed by their consumers, dy copied into its slot of dyf and gathered in place; a "
                      "second layer's collectives on the owner's shared scratch and the gathers of placed tensors in "
                      "windows of both comms (PlacedMemory); the replicated gradients' all-reduce and gathers of "
                      "tensors placed outside a window on NCCL's kernels)"
                    : "this layer (MoE, or not sequence parallel at TP = 2) runs every collective on NCCL's kernels");
  if (!a.plan.empty()) {
    std::ifstream f(a.plan);
    if (!f) throw UsageError("bench strands: cannot read " + a.plan, __FILE__, __LINE__);
    plan = from_plan_file(dag, read_plan(f));
    plan_source = "file " + a.plan;
  } else {
    if (!a.pairs.empty()) {
      table = load_pair_table(a.pairs);
      plan_source = "searched over pair table " + a.pairs;
    } else {
      StrandExecutor pex(dag, Plan{}, st.s);
      bench::ClockSummary solo_clocks;
      table = profile_pairs(team, la, lb, pex, {a.prof_warmup, a.prof_iters}, bench::card_tag(ctx.card, team.size()),
                            root, &solo_clocks);
      print_clocks(team, "the pair profile's solo operators", solo_clocks);
      clock_fields.push_back({"clock_solo_mhz", solo_clocks.mean_mhz});
      plan_source = "searched over pairs profiled now";
      if (root && !a.out.empty()) save_pair_table(a.out, table);
    }
    apply_solo_times(dag, table);
    if (a.comm_scale != 1.0) {
      for (auto* ops : {&dag.fwd, &dag.bwd})
        for (auto& op : *ops)
          if (op.kind == OpKind::Comm) op.solo_us *= a.comm_scale;
      if (root)
        std::printf("# --comm-scale %.2f: every collective's solo time x %.2f in the searches (the executor models)\n",
                    a.comm_scale, a.comm_scale);
    }
    plan = search(dag, table, a, &search_s);
  }
  if (root) {
    std::printf("# plan (%s; search %.2f s): predicted %.1f us, single strand %.1f us, comm %.1f us\n",
                plan_source.c_str(), search_s, plan.total_us, plan.serial_us, plan.comm_us);
    print_plan(std::cout, dag, plan);
    if (!a.plan_out.empty()) {
      std::ofstream f(a.plan_out);
      write_plan(f, to_plan_file(dag, plan));
    }
  }
  const PlanFile plan_file = to_plan_file(dag, plan);
  // The whole-pass plan: one step per pass, interleaved operator by operator by the executor's list
  // schedule (no segment boundaries from the DP). Both plans under the executor's model (solo times):
  const Plan whole = whole_pass_plan(dag, plan);
  const PlanFile whole_file = to_plan_file(dag, whole);
  // Issue orders from the list schedule under an activation budget (budgeted_whole_pass): the headroom
  // over one saved set is a fraction of that set; the 7% order is what a <= 1.05x-memory layer would run
  // (70B TP=2: docs/dhelix.md), "budget-best" the headroom whose order the model predicts fastest. Both
  // run as single-op-step plans; their memory stays two full sets (the arena is not built): they measure
  // what respecting the budget would cost or gain in time.
  std::vector<std::pair<std::string, PlanFile>> order_plans;
  const auto saved = saved_tensors(c, p);
  if (!saved.empty()) {
    double one = 0;
    for (const auto& t : saved) one += t.bytes;
    double best_us = 0, best_h = 0;
    std::vector<std::pair<Pass, int>> best_order;
    for (const double h : {0.07, 0.15, 0.25, 0.4, 1.0}) {
      const auto b = budgeted_whole_pass(dag, saved, one * (1 + h), plan);
      if (root) std::printf("# budgeted whole-pass schedule, headroom %.0f%% of one saved set: model %.1f us\n", 100 * h, b.makespan_us);
      if (h == 0.07) order_plans.push_back({"strands-budget-7pct", to_plan_file(dag, order_plan(dag, b.order))});
      if (best_order.empty() || b.makespan_us < best_us) best_us = b.makespan_us, best_h = h, best_order = b.order;
    }
    order_plans.push_back({"strands-budget-best", to_plan_file(dag, order_plan(dag, best_order))});
    if (root) std::printf("# strands-budget-best: headroom %.0f%%\n", 100 * best_h);
  }
  // The model-optimal interleavings (best_issue_order: a DP over both strands' issue positions, under the
  // executor model) on one link, and with each strand's collectives on their own link (as round-robin's).
  const Layer dag2 = two_link_layer(dag);
  const Layer dag_dep2 = dep_ready_layer(dag2);  // the same, operators waiting for their dependencies only
  std::vector<std::pair<std::string, PlanFile>> order_plans2;  // run on dag2
  PlanFile moves_file;  // strands-corun-moves-2link-dag's order (below), run on dep_ready_layer(dag2)
  // strands-corun-moves-w0-2link-dag: the same search under solo times (co-run weight 0), where its order differs.
  // The pool-bounded searches' weight-0 orders ran fastest in 15 of 17 one-layer runs (fifty-fourth session), and
  // their measured times rose with the weight searched at (70B: 22.3, 22.6, 23.1, 23.2, 23.5 ms at 0 .. 1.0).
  std::vector<std::pair<std::string, PlanFile>> moves_orders;  // both, on dep_ready_layer(dag2)
  // strands-pool-moves[-w<weight>]-2link-dag: the pool-bounded co-run moves orders (below; none when no order fits
  // the pool budget), on dep_ready_layer(dag2), one per co-run weight that gives a distinct order
  std::vector<std::pair<std::string, PlanFile>> pool_moves;
  double pool_budget = 0;  // the pool-bounded searches' budget (bytes; 0 without saved tensors)
  double one_saved_bytes = 0;  // one micro-batch's saved activations (schedule::saved_tensors)
  for (const auto& t : saved) one_saved_bytes += t.bytes;
  {
    const auto b1 = best_issue_order(dag, plan, 128), b2 = best_issue_order(dag2, plan, 128);
    if (root)
      std::printf("# best issue order (executor model): one link %.1f us (whole-pass greedy %.1f), two links %.1f us "
                  "(greedy %.1f); operators waiting for their dependencies only (greedy): one link %.1f, two links "
                  "%.1f\n",
                  b1.makespan_us, whole.total_us, b2.makespan_us, whole_pass_plan(dag2, plan).total_us,
                  whole_pass_plan(dep_ready_layer(dag), plan).total_us,
                  whole_pass_plan(dag_dep2, plan).total_us);
    order_plans.push_back({"strands-best-order", to_plan_file(dag, order_plan(dag, b1.order))});
    order_plans2.push_back({"strands-best-order-2link", to_plan_file(dag2, order_plan(dag2, b2.order))});
    // ... with the weight-gradient GEMMs placed by the search too (not where the pairing DP put them).
    const auto m1 = best_issue_order(dag, plan, 128, true), m2 = best_issue_order(dag2, plan, 128, true);
    if (root)
      std::printf("# best issue order with the weight gradients placed by the search (executor model): one link "
                  "%.1f us, two links %.1f us\n",
                  m1.makespan_us, m2.makespan_us);
    order_plans.push_back({"strands-best-order-sinks", to_plan_file(dag, order_plan(dag, m1.order))});
    order_plans2.push_back({"strands-best-order-sinks-2link", to_plan_file(dag2, order_plan(dag2, m2.order))});
    // The two-link order the co-run model (the pair table's slowdowns, weighted) prefers: a local search
    // from the three two-link orders above.
    const auto whole2 = plan_issue_order(dag2, whole_pass_plan(dag2, plan));
    const auto cr = corun_issue_order(dag2, {b2.order, m2.order, whole2}, table);
    order_plans2.push_back({"strands-corun-order-2link", to_plan_file(dag2, order_plan(dag2, cr.order))});
    // The co-run model's best order when any op may move where its dependencies allow (the backward's
    // weight-gradient GEMMs fill the compute stream while both strands wait on collectives), on the two-link
    // DAG with operators waiting for their dependencies only: timed by the stack (--layers) and by one layer.
    {
      const auto whole2dag = plan_issue_order(dag_dep2, whole_pass_plan(dag_dep2, plan));
      const double t0 = MPI_Wtime();
      const auto mv = corun_moves_issue_order(dag_dep2, {whole2dag, b2.order, cr.order}, table);
      moves_file = to_plan_file(dag_dep2, order_plan(dag_dep2, mv.order));
      if (root)
        std::printf("# co-run model, two links, operators on their dependencies: whole-pass %.1f us; any op moved "
                    "where its dependencies allow (strands-corun-moves-2link-dag) %.1f us (search %.1f s)\n",
                    corun_makespan_us(dag_dep2, whole2dag, table), mv.makespan_us, MPI_Wtime() - t0);
      moves_orders.push_back({"strands-corun-moves-2link-dag", moves_file});
      const double t1 = MPI_Wtime();
      const auto mv0 = corun_moves_issue_order(dag_dep2, {whole2dag, b2.order, cr.order}, table, 0.0);
      const PlanFile moves0 = to_plan_file(dag_dep2, order_plan(dag_dep2, mv0.order));
      const bool distinct = plan_structure_hash(moves0) != plan_structure_hash(moves_file);
      if (distinct) moves_orders.push_back({"strands-corun-moves-w0-2link-dag", moves0});
      if (root)
        std::printf("# the same under solo times (weight 0; strands-corun-moves-w0-2link-dag): %.1f us solo, %.1f us at "
                    "weight %.1f%s (search %.1f s)\n",
                    mv0.makespan_us, corun_makespan_us(dag_dep2, mv0.order, table), kCorunWeight,
                    distinct ? "" : ", the same order: not timed twice", MPI_Wtime() - t1);
    }
    if (root) {
      std::printf("# co-run model (pair-table slowdowns, weight %.2f), two links: best-order %.1f us, sinks %.1f, "
                  "whole-pass %.1f, co-run search %.1f; one link: best-order %.1f, sinks %.1f, whole-pass %.1f\n",
                  kCorunWeight, corun_makespan_us(dag2, b2.order, table), corun_makespan_us(dag2, m2.order, table),
                  corun_makespan_us(dag2, whole2, table), cr.makespan_us, corun_makespan_us(dag, b1.order, table),
                  corun_makespan_us(dag, m1.order, table),
                  corun_makespan_us(dag, plan_issue_order(dag, whole_pass_plan(dag, plan)), table));
    }
    // Orders searched for a small static pool (pool_bounded_issue_order under the co-run model), one- and
    // two-link, from the model's best orders. Budget: one saved set + 5% of the single strand's memory -
    // 64 MiB (what an arena adds beside its pool, with margin): an arena on such an order would stay
    // within 1.05x. Timed and verified like the other orders; the arena-fast rule may pick them.
    if (!saved.empty()) {
      double one = 0;
      for (const auto& t : saved) one += t.bytes;
      // (The largest rank's memory: an MoE layer's buffers may differ by rank, and every rank must search alike.)
      const double budget = one + 0.05 * team.allreduce_max(double(la.memory().total())) - 64.0 * 1048576.0;
      pool_budget = budget;
      // The pool-bounded orders (one link from the best orders, two links from those and the co-run order,
      // plus the one-link fit), then the co-run moves search within the same budget from the fitting ones:
      // strands-pool-moves[-w<weight>]-2link-dag, timed with two sets and in one pool
      // (strands-arena-moves-2link-dag). The co-run model misjudged such an order on the 70B layer by ~7%
      // (fifty-third session: 21.4 ms modelled, 22.9 measured), so the search runs at five co-run weights and
      // every distinct order is timed; the arena runs the one measured fastest. (schedule::one_pool_orders;
      // plan-strands runs the same search on the CPU.)
      const double t0 = MPI_Wtime();
      const auto op = one_pool_orders(dag, {b1.order, m1.order}, {b2.order, m2.order, cr.order}, table, saved, budget);
      const auto& q1 = op.one_link;
      const auto& q2 = op.two_links;
      if (std::isfinite(q1.makespan_us))
        order_plans.push_back({"strands-pool-order", to_plan_file(dag, order_plan(dag, q1.order))});
      if (std::isfinite(q2.makespan_us))
        order_plans2.push_back({"strands-pool-order-2link", to_plan_file(dag2, order_plan(dag2, q2.order))});
      if (root)
        std::printf("# pool-bounded order search (budget %.1f MiB = %.2fx one saved set; co-run model): one link "
                    "bound %.2fx, %.1f us; two links bound %.2fx, %.1f us (inf: no order found within the budget)\n",
                    budget / 1048576.0, budget / one, two_strand_pool_bound(dag, q1.order, saved) / one,
                    q1.makespan_us, two_strand_pool_bound(dag2, q2.order, saved) / one, q2.makespan_us);
      for (const auto& pm : op.moves) {
        char name[64];
        if (pm.weight == kCorunWeight) std::snprintf(name, sizeof name, "strands-pool-moves-2link-dag");
        else std::snprintf(name, sizeof name, "strands-pool-moves-w%.1f-2link-dag", pm.weight);
        pool_moves.push_back({name, to_plan_file(dag_dep2, order_plan(dag_dep2, pm.order))});
        if (root)
          std::printf("# pool-bounded co-run moves (two links, operators on their dependencies), weight %.1f: %s, "
                      "bound %.2fx, %.1f us in its model, %.1f us at weight %.1f\n",
                      pm.weight, name, two_strand_pool_bound(dag_dep2, pm.order, saved) / one, pm.makespan_us,
                      corun_makespan_us(dag_dep2, pm.order, table), kCorunWeight);
      }
      if (root && !op.moves.empty())
        std::printf("# pool-bounded co-run moves: %zu distinct orders (searches %.1f s)\n", pool_moves.size(), MPI_Wtime() - t0);
    }
  }
  // Static two-strand pools (two_strand_placement, deterministic: every rank gets the same) of every issue
  // order, two-link and one-link, and the order the arena variants run: the one with the smallest pool
  // (two-link orders first on ties, as they are the faster ones on a slow link). Which orders pool small
  // depends on the pair table: on NVLink a one-link order can (70B TP=2: 632 MiB against 913).
  struct OrderPool {
    std::string name;
    bool two_links = false;
    PlanFile pf;
    ArenaPlacement pool;
    bool dep_ready = false;  // an order of dep_ready_layer(dag2) (moved operators): runs there only
  };
  std::vector<OrderPool> pools;
  int arena = -1;  // index into pools
  if (!saved.empty()) {
    for (const bool two : {true, false})
      for (const auto& [name, pf] : two ? order_plans2 : order_plans) {
        const Layer& d = two ? dag2 : dag;
        pools.push_back({name, two, pf, two_strand_placement(d, plan_issue_order(d, from_plan_file(d, pf)), saved)});
      }
    for (size_t i = 0; i < pools.size(); ++i)
      if (arena < 0 || pools[i].pool.pool_bytes < pools[size_t(arena)].pool.pool_bytes) arena = int(i);
    for (const auto& [name, pf] : pool_moves)  // (after the smallest-pool pick: they run in their own arena below)
      pools.push_back({name, true, pf,
                       two_strand_placement(dag_dep2, plan_issue_order(dag_dep2, from_plan_file(dag_dep2, pf)), saved),
                       true});
  }
  if (root) {
    std::printf("# executor model (solo times, no co-run slowdown): searched plan %.1f us, whole-pass plan %.1f us\n",
                plan_makespan_us(dag, plan), whole.total_us);
    // What an ideal shared activation arena would hold (not built: docs/dhelix.md), under each plan.
    if (!saved.empty()) {
      const auto ps = two_strand_arena_peak(dag, plan, saved), pw = two_strand_arena_peak(dag, whole, saved);
      std::printf("# ideal two-strand activation arena (computed): one saved set %.1f MiB; peak %.1f MiB (%.2fx) with the "
                  "searched plan, %.1f MiB (%.2fx) with the whole-pass plan\n",
                  ps.one_set_bytes / 1048576.0, ps.peak_bytes / 1048576.0, ps.peak_bytes / ps.one_set_bytes,
                  pw.peak_bytes / 1048576.0, pw.peak_bytes / pw.one_set_bytes);
      // A static pool for both strands with issue-order event edges (two_strand_placement), per order.
      for (size_t i = 0; i < pools.size(); ++i)
        std::printf("# static two-strand pool (computed) for %s: %.1f MiB = %.2fx one saved set%s\n",
                    pools[i].name.c_str(), pools[i].pool.pool_bytes / 1048576.0,
                    pools[i].pool.pool_bytes / pools[i].pool.one_set_bytes,
                    int(i) == arena ? " (the arena variants' order: smallest pool)" : "");
    }
  }

  // Every plan and order below must be the same on every rank (searched on the same table; checked, not assumed).
  require_same_plan_on_every_rank(team, "the searched plan", plan_file);
  require_same_plan_on_every_rank(team, "the whole-pass plan", whole_file);
  for (const auto& [name, pf] : moves_orders) require_same_plan_on_every_rank(team, name + "'s order", pf);
  for (const auto& [name, pf] : pool_moves) require_same_plan_on_every_rank(team, name + "'s order", pf);
  for (const auto* list : {&order_plans, &order_plans2})
    for (const auto& [name, pf] : *list) require_same_plan_on_every_rank(team, name + "'s order", pf);
  if (a.layers > 1) {  // the stack instead of the one-layer variants
    auto stack_orders2 = order_plans2;
    for (const auto& [name, pf] : moves_orders)  // (the stack names them without "-dag": stack_executor adds it)
      stack_orders2.push_back({name.substr(0, name.size() - 4), pf});
    return bench_stack(team, a, c, p, ctx, st, *comm_a, *comm_b, dag, plan_file, stack_orders2, plan_source, plan);
  }


  // The -open<K> variants (model::Layer::set_opening_chunks): with sequence parallelism at TP >= 2 and K dividing
  // the local tokens; open_invalid: the moves orders that do not fit them (found by the verification; not timed).
  const int open_k =
      a.open_chunks > 1 && p.sp && p.tp > 1 && la.local_tokens() % a.open_chunks == 0 ? a.open_chunks : 0;
  std::vector<std::string> open_invalid;
  bool open_verified = false;  // the verification ran them (with --no-verify nothing is; else they need this)

  // ---- verification on a small shape of the same kind, with the same plan ----
  bool ok = true;
  if (a.verify) {
    const m::ModelConfig sc = small_of(c);
    m::Layer va(sc, p, *comm_a);
    va.init_random_weights(5);
    // The -open<K> variants are verified at the largest of K, 4, 2 that divides the small shape's local tokens.
    int open_kv = 0;
    for (const int k : {open_k, 4, 2})
      if (open_k > 1 && k > 1 && va.local_tokens() % k == 0) {
        open_kv = k;
        break;
      }
    m::Layer vb(va, *comm_b);
    const Layer vdag = strand_layer(sc, p, links_of(a));
    StrandExecutor vex(vdag, from_plan_file(vdag, plan_file), st.s);
    const Snapshot ref = strands_sequence(team, va, vb, vex, st, 0);
    const char* names[] = {"single strand", "strands", "strands (CUDA graph)", "round-robin"};
    for (int v = 1; v <= 3; ++v) {
      if (v == 2 && !graph) continue;
      const Snapshot got = strands_sequence(team, va, vb, vex, st, v);
      const double diff = team.allreduce_max(double(strands_differences(ref, got, sc)));
      ok = ok && diff == 0;
      if (root)
        std::printf("# verification (%s, %s): %s vs single strand: %.0f differing values (bitwise) -> %s\n",
                    sc.name.c_str(), strand_parallel_tag(sc, p).c_str(), names[v], diff, diff == 0 ? "Passed" : "FAILED");
    }
    StrandExecutor vexw(vdag, from_plan_file(vdag, whole_file), st.s);
    const Layer vdag2 = two_link_layer(vdag);
    StrandExecutor vex2(vdag2, whole_pass_plan(vdag2, from_plan_file(vdag, whole_file)), st.s);
    {  // timed below as strands-whole-2link
      const double diff = team.allreduce_max(double(strands_differences(ref, strands_sequence(team, va, vb, vex2, st, 1), sc)));
      ok = ok && diff == 0;
      if (root)
        std::printf("# verification (%s): strands (whole-pass plan, one link stream per strand) vs single strand: %.0f "
                    "differing values -> %s\n",
                    sc.name.c_str(), diff, diff == 0 ? "Passed" : "FAILED");
    }
    for (const bool two : {false, true}) {  // strands-whole-dag, strands-whole-2link-dag timed below
      const Layer vd = dep_ready_layer(two ? vdag2 : vdag);
      StrandExecutor vexd(vd, whole_pass_plan(vd, from_plan_file(vdag, whole_file)), st.s);
      const double diff = team.allreduce_max(double(strands_differences(ref, strands_sequence(team, va, vb, vexd, st, 1), sc)));
      ok = ok && diff == 0;
      if (root)
        std::printf("# verification (%s): strands-whole%s-dag (operators wait for their dependencies only) vs single "
                    "strand: %.0f differing values -> %s\n",
                    sc.name.c_str(), two ? "-2link" : "", diff, diff == 0 ? "Passed" : "FAILED");
    }
    // An issue order on the small shape's DAG `vd`, bit for bit against the single strand.
    auto verify_order = [&](const std::string& label, const Layer& vd, const PlanFile& pf) {
      StrandExecutor vexo(vd, from_plan_file(vd, pf), st.s);
      const double diff =
          team.allreduce_max(double(strands_differences(ref, strands_sequence(team, va, vb, vexo, st, 1), sc)));
      ok = ok && diff == 0;
      if (root)
        std::printf("# verification (%s): %s vs single strand: %.0f differing values -> %s\n", sc.name.c_str(),
                    label.c_str(), diff, diff == 0 ? "Passed" : "FAILED");
    };
    // The issue orders timed below (two-link ones on vdag2, the others on vdag), and the sink-placing
    // two-link order with dependency-ready operators (strands-best-order-sinks-2link-dag).
    for (const bool two : {true, false})
      for (const auto& [name, pf] : two ? order_plans2 : order_plans) {
        verify_order(name, two ? vdag2 : vdag, pf);
        if (name == "strands-best-order-sinks-2link") verify_order(name + "-dag", dep_ready_layer(vdag2), pf);
      }
    // strands-corun-moves[-w0]-2link-dag (operators moved) and strands-pool-moves*-2link-dag (two sets), timed below
    for (const auto* list : {&moves_orders, &pool_moves})
      for (const auto& [name, pf] : *list) verify_order(name, dep_ready_layer(vdag2), pf);
    {  // the whole-pass plan timed below as strands-whole
      const double diff = team.allreduce_max(double(strands_differences(ref, strands_sequence(team, va, vb, vexw, st, 1), sc)));
      ok = ok && diff == 0;
      if (root)
        std::printf("# verification (%s): strands with the whole-pass plan vs single strand: %.0f differing values -> %s\n",
                    sc.name.c_str(), diff, diff == 0 ? "Passed" : "FAILED");
    }
    {  // the step-barrier executor timed below, too
      StrandExecutor vexb(vdag, from_plan_file(vdag, plan_file), st.s, /*step_barrier=*/true);
      const double diff = team.allreduce_max(double(strands_differences(ref, strands_sequence(team, va, vb, vexb, st, 1), sc)));
      ok = ok && diff == 0;
      if (root)
        std::printf("# verification (%s): strands with step barriers vs single strand: %.0f differing values -> %s\n",
                    sc.name.c_str(), diff, diff == 0 ? "Passed" : "FAILED");
    }
    {  // β sharing α's one-phase buffers (Layer::Share::kWeightsAndScratch), timed below as strands-shared
      m::Layer vbs(va, *comm_b, m::Layer::Share::kWeightsAndScratch);
      for (int v = 0; v <= 1; ++v) {
        const double diff = team.allreduce_max(double(strands_differences(ref, strands_sequence(team, va, vbs, vex, st, v), sc)));
        ok = ok && diff == 0;
        if (root)
          std::printf("# verification (%s): %s with shared one-phase buffers vs single strand: %.0f differing values -> %s\n",
                      sc.name.c_str(), v == 0 ? "single strand" : "strands", diff, diff == 0 ? "Passed" : "FAILED");
      }
    }
    {  // β sharing α's accumulating gradients too (Share::kAll), timed below as strands-shared-grads
      va.set_accumulate_grads(true);
      {
        m::Layer vball(va, *comm_b, m::Layer::Share::kAll);
        for (int v = 0; v <= 1; ++v) {
          const double diff = team.allreduce_max(
              double(accumulating_differences(ref, strands_sequence(team, va, vball, vex, st, v, true), sc)));
          ok = ok && diff == 0;
          if (root)
            std::printf("# verification (%s): %s with shared, accumulating gradients vs single strand: %.0f values "
                        "beyond 2^-7 (gradients) or differing (activations) -> %s\n",
                        sc.name.c_str(), v == 0 ? "single strand" : "strands", diff, diff == 0 ? "Passed" : "FAILED");
        }
        const double diff = team.allreduce_max(
            double(accumulating_differences(ref, strands_sequence(team, va, vball, vexw, st, 1, true), sc)));
        ok = ok && diff == 0;
        if (root)
          std::printf("# verification (%s): strands (whole-pass plan) with shared, accumulating gradients vs single "
                      "strand: %.0f values beyond 2^-7 (gradients) or differing (activations) -> %s\n",
                      sc.name.c_str(), diff, diff == 0 ? "Passed" : "FAILED");
      }
      va.set_accumulate_grads(false);
      // strands-arena-<n>link on the small shape, on two link streams and on one (the timed arenas may take
      // either): fresh layers with α's weights (seed 5), both strands' saved activations in one pool, memory
      // waits; accumulating shared gradients as above. The order: the search's best (sinks placed) on two
      // links, the search's best on one (strands-best-order). Two units, as the timing runs them: the second
      // swaps the roles (β's forward into the pool beside α's backward, SharedActivationPool::waits_b), and
      // is compared too (α's gradients and dx, β's forward output).
      // Then each strands-pool-moves order (dependency-ready, so no separate -dag executors): the timed
      // strands-arena-moves-2link-dag runs the one measured fastest.
      const Snapshot ref2 = strands_sequence(team, va, vb, vex, st, 0, false, false, nullptr, true);
      const Layer vdd2 = dep_ready_layer(vdag2);
      for (int kind = 0; kind < 2 + int(pool_moves.size()); ++kind) {  // two links, one link, the pool-moves orders
        if (arena < 0) break;  // no saved tensors: no arena is timed
        const bool two = kind != 1, moves = kind >= 2;
        const Layer& vd = moves ? vdd2 : two ? vdag2 : vdag;
        const std::string L =
            moves ? "-moves-2link-dag (" + pool_moves[size_t(kind - 2)].first + ")" : two ? "-2link" : "-1link";
        m::Layer vaa(sc, p, *comm_a);
        vaa.init_random_weights(5);
        vaa.set_accumulate_grads(true);
        m::Layer vbb(vaa, *comm_b, m::Layer::Share::kAll);
        vbb.share_cublas_workspace(vaa);  // the executor runs both layers' GEMMs on one stream
        const Plan vop = moves ? from_plan_file(vd, pool_moves[size_t(kind - 2)].second)
                               : order_plan(vd, best_issue_order(vd, from_plan_file(vdag, plan_file), 128, two).order);
        // The moves orders' pools are placed as the timed one is (placement_wait_cost within the budget, here
        // scaled to the small shape's saved set), so the chosen placement's waits are what is verified.
        const auto vorder = plan_issue_order(vd, vop);
        double vone = 0;
        for (const auto& t : saved_tensors(sc, p)) vone += t.bytes;
        // (weight 0, the solo model: the table is the big shape's)
        const PlacementChoice vchoice =
            wait_aware_choice(vd, vorder, table, pool_budget > 0 ? vone * pool_budget / one_saved_bytes : 0, 0.0);
        SharedActivationPool vpool(vd, vorder, sc, p, vaa, vbb, moves ? &vchoice : nullptr);
        // strands-arena, -dag, arena-io (y/dy/dx shared), arena-io-dag, then arena-io-smres (its GEMMs leaving
        // SMs: cuBLAS may pick other kernels, so relative L2 instead of bits); the moves orders' arena-io also with
        // the opening pairs in chunks (-open<K>, plain and -smres: relative L2 too)
        for (const int k : {0, 1, 2, 4, 3, 5, 6}) {
          const bool dep = k == 1 || k == 4, io = k >= 2, smres = k == 3 || k == 6, open = k >= 5;
          if (dep && moves) continue;  // its layer is dependency-ready already
          if (io && (!p.sp || p.tp < 2)) continue;
          if (smres && a.gemm_sm_reserve <= 0) continue;
          if (open && (!moves || open_kv < 2)) continue;
          if (k == 2) vbb.share_interfaces(vaa);
          const Layer vdk = open ? opening_chunked_layer(vd) : dep ? dep_ready_layer(vd) : vd;
          std::unique_ptr<StrandExecutor> pa, pb;
          try {
            pa = std::make_unique<StrandExecutor>(vdk, vop, st.s), pb = std::make_unique<StrandExecutor>(vdk, vop, st.s);
          } catch (const UsageError& e) {
            if (!open) throw;
            open_invalid.push_back("arena:" + pool_moves[size_t(kind - 2)].first);
            if (root) std::printf("# strands-arena-io%s-open: its order does not fit the opening chunks (%s): not timed\n",
                                  L.c_str(), e.what());
            continue;
          }
          StrandExecutor &vexa = *pa, &vexb = *pb;
          vexa.set_memory_waits(vpool.waits);
          vexb.set_memory_waits(vpool.waits_b);
          if (smres || open) {
            const int sms = smres ? gemm_sms_leaving(a.gemm_sm_reserve) : 0;
            vaa.set_gemm_sm_target(sms), vbb.set_gemm_sm_target(sms);
            if (open) vaa.set_opening_chunks(open_kv), vbb.set_opening_chunks(open_kv);
            const Snapshot got = strands_sequence(team, vaa, vbb, vexa, st, 1, true, true, &vexb);
            vaa.set_opening_chunks(0), vbb.set_opening_chunks(0);
            vaa.set_gemm_sm_target(0), vbb.set_gemm_sm_target(0);
            ok = l2_verdict(team, root, ref2, got, sc,
                            "strands-arena-io" + L +
                                (open ? " with the opening pairs in " + std::to_string(open_kv) + " chunks" : "") +
                                (smres ? " with GEMMs on " + std::to_string(sms) + " SMs" : "") + ", two units") &&
                 ok;
            continue;
          }
          const Snapshot got = strands_sequence(team, vaa, vbb, vexa, st, 1, true, io, &vexb);
          const size_t mine = accumulating_differences(ref2, got, sc);
          const double diff = team.allreduce_max(double(mine));
          if (mine)  // (every rank that found some says where)
            std::printf("# rank %d: differing: %s\n", team.rank(), difference_breakdown(ref2, got, sc).c_str());
          if (diff > 0 && root) {  // what was run: the issue order, the placement, the memory waits
            std::printf("# arena diagnosis: issue order:");
            for (const auto& [ps, i] : vorder)
              std::printf(" %s", (ps == Pass::Forward ? vd.fwd : vd.bwd)[size_t(i)].name.c_str());
            std::printf("\n# arena diagnosis: tensor bytes offset_a offset_b producer last_reader [other readers]\n");
            for (size_t t = 0; t < vpool.saved.size(); ++t) {
              const auto& x = vpool.saved[t];
              std::printf("#   %s %.0f %.0f %.0f %s %s", x.name.c_str(), x.bytes, vpool.offset_a[t], vpool.offset_b[t],
                          x.producer.c_str(), x.last_reader.c_str());
              for (const auto& r : x.other_readers) std::printf(" %s", r.c_str());
              std::printf("\n");
            }
            for (int w = 0; w < 2; ++w) {
              const auto& ws = w == 0 ? vpool.waits : vpool.waits_b;
              std::printf("# arena diagnosis: memory waits (%s forward):", w == 0 ? "a" : "b");
              for (size_t i = 0; i < ws.size(); ++i)
                for (const int j : ws[i]) std::printf(" %s<-%s", vd.fwd[i].name.c_str(), vd.bwd[size_t(j)].name.c_str());
              std::printf("\n");
            }
          }
          ok = ok && diff == 0;
          if (root)
            std::printf("# verification (%s): strands-arena%s%s%s (one activation pool, %.2fx one set, memory "
                        "waits; two units, roles swapped in the second) vs single strand: %.0f values beyond 2^-7 "
                        "(gradients) or differing (activations) -> %s\n",
                        sc.name.c_str(), io ? "-io" : "", L.c_str(), dep ? "-dag" : "", vpool.bytes / vpool.one_set, diff,
                        diff == 0 ? "Passed" : "FAILED");
        }
      }
    }
    // The -open<K> variants (each pass's opening all-gather -> GEMM pair in chunks, run by the GEMM operator:
    // model::Layer::set_opening_chunks, opening_chunked_layer): the moves orders, plain and with GEMMs leaving SMs,
    // at the largest of K, 4, 2 that divides the small shape's local tokens (strided-batched GEMMs: relative L2).
    // An order that issues a reader of the gathered tensor before its GEMM operator is not valid with the chunks:
    // its -open variant is dropped (open_invalid) and not timed.
    open_verified = open_kv > 1;
    if (open_kv > 1) {
      const int kv = open_kv;
      for (const auto& [name, pf] : moves_orders) {
        const Layer vo = opening_chunked_layer(dep_ready_layer(vdag2));
        std::unique_ptr<StrandExecutor> vexo;
        try {
          vexo = std::make_unique<StrandExecutor>(vo, from_plan_file(vo, pf), st.s);
        } catch (const UsageError& e) {
          open_invalid.push_back(name);
          if (root) std::printf("# %s-open: its order does not fit the opening chunks (%s): not timed\n", name.c_str(), e.what());
          continue;
        }
        for (const bool smres : {false, true}) {
          if (smres && a.gemm_sm_reserve <= 0) continue;
          const int sms = smres ? gemm_sms_leaving(a.gemm_sm_reserve) : 0;
          va.set_opening_chunks(kv), vb.set_opening_chunks(kv);
          va.set_gemm_sm_target(sms), vb.set_gemm_sm_target(sms);
          const Snapshot got = strands_sequence(team, va, vb, *vexo, st, 1);
          va.set_gemm_sm_target(0), vb.set_gemm_sm_target(0);
          va.set_opening_chunks(0), vb.set_opening_chunks(0);
          ok = l2_verdict(team, root, ref, got, sc,
                          name + " with the opening pairs in " + std::to_string(kv) + " chunks" +
                              (smres ? ", GEMMs on " + std::to_string(sms) + " SMs" : "")) && ok;
        }
      }
    }
    if (p.sp && p.tp > 1 && va.local_tokens() % 2 == 0) {  // the intra-batch decomposition baseline
      va.set_decomposition(2), vb.set_decomposition(2);
      const Snapshot got = strands_sequence(team, va, vb, vex, st, 0);
      va.set_decomposition(0), vb.set_decomposition(0);
      ok = l2_verdict(team, root, ref, got, sc, "single strand with intra-batch decomposition (2 chunks)",
                      "plain (activations and gradients)") && ok;
    }
    if (a.gemm_sm_reserve > 0) {  // the -smres variants: cuBLAS may pick other kernels for fewer SMs (other bits)
      const int sms = gemm_sms_leaving(a.gemm_sm_reserve);
      va.set_gemm_sm_target(sms), vb.set_gemm_sm_target(sms);
      const Layer vd = dep_ready_layer(vdag2);
      StrandExecutor vexd(vd, whole_pass_plan(vd, from_plan_file(vdag, whole_file)), st.s);
      for (const int v : {1, 3})  // strands (whole-pass, two links, dependency-ready), round-robin
        ok = l2_verdict(team, root, ref, strands_sequence(team, va, vb, vexd, st, v), sc,
                        std::string(v == 1 ? "strands-whole-2link-dag" : "round-robin") + " with GEMMs on " +
                            std::to_string(sms) + " SMs") &&
             ok;
      va.set_gemm_sm_target(0), vb.set_gemm_sm_target(0);
      // -opcap: the executor sets each GEMM's cap itself (gemms_beside_collectives on the small DAG)
      StrandExecutor vexc(vd, vexd.plan(), st.s);
      const auto [cf, cb] = gemms_beside_collectives(vd, vexd.plan());
      vexc.set_gemm_caps(cf, cb, sms);
      ok = l2_verdict(team, root, ref, strands_sequence(team, va, vb, vexc, st, 1), sc,
                      "strands-whole-2link-dag-opcap (GEMMs beside a collective on " + std::to_string(sms) + " SMs)") &&
           ok;
    }
    if (!ok) return 3;
  }
  if (a.verify_only) {
    if (root) std::printf("# --verify-only: every verification passed; nothing timed\n");
    return 0;
  }

  // ---- timing ----
  StrandExecutor ex(dag, plan, st.s);
  fill_inputs(la, 101 + team.rank(), s);
  fill_inputs(lb, 201 + team.rank(), s);
  lb.forward(s);
  la.forward(s);
  team.synchronize(s, "strands warm-up");
  const bench::TimingOptions opt{a.warmup, a.iters};
  auto med = [&](const std::function<void(int)>& fn) {
    return bench::summarize(bench::time_iterations(&team, s, opt, fn)).median_us;
  };
  auto med_graph = [&](const std::function<void(int)>& fn) {
    return bench::summarize(bench::time_graph_iterations(&team, s, opt, 1, fn)).median_us;
  };
  // Communication alone: every collective of the unit, one at a time on the compute stream.
  double comm_us = 0;
  for (const auto ph : {m::Phase::kForward, m::Phase::kBackward}) {
    m::Layer& l = ph == m::Phase::kForward ? la : lb;
    const auto& ops = l.ops(ph);
    for (size_t i = 0; i < ops.size(); ++i)
      if (ops[i].kind == m::OpKind::kComm) comm_us += med([&](int) { l.run_op(ph, i, s); });
  }
  // Compute only (collectives skipped), what exposed communication is measured against: timed alone here, as
  // every session before the thirty-fifth reported it, and interleaved with the core variants below (the same
  // data and thermal state as they run in: the stack measured 15.1-17.8 ms per layer alone, 18.2-18.4
  // interleaved, docs/dhelix.md), which the table uses from then on.
  clocks.start();
  const double compute_alone_us = med([&](int) { run_compute_only(la, lb, s); });
  const bench::ClockSummary alone_clocks = clocks.stop();
  double compute_us = compute_alone_us;
  const double one_set = double(la.memory().total());
  const double two_sets = one_set + double(lb.memory().total());
  std::vector<Variant> vs;
  // The core comparison, timed interleaved (--rounds passes over every variant in turn, so that clock,
  // thermal or link drift hits all of them alike): single strand, round-robin and the strand executors
  // that differ only in their issue order or link streams. Variants that reconfigure the layers (graphs,
  // decomposition, shared buffers) follow, each timed on its own.
  StrandExecutor ex_whole(dag, whole, st.s);
  StrandExecutor ex2(dag2, whole_pass_plan(dag2, plan), st.s);
  // Operators that wait for their DAG dependencies only (a weight-gradient GEMM beside its own
  // strand's collective), on one link and on two.
  const Layer dag_dep = dep_ready_layer(dag);
  StrandExecutor ex_dep(dag_dep, whole_pass_plan(dag_dep, plan), st.s);
  StrandExecutor ex_dep2(dag_dep2, whole_pass_plan(dag_dep2, plan), st.s);
  std::vector<std::unique_ptr<StrandExecutor>> order_ex;
  std::vector<double> compute_rounds;  // compute only's median per interleaved pass (the hidden/pass column)
  // --op-trace: the traced compute-only pass (after the main group's timing), which traced variants are read against.
  std::unique_ptr<OpTrace> ref_trace;
  {
    Interleaved iv;
    iv.add("single-strand", [&](int) { run_single_strand(la, lb, s); }, one_set);
    iv.add("round-robin", [&](int) { run_round_robin(la, lb, s, st.extra, st.rr); }, two_sets);
    // GEMMs that leave SMs free for the collectives beside them (cublasSetSmCountTarget on both layers'
    // handles for the variant's run only), for round-robin and the best strands variants alike.
    const int gemm_sms = gemm_sms_leaving(a.gemm_sm_reserve);
    auto reserved = [&](std::function<void()> f) {
      la.set_gemm_sm_target(gemm_sms), lb.set_gemm_sm_target(gemm_sms);
      f();
      la.set_gemm_sm_target(0), lb.set_gemm_sm_target(0);
    };
    if (a.gemm_sm_reserve > 0) {
      iv.add("round-robin-smres", [&](int) { reserved([&] { run_round_robin(la, lb, s, st.extra, st.rr); }); }, two_sets);
      iv.add("strands-whole-2link-dag-smres", [&](int) { reserved([&] { ex_dep2.run(la, lb); }); }, two_sets);
    }
    iv.add("strands", [&](int) { ex.run(la, lb); }, two_sets);
    iv.add("strands-whole", [&](int) { ex_whole.run(la, lb); }, two_sets);
    iv.add("strands-whole-2link", [&](int) { ex2.run(la, lb); }, two_sets);
    iv.add("strands-whole-dag", [&](int) { ex_dep.run(la, lb); }, two_sets);
    iv.add("strands-whole-2link-dag", [&](int) { ex_dep2.run(la, lb); }, two_sets);
    for (const auto& [name, pf] : order_plans2) {
      order_ex.push_back(std::make_unique<StrandExecutor>(dag2, from_plan_file(dag2, pf), st.s));
      StrandExecutor* e = order_ex.back().get();
      iv.add(name, [&, e](int) { e->run(la, lb); }, two_sets);
    }
    if (a.gemm_sm_reserve > 0 && !order_ex.empty()) {  // order_ex[0]: strands-best-order-2link
      StrandExecutor* e = order_ex[0].get();
      iv.add(order_plans2[0].first + "-smres", [&, e](int) { reserved([&] { e->run(la, lb); }); }, two_sets);
    }
    // -opcap: only the GEMMs that the plan's model runs beside the other strand's collectives leave the
    // SMs (gemms_beside_collectives); the others take every SM.
    if (a.gemm_sm_reserve > 0) {
      auto add_opcap = [&](const std::string& name, const Layer& d, const Plan& pl) {
        const auto [cf, cb] = gemms_beside_collectives(d, pl);
        order_ex.push_back(std::make_unique<StrandExecutor>(d, pl, st.s));
        order_ex.back()->set_gemm_caps(cf, cb, gemm_sms);
        StrandExecutor* e = order_ex.back().get();
        iv.add(name + "-opcap", [&, e](int) { e->run(la, lb); }, two_sets);
        if (root)
          std::printf("# %s-opcap: %d forward and %d backward GEMMs beside a collective in the model, capped at %d "
                      "SMs\n",
                      name.c_str(), int(std::count(cf.begin(), cf.end(), 1)), int(std::count(cb.begin(), cb.end(), 1)),
                      gemm_sms);
      };
      add_opcap("strands-whole-2link-dag", dag_dep2, whole_pass_plan(dag_dep2, plan));
      if (!order_plans2.empty())
        add_opcap(order_plans2[0].first, dag2, from_plan_file(dag2, order_plans2[0].second));
    }
    for (const auto& [name, pf] : order_plans2)  // the same order, operators waiting for dependencies only
      if (name == "strands-best-order-sinks-2link") {
        order_ex.push_back(std::make_unique<StrandExecutor>(dag_dep2, from_plan_file(dag_dep2, pf), st.s));
        StrandExecutor* e = order_ex.back().get();
        iv.add(name + "-dag", [&, e](int) { e->run(la, lb); }, two_sets);
      }
    for (const auto& [name, pf] : moves_orders) {  // the co-run model's orders with operators moved (as the stack's)
      order_ex.push_back(std::make_unique<StrandExecutor>(dag_dep2, from_plan_file(dag_dep2, pf), st.s));
      StrandExecutor* e = order_ex.back().get();
      iv.add(name, [&, e](int) { e->run(la, lb); }, two_sets);
      if (a.gemm_sm_reserve > 0) iv.add(name + "-smres", [&, e](int) { reserved([&] { e->run(la, lb); }); }, two_sets);
    }
    // -open<K>: the same orders with each pass's opening all-gather -> GEMM pair in K chunks (verified above), the
    // layers' switch on for the variant's run only (the compute-only reference and the other variants run the plain
    // pairs): a unit's compute then waits one chunk's all-gather at its start, not the whole (fifty-seventh session).
    auto opened = [&](std::function<void()> f) {
      la.set_opening_chunks(open_k), lb.set_opening_chunks(open_k);
      f();
      la.set_opening_chunks(0), lb.set_opening_chunks(0);
    };
    if (open_k > 1 && (open_verified || !a.verify))
      for (const auto& [name, pf] : moves_orders) {
        if (std::find(open_invalid.begin(), open_invalid.end(), name) != open_invalid.end()) continue;
        const Layer dag_open = opening_chunked_layer(dag_dep2);
        try {
          order_ex.push_back(std::make_unique<StrandExecutor>(dag_open, from_plan_file(dag_open, pf), st.s));
        } catch (const UsageError&) {
          continue;  // (not verified either: --no-verify)
        }
        StrandExecutor* e = order_ex.back().get();
        const std::string on = name + "-open" + std::to_string(open_k);
        iv.add(on, [&, e](int) { opened([&] { e->run(la, lb); }); }, two_sets);
        if (a.gemm_sm_reserve > 0)
          iv.add(on + "-smres", [&, e](int) { reserved([&] { opened([&] { e->run(la, lb); }); }); }, two_sets);
      }
    for (const auto& [name, pf] : pool_moves) {  // the same search within the pool budget (two sets here; one pool below)
      order_ex.push_back(std::make_unique<StrandExecutor>(dag_dep2, from_plan_file(dag_dep2, pf), st.s));
      StrandExecutor* e = order_ex.back().get();
      iv.add(name, [&, e](int) { e->run(la, lb); }, two_sets);
    }
    for (const auto& [name, pf] : order_plans) {
      order_ex.push_back(std::make_unique<StrandExecutor>(dag, from_plan_file(dag, pf), st.s));
      StrandExecutor* e = order_ex.back().get();
      iv.add(name, [&, e](int) { e->run(la, lb); }, two_sets);
    }
    clocks.start();
    const size_t first_iv = vs.size();  // vs[first_iv + k]: iv.names[k]'s row
    compute_us = iv.time(team, s, opt, a.rounds, [&](int) { run_compute_only(la, lb, s); }, vs);
    const bench::ClockSummary iv_clocks = clocks.stop();
    compute_rounds = iv.compute_rounds;
    if (root)
      std::printf("# interleaved timing: %d rounds over %zu variants and compute only, %d iterations each; compute "
                  "only %.1f us interleaved, %.1f us timed alone before\n",
                  a.rounds, vs.size(), a.iters, compute_us, compute_alone_us);
    print_clocks(team, "the compute-only pass timed alone", alone_clocks);
    print_clocks(team, "the interleaved variants and compute only", iv_clocks);
    clock_fields.push_back({"clock_compute_alone_mhz", alone_clocks.mean_mhz});
    clock_fields.push_back({"clock_interleaved_mhz", iv_clocks.mean_mhz});
    clock_fields.push_back({"clock_interleaved_power_capped", iv_clocks.power_capped});
    if (a.op_trace) {
      // One compute-only pass more, an event pair around every operator, after two untraced ones (the same
      // thermal state as the timed passes): where the pass's time goes against the operators' solo times.
      run_compute_only(la, lb, s);
      run_compute_only(la, lb, s);
      ref_trace = std::make_unique<OpTrace>();
      clocks.start();
      run_compute_only(la, lb, s, ref_trace.get());
      team.synchronize(s, "bench strands op trace");
      const bench::ClockSummary trace_clocks = clocks.stop();
      if (root) print_op_trace(*ref_trace, dag, "one compute-only pass of the layer pair, after two untraced ones");
      print_clocks(team, "the traced pass", trace_clocks);
      // ... and the fastest strand-executor variants of the group, traced alike: where their exposure goes.
      std::vector<size_t> idx;
      for (size_t k = 0; k < iv.names.size(); ++k)
        if (iv.names[k].rfind("strands", 0) == 0) idx.push_back(k);
      std::sort(idx.begin(), idx.end(), [&](size_t x, size_t y) { return vs[first_iv + x].us < vs[first_iv + y].us; });
      for (size_t j = 0; j < idx.size() && j < 2; ++j) trace_variant(team, s, iv.names[idx[j]], iv.fns[idx[j]], *ref_trace);
    }
  }
  if (graph) {
    vs.push_back({"single-strand-graph", med_graph([&](int) { run_single_strand(la, lb, s); }), one_set});
    vs.push_back({"strands-graph", med_graph([&](int) { ex.run(la, lb); }), two_sets});
    vs.push_back({"strands-whole-graph", med_graph([&](int) { ex_whole.run(la, lb); }), two_sets});
    vs.push_back({"strands-whole-2link-graph", med_graph([&](int) { ex2.run(la, lb); }), two_sets});
    vs.push_back({"strands-whole-2link-dag-graph", med_graph([&](int) { ex_dep2.run(la, lb); }), two_sets});
    if (!order_plans2.empty())
      vs.push_back({order_plans2[0].first + "-graph", med_graph([&](int) { order_ex[0]->run(la, lb); }), two_sets});
  }
  // The earlier executor (a three-stream barrier after every plan step), for comparison.
  StrandExecutor ex_barrier(dag, plan, st.s, /*step_barrier=*/true);
  vs.push_back({"strands-step-barrier", med([&](int) { ex_barrier.run(la, lb); }), two_sets});
  if (graph)
    vs.push_back({"strands-step-barrier-graph", med_graph([&](int) { ex_barrier.run(la, lb); }), two_sets});
  // Intra-batch decomposition (one strand; each AG/RS chunked beside the neighbouring GEMM's chunks).
  const int dchunks = a.decompose;
  if (p.sp && p.tp > 1 && dchunks > 1 && la.local_tokens() % dchunks == 0) {
    la.set_decomposition(dchunks), lb.set_decomposition(dchunks);
    const std::string name = "decomposition-" + std::to_string(dchunks);
    vs.push_back({name, med([&](int) { run_single_strand(la, lb, s); }), one_set});
    if (graph) vs.push_back({name + "-graph", med_graph([&](int) { run_single_strand(la, lb, s); }), one_set});
    la.set_decomposition(0), lb.set_decomposition(0);
  }
  // β sharing α's one-phase buffers (backward scratch, forward transients): memory is α's set + β's saved
  // activations, interfaces and workspace. β's forward (the earlier unit) fills its saved activations.
  {
    m::Layer lbs(la, *comm_b, m::Layer::Share::kWeightsAndScratch);
    fill_inputs(lbs, 201 + team.rank(), s);
    lbs.forward(s);
    la.forward(s);
    team.synchronize(s, "strands-shared warm-up");
    const double shared_set = one_set + double(lbs.memory().total());
    vs.push_back({"strands-shared", med([&](int) { ex.run(la, lbs); }), shared_set});
    if (graph) vs.push_back({"strands-shared-graph", med_graph([&](int) { ex.run(la, lbs); }), shared_set});
  }
  // ... and α's gradients, accumulating (wgrad GEMMs with beta = 1): α's set + β's saved activations.
  la.set_accumulate_grads(true);
  {
    m::Layer lball(la, *comm_b, m::Layer::Share::kAll);
    fill_inputs(lball, 201 + team.rank(), s);
    la.zero_grads(s);
    lball.forward(s);
    la.forward(s);
    team.synchronize(s, "strands-shared-grads warm-up");
    const double all_set = double(la.memory().total()) + double(lball.memory().total());
    vs.push_back({"strands-shared-grads", med([&](int) { ex.run(la, lball); }), all_set});
    if (graph) vs.push_back({"strands-shared-grads-graph", med_graph([&](int) { ex.run(la, lball); }), all_set});
    vs.push_back({"strands-whole-shared-grads", med([&](int) { ex_whole.run(la, lball); }), all_set});
  }
  la.set_accumulate_grads(false);
  // strands-arena-<n>link: the order with the smallest static pool (above), both strands' saved activations
  // in one pool with the memory waits, scratch and gradients shared (Share::kAll): a fresh pair of layers
  // (place_saved frees their own saved copies). Memory: both layers + the pool. Dense and MoE alike.
  // Returns the memory of the last variant it timed (-io where the layer has sequence parallelism).
  // placed_for_waits: the pool placed by placement_wait_cost within the search's budget (PlacementChoice), not
  // the smallest placement; the memory column reports what it takes.
  auto run_arena = [&](const OrderPool& ch, const std::string& tag, bool placed_for_waits = false) {
    // (A dependency-ready order runs on dag_dep2 alone: its plain and -dag executors would be the same.)
    const Layer& ad = ch.dep_ready ? dag_dep2 : ch.two_links ? dag2 : dag;
    const Layer& add = ch.two_links ? dag_dep2 : dag_dep;
    const std::string L = tag + (ch.dep_ready ? "-2link-dag" : ch.two_links ? "-2link" : "-1link");
    m::Layer aa(c, p, *comm_a);
    aa.init_random_weights(17);
    aa.set_accumulate_grads(true);
    m::Layer bb(aa, *comm_b, m::Layer::Share::kAll);
    bb.share_cublas_workspace(aa);  // the executor runs both layers' GEMMs on one stream
    const Plan op = from_plan_file(ad, ch.pf);
    const auto ord = plan_issue_order(ad, op);
    const PlacementChoice choice = wait_aware_choice(ad, ord, table, pool_budget);
    SharedActivationPool pool(ad, ord, c, p, aa, bb, placed_for_waits && pool_budget > 0 ? &choice : nullptr);
    // The steady state the pool is placed for: units alternate roles (aa forward with bb backward, then bb
    // forward with aa backward), so every backward reads the set its own forward wrote one unit earlier. Each
    // executor pair holds the memory waits of both roles; `turn` is shared by every arena variant (one pair of
    // layers), and bb's forward below writes the set the first unit's backward reads.
    StrandExecutor exa(ad, op, st.s), exad(add, op, st.s), exb(ad, op, st.s), exbd(add, op, st.s);
    std::unique_ptr<StrandExecutor> oexa, oexb;  // -open<K> (below; dependency-ready orders only)
    exa.set_memory_waits(pool.waits);
    exad.set_memory_waits(pool.waits);
    exb.set_memory_waits(pool.waits_b);
    exbd.set_memory_waits(pool.waits_b);
    bool turn = false;  // false: aa runs the forward next
    auto unit = [&](StrandExecutor& ea, StrandExecutor& eb) {
      if (!turn) ea.run(aa, bb);
      else eb.run(bb, aa);
      turn = !turn;
    };
    fill_inputs(aa, 301 + team.rank(), s);
    fill_inputs(bb, 401 + team.rank(), s);
    aa.zero_grads(s);
    bb.forward(s);
    team.synchronize(s, "strands-arena warm-up");
    double mem = double(aa.memory().total()) + double(bb.memory().total()) + pool.bytes;
    if (root)
      std::printf("# strands-arena%s: order %s, pool %.1f MiB = %.2fx one saved set (%.1f MiB)%s\n", L.c_str(),
                  ch.name.c_str(), pool.bytes / 1048576.0, pool.bytes / pool.one_set, pool.one_set / 1048576.0,
                  placed_for_waits ? ", placed for the co-run model with its waits within the budget" : "");
    // Timed interleaved in a group of their own with the single strand, round-robin and compute only (on la / lb,
    // which the arena's layers leave alone), and measured against that group's medians: a variant timed apart
    // from its reference runs at another clock (the board's power cap: docs/dhelix.md, fifty-sixth session).
    // Before 0a40a5a each arena variant was timed on its own after building its layers and pool.
    const size_t first_row = vs.size();
    auto time_group = [&](std::vector<std::pair<std::string, std::function<void(int)>>> fns, double group_mem) {
      Interleaved g;
      g.add("single-strand", [&](int) { run_single_strand(la, lb, s); }, one_set);
      g.add("round-robin", [&](int) { run_round_robin(la, lb, s, st.extra, st.rr); }, two_sets);
      for (auto& [name, fn] : fns) g.add(name, std::move(fn), group_mem);
      std::vector<Variant> gv;
      const double comp = g.time(team, s, opt, a.rounds, [&](int) { run_compute_only(la, lb, s); }, gv);
      if (a.op_trace && ref_trace) {  // the group's fastest arena variant, traced (as the main group's, above)
        size_t best = 2;
        for (size_t i = 3; i < gv.size(); ++i)
          if (gv[i].us < gv[best].us) best = i;
        if (best < gv.size()) trace_variant(team, s, g.names[best], g.fns[best], *ref_trace);
      }
      for (size_t i = 2; i < gv.size(); ++i) {
        Variant v = gv[i];
        v.ref_single_us = gv[0].us, v.ref_rr_us = gv[1].us, v.ref_compute_us = comp;
        v.ref_single_rounds = gv[0].round_us, v.ref_compute_rounds = g.compute_rounds;
        vs.push_back(std::move(v));
      }
    };
    {
      std::vector<std::pair<std::string, std::function<void(int)>>> fns;
      fns.push_back({"strands-arena" + L, [&](int) { unit(exa, exb); }});
      if (!ch.dep_ready) fns.push_back({"strands-arena" + L + "-dag", [&](int) { unit(exad, exbd); }});
      time_group(std::move(fns), mem);
    }
    if (p.sp && p.tp > 1) {  // ... and y/dy/dx shared by both strands (Layer::share_interfaces)
      bb.share_interfaces(aa);
      fill_inputs(aa, 301 + team.rank(), s);
      fill_inputs(bb, 401 + team.rank(), s);
      (turn ? aa : bb).forward(s);  // the set the next unit's backward strand reads
      team.synchronize(s, "strands-arena-io warm-up");
      mem = double(aa.memory().total()) + double(bb.memory().total()) + pool.bytes;
      std::vector<std::pair<std::string, std::function<void(int)>>> fns;
      fns.push_back({"strands-arena-io" + L, [&](int) { unit(exa, exb); }});
      // ... with operators waiting for their dependencies only (the -dag executors; same pool and waits)
      if (!ch.dep_ready) fns.push_back({"strands-arena-io" + L + "-dag", [&](int) { unit(exad, exbd); }});
      if (a.gemm_sm_reserve > 0) {  // ... with its GEMMs leaving SMs to the collectives (for its calls only)
        const int sms = gemm_sms_leaving(a.gemm_sm_reserve);
        fns.push_back({"strands-arena-io" + L + "-smres", [&, sms](int) {
                         aa.set_gemm_sm_target(sms), bb.set_gemm_sm_target(sms);
                         unit(exa, exb);
                         aa.set_gemm_sm_target(0), bb.set_gemm_sm_target(0);
                       }});
      }
      // ... and a moves order with each pass's opening pair in chunks (-open<K>, as the main group's; plain and
      // -smres): its own executor pair on opening_chunked_layer with the same pool and waits.
      if (open_k > 1 && (open_verified || !a.verify) && ch.dep_ready &&
          std::find(open_invalid.begin(), open_invalid.end(), "arena:" + ch.name) == open_invalid.end()) {
        const Layer od = opening_chunked_layer(ad);
        try {
          oexa = std::make_unique<StrandExecutor>(od, op, st.s), oexb = std::make_unique<StrandExecutor>(od, op, st.s);
          oexa->set_memory_waits(pool.waits);
          oexb->set_memory_waits(pool.waits_b);
        } catch (const UsageError&) {
          oexa.reset(), oexb.reset();  // (not verified either: --no-verify)
        }
        if (oexa) {
          const std::string on = "strands-arena-io" + L + "-open" + std::to_string(open_k);
          const int sms = a.gemm_sm_reserve > 0 ? gemm_sms_leaving(a.gemm_sm_reserve) : 0;
          auto run_open = [&](int cap) {
            aa.set_opening_chunks(open_k), bb.set_opening_chunks(open_k);
            aa.set_gemm_sm_target(cap), bb.set_gemm_sm_target(cap);
            unit(*oexa, *oexb);
            aa.set_gemm_sm_target(0), bb.set_gemm_sm_target(0);
            aa.set_opening_chunks(0), bb.set_opening_chunks(0);
          };
          fns.push_back({on, [run_open](int) { run_open(0); }});
          if (sms > 0) fns.push_back({on + "-smres", [run_open, sms](int) { run_open(sms); }});
        }
      }
      time_group(std::move(fns), mem);
    }
    // (every row this call adds names the order it ran and the pool: arena_order, arena_pool_bytes in the JSON)
    for (size_t i = first_row; i < vs.size(); ++i) vs[i].order = ch.name, vs[i].pool_bytes = pool.bytes;
    return mem;
  };
  if (arena >= 0) {
    const OrderPool& small = pools[size_t(arena)];
    const double mem_small = run_arena(small, "");
    // strands-arena-fast-<n>link: the order measured fastest above (its two-full-sets variant, this run) among
    // those whose -io arena would stay within 1.05x the single strand's memory — the same layers and sharing,
    // so its memory is the smallest-pool -io arena's (run_arena's return) plus the difference of the pools —
    // when that is not the smallest-pool order itself. The plain -fast arena (own y/dy/dx) is reported with
    // its own, larger memory.
    const double budget = 1.05 * vs[0].mem;
    auto measured = [&](const std::string& name) {
      for (const auto& v : vs)
        if (v.name == name) return v.us;
      return -1.0;
    };
    int fast = -1;
    for (size_t i = 0; i < pools.size(); ++i) {
      const double t = measured(pools[i].name);
      if (pools[i].dep_ready) continue;  // strands-pool-moves-2link-dag: its own arena below
      if (t <= 0 || mem_small + pools[i].pool.pool_bytes - small.pool.pool_bytes > budget) continue;
      if (fast < 0 || t < measured(pools[size_t(fast)].name)) fast = int(i);
    }
    if (root)
      std::printf("# arena order by measured time within 1.05x the single strand's memory (%.1f MiB) with y/dy/dx "
                  "shared (the -io arena; the plain arena keeps its own y/dy/dx and may exceed it): %s\n",
                  budget / 1048576.0, fast < 0 ? "none fits" : pools[size_t(fast)].name.c_str());
    if (fast >= 0 && fast != arena) run_arena(pools[size_t(fast)], "-fast");
    // strands-arena-moves-2link-dag: the pool-bounded co-run moves order measured fastest above (two sets) in
    // one pool (searched within the budget by two_strand_pool_bound; its placement may still exceed it by the
    // bound's gap, reported).
    int mv = -1;
    for (size_t i = 0; i < pools.size(); ++i)
      if (pools[i].dep_ready && measured(pools[i].name) > 0 &&
          (mv < 0 || measured(pools[i].name) < measured(pools[size_t(mv)].name)))
        mv = int(i);
    if (mv >= 0) {
      const OrderPool& op = pools[size_t(mv)];
      const double m = mem_small + op.pool.pool_bytes - small.pool.pool_bytes;
      if (root && m > budget)
        std::printf("# strands-arena-moves: its -io memory %.1f MiB exceeds 1.05x the single strand's (%.1f MiB)\n",
                    m / 1048576.0, budget / 1048576.0);
      run_arena(op, "-moves", /*placed_for_waits=*/true);
      run_arena(op, "-moves-minpool");  // the same order in the smallest pool (the placement's A/B)
    }
  }
  const double mem_peak = bench::device_used_bytes();

  report(team, a, c, p, ctx, st, *comm_a, *comm_b, la.local_tokens(), vs, compute_us, comm_us, one_set, "round-robin", 1,
         plan_source, plan, ok, [&](double compute, double comm) {
           std::printf("# unit = one micro-batch forward (strand a) + one backward (strand b); compute only %.1f us, "
                       "collectives alone %.1f us; strands' link streams at %s priority\n",
                       compute, comm, link_priority_high() ? "high" : "normal");
           std::printf("# memory: weights %.1f MiB, activation set + grads a %.1f MiB, b %.1f MiB; cudaMemGetInfo: comm "
                       "a %+.1f MiB, comm b %+.1f MiB, layer a %+.1f MiB, layer b %+.1f MiB, after timing %+.1f MiB\n",
                       la.memory().weights / 1048576.0, (la.memory().total() - la.memory().weights) / 1048576.0,
                       lb.memory().total() / 1048576.0, (mem_comm_a - mem0) / 1048576.0,
                       (mem_comm_b - mem_comm_a) / 1048576.0, (mem_a - mem_comm_b) / 1048576.0,
                       (mem_b - mem_a) / 1048576.0, (mem_peak - mem_b) / 1048576.0);
         }, la, compute_rounds, clock_fields);
  team.synchronize(s, "bench strands end");
  return 0;
}

}  // namespace braid::schedule
