// One GPU: the layer at TP=1 (dense and MoE) against the float64 CPU reference (forward, input and
// weight gradients), op-by-op execution on another stream equal to forward()/backward() bit for bit;
// attention alone: cuDNN fused attention and braid's kernels against a float64 CPU attention (packed
// qkv layout, causal, GQA 8/4, d 128, seq 100 and 256), deterministic, and replayable from a CUDA graph.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "layer_check.hpp"
#include "capture.hpp"
#include "model/attention.hpp"  // src/model (internal)
#include "model/kernels.cuh"
#include "model/moe_layout.hpp"

namespace {

namespace m = braid::model;
using namespace layer_check;

class Env : public ::testing::Environment {
 public:
  void SetUp() override {
    team_ = std::make_unique<braid::Team>(MPI_COMM_SELF);
    comm_ = m::make_nccl_comm(*team_);
  }
  void TearDown() override {
    comm_.reset();
    team_.reset();
  }
  static std::unique_ptr<braid::Team> team_;
  static std::unique_ptr<m::Comm> comm_;
};
std::unique_ptr<braid::Team> Env::team_;
std::unique_ptr<m::Comm> Env::comm_;
::testing::Environment* const kEnv = ::testing::AddGlobalTestEnvironment(new Env);

void check_against_reference(bool moe) {
  for (const auto& c : shapes(moe)) {
    SCOPED_TRACE(c.describe());
    const m::Parallel p{1, true};
    m::Layer layer(c, p, *Env::comm_);
    const auto w = m::init_weights(c, 21);
    layer.load_weights(w);
    const size_t n = size_t(c.tokens()) * c.hidden;
    const auto x = m::random_values(n, 22, 1.0), dy = m::random_values(n, 23, 1.0);
    const auto ref = m::reference_layer(c, w, x, dy);
    const auto got = run_layer(layer, 0, x, dy, Env::team_->stream());
    if (moe) {
      const auto rows = layer.local_expert_rows();
      int64_t total = 0;
      for (auto r : rows) total += r;
      EXPECT_EQ(total, c.tokens() * c.top_k) << "dropless: every (token, k) reaches an expert";
      // Near-tie tokens may be routed differently by bf16 logits: compare with the reference on the
      // GPU's routes (see layer_check.hpp), and log the errors against both references.
      const auto routes = layer.local_routes();
      const int differ = expect_routes_near_reference(routes, ref, c, c.name);
      print_errors(got, ref, c, p, 0, layer.local_tokens(), c.name + " vs float64 routes");
      if (differ > 0) {
        const auto ref_gpu_routes = m::reference_layer(c, w, x, dy, &routes);
        print_errors(got, ref_gpu_routes, c, p, 0, layer.local_tokens(), c.name + " vs GPU routes");
        expect_close(got, ref_gpu_routes, c, p, 0, layer.local_tokens(), kTol, c.name + " (GPU routes)");
      } else {
        expect_close(got, ref, c, p, 0, layer.local_tokens(), kTol, c.name);
      }
    } else {
      expect_close(got, ref, c, p, 0, layer.local_tokens(), kTol, c.name);
    }
    // Op by op on another stream: the same bits.
    cudaStream_t s2;
    ASSERT_EQ(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking), cudaSuccess);
    const auto again = run_layer(layer, 0, x, dy, s2, /*op_by_op=*/true);
    cudaStreamDestroy(s2);
    EXPECT_EQ(again.y, got.y);
    EXPECT_EQ(again.dx, got.dx);
    EXPECT_EQ(again.grad.wq, got.grad.wq);
  }
}

TEST(LayerGpu, DenseMatchesReference) { check_against_reference(false); }

