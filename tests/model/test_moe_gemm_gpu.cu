// One GPU: GroupedGemm (src/model/moe_gemm.hpp), the grouped bf16 GEMMs over MoE experts with row counts on the
// device, against an fp32 reference kernel of this file (one plain GEMM per group, sizes known on the host).
//   fprop / dgrad: groups of rows {0, 1, 127, 128, 300, 0, 1000, 77}, all-empty groups, a large case, 300 groups
//                  (fill kernel's scan over more than one block-width); inputs past sum(rows) are NaN and the output
//                  rows past sum(rows) must keep their sentinel;
//   wgrad:         beta = 0 over a NaN-filled G (C must not be read; empty groups exactly +0) and beta = 1 over a
//                  random G (empty groups bit for bit unchanged), and beta = 0.5;
//   graphs:        fprop + dgrad + wgrad captured once, replayed twice bit for bit equal to the eager calls, then
//                  replayed after new row counts were written to the device (the graph reads them there);
//   SM caps bit for bit equal to the whole GPU; usage errors.
// Tolerance: max |got - ref| <= 1e-2 · max |ref| + 1e-3 (bf16 outputs, fp32 accumulation in both).
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "braid/errors.hpp"
#include "braid/quant.hpp"
#include "capture.hpp"
#include "model/moe_gemm.hpp"  // src/model (internal)

namespace {

using braid::model::detail::GroupedGemm;
using bf16 = __nv_bfloat16;

const std::vector<int> kRows = {0, 1, 127, 128, 300, 0, 1000, 77};
constexpr int64_t kPadRows = 64;          // rows past sum(rows) in every activation buffer
constexpr uint16_t kNaN = 0x7fc0;         // bf16 quiet NaN: inputs that must never be read
constexpr uint16_t kSentinel = 0x4321;    // bf16 ~10.06: outputs that must never be written
constexpr double kRelTol = 1e-2, kAbsTol = 1e-3;

// The project's host conversions (round to nearest even; exact back).
uint16_t to_bf16(float f) { return braid::quant::float_to_bf16_bits(f); }
float from_bf16(uint16_t h) { return braid::quant::bf16_bits_to_float(h); }

// Uniform in [-1, 1], never all zeros.
std::vector<uint16_t> random_bf16(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = to_bf16(dist(gen));
  return v;
}

template <class T>
struct DevBuf {
  T* p = nullptr;
  size_t n = 0;
  explicit DevBuf(size_t count) : n(count) { BRAID_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T))); }
  ~DevBuf() { cudaFree(p); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
};

