#include "run_record.hpp"

#include <algorithm>
#include <cstdio>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "interrupts.hpp"

namespace pagecheck::app {

namespace {
// With a report on stdout the table goes to stderr.
std::FILE* table_stream(const std::vector<ReportTarget>& targets) {
  return any_report_on_stdout(targets) ? stderr : stdout;
}
}  // namespace

RunRecord::RunRecord(RunReport report, std::vector<ReportTarget> targets, const OutputOptions& out,
                     std::size_t selected)
    : targets_(std::move(targets)),
      out_(out),
      table_(table_stream(targets_)),
      color_(stream_wants_color(table_stream(targets_), out.no_color)),
      report_(std::move(report)),
      selected_(selected) {}

void RunRecord::set_device(const std::optional<DeviceInfo>& device, const std::string& unavailable, bool wants_gpu) {
  {
    std::lock_guard lock(mutex_);
    report_.device = device;
    gpu_unavailable_ = unavailable;
    wants_gpu_ = wants_gpu;
  }
  if (out_.quiet) return;
  table_.print([&](std::FILE* f) {
    if (device) print_device(f, *device);
    else if (wants_gpu) fmt::print(f, "GPU paths skipped: {}\n", unavailable);
  });
}

void RunRecord::start_case(std::int64_t index, const std::string& name) {
  std::lock_guard lock(mutex_);
  in_flight_index_ = index;
  in_flight_name_ = name;
  in_flight_step_ = "loading";
}

void RunRecord::set_step(std::string_view step) {
  std::lock_guard lock(mutex_);
  in_flight_step_ = std::string(step);
}

void RunRecord::add_case(CaseReport c) {
  // Kept before it is printed: a signal after its row shows must find it.
  {
    std::lock_guard lock(mutex_);
    report_.cases.push_back(std::move(c));
    in_flight_index_ = -1;
    in_flight_name_.clear();
    in_flight_step_.clear();
  }
  // Only this thread changes the cases: the last one stays as it is.
  const CaseReport& kept = report_.cases.back();
  if (!out_.quiet) table_.print([&](std::FILE* f) { print_case(f, kept, report_.device, color_, gpu_unavailable_); });
}

void RunRecord::note_bundle(const std::string& dir, const std::string& error) {
  if (!error.empty()) {
    fmt::print(stderr, "pagecheck: --save-failing: {}\n", error);
    std::lock_guard lock(mutex_);
    bundle_code_ = exit_code::kRuntime;
    return;
  }
  if (!out_.quiet) table_.print([&](std::FILE* f) { fmt::print(f, "  saved failing case to {}\n", dir); });
}

void RunRecord::add_error(const std::string& error) {
  fmt::print(stderr, "pagecheck: {}\n", error);
  std::lock_guard lock(mutex_);
  report_.errors.push_back(error);
}

RunReport RunRecord::header() {
  std::lock_guard lock(mutex_);
  RunReport h = report_;
  h.cases.clear();
  return h;
}

int RunRecord::not_run(const Error& error) {
  fmt::print(stderr, "pagecheck: {}\n", error.describe());
  std::lock_guard lock(mutex_);
  finishing_ = true;
  report_.errors.push_back(error.describe());
  return write_reports(targets_, report_, std::max(report_exit_code(report_), exit_code_for(error.code)));
}

int RunRecord::finish(const std::vector<std::string>& paths, bool fail_on_skip) {
  {
    std::lock_guard lock(mutex_);
    finishing_ = true;
  }
  const RunReport& report = report_;  // no one else changes it from here
  // The summary, then what failed (under -q on stderr: stdout holds only the
  // summary line), so that a CI log shows it without scrolling.
  table_.print([&](std::FILE* f) {
    print_summary(f, report);
    if (!out_.quiet) print_failures(f, report);
  });
  if (out_.quiet) print_failures(stderr, report);

  // A run where no GPU path ran checked far less than it seems to.
  const bool any_case_ran = std::any_of(report.cases.begin(), report.cases.end(),
                                        [](const CaseReport& c) { return !c.paths.empty(); });
  if (wants_gpu_ && any_case_ran) {
    bool gpu_ran = false;
    for (const auto& c : report.cases)
      for (const auto& p : c.paths)
        if (p.path != "reference" && (p.status == PathStatus::Pass || p.status == PathStatus::Fail ||
                                      p.status == PathStatus::Error))
          gpu_ran = true;
    const bool reference_selected = std::find(paths.begin(), paths.end(), "reference") != paths.end();
    if (!gpu_ran)
      fmt::print(stderr, "pagecheck: warning: no GPU path ran ({}): {}{}\n",
                 gpu_unavailable_.empty() ? "every selected GPU path was skipped or n/a" : gpu_unavailable_,
                 reference_selected ? "only the reference was checked" : "nothing was checked",
                 fail_on_skip ? "" : "; --require-gpu or --fail-on-skip make this a failure");
  }
  return write_reports(targets_, report, std::max(report_exit_code(report), bundle_code_));
}

std::optional<int> RunRecord::on_signal(int signo) {
  std::lock_guard lock(mutex_);
  if (finishing_) return std::nullopt;
  RunReport report = report_;
  Interruption i;
  i.signal = signal_label(signo);
  i.case_index = in_flight_index_;
  i.case_name = in_flight_name_;
  i.step = in_flight_step_;
  i.cases_finished = static_cast<std::int64_t>(report.cases.size());
  i.cases_selected = static_cast<std::int64_t>(selected_);
  report.interrupted = i;
  const std::string what = describe_interruption(i);
  report.errors.push_back(what);
  // A progress line may be half drawn on a terminal.
  fmt::print(stderr, "\npagecheck: {}; writing the reports of the finished cases (a second signal ends at once)\n",
             what);
  write_reports(targets_, report, 0);
  return interrupted_exit_code(signo);
}

}  // namespace pagecheck::app
