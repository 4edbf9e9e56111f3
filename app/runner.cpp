#include "runner.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <system_error>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "gpu_setup.hpp"
#include "specs.hpp"
#include "pagecheck/case_file.hpp"
#include "pagecheck/limits.hpp"
#include "pagecheck/metrics.hpp"
#include "pagecheck/reference.hpp"
#include "pagecheck/report.hpp"
#include "pagecheck/report_html.hpp"
#include "pagecheck/safetensors.hpp"
#include "pagecheck/shard.hpp"
#include "pagecheck/validate.hpp"

namespace pagecheck::app {
namespace fs = std::filesystem;

bool stderr_is_terminal() { return ::isatty(STDERR_FILENO) == 1; }

bool stream_wants_color(std::FILE* stream, bool no_color) {
  if (no_color || std::getenv("NO_COLOR") != nullptr) return false;
  const char* term = std::getenv("TERM");
  if (term != nullptr && std::string_view(term) == "dumb") return false;
  return ::isatty(::fileno(stream)) == 1;
}

Status check_case_path(const std::string& file) {
  std::error_code ec;
  const fs::file_status st = fs::status(file, ec);
  if (!fs::exists(st)) return invalid_input("no such file", file);
  if (fs::is_directory(st)) return invalid_input("is a directory, not a case file", file);
  return {};
}

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

std::string with_label(const std::string& label, const std::string& message) {
  return message.rfind(label, 0) == 0 ? message : label + ": " + message;
}

std::string shell_quote(const std::string& arg) {
  if (!arg.empty() && arg.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./:=,+-@%") ==
                          std::string::npos)
    return arg;
  std::string out = "'";
  for (char ch : arg) {
    if (ch == '\'') out += "'\\''";
    else out += ch;
  }
  return out + "'";
}

std::vector<std::string> known_path_names() {
  std::vector<std::string> names = {"reference"};
  for (const auto& n : gpu_path_names()) names.push_back(n);
  return names;
}

Expected<std::vector<std::string>> resolve_paths(const std::vector<std::string>& requested,
                                                 const std::vector<std::string>& defaults) {
  const auto known = known_path_names();
  if (requested.empty()) return defaults;
  std::set<std::string> wanted;
  for (const auto& name : requested) {
    if (name == "all") {
      wanted.insert(known.begin(), known.end());
      continue;
    }
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      return usage_error(fmt::format("unknown path '{}'; paths: {}", name, list), "--paths");
    }
    wanted.insert(name);
  }
  std::vector<std::string> out;
  for (const auto& k : known)
    if (wanted.count(k)) out.push_back(k);
  return out;
}

std::string replay_command(const std::string& case_file, const std::vector<std::string>& paths, const ExecOptions& exec,
                           const Invocation& invocation) {
  std::string paths_arg;
  for (const auto& p : paths) paths_arg += (paths_arg.empty() ? "" : ",") + p;
  std::vector<std::string> args;
  // The kernel override and the device-memory cap of the environment
  // (docs/cli.md) are part of how the case ran.
  for (const char* variable : {"PAGECHECK_ATTN_KERNEL", "PAGECHECK_DEVICE_MEMORY_LIMIT"}) {
    const char* value = std::getenv(variable);
    if (value == nullptr || *value == '\0') continue;
    if (args.empty()) args.emplace_back("env");
    args.push_back(std::string(variable) + "=" + value);
  }
  args.insert(args.end(),
              {invocation.executable.empty() ? "pagecheck" : invocation.executable, "replay", case_file, "--paths",
               paths_arg});
  if (exec.atol) args.insert(args.end(), {"--atol", fmt::format("{}", *exec.atol)});
  if (exec.rtol) args.insert(args.end(), {"--rtol", fmt::format("{}", *exec.rtol)});
  if (!exec.plan.empty()) args.insert(args.end(), {"--plan", exec.plan});
  if (!exec.tuning_file.empty())
    args.insert(args.end(), {"--tuning", fs::absolute(exec.tuning_file).lexically_normal().string()});
  // The kernel libraries it ran with, so that its ext:<name> paths resolve.
  for (const auto& kernel : exec.kernels)
    args.insert(args.end(), {"--kernel", fs::absolute(kernel).lexically_normal().string()});
  if (exec.device != 0) args.insert(args.end(), {"--device", std::to_string(exec.device)});
  if (exec.require_gpu) args.emplace_back("--require-gpu");
  if (exec.fail_on_skip) args.emplace_back("--fail-on-skip");
  if (exec.no_checks) args.emplace_back("--no-checks");
  // Timing as it ran, so a timing regression replays the same way.
  if (exec.no_timing) {
    args.emplace_back("--no-timing");
  } else {
    if (exec.hot) args.emplace_back("--hot");
    if (exec.warmup != ExecOptions{}.warmup) args.insert(args.end(), {"--warmup", std::to_string(exec.warmup)});
    if (exec.repeats != ExecOptions{}.repeats) args.insert(args.end(), {"--repeats", std::to_string(exec.repeats)});
  }
  std::string command;
  for (const auto& a : args) command += (command.empty() ? "" : " ") + shell_quote(a);
  return command;
}

