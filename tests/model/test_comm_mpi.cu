// Any number of ranks (one GPU each, or sharing one GPU: BRAID_SHARED_GPU=1): braid::model::make_peer_comm, the
// Comm over symmetric peer memory, with both engines (SM kernels; copy engines with a local sum). Every method against the host's answer computed from every rank's
// (deterministic) input — the sums bit for bit (fp32 in rank order, rounded once) — for bf16, fp16 and fp32, odd
// counts, a staging buffer small enough to force many rounds, in place, inside a replayed CUDA graph, and two comms
// on two streams at once; against NCCL too where the team has it.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "braid/model.hpp"
#include "braid/quant.hpp"
#include "braid/runtime.hpp"
#include "capture.hpp"
#include "world_team.hpp"

namespace {

namespace m = braid::model;
using braid::bench::DType;

::testing::Environment* const kEnv = ::testing::AddGlobalTestEnvironment(new braid::test::WorldTeam);
braid::Team& world() { return braid::test::WorldTeam::get(); }

// Element values as raw bits (2 or 4 bytes), with the host's float view and one rounding back.
struct Host {
  DType t;
  size_t es() const { return t == DType::kFP32 ? 4 : 2; }
  float load(const std::vector<uint8_t>& v, size_t i) const {
    if (t == DType::kFP32) {
      float f;
      std::memcpy(&f, v.data() + 4 * i, 4);
      return f;
    }
    uint16_t b;
    std::memcpy(&b, v.data() + 2 * i, 2);
    return t == DType::kBF16 ? braid::quant::bf16_bits_to_float(b) : braid::quant::half_bits_to_float(b);
  }
  void store(std::vector<uint8_t>& v, size_t i, float f) const {
    if (t == DType::kFP32) {
      std::memcpy(v.data() + 4 * i, &f, 4);
      return;
    }
    const uint16_t b = t == DType::kBF16 ? braid::quant::float_to_bf16_bits(f) : braid::quant::float_to_half_bits(f);
    std::memcpy(v.data() + 2 * i, &b, 2);
  }
  // n random values in [-4, 4) from (seed, rank): every rank can rebuild every rank's input.
  std::vector<uint8_t> random(size_t n, uint64_t seed) const {
    std::vector<uint8_t> v(n * es());
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 12345;
    for (size_t i = 0; i < n; ++i) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      store(v, i, float(int64_t(x >> 40) - (int64_t(1) << 23)) / float(1 << 21));
    }
    return v;
  }
};

// The host's all-reduce of x[0..W) over elements [off, off + n): the float sum in rank order, rounded once.
std::vector<uint8_t> rank_sum(const Host& h, const std::vector<std::vector<uint8_t>>& x, size_t n, size_t off = 0) {
  std::vector<uint8_t> want(n * h.es());
  for (size_t i = 0; i < n; ++i) {
    float acc = h.load(x[0], off + i);
    for (size_t r = 1; r < x.size(); ++r) acc += h.load(x[r], off + i);
    h.store(want, i, acc);
  }
  return want;
}