// MoE with a capacity factor (ModelConfig::capacity): against the reference with the same drop rule (on the
// GPU's routes), and the whole forward + backward captured in one CUDA graph — no host wait — and replayed
// twice: the same bits as the eager run.
TEST(LayerGpu, MoECapacityMatchesReferenceAndCaptures) {
  int64_t dropped_total = 0;
  for (auto c : shapes(true)) {
    c.capacity = 1.0;
    SCOPED_TRACE(c.describe());
    const m::Parallel p{1, true};
    m::Layer layer(c, p, *Env::comm_);
    const auto w = m::init_weights(c, 21);
    layer.load_weights(w);
    const size_t n = size_t(c.tokens()) * c.hidden;
    const auto x = m::random_values(n, 22, 1.0), dy = m::random_values(n, 23, 1.0);
    cudaStream_t s = Env::team_->stream();
    const auto got = run_layer(layer, 0, x, dy, s);
    const auto routes = layer.local_routes();
    const auto ref = m::reference_layer(c, w, x, dy, &routes, c.tokens());
    int64_t dropped = 0;
    for (char k : ref.kept) dropped += !k;
    dropped_total += dropped;
    const auto drops = layer.moe_drops();  // the layer's own count, from its forward's per-expert counts
    EXPECT_EQ(drops.routed, c.tokens() * c.top_k);
    EXPECT_EQ(drops.dropped, dropped);
    const auto rows = layer.local_expert_rows();
    for (auto r : rows) EXPECT_EQ(r, c.expert_capacity(c.tokens()));  // static: every expert at capacity
    std::printf("%s capacity %.2f: %lld of %lld (token, k) dropped, %lld rows per expert\n", c.name.c_str(),
                c.capacity, (long long)dropped, (long long)(c.tokens() * c.top_k),
                (long long)c.expert_capacity(c.tokens()));
    print_errors(got, ref, c, p, 0, layer.local_tokens(), c.name + " capacity vs GPU routes");
    expect_close(got, ref, c, p, 0, layer.local_tokens(), kTol, c.name + " capacity");

    expect_graph_replays_bitwise(layer, s, got, [&] { ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess); });
  }
  EXPECT_GT(dropped_total, 0) << "the test shapes should exceed capacity 1.0 somewhere";
}
TEST(LayerGpu, MoEMatchesReference) { check_against_reference(true); }

// Dropless MoE with its counts on the device (ModelConfig::moe_device_sizes: device layout, grouped GEMMs with
// device problem sizes, the device-counted exchange): against the float64 reference on the GPU's routes, close to
// the host-sized layer (other GEMM kernels: not the same bits), and the whole forward + backward captured in one
// CUDA graph — dropless and no host wait — replayed twice with the eager run's bits.
TEST(LayerGpu, MoEDeviceSizesMatchReferenceAndCapture) {
  for (auto c : shapes(true)) {
    c.moe_device_sizes = true;
    SCOPED_TRACE(c.describe());
    const m::Parallel p{1, true};
    m::Layer layer(c, p, *Env::comm_);
    const auto w = m::init_weights(c, 21);
    layer.load_weights(w);
    const size_t n = size_t(c.tokens()) * c.hidden;
    const auto x = m::random_values(n, 22, 1.0), dy = m::random_values(n, 23, 1.0);
    cudaStream_t s = Env::team_->stream();
    const auto got = run_layer(layer, 0, x, dy, s);
    EXPECT_EQ(layer.host_wait_us(), 0.0) << "counts on the device: the host never waits";
    const auto rows = layer.local_expert_rows();
    int64_t total = 0;
    for (auto r : rows) total += r;
    EXPECT_EQ(total, c.tokens() * c.top_k) << "dropless: every (token, k) reaches an expert";
    const auto routes = layer.local_routes();
    const auto ref = m::reference_layer(c, w, x, dy, &routes);
    print_errors(got, ref, c, p, 0, layer.local_tokens(), c.name + " device sizes vs GPU routes");
    expect_close(got, ref, c, p, 0, layer.local_tokens(), kTol, c.name + " device sizes");

    // The host-sized layer on the same input: the same routes, close outputs.
    auto ch = c;
    ch.moe_device_sizes = false;
    m::Layer host(ch, p, *Env::comm_);
    host.load_weights(w);
    const auto hgot = run_layer(host, 0, x, dy, s);
    EXPECT_EQ(host.local_routes(), routes);
    EXPECT_EQ(host.local_expert_rows(), rows);
    EXPECT_LT(rel_l2(got.y, hgot.y), kTol) << "device vs host sizes: y";
    EXPECT_LT(rel_l2(got.dx, hgot.dx), kTol) << "device vs host sizes: dx";
    for (const auto& f : m::field_names(c))
      EXPECT_LT(rel_l2(*m::field(got.grad, f), *m::field(hgot.grad, f)), kTol) << "device vs host sizes: d" << f;

    expect_graph_replays_bitwise(layer, s, got, [&] { ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess); });
  }
}