namespace {

// Progress on stderr. On a terminal: one line rewritten in place at every
// step. Elsewhere (a CI log): a plain line every interval, from a thread of
// its own, naming the case and step in progress and how long that step has
// taken, so that one long step (a reference over a large batch) shows the
// run is alive too; the first comes after one interval, so short runs print
// none. Interval 0: a line at every step instead.
class Progress {
 public:
  enum class Mode { Off, Terminal, Periodic };
  Progress(Mode mode, std::chrono::duration<double> interval)
      : mode_(mode), interval_(interval), last_(std::chrono::steady_clock::now()) {
    if (mode_ == Mode::Periodic && interval_.count() > 0) {
      try {
        ticker_ = std::thread([this] { tick(); });
      } catch (const std::system_error&) {
        // No thread to be had: lines only at the steps.
      }
    }
  }
  ~Progress() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    if (ticker_.joinable()) ticker_.join();
    clear();
  }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void update(std::size_t index, std::size_t total, const std::string& name, std::string_view step) {
    if (mode_ == Mode::Periodic) {
      std::lock_guard lock(mutex_);
      line_ = fmt::format("pagecheck: case {}/{} ({}) {}", index + 1, total, name, step);
      step_start_ = std::chrono::steady_clock::now();
      if (!ticker_.joinable()) {  // interval 0, or no ticker: at every step that is due
        if (step_start_ - last_ < interval_) return;
        last_ = step_start_;
        fmt::print(stderr, "{}\n", line_);
        std::fflush(stderr);
      }
      return;
    }
    if (mode_ != Mode::Terminal) return;
    std::string text = fmt::format("[{}/{}] {}: {}", index + 1, total, name, step);
    if (text.size() > 100) text.resize(100);
    fmt::print(stderr, "\r\x1b[K{}", text);
    std::fflush(stderr);
    shown_ = true;
  }
  // Between cases and after the last: no step in progress, no line.
  void clear() {
    if (mode_ == Mode::Periodic) {
      std::lock_guard lock(mutex_);
      line_.clear();
    }
    if (!shown_) return;
    fmt::print(stderr, "\r\x1b[K");
    std::fflush(stderr);
    shown_ = false;
  }

 private:
  void tick() {
    std::unique_lock lock(mutex_);
    const auto period = std::chrono::duration_cast<std::chrono::steady_clock::duration>(interval_);
    auto next = std::chrono::steady_clock::now() + period;
    while (!wake_.wait_until(lock, next, [this] { return stop_; })) {
      next += period;
      if (line_.empty()) continue;
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start_).count();
      fmt::print(stderr, "{} ({:.0f} s in this step)\n", line_, seconds);
      std::fflush(stderr);
    }
  }

  Mode mode_ = Mode::Off;
  std::chrono::duration<double> interval_;
  std::chrono::steady_clock::time_point last_{};  // the last line at a step (no ticker)
  bool shown_ = false;
  // Periodic: the step in progress, guarded by mutex_, and the ticker.
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::string line_;
  std::chrono::steady_clock::time_point step_start_{};
  std::thread ticker_;
};

// The seconds between progress lines off a terminal: 10, or
// PAGECHECK_PROGRESS_SECONDS (docs/cli.md "Environment").
Expected<double> progress_interval() {
  const char* text = std::getenv("PAGECHECK_PROGRESS_SECONDS");
  if (text == nullptr || *text == '\0') return 10.0;
  char* end = nullptr;
  const double seconds = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(seconds >= 0) || !std::isfinite(seconds))
    return usage_error(fmt::format("PAGECHECK_PROGRESS_SECONDS='{}' is not a number of seconds >= 0", text));
  return seconds;
}

