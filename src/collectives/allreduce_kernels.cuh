// Kernels of braid's all-reduce (see braid/allreduce.hpp). Included by allreduce.cu only.
//
// Thread mapping of the quantized kernels: one thread holds 8 consecutive values (one 16-byte load of
// bf16/fp16); a group of G values is G/8 consecutive lanes of a warp (G = 128: 16 lanes), which
// reduce min/max by xor-shuffles. INT8 codes of a thread are 8 bytes, INT4 codes 4 bytes (element j
// in nibble j, the even element low). Group metadata: one 32-bit word, fp16 scale low, fp16 zero high.
//
// Work split: the vector is cut into W chunks of `stride` elements (a multiple of G; chunk r is owned
// by rank r). Block b of every rank handles groups [b*Gs/NB, (b+1)*Gs/NB) of every chunk (Gs = stride
// / G, NB = gridDim.x), so block b of rank s only ever talks to block b of rank r, and per-block flags
// (signal slot base + b) replace grid-wide barriers.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "braid/quant.hpp"

// BRAID_AR_PACKQ (default 1): the quantizers' packed forms — codes converted to s32 and packed with saturation by
// `cvt.pack.sat` (no clamp, no shifts), and, where a quantizer holds the raw 16-bit words, the group's min/max
// reduced on packed pairs (`min/max.{bf16x2,f16x2}`) and shuffled as one word. The same codes and parameters as
// the scalar forms (=0, kept for A/B runs with scripts/build-variant.sh): see quantize_store_codes and
// raw_group_minmax2 for the arguments.
#ifndef BRAID_AR_PACKQ
#define BRAID_AR_PACKQ 1
#endif
// BRAID_AR_CACHE_HINTS (bit mask): cache-eviction hints on the all-reduce kernels' streams, for A/B runs with
// scripts/build-variant.sh. 1: the INT4 quantizers' input loads are streaming (`ld.global.cs`: evict-first in L1 and
// L2; each input byte is read once); 2: the two-step's output stores are streaming (`st.global.cs`); 4: the
// quantizers' code and metadata stores carry an L2 evict-last policy (`createpolicy`; the codes are read twice soon
// after, by this rank's pull and by the peer's); 8: the exact two-shot's input loads, gathered-chunk loads and output
// stores are streaming; 16: the one-step pulls' output stores are streaming. Hints only: the same bytes and
// arithmetic whatever the bits.
// Default 3 (measured on 2x H200, b42f91d: the two-step INT4 7-8% and INT6 2-3% faster at 64-256 MiB, the INT4 and
// INT6 one-steps 0.5-1%; bits 4 and 8 changed nothing measurable, alone or beside a GEMM; 16 made the INT6 one-step
// 1-2% slower; bit 1 on INT8 made its one-step 1.5% slower at 16 MiB).
#ifndef BRAID_AR_CACHE_HINTS
#define BRAID_AR_CACHE_HINTS 3
#endif
#include "braid/signal_device.cuh"
#include "split_units.hpp"

namespace braid::ar {

inline constexpr int kVec = 8;  // values per thread

// Values of a thread's 8 that lie before the end (`left` elements remain from its first one).
__device__ __forceinline__ int valid_count(uint64_t left) { return left < kVec ? static_cast<int>(left) : kVec; }

template <int DT>  // 0: bf16, 1: fp16
__device__ __forceinline__ float bits_to_float(uint16_t b) {
  return DT == 0 ? quant::bf16_bits_to_float(b) : quant::half_bits_to_float(b);
}
template <int DT>
__device__ __forceinline__ float load_scalar(const uint16_t* p) {
  return bits_to_float<DT>(*p);
}
// The two 16-bit values of a 32-bit word (low half first), without going through memory.
template <int DT>
__device__ __forceinline__ void unpack2(uint32_t w, float& lo, float& hi) {
  lo = bits_to_float<DT>(static_cast<uint16_t>(w & 0xffffu));
  hi = bits_to_float<DT>(static_cast<uint16_t>(w >> 16));
}
template <int DT>
__device__ __forceinline__ uint16_t to_bits(float f) {
  return DT == 0 ? quant::float_to_bf16_bits(f) : quant::float_to_half_bits(f);
}

// The 8 values of a 16-byte load, in order.
template <int DT>
__device__ __forceinline__ void unpack8(const uint4& raw, float (&v)[kVec]) {
  unpack2<DT>(raw.x, v[0], v[1]);
  unpack2<DT>(raw.y, v[2], v[3]);
  unpack2<DT>(raw.z, v[4], v[5]);
  unpack2<DT>(raw.w, v[6], v[7]);
}
// Loads `valid` (0..8) values starting at p; 16-byte load when all 8 are valid (p is 16-byte aligned
// then, since chunk and group starts are multiples of 8 elements and the base is aligned).
template <int DT>
__device__ __forceinline__ void load8(const uint16_t* p, int valid, float (&v)[kVec]) {
  if (valid == kVec) {
    unpack8<DT>(*reinterpret_cast<const uint4*>(p), v);
  } else {
#pragma unroll
    for (int j = 0; j < kVec; ++j) v[j] = j < valid ? load_scalar<DT>(p + j) : 0.f;
  }
}
// 16-byte loads and stores that are streaming (ld/st.global.cs: evict-first in L1 and L2) when S — the
// BRAID_AR_CACHE_HINTS forms; kExactStream: the exact two-shot's input reads, the reads of its gathered chunks and its
// output stores (bit 8).
inline constexpr bool kExactStream = (BRAID_AR_CACHE_HINTS & 8) != 0;
template <bool S>
__device__ __forceinline__ uint4 ld16(const void* p) {
  if constexpr (S) return __ldcs(reinterpret_cast<const uint4*>(p));
  else return *reinterpret_cast<const uint4*>(p);
}
template <bool S>
__device__ __forceinline__ void st16(void* p, const uint4& v) {
  if constexpr (S) __stcs(reinterpret_cast<uint4*>(p), v);
  else *reinterpret_cast<uint4*>(p) = v;
}
// STREAM: a whole 16-byte store is streaming (st16), for outputs written once and not read again by the
// kernel (store8_out, store8_final, kExactStream).
template <int DT, bool STREAM = false>
__device__ __forceinline__ void store8(uint16_t* p, int valid, const float (&v)[kVec]) {
  if (valid == kVec) {
    uint32_t w[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) w[j] = to_bits<DT>(v[2 * j]) | (static_cast<uint32_t>(to_bits<DT>(v[2 * j + 1])) << 16);
    st16<STREAM>(p, make_uint4(w[0], w[1], w[2], w[3]));
  } else {
#pragma unroll
    for (int j = 0; j < kVec; ++j)
      if (j < valid) p[j] = to_bits<DT>(v[j]);
  }
}

// The output stores of the one-step pulls (streaming under BRAID_AR_CACHE_HINTS bit 16) and of the two-step's last
// stage (bit 2).
template <int DT>
__device__ __forceinline__ void store8_out(uint16_t* p, int valid, const float (&v)[kVec]) {
  store8<DT, (BRAID_AR_CACHE_HINTS & 16) != 0>(p, valid, v);
}
template <int DT>
__device__ __forceinline__ void store8_final(uint16_t* p, int valid, const float (&v)[kVec]) {
  store8<DT, (BRAID_AR_CACHE_HINTS & 2) != 0>(p, valid, v);
}
// A quantizer's 16-byte input load (streaming under BRAID_AR_CACHE_HINTS bit 1, for the INT4 quantizers only:
// INT8's one-step measured 1.5% slower with it at 16 MiB and no faster above). Coherent (not the non-coherent
// path), so in-place calls read what the caller wrote.
template <int BITS>
__device__ __forceinline__ uint4 load_in16(const uint16_t* p) {
  return ld16<(BRAID_AR_CACHE_HINTS & 1) != 0 && BITS == 4>(p);
}
// Code and metadata stores of the quantizers (BRAID_AR_CACHE_HINTS bit 4: an L2 evict-last policy).
template <class T>
__device__ __forceinline__ void store_code(T* p, T v) {
  if constexpr ((BRAID_AR_CACHE_HINTS & 4) != 0) {
    uint64_t pol;
    asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
    if constexpr (sizeof(T) == 8) {
      const uint2 w = reinterpret_cast<const uint2&>(v);
      asm volatile("st.global.L2::cache_hint.v2.u32 [%0], {%1, %2}, %3;" ::"l"(p), "r"(w.x), "r"(w.y), "l"(pol)
                   : "memory");
    } else {
      static_assert(sizeof(T) == 4, "4- or 8-byte code stores");
      asm volatile("st.global.L2::cache_hint.u32 [%0], %1, %2;" ::"l"(p), "r"(reinterpret_cast<const uint32_t&>(v)),
                   "l"(pol)
                   : "memory");
    }
  } else {
    *p = v;
  }
}

// Min/max over this thread's `valid` values (+inf / -inf when none).
__device__ __forceinline__ void local_minmax(const float (&v)[kVec], int valid, float& mn, float& mx) {
  mn = __int_as_float(0x7f800000);   // +inf
  mx = __int_as_float(0xff800000);   // -inf
  if (valid == kVec) {  // the common case without a test per value (the same operations in the same order)
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      mn = fminf(mn, v[j]);
      mx = fmaxf(mx, v[j]);
    }
  } else {
#pragma unroll
    for (int j = 0; j < kVec; ++j)
      if (j < valid) {
        mn = fminf(mn, v[j]);
        mx = fmaxf(mx, v[j]);
      }
  }
}
// Min/max over the TPG lanes of this group (consecutive, aligned lanes); every lane must take part.
template <int TPG>
__device__ __forceinline__ void shuffle_minmax(float& mn, float& mx) {
#pragma unroll
  for (int off = TPG / 2; off >= 1; off /= 2) {
    mn = fminf(mn, __shfl_xor_sync(0xffffffffu, mn, off));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
  }
}
// Group min/max over the valid values of the TPG lanes of this group.
template <int TPG>
__device__ __forceinline__ void group_minmax(const float (&v)[kVec], int valid, float& mn, float& mx) {
  local_minmax(v, valid, mn, mx);
  shuffle_minmax<TPG>(mn, mx);  // every lane, outside the branches above
}

// quant::quantize_one's code in four instructions (sub, mul, cvt, min) instead of its float clamp: the
// same code for every input. cvt.rni.u32.f32 rounds to nearest even as rintf, turns every value below 0
// into 0 and NaN into 0 (quantize_one: NaN fails both clamps and converts to 0), and saturates at 2^32-1,
// which the min brings to qmax (quantize_one: > qmax -> qmax). The GPU tests compare both bit for bit.
template <int BITS>
__device__ __forceinline__ uint32_t quantize_code(float x, const quant::GroupParams& p) {
  const float t = __fmul_rn(__fsub_rn(x, p.zero), p.inv_scale);  // quant::mul_rn(quant::sub_rn(...))
  uint32_t u;
  asm("cvt.rni.u32.f32 %0, %1;" : "=r"(u) : "f"(t));
  return min(u, (1u << BITS) - 1u);
}
// The codes of this thread's `valid` values (0 past them), with no test per value when all 8 are valid.
template <int BITS>
__device__ __forceinline__ void quantize_codes(const float (&v)[kVec], int valid, const quant::GroupParams& p,
                                               uint32_t (&q)[kVec]) {
  if (valid == kVec) {
#pragma unroll
    for (int j = 0; j < kVec; ++j) q[j] = quantize_code<BITS>(v[j], p);
  } else {
#pragma unroll
    for (int j = 0; j < kVec; ++j) q[j] = j < valid ? quantize_code<BITS>(v[j], p) : 0u;
  }
}

// The codes of 8 valid values quantized and packed in value order (INT8: two words, INT4: w[0] only), by
// `cvt.rni.s32.f32` and `cvt.pack.sat.u{8,4}.s32.b32` (d = c << 16 | sat(a) << 8 | sat(b) for u8, c << 8 |
// sat(a) << 4 | sat(b) for u4). The same codes as quantize_code: rint is the same rounding; a value below 0
// (s32 negative) saturates to 0 where cvt.rni.u32 gave 0; above qmax saturates to qmax where min() did (an
// s32 saturated at 2^31 - 1 still saturates to qmax); NaN converts to 0 in both.
template <int BITS>
__device__ __forceinline__ void quantize_pack8(const float (&v)[kVec], const quant::GroupParams& p, uint32_t (&w)[2]) {
  int32_t s[kVec];
#pragma unroll
  for (int j = 0; j < kVec; ++j) {
    const float t = __fmul_rn(__fsub_rn(v[j], p.zero), p.inv_scale);
    asm("cvt.rni.s32.f32 %0, %1;" : "=r"(s[j]) : "f"(t));
  }
  if constexpr (BITS == 8) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      uint32_t t;
      asm("cvt.pack.sat.u8.s32.b32 %0, %1, %2, 0;" : "=r"(t) : "r"(s[4 * h + 3]), "r"(s[4 * h + 2]));
      asm("cvt.pack.sat.u8.s32.b32 %0, %1, %2, %3;" : "=r"(w[h]) : "r"(s[4 * h + 1]), "r"(s[4 * h]), "r"(t));
    }
  } else {
    static_assert(BITS == 4, "INT8 or INT4 codes");
    uint32_t t;
    asm("cvt.pack.sat.u4.s32.b32 %0, %1, %2, 0;" : "=r"(t) : "r"(s[7]), "r"(s[6]));
    asm("cvt.pack.sat.u4.s32.b32 %0, %1, %2, %3;" : "=r"(t) : "r"(s[5]), "r"(s[4]), "r"(t));
    asm("cvt.pack.sat.u4.s32.b32 %0, %1, %2, %3;" : "=r"(t) : "r"(s[3]), "r"(s[2]), "r"(t));
    asm("cvt.pack.sat.u4.s32.b32 %0, %1, %2, %3;" : "=r"(w[0]) : "r"(s[1]), "r"(s[0]), "r"(t));
    w[1] = 0;
  }
}

