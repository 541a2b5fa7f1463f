// gemm_sm90.cu — the bf16 GEMM of FlashOverlap for sm_90a: CUTLASS 3.x collective main loop (TMA
// loads with multicast in a 2x1 cluster, wgmma, warp-specialized cooperative, persistent static
// scheduler), braid's signalling epilogue (signal_epilogue.cuh). The only translation unit that
// instantiates CUTLASS kernels: the instantiation table below lists them (keep it short, each
// costs minutes of CI compile time).
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "braid/env.hpp"
#include "braid/errors.hpp"
#include "braid/overlap.hpp"
#include "braid/stream_memops.cuh"
#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "signal_epilogue.cuh"
#include "sm90_gemm.cuh"
#include "tma_map.hpp"

namespace braid::overlap {

// BRAID_GEMM_SWIZZLE=1|2|4|8: the persistent scheduler's swizzle cap (strips of m-blocks walk N
// together, so a wave's footprint of B stays in L2); 1 keeps the plain AlongN order. Default 8: on 2x
// H100 it lifts braid's GEMM from 0.78-0.84x to 0.92-0.99x of cuBLAS at N = 16384 (03c2db9,
// `gemm-swizzle-*.jsonl`). Per problem the cap is lowered by swizzle_for (below). The host model of the
// execution order (execution_order) follows it through TileGrid::log_swizzle.
int gemm_swizzle() {
  static const int s = [] {
    const int v = int(env::integer("BRAID_GEMM_SWIZZLE", 1, 8).value_or(8));
    if (v != 1 && v != 2 && v != 4 && v != 8) throw UsageError("BRAID_GEMM_SWIZZLE: 1, 2, 4 or 8", __FILE__, __LINE__);
    return v;
  }();
  return s;
}

// BRAID_GEMM_RASTER=n|m: the persistent scheduler's raster (default n: AlongN, the order every measurement so far
// used). An experiment's knob for braid's GEMM against cuBLAS (K = 1024 and M >> N shapes ran at 0.87-0.93x of it
// on 2x H200, twenty-eighth session); FlashOverlap's kernel only (T3's keeps AlongN). plan() reads the raster the
// kernel gets, so the wave groups and the execution-order model follow it.
static bool gemm_raster_along_m() {
  static const bool m = env::choice("BRAID_GEMM_RASTER", {"n", "m"}).value_or("n") == "m";
  return m;
}

// The cap for one problem: gemm_swizzle(), lowered until the strips divide the tile grid
// (swizzle_without_phantoms, mapping.cpp).
static int swizzle_for(int tiles_m, int tiles_n, int cluster_m, int cluster_n) {
  return swizzle_without_phantoms(tiles_m, tiles_n, cluster_m, cluster_n, gemm_swizzle());
}

namespace {

// One kernel per tile configuration and epilogue form: the shared composition (sm90_gemm.cuh) with the signalling
// epilogue, general (every store path) or TMA-only (kTmaOnly: the layouts store_tile_tma writes, a quarter of the code).
template <int BM, int BN, int BK, int CM, int CN, bool kTmaOnly = false>
struct Kernel : detail::Sm90PersistentGemm<detail::SignalEpilogue<BM, BN, kTmaOnly>, BM, BN, BK, CM, CN> {
  using Base = detail::Sm90PersistentGemm<detail::SignalEpilogue<BM, BN, kTmaOnly>, BM, BN, BK, CM, CN>;
  using GemmKernel = typename Base::GemmKernel;

  static TileGrid plan(int m, int n, int k, int sm_count) {
    BRAID_REQUIRE((m / BM) % CM == 0 && (n / BN) % CN == 0,
                  "GEMM: the tile grid must divide into " + std::to_string(CM) + "x" + std::to_string(CN) +
                      " clusters (M a multiple of " + std::to_string(CM * BM) + ", N of " + std::to_string(CN * BN) + ")");
    detail::SignalEpilogueParams epi{};
    epi.d = reinterpret_cast<__nv_bfloat16*>(16);  // not dereferenced
    const int swz = swizzle_for((m + BM - 1) / BM, (n + BN - 1) / BN, CM, CN);
    auto args = Base::arguments(nullptr, nullptr, m, n, k, epi, sm_count, swz, gemm_raster_along_m());
    auto params = GemmKernel::to_underlying_arguments(args, nullptr);
    const dim3 grid = GemmKernel::get_grid_shape(params);
    TileGrid g;
    g.bm = BM;
    g.bn = BN;
    g.tiles_m = m / BM;
    g.tiles_n = n / BN;
    g.ctas = static_cast<int>(grid.x * grid.y * grid.z);
    g.cluster_m = CM;
    g.cluster_n = CN;
    g.raster_along_m = params.scheduler.raster_order_ == cutlass::gemm::kernel::detail::RasterOrder::AlongM;
    g.log_swizzle = params.scheduler.log_swizzle_size_;
    return g;
  }