// The terminal table's stream. When its reader goes away (EPIPE: main
// ignores SIGPIPE) the table stops and the run goes on to write its reports.
class Table {
 public:
  explicit Table(std::FILE* out) : out_(out) {}
  template <typename Print>
  void print(Print&& print) {
    if (gone_) return;
    try {
      print(out_);
      std::fflush(out_);
    } catch (const std::exception&) {
      gone_ = true;  // fmt throws when a write fails
    }
    if (std::ferror(out_)) gone_ = true;
  }

 private:
  std::FILE* out_;
  bool gone_ = false;
};

struct ReportTarget {
  std::string option;  // --json, --csv, --junit
  std::string path;
  Status (*write)(const std::string&, const RunReport&);
};

std::vector<ReportTarget> report_targets(const OutputOptions& out) {
  std::vector<ReportTarget> targets;
  for (ReportTarget t : {ReportTarget{"--json", out.json, write_json}, ReportTarget{"--csv", out.csv, write_csv},
                         ReportTarget{"--junit", out.junit, write_junit}, ReportTarget{"--html", out.html, write_html}})
    if (!t.path.empty()) targets.push_back(std::move(t));
  return targets;
}

// Usage (two reports on stdout) and the paths, before anything runs. Prints
// the error; returns its exit code, 0 when all is well.
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

// Writes every report; returns the exit code raised to 4 when one fails.
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

// One path's result kept for a --save-failing bundle.
struct PathOutput {
  std::string path;
  std::vector<float> output;
  std::vector<float> lse;
};

struct Judging {
  Tolerance output;
  Tolerance lse;
  Tolerance recorded;  // against the case's recorded output
  bool error_maps = false;  // keep where the error lies (ErrorStats::map), for --html
};

Judging tolerances_for(const Case& c, const ExecOptions& exec) {
  Judging j;
  j.output = default_tolerance(c.query.dtype, c.key_cache.dtype);
  j.lse = default_lse_tolerance(c.query.dtype, c.key_cache.dtype);
  j.recorded = j.output;
  if (c.recorded_output) {
    // A recorded output is only as precise as its own dtype.
    const Tolerance rec = default_tolerance(c.recorded_output->dtype, c.recorded_output->dtype);
    j.recorded = {std::max(j.recorded.atol, rec.atol), std::max(j.recorded.rtol, rec.rtol)};
  }
  for (Tolerance* t : {&j.output, &j.lse, &j.recorded}) {
    if (exec.atol) t->atol = *exec.atol;
    if (exec.rtol) t->rtol = *exec.rtol;
  }
  return j;
}

std::vector<double> widen(const Tensor& t) {
  std::vector<double> out(static_cast<std::size_t>(t.numel()));
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = t.at(i);
  return out;
}

std::string location(const ElementLocation& w) {
  return fmt::format("(seq {}, token {}, head {}, dim {})", w.seq, w.token, w.head, w.dim);
}

std::string mismatch_reason(std::string_view what, const ErrorStats& e, Tolerance t, std::string_view against) {
  std::string out = fmt::format("{}: {} of {} elements beyond atol {:g}{} + rtol {:g}·|{}|", what, e.mismatches,
                                e.elements, t.atol,
                                t.row_scale > 0 ? fmt::format(" (scaled down in rows of RMS < {:g})", t.row_scale) : "",
                                t.rtol, against);
  if (e.nonfinite > 0) out += fmt::format(" ({} NaN/Inf)", e.nonfinite);
  if (e.worst.seq >= 0 || e.worst.token >= 0)
    out += fmt::format("; worst at {}: {:g} vs {:g}", location(e.worst), e.worst_value, e.worst_reference);
  return out;
}

// The recorded LSE is judged with the looser of the LSE tolerance and the
// recording's own; the failure message must quote the one used.
Tolerance recorded_lse_tolerance(const Judging& tol) {
  Tolerance t = tol.lse;
  t.atol = std::max(t.atol, tol.recorded.atol);
  t.rtol = std::max(t.rtol, tol.recorded.rtol);
  return t;
}

