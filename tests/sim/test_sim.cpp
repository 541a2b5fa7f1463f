// Scale-out simulation: routes, collective volumes, SimGrid timings on uniform and small topologies,
// fused/unfused ratios against the cost model, the CLI.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <set>
#include <sstream>

#include "braid/fusion.hpp"
#include "braid/sim.hpp"

namespace bs = braid::sim;
namespace fu = braid::fusion;

namespace {

bs::NodeGroup first(int n) {
  bs::NodeGroup g;
  for (int i = 0; i < n; ++i) g.nodes.push_back(i);
  return g;
}

bs::TopologySpec ideal(const std::string& s) {
  bs::TopologySpec t = bs::parse_topology(s);
  t.link_lat = 0;  // pure bandwidth: time = volume / bandwidth on a uniform network
  return t;
}

}  // namespace

TEST(SimTopology, ParseAndTable4) {
  const bs::TopologySpec t = bs::parse_topology("torus3d:2x2x2,bw=100,lat=50");
  EXPECT_EQ(t.kind, bs::TopoKind::Torus3D);
  EXPECT_EQ(t.nodes(), 8);
  EXPECT_DOUBLE_EQ(t.link_bw, 100e9);
  EXPECT_DOUBLE_EQ(t.link_lat, 50e-9);
  EXPECT_EQ(t.name(), "torus3d:2x2x2");
  EXPECT_THROW(bs::parse_topology("torus2d:4"), std::invalid_argument);
  EXPECT_THROW(bs::parse_topology("ring:4"), std::invalid_argument);
  EXPECT_THROW(bs::parse_topology("mesh2d:4x4,foo=1"), std::invalid_argument);
  const auto t4 = bs::table4_topologies();
  ASSERT_EQ(t4.size(), 8u);
  for (size_t i = 0; i < 4; ++i) EXPECT_LE(t4[i].nodes(), 25);
  for (size_t i = 4; i < 8; ++i) EXPECT_EQ(t4[i].nodes(), 64);
}

TEST(SimTopology, DimensionOrderRoutes) {
  const bs::Network mesh(bs::parse_topology("mesh2d:5x5"));
  // (0,0) -> (4,3): 4 x-hops then 3 y-hops, plus injection and ejection.
  EXPECT_EQ(mesh.route(0, 4 + 3 * 5).size(), 4u + 3u + 2u);
  const bs::Network torus(bs::parse_topology("torus2d:4x4"));
  EXPECT_EQ(torus.route(0, 3).size(), 1u + 2u);      // wrap-around: one hop
  EXPECT_EQ(torus.route(0, 2).size(), 2u + 2u);      // equidistant: two hops either way
  EXPECT_NE(torus.route(0, 2)[1], torus.route(1, 3)[1]);  // even/odd sources go different ways
  const bs::Network t3(bs::parse_topology("torus3d:4x4x4"));
  EXPECT_EQ(t3.route(0, 63).size(), 3u + 2u);        // (3,3,3) is one wrap hop per dimension
  const bs::Network ft(bs::parse_topology("fattree:8x2"));
  EXPECT_EQ(ft.route(0, 7).size(), 2u);   // same leaf
  EXPECT_EQ(ft.route(0, 8).size(), 4u);   // via a spine
  EXPECT_NE(ft.route(0, 8)[1], ft.route(0, 9)[1]);  // d-mod-k spreads destinations over spines
  // every route only uses existing links and never repeats one
  for (const bs::Network* n : {&mesh, &torus, &t3, &ft})
    for (int a = 0; a < n->nodes(); ++a)
      for (int b = 0; b < n->nodes(); ++b) {
        if (a == b) continue;
        const auto r = n->route(a, b);
        EXPECT_EQ(std::set<int>(r.begin(), r.end()).size(), r.size());
        for (int id : r) EXPECT_LT(id, int(n->links().size()));
      }
}