void upload(DevBuf<bf16>& d, const std::vector<uint16_t>& h) {
  ASSERT_EQ(h.size(), d.n);
  BRAID_CUDA_CHECK(cudaMemcpy(d.p, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
  BRAID_CUDA_CHECK(cudaDeviceSynchronize());  // a pageable copy may return before it lands; the GEMMs run elsewhere
}
std::vector<uint16_t> download(const DevBuf<bf16>& d) {
  std::vector<uint16_t> h(d.n);
  BRAID_CUDA_CHECK(cudaMemcpy(h.data(), d.p, h.size() * 2, cudaMemcpyDeviceToHost));
  return h;
}

// out[i·ldo + j] (M x N) = Σ_k A(i, k) · B(k, j), A(i, k) = a[i·sai + k·sak], B(k, j) = b[k·sbk + j·sbj]; fp32.
__global__ void ref_gemm_kernel(int M, int N, int K, const bf16* a, int64_t sai, int64_t sak, const bf16* b,
                                int64_t sbk, int64_t sbj, float* out, int64_t ldo) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  for (int i = blockIdx.y; i < M; i += gridDim.y) {
    if (j >= N) return;
    float acc = 0.f;
    for (int k = 0; k < K; ++k)
      acc += __bfloat162float(a[i * sai + int64_t(k) * sak]) * __bfloat162float(b[int64_t(k) * sbk + j * sbj]);
    out[i * ldo + j] = acc;
  }
}

void ref_gemm(int M, int N, int K, const bf16* a, int64_t sai, int64_t sak, const bf16* b, int64_t sbk, int64_t sbj,
              float* out, int64_t ldo) {
  if (M == 0) return;
  const dim3 grid(unsigned((N + 127) / 128), unsigned(std::min(M, 65535)));
  ref_gemm_kernel<<<grid, 128>>>(M, N, K, a, sai, sak, b, sbk, sbj, out, ldo);
  BRAID_CHECK_LAUNCH();
}

std::vector<float> download_f32(const DevBuf<float>& d) {
  std::vector<float> h(d.n);
  BRAID_CUDA_CHECK(cudaDeviceSynchronize());
  BRAID_CUDA_CHECK(cudaMemcpy(h.data(), d.p, h.size() * 4, cudaMemcpyDeviceToHost));
  return h;
}

int64_t total_rows(const std::vector<int>& rows) { return std::accumulate(rows.begin(), rows.end(), int64_t(0)); }

struct Stream {
  cudaStream_t s = nullptr;
  Stream() { BRAID_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  ~Stream() { cudaStreamDestroy(s); }
};

// ---- fprop / dgrad ----------------------------------------------------------------------------------------------
// A [cap, K] (NaN past sum(rows)), W [groups, K, N] (fprop) or [groups, N, K] (dgrad), D [cap, N] (sentinel).
struct ActCase {
  bool dgrad;
  int groups;
  int64_t N, K, cap;
  std::vector<int> rows;
  DevBuf<int> d_rows;
  DevBuf<bf16> A, W, D;

  ActCase(bool dgrad_, const std::vector<int>& rows_, int64_t N_, int64_t K_, uint32_t seed, int64_t cap_rows = -1)
      : dgrad(dgrad_),
        groups(int(rows_.size())),
        N(N_),
        K(K_),
        cap((cap_rows >= 0 ? cap_rows : total_rows(rows_)) + kPadRows),
        d_rows(rows_.size()),
        A(size_t(cap * K)),
        W(size_t(groups) * N * K),
        D(size_t(cap * N)) {
    auto a = random_bf16(A.n, seed);
    upload(W, random_bf16(W.n, seed + 1));
    set_rows(rows_);
    for (size_t i = size_t(total_rows(rows_) * K); i < a.size(); ++i) a[i] = kNaN;
    upload(A, a);
    reset_output();
  }
  void set_rows(const std::vector<int>& r, cudaStream_t s = nullptr) {
    ASSERT_EQ(int(r.size()), groups);
    ASSERT_LE(total_rows(r), cap);
    rows = r;
    BRAID_CUDA_CHECK(cudaMemcpyAsync(d_rows.p, r.data(), r.size() * sizeof(int), cudaMemcpyHostToDevice, s));
    BRAID_CUDA_CHECK(cudaDeviceSynchronize());
  }
  void reset_output() { upload(D, std::vector<uint16_t>(D.n, kSentinel)); }
  void run(GroupedGemm& gg, cudaStream_t s) {
    if (dgrad)
      gg.dgrad(s, d_rows.p, groups, N, K, A.p, W.p, D.p);
    else
      gg.fprop(s, d_rows.p, groups, N, K, A.p, W.p, D.p);
  }
  // D (bits) against the reference for the current rows; rows past sum(rows) must hold the sentinel.
  void check(const std::vector<uint16_t>& d, const std::string& what) const {
    const int64_t total = total_rows(rows);
    DevBuf<float> ref(size_t(std::max<int64_t>(total, 1) * N));
    int64_t off = 0;
    for (int g = 0; g < groups; ++g) {
      const bf16* wg = W.p + int64_t(g) * N * K;
      // fprop: B(k, j) = W_g[k·N + j]; dgrad: B(k, j) = W_g^T(k, j) = W_g[j·K + k]
      ref_gemm(rows[g], int(N), int(K), A.p + off * K, K, 1, wg, dgrad ? 1 : N, dgrad ? K : 1, ref.p + off * N, N);
      off += rows[g];
    }
    const auto r = download_f32(ref);
    double max_ref = 0, max_err = 0;
    int64_t bad_rows_past = 0;
    for (int64_t i = 0; i < total * N; ++i) max_ref = std::max(max_ref, double(std::fabs(r[size_t(i)])));
    for (int64_t i = 0; i < total * N; ++i) {
      const double got = from_bf16(d[size_t(i)]);
      const double err = std::isfinite(got) ? std::fabs(got - r[size_t(i)]) : INFINITY;
      max_err = std::max(max_err, err);
    }
    for (int64_t i = total * N; i < cap * N; ++i) bad_rows_past += d[size_t(i)] != kSentinel;
    std::printf("%-40s max |D - ref| / max |ref| = %.2e (max |ref| %.3g)\n", what.c_str(),
                max_ref > 0 ? max_err / max_ref : max_err, max_ref);
    EXPECT_LE(max_err, kRelTol * max_ref + kAbsTol) << what << ": max |D - ref| " << max_err << ", max |ref| " << max_ref;
    EXPECT_EQ(bad_rows_past, 0) << what << ": elements written past sum(rows) = " << total;
  }
  void run_and_check(GroupedGemm& gg, cudaStream_t s, const std::string& what) {
    reset_output();
    run(gg, s);
    BRAID_CUDA_CHECK(cudaStreamSynchronize(s));
    check(download(D), what);
  }
};

// ---- wgrad ------------------------------------------------------------------------------------------------------
// A [cap, M], B [cap, N] (NaN past sum(rows)), G [groups, M, N].
struct WgradCase {
  int groups;
  int64_t M, N, cap;
  std::vector<int> rows;
  DevBuf<int> d_rows;
  DevBuf<bf16> A, B, G;
  std::vector<uint16_t> g0;  // G before the call

  WgradCase(const std::vector<int>& rows_, int64_t M_, int64_t N_, uint32_t seed)
      : groups(int(rows_.size())),
        M(M_),
        N(N_),
        cap(total_rows(rows_) + kPadRows),
        rows(rows_),
        d_rows(rows_.size()),
        A(size_t(cap * M)),
        B(size_t(cap * N)),
        G(size_t(groups) * M * N) {
    auto a = random_bf16(A.n, seed), b = random_bf16(B.n, seed + 1);
    const int64_t total = total_rows(rows);
    for (size_t i = size_t(total * M); i < a.size(); ++i) a[i] = kNaN;
    for (size_t i = size_t(total * N); i < b.size(); ++i) b[i] = kNaN;
    upload(A, a);
    upload(B, b);
    BRAID_CUDA_CHECK(cudaMemcpy(d_rows.p, rows.data(), rows.size() * sizeof(int), cudaMemcpyHostToDevice));
    BRAID_CUDA_CHECK(cudaDeviceSynchronize());
  }
  // beta = 0: G starts as NaN (C must not be read); otherwise random.
  void reset_output(float beta, uint32_t seed) {
    g0 = beta == 0.f ? std::vector<uint16_t>(G.n, kNaN) : random_bf16(G.n, seed);
    upload(G, g0);
  }
  void run(GroupedGemm& gg, cudaStream_t s, float beta) { gg.wgrad(s, d_rows.p, groups, M, N, A.p, B.p, G.p, beta); }
  void check(const std::vector<uint16_t>& g, float beta, const std::string& what) const {
    DevBuf<float> ref(G.n);
    BRAID_CUDA_CHECK(cudaMemset(ref.p, 0, ref.n * 4));
    int64_t off = 0;
    for (int gi = 0; gi < groups; ++gi) {
      // A_g^T(i, k) = A[(off + k)·M + i]; B_g(k, j) = B[(off + k)·N + j]
      if (rows[gi] > 0)
        ref_gemm(int(M), int(N), rows[gi], A.p + off * M, 1, M, B.p + off * N, N, 1, ref.p + int64_t(gi) * M * N, N);
      off += rows[gi];
    }
    const auto r = download_f32(ref);
    const int64_t mn = M * N;
    double worst = 0;  // max over the groups of max |G - ref| / max |ref|
    for (int gi = 0; gi < groups; ++gi) {
      const size_t base = size_t(gi * mn);
      if (rows[gi] == 0) {
        int64_t bad = 0;
        for (int64_t i = 0; i < mn; ++i) {
          const uint16_t want = beta == 0.f ? uint16_t(0) : beta == 1.f ? g0[base + i] : to_bf16(beta * from_bf16(g0[base + i]));
          bad += g[base + i] != want;
        }
        EXPECT_EQ(bad, 0) << what << ": empty group " << gi << " must be beta·G_g exactly (beta " << beta << ")";
        continue;
      }
      double max_ref = 0, max_err = 0;
      for (int64_t i = 0; i < mn; ++i) {
        const double want = double(r[base + i]) + (beta == 0.f ? 0.0 : double(beta) * from_bf16(g0[base + i]));
        max_ref = std::max(max_ref, std::fabs(want));
        const double got = from_bf16(g[base + i]);
        max_err = std::max(max_err, std::isfinite(got) ? std::fabs(got - want) : INFINITY);
      }
      worst = std::max(worst, max_ref > 0 ? max_err / max_ref : max_err);
      EXPECT_LE(max_err, kRelTol * max_ref + kAbsTol)
          << what << ": group " << gi << " (rows " << rows[gi] << "): max |G - ref| " << max_err << ", max |ref| "
          << max_ref;
    }
    std::printf("%-40s max over groups of max |G - ref| / max |ref| = %.2e\n", what.c_str(), worst);
  }
  void run_and_check(GroupedGemm& gg, cudaStream_t s, float beta, const std::string& what) {
    reset_output(beta, 77);
    run(gg, s, beta);
    BRAID_CUDA_CHECK(cudaStreamSynchronize(s));
    check(download(G), beta, what);
  }
};

TEST(MoeGemmGpu, Fprop) {
  Stream st;
  GroupedGemm gg(int(kRows.size()));
  ActCase c(false, kRows, 256, 512, 1);
  c.run_and_check(gg, st.s, "fprop 256x512");
  ActCase c2(false, kRows, 512, 256, 2);
  c2.run_and_check(gg, st.s, "fprop 512x256");
}

TEST(MoeGemmGpu, Dgrad) {
  Stream st;
  GroupedGemm gg(int(kRows.size()));
  ActCase c(true, kRows, 256, 512, 3);
  c.run_and_check(gg, st.s, "dgrad 256x512");
  ActCase c2(true, kRows, 512, 256, 4);
  c2.run_and_check(gg, st.s, "dgrad 512x256");
}

TEST(MoeGemmGpu, Wgrad) {
  Stream st;
  GroupedGemm gg(int(kRows.size()));
  WgradCase c(kRows, 256, 512, 5);
  c.run_and_check(gg, st.s, 0.f, "wgrad 256x512 beta 0");
  c.run_and_check(gg, st.s, 1.f, "wgrad 256x512 beta 1");
  c.run_and_check(gg, st.s, 0.5f, "wgrad 256x512 beta 0.5");
  WgradCase c2(kRows, 512, 256, 6);
  c2.run_and_check(gg, st.s, 0.f, "wgrad 512x256 beta 0");
  c2.run_and_check(gg, st.s, 1.f, "wgrad 512x256 beta 1");
}

TEST(MoeGemmGpu, AllGroupsEmpty) {
  Stream st;
  const std::vector<int> zeros(8, 0);
  GroupedGemm gg(8);
  ActCase f(false, zeros, 256, 512, 7), d(true, zeros, 256, 512, 8);
  f.run_and_check(gg, st.s, "fprop, every group empty");
  d.run_and_check(gg, st.s, "dgrad, every group empty");
  WgradCase w(zeros, 256, 512, 9);
  w.run_and_check(gg, st.s, 0.f, "wgrad, every group empty, beta 0");
  w.run_and_check(gg, st.s, 1.f, "wgrad, every group empty, beta 1");
}

TEST(MoeGemmGpu, Large) {
  Stream st;
  GroupedGemm gg(int(kRows.size()));
  ActCase f(false, kRows, 4096, 1024, 10);
  f.run_and_check(gg, st.s, "fprop 4096x1024");
  ActCase d(true, kRows, 1024, 4096, 11);
  d.run_and_check(gg, st.s, "dgrad 1024x4096");
  WgradCase w(kRows, 4096, 1024, 12);
  w.run_and_check(gg, st.s, 0.f, "wgrad 4096x1024 beta 0");
  w.run_and_check(gg, st.s, 1.f, "wgrad 4096x1024 beta 1");
}

// 300 groups: the fill kernel's scan runs over two chunks of 256.
TEST(MoeGemmGpu, ManyGroups) {
  Stream st;
  std::mt19937 gen(13);
  std::vector<int> rows(300);
  for (auto& r : rows) r = int(gen() % 24);
  rows[0] = 0;
  rows[255] = 0;
  rows[256] = 130;
  GroupedGemm gg(int(rows.size()));
  ActCase f(false, rows, 128, 64, 14);
  f.run_and_check(gg, st.s, "fprop, 300 groups");
  WgradCase w(rows, 64, 128, 15);
  w.run_and_check(gg, st.s, 1.f, "wgrad, 300 groups, beta 1");
}

// A capped grid computes every tile as the whole GPU does (no split K): bit for bit.
TEST(MoeGemmGpu, SmCapBitwise) {
  Stream st;
  GroupedGemm gg(int(kRows.size()));
  ActCase f(false, kRows, 512, 256, 16);
  f.run_and_check(gg, st.s, "fprop, every SM");
  const auto full = download(f.D);
  for (int cap : {1, 2, 16, 77}) {
    gg.set_sm_count(cap);
    f.reset_output();
    f.run(gg, st.s);
    BRAID_CUDA_CHECK(cudaStreamSynchronize(st.s));
    EXPECT_TRUE(download(f.D) == full) << "sm_count " << cap;
  }
  gg.set_sm_count(0);
  f.reset_output();
  f.run(gg, st.s);
  BRAID_CUDA_CHECK(cudaStreamSynchronize(st.s));
  EXPECT_TRUE(download(f.D) == full) << "sm_count 0 (every SM) again";
}

// One graph: fprop, dgrad and wgrad (beta 0), each on its own object. Two replays equal the eager calls bit for bit;
// new rows written to the device before a third replay give the new problem.
TEST(MoeGemmGpu, GraphReplay) {
  Stream st;
  const int groups = int(kRows.size());
  GroupedGemm gf(groups), gd(groups), gw(groups);
  ActCase f(false, kRows, 256, 512, 17), d(true, kRows, 512, 256, 18);
  WgradCase w(kRows, 256, 512, 19);
  auto enqueue = [&] {
    f.run(gf, st.s);
    d.run(gd, st.s);
    w.run(gw, st.s, 0.f);
  };
  auto reset = [&] {
    f.reset_output();
    d.reset_output();
    w.reset_output(0.f, 0);
  };
  reset();
  enqueue();
  BRAID_CUDA_CHECK(cudaStreamSynchronize(st.s));
  const auto ef = download(f.D), ed = download(d.D), ew = download(w.G);
  f.check(ef, "eager fprop");
  d.check(ed, "eager dgrad");
  w.check(ew, 0.f, "eager wgrad");

  cudaGraph_t graph = braid::test::capture_graph(st.s, enqueue);
  ASSERT_NE(graph, nullptr);
  cudaGraphExec_t exec = nullptr;
  BRAID_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int replay = 0; replay < 2; ++replay) {
    reset();
    BRAID_CUDA_CHECK(cudaGraphLaunch(exec, st.s));
    BRAID_CUDA_CHECK(cudaStreamSynchronize(st.s));
    EXPECT_TRUE(download(f.D) == ef) << "fprop replay " << replay;
    EXPECT_TRUE(download(d.D) == ed) << "dgrad replay " << replay;
    EXPECT_TRUE(download(w.G) == ew) << "wgrad replay " << replay;
  }
  // New counts (same buffers; the activations' sums fit their capacity): the graph reads them on the device.
  const std::vector<int> rows2 = {5, 0, 200, 64, 1, 900, 3, 300};
  f.set_rows(rows2);
  d.set_rows(rows2);
  reset();
  BRAID_CUDA_CHECK(cudaGraphLaunch(exec, st.s));
  BRAID_CUDA_CHECK(cudaStreamSynchronize(st.s));
  f.check(download(f.D), "fprop replay with new rows");
  d.check(download(d.D), "dgrad replay with new rows");
  BRAID_CUDA_CHECK(cudaGraphExecDestroy(exec));
  BRAID_CUDA_CHECK(cudaGraphDestroy(graph));
}

TEST(MoeGemmGpu, UsageErrors) {
  Stream st;
  GroupedGemm gg(8);
  ActCase f(false, kRows, 256, 512, 20);
  EXPECT_THROW(gg.fprop(st.s, f.d_rows.p, 8, 100, 512, f.A.p, f.W.p, f.D.p), braid::UsageError);  // N % 8
  EXPECT_THROW(gg.dgrad(st.s, f.d_rows.p, 8, 256, 12, f.A.p, f.W.p, f.D.p), braid::UsageError);   // K % 8
  EXPECT_THROW(gg.fprop(st.s, f.d_rows.p, 9, 256, 512, f.A.p, f.W.p, f.D.p), braid::UsageError);  // groups > max
  EXPECT_THROW(gg.fprop(st.s, f.d_rows.p, 8, 256, 512, f.A.p + 1, f.W.p, f.D.p), braid::UsageError);  // alignment
  EXPECT_THROW(gg.wgrad(st.s, f.d_rows.p, 8, 0, 256, f.A.p, f.A.p, f.D.p, 0.f), braid::UsageError);   // M = 0
  EXPECT_THROW(gg.set_sm_count(-1), braid::UsageError);
  EXPECT_THROW(GroupedGemm(0), braid::UsageError);
  // groups = 0 launches nothing.
  EXPECT_NO_THROW(gg.fprop(st.s, nullptr, 0, 256, 512, f.A.p, f.W.p, f.D.p));
  BRAID_CUDA_CHECK(cudaStreamSynchronize(st.s));
}

}  // namespace
