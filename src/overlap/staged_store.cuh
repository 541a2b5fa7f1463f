// staged_store.cuh — write a (BM, BN) fp32 accumulator tile through shared memory so that every
// global access is a 16-byte vector along a row (8 consecutive bf16), whatever the destination:
// local HBM, a peer GPU's memory over NVLink (remote stores or NVLink atomics), a reordered slot.
//
// Why: the wgmma accumulator layout gives each thread column *pairs* spread over 8 rows per warp;
// storing straight from registers issues 4-byte stores that fill half of each 32-byte sector, and
// over NVLink each becomes its own small masked write. Staging costs two CTA-scope barriers per
// pass and BM * kCols * 4 bytes of shared memory; the global side becomes full-sector, 512-byte
// contiguous runs per warp.
//
// Shared memory layout (one pass = kCols columns of the tile, fp32, so a later add in fp32 rounds
// once): row r holds kCols floats = kCols/4 16-byte chunks; the chunk index is XOR-swizzled with
// 2*(r & 3), so that the fragment writes (a half-warp writes 4 rows x 32 bytes) hit 32 distinct
// banks. Reads of one 16-byte chunk by 8 consecutive threads of one row are at most 2-way conflicted.
//
// Synchronisation: all size(TiledMma) consumer threads call this together (cooperative kernel: both
// consumer warpgroups own the same tile). Per pass: barrier (the previous pass's, or the previous
// tile's, readers are done with the buffer), fragment writes, barrier (writes visible to the CTA),
// reads + emit. The caller's own barrier/release after the last emit is unchanged.
#pragma once

#include <cuda_bf16.h>

#include "cute/tensor.hpp"
#include "cutlass/arch/barrier.h"
#include "cutlass/cutlass.h"

namespace braid::overlap::detail {

// 8 consecutive columns of one row, as the fp32 stage emits them.
struct Floats8 {
  float f[8];
};

template <int BM, int kCols_>
struct StageBuffer {
  static constexpr int kCols = kCols_;
  static_assert(kCols % 32 == 0 && kCols <= 128, "kCols: 32, 64, 96 or 128");
  static constexpr int kChunks = kCols / 4;  // 16-byte chunks per row
  alignas(128) float v[BM * kCols];          // (BM, kCols) fp32, swizzled 16-byte chunks

  CUTLASS_DEVICE static int index(int r, int c) {  // float index of logical (r, c)
    const int chunk = (c >> 2) ^ ((r & 3) << 1);
    return r * kCols + chunk * 4 + (c & 3);
  }
  CUTLASS_DEVICE void put(int r, int c, float a, float b) {  // columns c, c + 1 (c even)
    *reinterpret_cast<float2*>(&v[index(r, c)]) = make_float2(a, b);
  }
  CUTLASS_DEVICE Floats8 get(int r, int c) const {  // columns c..c+7 (c % 8 == 0)
    const float4 lo = *reinterpret_cast<const float4*>(&v[index(r, c)]);
    const float4 hi = *reinterpret_cast<const float4*>(&v[index(r, c + 4)]);
    return Floats8{{lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w}};
  }
};

// The bf16 form, for a destination that takes the bf16 value of each accumulator (no later fp32 add): each value is
// rounded once, in registers, before staging — the same bits as staging fp32 and rounding after (pack_bf16x8) —
// so a pass carries twice the columns for the same shared memory (kCols = 128 at 32 KiB for BM = 128): half the
// passes and barriers, half the shared-memory bytes. Row r holds kCols bf16 = kCols/8 16-byte chunks, the chunk
// index XOR-swizzled with (r & 7): a fragment write (8 rows x 16 bytes per warp instruction) and a row read (8
// consecutive threads, 8 consecutive chunks) each hit 32 distinct banks.
template <int BM, int kCols_>
struct StageBufferBf16 {
  static constexpr int kCols = kCols_;
  static_assert(kCols % 64 == 0 && kCols <= 256, "kCols: 64, 128, 192 or 256");
  alignas(128) __nv_bfloat16 v[BM * kCols];  // (BM, kCols) bf16, swizzled 16-byte chunks