// Compares the case's recorded output/LSE, when it has them, with `out`.
// The recorded values are what is judged, so they go in as compare()'s
// output and the path's as its reference: compare() leaves elements whose
// reference is NaN unjudged (their inputs were not finite), and a NaN the
// runtime's kernel recorded must be a mismatch, not unjudged.
ErrorStats judge_recorded(const Case& c, const std::vector<double>& recorded, const std::vector<float>& path_values,
                          std::int64_t width, Tolerance tolerance, bool error_map) {
  const std::vector<float> judged(recorded.begin(), recorded.end());
  const std::vector<double> against(path_values.begin(), path_values.end());
  return compare(c, judged, against, width, tolerance, error_map);
}

void compare_recorded(const Case& c, const std::vector<float>& output, const std::vector<float>& lse,
                      const std::vector<double>& recorded_output, const std::vector<double>& recorded_lse,
                      const Judging& tol, PathReport& row) {
  if (c.recorded_output) row.recorded = judge_recorded(c, recorded_output, output, c.v_head_dim(), tol.recorded, tol.error_maps);
  if (c.recorded_lse && !lse.empty())
    row.recorded_lse = judge_recorded(c, recorded_lse, lse, 1, recorded_lse_tolerance(tol), tol.error_maps);
}

struct CaseOutcome {
  CaseReport report;
  std::vector<PathOutput> outputs;  // filled when bundles are wanted
  bool failing = false;
};

