// src/model/moe_gemm_impl.cuh — the CUTLASS side of GroupedGemm (moe_gemm.hpp), shared by its three translation
// units (moe_gemm_fprop.cu, moe_gemm_dgrad.cu, moe_gemm_wgrad.cu: one kernel instantiation each, so that CI compiles
// them in parallel). Include only from those.
//
// A call is two stream-ordered launches on the caller's stream:
//   1. fill_kernel (one block): an exclusive prefix sum of rows[] gives every group's first row off_g; it writes the
//      device problem shapes (M, N, K) and the per-group pointer and stride arrays that the grouped kernel reads;
//   2. the CUTLASS 3.x sm_90a ptr-array grouped GEMM (TMA loads, no cluster by default (BRAID_MOE_CLUSTER_M), wgmma, two
//      consumer warpgroups per 128x256x64 tile, persistent group scheduler, TMA-store epilogue D = alpha·acc +
//      beta·C), given no host problem shapes: it launches one CTA per SM (sm_count) and walks the groups' tiles on
//      the device; every CTA rewrites its TMA descriptors (in the workspace) per group, with that group's extents, so
//      boxes past a group's rows read zeros and store nothing.
// The Params of step 2 hold only device addresses of State's arrays, groups, beta and the SM count, never rows, so
// a captured graph replays with whatever rows[] holds then.
//
// Operands in CUTLASS terms (C/D row-major (M, N), ld N; ptr-array "Layout*" tags, one stride per group):
//   fprop: A RowMajor (M = rows_g, K), ld K;     B RowMajor    (K, N) = W_g [K, N], ld N
//   dgrad: A RowMajor (M = rows_g, K), ld K;     B ColumnMajor (K, N) = W_g [N, K]^T, ld K
//   wgrad: A ColumnMajor (M, K = rows_g) = A_g^T (A_g [rows_g, M], ld M); B RowMajor (K = rows_g, N), ld N;
//          C = D = G_g (in place; C read only when beta != 0); an empty group has M = 0 (no tiles; see moe_gemm.hpp).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cub/block/block_scan.cuh>
#include <string>
#include <type_traits>

#include "braid/errors.hpp"
#include "cute/tensor.hpp"
#include "cutlass/arch/config.h"
#include "cutlass/cutlass.h"
#include "moe_gemm.hpp"

// Device-side TMA descriptor updates (tensormap.replace) need CUDA >= 12.3; the kernel itself needs sm_90a.
#if defined(CUTLASS_ARCH_MMA_MODIFIABLE_TMA_SM90_SUPPORTED)
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/operations.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/group_array_problem_shape.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#endif

namespace braid::model::detail {
namespace moe {

enum class Kind { kFprop, kDgrad, kWgrad };

inline const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kFprop: return "GroupedGemm::fprop";
    case Kind::kDgrad: return "GroupedGemm::dgrad";
    case Kind::kWgrad: return "GroupedGemm::wgrad";
  }
  return "GroupedGemm";
}

// The tile, cluster and schedule: compile-time, one choice for the whole build. The defaults are the measured best
// of the forty-seventh and forty-eighth sessions' (bench/results/h200x2/README.md: 256x128, 128x128 pingpong and a
// 2x1 cluster all slower than 128x256x64 cooperative without a cluster); the macros exist for variant builds (scripts/build-variant.sh over the three
// translation units, device-run.sh's moe-tile): BRAID_MOE_TILE_M/_N/_K, BRAID_MOE_CLUSTER_M, BRAID_MOE_PINGPONG=1.
#ifndef BRAID_MOE_TILE_M
#define BRAID_MOE_TILE_M 128
#endif
#ifndef BRAID_MOE_TILE_N
#define BRAID_MOE_TILE_N 256
#endif
#ifndef BRAID_MOE_TILE_K
#define BRAID_MOE_TILE_K 64
#endif
#ifndef BRAID_MOE_CLUSTER_M
#define BRAID_MOE_CLUSTER_M 1  // 2 until the forty-eighth session: 1 measured 4-10% faster on fprop and dgrad (moe-tile)
#endif
#ifndef BRAID_MOE_PINGPONG
#define BRAID_MOE_PINGPONG 0
#endif

