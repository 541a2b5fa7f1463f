// AllReducer: workspaces, algorithm choice, launchers (see braid/allreduce.hpp).
#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <type_traits>
#include <vector>

#include "allreduce_kernels.cuh"
#include "allreduce_pipelined.cuh"
#include "braid/allreduce.hpp"
#include "braid/env.hpp"
#include "braid/quant.hpp"

namespace braid {

namespace {
constexpr const char* kBuiltinTable =
#include "braid_ar_table.inc"
    ;

uint64_t round_up(uint64_t x, uint64_t m) { return (x + m - 1) / m * m; }

// Runtime -> template dispatch in one place: dtype, (bits1, bits2), group size.
#define BRAID_DISPATCH_DT(dt, DT, ...)                \
  do {                                                \
    if ((dt) == DType::kBF16) {                       \
      constexpr int DT = 0;                           \
      __VA_ARGS__;                                    \
    } else {                                          \
      constexpr int DT = 1;                           \
      __VA_ARGS__;                                    \
    }                                                 \
  } while (0)
#define BRAID_DISPATCH_BITS(b1, b2, B1, B2, ...)                                  \
  do {                                                                            \
    if ((b1) == 8 && (b2) == 8) {                                                 \
      constexpr int B1 = 8, B2 = 8; (void)B1; (void)B2;                           \
      __VA_ARGS__;                                                                \
    } else if ((b1) == 4 && (b2) == 8) {                                          \
      constexpr int B1 = 4, B2 = 8; (void)B1; (void)B2;                           \
      __VA_ARGS__;                                                                \
    } else if ((b1) == 4 && (b2) == 4) {                                          \
      constexpr int B1 = 4, B2 = 4; (void)B1; (void)B2;                           \
      __VA_ARGS__;                                                                \
    } else {                                                                      \
      throw UsageError("unsupported bit widths", __FILE__, __LINE__);             \
    }                                                                             \
  } while (0)
#define BRAID_DISPATCH_GROUP(g, G, ...)                                                    \
  do {                                                                                     \
    switch (g) {                                                                           \
      case 32: { constexpr int G = 32; __VA_ARGS__; } break;                               \
      case 64: { constexpr int G = 64; __VA_ARGS__; } break;                               \
      case 128: { constexpr int G = 128; __VA_ARGS__; } break;                             \
      case 256: { constexpr int G = 256; __VA_ARGS__; } break;                             \
      default: throw UsageError("group size must be 32, 64, 128 or 256", __FILE__, __LINE__); \
    }                                                                                      \
  } while (0)

void bits_of(Precision p, int* b1, int* b2) {
  switch (p) {
    case Precision::kInt8: *b1 = 8; *b2 = 8; return;
    case Precision::kInt6: *b1 = 4; *b2 = 8; return;
    case Precision::kInt4: *b1 = 4; *b2 = 4; return;
    default: throw UsageError("not a quantized precision", __FILE__, __LINE__);
  }
}
}  // namespace

const char* builtin_allreduce_table() { return kBuiltinTable; }

const char* algo_name(ArAlgo a) {
  switch (a) {
    case ArAlgo::kAuto: return "auto";
    case ArAlgo::kNccl: return "nccl";
    case ArAlgo::kOneShot: return "oneshot";
    case ArAlgo::kOneShotLL: return "oneshot-ll";
    case ArAlgo::kOneShotLL128: return "oneshot-ll128";
    case ArAlgo::kTwoShot: return "twoshot";
    case ArAlgo::kQuantP2P: return "quant";
    case ArAlgo::kQuantNccl: return "quant-nccl";
    case ArAlgo::kOneShotCE: return "oneshot-ce";
    case ArAlgo::kQuantOneStep: return "quant-1step";
  }
  return "?";
}
const char* precision_name(Precision p) {
  switch (p) {
    case Precision::kExact: return "exact";
    case Precision::kInt8: return "int8";
    case Precision::kInt6: return "int6";
    case Precision::kInt4: return "int4";
  }
  return "?";
}
const char* quant_impl_name(QuantImpl i) {
  switch (i) {
    case QuantImpl::kDefault: return "default";
    case QuantImpl::kClassic: return "classic";
    case QuantImpl::kPipelined: return "pipelined";
  }
  return "?";
}
bool parse_quant_impl(const std::string& s, QuantImpl* impl) {
  if (s == "classic") { *impl = QuantImpl::kClassic; return true; }
  if (s == "pipelined" || s == "pipe") { *impl = QuantImpl::kPipelined; return true; }
  return false;
}
bool parse_algo(const std::string& s, ArAlgo* algo, Precision* prec, QuantImpl* impl) {
  *impl = QuantImpl::kDefault;
  for (const char* suffix : {"-pipe", "-classic"}) {
    const std::string suf(suffix);
    if (s.size() > suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0) {
      if (!parse_algo(s.substr(0, s.size() - suf.size()), algo, prec) || *algo != ArAlgo::kQuantP2P) return false;
      *impl = suf == "-pipe" ? QuantImpl::kPipelined : QuantImpl::kClassic;
      return true;
    }
  }
  return parse_algo(s, algo, prec);
}
bool parse_algo(const std::string& s, ArAlgo* algo, Precision* prec) {
  *prec = Precision::kExact;
  if (s == "nccl") { *algo = ArAlgo::kNccl; return true; }
  if (s == "oneshot") { *algo = ArAlgo::kOneShot; return true; }
  if (s == "oneshot-ll") { *algo = ArAlgo::kOneShotLL; return true; }
  if (s == "oneshot-ll128") { *algo = ArAlgo::kOneShotLL128; return true; }
  if (s == "twoshot") { *algo = ArAlgo::kTwoShot; return true; }
  if (s == "oneshot-ce") { *algo = ArAlgo::kOneShotCE; return true; }
  if (s == "auto") { *algo = ArAlgo::kAuto; return true; }
  if (s == "int8-1step" || s == "int6-1step" || s == "int4-1step") {
    *prec = s[3] == '8' ? Precision::kInt8 : s[3] == '6' ? Precision::kInt6 : Precision::kInt4;
    *algo = ArAlgo::kQuantOneStep;
    return true;
  }
  const bool nccl = s.size() > 5 && s.substr(s.size() - 5) == "-nccl";
  const std::string base = nccl ? s.substr(0, s.size() - 5) : s;
  if (base == "int8") *prec = Precision::kInt8;
  else if (base == "int6") *prec = Precision::kInt6;
  else if (base == "int4") *prec = Precision::kInt4;
  else return false;
  *algo = nccl ? ArAlgo::kQuantNccl : ArAlgo::kQuantP2P;
  return true;
}

std::vector<TuningRow> parse_tuning_table(const std::string& text) {
  std::vector<TuningRow> table;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ls(line);
    std::string w, dt, prec, maxb, algo;
    if (!(ls >> w >> dt >> prec >> maxb >> algo)) continue;
    TuningRow t{w == "*" ? 0 : std::stoi(w), dt, prec, std::stoull(maxb), ArAlgo::kNccl};
    Precision p;
    if (algo == "quant") t.algo = ArAlgo::kQuantP2P;
    else if (algo == "quant-nccl") t.algo = ArAlgo::kQuantNccl;
    else if (algo == "quant-1step") t.algo = ArAlgo::kQuantOneStep;
    else if (!parse_algo(algo, &t.algo, &p) || t.algo == ArAlgo::kAuto || t.algo == ArAlgo::kOneShotCE)
      throw UsageError("tuning table: unknown algorithm '" + algo + "' (oneshot-ce is run_symmetric only)", __FILE__,
                       __LINE__);
    table.push_back(t);
  }
  return table;
}