// Busiest-node volume of each algorithm equals Table 1 (ring factors) for several group sizes.
TEST(SimCollectives, AnalyticVolumes) {
  const double m = 3 * 5 * 7 * 64.0 * 1024;
  for (int n : {2, 4, 8, 16}) {
    for (bs::Algo a : {bs::Algo::Ring, bs::Algo::HierRing, bs::Algo::HalvingDoubling}) {
      bs::NodeGroup g = first(n);
      if (a == bs::Algo::HierRing) g.shape = {n >= 4 ? n / 4 : n, n >= 4 ? 4 : 1};
      bs::Schedule rs, ag, ar;
      bs::reduce_scatter(rs, g, m, a);
      bs::all_gather(ag, g, m, a);
      bs::all_reduce(ar, g, m, a);
      EXPECT_NEAR(rs.max_node_volume(), m * (n - 1) / n, 1e-6) << n << bs::algo_name(a);
      EXPECT_NEAR(ag.max_node_volume(), m * (n - 1) / n, 1e-6) << n << bs::algo_name(a);
      EXPECT_NEAR(ar.max_node_volume(), 2 * m * (n - 1) / n, 1e-6) << n << bs::algo_name(a);
    }
    bs::Schedule a2a, m2ms;
    bs::many_to_many(a2a, first(n), first(n), std::vector(n, std::vector<double>(n, m / n)), bs::Algo::Rotated);
    EXPECT_NEAR(a2a.max_node_volume(), m * (n - 1) / n, 1e-6);
    EXPECT_EQ(a2a.flows.size(), size_t(n * (n - 1)));
    bs::NodeGroup dst;
    for (int i = 0; i < n; ++i) dst.nodes.push_back(n + i);
    bs::many_to_many(m2ms, first(n), dst, std::vector(n, std::vector<double>(n, m / n)), bs::Algo::Rotated);
    EXPECT_NEAR(m2ms.max_node_volume(), m, 1e-6);
    // rotated destinations: sender i starts with i % N
    for (int i = 0; i < n; ++i) EXPECT_EQ(m2ms.flows[size_t(i) * n].dst, n + i);
  }
}

// On a uniform network without latency every algorithm runs at volume / bandwidth.
TEST(SimCollectives, UniformTimeIsVolumeOverBandwidth) {
  const bs::TopologySpec t = ideal("uniform:8");
  const bs::Network net(t);
  const double m = 64.0 * 1024 * 1024;
  for (bs::Algo a : {bs::Algo::Ring, bs::Algo::HalvingDoubling}) {
    bs::Schedule s;
    bs::all_reduce(s, first(8), m, a);
    EXPECT_NEAR(bs::simulate(net, s).seconds, 2 * m * 7 / 8 / t.link_bw, 1e-9) << bs::algo_name(a);
  }
  bs::Schedule s;
  bs::many_to_many(s, first(8), first(8), std::vector(8, std::vector<double>(8, m / 8)), bs::Algo::Rotated);
  EXPECT_NEAR(bs::simulate(net, s).seconds, m * 7 / 8 / t.link_bw, 1e-9);
}

// Latency is paid per message and hop; bandwidth is shared max-min fairly.
TEST(SimCollectives, LatencyAndSharing) {
  bs::TopologySpec t = bs::parse_topology("mesh2d:4x1,bw=1,lat=1000");  // 1 GB/s, 1 us per hop
  const bs::Network net(t);
  bs::Schedule one;
  one.add(0, 3, 1e6, {});
  EXPECT_NEAR(bs::simulate(net, one).seconds, 3e-6 + 1e-3, 1e-9);
  bs::Schedule two;  // two flows share the link 1 -> 2 and the ejection link of node 3
  two.add(0, 3, 1e6, {});
  two.add(1, 3, 1e6, {});
  EXPECT_NEAR(bs::simulate(net, two).seconds, 2e-3 + 2e-6, 1.5e-6);  // latencies 3 us and 2 us
}

// Small topologies: hierarchical ring on a torus equals a ring's volume; a 4-node line of a mesh
// is contention-free; all-to-all on a mesh is slower than the bandwidth bound (bisection).
TEST(SimCollectives, SmallTopologies) {
  const double m = 16.0 * 1024 * 1024;
  for (const char* name : {"torus2d:4x4", "mesh2d:4x4", "torus3d:2x2x2", "fattree:8x2"}) {
    const bs::TopologySpec t = ideal(name);
    const int n = t.nodes();
    bs::NodeGroup g = first(n);
    if (t.kind != bs::TopoKind::FatTree) g.shape = t.dims;
    bs::Schedule s;
    bs::all_reduce(s, g, m, bs::default_algo(t, n));
    const double bound = 2 * m * (n - 1) / n / t.link_bw;
    EXPECT_NEAR(bs::simulate(bs::Network(t), s).seconds, bound, bound * 1e-6) << name;
  }
  const bs::TopologySpec mesh = ideal("mesh2d:4x4");
  bs::Schedule a2a;
  bs::many_to_many(a2a, first(16), first(16), std::vector(16, std::vector<double>(16, m / 16)), bs::Algo::Rotated);
  EXPECT_GT(bs::simulate(bs::Network(mesh), a2a).seconds, 1.5 * m * 15 / 16 / mesh.link_bw);
}

