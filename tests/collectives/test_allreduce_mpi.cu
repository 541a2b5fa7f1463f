// Multi-rank GPU tests of braid::AllReducer: quantized modes bit for bit against the CPU reference
// (fused peer kernel, classic and pipelined, and NCCL transport), exact one-shot/two-shot against the exact sum, in-place,
// chunked messages, CUDA-graph capture, and the argument errors. Under BRAID_SHARED_GPU=1 (test_allreduce_mpi_shared2:
// two ranks time-slicing one GPU) the NCCL transport is skipped.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <vector>

#include "braid/allreduce.hpp"
#include "braid/dist.hpp"
#include "braid/quant_ref.hpp"
#include "capture.hpp"

namespace {

using braid::ArAlgo;
using braid::DType;
using braid::Precision;
using braid::QuantImpl;
namespace q = braid::quant;

// One team and one reducer for the whole binary, torn down before MPI_Finalize.
class Env : public ::testing::Environment {
 public:
  void SetUp() override {
    // Signal slots are never returned: room for the several reducers the tests create (the one-step test
    // alone makes eleven; 16384 ran out with the last of them).
    braid::TeamOptions opt;
    opt.signal_slots = 32768;
    team_ = std::make_unique<braid::Team>(MPI_COMM_WORLD, opt);
    reducer_ = std::make_unique<braid::AllReducer>(*team_);
  }
  void TearDown() override {
    reducer_.reset();
    team_.reset();
  }
  static std::unique_ptr<braid::Team> team_;
  static std::unique_ptr<braid::AllReducer> reducer_;
};
std::unique_ptr<braid::Team> Env::team_;
std::unique_ptr<braid::AllReducer> Env::reducer_;
::testing::Environment* const kEnv = ::testing::AddGlobalTestEnvironment(new Env);

braid::Team& team() { return *Env::team_; }
braid::AllReducer& reducer() { return *Env::reducer_; }

q::Mode mode_of(Precision p) {
  return p == Precision::kInt8 ? q::Mode::int8 : p == Precision::kInt6 ? q::Mode::int6 : q::Mode::int4;
}

// All ranks' inputs (every rank generates all of them: the generator is deterministic).
std::vector<std::vector<uint16_t>> inputs(size_t n, q::Dtype dt, braid::dist::Distribution d, uint64_t seed) {
  std::vector<std::vector<uint16_t>> in(team().size());
  for (int r = 0; r < team().size(); ++r) in[r] = q::to_bits(braid::dist::generate(d, n, seed, r), dt);
  return in;
}

// Differences, treating +0 and -0 as equal.
size_t differences(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  size_t d = 0;
  for (size_t i = 0; i < a.size(); ++i) d += a[i] != b[i] && ((a[i] | b[i]) & 0x7fffu) != 0;
  return d;
}

// One exact all-reduce of n values of fill_pattern(seed) on every rank (in place or into a second buffer): the
// number of output values that differ from the exact sum.
size_t exact_wrong(braid::AllReducer& ar, ArAlgo algo, size_t n, DType dt, bool in_place, uint64_t seed) {
  auto& s = team();
  void *x = nullptr, *y = nullptr;
  EXPECT_EQ(cudaMalloc(&x, n * 2), cudaSuccess);
  EXPECT_EQ(cudaMalloc(&y, n * 2), cudaSuccess);
  braid::bench::fill_pattern(x, dt, n, seed, s.rank(), 0, s.stream());
  cudaMemsetAsync(y, 0xFF, n * 2, s.stream());
  braid::AllReduceOptions o;
  o.algo = algo;
  ar.run(x, in_place ? x : y, n, dt, s.stream(), o);
  s.synchronize("exact all-reduce");
  const size_t wrong =
      braid::bench::count_wrong("allreduce", in_place ? x : y, dt, n, seed, s.rank(), s.size(), s.stream());
  cudaFree(x);
  cudaFree(y);
  return wrong;
}

std::vector<uint16_t> run_ar(braid::AllReducer& ar, const std::vector<uint16_t>& in, DType dt, ArAlgo algo,
                             Precision p, int group, bool in_place, QuantImpl impl = QuantImpl::kClassic) {
  const size_t n = in.size();
  uint16_t *x = nullptr, *y = nullptr;
  EXPECT_EQ(cudaMalloc(&x, std::max<size_t>(n, 1) * 2), cudaSuccess);
  EXPECT_EQ(cudaMalloc(&y, std::max<size_t>(n, 1) * 2), cudaSuccess);
  cudaMemcpy(x, in.data(), n * 2, cudaMemcpyHostToDevice);
  cudaMemset(y, 0xFF, n * 2);
  // Legacy-stream setup (the pageable upload may return before its DMA lands; the memset is
  // asynchronous): finish it before the reducer's non-blocking stream reads x and writes y.
  cudaDeviceSynchronize();
  braid::AllReduceOptions o;
  o.algo = algo;
  o.precision = p;
  o.group = group;
  o.quant_impl = impl;
  ar.run(x, in_place ? x : y, n, dt, team().stream(), o);
  team().synchronize("all-reduce under test");
  std::vector<uint16_t> out(n);
  cudaMemcpy(out.data(), in_place ? x : y, n * 2, cudaMemcpyDeviceToHost);
  cudaFree(x);
  cudaFree(y);
  return out;
}

TEST(AllReduce, QuantizedEqualsCpuReferenceBitForBit) {
  ASSERT_TRUE(team().peer_ok()) << team().peer_status();
  const int W = team().size(), rank = team().rank();
  int cases = 0;
  for (Precision p : {Precision::kInt8, Precision::kInt6, Precision::kInt4})
    for (DType dt : {DType::kBF16, DType::kFP16})
      for (int g : {32, 128, 256})
        for (size_t n : {size_t(1), size_t(7), size_t(1000), size_t(123457), size_t(1) << 20}) {
          const q::Dtype qd = dt == DType::kBF16 ? q::Dtype::bf16 : q::Dtype::fp16;
          const auto d = (n % 2) ? braid::dist::Distribution::outlier : braid::dist::Distribution::normal;
          const auto in = inputs(n, qd, d, 1000 + n + g);
          const auto expect = q::reference_allreduce(mode_of(p), g, qd, in);
          for (ArAlgo algo : {ArAlgo::kQuantP2P, ArAlgo::kQuantNccl}) {
            if (algo == ArAlgo::kQuantNccl && team().shared_gpu()) continue;  // no NCCL on a shared GPU
            const bool in_place = (n + g) % 3 == 0;
            const auto got = run_ar(reducer(), in[rank], dt, algo, p, g, in_place);
            EXPECT_EQ(differences(got, expect), 0u)
                << braid::algo_name(algo) << " " << braid::precision_name(p) << " " << braid::bench::dtype_name(dt)
                << " g=" << g << " n=" << n << " W=" << W << (in_place ? " in-place" : "");
            ++cases;
          }
          // The pipelined fused kernel, in place and not (alternating with the classic one on the same
          // workspace and signal slots).
          for (bool in_place : {false, true}) {
            const auto got = run_ar(reducer(), in[rank], dt, ArAlgo::kQuantP2P, p, g, in_place, QuantImpl::kPipelined);
            EXPECT_EQ(differences(got, expect), 0u)
                << "pipelined " << braid::precision_name(p) << " " << braid::bench::dtype_name(dt) << " g=" << g
                << " n=" << n << " W=" << W << (in_place ? " in-place" : "");
            ++cases;
          }
        }
  EXPECT_EQ(cases, 3 * 2 * 3 * 5 * (team().shared_gpu() ? 3 : 4));
}

TEST(AllReduce, QuantizedStage2LoadOrderDoesNotChangeBits) {
  // AllReducerConfig::quant_pair_sources (the default, covered above) against one source at a time:
  // both equal the CPU reference, fused and over NCCL, with few and many blocks (uneven group ranges).
  ASSERT_TRUE(team().peer_ok());
  const int rank = team().rank();
  for (int blocks : {3, 528}) {
    braid::AllReducerConfig cfg;
    cfg.quant_pair_sources = false;
    cfg.quant_blocks = blocks;
    braid::AllReducer ar(team(), cfg);
    for (Precision p : {Precision::kInt8, Precision::kInt6, Precision::kInt4})
      for (size_t n : {size_t(7), size_t(65536 + 129), (size_t(1) << 20) + 5}) {
        const int g = n % 3 ? 128 : 32;
        const auto in = inputs(n, q::Dtype::bf16, braid::dist::Distribution::outlier, 77 + n + blocks);
        const auto expect = q::reference_allreduce(mode_of(p), g, q::Dtype::bf16, in);
        for (ArAlgo algo : {ArAlgo::kQuantP2P, ArAlgo::kQuantNccl}) {
          if (algo == ArAlgo::kQuantNccl && team().shared_gpu()) continue;  // no NCCL on a shared GPU
          const auto got = run_ar(ar, in[rank], DType::kBF16, algo, p, g, false);
          EXPECT_EQ(differences(got, expect), 0u) << "unpaired " << braid::algo_name(algo) << " blocks<=" << blocks
                                                  << " " << braid::precision_name(p) << " g=" << g << " n=" << n;
        }
      }
  }
}

TEST(AllReduce, OneStepQuantizedEqualsCpuReferenceBitForBit) {
  // ArAlgo::kQuantOneStep against quant::reference_allreduce_onestep: INT8 and INT4, both dtypes, group
  // sizes, tails, in place and not, the default grid and 3 blocks (uneven group ranges), and alternating
  // with the two-step kernel on the same workspace and launch counter. Kernels: the per-width defaults
  // (reducer(), `small`: below onestep_split_min_elems INT8 pipelined with 16-byte pulls, INT4 flat with
  // 8-value pulls), pipelined with
  // one iteration per step, two steps ahead, the 8-value pull with two iterations per pass (`deep`: many
  // flags per block, both unrolls' tails), pipelined with 16-byte pulls (`pipew`), not pipelined with
  // either pull (`flat`, `flat8`), the 8-value pull with four iterations per pass pipelined (`ru4`) and in
  // one step (`one4`), and with split roles (`split`, `splitw`, `split8`, `split16`: quantizing and
  // pulling blocks; `split16` with the 16-value pull), and tapered units (`taper16`, `taperw`: smaller units at
  // each chunk's ends, at every size; the default tapers from 32 Mi elements only, so the other split
  // configurations run uniform units here).
  // The flat and split kernels' quantizer and 8-value pull keep the next iteration's loads in flight
  // (quant_prefetch) where a block has two or more whole iterations (`small`, `split8`, `splitw`); `flat8`
  // turns that off. `flat8`, `one4`, `splitw` and `split16` write phase stamps (set_onestep_profile), checked after
  // the loop.
  ASSERT_TRUE(team().peer_ok());
  const int rank = team().rank(), W = team().size();
  braid::AllReducerConfig few;
  few.quant_blocks = 3;
  braid::AllReducer small(team(), few);  // the per-width defaults on 3 blocks
  braid::AllReducerConfig nosplit;  // the pipelined / flat kernels for both widths (no split roles)
  nosplit.onestep_split_iters[0] = nosplit.onestep_split_iters[1] = 0;
  few.onestep_split_iters[0] = few.onestep_split_iters[1] = 0;  // for the configurations below
  braid::AllReducerConfig deep_cfg = few;
  deep_cfg.onestep_step_iters[0] = deep_cfg.onestep_step_iters[1] = 1;
  deep_cfg.onestep_lag = 2;
  deep_cfg.onestep_reduce_unroll = 2;
  deep_cfg.onestep_wide_pull[0] = deep_cfg.onestep_wide_pull[1] = false;
  braid::AllReducer deep(team(), deep_cfg);
  braid::AllReducerConfig pipew_cfg = few;  // pipelined with 16-byte pulls for both widths, 2 iterations per step
  pipew_cfg.onestep_step_iters[0] = pipew_cfg.onestep_step_iters[1] = 2;
  pipew_cfg.onestep_wide_pull[0] = pipew_cfg.onestep_wide_pull[1] = true;
  braid::AllReducer pipew(team(), pipew_cfg);
  braid::AllReducerConfig flat_cfg = nosplit;
  flat_cfg.onestep_step_iters[0] = flat_cfg.onestep_step_iters[1] = 0;
  flat_cfg.onestep_wide_pull[0] = flat_cfg.onestep_wide_pull[1] = true;
  braid::AllReducer flat(team(), flat_cfg);
  braid::AllReducerConfig flat8_cfg = few;  // 3 blocks, so each block runs many iterations
  flat8_cfg.onestep_step_iters[0] = flat8_cfg.onestep_step_iters[1] = 0;
  flat8_cfg.onestep_wide_pull[0] = flat8_cfg.onestep_wide_pull[1] = false;
  flat8_cfg.quant_prefetch = false;  // the quantizer and 8-value pull without the next iteration's loads
  braid::AllReducer flat8(team(), flat8_cfg);
  braid::AllReducerConfig ru4_cfg = nosplit;  // 8-value pull, four iterations' loads in flight, 5 per step
  ru4_cfg.onestep_step_iters[0] = ru4_cfg.onestep_step_iters[1] = 5;
  ru4_cfg.onestep_reduce_unroll = 4;
  ru4_cfg.onestep_wide_pull[0] = ru4_cfg.onestep_wide_pull[1] = false;
  braid::AllReducer ru4(team(), ru4_cfg);
  braid::AllReducerConfig one4_cfg = ru4_cfg;  // one step (quantize all, one wait, pull all), with phase stamps
  one4_cfg.onestep_step_iters[0] = one4_cfg.onestep_step_iters[1] = 1 << 30;
  braid::AllReducer one4(team(), one4_cfg);
  one4.set_onestep_profile(true);
  braid::AllReducerConfig split_cfg;  // split roles, one iteration per unit, 8-value pull
  split_cfg.onestep_split_iters[0] = split_cfg.onestep_split_iters[1] = 1;
  split_cfg.onestep_split_min_elems[0] = split_cfg.onestep_split_min_elems[1] = 0;  // at every size
  split_cfg.onestep_wide_pull[0] = split_cfg.onestep_wide_pull[1] = false;
  split_cfg.onestep_split_taper[0] = split_cfg.onestep_split_taper[1] = 0;  // uniform units at any size
  braid::AllReducer split(team(), split_cfg);
  braid::AllReducerConfig splitw_cfg = few;  // split roles on 3 blocks, 3 iterations per unit, 16-byte pull
  splitw_cfg.onestep_split_iters[0] = splitw_cfg.onestep_split_iters[1] = 3;
  splitw_cfg.onestep_split_min_elems[0] = splitw_cfg.onestep_split_min_elems[1] = 0;
  splitw_cfg.onestep_split_puller_every[0] = splitw_cfg.onestep_split_puller_every[1] = 3;  // most SMs: quantizers
  splitw_cfg.onestep_wide_pull[0] = splitw_cfg.onestep_wide_pull[1] = true;
  braid::AllReducer splitw(team(), splitw_cfg);
  braid::AllReducerConfig split8_cfg = few;  // split roles on 3 blocks, 8 iterations per unit, 8-value pull
  split8_cfg.onestep_split_iters[0] = split8_cfg.onestep_split_iters[1] = 8;
  split8_cfg.onestep_split_min_elems[0] = split8_cfg.onestep_split_min_elems[1] = 0;
  split8_cfg.onestep_wide_pull[0] = split8_cfg.onestep_wide_pull[1] = false;
  split8_cfg.onestep_split_taper[0] = split8_cfg.onestep_split_taper[1] = 0;  // uniform units
  braid::AllReducer split8(team(), split8_cfg);
  // split roles on 3 blocks, 3 iterations per unit (1.5 iterations of 16 values: pull_sum_vals' whole
  // iteration, then pull_sum_8 for the rest of each unit), 16-value pull, phase stamps
  braid::AllReducerConfig split16_cfg = few;
  split16_cfg.onestep_split_iters[0] = split16_cfg.onestep_split_iters[1] = 3;
  split16_cfg.onestep_split_min_elems[0] = split16_cfg.onestep_split_min_elems[1] = 0;
  split16_cfg.onestep_pull16[0] = split16_cfg.onestep_pull16[1] = true;
  braid::AllReducer split16(team(), split16_cfg);
  split16.set_onestep_profile(true);
  // Tapered units (onestep_split_taper): small head and tail units per chunk around the middle's, with the
  // 16-value pull (1-iteration ends around 3-iteration units) and the 16-byte pull on the default grid (2-iteration
  // ends around 8-iteration units); short chunks fall back to uniform units.
  braid::AllReducerConfig taper16_cfg = split16_cfg;
  taper16_cfg.onestep_split_taper[0] = taper16_cfg.onestep_split_taper[1] = 2;
  taper16_cfg.onestep_split_taper_min_elems[0] = taper16_cfg.onestep_split_taper_min_elems[1] = 0;  // every size
  braid::AllReducer taper16(team(), taper16_cfg);
  braid::AllReducerConfig taperw_cfg;
  taperw_cfg.onestep_split_min_elems[0] = taperw_cfg.onestep_split_min_elems[1] = 0;
  taperw_cfg.onestep_split_iters[0] = taperw_cfg.onestep_split_iters[1] = 8;
  taperw_cfg.onestep_wide_pull[0] = taperw_cfg.onestep_wide_pull[1] = true;
  taperw_cfg.onestep_pull16[0] = taperw_cfg.onestep_pull16[1] = false;
  taperw_cfg.onestep_split_taper[0] = taperw_cfg.onestep_split_taper[1] = 3;
  taperw_cfg.onestep_split_taper_iters[0] = taperw_cfg.onestep_split_taper_iters[1] = 2;
  taperw_cfg.onestep_split_taper_min_elems[0] = taperw_cfg.onestep_split_taper_min_elems[1] = 0;
  braid::AllReducer taperw(team(), taperw_cfg);
  splitw.set_onestep_profile(true);
  flat8.set_onestep_profile(true);
  auto name = [&](const braid::AllReducer* ar) {
    return ar == &small  ? " 3 blocks"
           : ar == &deep ? " 3 blocks, 1 iteration per step, lag 2, 8-value pull, unroll 2"
           : ar == &pipew ? " 3 blocks, 2 iterations per step, 16-byte pull"
           : ar == &flat ? " not pipelined"
           : ar == &flat8 ? " 3 blocks, not pipelined, 8-value pull, no prefetch, phase stamps"
           : ar == &ru4 ? " 5 iterations per step, 8-value pull, unroll 4"
           : ar == &one4 ? " one step, 8-value pull, unroll 4, phase stamps"
           : ar == &split ? " split roles, 1 iteration per unit, 8-value pull"
           : ar == &splitw ? " split, 3 blocks, 3 iterations per unit, pullers every 3rd SM, 16-byte pull, stamps"
           : ar == &split8 ? " split, 3 blocks, 8 iterations per unit, 8-value pull"
           : ar == &split16 ? " split, 3 blocks, 3 iterations per unit, 16-value pull, stamps"
           : ar == &taper16 ? " split, 3 blocks, 3 iterations per unit, 2 tapered units of 1 at each end, 16-value pull"
           : ar == &taperw ? " split, 8 iterations per unit, 3 tapered units of 2 at each end, 16-byte pull"
                          : "";
  };
  for (braid::AllReducer* ar :
       {&reducer(), &small, &deep, &pipew, &flat, &flat8, &ru4, &one4, &split, &splitw, &split8, &split16, &taper16,
        &taperw})
    for (Precision p : {Precision::kInt8, Precision::kInt4})
      for (DType dt : {DType::kBF16, DType::kFP16})
        for (int g : {32, 128, 256})
          for (size_t n : {size_t(1), size_t(7), size_t(1000), size_t(123457), (size_t(1) << 20) + 3}) {
            const q::Dtype qd = dt == DType::kBF16 ? q::Dtype::bf16 : q::Dtype::fp16;
            const auto in = inputs(n, qd, braid::dist::Distribution::outlier, 4000 + n + g);
            const auto expect = q::reference_allreduce_onestep(p == Precision::kInt8 ? 8 : 4, g, qd, in);
            const bool in_place = (n + g) % 3 == 0;
            const auto got = run_ar(*ar, in[rank], dt, ArAlgo::kQuantOneStep, p, g, in_place);
            EXPECT_EQ(differences(got, expect), 0u)
                << "one-step " << braid::precision_name(p) << " " << braid::bench::dtype_name(dt) << " g=" << g
                << " n=" << n << " W=" << W << (in_place ? " in-place" : "") << name(ar);
            if (n == 1000) {  // the two-step on the same reducer in between
              const auto two = run_ar(*ar, in[rank], dt, ArAlgo::kQuantP2P, p, g, false);
              EXPECT_EQ(differences(two, q::reference_allreduce(mode_of(p), g, qd, in)), 0u);
            }
          }
  for (braid::AllReducer* ar : {&flat8, &one4, &splitw, &split16}) {  // the last launch's stamps: 4 per block, in order
    const std::vector<uint64_t> st = ar->onestep_profile();
    ASSERT_FALSE(st.empty()) << name(ar);
    for (size_t b = 0; b < st.size() / 4; ++b) {
      EXPECT_GT(st[4 * b], 0u) << "block " << b << name(ar);
      for (int i = 1; i < 4; ++i) EXPECT_LE(st[4 * b + i - 1], st[4 * b + i]) << "block " << b << name(ar);
    }
  }
}

TEST(AllReduce, OneStepInt6EqualsTheTwoStepBitForBit) {
  // INT6 by the one-step: INT4 codes exchanged once, every rank re-quantizes its fp32 sums to INT8 and
  // decodes them (the two-step's step 2, done where the sums are): the two-step INT6 reference's output,
  // bit for bit. The defaults at these sizes (the flat kernel, 8-value pull), the same on 3 blocks (many
  // iterations per block: the pull's prefetching loop), and the split kernel at every size on 3 blocks
  // with 3 iterations per unit (16-value pull with step 2 over both halves of a lane's values; the 8-value
  // remainder of each unit and the tails through pull_sum_8's step 2, partial groups at n); at W > 2
  // every pull through pull_sum_8.
  ASSERT_TRUE(team().peer_ok());
  const int rank = team().rank(), W = team().size();
  braid::AllReducerConfig few;
  few.quant_blocks = 3;
  braid::AllReducer flat3(team(), few);
  few.onestep_split_iters[1] = 3;
  few.onestep_split_min_elems[1] = 0;
  few.onestep_split_taper[1] = 0;  // uniform units
  braid::AllReducer small(team(), few);
  few.onestep_split_taper[1] = 2;  // tapered: 2 units of 1 iteration at each chunk's ends, at every size
  few.onestep_split_taper_min_elems[1] = 0;
  braid::AllReducer smallt(team(), few);
  for (braid::AllReducer* ar : {&reducer(), &flat3, &small, &smallt})
    for (DType dt : {DType::kBF16, DType::kFP16})
      for (int g : {32, 128, 256})
        for (size_t n : {size_t(1), size_t(7), size_t(1000), size_t(123457), (size_t(1) << 20) + 3}) {
          const q::Dtype qd = dt == DType::kBF16 ? q::Dtype::bf16 : q::Dtype::fp16;
          const auto in = inputs(n, qd, braid::dist::Distribution::outlier, 6000 + n + g);
          const auto expect = q::reference_allreduce(q::Mode::int6, g, qd, in);
          const bool in_place = (n + g) % 3 == 1;
          const auto got = run_ar(*ar, in[rank], dt, ArAlgo::kQuantOneStep, Precision::kInt6, g, in_place);
          EXPECT_EQ(differences(got, expect), 0u)
              << "one-step INT6 " << braid::bench::dtype_name(dt) << " g=" << g << " n=" << n << " W=" << W
              << (in_place ? " in-place" : "")
              << (ar == &small    ? " split, 3 blocks, 3 iterations per unit"
                  : ar == &smallt ? " split, 3 blocks, 3 iterations per unit, tapered"
                  : ar == &flat3  ? " 3 blocks"
                                  : "");
        }
}

TEST(AllReduce, AutoChoiceFollowsTheTableForLossyPrecisions) {
  // ArAlgo::kAuto with a lossy precision: the builtin table's world-2 rows pick the one-step for INT8 and
  // INT4 (its CPU reference, bit for bit), and for INT6 its one-step form, whose output is the two-step's;
  // every precision at other world sizes the two-step.
  ASSERT_TRUE(team().peer_ok());
  const int rank = team().rank(), W = team().size();
  for (Precision p : {Precision::kInt8, Precision::kInt6, Precision::kInt4})
    for (size_t n : {size_t(4099), (size_t(1) << 20) + 5}) {
      const auto in = inputs(n, q::Dtype::bf16, braid::dist::Distribution::normal, 700 + n);
      const bool one = W == 2 && p != Precision::kInt6;
      const auto expect = one ? q::reference_allreduce_onestep(p == Precision::kInt8 ? 8 : 4, 128, q::Dtype::bf16, in)
                              : q::reference_allreduce(mode_of(p), 128, q::Dtype::bf16, in);
      const auto got = run_ar(reducer(), in[rank], DType::kBF16, ArAlgo::kAuto, p, 128, false);
      EXPECT_EQ(differences(got, expect), 0u) << braid::precision_name(p) << " n=" << n << " W=" << W
                                               << (one ? " (one-step expected)" : " (two-step expected)");
    }
}

TEST(AllReduce, PipelinedDeepPipelinesOddSizesAndTails) {
  // Few blocks force many sub-rounds per block (deep pipelines, both barrier parities, uneven block
  // ranges); odd counts leave partial groups and partial 16-value units; g = 64 covers the last size.
  ASSERT_TRUE(team().peer_ok());
  const int rank = team().rank();
  for (int blocks : {1, 3, 7}) {
    braid::AllReducerConfig cfg;
    cfg.quant_pipe_blocks = blocks;
    braid::AllReducer ar(team(), cfg);
    for (Precision p : {Precision::kInt8, Precision::kInt6, Precision::kInt4})
      for (size_t n : {size_t(17), size_t(8193), size_t(65536 + 129), size_t(1) << 20, (size_t(1) << 20) + 12345}) {
        const int g = n % 2 ? 64 : 128;
        const auto in = inputs(n, q::Dtype::bf16, braid::dist::Distribution::student_t, 31 + n + blocks);
        const auto expect = q::reference_allreduce(mode_of(p), g, q::Dtype::bf16, in);
        for (bool in_place : {false, true}) {
          const auto got = run_ar(ar, in[rank], DType::kBF16, ArAlgo::kQuantP2P, p, g, in_place, QuantImpl::kPipelined);
          EXPECT_EQ(differences(got, expect), 0u) << "pipelined blocks<=" << blocks << " " << braid::precision_name(p)
                                                  << " g=" << g << " n=" << n << (in_place ? " in-place" : "");
        }
      }
  }
}

TEST(AllReduce, QuantizedChunksLongMessages) {
  // Small pieces force several launches per call; the result is the reference of each piece.
  braid::AllReducerConfig cfg;
  cfg.piece_elems = 1 << 16;
  braid::AllReducer ar(team(), cfg);
  const size_t n = 200003;
  const auto in = inputs(n, q::Dtype::bf16, braid::dist::Distribution::student_t, 77);
  std::vector<uint16_t> expect;
  for (size_t off = 0; off < n; off += cfg.piece_elems) {
    const size_t len = std::min<size_t>(cfg.piece_elems, n - off);
    std::vector<std::vector<uint16_t>> piece(team().size());
    for (int r = 0; r < team().size(); ++r) piece[r].assign(in[r].begin() + off, in[r].begin() + off + len);
    const auto e = q::reference_allreduce(q::Mode::int6, 128, q::Dtype::bf16, piece);
    expect.insert(expect.end(), e.begin(), e.end());
  }
  for (ArAlgo algo : {ArAlgo::kQuantP2P, ArAlgo::kQuantNccl}) {
    if (algo == ArAlgo::kQuantNccl && team().shared_gpu()) continue;  // no NCCL on a shared GPU
    const auto got = run_ar(ar, in[team().rank()], DType::kBF16, algo, Precision::kInt6, 128, false);
    EXPECT_EQ(differences(got, expect), 0u) << braid::algo_name(algo);
  }
  for (Precision p : {Precision::kInt8, Precision::kInt6, Precision::kInt4}) {
    std::vector<uint16_t> want;
    for (size_t off = 0; off < n; off += cfg.piece_elems) {
      const size_t len = std::min<size_t>(cfg.piece_elems, n - off);
      std::vector<std::vector<uint16_t>> piece(team().size());
      for (int r = 0; r < team().size(); ++r) piece[r].assign(in[r].begin() + off, in[r].begin() + off + len);
      const auto e = q::reference_allreduce(mode_of(p), 128, q::Dtype::bf16, piece);
      want.insert(want.end(), e.begin(), e.end());
    }
    for (bool in_place : {false, true}) {
      const auto got =
          run_ar(ar, in[team().rank()], DType::kBF16, ArAlgo::kQuantP2P, p, 128, in_place, QuantImpl::kPipelined);
      EXPECT_EQ(differences(got, want), 0u) << "pipelined " << braid::precision_name(p) << (in_place ? " in-place" : "");
    }
  }
}

TEST(AllReduce, ExactOneShotAndTwoShotEqualTheExactSum) {
  ASSERT_TRUE(team().peer_ok());
  auto& s = team();
  // 9M elements exceed the one-shot workspace (8M per launch): exercised in pieces.
  for (size_t n : {size_t(1), size_t(9), size_t(1001), size_t(65536), (size_t(1) << 20) + 3, size_t(9) << 20})
    for (DType dt : {DType::kBF16, DType::kFP16})
      for (ArAlgo algo : {ArAlgo::kOneShot, ArAlgo::kOneShotLL, ArAlgo::kOneShotLL128, ArAlgo::kTwoShot})
        for (bool in_place : {false, true})
          EXPECT_EQ(exact_wrong(reducer(), algo, n, dt, in_place, 5 + n), 0u)
              << braid::algo_name(algo) << " n=" << n << " " << braid::bench::dtype_name(dt)
              << (in_place ? " in-place" : "");
}

TEST(AllReduce, LL128EqualsTheExactSumOnEveryLineShape) {
  // The LL128 one-shot: lines of 60 values, 4 per warp (partial lines, partial warps, tails of every lane
  // class), many lines per warp (3 blocks), messages cut into launches (a 64 KiB piece), in place or not,
  // and 24 back-to-back calls on fresh data with no host sync between them (both workspace phases, flags
  // of consecutive launches; a line read before it was whole would return the previous call's values).
  ASSERT_TRUE(team().peer_ok());
  auto& s = team();
  braid::AllReducerConfig few, pieces;
  few.ll128_blocks = 3;
  few.pdl = false;  // the plain launch (the default is programmatic dependent launch)
  pieces.ll128_max_bytes = 64 << 10;
  braid::AllReducer a_few(s, few), a_pieces(s, pieces);
  for (braid::AllReducer* ar : {&reducer(), &a_few, &a_pieces})
    for (size_t n : {size_t(1), size_t(4), size_t(56), size_t(59), size_t(60), size_t(61), size_t(239), size_t(240),
                     size_t(241), size_t(1001), size_t(65536 + 3), (size_t(1) << 20) + 7, size_t(5) << 20})
      for (DType dt : {DType::kBF16, DType::kFP16})
        for (bool in_place : {false, true})
          EXPECT_EQ(exact_wrong(*ar, ArAlgo::kOneShotLL128, n, dt, in_place, 11 + n), 0u)
              << "n=" << n << " " << braid::bench::dtype_name(dt) << (in_place ? " in-place" : "")
              << (ar == &a_few ? " 3 blocks, no PDL" : ar == &a_pieces ? " 64 KiB pieces" : "");
  const size_t n = (size_t(1) << 20) + 123;
  constexpr int kCalls = 24;
  std::vector<void*> x(kCalls), y(kCalls);
  for (int c = 0; c < kCalls; ++c) {
    ASSERT_EQ(cudaMalloc(&x[c], n * 2), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&y[c], n * 2), cudaSuccess);
    braid::bench::fill_pattern(x[c], DType::kBF16, n, 4000 + c, s.rank(), 0, s.stream());
  }
  s.synchronize("LL128 inputs");
  s.barrier();
  braid::AllReduceOptions o;
  o.algo = ArAlgo::kOneShotLL128;
  for (int round = 0; round < 8; ++round) {  // ~3.5M lines read in all, each right after a different call's
    for (int c = 0; c < kCalls; ++c) {
      cudaMemsetAsync(y[c], 0xFF, n * 2, s.stream());
      reducer().run(x[c], y[c], n, DType::kBF16, s.stream(), o);
    }
    s.synchronize("LL128 back to back");
    for (int c = 0; c < kCalls; ++c)
      EXPECT_EQ(braid::bench::count_wrong("allreduce", y[c], DType::kBF16, n, 4000 + c, s.rank(), s.size(), s.stream()),
                0u)
          << "round " << round << " call " << c;
  }
  for (int c = 0; c < kCalls; ++c) {
    cudaFree(x[c]);
    cudaFree(y[c]);
  }
}

