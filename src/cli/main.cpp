// braid — command-line entry point. Every subcommand's errors arrive here as braid::Error.
//
//   braid info [--no-probe] [--count]
//   braid bench nccl --op allreduce|reducescatter|allgather|alltoall -b 64K -e 1G -f 2 [--dtype bf16]
//                    [--iters 50] [--warmup 10] [--graph] [--json FILE]
//   braid bench p2p [--bytes 256M] [--bidir] [--blocks 8,16,...] [--json FILE] (copy engine, SM loads/stores, TMA bulk copies)
// Multi-GPU commands run one process per GPU: mpirun -np <GPUs> braid bench ...
#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "braid/bench.hpp"
#include "braid/cli_options.hpp"
#include "braid/errors.hpp"
#include "braid/fusion.hpp"
#include "braid/fusion/gpu.hpp"
#include "braid/info.hpp"
#include "braid/model.hpp"
#include "braid/overlap.hpp"
#include "braid/schedule.hpp"
#include "braid/schedule/pipeline_exec.hpp"
#include "braid/schedule/strands.hpp"
#include "braid/t3.hpp"
#ifdef BRAID_HAVE_SIM
#include "braid/sim.hpp"
#endif
#include "braid/runtime.hpp"
#include "braid/watchdog.hpp"

