// CPU reference of the quantized two-step all-reduce; see braid/quant_ref.hpp.
//
// Floating-point contract: this file must be compiled without -ffast-math and without FP contraction
// (g++ -std=c++20, i.e. ISO mode, implies -ffp-contract=off; the quantizer itself in quant.hpp uses
// volatile / explicit fma so it cannot be contracted anyway). The only fp32 arithmetic here outside
// quant.hpp is the rank-ordered sum `s = s + x_r`, which has no multiplication to contract.
#include "braid/quant_ref.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace braid::quant {

namespace {

constexpr double kU = 0x1p-24;  // unit roundoff of fp32

void check_bits_group(int bits, int group) {
  if (!valid_bits(bits)) throw std::invalid_argument("braid::quant: bits must be 4 or 8, got " + std::to_string(bits));
  if (!valid_group(group))
    throw std::invalid_argument("braid::quant: group must be 32, 64, 128 or 256, got " + std::to_string(group));
}

// IEEE 754-2019 minimum/maximum for non-NaN values: -0 < +0.
inline bool less_total(float a, float b) {
  return a < b || (a == b && std::signbit(a) && !std::signbit(b));
}

// Half of one ulp of y in the output dtype (upper bound of the rounding error of from_float(y)), and
// the ulp itself for the variance term.
double out_ulp(double y, Dtype d) {
  const int mant = d == Dtype::bf16 ? 7 : 10;
  const int emin = d == Dtype::bf16 ? -126 : -14;
  if (y == 0) return 0;
  int e;
  std::frexp(std::fabs(y), &e);  // |y| = m * 2^e, m in [0.5, 1)
  int ex = e - 1;                 // 2^ex <= |y|
  if (ex < emin) ex = emin;       // subnormal spacing
  return std::ldexp(1.0, ex - mant);
}

}  // namespace

const char* mode_name(Mode m) {
  switch (m) {
    case Mode::int8: return "int8";
    case Mode::int6: return "int6";
    case Mode::int4: return "int4";
  }
  return "?";
}

std::optional<Mode> parse_mode(std::string_view s) {
  if (s == "int8") return Mode::int8;
  if (s == "int6") return Mode::int6;
  if (s == "int4") return Mode::int4;
  return std::nullopt;
}

const char* dtype_name(Dtype d) { return d == Dtype::bf16 ? "bf16" : "fp16"; }

std::optional<Dtype> parse_dtype(std::string_view s) {
  if (s == "bf16") return Dtype::bf16;
  if (s == "fp16") return Dtype::fp16;
  return std::nullopt;
}

float to_float(uint16_t bits, Dtype d) { return d == Dtype::bf16 ? bf16_bits_to_float(bits) : half_bits_to_float(bits); }
uint16_t from_float(float f, Dtype d) { return d == Dtype::bf16 ? float_to_bf16_bits(f) : float_to_half_bits(f); }

std::vector<uint16_t> to_bits(std::span<const float> x, Dtype dtype) {
  std::vector<uint16_t> r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = from_float(x[i], dtype);
  return r;
}
std::vector<float> to_floats(std::span<const uint16_t> x, Dtype dtype) {
  std::vector<float> r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = to_float(x[i], dtype);
  return r;
}

GroupParams group_params(const float* x, uint64_t len, int bits) {
  float mn = x[0], mx = x[0];
  for (uint64_t i = 1; i < len; ++i) {
    if (less_total(x[i], mn)) mn = x[i];
    if (less_total(mx, x[i])) mx = x[i];
  }
  return make_params(mn, mx, bits);
}