// The packed codes of 8 codes (BITS each, in value order): INT8 two words, INT4 w[0] (w[1] = 0).
template <int BITS>
__device__ __forceinline__ void pack_codes(const uint32_t (&q)[kVec], uint32_t (&w)[2]) {
  if constexpr (BITS == 8) {
    w[0] = q[0] | q[1] << 8 | q[2] << 16 | q[3] << 24;
    w[1] = q[4] | q[5] << 8 | q[6] << 16 | q[7] << 24;
  } else {
    w[0] = 0;
#pragma unroll
    for (int j = 0; j < kVec; ++j) w[0] |= q[j] << (4 * j);
    w[1] = 0;
  }
}
// Stores packed codes at p: 8 bytes (INT8) or 4 (INT4).
template <int BITS>
__device__ __forceinline__ void store_code_words(const uint32_t (&w)[2], uint8_t* p) {
  if constexpr (BITS == 8)
    store_code(reinterpret_cast<uint2*>(p), make_uint2(w[0], w[1]));
  else
    store_code(reinterpret_cast<uint32_t*>(p), w[0]);
}
// The packed codes of this thread's `valid` values quantized with p (0 past them).
template <int BITS>
__device__ __forceinline__ void quantize_words(const float (&v)[kVec], int valid, const quant::GroupParams& p,
                                               uint32_t (&w)[2]) {
#if BRAID_AR_PACKQ
  if (valid == kVec) {
    quantize_pack8<BITS>(v, p, w);
    return;
  }
#endif
  uint32_t q[kVec];
  quantize_codes<BITS>(v, valid, p, q);
  pack_codes<BITS>(q, w);
}
// Quantizes this thread's `valid` values with p and stores their codes at p_codes (8 bytes for INT8, 4 for INT4).
template <int BITS>
__device__ __forceinline__ void quantize_store_codes(const float (&v)[kVec], int valid, const quant::GroupParams& p,
                                                     uint8_t* p_codes) {
  uint32_t w[2];
  quantize_words<BITS>(v, valid, p, w);
  store_code_words<BITS>(w, p_codes);
}

// Packed min (MAX false) or max (MAX true) of two 16-bit float pairs (DT 0: bf16x2, 1: f16x2), lane by lane. Like
// fminf/fmaxf a NaN operand yields the other one; the results are inputs (exact).
template <int DT, bool MAX>
__device__ __forceinline__ uint32_t minmax2(uint32_t a, uint32_t b) {
  uint32_t d;
  if constexpr (DT == 0 && MAX)
    asm("max.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  else if constexpr (DT == 0)
    asm("min.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  else if constexpr (MAX)
    asm("max.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  else
    asm("min.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
// The packed min or max over the eight words of two 16-byte loads (a pairwise tree: 7 instructions).
template <int DT, bool MAX>
__device__ __forceinline__ uint32_t minmax2_of(const uint4& a, const uint4& b) {
  const auto f = minmax2<DT, MAX>;
  return f(f(f(a.x, a.y), f(a.z, a.w)), f(f(b.x, b.y), f(b.z, b.w)));
}
// The group's min and max over this lane's 16 raw values (two 16-byte loads, all valid) and its TPG lanes, on
// packed pairs: 7 + 7 pairwise min/max, then (min, -max) as one word, so the TPG-lane reduction is one shuffle
// and one packed min per step (-max(a, b) = min(-a, -b); negation flips the sign bit, exact). Min and max are
// selections of input values, so mn / mx are the scalar reduction's (group_minmax2 over the unpacked values)
// except possibly for the sign of a zero extreme (-0 against +0), as with fminf against the CPU reference's
// total order: that changes only the stored zero's sign bit and the sign of a decoded zero, no code and no
// nonzero value (the GPU tests compare outputs with +0 == -0). Every lane must take part.
template <int DT, int TPG>
__device__ __forceinline__ void raw_group_minmax2(const uint4& a, const uint4& b, float& mn, float& mx) {
  const uint32_t lo = minmax2_of<DT, false>(a, b), hi = minmax2_of<DT, true>(a, b);
  const uint32_t nhi = hi ^ 0x80008000u;  // (-max_even, -max_odd)
  uint32_t s = minmax2<DT, false>(__byte_perm(lo, nhi, 0x5410), __byte_perm(lo, nhi, 0x7632));  // (min, -max)
#pragma unroll
  for (int off = TPG / 2; off >= 1; off /= 2) s = minmax2<DT, false>(s, __shfl_xor_sync(0xffffffffu, s, off));
  mn = bits_to_float<DT>(static_cast<uint16_t>(s & 0xffffu));
  mx = bits_to_float<DT>(static_cast<uint16_t>((s >> 16) ^ 0x8000u));
}

// Quantizes this thread's 8 values of a group and stores codes (+ metadata by lane 0 of the group).
// `payload` points at the group's first code byte, `meta` at the group's metadata word.
template <int BITS, int TPG>
__device__ __forceinline__ void quantize_store(const float (&v)[kVec], int valid, int lane_in_group, uint8_t* payload,
                                               uint32_t* meta) {
  float mn, mx;
  group_minmax<TPG>(v, valid, mn, mx);
  if (valid <= 0) return;  // after the shuffles: every lane took part
  const quant::GroupParams p = quant::make_params(mn, mx, BITS);
  quantize_store_codes<BITS>(v, valid, p, payload + lane_in_group * kVec * BITS / 8);
  if (lane_in_group == 0) store_code(meta, static_cast<uint32_t>(p.scale_h) | static_cast<uint32_t>(p.zero_h) << 16);
}

// The group's min/max over two halves of kVec values per lane and its TPG lanes (every lane must take part).
template <int TPG>
__device__ __forceinline__ void group_minmax2(const float (&lo)[kVec], int vlo, const float (&hi)[kVec], int vhi,
                                              float& mn, float& mx) {
  float mn2, mx2;
  local_minmax(lo, vlo, mn, mx);
  local_minmax(hi, vhi, mn2, mx2);
  mn = fminf(mn, mn2);
  mx = fmaxf(mx, mx2);
  shuffle_minmax<TPG>(mn, mx);
}
// The same quantizer with 16 values per thread, as two 8-value halves of the group: this lane's values
// [8 l, 8 l + 8) and [8 (l + TPG), 8 (l + TPG) + 8) (l = lane_in_group, TPG = G / 16 lanes per group), so
// each half's loads and code stores are contiguous across the lanes. The group's min/max, parameters and
// codes are the quantizer's (min/max exact in any order), at half the per-value cost of the parameters,
// shuffles and addressing. `payload` is the group's first code byte, `meta` its metadata word.
template <int BITS, int TPG>
__device__ __forceinline__ void quantize_store2h(const float (&lo)[kVec], int vlo, const float (&hi)[kVec], int vhi,
                                                 int lane_in_group, uint8_t* payload, uint32_t* meta) {
  float mn, mx;
  group_minmax2<TPG>(lo, vlo, hi, vhi, mn, mx);
  if (vlo <= 0) return;  // after the shuffles (vhi > 0 only where vlo == 8)
  const quant::GroupParams p = quant::make_params(mn, mx, BITS);
  quantize_store_codes<BITS>(lo, vlo, p, payload + lane_in_group * kVec * BITS / 8);
  if (vhi > 0) quantize_store_codes<BITS>(hi, vhi, p, payload + (TPG + lane_in_group) * kVec * BITS / 8);
  if (lane_in_group == 0) store_code(meta, static_cast<uint32_t>(p.scale_h) | static_cast<uint32_t>(p.zero_h) << 16);
}
// quantize_store2h for two whole halves given as their raw 16-byte loads (a: this lane's low half, b: its high
// half): the min/max on packed pairs (raw_group_minmax2) under BRAID_AR_PACKQ, then the same parameters and codes.
template <int DT, int BITS, int TPG>
__device__ __forceinline__ void quantize_store2h_raw(const uint4& a, const uint4& b, int lane_in_group,
                                                     uint8_t* payload, uint32_t* meta) {
  float lo[kVec], hi[kVec];
#if BRAID_AR_PACKQ
  float mn, mx;
  raw_group_minmax2<DT, TPG>(a, b, mn, mx);
  const quant::GroupParams p = quant::make_params(mn, mx, BITS);
  unpack8<DT>(a, lo);
  quantize_store_codes<BITS>(lo, kVec, p, payload + lane_in_group * kVec * BITS / 8);
  unpack8<DT>(b, hi);
  quantize_store_codes<BITS>(hi, kVec, p, payload + (TPG + lane_in_group) * kVec * BITS / 8);
  if (lane_in_group == 0) store_code(meta, static_cast<uint32_t>(p.scale_h) | static_cast<uint32_t>(p.zero_h) << 16);
#else
  unpack8<DT>(a, lo);
  unpack8<DT>(b, hi);
  quantize_store2h<BITS, TPG>(lo, kVec, hi, kVec, lane_in_group, payload, meta);
#endif
}

// This lane's 8 codes of a group and the group's metadata word, as loaded (decode_group turns them
// into values). Split from the decoding so that a caller can have several groups' loads in flight.
struct RawGroup {
  uint2 codes;  // INT8: 8 bytes; INT4: .x only (8 nibbles)
  uint32_t meta;
};
template <int BITS>
__device__ __forceinline__ RawGroup load_group(const uint8_t* payload, const uint32_t* meta, int lane_in_group) {
  RawGroup g;
  g.meta = *meta;
  if constexpr (BITS == 8) {
    g.codes = *reinterpret_cast<const uint2*>(payload + lane_in_group * 8);
  } else {
    g.codes.x = *reinterpret_cast<const uint32_t*>(payload + lane_in_group * 4);
    g.codes.y = 0;
  }
  return g;
}
template <int BITS>
__device__ __forceinline__ void decode_group(const RawGroup& g, int valid, float (&v)[kVec]) {
  // Decoding needs only scale and zero (no reciprocal): x' = fma(q, scale, zero), as dequantize_one.
  quant::GroupParams p;
  p.scale = quant::half_bits_to_float(static_cast<uint16_t>(g.meta & 0xffffu));
  p.zero = quant::half_bits_to_float(static_cast<uint16_t>(g.meta >> 16));
  uint32_t q[kVec];
  if constexpr (BITS == 8) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      q[j] = (g.codes.x >> (8 * j)) & 0xffu;
      q[4 + j] = (g.codes.y >> (8 * j)) & 0xffu;
    }
  } else {
#pragma unroll
    for (int j = 0; j < kVec; ++j) q[j] = (g.codes.x >> (4 * j)) & 0xfu;
  }
  if (valid == kVec) {  // no test per value
#pragma unroll
    for (int j = 0; j < kVec; ++j) v[j] = quant::dequantize_one(q[j], p);
  } else {
#pragma unroll
    for (int j = 0; j < kVec; ++j) v[j] = j < valid ? quant::dequantize_one(q[j], p) : 0.f;
  }
}
template <int BITS>
__device__ __forceinline__ void load_dequant(const uint8_t* payload, const uint32_t* meta, int lane_in_group, int valid,
                                             float (&v)[kVec]) {
  decode_group<BITS>(load_group<BITS>(payload, meta, lane_in_group), valid, v);
}
// sum[j] += the decoded codes of this lane's group from sources 0..world-1, in rank order (fp32, one
// rounding per add). payload(s) / meta(s): source s's group (its first code byte, its metadata word).
// pair_sources: two sources' loads in flight before the first is decoded; the bits do not depend on it.
template <int BITS, class Payload, class Meta>
__device__ __forceinline__ void add_decoded_sources(float (&sum)[kVec], int world, int pair_sources, int lane_in_group,
                                                    int valid, Payload payload, Meta meta) {
  const int step = pair_sources ? 2 : 1;
  for (int s = 0; s < world; s += step) {
    const bool two = step == 2 && s + 1 < world;
    RawGroup raw[2];
    raw[0] = load_group<BITS>(payload(s), meta(s), lane_in_group);
    if (two) raw[1] = load_group<BITS>(payload(s + 1), meta(s + 1), lane_in_group);
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      if (k == 1 && !two) break;
      float v[kVec];
      decode_group<BITS>(raw[k], valid, v);
#pragma unroll
      for (int j = 0; j < kVec; ++j) sum[j] = __fadd_rn(sum[j], v[j]);
    }
  }
}

// Launch sequence of one algorithm, in device memory: seq[0] counts completed launches, seq[1] counts
// the blocks of the current launch that finished. All blocks of a launch read the same seq[0] (it is
// only advanced by the last block to finish), so they agree on the workspace phase whatever the grid
// size; stream order makes the next launch see the new value. Graph-capturable: no host state.
__device__ __forceinline__ uint32_t launch_count(const uint32_t* seq) {
  __shared__ uint32_t s_launch;
  if (threadIdx.x == 0) s_launch = *reinterpret_cast<const volatile uint32_t*>(seq);
  __syncthreads();
  return s_launch;
}
__device__ __forceinline__ uint32_t launch_phase(const uint32_t* seq) { return launch_count(seq) & 1u; }
__device__ __forceinline__ void finish_launch(uint32_t* seq) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(&seq[1], 1u) == gridDim.x - 1) {
      seq[1] = 0;
      seq[0] += 1;
      __threadfence();
    }
  }
}

// Where quantized data goes / comes from: a callable slot(r) -> uint8_t* per rank (or per chunk),
// computed from __grid_constant__ parameters, so no pointer array is copied to local memory.

// Geometry of one launch of the quantized algorithm.
struct QuantGeom {
  uint64_t n;          // elements in this launch
  uint64_t stride;     // chunk stride (multiple of G)
  int world, rank;
  uint64_t meta_in;    // offset of the metadata in a slot that is read
  uint64_t meta_out;   // offset of the metadata in a slot that is written
  int pair_sources = 1;  // stage 2: two sources' loads in flight before decoding (1) or one at a time (0)
  // quantize_groups, stage_quantize and pull_sum_8 (W = 2): the next iteration's loads in flight over the
  // whole iterations (1) or one iteration at a time (0); the same codes and bits (quant_prefetch).
  int prefetch = 1;
};

__device__ __forceinline__ void block_group_range(uint64_t groups_per_chunk, uint64_t& g0, uint64_t& g1) {
  g0 = groups_per_chunk * blockIdx.x / gridDim.x;
  g1 = groups_per_chunk * (blockIdx.x + 1) / gridDim.x;
}

