// Two GPUs (or two ranks sharing one GPU over the peer comm: test_strands_mpi_shared2): the DHelix strand
// executor. α's forward co-executed with β's backward (two activation sets, one copy of the weights) must give
// bitwise the outputs and gradients of running the same micro-batches one after the other on one stream (single
// strand), for searched and hand-made plans, eagerly and as a replayed CUDA graph (MoE: with a capacity factor); so
// must the naive round-robin baseline. MoE (EP = TP = 2) is compared with the sequential GPU run (same routing),
// never with the CPU reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <mpi.h>

#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "../model/layer_check.hpp"
#include "braid/model.hpp"
#include "braid/runtime.hpp"
#include "braid/schedule/strands.hpp"
#include "capture.hpp"

namespace {

namespace m = braid::model;
namespace sch = braid::schedule;

class Env : public ::testing::Environment {
 public:
  void SetUp() override {
    world_ = std::make_unique<braid::Team>(MPI_COMM_WORLD);
    comm_a_ = m::make_default_comm(*world_);  // NCCL; the peer comm in a shared-GPU team
    comm_b_ = m::make_default_comm(*world_, /*second=*/true);
  }
  void TearDown() override {
    comm_b_.reset();
    comm_a_.reset();
    world_.reset();
  }
  static std::unique_ptr<braid::Team> world_;
  static std::unique_ptr<m::Comm> comm_a_, comm_b_;
};
std::unique_ptr<braid::Team> Env::world_;
std::unique_ptr<m::Comm> Env::comm_a_, Env::comm_b_;
::testing::Environment* const kEnv = ::testing::AddGlobalTestEnvironment(new Env);

struct Streams {
  sch::StrandStreams s;
  cudaStream_t extra = nullptr;
  cudaEvent_t rr[2] = {nullptr, nullptr};
  Streams() {
    for (cudaStream_t* p : {&s.compute, &s.local, &s.cross, &extra})
      EXPECT_EQ(cudaStreamCreateWithFlags(p, cudaStreamNonBlocking), cudaSuccess);
    for (auto& e : rr) EXPECT_EQ(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), cudaSuccess);
  }
  ~Streams() {
    for (auto e : rr) cudaEventDestroy(e);
    for (cudaStream_t p : {s.compute, s.local, s.cross, extra}) cudaStreamDestroy(p);
  }
};

m::ModelConfig shape(bool moe) {
  m::ModelConfig c = m::preset(moe ? "tiny-moe" : "tiny");
  c.name = moe ? "moe-d32-s100" : "d32-s100";
  c.hidden = 256, c.heads = 8, c.kv_heads = 2, c.ffn = moe ? 128 : 512, c.seq = 100, c.micro_batch = 2;
  return c;
}

