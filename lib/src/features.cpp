#include "pagecheck/features.hpp"

#include <fmt/format.h>

namespace pagecheck {

std::string builtin_feature_refusal(const Case& c, std::string_view path) {
  const auto refuse = [&](std::string_view feature) {
    return fmt::format("{} are not built into the {} path yet (the reference, and --kernel libraries that declare "
                       "them, take them)",
                       feature, path);
  };
  if (c.has_sinks()) return refuse("attention sinks");
  if (c.has_alibi()) return refuse("ALiBi slopes");
  if (c.has_latent()) return refuse("latent (MLA) caches");
  return {};
}

}  // namespace pagecheck
