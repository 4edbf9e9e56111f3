// External kernel libraries (`--kernel lib.so`): the C ABI of
// include/pagecheck/external.h loaded with dlopen, each entry a GPU path
// named "ext:<entry name>" or "<prefix>:<entry name>" (docs/external-kernels.md). No CUDA headers here.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "pagecheck/external_names.hpp"
#include "pagecheck/path.hpp"
#include "pagecheck/status.hpp"

namespace pagecheck::gpu {

// Loads `file` and returns one path per entry of its table, named
// `prefix`:<entry name> (pagecheck/external_names.hpp). The library stays
// loaded until the process exits (a CUDA library's module must outlive every
// use of its kernels, graphs included). Errors are invalid input (exit 3)
// naming the library: no such file, dlopen's message, no
// pagecheck_kernels_v1 symbol, another ABI major, a malformed table.
// applies() of the paths works without a device; run() needs one.
Expected<std::vector<std::unique_ptr<Path>>> load_external_kernels(const std::string& file,
                                                                   std::string_view prefix = kDefaultExternalPrefix);

}  // namespace pagecheck::gpu