struct config {
  static constexpr int kFillThreads = 256;        // fill_kernel's one block: 256 groups per scan step
  static constexpr int kAlignElems = 8;           // 16-byte TMA alignment of every row and base pointer, in bf16
  static constexpr size_t kSlotBytes = 16;        // one group's entry in any device array (>= every element below)
  static constexpr size_t kArrayAlign = 256;      // each array starts at a multiple of this
  static constexpr int kScaleThreads = 256;       // wgrad's empty-group scaling kernel
  static constexpr int kScaleMaxBlocks = 64;      // ... blocks per group, at most
  static constexpr int kClusterM = BRAID_MOE_CLUSTER_M;  // the kernel's cluster (M x N = kClusterM x 1): also the smallest grid
  static constexpr bool kPingpong = BRAID_MOE_PINGPONG != 0;  // else cooperative (two consumer warpgroups, one tile)
  static_assert(kFillThreads % 32 == 0 && kFillThreads >= 32, "whole warps");
  static_assert(kSlotBytes % 8 == 0 && kArrayAlign % kSlotBytes == 0, "aligned slots");
  static_assert(kAlignElems * sizeof(bf16) == 16, "TMA: 16-byte global strides and addresses");
};

// The device arrays of State::args, in this order, each array_bytes(max_groups) long.
enum Array : int { kShapes, kPtrA, kPtrB, kPtrC, kPtrD, kStrideA, kStrideB, kStrideC, kStrideD, kArrays };

inline size_t array_bytes(int max_groups) {
  const size_t b = size_t(max_groups) * config::kSlotBytes;
  return (b + config::kArrayAlign - 1) / config::kArrayAlign * config::kArrayAlign;
}

// Per kind, defined in that kind's translation unit: loads the kernel (sets its dynamic shared-memory size, so no
// call has to: a call may be inside a stream capture) and returns its workspace bytes at sm_count SMs.
size_t prepare_fprop(int device, int sm_count);
size_t prepare_dgrad(int device, int sm_count);
size_t prepare_wgrad(int device, int sm_count);

// One call's arguments. fprop/dgrad: n, k (m unused); wgrad: m, n (K = rows_g), beta.
struct Call {
  const int* rows;
  int groups;
  int64_t m, n, k;
  const bf16* a;
  const bf16* b;
  bf16* d;
  float beta;
};

}  // namespace moe

// What a GroupedGemm owns (device memory freed here, so a constructor that throws half-way leaks nothing).
struct GroupedGemm::State {
  int max_groups = 0;
  int device = 0;
  int device_sms = 0;
  int sm_count = 0;             // the persistent grid's SMs: device_sms unless set_sm_count capped it
  int swizzle = 1;              // the group scheduler's swizzle cap (BRAID_MOE_GEMM_SWIZZLE: 1, 2, 4, 8)
  bool along_n = false;         // its raster (BRAID_MOE_GEMM_RASTER: m, the default, or n)
  void* args = nullptr;         // moe::kArrays arrays of array_bytes each
  size_t array_bytes = 0;
  void* workspace = nullptr;    // CUTLASS's per-SM TMA descriptors (the largest of the three kinds at device_sms)
  size_t workspace_bytes = 0;

  State() = default;
  State(const State&) = delete;
  State& operator=(const State&) = delete;
  ~State() {
    if (args) cudaFree(args);  // no throw from a destructor; a failure here has no one to report to
    if (workspace) cudaFree(workspace);
  }
  template <class T>
  T* array(moe::Array a) const {
    return reinterpret_cast<T*>(static_cast<char*>(args) + size_t(a) * array_bytes);
  }
};

