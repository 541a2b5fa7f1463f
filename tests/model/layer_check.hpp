// Shared by the GPU layer tests: run a Layer on this rank's rows of (x, dy) and compare y, dx and the
// weight-gradient shard with the float64 reference, in float64, as a relative L2 error per tensor.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "braid/model.hpp"

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

// Expects every tensor of `got` within rel-L2 `tol` of the reference's rows/shard for this rank.
inline void expect_close(const Outputs& got, const m::RefResult& ref, const m::ModelConfig& c, const m::Parallel& p,
                         int rank, int64_t rows, double tol, const std::string& what) {
  const size_t off = (rows == c.tokens() ? 0 : size_t(rank) * rows) * c.hidden;
  EXPECT_LT(rel_l2(got.y, ref.y, off), tol) << what << ": y";
  EXPECT_LT(rel_l2(got.dx, ref.dx, off), tol) << what << ": dx";
  const auto shard = m::shard_of(ref.grad, c, p, rank);
  for (const auto& name : m::field_names(c)) {
    const auto& g = *m::field(got.grad, name);
    const auto& r = *m::field(shard, name);
    ASSERT_EQ(g.size(), r.size()) << what << ": d" << name;
    // The router gradient goes through p·(dp − Σ p·dp): a difference of bf16-rounded expert outputs.
    EXPECT_LT(rel_l2(g, r), name == "router" ? 2 * tol : tol) << what << ": d" << name;
  }
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
