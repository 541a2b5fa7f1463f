// Stand-alone driver of braid::model::bench_layer_main for trying the benchmark before the CLI wires
// `braid bench layer` (same arguments): mpirun -np 2 model_bench_driver --model llama3-8b --seq 4096.
#include <cstdio>

#include "braid/bench.hpp"
#include "braid/model.hpp"
#include "braid/runtime.hpp"

int main(int argc, char** argv) {
  try {
    braid::Runtime rt(&argc, &argv);
    braid::Team team(rt);
    const auto ctx = braid::bench::make_context(argc, argv, team.size());
    return braid::model::bench_layer_main(team, argc, argv, ctx);
  } catch (const braid::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
