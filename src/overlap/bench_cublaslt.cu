// bench_cublaslt.cu — `braid bench gemm-cublaslt`: which kernel configuration cuBLAS runs for braid's GEMM shapes,
// and how fast each of cuBLASLt's top heuristic picks is, beside cublasGemmEx (CublasGemm, the baseline every GEMM
// benchmark of braid times). A diagnostic for issue 4's ">= 95% of cuBLAS": where braid's GEMM trails cuBLAS (the
// short-K, small-M x N shapes), the tile, cluster, stage count and split-K of the configuration that runs as fast as
// cublasGemmEx say what braid's instantiation table lacks.
//
// Per shape (A (M,K) row-major bf16, B (N,K) row-major bf16, D = A·Bᵀ (M,N) row-major bf16, fp32 accumulation):
// cublasLtMatmulAlgoGetHeuristic for the problem cublasGemmEx sees (column-major Dᵀ (N,M) = op_T(B)·A, the same
// 32 MiB workspace), up to --algos results. Verified first: each result's output against cublasGemmEx's, bit for bit
// (fill_pattern's half-integers make every product sum exact in fp32 for K <= 16384, so any accumulation order and
// any split-K reduction rounds the same value once); then cublasGemmEx and every result timed interleaved (5 rounds,
// input sets rotated over twice the L2, medians). The configuration attributes are written as cuBLASLt's enum values
// (cublasLt.h: cublasLtMatmulTile_t, cublasLtMatmulStages_t, cublasLtClusterShape_t, ...);
// scripts/cublaslt-names.py names them from the toolkit's header.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "braid/bench.hpp"
#include "braid/errors.hpp"
#include "braid/overlap.hpp"
#include "braid/runtime.hpp"

namespace braid::overlap {
namespace {

using Buf = bench::DeviceBuffer;

// Elements of got that differ from ref in their bits ([0]) and by more than one bf16 ulp of ref ([1]).
__global__ void compare_bf16(const __nv_bfloat16* __restrict__ ref, const __nv_bfloat16* __restrict__ got, size_t n,
                             unsigned long long* counts) {
  unsigned long long bits = 0, far = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const __nv_bfloat16 r = ref[i], g = got[i];
    if (__bfloat16_as_ushort(r) != __bfloat16_as_ushort(g)) {
      ++bits;
      const float fr = __bfloat162float(r), fg = __bfloat162float(g);
      if (fabsf(fr - fg) > fabsf(fr) * (1.f / 128.f)) ++far;
    }
  }
  if (bits) atomicAdd(&counts[0], bits);
  if (far) atomicAdd(&counts[1], far);
}

template <class T>
T config_attr(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attr) {
  T v{};
  size_t written = 0;
  BRAID_CUBLAS_CHECK(cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &v, sizeof(v), &written));
  return v;
}

constexpr int kMaxAlgos = 32;

struct LtPick {  // one heuristic result and its configuration attributes (value-initialized: LtPick{})
  cublasLtMatmulAlgo_t algo;
  size_t workspace;
  float waves;
  int32_t id, splitk;
  uint32_t tile, stages, reduction, swizzle, custom;
  uint16_t inner, cluster;
};

}  // namespace

