// Case files: a Case to and from safetensors (docs/case-format.md).
#pragma once

#include <filesystem>

#include "pagecheck/case.hpp"
#include "pagecheck/status.hpp"

namespace pagecheck {

// Reads and structurally checks a case (names, dtypes, ranks, consistent
// shapes, metadata that parses). Semantic checks are validate_case's.
Expected<Case> load_case_file(const std::filesystem::path& path);
// Writes the case in the table form it carries; recorded output/LSE if set.
Status save_case_file(const Case& c, const std::filesystem::path& path);

}  // namespace pagecheck
