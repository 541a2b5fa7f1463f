// braid/overlap/verify.hpp — inputs and host-side checks for the overlap benchmark and tests.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace braid {
class Team;
}

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

// Reference for a sum over the team of every rank's bf16 partial D (`count` elements, one layout on all
// ranks), for checks whose tolerance must follow the reduction, not the result: `sum` is the float32 sum
// of the partials (error <= 2^-24 * mag) and `mag` the sum of their magnitudes, which bounds every partial
// sum that any reduction order forms. A bf16 ring rounds W - 1 such partial sums; when the result cancels
// (large partials, small sum) a tolerance relative to the result is wrong by orders of magnitude.
struct SumRef {
  std::vector<float> sum, mag;  // [count]
};
// Collective over `team` (a float32 ncclAllReduce of a converted copy of d; without NCCL, MPI on the host);
// synchronous.
SumRef sum_reference(Team& team, const void* d, size_t count, cudaStream_t s);
// dst (world x count bf16, rank order) = every rank's src (count bf16): ncclAllGather, or (a team without NCCL,
// TeamOptions::shared_gpu) MPI on the host, synchronous. A test reference.
void allgather_bf16(Team& team, const void* src, void* dst, size_t count, cudaStream_t s);

// Bound on |got - sum| for a bf16 reduction over `world` ranks of partials that each differ from the
// reference partials by at most one bf16 ulp (another GEMM's accumulation order): one ulp (2^-7 relative)
// for the partial, a half ulp (2^-8) per rounded partial sum (<= world), each relative to <= mag.
inline double sum_tolerance(double mag, int world, double atol) { return atol + (world + 2) * mag / 256.0; }

// Compares test[test_index(i)] with ref at ref_index(i) for i in [0, count): |t - sum| <= sum_tolerance(mag).
// `detail` (if given) receives a line on the first mismatch: index, got, sum, mag.
size_t count_mismatch(const SumRef& ref, const std::function<int64_t(int64_t)>& ref_index, int64_t count,
                      const std::vector<uint16_t>& test, const std::function<int64_t(int64_t)>& test_index, int world,
                      double atol, int64_t* first = nullptr, double* max_err = nullptr, std::string* detail = nullptr);
// The small absolute floor of sum_tolerance (values near zero: fp32 accumulation of k products).
inline double sum_atol(int64_t k) { return 1e-5 * __builtin_sqrt(static_cast<double>(k)); }

}  // namespace braid::overlap
