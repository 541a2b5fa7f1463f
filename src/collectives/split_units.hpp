// split_units.hpp — the units of work of the one-step quantized all-reduce with split roles
// (ar::quant_onestep_split_kernel): how one chunk's groups are cut into units, each quantized by one block
// and pulled by one block, with a flag per unit. Host and device (the CPU test checks the partition).
#pragma once

#include <cstdint>

#include "braid/quant.hpp"  // BRAID_HD

namespace braid::ar {

// One chunk of gpc groups: `a` head units of `s` groups, then ceil(mid / ug) middle units of `ug` groups
// (mid = gpc - 2 a s; the last middle unit may be short), then `a` tail units of `s` groups. The small ends
// (a > 0: AllReducerConfig::onestep_split_taper) let the pullers start on a unit quantized sooner and end
// on units that one block pulls sooner. a = 0, s = 0, or gpc <= 2 a s: uniform units of ug groups.
// Count: at most gpc / min(s, ug) + 1 (one short middle unit at most) — within the flag table's one unit
// per iteration and chunk, plus one, when s and ug are whole iterations.
struct SplitUnits {
  uint64_t a, s, ug, mid, m;  // head/tail units and their groups, middle unit groups, middle groups and units
  BRAID_HD SplitUnits(uint64_t gpc, uint64_t unit_groups, uint64_t taper_units, uint64_t taper_groups)
      : a(taper_units), s(taper_groups), ug(unit_groups > 0 ? unit_groups : 1), mid(0), m(0) {
    if (a == 0 || s == 0 || gpc <= 2 * a * s) a = 0;
    mid = gpc - 2 * a * s;
    m = (mid + ug - 1) / ug;
  }
  BRAID_HD uint64_t per_chunk() const { return 2 * a + m; }
  // Groups [ga, gb) of the chunk's unit at position j < per_chunk().
  BRAID_HD void range(uint64_t j, uint64_t& ga, uint64_t& gb) const {
    if (j < a) {
      ga = j * s;
      gb = ga + s;
    } else if (j < a + m) {
      ga = a * s + (j - a) * ug;
      gb = ga + ug < a * s + mid ? ga + ug : a * s + mid;
    } else {
      ga = a * s + mid + (j - a - m) * s;
      gb = ga + s;
    }
  }
};

}  // namespace braid::ar