struct Dev {
  void* p = nullptr;
  explicit Dev(size_t bytes) { EXPECT_EQ(cudaMalloc(&p, bytes + 16), cudaSuccess); }
  ~Dev() { cudaFree(p); }
  // A pageable cudaMemcpy may return before its DMA lands, and the comm's streams do not wait for the legacy
  // stream (non-blocking): synchronize the device before any comm reads the buffer.
  void put(const std::vector<uint8_t>& h, size_t at = 0) {
    EXPECT_EQ(cudaMemcpy(static_cast<uint8_t*>(p) + at, h.data(), h.size(), cudaMemcpyHostToDevice), cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  std::vector<uint8_t> get(size_t bytes, size_t at = 0) const {
    std::vector<uint8_t> h(bytes);
    EXPECT_EQ(cudaMemcpy(h.data(), static_cast<uint8_t*>(p) + at, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
  uint8_t* at(size_t off) const { return static_cast<uint8_t*>(p) + off; }
};

const DType kTypes[] = {DType::kBF16, DType::kFP16, DType::kFP32};
const char* tname(DType t) { return braid::bench::dtype_name(t); }

using Engine = m::PeerCommOptions::Engine;
const Engine kEngines[] = {Engine::kSm, Engine::kCopyEngine};

std::unique_ptr<m::Comm> peer_comm(Engine e, size_t staging_bytes = 0, int sum_ctas = 0) {
  m::PeerCommOptions o;
  o.engine = e;
  o.staging_bytes = staging_bytes;
  o.sum_ctas = sum_ctas;
  return m::make_peer_comm(world(), o);
}

// The comms under test, both engines: the default staging and one of 4 KiB (many rounds, 16-byte per-peer slots of
// odd sizes; the copy engines' sum on one CTA there).
std::vector<std::unique_ptr<m::Comm>> comms() {
  std::vector<std::unique_ptr<m::Comm>> c;
  c.push_back(m::make_peer_comm(world()));
  c.push_back(m::make_peer_comm(world(), 4096 + 48));
  c.push_back(peer_comm(Engine::kCopyEngine));
  c.push_back(peer_comm(Engine::kCopyEngine, 4096 + 48, 1));
  return c;
}

void sync() { world().synchronize("test_comm_mpi"); }

// seed of (test, rank)
uint64_t seed(int test, int rank) { return uint64_t(test) * 1000 + uint64_t(rank) + 1; }

TEST(PeerComm, AllReduceIsTheRankOrderSumOnEveryRank) {
  const int W = world().size(), me = world().rank();
  cudaStream_t s = world().stream();
  for (auto& comm : comms())
    for (DType t : kTypes)
      for (size_t n : {size_t(1), size_t(7), size_t(1000), size_t(4099), size_t(70001)})
        for (bool in_place : {false, true}) {
          SCOPED_TRACE(comm->name() + " " + tname(t) + " n=" + std::to_string(n) + (in_place ? " in place" : ""));
          const Host h{t};
          std::vector<std::vector<uint8_t>> x(W);
          for (int r = 0; r < W; ++r) x[r] = h.random(n, seed(1, r) + n);
          const std::vector<uint8_t> want = rank_sum(h, x, n);
          Dev in(n * h.es()), out(n * h.es());
          in.put(x[me]);
          comm->all_reduce(in.p, in_place ? in.p : out.p, n, t, s);
          sync();
          EXPECT_EQ((in_place ? in : out).get(n * h.es()), want);
        }
}

TEST(PeerComm, ReduceScatterIsTheRankOrderSumOfEachChunk) {
  const int W = world().size(), me = world().rank();
  cudaStream_t s = world().stream();
  for (auto& comm : comms())
    for (DType t : kTypes)
      for (size_t n : {size_t(1), size_t(5), size_t(2049), size_t(30000)}) {
        SCOPED_TRACE(comm->name() + " " + tname(t) + " n=" + std::to_string(n));
        const Host h{t};
        std::vector<std::vector<uint8_t>> x(W);
        for (int r = 0; r < W; ++r) x[r] = h.random(n * W, seed(2, r) + n);
        const std::vector<uint8_t> want = rank_sum(h, x, n, me * n);
        Dev in(n * W * h.es()), out(n * h.es());
        in.put(x[me]);
        comm->reduce_scatter(in.p, out.p, n, t, s);
        sync();
        EXPECT_EQ(out.get(n * h.es()), want);
      }
}

TEST(PeerComm, AllGatherCopiesEveryRankInOrder) {
  const int W = world().size(), me = world().rank();
  cudaStream_t s = world().stream();
  for (auto& comm : comms())
    for (DType t : {DType::kBF16, DType::kFP32})
      for (size_t n : {size_t(1), size_t(3), size_t(4097), size_t(50000)})
        for (bool in_place : {false, true}) {
          SCOPED_TRACE(comm->name() + " " + tname(t) + " n=" + std::to_string(n) + (in_place ? " in place" : ""));
          const Host h{t};
          const size_t b = n * h.es();
          std::vector<uint8_t> want;
          for (int r = 0; r < W; ++r) {
            const auto x = h.random(n, seed(3, r) + n);
            want.insert(want.end(), x.begin(), x.end());
          }
          Dev in(b), out(b * W);
          const auto mine = h.random(n, seed(3, me) + n);
          in.put(mine);
          if (in_place) out.put(mine, me * b);
          comm->all_gather(in_place ? static_cast<const void*>(out.at(me * b)) : in.p, out.p, n, t, s);
          sync();
          EXPECT_EQ(out.get(b * W), want);
        }
}

// Pair (from, to) sends count(from, to) elements; zeros included, uneven, the receive side packed in rank order.
size_t pair_count(int from, int to, int variant) {
  if (variant == 0) return size_t(from + 2 * to + 1) * 37;
  if (variant == 1) return (from + to) % 3 == 0 ? 0 : size_t(from * 911 + to * 1307) % 5000 + 1;
  return from == to ? 9000 : 3;
}

TEST(PeerComm, AllToAllVDeliversEverySegment) {
  const int W = world().size(), me = world().rank();
  cudaStream_t s = world().stream();
  const Host h{DType::kBF16};
  for (auto& comm : comms())
    for (int variant = 0; variant < 3; ++variant) {
      SCOPED_TRACE(comm->name() + " variant " + std::to_string(variant));
      std::vector<size_t> sc(W), sd(W), rc(W), rd(W);
      size_t st = 0, rt = 0;
      for (int r = 0; r < W; ++r) {
        sc[r] = pair_count(me, r, variant), sd[r] = st + 5, st += sc[r] + 5;  // gaps between the send segments
        rc[r] = pair_count(r, me, variant), rd[r] = rt, rt += rc[r];
      }
      // send segment to r: values seeded by (me, r); receive from r: seeded by (r, me)
      std::vector<uint8_t> send(st * 2, 0), want(rt * 2);
      for (int r = 0; r < W; ++r) {
        const auto seg = h.random(sc[r], seed(4, me) * 31 + r);
        std::memcpy(send.data() + sd[r] * 2, seg.data(), seg.size());
        const auto got = h.random(rc[r], seed(4, r) * 31 + me);
        std::memcpy(want.data() + rd[r] * 2, got.data(), got.size());
      }
      Dev in(st * 2), out(rt * 2);
      in.put(send);
      comm->all_to_all_v(in.p, sc.data(), sd.data(), out.p, rc.data(), rd.data(), DType::kBF16, s);
      sync();
      EXPECT_EQ(out.get(rt * 2), want);
    }
}

// The rows exchange with device counts (Comm::all_to_all_rows): rows of 24 bf16 elements (48 bytes: 16-byte rows)
// and of 3 (6 bytes: the element path), the matrix and its transpose, every comm — the peer comms (both engines: the
// exchange runs on SM kernels in both; one capped at a CTA per kernel), and the NCCL comms (through their own peer comm;
// a split one capped at one CTA) where the team has NCCL — and
// once inside a captured graph replayed with a new matrix. A count beyond max_rows is a typed error, nothing moved.
TEST(PeerComm, AllToAllRowsDeliversDeviceCountedRows) {
  const int W = world().size(), me = world().rank();
  cudaStream_t s = world().stream();
  const Host h{DType::kBF16};
  std::vector<std::unique_ptr<m::Comm>> cs;
  cs.push_back(peer_comm(Engine::kSm));
  cs.push_back(peer_comm(Engine::kCopyEngine, 4096));
  {
    m::PeerCommOptions o;  // capped at one CTA (of both roles: rows_push_kernel): a throttled link
    o.max_ctas = 1;
    cs.push_back(m::make_peer_comm(world(), o));
    // The two-step exchange (stage, meet, pull, meet), uncapped and capped (one CTA per source in the pull).
    ::setenv("BRAID_ROWS_EXCHANGE", "staged", 1);
    cs.push_back(peer_comm(Engine::kSm));
    cs.push_back(m::make_peer_comm(world(), o));
    ::unsetenv("BRAID_ROWS_EXCHANGE");
  }
  if (world().has_nccl()) {
    cs.push_back(m::make_nccl_comm(world()));
    cs.push_back(m::make_nccl_comm_split(world(), 1));  // its rows exchange capped at NCCL's CTAs
  }
  for (size_t ci = 0; ci < cs.size(); ++ci)
    for (size_t row : {size_t(24), size_t(3)}) {
      auto& comm = cs[ci];
      const size_t max_rows = 3 * 9000;
      comm->reserve_rows_exchange(max_rows, row, DType::kBF16);
      for (int variant = 0; variant < 3; ++variant)
        for (bool tr : {false, true}) {
          SCOPED_TRACE("comm " + std::to_string(ci) + " " + comm->name() + " row " + std::to_string(row) + " variant " + std::to_string(variant) +
                       (tr ? " transposed" : ""));
          // M[src][dst] = rows src sends dst (the same on every rank); transposed: src sends M[dst][src]
          std::vector<int> M(size_t(W) * W);
          for (int a = 0; a < W; ++a)
            for (int b = 0; b < W; ++b) M[size_t(a) * W + b] = int(pair_count(a, b, variant)) % 9001;
          auto sends = [&](int src, int dst) { return size_t(tr ? M[size_t(dst) * W + src] : M[size_t(src) * W + dst]); };
          size_t st = 0, rt = 0;
          for (int r = 0; r < W; ++r) st += sends(me, r), rt += sends(r, me);
          std::vector<uint8_t> send(st * row * 2), want(rt * row * 2);
          size_t so = 0, ro = 0;
          for (int r = 0; r < W; ++r) {
            const auto seg = h.random(sends(me, r) * row, seed(9, me) * 31 + r);
            std::memcpy(send.data() + so, seg.data(), seg.size()), so += seg.size();
            const auto got = h.random(sends(r, me) * row, seed(9, r) * 31 + me);
            std::memcpy(want.data() + ro, got.data(), got.size()), ro += got.size();
          }
          Dev in(st * row * 2 + 16), out(rt * row * 2 + 16), mat(M.size() * 4);
          in.put(send);
          mat.put(std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(M.data()),
                                       reinterpret_cast<const uint8_t*>(M.data()) + M.size() * 4));
          comm->all_to_all_rows(in.p, out.p, static_cast<const int*>(mat.p), tr, row, max_rows, DType::kBF16, s);
          sync();
          EXPECT_EQ(out.get(rt * row * 2), want);
        }
    }
  // Captured with one matrix, replayed with another (the counts are read when the graph runs).
  auto comm = peer_comm(Engine::kSm);
  const size_t row = 8, max_rows = 64;
  comm->reserve_rows_exchange(max_rows, row, DType::kBF16);
  Dev in(max_rows * row * 2), out(max_rows * row * 2), mat(size_t(W) * W * 4);
  cudaGraph_t g = braid::test::capture_graph(s, [&] {
    comm->all_to_all_rows(in.p, out.p, static_cast<const int*>(mat.p), false, row, max_rows, DType::kBF16, s);
  });
  ASSERT_NE(g, nullptr);
  cudaGraphExec_t ge = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&ge, g, 0), cudaSuccess);
  for (int rep = 0; rep < 2; ++rep) {
    std::vector<int> M(size_t(W) * W);
    for (int a = 0; a < W; ++a)
      for (int b = 0; b < W; ++b) M[size_t(a) * W + b] = (a + b + rep) % 3 * 5;  // <= 10 rows per pair
    size_t st = 0, rt = 0;
    for (int r = 0; r < W; ++r) st += size_t(M[size_t(me) * W + r]), rt += size_t(M[size_t(r) * W + me]);
    std::vector<uint8_t> send(st * row * 2), want(rt * row * 2);
    size_t so = 0, ro = 0;
    for (int r = 0; r < W; ++r) {
      const auto seg = h.random(size_t(M[size_t(me) * W + r]) * row, seed(10 + rep, me) * 31 + r);
      std::memcpy(send.data() + so, seg.data(), seg.size()), so += seg.size();
      const auto got = h.random(size_t(M[size_t(r) * W + me]) * row, seed(10 + rep, r) * 31 + me);
      std::memcpy(want.data() + ro, got.data(), got.size()), ro += got.size();
    }
    in.put(send);
    mat.put(std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(M.data()),
                                 reinterpret_cast<const uint8_t*>(M.data()) + M.size() * 4));
    ASSERT_EQ(cudaGraphLaunch(ge, s), cudaSuccess);
    sync();
    EXPECT_EQ(out.get(rt * row * 2), want) << "replay " << rep;
  }
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
}

// Beyond the bound: every rank sees the same matrix, so every rank refuses it — a typed error from
// Team::synchronize, nothing moved. On a team of its own (the recorded error stays with that team).
TEST(PeerComm, AllToAllRowsRefusesCountsBeyondItsBound) {
  const int W = world().size();
  auto team = world().split(0, world().rank());
  auto comm = m::make_peer_comm(*team);
  const size_t row = 8, max_rows = 64;
  comm->reserve_rows_exchange(max_rows, row, DType::kBF16);
  Dev in(max_rows * row * 2), out(max_rows * row * 2), mat(size_t(W) * W * 4);
  const std::vector<int> M(size_t(W) * W, int(max_rows));  // every rank sends max_rows to every rank
  mat.put(std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(M.data()),
                               reinterpret_cast<const uint8_t*>(M.data()) + M.size() * 4));
  const std::vector<uint8_t> zeros(max_rows * row * 2, 0);
  out.put(zeros);
  in.put(Host{DType::kBF16}.random(max_rows * row, 77));
  comm->all_to_all_rows(in.p, out.p, static_cast<const int*>(mat.p), false, row, max_rows, DType::kBF16,
                        team->stream());
  if (W == 1) {  // one rank sending max_rows to itself is within the bound: delivered
    team->synchronize("rows within the bound");
    EXPECT_NE(out.get(max_rows * row * 2), zeros);
    return;
  }
  EXPECT_THROW(team->synchronize("rows beyond the bound"), braid::UsageError);
  EXPECT_EQ(out.get(max_rows * row * 2), zeros);
}

