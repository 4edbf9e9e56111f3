#include "case_sources.hpp"

#include <filesystem>
#include <system_error>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace pagecheck::app {
namespace fs = std::filesystem;

Status check_case_path(const std::string& file) {
  std::error_code ec;
  const fs::file_status st = fs::status(file, ec);
  if (!fs::exists(st)) return invalid_input("no such file", file);
  if (fs::is_directory(st)) return invalid_input("is a directory, not a case file", file);
  return {};
}

Expected<Case> load_case(const CaseSource& source) {
  try {
    return source.load();
  } catch (const std::exception& e) {
    return runtime_error(fmt::format("loading failed: {}", e.what()), source.label);
  }
}

CaseReport load_failure(const CaseSource& source, std::size_t index, const Error& error) {
  CaseReport bad;
  bad.index = static_cast<std::int64_t>(index);
  bad.name = source.label;
  bad.errors.push_back(error.describe());
  fmt::print(stderr, "pagecheck: {}\n", with_label(source.label, error.describe()));
  return bad;
}

void say_invalid(const CaseSource& source, const CaseReport& report) {
  if (!report.errors.empty())
    fmt::print(stderr, "pagecheck: {}: invalid case: {}\n", source.label, fmt::join(report.errors, "; "));
}

std::string with_label(const std::string& label, const std::string& message) {
  return message.rfind(label, 0) == 0 ? message : label + ": " + message;
}

}  // namespace pagecheck::app
