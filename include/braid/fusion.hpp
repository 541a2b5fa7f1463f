// braid/fusion.hpp — Chimera communication fusion for hybrid parallelism (CPU part).
//
// ir.hpp     the dataflow IR: groups, layouts, tensors, operators
// cost.hpp   Tables 1-3 and the alpha-beta / calibrated time of each operator
// build.hpp  the transitions of Table 2 and the hybrids HP1-HP4 of Table 5
// pass.hpp   the fusion pass and the exact CPU reference executor
#pragma once

#include <functional>
#include <string>

#include <iosfwd>

#include "braid/fusion/build.hpp"
#include "braid/fusion/cost.hpp"
#include "braid/fusion/ir.hpp"
#include "braid/fusion/pass.hpp"

namespace braid::fusion {

/// `braid plan --model M --parallel tp=..,sp=..,pp=..,ep=.. [--seq S] [--batch B] [--dtype bf16|fp32]
/// [--topology nvlink|bw=GB/s,lat=us] [--calibration FILE]`: prints the communication plan before
/// and after fusion with bytes and predicted time per operator. argv[0] = "plan"; returns 0 on
/// success, 2 on a usage error (message on `out`).
int plan_main(int argc, char** argv, std::ostream& out);

/// Simulates one transition before and after fusion on a named topology ("torus2d:8x8", ...) and
/// returns the lines to print; `braid plan --simulate TOPO` passes one (SimGrid, issue 7).
using PlanSimulator = std::function<std::string(const Graph& before, const Graph& after, const std::string& topology)>;
/// plan_main with a simulator for `--simulate` (nullptr: the option is rejected).
int plan_main(int argc, char** argv, std::ostream& out, const PlanSimulator* simulate);

}  // namespace braid::fusion
