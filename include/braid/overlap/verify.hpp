// braid/overlap/verify.hpp — inputs and host-side checks for the overlap benchmark and tests.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace braid::overlap {

// Uniform bf16 values in [-scale, scale), deterministic in (seed, index).
void fill_uniform_bf16(void* p, size_t count, uint64_t seed, float scale, cudaStream_t s);
// Constant fill (gamma of the RMSNorm, ...).
void fill_const_bf16(void* p, size_t count, float value, cudaStream_t s);

float bf16_to_float(uint16_t v);
std::vector<uint16_t> download_bf16(const void* p, size_t count);  // synchronous

// Compares test[index(i)] with ref[i] for i in [0, count): |t - r| <= atol + rtol*|r|. Returns the number
// of mismatches; `first` (if given) receives the first mismatching i.
size_t count_mismatch(const std::vector<uint16_t>& ref, const std::vector<uint16_t>& test,
                      const std::function<int64_t(int64_t)>& index, double atol, double rtol,
                      int64_t* first = nullptr, double* max_err = nullptr);

// Tolerance for bf16 GEMM outputs with inputs uniform in [-1, 1), summed over `world` ranks: each rank's
// partial rounds to bf16 (relative 2^-9) in a different order than the reference.
inline double gemm_atol(int64_t k, int world) {
  return 4.0 * world * (0.58 * __builtin_sqrt(static_cast<double>(k)) / 3.0) / 256.0;
}
inline constexpr double kGemmRtol = 1.0 / 64;

}  // namespace braid::overlap
