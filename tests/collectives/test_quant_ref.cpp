// Unit tests of the quantizer arithmetic (braid/quant.hpp) and its CPU reference (braid/quant_ref.hpp):
// fp16/bf16 conversions against independent references, the group quantizer's error bound, the INT4
// packing order, partial and constant groups.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "braid/dist.hpp"
#include "braid/quant.hpp"
#include "braid/quant_ref.hpp"

namespace q = braid::quant;

namespace {

float bits_f(uint32_t x) {
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}
uint32_t f_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  return x;
}

#if defined(__FLT16_MAX__)
#define BRAID_HAVE_FLOAT16 1
uint16_t ref_f2h(float f) {
  volatile float vf = f;
  _Float16 h = static_cast<_Float16>(vf);
  uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}
float ref_h2f(uint16_t b) {
  _Float16 h;
  std::memcpy(&h, &b, 2);
  return static_cast<float>(h);
}
#endif

bool is_nan_h(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }

// Independent bf16 reference: nearest of the two bf16 neighbours, compared in double; ties to even.
uint16_t ref_f2bf(float f) {
  const uint32_t x = f_bits(f);
  if (std::isnan(f)) return 0x7fc0;  // only NaN-ness is compared
  const uint32_t lo = x & 0xffff0000u;
  if (lo == x) return static_cast<uint16_t>(x >> 16);
  const double dlo = bits_f(lo);
  const uint32_t hi_bits = lo + 0x10000u;  // next magnitude (may be inf)
  const double dhi = (hi_bits & 0x7fffffffu) == 0x7f800000u ? std::ldexp(std::copysign(1.0, f), 128) : double(bits_f(hi_bits));
  const double df = f;
  const double elo = std::fabs(df - dlo), ehi = std::fabs(dhi - df);
  if (elo < ehi) return static_cast<uint16_t>(lo >> 16);
  if (ehi < elo) return static_cast<uint16_t>(hi_bits >> 16);
  return static_cast<uint16_t>(((lo >> 16) & 1u) ? (hi_bits >> 16) : (lo >> 16));
}

}  // namespace

#ifdef BRAID_HAVE_FLOAT16
TEST(Fp16, AllHalvesDecodeAndRoundTrip) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = q::half_bits_to_float(static_cast<uint16_t>(h));
    const float r = ref_h2f(static_cast<uint16_t>(h));
    if (is_nan_h(static_cast<uint16_t>(h))) {
      EXPECT_TRUE(std::isnan(f)) << std::hex << h;
      EXPECT_TRUE(is_nan_h(q::float_to_half_bits(f))) << std::hex << h;
      continue;
    }
    ASSERT_EQ(f_bits(f), f_bits(r)) << "half 0x" << std::hex << h;
    ASSERT_EQ(q::float_to_half_bits(f), h) << "round trip of half 0x" << std::hex << h;
  }
}