// Quantizes groups [ga, gb) of chunk c of `in` (BITS) into pay (codes) and meta (one word per group),
// block-wide, 16 values per thread (quantize_store2h: G / 16 lanes per group, one group per thread group
// and iteration, both halves' 16-byte loads in flight). The loop trip count is uniform over the block, so
// every lane reaches the shuffles.
template <int DT, int BITS, int G>
__device__ __forceinline__ void quantize_groups(const uint16_t* in, const QuantGeom& q, int c, uint64_t ga,
                                                uint64_t gb, uint8_t* pay, uint32_t* meta) {
  constexpr int TPG = G / (2 * kVec);
  static_assert(TPG >= 1 && 32 % TPG == 0, "a group's lanes must tile a warp");
  const int lane_in_group = threadIdx.x % TPG;
  const int groups_per_iter = blockDim.x / TPG;
  const uint64_t c0 = q.stride * c;
  uint64_t base = ga;
  if (q.prefetch) {
    // Iterations whose groups are all in range and all valid (block-uniform bound): the next iteration's
    // two 16-byte loads are issued before this one is quantized, so a block keeps two iterations' loads in
    // flight (the quantizer was latency-bound: its rate grew with the number of quantizing blocks). The
    // same values reach quantize_store2h in the same order: the same codes.
    const uint64_t full = q.n > c0 ? (q.n - c0) / G : 0;  // groups of chunk c wholly before n
    const uint64_t gfull = gb < full ? gb : full;
    const int nit = gfull > base ? static_cast<int>((gfull - base) / groups_per_iter) : 0;  // whole iterations
    if (nit > 0) {
      // Pointers advanced per iteration (fewer live 64-bit values: the kernels sit at the 64-register cap).
      const int gt = threadIdx.x / TPG;
      const uint16_t* src = in + c0 + (base + gt) * G + lane_in_group * kVec;  // this lane's low half
      uint8_t* dst = pay + (base + gt) * G * BITS / 8;
      uint32_t* mdst = meta + base + gt;
      uint4 a = load_in16<BITS>(src), b = load_in16<BITS>(src + TPG * kVec);
      for (int it = 0; it < nit; ++it) {
        uint4 na = a, nb = b;
        if (it + 1 < nit) {
          src += groups_per_iter * G;
          na = load_in16<BITS>(src);
          nb = load_in16<BITS>(src + TPG * kVec);
        }
        quantize_store2h_raw<DT, BITS, TPG>(a, b, lane_in_group, dst, mdst);
        dst += groups_per_iter * G * BITS / 8;
        mdst += groups_per_iter;
        a = na;
        b = nb;
      }
      base += static_cast<uint64_t>(nit) * groups_per_iter;
    }
  }
  for (; base < gb; base += groups_per_iter) {
    const uint64_t gi = base + threadIdx.x / TPG;
    const uint64_t e0 = c0 + gi * G + lane_in_group * kVec, e1 = e0 + TPG * kVec;  // the two halves
    const bool in_range = gi < gb;
    const int v0 = in_range && e0 < q.n ? valid_count(q.n - e0) : 0;
    const int v1 = in_range && e1 < q.n ? valid_count(q.n - e1) : 0;
    float lo[kVec], hi[kVec];
    load8<DT>(in + (v0 ? e0 : 0), v0, lo);
    load8<DT>(in + (v1 ? e1 : 0), v1, hi);
    quantize_store2h<BITS, TPG>(lo, v0, hi, v1, lane_in_group, pay + gi * G * BITS / 8, meta + gi);
  }
}

// Stage 1: quantize chunk r of `in` (BITS) into dst.p[r] (peer r's RS slot for this rank, or a local
// send buffer), for every r, with the quantizer's 8-value mapping (two groups per thread per iteration).
// Not quantize_groups' 16-value one: here the codes go to the peers by remote stores, which that mapping
// cuts into 32-byte pieces per group half (2x H100, f60ddc9: the two-step INT4 took 153 us at 64 MiB with
// it, 145 with this). The loop trip count is uniform over the block, so every lane reaches the shuffles.
template <int DT, int BITS, int G, class Slot>
__device__ __forceinline__ void stage_quantize(const uint16_t* in, const QuantGeom& q, Slot dst) {
  constexpr int TPG = G / kVec;
  uint64_t g0, g1;
  block_group_range(q.stride / G, g0, g1);
  const int lane_in_group = threadIdx.x % TPG;
  const int groups_per_iter = blockDim.x / TPG;
  for (int i = 0; i < q.world; ++i) {
    const int r = (q.rank + i) % q.world;  // staggered: ranks start on different destinations
    const uint64_t c0 = q.stride * r;
    uint8_t* const pay = dst(r);  // this destination's codes and metadata, once per chunk
    uint32_t* const meta = reinterpret_cast<uint32_t*>(pay + q.meta_out);
    uint64_t base = g0;
    if (q.prefetch) {
      // Iterations whose two groups per thread are in range and valid for every thread (a block-uniform
      // bound): the next iteration's two loads are issued before this one is quantized (four 16-byte loads
      // in flight per thread, as quantize_groups does). The same values in the same order: the same codes.
      const uint64_t full = q.n > c0 ? (q.n - c0) / G : 0;
      const uint64_t gfull = g1 < full ? g1 : full;
      const int nit = gfull > base ? static_cast<int>((gfull - base) / (2 * groups_per_iter)) : 0;
      if (nit > 0) {
        const int gt = threadIdx.x / TPG;
        const uint64_t half = static_cast<uint64_t>(groups_per_iter) * G;  // elements between the two groups
        const uint16_t* src = in + c0 + (base + gt) * G + lane_in_group * kVec;
        uint8_t* dst0 = pay + (base + gt) * G * BITS / 8;
        uint32_t* m0 = meta + base + gt;
        uint4 a = load_in16<BITS>(src), b = load_in16<BITS>(src + half);
        for (int it = 0; it < nit; ++it) {
          uint4 na = a, nb = b;
          if (it + 1 < nit) {
            src += 2 * half;
            na = load_in16<BITS>(src);
            nb = load_in16<BITS>(src + half);
          }
          float v[kVec];
          unpack8<DT>(a, v);
          quantize_store<BITS, TPG>(v, kVec, lane_in_group, dst0, m0);
          unpack8<DT>(b, v);
          quantize_store<BITS, TPG>(v, kVec, lane_in_group, dst0 + groups_per_iter * G * BITS / 8,
                                    m0 + groups_per_iter);
          dst0 += 2 * groups_per_iter * G * BITS / 8;
          m0 += 2 * groups_per_iter;
          a = na;
          b = nb;
        }
        base += static_cast<uint64_t>(nit) * 2 * groups_per_iter;
      }
    }
    // Two groups per thread per iteration: both loads are in flight before either is used.
    for (; base < g1; base += 2 * groups_per_iter) {
      uint64_t gi[2];
      int valid[2];
      float v[2][kVec];
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        gi[u] = base + u * groups_per_iter + threadIdx.x / TPG;
        const uint64_t e = c0 + gi[u] * G + lane_in_group * kVec;
        valid[u] = gi[u] < g1 && e < q.n ? valid_count(q.n - e) : 0;
        load8<DT>(in + (valid[u] ? e : 0), valid[u], v[u]);
      }
#pragma unroll
      for (int u = 0; u < 2; ++u)
        quantize_store<BITS, TPG>(v[u], valid[u], lane_in_group, pay + gi[u] * G * BITS / 8, meta + gi[u]);
    }
  }
}

// Stage 2: for this rank's chunk, dequantize the W contributions in src.p[s] (BITS1), sum them in fp32
// in rank order, quantize the sum (BITS2) into dst.p[r] for every r (every rank's AG slot for this
// chunk, or one local buffer when dst_count == 1).
template <int BITS1, int BITS2, int G, class Src, class Dst>
__device__ __forceinline__ void stage_reduce(const QuantGeom& q, Src src, Dst dst, int dst_count) {
  constexpr int TPG = G / kVec;
  uint64_t g0, g1;
  block_group_range(q.stride / G, g0, g1);
  const int lane_in_group = threadIdx.x % TPG;
  const int groups_per_iter = blockDim.x / TPG;
  const uint64_t c0 = q.stride * q.rank;
  for (uint64_t base = g0; base < g1; base += groups_per_iter) {
    const uint64_t gi = base + threadIdx.x / TPG;
    const uint64_t e = c0 + gi * G + lane_in_group * kVec;
    const int valid = gi < g1 && e < q.n ? static_cast<int>(valid_count(q.n - e)) : 0;
    float sum[kVec];
#pragma unroll
    for (int j = 0; j < kVec; ++j) sum[j] = 0.f;
    if (valid > 0) {
      // Two sources' loads in flight before the first is decoded (q.pair_sources); the adds stay in
      // rank order, so the bits do not depend on it. (add_decoded_sources does the same; this loop is
      // kept inline because the call changes the generated code of the measured kernel, 16a19b8.)
      const int step = q.pair_sources ? 2 : 1;
      for (int s = 0; s < q.world; s += step) {
        const bool two = step == 2 && s + 1 < q.world;
        RawGroup raw[2];
        raw[0] = load_group<BITS1>(src(s) + gi * G * BITS1 / 8,
                                   reinterpret_cast<const uint32_t*>(src(s) + q.meta_in) + gi, lane_in_group);
        if (two)
          raw[1] = load_group<BITS1>(src(s + 1) + gi * G * BITS1 / 8,
                                     reinterpret_cast<const uint32_t*>(src(s + 1) + q.meta_in) + gi, lane_in_group);
#pragma unroll
        for (int k = 0; k < 2; ++k) {
          if (k == 1 && !two) break;
          float v[kVec];
          decode_group<BITS1>(raw[k], valid, v);
#pragma unroll
          for (int j = 0; j < kVec; ++j) sum[j] = __fadd_rn(sum[j], v[j]);
        }
      }
    }
    // Quantize once, store to every destination (same bytes everywhere).
    float mn, mx;
    group_minmax<TPG>(sum, valid, mn, mx);
    if (valid <= 0) continue;
    const quant::GroupParams p = quant::make_params(mn, mx, BITS2);
    uint32_t qw[2];
    quantize_words<BITS2>(sum, valid, p, qw);
    const uint32_t m = static_cast<uint32_t>(p.scale_h) | static_cast<uint32_t>(p.zero_h) << 16;
    for (int i = 0; i < dst_count; ++i) {
      const int r = (q.rank + i) % dst_count;
      store_code_words<BITS2>(qw, dst(r) + gi * G * BITS2 / 8 + lane_in_group * kVec * BITS2 / 8);
      if (lane_in_group == 0) reinterpret_cast<uint32_t*>(dst(r) + q.meta_out)[gi] = m;
    }
  }
}

// Stage 3: dequantize every chunk c from src.p[c] (BITS2) into `out`.
template <int DT, int BITS2, int G, class Slot>
__device__ __forceinline__ void stage_dequantize(uint16_t* out, const QuantGeom& q, Slot src) {
  constexpr int TPG = G / kVec;
  uint64_t g0, g1;
  block_group_range(q.stride / G, g0, g1);
  const int lane_in_group = threadIdx.x % TPG;
  const int groups_per_iter = blockDim.x / TPG;
  for (int c = 0; c < q.world; ++c) {
    const uint64_t c0 = q.stride * c;
    for (uint64_t base = g0; base < g1; base += 2 * groups_per_iter) {
      float v[2][kVec];
      int valid[2];
      uint64_t e[2];
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const uint64_t gi = base + u * groups_per_iter + threadIdx.x / TPG;
        e[u] = c0 + gi * G + lane_in_group * kVec;
        valid[u] = gi < g1 && e[u] < q.n ? valid_count(q.n - e[u]) : 0;
        if (valid[u] > 0)
          load_dequant<BITS2>(src(c) + gi * G * BITS2 / 8,
                              reinterpret_cast<const uint32_t*>(src(c) + q.meta_in) + gi, lane_in_group, valid[u], v[u]);
      }
#pragma unroll
      for (int u = 0; u < 2; ++u)
        if (valid[u] > 0) store8_final<DT>(out + e[u], valid[u], v[u]);
    }
  }
}

// Workspace of the fused quantized kernel, per rank: [phase 0: RS slots x W | AG slots x W][phase 1: ...]
struct QuantWorkspace {
  uint8_t* base[kMaxPeers];  // every rank's workspace (base[rank] is local)
  uint64_t slot_bytes;
};

// The fused Flash Communication all-reduce: quantize + push, flag, reduce + requantize + push, flag,
// dequantize. Two signal epochs per launch on slot `slot0 + blockIdx.x`; the workspace phase alternates
// between launches (parity of the launch sequence), which makes reuse safe without a closing barrier:
// a rank can only start launch k+2 after every peer finished its part of launch k+1, which each began
// only after finishing launch k.
template <int DT, int BITS1, int BITS2, int G>
__global__ void __launch_bounds__(512, 2) quant_allreduce_kernel(const uint16_t* in, uint16_t* out,
                                                               const __grid_constant__ QuantGeom q,
                                                               const __grid_constant__ QuantWorkspace ws,
                                                               const __grid_constant__ SignalView sig, int slot0,
                                                               uint32_t* seq) {
  const int slot = slot0 + blockIdx.x;
  const uint64_t phase_off = static_cast<uint64_t>(launch_phase(seq)) * 2 * q.world * ws.slot_bytes;
  // RS slots: region [phase][0][from]; AG slots: region [phase][1][chunk].
  const int rank = q.rank, world = q.world;
  const uint64_t sb = ws.slot_bytes;
  auto rs_dst = [&](int r) { return ws.base[r] + phase_off + static_cast<uint64_t>(rank) * sb; };  // peer r, from me
  auto rs_src = [&](int r) { return ws.base[rank] + phase_off + static_cast<uint64_t>(r) * sb; };  // mine, from r
  auto ag_dst = [&](int r) { return ws.base[r] + phase_off + static_cast<uint64_t>(world + rank) * sb; };
  auto ag_src = [&](int r) { return ws.base[rank] + phase_off + static_cast<uint64_t>(world + r) * sb; };
  stage_quantize<DT, BITS1, G>(in, q, rs_dst);
  if (!dev::barrier_block(sig, slot, static_cast<uint32_t>(OpId::kAllReduceQuant))) return;
  stage_reduce<BITS1, BITS2, G>(q, rs_src, ag_dst, world);
  if (!dev::barrier_block(sig, slot, static_cast<uint32_t>(OpId::kAllReduceQuant))) return;
  stage_dequantize<DT, BITS2, G>(out, q, ag_src);
  finish_launch(seq);
}