ArAlgo pick_from_table(const std::vector<TuningRow>& table, int world, DType dtype, Precision precision, size_t bytes) {
  for (const auto& t : table)
    if ((t.world == 0 || t.world == world) && (t.dtype == "*" || t.dtype == bench::dtype_name(dtype)) &&
        (t.precision == "*" || t.precision == precision_name(precision)) && bytes <= t.max_bytes)
      return t.algo;
  return ArAlgo::kAuto;
}

AllReducer::AllReducer(Team& team, AllReducerConfig cfg) : team_(team), cfg_(cfg) {
  BRAID_REQUIRE(cfg_.threads == 512, "AllReducer: kernels are built for 512 threads per block");
  // Tuning knobs for experiments (documented in docs/flash-communication.md).
  // Parsed strictly (braid/env.hpp): a malformed or out-of-range value is a UsageError naming the knob.
  constexpr int64_t kMaxBlocks = 1 << 16, kBig = int64_t(1) << 40;
  auto env_int = [](const char* name, int64_t lo, int64_t hi, auto& field) {
    if (const auto v = env::integer(name, lo, hi)) field = static_cast<std::remove_reference_t<decltype(field)>>(*v);
  };
  auto env_flag = [](const char* name, bool& field) {
    if (const auto v = env::flag(name)) field = *v;
  };
  env_int("BRAID_AR_QUANT_BLOCKS", 1, kMaxBlocks, cfg_.quant_blocks);
  env_int("BRAID_AR_TWOSHOT_BLOCKS", 1, kMaxBlocks, cfg_.twoshot_blocks);
  env_int("BRAID_AR_ONESHOT_BLOCKS", 1, kMaxBlocks, cfg_.oneshot_blocks);
  env_int("BRAID_AR_LL_BLOCKS", 1, kMaxBlocks, cfg_.ll_blocks);
  env_int("BRAID_AR_LL128_BLOCKS", 1, kMaxBlocks, cfg_.ll128_blocks);
  env_int("BRAID_AR_LL128_MIN_LINES", 1, kBig, cfg_.ll128_min_lines);
  if (const auto m = env::choice("BRAID_AR_SYMM_LAYOUT", {"blocked", "interleaved"})) cfg_.symm_interleaved = *m == "interleaved";
  if (const auto m = env::choice("BRAID_AR_SYMM_BATCH", {"none", "oneshot", "twoshot", "both"})) {
    cfg_.symm_pair_oneshot = *m == "oneshot" || *m == "both";
    cfg_.symm_pair_twoshot = *m == "twoshot" || *m == "both";
  }
  env_flag("BRAID_AR_QUANT_PAIR", cfg_.quant_pair_sources);
  env_flag("BRAID_AR_PDL", cfg_.pdl);
  env_flag("BRAID_AR_REMOTE_DOMAIN", cfg_.remote_domain);
  if (cfg_.pdl) {  // programmatic dependent launch is an sm_90 feature: a plain launch on older GPUs
    int dev = 0, major = 0;
    BRAID_CUDA_CHECK(cudaGetDevice(&dev));
    BRAID_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    cfg_.pdl = major >= 9;
  }
  if (cfg_.remote_domain) {  // memory synchronization domains: sm_90 and later (one domain before)
    int dev = 0, domains = 0;
    BRAID_CUDA_CHECK(cudaGetDevice(&dev));
    if (cudaDeviceGetAttribute(&domains, cudaDevAttrMemSyncDomainCount, dev) != cudaSuccess) {
      cudaGetLastError();
      domains = 1;
    }
    cfg_.remote_domain = domains > 1;
  }
  env_flag("BRAID_AR_QUANT_PREFETCH", cfg_.quant_prefetch);
  // The one-step knobs set both entries of their two-element arrays.
  auto env_int2 = [](const char* name, int64_t lo, int64_t hi, auto& pair) {
    if (const auto v = env::integer(name, lo, hi))
      pair[0] = pair[1] = static_cast<std::remove_reference_t<decltype(pair[0])>>(*v);
  };
  auto env_flag2 = [](const char* name, bool (&pair)[2]) {
    if (const auto v = env::flag(name)) pair[0] = pair[1] = *v;
  };
  env_int2("BRAID_AR_1STEP_ITERS", 0, 1 << 30, cfg_.onestep_step_iters);
  env_int("BRAID_AR_1STEP_LAG", 1, 1 << 20, cfg_.onestep_lag);
  env_int("BRAID_AR_1STEP_RU", 1, 4, cfg_.onestep_reduce_unroll);
  env_flag2("BRAID_AR_1STEP_WIDE", cfg_.onestep_wide_pull);
  env_flag2("BRAID_AR_1STEP_PULL16", cfg_.onestep_pull16);
  env_int2("BRAID_AR_1STEP_SPLIT", 0, 1 << 30, cfg_.onestep_split_iters);
  env_int2("BRAID_AR_1STEP_SPLIT_MIN", 0, kBig, cfg_.onestep_split_min_elems);
  env_int2("BRAID_AR_1STEP_SPLIT_PULLERS", 1, kMaxBlocks, cfg_.onestep_split_puller_every);
  env_int2("BRAID_AR_1STEP_TAPER", 0, 1 << 20, cfg_.onestep_split_taper);
  env_int2("BRAID_AR_1STEP_TAPER_ITERS", 1, 1 << 20, cfg_.onestep_split_taper_iters);
  env_int2("BRAID_AR_1STEP_TAPER_MIN", 0, kBig, cfg_.onestep_split_taper_min_elems);
  BRAID_REQUIRE(cfg_.onestep_split_taper[0] >= 0 && cfg_.onestep_split_taper[1] >= 0 &&
                    cfg_.onestep_split_taper_iters[0] >= 1 && cfg_.onestep_split_taper_iters[1] >= 1,
                "AllReducer: onestep_split_taper (BRAID_AR_1STEP_TAPER) must be >= 0, onestep_split_taper_iters "
                "(BRAID_AR_1STEP_TAPER_ITERS) >= 1");
  BRAID_REQUIRE(cfg_.onestep_split_iters[0] >= 0 && cfg_.onestep_split_iters[1] >= 0 &&
                    cfg_.onestep_split_puller_every[0] >= 1 && cfg_.onestep_split_puller_every[1] >= 1,
                "AllReducer: onestep_split_iters (BRAID_AR_1STEP_SPLIT) must be >= 0, onestep_split_puller_every "
                "(BRAID_AR_1STEP_SPLIT_PULLERS) >= 1");
  BRAID_REQUIRE(cfg_.onestep_step_iters[0] >= 0 && cfg_.onestep_step_iters[1] >= 0 && cfg_.onestep_lag >= 1 &&
                    (cfg_.onestep_reduce_unroll == 1 || cfg_.onestep_reduce_unroll == 2 ||
                     cfg_.onestep_reduce_unroll == 4),
                "AllReducer: onestep_step_iters (BRAID_AR_1STEP_ITERS) must be >= 0, onestep_lag (BRAID_AR_1STEP_LAG) "
                ">= 1, onestep_reduce_unroll (BRAID_AR_1STEP_RU) 1, 2 or 4");
  env_int("BRAID_AR_ONESHOT_MIN_VECS", 1, kBig, cfg_.oneshot_min_vecs);
  env_int("BRAID_AR_TWOSHOT_MIN_VECS", 1, kBig, cfg_.twoshot_min_vecs);
  env_int("BRAID_AR_LL_MIN_VECS", 1, kBig, cfg_.ll_min_vecs);
  env_int("BRAID_AR_CE_CHUNK_BYTES", 0, kBig, cfg_.ce_chunk_bytes);
  BRAID_REQUIRE(cfg_.ce_piece_elems >= ar::kVec, "AllReducer: ce_piece_elems must hold at least one vector");
  BRAID_REQUIRE(cfg_.oneshot_blocks > 0 && cfg_.twoshot_blocks > 0 && cfg_.quant_blocks > 0 && cfg_.ll_blocks > 0 &&
                    cfg_.ll128_blocks > 0,
                "AllReducer: block counts (BRAID_AR_*_BLOCKS) must be positive");
  BRAID_REQUIRE(cfg_.oneshot_min_vecs > 0 && cfg_.twoshot_min_vecs > 0 && cfg_.ll_min_vecs > 0 &&
                    cfg_.ll128_min_lines > 0,
                "AllReducer: minimum vectors per block (BRAID_AR_*_MIN_VECS, _LL128_MIN_LINES) must be positive");
  // Each launch of the LL kernels starts at a multiple of its piece: 16-byte pieces keep the vector loads aligned.
  BRAID_REQUIRE(cfg_.ll_max_bytes >= 16 && cfg_.ll_max_bytes % 16 == 0 && cfg_.ll128_max_bytes >= 16 &&
                    cfg_.ll128_max_bytes % 16 == 0,
                "AllReducer: ll_max_bytes and ll128_max_bytes must be positive multiples of 16");
  env_int("BRAID_AR_TWOSHOT_UNROLL", 0, 4, cfg_.twoshot_unroll);
  BRAID_REQUIRE(cfg_.twoshot_unroll == 0 || cfg_.twoshot_unroll == 1 || cfg_.twoshot_unroll == 2 ||
                    cfg_.twoshot_unroll == 4,
                "AllReducer: twoshot_unroll (BRAID_AR_TWOSHOT_UNROLL) must be 0 (by size), 1, 2 or 4");
  env_int("BRAID_AR_PIPE_BLOCKS", 1, kMaxBlocks, cfg_.quant_pipe_blocks);
  env_int("BRAID_AR_PIPE_MIN_ROUNDS", 1, 1 << 20, cfg_.quant_pipe_min_rounds);
  if (const char* e = std::getenv("BRAID_AR_QUANT_IMPL")) {
    if (!parse_quant_impl(e, &cfg_.quant_impl))
      throw UsageError(std::string("BRAID_AR_QUANT_IMPL must be classic or pipelined, not '") + e + "'", __FILE__,
                       __LINE__);
  }
  if (cfg_.quant_impl == QuantImpl::kDefault) cfg_.quant_impl = QuantImpl::kClassic;
  BRAID_REQUIRE(cfg_.quant_pipe_min_rounds >= 1, "AllReducer: quant_pipe_min_rounds must be >= 1");
  const int W = team.size();
  table_ = parse_tuning_table(kBuiltinTable);
  // Quantized slot: stride of the largest piece at the largest group, INT8 payload, metadata for the
  // smallest group (32).
  const uint64_t qstride = round_up((cfg_.piece_elems + W - 1) / W, 256);
  const uint64_t qmeta = round_up(qstride, 16);
  quant_slot_ = round_up(qmeta + qstride / 32 * 4, 256);
  nccl_slot_ = quant_slot_;
  BRAID_CUDA_CHECK(cudaMalloc(&nccl_send_, nccl_slot_ * W));
  BRAID_CUDA_CHECK(cudaMalloc(&nccl_recv_, nccl_slot_ * W));
  BRAID_CUDA_CHECK(cudaMalloc(&nccl_ag_, nccl_slot_ * (W + 1)));
  if (team.peer_ok()) {
    oneshot_slot_ = round_up(cfg_.oneshot_max_bytes, 256);
    ws_oneshot_ = std::make_unique<SymmetricBuffer>(team, 2 * W * oneshot_slot_);
    twoshot_slot_ = round_up(round_up((cfg_.piece_elems + W - 1) / W, ar::kVec) * 2, 256);
    ws_twoshot_ = std::make_unique<SymmetricBuffer>(team, 2 * 2 * W * twoshot_slot_);
    ws_quant_ = std::make_unique<SymmetricBuffer>(team, 2 * 2 * W * quant_slot_);
    // Every block of a launch must be resident at once (blocks wait on their peers' blocks), so the
    // grid never exceeds what the GPU holds at a time.
    int dev = 0, sms = 0, per_sm = 0;
    BRAID_CUDA_CHECK(cudaGetDevice(&dev));
    BRAID_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    BRAID_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, ar::oneshot_kernel<0>, cfg_.threads, 0));
    cfg_.oneshot_blocks = std::min(cfg_.oneshot_blocks, per_sm * sms);
    {  // every variant a launch may use must hold the whole grid
      std::vector<const void*> ks;
      if (cfg_.twoshot_unroll <= 1) ks.push_back(reinterpret_cast<const void*>(ar::twoshot_kernel<0, 1>));
      if (cfg_.twoshot_unroll == 2) ks.push_back(reinterpret_cast<const void*>(ar::twoshot_kernel<0, 2>));
      if (cfg_.twoshot_unroll == 4 || cfg_.twoshot_unroll == 0)
        ks.push_back(reinterpret_cast<const void*>(ar::twoshot_kernel<0, 4>));
      per_sm = 1 << 30;
      for (const void* k : ks) {
        int b = 0;
        BRAID_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, k, cfg_.threads, 0));
        per_sm = std::min(per_sm, b);
      }
    }
    cfg_.twoshot_blocks = std::min(cfg_.twoshot_blocks, per_sm * sms);
    {  // run_symmetric's kernels (they share the two-shot's slots, so at most twoshot_blocks)
      int m = 1 << 30;
      // only the variants this reducer launches (the paired-load ones use more registers)
      const bool p1 = cfg_.symm_pair_oneshot, p2 = cfg_.symm_pair_twoshot;
      for (const void* k : {p2 ? reinterpret_cast<const void*>(ar::symm_twoshot_kernel<0, 1, true>)
                               : reinterpret_cast<const void*>(ar::symm_twoshot_kernel<0, 1, false>),
                            p2 ? reinterpret_cast<const void*>(ar::symm_twoshot_kernel<0, 4, true>)
                               : reinterpret_cast<const void*>(ar::symm_twoshot_kernel<0, 4, false>),
                            p1 ? reinterpret_cast<const void*>(ar::symm_oneshot_kernel<0, 1, true>)
                               : reinterpret_cast<const void*>(ar::symm_oneshot_kernel<0, 1, false>),
                            p1 ? reinterpret_cast<const void*>(ar::symm_oneshot_kernel<0, 4, true>)
                               : reinterpret_cast<const void*>(ar::symm_oneshot_kernel<0, 4, false>)}) {
        int b = 0;
        BRAID_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, k, cfg_.threads, 0));
        m = std::min(m, b);
      }
      symm_blocks_ = std::min(cfg_.twoshot_blocks, m * sms);
      BRAID_REQUIRE(symm_blocks_ > 0, "AllReducer: the symmetric-buffer kernels do not fit on this GPU");
    }
    int q = per_sm;
    BRAID_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, ar::quant_allreduce_kernel<0, 4, 4, 32>,
                                                                 cfg_.threads, 0));
    BRAID_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&q, ar::quant_allreduce_kernel<1, 8, 8, 256>,
                                                                 cfg_.threads, 0));
    cfg_.quant_blocks = std::min(cfg_.quant_blocks, std::min(per_sm, q) * sms);
    BRAID_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &per_sm, ar::pipe::quant_pipelined_kernel<0, 4, 4, 32>, ar::pipe::config::kThreads, 0));
    BRAID_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &q, ar::pipe::quant_pipelined_kernel<1, 8, 8, 256>, ar::pipe::config::kThreads, 0));
    cfg_.quant_pipe_blocks = std::min(cfg_.quant_pipe_blocks, std::min(per_sm, q) * sms);
    BRAID_REQUIRE(cfg_.oneshot_blocks > 0 && cfg_.twoshot_blocks > 0 && cfg_.quant_blocks > 0 &&
                      cfg_.quant_pipe_blocks > 0,
                  "AllReducer: kernels do not fit on this GPU");
    BRAID_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, ar::oneshot_ll_kernel<0>, cfg_.threads, 0));
    cfg_.ll_blocks = std::min(cfg_.ll_blocks, per_sm * sms);
    BRAID_CUDA_CHECK(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, ar::oneshot_ll128_kernel<0>, cfg_.threads, 0));
    cfg_.ll128_blocks = std::min(cfg_.ll128_blocks, per_sm * sms);
    BRAID_CUDA_CHECK(cudaMalloc(&seq_, 5 * 2 * sizeof(uint32_t)));
    BRAID_CUDA_CHECK(cudaMemset(seq_, 0, 5 * 2 * sizeof(uint32_t)));
    {  // the split one-step kernel: counters, and a flag per unit (units of >= 4096 elements) per source
      BRAID_CUDA_CHECK(cudaMalloc(&split_ctl_, (ar::kSplitSms + 3) * sizeof(uint32_t)));
      BRAID_CUDA_CHECK(cudaMemset(split_ctl_, 0, (ar::kSplitSms + 3) * sizeof(uint32_t)));
      const uint64_t max_units = uint64_t(W) * (qstride / (uint64_t(cfg_.threads) * ar::kVec) + 1);
      ws_split_ = std::make_unique<SymmetricBuffer>(team, max_units * kMaxPeers * sizeof(uint32_t));
      BRAID_CUDA_CHECK(cudaMemset(ws_split_->local(), 0, ws_split_->bytes()));
      BRAID_CUDA_CHECK(cudaDeviceSynchronize());
      team.barrier();  // zeroed everywhere before any peer's kernel can raise a flag here
    }
    ll_slot_ = round_up(2 * cfg_.ll_max_bytes, 256);
    ws_ll_ = std::make_unique<SymmetricBuffer>(team, 2 * W * ll_slot_);
    BRAID_CUDA_CHECK(cudaMemset(ws_ll_->local(), 0, ws_ll_->bytes()));  // epochs start at 1
    {  // LL128: 128-byte lines of 60 values, per peer and phase
      const uint64_t piece = cfg_.ll128_max_bytes / 2;
      ll128_slot_ = round_up((piece + ar::kLL128Vals - 1) / ar::kLL128Vals * 128, 256);
      ws_ll128_ = std::make_unique<SymmetricBuffer>(team, 2 * W * ll128_slot_);
      BRAID_CUDA_CHECK(cudaMemset(ws_ll128_->local(), 0, ws_ll128_->bytes()));  // epochs start at 1
    }
    BRAID_CUDA_CHECK(cudaDeviceSynchronize());
    team.barrier();
    BRAID_CUDA_CHECK(cudaStreamCreateWithFlags(&ce_stream_, cudaStreamNonBlocking));
    ce_events_.resize(kMaxCeChunks + 2);
    for (auto& e : ce_events_) BRAID_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    slot_oneshot_ = team.reserve_slots(cfg_.oneshot_blocks);
    slot_twoshot_ = team.reserve_slots(cfg_.twoshot_blocks);
    // Both fused quantized kernels use these slots (block b: slot_quant_ + b); their epochs share the
    // device counter of each slot, so they may alternate.
    slot_quant_ = team.reserve_slots(std::max(cfg_.quant_blocks, cfg_.quant_pipe_blocks));
  }
}

