#include "runner.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <system_error>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "bundles.hpp"
#include "evaluate.hpp"
#include "exec_setup.hpp"
#include "gpu_setup.hpp"
#include "interrupts.hpp"
#include "isolation.hpp"
#include "progress.hpp"
#include "report_targets.hpp"
#include "run_record.hpp"
#include "pagecheck/report.hpp"
#include "pagecheck/shard.hpp"

namespace pagecheck::app {
namespace fs = std::filesystem;

namespace {

// Every case of `plan` in this process, one after the other.
int run_here(const RunPlan& plan, ExecSetup& setup, const ExecOptions& exec, const OutputOptions& out,
             const Invocation& invocation, RunRecord& record) {
  InterruptScope on_signal([&record](int signo) { return record.on_signal(signo); });
  PathRegistry registry;
  GpuSetup gpu;
  if (plan.wants_gpu || exec.require_gpu) {
    auto gpu_setup = setup_gpu(registry, exec.device, !exec.no_timing, exec.require_gpu);
    if (!gpu_setup.ok()) return record.not_run(gpu_setup.error());  // nothing runs; the reports say why
    gpu = std::move(*gpu_setup);
  }
  for (auto& p : setup.external) registry.add(std::move(p));
  record.set_device(gpu.device, gpu.unavailable, plan.wants_gpu);

  Progress progress(plan.progress_mode, plan.progress_interval);
  progress.set_listener([&record](std::string_view step) { record.set_step(step); });
  std::set<std::string> bundle_names;
  for (std::size_t n = 0; n < plan.selected.size(); ++n) {
    const std::size_t i = plan.selected[n];
    const CaseSource& source = (*plan.sources)[i];
    record.start_case(static_cast<std::int64_t>(i), source.label);
    progress.update(n, plan.selected.size(), source.label, "loading");
    Expected<Case> loaded = load_case(source);
    progress.clear();
    if (!loaded.ok() && loaded.error().code == ErrorCode::Usage) {
      // The generator refused what the command line asked for (heads that
      // do not divide, a length above the limits): a usage error, not a case.
      fmt::print(stderr, "pagecheck: {}\n", with_label(source.label, loaded.error().describe()));
      return exit_code::kUsage;
    }
    if (!loaded.ok()) {
      record.add_case(load_failure(source, i, loaded.error()));
      continue;
    }
    const Case& c = *loaded;
    record.start_case(static_cast<std::int64_t>(i), c.name);
    CaseOutcome outcome = evaluate_case(c, setup.paths, registry, gpu, exec, setup.run_options,
                                        !out.save_failing.empty(), !out.html.empty(), progress, n,
                                        plan.selected.size());
    outcome.report.index = static_cast<std::int64_t>(i);
    progress.clear();
    say_invalid(source, outcome.report);
    // The bundle is written before the case is kept (it holds the case's
    // report) and said after its rows.
    std::optional<Expected<fs::path>> saved;
    if (outcome.failing && !out.save_failing.empty())
      saved = save_bundle(out.save_failing, unique_bundle_name(c.name, bundle_names), c, outcome, setup.paths, exec,
                          invocation, record.header());
    record.add_case(std::move(outcome.report));
    if (saved) record.note_bundle(saved->ok() ? (*saved)->string() : "", saved->ok() ? "" : saved->error().describe());
  }
  progress.clear();
  return record.finish(setup.paths, exec.fail_on_skip);
}

}  // namespace

int run_cases(const std::vector<CaseSource>& sources, const ExecOptions& exec, const OutputOptions& out,
              const Invocation& invocation) {
  // Everything that can be wrong with the options is checked before the
  // first case runs.
  auto setup = prepare_exec(exec);
  if (!setup.ok()) {
    fmt::print(stderr, "pagecheck: {}\n", setup.error().describe());
    return exit_code_for(setup.error().code);
  }
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

  RunReport header;
  header.tool_version = PAGECHECK_VERSION;
  header.command_line = invocation.command_line;
  header.fail_on_skip = exec.fail_on_skip;
  RunPlan plan;
  plan.sources = &sources;
  if (!exec.shard.empty()) {
    auto shard = parse_shard(exec.shard);
    if (!shard.ok()) {
      fmt::print(stderr, "pagecheck: {}\n", shard.error().describe());
      return exit_code::kUsage;
    }
    shard->cases_total = static_cast<std::int64_t>(sources.size());
    header.shard = *shard;
  }
  // --shard I/N: case k of the full list when k mod N == I (pagecheck/shard.hpp).
  for (std::size_t k = 0; k < sources.size(); ++k)
    if (!header.shard || in_shard(static_cast<std::int64_t>(k), *header.shard)) plan.selected.push_back(k);
  plan.wants_gpu = std::any_of(setup->paths.begin(), setup->paths.end(), [](const auto& p) { return p != "reference"; });
  plan.progress_mode = out.quiet ? Progress::Mode::Off
                       : stderr_is_terminal() ? Progress::Mode::Terminal
                                              : Progress::Mode::Periodic;
  plan.progress_interval = std::chrono::duration<double>(*interval);

  if (!exec.isolation_worker.empty()) return run_isolated_worker(plan, *setup, exec, out, invocation);
  RunRecord record(std::move(header), targets, out, plan.selected.size());
  if (use_isolation(exec, plan.wants_gpu))
    return supervise_isolated(plan, *setup, exec, out, invocation, record);
  return run_here(plan, *setup, exec, out, invocation, record);
}

}  // namespace pagecheck::app