// The one-step kernels' pull with 16-byte code loads: groups [ga, gb) of chunk c, all threads of the block.
// A thread owns one "unit" of kWideVals<BITS> consecutive values of a group (16 bytes of codes: 16 INT8 or
// 32 INT4 values; G >= 32, so a unit never straddles groups), loads its 16 bytes and the group's metadata
// word from every rank's slot (two sources in flight), then decodes and sums 8 values at a time in rank
// order in fp32 (the same per-element arithmetic as add_decoded_sources: the same bits) and stores them as
// one 16-byte vector each (2 or 4 per unit; 8 sums live, no spills at the 64-register cap). Against
// the 8-value mapping it issues 2x (INT8) or 4x (INT4) fewer, wider remote loads, so more link bytes are in
// flight per thread. slot(s) -> source s's slot for chunk c (codes at 0, metadata at q.meta_out).
template <int BITS>
inline constexpr int kWideVals = BITS == 8 ? 16 : 32;
template <int DT, int BITS, int G, class SlotFn>
__device__ __forceinline__ void pull_sum_wide(const QuantGeom& q, uint16_t* out, int c, uint64_t ga, uint64_t gb,
                                              SlotFn slot) {
  constexpr int V = kWideVals<BITS>;
  static_assert(G % V == 0, "a 16-byte code unit must not straddle groups");
  constexpr int UPG = G / V;  // units per group
  const uint64_t units = (gb - ga) * UPG;
  for (uint64_t u = threadIdx.x; u < units; u += blockDim.x) {
    const uint64_t gi = ga + u / UPG;
    const int sub = static_cast<int>(u % UPG);
    const uint64_t e = q.stride * c + gi * G + static_cast<uint64_t>(sub) * V;
    if (e >= q.n) continue;
    const uint64_t left = q.n - e;
    uint4 code[2];
    uint32_t meta[2];
    auto load_pair = [&](int s) {  // sources s and s+1 (if any): both loads in flight
#pragma unroll
      for (int t = 0; t < 2; ++t) {
        if (t == 1 && s + 1 >= q.world) break;
        const uint8_t* base = slot(s + t);
        code[t] = *reinterpret_cast<const uint4*>(base + gi * G * BITS / 8 + sub * 16);
        meta[t] = reinterpret_cast<const uint32_t*>(base + q.meta_out)[gi];
      }
    };
    load_pair(0);
    // 8 values at a time, so only 8 sums are live (fewer registers: no spills at the 64-register cap); at
    // W <= 2 the codes stay in registers across the parts (no second load).
#pragma unroll
    for (int h = 0; h < V / kVec; ++h) {
      if (left <= static_cast<uint64_t>(h) * kVec) break;
      float sum[kVec];
      for (int s = 0; s < q.world; s += 2) {
        if (s > 0 || (h > 0 && q.world > 2)) load_pair(s);
        const bool two = s + 1 < q.world;
#pragma unroll
        for (int t = 0; t < 2; ++t) {
          if (t == 1 && !two) break;
          const float scale = quant::half_bits_to_float(static_cast<uint16_t>(meta[t] & 0xffffu));
          const float zero = quant::half_bits_to_float(static_cast<uint16_t>(meta[t] >> 16));
          const uint32_t w[4] = {code[t].x, code[t].y, code[t].z, code[t].w};
#pragma unroll
          for (int j = 0; j < kVec; ++j) {
            constexpr int kPer = 32 / BITS;  // values per 32-bit word
            const int jj = h * kVec + j;
            const uint32_t qv = (w[jj / kPer] >> (BITS * (jj % kPer))) & ((1u << BITS) - 1u);
            const float v = __fmaf_rn(static_cast<float>(qv), scale, zero);  // quant::dequantize_one
            sum[j] = s + t == 0 ? v : __fadd_rn(sum[j], v);  // 0 + v == v: the reference's first add
          }
        }
      }
      {
        const uint64_t at = static_cast<uint64_t>(h) * kVec;
        const float (&v8)[kVec] = sum;
        store8_out<DT>(out + e + at, valid_count(left - at), v8);
      }
    }
  }
}

// Phase stamps of the one-step kernels (AllReducer::set_onestep_profile; a diagnostic, off by default):
// block b writes prof[4 b + i] = %globaltimer (ns) for i = 0 entry, 1 its codes quantized (after a
// __syncthreads), 2 the peers' codes visible (after the barrier / first wait), 3 done. With prof == nullptr
// (always, outside `bench allreduce --phases`) no stamp and no extra __syncthreads is taken.
__device__ __forceinline__ void phase_stamp(uint64_t* prof, int i, bool sync) {
  if (prof == nullptr) return;
  if (sync) __syncthreads();
  if (threadIdx.x == 0) prof[4 * static_cast<uint64_t>(blockIdx.x) + i] = dev::globaltimer_ns();
}

// Step 2's codes of `valid` sums under the group's parameters p, decoded and stored (the two-step's stage-2
// quantizer and stage-3 decoder on the same values).
template <int DT, int STEP2>
__device__ __forceinline__ void requantize_store(uint16_t* dst, int valid, const float (&sum)[kVec],
                                                 const quant::GroupParams& p) {
  uint32_t qv[kVec];
  quantize_codes<STEP2>(sum, valid, p, qv);
  float y[kVec];
#pragma unroll
  for (int j = 0; j < kVec; ++j) y[j] = quant::dequantize_one(qv[j], p);
  store8_out<DT>(dst, valid, y);
}
// The end of a pull: this thread's kVec sums of one group (values [e, e + valid) of the output) rounded
// into `dst` (STEP2 = 0: the one-step), or first through the two-step's step 2 (STEP2 = 8: the one-step
// form of INT6): the group's min/max over its TPG lanes, the owner's re-quantization to STEP2 bits and the
// decoding every rank does of those bytes — stage_reduce's and stage_dequantize's arithmetic on the same
// fp32 sums (every rank holds all of them here, bit for bit), so the same output as the two-step without
// sending the re-quantized codes. With STEP2 every lane of the warp must call it (shuffles), valid == 0
// lanes too.
template <int DT, int STEP2, int TPG>
__device__ __forceinline__ void store_sums(uint16_t* dst, int valid, const float (&sum)[kVec]) {
  if constexpr (STEP2 == 0) {
    if (valid > 0) store8_out<DT>(dst, valid, sum);
  } else {
    float mn, mx;
    group_minmax<TPG>(sum, valid, mn, mx);
    if (valid > 0) requantize_store<DT, STEP2>(dst, valid, sum, quant::make_params(mn, mx, STEP2));
  }
}
// The same for 16 consecutive values of one group (two halves of kVec, all valid), TPG = G / 16 lanes.
template <int DT, int STEP2, int TPG>
__device__ __forceinline__ void store_sums16(uint16_t* dst, const float (&lo)[kVec], const float (&hi)[kVec]) {
  if constexpr (STEP2 == 0) {
    store8_out<DT>(dst, kVec, lo);
    store8_out<DT>(dst + kVec, kVec, hi);
  } else {
    float mn, mx;
    group_minmax2<TPG>(lo, kVec, hi, kVec, mn, mx);
    const quant::GroupParams p = quant::make_params(mn, mx, STEP2);
    requantize_store<DT, STEP2>(dst, kVec, lo, p);
    requantize_store<DT, STEP2>(dst + kVec, kVec, hi, p);
  }
}

// The pulls' loop with the next iteration's loads in flight: load(r) issues one iteration's loads of both
// sources into r, next() moves the load position to the following iteration, use(r) decodes, sums and
// stores one; iteration it + 1's loads are issued before iteration it is used. nit >= 1 whole iterations.
template <class Raw, class Load, class Next, class Use>
__device__ __forceinline__ void with_next_loads(int nit, Load load, Next next, Use use) {
  Raw cur[2];
  load(cur);
  for (int it = 0; it < nit; ++it) {
    Raw nxt[2] = {cur[0], cur[1]};
    if (it + 1 < nit) {
      next();
      load(nxt);
    }
    use(cur);
    cur[0] = nxt[0];
    cur[1] = nxt[1];
  }
}

// The one-step pull with the quantizer's 8-value mapping: groups [ga, gb) of chunk c, every source's codes
// (slot(s): source s's slot for chunk c; two sources' loads in flight), decoded, summed in rank order in
// fp32 from 0.f, rounded once into `out` (or through step 2: store_sums). Block-wide.
template <int DT, int BITS, int G, int STEP2 = 0, class SlotFn>
__device__ __forceinline__ void pull_sum_8(const QuantGeom& q, uint16_t* out, int c, uint64_t ga, uint64_t gb,
                                           SlotFn slot) {
  constexpr int TPG = G / kVec;
  const int lane_in_group = threadIdx.x % TPG;
  const int groups_per_iter = blockDim.x / TPG;
  const uint64_t c0 = q.stride * c;
  uint64_t base = ga;
  if (q.prefetch && q.world == 2) {
    // Iterations whose groups are all in range and valid (a block-uniform bound): both sources' codes and
    // metadata of the next iteration are loaded before this one is decoded, so two iterations' loads are
    // in flight (4 or 8 bytes of codes per thread and source: few bytes per remote load). The same
    // decoding and adds in the same order: the same bits.
    const uint64_t full = q.n > c0 ? (q.n - c0) / G : 0;
    const uint64_t gfull = gb < full ? gb : full;
    const int nit = gfull > base ? static_cast<int>((gfull - base) / groups_per_iter) : 0;  // whole iterations
    if (nit > 0) {
      const int gt = threadIdx.x / TPG;
      // Byte offset of this lane's codes in a slot and index of its group's metadata word, advanced per
      // iteration: load_group's loads with fewer live 64-bit values (calling load_group here raised the
      // spills at the 64-register cap: flat INT4 0 -> 4 bytes, split INT8 8-value 4 -> 16; ptxas, 426b49f).
      uint64_t code_off = (base + gt) * G * BITS / 8 + lane_in_group * kVec * BITS / 8;
      uint64_t gidx = base + gt;
      uint16_t* dst = out + c0 + (base + gt) * G + lane_in_group * kVec;
      auto load2 = [&](RawGroup (&r)[2]) {
#pragma unroll
        for (int s = 0; s < 2; ++s) {
          const uint8_t* sl = slot(s);
          r[s].meta = reinterpret_cast<const uint32_t*>(sl + q.meta_out)[gidx];
          if constexpr (BITS == 8) {
            r[s].codes = *reinterpret_cast<const uint2*>(sl + code_off);
          } else {
            r[s].codes.x = *reinterpret_cast<const uint32_t*>(sl + code_off);
            r[s].codes.y = 0;
          }
        }
      };
      auto next = [&] {
        code_off += static_cast<uint64_t>(groups_per_iter) * G * BITS / 8;
        gidx += groups_per_iter;
      };
      with_next_loads<RawGroup>(nit, load2, next, [&](const RawGroup (&cur)[2]) {
        float sum[kVec];
#pragma unroll
        for (int j = 0; j < kVec; ++j) sum[j] = 0.f;
#pragma unroll
        for (int s = 0; s < 2; ++s) {  // rank order, from 0.f: add_decoded_sources' adds
          float v[kVec];
          decode_group<BITS>(cur[s], kVec, v);
#pragma unroll
          for (int j = 0; j < kVec; ++j) sum[j] = __fadd_rn(sum[j], v[j]);
        }
        store_sums<DT, STEP2, TPG>(dst, kVec, sum);
        dst += groups_per_iter * G;
      });
      base += static_cast<uint64_t>(nit) * groups_per_iter;
    }
  }
  for (; base < gb; base += groups_per_iter) {
    const uint64_t gi = base + threadIdx.x / TPG;
    const uint64_t e = c0 + gi * G + lane_in_group * kVec;
    const int valid = gi < gb && e < q.n ? static_cast<int>(valid_count(q.n - e)) : 0;
    if constexpr (STEP2 == 0) {
      if (valid <= 0) continue;  // no shuffles below
    }
    float sum[kVec];
#pragma unroll
    for (int j = 0; j < kVec; ++j) sum[j] = 0.f;
    if (valid > 0)
      add_decoded_sources<BITS>(
          sum, q.world, 1, lane_in_group, valid, [&](int s) { return slot(s) + gi * G * BITS / 8; },
          [&](int s) { return reinterpret_cast<const uint32_t*>(slot(s) + q.meta_out) + gi; });
    store_sums<DT, STEP2, TPG>(out + e, valid, sum);  // with STEP2: every lane (the loop bound is block-uniform)
  }
}

// The one-step pull with V = 16 or 32 values per thread and the next iteration's loads in flight (W = 2):
// lane l of a group's G / V lanes owns values [V l, V l + V) of the group — one load per source of V x
// BITS / 8 bytes of codes (16 values: 8 INT4 / 16 INT8 bytes, twice pull_sum_8's; 32 values, INT4 only:
// 16 bytes), with two iterations in flight as there. Decoded and summed 8 values at a time (8 sums
// live), in rank order in fp32 from 0.f: pull_sum_8's arithmetic, the same bits. Groups [ga, gb) of chunk
// c; whole iterations of full groups here, the rest (and W > 2) by pull_sum_8. Memory ordering: the
// caller's acquire (flag wait + __syncthreads) precedes every load here, as for pull_sum_8.
// STEP2 (V = 16 only): the sums of both halves kept, then step 2 over the group (store_sums16).
template <int DT, int BITS, int G, int V, int STEP2 = 0, class SlotFn>
__device__ __forceinline__ void pull_sum_vals(const QuantGeom& q, uint16_t* out, int c, uint64_t ga, uint64_t gb,
                                              SlotFn slot) {
  static_assert(STEP2 == 0 || V == 16, "step 2 with 16 values per lane");
  static_assert(V == 16 || V == 32, "16 or 32 values per lane");
  static_assert(G % V == 0, "a lane's values must not straddle groups");
  constexpr int TPG = G / V;                // lanes per group
  constexpr int kCodeBytes = V * BITS / 8;  // 8 or 16
  static_assert(kCodeBytes == 8 || kCodeBytes == 16, "one 8- or 16-byte code load per source");
  using Codes = std::conditional_t<kCodeBytes == 16, uint4, uint2>;
  struct Raw {
    Codes codes;
    uint32_t meta;
  };
  const int groups_per_iter = blockDim.x / TPG;
  const uint64_t c0 = q.stride * c;
  uint64_t base = ga;
  if (q.world == 2) {
    const uint64_t full = q.n > c0 ? (q.n - c0) / G : 0;  // groups of chunk c with every value valid
    const uint64_t gfull = gb < full ? gb : full;
    const int nit = gfull > base ? static_cast<int>((gfull - base) / groups_per_iter) : 0;  // whole iterations
    if (nit > 0) {
      const int gt = threadIdx.x / TPG, lane = threadIdx.x % TPG;
      uint64_t code_off = (base + gt) * G * BITS / 8 + static_cast<uint64_t>(lane) * kCodeBytes;
      uint64_t gidx = base + gt;
      uint16_t* dst = out + c0 + (base + gt) * G + lane * V;
      auto load2 = [&](Raw (&r)[2]) {
#pragma unroll
        for (int s = 0; s < 2; ++s) {
          const uint8_t* sl = slot(s);
          r[s].meta = reinterpret_cast<const uint32_t*>(sl + q.meta_out)[gidx];
          r[s].codes = *reinterpret_cast<const Codes*>(sl + code_off);
        }
      };
      auto next = [&] {
        code_off += static_cast<uint64_t>(groups_per_iter) * G * BITS / 8;
        gidx += groups_per_iter;
      };
      with_next_loads<Raw>(nit, load2, next, [&](const Raw (&cur)[2]) {
        float sums[STEP2 ? V / kVec : 1][kVec];  // STEP2: both halves, for the group's min/max
#pragma unroll
        for (int h = 0; h < V / kVec; ++h) {
          float (&sum)[kVec] = sums[STEP2 ? h : 0];
#pragma unroll
          for (int j = 0; j < kVec; ++j) sum[j] = 0.f;
#pragma unroll
          for (int s = 0; s < 2; ++s) {  // rank order, from 0.f: add_decoded_sources' adds
            const float scale = quant::half_bits_to_float(static_cast<uint16_t>(cur[s].meta & 0xffffu));
            const float zero = quant::half_bits_to_float(static_cast<uint16_t>(cur[s].meta >> 16));
            uint32_t w[sizeof(Codes) / 4];
            if constexpr (kCodeBytes == 16) {
              w[0] = cur[s].codes.x, w[1] = cur[s].codes.y, w[2] = cur[s].codes.z, w[3] = cur[s].codes.w;
            } else {
              w[0] = cur[s].codes.x, w[1] = cur[s].codes.y;
            }
#pragma unroll
            for (int j = 0; j < kVec; ++j) {
              constexpr int kPer = 32 / BITS;  // values per 32-bit word
              const int jj = h * kVec + j;
              const uint32_t qv = (w[jj / kPer] >> (BITS * (jj % kPer))) & ((1u << BITS) - 1u);
              sum[j] = __fadd_rn(sum[j], __fmaf_rn(static_cast<float>(qv), scale, zero));  // quant::dequantize_one
            }
          }
          if constexpr (STEP2 == 0) store8_out<DT>(dst + h * kVec, kVec, sum);
        }
        if constexpr (STEP2 != 0) store_sums16<DT, STEP2, TPG>(dst, sums[0], sums[1]);
        dst += static_cast<uint64_t>(groups_per_iter) * G;
      });
      base += static_cast<uint64_t>(nit) * groups_per_iter;
    }
  }
  pull_sum_8<DT, BITS, G, STEP2>(q, out, c, base, gb, slot);  // what is left: partial iterations, tails, W > 2
}

