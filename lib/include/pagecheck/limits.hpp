// What running a case will allocate, estimated before anything runs, and the
// memory the machine has for it. validate_case refuses (InvalidInput, exit 3)
// a case whose reference run needs more host memory than the limit; a file
// that validates cannot make the reference ask for tens of gigabytes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "pagecheck/case.hpp"
#include "pagecheck/status.hpp"

namespace pagecheck {

struct MemoryEstimate {
  // Host bytes the reference allocates: its float64 output and LSE, and per
  // worker thread the gathered K and V of the longest sequence, a tile of
  // queries and its logits over every key.
  std::uint64_t reference_bytes = 0;
  // Host bytes the harness keeps beside them: the outputs of the reference and
  // of the GPU paths as float, the recorded output and LSE widened.
  std::uint64_t harness_bytes = 0;
  // Device bytes the GPU paths allocate, roughly: the cache, query, table and
  // outputs, the split workspace and the gathered K/V of the FMHA path. Not
  // checked here (lib/ does not know the device); reported for the GPU side.
  std::uint64_t device_bytes = 0;
  // Host bytes of the case's own copy of its KV cache: a FlashInfer
  // paged_kv_cache or a vLLM classic cache, converted at read time
  // (cache_form_copies); 0 when the cache is read in place from the file.
  // For caches made on demand (Case::cache_source): the largest piece of them
  // held at once (the reference's batch of pages, an upload or write chunk).
  std::uint64_t case_bytes = 0;

  std::uint64_t host_bytes() const { return reference_bytes + harness_bytes + case_bytes; }
};

// `threads`: the reference's worker count (0: all cores). Saturates at
// UINT64_MAX instead of overflowing. Only reads the geometry, table and
// lengths; call it on a case that passed validation's structure checks.
MemoryEstimate estimate_memory(const Case& c, int threads = 0);

// A size as PAGECHECK_MEMORY_LIMIT and PAGECHECK_DEVICE_MEMORY_LIMIT take it:
// bytes, or a number with a K (or k), M, G or T suffix (powers of 1024). Not
// a size: InvalidInput naming `variable` and the text.
Expected<std::uint64_t> parse_memory_size(std::string_view variable, std::string_view text);

// The host memory a case may use: PAGECHECK_MEMORY_LIMIT when set (bytes,
// or with a K, M, G or T suffix: powers of 1024), else the machine's physical
// memory (or its cgroup's limit when lower). An unparsable variable is an
// error naming it.
Expected<std::uint64_t> host_memory_limit();

// PAGECHECK_DEVICE_MEMORY_LIMIT (a size as above): a cap on the device's free
// memory as the GPU paths' memory check sees it, so that the check can be
// tried on a real device with a small case. nullopt when unset or empty; an
// unparsable value is an error naming it.
Expected<std::optional<std::uint64_t>> device_memory_limit();

// The GPU paths' memory check (app/runner.cpp, before a GPU path runs):
// nullopt when `needed` device bytes fit, else the path's error reason,
// naming both figures. What is compared with `needed` is the device's free
// memory capped by `limit`, min(free, limit); either may be unknown
// (nullopt: a device that cannot be queried, no limit set), and with
// neither known nothing is refused.
std::optional<std::string> device_memory_shortfall(std::uint64_t needed, int device,
                                                   std::optional<std::uint64_t> free_bytes,
                                                   std::optional<std::uint64_t> limit);

// "1.5 GiB", "512 MiB", "80 KiB", "12 bytes".
std::string format_bytes(std::uint64_t bytes);

}  // namespace pagecheck
