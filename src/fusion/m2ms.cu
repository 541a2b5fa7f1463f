// Many-to-Many Scatter over NCCL point-to-point operations (see include/braid/m2ms.hpp).
#include "braid/m2ms.hpp"

#include <algorithm>
#include <numeric>
#include <set>

#include "braid/errors.hpp"
#include "braid/runtime.hpp"

namespace braid {

int M2msGroups::source_index(int rank) const {
  const auto it = std::find(sources.begin(), sources.end(), rank);
  return it == sources.end() ? -1 : static_cast<int>(it - sources.begin());
}

int M2msGroups::destination_index(int rank) const {
  const auto it = std::find(destinations.begin(), destinations.end(), rank);
  return it == destinations.end() ? -1 : static_cast<int>(it - destinations.begin());
}

void M2msGroups::validate(int world) const {
  for (const auto* g : {&sources, &destinations}) {
    const char* what = g == &sources ? "source" : "destination";
    BRAID_REQUIRE(!g->empty(), std::string("m2ms: empty ") + what + " group");
    std::set<int> seen;
    for (int r : *g) {
      BRAID_REQUIRE(r >= 0 && r < world, std::string("m2ms: ") + what + " rank " + std::to_string(r) +
                                             " outside the communicator of " + std::to_string(world));
      BRAID_REQUIRE(seen.insert(r).second, std::string("m2ms: rank ") + std::to_string(r) + " twice in the " + what +
                                               " group");
    }
  }
}

size_t M2msBlocks::total() const { return std::accumulate(counts.begin(), counts.end(), size_t(0)); }

M2msBlocks M2msBlocks::packed(std::vector<size_t> counts) {
  M2msBlocks b;
  b.displs.resize(counts.size());
  size_t at = 0;
  for (size_t p = 0; p < counts.size(); ++p) {
    b.displs[p] = at;
    at += counts[p];
  }
  b.counts = std::move(counts);
  return b;
}

size_t nccl_type_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: break;
  }
  throw UsageError("m2ms: unsupported NCCL data type " + std::to_string(static_cast<int>(t)), __FILE__, __LINE__);
}

std::vector<int> m2ms_send_order(int i, int n) {
  std::vector<int> order(n);
  for (int j = 0; j < n; ++j) order[j] = (i + j) % n;
  return order;
}

std::vector<int> m2ms_recv_order(int d, int m, int n) {
  // Source i reaches destination d at step j = (d - i) mod n; sort sources by that step, then by i.
  std::vector<int> order(m);
  std::iota(order.begin(), order.end(), 0);
  const auto step = [&](int i) { return ((d - i) % n + n) % n; };
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return step(a) < step(b); });
  return order;
}

void m2ms(const void* send, const M2msBlocks& sb, void* recv, const M2msBlocks& rb, ncclDataType_t dtype,
          const M2msGroups& g, int rank, int world, ncclComm_t comm, cudaStream_t stream) {
  g.validate(world);
  const size_t es = nccl_type_size(dtype);
  const int m = static_cast<int>(g.sources.size()), n = static_cast<int>(g.destinations.size());
  const int si = g.source_index(rank), di = g.destination_index(rank);
  if (si >= 0) {
    BRAID_REQUIRE(sb.counts.size() == size_t(n) && sb.displs.size() == size_t(n),
                  "m2ms: a source needs one send block per destination");
    BRAID_REQUIRE(send != nullptr || sb.total() == 0, "m2ms: null send buffer with data to send");
  }
  if (di >= 0) {
    BRAID_REQUIRE(rb.counts.size() == size_t(m) && rb.displs.size() == size_t(m),
                  "m2ms: a destination needs one receive block per source");
    BRAID_REQUIRE(recv != nullptr || rb.total() == 0, "m2ms: null receive buffer with data to receive");
  }
  // A rank in both groups copies its own block locally; the two sides of that block must agree.
  const int self_dst = si >= 0 ? di : -1;  // destination index of this rank when it sends to itself
  if (self_dst >= 0)
    BRAID_REQUIRE(sb.counts[self_dst] == rb.counts[si], "m2ms: block to itself: send count " +
                                                            std::to_string(sb.counts[self_dst]) + " != receive count " +
                                                            std::to_string(rb.counts[si]));
  const char* sp = static_cast<const char*>(send);
  char* rp = static_cast<char*>(recv);
  BRAID_NCCL_CHECK(ncclGroupStart());
  try {
    if (si >= 0)
      for (int j : m2ms_send_order(si, n)) {
        const int peer = g.destinations[j];
        if (peer == rank || sb.counts[j] == 0) continue;
        BRAID_NCCL_CHECK(ncclSend(sp + sb.displs[j] * es, sb.counts[j], dtype, peer, comm, stream));
      }
    if (di >= 0)
      for (int i : m2ms_recv_order(di, m, n)) {
        const int peer = g.sources[i];
        if (peer == rank || rb.counts[i] == 0) continue;
        BRAID_NCCL_CHECK(ncclRecv(rp + rb.displs[i] * es, rb.counts[i], dtype, peer, comm, stream));
      }
  } catch (...) {
    ncclGroupEnd();  // leave no group open behind the error
    throw;
  }
  BRAID_NCCL_CHECK(ncclGroupEnd());
  if (self_dst >= 0 && sb.counts[self_dst] > 0)
    BRAID_CUDA_CHECK(cudaMemcpyAsync(rp + rb.displs[si] * es, sp + sb.displs[self_dst] * es,
                                     sb.counts[self_dst] * es, cudaMemcpyDeviceToDevice, stream));
}

