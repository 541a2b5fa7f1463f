// The pipelined, warp-specialized fused quantized all-reduce (Flash Communication two-step; design in
// docs/flash-communication.md, "Design for the next step"). Included by allreduce.cu after
// allreduce_kernels.cuh; selected by AllReduceOptions::quant_impl / BRAID_AR_QUANT_IMPL=pipelined.
//
// Same arithmetic, grouping, chunking and workspace layout as quant_allreduce_kernel (so the output is
// bit-identical to quant_ref); only the order of the work and the synchronisation change:
//
// * Block b owns groups [g0, g1) of every chunk (as the classic kernel), cut into R sub-rounds of
//   config::kRoundElems elements (kRoundElems / G groups). Worker thread w handles, in sub-round t, the
//   16 values (one "unit") at group  g0 + t*SRG + p*(kWorkerWarps*GPW) + warp*GPW + lane/TPG,  lane slice
//   lane % TPG, for p < kPasses, in every chunk (TPG = G/16 lanes per group, GPW = 32/TPG groups per warp).
//   16 values per thread: one 16-byte store of INT8 codes (INT4: 8 bytes; a warp's store covers 512 or
//   256 contiguous bytes either way, i.e. whole 128-byte lines on the link).
// * Warps 0..kWorkerWarps-1 compute; warp kWorkerWarps (the "comm warp") only signals and waits. Worker
//   step t (t = 0 .. R+1):
//       S1(t)   quantize sub-round t of every chunk, push it to its owner (own chunk: shared memory)
//       S2(t-1) after the comm warp saw every peer's S1(t-1): dequantize + sum in rank order, requantize,
//               push to every peer's all-gather slot, and decode the own chunk straight into `out`
//       S3(t-2) after the comm warp saw every peer's S2(t-2): decode the other chunks into `out`
//   so the link carries S1(t) while HBM serves S2(t-1) and S3(t-2), and a worker never waits on a fence:
//   the comm warp fences (fence.acq_rel.sys + st.release.sys) while the workers go on.
// * One signal slot per block, one monotonic flag per (slot, peer): each launch a peer writes the 2R
//   event indices RS(0), RS(1), AG(0), RS(2), AG(1), ..., AG(R-1) (epoch base + index + 1) in this
//   order, so "flag >= value of event e" means "e and everything released before it". The slot's device
//   epoch advances by 2R per launch (barrier_block of the classic kernel advances the same counter, so
//   both kernels can share the slots).
// * Own contribution: the owner's step-1 codes never leave the SM: a worker keeps them in its private
//   shared-memory slot (double-buffered by sub-round) and reads them back itself in S2. The owner's own
//   all-gather codes are decoded directly in S2 instead of being stored and re-read. Both are the same
//   bytes/arithmetic as the classic path (fma(q, scale, zero) from the same fp16 scale/zero).
// * Named barriers (ids, producers -> consumer):
//       kBarS1 + (t&1)  workers arrive after S1(t)          -> comm syncs, then signals RS(t)
//       kBarRsReady     comm arrives after seeing RS(t-1)   -> workers sync before S2(t-1)
//       kBarS2          workers arrive after S2(t-1)        -> comm syncs, then signals AG(t-1)
//       kBarAgReady+(t&1) comm arrives after seeing AG(t-2) -> workers sync before S3(t-2)
//   No producer can arrive twice on an id before the consumer's sync of the earlier phase completed:
//   between two arrivals on one id the producer syncs on a barrier that the consumer only arrives at after
//   that sync (kBarS1 and kBarAgReady alternate ids because at t = 0 / t = R+1 there is no such barrier in
//   between). The comm warp never skips a barrier, also after a timeout (it stops waiting on flags then),
//   so a dead peer makes the kernel finish with garbage and a recorded TimeoutError, never hang.
// * Graph-capturable and in-place safe as the classic kernel: workspace phase by the device launch
//   counter (seq), every block only reads `in` in S1 and writes `out` for the same elements later.
//   Workspace reuse across launches: every block of a launch waits on at least one flag of every peer in
//   that launch (R >= 1), so launch k+2 on one rank starts only after every peer finished launch k.
#pragma once

