// mapping.cpp — execution order of the persistent scheduler and the reordering tables (host).
#include <algorithm>
#include <numeric>
#include <string>

#include "braid/errors.hpp"
#include "braid/overlap.hpp"

namespace braid::overlap {

const char* collective_name(Collective c) {
  return c == Collective::kAllReduce ? "allreduce" : "reducescatter";
}

Collective parse_collective(const std::string& s) {
  if (s == "allreduce") return Collective::kAllReduce;
  if (s == "reducescatter") return Collective::kReduceScatter;
  throw UsageError("unknown collective '" + s + "'", __FILE__, __LINE__);
}

// Mirrors PersistentTileSchedulerSm90 (static): a CTA starts at linear index L0 (AlongN: blockIdx.x +
// blockIdx.y*gridDim.x with gridDim.x = cluster_m, so L % cluster_m is the CTA's place in its cluster)
// and advances by the grid size; get_work_idx_m_and_n maps L to (m, n). Phantom tiles (padding to
// cluster/swizzle multiples) are -1.
std::vector<int> execution_order(const TileGrid& g) {
  BRAID_REQUIRE(g.tiles_m > 0 && g.tiles_n > 0 && g.cluster_m > 0 && g.cluster_n > 0, "execution_order: bad grid");
  const int swz = 1 << g.log_swizzle;
  auto round_up = [](int a, int b) { return (a + b - 1) / b * b; };
  const int64_t blocks_m = round_up(g.tiles_m, swz * g.cluster_m);
  const int64_t blocks_n = round_up(g.tiles_n, swz * g.cluster_n);
  const bool along_n = !g.raster_along_m;
  const int64_t cmin = along_n ? g.cluster_m : g.cluster_n;
  const int64_t cmaj = along_n ? g.cluster_n : g.cluster_m;
  const int64_t blk_major = along_n ? blocks_n / g.cluster_n : blocks_m / g.cluster_m;
  std::vector<int> order(static_cast<size_t>(blocks_m * blocks_n), -1);
  for (int64_t L = 0; L < blocks_m * blocks_n; ++L) {
    const int64_t cta_minor = L % cmin;
    const int64_t b = L / cmin;
    const int64_t cluster_id = b / cmaj, cluster_major_offset = b % cmaj;
    const int64_t offset = cluster_id & (swz - 1);
    const int64_t extra = cluster_id >> g.log_swizzle;
    const int64_t minor_div = extra / blk_major, cluster_idx_major = extra % blk_major;
    const int64_t cluster_idx_minor = minor_div * swz + offset;
    const int64_t minor = cluster_idx_minor * cmin + cta_minor;
    const int64_t major = cluster_idx_major * cmaj + cluster_major_offset;
    const int64_t m = along_n ? minor : major;
    const int64_t n = along_n ? major : minor;
    if (m < g.tiles_m && n < g.tiles_n) order[L] = static_cast<int>(m * g.tiles_n + n);
  }
  return order;
}

int swizzle_without_phantoms(int tiles_m, int tiles_n, int cluster_m, int cluster_n, int cap) {
  BRAID_REQUIRE(tiles_m > 0 && tiles_n > 0 && cluster_m > 0 && cluster_n > 0 && cap >= 1,
                "swizzle_without_phantoms: bad grid");
  int s = 1;
  while (s * 2 <= cap) s *= 2;  // the largest power of two <= cap
  while (s > 1 && (tiles_m % (s * cluster_m) != 0 || tiles_n % (s * cluster_n) != 0)) s /= 2;
  return s;
}

int64_t Mapping::group_elems(int g) const {
  return int64_t(tiles_in_group(g)) * grid.bm * grid.bn;
}
int64_t Mapping::group_offset(int g) const { return int64_t(group_first[g]) * grid.bm * grid.bn; }

std::vector<int64_t> part_store_shifts(const Mapping& map, int world, int rank) {
  BRAID_REQUIRE(map.parts == world && rank >= 0 && rank < world, "part_store_shifts: one part per rank");
  std::vector<int64_t> v(size_t(map.groups()) * world);
  for (int g = 0; g < map.groups(); ++g) {
    const int64_t chunk = int64_t(map.group_elems(g)) / world;
    for (int q = 0; q < world; ++q) v[size_t(g) * world + q] = (int64_t(rank) - q) * chunk;
  }
  return v;
}

std::vector<int> default_group_waves(int waves) {
  std::vector<int> v;
  int left = waves;
  if (left > 0) v.push_back(1), left -= 1;
  while (left > 4) v.push_back(2), left -= 2;
  if (left > 0) v.push_back(left);
  return v;
}

Mapping make_mapping(const TileGrid& grid, std::vector<int> group_waves, int parts) {
  BRAID_REQUIRE(grid.ctas > 0, "make_mapping: grid has no CTAs");
  BRAID_REQUIRE(parts >= 1 && grid.bm % parts == 0, "make_mapping: tile rows not divisible by parts");
  const int waves = grid.num_waves();
  if (group_waves.empty()) group_waves.assign(waves, 1);
  int sum = 0;
  for (int w : group_waves) {
    BRAID_REQUIRE(w >= 1, "make_mapping: empty wave group");
    sum += w;
  }
  BRAID_REQUIRE(sum == waves, "make_mapping: partition covers " + std::to_string(sum) + " waves, the GEMM has " +
                                  std::to_string(waves));
  Mapping m;
  m.grid = grid;
  m.parts = parts;
  m.group_waves = group_waves;
  std::vector<int> wave_group(waves);
  for (int g = 0, w = 0; g < static_cast<int>(group_waves.size()); ++g)
    for (int i = 0; i < group_waves[g]; ++i) wave_group[w++] = g;
  const int tiles = grid.num_tiles();
  m.tile_slot.assign(tiles, -1);
  m.tile_group.assign(tiles, -1);
  m.slot_tile.assign(tiles, -1);
  m.group_first.assign(group_waves.size() + 1, 0);
  const std::vector<int> order = execution_order(grid);
  int slot = 0;
  // Slots follow execution order; group_first[g] is the first slot of the first wave of group g.
  for (size_t L = 0; L < order.size(); ++L) {
    const int wave = static_cast<int>(L / grid.ctas);
    const int t = order[L];
    if (t < 0) continue;
    BRAID_REQUIRE(wave < waves, "make_mapping: tile beyond the last wave");
    const int g = wave_group[wave];
    BRAID_REQUIRE(m.tile_slot[t] < 0, "make_mapping: tile scheduled twice");
    m.tile_slot[t] = slot;
    m.tile_group[t] = g;
    m.slot_tile[slot] = t;
    m.group_first[g + 1] = slot + 1;
    ++slot;
  }
  BRAID_REQUIRE(slot == tiles, "make_mapping: scheduler model missed tiles");
  // Empty groups cannot happen (every wave has a tile); keep group_first monotone anyway.
  for (size_t g = 1; g < m.group_first.size(); ++g) m.group_first[g] = std::max(m.group_first[g], m.group_first[g - 1]);
  return m;
}

namespace {
// Mapping::normal: D row-major, part p owning rows [p M / parts, (p + 1) M / parts).
int64_t normal_rows_per_part(const Mapping& m) { return int64_t(m.grid.tiles_m) * m.grid.bm / m.parts; }
int64_t normal_cols(const Mapping& m) { return int64_t(m.grid.tiles_n) * m.grid.bn; }
}  // namespace

int64_t reordered_index(const Mapping& m, int64_t row, int64_t col, int* part) {
  if (m.normal) {
    if (part) *part = static_cast<int>(row / normal_rows_per_part(m));
    return row * normal_cols(m) + col;
  }
  const auto& g = m.grid;
  const int64_t mb = row / g.bm, r = row % g.bm, nb = col / g.bn, c = col % g.bn;
  const int t = static_cast<int>(mb * g.tiles_n + nb);
  const int s = m.tile_slot[t], grp = m.tile_group[t];
  const int64_t first = m.group_first[grp], tiles = m.group_first[grp + 1] - first;
  const int64_t sub = g.bm / m.parts;
  const int64_t p = r / sub, rr = r % sub;
  if (part) *part = static_cast<int>(p);
  return (first * g.bm + p * tiles * sub + (s - first) * sub + rr) * g.bn + c;
}

int64_t scattered_index(const Mapping& m, int64_t row, int64_t col) {
  if (m.normal) return (row % normal_rows_per_part(m)) * normal_cols(m) + col;
  const auto& g = m.grid;
  const int64_t mb = row / g.bm, r = row % g.bm, nb = col / g.bn, c = col % g.bn;
  const int s = m.tile_slot[mb * g.tiles_n + nb];
  const int64_t sub = g.bm / m.parts;
  return (int64_t(s) * sub + r % sub) * g.bn + c;
}

int64_t rs_original_row(const Mapping& m, int part, int64_t j) {
  if (m.normal) return int64_t(part) * normal_rows_per_part(m) + j;
  const int64_t sub = m.grid.bm / m.parts;
  return (j / sub) * m.grid.bm + int64_t(part) * sub + j % sub;
}

int wave_fit_reserve(int sms, int cap, int floor, const std::function<int(int)>& waves_at) {
  BRAID_REQUIRE(sms > 0 && cap >= 0 && floor >= 0, "wave_fit_reserve: bad SM counts");
  if (floor > cap || cap >= sms) return cap;
  const int full = waves_at(sms);
  for (int r = cap; r >= floor; --r)
    if (waves_at(sms - r) == full) return r;
  return cap;
}

}  // namespace braid::overlap
