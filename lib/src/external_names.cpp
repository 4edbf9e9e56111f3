// The names of external kernel paths (pagecheck/external_names.hpp).
#include "pagecheck/external_names.hpp"

#include <filesystem>
#include <map>
#include <system_error>

#include <fmt/format.h>

namespace pagecheck {

namespace {

bool valid_prefix(std::string_view p) {
  if (p.empty() || p.size() > 32) return false;
  for (const char c : p)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
          c == '.'))
      return false;
  return true;
}

}  // namespace

Expected<KernelLibraryArg> parse_kernel_argument(const std::string& arg) {
  KernelLibraryArg out;
  out.prefix = std::string(kDefaultExternalPrefix);
  const auto eq = arg.find('=');
  if (eq == std::string::npos || arg.substr(0, eq).find('/') != std::string::npos) {
    out.file = arg;
  } else {
    const std::string prefix = arg.substr(0, eq);
    if (!valid_prefix(prefix))
      return usage_error(fmt::format("'{}': the prefix before '=' must be 1-32 letters, digits, '_', '-' or '.' "
                                     "(PREFIX=FILE names the library's paths PREFIX:NAME; a file named with '=' "
                                     "is written ./{})",
                                     arg, arg),
                         "--kernel");
    out.prefix = prefix;
    out.file = arg.substr(eq + 1);
    out.prefix_given = true;
  }
  if (out.file.empty())
    return usage_error(fmt::format("'{}': no library file{}", arg, out.prefix_given ? " after '='" : ""), "--kernel");
  return out;
}

std::string absolute_kernel_argument(const std::string& arg) {
  auto parsed = parse_kernel_argument(arg);
  if (!parsed.ok()) return arg;
  std::error_code ec;
  const std::string file = std::filesystem::absolute(parsed->file, ec).lexically_normal().string();
  return (parsed->prefix_given ? parsed->prefix + "=" : std::string()) + (ec ? parsed->file : file);
}

std::string external_path_name(std::string_view prefix, std::string_view entry) {
  return fmt::format("{}:{}", prefix, entry);
}

bool is_external_path_name(std::string_view path) { return path.find(':') != std::string_view::npos; }

Status check_distinct_path_names(const std::vector<LibraryPathNames>& libraries) {
  std::map<std::string, const KernelLibraryArg*> owner;
  for (const auto& lib : libraries)
    for (const auto& path : lib.paths) {
      const auto [it, inserted] = owner.emplace(path, &lib.library);
      if (inserted) continue;
      const KernelLibraryArg& first = *it->second;
      if (first.file == lib.library.file && first.prefix == lib.library.prefix)
        return usage_error(fmt::format("{} is given twice (its paths, {} among them, would run twice)",
                                       lib.library.file, path),
                           "--kernel");
      const bool both_chosen = first.prefix_given && lib.library.prefix_given;
      return usage_error(
          fmt::format("path {} is exported by both {} and {}{}", path, first.file, lib.library.file,
                      both_chosen ? fmt::format(": give them different prefixes (both are {}=)", lib.library.prefix)
                                  : fmt::format(": give each its own prefix, e.g. --kernel old={} --kernel new={}, "
                                                "to run them side by side as old:NAME and new:NAME",
                                                first.file, lib.library.file)),
          "--kernel");
    }
  return {};
}

}  // namespace pagecheck
