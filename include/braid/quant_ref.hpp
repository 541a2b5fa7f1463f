// braid/quant_ref.hpp — CPU reference of braid's quantized two-step all-reduce (Flash Communication).
//
// Everything here is host-only C++ (no CUDA headers) built on the scalar arithmetic of
// braid/quant.hpp, which is the single definition of the quantizer. The GPU kernels must produce
// bit-identical payloads, metadata and outputs for the same inputs; the tests of the kernels compare
// against reference_allreduce().
//
// Algorithm (world size W, n values per rank, group size g, mode = (bits1, bits2)):
//   chunk stride c = round_up(ceil(n / W), g); chunk r = [r*c, min(n, (r+1)*c)) (may be empty).
//   Groups are g consecutive values from the chunk start; because c is a multiple of g they are the
//   global groups [k*g, min(n, (k+1)*g)), so the arithmetic does not depend on W's chunking. The last
//   group may be partial: its min/max are over its valid values only.
//   Step 1 (reduce-scatter): every rank quantizes every chunk with bits1; the owner dequantizes all
//     W contributions (its own too) and sums them in fp32 in rank order: s = 0.0f; s = s + x_r.
//   Step 2 (all-gather): the owner quantizes the fp32 sums with bits2; every rank dequantizes these
//     bytes and converts to the output dtype with round-to-nearest-even.
// Min/max of a group use IEEE 754-2019 minimum/maximum semantics for signed zeros (-0 < +0). This
// only affects the stored zero's sign bit (fp16 0x8000 vs 0x0000), never a decoded value, because
// fma(q, s, -0) == fma(q, s, +0) for q >= 0, s >= 0 (both are +0 at q = 0).
// Domain: finite inputs with |x| <= 65504 (the zero point is an fp16); NaN/inf inputs are undefined.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "braid/quant.hpp"

