// Benchmark harness: sizes, statistics, event timing, random data and verification kernels, JSON.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iostream>
#include <sstream>

#include <unistd.h>  // environ

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "braid/bench.hpp"
#include "braid/hash.hpp"
#include "braid/errors.hpp"
#include "braid/runtime.hpp"

namespace braid::bench {

CollectiveCounts collective_counts(const std::string& op, size_t bytes, size_t esize, int world) {
  size_t n = bytes / esize;
  n -= n % size_t(world);  // divisible by world for the sharded ops
  if (op == "allreduce") return {n, n};
  if (op == "reducescatter") return {n, n / world};
  if (op == "allgather") return {n / world, n};
  if (op == "alltoall") return {n, n};
  throw UsageError("unknown collective '" + op + "'", __FILE__, __LINE__);
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

size_t parse_size(const std::string& s) {
  if (s.empty()) throw UsageError("empty size", __FILE__, __LINE__);
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(s, &pos);
  } catch (...) {
    throw UsageError("bad size '" + s + "'", __FILE__, __LINE__);
  }
  std::string suf = s.substr(pos);
  double mult = 1;
  if (suf == "" || suf == "B") mult = 1;
  else if (suf == "K" || suf == "k" || suf == "KiB" || suf == "KB") mult = 1024.0;
  else if (suf == "M" || suf == "m" || suf == "MiB" || suf == "MB") mult = 1024.0 * 1024;
  else if (suf == "G" || suf == "g" || suf == "GiB" || suf == "GB") mult = 1024.0 * 1024 * 1024;
  else throw UsageError("bad size suffix in '" + s + "'", __FILE__, __LINE__);
  if (v < 0) throw UsageError("negative size '" + s + "'", __FILE__, __LINE__);
  return static_cast<size_t>(std::llround(v * mult));
}

std::string format_size(size_t b) {
  const char* units[] = {"", "K", "M", "G", "T"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  if (v == std::floor(v)) std::snprintf(buf, sizeof buf, "%.0f%s", v, units[u]);
  else std::snprintf(buf, sizeof buf, "%.3g%s", v, units[u]);
  return buf;
}

size_t dtype_size(DType t) { return t == DType::kFP32 ? 4 : 2; }
const char* dtype_name(DType t) {
  switch (t) {
    case DType::kBF16: return "bf16";
    case DType::kFP16: return "fp16";
    case DType::kFP32: return "fp32";
  }
  return "?";
}
DType parse_dtype(const std::string& s) {
  if (s == "bf16" || s == "bfloat16") return DType::kBF16;
  if (s == "fp16" || s == "half" || s == "float16") return DType::kFP16;
  if (s == "fp32" || s == "float" || s == "float32") return DType::kFP32;
  throw UsageError("unsupported dtype '" + s + "' (bf16, fp16, fp32)", __FILE__, __LINE__);
}
ncclDataType_t nccl_dtype(DType t) {
  switch (t) {
    case DType::kBF16: return ncclBfloat16;
    case DType::kFP16: return ncclFloat16;
    case DType::kFP32: return ncclFloat32;
  }
  return ncclFloat32;
}

Stats summarize(std::vector<double> v) {
  Stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  const auto at = [&](double q) {
    const size_t idx = static_cast<size_t>(std::ceil(q * v.size())) - (q > 0 ? 1 : 0);
    return v[std::min(idx, v.size() - 1)];
  };
  s.iters = static_cast<int>(v.size());
  s.median_us = v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  s.p10_us = at(0.10);
  s.p90_us = at(0.90);
  s.min_us = v.front();
  double sum = 0;
  for (double x : v) sum += x;
  s.mean_us = sum / v.size();
  return s;
}

double busbw_factor(const std::string& op, int n) {
  if (n <= 1) return op == "allreduce" ? 0.0 : 0.0;
  if (op == "allreduce") return 2.0 * (n - 1) / n;
  if (op == "reducescatter" || op == "allgather" || op == "alltoall") return static_cast<double>(n - 1) / n;
  return 1.0;
}

double median_us(Team& team, const TimingOptions& opt, const std::function<void(int)>& fn) {
  return summarize(time_iterations(&team, team.stream(), opt, fn)).median_us;
}

double device_used_bytes() {
  size_t free_b = 0, total = 0;
  BRAID_CUDA_CHECK(cudaMemGetInfo(&free_b, &total));
  return double(total - free_b);
}

namespace {

// acc += Σ_i splitmix64(splitmix64(tag ^ i) ^ word_i) over the buffer's 32-bit words (the last one zero-padded):
// each block sums its threads' terms (mod 2^64, exact in any order) and adds one atomic.
constexpr int kHashThreads = 256;
__global__ void __launch_bounds__(kHashThreads) hash_words_kernel(const uint8_t* p, size_t bytes, uint64_t tag,
                                                                  unsigned long long* acc) {
  const size_t words = (bytes + 3) / 4, full = bytes / 4;
  uint64_t sum = 0;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < words; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t w = 0;
    if (i < full && reinterpret_cast<uintptr_t>(p) % 4 == 0) {
      w = reinterpret_cast<const uint32_t*>(p)[i];
    } else {
      for (size_t b = 0; b < 4 && 4 * i + b < bytes; ++b) w |= uint32_t(p[4 * i + b]) << (8 * b);
    }
    sum += splitmix64(splitmix64(tag ^ uint64_t(i)) ^ w);
  }
  for (int o = 16; o > 0; o /= 2) sum += __shfl_down_sync(0xffffffffu, sum, o);
  __shared__ uint64_t part[kHashThreads / 32];
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    uint64_t t = 0;
    for (int k = 0; k < kHashThreads / 32; ++k) t += part[k];
    atomicAdd(acc, static_cast<unsigned long long>(t));
  }
}
}  // namespace

