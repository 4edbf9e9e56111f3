// pagecheck merge: JSON reports in, one report out (docs/cli.md "merge").
#include <algorithm>
#include <cstdio>

#include <fmt/format.h>

#include "commands.hpp"
#include "report_targets.hpp"
#include "table.hpp"
#include "workers.hpp"
#include "pagecheck/report_read.hpp"

namespace pagecheck::app {

namespace {

// A run without a GPU says the reason once at the top ("GPU paths skipped:
// built without CUDA") and leaves it out of each case; the merged table does
// the same when every skipped GPU path of the report gives one reason.
std::string common_skip_reason(const RunReport& report) {
  if (report.device) return {};
  std::string reason;
  for (const auto& c : report.cases)
    for (const auto& p : c.paths) {
      if (p.path == "reference" || p.status != PathStatus::Skipped) continue;
      if (reason.empty()) reason = p.reason;
      else if (reason != p.reason) return {};
    }
  return reason;
}

}  // namespace

int emit_merged(const RunReport& report, const std::vector<std::string>& warnings, const OutputOptions& out, int code) {
  for (const auto& w : warnings) fmt::print(stderr, "pagecheck: warning: {}\n", w);
  const bool report_on_stdout = out.json == "-" || out.csv == "-" || out.junit == "-";
  std::FILE* const table = report_on_stdout ? stderr : stdout;
  const bool color = stream_wants_color(table, out.no_color);
  // A reader of the table that goes away (`| head`: EPIPE, fmt throws) does
  // not stop the reports from being written.
  try {
    if (!out.quiet) {
      const std::string said_once = common_skip_reason(report);
      if (report.device) print_device(table, *report.device);
      else if (!said_once.empty()) fmt::print(table, "GPU paths skipped: {}\n", said_once);
      for (const auto& c : report.cases) print_case(table, c, report.device, color, said_once);
    }
    print_summary(table, report);
    if (!out.quiet) print_failures(table, report);
    std::fflush(table);
  } catch (const std::exception&) {
  }
  if (out.quiet) print_failures(stderr, report);
  return write_report_files(out, report, std::max(code, report_exit_code(report)));
}

int cmd_merge(const MergeConfig& config, const Invocation& invocation) {
  // The outputs are checked before the inputs are read.
  if (const int code = check_report_files(config.out); code != exit_code::kPass) return code;
  std::vector<MergeInput> inputs;
  for (const auto& file : config.files) {
    auto report = read_json_report(file);
    if (!report.ok()) {
      fmt::print(stderr, "pagecheck: merge: {}\n", report.error().describe());
      return exit_code_for(report.error().code);
    }
    inputs.push_back({file, std::move(*report)});
  }
  MergeOptions options;
  options.allow_missing_shards = config.allow_missing_shards;
  options.fallback_command = invocation.command_line;
  auto merged = merge_reports(inputs, options);
  if (!merged.ok()) {
    fmt::print(stderr, "pagecheck: merge: {}\n", merged.error().describe());
    return exit_code_for(merged.error().code);
  }
  return emit_merged(merged->report, merged->warnings, config.out, exit_code::kPass);
}

}  // namespace pagecheck::app
