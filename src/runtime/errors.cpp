#include "braid/errors.hpp"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <atomic>

#if BRAID_HAVE_CUDNN
#include <cudnn.h>
#endif

namespace braid {
namespace {
std::atomic<int> g_rank{-1};

std::string basename_of(const char* file) {
  std::string f(file);
  const auto p = f.find("/src/");
  return p == std::string::npos ? f : f.substr(p + 1);
}
}  // namespace

int current_rank() { return g_rank.load(); }
void set_current_rank(int rank) { g_rank.store(rank); }

Error::Error(const std::string& kind, const std::string& what, const char* file, int line)
    : std::runtime_error("[braid " + kind + " error] rank " + std::to_string(current_rank()) + " at " +
                         basename_of(file) + ":" + std::to_string(line) + ": " + what),
      kind_(kind),
      rank_(current_rank()) {}

namespace detail {
void throw_cuda(int code, const char* expr, const char* file, int line) {
  const auto e = static_cast<cudaError_t>(code);
  throw CudaError(std::string(expr) + " -> " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e), file, line);
}
void throw_cu(int code, const char* expr, const char* file, int line) {
  // The driver library is loaded at run time (CI machines have none), so name the code only.
  throw CuDriverError(std::string(expr) + " -> CUresult " + std::to_string(code), file, line);
}
void throw_nccl(int code, const char* expr, const char* file, int line) {
  throw NcclError(std::string(expr) + " -> " + ncclGetErrorString(static_cast<ncclResult_t>(code)) + " (" +
                      std::to_string(code) + ")",
                  file, line);
}
void throw_cublas(int code, const char* expr, const char* file, int line) {
  const auto s = static_cast<cublasStatus_t>(code);
  throw CublasError(std::string(expr) + " -> " + cublasGetStatusName(s) + ": " + cublasGetStatusString(s), file,
                    line);
}
void throw_mpi(int code, const char* expr, const char* file, int line) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0, inited = 0;
  MPI_Initialized(&inited);  // Open MPI aborts on MPI_Error_string before MPI_Init
  if (inited) MPI_Error_string(code, buf, &len);
  throw MpiError(std::string(expr) + " -> MPI error " + std::to_string(code) + (len ? ": " + std::string(buf, len) : ""),
                 file, line);
}
void throw_cudnn(int code, const char* expr, const char* file, int line) {
#if BRAID_HAVE_CUDNN
  const char* name = cudnnGetErrorString(static_cast<cudnnStatus_t>(code));
#else
  const char* name = "cudnnStatus_t";
#endif
  throw CudnnError(std::string(expr) + " -> " + name + " (" + std::to_string(code) + ")", file, line);
}
void throw_cudnn_frontend(int code, const std::string& message, const char* expr, const char* file, int line) {
  throw CudnnError(std::string(expr) + " -> cudnn-frontend error " + std::to_string(code) + ": " + message, file,
                   line);
}
}  // namespace detail
}  // namespace braid
