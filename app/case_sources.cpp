#include "case_sources.hpp"

#include <filesystem>
#include <system_error>

namespace pagecheck::app {
namespace fs = std::filesystem;

Status check_case_path(const std::string& file) {
  std::error_code ec;
  const fs::file_status st = fs::status(file, ec);
  if (!fs::exists(st)) return invalid_input("no such file", file);
  if (fs::is_directory(st)) return invalid_input("is a directory, not a case file", file);
  return {};
}

std::string with_label(const std::string& label, const std::string& message) {
  return message.rfind(label, 0) == 0 ? message : label + ": " + message;
}

}  // namespace pagecheck::app
