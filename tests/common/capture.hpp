// tests/common/capture.hpp — CUDA-graph capture in tests, never leaving a stream capturing.
//
// A braid call that fails inside a capture throws (BRAID_CUDA_CHECK); without this helper the stream stays in capture
// mode, and the next test's first CUDA call fails in its place (thirtieth session: one capture fault in
// test_overlap_mpi showed up as two failed tests).
#pragma once

#include <cuda_runtime.h>

#include <functional>

namespace braid::test {

// The graph captured from `enqueue` on `s` (mode: thread-local unless given), or nullptr when the capture could not
// begin or end (e.g. invalidated by an unjoined stream: the caller asserts on it). If enqueue throws, the capture is
// ended, its graph dropped and the error state cleared before the exception goes on.
inline cudaGraph_t capture_graph(cudaStream_t s, const std::function<void()>& enqueue,
                                 cudaStreamCaptureMode mode = cudaStreamCaptureModeThreadLocal) {
  cudaGraph_t graph = nullptr;
  if (cudaStreamBeginCapture(s, mode) != cudaSuccess) return nullptr;
  try {
    enqueue();
  } catch (...) {
    if (cudaStreamEndCapture(s, &graph) == cudaSuccess && graph) cudaGraphDestroy(graph);
    cudaGetLastError();  // an error recorded inside the capture is not left for the next test
    throw;
  }
  if (cudaStreamEndCapture(s, &graph) != cudaSuccess) return nullptr;
  return graph;
}

}  // namespace braid::test
