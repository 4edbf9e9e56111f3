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
// With `lazy`, the tensors it names are made while writing; a case whose
// caches come from its cache_source is written through cache_chunks(c).
Status save_case_file(const Case& c, const std::filesystem::path& path, const LazyTensors* lazy = nullptr);

// A case's key_cache and value_cache as lazy tensors for save_case_file:
// chunks of about `chunk_bytes` of keys and values (at least one block, at
// most 256 MiB over all threads), made by fill_cache_blocks on `threads`
// threads (0: the cores plus one, at least 6, so that some make values while
// one waits on the disk).
LazyTensors cache_chunks(const Case& c, int threads = 0, std::int64_t chunk_bytes = std::int64_t{32} << 20);

}  // namespace pagecheck
