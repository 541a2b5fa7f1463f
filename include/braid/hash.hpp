// braid/hash.hpp — splitmix64 (Steele, Lea and Flood's finalizer), the one 64-bit mixer braid's deterministic data
// generators and device hashes share; identical on host and device.
#pragma once

#include <cstdint>

namespace braid {

#if defined(__CUDACC__)
__host__ __device__
#endif
inline constexpr uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace braid
