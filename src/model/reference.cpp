// float64 CPU reference of one decoder layer: forward, input and weight gradients (dense and MoE).
// Written for clarity, not speed: loops over plain row-major arrays, no intermediate rounding.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "braid/errors.hpp"
#include "braid/model/reference.hpp"

namespace braid::model {
namespace {

using Vec = std::vector<double>;

uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// C[m,n] (+)= A[m,k] · B[k,n]
void mm(const double* A, const double* B, double* C, int64_t m, int64_t n, int64_t k, bool acc = false) {
  if (!acc) std::fill(C, C + m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p) {
      const double a = A[i * k + p];
      if (a == 0) continue;
      const double* b = B + p * n;
      double* c = C + i * n;
      for (int64_t j = 0; j < n; ++j) c[j] += a * b[j];
    }
}
// C[k,n] (+)= A[m,k]^T · B[m,n]
void mm_tn(const double* A, const double* B, double* C, int64_t m, int64_t n, int64_t k, bool acc = false) {
  if (!acc) std::fill(C, C + k * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p) {
      const double a = A[i * k + p];
      if (a == 0) continue;
      const double* b = B + i * n;
      double* c = C + p * n;
      for (int64_t j = 0; j < n; ++j) c[j] += a * b[j];
    }
}
// C[m,k] (+)= A[m,n] · B[k,n]^T
void mm_nt(const double* A, const double* B, double* C, int64_t m, int64_t n, int64_t k, bool acc = false) {
  if (!acc) std::fill(C, C + m * k, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p) {
      double s = 0;
      for (int64_t j = 0; j < n; ++j) s += A[i * n + j] * B[p * n + j];
      C[i * k + p] += s;
    }
}

double sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }
double silu(double z) { return z * sigmoid(z); }
double dsilu(double z) {
  const double s = sigmoid(z);
  return s * (1.0 + z * (1.0 - s));
}

// y = x · r · g per row, r = 1/sqrt(mean(x²) + eps).
void rmsnorm(const Vec& x, const Vec& g, Vec& y, Vec& r, int64_t T, int64_t H, double eps) {
  y.assign(T * H, 0), r.assign(T, 0);
  for (int64_t t = 0; t < T; ++t) {
    double ss = 0;
    for (int64_t j = 0; j < H; ++j) ss += x[t * H + j] * x[t * H + j];
    r[t] = 1.0 / std::sqrt(ss / H + eps);
    for (int64_t j = 0; j < H; ++j) y[t * H + j] = x[t * H + j] * r[t] * g[j];
  }
}
// dx += dL/dx, dg += dL/dg given dy = dL/dy.
void rmsnorm_bwd(const Vec& x, const Vec& g, const Vec& r, const Vec& dy, Vec& dx, Vec& dg, int64_t T, int64_t H) {
  for (int64_t t = 0; t < T; ++t) {
    double dot = 0;
    for (int64_t j = 0; j < H; ++j) dot += dy[t * H + j] * g[j] * x[t * H + j];
    const double rt = r[t];
    for (int64_t j = 0; j < H; ++j) {
      dx[t * H + j] += rt * dy[t * H + j] * g[j] - rt * rt * rt * x[t * H + j] * dot / H;
      dg[j] += dy[t * H + j] * x[t * H + j] * rt;
    }
  }
}

// In place on [T, nheads·d] (row stride ld, column offset col0): rotate pairs (i, i+d/2). inverse: the
// transpose (used for the backward).
void rope(Vec& a, int64_t T, int64_t ld, int64_t col0, int64_t nheads, int64_t d, int64_t S, double theta,
          bool inverse) {
  const int64_t half = d / 2;
  for (int64_t t = 0; t < T; ++t) {
    const double pos = double(t % S);
    for (int64_t h = 0; h < nheads; ++h)
      for (int64_t i = 0; i < half; ++i) {
        const double ang = pos * std::pow(theta, -2.0 * i / d);
        const double c = std::cos(ang), s = inverse ? -std::sin(ang) : std::sin(ang);
        double* p = a.data() + t * ld + col0 + h * d;
        const double x0 = p[i], x1 = p[i + half];
        p[i] = x0 * c - x1 * s;
        p[i + half] = x1 * c + x0 * s;
      }
  }
}

struct Dims {
  int64_t T, H, S, B, nh, nkv, d, qd, kvd, F, E, K;
  explicit Dims(const ModelConfig& c)
      : T(c.tokens()), H(c.hidden), S(c.seq), B(c.micro_batch), nh(c.heads), nkv(c.kv_heads), d(c.hd()),
        qd(c.q_dim()), kvd(c.kv_dim()), F(c.ffn), E(c.experts), K(c.top_k) {}
};

}  // namespace

