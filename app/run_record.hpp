// A run's report as it grows: each finished case printed and kept, what is
// in flight, the end (summary, reports). Shared by the run loop in this
// process (runner.cpp) and the supervisor of an isolated worker
// (isolation.cpp), and read by the interrupt handler, which writes the
// reports of the finished cases when a signal stops the run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "config.hpp"
#include "report_targets.hpp"
#include "table.hpp"
#include "pagecheck/report.hpp"

namespace pagecheck::app {

class RunRecord {
 public:
  // `report`: the run's report before its first case (tool, command, shard,
  // fail_on_skip); `selected`: how many cases this run is to run.
  RunRecord(RunReport report, std::vector<ReportTarget> targets, const OutputOptions& out, std::size_t selected);

  // The device the GPU paths run on, or why they are skipped; printed once.
  void set_device(const std::optional<DeviceInfo>& device, const std::string& unavailable, bool wants_gpu);
  const std::string& gpu_unavailable() const { return gpu_unavailable_; }

  // What is in flight, for an interrupted report.
  void start_case(std::int64_t index, const std::string& name);
  void set_step(std::string_view step);

  // A finished case: its rows printed, the case kept. No case is in flight
  // after it.
  void add_case(CaseReport c);
  // A --save-failing bundle was written (or could not be: raises the exit code).
  void note_bundle(const std::string& dir, const std::string& error);
  // A run-level error (a worker that could not start), said on stderr.
  void add_error(const std::string& error);

  // The report without its cases (tool, command, device), for a bundle.
  RunReport header();

  // The run cannot run at all (GPU setup failed): says why, writes the
  // reports with the reason; the exit code (at least `error`'s).
  int not_run(const Error& error);

  // The end: summary and failures printed, the "no GPU path ran" warning
  // (`paths`, `fail_on_skip`), the reports written; the exit code.
  int finish(const std::vector<std::string>& paths, bool fail_on_skip);

  // For InterruptScope: the reports of the finished cases, marked
  // interrupted with the case in flight; the exit code 128 + signo. nullopt
  // once finish() has begun (it writes the reports itself).
  std::optional<int> on_signal(int signo);

 private:
  std::mutex mutex_;  // guards the fields below the table
  std::vector<ReportTarget> targets_;
  const OutputOptions& out_;
  Table table_;
  bool color_ = false;
  std::string gpu_unavailable_;
  bool wants_gpu_ = false;
  RunReport report_;
  std::size_t selected_ = 0;
  std::int64_t in_flight_index_ = -1;
  std::string in_flight_name_, in_flight_step_;
  int bundle_code_ = 0;
  bool finishing_ = false;
};

}  // namespace pagecheck::app
