// pagecheck soak (docs/cli.md "soak"): random valid cases
// (pagecheck/soak.hpp) through the selected paths with every check and the
// batch-invariance check, until --minutes or --cases is spent. A failing
// path is reduced (pagecheck/reducer.hpp: cuts, then feature
// simplifications) and saved once per signature
// (path, failure kind, the reduced case's features) with its replay command;
// a failure met again is counted, not saved again.
//
// Memory stays bounded: each case is drawn within SoakLimits and made on
// demand (generate_case_sourced), and the report keeps only the failing
// cases' rows (plus the counts); the signatures seen are the only other
// thing that grows, one string per distinct failure.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "bundles.hpp"
#include "commands.hpp"
#include "evaluate.hpp"
#include "exec_setup.hpp"
#include "gpu_setup.hpp"
#include "progress.hpp"
#include "pagecheck/reducer.hpp"
#include "report_targets.hpp"
#include "table.hpp"
#include "pagecheck/atomic_file.hpp"
#include "pagecheck/external_names.hpp"
#include "pagecheck/limits.hpp"
#include "pagecheck/soak.hpp"
#include "pagecheck/synthetic.hpp"

namespace pagecheck::app {
namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

// The command that runs case `index` of `seed` alone, with the options of
// this soak that change what runs (paths, tolerances, plan, kernels).
std::string soak_case_command(std::uint64_t seed, std::uint64_t index, const ExecOptions& exec,
                              const Invocation& invocation) {
  std::vector<std::string> args = {invocation.executable.empty() ? "pagecheck" : invocation.executable, "soak",
                                   "--seed", std::to_string(seed), "--case", std::to_string(index)};
  if (!exec.paths.empty()) {
    std::string paths;
    for (const auto& p : exec.paths) paths += (paths.empty() ? "" : ",") + p;
    args.insert(args.end(), {"--paths", paths});
  }
  if (exec.atol) args.insert(args.end(), {"--atol", fmt::format("{}", *exec.atol)});
  if (exec.rtol) args.insert(args.end(), {"--rtol", fmt::format("{}", *exec.rtol)});
  if (!exec.plan.empty()) args.insert(args.end(), {"--plan", exec.plan});
  if (!exec.tuning_file.empty()) args.insert(args.end(), {"--tuning", fs::absolute(exec.tuning_file).string()});
  for (const auto& k : exec.kernels) args.insert(args.end(), {"--kernel", absolute_kernel_argument(k)});
  if (exec.device != 0) args.insert(args.end(), {"--device", std::to_string(exec.device)});
  if (exec.no_checks) args.emplace_back("--no-checks");
  std::string command;
  for (const auto& a : args) command += (command.empty() ? "" : " ") + shell_quote(a);
  return command;
}

// A CUDA error that leaves the context unusable: every later launch of the
// process fails, so the soak cannot go on (and a reduction would only find
// that everything fails). Worker isolation would let it go on.
bool context_lost(const std::string& reason) {
  for (const char* sticky : {"illegal memory access", "illegal address", "illegal instruction", "misaligned address",
                             "unspecified launch failure", "device-side assert", "launch timed out",
                             "hardware stack error", "uncorrectable ECC"})
    if (reason.find(sticky) != std::string::npos) return true;
  return false;
}

// The progress line: "soak: 120 cases, 3.9/s, 2 failing (1 distinct), 41 s left".
class SoakProgress {
 public:
  SoakProgress(bool enabled, bool terminal, double interval_s) : enabled_(enabled), terminal_(terminal), interval_(interval_s) {}
  void show(std::int64_t done, double elapsed_s, std::int64_t failing, std::size_t distinct, const std::string& left,
            bool force = false) {
    if (!enabled_) return;
    const auto now = Clock::now();
    if (!terminal_ && !force && std::chrono::duration<double>(now - last_).count() < interval_) return;
    last_ = now;
    const std::string line = fmt::format("soak: {} cases, {:.1f}/s, {} failing ({} distinct){}", done,
                                         elapsed_s > 0 ? static_cast<double>(done) / elapsed_s : 0.0, failing, distinct,
                                         left);
    if (terminal_) {
      fmt::print(stderr, "\r\033[K{}", line);
      shown_ = true;
    } else {
      fmt::print(stderr, "pagecheck: {}\n", line);
    }
    std::fflush(stderr);
  }
  void clear() {
    if (shown_) fmt::print(stderr, "\r\033[K");
    shown_ = false;
  }