// Programmatic dependent launch (AllReducerConfig::pdl) of the exact kernels (one-shot, LL, LL128, two-shot): shapes, then
// back-to-back calls whose kernels are adjacent in the stream (no memset between them: the next launch may start
// while the previous one runs, and must still see its launch counter and leave its workspace alone), directly and
// replayed from a CUDA graph.
TEST(AllReduce, OneShotsWithProgrammaticDependentLaunchEqualTheExactSum) {
  ASSERT_TRUE(team().peer_ok());
  auto& s = team();
  braid::AllReducerConfig cfg;
  cfg.pdl = true;
  braid::AllReducerConfig pieces = cfg;  // several launches per call: PDL between a call's own pieces
  pieces.ll128_max_bytes = 64 << 10;
  pieces.ll_max_bytes = 64 << 10;
  pieces.oneshot_max_bytes = 64 << 10;
  pieces.piece_elems = 32 << 10;
  braid::AllReducerConfig remote = cfg;  // and in the remote memory synchronization domain
  remote.remote_domain = true;
  braid::AllReducer pdl(s, cfg), pdl_pieces(s, pieces), pdl_remote(s, remote);
  for (braid::AllReducer* ar : {&pdl, &pdl_pieces, &pdl_remote})
    for (ArAlgo algo : {ArAlgo::kOneShot, ArAlgo::kOneShotLL, ArAlgo::kOneShotLL128, ArAlgo::kTwoShot})
      for (size_t n : {size_t(1), size_t(59), size_t(61), size_t(1001), size_t(65536 + 3), (size_t(1) << 20) + 7})
        for (bool in_place : {false, true})
          EXPECT_EQ(exact_wrong(*ar, algo, n, DType::kBF16, in_place, 17 + n), 0u)
              << braid::algo_name(algo) << " n=" << n << (in_place ? " in-place" : "")
              << (ar == &pdl_pieces ? " 64 KiB pieces" : ar == &pdl_remote ? " remote domain" : "");
  const size_t n = (size_t(1) << 18) + 123;
  constexpr int kCalls = 16;
  std::vector<void*> x(kCalls), y(kCalls);
  for (int c = 0; c < kCalls; ++c) {
    ASSERT_EQ(cudaMalloc(&x[c], n * 2), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&y[c], n * 2), cudaSuccess);
  }
  auto calls = [&](braid::AllReducer& ar) {
    for (int c = 0; c < kCalls; ++c) {
      braid::AllReduceOptions o;
      constexpr ArAlgo kCycle[] = {ArAlgo::kOneShotLL128, ArAlgo::kOneShotLL128, ArAlgo::kOneShotLL, ArAlgo::kOneShot,
                                   ArAlgo::kOneShotLL128, ArAlgo::kTwoShot};
      o.algo = kCycle[c % 6];
      ar.run(x[c], y[c], n, DType::kBF16, s.stream(), o);
    }
  };
  auto check = [&](uint64_t seed0, const char* what) {
    for (int c = 0; c < kCalls; ++c)
      EXPECT_EQ(braid::bench::count_wrong("allreduce", y[c], DType::kBF16, n, seed0 + c, s.rank(), s.size(), s.stream()),
                0u)
          << what << " call " << c;
  };
  auto fresh = [&](uint64_t seed0) {  // new inputs, poisoned outputs, then the calls back to back
    for (int c = 0; c < kCalls; ++c) {
      braid::bench::fill_pattern(x[c], DType::kBF16, n, seed0 + c, s.rank(), 0, s.stream());
      cudaMemsetAsync(y[c], 0xFF, n * 2, s.stream());
    }
  };
  for (int round = 0; round < 6; ++round) {
    const uint64_t seed0 = 7000 + 100 * round;
    fresh(seed0);
    calls(round % 2 ? pdl_remote : pdl);
    s.synchronize("PDL back to back");
    check(seed0, "direct");
  }
  cudaGraphExec_t ge;
  cudaGraph_t g = braid::test::capture_graph(s.stream(), [&] { calls(pdl); });
  ASSERT_NE(g, nullptr) << "stream capture failed";
  ASSERT_EQ(cudaGraphInstantiate(&ge, g, 0), cudaSuccess);
  for (int rep = 0; rep < 4; ++rep) {
    const uint64_t seed0 = 8000 + 100 * rep;
    fresh(seed0);
    ASSERT_EQ(cudaGraphLaunch(ge, s.stream()), cudaSuccess);
    s.synchronize("PDL graph replay");
    check(seed0, "graph");
  }
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  for (int c = 0; c < kCalls; ++c) {
    cudaFree(x[c]);
    cudaFree(y[c]);
  }
}

