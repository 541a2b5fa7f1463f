// braid/schedule.hpp — DHelix strand interleaving (CPU part): operator descriptions, pair profiles
// and the OEF, the pairing search of eq. (2), and the W-shaped pipeline generator and simulator.
//
// schedule/ops.hpp       operator DAGs of one layer; synthetic Llama TP+SP and MoE/EP layers
// schedule/profile.hpp   pair tables (solo / co-run times), eq. (1), the pair file format
// schedule/pairing.hpp   topological orders, the DP, the search, the plan file
// schedule/pipeline.hpp  1F1B and W-shaped schedules, simulator (bubble ratio, peak activations)
#pragma once

#include <iosfwd>

#include "braid/schedule/ops.hpp"
#include "braid/schedule/pairing.hpp"
#include "braid/schedule/pipeline.hpp"
#include "braid/schedule/profile.hpp"

namespace braid::schedule {

/// `braid plan-strands --model llama3-70b|llama3-8b|mixtral-8x7b --tp N [--ep N] --seq N
/// [--batch B] [--pairs FILE] [--write-pairs FILE] [--out PLAN] [--max-seg K] [--max-orders N]
/// [--ep-link local|cross]`: searches the strand-interleaving plan of one layer and prints it with
/// the predicted overlap. argv[0] = "plan-strands"; returns 0, or 2 on a usage error (message on
/// `out`).
int plan_strands_main(int argc, char** argv, std::ostream& out);

/// `braid pipeline --stages P --microbatches M [--schedule 1f1b|w|both] [--t-fwd F] [--t-bwd B]
/// [--si-factor X] [--timeline]`: simulates the schedules and prints bubble ratio and peak
/// activation memory. argv[0] = "pipeline"; returns 0, or 2 on a usage error.
int simulate_pipeline_main(int argc, char** argv, std::ostream& out);

}  // namespace braid::schedule