#include "allreduce_kernels.cuh"

namespace braid::ar::pipe {

// Compile-time budgets of the pipelined kernel (checked below; registers with -Xptxas -v on allreduce.cu).
struct config {
  static constexpr int kWorkerWarps = 8;
  static constexpr int kWorkerThreads = kWorkerWarps * 32;
  static constexpr int kThreads = kWorkerThreads + 32;  // + the comm warp
  static constexpr int kVpt = 16;                       // values per worker thread per unit
  static constexpr int kPasses = 2;                     // units per chunk per sub-round per thread (ILP)
  static constexpr int kRoundElems = kPasses * kWorkerThreads * kVpt;  // elements per chunk per sub-round
  static constexpr int kMinBlocksPerSm = 3;             // __launch_bounds__ occupancy target
  static constexpr int kRegsPerThread = (65536 / (kThreads * kMinBlocksPerSm)) / 8 * 8;  // ptxas cap: 72
  // Shared memory: own step-1 codes (16 B) + metadata (4 B) per worker per pass, two sub-rounds.
  static constexpr int kSmemBytes = 2 * kPasses * kWorkerThreads * (16 + 4);
  // Named barrier ids (0 is __syncthreads).
  static constexpr int kBarS1 = 1, kBarRsReady = 3, kBarS2 = 4, kBarAgReady = 5, kBarLast = 6;

  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "block size");
  static_assert(kThreads * kMinBlocksPerSm <= 2048, "Hopper: 2048 threads per SM");
  static_assert(kRegsPerThread >= 64, "register budget: the worker loops need ~64 registers without spills");
  static_assert(kSmemBytes <= 48 * 1024, "static shared memory limit");
  static_assert(kSmemBytes * kMinBlocksPerSm <= 227 * 1024, "Hopper: 227 KiB shared memory per SM");
  static_assert(kBarLast < 16, "16 named barriers per CTA");
  static_assert(kRoundElems % 256 == 0, "a sub-round holds whole groups of every size (32..256)");
  static_assert(kPasses == 2, "the loops are written for two units in flight");
};

// Values of a thread's 16 that lie before the end.
__device__ __forceinline__ int valid16(uint64_t left) { return left < 16 ? static_cast<int>(left) : 16; }

template <int DT>
__device__ __forceinline__ void load16(const uint16_t* p, int valid, float (&v)[16]) {
  if (valid == 16) {  // 32-byte aligned: unit starts are multiples of 16 elements, base 16-byte aligned
    const uint4 a = reinterpret_cast<const uint4*>(p)[0];
    const uint4 b = reinterpret_cast<const uint4*>(p)[1];
    unpack2<DT>(a.x, v[0], v[1]);
    unpack2<DT>(a.y, v[2], v[3]);
    unpack2<DT>(a.z, v[4], v[5]);
    unpack2<DT>(a.w, v[6], v[7]);
    unpack2<DT>(b.x, v[8], v[9]);
    unpack2<DT>(b.y, v[10], v[11]);
    unpack2<DT>(b.z, v[12], v[13]);
    unpack2<DT>(b.w, v[14], v[15]);
  } else {
#pragma unroll
    for (int j = 0; j < 16; ++j) v[j] = j < valid ? load_scalar<DT>(p + j) : 0.f;
  }
}
template <int DT>
__device__ __forceinline__ void store16(uint16_t* p, int valid, const float (&v)[16]) {
  uint32_t w[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) w[j] = to_bits<DT>(v[2 * j]) | (static_cast<uint32_t>(to_bits<DT>(v[2 * j + 1])) << 16);
  if (valid == 16) {
    reinterpret_cast<uint4*>(p)[0] = make_uint4(w[0], w[1], w[2], w[3]);
    reinterpret_cast<uint4*>(p)[1] = make_uint4(w[4], w[5], w[6], w[7]);
  } else {
#pragma unroll
    for (int j = 0; j < 16; ++j)
      if (j < valid) p[j] = static_cast<uint16_t>(w[j / 2] >> (16 * (j % 2)));
  }
}

