// braid/schedule/pipeline_exec.hpp — pipeline parallelism on real layers (DHelix §5: model folding and
// the W-shaped schedule, against 1F1B): one stage per rank, a PipeSchedule (make_1f1b, make_w_shaped, or
// the un-pipelined make_sequential_pipe) executed with model::Layer chunks (tensor parallelism 1 inside
// a stage), activations and their gradients passed between stages by channels (copy engines, or NCCL send/recv), and the W
// schedule's SI blocks (a forward task and a backward task on one stage) co-executed layer pair by layer
// pair by the strand executor. A schedule from split_si_blocks has no SI block (its halves run one after the
// other, the better form for these TP = 1 stages: docs/dhelix.md, sixty-fifth session).
//
//   PipelineExecutor w(team, cfg, make_w_shaped(team.size(), M), {.layers_per_chunk = 1});
//   w.step(stream);                      // M micro-batches forward and backward, gradients accumulated
//   auto h = team.allreduce_max(w.grad_hashes());   // compare with another executor's, bit for bit
//
// Data of one step: micro-batch m's input to chunk 0 is uniform(-1, 1) from seed + 1000 + m; its output
// gradient at the last chunk is uniform(-1e-2, 1e-2) from seed + 2000 + m; global layer l (chunk
// l / layers_per_chunk) has weights init_random_weights(seed + l). Two executors of the same model
// (same total layers) therefore compute the same numbers, whatever their chunking and schedule.
//
// Buffers: each chunk keeps plan_slots(s, rank).count[c] activation sets ("slots"); slot 0's layers own
// the chunk's weights and its accumulating weight gradients, the other slots share both
// (model::Layer::Share::kAll). Channels: one stream (and, over NCCL, one communicator) per direction of every
// chunk boundary that crosses ranks (each is a FIFO in micro-batch order, check_channel_order, so sends
// and receives of different boundaries never wait on each other), with one buffer per micro-batch on
// both ends: a send goes from a copy and a receive lands in the channel's buffer, then is copied into
// the slot, so no slot waits for a transfer and only the schedule's data dependencies link the ranks.
// Every wait is stream-ordered; nothing synchronises the host inside step(). Transports (PipeChannel): by
// default, at two stages where the ranks have peer access, copy engines — cudaMemcpyAsync writes the receiver's buffer and
// stream memory operations (cuStreamWriteValue32 / cuStreamWaitValue32) carry the "arrived" and "consumed" flags,
// so no SM waits or copies beside the stage's GEMMs (a posted NCCL receive holds its CTAs there for the whole
// wait; copy engines made 1F1B 7% and the split W schedule 9% faster on 2x H200: docs/dhelix.md, sixty-sixth
// session). Else NCCL send/recv (and above two stages, until copy engines are measured there); kPeerKernel (the sender's blocks push into the receiver's buffer and count
// arrivals on its flag, a one-thread kernel waits) is kept for comparison (pipeline_exec.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "braid/model/config.hpp"
#include "braid/schedule/pipeline.hpp"

namespace braid {
class Team;
namespace bench {
struct Context;
}
}  // namespace braid

