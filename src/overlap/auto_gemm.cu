// auto_gemm.cu — GEMM + reduce-scatter / all-reduce with the schedule chosen per shape (AutoGemmComm): the picks'
// names and legality, the rule used without a measurement, the per-shape cache, and the op (build, run, tune). Host
// code only: every kernel it enqueues belongs to a schedule (overlap.cu, gemm_sm90.cu) or to cuBLAS / NCCL.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>

#include "braid/bench.hpp"
#include "braid/errors.hpp"
#include "braid/overlap.hpp"
#include "braid/runtime.hpp"
#include "braid/t3.hpp"
#include "shape_cache.hpp"

namespace braid::overlap {

using Sched = GemmCommPick::Schedule;

// =============================================== picks ===============================================
std::string pick_name(const GemmCommPick& p) {
  switch (p.schedule) {
    case Sched::kSequential:
      return "sequential";
    case Sched::kFlashOverlap:
      return "flashoverlap";
    case Sched::kOwnerOrdered: {
      std::string s = p.gemm == OwnerGemm::kBraid ? "owner-braid" : "owner-cublas";
      if (p.chunks != 1) s += "-c" + std::to_string(p.chunks);
      return s;
    }
    case Sched::kT3:
      return t3::variant_name(p.t3_variant);  // "t3-ring-cublas", ...
    case Sched::kPull:
      return "cublas-pull";
  }
  return "?";
}

GemmCommPick parse_pick(const std::string& name) {
  const auto bad = [&] {
    return UsageError("unknown GEMM + reduce-scatter schedule '" + name +
                          "' (sequential, flashoverlap, owner-cublas[-cN], owner-braid[-cN], t3-ring, t3-direct, "
                          "t3-ring-dma, t3-ring-cublas, cublas-pull)",
                      __FILE__, __LINE__);
  };
  GemmCommPick p;
  if (name == "sequential") return p;
  if (name == "flashoverlap") {
    p.schedule = Sched::kFlashOverlap;
    return p;
  }
  if (name == "cublas-pull") {
    p.schedule = Sched::kPull;
    return p;
  }
  for (const t3::Variant v : {t3::Variant::kRing, t3::Variant::kDirect, t3::Variant::kDirectTma, t3::Variant::kRingDma,
                              t3::Variant::kRingCublas})
    if (name == t3::variant_name(v)) return GemmCommPick::t3_op(v);
  std::string rest;
  if (name.rfind("owner-cublas", 0) == 0) {
    p.gemm = OwnerGemm::kCublas;
    rest = name.substr(12);
  } else if (name.rfind("owner-braid", 0) == 0) {
    p.gemm = OwnerGemm::kBraid;
    rest = name.substr(11);
  } else {
    throw bad();
  }
  p.schedule = Sched::kOwnerOrdered;
  if (!rest.empty()) {
    // "-cN", N of 1 to 4 digits
    if (rest.size() < 3 || rest.size() > 6 || rest.compare(0, 2, "-c") != 0 ||
        rest.find_first_not_of("0123456789", 2) != std::string::npos)
      throw bad();
    p.chunks = std::atoi(rest.c_str() + 2);
    if (p.chunks < 1) throw bad();
  }
  return p;
}

bool pick_legal(const GemmCommPick& p, Collective coll, int world, int64_t m, int64_t n, int64_t k) {
  if (world < 1 || m <= 0 || n <= 0 || k <= 0 || m % world != 0) return false;
  if (p.schedule == Sched::kFlashOverlap) return coll == Collective::kReduceScatter;
  // GemmPullRs: reduce-scatter, 2 to 16 ranks, 16-byte rows for the sum
  if (p.schedule == Sched::kPull) return coll == Collective::kReduceScatter && world >= 2 && world <= 16 && n % 8 == 0;
  if (p.schedule == Sched::kT3) {
    // t3::GemmReduceScatter: 2 to 8 ranks, 2x1 clusters of 128x256 tiles in every rank's chunk, K in 64-steps (its
    // constructor checks the regions; a UsageError there makes the candidate or the cached pick fall back)
    const t3::Variant v = p.t3_variant;
    const bool form = v == t3::Variant::kRing || t3::is_direct(v) || v == t3::Variant::kRingDma ||
                      v == t3::Variant::kRingCublas;
    return form && coll == Collective::kReduceScatter && world >= 2 && world <= 8 && m % (int64_t(world) * 256) == 0 &&
           n % 256 == 0 && k % 64 == 0;
  }
  if (p.schedule != Sched::kOwnerOrdered) return true;
  // OwnerOrderedRs: N % 8 (16-byte rows for the sums), at most 16 ranks (the sum's sources), chunks dividing a block
  const int64_t rows = m / world;
  if (n % 8 != 0 || world > 16 || p.chunks < 1 || rows % p.chunks != 0) return false;
  // braid's GEMM per launch: 128x256 tiles in 2x1 clusters
  if (p.gemm == OwnerGemm::kBraid && ((rows / p.chunks) % 256 != 0 || n % 256 != 0)) return false;
  return true;
}

size_t choose_timed(const std::vector<std::pair<GemmCommPick, double>>& timed, double max_ratio) {
  BRAID_REQUIRE(!timed.empty(), "choose_timed: no candidates");
  size_t best = 0;
  for (size_t i = 1; i < timed.size(); ++i)
    if (timed[i].second < timed[best].second) best = i;
  // A margin for the baseline, as GemmOverlap::tune's: a pick within noise of cuBLAS + NCCL is not worth its risk.
  for (size_t i = 0; i < timed.size(); ++i)
    if (timed[i].first == GemmCommPick{} && timed[best].second > max_ratio * timed[i].second) return i;
  return best;
}

GemmCommPick default_pick(Collective coll, int world, int64_t m, int64_t n, int64_t k, bool peer_ok) {
  GemmCommPick p;
  p.schedule = Sched::kOwnerOrdered;
  if (!peer_ok || world < 2) return GemmCommPick{};
  const int64_t rows = m % world == 0 ? m / world : 0;
  if (coll == Collective::kReduceScatter) return rows >= 512 && pick_legal(p, coll, world, m, n, k) ? p : GemmCommPick{};
  // All-reduce (2x H200 sweep, 1c563b0): 1 chunk 1.01-1.34x from 1024 rows per rank (0.85-1.10x at 512); 4 chunks
  // 1.07-1.55x from 2048 rows (each chunk >= 512 rows), below 1 chunk at 1024.
  if (rows < 1024) return GemmCommPick{};
  p.chunks = rows >= 2048 ? 4 : 1;
  if (!pick_legal(p, coll, world, m, n, k)) p.chunks = 1;
  return pick_legal(p, coll, world, m, n, k) ? p : GemmCommPick{};
}

// =============================================== cache ===============================================
void PickCache::put(const Entry& e) { detail::put_by_shape(v_, e); }

const PickCache::Entry* PickCache::lookup(Collective coll, int world, int64_t m, int64_t n, int64_t k) const {
  return detail::nearest_m(v_, coll, world, m, n, k,
                           [&](const Entry& e) { return pick_legal(e.pick, coll, world, m, n, k); });
}

void PickCache::parse(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  int ln = 0;
  while (std::getline(in, line)) {
    ++ln;
    const size_t c = line.find('#');
    if (c != std::string::npos) line.resize(c);
    std::istringstream is(line);
    Entry e;
    std::string coll, name;
    if (!(is >> coll)) continue;  // blank or comment
    if (!(is >> e.world >> e.m >> e.n >> e.k >> name) || e.world < 1 || e.m <= 0 || e.n <= 0 || e.k <= 0)
      throw UsageError("pick cache line " + std::to_string(ln) + ": expected 'coll world m n k name [us]'", __FILE__,
                       __LINE__);
    e.coll = parse_collective(coll);
    e.pick = parse_pick(name);
    if (!pick_legal(e.pick, e.coll, e.world, e.m, e.n, e.k))
      throw UsageError("pick cache line " + std::to_string(ln) + ": " + name + " cannot run this " + coll + " shape",
                       __FILE__, __LINE__);
    std::string us;
    if (is >> us) {
      char* end = nullptr;
      e.us = std::strtod(us.c_str(), &end);
      if (*end != '\0' || !(e.us >= 0))
        throw UsageError("pick cache line " + std::to_string(ln) + ": bad time '" + us + "'", __FILE__, __LINE__);
    }
    put(e);
  }
}

std::string PickCache::text() const {
  std::ostringstream os;
  os << "# GEMM + collective schedule per shape (AutoGemmComm): coll world m n k pick tuned_us\n";
  for (const auto& e : v_)
    os << collective_name(e.coll) << ' ' << e.world << ' ' << e.m << ' ' << e.n << ' ' << e.k << ' ' << pick_name(e.pick) << ' ' << e.us << '\n';
  return os.str();
}

void PickCache::load(const std::string& path) {
  std::ifstream f(path);
  if (!f) return;
  std::ostringstream ss;
  ss << f.rdbuf();
  try {
    parse(ss.str());
  } catch (const UsageError& e) {
    throw UsageError(path + ": " + e.what(), __FILE__, __LINE__);
  }
}

void PickCache::save(const std::string& path) const {
  std::ofstream f(path);
  if (!f) throw UsageError("cannot write " + path, __FILE__, __LINE__);
  f << text();
}

// =============================================== the op ===============================================
// One schedule's resources. Only the pick's are alive outside tune().
struct AutoGemmComm::Schedule {
  Collective coll = Collective::kReduceScatter;
  GemmCommPick pick;
  std::unique_ptr<GemmOverlap> flash;   // kFlashOverlap
  std::unique_ptr<OwnerOrderedRs> owner;  // kOwnerOrdered
  std::unique_ptr<CublasGemm> cublas;   // kSequential
  std::unique_ptr<t3::GemmReduceScatter> t3op;  // kT3
  std::unique_ptr<GemmPullRs> pull;     // kPull
  void* d = nullptr;                    // kSequential, reduce-scatter: (M, N) bf16, the GEMM's output;
                                        // kFlashOverlap: (out_elems) bf16, its tile-scattered part
  Schedule() = default;
  Schedule(const Schedule&) = delete;
  Schedule& operator=(const Schedule&) = delete;
  ~Schedule() {
    if (d) cudaFree(d);
  }
  // out: (M / world, N) bf16 (all-reduce: (M, N)).
  void run(Team& team, int64_t m, int64_t n, int64_t k, const void* a, const void* b, void* out, cudaStream_t s) {
    switch (pick.schedule) {
      case Sched::kSequential:
        if (coll == Collective::kAllReduce)  // the GEMM into out, then NCCL's all-reduce in place
          run_sequential(team, *cublas, coll, a, b, out, nullptr, m, n, k, s);
        else
          run_sequential(team, *cublas, coll, a, b, d, out, m, n, k, s);
        return;
      case Sched::kFlashOverlap: {
        // The op leaves its part tile-scattered (scattered_index); `out` gets rows in original_row() order. NCCL's
        // symmetric transport writes its own window; the others write the scratch d. With Mapping::normal (the op's
        // fallback) the part is already rows and goes straight to `out` where the transport allows.
        void* o = flash->output();
        if (flash->mapping().normal && !o) {
          flash->run(a, b, out, s);
          return;
        }
        void* t = o ? o : d;
        BRAID_REQUIRE(t != out, "AutoGemmComm: `out` must not be the flashoverlap op's own window (the rows are gathered "
                                "out of it)");
        flash->run(a, b, t, s);
        flash->gather_rows(t, out, s);
        return;
      }
      case Sched::kOwnerOrdered:
        owner->run(a, b, out, s);
        return;
      case Sched::kT3: {
        // ring, ring-dma: the rows land in `out`; ring-cublas, direct: in the op's own buffer (own_result()), copied
        // unless `out` is that buffer (AutoGemmComm::output()).
        t3op->run(a, b, out, s);
        const void* r = t3op->result();
        if (r != out)
          BRAID_CUDA_CHECK(cudaMemcpyAsync(out, r, t3op->out_elems() * 2, cudaMemcpyDeviceToDevice, s));
        return;
      }
      case Sched::kPull:
        pull->run(a, b, out, s);
        return;
    }
  }
  // Where run() leaves the result without a copy when given it as `out`; null: any `out`.
  void* own_output() const {
    if (owner) return owner->result();
    if (t3op) return const_cast<void*>(t3op->own_result());
    return nullptr;
  }
  void check() const {
    if (flash) flash->check_error();
    if (t3op) t3op->check_error();
    if (pull) pull->check_error();
  }
};

namespace {

// Collective (the schedules' constructors are). Throws UnavailableError / UsageError where the schedule cannot run
// here; those depend only on the node and the shape, so every rank throws alike.
std::unique_ptr<AutoGemmComm::Schedule> make_schedule(Team& team, int64_t m, int64_t n, int64_t k,
                                                    const AutoOptions& opt, const GemmCommPick& p) {
  auto s = std::make_unique<AutoGemmComm::Schedule>();
  s->coll = opt.coll;
  s->pick = p;
  BRAID_REQUIRE(pick_legal(p, opt.coll, team.size(), m, n, k), "AutoGemmComm: " + pick_name(p) + " cannot run here");
  switch (p.schedule) {
    case Sched::kSequential:
      s->cublas = std::make_unique<CublasGemm>();
      if (opt.coll == Collective::kReduceScatter) BRAID_CUDA_CHECK(cudaMalloc(&s->d, size_t(m) * size_t(n) * 2));
      break;
    case Sched::kFlashOverlap: {
      OverlapOptions o = opt.flash;
      o.coll = Collective::kReduceScatter;
      o.m = m, o.n = n, o.k = k;
      s->flash = std::make_unique<GemmOverlap>(team, o);
      if (!s->flash->output()) BRAID_CUDA_CHECK(cudaMalloc(&s->d, s->flash->out_elems() * 2));
      break;
    }
    case Sched::kOwnerOrdered:
      s->owner = std::make_unique<OwnerOrderedRs>(team, m, n, k, p.gemm, p.chunks, opt.coll == Collective::kAllReduce);
      break;
    case Sched::kT3: {
      t3::RsOptions o;
      o.variant = p.t3_variant;
      o.m = m, o.n = n, o.k = k;
      s->t3op = std::make_unique<t3::GemmReduceScatter>(team, o);
      break;
    }
    case Sched::kPull:
      s->pull = std::make_unique<GemmPullRs>(team, m, n, k);
      break;
  }
  return s;
}

// A pick as one number, for checking that every rank holds the same one.
double pick_code(const GemmCommPick& p) {
  return double(int(p.schedule)) * 1e6 + (p.schedule == Sched::kOwnerOrdered ? double(int(p.gemm)) * 1e5 + p.chunks : 0) +
         (p.schedule == Sched::kT3 ? double(int(p.t3_variant)) : 0);
}

}  // namespace

AutoGemmComm::AutoGemmComm(Team& team, int64_t m, int64_t n, int64_t k, const AutoOptions& opt)
    : team_(team), m_(m), n_(n), k_(k), opt_(opt) {
  const int W = team.size();
  BRAID_REQUIRE(m > 0 && n > 0 && k > 0 && m % W == 0, "AutoGemmComm: M, N, K > 0 and M % world == 0");
  GemmCommPick p = default_pick(opt_.coll, W, m, n, k, team.peer_ok());
  if (opt_.picks)
    if (const auto* e = opt_.picks->lookup(opt_.coll, W, m, n, k)) p = e->pick;
  if ((p.schedule == Sched::kFlashOverlap && !opt_.try_flash) ||
      (p.schedule == Sched::kOwnerOrdered && (!opt_.try_owner || !team.peer_ok())) ||
      (p.schedule == Sched::kT3 && (!opt_.try_t3 || !team.peer_ok())) ||
      (p.schedule == Sched::kPull && (!opt_.try_pull || !team.peer_ok())))
    p = GemmCommPick{};
  // Every rank must build the same schedule (the constructors are collective): different pick files would hang.
  const double c = pick_code(p);
  const std::vector<double> mx = team.allreduce_max({c, -c});
  if (mx[0] != -mx[1])
    throw UsageError("AutoGemmComm: the ranks hold different picks for " + std::string(collective_name(opt_.coll)) +
                         " " + std::to_string(m) + "x" + std::to_string(n) +
                         "x" + std::to_string(k) + " (rank " + std::to_string(team.rank()) + ": " + pick_name(p) +
                         "; is the pick cache the same file on every rank?)",
                     __FILE__, __LINE__);
  // Where the schedule cannot run here (no stream memory operations; a shape its GEMM cannot tile), the baseline
  // runs: both causes depend only on the node and the shape, so every rank takes the same way.
  bool fallback = false;
  try {
    cur_ = make_schedule(team, m, n, k, opt_, p);
  } catch (const UnavailableError&) {
    fallback = true;
  } catch (const UsageError&) {
    if (p == GemmCommPick{}) throw;
    fallback = true;
  }
  if (fallback) {
    p = GemmCommPick{};
    cur_ = make_schedule(team, m, n, k, opt_, p);
  }
  pick_ = p;
}

AutoGemmComm::~AutoGemmComm() = default;

void AutoGemmComm::run(const void* a, const void* b, void* out, cudaStream_t stream) {
  BRAID_REQUIRE(cur_ != nullptr, "AutoGemmComm: no schedule (an earlier tune() threw)");
  cur_->run(team_, m_, n_, k_, a, b, out, stream);
}

GemmOverlap* AutoGemmComm::flash() const { return cur_ ? cur_->flash.get() : nullptr; }

void* AutoGemmComm::output() const { return cur_ ? cur_->own_output() : nullptr; }

int64_t AutoGemmComm::original_row(int64_t j) const {
  if (opt_.coll == Collective::kAllReduce) return j;
  if (const GemmOverlap* f = flash()) return rs_original_row(f->mapping(), team_.rank(), j);
  return int64_t(team_.rank()) * (m_ / team_.size()) + j;
}

GemmCommPick AutoGemmComm::tune(const void* a, const void* b, void* out, cudaStream_t stream) {
  const int W = team_.size();
  std::vector<GemmCommPick> want{GemmCommPick{}};
  if (opt_.try_flash && opt_.coll == Collective::kReduceScatter) want.push_back(GemmCommPick{Sched::kFlashOverlap});
  if (opt_.try_owner && team_.peer_ok())
    for (size_t i = 0; i < opt_.owner_chunks.size(); ++i) {
      want.push_back(GemmCommPick{Sched::kOwnerOrdered, OwnerGemm::kCublas, opt_.owner_chunks[i]});
      if (i == 0 && opt_.try_owner_braid)
        want.push_back(GemmCommPick{Sched::kOwnerOrdered, OwnerGemm::kBraid, opt_.owner_chunks[i]});
    }
  if (opt_.try_t3 && opt_.coll == Collective::kReduceScatter && team_.peer_ok())
    for (const t3::Variant v : opt_.t3_variants) want.push_back(GemmCommPick::t3_op(v));
  if (opt_.try_pull && opt_.coll == Collective::kReduceScatter && team_.peer_ok())
    want.push_back(GemmCommPick{Sched::kPull});
  team_.synchronize(stream, "AutoGemmComm::tune");  // the current schedule's queued work is done
  std::vector<std::unique_ptr<Schedule>> cands;
  for (const GemmCommPick& p : want) {
    if (!pick_legal(p, opt_.coll, W, m_, n_, k_) ||
        std::any_of(cands.begin(), cands.end(), [&](const auto& c) { return c->pick == p; }))
      continue;
    if (cur_ && cur_->pick == p) {  // the current schedule is a candidate as it is
      cands.push_back(std::move(cur_));
      continue;
    }
    try {
      cands.push_back(make_schedule(team_, m_, n_, k_, opt_, p));
    } catch (const UnavailableError&) {
    } catch (const UsageError&) {  // e.g. a block that braid's GEMM cannot tile
    }
  }
  // The flashoverlap candidate runs as its own tune() decides; where that is its fallback (cuBLAS + NCCL), it is
  // the sequential candidate again and leaves.
  for (size_t i = 0; i < cands.size(); ++i) {
    GemmOverlap* f = cands[i]->flash.get();
    if (!f) continue;
    f->tune(a, b, f->output() ? f->output() : out, stream);
    if (f->sequential()) {
      team_.synchronize(stream, "AutoGemmComm::tune");
      cands.erase(cands.begin() + std::ptrdiff_t(i));
      break;
    }
  }
  std::vector<std::function<void()>> fns;
  // Each candidate runs as a caller reading output() would run it: an owner-ordered all-reduce, T3's ring-cublas and
  // direct ops into their own symmetric results (run(out) with another `out` adds one copy of the result; the tuning
  // does not charge it).
  for (auto& c : cands) {
    void* const own = c->own_output();
    void* dst = own ? own : out;
    fns.push_back([&, s = c.get(), dst] { s->run(team_, m_, n_, k_, a, b, dst, stream); });
  }
  const std::vector<double> med =
      bench::tune_medians(team_, stream, std::max(1, opt_.reps), GemmOverlap::kTuneBatch, fns,
                          [&](size_t i) { cands[i]->check(); });
  tuned_.clear();
  for (size_t i = 0; i < cands.size(); ++i) tuned_.emplace_back(cands[i]->pick, med[i]);
  const size_t best = choose_timed(tuned_, opt_.max_ratio);
  team_.synchronize(stream, "AutoGemmComm::tune");  // nothing of the losers is still queued
  cur_ = std::move(cands[best]);
  pick_ = cur_->pick;
  cands.clear();
  if (opt_.picks) opt_.picks->put({opt_.coll, W, m_, n_, k_, pick_, med[best]});
  return pick_;
}

}  // namespace braid::overlap
