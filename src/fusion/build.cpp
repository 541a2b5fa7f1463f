// Builders for the transitions of Table 2 and the hybrids of Table 5 (unfused graphs).
#include "braid/fusion/build.hpp"

#include <stdexcept>
#include <string>

namespace braid::fusion {
namespace {

// Appends tensors and operators to a graph; every helper returns the id of the tensor it creates.
class Builder {
 public:
  Builder(const Dims& d, uint64_t seed) : d_(d), seed_(seed) { g.num_experts = d.experts; }

  Graph g;

  int group(const std::string& name, Parallel kind, int first, int n) {
    Group grp{name, kind, {}};
    for (int r = 0; r < n; ++r) grp.ranks.push_back(first + r);
    g.groups.push_back(grp);
    return static_cast<int>(g.groups.size()) - 1;
  }

  // A fresh activation (batch,S,H) in layout l, registered as a graph input.
  int input(int64_t batch, Layout l) {
    const int t = tensor("x", {batch, d_.seq, d_.hidden}, l);
    g.inputs.push_back(t);
    return t;
  }

  // Communication or Split of x into layout l; the kind follows from the two layouts.
  int move(int x, Layout l) {
    const Tensor& in = g.tensors[x];
    const int y = tensor(name(), in.shape, l);
    g.ops.push_back(Op{*classify(g, in.layout, l), {x}, y});
    return y;
  }

  // Megatron TP block on the group of replicated x: column GEMM (H->F), ReLU, row GEMM (F->H).
  int tp_block(int x) {
    const int grp = g.tensors[x].layout.group;
    const auto shape = g.tensors[x].shape;  // (B,S,H)
    const int h = tensor(name(), {shape[0], shape[1], d_.ffn}, Layout{Dist::Sharded, grp, 2});  // (B,S,F/n) per rank
    g.ops.push_back(Op{OpKind::Gemm, {x}, h, Route::None, WeightSplit::Column, weight({d_.hidden, d_.ffn})});
    const int a = tensor(name(), g.tensors[h].shape, g.tensors[h].layout);
    g.ops.push_back(Op{OpKind::Elementwise, {h}, a});
    const int p = tensor(name(), shape, Layout{Dist::Partial, grp, -1});  // (B,S,H) partial sums
    g.ops.push_back(Op{OpKind::Gemm, {a}, p, Route::None, WeightSplit::Row, weight({d_.ffn, d_.hidden})});
    return p;
  }

  int norm(int x) {
    const int y = tensor(name(), g.tensors[x].shape, g.tensors[x].layout);
    g.ops.push_back(Op{OpKind::Norm, {x}, y, Route::None, WeightSplit::None, weight({d_.hidden})});
    return y;
  }

  // Gate -> dispatch -> experts -> combine into layout `back`; x is token-sharded.
  int moe(int x, Layout back) {
    const Tensor xt = g.tensors[x];
    const int r = tensor(name(), {xt.shape[0], xt.shape[1], 2 * d_.top_k}, xt.layout);  // (B,S,2k)
    Op gate{OpKind::Gate, {x}, r, Route::None, WeightSplit::None, weight({d_.hidden, d_.experts})};
    gate.top_k = d_.top_k;
    g.ops.push_back(gate);
    const Layout routed{Dist::Routed, back.group, -1};
    const std::vector<int64_t> rows = {xt.shape[0], xt.shape[1], d_.top_k, d_.hidden};  // (B,S,k,H)
    const int in = tensor(name(), rows, routed);
    g.ops.push_back(Op{*classify(g, xt.layout, routed, Route::Dispatch), {x, r}, in, Route::Dispatch});
    const int out = tensor(name(), rows, routed);
    g.ops.push_back(Op{OpKind::Expert, {in}, out, Route::None, WeightSplit::None,
                       weight({d_.experts, d_.hidden, d_.hidden})});
    const int y = tensor(name(), xt.shape, back);
    g.ops.push_back(Op{*classify(g, routed, back, Route::Combine), {out}, y, Route::Combine});
    return y;
  }

 private:
  int tensor(const std::string& n, std::vector<int64_t> shape, Layout l) {
    return g.add_tensor(Tensor{n, std::move(shape), l, d_.elem_bytes});
  }
  int weight(std::vector<int64_t> shape) {
    const uint64_t s = seed_ * 0x9e3779b97f4a7c15ull + g.weights.size() + 1;
    g.weights.push_back(Weight{std::string("w").append(std::to_string(g.weights.size())), std::move(shape), s});
    return static_cast<int>(g.weights.size()) - 1;
  }
  // (Appending instead of "t" + ... avoids a GCC 12 -Wrestrict false positive at -O3.)
  std::string name() const { return std::string("t").append(std::to_string(g.tensors.size())); }

