// Two GPUs: the layer at TP=2 (sequence parallel; plain TP with all-reduce; MoE with expert
// parallelism) against TP=1 on the same rank and against the float64 reference. Over NCCL; in a shared-GPU
// team (two ranks on one GPU, ctest test_layer_mpi_shared2) over the peer comm (make_default_comm).
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "braid/schedule/strands.hpp"
#include "layer_check.hpp"

namespace {

namespace m = braid::model;
using namespace layer_check;

class Env : public ::testing::Environment {
 public:
  void SetUp() override {
    world_ = std::make_unique<braid::Team>(MPI_COMM_WORLD);
    self_ = world_->split(world_->rank(), 0);
    comm_ = m::make_default_comm(*world_);
    self_comm_ = m::make_default_comm(*self_);
  }
  void TearDown() override {
    self_comm_.reset();
    comm_.reset();
    self_.reset();
    world_.reset();
  }
  static std::unique_ptr<braid::Team> world_, self_;
  static std::unique_ptr<m::Comm> comm_, self_comm_;
};
std::unique_ptr<braid::Team> Env::world_, Env::self_;
std::unique_ptr<m::Comm> Env::comm_, Env::self_comm_;
::testing::Environment* const kEnv = ::testing::AddGlobalTestEnvironment(new Env);

void tp_vs_tp1(bool moe, bool sp) {
  const int tp = Env::world_->size(), rank = Env::world_->rank();
  for (const auto& c : shapes(moe)) {
    SCOPED_TRACE(c.describe() + (sp ? " sp" : " tp-allreduce"));
    const m::Parallel p{tp, sp}, p1{1, true};
    const auto w = m::init_weights(c, 31);
    const size_t n = size_t(c.tokens()) * c.hidden;
    const auto x = m::random_values(n, 32, 1.0), dy = m::random_values(n, 33, 1.0);
    const auto ref = m::reference_layer(c, w, x, dy);
    m::Layer layer(c, p, *Env::comm_);
    layer.load_weights(w);
    const auto got = run_layer(layer, rank, x, dy, Env::world_->stream());
    // TP=1 on this rank's GPU, then this rank's rows and shard of it.
    m::Layer one(c, p1, *Env::self_comm_);
    one.load_weights(w);
    const auto full = run_layer(one, 0, x, dy, Env::self_->stream());
    m::RefResult as_ref;
    as_ref.y = full.y, as_ref.dx = full.dx;
    // TP=1's gradients are the full layout: rebuild it as a "reference" for shard_of.
    as_ref.grad = full.grad;
    if (!moe) {
      expect_close(got, ref, c, p, rank, layer.local_tokens(), kTol, c.name + " tp vs reference");
      expect_close(got, as_ref, c, p, rank, layer.local_tokens(), kTol, c.name + " tp vs tp=1");
      continue;
    }
    // MoE: near-tie tokens may be routed differently by bf16 logits (see layer_check.hpp). Compare
    // with the reference on this layer's own routes (all ranks' tokens), and with TP=1 in full only
    // where both GPU runs routed every token alike.
    const auto local = layer.local_routes();
    std::vector<int> routes(size_t(c.tokens() * c.top_k));
    ASSERT_EQ(local.size() * size_t(tp), routes.size());
    MPI_Allgather(local.data(), int(local.size()), MPI_INT, routes.data(), int(local.size()), MPI_INT,
                  Env::world_->mpi());
    const std::string tag = "[rank " + std::to_string(rank) + "] " + c.name;
    const int differ = expect_routes_near_reference(routes, ref, c, tag + " tp=" + std::to_string(tp));
    print_errors(got, ref, c, p, rank, layer.local_tokens(), c.name + " tp vs float64 routes");
    if (differ > 0) {
      const auto ref_own = m::reference_layer(c, w, x, dy, &routes);
      print_errors(got, ref_own, c, p, rank, layer.local_tokens(), c.name + " tp vs GPU routes");
      expect_close(got, ref_own, c, p, rank, layer.local_tokens(), kTol, c.name + " tp vs reference (GPU routes)");
    } else {
      expect_close(got, ref, c, p, rank, layer.local_tokens(), kTol, c.name + " tp vs reference");
    }
    const auto routes1 = one.local_routes();
    expect_routes_near_reference(routes1, ref, c, tag + " tp=1");
    auto as_sets = [&](std::vector<int> r) {  // the order within a token's k experts does not matter
      for (size_t t = 0; t < r.size(); t += size_t(c.top_k)) std::sort(r.begin() + t, r.begin() + t + c.top_k);
      return r;
    };
    const bool same_routes = as_sets(routes1) == as_sets(routes);
    if (!same_routes) std::printf("%s: tp=%d and tp=1 route some near-tie token differently: y/dx only\n", tag.c_str(), tp);
    expect_close(got, as_ref, c, p, rank, layer.local_tokens(), kTol, c.name + " tp vs tp=1", same_routes);
  }
}

TEST(LayerMpi, DenseSequenceParallelEqualsTp1) { tp_vs_tp1(false, true); }
TEST(LayerMpi, DensePlainTpEqualsTp1) { tp_vs_tp1(false, false); }
TEST(LayerMpi, MoEExpertParallelEqualsTp1) { tp_vs_tp1(true, true); }

// Capacity factor at EP = TP: each rank's local tokens are one capacity group (reference_layer's
// capacity_group), compared on the layer's own routes (all ranks' tokens).
TEST(LayerMpi, MoECapacityEqualsReference) {
  const int tp = Env::world_->size(), rank = Env::world_->rank();
  for (auto c : shapes(true)) {
    c.capacity = 1.0;
    SCOPED_TRACE(c.describe());
    const m::Parallel p{tp, true};
    const auto w = m::init_weights(c, 31);
    const size_t n = size_t(c.tokens()) * c.hidden;
    const auto x = m::random_values(n, 32, 1.0), dy = m::random_values(n, 33, 1.0);
    m::Layer layer(c, p, *Env::comm_);
    layer.load_weights(w);
    const auto got = run_layer(layer, rank, x, dy, Env::world_->stream());
    const auto local = layer.local_routes();
    std::vector<int> routes(size_t(c.tokens() * c.top_k));
    ASSERT_EQ(local.size() * size_t(tp), routes.size());
    MPI_Allgather(local.data(), int(local.size()), MPI_INT, routes.data(), int(local.size()), MPI_INT,
                  Env::world_->mpi());
    const auto ref = m::reference_layer(c, w, x, dy, &routes, layer.local_tokens());
    int64_t dropped = 0;
    for (char k : ref.kept) dropped += !k;
    int64_t mine = layer.moe_drops().dropped, all = 0;  // the layers' own counts, summed over the ranks
    MPI_Allreduce(&mine, &all, 1, MPI_INT64_T, MPI_SUM, Env::world_->mpi());
    EXPECT_EQ(all, dropped);
    std::printf("[rank %d] %s capacity %.2f: %lld of %lld (token, k) dropped\n", rank, c.name.c_str(), c.capacity,
                (long long)dropped, (long long)(c.tokens() * c.top_k));
    print_errors(got, ref, c, p, rank, layer.local_tokens(), c.name + " capacity vs GPU routes");
    expect_close(got, ref, c, p, rank, layer.local_tokens(), kTol, c.name + " capacity");
  }
}

// Dropless with the counts on the device (ModelConfig::moe_device_sizes) at EP = TP: the all-gathered counts, the
// device layout, the device-counted exchange (Comm::all_to_all_rows: the peer comm, or the NCCL comm's own peer
// comm) and the grouped GEMMs — against the float64 reference on the layer's own routes, close to the host-sized
// layer on the same input (the same routes), and forward + backward captured in one CUDA graph on every rank and
// replayed twice with the eager run's bits.
TEST(LayerMpi, MoEDeviceSizesEqualReferenceAndCapture) {
  const int tp = Env::world_->size(), rank = Env::world_->rank();
  for (auto c : shapes(true)) {
    c.moe_device_sizes = true;
    SCOPED_TRACE(c.describe());
    const m::Parallel p{tp, true};
    const auto w = m::init_weights(c, 31);
    const size_t n = size_t(c.tokens()) * c.hidden;
    const auto x = m::random_values(n, 32, 1.0), dy = m::random_values(n, 33, 1.0);
    cudaStream_t s = Env::world_->stream();
    m::Layer layer(c, p, *Env::comm_);
    layer.load_weights(w);
    const auto got = run_layer(layer, rank, x, dy, s);
    EXPECT_EQ(layer.host_wait_us(), 0.0);
    const auto local = layer.local_routes();
    std::vector<int> routes(size_t(c.tokens() * c.top_k));
    ASSERT_EQ(local.size() * size_t(tp), routes.size());
    MPI_Allgather(local.data(), int(local.size()), MPI_INT, routes.data(), int(local.size()), MPI_INT,
                  Env::world_->mpi());
    int64_t rows = 0, all = 0;
    for (auto r : layer.local_expert_rows()) rows += r;
    MPI_Allreduce(&rows, &all, 1, MPI_INT64_T, MPI_SUM, Env::world_->mpi());
    EXPECT_EQ(all, c.tokens() * c.top_k) << "dropless: every (token, k) reaches an expert";
    const auto ref = m::reference_layer(c, w, x, dy, &routes);
    print_errors(got, ref, c, p, rank, layer.local_tokens(), c.name + " device sizes vs GPU routes");
    expect_close(got, ref, c, p, rank, layer.local_tokens(), kTol, c.name + " device sizes");

    auto ch = c;
    ch.moe_device_sizes = false;
    m::Layer host(ch, p, *Env::comm_);
    host.load_weights(w);
    const auto hgot = run_layer(host, rank, x, dy, s);
    EXPECT_EQ(host.local_routes(), local);
    EXPECT_EQ(host.local_expert_rows(), layer.local_expert_rows());
    EXPECT_LT(rel_l2(got.y, hgot.y), kTol) << "device vs host sizes: y";
    EXPECT_LT(rel_l2(got.dx, hgot.dx), kTol) << "device vs host sizes: dx";
    for (const auto& f : m::field_names(c))
      EXPECT_LT(rel_l2(*m::field(got.grad, f), *m::field(hgot.grad, f)), kTol) << "device vs host sizes: d" << f;

    expect_graph_replays_bitwise(layer, s, got, [&] { Env::world_->synchronize(s, "device-sizes replay"); });
  }
}

// Chunked pairs compute the same layer, against the float64 reference with the plain layer's tolerance, forward and
// backward: the intra-batch decomposition (every AG -> GEMM and GEMM -> RS pair chunked, on two streams; opening =
// false) or only the pairs that open each pass, split across their operators (set_opening_chunks; opening = true: also
// op by op). Each needs sequence parallelism, and one excludes the other.
void chunked_pairs_equal_reference(bool opening) {
  const int tp = Env::world_->size(), rank = Env::world_->rank();
  auto set = [&](m::Layer& l, int k) { opening ? l.set_opening_chunks(k) : l.set_decomposition(k); };
  auto get = [&](const m::Layer& l) { return opening ? l.opening_chunks() : l.decomposition(); };
  for (const auto& c : shapes(false)) {
    const m::Parallel p{tp, true};
    const auto w = m::init_weights(c, opening ? 44 : 41);
    const size_t n = size_t(c.tokens()) * c.hidden;
    const auto x = m::random_values(n, opening ? 45 : 42, 1.0), dy = m::random_values(n, opening ? 46 : 43, 1.0);
    const auto ref = m::reference_layer(c, w, x, dy);
    m::Layer layer(c, p, *Env::comm_);
    layer.load_weights(w);
    for (int chunks : {2, 4}) {
      if (layer.local_tokens() % chunks != 0) continue;
      SCOPED_TRACE(c.describe() + (opening ? " opening chunks " : " decomposition ") + std::to_string(chunks));
      set(layer, chunks);
      EXPECT_EQ(get(layer), chunks);
      if (opening) EXPECT_THROW(layer.set_decomposition(2), braid::Error);  // one or the other
      else EXPECT_THROW(layer.set_opening_chunks(2), braid::Error);
      for (const bool op_by_op : {false, true}) {
        if (op_by_op && !opening) continue;
        const auto got = run_layer(layer, rank, x, dy, Env::world_->stream(), op_by_op);
        expect_close(got, ref, c, p, rank, layer.local_tokens(), kTol,
                     c.name + (opening ? " opening chunks" : " decomposed") + (op_by_op ? ", op by op," : "") +
                         " vs reference");
      }
    }
    set(layer, 0);
    EXPECT_EQ(get(layer), 0);
  }
  const auto c = shapes(false).front();
  m::Layer plain(c, m::Parallel{tp, false}, *Env::comm_);
  if (tp > 1) EXPECT_THROW(set(plain, 2), braid::Error);  // needs sequence parallelism
}
TEST(LayerMpi, DenseDecompositionEqualsReference) { chunked_pairs_equal_reference(false); }
TEST(LayerMpi, DenseOpeningChunksEqualReference) { chunked_pairs_equal_reference(true); }

// The dense SP layer at TP = 2 over NCCL's copy engines (make_nccl_ce_comm): gathered tensors and reduce-scatter
// partial sums in the comm's windows, the transfers in place, the sums in the consumers. Against the float64
// reference, twice in a row (the windows reused), op by op, against the NCCL layer bit for bit up to the
// reduce-scatter's rounding, with a second layer sharing its scratch (a comm of its own), and with decomposition
// (the chunks on NCCL's kernels).
TEST(LayerMpi, DenseCopyEngineCommEqualsReference) {
  auto& team = *Env::world_;
  if (!team.has_nccl() || team.shared_gpu() || team.size() != 2 || !team.peer_ok())
    GTEST_SKIP() << "nccl-ce needs NCCL and two GPUs of one node with peer access";
  std::unique_ptr<m::Comm> ce, ce_b;
  try {
    ce = m::make_nccl_ce_comm(team);
    ce_b = m::make_nccl_ce_comm(team);
  } catch (const braid::UnavailableError& e) {
    GTEST_SKIP() << e.what();
  }
  const int rank = team.rank();
  for (const auto& c : shapes(false)) {
    SCOPED_TRACE(c.describe() + " nccl-ce");
    const m::Parallel p{2, true};
    const auto w = m::init_weights(c, 51);
    const size_t n = size_t(c.tokens()) * c.hidden;
    const auto x = m::random_values(n, 52, 1.0), dy = m::random_values(n, 53, 1.0);
    const auto ref = m::reference_layer(c, w, x, dy);
    m::Layer layer(c, p, *ce);
    ASSERT_TRUE(layer.copy_engine_collectives());
    layer.load_weights(w);
    for (int run = 0; run < 2; ++run) {
      const auto got = run_layer(layer, rank, x, dy, team.stream(), run == 1);
      expect_close(got, ref, c, p, rank, layer.local_tokens(), kTol, c.name + " nccl-ce vs reference");
    }
    m::Layer nccl_layer(c, p, *Env::comm_);
    EXPECT_FALSE(nccl_layer.copy_engine_collectives());
    nccl_layer.load_weights(w);
    const auto a = run_layer(layer, rank, x, dy, team.stream());
    const auto b = run_layer(nccl_layer, rank, x, dy, team.stream());
    EXPECT_EQ(a.y, b.y) << "nccl-ce and NCCL layers differ in y";  // the same sums, rounded once, either order
    EXPECT_EQ(a.dx, b.dx) << "nccl-ce and NCCL layers differ in dx";
    // The sharer's comm has the owner's scratch windows registered too (Comm::register_window), so its collectives
    // stay on the copy engines; its backward's dy goes into the shared dyf without touching the owner's dy (a89b5bd
    // made dy a slot of dyf: a sharer's backward overwrote the owner's input); with share_interfaces too.
    m::Layer shared(layer, *ce_b, m::Layer::Share::kWeightsAndScratch);
    EXPECT_TRUE(shared.copy_engine_collectives());
    const auto s2 = run_layer(shared, rank, x, dy, team.stream());
    EXPECT_EQ(s2.y, a.y);
    EXPECT_EQ(s2.dx, a.dx);
    {  // the owner's dy survives the sharer's backward: owner forward, sharer forward + backward, owner backward
      const auto dy2 = m::random_values(n, 54, 1.0);
      const size_t rows = size_t(layer.local_tokens()), H = size_t(c.hidden), first = size_t(rank) * rows * H;
      const auto xb = to_bits(x, first, rows * H), dyb = to_bits(dy, first, rows * H), dy2b = to_bits(dy2, first, rows * H);
      cudaStream_t st = team.stream();
      ASSERT_EQ(cudaMemcpy(layer.x(), xb.data(), xb.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(layer.dy(), dyb.data(), dyb.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(shared.x(), xb.data(), xb.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(shared.dy(), dy2b.data(), dy2b.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
      layer.forward(st);
      shared.forward(st);
      shared.backward(st);
      layer.backward(st);
      team.synchronize(st, "owner's dy after the sharer's backward");
      EXPECT_EQ(from_device(layer.dx(), rows * H), a.dx) << "the owner's backward after a sharer's";
    }
    {
      m::Layer io(layer, *ce_b, m::Layer::Share::kWeightsAndScratch);
      io.share_interfaces(layer);
      EXPECT_EQ(io.dy(), layer.dy());
      const auto s3 = run_layer(io, rank, x, dy, team.stream());
      EXPECT_EQ(s3.y, a.y);
      EXPECT_EQ(s3.dx, a.dx);
      for (const auto& f : m::field_names(c))
        EXPECT_EQ(*m::field(s3.grad, f), *m::field(a.grad, f)) << "gradient " << f << " of a layer sharing scratch "
                                                                   "and interfaces over a second nccl-ce comm";
    }
    if (layer.local_tokens() % 2 == 0) {
      layer.set_decomposition(2);
      const auto got = run_layer(layer, rank, x, dy, team.stream());
      expect_close(got, ref, c, p, rank, layer.local_tokens(), kTol, c.name + " nccl-ce decomposed vs reference");
      layer.set_decomposition(0);
    }
  }
  // A comm that is not nccl-ce cannot share scratch with a copy-engine layer (the buffers differ in size).
  const auto c = shapes(false).front();
  m::Layer owner(c, m::Parallel{2, true}, *ce);
  EXPECT_THROW(m::Layer(owner, *Env::comm_, m::Layer::Share::kWeightsAndScratch), braid::Error);
}

// A layer whose saved set is placed back to back (256-byte aligned) in a pool of its own, filled with `fill`, for the
// placement contract tests below; and the comms they cover: the team's, and nccl-ce where it runs.
// window: the pool is a window of the comm (Comm::alloc_window, as schedule::PlacedMemory makes it for copy-engine
// layers): h1f / h2f gathered in place there, their norms the first writers (saved_tensors' in_place_gathers).
struct PlacedLayer {
  m::Comm& comm;
  m::Layer layer;
  std::vector<std::pair<std::string, size_t>> layout, offsets;
  void* pool = nullptr;
  size_t bytes = 0;
  bool window = false;
  PlacedLayer(const m::ModelConfig& c, const m::Parallel& p, m::Comm& cm, uint64_t seed, int fill, bool in_window)
      : comm(cm), layer(c, p, cm), layout(layer.saved_layout()), window(in_window) {
    layer.load_weights(m::init_weights(c, seed));
    for (const auto& [name, sz] : layout) offsets.push_back({name, bytes}), bytes += (sz + 255) / 256 * 256;
    if (window) {
      pool = comm.alloc_window(bytes);
      EXPECT_NE(pool, nullptr);
    } else {
      EXPECT_EQ(cudaMalloc(&pool, bytes), cudaSuccess);
    }
    EXPECT_EQ(cudaMemset(pool, fill, bytes), cudaSuccess);
    layer.place_saved(pool, offsets);
  }
  ~PlacedLayer() {
    cudaDeviceSynchronize();
    if (window) comm.free_window(pool);  // (collective: every rank's tests run alike)
    else cudaFree(pool);
  }
  std::pair<size_t, size_t> where(const std::string& name) const {  // (offset, bytes) of a saved tensor
    for (size_t k = 0; k < layout.size(); ++k)
      if (layout[k].first == name) return {offsets[k].second, layout[k].second};
    ADD_FAILURE() << "no saved tensor " << name;
    return {0, 0};
  }
};

std::vector<m::Comm*> placed_test_comms(braid::Team& team, std::unique_ptr<m::Comm>& ce) {
  if (team.has_nccl() && !team.shared_gpu() && team.size() == 2 && team.peer_ok()) {
    try {
      ce = m::make_nccl_ce_comm(team);
    } catch (const braid::UnavailableError&) {
    }
  }
  std::vector<m::Comm*> v = {Env::comm_.get()};
  if (ce) v.push_back(ce.get());
  return v;
}

// Calls fn(placed layer, config, parallel) for the dense and the MoE shape over every comm (MoE not over nccl-ce, a
// dense-layer comm), each placed in a pool of its own filled with `fill`; weights from `seed`. nccl-ce twice: the
// pool plain device memory (h1 / h2 detached, those gathers on NCCL's kernels) and a window of the comm.
void for_each_placed_case(braid::Team& team, uint64_t seed, int fill,
                          const std::function<void(PlacedLayer&, const m::ModelConfig&, const m::Parallel&)>& fn) {
  std::unique_ptr<m::Comm> ce;
  for (m::Comm* comm : placed_test_comms(team, ce)) {
    for (const bool window : {false, true}) {
      if (window && comm != ce.get()) continue;
      for (const bool moe : {false, true}) {
        if (moe && comm == ce.get()) continue;
        const auto c = shapes(moe).front();
        const m::Parallel p{team.size(), true};
        SCOPED_TRACE(c.describe() + " over " + comm->name() + (window ? " in a window" : ""));
        PlacedLayer pl(c, p, *comm, seed, fill, window);
        fn(pl, c, p);
        team.synchronize(team.stream(), "placed-saved test");
      }
    }
  }
}

// The index of operator "f.<op>" / "b.<op>" (schedule::saved_tensors' names) in the layer's `ph` list.
int op_index(const m::Layer& layer, m::Phase ph, const std::string& name) {
  const auto& ops = layer.ops(ph);
  const std::string prefix = ph == m::Phase::kForward ? "f." : "b.";
  for (size_t i = 0; i < ops.size(); ++i)
    if (prefix + ops[i].name == name) return int(i);
  ADD_FAILURE() << "no operator " << name;
  return -1;
}

// The contract a one-activation-pool arena relies on (schedule::saved_tensors, two_strand_placement): once
// placed, a saved tensor's bytes are first written by its producer op. Each rank places the layer's saved set in
// a pool filled with a sentinel and runs the forward op by op; after each op, every tensor whose producer has not
// run yet must still hold the sentinel (another strand's tensor may live there until the producer's memory
// wait). Over the team's comm and, where it runs, nccl-ce (rank 0's h1 / h2 window slots begin where the windows
// do: place_saved once moved them into the pool with h1f / h2f, and the norms wrote there early).
TEST(LayerMpi, PlacedSavedTensorsAreFirstWrittenByTheirProducers) {
  auto& team = *Env::world_;
  const int rank = team.rank();
  cudaStream_t s = team.stream();
  for_each_placed_case(team, 61, 0x5A, [&](PlacedLayer& pl, const m::ModelConfig& c, const m::Parallel& p) {
    m::Layer& layer = pl.layer;
    const size_t n = size_t(c.tokens()) * c.hidden, rows = size_t(layer.local_tokens());
    const auto xb = to_bits(m::random_values(n, 62, 1.0), (rows == size_t(c.tokens()) ? 0 : rank * rows) * c.hidden,
                            rows * c.hidden);
    ASSERT_EQ(cudaMemcpy(layer.x(), xb.data(), xb.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
    const auto saved = braid::schedule::saved_tensors(c, p, pl.window);
    const auto& ops = layer.ops(m::Phase::kForward);
    std::vector<uint8_t> host(pl.bytes);
    for (size_t i = 0; i < ops.size(); ++i) {
      layer.run_op(m::Phase::kForward, i, s);
      ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(host.data(), pl.pool, pl.bytes, cudaMemcpyDeviceToHost), cudaSuccess);
      for (const auto& t : saved) {
        if (op_index(layer, m::Phase::kForward, t.producer) <= int(i)) continue;
        const auto [off, sz] = pl.where(t.name);
        const size_t touched = size_t(std::count_if(host.begin() + long(off), host.begin() + long(off + sz),
                                                    [](uint8_t v) { return v != 0x5A; }));
        EXPECT_EQ(touched, 0u) << "rank " << rank << ": op " << ops[i].name << " wrote " << touched
                               << " bytes of saved tensor " << t.name << " before its producer " << t.producer;
      }
    }
  });
}

// The other half of that contract: no backward operator reads a saved tensor after the readers schedule::saved_tensors
// names for it (last_reader and other_readers) — an issue order may let the other strand's forward overwrite it from
// then on. Each rank runs forward + backward once for reference, then again per saved tensor with the tensor's bytes
// overwritten (0xFF: bf16 NaN) right after the last of its named readers in the backward; dx and every gradient must
// come out bit for bit the same. Same comms as above.
TEST(LayerMpi, PlacedSavedTensorsAreNotReadAfterTheirNamedReaders) {
  auto& team = *Env::world_;
  const int rank = team.rank();
  cudaStream_t s = team.stream();
  for_each_placed_case(team, 71, 0, [&](PlacedLayer& pl, const m::ModelConfig& c, const m::Parallel& p) {
    m::Layer& layer = pl.layer;
    const size_t n = size_t(c.tokens()) * c.hidden;
    const auto x = m::random_values(n, 72, 1.0), dy = m::random_values(n, 73, 1.0);
    const auto ref = run_layer(layer, rank, x, dy, s, /*op_by_op=*/true);
    const auto& bwd = layer.ops(m::Phase::kBackward);
    for (const auto& t : braid::schedule::saved_tensors(c, p, pl.window)) {
      int last = op_index(layer, m::Phase::kBackward, t.last_reader);
      for (const auto& r : t.other_readers) last = std::max(last, op_index(layer, m::Phase::kBackward, r));
      const auto [off, sz] = pl.where(t.name);
      ASSERT_GT(sz, 0u) << t.name;
      // run_layer's uploads, then forward and backward op by op with the overwrite after `last`
      const size_t rows = size_t(layer.local_tokens()), H = size_t(c.hidden);
      const size_t first = (rows == size_t(c.tokens()) ? 0 : size_t(rank) * rows) * H;
      const auto xb = to_bits(x, first, rows * H), dyb = to_bits(dy, first, rows * H);
      ASSERT_EQ(cudaMemcpy(layer.x(), xb.data(), xb.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(layer.dy(), dyb.data(), dyb.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
      for (size_t i = 0; i < layer.ops(m::Phase::kForward).size(); ++i) layer.run_op(m::Phase::kForward, i, s);
      for (size_t i = 0; i < bwd.size(); ++i) {
        layer.run_op(m::Phase::kBackward, i, s);
        if (int(i) == last) ASSERT_EQ(cudaMemsetAsync(static_cast<char*>(pl.pool) + off, 0xFF, sz, s), cudaSuccess);
      }
      ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
      EXPECT_EQ(from_device(layer.dx(), rows * H), ref.dx)
          << "rank " << rank << ": dx changed with " << t.name << " overwritten after " << t.last_reader;
      const auto g = layer.download_grads();
      for (const auto& f : m::field_names(c))
        EXPECT_EQ(*m::field(g, f), *m::field(ref.grad, f))
            << "rank " << rank << ": gradient " << f << " changed with " << t.name << " overwritten after its readers";
    }
  });
}

// Parallel::replicated_grads_per_step: the backward keeps this rank's partial sums of the replicated gradients (no
// ar_replicated_grads operator) and reduce_replicated_grads all-reduces them once. One backward: the same bits as the
// per-backward layer (the same all-reduce of the same partial sums). Two accumulated backwards, reduced once: every
// sharded gradient, y and dx bit for bit; the replicated ones (norms, router: fp32) equal up to the order of the
// fp32 additions ((a0 + a1) + (b0 + b1) against (a0 + b0) + (a1 + b1)). Dense and MoE (capacity: static routes).
TEST(LayerMpi, ReplicatedGradsPerStepEqualPerBackward) {
  const int tp = Env::world_->size(), rank = Env::world_->rank();
  if (tp < 2) GTEST_SKIP() << "sequence parallelism needs two ranks";
  cudaStream_t s = Env::world_->stream();
  for (const bool moe : {false, true}) {
    auto c = shapes(moe)[1];
    if (moe) c.capacity = 2.0;
    SCOPED_TRACE(c.describe());
    const m::Parallel per_backward{tp, true};
    m::Parallel per_step = per_backward;
    per_step.replicated_grads_per_step = true;
    auto comm_ops = [&](const m::Parallel& p) {
      int n = 0;
      for (const auto& op : m::plan_ops(c, p, m::Phase::kBackward)) n += op.kind == m::OpKind::kComm;
      return n;
    };
    EXPECT_EQ(comm_ops(per_step), comm_ops(per_backward) - 1);
    const auto w = m::init_weights(c, 61);
    const size_t n = size_t(c.tokens()) * c.hidden;
    const auto x0 = m::random_values(n, 62, 1.0), dy0 = m::random_values(n, 63, 1.0);
    const auto x1 = m::random_values(n, 64, 1.0), dy1 = m::random_values(n, 65, 1.0);
    const std::vector<std::string> replicated = moe ? std::vector<std::string>{"norm1", "norm2", "router"}
                                                    : std::vector<std::string>{"norm1", "norm2"};
    auto is_replicated = [&](const std::string& f) {
      return std::find(replicated.begin(), replicated.end(), f) != replicated.end();
    };
    for (const bool accumulate : {false, true}) {
      m::Layer a(c, per_backward, *Env::comm_), b(c, per_step, *Env::comm_);
      EXPECT_EQ(b.ops(m::Phase::kBackward).size() + 1, a.ops(m::Phase::kBackward).size());
      for (m::Layer* l : {&a, &b}) {
        l->load_weights(w);
        l->set_accumulate_grads(accumulate);
        l->zero_grads(s);
      }
      Outputs ga, gb;
      for (int mb = 0; mb < (accumulate ? 2 : 1); ++mb) {
        ga = run_layer(a, rank, mb ? x1 : x0, mb ? dy1 : dy0, s);
        gb = run_layer(b, rank, mb ? x1 : x0, mb ? dy1 : dy0, s);
        EXPECT_EQ(ga.y, gb.y) << "micro-batch " << mb;
        EXPECT_EQ(ga.dx, gb.dx) << "micro-batch " << mb;
      }
      a.reduce_replicated_grads(s);  // (nothing to do: reduced by every backward)
      b.reduce_replicated_grads(s);
      ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
      ga.grad = a.download_grads(), gb.grad = b.download_grads();
      for (const auto& f : m::field_names(c)) {
        const auto &u = *m::field(ga.grad, f), &v = *m::field(gb.grad, f);
        ASSERT_EQ(u.size(), v.size()) << f;
        if (!accumulate || !is_replicated(f)) {
          EXPECT_EQ(u, v) << "rank " << rank << ": d" << f << (accumulate ? " (accumulated)" : "");
          continue;
        }
        double worst = 0, norm = 0;
        for (size_t i = 0; i < u.size(); ++i) worst = std::max(worst, std::abs(u[i] - v[i])), norm = std::max(norm, std::abs(u[i]));
        EXPECT_GT(norm, 0.0) << f;
        EXPECT_LE(worst, 1e-5 * norm) << "rank " << rank << ": d" << f << " accumulated over two micro-batches";
      }
    }
  }
}

TEST(LayerMpi, AllReducerCommForInference) {
  // Plain TP forward with the all-reduce through braid::AllReducer (exact algorithms).
  if (!Env::world_->has_nccl()) GTEST_SKIP() << "the AllReducer comm sends the rest over NCCL: none in this team";
  const auto c = shapes(false)[1];
  const int tp = Env::world_->size(), rank = Env::world_->rank();
  auto comm = m::make_allreducer_comm(*Env::world_);
  const m::Parallel p{tp, false};
  const auto w = m::init_weights(c, 41);
  const size_t n = size_t(c.tokens()) * c.hidden;
  const auto x = m::random_values(n, 42, 1.0), dy = m::random_values(n, 43, 1.0);
  const auto ref = m::reference_layer(c, w, x, dy);
  m::Layer layer(c, p, *comm);
  layer.load_weights(w);
  const auto got = run_layer(layer, rank, x, dy, Env::world_->stream());
  expect_close(got, ref, c, p, rank, layer.local_tokens(), kTol, "allreducer comm");
}

}  // namespace
