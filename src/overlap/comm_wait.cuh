// comm_wait.cuh — the comm stream's wait for a wave group's counter (FlashOverlap: GemmOverlap and
// GemmAllToAll): cuStreamWaitValue32 through the driver entry point, or a bounded spin kernel.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "braid/errors.hpp"
#include "braid/stream_memops.cuh"

namespace braid::overlap::detail {

struct WaitError {
  uint32_t code;      // 0 none, 1 timeout
  uint32_t group;
  uint32_t expected;
  uint32_t observed;
};

// Bounded wait of the comm stream for one group: acquire at gpu scope pairs with the GEMM epilogue's
// red.release.gpu, so NCCL (launched after this kernel on the same stream) reads the finished group.
static __global__ void wait_counter_kernel(const uint32_t* counter, uint32_t expected, uint32_t group, uint64_t timeout_ns,
                                    WaitError* err) {
  uint32_t seen;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(counter) : "memory");
  if (seen >= expected) return;
  uint64_t start;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  for (uint32_t it = 1;; ++it) {
    asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(counter) : "memory");
    if (seen >= expected) {
      asm volatile("fence.acq_rel.gpu;" ::: "memory");
      return;
    }
    if ((it & 1023u) == 0u) {
      uint64_t now;
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
      if (now - start > timeout_ns) {
        if (atomicCAS(&err->code, 0u, 1u) == 0u) {
          err->group = group;
          err->expected = expected;
          err->observed = seen;
          __threadfence_system();
        }
        return;
      }
      __nanosleep(200);
    }
  }
}

// cuStreamWaitValue32 through the runtime (null where absent).
inline void* wait_value_entry_point() { return memops::driver_entry_point("cuStreamWaitValue32"); }

// Throws TimeoutError if a spin wait recorded a timeout in `err_host` (`what`: the op, for the message).
inline void throw_if_wait_timed_out(const void* err_host, int rank, const char* what) {
  const auto* e = static_cast<const volatile WaitError*>(err_host);
  if (e->code != 0)
    throw TimeoutError("rank " + std::to_string(rank) + ": " + what + " wait for group " + std::to_string(e->group) +
                           " timed out (counter " + std::to_string(e->observed) + " of " +
                           std::to_string(e->expected) + ")",
                       __FILE__, __LINE__);
}

// Enqueues the wait of `comm` for counter >= expected: cuStreamWaitValue32 if `wait_value` (its entry
// point) is set, else the bounded spin kernel recording a timeout in `err_host` (pinned, mapped).
inline void enqueue_group_wait(void* wait_value, cudaStream_t comm, uint32_t* counter, uint32_t expected, int group,
                               uint64_t timeout_ns, void* err_host) {
  if (wait_value) return memops::stream_wait(wait_value, comm, counter, expected, CU_STREAM_WAIT_VALUE_GEQ);
  WaitError* err_dev = nullptr;
  BRAID_CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&err_dev), err_host, 0));
  wait_counter_kernel<<<1, 1, 0, comm>>>(counter, expected, uint32_t(group), timeout_ns, err_dev);
  BRAID_CHECK_LAUNCH();
}

}  // namespace braid::overlap::detail
