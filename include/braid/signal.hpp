// braid/signal.hpp — host-visible types shared by the device signalling primitives
// (braid/signal_device.cuh) and the host runtime.
#pragma once

#include <cstdint>

namespace braid {

// Largest number of ranks that share symmetric peer memory (one NVLink domain of an HGX node).
inline constexpr int kMaxPeers = 8;

// Operation ids recorded in the error word; names come from op_name().
enum class OpId : uint32_t {
  kNone = 0,
  kBarrier = 1,
  kPeerProbe = 2,
  kFlagWait = 3,
  kAllReduceOneShot = 10,
  kAllReduceTwoShot = 11,
  kAllReduceQuant = 12,
  kAllReduceSymmetric = 13,
  kPeerComm = 14,  // model::make_peer_comm's barriers
  kRowsExchange = 15,  // model::Comm::all_to_all_rows (a bound exceeded)
  kTest = 99,
};
const char* op_name(uint32_t op);

// Written by the first device wait that times out (code 0 -> nonzero by atomicCAS), read by the host.
// Lives in pinned, host-mapped memory so the host can read it while a kernel is still stuck.
// Code 2: a device-side bound was exceeded (expected = the bound, observed = the value; e.g. a rows exchange whose
// device counts exceed its buffers: the kernel moved nothing and recorded this instead of overrunning).
struct DeviceError {
  uint32_t code;      // 0: none; 1: timeout; 2: bound exceeded
  uint32_t op;        // OpId
  uint32_t flag;      // flag slot index that was waited on
  int32_t peer;       // rank expected to signal it
  uint32_t expected;  // epoch waited for
  uint32_t observed;  // last value seen
  int32_t rank;       // rank that waited
  uint32_t block;     // blockIdx.x of the waiter
};

// Everything a kernel needs to signal peers, passed by value (graph-capturable: no host state).
// Flags are 32-bit epoch counters, never reset: a wait is for "flag >= epoch" (wrap-safe compare).
// Layout of each rank's flag array: slot-major, [num_slots][kMaxPeers]; entry [s][p] is written by
// peer p for slot s.
struct SignalView {
  uint32_t* local_flags;               // this rank's flags, (num_slots, kMaxPeers)
  uint32_t* peer_flags[kMaxPeers];     // peer r's flag array (peer_flags[rank] == local_flags)
  uint32_t* epochs;                    // this rank's device-local epoch per slot, (num_slots)
  DeviceError* err;                    // host-mapped error word
  int rank;
  int world;
  int num_slots;
  uint64_t timeout_ns;                 // bound of every wait
  // barrier_block's ordering instructions (both give its contract; environment BRAID_BARRIER):
  //   0 ("fence"): fence.acq_rel.sys, st.release.sys; poll relaxed, then fence.acq_rel.sys.
  //   1 ("release", the default): st.release.sys alone (cumulative over the block's writes ordered by
  //      the bar.sync before it); poll with ld.acquire.sys (the bar.sync after it extends the acquire
  //      to the block).
  int barrier_mode;
};

}  // namespace braid