// Captured once, replayed three times with new inputs: the barrier's device-side epochs make every replay meet.
void captured_graph_replays(Engine e) {
  SCOPED_TRACE(e == Engine::kSm ? "peer" : "peer-ce");
  const int W = world().size(), me = world().rank();
  auto comm = peer_comm(e, 8192);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  const Host h{DType::kBF16};
  const size_t n = 5000;
  Dev in(n * 2), sum(n * 2), all(n * 2 * W);
  cudaGraph_t g = braid::test::capture_graph(s, [&] {
    comm->all_reduce(in.p, sum.p, n, DType::kBF16, s);
    comm->all_gather(sum.p, all.p, n, DType::kBF16, s);
  });
  ASSERT_NE(g, nullptr);
  cudaGraphExec_t ge;
  ASSERT_EQ(cudaGraphInstantiate(&ge, g, 0), cudaSuccess);
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<std::vector<uint8_t>> x(W);
    for (int r = 0; r < W; ++r) x[r] = h.random(n, seed(5, r) + 100 * rep);
    const std::vector<uint8_t> want = rank_sum(h, x, n);
    in.put(x[me]);
    ASSERT_EQ(cudaGraphLaunch(ge, s), cudaSuccess);
    world().synchronize(s, "graph replay");
    EXPECT_EQ(sum.get(n * 2), want) << "replay " << rep;
    for (int r = 0; r < W; ++r) EXPECT_EQ(all.get(n * 2, r * n * 2), want) << "replay " << rep << " slice " << r;
  }
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  cudaStreamDestroy(s);
}