// The device layout (kernels::moe_device_layout) against the host's row maps (moe_row_maps) on random counts: every
// rank's view for tp 1..4, local experts 1..8, empty (source, expert) blocks included.
TEST(LayerGpu, DeviceLayoutEqualsHostMaps) {
  uint64_t seed = 7;
  auto rnd = [&] { return (seed = seed * 6364136223846793005ull + 1442695040888963407ull) >> 33; };
  for (int tp = 1; tp <= 4; ++tp)
    for (int El : {1, 3, 8}) {
      const int E = tp * El;
      std::vector<float> all(static_cast<size_t>(tp) * E);
      for (auto& v : all) v = float(rnd() % 4 == 0 ? 0 : rnd() % 37);
      int64_t Rmax = 0;
      for (float v : all) Rmax += int64_t(v);
      float* d_all = nullptr;
      int *d_layout = nullptr, *d_smap = nullptr, *d_umap = nullptr;
      const int64_t ints = m::kernels::moe_layout_ints(tp, El);
      ASSERT_EQ(cudaMalloc(&d_all, all.size() * 4), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&d_layout, ints * 4), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&d_smap, (Rmax + 1) * 4), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&d_umap, (Rmax + 1) * 4), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(d_all, all.data(), all.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
      for (int me = 0; me < tp; ++me) {
        SCOPED_TRACE("tp " + std::to_string(tp) + " El " + std::to_string(El) + " rank " + std::to_string(me));
        m::kernels::moe_device_layout(d_all, tp, me, El, d_layout, d_smap, d_umap, Rmax, nullptr);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        std::vector<int> layout(static_cast<size_t>(ints), 0);
        ASSERT_EQ(cudaMemcpy(layout.data(), d_layout, ints * 4, cudaMemcpyDeviceToHost), cudaSuccess);
        std::vector<float> rc(static_cast<size_t>(tp) * El);  // rcounts[src * El + e]
        for (int src = 0; src < tp; ++src)
          for (int e = 0; e < El; ++e) rc[size_t(src) * El + e] = all[size_t(src) * E + size_t(me) * El + e];
        std::vector<int> smap(static_cast<size_t>(Rmax) + 1), umap(static_cast<size_t>(Rmax) + 1);
        std::vector<int64_t> erows(static_cast<size_t>(El));
        const int64_t R = m::detail::moe_row_maps(tp, El, rc.data(), smap.data(), umap.data(), erows.data());
        EXPECT_EQ(layout[size_t(tp) * tp + El], R);
        for (int e = 0; e < El; ++e) EXPECT_EQ(layout[size_t(tp) * tp + e], erows[e]) << "expert " << e;
        for (int src = 0; src < tp; ++src)
          for (int dst = 0; dst < tp; ++dst) {
            int rows = 0;
            for (int e = 0; e < El; ++e) rows += int(all[size_t(src) * E + size_t(dst) * El + e]);
            EXPECT_EQ(layout[size_t(src) * tp + dst], rows) << src << " -> " << dst;
          }
        std::vector<int> gs(static_cast<size_t>(R)), gu(static_cast<size_t>(R));
        if (R > 0) {
          ASSERT_EQ(cudaMemcpy(gs.data(), d_smap, R * 4, cudaMemcpyDeviceToHost), cudaSuccess);
          ASSERT_EQ(cudaMemcpy(gu.data(), d_umap, R * 4, cudaMemcpyDeviceToHost), cudaSuccess);
        }
        EXPECT_TRUE(std::equal(gs.begin(), gs.end(), smap.begin())) << "sort map";
        EXPECT_TRUE(std::equal(gu.begin(), gu.end(), umap.begin())) << "unsort map";
      }
      cudaFree(d_all), cudaFree(d_layout), cudaFree(d_smap), cudaFree(d_umap);
    }
}