void quantize_groups(const float* x, uint64_t n, int bits, int group, uint8_t* payload, uint16_t* meta) {
  check_bits_group(bits, group);
  if (bits == 4) std::fill(payload, payload + payload_bytes(n, 4), uint8_t{0});
  const uint64_t ng = num_groups(n, group);
  for (uint64_t k = 0; k < ng; ++k) {
    const uint64_t b = k * group;
    const uint64_t len = std::min<uint64_t>(group, n - b);
    const GroupParams p = group_params(x + b, len, bits);
    meta[2 * k] = p.scale_h;
    meta[2 * k + 1] = p.zero_h;
    for (uint64_t i = b; i < b + len; ++i) {
      const uint32_t q = quantize_one(x[i], p, bits);
      if (bits == 8) {
        payload[i] = static_cast<uint8_t>(q);
      } else {
        payload[i / 2] |= static_cast<uint8_t>((i & 1) ? (q << 4) : q);
      }
    }
  }
}

void dequantize_groups(const uint8_t* payload, const uint16_t* meta, uint64_t n, int bits, int group, float* out) {
  check_bits_group(bits, group);
  const uint64_t ng = num_groups(n, group);
  for (uint64_t k = 0; k < ng; ++k) {
    const uint64_t b = k * group;
    const uint64_t len = std::min<uint64_t>(group, n - b);
    const GroupParams p = load_params(meta[2 * k], meta[2 * k + 1]);
    for (uint64_t i = b; i < b + len; ++i) {
      const uint32_t q = bits == 8 ? payload[i] : ((payload[i / 2] >> ((i & 1) * 4)) & 0xfu);
      out[i] = dequantize_one(q, p);
    }
  }
}

Quantized quantize(std::span<const float> x, int bits, int group) {
  check_bits_group(bits, group);
  Quantized q;
  q.bits = bits;
  q.group = group;
  q.n = x.size();
  q.payload.assign(payload_bytes(q.n, bits), 0);
  q.meta.assign(2 * num_groups(q.n, group), 0);
  quantize_groups(x.data(), q.n, bits, group, q.payload.data(), q.meta.data());
  return q;
}

std::vector<float> dequantize(const Quantized& q) {
  std::vector<float> out(q.n);
  dequantize_groups(q.payload.data(), q.meta.data(), q.n, q.bits, q.group, out.data());
  return out;
}

uint32_t code_at(const Quantized& q, uint64_t i) {
  return q.bits == 8 ? q.payload[i] : ((q.payload[i / 2] >> ((i & 1) * 4)) & 0xfu);
}

double quant_error_bound(float mn, float mx, int bits) {
  const GroupParams p = make_params(mn, mx, bits);
  const uint32_t qmax = (1u << bits) - 1u;
  const double s = p.scale, z = p.zero;
  const double top = dequantize_one(qmax, p);  // largest decodable value (== z when s == 0)
  const double rounding = s * (0.5 + 4.0 * (qmax + 1) * kU);
  const double clamp_low = z - static_cast<double>(mn);   // values in [min, z) decode to z
  const double clamp_high = static_cast<double>(mx) - top;  // values in (top, max] decode to top
  return std::max({rounding, clamp_low, clamp_high}) + 2.0 * kU * std::max(std::fabs(z), std::fabs(top));
}

std::vector<double> exact_sum(const std::vector<std::vector<uint16_t>>& inputs, Dtype dtype) {
  if (inputs.empty()) return {};
  std::vector<double> r(inputs[0].size(), 0.0);
  for (const auto& in : inputs) {
    if (in.size() != r.size()) throw std::invalid_argument("braid::quant::exact_sum: ranks of different lengths");
    for (size_t i = 0; i < r.size(); ++i) r[i] += to_float(in[i], dtype);
  }
  return r;
}

std::vector<double> exact_sum(const std::vector<std::vector<float>>& inputs) {
  if (inputs.empty()) return {};
  std::vector<double> r(inputs[0].size(), 0.0);
  for (const auto& in : inputs) {
    if (in.size() != r.size()) throw std::invalid_argument("braid::quant::exact_sum: ranks of different lengths");
    for (size_t i = 0; i < r.size(); ++i) r[i] += in[i];
  }
  return r;
}

