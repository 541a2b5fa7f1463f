// shape_cache.hpp — what the per-shape caches share (DecisionCache: partitions; PickCache: schedules): entries keyed by
// (coll, world, m, n, k), a later entry replacing an earlier one of the same key, and the nearest-M lookup for an
// unseen M. E is any struct with those five fields.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <vector>

#include "braid/overlap.hpp"

namespace braid::overlap::detail {

template <class E>
void put_by_shape(std::vector<E>& v, const E& e) {
  for (auto& x : v)
    if (x.coll == e.coll && x.world == e.world && x.m == e.m && x.n == e.n && x.k == e.k) {
      x = e;
      return;
    }
  v.push_back(e);
}

// Same (coll, world, n, k) and usable(entry); nearest m (ties: the larger m). Null if none.
template <class E, class Usable>
const E* nearest_m(const std::vector<E>& v, Collective coll, int world, int64_t m, int64_t n, int64_t k,
                   Usable usable) {
  const E* best = nullptr;
  for (const auto& e : v) {
    if (e.coll != coll || e.world != world || e.n != n || e.k != k || !usable(e)) continue;
    const int64_t d = std::llabs(e.m - m), bd = best ? std::llabs(best->m - m) : 0;
    if (!best || d < bd || (d == bd && e.m > best->m)) best = &e;
  }
  return best;
}

}  // namespace braid::overlap::detail