TEST(Fp16, EncodeMatchesFloat16AtEveryRoundingBoundary) {
  // For every half h: the float h itself, the midpoint to the next half and its float neighbours,
  // and the float neighbours of h: every tie and every boundary of the rounding function.
  uint64_t checked = 0;
  for (uint32_t h = 0; h < 0x7c00u; ++h) {
    for (uint32_t sign : {0u, 0x8000u}) {
      const double a = ref_h2f(static_cast<uint16_t>(h));
      const double b = h + 1 < 0x7c00u ? double(ref_h2f(static_cast<uint16_t>(h + 1))) : 65536.0;
      const float mid = static_cast<float>((a + b) / 2);  // exact: halves have <= 11 significant bits
      ASSERT_EQ(double(mid), (a + b) / 2);
      const float base = static_cast<float>(a);
      for (float v : {base, std::nextafter(base, 1e30f), std::nextafter(base, -1e30f), mid,
                      std::nextafter(mid, 1e30f), std::nextafter(mid, -1e30f)}) {
        const float s = sign ? -v : v;
        ASSERT_EQ(q::float_to_half_bits(s), ref_f2h(s)) << "float 0x" << std::hex << f_bits(s);
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 0x7c00u * 2 * 6);
}

TEST(Fp16, EncodeMatchesFloat16OnRandomAndSpecialFloats) {
  std::mt19937_64 rng(12345);
  for (int i = 0; i < 4000000; ++i) {
    uint32_t x = static_cast<uint32_t>(rng());
    if (i & 1) x = (x & 0x80ffffffu) | ((0x60u + (x >> 24) % 0x20u) << 23);  // bias toward fp16's range
    const float f = bits_f(x);
    const uint16_t a = q::float_to_half_bits(f), b = ref_f2h(f);
    if (std::isnan(f)) {
      ASSERT_TRUE(is_nan_h(a)) << std::hex << x;
      continue;
    }
    ASSERT_EQ(a, b) << "float 0x" << std::hex << x;
  }
  const float specials[] = {0.f, -0.f, INFINITY, -INFINITY, 65504.f, 65519.99f, 65520.f, -65520.f, 65536.f,
                            1e10f, 0x1p-14f, 0x1p-24f, 0x1p-25f, 0x1.000002p-25f, 0x1.8p-24f, 0x1.8p-25f,
                            0x1p-26f, 0x1.ffcp-15f, 0x1.ffep-15f, 0x1p-149f, 3.0e-8f, 1.0f + 0x1p-11f,
                            1.0f + 0x1p-11f + 0x1p-23f, 1.0f + 3 * 0x1p-11f, 2049.f, 2051.f, FLT_MAX, FLT_MIN};
  for (float f : specials)
    for (float s : {f, -f}) EXPECT_EQ(q::float_to_half_bits(s), ref_f2h(s)) << s;
  EXPECT_TRUE(is_nan_h(q::float_to_half_bits(NAN)));
  EXPECT_EQ(q::float_to_half_bits(65520.f), 0x7c00);
  EXPECT_EQ(q::float_to_half_bits(65519.99f), 0x7bff);
}
#else
TEST(Fp16, NeedsFloat16) { GTEST_SKIP() << "compiler has no _Float16"; }
#endif

TEST(Bf16, EncodeMatchesReferenceAtEveryRoundingBoundary) {
  for (uint32_t b = 0; b < 65536; ++b) {
    for (uint32_t low : {0u, 1u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu}) {
      const uint32_t x = (b << 16) | low;
      const float f = bits_f(x);
      const uint16_t got = q::float_to_bf16_bits(f);
      if (std::isnan(f)) {
        ASSERT_TRUE((got & 0x7f80u) == 0x7f80u && (got & 0x7fu) != 0) << std::hex << x;
        continue;
      }
      ASSERT_EQ(got, ref_f2bf(f)) << "float 0x" << std::hex << x;
      if (low == 0) {
        ASSERT_EQ(f_bits(q::bf16_bits_to_float(got)), x);
      }
    }
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 2000000; ++i) {
    const float f = bits_f(static_cast<uint32_t>(rng()));
    if (std::isnan(f)) continue;
    ASSERT_EQ(q::float_to_bf16_bits(f), ref_f2bf(f)) << std::hex << f_bits(f);
  }
}

TEST(Quantizer, RoundTripWithinHalfStep) {
  // Centred data: the rounding term s/2 dominates the bound; no value is clamped.
  for (int bits : {4, 8}) {
    for (int g : {32, 64, 128, 256}) {
      for (auto d : {braid::dist::Distribution::normal, braid::dist::Distribution::student_t,
                     braid::dist::Distribution::outlier}) {
        const uint64_t n = 64 * 1024 + 17;
        std::vector<float> x = braid::dist::generate(d, n, 99, 3);
        for (auto& v : x) v = q::bf16_bits_to_float(q::float_to_bf16_bits(v));
        const q::Quantized qz = q::quantize(x, bits, g);
        ASSERT_EQ(qz.payload.size(), q::payload_bytes(n, bits));
        ASSERT_EQ(qz.meta.size(), 2 * q::num_groups(n, g));
        const std::vector<float> y = q::dequantize(qz);
        for (uint64_t k = 0; k < q::num_groups(n, g); ++k) {
          const uint64_t b = k * g, len = std::min<uint64_t>(g, n - b);
          const q::GroupParams p = q::group_params(x.data() + b, len, bits);
          ASSERT_EQ(p.scale_h, qz.meta[2 * k]);
          ASSERT_EQ(p.zero_h, qz.meta[2 * k + 1]);
          float mn = x[b], mx = x[b];
          for (uint64_t i = b; i < b + len; ++i) mn = std::min(mn, x[i]), mx = std::max(mx, x[i]);
          const double bound = q::quant_error_bound(mn, mx, bits);
          const double half_step = p.scale * (0.5 + 1e-4) + 0x1p-22 * std::max(std::fabs(mn), std::fabs(mx));
          for (uint64_t i = b; i < b + len; ++i) {
            const double e = std::fabs(double(y[i]) - x[i]);
            ASSERT_LE(e, bound) << "bits " << bits << " g " << g << " i " << i;
            ASSERT_LE(e, half_step) << "bits " << bits << " g " << g << " i " << i;
            ASSERT_LE(q::code_at(qz, i), (1u << bits) - 1);
          }
        }
      }
    }
  }
}

TEST(Quantizer, OffsetGroupIsClampedButWithinBound) {
  // All values in [1000, 1001]: fp16's ulp at 1000 is 0.5, so the stored zero can sit 0.25 away from
  // the minimum, far more than s/2 = 1/510. Values below the zero decode to it (clamped); the bound
  // accounts for it. This is a property of the format (zero = fp16(min) rounded to nearest).
  std::vector<float> x(128);
  for (int i = 0; i < 128; ++i) x[i] = 1000.2f + static_cast<float>(i) / 127.0f;  // min 1000.2 -> z = 1000.0
  const q::Quantized qz = q::quantize(x, 8, 128);
  const std::vector<float> y = q::dequantize(qz);
  const q::GroupParams p = q::load_params(qz.meta[0], qz.meta[1]);
  const double bound = q::quant_error_bound(x.front(), x.back(), 8);
  double worst = 0;
  for (int i = 0; i < 128; ++i) worst = std::max(worst, std::fabs(double(y[i]) - x[i]));
  EXPECT_EQ(p.zero, 1000.0f);
  EXPECT_GT(worst, 10 * p.scale);  // clamped at the top: qmax * s = 1 cannot reach 1001.2 from 1000
  EXPECT_LE(worst, bound);
  EXPECT_LE(bound, 0.25 + 0.01);
}

TEST(Quantizer, Int4PackingEvenElementInLowNibble) {
  std::vector<float> x(32);
  for (int i = 0; i < 32; ++i) x[i] = static_cast<float>((i * 7) % 16);  // 0..15 present: s = 1, z = 0
  const q::Quantized qz = q::quantize(x, 4, 32);
  ASSERT_EQ(qz.payload.size(), 16u);
  EXPECT_EQ(q::half_bits_to_float(qz.meta[0]), 1.0f);
  EXPECT_EQ(q::half_bits_to_float(qz.meta[1]), 0.0f);
  for (int i = 0; i < 16; ++i) {
    const uint8_t expect = static_cast<uint8_t>(((i * 2 * 7) % 16) | (((i * 2 + 1) * 7) % 16) << 4);
    EXPECT_EQ(qz.payload[i], expect) << i;
  }
  EXPECT_EQ(q::dequantize(qz), x);
  // Odd n: the last byte's high nibble is 0.
  std::vector<float> odd(x.begin(), x.begin() + 31);
  const q::Quantized qo = q::quantize(odd, 4, 32);
  ASSERT_EQ(qo.payload.size(), 16u);
  EXPECT_EQ(qo.payload[15] >> 4, 0);
  EXPECT_EQ(q::dequantize(qo), odd);
}

TEST(Quantizer, Int8CodesAreBytesInOrder) {
  std::vector<float> x(256);
  for (int i = 0; i < 256; ++i) x[i] = static_cast<float>(255 - i);  // s = 1, z = 0: code == value
  const q::Quantized qz = q::quantize(x, 8, 256);
  for (int i = 0; i < 256; ++i) ASSERT_EQ(qz.payload[i], 255 - i);
  EXPECT_EQ(qz.meta[0], 0x3c00);  // 1.0
  EXPECT_EQ(qz.meta[1], 0x0000);  // +0.0
}

TEST(Quantizer, PartialLastGroupUsesOnlyValidValues) {
  for (int bits : {4, 8}) {
    const uint64_t n = 128 + 37;
    std::vector<float> x(n);
    for (uint64_t i = 0; i < n; ++i) x[i] = i < 128 ? 100.0f * std::sin(float(i)) : 0.25f * float(i - 128) - 3.0f;
    const q::Quantized qz = q::quantize(x, bits, 128);
    ASSERT_EQ(qz.meta.size(), 4u);
    const q::GroupParams p = q::make_params(-3.0f, 0.25f * 36 - 3.0f, bits);
    EXPECT_EQ(qz.meta[2], p.scale_h);
    EXPECT_EQ(qz.meta[3], p.zero_h);
    const std::vector<float> y = q::dequantize(qz);
    for (uint64_t i = 128; i < n; ++i) EXPECT_LE(std::fabs(y[i] - x[i]), p.scale * 0.5001) << i;
  }
}

TEST(Quantizer, ConstantGroupsDecodeExactly) {
  for (int bits : {4, 8}) {
    for (float c : {0.0f, -0.0f, 1.5f, -3.0f, q::bf16_bits_to_float(q::float_to_bf16_bits(-1234.567f)), 65504.f}) {
      std::vector<float> x(100, c);  // one full group of 64 and a partial one of 36
      const q::Quantized qz = q::quantize(x, bits, 64);
      EXPECT_EQ(qz.meta[0], 0) << c;  // scale 0
      EXPECT_EQ(qz.meta[2], 0) << c;
      for (uint64_t i = 0; i < x.size(); ++i) EXPECT_EQ(q::code_at(qz, i), 0u);
      for (float v : q::dequantize(qz)) EXPECT_EQ(v, c) << c;  // bf16/fp16-representable c: exact
    }
    // A constant that fp16 cannot represent decodes to its fp16 rounding.
    std::vector<float> x(64, 3.14159265f);
    for (float v : q::dequantize(q::quantize(x, bits, 64))) EXPECT_EQ(v, q::half_bits_to_float(q::float_to_half_bits(3.14159265f)));
  }
}

TEST(Quantizer, ExtremesDecodeNearEnds) {
  // The minimum decodes to the zero; the maximum to within the bound.
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (int bits : {4, 8}) {
    for (int t = 0; t < 1000; ++t) {
      std::vector<float> x(128);
      for (auto& v : x) v = nd(rng);
      const q::Quantized qz = q::quantize(x, bits, 128);
      const std::vector<float> y = q::dequantize(qz);
      const auto mn = std::min_element(x.begin(), x.end()) - x.begin();
      const q::GroupParams p = q::load_params(qz.meta[0], qz.meta[1]);
      EXPECT_LE(std::fabs(y[mn] - x[mn]), std::fabs(p.zero - x[mn]) + p.scale * 0.5001);
    }
  }
}

TEST(Quantizer, RejectsBadArguments) {
  std::vector<float> x(10, 1.0f);
  EXPECT_THROW(q::quantize(x, 6, 128), std::invalid_argument);
  EXPECT_THROW(q::quantize(x, 8, 100), std::invalid_argument);
  EXPECT_EQ(q::parse_mode("int6"), q::Mode::int6);
  EXPECT_EQ(q::parse_mode("int5"), std::nullopt);
  EXPECT_EQ(q::parse_dtype("fp16"), q::Dtype::fp16);
  EXPECT_STREQ(q::mode_name(q::Mode::int4), "int4");
  EXPECT_EQ(q::mode_bits(q::Mode::int6).step1, 4);
  EXPECT_EQ(q::mode_bits(q::Mode::int6).step2, 8);
}

TEST(Chunks, CoverTheVectorInGroupMultiples) {
  for (uint64_t n : {0ull, 1ull, 5ull, 127ull, 128ull, 1000ull, 4096ull * 3 + 1, 1ull << 20}) {
    for (int w : {1, 2, 3, 4, 8}) {
      for (int g : {32, 128, 256}) {
        const uint64_t c = q::chunk_stride(n, w, g);
        EXPECT_EQ(c % g, 0u);
        EXPECT_GE(c * w, n);
        uint64_t next = 0;
        for (int r = 0; r < w; ++r) {
          const q::ChunkRange cr = q::chunk_range(n, w, g, r);
          EXPECT_EQ(cr.begin, next);
          EXPECT_LE(cr.end, n);
          next = cr.end;
        }
        EXPECT_EQ(next, n);
      }
    }
  }
}
