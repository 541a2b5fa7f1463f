// Shared pieces of braid's line-oriented schedule files (pair tables "braid-pairs 1", plans
// "braid-plan 1"): comment stripping, word splitting, strict numbers. Internal to src/schedule.
#pragma once

#include <cmath>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace braid::schedule::text {

// The whitespace-separated words of `line` before any '#'.
inline std::vector<std::string> words(std::string line) {
  if (auto h = line.find('#'); h != std::string::npos) line.resize(h);
  std::istringstream ls(line);
  std::vector<std::string> w;
  for (std::string s; ls >> s;) w.push_back(s);
  return w;
}

// A finite number spelled exactly by `s` (and >= 0 when `nonneg`); calls fail(message) otherwise,
// which must throw.
template <class Fail>
double number(const std::string& s, bool nonneg, const std::string& what, Fail&& fail) {
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(s, &pos);
  } catch (const std::logic_error&) {
    pos = 0;
  }
  if (pos != s.size() || !std::isfinite(v) || (nonneg && v < 0)) fail("bad " + what + " '" + s + "'");
  return v;
}

}  // namespace braid::schedule::text