double round_to_bf16(double v) {
  float f = static_cast<float>(v);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) != 0x7f800000u) u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  u &= 0xffff0000u;
  std::memcpy(&f, &u, 4);
  return f;
}

std::vector<double> random_values(size_t n, uint64_t seed, double scale) {
  std::vector<double> v(n);
  uint64_t s = seed * 0x2545F4914F6CDD1DULL + 12345;
  for (auto& x : v) x = round_to_bf16(scale * ((splitmix(s) >> 11) * 0x1.0p-53 * 2 - 1));
  return v;
}

LayerWeights init_weights(const ModelConfig& c, uint64_t seed) {
  c.validate();
  const Dims D(c);
  LayerWeights w;
  const double sh = 1.0 / std::sqrt(double(D.H)), sf = 1.0 / std::sqrt(double(D.F)), sq = 1.0 / std::sqrt(double(D.qd));
  auto norm = [&](uint64_t s) {
    auto v = random_values(D.H, s, 0.1);
    for (auto& x : v) x = round_to_bf16(1.0 + x);
    return v;
  };
  w.norm1 = norm(seed * 16 + 1);
  w.norm2 = norm(seed * 16 + 2);
  w.wq = random_values(D.H * D.qd, seed * 16 + 3, sh);
  w.wk = random_values(D.H * D.kvd, seed * 16 + 4, sh);
  w.wv = random_values(D.H * D.kvd, seed * 16 + 5, sh);
  w.wo = random_values(D.qd * D.H, seed * 16 + 6, sq);
  const int64_t ne = c.moe() ? D.E : 1;
  w.w1 = random_values(ne * D.H * D.F, seed * 16 + 7, sh);
  w.w3 = random_values(ne * D.H * D.F, seed * 16 + 8, sh);
  w.w2 = random_values(ne * D.F * D.H, seed * 16 + 9, sf);
  if (c.moe()) w.router = random_values(D.H * D.E, seed * 16 + 10, sh);
  return w;
}

std::vector<std::string> field_names(const ModelConfig& c) {
  std::vector<std::string> n = {"norm1", "norm2", "wq", "wk", "wv", "wo", "w1", "w3", "w2"};
  if (c.moe()) n.push_back("router");
  return n;
}

std::vector<double>* field(LayerWeights& w, const std::string& n) {
  if (n == "norm1") return &w.norm1;
  if (n == "norm2") return &w.norm2;
  if (n == "wq") return &w.wq;
  if (n == "wk") return &w.wk;
  if (n == "wv") return &w.wv;
  if (n == "wo") return &w.wo;
  if (n == "w1") return &w.w1;
  if (n == "w3") return &w.w3;
  if (n == "w2") return &w.w2;
  if (n == "router") return &w.router;
  return nullptr;
}
const std::vector<double>* field(const LayerWeights& w, const std::string& n) {
  return field(const_cast<LayerWeights&>(w), n);
}

