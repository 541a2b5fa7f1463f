// braid/sim.hpp — scale-out simulation of collectives and Chimera transitions on SimGrid.
//
// A Network is a set of directed links (bytes/s, seconds) and a deterministic route between any
// two nodes: 2D mesh / 2D torus / 3D torus with dimension-order routing, a two-level fat-tree with
// d-mod-k up/down routing, or a uniform (non-blocking crossbar) network. Every node has one
// injection and one ejection link (a BookSim-like single network port).
// A Schedule is a DAG of flows (src node, dst node, bytes, flows it waits for). Collective
// generators produce schedules (ring, hierarchical ring, halving-doubling, rotated pairwise
// all-to-all / M2MS); simulate() runs one on SimGrid (s4u activities, CM02 max-min sharing with
// ideal factors) and returns the makespan. Graph-level entry points map the communication
// operators of a braid::fusion::Graph to schedules. See docs/simulation.md.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <map>
#include <string>
#include <vector>

#include "braid/fusion/cost.hpp"
#include "braid/fusion/ir.hpp"

namespace braid::sim {

/// Topology families.
enum class TopoKind { Uniform, Mesh2D, Torus2D, Torus3D, FatTree };

/// A topology and its link parameters.
struct TopologySpec {
  TopoKind kind = TopoKind::Uniform;
  std::vector<int> dims;     // Uniform {n}; Mesh2D/Torus2D {x,y}; Torus3D {x,y,z};
                             // FatTree {nodes per leaf switch, leaf switches}
  double link_bw = 50e9;     // bytes/s per direction of a network link (Table 4: 50 GB/s)
  double link_lat = 100e-9;  // seconds per hop (Table 4: 100 ns)
  double nic_bw = 0;         // injection/ejection bytes/s; 0 = link_bw
  double nic_lat = 0;        // seconds paid once per message
  /// Number of accelerators.
  int nodes() const;
  /// "torus2d:4x4" style name (parse_topology's input).
  std::string name() const;
};

/// Parses "uniform:N", "mesh2d:XxY", "torus2d:XxY", "torus3d:XxYxZ", "fattree:DxL" (D nodes per leaf,
/// L leaves), optionally followed by ",bw=<GB/s>,lat=<ns>,nicbw=<GB/s>,niclat=<ns>".
/// Throws std::invalid_argument on a malformed spec.
TopologySpec parse_topology(const std::string& spec);

/// The eight networks of Chimera's Table 4 (4 small, then their 64-node versions).
std::vector<TopologySpec> table4_topologies();

/// Links and routes of a topology.
class Network {
 public:
  struct Link {
    double bw = 0;   // bytes/s
    double lat = 0;  // s
  };
  /// Builds the links of `spec`.
  explicit Network(const TopologySpec& spec);
  /// Directed links, indexed by id.
  const std::vector<Link>& links() const { return links_; }
  /// Link ids from node `src` to node `dst` (src != dst), injection link first, ejection link last.
  std::vector<int> route(int src, int dst) const;
  /// Number of accelerators.
  int nodes() const { return nodes_; }
  /// The topology this network was built from.
  const TopologySpec& spec() const { return spec_; }
  /// Grid coordinates of a node (mesh/torus), or {node} otherwise.
  std::vector<int> coords(int node) const;

