// Memory estimates of a case's run. The reference's allocations are those of
// reference/src/reference.cpp (output and LSE in float64, one Workspace per
// worker thread: K [L, dk], V [L, dv], Q [rows, dk], S [rows, L], O [rows, dv]
// with rows = min(64, q_len) * group); keep the two in step.
#include "pagecheck/limits.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fmt/format.h>
#include <fstream>
#include <limits>
#include <thread>

namespace pagecheck {

namespace {

constexpr std::uint64_t kSaturated = std::numeric_limits<std::uint64_t>::max();

// Products and sums that saturate: a hostile geometry must give a huge
// estimate, never a wrapped small one.
std::uint64_t mul(std::uint64_t a, std::uint64_t b) {
  std::uint64_t out = 0;
  return __builtin_mul_overflow(a, b, &out) ? kSaturated : out;
}
std::uint64_t mul(std::initializer_list<std::uint64_t> factors) {
  std::uint64_t out = 1;
  for (auto f : factors) out = mul(out, f);
  return out;
}
std::uint64_t add(std::uint64_t a, std::uint64_t b) {
  std::uint64_t out = 0;
  return __builtin_add_overflow(a, b, &out) ? kSaturated : out;
}
std::uint64_t non_negative(std::int64_t v) { return v > 0 ? static_cast<std::uint64_t>(v) : 0; }

// The reference's tile of query tokens (reference.cpp, kTokensPerTile).
constexpr std::uint64_t kReferenceTileTokens = 64;
// Caches made on demand: the reference's batch of pages (reference.cpp,
// kSourcedBatchBytes, or one sequence's pages when they are more), and
// the largest chunk the GPU upload (64 MiB) or the file writer (256 MiB over
// all threads, case_file.cpp) holds.
constexpr std::uint64_t kSourcedBatchBytes = std::uint64_t{64} << 20;
constexpr std::uint64_t kSourcedChunkBytes = std::uint64_t{256} << 20;
// The split path's smallest partition (the most partitions it makes).
constexpr std::uint64_t kSmallestPartition = 128;

std::optional<std::uint64_t> cgroup_limit() {
  std::ifstream in("/sys/fs/cgroup/memory.max");
  std::string text;
  if (!(in >> text) || text.empty() || !std::isdigit(static_cast<unsigned char>(text[0]))) return std::nullopt;
  try {
    return std::stoull(text);
  } catch (...) {
    return std::nullopt;
  }
}

}  // namespace

MemoryEstimate estimate_memory(const Case& c, int threads) {
  MemoryEstimate e;
  const std::uint64_t num_tokens = non_negative(c.num_tokens()), q_heads = non_negative(c.q_heads());
  const std::uint64_t kv_heads = std::max<std::uint64_t>(non_negative(c.kv_heads()), 1);
  const std::uint64_t dk = non_negative(c.key_head_dim()), dv = non_negative(c.v_head_dim());
  const std::uint64_t group = std::max<std::uint64_t>(q_heads / kv_heads, 1);
  std::uint64_t longest = 0, longest_q = 0, total_keys = 0;
  for (std::int64_t s = 0; s < c.num_seqs(); ++s) {
    longest = std::max(longest, non_negative(c.seq_lens[s]));
    total_keys = add(total_keys, non_negative(c.seq_lens[s]));
    if (static_cast<std::size_t>(s) + 1 < c.query_start_loc.size())
      longest_q = std::max(longest_q, non_negative(static_cast<std::int64_t>(c.query_start_loc[s + 1]) -
                                                   c.query_start_loc[s]));
  }
  const std::uint64_t rows = mul(std::min(kReferenceTileTokens, std::max<std::uint64_t>(longest_q, 1)), group);
  const std::uint64_t output_elements = mul({num_tokens, q_heads, dv});
  const std::uint64_t lse_elements = mul(num_tokens, q_heads);

  // Reference: float64 output and LSE, and one workspace per worker.
  std::uint64_t workers = threads > 0 ? static_cast<std::uint64_t>(threads)
                                      : std::max<std::uint64_t>(std::thread::hardware_concurrency(), 1);
  workers = std::clamp<std::uint64_t>(workers, 1, std::max<std::uint64_t>(mul(non_negative(c.num_seqs()), kv_heads), 1));
  std::uint64_t workspace = 0;
  for (std::uint64_t elements : {mul(longest, dk), mul(longest, dv), mul(rows, dk), mul(rows, longest), mul(rows, dv),
                                 mul(rows, 2)})
    workspace = add(workspace, mul(elements, sizeof(double)));
  e.reference_bytes = add(mul(add(output_elements, lse_elements), sizeof(double)), mul(workers, workspace));

  // Harness: two float copies of each output (the reference's and a path's
  // being compared), the recorded output and LSE widened to double.
  e.harness_bytes = mul(mul(add(output_elements, lse_elements), sizeof(float)), 2);
  if (c.recorded_output) e.harness_bytes = add(e.harness_bytes, mul(non_negative(c.recorded_output->numel()), sizeof(double)));
  if (c.recorded_lse) e.harness_bytes = add(e.harness_bytes, mul(non_negative(c.recorded_lse->numel()), sizeof(double)));

  // Device: the case, float outputs, the split workspace at its smallest
  // partition, the FMHA path's gathered K and V.
  std::uint64_t device = add(add(c.key_cache.nbytes, c.value_cache.nbytes), c.query.nbytes);
  device = add(device, mul(c.table.page_indices.size(), sizeof(std::int32_t)));
  device = add(device, mul(add(output_elements, lse_elements), sizeof(float)));
  const std::uint64_t partitions = (longest + kSmallestPartition - 1) / kSmallestPartition;
  device = add(device, mul({lse_elements, partitions, add(dv, 2), sizeof(float)}));
  const std::uint64_t kv_element = std::max<std::uint64_t>(dtype_size(c.key_cache.dtype), 1);
  device = add(device, mul({total_keys, kv_heads, add(dk, dv), kv_element}));
  e.device_bytes = device;

  // The case's converted cache, already allocated but held while it runs.
  if (cache_form_copies(c.cache_form)) e.case_bytes = add(c.key_cache.nbytes, c.value_cache.nbytes);
  // Caches made on demand: the reference's pages of one batch of sequences
  // (kSourcedBatchBytes, or the longest sequence's pages when more), and the
  // GPU upload's or the file writer's chunks of the pool, which come after it.
  if (!c.caches_held()) {
    const std::uint64_t page_bytes =
        add(non_negative(c.key_block_bytes()), non_negative(c.value_block_bytes()));
    const std::uint64_t block = std::max<std::uint64_t>(non_negative(c.block_size()), 1);
    std::uint64_t used_pages = 0;
    for (std::int64_t s = 0; s < c.num_seqs(); ++s) used_pages = add(used_pages, (non_negative(c.seq_lens[s]) + block - 1) / block);
    const std::uint64_t batch = std::max(std::min(kSourcedBatchBytes, mul(used_pages, page_bytes)),
                                         mul((longest + block - 1) / block, page_bytes));
    const std::uint64_t chunk = std::min(kSourcedChunkBytes, add(c.key_cache.nbytes, c.value_cache.nbytes));
    e.case_bytes = add(e.case_bytes, std::max(batch, chunk));
  }
  return e;
}

Expected<std::uint64_t> parse_memory_size(std::string_view variable, std::string_view text) {
  const std::string value(text);
  std::size_t used = 0;
  std::uint64_t number = 0;
  bool ok = !value.empty() && std::isdigit(static_cast<unsigned char>(value[0])) != 0;
  if (ok) {
    try {
      number = std::stoull(value, &used);
    } catch (...) {
      ok = false;
    }
  }
  std::uint64_t unit = 1;
  if (ok && used < value.size()) {
    const std::string suffix = value.substr(used);
    if (suffix == "K" || suffix == "k") unit = 1ull << 10;
    else if (suffix == "M") unit = 1ull << 20;
    else if (suffix == "G") unit = 1ull << 30;
    else if (suffix == "T") unit = 1ull << 40;
    else ok = false;
  }
  if (!ok)
    return invalid_input(
        fmt::format("{} = '{}' is not a size (bytes, or a number with K, M, G or T)", variable, value));
  return mul(number, unit);
}

Expected<std::uint64_t> host_memory_limit() {
  if (const char* text = std::getenv("PAGECHECK_MEMORY_LIMIT"); text != nullptr && *text != '\0')
    return parse_memory_size("PAGECHECK_MEMORY_LIMIT", text);
  const long pages = ::sysconf(_SC_PHYS_PAGES), page_size = ::sysconf(_SC_PAGESIZE);
  std::uint64_t physical = pages > 0 && page_size > 0 ? mul(static_cast<std::uint64_t>(pages), static_cast<std::uint64_t>(page_size))
                                                      : kSaturated;
  if (const auto cgroup = cgroup_limit()) physical = std::min(physical, *cgroup);
  return physical;
}

Expected<std::optional<std::uint64_t>> device_memory_limit() {
  const char* text = std::getenv("PAGECHECK_DEVICE_MEMORY_LIMIT");
  if (text == nullptr || *text == '\0') return std::optional<std::uint64_t>{};
  auto limit = parse_memory_size("PAGECHECK_DEVICE_MEMORY_LIMIT", text);
  if (!limit.ok()) return limit.error();
  return std::optional<std::uint64_t>{*limit};
}

std::optional<std::string> device_memory_shortfall(std::uint64_t needed, int device,
                                                   std::optional<std::uint64_t> free_bytes,
                                                   std::optional<std::uint64_t> limit) {
  const bool capped = limit && (!free_bytes || *limit < *free_bytes);
  const std::optional<std::uint64_t> usable = capped ? limit : free_bytes;
  if (!usable || needed <= *usable) return std::nullopt;
  const std::string need = fmt::format("not run: the GPU paths need about {} of device memory for this case (cache, "
                                       "outputs, split workspace, gathered K/V)",
                                       format_bytes(needed));
  if (!capped) return fmt::format("{} but device {} has {} free", need, device, format_bytes(*free_bytes));
  if (!free_bytes)
    return fmt::format("{} but PAGECHECK_DEVICE_MEMORY_LIMIT allows {} (the free memory of device {} is unknown)",
                       need, format_bytes(*limit), device);
  return fmt::format("{} but PAGECHECK_DEVICE_MEMORY_LIMIT allows {} (device {} has {} free)", need,
                     format_bytes(*limit), device, format_bytes(*free_bytes));
}

std::string format_bytes(std::uint64_t bytes) {
  if (bytes == kSaturated) return "more than 16 EiB";
  constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return fmt::format("{} bytes", bytes);
  double value = static_cast<double>(bytes);
  int unit = -1;
  while (value >= 1024 && unit < 5) {
    value /= 1024;
    ++unit;
  }
  return fmt::format("{:.1f} {}", value, kUnits[unit]);
}

}  // namespace pagecheck