// The flag-in-the-data one-shots (LL, LL128) poll in loops of their own, not dev::wait_geq: a peer that never calls
// must end them with a TimeoutError (a bounded wait), not a hang. A team of its own with a 2-s bound; the last rank
// never calls.
TEST(AllReduce, FlagInDataOneShotsTimeOutWhenAPeerNeverCalls) {
  for (ArAlgo algo : {ArAlgo::kOneShotLL, ArAlgo::kOneShotLL128}) {
    braid::TeamOptions opt;
    opt.timeout_s = 2.0;
    braid::Team t(MPI_COMM_WORLD, opt);
    ASSERT_TRUE(t.peer_ok());
    {
      braid::AllReducer ar(t);
      const size_t n = 100003;
      void* x = nullptr;
      ASSERT_EQ(cudaMalloc(&x, n * 2), cudaSuccess);
      braid::bench::fill_pattern(x, DType::kBF16, n, 3, t.rank(), 0, t.stream());
      t.synchronize("inputs");
      t.barrier();
      if (t.rank() != t.size() - 1) {
        braid::AllReduceOptions o;
        o.algo = algo;
        ar.run(x, x, n, DType::kBF16, t.stream(), o);
        const auto t0 = std::chrono::steady_clock::now();
        EXPECT_THROW(t.synchronize("all-reduce with a peer that never calls"), braid::TimeoutError)
            << braid::algo_name(algo);
        EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 30.0);
      }
      cudaDeviceSynchronize();
      cudaFree(x);
      MPI_Barrier(MPI_COMM_WORLD);
    }
  }
}

