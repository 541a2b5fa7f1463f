// Command-line options of the `braid` entry point (src/cli/main.cpp): words and --key value pairs.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "braid/errors.hpp"

namespace braid::cli {

struct Options {
  std::vector<std::string> words;           // positional words, in order (the command, its target)
  std::map<std::string, std::string> kv;    // "--key" -> value ("1" for a flag)
  bool has(const std::string& k) const { return kv.count(k) > 0; }
  std::string get(const std::string& k, const std::string& d) const {
    auto it = kv.find(k);
    return it == kv.end() ? d : it->second;
  }
};

// Splits argv[1..]. Options named in `flags` take no value. Any other option takes the next argument as
// its value, unless it is the last argument or the next one is itself a "--" option: then it is a flag.
// (A bench's own flags — --profile-range, --no-verify, ... — are not listed at this level: the bench
// parses its arguments again itself; a trailing one must not be an error here.)
inline Options parse_options(int argc, const char* const* argv, const std::vector<std::string>& flags) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("-", 0) != 0) {
      o.words.push_back(a);
      continue;
    }
    bool is_flag = false;
    for (const auto& f : flags) is_flag |= (f == a);
    const bool next_is_option = i + 1 < argc && std::string(argv[i + 1]).rfind("--", 0) == 0;
    if (is_flag || i + 1 >= argc || next_is_option) {
      o.kv[a] = std::string("1");
    } else {
      o.kv[a] = argv[++i];
    }
  }
  return o;
}

}  // namespace braid::cli
