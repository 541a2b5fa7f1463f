// braid/quant.hpp — group-wise asymmetric integer quantization (Flash Communication).
//
// The scalar arithmetic below is the single definition of braid's quantizer. It is compiled for the
// host (CPU reference, tests) and for the device (all-reduce kernels) from this one header, and it
// uses only correctly rounded operations with no contraction freedom (explicit fma, IEEE division,
// round-to-nearest-even), so the GPU and the CPU produce bit-identical codes, scales and outputs.
//
// Format of one group of g values (g in {32, 64, 128, 256}, default 128):
//   zero  z = fp16(min(x))                      (rounded to nearest)
//   scale s = fp16((max(x) - min(x)) / (2^b - 1)); a scale of 0 (constant group) is stored as 0 and
//             every code is 0, so the group decodes exactly to z.
//   code  q = clamp(rint((x - z) * (1 / s)), 0, 2^b - 1)       (fp32 arithmetic, one rounding each)
//   value x' = fma(q, s, z)                                      (fp32, one rounding)
// Payload: INT8 one byte per value; INT4 two values per byte, the even element in the low nibble.
// Metadata: one (scale, zero) pair of fp16 per group, 4 bytes.
#pragma once

#include <cstdint>
#include <cmath>

#if defined(__CUDACC__)
#define BRAID_HD __host__ __device__ __forceinline__
#else
#define BRAID_HD inline
#endif

namespace braid::quant {

// Half-precision bits <-> float conversion that is identical on host and device (round to nearest
// even, IEEE binary16 with subnormals). Device code uses the hardware conversion, which matches.
BRAID_HD uint16_t float_to_half_bits(float f) {
#if defined(__CUDA_ARCH__)
  uint16_t h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
#else
  uint32_t x;
  __builtin_memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) return static_cast<uint16_t>(sign | (absx > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (absx >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (absx < 0x38800000u) {                                               // subnormal or zero in fp16
    if (absx < 0x33000000u) return static_cast<uint16_t>(sign);          // < 2^-25: rounds to 0
    const uint32_t mant = (absx & 0x7fffffu) | 0x800000u;
    const int shift = 126 - static_cast<int>(absx >> 23);                // 14..24 (+1 for subnormal)
    const uint32_t q = mant >> (shift);
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1);
    uint32_t r = q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
    return static_cast<uint16_t>(sign | r);
  }
  uint32_t r = absx - 0x38000000u;  // rebias exponent 127 -> 15 (shifted by 13 below)
  const uint32_t rem = r & 0x1fffu;
  r >>= 13;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;
  return static_cast<uint16_t>(sign | r);
#endif
}

BRAID_HD float half_bits_to_float(uint16_t h) {
#if defined(__CUDA_ARCH__)
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
#else
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t x;
  if (exp == 0) {
    if (mant == 0) {
      x = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do { mant <<= 1; ++e; } while ((mant & 0x400u) == 0);
      x = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (mant & 0x3ffu) << 13;
    }
  } else if (exp == 31) {
    x = sign | 0x7f800000u | (mant << 13);
  } else {
    x = sign | (exp + 112u) << 23 | (mant << 13);
  }
  float f;
  __builtin_memcpy(&f, &x, 4);
  return f;
#endif
}

// bf16 bits -> float is exact; float -> bf16 rounds to nearest even (NaN kept quiet).
BRAID_HD float bf16_bits_to_float(uint16_t b) {
  const uint32_t x = static_cast<uint32_t>(b) << 16;
  float f;
#if defined(__CUDA_ARCH__)
  f = __uint_as_float(x);
#else
  __builtin_memcpy(&f, &x, 4);
#endif
  return f;
}
BRAID_HD uint16_t float_to_bf16_bits(float f) {
#if defined(__CUDA_ARCH__)
  uint16_t h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
#else
  uint32_t x;
  __builtin_memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
#endif
}

// One rounding each; no FMA contraction possible.
BRAID_HD float sub_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  volatile float r = a - b;
  return r;
#endif
}
BRAID_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  volatile float r = a * b;
  return r;
#endif
}
BRAID_HD float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  volatile float r = a / b;
  return r;
#endif
}
BRAID_HD float fma_rn(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}
BRAID_HD float rint_f(float a) {
#if defined(__CUDA_ARCH__)
  return rintf(a);
#else
  return std::nearbyint(a);  // default rounding mode: to nearest even
#endif
}

// Parameters of one group, derived from its min and max.
struct GroupParams {
  uint16_t scale_h;  // fp16 bits, stored
  uint16_t zero_h;   // fp16 bits, stored
  float scale;       // = half(scale_h)
  float zero;        // = half(zero_h)
  float inv_scale;   // = 1 / scale, or 0 for a constant group
};

BRAID_HD GroupParams make_params(float mn, float mx, int bits) {
  GroupParams p;
  const float qmax = static_cast<float>((1 << bits) - 1);
  p.zero_h = float_to_half_bits(mn);
  p.scale_h = float_to_half_bits(div_rn(sub_rn(mx, mn), qmax));
  p.zero = half_bits_to_float(p.zero_h);
  p.scale = half_bits_to_float(p.scale_h);
  p.inv_scale = p.scale > 0.f ? div_rn(1.f, p.scale) : 0.f;
  return p;
}

// Parameters read back from stored fp16 bits (the receiver's side).
BRAID_HD GroupParams load_params(uint16_t scale_h, uint16_t zero_h) {
  GroupParams p;
  p.scale_h = scale_h;
  p.zero_h = zero_h;
  p.scale = half_bits_to_float(scale_h);
  p.zero = half_bits_to_float(zero_h);
  p.inv_scale = p.scale > 0.f ? div_rn(1.f, p.scale) : 0.f;
  return p;
}

BRAID_HD uint32_t quantize_one(float x, const GroupParams& p, int bits) {
  const float qmax = static_cast<float>((1 << bits) - 1);
  float q = rint_f(mul_rn(sub_rn(x, p.zero), p.inv_scale));
  q = q < 0.f ? 0.f : (q > qmax ? qmax : q);
  return static_cast<uint32_t>(q);
}

BRAID_HD float dequantize_one(uint32_t q, const GroupParams& p) {
  return fma_rn(static_cast<float>(q), p.scale, p.zero);
}

// Bytes of payload for n values at `bits` (INT4 packs two per byte; n odd rounds up).
constexpr uint64_t payload_bytes(uint64_t n, int bits) { return bits == 8 ? n : (n + 1) / 2; }
constexpr uint64_t num_groups(uint64_t n, int group) { return (n + group - 1) / group; }
constexpr uint64_t meta_bytes(uint64_t n, int group) { return num_groups(n, group) * 4; }

// Elements per chunk of the two-step all-reduce of n values over `world` ranks: ceil(n / world)
// rounded up to a multiple of the group, so groups never straddle chunks (chunk r starts at r*stride).
constexpr uint64_t chunk_stride(uint64_t n, int world, int group) {
  const uint64_t c = (n + static_cast<uint64_t>(world) - 1) / static_cast<uint64_t>(world);
  return (c + static_cast<uint64_t>(group) - 1) / static_cast<uint64_t>(group) * static_cast<uint64_t>(group);
}

}  // namespace braid::quant
