// The CPU reference executor: simulates every rank of a Graph with exact arithmetic.
//
// Values are integers stored in doubles; every operator is integer-closed (products, sums, ReLU,
// integer gate weights) and a guard rejects magnitudes at or above 2^52, so results do not depend on
// the order of summation and the original and the fused graph can be compared for exact equality.
// The norm is a stand-in with the dataflow property that matters (token-local, needs the whole
// hidden row): y = gamma * x + sum_h(x). The gate scores x @ Wg, keeps the top-k experts (ties to the
// lower id) and gives slot j the integer weight k - j.
#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <stdexcept>

#include "braid/fusion/pass.hpp"
#include "braid/hash.hpp"

namespace braid::fusion {
namespace {

using braid::splitmix64;

int64_t count(const std::vector<int64_t>& shape) {
  return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
}

// Visits every index of a box in row-major order.
void for_each(const Box& b, const std::function<void(const std::vector<int64_t>&)>& f) {
  if (b.empty()) return;
  std::vector<int64_t> i = b.lo;
  while (true) {
    f(i);
    int d = static_cast<int>(i.size()) - 1;
    while (d >= 0 && ++i[d] == b.hi[d]) i[d] = b.lo[d], --d;
    if (d < 0) return;
  }
}

// Row-major offset of a global index inside a box.
int64_t offset(const Box& b, const std::vector<int64_t>& i) {
  int64_t o = 0;
  for (size_t d = 0; d < i.size(); ++d) o = o * (b.hi[d] - b.lo[d]) + (i[d] - b.lo[d]);
  return o;
}

bool contains(const Box& outer, const Box& inner) {
  for (size_t d = 0; d < outer.lo.size(); ++d)
    if (inner.lo[d] < outer.lo[d] || inner.hi[d] > outer.hi[d]) return false;
  return true;
}

std::vector<double> weight_values(const Weight& w) {
  std::vector<double> v(count(w.shape));
  for (size_t i = 0; i < v.size(); ++i) v[i] = double(int64_t(splitmix64(w.seed ^ (i * 0x100000001b3ull)) % 3) - 1);
  return v;  // in {-1, 0, 1}
}

void guard(const std::vector<double>& v, const std::string& where) {
  for (double x : v)
    if (!(std::fabs(x) < 4503599627370496.0))  // 2^52: beyond it integer sums stop being exact
      throw std::runtime_error("executor: value out of the exact range after " + where);
}

struct Bytes {
  std::map<int, double> sent, recv;
  void add(int src, int dst, double b) {
    if (src == dst) return;
    sent[src] += b;
    recv[dst] += b;
  }
  double busiest() const {
    double m = 0;
    for (auto* map : {&sent, &recv})
      for (const auto& [r, b] : *map) m = std::max(m, b);
    return m;
  }
};

class Runner {
 public:
  Runner(const Graph& g, Execution& e) : g_(g), e_(e) {}

  const Local& at(int t, int rank) const {
    auto it = e_.values[t].find(rank);
    if (it == e_.values[t].end())
      throw std::runtime_error("executor: rank " + std::to_string(rank) + " does not hold " + g_.tensors[t].name);
    return it->second;
  }

  // Executes a plain move or a reduction from `in` (held in `src`) into `out`.
  std::map<int, Local> redistribute(OpKind kind, const Tensor& in, const Tensor& out, const std::map<int, Local>& src,
                                    Bytes& bytes) const {
    const Group& gout = g_.groups[out.layout.group];
    std::map<int, Local> dst;
    std::map<int, std::vector<int>> covered;
    for (size_t j = 0; j < gout.ranks.size(); ++j) {
      Local& l = dst[gout.ranks[j]];
      l.box = local_box(g_, out, static_cast<int>(j));
      l.data.assign(l.box.volume(), 0.0);
      covered[gout.ranks[j]].assign(l.box.volume(), 0);
    }
    for (const Transfer& t : plan_transfers(g_, kind, in, out)) {
      auto it = src.find(t.src);
      if (it == src.end() || !contains(it->second.box, t.box))
        throw std::runtime_error("executor: rank " + std::to_string(t.src) + " cannot send what it does not hold");
      Local& d = dst[t.dst];
      for_each(t.box, [&](const std::vector<int64_t>& i) {
        const double v = it->second.data[offset(it->second.box, i)];
        const int64_t o = offset(d.box, i);
        d.data[o] = t.reduce ? d.data[o] + v : v;
        ++covered[t.dst][o];
      });
      bytes.add(t.src, t.dst, double(t.box.volume()) * in.elem_bytes);
    }
    const int want = in.layout.dist == Dist::Partial ? static_cast<int>(g_.groups[in.layout.group].ranks.size()) : 1;
    for (const auto& [rank, c] : covered)
      if (std::any_of(c.begin(), c.end(), [&](int n) { return n != want; }))
        throw std::runtime_error("executor: " + kind_name(kind) + " into " + out.name + " does not cover rank " +
                                 std::to_string(rank) + " exactly");
    return dst;
  }