double device_hash52(const std::vector<std::pair<const void*, size_t>>& buffers, cudaStream_t stream) {
  DeviceBuffer acc(sizeof(unsigned long long));
  auto* a = static_cast<unsigned long long*>(acc.p);
  BRAID_CUDA_CHECK(cudaMemsetAsync(a, 0, sizeof(*a), stream));
  int dev = 0, sms = 0;
  BRAID_CUDA_CHECK(cudaGetDevice(&dev));
  BRAID_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  for (size_t k = 0; k < buffers.size(); ++k) {
    const size_t bytes = buffers[k].second;
    if (bytes == 0) continue;
    const size_t words = (bytes + 3) / 4;
    const int blocks = int(std::min<size_t>((words + kHashThreads - 1) / kHashThreads, size_t(sms) * 8));
    hash_words_kernel<<<blocks, kHashThreads, 0, stream>>>(static_cast<const uint8_t*>(buffers[k].first), bytes,
                                                          splitmix64(0x6272616964ull + k) ^ (uint64_t(bytes) << 20), a);
    BRAID_CHECK_LAUNCH();
  }
  unsigned long long h = 0;
  BRAID_CUDA_CHECK(cudaMemcpyAsync(&h, a, sizeof(h), cudaMemcpyDeviceToHost, stream));
  BRAID_CUDA_CHECK(cudaStreamSynchronize(stream));
  h &= (1ull << 52) - 1;
  return double(h == 0 ? 1 : h);
}

DeviceBuffer::DeviceBuffer(size_t bytes) { BRAID_CUDA_CHECK(cudaMalloc(&p, bytes < 16 ? 16 : bytes)); }
DeviceBuffer::~DeviceBuffer() { cudaFree(p); }

namespace {
// One thread spins until `ns` have passed on the GPU's global timer: bounded by construction.
__global__ void idle_for_ns(uint64_t ns) {
  uint64_t t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
}
}  // namespace

void gpu_idle(cudaStream_t stream, int us) {
  idle_for_ns<<<1, 1, 0, stream>>>(uint64_t(us) * 1000);
  BRAID_CHECK_LAUNCH();
}