// Fused/unfused ratios of the six Table 2 transitions agree with the cost model on a uniform network.
TEST(SimTransitions, RatiosMatchCostModelOnUniform) {
  const bs::TopologySpec t = ideal("uniform:8");
  fu::Dims d;
  d.batch = 4, d.seq = 256, d.hidden = 1024, d.ffn = 4096, d.experts = 4, d.top_k = 2;
  for (fu::Transition tr : {fu::Transition::TP_SP, fu::Transition::TP_PP, fu::Transition::TP_EP,
                            fu::Transition::PP_EP, fu::Transition::SP_PP, fu::Transition::SP_EP}) {
    const fu::Graph g = fu::build_transition(tr, d, 4, 4);
    const fu::Graph f = fu::chimera(g);
    const auto u = bs::simulate_graph(g, t), v = bs::simulate_graph(f, t);
    double mu = 0, mv = 0;
    for (const auto& o : u) {
      mu += o.model_seconds;
      EXPECT_NEAR(o.volume, o.model_volume, 1e-6 * o.model_volume) << o.op;
    }
    for (const auto& o : v) {
      mv += o.model_seconds;
      EXPECT_NEAR(o.volume, o.model_volume, 1e-6 * o.model_volume) << o.op;
    }
    const double rs = bs::total_seconds(v) / bs::total_seconds(u), rm = mv / mu;
    EXPECT_NEAR(rs / rm, 1.0, 0.10) << fu::transition_name(tr);
    EXPECT_LT(rs, 1.0) << fu::transition_name(tr);
  }
}

TEST(SimTransitions, PlacementIsCompact) {
  fu::Dims d;
  d.seq = 64, d.hidden = 64, d.ffn = 256;
  const fu::Graph g = fu::build_transition(fu::Transition::TP_PP, d, 4, 4);
  const bs::Placement p = bs::place(g, bs::parse_topology("torus2d:4x4"));
  EXPECT_EQ(p.group_shape[0], (std::vector<int>{2, 2}));  // the paper's 2x2 groups
  EXPECT_EQ(p.node_of_rank[0], 0);
  EXPECT_EQ(p.node_of_rank[3], 5);  // (1,1)
  EXPECT_EQ(std::set<int>(p.node_of_rank.begin(), p.node_of_rank.end()).size(), 8u);
  // 12 stages of 2 do not tile a 5x5 mesh with blocks: the serpentine keeps pairs adjacent.
  const fu::Graph h = fu::build_hybrid(fu::Hybrid::HP1, fu::Dims{1, 8, 16, 32}, 2, 12);
  const bs::TopologySpec mesh = bs::parse_topology("mesh2d:5x5");
  const bs::Placement q = bs::place(h, mesh);
  const bs::Network net(mesh);
  for (int s = 0; s < 12; ++s) EXPECT_EQ(net.route(q.node_of_rank[2 * s], q.node_of_rank[2 * s + 1]).size(), 3u);
  EXPECT_THROW(bs::place(h, bs::parse_topology("torus2d:4x4")), std::invalid_argument);
}

TEST(SimCli, CollectiveAndTransition) {
  std::ostringstream out;
  const char* a1[] = {"simulate", "collective", "--topology", "uniform:4,lat=0", "--op", "AR", "--group", "4",
                      "--bytes", "1M"};
  ASSERT_EQ(bs::simulate_main(10, const_cast<char**>(a1), out), 0) << out.str();
  EXPECT_NE(out.str().find("\"op\": \"AR\""), std::string::npos);
  EXPECT_NE(out.str().find("\"time_us\": 31.4573"), std::string::npos) << out.str();  // 1.5 MiB at 50 GB/s
  std::ostringstream out2;
  const char* a2[] = {"simulate", "transition", "--topology", "torus2d:4x4", "--transition", "TP+SP", "--bytes", "4M"};
  ASSERT_EQ(bs::simulate_main(8, const_cast<char**>(a2), out2), 0) << out2.str();
  EXPECT_NE(out2.str().find("\"fused_ops\": \"RS\""), std::string::npos) << out2.str();
  std::ostringstream bad;
  const char* a3[] = {"simulate", "transition", "--topology", "ring:4"};
  EXPECT_EQ(bs::simulate_main(4, const_cast<char**>(a3), bad), 2);
}

// A 1024-node fused-vs-unfused transition (TP+SP on a 32x32 torus) simulates in well under 60 s.
TEST(SimScale, Torus1024TpSp) {
  fu::Dims d;
  d.seq = 1024, d.hidden = 1024, d.ffn = 1024;
  const fu::Graph g = fu::build_transition(fu::Transition::TP_SP, d, 1024, 1024);
  const fu::Graph f = fu::chimera(g);
  const bs::TopologySpec t = bs::parse_topology("torus2d:32x32");
  const auto t0 = std::chrono::steady_clock::now();
  const auto u = bs::simulate_graph(g, t), v = bs::simulate_graph(f, t);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NEAR(bs::total_seconds(v) / bs::total_seconds(u), 0.5, 0.01);
  EXPECT_LT(wall, 60.0);
  std::printf("1024-node TP+SP on torus2d:32x32: %.1f s wall (%zu flows)\n", wall, u[0].flows + v[0].flows);
}
