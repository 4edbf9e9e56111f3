// Per-case, per-path results and their renderings: terminal table (fmt),
// JSON, CSV and JUnit XML.
#pragma once

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "pagecheck/metrics.hpp"
#include "pagecheck/path.hpp"
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
  std::string plan;
  std::map<std::string, std::string> notes;
};

struct CaseReport {
  std::string name;
  std::string description;
  std::string geometry;  // one line: "4 seqs, 8/2 heads, d128, bs16, BF16/BF16, NHD, decode"
  std::vector<std::string> warnings;
  std::vector<PathReport> paths;
};

struct RunReport {
  std::string tool_version;
  std::string command_line;
  std::optional<DeviceInfo> device;
  std::vector<CaseReport> cases;
};

// 0 when every path that ran passed, 1 when any failed, 4 when any errored.
int report_exit_code(const RunReport& report);

void print_table(std::FILE* out, const RunReport& report, bool color);
nlohmann::json to_json(const RunReport& report);
Status write_json(const std::string& path, const RunReport& report);
Status write_csv(const std::string& path, const RunReport& report);
Status write_junit(const std::string& path, const RunReport& report);

}  // namespace pagecheck
