// --device all and --workers N: this binary once per worker, each on its
// shard, their JSON reports merged (docs/cli.md "Sharding").
#include "workers.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "child_process.hpp"
#include "gpu_setup.hpp"
#include "interrupts.hpp"
#include "report_targets.hpp"
#include "pagecheck/report_read.hpp"
#include "pagecheck/shard.hpp"

namespace pagecheck::app {
namespace fs = std::filesystem;

bool wants_workers(const ExecOptions& exec) { return exec.all_devices || exec.workers > 0; }

namespace {

// The user's arguments for a worker: all but what the parent does itself
// (the reports, the device choice, --workers, quiet, colors, the reference's
// threads: each worker is given its own).
std::vector<std::string> forwarded_args(const std::vector<std::string>& args) {
  return args_without(args, {"--device", "--workers", "--json", "--csv", "--junit", "--threads"},
                      {"-q", "--quiet", "--no-color"});
}

// CUDA_VISIBLE_DEVICES as the user set it ("2,3"), else 0..count-1: the GPU
// each worker is given.
std::vector<std::string> worker_gpus(int count) {
  std::vector<std::string> gpus;
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES"); visible != nullptr && *visible != '\0') {
    std::stringstream list(visible);
    for (std::string entry; std::getline(list, entry, ',');)
      if (!entry.empty()) gpus.push_back(entry);
  }
  if (static_cast<int>(gpus.size()) < count) {
    gpus.clear();
    for (int i = 0; i < count; ++i) gpus.push_back(std::to_string(i));
  }
  gpus.resize(static_cast<std::size_t>(count));
  return gpus;
}

struct Worker {
  int shard = 0;
  std::string gpu;  // empty: --workers without GPUs assigned
  fs::path report, out_log, err_log;
  pid_t pid = -1;
  int exit_code = 0;
  std::string failure;  // why it did not finish normally
};

std::string describe(const Worker& w, int count) {
  return w.gpu.empty() ? fmt::format("worker {} (shard {}/{})", w.shard, w.shard, count)
                       : fmt::format("worker {} (shard {}/{}, GPU {})", w.shard, w.shard, count, w.gpu);
}

Status spawn(Worker& w, std::vector<std::string> argv, std::vector<std::string> env) {
  auto pid = spawn_self(std::move(argv), std::move(env), w.out_log, w.err_log);
  if (!pid.ok()) return pid.error();
  w.pid = *pid;
  return {};
}

void wait_for(Worker& w) {
  const ChildExit e = wait_child(w.pid);
  w.exit_code = e.code;
  w.failure = e.failure;
}

std::vector<std::string> read_lines(const fs::path& file) {
  std::vector<std::string> lines;
  std::ifstream f(file);
  for (std::string line; std::getline(f, line);) lines.push_back(line);
  return lines;
}

}  // namespace