// The one-step quantized all-reduce (ArAlgo::kQuantOneStep; quant::reference_allreduce_onestep): every
// rank quantizes each chunk c of its input into its *own* workspace slot c (local stores), one per-block
// barrier, then every rank reads every rank's codes of every chunk (remote loads; two sources in flight),
// decodes, sums in rank order in fp32 and rounds once into `out`. All ranks read the same bytes in the same
// order: bit-identical outputs. At W = 2 the link carries the two-step's bytes ((W-1) n codes per rank);
// above W = 2 it carries more. Block b quantizes and reads the same groups of every chunk on every rank,
// so it only meets block b; the barrier's release (after bar.sync) makes its local codes visible to the
// peers' block b, its acquire makes theirs visible here. Reuse without a closing barrier: the workspace
// phase alternates by launch (as quant_allreduce_kernel, sharing its launch counter and slots); a rank
// writes the slots of launch k again only in launch k+2, after its block b met every peer's block b in
// launch k+1, which each began after finishing launch k (and its reads of them).
// WIDE: the pull by pull_sum_wide (16-byte code loads), else the quantizer's 8-value mapping; one kernel
// per mapping, so neither pays the other's registers.
// STEP2 = 8 (8-value pull only): INT6's one-step, the pull ending in step 2 (store_sums).
template <int DT, int BITS, int G, bool WIDE, int STEP2 = 0>
__global__ void __launch_bounds__(512, 2) quant_onestep_kernel(const uint16_t* in, uint16_t* out,
                                                                const __grid_constant__ QuantGeom q,
                                                                const __grid_constant__ QuantWorkspace ws,
                                                                const __grid_constant__ SignalView sig, int slot0,
                                                                uint32_t* seq, uint64_t* prof) {
  phase_stamp(prof, 0, false);
  const int slot = slot0 + blockIdx.x;
  const uint64_t phase_off = static_cast<uint64_t>(launch_phase(seq)) * 2 * q.world * ws.slot_bytes;
  const uint64_t sb = ws.slot_bytes;
  auto slot_of = [&](int r, int c) { return ws.base[r] + phase_off + static_cast<uint64_t>(c) * sb; };
  uint64_t g0, g1;
  block_group_range(q.stride / G, g0, g1);
  for (int i = 0; i < q.world; ++i) {  // this block's groups of every chunk, into its own slots (local stores)
    const int c = (q.rank + i) % q.world;
    uint8_t* const pay = slot_of(q.rank, c);
    quantize_groups<DT, BITS, G>(in, q, c, g0, g1, pay, reinterpret_cast<uint32_t*>(pay + q.meta_out));
  }
  phase_stamp(prof, 1, true);
  if (!dev::barrier_block(sig, slot, static_cast<uint32_t>(OpId::kAllReduceQuant))) return;
  phase_stamp(prof, 2, false);
  for (int i = 0; i < q.world; ++i) {
    const int c = (q.rank + i) % q.world;  // staggered: ranks start on different chunks
    auto src = [&](int s) { return slot_of(s, c); };
    static_assert(!WIDE || STEP2 == 0, "step 2 with the 8-value pull");
    if constexpr (WIDE) pull_sum_wide<DT, BITS, G>(q, out, c, g0, g1, src);  // 16-byte code loads; the same bits
    else pull_sum_8<DT, BITS, G, STEP2>(q, out, c, g0, g1, src);
  }
  phase_stamp(prof, 3, true);
  finish_launch(seq);
}

// The one-step quantized all-reduce, pipelined (AllReducerConfig::onestep_step_iters > 0): the same
// arithmetic, bytes and workspace as quant_onestep_kernel, but each block's work is cut into steps with a
// flag per step, so one block's quantizing (HBM) overlaps another's pulling (NVLink) instead of every block
// quantizing, then every block pulling.
//
// Block b's work, on every rank: for chunk c = 0..W-1, the groups [g0, g1) of chunk c (block_group_range),
// in iterations of blockDim/TPG groups (one per thread group of TPG lanes); `iters` = W x ceil((g1-g0) /
// groups per iteration). Step k is iterations [k*U, (k+1)*U) (U = step_iters). Order per block:
//   quantize steps 0..L-1, signalling each; then for k = 0..steps-1: quantize + signal step k+L (if any),
//   wait for every peer's step-k flag, pull and reduce step k.
// Signal (step k): __syncthreads (the block's local code stores of step k are ordered before it), then
// thread p stores base+k+1 to peer p's flag [slot][rank] with st.release.sys (cumulative, as
// barrier_block's release mode). Wait (step k): thread p polls flag [slot][p] with ld.acquire.sys until it
// reaches base+k+1 (wait_geq, bounded), then __syncthreads hands the acquire to the block. base = this
// slot's epoch at entry; the last thread-0 store sets it to base+steps, identical on every rank (same n,
// grid and U), so flags only grow, and slots stay shareable with the two-step kernel.
// Reuse (why no closing barrier): my block b writes phase-p slots in launch k+2 only after my launch k+1
// ended, in which some block waited for a peer's launch-(k+1) flag; the peer wrote it after its launch k
// ended (stream order), so its reads of my launch-k codes are done. In place is safe: a rank's `in` is read
// only by its own quantize steps, each before the reduce of the same elements writes `out`.
// PULL: 0 = pull_sum_wide (16-byte code loads); 1, 2 or 4 = the quantizer's 8-value mapping with that
// many iterations' loads (both of the first two sources) issued before the first is decoded. One kernel
// per mapping: a runtime switch between them put both paths' registers in one kernel and spilled
// (docs/flash-communication.md, fourteenth session).
template <int DT, int BITS, int G, int PULL>
__global__ void __launch_bounds__(512, 2) quant_onestep_pipe_kernel(const uint16_t* in, uint16_t* out,
                                                                     const __grid_constant__ QuantGeom q,
                                                                     const __grid_constant__ QuantWorkspace ws,
                                                                     const __grid_constant__ SignalView sig,
                                                                     int slot0, uint32_t* seq, int step_iters, int lag,
                                                                     uint64_t* prof) {
  static_assert(PULL == 0 || PULL == 1 || PULL == 2 || PULL == 4, "PULL: 0 (16-byte pull) or 1/2/4 iterations");
  constexpr int RU = PULL == 0 ? 1 : PULL;
  constexpr int TPG = G / kVec;
  phase_stamp(prof, 0, false);
  constexpr uint32_t kOp = static_cast<uint32_t>(OpId::kAllReduceQuant);
  const int slot = slot0 + blockIdx.x;
  const uint64_t phase_off = static_cast<uint64_t>(launch_phase(seq)) * 2 * q.world * ws.slot_bytes;
  const uint64_t sb = ws.slot_bytes;
  const int rank = q.rank, world = q.world;
  auto slot_of = [&](int r, int c) { return ws.base[r] + phase_off + static_cast<uint64_t>(c) * sb; };
  uint64_t g0, g1;
  block_group_range(q.stride / G, g0, g1);
  const int lane_in_group = threadIdx.x % TPG;
  const int gpi = blockDim.x / TPG;                        // groups per iteration
  const uint64_t ipc = (g1 - g0 + gpi - 1) / gpi;          // iterations per chunk
  const uint64_t iters = ipc * world;
  const uint64_t U = static_cast<uint64_t>(step_iters);
  const uint32_t steps = static_cast<uint32_t>((iters + U - 1) / U);
  __shared__ uint32_t s_base;
  __shared__ int s_ok;
  if (threadIdx.x == 0) {
    s_base = sig.epochs[slot];
    s_ok = 1;
  }
  __syncthreads();
  const uint32_t base = s_base;
  // Iteration j of this block, for this thread: its chunk, group, first element and valid values.
  struct At {
    int c, valid;
    uint64_t gi;
    __device__ uint64_t e(uint64_t stride, int lane) const { return stride * c + gi * G + lane * kVec; }
  };
  // 32-bit division (iters < 2^32: a block's iterations): a 64-bit one is a long software sequence, and
  // this runs once per iteration and thread.
  const uint32_t ipc32 = static_cast<uint32_t>(ipc);
  auto at = [&](uint64_t j, uint64_t end) {
    At a;
    const uint32_t j32 = static_cast<uint32_t>(j), c32 = j32 / ipc32;
    a.c = j < end ? static_cast<int>(c32) : 0;
    a.gi = g0 + static_cast<uint64_t>(j32 - c32 * ipc32) * gpi + threadIdx.x / TPG;
    const uint64_t e = a.e(q.stride, lane_in_group);
    a.valid = j < end && a.gi < g1 && e < q.n ? valid_count(q.n - e) : 0;
    return a;
  };
  auto quantize_step = [&](uint32_t k) {  // block-uniform trip counts: every lane reaches the shuffles
    const uint64_t j0 = k * U, j1 = j0 + U < iters ? j0 + U : iters;
    for (uint64_t j = j0; j < j1; j += 2) {
      At a[2];
      float v[2][kVec];
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        a[u] = at(j + u, j1);
        load8<DT>(in + (a[u].valid ? a[u].e(q.stride, lane_in_group) : 0), a[u].valid, v[u]);
      }
#pragma unroll
      for (int u = 0; u < 2; ++u)
        if (j + u < j1)
          quantize_store<BITS, TPG>(v[u], a[u].valid, lane_in_group, slot_of(rank, a[u].c) + a[u].gi * G * BITS / 8,
                                    reinterpret_cast<uint32_t*>(slot_of(rank, a[u].c) + q.meta_out) + a[u].gi);
    }
    __syncthreads();  // signal: the block's code stores of step k before the release stores
    if (threadIdx.x < static_cast<unsigned>(world) && static_cast<int>(threadIdx.x) != rank)
      dev::store_release(dev::flag_at(sig.peer_flags[threadIdx.x], slot, rank), base + k + 1);
  };
  // RU iterations' first two sources loaded before any is decoded (the loads in flight), then each
  // iteration decoded, summed (rank order, fp32, from 0.f as the reference) and stored in turn: 8 sums
  // live, not 8 x RU. Sources 2.. (W > 2) are loaded per iteration after its first pair.
  auto reduce_step = [&](uint32_t k) {
    const uint64_t j0 = k * U, j1 = j0 + U < iters ? j0 + U : iters;
    const bool two = world > 1;
    for (uint64_t j = j0; j < j1; j += RU) {
      At a[RU];
      RawGroup raw[RU][2];
      auto load_src = [&](const At& x, int s) {
        return load_group<BITS>(slot_of(s, x.c) + x.gi * G * BITS / 8,
                                reinterpret_cast<const uint32_t*>(slot_of(s, x.c) + q.meta_out) + x.gi, lane_in_group);
      };
#pragma unroll
      for (int u = 0; u < RU; ++u) {
        a[u] = at(j + u, j1);
        if (a[u].valid > 0) {
          raw[u][0] = load_src(a[u], 0);
          if (two) raw[u][1] = load_src(a[u], 1);
        }
      }
#pragma unroll
      for (int u = 0; u < RU; ++u) {
        if (a[u].valid <= 0) continue;
        float sum[kVec];
#pragma unroll
        for (int i = 0; i < kVec; ++i) sum[i] = 0.f;
        for (int s = 0; s < world; s += 2) {
          const bool pair = s + 1 < world;
          if (s > 0) {
            raw[u][0] = load_src(a[u], s);
            if (pair) raw[u][1] = load_src(a[u], s + 1);
          }
#pragma unroll
          for (int t = 0; t < 2; ++t) {
            if (t == 1 && !pair) break;
            float v[kVec];
            decode_group<BITS>(raw[u][t], a[u].valid, v);
#pragma unroll
            for (int i = 0; i < kVec; ++i) sum[i] = __fadd_rn(sum[i], v[i]);
          }
        }
        store8_out<DT>(out + a[u].e(q.stride, lane_in_group), a[u].valid, sum);
      }
    }
  };
  auto reduce_step_wide = [&](uint32_t k) {  // the step's group ranges, one per chunk, by pull_sum_wide
    const uint64_t j0 = k * U, j1 = j0 + U < iters ? j0 + U : iters;
    for (uint64_t j = j0; j < j1;) {
      const int c = static_cast<int>(j / ipc);
      const uint64_t jend = j1 < (c + 1) * ipc ? j1 : (c + 1) * ipc;
      const uint64_t ga = g0 + (j % ipc) * gpi;
      const uint64_t gb_full = g0 + ((jend - 1) % ipc + 1) * gpi;
      pull_sum_wide<DT, BITS, G>(q, out, c, ga, gb_full < g1 ? gb_full : g1, [&](int s) { return slot_of(s, c); });
      j = jend;
    }
  };
  const uint32_t L = static_cast<uint32_t>(lag);
  for (uint32_t k = 0; k < L && k < steps; ++k) quantize_step(k);
  phase_stamp(prof, 1, false);  // quantize_step ends in __syncthreads
  for (uint32_t k = 0; k < steps; ++k) {
    if (k + L < steps) quantize_step(k + L);
    if (threadIdx.x < static_cast<unsigned>(world) && static_cast<int>(threadIdx.x) != rank &&
        !dev::wait_geq<true>(sig, dev::flag_at(sig.local_flags, slot, threadIdx.x), base + k + 1, kOp, slot,
                             threadIdx.x))
      s_ok = 0;
    __syncthreads();
    if (!s_ok) return;  // a timeout is recorded; the host's synchronize throws
    if (k == 0) phase_stamp(prof, 2, false);
    if constexpr (PULL == 0) reduce_step_wide(k);
    else reduce_step(k);
  }
  phase_stamp(prof, 3, true);
  if (threadIdx.x == 0) sig.epochs[slot] = base + steps;
  finish_launch(seq);
}