void m2ms(Team& team, const void* send, const M2msBlocks& send_blocks, void* recv, const M2msBlocks& recv_blocks,
          ncclDataType_t dtype, const M2msGroups& groups) {
  m2ms(send, send_blocks, recv, recv_blocks, dtype, groups, team.rank(), team.size(), team.nccl(), team.stream());
}

std::vector<size_t> m2ms_exchange_counts(Team& team, const M2msGroups& g, const std::vector<size_t>& send_counts) {
  g.validate(team.size());
  const int m = static_cast<int>(g.sources.size()), n = static_cast<int>(g.destinations.size());
  const int si = g.source_index(team.rank()), di = g.destination_index(team.rank());
  if (si >= 0)
    BRAID_REQUIRE(send_counts.size() == size_t(n), "m2ms_exchange_counts: one count per destination expected, got " +
                                                       std::to_string(send_counts.size()));
  const size_t ns = si >= 0 ? n : 0, nr = di >= 0 ? m : 0;
  const size_t words = std::max<size_t>(1, ns + nr);
  // Pinned host staging: a copy to pageable memory would block the host without a bound if a peer
  // never joins; with pinned memory every wait goes through Team::synchronize.
  uint64_t* h = nullptr;
  BRAID_CUDA_CHECK(cudaMallocHost(&h, words * sizeof(uint64_t)));
  uint64_t* d = nullptr;
  cudaStream_t s = team.stream();
  std::vector<size_t> out(nr);
  try {
    for (size_t j = 0; j < ns; ++j) h[j] = send_counts[j];
    for (size_t i = 0; i < nr; ++i) h[ns + i] = ~uint64_t(0);
    BRAID_CUDA_CHECK(cudaMallocAsync(&d, words * sizeof(uint64_t), s));
    BRAID_CUDA_CHECK(cudaMemcpyAsync(d, h, words * sizeof(uint64_t), cudaMemcpyHostToDevice, s));
    // Every block is one element, so no block is empty and both sides post every operation.
    M2msBlocks sb, rb;
    if (si >= 0) {
      sb.counts.assign(n, 1);
      sb.displs.resize(n);
      std::iota(sb.displs.begin(), sb.displs.end(), size_t(0));
    }
    if (di >= 0) {
      rb.counts.assign(m, 1);
      rb.displs.resize(m);
      std::iota(rb.displs.begin(), rb.displs.end(), ns);
    }
    m2ms(d, sb, d, rb, ncclUint64, g, team.rank(), team.size(), team.nccl(), s);
    BRAID_CUDA_CHECK(cudaMemcpyAsync(h, d, words * sizeof(uint64_t), cudaMemcpyDeviceToHost, s));
    BRAID_CUDA_CHECK(cudaFreeAsync(d, s));
    team.synchronize(s, "m2ms count exchange");
    for (size_t i = 0; i < nr; ++i) out[i] = static_cast<size_t>(h[ns + i]);
  } catch (...) {
    // Leaked on purpose: after a failed wait the stream may still own it, and cudaFreeHost would
    // wait for the device without a bound.
    throw;
  }
  BRAID_CUDA_CHECK(cudaFreeHost(h));
  return out;
}

}  // namespace braid
