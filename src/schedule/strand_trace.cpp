// summarize_strand_trace (strands.hpp): a traced two-strand run's compute-stream busy and idle time, its gaps by
// what they held back and waited for, and its operators against a compute-only reference. CPU only.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "braid/schedule/strands.hpp"

namespace braid::schedule {

StrandTraceSummary summarize_strand_trace(const std::vector<OpTrace::Span>& run, const std::vector<OpTrace::Span>& ref,
                                          cudaStream_t compute) {
  StrandTraceSummary out;
  std::vector<const OpTrace::Span*> comp, link;
  for (const auto& x : run) {
    (x.stream == compute ? comp : link).push_back(&x);
    out.span_us = std::max(out.span_us, x.end_us);
  }
  for (const auto& x : ref) out.ref_span_us = std::max(out.ref_span_us, x.end_us), out.ref_busy_us += x.end_us - x.start_us;
  std::sort(comp.begin(), comp.end(), [](auto* x, auto* y) { return x->start_us < y->start_us; });
  for (auto* c : comp) out.busy_us += c->end_us - c->start_us;
  for (auto* l : link) out.link_busy_us += l->end_us - l->start_us;
  out.collectives = int(link.size());
  out.idle_us = out.span_us - out.busy_us;
  out.ref_idle_us = out.ref_span_us - out.ref_busy_us;
  // The union of the collectives' intervals (any link stream).
  std::vector<std::pair<double, double>> in_flight;
  {
    std::vector<std::pair<double, double>> iv;
    for (auto* l : link) iv.push_back({l->start_us, l->end_us});
    std::sort(iv.begin(), iv.end());
    for (const auto& x : iv)
      if (!in_flight.empty() && x.first <= in_flight.back().second)
        in_flight.back().second = std::max(in_flight.back().second, x.second);
      else
        in_flight.push_back(x);
  }
  auto overlap = [&](double a, double b) {  // of [a, b) with a collective in flight
    double o = 0;
    for (const auto& [x, y] : in_flight) o += std::max(0.0, std::min(b, y) - std::max(a, x));
    return o;
  };
  auto add_gap = [&](double a, double b, const std::string& held) {
    if (b <= a) return;
    const double w = overlap(a, b);
    out.idle_in_flight_us += w;
    if (b - a < 1.0) return;  // below the events' resolution: counted, not listed
    std::string waited = "-";
    double last = -1;
    for (auto* l : link)  // the collective that ended last within the gap (0.5 us of slack for the event pair)
      if (l->end_us > a && l->end_us <= b + 0.5 && l->end_us > last) last = l->end_us, waited = l->name;
    auto it = std::find_if(out.gaps.begin(), out.gaps.end(),
                           [&](const StrandTraceSummary::Gap& g) { return g.held == held && g.waited == waited; });
    if (it == out.gaps.end()) it = out.gaps.insert(out.gaps.end(), StrandTraceSummary::Gap{held, waited});
    it->us += b - a, it->in_flight_us += w, it->longest_us = std::max(it->longest_us, b - a), it->count += 1;
  };
  double prev = 0;
  for (auto* c : comp) {
    add_gap(prev, c->start_us, c->name);
    prev = c->end_us;
  }
  add_gap(prev, out.span_us, "(the end)");
  std::stable_sort(out.gaps.begin(), out.gaps.end(), [](const auto& x, const auto& y) { return x.us > y.us; });
  auto slot = [&](const std::string& name) {
    auto it = std::find_if(out.ops.begin(), out.ops.end(), [&](const StrandTraceSummary::Op& x) { return x.name == name; });
    return it == out.ops.end() ? out.ops.insert(out.ops.end(), StrandTraceSummary::Op{name}) : it;
  };
  for (auto* c : comp) {
    auto it = slot(c->name);
    it->us += c->end_us - c->start_us, it->beside_us += overlap(c->start_us, c->end_us), it->calls += 1;
  }
  for (const auto& x : ref) slot(x.name)->ref_us += x.end_us - x.start_us;
  for (const auto& x : out.ops) (x.beside_us > 0.5 * x.us ? out.excess_beside_us : out.excess_alone_us) += x.us - x.ref_us;
  std::stable_sort(out.ops.begin(), out.ops.end(), [](const auto& x, const auto& y) { return x.us - x.ref_us > y.us - y.ref_us; });
  return out;
}

}  // namespace braid::schedule