AllReducer::~AllReducer() {
  cudaFree(nccl_send_);
  cudaFree(nccl_recv_);
  cudaFree(nccl_ag_);
  if (seq_) cudaFree(seq_);
  if (prof_) cudaFree(prof_);
  if (split_ctl_) cudaFree(split_ctl_);
  for (auto e : ce_events_) cudaEventDestroy(e);
  if (ce_stream_) cudaStreamDestroy(ce_stream_);
  if (ce_stage_) cudaFree(ce_stage_);
}

void AllReducer::set_onestep_profile(bool on) {
  if (on && !prof_) {
    const int most = std::max(cfg_.quant_blocks, 1);
    BRAID_CUDA_CHECK(cudaMalloc(&prof_, size_t(4) * most * sizeof(uint64_t)));
    BRAID_CUDA_CHECK(cudaMemset(prof_, 0, size_t(4) * most * sizeof(uint64_t)));
  } else if (!on && prof_) {
    BRAID_CUDA_CHECK(cudaDeviceSynchronize());
    BRAID_CUDA_CHECK(cudaFree(prof_));
    prof_ = nullptr;
  }
  prof_blocks_ = 0;
}

std::vector<uint64_t> AllReducer::onestep_profile() const {
  std::vector<uint64_t> v(size_t(4) * prof_blocks_);
  if (!prof_ || v.empty()) return v;
  BRAID_CUDA_CHECK(cudaDeviceSynchronize());
  BRAID_CUDA_CHECK(cudaMemcpy(v.data(), prof_, v.size() * sizeof(uint64_t), cudaMemcpyDeviceToHost));
  return v;
}

