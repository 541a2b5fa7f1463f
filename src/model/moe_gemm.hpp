// src/model/moe_gemm.hpp — grouped bf16 GEMMs over the MoE experts whose row counts live on the device: one CUTLASS
// 3.x sm_90a ptr-array grouped kernel per call (moe_gemm_impl.cuh; one translation unit per kind:
// moe_gemm_fprop.cu, moe_gemm_dgrad.cu, moe_gemm_wgrad.cu), no host synchronisation, no allocation, capturable in
// a CUDA graph: a replay reads the row counts the device holds at that moment.
//
// Tensors (bf16 = __nv_bfloat16, row-major everywhere, fp32 accumulation; group g = 0..groups-1 owns rows
// off_g = rows[0] + ... + rows[g-1] .. off_g + rows[g] - 1 of the packed activation matrices):
//   rows  int32 [groups] on the device, rows[g] >= 0 (a negative count is taken as 0)
//   fprop: A [sum(rows), K], W [groups, K, N], D [sum(rows), N]:   D[off_g + i, :] = A[off_g + i, :] · W_g
//   dgrad: A [sum(rows), K], W [groups, N, K], D [sum(rows), N]:   D[off_g + i, :] = A[off_g + i, :] · W_g^T
//   wgrad: A [sum(rows), M], B [sum(rows), N], G [groups, M, N]:   G_g = beta·G_g + A_g^T · B_g (K = rows_g);
//          a group with rows_g = 0 gives beta·G_g (exact zeros at beta = 0, G_g untouched at beta = 1)
// Only the first sum(rows) rows of A, B and D are ever read or written (the kernel bounds every group's TMA
// boxes by its problem shape), so the buffers may be sized for a capacity and hold anything past sum(rows).
// N and K (fprop/dgrad) and M and N (wgrad) must be positive multiples of 8 and every base pointer 16-byte
// aligned (TMA); UsageError otherwise.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

namespace braid::model::detail {

using bf16 = __nv_bfloat16;

// One grouped GEMM per expert group g = 0..groups-1. rows: device int32[groups], rows[g] >= 0 is group g's row
// count; its rows start at row off_g = rows[0] + ... + rows[g-1] of the packed activation matrices.
//   fprop: D[off_g + i, :] (rows_g x N, ld N) = A[off_g + i, :] (ld K) · W_g          W_g = W + g·K·N, [K, N] row-major
//   dgrad: D[off_g + i, :] (rows_g x N, ld N) = A[off_g + i, :] (ld K) · W_g^T        W_g = W + g·N·K, [N, K] row-major
//   wgrad: G_g[M, N] = beta·G_g + A_g^T · B_g   with A_g = rows off_g.. of A [*, M] (ld M), B_g = rows of B [*, N]
//          (ld N), K = rows_g; G_g = G + g·M·N. A group with rows_g = 0 gives beta·G_g (zeros at beta = 0): CUTLASS's
//          main loop leaves the accumulators uninitialised at K = 0, so such a group gets an empty problem (M = 0)
//          and a separate small kernel scales (or zeroes) its G_g; at beta = 1 that kernel is not launched.
// Each call launches, on `s`, one small fill kernel (device problem shapes, per-group pointers and strides from
// rows[]) and then the CUTLASS kernel (wgrad with beta != 1: first the empty groups' scaling kernel). No host
// synchronisation, no allocation, capturable in a CUDA graph.
// One GroupedGemm object has at most one call in flight (its device argument arrays and TMA-descriptor workspace
// are reused); give each call site its own object. Calls in one stream's order are fine (each waits for the last);
// a captured graph uses the object's arrays too, so it must not replay while another call of the object runs.
// The object belongs to the device current at construction; call it with that device current.
class GroupedGemm {
 public:
  explicit GroupedGemm(int max_groups);  // allocates the device arrays and the CUTLASS workspace (for all SMs)
  ~GroupedGemm();
  GroupedGemm(const GroupedGemm&) = delete;
  GroupedGemm& operator=(const GroupedGemm&) = delete;
  // sm_count > 0 caps the persistent grid (a GEMM leaving SMs to a concurrent collective); 0: every SM. A cap above
  // the device's SM count is the device's SM count; the grid is whole clusters (BRAID_MOE_CLUSTER_M CTAs, 1 by default;
  // with 2: a cap of 1 runs 2 CTAs, an odd cap one CTA fewer). Takes effect from the next call (a graph keeps the count it was captured with).
  void set_sm_count(int sm_count);
  void fprop(cudaStream_t s, const int* rows, int groups, int64_t N, int64_t K, const bf16* A, const bf16* W, bf16* D);
  void dgrad(cudaStream_t s, const int* rows, int groups, int64_t N, int64_t K, const bf16* A, const bf16* W, bf16* D);
  void wgrad(cudaStream_t s, const int* rows, int groups, int64_t M, int64_t N, const bf16* A, const bf16* B, bf16* G,
             float beta);

  struct State;  // moe_gemm_impl.cuh

 private:
  std::unique_ptr<State> state_;
};

}  // namespace braid::model::detail