  CUTLASS_DEVICE static int index(int r, int c) {  // element index of logical (r, c)
    const int chunk = (c >> 3) ^ (r & 7);
    return r * kCols + chunk * 8 + (c & 7);
  }
  CUTLASS_DEVICE void put(int r, int c, float a, float b) {  // columns c, c + 1 (c even), rounded to bf16
    *reinterpret_cast<__nv_bfloat162*>(&v[index(r, c)]) = __floats2bfloat162_rn(a, b);
  }
  CUTLASS_DEVICE uint4 get(int r, int c) const {  // columns c..c+7 (c % 8 == 0), 8 packed bf16
    return *reinterpret_cast<const uint4*>(&v[index(r, c)]);
  }
};

// emit(r, c, payload): columns c..c+7 of tile row r (c % 8 == 0), the stage's get() (Floats8 or 8 packed bf16).
// Stage: StageBuffer (fp32) or StageBufferBf16, kCols columns per pass.
template <int BM, int BN, int kThreads, class Stage, class Acc, class Coords, class Emit>
CUTLASS_DEVICE void staged_store(Stage& buf, Acc const& acc, Coords const& tCcD, int tid, Emit&& emit) {
  using namespace cute;
  constexpr int kCols = Stage::kCols;
  static_assert(BN % kCols == 0, "BN must be a multiple of the pass width");
  constexpr int kVecPerRow = kCols / 8;
  constexpr int kVecs = BM * kVecPerRow;
  static_assert(kVecs % kThreads == 0, "every thread emits the same number of vectors");
  static_assert(decltype(size<0, 0>(acc))::value == 2, "expected GMMA accumulator layout (column pairs)");
  CUTLASS_PRAGMA_UNROLL
  for (int pass = 0; pass < BN / kCols; ++pass) {
    cutlass::arch::NamedBarrier::sync(kThreads, cutlass::arch::ReservedNamedBarriers::EpilogueBarrier);
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < size(acc); i += 2) {
      const auto coord = tCcD(i);
      const int r = get<0>(coord);
      const int c = get<1>(coord) - pass * kCols;
      if (c >= 0 && c < kCols) buf.put(r, c, float(acc(i)), float(acc(i + 1)));
    }
    cutlass::arch::NamedBarrier::sync(kThreads, cutlass::arch::ReservedNamedBarriers::EpilogueBarrier);
    CUTLASS_PRAGMA_UNROLL
    for (int it = 0; it < kVecs / kThreads; ++it) {
      const int j = tid + it * kThreads;
      const int r = j / kVecPerRow, c = (j % kVecPerRow) * 8;
      emit(r, pass * kCols + c, buf.get(r, c));
    }
  }
}

// 8 floats -> 8 bf16 (round to nearest even), packed for one 16-byte store.
CUTLASS_DEVICE uint4 pack_bf16x8(const float (&f)[8]) {
  uint4 u;
  __nv_bfloat162 t;
  t = __floats2bfloat162_rn(f[0], f[1]), u.x = *reinterpret_cast<uint32_t*>(&t);
  t = __floats2bfloat162_rn(f[2], f[3]), u.y = *reinterpret_cast<uint32_t*>(&t);
  t = __floats2bfloat162_rn(f[4], f[5]), u.z = *reinterpret_cast<uint32_t*>(&t);
  t = __floats2bfloat162_rn(f[6], f[7]), u.w = *reinterpret_cast<uint32_t*>(&t);
  return u;
}

// The 16 bytes an emit stores, from either stage's payload.
CUTLASS_DEVICE uint4 as_bf16x8(const Floats8& v) { return pack_bf16x8(v.f); }
CUTLASS_DEVICE uint4 as_bf16x8(uint4 v) { return v; }

// 8 bf16 packed in 16 bytes -> 8 floats.
CUTLASS_DEVICE void unpack_bf16x8(uint4 u, float (&f)[8]) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
  CUTLASS_PRAGMA_UNROLL
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

}  // namespace braid::overlap::detail