namespace braid::quant {

// ---- modes and element types ----------------------------------------------------------------------
enum class Mode { int8, int6, int4 };  // (bits1, bits2) = (8,8), (4,8), (4,4)
struct ModeBits {
  int step1;  // reduce-scatter payload bits
  int step2;  // all-gather payload bits
};
constexpr ModeBits mode_bits(Mode m) {
  return m == Mode::int8 ? ModeBits{8, 8} : m == Mode::int6 ? ModeBits{4, 8} : ModeBits{4, 4};
}
const char* mode_name(Mode m);                          // "int8", "int6", "int4"
std::optional<Mode> parse_mode(std::string_view s);     // inverse of mode_name

enum class Dtype { bf16, fp16 };                        // 16-bit element type of inputs and outputs
const char* dtype_name(Dtype d);                        // "bf16", "fp16"
std::optional<Dtype> parse_dtype(std::string_view s);
float to_float(uint16_t bits, Dtype d);                 // exact
uint16_t from_float(float f, Dtype d);                  // round to nearest even

constexpr bool valid_bits(int bits) { return bits == 4 || bits == 8; }
constexpr bool valid_group(int g) { return g == 32 || g == 64 || g == 128 || g == 256; }

// ---- chunking ---------------------------------------------------------------------------------------
// Stride of the W chunks: ceil(n / W) rounded up to a multiple of g.
// chunk_stride(n, world, group) lives in quant.hpp (shared with the device code).
struct ChunkRange {
  uint64_t begin;
  uint64_t end;  // exclusive; begin == end for an empty chunk
  uint64_t size() const { return end - begin; }
};
constexpr ChunkRange chunk_range(uint64_t n, int world, int group, int r) {
  const uint64_t c = chunk_stride(n, world, group);
  const uint64_t b = c * static_cast<uint64_t>(r);
  const uint64_t e = c * static_cast<uint64_t>(r + 1);
  return ChunkRange{b < n ? b : n, e < n ? e : n};
}

// ---- group-wise quantization --------------------------------------------------------------------------
// Min and max of len >= 1 values (signed zeros ordered -0 < +0) -> make_params(min, max, bits).
GroupParams group_params(const float* x, uint64_t len, int bits);

// Quantizes n values in groups of `group` starting at x[0]. payload: payload_bytes(n, bits) bytes
// (INT4: element 2i in the low nibble of byte i, 2i+1 in the high nibble; an odd n leaves the last
// high nibble 0). meta: 2 * num_groups(n, group) uint16: meta[2k] = scale fp16 bits, meta[2k+1] =
// zero fp16 bits (4 bytes per group, little-endian: scale then zero).
void quantize_groups(const float* x, uint64_t n, int bits, int group, uint8_t* payload, uint16_t* meta);
// Inverse: out[i] = dequantize_one(code_i, load_params(meta of its group)).
void dequantize_groups(const uint8_t* payload, const uint16_t* meta, uint64_t n, int bits, int group,
                       float* out);

struct Quantized {
  int bits = 8;
  int group = 128;
  uint64_t n = 0;
  std::vector<uint8_t> payload;  // payload_bytes(n, bits)
  std::vector<uint16_t> meta;    // 2 * num_groups(n, group): scale, zero, scale, zero, ...
};
Quantized quantize(std::span<const float> x, int bits, int group);
std::vector<float> dequantize(const Quantized& q);
uint32_t code_at(const Quantized& q, uint64_t i);  // the code of element i

// ---- the reference all-reduce ------------------------------------------------------------------------
// inputs[r] holds rank r's n values as bits of `dtype`; all ranks have the same n; W = inputs.size()
// >= 1. Returns the output every rank ends with (bits of `dtype`). Throws std::invalid_argument on a
// bad group, an empty world or ranks of different lengths.
std::vector<uint16_t> reference_allreduce(Mode mode, int group, Dtype dtype,
                                          const std::vector<std::vector<uint16_t>>& inputs);

// The one-step variant (AllReducer's kQuantOneStep, W = 2's equal of the two-step in link bytes):
// every rank quantizes each chunk of its input with `bits` (4 or 8; the chunks and groups of the
// two-step's step 1), every rank decodes every rank's codes and sums them in fp32 in rank order, and the
// sum is rounded once to `dtype`: one quantization instead of two. Same argument checks.
std::vector<uint16_t> reference_allreduce_onestep(int bits, int group, Dtype dtype,
                                                  const std::vector<std::vector<uint16_t>>& inputs);

// Error model of one all-reduce, computed from the actual group parameters of both steps.
struct ErrorModel {
  // sqrt(sum_i [sum_r s1(r,i)^2/12 + s2(i)^2/12]) / ||ref||_2: uniform rounding noise of the two
  // quantization steps (the brief's model).
  double predicted_nrms_quant = 0;
  // The same plus the output rounding to dtype (ulp(y_i)^2/12 per element): what the tests compare.
  double predicted_nrms = 0;
  // Deterministic per-element bound on |out_i - ref_i| (ref = exact sum of the inputs), and its max.
  std::vector<double> bound;
  double max_bound = 0;
};
struct AllReduceTrace {
  std::vector<uint16_t> out;   // == reference_allreduce(...)
  std::vector<float> sum;      // fp32 step-1 sums (before step-2 quantization)
  std::vector<float> y;        // step-2 dequantized fp32 values (before conversion to dtype)
  ErrorModel model;
};
AllReduceTrace reference_allreduce_traced(Mode mode, int group, Dtype dtype,
                                          const std::vector<std::vector<uint16_t>>& inputs);

// Deterministic bound on |dequantize(quantize(x)) - x| for every x of a group with this min/max:
//   max(s*(1/2 + 4*(qmax+1)*2^-24), z - min, max - x'(qmax)) + 2^-23 * max(|z|, |x'(qmax)|)
// The 2nd and 3rd terms are clamping: z = fp16(min) may lie above min, and qmax*s may fall short of
// max - z (s and z are both rounded to fp16). Usually s/2 dominates; see docs/flash-communication.md.
double quant_error_bound(float mn, float mx, int bits);

// ---- error measurement ---------------------------------------------------------------------------------
// Float64 sum of the ranks' values in rank order (exact unless the inputs span > ~45 binary orders
// of magnitude, which bf16/fp16 activations in the fp16 range never do).
std::vector<double> exact_sum(const std::vector<std::vector<uint16_t>>& inputs, Dtype dtype);
std::vector<double> exact_sum(const std::vector<std::vector<float>>& inputs);

struct ErrorMetrics {
  double nrms = 0;         // ||out - ref||_2 / ||ref||_2 (0 when both are 0)
  double max_abs = 0;      // max_i |out_i - ref_i|
  double max_rel = 0;      // max_abs / max_i |ref_i|
  double ref_norm = 0;     // ||ref||_2
  double ref_max_abs = 0;  // max_i |ref_i|
  uint64_t argmax = 0;     // index of max_abs
};
ErrorMetrics measure_error(std::span<const double> ref, std::span<const float> out);
ErrorMetrics measure_error(std::span<const double> ref, std::span<const uint16_t> out, Dtype dtype);

// Converts floats to dtype bits (round to nearest even) / back.
std::vector<uint16_t> to_bits(std::span<const float> x, Dtype dtype);
std::vector<float> to_floats(std::span<const uint16_t> x, Dtype dtype);

}  // namespace braid::quant