namespace moe {

// The checks every call makes before it launches anything (UsageError; groups = 0 passes and launches nothing).
inline void check_call(const GroupedGemm::State& st, Kind kind, const Call& c) {
  const std::string what = kind_name(kind);
  BRAID_REQUIRE(c.groups >= 0, what + ": groups must be >= 0");
  BRAID_REQUIRE(c.groups <= st.max_groups,
                what + ": groups " + std::to_string(c.groups) + " > max_groups " + std::to_string(st.max_groups));
  const bool wgrad = kind == Kind::kWgrad;
  const int64_t dims[2] = {wgrad ? c.m : c.n, wgrad ? c.n : c.k};
  const char* names[2] = {wgrad ? "M" : "N", wgrad ? "N" : "K"};
  for (int i = 0; i < 2; ++i) {
    if (dims[i] <= 0 || dims[i] % config::kAlignElems != 0 || dims[i] > int64_t(INT32_MAX))
      throw UsageError(what + ": " + names[i] + " = " + std::to_string(dims[i]) + " must be a positive multiple of " +
                           std::to_string(config::kAlignElems) + " below 2^31 (16-byte TMA rows)",
                       __FILE__, __LINE__);
  }
  if (c.groups == 0) return;
  int dev = -1;
  BRAID_CUDA_CHECK(cudaGetDevice(&dev));
  BRAID_REQUIRE(dev == st.device, what + ": called on device " + std::to_string(dev) + ", the object belongs to " +
                                      std::to_string(st.device));
  BRAID_REQUIRE(c.rows != nullptr, what + ": rows is null");
  const void* ptrs[3] = {c.a, c.b, c.d};
  const char* pnames[3] = {"A", wgrad ? "B" : "W", wgrad ? "G" : "D"};
  for (int i = 0; i < 3; ++i) {
    if (ptrs[i] == nullptr || reinterpret_cast<uintptr_t>(ptrs[i]) % 16 != 0)
      throw UsageError(what + ": " + pnames[i] + " must be a non-null 16-byte aligned device pointer", __FILE__,
                       __LINE__);
  }
}

#if defined(CUTLASS_ARCH_MMA_MODIFIABLE_TMA_SM90_SUPPORTED)

// The stride of a packed row- or column-major operand of the ptr-array kernel: modes (rows, cols, batch) with one
// dynamic mode among the first two (the leading dimension), the other _1 and the batch _0. This is
// cutlass::make_cute_packed_stride's job, which lives in CUTLASS's tools/util (not in the nvidia-cutlass wheel's
// headers), here callable on the device.
template <class Stride>
__host__ __device__ __forceinline__ Stride leading_stride(int64_t ld) {
  using M0 = std::remove_cvref_t<decltype(cute::get<0>(std::declval<Stride&>()))>;
  using M1 = std::remove_cvref_t<decltype(cute::get<1>(std::declval<Stride&>()))>;
  using M2 = std::remove_cvref_t<decltype(cute::get<2>(std::declval<Stride&>()))>;
  static_assert(cute::rank_v<Stride> == 3, "(rows, cols, batch)");
  static_assert(cute::is_static_v<M0> != cute::is_static_v<M1>, "exactly one leading dimension");
  static_assert(cute::is_static_v<M2>, "grouped: no batch stride");
  Stride s{};
  if constexpr (cute::is_static_v<M0>) {
    static_assert(M0::value == 1, "unit stride");
    cute::get<1>(s) = ld;
  } else {
    static_assert(M1::value == 1, "unit stride");
    cute::get<0>(s) = ld;
  }
  return s;
}

// What the three kinds share: tile, cluster, problem shape and the whole epilogue (D = alpha·acc + beta·C, C and D
// bf16 row-major, one pointer and stride per group).
using Element = cutlass::bfloat16_t;
using LayoutC = cutlass::layout::RowMajor;
using TileShape = cute::Shape<cute::Int<BRAID_MOE_TILE_M>, cute::Int<BRAID_MOE_TILE_N>, cute::Int<BRAID_MOE_TILE_K>>;
using EpilogueSchedule = std::conditional_t<config::kPingpong, cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong,
                                            cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative>;
using KernelSchedule = std::conditional_t<config::kPingpong, cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpong,
                                          cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative>;
using ClusterShape = cute::Shape<cute::Int<config::kClusterM>, cute::_1, cute::_1>;
using ProblemShape = cutlass::gemm::GroupProblemShape<cute::Shape<int, int, int>>;  // (M, N, K) per group
using Epilogue = cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto, float, float, Element, LayoutC*, config::kAlignElems, Element,
    LayoutC*, config::kAlignElems, EpilogueSchedule,
    cutlass::epilogue::fusion::LinearCombination<Element, float>>::CollectiveOp;

// One grouped kernel per kind (the three differ only in A's and B's layouts). The epilogue comes in as a parameter
// (Epi = Epilogue) and the templates below take the kernel struct, never the kind: nvcc's host-side output spells the
// builder's epilogue type out in full, and inside a template definition the host compiler rejects that spelling (a
// dependent Sm90TmaBuilderImpl<...>::GmemStrideTypeC without typename). Only non-template code (the aliases below,
// the translation units) names Epilogue.
template <Kind kKind_, class Epi>
struct GroupedKernel {
  static constexpr Kind kKind = kKind_;
  using Element = moe::Element;
  using LayoutA = std::conditional_t<kKind == Kind::kWgrad, cutlass::layout::ColumnMajor, cutlass::layout::RowMajor>;
  using LayoutB = std::conditional_t<kKind == Kind::kDgrad, cutlass::layout::ColumnMajor, cutlass::layout::RowMajor>;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Element, LayoutA*, config::kAlignElems, Element, LayoutB*,
      config::kAlignElems, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epi::SharedStorage))>,
      KernelSchedule>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, Mainloop, Epi>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

  using Shape = typename ProblemShape::UnderlyingProblemShape;
  using StrideA = typename Kernel::InternalStrideA;
  using StrideB = typename Kernel::InternalStrideB;
  using StrideC = typename Kernel::InternalStrideC;
  using StrideD = typename Kernel::InternalStrideD;

  static_assert(Kernel::IsGroupedGemmKernel, "per-group strides (Layout* tags)");
  static_assert(sizeof(Shape) <= config::kSlotBytes && sizeof(StrideA) <= config::kSlotBytes &&
                    sizeof(StrideB) <= config::kSlotBytes && sizeof(StrideC) <= config::kSlotBytes &&
                    sizeof(StrideD) <= config::kSlotBytes && sizeof(Element*) <= config::kSlotBytes,
                "every array element fits one slot");
  static_assert(std::is_same_v<StrideC, StrideD>, "C and D share one layout (wgrad: in place)");
  // The epilogue's shared memory (carved out of the stage count) must leave the main loop 4 stages.
  static_assert(Mainloop::DispatchPolicy::Stages >= 4, "the main loop needs 4 stages (128x256x64: 4 fit)");
  static_assert(cute::size(typename Kernel::TiledMma{}) == (config::kPingpong ? 128 : 256),
                "cooperative: two consumer warpgroups on one tile; pingpong: one each, on two tiles");
  static_assert(Kernel::SharedStorageSize <= 232448, "over sm_90's 227 KiB of shared memory per block");

  // The arguments of one call: every array is State's; no host problem shapes (the kernel reads the device's).
  static typename Gemm::Arguments arguments(const GroupedGemm::State& st, int groups, float beta, int sm_count) {
    typename Gemm::Arguments args{};
    args.mode = cutlass::gemm::GemmUniversalMode::kGrouped;
    args.problem_shape = ProblemShape{groups, st.array<Shape>(kShapes), nullptr};
    args.mainloop.ptr_A = st.array<const Element*>(kPtrA);
    args.mainloop.dA = st.array<StrideA>(kStrideA);
    args.mainloop.ptr_B = st.array<const Element*>(kPtrB);
    args.mainloop.dB = st.array<StrideB>(kStrideB);
    args.epilogue.thread.alpha = 1.f;
    args.epilogue.thread.beta = beta;  // 0: C is not read (the fusion clears its C fragment instead)
    args.epilogue.ptr_C = st.array<const Element*>(kPtrC);
    args.epilogue.dC = st.array<StrideC>(kStrideC);
    args.epilogue.ptr_D = st.array<Element*>(kPtrD);
    args.epilogue.dD = st.array<StrideD>(kStrideD);
    args.hw_info.device_id = st.device;
    args.hw_info.sm_count = sm_count;
    using Raster = decltype(args.scheduler.raster_order);
    args.scheduler.max_swizzle_size = st.swizzle;
    args.scheduler.raster_order = st.along_n ? Raster::AlongN : Raster::AlongM;
    return args;
  }
};

