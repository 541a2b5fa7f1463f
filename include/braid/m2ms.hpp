// braid/m2ms.hpp — Many-to-Many Scatter (Chimera, ISCA'25, Sections II-C and V-A) over NCCL.
//
// M2MS moves data from a source group of M ranks to a destination group of N ranks of one
// communicator: source i sends block In[i][j] (any size, possibly empty) to destination j. It is the
// fused operator Chimera uses for AG+P2P, AG+M2MS, P2P+A2A (MoE dispatch into another group), and
// with the two groups equal it is an all-to-all with variable counts (MoE dispatch and combine).
//
// Implementation: one NCCL group of point-to-point operations. Source i posts its sends in the
// paper's rotated order, destinations (i+0)%N, (i+1)%N, ..., (i+N-1)%N, so that at step j the
// sources target different destinations (no many-to-one hot spot); destination d posts its receives
// in the matching order (step j = (d - i) mod N, then source index). A rank may be in both groups
// (one node, two GPUs): its block to itself is a cudaMemcpyAsync on the same stream, not NCCL.
// Empty blocks post nothing on either side, so both sides must agree on the counts: exchange them
// first with m2ms_exchange_counts (a one-element M2MS of uint64 counts), outside any timed region
// when they are static.
//
// Ordering: everything is enqueued on `stream`; the send buffer must be ready in stream order and
// the receive buffer is complete when the stream reaches the end of the call. No host wait.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace braid {

class Team;

/// The two groups of one M2MS, as ranks of the communicator it runs on. Ranks may appear in both.
struct M2msGroups {
  std::vector<int> sources;       // position = source index i
  std::vector<int> destinations;  // position = destination index j
  /// Index of `rank` in sources / destinations, or -1.
  int source_index(int rank) const;
  int destination_index(int rank) const;
  /// Throws UsageError if a group is empty, holds a rank twice, or a rank is outside [0, world).
  void validate(int world) const;
};

/// Per-peer blocks of one buffer, in elements: block p is [displs[p], displs[p] + counts[p]).
struct M2msBlocks {
  std::vector<size_t> counts;
  std::vector<size_t> displs;
  size_t total() const;  // sum of counts
  /// Packed blocks (displs = exclusive prefix sums of counts).
  static M2msBlocks packed(std::vector<size_t> counts);
};

/// Bytes of one element of an NCCL data type (throws UsageError for an unknown type).
size_t nccl_type_size(ncclDataType_t t);

/// The order in which source `i` of M sends to the N destinations: (i + j) % N for j = 0..N-1.
std::vector<int> m2ms_send_order(int i, int n_destinations);
/// The order in which destination `d` receives from the M sources: by step (d - i) mod N, then i.
std::vector<int> m2ms_recv_order(int d, int n_sources, int n_destinations);

/// Enqueues one M2MS on `stream` over `comm` (this rank is `rank` of `world`).
///   send/send_blocks: used when this rank is a source; one block per destination index.
///   recv/recv_blocks: used when this rank is a destination; one block per source index.
/// Buffers of a role this rank does not have may be null/empty. Throws UsageError on inconsistent
/// arguments (block counts not matching the group sizes, a self block whose send and receive counts
/// differ) and NcclError / CudaError on a failing call. A count mismatch between two different ranks
/// cannot be detected locally: NCCL then never completes, which Team::synchronize turns into a
/// TimeoutError.
void m2ms(const void* send, const M2msBlocks& send_blocks, void* recv, const M2msBlocks& recv_blocks,
          ncclDataType_t dtype, const M2msGroups& groups, int rank, int world, ncclComm_t comm,
          cudaStream_t stream);

/// Same over a Team's communicator and stream.
void m2ms(Team& team, const void* send, const M2msBlocks& send_blocks, void* recv, const M2msBlocks& recv_blocks,
          ncclDataType_t dtype, const M2msGroups& groups);

/// Tells every destination how many elements each source will send it: a source passes its counts
/// per destination index, and a destination gets back its counts per source index (empty when this
/// rank is not a destination). Collective over the team (every rank calls, also ranks in neither
/// group); runs one tiny NCCL M2MS and waits for it with the team's bounded wait. Not for timed code.
std::vector<size_t> m2ms_exchange_counts(Team& team, const M2msGroups& groups, const std::vector<size_t>& send_counts);

}  // namespace braid
