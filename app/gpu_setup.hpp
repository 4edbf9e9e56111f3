// Finding the GPU paths: the only place app/ looks at whether CUDA was built
// and a device is present.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pagecheck/path.hpp"
#include "pagecheck/status.hpp"

namespace pagecheck::app {

// True when this binary was built with the GPU paths.
bool built_with_cuda();

// CUDA devices present (what CUDA_VISIBLE_DEVICES leaves visible); 0 in a
// build without CUDA. For --device all.
int cuda_device_count();

// Free memory of CUDA device `index` in bytes; nullopt without CUDA or when
// the device cannot be queried.
std::optional<std::uint64_t> cuda_free_bytes(int index);

// After a GPU path ran on device `index`: the CUDA error that left its
// context unusable (name and message), nullopt when it is sound or without CUDA.
std::optional<std::string> cuda_context_error(int index);

struct GpuSetup {
  int device_count = 0;
  std::optional<DeviceInfo> device;  // the device the GPU paths run on
  std::string unavailable;           // why GPU paths are skipped; empty when they run
};

// Probes device `index` and adds the GPU paths to `registry`. A build without
// CUDA or a machine without a device is not an error (the paths are skipped,
// `unavailable` says why) unless `require_gpu`; a device index out of range
// or a failing probe is a runtime error.
Expected<GpuSetup> setup_gpu(PathRegistry& registry, int index, bool measure_ceilings, bool require_gpu);

// For `inspect`: adds the GPU paths so that their applies() can be asked,
// with the present device when there is one. Returns why not when it cannot.
std::optional<std::string> register_for_applicability(PathRegistry& registry, int index);

// --kernel [PREFIX=]FILE...: loads each external kernel library and returns
// one path per entry ("PREFIX:<name>", PREFIX ext unless given;
// docs/external-kernels.md), in the order given. A malformed argument is a
// usage error (exit 2), in a build without CUDA too; a file that cannot be
// loaded or is not a kernel library is invalid input (exit 3, naming it); a
// path name two libraries give is a usage error naming both and the prefix
// that tells them apart; a build without CUDA refuses any --kernel (usage,
// exit 2). No arguments: no paths.
Expected<std::vector<std::unique_ptr<Path>>> load_external_paths(const std::vector<std::string>& arguments);

}  // namespace pagecheck::app
