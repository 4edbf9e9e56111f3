// The host side of the external-kernel ABI (include/pagecheck/external.h):
// the description of a case as a library sees it, and the refusals that
// pagecheck makes from an entry's declared capabilities and its library's
// ABI minor before the entry's own supports(). Host only, so that the CPU
// tests check the version rules; kernels/src/harness/external.cpp loads libraries
// and runs their entries.
#pragma once

#include <cstdint>
#include <string>

#include "pagecheck/case.hpp"
#include "pagecheck/external.h"

namespace pagecheck {

// PAGECHECK_DTYPE_* of a dtype; 0 when the ABI has no code for it.
int external_dtype_code(DType d);

// The description of `c` at upload: geometry, parameters and the strides of
// the contiguous buffers the harness makes (struct_size and abi_minor of
// this pagecheck).
pagecheck_case_desc describe_external_case(const Case& c);

// Why `entry` of a library built against ABI 1.`library_minor` is not given
// `c`: a declared capability that refuses it, or a feature that the
// library's minor cannot express (external.h, "FEATURES OF ABI 1.2").
// Empty when nothing refuses (the entry's supports() decides then).
std::string external_refusal(const pagecheck_kernel_entry& entry, std::uint32_t library_minor, const Case& c,
                             const pagecheck_case_desc& desc);

// The head sizes the suite added with ABI 1.2: a 1.0/1.1 entry without a
// head_dims list is not given them.
bool head_dim_added_in_1_2(std::int64_t head_dim, std::int64_t v_head_dim);

}  // namespace pagecheck
