// Case features that some built-in GPU paths do not take yet (issue 23):
// attention sinks and ALiBi (the decode paths direct, split and auto take
// them; prefill and fmha do not yet), latent (MLA) caches (no built-in path).
// The reference and --kernel libraries that declare them take them; a
// built-in path reports the case n/a with the feature named, never a wrong
// answer. Host only: kernels/src/harness/paths.cpp asks it before the
// kernel family's own checks, and `inspect` and the tests see the same words.
#pragma once

#include <string>
#include <string_view>

#include "pagecheck/case.hpp"

namespace pagecheck {

// Why the built-in GPU path `path` ("direct", "split", "auto", "prefill",
// "fmha") does not take `c`'s features; empty when nothing refuses.
std::string builtin_feature_refusal(const Case& c, std::string_view path);

}  // namespace pagecheck