namespace {

using braid::UsageError;

const char* kUsage =
    "usage: braid <command> [options]\n"
    "  info [--no-probe] [--count]       GPUs, links, probed peer access, versions\n"
    "  bench nccl --op OP -b MIN -e MAX -f FACTOR [--dtype bf16|fp16|fp32] [--iters N] [--warmup N]\n"
    "             [--graph] [--json FILE]  NCCL baseline sweep (OP: allreduce reducescatter allgather alltoall)\n"
    "  bench allreduce [--algo nccl,oneshot,twoshot,oneshot-sym,twoshot-sym,oneshot-ce-sym,int8,int6,int4,int8-nccl,int8-1step,int6-1step,int4-1step,...] -b MIN -e MAX -f F\n"
    "                  [--dtype bf16|fp16] [--dist normal|student-t|outlier] [--group 128] [--json FILE]\n"
    "                  [--write-table tuning/allreduce.tsv] [--phases (time each phase of *-nccl alone)]\n"
    "                  [--iters N] [--warmup N] [--graph | --batch B (B back-to-back calls per event pair, as\n"
    "                  nccl-tests)] [--lead US (GPU idle before the timed calls, so the host queues them first)]\n"
    "                                    braid all-reduce vs NCCL, verified (quantized: vs CPU reference)\n"
    "                                    int8-pipe / int8-classic (int6, int4 too): that fused kernel; plain\n"
    "                                    int8 follows BRAID_AR_QUANT_IMPL=classic|pipelined (default classic)\n"
    "  bench transitions [--transition tp+sp,tp+ep,sp+ep] [--model M] [--seq 1024,4096] [--dtype bf16,fp32]\n"
    "                    [--json FILE]     Chimera: fused vs unfused parallelism transitions, verified\n"
    "  bench gemm-rs|gemm-ar --shape M,N,K | --shapes FILE [--json FILE] [--measure FILE [--no-tune]] [--cache FILE]\n"
    "                    [--transport kernels|symmetric|copy-engine|peer-copy-engine,...] [--tune-candidates K]\n"
    "                    [--pce-reserves 16,0] [--pce-pull-last] [--pce-stores [--pce-bulk] | --pce-modes copies,stores]\n"
    "                    [--owner [--owner-chunks 1,2,4] [--owner-phases]: also the owner-ordered RS / AR, the per-shape\n"
    "                    pick; --owner-phases: its phase boundaries, medians of 20 stamped runs]\n"
    "                    [--auto [--picks FILE] [--no-auto-t3 | --auto-t3 t3-ring-cublas,t3-ring-dma,t3-direct-tma,...]\n"
    "                     [--no-auto-pull]: also AutoGemmComm, the library's per-shape\n"
    "                     schedule (T3's ops among its candidates unless --no-auto-t3, and cuBLAS then braid's\n"
    "                     reduce-scatter by pulls over peer memory unless --no-auto-pull), tuned and cached]\n"
    "                    [--probe-pce: the peer copy-engine transport's per-call costs]\n"
    "                                    FlashOverlap: GEMM with tile-group signalling overlapped with NCCL\n"
    "  bench gemm-a2a --shape M,N,K | --shapes FILE [--json FILE] [--groups w0,..] [--seed S]\n"
    "                 [--transport kernels|peer-copy-engine|peer-stores|both|all,...]  (FlashOverlap GEMM + all-to-all)\n"
    "  bench gemm-cublaslt --shape M,N,K | --shapes FILE [--algos 8] [--json FILE]  (one GPU)\n"
    "                                    cuBLASLt's top configurations (tile, stages, split-K, cluster) per GEMM,\n"
    "                                    verified and timed beside cublasGemmEx (scripts/cublaslt-names.py names them)\n"
    "  bench t3-gemm-rs --algo sequential,flashoverlap,t3-ring,t3-ring-dma,t3-ring-cublas,t3-direct,t3-direct-tma,t3-auto\n"
    "        --shape M,N,K [--rounds R] [--profile-range] | ag-gemm --algo sequential,t3\n"
    "                                    T3: track-and-trigger GEMM+RS and AG+GEMM (no SMs for communication);\n"
    "                                    --profile-range: one run per algo as a profiler range (ncu app-range)\n"
    "  bench layer --model llama3-70b --tp 2 --seq 8192 [--moe] [--capacity C | --moe-sizes host|device] [--backward] [--comm nccl|peer|peer-ce]\n"
    "              [--json FILE]\n"
    "                                    the transformer layer workload: time per operator, MFU, tokens/s\n"
    "  bench comm [--comm nccl,nccl-ce,peer,peer-ce,allreducer] [--ce-in-place 0|1] [--op allgather,reducescatter,allreduce,alltoall] [-b 1M] [-e 256M] [-f 4]\n"
    "             [--gemm M,N,K [--gemm-sm-reserve SMS] | --no-gemm] [--throttle CTAS] [--json FILE]\n"
    "                                    the layer's Comm implementations (NCCL; braid's peer comm on SMs or copy\n"
    "                                    engines), verified, alone and beside a cuBLAS GEMM on a second stream\n"
    "  bench p2p [--bytes 256M] [--bidir] [--blocks 8,16,32,66,132] [--chunks K] [--json FILE]\n"
    "                                    peer copy rates: copy engine (also as K copies: alone, flagged, after\n"
    "                                    events), SM push, SM pull (1 / 4 loads in flight)\n"
    "  plan --model M --parallel tp=..,sp=..,pp=..,ep=.. [--seq S] [--batch B] [--topology T] [--simulate TOPO]\n"
    "                                    Chimera: communication plan before/after fusion (no GPU needed)\n"
    "  plan-overlap --inputs FILE [--transport kernels|symmetric|copy-engine|peer-copy-engine] [--max-groups G] [--candidates K]\n"
    "                                    FlashOverlap: the wave-group search replayed on measured inputs (no GPU)\n"
    "  plan-strands --model M --tp 2 [--ep 2] --seq S [--pairs FILE] [--out PLAN]\n"
    "                                    DHelix: pairing search over a pair profile (synthetic without FILE)\n"
    "  simulate collective|transition|hybrid|calibrate --topology torus2d:8x8|mesh2d:..|fattree:..|table4 ...\n"
    "                                    SimGrid scale-out simulation of collectives and fused transitions\n"
    "  bench strands --model llama3-70b|llama3-8b|mixtral-8x7b --tp 2 [--ep 2] --seq S [--plan FILE]\n"
    "                [--pairs FILE] [--throttle CTAS] [--decompose CHUNKS] [--gemm-sm-reserve SMS] [--no-graph]\n"
    "                [--layers L [--no-chain]] [--op-trace] [--verify-only] [--open-chunks K] [--capacity C | --moe-sizes host|device] [--comm nccl|nccl-ce|peer|peer-ce]\n"
    "                [--replicated-grads backward|step[:M]] [--json FILE]\n"
    "                                    DHelix on the GPU: strands vs single strand vs round-robin vs\n"
    "                                    intra-batch decomposition, verified; --layers L: a stack of L\n"
    "                                    layers (two strands hold L + 1 layers' activations), its units\n"
    "                                    also chained (spare slot; split slots within 1.05x memory)\n"
    "  bench pipeline [--model llama3-8b] [--seq 4096] [--microbatches 8] [--layers-per-chunk 1] [--channel-ctas 2] [--recv-ahead -1] [--channels auto|nccl|peer|ce,...] [--w-si corun,fb,bf] [--json FILE]\n"
    "                                    DHelix: W-shaped (folded, SI blocks) vs 1F1B vs no pipelining on\n"
    "                                    real layers, one stage per rank, verified bit for bit\n"
    "  profile-pairs --model M --tp 2 [--ep 2] --seq S [--out PAIRS] [--plan-out PLAN] [--throttle CTAS]\n"
    "                [--capacity C | --moe-sizes host|device]\n"
    "                                    DHelix: measured solo/co-run operator times (pair file) and a plan\n"
    "  pipeline --stages 2,4,8 --microbatches M --schedule 1f1b|w|both\n"
    "                                    DHelix: W-shaped vs 1F1B pipeline simulation (bubble, memory)\n"
    "                                    rank0<->rank1 bandwidth: copy engine, SM push, SM pull\n"
    "Multi-GPU commands: mpirun -np <GPUs> braid bench ...\n"
    "Environment: BRAID_DEADLINE_S=S ends the whole job (exit 124, naming the command) if it runs longer than S\n"
    "  seconds: a hang that no bounded wait catches becomes an error.\n";

// --key value / --flag options after the subcommand words.
using braid::cli::Options;
Options parse(int argc, char** argv, const std::vector<std::string>& flags) { return braid::cli::parse_options(argc, argv, flags); }

int cmd_info(const Options& o) {
  if (o.has("--count")) {
    std::cout << braid::visible_gpu_count() << "\n";
    return 0;
  }
  int argc = 0;
  char** argv = nullptr;
  braid::Runtime rt(&argc, &argv, /*need_gpu=*/false);
  braid::print_info(std::cout, !o.has("--no-probe"));
  return 0;
}

braid::bench::TimingOptions timing(const Options& o, int warmup, int iters) {
  braid::bench::TimingOptions t;
  t.warmup = std::stoi(o.get("--warmup", std::to_string(warmup)));
  t.iters = std::stoi(o.get("--iters", std::to_string(iters)));
  if (t.iters < 1 || t.warmup < 0) throw UsageError("--iters must be >= 1 and --warmup >= 0", __FILE__, __LINE__);
  t.batch = std::stoi(o.get("--batch", "1"));
  t.lead_us = std::stoi(o.get("--lead", std::to_string(t.lead_us)));
  if (t.batch < 1 || t.lead_us < 0) throw UsageError("--batch must be >= 1 and --lead >= 0 (us)", __FILE__, __LINE__);
  return t;
}

int cmd_bench(int argc, char** argv, const Options& o) {
  if (o.words.size() < 2) throw UsageError(std::string("bench needs a target\n") + kUsage, __FILE__, __LINE__);
  const std::string what = o.words[1];
  braid::Runtime rt(&argc, &argv);
  braid::Team team(rt);
  const auto ctx = braid::bench::make_context(argc, argv, team.size());
  if (what == "nccl") {
    braid::bench::NcclBenchArgs a;
    a.op = o.get("--op", "allreduce");
    a.min_bytes = braid::bench::parse_size(o.get("-b", "64K"));
    a.max_bytes = braid::bench::parse_size(o.get("-e", "1G"));
    a.factor = std::stod(o.get("-f", "2"));
    if (a.factor <= 1.0) throw UsageError("-f must be > 1", __FILE__, __LINE__);
    a.dtype = braid::bench::parse_dtype(o.get("--dtype", "bf16"));
    a.timing = timing(o, 10, 50);
    a.graph = o.has("--graph");
    a.json = o.get("--json", "");
    a.ctx = ctx;
    return braid::bench::run_nccl_bench(team, a) == 0 ? 0 : 3;
  }
  if (what == "allreduce") {
    braid::bench::AllReduceBenchArgs a;
    if (o.has("--algo")) a.algos = braid::bench::split_list(o.get("--algo", ""));
    a.min_bytes = braid::bench::parse_size(o.get("-b", "64K"));
    a.max_bytes = braid::bench::parse_size(o.get("-e", "1G"));
    a.factor = std::stod(o.get("-f", "2"));
    if (a.factor <= 1.0) throw UsageError("-f must be > 1", __FILE__, __LINE__);
    a.dtype = braid::bench::parse_dtype(o.get("--dtype", "bf16"));
    a.dist = o.get("--dist", "normal");
    a.group = std::stoi(o.get("--group", "128"));
    a.timing = timing(o, 10, 50);
    a.json = o.get("--json", "");
    a.write_table = o.get("--write-table", "");
    a.graph = o.has("--graph");
    a.phases = o.has("--phases");
    a.ctx = ctx;
    return braid::bench::run_allreduce_bench(team, a) == 0 ? 0 : 3;
  }
  if (what == "transitions") return braid::fusion::bench_transitions(team, argc, argv, ctx);
  if (what == "layer") return braid::model::bench_layer_main(team, argc, argv, ctx);
  if (what == "comm") return braid::model::bench_comm_main(team, argc, argv, ctx);
  if (what == "strands") return braid::schedule::bench_strands_main(team, argc, argv, ctx);
  if (what == "pipeline") return braid::schedule::bench_pipeline_main(team, argc, argv, ctx);
  if (what == "gemm-rs" || what == "gemm-ar" || what == "gemm-a2a" || what == "t3-gemm-rs" || what == "ag-gemm" ||
      what == "gemm-cublaslt") {
    // These bench_main functions take argv[0] = the bench name, then its options.
    std::vector<char*> args;
    bool seen = false;
    for (int i = 1; i < argc; ++i) {
      if (!seen && what == argv[i]) seen = true;
      if (seen) args.push_back(argv[i]);
    }
    const int n = static_cast<int>(args.size());
    if (what == "t3-gemm-rs" || what == "ag-gemm") return braid::t3::bench_main(team, n, args.data(), ctx);
    if (what == "gemm-a2a") return braid::overlap::bench_a2a_main(team, n, args.data(), ctx);
    if (what == "gemm-cublaslt") return braid::overlap::bench_cublaslt_main(team, n, args.data(), ctx);
    return braid::overlap::bench_main(team, n, args.data(), ctx);
  }
  if (what == "p2p") {
    braid::bench::P2pBenchArgs a;
    a.bytes = braid::bench::parse_size(o.get("--bytes", "256M"));
    a.bidir = o.has("--bidir");
    a.chunks = std::stoi(o.get("--chunks", "1"));
    if (o.has("--blocks")) {
      a.blocks.clear();
      std::istringstream list(o.get("--blocks", ""));
      for (std::string b; std::getline(list, b, ',');)
        if (!b.empty()) a.blocks.push_back(std::stoi(b));
    }
    a.timing = timing(o, 5, 20);
    a.json = o.get("--json", "");
    a.ctx = ctx;
    return braid::bench::run_p2p_bench(team, a) == 0 ? 0 : 3;
  }
  throw UsageError("unknown bench target '" + what + "'\n" + kUsage, __FILE__, __LINE__);
}

}  // namespace