namespace {
// Blocks for a launch: enough that each has at least `min_per_block` units of work, at most `max_blocks`.
int grid_for(uint64_t units, uint64_t min_per_block, int max_blocks) {
  const uint64_t b = (units + min_per_block - 1) / min_per_block;
  return static_cast<int>(std::max<uint64_t>(1, std::min<uint64_t>(b, max_blocks)));
}

// kernel<<<grid, block, 0, s>>>(args...) with the launch attributes `a` asks for: programmatic stream
// serialization (a.pdl; the kernel calls dev::grid_dependency_wait() before it touches memory) and the remote
// memory synchronization domain (a.remote_domain, as NCCL's kernels: fences in this kernel and in the default
// domain's kernels do not wait for each other's traffic; braid's kernels meet other kernels of their GPU only across
// kernel boundaries and meet their peers at system scope, which both domains keep).
struct LaunchAttrs {
  bool pdl = false;
  bool remote_domain = false;
};
LaunchAttrs attrs_of(const AllReducerConfig& c) { return {c.pdl, c.remote_domain}; }
template <class... KArgs, class... Args>
void launch_kernel(LaunchAttrs a, void (*kernel)(KArgs...), int grid, int block, cudaStream_t s, Args&&... args) {
  if (!a.pdl && !a.remote_domain) {
    kernel<<<grid, block, 0, s>>>(std::forward<Args>(args)...);
    return;
  }
  cudaLaunchAttribute attr[2]{};
  unsigned n = 0;
  if (a.pdl) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (a.remote_domain) {
    attr[n].id = cudaLaunchAttributeMemSyncDomain;
    attr[n++].val.memSyncDomain = cudaLaunchMemSyncDomainRemote;
  }
  cudaLaunchConfig_t c{};
  c.gridDim = dim3(grid);
  c.blockDim = dim3(block);
  c.stream = s;
  c.attrs = attr;
  c.numAttrs = n;
  BRAID_CUDA_CHECK(cudaLaunchKernelEx(&c, kernel, std::forward<Args>(args)...));
}
}  // namespace