  void run(size_t index) {
    const Op& op = g_.ops[index];
    const Tensor& x = g_.tensors[op.in[0]];
    const Tensor& y = g_.tensors[op.out];
    std::map<int, Local>& out = e_.values[op.out];
    Bytes bytes;
    switch (op.kind) {
      case OpKind::Gemm: gemm(op, x, y, out); break;
      case OpKind::Norm:
      case OpKind::Elementwise: rowwise(op, x, out); break;
      case OpKind::Gate: gate(op, x, out); break;
      case OpKind::Expert: expert(op, x, out); break;
      default:
        if (op.route == Route::Dispatch) dispatch(op, x, y, out, bytes);
        else if (op.route == Route::Combine) combine(op, x, y, out, bytes);
        else if (op.kind == OpKind::AllReduce) {  // ReduceScatter then AllGather, as the cost model counts it
          Tensor mid = x;
          mid.layout = Layout{Dist::Sharded, x.layout.group, ar_dim(g_, x)};
          out = redistribute(OpKind::AllGather, mid, y,
                             redistribute(OpKind::ReduceScatter, x, mid, e_.values[op.in[0]], bytes), bytes);
        } else {
          out = redistribute(op.kind, x, y, e_.values[op.in[0]], bytes);
        }
    }
    e_.volume[index] = bytes.busiest();
    for (const auto& [rank, l] : out) {
      guard(l.data, "op " + std::to_string(index));
      for (const auto& row : l.rows) guard(row.data, "op " + std::to_string(index));
    }
  }

 private:
  const std::vector<double>& weight(int w) {
    auto it = weights_.find(w);
    if (it == weights_.end()) it = weights_.emplace(w, weight_values(g_.weights[w])).first;
    return it->second;
  }

  void gemm(const Op& op, const Tensor& x, const Tensor& y, std::map<int, Local>& out) {
    const std::vector<double>& w = weight(op.weight);  // (K,N) row-major
    const int64_t kk = g_.weights[op.weight].shape[0], nn = g_.weights[op.weight].shape[1];
    const Group& grp = g_.groups[x.layout.group];
    for (size_t i = 0; i < grp.ranks.size(); ++i) {
      const Local& a = at(op.in[0], grp.ranks[i]);
      const int last = static_cast<int>(a.box.lo.size()) - 1;
      const int64_t k0 = a.box.lo[last], kl = a.box.hi[last] - k0;  // the K slice this rank holds
      Local c;  // (rows, N slice): the whole N, or this rank's column chunk
      c.box = a.box;
      c.box.lo[last] = 0;
      c.box.hi[last] = nn;
      if (op.split == WeightSplit::Column) c.box = local_box(g_, y, static_cast<int>(i));
      const int64_t n0 = c.box.lo[last], nl = c.box.hi[last] - n0;
      const int64_t rows = a.box.volume() / kl;
      if (kl == 0 || (op.split != WeightSplit::Row && kl != kk))
        throw std::runtime_error("executor: GEMM input does not hold its K slice");
      c.data.assign(rows * nl, 0.0);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t k = 0; k < kl; ++k) {
          const double av = a.data[r * kl + k];
          if (av == 0) continue;
          for (int64_t n = 0; n < nl; ++n) c.data[r * nl + n] += av * w[(k0 + k) * nn + n0 + n];
        }
      out[grp.ranks[i]] = std::move(c);
    }
  }

  void rowwise(const Op& op, const Tensor& x, std::map<int, Local>& out) {
    const int64_t h = x.shape.back();
    const std::vector<double>* gamma = op.kind == OpKind::Norm ? &weight(op.weight) : nullptr;
    for (int rank : g_.groups[x.layout.group].ranks) {
      Local l = at(op.in[0], rank);
      const int64_t hl = l.box.hi.back() - l.box.lo.back();
      for (size_t r = 0; r * hl < l.data.size(); ++r) {
        double* row = &l.data[r * hl];
        if (gamma) {
          const double s = std::accumulate(row, row + h, 0.0);  // validate() guarantees hl == h
          for (int64_t j = 0; j < h; ++j) row[j] = (*gamma)[j] * row[j] + s;
        } else {
          for (int64_t j = 0; j < hl; ++j) row[j] = std::max(row[j], 0.0);
        }
      }
      out[rank] = std::move(l);
    }
  }

