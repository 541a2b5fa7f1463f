// braid/env.hpp — strict parsing of braid's environment knobs (BRAID_*; docs/environment.md lists them).
// A knob that is set must parse whole and lie in its range, else a UsageError names it and the value:
// a typo never becomes a silent 0. Unset or empty: std::nullopt / the fallback (the caller keeps its default).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>

#include "braid/errors.hpp"

namespace braid::env {

// A decimal integer in [lo, hi] (leading/trailing blanks and a leading '+' are accepted; nothing else).
std::optional<int64_t> integer(const char* name, int64_t lo, int64_t hi);

// A switch: "0" or "1".
std::optional<bool> flag(const char* name);

// One of the words in `allowed`.
std::optional<std::string> choice(const char* name, std::initializer_list<const char*> allowed);

// A floating-point number (strtod syntax, whole), unchecked; UsageError if it does not parse.
std::optional<double> real(const char* name);

// real(name), or `fallback` when unset; UsageError("<name>: <what>") unless `ok` accepts it.
template <class Ok>
double number(const char* name, double fallback, Ok ok, const char* what) {
  const std::optional<double> v = real(name);
  if (!v) return fallback;
  if (!ok(*v)) throw UsageError(std::string(name) + ": " + what, __FILE__, __LINE__);
  return *v;
}

}  // namespace braid::env