std::vector<double> time_iterations(Team* team, cudaStream_t stream, const TimingOptions& opt,
                                    const std::function<void(int)>& fn) {
  for (int i = 0; i < opt.warmup; ++i) fn(i);
  std::vector<cudaEvent_t> ev(2 * opt.iters);
  for (auto& e : ev) BRAID_CUDA_CHECK(cudaEventCreate(&e));
  if (team) {
    if (team) team->synchronize(stream, "benchmark warm-up");
    team->barrier();  // ranks start the timed loop together
  }
  if (opt.lead_us > 0) gpu_idle(stream, opt.lead_us);
  const int batch = std::max(opt.batch, 1);
  for (int i = 0; i < opt.iters; ++i) {
    BRAID_CUDA_CHECK(cudaEventRecord(ev[2 * i], stream));
    for (int j = 0; j < batch; ++j) fn(opt.warmup + i * batch + j);
    BRAID_CUDA_CHECK(cudaEventRecord(ev[2 * i + 1], stream));
  }
  if (team) team->synchronize(stream, "benchmark timed loop");
  else BRAID_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> us(opt.iters);
  for (int i = 0; i < opt.iters; ++i) {
    float ms = 0;
    BRAID_CUDA_CHECK(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]));
    us[i] = ms * 1000.0 / batch;
  }
  for (auto& e : ev) cudaEventDestroy(e);
  if (team) us = team->allreduce_max(us);
  return us;
}

std::function<void(int)> HostClock::wrap(std::function<void(int)> fn) {
  return [this, fn = std::move(fn)](int i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn(i);
    total_us += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    ++calls;
  };
}

std::vector<size_t> interleave_order(size_t n, int r) {
  std::vector<size_t> order(n);
  for (size_t j = 0; j < n; ++j)  // even passes ascend from r mod n, odd ones descend from it
    order[j] = r % 2 == 0 ? (j + size_t(r)) % n : (size_t(r) % n + n - j % n) % n;
  return order;
}

std::vector<double> round_medians(const std::vector<double>& us, int rounds) {
  BRAID_REQUIRE(rounds >= 1 && !us.empty() && us.size() % size_t(rounds) == 0,
                "round_medians: the sample must split into `rounds` equal passes");
  const size_t per = us.size() / size_t(rounds);
  std::vector<double> med;
  for (int r = 0; r < rounds; ++r)
    med.push_back(summarize(std::vector<double>(us.begin() + long(r * per), us.begin() + long((r + 1) * per))).median_us);
  return med;
}

std::vector<double> hidden_by_round(const std::vector<double>& v, const std::vector<double>& ref,
                                    const std::vector<double>& base) {
  BRAID_REQUIRE(v.size() == ref.size() && v.size() == base.size(), "hidden_by_round: one value per pass in each");
  std::vector<double> h;
  for (size_t r = 0; r < v.size(); ++r) {
    const double exposed_ref = ref[r] - base[r];
    h.push_back(exposed_ref > 0 ? 1.0 - std::max(0.0, v[r] - base[r]) / exposed_ref : std::nan(""));
  }
  return h;
}

std::vector<std::vector<double>> time_interleaved(Team* team, cudaStream_t stream, const TimingOptions& opt,
                                                  int rounds, const std::vector<std::function<void(int)>>& fns) {
  BRAID_REQUIRE(rounds >= 1, "time_interleaved: rounds >= 1");
  std::vector<std::vector<double>> us(fns.size());
  const int per = std::max(1, (opt.iters + rounds - 1) / rounds);
  // Round r's order (interleave_order): no function always runs first (right after the host-side
  // barrier, when clocks and caches differ from the middle of a round) or always after the same one.
  for (int r = 0; r < rounds; ++r)
    for (const size_t f : interleave_order(fns.size(), r)) {
      TimingOptions o = opt;
      o.warmup = r == 0 ? opt.warmup : std::min(opt.warmup, 2);
      o.iters = per;
      const auto t = time_iterations(team, stream, o, fns[f]);
      us[f].insert(us[f].end(), t.begin(), t.end());
    }
  return us;
}