  void gate(const Op& op, const Tensor& x, std::map<int, Local>& out) {
    const std::vector<double>& w = weight(op.weight);  // (H,E)
    const int64_t h = x.shape[2], experts = g_.num_experts, k = op.top_k;
    for (int rank : g_.groups[x.layout.group].ranks) {
      const Local& a = at(op.in[0], rank);
      Local r;
      r.box = a.box;
      r.box.lo[2] = 0;
      r.box.hi[2] = 2 * k;
      const int64_t tokens = a.box.volume() / h;
      for (int64_t t = 0; t < tokens; ++t) {
        std::vector<double> score(experts, 0.0);
        for (int64_t j = 0; j < h; ++j)
          for (int64_t e = 0; e < experts; ++e) score[e] += a.data[t * h + j] * w[j * experts + e];
        std::vector<int64_t> order(experts);
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](int64_t p, int64_t q) { return score[p] > score[q]; });
        for (int64_t j = 0; j < k; ++j) r.data.push_back(double(order[j]));
        for (int64_t j = 0; j < k; ++j) r.data.push_back(double(k - j));
      }
      out[rank] = std::move(r);
    }
  }

  void expert(const Op& op, const Tensor& x, std::map<int, Local>& out) {
    const std::vector<double>& w = weight(op.weight);  // (E,H,H)
    const Group& grp = g_.groups[x.layout.group];
    const int64_t h = x.shape[3], per = g_.num_experts / static_cast<int>(grp.ranks.size());
    for (size_t i = 0; i < grp.ranks.size(); ++i) {
      Local l = at(op.in[0], grp.ranks[i]);
      for (auto& row : l.rows) {
        if (row.expert / per != static_cast<int64_t>(i))
          throw std::runtime_error("executor: expert " + std::to_string(row.expert) + " is not on this rank");
        std::vector<double> v(h, 0.0);
        for (int64_t a = 0; a < h; ++a)
          for (int64_t b = 0; b < h; ++b) v[b] += row.data[a] * w[(row.expert * h + a) * h + b];
        row.data = std::move(v);
      }
      out[grp.ranks[i]] = std::move(l);
    }
  }

  void dispatch(const Op& op, const Tensor& x, const Tensor& y, std::map<int, Local>& out, Bytes& bytes) {
    const Group& gout = g_.groups[y.layout.group];
    const int64_t h = x.shape[2], seq = x.shape[1], k = y.shape[2];
    const int64_t per = g_.num_experts / static_cast<int>(gout.ranks.size());
    for (int rank : gout.ranks) out[rank] = Local{};
    for (int rank : g_.groups[x.layout.group].ranks) {
      const Local& a = at(op.in[0], rank);
      const Local& r = at(op.in[1], rank);
      int64_t t = 0;
      for_each(Box{a.box.lo, {a.box.hi[0], a.box.hi[1], 1}}, [&](const std::vector<int64_t>& i) {
        for (int64_t j = 0; j < k; ++j) {
          Local::Row row;
          row.token = i[0] * seq + i[1];
          row.slot = static_cast<int>(j);
          row.expert = static_cast<int>(r.data[t * 2 * k + j]);
          row.gate = r.data[t * 2 * k + k + j];
          row.data.assign(a.data.begin() + t * h, a.data.begin() + (t + 1) * h);
          const int dst = gout.ranks[row.expert / per];
          bytes.add(rank, dst, double(h) * x.elem_bytes);
          out[dst].rows.push_back(std::move(row));
        }
        ++t;
      });
    }
  }

  void combine(const Op& op, const Tensor& x, const Tensor& y, std::map<int, Local>& out, Bytes& bytes) {
    const Group& gout = g_.groups[y.layout.group];
    const int64_t seq = y.shape[1], h = y.shape[2];
    for (size_t j = 0; j < gout.ranks.size(); ++j) {
      Local& l = out[gout.ranks[j]];
      l.box = local_box(g_, y, static_cast<int>(j));
      l.data.assign(l.box.volume(), 0.0);
    }
    const int n = static_cast<int>(gout.ranks.size());
    for (int rank : g_.groups[x.layout.group].ranks) {
      for (const auto& row : at(op.in[0], rank).rows) {
        const std::vector<int64_t> tok = {row.token / seq, row.token % seq};
        const int owner = n == 1 ? 0 : static_cast<int>(tok[y.layout.dim] / (y.shape[y.layout.dim] / n));
        Local& l = out[gout.ranks[owner]];
        const int64_t o = offset(l.box, {tok[0], tok[1], 0});
        for (int64_t c = 0; c < h; ++c) l.data[o + c] += row.gate * row.data[c];
        bytes.add(rank, gout.ranks[owner], double(h) * x.elem_bytes);
      }
    }
  }

  const Graph& g_;
  Execution& e_;
  std::map<int, std::vector<double>> weights_;
};

}  // namespace