 private:
  bool enabled_, terminal_;
  double interval_;
  Clock::time_point last_ = Clock::now();
  bool shown_ = false;
};

}  // namespace

int cmd_soak(const SoakConfig& config, const Invocation& invocation) {
  if (!config.exec.shard.empty() || config.exec.all_devices || config.exec.workers > 0) {
    fmt::print(stderr, "pagecheck: soak runs in one process: --shard, --workers and --device all do not apply "
                       "(run one soak per GPU with its own --seed and --device N)\n");
    return exit_code::kUsage;
  }
  if (!config.out.html.empty()) {
    fmt::print(stderr, "pagecheck: soak has no --html page (it keeps no error maps); use --json\n");
    return exit_code::kUsage;
  }
  auto setup = prepare_exec(config.exec);
  if (!setup.ok()) {
    fmt::print(stderr, "pagecheck: {}\n", setup.error().describe());
    return exit_code_for(setup.error().code);
  }
  const auto interval = progress_interval();
  if (!interval.ok()) {
    fmt::print(stderr, "pagecheck: {}\n", interval.error().describe());
    return exit_code::kUsage;
  }
  const auto targets = report_targets(config.out);
  if (const int code = check_report_targets(targets); code != exit_code::kPass) return code;
  const fs::path save_dir = config.out.save_failing.empty() ? fs::path("soak-failures") : fs::path(config.out.save_failing);
  {
    std::error_code ec;
    if (fs::exists(save_dir, ec) && !fs::is_directory(save_dir, ec)) {
      fmt::print(stderr, "pagecheck: --save-failing: {}: is a file, not a folder\n", save_dir.string());
      return exit_code::kRuntime;
    }
  }

  RunReport report;
  report.tool_version = PAGECHECK_VERSION;
  report.command_line = invocation.command_line;
  report.fail_on_skip = config.exec.fail_on_skip;

  PathRegistry registry;
  GpuSetup gpu;
  const auto& paths = setup->paths;
  const bool wants_gpu = std::any_of(paths.begin(), paths.end(), [](const auto& p) { return p != "reference"; });
  if (wants_gpu || config.exec.require_gpu) {
    auto found = setup_gpu(registry, config.exec.device, false, config.exec.require_gpu);
    if (!found.ok()) {
      fmt::print(stderr, "pagecheck: {}\n", found.error().describe());
      report.errors.push_back(found.error().describe());
      return write_reports(targets, report, std::max(report_exit_code(report), exit_code_for(found.error().code)));
    }
    gpu = std::move(*found);
  }
  for (auto& p : setup->external) registry.add(std::move(p));
  setup->external.clear();
  report.device = gpu.device;

  // Pools past 2^31 elements only where a GPU path runs and the device has
  // room for two such caches in F32 with a margin (reproducibility: a case
  // drawn without huge pools differs from the same case drawn with them
  // only in its pool; the bundle holds the case as it ran).
  SoakLimits limits;
  if (gpu.device && wants_gpu) {
    const auto free_bytes = cuda_free_bytes(config.exec.device);
    const auto cap = device_memory_limit();
    std::uint64_t room = free_bytes.value_or(0);
    if (cap.ok() && *cap) room = std::min(room, **cap);
    limits.huge_pools = room > 3 * static_cast<std::uint64_t>(kHugePoolElements) * 4;
  }

  std::FILE* const table_stream = any_report_on_stdout(targets) ? stderr : stdout;
  Table table(table_stream);
  const bool color = stream_wants_color(table_stream, config.out.no_color);
  const bool only_one = config.only_case >= 0;
  // Neither --minutes nor --cases: one minute. Both: whichever ends first.
  const double minutes = config.minutes > 0 ? config.minutes : (config.cases > 0 || only_one ? 0 : 1.0);
  const std::int64_t case_limit = only_one ? 1 : config.cases;
  const std::uint64_t first = only_one ? static_cast<std::uint64_t>(config.only_case) : config.first_case;
  if (!config.out.quiet) {
    table.print([&](std::FILE* f) {
      if (gpu.device) print_device(f, *gpu.device);
      else if (wants_gpu) fmt::print(f, "GPU paths skipped: {}\n", gpu.unavailable);
      fmt::print(f, "soak: seed {}, {}, from case {}; paths {}; failures saved under {}\n", config.seed,
                 only_one ? std::string("one case") : case_limit > 0 ? fmt::format("{} cases", case_limit)
                                                                     : fmt::format("{:g} minutes", minutes),
                 first, fmt::format("{}", fmt::join(paths, ",")), save_dir.string());
    });
  }

  SoakProgress progress(!config.out.quiet, stderr_is_terminal(), *interval);
  Progress quiet(Progress::Mode::Off, std::chrono::duration<double>(0));
  SignatureSet signatures;
  std::set<std::string> bundle_names;
  std::int64_t done = 0, failing_cases = 0, repeats_of_known = 0;
  int bundle_code = exit_code::kPass;
  std::string lost_context;  // set by a sticky CUDA error: the soak stops
  std::string first_failure;  // "; the first failing case: K after T s"
  const auto start = Clock::now();
  const auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };

  for (std::uint64_t k = first;; ++k) {
    if (case_limit > 0 && done >= case_limit) break;
    if (minutes > 0 && elapsed() >= minutes * 60) break;
    const SoakDraw draw = draw_soak_case(config.seed, k, limits);
    ExecOptions exec = config.exec;
    RunOptions run_options = setup->run_options;
    // A pool past 2^31 elements is uploaded again for every re-batched run:
    // the batch-invariance check skips those cases.
    if (draw.huge_pool) exec.check_batch_invariance = false;
    if (draw.plan && config.exec.plan.empty()) {
      run_options.plan = draw.plan;
      exec.plan = draw.plan->to_string();  // for the replay commands
    }
    auto made = generate_case_sourced(draw.spec);
    CaseOutcome outcome;
    if (!made.ok()) {
      // A draw the generator refuses is a bug of the draw: reported as an
      // invalid case, never silently skipped.
      outcome.report.name = draw.spec.name;
      outcome.report.errors.push_back("the generator refused the drawn spec: " + made.error().describe());
      outcome.failing = true;
    } else {
      outcome = evaluate_case(*made, paths, registry, gpu, exec, run_options, false, false, quiet, 0, 1);
    }
    outcome.report.index = static_cast<std::int64_t>(k);
    outcome.report.description = soak_case_command(config.seed, k, config.exec, invocation);
    ++done;
    const bool invalid = !outcome.report.errors.empty();
    if (outcome.failing || invalid) {
      if (failing_cases == 0) first_failure = fmt::format("; the first failing case: {} after {:.1f} s", k, elapsed());
      ++failing_cases;
      progress.clear();
      if (!config.out.quiet)
        table.print([&](std::FILE* f) {
          print_case(f, outcome.report, report.device, color, gpu.unavailable);
          fmt::print(f, "  case {} of seed {}: {}\n", k, config.seed, outcome.report.description);
        });
    }
    if (outcome.failing && made.ok()) {
      // Each failing path: reduce it on a copy whose caches are held (the
      // reduction cuts pages), then save it once per signature.
      // A lost context first: it was lost for every path's reduction, the
      // paths that ran before the one whose launch lost it included.
      for (const PathReport& row : outcome.report.paths)
        if (row.status == PathStatus::Error && context_lost(row.reason) && lost_context.empty())
          lost_context = row.path + ": " + row.reason;
      std::optional<Case> held;
      for (const PathReport& row : outcome.report.paths) {
        if (row.status != PathStatus::Fail && row.status != PathStatus::Error) continue;
        if (!held) {
          auto generated = generate_case(draw.spec);
          if (!generated.ok()) {
            fmt::print(stderr, "pagecheck: {}: cannot make the case in memory to reduce and save it: {}\n",
                       draw.spec.name, generated.error().describe());
            bundle_code = exit_code::kRuntime;
            break;
          }
          held = std::move(*generated);
        }
        const std::string path = row.path;
        const std::vector<std::string> one_path = {path};
        // The batch-invariance check costs a run per sequence: only where it
        // is the failure being reduced.
        ExecOptions reduce_exec = exec;
        reduce_exec.check_batch_invariance = failure_kind(row) == "batch invariance";
        const auto run_path = [&](const Case& candidate) -> std::optional<PathReport> {
          const CaseReport r =
              evaluate_case(candidate, one_path, registry, gpu, reduce_exec, run_options, false, false, quiet, 0, 1)
                  .report;
          for (const auto& p : r.paths)
            if (p.path == path) return p;
          return std::nullopt;
        };
        std::optional<ReducedFailure> reduced;
        if (!config.no_reduce && lost_context.empty()) reduced = reduce_failure(*held, config.max_tests, run_path);
        if (!reduced) {
          // Not reduced (--no-reduce, a lost CUDA context, or the path passed
          // when run alone: a failure that needs the other paths' runs): the
          // case as drawn.
          reduced = ReducedFailure{*held, failure_kind(row), row, 0, {}};
        }
        const std::string signature = failure_signature(path, reduced->kind, reduced->reduced);
        if (!signatures.insert(signature)) {
          ++repeats_of_known;
          if (!config.out.quiet)
            table.print([&](std::FILE* f) { fmt::print(f, "  {}: {}: seen before (not saved again)\n", path, reduced->kind); });
          continue;
        }
        CaseOutcome reduced_outcome =
            evaluate_case(reduced->reduced, one_path, registry, gpu, exec, run_options, true, false, quiet, 0, 1);
        reduced_outcome.report.description = signature;
        std::string dir_name = safe_dir_name(fmt::format("{}-{}", draw.spec.name, path));
        for (int n = 2; bundle_names.count(dir_name); ++n)
          dir_name = safe_dir_name(fmt::format("{}-{}-{}", draw.spec.name, path, n));
        bundle_names.insert(dir_name);
        Case to_save = reduced->reduced;
        to_save.name = dir_name;
        auto saved = save_bundle(save_dir, dir_name, to_save, reduced_outcome, one_path, exec, invocation, report);
        if (!saved.ok()) {
          fmt::print(stderr, "pagecheck: --save-failing: {}\n", saved.error().describe());
          bundle_code = exit_code::kRuntime;
          continue;
        }
        const std::string soak_text =
            fmt::format("signature: {}\nfailure: {}: {}: {}\nreduced in {} runs of the path\nsimplified: {}\ndrawn as: {}\n",
                        signature, path, reduced->kind, row.reason, reduced->tests,
                        reduced->simplified.empty() ? std::string("nothing") : fmt::format("{}", fmt::join(reduced->simplified, ", ")),
                        soak_case_command(config.seed, k, config.exec, invocation));
        if (const Status written = replace_file_with_text(*saved / "soak.txt", soak_text, "soak.txt"); !written.ok()) {
          fmt::print(stderr, "pagecheck: --save-failing: {}\n", written.error().describe());
          bundle_code = exit_code::kRuntime;
        }
        if (!config.out.quiet)
          table.print([&](std::FILE* f) {
            fmt::print(f, "  {}: {}: new failure, {} saved to {}\n  replay: {}\n", path, reduced->kind,
                       reduced->tests > 0 ? fmt::format("reduced in {} runs,", reduced->tests) : std::string("not reduced,"),
                       saved->string(),
                       replay_command(fs::absolute(*saved / "case.safetensors").lexically_normal().string(), one_path,
                                      exec, invocation));
          });
      }
    }
    if (outcome.failing || invalid) report.cases.push_back(std::move(outcome.report));
    if (!lost_context.empty()) {
      progress.clear();
      fmt::print(stderr,
                 "pagecheck: soak stops after case {}: a CUDA error left the device unusable ({}); the case is "
                 "saved as drawn, replay it alone\n",
                 k, lost_context);
      report.errors.push_back(fmt::format("soak stopped after case {}: {}", k, lost_context));
      break;
    }
    if (config.stop_on_failure && (outcome.failing || invalid)) break;
    const std::string left = case_limit > 0 ? fmt::format(", {} to go", case_limit - done)
                                            : fmt::format(", {:.0f} s left", std::max(0.0, minutes * 60 - elapsed()));
    progress.show(done, elapsed(), failing_cases, signatures.size(), left);
  }
  progress.clear();

  const double seconds = elapsed();
  table.print([&](std::FILE* f) {
    fmt::print(f, "soak: seed {}, {} case{} in {:.1f} s ({:.2f}/s): {} failing, {} distinct failure{} saved under {}{}{}\n",
               config.seed, done, done == 1 ? "" : "s", seconds, seconds > 0 ? static_cast<double>(done) / seconds : 0.0, failing_cases,
               signatures.size(), signatures.size() == 1 ? "" : "s", save_dir.string(),
               repeats_of_known > 0 ? fmt::format(" ({} more met again)", repeats_of_known) : std::string(),
               first_failure);
    if (!config.out.quiet) print_failures(f, report);
  });
  if (config.out.quiet) print_failures(stderr, report);
  if (wants_gpu && !gpu.unavailable.empty())
    fmt::print(stderr, "pagecheck: warning: no GPU path ran ({}): only the reference was checked\n", gpu.unavailable);
  return write_reports(targets, report, std::max(report_exit_code(report), bundle_code));
}

}  // namespace pagecheck::app