TEST(LayerGpu, OperatorViewMatchesPlan) {
  const auto c = m::preset("tiny");
  m::Layer layer(c, {1, true}, *Env::comm_);
  const auto plan = m::plan_ops(c, {1, true}, m::Phase::kForward);
  ASSERT_EQ(layer.ops(m::Phase::kForward).size(), plan.size());
  for (size_t i = 0; i < plan.size(); ++i) EXPECT_EQ(layer.ops(m::Phase::kForward)[i].name, plan[i].name);
  EXPECT_THROW(layer.run_op(m::Phase::kForward, plan.size(), nullptr), braid::UsageError);
}

// ---- attention alone ------------------------------------------------------------------------------

namespace k = m::kernels;

// float64 causal GQA attention on the packed layout of kernels::AttnShape (inputs already bf16 values):
// o [B·S, ldo], lse [B, hq, S] (natural log), dqkv [B·S, ld] (zero outside the q/k/v columns).
struct AttnRef {
  std::vector<double> o, lse, dqkv;
};
AttnRef attention_reference(const std::vector<double>& qkv, const std::vector<double>& dout, const k::AttnShape& a) {
  const int64_t S = a.S, d = a.d, group = a.hq / a.hkv;
  AttnRef r;
  r.o.assign(size_t(a.B) * S * a.ldo, 0.0);
  r.lse.assign(size_t(a.B) * a.hq * S, 0.0);
  r.dqkv.assign(size_t(a.B) * S * a.ld, 0.0);
  std::vector<double> p(S), dp(S);
  for (int b = 0; b < a.B; ++b)
    for (int h = 0; h < a.hq; ++h) {
      const int g = h / int(group);
      auto row = [&](int64_t s) { return (int64_t(b) * S + s) * a.ld; };
      auto orow = [&](int64_t s) { return (int64_t(b) * S + s) * a.ldo; };
      const int64_t qc = a.q_off + h * d, kc = a.k_off + g * d, vc = a.v_off + g * d, oc = int64_t(h) * d;
      for (int64_t i = 0; i < S; ++i) {
        double mx = -INFINITY;
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t c = 0; c < d; ++c) dot += qkv[row(i) + qc + c] * qkv[row(j) + kc + c];
          p[j] = dot * a.scale;
          mx = std::max(mx, p[j]);
        }
        double l = 0;
        for (int64_t j = 0; j <= i; ++j) l += (p[j] = std::exp(p[j] - mx));
        for (int64_t j = 0; j <= i; ++j) p[j] /= l;
        r.lse[(size_t(b) * a.hq + h) * S + i] = mx + std::log(l);
        for (int64_t c = 0; c < d; ++c) {
          double acc = 0;
          for (int64_t j = 0; j <= i; ++j) acc += p[j] * qkv[row(j) + vc + c];
          r.o[orow(i) + oc + c] = acc;
        }
        // backward of row i: dP = dO·Vᵀ, dS = P ∘ (dP − rowsum(dO ∘ O)), dQ = scale·dS·K, dK += scale·dSᵀ·Q, dV += Pᵀ·dO
        double delta = 0;
        for (int64_t c = 0; c < d; ++c) delta += dout[orow(i) + oc + c] * r.o[orow(i) + oc + c];
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t c = 0; c < d; ++c) dot += dout[orow(i) + oc + c] * qkv[row(j) + vc + c];
          dp[j] = p[j] * (dot - delta);
        }
        for (int64_t j = 0; j <= i; ++j)
          for (int64_t c = 0; c < d; ++c) {
            r.dqkv[row(i) + qc + c] += a.scale * dp[j] * qkv[row(j) + kc + c];
            r.dqkv[row(j) + kc + c] += a.scale * dp[j] * qkv[row(i) + qc + c];
            r.dqkv[row(j) + vc + c] += p[j] * dout[orow(i) + oc + c];
          }
      }
    }
  return r;
}

struct AttnOut {
  std::vector<double> o, dqkv;
  std::vector<float> lse;
};