LayerWeights shard_of(const LayerWeights& f, const ModelConfig& c, const Parallel& p, int rank) {
  p.validate(c);
  const Dims D(c);
  const int tp = p.tp;
  auto cols = [](const Vec& a, int64_t rows, int64_t ncols, int64_t c0, int64_t nc) {
    Vec o(rows * nc);
    for (int64_t r = 0; r < rows; ++r)
      std::copy(a.begin() + r * ncols + c0, a.begin() + r * ncols + c0 + nc, o.begin() + r * nc);
    return o;
  };
  auto range = [](const Vec& a, int64_t off, int64_t n) { return Vec(a.begin() + off, a.begin() + off + n); };
  LayerWeights s;
  s.norm1 = f.norm1, s.norm2 = f.norm2, s.router = f.router;
  const int64_t qdl = D.qd / tp, kvdl = D.kvd / tp;
  s.wq = cols(f.wq, D.H, D.qd, rank * qdl, qdl);
  s.wk = cols(f.wk, D.H, D.kvd, rank * kvdl, kvdl);
  s.wv = cols(f.wv, D.H, D.kvd, rank * kvdl, kvdl);
  s.wo = range(f.wo, rank * qdl * D.H, qdl * D.H);
  if (c.moe()) {
    const int64_t El = D.E / tp, n = El * D.H * D.F;
    s.w1 = range(f.w1, rank * n, n), s.w3 = range(f.w3, rank * n, n), s.w2 = range(f.w2, rank * n, n);
  } else {
    const int64_t Fl = D.F / tp;
    s.w1 = cols(f.w1, D.H, D.F, rank * Fl, Fl);
    s.w3 = cols(f.w3, D.H, D.F, rank * Fl, Fl);
    s.w2 = range(f.w2, rank * Fl * D.H, Fl * D.H);
  }
  return s;
}