std::vector<double> tune_medians(Team& team, cudaStream_t stream, int reps, int batch,
                                 const std::vector<std::function<void()>>& cands,
                                 const std::function<void(size_t)>& check, int lead_us) {
  BRAID_REQUIRE(reps >= 1 && batch >= 1 && lead_us >= 0, "tune_medians: reps >= 1, batch >= 1, lead_us >= 0");
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  BRAID_CUDA_CHECK(cudaEventCreate(&e0));
  BRAID_CUDA_CHECK(cudaEventCreate(&e1));
  std::vector<double> med(cands.size());
  try {
    for (size_t i = 0; i < cands.size(); ++i) {  // warm-up (and first-use costs)
      cands[i]();
      team.synchronize(stream, "tune warm-up");
      if (check) check(i);
    }
    std::vector<std::vector<double>> t(cands.size());  // [candidate][round]: µs per call
    for (int r = 0; r < reps; ++r)
      for (size_t j = 0; j < cands.size(); ++j) {
        const size_t i = (j + size_t(r)) % cands.size();  // rotated, as time_interleaved
        // The ranks start together and the batch is queued behind an idle kernel before the GPU reaches it: the
        // interval is the GPU's, not the host's launch rate or the ranks' skew after the last synchronize (without
        // both, 4 ranks timed a 59-us cuBLAS + NCCL reduce-scatter at 137 us and a 92-us owner-ordered op at 123, and
        // picked the slower one: twenty-eighth session, docs/flashoverlap.md).
        team.barrier();
        if (lead_us > 0) gpu_idle(stream, lead_us);
        BRAID_CUDA_CHECK(cudaEventRecord(e0, stream));
        for (int c = 0; c < batch; ++c) cands[i]();
        BRAID_CUDA_CHECK(cudaEventRecord(e1, stream));
        team.synchronize(stream, "tune");
        if (check) check(i);
        float ms = 0;
        BRAID_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
        t[i].push_back(1e3 * ms / batch);
      }
    for (size_t i = 0; i < cands.size(); ++i) {
      std::nth_element(t[i].begin(), t[i].begin() + t[i].size() / 2, t[i].end());
      med[i] = team.allreduce_max(t[i][t[i].size() / 2]);
    }
  } catch (...) {
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    throw;
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return med;
}

std::vector<double> time_graph_iterations(Team* team, cudaStream_t stream, const TimingOptions& opt, int calls,
                                          const std::function<void(int)>& enqueue) {
  cudaGraph_t g;
  cudaGraphExec_t ge;
  BRAID_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int k = 0; k < calls; ++k) enqueue(k);
  BRAID_CUDA_CHECK(cudaStreamEndCapture(stream, &g));
  BRAID_CUDA_CHECK(cudaGraphInstantiate(&ge, g, 0));
  auto us = time_iterations(team, stream, opt, [&](int) { BRAID_CUDA_CHECK(cudaGraphLaunch(ge, stream)); });
  for (auto& x : us) x /= calls;
  BRAID_CUDA_CHECK(cudaGraphExecDestroy(ge));
  BRAID_CUDA_CHECK(cudaGraphDestroy(g));
  return us;
}

GemmShape parse_gemm_shape(const std::string& s) {
  std::vector<int64_t> v;
  std::stringstream ss(s);
  for (std::string tok; std::getline(ss, tok, ',');) {
    if (tok.empty()) continue;
    size_t pos = 0;
    try {
      v.push_back(std::stoll(tok, &pos));
    } catch (...) {
      pos = 0;
    }
    if (pos != tok.size()) throw UsageError("bad number '" + tok + "' in shape '" + s + "'", __FILE__, __LINE__);
  }
  if (v.size() != 3) throw UsageError("a shape is M,N,K, got '" + s + "'", __FILE__, __LINE__);
  return {v[0], v[1], v[2]};
}

bool parse_shape_option(const std::string& key, const std::function<std::string()>& value,
                        std::vector<GemmShape>& shapes) {
  if (key == "--shape") {
    shapes.push_back(parse_gemm_shape(value()));
    return true;
  }
  if (key != "--shapes") return false;
  const auto more = read_gemm_shapes(value());
  shapes.insert(shapes.end(), more.begin(), more.end());
  return true;
}