int bench_cublaslt_main(Team& team, int argc, char** argv, const bench::Context& ctx) {
  std::vector<bench::GemmShape> shapes;
  std::string json;
  bench::TimingOptions timing{5, 50};
  int max_algos = 8;
  bench::for_each_option(argc, argv, [&](const std::string& k, const bench::OptionValue& val) {
    if (bench::parse_gemm_bench_option(k, val, shapes, json, timing)) {
    } else if (k == "--algos") max_algos = std::clamp(std::stoi(val()), 1, kMaxAlgos);
    else throw UsageError("unknown option '" + k + "' for bench gemm-cublaslt", __FILE__, __LINE__);
  });
  if (shapes.empty()) throw UsageError("bench gemm-cublaslt: give --shape M,N,K or --shapes FILE", __FILE__, __LINE__);
  if (team.size() != 1) throw UsageError("bench gemm-cublaslt runs on one GPU (one rank)", __FILE__, __LINE__);
  cudaStream_t s = team.stream();

  cublasLtHandle_t lt = nullptr;
  BRAID_CUBLAS_CHECK(cublasLtCreate(&lt));
  const size_t ws_bytes = size_t(32) << 20;  // CublasGemm's workspace
  Buf ws(ws_bytes), counts(2 * sizeof(unsigned long long));
  CublasGemm cublas;
  int failures = 0;
  std::printf("# cuBLASLt heuristic picks against cublasGemmEx (bf16 TN, fp32 accumulation, 32 MiB workspace); "
              "attributes are cublasLt.h enum values\n");
  std::printf("#      M      N      K | #  algo  tile stages splitk red swz cust inner clus waves   ws(MiB) | verdict "
              "| time(us) vs_gemmex\n");
  for (const auto& sh : shapes) {
    BRAID_REQUIRE(sh.k <= 16384, "bench gemm-cublaslt: K <= 16384 (exact sums, bitwise verification)");
    const size_t na = size_t(sh.m) * sh.k, nb = size_t(sh.n) * sh.k, nd = size_t(sh.m) * sh.n;
    Buf A(na * 2), B(nb * 2), Dref(nd * 2), D(nd * 2);
    bench::fill_pattern(A.p, bench::DType::kBF16, na, 11, 0, 0, s);
    bench::fill_pattern(B.p, bench::DType::kBF16, nb, 12, 0, 0, s);
    cublas.run(A.p, B.p, Dref.p, sh.m, sh.n, sh.k, s);

    // The problem as cublasGemmEx gets it: Dᵀ (N x M, ld N) = op_T(B: K x N, ld K) · A (K x M, ld K).
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
    cublasLtMatmulPreference_t pref = nullptr;
    BRAID_CUBLAS_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    BRAID_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    BRAID_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    BRAID_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, uint64_t(sh.k), uint64_t(sh.n), int64_t(sh.k)));
    BRAID_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, uint64_t(sh.k), uint64_t(sh.m), int64_t(sh.k)));
    BRAID_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, uint64_t(sh.n), uint64_t(sh.m), int64_t(sh.n)));
    BRAID_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws_pref = ws_bytes;
    BRAID_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_pref,
                                                           sizeof(ws_pref)));
    // A plain array: nvcc 13.0's front end fails an internal assertion on std::vector of this anonymous struct.
    cublasLtMatmulHeuristicResult_t res[kMaxAlgos] = {};
    int returned = 0;
    BRAID_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, max_algos, res, &returned));
    std::vector<LtPick> picks;
    for (int r = 0; r < returned; ++r) {
      if (res[r].state != CUBLAS_STATUS_SUCCESS) continue;
      LtPick p{};
      p.algo = res[r].algo;
      p.workspace = res[r].workspaceSize;
      p.waves = res[r].wavesCount;
      p.id = config_attr<int32_t>(p.algo, CUBLASLT_ALGO_CONFIG_ID);
      p.tile = config_attr<uint32_t>(p.algo, CUBLASLT_ALGO_CONFIG_TILE_ID);
      p.splitk = config_attr<int32_t>(p.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM);
      p.reduction = config_attr<uint32_t>(p.algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME);
      p.swizzle = config_attr<uint32_t>(p.algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING);
      p.custom = config_attr<uint32_t>(p.algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION);
      p.stages = config_attr<uint32_t>(p.algo, CUBLASLT_ALGO_CONFIG_STAGES_ID);
      p.inner = config_attr<uint16_t>(p.algo, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID);
      p.cluster = config_attr<uint16_t>(p.algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID);
      picks.push_back(p);
    }
    const bench::InputSets in(A.p, na * 2, B.p, nb * 2, s);
    const float alpha = 1.f, beta = 0.f;
    auto run_pick = [&](const LtPick& p, const void* a, const void* b, void* d) {
      BRAID_CUBLAS_CHECK(cublasLtMatmul(lt, op, &alpha, b, la, a, lb, &beta, d, lc, d, lc, &p.algo, ws.p, ws_bytes, s));
    };
    // Verdicts first: every pick's output against cublasGemmEx's.
    std::vector<unsigned long long> bits(picks.size()), far(picks.size());
    for (size_t i = 0; i < picks.size(); ++i) {
      BRAID_CUDA_CHECK(cudaMemsetAsync(D.p, 0, nd * 2, s));
      run_pick(picks[i], A.p, B.p, D.p);
      BRAID_CUDA_CHECK(cudaMemsetAsync(counts.p, 0, 2 * sizeof(unsigned long long), s));
      compare_bf16<<<1024, 256, 0, s>>>(static_cast<const __nv_bfloat16*>(Dref.p),
                                        static_cast<const __nv_bfloat16*>(D.p), nd,
                                        static_cast<unsigned long long*>(counts.p));
      BRAID_CHECK_LAUNCH();
      unsigned long long c[2] = {0, 0};
      BRAID_CUDA_CHECK(cudaMemcpyAsync(c, counts.p, sizeof(c), cudaMemcpyDeviceToHost, s));
      BRAID_CUDA_CHECK(cudaStreamSynchronize(s));
      bits[i] = c[0], far[i] = c[1];
    }
    std::vector<std::function<void(int)>> fns = {
        [&](int i) { cublas.run(in.a(i), in.b(i), D.p, sh.m, sh.n, sh.k, s); }};
    for (size_t j = 0; j < picks.size(); ++j)
      fns.push_back([&picks, &run_pick, &in, &D, j](int i) { run_pick(picks[j], in.a(i), in.b(i), D.p); });
    const auto t = bench::time_interleaved(nullptr, s, timing, 5, fns);
    const double t_ex = bench::summarize(t[0]).median_us;
    std::printf("%8lld %6lld %6lld | cublasGemmEx                                                    |         | %8.2f\n",
                (long long)sh.m, (long long)sh.n, (long long)sh.k, t_ex);
    for (size_t i = 0; i < picks.size(); ++i) {
      const auto& p = picks[i];
      const double us = bench::summarize(t[i + 1]).median_us;
      const bool ok = far[i] == 0;
      if (!ok) ++failures;
      std::printf("%8lld %6lld %6lld | %zu %5d %5u %6u %6d %3u %3u %4u %5u %4u %5.2f %9.1f | %s | %8.2f %.3f\n",
                  (long long)sh.m, (long long)sh.n, (long long)sh.k, i, p.id, p.tile, p.stages, p.splitk, p.reduction,
                  p.swizzle, p.custom, unsigned(p.inner), unsigned(p.cluster), p.waves, double(p.workspace) / 1048576.0,
                  ok ? (bits[i] == 0 ? "bitwise" : "1-ulp  ") : "FAILED ", us, t_ex / us);
      bench::Json row;
      row.add("bench", "gemm-cublaslt")
          .add("m", int64_t(sh.m))
          .add("n", int64_t(sh.n))
          .add("k", int64_t(sh.k))
          .add("dtype", "bf16")
          .add("rank", int(i))
          .add("algo_id", int(p.id))
          .add("tile_id", int64_t(p.tile))
          .add("stages_id", int64_t(p.stages))
          .add("splitk", int(p.splitk))
          .add("reduction_scheme", int64_t(p.reduction))
          .add("cta_swizzling", int64_t(p.swizzle))
          .add("custom_option", int64_t(p.custom))
          .add("inner_shape_id", int(p.inner))
          .add("cluster_shape_id", int(p.cluster))
          .add("waves", double(p.waves))
          .add("workspace_bytes", p.workspace)
          .add("lt_us", us)
          .add("gemmex_us", t_ex)
          .add("gemmex_vs_lt", t_ex / us)
          .add("wrong_bits", size_t(bits[i]))
          .add("wrong_beyond_1ulp", size_t(far[i]))
          .add("correct", ok)
          .add_context(ctx);
      bench::append_jsonl(json, row.str());
    }
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(op);
  }
  cublasLtDestroy(lt);
  return failures == 0 ? 0 : 3;
}

}  // namespace braid::overlap