// Min/max over the valid values of the TPG lanes of a group (every lane of the warp must call it).
template <int TPG>
__device__ __forceinline__ void minmax16(const float (&v)[16], int valid, float& mn, float& mx) {
  mn = __int_as_float(0x7f800000);
  mx = __int_as_float(0xff800000);
#pragma unroll
  for (int j = 0; j < 16; ++j)
    if (j < valid) {
      mn = fminf(mn, v[j]);
      mx = fmaxf(mx, v[j]);
    }
#pragma unroll
  for (int off = TPG / 2; off >= 1; off /= 2) {
    mn = fminf(mn, __shfl_xor_sync(0xffffffffu, mn, off));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
  }
}

// Codes of 16 values: INT8 one byte each in .x..w (element j in byte j); INT4 a nibble each in .x, .y
// (element j in nibble j, even element low: the format of docs/flash-communication.md).
template <int BITS>
__device__ __forceinline__ uint4 quantize16(const float (&v)[16], int valid, const quant::GroupParams& p) {
  uint32_t w[4] = {0u, 0u, 0u, 0u};
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const uint32_t qv = j < valid ? quant::quantize_one(v[j], p, BITS) : 0u;
    if constexpr (BITS == 8) w[j / 4] |= qv << (8 * (j % 4));
    else w[j / 8] |= qv << (4 * (j % 8));
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}
template <int BITS>
__device__ __forceinline__ void decode16(uint4 c, uint32_t meta, float (&v)[16]) {
  quant::GroupParams p;
  p.scale = quant::half_bits_to_float(static_cast<uint16_t>(meta & 0xffffu));
  p.zero = quant::half_bits_to_float(static_cast<uint16_t>(meta >> 16));
  const uint32_t w[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const uint32_t qv = BITS == 8 ? (w[j / 4] >> (8 * (j % 4))) & 0xffu : (w[j / 8] >> (4 * (j % 8))) & 0xfu;
    v[j] = quant::dequantize_one(qv, p);
  }
}
template <int BITS>
__device__ __forceinline__ void store_codes(uint8_t* p, uint4 c) {
  if constexpr (BITS == 8) *reinterpret_cast<uint4*>(p) = c;
  else *reinterpret_cast<uint2*>(p) = make_uint2(c.x, c.y);
}
template <int BITS>
__device__ __forceinline__ uint4 load_codes(const uint8_t* p) {
  if constexpr (BITS == 8) return *reinterpret_cast<const uint4*>(p);
  const uint2 w = *reinterpret_cast<const uint2*>(p);
  return make_uint4(w.x, w.y, 0u, 0u);
}
__device__ __forceinline__ uint32_t meta_word(const quant::GroupParams& p) {
  return static_cast<uint32_t>(p.scale_h) | static_cast<uint32_t>(p.zero_h) << 16;
}

// Where one worker's units lie in a sub-round.
template <int G>
struct Units {
  static constexpr int kTpg = G / config::kVpt;      // lanes per group
  static constexpr int kGpw = 32 / kTpg;             // groups per warp
  static constexpr int kPassGroups = config::kWorkerWarps * kGpw;
  static constexpr int kRoundGroups = config::kRoundElems / G;
  static_assert(kTpg >= 2 && kTpg <= 16 && kRoundGroups == config::kPasses * kPassGroups, "unit mapping");
  int lig;       // lane within the group
  int gsub;      // group within a pass
  __device__ __forceinline__ Units() {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    lig = lane % kTpg;
    gsub = warp * kGpw + lane / kTpg;
  }
  __device__ __forceinline__ uint64_t group(uint64_t round_base, int p) const {
    return round_base + static_cast<uint64_t>(p) * kPassGroups + gsub;
  }
};