void for_each_option(int argc, char** argv, const std::function<void(const std::string&, const OptionValue&)>& on) {
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    const OptionValue value = [&]() -> std::string {
      if (i + 1 >= argc) throw UsageError(k + " needs a value", __FILE__, __LINE__);
      return argv[++i];
    };
    on(k, value);
  }
}

bool parse_gemm_bench_option(const std::string& key, const std::function<std::string()>& value,
                             std::vector<GemmShape>& shapes, std::string& json, TimingOptions& timing) {
  if (parse_shape_option(key, value, shapes)) return true;
  if (key == "--json") json = value();
  else if (key == "--iters") timing.iters = std::stoi(value());
  else if (key == "--warmup") timing.warmup = std::stoi(value());
  else return false;
  return true;
}

std::vector<GemmShape> read_gemm_shapes(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw UsageError("cannot read " + path, __FILE__, __LINE__);
  std::vector<GemmShape> shapes;
  for (std::string line; std::getline(f, line);) {
    if (const auto hash = line.find('#'); hash != std::string::npos) line.erase(hash);  // comments
    line.erase(std::remove_if(line.begin(), line.end(), [](char c) { return c == ' ' || c == '\t' || c == '\r'; }),
               line.end());
    if (!line.empty()) shapes.push_back(parse_gemm_shape(line));
  }
  return shapes;
}

InputSets::InputSets(void* a, size_t a_bytes, void* b, size_t b_bytes, cudaStream_t s) {
  const int n = rotation_sets(a_bytes + b_bytes, size_t(16) << 30);
  a_.push_back(a), b_.push_back(b);
  for (int i = 1; i < n; ++i) {
    own_.push_back(std::make_unique<DeviceBuffer>(a_bytes));
    a_.push_back(own_.back()->p);
    own_.push_back(std::make_unique<DeviceBuffer>(b_bytes));
    b_.push_back(own_.back()->p);
    BRAID_CUDA_CHECK(cudaMemcpyAsync(a_.back(), a, a_bytes, cudaMemcpyDeviceToDevice, s));
    BRAID_CUDA_CHECK(cudaMemcpyAsync(b_.back(), b, b_bytes, cudaMemcpyDeviceToDevice, s));
  }
}

int rotation_sets(size_t bytes_per_set, size_t max_total_bytes) {
  int dev = 0;
  int l2 = 50 << 20;
  if (cudaGetDevice(&dev) == cudaSuccess) cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev);
  cudaGetLastError();
  if (bytes_per_set == 0) return 1;
  size_t sets = (2 * static_cast<size_t>(l2) + bytes_per_set - 1) / bytes_per_set;
  sets = std::max<size_t>(1, std::min<size_t>(sets, 256));
  while (sets > 1 && sets * bytes_per_set > max_total_bytes) --sets;
  return static_cast<int>(sets);
}

// ---------------------------------------------------------------------------------------------------
// Random data and verification

namespace {

__host__ __device__ __forceinline__ uint64_t mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}
// Half-integer in [-15.5, 15.5]: never zero.
__host__ __device__ __forceinline__ float pattern_value(uint64_t i, int rank, uint64_t seed) {
  const uint64_t h = mix64(i * 0x9E3779B97F4A7C15ULL ^ mix64(seed + 0x1234567ULL * (rank + 1)));
  return static_cast<float>(static_cast<int>(h % 32) - 16) + 0.5f;
}

template <class T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <class T>
__device__ __forceinline__ float to_float(T v) { return static_cast<float>(v); }
template <>
__device__ __forceinline__ float to_float<__half>(__half v) { return __half2float(v); }
template <>
__device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

template <class T>
__global__ void fill_kernel(T* dst, size_t n, uint64_t seed, int rank, size_t offset) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    dst[i] = from_float<T>(pattern_value(offset + i, rank, seed));
}

enum class VerifyOp { kAllReduce, kReduceScatter, kAllGather, kAllToAll };

