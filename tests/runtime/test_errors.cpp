// CPU: every checked-call macro throws its typed error naming the rank, the place and the library's
// own error text.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <mpi.h>
#include <nccl.h>

#include "braid/errors.hpp"

namespace {

template <class E, class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "";
}

TEST(Errors, CudaCheckThrowsCudaErrorWithNameAndPlace) {
  braid::set_current_rank(3);
  const auto m = message_of<braid::CudaError>([] { BRAID_CUDA_CHECK(cudaErrorInvalidValue); });
  EXPECT_NE(m.find("cudaErrorInvalidValue"), std::string::npos) << m;
  EXPECT_NE(m.find("rank 3"), std::string::npos) << m;
  EXPECT_NE(m.find("test_errors.cpp"), std::string::npos) << m;
  braid::set_current_rank(-1);
}

TEST(Errors, NcclCheckThrowsNcclError) {
  const auto m = message_of<braid::NcclError>([] { BRAID_NCCL_CHECK(ncclInvalidArgument); });
  EXPECT_NE(m.find("NCCL"), std::string::npos) << m;
  EXPECT_NE(m.find("ncclInvalidArgument"), std::string::npos) << m;
}

TEST(Errors, CublasCheckThrowsCublasError) {
  const auto m = message_of<braid::CublasError>([] { BRAID_CUBLAS_CHECK(CUBLAS_STATUS_INVALID_VALUE); });
  EXPECT_NE(m.find("CUBLAS_STATUS_INVALID_VALUE"), std::string::npos) << m;
}

TEST(Errors, CudnnCheckThrowsCudnnError) {
  // 2000 = CUDNN_STATUS_BAD_PARAM (cuDNN 9); named by cudnnGetErrorString when braid has cuDNN.
  const auto m = message_of<braid::CudnnError>([] { BRAID_CUDNN_CHECK(2000); });
  EXPECT_NE(m.find("cuDNN error"), std::string::npos) << m;
  EXPECT_NE(m.find("(2000)"), std::string::npos) << m;
}

TEST(Errors, CudnnFrontendCheckThrowsWithTheMessage) {
  struct FakeFeError {  // the shape of cudnn_frontend::error_t
    int code;
    bool is_bad() const { return code != 0; }
    int get_code() const { return code; }
    std::string get_message() const { return "no engine supports the graph"; }
  };
  const auto m = message_of<braid::CudnnError>([] { BRAID_CUDNN_FE_CHECK(FakeFeError{5}); });
  EXPECT_NE(m.find("no engine supports the graph"), std::string::npos) << m;
  EXPECT_NE(m.find("cudnn-frontend error 5"), std::string::npos) << m;
  EXPECT_NO_THROW(BRAID_CUDNN_FE_CHECK(FakeFeError{0}));
}

TEST(Errors, MpiCheckThrowsMpiError) {
  const auto m = message_of<braid::MpiError>([] { BRAID_MPI_CHECK(MPI_ERR_COUNT); });
  EXPECT_NE(m.find("MPI"), std::string::npos) << m;
}

TEST(Errors, DriverCheckNamesTheCode) {
  const auto m = message_of<braid::CuDriverError>([] { BRAID_CU_CHECK(1); });
  EXPECT_NE(m.find("CUresult 1"), std::string::npos) << m;
}

TEST(Errors, SuccessDoesNotThrow) {
  EXPECT_NO_THROW(BRAID_CUDA_CHECK(cudaSuccess));
  EXPECT_NO_THROW(BRAID_NCCL_CHECK(ncclSuccess));
  EXPECT_NO_THROW(BRAID_REQUIRE(1 + 1 == 2, "math"));
}

TEST(Errors, RequireThrowsUsageError) {
  EXPECT_THROW(BRAID_REQUIRE(false, "bad alignment"), braid::UsageError);
  // All typed errors are braid::Error, which the CLI catches once.
  EXPECT_THROW(BRAID_REQUIRE(false, "x"), braid::Error);
}

}  // namespace
