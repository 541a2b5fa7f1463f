// `braid plan-strands` and `braid pipeline`: the DHelix planner and pipeline simulator on the CLI.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <map>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "braid/errors.hpp"
#include "braid/schedule.hpp"
#include "braid/schedule/strands.hpp"

namespace braid::schedule {

namespace {

// --key value options; every option takes a value except those in `flags`.
std::map<std::string, std::string> parse_options(int argc, char** argv, const std::vector<std::string>& known,
                                                 const std::vector<std::string>& flags) {
  std::map<std::string, std::string> kv;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    std::string what = "unknown option '";  // built by append: GCC 12 -Wrestrict false positive
    what.append(a).append("'");
    bool ok = false, flag = false;
    for (const auto& k : known) ok |= k == a;
    for (const auto& f : flags) flag |= f == a;
    if (!ok && !flag) throw UsageError(what, __FILE__, __LINE__);
    if (i + 1 >= argc && !flag) throw UsageError("option " + a + " needs a value", __FILE__, __LINE__);
    kv.insert_or_assign(a, std::string(flag ? "1" : argv[++i]));
  }
  return kv;
}

long to_long(const std::string& key, const std::string& v) {
  try {
    size_t pos = 0;
    const long x = std::stol(v, &pos);
    if (pos == v.size()) return x;
  } catch (const std::logic_error&) {
  }
  throw UsageError(key + ": '" + v + "' is not an integer", __FILE__, __LINE__);
}

double to_double(const std::string& key, const std::string& v) {
  try {
    size_t pos = 0;
    const double x = std::stod(v, &pos);
    if (pos == v.size() && std::isfinite(x)) return x;
  } catch (const std::logic_error&) {
  }
  throw UsageError(key + ": '" + v + "' is not a number", __FILE__, __LINE__);
}

std::vector<long> to_list(const std::string& key, const std::string& v) {
  std::vector<long> out;
  std::stringstream ss(v);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(to_long(key, item));
  if (out.empty()) throw UsageError(key + " needs a value", __FILE__, __LINE__);
  return out;
}

LinkClass to_link(const std::string& key, const std::string& v) {
  if (v == "local") return LinkClass::Local;
  if (v == "cross") return LinkClass::Cross;
  throw UsageError(key + " must be local or cross", __FILE__, __LINE__);
}

const char* kPlanUsage =
    "usage: braid plan-strands --model llama3-70b|llama3-8b|mixtral-8x7b [--tp 2] [--ep 2] [--seq 8192]\n"
    "                          [--batch 1] [--tp-link local|cross] [--ep-link local|cross] [--capacity C]\n"
    "                          [--pairs FILE] [--write-pairs FILE] [--out PLAN] [--order-out PLAN] [--oef]\n"
    "                          [--max-seg 4] [--max-orders 1000000] [--max-shift -1]\n"
    "                          [--layer auto|gpu|analytic] [--single-mib M | --pool-budget-mib B]\n"
    "                          [--pool-order-out PLAN]\n"
    "  --layer: the operators planned: gpu = braid's GPU layer (model::Layer, what `bench strands` and\n"
    "    `profile-pairs` run and profile), analytic = the analytic builder (cross-node what-ifs); auto (default):\n"
    "    gpu when --pairs names the GPU layer's operators, analytic otherwise.\n"
    "  --order-out: the two-strand order with operators moved (a link per strand, operators on their\n"
    "    dependencies), searched under solo times (weight 0; measured faster than the co-run model's order).\n"
    "  --single-mib / --pool-budget-mib (gpu layer): also plan both strands in one activation pool, within\n"
    "    B MiB of saved activations (--single-mib M: one saved set + 5% of M - 64 MiB, the budget `bench\n"
    "    strands` uses for <= 1.05x a single strand of M MiB); --pool-order-out writes the recommended order.\n";

const char* kPipeUsage =
    "usage: braid pipeline --stages P[,P..] --microbatches M[,M..] [--schedule 1f1b|w|w-fb|w-bf|both|all]\n"
    "                      [--t-fwd 1] [--t-bwd 2] [--si-factor 1] [--timeline]\n"
    "  w-fb / w-bf: the W-shaped schedule with each SI block run as two tasks, forward or backward first\n"
    "  (split_si_blocks: for stages with no collective to hide); both = 1f1b and w; all = the four.\n";

// Both strands' saved activations in one pool (docs/dhelix.md, fifty-third and fifty-fourth sessions): the
// pool-bounded co-run moves orders at the co-run weights `bench strands` searches, each with its smallest
// placement and the placement chosen for its memory waits (wait_aware_choice), all in the co-run model. The
// bench times every order with two sets and runs the measured fastest in one pool; here, without a GPU, the
// recommendation is the least modelled time with the chosen placement's waits.
void plan_one_pool(std::ostream& out, std::map<std::string, std::string>& o, const Layer& layer, const Plan& plan,
                   const PairTable& table, const model::ModelConfig& mc, const model::Parallel& mp) {
  const auto saved = saved_tensors(mc, mp);
  double one = 0;
  for (const auto& t : saved) one += t.bytes;
  constexpr double MiB = 1048576.0;
  char buf[512];
  if (saved.empty()) return;
  if (!o.count("--single-mib") && !o.count("--pool-budget-mib")) {
    std::snprintf(buf, sizeof buf,
                  "\none activation pool: one saved set is %.1f MiB per rank; give --single-mib (the single strand's "
                  "memory, `bench strands` prints it) or --pool-budget-mib to plan both strands in one pool\n",
                  one / MiB);
    out << buf;
    if (o.count("--pool-order-out")) throw UsageError("--pool-order-out needs a pool budget", __FILE__, __LINE__);
    return;
  }
  const double single = o.count("--single-mib") ? to_double("--single-mib", o["--single-mib"]) * MiB : 0;
  const double budget = o.count("--pool-budget-mib") ? to_double("--pool-budget-mib", o["--pool-budget-mib"]) * MiB
                                                     : one + 0.05 * single - 64.0 * MiB;
  if (!(budget > 0) || (o.count("--single-mib") && !(single > 0)))
    throw UsageError("the pool budget must be positive", __FILE__, __LINE__);
  std::snprintf(buf, sizeof buf, "\none activation pool: budget %.1f MiB = %.2fx one saved set (%.1f MiB)%s\n",
                budget / MiB, budget / one, one / MiB,
                single > 0 ? " = one set + 5% of --single-mib - 64 MiB" : "");
  out << buf;
  const Layer dag2 = two_link_layer(layer), dd2 = dep_ready_layer(dag2);
  const auto b1 = best_issue_order(layer, plan, 128), m1 = best_issue_order(layer, plan, 128, true);
  const auto b2 = best_issue_order(dag2, plan, 128), m2 = best_issue_order(dag2, plan, 128, true);
  const auto whole2 = plan_issue_order(dag2, whole_pass_plan(dag2, plan));
  const auto cr = corun_issue_order(dag2, {b2.order, m2.order, whole2}, table);
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = one_pool_orders(layer, {b1.order, m1.order}, {b2.order, m2.order, cr.order}, table, saved, budget);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::snprintf(buf, sizeof buf,
                "  pool-bounded orders (co-run model): one link %.1f us, two links %.1f us (inf: none within the "
                "budget); search %.1f s\n",
                r.one_link.makespan_us, r.two_links.makespan_us, secs);
  out << buf;
  if (r.moves.empty()) {
    out << "  no order keeps both strands' saved activations within the budget\n";
    if (o.count("--pool-order-out")) throw UsageError("no order fits the pool budget", __FILE__, __LINE__);
    return;
  }
  out << "  co-run moves within the budget (a link per strand, operators on their dependencies; us in the co-run\n"
         "  model at weight 0.4; two sets = no pool waits):\n"
         "    weight  two sets   smallest pool (x one set, us with its waits)   placed for its waits\n";
  size_t best = 0;  // the least modelled time with its placement's waits (the recommendation's fallback, below)
  double best_us = 0;
  for (size_t i = 0; i < r.moves.size(); ++i) {
    const auto& mv = r.moves[i];
    const auto small = two_strand_placement(dd2, mv.order, saved);
    const PlacementChoice choice = wait_aware_choice(dd2, mv.order, table, budget);
    const auto placed = two_strand_placement(dd2, mv.order, saved, &choice);
    const double two = corun_makespan_us(dd2, mv.order, table);
    const double us_small = placement_wait_cost(dd2, mv.order, saved, small, table);
    const double us_placed = placement_wait_cost(dd2, mv.order, saved, placed, table);
    std::snprintf(buf, sizeof buf, "    %6.1f  %8.1f   %5.2fx %9.1f                            %5.2fx %9.1f\n",
                  mv.weight, two, small.pool_bytes / one, us_small, placed.pool_bytes / one, us_placed);
    out << buf;
    if (i == 0 || us_placed < best_us) best = i, best_us = us_placed;
  }
  // The recommendation: the weight-0 order (searched under solo times) where the search found one. `bench strands`
  // times every order above with two sets, and the weight-0 order was the fastest in 15 of 17 one-layer runs on 2x
  // H200 (70B and Mixtral, 1 and 2 CTAs; docs/dhelix.md, fifty-fourth session): the co-run model at weight 0.4 ranks
  // these orders wrongly. Without one, the least modelled time with the placement's waits.
  bool by_evidence = false;
  for (size_t i = 0; i < r.moves.size(); ++i)
    if (r.moves[i].weight == 0.0) best = i, by_evidence = true;
  const auto& pick = r.moves[best];
  const PlacementChoice choice = wait_aware_choice(dd2, pick.order, table, budget);
  const auto placed = two_strand_placement(dd2, pick.order, saved, &choice);
  std::snprintf(buf, sizeof buf,
                "  recommended: the weight-%.1f order in its wait-aware placement (%s), %.1f us modelled, pool %.1f MiB "
                "(%.2fx one set)",
                pick.weight,
                by_evidence ? "the order the bench measured fastest in 15 of 17 runs" : "the least modelled time",
                placement_wait_cost(dd2, pick.order, saved, placed, table), placed.pool_bytes / MiB,
                placed.pool_bytes / one);
  out << buf;
  if (single > 0) {
    std::snprintf(buf, sizeof buf, ", about %.3fx the single strand's memory", (single - one + placed.pool_bytes) / single);
    out << buf;
  }
  out << "\n  (bench strands times every order above with two sets and runs the measured fastest in one pool:\n"
         "  strands-arena-io-moves-2link-dag[-smres])\n";
  if (o.count("--pool-order-out")) {
    std::ofstream f(o["--pool-order-out"]);
    if (!f) throw UsageError("cannot write " + o["--pool-order-out"], __FILE__, __LINE__);
    write_plan(f, to_plan_file(dd2, order_plan(dd2, pick.order)));
    out << "pool order written to " << o["--pool-order-out"]
        << " (one operator per step; run it on dep_ready_layer(two_link_layer(strand_layer(...))) with\n"
           "SharedActivationPool(..., &wait_aware_choice(...)))\n";
  }
}

int plan_strands(int argc, char** argv, std::ostream& out) {
  auto o = parse_options(argc, argv,
                         {"--model", "--tp", "--ep", "--seq", "--batch", "--tp-link", "--ep-link", "--pairs",
                          "--write-pairs", "--out", "--order-out", "--max-seg", "--max-orders", "--max-shift",
                          "--capacity", "--layer", "--single-mib", "--pool-budget-mib", "--pool-order-out"},
                         {"--oef", "--help"});
  if (o.count("--help")) {
    out << kPlanUsage;
    return 0;
  }
  if (!o.count("--model")) throw UsageError("--model is required", __FILE__, __LINE__);
  const ModelDims dims = model_dims(o["--model"]);
  LayerConfig cfg;
  cfg.tp = static_cast<int>(o.count("--tp") ? to_long("--tp", o["--tp"]) : 2);
  cfg.ep = static_cast<int>(o.count("--ep") ? to_long("--ep", o["--ep"]) : (dims.experts > 0 ? 2 : 1));
  cfg.seq = o.count("--seq") ? to_long("--seq", o["--seq"]) : 8192;
  cfg.batch = static_cast<int>(o.count("--batch") ? to_long("--batch", o["--batch"]) : 1);
  if (o.count("--tp-link")) cfg.tp_cross_node = to_link("--tp-link", o["--tp-link"]) == LinkClass::Cross;
  if (o.count("--ep-link")) cfg.ep_cross_node = to_link("--ep-link", o["--ep-link"]) == LinkClass::Cross;
  if (dims.experts == 0 && cfg.ep != 1) throw UsageError("--ep applies to MoE models only", __FILE__, __LINE__);
  if (o.count("--capacity")) {
    cfg.capacity = std::stod(o["--capacity"]);
    if (dims.experts == 0 || cfg.capacity < 0)
      throw UsageError("--capacity applies to MoE models only and must be >= 0", __FILE__, __LINE__);
  }
  SearchOptions so;
  if (o.count("--max-seg")) so.max_segment_ops = static_cast<int>(to_long("--max-seg", o["--max-seg"]));
  if (o.count("--max-orders")) so.max_orders = static_cast<std::size_t>(to_long("--max-orders", o["--max-orders"]));
  if (o.count("--max-shift")) so.max_shift = static_cast<int>(to_long("--max-shift", o["--max-shift"]));
  if (so.max_segment_ops < 1 || so.max_segment_ops > 8)
    throw UsageError("--max-seg must be in 1..8", __FILE__, __LINE__);

  // Which operators: the GPU layer's (strand_layer over model::Layer's operator view: the names `profile-pairs`
  // writes and `bench strands` runs) or the analytic builder's (build_layer: cross-node links, any seq/batch).
  const std::string which = o.count("--layer") ? o["--layer"] : "auto";
  if (which != "auto" && which != "gpu" && which != "analytic")
    throw UsageError("--layer must be auto, gpu or analytic", __FILE__, __LINE__);
  PairTable table;
  if (o.count("--pairs")) table = load_pair_table(o["--pairs"]);
  // The GPU layer's configuration (model::preset with this run's seq, micro-batch and capacity; TP with
  // sequence parallelism, experts over the TP ranks).
  model::ModelConfig mc;
  model::Parallel mp;
  auto gpu_layer = [&]() {
    mc = model::preset(o["--model"]);
    mc.seq = cfg.seq;
    mc.micro_batch = cfg.batch;
    mc.capacity = cfg.capacity;
    mc.validate();
    if (mc.moe() && cfg.ep != cfg.tp)
      throw UsageError("the GPU layer splits the experts over the TP ranks: --ep must equal --tp", __FILE__, __LINE__);
    mp = model::Parallel{cfg.tp, true};
    mp.validate(mc);
    StrandLinks links;  // local unless asked (the analytic builder's default puts the all-to-all cross-node)
    if (o.count("--tp-link")) links.tp = to_link("--tp-link", o["--tp-link"]);
    if (o.count("--ep-link")) links.a2a = to_link("--ep-link", o["--ep-link"]);
    return strand_layer(mc, mp, links);
  };
  bool gpu = which == "gpu";
  Layer layer;
  if (which == "auto" && o.count("--pairs")) {
    // The layer whose operators the table names (a GPU profile names f.qkv, b.down_proj_dgrad, ...; the
    // analytic table f.ag1, b.out_dgrad, ...): the one with more of its solo times in the table.
    auto covered = [&](const Layer& l) {
      int n = 0;
      for (Pass ps : {Pass::Forward, Pass::Backward})
        for (const Op& op : l.ops(ps)) n += table.solo_us(op.name).has_value();
      return n;
    };
    const Layer analytic = build_layer(dims, cfg);
    int on_gpu = -1;
    try {
      on_gpu = covered(gpu_layer());
    } catch (const UsageError&) {  // a setting the GPU layer does not run: the analytic one
    }
    gpu = on_gpu > covered(analytic);
    layer = gpu ? gpu_layer() : analytic;
  } else {
    layer = gpu ? gpu_layer() : build_layer(dims, cfg);
  }
  std::string source;
  if (o.count("--pairs")) {
    source = o["--pairs"] + " (node " + table.node + ")";
    if (!table.model.empty() && table.model != layer.model)
      out << "warning: pair table is for model " << table.model << ", planning " << layer.model << "\n";
    if (!table.parallel.empty() && table.parallel != layer.parallel)
      out << "warning: pair table is for " << table.parallel << ", planning " << layer.parallel << "\n";
  } else {
    table = synthetic_pair_table(layer);
    source = "synthetic (analytic solo times, OEF rules of Section 3.2; no GPU measurement)";
  }
  if (gpu) apply_solo_times(layer, table);  // as bench strands does: the executor models read Op::solo_us
  if (o.count("--write-pairs")) save_pair_table(o["--write-pairs"], table);
  const bool pool_asked = o.count("--single-mib") || o.count("--pool-budget-mib") || o.count("--pool-order-out");
  if (pool_asked && !gpu)
    throw UsageError("--single-mib, --pool-budget-mib and --pool-order-out plan the GPU layer's pool (--layer gpu)",
                     __FILE__, __LINE__);
  if (o.count("--single-mib") && o.count("--pool-budget-mib"))
    throw UsageError("give --single-mib or --pool-budget-mib, not both", __FILE__, __LINE__);

  out << "DHelix strand-interleaving plan: " << layer.model << " " << layer.parallel << "\n";
  out << "operators: "
      << (gpu ? "the GPU layer (model::Layer's operator view, strand_layer)"
              : "the analytic builder (build_layer; not the operators bench strands runs)")
      << "\n";
  out << "pair profile: " << source << "\n\n";
  out << "operators (solo us):\n";
  for (Pass p : {Pass::Forward, Pass::Backward}) {
    out << (p == Pass::Forward ? "  forward: " : "  backward:");
    for (const Op& op : layer.ops(p)) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.0f", table.solo_us(op.name).value_or(op.solo_us));
      out << " " << op.name.substr(2) << (op.kind == OpKind::Comm ? (op.link == LinkClass::Cross ? "[X]" : "[L]") : "")
          << "=" << buf;
    }
    out << "\n";
  }
  if (o.count("--oef")) {
    std::vector<std::string> rows, cols;
    for (const Op& op : layer.fwd) rows.push_back(op.name);
    for (const Op& op : layer.bwd) cols.push_back(op.name);
    const auto m = table.oef_matrix(rows, cols);
    out << "\nOEF (eq. 1), rows forward, columns backward:\n" << std::setw(14) << "";
    for (size_t j = 0; j < cols.size(); ++j) out << std::setw(6) << j;
    out << "\n";
    for (size_t i = 0; i < rows.size(); ++i) {
      out << std::setw(14) << rows[i];
      for (double v : m[i]) {
        char buf[16];
        std::snprintf(buf, sizeof buf, "%6.2f", v);
        out << buf;
      }
      out << "\n";
    }
    for (size_t j = 0; j < cols.size(); ++j) out << "  col " << j << " = " << cols[j] << "\n";
  }