TEST(AllReduce, TwoShotUnrolledEqualsTheExactSum) {
  // 2 and 4 vectors per thread per iteration, with the default grid and with 3 blocks (many iterations
  // per thread, ranges that end inside an unrolled group), tails of every length class.
  ASSERT_TRUE(team().peer_ok());
  auto& s = team();
  const int cases[3][2] = {{2, 3}, {4, 3}, {4, 528}};  // (unroll, blocks)
  for (const auto& cs : cases) {
    {
      const int unroll = cs[0], blocks = cs[1];
      braid::AllReducerConfig cfg;
      cfg.twoshot_unroll = unroll;
      cfg.twoshot_blocks = blocks;
      braid::AllReducer ar(s, cfg);
      for (size_t n : {size_t(1), size_t(9), size_t(1001), size_t(65536 + 3), (size_t(1) << 20) + 5, size_t(9) << 20})
        for (bool in_place : {false, true})
          EXPECT_EQ(exact_wrong(ar, ArAlgo::kTwoShot, n, DType::kBF16, in_place, 7 + n), 0u)
              << "unroll " << unroll << " blocks " << blocks << " n=" << n << (in_place ? " in-place" : "");
    }
  }
}

TEST(AllReduce, CapturedInACudaGraphAndReplayed) {
  ASSERT_TRUE(team().peer_ok());
  auto& s = team();
  const size_t n = 300000;
  void *x = nullptr, *y1 = nullptr, *y2 = nullptr, *y3 = nullptr;
  cudaMalloc(&x, n * 2);
  cudaMalloc(&y1, n * 2);
  cudaMalloc(&y2, n * 2);
  cudaMalloc(&y3, n * 2);
  braid::AllReduceOptions one, two, i8, ll, i4p;
  ll.algo = ArAlgo::kOneShotLL;
  braid::AllReduceOptions ll128;
  ll128.algo = ArAlgo::kOneShotLL128;
  one.algo = ArAlgo::kOneShot;
  two.algo = ArAlgo::kTwoShot;
  i8.precision = Precision::kInt8;
  i8.algo = ArAlgo::kQuantP2P;
  i4p.precision = Precision::kInt4;
  i4p.algo = ArAlgo::kQuantP2P;
  i4p.quant_impl = QuantImpl::kPipelined;
  void* y4 = nullptr;
  cudaMalloc(&y4, n * 2);
  // Reference for the pipelined INT4 call: the classic INT4 kernel outside the graph (same bits).
  braid::AllReduceOptions i4c = i4p;
  i4c.quant_impl = QuantImpl::kClassic;
  void* y4c = nullptr;
  cudaMalloc(&y4c, n * 2);
  cudaGraphExec_t ge;
  cudaGraph_t g = braid::test::capture_graph(s.stream(), [&] {
    reducer().run(x, y1, n, DType::kBF16, s.stream(), one);
    reducer().run(x, y2, n, DType::kBF16, s.stream(), two);
    reducer().run(x, y3, n, DType::kBF16, s.stream(), i8);
    reducer().run(x, y1, n, DType::kBF16, s.stream(), ll);  // overwrites y1 with the same exact sum
    reducer().run(x, y1, n, DType::kBF16, s.stream(), ll128);  // and again
    reducer().run(x, y4, n, DType::kBF16, s.stream(), i4p);
    reducer().run(x, y4, n, DType::kBF16, s.stream(), i4p);  // two pipelined launches in a row: both phases
  });
  ASSERT_NE(g, nullptr) << "stream capture failed";
  ASSERT_EQ(cudaGraphInstantiate(&ge, g, 0), cudaSuccess);
  for (int rep = 0; rep < 5; ++rep) {
    const uint64_t seed = 900 + rep;
    braid::bench::fill_pattern(x, DType::kBF16, n, seed, s.rank(), 0, s.stream());
    ASSERT_EQ(cudaGraphLaunch(ge, s.stream()), cudaSuccess);
    s.synchronize("graph replay");
    EXPECT_EQ(braid::bench::count_wrong("allreduce", y1, DType::kBF16, n, seed, s.rank(), s.size(), s.stream()), 0u);
    EXPECT_EQ(braid::bench::count_wrong("allreduce", y2, DType::kBF16, n, seed, s.rank(), s.size(), s.stream()), 0u);
    // INT8 of half-integers in [-15.5, 15.5]: within half a step of the range per quantization.
    std::vector<uint16_t> got(n);
    cudaMemcpy(got.data(), y3, n * 2, cudaMemcpyDeviceToHost);
    std::vector<uint16_t> exact(n);
    cudaMemcpy(exact.data(), y1, n * 2, cudaMemcpyDeviceToHost);
    double worst = 0;
    for (size_t i = 0; i < n; ++i)
      worst = std::max(worst, std::abs(double(q::bf16_bits_to_float(got[i])) - q::bf16_bits_to_float(exact[i])));
    EXPECT_LT(worst, 0.5 * s.size() * 31.0 / 255 + 0.5 * 62.0 / 255 + 0.5) << "rep " << rep;
    reducer().run(x, y4c, n, DType::kBF16, s.stream(), i4c);
    s.synchronize("classic int4 reference");
    std::vector<uint16_t> p4(n), c4(n);
    cudaMemcpy(p4.data(), y4, n * 2, cudaMemcpyDeviceToHost);
    cudaMemcpy(c4.data(), y4c, n * 2, cudaMemcpyDeviceToHost);
    EXPECT_EQ(differences(p4, c4), 0u) << "pipelined int4 in a graph, rep " << rep;
  }
  cudaFree(y4);
  cudaFree(y4c);
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  cudaFree(x);
  cudaFree(y1);
  cudaFree(y2);
  cudaFree(y3);
}

