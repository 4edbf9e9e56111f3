// Two reports side by side: `pagecheck compare BASE.json NEW.json`, a
// regression gate that tells noise from a slowdown (docs/cli.md "compare").
//
// Cases are paired by name and content hash (a renamed case by its hash, a
// case whose name stays but whose content changed is not paired), paths by
// name. Each pair of paths gets verdicts: its status (now failing, now
// passing), its max error (more error, less error past --max-error-growth) and
// its time (slower, faster: only when the change of the median is larger than
// both runs' measured spread and than --max-slowdown; a single timed run, the
// reference's wall clock, is shown but not judged); `same` when none.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "pagecheck/report.hpp"
#include "pagecheck/status.hpp"

namespace pagecheck {

enum class Verdict : std::uint8_t {
  Same,
  Slower,
  Faster,
  MoreError,
  LessError,
  BitsChanged,    // the output's or LSE's digest differs (within tolerance or not)
  NowFailing,
  NowPassing,
  New,            // a case or path only NEW has (or a path that ran only in NEW)
  Gone,           // a case or path only BASE has (or a path that ran only in BASE)
  Changed,        // a case of the same name whose content hash differs: not paired
  Renamed,        // a case paired by its content hash under another name
  NotComparable,  // timings of runs that differ in device, clocks, version or timing mode
};
// "same", "slower", "faster", "more error", "less error", "bits changed", "now failing",
// "now passing", "new", "gone", "changed", "renamed", "not comparable".
std::string_view verdict_name(Verdict verdict);
// A verdict's name, with '-' for the space ("now-failing") or as printed.
std::optional<Verdict> parse_verdict(std::string_view name);
// Every verdict, in the order above.
const std::vector<Verdict>& all_verdicts();

struct CompareOptions {
  double max_slowdown = 0.05;     // a time change must be past this fraction of BASE's median ...
  double max_error_growth = 1.0;  // a max error must grow past (1 + this) times BASE's
  // The verdicts that make the exit code 1.
  std::set<Verdict> fail_on = {Verdict::Slower, Verdict::MoreError, Verdict::NowFailing};
};

// A max error below this fraction of the path's atol never counts as more or
// less error: the last bits of an error far inside the tolerance.
inline constexpr double kErrorGrowthFloor = 0.01;
// Device ceilings (copy, read, BF16 matrix) measured this far apart say the
// clocks, the power limit or the part differ: timings not comparable.
inline constexpr double kCeilingTolerance = 0.10;

// One side of a path pair.
struct PathSide {
  std::string status;                    // status_name(), "" when the side lacks the path
  std::string reason;
  std::optional<double> max_abs_err;     // against the reference, else against the recorded output
  double atol = 0;                       // the path's tolerance, for error / atol
  std::optional<double> median_ms;       // the headline timing
  std::optional<double> spread_ms;       // q3 - q1 of the timed repeats; absent: not measured
  int repeats = 0;
  std::string output_digest, lse_digest;  // "" where unknown
};

struct PathComparison {
  std::string path;
  PathSide base, now;
  std::optional<double> change;    // (now - base) / base of the median
  std::vector<Verdict> verdicts;   // never empty
  std::string note;                // how the time was judged, or why a path is new or gone
};

struct CaseComparison {
  std::string name;       // NEW's name; BASE's for a gone case
  std::string base_name;  // BASE's name (differs when renamed); empty for a new case
  std::string base_hash, new_hash;
  std::string geometry;
  std::vector<std::string> base_errors, new_errors;  // an invalid case: why
  // Case-level: new, gone, changed, renamed, now failing / now passing (the
  // case became invalid / valid).
  std::vector<Verdict> verdicts;
  std::vector<PathComparison> paths;
};

struct ReportIdentity {
  std::string source;   // the file, as given
  std::string version;  // pagecheck version that wrote it
  std::string command;
  std::string device;   // name, or "" for none
};

struct Comparison {
  ReportIdentity base, now;
  CompareOptions options;
  // What differs between the runs that makes their timings not comparable
  // ("device: NVIDIA H100 vs NVIDIA H200"); empty when they are.
  std::vector<std::string> timing_differences;
  // Said once: cases paired by name alone, spreads unknown, ...
  std::vector<std::string> notes;
  std::vector<CaseComparison> cases;
};

// Pairs and judges. Refused (invalid input, exit 3): a report that did not run
// (run-level errors), a shard against a report that is not the same shard,
// two reports with cases but none in common by name or content.
Expected<Comparison> compare_reports(const RunReport& base, const std::string& base_source, const RunReport& now,
                                     const std::string& now_source, const CompareOptions& options = {});

// Two paths of one report, case by case (--pair A=B): path A as BASE, path B
// as NEW, each pair's rows named "A=B". The least noisy comparison of two
// builds of a kernel: both ran in one process, case after case, on one device.
// A path name that no case has is a usage error naming it.
struct PathPair {
  std::string base_path, new_path;
};
Expected<Comparison> compare_path_pairs(const RunReport& report, const std::string& source,
                                        const std::vector<PathPair>& pairs, const CompareOptions& options = {});
// "A=B" into a pair; a usage error for anything else.
Expected<PathPair> parse_path_pair(const std::string& text);

// Whether a verdict list holds one of options.fail_on.
bool is_regression(const std::vector<Verdict>& verdicts, const CompareOptions& options);
// 0 when no verdict of fail_on occurs, 1 otherwise.
int comparison_exit_code(const Comparison& comparison);

struct ComparisonSummary {
  std::int64_t paths = 0;                     // path rows
  std::vector<std::int64_t> path_verdicts;    // by Verdict, over path rows (a row counts once per verdict)
  std::vector<std::int64_t> case_verdicts;    // by Verdict, over cases
  std::int64_t regressions = 0;               // rows and cases with a fail_on verdict
};
ComparisonSummary summarize(const Comparison& comparison);

// The renderings. The table: a header naming both reports, what differs said
// once, per case a row per path (status, max error, median then and now, the
// change, the verdicts), the summary and the list of regressions.
void print_comparison(std::FILE* out, const Comparison& comparison, bool color);
// Its last part alone (-q): the summary line and the list of regressions.
void print_comparison_summary(std::FILE* out, const Comparison& comparison, bool color);
nlohmann::json comparison_to_json(const Comparison& comparison);
// One testcase per case and path; a failure where a fail_on verdict is.
std::string comparison_to_junit(const Comparison& comparison);
// One self-contained page in the look of the run's page (report_html.hpp):
// the change of each path's time as a bar against the threshold and the
// measured spread, the max error then and now in the error maps' colours.
std::string comparison_to_html(const Comparison& comparison);

}  // namespace pagecheck
