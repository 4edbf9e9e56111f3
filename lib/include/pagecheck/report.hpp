// Per-case, per-path results and their renderings: terminal table (fmt),
// JSON, CSV and JUnit XML.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "pagecheck/metrics.hpp"
#include "pagecheck/path.hpp"
#include "pagecheck/shard.hpp"
#include "pagecheck/status.hpp"

namespace pagecheck {

enum class PathStatus : std::uint8_t {
  Pass,
  Fail,
  Skipped,        // e.g. no CUDA device (reason says so)
  NotApplicable,  // the path does not support this geometry (reason says why)
  Error,          // the path failed to run (runtime failure, exit 4)
};
std::string_view status_name(PathStatus status);  // "pass", "fail", "skipped", "n/a", "error"

struct PathReport {
  std::string path;
  PathStatus status = PathStatus::Pass;
  std::string reason;  // for skipped / n/a / error, and the first failure for fail
  Tolerance tolerance;
  std::optional<ErrorStats> error;      // output vs reference (absent for the reference itself)
  std::optional<ErrorStats> lse_error;  // LSE vs reference LSE
  std::optional<ErrorStats> recorded;   // output vs the case's recorded output
  std::optional<ErrorStats> recorded_lse;
  std::int64_t unwritten = 0;
  std::vector<std::string> check_failures;
  std::vector<StageTiming> timings;
  // values_digest (content_hash.hpp) of the output and the LSE this path
  // returned; empty where it returned none or the report predates them.
  std::string output_digest, lse_digest;
  std::string plan;
  std::map<std::string, std::string> notes;
};

struct CaseReport {
  // Position in the invocation's full list of cases (the declared order; with
  // --shard, over every shard), so that `merge` restores a single run's order
  // and can tell a missing case. -1: its position in `cases`.
  std::int64_t index = -1;
  std::string name;
  std::string description;
  std::string geometry;  // one line: "4 seqs, 8/2 heads, d128, bs16, BF16/BF16, NHD, decode"
  // case_content_hash (content_hash.hpp): 16 hex digits; empty where unknown
  // (a case that did not load, a report written before it was recorded).
  std::string content_hash;
  std::vector<std::string> warnings;
  std::vector<std::string> errors;  // validation / load errors: the case did not run (exit 3)
  std::vector<PathReport> paths;
};

// A run that a signal (SIGINT, SIGTERM) stopped: what was in flight. The
// report then holds the cases that finished before it; the rest did not run.
struct Interruption {
  std::string signal;           // "SIGINT", "SIGTERM"
  std::int64_t case_index = -1;  // the case in flight (its index), -1 between cases
  std::string case_name;
  std::string step;             // what it was doing: "loading", "reference", a path's name
  std::int64_t cases_finished = 0;
  std::int64_t cases_selected = 0;  // what this run (or shard) was to run
};

// "interrupted by SIGTERM during case X (reference): 3 of 10 cases finished,
// 7 not run": the run-level error an interrupted report carries.
std::string describe_interruption(const Interruption& i);

struct RunReport {
  std::string tool_version;
  std::string command_line;
  std::optional<DeviceInfo> device;
  std::vector<CaseReport> cases;
  // Why the run could not run at all (bench or tune without a GPU,
  // --require-gpu): written into every report, exit 4.
  std::vector<std::string> errors;
  // --fail-on-skip: a skipped or n/a path fails the run (exit 1).
  bool fail_on_skip = false;
  // --shard I/N: which share of the cases this report holds (pagecheck/shard.hpp).
  std::optional<ShardInfo> shard;
  // Set when a signal stopped the run (its description is in `errors` too,
  // so that every report format says so).
  std::optional<Interruption> interrupted;
};

// The version of the JSON report's layout ("schema"); `merge` reads this one
// only. Raise it when a field changes meaning or goes away.
inline constexpr int kReportSchema = 1;

// 0 when every path that ran passed, 1 when any failed, 3 when a case was
// invalid, 4 when any errored or the run has errors; the most severe wins.
// Skipped and n/a never fail, unless fail_on_skip.
int report_exit_code(const RunReport& report);

// Whether this path row counts against the run: fail and error always,
// skipped and n/a under fail_on_skip.
bool path_fails_run(const PathReport& path, bool fail_on_skip);

struct RunSummary {
  std::int64_t cases = 0, invalid_cases = 0, paths = 0;
  std::int64_t pass = 0, fail = 0, skipped = 0, not_applicable = 0, error = 0;
};
RunSummary summarize(const RunReport& report);

// The timing the table shows for a path: stage "total", else the first.
const StageTiming* headline_timing(const PathReport& path);
double gb_per_s(const StageTiming& timing);     // 0 when no byte model
double tflop_per_s(const StageTiming& timing);  // 0 when no FLOP model
std::string xml_escape(std::string_view text);
std::string to_csv(const RunReport& report);
std::string to_junit(const RunReport& report);

// The whole report: device line, every case, summary line, failures.
void print_table(std::FILE* out, const RunReport& report, bool color);
// Pieces of the table, for printing case by case as a run goes.
void print_device(std::FILE* out, const DeviceInfo& device);
// Skipped paths that ran nothing share one line ("skipped    direct, split
// (no CUDA device)"); their reason is left out when it is `said_once` (the run
// printed it at the top).
void print_case(std::FILE* out, const CaseReport& c, const std::optional<DeviceInfo>& device, bool color,
                std::string_view said_once = {});
void print_summary(std::FILE* out, const RunReport& report);
// The end-of-run list of what failed, one line per case and reason
// ("case: direct, split: fail: ..."), invalid cases and run errors included;
// nothing when nothing failed. For CI logs: what failed without scrolling.
void print_failures(std::FILE* out, const RunReport& report);
nlohmann::json to_json(const RunReport& report);
// The writers take "-" for stdout.
Status write_json(const std::string& path, const RunReport& report);
Status write_csv(const std::string& path, const RunReport& report);
Status write_junit(const std::string& path, const RunReport& report);
// Writes `text` to `path` ("-": stdout); the error names the report (`what`:
// "JSON", "HTML", ...) and the path. For writers in other files (report_html).
Status write_report_text(const std::string& path, const std::string& text, std::string_view what);

}  // namespace pagecheck
