#include "pagecheck/features.hpp"

#include <fmt/format.h>

namespace pagecheck {

std::string builtin_feature_refusal(const Case& c, std::string_view path) {
  const auto refuse = [&](std::string_view feature) {
    return fmt::format("{} are not built into the {} path yet (the reference, and --kernel libraries that declare "
                       "them, take them)",
                       feature, path);
  };
  // The decode paths (direct, split, auto) take sinks and ALiBi
  // (kernels/src/decode/, docs/gpu-paths.md); prefill and fmha take sinks
  // (in their epilogues), not yet ALiBi.
  const bool decode = path == "direct" || path == "split" || path == "auto";
  const bool prefill = path == "prefill" || path == "fmha";
  if (c.has_sinks() && !decode && !prefill) return refuse("attention sinks");
  if (c.has_alibi() && !decode) return refuse("ALiBi slopes");
  if (c.has_latent()) return refuse("latent (MLA) caches");
  return {};
}

}  // namespace pagecheck
