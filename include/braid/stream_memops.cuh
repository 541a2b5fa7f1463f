// braid/stream_memops.cuh — stream memory operations and the start handshake shared by the ops that move
// data with copy engines on counters (T3, FlashOverlap's peer copy-engine transport).
//
// Ordering contracts:
//   stream_write(fn, s, addr, v) : cuStreamWriteValue32 with default flags — the driver puts a memory
//                                  barrier over the stream's earlier work (e.g. a copy into the same peer)
//                                  before the write ("similar semantics to __threadfence_system()",
//                                  scoped to the stream).
//   stream_wait(fn, s, addr, v, flags) : cuStreamWaitValue32; with remote_wait_flags() (GEQ, plus FLUSH of
//                                  outstanding remote writes where the device supports it) for words that
//                                  peers write.
//   start_barrier(team, slot, s) : one block of 32 threads meets every rank's (dev::barrier_block: bounded,
//                                  a timeout raises the team's DeviceError); every write the stream ordered
//                                  before it (e.g. a reset of the words peers raise) precedes the peers'
//                                  work after theirs.
// Stream waits have no timeout of their own: release_words() satisfies every GEQ wait on a rank's words
// from a private stream (a front-end operation, no SM needed), so a failed peer never leaves a stream stuck.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>

#include "braid/errors.hpp"
#include "braid/runtime.hpp"
#include "braid/signal_device.cuh"

namespace braid::memops {

// CUDA 12 ABI, fetched through the runtime (libcuda is never linked).
using WaitValueFn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
using WriteValueFn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

// A driver entry point by name; null where absent.
inline void* driver_entry_point(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q{};
  if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return fn;
}

// The same, for an op that cannot run without it: UnavailableError naming the op (`what`) where absent.
inline void* required_entry_point(const char* name, const char* what) {
  void* fn = driver_entry_point(name);
  if (!fn)
    throw UnavailableError(std::string(what) + " needs the driver entry point " + name, __FILE__, __LINE__);
  return fn;
}

// GEQ, plus a flush of outstanding remote writes after the wait where the device supports it.
inline unsigned remote_wait_flags() {
  int dev = 0, flush = 0;
  BRAID_CUDA_CHECK(cudaGetDevice(&dev));
  if (cudaDeviceGetAttribute(&flush, cudaDevAttrCanFlushRemoteWrites, dev) != cudaSuccess) {
    cudaGetLastError();
    flush = 0;
  }
  return CU_STREAM_WAIT_VALUE_GEQ | (flush ? CU_STREAM_WAIT_VALUE_FLUSH : 0u);
}

inline void stream_wait(void* fn, cudaStream_t s, const uint32_t* addr, uint32_t value, unsigned flags) {
  const CUresult rc = reinterpret_cast<WaitValueFn>(fn)(reinterpret_cast<CUstream>(s),
                                                       reinterpret_cast<CUdeviceptr>(addr), value, flags);
  if (rc != CUDA_SUCCESS) ::braid::detail::throw_cu(rc, "cuStreamWaitValue32", __FILE__, __LINE__);
}
inline void stream_write(void* fn, cudaStream_t s, uint32_t* addr, uint32_t value) {
  const CUresult rc = reinterpret_cast<WriteValueFn>(fn)(reinterpret_cast<CUstream>(s),
                                                        reinterpret_cast<CUdeviceptr>(addr), value, 0u);
  if (rc != CUDA_SUCCESS) ::braid::detail::throw_cu(rc, "cuStreamWriteValue32", __FILE__, __LINE__);
}

// Polls `done` (cudaEventQuery / cudaStreamQuery) until it reports completion or `timeout_s` passes.
template <class Query>
bool wait_bounded(Query done, double timeout_s) {
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    const cudaError_t e = done();
    if (e == cudaSuccess) return true;
    if (e != cudaErrorNotReady) {
      cudaGetLastError();
      return false;
    }
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > timeout_s) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

// Writes 0xffffffff to `count` local words with cuStreamWriteValue32 from a private non-blocking stream:
// a front-end operation (no SM, so it runs even while a persistent kernel spins), ordered after nothing
// that could be stuck. Every GEQ wait on those words is then satisfied. Never throws.
inline void release_words(void* write_value, uint32_t* words, size_t count, double timeout_s) {
  cudaStream_t s = nullptr;
  if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
    cudaGetLastError();
    return;
  }
  for (size_t i = 0; i < count; ++i)
    if (reinterpret_cast<WriteValueFn>(write_value)(reinterpret_cast<CUstream>(s),
                                                    reinterpret_cast<CUdeviceptr>(words + i), 0xffffffffu,
                                                    0u) != CUDA_SUCCESS)
      break;
  wait_bounded([&] { return cudaStreamQuery(s); }, timeout_s);
  cudaStreamDestroy(s);
}

// The start handshake: one block of 32 threads, microseconds; it moves no data.
static __global__ void start_barrier_kernel(SignalView v, int slot) {
  dev::barrier_block(v, slot, uint32_t(OpId::kBarrier));
}
inline void start_barrier(Team& team, int slot, cudaStream_t s) {
  start_barrier_kernel<<<1, 32, 0, s>>>(team.signals(), slot);
  BRAID_CHECK_LAUNCH();
}

}  // namespace braid::memops