 private:
  TopologySpec spec_;
  int nodes_ = 0;
  std::vector<Link> links_;
  int link_id(int node, int dim, bool negative) const;  // mesh/torus: link leaving `node`
};

/// One point-to-point transfer of a schedule.
struct Flow {
  int src = 0, dst = 0;    // node ids
  double bytes = 0;        // payload
  std::vector<int> after;  // ids of flows that must complete before this one starts
};

/// A DAG of flows, in creation order (dependencies point backwards).
struct Schedule {
  std::vector<Flow> flows;
  /// Appends a flow and returns its id; a self-send or an empty flow returns -1 and adds nothing.
  int add(int src, int dst, double bytes, std::vector<int> after);
  /// Bytes sent or received by the busiest node: max over nodes of max(sent, received).
  double max_node_volume() const;
};

/// Per member of a group: ids of the flows the member must wait for before its next send.
using Frontier = std::vector<std::vector<int>>;

/// A group of nodes with an optional grid shape (row-major, product = size) for hierarchical rings.
struct NodeGroup {
  std::vector<int> nodes;
  std::vector<int> shape;  // empty = {size}
};

/// Collective algorithms.
enum class Algo { Auto, Ring, HierRing, HalvingDoubling, Rotated, Direct };

/// "ring", "hring", "hd", "rotated", "direct", "auto".
std::string algo_name(Algo a);

/// The algorithm Chimera uses on a topology: HierRing on mesh/torus, HalvingDoubling on a fat-tree
/// (Ring when the group size is not a power of two), Ring on a uniform network.
Algo default_algo(const TopologySpec& t, int group_size);

/// Reduce-scatter of a `bytes` buffer on every member (each ends with bytes/n).
Frontier reduce_scatter(Schedule& s, const NodeGroup& g, double bytes, Algo a, Frontier f = {});
/// All-gather: every member contributes bytes/n and ends with `bytes`.
Frontier all_gather(Schedule& s, const NodeGroup& g, double bytes, Algo a, Frontier f = {});
/// All-reduce of `bytes` = reduce-scatter then all-gather.
Frontier all_reduce(Schedule& s, const NodeGroup& g, double bytes, Algo a, Frontier f = {});
/// Many-to-many sends: matrix[i][j] bytes from src.nodes[i] to dst.nodes[j]. Rotated: member i sends
/// to j = i%N, (i+1)%N, ... one after another (pairwise all-to-all when src == dst, Chimera's M2MS
/// otherwise); Direct: all at once. Returns the frontier of the destination group.
Frontier many_to_many(Schedule& s, const NodeGroup& src, const NodeGroup& dst,
                      const std::vector<std::vector<double>>& matrix, Algo a, Frontier f = {});

/// Simulation knobs.
struct SimOptions {
  /// Per-kind calibration (see Calibration); empty = ideal (no fixed cost, efficiency 1).
  struct Regime {
    double alpha = 0;       // s, fixed cost of one operator
    double efficiency = 1;  // achieved fraction of link bandwidth
  };
  struct KindCal {
    double threshold = 0;  // message bytes where `large` takes over
    Regime small, large;
    const Regime& at(double message) const { return message < threshold ? small : large; }
  };
  std::map<fusion::OpKind, KindCal> calibration;
  bool verbose_simgrid = false;  // let SimGrid log
};

/// Result of one simulated schedule.
struct SimResult {
  double seconds = 0;  // simulated makespan
  size_t flows = 0;
  double wall_s = 0;   // host seconds spent (platform + simulation)
};

/// Runs `s` on `net` with SimGrid in a child process (SimGrid allows one engine per process).
/// Throws std::runtime_error if the simulation fails.
SimResult simulate(const Network& net, const Schedule& s, bool verbose_simgrid = false);

/// Where the ranks of a graph live: node_of_rank[r], and each group's grid shape.
struct Placement {
  std::vector<int> node_of_rank;
  std::vector<std::vector<int>> group_shape;  // [group index of the graph]
};

/// Places every group of `g` as a compact block (mesh/torus; a serpentine line when blocks do not
/// fit) or consecutively (fat-tree, uniform). Throws std::invalid_argument if the world is too big.
Placement place(const fusion::Graph& g, const TopologySpec& t);

/// One simulated communication operator.
struct OpSim {
  std::string op;        // "AR", "M2MS dispatch", ...
  std::string algo;      // algorithm used
  int group_size = 0;
  double message = 0;    // bytes, nccl-tests convention (op_cost)
  double volume = 0;     // bytes of the busiest node in the simulated schedule
  double model_volume = 0;  // op_cost volume
  double seconds = 0;    // simulated, including the calibrated fixed cost
  double model_seconds = 0;  // op_cost with Link{link_bw, alpha}
  size_t flows = 0;
  double wall_s = 0;
};

/// The schedule of one communication operator of `g` (empty for compute and Split).
Schedule op_schedule(const fusion::Graph& g, const fusion::Op& op, const Placement& p,
                     const TopologySpec& t, Algo algo, std::string* algo_used = nullptr);

/// Simulates every communication operator of `g` in program order (operators do not overlap:
/// the graph's time is the sum). This is the entry point for `braid plan --simulate`.
std::vector<OpSim> simulate_graph(const fusion::Graph& g, const TopologySpec& t,
                                  const SimOptions& o = {}, Algo algo = Algo::Auto);

/// Sum of OpSim::seconds.
double total_seconds(const std::vector<OpSim>& ops);

/// Fits SimOptions::calibration from nccl-tests style JSON lines (bench/results/<node>/nccl-*.jsonl:
/// op, bytes, time_us) of a 2-rank run on a uniform 2-node network with link bandwidth `link_bw`.
/// Writes one JSON line per measured size (measured, simulated, error) and per kind (the fit).
SimOptions calibrate(const std::string& dir, double link_bw, std::ostream& out, int ranks = 2);

/// `braid simulate ...` (argv[0] = "simulate"); returns the exit code. Usage: docs/simulation.md.
int simulate_main(int argc, char** argv, std::ostream& out);

}  // namespace braid::sim