// Two comms on two streams at once (the strands' two communicators), and one comm called from both streams (its
// methods run in issue order on its own stream).
void two_comms_on_two_streams(Engine e) {
  SCOPED_TRACE(e == Engine::kSm ? "peer" : "peer-ce");
  const int W = world().size(), me = world().rank();
  auto a = peer_comm(e, 4096), b = peer_comm(e, 4096);
  cudaStream_t s[2];
  for (auto& x : s) ASSERT_EQ(cudaStreamCreateWithFlags(&x, cudaStreamNonBlocking), cudaSuccess);
  const Host h{DType::kBF16};
  const size_t n = 20000;
  std::vector<std::unique_ptr<Dev>> in, out;
  std::vector<std::vector<uint8_t>> want;
  for (int k = 0; k < 4; ++k) {
    std::vector<std::vector<uint8_t>> x(W);
    for (int r = 0; r < W; ++r) x[r] = h.random(n, seed(6, r) + 7 * k);
    const std::vector<uint8_t> w = rank_sum(h, x, n);
    want.push_back(w);
    in.push_back(std::make_unique<Dev>(n * 2));
    out.push_back(std::make_unique<Dev>(n * 2));
    in.back()->put(x[me]);
  }
  a->all_reduce(in[0]->p, out[0]->p, n, DType::kBF16, s[0]);
  b->all_reduce(in[1]->p, out[1]->p, n, DType::kBF16, s[1]);
  a->all_reduce(in[2]->p, out[2]->p, n, DType::kBF16, s[1]);  // comm a from the other stream
  b->all_reduce(in[3]->p, out[3]->p, n, DType::kBF16, s[0]);
  for (auto x : s) world().synchronize(x, "two streams");
  for (int k = 0; k < 4; ++k) EXPECT_EQ(out[k]->get(n * 2), want[k]) << "op " << k;
  for (auto x : s) cudaStreamDestroy(x);
}