int main(int argc, char** argv) {
  // BRAID_DEADLINE_S: the whole command's budget (off by default). A hang that no bounded wait catches
  // (a host thread blocked in a driver call, a dead peer) then ends the job with exit code 124 and a
  // message naming the command, instead of running until a scheduler kills it.
  std::string what = "braid";
  for (int i = 1; i < argc; ++i) what += std::string(" ") + argv[i];
  // Line-buffered stdout (a pipe under mpirun is otherwise block-buffered): the watchdog ends a hung job with
  // _Exit, which drops buffered output, so without this the last progress lines before a hang would be lost.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const char* rank_env = std::getenv("OMPI_COMM_WORLD_RANK");
  braid::Watchdog watchdog(0, rank_env ? std::atoi(rank_env) : 0);
  watchdog.rearm(braid::Watchdog::seconds_from_env("BRAID_DEADLINE_S", 0), what);
  try {
    const Options o = parse(argc, argv, {"--graph", "--phases", "--count", "--no-probe", "--help", "-h"});
    if (o.words.empty() || o.has("--help") || o.has("-h") || o.words[0] == "help") {
      std::cout << kUsage;
      return o.words.empty() && !o.has("--help") && !o.has("-h") ? 1 : 0;
    }
    const std::string cmd = o.words[0];
    if (cmd == "info") return cmd_info(o);
    if (cmd == "plan") {
#ifdef BRAID_HAVE_SIM
      // --simulate TOPO: each transition before and after fusion, simulated on SimGrid.
      const braid::fusion::PlanSimulator sim = [](const braid::fusion::Graph& before,
                                                  const braid::fusion::Graph& after, const std::string& topo) {
        const auto t = braid::sim::parse_topology(topo);
        const double b = braid::sim::total_seconds(braid::sim::simulate_graph(before, t));
        const double a = braid::sim::total_seconds(braid::sim::simulate_graph(after, t));
        char line[200];
        std::snprintf(line, sizeof line, "  simulated on %s (SimGrid, ideal links): %.1f -> %.1f us (%.2fx)\n",
                      topo.c_str(), b * 1e6, a * 1e6, a > 0 ? b / a : 0.0);
        return std::string(line);
      };
      return braid::fusion::plan_main(argc - 1, argv + 1, std::cout, &sim);
#else
      return braid::fusion::plan_main(argc - 1, argv + 1, std::cout);
#endif
    }
    if (cmd == "plan-strands") return braid::schedule::plan_strands_main(argc - 1, argv + 1, std::cout);
    if (cmd == "plan-overlap") return braid::overlap::plan_overlap_main(argc - 2, argv + 2, std::cout);
    if (cmd == "profile-pairs") {
      braid::Runtime rt(&argc, &argv);
      braid::Team team(rt);
      const auto ctx = braid::bench::make_context(argc, argv, team.size());
      return braid::schedule::profile_pairs_main(team, argc, argv, ctx);
    }
    if (cmd == "pipeline") return braid::schedule::simulate_pipeline_main(argc - 1, argv + 1, std::cout);
    if (cmd == "simulate") {
#ifdef BRAID_HAVE_SIM
      return braid::sim::simulate_main(argc - 1, argv + 1, std::cout);
#else
      throw braid::UnavailableError("braid was built without SimGrid (apt-get install libsimgrid-dev)", __FILE__,
                                    __LINE__);
#endif
    }
    if (cmd == "bench") return cmd_bench(argc, argv, o);
    throw UsageError("unknown command '" + cmd + "'\n" + kUsage, __FILE__, __LINE__);
  } catch (const braid::UnavailableError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  } catch (const braid::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[braid error] rank %d: %s\n", braid::current_rank(), e.what());
    return 1;
  }
}
