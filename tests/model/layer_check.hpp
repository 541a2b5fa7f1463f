// Shared by the GPU layer tests: run a Layer on this rank's rows of (x, dy) and compare y, dx and the
// weight-gradient shard with the float64 reference, in float64, as a relative L2 error per tensor.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "braid/model.hpp"
#include "capture.hpp"

namespace layer_check {

namespace m = braid::model;

inline std::vector<uint16_t> to_bits(const std::vector<double>& v, size_t off, size_t n) {
  std::vector<uint16_t> o(n);
  for (size_t i = 0; i < n; ++i) {
    float f = float(v[off + i]);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    o[i] = uint16_t(u >> 16);
  }
  return o;
}
inline std::vector<double> from_device(const void* p, size_t n) {
  std::vector<uint16_t> h(n);
  EXPECT_EQ(cudaMemcpy(h.data(), p, n * 2, cudaMemcpyDeviceToHost), cudaSuccess);
  std::vector<double> o(n);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t u = uint32_t(h[i]) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    o[i] = f;
  }
  return o;
}
// ||a - b|| / ||b|| (b: reference); NaN-safe (a NaN gives +inf).
inline double rel_l2(const std::vector<double>& a, const std::vector<double>& b, size_t boff = 0) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = a[i] - b[boff + i];
    if (!(d == d)) return INFINITY;
    num += d * d, den += b[boff + i] * b[boff + i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

struct Outputs {
  std::vector<double> y, dx;  // this rank's rows
  m::LayerWeights grad;       // this rank's shard
};

// Runs forward and backward of `layer` on the rows this rank owns; op_by_op: through run_op() on a
// second stream instead of forward()/backward().
inline Outputs run_layer(m::Layer& layer, int rank, const std::vector<double>& x, const std::vector<double>& dy,
                         cudaStream_t stream, bool op_by_op = false) {
  const auto& c = layer.config();
  const size_t rows = size_t(layer.local_tokens()), H = size_t(c.hidden);
  const size_t off = (rows == size_t(c.tokens()) ? 0 : size_t(rank) * rows) * H;
  const auto xb = to_bits(x, off, rows * H), dyb = to_bits(dy, off, rows * H);
  EXPECT_EQ(cudaMemcpy(layer.x(), xb.data(), xb.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(layer.dy(), dyb.data(), dyb.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // pageable uploads land before `stream` reads them
  if (op_by_op) {
    for (auto ph : {m::Phase::kForward, m::Phase::kBackward})
      for (size_t i = 0; i < layer.ops(ph).size(); ++i) layer.run_op(ph, i, stream);
  } else {
    layer.forward(stream);
    layer.backward(stream);
  }
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  Outputs o;
  o.y = from_device(layer.y(), rows * H);
  o.dx = from_device(layer.dx(), rows * H);
  o.grad = layer.download_grads();
  return o;
}

// Captures one forward + backward of `layer` on `s` in a CUDA graph and replays it twice: each replay writes y, dx
// (zeroed before it) and every gradient again with `eager`'s bits. wait: how a replay is waited for (one rank: a
// stream synchronize; several: the team's bounded synchronize).
inline void expect_graph_replays_bitwise(m::Layer& layer, cudaStream_t s, const Outputs& eager,
                                         const std::function<void()>& wait) {
  const size_t n = size_t(layer.local_tokens()) * layer.config().hidden;
  cudaGraph_t g = braid::test::capture_graph(s, [&] {
    layer.forward(s);
    layer.backward(s);
  });
  ASSERT_NE(g, nullptr) << "stream capture failed";
  cudaGraphExec_t ge = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&ge, g, 0), cudaSuccess);
  for (int rep = 0; rep < 2; ++rep) {
    ASSERT_EQ(cudaMemsetAsync(layer.y(), 0, n * 2, s), cudaSuccess);  // the replay must write them again
    ASSERT_EQ(cudaMemsetAsync(layer.dx(), 0, n * 2, s), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(ge, s), cudaSuccess);
    wait();
    EXPECT_EQ(from_device(layer.y(), n), eager.y) << "replay " << rep;
    EXPECT_EQ(from_device(layer.dx(), n), eager.dx) << "replay " << rep;
    const auto gr = layer.download_grads();
    for (const auto& f : m::field_names(layer.config())) EXPECT_EQ(*m::field(gr, f), *m::field(eager.grad, f)) << "d" << f;
  }
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
}

// Expects every tensor of `got` within rel-L2 `tol` of the reference's rows/shard for this rank
// (grads = false: y and dx only).
inline void expect_close(const Outputs& got, const m::RefResult& ref, const m::ModelConfig& c, const m::Parallel& p,
                         int rank, int64_t rows, double tol, const std::string& what, bool grads = true) {
  const size_t off = (rows == c.tokens() ? 0 : size_t(rank) * rows) * c.hidden;
  EXPECT_LT(rel_l2(got.y, ref.y, off), tol) << what << ": y";
  EXPECT_LT(rel_l2(got.dx, ref.dx, off), tol) << what << ": dx";
  if (!grads) return;
  const auto shard = m::shard_of(ref.grad, c, p, rank);
  for (const auto& name : m::field_names(c)) {
    const auto& g = *m::field(got.grad, name);
    const auto& r = *m::field(shard, name);
    ASSERT_EQ(g.size(), r.size()) << what << ": d" << name;
    // The router gradient goes through p·(dp − Σ p·dp): a difference of bf16-rounded expert outputs.
    EXPECT_LT(rel_l2(g, r), name == "router" ? 2 * tol : tol) << what << ": d" << name;
  }
}

// One line of relative L2 errors (y, dx, every gradient of this rank's shard), for the test log.
inline void print_errors(const Outputs& got, const m::RefResult& ref, const m::ModelConfig& c, const m::Parallel& p,
                         int rank, int64_t rows, const std::string& what) {
  const size_t off = (rows == c.tokens() ? 0 : size_t(rank) * rows) * c.hidden;
  std::string line = "[rank " + std::to_string(rank) + "] " + what + ":";
  char buf[64];
  std::snprintf(buf, sizeof buf, " y %.2e dx %.2e", rel_l2(got.y, ref.y, off), rel_l2(got.dx, ref.dx, off));
  line += buf;
  const auto shard = m::shard_of(ref.grad, c, p, rank);
  for (const auto& name : m::field_names(c)) {
    std::snprintf(buf, sizeof buf, " d%s %.2e", name.c_str(), rel_l2(*m::field(got.grad, name), *m::field(shard, name)));
    line += buf;
  }
  std::printf("%s\n", line.c_str());
}

// ---- MoE routing
// Top-k is discontinuous. The GPU's router logits (x1 and h2 stored in bf16 after bf16 attention and
// projections, fp32 dot products) differ from the float64 ones by up to ~5e-3 on the test shapes, so a
// token whose k-th and (k+1)-th logits are closer than that can go to another expert. y and dx barely
// move (one token of T, and the MoE term is a fraction of the residual), but every gradient summed over
// tokens — dw1/dw2/dw3, dnorm2, drouter — moves by that token's whole contribution: 5-13% for one
// token on moe-d32-s100 and moe-d128-s96 (docs/layer.md). So the GPU is compared with the reference run
// on the GPU's own routes, after checking that those differ from the float64 top-k only on near-ties.
constexpr double kRouteTieTol = 2e-2;  // logit units; 4x the largest bf16-vs-float64 logit error seen

// Checks that `gpu` ([T, top_k], all tokens) picks, for every token, an expert set whose smallest
// float64 logit is at most kRouteTieTol below the largest logit it left out; prints how many tokens
// differ from the float64 top-k. Returns that count.
inline int expect_routes_near_reference(const std::vector<int>& gpu, const m::RefResult& ref, const m::ModelConfig& c,
                                        const std::string& what) {
  const int64_t T = c.tokens();
  const int E = c.experts, K = c.top_k;
  EXPECT_EQ(gpu.size(), size_t(T * K)) << what << ": routes";
  if (gpu.size() != size_t(T * K) || ref.logits.size() != size_t(T * E)) return -1;
  int differ = 0;
  std::string tokens;
  for (int64_t t = 0; t < T; ++t) {
    std::vector<bool> chosen(E, false);
    bool valid = true;
    for (int k = 0; k < K; ++k) {
      const int e = gpu[t * K + k];
      valid = valid && e >= 0 && e < E && !chosen[e];
      if (e >= 0 && e < E) chosen[e] = true;
    }
    EXPECT_TRUE(valid) << what << ": token " << t << " is not routed to " << K << " distinct experts";
    if (!valid) continue;
    bool same = true;
    for (int k = 0; k < K; ++k) same = same && chosen[ref.routes[t * K + k]];
    if (same) continue;
    double lo = INFINITY, hi = -INFINITY;
    for (int e = 0; e < E; ++e) {
      const double l = ref.logits[t * E + e];
      if (chosen[e]) lo = std::min(lo, l);
      else hi = std::max(hi, l);
    }
    ++differ;
    tokens += " " + std::to_string(t) + "(" + std::to_string(hi - lo) + ")";
    EXPECT_LT(hi - lo, kRouteTieTol) << what << ": token " << t << " routed away from a clearly better expert";
  }
  std::printf("%s: %d of %lld tokens routed differently from the float64 top-%d (near ties; token(logit deficit):%s)\n",
              what.c_str(), differ, (long long)T, K, tokens.empty() ? " none" : tokens.c_str());
  return differ;
}

// Test shapes: "tiny" (d 16), a two-tile sequence that is not a multiple of 64 (d 32), and d 128.
inline std::vector<m::ModelConfig> shapes(bool moe) {
  std::vector<m::ModelConfig> v;
  auto a = m::preset(moe ? "tiny-moe" : "tiny");
  v.push_back(a);
  m::ModelConfig b = a;
  b.name = moe ? "moe-d32-s100" : "d32-s100";
  b.hidden = 256, b.heads = 8, b.kv_heads = 2, b.ffn = moe ? 128 : 512, b.seq = 100, b.micro_batch = 2;
  v.push_back(b);
  m::ModelConfig c = a;
  c.name = moe ? "moe-d128-s96" : "d128-s96";
  c.hidden = 512, c.heads = 4, c.kv_heads = 2, c.ffn = moe ? 128 : 384, c.seq = 96, c.micro_batch = 1;
  v.push_back(c);
  return v;
}

constexpr double kTol = 2.5e-2;  // bf16 storage of every activation and weight: ~0.4% per rounding

}  // namespace layer_check
