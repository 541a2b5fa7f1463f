// braid/env.hpp — strict parsing of braid's environment knobs (BRAID_*; docs/environment.md lists them).
// A knob that is set must parse whole and lie in its range, else a UsageError names it and the value:
// a typo never becomes a silent 0. Unset or empty: std::nullopt (the caller keeps its default).
#pragma once

#include <cstdint>
#include <optional>

namespace braid::env {

// A decimal integer in [lo, hi] (leading/trailing blanks and a leading '+' are accepted; nothing else).
std::optional<int64_t> integer(const char* name, int64_t lo, int64_t hi);

// A switch: "0" or "1".
std::optional<bool> flag(const char* name);

}  // namespace braid::env
