// braid/model.hpp — the transformer-layer workload: model description and operator view (config.hpp),
// float64 CPU reference (reference.hpp), the communication interface (comm.hpp), the GPU layer
// (layer.hpp) and the `braid bench layer` entry point. See docs/layer.md.
#pragma once

#include "braid/model/comm.hpp"
#include "braid/model/config.hpp"
#include "braid/model/layer.hpp"
#include "braid/model/reference.hpp"

namespace braid {
class Team;
namespace bench {
struct Context;
}
}  // namespace braid

namespace braid::model {

// `braid bench layer --model llama3-70b --tp 2 --seq 8192 [--mb 1] [--moe] [--backward] [--no-sp]
//  [--ar nccl|auto|oneshot|twoshot|int8...] [--iters N] [--warmup N] [--json FILE]`.
// Verifies the layer first (a small shape against the CPU reference on every rank), then times
// forward (and backward) at the asked shape: per-operator times, communication time, MFU against
// 989 TFLOP/s per GPU, tokens/s. Returns 0 on success, 3 when verification failed.
int bench_layer_main(Team& team, int argc, char** argv, const bench::Context& ctx);

// `braid bench comm [--comm nccl,nccl-ce,peer,peer-ce] [--op allgather,reducescatter,allreduce,alltoall] [-b 1M] [-e 256M]
//  [-f 4] [--gemm M,N,K [--gemm-sm-reserve SMS] | --no-gemm] [--throttle CTAS] [--iters N] [--warmup N]
//  [--json FILE]`: the Comm implementations per collective and size (bf16; nccl-tests' sizes, algbw and busbw),
// verified bit for bit, timed alone and — k calls — beside one cuBLAS GEMM on a second stream: the GEMM's and the
// collectives' slowdowns and the fraction of the shorter one hidden. --throttle caps NCCL's CTAs (the strands'
// throttled link). Returns 0, or 3 when a row failed verification.
int bench_comm_main(Team& team, int argc, char** argv, const bench::Context& ctx);

}  // namespace braid::model
