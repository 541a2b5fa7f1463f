// Operator DAG builders, eq. (1), pair tables and their file format.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "braid/errors.hpp"
#include "braid/schedule.hpp"

using namespace braid::schedule;

TEST(Oef, EquationOne) {
  // T_i = 10, T_j = 4: fully hidden when P = 10, serial when P = 14, slowdown below 0.
  EXPECT_DOUBLE_EQ(overlap_effectiveness(10, 4, 10), 1.0);
  EXPECT_DOUBLE_EQ(overlap_effectiveness(10, 4, 14), 0.0);
  EXPECT_DOUBLE_EQ(overlap_effectiveness(10, 4, 11), 0.75);
  EXPECT_DOUBLE_EQ(overlap_effectiveness(4, 10, 16), -0.5);
  for (double oef : {-0.5, 0.0, 0.3, 1.0})
    EXPECT_NEAR(overlap_effectiveness(7, 3, corun_from_oef(7, 3, oef)), oef, 1e-12);
}

TEST(Oef, TableAndMatrix) {
  PairTable t;
  t.set_solo("f.a", 10);
  t.set_solo("b.x", 4);
  t.set_solo("b.y", 5);
  t.set_corun("b.x", "f.a", 11);  // stored unordered
  ASSERT_TRUE(t.corun_us("f.a", "b.x").has_value());
  EXPECT_DOUBLE_EQ(*t.oef("f.a", "b.x"), 0.75);
  EXPECT_FALSE(t.oef("f.a", "b.y").has_value());
  const auto m = t.oef_matrix({"f.a"}, {"b.x", "b.y"});
  EXPECT_DOUBLE_EQ(m[0][0], 0.75);
  EXPECT_TRUE(std::isnan(m[0][1]));
}

TEST(PairFile, RoundTripIsExact) {
  const Layer L = build_layer(model_dims("mixtral-8x7b"), LayerConfig{});
  PairTable t = synthetic_pair_table(L);
  t.set_host("f.ag1", 12.25), t.set_host("b.down_dgrad", 0.1 + 0.2);  // optional host issue times
  std::stringstream ss;
  write_pair_table(ss, t);
  const PairTable r = read_pair_table(ss);
  EXPECT_EQ(r.node, t.node);
  EXPECT_EQ(r.model, t.model);
  EXPECT_EQ(r.parallel, t.parallel);
  EXPECT_EQ(r.solo, t.solo);
  EXPECT_EQ(r.corun, t.corun);
  EXPECT_EQ(r.host, t.host);
  EXPECT_DOUBLE_EQ(*r.host_us("f.ag1"), 12.25);
  EXPECT_FALSE(r.host_us("f.qkv").has_value());
  std::stringstream again;
  write_pair_table(again, r);
  std::stringstream first;
  write_pair_table(first, t);
  EXPECT_EQ(again.str(), first.str());
}

TEST(PairFile, RejectsMalformedRecords) {
  for (const char* bad : {"", "braid-pairs 2\n", "braid-pairs 1\nsolo f.a\n", "braid-pairs 1\nsolo f.a x\n",
                          "braid-pairs 1\ncorun f.a b.x -3\n", "braid-pairs 1\nfrobnicate 1\n",
                          "braid-pairs 1\nhost f.a\n", "braid-pairs 1\nhost f.a -1\n"}) {
    std::stringstream ss(bad);
    EXPECT_THROW(read_pair_table(ss), braid::UsageError) << bad;
  }
  std::stringstream ok("# comment\nbraid-pairs 1\nnode h100 # trailing\nsolo f.a 3.5\ncorun f.a b.x 4\n");
  const PairTable t = read_pair_table(ok);
  EXPECT_EQ(t.node, "h100");
  EXPECT_DOUBLE_EQ(*t.solo_us("f.a"), 3.5);
  EXPECT_DOUBLE_EQ(*t.corun_us("b.x", "f.a"), 4.0);
}