RefResult reference_layer(const ModelConfig& c, const LayerWeights& w, const std::vector<double>& x,
                          const std::vector<double>& dy, const std::vector<int>* routes, int64_t capacity_group) {
  c.validate();
  const Dims D(c);
  const int64_t T = D.T, H = D.H, S = D.S, d = D.d, F = D.F;
  BRAID_REQUIRE(int64_t(x.size()) == T * H, "reference: x must have tokens x hidden elements");
  const bool bwd = !dy.empty();
  if (bwd) BRAID_REQUIRE(int64_t(dy.size()) == T * H, "reference: dy must have tokens x hidden elements");
  const double scale = 1.0 / std::sqrt(double(d));
  const int64_t group = D.nh / D.nkv;
  RefResult res;

  // ---- forward ----
  Vec h1, r1;
  rmsnorm(x, w.norm1, h1, r1, T, H, c.norm_eps);
  Vec q(T * D.qd), k(T * D.kvd), v(T * D.kvd);
  mm(h1.data(), w.wq.data(), q.data(), T, D.qd, H);
  mm(h1.data(), w.wk.data(), k.data(), T, D.kvd, H);
  mm(h1.data(), w.wv.data(), v.data(), T, D.kvd, H);
  rope(q, T, D.qd, 0, D.nh, d, S, c.rope_theta, false);
  rope(k, T, D.kvd, 0, D.nkv, d, S, c.rope_theta, false);
  // Attention: P kept per (b, h) as [S, S] (test shapes are small).
  Vec o(T * D.qd, 0), P(D.B * D.nh * S * S, 0);
  for (int64_t b = 0; b < D.B; ++b)
    for (int64_t h = 0; h < D.nh; ++h) {
      const int64_t g = h / group;
      double* Pb = P.data() + (b * D.nh + h) * S * S;
      for (int64_t i = 0; i < S; ++i) {
        const double* qi = q.data() + (b * S + i) * D.qd + h * d;
        double mx = -INFINITY;
        for (int64_t j = 0; j <= i; ++j) {
          const double* kj = k.data() + (b * S + j) * D.kvd + g * d;
          double s = 0;
          for (int64_t e = 0; e < d; ++e) s += qi[e] * kj[e];
          Pb[i * S + j] = s * scale;
          mx = std::max(mx, s * scale);
        }
        double sum = 0;
        for (int64_t j = 0; j <= i; ++j) sum += (Pb[i * S + j] = std::exp(Pb[i * S + j] - mx));
        double* oi = o.data() + (b * S + i) * D.qd + h * d;
        for (int64_t j = 0; j <= i; ++j) {
          Pb[i * S + j] /= sum;
          const double* vj = v.data() + (b * S + j) * D.kvd + g * d;
          for (int64_t e = 0; e < d; ++e) oi[e] += Pb[i * S + j] * vj[e];
        }
      }
    }
  Vec x1(T * H);
  mm(o.data(), w.wo.data(), x1.data(), T, H, D.qd);
  for (int64_t i = 0; i < T * H; ++i) x1[i] += x[i];
  Vec h2, r2;
  rmsnorm(x1, w.norm2, h2, r2, T, H, c.norm_eps);
  res.y = x1;
  // MLP state
  Vec gt, up, act;                      // dense: [T, F]
  Vec logits, probs;                    // MoE: [T, E], [T, K]
  std::vector<Vec> e_gt, e_up, e_act, e_out;  // MoE: per (t, k) rows
  if (!c.moe()) {
    gt.resize(T * F), up.resize(T * F), act.resize(T * F);
    mm(h2.data(), w.w1.data(), gt.data(), T, F, H);
    mm(h2.data(), w.w3.data(), up.data(), T, F, H);
    for (int64_t i = 0; i < T * F; ++i) act[i] = silu(gt[i]) * up[i];
    mm(act.data(), w.w2.data(), res.y.data(), T, H, F, /*acc=*/true);
  } else {
    const int64_t E = D.E, K = D.K;
    logits.resize(T * E), probs.resize(T * K);
    res.routes.resize(T * K);
    res.expert_tokens.assign(E, 0);
    mm(h2.data(), w.router.data(), logits.data(), T, E, H);
    res.logits = logits;
    if (routes) BRAID_REQUIRE(int64_t(routes->size()) == T * K, "reference: routes must have tokens x top_k entries");
    e_gt.resize(T * K), e_up.resize(T * K), e_act.resize(T * K), e_out.resize(T * K);
    // Capacity: tokens [g * group, (g + 1) * group) are one source rank's; each (group, expert) keeps its
    // first `cap` (token, k) in order t, then k — the GPU layer's rule (ModelConfig::capacity).
    const int64_t group = capacity_group > 0 ? capacity_group : T, cap = c.expert_capacity(group);
    BRAID_REQUIRE(T % group == 0, "reference: capacity_group must divide the tokens");
    std::vector<int64_t> taken(size_t((T / group) * E), 0);
    res.kept.assign(T * K, 1);
    for (int64_t t = 0; t < T; ++t) {
      std::vector<int> idx(E);
      std::iota(idx.begin(), idx.end(), 0);
      const double* lt = logits.data() + t * E;
      std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return lt[a] > lt[b]; });
      if (routes) {
        for (int64_t kk = 0; kk < K; ++kk) {
          const int e = (*routes)[t * K + kk];
          BRAID_REQUIRE(e >= 0 && e < E, "reference: route out of range");
          for (int64_t j = 0; j < kk; ++j) BRAID_REQUIRE(idx[j] != e, "reference: a token routed twice to one expert");
          idx[kk] = e;
        }
      }
      double mx = lt[idx[0]], sum = 0;
      for (int64_t kk = 0; kk < K; ++kk) sum += std::exp(lt[idx[kk]] - mx);
      for (int64_t kk = 0; kk < K; ++kk) {
        const int e = idx[kk];
        res.routes[t * K + kk] = e;
        probs[t * K + kk] = std::exp(lt[e] - mx) / sum;
        const size_t tk = t * K + kk;
        if (cap > 0 && taken[size_t((t / group) * E + e)]++ >= cap) {
          res.kept[tk] = 0;  // dropped: contributes nothing, gets no gradient
          continue;
        }
        res.expert_tokens[e]++;
        e_gt[tk].resize(F), e_up[tk].resize(F), e_act[tk].resize(F), e_out[tk].resize(H);
        mm(h2.data() + t * H, w.w1.data() + e * H * F, e_gt[tk].data(), 1, F, H);
        mm(h2.data() + t * H, w.w3.data() + e * H * F, e_up[tk].data(), 1, F, H);
        for (int64_t f = 0; f < F; ++f) e_act[tk][f] = silu(e_gt[tk][f]) * e_up[tk][f];
        mm(e_act[tk].data(), w.w2.data() + e * F * H, e_out[tk].data(), 1, H, F);
        for (int64_t j = 0; j < H; ++j) res.y[t * H + j] += probs[tk] * e_out[tk][j];
      }
    }
  }
  if (!bwd) return res;

  // ---- backward ----
  LayerWeights& G = res.grad;
  G.norm1.assign(H, 0), G.norm2.assign(H, 0);
  G.wq.assign(w.wq.size(), 0), G.wk.assign(w.wk.size(), 0), G.wv.assign(w.wv.size(), 0);
  G.wo.assign(w.wo.size(), 0), G.w1.assign(w.w1.size(), 0), G.w3.assign(w.w3.size(), 0);
  G.w2.assign(w.w2.size(), 0), G.router.assign(w.router.size(), 0);
  Vec dx1 = dy, dh2(T * H, 0);
  if (!c.moe()) {
    Vec dact(T * F), dgt(T * F), dup(T * F);
    mm_nt(dy.data(), w.w2.data(), dact.data(), T, H, F);
    mm_tn(act.data(), dy.data(), G.w2.data(), T, H, F);
    for (int64_t i = 0; i < T * F; ++i) {
      dgt[i] = dact[i] * up[i] * dsilu(gt[i]);
      dup[i] = dact[i] * silu(gt[i]);
    }
    mm_tn(h2.data(), dgt.data(), G.w1.data(), T, F, H);
    mm_tn(h2.data(), dup.data(), G.w3.data(), T, F, H);
    mm_nt(dgt.data(), w.w1.data(), dh2.data(), T, F, H);
    mm_nt(dup.data(), w.w3.data(), dh2.data(), T, F, H, true);
  } else {
    const int64_t E = D.E, K = D.K;
    Vec dout(H), dact(F), dgt(F), dup(F), dp(K);
    for (int64_t t = 0; t < T; ++t) {
      const double* dyt = dy.data() + t * H;
      double* dh = dh2.data() + t * H;
      for (int64_t kk = 0; kk < K; ++kk) {
        const size_t tk = t * K + kk;
        const int e = res.routes[tk];
        dp[kk] = 0;
        if (!res.kept[tk]) continue;
        for (int64_t j = 0; j < H; ++j) dp[kk] += dyt[j] * e_out[tk][j], dout[j] = probs[tk] * dyt[j];
        mm_nt(dout.data(), w.w2.data() + e * F * H, dact.data(), 1, H, F);
        mm_tn(e_act[tk].data(), dout.data(), G.w2.data() + e * F * H, 1, H, F, true);
        for (int64_t f = 0; f < F; ++f) {
          dgt[f] = dact[f] * e_up[tk][f] * dsilu(e_gt[tk][f]);
          dup[f] = dact[f] * silu(e_gt[tk][f]);
        }
        mm_tn(h2.data() + t * H, dgt.data(), G.w1.data() + e * H * F, 1, F, H, true);
        mm_tn(h2.data() + t * H, dup.data(), G.w3.data() + e * H * F, 1, F, H, true);
        mm_nt(dgt.data(), w.w1.data() + e * H * F, dh, 1, F, H, true);
        mm_nt(dup.data(), w.w3.data() + e * H * F, dh, 1, F, H, true);
      }
      // softmax over the selected logits: dlogit_k = p_k (dp_k - Σ_j p_j dp_j)
      double avg = 0;
      for (int64_t kk = 0; kk < K; ++kk) avg += probs[t * K + kk] * dp[kk];
      for (int64_t kk = 0; kk < K; ++kk) {
        const int e = res.routes[t * K + kk];
        const double dl = probs[t * K + kk] * (dp[kk] - avg);
        for (int64_t j = 0; j < H; ++j) {
          G.router[j * E + e] += h2[t * H + j] * dl;
          dh[j] += w.router[j * E + e] * dl;
        }
      }
    }
  }
  rmsnorm_bwd(x1, w.norm2, r2, dh2, dx1, G.norm2, T, H);
  // attention output projection
  Vec dO(T * D.qd);
  mm_nt(dx1.data(), w.wo.data(), dO.data(), T, H, D.qd);
  mm_tn(o.data(), dx1.data(), G.wo.data(), T, H, D.qd);
  Vec dq(T * D.qd, 0), dk(T * D.kvd, 0), dv(T * D.kvd, 0);
  for (int64_t b = 0; b < D.B; ++b)
    for (int64_t h = 0; h < D.nh; ++h) {
      const int64_t g = h / group;
      const double* Pb = P.data() + (b * D.nh + h) * S * S;
      for (int64_t i = 0; i < S; ++i) {
        const int64_t ti = b * S + i;
        const double* doi = dO.data() + ti * D.qd + h * d;
        const double* oi = o.data() + ti * D.qd + h * d;
        double delta = 0;
        for (int64_t e = 0; e < d; ++e) delta += doi[e] * oi[e];
        for (int64_t j = 0; j <= i; ++j) {
          const int64_t tj = b * S + j;
          const double* vj = v.data() + tj * D.kvd + g * d;
          double dp = 0;
          for (int64_t e = 0; e < d; ++e) dp += doi[e] * vj[e];
          const double p = Pb[i * S + j], ds = p * (dp - delta) * scale;
          for (int64_t e = 0; e < d; ++e) {
            dv[tj * D.kvd + g * d + e] += p * doi[e];
            dq[ti * D.qd + h * d + e] += ds * k[tj * D.kvd + g * d + e];
            dk[tj * D.kvd + g * d + e] += ds * q[ti * D.qd + h * d + e];
          }
        }
      }
    }
  rope(dq, T, D.qd, 0, D.nh, d, S, c.rope_theta, true);
  rope(dk, T, D.kvd, 0, D.nkv, d, S, c.rope_theta, true);
  mm_tn(h1.data(), dq.data(), G.wq.data(), T, D.qd, H);
  mm_tn(h1.data(), dk.data(), G.wk.data(), T, D.kvd, H);
  mm_tn(h1.data(), dv.data(), G.wv.data(), T, D.kvd, H);
  Vec dh1(T * H);
  mm_nt(dq.data(), w.wq.data(), dh1.data(), T, D.qd, H);
  mm_nt(dk.data(), w.wk.data(), dh1.data(), T, D.kvd, H, true);
  mm_nt(dv.data(), w.wv.data(), dh1.data(), T, D.kvd, H, true);
  res.dx = dx1;
  rmsnorm_bwd(x, w.norm1, r1, dh1, res.dx, G.norm1, T, H);
  return res;
}