template <class T>
__global__ void verify_kernel(const T* out, size_t n, VerifyOp op, uint64_t seed, int rank, int world,
                              unsigned long long* wrong) {
  unsigned long long local = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    float expect = 0;
    switch (op) {
      case VerifyOp::kAllReduce:
        for (int r = 0; r < world; ++r) expect += pattern_value(i, r, seed);
        break;
      case VerifyOp::kReduceScatter:  // my output chunk is rank's slice of everyone's input
        for (int r = 0; r < world; ++r) expect += pattern_value(rank * n + i, r, seed);
        break;
      case VerifyOp::kAllGather: {  // out[r*chunk + j] = input j of rank r
        const size_t chunk = n / world;
        expect = pattern_value(i % chunk, static_cast<int>(i / chunk), seed);
        break;
      }
      case VerifyOp::kAllToAll: {  // out[r*chunk + j] = rank r's input at [rank*chunk + j]
        const size_t chunk = n / world;
        expect = pattern_value(rank * chunk + i % chunk, static_cast<int>(i / chunk), seed);
        break;
      }
    }
    const float got = to_float(out[i]);
    if (!(got == to_float(from_float<T>(expect)))) ++local;
  }
  if (local) atomicAdd(wrong, local);
}

int grid_for(size_t n) { return static_cast<int>(std::min<size_t>((n + 255) / 256, 1024)); }

}  // namespace

void fill_pattern(void* dst, DType t, size_t count, uint64_t seed, int rank, size_t offset, cudaStream_t s) {
  if (count == 0) return;
  switch (t) {
    case DType::kBF16:
      fill_kernel<<<grid_for(count), 256, 0, s>>>(static_cast<__nv_bfloat16*>(dst), count, seed, rank, offset);
      break;
    case DType::kFP16:
      fill_kernel<<<grid_for(count), 256, 0, s>>>(static_cast<__half*>(dst), count, seed, rank, offset);
      break;
    case DType::kFP32:
      fill_kernel<<<grid_for(count), 256, 0, s>>>(static_cast<float*>(dst), count, seed, rank, offset);
      break;
  }
  BRAID_CHECK_LAUNCH();
}

size_t count_wrong(const std::string& op, const void* out, DType t, size_t n, uint64_t seed, int rank, int world,
                   cudaStream_t s) {
  VerifyOp v;
  if (op == "allreduce") v = VerifyOp::kAllReduce;
  else if (op == "reducescatter") v = VerifyOp::kReduceScatter;
  else if (op == "allgather") v = VerifyOp::kAllGather;
  else if (op == "alltoall") v = VerifyOp::kAllToAll;
  else throw UsageError("count_wrong: unknown op " + op, __FILE__, __LINE__);
  unsigned long long* d = nullptr;
  BRAID_CUDA_CHECK(cudaMallocAsync(&d, sizeof(*d), s));
  BRAID_CUDA_CHECK(cudaMemsetAsync(d, 0, sizeof(*d), s));
  if (n) {
    switch (t) {
      case DType::kBF16:
        verify_kernel<<<grid_for(n), 256, 0, s>>>(static_cast<const __nv_bfloat16*>(out), n, v, seed, rank, world, d);
        break;
      case DType::kFP16:
        verify_kernel<<<grid_for(n), 256, 0, s>>>(static_cast<const __half*>(out), n, v, seed, rank, world, d);
        break;
      case DType::kFP32:
        verify_kernel<<<grid_for(n), 256, 0, s>>>(static_cast<const float*>(out), n, v, seed, rank, world, d);
        break;
    }
    BRAID_CHECK_LAUNCH();
  }
  unsigned long long h = 0;
  BRAID_CUDA_CHECK(cudaMemcpyAsync(&h, d, sizeof(h), cudaMemcpyDeviceToHost, s));
  BRAID_CUDA_CHECK(cudaFreeAsync(d, s));
  BRAID_CUDA_CHECK(cudaStreamSynchronize(s));
  return static_cast<size_t>(h);
}

// ---------------------------------------------------------------------------------------------------
// Context and JSON