std::vector<uint16_t> bits(const void* p, size_t n) {
  std::vector<uint16_t> h(n);
  EXPECT_EQ(cudaMemcpy(h.data(), p, n * 2, cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

void upload(m::Layer& l, const std::vector<double>& x, const std::vector<double>& dy, int rank) {
  const size_t rows = size_t(l.local_tokens()), H = size_t(l.config().hidden);
  const size_t off = size_t(rank) * rows * H;
  const auto xb = layer_check::to_bits(x, off, rows * H), dyb = layer_check::to_bits(dy, off, rows * H);
  ASSERT_EQ(cudaMemcpy(l.x(), xb.data(), xb.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(l.dy(), dyb.data(), dyb.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // pageable uploads land before the strands' streams read them
}

struct Snapshot {
  std::vector<uint16_t> ya, dxa, yb, dxb;
  m::LayerWeights ga, gb, gsum;
};

enum class Variant { kSingle, kStrands, kGraph, kRoundRobin };

// The unit under test: β forward (earlier unit), then {α forward, β backward} as `v`, then α backward and
// α.grads += β.grads.
// accumulating: β shares α's accumulating gradients (Layer::Share::kAll): they are zeroed first, the unit
// leaves β's contribution (gb) and α's backward adds its own (gsum, also in ga); no add_grads.
// shared_io: the layers share y/dy/dx (Layer::share_interfaces): α's dy is uploaded again before its
// backward (β's y then reads as α's: not compared by expect_close_grads).
Snapshot run_unit(m::Layer& a, m::Layer& b, sch::StrandExecutor* ex, Streams& st, Variant v,
                  const std::vector<double> in[4], int rank, bool accumulating = false, bool shared_io = false) {
  upload(a, in[0], in[1], rank);
  upload(b, in[2], in[3], rank);
  cudaStream_t s = st.s.compute;
  if (accumulating) a.zero_grads(s);
  b.forward(s);
  switch (v) {
    case Variant::kSingle: sch::run_single_strand(a, b, s); break;
    case Variant::kStrands: ex->run(a, b); break;
    case Variant::kRoundRobin: sch::run_round_robin(a, b, s, st.extra, st.rr); break;
    case Variant::kGraph: {
      cudaGraphExec_t ge = nullptr;
      cudaGraph_t g = braid::test::capture_graph(s, [&] { ex->run(a, b); });
      EXPECT_NE(g, nullptr) << "stream capture failed";
      if (g == nullptr) break;  // the snapshot below then shows the missing run
      EXPECT_EQ(cudaGraphInstantiate(&ge, g, 0), cudaSuccess);
      for (int rep = 0; rep < 2 && ge; ++rep) EXPECT_EQ(cudaGraphLaunch(ge, s), cudaSuccess);  // replay twice
      Env::world_->synchronize(s, "graph replay");
      if (ge) cudaGraphExecDestroy(ge);
      cudaGraphDestroy(g);
      break;
    }
  }
  Env::world_->synchronize(s, "unit");
  const size_t n = size_t(a.local_tokens()) * a.config().hidden;
  Snapshot r;
  r.ya = bits(a.y(), n);
  r.yb = bits(b.y(), n);
  r.dxb = bits(b.dx(), n);
  r.gb = b.download_grads();
  if (shared_io) upload(a, in[0], in[1], rank);
  a.backward(s);
  Env::world_->synchronize(s, "alpha backward");
  r.ga = a.download_grads();
  if (!accumulating) a.add_grads(b, s);
  Env::world_->synchronize(s, "add grads");
  r.dxa = bits(a.dx(), n);
  r.gsum = a.download_grads();
  return r;
}

// Activations bitwise; gradients within the rounding that accumulating in the GEMM (fp32 α + bf16 β, one
// rounding) instead of adding two rounded bf16 values allows: 2^-7 (|want| + |β's|), plus cuBLAS's choice
// of another kernel for beta = 1.
void expect_close_grads(const Snapshot& x, const Snapshot& y, const m::ModelConfig& c, const std::string& what) {
  EXPECT_TRUE(x.ya == y.ya) << what << ": alpha y";
  EXPECT_TRUE(x.dxb == y.dxb) << what << ": beta dx";
  EXPECT_TRUE(x.dxa == y.dxa) << what << ": alpha dx";
  for (const auto& f : m::field_names(c)) {
    const auto &gb = *m::field(x.gb, f), &gb2 = *m::field(y.gb, f);
    const auto &gs = *m::field(x.gsum, f), &gs2 = *m::field(y.gsum, f);
    ASSERT_EQ(gb.size(), gb2.size()) << what << " d" << f;
    ASSERT_EQ(gs.size(), gs2.size()) << what << " d" << f;
    size_t bad_b = 0, bad_s = 0;
    for (size_t i = 0; i < gb.size(); ++i) {
      bad_b += !(std::abs(gb2[i] - gb[i]) <= std::abs(gb[i]) / 128 + 1e-6);
      bad_s += !(std::abs(gs2[i] - gs[i]) <= (std::abs(gs[i]) + std::abs(gb[i])) / 128 + 1e-6);
    }
    EXPECT_EQ(bad_b, 0u) << what << ": beta d" << f;
    EXPECT_EQ(bad_s, 0u) << what << ": summed d" << f;
  }
}

void expect_same(const Snapshot& x, const Snapshot& y, const m::ModelConfig& c, const std::string& what) {
  EXPECT_TRUE(x.ya == y.ya) << what << ": alpha y";
  EXPECT_TRUE(x.yb == y.yb) << what << ": beta y";
  EXPECT_TRUE(x.dxb == y.dxb) << what << ": beta dx";
  EXPECT_TRUE(x.dxa == y.dxa) << what << ": alpha dx";
  for (const auto& f : m::field_names(c)) {
    const auto &p = *m::field(x.gb, f), &q = *m::field(y.gb, f);
    EXPECT_TRUE(p.size() == q.size() && std::memcmp(p.data(), q.data(), p.size() * sizeof(double)) == 0)
        << what << ": beta d" << f;
    const auto &r = *m::field(x.gsum, f), &t = *m::field(y.gsum, f);
    EXPECT_TRUE(r.size() == t.size() && std::memcmp(r.data(), t.data(), r.size() * sizeof(double)) == 0)
        << what << ": summed d" << f;
  }
}

// Canonical orders; step k pairs forward op k with backward op k unless both are collectives on one link.
sch::Plan interleaved_plan(const sch::Layer& dag) {
  sch::Plan p;
  for (int i = 0; i < int(dag.fwd.size()); ++i) p.fwd_order.push_back(i);
  for (int j = 0; j < int(dag.bwd.size()); ++j) p.bwd_order.push_back(j);
  const size_t n = std::max(dag.fwd.size(), dag.bwd.size());
  for (size_t k = 0; k < n; ++k) {
    sch::PlanStep st;
    if (k < dag.fwd.size()) st.fwd = {int(k)};
    if (k < dag.bwd.size()) st.bwd = {int(k)};
    if (!st.fwd.empty() && !st.bwd.empty() && dag.fwd[k].kind == sch::OpKind::Comm &&
        dag.bwd[k].kind == sch::OpKind::Comm && dag.fwd[k].link == dag.bwd[k].link) {
      p.steps.push_back({st.fwd, {}, 0});
      p.steps.push_back({{}, st.bwd, 0});
      continue;
    }
    p.steps.push_back(std::move(st));  // a move: GCC 13 misreads the copy as a memcpy over-read (-Wstringop-overread)
  }
  return p;
}

// capacity > 0 (MoE): the capacity-factor layer — static shapes, no host wait — so its strands are
// captured and replayed from CUDA graphs as the dense layer's are.
// device_sizes (MoE, dropless): the counts on the device (ModelConfig::moe_device_sizes) — no host wait either, so
// captured and replayed too.
// per_step: the replicated gradients reduced once per step (Parallel::replicated_grads_per_step): no backward ends in
// their all-reduce, the single strand's too; the snapshots compare the partial sums.
void strands_equal_single(bool moe, double capacity = 0, bool device_sizes = false, bool per_step = false) {
  const int rank = Env::world_->rank(), tp = Env::world_->size();
  auto c = shape(moe);
  c.capacity = capacity;
  c.moe_device_sizes = device_sizes;
  const bool graphs = !moe || capacity > 0 || device_sizes;
  m::Parallel par{tp, true};
  par.replicated_grads_per_step = per_step;
  m::Layer a(c, par, *Env::comm_a_);
  a.load_weights(m::init_weights(c, 51));
  m::Layer b(a, *Env::comm_b_);
  ASSERT_TRUE(b.shares_weights());
  EXPECT_EQ(b.memory().weights, 0u);
  const size_t n = size_t(c.tokens()) * c.hidden;
  const std::vector<double> in[4] = {m::random_values(n, 52, 1.0), m::random_values(n, 53, 1.0),
                                     m::random_values(n, 54, 1.0), m::random_values(n, 55, 1.0)};
  Streams st;
  const sch::Layer dag = sch::strand_layer(c, par);
  const sch::PairTable table = sch::synthetic_pair_table(dag);
  sch::PairCost cost(dag, table);
  const sch::Plan searched = sch::search_plan(cost);
  const sch::Plan inter = interleaved_plan(dag);
  const sch::Plan whole = sch::whole_pass_plan(dag, searched);
  const Snapshot ref = run_unit(a, b, nullptr, st, Variant::kSingle, in, rank);

  // The weight-sharing layer computes what a layer with its own copy of the weights computes.
  {
    m::Layer own(c, par, *Env::comm_b_);
    own.load_weights(m::init_weights(c, 51));
    upload(own, in[2], in[3], rank);
    own.forward(st.s.compute);
    own.backward(st.s.compute);
    Env::world_->synchronize(st.s.compute, "own weights");
    EXPECT_TRUE(bits(own.y(), size_t(own.local_tokens()) * c.hidden) == ref.yb) << "shared weights: y";
    const auto g = own.download_grads();
    for (const auto& f : m::field_names(c))
      EXPECT_TRUE(*m::field(g, f) == *m::field(ref.gb, f)) << "shared weights: d" << f;
    // the fixed-order sum is the host sum of two bf16 values rounded to bf16 (fp32 for replicated ones)
    for (const auto& f : m::field_names(c)) {
      const auto &ga = *m::field(ref.ga, f), &gb = *m::field(ref.gb, f), &gs = *m::field(ref.gsum, f);
      ASSERT_EQ(ga.size(), gs.size());
      double worst = 0;
      for (size_t i = 0; i < gs.size(); ++i)
        worst = std::max(worst, std::abs(gs[i] - (ga[i] + gb[i])) / std::max(std::abs(ga[i] + gb[i]), 1e-30));
      EXPECT_LT(worst, 1.0 / 128) << "summed d" << f;  // one bf16 rounding
    }
  }

  for (const auto* plan : {&searched, &inter, &whole})
  for (const bool barrier : {false, true}) {  // chained strands (default) and the step-barrier executor
    const std::string tag = std::string(moe ? "moe " : "dense ") +
                            (plan == &searched ? "searched plan" : plan == &inter ? "interleaved plan" : "whole-pass plan") +
                            (barrier ? " step-barrier" : "");
    sch::StrandExecutor ex(dag, *plan, st.s, barrier);
    const auto order = ex.issue_order(plan->fwd_order, plan->bwd_order);
    EXPECT_EQ(order.size(), dag.fwd.size() + dag.bwd.size()) << tag;
    expect_same(ref, run_unit(a, b, &ex, st, Variant::kStrands, in, rank), c, tag + " strands");
    expect_same(ref, run_unit(a, b, &ex, st, Variant::kStrands, in, rank), c, tag + " strands again");
    if (graphs) expect_same(ref, run_unit(a, b, &ex, st, Variant::kGraph, in, rank), c, tag + " CUDA graph");
  }
  expect_same(ref, run_unit(a, b, nullptr, st, Variant::kRoundRobin, in, rank), c, "round-robin");
  {  // β's collectives on their own (cross-link) stream, as bench strands' strands-whole-2link runs them
    const sch::Layer dag2 = sch::two_link_layer(dag);
    sch::StrandExecutor ex2(dag2, sch::whole_pass_plan(dag2, searched), st.s);
    expect_same(ref, run_unit(a, b, &ex2, st, Variant::kStrands, in, rank), c, std::string(moe ? "moe" : "dense") +
                                                                                   " whole-pass two-link strands");
  }
  {  // operators waiting for their DAG dependencies only (weight gradients beside their own collectives)
    for (const bool two : {false, true}) {
      const sch::Layer dd = sch::dep_ready_layer(two ? sch::two_link_layer(dag) : dag);
      sch::StrandExecutor exd(dd, sch::whole_pass_plan(dd, searched), st.s);
      const std::string tag = std::string(moe ? "moe" : "dense") + " dependency-ready strands" + (two ? ", two links" : "");
      expect_same(ref, run_unit(a, b, &exd, st, Variant::kStrands, in, rank), c, tag);
      expect_same(ref, run_unit(a, b, &exd, st, Variant::kStrands, in, rank), c, tag + " again");
      if (graphs) expect_same(ref, run_unit(a, b, &exd, st, Variant::kGraph, in, rank), c, tag + " CUDA graph");
    }
  }

  // β sharing α's one-phase buffers (backward scratch, forward transients): the same bits in every schedule
  // that pairs one strand's forward with the other's backward.
  {
    m::Layer bs(a, *Env::comm_b_, m::Layer::Share::kWeightsAndScratch);
    ASSERT_TRUE(bs.shares_weights());
    EXPECT_LT(bs.memory().activations, b.memory().activations);
    const std::string tag = moe ? "moe shared scratch" : "dense shared scratch";
    expect_same(ref, run_unit(a, bs, nullptr, st, Variant::kSingle, in, rank), c, tag + " single strand");
    sch::StrandExecutor ex(dag, searched, st.s);
    expect_same(ref, run_unit(a, bs, &ex, st, Variant::kStrands, in, rank), c, tag + " strands");
    if (graphs) expect_same(ref, run_unit(a, bs, &ex, st, Variant::kGraph, in, rank), c, tag + " CUDA graph");
    expect_same(ref, run_unit(a, bs, nullptr, st, Variant::kRoundRobin, in, rank), c, tag + " round-robin");
  }
  // β sharing α's gradients too (Share::kAll, accumulating): the summed gradients without add_grads.
  {
    EXPECT_THROW({ m::Layer tmp(a, *Env::comm_b_, m::Layer::Share::kAll); }, braid::Error);  // owner must accumulate
    a.set_accumulate_grads(true);
    {
      m::Layer ba(a, *Env::comm_b_, m::Layer::Share::kAll);
      EXPECT_TRUE(ba.accumulates_grads());
      EXPECT_EQ(ba.memory().grads, 0u);
      EXPECT_THROW(a.add_grads(ba, st.s.compute), braid::Error);
      const std::string tag = moe ? "moe shared gradients" : "dense shared gradients";
      expect_close_grads(ref, run_unit(a, ba, nullptr, st, Variant::kSingle, in, rank, true), c,
                         tag + " single strand");
      sch::StrandExecutor ex(dag, searched, st.s);
      expect_close_grads(ref, run_unit(a, ba, &ex, st, Variant::kStrands, in, rank, true), c, tag + " strands");
      expect_close_grads(ref, run_unit(a, ba, nullptr, st, Variant::kRoundRobin, in, rank, true), c,
                         tag + " round-robin");
    }
    a.set_accumulate_grads(false);
  }
  // Both strands' saved activations in one pool (two_strand_placement over the two-link, sink-placing
  // order) with the executor's memory waits, gradients shared and accumulating: bench strands'
  // strands-arena-2link, dense and MoE (the MoE layer's saved tensors, expert buffers at capacity).
  {
    const std::string kind = moe ? "moe" : "dense";
    const sch::Layer dag2 = sch::two_link_layer(dag);
    const auto order = sch::best_issue_order(dag2, searched, 64, true).order;
    m::Layer aa(c, par, *Env::comm_a_);
    aa.load_weights(m::init_weights(c, 51));
    aa.set_accumulate_grads(true);
    m::Layer bb(aa, *Env::comm_b_, m::Layer::Share::kAll);
    bb.share_cublas_workspace(aa);  // both layers' GEMMs on the executor's one compute stream
    EXPECT_EQ(bb.memory().workspace, 0u);
    const size_t act_before = aa.memory().activations;
    sch::SharedActivationPool pool(dag2, order, c, par, aa, bb);
    EXPECT_LT(aa.memory().activations, act_before);
    EXPECT_LT(pool.bytes, 2 * pool.one_set);
    sch::StrandExecutor exa(dag2, sch::order_plan(dag2, order), st.s);
    exa.set_memory_waits(pool.waits);
    expect_close_grads(ref, run_unit(aa, bb, &exa, st, Variant::kStrands, in, rank, true), c, kind + " one activation pool");
    expect_close_grads(ref, run_unit(aa, bb, &exa, st, Variant::kStrands, in, rank, true), c,
                       kind + " one activation pool again");
    // ... and y/dy/dx shared by the two layers (Layer::share_interfaces: sequence parallelism, TP >= 2).
    if (tp > 1) {
      bb.share_interfaces(aa);
      EXPECT_EQ(bb.y(), aa.y());
      EXPECT_EQ(bb.dx(), aa.dx());
      expect_close_grads(ref, run_unit(aa, bb, &exa, st, Variant::kStrands, in, rank, true, true), c,
                         kind + " one activation pool, shared y/dy/dx");
    }
    Env::world_->synchronize(st.s.compute, "pool");
  }
}

TEST(StrandsMpi, DenseStrandsEqualSingleStrand) { strands_equal_single(false); }
TEST(StrandsMpi, MoEStrandsEqualSingleStrand) { strands_equal_single(true); }
TEST(StrandsMpi, MoECapacityStrandsEqualSingleStrandAndCapture) { strands_equal_single(true, 1.0); }
TEST(StrandsMpi, MoEDeviceSizesStrandsEqualSingleStrandAndCapture) { strands_equal_single(true, 0, true); }
TEST(StrandsMpi, DenseStrandsEqualSingleStrandReplicatedGradsPerStep) { strands_equal_single(false, 0, false, true); }
TEST(StrandsMpi, MoEStrandsEqualSingleStrandReplicatedGradsPerStep) { strands_equal_single(true, 0, false, true); }

// A stack of layers (StrandStack), dense and MoE: its one-strand-at-a-time pass equals the same micro-batches through
// separate layer objects (one per layer and micro-batch, the same shared weights and accumulating
// gradients) bit for bit, and two strands (round-robin, and the dependency-ready two-link executor, eagerly)
// equal it bit for bit, over two passes with the roles swapped: the slot rotation hands every backward the
// set its forward wrote.
// ce: the stack's two layers over two NCCL copy-engine comms (make_nccl_ce_comm; dense, TP = 2): the slots are a window
// of both (schedule::PlacedMemory), h1f / h2f gathered in place there, the sharer's collectives on the owner's
// registered windows; the reference stays on NCCL (two ranks: the same sums, bit for bit).
void stack_equal_one_at_a_time(bool moe, double capacity = 0, int L = 3, bool device_sizes = false, bool ce = false) {
  const int rank = Env::world_->rank(), tp = Env::world_->size();
  if (tp < 2) GTEST_SKIP() << "the strand stack shares y/dy/dx (Layer::share_interfaces): sequence parallelism, TP >= 2";
  std::unique_ptr<m::Comm> ce_a, ce_b;
  if (ce) {
    auto& team = *Env::world_;
    if (moe || tp != 2 || !team.has_nccl() || team.shared_gpu() || !team.peer_ok())
      GTEST_SKIP() << "nccl-ce: a dense layer, NCCL and two GPUs of one node with peer access";
    try {
      ce_a = m::make_nccl_ce_comm(team);
      ce_b = m::make_nccl_ce_comm(team);
    } catch (const braid::UnavailableError& e) {
      GTEST_SKIP() << e.what();
    }
  }
  m::Comm& comm_a = ce ? *ce_a : *Env::comm_a_;
  m::Comm& comm_b = ce ? *ce_b : *Env::comm_b_;
  auto c = shape(moe);
  c.capacity = capacity;
  c.moe_device_sizes = device_sizes;
  const m::Parallel par{tp, true};
  SCOPED_TRACE(std::to_string(L) + " layers");
  const size_t n = size_t(c.tokens()) * c.hidden;
  // micro-batch a (x, dy), micro-batch b (x, dy), b's next micro-batch (x)
  const std::vector<double> xa = m::random_values(n, 72, 1.0), dya = m::random_values(n, 73, 1.0),
                            xb = m::random_values(n, 74, 1.0), dyb = m::random_values(n, 75, 1.0),
                            xb2 = m::random_values(n, 76, 1.0);
  const auto w = m::init_weights(c, 71);
  Streams st;
  cudaStream_t s = st.s.compute;
  auto put = [&](void* dst, const std::vector<double>& v, const m::Layer& l) {
    const size_t rows = size_t(l.local_tokens()), H = size_t(c.hidden);
    const auto h = layer_check::to_bits(v, size_t(rank) * rows * H, rows * H);
    ASSERT_EQ(cudaMemcpy(dst, h.data(), h.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  };
  auto copy = [&](void* dst, const void* src, const m::Layer& l) {
    ASSERT_EQ(cudaMemcpyAsync(dst, src, size_t(l.local_tokens()) * c.hidden * 2, cudaMemcpyDeviceToDevice, s),
              cudaSuccess);
  };
  const size_t nl = size_t(n / size_t(tp));
  Snapshot ref;  // ya: a's top output, dxb: b's bottom dx, gb: gradients after pass 1; dxa, gsum, yb: after pass 2
  {  // separate layer objects: A[l] for micro-batch a, B[l] for b, all sharing one weight and gradient copy
    m::Layer owner(c, par, *Env::comm_a_);
    owner.load_weights(w);
    owner.set_accumulate_grads(true);
    std::vector<std::unique_ptr<m::Layer>> A, B;
    for (int l = 0; l < L; ++l) {
      A.push_back(std::make_unique<m::Layer>(owner, *Env::comm_a_, m::Layer::Share::kAll));
      B.push_back(std::make_unique<m::Layer>(owner, *Env::comm_a_, m::Layer::Share::kAll));
    }
    auto fwd = [&](std::vector<std::unique_ptr<m::Layer>>& S, const std::vector<double>& x) {
      put(S[0]->x(), x, *S[0]);
      for (int l = 0; l < L; ++l) {
        if (l > 0) copy(S[size_t(l)]->x(), S[size_t(l) - 1]->y(), *S[0]);
        S[size_t(l)]->forward(s);
      }
    };
    auto bwd = [&](std::vector<std::unique_ptr<m::Layer>>& S, const std::vector<double>& dy) {
      put(S[L - 1]->dy(), dy, *S[0]);
      for (int l = L - 1; l >= 0; --l) {
        if (l < L - 1) copy(S[size_t(l)]->dy(), S[size_t(l) + 1]->dx(), *S[0]);
        S[size_t(l)]->backward(s);
      }
    };
    owner.zero_grads(s);
    fwd(B, xb);
    fwd(A, xa);
    bwd(B, dyb);
    Env::world_->synchronize(s, "separate layers, pass 1");
    ref.ya = bits(A[L - 1]->y(), nl);
    ref.dxb = bits(B[0]->dx(), nl);
    ref.gb = owner.download_grads();
    fwd(B, xb2);
    bwd(A, dya);
    Env::world_->synchronize(s, "separate layers, pass 2");
    ref.dxa = bits(A[0]->dx(), nl);
    ref.gsum = owner.download_grads();
    ref.yb = bits(B[L - 1]->y(), nl);
  }
  m::Layer a(c, par, comm_a);
  a.load_weights(w);
  a.set_accumulate_grads(true);
  m::Layer b(a, comm_b, m::Layer::Share::kAll);
  b.share_interfaces(a);
  EXPECT_EQ(a.copy_engine_collectives(), ce);
  EXPECT_EQ(b.dy(), a.dy());
  const size_t act_before = a.memory().activations;
  sch::StrandStack stack(a, b, L);
  EXPECT_EQ(stack.pool_in_window(), ce);
  EXPECT_LT(a.memory().activations, act_before);  // the saved set and x moved into the slots
  EXPECT_EQ(stack.slots(), L + 1);
  const sch::Layer dag = sch::strand_layer(c, par);
  const sch::PairTable table = sch::synthetic_pair_table(dag);
  sch::PairCost cost(dag, table);
  const sch::Plan searched = sch::search_plan(cost);
  const sch::Layer dd = sch::dep_ready_layer(sch::two_link_layer(dag));
  sch::StrandExecutor ex(dd, sch::whole_pass_plan(dd, searched), st.s);
  // Barrier-free in issue order (each op after its strand's previous one): the searched plan's steps.
  sch::StrandExecutor ex_order(sch::two_link_layer(dag), searched, st.s);
  auto run_on = [&](sch::StrandStack& sk, const std::function<void()>& one_pass) {
    sk.reset();
    put(sk.input(0), xa, a);
    put(sk.dout(0), dya, a);
    put(sk.input(1), xb, a);
    put(sk.dout(1), dyb, a);
    a.zero_grads(s);
    sk.forward(1, s);
    EXPECT_EQ(sk.forward_object(), 0);
    one_pass();
    Env::world_->synchronize(s, "stack pass 1");
    Snapshot r;
    r.ya = bits(a.y(), nl);
    r.dxb = bits(b.dx(), nl);
    r.gb = a.download_grads();
    put(sk.input(1), xb2, a);
    one_pass();
    Env::world_->synchronize(s, "stack pass 2");
    EXPECT_EQ(sk.forward_object(), 0);
    r.dxa = bits(a.dx(), nl);
    r.gsum = a.download_grads();
    r.yb = bits(b.y(), nl);
    return r;
  };
  auto run = [&](const std::function<void()>& one_pass) { return run_on(stack, one_pass); };
  auto same = [&](const Snapshot& got, const std::string& how) {
    const std::string what = std::string(moe ? "moe " : "dense ") + how;
    EXPECT_TRUE(ref.ya == got.ya) << what << ": a's top y";
    EXPECT_TRUE(ref.dxb == got.dxb) << what << ": b's bottom dx";
    EXPECT_TRUE(ref.dxa == got.dxa) << what << ": a's bottom dx";
    EXPECT_TRUE(ref.yb == got.yb) << what << ": b's next top y";
    for (const auto& f : m::field_names(c)) {
      EXPECT_TRUE(*m::field(ref.gb, f) == *m::field(got.gb, f)) << what << ": pass-1 d" << f;
      EXPECT_TRUE(*m::field(ref.gsum, f) == *m::field(got.gsum, f)) << what << ": pass-2 d" << f;
    }
  };
  same(run([&] { stack.pass_single(s); }), "stack, one strand at a time");
  same(run([&] { stack.pass(s, [&](m::Layer& f, m::Layer& bw) { sch::run_round_robin(f, bw, s, st.extra, st.rr); }); }),
       "stack, round-robin");
  same(run([&] { stack.pass(s, [&](m::Layer& f, m::Layer& bw) { ex.run(f, bw); }); }),
       "stack, dependency-ready two-link strands");
  same(run([&] { stack.pass(s, [&](m::Layer& f, m::Layer& bw) { ex.run(f, bw); }); }),
       "stack, dependency-ready two-link strands again");
  // Units chained (no join between layers): each strand after its own previous unit, f's input copy after
  // the unit of b that freed its slot; with one spare slot, the unit before that.
  same(run([&] { stack.pass_chained(s, ex); }), "stack chained, dependency-ready two-link strands");
  same(run([&] { stack.pass_chained(s, ex_order); }), "stack chained, two-link strands in issue order");
  same(run([&] { stack.pass_chained_rr(s); }), "stack, round-robin chained");
  {
    sch::StrandStack spare(a, b, L, 1);
    EXPECT_EQ(spare.slots(), L + 2);
    same(run_on(spare, [&] { spare.pass_chained(s, ex); }), "stack chained with a spare slot, dependency-ready");
    same(run_on(spare, [&] { spare.pass(s, [&](m::Layer& f, m::Layer& bw) { ex.run(f, bw); }); }),
         "stack with a spare slot, joined units");
  }
  {  // split slots: x, rstd1 and the gathered h1 in L + 2 early parts, the rest handed over at op grain
    sch::StrandStack split(a, b, L, 0, {"x", "rstd1", tp > 1 ? "h1f" : "h1"});
    EXPECT_EQ(split.early_regions(), L + 2);
    EXPECT_GT(split.early_bytes(), 0u);
    EXPECT_EQ(split.pool_bytes(), size_t(L + 1) * (split.slot_bytes() - split.early_bytes()) +
                                      size_t(L + 2) * split.early_bytes());
    same(run_on(split, [&] { split.pass_chained(s, ex); }), "stack chained on split slots, dependency-ready");
    same(run_on(split, [&] { split.pass_chained(s, ex_order); }), "stack chained on split slots, issue order");
    same(run_on(split, [&] { split.pass(s, [&](m::Layer& f, m::Layer& bw) { ex.run(f, bw); }); }),
         "stack on split slots, joined units");
    same(run_on(split, [&] { split.pass_single(s); }), "stack on split slots, one strand at a time");
    same(run_on(split, [&] { split.pass_chained_rr(s); }), "stack on split slots, round-robin chained");
    same(run_on(split, [&] { split.pass_chained_rr(s, true); }),
         "stack on split slots, round-robin chained, the backward's stream first");
    same(run_on(split, [&] { split.pass_chained_rr(s, true, true); }),
         "stack on split slots, round-robin chained, backward first, sinks beside its collectives on their own stream");
  }
  same(run([&] { stack.pass_chained(s, ex); }), "stack chained, after the spare stack is gone");
  {  // BRAID_STRANDS_DEFER_DISPATCH=4: up to 4 backward ops issued ahead of each MoE dispatch (a no-op when dense)
    ASSERT_EQ(setenv("BRAID_STRANDS_DEFER_DISPATCH", "4", 1), 0);
    sch::StrandExecutor ex_ready(dd, sch::whole_pass_plan(dd, searched), st.s);
    sch::StrandExecutor ex_ready_order(sch::two_link_layer(dag), searched, st.s);
    ASSERT_EQ(unsetenv("BRAID_STRANDS_DEFER_DISPATCH"), 0);
    same(run([&] { stack.pass(s, [&](m::Layer& f, m::Layer& bw) { ex_ready.run(f, bw); }); }),
         "stack, dispatch deferred, dependency-ready");
    same(run([&] { stack.pass_chained(s, ex_ready); }), "stack chained, dispatch deferred");
    same(run([&] { stack.pass_chained(s, ex_ready_order); }), "stack chained, dispatch deferred, issue order");
  }
  stack.reset();
  EXPECT_THROW(stack.pass_single(s), braid::Error);  // a pass needs one object holding every layer
}

TEST(StrandsMpi, StackOfLayersTwoStrandsEqualOneAtATime) { stack_equal_one_at_a_time(false); }
// Two layers: with a spare slot (L + 2 slots) f's forward never waits for b within a pass.
TEST(StrandsMpi, StackOfTwoLayersTwoStrandsEqualOneAtATime) { stack_equal_one_at_a_time(false, 0, 2); }
// MoE: each layer's host-side routing (Layer::routing) is kept per layer and put back before its backward.
TEST(StrandsMpi, MoEStackOfLayersTwoStrandsEqualOneAtATime) { stack_equal_one_at_a_time(true); }
// Capacity: the per-expert counts are a saved tensor (combine_bwd zeroes the unused slots) and move with the slots.
TEST(StrandsMpi, MoECapacityStackOfLayersTwoStrandsEqualOneAtATime) { stack_equal_one_at_a_time(true, 1.0); }
TEST(StrandsMpi, MoEDeviceSizesStackOfLayersTwoStrandsEqualOneAtATime) { stack_equal_one_at_a_time(true, 0, 3, true); }
// Over NCCL's copy engines, the slots a window of both comms (PlacedMemory; fifty-eighth session).
TEST(StrandsMpi, CopyEngineStackInAWindowTwoStrandsEqualOneAtATime) { stack_equal_one_at_a_time(false, 0, 3, false, true); }

// StrandStack::pass_compute_only (the reference bench strands measures the hidden fraction against): each MoE
// forward gets its own layer's routing as a real forward of that object found it — host counts through set_routing,
// device counts copied back — not whatever the layer object held last; and it refuses to run before that object's
// routing was recorded.
void stack_compute_only_replays_routing(bool device_sizes) {
  const int rank = Env::world_->rank(), tp = Env::world_->size();
  if (tp < 2) GTEST_SKIP() << "the strand stack shares y/dy/dx (Layer::share_interfaces): sequence parallelism, TP >= 2";
  auto c = shape(true);
  c.moe_device_sizes = device_sizes;
  const m::Parallel par{tp, true};
  const int L = 3;
  m::Layer a(c, par, *Env::comm_a_);
  a.load_weights(m::init_weights(c, 81));
  a.set_accumulate_grads(true);
  m::Layer b(a, *Env::comm_b_, m::Layer::Share::kAll);
  b.share_interfaces(a);
  sch::StrandStack stack(a, b, L);
  const size_t n = size_t(c.tokens()) * c.hidden, rows = size_t(a.local_tokens()), H = size_t(c.hidden);
  int seed = 82;
  for (int o = 0; o < 2; ++o)
    for (void* p : {stack.input(o), stack.dout(o)}) {
      const auto h = layer_check::to_bits(m::random_values(n, uint64_t(seed++), 1.0), size_t(rank) * rows * H, rows * H);
      ASSERT_EQ(cudaMemcpy(p, h.data(), h.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
    }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  Streams st;
  cudaStream_t s = st.s.compute;
  a.zero_grads(s);
  stack.forward(1, s);  // object 1's routing recorded; object 0's not yet
  ASSERT_EQ(stack.forward_object(), 0);
  EXPECT_THROW(stack.pass_compute_only(s), braid::Error);
  stack.pass_single(s);  // object 0's forward: recorded
  Env::world_->synchronize(s, "stack, real passes");
  std::vector<m::Layer::Routing> real(L);
  for (int l = 0; l < L; ++l) real[size_t(l)] = stack.routing(0, l);
  std::vector<float> last(a.device_counts_size());  // object 0's device counts after its layer L-1 forward
  if (!last.empty())
    ASSERT_EQ(cudaMemcpy(last.data(), a.device_counts(), last.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  // Object 0 made to hold other counts than its layers' (host: layer 0's routing; device: zeros): without the replay
  // its compute-only forwards would run on those.
  a.set_routing(real[0]);
  if (!last.empty()) ASSERT_EQ(cudaMemset(a.device_counts(), 0, last.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  stack.pass_compute_only(s);  // f = 1
  stack.pass_compute_only(s);  // f = 0
  Env::world_->synchronize(s, "stack, compute-only passes");
  for (int l = 0; l < L; ++l) {
    const auto& got = stack.routing(0, l);
    EXPECT_EQ(got.rows, real[size_t(l)].rows) << "layer " << l;
    EXPECT_EQ(got.expert_rows, real[size_t(l)].expert_rows) << "layer " << l;
    EXPECT_EQ(got.rc, real[size_t(l)].rc) << "layer " << l;
  }
  if (!last.empty()) {  // the last forward (layer L-1) ran on its own layer's counts, not the zeros
    std::vector<float> now(last.size());
    ASSERT_EQ(cudaMemcpy(now.data(), a.device_counts(), now.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(now, last);
  }
  stack.pass_single(s);  // a real pass after them still runs (the saved sets the compute-only forward left)
  Env::world_->synchronize(s, "stack, a real pass after compute-only ones");
}
// A dense stack's compute-only pass has no routing to replay: it runs without recorded forwards (bench strands times it
// interleaved, possibly before any one-strand pass of the object).
TEST(StrandsMpi, DenseStackComputeOnlyNeedsNoRecording) {
  const int tp = Env::world_->size();
  if (tp < 2) GTEST_SKIP() << "the strand stack shares y/dy/dx (Layer::share_interfaces): sequence parallelism, TP >= 2";
  const auto c = shape(false);
  const m::Parallel par{tp, true};
  m::Layer a(c, par, *Env::comm_a_);
  a.load_weights(m::init_weights(c, 91));
  a.set_accumulate_grads(true);
  m::Layer b(a, *Env::comm_b_, m::Layer::Share::kAll);
  b.share_interfaces(a);
  sch::StrandStack stack(a, b, 2);
  Streams st;
  cudaStream_t s = st.s.compute;
  stack.forward(1, s);  // object 0 never ran a forward
  EXPECT_NO_THROW(stack.pass_compute_only(s));
  EXPECT_NO_THROW(stack.pass_compute_only(s));
  Env::world_->synchronize(s, "dense stack, compute-only passes");
}
TEST(StrandsMpi, MoEStackComputeOnlyReplaysEveryLayersRouting) { stack_compute_only_replays_routing(false); }
TEST(StrandsMpi, MoEDeviceSizesStackComputeOnlyReplaysEveryLayersRouting) { stack_compute_only_replays_routing(true); }

// bench strands --op-trace: a traced compute-only unit times every compute operator once, under the strand DAG's
// names — the device-sized MoE layer's expert_layout (compute since the forty-eighth session) among them, its exchanges
// not — and the operators' times fit inside the span.
TEST(StrandsMpi, OpTraceTimesEveryComputeOperatorOnce) {
  const int rank = Env::world_->rank(), tp = Env::world_->size();
  auto c = shape(true);
  c.moe_device_sizes = true;
  const m::Parallel par{tp, true};
  m::Layer a(c, par, *Env::comm_a_);
  a.load_weights(m::init_weights(c, 71));
  m::Layer b(a, *Env::comm_b_);
  const size_t n = size_t(c.tokens()) * c.hidden;
  upload(a, m::random_values(n, 72, 1.0), m::random_values(n, 73, 1.0), rank);
  upload(b, m::random_values(n, 74, 1.0), m::random_values(n, 75, 1.0), rank);
  cudaStream_t s = Env::world_->stream();
  a.forward(s);  // a's gathered counts and b's saved tensors, as a compute-only pass finds them after real ones
  b.forward(s);
  sch::OpTrace trace;
  sch::run_compute_only(a, b, s, &trace);
  Env::world_->synchronize(s, "op trace");
  const auto tot = trace.totals();
  const sch::Layer dag = sch::strand_layer(c, par);
  size_t computes = 0;
  for (const auto* ops : {&dag.fwd, &dag.bwd})
    for (const auto& o : *ops) {
      const auto it = std::find_if(tot.begin(), tot.end(), [&](const sch::OpTrace::Total& t) { return t.name == o.name; });
      if (o.kind == sch::OpKind::Comm) {
        EXPECT_EQ(it, tot.end()) << o.name << " is an exchange: not run";
        continue;
      }
      ++computes;
      ASSERT_NE(it, tot.end()) << o.name;
      EXPECT_EQ(it->calls, 1) << o.name;
      EXPECT_GT(it->us, 0.0) << o.name;
    }
  EXPECT_EQ(tot.size(), computes);
  EXPECT_NE(std::find_if(tot.begin(), tot.end(), [](const sch::OpTrace::Total& t) { return t.name == "f.expert_layout"; }),
            tot.end());
  EXPECT_LE(trace.ops_us(), trace.span_us() * 1.001 + 1.0);
}

// bench strands --op-trace on a two-strand unit: inside an OpTrace::Scope the executor records every operator of both
// strands once, collectives on a link stream and compute on the compute stream; no operator starts before a DAG
// dependency of its own strand ends (the executor's waits, read off the GPU's clock), one stream's operators do not
// overlap, and outside the scope nothing is recorded.
// Two dense layers for the executor tests below: a with weights from `seed`, b sharing them over comm b.
struct DensePair {
  const int rank = Env::world_->rank(), tp = Env::world_->size();
  const m::ModelConfig c = shape(false);
  const m::Parallel par{tp, true};
  m::Layer a, b;
  explicit DensePair(uint64_t seed) : a(c, par, *Env::comm_a_), b(a, *Env::comm_b_) {
    a.load_weights(m::init_weights(c, seed));  // (b reads a's weights)
  }
};

TEST(StrandsMpi, OpTraceScopeRecordsEveryOperatorOfAStrandUnitInDependencyOrder) {
  DensePair pair(81);
  const int rank = pair.rank;
  const auto& c = pair.c;
  const auto& par = pair.par;
  m::Layer &a = pair.a, &b = pair.b;
  const size_t n = size_t(c.tokens()) * c.hidden;
  upload(a, m::random_values(n, 82, 1.0), m::random_values(n, 83, 1.0), rank);
  upload(b, m::random_values(n, 84, 1.0), m::random_values(n, 85, 1.0), rank);
  Streams st;
  b.forward(st.s.compute);  // the backward strand's saved tensors
  const sch::Layer dag = sch::strand_layer(c, par);
  const sch::PairTable table = sch::synthetic_pair_table(dag);
  sch::PairCost cost(dag, table);
  const sch::Plan searched = sch::search_plan(cost);
  for (const bool deps : {false, true}) {  // chained strands and operators waiting for their dependencies only
    const sch::Layer d = deps ? sch::dep_ready_layer(sch::two_link_layer(dag)) : sch::two_link_layer(dag);
    sch::StrandExecutor ex(d, sch::whole_pass_plan(d, searched), st.s);
    sch::OpTrace trace;
    EXPECT_EQ(sch::OpTrace::active(), nullptr);
    {
      sch::OpTrace::Scope scope(trace);
      EXPECT_EQ(sch::OpTrace::active(), &trace);
      EXPECT_THROW({ sch::OpTrace::Scope nested(trace); }, braid::Error);
      ex.run(a, b);
    }
    EXPECT_EQ(sch::OpTrace::active(), nullptr);
    ex.run(b, a);  // untraced
    Env::world_->synchronize(st.s.compute, "strand trace");
    const auto spans = trace.spans();
    const std::string tag = deps ? "dependency-ready: " : "chained: ";
    ASSERT_EQ(spans.size(), d.fwd.size() + d.bwd.size()) << tag << "every operator once, the untraced run not at all";
    double first = 1e30;
    for (const auto* ops : {&d.fwd, &d.bwd}) {
      for (const auto& o : *ops) {
        const auto it = std::find_if(spans.begin(), spans.end(), [&](const sch::OpTrace::Span& x) { return x.name == o.name; });
        ASSERT_NE(it, spans.end()) << tag << o.name;
        EXPECT_EQ(it->stream == st.s.compute, o.kind != sch::OpKind::Comm) << tag << o.name;
        EXPECT_LE(it->start_us, it->end_us) << tag << o.name;
        first = std::min(first, it->start_us);
        for (int dep : o.deps) {
          const auto& dn = (*ops)[size_t(dep)].name;
          const auto jt = std::find_if(spans.begin(), spans.end(), [&](const sch::OpTrace::Span& x) { return x.name == dn; });
          ASSERT_NE(jt, spans.end()) << tag << dn;
          EXPECT_GE(it->start_us + 1.0, jt->end_us) << tag << o.name << " started before its dependency " << dn << " ended";
        }
      }
    }
    EXPECT_NEAR(first, 0.0, 1e-9) << tag << "spans count from the earliest start";
    for (size_t i = 0; i < spans.size(); ++i)
      for (size_t j = i + 1; j < spans.size(); ++j)
        if (spans[i].stream == spans[j].stream)
          EXPECT_TRUE(spans[i].end_us <= spans[j].start_us + 1.0 || spans[j].end_us <= spans[i].start_us + 1.0)
              << tag << spans[i].name << " and " << spans[j].name << " overlap on one stream";
  }
}

// bench strands' -open<K> variants: with both layers' opening pairs in chunks (model::Layer::set_opening_chunks), the
// strand executor on opening_chunked_layer gives the bits one strand gives with the same chunks (the same kernels on
// the same data), chained and with operators waiting for their dependencies only; the layers' own tests compare the
// chunked layer with the float64 reference.
TEST(StrandsMpi, OpeningChunksStrandsEqualSingleStrandWithThem) {
  DensePair pair(91);
  const int rank = pair.rank, tp = pair.tp;
  const auto& c = pair.c;
  const auto& par = pair.par;
  m::Layer &a = pair.a, &b = pair.b;
  if (tp < 2) GTEST_SKIP() << "the opening pairs need sequence parallelism at TP >= 2";
  ASSERT_EQ(a.local_tokens() % 4, 0);
  a.set_opening_chunks(4), b.set_opening_chunks(4);
  const size_t n = size_t(c.tokens()) * c.hidden;
  const std::vector<double> in[4] = {m::random_values(n, 92, 1.0), m::random_values(n, 93, 1.0),
                                     m::random_values(n, 94, 1.0), m::random_values(n, 95, 1.0)};
  Streams st;
  const Snapshot ref = run_unit(a, b, nullptr, st, Variant::kSingle, in, rank);
  const sch::Layer dag = sch::strand_layer(c, par);
  const sch::PairTable table = sch::synthetic_pair_table(dag);
  sch::PairCost cost(dag, table);
  const sch::Plan searched = sch::search_plan(cost);
  for (const bool deps : {false, true}) {
    const sch::Layer two = sch::two_link_layer(dag);
    const sch::Layer d = sch::opening_chunked_layer(deps ? sch::dep_ready_layer(two) : two);
    sch::StrandExecutor ex(d, sch::whole_pass_plan(d, searched), st.s);
    const std::string tag = deps ? "opening chunks, dependency-ready" : "opening chunks, chained";
    expect_same(ref, run_unit(a, b, &ex, st, Variant::kStrands, in, rank), c, tag);
    expect_same(ref, run_unit(a, b, &ex, st, Variant::kStrands, in, rank), c, tag + " again");
  }
  a.set_opening_chunks(0), b.set_opening_chunks(0);
}

TEST(StrandsMpi, ThrottledCommunicatorGivesTheSameResult) {
  if (!Env::world_->has_nccl()) GTEST_SKIP() << "an NCCL communicator capped at one CTA: no NCCL in this team";
  const int rank = Env::world_->rank(), tp = Env::world_->size();
  auto slow = m::make_nccl_comm_split(*Env::world_, 1);
  const auto c = shape(false);
  const m::Parallel par{tp, true};
  m::Layer a(c, par, *Env::comm_a_), a1(c, par, *slow);
  const auto w = m::init_weights(c, 61);
  a.load_weights(w), a1.load_weights(w);
  const size_t n = size_t(c.tokens()) * c.hidden;
  const auto x = m::random_values(n, 62, 1.0), dy = m::random_values(n, 63, 1.0);
  const auto r0 = layer_check::run_layer(a, rank, x, dy, Env::world_->stream());
  const auto r1 = layer_check::run_layer(a1, rank, x, dy, Env::world_->stream());
  EXPECT_EQ(r0.y, r1.y);
  EXPECT_EQ(r0.dx, r1.dx);
}

}  // namespace
