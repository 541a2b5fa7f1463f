// braid/errors.hpp — typed errors and one checked-call macro per API family.
//
// Every failing call throws a subclass of braid::Error whose message names the rank, the file and
// line, the expression and the library's own error string. The CLI's main catches braid::Error once.
#pragma once

#include <stdexcept>
#include <string>

namespace braid {

// The rank of this process in the world (set by the runtime at start-up; -1 before).
int current_rank();
void set_current_rank(int rank);

class Error : public std::runtime_error {
 public:
  Error(const std::string& kind, const std::string& what, const char* file, int line);
  const std::string& kind() const { return kind_; }
  int rank() const { return rank_; }

 private:
  std::string kind_;
  int rank_;
};

struct CudaError : Error { CudaError(const std::string& w, const char* f, int l) : Error("CUDA", w, f, l) {} };
struct CuDriverError : Error { CuDriverError(const std::string& w, const char* f, int l) : Error("CUDA driver", w, f, l) {} };
struct NcclError : Error { NcclError(const std::string& w, const char* f, int l) : Error("NCCL", w, f, l) {} };
struct CublasError : Error { CublasError(const std::string& w, const char* f, int l) : Error("cuBLAS", w, f, l) {} };
// cuDNN (fused attention; only when braid is built with cuDNN): a backend status or a cudnn-frontend
// error (graph validation, no engine supports the shape, ...).
struct CudnnError : Error { CudnnError(const std::string& w, const char* f, int l) : Error("cuDNN", w, f, l) {} };
struct MpiError : Error { MpiError(const std::string& w, const char* f, int l) : Error("MPI", w, f, l) {} };
// A bounded wait expired: a peer never signalled, or a collective never completed.
struct TimeoutError : Error { TimeoutError(const std::string& w, const char* f, int l) : Error("timeout", w, f, l) {} };
// Bad arguments from the caller (sizes, alignment, unsupported dtype, ...).
struct UsageError : Error { UsageError(const std::string& w, const char* f, int l) : Error("usage", w, f, l) {} };
// No GPU / not enough GPUs / no peer access: callers (tests) turn this into a visible skip.
struct UnavailableError : Error { UnavailableError(const std::string& w, const char* f, int l) : Error("unavailable", w, f, l) {} };

namespace detail {
[[noreturn]] void throw_cuda(int code, const char* expr, const char* file, int line);
[[noreturn]] void throw_cu(int code, const char* expr, const char* file, int line);
[[noreturn]] void throw_nccl(int code, const char* expr, const char* file, int line);
[[noreturn]] void throw_cublas(int code, const char* expr, const char* file, int line);
[[noreturn]] void throw_mpi(int code, const char* expr, const char* file, int line);
[[noreturn]] void throw_cudnn(int code, const char* expr, const char* file, int line);
[[noreturn]] void throw_cudnn_frontend(int code, const std::string& message, const char* expr, const char* file,
                                       int line);
}  // namespace detail

}  // namespace braid

// All six families use 0 for success (cudaSuccess, CUDA_SUCCESS, ncclSuccess, CUBLAS_STATUS_SUCCESS,
// MPI_SUCCESS, CUDNN_STATUS_SUCCESS), so one shape of macro serves; each names its family for the error type.
#define BRAID_CHECK_FAMILY_(fn, call)                                            \
  do {                                                                           \
    const int braid_rc_ = static_cast<int>(call);                                \
    if (braid_rc_ != 0) ::braid::detail::fn(braid_rc_, #call, __FILE__, __LINE__); \
  } while (0)

#define BRAID_CUDA_CHECK(call) BRAID_CHECK_FAMILY_(throw_cuda, call)
#define BRAID_CU_CHECK(call) BRAID_CHECK_FAMILY_(throw_cu, call)
#define BRAID_NCCL_CHECK(call) BRAID_CHECK_FAMILY_(throw_nccl, call)
#define BRAID_CUBLAS_CHECK(call) BRAID_CHECK_FAMILY_(throw_cublas, call)
#define BRAID_MPI_CHECK(call) BRAID_CHECK_FAMILY_(throw_mpi, call)
#define BRAID_CUDNN_CHECK(call) BRAID_CHECK_FAMILY_(throw_cudnn, call)
// cudnn-frontend calls return cudnn_frontend::error_t (is_bad(), get_code(), get_message()).
#define BRAID_CUDNN_FE_CHECK(call)                                                                    \
  do {                                                                                                \
    auto braid_fe_ = (call);                                                                          \
    if (braid_fe_.is_bad())                                                                           \
      ::braid::detail::throw_cudnn_frontend(static_cast<int>(braid_fe_.get_code()), braid_fe_.get_message(), \
                                            #call, __FILE__, __LINE__);                               \
  } while (0)
// After every kernel launch.
#define BRAID_CHECK_LAUNCH() BRAID_CUDA_CHECK(cudaGetLastError())

#define BRAID_REQUIRE(cond, msg)                                           \
  do {                                                                     \
    if (!(cond)) throw ::braid::UsageError(std::string(msg), __FILE__, __LINE__); \
  } while (0)
