#include "report_targets.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <system_error>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "pagecheck/report_html.hpp"

namespace pagecheck::app {
namespace fs = std::filesystem;

Status prepare_output_file(const std::string& path) {
  if (path == "-") return {};
  std::error_code ec;
  const fs::path target(path);
  if (fs::is_directory(target, ec)) return runtime_error("is a folder; give a file name", path);
  const fs::path parent = target.parent_path();
  if (!parent.empty()) {
    fs::create_directories(parent, ec);
    if (ec) return runtime_error(fmt::format("cannot create its folder {}: {}", parent.string(), ec.message()), path);
  }
  const bool exists = fs::exists(target, ec);
  const std::string probe = exists ? path : (parent.empty() ? std::string(".") : parent.string());
  if (::access(probe.c_str(), W_OK) != 0)
    return runtime_error(exists ? "cannot be written (no permission)" : fmt::format("folder {} cannot be written", probe),
                         path);
  return {};
}

std::vector<ReportTarget> report_targets(const OutputOptions& out) {
  std::vector<ReportTarget> targets;
  for (ReportTarget t : {ReportTarget{"--json", out.json, write_json}, ReportTarget{"--csv", out.csv, write_csv},
                         ReportTarget{"--junit", out.junit, write_junit}, ReportTarget{"--html", out.html, write_html}})
    if (!t.path.empty()) targets.push_back(std::move(t));
  return targets;
}

int check_report_targets(const std::vector<ReportTarget>& targets) {
  std::vector<std::string> on_stdout;
  for (const auto& t : targets)
    if (t.path == "-") on_stdout.push_back(t.option);
  if (on_stdout.size() > 1) {
    fmt::print(stderr, "pagecheck: {} write to stdout ('-'); only one report can\n", fmt::join(on_stdout, " and "));
    return exit_code::kUsage;
  }
  for (const auto& t : targets) {
    const Status ready = prepare_output_file(t.path);
    if (!ready.ok()) {
      fmt::print(stderr, "pagecheck: {}: {}\n", t.option, ready.error().describe());
      return exit_code::kRuntime;
    }
  }
  return exit_code::kPass;
}

bool any_report_on_stdout(const std::vector<ReportTarget>& targets) {
  return std::any_of(targets.begin(), targets.end(), [](const ReportTarget& t) { return t.path == "-"; });
}

int write_reports(const std::vector<ReportTarget>& targets, const RunReport& report, int code) {
  for (const auto& t : targets) {
    const Status s = t.write(t.path, report);
    if (!s.ok()) {
      fmt::print(stderr, "pagecheck: {}: {}\n", t.option, s.error().describe());
      code = std::max(code, exit_code::kRuntime);
    }
  }
  return code;
}

int check_report_files(const OutputOptions& out) { return check_report_targets(report_targets(out)); }

int write_report_files(const OutputOptions& out, const RunReport& report, int code) {
  return write_reports(report_targets(out), report, code);
}

int report_not_run(const OutputOptions& out, const Invocation& invocation, const std::string& reason) {
  const auto targets = report_targets(out);
  if (const int code = check_report_targets(targets); code != exit_code::kPass) return code;
  fmt::print(stderr, "pagecheck: {}\n", reason);
  RunReport report;
  report.tool_version = PAGECHECK_VERSION;
  report.command_line = invocation.command_line;
  report.errors.push_back(reason);
  return write_reports(targets, report, report_exit_code(report));
}

}  // namespace pagecheck::app