// Where the team has NCCL: the same bytes as NCCL's gather and all-to-all, and — at two ranks, where a float sum of
// two values has one order — its sums too.
void equals_nccl(Engine e) {
  SCOPED_TRACE(e == Engine::kSm ? "peer" : "peer-ce");
  const int W = world().size(), me = world().rank();
  auto peer = peer_comm(e, 1 << 16);
  auto nccl = m::make_nccl_comm(world());
  cudaStream_t s = world().stream();
  const Host h{DType::kBF16};
  const size_t n = 300007;
  Dev in(n * 2 * W), a(n * 2 * W), b(n * 2 * W);
  in.put(h.random(n * W, seed(7, me)));
  peer->all_gather(in.p, a.p, n, DType::kBF16, s);
  nccl->all_gather(in.p, b.p, n, DType::kBF16, s);
  sync();
  EXPECT_EQ(a.get(n * 2 * W), b.get(n * 2 * W));
  if (W <= 2) {
    peer->all_reduce(in.p, a.p, n, DType::kBF16, s);
    nccl->all_reduce(in.p, b.p, n, DType::kBF16, s);
    sync();
    EXPECT_EQ(a.get(n * 2), b.get(n * 2));
    peer->reduce_scatter(in.p, a.p, n, DType::kBF16, s);
    nccl->reduce_scatter(in.p, b.p, n, DType::kBF16, s);
    sync();
    EXPECT_EQ(a.get(n * 2), b.get(n * 2));
  }
}