// Per-launch constants of one block.
struct Ctx {
  uint64_t phase_off;  // workspace phase
  uint64_t g1;         // end of this block's group range
};

// S1(t): quantize this block's sub-round of every chunk (own chunk last) and push it to its owner's RS
// slot [rank]; the own chunk goes to this thread's shared-memory slot.
template <int DT, int B1, int G>
__device__ __forceinline__ void s1(const uint16_t* in, const QuantGeom& q, const QuantWorkspace& ws, const Ctx& cx,
                                   uint64_t base, uint4* own_codes, uint32_t* own_meta) {
  const Units<G> u;
  constexpr int P = config::kPasses;
  for (int i = 1; i <= q.world; ++i) {
    const int r = (q.rank + i) % q.world;
    const uint64_t c0 = q.stride * r;
    float v[P][16];
    int valid[P];
    uint64_t gi[P];
#pragma unroll
    for (int p = 0; p < P; ++p) {
      gi[p] = u.group(base, p);
      const uint64_t e = c0 + gi[p] * G + u.lig * 16;
      valid[p] = gi[p] < cx.g1 && e < q.n ? valid16(q.n - e) : 0;
      load16<DT>(in + (valid[p] ? e : 0), valid[p], v[p]);
    }
    uint8_t* slot = ws.base[r] + cx.phase_off + static_cast<uint64_t>(q.rank) * ws.slot_bytes;
#pragma unroll
    for (int p = 0; p < P; ++p) {
      float mn, mx;
      minmax16<Units<G>::kTpg>(v[p], valid[p], mn, mx);
      if (valid[p] > 0) {
        const quant::GroupParams prm = quant::make_params(mn, mx, B1);
        const uint4 c = quantize16<B1>(v[p], valid[p], prm);
        if (r == q.rank) {
          own_codes[p * config::kWorkerThreads + threadIdx.x] = c;
          own_meta[p * config::kWorkerThreads + threadIdx.x] = meta_word(prm);
        } else {
          store_codes<B1>(slot + gi[p] * (G * B1 / 8) + u.lig * (2 * B1), c);
          if (u.lig == 0) reinterpret_cast<uint32_t*>(slot + q.meta_out)[gi[p]] = meta_word(prm);
        }
      }
    }
  }
}

