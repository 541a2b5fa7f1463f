// 1F1B and the W-shaped (folded) pipeline: generators, simulator and checker.
#include "braid/schedule/pipeline.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "braid/errors.hpp"

namespace braid::schedule {

const char* pipe_kind_name(PipeKind k) { return k == PipeKind::OneFOneB ? "1f1b" : "w"; }

int fold_stage(int chunk, int stages) { return chunk < stages ? chunk : 2 * stages - 1 - chunk; }

int chunk_stage(const PipeSchedule& s, int chunk) {
  return s.kind == PipeKind::OneFOneB ? chunk : fold_stage(chunk, s.stages);
}

double ideal_1f1b_bubble(int stages, int microbatches) {
  return double(stages - 1) / double(microbatches + stages - 1);
}

namespace {
void check_args(int stages, int microbatches) {
  if (stages < 1 || microbatches < 1)
    throw UsageError("stages and micro-batches must be >= 1", __FILE__, __LINE__);
}
}  // namespace

PipeSchedule make_1f1b(int P, int M) {
  check_args(P, M);
  PipeSchedule s;
  s.kind = PipeKind::OneFOneB;
  s.stages = P;
  s.microbatches = M;
  s.chunks = P;
  s.stage_slots.resize(P);
  for (int st = 0; st < P; ++st) {
    auto& v = s.stage_slots[st];
    const int warm = std::min(P - 1 - st, M);
    for (int m = 0; m < warm; ++m) v.push_back({{{m, st, false}}});
    for (int i = 0; i < M - warm; ++i) {
      v.push_back({{{warm + i, st, false}}});
      v.push_back({{{i, st, true}}});
    }
    for (int m = M - warm; m < M; ++m) v.push_back({{{m, st, true}}});
  }
  return s;
}

PipeSchedule make_w_shaped(int P, int M) {
  check_args(P, M);
  const int C = 2 * P;
  // Units: (forward micro-batch or -1, backward micro-batch or -1), in injection order.
  std::vector<std::pair<int, int>> units;
  for (int m = 0; m < std::min(P, M); ++m) units.push_back({m, -1});
  for (int m = 0; m + P < M; ++m) units.push_back({m + P, m});
  for (int m = std::max(0, M - P); m < M; ++m) units.push_back({-1, m});
  // Ideal start slot of each unit: two slots after the previous unit, and not before the unit that
  // holds its backward micro-batch's forward has finished its 2P steps. All starts are even.
  std::vector<int> fwd_unit(M, -1);
  std::vector<long> start(units.size(), 0);
  for (size_t u = 0; u < units.size(); ++u) {
    long t = u == 0 ? 0 : start[u - 1] + 2;
    if (units[u].second >= 0) t = std::max(t, start[fwd_unit[units[u].second]] + C);
    start[u] = t;
    if (units[u].first >= 0) fwd_unit[units[u].first] = static_cast<int>(u);
  }
  PipeSchedule s;
  s.kind = PipeKind::WShaped;
  s.stages = P;
  s.microbatches = M;
  s.chunks = C;
  s.stage_slots.resize(P);
  std::vector<std::vector<std::pair<long, PipeSlot>>> keyed(P);
  for (size_t u = 0; u < units.size(); ++u)
    for (int k = 0; k < C; ++k) {
      PipeSlot slot;
      if (units[u].first >= 0) slot.tasks.push_back({units[u].first, k, false});
      if (units[u].second >= 0) slot.tasks.push_back({units[u].second, C - 1 - k, true});
      keyed[fold_stage(k, P)].push_back({start[u] + k, std::move(slot)});
    }
  for (int st = 0; st < P; ++st) {
    std::stable_sort(keyed[st].begin(), keyed[st].end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    for (auto& [key, slot] : keyed[st]) s.stage_slots[st].push_back(std::move(slot));
  }
  return s;
}

PipeSchedule split_si_blocks(const PipeSchedule& s, bool backward_first) {
  PipeSchedule r = s;
  for (auto& slots : r.stage_slots) {
    std::vector<PipeSlot> out;
    out.reserve(slots.size() * 2);
    for (const PipeSlot& block : slots) {
      if (block.tasks.size() != 2) {
        out.push_back(block);
        continue;
      }
      const PipeTask& f = block.tasks[0].backward ? block.tasks[1] : block.tasks[0];
      const PipeTask& b = block.tasks[0].backward ? block.tasks[0] : block.tasks[1];
      BRAID_REQUIRE(!f.backward && b.backward, "split_si_blocks: an SI block pairs a forward with a backward");
      out.push_back({{backward_first ? b : f}});
      out.push_back({{backward_first ? f : b}});
    }
    slots = std::move(out);
  }
  return r;
}

PipeStats simulate_pipeline(PipeSchedule& s, const PipeCosts& c) {
  const int P = s.stages, C = s.chunks;
  const double per_chunk = double(P) / double(C);  // fraction of a stage's layers in one chunk
  const double tf = c.t_fwd * per_chunk, tb = c.t_bwd * per_chunk, act = c.act * per_chunk;
  std::map<std::tuple<int, int, bool>, double> done;  // (mb, chunk, backward) -> end time
  auto dep_end = [&](const PipeTask& t, double& end) {
    std::tuple<int, int, bool> key;
    if (!t.backward) {
      if (t.chunk == 0) return end = 0, true;
      key = {t.mb, t.chunk - 1, false};
    } else {
      key = t.chunk == C - 1 ? std::make_tuple(t.mb, C - 1, false) : std::make_tuple(t.mb, t.chunk + 1, true);
    }
    auto it = done.find(key);
    if (it == done.end()) return false;
    end = it->second;
    return true;
  };
  std::vector<size_t> next(P, 0);
  std::vector<double> free_at(P, 0);
  size_t remaining = 0;
  for (const auto& v : s.stage_slots) remaining += v.size();
  while (remaining > 0) {
    bool progress = false;
    for (int st = 0; st < P; ++st) {
      while (next[st] < s.stage_slots[st].size()) {
        PipeSlot& slot = s.stage_slots[st][next[st]];
        double ready = free_at[st];
        bool ok = true;
        double work = 0;
        for (const auto& t : slot.tasks) {
          double e = 0;
          if (!dep_end(t, e)) {
            ok = false;
            break;
          }
          ready = std::max(ready, e);
          work += t.backward ? tb : tf;
        }
        if (!ok) break;
        if (slot.tasks.size() > 1) work *= c.si_factor;
        slot.start = ready;
        slot.end = ready + work;
        free_at[st] = slot.end;
        for (const auto& t : slot.tasks) done[{t.mb, t.chunk, t.backward}] = slot.end;
        ++next[st];
        --remaining;
        progress = true;
      }
    }
    if (!progress) throw UsageError("pipeline schedule deadlocks", __FILE__, __LINE__);
  }
  PipeStats r;
  r.stage_peak.assign(P, 0);
  for (int st = 0; st < P; ++st) {
    std::vector<std::pair<double, double>> ev;  // (time, delta); frees sort before allocations
    for (const auto& slot : s.stage_slots[st]) {
      r.makespan = std::max(r.makespan, slot.end);
      r.busy += slot.end - slot.start;
      for (const auto& t : slot.tasks) ev.push_back(t.backward ? std::make_pair(slot.end, -act) : std::make_pair(slot.start, act));
    }
    std::sort(ev.begin(), ev.end());
    double cur = 0;
    for (const auto& [time, d] : ev) r.stage_peak[st] = std::max(r.stage_peak[st], cur += d);
    r.peak_activation = std::max(r.peak_activation, r.stage_peak[st]);
  }
  r.bubble_ratio = r.makespan > 0 ? 1.0 - r.busy / (P * r.makespan) : 0.0;
  return r;
}

std::string check_pipeline(const PipeSchedule& s) {
  const int C = s.chunks;
  std::map<std::tuple<int, int, bool>, std::pair<double, double>> when;
  for (int st = 0; st < s.stages; ++st) {
    double prev_end = -1e300;
    for (const auto& slot : s.stage_slots[st]) {
      if (slot.tasks.empty() || slot.tasks.size() > 2) return "a slot must hold one task or an SI pair";
      if (slot.tasks.size() == 2 && (slot.tasks[0].backward || !slot.tasks[1].backward))
        return "an SI block pairs one forward with one backward";
      if (slot.start < prev_end - 1e-9) return "stage " + std::to_string(st) + " runs two slots at once";
      prev_end = slot.end;
      for (const auto& t : slot.tasks) {
        if (t.mb < 0 || t.mb >= s.microbatches || t.chunk < 0 || t.chunk >= C) return "task out of range";
        if (chunk_stage(s, t.chunk) != st)
          return "chunk " + std::to_string(t.chunk) + " runs on stage " + std::to_string(st) + ", not its own";
        if (!when.emplace(std::make_tuple(t.mb, t.chunk, t.backward), std::make_pair(slot.start, slot.end)).second)
          return "micro-batch " + std::to_string(t.mb) + " runs chunk " + std::to_string(t.chunk) + " twice";
      }
    }
  }
  for (int m = 0; m < s.microbatches; ++m)
    for (int c = 0; c < C; ++c) {
      auto f = when.find({m, c, false}), b = when.find({m, c, true});
      const std::string id = "micro-batch " + std::to_string(m) + " chunk " + std::to_string(c);
      if (f == when.end() || b == when.end()) return id + " is missing a pass";
      if (c > 0 && f->second.first < when[{m, c - 1, false}].second - 1e-9) return id + " forward starts too early";
      const auto& prev = c == C - 1 ? when[{m, C - 1, false}] : when[{m, c + 1, true}];
      if (b->second.first < prev.second - 1e-9) return id + " backward starts too early";
    }
  return {};
}

PipeSchedule make_sequential_pipe(PipeKind chunking, int P, int M) {
  check_args(P, M);
  PipeSchedule s;
  s.kind = chunking;
  s.stages = P;
  s.microbatches = M;
  s.chunks = chunking == PipeKind::OneFOneB ? P : 2 * P;
  s.stage_slots.resize(P);
  for (int m = 0; m < M; ++m) {
    for (int c = 0; c < s.chunks; ++c) s.stage_slots[chunk_stage(s, c)].push_back({{{m, c, false}}});
    for (int c = s.chunks - 1; c >= 0; --c) s.stage_slots[chunk_stage(s, c)].push_back({{{m, c, true}}});
  }
  return s;
}

SlotPlan plan_slots(const PipeSchedule& s, int stage) {
  BRAID_REQUIRE(stage >= 0 && stage < s.stages && int(s.stage_slots.size()) == s.stages, "plan_slots: bad stage");
  SlotPlan r;
  r.count.assign(s.chunks, 0);
  std::vector<std::vector<char>> busy(s.chunks);
  std::map<std::pair<int, int>, int> live;  // (mb, chunk) -> slot, while held
  auto local = [&](int c) { return c >= 0 && c < s.chunks && chunk_stage(s, c) == stage; };
  for (const PipeSlot& block : s.stage_slots[stage]) {
    std::vector<std::pair<int, int>> release;
    for (const PipeTask& t : block.tasks) {
      BRAID_REQUIRE(local(t.chunk), "plan_slots: a task of another stage in stage " + std::to_string(stage));
      const std::pair<int, int> key{t.mb, t.chunk};
      if (!t.backward) {
        BRAID_REQUIRE(!live.count(key) && !r.slot.count(key), "plan_slots: a forward task twice");
        auto& b = busy[t.chunk];
        int k = 0;
        while (k < int(b.size()) && b[k]) ++k;
        if (k == int(b.size())) b.push_back(0);
        b[k] = 1;
        live[key] = k;
        r.slot[key] = k;
        r.count[t.chunk] = std::max(r.count[t.chunk], int(b.size()));
      } else {
        BRAID_REQUIRE(live.count(key), "plan_slots: a backward task without its forward");
        // This backward reads its output gradient from the next chunk's slot when that chunk is local.
        if (local(t.chunk + 1)) release.push_back({t.mb, t.chunk + 1});
        // Its own slot is read by the previous chunk's backward when that chunk is local.
        if (!local(t.chunk - 1)) release.push_back(key);
      }
    }
    for (const auto& key : release) {
      auto it = live.find(key);
      BRAID_REQUIRE(it != live.end(), "plan_slots: a slot released twice");
      busy[key.second][it->second] = 0;
      live.erase(it);
    }
  }
  return r;
}

std::string check_channel_order(const PipeSchedule& s) {
  // order[(chunk, backward)] = micro-batches in the order the chunk's stage runs them.
  std::map<std::pair<int, bool>, std::vector<int>> order;
  for (const auto& slots : s.stage_slots)
    for (const PipeSlot& block : slots)
      for (const PipeTask& t : block.tasks) order[{t.chunk, t.backward}].push_back(t.mb);
  for (int c = 0; c + 1 < s.chunks; ++c) {
    if (chunk_stage(s, c) == chunk_stage(s, c + 1)) continue;
    if (order[{c, false}] != order[{c + 1, false}])
      return "boundary " + std::to_string(c) + "->" + std::to_string(c + 1) +
             ": forwards are produced and consumed in different micro-batch orders";
    if (order[{c + 1, true}] != order[{c, true}])
      return "boundary " + std::to_string(c + 1) + "->" + std::to_string(c) +
             ": backwards are produced and consumed in different micro-batch orders";
  }
  return {};
}

}  // namespace braid::schedule