CaseOutcome evaluate_case(const Case& c, const std::vector<std::string>& paths, PathRegistry& registry,
                          const GpuSetup& gpu, const ExecOptions& exec, const RunOptions& run_options, bool keep_outputs,
                          bool keep_error_maps, Progress& progress, std::size_t index, std::size_t total) {
  CaseOutcome outcome;
  CaseReport& cr = outcome.report;
  cr.name = c.name;
  cr.description = c.params.description;
  cr.geometry = describe_geometry(c);

  const ValidationReport validation = validate_case(c);
  cr.warnings = validation.warnings;
  if (!validation.ok()) {
    cr.errors = validation.errors;
    return outcome;
  }

  Judging tol = tolerances_for(c, exec);
  tol.error_maps = keep_error_maps;
  const std::int64_t width = c.v_head_dim();
  const std::size_t expected_elements = static_cast<std::size_t>(c.num_tokens() * c.q_heads() * width);
  const std::size_t expected_lse = static_cast<std::size_t>(c.num_tokens() * c.q_heads());

  std::vector<double> recorded_output, recorded_lse;
  if (c.recorded_output) {
    if (static_cast<std::size_t>(c.recorded_output->numel()) == expected_elements) {
      recorded_output = widen(*c.recorded_output);
    } else {
      cr.warnings.push_back(fmt::format("recorded output has shape {} but the case's output has {} elements; "
                                        "not compared",
                                        c.recorded_output->describe(), expected_elements));
    }
  }
  if (c.recorded_lse && static_cast<std::size_t>(c.recorded_lse->numel()) == expected_lse)
    recorded_lse = widen(*c.recorded_lse);
  // A file may record the LSE without the output; it is judged all the same.
  const bool have_recorded = !recorded_output.empty() || !recorded_lse.empty();

  // Which GPU paths will actually run: the reference is needed for them.
  const bool reference_selected = std::find(paths.begin(), paths.end(), "reference") != paths.end();
  bool any_gpu_runs = false;
  for (const auto& name : paths) {
    if (name == "reference" || !gpu.unavailable.empty()) continue;
    if (Path* p = registry.find(name); p != nullptr && p->applies(c).applies) any_gpu_runs = true;
  }
  const bool need_reference = reference_selected || (exec.compare_reference && any_gpu_runs);

  std::optional<ReferenceResult> reference;
  std::string reference_failure;
  if (need_reference) {
    progress.update(index, total, c.name, "reference");
    PathReport row;
    row.path = "reference";
    row.tolerance = tol.recorded;
    const auto start = std::chrono::steady_clock::now();
    Expected<ReferenceResult> ref = runtime_error("not run");
    try {
      ref = reference_attention(c, exec.threads);
    } catch (const std::exception& e) {
      ref = runtime_error(fmt::format("the reference threw: {}", e.what()), "reference");
    }
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (!ref.ok()) {
      reference_failure = ref.error().describe();
      row.status = PathStatus::Error;
      row.reason = reference_failure;
    } else {
      reference = std::move(*ref);
      // Caches made on demand: "total" is the reference's own time, and the
      // note "caches_ms" the time it spent having their pages made.
      StageTiming t;
      t.stage = "total";
      t.median_ms = t.min_ms = t.max_ms = ms - reference->cache_ms;
      t.repeats = 1;
      row.timings.push_back(t);
      if (!c.caches_held()) row.notes["caches_ms"] = fmt::format("{:.3f}", reference->cache_ms);
      std::vector<float> out_f(reference->output.begin(), reference->output.end());
      std::vector<float> lse_f(reference->lse.begin(), reference->lse.end());
      if (have_recorded) {
        // The reference is the judge of the recorded output: when they
        // disagree, the recorded output (or the reference) is wrong.
        compare_recorded(c, out_f, lse_f, recorded_output, recorded_lse, tol, row);
        std::vector<std::string> failures;
        if (row.recorded && row.recorded->mismatches > 0)
          failures.push_back(mismatch_reason("differs from the recorded output", *row.recorded, tol.recorded, "recorded"));
        if (row.recorded_lse && row.recorded_lse->mismatches > 0)
          failures.push_back(mismatch_reason("differs from the recorded LSE", *row.recorded_lse, recorded_lse_tolerance(tol),
                                             "recorded"));
        if (!failures.empty()) {
          row.status = PathStatus::Fail;
          row.reason = failures.front();
          for (std::size_t i = 1; i < failures.size(); ++i) row.check_failures.push_back(failures[i]);
        }
      }
      if (keep_outputs) outcome.outputs.push_back({"reference", std::move(out_f), std::move(lse_f)});
    }
    // The reference row is shown when selected, or when it failed (a failure
    // must never be hidden).
    if (reference_selected || row.status == PathStatus::Error) cr.paths.push_back(std::move(row));
  }

  std::optional<std::uint64_t> device_bytes;  // estimate_memory(c).device_bytes, once a GPU path runs
  for (const auto& name : paths) {
    if (name == "reference") continue;
    PathReport row;
    row.path = name;
    row.tolerance = tol.output;
    Path* path = registry.find(name);
    // Without a device only the external paths are registered; they answer
    // applicability there too (their supports()): n/a rather than skipped.
    if (!gpu.unavailable.empty() && path != nullptr) {
      if (const Applicability a = path->applies(c); !a.applies) {
        row.status = PathStatus::NotApplicable;
        row.reason = a.reason;
        cr.paths.push_back(std::move(row));
        continue;
      }
    }
    if (!gpu.unavailable.empty()) {
      row.status = PathStatus::Skipped;
      row.reason = gpu.unavailable;
      cr.paths.push_back(std::move(row));
      continue;
    }
    if (path == nullptr) {
      row.status = PathStatus::Skipped;
      row.reason = "not built into this binary";
      cr.paths.push_back(std::move(row));
      continue;
    }
    const Applicability applicability = path->applies(c);
    if (!applicability.applies) {
      row.status = PathStatus::NotApplicable;
      row.reason = applicability.reason;
      cr.paths.push_back(std::move(row));
      continue;
    }
    if (exec.compare_reference && !reference) {
      row.status = PathStatus::Skipped;
      row.reason = "not run: the reference failed (" + reference_failure + ")";
      cr.paths.push_back(std::move(row));
      continue;
    }

    // A case that cannot fit on the device is an error that says so, before
    // any allocation (the estimate is what the GPU paths would hold at most).
    // PAGECHECK_DEVICE_MEMORY_LIMIT caps the free figure (main has refused
    // an unparsable value, exit 2).
    if (path->needs_gpu()) {
      if (!device_bytes) device_bytes = estimate_memory(c).device_bytes;
      const auto limit = device_memory_limit();
      if (auto shortfall = device_memory_shortfall(*device_bytes, run_options.device, cuda_free_bytes(run_options.device),
                                                   limit.ok() ? *limit : std::nullopt)) {
        row.status = PathStatus::Error;
        row.reason = std::move(*shortfall);
        cr.paths.push_back(std::move(row));
        continue;
      }
    }
    progress.update(index, total, c.name, name);
    Expected<PathRun> run = runtime_error("not run");
    try {
      run = path->run(c, run_options);
    } catch (const std::exception& e) {
      run = runtime_error(fmt::format("threw: {}", e.what()), name);
    }
    if (!run.ok()) {
      row.status = PathStatus::Error;
      row.reason = run.error().describe();
      cr.paths.push_back(std::move(row));
      continue;
    }
    PathRun& r = *run;
    row.unwritten = r.unwritten;
    row.check_failures = r.check_failures;
    row.timings = r.timings;
    row.plan = r.plan;
    row.notes = r.notes;

    std::vector<std::string> failures;
    if (r.output.size() != expected_elements)
      failures.push_back(fmt::format("returned {} output elements, expected {}", r.output.size(), expected_elements));
    if (!r.lse.empty() && r.lse.size() != expected_lse)
      failures.push_back(fmt::format("returned {} LSE elements, expected {}", r.lse.size(), expected_lse));
    if (reference) {
      row.error = compare(c, r.output, reference->output, width, tol.output, tol.error_maps);
      if (row.error->mismatches > 0) failures.push_back(mismatch_reason("output", *row.error, tol.output, "ref"));
      if (!r.lse.empty()) {
        row.lse_error = compare(c, r.lse, reference->lse, 1, tol.lse, tol.error_maps);
        if (row.lse_error->mismatches > 0) failures.push_back(mismatch_reason("LSE", *row.lse_error, tol.lse, "ref"));
      }
    }
    if (have_recorded) compare_recorded(c, r.output, r.lse, recorded_output, recorded_lse, tol, row);
    if (r.unwritten > 0) failures.push_back(fmt::format("{} output elements left unwritten", r.unwritten));
    if (!failures.empty() || !r.check_failures.empty()) {
      row.status = PathStatus::Fail;
      row.reason = failures.empty() ? r.check_failures.front() : failures.front();
      for (std::size_t i = 1; i < failures.size(); ++i) row.check_failures.insert(row.check_failures.begin(), failures[i]);
    }
    if (keep_outputs) outcome.outputs.push_back({name, std::move(r.output), std::move(r.lse)});
    cr.paths.push_back(std::move(row));
  }

  for (const auto& row : cr.paths)
    if (row.status == PathStatus::Fail || row.status == PathStatus::Error) outcome.failing = true;
  return outcome;
}

