// Reading JSON reports back (those `run`, `replay` and `bench` write with
// --json) and merging them: `pagecheck merge` and `--device all` join the
// reports of shards, or of separate runs, into the report one run would have
// written (docs/cli.md "merge").
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "pagecheck/report.hpp"
#include "pagecheck/status.hpp"

namespace pagecheck {

// A RunReport from its JSON (to_json's layout, schema kReportSchema).
// `source` names the file in errors. Invalid input (exit 3) for anything that
// is not a pagecheck report, another schema version, or a field of the wrong
// type ("a.json: cases[2].paths[0].status: 'meh' is not a status").
// What JSON does not keep comes back as: a null error statistic as +inf (the
// metrics make them inf when a path wrote NaN/Inf; `nonfinite` counts those),
// a null worst value as NaN, `unjudged` and the tolerance's row_scale as 0.
Expected<RunReport> report_from_json(const nlohmann::json& j, const std::string& source);

// Reads and parses a report file: no such file, not JSON, not a report:
// invalid input naming the file.
Expected<RunReport> read_json_report(const std::string& path);

struct MergeInput {
  std::string source;  // the file, for messages
  RunReport report;
};

struct MergeOptions {
  // Shards missing from a sharded set are a warning instead of an error.
  bool allow_missing_shards = false;
  // The merged report's command; empty: the inputs' command without --shard
  // when they agree, else `fallback_command`.
  std::string command;
  std::string fallback_command;
};

struct MergeOutcome {
  RunReport report;
  std::vector<std::string> warnings;
};

// Joins reports into one.
// - Shards (every report has "shard"): one sharding (same N, same case
//   count), each shard at most once, the cases ordered by their index as one
//   run would have; a missing shard is an error ("shards 0, 2 of 4 given;
//   missing 1, 3") unless allow_missing_shards; a case missing from a given
//   shard, or one that is not in its shard, is an error.
// - Unsharded reports: the cases in the order given; a case name in two
//   reports is an error (the same report twice, or overlapping runs).
// - Sharded and unsharded together: an error.
// Warnings: different commands once --shard, the report paths, --device and
// -q are left out (tolerances, paths or timing may differ), different
// devices (the first is kept, and ceiling percentages are against it),
// different versions, different --fail-on-skip (kept if any had it).
// Run-level errors are kept, each distinct one once.
Expected<MergeOutcome> merge_reports(const std::vector<MergeInput>& inputs, const MergeOptions& options = {});

// A command line as the reports store it (words shell-quoted by pagecheck),
// split back into its words.
std::vector<std::string> split_command_line(const std::string& command);

}  // namespace pagecheck
