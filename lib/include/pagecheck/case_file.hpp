// Case files: a Case to and from safetensors (docs/case-format.md).
#pragma once

#include <filesystem>
#include <memory>
#include <span>
#include <string>

#include "pagecheck/case.hpp"
#include "pagecheck/safetensors.hpp"
#include "pagecheck/status.hpp"

namespace pagecheck {

// Reads and structurally checks a case (names, dtypes, ranks, consistent
// shapes, metadata that parses). Semantic checks are validate_case's.
Expected<Case> load_case_file(const std::filesystem::path& path);
// The same for a file's bytes in memory (the fuzz target's entry point);
// `owner` keeps them alive for the tensors' views (nullptr: the caller does).
Expected<Case> parse_case_file(std::span<const std::byte> bytes, std::shared_ptr<const void> owner, std::string name);
// Writes the case in the table form it carries; recorded output/LSE if set.
// With `lazy`, the tensors it names are made while writing (generate_case_lazy).
Status save_case_file(const Case& c, const std::filesystem::path& path, const LazyTensors* lazy = nullptr);

}  // namespace pagecheck