double reference_loss(const ModelConfig& c, const LayerWeights& w, const std::vector<double>& x,
                      const std::vector<double>& dy, const std::vector<int>* routes, int64_t capacity_group) {
  const auto r = reference_layer(c, w, x, {}, routes, capacity_group);
  double s = 0;
  for (size_t i = 0; i < r.y.size(); ++i) s += r.y[i] * dy[i];
  return s;
}

double route_deficit(const ModelConfig& c, const RefResult& ref, const std::vector<int>& routes, int* differ) {
  const int64_t T = c.tokens(), E = c.experts, K = c.top_k;
  BRAID_REQUIRE(c.moe() && int64_t(routes.size()) == T * K && int64_t(ref.logits.size()) == T * E,
                "route_deficit: MoE routes [tokens, top_k] and a reference with logits");
  double worst = -INFINITY;
  int n = 0;
  for (int64_t t = 0; t < T; ++t) {
    std::vector<bool> chosen(E, false), in_ref(E, false);
    for (int64_t k = 0; k < K; ++k) {
      const int e = routes[t * K + k];
      BRAID_REQUIRE(e >= 0 && e < E && !chosen[e], "route_deficit: a token needs top_k distinct experts in range");
      chosen[e] = true;
      in_ref[ref.routes[t * K + k]] = true;
    }
    double lo = INFINITY, hi = -INFINITY;
    for (int64_t e = 0; e < E; ++e) {
      const double l = ref.logits[t * E + e];
      if (chosen[e]) lo = std::min(lo, l);
      else hi = std::max(hi, l);
    }
    worst = std::max(worst, hi - lo);  // E == K: nothing left out, -inf
    n += chosen != in_ref;
  }
  if (differ) *differ = n;
  return worst;
}

}  // namespace braid::model