namespace {
// deq = what the owners decode of one rank's values xr: each owner's chunk quantized with `bits` in
// groups from the chunk's start (step 1 of both algorithms).
void decode_contribution(const std::vector<float>& xr, uint64_t n, int world, int group, int bits,
                         std::vector<float>& deq) {
  std::vector<uint8_t> payload;
  std::vector<uint16_t> meta;
  for (int o = 0; o < world; ++o) {
    const ChunkRange c = chunk_range(n, world, group, o);
    if (c.size() == 0) continue;
    payload.assign(payload_bytes(c.size(), bits), 0);
    meta.assign(2 * num_groups(c.size(), group), 0);
    quantize_groups(xr.data() + c.begin, c.size(), bits, group, payload.data(), meta.data());
    dequantize_groups(payload.data(), meta.data(), c.size(), bits, group, deq.data() + c.begin);
  }
}
uint64_t checked_length(const std::vector<std::vector<uint16_t>>& inputs) {
  if (inputs.empty()) throw std::invalid_argument("braid::quant::reference_allreduce: empty world");
  const uint64_t n = inputs[0].size();
  for (const auto& in : inputs)
    if (in.size() != n) throw std::invalid_argument("braid::quant::reference_allreduce: ranks of different lengths");
  return n;
}
}  // namespace

std::vector<uint16_t> reference_allreduce_onestep(int bits, int group, Dtype dtype,
                                                  const std::vector<std::vector<uint16_t>>& inputs) {
  check_bits_group(bits, group);
  const uint64_t n = checked_length(inputs);
  const int world = static_cast<int>(inputs.size());
  std::vector<float> sum(n, 0.0f), xr(n), deq(n);
  for (int r = 0; r < world; ++r) {  // rank order, fp32, from +0
    for (uint64_t i = 0; i < n; ++i) xr[i] = to_float(inputs[r][i], dtype);
    decode_contribution(xr, n, world, group, bits, deq);
    for (uint64_t i = 0; i < n; ++i) sum[i] = sum[i] + deq[i];
  }
  std::vector<uint16_t> out(n);
  for (uint64_t i = 0; i < n; ++i) out[i] = from_float(sum[i], dtype);
  return out;
}

