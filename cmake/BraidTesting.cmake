# Test helpers. Three kinds, laid out like the sources under tests/<component>/:
#   braid_cpu_test(NAME src...)        runs everywhere.
#   braid_gpu_test(NAME src...)        needs one GPU; exits 77 (reported by ctest as Skipped) without.
#   braid_mpi_test(NAME NP src...)     NP processes under mpirun, one GPU each; skipped (77) when the
#                                      node has fewer than NP GPUs, before mpirun is ever started.
# GPU and MPI test mains come from tests/common (gpu_main.cpp / mpi_main.cpp).
find_package(GTest QUIET)
if(NOT GTest_FOUND)
  # Debian's googletest sources, or the copy scripts/setup.sh carries to the GPU node.
  foreach(_gt ${BRAID_DEPS_DIR}/googletest /usr/src/googletest)
    if(EXISTS ${_gt}/CMakeLists.txt)
      set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
      set(BUILD_GMOCK OFF CACHE BOOL "" FORCE)
      add_subdirectory(${_gt} ${CMAKE_BINARY_DIR}/googletest EXCLUDE_FROM_ALL)
      add_library(GTest::gtest ALIAS gtest)
      add_library(GTest::gtest_main ALIAS gtest_main)
      set(GTest_FOUND TRUE)
      break()
    endif()
  endforeach()
endif()
if(NOT GTest_FOUND)
  message(FATAL_ERROR "GoogleTest not found: run scripts/setup.sh")
endif()

set(BRAID_SKIP_CODE 77)

function(braid_cpu_test name)
  add_executable(${name} ${ARGN})
  target_link_libraries(${name} PRIVATE braid GTest::gtest_main)
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES LABELS cpu TIMEOUT 300)
endfunction()

function(braid_gpu_test name)
  add_executable(${name} ${ARGN} ${CMAKE_SOURCE_DIR}/tests/common/gpu_main.cpp)
  target_link_libraries(${name} PRIVATE braid GTest::gtest)
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR}/tests/common)
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES LABELS gpu SKIP_RETURN_CODE ${BRAID_SKIP_CODE} TIMEOUT 600)
endfunction()

function(braid_mpi_test name np)
  add_executable(${name} ${ARGN} ${CMAKE_SOURCE_DIR}/tests/common/mpi_main.cpp)
  target_link_libraries(${name} PRIVATE braid GTest::gtest)
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR}/tests/common)
  add_test(NAME ${name}
           COMMAND ${CMAKE_SOURCE_DIR}/tests/common/run_mpi.sh ${np} $<TARGET_FILE:${name}>)
  set_tests_properties(${name} PROPERTIES LABELS "gpu;mpi" SKIP_RETURN_CODE ${BRAID_SKIP_CODE}
                       TIMEOUT 600 PROCESSORS ${np})
endfunction()

# braid_mpi_test_worlds(NAME W...): the same multi-rank test binary again at W ranks (ctest entries
# NAME_npW), for the tests written for any world size; skipped (77) on nodes with fewer than W GPUs, so
# a 4- or 8-GPU node runs them with plain `ctest` (issue 10).
function(braid_mpi_test_worlds name)
  foreach(w ${ARGN})
    add_test(NAME ${name}_np${w}
             COMMAND ${CMAKE_SOURCE_DIR}/tests/common/run_mpi.sh ${w} $<TARGET_FILE:${name}>)
    set_tests_properties(${name}_np${w} PROPERTIES LABELS "gpu;mpi" SKIP_RETURN_CODE ${BRAID_SKIP_CODE}
                         TIMEOUT 900 PROCESSORS ${w})
  endforeach()
endfunction()

# braid_mpi_test_shared(NAME W...): the multi-rank test again with W ranks sharing one GPU
# (BRAID_SHARED_GPU=1, ctest entries NAME_sharedW): a functional check of the peer-memory paths on a
# one-GPU node. No NCCL in such a team; the ranks' kernels time-slice, so its times mean nothing.
function(braid_mpi_test_shared name)
  foreach(w ${ARGN})
    add_test(NAME ${name}_shared${w}
             COMMAND ${CMAKE_COMMAND} -E env BRAID_SHARED_GPU=1
                     ${CMAKE_SOURCE_DIR}/tests/common/run_mpi.sh ${w} $<TARGET_FILE:${name}>)
    set_tests_properties(${name}_shared${w} PROPERTIES LABELS "gpu;mpi" SKIP_RETURN_CODE ${BRAID_SKIP_CODE}
                         TIMEOUT 900 PROCESSORS ${w})
  endforeach()
endfunction()
