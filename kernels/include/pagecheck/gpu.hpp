// The GPU side as the host code sees it: no CUDA headers here, so app/ can
// include it from a plain C++ translation unit. Implemented in kernels/.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "pagecheck/path.hpp"
#include "pagecheck/plan.hpp"
#include "pagecheck/status.hpp"

namespace pagecheck::gpu {

// Number of CUDA devices present (0 when none or no driver).
int device_count();

// Free device memory of device `index` in bytes (cudaMemGetInfo); an error
// when the device cannot be queried.
Expected<std::uint64_t> free_device_memory(int index);

// After a path ran: the error that left device `index`'s CUDA context
// unusable ("cudaErrorIllegalAddress: an illegal memory access was
// encountered"), nullopt when it is sound.
std::optional<std::string> context_error(int index);

// Selects device `index`, measures its copy bandwidth and BF16 matrix rate.
Expected<DeviceInfo> probe_device(int index, bool measure_ceilings);

// Adds direct, split, auto, prefill and fmha to the registry.
void register_paths(PathRegistry& registry, const DeviceInfo& device);

struct TuneOptions {
  int device = 0;
  std::vector<std::int64_t> context_lengths;   // empty: built-in sweep
  std::vector<std::int64_t> partition_sizes;   // empty: built-in sweep
  std::int64_t q_heads = 32, kv_heads = 8, head_dim = 128, v_head_dim = 128;
  std::int64_t num_seqs = 0;  // 0: several batch sizes
};
// Measures direct against split, prints the crossover, returns the table.
Expected<TuningTable> tune(const TuneOptions& options, std::FILE* log);

}  // namespace pagecheck::gpu