// The one-step quantized all-reduce with split roles (AllReducerConfig::onestep_split_iters > 0): the
// same arithmetic, bytes and workspace as quant_onestep_kernel, but a block either quantizes or pulls, so
// on an SM one block's quantizing (ALU and HBM bound) overlaps another's pulling (NVLink latency bound)
// instead of every block doing one after the other (measured by phase stamps: quantize ~43 us, pull ~50-85
// us at 64 MiB on 2x H100, serialized).
// Roles: the first block to start on an SM quantizes, the second pulls (a per-SM counter, so an SM holding
// two blocks has one of each; with puller_every = k > 1 only every k-th SM has a puller, the others two
// quantizers); a quantizer pulls too once every unit is taken for quantizing. Work: units
// of `unit_groups` groups of one chunk, u -> chunk u % W, groups [(u / W) * unit_groups, +unit_groups);
// tapered (taper_units = A > 0, AllReducerConfig::onestep_split_taper): each chunk opens and closes with A
// units of taper_groups groups (smaller), the middle in units of unit_groups — so the pullers' first unit
// is quantized sooner and the last units, each pulled by one block at its share of the link, end sooner;
// position j of a chunk: j < A the head, then ceil(middle / unit_groups) middle units (the last one may be
// short), then A tail units (SplitUnits). A = 0, or a chunk too short for 2 A small units plus one
// group: the uniform units above.
// quantizing and pulling each take units from their own ticket counter, in order.
// Quantizer: quantize unit u into its own slot, __syncthreads (the block's code stores before the
// release), then thread r < W stores `epoch` into rank r's unit flag [u][rank] with st.release.sys
// (r == rank: its own, for its pullers). Puller: thread r < W waits for its flag [u][r] >= epoch with
// ld.acquire.sys (bounded), __syncthreads hands the acquire to the block, then it pulls unit u from every
// rank. A block only waits after every unit has been taken by a running quantizer, which never waits, and
// the first block on any SM quantizes: no deadlock whatever the residency or the grid.
// epoch = launch sequence + 1, identical on every rank (same calls in the same order), so flags only grow.
// Reuse (no closing barrier), as quant_onestep_pipe_kernel: a rank writes the phase-p slots of launch k+2
// only after its launch k+1 ended, in which its pullers waited for every peer's launch-(k+1) flags, each
// written after that peer's launch k ended (its reads of launch k's codes). The last block to finish resets
// the role and ticket counters (ctl) for the next launch (stream order).
inline constexpr int kSplitSms = 512;  // per-SM role counters (smid < kSplitSms)
struct SplitState {
  uint32_t* ctl;                   // this rank's: [0, kSplitSms) blocks started per SM, then tickets Q, P, blocks done
  uint32_t* flags[kMaxPeers];      // every rank's unit flags, [unit][kMaxPeers] (flags[rank] is local)
};
// PM: the pull mapping — kPull8 (pull_sum_8), kPullWide (pull_sum_wide), kPull16 (pull_sum_vals with 16
// values per thread). 32 values (INT4) measured slower on 2x H200 (nineteenth session) and is not dispatched.
inline constexpr int kPull8 = 0, kPullWide = 1, kPull16 = 2;
// STEP2 = 8 (PM = kPull16 only): the one-step form of INT6 (BITS = 4): the pull ends with step 2
// (store_sums), so the output is the two-step INT6's, bit for bit.
template <int DT, int BITS, int G, int PM, int STEP2 = 0>
__global__ void __launch_bounds__(512, 2) quant_onestep_split_kernel(const uint16_t* in, uint16_t* out,
                                                                      const __grid_constant__ QuantGeom q,
                                                                      const __grid_constant__ QuantWorkspace ws,
                                                                      const __grid_constant__ SignalView sig,
                                                                      const __grid_constant__ SplitState st,
                                                                      uint32_t* seq, int unit_groups, int puller_every,
                                                                      int taper_units, int taper_groups,
                                                                      uint64_t* prof) {
  static_assert(STEP2 == 0 || PM == kPull16, "step 2 with the 16-value pull");
  constexpr uint32_t kOp = static_cast<uint32_t>(OpId::kAllReduceQuant);
  dev::grid_dependency_wait();  // AllReducerConfig::pdl: see oneshot_ll_kernel (before the stamp, the role
  dev::launch_dependents();     // counters the previous launch reset, the input and the slots)
  phase_stamp(prof, 0, false);
  const int rank = q.rank, world = q.world;
  __shared__ uint32_t s_role, s_epoch, s_unit;
  __shared__ int s_ok;
  if (threadIdx.x == 0) {
    uint32_t sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    // 0: quantize, 1: pull; pullers only on every puller_every-th SM (1: every SM), the rest quantize
    s_role = (atomicAdd(&st.ctl[sm % kSplitSms], 1u) & 1u) && sm % static_cast<uint32_t>(puller_every) == 0u;
    s_epoch = *reinterpret_cast<const volatile uint32_t*>(seq) + 1u;
    s_ok = 1;
  }
  __syncthreads();
  const bool quantizer = s_role == 0;
  const uint32_t epoch = s_epoch;
  // Stamps: 1 = the end of its quantizing (a puller: its start), 2 = its first pulled unit's codes visible
  // (or 1 if it pulled none), 3 = its end.
  if (!quantizer) phase_stamp(prof, 1, false);
  bool first_wait = true;
  const uint64_t phase_off = static_cast<uint64_t>((epoch - 1u) & 1u) * 2 * world * ws.slot_bytes;  // launch_phase
  const uint64_t sb = ws.slot_bytes;
  auto slot_of = [&](int r, int c) { return ws.base[r] + phase_off + static_cast<uint64_t>(c) * sb; };
  const uint64_t gpc = q.stride / G;                            // groups per chunk
  const SplitUnits su(gpc, static_cast<uint64_t>(unit_groups), static_cast<uint64_t>(taper_units),
                      static_cast<uint64_t>(taper_groups));
  const uint64_t units = su.per_chunk() * world;
  // Takes the next unit from ticket counter t (0: quantize, 1: pull), block-uniform.
  auto next_unit = [&](int t) {
    if (threadIdx.x == 0) s_unit = atomicAdd(&st.ctl[kSplitSms + t], 1u);
    __syncthreads();
    const uint64_t u = s_unit;
    __syncthreads();  // every thread has read s_unit before thread 0 takes the next ticket
    return u;
  };
  if (quantizer) {
    for (uint64_t u; (u = next_unit(0)) < units;) {
      const int c = static_cast<int>(u % world);
      uint64_t ga, gb;
      su.range(u / world, ga, gb);
      uint8_t* const pay = slot_of(rank, c);
      quantize_groups<DT, BITS, G>(in, q, c, ga, gb, pay, reinterpret_cast<uint32_t*>(pay + q.meta_out));
      __syncthreads();  // the block's code stores before the release stores
      if (threadIdx.x < static_cast<unsigned>(world))
        dev::store_release(st.flags[threadIdx.x] + u * kMaxPeers + rank, epoch);
    }
    phase_stamp(prof, 1, false);
  }
  // Pulling: the pullers from the start, the quantizers once every unit is taken for quantizing (so the
  // pulls finish even where an SM holds a single block, and the tail is shared).
  for (uint64_t u; (u = next_unit(1)) < units;) {
    const int c = static_cast<int>(u % world);
    uint64_t ga, gb;
    su.range(u / world, ga, gb);
    if (threadIdx.x < static_cast<unsigned>(world) &&
        !dev::wait_geq<true>(sig, st.flags[rank] + u * kMaxPeers + threadIdx.x, epoch, kOp, static_cast<uint32_t>(u),
                             threadIdx.x))
      s_ok = 0;
    __syncthreads();
    // A timeout is recorded and the host's synchronize throws; the block still counts itself done below,
    // so the last block resets the counters and the next launch starts clean.
    if (!s_ok) break;
    if (first_wait) phase_stamp(prof, 2, false);
    first_wait = false;
    auto src = [&](int s) { return slot_of(s, c); };
    if constexpr (PM == kPullWide) pull_sum_wide<DT, BITS, G>(q, out, c, ga, gb, src);
    else if constexpr (PM == kPull16) pull_sum_vals<DT, BITS, G, 16, STEP2>(q, out, c, ga, gb, src);
    else pull_sum_8<DT, BITS, G>(q, out, c, ga, gb, src);
  }
  if (first_wait) phase_stamp(prof, 2, false);
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(&st.ctl[kSplitSms + 2], 1u) == gridDim.x - 1) {  // the last block: counters for the next launch
      for (int i = 0; i < kSplitSms + 3; ++i) st.ctl[i] = 0;
      __threadfence();
    }
  }
  phase_stamp(prof, 3, false);
  finish_launch(seq);
}

// The three stages as separate kernels, for NCCL as transport.
template <int DT, int BITS, int G>
__global__ void __launch_bounds__(512) quant_stage1_kernel(const uint16_t* in, const __grid_constant__ QuantGeom q,
                                                            uint8_t* send, uint64_t slot_bytes) {  // q.meta_out: send layout
  stage_quantize<DT, BITS, G>(in, q, [&](int r) { return send + r * slot_bytes; });
}
template <int BITS1, int BITS2, int G>
__global__ void __launch_bounds__(512) quant_stage2_kernel(const __grid_constant__ QuantGeom q, const uint8_t* recv,
                                                            uint64_t slot_bytes, uint8_t* ag_send) {  // meta_in: recv, meta_out: ag
  stage_reduce<BITS1, BITS2, G>(
      q, [&](int r) { return const_cast<uint8_t*>(recv) + r * slot_bytes; }, [&](int) { return ag_send; }, 1);
}
template <int DT, int BITS2, int G>
__global__ void __launch_bounds__(512) quant_stage3_kernel(uint16_t* out, const __grid_constant__ QuantGeom q,
                                                            const uint8_t* ag_recv, uint64_t slot_bytes) {
  stage_dequantize<DT, BITS2, G>(out, q, [&](int r) { return const_cast<uint8_t*>(ag_recv) + r * slot_bytes; });
}

// ---------------------------------------------------------------------------------------------------
// Unquantized one-shot and two-shot (bf16/fp16, fp32 accumulation in rank order).

struct ExactWorkspace {
  uint8_t* base[kMaxPeers];
  uint64_t slot_bytes;  // one rank's contribution
};

template <int DT>
__device__ __forceinline__ void add8(float (&acc)[kVec], const uint16_t* p, int valid) {
  float v[kVec];
  load8<DT>(p, valid, v);
#pragma unroll
  for (int j = 0; j < kVec; ++j) acc[j] = __fadd_rn(acc[j], v[j]);
}

// Block b handles vectors [b*V/NB, (b+1)*V/NB) of the n elements (V = ceil(n/8)).
__device__ __forceinline__ void block_vec_range(uint64_t vecs, uint64_t& v0, uint64_t& v1) {
  v0 = vecs * blockIdx.x / gridDim.x;
  v1 = vecs * (blockIdx.x + 1) / gridDim.x;
}

// One-shot: push my slice to every peer's slot [me], flag, sum all W slices (mine from `in`) locally.
template <int DT>
__global__ void __launch_bounds__(512) oneshot_kernel(const uint16_t* in, uint16_t* out, uint64_t n, int world, int rank,
                                                       const __grid_constant__ ExactWorkspace ws,
                                                       const __grid_constant__ SignalView sig, int slot0, uint32_t* seq) {
  dev::grid_dependency_wait();  // AllReducerConfig::pdl: see oneshot_ll_kernel
  dev::launch_dependents();
  const int slot = slot0 + blockIdx.x;
  const uint64_t phase_off = static_cast<uint64_t>(launch_phase(seq)) * world * ws.slot_bytes;
  uint64_t v0, v1;
  block_vec_range((n + kVec - 1) / kVec, v0, v1);
  for (int i = 1; i < world; ++i) {
    const int r = (rank + i) % world;
    uint4* dst = reinterpret_cast<uint4*>(ws.base[r] + phase_off + static_cast<uint64_t>(rank) * ws.slot_bytes);
    for (uint64_t v = v0 + threadIdx.x; v < v1; v += blockDim.x) {
      const uint64_t e = v * kVec;
      if (e + kVec <= n) {
        dst[v] = reinterpret_cast<const uint4*>(in)[v];
      } else {
        for (uint64_t k = e; k < n; ++k) reinterpret_cast<uint16_t*>(dst)[k] = in[k];
      }
    }
  }
  if (!dev::barrier_block(sig, slot, static_cast<uint32_t>(OpId::kAllReduceOneShot))) return;
  for (uint64_t v = v0 + threadIdx.x; v < v1; v += blockDim.x) {
    const uint64_t e = v * kVec;
    const int valid = static_cast<int>(valid_count(n - e));
    float acc[kVec];
#pragma unroll
    for (int j = 0; j < kVec; ++j) acc[j] = 0.f;
    for (int s = 0; s < world; ++s) {
      const uint16_t* src = s == rank ? in : reinterpret_cast<const uint16_t*>(ws.base[rank] + phase_off +
                                                                             static_cast<uint64_t>(s) * ws.slot_bytes);
      add8<DT>(acc, src + e, valid);
    }
    store8<DT>(out + e, valid, acc);
  }
  finish_launch(seq);
}

