// Files replaced whole (pagecheck/atomic_file.hpp).
#include "pagecheck/atomic_file.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <system_error>

#include <fmt/format.h>

namespace pagecheck {

namespace fs = std::filesystem;

fs::path temporary_beside(const fs::path& target) {
  return target.parent_path() / fmt::format(".{}.tmp{}", target.filename().string(), static_cast<long>(::getpid()));
}

Status replace_file(const fs::path& target, const std::function<Status(const fs::path& file)>& write) {
  std::error_code ec;
  fs::path real = target;
  if (fs::is_symlink(fs::symlink_status(target, ec))) {
    real = fs::weakly_canonical(target, ec);
    if (ec) return runtime_error(fmt::format("cannot follow the link: {}", ec.message()), target.string());
  }
  const fs::file_status status = fs::status(real, ec);
  if (fs::exists(status) && !fs::is_regular_file(status)) {
    if (fs::is_directory(status)) return runtime_error("is a folder, not a file", target.string());
    return write(real);  // a device or a pipe: nothing to rename over
  }
  const fs::path temporary = temporary_beside(real);
  if (Status written = write(temporary); !written.ok()) {
    fs::remove(temporary, ec);
    return written;
  }
  fs::rename(temporary, real, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove(temporary, ignored);
    return runtime_error(fmt::format("cannot rename the written file into place: {}", ec.message()), target.string());
  }
  return {};
}

Status replace_file_with_text(const fs::path& target, std::string_view text, std::string_view what) {
  return replace_file(target, [&](const fs::path& file) -> Status {
    std::FILE* out = std::fopen(file.c_str(), "wb");
    if (out == nullptr)
      return runtime_error(fmt::format("cannot open the {} file for writing: {}", what, std::strerror(errno)),
                           target.string());
    const bool written = std::fwrite(text.data(), 1, text.size(), out) == text.size();
    const int write_errno = errno;
    const bool closed = std::fclose(out) == 0;
    if (!written || !closed)
      return runtime_error(
          fmt::format("writing the {} file failed: {}", what, std::strerror(written ? errno : write_errno)),
          target.string());
    return {};
  });
}

}  // namespace pagecheck