using FpropKernel = GroupedKernel<Kind::kFprop, Epilogue>;
using DgradKernel = GroupedKernel<Kind::kDgrad, Epilogue>;
using WgradKernel = GroupedKernel<Kind::kWgrad, Epilogue>;

// fill_kernel's view of one call: the call's operands and State's arrays, typed for the kind's kernel K.
template <class K>
struct FillArgs {
  using Element = typename K::Element;
  const int* rows;
  int groups;
  int64_t m, n, k;
  const Element* a;
  const Element* b;
  Element* d;
  typename K::Shape* shapes;           // [groups] (M, N, K)
  const Element** ptr_a;               // [groups]
  const Element** ptr_b;               // [groups]
  const Element** ptr_c;               // [groups] = ptr_d (fprop/dgrad: beta = 0, never read)
  Element** ptr_d;                     // [groups]
  typename K::StrideA* da;             // [groups]
  typename K::StrideB* db;             // [groups]
  typename K::StrideC* dc;             // [groups]
  typename K::StrideD* dd;             // [groups]
};

// One block: for each chunk of kFillThreads groups, an exclusive scan of the row counts (plus the chunks before)
// gives off_g; thread g writes group g's entries. Any number of groups.
template <class K>
__global__ void __launch_bounds__(config::kFillThreads) fill_kernel(FillArgs<K> f) {
  using Scan = cub::BlockScan<int64_t, config::kFillThreads>;
  __shared__ typename Scan::TempStorage temp;
  int64_t carry = 0;  // rows of the chunks before this one
  for (int base = 0; base < f.groups; base += config::kFillThreads) {
    const int g = base + int(threadIdx.x);
    const int64_t r = g < f.groups ? int64_t(max(f.rows[g], 0)) : 0;
    int64_t off = 0, total = 0;
    Scan(temp).ExclusiveSum(r, off, total);
    __syncthreads();  // temp is reused by the next chunk's scan
    off += carry;
    carry += total;
    if (g >= f.groups) continue;
    if constexpr (K::kKind == Kind::kWgrad) {
      // A_g [r, M] (ld M) read as (M, K = r) column-major; B_g [r, N] (ld N); G_g [M, N] in place.
      f.shapes[g] = typename K::Shape{r > 0 ? int(f.m) : 0, int(f.n), int(r)};
      f.ptr_a[g] = f.a + off * f.m;
      f.da[g] = leading_stride<typename K::StrideA>(f.m);
      f.ptr_b[g] = f.b + off * f.n;
      f.db[g] = leading_stride<typename K::StrideB>(f.n);
      typename K::Element* gg = f.d + int64_t(g) * f.m * f.n;
      f.ptr_c[g] = gg;
      f.ptr_d[g] = gg;
    } else {
      // A rows [off, off + r) (ld K); W_g = W + g·K·N ([K, N] fprop, [N, K] dgrad); D rows [off, off + r) (ld N).
      f.shapes[g] = typename K::Shape{int(r), int(f.n), int(f.k)};
      f.ptr_a[g] = f.a + off * f.k;
      f.da[g] = leading_stride<typename K::StrideA>(f.k);
      f.ptr_b[g] = f.b + int64_t(g) * f.n * f.k;
      f.db[g] = leading_stride<typename K::StrideB>(K::kKind == Kind::kFprop ? f.n : f.k);
      f.ptr_c[g] = f.d + off * f.n;
      f.ptr_d[g] = f.d + off * f.n;
    }
    f.dc[g] = leading_stride<typename K::StrideC>(f.n);
    f.dd[g] = leading_stride<typename K::StrideD>(f.n);
  }
}