TEST(PeerComm, CapturedGraphReplays) {
  for (Engine e : kEngines) captured_graph_replays(e);
}
TEST(PeerComm, TwoCommsOnTwoStreams) {
  for (Engine e : kEngines) two_comms_on_two_streams(e);
}
TEST(PeerComm, EqualsNcclWhereTheTeamHasIt) {
  if (!world().has_nccl()) GTEST_SKIP() << "no NCCL in this team (shared GPU)";
  for (Engine e : kEngines) equals_nccl(e);
}

TEST(PeerComm, EngineNames) {
  Engine e = Engine::kSm;
  EXPECT_TRUE(m::peer_engine_from_name("peer-ce", &e));
  EXPECT_EQ(e, Engine::kCopyEngine);
  EXPECT_TRUE(m::peer_engine_from_name("peer", &e));
  EXPECT_EQ(e, Engine::kSm);
  EXPECT_FALSE(m::peer_engine_from_name("nccl", &e));
  EXPECT_EQ(peer_comm(Engine::kCopyEngine, 4096)->name(), "peer-ce");
}

TEST(PeerComm, AllToAllVRejectsAnOwnSegmentOfTwoSizes) {
  const int W = world().size(), me = world().rank();
  std::vector<size_t> sc(W, 4), sd(W), rc(W, 4), rd(W);
  for (int r = 0; r < W; ++r) sd[r] = rd[r] = size_t(r) * 8;
  rc[me] = 5;  // on every rank, before any rank communicates
  Dev in(W * 16), out(W * 16);
  for (Engine e : kEngines)
    EXPECT_THROW(peer_comm(e, 4096)->all_to_all_v(in.p, sc.data(), sd.data(), out.p, rc.data(), rd.data(),
                                                   DType::kBF16, world().stream()),
                 braid::Error);
}

TEST(PeerComm, DefaultCommFollowsTheTeam) {
  auto c = m::make_default_comm(world());
  EXPECT_EQ(c->name(), world().has_nccl() ? "nccl" : "peer");
  EXPECT_EQ(c->size(), world().size());
  EXPECT_EQ(c->rank(), world().rank());
}

}  // namespace
