#include "gpu_setup.hpp"

#include <fmt/format.h>

#include "pagecheck/external_names.hpp"

#ifdef PAGECHECK_HAVE_CUDA
#include "pagecheck/external_kernels.hpp"
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

int cuda_device_count() {
#ifdef PAGECHECK_HAVE_CUDA
  return gpu::device_count();
#else
  return 0;
#endif
}

std::optional<std::uint64_t> cuda_free_bytes(int index) {
#ifdef PAGECHECK_HAVE_CUDA
  auto free_bytes = gpu::free_device_memory(index);
  if (free_bytes.ok()) return *free_bytes;
#else
  (void)index;
#endif
  return std::nullopt;
}

std::optional<std::string> cuda_context_error(int index) {
#ifdef PAGECHECK_HAVE_CUDA
  return gpu::context_error(index);
#else
  (void)index;
  return std::nullopt;
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

Expected<std::vector<std::unique_ptr<Path>>> load_external_paths(const std::vector<std::string>& arguments) {
  std::vector<std::unique_ptr<Path>> paths;
  if (arguments.empty()) return paths;
  std::vector<LibraryPathNames> libraries;
  for (const auto& argument : arguments) {
    auto library = parse_kernel_argument(argument);
    if (!library.ok()) return library.error();
    libraries.push_back({*library, {}});
  }
#ifdef PAGECHECK_HAVE_CUDA
  for (auto& library : libraries) {
    auto loaded = gpu::load_external_kernels(library.library.file, library.library.prefix);
    if (!loaded.ok()) return loaded.error();
    for (auto& path : *loaded) {
      library.paths.push_back(path->name());
      paths.push_back(std::move(path));
    }
  }
  PC_TRY(check_distinct_path_names(libraries));
  return paths;
#else
  return usage_error(fmt::format("this pagecheck was built without CUDA, so it cannot run external kernels ({}); "
                                 "rebuild with the CUDA toolkit (docs/external-kernels.md)",
                                 libraries.front().library.file),
                     "--kernel");
#endif
}

}  // namespace pagecheck::app