// S2(k): sum the W contributions of this block's sub-round of the own chunk in rank order, requantize,
// push to every peer's AG slot [rank], decode the own copy into `out`.
template <int DT, int B1, int B2, int G>
__device__ __forceinline__ void s2(uint16_t* out, const QuantGeom& q, const QuantWorkspace& ws, const Ctx& cx,
                                   uint64_t base, const uint4* own_codes, const uint32_t* own_meta) {
  const Units<G> u;
  constexpr int P = config::kPasses;
  const uint64_t c0 = q.stride * q.rank;
  uint64_t gi[P], e[P];
  int valid[P];
  float sum[P][16];
#pragma unroll
  for (int p = 0; p < P; ++p) {
    gi[p] = u.group(base, p);
    e[p] = c0 + gi[p] * G + u.lig * 16;
    valid[p] = gi[p] < cx.g1 && e[p] < q.n ? valid16(q.n - e[p]) : 0;
#pragma unroll
    for (int j = 0; j < 16; ++j) sum[p][j] = 0.f;
  }
  const uint8_t* rs = ws.base[q.rank] + cx.phase_off;
  for (int s = 0; s < q.world; ++s) {
    uint4 c[P];
    uint32_t m[P];
#pragma unroll
    for (int p = 0; p < P; ++p) {
      c[p] = make_uint4(0u, 0u, 0u, 0u);
      m[p] = 0u;
      if (valid[p] > 0) {
        if (s == q.rank) {
          c[p] = own_codes[p * config::kWorkerThreads + threadIdx.x];
          m[p] = own_meta[p * config::kWorkerThreads + threadIdx.x];
        } else {
          const uint8_t* src = rs + static_cast<uint64_t>(s) * ws.slot_bytes;
          c[p] = load_codes<B1>(src + gi[p] * (G * B1 / 8) + u.lig * (2 * B1));
          m[p] = reinterpret_cast<const uint32_t*>(src + q.meta_in)[gi[p]];
        }
      }
    }
#pragma unroll
    for (int p = 0; p < P; ++p) {
      float x[16];
      decode16<B1>(c[p], m[p], x);
#pragma unroll
      for (int j = 0; j < 16; ++j) sum[p][j] = __fadd_rn(sum[p][j], x[j]);
    }
  }
#pragma unroll
  for (int p = 0; p < P; ++p) {
    float mn, mx;
    minmax16<Units<G>::kTpg>(sum[p], valid[p], mn, mx);
    if (valid[p] > 0) {
      const quant::GroupParams prm = quant::make_params(mn, mx, B2);
      const uint4 c = quantize16<B2>(sum[p], valid[p], prm);
      const uint32_t m = meta_word(prm);
      for (int i = 1; i < q.world; ++i) {
        const int r = (q.rank + i) % q.world;
        uint8_t* dst = ws.base[r] + cx.phase_off + static_cast<uint64_t>(q.world + q.rank) * ws.slot_bytes;
        store_codes<B2>(dst + gi[p] * (G * B2 / 8) + u.lig * (2 * B2), c);
        if (u.lig == 0) reinterpret_cast<uint32_t*>(dst + q.meta_out)[gi[p]] = m;
      }
      float y[16];
      decode16<B2>(c, m, y);  // what every peer decodes from these bytes
      store16<DT>(out + e[p], valid[p], y);
    }
  }
}

// S3(k): decode this block's sub-round of every other chunk from the local AG slots into `out`.
template <int DT, int B2, int G>
__device__ __forceinline__ void s3(uint16_t* out, const QuantGeom& q, const QuantWorkspace& ws, const Ctx& cx,
                                   uint64_t base) {
  const Units<G> u;
  constexpr int P = config::kPasses;
  for (int i = 1; i < q.world; ++i) {
    const int c = (q.rank + i) % q.world;
    const uint64_t c0 = q.stride * c;
    const uint8_t* src = ws.base[q.rank] + cx.phase_off + static_cast<uint64_t>(q.world + c) * ws.slot_bytes;
    uint64_t e[P];
    int valid[P];
    uint4 cw[P];
    uint32_t m[P];
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const uint64_t gi = u.group(base, p);
      e[p] = c0 + gi * G + u.lig * 16;
      valid[p] = gi < cx.g1 && e[p] < q.n ? valid16(q.n - e[p]) : 0;
      if (valid[p] > 0) {
        cw[p] = load_codes<B2>(src + gi * (G * B2 / 8) + u.lig * (2 * B2));
        m[p] = reinterpret_cast<const uint32_t*>(src + q.meta_in)[gi];
      }
    }
#pragma unroll
    for (int p = 0; p < P; ++p)
      if (valid[p] > 0) {
        float y[16];
        decode16<B2>(cw[p], m[p], y);
        store16<DT>(out + e[p], valid[p], y);
      }
  }
}

// Event indices of one launch on a block's slot (order of the comm warp's signals, see the top).
__device__ __forceinline__ uint32_t rs_event(int t) { return t == 0 ? 0u : static_cast<uint32_t>(2 * t - 1); }
__device__ __forceinline__ uint32_t ag_event(int k, int rounds) {
  return k + 1 < rounds ? static_cast<uint32_t>(2 * k + 2) : static_cast<uint32_t>(2 * rounds - 1);
}