TEST(PairFile, SyntheticTableEncodesTheOefRules) {
  const Layer L = build_layer(model_dims("llama3-8b"), LayerConfig{});
  const PairTable t = synthetic_pair_table(L);
  for (const Op& f : L.fwd)
    for (const Op& b : L.bwd) EXPECT_NEAR(*t.oef(f.name, b.name), synthetic_oef(f, b), 1e-9) << f.name << " " << b.name;
  // Section 3.2: communication hides well under computation, collectives on one link do not.
  const Op& ag = L.fwd[L.find(Pass::Forward, "f.ag1")];
  const Op& gemm = L.bwd[L.find(Pass::Backward, "b.down_dgrad")];
  const Op& rs = L.bwd[L.find(Pass::Backward, "b.rs_qkv")];
  EXPECT_GT(synthetic_oef(ag, gemm), 0.5);
  EXPECT_EQ(synthetic_oef(ag, rs), 0.0);
}

TEST(Layers, LlamaShapeAndAnalyticTimes) {
  LayerConfig c;
  c.tp = 4;
  c.seq = 4096;
  const ModelDims m = model_dims("llama3-70b");
  const Layer L = build_layer(m, c);
  EXPECT_EQ(validate_layer(L), "");
  EXPECT_EQ(L.fwd.size(), 12u);
  EXPECT_EQ(L.bwd.size(), 18u);
  const Hardware hw;
  const Op& up = L.fwd[L.find(Pass::Forward, "f.upgate")];
  EXPECT_NEAR(up.solo_us, 2.0 + 2.0 * 4096 * 8192 * 2 * 28672 / 4 / (hw.peak_flops * hw.gemm_eff) * 1e6, 1e-6);
  const Op& ag = L.fwd[L.find(Pass::Forward, "f.ag1")];
  EXPECT_EQ(ag.kind, OpKind::Comm);
  EXPECT_EQ(ag.link, LinkClass::Local);
  EXPECT_NEAR(ag.solo_us, hw.local_lat_us + 4096.0 * 8192 * 2 * 3 / 4 / hw.local_bw * 1e6, 1e-6);
  // dgrad and wgrad are separate and each wgrad has no user: the backward DAG lets them move.
  for (const char* w : {"b.down_wgrad", "b.upgate_wgrad", "b.out_wgrad", "b.qkv_wgrad"}) {
    const int i = L.find(Pass::Backward, w);
    ASSERT_GE(i, 0) << w;
    for (const Op& o : L.bwd)
      for (int d : o.deps) EXPECT_NE(d, i) << o.name << " depends on " << w;
  }
  EXPECT_EQ(topological_orders(L.fwd, 10).size(), 1u);
  EXPECT_EQ(topological_orders(L.bwd, 10).size(), 10u);
}

TEST(Layers, MoeVariant) {
  LayerConfig c;
  c.tp = 2;
  c.ep = 4;
  const Layer L = build_layer(model_dims("mixtral-8x7b"), c);
  EXPECT_EQ(validate_layer(L), "");
  for (const char* n : {"f.router", "f.dispatch", "f.expert_upgate", "f.expert_down", "f.combine"})
    EXPECT_GE(L.find(Pass::Forward, n), 0) << n;
  const Op& a2a = L.fwd[L.find(Pass::Forward, "f.dispatch")];
  EXPECT_EQ(a2a.link, LinkClass::Cross);
  EXPECT_EQ(a2a.type, "a2a");
  // The router's backward has no dependency inside the layer's backward: it moves.
  EXPECT_TRUE(L.bwd[L.find(Pass::Backward, "b.router")].deps.empty());
  EXPECT_THROW(build_layer(model_dims("mixtral-8x7b"), LayerConfig{2, 3}), braid::UsageError);
  EXPECT_THROW(model_dims("gpt-5"), braid::UsageError);
}