AllReduceTrace reference_allreduce_traced(Mode mode, int group, Dtype dtype,
                                          const std::vector<std::vector<uint16_t>>& inputs) {
  const ModeBits mb = mode_bits(mode);
  check_bits_group(mb.step1, group);
  const uint64_t n = checked_length(inputs);
  const int world = static_cast<int>(inputs.size());

  const uint64_t ng = num_groups(n, group);
  AllReduceTrace t;
  t.sum.assign(n, 0.0f);
  t.y.assign(n, 0.0f);
  t.out.assign(n, 0);
  std::vector<double> var_q(ng, 0.0), bound_q(ng, 0.0), round_sum(n, 0.0);

  std::vector<float> xr(n), deq(n);
  std::vector<uint8_t> payload;
  std::vector<uint16_t> meta;
  for (int r = 0; r < world; ++r) {  // rank order: sum = sum + x_r, r = 0..W-1
    for (uint64_t i = 0; i < n; ++i) xr[i] = to_float(inputs[r][i], dtype);
    decode_contribution(xr, n, world, group, mb.step1, deq);  // rank r's contribution to every owner's chunk
    for (uint64_t i = 0; i < n; ++i) {
      t.sum[i] = t.sum[i] + deq[i];
      if (r > 0) round_sum[i] += kU * std::fabs(static_cast<double>(t.sum[i]));
    }
    for (uint64_t k = 0; k < ng; ++k) {
      const uint64_t b = k * group, len = std::min<uint64_t>(group, n - b);
      const float* g = xr.data() + b;
      float mn = g[0], mx = g[0];
      for (uint64_t i = 1; i < len; ++i) {
        if (less_total(g[i], mn)) mn = g[i];
        if (less_total(mx, g[i])) mx = g[i];
      }
      const GroupParams p = make_params(mn, mx, mb.step1);
      var_q[k] += static_cast<double>(p.scale) * p.scale / 12.0;
      bound_q[k] += quant_error_bound(mn, mx, mb.step1);
    }
  }

  // Step 2: each owner quantizes its chunk of sums; every rank decodes the same bytes.
  for (int o = 0; o < world; ++o) {
    const ChunkRange c = chunk_range(n, world, group, o);
    if (c.size() == 0) continue;
    payload.assign(payload_bytes(c.size(), mb.step2), 0);
    meta.assign(2 * num_groups(c.size(), group), 0);
    quantize_groups(t.sum.data() + c.begin, c.size(), mb.step2, group, payload.data(), meta.data());
    dequantize_groups(payload.data(), meta.data(), c.size(), mb.step2, group, t.y.data() + c.begin);
  }
  for (uint64_t i = 0; i < n; ++i) t.out[i] = from_float(t.y[i], dtype);

  // Error model.
  const std::vector<double> ref = exact_sum(inputs, dtype);
  double ref_sq = 0, var_total_q = 0, var_total = 0;
  t.model.bound.assign(n, 0.0);
  for (uint64_t k = 0; k < ng; ++k) {
    const uint64_t b = k * group, len = std::min<uint64_t>(group, n - b);
    const float* g = t.sum.data() + b;
    float mn = g[0], mx = g[0];
    for (uint64_t i = 1; i < len; ++i) {
      if (less_total(g[i], mn)) mn = g[i];
      if (less_total(mx, g[i])) mx = g[i];
    }
    const GroupParams p2 = make_params(mn, mx, mb.step2);
    const double var2 = static_cast<double>(p2.scale) * p2.scale / 12.0;
    const double e2 = quant_error_bound(mn, mx, mb.step2);
    for (uint64_t i = b; i < b + len; ++i) {
      const double ulp = out_ulp(t.y[i], dtype);
      const double conv = ulp / 2 + (dtype == Dtype::bf16 ? 0x1p-134 : 0x1p-25);
      var_total_q += var_q[k] + var2;
      var_total += var_q[k] + var2 + ulp * ulp / 12.0;
      t.model.bound[i] = bound_q[k] + round_sum[i] + e2 + conv;
      t.model.max_bound = std::max(t.model.max_bound, t.model.bound[i]);
      ref_sq += ref[i] * ref[i];
    }
  }
  const double ref_norm = std::sqrt(ref_sq);
  t.model.predicted_nrms_quant = ref_norm > 0 ? std::sqrt(var_total_q) / ref_norm : 0.0;
  t.model.predicted_nrms = ref_norm > 0 ? std::sqrt(var_total) / ref_norm : 0.0;
  return t;
}

std::vector<uint16_t> reference_allreduce(Mode mode, int group, Dtype dtype,
                                          const std::vector<std::vector<uint16_t>>& inputs) {
  return reference_allreduce_traced(mode, group, dtype, inputs).out;
}

ErrorMetrics measure_error(std::span<const double> ref, std::span<const float> out) {
  if (ref.size() != out.size()) throw std::invalid_argument("braid::quant::measure_error: sizes differ");
  ErrorMetrics m;
  double err_sq = 0, ref_sq = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = std::fabs(static_cast<double>(out[i]) - ref[i]);
    err_sq += d * d;
    ref_sq += ref[i] * ref[i];
    if (d > m.max_abs) {
      m.max_abs = d;
      m.argmax = i;
    }
    m.ref_max_abs = std::max(m.ref_max_abs, std::fabs(ref[i]));
  }
  m.ref_norm = std::sqrt(ref_sq);
  m.nrms = m.ref_norm > 0 ? std::sqrt(err_sq) / m.ref_norm : (err_sq > 0 ? INFINITY : 0.0);
  m.max_rel = m.ref_max_abs > 0 ? m.max_abs / m.ref_max_abs : (m.max_abs > 0 ? INFINITY : 0.0);
  return m;
}

ErrorMetrics measure_error(std::span<const double> ref, std::span<const uint16_t> out, Dtype dtype) {
  const std::vector<float> f = to_floats(out, dtype);
  return measure_error(ref, std::span<const float>(f));
}

}  // namespace braid::quant
