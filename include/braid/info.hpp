// braid/info.hpp — what this machine has: GPUs, links, peer access (probed), library versions.
#pragma once

#include <ostream>

namespace braid {

// Prints the `braid info` report. Works without a GPU (says so). Returns the number of GPUs seen.
int print_info(std::ostream& out, bool probe = true);

}  // namespace braid
