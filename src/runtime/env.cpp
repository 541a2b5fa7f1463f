// env.cpp — strict environment knobs (braid/env.hpp).
#include "braid/env.hpp"

#include <cerrno>
#include <cstdlib>
#include <string>

#include "braid/errors.hpp"

namespace braid::env {

namespace {
bool blank(char c) { return c == ' ' || c == '\t'; }
}  // namespace

std::optional<int64_t> integer(const char* name, int64_t lo, int64_t hi) {
  const char* e = std::getenv(name);
  if (e == nullptr) return std::nullopt;
  const char* p = e;
  while (blank(*p)) ++p;
  if (*p == 0) return std::nullopt;
  const bool digit_first = (*p >= '0' && *p <= '9') || ((*p == '+' || *p == '-') && p[1] >= '0' && p[1] <= '9');
  char* end = nullptr;
  errno = 0;
  const long long v = digit_first ? std::strtoll(p, &end, 10) : 0;
  if (digit_first)
    while (blank(*end)) ++end;
  if (!digit_first || errno == ERANGE || *end != 0 || v < lo || v > hi)
    throw UsageError(std::string(name) + ": expected an integer in [" + std::to_string(lo) + ", " +
                         std::to_string(hi) + "], got '" + e + "'",
                     __FILE__, __LINE__);
  return static_cast<int64_t>(v);
}

std::optional<bool> flag(const char* name) {
  const auto v = integer(name, 0, 1);
  if (!v) return std::nullopt;
  return *v != 0;
}

std::optional<std::string> choice(const char* name, std::initializer_list<const char*> allowed) {
  const char* e = std::getenv(name);
  if (e == nullptr || *e == 0) return std::nullopt;
  std::string list;
  for (const char* a : allowed) {
    if (std::string(a) == e) return std::string(e);
    list += (list.empty() ? "" : ", ") + std::string(a);
  }
  throw UsageError(std::string(name) + ": one of " + list + ", got '" + e + "'", __FILE__, __LINE__);
}

std::optional<double> real(const char* name) {
  const char* e = std::getenv(name);
  if (e == nullptr || *e == 0) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(e, &end);
  if (end == e || *end != 0)
    throw UsageError(std::string(name) + ": expected a number, got '" + e + "'", __FILE__, __LINE__);
  return v;
}

}  // namespace braid::env