// One-shot, LL protocol (as NCCL's LL): every 16-byte line carries 8 data bytes and two copies of the
// launch's epoch, written by one 16-byte store, so a reader that sees both flags equal to the epoch
// also sees the data: no fence and no separate flag round trip. Twice the bytes on the link, so it is
// for small messages. Workspace per peer slot: 2 * message bytes (4 lines per 8 values).
__device__ __forceinline__ void st_ll(uint4* p, uint32_t d0, uint32_t d1, uint32_t epoch) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(d0), "r"(epoch), "r"(d1), "r"(epoch)
               : "memory");
}
__device__ __forceinline__ uint4 ld_ll(const uint4* p) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p)
               : "memory");
  return v;
}

template <int DT>
__global__ void __launch_bounds__(512) oneshot_ll_kernel(const uint16_t* in, uint16_t* out, uint64_t n, int world,
                                                          int rank, const __grid_constant__ ExactWorkspace ws,
                                                          const __grid_constant__ SignalView sig, uint32_t* seq) {
  // With AllReducerConfig::pdl: nothing of the previous kernel's is touched before its completion (the
  // launch counter, the input, the workspace it may still read); the next launch may start its own wait now.
  dev::grid_dependency_wait();
  dev::launch_dependents();
  const uint32_t launch = launch_count(seq);
  const uint32_t epoch = launch + 1;  // flags start at 0 in a fresh workspace
  const uint64_t phase_off = static_cast<uint64_t>(launch & 1u) * world * ws.slot_bytes;
  const uint64_t vecs = (n + kVec - 1) / kVec;
  for (uint64_t v = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; v < vecs; v += uint64_t(gridDim.x) * blockDim.x) {
    const uint64_t e = v * kVec;
    const int valid = valid_count(n - e);
    uint4 mine;
    if (valid == kVec) {
      mine = *reinterpret_cast<const uint4*>(in + e);
    } else {
      uint16_t t[kVec] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (int j = 0; j < valid; ++j) t[j] = in[e + j];
      mine = make_uint4(t[0] | uint32_t(t[1]) << 16, t[2] | uint32_t(t[3]) << 16, t[4] | uint32_t(t[5]) << 16,
                        t[6] | uint32_t(t[7]) << 16);
    }
    for (int i = 1; i < world; ++i) {
      const int r = (rank + i) % world;
      uint4* dst = reinterpret_cast<uint4*>(ws.base[r] + phase_off + static_cast<uint64_t>(rank) * ws.slot_bytes) + 2 * v;
      st_ll(dst, mine.x, mine.y, epoch);
      st_ll(dst + 1, mine.z, mine.w, epoch);
    }
    float acc[kVec];
#pragma unroll
    for (int j = 0; j < kVec; ++j) acc[j] = 0.f;
    for (int s = 0; s < world; ++s) {
      uint4 w = mine;
      if (s != rank) {
        const uint4* src =
            reinterpret_cast<const uint4*>(ws.base[rank] + phase_off + static_cast<uint64_t>(s) * ws.slot_bytes) + 2 * v;
        uint4 a = ld_ll(src), b = ld_ll(src + 1);
        const uint64_t start = dev::globaltimer_ns();
        for (uint32_t it = 1; a.y != epoch || a.w != epoch || b.y != epoch || b.w != epoch; ++it) {
          if ((it & 255u) == 0u) {
            if (dev::globaltimer_ns() - start > sig.timeout_ns) {
              dev::record_timeout(sig, static_cast<uint32_t>(OpId::kAllReduceOneShot), 0, s, epoch, a.y);
              return;
            }
            if (dev::error_raised(sig)) return;
          }
          a = ld_ll(src);
          b = ld_ll(src + 1);
        }
        w = make_uint4(a.x, a.z, b.x, b.z);
      }
      float x[kVec];
      unpack2<DT>(w.x, x[0], x[1]);
      unpack2<DT>(w.y, x[2], x[3]);
      unpack2<DT>(w.z, x[4], x[5]);
      unpack2<DT>(w.w, x[6], x[7]);
#pragma unroll
      for (int j = 0; j < kVec; ++j) acc[j] = __fadd_rn(acc[j], x[j]);
    }
    store8<DT>(out + e, valid, acc);
  }
  finish_launch(seq);
}

// One-shot, LL128 protocol (NCCL's LL128 wire format, written for braid's one-shot): the wire is 128-byte
// lines; a line carries kLL128Vals = 60 values (120 bytes) and, in its last 8 bytes, the launch's flag.
// Lanes 8k..8k+7 of a warp write line k of the warp's four with one 16-byte store each, in one warp-wide
// instruction: lane j < 7 stores values [8j, 8j+8) of the line, lane 7 values [56, 60) and the flag. 1.07x
// the message on the link (LL: 2x), and no separate flag round trip (the flag travels with the data).
// Memory-ordering contract (the one NCCL's LL128 relies on over NVLink, sm_70 and later): a 128-byte-aligned
// line written by one warp-wide instruction of 16-byte st.volatile stores becomes visible at the destination
// as a whole, so a reader that has seen the line's flag sees all of its data *in a load issued after that*
// (the load that saw the flag may have read other sectors of the line earlier: like NCCL, the reader loads
// the line again once every flag of its warp is seen). Readers use ld.volatile (no L1 caching). Both sides
// must keep the warp converged around these instructions (__syncwarp before each).
// Reuse of the two workspace phases: as the LL kernel (rank A writes phase-p lines of launch k+2 only after
// its launch k+1, in which it waited for B's launch-(k+1) lines, which B wrote after its launch k ended).
inline constexpr int kLL128Vals = 60;        // values (16-bit) per 128-byte line
inline constexpr int kLL128LinesPerWarp = 4;  // one 16-byte store per lane
static_assert(kLL128Vals * 2 + 8 == 128, "an LL128 line: 120 data bytes and an 8-byte flag");
__device__ __forceinline__ void st_ll128(uint8_t* p, uint64_t a, uint64_t b) {
  asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(a), "l"(b) : "memory");
}
__device__ __forceinline__ void ld_ll128(const uint8_t* p, uint64_t& a, uint64_t& b) {
  asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];" : "=l"(a), "=l"(b) : "l"(p) : "memory");
}
// The 4 values of a 64-bit word, in order, into x[0..4) (pack4: the reverse, rounded).
template <int DT>
__device__ __forceinline__ void unpack4(uint64_t w, float* x) {
  unpack2<DT>(static_cast<uint32_t>(w), x[0], x[1]);
  unpack2<DT>(static_cast<uint32_t>(w >> 32), x[2], x[3]);
}
template <int DT>
__device__ __forceinline__ uint64_t pack4(const float* x) {
  return static_cast<uint64_t>(to_bits<DT>(x[0])) | static_cast<uint64_t>(to_bits<DT>(x[1])) << 16 |
         static_cast<uint64_t>(to_bits<DT>(x[2])) << 32 | static_cast<uint64_t>(to_bits<DT>(x[3])) << 48;
}

// Workspace per peer slot: ceil(n / 60) lines of 128 bytes. Every rank pushes its whole input to every peer
// (one 16-byte store per lane and peer), then sums the W inputs in rank order (fp32 from 0.f, one rounding
// per add: the bits of every exact algorithm), its own from registers.
template <int DT>
__global__ void __launch_bounds__(512) oneshot_ll128_kernel(const uint16_t* in, uint16_t* out, uint64_t n, int world,
                                                             int rank, const __grid_constant__ ExactWorkspace ws,
                                                             const __grid_constant__ SignalView sig, uint32_t* seq) {
  // With AllReducerConfig::pdl: nothing of the previous kernel's is touched before its completion (the
  // launch counter, the input, the workspace it may still read); the next launch may start its own wait now.
  dev::grid_dependency_wait();
  dev::launch_dependents();
  const uint32_t launch = launch_count(seq);
  const uint32_t epoch = launch + 1;  // flags start at 0 in a fresh workspace
  const uint64_t flag = static_cast<uint64_t>(epoch) << 32 | epoch;
  const uint64_t phase_off = static_cast<uint64_t>(launch & 1u) * world * ws.slot_bytes;
  const uint64_t lines = (n + kLL128Vals - 1) / kLL128Vals;
  const int lane = threadIdx.x % 32, j = lane % 8;
  const bool flag_lane = j == 7;
  const int cap = flag_lane ? 4 : 8;  // this lane's values per line
  const uint64_t warp = (static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const uint64_t warps = static_cast<uint64_t>(gridDim.x) * blockDim.x / 32;
  // Warp-uniform loop: every lane reaches the __any_sync below.
  for (uint64_t l0 = warp * kLL128LinesPerWarp; l0 < lines; l0 += warps * kLL128LinesPerWarp) {
    const uint64_t line = l0 + lane / 8;
    const bool live = line < lines;
    const uint64_t e = line * kLL128Vals + 8 * j;  // this lane's first value
    const int valid = live && e < n ? (n - e < static_cast<uint64_t>(cap) ? static_cast<int>(n - e) : cap) : 0;
    uint64_t m0 = 0, m1 = 0;  // this lane's values (8-byte aligned: 120 bytes per line)
    if (valid == cap) {
      m0 = *reinterpret_cast<const uint64_t*>(in + e);
      if (!flag_lane) m1 = *reinterpret_cast<const uint64_t*>(in + e + 4);
    } else {
      for (int k = 0; k < valid; ++k) (k < 4 ? m0 : m1) |= static_cast<uint64_t>(in[e + k]) << (16 * (k % 4));
    }
    const uint64_t wire = line * 128 + static_cast<uint64_t>(j) * 16;  // this lane's bytes in a slot
    __syncwarp();
    if (live)
      for (int i = 1; i < world; ++i) {
        const int r = (rank + i) % world;
        uint8_t* dst = ws.base[r] + phase_off + static_cast<uint64_t>(rank) * ws.slot_bytes + wire;
        st_ll128(dst, m0, flag_lane ? flag : m1);
      }
    float acc[kVec];
#pragma unroll
    for (int k = 0; k < kVec; ++k) acc[k] = 0.f;
    for (int s = 0; s < world; ++s) {
      uint64_t a = m0, b = m1;
      if (s != rank) {
        const uint8_t* src = ws.base[rank] + phase_off + static_cast<uint64_t>(s) * ws.slot_bytes + wire;
        const uint64_t start = dev::globaltimer_ns();
        bool wait = true;
        for (uint32_t it = 1; wait; ++it) {
          if (live) ld_ll128(src, a, b);
          wait = __any_sync(0xffffffffu, live && flag_lane && b != flag);
          if (wait && (it & 255u) == 0u) {
            const bool late = __any_sync(0xffffffffu, dev::globaltimer_ns() - start > sig.timeout_ns);
            if (late) {
              // The flag lane's last flag word, shuffled by the whole warp (a full-mask shuffle inside lane 0's
              // branch would leave the other lanes out of it).
              const uint64_t seen = __shfl_sync(0xffffffffu, b, 7);
              if (lane == 0)
                dev::record_timeout(sig, static_cast<uint32_t>(OpId::kAllReduceOneShot), 0, s, epoch,
                                    static_cast<uint32_t>(seen));
              return;
            }
            if (__any_sync(0xffffffffu, dev::error_raised(sig))) return;
          }
        }
        __syncwarp();
        if (live) ld_ll128(src, a, b);  // every flag of the warp seen: the lines are whole now
      }
      float x[kVec];
      unpack4<DT>(a, x);
      unpack4<DT>(b, x + 4);  // the flag lane's b: the flag, never added below
#pragma unroll
      for (int k = 0; k < kVec; ++k)
        if (k < cap) acc[k] = __fadd_rn(acc[k], x[k]);
    }
    if (valid == cap) {
      *reinterpret_cast<uint64_t*>(out + e) = pack4<DT>(acc);
      if (!flag_lane) *reinterpret_cast<uint64_t*>(out + e + 4) = pack4<DT>(acc + 4);
    } else {
      for (int k = 0; k < valid; ++k) out[e + k] = to_bits<DT>(acc[k]);
    }
  }
  finish_launch(seq);
}

// Two-shot: push chunk r's slice to peer r's RS slot [me]; flag; reduce my chunk slice, write it to my
// output and to every peer's AG slot [me]; flag; copy the other chunks' slices from my AG slots.
// U: vectors (16 bytes) per thread per loop iteration; a thread issues all U loads before any store or
// sum, so each keeps U loads in flight (U = 1: one load, then its store, as before). The arithmetic and
// the order of every sum are the same for any U: the output is bit-identical.
template <int U, bool STREAM_IN = false>
__device__ __forceinline__ void copy_vecs(uint4* dst, const uint16_t* src, uint64_t c0, uint64_t n, uint64_t v0,
                                          uint64_t v1) {
  // dst[v] = src[c0 + 8v .. c0 + 8v + 8) for v in [v0, v1), elements at or past n excluded.
  for (uint64_t vb = v0 + threadIdx.x; vb < v1; vb += uint64_t(U) * blockDim.x) {
    uint4 d[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const uint64_t v = vb + uint64_t(u) * blockDim.x, e = c0 + v * kVec;
      if (v < v1 && e + kVec <= n) d[u] = ld16<STREAM_IN>(src + e);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const uint64_t v = vb + uint64_t(u) * blockDim.x, e = c0 + v * kVec;
      if (v >= v1 || e >= n) continue;
      if (e + kVec <= n) dst[v] = d[u];
      else
        for (uint64_t k = e; k < n; ++k) reinterpret_cast<uint16_t*>(dst)[k - c0] = src[k];
    }
  }
}

// valid[u]: the values (0..8) of vector vb + u * blockDim.x of a block range ending at v1, in a chunk
// that starts at element c0 of an n-element vector (0 past the range or the end).
template <int U>
__device__ __forceinline__ void valid_counts(int (&valid)[U], uint64_t vb, uint64_t v1, uint64_t c0, uint64_t n) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const uint64_t v = vb + uint64_t(u) * blockDim.x, e = c0 + v * kVec;
    valid[u] = v < v1 && e < n ? static_cast<int>(valid_count(n - e)) : 0;
  }
}