ArAlgo AllReducer::choose(size_t count, DType dtype, const AllReduceOptions& opt) const {
  ArAlgo a = opt.algo;
  const size_t bytes = count * bench::dtype_size(dtype);
  if (a == ArAlgo::kAuto) {
    a = pick_from_table(table_, team_.size(), dtype, opt.precision, bytes);
    if (a == ArAlgo::kAuto) a = opt.precision == Precision::kExact ? ArAlgo::kNccl : ArAlgo::kQuantP2P;
    // A table's one-step row is a choice among algorithms of the requested precision: where the one-step
    // cannot run (no peer access), the two-step of the same precision runs instead. (Asked for by
    // name, the one-step is never replaced: see below.)
    if (a == ArAlgo::kQuantOneStep && !team_.peer_ok()) a = ArAlgo::kQuantP2P;
  }
  // Never change precision behind the caller's back; fall back on transport only.
  const bool quant = opt.precision != Precision::kExact;
  const bool quant_algo = a == ArAlgo::kQuantP2P || a == ArAlgo::kQuantNccl || a == ArAlgo::kQuantOneStep;
  if (quant && !quant_algo) a = ArAlgo::kQuantP2P;
  if (!quant && quant_algo)
    throw UsageError("a quantized algorithm was requested with exact precision", __FILE__, __LINE__);
  // Asked for by name, the one-step is never replaced silently (INT8/INT4: a different algorithm, its own error)
  if (a == ArAlgo::kQuantOneStep) {
    if (!team_.peer_ok())
      throw UsageError("the one-step quantized all-reduce needs peer access (" + team_.peer_status() + ")", __FILE__,
                       __LINE__);
  }
  if (a == ArAlgo::kOneShotCE)
    throw UsageError("oneshot-ce reads the peers' copies of the input: AllReducer::run_symmetric only", __FILE__,
                     __LINE__);
  if (!team_.peer_ok()) {
    if (a == ArAlgo::kQuantP2P) a = ArAlgo::kQuantNccl;
    if (a == ArAlgo::kOneShot || a == ArAlgo::kOneShotLL || a == ArAlgo::kOneShotLL128 || a == ArAlgo::kTwoShot)
      a = ArAlgo::kNccl;
  }
  if (dtype == DType::kFP32 && a != ArAlgo::kNccl)
    throw UsageError("fp32 all-reduce is NCCL only (braid's kernels take bf16/fp16)", __FILE__, __LINE__);
  return a;
}

void AllReducer::run(const void* in, void* out, size_t count, DType dtype, cudaStream_t s,
                     const AllReduceOptions& opt) {
  if (count == 0) return;
  if (opt.debug_check_counts) {
    unsigned long long c = count, mn = 0, mx = 0;
    BRAID_MPI_CHECK(MPI_Allreduce(&c, &mn, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, team_.mpi()));
    BRAID_MPI_CHECK(MPI_Allreduce(&c, &mx, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, team_.mpi()));
    if (mn != mx)
      throw UsageError("all-reduce: ranks passed different counts (" + std::to_string(mn) + " .. " +
                           std::to_string(mx) + ")",
                       __FILE__, __LINE__);
  }
  const ArAlgo a = choose(count, dtype, opt);
  if (a != ArAlgo::kNccl) {
    if ((reinterpret_cast<uintptr_t>(in) | reinterpret_cast<uintptr_t>(out)) % 16 != 0)
      throw UsageError("all-reduce: input and output must be 16-byte aligned", __FILE__, __LINE__);
  }
  switch (a) {
    case ArAlgo::kNccl:
      BRAID_NCCL_CHECK(ncclAllReduce(in, out, count, bench::nccl_dtype(dtype), ncclSum, team_.nccl(), s));
      return;
    case ArAlgo::kOneShot: run_oneshot(in, out, count, dtype, s); return;
    case ArAlgo::kOneShotLL: run_oneshot_ll(in, out, count, dtype, s); return;
    case ArAlgo::kOneShotLL128: run_oneshot_ll128(in, out, count, dtype, s); return;
    case ArAlgo::kTwoShot: run_twoshot(in, out, count, dtype, s); return;
    case ArAlgo::kQuantP2P:
    case ArAlgo::kQuantNccl: {
      int b1, b2;
      bits_of(opt.precision, &b1, &b2);
      if (a == ArAlgo::kQuantP2P)
        run_quant_p2p(in, out, count, dtype, s, b1, b2, opt.group,
                      opt.quant_impl == QuantImpl::kDefault ? cfg_.quant_impl : opt.quant_impl);
      else run_quant_nccl(in, out, count, dtype, s, b1, b2, opt.group, opt.quant_phases);
      return;
    }
    case ArAlgo::kQuantOneStep: {  // INT6: INT4 codes exchanged once, step 2 on every rank (two-step's bits)
      int b1, b2;
      bits_of(opt.precision, &b1, &b2);
      run_quant_p2p(in, out, count, dtype, s, b1, b2, opt.group, QuantImpl::kClassic, /*one_step=*/true);
      return;
    }
    case ArAlgo::kAuto:
    case ArAlgo::kOneShotCE: break;
  }
  throw UsageError("all-reduce: no algorithm", __FILE__, __LINE__);
}

void AllReducer::run_oneshot(const void* in, void* out, size_t count, DType dtype, cudaStream_t s) {
  const int W = team_.size();
  ar::ExactWorkspace ws{};
  for (int r = 0; r < W; ++r) ws.base[r] = ws_oneshot_->peer_as<uint8_t>(r);
  ws.slot_bytes = oneshot_slot_;
  const size_t piece = oneshot_slot_ / 2;
  for (size_t off = 0; off < count; off += piece) {
    const size_t n = std::min(piece, count - off);
    const auto* x = static_cast<const uint16_t*>(in) + off;
    auto* y = static_cast<uint16_t*>(out) + off;
    const int blocks = grid_for((n + ar::kVec - 1) / ar::kVec, cfg_.oneshot_min_vecs, cfg_.oneshot_blocks);
    BRAID_DISPATCH_DT(dtype, DT,
                      launch_kernel(attrs_of(cfg_), ar::oneshot_kernel<DT>, blocks, cfg_.threads, s, x, y, uint64_t(n),
                                    W, team_.rank(), ws, team_.signals(), slot_oneshot_, seq_));
    BRAID_CHECK_LAUNCH();
  }
}

namespace {
// The flag-in-the-data one-shots (LL, LL128): every rank's workspace base and the slot size, then one launch per
// piece of at most `piece` elements: launch(ws, offset, elements).
template <class Launch>
void for_each_piece(SymmetricBuffer& buf, size_t slot_bytes, int world, size_t count, size_t piece, Launch launch) {
  ar::ExactWorkspace ws{};
  for (int r = 0; r < world; ++r) ws.base[r] = buf.peer_as<uint8_t>(r);
  ws.slot_bytes = slot_bytes;
  for (size_t off = 0; off < count; off += piece) {
    launch(ws, off, std::min(piece, count - off));
    BRAID_CHECK_LAUNCH();
  }
}
}  // namespace

void AllReducer::run_oneshot_ll(const void* in, void* out, size_t count, DType dtype, cudaStream_t s) {
  const int W = team_.size();
  for_each_piece(*ws_ll_, ll_slot_, W, count, cfg_.ll_max_bytes / 2,
                 [&](const ar::ExactWorkspace& ws, size_t off, size_t n) {
                   const int blocks = grid_for((n + ar::kVec - 1) / ar::kVec, cfg_.ll_min_vecs, cfg_.ll_blocks);
                   BRAID_DISPATCH_DT(dtype, DT,
                                     launch_kernel(attrs_of(cfg_), ar::oneshot_ll_kernel<DT>, blocks, cfg_.threads, s,
                                                   static_cast<const uint16_t*>(in) + off,
                                                   static_cast<uint16_t*>(out) + off, uint64_t(n), W, team_.rank(), ws,
                                                   team_.signals(), seq_ + 6));
                 });
}

void AllReducer::run_oneshot_ll128(const void* in, void* out, size_t count, DType dtype, cudaStream_t s) {
  const int W = team_.size();
  for_each_piece(*ws_ll128_, ll128_slot_, W, count, cfg_.ll128_max_bytes / 2,
                 [&](const ar::ExactWorkspace& ws, size_t off, size_t n) {
                   const uint64_t lines = (n + ar::kLL128Vals - 1) / ar::kLL128Vals;
                   const int blocks = grid_for(lines, std::max<uint64_t>(cfg_.ll128_min_lines, 1), cfg_.ll128_blocks);
                   BRAID_DISPATCH_DT(
                       dtype, DT,
                       launch_kernel(attrs_of(cfg_), ar::oneshot_ll128_kernel<DT>, blocks, cfg_.threads, s,
                                     static_cast<const uint16_t*>(in) + off, static_cast<uint16_t*>(out) + off,
                                     uint64_t(n), W, team_.rank(), ws, team_.signals(), seq_ + 8));
                 });
}