  static void run(const void* a, const void* b, int m, int n, int k, const detail::SignalEpilogueParams& epi,
                  int sm_count, cudaStream_t stream) {
    const int swz = swizzle_for((m + BM - 1) / BM, (n + BN - 1) / BN, CM, CN);
    Base::run(Base::arguments(a, b, m, n, k, epi, sm_count, swz, gemm_raster_along_m()), stream, "this GEMM");
  }
};

// BRAID_GEMM_STOCK_EPILOGUE=1 (a diagnostic's compile-time switch for scripts/build-variant.sh, default 0: CI never
// compiles it): SignalGemm::run sends plain GEMMs (normal layout, no counter, no log, no stores elsewhere) to the same
// main loop and scheduler with CUTLASS's own TMA-store epilogue (CollectiveBuilder, EpilogueScheduleAuto), so that a
// timing against cuBLAS tells the epilogue's share of braid's gap from the main loop's. The overlapped ops keep
// braid's epilogue.
#ifndef BRAID_GEMM_STOCK_EPILOGUE
#define BRAID_GEMM_STOCK_EPILOGUE 0
#endif
#if BRAID_GEMM_STOCK_EPILOGUE
}  // namespace
}  // namespace braid::overlap
#include "cutlass/epilogue/collective/collective_builder.hpp"
namespace braid::overlap {
namespace {
template <int BM, int BN, int BK, int CM, int CN>
struct StockKernel {
  using TileShape = cute::Shape<cute::Int<BM>, cute::Int<BN>, cute::Int<BK>>;
  using ClusterShape = cute::Shape<cute::Int<CM>, cute::Int<CN>, cute::_1>;
  using Epi = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, cutlass::layout::RowMajor, 8,
      cutlass::bfloat16_t, cutlass::layout::RowMajor, 8, cutlass::epilogue::TmaWarpSpecializedCooperative>::CollectiveOp;
  using Base = detail::Sm90PersistentGemm<Epi, BM, BN, BK, CM, CN>;
  static void run(const void* a, const void* b, int m, int n, int k, __nv_bfloat16* d, int64_t ldd, int sm_count,
                  cudaStream_t stream) {
    typename Epi::Arguments ea{};
    ea.thread.alpha = 1.f;
    ea.thread.beta = 0.f;
    ea.ptr_C = nullptr;
    ea.ptr_D = reinterpret_cast<cutlass::bfloat16_t*>(d);
    cute::get<0>(ea.dD) = ldd;
    cute::get<2>(ea.dD) = int64_t(m) * ldd;
    const int swz = swizzle_for((m + BM - 1) / BM, (n + BN - 1) / BN, CM, CN);
    Base::run(Base::arguments(a, b, m, n, k, ea, sm_count, swz, gemm_raster_along_m()), stream, "the stock GEMM");
  }
};
#endif

// Each tile's cluster shape (CTAs along M x along N; TMA multicast shares B along M, A along N): compile-time switches
// for scripts/build-variant.sh A/Bs, default 2x1 for both (every measurement before the thirty-seventh session).
// cuBLAS's own fastest 128x128 kernel on short GEMMs clusters along N (bench gemm-cublaslt, one H200, 6137ba7: its
// 128x128 at cluster 1x2 in braid's terms ran 1024x4096x1024 in 15.8 us where its default 128x256 2x1 took 16.7).
#ifndef BRAID_GEMM_128x256_CM
#define BRAID_GEMM_128x256_CM 2
#endif
#ifndef BRAID_GEMM_128x256_CN
#define BRAID_GEMM_128x256_CN 1
#endif
#ifndef BRAID_GEMM_128x128_CM
#define BRAID_GEMM_128x128_CM 2
#endif
#ifndef BRAID_GEMM_128x128_CN
#define BRAID_GEMM_128x128_CN 1
#endif

// BRAID_OVERLAP_TMA_KERNEL (default 1 with the TMA-store epilogue; 0 for an A/B): runs whose stores are all TMA boxes
// (the normal and reordered layouts: plain GEMMs, FlashOverlap's groups) go to a second instantiation per tile whose
// epilogue has only that path (SignalEpilogue's kTmaOnly); all-to-all rows and parts stored into their owners keep the
// general kernel.
#ifndef BRAID_OVERLAP_TMA_KERNEL
#define BRAID_OVERLAP_TMA_KERNEL BRAID_OVERLAP_TMA_STORE
#endif
#if BRAID_OVERLAP_TMA_KERNEL && !BRAID_OVERLAP_TMA_STORE
#error "BRAID_OVERLAP_TMA_KERNEL needs BRAID_OVERLAP_TMA_STORE"
#endif

// The instantiation table (TileConfig order): the general kernels, then the TMA-only ones.
using K128x256 = Kernel<128, 256, 64, BRAID_GEMM_128x256_CM, BRAID_GEMM_128x256_CN>;
using K128x128 = Kernel<128, 128, 64, BRAID_GEMM_128x128_CM, BRAID_GEMM_128x128_CN>;
#if BRAID_OVERLAP_TMA_KERNEL
using K128x256Tma = Kernel<128, 256, 64, BRAID_GEMM_128x256_CM, BRAID_GEMM_128x256_CN, true>;
using K128x128Tma = Kernel<128, 128, 64, BRAID_GEMM_128x128_CM, BRAID_GEMM_128x128_CN, true>;
#endif

// One dispatch point from the runtime TileConfig to the template: K is the table's general kernel (DISPATCH) or its
// TMA-only one (DISPATCH_TMA) for the tile.
#define BRAID_OVERLAP_SWITCH(cfg, K, K256, K128, ...)                         \
  switch (cfg) {                                                              \
    case TileConfig::k128x256: { using K = K256; __VA_ARGS__; break; }        \
    case TileConfig::k128x128: { using K = K128; __VA_ARGS__; break; }        \
    default: throw UsageError("unknown tile config", __FILE__, __LINE__);    \
  }
#define BRAID_OVERLAP_DISPATCH(cfg, K, ...) BRAID_OVERLAP_SWITCH(cfg, K, K128x256, K128x128, __VA_ARGS__)
#define BRAID_OVERLAP_DISPATCH_TMA(cfg, K, ...) BRAID_OVERLAP_SWITCH(cfg, K, K128x256Tma, K128x128Tma, __VA_ARGS__)

int device_sm_count() {
  int dev = 0, sms = 0;
  BRAID_CUDA_CHECK(cudaGetDevice(&dev));
  BRAID_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  return sms;
}

int tile_bm(TileConfig) { return 128; }
int tile_bn(TileConfig c) { return c == TileConfig::k128x256 ? 256 : 128; }

}  // namespace

const char* tile_config_name(TileConfig c) {
  switch (c) {
    case TileConfig::k128x256: return "128x256";
    case TileConfig::k128x128: return "128x128";
    case TileConfig::kAuto: return "auto";
  }
  return "?";
}

TileConfig choose_tile_config(int64_t m, int64_t n, int64_t k, int sm_count) {
  if (sm_count <= 0) sm_count = 132;
  const int64_t big = (m / 128) * (n / 256);
  if (n % 256 == 0 && big >= 2 * sm_count) return TileConfig::k128x256;
  return TileConfig::k128x128;
}

SignalGemm::SignalGemm(TileConfig cfg, int sm_count) : cfg_(cfg), sm_count_(sm_count) {
  BRAID_REQUIRE(cfg == TileConfig::k128x256 || cfg == TileConfig::k128x128, "SignalGemm: pick a tile config");
  if (sm_count_ <= 0) sm_count_ = device_sm_count();
  BRAID_OVERLAP_DISPATCH(cfg_, K, K::preload());  // no lazy load inside a run (sm90_gemm.cuh)
#if BRAID_OVERLAP_TMA_KERNEL
  BRAID_OVERLAP_DISPATCH_TMA(cfg_, K, K::preload());
#endif
#if BRAID_GEMM_STOCK_EPILOGUE
  StockKernel<128, 256, 64, 2, 1>::Base::preload();
  StockKernel<128, 128, 64, 2, 1>::Base::preload();
#endif
}
SignalGemm::~SignalGemm() = default;

TileGrid SignalGemm::plan(int64_t m, int64_t n, int64_t k) const {
  return plan_for(cfg_, sm_count_, m, n, k);
}

TileGrid SignalGemm::plan_for(TileConfig cfg, int sm_count, int64_t m, int64_t n, int64_t k) {
  BRAID_REQUIRE(cfg == TileConfig::k128x256 || cfg == TileConfig::k128x128, "SignalGemm: pick a tile config");
  const int bm = tile_bm(cfg), bn = tile_bn(cfg);
  BRAID_REQUIRE(m > 0 && n > 0 && k > 0, "GEMM: empty problem");
  BRAID_REQUIRE(m % bm == 0 && n % bn == 0,
                "GEMM: M must be a multiple of " + std::to_string(bm) + " and N of " + std::to_string(bn));
  BRAID_REQUIRE(k % 64 == 0, "GEMM: K must be a multiple of 64");
  BRAID_REQUIRE(m < (int64_t(1) << 31) && n < (int64_t(1) << 31) && k < (int64_t(1) << 31), "GEMM: too large");
  if (sm_count <= 0) sm_count = device_sm_count();
  TileGrid g;
  BRAID_OVERLAP_DISPATCH(cfg, K, g = K::plan(int(m), int(n), int(k), sm_count));
  return g;
}

void SignalGemm::run(const void* a, const void* b, int64_t m, int64_t n, int64_t k, const EpilogueArgs& e,
                     cudaStream_t stream) {
  const TileGrid g = plan(m, n, k);
  BRAID_REQUIRE(e.d != nullptr, "GEMM: no output");
  BRAID_REQUIRE(e.parts >= 1 && (e.parts & (e.parts - 1)) == 0 && g.bm / e.parts >= 8,
                "GEMM: parts must be a power of two with at least 8 rows per sub-tile");
  BRAID_REQUIRE(e.counters == nullptr || e.tile_group != nullptr, "GEMM: counters need tile_group");
  BRAID_REQUIRE(e.tile_slot == nullptr || (e.tile_group && e.group_first), "GEMM: incomplete mapping tables");
  BRAID_REQUIRE(reinterpret_cast<uintptr_t>(a) % 16 == 0 && reinterpret_cast<uintptr_t>(b) % 16 == 0,
                "GEMM: A and B must be 16-byte aligned");
  detail::SignalEpilogueParams p{};
  p.d = static_cast<__nv_bfloat16*>(e.d);
  p.ldd = e.ldd > 0 ? e.ldd : n;
  // Both store paths write 16 bytes at a time (st.global.v4, TMA boxes): SignalEpilogue::can_implement's terms.
  BRAID_REQUIRE(p.ldd >= n && p.ldd % 8 == 0 && reinterpret_cast<uintptr_t>(e.d) % 16 == 0,
                "GEMM: D must be 16-byte aligned with a row stride (ldd) >= N and a multiple of 8 elements");
  p.tile_slot = e.tile_slot;
  p.tile_group = e.tile_group;
  p.group_first = e.group_first;
  p.counters = e.counters;
  p.wave_log = e.wave_log;
  p.tiles_n = g.tiles_n;
  int lp = 0;
  while ((1 << lp) < e.parts) ++lp;
  p.log2_parts = lp;
  if (e.a2a_row_code != nullptr) {
    BRAID_REQUIRE(e.a2a_tile_dest_base != nullptr && e.a2a_world >= 1 && e.a2a_world <= 16 && e.tile_group,
                  "GEMM: incomplete all-to-all tables");
    p.a2a_row_code = e.a2a_row_code;
    p.a2a_tile_dest_base = e.a2a_tile_dest_base;
    p.a2a_world = e.a2a_world;
    if (e.a2a_dest_ptrs != nullptr) {
      BRAID_REQUIRE(e.a2a_ld >= g.bn && e.a2a_ld % 8 == 0, "GEMM: all-to-all stores need a row stride >= BN, % 8");
      p.a2a_dest_ptrs = reinterpret_cast<__nv_bfloat16* const*>(e.a2a_dest_ptrs);
      p.a2a_ld = e.a2a_ld;
    }
  }
  if (e.part_dst != nullptr) {
    BRAID_REQUIRE(e.a2a_row_code == nullptr && e.tile_slot != nullptr && e.counters != nullptr &&
                      e.part_flags != nullptr && e.part_rank >= 0 && e.part_rank < e.parts,
                  "GEMM: parts stored into their owners need the reordered layout, counters, flags and a rank < parts");
    p.part_dst = e.part_dst;
    p.part_flags = e.part_flags;
    p.part_rank = e.part_rank;
    p.part_bulk = e.part_bulk && (e.parts - 1) * (g.bm / e.parts) <= g.bm / 2 ? 1 : 0;
  }
#if BRAID_OVERLAP_TMA_STORE
  if (e.a2a_row_code == nullptr && e.part_dst == nullptr) {  // the layouts store_tile_tma writes
    p.tma_store = 1;
    // Boxes of one part's rows (the whole tile's in the normal layout); per warpgroup (BRAID_OVERLAP_TMA_WG) at most
    // the 64 rows one consumer warpgroup holds.
    const uint32_t part_rows = uint32_t(e.tile_slot == nullptr ? g.bm : g.bm >> lp);
    const uint32_t box_rows = BRAID_OVERLAP_TMA_WG ? std::min<uint32_t>(part_rows, 64) : part_rows;
    if (e.tile_slot == nullptr)
      detail::encode_bf16_panel_map(&p.tma_d, p.d, uint64_t(m), uint64_t(n), uint64_t(p.ldd), box_rows);
    else  // reordered: (M*N/BN, BN) rows of BN
      detail::encode_bf16_panel_map(&p.tma_d, p.d, uint64_t(m) * uint64_t(n) / uint64_t(g.bn), uint64_t(g.bn),
                                    uint64_t(g.bn), box_rows);
  }
#endif
#if BRAID_GEMM_STOCK_EPILOGUE
  if (e.counters == nullptr && e.wave_log == nullptr && e.tile_slot == nullptr && e.a2a_row_code == nullptr &&
      e.part_dst == nullptr) {
    if (cfg_ == TileConfig::k128x256)
      StockKernel<128, 256, 64, 2, 1>::run(a, b, int(m), int(n), int(k), p.d, p.ldd, sm_count_, stream);
    else
      StockKernel<128, 128, 64, 2, 1>::run(a, b, int(m), int(n), int(k), p.d, p.ldd, sm_count_, stream);
    return;
  }
#endif
#if BRAID_OVERLAP_TMA_KERNEL
  if (p.tma_store != 0) {  // every tile by TMA boxes: the kernel with only that epilogue path
    BRAID_OVERLAP_DISPATCH_TMA(cfg_, K, K::run(a, b, int(m), int(n), int(k), p, sm_count_, stream));
    return;
  }
#endif
  BRAID_OVERLAP_DISPATCH(cfg_, K, K::run(a, b, int(m), int(n), int(k), p, sm_count_, stream));
}

namespace detail {

// cuTensorMapEncodeTiled (CUDA 12 ABI) through the runtime's entry-point query: libcuda is never linked.
using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

void encode_bf16_panel_map(CUtensorMap* map, void* d, uint64_t rows, uint64_t cols, uint64_t ld, uint32_t box_rows) {
  static void* fn = memops::required_entry_point("cuTensorMapEncodeTiled", "the TMA epilogues (tensor maps)");
  const cuuint64_t dims[2] = {cols, rows};
  const cuuint64_t strides[1] = {ld * 2};
  const cuuint32_t box[2] = {64, box_rows};
  const cuuint32_t elem[2] = {1, 1};
  const CUresult rc = reinterpret_cast<EncodeTiledFn>(fn)(
      map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, d, dims, strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (rc != CUDA_SUCCESS) ::braid::detail::throw_cu(rc, "cuTensorMapEncodeTiled", __FILE__, __LINE__);
}

}  // namespace detail
}  // namespace braid::overlap