std::string safe_dir_name(const std::string& name) {
  std::string out;
  for (char ch : name) {
    const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '-' ||
                    ch == '_' || ch == '.';
    out += ok ? ch : '_';
  }
  if (out.empty() || out == "." || out == "..") out = "case";
  return out;
}

Tensor float_tensor(const std::vector<float>& values, std::vector<std::int64_t> shape) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  if (n != static_cast<std::int64_t>(values.size())) shape = {static_cast<std::int64_t>(values.size())};
  return Tensor::from_vector<float>(DType::F32, std::move(shape), values);
}

// Writes DIR/<case>/: case.safetensors, outputs.safetensors, report.json,
// command.txt and replay.sh.
Expected<fs::path> save_bundle(const fs::path& root, const std::string& dir_name, const Case& c,
                               const CaseOutcome& outcome, const std::vector<std::string>& paths,
                               const ExecOptions& exec, const Invocation& invocation, const RunReport& run) {
  const fs::path dir = root / dir_name;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return runtime_error(fmt::format("cannot create the bundle folder: {}", ec.message()), dir.string());

  // The case as it ran, with its own recorded output if it had one.
  PC_TRY(save_case_file(c, dir / "case.safetensors"));

  std::map<std::string, Tensor> tensors;
  for (const auto& o : outcome.outputs) {
    tensors.emplace(o.path + ".output", float_tensor(o.output, {c.num_tokens(), c.q_heads(), c.v_head_dim()}));
    if (!o.lse.empty()) tensors.emplace(o.path + ".lse", float_tensor(o.lse, {c.num_tokens(), c.q_heads()}));
  }
  if (!tensors.empty())
    PC_TRY(write_safetensors(dir / "outputs.safetensors", tensors,
                             {{"case", c.name}, {"command", invocation.command_line}}));

  RunReport one;
  one.tool_version = run.tool_version;
  one.command_line = run.command_line;
  one.device = run.device;
  one.fail_on_skip = run.fail_on_skip;
  one.cases.push_back(outcome.report);
  PC_TRY(write_json((dir / "report.json").string(), one));

  const std::string command = replay_command(fs::absolute(dir / "case.safetensors").lexically_normal().string(), paths,
                                               exec, invocation);

  {
    std::ofstream f(dir / "command.txt");
    f << command << "\n";
    if (!f) return runtime_error("cannot write command.txt", dir.string());
  }
  {
    std::ofstream f(dir / "replay.sh");
    f << "#!/bin/sh\n# Replays failing case " << c.name << " (written by: " << invocation.command_line << ")\n"
      << "exec " << command << " \"$@\"\n";
    if (!f) return runtime_error("cannot write replay.sh", dir.string());
  }
  fs::permissions(dir / "replay.sh", fs::perms::owner_exec | fs::perms::group_exec | fs::perms::others_exec,
                  fs::perm_options::add, ec);
  return dir;
}

}  // namespace

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

