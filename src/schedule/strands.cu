// The DHelix strand executor and its baselines (strands.hpp).
#include <algorithm>
#include <cstdio>
#include <string>

#include "braid/env.hpp"
#include "braid/errors.hpp"
#include "braid/model/layer.hpp"
#include "braid/schedule/strands.hpp"

namespace braid::schedule {

namespace {

model::Phase phase_of(Pass p) { return p == Pass::Forward ? model::Phase::kForward : model::Phase::kBackward; }

// Structural check of a plan against a DAG (times are not checked: a plan file may come from another
// profile). Empty when fine.
std::string check_plan(const Layer& dag, const Plan& plan) {
  for (const Pass p : {Pass::Forward, Pass::Backward}) {
    const auto& ops = dag.ops(p);
    const auto& order = p == Pass::Forward ? plan.fwd_order : plan.bwd_order;
    const char* pn = p == Pass::Forward ? "forward" : "backward";
    if (order.size() != ops.size()) return std::string(pn) + " order does not hold every operator once";
    std::vector<int> pos(ops.size(), -1);
    for (size_t k = 0; k < order.size(); ++k) {
      if (order[k] < 0 || size_t(order[k]) >= ops.size() || pos[order[k]] >= 0)
        return std::string(pn) + " order does not hold every operator once";
      pos[order[k]] = int(k);
    }
    for (size_t i = 0; i < ops.size(); ++i)
      for (int d : ops[i].deps)
        if (pos[d] > pos[i]) return ops[i].name + " runs before its dependency " + ops[d].name;
    std::vector<int> cat;
    for (const auto& st : plan.steps) {
      const auto& seg = p == Pass::Forward ? st.fwd : st.bwd;
      cat.insert(cat.end(), seg.begin(), seg.end());
    }
    if (cat != order) return std::string("the steps' ") + pn + " segments do not concatenate to the " + pn + " order";
  }
  return {};
}

}  // namespace

namespace detail {

// The sequence the executor issues `order` in: its own order, except that (defer > 0: the executor was built
// with BRAID_STRANDS_DEFER_DISPATCH=defer) an MoE forward's dispatch (`a2a_dispatch`, whose issue blocks the
// host until the all-to-all counts arrive) yields to up to `defer` of the backward strand's next operators, so
// that work is queued before the host waits. The rule depends on the order alone, never on timing: every rank
// issues the same sequence (a sequence that differed between ranks could make two ranks' streams wait on each
// other's collectives in a cycle). Each strand's operators keep their order, so every dependency and every event
// the executor records by position in `order` is still issued first.
class IssueSequence {
 public:
  IssueSequence(const std::vector<std::pair<Pass, int>>& order, const model::Layer* fwd, int defer)
      : order_(order), fwd_(fwd), defer_(fwd ? defer : 0) {
    for (size_t k = 0; k < order.size(); ++k) at_[order[k].first == Pass::Forward ? 0 : 1].push_back(k);
  }
  size_t next() {
    const bool f_left = p_[0] < at_[0].size(), b_left = p_[1] < at_[1].size();
    BRAID_REQUIRE(f_left || b_left, "strands: issue sequence exhausted (internal error)");
    int s = !f_left ? 1 : !b_left ? 0 : at_[0][p_[0]] < at_[1][p_[1]] ? 0 : 1;
    if (s == 0 && b_left && deferred_ < defer_ &&
        fwd_->ops(model::Phase::kForward)[size_t(order_[at_[0][p_[0]]].second)].name == "a2a_dispatch") {
      s = 1;
      ++deferred_;
    }
    if (s == 0) deferred_ = 0;  // the next dispatch may defer again
    return at_[s][p_[s]++];
  }