Context make_context(int argc, char** argv, int world) {
  Context c;
  int dev = 0;
  cudaDeviceProp p{};
  if (cudaGetDevice(&dev) == cudaSuccess && cudaGetDeviceProperties(&p, dev) == cudaSuccess) c.card = p.name;
  else c.card = "no-gpu";
  cudaGetLastError();
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  c.date = buf;
  // BRAID_COMMIT in the environment at run time wins over the one compiled in at configure time: a warm build
  // folder is not reconfigured when the tree changes, and rows named the configure's commit (twenty-ninth session).
  const char* env_commit = std::getenv("BRAID_COMMIT");
  c.commit = env_commit != nullptr && *env_commit != '\0' ? env_commit : BRAID_COMMIT;
  std::string cmd;
  for (int i = 0; i < argc; ++i) {
    if (i) cmd += ' ';
    std::string a = argv[i];
    if (i == 0) {
      const auto slash = a.rfind('/');
      if (slash != std::string::npos) a = a.substr(slash + 1);
    }
    cmd += a;
  }
  if (world > 1) cmd = "mpirun -np " + std::to_string(world) + " " + cmd;
  c.command = cmd;
  c.env = run_environment(environ);
  c.world = world;
  return c;
}

std::string run_environment(const char* const* envp) {
  static const char* const kSkip[] = {"BRAID_COMMIT", "BRAID_DEADLINE_S", "BRAID_TEST_DEADLINE_S", "BRAID_OFFLINE"};
  std::vector<std::string> kept;
  for (const char* const* e = envp; e != nullptr && *e != nullptr; ++e) {
    const std::string kv = *e;
    if (kv.rfind("BRAID_", 0) != 0 && kv.rfind("NCCL_", 0) != 0) continue;
    const std::string name = kv.substr(0, kv.find('='));
    bool skip = false;
    for (const char* k : kSkip) skip = skip || name == k;
    if (!skip) kept.push_back(kv);
  }
  std::sort(kept.begin(), kept.end());
  std::string o;
  for (const auto& kv : kept) o += (o.empty() ? "" : " ") + kv;
  return o;
}

std::string card_tag(const std::string& card, int world) {
  std::string tag;
  for (const char* k : {"H100", "H200", "B200", "A100", "L40"})
    if (card.find(k) != std::string::npos) tag = k;
  if (tag.empty()) tag = "gpu";
  for (auto& ch : tag) ch = static_cast<char>(std::tolower(ch));
  return tag + "x" + std::to_string(world);
}

std::string json_escape(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    switch (c) {
      case '"': o += "\\\""; break;
      case '\\': o += "\\\\"; break;
      case '\n': o += "\\n"; break;
      case '\t': o += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          o += b;
        } else {
          o += c;
        }
    }
  }
  return o + "\"";
}

Json& Json::add(const std::string& k, const std::string& v) {
  kv_.emplace_back(k, json_escape(v));
  return *this;
}
Json& Json::add(const std::string& k, double v) {
  if (!std::isfinite(v)) {
    kv_.emplace_back(k, "null");
  } else {
    char b[40];
    std::snprintf(b, sizeof b, "%.6g", v);
    kv_.emplace_back(k, b);
  }
  return *this;
}
Json& Json::add(const std::string& k, int64_t v) {
  kv_.emplace_back(k, std::to_string(v));
  return *this;
}
Json& Json::add(const std::string& k, bool v) {
  kv_.emplace_back(k, v ? "true" : "false");
  return *this;
}
Json& Json::add_raw(const std::string& k, const std::string& j) {
  kv_.emplace_back(k, j);
  return *this;
}
Json& Json::add_context(const Context& c) {
  return add("card", c.card).add("date", c.date).add("commit", c.commit).add("command", c.command).add("env", c.env);
}
std::string Json::str() const {
  std::string o = "{";
  for (size_t i = 0; i < kv_.size(); ++i) {
    if (i) o += ", ";
    o += json_escape(kv_[i].first) + ": " + kv_[i].second;
  }
  return o + "}";
}

void append_jsonl(const std::string& path, const std::string& line) {
  if (path.empty()) return;
  if (path == "-") {
    std::cout << line << "\n";
    return;
  }
  std::ofstream f(path, std::ios::app);
  if (!f) throw UsageError("cannot open " + path + " for writing", __FILE__, __LINE__);
  f << line << "\n";
}

}  // namespace braid::bench