Expected<ExecSetup> prepare_exec(const ExecOptions& exec) {
  ExecSetup setup;
  std::vector<std::string> default_paths = known_path_names();
  if (!exec.compare_reference) default_paths.erase(default_paths.begin());  // bench: GPU paths only
  // External kernel libraries (--kernel): each entry is a path ext:<name>,
  // selected by --paths like a built-in one (and by default and by "all").
  auto external = load_external_paths(exec.kernels);
  if (!external.ok()) return external.error();
  std::vector<std::string> external_names, builtin_requested, external_requested;
  for (const auto& p : *external) external_names.push_back(p->name());
  bool all_external = exec.paths.empty();
  for (const auto& name : exec.paths) {
    if (name == "all") all_external = true;
    if (name.rfind("ext:", 0) != 0) {
      builtin_requested.push_back(name);
      continue;
    }
    if (std::find(external_names.begin(), external_names.end(), name) == external_names.end())
      return usage_error(fmt::format("unknown path '{}'; the --kernel libraries export: {}", name,
                                     external_names.empty() ? std::string("nothing (no --kernel given)")
                                                            : fmt::format("{}", fmt::join(external_names, ", "))),
                         "--paths");
    external_requested.push_back(name);
  }
  auto paths = !exec.paths.empty() && builtin_requested.empty()
                   ? Expected<std::vector<std::string>>(std::vector<std::string>{})
                   : resolve_paths(builtin_requested, default_paths);
  if (!paths.ok()) return paths.error();
  for (const auto& name : external_names)
    if (all_external ||
        std::find(external_requested.begin(), external_requested.end(), name) != external_requested.end())
      paths->push_back(name);
  setup.paths = std::move(*paths);
  setup.external = std::move(*external);
  RunOptions& run_options = setup.run_options;
  run_options.device = exec.device;
  run_options.hot = exec.hot;
  run_options.measure = !exec.no_timing;
  run_options.warmup = exec.warmup;
  run_options.repeats = exec.repeats;
  run_options.checks = !exec.no_checks;
  run_options.tuning_file = exec.tuning_file;
  if (!exec.plan.empty()) {
    auto plan = parse_plan(exec.plan);
    if (!plan.ok()) return usage_error(plan.error().describe());
    run_options.plan = *plan;
  }
  if (!exec.tuning_file.empty()) {
    auto tuning = read_tuning_file(exec.tuning_file);
    if (!tuning.ok())
      return Error{tuning.error().code, with_label(exec.tuning_file, tuning.error().describe()), "--tuning"};
  }
  return setup;
}

CaseReport evaluate_one_case(const Case& c, const ExecSetup& setup, PathRegistry& registry, const GpuSetup& gpu,
                             const ExecOptions& exec) {
  Progress quiet(Progress::Mode::Off, std::chrono::duration<double>(0));
  return evaluate_case(c, setup.paths, registry, gpu, exec, setup.run_options, false, false, quiet, 0, 1).report;
}

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

int check_report_files(const OutputOptions& out) { return check_report_targets(report_targets(out)); }

int write_report_files(const OutputOptions& out, const RunReport& report, int code) {
  return write_reports(report_targets(out), report, code);
}

}  // namespace pagecheck::app
