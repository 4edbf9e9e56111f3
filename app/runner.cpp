#include "runner.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <set>
#include <string>
#include <system_error>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "bundles.hpp"
#include "evaluate.hpp"
#include "exec_setup.hpp"
#include "gpu_setup.hpp"
#include "progress.hpp"
#include "report_targets.hpp"
#include "table.hpp"
#include "pagecheck/report.hpp"
#include "pagecheck/shard.hpp"

namespace pagecheck::app {
namespace fs = std::filesystem;

int run_cases(const std::vector<CaseSource>& sources, const ExecOptions& exec, const OutputOptions& out,
              const Invocation& invocation) {
  // Everything that can be wrong with the options is checked before the
  // first case runs.
  auto setup = prepare_exec(exec);
  if (!setup.ok()) {
    fmt::print(stderr, "pagecheck: {}\n", setup.error().describe());
    return exit_code_for(setup.error().code);
  }
  const std::vector<std::string>* const paths = &setup->paths;
  const RunOptions& run_options = setup->run_options;
  std::vector<std::unique_ptr<Path>>* const external = &setup->external;
  const auto interval = progress_interval();
  if (!interval.ok()) {
    fmt::print(stderr, "pagecheck: {}\n", interval.error().describe());
    return exit_code::kUsage;
  }
  const auto targets = report_targets(out);
  if (const int code = check_report_targets(targets); code != exit_code::kPass) return code;
  if (!out.save_failing.empty()) {
    std::error_code ec;
    if (fs::exists(out.save_failing, ec) && !fs::is_directory(out.save_failing, ec)) {
      fmt::print(stderr, "pagecheck: --save-failing: {}: is a file, not a folder\n", out.save_failing);
      return exit_code::kRuntime;
    }
  }

  RunReport report;
  report.tool_version = PAGECHECK_VERSION;
  report.command_line = invocation.command_line;
  report.fail_on_skip = exec.fail_on_skip;
  if (!exec.shard.empty()) {
    auto shard = parse_shard(exec.shard);
    if (!shard.ok()) {
      fmt::print(stderr, "pagecheck: {}\n", shard.error().describe());
      return exit_code::kUsage;
    }
    shard->cases_total = static_cast<std::int64_t>(sources.size());
    report.shard = *shard;
  }

  PathRegistry registry;
  GpuSetup gpu;
  const bool wants_gpu = std::any_of(paths->begin(), paths->end(), [](const auto& p) { return p != "reference"; });
  if (wants_gpu || exec.require_gpu) {
    auto gpu_setup = setup_gpu(registry, exec.device, !exec.no_timing, exec.require_gpu);
    if (!gpu_setup.ok()) {
      // Nothing runs; the reports still say why.
      fmt::print(stderr, "pagecheck: {}\n", gpu_setup.error().describe());
      report.errors.push_back(gpu_setup.error().describe());
      return write_reports(targets, report,
                           std::max(report_exit_code(report), exit_code_for(gpu_setup.error().code)));
    }
    gpu = std::move(*gpu_setup);
  }
  for (auto& p : *external) registry.add(std::move(p));
  report.device = gpu.device;

  // With a report on stdout the table goes to stderr.
  Table table(any_report_on_stdout(targets) ? stderr : stdout);
  std::FILE* const table_stream = any_report_on_stdout(targets) ? stderr : stdout;
  const bool color = stream_wants_color(table_stream, out.no_color);
  if (!out.quiet) {
    table.print([&](std::FILE* f) {
      if (gpu.device) print_device(f, *gpu.device);
      else if (wants_gpu) fmt::print(f, "GPU paths skipped: {}\n", gpu.unavailable);
    });
  }

  Progress progress(out.quiet                ? Progress::Mode::Off
                    : stderr_is_terminal()   ? Progress::Mode::Terminal
                                             : Progress::Mode::Periodic,
                    std::chrono::duration<double>(*interval));
  std::set<std::string> bundle_names;
  int bundle_code = exit_code::kPass;
  // --shard I/N: case k of the full list when k mod N == I (pagecheck/shard.hpp).
  std::vector<std::size_t> selected;
  for (std::size_t k = 0; k < sources.size(); ++k)
    if (!report.shard || in_shard(static_cast<std::int64_t>(k), *report.shard)) selected.push_back(k);
  for (std::size_t n = 0; n < selected.size(); ++n) {
    const std::size_t i = selected[n];
    const CaseSource& source = sources[i];
    progress.update(n, selected.size(), source.label, "loading");
    Expected<Case> loaded = runtime_error("not loaded");
    try {
      loaded = source.load();
    } catch (const std::exception& e) {
      loaded = runtime_error(fmt::format("loading failed: {}", e.what()), source.label);
    }
    if (!loaded.ok() && loaded.error().code == ErrorCode::Usage) {
      // The generator refused what the command line asked for (heads that
      // do not divide, a length above the limits): a usage error, not a case.
      progress.clear();
      fmt::print(stderr, "pagecheck: {}\n", with_label(source.label, loaded.error().describe()));
      return exit_code::kUsage;
    }
    if (!loaded.ok()) {
      progress.clear();
      CaseReport bad;
      bad.index = static_cast<std::int64_t>(i);
      bad.name = source.label;
      bad.errors.push_back(loaded.error().describe());
      fmt::print(stderr, "pagecheck: {}\n", with_label(source.label, loaded.error().describe()));
      if (!out.quiet) table.print([&](std::FILE* f) { print_case(f, bad, report.device, color, gpu.unavailable); });
      report.cases.push_back(std::move(bad));
      continue;
    }
    const Case& c = *loaded;
    CaseOutcome outcome = evaluate_case(c, *paths, registry, gpu, exec, run_options, !out.save_failing.empty(),
                                        !out.html.empty(), progress, n, selected.size());
    outcome.report.index = static_cast<std::int64_t>(i);
    progress.clear();
    if (!outcome.report.errors.empty())
      fmt::print(stderr, "pagecheck: {}: invalid case: {}\n", source.label,
                 fmt::join(outcome.report.errors, "; "));
    if (!out.quiet)
      table.print([&](std::FILE* f) { print_case(f, outcome.report, report.device, color, gpu.unavailable); });

    if (outcome.failing && !out.save_failing.empty()) {
      std::string dir_name = safe_dir_name(c.name);
      for (int n = 2; bundle_names.count(dir_name); ++n) dir_name = safe_dir_name(c.name) + "-" + std::to_string(n);
      bundle_names.insert(dir_name);
      auto saved = save_bundle(out.save_failing, dir_name, c, outcome, *paths, exec, invocation, report);
      if (saved.ok()) {
        if (!out.quiet) table.print([&](std::FILE* f) { fmt::print(f, "  saved failing case to {}\n", saved->string()); });
      } else {
        fmt::print(stderr, "pagecheck: --save-failing: {}\n", saved.error().describe());
        bundle_code = exit_code::kRuntime;
      }
    }
    report.cases.push_back(std::move(outcome.report));
  }
  progress.clear();
  // The summary, then what failed (under -q on stderr: stdout holds only the
  // summary line), so that a CI log shows it without scrolling.
  table.print([&](std::FILE* f) {
    print_summary(f, report);
    if (!out.quiet) print_failures(f, report);
  });
  if (out.quiet) print_failures(stderr, report);

  // A run where no GPU path ran checked far less than it seems to.
  const bool any_case_ran = std::any_of(report.cases.begin(), report.cases.end(),
                                        [](const CaseReport& c) { return !c.paths.empty(); });
  if (wants_gpu && any_case_ran) {
    bool gpu_ran = false;
    for (const auto& c : report.cases)
      for (const auto& p : c.paths)
        if (p.path != "reference" && (p.status == PathStatus::Pass || p.status == PathStatus::Fail ||
                                      p.status == PathStatus::Error))
          gpu_ran = true;
    const bool reference_selected = std::find(paths->begin(), paths->end(), "reference") != paths->end();
    if (!gpu_ran)
      fmt::print(stderr, "pagecheck: warning: no GPU path ran ({}): {}{}\n",
                 gpu.unavailable.empty() ? "every selected GPU path was skipped or n/a" : gpu.unavailable,
                 reference_selected ? "only the reference was checked" : "nothing was checked",
                 exec.fail_on_skip ? "" : "; --require-gpu or --fail-on-skip make this a failure");
  }

  return write_reports(targets, report, std::max(report_exit_code(report), bundle_code));
}

}  // namespace pagecheck::app