void AllReducer::run_twoshot(const void* in, void* out, size_t count, DType dtype, cudaStream_t s) {
  const int W = team_.size();
  ar::ExactWorkspace ws{};
  for (int r = 0; r < W; ++r) ws.base[r] = ws_twoshot_->peer_as<uint8_t>(r);
  ws.slot_bytes = twoshot_slot_;
  for (size_t off = 0; off < count; off += cfg_.piece_elems) {
    const size_t n = std::min(cfg_.piece_elems, count - off);
    const uint64_t stride = round_up((n + W - 1) / W, ar::kVec);
    const auto* x = static_cast<const uint16_t*>(in) + off;
    auto* y = static_cast<uint16_t*>(out) + off;
    const int blocks = grid_for(stride / ar::kVec, cfg_.twoshot_min_vecs, cfg_.twoshot_blocks);
    constexpr size_t kUnrollFrom = size_t(2) << 20;  // elements per launch from which U = 4 (AllReducerConfig)
    const int U = cfg_.twoshot_unroll ? cfg_.twoshot_unroll : (n >= kUnrollFrom ? 4 : 1);
    BRAID_DISPATCH_DT(dtype, DT, {
      auto k = U == 4 ? ar::twoshot_kernel<DT, 4> : U == 2 ? ar::twoshot_kernel<DT, 2> : ar::twoshot_kernel<DT, 1>;
      launch_kernel(attrs_of(cfg_), k, blocks, cfg_.threads, s, x, y, uint64_t(n), uint64_t(stride), W, team_.rank(),
                    ws, team_.signals(), slot_twoshot_, seq_ + 2);
    });
    BRAID_CHECK_LAUNCH();
  }
}

void AllReducer::run_symmetric(SymmetricBuffer& buf, size_t count, DType dtype, cudaStream_t s, ArAlgo algo,
                               void* out, size_t offset) {
  BRAID_REQUIRE(team_.peer_ok() && ws_twoshot_, "run_symmetric: needs peer access between all ranks");
  BRAID_REQUIRE(dtype == DType::kBF16 || dtype == DType::kFP16, "run_symmetric: bf16 or fp16");
  BRAID_REQUIRE(offset % ar::kVec == 0, "run_symmetric: offset must be a multiple of 8 elements");
  BRAID_REQUIRE(offset <= buf.bytes() / 2 && count <= buf.bytes() / 2 - offset,
                "run_symmetric: offset + count exceeds the symmetric buffer");
  if (algo == ArAlgo::kAuto)
    algo = out && out != buf.local_as<uint16_t>() + offset ? ArAlgo::kOneShot : ArAlgo::kTwoShot;
  BRAID_REQUIRE(algo == ArAlgo::kOneShot || algo == ArAlgo::kTwoShot || algo == ArAlgo::kOneShotCE,
                "run_symmetric: one-shot, two-shot or one-shot by copy engines");
  const bool one = algo != ArAlgo::kTwoShot;
  if (one) {
    BRAID_REQUIRE(out != nullptr, "run_symmetric: one-shot writes `out` (a local buffer outside buf)");
    const auto o = reinterpret_cast<uintptr_t>(out), l = reinterpret_cast<uintptr_t>(buf.local());
    BRAID_REQUIRE(o + count * 2 <= l || o >= l + buf.bytes(), "run_symmetric: `out` overlaps the symmetric buffer");
    BRAID_REQUIRE(o % 16 == 0, "run_symmetric: `out` must be 16-byte aligned");
  }
  if (count == 0) return;
  if (algo == ArAlgo::kOneShotCE) {
    run_symmetric_ce(buf, count, dtype, s, static_cast<uint16_t*>(out), offset);
    return;
  }
  const int W = team_.size();
  ar::PeerBufs b{};
  for (int r = 0; r < W; ++r) b.p[r] = buf.peer_as<uint16_t>(r) + offset;
  const int il = cfg_.symm_interleaved ? 1 : 0;
  const bool big = count >= (size_t(2) << 20);  // U = 4 vectors per thread per iteration from 2 Mi elements
  if (algo == ArAlgo::kOneShot) {
    const bool pb = cfg_.symm_pair_oneshot;
    const uint64_t vecs = (count + ar::kVec - 1) / ar::kVec;
    const int blocks = grid_for(vecs, cfg_.oneshot_min_vecs, symm_blocks_);
    auto* o = static_cast<uint16_t*>(out);
    const SignalView sig = team_.signals();
    BRAID_DISPATCH_DT(dtype, DT, {
      auto k = big ? (pb ? ar::symm_oneshot_kernel<DT, 4, true> : ar::symm_oneshot_kernel<DT, 4, false>)
                   : (pb ? ar::symm_oneshot_kernel<DT, 1, true> : ar::symm_oneshot_kernel<DT, 1, false>);
      launch_kernel(attrs_of(cfg_), k, blocks, cfg_.threads, s, b, o, uint64_t(count), W, sig, slot_twoshot_, il);
    });
  } else {
    BRAID_REQUIRE(out == nullptr || out == buf.local_as<uint16_t>() + offset,
                  "run_symmetric: two-shot is in place (out null, or the slice itself)");
    const uint64_t stride = round_up((count + W - 1) / W, ar::kVec);
    const int blocks = grid_for(stride / ar::kVec, cfg_.twoshot_min_vecs, symm_blocks_);
    const SignalView sig = team_.signals();
    const bool pb = cfg_.symm_pair_twoshot;
    BRAID_DISPATCH_DT(dtype, DT, {
      auto k = big ? (pb ? ar::symm_twoshot_kernel<DT, 4, true> : ar::symm_twoshot_kernel<DT, 4, false>)
                   : (pb ? ar::symm_twoshot_kernel<DT, 1, true> : ar::symm_twoshot_kernel<DT, 1, false>);
      launch_kernel(attrs_of(cfg_), k, blocks, cfg_.threads, s, b, uint64_t(count), uint64_t(stride), W, team_.rank(),
                    sig, slot_twoshot_, il);
    });
  }
  BRAID_CHECK_LAUNCH();
}