template <int DT, int BITS1, int BITS2, int G>
__global__ void __launch_bounds__(config::kThreads, config::kMinBlocksPerSm)
    quant_pipelined_kernel(const uint16_t* in, uint16_t* out, const __grid_constant__ QuantGeom q,
                           const __grid_constant__ QuantWorkspace ws, const __grid_constant__ SignalView sig,
                           int slot0, uint32_t* seq) {
  constexpr int NT = config::kThreads;
  constexpr int SRG = Units<G>::kRoundGroups;
  __shared__ uint4 s_codes[2][config::kPasses * config::kWorkerThreads];
  __shared__ uint32_t s_meta[2][config::kPasses * config::kWorkerThreads];
  const int slot = slot0 + blockIdx.x;
  Ctx cx;
  cx.phase_off = static_cast<uint64_t>(launch_phase(seq)) * 2 * q.world * ws.slot_bytes;
  uint64_t g0;
  block_group_range(q.stride / G, g0, cx.g1);
  const int rounds = static_cast<int>((cx.g1 - g0 + SRG - 1) / SRG);

  if (threadIdx.x < config::kWorkerThreads) {
    for (int t = 0; t <= rounds + 1; ++t) {
      if (t < rounds) {
        s1<DT, BITS1, G>(in, q, ws, cx, g0 + static_cast<uint64_t>(t) * SRG, s_codes[t & 1], s_meta[t & 1]);
        __syncwarp();
        dev::named_arrive(config::kBarS1 + (t & 1), NT);
      }
      if (t >= 1 && t <= rounds) {
        dev::named_sync(config::kBarRsReady, NT);
        const int k = t - 1;
        s2<DT, BITS1, BITS2, G>(out, q, ws, cx, g0 + static_cast<uint64_t>(k) * SRG, s_codes[k & 1], s_meta[k & 1]);
        __syncwarp();
        dev::named_arrive(config::kBarS2, NT);
      }
      if (t >= 2) {
        dev::named_sync(config::kBarAgReady + (t & 1), NT);
        s3<DT, BITS2, G>(out, q, ws, cx, g0 + static_cast<uint64_t>(t - 2) * SRG);
      }
    }
  } else {
    // The comm warp. `ok` goes false after a timeout: no more waits, but every barrier is still met.
    const uint32_t op = static_cast<uint32_t>(OpId::kAllReduceQuant);
    uint32_t ep = 0;
    if ((threadIdx.x & 31u) == 0) ep = sig.epochs[slot];
    ep = __shfl_sync(0xffffffffu, ep, 0);
    bool ok = true;
    for (int t = 0; t <= rounds + 1; ++t) {
      if (t < rounds) dev::named_sync(config::kBarS1 + (t & 1), NT);   // workers' S1(t) stores issued
      if (t >= 1 && t <= rounds) {
        if (ok) ok = dev::warp_wait_peers(sig, slot, ep + rs_event(t - 1) + 1, op);  // peers' S1(t-1) landed
        __syncwarp();
        dev::named_arrive(config::kBarRsReady, NT);                    // workers may run S2(t-1)
      }
      if (t < rounds) dev::warp_signal_peers(sig, slot, ep + rs_event(t) + 1);  // fence while workers run S2
      if (t >= 1 && t <= rounds) dev::named_sync(config::kBarS2, NT);  // workers' S2(t-1) stores issued
      if (t >= 2) {
        if (ok) ok = dev::warp_wait_peers(sig, slot, ep + ag_event(t - 2, rounds) + 1, op);  // peers' S2(t-2)
        __syncwarp();
        dev::named_arrive(config::kBarAgReady + (t & 1), NT);          // workers may run S3(t-2)
      }
      if (t >= 1 && t <= rounds) dev::warp_signal_peers(sig, slot, ep + ag_event(t - 1, rounds) + 1);
    }
    if ((threadIdx.x & 31u) == 0) sig.epochs[slot] = ep + 2u * static_cast<uint32_t>(rounds);
  }
  finish_launch(seq);
}

}  // namespace braid::ar::pipe
