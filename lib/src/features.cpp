#include "pagecheck/features.hpp"

#include <fmt/format.h>

namespace pagecheck {

std::string builtin_feature_refusal(const Case& c, std::string_view path) {
  const auto refuse = [&](std::string_view feature) {
    return fmt::format("{} are not built into the {} path yet (the reference, and --kernel libraries that declare "
                       "them, take them)",
                       feature, path);
  };
  // The decode paths (direct, split, auto) take sinks, ALiBi and latent
  // caches (kernels/src/decode/, docs/gpu-paths.md); prefill takes sinks and
  // ALiBi (sinks in its kernels' epilogues, ALiBi on its CUDA-core kernel),
  // fmha sinks.
  const bool decode = path == "direct" || path == "split" || path == "auto";
  const bool takes_alibi = decode || path == "prefill";
  const bool takes_sinks = takes_alibi || path == "fmha";
  if (c.has_sinks() && !takes_sinks) return refuse("attention sinks");
  if (c.has_alibi() && !takes_alibi) return refuse("ALiBi slopes");
  // Latent (MLA) caches: the decode paths, without ALiBi (on their
  // CUDA-core loop until the MLA decode kernel).
  if (c.has_latent() && !decode) return refuse("latent (MLA) caches");
  if (c.has_latent() && c.has_alibi()) return refuse("ALiBi slopes with latent (MLA) caches");
  return {};
}

}  // namespace pagecheck