int run_workers(const ExecOptions& exec, const OutputOptions& out, const Invocation& invocation) {
  if (!exec.shard.empty()) {
    fmt::print(stderr, "pagecheck: --shard does not combine with {}: shard across hosts with --shard I/N and "
                       "--device N on each, or run every case here with {} (docs/cli.md \"Sharding\")\n",
               exec.all_devices ? "--device all" : "--workers", exec.all_devices ? "--device all" : "--workers");
    return exit_code::kUsage;
  }
  if (exec.all_devices && exec.workers > 0) {
    fmt::print(stderr, "pagecheck: --workers and --device all: give one (--device all runs one worker per GPU)\n");
    return exit_code::kUsage;
  }
  if (!out.html.empty()) {
    // The page needs each comparison's error map, which the workers' JSON
    // reports do not carry: a merged page would show no heat maps.
    fmt::print(stderr, "pagecheck: --html does not combine with {}: the page is drawn from one process's "
                       "comparisons; run without it, or give each --shard its own --html\n",
               exec.all_devices ? "--device all" : "--workers");
    return exit_code::kUsage;
  }
  if (invocation.args.empty() || invocation.executable.empty()) {
    fmt::print(stderr, "pagecheck: internal error: the command line is not known, so workers cannot be started\n");
    return exit_code::kRuntime;
  }
  if (const int code = check_report_files(out); code != exit_code::kPass) return code;

  int count = exec.workers;
  std::vector<std::string> gpus;
  if (exec.all_devices) {
    count = cuda_device_count();
    if (count == 0)
      return report_not_run(out, invocation,
                            built_with_cuda()
                                ? "--device all: no CUDA device found, so there is nothing to run the workers on; "
                                  "leave --device all out to check the reference on the CPU, or use --workers N"
                                : "--device all: this pagecheck was built without CUDA, so it finds no GPU; leave "
                                  "--device all out to check the reference on the CPU, or use --workers N");
    gpus = worker_gpus(count);
  }

  const auto folder = make_child_folder("pagecheck-workers", "the workers' reports");
  if (!folder.ok()) {
    fmt::print(stderr, "pagecheck: {}\n", folder.error().describe());
    return exit_code::kRuntime;
  }
  const fs::path dir = *folder;
  std::error_code ec;

  // Each worker's reference gets its share of the cores unless --threads says.
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const int threads = exec.threads > 0 ? exec.threads : static_cast<int>(std::max(1u, cores / static_cast<unsigned>(count)));
  const std::vector<std::string> user_args = forwarded_args(invocation.args);

  if (!out.quiet)
    fmt::print(stderr, "pagecheck: {} worker{} ({}), reports in {}\n", count, count == 1 ? "" : "s",
               exec.all_devices ? fmt::format("one per GPU: {}", fmt::join(gpus, ", "))
                                : fmt::format("{} reference thread{} each", threads, threads == 1 ? "" : "s"),
               dir.string());
  std::vector<Worker> workers(static_cast<std::size_t>(count));
  // SIGTERM: each worker gets it, writes its report of the cases it finished
  // (marked interrupted) and exits 143; those reports are merged as usual.
  // SIGINT (Ctrl-C) reaches the workers from the terminal already.
  std::mutex started_mutex;
  std::vector<pid_t> started;
  bool forwarded = false;  // each worker gets SIGTERM once: a second would end it at once
  InterruptScope on_signal([&](int signo) -> std::optional<int> {
    if (signo == SIGTERM) {
      std::lock_guard lock(started_mutex);
      forwarded = true;
      for (const pid_t pid : started) ::kill(pid, SIGTERM);
    }
    return std::nullopt;
  });
  int code = exit_code::kPass;
  for (int i = 0; i < count; ++i) {
    Worker& w = workers[static_cast<std::size_t>(i)];
    w.shard = i;
    w.report = dir / fmt::format("shard-{}.json", i);
    w.out_log = dir / fmt::format("worker-{}.out", i);
    w.err_log = dir / fmt::format("worker-{}.err", i);
    std::vector<std::string> argv = {invocation.executable};
    argv.insert(argv.end(), user_args.begin(), user_args.end());
    argv.insert(argv.end(), {"--shard", fmt::format("{}/{}", i, count), "--json", w.report.string(), "--no-color"});
    argv.insert(argv.end(), {"--threads", std::to_string(threads)});
    // Progress lines would only fill the logs: the parent reports.
    std::vector<std::string> overrides = {"PAGECHECK_PROGRESS_SECONDS=1000000000"};
    if (exec.all_devices) {
      w.gpu = gpus[static_cast<std::size_t>(i)];
      argv.insert(argv.end(), {"--device", "0"});
      overrides.push_back("CUDA_VISIBLE_DEVICES=" + w.gpu);
    } else {
      argv.insert(argv.end(), {"--device", std::to_string(exec.device)});
    }
    const Status spawned = spawn(w, argv, child_environment(overrides));
    if (!spawned.ok()) {
      w.pid = -1;
      w.exit_code = exit_code::kRuntime;
      w.failure = spawned.error().describe();
      continue;
    }
    std::lock_guard lock(started_mutex);
    started.push_back(w.pid);
    if (forwarded) ::kill(w.pid, SIGTERM);
  }
  for (auto& w : workers)
    if (w.pid > 0) wait_for(w);

  // What the workers said on stderr, each distinct line once (N workers
  // without a GPU all warn the same).
  std::vector<std::string> said;
  for (const auto& w : workers)
    for (const auto& line : read_lines(w.err_log))
      if (std::find(said.begin(), said.end(), line) == said.end()) said.push_back(line);
  for (const auto& line : said) fmt::print(stderr, "{}\n", line);

  std::vector<MergeInput> inputs;
  std::vector<std::string> lost;  // workers without a report
  bool keep_dir = false;
  for (const auto& w : workers) {
    code = std::max(code, w.exit_code);
    std::error_code exists_ec;
    if (!fs::exists(w.report, exists_ec)) {
      // A usage error is the command's, the same for every worker: exit 2, said above.
      if (w.exit_code == exit_code::kUsage && w.failure.empty()) {
        fs::remove_all(dir, ec);
        return exit_code::kUsage;
      }
      lost.push_back(fmt::format("{} {} without a report{}", describe(w, count),
                                 w.failure.empty() ? fmt::format("exited {}", w.exit_code) : w.failure,
                                 fmt::format(" (its output: {})", w.err_log.string())));
      keep_dir = true;
      continue;
    }
    auto report = read_json_report(w.report.string());
    if (!report.ok()) {
      lost.push_back(fmt::format("{}: {}", describe(w, count), report.error().describe()));
      keep_dir = true;
      continue;
    }
    inputs.push_back({describe(w, count), std::move(*report)});
  }

  MergeOptions options;
  options.allow_missing_shards = true;  // a lost worker is a run error below, not a merge error
  options.command = invocation.command_line;
  RunReport merged;
  std::vector<std::string> warnings;
  if (!inputs.empty()) {
    auto outcome = merge_reports(inputs, options);
    if (!outcome.ok()) {
      fmt::print(stderr, "pagecheck: merging the workers' reports: {}\n", outcome.error().describe());
      return exit_code::kRuntime;
    }
    merged = std::move(outcome->report);
    // Missing shards are the lost workers, said below with their reason.
    for (auto& w : outcome->warnings)
      if (w.find(" given; missing ") == std::string::npos) warnings.push_back(std::move(w));
  } else {
    merged.tool_version = PAGECHECK_VERSION;
    merged.command_line = invocation.command_line;
  }
  for (const auto& l : lost) {
    fmt::print(stderr, "pagecheck: {}\n", l);
    merged.errors.push_back(l);
  }
  if (!keep_dir) fs::remove_all(dir, ec);
  return emit_merged(merged, warnings, out, code);
}

}  // namespace pagecheck::app