  PairCost cost(layer, table);
  const auto t0 = std::chrono::steady_clock::now();
  const Plan plan = search_plan(cost, so);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (auto e = validate_plan(cost, plan); !e.empty()) throw UsageError("internal: invalid plan: " + e, __FILE__, __LINE__);

  out << "\nplan ([L] local-node collective, [X] cross-node collective; each step ends at a barrier):\n";
  print_plan(out, layer, plan);
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "\nsingle strand (forward then backward): %10.1f us\n"
                "strand interleaving (this plan):       %10.1f us   speed-up %.3fx\n"
                "communication solo time:               %10.1f us   hidden %.1f%%\n"
                "searched %zu order pairs (%zu partial orders cut by the bound) in %.2f s (max segment %d ops%s)\n",
                plan.serial_us, plan.total_us, plan.serial_us / plan.total_us, plan.comm_us,
                100.0 * plan.hidden_comm_fraction(), plan.orders_searched, plan.orders_pruned, secs, so.max_segment_ops,
                plan.orders_searched >= so.max_orders ? ", order cap reached" : "");
  out << buf;
  // What the GPU executor runs by default has no barrier between steps (docs/dhelix.md): its own model.
  const Plan whole = whole_pass_plan(layer, plan);
  std::snprintf(buf, sizeof buf,
                "barrier-free executor model (solo times, no co-run slowdown): this plan %.1f us, whole-pass plan "
                "%.1f us\n",
                plan_makespan_us(layer, plan), whole.total_us);
  out << buf;
  // The order a stack of layers runs best (docs/dhelix.md, fifty-first session): each strand's collectives on their own
  // link, operators waiting for their dependencies only, and the co-run model's search over operator moves. Written
  // (--order-out): the search under solo times (weight 0). `bench strands` times both searches' orders, and the
  // weight-0 order ran faster in 10 of 12 comparisons of the fifty-fifth session on 2x H200 (both 20-layer stacks and
  // both one-layer benches at 1 and 2 CTAs; all 6 with SMs left to the collectives), as the pool-bounded weight-0 orders
  // did in 15 of 17 one-layer runs before (docs/dhelix.md): the co-run model at weight 0.4 ranks these orders wrongly.
  {
    const Layer dd2 = dep_ready_layer(two_link_layer(layer));
    const auto whole2 = plan_issue_order(dd2, whole_pass_plan(dd2, plan));
    const auto mv = corun_moves_issue_order(dd2, {whole2}, table);
    const auto mv0 = corun_moves_issue_order(dd2, {whole2}, table, 0.0);
    std::snprintf(buf, sizeof buf,
                  "co-run model (pair-table slowdowns, weight %.1f), a link per strand, operators on their dependencies: "
                  "whole-pass order %.1f us, operators moved (corun_moves_issue_order) %.1f us; the same search under "
                  "solo times (weight 0): %.1f us solo, %.1f us at weight %.1f (recommended: measured faster)\n",
                  kCorunWeight, corun_makespan_us(dd2, whole2, table), mv.makespan_us, mv0.makespan_us,
                  corun_makespan_us(dd2, mv0.order, table), kCorunWeight);
    out << buf;
    if (o.count("--order-out")) {
      std::ofstream f(o["--order-out"]);
      if (!f) throw UsageError("cannot write " + o["--order-out"], __FILE__, __LINE__);
      write_plan(f, to_plan_file(dd2, order_plan(dd2, mv0.order)));
      out << "moved-operator order (weight 0) written to " << o["--order-out"]
          << " (one operator per step; run it on dep_ready_layer(two_link_layer(dag)))\n";
    }
  }
  if (gpu) plan_one_pool(out, o, layer, plan, table, mc, mp);
  if (o.count("--out")) {
    std::ofstream f(o["--out"]);
    if (!f) throw UsageError("cannot write " + o["--out"], __FILE__, __LINE__);
    write_plan(f, to_plan_file(layer, plan));
    out << "plan written to " << o["--out"] << "\n";
  }
  return 0;
}