void AllReducer::run_symmetric_ce(SymmetricBuffer& buf, size_t count, DType dtype, cudaStream_t s, uint16_t* out,
                                  size_t offset) {
  const int W = team_.size(), me = team_.rank();
  constexpr size_t kEs = 2;  // bf16 / fp16
  size_t piece = count;      // W = 2: the peer's copy lands in `out`, no staging, one piece
  // W > 2: peer j's values of a piece land at ce_stage_ + (j - 2) x pstride. The stride and every piece
  // start are whole 16-byte vectors (sum_local_kernel loads 8 elements at a time): a stride of `piece`
  // elements put peer 3's copy of a 1-element all-reduce at byte 2 (misaligned address at 4 ranks).
  const size_t pstride = round_up(cfg_.ce_piece_elems, ar::kVec);
  if (W > 2) {
    if (!ce_stage_) {  // allocated once; cudaMalloc cannot be captured
      cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
      BRAID_CUDA_CHECK(cudaStreamIsCapturing(s, &st));
      BRAID_REQUIRE(st == cudaStreamCaptureStatusNone,
                    "run_symmetric(oneshot-ce): the first call at more than 2 ranks allocates its staging buffer "
                    "and cannot be captured in a CUDA graph; make one call before capturing");
      BRAID_CUDA_CHECK(cudaMalloc(&ce_stage_, size_t(W - 2) * pstride * kEs));
    }
    piece = std::min(count, pstride);
  }
  const int max_blocks = std::max(1, symm_blocks_);  // the add kernels stride, so any grid works
  const int slot = slot_twoshot_;  // block 0's slot of the symmetric kernels (same call order on every rank)
  ar::symm_barrier_kernel<<<1, 32, 0, s>>>(team_.signals(), slot);
  BRAID_CHECK_LAUNCH();
  cudaEvent_t fork = ce_events_[0], join = ce_events_[kMaxCeChunks + 1];
  for (size_t off = 0; off < count; off += piece) {
    const size_t n = std::min(piece, count - off);
    // Chunk: configured, or n / 8 between 1 and 16 MiB; at most kMaxCeChunks per piece; a multiple of 8.
    size_t chunk = cfg_.ce_chunk_bytes ? cfg_.ce_chunk_bytes / kEs
                                       : std::clamp(n / 8, (size_t(1) << 20) / kEs, (size_t(16) << 20) / kEs);
    chunk = std::max<size_t>(chunk, (n + kMaxCeChunks - 1) / kMaxCeChunks);
    chunk = round_up(std::max<size_t>(chunk, 1), ar::kVec);
    const int chunks = static_cast<int>((n + chunk - 1) / chunk);
    // The side stream starts after the barrier (first piece) or after the previous piece's adds (W > 2
    // reuses the staging buffer).
    BRAID_CUDA_CHECK(cudaEventRecord(fork, s));
    BRAID_CUDA_CHECK(cudaStreamWaitEvent(ce_stream_, fork, 0));
    auto dst = [&](int j, size_t c0) {  // where peer (me + j) % W's values [off + c0, ...) land
      return j == 1 ? out + off + c0 : static_cast<uint16_t*>(ce_stage_) + size_t(j - 2) * pstride + c0;
    };
    for (int c = 0; c < chunks; ++c) {
      const size_t c0 = size_t(c) * chunk, len = std::min(chunk, n - c0);
      for (int j = 1; j < W; ++j)
        BRAID_CUDA_CHECK(cudaMemcpyAsync(dst(j, c0), buf.peer_as<uint16_t>((me + j) % W) + offset + off + c0,
                                         len * kEs, cudaMemcpyDeviceToDevice, ce_stream_));
      BRAID_CUDA_CHECK(cudaEventRecord(ce_events_[1 + c], ce_stream_));
    }
    if (off + piece >= count) {  // after the last copy: nobody returns while a peer still reads its copy
      ar::symm_barrier_kernel<<<1, 32, 0, ce_stream_>>>(team_.signals(), slot);
      BRAID_CHECK_LAUNCH();
      BRAID_CUDA_CHECK(cudaEventRecord(join, ce_stream_));
    }
    for (int c = 0; c < chunks; ++c) {
      const size_t c0 = size_t(c) * chunk, len = std::min(chunk, n - c0);
      ar::LocalSrcs src{};
      for (int r = 0; r < W; ++r) {
        const int j = (r - me + W) % W;
        src.p[r] = j == 0 ? buf.local_as<uint16_t>() + offset + off + c0 : dst(j, c0);
      }
      BRAID_CUDA_CHECK(cudaStreamWaitEvent(s, ce_events_[1 + c], 0));
      const int blocks = grid_for((len + ar::kVec - 1) / ar::kVec, 4 * 512, max_blocks);
      BRAID_DISPATCH_DT(dtype, DT, (ar::sum_local_kernel<DT, 4><<<blocks, cfg_.threads, 0, s>>>(
                                       src, out + off + c0, len, W)));
      BRAID_CHECK_LAUNCH();
    }
  }
  BRAID_CUDA_CHECK(cudaStreamWaitEvent(s, join, 0));
}

void AllReducer::run_quant_p2p(const void* in, void* out, size_t count, DType dtype, cudaStream_t s, int b1, int b2,
                               int group, QuantImpl impl, bool one_step) {
  const int W = team_.size();
  ar::QuantWorkspace ws{};
  for (int r = 0; r < W; ++r) ws.base[r] = ws_quant_->peer_as<uint8_t>(r);
  ws.slot_bytes = quant_slot_;
  const uint64_t meta = round_up(round_up((cfg_.piece_elems + W - 1) / W, 256), 16);
  for (size_t off = 0; off < count; off += cfg_.piece_elems) {
    const size_t n = std::min(cfg_.piece_elems, count - off);
    ar::QuantGeom q{n, quant::chunk_stride(n, W, group), W, team_.rank(), meta, meta, cfg_.quant_pair_sources ? 1 : 0,
                    cfg_.quant_prefetch ? 1 : 0};
    const auto* x = static_cast<const uint16_t*>(in) + off;
    auto* y = static_cast<uint16_t*>(out) + off;
    if (one_step) {  // kQuantOneStep: same workspace, slots and launch counter
      const int blocks = grid_for(q.stride / group, cfg_.quant_min_groups, cfg_.quant_blocks);
      const int wi = b1 == 8 ? 0 : 1;  // per-width knobs (INT6: INT4's)
      const int iters = cfg_.onestep_step_iters[wi];
      const bool wide = cfg_.onestep_wide_pull[wi];
      // INT6 (b1 = 4, b2 = 8): INT4's split kernel (16-value pull) where INT4 takes it, else the flat kernel
      // with the 8-value pull; either ends its pull with step 2
      const bool int6 = b1 != b2;
      if (const int split = cfg_.onestep_split_iters[wi]; split > 0 && n >= cfg_.onestep_split_min_elems[wi]) {
        ar::SplitState st{};
        st.ctl = split_ctl_;
        for (int r = 0; r < W; ++r) st.flags[r] = ws_split_->peer_as<uint32_t>(r);
        const int unit_groups = split * cfg_.threads * ar::kVec / group;
        BRAID_REQUIRE(unit_groups >= 1, "AllReducer: onestep_split_iters too small for the group size");
        // Tapered head and tail units: at least one iteration each (the flag table holds one unit per
        // iteration and chunk, plus one), at most a middle unit.
        const int taper = n >= cfg_.onestep_split_taper_min_elems[wi] ? cfg_.onestep_split_taper[wi] : 0;
        const int taper_groups =
            std::max(1, std::min(cfg_.onestep_split_taper_iters[wi], split) * cfg_.threads * ar::kVec / group);
        auto go = [&](auto bits_c, auto pm_c) {
          constexpr int BITS = decltype(bits_c)::value;
          constexpr int PM = decltype(pm_c)::value;
          BRAID_DISPATCH_DT(
              dtype, DT,
              BRAID_DISPATCH_GROUP(
                  group, G,
                  (launch_kernel(attrs_of(cfg_), ar::quant_onestep_split_kernel<DT, BITS, G, PM>, cfg_.quant_blocks,
                                 cfg_.threads, s, x, y, q, ws, team_.signals(), st, seq_ + 4, unit_groups,
                                 cfg_.onestep_split_puller_every[wi], taper, taper_groups, prof_))));
        };
        auto by_pull = [&](auto bits_c) {
          if (cfg_.onestep_pull16[wi])
            go(bits_c, std::integral_constant<int, ar::kPull16>{});
          else if (wide)
            go(bits_c, std::integral_constant<int, ar::kPullWide>{});
          else
            go(bits_c, std::integral_constant<int, ar::kPull8>{});
        };
        if (int6) {
          BRAID_DISPATCH_DT(
              dtype, DT,
              BRAID_DISPATCH_GROUP(
                  group, G,
                  (launch_kernel(attrs_of(cfg_), ar::quant_onestep_split_kernel<DT, 4, G, ar::kPull16, 8>,
                                 cfg_.quant_blocks, cfg_.threads, s, x, y, q, ws, team_.signals(), st, seq_ + 4,
                                 unit_groups, cfg_.onestep_split_puller_every[wi], taper, taper_groups, prof_))));
        } else if (b1 == 8) {
          by_pull(std::integral_constant<int, 8>{});
        } else {
          by_pull(std::integral_constant<int, 4>{});
        }
        BRAID_CHECK_LAUNCH();
        if (prof_) prof_blocks_ = cfg_.quant_blocks;
        continue;
      }
      // One kernel per (width, pull mapping) for INT8/INT4; INT6 takes the flat kernel with step 2 (below).
      auto launch = [&](auto bits_c, auto pull_c) {
        constexpr int BITS = decltype(bits_c)::value, PULL = decltype(pull_c)::value;
        if (iters > 0) {
          BRAID_DISPATCH_DT(dtype, DT, BRAID_DISPATCH_GROUP(group, G, (
              ar::quant_onestep_pipe_kernel<DT, BITS, G, PULL><<<blocks, cfg_.threads, 0, s>>>(
                  x, y, q, ws, team_.signals(), slot_quant_, seq_ + 4, iters, cfg_.onestep_lag, prof_))));
        } else if constexpr (PULL <= 1) {  // the flat kernel has no unrolled 8-value pull
          BRAID_DISPATCH_DT(dtype, DT, BRAID_DISPATCH_GROUP(group, G, (
              ar::quant_onestep_kernel<DT, BITS, G, PULL == 0><<<blocks, cfg_.threads, 0, s>>>(
                  x, y, q, ws, team_.signals(), slot_quant_, seq_ + 4, prof_))));
        }
      };
      if (int6) {
        BRAID_DISPATCH_DT(dtype, DT, BRAID_DISPATCH_GROUP(group, G, (
            ar::quant_onestep_kernel<DT, 4, G, false, 8><<<blocks, cfg_.threads, 0, s>>>(
                x, y, q, ws, team_.signals(), slot_quant_, seq_ + 4, prof_))));
        BRAID_CHECK_LAUNCH();
        if (prof_) prof_blocks_ = blocks;
        continue;
      }
      auto by_pull = [&](auto bits_c) {
        if (wide) launch(bits_c, std::integral_constant<int, 0>{});
        else if (iters > 0 && cfg_.onestep_reduce_unroll == 2) launch(bits_c, std::integral_constant<int, 2>{});
        else if (iters > 0 && cfg_.onestep_reduce_unroll == 4) launch(bits_c, std::integral_constant<int, 4>{});
        else launch(bits_c, std::integral_constant<int, 1>{});
      };
      if (prof_) prof_blocks_ = blocks;
      if (b1 == 8) by_pull(std::integral_constant<int, 8>{});
      else by_pull(std::integral_constant<int, 4>{});
      BRAID_CHECK_LAUNCH();
      continue;
    }
    // The pipelined kernel is out-of-place only: in place it returned wrong elements on 2x H200 at
    // n = 2^20 (a rank's output chunk overwritten while a peer still reads its input; not yet fixed,
    // docs/flash-communication.md), so in-place calls take the classic kernel.
    if (impl == QuantImpl::kPipelined && x != y) {
      // Each block gets at least quant_pipe_min_rounds sub-rounds (kRoundElems / group groups each).
      const uint64_t round_groups = ar::pipe::config::kRoundElems / group;
      const int blocks = grid_for(q.stride / group, round_groups * cfg_.quant_pipe_min_rounds, cfg_.quant_pipe_blocks);
      BRAID_DISPATCH_DT(dtype, DT, BRAID_DISPATCH_BITS(b1, b2, B1, B2, BRAID_DISPATCH_GROUP(group, G, (
          ar::pipe::quant_pipelined_kernel<DT, B1, B2, G><<<blocks, ar::pipe::config::kThreads, 0, s>>>(
              x, y, q, ws, team_.signals(), slot_quant_, seq_ + 4)))));
      BRAID_CHECK_LAUNCH();
      continue;
    }
    const int blocks = grid_for(q.stride / group, cfg_.quant_min_groups, cfg_.quant_blocks);
    BRAID_DISPATCH_DT(dtype, DT, BRAID_DISPATCH_BITS(b1, b2, B1, B2, BRAID_DISPATCH_GROUP(group, G, (
        ar::quant_allreduce_kernel<DT, B1, B2, G><<<blocks, cfg_.threads, 0, s>>>(
            x, y, q, ws, team_.signals(), slot_quant_, seq_ + 4)))));
    BRAID_CHECK_LAUNCH();
  }
}