// Device buffers of one attention problem; o, lse and dqkv are poisoned (NaN) before every run, so an
// element left unwritten shows as an error.
struct AttnBuffers {
  k::AttnShape a;
  k::bf16 *qkv = nullptr, *o = nullptr, *dout = nullptr, *dqkv = nullptr;
  float *lse = nullptr, *delta = nullptr;
  size_t nqkv = 0, no = 0, nl = 0;
  AttnBuffers(const k::AttnShape& shape, const std::vector<double>& hqkv, const std::vector<double>& hdout) : a(shape) {
    nqkv = size_t(a.B) * a.S * a.ld, no = size_t(a.B) * a.S * a.ldo, nl = size_t(a.B) * a.hq * a.S;
    EXPECT_EQ(cudaMalloc(&qkv, nqkv * 2), cudaSuccess);
    EXPECT_EQ(cudaMalloc(&dqkv, nqkv * 2), cudaSuccess);
    EXPECT_EQ(cudaMalloc(&o, no * 2), cudaSuccess);
    EXPECT_EQ(cudaMalloc(&dout, no * 2), cudaSuccess);
    EXPECT_EQ(cudaMalloc(&lse, nl * 4), cudaSuccess);
    EXPECT_EQ(cudaMalloc(&delta, nl * 4), cudaSuccess);
    const auto bq = to_bits(hqkv, 0, nqkv), bd = to_bits(hdout, 0, no);
    EXPECT_EQ(cudaMemcpy(qkv, bq.data(), nqkv * 2, cudaMemcpyHostToDevice), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(dout, bd.data(), no * 2, cudaMemcpyHostToDevice), cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // pageable uploads land before any stream reads them
  }
  ~AttnBuffers() {
    for (void* p : {(void*)qkv, (void*)o, (void*)dout, (void*)dqkv, (void*)lse, (void*)delta}) cudaFree(p);
  }
  void run(m::attn::Attention& at, cudaStream_t s) {
    EXPECT_EQ(cudaMemsetAsync(o, 0xff, no * 2, s), cudaSuccess);
    EXPECT_EQ(cudaMemsetAsync(dqkv, 0xff, nqkv * 2, s), cudaSuccess);
    EXPECT_EQ(cudaMemsetAsync(lse, 0xff, nl * 4, s), cudaSuccess);
    at.forward(qkv, o, lse, s);
    at.backward(qkv, o, dout, lse, delta, dqkv, s);
  }
  AttnOut read() const {
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    AttnOut r{from_device(o, no), from_device(dqkv, nqkv), std::vector<float>(nl)};
    EXPECT_EQ(cudaMemcpy(r.lse.data(), lse, nl * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    return r;
  }
};

// Relative L2 over the columns [c0, c0 + n) of a [rows, ld] buffer.
double rel_l2_cols(const std::vector<double>& got, const std::vector<double>& ref, int64_t ld, int64_t c0, int64_t n) {
  std::vector<double> g, r;
  for (size_t row = 0; row < got.size() / size_t(ld); ++row)
    for (int64_t c = c0; c < c0 + n; ++c) g.push_back(got[row * ld + c]), r.push_back(ref[row * ld + c]);
  return rel_l2(g, r);
}

void check_attention(const AttnOut& got, const AttnRef& ref, const k::AttnShape& a, const char* what) {
  const int64_t qd = int64_t(a.hq) * a.d, kvd = int64_t(a.hkv) * a.d;
  EXPECT_LT(rel_l2(got.o, ref.o), 1e-2) << what << ": o";
  double lse_err = 0;
  for (size_t i = 0; i < got.lse.size(); ++i) {
    const double e = std::abs(got.lse[i] - ref.lse[i]);
    if (!(e <= lse_err)) lse_err = e;  // a NaN sticks
  }
  EXPECT_LT(lse_err, 1e-3) << what << ": lse (natural log, scaled scores)";
  EXPECT_LT(rel_l2_cols(got.dqkv, ref.dqkv, a.ld, a.q_off, qd), 2e-2) << what << ": dq";
  EXPECT_LT(rel_l2_cols(got.dqkv, ref.dqkv, a.ld, a.k_off, kvd), 2e-2) << what << ": dk";
  EXPECT_LT(rel_l2_cols(got.dqkv, ref.dqkv, a.ld, a.v_off, kvd), 2e-2) << what << ": dv";
}

k::AttnShape attn_case(int B, int S) {
  const int hq = 8, hkv = 4, d = 128, qd = hq * d, kvd = hkv * d;
  return k::AttnShape{B, S, hq, hkv, d, qd + 2 * kvd, 0, qd, qd + kvd, qd, float(1.0 / std::sqrt(double(d)))};
}

TEST(AttentionGpu, CudnnAndNaiveMatchReference) {
  for (const auto& a : {attn_case(2, 100), attn_case(1, 256)}) {
    SCOPED_TRACE("B " + std::to_string(a.B) + " S " + std::to_string(a.S));
    const size_t nqkv = size_t(a.B) * a.S * a.ld, no = size_t(a.B) * a.S * a.ldo;
    const auto qkv = m::random_values(nqkv, 31, 2.0), dout = m::random_values(no, 32, 1.0);
    const auto ref = attention_reference(qkv, dout, a);
    AttnBuffers buf(a, qkv, dout);
    cudaStream_t s = Env::team_->stream();
    {
      m::attn::Attention naive(a, m::attn::Impl::kNaive);
      EXPECT_EQ(naive.impl(), m::attn::Impl::kNaive);
      buf.run(naive, s);
      check_attention(buf.read(), ref, a, "naive");
    }
    if (!m::attn::cudnn_built()) GTEST_SKIP() << "braid built without cuDNN";
    m::attn::Attention fused(a, m::attn::Impl::kCudnn);
    ASSERT_EQ(fused.impl(), m::attn::Impl::kCudnn);
    std::printf("attention B %d S %d: %s\n", a.B, a.S, fused.describe().c_str());
    buf.run(fused, s);
    const auto got = buf.read();
    check_attention(got, ref, a, "cudnn");
    // The naive backward from cuDNN's statistics (same LSE convention) gives the naive gradients.
    m::attn::Attention naive(a, m::attn::Impl::kNaive);
    EXPECT_EQ(cudaMemsetAsync(buf.dqkv, 0xff, nqkv * 2, s), cudaSuccess);
    naive.backward(buf.qkv, buf.o, buf.dout, buf.lse, buf.delta, buf.dqkv, s);
    check_attention(buf.read(), ref, a, "cudnn forward + naive backward");
  }
}

TEST(AttentionGpu, CudnnDeterministicAndCapturable) {
  if (!m::attn::cudnn_built()) GTEST_SKIP() << "braid built without cuDNN";
  const auto a = attn_case(2, 100);
  const auto qkv = m::random_values(size_t(a.B) * a.S * a.ld, 41, 2.0);
  const auto dout = m::random_values(size_t(a.B) * a.S * a.ldo, 42, 1.0);
  AttnBuffers buf(a, qkv, dout);
  m::attn::Attention fused(a, m::attn::Impl::kCudnn);
  const bool det = fused.describe() == "cudnn";
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  buf.run(fused, s);
  const auto first = buf.read();
  buf.run(fused, s);
  const auto second = buf.read();
  EXPECT_EQ(second.o, first.o);
  EXPECT_EQ(second.lse, first.lse);
  if (det) EXPECT_EQ(second.dqkv, first.dqkv) << "deterministic backward";
  // Captured into a CUDA graph (no allocation or synchronisation inside) and replayed: same results.
  cudaGraphExec_t exec = nullptr;
  cudaGraph_t graph = braid::test::capture_graph(s, [&] { buf.run(fused, s); }, cudaStreamCaptureModeGlobal);
  ASSERT_NE(graph, nullptr) << "stream capture failed";
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  const auto replay = buf.read();
  EXPECT_EQ(replay.o, first.o);
  EXPECT_EQ(replay.lse, first.lse);
  if (det) EXPECT_EQ(replay.dqkv, first.dqkv);
  else EXPECT_LT(rel_l2(replay.dqkv, first.dqkv), 1e-2);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
}

TEST(AttentionGpu, LayerReportsBackend) {
  const auto c = m::preset("tiny");
  m::Layer layer(c, {1, true}, *Env::comm_);
  const auto b = layer.attention_backend();
  std::printf("layer 'tiny' (d %d) attention: %s\n", int(c.hd()), b.c_str());
  EXPECT_TRUE(b.rfind("cudnn", 0) == 0 || b.rfind("naive", 0) == 0) << b;
}

}  // namespace