int pipeline(int argc, char** argv, std::ostream& out) {
  auto o = parse_options(argc, argv, {"--stages", "--microbatches", "--schedule", "--t-fwd", "--t-bwd", "--si-factor"},
                         {"--timeline", "--help"});
  if (o.count("--help")) {
    out << kPipeUsage;
    return 0;
  }
  if (!o.count("--stages") || !o.count("--microbatches"))
    throw UsageError("--stages and --microbatches are required", __FILE__, __LINE__);
  const auto Ps = to_list("--stages", o["--stages"]), Ms = to_list("--microbatches", o["--microbatches"]);
  const std::string which = o.count("--schedule") ? o["--schedule"] : "both";
  std::vector<std::string> names;
  if (which == "both") names = {"1f1b", "w"};
  else if (which == "all") names = {"1f1b", "w", "w-fb", "w-bf"};
  else if (which == "1f1b" || which == "w" || which == "w-fb" || which == "w-bf") names = {which};
  else throw UsageError("--schedule must be 1f1b, w, w-fb, w-bf, both or all", __FILE__, __LINE__);
  PipeCosts c;
  if (o.count("--t-fwd")) c.t_fwd = to_double("--t-fwd", o["--t-fwd"]);
  if (o.count("--t-bwd")) c.t_bwd = to_double("--t-bwd", o["--t-bwd"]);
  if (o.count("--si-factor")) c.si_factor = to_double("--si-factor", o["--si-factor"]);
  if (c.t_fwd <= 0 || c.t_bwd <= 0 || c.si_factor <= 0)
    throw UsageError("times and --si-factor must be positive", __FILE__, __LINE__);

  char buf[256];
  std::snprintf(buf, sizeof buf,
                "per-stage forward %.3g, backward %.3g, SI block = %.3g x (forward + backward); activation unit A = "
                "one micro-batch through one stage's layers\n",
                c.t_fwd, c.t_bwd, c.si_factor);
  out << buf;
  out << "schedule    P     M    makespan   bubble  (P-1)/(M+P-1)  peak act (A)  per-stage peak (A)\n";
  for (long P : Ps)
    for (long M : Ms) {
      if (P < 1 || M < 1) throw UsageError("stages and micro-batches must be >= 1", __FILE__, __LINE__);
      for (const std::string& name : names) {
        PipeSchedule s = name == "1f1b" ? make_1f1b(int(P), int(M)) : make_w_shaped(int(P), int(M));
        if (name == "w-fb" || name == "w-bf") s = split_si_blocks(s, name == "w-bf");
        const PipeStats r = simulate_pipeline(s, c);
        if (auto e = check_pipeline(s); !e.empty()) throw UsageError("internal: " + e, __FILE__, __LINE__);
        std::string peaks;
        for (double v : r.stage_peak) {
          char b[16];
          std::snprintf(b, sizeof b, "%s%.1f", peaks.empty() ? "" : " ", v);
          peaks += b;
        }
        std::snprintf(buf, sizeof buf, "%-8s %4ld %5ld %11.3f  %7.4f  %13.4f  %12.2f  %s\n", name.c_str(), P, M,
                      r.makespan, r.bubble_ratio, ideal_1f1b_bubble(int(P), int(M)), r.peak_activation, peaks.c_str());
        out << buf;
        if (o.count("--timeline")) {
          for (int st = 0; st < s.stages; ++st) {
            out << "  stage " << st << ":";
            for (const auto& slot : s.stage_slots[st]) {
              out << " ";
              for (size_t t = 0; t < slot.tasks.size(); ++t)
                out << (t ? "|" : "") << (slot.tasks[t].backward ? "B" : "F") << slot.tasks[t].mb << "."
                    << slot.tasks[t].chunk;
              std::snprintf(buf, sizeof buf, "@%.3g", slot.start);
              out << buf;
            }
            out << "\n";
          }
        }
      }
    }
  return 0;
}

}  // namespace

int plan_strands_main(int argc, char** argv, std::ostream& out) {
  try {
    return plan_strands(argc, argv, out);
  } catch (const UsageError& e) {
    out << "error: " << e.what() << "\n" << kPlanUsage;
    return 2;
  }
}

int simulate_pipeline_main(int argc, char** argv, std::ostream& out) {
  try {
    return pipeline(argc, argv, out);
  } catch (const UsageError& e) {
    out << "error: " << e.what() << "\n" << kPipeUsage;
    return 2;
  }
}

}  // namespace braid::schedule