// The exact kernels' fixed-order sum: acc[u] = the sum over s = 0..W-1 (rank order, fp32, one rounding
// per add) of the 8 values at src(s, u), of which valid[u] count (0: skipped, acc[u] stays 0). The U
// loads of one source are issued together, so the bits do not depend on U.
template <int DT, int U, class Src>
__device__ __forceinline__ void sum_in_rank_order(float (&acc)[U][kVec], const int (&valid)[U], int world, Src src) {
#pragma unroll
  for (int u = 0; u < U; ++u)
#pragma unroll
    for (int j = 0; j < kVec; ++j) acc[u][j] = 0.f;
  for (int s = 0; s < world; ++s) {
    float x[U][kVec];
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (valid[u] > 0) load8<DT>(src(s, u), valid[u], x[u]);
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (valid[u] > 0)
#pragma unroll
        for (int j = 0; j < kVec; ++j) acc[u][j] = __fadd_rn(acc[u][j], x[u][j]);
  }
}

// sum_in_rank_order with the loads of two sources in flight at once (PyTorch's load_and_reduce issues
// every source's load before the first add): the raw 16-byte vectors of sources s and s+1 are loaded
// together, then added in rank order, so the bits are sum_in_rank_order's. Costs 4 x U more registers.
// Partial vectors (valid < 8) take load8's scalar path at add time.
template <int DT, int U, class Src>
__device__ __forceinline__ void sum_in_rank_order_paired(float (&acc)[U][kVec], const int (&valid)[U], int world,
                                                         Src src) {
#pragma unroll
  for (int u = 0; u < U; ++u)
#pragma unroll
    for (int j = 0; j < kVec; ++j) acc[u][j] = 0.f;
  for (int s = 0; s < world; s += 2) {
    const bool two = s + 1 < world;
    uint4 r[2][U];
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (valid[u] == kVec) {
        r[0][u] = *reinterpret_cast<const uint4*>(src(s, u));
        if (two) r[1][u] = *reinterpret_cast<const uint4*>(src(s + 1, u));
      }
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      if (k == 1 && !two) break;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (valid[u] <= 0) continue;
        float x[kVec];
        if (valid[u] == kVec) {
          unpack2<DT>(r[k][u].x, x[0], x[1]);
          unpack2<DT>(r[k][u].y, x[2], x[3]);
          unpack2<DT>(r[k][u].z, x[4], x[5]);
          unpack2<DT>(r[k][u].w, x[6], x[7]);
        } else {
          load8<DT>(src(s + k, u), valid[u], x);
        }
#pragma unroll
        for (int j = 0; j < kVec; ++j) acc[u][j] = __fadd_rn(acc[u][j], x[j]);
      }
    }
  }
}

// The symmetric kernels' choice between the two (template flag B: sources loaded in pairs).
template <int DT, int U, bool B, class Src>
__device__ __forceinline__ void sum_sources(float (&acc)[U][kVec], const int (&valid)[U], int world, Src src) {
  if constexpr (B) sum_in_rank_order_paired<DT, U>(acc, valid, world, src);
  else sum_in_rank_order<DT, U>(acc, valid, world, src);
}

template <int DT, int U>
__global__ void __launch_bounds__(512) twoshot_kernel(const uint16_t* in, uint16_t* out, uint64_t n, uint64_t stride,
                                                       int world, int rank, const __grid_constant__ ExactWorkspace ws,
                                                       const __grid_constant__ SignalView sig, int slot0, uint32_t* seq) {
  dev::grid_dependency_wait();  // AllReducerConfig::pdl: see oneshot_ll_kernel
  dev::launch_dependents();
  const int slot = slot0 + blockIdx.x;
  const uint64_t phase_off = static_cast<uint64_t>(launch_phase(seq)) * 2 * world * ws.slot_bytes;
  auto rs = [&](int owner, int from) {
    return reinterpret_cast<uint16_t*>(ws.base[owner] + phase_off + static_cast<uint64_t>(from) * ws.slot_bytes);
  };
  auto ag = [&](int owner, int chunk) {
    return reinterpret_cast<uint16_t*>(ws.base[owner] + phase_off + static_cast<uint64_t>(world + chunk) * ws.slot_bytes);
  };
  uint64_t v0, v1;
  block_vec_range(stride / kVec, v0, v1);
  for (int i = 1; i < world; ++i) {
    const int r = (rank + i) % world;
    copy_vecs<U, kExactStream>(reinterpret_cast<uint4*>(rs(r, rank)), in, stride * r, n, v0, v1);
  }
  if (!dev::barrier_block(sig, slot, static_cast<uint32_t>(OpId::kAllReduceTwoShot))) return;
  {
    const uint64_t c0 = stride * rank;
    for (uint64_t vb = v0 + threadIdx.x; vb < v1; vb += uint64_t(U) * blockDim.x) {
      int valid[U];
      valid_counts<U>(valid, vb, v1, c0, n);
      float acc[U][kVec];
      sum_in_rank_order<DT, U>(acc, valid, world, [&](int s, int u) -> const uint16_t* {
        const uint64_t v = vb + uint64_t(u) * blockDim.x;
        return s == rank ? in + c0 + v * kVec : rs(rank, s) + v * kVec;
      });
      // store8 rounds once to the output dtype: the owner keeps exactly the bytes it sends.
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (valid[u] <= 0) continue;
        const uint64_t v = vb + uint64_t(u) * blockDim.x, e = c0 + v * kVec;
        for (int i = 0; i < world; ++i) {
          const int r = (rank + i) % world;
          if (r == rank) store8<DT, kExactStream>(out + e, valid[u], acc[u]);
          else store8<DT>(ag(r, rank) + v * kVec, valid[u], acc[u]);
        }
      }
    }
  }
  if (!dev::barrier_block(sig, slot, static_cast<uint32_t>(OpId::kAllReduceTwoShot))) return;
  for (int c = 0; c < world; ++c) {
    if (c == rank) continue;
    // out[c0 + 8v ..] = ag(rank, c)[8v ..]: the copy with source and destination offsets swapped.
    const uint64_t c0 = stride * c;
    const uint16_t* src = ag(rank, c);
    for (uint64_t vb = v0 + threadIdx.x; vb < v1; vb += uint64_t(U) * blockDim.x) {
      uint4 d[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const uint64_t v = vb + uint64_t(u) * blockDim.x, e = c0 + v * kVec;
        if (v < v1 && e + kVec <= n) d[u] = ld16<kExactStream>(src + v * kVec);
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const uint64_t v = vb + uint64_t(u) * blockDim.x, e = c0 + v * kVec;
        if (v >= v1 || e >= n) continue;
        if (e + kVec <= n) st16<kExactStream>(out + e, d[u]);
        else
          for (uint64_t k = e; k < n; ++k) out[k] = src[k - c0];
      }
    }
  }
  finish_launch(seq);
}

// ---------------------------------------------------------------------------------------------------
// All-reduce on a symmetric buffer (AllReducer::run_symmetric): every rank's input lives in a buffer
// mapped into every peer, so the kernels read the peers' copies directly (remote loads) instead of
// pushing them through a workspace — PyTorch symmetric memory's model. No workspace, no launch phase.
//
// Ordering (signal_device.cuh): barrier 1 — block b of every rank has started, so every rank's input
// (written by earlier stream work) is visible to every peer's block b. Barrier 2 — every write a block
// made to a peer's copy (two-shot) and every read of a peer's copy happened before any rank's block b
// returns: after the kernel a rank may overwrite its copy, and its copy holds every chunk.
// Block b of every rank only touches its own set of vectors of a chunk (symm_block_vecs: the same set on
// every rank), so it only meets block b. Template flag B (AllReducerConfig::symm_pair_oneshot / _twoshot): each
// thread loads two sources' vectors before adding them (sum_in_rank_order_paired); the same bits.

struct PeerBufs {
  uint16_t* p[kMaxPeers];  // rank r's copy, mapped here
};

// The one-shot body, shared by symm_oneshot_kernel (sources: the peers' mapped copies) and
// sum_local_kernel (sources in local memory): for vectors vb + u x blockDim (u < U) below v1,
// out = the rank-order fp32 sum over src.p[0..world) of an n-element vector, rounded once. Each thread
// reads all of its vectors before it stores them, so `out` may be one of the sources.
template <int DT, int U, class Srcs, bool B = false>
__device__ __forceinline__ void sum_vectors_to(const Srcs& src, int world, uint16_t* out, uint64_t vb, uint64_t v1,
                                               uint64_t n) {
  int valid[U];
  valid_counts<U>(valid, vb, v1, 0, n);
  float acc[U][kVec];
  sum_sources<DT, U, B>(acc, valid, world, [&](int s, int u) -> const uint16_t* {
    return src.p[s] + (vb + uint64_t(u) * blockDim.x) * kVec;
  });
#pragma unroll
  for (int u = 0; u < U; ++u)
    if (valid[u] > 0) store8<DT>(out + (vb + uint64_t(u) * blockDim.x) * kVec, valid[u], acc[u]);
}

// The vectors block b handles, the same set on every rank (so block b only meets block b): blocked —
// one contiguous range [b*V/NB, (b+1)*V/NB); interleaved — pieces of U x blockDim vectors dealt round
// robin over the blocks (PyTorch's grid-stride order: the grid's in-flight accesses stay in one window
// of the buffer). The loop is `for (vb = v0 + threadIdx.x; vb < v1; vb += step)`, with vectors
// vb + u x blockDim (u < U) in each iteration; valid_counts bounds them by v1.
template <int U>
__device__ __forceinline__ void symm_block_vecs(uint64_t vecs, int interleaved, uint64_t& v0, uint64_t& v1,
                                                uint64_t& step) {
  if (interleaved) {
    v0 = uint64_t(blockIdx.x) * U * blockDim.x;
    v1 = vecs;
    step = uint64_t(gridDim.x) * U * blockDim.x;
  } else {
    block_vec_range(vecs, v0, v1);
    step = uint64_t(U) * blockDim.x;
  }
}

// Two-shot, in place: rank r reduces chunk r (stride elements at stride * r) from all W copies in rank
// order (fp32) and stores the rounded sum into chunk r of every copy; no other rank reads or writes
// chunk r of any copy, so the in-place writes race with nothing.
template <int DT, int U, bool B>
__global__ void __launch_bounds__(512) symm_twoshot_kernel(const __grid_constant__ PeerBufs b, uint64_t n,
                                                            uint64_t stride, int world, int rank,
                                                            const __grid_constant__ SignalView sig, int slot0,
                                                            int interleaved) {
  dev::grid_dependency_wait();  // AllReducerConfig::pdl: see oneshot_ll_kernel
  dev::launch_dependents();
  const int slot = slot0 + blockIdx.x;
  uint64_t v0, v1, step;
  symm_block_vecs<U>(stride / kVec, interleaved, v0, v1, step);
  if (!dev::barrier_block(sig, slot, static_cast<uint32_t>(OpId::kAllReduceSymmetric))) return;
  const uint64_t c0 = stride * rank;
  for (uint64_t vb = v0 + threadIdx.x; vb < v1; vb += step) {
    int valid[U];
    valid_counts<U>(valid, vb, v1, c0, n);
    float acc[U][kVec];
    sum_sources<DT, U, B>(acc, valid, world, [&](int s, int u) -> const uint16_t* {
      return b.p[s] + c0 + (vb + uint64_t(u) * blockDim.x) * kVec;
    });
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (valid[u] <= 0) continue;
      const uint64_t e = c0 + (vb + uint64_t(u) * blockDim.x) * kVec;
      for (int i = 0; i < world; ++i) store8<DT>(b.p[(rank + i) % world] + e, valid[u], acc[u]);
    }
  }
  dev::barrier_block(sig, slot, static_cast<uint32_t>(OpId::kAllReduceSymmetric));
}

// One-shot, out of place: every rank reads all W copies of the whole vector and writes the sum to its
// local `out` (which must not alias its copy: a peer's block b still reads that range of it).
template <int DT, int U, bool B>
__global__ void __launch_bounds__(512) symm_oneshot_kernel(const __grid_constant__ PeerBufs b, uint16_t* out,
                                                            uint64_t n, int world,
                                                            const __grid_constant__ SignalView sig, int slot0,
                                                            int interleaved) {
  dev::grid_dependency_wait();  // AllReducerConfig::pdl: see oneshot_ll_kernel
  dev::launch_dependents();
  const int slot = slot0 + blockIdx.x;
  uint64_t v0, v1, step;
  symm_block_vecs<U>((n + kVec - 1) / kVec, interleaved, v0, v1, step);
  if (!dev::barrier_block(sig, slot, static_cast<uint32_t>(OpId::kAllReduceSymmetric))) return;
  for (uint64_t vb = v0 + threadIdx.x; vb < v1; vb += step)
    sum_vectors_to<DT, U, PeerBufs, B>(b, world, out, vb, v1, n);
  dev::barrier_block(sig, slot, static_cast<uint32_t>(OpId::kAllReduceSymmetric));
}

// ---------------------------------------------------------------------------------------------------
// One-shot by copy engines (run_symmetric, kOneShotCE). The SMs never touch a peer's memory: a barrier
// kernel, then cudaMemcpyAsync pulls each peer's chunk into local memory on a side stream, then an add
// kernel per chunk (after its copy's event) sums the W local sources in rank order, then a second
// barrier kernel (on the side stream, after the last copy) keeps every rank from returning while a peer
// still copies from its buffer.
//
// Ordering: the first barrier's release (block 0 of every rank, after the earlier stream work that wrote
// the input) and acquire happen before the copies in stream order, so the copies read complete inputs;
// the copies complete before the second barrier's release in stream order, so no rank overwrites its
// copy (later stream work) before every peer's reads of it are done.
__global__ void symm_barrier_kernel(const __grid_constant__ SignalView sig, int slot) {
  dev::barrier_block(sig, slot, static_cast<uint32_t>(OpId::kAllReduceSymmetric));
}

struct LocalSrcs {
  const uint16_t* p[kMaxPeers];  // rank r's values, already in this GPU's memory
};

// out[i] = the rank-order fp32 sum of src.p[0..world)[i], rounded once (the exact kernels' arithmetic, so
// the same bits as every other exact algorithm). `out` may be one of the sources (each thread reads all
// of its vectors before it stores them).
template <int DT, int U>
__global__ void __launch_bounds__(512) sum_local_kernel(const __grid_constant__ LocalSrcs src, uint16_t* out,
                                                         uint64_t n, int world) {
  const uint64_t vecs = (n + kVec - 1) / kVec;
  const uint64_t step = uint64_t(gridDim.x) * U * blockDim.x;
  for (uint64_t vb = uint64_t(blockIdx.x) * U * blockDim.x + threadIdx.x; vb < vecs; vb += step)
    sum_vectors_to<DT, U>(src, world, out, vb, vecs, n);
}

}  // namespace braid::ar