 private:
  const std::vector<std::pair<Pass, int>>& order_;
  const model::Layer* fwd_;
  int defer_ = 0, deferred_ = 0;
  std::vector<size_t> at_[2];  // each strand's positions in order
  size_t p_[2] = {0, 0};
};

// What one issue() / issue_by_deps() call tracks besides its events: the sequence, the events after backward ops
// that memory waits need (arena), and the chained run's per-strand, per-stream state.
struct IssueState {
  IssueState(const std::vector<std::pair<Pass, int>>& order, const model::Layer* fwd, int defer, size_t bwd_events)
      : seq(order, fwd, defer), after_bwd(bwd_events, nullptr) {}
  IssueSequence seq;
  std::vector<cudaEvent_t> after_bwd;
  bool waited[2][3] = {};  // chain_wait: strand s already waited on stream j
  int last[2][3] = {};     // chain_tails_last: strand s's last position on stream j
};

}  // namespace detail

namespace {

int defer_dispatch_from_env() { return int(env::integer("BRAID_STRANDS_DEFER_DISPATCH", 0, 1000).value_or(0)); }

}  // namespace

StrandExecutor::StrandExecutor(const Layer& dag, const Plan& plan, StrandStreams streams, bool step_barrier)
    : dag_(dag), plan_(plan), s_(streams), step_barrier_(step_barrier), defer_dispatch_(defer_dispatch_from_env()) {
  BRAID_REQUIRE(s_.compute && s_.local && s_.cross && s_.compute != s_.local && s_.compute != s_.cross &&
                    s_.local != s_.cross,
                "strands: compute, local and cross must be three distinct non-default streams");
  if (!plan_.steps.empty()) {
    const std::string why = check_plan(dag_, plan_);
    if (!why.empty()) throw UsageError("strands: invalid plan: " + why, __FILE__, __LINE__);
  }
  // Per run: at most one record per operator, three per step barrier, fork and join.
  // (+ one per backward op for memory waits)
  const size_t n = dag_.fwd.size() + 2 * dag_.bwd.size() + 3 * (plan_.steps.size() + 2) + 8;
  events_.resize(n, nullptr);
  for (auto& e : events_) BRAID_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
}

StrandExecutor::~StrandExecutor() {
  for (auto e : events_)
    if (e) cudaEventDestroy(e);
}

cudaEvent_t StrandExecutor::record_after(cudaStream_t st) {
  cudaEvent_t e = next_event();
  BRAID_CUDA_CHECK(cudaEventRecord(e, st));
  return e;
}

cudaEvent_t StrandExecutor::next_event() {
  BRAID_REQUIRE(next_ < events_.size(), "strands: event pool exhausted (internal error)");
  return events_[next_++];
}

cudaStream_t StrandExecutor::stream_of(Pass p, int op) const {
  switch (dag_.ops(p)[op].link) {
    case LinkClass::Local: return s_.local;
    case LinkClass::Cross: return s_.cross;
    default: return s_.compute;
  }
}

void StrandExecutor::fork() {
  cudaEvent_t e = next_event();
  BRAID_CUDA_CHECK(cudaEventRecord(e, s_.compute));
  BRAID_CUDA_CHECK(cudaStreamWaitEvent(s_.local, e, 0));
  BRAID_CUDA_CHECK(cudaStreamWaitEvent(s_.cross, e, 0));
}

void StrandExecutor::join() {
  cudaEvent_t el = next_event(), ex = next_event();
  BRAID_CUDA_CHECK(cudaEventRecord(el, s_.local));
  BRAID_CUDA_CHECK(cudaEventRecord(ex, s_.cross));
  BRAID_CUDA_CHECK(cudaStreamWaitEvent(s_.compute, el, 0));
  BRAID_CUDA_CHECK(cudaStreamWaitEvent(s_.compute, ex, 0));
}

std::vector<std::pair<Pass, int>> StrandExecutor::issue_order(const std::vector<int>& fseg,
                                                               const std::vector<int>& bseg) const {
  return list_schedule(dag_, fseg, bseg, nullptr);
}

double StrandExecutor::simulated_us() const { return plan_makespan_us(dag_, plan_); }

void StrandExecutor::set_gemm_caps(std::vector<char> fwd, std::vector<char> bwd, int sms) {
  BRAID_REQUIRE((fwd.empty() && bwd.empty()) || (fwd.size() == dag_.fwd.size() && bwd.size() == dag_.bwd.size()),
                "strands: set_gemm_caps needs one flag per operator of each pass");
  BRAID_REQUIRE(sms >= 0, "strands: set_gemm_caps needs sms >= 0");
  cap_f_ = std::move(fwd), cap_b_ = std::move(bwd), cap_sms_ = sms;
}

void StrandExecutor::uncap(model::Layer* fwd, model::Layer* bwd) {
  if (cap_f_.empty()) return;
  for (model::Layer* l : {fwd, bwd})
    if (l) l->set_gemm_sm_target(0);
}

void StrandExecutor::set_memory_waits(std::vector<std::vector<int>> waits) {
  BRAID_REQUIRE(waits.empty() || waits.size() == dag_.fwd.size(), "strands: memory waits need one list per forward op");
  BRAID_REQUIRE(waits.empty() || !step_barrier_, "strands: memory waits are for the barrier-free executor (one issue)");
  mem_needed_.assign(dag_.bwd.size(), 0);
  for (const auto& w : waits)
    for (int j : w) {
      BRAID_REQUIRE(j >= 0 && size_t(j) < dag_.bwd.size(), "strands: memory wait on a backward op out of range");
      mem_needed_[j] = 1;
    }
  mem_waits_ = std::move(waits);
}

void StrandExecutor::memory_wait(int i, cudaStream_t st, const std::vector<cudaEvent_t>& after_bwd) const {
  if (mem_waits_.empty()) return;
  for (int j : mem_waits_[i]) {
    if (!after_bwd[j])
      throw UsageError("strands: forward op " + dag_.fwd[i].name + " must wait for backward op " + dag_.bwd[j].name +
                           ", which is issued after it (the pool placement does not fit this issue order)",
                       __FILE__, __LINE__);
    BRAID_CUDA_CHECK(cudaStreamWaitEvent(st, after_bwd[j], 0));
  }
}

void StrandExecutor::step(model::Layer* fwd, const std::vector<int>& fseg, model::Layer* bwd,
                          const std::vector<int>& bseg) {
  BRAID_REQUIRE(fseg.empty() || fwd, "strands: a forward segment needs a forward layer");
  BRAID_REQUIRE(bseg.empty() || bwd, "strands: a backward segment needs a backward layer");
  issue(fwd, bwd, issue_order(fseg, bseg));
}

void StrandExecutor::issue(model::Layer* fwd, model::Layer* bwd, const std::vector<std::pair<Pass, int>>& order) {
  if (dag_.dep_ready) return issue_by_deps(fwd, bwd, order);
  // Per strand: the stream and the event after its previous op in `order` (what precedes `order` is
  // ordered by the caller: the fork, or a step barrier).
  cudaStream_t last_stream[2] = {nullptr, nullptr};
  cudaEvent_t last_event[2] = {nullptr, nullptr};
  detail::IssueState is = begin_issue(order, fwd);
  for (size_t n = 0; n < order.size(); ++n) {
    const size_t k = is.seq.next();
    const auto [pass, i] = order[k];
    const int sidx = pass == Pass::Forward ? 0 : 1;
    model::Layer* layer = sidx == 0 ? fwd : bwd;
    cudaStream_t st = stream_of(pass, i);
    if (last_stream[sidx] && last_stream[sidx] != st) {
      BRAID_CUDA_CHECK(cudaStreamWaitEvent(st, last_event[sidx], 0));
    }
    chain_wait(sidx, st, is.waited);
    chain_before(sidx, i, st);
    if (sidx == 0) memory_wait(i, st, is.after_bwd);
    if (!cap_f_.empty()) layer->set_gemm_sm_target((sidx == 0 ? cap_f_ : cap_b_)[i] ? cap_sms_ : 0);
    OpTrace* trace = OpTrace::active();
    if (trace) trace->begin(dag_.ops(pass)[size_t(i)].name, st);
    layer->run_op(phase_of(pass), size_t(i), st);
    if (trace) trace->end(st);
    if (sidx == 1 && !mem_waits_.empty() && mem_needed_[i]) is.after_bwd[i] = record_after(st);
    chain_after(sidx, i, st);
    if (chain_tails_ && is.last[sidx][stream_index(st)] == int(k))
      BRAID_CUDA_CHECK(cudaEventRecord(chain_tails_->ev[sidx][stream_index(st)], st));
    // Record only when this strand's next op runs on another stream.
    cudaStream_t next_stream = nullptr;
    for (size_t q = k + 1; q < order.size(); ++q)
      if (order[q].first == pass) {
        next_stream = stream_of(pass, order[q].second);
        break;
      }
    last_stream[sidx] = st;
    last_event[sidx] = nullptr;
    if (next_stream && next_stream != st) {
      last_event[sidx] = next_event();
      BRAID_CUDA_CHECK(cudaEventRecord(last_event[sidx], st));
    }
  }
}

// Layer::dep_ready: an op waits for the latest of its dependencies issued earlier in `order` on each
// other stream (a dependency on its own stream is ordered by the stream; one issued before `order` by the
// caller's fork or barrier). An event is recorded after an op only if a later op on another stream
// depends on it.
void StrandExecutor::issue_by_deps(model::Layer* fwd, model::Layer* bwd, const std::vector<std::pair<Pass, int>>& order) {
  std::vector<int> pos[2] = {std::vector<int>(dag_.fwd.size(), -1), std::vector<int>(dag_.bwd.size(), -1)};
  for (size_t k = 0; k < order.size(); ++k) pos[order[k].first == Pass::Forward ? 0 : 1][order[k].second] = int(k);
  std::vector<cudaStream_t> stream(order.size());
  for (size_t k = 0; k < order.size(); ++k) stream[k] = stream_of(order[k].first, order[k].second);
  // needs_event[k]: a later op on another stream depends on op k.
  std::vector<char> needs_event(order.size(), 0);
  for (size_t q = 0; q < order.size(); ++q) {
    const int s = order[q].first == Pass::Forward ? 0 : 1;
    for (int d : dag_.ops(order[q].first)[order[q].second].deps) {
      const int k = pos[s][d];
      if (k >= 0 && size_t(k) < q && stream[k] != stream[q]) needs_event[k] = 1;
    }
  }
  std::vector<cudaEvent_t> ev(order.size(), nullptr);
  detail::IssueState is = begin_issue(order, fwd);
  for (size_t n = 0; n < order.size(); ++n) {
    const size_t q = is.seq.next();
    const auto [pass, i] = order[q];
    const int s = pass == Pass::Forward ? 0 : 1;
    // The latest dependency (in issue order) on each other stream: waiting for it covers the earlier ones.
    int latest[3] = {-1, -1, -1};
    cudaStream_t streams[3] = {s_.compute, s_.local, s_.cross};
    for (int d : dag_.ops(pass)[i].deps) {
      const int k = pos[s][d];
      if (k < 0 || size_t(k) >= q || stream[k] == stream[q]) continue;
      for (int j = 0; j < 3; ++j)
        if (stream[k] == streams[j]) latest[j] = std::max(latest[j], k);
    }
    for (int j = 0; j < 3; ++j)
      if (latest[j] >= 0) BRAID_CUDA_CHECK(cudaStreamWaitEvent(stream[q], ev[latest[j]], 0));
    chain_wait(s, stream[q], is.waited);
    chain_before(s, i, stream[q]);
    if (s == 0) memory_wait(i, stream[q], is.after_bwd);
    if (!cap_f_.empty()) (s == 0 ? fwd : bwd)->set_gemm_sm_target((s == 0 ? cap_f_ : cap_b_)[i] ? cap_sms_ : 0);
    OpTrace* trace = OpTrace::active();
    if (trace) trace->begin(dag_.ops(pass)[size_t(i)].name, stream[q]);
    (s == 0 ? fwd : bwd)->run_op(phase_of(pass), size_t(i), stream[q]);
    if (trace) trace->end(stream[q]);
    if (s == 1 && !mem_waits_.empty() && mem_needed_[i]) is.after_bwd[i] = record_after(stream[q]);
    chain_after(s, i, stream[q]);
    if (chain_tails_ && is.last[s][stream_index(stream[q])] == int(q))
      BRAID_CUDA_CHECK(cudaEventRecord(chain_tails_->ev[s][stream_index(stream[q])], stream[q]));
    if (needs_event[q]) {
      ev[q] = next_event();
      BRAID_CUDA_CHECK(cudaEventRecord(ev[q], stream[q]));
    }
  }
}

detail::IssueState StrandExecutor::begin_issue(const std::vector<std::pair<Pass, int>>& order, model::Layer* fwd) const {
  detail::IssueState is(order, fwd, defer_dispatch_, mem_waits_.empty() ? 0 : dag_.bwd.size());
  chain_tails_last(order, is.last);
  return is;
}

void StrandExecutor::chain_wait(int s, cudaStream_t st, bool (&waited)[2][3]) {
  if (!chain_after_ || waited[s][stream_index(st)]) return;
  waited[s][stream_index(st)] = true;
  for (cudaEvent_t e : chain_after_[s]) BRAID_CUDA_CHECK(cudaStreamWaitEvent(st, e, 0));
}

void StrandExecutor::chain_before(int s, int i, cudaStream_t st) const {
  if (!chain_mem_ || s != 0 || chain_mem_->before_fwd.empty()) return;
  for (cudaEvent_t e : chain_mem_->before_fwd[size_t(i)]) BRAID_CUDA_CHECK(cudaStreamWaitEvent(st, e, 0));
}

void StrandExecutor::chain_after(int s, int i, cudaStream_t st) const {
  if (!chain_mem_ || s != 1 || chain_mem_->after_bwd.empty() || !chain_mem_->after_bwd[size_t(i)]) return;
  BRAID_CUDA_CHECK(cudaEventRecord(chain_mem_->after_bwd[size_t(i)], st));
}

void StrandExecutor::chain_tails_last(const std::vector<std::pair<Pass, int>>& order, int (&last)[2][3]) const {
  for (auto& l : last) l[0] = l[1] = l[2] = -1;
  if (!chain_tails_) return;
  for (size_t k = 0; k < order.size(); ++k)
    last[order[k].first == Pass::Forward ? 0 : 1][stream_index(stream_of(order[k].first, order[k].second))] = int(k);
  for (int s = 0; s < 2; ++s)
    for (int j = 0; j < 3; ++j) {
      chain_tails_->used[s][j] = last[s][j] >= 0;
      BRAID_REQUIRE(last[s][j] < 0 || chain_tails_->ev[s][j], "strands: run_chained needs the caller's tail events");
    }
}

std::vector<std::pair<Pass, int>> StrandExecutor::whole_order() const {
  std::vector<std::pair<Pass, int>> order;
  for (const auto& st : plan_.steps) {
    const auto o = issue_order(st.fwd, st.bwd);
    order.insert(order.end(), o.begin(), o.end());
  }
  return order;
}

void StrandExecutor::run_chained(model::Layer& fwd, model::Layer& bwd, const std::vector<cudaEvent_t> (&after)[2],
                                 StrandTailEvents& tails, const ChainMemoryEvents* mem) {
  BRAID_REQUIRE(!plan_.steps.empty(), "strands: run_chained() needs a plan");
  BRAID_REQUIRE(!mem || ((mem->before_fwd.empty() || mem->before_fwd.size() == dag_.fwd.size()) &&
                         (mem->after_bwd.empty() || mem->after_bwd.size() == dag_.bwd.size())),
                "strands: run_chained's memory events need one entry per operator of each pass");
  BRAID_REQUIRE(&fwd != &bwd, "strands: the two strands must be different layers (activation sets)");
  BRAID_REQUIRE(!step_barrier_, "strands: run_chained() is for the barrier-free executor");
  next_ = 0;
  const std::vector<std::pair<Pass, int>> order = whole_order();
  chain_after_ = after, chain_tails_ = &tails, chain_mem_ = mem;
  try {
    issue(&fwd, &bwd, order);
  } catch (...) {
    chain_after_ = nullptr, chain_tails_ = nullptr, chain_mem_ = nullptr;
    throw;
  }
  chain_after_ = nullptr, chain_tails_ = nullptr, chain_mem_ = nullptr;
  uncap(&fwd, &bwd);
}

void StrandExecutor::run(model::Layer& fwd, model::Layer& bwd) {
  BRAID_REQUIRE(!plan_.steps.empty(), "strands: run() needs a plan");
  BRAID_REQUIRE(&fwd != &bwd, "strands: the two strands must be different layers (activation sets)");
  next_ = 0;
  fork();
  if (!step_barrier_) {  // one chained sequence: the steps' issue orders back to back
    issue(&fwd, &bwd, whole_order());
    join();
    uncap(&fwd, &bwd);
    return;
  }
  for (size_t k = 0; k < plan_.steps.size(); ++k) {
    if (k > 0) {  // barrier: each stream waits for the other two
      cudaStream_t ss[3] = {s_.compute, s_.local, s_.cross};
      cudaEvent_t ev[3];
      for (int j = 0; j < 3; ++j) {
        ev[j] = next_event();
        BRAID_CUDA_CHECK(cudaEventRecord(ev[j], ss[j]));
      }
      for (int j = 0; j < 3; ++j)
        for (int q = 0; q < 3; ++q)
          if (q != j) BRAID_CUDA_CHECK(cudaStreamWaitEvent(ss[j], ev[q], 0));
    }
    step(&fwd, plan_.steps[k].fwd, &bwd, plan_.steps[k].bwd);
  }
  join();
  uncap(&fwd, &bwd);
}

void StrandExecutor::run_step(model::Layer* fwd, const std::vector<int>& fseg, model::Layer* bwd,
                              const std::vector<int>& bseg) {
  next_ = 0;
  fork();
  step(fwd, fseg, bwd, bseg);
  join();
  uncap(fwd, bwd);
}

void run_single_strand(model::Layer& fwd, model::Layer& bwd, cudaStream_t stream) {
  fwd.forward(stream);
  bwd.backward(stream);
}

void run_round_robin(model::Layer& fwd, model::Layer& bwd, cudaStream_t s1, cudaStream_t s2, cudaEvent_t ev[2]) {
  BRAID_CUDA_CHECK(cudaEventRecord(ev[0], s1));
  BRAID_CUDA_CHECK(cudaStreamWaitEvent(s2, ev[0], 0));
  // The backward first: an MoE forward blocks the host at its dispatch (waiting for its counts), and
  // the backward must already be queued by then to overlap with it.
  bwd.backward(s2);
  fwd.forward(s1);
  BRAID_CUDA_CHECK(cudaEventRecord(ev[1], s2));
  BRAID_CUDA_CHECK(cudaStreamWaitEvent(s1, ev[1], 0));
}

void run_compute_only(model::Layer& fwd, model::Layer& bwd, cudaStream_t stream, OpTrace* trace) {
  for (const auto ph : {model::Phase::kForward, model::Phase::kBackward}) {
    model::Layer& l = ph == model::Phase::kForward ? fwd : bwd;
    const auto& ops = l.ops(ph);
    for (size_t i = 0; i < ops.size(); ++i) {
      if (ops[i].kind == model::OpKind::kComm) continue;
      if (trace) trace->begin((ph == model::Phase::kForward ? "f." : "b.") + ops[i].name, stream);
      l.run_op(ph, i, stream);
      if (trace) trace->end(stream);
    }
  }
}

OpTrace::~OpTrace() {
  for (auto e : ev_) cudaEventDestroy(e);
}

void OpTrace::begin(const std::string& name, cudaStream_t s) {
  BRAID_REQUIRE(ev_.size() == 2 * names_.size(), "OpTrace::begin: the previous operator was not ended");
  cudaEvent_t e[2] = {nullptr, nullptr};
  BRAID_CUDA_CHECK(cudaEventCreate(&e[0]));
  BRAID_CUDA_CHECK(cudaEventCreate(&e[1]));
  ev_.push_back(e[0]);
  ev_.push_back(e[1]);
  names_.push_back(name);
  streams_.push_back(s);
  BRAID_CUDA_CHECK(cudaEventRecord(e[0], s));
}

void OpTrace::end(cudaStream_t s) {
  BRAID_REQUIRE(ev_.size() == 2 * names_.size() && !names_.empty(), "OpTrace::end without begin");
  BRAID_CUDA_CHECK(cudaEventRecord(ev_.back(), s));
}

std::vector<OpTrace::Total> OpTrace::totals() const {
  std::vector<Total> out;
  for (size_t i = 0; i < names_.size(); ++i) {
    float ms = 0;
    BRAID_CUDA_CHECK(cudaEventElapsedTime(&ms, ev_[2 * i], ev_[2 * i + 1]));
    auto it = std::find_if(out.begin(), out.end(), [&](const Total& t) { return t.name == names_[i]; });
    if (it == out.end()) it = out.insert(out.end(), Total{names_[i], 0.0, 0});
    it->us += 1e3 * ms, it->calls += 1;
  }
  return out;
}

double OpTrace::span_us() const {
  if (ev_.empty()) return 0;
  float ms = 0;
  BRAID_CUDA_CHECK(cudaEventElapsedTime(&ms, ev_.front(), ev_.back()));
  return 1e3 * ms;
}

double OpTrace::ops_us() const {
  double us = 0;
  for (const auto& t : totals()) us += t.us;
  return us;
}

std::vector<OpTrace::Span> OpTrace::spans() const {
  std::vector<Span> out;
  if (names_.empty()) return out;
  double first = 0;
  for (size_t i = 0; i < names_.size(); ++i) {
    float s_ms = 0, e_ms = 0;  // against the first recorded start; an operator on another stream may start earlier
    BRAID_CUDA_CHECK(cudaEventElapsedTime(&s_ms, ev_[0], ev_[2 * i]));
    BRAID_CUDA_CHECK(cudaEventElapsedTime(&e_ms, ev_[0], ev_[2 * i + 1]));
    out.push_back(Span{names_[i], streams_[i], 1e3 * double(s_ms), 1e3 * double(e_ms)});
    first = std::min(first, out.back().start_us);
  }
  for (auto& x : out) x.start_us -= first, x.end_us -= first;
  return out;
}

namespace {
thread_local OpTrace* g_active_trace = nullptr;  // OpTrace::Scope
}

OpTrace* OpTrace::active() { return g_active_trace; }

OpTrace::Scope::Scope(OpTrace& trace) {
  BRAID_REQUIRE(g_active_trace == nullptr, "OpTrace::Scope: scopes do not nest");
  g_active_trace = &trace;
}

OpTrace::Scope::~Scope() { g_active_trace = nullptr; }

bool PlacedMemory::windowed(const model::Layer& a, const model::Layer& b) {
  return a.copy_engine_collectives() && b.copy_engine_collectives();
}

PlacedMemory::PlacedMemory(model::Layer& a, model::Layer& b, size_t bytes) {
  BRAID_REQUIRE(bytes > 0, "placed memory: no bytes");
  if (windowed(a, b)) {
    ca_ = &a.comm();
    p_ = ca_->alloc_window(bytes);
    BRAID_REQUIRE(p_ != nullptr, "placed memory: the copy-engine comm offers no window (internal error)");
    window_ = true;
    if (&b.comm() != ca_) {  // (one comm for both: its window serves both)
      try {
        BRAID_REQUIRE(b.comm().register_window(p_, bytes), "placed memory: the second comm takes no window (internal error)");
      } catch (...) {
        ca_->free_window(p_);
        throw;
      }
      cb_ = &b.comm();
    }
  } else {
    BRAID_CUDA_CHECK(cudaMalloc(&p_, bytes));
  }
}

PlacedMemory::~PlacedMemory() {
  if (!window_) {
    cudaFree(p_);
    return;
  }
  try {  // collective: the registration goes first, then the owner's window
    BRAID_CUDA_CHECK(cudaDeviceSynchronize());
    if (cb_) cb_->free_window(p_);
    ca_->free_window(p_);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "placed memory: releasing a window: %s\n", e.what());
  }
}