namespace braid::schedule {

// How the chunk-boundary channels move activations between stages.
enum class PipeChannel {
  kAuto,        // kCopyEngine at two stages where the ranks have peer access, else NCCL send/recv, else kPeerKernel
  kNccl,        // NCCL send/recv, one communicator per channel (channel_ctas CTAs each)
  kPeerKernel,  // peer memory: a 32-block push kernel and a one-thread flag wait (needs peer access)
  kCopyEngine,  // peer memory: cudaMemcpyAsync to the peer (a copy engine) and stream memory operations for
                // the flags; no SM waits or copies (needs peer access and the driver's stream memory operations)
};
const char* pipe_channel_name(PipeChannel c);      // "auto", "nccl", "peer", "ce"
PipeChannel parse_pipe_channel(const std::string& name);  // UsageError for anything else

struct PipeExecOptions {
  int layers_per_chunk = 1;  // layers of one chunk of the schedule
  uint64_t seed = 1;         // weights and data, see the file comment
  // CTAs NCCL may use for each chunk-boundary channel (ncclConfig_t maxCTAs; 0: NCCL's default). A posted
  // receive occupies its CTAs while it waits beside the stage's compute: with 2 the 2x H200 runs were
  // 4-7% faster than NCCL's default (bench/results/h200x2, seventh session).
  int channel_ctas = 2;
  // When a channel's receive is posted: -1 as soon as the host enqueues the step (the receive's kernel then waits on
  // its stream, holding its CTAs beside the stage's compute until the data comes); k >= 0: only once the compute
  // stream reaches the slot k slots before the one that consumes it (a test of whether posted receives slow the
  // stage's GEMMs: docs/dhelix.md, "Where the PP executor's step goes").
  int recv_ahead = -1;
  PipeChannel channels = PipeChannel::kAuto;
};

/// One slot of a step on this rank, timed with events on the compute stream (set_block_timing): what the
/// stage's compute stream spent on it. Microseconds; start_us from the step's start (after zeroing gradients).
struct BlockTiming {
  int tasks = 0;             // 1, or 2 for an SI block
  bool backward = false;     // the single task's direction (an SI block: false)
  int mb = 0, chunk = 0;     // the single task's (an SI block: its forward's)
  double start_us = 0;       // when the compute stream reached the block
  double prepare_us = 0;     // its inputs: a local copy, or the wait for a channel's receive and the copy out of it
  double run_us = 0;         // its layers (an SI block: both tasks', co-executed)
  double finish_us = 0;      // handing its outputs on (a copy into a channel's buffer or the output)
};

class PipelineExecutor {
 public:
  // Collective over `team` (team.size() == s.stages; every rank builds the same channels in the same
  // order). The model must be dense (the MoE dispatch synchronises the host).
  PipelineExecutor(Team& team, const model::ModelConfig& c, const PipeSchedule& s, const PipeExecOptions& opt = {});
  ~PipelineExecutor();
  PipelineExecutor(const PipelineExecutor&) = delete;
  PipelineExecutor& operator=(const PipelineExecutor&) = delete;

  // One training step (zero the gradients, then this rank's slots in order), enqueued on `stream`: the
  // executor's streams fork from it and join back into it.
  void step(cudaStream_t stream);

  // After a step (each waits for the executor's streams, bounded by the team's timeout, then synchronises the
  // device): 52-bit hashes computed on the device (bench::device_hash52), as doubles, of the bits of the
  // last chunk's output per micro-batch and of the first chunk's input gradient per micro-batch (0 on a
  // rank without that chunk), and of each global layer's weight gradients (Layer::grad_buffers; 0 where another
  // rank holds the layer). Team::allreduce_max of them is the same on every rank and comparable between executors.
  std::vector<double> output_hashes() const;
  std::vector<double> input_grad_hashes() const;
  std::vector<double> grad_hashes() const;

  // Timing events around every slot of the next steps (off by default: events cost a little). After a timed
  // step, block_timings() (synchronises the device) gives this rank's slots, and zero_us / step_us the
  // gradients' zeroing before them and the compute stream's whole step.
  void set_block_timing(bool on);
  std::vector<BlockTiming> block_timings(double* zero_us = nullptr, double* step_us = nullptr) const;

  int total_layers() const;
  // The channel transport in use (PipeExecOptions::channels, kAuto resolved).
  PipeChannel channels() const;
  int activation_sets() const;   // slots x layers this rank holds
  const PipeSchedule& schedule() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// `braid bench pipeline [--model llama3-8b] [--seq 4096] [--microbatches 8] [--layers-per-chunk 1]
/// [--iters 5] [--warmup 2] [--w-si corun,fb,bf] [--json FILE]`: with P = ranks stages, the un-pipelined
/// reference, 1F1B (P chunks of 2 x layers-per-chunk layers) and the W-shaped schedule (2P folded chunks; its
/// SI blocks co-run, or split by split_si_blocks), one model of 2P x layers-per-chunk layers. Verifies every
/// output, input gradient and weight gradient of each against the reference bit for bit, then times them;
/// prints the simulator's prediction from measured one-layer times beside each, and where each stage's step
/// went (one more step with block timing: layers against their one-layer times, input waits and copies,
/// gaps) with the GPU clock during the timed steps and during the one-layer timing. Returns 0, or 3 when a
/// check failed.
int bench_pipeline_main(Team& team, int argc, char** argv, const bench::Context& ctx);

}  // namespace braid::schedule