// Launches fill_kernel and the grouped GEMM of one (checked) call on s.
template <class K>
void run(const GroupedGemm::State& st, const Call& c, cudaStream_t s) {
  using E = typename K::Element;
  const std::string what = kind_name(K::kKind);
  FillArgs<K> f{};
  f.rows = c.rows;
  f.groups = c.groups;
  f.m = c.m;
  f.n = c.n;
  f.k = c.k;
  f.a = reinterpret_cast<const E*>(c.a);
  f.b = reinterpret_cast<const E*>(c.b);
  f.d = reinterpret_cast<E*>(c.d);
  f.shapes = st.array<typename K::Shape>(kShapes);
  f.ptr_a = st.array<const E*>(kPtrA);
  f.ptr_b = st.array<const E*>(kPtrB);
  f.ptr_c = st.array<const E*>(kPtrC);
  f.ptr_d = st.array<E*>(kPtrD);
  f.da = st.array<typename K::StrideA>(kStrideA);
  f.db = st.array<typename K::StrideB>(kStrideB);
  f.dc = st.array<typename K::StrideC>(kStrideC);
  f.dd = st.array<typename K::StrideD>(kStrideD);
  fill_kernel<K><<<1, config::kFillThreads, 0, s>>>(f);
  BRAID_CHECK_LAUNCH();

  // Fewer SMs than one cluster would give an empty grid (CUTLASS rounds the grid down to whole clusters).
  const int sm_count = std::max(st.sm_count, config::kClusterM);
  auto args = K::arguments(st, c.groups, K::kKind == Kind::kWgrad ? c.beta : 0.f, sm_count);
  cutlass::Status status = K::Gemm::can_implement(args);
  if (status != cutlass::Status::kSuccess)
    throw UsageError(what + ": CUTLASS cannot implement the grouped GEMM: " + cutlassGetStatusString(status), __FILE__,
                     __LINE__);
  const size_t need = K::Gemm::get_workspace_size(args);
  BRAID_REQUIRE(need <= st.workspace_bytes, what + ": CUTLASS workspace " + std::to_string(need) + " B > the " +
                                                std::to_string(st.workspace_bytes) + " B allocated");
  status = K::Kernel::initialize_workspace(args, st.workspace, s);
  if (status != cutlass::Status::kSuccess)
    throw CudaError(what + ": CUTLASS initialize_workspace: " + cutlassGetStatusString(status), __FILE__, __LINE__);
  // Not GemmUniversalAdapter::initialize: that sets the kernel's shared-memory attribute on every call (prepare()
  // did it once).
  typename K::Gemm::Params params = K::Kernel::to_underlying_arguments(args, st.workspace);
  status = K::Gemm::run(params, s);
  if (status != cutlass::Status::kSuccess)
    throw CudaError(what + ": CUTLASS run: " + cutlassGetStatusString(status) + " (" +
                        cudaGetErrorString(cudaGetLastError()) + ")",
                    __FILE__, __LINE__);
  BRAID_CHECK_LAUNCH();
}