const char* quant_phase_name(unsigned phase) {
  switch (phase) {
    case kPhaseQuantize: return "quantize";
    case kPhaseExchange: return "exchange";
    case kPhaseReduce: return "reduce";
    case kPhaseGather: return "gather";
    case kPhaseDequant: return "dequantize";
  }
  return "?";
}

void AllReducer::run_quant_nccl(const void* in, void* out, size_t count, DType dtype, cudaStream_t s, int b1, int b2,
                                int group, unsigned phases) {
  const int W = team_.size();
  for (size_t off = 0; off < count; off += cfg_.piece_elems) {
    const size_t n = std::min(cfg_.piece_elems, count - off);
    const uint64_t stride = quant::chunk_stride(n, W, group);
    const int blocks = grid_for(stride / group, cfg_.quant_min_groups, cfg_.quant_blocks);
    const uint64_t groups = stride / group;
    // Compact layouts: payload then metadata, so NCCL moves only real bytes.
    const uint64_t m1 = round_up(stride * b1 / 8, 16), bytes1 = round_up(m1 + groups * 4, 16);
    const uint64_t m2 = round_up(stride * b2 / 8, 16), bytes2 = round_up(m2 + groups * 4, 16);
    const auto* x = static_cast<const uint16_t*>(in) + off;
    auto* y = static_cast<uint16_t*>(out) + off;
    auto* send = static_cast<uint8_t*>(nccl_send_);
    auto* recv = static_cast<uint8_t*>(nccl_recv_);
    auto* ag_send = static_cast<uint8_t*>(nccl_ag_);
    auto* ag_recv = ag_send + nccl_slot_;
    ar::QuantGeom q1{n, stride, W, team_.rank(), 0, m1, 1, cfg_.quant_prefetch ? 1 : 0};
    if (phases & kPhaseQuantize) {
      BRAID_DISPATCH_DT(dtype, DT, BRAID_DISPATCH_BITS(b1, b2, B1, B2, BRAID_DISPATCH_GROUP(group, G, (
          ar::quant_stage1_kernel<DT, B1, G><<<blocks, cfg_.threads, 0, s>>>(x, q1, send, bytes1)))));
      BRAID_CHECK_LAUNCH();
    }
    if (phases & kPhaseExchange) {
      BRAID_NCCL_CHECK(ncclGroupStart());
      for (int r = 0; r < W; ++r) {
        BRAID_NCCL_CHECK(ncclSend(send + r * bytes1, bytes1, ncclUint8, r, team_.nccl(), s));
        BRAID_NCCL_CHECK(ncclRecv(recv + r * bytes1, bytes1, ncclUint8, r, team_.nccl(), s));
      }
      BRAID_NCCL_CHECK(ncclGroupEnd());
    }
    ar::QuantGeom q2{n, stride, W, team_.rank(), m1, m2, cfg_.quant_pair_sources ? 1 : 0};
    if (phases & kPhaseReduce) {
      BRAID_DISPATCH_BITS(b1, b2, B1, B2, BRAID_DISPATCH_GROUP(group, G, (
          ar::quant_stage2_kernel<B1, B2, G><<<blocks, cfg_.threads, 0, s>>>(q2, recv, bytes1, ag_send))));
      BRAID_CHECK_LAUNCH();
    }
    if (phases & kPhaseGather) BRAID_NCCL_CHECK(ncclAllGather(ag_send, ag_recv, bytes2, ncclUint8, team_.nccl(), s));
    ar::QuantGeom q3{n, stride, W, team_.rank(), m2, 0};
    if (phases & kPhaseDequant) {
      BRAID_DISPATCH_DT(dtype, DT, BRAID_DISPATCH_BITS(b1, b2, B1, B2, BRAID_DISPATCH_GROUP(group, G, (
          ar::quant_stage3_kernel<DT, B2, G><<<blocks, cfg_.threads, 0, s>>>(y, q3, ag_recv, bytes2)))));
      BRAID_CHECK_LAUNCH();
    }
  }
}

}  // namespace braid