  Dims d_;
  uint64_t seed_;
};

void require(bool ok, const std::string& why) {
  if (!ok) throw std::invalid_argument("fusion builder: " + why);
}

Layout rep(int grp) { return Layout{Dist::Replicated, grp, -1}; }
Layout sharded(int grp, int dim) { return Layout{Dist::Sharded, grp, dim}; }

void check_dims(const Dims& d, int n, bool tp, bool moe) {
  require(n >= 1 && d.batch >= 1 && d.seq % n == 0, "the sequence must divide over " + std::to_string(n) + " ranks");
  if (tp) require(d.hidden % n == 0 && d.ffn % n == 0, "H and F must divide over the TP group");
  if (moe) require(d.experts >= 1 && d.experts % n == 0 && d.top_k >= 1 && d.top_k <= d.experts,
                   "experts must divide over the EP group and 1 <= k <= E");
}

// The EP input is split over the batch when possible, else over the sequence.
int ep_dim(const Dims& d, int n) { return d.batch % n == 0 ? 0 : 1; }

}  // namespace

Graph build_transition(Transition t, const Dims& d, int n1, int n2, uint64_t seed) {
  require(t == Transition::TP_PP || n1 == n2, "former and latter parallelism share one group: n1 must equal n2");
  Builder b(d, seed);
  int y = -1;
  switch (t) {
    case Transition::TP_SP: {
      check_dims(d, n1, true, false);
      const int tp = b.group("tp", Parallel::TP, 0, n1);
      const int p = b.tp_block(b.input(d.batch, rep(tp)));
      y = b.norm(b.move(b.move(p, rep(tp)), sharded(tp, 1)));
      break;
    }
    case Transition::TP_PP: {
      check_dims(d, n1, true, false);
      check_dims(d, n2, false, false);
      const int s0 = b.group("stage0", Parallel::TP, 0, n1);
      const int s1 = b.group("stage1", Parallel::TP, n1, n2);
      const int p = b.tp_block(b.input(d.batch, rep(s0)));
      y = b.norm(b.move(b.move(b.move(p, rep(s0)), sharded(s1, 1)), rep(s1)));
      break;
    }
    case Transition::TP_EP: {
      check_dims(d, n1, true, true);
      const int tp = b.group("tp", Parallel::TP, 0, n1);
      const int p = b.tp_block(b.input(d.batch, rep(tp)));
      const Layout split = sharded(tp, ep_dim(d, n1));
      y = b.moe(b.move(b.move(p, rep(tp)), split), split);
      break;
    }
    case Transition::PP_EP: {
      check_dims(d, n1, false, true);
      const int s0 = b.group("stage0", Parallel::PP, 0, n1);
      const int s1 = b.group("stage1", Parallel::EP, n1, n1);
      const int x = b.norm(b.input(d.batch * n1, sharded(s0, 0)));  // (n*B,S,H): B sequences per rank
      y = b.moe(b.move(x, sharded(s1, 0)), sharded(s1, 0));
      break;
    }
    case Transition::SP_PP: {
      check_dims(d, n1, false, false);
      const int s0 = b.group("stage0", Parallel::SP, 0, n1);
      const int s1 = b.group("stage1", Parallel::SP, n1, n1);
      const int x = b.norm(b.input(d.batch, sharded(s0, 1)));
      y = b.norm(b.move(b.move(x, rep(s0)), rep(s1)));
      break;
    }
    case Transition::SP_EP: {
      check_dims(d, n1, false, true);
      const int sp = b.group("sp", Parallel::SP, 0, n1);
      const Layout split = sharded(sp, ep_dim(d, n1));
      const int x = b.norm(b.input(d.batch, sharded(sp, 1)));
      int e = b.moe(b.move(b.move(x, rep(sp)), split), split);
      if (split.dim != 1) e = b.move(e, sharded(sp, 1));  // the local A2A back to sequence shards
      y = b.norm(e);
      break;
    }
  }
  b.g.outputs.push_back(y);
  validate(b.g);
  return b.g;
}

Graph build_hybrid(Hybrid h, const Dims& d, int n, int stages, uint64_t seed) {
  const bool moe = h == Hybrid::HP3 || h == Hybrid::HP4;
  require(stages >= 1, "at least one stage");
  check_dims(d, n, true, moe);
  Builder b(d, seed);
  std::vector<int> stage;
  for (int s = 0; s < stages; ++s) stage.push_back(b.group("stage" + std::to_string(s), Parallel::TP, s * n, n));
  int x = b.input(d.batch, rep(stage[0]));  // (B,S,H) replicated on the first stage
  int y = -1;
  for (int s = 0; s < stages; ++s) {
    const int grp = stage[s];
    const bool last = s + 1 == stages;
    // Attention stand-in with TP+SP: TP block -> AR -> Split(S) -> norm.
    int a = b.norm(b.move(b.move(b.tp_block(x), rep(grp)), sharded(grp, 1)));
    const Layout split = sharded(grp, ep_dim(d, n));
    int p = -1;  // a partial-sum output that ends the stage (HP2, HP4), else -1
    switch (h) {
      case Hybrid::HP1:  // MLP with TP+SP
        a = b.norm(b.move(b.move(b.tp_block(b.move(a, rep(grp))), rep(grp)), sharded(grp, 1)));
        break;
      case Hybrid::HP2:  // MLP with TP, ends in partial sums
        p = b.tp_block(b.move(a, rep(grp)));
        break;
      case Hybrid::HP3:  // MoE with SP+EP+SP
        a = b.moe(b.move(b.move(a, rep(grp)), split), split);
        if (split.dim != 1) a = b.move(a, sharded(grp, 1));
        a = b.norm(a);
        break;
      case Hybrid::HP4:  // MoE with TP+EP, then a TP block that ends the stage
        a = b.moe(b.move(b.move(b.tp_block(b.move(a, rep(grp))), rep(grp)), split), split);
        p = b.tp_block(b.move(a, rep(grp)));
        break;
    }
    if (last) {
      y = p >= 0 ? b.norm(b.move(b.move(p, rep(grp)), sharded(grp, 1))) : a;
    } else if (p >= 0) {  // TP+PP: AR -> M2MS -> AG on the next stage
      x = b.move(b.move(b.move(p, rep(grp)), sharded(stage[s + 1], 1)), rep(stage[s + 1]));
    } else {  // SP+PP: AG -> P2P
      x = b.move(b.move(a, rep(grp)), rep(stage[s + 1]));
    }
  }
  b.g.outputs.push_back(y);
  validate(b.g);
  return b.g;
}

}  // namespace braid::fusion
