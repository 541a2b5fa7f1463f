// tma_map.hpp (internal, host) — the 2-D bf16 tensor maps the sm90 epilogues store or reduce through
// (tma_panels.cuh's panels: 64 columns per box, the 128-byte swizzle).
#pragma once

#include <cuda.h>  // CUtensorMap

#include <cstdint>

namespace braid::overlap::detail {

// d as (rows, cols) bf16 with row stride ld elements (16-byte multiple), boxes of 64 columns x box_rows rows, 128-byte
// swizzle; d may be a peer's memory (a peer-mapped address). cuTensorMapEncodeTiled through the runtime's entry-point
// query (libcuda is never linked); throws braid's CUDA error on failure.
void encode_bf16_panel_map(CUtensorMap* map, void* d, uint64_t rows, uint64_t cols, uint64_t ld, uint32_t box_rows);

}  // namespace braid::overlap::detail
