#include "gpu_setup.hpp"

#include <fmt/format.h>

#ifdef PAGECHECK_HAVE_CUDA
#include "pagecheck/gpu.hpp"
#endif

namespace pagecheck::app {

bool built_with_cuda() {
#ifdef PAGECHECK_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

Expected<GpuSetup> setup_gpu(PathRegistry& registry, int index, bool measure_ceilings, bool require_gpu) {
  GpuSetup setup;
#ifdef PAGECHECK_HAVE_CUDA
  setup.device_count = gpu::device_count();
  if (setup.device_count == 0) {
    setup.unavailable = "no CUDA device";
  } else if (index < 0 || index >= setup.device_count) {
    return runtime_error(fmt::format("device {} requested but {} CUDA device{} present (0..{})", index,
                                     setup.device_count, setup.device_count == 1 ? " is" : "s are",
                                     setup.device_count - 1),
                         "--device");
  } else {
    auto info = gpu::probe_device(index, measure_ceilings);
    if (!info.ok()) return info.error();
    setup.device = *info;
    gpu::register_paths(registry, *setup.device);
  }
#else
  (void)registry;
  (void)index;
  (void)measure_ceilings;
  setup.unavailable = "built without CUDA";
#endif
  if (require_gpu && !setup.unavailable.empty())
    return runtime_error(fmt::format("--require-gpu: {}", setup.unavailable == "built without CUDA"
                                                               ? "this pagecheck was built without CUDA"
                                                               : "no CUDA device is present"));
  return setup;
}

std::optional<std::string> register_for_applicability(PathRegistry& registry, int index) {
#ifdef PAGECHECK_HAVE_CUDA
  DeviceInfo device;
  device.name = "(no device)";
  if (gpu::device_count() > index && index >= 0) {
    auto info = gpu::probe_device(index, /*measure_ceilings=*/false);
    if (info.ok()) device = *info;
  }
  // applies() looks at the geometry only, so it can be asked without a device.
  gpu::register_paths(registry, device);
  return std::nullopt;
#else
  (void)registry;
  (void)index;
  return std::string("not built (no CUDA)");
#endif
}

}  // namespace pagecheck::app