// run_symmetric: the input in a SymmetricBuffer, the kernels reading the peers' copies. One-shot into a
// local buffer, two-shot in place; tails of every class, both unrolls (U = 4 from 2 Mi elements); each
// size run twice in a row on refilled data (the slots' epochs advance, the closing barrier keeps a rank
// from refilling its copy while a peer still reads it); then captured in a graph and replayed; then the
// argument errors.
TEST(AllReduce, SymmetricBufferEqualsTheExactSum) {
  ASSERT_TRUE(team().peer_ok());
  auto& s = team();
  const size_t max_n = (size_t(9) << 20) + 5;
  braid::SymmetricBuffer buf(s, max_n * 2 + 256);
  void* y = nullptr;
  ASSERT_EQ(cudaMalloc(&y, max_n * 2), cudaSuccess);
  for (size_t n : {size_t(1), size_t(9), size_t(1001), size_t(65536 + 3), (size_t(1) << 20) + 5, max_n})
    for (DType dt : {DType::kBF16, DType::kFP16})
      for (ArAlgo algo : {ArAlgo::kOneShot, ArAlgo::kTwoShot, ArAlgo::kOneShotCE})
        for (int rep = 0; rep < 2; ++rep) {
          const uint64_t seed = 13 + n + rep;
          braid::bench::fill_pattern(buf.local(), dt, n, seed, s.rank(), 0, s.stream());
          cudaMemsetAsync(y, 0xFF, n * 2, s.stream());
          const bool one = algo != ArAlgo::kTwoShot;
          reducer().run_symmetric(buf, n, dt, s.stream(), algo, one ? y : nullptr);
          s.synchronize("symmetric-buffer all-reduce");
          const size_t wrong = braid::bench::count_wrong("allreduce", one ? y : buf.local(), dt, n, seed, s.rank(),
                                                         s.size(), s.stream());
          EXPECT_EQ(wrong, 0u) << braid::algo_name(algo) << " n=" << n << " " << braid::bench::dtype_name(dt)
                               << " rep " << rep;
        }
  {  // captured: one-shot by copy engines, one-shot, then two-shot in one graph, replayed on new data
    const size_t n = 300001;
    cudaGraphExec_t ge;
    cudaGraph_t g = braid::test::capture_graph(s.stream(), [&] {
      reducer().run_symmetric(buf, n, DType::kBF16, s.stream(), ArAlgo::kOneShotCE, y);
      reducer().run_symmetric(buf, n, DType::kBF16, s.stream(), ArAlgo::kOneShot, y);
      reducer().run_symmetric(buf, n, DType::kBF16, s.stream(), ArAlgo::kTwoShot);
    });
    ASSERT_NE(g, nullptr) << "stream capture failed";
    ASSERT_EQ(cudaGraphInstantiate(&ge, g, 0), cudaSuccess);
    for (int rep = 0; rep < 3; ++rep) {
      const uint64_t seed = 700 + rep;
      braid::bench::fill_pattern(buf.local(), DType::kBF16, n, seed, s.rank(), 0, s.stream());
      ASSERT_EQ(cudaGraphLaunch(ge, s.stream()), cudaSuccess);
      s.synchronize("symmetric graph replay");
      EXPECT_EQ(braid::bench::count_wrong("allreduce", y, DType::kBF16, n, seed, s.rank(), s.size(), s.stream()), 0u);
      EXPECT_EQ(braid::bench::count_wrong("allreduce", buf.local(), DType::kBF16, n, seed, s.rank(), s.size(),
                                          s.stream()),
                0u);
    }
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
  }
  // Both block layouts (AllReducerConfig::symm_interleaved; interleaved is the default) and both load
  // orders (symm_pair_oneshot / _twoshot: sources one at a time, or in pairs): the same exact sum, with
  // grids from 1 block to the default; few other slots reserved (signal slots are never returned).
  for (bool batch : {false, true})
    for (bool interleaved : {false, true})
      for (int blocks : {1, 3, 528}) {
        braid::AllReducerConfig cfg;
        cfg.symm_interleaved = interleaved;
        cfg.symm_pair_oneshot = cfg.symm_pair_twoshot = batch;
        cfg.twoshot_blocks = blocks;  // caps run_symmetric's grid
        cfg.oneshot_blocks = cfg.quant_blocks = cfg.quant_pipe_blocks = 1;
        braid::AllReducer r(s, cfg);
        const std::string layout = std::string(interleaved ? "interleaved" : "blocked") + (batch ? " paired" : "");
        for (size_t n : {size_t(9), size_t(65536 + 3), (size_t(2) << 20) + 1, max_n})
          for (ArAlgo algo : {ArAlgo::kOneShot, ArAlgo::kTwoShot}) {
            const uint64_t seed = 91 + n + blocks;
            braid::bench::fill_pattern(buf.local(), DType::kBF16, n, seed, s.rank(), 0, s.stream());
            cudaMemsetAsync(y, 0xFF, n * 2, s.stream());
            const bool one = algo == ArAlgo::kOneShot;
            r.run_symmetric(buf, n, DType::kBF16, s.stream(), algo, one ? y : nullptr);
            s.synchronize("symmetric-buffer all-reduce, one layout");
            EXPECT_EQ(braid::bench::count_wrong("allreduce", one ? y : buf.local(), DType::kBF16, n, seed, s.rank(),
                                                s.size(), s.stream()),
                      0u)
                << layout << " " << braid::algo_name(algo) << " n=" << n << " blocks=" << blocks;
          }
      }
  // One-shot by copy engines with small chunks (many copies and add kernels per call; at most 32 chunks
  // per piece, so the largest n also checks the chunk-count cap) and, at W > 2, several staged pieces.
  {
    braid::AllReducerConfig cfg;
    cfg.ce_chunk_bytes = 4096 + 16;
    cfg.ce_piece_elems = 100003;  // not a multiple of 8: the staging stride rounds it up
    cfg.oneshot_blocks = cfg.quant_blocks = cfg.quant_pipe_blocks = cfg.twoshot_blocks = 1;
    braid::AllReducer r(s, cfg);
    for (size_t n : {size_t(9), size_t(65536 + 3), (size_t(2) << 20) + 1, max_n})
      for (int rep = 0; rep < 2; ++rep) {
        const uint64_t seed = 57 + n + rep;
        const size_t off = rep * 64;  // rep 1: a slice at element 64 of the buffer
        braid::bench::fill_pattern(static_cast<char*>(buf.local()) + off * 2, DType::kFP16, n, seed, s.rank(), 0,
                                   s.stream());
        cudaMemsetAsync(y, 0xFF, n * 2, s.stream());
        r.run_symmetric(buf, n, DType::kFP16, s.stream(), ArAlgo::kOneShotCE, y, off);
        s.synchronize("one-shot by copy engines, small chunks");
        EXPECT_EQ(braid::bench::count_wrong("allreduce", y, DType::kFP16, n, seed, s.rank(), s.size(), s.stream()), 0u)
            << "oneshot-ce n=" << n << " rep " << rep;
      }
  }
  // Argument errors, raised on the host before any launch (the same on every rank).
  auto* l = static_cast<char*>(buf.local());
  EXPECT_THROW(reducer().run_symmetric(buf, buf.bytes(), DType::kBF16, s.stream()), braid::UsageError);  // too long
  EXPECT_THROW(reducer().run_symmetric(buf, 100, DType::kFP32, s.stream()), braid::UsageError);
  EXPECT_THROW(reducer().run_symmetric(buf, 100, DType::kBF16, s.stream(), ArAlgo::kOneShot, l + 1024),
               braid::UsageError);  // out inside the buffer
  EXPECT_THROW(reducer().run_symmetric(buf, 100, DType::kBF16, s.stream(), ArAlgo::kOneShot), braid::UsageError);
  EXPECT_THROW(reducer().run_symmetric(buf, 100, DType::kBF16, s.stream(), ArAlgo::kTwoShot, y), braid::UsageError);
  EXPECT_THROW(reducer().run_symmetric(buf, 100, DType::kBF16, s.stream(), ArAlgo::kQuantP2P), braid::UsageError);
  EXPECT_THROW(reducer().run_symmetric(buf, 100, DType::kBF16, s.stream(), ArAlgo::kOneShotCE), braid::UsageError);
  {
    braid::AllReduceOptions o;
    o.algo = ArAlgo::kOneShotCE;  // symmetric buffers only
    EXPECT_THROW(reducer().run(buf.local(), y, 100, DType::kBF16, s.stream(), o), braid::UsageError);
  }
  s.synchronize("after symmetric argument checks");
  cudaFree(y);
}