SharedActivationPool::SharedActivationPool(const Layer& dag, const std::vector<std::pair<Pass, int>>& order,
                                           const model::ModelConfig& c, const model::Parallel& p, model::Layer& a,
                                           model::Layer& b, const PlacementChoice* choice) {
  // Copy-engine layers in a window (PlacedMemory) gather h1f / h2f in place: their norms are those tensors' first
  // writers (Layer::place_saved), which the memory waits below must precede.
  auto saved = saved_tensors(c, p, PlacedMemory::windowed(a, b));
  const auto layout = a.saved_layout();
  BRAID_REQUIRE(!saved.empty() && layout.size() == saved.size(), "strands: the layer's saved tensors do not match schedule::saved_tensors");
  for (auto& t : saved) {
    size_t n = 0;
    for (const auto& [name, sz] : layout)
      if (name == t.name) n = sz;
    BRAID_REQUIRE(n > 0, "strands: the layer has no saved tensor " + t.name);
    t.bytes = double((n + 255) / 256 * 256);
  }
  const ArenaPlacement pl = two_strand_placement(dag, order, saved, choice);
  bytes = pl.pool_bytes, one_set = pl.one_set_bytes;
  memory = std::make_unique<PlacedMemory>(a, b, size_t(bytes));
  base = memory->get();
  std::vector<std::pair<std::string, size_t>> oa, ob;
  for (size_t i = 0; i < saved.size(); ++i) {
    oa.push_back({saved[i].name, size_t(pl.offset_a[i])});
    ob.push_back({saved[i].name, size_t(pl.offset_b[i])});
  }
  a.place_saved(base, oa);
  b.place_saved(base, ob);
  waits = memory_waits(dag, saved, pl, /*a_forward=*/true);
  waits_b = memory_waits(dag, saved, pl, /*a_forward=*/false);
  this->saved = saved, offset_a = pl.offset_a, offset_b = pl.offset_b;
}