// Loads K's kernel and sets its dynamic shared-memory size (once, outside any capture); returns its workspace bytes
// at sm_count SMs (the per-SM TMA descriptors: independent of the groups and the problem).
template <class K>
size_t prepare(int device, int sm_count) {
  using Kernel = typename K::Kernel;
  cudaFuncAttributes attr{};
  BRAID_CUDA_CHECK(cudaFuncGetAttributes(&attr, cutlass::device_kernel<Kernel>));
  BRAID_CUDA_CHECK(cudaFuncSetAttribute(cutlass::device_kernel<Kernel>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        int(Kernel::SharedStorageSize)));
  typename K::Gemm::Arguments args{};
  args.mode = cutlass::gemm::GemmUniversalMode::kGrouped;
  args.problem_shape = ProblemShape{1, nullptr, nullptr};
  args.hw_info.device_id = device;
  args.hw_info.sm_count = sm_count;
  return K::Gemm::get_workspace_size(args);
}

#else  // no device-side TMA descriptor updates in this toolkit: the object builds, a call throws

struct FpropKernel { static constexpr Kind kKind = Kind::kFprop; };
struct DgradKernel { static constexpr Kind kKind = Kind::kDgrad; };
struct WgradKernel { static constexpr Kind kKind = Kind::kWgrad; };

template <class K>
void run(const GroupedGemm::State&, const Call&, cudaStream_t) {
  throw UnavailableError(std::string(kind_name(K::kKind)) +
                             ": needs CUDA >= 12.3 (CUTLASS_ARCH_MMA_MODIFIABLE_TMA_SM90_SUPPORTED) and sm_90a",
                         __FILE__, __LINE__);
}

template <class K>
size_t prepare(int, int) {
  return 0;
}

#endif

}  // namespace moe
}  // namespace braid::model::detail