TEST(AllReduce, RejectsBadArgumentsClearly) {
  auto& s = team();
  char* x = nullptr;
  cudaMalloc(&x, 4096);
  braid::AllReduceOptions o;
  o.algo = ArAlgo::kOneShot;
  EXPECT_THROW(reducer().run(x + 2, x + 2, 100, DType::kBF16, s.stream(), o), braid::UsageError);  // misaligned
  EXPECT_THROW(reducer().run(x, x, 100, DType::kFP32, s.stream(), o), braid::UsageError);          // fp32 kernel
  o.algo = ArAlgo::kQuantP2P;  // lossy algorithm without asking for a lossy precision
  EXPECT_THROW(reducer().run(x, x, 100, DType::kBF16, s.stream(), o), braid::UsageError);
  braid::AllReduceOptions g;
  g.precision = Precision::kInt8;
  g.group = 48;
  EXPECT_THROW(reducer().run(x, x, 100, DType::kBF16, s.stream(), g), braid::UsageError);
  braid::AllReduceOptions dbg;
  dbg.debug_check_counts = true;
  dbg.algo = ArAlgo::kOneShot;
  EXPECT_THROW(reducer().run(x, x, 100 + s.rank(), DType::kBF16, s.stream(), dbg), braid::UsageError);
  s.synchronize("after argument checks");
  cudaFree(x);
}

}  // namespace