std::vector<Dense> random_inputs(const Graph& g, uint64_t seed) {
  std::vector<Dense> in;
  for (int t : g.inputs) {
    Dense d{g.tensors[t].shape, std::vector<double>(count(g.tensors[t].shape))};
    for (size_t i = 0; i < d.v.size(); ++i) d.v[i] = double(int64_t(splitmix64((seed * 31 + t) ^ (i << 20)) % 7) - 3);
    in.push_back(std::move(d));
  }
  return in;
}

Execution execute(const Graph& g, const std::vector<Dense>& inputs) {
  validate(g);
  if (inputs.size() != g.inputs.size()) throw std::invalid_argument("execute: one Dense per graph input");
  Execution e;
  e.values.resize(g.tensors.size());
  e.volume.assign(g.ops.size(), 0.0);
  for (size_t n = 0; n < inputs.size(); ++n) {
    const Tensor& t = g.tensors[g.inputs[n]];
    if (inputs[n].shape != t.shape) throw std::invalid_argument("execute: input shape of " + t.name);
    const Box whole{std::vector<int64_t>(t.shape.size(), 0), t.shape};
    const Group& grp = g.groups[t.layout.group];
    for (size_t i = 0; i < grp.ranks.size(); ++i) {
      Local l;
      l.box = local_box(g, t, static_cast<int>(i));
      const bool zero = t.layout.dist == Dist::Partial && i > 0;  // a partial input lives on rank 0
      for_each(l.box, [&](const std::vector<int64_t>& idx) { l.data.push_back(zero ? 0 : inputs[n].v[offset(whole, idx)]); });
      e.values[g.inputs[n]][grp.ranks[i]] = std::move(l);
    }
  }
  Runner runner(g, e);
  for (size_t i = 0; i < g.ops.size(); ++i) runner.run(i);
  return e;
}

Dense logical(const Graph& g, const Execution& e, int t) {
  const Tensor& tt = g.tensors[t];
  Dense d;
  std::vector<int> covered;
  if (tt.layout.dist == Dist::Routed) {  // (B,S,k,H+1): row data, then the expert id
    const int64_t k = tt.shape[2], h = tt.shape[3];
    d.shape = {tt.shape[0], tt.shape[1], k, h + 1};
    d.v.assign(count(d.shape), 0.0);
    covered.assign(tt.shape[0] * tt.shape[1] * k, 0);
    for (const auto& [rank, l] : e.values[t])
      for (const auto& row : l.rows) {
        const int64_t slot = row.token * k + row.slot;
        std::copy(row.data.begin(), row.data.end(), d.v.begin() + slot * (h + 1));
        d.v[slot * (h + 1) + h] = row.expert;
        ++covered[slot];
      }
  } else {
    d.shape = tt.shape;
    d.v.assign(count(d.shape), 0.0);
    covered.assign(d.v.size(), 0);
    const Box whole{std::vector<int64_t>(tt.shape.size(), 0), tt.shape};
    for (const auto& [rank, l] : e.values[t])
      for_each(l.box, [&](const std::vector<int64_t>& i) {
        const int64_t o = offset(whole, i);
        const double v = l.data[offset(l.box, i)];
        if (tt.layout.dist == Dist::Partial) d.v[o] += v;
        else if (covered[o] && d.v[o] != v) throw std::runtime_error("logical: replicas of " + tt.name + " disagree");
        else d.v[o] = v;
        covered[o] = 1;
      });
  }
  if (std::any_of(covered.begin(), covered.end(), [&](int c) { return c != 1 && tt.layout.dist == Dist::Routed; }) ||
      std::count(covered.begin(), covered.end(), 0))
    throw std::runtime_error("logical: " + tt.name + " is not held exactly once");
  return d;
}

}  // namespace braid::fusion