SharedActivationPool::~SharedActivationPool() = default;

// ---- StrandStack -------------------------------------------------------------------------------------

namespace {
size_t round256(size_t n) { return (n + 255) / 256 * 256; }
}  // namespace

StrandStack::StrandStack(model::Layer& a, model::Layer& b, int layers, int spare, std::vector<std::string> doubled)
    : a_(a), b_(b), layers_(layers), spare_(spare) {
  BRAID_REQUIRE(layers >= 1, "strand stack: needs at least one layer");
  BRAID_REQUIRE(spare >= 0, "strand stack: spare slots must be >= 0");
  BRAID_REQUIRE(spare == 0 || doubled.empty(), "strand stack: spare slots or doubled tensors, not both");
  BRAID_REQUIRE(&a != &b, "strand stack: needs two layer objects");
  BRAID_REQUIRE(a.accumulates_grads() && b.accumulates_grads(),
                "strand stack: both layers must accumulate their weight gradients (the stack's layers add up)");
  const auto layout = a.saved_layout(), lb = b.saved_layout();
  BRAID_REQUIRE(layout == lb && a.local_tokens() == b.local_tokens() && a.config().hidden == b.config().hidden,
                "strand stack: the two layers must have one configuration");
  for (const auto& d : doubled)
    BRAID_REQUIRE(d == "x" || std::any_of(layout.begin(), layout.end(), [&](const auto& e) { return e.first == d; }),
                  "strand stack: no saved tensor " + d + " to double");
  io_bytes_ = size_t(a.local_tokens()) * size_t(a.config().hidden) * 2;  // bf16 [local_tokens, hidden]
  // A layer's storage: its late part (a slot) and, with doubled tensors, its early part (x and those).
  x_early_ = !doubled.empty();
  size_t late = 0, early = 0;
  for (const auto& [name, n] : layout) {
    const bool e = std::find(doubled.begin(), doubled.end(), name) != doubled.end();
    where_.push_back({name, e, e ? early : late});
    (e ? early : late) += round256(n);
    if (!e) late_names_.push_back(name);
  }
  x_offset_ = x_early_ ? early : late;
  (x_early_ ? early : late) += round256(io_bytes_);
  late_bytes_ = late, early_bytes_ = early;
  const size_t pool_bytes = late_bytes_ * size_t(slots()) + early_bytes_ * size_t(early_regions());
  // A window of the layers' copy-engine comms where they have them (PlacedMemory: h1f / h2f gathered in place).
  pool_mem_ = std::make_unique<PlacedMemory>(a, b, pool_bytes);
  pool_ = static_cast<char*>(pool_mem_->get());
  pool_bytes_ = pool_bytes;
  for (auto& o : io_)
    for (auto& p : o) BRAID_CUDA_CHECK(cudaMalloc(&p, round256(io_bytes_)));
  extra_bytes_ = 4 * round256(io_bytes_);
  BRAID_CUDA_CHECK(cudaMemset(pool_, 0, pool_bytes));
  for (auto& o : io_)
    for (auto& p : o) BRAID_CUDA_CHECK(cudaMemset(p, 0, round256(io_bytes_)));
  // cudaMemset runs on the legacy stream, which the callers' non-blocking streams do not wait for: without this a
  // late memset zeroed the inputs and slots a stack built just before its first pass had been given (forty-third
  // session: bench strands' spare-slot stack on a shared GPU, every gradient wrong; 2x H200 had been lucky).
  BRAID_CUDA_CHECK(cudaDeviceSynchronize());
  place(0, 0, 0), place(1, 0, 0);  // the objects free their own saved sets and x (no work is queued yet)
  for (auto& c : copy_) BRAID_CUDA_CHECK(cudaStreamCreateWithFlags(&c, cudaStreamNonBlocking));
  int least = 0, greatest = 0;
  BRAID_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  BRAID_CUDA_CHECK(cudaStreamCreateWithPriority(&ranked_[0], cudaStreamNonBlocking, least));
  BRAID_CUDA_CHECK(cudaStreamCreateWithPriority(&ranked_[1], cudaStreamNonBlocking, greatest));
  if (const size_t n = a_.device_counts_size(); n > 0)
    BRAID_CUDA_CHECK(cudaMalloc(&counts_stash_, 2 * size_t(layers_) * n * sizeof(float)));
  for (cudaEvent_t* e : {&start_, &copied_[0], &copied_[1]})
    BRAID_CUDA_CHECK(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
  // Tails are looked up by the unit that freed a slot: spare + 1 units back (+ 1 for the early parts).
  tails_.resize(size_t(spare_) + 2 + (x_early_ ? 1 : 0));
  for (auto& t : tails_)
    for (auto& per : t.ev)
      for (auto& e : per) BRAID_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  reset();
}

StrandStack::~StrandStack() {
  if (counts_stash_) cudaFree(counts_stash_);
  for (auto& o : io_)
    for (auto p : o) cudaFree(p);
  for (auto c : {copy_[0], copy_[1], ranked_[0], ranked_[1], link_})
    if (c) cudaStreamDestroy(c);
  for (auto e : done_)
    if (e) cudaEventDestroy(e);
  for (cudaEvent_t e : {start_, copied_[0], copied_[1]})
    if (e) cudaEventDestroy(e);
  for (auto& t : tails_)
    for (auto& per : t.ev)
      for (auto e : per)
        if (e) cudaEventDestroy(e);
  for (auto& r : reads_)
    for (auto e : r)
      if (e) cudaEventDestroy(e);
}

void StrandStack::reset() {
  for (auto& h : held_) h.assign(size_t(layers_), {-1, -1});
  for (auto& r : routes_) r.assign(size_t(layers_), {});
  for (auto& r : real_) r.assign(size_t(layers_), {});
  for (auto& r : recorded_) r.assign(size_t(layers_), 0);
  free_.clear(), free_early_.clear();
  for (int k = slots() - 1; k >= 0; --k) free_.push_back(k);  // slot 0 is taken first
  for (int k = early_regions() - 1; k >= 0; --k) free_early_.push_back(k);
  turn_ = 0;
}

char* StrandStack::x_of(int slot, int eslot) const {
  return x_early_ ? pool_ + late_bytes_ * size_t(slots()) + size_t(eslot) * early_bytes_ + x_offset_
                  : pool_ + size_t(slot) * late_bytes_ + x_offset_;
}

void StrandStack::place(int o, int slot, int eslot) {
  std::vector<std::pair<std::string, size_t>> offsets;
  const size_t early_base = late_bytes_ * size_t(slots()) + size_t(eslot) * early_bytes_;
  for (const auto& w : where_)
    offsets.push_back({w.name, w.early ? early_base + w.offset : size_t(slot) * late_bytes_ + w.offset});
  obj(o).place_saved(pool_, offsets);
  obj(o).place_input(x_of(slot, eslot));
}

StrandStack::Held StrandStack::prep_forward(int o, int l, cudaStream_t s, bool fifo) {
  BRAID_REQUIRE(!free_.empty() && held_[o][size_t(l)].slot < 0 && (!x_early_ || !free_early_.empty()),
                "strand stack: no free slot for a forward (internal error)");
  auto take = [&](std::deque<int>& q) {
    if (q.empty()) return 0;  // no early parts: index 0, unused
    const int k = fifo ? q.front() : q.back();
    if (fifo)
      q.pop_front();
    else
      q.pop_back();
    return k;
  };
  const Held h{take(free_), take(free_early_)};
  held_[o][size_t(l)] = h;
  // The layer's input: the micro-batch's for layer 0, else the previous layer's output (y, written by the
  // previous unit, which ended on s).
  const void* src = l == 0 ? io_[o][0] : obj(o).y();
  place(o, h.slot, h.early);
  BRAID_CUDA_CHECK(cudaMemcpyAsync(x_of(h.slot, h.early), src, io_bytes_, cudaMemcpyDeviceToDevice, s));
  return h;
}

void StrandStack::prep_backward(int o, int l, cudaStream_t s) {
  const Held h = held_[o][size_t(l)];
  BRAID_REQUIRE(h.slot >= 0, "strand stack: a backward of a layer whose forward did not run (internal error)");
  place(o, h.slot, h.early);
  obj(o).set_routing(routes_[o][size_t(l)]);  // MoE: the counts its forward found (empty for a dense layer)
  // The layer's output gradient: the micro-batch's for the top layer, else the layer above's dx.
  const void* src = l == layers_ - 1 ? io_[o][1] : obj(o).dx();
  BRAID_CUDA_CHECK(cudaMemcpyAsync(obj(o).dy(), src, io_bytes_, cudaMemcpyDeviceToDevice, s));
}

void StrandStack::keep_routing(int o, int l, cudaStream_t s, bool record) {
  routes_[o][size_t(l)] = obj(o).routing();
  if (!record) return;
  real_[o][size_t(l)] = routes_[o][size_t(l)];
  if (const size_t n = obj(o).device_counts_size(); n > 0)  // after the forward's a2a_counts on s
    BRAID_CUDA_CHECK(cudaMemcpyAsync(counts_stash_ + (size_t(o) * layers_ + l) * n, obj(o).device_counts(),
                                     n * sizeof(float), cudaMemcpyDeviceToDevice, s));
  recorded_[o][size_t(l)] = 1;
}

void StrandStack::release(int o, int l) {
  free_.push_back(held_[o][size_t(l)].slot);
  if (x_early_) free_early_.push_back(held_[o][size_t(l)].early);
  held_[o][size_t(l)] = {-1, -1};
}

void StrandStack::forward(int o, cudaStream_t s) {
  BRAID_REQUIRE(o == 0 || o == 1, "strand stack: object 0 or 1");
  for (int l = 0; l < layers_; ++l) {
    prep_forward(o, l, s);
    obj(o).forward(s);
    keep_routing(o, l, s, /*record=*/true);
  }
  turn_ = 1 - o;  // o holds every layer: its backward comes next, beside the other's forward
}

void StrandStack::require_pass_start(int f, int b) const {
  for (int l = 0; l < layers_; ++l)
    BRAID_REQUIRE(held_[b][size_t(l)].slot >= 0 && held_[f][size_t(l)].slot < 0,
                  "strand stack: a pass needs one object holding every layer (forward() first)");
}

std::vector<std::vector<int>> StrandStack::late_waits(const Layer& dag) {
  std::vector<std::vector<int>> waits(dag.fwd.size());
  if (!x_early_) return waits;
  waits = slot_reuse_waits(dag, saved_tensors(a_.config(), a_.parallel(), pool_mem_->window()), late_names_);
  if (reads_[0].size() != dag.bwd.size())
    for (auto& r : reads_) {
      for (auto e : r)
        if (e) BRAID_CUDA_CHECK(cudaEventDestroy(e));
      r.assign(dag.bwd.size(), nullptr);
    }
  for (const auto& w : waits)
    for (int jb : w)
      for (auto& r : reads_)
        if (!r[size_t(jb)]) BRAID_CUDA_CHECK(cudaEventCreateWithFlags(&r[size_t(jb)], cudaEventDisableTiming));
  return waits;
}

void StrandStack::pass(cudaStream_t s, const std::function<void(model::Layer&, model::Layer&)>& unit) {
  const int f = turn_, b = 1 - turn_;
  require_pass_start(f, b);
  for (int i = 0; i < layers_; ++i) {
    const int j = layers_ - 1 - i;
    prep_forward(f, i, s);
    prep_backward(b, j, s);
    unit(obj(f), obj(b));
    keep_routing(f, i);
    release(b, j);  // its slot is taken by the next unit's forward, enqueued after this unit on s
  }
  turn_ = b;
}

void StrandStack::pass_chained(cudaStream_t s, StrandExecutor& ex) {
  const int f = turn_, b = 1 - turn_;
  require_pass_start(f, b);
  // With doubled tensors the late parts are handed over at operator grain: forward op i waits for the
  // backward ops, in the unit that freed the slot, that read a late tensor op i writes there.
  const Layer& dag = ex.dag();
  const std::vector<std::vector<int>> waits = late_waits(dag);
  // Everything before the pass (the slots' last readers included) is ordered by start_.
  BRAID_CUDA_CHECK(cudaEventRecord(start_, s));
  freed_in_.assign(size_t(slots()), -1);
  freed_early_in_.assign(size_t(early_regions()), -1);
  std::vector<cudaEvent_t> after[2] = {{start_}, {start_}};  // what strand f (0) and b (1) last ended with
  const int ring = int(tails_.size());
  auto wait_tails_of_unit = [&](int u, int i) {  // copy_[0] waits for unit u's b (u < 0: before the pass)
    if (u < 0) return;
    BRAID_REQUIRE(i - u < ring, "strand stack: a freed slot's events were recorded again (internal error)");
    const StrandTailEvents& t = tails_[size_t(u % ring)];
    for (int q = 0; q < 3; ++q)
      if (t.used[1][q]) BRAID_CUDA_CHECK(cudaStreamWaitEvent(copy_[0], t.ev[1][q], 0));
  };
  ChainMemoryEvents mem;
  for (int i = 0; i < layers_; ++i) {
    const int j = layers_ - 1 - i;
    // b's output gradient for layer j (the layer above's dx, written by b's previous unit) into dy.
    for (cudaEvent_t e : after[1]) BRAID_CUDA_CHECK(cudaStreamWaitEvent(copy_[1], e, 0));
    prep_backward(b, j, copy_[1]);
    BRAID_CUDA_CHECK(cudaEventRecord(copied_[1], copy_[1]));
    // f's input for layer i (its previous unit's y) into the longest-free x, once the unit of b that freed
    // that memory is over: x's slot (the whole slot when nothing is doubled: every reader of its saved set
    // was b's backward of that layer), or x's early part.
    for (cudaEvent_t e : after[0]) BRAID_CUDA_CHECK(cudaStreamWaitEvent(copy_[0], e, 0));
    BRAID_REQUIRE(!free_.empty() && (!x_early_ || !free_early_.empty()),
                  "strand stack: no free slot for a forward (internal error)");
    const int late_from = freed_in_[size_t(free_.front())];
    wait_tails_of_unit(x_early_ ? freed_early_in_[size_t(free_early_.front())] : late_from, i);
    prep_forward(f, i, copy_[0], /*fifo=*/true);
    BRAID_CUDA_CHECK(cudaEventRecord(copied_[0], copy_[0]));
    if (x_early_) {  // the late tensors: op grain, against the readers in unit late_from
      mem.before_fwd.assign(dag.fwd.size(), {});
      if (late_from >= 0) {
        BRAID_REQUIRE(i - late_from == 1, "strand stack: a late slot freed more than one unit back (internal error)");
        for (size_t q = 0; q < waits.size(); ++q)
          for (int jb : waits[q]) mem.before_fwd[q].push_back(reads_[size_t(late_from % 2)][size_t(jb)]);
      }
      mem.after_bwd = reads_[size_t(i % 2)];
    }
    const std::vector<cudaEvent_t> wait[2] = {{copied_[0]}, {copied_[1]}};
    StrandTailEvents& t = tails_[size_t(i % ring)];
    ex.run_chained(obj(f), obj(b), wait, t, x_early_ ? &mem : nullptr);
    keep_routing(f, i);
    const Held freed = held_[b][size_t(j)];
    release(b, j);
    freed_in_[size_t(freed.slot)] = i;
    if (x_early_) freed_early_in_[size_t(freed.early)] = i;
    for (int o = 0; o < 2; ++o) {
      after[o].clear();
      for (int q = 0; q < 3; ++q)
        if (t.used[o][q]) after[o].push_back(t.ev[o][q]);
    }
  }
  for (const auto& a : after)
    for (cudaEvent_t e : a) BRAID_CUDA_CHECK(cudaStreamWaitEvent(s, e, 0));
  turn_ = b;
}

void StrandStack::pass_chained_rr(cudaStream_t s, bool backward_first, bool moves) {
  const int f = turn_, b = 1 - turn_;
  require_pass_start(f, b);
  cudaStream_t* own = backward_first ? ranked_ : copy_;
  cudaStream_t sf = own[0], sb = own[1];  // each strand's one stream: its copies and its operators
  const size_t nf = obj(f).ops(model::Phase::kForward).size(), nb = obj(b).ops(model::Phase::kBackward).size();
  std::vector<std::vector<int>> waits(nf);
  Layer dag;  // the layer's DAG (its operators in the same order): for the late tensors' readers and the moves
  if (x_early_ || moves) {
    dag = strand_layer(a_.config(), a_.parallel());
    BRAID_REQUIRE(dag.fwd.size() == nf && dag.bwd.size() == nb, "strand stack: the layer's ops and its DAG differ");
  }
  if (x_early_) waits = late_waits(dag);
  // b's issue order and where each op runs: moves — sinks_beside_collectives' order, collectives on link_ (events
  // after every op carry the DAG's dependencies between the two streams); else the pass order on sb.
  std::vector<int> border(nb);
  for (size_t k = 0; k < nb; ++k) border[k] = int(k);
  std::vector<char> linked(nb, 0);
  if (moves) {
    border = sinks_beside_collectives(dag, Pass::Backward);
    for (size_t k = 0; k < nb; ++k) linked[k] = dag.bwd[k].kind == OpKind::Comm;
    if (!link_) {
      int prio = 0;
      BRAID_CUDA_CHECK(cudaStreamGetPriority(sb, &prio));
      BRAID_CUDA_CHECK(cudaStreamCreateWithPriority(&link_, cudaStreamNonBlocking, prio));
    }
    if (done_.size() != nb + 1) {
      for (auto e : done_)
        if (e) BRAID_CUDA_CHECK(cudaEventDestroy(e));
      done_.assign(nb + 1, nullptr);
      for (auto& e : done_) BRAID_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    }
  }
  BRAID_CUDA_CHECK(cudaEventRecord(start_, s));
  BRAID_CUDA_CHECK(cudaStreamWaitEvent(sf, start_, 0));
  BRAID_CUDA_CHECK(cudaStreamWaitEvent(sb, start_, 0));
  freed_in_.assign(size_t(slots()), -1);
  freed_early_in_.assign(size_t(early_regions()), -1);
  const int ring = int(tails_.size());
  for (int i = 0; i < layers_; ++i) {
    const int j = layers_ - 1 - i;
    BRAID_REQUIRE(!free_.empty() && (!x_early_ || !free_early_.empty()),
                  "strand stack: no free slot for a forward (internal error)");
    const int late_from = freed_in_[size_t(free_.front())];
    // x's memory: freed by b's unit u (its whole slot, or its early part): sf waits for that unit's end.
    if (const int u = x_early_ ? freed_early_in_[size_t(free_early_.front())] : late_from; u >= 0) {
      BRAID_REQUIRE(i - u < ring, "strand stack: a freed slot's events were recorded again (internal error)");
      BRAID_CUDA_CHECK(cudaStreamWaitEvent(sf, tails_[size_t(u % ring)].ev[1][0], 0));
    }
    prep_forward(f, i, sf, /*fifo=*/true);
    for (size_t k = 0; k < nf; ++k) {
      if (x_early_ && late_from >= 0)
        for (int jb : waits[k]) BRAID_CUDA_CHECK(cudaStreamWaitEvent(sf, reads_[size_t(late_from % 2)][size_t(jb)], 0));
      obj(f).run_op(model::Phase::kForward, k, sf);
    }
    keep_routing(f, i);
    prep_backward(b, j, sb);
    // moves: the link stream starts after everything b issued before (the unit's copies, the last unit), and each
    // op waits for its DAG dependencies that ran on the other stream (same-stream ones are in stream order).
    if (moves) {
      BRAID_CUDA_CHECK(cudaEventRecord(done_[nb], sb));
      BRAID_CUDA_CHECK(cudaStreamWaitEvent(link_, done_[nb], 0));
    }
    for (const int kk : border) {
      const size_t k = size_t(kk);
      cudaStream_t on = linked[k] ? link_ : sb;
      if (moves)
        for (const int d : dag.bwd[k].deps)
          if (linked[size_t(d)] != linked[k]) BRAID_CUDA_CHECK(cudaStreamWaitEvent(on, done_[size_t(d)], 0));
      obj(b).run_op(model::Phase::kBackward, k, on);
      if (moves) BRAID_CUDA_CHECK(cudaEventRecord(done_[k], on));
      if (x_early_ && reads_[size_t(i % 2)][k]) BRAID_CUDA_CHECK(cudaEventRecord(reads_[size_t(i % 2)][k], on));
    }
    if (moves) {  // b's unit ends on sb only after its last collective too
      BRAID_CUDA_CHECK(cudaEventRecord(done_[nb], link_));
      BRAID_CUDA_CHECK(cudaStreamWaitEvent(sb, done_[nb], 0));
    }
    BRAID_CUDA_CHECK(cudaEventRecord(tails_[size_t(i % ring)].ev[1][0], sb));  // b's unit i is over
    const Held freed = held_[b][size_t(j)];
    release(b, j);
    freed_in_[size_t(freed.slot)] = i;
    if (x_early_) freed_early_in_[size_t(freed.early)] = i;
  }
  BRAID_CUDA_CHECK(cudaEventRecord(copied_[0], sf));
  BRAID_CUDA_CHECK(cudaEventRecord(copied_[1], sb));
  BRAID_CUDA_CHECK(cudaStreamWaitEvent(s, copied_[0], 0));
  BRAID_CUDA_CHECK(cudaStreamWaitEvent(s, copied_[1], 0));
  turn_ = b;
}

void StrandStack::pass_single(cudaStream_t s) {
  const int f = turn_, b = 1 - turn_;
  require_pass_start(f, b);
  for (int j = layers_ - 1; j >= 0; --j) {
    prep_backward(b, j, s);
    obj(b).backward(s);
    release(b, j);
  }
  for (int i = 0; i < layers_; ++i) {
    prep_forward(f, i, s);
    obj(f).forward(s);
    keep_routing(f, i, s, /*record=*/true);
  }
  turn_ = b;
}

void StrandStack::pass_compute_only(cudaStream_t s, OpTrace* trace) {
  const int f = turn_, b = 1 - turn_;
  require_pass_start(f, b);
  const bool moe = obj(f).config().moe();  // a dense layer's work does not depend on routing: nothing to replay
  for (int i = 0; moe && i < layers_; ++i)
    BRAID_REQUIRE(recorded_[f][size_t(i)],
                  "strand stack: pass_compute_only needs a real forward of the object's every layer first (forward() or "
                  "pass_single())");
  const size_t n = obj(f).device_counts_size();
  for (int i = 0; i < layers_; ++i) {
    const int j = layers_ - 1 - i;
    prep_forward(f, i, s);
    prep_backward(b, j, s);
    if (moe) obj(f).set_routing(real_[f][size_t(i)]);  // host counts: the expert GEMMs' rows, the exchanges' sizes
    if (n > 0)  // device counts: expert_layout derives this layer's layout (a saved tensor) from them
      BRAID_CUDA_CHECK(cudaMemcpyAsync(obj(f).device_counts(), counts_stash_ + (size_t(f) * layers_ + i) * n,
                                       n * sizeof(float), cudaMemcpyDeviceToDevice, s));
    run_compute_only(obj(f), obj(b), s, trace);
    keep_routing(f, i);
    release(b, j);
  }
  turn_ = b;
}

}  // namespace braid::schedule
